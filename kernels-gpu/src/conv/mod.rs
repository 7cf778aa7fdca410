//! Convolution kernel families, one module each.

pub mod depthwise;
pub mod direct;
pub mod fft;
pub mod fft_gemm;
