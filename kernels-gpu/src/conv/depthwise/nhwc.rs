//! The depthwise channels-last program (NHWC input and output, channel multiplier 1, stride
//! `ST` of 1 or 2): a thread holds `V` adjacent channels (one `4·V`-byte load per pixel, so a
//! warp's lanes read consecutive pieces of a pixel's channels) and `TW` adjacent output pixels
//! of a row, and walks down a segment of output rows. Each step loads one input row's `W =
//! (TW - 1)·ST + K` pixels (a row ahead of its use: a thread keeps two rows of loads in
//! flight), adds it into the `S = ceil(K / ST)` output rows it feeds, their accumulator slots
//! rotating at compile time (the loop is unrolled by `ST·S`), and stores the oldest, complete
//! row through the epilogue in `4·V`-byte stores. The taps stay in registers; no shared memory,
//! no barrier. Horizontal neighbours overlap by `K - ST` pixels, which the L1 serves.
//!
//! Grid: x = blocks of [`NHWC_BLOCK_THREADS`]; a thread's index unpacks with magic division as
//! `((image · segments + segment) · tiles_w + tile) · vectors + vector`. The per-thread program
//! is generic over [`NhwcLane`], so the host's tests run it thread by thread on the CPU.

use crate::MagicDiv;
use bytemuck::{Pod, Zeroable};

/// Threads per block.
pub const NHWC_BLOCK_THREADS: u32 = 128;

/// Parameters of every channels-last depthwise kernel, passed by value. The host validates
/// that the threads' index fits 31 bits and that every offset fits 64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DepthwiseNhwcParams {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub pad_h: i32,
    pub pad_w: i32,
    /// Channels `C` (= `K`), a multiple of the variant's `V`.
    pub channels: u32,
    /// Output rows per segment.
    pub segment_rows: u32,
    /// Threads of the launch: `n · segments · tiles_w · vectors`.
    pub threads: u32,
    /// Keeps the struct free of implicit padding.
    pub _pad: u32,
    /// Divides a thread index by the channel vectors `C / V`.
    pub vectors: MagicDiv,
    /// Divides by the tiles across the output, `ceil(out_w / TW)`.
    pub tiles_w: MagicDiv,
    /// Divides by the segments of an image's output rows.
    pub segments: MagicDiv,
    pub epilogue: super::super::epilogue::EpilogueParams,
}

/// Where one thread works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NhwcCoords {
    pub image: u32,
    /// First of its `V` channels.
    pub channel: u32,
    /// First of its `TW` output columns.
    pub column: u32,
    /// Output rows `first_row .. end_row`.
    pub first_row: u32,
    pub end_row: u32,
}

impl DepthwiseNhwcParams {
    /// Where thread `thread` works, for `V` channels and `TW` columns per thread; `None` past
    /// the launch's threads.
    #[inline(always)]
    pub fn coords(&self, thread: u32, v: u32, tw: u32) -> Option<NhwcCoords> {
        if thread >= self.threads {
            return None;
        }
        let (rest, vector) = self.vectors.div_rem(thread);
        let (rest, tile) = self.tiles_w.div_rem(rest);
        let (image, segment) = self.segments.div_rem(rest);
        let first_row = segment * self.segment_rows;
        let end_row =
            if self.out_h - first_row < self.segment_rows { self.out_h } else { first_row + self.segment_rows };
        Some(NhwcCoords { image, channel: vector * v, column: tile * tw, first_row, end_row })
    }
}

/// What the program does outside its registers: one thread's view. Offsets count elements.
pub trait NhwcLane {
    /// Input elements `offset .. offset + V` where `load`, else zeros (one `4·V`-byte load;
    /// `offset` is not read, and may be anything, where `load` is false).
    fn load<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V];
    /// Filter element `offset`.
    fn tap(&mut self, offset: u64) -> f32;
    /// The epilogue's bias of output channel `k`, 0 without one.
    fn bias(&mut self, k: u32) -> f32;
    /// Residual elements `offset .. offset + V` where `load`, else zeros.
    fn residual<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V];
    /// Output elements `offset .. offset + V` where `store` (one store).
    fn store<const V: usize>(&mut self, store: bool, offset: u64, v: [f32; V]);
}

/// The program of one thread, for filter `K`, stride `ST`, `S = ceil(K / ST)` output rows in
/// flight (the loop unrolled by `U = ST·S`), `V` channels and `TW` output columns per thread
/// (`W = (TW - 1)·ST + K` input columns), `PIN` (each step's sums completed before the next
/// step, [`crate::pin`]; without it LLVM defers multiply-adds to the store that needs them,
/// which holds input rows instead: faster for 3x3 and 5x5 filters, slower for 7x7) and store
/// mode `MODE`.
// Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn channels_last<
    const K: usize,
    const ST: usize,
    const S: usize,
    const U: usize,
    const V: usize,
    const TW: usize,
    const W: usize,
    const PIN: bool,
    const MODE: u32,
    L: NhwcLane,
>(
    l: &mut L,
    p: &DepthwiseNhwcParams,
    at: NhwcCoords,
) {
    const { assert!(S == K.div_ceil(ST) && U == ST * S && W == (TW - 1) * ST + K) };
    let c = p.channels as u64;
    let mut w = [[[0.0f32; V]; K]; K];
    let mut bias = [0.0f32; V];
    for v in 0..V {
        let filter = (at.channel as u64 + v as u64) * (K * K) as u64;
        for r in 0..K {
            for s in 0..K {
                w[r][s][v] = l.tap(filter + (r * K + s) as u64);
            }
        }
        bias[v] = l.bias(at.channel + v as u32);
    }
    // Input column ST·column - pad_w + j feeds the thread's outputs; those outside the row
    // read as zeros.
    let first_col = (ST as u32 * at.column) as i32 - p.pad_w;
    let col_live: [bool; W] = core::array::from_fn(|j| ((first_col + j as i32) as u32) < p.in_w);
    // Step t reads input row ST·first_row - pad_h + t; output row first_row + j is complete
    // after step ST·j + K - 1.
    let steps = ST as u32 * (at.end_row - at.first_row - 1) + K as u32;
    let first_in = (ST as u32 * at.first_row) as i32 - p.pad_h;
    let image_rows = at.image as u64 * p.in_h as u64;
    let load_row = |l: &mut L, t: u32| -> [[f32; V]; W] {
        let y = first_in + t as i32;
        let row_live = t < steps && (y as u32) < p.in_h;
        // Pixel (y, first_col)'s channel `channel`, wrapped where either is outside (never read).
        let row = ((image_rows + y as u32 as u64) * p.in_w as u64).wrapping_add(first_col as i64 as u64);
        let base = row.wrapping_mul(c).wrapping_add(at.channel as u64);
        // Predicated loads from addresses computed either way: a select of the address
        // became a branch around each load.
        core::array::from_fn(|j| l.load::<V>(row_live & col_live[j], base.wrapping_add(j as u64 * c)))
    };
    let mut next = load_row(l, 0);
    let ep = &p.epilogue;
    let mut acc = [[[0.0f32; V]; TW]; S];
    let mut t = 0;
    loop {
        let mut more = true;
        crate::unrolled::<U>(
            #[inline(always)]
            |u| {
                let step = t + u as u32;
                if step >= steps {
                    more = false;
                    return false;
                }
                let x = next;
                next = load_row(l, step + 1);
                // Step t + u feeds output row first_row + (t + u - fr) / ST through filter row
                // fr where ST divides t + u - fr (t is a multiple of ST·S ≥ K), into slot
                // (row mod S). Filter row 0 starts a row (its slot's sum starts afresh), so what
                // the first K - 1 steps add for rows before first_row is overwritten unread: no
                // run-time test per filter row (one split the 7x7 loop into 49 branches).
                for fr in 0..K {
                    if (u + U - fr).is_multiple_of(ST) {
                        let slot = (u + U - fr) / ST % S;
                        for i in 0..TW {
                            for s in 0..K {
                                for v in 0..V {
                                    let sum = if fr == 0 && s == 0 { 0.0 } else { acc[slot][i][v] };
                                    acc[slot][i][v] = crate::fma(x[ST * i + s][v], w[fr][s][v], sum);
                                }
                            }
                        }
                    }
                }
                if (u + U - (K - 1)).is_multiple_of(ST) && step >= K as u32 - 1 {
                    let done = (u + U - (K - 1)) / ST % S;
                    let y = at.first_row + (step + 1 - K as u32) / ST as u32;
                    let row = (at.image as u64 * p.out_h as u64 + y as u64) * p.out_w as u64 + at.column as u64;
                    for i in 0..TW {
                        let live = at.column + (i as u32) < p.out_w;
                        let offset = (row + i as u64) * c + at.channel as u64;
                        let mut out = acc[done][i];
                        if MODE != crate::conv::epilogue::PLAIN {
                            let res = l.residual::<V>(live & (ep.residual != 0), offset);
                            out = core::array::from_fn(|v| ep.apply_in::<MODE>(out[v], bias[v], res[v]));
                        }
                        l.store::<V>(live, offset, out);
                    }
                }
                if PIN {
                    acc.iter_mut().flatten().flatten().for_each(crate::pin);
                }
                true
            },
        );
        if !more {
            break;
        }
        t += U as u32;
    }
}

#[cfg(target_arch = "nvptx64")]
pub(super) mod device {
    use super::{DepthwiseNhwcParams, NHWC_BLOCK_THREADS, NhwcLane};
    use crate::prelude::*;

    /// One thread's view of global memory.
    struct GpuLane {
        x: u64,
        w: u64,
        y: u64,
        epilogue: crate::conv::epilogue::EpilogueParams,
    }

    impl NhwcLane for GpuLane {
        #[inline(always)]
        fn load<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V] {
            ldg_nc_vec_if::<V>(load, self.x + 4 * offset)
        }

        #[inline(always)]
        fn tap(&mut self, offset: u64) -> f32 {
            ldg_nc_f32(self.w + 4 * offset)
        }

        #[inline(always)]
        fn bias(&mut self, k: u32) -> f32 {
            self.epilogue.load_bias(k)
        }

        #[inline(always)]
        fn residual<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V] {
            ldg_nc_vec_if::<V>(load, to_global(self.epilogue.residual) + 4 * offset)
        }

        #[inline(always)]
        fn store<const V: usize>(&mut self, store: bool, offset: u64, v: [f32; V]) {
            stg_vec_if::<V>(store, self.y + 4 * offset, v);
        }
    }

    #[inline(always)]
    pub fn kernel<
        const K: usize,
        const ST: usize,
        const S: usize,
        const U: usize,
        const V: usize,
        const TW: usize,
        const W: usize,
        const PIN: bool,
        const MODE: u32,
    >(
        p: &DepthwiseNhwcParams,
    ) {
        let thread = block_idx_x() * NHWC_BLOCK_THREADS + thread_idx_x();
        let Some(at) = p.coords(thread, V as u32, TW as u32) else { return };
        let mut lane = GpuLane { x: to_global(p.x), w: to_global(p.w), y: to_global(p.y), epilogue: p.epilogue };
        super::channels_last::<K, ST, S, U, V, TW, W, PIN, MODE, _>(&mut lane, p, at);
    }
}
