//! Depthwise convolution (groups = C, channel multiplier M = K / C of 1 or 2), forward, f32,
//! NCHW (channels last: [`nhwc`]; whole rows per warp: [`rows`]; whole planes per block for
//! small maps: [`planes`]): the kernel ABI, its tile math and the tiles' block program. Launched
//! by `host/conv/depthwise.rs`. Layers outside its variants (other or rectangular filters, other
//! strides, dilation) run the grouped direct kernel (`conv/direct.rs`), the generic path.
//!
//! A block computes a `tile_h x tile_w` tile of outputs in each of [`DepthwiseTile::planes_per_block`]
//! consecutive input planes (`image * C + channel`: adjacent in memory, so small maps still fill
//! a block), for all M output channels of each plane:
//! 1. The input tile and its halo, and the planes' filters, are copied to shared memory with
//!    `cp.async`: every copy of a thread in flight at once without holding a register, the
//!    zero padding written by the copies themselves (a source size of 0), in 16-byte pieces
//!    where the rows allow ([`COPY_VECTORS`]; the index math per copied element was the
//!    kernel's largest cost); the inner loop then has no bounds checks.
//! 2. Each thread computes [`RY`] rows of [`PX`] adjacent outputs of one plane for its M output
//!    channels. Filter row by filter row, it holds that row's M·S taps in registers and reads,
//!    for each of its output rows, the input row's window in 16-byte pieces from shared memory.
//!    A row of PX outputs leaves in one 16-byte store where the output row allows.
//!
//! Grid: x = spatial tile (`tile_row * tiles_w + tile_col`, unpacked with magic division),
//! z = plane group from `z_base` (a launch covers at most [`super::MAX_GRID_Z`]; the host
//! issues as many launches as the planes need).
//!
//! The block program is generic over [`TileBlock`], so the host's tests run this very code on
//! the CPU against the f64 reference, with every shared-memory access tracked.

use crate::MagicDiv;
use bytemuck::{Pod, Zeroable};

pub mod nhwc;
pub mod planes;
pub mod rows;

/// Threads per block of every depthwise kernel.
pub const BLOCK_THREADS: u32 = 128;
/// Adjacent outputs of one row per thread: one 16-byte store.
pub const PX: u32 = 4;
/// Output rows per thread: an input row read from shared memory feeds up to RY of them.
pub const RY: u32 = 2;
/// The largest window of any variant, `(PX - 1) * 2 + 9`: the window's register array is sized
/// by it and its unused part is never touched.
const MAX_WINDOW: usize = 16;

/// Flag: rows of [`PX`] outputs may be stored as one 16-byte vector (`out_w` a multiple of 4
/// and `y` 16-byte aligned).
pub const STORE_VECTORS: u32 = 1;
/// Flag: the input may be copied in 16-byte pieces (`in_w` a multiple of 4 and `x` 16-byte
/// aligned): the shared tile then starts at the multiple of 4 at or left of its first column.
pub const COPY_VECTORS: u32 = 2;

/// Parameters of every depthwise forward kernel, passed by value. Addresses are device
/// pointers; the host validates every extent to fit the kernel's 32-bit index arithmetic
/// (planes, in-plane offsets and output planes below 2^31).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DepthwiseFwdParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    /// `in_h * in_w`.
    pub in_plane: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: i32,
    pub pad_w: i32,
    /// Input planes of all images, `n * c`.
    pub planes: u32,
    /// [`STORE_VECTORS`] and [`COPY_VECTORS`], where they apply.
    pub flags: u32,
    /// Plane group of this launch's `blockIdx.z == 0`.
    pub z_base: u32,
    /// Divides a tile index by the tiles across the output's width.
    pub tiles_w: MagicDiv,
    /// Divides a plane index by the channels `c` (its remainder is the channel).
    pub channels: MagicDiv,
    /// Rows program ([`rows`]) only: divides a lane by the lanes of one row (`in_w / 4`):
    /// (plane slot in the warp, lane in the row).
    pub row_lanes: MagicDiv,
    /// Rows program only: divides a warp index by the segments of a plane's output rows:
    /// (plane group, segment).
    pub segments: MagicDiv,
    /// Rows program only: planes per warp (`32 / row_lanes`) and output rows per segment.
    pub planes_per_warp: u32,
    pub segment_rows: u32,
    pub epilogue: super::epilogue::EpilogueParams,
}

/// How a variant's blocks cover the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepthwiseProgram {
    /// A `tile_h x tile_w` tile of several planes per block, through shared memory.
    Tiles,
    /// Whole rows of a plane per warp, down a segment of the output ([`rows`]): input rows of a
    /// multiple of `4·stride` and at most `128·stride` floats, outputs `1 / stride` as wide
    /// (padding `(S - 1) / 2`), 16-byte aligned tensors (elsewhere the launcher runs the
    /// layer's `Tiles` variant). `tile_h` and `tile_w` are then a lane's 1 x 4 outputs.
    Rows,
    /// Channels last (NHWC tensors, multiplier 1): a thread's `lane_channels` channels of
    /// `tile_w` adjacent outputs down a segment of rows ([`nhwc`]). `tile_h` is 1.
    Channels,
    /// Whole planes per block for small maps ([`planes`]): 16-byte copies of consecutive
    /// planes, `tile_h` rows of `tile_w` outputs per thread, 16-byte stores of consecutive
    /// output planes (16-byte aligned tensors; elsewhere the launcher runs the layer's `Tiles`
    /// variant).
    Planes,
}

/// One variant: filter size, stride and channel multiplier it computes, and its output tile.
/// Each is its own PTX entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthwiseTile {
    pub name: &'static str,
    pub program: DepthwiseProgram,
    /// Its entry point per store mode: `Tiles` variants store every mode from one, `Rows`
    /// variants have one per mode ([`crate::mode_entry_points`]).
    pub entries: super::epilogue::ModeEntries,
    /// R = S.
    pub filter: u32,
    /// Along both dimensions.
    pub stride: u32,
    /// Output channels per input channel.
    pub multiplier: u32,
    pub tile_h: u32,
    pub tile_w: u32,
    /// Adjacent channels per thread (`Channels`: one load of `4·lane_channels` bytes per pixel);
    /// 1 for the NCHW programs.
    pub lane_channels: u32,
}

impl DepthwiseTile {
    /// Threads along one row of the tile.
    pub const fn threads_per_row(&self) -> u32 {
        self.tile_w / PX
    }

    /// Threads that compute one plane's tile.
    pub const fn threads_per_plane(&self) -> u32 {
        self.threads_per_row() * (self.tile_h / RY)
    }

    pub const fn planes_per_block(&self) -> u32 {
        BLOCK_THREADS / self.threads_per_plane()
    }

    /// Input rows under the tile, halo included.
    pub const fn in_tile_h(&self) -> u32 {
        (self.tile_h - 1) * self.stride + self.filter
    }

    /// Input columns under the tile, halo included.
    pub const fn in_tile_w(&self) -> u32 {
        (self.tile_w - 1) * self.stride + self.filter
    }

    /// Input columns under one thread's PX outputs.
    pub const fn window(&self) -> u32 {
        (PX - 1) * self.stride + self.filter
    }

    /// 16-byte pieces per row that cover the tile's columns behind a shift of up to 3 (16-byte
    /// copies start at a multiple of 4).
    pub const fn row_chunks(&self) -> u32 {
        (self.in_tile_w() + 3).div_ceil(4)
    }

    /// Floats per shared-memory row: the row's pieces, padded to `2 * threads_per_row` modulo
    /// 16 so that the 8 threads of a quarter-warp, which read 16 bytes each, start their
    /// windows in 8 different groups of 4 banks (at stride 1; 8x8 tiles with unpadded rows of
    /// 16 floats had 4 output rows of a quarter-warp in the same banks).
    pub const fn smem_row(&self) -> u32 {
        let mut row = 4 * self.row_chunks();
        while self.threads_per_row() < 8 && row % 16 != 2 * self.threads_per_row() {
            row += 4;
        }
        row
    }

    pub const fn smem_plane(&self) -> u32 {
        self.in_tile_h() * self.smem_row()
    }

    /// Filter taps of one plane: its M filters.
    pub const fn plane_taps(&self) -> u32 {
        self.multiplier * self.filter * self.filter
    }

    /// First shared-memory slot of the filters, after the input tiles.
    pub const fn filter_slot(&self) -> u32 {
        self.planes_per_block() * self.smem_plane()
    }

    pub const fn smem_bytes(&self) -> u32 {
        4 * (self.filter_slot() + self.planes_per_block() * self.plane_taps())
    }

    /// Elements the copy phase moves into shared memory.
    pub const fn tile_elements(&self) -> u32 {
        self.planes_per_block() * self.in_tile_h() * self.in_tile_w()
    }

    /// Tiles down and across an `out_h x out_w` output.
    pub const fn tiles(&self, out_h: u64, out_w: u64) -> [u64; 2] {
        [out_h.div_ceil(self.tile_h as u64), out_w.div_ceil(self.tile_w as u64)]
    }

    /// Blocks along the grid's z for `planes` input planes.
    pub const fn plane_groups(&self, planes: u64) -> u64 {
        planes.div_ceil(self.planes_per_block() as u64)
    }

    /// Whether the variant's shape is one the program handles: whole thread rows, whole
    /// planes per block, a window that fits the register array.
    pub const fn is_well_formed(&self) -> bool {
        matches!(self.program, DepthwiseProgram::Rows | DepthwiseProgram::Channels | DepthwiseProgram::Planes)
            || self.tile_w.is_multiple_of(PX)
                && self.tile_h.is_multiple_of(RY)
                && BLOCK_THREADS.is_multiple_of(self.threads_per_plane())
                && self.window() <= MAX_WINDOW as u32
    }
}

/// Where both programs' outputs go: the stores and what the epilogue reads.
pub trait DepthwiseOut {
    /// Outputs `offset .. offset + 4` where `store`; `offset` a multiple of 4.
    fn write_y4(&mut self, store: bool, offset: u64, v: [f32; 4]);
    /// The epilogue's bias of output channel `k`, 0 without one.
    fn bias(&mut self, k: u32) -> f32;
    /// Elements `offset .. offset + 4` of the epilogue's residual where `load` (there is one),
    /// else zeros; `offset` a multiple of 4.
    fn residual4(&mut self, load: bool, offset: u64) -> [f32; 4];
}

/// What the block program touches, and how a block's threads run it.
pub trait TileBlock: DepthwiseOut {
    /// Runs `f(self, thread)` for every thread of the block.
    fn each_thread(&mut self, f: impl FnMut(&mut Self, u32));
    /// Every thread's earlier shared-memory accesses happen before any later one.
    fn barrier(&mut self);
    /// Starts copying element `offset` of the input to `slot`, or a zero where `inside` is
    /// false (`offset` is then 0). Complete after [`Self::wait_copies`] and a barrier.
    fn copy_x(&mut self, slot: u32, offset: u64, inside: bool);
    /// Starts copying elements `offset .. offset + 4` of the input to `slot .. slot + 4`, or
    /// zeros where `inside` is false (`offset` is then 0); both multiples of 4.
    fn copy_x4(&mut self, slot: u32, offset: u64, inside: bool);
    /// Starts copying element `offset` of the filters to `slot`.
    fn copy_w(&mut self, slot: u32, offset: u64);
    /// Waits for this thread's copies.
    fn wait_copies(&mut self);
    /// Output `offset`, where `store` (predicated, not branched around: branches around each
    /// store of a 14-wide row split warps' stores and doubled the sectors written to L2).
    fn write_y(&mut self, store: bool, offset: u64, v: f32);
    /// Element `offset` of the epilogue's residual where `load`, else 0.
    fn residual(&mut self, load: bool, offset: u64) -> f32;
    fn load(&mut self, slot: u32) -> f32;
    /// Slots `slot .. slot + 2`; `slot` even.
    fn load2(&mut self, slot: u32) -> [f32; 2];
    /// Slots `slot .. slot + 4`; `slot` a multiple of 4.
    fn load4(&mut self, slot: u32) -> [f32; 4];
}

/// The block program: the tile `tile_index` (row-major over the output's tiles) of plane group
/// `plane_group`, for the variant given by the const parameters (filter `K`, stride `ST`,
/// multiplier `M`, tile `TH x TW`).
// Register arrays are indexed in lockstep by compile-time-constant loop counters (fully
// unrolled); iterator chains over several of them would hide that.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn convolve<const K: usize, const ST: usize, const M: usize, const TH: usize, const TW: usize, B: TileBlock>(
    b: &mut B,
    p: &DepthwiseFwdParams,
    tile_index: u32,
    plane_group: u32,
) {
    let t = DepthwiseTile {
        name: "",
        program: DepthwiseProgram::Tiles,
        entries: super::epilogue::ModeEntries { plain: "", clamp: "", smooth: "" },
        filter: K as u32,
        stride: ST as u32,
        multiplier: M as u32,
        tile_h: TH as u32,
        tile_w: TW as u32,
        lane_channels: 1,
    };
    let (tile_row, tile_col) = p.tiles_w.div_rem(tile_index);
    let first_plane = plane_group * t.planes_per_block();
    let iy0 = (tile_row * t.tile_h * t.stride) as i32 - p.pad_h;
    let first_col = (tile_col * t.tile_w * t.stride) as i32 - p.pad_w;
    // The shared tile's first column: `first_col`, or the multiple of 4 at or left of it for
    // 16-byte copies; the threads' windows start `shift` columns in.
    let vector_copies = p.flags & COPY_VECTORS != 0;
    let shift = if vector_copies { (first_col & 3) as u32 } else { 0 };
    let ix0 = first_col - shift as i32;

    // 1. The input tiles (halo and zero padding included; plane by plane, row-major) and the
    //    planes' filters into shared memory.
    let (in_h, in_w, total) = (t.in_tile_h(), t.in_tile_w(), t.tile_elements());
    let taps = t.plane_taps();
    let chunks = t.row_chunks();
    let total_chunks = t.planes_per_block() * in_h * chunks;
    b.each_thread(
        #[inline(always)]
        |b, thread| {
            // 16-byte pieces: each lies wholly inside a row of the image or wholly outside it.
            for j in 0..total_chunks.div_ceil(BLOCK_THREADS) {
                let e = thread + BLOCK_THREADS * j;
                if vector_copies && e < total_chunks {
                    let (tile_row_index, chunk) = (e / chunks, e % chunks);
                    let (plane, row) = (tile_row_index / in_h, tile_row_index % in_h);
                    let q = first_plane + plane;
                    let (y, x) = (iy0 + row as i32, ix0 + 4 * chunk as i32);
                    let inside = (q < p.planes) & ((y as u32) < p.in_h) & ((x as u32) < p.in_w);
                    let offset =
                        if inside { q as u64 * p.in_plane as u64 + (y as u32 * p.in_w + x as u32) as u64 } else { 0 };
                    b.copy_x4(tile_row_index * t.smem_row() + 4 * chunk, offset, inside);
                }
            }
            for j in 0..total.div_ceil(BLOCK_THREADS) {
                let e = thread + BLOCK_THREADS * j;
                if !vector_copies && e < total {
                    let (plane, rest) = (e / (in_h * in_w), e % (in_h * in_w));
                    let (row, col) = (rest / in_w, rest % in_w);
                    let q = first_plane + plane;
                    let (y, x) = (iy0 + row as i32, ix0 + col as i32);
                    let inside = (q < p.planes) & ((y as u32) < p.in_h) & ((x as u32) < p.in_w);
                    let offset =
                        if inside { q as u64 * p.in_plane as u64 + (y as u32 * p.in_w + x as u32) as u64 } else { 0 };
                    b.copy_x(plane * t.smem_plane() + row * t.smem_row() + col, offset, inside);
                }
            }
            for j in 0..(t.planes_per_block() * taps).div_ceil(BLOCK_THREADS) {
                let e = thread + BLOCK_THREADS * j;
                let (plane, tap) = (e / taps, e % taps);
                let q = first_plane + plane;
                if plane < t.planes_per_block() && q < p.planes {
                    // Output channel c·M + m's filter follows c·M's: a plane's M filters are adjacent.
                    let channel = p.channels.div_rem(q).1;
                    b.copy_w(t.filter_slot() + e, channel as u64 * taps as u64 + tap as u64);
                }
            }
            b.wait_copies();
        },
    );
    b.barrier();

    // 2. Each thread: RY rows of PX outputs of one plane, for its M output channels.
    b.each_thread(
        #[inline(always)]
        |b, thread| {
            let plane = thread / t.threads_per_plane();
            let in_plane = thread % t.threads_per_plane();
            let (ry, cx) = (in_plane / t.threads_per_row(), in_plane % t.threads_per_row());
            let q = first_plane + plane;
            if q >= p.planes {
                return;
            }
            // The biases before the taps, so that their latency hides behind them (loaded at
            // the store, 3x3 layers took up to 35% longer fused).
            let channel = p.channels.div_rem(q).1;
            let bias: [f32; M] = core::array::from_fn(|m| b.bias(channel * M as u32 + m as u32));
            let mut acc = [[[0.0f32; PX as usize]; RY as usize]; M];
            let corner = plane * t.smem_plane() + ry * RY * t.stride * t.smem_row() + cx * PX * t.stride;
            let filters = t.filter_slot() + plane * taps;
            // Filter row by filter row, so that only one row of taps per output channel is live:
            // unrolled, the rows' loads all move to the top and a 7x7 filter held 167 registers.
            let mut fr = 0;
            while fr < crate::opaque(K as u32) {
                let mut w = [[0.0f32; K]; M];
                for m in 0..M {
                    for s in 0..K {
                        w[m][s] = b.load(filters + (m as u32 * K as u32 + fr) * K as u32 + s as u32);
                    }
                }
                for r in 0..RY as usize {
                    let win = window::<K, ST, B>(b, corner + ((r * ST) as u32 + fr) * t.smem_row(), shift);
                    for m in 0..M {
                        for i in 0..PX as usize {
                            for s in 0..K {
                                acc[m][r][i] = crate::fma(win[i * ST + s], w[m][s], acc[m][r][i]);
                            }
                        }
                    }
                }
                fr += 1;
            }

            let (oy0, ox0) = (tile_row * t.tile_h + ry * RY, tile_col * t.tile_w + cx * PX);
            crate::by_mode!(p.epilogue, MODE => store::<M, MODE, B>(b, p, q, [oy0, ox0], bias, &acc));
        },
    );
}

/// Stores a thread's `M x RY` rows of [`PX`] outputs of plane `q`, from output row and column
/// `at`, through the epilogue of mode `MODE` ([`crate::by_mode`]) with output channel
/// `c·M + m`'s bias `bias[m]`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn store<const M: usize, const MODE: u32, B: TileBlock>(
    b: &mut B,
    p: &DepthwiseFwdParams,
    q: u32,
    [oy0, ox0]: [u32; 2],
    bias: [f32; M],
    acc: &[[[f32; PX as usize]; RY as usize]; M],
) {
    use super::epilogue::{PLAIN, SMOOTH};
    let ep = &p.epilogue;
    // Output channel c·M + m of the plane's image, stored where the epilogue puts it.
    let channel = p.channels.div_rem(q).1;
    let vectors = p.flags & STORE_VECTORS != 0 && ox0 + PX <= p.out_w;
    // Stores and residual loads predicated on the output existing, never branched around.
    let store_row = |b: &mut B, m: u32, r: u32, bias: f32, mut v: [f32; PX as usize]| {
        let oy = oy0 + r;
        let row_live = oy < p.out_h;
        let k = channel * M as u32 + m;
        let out_plane = (q - channel) as u64 * M as u64 + ep.stored_channel::<MODE>(k) as u64;
        let row = (out_plane * p.out_h as u64 + oy as u64) * p.out_w as u64 + ox0 as u64;
        if vectors {
            if MODE != PLAIN {
                let res = b.residual4(row_live && ep.residual != 0, row);
                v = [0, 1, 2, 3].map(|i| ep.apply_in::<MODE>(v[i], bias, res[i]));
            }
            b.write_y4(row_live, row, v);
        } else {
            for i in 0..PX as usize {
                let live = row_live && ox0 + (i as u32) < p.out_w;
                let at = row + i as u64;
                if MODE != PLAIN {
                    let res = b.residual(live && ep.residual != 0, at);
                    v[i] = ep.apply_in::<MODE>(v[i], bias, res);
                }
                b.write_y(live, at, v[i]);
            }
        }
    };
    if MODE != SMOOTH {
        for m in 0..M {
            for r in 0..RY as usize {
                store_row(b, m as u32, r as u32, bias[m], acc[m][r]);
            }
        }
    } else {
        // The long activations' code in every row kept LLVM from unrolling this loop, and a
        // rolled loop indexed the accumulators at run time (local memory): each step stores
        // row 0 and rotates the next into its place.
        let mut rows = [[0.0f32; PX as usize]; 2 * RY as usize];
        for m in 0..M {
            for r in 0..RY as usize {
                rows[m * RY as usize + r] = acc[m][r];
            }
        }
        let mut j = 0;
        while j < crate::opaque(M as u32 * RY) {
            // M is 1 or 2: a select, not a run-time index.
            let m = j / RY;
            let bias = if m == 0 { bias[0] } else { bias[M - 1] };
            store_row(b, m, j % RY, bias, rows[0]);
            for i in 1..rows.len() {
                rows[i - 1] = rows[i];
            }
            j += 1;
        }
    }
}

/// The `(PX - 1) * ST + K` input values under one thread's outputs, from `slot + shift` on
/// (`slot` a multiple of 4), read in 16-byte pieces: unshifted, exactly the window's (an
/// 8-byte and a 4-byte load for the rest); shifted, the pieces that cover it, moved into
/// place by two selects per value (reading one value at a time put four threads of a
/// quarter-warp in each bank).
#[inline(always)]
fn window<const K: usize, const ST: usize, B: TileBlock>(b: &mut B, slot: u32, shift: u32) -> [f32; MAX_WINDOW] {
    let len = (PX as usize - 1) * ST + K;
    let mut out = [0.0f32; MAX_WINDOW];
    if shift != 0 {
        let mut v = [0.0f32; MAX_WINDOW + 4];
        for q in 0..(len + 3).div_ceil(4) {
            let [a, b4, c, d] = b.load4(slot + 4 * q as u32);
            (v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]) = (a, b4, c, d);
        }
        let (odd, two) = (shift & 1 != 0, shift & 2 != 0);
        let mut t = [0.0f32; MAX_WINDOW + 2];
        for i in 0..len + 2 {
            t[i] = crate::select(odd, v[i + 1], v[i]);
        }
        for i in 0..len {
            out[i] = crate::select(two, t[i + 2], t[i]);
        }
    } else {
        for q in 0..len / 4 {
            let [a, b4, c, d] = b.load4(slot + 4 * q as u32);
            (out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]) = (a, b4, c, d);
        }
        let mut i = len / 4 * 4;
        if len - i >= 2 {
            let [a, b2] = b.load2(slot + i as u32);
            (out[i], out[i + 1]) = (a, b2);
            i += 2;
        }
        if i < len {
            out[i] = b.load(slot + i as u32);
        }
    }
    out
}

macro_rules! depthwise_fwd_variants {
    (
        tiles: [$(($name:ident, $k:literal, $st:literal, $m:literal, $th:literal, $tw:literal)),* $(,)?],
        rows: [$(($r_name:ident, $r_m:literal, [$r_k:literal, $r_h:literal, $r_st:literal, $r_n:literal, $r_r:literal, $r_s:literal, $r_d:literal, $r_pin:literal])),* $(,)?],
        channels: [$(($c_name:ident, [$c_k:literal, $c_st:literal, $c_s:literal, $c_u:literal, $c_v:literal, $c_tw:literal, $c_w:literal, $c_pin:literal, $c_in:literal])),* $(,)?],
        planes: [$(($p_name:ident, [$p_k:literal, $p_st:literal, $p_m:literal, $p_ry:literal, $p_win:literal, $p_ir:literal])),* $(,)?] $(,)?
    ) => {
        /// Every variant in the PTX, by entry-point name.
        pub const DEPTHWISE_FWD_VARIANTS: &[DepthwiseTile] = &[
            $(DepthwiseTile {
                name: stringify!($name), program: DepthwiseProgram::Tiles,
                entries: super::epilogue::ModeEntries {
                    plain: stringify!($name), clamp: stringify!($name), smooth: stringify!($name),
                },
                filter: $k, stride: $st, multiplier: $m, tile_h: $th, tile_w: $tw, lane_channels: 1,
            },)*
            $(DepthwiseTile {
                name: stringify!($r_name), program: DepthwiseProgram::Rows, entries: crate::mode_entries!($r_name),
                filter: $r_k, stride: $r_st, multiplier: $r_m, tile_h: 1, tile_w: rows::ROW_PX, lane_channels: 1,
            },)*
            $(DepthwiseTile {
                name: stringify!($c_name), program: DepthwiseProgram::Channels, entries: crate::mode_entries!($c_name),
                filter: $c_k, stride: $c_st, multiplier: 1, tile_h: 1, tile_w: $c_tw, lane_channels: $c_v,
            },)*
            $(DepthwiseTile {
                name: stringify!($p_name), program: DepthwiseProgram::Planes, entries: crate::mode_entries!($p_name),
                filter: $p_k, stride: $p_st, multiplier: $p_m, tile_h: $p_ry, tile_w: planes::PLANE_PX as u32,
                lane_channels: 1,
            },)*
        ];

        /// The block program of the `Tiles` variant named `name`, for a [`TileBlock`] of the
        /// caller's (the host's tests run it on the CPU).
        pub fn program<B: TileBlock>(name: &str) -> Option<fn(&mut B, &DepthwiseFwdParams, u32, u32)> {
            match name {
                $(stringify!($name) => Some(convolve::<$k, $st, $m, $th, $tw, B>),)*
                _ => None,
            }
        }

        /// The lane program of the `Rows` variant named `name` in store mode `mode`, for a
        /// [`rows::RowLane`] of the caller's (the host's tests run it on the CPU).
        pub fn rows_program<L: rows::RowLane>(name: &str) -> Option<fn(&mut L, &DepthwiseFwdParams, rows::RowCoords)> {
            match name {
                $(stringify!($r_name) => Some(|l, p, at| {
                    crate::by_mode!(p.epilogue, MODE => rows::rows::<$r_k, $r_h, $r_st, $r_n, $r_r, $r_s, $r_m, $r_d, $r_pin, MODE, L>(l, p, at))
                }),)*
                _ => None,
            }
        }

        pub fn channels_program<L: nhwc::NhwcLane>(name: &str) -> Option<fn(&mut L, &nhwc::DepthwiseNhwcParams, nhwc::NhwcCoords)> {
            match name {
                $(stringify!($c_name) => Some(|l, p, at| {
                    crate::by_mode!(p.epilogue, MODE => nhwc::channels_last::<$c_k, $c_st, $c_s, $c_u, $c_v, $c_tw, $c_w, $c_pin, $c_in, MODE, L>(l, p, at))
                }),)*
                _ => None,
            }
        }

        /// The block program of the `Planes` variant named `name` in store mode `mode`, for a
        /// [`planes::PlaneBlock`] of the caller's (the host's tests run it on the CPU).
        pub fn planes_program<B: planes::PlaneBlock>(name: &str) -> Option<fn(&mut B, &planes::DepthwisePlanesParams, u32)> {
            match name {
                $(stringify!($p_name) => Some(|b, p, block| {
                    crate::by_mode!(p.epilogue, MODE => planes::planes::<$p_k, $p_st, $p_m, $p_ry, $p_win, $p_ir, MODE, B>(b, p, block))
                }),)*
                _ => None,
            }
        }

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use crate::prelude::{block_idx_x, block_idx_z};
            $(
                #[unsafe(no_mangle)]
                pub unsafe extern "ptx-kernel" fn $name(p: super::DepthwiseFwdParams) {
                    let mut b = super::GpuDepthwise::new(&p);
                    super::convolve::<$k, $st, $m, $th, $tw, _>(&mut b, &p, block_idx_x(), p.z_base + block_idx_z());
                }
            )*
            $(crate::mode_entry_points!($r_name, super::DepthwiseFwdParams, super::device::rows_kernel, [$r_k, $r_h, $r_st, $r_n, $r_r, $r_s, $r_m, $r_d, $r_pin]);)*
            $(crate::mode_entry_points!($c_name, super::nhwc::DepthwiseNhwcParams, super::nhwc::device::kernel, [$c_k, $c_st, $c_s, $c_u, $c_v, $c_tw, $c_w, $c_pin, $c_in]);)*
            $(crate::mode_entry_points!($p_name, super::planes::DepthwisePlanesParams, super::planes::device::kernel, [$p_k, $p_st, $p_m, $p_ry, $p_win, $p_ir]);)*
        }
    };
}

depthwise_fwd_variants!(
    tiles: [
    (depthwise_k3_s1_m1_32x32, 3, 1, 1, 32, 32),
    (depthwise_k3_s1_m1_16x16, 3, 1, 1, 16, 16),
    (depthwise_k3_s1_m1_8x8, 3, 1, 1, 8, 8),
    (depthwise_k3_s1_m2_32x32, 3, 1, 2, 32, 32),
    (depthwise_k3_s1_m2_16x16, 3, 1, 2, 16, 16),
    (depthwise_k3_s1_m2_8x8, 3, 1, 2, 8, 8),
    (depthwise_k3_s2_m1_32x32, 3, 2, 1, 32, 32),
    (depthwise_k3_s2_m1_16x16, 3, 2, 1, 16, 16),
    (depthwise_k3_s2_m1_8x8, 3, 2, 1, 8, 8),
    (depthwise_k3_s2_m2_32x32, 3, 2, 2, 32, 32),
    (depthwise_k3_s2_m2_16x16, 3, 2, 2, 16, 16),
    (depthwise_k3_s2_m2_8x8, 3, 2, 2, 8, 8),
    (depthwise_k5_s1_m1_32x32, 5, 1, 1, 32, 32),
    (depthwise_k5_s1_m1_16x16, 5, 1, 1, 16, 16),
    (depthwise_k5_s1_m1_8x8, 5, 1, 1, 8, 8),
    (depthwise_k5_s1_m2_32x32, 5, 1, 2, 32, 32),
    (depthwise_k5_s1_m2_16x16, 5, 1, 2, 16, 16),
    (depthwise_k5_s1_m2_8x8, 5, 1, 2, 8, 8),
    (depthwise_k5_s2_m1_32x32, 5, 2, 1, 32, 32),
    (depthwise_k5_s2_m1_16x16, 5, 2, 1, 16, 16),
    (depthwise_k5_s2_m1_8x8, 5, 2, 1, 8, 8),
    (depthwise_k5_s2_m2_32x32, 5, 2, 2, 32, 32),
    (depthwise_k5_s2_m2_16x16, 5, 2, 2, 16, 16),
    (depthwise_k5_s2_m2_8x8, 5, 2, 2, 8, 8),
    (depthwise_k7_s1_m1_32x32, 7, 1, 1, 32, 32),
    (depthwise_k7_s1_m1_16x16, 7, 1, 1, 16, 16),
    (depthwise_k7_s1_m1_8x8, 7, 1, 1, 8, 8),
    (depthwise_k7_s1_m2_32x32, 7, 1, 2, 32, 32),
    (depthwise_k7_s1_m2_16x16, 7, 1, 2, 16, 16),
    (depthwise_k7_s1_m2_8x8, 7, 1, 2, 8, 8),
    (depthwise_k7_s2_m1_32x32, 7, 2, 1, 32, 32),
    (depthwise_k7_s2_m1_16x16, 7, 2, 1, 16, 16),
    (depthwise_k7_s2_m1_8x8, 7, 2, 1, 8, 8),
    (depthwise_k7_s2_m2_32x32, 7, 2, 2, 32, 32),
    (depthwise_k7_s2_m2_16x16, 7, 2, 2, 16, 16),
    (depthwise_k7_s2_m2_8x8, 7, 2, 2, 8, 8),
    (depthwise_k9_s1_m1_32x32, 9, 1, 1, 32, 32),
    (depthwise_k9_s1_m1_16x16, 9, 1, 1, 16, 16),
    (depthwise_k9_s1_m1_8x8, 9, 1, 1, 8, 8),
    (depthwise_k9_s1_m2_32x32, 9, 1, 2, 32, 32),
    (depthwise_k9_s1_m2_16x16, 9, 1, 2, 16, 16),
    (depthwise_k9_s1_m2_8x8, 9, 1, 2, 8, 8),
    (depthwise_k9_s2_m1_32x32, 9, 2, 1, 32, 32),
    (depthwise_k9_s2_m1_16x16, 9, 2, 1, 16, 16),
    (depthwise_k9_s2_m1_8x8, 9, 2, 1, 8, 8),
    (depthwise_k9_s2_m2_32x32, 9, 2, 2, 32, 32),
    (depthwise_k9_s2_m2_16x16, 9, 2, 2, 16, 16),
    (depthwise_k9_s2_m2_8x8, 9, 2, 2, 8, 8),
    ],
    // Multiplier; filter K, its half H, stride ST, input columns per lane N = 4·ST, columns
    // from the right neighbour R = H + 1 - ST, output rows in flight S = ceil(K / ST), rows of
    // loads in flight D (a multiple of ST·S), PIN (H200: level at 3x3 and 5x5; unpinned, the
    // stride-1 7x7 one ran 5-7% faster on ConvNeXt's 56- and 28-wide layers).
    rows: [
        (depthwise_rows_k3_m1, 1, [3, 1, 1, 4, 1, 3, 6, true]),
        (depthwise_rows_k3_m2, 2, [3, 1, 1, 4, 1, 3, 6, true]),
        (depthwise_rows_k5_m1, 1, [5, 2, 1, 4, 2, 5, 5, true]),
        (depthwise_rows_k5_m2, 2, [5, 2, 1, 4, 2, 5, 5, true]),
        (depthwise_rows_k7_m1, 1, [7, 3, 1, 4, 3, 7, 7, false]),
        (depthwise_rows_k3_s2_m1, 1, [3, 1, 2, 8, 0, 2, 4, true]),
        (depthwise_rows_k3_s2_m2, 2, [3, 1, 2, 8, 0, 2, 4, true]),
        (depthwise_rows_k5_s2_m1, 1, [5, 2, 2, 8, 1, 3, 6, true]),
        (depthwise_rows_k7_s2_m1, 1, [7, 3, 2, 8, 2, 4, 8, true]),
    ],
    // [K, ST, S = ceil(K / ST), U = ST·S, V channels, TW columns, W = (TW - 1)·ST + K, PIN,
    // INTERIOR], each filter and stride in the heuristic's order (H200, the depthwise suite's
    // NHWC layers: 2 channels per thread beat 4 and 1 at 3x3 stride 1; at stride 2, 1 beat 2 and,
    // on all but the 112- and 56-wide maps, 4, which spilled unpinned and ran 6-18% slower
    // pinned; 1 beat 2 at 5x5; pinned sums won at 7x7 on 56- and 28-wide maps, lost at 3x3 and
    // 5x5). INTERIOR compiles a second walk for warps whose tiles lie inside the image; it
    // doubles the code, and from 3x3 stride 2 up instruction fetch cost more than it saved (7x7
    // layers 11-17% and 5x5 5-10% faster without it, 3x3 stride 2 2-3%; 3x3 stride 1 up to 2%
    // slower, 4-7% at N = 1). The 1-channel variants take any C and alignment.
    channels: [
        (depthwise_nhwc_k3_s1_c2, [3, 1, 3, 3, 2, 4, 6, false, true]),
        (depthwise_nhwc_k3_s1_c1, [3, 1, 3, 3, 1, 4, 6, false, true]),
        (depthwise_nhwc_k3_s2_c1, [3, 2, 2, 4, 1, 4, 9, false, false]),
        (depthwise_nhwc_k5_s1_c1, [5, 1, 5, 5, 1, 4, 8, false, false]),
        (depthwise_nhwc_k5_s2_c1, [5, 2, 3, 6, 1, 4, 11, false, false]),
        (depthwise_nhwc_k7_s1_c1, [7, 1, 7, 7, 1, 4, 10, true, false]),
        (depthwise_nhwc_k7_s2_c1, [7, 2, 4, 8, 1, 4, 13, true, false]),
    ],
    // [K, ST, M, RY output rows per thread, WIN = 3·ST + K input columns, IR = (RY - 1)·ST + K
    // input rows]: 7 rows fit the 14- and 7-high outputs of ImageNet's last two stages exactly;
    // at stride 2, 4 (7 rows had 2 threads per 14 x 14 plane, and the planes' shared memory held
    // 3 blocks of 128 threads per SM: 19% occupancy, 0.98x cuDNN on MobileNetV2's 14-wide layer).
    planes: [
        (depthwise_planes_k3_s1_m1, [3, 1, 1, 7, 6, 9]),
        (depthwise_planes_k3_s2_m1, [3, 2, 1, 4, 9, 9]),
        (depthwise_planes_k5_s1_m1, [5, 1, 1, 7, 8, 11]),
        (depthwise_planes_k5_s2_m1, [5, 2, 1, 4, 11, 11]),
        (depthwise_planes_k7_s1_m1, [7, 1, 1, 7, 10, 13]),
        (depthwise_planes_k3_s1_m2, [3, 1, 2, 7, 6, 9]),
        (depthwise_planes_k5_s1_m2, [5, 1, 2, 7, 8, 11]),
    ],
);

const _: () = {
    let mut i = 0;
    while i < DEPTHWISE_FWD_VARIANTS.len() {
        assert!(DEPTHWISE_FWD_VARIANTS[i].is_well_formed());
        i += 1;
    }
};

/// The GPU's [`TileBlock`] and [`rows::RowLane`]: shared memory from the dynamic segment,
/// filled by `cp.async`; rows through the non-coherent path, halos by shuffles.
#[cfg(target_arch = "nvptx64")]
pub struct GpuDepthwise {
    smem: u32,
    x: u64,
    w: u64,
    y: u64,
    epilogue: super::epilogue::EpilogueParams,
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::{DepthwiseFwdParams, DepthwiseOut, GpuDepthwise, TileBlock, rows::RowLane};
    use crate::prelude::*;

    /// A `Rows` variant's kernel in store mode `MODE`.
    #[inline(always)]
    pub fn rows_kernel<
        const K: usize,
        const H: usize,
        const ST: usize,
        const N: usize,
        const R: usize,
        const S: usize,
        const M: usize,
        const D: usize,
        const PIN: bool,
        const MODE: u32,
    >(
        p: &DepthwiseFwdParams,
    ) {
        let thread = block_idx_x() * 32 * super::rows::ROWS_WARPS + thread_idx_x();
        let warp = thread / 32;
        // Whole warps past the planes leave; the rest meet at every shuffle.
        if p.segments.div_rem(warp).0 * p.planes_per_warp >= p.planes {
            return;
        }
        let at = p.row_coords(warp, thread % 32);
        super::rows::rows::<K, H, ST, N, R, S, M, D, PIN, MODE, _>(&mut GpuDepthwise::new(p), p, at);
    }

    impl RowLane for GpuDepthwise {
        #[inline(always)]
        fn load_row<const N: usize>(&mut self, load: bool, offset: u64) -> [f32; N] {
            let mut v = [0.0f32; N];
            for q in 0..N / 4 {
                let [a, b, c, d] = ldg_nc_f32x4_if(load, self.x + 4 * (offset + 4 * q as u64));
                (v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]) = (a, b, c, d);
            }
            v
        }

        #[inline(always)]
        fn halo<const N: usize, const L: usize, const R: usize>(
            &mut self,
            own: [f32; N],
            _: u64,
            _: bool,
            first: bool,
            last: bool,
        ) -> ([f32; L], [f32; R]) {
            let (mut left, mut right) = ([0.0f32; L], [0.0f32; R]);
            for i in 0..L {
                let v = shfl_up_f32(own[N - L + i], 1);
                left[i] = if first { 0.0 } else { v };
            }
            for i in 0..R {
                let v = shfl_down_f32(own[i], 1);
                right[i] = if last { 0.0 } else { v };
            }
            (left, right)
        }

        #[inline(always)]
        fn tap(&mut self, offset: u64) -> f32 {
            ldg_nc_f32(self.w + 4 * offset)
        }
    }

    impl GpuDepthwise {
        #[inline(always)]
        pub fn new(p: &DepthwiseFwdParams) -> Self {
            GpuDepthwise {
                smem: smem_base(),
                x: to_global(p.x),
                w: to_global(p.w),
                y: to_global(p.y),
                epilogue: p.epilogue,
            }
        }
    }

    impl DepthwiseOut for GpuDepthwise {
        #[inline(always)]
        fn write_y4(&mut self, store: bool, offset: u64, v: [f32; 4]) {
            stg_f32x4_if(store, self.y + 4 * offset, v);
        }

        #[inline(always)]
        fn bias(&mut self, k: u32) -> f32 {
            self.epilogue.load_bias(k)
        }

        #[inline(always)]
        fn residual4(&mut self, load: bool, offset: u64) -> [f32; 4] {
            ldg_nc_f32x4_if(load, to_global(self.epilogue.residual) + 4 * offset)
        }
    }

    impl TileBlock for GpuDepthwise {
        #[inline(always)]
        fn each_thread(&mut self, mut f: impl FnMut(&mut Self, u32)) {
            f(self, thread_idx_x());
        }

        #[inline(always)]
        fn barrier(&mut self) {
            sync_threads();
        }

        #[inline(always)]
        fn copy_x(&mut self, slot: u32, offset: u64, inside: bool) {
            cp_async_f32(self.smem + 4 * slot, self.x + 4 * offset, if inside { 4 } else { 0 });
        }

        #[inline(always)]
        fn copy_x4(&mut self, slot: u32, offset: u64, inside: bool) {
            cp_async_f32x4(self.smem + 4 * slot, self.x + 4 * offset, if inside { 16 } else { 0 });
        }

        #[inline(always)]
        fn copy_w(&mut self, slot: u32, offset: u64) {
            cp_async_f32(self.smem + 4 * slot, self.w + 4 * offset, 4);
        }

        #[inline(always)]
        fn wait_copies(&mut self) {
            cp_async_wait_all();
        }

        #[inline(always)]
        fn write_y(&mut self, store: bool, offset: u64, v: f32) {
            stg_f32_if(store, self.y + 4 * offset, v);
        }

        #[inline(always)]
        fn residual(&mut self, load: bool, offset: u64) -> f32 {
            ldg_nc_f32_if(load, to_global(self.epilogue.residual) + 4 * offset)
        }

        #[inline(always)]
        fn load(&mut self, slot: u32) -> f32 {
            ld_shared_f32(self.smem + 4 * slot)
        }

        #[inline(always)]
        fn load2(&mut self, slot: u32) -> [f32; 2] {
            ld_shared_f32x2(self.smem + 4 * slot)
        }

        #[inline(always)]
        fn load4(&mut self, slot: u32) -> [f32; 4] {
            ld_shared_f32x4(self.smem + 4 * slot)
        }
    }
}
