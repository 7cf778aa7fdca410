//! Batched complex FFT of lengths `2^a 3^b 5^c 7^d` up to [`FFT_MAX_N`]: one transform per
//! block, held in shared memory, a Stockham autosort pass per radix (8, 4, 2, 3, 5, 7), so
//! the result comes out in natural order without a bit-reversal. The first building block of
//! FFT convolution (2D transforms are two batched launches: rows, then columns). Launched by
//! `host/fft.rs`.
//!
//! Pass `p` with radix `R` over `N` points, `Ns` = the product of the earlier radices: for
//! each butterfly `j < N / R`, with `k = j mod Ns`,
//! `v[r] = src[j + r·N/R] · W_N^(r·k·N/(Ns·R))`, then a length-`R` DFT of `v`, written to
//! `dst[(j div Ns)·Ns·R + k + s·Ns]` for `s < R`. `W_N = exp(-2πi / N)` (forward); the inverse
//! conjugates it. Twiddles come from a table of `W_N^t`, `t < N`, computed in f64 on the host
//! and rounded once; the per-pass data (radix, twiddle unit, the magic divider by `Ns`) from a
//! table in global memory, so that no kernel array is indexed at run time.

use crate::{MagicDiv, cgemm::Complex32};
use bytemuck::{Pod, Zeroable};

/// Longest transform: two buffers of it fit the 48 KB of shared memory a launch gets without
/// opting in.
pub const FFT_MAX_N: u32 = 2048;
/// The radices, in the order passes use them (larger first: fewer passes).
pub const FFT_RADICES: [u32; 6] = [8, 4, 2, 3, 5, 7];
/// Most passes a transform takes (2048 = 8^3 · 4 takes 4; 2^11 by 2s would take 11).
pub const FFT_MAX_PASSES: usize = 12;
/// Threads per block.
pub const FFT_THREADS: u32 = 256;
/// The kernel's entry point.
pub const FFT_KERNEL: &str = "fft_c2c";

/// One Stockham pass, as the kernel reads it from the pass table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct FftPass {
    pub radix: u32,
    /// `N / (Ns · R)`: the twiddle exponent of `(r, k)` is `r · k · twiddle_unit`.
    pub twiddle_unit: u32,
    /// Divides a butterfly index by `Ns`.
    pub ns: MagicDiv,
}

// Safety: plain u32s (Pod), valid for any bits, as cudarc requires of buffer elements.
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl cudarc::driver::DeviceRepr for FftPass {}

/// The radices of `n`, largest first, or `None` where `n` is 0, past [`FFT_MAX_N`] or has a
/// prime factor above 7.
pub fn factorize(n: u32) -> Option<([u32; FFT_MAX_PASSES], usize)> {
    if n == 0 || n > FFT_MAX_N {
        return None;
    }
    let (mut radices, mut count, mut rest) = ([0u32; FFT_MAX_PASSES], 0, n);
    for r in FFT_RADICES {
        while rest.is_multiple_of(r) {
            radices[count] = r;
            count += 1;
            rest /= r;
        }
    }
    (rest == 1).then_some((radices, count))
}

/// The passes of a length-`n` transform (`None` as for [`factorize`]); length 1 has none.
pub fn passes(n: u32) -> Option<([FftPass; FFT_MAX_PASSES], usize)> {
    let (radices, count) = factorize(n)?;
    let mut out =
        [FftPass { radix: 1, twiddle_unit: 0, ns: MagicDiv::new(1).expect("1 is a divisor") }; FFT_MAX_PASSES];
    let mut ns = 1;
    for (pass, &radix) in out.iter_mut().zip(&radices[..count]) {
        *pass = FftPass { radix, twiddle_unit: n / (ns * radix), ns: MagicDiv::new(ns).expect("ns >= 1") };
        ns *= radix;
    }
    Some((out, count))
}

/// Where butterfly `j` of a pass reads and writes: element `src + r · src_step` is its
/// `r`-th input, which it multiplies by twiddle `r · twiddle`, and its `s`-th output goes to
/// `dst + s · dst_step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Butterfly {
    pub src: u32,
    pub src_step: u32,
    pub twiddle: u32,
    pub dst: u32,
    pub dst_step: u32,
}

impl FftPass {
    #[inline(always)]
    pub fn butterfly(&self, j: u32, n: u32) -> Butterfly {
        let (group, k) = self.ns.div_rem(j);
        let ns = self.ns.divisor;
        Butterfly {
            src: j,
            src_step: n / self.radix,
            twiddle: k * self.twiddle_unit,
            dst: group * ns * self.radix + k,
            dst_step: ns,
        }
    }
}

/// A length-`R` DFT of `v` in place: `v'[s] = Σ_r v[r] · root[(r·s) mod R]`, `root[q]` the
/// `R`-th roots of unity of the transform's direction.
#[inline(always)]
pub fn dft<const R: usize>(v: &mut [Complex32; R], root: &[Complex32; R]) {
    let mut out = [Complex32::ZERO; R];
    for (s, o) in out.iter_mut().enumerate() {
        let mut acc = v[0];
        for r in 1..R {
            acc = v[r].mul_add(root[(r * s) % R], acc);
        }
        *o = acc;
    }
    *v = out;
}

/// Parameters of [`FFT_KERNEL`]. Transform `b < batch` reads element `i` at
/// `input + base(b) + i · stride` and writes it at `output + base(b) + i · stride`, with
/// `base(b) = (b div inner) · outer_dist + (b mod inner) · inner_dist` (row transforms:
/// `inner = 1`; column transforms of images: `inner` = columns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct FftParams {
    pub input: u64,
    pub output: u64,
    /// `W_N^t` for `t < N` (interleaved complex f32).
    pub twiddles: u64,
    /// `passes` [`FftPass`]es.
    pub pass_table: u64,
    pub outer_dist: u64,
    pub inner_dist: u64,
    pub inner: MagicDiv,
    pub n: u32,
    pub passes: u32,
    pub batch: u32,
    pub stride: u32,
    /// 1 for the inverse transform (conjugated twiddles), else 0.
    pub inverse: u32,
    /// Multiplies every output (1, or 1/N for a normalised inverse).
    pub scale: f32,
}

impl FftParams {
    /// Offset (elements) of transform `b`'s first element.
    #[inline(always)]
    pub fn base(&self, b: u32) -> u64 {
        let (outer, inner) = self.inner.div_rem(b);
        outer as u64 * self.outer_dist + inner as u64 * self.inner_dist
    }
}

// Register arrays are indexed by compile-time-constant loop counters (fully unrolled);
// iterators over them put them in local memory (a stack frame), which tests/ptx.rs forbids.
#[cfg(target_arch = "nvptx64")]
#[allow(clippy::needless_range_loop)]
mod entry {
    use super::{Butterfly, FFT_THREADS, FftParams, FftPass, dft};
    use crate::{MagicDiv, cgemm::Complex32, prelude::*};

    #[inline(always)]
    fn lds(addr: u32) -> Complex32 {
        let [re, im] = ld_shared_f32x2(addr);
        Complex32 { re, im }
    }

    #[inline(always)]
    fn sts(addr: u32, v: Complex32) {
        st_shared_f32x2(addr, [v.re, v.im]);
    }

    /// Twiddle `t`, conjugated for the inverse.
    #[inline(always)]
    fn twiddle(table: u64, t: u32, sign: f32) -> Complex32 {
        let [re, im] = ldg_nc_f32x2(table + 8 * t as u64);
        Complex32 { re, im: sign * im }
    }

    #[inline(always)]
    fn pass_at(table: u64, p: u32) -> FftPass {
        let at = table + (p as u64) * size_of::<FftPass>() as u64;
        let word = |i: u64| ldg_nc_u32(at + 4 * i);
        FftPass {
            radix: word(0),
            twiddle_unit: word(1),
            ns: MagicDiv { divisor: word(2), multiplier: word(3), shift1: word(4), shift2: word(5) },
        }
    }

    /// Every butterfly of one radix-`R` pass from `src` to `dst` (shared addresses).
    #[inline(always)]
    fn pass<const R: usize>(p: &FftParams, pass: &FftPass, src: u32, dst: u32, sign: f32) {
        let table = to_global(p.twiddles);
        let mut root = [Complex32::ONE; R];
        for (q, w) in root.iter_mut().enumerate().skip(1) {
            *w = twiddle(table, q as u32 * (p.n / R as u32), sign);
        }
        let mut j = thread_idx_x();
        while j < p.n / R as u32 {
            let b: Butterfly = pass.butterfly(j, p.n);
            let mut v = [Complex32::ZERO; R];
            for r in 0..R {
                v[r] = lds(src + 8 * (b.src + r as u32 * b.src_step));
                if r > 0 {
                    v[r] = v[r].mul_add(twiddle(table, r as u32 * b.twiddle, sign), Complex32::ZERO);
                }
            }
            dft::<R>(&mut v, &root);
            for s in 0..R {
                sts(dst + 8 * (b.dst + s as u32 * b.dst_step), v[s]);
            }
            j += FFT_THREADS;
        }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn fft_c2c(p: FftParams) {
        let b = block_idx_x();
        if b >= p.batch {
            return;
        }
        let base = p.base(b);
        let (input, output) = (to_global(p.input), to_global(p.output));
        let mut src = smem_base();
        let mut dst = src + 8 * p.n;
        let mut i = thread_idx_x();
        while i < p.n {
            let [re, im] = ldg_nc_f32x2(input + 8 * (base + i as u64 * p.stride as u64));
            sts(src + 8 * i, Complex32 { re, im });
            i += FFT_THREADS;
        }
        let sign = if p.inverse != 0 { -1.0 } else { 1.0 };
        let table = to_global(p.pass_table);
        for q in 0..p.passes {
            sync_threads();
            let pass = pass_at(table, q);
            match pass.radix {
                2 => self::pass::<2>(&p, &pass, src, dst, sign),
                3 => self::pass::<3>(&p, &pass, src, dst, sign),
                4 => self::pass::<4>(&p, &pass, src, dst, sign),
                5 => self::pass::<5>(&p, &pass, src, dst, sign),
                7 => self::pass::<7>(&p, &pass, src, dst, sign),
                _ => self::pass::<8>(&p, &pass, src, dst, sign),
            }
            (src, dst) = (dst, src);
        }
        sync_threads();
        let mut i = thread_idx_x();
        while i < p.n {
            let v = lds(src + 8 * i);
            stg_f32x2(output + 8 * (base + i as u64 * p.stride as u64), [p.scale * v.re, p.scale * v.im]);
            i += FFT_THREADS;
        }
    }
}
