//! Verification: the f64 reference convolution, the per-element error bound and the kernels
//! that apply them on the GPU. The host's CPU tests run the very functions the kernels run.
//!
//! The bound: an output `y` passes against the f64 value `v` of the same output when
//! `|y - v| <= tol * m + floor`, where `m = Σ|x·w|` over the output's taps (its
//! *magnitude*). A summation of `T` products in f32 errs by at most about `T · 2^-24 · m`
//! and in practice by `2^-24 · sqrt(T) · m` or less, so `tol` can be tight enough that one
//! dropped tap or one wrong element fails, where a single L2 norm over a large output would
//! hide it. Non-finite values must match exactly: a NaN where the reference has a NaN, the
//! same infinity where it has one.

use bytemuck::{Pod, Zeroable};

/// Entry points (their parameter structs: [`RefConvParams`], [`CompareParams`]).
pub const REFERENCE_KERNEL: &str = "reference_conv_f64";
pub const COMPARE_KERNEL: &str = "compare_to_reference";

/// Parameters of the f64 reference convolution (NCHW input, KCRS filter, NCHW output; with
/// `channels_last`, NHWC, KRSC and NHWC). Every extent is validated by the host to fit 32 bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RefConvParams {
    pub x: u64,
    pub w: u64,
    /// f64 outputs: Σ x·w.
    pub value: u64,
    /// f64 outputs: Σ |x·w|.
    pub magnitude: u64,
    pub n: u32,
    pub c: u32,
    pub in_h: u32,
    pub in_w: u32,
    pub k: u32,
    pub filter_r: u32,
    pub filter_s: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub dil_h: u32,
    pub dil_w: u32,
    pub groups: u32,
    pub c_per_group: u32,
    pub k_per_group: u32,
    /// 1: the tensors are channels last (NHWC input and output, KRSC filter); 0: NCHW.
    pub channels_last: u32,
    /// Keeps the struct free of implicit padding.
    pub _pad: u32,
}

impl RefConvParams {
    pub const fn output_len(&self) -> u64 {
        self.n as u64 * self.k as u64 * self.out_h as u64 * self.out_w as u64
    }

    /// `(Σ x·w, Σ |x·w|)` in f64 for output `index` (flat, in the layout's order), taps in
    /// (c, r, s) order. Padding contributes nothing (not a product with zero: `0 · ∞` would
    /// be NaN). `x(i)` and `w(i)` read element `i` of the input and the filter.
    #[inline(always)]
    pub fn output(&self, index: u64, x: impl Fn(u64) -> f32, w: impl Fn(u64) -> f32) -> (f64, f64) {
        // A reference, not a hot path: plain 64-bit division keeps it obviously right.
        let (out_h, out_w, k_all) = (self.out_h as u64, self.out_w as u64, self.k as u64);
        let last = self.channels_last != 0;
        let (image, k, oh, ow) = if last {
            (index / (out_w * out_h * k_all), index % k_all, index / (out_w * k_all) % out_h, index / k_all % out_w)
        } else {
            (index / (out_w * out_h * k_all), index / (out_w * out_h) % k_all, index / out_w % out_h, index % out_w)
        };
        let group = k / self.k_per_group as u64;
        let (in_h, in_w) = (self.in_h as i64, self.in_w as i64);
        let (c, c_per_group, rs) = (self.c as u64, self.c_per_group as u64, (self.filter_r * self.filter_s) as u64);
        // Element steps of the input's channel, row and column, and the filter's channel, r, s.
        let (x_c, x_h, x_w) = if last { (1, in_w as u64 * c, c) } else { ((in_h * in_w) as u64, in_w as u64, 1) };
        let (w_c, w_r, w_s) =
            if last { (1, self.filter_s as u64 * c_per_group, c_per_group) } else { (rs, self.filter_s as u64, 1) };
        let (mut sum, mut magnitude) = (0.0f64, 0.0f64);
        for cg in 0..c_per_group {
            let plane = image * c * (in_h * in_w) as u64 + (group * c_per_group + cg) * x_c;
            let taps = k * c_per_group * rs + cg * w_c;
            for r in 0..self.filter_r as i64 {
                let ih = oh as i64 * self.stride_h as i64 + r * self.dil_h as i64 - self.pad_h as i64;
                if ih < 0 || ih >= in_h {
                    continue;
                }
                for s in 0..self.filter_s as i64 {
                    let iw = ow as i64 * self.stride_w as i64 + s * self.dil_w as i64 - self.pad_w as i64;
                    if iw < 0 || iw >= in_w {
                        continue;
                    }
                    let xv = x(plane + ih as u64 * x_h + iw as u64 * x_w) as f64;
                    let wv = w(taps + r as u64 * w_r + s as u64 * w_s) as f64;
                    // The product of two f32 values is exact in f64.
                    let product = xv * wv;
                    sum += product;
                    magnitude += product.abs();
                }
            }
        }
        (sum, magnitude)
    }
}

/// How far an output may stray from the f64 reference: `tol * magnitude + floor`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct Tolerance {
    pub tol: f64,
    pub floor: f64,
}

impl Tolerance {
    /// A sum of `taps` f32 products accumulated in f32 in any order (FMA or not): `2^-23 ·
    /// (8 + sqrt(taps))` of the magnitude, about 8-100 times the error seen on random data,
    /// and the smallest normal f32 as the floor (for outputs whose every tap is zero).
    pub fn f32_sum(taps: u64) -> Self {
        Tolerance { tol: f32::EPSILON as f64 * (8.0 + sqrt(taps as f64)), floor: f32::MIN_POSITIVE as f64 }
    }

    /// FFT convolution: an output's rounding error comes from the whole transform, not from
    /// its own taps: about `2^-24 · log2(N²) · scale` on random data, where `scale` is the
    /// RMS of the input times the RMS over channels of a filter's L2 norm (the RMS of an
    /// output that sees every tap, and still the scale of the error where every output sees
    /// only padding). The bound adds `1e-4 · scale` to [`Self::f32_sum`]'s.
    pub fn fft(taps: u64, scale: f64) -> Self {
        let sum = Self::f32_sum(taps);
        Tolerance { tol: sum.tol, floor: 1e-4 * scale + sum.floor }
    }

    /// `|ours - value| / (tol · magnitude + floor)`: at most 1 passes. 0 for an exact match
    /// (non-finite values included), `+∞` where a non-finite value does not match.
    #[inline(always)]
    pub fn ratio(&self, ours: f32, value: f64, magnitude: f64) -> f64 {
        let ours = ours as f64;
        if value.is_nan() {
            return if ours.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if value.is_infinite() || !ours.is_finite() {
            return if ours == value { 0.0 } else { f64::INFINITY };
        }
        let diff = (ours - value).abs();
        if diff == 0.0 { 0.0 } else { diff / (self.tol * magnitude + self.floor) }
    }
}

/// `core` has no `f64::sqrt`: halve the exponent for a first guess within a few percent,
/// then Newton's method (it converges quadratically from there).
fn sqrt(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || v.is_infinite() {
        return if v > 0.0 { v } else { 0.0 };
    }
    let mut r = f64::from_bits((v.to_bits() >> 1) + 0x1ff8_0000_0000_0000);
    for _ in 0..64 {
        let next = 0.5 * (r + v / r);
        if next == r {
            break;
        }
        r = next;
    }
    r
}

/// Parameters of the comparison kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CompareParams {
    /// f32 outputs under test.
    pub ours: u64,
    /// f64 reference values and magnitudes.
    pub value: u64,
    pub magnitude: u64,
    /// One [`CompareStats`], initialised with [`CompareStats::EMPTY`].
    pub stats: u64,
    pub len: u64,
    pub bound: Tolerance,
}

/// What a comparison found, accumulated with atomics on the GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct CompareStats {
    /// Outputs whose ratio exceeds 1.
    pub violations: u64,
    /// The largest ratio, as the bits of a non-negative f64 (their order is the values').
    pub worst_ratio_bits: u64,
    /// The lowest index of a violation, `u64::MAX` when none.
    pub first_violation: u64,
    /// Σ (ours - value)² and Σ value² over the outputs whose reference is finite.
    pub sum_sq_err: f64,
    pub sum_sq_value: f64,
}

impl CompareStats {
    pub const EMPTY: Self = CompareStats {
        violations: 0,
        worst_ratio_bits: 0,
        first_violation: u64::MAX,
        sum_sq_err: 0.0,
        sum_sq_value: 0.0,
    };

    /// Folds in one output, the way each GPU thread does before its atomics.
    #[inline(always)]
    pub fn add(&mut self, index: u64, ours: f32, value: f64, magnitude: f64, bound: &Tolerance) {
        let ratio = bound.ratio(ours, value, magnitude);
        if ratio > 1.0 {
            self.violations += 1;
            self.first_violation = self.first_violation.min(index);
        }
        self.worst_ratio_bits = self.worst_ratio_bits.max(ratio.to_bits());
        if value.is_finite() {
            let err = if ours.is_finite() { ours as f64 - value } else { f64::INFINITY };
            self.sum_sq_err += err * err;
            self.sum_sq_value += value * value;
        }
    }

    pub fn worst_ratio(&self) -> f64 {
        f64::from_bits(self.worst_ratio_bits)
    }

    /// ‖ours − value‖₂ / ‖value‖₂ over the finite reference values (∞ when one of ours is not finite).
    pub fn rel_l2(&self) -> f64 {
        if self.sum_sq_value == 0.0 { self.sum_sq_err } else { sqrt(self.sum_sq_err / self.sum_sq_value) }
    }

    pub fn passed(&self) -> bool {
        self.violations == 0
    }
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::{CompareParams, CompareStats, RefConvParams};
    use crate::prelude::*;
    use core::mem::offset_of;

    /// One thread per output (grid-stride): the f64 value and magnitude of each.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn reference_conv_f64(p: RefConvParams) {
        let (x, w) = (p.x as *const f32, p.w as *const f32);
        let (value, magnitude) = (p.value as *mut f64, p.magnitude as *mut f64);
        let (mut i, stride) = grid_stride();
        while i < p.output_len() {
            let (v, m) = p.output(i, |j| unsafe { *x.add(j as usize) }, |j| unsafe { *w.add(j as usize) });
            unsafe {
                *value.add(i as usize) = v;
                *magnitude.add(i as usize) = m;
            }
            i += stride;
        }
    }

    /// Each thread folds its outputs into private stats, then merges them with one atomic each.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn compare_to_reference(p: CompareParams) {
        let (ours, value, magnitude) = (p.ours as *const f32, p.value as *const f64, p.magnitude as *const f64);
        let mut mine = CompareStats::EMPTY;
        let (mut i, stride) = grid_stride();
        while i < p.len {
            let j = i as usize;
            unsafe { mine.add(i, *ours.add(j), *value.add(j), *magnitude.add(j), &p.bound) };
            i += stride;
        }
        let stats = to_global(p.stats);
        let field = |offset: usize| stats + offset as u64;
        if mine.violations > 0 {
            atomic_add_u64(field(offset_of!(CompareStats, violations)), mine.violations);
            atomic_min_u64(field(offset_of!(CompareStats, first_violation)), mine.first_violation);
        }
        atomic_max_u64(field(offset_of!(CompareStats, worst_ratio_bits)), mine.worst_ratio_bits);
        atomic_add_f64(field(offset_of!(CompareStats, sum_sq_err)), mine.sum_sq_err);
        atomic_add_f64(field(offset_of!(CompareStats, sum_sq_value)), mine.sum_sq_value);
    }
}
