//! The depthwise rows program (stride `ST` of 1 or 2, input rows of a multiple of `4·ST` and at
//! most `128·ST` floats, outputs `in_w / ST` wide): a warp streams whole rows of one or more
//! planes down a segment of the output, with no shared memory and no barrier. Lane `i` of a
//! plane's `in_w / (4·ST)` lanes holds input columns `4·ST·i ..` of each row (`N = 4·ST` of
//! them, 16-byte loads [`RowLane::load_row`] issued `D` rows ahead, a ring of registers) and
//! computes output columns `4i .. 4i + 4`; its neighbours' edge columns come by shuffles
//! ([`RowLane::halo`]). Each input row is added into the output rows it feeds (`S` rows of
//! accumulators, their slots rotating at compile time: the loop is unrolled by `D`, a multiple
//! of `ST·S`), and the oldest, complete, leaves in one 16-byte store through the epilogue.
//!
//! Grid: x = block of [`ROWS_WARPS`] warps; a warp's index is `plane_group * segments +
//! segment` (magic division), its lanes `slot * row_lanes + lane_in_row` (magic division),
//! plane `plane_group * planes_per_warp + slot`. The per-lane program is generic over
//! [`RowLane`], so the host's tests run it lane by lane on the CPU.

use super::{DepthwiseFwdParams, DepthwiseOut};

/// Warps per block of the rows program.
pub const ROWS_WARPS: u32 = 4;
/// Output columns per lane: one 16-byte store (input columns: `ROW_PX · stride`).
pub const ROW_PX: u32 = 4;

/// Where one lane of the rows program works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCoords {
    /// Input plane (`image * C + channel`).
    pub plane: u32,
    /// Whether the lane holds a plane (lanes past the warp's planes or the last plane only
    /// take part in the shuffles).
    pub live: bool,
    /// The lane's place in its plane's row: columns `4 · lane_in_row ..`.
    pub lane_in_row: u32,
    /// Output rows `first_row .. end_row` of the plane.
    pub first_row: u32,
    pub end_row: u32,
}

impl DepthwiseFwdParams {
    /// Where lane `lane` of warp `warp` (from the grid's first) works.
    #[inline(always)]
    pub fn row_coords(&self, warp: u32, lane: u32) -> RowCoords {
        let (group, segment) = self.segments.div_rem(warp);
        let (slot, lane_in_row) = self.row_lanes.div_rem(lane);
        let plane = group * self.planes_per_warp + slot;
        let first_row = segment * self.segment_rows;
        let end_row =
            if self.out_h - first_row < self.segment_rows { self.out_h } else { first_row + self.segment_rows };
        RowCoords { plane, live: slot < self.planes_per_warp && plane < self.planes, lane_in_row, first_row, end_row }
    }
}

/// What the rows program does outside its registers: one lane's view.
pub trait RowLane: DepthwiseOut {
    /// Input elements `offset .. offset + N` (`N` a multiple of 4) where `load`, else zeros,
    /// by 16-byte loads; issued now, used `D` rows later.
    fn load_row<const N: usize>(&mut self, load: bool, offset: u64) -> [f32; N];
    /// The left neighbour's last `L` columns and the right neighbour's first `R` of the row
    /// whose own columns are `own` (at input `offset` where `live`), zeros past the row's
    /// ends (`first`, `last`: the lane is its plane's first or last). Every lane of the
    /// warp calls it together.
    fn halo<const N: usize, const L: usize, const R: usize>(
        &mut self,
        own: [f32; N],
        offset: u64,
        live: bool,
        first: bool,
        last: bool,
    ) -> ([f32; L], [f32; R]);
    /// Filter element `offset`.
    fn tap(&mut self, offset: u64) -> f32;
}

/// The rows program of one lane, for filter `K = 2H + 1`, stride `ST` (`N = 4·ST` input
/// columns per lane, `R = H + 1 - ST` of them from the right neighbour, `S = ceil(K / ST)`
/// output rows in flight), channel multiplier `M`, `D` rows of loads in flight (a multiple of
/// `ST·S`), store mode `MODE`, and `PIN`: each step's sums completed before the next step
/// ([`crate::pin`]; without it LLVM defers multiply-adds to the store that needs them).
// Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub fn rows<
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
    L: RowLane,
>(
    l: &mut L,
    p: &DepthwiseFwdParams,
    at: RowCoords,
) {
    const {
        assert!(K == 2 * H + 1 && N == 4 * ST && R + ST == H + 1 && S == K.div_ceil(ST));
        assert!(H <= 4 && N + H + R <= 16 && D.is_multiple_of(ST * S));
    };
    let lanes = p.row_lanes.divisor;
    let (first, last) = (at.lane_in_row == 0, at.lane_in_row + 1 == lanes);
    let channel = p.channels.div_rem(at.plane).1;
    let mut w = [[[0.0f32; K]; K]; M];
    let mut bias = [0.0f32; M];
    for m in 0..M {
        let filter = (channel * M as u32 + m as u32) as u64 * (K * K) as u64;
        for r in 0..K {
            for s in 0..K {
                w[m][r][s] = if at.live { l.tap(filter + (r * K + s) as u64) } else { 0.0 };
            }
        }
        bias[m] = l.bias(channel * M as u32 + m as u32);
    }
    // Input row `ST·first_row - pad_h + t` is step t; output row `first_row + j` is complete
    // after step ST·j + K - 1.
    let steps = ST as u32 * (at.end_row - at.first_row - 1) + K as u32;
    let first_in = (ST as u32 * at.first_row) as i32 - p.pad_h;
    let column = ROW_PX * at.lane_in_row;
    let plane_at = at.plane as u64 * p.in_plane as u64 + (ST as u32 * column) as u64;
    let row_at = |t: u32| {
        let y = first_in + t as i32;
        let load = at.live && t < steps && (y as u32) < p.in_h;
        (load, if load { plane_at + (y as u32 * p.in_w) as u64 } else { 0 })
    };
    let mut ring = [[0.0f32; N]; D];
    for d in 0..D {
        let (load, offset) = row_at(d as u32);
        ring[d] = l.load_row::<N>(load, offset);
    }
    let ep = &p.epilogue;
    let out_planes = (at.plane - channel) as u64 * M as u64;
    let mut acc = [[[0.0f32; 4]; M]; S];
    let mut t = 0;
    loop {
        let mut more = true;
        crate::unrolled::<D>(
            #[inline(always)]
            |u| {
                if t + u as u32 >= steps {
                    more = false;
                    return false;
                }
                let own = ring[u];
                let (live, at_row) = row_at(t + u as u32);
                let (left, right) = l.halo::<N, H, R>(own, at_row, live, first, last);
                let (load, offset) = row_at(t + (u + D) as u32);
                ring[u] = l.load_row::<N>(load, offset);
                // Input columns ST·column - H + i of the lane's outputs' windows.
                let mut x = [0.0f32; 16];
                x[..H].copy_from_slice(&left);
                x[H..H + N].copy_from_slice(&own);
                x[H + N..H + N + R].copy_from_slice(&right);
                // Step t + u feeds output row first_row + (t + u - fr) / ST through filter row fr
                // where ST divides t + u - fr (t is a multiple of ST·S ≥ K), into slot (row
                // mod S). Filter row 0 starts a row (its slot's sum starts afresh), so what the
                // first K - 1 steps add for rows before first_row is overwritten unread: no
                // run-time test per filter row (one split the 7x7 loop into 49 branches).
                for fr in 0..K {
                    if (u + ST * S - fr).is_multiple_of(ST) {
                        let slot = (u + ST * S - fr) / ST % S;
                        for m in 0..M {
                            for i in 0..4 {
                                for s in 0..K {
                                    let sum = if fr == 0 && s == 0 { 0.0 } else { acc[slot][m][i] };
                                    acc[slot][m][i] = crate::fma(x[ST * i + s], w[m][fr][s], sum);
                                }
                            }
                        }
                    }
                }
                if (u + ST * S - (K - 1)).is_multiple_of(ST) && t + u as u32 >= K as u32 - 1 {
                    let done = (u + ST * S - (K - 1)) / ST % S;
                    let y = at.first_row + (t + u as u32 + 1 - K as u32) / ST as u32;
                    for m in 0..M {
                        let k = channel * M as u32 + m as u32;
                        let out_plane = out_planes + ep.stored_channel::<MODE>(k) as u64;
                        let offset = (out_plane * p.out_h as u64 + y as u64) * p.out_w as u64 + column as u64;
                        let mut v = acc[done][m];
                        if MODE != crate::conv::epilogue::PLAIN {
                            let res = l.residual4(at.live && ep.residual != 0, offset);
                            v = [0, 1, 2, 3].map(|i| ep.apply_in::<MODE>(v[i], bias[m], res[i]));
                        }
                        l.write_y4(at.live, offset, v);
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
        t += D as u32;
    }
}
