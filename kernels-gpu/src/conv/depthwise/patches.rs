//! The depthwise channels-last patches program (NHWC input and output, channel multiplier 1),
//! for launches too small to hide the walk's load latency ([`super::nhwc`] keeps two rows of
//! loads in flight per thread and walks `K - 1` rows more than its segment: on 7- and 14-wide
//! maps and at N = 1 its time is that chain of latencies).
//!
//! A block takes a patch of `tile_h x tile_w` outputs of one image for [`PATCH_CHANNELS`]
//! consecutive channels:
//! 1. The input under the patch, halo included, is copied to shared memory as
//!    `[halo_h][halo_w][PATCH_CHANNELS]` in 16-byte `cp.async` pieces, every copy issued before
//!    the first wait (a warp's copies are four pixels' 128 contiguous bytes each); pixels
//!    outside the map and channels past `C` are copied as zeros, so the sums need no test.
//! 2. Each warp takes items (rows of `TW` adjacent outputs of the patch) one after another, one
//!    channel per lane: a filter row's window of `(TW - 1)·ST + K` pixels is read once and added
//!    into all `TW` sums, the taps in registers. A warp's shared reads are one pixel's 32
//!    channels (consecutive banks) and its stores 128 contiguous bytes, through the epilogue.
//!
//! Grid: x = `((image · tiles_h + tile_row) · tiles_w + tile_col) · channel_runs + run`,
//! unpacked with magic division. The block program is generic over [`PlaneBlock`], so the
//! host's tests run it on the CPU with every shared-memory access tracked.

use super::planes::PlaneBlock;
use crate::MagicDiv;
use crate::conv::epilogue::PLAIN;
use bytemuck::{Pod, Zeroable};

/// Channels of a block's patch: one per lane of a warp.
pub const PATCH_CHANNELS: u32 = 32;

/// Parameters of every patches kernel, passed by value. The host keeps the blocks below 2^31
/// and every element offset below 2^63.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DepthwisePatchParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: i32,
    pub pad_w: i32,
    /// Channels `C` (= `K`), a multiple of 4 (16-byte copies of whole pieces).
    pub channels: u32,
    /// Output rows and columns of a patch; the columns a multiple of the variant's `TW`.
    pub tile_h: u32,
    pub tile_w: u32,
    /// Input rows and columns under a patch: `(tile - 1)·ST + K`.
    pub halo_h: u32,
    pub halo_w: u32,
    /// A block's items: `tile_h · tile_w / TW`.
    pub items: u32,
    /// Threads per block, a multiple of 32.
    pub threads: u32,
    /// Keeps the struct free of implicit padding.
    pub _pad: u32,
    /// Divides a block index by the runs of [`PATCH_CHANNELS`] channels, `ceil(C / 32)`.
    pub channel_runs: MagicDiv,
    /// Divide by the patches across and down the output.
    pub tiles_w: MagicDiv,
    pub tiles_h: MagicDiv,
    /// Divides a pixel of the patch's input by `halo_w`: (row, column).
    pub halo_cols: MagicDiv,
    /// Divides an item by the items across the patch, `tile_w / TW`: (row, item in row).
    pub item_cols: MagicDiv,
    pub epilogue: super::super::epilogue::EpilogueParams,
}

impl DepthwisePatchParams {
    /// Shared-memory bytes of a block.
    pub const fn smem_bytes(halo_h: u32, halo_w: u32) -> u32 {
        4 * halo_h * halo_w * PATCH_CHANNELS
    }
}

/// The block program of block `block`, for filter `K`, stride `ST`, `TW` outputs per item
/// (`WIN = (TW - 1)·ST + K` input columns under them), store mode `MODE`.
// Register arrays are indexed in lockstep by compile-time-constant loop counters (fully
// unrolled); iterator chains over several of them would hide that.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn patches<const K: usize, const ST: usize, const TW: usize, const WIN: usize, const MODE: u32, B: PlaneBlock>(
    b: &mut B,
    p: &DepthwisePatchParams,
    block: u32,
) {
    const { assert!(WIN == (TW - 1) * ST + K) };
    let (rest, run) = p.channel_runs.div_rem(block);
    let (rest, tile_col) = p.tiles_w.div_rem(rest);
    let (image, tile_row) = p.tiles_h.div_rem(rest);
    let first_channel = run * PATCH_CHANNELS;
    let (oy0, ox0) = (tile_row * p.tile_h, tile_col * p.tile_w);
    let iy0 = (oy0 * ST as u32) as i32 - p.pad_h;
    let ix0 = (ox0 * ST as u32) as i32 - p.pad_w;
    let c = p.channels as u64;

    // 1. The patch, zeros outside the map and past C, into shared memory.
    b.each_thread_of(
        p.threads,
        #[inline(always)]
        |b, t| {
            let pieces_per_pixel = PATCH_CHANNELS / 4;
            let pieces = p.halo_h * p.halo_w * pieces_per_pixel;
            let mut e = t;
            while e < pieces {
                let (pixel, piece) = (e / pieces_per_pixel, e % pieces_per_pixel);
                let (hy, hx) = p.halo_cols.div_rem(pixel);
                let (iy, ix) = (iy0 + hy as i32, ix0 + hx as i32);
                let channel = first_channel + 4 * piece;
                let inside = (iy as u32) < p.in_h && (ix as u32) < p.in_w && channel < p.channels;
                // Wrapping: the offset of a pixel outside the map is never used.
                let at = (image as u64 * p.in_h as u64)
                    .wrapping_add(iy as i64 as u64)
                    .wrapping_mul(p.in_w as u64)
                    .wrapping_add(ix as i64 as u64);
                b.copy_x4(4 * e, if inside { at * c + channel as u64 } else { 0 }, inside);
                e += p.threads;
            }
            b.wait_copies();
        },
    );
    b.barrier();

    // 2. Each warp's items, one channel per lane, stored through the epilogue.
    b.each_thread_of(
        p.threads,
        #[inline(always)]
        |b, t| {
            let (warp, lane) = (t / 32, t % 32);
            let channel = first_channel + lane;
            let live_channel = channel < p.channels;
            // A lane past C computes the zeros of its copies with channel 0's taps (in bounds)
            // and stores nothing.
            let k = if live_channel { channel } else { 0 };
            let filter = k as u64 * (K * K) as u64;
            let w: [[f32; K]; K] =
                core::array::from_fn(|r| core::array::from_fn(|s| b.tap(filter + (r * K + s) as u64)));
            let bias = if MODE == PLAIN { 0.0 } else { b.bias(k) };
            let ep = &p.epilogue;
            let mut item = warp;
            while item < p.items {
                let (row, col) = p.item_cols.div_rem(item);
                let col = col * TW as u32;
                let mut acc = [0.0f32; TW];
                crate::unrolled::<K>(|fr| {
                    let pixel = (row * ST as u32 + fr as u32) * p.halo_w + col * ST as u32;
                    let first = pixel * PATCH_CHANNELS + lane;
                    let win: [f32; WIN] = core::array::from_fn(|j| b.load(first + j as u32 * PATCH_CHANNELS));
                    for i in 0..TW {
                        for s in 0..K {
                            acc[i] = crate::fma(win[i * ST + s], w[fr][s], acc[i]);
                        }
                    }
                    true
                });
                let (oy, ox) = (oy0 + row, ox0 + col);
                let out = (image as u64 * p.out_h as u64 + oy as u64) * p.out_w as u64 + ox as u64;
                for i in 0..TW {
                    let live = live_channel && oy < p.out_h && ox + (i as u32) < p.out_w;
                    let offset = (out + i as u64) * c + channel as u64;
                    let v = if MODE == PLAIN {
                        acc[i]
                    } else {
                        let res = b.residual(live && ep.residual != 0, offset);
                        ep.apply_in::<MODE>(acc[i], bias, res)
                    };
                    b.write_y(live, offset, v);
                }
                item += p.threads / 32;
            }
        },
    );
}

#[cfg(target_arch = "nvptx64")]
pub(super) mod device {
    use super::DepthwisePatchParams;
    use crate::{conv::depthwise::GpuDepthwise, prelude::*};

    /// A patches variant's kernel in store mode `MODE`.
    #[inline(always)]
    pub fn kernel<const K: usize, const ST: usize, const TW: usize, const WIN: usize, const MODE: u32>(
        p: &DepthwisePatchParams,
    ) {
        let mut b = GpuDepthwise {
            smem: smem_base(),
            x: to_global(p.x),
            w: to_global(p.w),
            y: to_global(p.y),
            epilogue: p.epilogue,
        };
        super::patches::<K, ST, TW, WIN, MODE, _>(&mut b, p, block_idx_x());
    }
}
