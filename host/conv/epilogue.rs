//! The fused epilogue (`kernels-gpu/src/conv/epilogue.rs`): what a convolution applies to its
//! outputs before storing them, described by [`Epilogue`] and given its buffers at run time
//! by [`EpilogueArgs`]. The direct, depthwise and tensor-core kernels fuse it into their
//! stores; [`apply_pass`] runs it as a pass of its own after the others.

use crate::{Conv2d, ConvGeometry, Error, Gpu, Result};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
pub use kernels_gpu::conv::epilogue::Activation;
use kernels_gpu::conv::epilogue::{EPILOGUE_KERNEL, EpilogueParams, EpiloguePassParams};
use std::{fmt, str::FromStr};

/// `y = act(conv(x, w) + bias[k]) + residual`, output channel `k` of group `g` stored in the
/// groups' order (`g · K/G + k`) or, with `shuffle`, at `k · G + g` (ShuffleNet's channel
/// shuffle, fused). Text form: `none`, or a comma-separated list of `bias`, an activation
/// (`relu`, `relu6`, `silu`, `gelu-tanh`), `residual` and `shuffle`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Epilogue {
    /// A per-output-channel bias, `K` floats in the groups' order.
    pub bias: bool,
    pub activation: Activation,
    /// A tensor of the output's shape and layout (shuffled, where the output is) added last.
    pub residual: bool,
    pub shuffle: bool,
}

impl Epilogue {
    /// Nothing: the convolution's outputs as they are.
    pub const NONE: Epilogue =
        Epilogue { bias: false, activation: Activation::Identity, residual: false, shuffle: false };

    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// The kernels' parameters for `conv` (addresses 0: filled in at launch).
    pub fn params(&self, conv: &Conv2d, geom: &ConvGeometry) -> EpilogueParams {
        // `Conv2d::geometry` bounds K and G to 32 bits.
        let mut p = EpilogueParams::plain(geom.k_per_group as u32).with_activation(self.activation);
        if self.shuffle {
            (p.group_step, p.channel_step) = (1, conv.groups as u32);
        }
        p
    }

    /// Where output channel `k` (in the groups' order) is stored, as the kernels compute it.
    pub fn out_channel(&self, conv: &Conv2d, geom: &ConvGeometry, k: usize) -> usize {
        self.params(conv, geom).out_channel(k as u32) as usize
    }
}

impl fmt::Display for Epilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let act = (self.activation != Activation::Identity).then(|| self.activation.name());
        let parts: Vec<&str> = [self.bias.then_some("bias"), act, self.residual.then_some("residual")]
            .into_iter()
            .chain([self.shuffle.then_some("shuffle")])
            .flatten()
            .collect();
        if parts.is_empty() { f.write_str("none") } else { f.write_str(&parts.join(",")) }
    }
}

impl FromStr for Epilogue {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let mut e = Epilogue::NONE;
        if text.trim() == "none" {
            return Ok(e);
        }
        for part in text.split(',').map(str::trim) {
            match part {
                "bias" => e.bias = true,
                "residual" => e.residual = true,
                "shuffle" => e.shuffle = true,
                _ => {
                    let act = Activation::ALL.into_iter().find(|a| a.name() == part).ok_or_else(|| {
                        Error::invalid(
                            "epilogue",
                            format!("{part:?} is none of bias, relu, relu6, silu, gelu-tanh, residual, shuffle"),
                        )
                    })?;
                    e.activation = act;
                }
            }
        }
        Ok(e)
    }
}

/// An epilogue and its buffers for one run: `bias` (K floats) exactly where the epilogue has a
/// bias, `residual` (the output's size) exactly where it has a residual.
#[derive(Clone, Copy, Debug, Default)]
pub struct EpilogueArgs<'a> {
    pub epilogue: Epilogue,
    pub bias: Option<&'a CudaSlice<f32>>,
    pub residual: Option<&'a CudaSlice<f32>>,
}

impl<'a> EpilogueArgs<'a> {
    pub const NONE: EpilogueArgs<'static> = EpilogueArgs { epilogue: Epilogue::NONE, bias: None, residual: None };

    /// Fails unless the buffers are the ones the epilogue names, of the layer's sizes, on `gpu`.
    pub fn check(&self, gpu: &Gpu, conv: &Conv2d, geom: &ConvGeometry) -> Result<()> {
        for (name, wanted, given, len) in [
            ("bias", self.epilogue.bias, self.bias, conv.k),
            ("residual", self.epilogue.residual, self.residual, geom.y_len),
        ] {
            match (wanted, given) {
                (true, None) => {
                    return Err(Error::invalid("epilogue", format!("`{}` takes a {name} buffer", self.epilogue)));
                }
                (false, Some(_)) => {
                    return Err(Error::invalid("epilogue", format!("`{}` has no {name}", self.epilogue)));
                }
                (true, Some(buffer)) => {
                    if buffer.len() != len {
                        return Err(Error::BufferSize { buffer: name, expected: len, got: buffer.len() });
                    }
                    gpu.check_buffer(name, buffer)?;
                }
                (false, None) => {}
            }
        }
        Ok(())
    }

    /// Runs `launch` with the kernels' parameters, the buffers' addresses filled in and their
    /// cross-stream events recorded once it returns.
    pub(crate) fn with_params<R>(
        &self,
        stream: &CudaStream,
        conv: &Conv2d,
        geom: &ConvGeometry,
        launch: impl FnOnce(EpilogueParams) -> R,
    ) -> R {
        let mut p = self.epilogue.params(conv, geom);
        let bias = self.bias.map(|b| b.device_ptr(stream));
        let residual = self.residual.map(|r| r.device_ptr(stream));
        p.bias = bias.as_ref().map_or(0, |(ptr, _)| *ptr);
        p.residual = residual.as_ref().map_or(0, |(ptr, _)| *ptr);
        launch(p)
    }
}

/// The epilogue as a pass of its own: `dst = epilogue(src)`, `src` a convolution's output in
/// the groups' order. `src` and `dst` may be one buffer (`dst` then `None`) unless the
/// epilogue shuffles.
pub fn apply_pass(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    args: &EpilogueArgs,
    src: &mut impl DevicePtrMut<f32>,
    dst: Option<&mut CudaSlice<f32>>,
) -> Result<()> {
    let geom = conv.geometry()?;
    args.check(gpu, conv, &geom)?;
    if args.epilogue.is_none() && dst.is_none() {
        return Ok(());
    }
    if src.len() != geom.y_len {
        return Err(Error::BufferSize { buffer: "y", expected: geom.y_len, got: src.len() });
    }
    if args.epilogue.shuffle && dst.is_none() {
        return Err(Error::invalid("epilogue", "a shuffling epilogue cannot run in place"));
    }
    gpu.check_buffer("y", &*src)?;
    if let Some(dst) = &dst {
        if dst.len() != geom.y_len {
            return Err(Error::BufferSize { buffer: "y", expected: geom.y_len, got: dst.len() });
        }
        gpu.check_buffer("y", *dst)?;
    }
    let channels_last = conv.layout == crate::TensorLayout::Nhwc;
    // A block per plane (NHWC: per pixel) at a time; small ones take fewer threads.
    let (planes, plane) = if channels_last {
        ((conv.n * geom.out_h * geom.out_w) as u64, conv.k)
    } else {
        ((conv.n * conv.k) as u64, geom.out_h * geom.out_w)
    };
    let threads = plane.next_power_of_two().clamp(32, 256) as u32;
    let blocks = planes.min(gpu.sm_count() as u64 * 16) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
    args.with_params(stream, conv, &geom, |epilogue| {
        let (src_ptr, _src_sync) = src.device_ptr_mut(stream);
        let dst = dst.map(|d| d.device_ptr_mut(stream));
        let p = EpiloguePassParams {
            src: src_ptr,
            dst: dst.as_ref().map_or(src_ptr, |(ptr, _)| *ptr),
            planes,
            plane: (geom.out_h * geom.out_w) as u32,
            channels: conv.k as u32,
            channels_last: channels_last as u32,
            _pad: 0,
            epilogue,
        };
        // Safety: src and dst hold the layer's output; bias and residual were checked above.
        unsafe { gpu.launch(stream, EPILOGUE_KERNEL, cfg, p) }
    })?;
    gpu.check_deferred()
}
