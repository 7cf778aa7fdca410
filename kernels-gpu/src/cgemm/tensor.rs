//! The `Tensor` family of the batched complex GEMM: 3xTF32 on the tensor cores (`mma.sync`
//! m16n8k8, f32 accumulators), interleaved storage, any ops and stored layouts.
//!
//! A complex product is a real one twice as tall and twice as deep. Split C's rows into
//! (re, im) rows `2r + q` and k into (re, im) steps `2l + p`: column-major C and B, stored
//! interleaved, *are* those real matrices, and A becomes the real matrix of 2 x 2 blocks
//! `[[re, -im], [im, re]]`. The blocks are never built. A lane `4g + t` of the m16n8k8 A
//! fragment only reads rows of parity `q = g mod 2` and k of parity `p = t mod 2`, so every
//! value it reads is the same part of its complex element (re where `q = p`, im otherwise),
//! negated on the lanes where `q = 0, p = 1`.
//!
//! Per chunk of `bk` complex k:
//! - **Copy**: 8-byte `cp.async` of each element, in stored order (coalesced for any layout),
//!   into a raw stage at the copy's own index; zeros past the matrix or k. [`STAGES`] raw
//!   stages: the chunks in flight while one is multiplied.
//! - **Split**: each thread takes the elements it copied (its own copies are complete after
//!   its `cp.async` wait: no barrier), conjugates them where the op says so, and writes each
//!   part as a TF32 value and a TF32 residual (3xTF32) to a split stage, in the layout the
//!   fragments read: once per element, not once per warp that reads it. Two split stages.
//! - **Multiply**: the fragments come in conflict-free 8-byte loads of two of their registers
//!   (no moves before the `mma`): A's values (and residuals) of one part in `[l][row]` planes
//!   with rows `r` and `r + 4` adjacent, B's in `[col][l]` planes with `l` and `l + 2`
//!   adjacent ([`MmaTile::a_word`], [`MmaTile::b_word`]); the three larger cross products
//!   summed chunk by chunk, each chunk's sum added to the total in f32 (the tensor cores
//!   truncate as they accumulate), the same scheme as the grouped convolution's
//!   (`conv::igemm`).
//!
//! A block computes a `bm x bn` tile of one matrix with `warp_rows x warp_cols` warps. The
//! outputs go through shared memory so that each output's two parts meet and a warp stores
//! consecutive rows. The host's tests run the copy, split, fragment and output math here
//! against an f64 reference.

use super::{BlockCoords, CgemmParams};

/// Raw stages: chunks in flight. A raw stage is free again once its chunk is split, before
/// the barrier, so two keep two chunks in flight while one is multiplied.
pub const STAGES: u32 = 2;
/// Split stages: one read by the warps while the next is written.
pub const SPLIT_STAGES: u32 = 2;

/// A `Tensor` variant's warps, accumulator tiles and k-chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmaTile {
    /// Warps along C's rows and along its columns.
    pub warp_rows: u32,
    pub warp_cols: u32,
    /// m16n8 accumulators per warp along the rows (8 complex rows each) and the columns.
    pub m_tiles: u32,
    pub n_tiles: u32,
    /// Complex k per chunk: a multiple of 4 (an m16n8k8 step covers 4).
    pub bk: u32,
}

impl MmaTile {
    pub const fn threads(&self) -> u32 {
        32 * self.warp_rows * self.warp_cols
    }

    /// Complex rows and columns of C per block.
    pub const fn bm(&self) -> u32 {
        8 * self.warp_rows * self.m_tiles
    }

    pub const fn bn(&self) -> u32 {
        8 * self.warp_cols * self.n_tiles
    }

    pub const fn k_steps(&self) -> u32 {
        self.bk / 4
    }

    /// Elements a chunk copies (A's `bm x bk`, then B's `bk x bn`): a raw stage's slots.
    pub const fn raw_elements(&self) -> u32 {
        self.bk * (self.bm() + self.bn())
    }

    /// Words between k rows of one of A's split planes: `≡ 8 (mod 32)`, so that a fragment
    /// load's two k rows fall on other banks.
    pub const fn a_pitch(&self) -> u32 {
        self.bm() + (40 - self.bm() % 32) % 32
    }

    /// Words of one of A's four planes (value or residual of re or im): `≡ 16 (mod 32)`, so
    /// that the lanes reading re and those reading im fall on other banks.
    pub const fn a_plane(&self) -> u32 {
        self.bk * self.a_pitch() + 16
    }

    /// Words between columns of one of B's two planes (value, residual): both parts of the
    /// chunk's k, `≡ 8 (mod 32)`.
    pub const fn b_pitch(&self) -> u32 {
        2 * self.bk + (40 - 2 * self.bk % 32) % 32
    }

    /// A split stage's words.
    pub const fn split_words(&self) -> u32 {
        4 * self.a_plane() + 2 * self.bn() * self.b_pitch()
    }

    /// Complex elements between columns of the output tile staged for the stores: `4 · c_pitch
    /// ≡ 8 (mod 32)` words, so a warp's accumulator stores fall on 32 banks.
    pub const fn c_pitch(&self) -> u32 {
        self.bm() + 2
    }

    /// Byte offset of split stage `s`: after the raw stages.
    pub const fn split_stage(&self, s: u32) -> u32 {
        8 * STAGES * self.raw_elements() + 4 * s * self.split_words()
    }

    pub const fn smem_bytes(&self) -> u32 {
        let stages = self.split_stage(SPLIT_STAGES);
        let out = 8 * self.bn() * self.c_pitch();
        if stages > out { stages } else { out }
    }

    /// Copies per thread per chunk (the tiles keep `raw_elements` a multiple of the threads).
    pub const fn copies(&self) -> u32 {
        self.raw_elements() / self.threads()
    }

    /// Copies per thread of A's chunk: copy `u < a_copies` of every thread is A's (the tiles
    /// keep A's `bm x bk` elements a multiple of the threads).
    pub const fn a_copies(&self) -> u32 {
        self.bk * self.bm() / self.threads()
    }

    /// Copy `e` of a chunk, in stored order (A's `bm x bk`, then B's `bk x bn`): its row (A's)
    /// or column (B's) in the tile and its l in the chunk. `k_contiguous`: whether the
    /// operand is stored with k contiguous.
    #[inline(always)]
    pub const fn copy_element(&self, e: u32, is_a: bool, k_contiguous: bool) -> (u32, u32) {
        if is_a {
            along(e, self.bm(), self.bk, k_contiguous)
        } else {
            along(e - self.bk * self.bm(), self.bn(), self.bk, k_contiguous)
        }
    }

    /// Word of a split stage holding part `part` (0 re, 1 im) of A's element `(r, l)`, its
    /// TF32 value (`residual` false) or residual: planes `[l][a_pitch]`, rows `r` and `r + 4`
    /// of each 8 adjacent.
    #[inline(always)]
    pub const fn a_word(&self, r: u32, l: u32, part: u32, residual: bool) -> u32 {
        let plane = 2 * residual as u32 + part;
        plane * self.a_plane() + l * self.a_pitch() + 8 * (r / 8) + 2 * (r % 4) + (r % 8) / 4
    }

    /// The same for B's element `(l, col)`: planes `[col][b_pitch]`, each k-step's 4 l of both
    /// parts as `(l mod 2, part)` pairs of `l` and `l + 2`.
    #[inline(always)]
    pub const fn b_word(&self, l: u32, col: u32, part: u32, residual: bool) -> u32 {
        let plane = 4 * self.a_plane() + residual as u32 * self.bn() * self.b_pitch();
        plane + col * self.b_pitch() + 8 * (l / 4) + 2 * (2 * (l % 2) + part) + (l % 4) / 2
    }

    /// The warp's place among the block's warps: (row, column).
    #[inline(always)]
    pub const fn warp_place(&self, warp: u32) -> (u32, u32) {
        (warp % self.warp_rows, warp / self.warp_rows)
    }

    /// The first word of the 8-byte load of lane `lane`'s A fragment registers `2h` and
    /// `2h + 1` (values, or residuals) for accumulator row tile `i` and k-step `ks`: rows `g`
    /// and `g + 8` are complex rows `g / 2` and `g / 2 + 4`, k `t` (`h = 0`) and `t + 4`
    /// (`h = 1`) are l `t / 2` and `t / 2 + 2`, part `(g + t) mod 2`.
    #[inline(always)]
    pub const fn a_load(&self, lane: u32, warp: u32, i: u32, ks: u32, h: u32, residual: bool) -> u32 {
        let (g, t) = (lane / 4, lane % 4);
        let r = self.warp_place(warp).0 * self.m_tiles * 8 + i * 8 + g / 2;
        self.a_word(r, 4 * ks + t / 2 + 2 * h, (g ^ t) & 1, residual)
    }

    /// Whether lane `lane` negates the A values it reads: the `-im` of `[[re, -im], [im, re]]`
    /// (row parity 0, k parity 1).
    #[inline(always)]
    pub const fn a_negated(lane: u32) -> bool {
        (lane / 4) & 1 == 0 && lane & 1 == 1
    }

    /// The first word of the 8-byte load of lane `lane`'s B fragment (values, or residuals)
    /// for column tile `j`, k-step `ks`: k `t` and `t + 4` are part `t mod 2` of l `t / 2`
    /// and `t / 2 + 2`, of column `g`.
    #[inline(always)]
    pub const fn b_load(&self, lane: u32, warp: u32, j: u32, ks: u32, residual: bool) -> u32 {
        let (g, t) = (lane / 4, lane % 4);
        let col = self.warp_place(warp).1 * self.n_tiles * 8 + j * 8 + g;
        self.b_word(4 * ks + t / 2, col, t & 1, residual)
    }

    /// Where element `e` of lane `lane`'s accumulator `(i, j)` belongs: complex row, part
    /// (0 re, 1 im) and column in the block's tile.
    #[inline(always)]
    pub const fn acc_place(&self, lane: u32, warp: u32, i: u32, j: u32, e: u32) -> (u32, u32, u32) {
        let (g, t) = (lane / 4, lane % 4);
        let (wr, wc) = self.warp_place(warp);
        let row = wr * self.m_tiles * 16 + i * 16 + g + 8 * (e >> 1);
        let col = wc * self.n_tiles * 8 + j * 8 + 2 * t + (e & 1);
        (row / 2, row & 1, col)
    }

    /// Word of part `part` of the staged output `(r, col)`.
    #[inline(always)]
    pub const fn c_word(&self, r: u32, part: u32, col: u32) -> u32 {
        2 * (col * self.c_pitch() + r) + part
    }
}

/// `v` as the tensor cores' TF32 value (rounded to nearest, ties away from zero: the add
/// carries into the kept bits exactly when the dropped ones are at least half) and the
/// residual `v - value` (exact in f32), whose dropped bits `mma` ignores after the same
/// rounding add. Non-finite `v` gives a NaN residual.
#[inline(always)]
pub fn split_tf32(v: f32) -> (u32, u32) {
    let big = v.to_bits().wrapping_add(0x1000) & 0xffff_e000;
    let small = v - f32::from_bits(big);
    (big, small.to_bits().wrapping_add(0x1000))
}

/// Element `e` of an `extent x bk` chunk (rows, or columns, by l) in stored order: k first
/// where `k_contiguous`, else the extent.
#[inline(always)]
const fn along(e: u32, extent: u32, bk: u32, k_contiguous: bool) -> (u32, u32) {
    if k_contiguous { (e / bk, e % bk) } else { (e % extent, e / extent) }
}

impl CgemmParams {
    /// Offset in A (`is_a`) or B of the element at `index` (row of A, column of B) and `l` of
    /// the chunk at `l0` of the item at `at`; `None` past the matrix or k (a zero).
    #[inline(always)]
    pub fn tensor_source(&self, is_a: bool, index: u32, l: u32, at: BlockCoords, l0: u32) -> Option<u64> {
        let batch = self.batch_base + at.first as u64;
        let (first, limit, ld, stride, k_contiguous) = if is_a {
            (at.row0, self.m, self.lda, self.stride_a, self.op_a != super::Op::N as u32)
        } else {
            (at.col0, self.n, self.ldb, self.stride_b, self.op_b == super::Op::N as u32)
        };
        let (index, l) = (first + index, l0 + l);
        let within =
            if k_contiguous { l as u64 + index as u64 * ld as u64 } else { index as u64 + l as u64 * ld as u64 };
        (index < limit && l < self.k).then_some(batch * stride + within)
    }
}

#[cfg(target_arch = "nvptx64")]
pub(super) mod device {
    use super::super::{CgemmParams, Complex32, Op};
    use super::{MmaTile, SPLIT_STAGES, STAGES, split_tf32};
    use crate::prelude::*;

    /// One `bm x bn` tile of one matrix per block (module docs).
    ///
    /// # Safety
    /// `p` from the host's launcher: buffers that hold every offset it forms, 8-byte aligned,
    /// and the tile's shared memory.
    // Register arrays are indexed by compile-time-constant loop counters (fully unrolled).
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    pub unsafe fn tensor<const WR: usize, const WC: usize, const MT: usize, const NT: usize, const BK: usize>(
        p: &CgemmParams,
    ) {
        let t = MmaTile {
            warp_rows: WR as u32,
            warp_cols: WC as u32,
            m_tiles: MT as u32,
            n_tiles: NT as u32,
            bk: BK as u32,
        };
        let item = block_idx_x();
        if item >= p.items {
            return;
        }
        let at = p.item_coords(item);
        let thread = thread_idx_x();
        let (lane, warp) = (thread % 32, thread / 32);
        let (a, b, c, smem) = (to_global(p.a), to_global(p.b), to_global(p.c), smem_base());
        let (a_k_contiguous, b_k_contiguous) = (p.op_a != Op::N as u32, p.op_b == Op::N as u32);
        // Per operand by arithmetic: a select between two captured values (or an index into
        // an array of them) becomes a select of their addresses in local memory.
        let pick = |is_a: bool, a: u32, b: u32| b ^ ((a ^ b) & (is_a as u32).wrapping_neg());
        let k_contiguous = |is_a: bool| pick(is_a, a_k_contiguous as u32, b_k_contiguous as u32) != 0;
        let raw_bytes = 8 * t.raw_elements();
        let chunks = p.chunks;

        // Copy e of a chunk lands at raw slot e.
        let copy = #[inline(always)]
        |stage: u32, l0: u32| {
            let base = smem + stage * raw_bytes;
            for u in 0..t.copies() {
                // Re-read per chunk: hoisting each copy's place out of the loop costs registers.
                let e = thread_idx_x_each_time() + u * t.threads();
                let is_a = u < t.a_copies(); // known per unrolled copy
                let (index, l) = t.copy_element(e, is_a, k_contiguous(is_a));
                let (from, bytes) = match p.tensor_source(is_a, index, l, at, l0) {
                    Some(offset) => ((if is_a { a } else { b }) + 8 * offset, 8),
                    None => (a, 0),
                };
                cp_async_f32x2(base + 8 * e, from, bytes);
            }
        };
        // This thread's copies of a chunk, conjugated where the op says so, as value and
        // residual pairs in the fragments' layout.
        let conj = |op: u32| if op == Op::C as u32 { 0x8000_0000u32 } else { 0 };
        let (conj_a, conj_b) = (conj(p.op_a), conj(p.op_b));
        let split = #[inline(always)]
        |raw: u32, stage: u32| {
            let base = smem + t.split_stage(stage);
            for u in 0..t.copies() {
                let e = thread_idx_x_each_time() + u * t.threads();
                let is_a = u < t.a_copies();
                let (index, l) = t.copy_element(e, is_a, k_contiguous(is_a));
                let [re, im] = ld_shared_f32x2(smem + raw * raw_bytes + 8 * e);
                let im = f32::from_bits(im.to_bits() ^ pick(is_a, conj_a, conj_b));
                let store = #[inline(always)]
                |part: u32, residual: bool, bits: u32| {
                    let word =
                        if is_a { t.a_word(index, l, part, residual) } else { t.b_word(l, index, part, residual) };
                    st_shared_f32(base + 4 * word, f32::from_bits(bits));
                };
                let ((re_big, re_small), (im_big, im_small)) = (split_tf32(re), split_tf32(im));
                store(0, false, re_big);
                store(0, true, re_small);
                store(1, false, im_big);
                store(1, true, im_small);
            }
        };

        // Every raw stage in flight; one commit per chunk, empty or not, keeps the group count
        // (and so the wait below) uniform.
        for stage in 0..STAGES {
            if stage < chunks {
                copy(stage, stage * t.bk);
            }
            cp_async_commit();
        }

        let a_sign = if MmaTile::a_negated(lane) { 0x8000_0000u32 } else { 0 };
        let mut acc = [[[0.0f32; 4]; NT]; MT];
        let mut raw = 0u32;
        let mut q = 0;
        while q < chunks {
            // This thread's copies of chunk q have landed: split them. After the barrier every
            // split of chunk q is visible, every warp is done with the split stage of chunk
            // q - 2, and every thread with chunk q's raw stage, which chunk q + STAGES refills.
            cp_async_wait_group::<{ STAGES - 1 }>();
            split(raw, q % SPLIT_STAGES);
            sync_threads();
            if q + STAGES < chunks {
                copy(raw, (q + STAGES) * t.bk);
            }
            cp_async_commit();
            raw = if raw + 1 == STAGES { 0 } else { raw + 1 };

            let stage = smem + t.split_stage(q % SPLIT_STAGES);
            let mut part = [[[0.0f32; 4]; NT]; MT];
            for ks in 0..t.k_steps() {
                let mut x = [[0u32; 4]; MT];
                let mut x_small = [[0u32; 4]; MT];
                for i in 0..MT {
                    for h in 0..2 {
                        let [v0, v1] = ld_shared_f32x2(stage + 4 * t.a_load(lane, warp, i as u32, ks, h as u32, false));
                        let [s0, s1] = ld_shared_f32x2(stage + 4 * t.a_load(lane, warp, i as u32, ks, h as u32, true));
                        (x[i][2 * h], x[i][2 * h + 1]) = (v0.to_bits() ^ a_sign, v1.to_bits() ^ a_sign);
                        (x_small[i][2 * h], x_small[i][2 * h + 1]) = (s0.to_bits() ^ a_sign, s1.to_bits() ^ a_sign);
                    }
                }
                let mut y = [[0u32; 2]; NT];
                let mut y_small = [[0u32; 2]; NT];
                for j in 0..NT {
                    let [v0, v1] = ld_shared_f32x2(stage + 4 * t.b_load(lane, warp, j as u32, ks, false));
                    let [s0, s1] = ld_shared_f32x2(stage + 4 * t.b_load(lane, warp, j as u32, ks, true));
                    y[j] = [v0.to_bits(), v1.to_bits()];
                    y_small[j] = [s0.to_bits(), s1.to_bits()];
                }
                for i in 0..MT {
                    for j in 0..NT {
                        // The small cross terms first, while the sum is still small.
                        part[i][j] = mma_tf32_m16n8k8(x_small[i], y[j], part[i][j]);
                        part[i][j] = mma_tf32_m16n8k8(x[i], y_small[j], part[i][j]);
                        part[i][j] = mma_tf32_m16n8k8(x[i], y[j], part[i][j]);
                    }
                }
            }
            for i in 0..MT {
                for j in 0..NT {
                    for e in 0..4 {
                        acc[i][j][e] += part[i][j][e];
                    }
                }
            }
            q += 1;
        }

        // The accumulators through shared memory (free once every warp is past its last
        // chunk), so that each output's two parts meet and a warp stores consecutive rows.
        cp_async_wait_all();
        sync_threads();
        for i in 0..MT {
            for j in 0..NT {
                for e in 0..4 {
                    let (r, part, col) = t.acc_place(lane, warp, i as u32, j as u32, e as u32);
                    st_shared_f32(smem + 4 * t.c_word(r, part, col), acc[i][j][e]);
                }
            }
        }
        sync_threads();
        let c_matrix = c + 8 * (p.batch_base + at.first as u64) * p.stride_c;
        let mut e = thread;
        while e < t.bm() * t.bn() {
            let (r, col) = (e % t.bm(), e / t.bm());
            let (row, column) = (at.row0 + r, at.col0 + col);
            if row < p.m && column < p.n {
                let [re, im] = ld_shared_f32x2(smem + 4 * t.c_word(r, 0, col));
                let at_c = c_matrix + 8 * (row as u64 + column as u64 * p.ldc as u64);
                let value = p.epilogue(Complex32 { re, im }, || {
                    let [re, im] = ld_global_f32x2(at_c);
                    Complex32 { re, im }
                });
                stg_f32x2(at_c, [value.re, value.im]);
            }
            e += t.threads();
        }
    }
}
