//! The complex f32 that the cgemm, FFT and FFT-convolution kernels share, with the few
//! operations their inner loops use (all inlined; FMA on the GPU).

use crate::fma;
use bytemuck::{Pod, Zeroable};
use core::ops::{Add, Mul, Neg, Sub};

/// A complex f32, laid out as `re, im` (the interleaved storage cuBLAS and FFT libraries use).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Complex32 {
    pub re: f32,
    pub im: f32,
}

impl Complex32 {
    pub const ZERO: Self = Complex32 { re: 0.0, im: 0.0 };
    pub const ONE: Self = Complex32 { re: 1.0, im: 0.0 };

    pub const fn new(re: f32, im: f32) -> Self {
        Complex32 { re, im }
    }

    #[inline(always)]
    pub fn conj(self) -> Self {
        Complex32 { re: self.re, im: -self.im }
    }

    /// `self · b + acc`, with one rounding per real multiply-add (f32 FMA on the GPU).
    #[inline(always)]
    pub fn mul_add(self, b: Self, acc: Self) -> Self {
        Complex32 {
            re: fma(-self.im, b.im, fma(self.re, b.re, acc.re)),
            im: fma(self.im, b.re, fma(self.re, b.im, acc.im)),
        }
    }

    #[inline(always)]
    pub fn scale(self, s: f32) -> Self {
        Complex32 { re: self.re * s, im: self.im * s }
    }

    /// `self · s + acc` for a real `s`.
    #[inline(always)]
    pub fn scale_add(self, s: f32, acc: Self) -> Self {
        Complex32 { re: fma(self.re, s, acc.re), im: fma(self.im, s, acc.im) }
    }

    /// `self · i`.
    #[inline(always)]
    pub fn mul_i(self) -> Self {
        Complex32 { re: -self.im, im: self.re }
    }

    /// `self · w` for a `w` known at compile time: where a part of `w` is zero (the roots
    /// ±1 and ±i) the multiply-adds by it are left out, which the compiler may not do itself
    /// (`x · 0` is not 0 for infinite or NaN `x`). The branches fold away once `w` is constant.
    #[inline(always)]
    pub fn mul_const(self, w: Self) -> Self {
        if w.im == 0.0 {
            self.scale(w.re)
        } else if w.re == 0.0 {
            self.mul_i().scale(w.im)
        } else {
            self * w
        }
    }
}

impl Add for Complex32 {
    type Output = Self;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Complex32 { re: self.re + b.re, im: self.im + b.im }
    }
}

impl Sub for Complex32 {
    type Output = Self;
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Complex32 { re: self.re - b.re, im: self.im - b.im }
    }
}

impl Neg for Complex32 {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Complex32 { re: -self.re, im: -self.im }
    }
}

impl Mul for Complex32 {
    type Output = Self;
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        Complex32 { re: fma(self.re, b.re, -self.im * b.im), im: fma(self.re, b.im, self.im * b.re) }
    }
}

// Safety: a plain pair of f32 (Pod), valid for any bits, as cudarc requires of buffer elements.
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl cudarc::driver::DeviceRepr for Complex32 {}
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl cudarc::driver::ValidAsZeroBits for Complex32 {}
