//! Convolution algorithms, one module each: [`direct`], [`fft`] (fused, depthwise) and
//! [`fft_gemm`] (overlap-save tiles and a per-frequency cgemm, any groups), convkit's kernels;
//! [`cudnn`] (cuDNN, through its legacy and its graph API).

pub mod cudnn;
pub mod direct;
pub mod fft;
pub mod fft_gemm;

use crate::{ConvGeometry, Error, Gpu, Result};
use cudarc::driver::DeviceSlice;

/// Fails unless x, w and y belong to `gpu` and hold exactly the shape's elements.
pub(crate) fn check_buffers(
    gpu: &Gpu,
    geom: &ConvGeometry,
    x: &impl DeviceSlice<f32>,
    w: &impl DeviceSlice<f32>,
    y: &impl DeviceSlice<f32>,
) -> Result<()> {
    for (buffer, expected, got) in [("x", geom.x_len, x.len()), ("w", geom.w_len, w.len()), ("y", geom.y_len, y.len())]
    {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    gpu.check_buffer("x", x)?;
    gpu.check_buffer("w", w)?;
    gpu.check_buffer("y", y)
}

/// Fails unless x and y belong to `gpu` and hold exactly the shape's elements (algorithms whose
/// filters live in a plan).
pub(crate) fn check_io(
    gpu: &Gpu,
    geom: &ConvGeometry,
    x: &impl DeviceSlice<f32>,
    y: &impl DeviceSlice<f32>,
) -> Result<()> {
    for (buffer, expected, got) in [("x", geom.x_len, x.len()), ("y", geom.y_len, y.len())] {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    gpu.check_buffer("x", x)?;
    gpu.check_buffer("y", y)
}
