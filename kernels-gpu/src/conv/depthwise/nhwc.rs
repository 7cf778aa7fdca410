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
//! The walk's first and last iterations are compiled apart from those between, so no
//! multiply-add feeds a row outside the segment (a segment's `K - ST` extra steps cost loads
//! only). In the variants that compile it (`INTERIOR`), warps whose threads' input columns all
//! lie inside the image run a copy of the walk whose loads share one predicate, the row's; a
//! row's addresses step by `4·C` from its first.
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
    /// Input elements `offset + j·stride .. + V` for each `j < W` where `live[j]`, else zeros
    /// (one `4·V`-byte load each; offsets are not read, and may be anything, where not live).
    fn load_pixels<const V: usize, const W: usize>(
        &mut self,
        live: [bool; W],
        offset: u64,
        stride: u64,
    ) -> [[f32; V]; W];
    /// Filter element `offset`.
    fn tap(&mut self, offset: u64) -> f32;
    /// The epilogue's bias of output channel `k`, 0 without one.
    fn bias(&mut self, k: u32) -> f32;
    /// Residual elements `offset .. offset + V` where `load`, else zeros.
    fn residual<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V];
    /// Output elements `offset .. offset + V` where `store` (one store).
    fn store<const V: usize>(&mut self, store: bool, offset: u64, v: [f32; V]);
    /// Whether `p` holds for every thread that runs in step with this one (a warp's lanes).
    fn all_in_step(&mut self, p: bool) -> bool;
}

/// Which iteration of `U` steps a step belongs to: the first, whose filter rows past the step
/// would feed rows above the segment, the last (`K - ST` steps), whose filter rows up to the
/// step would feed rows below it, or one between, all of whose multiply-adds count.
const HEAD: u8 = 0;
const BODY: u8 = 1;
const TAIL: u8 = 2;

/// One thread's walk down its segment: the taps, the sums of the `S` output rows in flight,
/// the next input row (loaded a step ahead) and where the next load and store go.
struct Walk<const K: usize, const ST: usize, const S: usize, const V: usize, const TW: usize, const W: usize> {
    w: [[[f32; V]; K]; K],
    bias: [f32; V],
    acc: [[[f32; V]; TW]; S],
    next: [[f32; V]; W],
    /// Which of the input row's `W` columns lie inside the image.
    col_live: [bool; W],
    /// Steps of the walk: `ST·(R - 1) + K` for the segment's rows rounded up to `R`, a
    /// multiple of `S`.
    steps: u32,
    /// The next load's input row, and the offset of its first pixel's first channel (wrapped
    /// where the row or column lies outside: never read).
    next_y: i32,
    next_offset: u64,
    /// The next store's output row in the segment, and the offset of its first output.
    out_row: u32,
    out_offset: u64,
}

impl<const K: usize, const ST: usize, const S: usize, const V: usize, const TW: usize, const W: usize>
    Walk<K, ST, S, V, TW, W>
{
    /// The next input row, `more` where the walk still needs one. Interior tiles (every
    /// column inside the image) predicate all `W` loads on one row test.
    #[inline(always)]
    fn load<const INTERIOR: bool, L: NhwcLane>(
        &mut self,
        l: &mut L,
        p: &DepthwiseNhwcParams,
        more: bool,
    ) -> [[f32; V]; W] {
        let c = p.channels as u64;
        // Addresses are computed either way and only the loads predicated: a select of the
        // address became a branch around each load.
        let row_live = more & ((self.next_y as u32) < p.in_h);
        let live = core::array::from_fn(|j| row_live & (INTERIOR | self.col_live[j]));
        let row = l.load_pixels::<V, W>(live, crate::opaque_u64(self.next_offset), c);
        self.next_y += 1;
        self.next_offset = self.next_offset.wrapping_add(p.in_w as u64 * c);
        row
    }

    /// Step `step`, the `u`-th of its iteration of `U` (a multiple of `ST·S`, so each filter
    /// row's output row slot is known at compile time): adds the input row to the sums it
    /// feeds, loads the next, and stores the row it completes.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn step<const PHASE: u8, const INTERIOR: bool, const U: usize, const PIN: bool, const MODE: u32, L: NhwcLane>(
        &mut self,
        l: &mut L,
        p: &DepthwiseNhwcParams,
        at: &NhwcCoords,
        u: usize,
        step: u32,
    ) {
        let x = self.next;
        self.next = self.load::<INTERIOR, L>(l, p, step + 1 < self.steps);
        // Step `step` feeds output row (step - fr) / ST of the segment through filter row fr
        // where ST divides step - fr, into slot (row mod S). Filter row 0 is a row's first, so
        // it starts the slot's sum afresh. Every test here is on compile-time values: a
        // run-time test per filter row split the 7x7 loop into 49 branches.
        for fr in 0..K {
            let feeds = match PHASE {
                HEAD => fr <= u,
                TAIL => fr > u,
                _ => true,
            };
            if feeds && (u + U - fr).is_multiple_of(ST) {
                let slot = (u + U - fr) / ST % S;
                for i in 0..TW {
                    for s in 0..K {
                        for v in 0..V {
                            let sum = if fr == 0 && s == 0 { 0.0 } else { self.acc[slot][i][v] };
                            self.acc[slot][i][v] = crate::fma(x[ST * i + s][v], self.w[fr][s][v], sum);
                        }
                    }
                }
            }
        }
        // Filter row K - 1 completes a row.
        if (u + U - (K - 1)).is_multiple_of(ST) && (PHASE != HEAD || u >= K - 1) {
            let done = (u + U - (K - 1)) / ST % S;
            let c = p.channels as u64;
            let row_live = at.first_row + self.out_row < at.end_row;
            let ep = &p.epilogue;
            let row = crate::opaque_u64(self.out_offset);
            for i in 0..TW {
                let live = row_live & (INTERIOR || at.column + (i as u32) < p.out_w);
                let offset = row + i as u64 * c;
                let mut out = self.acc[done][i];
                if MODE != crate::conv::epilogue::PLAIN {
                    let res = l.residual::<V>(live & (ep.residual != 0), offset);
                    out = core::array::from_fn(|v| ep.apply_in::<MODE>(out[v], self.bias[v], res[v]));
                }
                l.store::<V>(live, offset, out);
            }
            self.out_row += 1;
            self.out_offset += p.out_w as u64 * c;
        }
        if PIN {
            self.acc.iter_mut().flatten().flatten().for_each(crate::pin);
        }
    }

    /// The whole walk: the first iteration, those between, the last.
    #[inline(always)]
    fn run<const INTERIOR: bool, const U: usize, const PIN: bool, const MODE: u32, L: NhwcLane>(
        &mut self,
        l: &mut L,
        p: &DepthwiseNhwcParams,
        at: &NhwcCoords,
    ) {
        self.next = self.load::<INTERIOR, L>(l, p, true);
        crate::unrolled::<U>(
            #[inline(always)]
            |u| {
                self.step::<HEAD, INTERIOR, U, PIN, MODE, L>(l, p, at, u, u as u32);
                true
            },
        );
        let body_end = self.steps + ST as u32 - K as u32;
        let mut t = U as u32;
        while t < body_end {
            crate::unrolled::<U>(
                #[inline(always)]
                |u| {
                    self.step::<BODY, INTERIOR, U, PIN, MODE, L>(l, p, at, u, t + u as u32);
                    true
                },
            );
            t += U as u32;
        }
        crate::unrolled::<U>(
            #[inline(always)]
            |u| {
                if u >= K - ST {
                    return false;
                }
                self.step::<TAIL, INTERIOR, U, PIN, MODE, L>(l, p, at, u, t + u as u32);
                true
            },
        );
    }
}

/// The program of one thread, for filter `K`, stride `ST`, `S = ceil(K / ST)` output rows in
/// flight (the loop unrolled by `U = ST·S`), `V` channels and `TW` output columns per thread
/// (`W = (TW - 1)·ST + K` input columns), `PIN` (each step's sums completed before the next
/// step, [`crate::pin`]; without it LLVM defers multiply-adds to the store that needs them,
/// which holds input rows instead: faster for 3x3 and 5x5 filters, slower for 7x7) and store
/// mode `MODE`.
///
/// The segment's rows are rounded up to a multiple of `S` (the rows past its end are computed
/// and not stored), so its first and last iterations are known at compile time and add
/// nothing for rows outside it.
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
    const INTERIOR: bool,
    const MODE: u32,
    L: NhwcLane,
>(
    l: &mut L,
    p: &DepthwiseNhwcParams,
    at: NhwcCoords,
) {
    const { assert!(S == K.div_ceil(ST) && U == ST * S && W == (TW - 1) * ST + K && K > ST) };
    let mut w = [[[0.0f32; V]; K]; K];
    let mut bias = [0.0f32; V];
    for v in 0..V {
        let filter = (at.channel as u64 + v as u64) * (K * K) as u64;
        for (r, row) in w.iter_mut().enumerate() {
            for (s, tap) in row.iter_mut().enumerate() {
                tap[v] = l.tap(filter + (r * K + s) as u64);
            }
        }
        bias[v] = l.bias(at.channel + v as u32);
    }
    let c = p.channels as u64;
    // Input column ST·column - pad_w + j feeds the thread's outputs; those outside the row
    // read as zeros. Step t reads input row ST·first_row - pad_h + t.
    let first_col = (ST as u32 * at.column) as i32 - p.pad_w;
    let first_in = (ST as u32 * at.first_row) as i32 - p.pad_h;
    let rows = (at.end_row - at.first_row).div_ceil(S as u32) * S as u32;
    let in_pixel = (at.image as u64 * p.in_h as u64)
        .wrapping_add(first_in as i64 as u64)
        .wrapping_mul(p.in_w as u64)
        .wrapping_add(first_col as i64 as u64);
    let out_pixel = (at.image as u64 * p.out_h as u64 + at.first_row as u64) * p.out_w as u64 + at.column as u64;
    let mut walk = Walk::<K, ST, S, V, TW, W> {
        w,
        bias,
        acc: [[[0.0; V]; TW]; S],
        next: [[0.0; V]; W],
        col_live: core::array::from_fn(|j| ((first_col + j as i32) as u32) < p.in_w),
        steps: ST as u32 * (rows - 1) + K as u32,
        next_y: first_in,
        next_offset: in_pixel.wrapping_mul(c).wrapping_add(at.channel as u64),
        out_row: 0,
        out_offset: out_pixel * c + at.channel as u64,
    };
    // A warp whose lanes straddle an edge tile and an interior one (C / V is rarely a multiple
    // of 32) would run both walks one after the other; it runs the edge walk alone, which is
    // right for every tile.
    if INTERIOR && l.all_in_step(first_col >= 0 && first_col as u32 + W as u32 <= p.in_w) {
        walk.run::<true, U, PIN, MODE, L>(l, p, &at);
    } else {
        walk.run::<false, U, PIN, MODE, L>(l, p, &at);
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
        fn load_pixels<const V: usize, const W: usize>(
            &mut self,
            live: [bool; W],
            offset: u64,
            stride: u64,
        ) -> [[f32; V]; W] {
            let mut at = self.x.wrapping_add(4 * offset);
            core::array::from_fn(|j| {
                let v = ldg_nc_vec_if::<V>(live[j], at);
                at = at.wrapping_add(4 * stride);
                v
            })
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

        #[inline(always)]
        fn all_in_step(&mut self, p: bool) -> bool {
            warp_all(p)
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
        const INTERIOR: bool,
        const MODE: u32,
    >(
        p: &DepthwiseNhwcParams,
    ) {
        let thread = block_idx_x() * NHWC_BLOCK_THREADS + thread_idx_x();
        let Some(at) = p.coords(thread, V as u32, TW as u32) else { return };
        let mut lane = GpuLane { x: to_global(p.x), w: to_global(p.w), y: to_global(p.y), epilogue: p.epilogue };
        super::channels_last::<K, ST, S, U, V, TW, W, PIN, INTERIOR, MODE, _>(&mut lane, p, at);
    }
}
