//! Spatial tiles of the implicit GEMM ([`PixelTile::Spatial`]): a block computes `rows x cols`
//! output pixels of one image, so the inputs it reads (the tile's halo: `(rows - 1) · stride +
//! (R - 1) · dilation + 1` rows, likewise columns) are copied to shared memory once per chunk of
//! `BK` = 8 channels, and every filter tap reads its fragments at its own offset into them. A
//! flat tile copies each input once per tap (9 times for 3x3 filters); this one about 1.4 times
//! (16 x 8 pixels under an 18 x 10 halo), which was the flat kernel's limit (issue-bound on its
//! copies: `benches/NOTES.md`).
//! - **Persistent blocks**: the grid holds as many blocks as the GPU keeps resident; each walks
//!   the work items (column tile of a block group, pixel tile) `gridDim.x` apart, and its
//!   pipeline runs across them, so that the next tile's halo lands while this one computes
//!   (narrow groups have a single chunk per tile: one block per tile left nothing to overlap).
//! - **Steps**: a chunk is computed in [`IgemmSpatialParams::tap_steps`] steps of up to
//!   `taps_per_step` filter taps, each with its taps' weights in shared memory, so that wide
//!   tiles and large filters still leave room for several blocks per SM (the host picks the
//!   taps per step: `host/conv/igemm.rs`). Most layers take a chunk in one step.
//! - **Copies**: a thread owns up to [`HALO_ROUNDS`] halo positions (`thread + 128 i`), finds
//!   their input offsets once per tile, and copies each position's 8 channels per chunk (4-byte
//!   `cp.async`, one plane apart by addition; a zero where the position is padding). A step's
//!   packed weights, each tap's `BN x 8` panel in a row, go in 16-byte pieces.
//! - **Split once**: when a chunk has landed, the thread that copied an input rounds it to TF32
//!   in place and, for 3xTF32, stores its residual in a second region (before the barrier
//!   that shows them to the other threads): the taps then load fragments ready for the mma.
//! - **Shared memory**: [`STAGES`] halo buffers, then as many weight buffers. A halo buffer is
//!   `[8][halo_stride]` inputs (and as many residuals for 3xTF32), `halo_stride ≥ halo_plane`
//!   and `≡ 8 mod 32`; a weight buffer the step's panels (`[tap][region][BN][8]`: the TF32
//!   weights, for 3xTF32 then their residuals, as packed; channels interleaved as
//!   [`IgemmTile::b_slot`] has them). The A loads are 4-byte: lane (g, t) reads channel t
//!   (and t + 4) at its pixel's halo position, pixels g = 0..7 of a fragment lying in one row of
//!   the tile (`cols` is 8 or 16): 8 adjacent words per channel, channels 8 banks apart,
//!   conflict-free at stride 1 (2-way at stride 2).
//! - **Pipeline**: one step computed while the next step's weights land, and the next chunk's
//!   halo from the chunk's first step on: a step holds several taps, far more work than a flat
//!   chunk.
//! - **Epilogue** straight from the accumulators: a store instruction writes 8 adjacent pixels
//!   of 4 output channels, four whole 32-byte sectors where rows are 8-aligned.

use super::{BLOCK_THREADS, BlockCoords, INPUT_VECTORS, IgemmFwdParams, IgemmTile, PixelTile};
use crate::MagicDiv;
use bytemuck::{Pod, Zeroable};

/// Buffers of the pipeline, for the halo and for the weights alike: one computed, one in
/// flight (the kernel toggles between the two).
pub const STAGES: u32 = 2;
/// Halo positions a thread owns at most: halo planes of up to [`IgemmTile::max_halo_plane`].
pub const HALO_ROUNDS: usize = 5;
/// Channels per chunk.
pub const BK: u32 = 8;
/// A halo position outside the input (padding), copied as a zero. A sentinel rather than an
/// `Option` keeps a thread's positions in one register each.
pub const OUTSIDE: u32 = u32::MAX;

/// Parameters of the spatial kernels: the flat kernels' (`z_base` unused) and the tiling's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct IgemmSpatialParams {
    pub conv: IgemmFwdParams,
    pub out_h: u32,
    pub out_w: u32,
    /// Input columns under a tile.
    pub halo_w: u32,
    /// Input positions under a tile: rows times `halo_w`, at most [`IgemmTile::max_halo_plane`].
    pub halo_plane: u32,
    /// Floats per channel of the halo in a buffer (NHWC: per position of the `BK` channels
    /// there, over `BK`).
    pub halo_stride: u32,
    /// Filter taps whose weights a step holds (the last step of a chunk may hold fewer).
    pub taps_per_step: u32,
    /// Steps per chunk: `ceil(taps / taps_per_step)`.
    pub tap_steps: u32,
    /// Work items: pixel tiles times packed z-indices (block groups times column tiles).
    pub work_items: u32,
    /// Divides a work item into its packed z-index and pixel tile ([`Self::work_item`]): NCHW
    /// by the pixel tiles of all images, NHWC by the packed z-indices.
    pub work_item_div: MagicDiv,
    /// Divides a pixel tile by the tiles per image: (image, tile of the image).
    pub tiles: MagicDiv,
    /// Divides a tile of one image by the tile columns: (tile row, tile column).
    pub tile_cols: MagicDiv,
    /// Divides a halo position by `halo_w`: (row, column).
    pub halo_w_div: MagicDiv,
}

/// Where a block's pixels lie: its image and its first output row and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileOrigin {
    pub image: u32,
    pub oh0: u32,
    pub ow0: u32,
}

/// Where a thread's copies of one work item come from ([`IgemmSpatialParams::tile_source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileSource {
    pub block: BlockCoords,
    /// Element offset of the first channel of the block's groups in the tile's image (NHWC: at
    /// its pixel 0).
    pub image_plane: u64,
    /// The input pixels (`ih * in_w + iw`) under the thread's halo positions, round `i`
    /// holding position [`IgemmTile::halo_position`] ([`OUTSIDE`] for padding; unused beyond
    /// the halo).
    pub halo: [u32; HALO_ROUNDS],
}

impl IgemmTile {
    /// Columns of a spatial tile (the flat tile: its pixels in one row).
    pub const fn cols(&self) -> u32 {
        match self.pixels {
            PixelTile::Flat => self.bm(),
            PixelTile::Spatial { cols } => cols,
        }
    }

    /// Rows of a spatial tile.
    pub const fn rows(&self) -> u32 {
        self.bm() / self.cols()
    }

    /// Threads that copy one halo position's chunk: NCHW 1 (8 channels, a plane apart); NHWC 2,
    /// 4 adjacent channels each, so that a warp's copies take 32 bytes of each of 16 pixels
    /// (each pixel a warp touches is a pass of the L1: the flat NHWC tile's lesson).
    pub const fn halo_copiers(&self) -> u32 {
        if self.channels_last { 2 } else { 1 }
    }

    /// Consecutive input slots per call of `own_slots`: NHWC a 16-byte copy's 4 channels, NCHW
    /// 1 (a thread's slots lie a channel's halo apart).
    pub const fn own_run(&self) -> u32 {
        if self.channels_last { 4 } else { 1 }
    }

    /// Halo position that `thread` copies in round `i` (with `4 * (thread % 2)` the first of
    /// its channels for NHWC).
    #[inline(always)]
    pub const fn halo_position(&self, thread: u32, i: u32) -> u32 {
        thread / self.halo_copiers() + i * (BLOCK_THREADS / self.halo_copiers())
    }

    /// The largest halo the copies cover: [`HALO_ROUNDS`] positions per thread.
    pub const fn max_halo_plane(&self) -> u32 {
        HALO_ROUNDS as u32 * BLOCK_THREADS / self.halo_copiers()
    }

    /// Floats between adjacent halo positions of one channel in a halo buffer: NCHW 1 (a channel's
    /// halo is a row), NHWC `BK` (a position's channels are adjacent).
    pub const fn position_floats(&self) -> u32 {
        if self.channels_last { BK } else { 1 }
    }
}

/// `halo_plane` padded to the stride of a channel in a halo buffer: the least ≥ it that is ≡ 8 mod 32.
pub const fn halo_stride(halo_plane: u32) -> u32 {
    (halo_plane + 24).next_multiple_of(32) - 24
}

/// Floats of one halo buffer of `tile`: [`IgemmTile::regions`] of `BK` channels' halos.
pub const fn halo_floats(tile: &IgemmTile, halo_stride: u32) -> u32 {
    tile.regions() * BK * halo_stride
}

/// Floats of one weight buffer of `tile`: `taps_per_step` panels.
pub const fn weight_floats(tile: &IgemmTile, taps_per_step: u32) -> u32 {
    taps_per_step * tile.panel_floats()
}

/// Dynamic shared memory of a spatial tile: [`STAGES`] halo and weight buffers.
pub const fn smem_bytes(tile: &IgemmTile, halo_stride: u32, taps_per_step: u32) -> u32 {
    4 * STAGES * (halo_floats(tile, halo_stride) + weight_floats(tile, taps_per_step))
}

impl IgemmSpatialParams {
    /// Work item `item`'s block group and column tile, and its pixel tile. NCHW walks the
    /// pixel tiles fastest; NHWC the packed z-indices, so that the blocks running at once read
    /// every channel of their pixels together (a block's channels are 32 bytes of a pixel's
    /// row: with the pixel tiles fastest, the rest of each row was read from DRAM apart).
    #[inline(always)]
    pub fn work_item(&self, t: &IgemmTile, item: u32) -> (BlockCoords, u32) {
        let (z, tile) = if t.channels_last {
            let (tile, z) = self.work_item_div.div_rem(item);
            (z, tile)
        } else {
            self.work_item_div.div_rem(item)
        };
        (self.conv.block_coords(z), tile)
    }

    /// The image and first output pixel of pixel tile `tile`.
    #[inline(always)]
    pub fn origin(&self, t: &IgemmTile, tile: u32) -> TileOrigin {
        let (image, within) = self.tiles.div_rem(tile);
        let (row, col) = self.tile_cols.div_rem(within);
        TileOrigin { image, oh0: row * t.rows(), ow0: col * t.cols() }
    }

    /// Pixel of an input image (`ih * in_w + iw`) under halo position `q` of the tile at `o`, or
    /// [`OUTSIDE`].
    #[inline(always)]
    pub fn halo_source(&self, o: &TileOrigin, q: u32) -> u32 {
        let (row, col) = self.halo_w_div.div_rem(q);
        let w = &self.conv.window;
        let ih = (o.oh0 * w.stride_h + row) as i32 - w.pad_h;
        let iw = (o.ow0 * w.stride_w + col) as i32 - w.pad_w;
        if (ih as u32) < self.conv.in_h && (iw as u32) < self.conv.in_w {
            ih as u32 * self.conv.in_w + iw as u32
        } else {
            OUTSIDE
        }
    }

    /// Where `thread` copies work item `item` from.
    #[inline(always)]
    pub fn tile_source(&self, t: &IgemmTile, item: u32, thread: u32) -> TileSource {
        let (block, tile) = self.work_item(t, item);
        let o = self.origin(t, tile);
        let c = &self.conv;
        let (image, first_channel) =
            (o.image as u64 * c.channels as u64, (block.block_group * c.block_channels) as u64);
        let image_plane = if t.channels_last {
            image * c.in_plane as u64 + first_channel
        } else {
            (image + first_channel) * c.in_plane as u64
        };
        let mut halo = [OUTSIDE; HALO_ROUNDS];
        let mut i = 0;
        while i < HALO_ROUNDS && t.halo_position(thread, i as u32) < self.halo_plane {
            halo[i] = self.halo_source(&o, t.halo_position(thread, i as u32));
            i += 1;
        }
        TileSource { block, image_plane, halo }
    }

    /// Calls `copy_x(slot, offset, inside, wide)` for each of `thread`'s input copies of
    /// channel chunk `cc` of the work item `src` describes (`wide`: 16 bytes, else 4; `offset`
    /// 0 where `inside` is false, which copies zeros; slots within a halo buffer).
    #[inline(always)]
    pub fn copy_halo(
        &self,
        t: &IgemmTile,
        src: &TileSource,
        thread: u32,
        cc: u32,
        mut copy_x: impl FnMut(u32, u64, bool, bool),
    ) {
        let c = &self.conv;
        let first = cc * BK;
        let channels = c.block_channels - first;
        let mut i = 0;
        while i < HALO_ROUNDS {
            let q = t.halo_position(thread, i as u32);
            if q >= self.halo_plane {
                break;
            }
            let (pixel, outside) = (src.halo[i], src.halo[i] == OUTSIDE);
            if t.channels_last {
                // Channels 4h .. 4h + 4 of the position, adjacent: one 16-byte copy where
                // INPUT_VECTORS allows (then the 4 lie wholly inside or outside the block's
                // channels), else four 4-byte ones.
                let first_k = 4 * (thread % 2);
                let slot = q * BK + first_k;
                let at = |k: u32| {
                    let inside = !outside & (k < channels);
                    let offset = src.image_plane + pixel as u64 * c.channels as u64 + (first + k) as u64;
                    (if inside { offset } else { 0 }, inside)
                };
                if c.flags & INPUT_VECTORS != 0 {
                    let (offset, inside) = at(first_k);
                    copy_x(slot, offset, inside, true);
                } else {
                    for k in 0..4 {
                        let (offset, inside) = at(first_k + k);
                        copy_x(slot + k, offset, inside, false);
                    }
                }
            } else {
                // The position's channels lie one plane apart: one addition per copy, and no
                // per-copy test where the position and the whole chunk are inside (three
                // loops, the test outside them).
                let plane = c.in_plane as u64;
                let mut offset = src.image_plane + first as u64 * plane + pixel as u64;
                if outside {
                    for k in 0..BK {
                        copy_x(k * self.halo_stride + q, 0, false, false);
                    }
                } else if channels >= BK {
                    for k in 0..BK {
                        copy_x(k * self.halo_stride + q, offset, true, false);
                        offset += plane;
                    }
                } else {
                    for k in 0..BK {
                        let inside = k < channels;
                        copy_x(k * self.halo_stride + q, if inside { offset } else { 0 }, inside, false);
                        offset += plane;
                    }
                }
            }
            i += 1;
        }
    }

    /// The first filter tap of step `step` of a chunk and the taps it holds.
    #[inline(always)]
    pub fn step_taps(&self, step: u32) -> (u32, u32) {
        let first = step * self.taps_per_step;
        (first, (self.conv.taps - first).min(self.taps_per_step))
    }

    /// Calls `copy_w4(slot, offset)` for each of `thread`'s 16-byte copies of the packed
    /// weights of step `step` of channel chunk `cc` of `block` (slots within a weight buffer):
    /// the step's taps' panels, one run of the packed weights.
    #[inline(always)]
    pub fn copy_step_weights(
        &self,
        t: &IgemmTile,
        block: BlockCoords,
        thread: u32,
        cc: u32,
        step: u32,
        mut copy_w4: impl FnMut(u32, u64),
    ) {
        let (first, taps) = self.step_taps(step);
        let panel = t.panel_offset(&self.conv, block, cc * self.conv.taps + first);
        let mut e = thread;
        while e < taps * t.panel_floats() / 4 {
            copy_w4(4 * e, panel + 4 * e as u64);
            e += BLOCK_THREADS;
        }
    }

    /// Calls `f(slot)` for each run of [`IgemmTile::own_run`] input slots from `slot` that
    /// `thread`'s copies fill ([`Self::copy_halo`]): once they have landed, the same thread
    /// may rewrite them (rounded to TF32) before the barrier that shows them to the others.
    /// NHWC runs are a 16-byte copy's 4 channels, so that a warp rewrites 512 contiguous bytes
    /// per 16-byte access (4 floats of one access apiece were 4-way bank conflicts).
    #[inline(always)]
    pub fn own_slots(&self, t: &IgemmTile, thread: u32, mut f: impl FnMut(u32)) {
        let mut q = t.halo_position(thread, 0);
        while q < self.halo_plane {
            if t.channels_last {
                f(q * BK + 4 * (thread % 2));
            } else {
                let mut k = 0;
                while k < BK {
                    f(k * self.halo_stride + q);
                    k += 1;
                }
            }
            q += BLOCK_THREADS / t.halo_copiers();
        }
    }

    /// Slot offset of pixel `m` of the tile's halo position (filter tap (0, 0), channel 0).
    #[inline(always)]
    pub fn pixel_offset(&self, t: &IgemmTile, m: u32) -> u32 {
        let (row, col) = (m / t.cols(), m % t.cols());
        let w = &self.conv.window;
        (row * w.stride_h * self.halo_w + col * w.stride_w) * t.position_floats()
    }

    /// Slot offset of filter tap (r, s) in the halo.
    #[inline(always)]
    pub fn tap_offset(&self, t: &IgemmTile, r: u32, s: u32) -> u32 {
        let w = &self.conv.window;
        (r * w.dil_h * self.halo_w + s * w.dil_w) * t.position_floats()
    }

    /// The tile's pixel of `lane`'s A element `e` (row g, g + 8, g, g + 8 for e = 0..4) of
    /// m-tile `i`.
    #[inline(always)]
    pub const fn a_pixel(t: &IgemmTile, lane: u32, warp: u32, i: u32, e: u32) -> u32 {
        t.fragment_row(warp, i) + lane / 4 + 8 * (e % 2)
    }

    /// Slot of `lane`'s A element `e` (k = t, t, t + 4, t + 4 for e = 0..4) at halo offset 0:
    /// NCHW channel k's row; NHWC channel [`IgemmTile::mma_channel`] (2t or 2t + 1), so that one
    /// 8-byte load holds a pixel's elements e and e + 2.
    #[inline(always)]
    pub const fn a_channel(&self, t: &IgemmTile, lane: u32, e: u32) -> u32 {
        let channel = t.mma_channel(0, lane % 4, e >= 2);
        if t.channels_last { channel } else { channel * self.halo_stride }
    }

    /// Slot of `lane`'s A element `e` of m-tile `i` at the tap whose [`Self::tap_offset`] is
    /// `tap_offset`: what the kernel composes from the parts.
    #[inline(always)]
    pub fn a_slot(&self, t: &IgemmTile, lane: u32, warp: u32, i: u32, e: u32, tap_offset: u32) -> u32 {
        self.a_channel(t, lane, e) + self.pixel_offset(t, Self::a_pixel(t, lane, warp, i, e)) + tap_offset
    }

    /// Slot, in a weight buffer, of the pair (B(k t, n g), B(k t+4, n g)) of n-tile `j` at the
    /// step's filter tap `tap` (its 3xTF32 residuals: [`Self::b_residual`] on).
    #[inline(always)]
    pub const fn b_pair(t: &IgemmTile, lane: u32, j: u32, tap: u32) -> u32 {
        let (g, tt) = (lane / 4, lane % 4);
        tap * t.panel_floats() + (8 * j + g) * BK + 2 * tt
    }

    /// How far a 3xTF32 weight's residual lies from the weight's slot.
    #[inline(always)]
    pub const fn b_residual(t: &IgemmTile) -> u32 {
        t.bn() * BK
    }

    /// Slot of halo buffer `buffer` in shared memory.
    #[inline(always)]
    pub const fn halo_buffer(&self, t: &IgemmTile, buffer: u32) -> u32 {
        buffer * halo_floats(t, self.halo_stride)
    }

    /// Slot of weight buffer `buffer` in shared memory (after the halo buffers).
    #[inline(always)]
    pub const fn weight_buffer(&self, t: &IgemmTile, buffer: u32) -> u32 {
        STAGES * halo_floats(t, self.halo_stride) + buffer * weight_floats(t, self.taps_per_step)
    }

    /// How far a 3xTF32 input's residual lies from the input's slot.
    #[inline(always)]
    pub const fn residual_offset(&self) -> u32 {
        BK * self.halo_stride
    }

    /// The part of an output's element offset that pixel `m` of the tile at `o` adds, if it is
    /// inside the output: NCHW its offset in a plane; NHWC that times the output channels.
    #[inline(always)]
    pub fn output_pixel(&self, t: &IgemmTile, o: &TileOrigin, m: u32) -> Option<u64> {
        let (oh, ow) = (o.oh0 + m / t.cols(), o.ow0 + m % t.cols());
        let pixel = (oh * self.out_w + ow) as u64;
        let offset = if t.channels_last { pixel * self.conv.out_channels as u64 } else { pixel };
        ((oh < self.out_h) & (ow < self.out_w)).then_some(offset)
    }

    /// Output `column` of `block`'s column tile, if it exists: its channel `k` (in the groups'
    /// order) and the element offset, in `image`, of where a store of epilogue mode `MODE`
    /// puts it, but for [`Self::output_pixel`]'s part.
    #[inline(always)]
    pub fn output_plane<const MODE: u32>(
        &self,
        t: &IgemmTile,
        block: BlockCoords,
        image: u32,
        column: u32,
    ) -> Option<(u32, u64)> {
        let c = &self.conv;
        let column = block.column_tile * t.bn() + column;
        let k = block.block_group * c.block_outputs + column;
        let stored = c.epilogue.stored_channel::<MODE>(k);
        let (image, stored) = (image as u64 * c.out_channels as u64, stored as u64);
        let offset =
            if t.channels_last { image * c.out_plane as u64 + stored } else { (image + stored) * c.out_plane as u64 };
        (column < c.block_outputs).then_some((k, offset))
    }
}

#[cfg(target_arch = "nvptx64")]
pub(crate) mod device {
    use super::super::{
        IgemmTile, PixelTile, STORE_VECTORS,
        device::{copy_input, copy_weights, split},
    };
    use super::IgemmSpatialParams;
    use crate::conv::epilogue::{CLAMP, PLAIN};
    use crate::prelude::*;

    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    pub fn convolve<
        const MT: usize,
        const NT: usize,
        const COLS: u32,
        const SPLIT: bool,
        const NHWC: bool,
        const MODE: u32,
    >(
        p: &IgemmSpatialParams,
    ) {
        let t = IgemmTile::of_kernel(SPLIT, PixelTile::Spatial { cols: COLS }, MT as u32, NT as u32, 1, NHWC, false);
        let c = &p.conv;
        let thread = thread_idx_x();
        let (lane, warp) = (thread % 32, thread / 32);
        let (smem, x, w, y) = (smem_base(), to_global(c.x), to_global(c.w), to_global(c.y));
        let (items, item_step, chunks, steps) = (p.work_items, grid_dim_x(), c.channel_chunks, p.tap_steps);
        let halo_at = |buffer: u32| smem + 4 * p.halo_buffer(&t, buffer);
        let weights_at = |buffer: u32| smem + 4 * p.weight_buffer(&t, buffer);

        // Two copy cursors: the weights run one step ahead of the computation; the halo one
        // chunk ahead, issued at a chunk's first step into the buffer the chunk before is done
        // with, so that it has the whole chunk to land however many steps the chunk takes.
        let (mut halo_item, mut halo_cc) = (block_idx_x(), 0);
        let mut src = p.tile_source(&t, halo_item, thread);
        let (mut weight_item, mut weight_cc, mut weight_step, mut weight_block) = (halo_item, 0, 0, src.block);
        if halo_item < items {
            p.copy_halo(&t, &src, thread, 0, copy_input(halo_at(0), x));
            p.copy_step_weights(&t, weight_block, thread, 0, 0, copy_weights(weights_at(0), w));
        }
        cp_async_commit();
        // Whether the last commit holds a halo, and its buffer: rounded once it has landed.
        let (mut halo_landing, mut landing_buffer) = (true, 0);

        // The lane's A rows and channels, as byte offsets into a halo buffer.
        let mut pixel = [[0u32; 2]; MT];
        for i in 0..MT {
            for h in 0..2 {
                let m = IgemmSpatialParams::a_pixel(&t, lane, warp, i as u32, h as u32);
                pixel[i][h] = 4 * p.pixel_offset(&t, m);
            }
        }
        let (k_low, k_high) = (4 * p.a_channel(&t, lane, 0), 4 * p.a_channel(&t, lane, 2));
        let residual = p.residual_offset();

        let mut acc = [[[0.0f32; 4]; NT]; MT];
        let (mut item, mut cc, mut step) = (block_idx_x(), 0, 0);
        let (mut halo_buffer, mut weight_buffer) = (0, 0);
        // The filter tap the step starts at.
        let (mut r, mut s) = (0, 0);
        while item < items {
            // This step's copies have landed (for every thread after the barrier), and every
            // warp is done with the buffers the next copies refill.
            cp_async_wait_all();
            if halo_landing {
                // Each input rounded to TF32 (and for 3xTF32 its residual stored beside) once
                // here rather than at every filter tap.
                let at_halo = halo_at(landing_buffer);
                p.own_slots(&t, thread, |slot| {
                    if t.own_run() == 4 {
                        let (mut big, mut small) = ([0.0f32; 4], [0.0f32; 4]);
                        for (k, v) in ld_shared_f32x4(at_halo + 4 * slot).into_iter().enumerate() {
                            let (b, s) = split::<SPLIT>(v);
                            (big[k], small[k]) = (f32::from_bits(b), f32::from_bits(s));
                        }
                        st_shared_f32x4(at_halo + 4 * slot, big);
                        if SPLIT {
                            st_shared_f32x4(at_halo + 4 * (slot + residual), small);
                        }
                    } else {
                        let (big, small) = split::<SPLIT>(ld_shared_f32(at_halo + 4 * slot));
                        st_shared_f32(at_halo + 4 * slot, f32::from_bits(big));
                        if SPLIT {
                            st_shared_f32(at_halo + 4 * (slot + residual), f32::from_bits(small));
                        }
                    }
                });
            }
            sync_threads();
            weight_step += 1;
            if weight_step == steps {
                weight_step = 0;
                weight_cc += 1;
                if weight_cc == chunks {
                    weight_cc = 0;
                    weight_item += item_step;
                    weight_block = p.work_item(&t, weight_item).0;
                }
            }
            if weight_item < items {
                let to = copy_weights(weights_at(weight_buffer ^ 1), w);
                p.copy_step_weights(&t, weight_block, thread, weight_cc, weight_step, to);
            }
            halo_landing = false;
            if step == 0 {
                halo_cc += 1;
                if halo_cc == chunks {
                    halo_cc = 0;
                    halo_item += item_step;
                    if halo_item < items {
                        src = p.tile_source(&t, halo_item, thread);
                    }
                }
                if halo_item < items {
                    (halo_landing, landing_buffer) = (true, halo_buffer ^ 1);
                    p.copy_halo(&t, &src, thread, halo_cc, copy_input(halo_at(landing_buffer), x));
                }
            }
            cp_async_commit();

            let (at_halo, at_weights) = (halo_at(halo_buffer), weights_at(weight_buffer));
            let (_, taps) = p.step_taps(step);
            let mut tap = 0;
            while tap < taps {
                // Opaque: left to itself the compiler steps each of the lane's 8 A
                // addresses per tap instead of adding one tap offset.
                let at_tap = at_halo + 4 * crate::opaque(p.tap_offset(&t, r, s));
                let (low, high) = (at_tap + k_low, at_tap + k_high);
                // The inputs were split once the chunk landed.
                let mut a = [[0u32; 4]; MT];
                let mut a_small = [[0u32; 4]; MT];
                for i in 0..MT {
                    if NHWC {
                        // A pixel's elements e and e + 2 (channels 2t and 2t + 1) are adjacent.
                        for h in 0..2 {
                            let at = low + pixel[i][h];
                            [a[i][h], a[i][h + 2]] = ld_shared_f32x2(at).map(f32::to_bits);
                            if SPLIT {
                                [a_small[i][h], a_small[i][h + 2]] =
                                    ld_shared_f32x2(at + 4 * residual).map(f32::to_bits);
                            }
                        }
                    } else {
                        let addresses = [low + pixel[i][0], low + pixel[i][1], high + pixel[i][0], high + pixel[i][1]];
                        for e in 0..4 {
                            a[i][e] = ld_shared_f32(addresses[e]).to_bits();
                            if SPLIT {
                                a_small[i][e] = ld_shared_f32(addresses[e] + 4 * residual).to_bits();
                            }
                        }
                    }
                }
                // The weights come split from the packing.
                let mut b = [[0u32; 2]; NT];
                let mut b_small = [[0u32; 2]; NT];
                for j in 0..NT {
                    let at = at_weights + 4 * IgemmSpatialParams::b_pair(&t, lane, j as u32, tap);
                    b[j] = ld_shared_f32x2(at).map(f32::to_bits);
                    if SPLIT {
                        b_small[j] = ld_shared_f32x2(at + 4 * IgemmSpatialParams::b_residual(&t)).map(f32::to_bits);
                    }
                }
                for i in 0..MT {
                    for j in 0..NT {
                        if SPLIT {
                            // One tap of the chunk summed apart, as the flat tile's chunk.
                            let mut part = mma_tf32_m16n8k8(a_small[i], b[j], [0.0; 4]);
                            part = mma_tf32_m16n8k8(a[i], b_small[j], part);
                            part = mma_tf32_m16n8k8(a[i], b[j], part);
                            for e in 0..4 {
                                acc[i][j][e] += part[e];
                            }
                        } else {
                            acc[i][j] = mma_tf32_m16n8k8(a[i], b[j], acc[i][j]);
                        }
                    }
                }
                tap += 1;
                s += 1;
                if s == c.window.filter_s {
                    s = 0;
                    r += 1;
                }
            }
            weight_buffer ^= 1;
            step += 1;
            if step == steps {
                (step, r, halo_buffer) = (0, 0, halo_buffer ^ 1);
                cc += 1;
                if cc == chunks {
                    store::<MT, NT, MODE>(p, &t, y, item, lane, warp, &mut acc);
                    acc = [[[0.0f32; 4]; NT]; MT];
                    cc = 0;
                    item += item_step;
                }
            }
        }
    }

    /// Stores work item `item`'s accumulators through the epilogue of mode `MODE`
    /// (the entry point's), and leaves them rotated (the caller zeroes them next): accumulator
    /// e of tile (i, j) is pixel g (+8) of m-tile i and output 2t (+1) of n-tile j.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn store<const MT: usize, const NT: usize, const MODE: u32>(
        p: &IgemmSpatialParams,
        t: &IgemmTile,
        y: u64,
        item: u32,
        lane: u32,
        warp: u32,
        acc: &mut [[[f32; 4]; NT]; MT],
    ) {
        let (block, tile) = p.work_item(t, item);
        let origin = p.origin(t, tile);
        let ep = &p.conv.epilogue;
        // Accumulators of n-tile j: 2 outputs of the lane, 2 x MT pixels each.
        // NHWC: a lane's outputs 2t and 2t + 1 of a pixel are adjacent, one 8-byte store where
        // the channel counts and y's alignment allow it and the epilogue keeps the order.
        let pairs = t.channels_last && p.conv.flags & STORE_VECTORS != 0 && (MODE == PLAIN || ep.keeps_order());
        let store_tile = #[inline(always)]
        |j: u32, acc: &[[f32; 4]; MT]| {
            if pairs {
                let (_, column) = t.acc_position(lane, warp, 0, j, 0);
                // The block's outputs are a multiple of 4, so column + 1 exists with column.
                let Some((k, plane)) = p.output_plane::<MODE>(t, block, origin.image, column) else { return };
                let bias = if MODE == PLAIN { [0.0; 2] } else { [ep.load_bias(k), ep.load_bias(k + 1)] };
                for i in 0..MT {
                    for upper in 0..2 {
                        let (m, _) = t.acc_position(lane, warp, i as u32, j, 2 * upper as u32);
                        if let Some(at) = p.output_pixel(t, &origin, m) {
                            let at = plane + at;
                            let v = [0, 1]
                                .map(|d| ep.finish_as::<MODE>(acc[i][2 * upper + d], bias[d], at + d as u64, true));
                            stg_f32x2(y + 4 * at, v);
                        }
                    }
                }
                return;
            }
            for odd in 0..2 {
                let (_, column) = t.acc_position(lane, warp, 0, j, odd as u32);
                let Some((k, plane)) = p.output_plane::<MODE>(t, block, origin.image, column) else { continue };
                let bias = if MODE == PLAIN { 0.0 } else { ep.load_bias(k) };
                for i in 0..MT {
                    for upper in 0..2 {
                        let (m, _) = t.acc_position(lane, warp, i as u32, j, 2 * upper as u32);
                        if let Some(at) = p.output_pixel(t, &origin, m) {
                            let at = plane + at;
                            stg_f32(y + 4 * at, ep.finish_as::<MODE>(acc[i][2 * upper + odd], bias, at, true));
                        }
                    }
                }
            }
        };
        let by_n_tile = |acc: &[[[f32; 4]; NT]; MT], j: usize| core::array::from_fn::<_, MT, _>(|i| acc[i][j]);
        // An epilogue's code in every n-tile keeps LLVM from unrolling this loop (the smooth
        // activations' at any width, the clamps' from 7 n-tiles), and a rolled loop indexes the
        // accumulators at run time (local memory): there each step stores n-tile 0 and rotates
        // the next into its place. (Rolled for every epilogue, a shuffle alone cost the
        // narrower 16x8 tiles 6-20%.)
        if MODE == PLAIN || (MODE == CLAMP && NT <= 4) {
            // Unrolled by hand: with NHWC's pair stores beside the single ones, LLVM left the
            // 56- and 64-column loops rolled (224-256 bytes of stack, 2.4x slower).
            crate::unrolled::<NT>(|j| {
                store_tile(j as u32, &by_n_tile(acc, j));
                true
            });
        } else {
            let mut j = 0;
            while j < crate::opaque(NT as u32) {
                store_tile(j, &by_n_tile(acc, 0));
                for i in 0..MT {
                    for jj in 1..NT {
                        acc[i][jj - 1] = acc[i][jj];
                    }
                }
                j += 1;
            }
        }
    }
}
