//! Fused FFT convolution of depthwise layers (`groups = C = K`): one block per channel and
//! pair of images does forward 2D FFT → product with the channel's cached filter spectrum →
//! inverse 2D FFT in shared memory, reading the input once and writing the output once.
//! Launched by `host/conv/fft.rs`.
//!
//! - **Pairs**: two real images of one channel travel as the real and imaginary parts of one
//!   complex image. The filter is real, so the convolution keeps them apart and the pair costs
//!   one complex transform instead of two.
//! - **Geometry**: the image sits at the origin of an `N x N` transform and the
//!   (dilated) filter likewise; the product with the conjugated filter spectrum is the circular
//!   cross-correlation, which equals the zero-padded one wherever `N` is at least
//!   [`min_side`]. Output `o` is circular position `o·stride - pad (mod N)`: padding, stride
//!   and the crop cost nothing but the choice of what to load and store.
//! - **Transforms**: each side `N = A·B` is a four-step FFT: length-`B` DFTs in registers
//!   (`dft_reg`), twiddles `W_N^{a·kb}`, length-`A` DFTs in registers. Each step
//!   reads and writes the same shared-memory slots, so it needs no second buffer, and the
//!   frequencies come out digit-reversed (`kb + B·ka` at position `ka + A·kb`). That order is
//!   never undone: the filter spectrum is stored in it and the inverse consumes it (its
//!   steps run in the opposite order). Within a row, position `a + A·b` sits at slot
//!   `a + (A+1)·b`, so that both steps' accesses avoid bank conflicts.
//! - **Phases** (a barrier between each): forward rows (DFT_B, then DFT_A) over the input's
//!   rows only; forward columns, DFT_B; then in one pass per column, DFT_A, the product with
//!   the spectrum and the inverse DFT_A; inverse columns, DFT_B; inverse rows over the output
//!   rows only; the store of the cropped, strided output.
//!
//! The block's program is written once, generic over [`Block`] (the memory it touches and
//! how its threads share out work items), so that `tests/fftconv.rs` runs the very same code
//! on the CPU, checks it against an f64 convolution and proves the barriers sufficient.

use crate::{MagicDiv, complex::Complex32, fft::dft_reg};
use bytemuck::{Pod, Zeroable};

/// One transform size: `N = a·b` per side, and its two kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FftConvTile {
    /// The convolution kernel's entry point.
    pub name: &'static str,
    /// The filter-spectrum kernel's entry point.
    pub spectrum_kernel: &'static str,
    pub a: u32,
    pub b: u32,
    pub threads: u32,
}

impl FftConvTile {
    /// The transform's side `N`.
    pub const fn side(&self) -> u32 {
        self.a * self.b
    }

    /// Shared-memory slots per row: `N` plus one slot after every `A` (see the module doc).
    pub const fn pitch(&self) -> u32 {
        (self.a + 1) * self.b
    }

    pub const fn smem_bytes(&self) -> u32 {
        self.side() * self.pitch() * size_of::<Complex32>() as u32
    }

    /// Complex values of one channel's filter spectrum.
    pub const fn spectrum_len(&self) -> usize {
        (self.side() * self.side()) as usize
    }
}

/// The smallest transform side along one dimension that keeps the circular correlation free
/// of wrap-around: the padded-left input (`input + pad`), the filter's extent, and distinct
/// positions for every output.
pub const fn min_side(input: u32, pad: u32, extent: u32, out: u32, stride: u32) -> u64 {
    let padded = input as u64 + pad as u64;
    let outputs = (out as u64 - 1) * stride as u64 + 1;
    let side = if padded > extent as u64 { padded } else { extent as u64 };
    if side > outputs { side } else { outputs }
}

/// The filter's extent along one dimension: `(taps - 1)·dilation + 1`.
pub const fn extent(taps: u32, dilation: u32) -> u32 {
    (taps - 1) * dilation + 1
}

/// Parameters of both kernels of a [`FftConvTile`]. NCHW input and output, `[C, 1, R, S]`
/// filters; the spectrum is `[C][N][N]` complex in the transform's (digit-reversed) order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct FftConvParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub spectrum: u64,
    /// `W_N^t` for `t < N` (interleaved complex f32, computed in f64 on the host).
    pub twiddles: u64,
    pub images: u32,
    pub channels: u32,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub stride_h: u32,
    pub stride_w: u32,
    pub filter_r: u32,
    pub filter_s: u32,
    /// Convolution: a block index into (channel, pair of images).
    pub pairs: MagicDiv,
    /// A store index into (output row, column).
    pub out_w_div: MagicDiv,
    pub dil_h: MagicDiv,
    pub dil_w: MagicDiv,
}

impl FftConvParams {
    /// Pairs of images per channel.
    pub fn pair_count(&self) -> u32 {
        self.images.div_ceil(2)
    }

    pub fn extent_h(&self) -> u32 {
        extent(self.filter_r, self.dil_h.divisor)
    }

    pub fn extent_w(&self) -> u32 {
        extent(self.filter_s, self.dil_w.divisor)
    }
}

/// The circular position of output `o`: `o·stride - pad (mod n)`, for `n` ≥ [`min_side`].
#[inline(always)]
pub fn position(o: u32, stride: u32, pad: u32, n: u32) -> u32 {
    let t = o * stride;
    if t >= pad { t - pad } else { t + n - pad }
}

/// What the block program touches, and how a block's threads share out work items.
pub trait Block {
    /// Runs `f(self, item)` for every `item < count`, each on one thread of the block.
    fn for_each(&mut self, count: u32, f: impl FnMut(&mut Self, u32));
    /// Every thread's earlier shared-memory accesses happen before any later one.
    fn barrier(&mut self);
    fn load(&mut self, slot: u32) -> Complex32;
    fn store(&mut self, slot: u32, v: Complex32);
    /// Element `offset` of the real tensor being transformed (the input, or the filters).
    fn source(&mut self, offset: u64) -> f32;
    fn spectrum(&mut self, offset: u64) -> Complex32;
    fn store_spectrum(&mut self, offset: u64, v: Complex32);
    /// `W_N^t`.
    fn twiddle(&mut self, t: u32) -> Complex32;
    fn store_output(&mut self, offset: u64, v: f32);
}

/// Slot of row `row`, column position `col`.
#[inline(always)]
fn slot<const A: usize, const B: usize>(row: u32, col: u32) -> u32 {
    row * ((A as u32 + 1) * B as u32) + col + col / A as u32
}

/// Forward transforms of rows `< rows_in` (`value(row, col)` real-valued pairs; rows past
/// them zero) and the first step of the column transforms. `value` is only asked for
/// columns below `N`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn forward<const A: usize, const B: usize, M: Block>(
    m: &mut M,
    rows_in: u32,
    value: impl Fn(&mut M, u32, u32) -> Complex32,
) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    // Rows: DFT_B over the strided elements, twiddle.
    m.for_each(n * a_len, |m, item| {
        let (row, a) = (item / a_len, item % a_len);
        let mut v = [Complex32::ZERO; B];
        if row < rows_in {
            for b in 0..B {
                v[b] = value(m, row, a + a_len * b as u32);
            }
            dft_reg::<B, false>(&mut v);
            for kb in 1..B {
                v[kb] = v[kb] * m.twiddle(a * kb as u32);
            }
        }
        for kb in 0..B {
            m.store(slot::<A, B>(row, a + a_len * kb as u32), v[kb]);
        }
    });
    m.barrier();
    // Rows: DFT_A over contiguous runs (rows past rows_in are zero and stay so).
    m.for_each(rows_in * b_len, |m, item| {
        let (row, kb) = (item / b_len, item % b_len);
        let mut v = [Complex32::ZERO; A];
        for a in 0..A {
            v[a] = m.load(slot::<A, B>(row, a as u32 + a_len * kb));
        }
        dft_reg::<A, false>(&mut v);
        for a in 0..A {
            m.store(slot::<A, B>(row, a as u32 + a_len * kb), v[a]);
        }
    });
    m.barrier();
    // Columns: DFT_B, twiddle.
    m.for_each(n * a_len, |m, item| {
        let (a, col) = (item / n, item % n);
        let mut v = [Complex32::ZERO; B];
        for b in 0..B {
            v[b] = m.load(slot::<A, B>(a + a_len * b as u32, col));
        }
        dft_reg::<B, false>(&mut v);
        for kb in 0..B {
            if kb > 0 {
                v[kb] = v[kb] * m.twiddle(a * kb as u32);
            }
            m.store(slot::<A, B>(a + a_len * kb as u32, col), v[kb]);
        }
    });
    m.barrier();
}

/// The block program of the convolution kernel: block `block` is (channel, pair of images).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn convolve<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftConvParams, block: u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    let (channel, pair) = p.pairs.div_rem(block);
    let first = 2 * pair;
    let second = first + 1 < p.images;
    let plane =
        |image: u32, h: u32, w: u32| (image as u64 * p.channels as u64 + channel as u64) * (h as u64 * w as u64);
    let (x0, x1) = (plane(first, p.in_h, p.in_w), plane(first + 1, p.in_h, p.in_w));
    forward::<A, B, M>(m, p.in_h, |m, row, col| {
        if col >= p.in_w {
            return Complex32::ZERO;
        }
        // Within one plane: `Conv2d::geometry` keeps planes below 2^31 elements.
        let at = (row * p.in_w + col) as u64;
        let im = if second { m.source(x1 + at) } else { 0.0 };
        Complex32::new(m.source(x0 + at), im)
    });
    // Columns: DFT_A, the product with the spectrum, inverse DFT_A, conjugate twiddle.
    let spectrum = channel as u64 * (n as u64 * n as u64);
    m.for_each(n * b_len, |m, item| {
        let (kb, col) = (item / n, item % n);
        let mut v = [Complex32::ZERO; A];
        for a in 0..A {
            v[a] = m.load(slot::<A, B>(a as u32 + a_len * kb, col));
        }
        dft_reg::<A, false>(&mut v);
        for ka in 0..A {
            let at = spectrum + ((ka as u32 + a_len * kb) * n + col) as u64;
            v[ka] = v[ka] * m.spectrum(at);
        }
        dft_reg::<A, true>(&mut v);
        for a in 0..A {
            if a > 0 {
                v[a] = v[a] * m.twiddle(a as u32 * kb).conj();
            }
            m.store(slot::<A, B>(a as u32 + a_len * kb, col), v[a]);
        }
    });
    m.barrier();
    // Columns: inverse DFT_B.
    m.for_each(n * a_len, |m, item| {
        let (a, col) = (item / n, item % n);
        let mut v = [Complex32::ZERO; B];
        for kb in 0..B {
            v[kb] = m.load(slot::<A, B>(a + a_len * kb as u32, col));
        }
        dft_reg::<B, true>(&mut v);
        for b in 0..B {
            m.store(slot::<A, B>(a + a_len * b as u32, col), v[b]);
        }
    });
    m.barrier();
    // Output rows only: inverse DFT_A, conjugate twiddle.
    let out_row = |o: u32| position(o, p.stride_h, p.pad_h, n);
    m.for_each(p.out_h * b_len, |m, item| {
        let (o, kb) = (item / b_len, item % b_len);
        let row = out_row(o);
        let mut v = [Complex32::ZERO; A];
        for ka in 0..A {
            v[ka] = m.load(slot::<A, B>(row, ka as u32 + a_len * kb));
        }
        dft_reg::<A, true>(&mut v);
        for a in 0..A {
            if a > 0 {
                v[a] = v[a] * m.twiddle(a as u32 * kb).conj();
            }
            m.store(slot::<A, B>(row, a as u32 + a_len * kb), v[a]);
        }
    });
    m.barrier();
    // Output rows: inverse DFT_B.
    m.for_each(p.out_h * a_len, |m, item| {
        let (o, a) = (item / a_len, item % a_len);
        let row = out_row(o);
        let mut v = [Complex32::ZERO; B];
        for kb in 0..B {
            v[kb] = m.load(slot::<A, B>(row, a + a_len * kb as u32));
        }
        dft_reg::<B, true>(&mut v);
        for b in 0..B {
            m.store(slot::<A, B>(row, a + a_len * b as u32), v[b]);
        }
    });
    m.barrier();
    // The cropped, strided output: real part to the first image, imaginary to the second.
    let (y0, y1) = (plane(first, p.out_h, p.out_w), plane(first + 1, p.out_h, p.out_w));
    m.for_each(p.out_h * p.out_w, |m, item| {
        let (o, ow) = p.out_w_div.div_rem(item);
        let v = m.load(slot::<A, B>(out_row(o), position(ow, p.stride_w, p.pad_w, n)));
        let at = item as u64;
        m.store_output(y0 + at, v.re);
        if second {
            m.store_output(y1 + at, v.im);
        }
    });
}

/// The block program of the spectrum kernel: block `channel` transforms that channel's
/// (dilated) filter and stores `conj(F) / N²`, so that the convolution's product is the
/// cross-correlation and its inverse comes out normalised.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn spectrum<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftConvParams, channel: u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    let taps = p.filter_r as u64 * p.filter_s as u64;
    let (extent_h, extent_w) = (p.extent_h(), p.extent_w());
    forward::<A, B, M>(m, extent_h, |m, row, col| {
        let (r, r_off) = p.dil_h.div_rem(row);
        let (s, s_off) = p.dil_w.div_rem(col);
        if col >= extent_w || r_off != 0 || s_off != 0 {
            return Complex32::ZERO;
        }
        Complex32::new(m.source(channel as u64 * taps + r as u64 * p.filter_s as u64 + s as u64), 0.0)
    });
    let scale = 1.0 / (n as f32 * n as f32);
    let base = channel as u64 * (n as u64 * n as u64);
    m.for_each(n * b_len, |m, item| {
        let (kb, col) = (item / n, item % n);
        let mut v = [Complex32::ZERO; A];
        for a in 0..A {
            v[a] = m.load(slot::<A, B>(a as u32 + a_len * kb, col));
        }
        dft_reg::<A, false>(&mut v);
        for ka in 0..A {
            let at = base + ((ka as u32 + a_len * kb) * n + col) as u64;
            m.store_spectrum(at, v[ka].conj().scale(scale));
        }
    });
}

macro_rules! fftconv_tiles {
    ($(($name:ident, $spectrum:ident, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
        /// Every transform size in the PTX, smallest first.
        pub const FFTCONV_TILES: &[FftConvTile] = &[$(FftConvTile {
            name: stringify!($name), spectrum_kernel: stringify!($spectrum), a: $a, b: $b, threads: $threads,
        }),*];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::{FftConvParams, device::GpuBlock};
            $(
                #[unsafe(no_mangle)]
                pub unsafe extern "ptx-kernel" fn $name(p: FftConvParams) {
                    let block = crate::prelude::block_idx_x();
                    super::convolve::<$a, $b, _>(&mut GpuBlock::new(&p, p.x), &p, block);
                }

                #[unsafe(no_mangle)]
                pub unsafe extern "ptx-kernel" fn $spectrum(p: FftConvParams) {
                    let channel = crate::prelude::block_idx_x();
                    super::spectrum::<$a, $b, _>(&mut GpuBlock::new(&p, p.w), &p, channel);
                }
            )*
        }
    };
}

// `a` is the even factor where there is one: the DFT_A step's threads read runs of `a`
// slots `a + 1` apart, which is conflict-free for odd `a + 1`.
fftconv_tiles![
    (fftconv_dw_12, fftconv_spectrum_12, 4, 3, 128),
    (fftconv_dw_14, fftconv_spectrum_14, 2, 7, 128),
    (fftconv_dw_16, fftconv_spectrum_16, 4, 4, 128),
    (fftconv_dw_20, fftconv_spectrum_20, 4, 5, 128),
    (fftconv_dw_24, fftconv_spectrum_24, 8, 3, 128),
    (fftconv_dw_28, fftconv_spectrum_28, 4, 7, 128),
    (fftconv_dw_32, fftconv_spectrum_32, 8, 4, 256),
    (fftconv_dw_36, fftconv_spectrum_36, 4, 9, 256),
    (fftconv_dw_40, fftconv_spectrum_40, 8, 5, 256),
    (fftconv_dw_42, fftconv_spectrum_42, 6, 7, 256),
    (fftconv_dw_48, fftconv_spectrum_48, 8, 6, 256),
    (fftconv_dw_56, fftconv_spectrum_56, 8, 7, 256),
    (fftconv_dw_64, fftconv_spectrum_64, 8, 8, 256),
    (fftconv_dw_72, fftconv_spectrum_72, 8, 9, 256),
    (fftconv_dw_80, fftconv_spectrum_80, 8, 10, 256),
    (fftconv_dw_84, fftconv_spectrum_84, 12, 7, 256),
    (fftconv_dw_96, fftconv_spectrum_96, 8, 12, 512),
    (fftconv_dw_112, fftconv_spectrum_112, 16, 7, 512),
    (fftconv_dw_120, fftconv_spectrum_120, 12, 10, 512),
    (fftconv_dw_128, fftconv_spectrum_128, 16, 8, 512),
    (fftconv_dw_144, fftconv_spectrum_144, 16, 9, 512),
    (fftconv_dw_160, fftconv_spectrum_160, 16, 10, 512),
];

/// The GPU's [`Block`]: shared memory from the dynamic segment, global memory read through
/// the non-coherent path.
#[cfg(target_arch = "nvptx64")]
mod device {
    use super::{Block, FftConvParams};
    use crate::{complex::Complex32, prelude::*};

    pub struct GpuBlock {
        smem: u32,
        source: u64,
        spectrum: u64,
        twiddles: u64,
        output: u64,
    }

    impl GpuBlock {
        #[inline(always)]
        pub fn new(p: &FftConvParams, source: u64) -> Self {
            GpuBlock {
                smem: smem_base(),
                source: to_global(source),
                spectrum: to_global(p.spectrum),
                twiddles: to_global(p.twiddles),
                output: to_global(p.y),
            }
        }
    }

    impl Block for GpuBlock {
        #[inline(always)]
        fn for_each(&mut self, count: u32, mut f: impl FnMut(&mut Self, u32)) {
            let (mut item, step) = (thread_idx_x(), block_dim_x());
            while item < count {
                f(self, item);
                item += step;
            }
        }

        #[inline(always)]
        fn barrier(&mut self) {
            sync_threads();
        }

        #[inline(always)]
        fn load(&mut self, slot: u32) -> Complex32 {
            let [re, im] = ld_shared_f32x2(self.smem + 8 * slot);
            Complex32 { re, im }
        }

        #[inline(always)]
        fn store(&mut self, slot: u32, v: Complex32) {
            st_shared_f32x2(self.smem + 8 * slot, [v.re, v.im]);
        }

        #[inline(always)]
        fn source(&mut self, offset: u64) -> f32 {
            ldg_nc_f32(self.source + 4 * offset)
        }

        #[inline(always)]
        fn spectrum(&mut self, offset: u64) -> Complex32 {
            let [re, im] = ldg_nc_f32x2(self.spectrum + 8 * offset);
            Complex32 { re, im }
        }

        #[inline(always)]
        fn store_spectrum(&mut self, offset: u64, v: Complex32) {
            stg_f32x2(self.spectrum + 8 * offset, [v.re, v.im]);
        }

        #[inline(always)]
        fn twiddle(&mut self, t: u32) -> Complex32 {
            let [re, im] = ldg_nc_f32x2(self.twiddles + 8 * t as u64);
            Complex32 { re, im }
        }

        #[inline(always)]
        fn store_output(&mut self, offset: u64, v: f32) {
            stg_f32(self.output + 4 * offset, v);
        }
    }
}
