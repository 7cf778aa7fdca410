//! Convolution kernel families, one module each.

/// CUDA's limit on `gridDim.z`: the families that pack an index into z launch several grids
/// of at most this many z-indices, each told its first through the parameters' `z_base`.
pub const MAX_GRID_Z: u32 = 65535;

/// The convolution window of the direct-style kernels' parameters (one layout, one host
/// constructor): filter size, zero padding before each dimension, stride and dilation.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Window {
    pub filter_r: u32,
    pub filter_s: u32,
    pub pad_h: i32,
    pub pad_w: i32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub dil_h: u32,
    pub dil_w: u32,
}

pub mod depthwise;
pub mod direct;
pub mod epilogue;
pub mod fft;
pub mod fft_gemm;
pub mod igemm;
