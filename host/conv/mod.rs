//! Convolution algorithms, one module each: [`direct`] and [`fft`] (convkit's kernels) and
//! [`cudnn`] (cuDNN, through its legacy and its graph API).

pub mod cudnn;
pub mod direct;
pub mod fft;

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
