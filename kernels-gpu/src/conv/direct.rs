//! Grouped direct convolution, forward, f32, NCHW: the kernel ABI, its tile math and (on the
//! GPU) the kernels. Launched by `host/conv/direct.rs`.
//!
//! Work split: the output pixels of all images form one flat range (`n * out_h * out_w`), so
//! small feature maps (7x7, 14x14) still fill whole blocks. Each thread computes
//! `px_per_thread` pixels for `k_per_thread` consecutive output channels of one group, so one
//! shared-memory weight vector feeds `px_per_thread` pixels and one input value feeds
//! `k_per_thread` FMAs. Two ways of picking a thread's pixels ([`TileShape`]):
//! - `Scattered`: pixels `BLOCK_THREADS` apart in the flat range; any stride and dilation.
//! - `RowWindow`: adjacent pixels of one output row. With stride and dilation 1 along the
//!   width their receptive fields overlap, so a register window slides along the input row:
//!   one load per filter tap feeds every pixel of the thread.
//!
//! The filter taps of the group (`c_per_group * R * S`, flattened) stream through shared
//! memory in chunks, so any filter size (1x1 ... 64x64 and beyond, rectangular) takes the same
//! path. Grid: x = pixel tiles, z = (group, k-tile) packed; z and the pixel index are unpacked
//! with magic division. A launch covers at most [`super::MAX_GRID_Z`] z-indices from `z_base`
//! on; the host issues as many launches as the packed range needs.

use crate::{MagicDiv, conv::epilogue::ModeEntries};
use bytemuck::{Pod, Zeroable};

/// Threads per block of every direct kernel.
pub const BLOCK_THREADS: u32 = 128;
/// Shared memory one block may use for its chunk of weights.
pub const SMEM_BUDGET_BYTES: u32 = 16 * 1024;

/// Parameters of every direct forward kernel, passed by value. Addresses are device
/// pointers; every extent is validated by the host to fit the kernel's index arithmetic
/// (`n * out_h * out_w`, planes and per-group tap counts below 2^31).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DirectFwdParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub window: super::Window,
    pub channels: u32,
    pub out_channels: u32,
    pub c_per_group: u32,
    pub k_per_group: u32,
    /// Output pixels of all images: `n * out_h * out_w`.
    pub batch_pixels: u32,
    /// Row-window tiles: output rows of all images times `row_groups`.
    pub batch_row_groups: u32,
    /// Filter taps per shared-memory chunk (`SMEM_BUDGET_BYTES / 4 / k_per_thread` at most).
    pub taps_per_chunk: u32,
    /// Packed z-index of this launch's `blockIdx.z == 0`.
    pub z_base: u32,
    /// Divides a packed z-index by the number of k-tiles per group.
    pub k_tiles: MagicDiv,
    /// Divides a flat pixel index by `out_h * out_w`.
    pub out_plane: MagicDiv,
    /// Divides a pixel of one image by `out_w`.
    pub out_w_div: MagicDiv,
    /// Row-window tiles: divides by the thread groups per output row, `ceil(out_w / px)`.
    pub row_groups: MagicDiv,
    /// Divides by `out_h`.
    pub out_h_div: MagicDiv,
    pub epilogue: super::epilogue::EpilogueParams,
}

/// The channels one block works on, unpacked from its packed z-index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCoords {
    pub group: u32,
    pub k_tile: u32,
}

/// The first pixel of a row-window thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCoords {
    pub image: u32,
    pub oh: u32,
    pub ow: u32,
}

/// One output pixel of the flat range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelCoords {
    pub image: u32,
    /// `oh * out_w + ow`
    pub pixel: u32,
    pub oh: u32,
    pub ow: u32,
}

impl DirectFwdParams {
    /// Inverse of `group * k_tiles + k_tile`.
    #[inline(always)]
    pub fn block_coords(&self, z: u32) -> BlockCoords {
        let (group, k_tile) = self.k_tiles.div_rem(z);
        BlockCoords { group, k_tile }
    }

    /// Inverse of `(image * out_h + oh) * out_w + ow`.
    #[inline(always)]
    pub fn pixel_coords(&self, flat: u32) -> PixelCoords {
        let (image, pixel) = self.out_plane.div_rem(flat);
        let (oh, ow) = self.out_w_div.div_rem(pixel);
        PixelCoords { image, pixel, oh, ow }
    }

    /// Inverse of `(image * out_h + oh) * row_groups + ow / px`, for a row-window tile of `px`.
    #[inline(always)]
    pub fn row_coords(&self, flat: u32, px: u32) -> RowCoords {
        let (image_row, group) = self.row_groups.div_rem(flat);
        let (image, oh) = self.out_h_div.div_rem(image_row);
        RowCoords { image, oh, ow: group * px }
    }
}

/// How a tile assigns output pixels to a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileShape {
    /// `px_per_thread` pixels `BLOCK_THREADS` apart in the flat pixel range.
    Scattered,
    /// `px_per_thread` adjacent pixels of one output row (stride and dilation 1 along width).
    RowWindow,
}

/// One tile shape of the direct kernel; each is three PTX entry points, one per store mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectTile {
    /// The variant's name, its plain entry point's.
    pub name: &'static str,
    pub entries: ModeEntries,
    pub shape: TileShape,
    pub k_per_thread: u32,
    pub px_per_thread: u32,
}

impl DirectTile {
    /// Whether this tile computes convolutions with this width stride and dilation.
    pub const fn supports(&self, stride_w: u32, dil_w: u32) -> bool {
        match self.shape {
            TileShape::Scattered => true,
            TileShape::RowWindow => stride_w == 1 && dil_w == 1,
        }
    }

    /// Blocks along the grid's x for `n` images of `out_h x out_w` outputs.
    pub const fn grid_x(&self, n: u64, out_h: u64, out_w: u64) -> u64 {
        match self.shape {
            TileShape::Scattered => (n * out_h * out_w).div_ceil(self.px_per_thread as u64 * BLOCK_THREADS as u64),
            TileShape::RowWindow => {
                (n * out_h * out_w.div_ceil(self.px_per_thread as u64)).div_ceil(BLOCK_THREADS as u64)
            }
        }
    }

    pub const fn k_tiles(&self, k_per_group: u32) -> u32 {
        k_per_group.div_ceil(self.k_per_thread)
    }

    /// Taps per shared-memory chunk for a group of `taps` (= C/G * R * S) filter taps.
    pub const fn taps_per_chunk(&self, taps: u32) -> u32 {
        let cap = SMEM_BUDGET_BYTES / 4 / self.k_per_thread;
        if taps < cap { taps } else { cap }
    }

    pub const fn smem_bytes(&self, taps_per_chunk: u32) -> u32 {
        taps_per_chunk * self.k_per_thread * 4
    }
}

macro_rules! direct_fwd_variants {
    ($(($name:ident, $shape:ident, $kernel:ident, $kt:literal, $px:literal)),* $(,)?) => {
        /// Every tile variant in the PTX, by entry-point name.
        pub const DIRECT_FWD_VARIANTS: &[DirectTile] = &[
            $(DirectTile {
                name: stringify!($name),
                entries: crate::mode_entries!($name),
                shape: TileShape::$shape,
                k_per_thread: $kt,
                px_per_thread: $px,
            }),*
        ];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            $(crate::mode_entry_points!($name, super::DirectFwdParams, super::kernel::$kernel, [$kt, $px]);)*
        }
    };
}

direct_fwd_variants!(
    (direct_fwd_k1_p1, Scattered, scattered, 1, 1),
    (direct_fwd_k1_p4, Scattered, scattered, 1, 4),
    (direct_fwd_k2_p1, Scattered, scattered, 2, 1),
    (direct_fwd_k2_p4, Scattered, scattered, 2, 4),
    (direct_fwd_k4_p1, Scattered, scattered, 4, 1),
    (direct_fwd_k4_p4, Scattered, scattered, 4, 4),
    (direct_fwd_k8_p1, Scattered, scattered, 8, 1),
    (direct_fwd_k8_p4, Scattered, scattered, 8, 4),
    (direct_fwd_rows_k1_p8, RowWindow, row_window, 1, 8),
    (direct_fwd_rows_k2_p4, RowWindow, row_window, 2, 4),
    (direct_fwd_rows_k4_p4, RowWindow, row_window, 4, 4),
    (direct_fwd_rows_k8_p4, RowWindow, row_window, 8, 4),
);

// Register arrays are indexed in lockstep by compile-time-constant loop counters (fully
// unrolled); iterator chains over several of them would hide that.
#[cfg(target_arch = "nvptx64")]
#[allow(clippy::needless_range_loop)]
mod kernel {
    use super::{BlockCoords, DirectFwdParams};
    use crate::conv::epilogue::{PLAIN, SMOOTH};
    use crate::prelude::*;
    use core::intrinsics::fmaf32;

    /// `KT` consecutive weights of one tap from shared memory (16-byte loads when possible).
    #[inline(always)]
    fn tap_weights<const KT: usize>(addr: u32) -> [f32; KT] {
        let mut w = [0.0f32; KT];
        if KT.is_multiple_of(4) {
            for q in 0..KT / 4 {
                let v = ld_shared_f32x4(addr + 16 * q as u32);
                w[4 * q..4 * q + 4].copy_from_slice(&v);
            }
        } else {
            for kk in 0..KT {
                w[kk] = ld_shared_f32(addr + 4 * kk as u32);
            }
        }
        w
    }

    /// One input element, or the zero padding outside the row / the image.
    #[inline(always)]
    fn load_or_zero(row: u64, row_live: bool, iw: i32, in_w: u32) -> f32 {
        if row_live && (iw as u32) < in_w { ldg_nc_f32(row + 4 * (iw as u32 as u64)) } else { 0.0 }
    }

    /// The block's output channels: which k-tile it is, and where its first channel starts.
    struct Channels {
        at: BlockCoords,
        /// First output channel of the tile (over all groups).
        k_first: u32,
        /// Channels of the tile that exist (the last tile of a group may be partial).
        k_live: u32,
    }

    #[inline(always)]
    fn channels<const KT: usize>(p: &DirectFwdParams) -> Channels {
        let at = p.block_coords(p.z_base + block_idx_z());
        let k_in_group = at.k_tile * KT as u32;
        Channels {
            at,
            k_first: at.group * p.k_per_group + k_in_group,
            k_live: (p.k_per_group - k_in_group).min(KT as u32),
        }
    }

    /// Tiles of at most this many output channels per thread load their biases before the tap
    /// loop, so that the loads' latency hides behind it (loaded at the store, a 3x3 depthwise
    /// layer on rows_k1_p8 waited on them once per thread and took up to twice as long fused);
    /// wider tiles load them at the store (held through the loop, rows_k8_p4's 8 took it from
    /// 94 registers to 106 and up to 37% longer fused).
    const EARLY_BIAS_CHANNELS: usize = 2;

    /// The epilogue's biases of the block's `KT` output channels (0 where there is no bias or
    /// no channel).
    #[inline(always)]
    fn biases<const KT: usize>(p: &DirectFwdParams, ch: &Channels) -> [f32; KT] {
        let mut bias = [0.0f32; KT];
        for kk in 0..KT {
            if (kk as u32) < ch.k_live {
                bias[kk] = p.epilogue.load_bias(ch.k_first + kk as u32);
            }
        }
        bias
    }

    /// [`biases`] before the tap loop where [`EARLY_BIAS_CHANNELS`] says so, else zeros (the
    /// store loads them channel by channel).
    #[inline(always)]
    fn early_biases<const KT: usize, const MODE: u32>(p: &DirectFwdParams, ch: &Channels) -> [f32; KT] {
        if MODE != PLAIN && KT <= EARLY_BIAS_CHANNELS { biases::<KT>(p, ch) } else { [0.0; KT] }
    }

    /// Stores a thread's outputs through the epilogue of mode `MODE` (the entry point's, plain
    /// included): `at(i)` is whether pixel `i` exists and its offset in its image's output
    /// channel 0. Channel by channel, so that one channel's offset is live at a time; stores and
    /// residual loads predicated, not branched around (branched, the plain rows_k8_p4 held 90
    /// registers, predicated 78).
    #[inline(always)]
    fn store<const KT: usize, const PX: usize, const MODE: u32>(
        p: &DirectFwdParams,
        ch: &Channels,
        at: impl Fn(usize) -> (bool, u64),
        bias: &[f32; KT],
        acc: &[[f32; KT]; PX],
    ) {
        let (y, ep) = (to_global(p.y), &p.epilogue);
        let out_plane = p.out_plane.divisor as u64;
        let plane_at = |k: u32| ep.stored_channel::<MODE>(k) as u64 * out_plane;
        // Channel `kk`'s bias: `early`, the one [`early_biases`] loaded, or loaded now.
        let bias_of = |kk: u32, early: f32| {
            if MODE == PLAIN || KT <= EARLY_BIAS_CHANNELS { early } else { ep.load_bias(ch.k_first + kk) }
        };
        if MODE != SMOOTH {
            for kk in 0..KT {
                if (kk as u32) < ch.k_live {
                    let plane_at = plane_at(ch.k_first + kk as u32);
                    let bias = bias_of(kk as u32, bias[kk]);
                    for i in 0..PX {
                        let (live, at) = at(i);
                        let at = at + plane_at;
                        stg_f32_if(live, y + 4 * at, ep.finish_as::<MODE>(acc[i][kk], bias, at, live));
                    }
                }
            }
            return;
        }
        // The long activations' code at each of 32 outputs keeps LLVM from unrolling the loop
        // above, and a rolled loop indexes the accumulators at run time (local memory). Here
        // every step stores channel 0 and rotates the next into its place: constant indices.
        let (mut acc, mut bias) = (*acc, *bias);
        if KT == 1 {
            // One channel: pixel by pixel, so that one activation is in flight at a time (all
            // PX at once took rows_k1_p8 from 40 registers to 52, for every mode of the entry).
            let (plane_at, bias) = (plane_at(ch.k_first), bias_of(0, bias[0]));
            let mut pixels: [(bool, u64); PX] = core::array::from_fn(&at);
            let mut i = 0;
            while i < crate::opaque(PX as u32) {
                let (live, at) = pixels[0];
                let at = at + plane_at;
                stg_f32_if(live, y + 4 * at, ep.finish_as::<MODE>(acc[0][0], bias, at, live));
                for j in 1..PX {
                    acc[j - 1] = acc[j];
                    pixels[j - 1] = pixels[j];
                }
                i += 1;
            }
            return;
        }
        let mut kk = 0;
        while kk < crate::opaque(ch.k_live) {
            let plane_at = plane_at(ch.k_first + kk);
            let bias_k = bias_of(kk, bias[0]);
            for i in 0..PX {
                let (live, at) = at(i);
                let at = at + plane_at;
                stg_f32_if(live, y + 4 * at, ep.finish_as::<MODE>(acc[i][0], bias_k, at, live));
                for j in 1..KT {
                    acc[i][j - 1] = acc[i][j];
                }
            }
            for j in 1..KT {
                bias[j - 1] = bias[j];
            }
            kk += 1;
        }
    }

    /// Streams the group's filter taps through shared memory chunk by chunk and hands each run
    /// of taps along one filter row to `row_run(c, r, s, w_addr, run)`: input channel `c` of the
    /// group, filter row `r`, first column `s`, the shared address of that tap's `KT` weights
    /// and the number of taps in the run.
    #[inline(always)]
    fn stream_taps<const KT: usize>(
        p: &DirectFwdParams,
        ch: &Channels,
        mut row_run: impl FnMut(u32, u32, u32, u32, u32),
    ) {
        let (tid, threads) = (thread_idx_x(), block_dim_x());
        let taps = p.c_per_group * p.window.filter_r * p.window.filter_s;
        let w_tile = to_global(p.w) + 4 * (ch.k_first as u64 * taps as u64);
        let smem = smem_base();
        // (c, r, s) of the next tap to consume.
        let (mut c, mut r, mut s) = (0u32, 0u32, 0u32);
        let mut chunk_first = 0u32;
        while chunk_first < taps {
            let chunk = p.taps_per_chunk.min(taps - chunk_first);
            sync_threads(); // the previous chunk is consumed by every thread
            // Stage weights tap-major, [tap][kk], so one tap's KT weights are one vector load.
            for kk in 0..KT {
                let src = w_tile + 4 * (kk as u64 * taps as u64 + chunk_first as u64);
                let mut j = tid;
                while j < chunk {
                    let v = if (kk as u32) < ch.k_live { ldg_nc_f32(src + 4 * j as u64) } else { 0.0 };
                    st_shared_f32(smem + 4 * (j * KT as u32 + kk as u32), v);
                    j += threads;
                }
            }
            sync_threads();

            let mut j = 0u32;
            while j < chunk {
                let run = (p.window.filter_s - s).min(chunk - j);
                row_run(c, r, s, smem + 4 * j * KT as u32, run);
                j += run;
                s += run;
                if s == p.window.filter_s {
                    s = 0;
                    r += 1;
                    if r == p.window.filter_r {
                        r = 0;
                        c += 1;
                    }
                }
            }
            chunk_first += chunk;
        }
    }

    /// `TileShape::Scattered`: PX pixels `BLOCK_THREADS` apart in the flat pixel range.
    #[inline(always)]
    pub unsafe fn scattered<const KT: usize, const PX: usize, const MODE: u32>(p: &DirectFwdParams) {
        let ch = channels::<KT>(p);
        let in_plane = (p.in_h * p.in_w) as u64;
        let out_plane = p.out_plane.divisor as u64;

        // Per pixel: liveness, where its group's input starts, the input corner of its
        // receptive field and its offset in its image's output channel 0.
        let mut live = [false; PX];
        let mut x_base = [0u64; PX];
        let mut y_at = [0u64; PX];
        let mut ih0 = [0i32; PX];
        let mut iw0 = [0i32; PX];
        let x = to_global(p.x);
        let threads = block_dim_x();
        let tile_first = block_idx_x() * threads * PX as u32;
        for i in 0..PX {
            let flat = tile_first + i as u32 * threads + thread_idx_x();
            live[i] = flat < p.batch_pixels;
            let px = p.pixel_coords(flat);
            let c_first = px.image as u64 * p.channels as u64 + (ch.at.group * p.c_per_group) as u64;
            x_base[i] = x.wrapping_add(4 * c_first * in_plane);
            y_at[i] = px.image as u64 * p.out_channels as u64 * out_plane + px.pixel as u64;
            ih0[i] = px.oh.wrapping_mul(p.window.stride_h) as i32 - p.window.pad_h;
            iw0[i] = px.ow.wrapping_mul(p.window.stride_w) as i32 - p.window.pad_w;
        }

        let bias = early_biases::<KT, MODE>(p, &ch);
        let mut acc = [[0.0f32; KT]; PX];
        stream_taps::<KT>(p, &ch, |c, r, s, mut w_addr, run| {
            // Row validity and address are hoisted out of the run.
            let mut row = [0u64; PX];
            let mut row_live = [false; PX];
            let mut iw = [0i32; PX];
            for i in 0..PX {
                let ih = ih0[i] + (r * p.window.dil_h) as i32;
                row_live[i] = live[i] && (ih as u32) < p.in_h;
                row[i] = x_base[i]
                    .wrapping_add(4 * (c as u64 * in_plane))
                    .wrapping_add(4 * (ih as u32 as u64).wrapping_mul(p.in_w as u64));
                iw[i] = iw0[i] + (s * p.window.dil_w) as i32;
            }
            for _ in 0..run {
                let wv = tap_weights::<KT>(w_addr);
                for i in 0..PX {
                    let v = load_or_zero(row[i], row_live[i], iw[i], p.in_w);
                    for kk in 0..KT {
                        acc[i][kk] = fmaf32(v, wv[kk], acc[i][kk]);
                    }
                    iw[i] += p.window.dil_w as i32;
                }
                w_addr += 4 * KT as u32;
            }
        });

        let at = |i: usize| (live[i], y_at[i]);
        store::<KT, PX, MODE>(p, &ch, at, &bias, &acc);
    }

    /// `TileShape::RowWindow`: PX adjacent pixels of one output row; needs stride_w = dil_w = 1.
    #[inline(always)]
    pub unsafe fn row_window<const KT: usize, const PX: usize, const MODE: u32>(p: &DirectFwdParams) {
        let ch = channels::<KT>(p);
        let in_plane = (p.in_h * p.in_w) as u64;
        let out_plane = p.out_plane.divisor as u64;
        let flat = block_idx_x() * block_dim_x() + thread_idx_x();
        let live = flat < p.batch_row_groups;
        let at = p.row_coords(flat, PX as u32);
        let c_first = at.image as u64 * p.channels as u64 + (ch.at.group * p.c_per_group) as u64;
        let x_base = to_global(p.x).wrapping_add(4 * c_first * in_plane);
        let y_at = at.image as u64 * p.out_channels as u64 * out_plane + (at.oh * p.out_w + at.ow) as u64;
        let ih0 = at.oh.wrapping_mul(p.window.stride_h) as i32 - p.window.pad_h;
        let iw0 = at.ow as i32 - p.window.pad_w;

        let bias = early_biases::<KT, MODE>(p, &ch);
        let mut acc = [[0.0f32; KT]; PX];
        stream_taps::<KT>(p, &ch, |c, r, s, mut w_addr, run| {
            let ih = ih0 + (r * p.window.dil_h) as i32;
            let row_live = live && (ih as u32) < p.in_h;
            let row = x_base
                .wrapping_add(4 * (c as u64 * in_plane))
                .wrapping_add(4 * (ih as u32 as u64).wrapping_mul(p.in_w as u64));
            // window[i] is the input under pixel i at the current tap; the next tap needs the
            // window shifted by one and one new value at its end.
            let mut iw = iw0 + s as i32;
            let mut window = [0.0f32; PX];
            for i in 1..PX {
                window[i] = load_or_zero(row, row_live, iw + i as i32 - 1, p.in_w);
            }
            for _ in 0..run {
                for i in 0..PX - 1 {
                    window[i] = window[i + 1];
                }
                window[PX - 1] = load_or_zero(row, row_live, iw + PX as i32 - 1, p.in_w);
                let wv = tap_weights::<KT>(w_addr);
                for i in 0..PX {
                    for kk in 0..KT {
                        acc[i][kk] = fmaf32(window[i], wv[kk], acc[i][kk]);
                    }
                }
                iw += 1;
                w_addr += 4 * KT as u32;
            }
        });

        let at = |i: usize| (live && at.ow + (i as u32) < p.out_w, y_at + i as u64);
        store::<KT, PX, MODE>(p, &ch, at, &bias, &acc);
    }
}
