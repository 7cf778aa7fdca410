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

pub mod square;
pub mod two_pass;

use crate::{MagicDiv, complex::Complex32};
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

/// `exp(2πi·k/n)` as `(cos, sin)` in f64, in a `const fn` so that codelets get their roots as
/// compile-time constants. The angle is reduced to an octant in integers (so that quarter turns
/// come out exactly 0 and ±1) and the rest is a Taylor series on `[0, π/4]`.
pub const fn unit_root(k: u64, n: u64) -> (f64, f64) {
    const fn taylor(x: f64) -> (f64, f64) {
        let x2 = x * x;
        let (mut c, mut s, mut term_c, mut term_s) = (1.0, x, 1.0, x);
        let mut i = 1;
        while i < 12 {
            let (even, odd) = ((2 * i) as f64, (2 * i + 1) as f64);
            term_c = -term_c * x2 / ((even - 1.0) * even);
            term_s = -term_s * x2 / (even * odd);
            c += term_c;
            s += term_s;
            i += 1;
        }
        (c, s)
    }
    let m = k % n;
    let octant = 8 * m / n;
    let rem = 8 * m - octant * n;
    let quarter_pi = core::f64::consts::FRAC_PI_4;
    // angle = (octant + rem/n)·π/4; an odd octant is measured back from the next quarter turn.
    let (mut c, mut s, mut quarters) = if octant.is_multiple_of(2) {
        let (c, s) = taylor(rem as f64 / n as f64 * quarter_pi);
        (c, s, octant / 2)
    } else {
        let (c, s) = taylor((n - rem) as f64 / n as f64 * quarter_pi);
        (c, -s, octant / 2 + 1)
    };
    while quarters > 0 {
        (c, s) = (-s, c);
        quarters -= 1;
    }
    (c, s)
}

/// `W_N^t` for `t < N`, rounded once from f64: `W_N = exp(-2πi/N)` forward, its conjugate
/// for the inverse (`INV`). Evaluated at compile time where a codelet asks for it.
pub const fn roots<const N: usize, const INV: bool>() -> [Complex32; N] {
    let mut out = [Complex32::ZERO; N];
    let mut t = 0;
    while t < N {
        let (c, s) = unit_root(t as u64, N as u64);
        out[t] = Complex32::new(c as f32, if INV { s as f32 } else { -s as f32 });
        t += 1;
    }
    out
}

/// Lengths [`dft_reg`] computes.
pub const CODELET_LENGTHS: [usize; 13] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16];

/// A length-`L` DFT of `v` in registers, in natural order, forward or inverse (`INV`,
/// unnormalised), for `L` in [`CODELET_LENGTHS`]. Every index and root is a compile-time
/// constant once inlined: radix-2 and radix-4 butterflies, the symmetric form of odd lengths
/// (3, 5, 7), and composite lengths as a two-factor Cooley-Tukey of those.
#[inline(always)]
pub fn dft_reg<const L: usize, const INV: bool>(v: &mut [Complex32; L]) {
    let v: &mut [Complex32] = v;
    match L {
        1 => {}
        2 => {
            let (a, b) = (v[0], v[1]);
            (v[0], v[1]) = (a + b, a - b);
        }
        4 => radix4::<INV>(v),
        3 | 5 | 7 => odd::<L, INV>(v),
        6 => composite::<2, 3, 6, INV>(v),
        8 => composite::<4, 2, 8, INV>(v),
        9 => composite::<3, 3, 9, INV>(v),
        10 => composite::<2, 5, 10, INV>(v),
        12 => composite::<4, 3, 12, INV>(v),
        14 => composite::<2, 7, 14, INV>(v),
        16 => composite::<4, 4, 16, INV>(v),
        _ => panic!("dft_reg: no codelet of this length"),
    }
}

#[inline(always)]
fn radix4<const INV: bool>(v: &mut [Complex32]) {
    let (a, b) = (v[0] + v[2], v[0] - v[2]);
    let (c, d) = (v[1] + v[3], v[1] - v[3]);
    // (v1 - v3)·W_4: -i forward, +i inverse.
    let d = if INV { d.mul_i() } else { -d.mul_i() };
    (v[0], v[1], v[2], v[3]) = (a + c, b + d, a - c, b - d);
}

/// Odd `L`: `out[s] = v0 + Σ_r (v_r + v_{L-r})·Re W^{rs} + i·(v_r - v_{L-r})·Im W^{rs}` over
/// `r ≤ (L-1)/2`, and `out[L-s]` with the second sum's sign flipped. (Index loops, not
/// iterators or `copy_from_slice`: register arrays stay registers only when fully unrolled.)
#[inline(always)]
#[allow(clippy::needless_range_loop, clippy::manual_memcpy)]
fn odd<const L: usize, const INV: bool>(v: &mut [Complex32]) {
    let w = const { roots::<L, INV>() };
    let half = (L - 1) / 2;
    let (mut sum, mut diff) = ([Complex32::ZERO; L], [Complex32::ZERO; L]);
    let mut out = [Complex32::ZERO; L];
    out[0] = v[0];
    for r in 1..half + 1 {
        (sum[r], diff[r]) = (v[r] + v[L - r], v[r] - v[L - r]);
        out[0] = out[0] + sum[r];
    }
    for s in 1..half + 1 {
        let (mut even, mut odd) = (v[0], Complex32::ZERO);
        for r in 1..half + 1 {
            let root = w[(r * s) % L];
            even = sum[r].scale_add(root.re, even);
            odd = diff[r].mul_i().scale_add(root.im, odd);
        }
        (out[s], out[L - s]) = (even + odd, even - odd);
    }
    for s in 0..L {
        v[s] = out[s];
    }
}

/// `N = A·B`: length-`B` DFTs of the `A` strided subsequences, twiddles `W_N^{a·kb}`, then
/// length-`A` DFTs across them; `out[kb + B·ka]`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn composite<const A: usize, const B: usize, const N: usize, const INV: bool>(v: &mut [Complex32]) {
    const { assert!(A * B == N) };
    let w = const { roots::<N, INV>() };
    let mut mid = [[Complex32::ZERO; B]; A];
    for a in 0..A {
        let mut u = [Complex32::ZERO; B];
        for b in 0..B {
            u[b] = v[a + A * b];
        }
        dft_reg::<B, INV>(&mut u);
        for kb in 0..B {
            mid[a][kb] = u[kb].mul_const(w[a * kb]);
        }
    }
    for kb in 0..B {
        let mut u = [Complex32::ZERO; A];
        for a in 0..A {
            u[a] = mid[a][kb];
        }
        dft_reg::<A, INV>(&mut u);
        for ka in 0..A {
            v[kb + B * ka] = u[ka];
        }
    }
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
    use crate::{MagicDiv, complex::Complex32, prelude::*};

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
