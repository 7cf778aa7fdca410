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
//! - **Transforms**: [`crate::fft::square`]'s four-step transforms in shared memory. The
//!   spectrum stays digit-reversed: the filter spectrum is stored in that order and the
//!   inverse consumes it.
//! - **Phases** (a barrier between each): forward rows over the input's rows only, the
//!   columns' DFT_B step; then in one pass per column, the DFT_A step, the product with the
//!   spectrum and the inverse DFT_A step; inverse columns; inverse rows over the output rows
//!   only; the store of the cropped, strided output.
//!
//! The block programs are generic over [`Block`], so `tests/fftconv.rs` runs them on the CPU
//! against an f64 convolution and proves the barriers sufficient.

use crate::{
    MagicDiv,
    complex::Complex32,
    fft::square::{Block, filter_columns, forward_head, inverse_tail, slot, smem_bytes, write_spectrum},
};
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

    pub const fn smem_bytes(&self) -> u32 {
        smem_bytes(self.a, self.b)
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
pub fn circular_position(o: u32, stride: u32, pad: u32, n: u32) -> u32 {
    let t = o * stride;
    if t >= pad { t - pad } else { t + n - pad }
}

/// The block program of the convolution kernel: block `block` is (channel, pair of images).
#[inline(always)]
pub fn convolve<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftConvParams, block: u32) {
    let n = (A * B) as u32;
    let (channel, pair) = p.pairs.div_rem(block);
    let first = 2 * pair;
    let second = first + 1 < p.images;
    let plane =
        |image: u32, h: u32, w: u32| (image as u64 * p.channels as u64 + channel as u64) * (h as u64 * w as u64);
    let (x0, x1) = (plane(first, p.in_h, p.in_w), plane(first + 1, p.in_h, p.in_w));
    forward_head::<A, B, M>(
        m,
        p.in_h,
        #[inline(always)]
        |m, row, col| {
            if col >= p.in_w {
                return Complex32::ZERO;
            }
            // Within one plane: `Conv2d::geometry` keeps planes below 2^31 elements.
            let at = (row * p.in_w + col) as u64;
            let im = if second { m.read_real(x1 + at) } else { 0.0 };
            Complex32::new(m.read_real(x0 + at), im)
        },
    );
    // Columns: DFT_A, the product with the spectrum, inverse DFT_A, conjugate twiddle.
    let spectrum = channel as u64 * (n as u64 * n as u64);
    filter_columns::<A, B, M>(
        m,
        #[inline(always)]
        |m, bin| m.read_complex(spectrum + bin as u64),
    );
    let out_row = #[inline(always)]
    |o: u32| circular_position(o, p.stride_h, p.pad_h, n);
    inverse_tail::<A, B, M>(m, p.out_h, out_row);
    // The cropped, strided output: real part to the first image, imaginary to the second.
    let (y0, y1) = (plane(first, p.out_h, p.out_w), plane(first + 1, p.out_h, p.out_w));
    m.for_each(
        p.out_h * p.out_w,
        #[inline(always)]
        |m, item| {
            let (o, ow) = p.out_w_div.div_rem(item);
            let v = m.load(slot::<A, B>(out_row(o), circular_position(ow, p.stride_w, p.pad_w, n)));
            let at = item as u64;
            m.write_real(y0 + at, v.re);
            if second {
                m.write_real(y1 + at, v.im);
            }
        },
    );
}

/// The block program of the spectrum kernel: block `channel` transforms that channel's
/// (dilated) filter and stores `conj(F) / N²`, so that the convolution's product is the
/// cross-correlation and its inverse comes out normalised.
#[inline(always)]
pub fn spectrum<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftConvParams, channel: u32) {
    let n = (A * B) as u32;
    let taps = p.filter_r as u64 * p.filter_s as u64;
    let (extent_h, extent_w) = (p.extent_h(), p.extent_w());
    forward_head::<A, B, M>(
        m,
        extent_h,
        #[inline(always)]
        |m, row, col| {
            let (r, r_off) = p.dil_h.div_rem(row);
            let (s, s_off) = p.dil_w.div_rem(col);
            if col >= extent_w || r_off != 0 || s_off != 0 {
                return Complex32::ZERO;
            }
            Complex32::new(m.read_real(channel as u64 * taps + r as u64 * p.filter_s as u64 + s as u64), 0.0)
        },
    );
    let scale = 1.0 / (n as f32 * n as f32);
    let base = channel as u64 * (n as u64 * n as u64);
    write_spectrum::<A, B, M>(
        m,
        #[inline(always)]
        |m, bin, v| m.write_complex(base + bin as u64, v.conj().scale(scale)),
    );
}

macro_rules! fftconv_tiles {
    ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
        /// Every transform size in the PTX, smallest first.
        pub const FFTCONV_TILES: &[FftConvTile] = &[$(FftConvTile {
            name: concat!("fftconv_dw_", stringify!($n)),
            spectrum_kernel: concat!("fftconv_spectrum_", stringify!($n)),
            a: $a,
            b: $b,
            threads: $threads,
        }),*];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::FftConvParams;
            use crate::{fft::square::GpuBlock, prelude::block_idx_x};
            $(
                const _: () = {
                    #[unsafe(export_name = concat!("fftconv_dw_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn convolve(p: FftConvParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.x, p.spectrum, p.y, 0);
                        super::convolve::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fftconv_spectrum_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn spectrum(p: FftConvParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.w, 0, 0, p.spectrum);
                        super::spectrum::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }
                };
            )*
        }
    };
}

crate::square_sizes!(fftconv_tiles);
