//! convkit: hand-written GPU convolution kernels, checked and benchmarked against cuDNN.
//!
//! - [`Gpu`]: a device, its default stream and the embedded PTX module for its architecture.
//! - [`Conv2d`]: the problem (shape syntax, validation, derived sizes).
//! - [`conv::direct`]: grouped direct convolution (dense, grouped, depthwise, channel
//!   multipliers, any filter, stride and dilation), forward, f32, NCHW.
//! - [`conv::depthwise`]: depthwise convolution (multiplier 1 or 2; 3x3 ... 9x9, stride 1 or 2)
//!   from shared-memory tiles, forward, f32, NCHW.
//! - [`cgemm`]: batched complex GEMM, `C = α·op(A)·op(B) + β·C`, interleaved or planar.
//! - [`fft`]: batched FFTs: 1D complex (lengths 2^a 3^b 5^c 7^d up to 2048, rows or columns)
//!   and square 2D (complex both ways, real-to-complex, complex-to-real; 22 sizes, 12 to 160).
//! - [`conv::fft`] (depthwise, fused) and [`conv::fft_gemm`] (any groups: overlap-save tiles
//!   and a per-frequency cgemm): FFT convolution for large filters, plans that cache the
//!   filters' spectra.
//! - [`conv::cudnn`]: the same convolution through cuDNN's graph API (its cuDNN 9 engines)
//!   and its legacy API.
//! - [`plan`]: one plan for every convolution: heuristics, Find, a persistent cache, workspace
//!   limits, over convkit's kernels and cuDNN's.
//! - [`timing`]: host-free GPU timing (Find and the bench share it).
//! - `harness` (cargo feature `harness`): references, `check`, `bench`, `tune`.
//!
//! Kernels live in the `kernels-gpu` crate, which also defines the parameter structs and
//! index math that the launchers here use, so both sides share one kernel ABI.

pub mod cgemm;
pub mod conv;
mod error;
pub mod fft;
mod gpu;
#[cfg(feature = "harness")]
pub mod harness;
pub mod plan;
pub mod problem;
pub mod timing;

pub use conv::{depthwise, direct};
pub use error::{Error, Result};
pub use gpu::{Gpu, ModuleKind, pick_ptx};
pub use problem::{Conv2d, ConvGeometry, TensorLayout};

/// The PTX modules built by `build.rs`, one per architecture in `CONVKIT_CUDA_ARCH`, and their
/// cubins where the build was given `CONVKIT_PTXAS`.
pub mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}
