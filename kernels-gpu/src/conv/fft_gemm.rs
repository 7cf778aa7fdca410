//! FFT convolution of any grouped layer by overlap-save tiles and a per-frequency complex
//! GEMM, in three launches (`host/conv/fft_gemm.rs` runs them, with the cgemm between):
//!
//! 1. **Input spectra** (`fftgemm_input_T`): the input is cut into *units* (an image and one
//!    output tile of it): each unit's window of input, `(V-1)·stride + extent` square, sits at the
//!    origin of a `T x T` transform, zeros past it and past the image (padding costs nothing).
//!    Two units of a channel travel as the real and imaginary parts of one complex image (the
//!    filters are real, so the products keep them apart). One block per (channel, pair of
//!    units) writes its `T²` frequencies bin-major: `Z[bin][group][pair][c in group]`.
//! 2. **Per-frequency GEMM** (the batched cgemm, one product per (bin, group)):
//!    `Y[bin][g][pair][k] = Σ_c S[bin][g][k][c] · Z[bin][g][pair][c]`.
//! 3. **Output** (`fftgemm_output_T`): one block per (output channel, pair of units) gathers its
//!    `T²` frequencies, inverse-transforms them and stores the tile's `V x V` outputs (real part
//!    to the first unit, imaginary to the second), cropped to the output.
//!
//! Depthwise layers (one channel per group) skip the GEMM, whose product is a pointwise one:
//! one launch (`fftgemm_dw_T`) per (channel, pair of units) does forward transform, product
//! and inverse transform in shared memory, as `conv/fft.rs` does for whole images; its tiles
//! give a small batch more blocks than whole images would.
//!
//! `S = conj(FFT(filter)) / T²`, in the same bin-major order (`fftgemm_filter_T`, once per
//! plan), so the product is the cross-correlation and the inverse comes out normalised. Bins
//! stay digit-reversed (see [`crate::fft::square`]): nobody but these kernels reads them.
//! Output `o` of a tile is at transform position `(o - o0)·stride`: with the window `W` at
//! most `T`, nothing wraps around.

use super::fft::extent;
use crate::{
    MagicDiv,
    complex::Complex32,
    fft::{
        dft_reg,
        square::{
            Block, filter_columns, forward_head, inverse_tail, slot, smem_bytes, store_column_run, untwiddle,
            write_spectrum,
        },
    },
};
use bytemuck::{Pod, Zeroable};

/// One transform size and its three kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FftGemmSize {
    /// `fftgemm_T`, for tables.
    pub name: &'static str,
    pub input_kernel: &'static str,
    pub filter_kernel: &'static str,
    pub output_kernel: &'static str,
    /// The fused depthwise program's kernel.
    pub depthwise_kernel: &'static str,
    pub a: u32,
    pub b: u32,
    pub threads: u32,
}

impl FftGemmSize {
    pub const fn side(&self) -> u32 {
        self.a * self.b
    }

    pub const fn smem_bytes(&self) -> u32 {
        smem_bytes(self.a, self.b)
    }
}

/// Outputs per tile along one dimension for a transform side `t`: the most whose input window
/// `(V-1)·stride + extent` fits in `t` (0 where the filter alone does not).
pub const fn tile_outputs(t: u32, extent: u32, stride: u32) -> u32 {
    if extent > t { 0 } else { (t - extent) / stride + 1 }
}

/// Parameters of the three kernels. NCHW input and output, `[K, C/G, R, S]` filters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct FftGemmParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    /// `Z[bin][g][pair][c]`, `Y[bin][g][pair][k]`, `S[bin][g][k][c]` (complex).
    pub input_spectra: u64,
    pub output_spectra: u64,
    pub filter_spectra: u64,
    /// `W_T^t` for `t < T`.
    pub twiddles: u64,
    pub channels: u32,
    pub out_channels: u32,
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
    /// Outputs per tile (`V`) along each dimension.
    pub tile_h: u32,
    pub tile_w: u32,
    /// Units (images x tiles) and pairs of them.
    pub units: u32,
    pub pairs: u32,
    /// A block index into (channel, pair).
    pub pair_div: MagicDiv,
    /// A unit into (image x tile row, tile column), then into (image, tile row).
    pub tiles_w: MagicDiv,
    pub tiles_h: MagicDiv,
    /// A channel into (group, channel in group); likewise output channels.
    pub c_per_group: MagicDiv,
    pub k_per_group: MagicDiv,
    pub dil_h: MagicDiv,
    pub dil_w: MagicDiv,
    /// A store index into (tile row, tile column).
    pub tile_w_div: MagicDiv,
}

/// Where a unit's window starts in the input and which outputs it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    pub image: u32,
    /// The tile's first output row and column.
    pub out_h0: u32,
    pub out_w0: u32,
    /// The window's first input row and column (negative in the padding).
    pub in_h0: i64,
    pub in_w0: i64,
}

impl FftGemmParams {
    #[inline(always)]
    pub fn unit(&self, u: u32) -> Unit {
        let (rows, tw) = self.tiles_w.div_rem(u);
        let (image, th) = self.tiles_h.div_rem(rows);
        let (out_h0, out_w0) = (th * self.tile_h, tw * self.tile_w);
        Unit {
            image,
            out_h0,
            out_w0,
            in_h0: out_h0 as i64 * self.stride_h as i64 - self.pad_h as i64,
            in_w0: out_w0 as i64 * self.stride_w as i64 - self.pad_w as i64,
        }
    }

    /// The input window's rows (and columns): `(V-1)·stride + extent`.
    #[inline(always)]
    pub fn window(&self) -> (u32, u32) {
        (
            (self.tile_h - 1) * self.stride_h + extent(self.filter_r, self.dil_h.divisor),
            (self.tile_w - 1) * self.stride_w + extent(self.filter_s, self.dil_w.divisor),
        )
    }

    /// Complex values in one bin of `Z` (pairs x channels) and of `Y`.
    #[inline(always)]
    pub fn bin_sizes(&self) -> (u64, u64) {
        (self.pairs as u64 * self.channels as u64, self.pairs as u64 * self.out_channels as u64)
    }
}

/// Element `(row, col)` of a unit's window of `plane`, zero outside the image and the window.
#[inline(always)]
fn window_value<M: Block>(m: &mut M, p: &FftGemmParams, unit: &Unit, plane: u64, row: u32, col: u32) -> f32 {
    let (rows, cols) = p.window();
    let (ih, iw) = (unit.in_h0 + row as i64, unit.in_w0 + col as i64);
    if row >= rows || col >= cols || ih < 0 || iw < 0 || ih >= p.in_h as i64 || iw >= p.in_w as i64 {
        return 0.0;
    }
    // Within one plane: `Conv2d::geometry` keeps planes below 2^31 elements.
    m.read_real(plane + (ih as u32 * p.in_w + iw as u32) as u64)
}

/// The two units of pair `pair`, and whether the second exists.
#[inline(always)]
fn pair_units(p: &FftGemmParams, pair: u32) -> (Unit, Unit, bool) {
    (p.unit(2 * pair), p.unit(2 * pair + 1), 2 * pair + 1 < p.units)
}

/// Forward transforms of a pair's windows of `channel` (first unit real, second imaginary),
/// up to the columns' DFT_A step.
#[inline(always)]
fn forward_pair<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, channel: u32, pair: u32) {
    let (first, second, has_second) = pair_units(p, pair);
    let plane =
        |unit: &Unit| (unit.image as u64 * p.channels as u64 + channel as u64) * (p.in_h as u64 * p.in_w as u64);
    let (plane0, plane1) = (plane(&first), plane(&second));
    forward_head::<A, B, M>(
        m,
        p.window().0.min((A * B) as u32),
        #[inline(always)]
        |m, row, col| {
            let re = window_value(m, p, &first, plane0, row, col);
            let im = if has_second { window_value(m, p, &second, plane1, row, col) } else { 0.0 };
            Complex32::new(re, im)
        },
    );
}

/// From the columns' inverse DFT_B step on: the pair's tiles of output channel `k` stored
/// (real part to the first unit, imaginary to the second), cropped to the output.
#[inline(always)]
fn store_pair<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, k: u32, pair: u32) {
    inverse_tail::<A, B, M>(
        m,
        p.tile_h,
        #[inline(always)]
        |i| i * p.stride_h,
    );
    let (first, second, has_second) = pair_units(p, pair);
    let plane =
        |unit: &Unit| (unit.image as u64 * p.out_channels as u64 + k as u64) * (p.out_h as u64 * p.out_w as u64);
    let (plane0, plane1) = (plane(&first), plane(&second));
    m.for_each(
        p.tile_h * p.tile_w,
        #[inline(always)]
        |m, item| {
            let (i, j) = p.tile_w_div.div_rem(item);
            let v = m.load(slot::<A, B>(i * p.stride_h, j * p.stride_w));
            let store = #[inline(always)]
            |m: &mut M, unit: &Unit, plane: u64, value: f32| {
                let (oh, ow) = (unit.out_h0 + i, unit.out_w0 + j);
                if oh < p.out_h && ow < p.out_w {
                    m.write_real(plane + (oh * p.out_w + ow) as u64, value);
                }
            };
            store(m, &first, plane0, v.re);
            if has_second {
                store(m, &second, plane1, v.im);
            }
        },
    );
}

/// Block `block` = (channel, pair of units): the pair's windows of that channel, transformed
/// and written bin-major to `Z`.
#[inline(always)]
pub fn input_spectra<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, block: u32) {
    let (channel, pair) = p.pair_div.div_rem(block);
    forward_pair::<A, B, M>(m, p, channel, pair);
    let (group, c) = p.c_per_group.div_rem(channel);
    let c_per_group = p.c_per_group.divisor as u64;
    let at = group as u64 * (p.pairs as u64 * c_per_group) + pair as u64 * c_per_group + c as u64;
    let bin_size = p.bin_sizes().0;
    write_spectrum::<A, B, M>(
        m,
        #[inline(always)]
        |m, bin, v| m.write_complex(bin as u64 * bin_size + at, v),
    );
}

/// Block `block` = (output channel, channel in its group): that filter, dilated, transformed
/// and written bin-major to `S` as `conj(F) / T²`.
#[inline(always)]
pub fn filter_spectra<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, block: u32) {
    let n = (A * B) as u32;
    let c_per_group = p.c_per_group.divisor;
    let (k, c) = p.c_per_group.div_rem(block);
    let taps = p.filter_r as u64 * p.filter_s as u64;
    let extent_w = extent(p.filter_s, p.dil_w.divisor);
    forward_head::<A, B, M>(
        m,
        extent(p.filter_r, p.dil_h.divisor),
        #[inline(always)]
        |m, row, col| {
            let (r, r_off) = p.dil_h.div_rem(row);
            let (s, s_off) = p.dil_w.div_rem(col);
            if col >= extent_w || r_off != 0 || s_off != 0 {
                return Complex32::ZERO;
            }
            Complex32::new(m.read_real(block as u64 * taps + r as u64 * p.filter_s as u64 + s as u64), 0.0)
        },
    );
    let scale = 1.0 / (n as f32 * n as f32);
    let bin_size = p.out_channels as u64 * c_per_group as u64;
    let at = k as u64 * c_per_group as u64 + c as u64;
    write_spectrum::<A, B, M>(
        m,
        #[inline(always)]
        |m, bin, v| m.write_complex(bin as u64 * bin_size + at, v.conj().scale(scale)),
    );
}

/// Block `block` = (output channel, pair of units): the pair's frequencies gathered from `Y`,
/// inverse-transformed, and the tiles' outputs stored.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn output_tiles<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, block: u32) {
    let n = (A * B) as u32;
    let (k, pair) = p.pair_div.div_rem(block);
    let (group, kg) = p.k_per_group.div_rem(k);
    let k_per_group = p.k_per_group.divisor as u64;
    let at = group as u64 * (p.pairs as u64 * k_per_group) + pair as u64 * k_per_group + kg as u64;
    let bin_size = p.bin_sizes().1;
    m.for_each(
        n * B as u32,
        #[inline(always)]
        |m, item| {
            let (kb, col) = (item / n, item % n);
            let mut v = [Complex32::ZERO; A];
            for ka in 0..A {
                let bin = (ka as u32 + A as u32 * kb) * n + col;
                v[ka] = m.read_complex(bin as u64 * bin_size + at);
            }
            dft_reg::<A, true>(&mut v);
            untwiddle(m, &mut v, kb);
            store_column_run::<A, B, M>(m, kb, col, &v);
        },
    );
    m.barrier();
    store_pair::<A, B, M>(m, p, k, pair);
}

/// Block `block` = (channel, pair of units) of a depthwise layer: forward transforms, the
/// product with the channel's spectrum `S[bin][channel]`, inverse transforms and the tiles'
/// outputs, in one block.
#[inline(always)]
pub fn fused_depthwise<const A: usize, const B: usize, M: Block>(m: &mut M, p: &FftGemmParams, block: u32) {
    let (channel, pair) = p.pair_div.div_rem(block);
    forward_pair::<A, B, M>(m, p, channel, pair);
    let channels = p.channels as u64;
    filter_columns::<A, B, M>(
        m,
        #[inline(always)]
        |m, bin| m.read_complex(bin as u64 * channels + channel as u64),
    );
    store_pair::<A, B, M>(m, p, channel, pair);
}

macro_rules! fft_gemm_sizes {
    ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
        /// Every transform size in the PTX, smallest first.
        pub const FFT_GEMM_SIZES: &[FftGemmSize] = &[$(FftGemmSize {
            name: concat!("fftgemm_", stringify!($n)),
            input_kernel: concat!("fftgemm_input_", stringify!($n)),
            filter_kernel: concat!("fftgemm_filter_", stringify!($n)),
            output_kernel: concat!("fftgemm_output_", stringify!($n)),
            depthwise_kernel: concat!("fftgemm_dw_", stringify!($n)),
            a: $a,
            b: $b,
            threads: $threads,
        }),*];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::FftGemmParams;
            use crate::{fft::square::GpuBlock, prelude::block_idx_x};
            $(
                const _: () = {
                    #[unsafe(export_name = concat!("fftgemm_input_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn input(p: FftGemmParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.x, 0, 0, p.input_spectra);
                        super::input_spectra::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fftgemm_filter_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn filter(p: FftGemmParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.w, 0, 0, p.filter_spectra);
                        super::filter_spectra::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fftgemm_dw_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn depthwise(p: FftGemmParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.x, p.filter_spectra, p.y, 0);
                        super::fused_depthwise::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fftgemm_output_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn output(p: FftGemmParams) {
                        let mut m = GpuBlock::new(p.twiddles, 0, p.output_spectra, p.y, 0);
                        super::output_tiles::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }
                };
            )*
        }
    };
}

crate::square_sizes!(fft_gemm_sizes);
