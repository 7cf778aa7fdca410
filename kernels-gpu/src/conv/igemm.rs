//! Grouped convolution as an implicit GEMM on tensor cores (`mma.sync` m16n8k8: TF32 inputs,
//! f32 accumulators), forward, f32, NCHW or (flat tiles) NHWC read and written as they are: the
//! kernel ABI, its tile and fragment math and (on the GPU) the kernels. Launched by
//! `host/conv/igemm.rs`.
//!
//! Per group the convolution is a GEMM: rows = the output pixels of all images, columns = the
//! group's output channels, reduction = its input channels times filter taps. A block computes
//! `BM` pixels by `BN` columns; its pixels are a [`PixelTile`]:
//! - **flat**: `BM` consecutive pixels of `n * out_h * out_w`, so small maps still fill it; each
//!   input is copied once per filter tap (this file);
//! - **spatial**: rows by columns of one image ([`spatial`]): the inputs under the tile (its
//!   halo) are copied once per channel chunk and read at each tap's offset, about 1.4 copies
//!   per input for 3x3 filters instead of 9.
//!
//! Both:
//! - **Several groups per block** (CUTLASS's multiple-group mode): `groups_per_block` adjacent
//!   groups form one reduction over their channels whose weights are block-diagonal, the zeros
//!   written once by the packing ([`IgemmPackParams`]). A group of 4 outputs thus still fills
//!   an 8-wide mma; the zeros cost tensor-core time, which such narrow layers have to spare.
//! - **Packed filters**: once per plan, [`PACK_KERNEL`] lays the filters out as the panels the
//!   blocks copy, each chunk's `BN x BK` weights in shared-memory order, in 16-byte pieces
//!   (gathered 4 bytes at a time from KCRS they had been the largest cost), rounded to TF32;
//!   for 3xTF32 followed by their TF32 residuals, so that no kernel splits a weight (each warp
//!   split every weight it read, about 8 instructions each: more than the mma in a k-step).
//! - **Reduction order**: channel chunks of `BK` outer, filter taps inner ([`Chunk::next`]),
//!   the order of the packed panels: a flat tile's chunk is one tap of `BK` channels, which lie
//!   one plane apart for a thread's copies; a spatial tile's chunk is every tap of them.
//! - **Pipeline** (flat): [`LEAD`] chunks in flight through `cp.async` (NCHW inputs in 4-byte
//!   copies: its rows need not be aligned; NHWC inputs in 16-byte copies of 4 adjacent channels
//!   where [`INPUT_VECTORS`] says they are aligned), zero padding written by the copies' source
//!   size. The widest 3xTF32 warpgroup tiles keep one chunk's `wgmma` running behind the
//!   barrier, the next copies and the next chunk's A fragments ([`IgemmTile::wgmma_in_flight`]).
//! - **Shared layouts** (flat) for conflict-free 8-byte fragment loads: the A tile (inputs) is
//!   `[BK][a_stride]` with each 16-pixel m-tile's rows interleaved (row `i` at `2(i%8) + i/8`,
//!   so a lane's rows g and g+8 are adjacent) and `a_stride ≡ 8 mod 32`; the B tile (weights) is
//!   `[BN][b_stride]` with each 8-channel k-step interleaved (channel `k` at `2(k%4) + k/4`, so
//!   a lane's k and k+4 are adjacent) and `b_stride ≡ 8 or 24 mod 32`.
//!   NHWC tiles ([`IgemmTile::channels_last`]) keep A as `[BM][a_stride]`, a pixel's channels
//!   adjacent as the 16-byte copies leave them, and let the mma's k = t and t + 4 stand for the
//!   chunk's channels 2t and 2t + 1, so that one 8-byte load holds both; the packing lays the
//!   weights out in that order (their natural one) and the output is staged pixel-major.
//! - **Warps**: the 4 warps split the pixels; each holds `m_tiles x n_tiles` m16n8 accumulators.
//!   Warpgroup tiles ([`IgemmTile::warpgroup`], sm_90a) issue one `wgmma` per 64 pixels from all
//!   4 warps, 16 of its rows each ([`IgemmTile::fragment_row`]), with the same accumulator layout;
//!   the tensor cores read the weights from the stage through [`IgemmTile::b_descriptor`].
//! - **Precision**: TF32 rounds each input to 10 mantissa bits (PyTorch's default for
//!   convolutions); 3xTF32 splits each into a TF32 value and a residual (the weights' residual
//!   rounded to TF32 when packed, the inputs' left for `mma` to truncate:
//!   [`crate::tf32::split_tf32`]) and sums the three larger cross products of one tap's channel
//!   chunk at a time (of two 8-channel chunks on some warpgroup tiles:
//!   [`IgemmTile::chunks_per_sum`]), each such sum added to the total in f32 (the tensor cores
//!   truncate as they accumulate): an error near f32's.
//!
//! Fragments (PTX ISA, m16n8k8 `.tf32`; lane = 4·g + t): A holds (g, t), (g+8, t), (g, t+4),
//! (g+8, t+4); B holds (k t, n g), (k t+4, n g); the accumulator (g, 2t), (g, 2t+1), (g+8, 2t),
//! (g+8, 2t+1). The host's tests run the copy and fragment math here against an f64 reference.
//!
//! Grid: x = pixel tile, z = (block group, column tile) packed from `z_base`, unpacked with
//! magic division; a launch covers at most [`super::MAX_GRID_Z`] z-indices.

use crate::{MagicDiv, conv::epilogue::ModeEntries};
use bytemuck::{Pod, Zeroable};

pub mod spatial;

/// Threads per block: 4 warps.
pub const BLOCK_THREADS: u32 = 128;
pub const WARPS: u32 = BLOCK_THREADS / 32;
/// Reduction chunks a flat tile copies ahead of the one it computes ([`IgemmTile::stages`]).
pub const LEAD: u32 = 2;
/// Most pixels a thread copies inputs of ([`IgemmTile::copy_pixels`]).
pub const COPY_PIXELS: usize = 2;
/// Copies a loop of [`IgemmTile::copy_chunk`] makes unrolled: its copies' addresses are then
/// formed without the loop's bookkeeping, and (at most this many) stay few enough registers.
pub const UNROLLED_COPIES: u32 = 2;
/// Most input copies an NCHW flat tile's thread makes per chunk, all unrolled
/// ([`IgemmTile::copy_chunk`]: `BK / threads_per_pixel` of them).
pub const NCHW_INPUT_COPIES: usize = 24;

/// `copy(k)` for `k = first, first + step, ... < end` (`first < step`): unrolled where that is
/// at most [`UNROLLED_COPIES`] copies, else a loop. The tile's constants fold the choice away.
#[inline(always)]
fn each_copy(first: u32, step: u32, end: u32, copy: &mut impl FnMut(u32)) {
    if end.div_ceil(step) <= UNROLLED_COPIES {
        crate::unrolled::<{ UNROLLED_COPIES as usize }>(
            #[inline(always)]
            |i| {
                let k = first + step * i as u32;
                if k < end {
                    copy(k);
                }
                (i as u32 + 1) * step < end
            },
        );
    } else {
        let mut k = first;
        while k < end {
            copy(k);
            k += step;
        }
    }
}
/// Flag: four adjacent outputs may be stored as one 16-byte vector. NCHW: four pixels of one
/// channel (`out_h * out_w` a multiple of 4, so four pixels from a multiple of 4 on lie in one
/// image); NHWC: four channels of one pixel (`K` and the block's outputs multiples of 4; the
/// spatial tiles store two); `y` (and a residual) 16-byte aligned.
pub const STORE_VECTORS: u32 = 1;
/// Flag: the tensors are NHWC and the filters KRSC (else NCHW and KCRS).
pub const CHANNELS_LAST: u32 = 2;
/// Flag (NHWC): inputs may be copied 4 adjacent channels at a time (`C` and the block's
/// channels multiples of 4, `x` 16-byte aligned).
pub const INPUT_VECTORS: u32 = 4;

/// Parameters of every implicit-GEMM forward kernel, passed by value. Addresses are device
/// pointers; the host validates every extent to fit the kernel's index arithmetic (pixels of
/// all images and filter offsets below 2^31; input and output offsets are 64-bit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct IgemmFwdParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    /// `in_h * in_w`.
    pub in_plane: u32,
    /// `out_h * out_w`.
    pub out_plane: u32,
    pub window: super::Window,
    /// `filter_r * filter_s`.
    pub taps: u32,
    pub channels: u32,
    pub out_channels: u32,
    pub c_per_group: u32,
    /// Channels of one block's groups: `groups_per_block * c_per_group`.
    pub block_channels: u32,
    /// Output channels of one block's groups: `groups_per_block * k_per_group`.
    pub block_outputs: u32,
    /// Chunks of `BK` channels per filter tap: `ceil(block_channels / BK)`.
    pub channel_chunks: u32,
    /// Output pixels of all images: `n * out_h * out_w`.
    pub batch_pixels: u32,
    /// Packed z-index of this launch's `blockIdx.z == 0`.
    pub z_base: u32,
    /// [`STORE_VECTORS`], [`CHANNELS_LAST`], [`INPUT_VECTORS`], where they apply.
    pub flags: u32,
    /// Divides a packed z-index by the column tiles per block group.
    pub column_tiles: MagicDiv,
    /// Divides a flat pixel by `out_h * out_w`.
    pub out_plane_div: MagicDiv,
    /// Divides a pixel of one image by `out_w`.
    pub out_w_div: MagicDiv,
    /// Divides a channel of a block's groups by `c_per_group`: (group in block, channel in group).
    pub c_per_group_div: MagicDiv,
    /// Divides an output of a block's groups by `k_per_group`.
    pub k_per_group_div: MagicDiv,
    pub epilogue: super::epilogue::EpilogueParams,
}

/// The block's groups and column tile, unpacked from its packed z-index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCoords {
    /// Index of the block's first group over `groups_per_block`.
    pub block_group: u32,
    pub column_tile: u32,
}

/// What one thread copies from: its block's groups and column tile, and where its pixel reads
/// filter tap (0, 0), from which each chunk moves every pixel alike ([`IgemmTile::copy_chunk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelSource {
    pub block: BlockCoords,
    /// Element offset of channel `block_group * block_channels` of the pixel's image at input
    /// position (`ih0`, `iw0`), modulo 2^64: it lies before the tensor where that position is
    /// padding (a tap inside the image brings it back).
    pub origin: u64,
    pub ih0: i32,
    pub iw0: i32,
    /// Whether the pixel exists (the last pixel tile may run past the batch).
    pub valid: bool,
}

/// One reduction chunk: filter tap (r, s) and chunk `cc` of `BK` channels; `index` counts
/// the chunks before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub r: u32,
    pub s: u32,
    pub cc: u32,
    pub index: u32,
}

impl Chunk {
    pub const FIRST: Chunk = Chunk { r: 0, s: 0, cc: 0, index: 0 };

    /// The chunk after this one: filter columns fastest, then rows, then channel chunks (the
    /// order of the packed panels, which the spatial tiles copy a channel chunk's taps at once in).
    #[inline(always)]
    pub fn next(self, p: &IgemmFwdParams) -> Chunk {
        let Chunk { mut r, mut s, mut cc, index } = self;
        s += 1;
        if s == p.window.filter_s {
            s = 0;
            r += 1;
            if r == p.window.filter_r {
                r = 0;
                cc += 1;
            }
        }
        Chunk { r, s, cc, index: index + 1 }
    }
}

impl IgemmFwdParams {
    /// Whether the tensors are NHWC ([`CHANNELS_LAST`]).
    #[inline(always)]
    pub fn channels_last(&self) -> bool {
        self.flags & CHANNELS_LAST != 0
    }

    /// Inverse of `block_group * column_tiles + column_tile`.
    #[inline(always)]
    pub fn block_coords(&self, z: u32) -> BlockCoords {
        let (block_group, column_tile) = self.column_tiles.div_rem(z);
        BlockCoords { block_group, column_tile }
    }

    /// Reduction chunks of a block: filter taps times channel chunks.
    #[inline(always)]
    pub fn chunks(&self) -> u32 {
        self.taps * self.channel_chunks
    }

    /// Where flat pixel `flat` reads the inputs of `block`'s groups (NHWC where `channels_last`,
    /// the tile's layout: a compile-time constant in the kernels).
    #[inline(always)]
    pub fn pixel_source(&self, block: BlockCoords, flat: u32, channels_last: bool) -> PixelSource {
        let (image, pixel) = self.out_plane_div.div_rem(flat);
        let (oh, ow) = self.out_w_div.div_rem(pixel);
        let first_channel = (block.block_group * self.block_channels) as u64;
        let ih0 = (oh * self.window.stride_h) as i32 - self.window.pad_h;
        let iw0 = (ow * self.window.stride_w) as i32 - self.window.pad_w;
        let position = ih0 as i64 * self.in_w as i64 + iw0 as i64;
        let (plane, origin) = if channels_last {
            let plane = image as u64 * self.in_plane as u64 * self.channels as u64 + first_channel;
            (plane, position * self.channels as i64)
        } else {
            ((image as u64 * self.channels as u64 + first_channel) * self.in_plane as u64, position)
        };
        PixelSource { block, origin: plane.wrapping_add_signed(origin), ih0, iw0, valid: flat < self.batch_pixels }
    }

    /// The filter element of output `column` of `block`'s groups (column tile included) and
    /// channel `c` of them at filter tap `tap`: its offset in KCRS (NHWC: KRSC) order, or `None`
    /// for a zero (a padding column or channel, or another group's channel).
    #[inline(always)]
    pub fn weight_source(&self, block: BlockCoords, tap: u32, column: u32, c: u32) -> Option<u32> {
        let (n_group, _) = self.k_per_group_div.div_rem(column);
        let (c_group, c_in_group) = self.c_per_group_div.div_rem(c);
        let inside = (column < self.block_outputs) & (c < self.block_channels) & (n_group == c_group);
        let output = block.block_group * self.block_outputs + column;
        let offset = if self.channels_last() {
            (output * self.taps + tap) * self.c_per_group + c_in_group
        } else {
            (output * self.c_per_group + c_in_group) * self.taps + tap
        };
        inside.then_some(offset)
    }
}

/// Input rounding of a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Inputs rounded to TF32: one mma per product.
    Tf32,
    /// Inputs split into TF32 value and TF32 residual: three mma per product.
    Tf32x3,
}

impl Precision {
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Tf32 => "tf32",
            Precision::Tf32x3 => "3xtf32",
        }
    }
}

/// Entry point that packs a layer's filters for one tile shape ([`IgemmPackParams`]).
pub const PACK_KERNEL: &str = "igemm_pack_weights";

/// Parameters of [`PACK_KERNEL`]: the filters (KCRS, or KRSC for NHWC) rearranged into the panels the
/// convolution copies, one per (block group, column tile, chunk) in that order, each
/// [`IgemmTile::regions`] times `BN` rows of `BK` floats (a row's channels in the
/// shared-memory order of [`IgemmTile::b_slot`]), zeros where the block-diagonal or the padding
/// has them: the weights rounded to TF32, and for 3xTF32 then the same rows' TF32 residuals.
/// The kernels feed them to the tensor cores as they are. One thread per packed element.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct IgemmPackParams {
    pub w: u64,
    pub packed: u64,
    /// Packed elements in all (the host checks that they fit).
    pub total: u32,
    /// Output rows of a panel region: the tile's `BN`.
    pub bn: u32,
    /// 1: each panel's `BN` rows of TF32 values are followed by `BN` rows of their TF32
    /// residuals ([`Precision::Tf32x3`]); 0: values only.
    pub split: u32,
    /// 1: each region of a panel in the core matrices of a warpgroup tile's stage
    /// ([`IgemmTile::b_slot`]) instead of rows of `BK`.
    pub warpgroup: u32,
    /// The convolution's parameters (the extents and divisors the panels follow).
    pub conv: IgemmFwdParams,
    /// Divides a packed element by the panel's floats: (panel, element of the panel).
    pub panel: MagicDiv,
    /// Divides an element of a panel by `BK`: (row, position in the row).
    pub row: MagicDiv,
    /// Divides a panel by the chunks of a block.
    pub chunks: MagicDiv,
    /// Divides a chunk by the filter taps: (channel chunk, tap).
    pub taps: MagicDiv,
}

/// What one packed element holds ([`IgemmPackParams::source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedSource {
    /// The filter element's offset, or `None` for a zero.
    pub offset: Option<u32>,
    /// Whether it holds the element's TF32 residual (3xTF32's second region), else its TF32 value.
    pub residual: bool,
}

impl IgemmPackParams {
    /// What packed element `e` holds.
    #[inline(always)]
    pub fn source(&self, e: u32) -> PackedSource {
        let (panel, within) = self.panel.div_rem(e);
        let (row, position) = self.row.div_rem(within);
        let residual = self.split != 0 && row >= self.bn;
        let row = if residual { row - self.bn } else { row };
        // Inverse of b_slot's order within each k-step (position j of 8): rows of BK with NCHW
        // channel j / 2 + 4 (j % 2) at j, NHWC channel j; a warpgroup tile's core matrices with
        // NCHW channel j at k index j, NHWC channel 2 (j % 4) + j / 4.
        let warpgroup = self.warpgroup != 0;
        let (n, position) = if warpgroup {
            let within_group = (row % 8) * self.row.divisor + position;
            (row - row % 8 + within_group % 32 / 4, within_group / 32 * 4 + within_group % 4)
        } else {
            (row, position)
        };
        let j = position % 8;
        let k = position - j
            + match (warpgroup, self.conv.channels_last()) {
                (false, false) => j / 2 + 4 * (j % 2),
                (true, true) => 2 * (j % 4) + j / 4,
                _ => j,
            };
        let (rest, chunk) = self.chunks.div_rem(panel);
        let (block_group, column_tile) = self.conv.column_tiles.div_rem(rest);
        let (cc, tap) = self.taps.div_rem(chunk);
        let block = BlockCoords { block_group, column_tile };
        let offset = self.conv.weight_source(block, tap, column_tile * self.bn + n, cc * self.row.divisor + k);
        PackedSource { offset, residual }
    }
}

/// The output pixels a block computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelTile {
    /// `BM` consecutive pixels of the flattened `n * out_h * out_w`.
    Flat,
    /// `BM / cols` rows by `cols` columns of one image's output ([`spatial`]); `cols` is 8 or 16,
    /// so that a fragment's 8 rows lie in one row of the tile.
    Spatial { cols: u32 },
}

/// One variant: precision and tile (each is its own PTX entry point).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgemmTile {
    /// The variant's name, its plain entry point's.
    pub name: &'static str,
    /// One entry point per store mode (the spatial tiles' registers rose by up to 60 with the
    /// plain and the epilogues' stores in one kernel).
    pub entries: ModeEntries,
    pub precision: Precision,
    pub pixels: PixelTile,
    /// m16 tiles per warp: `BM = 64 * m_tiles`.
    pub m_tiles: u32,
    /// n8 tiles per warp (and block): `BN = 8 * n_tiles`.
    pub n_tiles: u32,
    /// k8 steps per chunk: `BK = 8 * k_steps` (1 for spatial tiles).
    pub k_steps: u32,
    /// Whether the kernel reads and writes NHWC tensors with KRSC filters, else NCHW and KCRS.
    pub channels_last: bool,
    /// Whether the block's 4 warps multiply as one warpgroup (`wgmma`, sm_90a; flat tiles of
    /// 128 pixels): each instruction takes 64 pixels' A fragments from registers and reads the
    /// weights itself from shared memory ([`IgemmTile::b_descriptor`]), so that no warp loads B
    /// fragments; else each warp runs `mma.sync` on its own rows.
    pub warpgroup: bool,
}

/// The least multiple of 8 from `min` on that is ≡ 8 or 24 mod 32: a row stride at which the
/// 8-byte loads of 4 rows (16 lanes, 2 words each) fall in 32 different banks.
/// Loop-free, so that LLVM folds it: the loop it replaced stayed in the PTX, run per use (up to
/// 88 times in a kernel's epilogue and copies).
pub const fn conflict_free_stride(min: u32) -> u32 {
    let s = min.next_multiple_of(8);
    // s ≡ 0, 8, 16 or 24 mod 32; 0 and 16 move up to 8 and 24.
    if s.is_multiple_of(16) { s + 8 } else { s }
}

/// A byte address or offset as a `wgmma` matrix descriptor holds it: 14 bits in 16-byte units.
const fn descriptor_field(bytes: u32) -> u64 {
    ((bytes & 0x3ffff) >> 4) as u64
}

impl IgemmTile {
    /// The tile a kernel instance computes (its name is the entry point's, not needed there).
    pub const fn of_kernel(
        split: bool,
        pixels: PixelTile,
        m_tiles: u32,
        n_tiles: u32,
        k_steps: u32,
        channels_last: bool,
        warpgroup: bool,
    ) -> Self {
        let precision = if split { Precision::Tf32x3 } else { Precision::Tf32 };
        let entries = ModeEntries { plain: "", clamp: "", smooth: "" };
        IgemmTile { name: "", entries, precision, pixels, m_tiles, n_tiles, k_steps, channels_last, warpgroup }
    }

    /// The most blocks of this variant an SM should run at once, where fewer than fit: the
    /// plan pads the dynamic shared memory to enforce it (a spatial tile's persistent grid
    /// would follow). Measured on the H200: TF32 NCHW
    /// `m128_n32_k16` (70 registers, 35 KB: 6 blocks per SM) runs 10-15% faster at stride 2
    /// with 4 blocks and no slower at stride 1; 5 was no faster than 6, and the other flat
    /// tiles, 3xTF32 included, only slowed with fewer (benches/NOTES.md, "Tensor-core grouped
    /// kernel", v2.3).
    pub const fn blocks_per_sm_cap(&self) -> Option<u32> {
        if self.warpgroup {
            return None;
        }
        match (self.precision, self.pixels, self.channels_last, self.m_tiles, self.n_tiles, self.k_steps) {
            (Precision::Tf32, PixelTile::Flat, false, 2, 4, 2) => Some(4),
            _ => None,
        }
    }

    /// The blocks per SM that ptxas must fit this variant's registers to, where left alone it
    /// fits fewer ([`crate::launch_bounds`]). Measured on an H100 (benches/NOTES.md, "Tensor-core
    /// NHWC", v7): TF32 NHWC `m128_n56_k8` at 130 registers ran 3 blocks per SM where 122 had
    /// run 4, and 7-19% slower on layers of one or two waves; ptxas fits 4 without spilling.
    /// 3xTF32 NHWC warpgroup `m128_n24_k8` took 101 registers (4 blocks) with sums of two
    /// chunks ([`Self::chunks_per_sum`]) where it had taken 89 (5); ptxas fits 5 unspilled.
    pub const fn min_blocks_per_sm(&self) -> Option<u32> {
        match (self.precision, self.pixels, self.channels_last, self.warpgroup, self.n_tiles, self.k_steps) {
            (Precision::Tf32, PixelTile::Flat, true, false, 7, 1) => Some(4),
            (Precision::Tf32x3, PixelTile::Flat, true, true, 3, 1) => Some(5),
            _ => None,
        }
    }

    /// Pixels per block.
    pub const fn bm(&self) -> u32 {
        16 * WARPS * self.m_tiles
    }

    /// Output channels per block.
    pub const fn bn(&self) -> u32 {
        8 * self.n_tiles
    }

    /// Channels per reduction chunk.
    pub const fn bk(&self) -> u32 {
        8 * self.k_steps
    }

    /// Floats per row of the A tile: NCHW one channel, `BM` pixels, ≡ 8 mod 32; NHWC one pixel,
    /// `BK` channels, [`conflict_free_stride`].
    pub const fn a_stride(&self) -> u32 {
        if self.channels_last { conflict_free_stride(self.bk()) } else { self.bm() + 8 }
    }

    /// Floats per row of the B tile (one output, `BK` channels); a warpgroup tile's B tile
    /// has no padding ([`Self::b_slot`]).
    pub const fn b_stride(&self) -> u32 {
        if self.warpgroup { self.bk() } else { conflict_free_stride(self.bk()) }
    }

    /// Regions an operand takes in a packed panel or a stage (weights; a spatial tile's inputs
    /// too): the TF32 values, and for 3xTF32 their TF32 residuals.
    pub const fn regions(&self) -> u32 {
        match self.precision {
            Precision::Tf32 => 1,
            Precision::Tf32x3 => 2,
        }
    }

    /// Floats of one chunk's packed panel.
    pub const fn panel_floats(&self) -> u32 {
        self.regions() * self.bn() * self.bk()
    }

    /// How far a 3xTF32 weight's residual lies from the weight's slot in a flat tile's stage.
    pub const fn b_residual(&self) -> u32 {
        self.bn() * self.b_stride()
    }

    pub const fn a_floats(&self) -> u32 {
        (if self.channels_last { self.bm() } else { self.bk() }) * self.a_stride()
    }

    pub const fn stage_floats(&self) -> u32 {
        self.a_floats() + self.regions() * self.b_residual()
    }

    /// Floats per row of the epilogue's staging tile. NCHW: one output channel, `BM` pixels,
    /// ≡ 4 mod 32, so that the accumulators of a warp (8 pixels by 8 channels) land in 32 banks;
    /// NHWC: one pixel, `BN` channels, [`conflict_free_stride`] for 8-byte stores of pairs.
    pub const fn out_stride(&self) -> u32 {
        if self.channels_last { conflict_free_stride(self.bn()) } else { self.bm() + 4 }
    }

    /// Slot of (pixel `m`, output `n`) in the epilogue's staging tile.
    #[inline(always)]
    pub const fn out_slot(&self, m: u32, n: u32) -> u32 {
        if self.channels_last { m * self.out_stride() + n } else { n * self.out_stride() + m }
    }

    /// Whether compute capability `cc`'s module has this tile: warpgroup tiles are in the
    /// architecture-specific (sm_90a) one only ([`crate::arch_specific`]).
    pub const fn in_module(&self, cc: u32) -> bool {
        !self.warpgroup || crate::arch_specific(cc)
    }

    /// Whether the tile keeps a chunk's `wgmma` running while it loads the next chunk's A
    /// fragments (a stage more, two chunks' fragments in registers; only 3xTF32, whose chunk
    /// sums break the accumulator chain that ptxas would otherwise serialise). Measured on an
    /// H100 (benches/NOTES.md, "Tensor-core NHWC", v12): 9-10% faster on the n64 tiles, which
    /// ran 2 blocks per SM before and after; no faster or up to 10% slower on the others, whose
    /// extra registers cost a block per SM that had hidden the wait.
    pub const fn wgmma_in_flight(&self) -> bool {
        self.warpgroup && matches!(self.precision, Precision::Tf32x3) && self.n_tiles == 8
    }

    /// Chunks (1 or 2) whose products a 3xTF32 warpgroup tile sums in the tensor cores before
    /// it adds the sum to the total in f32: two where the tile waits per k-step and its chunks
    /// are one k-step, so that each sum runs 6 `wgmma` as every 3xTF32 tile of 16-channel chunks
    /// does (the same truncation, which the host's bound covers) in half the adds. The sum
    /// takes no more registers: `wgmma` reads and writes it, so it lives across chunks anyway.
    pub const fn chunks_per_sum(&self) -> u32 {
        let split = matches!(self.precision, Precision::Tf32x3);
        if self.warpgroup && split && !self.wgmma_in_flight() && self.k_steps == 1 { 2 } else { 1 }
    }

    /// Whether chunk `q` opens a 3xTF32 sum (its first `wgmma` overwrites the last one).
    #[inline(always)]
    pub const fn opens_sum(&self, q: u32) -> bool {
        q.is_multiple_of(self.chunks_per_sum())
    }

    /// Whether the sum is added to the total after chunk `q` of `chunks`: the last of its run,
    /// or of the block.
    #[inline(always)]
    pub const fn closes_sum(&self, q: u32, chunks: u32) -> bool {
        (q + 1).is_multiple_of(self.chunks_per_sum()) || q + 1 == chunks
    }

    /// Chunks in shared memory at once: the computed one and [`LEAD`] in flight, and where
    /// [`Self::wgmma_in_flight`] the one whose `wgmma` still runs.
    pub const fn stages(&self) -> u32 {
        LEAD + 1 + self.wgmma_in_flight() as u32
    }

    /// The pipeline's stages, or the epilogue's staging tile where larger.
    pub const fn smem_bytes(&self) -> u32 {
        let stages = self.stages() * self.stage_floats();
        let staging = (if self.channels_last { self.bm() } else { self.bn() }) * self.out_stride();
        4 * if stages > staging { stages } else { staging }
    }

    /// Threads that copy one pixel's channels of a chunk: NCHW `BLOCK_THREADS / BM`, each
    /// pixel's own; NHWC 2 adjacent lanes, so that a warp's 16-byte copies take 32 bytes of each
    /// of 16 pixels (a pixel's channels of a block group lie apart from the next pixel's, and
    /// each pixel a warp touches costs the L1 a pass).
    pub const fn threads_per_pixel(&self) -> u32 {
        if self.channels_last { 2 } else { BLOCK_THREADS / self.bm() }
    }

    /// Pixels each thread copies: NHWC `BM / 64` ([`COPY_PIXELS`] at most), NCHW 1.
    pub const fn copy_pixels(&self) -> u32 {
        self.bm() * self.threads_per_pixel() / BLOCK_THREADS
    }

    /// The block's pixel that `thread` copies `j`-th (`j < copy_pixels`).
    #[inline(always)]
    pub const fn copy_row(&self, thread: u32, j: u32) -> u32 {
        if self.channels_last { thread / 2 + j * (BLOCK_THREADS / 2) } else { thread % self.bm() }
    }

    /// Slot of A-tile element (pixel `m` of the block, channel `k` of the chunk) in a stage.
    #[inline(always)]
    pub const fn a_slot(&self, m: u32, k: u32) -> u32 {
        if self.channels_last {
            m * self.a_stride() + k
        } else {
            k * self.a_stride() + (m & !15) + 2 * (m & 7) + ((m >> 3) & 1)
        }
    }

    /// Slot of B-tile element (output `n` of the block's column tile, channel `k` of the chunk;
    /// `n` from `BN` on: the residual of output `n - BN`).
    /// Warpgroup tiles: `wgmma`'s K-major layout without swizzling, in core matrices of 8 outputs
    /// by 4 consecutive k (16-byte rows, 128 contiguous bytes), k-adjacent ones 128 bytes apart
    /// and each 8 outputs `32 · BK` bytes on ([`Self::b_descriptor`]); the k index of channel `k`
    /// pairs it with the A fragment's ([`Self::mma_channel`]).
    #[inline(always)]
    pub const fn b_slot(&self, n: u32, k: u32) -> u32 {
        if self.warpgroup {
            let kk = (k & !7) + if self.channels_last { 4 * (k & 1) + ((k & 7) >> 1) } else { k & 7 };
            return self.a_floats() + (n / 8) * 8 * self.bk() + (kk / 4) * 32 + (n % 8) * 4 + kk % 4;
        }
        let k_slot = if self.channels_last { k } else { (k & !7) + 2 * (k & 3) + ((k >> 2) & 1) };
        self.a_floats() + n * self.b_stride() + k_slot
    }

    /// The stage slot of 16-byte piece `e` of a chunk's packed panel, which lies in the panel's
    /// order ([`IgemmPackParams`]): rows of `BK` floats (the values', then 3xTF32's residuals'), or a
    /// warpgroup tile's core matrices as they are.
    #[inline(always)]
    pub const fn b_piece_slot(&self, e: u32) -> u32 {
        if self.warpgroup {
            self.a_floats() + 4 * e
        } else {
            let row_pieces = self.bk() / 4;
            self.b_slot(e / row_pieces, 0) + 4 * (e % row_pieces)
        }
    }

    /// The `wgmma` matrix descriptor of k-step `ks`'s weights (`residual`: 3xTF32's residuals) in
    /// the stage at shared address `stage`: K-major, no swizzling ([`Self::b_slot`]), the leading
    /// byte offset (between k-adjacent core matrices) 128, the stride byte offset (between
    /// 8-output groups) `32 · BK`; addresses and offsets in 16-byte units (PTX ISA, "Matrix
    /// Descriptor Format").
    #[inline(always)]
    pub const fn b_descriptor(&self, stage: u32, ks: u32, residual: bool) -> u64 {
        let region = if residual { self.b_residual() } else { 0 };
        let start = stage + 4 * (self.a_floats() + region) + 256 * ks;
        descriptor_field(start) | (descriptor_field(128) << 16) | (descriptor_field(32 * self.bk()) << 32)
    }

    /// The block's first pixel row of `warp`'s m-tile `i`: `mma.sync` tiles give each warp
    /// `m_tiles` adjacent m16 tiles; a warpgroup instruction covers 64 rows, 16 per warp.
    #[inline(always)]
    pub const fn fragment_row(&self, warp: u32, i: u32) -> u32 {
        if self.warpgroup { 64 * i + 16 * warp } else { 16 * (warp * self.m_tiles + i) }
    }

    /// Chunk channel of the mma's k-index `t` or (`upper`) `t + 4` (`t < 4`) in k-step `ks`: the
    /// same channel for NCHW; the adjacent pair 2t, 2t + 1 for NHWC, which one 8-byte load of a
    /// pixel's channels then holds (A and B alike, so that the products still pair up).
    #[inline(always)]
    pub const fn mma_channel(&self, ks: u32, t: u32, upper: bool) -> u32 {
        8 * ks + if self.channels_last { 2 * t + upper as u32 } else { t + 4 * upper as u32 }
    }

    /// Slots of `lane`'s two 8-byte A loads of m-tile `i`, k-step `ks`, which
    /// [`Self::a_fragment`] orders: NCHW the pairs (A(g, k), A(g+8, k)) for k = t and t + 4
    /// (the interleaved rows), NHWC the pairs (A(g, k), A(g, k+4)) of pixels g and g + 8.
    #[inline(always)]
    pub const fn a_pairs(&self, lane: u32, warp: u32, i: u32, ks: u32) -> [u32; 2] {
        let (g, t) = (lane / 4, lane % 4);
        let m = self.fragment_row(warp, i) + g;
        if self.channels_last {
            let k = self.mma_channel(ks, t, false);
            [self.a_slot(m, k), self.a_slot(m + 8, k)]
        } else {
            [self.a_slot(m, self.mma_channel(ks, t, false)), self.a_slot(m, self.mma_channel(ks, t, true))]
        }
    }

    /// The A fragment (g, t), (g+8, t), (g, t+4), (g+8, t+4) from the loads at [`Self::a_pairs`].
    #[inline(always)]
    pub fn a_fragment<T: Copy>(&self, [p, q]: [[T; 2]; 2]) -> [T; 4] {
        if self.channels_last { [p[0], q[0], p[1], q[1]] } else { [p[0], p[1], q[0], q[1]] }
    }

    /// Slot of the pair (B(k t, n g), B(k t+4, n g)) of n-tile `j`, k-step `ks` for `lane`
    /// (adjacent in either layout's [`Self::b_slot`] order).
    #[inline(always)]
    pub const fn b_pair(&self, lane: u32, j: u32, ks: u32) -> u32 {
        let (g, t) = (lane / 4, lane % 4);
        self.b_slot(8 * j + g, self.mma_channel(ks, t, false))
    }

    /// (pixel of the block, output of the column tile) of accumulator `e` of tile (i, j).
    #[inline(always)]
    pub const fn acc_position(&self, lane: u32, warp: u32, i: u32, j: u32, e: u32) -> (u32, u32) {
        let (g, t) = (lane / 4, lane % 4);
        (self.fragment_row(warp, i) + g + 8 * (e / 2), 8 * j + 2 * t + e % 2)
    }

    /// Blocks along the grid's x for `pixels` output pixels.
    pub const fn grid_x(&self, pixels: u64) -> u64 {
        pixels.div_ceil(self.bm() as u64)
    }

    /// Calls `copy_x(slot, offset, inside, wide)` for each of `thread`'s input copies of `chunk`
    /// (`wide`: 16 bytes, else 4; `offset` 0 where `inside` is false, which copies zeros) and
    /// `copy_w4(slot, offset)` for its 16-byte copies of packed weights (slots within a stage).
    /// `sources` are the thread's pixels ([`Self::copy_sources`]). Every loop runs the tile's
    /// own count, unrolled, and a chunk moves all pixels' sources by one offset: per copy an
    /// addition and the tap's bounds test remain.
    #[inline(always)]
    pub fn copy_chunk(
        &self,
        p: &IgemmFwdParams,
        sources: &[PixelSource; COPY_PIXELS],
        thread: u32,
        chunk: Chunk,
        mut copy_x: impl FnMut(u32, u64, bool, bool),
        mut copy_w4: impl FnMut(u32, u64),
    ) {
        let first_channel = chunk.cc * self.bk();
        let channels = p.block_channels.saturating_sub(first_channel);
        let (dh, dw) = (chunk.r * p.window.dil_h, chunk.s * p.window.dil_w);
        let in_image = #[inline(always)]
        |src: &PixelSource| {
            src.valid & (((src.ih0 + dh as i32) as u32) < p.in_h) & (((src.iw0 + dw as i32) as u32) < p.in_w)
        };
        // The tap's input position relative to (ih0, iw0), the same for every pixel.
        let tap = dh as u64 * p.in_w as u64 + dw as u64;
        if self.channels_last {
            // A pixel's channels are adjacent: 4 per copy where INPUT_VECTORS allows (then a
            // copy lies wholly inside or outside the block's channels), else 1.
            let chunk_offset = tap * p.channels as u64 + first_channel as u64;
            let mut copies = #[inline(always)]
            |width: u32| {
                crate::unrolled::<COPY_PIXELS>(
                    #[inline(always)]
                    |j| {
                        if j < self.copy_pixels() as usize {
                            let (m, src) = (self.copy_row(thread, j as u32), &sources[j]);
                            let (at_tap, tap_offset) = (in_image(src), src.origin.wrapping_add(chunk_offset));
                            let mut copy = #[inline(always)]
                            |k: u32| {
                                let inside = at_tap & (k < channels);
                                let offset = if inside { tap_offset + k as u64 } else { 0 };
                                copy_x(self.a_slot(m, k), offset, inside, width == 4);
                            };
                            each_copy(width * (thread % 2), width * self.threads_per_pixel(), self.bk(), &mut copy);
                        }
                        true
                    },
                );
            };
            if p.flags & INPUT_VECTORS != 0 { copies(4) } else { copies(1) }
        } else {
            let (src, m) = (&sources[0], self.copy_row(thread, 0));
            let at_tap = in_image(src);
            // A thread copies every `threads_per_pixel`-th channel from `thread / BM` on (which is
            // below `threads_per_pixel`: the block's threads are `BM` times that), a fixed number
            // of planes apart: one addition per copy, and as many copies as the tile says, so that
            // they unroll (a loop from `thread / BM` compiled to a remainder loop and an unrolled
            // one, about a third of the 3xTF32 n56 warpgroup tile's chunk loop).
            let (tpp, first) = (self.threads_per_pixel(), thread / self.bm());
            let mut offset = src.origin.wrapping_add(tap + (first_channel + first) as u64 * p.in_plane as u64);
            let step = tpp as u64 * p.in_plane as u64;
            let copies = self.bk() / tpp;
            crate::unrolled::<NCHW_INPUT_COPIES>(
                #[inline(always)]
                |i| {
                    let k = first + tpp * i as u32;
                    if (i as u32) < copies {
                        let inside = at_tap & (k < channels);
                        copy_x(self.a_slot(m, k), if inside { offset } else { 0 }, inside, false);
                        offset = offset.wrapping_add(step);
                    }
                    i as u32 + 1 < copies
                },
            );
        }
        // Weights: the chunk's packed panel ([`IgemmPackParams`]), rows of BK floats already
        // in shared-memory order (3xTF32's residual rows after the values), in 16-byte pieces:
        // piece `e` of the panel is its floats `4e ..`.
        let panel = self.panel_offset(p, sources[0].block, chunk.index);
        let pieces = self.regions() * self.bn() * self.bk() / 4;
        let mut copy = #[inline(always)]
        |e: u32| copy_w4(self.b_piece_slot(e), panel + 4 * e as u64);
        each_copy(thread, BLOCK_THREADS, pieces, &mut copy);
    }

    /// Element offset of chunk `index`'s panel of `block` in the packed weights.
    #[inline(always)]
    pub fn panel_offset(&self, p: &IgemmFwdParams, block: BlockCoords, index: u32) -> u64 {
        let panel = (block.block_group * p.column_tiles.divisor + block.column_tile) as u64 * p.chunks() as u64;
        (panel + index as u64) * self.panel_floats() as u64
    }

    /// The sources of the pixels `thread` copies in pixel tile `tile` (the first
    /// [`Self::copy_pixels`]; the rest repeat the first).
    #[inline(always)]
    pub fn copy_sources(
        &self,
        p: &IgemmFwdParams,
        block: BlockCoords,
        tile: u32,
        thread: u32,
    ) -> [PixelSource; COPY_PIXELS] {
        core::array::from_fn(|j| {
            let j = if (j as u32) < self.copy_pixels() { j as u32 } else { 0 };
            p.pixel_source(block, tile * self.bm() + self.copy_row(thread, j), self.channels_last)
        })
    }

    /// Element offset of output channel `k` (of all, where stored) at flat pixel `flat`.
    #[inline(always)]
    pub fn output_offset(&self, p: &IgemmFwdParams, flat: u32, k: u32) -> u64 {
        if self.channels_last {
            return flat as u64 * p.out_channels as u64 + k as u64;
        }
        let (image, pixel) = p.out_plane_div.div_rem(flat);
        (image as u64 * p.out_channels as u64 + k as u64) * p.out_plane as u64 + pixel as u64
    }
}

/// The [`IgemmTile`] of entry point `$name`: (split, pixels, m_tiles, n_tiles, k_steps,
/// channels_last, warpgroup).
macro_rules! igemm_tile {
    ($name:ident, $split:expr, $pixels:expr, $mt:literal, $nt:literal, $ks:literal, $nhwc:expr, $wg:expr) => {
        IgemmTile {
            name: stringify!($name),
            entries: crate::mode_entries!($name),
            ..IgemmTile::of_kernel($split, $pixels, $mt, $nt, $ks, $nhwc, $wg)
        }
    };
}

macro_rules! igemm_fwd_variants {
    (
        flat: $(($tf:ident, $x3:ident, $ntf:ident, $nx3:ident, $mt:literal, $nt:literal, $ks:literal)),* $(,)?;
        warpgroup: $(($wtf:ident, $wx3:ident, $wntf:ident, $wnx3:ident, $wnt:literal, $wks:literal)),* $(,)?;
        spatial: $(($stf:ident, $sx3:ident, $nstf:ident, $nsx3:ident, $smt:literal, $snt:literal, $cols:literal)),* $(,)?
    ) => {
        /// Every variant in the PTX, by entry-point name: each NCHW flat tile in TF32, then in
        /// 3xTF32; the NHWC flat tiles alike; the warpgroup flat tiles alike (sm_90a modules
        /// only: [`IgemmTile::warpgroup`]); then the spatial tiles alike (NCHW, NHWC).
        pub const IGEMM_FWD_VARIANTS: &[IgemmTile] = &[
            $(igemm_tile!($tf, false, PixelTile::Flat, $mt, $nt, $ks, false, false),)*
            $(igemm_tile!($x3, true, PixelTile::Flat, $mt, $nt, $ks, false, false),)*
            $(igemm_tile!($ntf, false, PixelTile::Flat, $mt, $nt, $ks, true, false),)*
            $(igemm_tile!($nx3, true, PixelTile::Flat, $mt, $nt, $ks, true, false),)*
            $(igemm_tile!($wtf, false, PixelTile::Flat, 2, $wnt, $wks, false, true),)*
            $(igemm_tile!($wx3, true, PixelTile::Flat, 2, $wnt, $wks, false, true),)*
            $(igemm_tile!($wntf, false, PixelTile::Flat, 2, $wnt, $wks, true, true),)*
            $(igemm_tile!($wnx3, true, PixelTile::Flat, 2, $wnt, $wks, true, true),)*
            $(igemm_tile!($stf, false, PixelTile::Spatial { cols: $cols }, $smt, $snt, 1, false, false),)*
            $(igemm_tile!($sx3, true, PixelTile::Spatial { cols: $cols }, $smt, $snt, 1, false, false),)*
            $(igemm_tile!($nstf, false, PixelTile::Spatial { cols: $cols }, $smt, $snt, 1, true, false),)*
            $(igemm_tile!($nsx3, true, PixelTile::Spatial { cols: $cols }, $smt, $snt, 1, true, false),)*
        ];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            $(
                crate::mode_entry_points!($tf, super::IgemmFwdParams, super::device::convolve, [$mt, $nt, $ks, false, false, false]);
                crate::mode_entry_points!($x3, super::IgemmFwdParams, super::device::convolve, [$mt, $nt, $ks, true, false, false]);
                crate::mode_entry_points!($ntf, super::IgemmFwdParams, super::device::convolve, [$mt, $nt, $ks, false, true, false]);
                crate::mode_entry_points!($nx3, super::IgemmFwdParams, super::device::convolve, [$mt, $nt, $ks, true, true, false]);
            )*
        }

        // `wgmma` is sm_90a's alone (Hopper; Blackwell has other instructions).
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
        mod warpgroup_entry {
            $(
                crate::mode_entry_points!($wtf, super::IgemmFwdParams, super::device::convolve, [2, $wnt, $wks, false, false, true]);
                crate::mode_entry_points!($wx3, super::IgemmFwdParams, super::device::convolve, [2, $wnt, $wks, true, false, true]);
                crate::mode_entry_points!($wntf, super::IgemmFwdParams, super::device::convolve, [2, $wnt, $wks, false, true, true]);
                crate::mode_entry_points!($wnx3, super::IgemmFwdParams, super::device::convolve, [2, $wnt, $wks, true, true, true]);
            )*
        }

        #[cfg(target_arch = "nvptx64")]
        mod spatial_entry {
            $(
                crate::mode_entry_points!($stf, super::spatial::IgemmSpatialParams, super::spatial::device::convolve, [$smt, $snt, $cols, false, false]);
                crate::mode_entry_points!($sx3, super::spatial::IgemmSpatialParams, super::spatial::device::convolve, [$smt, $snt, $cols, true, false]);
                crate::mode_entry_points!($nstf, super::spatial::IgemmSpatialParams, super::spatial::device::convolve, [$smt, $snt, $cols, false, true]);
                crate::mode_entry_points!($nsx3, super::spatial::IgemmSpatialParams, super::spatial::device::convolve, [$smt, $snt, $cols, true, true]);
            )*
        }
    };
}

// Each tile once, named in both precisions (TF32, 3xTF32) and both layouts (NCHW, NHWC).
igemm_fwd_variants!(
    flat:
    (igemm_tf32_m128_n8_k8, igemm_3xtf32_m128_n8_k8, igemm_tf32_nhwc_m128_n8_k8, igemm_3xtf32_nhwc_m128_n8_k8, 2, 1, 1),
    (igemm_tf32_m128_n16_k8, igemm_3xtf32_m128_n16_k8, igemm_tf32_nhwc_m128_n16_k8, igemm_3xtf32_nhwc_m128_n16_k8, 2, 2, 1),
    (igemm_tf32_m128_n24_k8, igemm_3xtf32_m128_n24_k8, igemm_tf32_nhwc_m128_n24_k8, igemm_3xtf32_nhwc_m128_n24_k8, 2, 3, 1),
    (igemm_tf32_m128_n32_k16, igemm_3xtf32_m128_n32_k16, igemm_tf32_nhwc_m128_n32_k16, igemm_3xtf32_nhwc_m128_n32_k16, 2, 4, 2),
    (igemm_tf32_m128_n56_k8, igemm_3xtf32_m128_n56_k8, igemm_tf32_nhwc_m128_n56_k8, igemm_3xtf32_nhwc_m128_n56_k8, 2, 7, 1),
    (igemm_tf32_m128_n64_k16, igemm_3xtf32_m128_n64_k16, igemm_tf32_nhwc_m128_n64_k16, igemm_3xtf32_nhwc_m128_n64_k16, 2, 8, 2),
    (igemm_tf32_m64_n32_k16, igemm_3xtf32_m64_n32_k16, igemm_tf32_nhwc_m64_n32_k16, igemm_3xtf32_nhwc_m64_n32_k16, 1, 4, 2),
    (igemm_tf32_m64_n64_k16, igemm_3xtf32_m64_n64_k16, igemm_tf32_nhwc_m64_n64_k16, igemm_3xtf32_nhwc_m64_n64_k16, 1, 8, 2);
    // Warpgroup (`wgmma`): 128 pixels (two m64 instructions) by the columns, BK as the flat tiles.
    warpgroup:
    (igemm_tf32_wg_m128_n24_k8, igemm_3xtf32_wg_m128_n24_k8, igemm_tf32_nhwc_wg_m128_n24_k8, igemm_3xtf32_nhwc_wg_m128_n24_k8, 3, 1),
    (igemm_tf32_wg_m128_n32_k16, igemm_3xtf32_wg_m128_n32_k16, igemm_tf32_nhwc_wg_m128_n32_k16, igemm_3xtf32_nhwc_wg_m128_n32_k16, 4, 2),
    (igemm_tf32_wg_m128_n56_k8, igemm_3xtf32_wg_m128_n56_k8, igemm_tf32_nhwc_wg_m128_n56_k8, igemm_3xtf32_nhwc_wg_m128_n56_k8, 7, 1),
    (igemm_tf32_wg_m128_n64_k16, igemm_3xtf32_wg_m128_n64_k16, igemm_tf32_nhwc_wg_m128_n64_k16, igemm_3xtf32_nhwc_wg_m128_n64_k16, 8, 2);
    // Spatial: rows x columns of pixels (16 x 8 fits 56- and 28-wide maps; 8 x 16 wider rows;
    // 8 x 8 the 14-wide ones), BK = 8.
    spatial:
    (igemm_tf32_s16x8_n8, igemm_3xtf32_s16x8_n8, igemm_tf32_nhwc_s16x8_n8, igemm_3xtf32_nhwc_s16x8_n8, 2, 1, 8),
    (igemm_tf32_s16x8_n16, igemm_3xtf32_s16x8_n16, igemm_tf32_nhwc_s16x8_n16, igemm_3xtf32_nhwc_s16x8_n16, 2, 2, 8),
    (igemm_tf32_s16x8_n24, igemm_3xtf32_s16x8_n24, igemm_tf32_nhwc_s16x8_n24, igemm_3xtf32_nhwc_s16x8_n24, 2, 3, 8),
    (igemm_tf32_s16x8_n32, igemm_3xtf32_s16x8_n32, igemm_tf32_nhwc_s16x8_n32, igemm_3xtf32_nhwc_s16x8_n32, 2, 4, 8),
    (igemm_tf32_s16x8_n56, igemm_3xtf32_s16x8_n56, igemm_tf32_nhwc_s16x8_n56, igemm_3xtf32_nhwc_s16x8_n56, 2, 7, 8),
    (igemm_tf32_s16x8_n64, igemm_3xtf32_s16x8_n64, igemm_tf32_nhwc_s16x8_n64, igemm_3xtf32_nhwc_s16x8_n64, 2, 8, 8),
    (igemm_tf32_s8x16_n16, igemm_3xtf32_s8x16_n16, igemm_tf32_nhwc_s8x16_n16, igemm_3xtf32_nhwc_s8x16_n16, 2, 2, 16),
    (igemm_tf32_s8x16_n32, igemm_3xtf32_s8x16_n32, igemm_tf32_nhwc_s8x16_n32, igemm_3xtf32_nhwc_s8x16_n32, 2, 4, 16),
    (igemm_tf32_s8x16_n64, igemm_3xtf32_s8x16_n64, igemm_tf32_nhwc_s8x16_n64, igemm_3xtf32_nhwc_s8x16_n64, 2, 8, 16),
    (igemm_tf32_s8x8_n16, igemm_3xtf32_s8x8_n16, igemm_tf32_nhwc_s8x8_n16, igemm_3xtf32_nhwc_s8x8_n16, 1, 2, 8),
    (igemm_tf32_s8x8_n32, igemm_3xtf32_s8x8_n32, igemm_tf32_nhwc_s8x8_n32, igemm_3xtf32_nhwc_s8x8_n32, 1, 4, 8),
    (igemm_tf32_s8x8_n64, igemm_3xtf32_s8x8_n64, igemm_tf32_nhwc_s8x8_n64, igemm_3xtf32_nhwc_s8x8_n64, 1, 8, 8),
);

/// The launch bounds of every entry point in compute capability `cc`'s module
/// ([`IgemmTile::in_module`]) of the variants that declare blocks per SM
/// ([`IgemmTile::min_blocks_per_sm`]); each launches [`BLOCK_THREADS`] threads.
pub fn launch_bounds(cc: u32) -> impl Iterator<Item = crate::LaunchBounds> {
    let bounded = |tile: &'static IgemmTile| Some((tile, tile.min_blocks_per_sm()?));
    IGEMM_FWD_VARIANTS.iter().filter(move |t| t.in_module(cc)).filter_map(bounded).flat_map(|(tile, blocks)| {
        tile.entries.all().into_iter().map(move |entry| crate::LaunchBounds {
            entry,
            max_threads: BLOCK_THREADS,
            min_blocks_per_sm: blocks,
        })
    })
}

/// [`PACK_KERNEL`].
///
/// # Safety
/// `p.w` must hold the layer's filters and `p.packed` `p.total` elements (the host sizes both).
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn igemm_pack_weights(p: IgemmPackParams) {
    use crate::prelude::{cvt_tf32, grid_stride, ldg_nc_f32, stg_f32, to_global};
    let (w, packed) = (to_global(p.w), to_global(p.packed));
    let (mut e, step) = grid_stride();
    while e < p.total as u64 {
        let source = p.source(e as u32);
        let v = match source.offset {
            Some(offset) => ldg_nc_f32(w + 4 * offset as u64),
            None => 0.0,
        };
        let value = f32::from_bits(cvt_tf32(v));
        stg_f32(packed + 4 * e, if source.residual { f32::from_bits(cvt_tf32(v - value)) } else { value });
        e += step;
    }
}

#[cfg(target_arch = "nvptx64")]
pub(crate) mod device {
    use super::{BLOCK_THREADS, BlockCoords, Chunk, IgemmFwdParams, IgemmTile, LEAD, PixelTile, STORE_VECTORS};
    use crate::conv::epilogue::PLAIN;
    use crate::prelude::*;
    use crate::tf32::split_tf32;

    /// An input as the tensor cores read it: TF32 (`SPLIT` false; `cvt` keeps every NaN) or
    /// the TF32 value and the residual that `mma` truncates ([`split_tf32`]; `SPLIT` true).
    #[inline(always)]
    pub(super) fn split<const SPLIT: bool>(v: f32) -> (u32, u32) {
        if SPLIT { split_tf32(v) } else { (cvt_tf32(v), 0) }
    }

    /// A stage's input copy for both tilings' `copy_chunk`: 4 bytes (16 where `wide`, through
    /// L1 as the 4-byte ones: other taps read them again) from element `offset` of `x` to `slot`
    /// of the stage at `base`, zeros where not `inside`.
    #[inline(always)]
    pub(super) fn copy_input(base: u32, x: u64) -> impl FnMut(u32, u64, bool, bool) {
        #[inline(always)]
        move |slot, offset, inside, wide| {
            let (to, from) = (base + 4 * slot, x + 4 * offset);
            if wide {
                cp_async_f32x4_l1(to, from, if inside { 16 } else { 0 });
            } else {
                cp_async_f32(to, from, if inside { 4 } else { 0 });
            }
        }
    }

    /// A stage's 16-byte copy of packed weights for both tilings' `copy_chunk`.
    #[inline(always)]
    pub(super) fn copy_weights(base: u32, w: u64) -> impl FnMut(u32, u64) {
        #[inline(always)]
        move |slot, offset| cp_async_f32x4(base + 4 * slot, w + 4 * offset, 16)
    }

    /// The epilogue of a flat tile: the accumulators are in shared memory at [`IgemmTile::out_slot`];
    /// a thread stores 4 adjacent pixels of one output channel at a time, through the
    /// epilogue of mode `MODE` (the entry point's).
    #[inline(always)]
    fn store<const MODE: u32>(
        p: &IgemmFwdParams,
        t: &IgemmTile,
        block: BlockCoords,
        tile: u32,
        thread: u32,
        smem: u32,
        y: u64,
    ) {
        let (ep, vectors) = (&p.epilogue, p.flags & STORE_VECTORS != 0);
        let mut e = thread;
        while e < t.bn() * t.bm() / 4 {
            let (n, quad) = (e / (t.bm() / 4), e % (t.bm() / 4));
            let column = block.column_tile * t.bn() + n;
            let flat = tile * t.bm() + 4 * quad;
            if column < p.block_outputs && flat < p.batch_pixels {
                let k = block.block_group * p.block_outputs + column;
                let stored_k = ep.stored_channel::<MODE>(k);
                let bias = if MODE == PLAIN { 0.0 } else { ep.load_bias(k) };
                let v = ld_shared_f32x4(smem + 4 * t.out_slot(4 * quad, n));
                if vectors && flat + 4 <= p.batch_pixels {
                    let at = t.output_offset(p, flat, stored_k);
                    stg_f32x4(y + 4 * at, ep.finish4_as::<MODE>(v, [bias; 4], at));
                } else {
                    // Whole pixels at a time (a select by index would put `v` in local memory).
                    let mut d = 0;
                    while d < 4 && flat + d < p.batch_pixels {
                        let value = ld_shared_f32(smem + 4 * t.out_slot(4 * quad + d, n));
                        let at = t.output_offset(p, flat + d, stored_k);
                        stg_f32(y + 4 * at, ep.finish_as::<MODE>(value, bias, at, true));
                        d += 1;
                    }
                }
            }
            e += BLOCK_THREADS;
        }
    }

    /// The epilogue of an NHWC flat tile: the accumulators are in shared memory at
    /// [`IgemmTile::out_slot`] (pixel-major); a thread stores 4 adjacent output channels of one
    /// pixel at a time (one 16-byte store where the flags allow and the epilogue keeps the
    /// channels' order), through the epilogue of mode `MODE`.
    #[inline(always)]
    fn store_channels_last<const MODE: u32>(
        p: &IgemmFwdParams,
        t: &IgemmTile,
        block: BlockCoords,
        tile: u32,
        thread: u32,
        smem: u32,
        y: u64,
    ) {
        let ep = &p.epilogue;
        let vectors = p.flags & STORE_VECTORS != 0 && (MODE == PLAIN || ep.keeps_order());
        let quads = t.bn() / 4;
        let mut e = thread;
        while e < t.bm() * quads {
            let (m, n) = (e / quads, 4 * (e % quads));
            let (flat, column) = (tile * t.bm() + m, block.column_tile * t.bn() + n);
            if column < p.block_outputs && flat < p.batch_pixels {
                let k = block.block_group * p.block_outputs + column;
                if vectors {
                    // K and the block's outputs are multiples of 4: the 4 channels exist.
                    let at = t.output_offset(p, flat, ep.stored_channel::<MODE>(k));
                    let bias = if MODE == PLAIN { [0.0; 4] } else { [0, 1, 2, 3].map(|d| ep.load_bias(k + d)) };
                    let v = ld_shared_f32x4(smem + 4 * t.out_slot(m, n));
                    stg_f32x4(y + 4 * at, ep.finish4_as::<MODE>(v, bias, at));
                } else {
                    let mut d = 0;
                    while d < 4 && column + d < p.block_outputs {
                        let at = t.output_offset(p, flat, ep.stored_channel::<MODE>(k + d));
                        let bias = if MODE == PLAIN { 0.0 } else { ep.load_bias(k + d) };
                        let value = ld_shared_f32(smem + 4 * t.out_slot(m, n + d));
                        stg_f32(y + 4 * at, ep.finish_as::<MODE>(value, bias, at, true));
                        d += 1;
                    }
                }
            }
            e += BLOCK_THREADS;
        }
    }

    /// K-step `ks` of a warpgroup tile's chunk in `stage`, of A fragments `(a, a_small)` (the
    /// TF32 values and 3xTF32's residuals): TF32 into `acc`; 3xTF32 its three products into the
    /// sum `part`, which its first `wgmma` overwrites where `fresh`.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn wgmma_k_step<const MT: usize, const NT: usize, const SPLIT: bool>(
        t: &IgemmTile,
        stage: u32,
        ks: u32,
        fresh: bool,
        (a, a_small): &([[u32; 4]; MT], [[u32; 4]; MT]),
        acc: &mut [[[f32; 4]; NT]; MT],
        part: &mut [[[f32; 4]; NT]; MT],
    ) {
        let b = t.b_descriptor(stage, ks, false);
        if SPLIT {
            // The small cross terms first, while the sum is still small.
            let b_small = t.b_descriptor(stage, ks, true);
            for i in 0..MT {
                wgmma_m64k8(&mut part[i], a_small[i], b, !fresh);
            }
            for i in 0..MT {
                wgmma_m64k8(&mut part[i], a[i], b_small, true);
            }
            for i in 0..MT {
                wgmma_m64k8(&mut part[i], a[i], b, true);
            }
        } else {
            for i in 0..MT {
                wgmma_m64k8(&mut acc[i], a[i], b, true);
            }
        }
    }

    /// `acc += part`, in f32 (3xTF32's chunk sums); `part` as a `wgmma` left it, once waited for.
    #[inline(always)]
    fn add_chunk_sum<const MT: usize, const NT: usize>(
        acc: &mut [[[f32; 4]; NT]; MT],
        part: &mut [[[f32; 4]; NT]; MT],
    ) {
        for i in 0..MT {
            wgmma_fence_operands(&mut part[i]);
            for j in 0..NT {
                for e in 0..4 {
                    acc[i][j][e] += part[i][j][e];
                }
            }
        }
    }

    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    pub fn convolve<
        const MT: usize,
        const NT: usize,
        const KS: usize,
        const SPLIT: bool,
        const NHWC: bool,
        const WG: bool,
        const MODE: u32,
    >(
        p: &IgemmFwdParams,
    ) {
        let t = IgemmTile::of_kernel(SPLIT, PixelTile::Flat, MT as u32, NT as u32, KS as u32, NHWC, WG);
        let thread = thread_idx_x();
        let (lane, warp) = (thread % 32, thread / 32);
        let block: BlockCoords = p.block_coords(p.z_base + block_idx_z());
        let tile = block_idx_x();
        let sources = t.copy_sources(p, block, tile, thread);
        let (smem, x, w, y) = (smem_base(), to_global(p.x), to_global(p.w), to_global(p.y));
        let stage_bytes = 4 * t.stage_floats();
        let chunks = p.chunks();

        let copy = #[inline(always)]
        |stage: u32, chunk: Chunk| {
            let base = smem + stage * stage_bytes;
            t.copy_chunk(p, &sources, thread, chunk, copy_input(base, x), copy_weights(base, w));
        };

        // Chunks 0 .. LEAD in flight; one commit per chunk, empty or not, keeps the group count
        // (and so the wait below) uniform.
        let stages = t.stages();
        let mut next = Chunk::FIRST;
        for stage in 0..LEAD {
            if stage < chunks {
                copy(stage, next);
                next = next.next(p);
            }
            cp_async_commit();
        }

        let mut acc = [[[0.0f32; 4]; NT]; MT];
        // 3xTF32's chunk sums. A warpgroup's first `wgmma` of a sum overwrites it, so only
        // `mma.sync` zeroes it per chunk.
        let mut part = [[[0.0f32; 4]; NT]; MT];
        let (mut computed, mut filled) = (0u32, LEAD);
        let mut q = 0;
        // One chunk. A tile with a `wgmma` in flight runs it twice per pass, so that consecutive
        // chunks' A fragments lie in different registers: a chunk's `wgmma` reads them while
        // the next chunk's load.
        let mut chunk = #[inline(always)]
        |q: u32| {
            // Chunk q has landed (for every thread after the barrier), and every warp is done
            // with the stage that chunk q + LEAD refills: that of chunk q - 1, or with a `wgmma`
            // in flight that of chunk q - 2, whose `wgmma` it waited for last chunk.
            cp_async_wait_group::<{ LEAD - 1 }>();
            if WG {
                // `wgmma` reads the weights through the async proxy; the copies wrote them
                // through the generic one.
                fence_proxy_async_shared();
            }
            sync_threads();
            if q + LEAD < chunks {
                copy(filled, next);
                next = next.next(p);
            }
            cp_async_commit();
            filled = if filled + 1 == stages { 0 } else { filled + 1 };

            let stage = smem + computed * stage_bytes;
            // K-step ks's A fragments: the TF32 values, and 3xTF32's residuals.
            let a_fragments = #[inline(always)]
            |ks: u32| {
                let mut a = [[0u32; 4]; MT];
                let mut a_small = [[0u32; 4]; MT];
                for i in 0..MT {
                    let [at0, at1] = t.a_pairs(lane, warp, i as u32, ks);
                    let loaded = [ld_shared_f32x2(stage + 4 * at0), ld_shared_f32x2(stage + 4 * at1)];
                    let values = t.a_fragment(loaded);
                    for e in 0..4 {
                        (a[i][e], a_small[i][e]) = split::<SPLIT>(values[e]);
                    }
                }
                (a, a_small)
            };
            if WG && SPLIT && !t.wgmma_in_flight() {
                // A k-step at a time, each waited for (as the narrower tiles measured fastest).
                for ks in 0..KS as u32 {
                    let a = a_fragments(ks);
                    wgmma_fence();
                    // Chunks that open and close sums differ by a bit test (unrolling cost registers).
                    let fresh = ks == 0 && t.opens_sum(q);
                    wgmma_k_step::<MT, NT, SPLIT>(&t, stage, ks, fresh, &a, &mut acc, &mut part);
                    wgmma_commit_group();
                    wgmma_wait_group::<0>();
                }
                if t.closes_sum(q, chunks) {
                    add_chunk_sum(&mut acc, &mut part);
                }
            } else if WG {
                // Every k-step's A fragments first, while the last chunk's `wgmma` may still run.
                let mut a = [([[0u32; 4]; MT], [[0u32; 4]; MT]); KS];
                for ks in 0..KS {
                    a[ks] = a_fragments(ks as u32);
                }
                if SPLIT {
                    // The last chunk's sum is done once its `wgmma` are: into the total, then
                    // this chunk's `wgmma` may overwrite it.
                    wgmma_wait_group::<0>();
                    if q > 0 {
                        add_chunk_sum(&mut acc, &mut part);
                    }
                }
                wgmma_fence();
                for ks in 0..KS {
                    wgmma_k_step::<MT, NT, SPLIT>(&t, stage, ks as u32, ks == 0, &a[ks], &mut acc, &mut part);
                }
                wgmma_commit_group();
                if !SPLIT {
                    // TF32 chains its accumulators from chunk to chunk: ptxas serialises every
                    // `wgmma` of a chain that an A fragment's load splits, so it waits here.
                    wgmma_wait_group::<0>();
                }
            } else {
                // 3xTF32 sums each chunk apart and adds it to the total in f32: the tensor cores
                // truncate as they accumulate, which over a long reduction costs more than the
                // split gains (a 45x45 filter's outputs erred by 1e-4 of their magnitude).
                part = [[[0.0f32; 4]; NT]; MT];
                for ks in 0..KS as u32 {
                    let (a, a_small) = a_fragments(ks);
                    // The weights come split from the packing.
                    let mut b = [[0u32; 2]; NT];
                    let mut b_small = [[0u32; 2]; NT];
                    for j in 0..NT {
                        let at = stage + 4 * t.b_pair(lane, j as u32, ks);
                        b[j] = ld_shared_f32x2(at).map(f32::to_bits);
                        if SPLIT {
                            b_small[j] = ld_shared_f32x2(at + 4 * t.b_residual()).map(f32::to_bits);
                        }
                    }
                    for i in 0..MT {
                        for j in 0..NT {
                            if SPLIT {
                                // The small cross terms first, as above.
                                part[i][j] = mma_tf32_m16n8k8(a_small[i], b[j], part[i][j]);
                                part[i][j] = mma_tf32_m16n8k8(a[i], b_small[j], part[i][j]);
                                part[i][j] = mma_tf32_m16n8k8(a[i], b[j], part[i][j]);
                            } else {
                                acc[i][j] = mma_tf32_m16n8k8(a[i], b[j], acc[i][j]);
                            }
                        }
                    }
                }
                if SPLIT {
                    add_chunk_sum(&mut acc, &mut part);
                }
            }
            computed = if computed + 1 == stages { 0 } else { computed + 1 };
        };
        // Every tile has a chunk (a layer has a channel and a tap), and no path skips the loop:
        // ptxas serialises every `wgmma` where a path that zeroes the accumulators meets the
        // pipeline's last wait.
        loop {
            chunk(q);
            q += 1;
            if t.wgmma_in_flight() && q < chunks {
                chunk(q);
                q += 1;
            }
            if q >= chunks {
                break;
            }
        }
        if WG {
            wgmma_wait_group::<0>();
            if t.wgmma_in_flight() {
                add_chunk_sum(&mut acc, &mut part);
            } else {
                for tiles in acc.iter_mut() {
                    wgmma_fence_operands(tiles);
                }
            }
        }

        // Epilogue: the accumulators through shared memory (the stages are free once every
        // warp is past its last chunk), so that a warp stores whole rows of one output
        // channel (NHWC: runs of a pixel's channels), in 16-byte pieces where the layout allows.
        cp_async_wait_all();
        sync_threads();
        for i in 0..MT {
            for j in 0..NT {
                if NHWC {
                    // A lane's pairs (0, 1) and (2, 3) are adjacent channels of one pixel.
                    let [v0, v1, v2, v3] = acc[i][j];
                    let (m, n) = t.acc_position(lane, warp, i as u32, j as u32, 0);
                    st_shared_f32x2(smem + 4 * t.out_slot(m, n), [v0, v1]);
                    let (m, n) = t.acc_position(lane, warp, i as u32, j as u32, 2);
                    st_shared_f32x2(smem + 4 * t.out_slot(m, n), [v2, v3]);
                } else {
                    for e in 0..4 {
                        let (m, n) = t.acc_position(lane, warp, i as u32, j as u32, e as u32);
                        st_shared_f32(smem + 4 * t.out_slot(m, n), acc[i][j][e]);
                    }
                }
            }
        }
        sync_threads();
        if NHWC {
            store_channels_last::<MODE>(p, &t, block, tile, thread, smem, y);
        } else {
            store::<MODE>(p, &t, block, tile, thread, smem, y);
        }
    }
}
