//! The `Tensor` family of the batched complex GEMM: 3xTF32 on the tensor cores (`mma.sync`
//! m16n8k8, f32 accumulators), interleaved storage, compiled per stored layout of A and B.
//!
//! A complex product is four real ones over the parts' planes: `re += a.re·b.re - a.im·b.im`
//! and `im += a.re·b.im + a.im·b.re`. One m16n8k8 step of each covers 16 complex rows, 8
//! columns and 8 k, and every fragment element is a whole complex number: one 8-byte shared
//! load gives a lane the element's register in both planes, and a lane's accumulators hold
//! both parts of its outputs.
//!
//! Per chunk of `bk` complex k:
//! - **Copy**: `cp.async` of each element (8 bytes), or of pairs along the stored lines (16
//!   bytes, where the host found them aligned: `CgemmParams::a_pairs`), in stored order
//!   (coalesced for any layout; each thread's sources formed once, [`MmaTile::copy_step`]),
//!   into a stage that keeps the stored layout: lines along the contiguous extent, padded to
//!   `≡ 4 (mod 16)` slots (see [`MmaTile::pitch`]); zeros past the matrix or k. [`STAGES`]
//!   stages: two chunks in flight while one is multiplied, one barrier per chunk.
//! - **Multiply**: per k-step, each lane loads its fragment elements, conjugates where the op
//!   says so and splits each part into a TF32 value and its residual in registers
//!   ([`split_tf32`](crate::tf32::split_tf32)); three `mma` per real product (the residuals'
//!   product is dropped) into the chunk's own sums, which are added to the totals in f32 after the chunk (the tensor
//!   cores truncate as they accumulate), the grouped convolution's scheme (`conv::igemm`).
//!   With Gauss's three products ([`Products::Gauss`]) each element's parts and their sum are
//!   split, and the three products `a.re·b.re`, `a.im·b.im` and `(a.re + a.im)·(b.re + b.im)`
//!   go to three sums that make the parts after the chunk.
//! - **Output**: straight from the accumulators: per store, 8 lanes write 64 contiguous
//!   bytes of a column.
//!
//! A block computes a `bm x bn` tile of one matrix with `warp_rows x warp_cols` warps. The
//! one-chunk tiles ([`MmaTile::one_chunk`], for k up to their chunk) copy all of k into one
//! stage and multiply into the totals: no ring and no chunk sums, so fewer registers (32 x 32:
//! 63 instead of 95) and more blocks per SM. The
//! host's tests run the copy, fragment and output math here against an f64 reference.

use super::{BlockCoords, CgemmParams};

/// Stages of chunks in shared memory: two in flight while one is multiplied. A block of a
/// problem with fewer chunks gets only as many (`CgemmShape::stages`): stage `s` is touched
/// only by chunk `s` and those `STAGES` later.
pub const STAGES: u32 = 3;

/// A `Tensor` variant's warps, accumulator tiles and k-chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmaTile {
    /// Warps along C's rows and along its columns.
    pub warp_rows: u32,
    pub warp_cols: u32,
    /// m16n8 accumulator pairs (re, im) per warp along the rows (16 complex rows each) and the
    /// columns (8 each).
    pub m_tiles: u32,
    pub n_tiles: u32,
    /// Complex k per chunk: a multiple of 8 (one m16n8k8 step).
    pub bk: u32,
    /// The block stages all of k as one chunk (the variant takes only `k ≤ bk`): one stage,
    /// and the mma sums are the totals, which frees the chunk sums' registers for more blocks
    /// per SM.
    pub one_chunk: bool,
    /// The real products behind each complex one.
    pub products: Products,
    /// Stages of a persistent block's ring (0: none). With a ring (one-chunk tiles, sm_90 only)
    /// the block walks its items grid-stride: one more warp, the producer, fills each stage by
    /// bulk copies of whole stored lines that complete on the stage's `full` mbarrier, while
    /// the other warps only multiply and free the stage on its `empty` one. The copies cost the
    /// multiplying warps no registers and no issue slots; bulk copies cannot fill zeros, so the
    /// host gives these tiles only interior items whose lines start 16-byte aligned.
    pub ring: u32,
}

/// The real products behind a complex one, `a·b`, in a `Tensor` variant (each three `mma`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Products {
    /// Four: `re = a.re·b.re - a.im·b.im` and `im = a.re·b.im + a.im·b.re`.
    #[default]
    Four,
    /// Gauss's three (3M): `p = a.re·b.re`, `q = a.im·b.im` and `s = (a.re + a.im)·(b.re +
    /// b.im)`, summed apart, then `re = p - q` and `im = s - (p + q)`. A quarter fewer `mma` for
    /// three splits per element instead of two; `im` comes from sums up to twice the size of
    /// the products' magnitude, so its error bound is about twice the standard one
    /// (`host/cgemm.rs`, `tolerance`).
    Gauss,
}

impl MmaTile {
    /// Warps along rows and columns, m16n8 tiles per warp along each, k per chunk; all of k in
    /// one chunk; Gauss's three products; stages of a ring (0: none).
    pub const fn new(
        [warp_rows, warp_cols, m_tiles, n_tiles, bk]: [u32; 5],
        one_chunk: bool,
        gauss: bool,
        ring: u32,
    ) -> MmaTile {
        let products = if gauss { Products::Gauss } else { Products::Four };
        MmaTile { warp_rows, warp_cols, m_tiles, n_tiles, bk, one_chunk, products, ring }
    }

    /// Threads that multiply: the warps of the tile.
    pub const fn threads(&self) -> u32 {
        32 * self.warp_rows * self.warp_cols
    }

    /// Threads per block: the multiplying warps and, with a ring, the producer warp.
    pub const fn block_threads(&self) -> u32 {
        self.threads() + if self.ring > 0 { 32 } else { 0 }
    }

    /// Complex rows and columns of C per block.
    pub const fn bm(&self) -> u32 {
        16 * self.warp_rows * self.m_tiles
    }

    pub const fn bn(&self) -> u32 {
        8 * self.warp_cols * self.n_tiles
    }

    pub const fn k_steps(&self) -> u32 {
        self.bk / 8
    }

    /// Slots (complex) between the lines of a staged operand whose lines run `line` long:
    /// `≡ 4 or 12 (mod 16)` for the multiples of 8 used here, so the 16 lanes of a half-warp's
    /// fragment load (4 lines, 4 along each) fall on 16 distinct 8-byte bank pairs.
    pub const fn pitch(line: u32) -> u32 {
        line + 4
    }

    /// Slots of A's chunk (`bm x bk`) as stored: `kc`, k contiguous.
    pub const fn a_slots(&self, kc: bool) -> u32 {
        if kc { self.bm() * Self::pitch(self.bk) } else { self.bk * Self::pitch(self.bm()) }
    }

    pub const fn b_slots(&self, kc: bool) -> u32 {
        if kc { self.bn() * Self::pitch(self.bk) } else { self.bk * Self::pitch(self.bn()) }
    }

    /// Slot of A's element `(r, l)` (row of the tile, k of the chunk) in a stage.
    #[inline(always)]
    pub const fn a_slot(&self, r: u32, l: u32, kc: bool) -> u32 {
        if kc { r * Self::pitch(self.bk) + l } else { l * Self::pitch(self.bm()) + r }
    }

    /// Slot of B's element `(l, col)` in a stage: after A's chunk.
    #[inline(always)]
    pub const fn b_slot(&self, l: u32, col: u32, [a_kc, b_kc]: [bool; 2]) -> u32 {
        self.a_slots(a_kc) + if b_kc { col * Self::pitch(self.bk) + l } else { l * Self::pitch(self.bn()) + col }
    }

    /// A stage's slots for the stored layouts `[A, B]` (k contiguous in each).
    pub const fn stage_slots(&self, [a_kc, b_kc]: [bool; 2]) -> u32 {
        self.a_slots(a_kc) + self.b_slots(b_kc)
    }

    /// Stored lines of an operand's chunk, each one bulk copy of a ring tile: A's rows (B's
    /// columns) where k is contiguous (`kc`), else its `bk` lines along the extent.
    pub const fn ring_lines(&self, is_a: bool, kc: bool) -> u32 {
        if kc { if is_a { self.bm() } else { self.bn() } } else { self.bk }
    }

    /// Bytes of one stored line of an operand's chunk.
    pub const fn ring_line_bytes(&self, is_a: bool, kc: bool) -> u32 {
        8 * if kc {
            self.bk
        } else if is_a {
            self.bm()
        } else {
            self.bn()
        }
    }

    /// Bytes a ring stage's bulk copies bring: both operands' chunks, without the padding.
    pub const fn ring_stage_bytes(&self) -> u32 {
        8 * self.bk * (self.bm() + self.bn())
    }

    /// Line `line` of an operand's chunk (`kc`: k contiguous; `[AK, BK]` the stored layouts):
    /// its first element, `(index, l)` (A's row or B's column in the tile, and k), and the slot
    /// it starts at in a stage. The padded pitch keeps every line's start 16-byte aligned.
    #[inline(always)]
    pub const fn ring_line(&self, line: u32, is_a: bool, kc: [bool; 2]) -> ((u32, u32), u32) {
        let first = if kc[!is_a as usize] { (line, 0) } else { (0, line) };
        let slot = if is_a { self.a_slot(first.0, first.1, kc[0]) } else { self.b_slot(first.1, first.0, kc) };
        (first, slot)
    }

    /// Copies per thread per chunk of an operand, of single elements or of `pairs` (the tiles
    /// keep each operand's chunk a multiple of the threads; pairs only where
    /// [`Self::pairs_fit`]).
    pub const fn copies(&self, is_a: bool, pairs: bool) -> u32 {
        self.bk * if is_a { self.bm() } else { self.bn() } / self.threads() / (1 + pairs as u32)
    }

    /// Copy `e` of a chunk, in stored order (A's `bm x bk`, then B's `bk x bn`): its row (A's)
    /// or column (B's) in the tile and its l in the chunk.
    #[inline(always)]
    pub const fn copy_element(&self, e: u32, is_a: bool, kc: bool) -> (u32, u32) {
        if is_a {
            along(e, self.bm(), self.bk, kc, false)
        } else {
            along(e - self.bk * self.bm(), self.bn(), self.bk, kc, false)
        }
    }

    /// Thread `thread`'s copy `u` of an operand (`u` counted within it), of a single element or
    /// of a pair along the stored line (the place of its first element), as its first copy's
    /// place plus a step: the two add up to the copy's place in stored order
    /// ([`Self::copy_element`] for single elements) because each operand's line (`bk` where k is
    /// contiguous, else its extent), in elements or pairs, divides the threads or is divided by
    /// them (tested), so the kernel forms a thread's sources once and each copy's from a
    /// constant.
    #[inline(always)]
    pub const fn copy_first(&self, thread: u32, is_a: bool, kc: bool, pairs: bool) -> (u32, u32) {
        along(thread, if is_a { self.bm() } else { self.bn() }, self.bk, kc, pairs)
    }

    #[inline(always)]
    pub const fn copy_step(&self, u: u32, is_a: bool, kc: bool, pairs: bool) -> (u32, u32) {
        along(u * self.threads(), if is_a { self.bm() } else { self.bn() }, self.bk, kc, pairs)
    }

    /// Whether an operand's chunk splits into 16-byte copies of two elements along its lines
    /// (`kc`: k contiguous) in whole rounds of the threads, each a thread's first plus a
    /// constant step as for single elements.
    pub const fn pairs_fit(&self, is_a: bool, kc: bool) -> bool {
        let extent = if is_a { self.bm() } else { self.bn() };
        let (pairs, line) = (self.bk * extent / 2, if kc { self.bk } else { extent } / 2);
        let threads = self.threads();
        pairs.is_multiple_of(threads) && (threads.is_multiple_of(line) || line.is_multiple_of(threads))
    }

    /// The warp's place among the block's warps: (row, column).
    #[inline(always)]
    pub const fn warp_place(&self, warp: u32) -> (u32, u32) {
        (warp % self.warp_rows, warp / self.warp_rows)
    }

    /// A's element `(r, l)` behind register `e` of lane `lane`'s A fragment for row tile `i`
    /// and k-step `ks` (rows `g` and `g + 8`, k `t` and `t + 4`; `g, t = lane / 4, lane % 4`).
    #[inline(always)]
    pub const fn a_fragment(&self, lane: u32, warp: u32, i: u32, ks: u32, e: u32) -> (u32, u32) {
        let (g, t) = (lane / 4, lane % 4);
        let r = self.warp_place(warp).0 * self.m_tiles * 16 + i * 16 + g + 8 * (e & 1);
        (r, ks * 8 + t + 4 * (e >> 1))
    }

    /// B's element `(l, col)` behind register `e` of lane `lane`'s B fragment for column tile
    /// `j` and k-step `ks` (k `t` and `t + 4`, column `g`).
    #[inline(always)]
    pub const fn b_fragment(&self, lane: u32, warp: u32, j: u32, ks: u32, e: u32) -> (u32, u32) {
        let (g, t) = (lane / 4, lane % 4);
        (ks * 8 + t + 4 * e, self.warp_place(warp).1 * self.n_tiles * 8 + j * 8 + g)
    }

    /// The output `(r, col)` of the block's tile behind element `e` of lane `lane`'s
    /// accumulators `(i, j)` (rows `g`, `g + 8`, columns `2t`, `2t + 1`).
    #[inline(always)]
    pub const fn acc_place(&self, lane: u32, warp: u32, i: u32, j: u32, e: u32) -> (u32, u32) {
        let (g, t) = (lane / 4, lane % 4);
        let (wr, wc) = self.warp_place(warp);
        (wr * self.m_tiles * 16 + i * 16 + g + 8 * (e >> 1), wc * self.n_tiles * 8 + j * 8 + 2 * t + (e & 1))
    }
}

/// Where a ring tile's block is in its ring: the stage of its current item and the parity of
/// the mbarrier phases that item waits for (stage `s` of the `n`-th item is `n mod stages`,
/// parity `(n / stages) mod 2`). The producer waits for the opposite parity on `empty`: a
/// fresh mbarrier counts the phase before its first as complete, so the first round of stages
/// is free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingSlot {
    pub stage: u32,
    pub parity: u32,
}

impl RingSlot {
    /// The parity the multiplying warps wait for on the stage's `full` mbarrier.
    #[inline(always)]
    pub const fn filled(self) -> u32 {
        self.parity
    }

    /// The parity the producer waits for on the stage's `empty` mbarrier before refilling it.
    #[inline(always)]
    pub const fn freed(self) -> u32 {
        self.parity ^ 1
    }

    /// The slot of the block's next item.
    #[inline(always)]
    pub const fn next(self, stages: u32) -> RingSlot {
        if self.stage + 1 == stages {
            RingSlot { stage: 0, parity: self.parity ^ 1 }
        } else {
            RingSlot { stage: self.stage + 1, parity: self.parity }
        }
    }
}

/// Element `e` of an `extent x bk` chunk (rows, or columns, by l) in stored order: k first
/// where `k_contiguous`, else the extent; or with `pairs`, pair `e` along those lines (the
/// place of its first element, the second being the next along the line).
#[inline(always)]
const fn along(e: u32, extent: u32, bk: u32, k_contiguous: bool, pairs: bool) -> (u32, u32) {
    let width = 1 + pairs as u32;
    if k_contiguous {
        (e / (bk / width), width * (e % (bk / width)))
    } else {
        (width * (e % (extent / width)), e / (extent / width))
    }
}

/// One thread's copies of one operand of a `Tensor` block: where its first copy (at
/// [`MmaTile::copy_first`]) reads, from which each copy's source follows. Byte addresses (from
/// the operand's base address), so that a copy's costs one multiply-add.
#[derive(Clone, Copy, Debug)]
pub struct TensorCopies {
    /// Address of the first copy's element at `l0 = 0`.
    origin: u64,
    /// That element's row (A) or column (B) in the matrix, and its l.
    index: u32,
    l: u32,
    limit: u32,
    k: u32,
    /// Bytes between the operand's lines.
    line_bytes: u64,
}

impl TensorCopies {
    /// Address of the element `step` ([`MmaTile::copy_step`]) past the first copy's, in the
    /// chunk at `l0`, of an operand stored with k contiguous or not; `None` past the matrix or
    /// k (a zero).
    #[inline(always)]
    pub fn source(&self, kc: bool, (d_index, d_l): (u32, u32), l0: u32) -> Option<u64> {
        let (index, l) = (self.index + d_index, self.l + d_l + l0);
        let (di, dl) = (d_index as u64, (d_l + l0) as u64);
        let step = if kc { 8 * dl + di * self.line_bytes } else { 8 * di + dl * self.line_bytes };
        (index < self.limit && l < self.k).then_some(self.origin + step)
    }

    /// [`Self::source`] for the pair whose first element is `step` past the first copy's:
    /// its address and the bytes that lie inside the matrix and k (16, 8 or 0).
    #[inline(always)]
    pub fn pair_source(&self, kc: bool, step: (u32, u32), l0: u32) -> (Option<u64>, u32) {
        let (index, l) = (self.index + step.0, self.l + step.1 + l0);
        let second = if kc { l + 1 < self.k } else { index + 1 < self.limit };
        let source = self.source(kc, step, l0);
        (
            source,
            if source.is_none() {
                0
            } else if second {
                16
            } else {
                8
            },
        )
    }
}

impl CgemmParams {
    /// The copies of A (`is_a`, at address `base`) or B, stored with k contiguous or not, of
    /// the thread whose first copy is `(index, l)` of the tile at `at`.
    #[inline(always)]
    pub fn tensor_copies(
        &self,
        is_a: bool,
        kc: bool,
        base: u64,
        at: BlockCoords,
        (index, l): (u32, u32),
    ) -> TensorCopies {
        let batch = self.batch_base + at.first as u64;
        let (first, limit, ld, stride) =
            if is_a { (at.row0, self.m, self.lda, self.stride_a) } else { (at.col0, self.n, self.ldb, self.stride_b) };
        let index = first + index;
        let within = if kc { l as u64 + index as u64 * ld as u64 } else { index as u64 + l as u64 * ld as u64 };
        let origin = base + 8 * (batch * stride + within);
        TensorCopies { origin, index, l, limit, k: self.k, line_bytes: 8 * ld as u64 }
    }
}

#[cfg(target_arch = "nvptx64")]
pub(super) mod device {
    use super::super::kernel::epilogue_at;
    use super::super::{BlockCoords, CgemmParams, Complex32, Op};
    use super::{MmaTile, RingSlot, STAGES};
    use crate::prelude::*;
    use crate::tf32::split_tf32;

    const SIGN: u32 = 0x8000_0000;

    /// One sum's m16n8 accumulators of a warp: `[row tile][column tile][register]`.
    type Sums<const MT: usize, const NT: usize> = [[[f32; 4]; NT]; MT];

    /// A fragment as TF32 values and their residuals.
    type Split<const N: usize> = ([u32; N], [u32; N]);

    /// `acc + x1·y1 + x2·y2`, three `mma` per product: the small cross terms first, while the
    /// sum is still small.
    #[inline(always)]
    fn two_products(
        (x1, x1_small): Split<4>,
        (y1, y1_small): Split<2>,
        (x2, x2_small): Split<4>,
        (y2, y2_small): Split<2>,
        acc: [f32; 4],
    ) -> [f32; 4] {
        let mut acc = mma_tf32_m16n8k8(x1_small, y1, acc);
        acc = mma_tf32_m16n8k8(x1, y1_small, acc);
        acc = mma_tf32_m16n8k8(x2_small, y2, acc);
        acc = mma_tf32_m16n8k8(x2, y2_small, acc);
        acc = mma_tf32_m16n8k8(x1, y1, acc);
        mma_tf32_m16n8k8(x2, y2, acc)
    }

    /// `acc + x·y`, three `mma`, the small cross terms first.
    #[inline(always)]
    fn product((x, x_small): Split<4>, (y, y_small): Split<2>, acc: [f32; 4]) -> [f32; 4] {
        let acc = mma_tf32_m16n8k8(x_small, y, acc);
        mma_tf32_m16n8k8(x, y, mma_tf32_m16n8k8(x, y_small, acc))
    }

    /// One pair's copy to `slot`: `bytes` of `source` (16, or 0 for two zeros) by one 16-byte
    /// copy; 8 bytes and a zero by two 8-byte copies, so that nothing past the first element is
    /// read.
    #[inline(always)]
    fn copy_pair(slot: u32, source: u64, bytes: u32) {
        if bytes == 8 {
            cp_async_f32x2(slot, source, 8);
            cp_async_f32x2(slot + 8, source, 0);
        } else {
            cp_async_f32x4(slot, source, bytes);
        }
    }

    /// One staged chunk (at `stage`) multiplied into `sums`: per k-step, each lane's fragments
    /// loaded, conjugated where the op says so and split, then three `mma` per real product.
    /// `sums` are the parts (re, im; the third unused) or, with `GAUSS`, Gauss's three products
    /// (see [`parts`]).
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn multiply<const MT: usize, const NT: usize, const AK: bool, const BK: bool, const GAUSS: bool>(
        t: MmaTile,
        stage: u32,
        (lane, warp): (u32, u32),
        (conj_a, conj_b): (u32, u32),
        sums: &mut [Sums<MT, NT>; 3],
    ) {
        if GAUSS {
            return multiply_gauss::<MT, NT, AK, BK>(t, stage, (lane, warp), (conj_a, conj_b), sums);
        }
        for ks in 0..t.k_steps() {
            // Values and residuals of every row tile's A fragment, per part.
            let (mut x_re, mut x_re_small) = ([[0u32; 4]; MT], [[0u32; 4]; MT]);
            let (mut x_im, mut x_im_small) = ([[0u32; 4]; MT], [[0u32; 4]; MT]);
            for i in 0..MT {
                for e in 0..4 {
                    let (r, l) = t.a_fragment(lane, warp, i as u32, ks, e as u32);
                    let [re, im] = ld_shared_f32x2(stage + 8 * t.a_slot(r, l, AK));
                    (x_re[i][e], x_re_small[i][e]) = split_tf32(re);
                    (x_im[i][e], x_im_small[i][e]) = split_tf32(f32::from_bits(im.to_bits() ^ conj_a));
                }
            }
            for j in 0..NT {
                let (mut y_re, mut y_re_small) = ([0u32; 2], [0u32; 2]);
                let (mut y_im, mut y_im_small) = ([0u32; 2], [0u32; 2]);
                for e in 0..2 {
                    let (l, col) = t.b_fragment(lane, warp, j as u32, ks, e as u32);
                    let [re, im] = ld_shared_f32x2(stage + 8 * t.b_slot(l, col, [AK, BK]));
                    (y_re[e], y_re_small[e]) = split_tf32(re);
                    (y_im[e], y_im_small[e]) = split_tf32(f32::from_bits(im.to_bits() ^ conj_b));
                }
                // -b.im, for the real part: negation is exact on value and residual alike.
                let y_neg = [y_im[0] ^ SIGN, y_im[1] ^ SIGN];
                let y_neg_small = [y_im_small[0] ^ SIGN, y_im_small[1] ^ SIGN];
                for i in 0..MT {
                    let (re, im) = ((x_re[i], x_re_small[i]), (x_im[i], x_im_small[i]));
                    sums[0][i][j] = two_products(re, (y_re, y_re_small), im, (y_neg, y_neg_small), sums[0][i][j]);
                    sums[1][i][j] = two_products(re, (y_im, y_im_small), im, (y_re, y_re_small), sums[1][i][j]);
                }
            }
        }
    }

    /// [`multiply`] with Gauss's three products into `sums`: each fragment element's parts and
    /// their sum split, then three `mma` per product.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn multiply_gauss<const MT: usize, const NT: usize, const AK: bool, const BK: bool>(
        t: MmaTile,
        stage: u32,
        (lane, warp): (u32, u32),
        (conj_a, conj_b): (u32, u32),
        sums: &mut [Sums<MT, NT>; 3],
    ) {
        // [re, im, re + im] of an element, as TF32 values and residuals.
        let split = |[re, im]: [f32; 2], conj: u32| {
            let im = f32::from_bits(im.to_bits() ^ conj);
            let ((v0, r0), (v1, r1), (v2, r2)) = (split_tf32(re), split_tf32(im), split_tf32(re + im));
            ([v0, v1, v2], [r0, r1, r2])
        };
        for ks in 0..t.k_steps() {
            // Per row tile and product: [row tile][product][register].
            let (mut x, mut x_small) = ([[[0u32; 4]; 3]; MT], [[[0u32; 4]; 3]; MT]);
            for i in 0..MT {
                for e in 0..4 {
                    let (r, l) = t.a_fragment(lane, warp, i as u32, ks, e as u32);
                    let (big, small) = split(ld_shared_f32x2(stage + 8 * t.a_slot(r, l, AK)), conj_a);
                    for v in 0..3 {
                        (x[i][v][e], x_small[i][v][e]) = (big[v], small[v]);
                    }
                }
            }
            for j in 0..NT {
                let (mut y, mut y_small) = ([[0u32; 2]; 3], [[0u32; 2]; 3]);
                for e in 0..2 {
                    let (l, col) = t.b_fragment(lane, warp, j as u32, ks, e as u32);
                    let (big, small) = split(ld_shared_f32x2(stage + 8 * t.b_slot(l, col, [AK, BK])), conj_b);
                    for v in 0..3 {
                        (y[v][e], y_small[v][e]) = (big[v], small[v]);
                    }
                }
                for i in 0..MT {
                    for v in 0..3 {
                        sums[v][i][j] = product((x[i][v], x_small[i][v]), (y[v], y_small[v]), sums[v][i][j]);
                    }
                }
            }
        }
    }

    /// The parts `[re, im]` of [`multiply`]'s `sums`: the first two as they are, or with
    /// `GAUSS` `re = p - q` and `im = s - (p + q)` from Gauss's `[p, q, s]`.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn parts<const MT: usize, const NT: usize, const GAUSS: bool>(sums: &[Sums<MT, NT>; 3]) -> [Sums<MT, NT>; 2] {
        if !GAUSS {
            return [sums[0], sums[1]];
        }
        let mut out = [[[[0.0f32; 4]; NT]; MT]; 2];
        for i in 0..MT {
            for j in 0..NT {
                for e in 0..4 {
                    let (p, q, s) = (sums[0][i][j][e], sums[1][i][j][e], sums[2][i][j][e]);
                    out[0][i][j][e] = p - q;
                    out[1][i][j][e] = s - (p + q);
                }
            }
        }
        out
    }

    /// One `bm x bn` tile of one matrix per block (module docs); `AK` / `BK`: A / B stored
    /// with k contiguous.
    ///
    /// # Safety
    /// `p` from the host's launcher: buffers that hold every offset it forms, 8-byte aligned,
    /// stored as `AK` and `BK` say, and the tile's shared memory.
    #[inline(always)]
    pub unsafe fn tensor<
        const WR: usize,
        const WC: usize,
        const MT: usize,
        const NT: usize,
        const KB: usize,
        const ONE: bool,
        const GAUSS: bool,
        const AK: bool,
        const BK: bool,
    >(
        p: &CgemmParams,
    ) {
        // Two bodies, so that each holds only its own copies' places in registers.
        if p.a_pairs != 0 && p.b_pairs != 0 {
            unsafe { tensor_body::<WR, WC, MT, NT, KB, ONE, GAUSS, AK, BK, true>(p) }
        } else {
            unsafe { tensor_body::<WR, WC, MT, NT, KB, ONE, GAUSS, AK, BK, false>(p) }
        }
    }

    /// [`tensor`], copying element pairs where `PAIRS` (both operands' pairs 16-byte aligned).
    ///
    /// # Safety
    /// As [`tensor`]'s, and `PAIRS` only where `p.a_pairs` and `p.b_pairs` say so.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn tensor_body<
        const WR: usize,
        const WC: usize,
        const MT: usize,
        const NT: usize,
        const KB: usize,
        const ONE: bool,
        const GAUSS: bool,
        const AK: bool,
        const BK: bool,
        const PAIRS: bool,
    >(
        p: &CgemmParams,
    ) {
        let t = MmaTile::new([WR as u32, WC as u32, MT as u32, NT as u32, KB as u32], ONE, GAUSS, 0);
        let item = block_idx_x();
        if item >= p.items {
            return;
        }
        let at = p.item_coords(item);
        let thread = thread_idx_x();
        let (lane, warp) = (thread % 32, thread / 32);
        let (a, b, c, smem) = (to_global(p.a), to_global(p.b), to_global(p.c), smem_base());
        let stage_bytes = 8 * t.stage_slots([AK, BK]);
        let chunks = p.chunks;

        // Each copy lands at its element's (pair's) slot; its source and slot follow from the
        // thread's first copy by constants. Pairs where the launch allows them for both
        // operands (`PAIRS`) and an operand's chunk splits into them.
        let (a_pairs, b_pairs) = (PAIRS && t.pairs_fit(true, AK), PAIRS && t.pairs_fit(false, BK));
        let (a_first, b_first) = (t.copy_first(thread, true, AK, a_pairs), t.copy_first(thread, false, BK, b_pairs));
        let a_copies = p.tensor_copies(true, AK, a, at, a_first);
        let b_copies = p.tensor_copies(false, BK, b, at, b_first);
        let copy = #[inline(always)]
        |stage: u32, l0: u32| {
            let base = smem + stage * stage_bytes;
            for u in 0..t.copies(true, a_pairs) {
                let step = t.copy_step(u, true, AK, a_pairs);
                let slot = base + 8 * t.a_slot(a_first.0 + step.0, a_first.1 + step.1, AK);
                if a_pairs {
                    let (source, bytes) = a_copies.pair_source(AK, step, l0);
                    copy_pair(slot, source.unwrap_or(a), bytes);
                } else {
                    let source = a_copies.source(AK, step, l0);
                    cp_async_f32x2(slot, source.unwrap_or(a), if source.is_some() { 8 } else { 0 });
                }
            }
            for u in 0..t.copies(false, b_pairs) {
                let step = t.copy_step(u, false, BK, b_pairs);
                let slot = base + 8 * t.b_slot(b_first.1 + step.1, b_first.0 + step.0, [AK, BK]);
                if b_pairs {
                    let (source, bytes) = b_copies.pair_source(BK, step, l0);
                    copy_pair(slot, source.unwrap_or(a), bytes);
                } else {
                    let source = b_copies.source(BK, step, l0);
                    cp_async_f32x2(slot, source.unwrap_or(a), if source.is_some() { 8 } else { 0 });
                }
            }
        };

        let conj = |op: u32| if op == Op::C as u32 { SIGN } else { 0 };
        let (conj_a, conj_b) = (conj(p.op_a), conj(p.op_b));
        let zeros = [[[0.0f32; 4]; NT]; MT];
        let acc = if ONE {
            copy(0, 0);
            cp_async_commit();
            cp_async_wait_group::<0>();
            sync_threads();
            let mut sums = [zeros; 3];
            multiply::<MT, NT, AK, BK, GAUSS>(t, smem, (lane, warp), (conj_a, conj_b), &mut sums);
            parts::<MT, NT, GAUSS>(&sums)
        } else {
            let mut acc = [zeros; 2];
            // STAGES - 1 chunks in flight; one commit per chunk, empty or not, keeps the group
            // count (and so the wait below) uniform.
            for stage in 0..STAGES - 1 {
                if stage < chunks {
                    copy(stage, stage * t.bk);
                }
                cp_async_commit();
            }
            // Stages of chunk q and of chunk q + STAGES - 1 (the one before q's).
            let (mut current, mut refill) = (0, STAGES - 1);
            let mut q = 0;
            while q < chunks {
                // After the barrier chunk q has landed for every thread, and every warp is done
                // with chunk q - 1, whose stage chunk q + STAGES - 1 refills.
                cp_async_wait_group::<{ STAGES - 2 }>();
                sync_threads();
                if q + STAGES - 1 < chunks {
                    copy(refill, (q + STAGES - 1) * t.bk);
                }
                cp_async_commit();
                refill = current;

                let stage = smem + current * stage_bytes;
                current = if current + 1 == STAGES { 0 } else { current + 1 };
                let mut sums = [zeros; 3];
                multiply::<MT, NT, AK, BK, GAUSS>(t, stage, (lane, warp), (conj_a, conj_b), &mut sums);
                let part = parts::<MT, NT, GAUSS>(&sums);
                for i in 0..MT {
                    for j in 0..NT {
                        for e in 0..4 {
                            for h in 0..2 {
                                acc[h][i][j][e] += part[h][i][j][e];
                            }
                        }
                    }
                }
                q += 1;
            }
            acc
        };

        store(p, t, at, (lane, warp), c, &acc);
    }

    /// A warp's outputs of the tile at `at`, `[re, im]` accumulators, through the epilogue into
    /// C (at `c`): per store, 8 lanes write 64 contiguous bytes of a column.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    fn store<const MT: usize, const NT: usize>(
        p: &CgemmParams,
        t: MmaTile,
        at: BlockCoords,
        (lane, warp): (u32, u32),
        c: u64,
        acc: &[Sums<MT, NT>; 2],
    ) {
        let c_matrix = c + 8 * (p.batch_base + at.first as u64) * p.stride_c;
        for i in 0..MT {
            for j in 0..NT {
                for e in 0..4 {
                    let (r, col) = t.acc_place(lane, warp, i as u32, j as u32, e as u32);
                    let (row, column) = (at.row0 + r, at.col0 + col);
                    if row < p.m && column < p.n {
                        let at_c = c_matrix + 8 * (row as u64 + column as u64 * p.ldc as u64);
                        let value = epilogue_at(p, Complex32 { re: acc[0][i][j][e], im: acc[1][i][j][e] }, at_c);
                        stg_f32x2(at_c, [value.re, value.im]);
                    }
                }
            }
        }
    }

    /// A one-chunk tile's items through a ring of `RING` stages ([`MmaTile::ring`]): the
    /// block's last warp copies, the others multiply. Each stage has two mbarriers after the
    /// stages: `full` (one arrival, the producer's, and the bulk copies' bytes) and `empty` (one
    /// arrival per multiplying thread, after its last read of the stage).
    ///
    /// # Safety
    /// As [`tensor`]'s, on an sm_90 GPU, for items whose tiles lie inside their matrices with
    /// `k = KB`, both operands' lines starting 16-byte aligned (the host's `shape`), and
    /// [`MmaTile::block_threads`] threads.
    pub unsafe fn tensor_ring<
        const WR: usize,
        const WC: usize,
        const MT: usize,
        const NT: usize,
        const KB: usize,
        const GAUSS: bool,
        const AK: bool,
        const BK: bool,
        const RING: u32,
    >(
        p: &CgemmParams,
    ) {
        // Bulk copies and `expect_tx` are sm_90's; the host launches these tiles nowhere else.
        if !cfg!(target_feature = "sm_90") {
            trap();
        }
        let t = MmaTile::new([WR as u32, WC as u32, MT as u32, NT as u32, KB as u32], true, GAUSS, RING);
        if block_idx_x() >= p.items {
            return;
        }
        let thread = thread_idx_x();
        let (lane, warp) = (thread % 32, thread / 32);
        let smem = smem_base();
        let stage_bytes = 8 * t.stage_slots([AK, BK]);
        let full = smem + RING * stage_bytes;
        let empty = full + 8 * RING;
        if thread == 0 {
            for s in 0..RING {
                mbarrier_init(full + 8 * s, 1);
                mbarrier_init(empty + 8 * s, t.threads());
            }
            fence_mbarrier_init();
        }
        sync_threads();

        let mut slot = RingSlot::default();
        let mut item = block_idx_x();
        if warp == WR as u32 * WC as u32 {
            // The producer: each lane copies every 32nd line, lane 0 first raises the stage's
            // expected bytes.
            let (a, b) = (to_global(p.a), to_global(p.b));
            while item < p.items {
                mbarrier_wait_parity(empty + 8 * slot.stage, slot.freed());
                let bar = full + 8 * slot.stage;
                if lane == 0 {
                    mbarrier_arrive_expect_tx(bar, t.ring_stage_bytes());
                }
                sync_warp();
                let at = p.item_coords(item);
                let stage = smem + slot.stage * stage_bytes;
                let operand = #[inline(always)]
                |is_a: bool, base: u64, kc: bool| {
                    let mut line = lane;
                    while line < t.ring_lines(is_a, kc) {
                        let (first, at_slot) = t.ring_line(line, is_a, [AK, BK]);
                        // The tile lies inside its matrix and k: the first element exists.
                        let source = p.tensor_copies(is_a, kc, base, at, first).source(kc, (0, 0), 0).unwrap_or(base);
                        cp_async_bulk(stage + 8 * at_slot, source, t.ring_line_bytes(is_a, kc), bar);
                        line += 32;
                    }
                };
                operand(true, a, AK);
                operand(false, b, BK);
                slot = slot.next(RING);
                item += grid_dim_x();
            }
            return;
        }

        let conj = |op: u32| if op == Op::C as u32 { SIGN } else { 0 };
        let (conj_a, conj_b) = (conj(p.op_a), conj(p.op_b));
        let c = to_global(p.c);
        while item < p.items {
            let at = p.item_coords(item);
            mbarrier_wait_parity(full + 8 * slot.stage, slot.filled());
            // The lane's fragment offsets formed anew per item: hoisted out of the loop they
            // held a dozen registers across it (76 against the one-item tile's 63).
            let thread = thread_idx_x_each_time();
            let (lane, warp) = (thread % 32, thread / 32);
            let mut sums = [[[[0.0f32; 4]; NT]; MT]; 3];
            multiply::<MT, NT, AK, BK, GAUSS>(
                t,
                smem + slot.stage * stage_bytes,
                (lane, warp),
                (conj_a, conj_b),
                &mut sums,
            );
            // The fragments are in registers: the producer may refill the stage while this warp
            // stores its outputs.
            mbarrier_arrive(empty + 8 * slot.stage);
            store(p, t, at, (lane, warp), c, &parts::<MT, NT, GAUSS>(&sums));
            slot = slot.next(RING);
            item += grid_dim_x();
        }
    }
}
