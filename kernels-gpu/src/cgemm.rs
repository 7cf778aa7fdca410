//! Batched complex GEMM, `C[b] = α·op(A[b])·op(B[b]) + β·C[b]`, complex f32, column-major
//! (the host turns row-major problems into column-major ones), interleaved or planar storage.
//! Launched by `host/cgemm.rs`.
//!
//! Four kernel families, each const-generic over a register tile of `TM x TN` outputs per
//! thread, listed as data in [`CGEMM_TILES`] (see [`Family`]):
//! - `Tiled` (any problem, planar too): a work item is the same `bm x bn` tile of C in
//!   `per_block` consecutive matrices; K in chunks of `bk`, each staged into shared memory in
//!   the layout of `op(A)` and `op(B)` (coalesced loads along the stored layout, conjugation on
//!   the way, zeros past the edges), the next chunk held in registers ([`STAGE_SLOTS`] per
//!   thread) while the block computes; `rounds` of matrices when a block holds more than its
//!   threads cover.
//! - `Whole` (small matrices, interleaved): many whole matrices per item, their stored
//!   footprints copied verbatim by 16-byte `cp.async` ([`VerbatimCopy`]) into a ring of
//!   [`WHOLE_STAGES`] stages, blocks walking the items grid-stride with the next items' copies
//!   in flight.
//! - `Large`: a `16·TM x 16·TN` tile of one matrix per block, compiled per stored layout of A
//!   and B, two shared-memory stages.
//! - `Element`: one output per thread, operands through L1 (matrix-vector shapes).
//! - `Tensor`: 3xTF32 on the tensor cores, a tile of one matrix per block ([`tensor`]).
//!
//! Work items and threads are unpacked with magic division. The host picks the variant and
//! its [`CgemmShape`]; all the index math is here, shared with the host's tests.

use crate::MagicDiv;
pub use crate::complex::Complex32;
use bytemuck::{Pod, Zeroable};

pub mod tensor;
pub use tensor::{MmaTile, Products};

/// What a matrix operand goes through before the product.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// As stored.
    N = 0,
    /// Transposed.
    T = 1,
    /// Conjugate-transposed.
    C = 2,
}

impl Op {
    pub const ALL: [Op; 3] = [Op::N, Op::T, Op::C];
}

/// Threads per block (`Element`: [`ELEMENT_THREADS`]; `Tensor`: its warps').
pub const CGEMM_THREADS: u32 = 256;
/// Threads per `Element` block. Small blocks: a matrix-vector product is a stream of reads,
/// and a block's registers and warp slots go back to the SM as soon as its two warps are done,
/// not when the slowest of eight is (H200, 2664 products of 256 x 256 by a vector:
/// `element_t2x1` 0.3340 ms in 256-thread blocks, 0.3200 in 64-thread blocks, 0.3212 in
/// 32-thread ones; cuBLAS's gemv 0.3235).
pub const ELEMENT_THREADS: u32 = 64;
/// Threads along each side of one matrix's tile at most: a tile spans up to `16·TM x 16·TN`.
pub const MAX_THREADS_PER_SIDE: u32 = 16;
/// Complex elements each thread stages per step: the register buffer that holds the next
/// step's operands while the block computes the current one.
pub const STAGE_SLOTS: u32 = 8;
/// Elements a block stages per step (both operands, every matrix, one k-chunk).
pub const STAGE_ELEMENTS: u32 = STAGE_SLOTS * CGEMM_THREADS;
/// Work items (block tiles) one launch covers at most.
pub const MAX_ITEMS: u64 = (1 << 31) - 1;

/// A `Whole` variant's block: its threads and the aligned pairs of elements each copies per
/// item at most, which together size its stages, and how the stages are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WholeBlock {
    pub threads: u32,
    pub pairs: u32,
    /// One thread starts each operand's footprint as one bulk copy (`cp.async.bulk`, sm_90)
    /// completing on the stage's `mbarrier`, instead of every thread copying pairs by
    /// `cp.async`; other architectures' PTX keeps `cp.async` in these entry points.
    pub bulk: bool,
}

impl WholeBlock {
    /// Slots (complex elements) of one stage: an item's copies.
    pub const fn stage(&self) -> u32 {
        2 * self.pairs * self.threads
    }

    /// Complex elements a block copies per item at most (both operands), each operand's copy
    /// rounded out to aligned pairs within one stage.
    pub const fn elements(&self) -> u32 {
        self.stage() - 4
    }

    /// Dynamic shared memory: the stages, then (bulk copies) an `mbarrier` per stage.
    pub const fn smem_bytes(&self) -> u32 {
        8 * WHOLE_STAGES * (self.stage() + self.bulk as u32)
    }
}

/// Items a `Whole` block holds in shared memory: the one it computes and the ones whose
/// copies are in flight.
pub const WHOLE_STAGES: u32 = 2;

/// The kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Any problem: tiles of C, k in chunks, operands staged element by element into the
    /// layout of `op(A)` and `op(B)`.
    Tiled,
    /// Whole matrices, many per item: blocks walk the items grid-stride, copy each item's
    /// stored footprints verbatim (16-byte `cp.async`, no per-element index math; the next
    /// items' copies in flight while the current one is computed) and read them through the ops.
    /// Interleaved storage, 16-byte-aligned buffers, `m ≤ 16·TM`, `n ≤ 16·TN` and both
    /// operands of a block within its [`WholeBlock::elements`].
    Whole,
    /// Large matrices: a `16·TM x 16·TN` tile of one matrix per block on 16 x 16 threads, k in
    /// chunks of [`LARGE_BK`], all of it compile-time: staging addresses computed once per
    /// tile, shared-memory reads at constant offsets. Compiled per stored layout of A and B
    /// (whether k is contiguous in each); interleaved storage.
    Large,
    /// `TM` outputs of a column per thread, operands read through L1 (no shared memory), 8
    /// k-steps in flight, blocks of [`ELEMENT_THREADS`]: matrix-vector shapes (C with one or
    /// two columns), where a tile would idle threads.
    Element,
    /// One output per warp, the lanes along k and their sums added by shuffles: the
    /// matrix-vector shapes whose A is stored with k contiguous (op T or C), where one
    /// thread per output would read a line per lane.
    Dot,
    /// 1 x 1 matrices (m = n = k = 1, a batch of complex products `α·a·b + β·c`): two
    /// batches per thread, read and written as 16 bytes per operand where the three operands
    /// are packed (batch strides 1) and 16-byte aligned; any storage.
    Pointwise,
    /// Packed `TM x TM` matrices (m = n = k = `TM`, leading dimensions `TM`, batch strides
    /// `TM²`), interleaved, 16-byte aligned: a thread per matrix, both operands and the
    /// outputs in registers, read and written as 16-byte pairs of rows. Only 2 x 2 ships: on
    /// the H200 a lane's 72 or 128 contiguous bytes (3 x 3, 4 x 4) made each load instruction
    /// touch 18 to 32 sectors, and both ran at half `Whole`'s speed.
    Register,
    /// A `bm x bn` tile of one matrix per block on the tensor cores, 3xTF32 (an error within
    /// `5 · 2^-22` of each product's magnitude beyond f32 summation's), interleaved storage
    /// (8-byte aligned), any ops; compiled per stored layout of A and B: [`tensor`].
    Tensor,
}

/// Batches (1 x 1 products) per `Pointwise` thread: one 16-byte load of each operand.
pub const POINTWISE_BATCHES: u32 = 2;

/// Threads (a warp's lanes) per `Dot` output.
pub const DOT_LANES: u32 = 32;

/// K per staged chunk of the `Large` family.
pub const LARGE_BK: u32 = 16;

/// One kernel variant: its family and register tile; each is its own PTX entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CgemmTile {
    pub name: &'static str,
    pub family: Family,
    /// Rows of C per thread (`Tensor`: per warp).
    pub tm: u32,
    /// Columns of C per thread (`Tensor`: per warp).
    pub tn: u32,
    /// `Large` and `Tensor`: whether the variant takes A, and B, stored with k contiguous (A
    /// transposed or conjugated, B as is); the others take any layout.
    pub k_contiguous: Option<[bool; 2]>,
    /// `Tensor` only: its warps, accumulators and k-chunk.
    pub mma: Option<MmaTile>,
    /// `Whole` only: its threads and stage.
    pub whole: Option<WholeBlock>,
}

impl CgemmTile {
    /// Whether the variant takes planar storage (split re/im) as well as interleaved.
    pub const fn takes_planar(&self) -> bool {
        matches!(self.family, Family::Tiled | Family::Element | Family::Dot | Family::Pointwise)
    }

    /// Whether the variant is a `Tensor` tile fed through a producer's ring ([`MmaTile::ring`]).
    pub const fn has_ring(&self) -> bool {
        matches!(self.mma, Some(mma) if mma.ring > 0)
    }

    /// Threads per block.
    pub const fn threads(&self) -> u32 {
        match (self.mma, self.whole, self.family) {
            (Some(mma), _, _) => mma.block_threads(),
            (_, Some(block), _) => block.threads,
            (None, None, Family::Element) => ELEMENT_THREADS,
            (None, None, _) => CGEMM_THREADS,
        }
    }
}

/// Declares every variant: [`CGEMM_TILES`] and, in the PTX, one entry point per variant. The
/// `Large` and `Tensor` tiles come in four stored layouts each (A, B with k contiguous or
/// not: `mn`, `mk`, `kn`, `kk`); a `Tensor` tile's [`MmaTile`] is its kernel's const
/// generics, and its rows and columns per warp follow from them.
macro_rules! cgemm_tiles {
    (
        plain: [$(($name:ident, $family:ident, $tm:literal, $tn:literal, $kernel:path)),* $(,)?],
        whole: [$(($w_name:ident, $w_tm:literal, $w_tn:literal, $w_threads:literal, $w_pairs:literal, $w_bulk:literal)),* $(,)?],
        large: [$(([$l_mn:ident, $l_mk:ident, $l_kn:ident, $l_kk:ident], $l_tm:literal, $l_tn:literal)),* $(,)?],
        tensor: [$(
            ([$t_mn:ident, $t_mk:ident, $t_kn:ident, $t_kk:ident],
             $wr:literal, $wc:literal, $mt:literal, $nt:literal, $kb:literal, $one:literal, $gauss:literal)
        ),* $(,)?],
        ring: [$(
            ([$r_mn:ident, $r_mk:ident, $r_kn:ident, $r_kk:ident],
             $r_wr:literal, $r_wc:literal, $r_mt:literal, $r_nt:literal, $r_kb:literal, $r_gauss:literal, $r_stages:literal)
        ),* $(,)?] $(,)?
    ) => {
        /// Every variant in the PTX.
        pub const CGEMM_TILES: &[CgemmTile] = &[
            $(CgemmTile {
                name: stringify!($name), family: Family::$family, tm: $tm, tn: $tn, k_contiguous: None, mma: None,
                whole: None,
            },)*
            $(CgemmTile {
                name: stringify!($w_name), family: Family::Whole, tm: $w_tm, tn: $w_tn, k_contiguous: None, mma: None,
                whole: Some(WholeBlock { threads: $w_threads, pairs: $w_pairs, bulk: $w_bulk }),
            },)*
            $(
                layout_tile(stringify!($l_mn), Family::Large, $l_tm, $l_tn, [false, false], None),
                layout_tile(stringify!($l_mk), Family::Large, $l_tm, $l_tn, [false, true], None),
                layout_tile(stringify!($l_kn), Family::Large, $l_tm, $l_tn, [true, false], None),
                layout_tile(stringify!($l_kk), Family::Large, $l_tm, $l_tn, [true, true], None),
            )*
            $(
                layout_tile(stringify!($t_mn), Family::Tensor, 16 * $mt, 8 * $nt, [false, false],
                    Some(mma_tile([$wr, $wc, $mt, $nt, $kb], $one, $gauss))),
                layout_tile(stringify!($t_mk), Family::Tensor, 16 * $mt, 8 * $nt, [false, true],
                    Some(mma_tile([$wr, $wc, $mt, $nt, $kb], $one, $gauss))),
                layout_tile(stringify!($t_kn), Family::Tensor, 16 * $mt, 8 * $nt, [true, false],
                    Some(mma_tile([$wr, $wc, $mt, $nt, $kb], $one, $gauss))),
                layout_tile(stringify!($t_kk), Family::Tensor, 16 * $mt, 8 * $nt, [true, true],
                    Some(mma_tile([$wr, $wc, $mt, $nt, $kb], $one, $gauss))),
            )*
            $(
                layout_tile(stringify!($r_mn), Family::Tensor, 16 * $r_mt, 8 * $r_nt, [false, false],
                    Some(ring_tile([$r_wr, $r_wc, $r_mt, $r_nt, $r_kb], $r_gauss, $r_stages))),
                layout_tile(stringify!($r_mk), Family::Tensor, 16 * $r_mt, 8 * $r_nt, [false, true],
                    Some(ring_tile([$r_wr, $r_wc, $r_mt, $r_nt, $r_kb], $r_gauss, $r_stages))),
                layout_tile(stringify!($r_kn), Family::Tensor, 16 * $r_mt, 8 * $r_nt, [true, false],
                    Some(ring_tile([$r_wr, $r_wc, $r_mt, $r_nt, $r_kb], $r_gauss, $r_stages))),
                layout_tile(stringify!($r_kk), Family::Tensor, 16 * $r_mt, 8 * $r_nt, [true, true],
                    Some(ring_tile([$r_wr, $r_wc, $r_mt, $r_nt, $r_kb], $r_gauss, $r_stages))),
            )*
        ];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::kernel::*;
            use super::tensor::device::{tensor, tensor_ring};
            $(cgemm_tiles!(@entry $name, $kernel);)*
            $(cgemm_tiles!(@entry $w_name, whole::<$w_tm, $w_tn, $w_threads, $w_pairs, $w_bulk>);)*
            $(cgemm_tiles!(@layouts [$l_mn, $l_mk, $l_kn, $l_kk], large, [$l_tm, $l_tn]);)*
            $(cgemm_tiles!(@layouts [$t_mn, $t_mk, $t_kn, $t_kk], tensor, [$wr, $wc, $mt, $nt, $kb, $one, $gauss]);)*
            $(cgemm_tiles!(@ring [$r_mn, $r_mk, $r_kn, $r_kk], [$r_wr, $r_wc, $r_mt, $r_nt, $r_kb, $r_gauss], $r_stages);)*
        }
    };
    (@layouts [$mn:ident, $mk:ident, $kn:ident, $kk:ident], $kernel:ident, [$($g:literal),*]) => {
        cgemm_tiles!(@entry $mn, $kernel::<$($g,)* false, false>);
        cgemm_tiles!(@entry $mk, $kernel::<$($g,)* false, true>);
        cgemm_tiles!(@entry $kn, $kernel::<$($g,)* true, false>);
        cgemm_tiles!(@entry $kk, $kernel::<$($g,)* true, true>);
    };
    (@ring [$mn:ident, $mk:ident, $kn:ident, $kk:ident], [$($g:literal),*], $stages:literal) => {
        cgemm_tiles!(@entry $mn, tensor_ring::<$($g,)* false, false, $stages>);
        cgemm_tiles!(@entry $mk, tensor_ring::<$($g,)* false, true, $stages>);
        cgemm_tiles!(@entry $kn, tensor_ring::<$($g,)* true, false, $stages>);
        cgemm_tiles!(@entry $kk, tensor_ring::<$($g,)* true, true, $stages>);
    };
    (@entry $name:ident, $kernel:path) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(p: super::CgemmParams) {
            unsafe { $kernel(&p) }
        }
    };
}

cgemm_tiles!(
    plain: [
        (cgemm_t1x1, Tiled, 1, 1, tiled::<1, 1>),
        (cgemm_t1x2, Tiled, 1, 2, tiled::<1, 2>),
        (cgemm_t1x4, Tiled, 1, 4, tiled::<1, 4>),
        (cgemm_t2x1, Tiled, 2, 1, tiled::<2, 1>),
        (cgemm_t2x2, Tiled, 2, 2, tiled::<2, 2>),
        (cgemm_t2x4, Tiled, 2, 4, tiled::<2, 4>),
        (cgemm_t4x1, Tiled, 4, 1, tiled::<4, 1>),
        (cgemm_t4x2, Tiled, 4, 2, tiled::<4, 2>),
        (cgemm_t4x4, Tiled, 4, 4, tiled::<4, 4>),
        (cgemm_element, Element, 1, 1, element::<1, 8>),
        (cgemm_element_t2x1, Element, 2, 1, element::<2, 8>),
        (cgemm_element_t4x1, Element, 4, 1, element::<4, 8>),
        (cgemm_dot, Dot, 1, 1, dot),
        (cgemm_pointwise, Pointwise, 1, 1, pointwise),
        (cgemm_register_2x2, Register, 2, 2, register::<2>),
    ],
    // Register tile (rows x columns per thread), threads per block, pairs each thread copies
    // per item: 16 KB stages of 256 threads, ahead of 128- and 64-thread blocks on sq3 to sq12
    // (H200; benches/NOTES.md, cgemm v10); bulk copies.
    whole: [
        (cgemm_whole_t1x1, 1, 1, 256, 4, false),
        (cgemm_whole_t1x2, 1, 2, 256, 4, false),
        (cgemm_whole_t1x4, 1, 4, 256, 4, false),
        (cgemm_whole_t2x1, 2, 1, 256, 4, false),
        (cgemm_whole_t2x2, 2, 2, 256, 4, false),
        (cgemm_whole_t2x4, 2, 4, 256, 4, false),
        (cgemm_whole_t4x1, 4, 1, 256, 4, false),
        (cgemm_whole_t4x2, 4, 2, 256, 4, false),
        (cgemm_whole_bulk_t1x1, 1, 1, 256, 4, true),
        (cgemm_whole_bulk_t1x2, 1, 2, 256, 4, true),
        (cgemm_whole_bulk_t1x4, 1, 4, 256, 4, true),
        (cgemm_whole_bulk_t2x4, 2, 4, 256, 4, true),
    ],
    // Register tile (rows x columns per thread).
    large: [
        ([cgemm_large_t4x4_mn, cgemm_large_t4x4_mk, cgemm_large_t4x4_kn, cgemm_large_t4x4_kk], 4, 4),
        ([cgemm_large_t4x2_mn, cgemm_large_t4x2_mk, cgemm_large_t4x2_kn, cgemm_large_t4x2_kk], 4, 2),
        ([cgemm_large_t2x4_mn, cgemm_large_t2x4_mk, cgemm_large_t2x4_kn, cgemm_large_t2x4_kk], 2, 4),
        ([cgemm_large_t2x2_mn, cgemm_large_t2x2_mk, cgemm_large_t2x2_kn, cgemm_large_t2x2_kk], 2, 2),
        ([cgemm_large_t4x1_mn, cgemm_large_t4x1_mk, cgemm_large_t4x1_kn, cgemm_large_t4x1_kk], 4, 1),
        ([cgemm_large_t1x4_mn, cgemm_large_t1x4_mk, cgemm_large_t1x4_kn, cgemm_large_t1x4_kk], 1, 4),
    ],
    // Warps along rows and columns, m16n8 tiles per warp along each, k per chunk, all of k in
    // one chunk (k ≤ that chunk only), Gauss's three products (`tc3m`: every tile whose chunk
    // sums fit the registers beside Gauss's third sum, so not 64 x 64 and 128 x 32).
    tensor: [
        ([cgemm_tc_16x16_mn, cgemm_tc_16x16_mk, cgemm_tc_16x16_kn, cgemm_tc_16x16_kk], 1, 2, 1, 1, 16, false, false),
        ([cgemm_tc_32x32_mn, cgemm_tc_32x32_mk, cgemm_tc_32x32_kn, cgemm_tc_32x32_kk], 2, 2, 1, 2, 16, false, false),
        ([cgemm_tc_64x32_mn, cgemm_tc_64x32_mk, cgemm_tc_64x32_kn, cgemm_tc_64x32_kk], 2, 2, 2, 2, 16, false, false),
        ([cgemm_tc_64x64_mn, cgemm_tc_64x64_mk, cgemm_tc_64x64_kn, cgemm_tc_64x64_kk], 2, 2, 2, 4, 16, false, false),
        ([cgemm_tc_128x32_mn, cgemm_tc_128x32_mk, cgemm_tc_128x32_kn, cgemm_tc_128x32_kk], 4, 1, 2, 4, 16, false, false),
        ([cgemm_tc_32x64_mn, cgemm_tc_32x64_mk, cgemm_tc_32x64_kn, cgemm_tc_32x64_kk], 1, 4, 2, 2, 16, false, false),
        ([cgemm_tc_64x8_mn, cgemm_tc_64x8_mk, cgemm_tc_64x8_kn, cgemm_tc_64x8_kk], 4, 1, 1, 1, 16, false, false),
        ([cgemm_tc_16x64_mn, cgemm_tc_16x64_mk, cgemm_tc_16x64_kn, cgemm_tc_16x64_kk], 1, 4, 1, 2, 16, false, false),
        ([cgemm_tc_16x16_k16_mn, cgemm_tc_16x16_k16_mk, cgemm_tc_16x16_k16_kn, cgemm_tc_16x16_k16_kk], 1, 2, 1, 1, 16, true, false),
        ([cgemm_tc_32x32_k32_mn, cgemm_tc_32x32_k32_mk, cgemm_tc_32x32_k32_kn, cgemm_tc_32x32_k32_kk], 2, 2, 1, 2, 32, true, false),
        ([cgemm_tc3m_16x16_mn, cgemm_tc3m_16x16_mk, cgemm_tc3m_16x16_kn, cgemm_tc3m_16x16_kk], 1, 2, 1, 1, 16, false, true),
        ([cgemm_tc3m_32x32_mn, cgemm_tc3m_32x32_mk, cgemm_tc3m_32x32_kn, cgemm_tc3m_32x32_kk], 2, 2, 1, 2, 16, false, true),
        ([cgemm_tc3m_64x32_mn, cgemm_tc3m_64x32_mk, cgemm_tc3m_64x32_kn, cgemm_tc3m_64x32_kk], 2, 2, 2, 2, 16, false, true),
        ([cgemm_tc3m_32x64_mn, cgemm_tc3m_32x64_mk, cgemm_tc3m_32x64_kn, cgemm_tc3m_32x64_kk], 1, 4, 2, 2, 16, false, true),
        ([cgemm_tc3m_64x8_mn, cgemm_tc3m_64x8_mk, cgemm_tc3m_64x8_kn, cgemm_tc3m_64x8_kk], 4, 1, 1, 1, 16, false, true),
        ([cgemm_tc3m_16x64_mn, cgemm_tc3m_16x64_mk, cgemm_tc3m_16x64_kn, cgemm_tc3m_16x64_kk], 1, 4, 1, 2, 16, false, true),
        ([cgemm_tc3m_16x16_k16_mn, cgemm_tc3m_16x16_k16_mk, cgemm_tc3m_16x16_k16_kn, cgemm_tc3m_16x16_k16_kk], 1, 2, 1, 1, 16, true, true),
        ([cgemm_tc3m_32x32_k32_mn, cgemm_tc3m_32x32_k32_mk, cgemm_tc3m_32x32_k32_kn, cgemm_tc3m_32x32_k32_kk], 2, 2, 1, 2, 32, true, true),
    ],
    // One-chunk tiles fed by a producer warp's bulk copies through a ring ([`MmaTile::ring`]):
    // warps, m16n8 tiles per warp and k as for `tensor`, Gauss's products, stages (2, 3 and 4
    // of 18 KB: 6, 4 and 3 blocks per SM). Not chosen by the heuristic yet.
    ring: [
        ([cgemm_tc_32x32_k32_r2_mn, cgemm_tc_32x32_k32_r2_mk, cgemm_tc_32x32_k32_r2_kn, cgemm_tc_32x32_k32_r2_kk], 2, 2, 1, 2, 32, false, 2),
        ([cgemm_tc_32x32_k32_r3_mn, cgemm_tc_32x32_k32_r3_mk, cgemm_tc_32x32_k32_r3_kn, cgemm_tc_32x32_k32_r3_kk], 2, 2, 1, 2, 32, false, 3),
        ([cgemm_tc_32x32_k32_r4_mn, cgemm_tc_32x32_k32_r4_mk, cgemm_tc_32x32_k32_r4_kn, cgemm_tc_32x32_k32_r4_kk], 2, 2, 1, 2, 32, false, 4),
    ],
);

/// A `Tensor` variant's [`MmaTile`] (see [`MmaTile::new`]), without a ring.
const fn mma_tile(tile: [u32; 5], one_chunk: bool, gauss: bool) -> MmaTile {
    MmaTile::new(tile, one_chunk, gauss, 0)
}

/// A one-chunk `Tensor` variant fed through a ring of `stages` ([`MmaTile::ring`]).
const fn ring_tile(tile: [u32; 5], gauss: bool, stages: u32) -> MmaTile {
    MmaTile::new(tile, true, gauss, stages)
}

/// A `Large` or `Tensor` variant compiled for the stored layouts `kc`.
const fn layout_tile(
    name: &'static str,
    family: Family,
    tm: u32,
    tn: u32,
    kc: [bool; 2],
    mma: Option<MmaTile>,
) -> CgemmTile {
    CgemmTile { name, family, tm, tn, k_contiguous: Some(kc), mma, whole: None }
}

/// The variant of `family` with a `tm x tn` register tile (for `Large` and `Tensor`, compiled
/// for the stored layouts `k_contiguous`; `Whole` copying by `cp.async`, `Tensor` without a
/// ring), if the PTX has it.
pub fn cgemm_tile(family: Family, tm: u32, tn: u32, k_contiguous: [bool; 2]) -> Option<&'static CgemmTile> {
    CGEMM_TILES.iter().find(|t| {
        t.family == family
            && t.tm == tm
            && t.tn == tn
            && t.k_contiguous.is_none_or(|kc| kc == k_contiguous)
            && t.whole.is_none_or(|w| !w.bulk)
            && !t.has_ring()
    })
}

/// Where element `e` of a `Large` chunk of one operand lies: its index along the tile's
/// `extent` rows (A) or columns (B), and its `l` within the chunk. Elements run along the
/// stored layout: k first where `k_contiguous`, else the tile's rows (columns).
#[inline(always)]
pub const fn large_element(e: u32, extent: u32, k_contiguous: bool) -> (u32, u32) {
    if k_contiguous { (e / LARGE_BK, e % LARGE_BK) } else { (e % extent, e / extent) }
}

/// A verbatim copy of `count` elements of a buffer of `len` elements (16-byte aligned), from
/// element `from`, as aligned pairs of elements: what `Whole` blocks stage. Pair `q` fills
/// slots `2q` and `2q + 1` of the copy's region, so element `from + e` lands in slot `odd + e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbatimCopy {
    /// The first pair: elements `2 · first_pair` and `2 · first_pair + 1`.
    pub first_pair: u64,
    /// Whether the copy starts on the pair's second element.
    pub odd: u32,
    pub count: u32,
    pub pairs: u32,
    /// Pairs whose second element lies inside the buffer (the rest read only their first).
    pub vector_pairs: u32,
}

impl VerbatimCopy {
    #[inline(always)]
    pub fn new(from: u64, count: u32, len: u64) -> VerbatimCopy {
        let first_pair = from / 2;
        let odd = (from % 2) as u32;
        let pairs = (count + odd).div_ceil(2);
        let vector_pairs = (len / 2).saturating_sub(first_pair);
        let vector_pairs = if vector_pairs < pairs as u64 { vector_pairs as u32 } else { pairs };
        VerbatimCopy { first_pair, odd, count, pairs, vector_pairs }
    }

    /// Bytes of pair `q < pairs` read from the buffer: 16, or 8 where its second element lies
    /// past the buffer's end (that slot is left as it was).
    #[inline(always)]
    pub fn pair_bytes(&self, q: u32) -> u32 {
        if q < self.vector_pairs { 16 } else { 8 }
    }

    /// Slots of the copy's region: whole pairs.
    #[inline(always)]
    pub fn slots(&self) -> u32 {
        2 * self.pairs
    }
}

/// The smallest odd number at least `x`: odd pitches in shared memory keep the rows of a
/// chunk, and the matrices of a block, on different banks.
const fn odd(x: u32) -> u32 {
    x | 1
}

/// How one launch tiles a problem: the block tile, its k-chunk and matrices per block, with
/// the shared-memory layout that follows. Pure arithmetic, on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgemmShape {
    pub tile: CgemmTile,
    /// Rows and columns of C a block computes per matrix.
    pub bm: u32,
    pub bn: u32,
    /// K per staged chunk.
    pub bk: u32,
    /// Matrices the block's threads compute at once, rounds of them per staged step (more
    /// than one only where a step stages all of k), and matrices per work item (at most
    /// `per_round · rounds`; the last round may be partial).
    pub per_round: u32,
    pub rounds: u32,
    pub per_block: u32,
    /// Threads along the rows and the columns of one matrix's tile.
    pub thread_rows: u32,
    pub thread_cols: u32,
    /// Chunks of k a block's shared memory holds at once: `Large` two, `Tensor` up to
    /// [`tensor::STAGES`] (no more than the problem has: a short k leaves room for more blocks
    /// per SM) or its ring's items ([`MmaTile::ring`]), the others one.
    pub stages: u32,
}

impl CgemmShape {
    /// The shape `tile` gives an `m x n x k` problem of `batch` matrices: the largest block
    /// tile its threads cover and as many matrices as 256 threads hold; then, where all of k
    /// fits one step of [`STAGE_ELEMENTS`], as many rounds of matrices as fit it, else the
    /// longest k-chunk that fits (matrices per round halved until a chunk of 8 does).
    pub const fn new(tile: CgemmTile, m: u32, n: u32, k: u32, batch: u32) -> CgemmShape {
        let bm = min(m, MAX_THREADS_PER_SIDE * tile.tm);
        let bn = min(n, MAX_THREADS_PER_SIDE * tile.tn);
        let (thread_rows, thread_cols) = (bm.div_ceil(tile.tm), bn.div_ceil(tile.tn));
        let batch = max(batch, 1);
        let mut per_round = min(CGEMM_THREADS / (thread_rows * thread_cols), batch);
        loop {
            let per_l = per_round * (bm + bn);
            let bk = min(k, STAGE_ELEMENTS / per_l);
            if bk >= min(k, 8) || per_round == 1 {
                let bk = max(bk, 1);
                let rounds = if bk == k { min(STAGE_ELEMENTS / (per_l * k), batch.div_ceil(per_round)) } else { 1 };
                let rounds = max(rounds, 1);
                let per_block = per_round * rounds;
                return CgemmShape {
                    tile,
                    bm,
                    bn,
                    bk,
                    per_round,
                    rounds,
                    per_block,
                    thread_rows,
                    thread_cols,
                    stages: 1,
                };
            }
            per_round /= 2;
        }
    }

    /// The shape of a `Whole` variant: the matrices whole (`m ≤ 16·TM`, `n ≤ 16·TN`, one
    /// matrix's threads within the block), as many per block as its stage holds (fewer where
    /// that makes the footprints whole 128-byte lines at three quarters of them), given each
    /// operand's elements per matrix (its batch stride, 0 when one matrix serves the batch) and
    /// the extent of one matrix. `None` where one matrix of each does not fit.
    #[allow(clippy::too_many_arguments)]
    pub const fn whole(
        tile: CgemmTile,
        m: u32,
        n: u32,
        k: u32,
        batch: u32,
        (a_stride, a_extent): (u32, u32),
        (b_stride, b_extent): (u32, u32),
    ) -> Option<CgemmShape> {
        let Some(block) = tile.whole else {
            return None;
        };
        if m > MAX_THREADS_PER_SIDE * tile.tm || n > MAX_THREADS_PER_SIDE * tile.tn {
            return None;
        }
        // A block of `p` matrices copies (p - 1) · stride + extent elements of each operand.
        let (once, per_matrix) = (a_extent + b_extent, a_stride + b_stride);
        let (thread_rows, thread_cols) = (m.div_ceil(tile.tm), n.div_ceil(tile.tn));
        if once > block.elements() || thread_rows * thread_cols > block.threads {
            return None;
        }
        let batch = max(batch, 1);
        let per_round = min(block.threads / (thread_rows * thread_cols), batch);
        let fits = match (block.elements() - once).checked_div(per_matrix) {
            Some(more) => 1 + more,
            None => batch, // one copy serves every matrix
        };
        // Items whose footprints are whole 128-byte lines, where that keeps three quarters of
        // what fits: an item that starts mid-line shares the line with its neighbour, which
        // another block copies (H200, sq5's 200-byte matrices: 33 to an item 0.0252 ms, 32
        // 0.0226, 40 0.0240; benches/NOTES.md, cgemm v14).
        let period = lcm(line_period(a_stride), line_period(b_stride));
        let aligned = fits - fits % period;
        let fits = if 4 * aligned >= 3 * fits { aligned } else { fits };
        // Whole rounds where the last is less than half full and dropping it costs the stage
        // at most a sixteenth of its matrices: a last round of a few would idle most threads (H200: sq3's 113 matrices in five rounds, the
        // last of one, 0.0245 ms; 112 in four 0.0217; but sq5's 40 in three rounds 0.0235 ms,
        // 34 in two 0.0246).
        let short = fits % per_round;
        let fits = if fits > per_round && short < per_round / 2 && short <= fits / 16 { fits - short } else { fits };
        let per_block = min(fits, batch);
        let per_round = min(per_round, per_block);
        let rounds = per_block.div_ceil(per_round);
        Some(CgemmShape {
            tile,
            bm: m,
            bn: n,
            bk: k,
            per_round,
            rounds,
            per_block,
            thread_rows,
            thread_cols,
            stages: 1,
        })
    }

    /// The shape of a `Large` variant: one `16·TM x 16·TN` tile of one matrix per item.
    pub const fn large(tile: CgemmTile) -> CgemmShape {
        let (bm, bn) = (MAX_THREADS_PER_SIDE * tile.tm, MAX_THREADS_PER_SIDE * tile.tn);
        let side = MAX_THREADS_PER_SIDE;
        CgemmShape {
            tile,
            bm,
            bn,
            bk: LARGE_BK,
            per_round: 1,
            rounds: 1,
            per_block: 1,
            thread_rows: side,
            thread_cols: side,
            stages: 2,
        }
    }

    /// The shape of an `Element` (or `Dot`) variant: a work item is `TM` outputs of one column.
    pub const fn element(tile: CgemmTile) -> CgemmShape {
        CgemmShape {
            tile,
            bm: tile.tm,
            bn: 1,
            bk: 1,
            per_round: 1,
            rounds: 1,
            per_block: 1,
            thread_rows: 1,
            thread_cols: 1,
            stages: 1,
        }
    }

    /// The shape of the `Pointwise` variant: a work item is two batches' 1 x 1 products.
    pub const fn pointwise(tile: CgemmTile) -> CgemmShape {
        CgemmShape { per_block: POINTWISE_BATCHES, ..CgemmShape::element(tile) }
    }

    /// The shape of a `Register` variant: a work item is one whole matrix.
    pub const fn register(tile: CgemmTile) -> CgemmShape {
        CgemmShape { bm: tile.tm, bn: tile.tn, ..CgemmShape::element(tile) }
    }

    /// The shape of a `Tensor` variant for k of `k`: one `bm x bn` tile of one matrix per item.
    pub const fn tensor(tile: CgemmTile, mma: MmaTile, k: u32) -> CgemmShape {
        let chunks = k.div_ceil(mma.bk);
        CgemmShape {
            tile,
            bm: mma.bm(),
            bn: mma.bn(),
            bk: mma.bk,
            per_round: 1,
            rounds: 1,
            per_block: 1,
            thread_rows: mma.warp_rows,
            thread_cols: mma.warp_cols,
            stages: if mma.ring > 0 {
                mma.ring
            } else if mma.one_chunk {
                1
            } else {
                max(min(chunks, tensor::STAGES), 1)
            },
        }
    }

    /// Threads that compute (the rest of the block only stages).
    pub const fn computing_threads(&self) -> u32 {
        self.per_round * self.thread_rows * self.thread_cols
    }

    /// Elements staged per step: every matrix's `bm x bk` chunk of A and `bk x bn` of B.
    pub const fn staged(&self) -> u32 {
        self.per_block * self.bk * (self.bm + self.bn)
    }

    /// Elements (complex) between rows `l` and `l + 1` of a staged `op(A)` chunk, which
    /// holds `op(A)[row, l]` at `l · a_pitch + row` (`Tiled` and `Large`; a `Tensor` stage
    /// keeps the stored layout, [`MmaTile::a_slot`]).
    pub const fn a_pitch(&self) -> u32 {
        odd(self.bm)
    }

    /// Elements between columns of a staged `op(B)` chunk.
    pub const fn b_pitch(&self) -> u32 {
        odd(self.bn)
    }

    /// Elements between the staged chunks of consecutive matrices.
    pub const fn a_matrix(&self) -> u32 {
        odd(self.bk * self.a_pitch())
    }

    pub const fn b_matrix(&self) -> u32 {
        odd(self.bk * self.b_pitch())
    }

    /// Dynamic shared memory of a block. `Tiled`: every matrix's A chunk, every matrix's B chunk, and
    /// room for the reads of threads whose register tile reaches past the block tile (rows
    /// `bm ..= TM · thread_rows - 1`: garbage for outputs that are dropped).
    pub const fn smem_bytes(&self) -> u32 {
        match self.tile.family {
            // A ring of stages, each the footprints of an item's matrices.
            Family::Whole => {
                return match self.tile.whole {
                    Some(block) => block.smem_bytes(),
                    None => 0,
                };
            }
            // Two stages of both chunks.
            Family::Large => return self.stages * 8 * LARGE_BK * (self.a_pitch() + self.b_pitch()),
            Family::Element | Family::Dot | Family::Pointwise | Family::Register => return 0,
            // Every Tensor tile has its MmaTile (CGEMM_TILES is constant, and tested).
            Family::Tensor => {
                return match (self.tile.mma, self.tile.k_contiguous) {
                    // A ring's two mbarriers per stage after the stages.
                    (Some(mma), Some(kc)) => 8 * self.stages * mma.stage_slots(kc) + 16 * mma.ring,
                    _ => 0,
                };
            }
            Family::Tiled => {}
        }
        let overreach = self.tile.tm * self.thread_rows - self.bm + self.tile.tn * self.thread_cols - self.bn;
        8 * (self.per_block * (self.a_matrix() + self.b_matrix()) + overreach)
    }

    /// Tiles of one matrix's C along its rows and its columns.
    pub const fn tiles(&self, m: u32, n: u32) -> (u32, u32) {
        (m.div_ceil(self.bm), n.div_ceil(self.bn))
    }

    /// Staged chunks along k.
    pub const fn chunks(&self, k: u32) -> u32 {
        k.div_ceil(self.bk)
    }
}

/// Matrices of `stride` complex elements (8 bytes each) whose footprints together end on a
/// 128-byte line: 1 for a stride of 16 elements or a multiple, 16 for an odd one; 1 for a
/// shared operand (stride 0).
const fn line_period(stride: u32) -> u32 {
    16 / gcd(stride, 16)
}

const fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

const fn lcm(a: u32, b: u32) -> u32 {
    a / gcd(a, b) * b
}

const fn min(a: u32, b: u32) -> u32 {
    if a < b { a } else { b }
}

const fn max(a: u32, b: u32) -> u32 {
    if a > b { a } else { b }
}

/// Parameters of every cgemm kernel, passed by value. Addresses are device pointers; for
/// planar storage `*_im` hold the imaginary parts and the main pointers the real parts.
/// Built by the host from a [`CgemmShape`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CgemmParams {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub a_im: u64,
    pub b_im: u64,
    pub c_im: u64,
    /// Elements between consecutive matrices of a batch.
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
    /// First batch of this launch.
    pub batch_base: u64,
    /// Elements the A and B buffers hold (`Whole` reads stay below).
    pub a_len: u64,
    pub b_len: u64,
    pub alpha: Complex32,
    pub beta: Complex32,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
    /// Matrices of this launch.
    pub batches: u32,
    /// `Op` codes of A and B.
    pub op_a: u32,
    pub op_b: u32,
    /// Whether the storage is planar.
    pub planar: u32,
    /// Whether β is zero: C is then not read (it may hold anything, NaN included).
    pub beta_zero: u32,
    /// Work items (block tiles) of this launch: matrix groups x tiles per matrix.
    pub items: u32,
    /// [`CgemmShape`]'s block tile, chunk, matrices per round and per block.
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub chunks: u32,
    pub per_round: u32,
    pub rounds: u32,
    pub per_block: u32,
    pub thread_cols: u32,
    /// [`CgemmShape`]'s shared-memory layout, in complex elements.
    pub a_pitch: u32,
    pub b_pitch: u32,
    pub a_matrix: u32,
    pub b_matrix: u32,
    /// Elements one stored matrix of A and of B spans (`Whole` copies these).
    pub a_extent: u32,
    pub b_extent: u32,
    /// `Tensor`: 1 where the operand's pairs of elements along its stored lines start 16-byte
    /// aligned (aligned buffer, even leading dimension and batch stride), so its copies may
    /// take them two at a time; else 0.
    pub a_pairs: u32,
    pub b_pairs: u32,
    /// Splits a work item into (matrix group, tile) and a tile into (column tile, row tile).
    pub tiles: MagicDiv,
    pub row_tiles: MagicDiv,
    /// Splits a thread index into (matrix, thread of the matrix) and that into (column, row).
    pub threads_per_matrix: MagicDiv,
    pub thread_rows: MagicDiv,
    /// Split a staged element's index into (matrix, element) and that into (outer, inner)
    /// of the operand's stored layout.
    pub a_chunk: MagicDiv,
    pub a_inner: MagicDiv,
    pub b_chunk: MagicDiv,
    pub b_inner: MagicDiv,
}

/// Where one work item lies: the first matrix of its group (from `batch_base`) and its
/// tile's first row and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCoords {
    pub first: u32,
    pub row0: u32,
    pub col0: u32,
}

/// One thread's place in its block: which matrix (of a round; `matrix + round · per_round`
/// of the block), and its row and column among the tile's threads. Its outputs are rows
/// `row + i · thread_rows`, columns `col + j · thread_cols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCoords {
    pub matrix: u32,
    pub row: u32,
    pub col: u32,
}

/// One staged element: its slot in shared memory (complex elements from the operand's
/// region) and its offset in the operand's buffer, or `None` for a zero (past the matrix, k
/// or the batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    pub slot: u32,
    pub offset: Option<u64>,
}

impl CgemmParams {
    /// Inverse of `(group · row_tiles · col_tiles) + col_tile · row_tiles + row_tile`.
    #[inline(always)]
    pub fn item_coords(&self, item: u32) -> BlockCoords {
        let (group, tile) = self.tiles.div_rem(item);
        let (col_tile, row_tile) = self.row_tiles.div_rem(tile);
        BlockCoords { first: group * self.per_block, row0: row_tile * self.bm, col0: col_tile * self.bn }
    }

    /// Whether a `Pointwise` launch reads and writes its pairs of batches as 16 bytes: the
    /// operands interleaved, packed (batch strides 1) and the launch's first pair 16-byte
    /// aligned in each.
    #[inline(always)]
    pub fn pointwise_packed(&self) -> bool {
        let aligned = |address: u64| (address + 8 * self.batch_base).is_multiple_of(16);
        self.planar == 0
            && self.stride_a == 1
            && self.stride_b == 1
            && self.stride_c == 1
            && aligned(self.a)
            && aligned(self.b)
            && aligned(self.c)
    }

    /// Row `r` of the `rows` an `Element` item computes: `row0 + r`, or, where every warp's
    /// items lie in `32 · rows` rows of one column (`m` a multiple of that, `rows` at least 4),
    /// the same rows dealt out so that pair `h` of lane `i` is rows `64h + 2i` and `+ 1` of the
    /// warp's: each 16-byte load instruction then reads 512 contiguous bytes.
    #[inline(always)]
    pub fn element_row(&self, at: BlockCoords, rows: u32, r: u32) -> u32 {
        let span = 32 * rows;
        if rows > 2 && self.m.is_multiple_of(span) {
            let (slab, lane) = (at.row0 - at.row0 % span, at.row0 / rows % 32);
            slab + 64 * (r / 2) + 2 * lane + r % 2
        } else {
            at.row0 + r
        }
    }

    /// A thread's matrix and place; `matrix >= per_round` for the threads that only stage.
    #[inline(always)]
    pub fn thread_coords(&self, thread: u32) -> ThreadCoords {
        let (matrix, in_matrix) = self.threads_per_matrix.div_rem(thread);
        let (col, row) = self.thread_rows.div_rem(in_matrix);
        ThreadCoords { matrix, row, col }
    }

    /// Staged elements of A per step (every matrix's `bm x bk` chunk); B's `bk x bn` chunks
    /// follow, up to `staged`.
    #[inline(always)]
    pub fn staged_a(&self) -> u32 {
        self.per_block * self.bm * self.bk
    }

    #[inline(always)]
    pub fn staged(&self) -> u32 {
        self.per_block * self.bk * (self.bm + self.bn)
    }

    /// Element `e` of a step's staging (A's elements, then B's): its slot from the start of
    /// shared memory (B's region follows A's) and its offset in its operand.
    #[inline(always)]
    pub fn stage(&self, e: u32, at: BlockCoords, l0: u32) -> (bool, Staged) {
        let a = self.staged_a();
        if e < a {
            (true, self.stage_a(e, at, l0))
        } else {
            let s = self.stage_b(e - a, at, l0);
            (false, Staged { slot: self.per_block * self.a_matrix + s.slot, ..s })
        }
    }

    /// Element `e` of the A chunk at `l0` of the item at `at`, in the order of A's stored
    /// layout (consecutive `e`, consecutive addresses): op N stores `m x k` (rows inner), T
    /// and C store `k x m` (k inner). Its slot holds `op(A)[row, l]` at `l · a_pitch + row`.
    #[inline(always)]
    pub fn stage_a(&self, e: u32, at: BlockCoords, l0: u32) -> Staged {
        let (chunk, inner, k_contiguous) = (self.a_chunk, self.a_inner, self.op_a != Op::N as u32);
        let pitches = (self.a_matrix, self.a_pitch);
        self.stage_operand(
            e,
            (chunk, inner),
            k_contiguous,
            pitches,
            (at, l0),
            (at.row0, self.m),
            (self.lda, self.stride_a),
        )
    }

    /// The same for B: op N stores `k x n` (k inner), T and C store `n x k` (columns inner).
    /// Its slot holds `op(B)[l, col]` at `l · b_pitch + col`.
    #[inline(always)]
    pub fn stage_b(&self, e: u32, at: BlockCoords, l0: u32) -> Staged {
        let (chunk, inner, k_contiguous) = (self.b_chunk, self.b_inner, self.op_b == Op::N as u32);
        let pitches = (self.b_matrix, self.b_pitch);
        self.stage_operand(
            e,
            (chunk, inner),
            k_contiguous,
            pitches,
            (at, l0),
            (at.col0, self.n),
            (self.ldb, self.stride_b),
        )
    }

    /// Either operand, `index` running along C's rows (A) or columns (B).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn stage_operand(
        &self,
        e: u32,
        (chunk, inner): (MagicDiv, MagicDiv),
        k_contiguous: bool,
        (matrix_pitch, pitch): (u32, u32),
        (at, l0): (BlockCoords, u32),
        (first, limit): (u32, u32),
        (ld, stride): (u32, u64),
    ) -> Staged {
        let (matrix, in_matrix) = chunk.div_rem(e);
        let (outer, inner) = inner.div_rem(in_matrix);
        let (index, l) = if k_contiguous { (outer, inner) } else { (inner, outer) };
        let slot = matrix * matrix_pitch + l * pitch + index;
        let (batch, index, l) = (at.first + matrix, first + index, l0 + l);
        let live = batch < self.batches && index < limit && l < self.k;
        let within =
            if k_contiguous { l as u64 + index as u64 * ld as u64 } else { index as u64 + l as u64 * ld as u64 };
        Staged { slot, offset: live.then(|| (self.batch_base + batch as u64) * stride + within) }
    }

    /// Where output `(i, j)` of a thread's register tile lives in C, if it is one of the
    /// block's outputs (not past the tile, the matrix or the batch).
    #[inline(always)]
    pub fn output(&self, at: BlockCoords, t: ThreadCoords, i: u32, j: u32) -> Option<u64> {
        let (in_row, in_col) = (t.row + i * self.thread_rows.divisor, t.col + j * self.thread_cols);
        let (row, col, batch) = (at.row0 + in_row, at.col0 + in_col, at.first + t.matrix);
        let live = t.matrix < self.per_block
            && batch < self.batches
            && in_row < self.bm
            && in_col < self.bn
            && row < self.m
            && col < self.n;
        live.then(|| (self.batch_base + batch as u64) * self.stride_c + row as u64 + col as u64 * self.ldc as u64)
    }

    /// Matrices of the `Whole` item at `at` (`per_block`, fewer at the batch's end).
    #[inline(always)]
    pub fn whole_matrices(&self, at: BlockCoords) -> u32 {
        if self.batches - at.first < self.per_block { self.batches - at.first } else { self.per_block }
    }

    /// What a `Whole` item at `at` copies of A and of B: its matrices' footprints, from the
    /// first matrix's start to the last one's end (within a stage, so 32 bits).
    #[inline(always)]
    pub fn whole_copies(&self, at: BlockCoords) -> [VerbatimCopy; 2] {
        let matrices = self.whole_matrices(at);
        let batch0 = self.batch_base + at.first as u64;
        let copy = |stride: u64, extent: u32, len: u64| {
            VerbatimCopy::new(batch0 * stride, (matrices - 1) * stride as u32 + extent, len)
        };
        [copy(self.stride_a, self.a_extent, self.a_len), copy(self.stride_b, self.b_extent, self.b_len)]
    }

    /// Where output `(i, j)` of a `Whole` thread lies in its matrix of C (`row + col · ldc`,
    /// below 2^31 for the shapes `Whole` takes), if it is one.
    #[inline(always)]
    pub fn whole_output(&self, t: ThreadCoords, i: u32, j: u32) -> Option<u32> {
        let (row, col) = (t.row + i * self.thread_rows.divisor, t.col + j * self.thread_cols);
        (row < self.m && col < self.n).then(|| row + col * self.ldc)
    }

    /// `α · acc + β · c` (β's term only where β is not zero).
    #[inline(always)]
    pub fn epilogue(&self, acc: Complex32, c: impl FnOnce() -> Complex32) -> Complex32 {
        let scaled = self.alpha.mul_add(acc, Complex32::ZERO);
        if self.beta_zero != 0 { scaled } else { self.beta.mul_add(c(), scaled) }
    }
}

// Register arrays are indexed in lockstep by compile-time-constant loop counters (fully
// unrolled); iterator chains over several of them would hide that.
#[cfg(target_arch = "nvptx64")]
#[allow(clippy::needless_range_loop)]
mod kernel {
    use super::{
        BlockCoords, CGEMM_THREADS, CgemmParams, Complex32, DOT_LANES, ELEMENT_THREADS, LARGE_BK, Op,
        POINTWISE_BATCHES, STAGE_SLOTS, ThreadCoords, VerbatimCopy, WHOLE_STAGES, WholeBlock,
    };
    use crate::prelude::*;

    const SLOTS: usize = STAGE_SLOTS as usize;

    /// One complex element of a read-only operand at offset `i`, interleaved (`re` at `p`)
    /// or planar (`re` at `p`, `im` at `p_im`).
    #[inline(always)]
    fn load(planar: bool, p: u64, p_im: u64, i: u64) -> Complex32 {
        if planar {
            Complex32 { re: ldg_nc_f32(p + 4 * i), im: ldg_nc_f32(p_im + 4 * i) }
        } else {
            let [re, im] = ldg_nc_f32x2(p + 8 * i);
            Complex32 { re, im }
        }
    }

    /// `α · acc + β · c` for the interleaved element of C at address `at_c` (read only where
    /// β is not zero).
    #[inline(always)]
    pub(super) fn epilogue_at(p: &CgemmParams, acc: Complex32, at_c: u64) -> Complex32 {
        p.epilogue(acc, || {
            let [re, im] = ld_global_f32x2(at_c);
            Complex32 { re, im }
        })
    }

    /// `α · acc + β · c` stored to C's element `at_c`: interleaved at `c`, or planar (`re` at
    /// `c`, `im` at `c_im`).
    #[inline(always)]
    fn store_output(p: &CgemmParams, planar: bool, (c, c_im): (u64, u64), at_c: u64, acc: Complex32) {
        let value = p.epilogue(acc, || {
            if planar {
                Complex32 { re: ld_global_f32(c + 4 * at_c), im: ld_global_f32(c_im + 4 * at_c) }
            } else {
                let [re, im] = ld_global_f32x2(c + 8 * at_c);
                Complex32 { re, im }
            }
        });
        if planar {
            stg_f32(c + 4 * at_c, value.re);
            stg_f32(c_im + 4 * at_c, value.im);
        } else {
            stg_f32x2(c + 8 * at_c, [value.re, value.im]);
        }
    }

    #[inline(always)]
    fn lds(addr: u32) -> Complex32 {
        let [re, im] = ld_shared_f32x2(addr);
        Complex32 { re, im }
    }

    /// The operands of one step, in A-then-B order, `CGEMM_THREADS` apart from this thread's.
    struct Step {
        values: [Complex32; SLOTS],
    }

    impl Step {
        /// Issues this thread's loads of the step at `l0` of work item `at` (zeros past the
        /// matrices, k or the batch).
        #[inline(always)]
        fn fetch(p: &CgemmParams, at: BlockCoords, l0: u32, ptrs: &[(u64, u64); 2]) -> Step {
            let planar = p.planar != 0;
            let conj = [p.op_a == Op::C as u32, p.op_b == Op::C as u32];
            let staged = p.staged();
            let mut values = [Complex32::ZERO; SLOTS];
            for u in 0..SLOTS {
                let e = thread_idx_x_each_time() + u as u32 * CGEMM_THREADS;
                if e < staged {
                    let (is_a, s) = p.stage(e, at, l0);
                    if let Some(offset) = s.offset {
                        let which = if is_a { 0 } else { 1 };
                        let v = load(planar, ptrs[which].0, ptrs[which].1, offset);
                        values[u] = if conj[which] { v.conj() } else { v };
                    }
                }
            }
            Step { values }
        }

        /// Stores the step into shared memory (after the block is done with the last one).
        #[inline(always)]
        fn store(&self, p: &CgemmParams, at: BlockCoords, l0: u32, smem: u32) {
            let staged = p.staged();
            for u in 0..SLOTS {
                let e = thread_idx_x_each_time() + u as u32 * CGEMM_THREADS;
                if e < staged {
                    let (_, s) = p.stage(e, at, l0);
                    st_shared_f32x2(smem + 8 * s.slot, [self.values[u].re, self.values[u].im]);
                }
            }
        }
    }

    /// One work item per block, k in staged steps: the next step's loads are issued before
    /// the current step is computed, so that memory and arithmetic overlap within the block.
    pub unsafe fn tiled<const TM: usize, const TN: usize>(p: &CgemmParams) {
        let item = block_idx_x();
        if item >= p.items {
            return;
        }
        let me = p.thread_coords(thread_idx_x());
        let planar = p.planar != 0;
        let ptrs = [(to_global(p.a), to_global(p.a_im)), (to_global(p.b), to_global(p.b_im))];
        let (c, c_im) = (to_global(p.c), to_global(p.c_im));
        let smem = smem_base();
        let b_region = smem + 8 * p.per_block * p.a_matrix;
        let (rows, cols) = (p.thread_rows.divisor, p.thread_cols);
        let this_at = p.item_coords(item);

        let mut step = Step::fetch(p, this_at, 0, &ptrs);
        let mut acc = [[Complex32::ZERO; TN]; TM];
        for this_chunk in 0..p.chunks {
            if this_chunk > 0 {
                sync_threads(); // every thread is done with the last step's shared memory
            }
            step.store(p, this_at, this_chunk * p.bk, smem);
            sync_threads();
            if this_chunk + 1 < p.chunks {
                step = Step::fetch(p, this_at, (this_chunk + 1) * p.bk, &ptrs);
            }

            if me.matrix < p.per_round {
                let l0 = this_chunk * p.bk;
                let length = if p.k - l0 < p.bk { p.k - l0 } else { p.bk };
                for round in 0..p.rounds {
                    let matrix = me.matrix + round * p.per_round;
                    let a_mine = smem + 8 * (matrix * p.a_matrix + me.row);
                    let b_mine = b_region + 8 * (matrix * p.b_matrix + me.col);
                    if this_chunk == 0 {
                        acc = [[Complex32::ZERO; TN]; TM];
                    }
                    for l in 0..length {
                        let mut x = [Complex32::ZERO; TM];
                        let mut y = [Complex32::ZERO; TN];
                        for i in 0..TM {
                            x[i] = lds(a_mine + 8 * (l * p.a_pitch + i as u32 * rows));
                        }
                        for j in 0..TN {
                            y[j] = lds(b_mine + 8 * (l * p.b_pitch + j as u32 * cols));
                        }
                        for i in 0..TM {
                            for j in 0..TN {
                                acc[i][j] = x[i].mul_add(y[j], acc[i][j]);
                            }
                        }
                    }
                    if this_chunk + 1 == p.chunks {
                        let t = ThreadCoords { matrix, ..me };
                        for i in 0..TM {
                            for j in 0..TN {
                                if let Some(at_c) = p.output(this_at, t, i as u32, j as u32) {
                                    store_output(p, planar, (c, c_im), at_c, acc[i][j]);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Starts this thread's copies of `Whole` item `at` into the stage at `stage`: pair `q`
    /// of the two copies together (A's, then B's) lands at `stage + 16 · q`, one `cp.async`
    /// each (8 bytes for a pair that ends past its buffer).
    #[inline(always)]
    fn whole_copy<const THREADS: u32, const PAIRS: u32>(p: &CgemmParams, at: BlockCoords, src: [u64; 2], stage: u32) {
        let [a, b] = p.whole_copies(at);
        // B's pair q - a.pairs, addressed from q.
        let starts = [src[0] + 16 * a.first_pair, (src[1] + 16 * b.first_pair).wrapping_sub(16 * a.pairs as u64)];
        let copy = |source: u64, vector: bool, slot: u32| {
            if vector {
                cp_async_f32x4(slot, source, 16);
            } else {
                cp_async_f32x2(slot, source, 8);
            }
        };
        for u in 0..PAIRS {
            let q = thread_idx_x() + u * THREADS;
            if q < a.pairs {
                copy(starts[0] + 16 * q as u64, q < a.vector_pairs, stage + 16 * q);
            } else if q - a.pairs < b.pairs {
                copy(starts[1].wrapping_add(16 * q as u64), q - a.pairs < b.vector_pairs, stage + 16 * q);
            }
        }
    }

    /// Conjugates in place the pairs of `copies` (at `stage`) that this thread copied (with
    /// `BULK`, those of the bulk copies in `cp.async`'s division) and whose operand `conj`
    /// marks; they are complete and visible to it after the wait.
    #[inline(always)]
    fn whole_conjugate<const THREADS: u32, const PAIRS: u32, const BULK: bool>(
        copies: &[VerbatimCopy; 2],
        stage: u32,
        conj: [bool; 2],
    ) {
        // With bulk copies the last pair of a copy that ends past its buffer is written (and
        // conjugated) by hand, by the thread that started the copies.
        let ours = |c: &VerbatimCopy| if BULK { c.vector_pairs } else { c.pairs };
        let [a, b] = [ours(&copies[0]), ours(&copies[1])];
        for u in 0..PAIRS {
            let q = thread_idx_x() + u * THREADS;
            let mine = if q < copies[0].pairs { q < a && conj[0] } else { q - copies[0].pairs < b && conj[1] };
            if mine {
                let [re0, im0, re1, im1] = ld_shared_f32x4(stage + 16 * q);
                st_shared_f32x4(stage + 16 * q, [re0, -im0, re1, -im1]);
            }
        }
    }

    /// Starts the copies of `Whole` item `at` into the stage at `stage` as bulk copies, one
    /// per operand, completing on `bar` (the calling thread's arrival); a last pair that ends
    /// past its buffer is written by hand (conjugated where `conj` says), as `cp.async` would
    /// have placed it.
    #[inline(always)]
    fn whole_bulk_copy(p: &CgemmParams, at: BlockCoords, src: [u64; 2], stage: u32, bar: u32, conj: [bool; 2]) {
        let [a, b] = p.whole_copies(at);
        mbarrier_arrive_expect_tx(bar, 16 * (a.vector_pairs + b.vector_pairs));
        let operand = |copy: VerbatimCopy, source: u64, region: u32, conj: bool| {
            if copy.vector_pairs > 0 {
                cp_async_bulk(region, source + 16 * copy.first_pair, 16 * copy.vector_pairs, bar);
            }
            if copy.vector_pairs < copy.pairs {
                let [re, im] = ldg_f32x2(source + 16 * (copy.first_pair + copy.vector_pairs as u64));
                st_shared_f32x2(region + 16 * copy.vector_pairs, [re, if conj { -im } else { im }]);
                fence_proxy_async_shared();
            }
        };
        operand(a, src[0], stage, conj[0]);
        operand(b, src[1], stage + 16 * a.pairs, conj[1]);
    }

    /// Whole matrices, `per_block` to an item, items grid-stride: both operands' footprints
    /// copied verbatim (by `cp.async`, or with `BULK` by bulk copies) into a ring of
    /// [`WHOLE_STAGES`] stages, the next `WHOLE_STAGES - 1` items' copies in flight while each
    /// thread's register tile of the current one is read through the ops from shared memory.
    pub unsafe fn whole<const TM: usize, const TN: usize, const THREADS: u32, const PAIRS: u32, const BULK: bool>(
        p: &CgemmParams,
    ) {
        let block = WholeBlock { threads: THREADS, pairs: PAIRS, bulk: BULK };
        // Bulk copies and `expect_tx` need sm_90; other architectures copy by `cp.async`.
        let bulk = BULK && cfg!(target_feature = "sm_90");
        let stage_bytes = 8 * block.stage();
        let mut item = block_idx_x();
        if item >= p.items {
            return;
        }
        let src = [to_global(p.a), to_global(p.b)];
        let c = to_global(p.c);
        let smem = smem_base();
        let me = p.thread_coords(thread_idx_x());
        let conj = [p.op_a == Op::C as u32, p.op_b == Op::C as u32];
        // The stages' mbarriers, after them; one thread starts every bulk copy.
        let bars = smem + WHOLE_STAGES * stage_bytes;
        let starter = thread_idx_x() == 0;
        if bulk {
            if starter {
                for s in 0..WHOLE_STAGES {
                    mbarrier_init(bars + 8 * s, 1);
                }
                fence_mbarrier_init();
            }
            sync_threads();
        }
        let start = |item: u32, stage: u32| {
            if !bulk {
                whole_copy::<THREADS, PAIRS>(p, p.item_coords(item), src, smem + stage * stage_bytes);
            } else if starter {
                whole_bulk_copy(p, p.item_coords(item), src, smem + stage * stage_bytes, bars + 8 * stage, conj);
            }
        };
        // op(A)[row, l] at row · a_row + l · a_l of its matrix (conjugated in the stage).
        let (a_row, a_l) = if p.op_a == Op::N as u32 { (1, p.lda) } else { (p.lda, 1) };
        let (b_l, b_col) = if p.op_b == Op::N as u32 { (1, p.ldb) } else { (p.ldb, 1) };
        let (rows, cols) = (p.thread_rows.divisor, p.thread_cols);
        // Byte offsets in a matrix's footprint; rows (columns) past the matrix read its last
        // one and their outputs are dropped.
        let mut a_at = [0u32; TM];
        for i in 0..TM {
            let row = me.row + i as u32 * rows;
            a_at[i] = 8 * (if row < p.m { row } else { p.m - 1 }) * a_row;
        }
        let mut b_at = [0u32; TN];
        for j in 0..TN {
            let col = me.col + j as u32 * cols;
            b_at[j] = 8 * (if col < p.n { col } else { p.n - 1 }) * b_col;
        }
        let (a_step, b_step) = (8 * a_l, 8 * b_l);

        // One `cp.async` commit per item, empty or not, keeps the group count uniform.
        let mut ahead = item;
        for s in 0..WHOLE_STAGES - 1 {
            if ahead < p.items {
                start(ahead, s);
            }
            if !bulk {
                cp_async_commit();
            }
            ahead += grid_dim_x();
        }
        // The parity of the stages' mbarrier phases this round of the ring waits for.
        let (mut stage, mut parity) = (0, 0);
        loop {
            let at = p.item_coords(item);
            let copies = p.whole_copies(at);
            let here = smem + stage * stage_bytes;
            if bulk {
                mbarrier_wait_parity(bars + 8 * stage, parity);
            } else {
                cp_async_wait_group::<{ WHOLE_STAGES - 2 }>();
            }
            if conj[0] || conj[1] {
                whole_conjugate::<THREADS, PAIRS, BULK>(&copies, here, conj);
                if bulk {
                    // The stage is written again by bulk copies.
                    fence_proxy_async_shared();
                }
            }
            sync_threads();
            // Every thread is past the item before: its stage takes the copy furthest ahead.
            let free = if stage == 0 { WHOLE_STAGES - 1 } else { stage - 1 };
            if ahead < p.items {
                start(ahead, free);
            }
            if !bulk {
                cp_async_commit();
            }
            ahead += grid_dim_x();

            let matrices = p.whole_matrices(at);
            let a_first = here + 8 * copies[0].odd;
            let b_first = here + 8 * copies[0].slots() + 8 * copies[1].odd;
            let c_item = c + 8 * (p.batch_base + at.first as u64) * p.stride_c;
            // Within a stage, so 32 bits.
            let (a_matrix, b_matrix) = (8 * p.stride_a as u32, 8 * p.stride_b as u32);
            let mut matrix = me.matrix;
            while me.matrix < p.per_round && matrix < matrices {
                // Opaque, so that LLVM keeps one address per operand element and steps it; it
                // had split off the stage's offset and added it again at every load.
                let mut x_at = [0u32; TM];
                for i in 0..TM {
                    x_at[i] = crate::opaque(a_first + matrix * a_matrix + a_at[i]);
                }
                let mut y_at = [0u32; TN];
                for j in 0..TN {
                    y_at[j] = crate::opaque(b_first + matrix * b_matrix + b_at[j]);
                }
                let mut acc = [[Complex32::ZERO; TN]; TM];
                let mut l = p.k;
                loop {
                    let mut x = [Complex32::ZERO; TM];
                    let mut y = [Complex32::ZERO; TN];
                    for i in 0..TM {
                        x[i] = lds(x_at[i]);
                        x_at[i] += a_step;
                    }
                    for j in 0..TN {
                        y[j] = lds(y_at[j]);
                        y_at[j] += b_step;
                    }
                    for i in 0..TM {
                        for j in 0..TN {
                            acc[i][j] = x[i].mul_add(y[j], acc[i][j]);
                        }
                    }
                    l -= 1;
                    if l == 0 {
                        break;
                    }
                }
                let c_matrix = c_item + 8 * matrix as u64 * p.stride_c;
                for i in 0..TM {
                    for j in 0..TN {
                        if let Some(at_c) = p.whole_output(me, i as u32, j as u32) {
                            let at_c = c_matrix + 8 * at_c as u64;
                            let value = epilogue_at(p, acc[i][j], at_c);
                            stg_f32x2(at_c, [value.re, value.im]);
                        }
                    }
                }
                matrix += p.per_round;
            }
            item += grid_dim_x();
            // The groups still open are empty: they were for items past the last.
            if item >= p.items {
                return;
            }
            stage = if stage + 1 == WHOLE_STAGES { 0 } else { stage + 1 };
            parity ^= (stage == 0) as u32;
        }
    }

    /// One operand's part of a `Large` step for this thread: `N` elements `CGEMM_THREADS`
    /// apart in the chunk's stored order. Element `u` lies at index `index + u · d_index`
    /// along the tile's rows (columns) and at `l + u · d_l` in the chunk (one of the steps is
    /// zero); only the first element's place is kept, the rest follow from constants.
    struct LargeOperand<const N: usize, const KC: bool> {
        index: u32,
        l: u32,
        /// Offset of element 0 from the tile's first element at `l0 = 0`.
        offset: u64,
        ld: u32,
        /// The tile's first row (column) and the matrix's rows (columns).
        first: u32,
        limit: u32,
    }

    impl<const N: usize, const KC: bool> LargeOperand<N, KC> {
        /// Steps per element along the tile's rows (columns) and along k.
        const D_INDEX: u32 = if KC { CGEMM_THREADS / LARGE_BK } else { 0 };

        #[inline(always)]
        fn d_l(extent: u32) -> u32 {
            if KC { 0 } else { CGEMM_THREADS / extent }
        }

        #[inline(always)]
        fn new(extent: u32, ld: u32, first: u32, limit: u32) -> Self {
            let (index, l) = super::large_element(thread_idx_x(), extent, KC);
            let offset = if KC { l as u64 + index as u64 * ld as u64 } else { index as u64 + l as u64 * ld as u64 };
            LargeOperand { index, l, offset, ld, first, limit }
        }

        /// Loads chunk `l0` from `base` (the tile's first element): zeros past the matrix or k,
        /// conjugated where `conj`.
        #[inline(always)]
        fn fetch(&self, extent: u32, base: u64, l0: u32, k: u32, conj: bool) -> [Complex32; N] {
            let step = if KC { l0 as u64 } else { l0 as u64 * self.ld as u64 };
            // Offset from element u to u + 1.
            let d_offset =
                if KC { Self::D_INDEX as u64 * self.ld as u64 } else { Self::d_l(extent) as u64 * self.ld as u64 };
            let at = base + 8 * (self.offset + step);
            let mut v = [Complex32::ZERO; N];
            for u in 0..N as u32 {
                let index = self.first + self.index + u * Self::D_INDEX;
                let l = l0 + self.l + u * Self::d_l(extent);
                if index < self.limit && l < k {
                    let [re, im] = ldg_nc_f32x2(at + 8 * u as u64 * d_offset);
                    v[u as usize] = Complex32 { re, im: if conj { -im } else { im } };
                }
            }
            v
        }

        /// Stores a chunk into `region`, which holds `op(X)[index, l]` at `l · pitch + index`.
        #[inline(always)]
        fn store(&self, extent: u32, pitch: u32, region: u32, v: &[Complex32; N]) {
            let slot = self.l * pitch + self.index;
            let d_slot = Self::d_l(extent) * pitch + Self::D_INDEX;
            for u in 0..N as u32 {
                st_shared_f32x2(region + 8 * (slot + u * d_slot), [v[u as usize].re, v[u as usize].im]);
            }
        }
    }

    /// One `16·TM x 16·TN` tile of one matrix per block (16 x 16 threads, thread `(tx, ty)`
    /// owning rows `tx + 16 i` and columns `ty + 16 j`), k in chunks of `LARGE_BK` through two
    /// shared-memory stages: the next chunk's loads are in flight while the current one is
    /// computed, then stored into the other stage; one barrier per chunk. `AK` / `BK`: A / B stored
    /// with k contiguous.
    pub unsafe fn large<const TM: usize, const TN: usize, const AK: bool, const BK: bool>(p: &CgemmParams) {
        let item = block_idx_x();
        if item >= p.items {
            return;
        }
        let at = p.item_coords(item);
        let (bm, bn) = (16 * TM as u32, 16 * TN as u32);
        let (a_pitch, b_pitch) = (bm + 1, bn + 1);
        let batch = p.batch_base + at.first as u64;
        // Each thread stages TM elements of A's chunk (bm x LARGE_BK) and TN of B's.
        let a_op = LargeOperand::<TM, AK>::new(bm, p.lda, at.row0, p.m);
        let b_op = LargeOperand::<TN, BK>::new(bn, p.ldb, at.col0, p.n);
        let a_tile =
            to_global(p.a) + 8 * (batch * p.stride_a + if AK { at.row0 as u64 * p.lda as u64 } else { at.row0 as u64 });
        // B's chunk is LARGE_BK x bn; stored with k contiguous it runs down its columns.
        let b_tile =
            to_global(p.b) + 8 * (batch * p.stride_b + if BK { at.col0 as u64 * p.ldb as u64 } else { at.col0 as u64 });
        let (conj_a, conj_b) = (p.op_a == Op::C as u32, p.op_b == Op::C as u32);
        // Two stages (A's chunk, then B's), alternating: chunk c + 1 is stored into one while
        // chunk c is read from the other, one barrier per chunk.
        let stage_bytes = 8 * LARGE_BK * (a_pitch + b_pitch);
        let (tx, ty) = (thread_idx_x() % 16, thread_idx_x() / 16);
        let stage = |s: u32| {
            let a_region = smem_base() + s * stage_bytes;
            (a_region, a_region + 8 * LARGE_BK * a_pitch)
        };

        let (a0, b0) = stage(0);
        a_op.store(bm, a_pitch, a0, &a_op.fetch(bm, a_tile, 0, p.k, conj_a));
        b_op.store(bn, b_pitch, b0, &b_op.fetch(bn, b_tile, 0, p.k, conj_b));
        sync_threads();
        let mut acc = [[Complex32::ZERO; TN]; TM];
        let (mut l0, mut current) = (0, 0);
        while l0 < p.k {
            let more = l0 + LARGE_BK < p.k;
            let (mut a_next, mut b_next) = ([Complex32::ZERO; TM], [Complex32::ZERO; TN]);
            if more {
                a_next = a_op.fetch(bm, a_tile, l0 + LARGE_BK, p.k, conj_a);
                b_next = b_op.fetch(bn, b_tile, l0 + LARGE_BK, p.k, conj_b);
            }
            let (a_region, b_region) = stage(current);
            let (a_mine, b_mine) = (a_region + 8 * tx, b_region + 8 * ty);
            for l in 0..LARGE_BK {
                let mut x = [Complex32::ZERO; TM];
                let mut y = [Complex32::ZERO; TN];
                for i in 0..TM {
                    x[i] = lds(a_mine + 8 * (l * a_pitch + 16 * i as u32));
                }
                for j in 0..TN {
                    y[j] = lds(b_mine + 8 * (l * b_pitch + 16 * j as u32));
                }
                for i in 0..TM {
                    for j in 0..TN {
                        acc[i][j] = x[i].mul_add(y[j], acc[i][j]);
                    }
                }
            }
            if more {
                // The other stage was last read for chunk c - 1, before the last barrier.
                let (a_other, b_other) = stage(1 - current);
                a_op.store(bm, a_pitch, a_other, &a_next);
                b_op.store(bn, b_pitch, b_other, &b_next);
                sync_threads();
            }
            current = 1 - current;
            l0 += LARGE_BK;
        }

        let c = to_global(p.c);
        for i in 0..TM {
            for j in 0..TN {
                let (row, col) = (at.row0 + tx + 16 * i as u32, at.col0 + ty + 16 * j as u32);
                if row < p.m && col < p.n {
                    let at_c = c + 8 * (batch * p.stride_c + row as u64 + col as u64 * p.ldc as u64);
                    let value = epilogue_at(p, acc[i][j], at_c);
                    stg_f32x2(at_c, [value.re, value.im]);
                }
            }
        }
    }

    /// `ROWS` outputs of one column per thread (work item): its rows of `op(A)` and column of
    /// `op(B)` read straight from global memory (through L1, which holds what neighbouring
    /// threads share), `UNROLL` k-steps of loads in flight at a time; each pair of rows as one
    /// 16-byte load where A's rows are contiguous and their pairs aligned (`a_pairs`), the rows
    /// dealt out over the warp where [`CgemmParams::element_row`] can.
    pub unsafe fn element<const ROWS: usize, const UNROLL: usize>(p: &CgemmParams) {
        let item = block_idx_x() * ELEMENT_THREADS + thread_idx_x();
        if item >= p.items {
            return;
        }
        let at = p.item_coords(item);
        // Every row inside the matrix, so each pair's second element lies inside the buffer.
        if ROWS.is_multiple_of(2) && p.a_pairs != 0 && p.op_a == Op::N as u32 && at.row0 + ROWS as u32 <= p.m {
            element_rows::<ROWS, UNROLL, true>(p, at);
        } else {
            element_rows::<ROWS, UNROLL, false>(p, at);
        }
    }

    #[inline(always)]
    fn element_rows<const ROWS: usize, const UNROLL: usize, const PAIRED: bool>(p: &CgemmParams, at: BlockCoords) {
        let batch = p.batch_base + at.first as u64;
        let col = at.col0 as u64;
        let planar = p.planar != 0;
        let rows: [u32; ROWS] = core::array::from_fn(|r| p.element_row(at, ROWS as u32, r as u32));
        // op(A)[row, l] at a_row[r] + l · a_l; op(B)[l, col] at b_col + l · b_l. Rows past the
        // matrix read its last one; their outputs are dropped.
        let a_l = if p.op_a == Op::N as u32 { p.lda as u64 } else { 1 };
        let mut a_row = [0u64; ROWS];
        for r in 0..ROWS {
            let row = rows[r];
            let row = (if row < p.m { row } else { p.m - 1 }) as u64;
            a_row[r] = batch * p.stride_a + if p.op_a == Op::N as u32 { row } else { row * p.lda as u64 };
        }
        let (b_col, b_l) = if p.op_b == Op::N as u32 { (col * p.ldb as u64, 1) } else { (col, p.ldb as u64) };
        let b_col = batch * p.stride_b + b_col;
        let sign = |op: u32| if op == Op::C as u32 { -1.0 } else { 1.0 };
        let (a_sign, b_sign) = (sign(p.op_a), sign(p.op_b));
        let (a, a_im, b, b_im) = (to_global(p.a), to_global(p.a_im), to_global(p.b), to_global(p.b_im));
        let mut acc = [Complex32::ZERO; ROWS];
        let mut l = 0;
        while l < p.k {
            let mut x = [[Complex32::ZERO; ROWS]; UNROLL];
            let mut y = [Complex32::ZERO; UNROLL];
            for u in 0..UNROLL {
                if l + (u as u32) < p.k {
                    let ll = (l + u as u32) as u64;
                    if PAIRED {
                        for r in (0..ROWS).step_by(2) {
                            let [re0, im0, re1, im1] = ldg_nc_f32x4(a + 8 * (a_row[r] + ll * a_l));
                            x[u][r] = Complex32 { re: re0, im: im0 };
                            x[u][r + 1] = Complex32 { re: re1, im: im1 };
                        }
                    } else {
                        for r in 0..ROWS {
                            x[u][r] = load(planar, a, a_im, a_row[r] + ll * a_l);
                        }
                    }
                    y[u] = load(planar, b, b_im, b_col + ll * b_l);
                }
            }
            for u in 0..UNROLL {
                y[u].im *= b_sign;
                for r in 0..ROWS {
                    x[u][r].im *= a_sign;
                    acc[r] = x[u][r].mul_add(y[u], acc[r]);
                }
            }
            l += UNROLL as u32;
        }
        let (c, c_im) = (to_global(p.c), to_global(p.c_im));
        for r in 0..ROWS {
            let row = rows[r];
            if row >= p.m {
                break;
            }
            let at_c = batch * p.stride_c + row as u64 + col * p.ldc as u64;
            store_output(p, planar, (c, c_im), at_c, acc[r]);
        }
    }

    /// Two batches of 1 x 1 products per thread (work item): `α·op(a)·op(b) + β·c` for
    /// batches `2·item` and `2·item + 1` of the launch, as one 16-byte load of each operand
    /// and one store where the operands are packed (batch strides 1), interleaved and their
    /// pairs 16-byte aligned, else element by element through the strides.
    pub unsafe fn pointwise(p: &CgemmParams) {
        let item = block_idx_x() * CGEMM_THREADS + thread_idx_x();
        if item >= p.items {
            return;
        }
        let first = p.batch_base + (POINTWISE_BATCHES * item) as u64;
        let sign = |op: u32| if op == Op::C as u32 { -1.0 } else { 1.0 };
        let (a_sign, b_sign) = (sign(p.op_a), sign(p.op_b));
        let (a, a_im, b, b_im) = (to_global(p.a), to_global(p.a_im), to_global(p.b), to_global(p.b_im));
        let c = (to_global(p.c), to_global(p.c_im));
        let both = POINTWISE_BATCHES * item + 1 < p.batches;
        let product = |x: Complex32, y: Complex32| {
            Complex32 { re: x.re, im: a_sign * x.im } * Complex32 { re: y.re, im: b_sign * y.im }
        };
        if both && p.pointwise_packed() {
            let [ar0, ai0, ar1, ai1] = ldg_nc_f32x4(a + 8 * first);
            let [br0, bi0, br1, bi1] = ldg_nc_f32x4(b + 8 * first);
            let at_c = c.0 + 8 * first;
            let v0 = epilogue_at(p, product(Complex32 { re: ar0, im: ai0 }, Complex32 { re: br0, im: bi0 }), at_c);
            let v1 = epilogue_at(p, product(Complex32 { re: ar1, im: ai1 }, Complex32 { re: br1, im: bi1 }), at_c + 8);
            stg_f32x4(at_c, [v0.re, v0.im, v1.re, v1.im]);
        } else {
            let planar = p.planar != 0;
            for h in 0..1 + both as u64 {
                let batch = first + h;
                let x = load(planar, a, a_im, batch * p.stride_a);
                let y = load(planar, b, b_im, batch * p.stride_b);
                let acc = product(x, y);
                store_output(p, planar, c, batch * p.stride_c, acc);
            }
        }
    }

    /// One packed `S x S` matrix per thread (work item), `S` even: A and B loaded whole into
    /// registers as 16-byte pairs of rows, read through the ops, and C's outputs stored the
    /// same way.
    pub unsafe fn register<const S: usize>(p: &CgemmParams) {
        let item = block_idx_x() * CGEMM_THREADS + thread_idx_x();
        if item >= p.items {
            return;
        }
        let at = 8 * (p.batch_base + item as u64) * (S * S) as u64;
        let (x, y) = (load_square::<S>(to_global(p.a) + at), load_square::<S>(to_global(p.b) + at));
        let sign = |op: u32| if op == Op::C as u32 { -1.0 } else { 1.0 };
        // op(A)[i][l] and op(B)[l][j] from the stored columns x[col][row], y[col][row].
        let (a_t, b_t) = (p.op_a != Op::N as u32, p.op_b != Op::N as u32);
        let (a_sign, b_sign) = (sign(p.op_a), sign(p.op_b));
        let (mut op_a, mut op_b) = ([[Complex32::ZERO; S]; S], [[Complex32::ZERO; S]; S]);
        for u in 0..S {
            for v in 0..S {
                let a = if a_t { x[u][v] } else { x[v][u] };
                op_a[u][v] = Complex32 { re: a.re, im: a_sign * a.im };
                let b = if b_t { y[u][v] } else { y[v][u] };
                op_b[u][v] = Complex32 { re: b.re, im: b_sign * b.im };
            }
        }
        let c = to_global(p.c) + at;
        for j in 0..S {
            let mut column = [Complex32::ZERO; S];
            for (i, out) in column.iter_mut().enumerate() {
                let mut acc = Complex32::ZERO;
                for l in 0..S {
                    acc = op_a[i][l].mul_add(op_b[l][j], acc);
                }
                let at_c = c + 8 * (i + j * S) as u64;
                *out = epilogue_at(p, acc, at_c);
            }
            let at_c = c + 8 * (j * S) as u64;
            for i in (0..S).step_by(2) {
                stg_f32x4(at_c + 8 * i as u64, [column[i].re, column[i].im, column[i + 1].re, column[i + 1].im]);
            }
        }
    }

    /// A packed `S x S` column-major matrix at `base` (`S` even, 16-byte aligned: the
    /// launcher checks) as its columns, `[col][row]`, by 16-byte loads of row pairs.
    #[inline(always)]
    fn load_square<const S: usize>(base: u64) -> [[Complex32; S]; S] {
        let mut m = [[Complex32::ZERO; S]; S];
        for (col, column) in m.iter_mut().enumerate() {
            let at = base + 8 * (col * S) as u64;
            for r in (0..S).step_by(2) {
                let [re0, im0, re1, im1] = ldg_nc_f32x4(at + 8 * r as u64);
                column[r] = Complex32 { re: re0, im: im0 };
                column[r + 1] = Complex32 { re: re1, im: im1 };
            }
        }
        m
    }

    /// One output per warp (work item = output): the lanes stride along k, two k-steps per
    /// 16-byte load of each operand where both are contiguous along k and their pairs aligned
    /// (`a_pairs`, `b_pairs`), and the partial sums meet by shuffles.
    pub unsafe fn dot(p: &CgemmParams) {
        let item = block_idx_x() * (CGEMM_THREADS / DOT_LANES) + thread_idx_x() / DOT_LANES;
        // Uniform over the warp, so whole warps leave together and the shuffles see all lanes.
        if item >= p.items {
            return;
        }
        let at = p.item_coords(item);
        let batch = p.batch_base + at.first as u64;
        let (row, col) = (at.row0 as u64, at.col0 as u64);
        // op(A)[row, l] at a_row + l · a_l; op(B)[l, col] at b_col + l · b_l.
        let (a_row, a_l) = if p.op_a == Op::N as u32 { (row, p.lda as u64) } else { (row * p.lda as u64, 1) };
        let (b_col, b_l) = if p.op_b == Op::N as u32 { (col * p.ldb as u64, 1) } else { (col, p.ldb as u64) };
        let (a_row, b_col) = (batch * p.stride_a + a_row, batch * p.stride_b + b_col);
        let mut acc = if p.a_pairs != 0 && p.b_pairs != 0 && a_l == 1 && b_l == 1 {
            dot_lanes::<2>(p, a_row, a_l, b_col, b_l)
        } else {
            dot_lanes::<1>(p, a_row, a_l, b_col, b_l)
        };
        let mut delta = DOT_LANES / 2;
        while delta > 0 {
            acc.re += shfl_down_f32(acc.re, delta);
            acc.im += shfl_down_f32(acc.im, delta);
            delta /= 2;
        }
        if thread_idx_x().is_multiple_of(DOT_LANES) {
            let c = (to_global(p.c), to_global(p.c_im));
            store_output(p, p.planar != 0, c, batch * p.stride_c + row + col * p.ldc as u64, acc);
        }
    }

    /// This lane's part of a `Dot` output: k-steps `STEP · lane + 32 · STEP · j (+ 1)`, four
    /// strides of the warp in flight at a time; `STEP` 2 reads each operand's pair as one
    /// 16-byte load (8 bytes for a last k-step of its own).
    #[inline(always)]
    fn dot_lanes<const STEP: usize>(p: &CgemmParams, a_row: u64, a_l: u64, b_col: u64, b_l: u64) -> Complex32 {
        const UNROLL: usize = 4;
        let stride = DOT_LANES * STEP as u32;
        let planar = p.planar != 0;
        let sign = |op: u32| if op == Op::C as u32 { -1.0 } else { 1.0 };
        let (a_sign, b_sign) = (sign(p.op_a), sign(p.op_b));
        let (a, a_im, b, b_im) = (to_global(p.a), to_global(p.a_im), to_global(p.b), to_global(p.b_im));
        let mut acc = Complex32::ZERO;
        let mut l0 = (thread_idx_x() % DOT_LANES) * STEP as u32;
        while l0 < p.k {
            let mut x = [[Complex32::ZERO; STEP]; UNROLL];
            let mut y = [[Complex32::ZERO; STEP]; UNROLL];
            for u in 0..UNROLL {
                let l = l0 + u as u32 * stride;
                if STEP == 2 && l + 1 < p.k {
                    let [re0, im0, re1, im1] = ldg_nc_f32x4(a + 8 * (a_row + l as u64));
                    x[u][0] = Complex32 { re: re0, im: im0 };
                    x[u][STEP - 1] = Complex32 { re: re1, im: im1 };
                    let [re0, im0, re1, im1] = ldg_nc_f32x4(b + 8 * (b_col + l as u64));
                    y[u][0] = Complex32 { re: re0, im: im0 };
                    y[u][STEP - 1] = Complex32 { re: re1, im: im1 };
                } else if l < p.k {
                    x[u][0] = load(planar, a, a_im, a_row + l as u64 * a_l);
                    y[u][0] = load(planar, b, b_im, b_col + l as u64 * b_l);
                }
            }
            for u in 0..UNROLL {
                for s in 0..STEP {
                    x[u][s].im *= a_sign;
                    y[u][s].im *= b_sign;
                    acc = x[u][s].mul_add(y[u][s], acc);
                }
            }
            l0 += UNROLL as u32 * stride;
        }
        acc
    }
}
