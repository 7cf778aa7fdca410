//! Division by a run-time invariant divisor with a multiply-high and two shifts
//! (Granlund & Montgomery, "Division by invariant integers using multiplication", 1994, fig. 4.1).
//!
//! For `d` in `1..=u32::MAX` let `l = ceil(log2 d)` and `m = floor(2^32 (2^l - d) / d) + 1`
//! (which fits in 32 bits). Then for every `n: u32`
//! `n / d == (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0)` with `t = mulhi(n, m)`:
//! exact, and no intermediate overflows 32 bits. On the GPU `mulhi` is one `mul.hi.u32`.

use bytemuck::{Pod, Zeroable};

/// A divisor prepared for magic-number division. Built on the host, passed to kernels by
/// value inside their parameter structs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct MagicDiv {
    pub divisor: u32,
    pub multiplier: u32,
    pub shift1: u32,
    pub shift2: u32,
}

impl MagicDiv {
    /// Prepares `divisor`; `None` for zero.
    pub const fn new(divisor: u32) -> Option<Self> {
        if divisor == 0 {
            return None;
        }
        // l = ceil(log2 d): 0 for d = 1, 32 for d > 2^31.
        let l = 32 - (divisor - 1).leading_zeros();
        let two_l = 1u64 << l;
        // 2^32 (2^l - d) < 2^64 because 2^l - d < d <= 2^32.
        let multiplier = (((two_l - divisor as u64) << 32) / divisor as u64 + 1) as u32;
        Some(Self { divisor, multiplier, shift1: if l == 0 { 0 } else { 1 }, shift2: if l == 0 { 0 } else { l - 1 } })
    }

    #[inline(always)]
    pub fn div(&self, n: u32) -> u32 {
        let t = mul_hi(n, self.multiplier);
        (t + ((n - t) >> self.shift1)) >> self.shift2
    }

    /// `(n / d, n % d)`.
    #[inline(always)]
    pub fn div_rem(&self, n: u32) -> (u32, u32) {
        let q = self.div(n);
        (q, n - q * self.divisor)
    }
}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn mul_hi(a: u32, b: u32) -> u32 {
    crate::prelude::mul_hi_u32(a, b)
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn mul_hi(a: u32, b: u32) -> u32 {
    ((a as u64 * b as u64) >> 32) as u32
}
