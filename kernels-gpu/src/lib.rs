//! convkit's device crate.
//!
//! Built twice: for `nvptx64-nvidia-cuda` (by the host's `build.rs`, into the PTX that the
//! host embeds) and for the host as an ordinary `rlib`. Everything both sides must agree on
//! lives here once: the `#[repr(C)]` kernel parameter structs, the magic divider and the
//! index/tile math. Device-only items (entry points, the prelude, the panic handler) sit
//! behind `cfg(target_arch = "nvptx64")`.
//!
//! - [`conv`]: the convolution kernel families ([`conv::direct`], [`conv::depthwise`], the FFT
//!   convolutions).
//! - [`cgemm`]: batched complex GEMM.
//! - [`fft`]: batched FFTs (1D; square 2D in shared memory, [`fft::square`], whose pieces the
//!   FFT convolutions [`conv::fft`] and [`conv::fft_gemm`] are built from).
//! - [`tf32`]: the TF32 split of the 3xTF32 kernels.
//! - [`verify`], [`random`], [`timing`]: the f64 reference and error bound, the random
//!   fill and the timing gate that `convkit check` and `convkit bench` run on the GPU.
#![no_std]
// Phase bodies are closures run by `Block::for_each`: they must inline (a call keeps register
// arrays and the parameter struct in local memory), which only an attribute guarantees.
#![feature(stmt_expr_attributes)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_intrinsics),
    allow(internal_features)
)]
// `exp2f32` for the host's copy of the activations (`core` has no `f32::exp2`).
#![cfg_attr(not(target_arch = "nvptx64"), feature(core_intrinsics), allow(internal_features))]

pub mod cgemm;
pub mod complex;
pub mod conv;
pub mod fft;
pub mod geometry;
pub mod magic;
pub mod random;
pub mod tf32;
pub mod timing;
pub mod verify;

#[cfg(target_arch = "nvptx64")]
pub mod prelude;

pub use magic::MagicDiv;

/// What an entry point's PTX declares for ptxas (`.maxntid`, `.minnctapersm`: CUDA C's
/// `__launch_bounds__`), which Rust cannot write: the host's build.rs adds it to the PTX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchBounds {
    pub entry: &'static str,
    /// The most threads a launch of `entry` may have: every launch's block size.
    pub max_threads: u32,
    /// The blocks of `max_threads` that one SM must hold at once: ptxas keeps the registers
    /// to `65536 / (max_threads * min_blocks_per_sm)`.
    pub min_blocks_per_sm: u32,
}

/// Whether the PTX module of compute capability `cc` (x 10) is built for the architecture-specific
/// target (`sm_90a`: Hopper's `wgmma`, which the warpgroup tiles of [`conv::igemm`] need): such a
/// module loads on that compute capability alone, where an `sm_NN` one also runs on later GPUs.
pub const fn arch_specific(cc: u32) -> bool {
    cc == 90
}

/// What follows `sm_NN` in the PTX target of compute capability `cc`: `a` where
/// [`arch_specific`], else nothing.
pub const fn arch_suffix(cc: u32) -> &'static str {
    if arch_specific(cc) { "a" } else { "" }
}

/// Every entry point of compute capability `cc`'s module that declares launch bounds.
pub fn launch_bounds(cc: u32) -> impl Iterator<Item = LaunchBounds> {
    conv::igemm::launch_bounds(cc)
}

/// `v`, hidden from the compiler: a loop that runs to it stays a loop, so that its iterations'
/// loads are not all hoisted to the top (which would keep every iteration's values live).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn opaque(v: u32) -> u32 {
    let r: u32;
    unsafe { core::arch::asm!("mov.u32 {r}, {v};", r = out(reg32) r, v = in(reg32) v, options(pure, nomem, nostack)) };
    r
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn opaque(v: u32) -> u32 {
    v
}

/// [`opaque`] of a 64-bit value: an address that LLVM would otherwise strength-reduce into one
/// register pair per load of an unrolled loop.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn opaque_u64(v: u64) -> u64 {
    let r: u64;
    unsafe { core::arch::asm!("mov.u64 {r}, {v};", r = out(reg64) r, v = in(reg64) v, options(pure, nomem, nostack)) };
    r
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn opaque_u64(v: u64) -> u64 {
    v
}

/// Holds `v` as it is here: an empty `asm` that LLVM may neither move nor drop, so that what
/// computes `v` runs before this point (LLVM otherwise sank a step's multiply-adds past the
/// next step's exit test, keeping input rows live instead of sums).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn pin(v: &mut f32) {
    unsafe { core::arch::asm!("// pin {v}", v = inout(reg32) * v, options(nomem, nostack)) };
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn pin(_: &mut f32) {}

/// `f(0)`, `f(1)`, ..., `f(N - 1)` as straight-line code (`N` at most 24), up to the first
/// that returns `false`: each call inlined with its index a constant, whatever the size of the
/// body (LLVM's unroller leaves a loop rolled past its threshold, and register arrays indexed
/// by its counter then go to local memory).
#[inline(always)]
pub(crate) fn unrolled<const N: usize>(mut f: impl FnMut(usize) -> bool) {
    const { assert!(N <= 24) };
    macro_rules! calls {
        ($($i:literal)*) => { $(if $i < N && !f($i) { return; })* };
    }
    calls!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);
}

/// `if c { a } else { b }` on values: LLVM turns a select between two elements of one array
/// into a select of their addresses, which sends the array to local memory.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn select(c: bool, a: f32, b: f32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; selp.f32 {r}, {a}, {b}, p; }}",
            r = out(reg32) r, c = in(reg32) c as u32, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack))
    };
    r
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn select(c: bool, a: f32, b: f32) -> f32 {
    if c { a } else { b }
}

/// `a * b + c`, rounded once on the GPU.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn fma(a: f32, b: f32, c: f32) -> f32 {
    core::intrinsics::fmaf32(a, b, c)
}

/// `a * b + c`. Host builds only run this in tests; a separate multiply and add is close
/// enough there.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn fma(a: f32, b: f32, c: f32) -> f32 {
    a * b + c
}

/// `2^v` by the GPU's `ex2.approx.f32` (relative error about `2^-22`; `-∞` gives 0, `+∞` gives
/// `+∞`, NaN stays NaN).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn exp2(v: f32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("ex2.approx.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v, options(pure, nomem, nostack))
    };
    r
}

/// `2^v`. Host builds only run this in tests.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn exp2(v: f32) -> f32 {
    core::intrinsics::exp2f32(v)
}

/// `1 / v` by the GPU's `rcp.approx.ftz.f32` (relative error about `2^-23`).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn recip(v: f32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("rcp.approx.ftz.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v, options(pure, nomem, nostack))
    };
    r
}

/// `1 / v`.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn recip(v: f32) -> f32 {
    1.0 / v
}

/// `v` clamped to `[low, high]` by `max.NaN` and `min.NaN` (sm_80+): two instructions, and NaN
/// stays NaN (plain `max`/`min` would return the bound; compares and selects took four).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub(crate) fn clamp_nan(v: f32, low: f32, high: f32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("{{ .reg .f32 t; max.NaN.f32 t, {v}, {lo}; min.NaN.f32 {r}, t, {hi}; }}",
            r = out(reg32) r, v = in(reg32) v, lo = in(reg32) low, hi = in(reg32) high,
            options(pure, nomem, nostack))
    };
    r
}

/// `v` clamped to `[low, high]`, NaN staying NaN.
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
pub(crate) fn clamp_nan(v: f32, low: f32, high: f32) -> f32 {
    if v.is_nan() { v } else { v.max(low).min(high) }
}

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe { core::arch::nvptx::trap() }
}
