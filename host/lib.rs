//! convkit: hand-written GPU convolution kernels, checked and benchmarked against cuDNN.
//!
//! - [`direct`]: grouped direct convolution (dense, grouped, depthwise, channel multipliers),
//!   forward, f32, NCHW.
//! - [`reference`]: a CPU reference convolution with f64 accumulation.
//! - [`cudnn`]: the same convolution through cuDNN, the reference on the GPU.
//! - [`Gpu`]: a device, its stream and the embedded PTX module for its architecture.
//!
//! Kernels live in the `kernels-gpu` crate, which also defines the parameter structs and
//! index math that the launchers here use, so both sides share one kernel ABI.

pub mod bench;
pub mod check;
pub mod cudnn;
pub mod direct;
mod error;
mod gpu;
pub mod reference;
pub mod shape;

pub use error::{Error, Result};
pub use gpu::{Gpu, pick_ptx};
pub use shape::{Conv2d, ConvGeometry};

/// The PTX modules built by `build.rs`, one per architecture in `CONVKIT_CUDA_ARCH`.
pub mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}
