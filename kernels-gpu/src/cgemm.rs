//! Batched complex GEMM, `C[b] = α·op(A[b])·op(B[b]) + β·C[b]`, complex f32, column-major
//! (the host turns row-major problems into column-major ones), interleaved or planar storage.
//! Launched by `host/cgemm.rs`.
//!
//! This is the element-per-thread kernel: each thread computes one element of one C, its
//! `k` products read through L1, which holds the small matrices a warp shares. The flat
//! index over (batch, column, row) is unpacked with magic division; a launch covers at most
//! `MAX_LAUNCH_ELEMENTS` outputs, from batch `batch_base` on, and the host issues as many
//! launches as the batch needs.

use crate::MagicDiv;
use bytemuck::{Pod, Zeroable};

/// A complex f32, laid out as `re, im` (the interleaved storage cuBLAS and FFT libraries use).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct Complex32 {
    pub re: f32,
    pub im: f32,
}

impl Complex32 {
    pub const ZERO: Self = Complex32 { re: 0.0, im: 0.0 };
    pub const ONE: Self = Complex32 { re: 1.0, im: 0.0 };

    pub const fn new(re: f32, im: f32) -> Self {
        Complex32 { re, im }
    }

    #[inline(always)]
    pub fn conj(self) -> Self {
        Complex32 { re: self.re, im: -self.im }
    }

    /// `self · b + acc`, with one rounding per real multiply-add (f32 FMA on the GPU).
    #[inline(always)]
    pub fn mul_add(self, b: Self, acc: Self) -> Self {
        Complex32 {
            re: fma(-self.im, b.im, fma(self.re, b.re, acc.re)),
            im: fma(self.im, b.re, fma(self.re, b.im, acc.im)),
        }
    }
}

// Safety: a plain pair of f32 (Pod), valid for any bits, as cudarc requires of buffer elements.
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl cudarc::driver::DeviceRepr for Complex32 {}
#[cfg(not(target_arch = "nvptx64"))]
unsafe impl cudarc::driver::ValidAsZeroBits for Complex32 {}

#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    core::intrinsics::fmaf32(a, b, c)
}

#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    // Host builds only run this in tests; a separate multiply and add is close enough there.
    a * b + c
}

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

    /// Element `(row, col)` of `op(X)`, X column-major with leading dimension `ld`, read by `load`.
    #[inline(always)]
    pub fn element(self, row: u64, col: u64, ld: u64, load: impl Fn(u64) -> Complex32) -> Complex32 {
        match self {
            Op::N => load(row + col * ld),
            Op::T => load(col + row * ld),
            Op::C => load(col + row * ld).conj(),
        }
    }
}

/// Outputs one launch covers at most (the flat index is 32 bits).
pub const MAX_LAUNCH_ELEMENTS: u64 = 1 << 31;
/// Threads per block.
pub const CGEMM_THREADS: u32 = 256;

/// Parameters of every cgemm kernel, passed by value. Addresses are device pointers; for
/// planar storage `*_im` hold the imaginary parts and the main pointers the real parts.
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
    pub alpha: Complex32,
    pub beta: Complex32,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
    /// Outputs of this launch: `batches · m · n`.
    pub elements: u32,
    /// Whether β is zero: C is then not read (it may hold anything, NaN included).
    pub beta_zero: u32,
    /// Divides a flat output index by `m · n` (the batch) and by `m` (the column).
    pub per_matrix: MagicDiv,
    pub per_column: MagicDiv,
}

/// An output element of a launch: batch (from `batch_base`), row and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementCoords {
    pub batch: u64,
    pub row: u32,
    pub col: u32,
}

impl CgemmParams {
    /// Inverse of `((batch - batch_base) · n + col) · m + row`.
    #[inline(always)]
    pub fn element_coords(&self, flat: u32) -> ElementCoords {
        let (batch, in_matrix) = self.per_matrix.div_rem(flat);
        let (col, row) = self.per_column.div_rem(in_matrix);
        ElementCoords { batch: self.batch_base + batch as u64, row, col }
    }

    /// `α · Σ op(A)[row, l] · op(B)[l, col] + β · C[row, col]` for one element, reading the
    /// operands through `a`, `b` and `c` (offsets from the buffers' starts). The kernels pass
    /// constant ops, which inlining folds away.
    #[inline(always)]
    pub fn element(
        &self,
        op_a: Op,
        op_b: Op,
        at: ElementCoords,
        a: impl Fn(u64) -> Complex32,
        b: impl Fn(u64) -> Complex32,
        c: impl Fn(u64) -> Complex32,
    ) -> Complex32 {
        let (row, col) = (at.row as u64, at.col as u64);
        let (a_base, b_base) = (at.batch * self.stride_a, at.batch * self.stride_b);
        let mut acc = Complex32::ZERO;
        for l in 0..self.k as u64 {
            let x = op_a.element(row, l, self.lda as u64, |i| a(a_base + i));
            let y = op_b.element(l, col, self.ldb as u64, |i| b(b_base + i));
            acc = x.mul_add(y, acc);
        }
        let scaled = self.alpha.mul_add(acc, Complex32::ZERO);
        if self.beta_zero != 0 { scaled } else { self.beta.mul_add(c(self.c_offset(at)), scaled) }
    }

    /// Where an output element lives in C.
    #[inline(always)]
    pub fn c_offset(&self, at: ElementCoords) -> u64 {
        at.batch * self.stride_c + at.row as u64 + at.col as u64 * self.ldc as u64
    }
}

/// One entry point of the element kernel: its ops and storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgemmKernel {
    pub name: &'static str,
    pub op_a: Op,
    pub op_b: Op,
    pub planar: bool,
}

macro_rules! cgemm_kernels {
    ($(($name:ident, $a:ident, $b:ident, $planar:literal)),* $(,)?) => {
        /// Every cgemm entry point in the PTX.
        pub const CGEMM_KERNELS: &[CgemmKernel] = &[
            $(CgemmKernel { name: stringify!($name), op_a: Op::$a, op_b: Op::$b, planar: $planar }),*
        ];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::Op;
            $(
                #[unsafe(no_mangle)]
                pub unsafe extern "ptx-kernel" fn $name(p: super::CgemmParams) {
                    unsafe { super::kernel::element_per_thread::<{ Op::$a as u32 }, { Op::$b as u32 }, $planar>(&p) }
                }
            )*
        }
    };
}

cgemm_kernels!(
    (cgemm_elem_nn, N, N, false),
    (cgemm_elem_nt, N, T, false),
    (cgemm_elem_nc, N, C, false),
    (cgemm_elem_tn, T, N, false),
    (cgemm_elem_tt, T, T, false),
    (cgemm_elem_tc, T, C, false),
    (cgemm_elem_cn, C, N, false),
    (cgemm_elem_ct, C, T, false),
    (cgemm_elem_cc, C, C, false),
    (cgemm_elem_nn_planar, N, N, true),
    (cgemm_elem_nt_planar, N, T, true),
    (cgemm_elem_nc_planar, N, C, true),
    (cgemm_elem_tn_planar, T, N, true),
    (cgemm_elem_tt_planar, T, T, true),
    (cgemm_elem_tc_planar, T, C, true),
    (cgemm_elem_cn_planar, C, N, true),
    (cgemm_elem_ct_planar, C, T, true),
    (cgemm_elem_cc_planar, C, C, true),
);

/// The kernel for a pair of ops and a storage.
pub fn cgemm_kernel(op_a: Op, op_b: Op, planar: bool) -> &'static CgemmKernel {
    CGEMM_KERNELS
        .iter()
        .find(|k| k.op_a == op_a && k.op_b == op_b && k.planar == planar)
        .expect("CGEMM_KERNELS covers every pair of ops in both storages")
}

#[cfg(target_arch = "nvptx64")]
mod kernel {
    use super::{CgemmParams, Complex32, Op};
    use crate::prelude::*;

    /// The `Op` a const-generic kernel was instantiated with.
    #[inline(always)]
    const fn op(code: u32) -> Op {
        match code {
            0 => Op::N,
            1 => Op::T,
            _ => Op::C,
        }
    }

    /// One complex element of a read-only operand at offset `i`, interleaved (`re` at `p`)
    /// or planar (`re` at `p`, `im` at `p_im`).
    #[inline(always)]
    fn load<const PLANAR: bool>(p: u64, p_im: u64, i: u64) -> Complex32 {
        if PLANAR {
            Complex32 { re: ldg_nc_f32(p + 4 * i), im: ldg_nc_f32(p_im + 4 * i) }
        } else {
            let [re, im] = ldg_nc_f32x2(p + 8 * i);
            Complex32 { re, im }
        }
    }

    /// The same for C, which the launch writes: coherent loads.
    #[inline(always)]
    fn load_c<const PLANAR: bool>(p: u64, p_im: u64, i: u64) -> Complex32 {
        if PLANAR {
            Complex32 { re: ld_global_f32(p + 4 * i), im: ld_global_f32(p_im + 4 * i) }
        } else {
            let [re, im] = ld_global_f32x2(p + 8 * i);
            Complex32 { re, im }
        }
    }

    pub unsafe fn element_per_thread<const OPA: u32, const OPB: u32, const PLANAR: bool>(p: &CgemmParams) {
        let flat = block_idx_x() * block_dim_x() + thread_idx_x();
        if flat >= p.elements {
            return;
        }
        let at = p.element_coords(flat);
        let (a, a_im, b, b_im) = (to_global(p.a), to_global(p.a_im), to_global(p.b), to_global(p.b_im));
        let (c, c_im) = (to_global(p.c), to_global(p.c_im));
        let value = p.element(
            op(OPA),
            op(OPB),
            at,
            |i| load::<PLANAR>(a, a_im, i),
            |i| load::<PLANAR>(b, b_im, i),
            |i| load_c::<PLANAR>(c, c_im, i),
        );
        let at_c = p.c_offset(at);
        if PLANAR {
            stg_f32(c + 4 * at_c, value.re);
            stg_f32(c_im + 4 * at_c, value.im);
        } else {
            stg_f32x2(c + 8 * at_c, [value.re, value.im]);
        }
    }
}
