//! Helpers shared by the CPU tests of the FFT and the FFT convolution.

use kernels_gpu::complex::Complex32;

/// The f64 DFT of `x`, forward (`W = exp(-2πi/n)`) or inverse, unnormalised.
pub fn dft_f64(x: &[Complex32], inverse: bool) -> Vec<(f64, f64)> {
    let n = x.len();
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            x.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, v)| {
                let angle = sign * 2.0 * std::f64::consts::PI * ((i * k) % n) as f64 / n as f64;
                let (c, s) = (angle.cos(), angle.sin());
                (re + v.re as f64 * c - v.im as f64 * s, im + v.re as f64 * s + v.im as f64 * c)
            })
        })
        .collect()
}
