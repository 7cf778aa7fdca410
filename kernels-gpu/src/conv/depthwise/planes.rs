//! The depthwise planes program (NCHW, small maps): a block holds whole input planes in shared
//! memory. NCHW puts every image's channel planes one after another, so a block's
//! `block_planes` consecutive planes (`image * C + channel`) are one contiguous range, and so are
//! their outputs:
//! 1. The range is copied to shared memory in 16-byte `cp.async` pieces with no index math per
//!    element (the tiles program's halo copies of 14- and 7-wide rows went element by element);
//!    a zeroed guard before and after it serves the rows and columns outside the map.
//! 2. Each thread computes [`RY`](planes) output rows of [`PLANE_PX`] adjacent columns of one
//!    plane, input row by input row: a row's window of `(PLANE_PX - 1)·ST + K` values is read
//!    once (columns outside the map selected to zero) and added into every output row it feeds,
//!    with all `K x K` taps in registers. The sums go to an output stage in shared memory.
//! 3. The block writes its contiguous output range in 16-byte stores.
//!
//! The epilogue's bias is added in step 2, where a thread's sums share one output channel (one
//! bias load per thread, not one per element at the store); step 3 applies the activation, adds
//! a residual and moves shuffled channels.
//!
//! A thread's place is `(strip · row_blocks + row_block) · block_planes + plane`: the block's
//! planes vary fastest across a warp, so a warp's shared-memory reads start one plane apart
//! (conflict-free where a plane's length is odd, 2-way on 14 x 14 planes).
//!
//! Grid: x = block of planes. The block program is generic over [`PlaneBlock`], so the host's
//! tests run it on the CPU with every shared-memory access tracked.

use super::TileBlock;
use crate::MagicDiv;
use crate::conv::epilogue::PLAIN;
use bytemuck::{Pod, Zeroable};

/// Adjacent output columns per thread.
pub const PLANE_PX: usize = 4;
/// The block's planes are a multiple of this, so that every block's input and output ranges
/// start 16-byte aligned.
pub const PLANES_QUANTUM: u32 = 4;

/// Parameters of every planes kernel, passed by value. The host keeps every element offset of
/// the input and output, the last block's unused planes included, below 2^31.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DepthwisePlanesParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: i32,
    pub pad_w: i32,
    /// Input planes of all images, `n * c`.
    pub planes: u32,
    /// Planes per block, a multiple of [`PLANES_QUANTUM`].
    pub block_planes: u32,
    /// Threads per block: `block_planes · row_blocks · strips`.
    pub threads: u32,
    /// `in_h * in_w` and `out_h * out_w`.
    pub in_plane: u32,
    pub out_plane: u32,
    /// Elements of the input and the output tensors.
    pub x_len: u32,
    pub y_len: u32,
    /// Keeps the struct free of implicit padding (the kernel derives its shared-memory layout,
    /// [`PlanesLayout`], from the fields above and its variant).
    pub _pad: u32,
    /// Divides a thread by `block_planes`: (strip and row block, plane).
    pub plane_slots: MagicDiv,
    /// Divides by a plane's row blocks, `ceil(out_h / RY)`: (strip, row block).
    pub row_blocks: MagicDiv,
    /// Divides a plane by the channels `c` (its remainder is the channel).
    pub channels: MagicDiv,
    /// Divides an output element by `out_plane`: (output plane, pixel).
    pub out_planes: MagicDiv,
    /// Divides an output plane by the output channels `K = M·C`: (image, output channel).
    pub out_channels: MagicDiv,
    pub epilogue: super::super::epilogue::EpilogueParams,
}

/// Where a block's shared memory holds what, in 4-byte slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanesLayout {
    /// Zeros before the planes: the rows outside the map read here, and the first plane's
    /// leftmost windows reach in.
    pub front: u32,
    /// Zeros after the planes, where the last plane's rightmost windows reach.
    pub back: u32,
    /// The input planes take `front .. front + block_planes · in_plane`.
    pub in_slots: u32,
    pub out_slot: u32,
    pub out_slots: u32,
}

impl PlanesLayout {
    /// The layout of a block of `block_planes` planes of `in_plane` elements, with filter `k`,
    /// stride `st` (padding at most `k - 1`) and multiplier `m`, outputs of `out_plane`.
    pub const fn new(k: u32, st: u32, m: u32, block_planes: u32, in_plane: u32, out_plane: u32) -> Self {
        let window = (PLANE_PX as u32 - 1) * st + k;
        // A window starts at most `pad_w ≤ k - 1` before its row; one of the last strip ends at
        // most `pad_w + 3·st` past the row's end (its outputs past `out_w` are never stored).
        let front = window.next_multiple_of(4);
        let back = (k - 1 + 3 * st).next_multiple_of(4);
        let in_slots = block_planes * in_plane;
        let out_slot = front + in_slots + back;
        PlanesLayout { front, back, in_slots, out_slot, out_slots: block_planes * m * out_plane }
    }

    pub const fn smem_bytes(&self) -> u32 {
        4 * (self.out_slot + self.out_slots)
    }
}

/// What the program touches beyond a tiles block's copies, shared loads, barrier and stores
/// ([`TileBlock`]): a block of a launch-time thread count, taps read directly, the output stage.
pub trait PlaneBlock: TileBlock {
    /// Runs `f(self, thread)` for every one of the block's `threads`.
    fn each_thread_of(&mut self, threads: u32, f: impl FnMut(&mut Self, u32));
    /// Filter element `offset`.
    fn tap(&mut self, offset: u64) -> f32;
    /// Writes `v` to `slot` where `store` (predicated, not branched around).
    fn stage(&mut self, store: bool, slot: u32, v: f32);
}

/// The block program of block `block`, for filter `K`, stride `ST`, multiplier `M`, `RY`
/// output rows per thread (`WIN = (PLANE_PX - 1)·ST + K` input columns and `IR = (RY - 1)·ST +
/// K` input rows under them), store mode `MODE`.
// Register arrays are indexed in lockstep by compile-time-constant loop counters (fully
// unrolled); iterator chains over several of them would hide that.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn planes<
    const K: usize,
    const ST: usize,
    const M: usize,
    const RY: usize,
    const WIN: usize,
    const IR: usize,
    const MODE: u32,
    B: PlaneBlock,
>(
    b: &mut B,
    p: &DepthwisePlanesParams,
    block: u32,
) {
    const { assert!(WIN == (PLANE_PX - 1) * ST + K && IR == (RY - 1) * ST + K) };
    let lay = PlanesLayout::new(K as u32, ST as u32, M as u32, p.block_planes, p.in_plane, p.out_plane);
    let first = block * p.block_planes;
    let threads = p.threads;

    // 1. The planes (zeros past the tensor's end) and the zero guards into shared memory.
    b.each_thread_of(
        threads,
        #[inline(always)]
        |b, t| {
            let (front, guards) = (lay.front / 4, (lay.front + lay.back) / 4);
            let mut g = t;
            while g < guards {
                let slot = if g < front { 4 * g } else { lay.front + lay.in_slots + 4 * (g - front) };
                b.copy_x4(slot, 0, false);
                g += threads;
            }
            let x0 = first * p.in_plane;
            let mut e = t;
            while e < lay.in_slots / 4 {
                let (o, slot) = (x0 + 4 * e, lay.front + 4 * e);
                let left = p.x_len.saturating_sub(o);
                if left == 0 || left >= 4 {
                    b.copy_x4(slot, if left > 0 { o as u64 } else { 0 }, left > 0);
                } else {
                    // The tensor ends inside this piece: a 16-byte copy would read past it.
                    for i in 0..4 {
                        let inside = o + i < p.x_len;
                        b.copy_x(slot + i, if inside { (o + i) as u64 } else { 0 }, inside);
                    }
                }
                e += threads;
            }
            b.wait_copies();
        },
    );
    b.barrier();

    // 2. Each thread: RY rows of PLANE_PX outputs of one plane, into the output stage.
    b.each_thread_of(
        threads,
        #[inline(always)]
        |b, t| {
            let (rest, slot) = p.plane_slots.div_rem(t);
            let (strip, row_block) = p.row_blocks.div_rem(rest);
            // Planes past the tensor's end (in the last block) convolve the copies' zeros: every
            // stage slot that a 16-byte read of the last outputs touches is then written.
            let channel = p.channels.div_rem(first + slot).1;
            let mut w = [[[0.0f32; K]; K]; M];
            let mut bias = [0.0f32; M];
            for m in 0..M {
                let k = channel * M as u32 + m as u32;
                let filter = k as u64 * (K * K) as u64;
                for r in 0..K {
                    for s in 0..K {
                        w[m][r][s] = b.tap(filter + (r * K + s) as u64);
                    }
                }
                if MODE != PLAIN {
                    bias[m] = b.bias(k);
                }
            }
            let (oy0, ox0) = (row_block * RY as u32, strip * PLANE_PX as u32);
            let iy0 = (oy0 * ST as u32) as i32 - p.pad_h;
            let ix0 = (ox0 * ST as u32) as i32 - p.pad_w;
            let col_live: [bool; WIN] = core::array::from_fn(|e| ((ix0 + e as i32) as u32) < p.in_w);
            let plane_start = (lay.front + slot * p.in_plane) as i32 + ix0;
            let mut acc = [[[0.0f32; PLANE_PX]; RY]; M];
            // Unrolled by hand: LLVM left the longer row loops rolled, the sums in local memory.
            crate::unrolled::<IR>(|j| {
                let iy = iy0 + j as i32;
                // A row outside the map reads the front guard's zeros.
                let row = if (iy as u32) < p.in_h { (plane_start + iy * p.in_w as i32) as u32 } else { 0 };
                let win: [f32; WIN] = core::array::from_fn(|e| crate::select(col_live[e], b.load(row + e as u32), 0.0));
                // Input row j feeds output row (j - fr) / ST through filter row fr.
                for fr in 0..K {
                    if j >= fr && (j - fr).is_multiple_of(ST) && (j - fr) / ST < RY {
                        let r = (j - fr) / ST;
                        for m in 0..M {
                            for i in 0..PLANE_PX {
                                for s in 0..K {
                                    acc[m][r][i] = crate::fma(win[i * ST + s], w[m][fr][s], acc[m][r][i]);
                                }
                            }
                        }
                    }
                }
                true
            });
            let stage = lay.out_slot + slot * M as u32 * p.out_plane;
            for m in 0..M {
                for r in 0..RY {
                    let oy = oy0 + r as u32;
                    for i in 0..PLANE_PX {
                        let ox = ox0 + i as u32;
                        let at = stage + m as u32 * p.out_plane + oy * p.out_w + ox;
                        let v = if MODE == PLAIN { acc[m][r][i] } else { acc[m][r][i] + bias[m] };
                        b.stage(oy < p.out_h && ox < p.out_w, at, v);
                    }
                }
            }
        },
    );
    b.barrier();

    // 3. The block's outputs, contiguous, in 16-byte pieces through the rest of the epilogue.
    b.each_thread_of(
        threads,
        #[inline(always)]
        |b, t| {
            let y0 = first * M as u32 * p.out_plane;
            let mut e = t;
            while e < lay.out_slots / 4 && y0 + 4 * e < p.y_len {
                let v = b.load4(lay.out_slot + 4 * e);
                store4::<MODE, B>(b, p, y0 + 4 * e, v);
                e += threads;
            }
        },
    );
}

/// Stores staged outputs `o .. o + 4` (those before the tensor's end, their bias added) through
/// the activation of mode `MODE` ([`crate::by_mode`]) and the residual.
#[allow(clippy::needless_range_loop)] // several arrays in lockstep, fully unrolled
#[inline(always)]
fn store4<const MODE: u32, B: PlaneBlock>(b: &mut B, p: &DepthwisePlanesParams, o: u32, v: [f32; 4]) {
    let whole = p.y_len - o >= 4;
    let ep = &p.epilogue;
    let v = if MODE == PLAIN { v } else { v.map(|x| ep.activate_in::<MODE>(x)) };
    if MODE == PLAIN || (ep.residual == 0 && ep.keeps_order()) {
        if whole {
            b.write_y4(true, o as u64, v);
        } else {
            for i in 0..4 {
                b.write_y(o + (i as u32) < p.y_len, (o + i as u32) as u64, v[i]);
            }
        }
        return;
    }
    if whole && ep.keeps_order() {
        let res = b.residual4(ep.residual != 0, o as u64);
        b.write_y4(true, o as u64, core::array::from_fn(|i| v[i] + res[i]));
        return;
    }
    // Pixel, image and output channel of each element, stepped on from the first's.
    let (plane, mut pixel) = p.out_planes.div_rem(o);
    let (mut image, mut k) = p.out_channels.div_rem(plane);
    let mut to = [0u32; 4];
    for i in 0..4 {
        to[i] = if ep.keeps_order() {
            o + i as u32
        } else {
            (image * p.out_channels.divisor + ep.out_channel(k)) * p.out_plane + pixel
        };
        pixel += 1;
        let next_plane = pixel == p.out_plane;
        pixel = if next_plane { 0 } else { pixel };
        k += next_plane as u32;
        let next_image = k == p.out_channels.divisor;
        (k, image) = if next_image { (0, image + 1) } else { (k, image) };
    }
    for i in 0..4 {
        let live = o + (i as u32) < p.y_len;
        let res = b.residual(live && ep.residual != 0, to[i] as u64);
        b.write_y(live, to[i] as u64, v[i] + res);
    }
}

#[cfg(target_arch = "nvptx64")]
pub(super) mod device {
    use super::{DepthwisePlanesParams, PlaneBlock};
    use crate::{conv::depthwise::GpuDepthwise, prelude::*};

    /// A planes variant's kernel in store mode `MODE`.
    #[inline(always)]
    pub fn kernel<
        const K: usize,
        const ST: usize,
        const M: usize,
        const RY: usize,
        const WIN: usize,
        const IR: usize,
        const MODE: u32,
    >(
        p: &DepthwisePlanesParams,
    ) {
        let mut b = GpuDepthwise {
            smem: smem_base(),
            x: to_global(p.x),
            w: to_global(p.w),
            y: to_global(p.y),
            epilogue: p.epilogue,
        };
        super::planes::<K, ST, M, RY, WIN, IR, MODE, _>(&mut b, p, block_idx_x());
    }

    impl PlaneBlock for GpuDepthwise {
        #[inline(always)]
        fn each_thread_of(&mut self, _: u32, mut f: impl FnMut(&mut Self, u32)) {
            f(self, thread_idx_x());
        }

        #[inline(always)]
        fn tap(&mut self, offset: u64) -> f32 {
            ldg_nc_f32(self.w + 4 * offset)
        }

        #[inline(always)]
        fn stage(&mut self, store: bool, slot: u32, v: f32) {
            st_shared_f32_if(store, self.smem + 4 * slot, v);
        }
    }
}
