//! Convolution kernel families, one module each.

/// CUDA's limit on `gridDim.z`: the families that pack an index into z launch several grids
/// of at most this many z-indices, each told its first through the parameters' `z_base`.
pub const MAX_GRID_Z: u32 = 65535;

pub mod depthwise;
pub mod direct;
pub mod fft;
pub mod fft_gemm;
pub mod igemm;
