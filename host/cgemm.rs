//! Batched complex GEMM, `C[b] = α·op(A[b])·op(B[b]) + β·C[b]` for `b < batch`, complex f32,
//! column- or row-major, interleaved ([`Complex32`]) or planar (split real and imaginary)
//! storage, any leading dimensions and batch strides. The kernels are in
//! `kernels-gpu/src/cgemm.rs`.
//!
//! A row-major problem is the column-major problem of the transposes, `Cᵀ = op(B)ᵀ·op(A)ᵀ`:
//! the same memory, A and B swapped, m and n swapped, the ops unchanged.

use crate::{Error, Gpu, Result};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    cgemm::{CGEMM_THREADS, CgemmParams, CgemmShape, DOT_LANES, MAX_ITEMS, cgemm_tile},
    verify::Tolerance,
};

pub use kernels_gpu::cgemm::{CGEMM_TILES, CgemmTile, Complex32, Family, Op, Products};

/// How each matrix is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Element `(i, j)` at `i + j · ld` (BLAS, cuBLAS).
    ColMajor,
    /// Element `(i, j)` at `i · ld + j`.
    RowMajor,
}

/// One batched product: sizes, ops, layout, leading dimensions and batch strides (in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchedGemm {
    /// `op(A)` is m x k, `op(B)` is k x n, C is m x n.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub op_a: Op,
    pub op_b: Op,
    pub layout: Layout,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// Elements from one matrix of the batch to the next; 0 shares one A (or B) across the batch.
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

/// Elements each buffer must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extents {
    pub a: usize,
    pub b: usize,
    pub c: usize,
    /// Elements one matrix of each spans (`ld · (outer − 1) + inner`).
    pub span: [usize; 3],
}

/// Largest extent or leading dimension (cuBLAS takes `int`; our kernels index in 32 bits).
const MAX_DIM: usize = i32::MAX as usize;
/// Largest C matrix, in elements (its tiles are counted in 32 bits).
const MAX_MATRIX: usize = i32::MAX as usize;

impl BatchedGemm {
    /// Densely packed matrices, one after another, in `layout`.
    pub fn packed(m: usize, n: usize, k: usize, batch: usize, op_a: Op, op_b: Op, layout: Layout) -> Self {
        let mut g = BatchedGemm {
            m,
            n,
            k,
            batch,
            op_a,
            op_b,
            layout,
            lda: 0,
            ldb: 0,
            ldc: 0,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        let ((ar, ac), (br, bc)) = (g.stored(Operand::A), g.stored(Operand::B));
        let ld = |rows: usize, cols: usize| if layout == Layout::ColMajor { rows } else { cols };
        (g.lda, g.ldb, g.ldc) = (ld(ar, ac), ld(br, bc), ld(m, n));
        (g.stride_a, g.stride_b, g.stride_c) = (ar * ac, br * bc, m * n);
        g
    }

    /// Rows and columns of an operand as stored (before its op).
    pub(crate) fn stored(&self, operand: Operand) -> (usize, usize) {
        let (rows, cols, op) = match operand {
            Operand::A => (self.m, self.k, self.op_a),
            Operand::B => (self.k, self.n, self.op_b),
            Operand::C => (self.m, self.n, Op::N),
        };
        if op == Op::N { (rows, cols) } else { (cols, rows) }
    }

    /// Checks every field and returns the elements each buffer must hold. C's matrices may
    /// not overlap one another (A's and B's may: they are only read).
    pub fn validate(&self) -> Result<Extents> {
        for (field, v) in [("m", self.m), ("n", self.n), ("k", self.k), ("batch", self.batch)] {
            if v == 0 {
                return Err(Error::invalid(field, "must be at least 1"));
            }
            if v > MAX_DIM {
                return Err(Error::invalid(field, format!("= {v} exceeds {MAX_DIM}")));
            }
        }
        if self.m * self.n > MAX_MATRIX {
            return Err(Error::invalid("m", format!("x n = {} exceeds {MAX_MATRIX}", self.m * self.n)));
        }
        let (mut extents, mut spans) = ([0usize; 3], [0usize; 3]);
        for (i, operand) in [Operand::A, Operand::B, Operand::C].into_iter().enumerate() {
            let (ld, stride, ld_name, stride_name) = match operand {
                Operand::A => (self.lda, self.stride_a, "lda", "stride_a"),
                Operand::B => (self.ldb, self.stride_b, "ldb", "stride_b"),
                Operand::C => (self.ldc, self.stride_c, "ldc", "stride_c"),
            };
            let (rows, cols) = self.stored(operand);
            // Column-major: ld spans a column; row-major: a row.
            let (inner, outer) = if self.layout == Layout::ColMajor { (rows, cols) } else { (cols, rows) };
            if ld < inner || ld > MAX_DIM {
                return Err(Error::invalid(ld_name, format!("= {ld} must be at least {inner} and at most {MAX_DIM}")));
            }
            let span = ld.checked_mul(outer - 1).and_then(|v| v.checked_add(inner));
            let span = span.ok_or_else(|| Error::invalid(ld_name, "makes a matrix larger than the address space"))?;
            if operand == Operand::C && self.batch > 1 && stride < span {
                return Err(Error::invalid(
                    stride_name,
                    format!("= {stride} makes the matrices of C overlap (each spans {span} elements)"),
                ));
            }
            spans[i] = span;
            extents[i] = stride
                .checked_mul(self.batch - 1)
                .and_then(|v| v.checked_add(span))
                .filter(|v| v.checked_mul(size_of::<Complex32>()).is_some())
                .ok_or_else(|| Error::invalid(stride_name, "makes the batch larger than the address space"))?;
        }
        Ok(Extents { a: extents[0], b: extents[1], c: extents[2], span: spans })
    }

    /// [`BatchedGemm::validate`], and buffers of `a`, `b` and `c` elements at least as long
    /// as it needs.
    pub fn check_lengths(&self, a: usize, b: usize, c: usize) -> Result<Extents> {
        let extents = self.validate()?;
        for (buffer, expected, got) in [("a", extents.a, a), ("b", extents.b, b), ("c", extents.c, c)] {
            if got < expected {
                return Err(Error::BufferSize { buffer, expected, got });
            }
        }
        Ok(extents)
    }

    /// The same product, column-major (A and B trade places when the layout is row-major).
    pub fn column_major(&self) -> BatchedGemm {
        match self.layout {
            Layout::ColMajor => *self,
            Layout::RowMajor => BatchedGemm {
                m: self.n,
                n: self.m,
                op_a: self.op_b,
                op_b: self.op_a,
                lda: self.ldb,
                ldb: self.lda,
                stride_a: self.stride_b,
                stride_b: self.stride_a,
                layout: Layout::ColMajor,
                ..*self
            },
        }
    }

    /// Real floating-point operations: 8 per complex multiply-add.
    pub fn flops(&self) -> f64 {
        8.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    /// The fewest bytes the product moves: A and B read once, C written once (and read once
    /// more where β is not zero); shared operands (stride 0) once for the whole batch.
    pub fn min_bytes(&self, beta_zero: bool) -> f64 {
        let per =
            |stride: usize, elements: usize| if stride == 0 { elements as f64 } else { (elements * self.batch) as f64 };
        let c = (self.m * self.n * self.batch) as f64 * if beta_zero { 1.0 } else { 2.0 };
        8.0 * (per(self.stride_a, self.m * self.k) + per(self.stride_b, self.k * self.n) + c)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    A,
    B,
    C,
}

/// Planar storage of one operand: real and imaginary parts in two buffers of one layout.
pub struct Planar<'a, P> {
    pub re: &'a P,
    pub im: &'a P,
}

/// Planar storage of C.
pub struct PlanarMut<'a, P> {
    pub re: &'a mut P,
    pub im: &'a mut P,
}

/// Whether the column-major `g`'s A and B are stored with k contiguous: what a `Large` or
/// `Tensor` variant is compiled for.
fn k_contiguous(cm: &BatchedGemm) -> [bool; 2] {
    [cm.op_a != Op::N, cm.op_b == Op::N]
}

/// The variant the heuristic gives `g` (interleaved storage unless `planar`), from the
/// measured bests of `bench cgemm --variant all` (and `--variant tensor`) on the H200
/// (benches/NOTES.md):
/// - `Pointwise` for 1 x 1 matrices;
/// - `Register` for packed interleaved 2 x 2 products;
/// - where C has one or two columns and at least 16 rows (matrix times vector): `Dot` where
///   A is stored with k contiguous (op T or C), else `Element`, two rows per thread for
///   interleaved storage;
/// - `Tensor` where k is at least 8 and C has at least 16 rows and 16 columns, 24 rows and 8
///   columns, or 8 rows and 64 columns ([`tensor_tile`]);
/// - `Large` 1 x 4 where C has 8 to 16 rows and at least 64 columns (k under 8);
/// - `Whole` where the matrices fit a block whole: 1 row per thread up to 16 rows (then 1,
///   2 or 4 columns per thread from 1, 4 and 8 columns), 2 up to 32 (1, 2 or 4 columns from
///   1, 2 and 33);
/// - else `Large` from 32 rows and 8 columns: 4 rows per thread from 64, else 2; 2
///   columns from 32, else 1;
/// - else `Tiled`, 4 rows (columns) per thread from 24 on, 2 from 12, else 1.
///
/// Planar storage takes `Pointwise`, `Dot`, `Element` or `Tiled`; so does interleaved storage
/// whose buffers lack the alignment of the variant chosen for it.
pub fn choose_tile(g: &BatchedGemm, planar: bool) -> &'static CgemmTile {
    choose_tile_for(g, planar, Products::Four)
}

/// [`choose_tile`] with Gauss's three products ([`Products::Gauss`]) where it picks a `Tensor`
/// variant: the same tile, or 64 x 32 for its 64 x 64 and 128 x 32 ones (their chunk sums
/// leave no registers for Gauss's third). The other families keep four products: they take
/// the small and the matrix-vector products, which move bytes rather than multiply.
pub fn choose_tile_for(g: &BatchedGemm, planar: bool, products: Products) -> &'static CgemmTile {
    let cm = g.column_major();
    let kc = k_contiguous(&cm);
    let (m, n) = (cm.m, cm.n);
    if m == 1 && n == 1 && cm.k == 1 {
        return cgemm_tile(Family::Pointwise, 1, 1, kc).expect("CGEMM_TILES has the Pointwise kernel");
    }
    if n <= 2 && m >= 16 {
        if cm.op_a != Op::N {
            return cgemm_tile(Family::Dot, 1, 1, kc).expect("CGEMM_TILES has the Dot kernel");
        }
        // Two rows per thread: in 64-thread blocks level with four (H200, 256 x 256 times a
        // vector, 2664 of them: 0.3200 against 0.3196 ms) and ahead of it on 512 x 512 (700 of
        // them: 0.3394 against 0.3408).
        let rows = if planar { 1 } else { 2 };
        return cgemm_tile(Family::Element, rows, 1, kc).expect("CGEMM_TILES has Element 1 and 2 x 1");
    }
    if !planar {
        if let Some(tile) = cgemm_tile(Family::Register, m as u32, n as u32, kc)
            && shape(g, tile).is_some()
        {
            return tile;
        }
        if cm.k >= 8 && (m >= 16 && n >= 16 || m >= 24 && n >= 8 || m >= 8 && n >= 64) {
            return tensor_tile(m, n, cm.k, kc, products);
        }
        if (8..=16).contains(&m) && n >= 64 {
            return cgemm_tile(Family::Large, 1, 4, kc).expect("CGEMM_TILES has Large 1 x 4 for every layout");
        }
        let tm = match m {
            0..=16 => 1,
            17..=32 => 2,
            _ => 4,
        };
        let tn = match n {
            1 => 1,
            2..=3 if tm == 1 => 1,
            2..=7 => 2,
            _ if tm == 1 => 4,
            8..=32 => 2,
            _ => 4,
        };
        if let Some(tile) = cgemm_tile(Family::Whole, tm, tn, kc)
            && shape(g, tile).is_some()
        {
            return tile;
        }
        if m >= 32 && n >= 8 {
            let tm = if m >= 64 { 4 } else { 2 };
            let tn = if n >= 32 { 2 } else { 1 };
            let tm = if tn == 1 { 4 } else { tm }; // Large has 4 x 1, not 2 x 1
            return cgemm_tile(Family::Large, tm, tn, kc).expect("CGEMM_TILES has these Large tiles for every layout");
        }
    }
    let side = |extent: usize| match extent {
        24.. => 4,
        12.. => 2,
        _ => 1,
    };
    cgemm_tile(Family::Tiled, side(m), side(n), kc).expect("CGEMM_TILES covers every pair of 1, 2 and 4")
}

/// The `Tensor` tile for a column-major C of `m x n` and k of `k` (stored layouts `kc`): 64 x 8
/// for 8 columns or fewer; for 16 rows or fewer, 16 x 16 with all of k in one chunk where k is
/// at most 16 and C has at most 64 columns, else 16 x 16 up to 16 columns, else 16 x 64; 128 x
/// 32 for tall C of 32 columns or fewer, 64 x 64 from 64 x 64, else 32 x 32, in one chunk
/// where k is 17 to 32 (the fastest on each of the H200's measured products; a one-chunk tile
/// has no chunk sums, so fewer registers and more blocks per SM). With Gauss's products, 64 x
/// 32 where that would be 128 x 32 or 64 x 64.
pub fn tensor_tile(m: usize, n: usize, k: usize, kc: [bool; 2], products: Products) -> &'static CgemmTile {
    let (bm, bn, one_chunk) = match (m, n) {
        (_, ..=8) => (64, 8, false),
        (..=16, ..=64) if k <= 16 => (16, 16, true),
        (..=16, ..=16) => (16, 16, false),
        (..=16, _) => (16, 64, false),
        (128.., ..=32) | (64.., 64..) if products == Products::Gauss => (64, 32, false),
        (128.., ..=32) => (128, 32, false),
        (64.., 64..) => (64, 64, false),
        _ => (32, 32, (17..=32).contains(&k)),
    };
    CGEMM_TILES
        .iter()
        .find(|t| {
            t.k_contiguous == Some(kc)
                && t.mma.is_some_and(|mma| {
                    (mma.bm(), mma.bn(), mma.one_chunk, mma.products, mma.ring) == (bm, bn, one_chunk, products, 0)
                })
        })
        .expect("CGEMM_TILES has these Tensor tiles for every layout")
}

/// How `tile` tiles `g` (sizes of the column-major problem); `None` where `tile` cannot
/// compute it (a `Whole` one that cannot hold its matrices, a `Large` or `Tensor` one
/// compiled for other stored layouts, a `Tensor` ring tile where a tile would reach past its
/// matrix or k, or an operand's lines would not start 16-byte aligned in a 16-byte aligned
/// buffer: its bulk copies fill no zeros and copy 16-byte units).
pub fn shape(g: &BatchedGemm, tile: &CgemmTile) -> Option<CgemmShape> {
    let cm = g.column_major();
    let u = |v: usize| v as u32; // validate() bounds every extent by i32::MAX
    let (m, n, k, batch) = (u(cm.m), u(cm.n), u(cm.k), u(cm.batch));
    match tile.family {
        Family::Tiled => Some(CgemmShape::new(*tile, m, n, k, batch)),
        Family::Large => (tile.k_contiguous == Some(k_contiguous(&cm))).then(|| CgemmShape::large(*tile)),
        Family::Element | Family::Dot => Some(CgemmShape::element(*tile)),
        Family::Pointwise => (m == 1 && n == 1 && k == 1).then(|| CgemmShape::pointwise(*tile)),
        Family::Register => {
            let (s, size) = (tile.tm as usize, (tile.tm * tile.tm) as usize);
            let packed = [cm.lda, cm.ldb, cm.ldc] == [s; 3] && [cm.stride_a, cm.stride_b, cm.stride_c] == [size; 3];
            ([m, n, k] == [tile.tm; 3] && packed).then(|| CgemmShape::register(*tile))
        }
        Family::Tensor => tile
            .mma
            .filter(|mma| tile.k_contiguous == Some(k_contiguous(&cm)) && (!mma.one_chunk || k <= mma.bk))
            .filter(|mma| {
                let even = || [cm.lda, cm.ldb, cm.stride_a, cm.stride_b].iter().all(|v| v.is_multiple_of(2));
                !tile.has_ring() || (m.is_multiple_of(mma.bm()) && n.is_multiple_of(mma.bn()) && k == mma.bk && even())
            })
            .map(|mma| CgemmShape::tensor(*tile, mma, k)),
        Family::Whole => {
            let span = cm.validate().ok()?.span;
            if span[2] > i32::MAX as usize {
                return None; // its outputs are addressed in 32 bits within a matrix
            }
            let small = |stride: usize, span: usize| (stride.min(1 << 20) as u32, span.min(1 << 20) as u32);
            CgemmShape::whole(*tile, m, n, k, batch, small(cm.stride_a, span[0]), small(cm.stride_b, span[1]))
        }
    }
}

/// The bound the outputs of `tile` are held to against the f64 reference, per real part
/// (`|c - v| ≤ tol · Σ|products| + floor`, see `kernels_gpu::verify`; the magnitude is
/// `Σ (|a.re| + |a.im|)·(|b.re| + |b.im|)` over k): the f32 summation of the `2k + 4` real
/// products behind it ([`Tolerance::f32_sum`]); `Tensor` adds what 3xTF32 costs:
/// - each input split into a TF32 value (rounded, so the residual is within 2^-11 of the
///   input) and a residual the tensor cores truncate to TF32 (within 2^-10 of itself, so
///   2^-21 of the input), and the product of the residuals dropped (≤ 2^-22): at most
///   `5 · 2^-22` per product, times `1 + 2^-10` for the values' own size;
/// - the tensor cores truncate as they accumulate, up to an f32 ulp (2^-23) of the magnitude
///   per mma within a chunk (6 per k-step and part: two real products, three mma each); the
///   chunks' sums are added in f32, which the summation bound covers.
///
/// Gauss's three products ([`Products::Gauss`]) take twice that, plus 2^-23: `im = s - (p + q)`
/// combines sums whose magnitudes add up to twice the output's (`Σ|s|` and `Σ|p| + Σ|q|` each
/// reach the magnitude above), so the split, truncation and summation errors of each count
/// once per magnitude; the parts' sums `a.re + a.im` and `b.re + b.im` are rounded to f32
/// first (2^-24 each, relative to the terms of `s`). The real part `p - q` keeps the
/// standard bound.
pub fn tolerance(g: &BatchedGemm, tile: &CgemmTile) -> Tolerance {
    let sum = Tolerance::f32_sum(2 * g.k as u64 + 4);
    match tile.mma {
        Some(mma) => {
            let split = 5.0 * 2f64.powi(-22) * (1.0 + 2f64.powi(-10));
            let chunk_mmas = 6.0 * mma.k_steps() as f64;
            let tol = sum.tol + split + chunk_mmas * 2f64.powi(-23);
            match mma.products {
                Products::Four => Tolerance { tol, ..sum },
                Products::Gauss => Tolerance { tol: 2.0 * tol + 2f64.powi(-23), ..sum },
            }
        }
        None => sum,
    }
}

/// `C[b] = α·op(A[b])·op(B[b]) + β·C[b]` on `stream`, interleaved storage, with the
/// heuristic's tile. Where β is zero, C is only written (it may hold anything before, NaN
/// included).
#[allow(clippy::too_many_arguments)]
pub fn cgemm(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    alpha: Complex32,
    a: &impl DevicePtr<Complex32>,
    b: &impl DevicePtr<Complex32>,
    beta: Complex32,
    c: &mut impl DevicePtrMut<Complex32>,
) -> Result<()> {
    cgemm_with_products(gpu, stream, g, Products::Four, alpha, a, b, beta, c)
}

/// [`cgemm`] with each complex product formed from `products`: [`Products::Gauss`] takes
/// Gauss's three real products where the heuristic takes a `Tensor` variant
/// ([`choose_tile_for`]), a quarter fewer tensor-core products at twice the standard error
/// bound ([`tolerance`]); elsewhere, and with [`Products::Four`], it is [`cgemm`]. Where the
/// buffers lack the variant's alignment, the planar choice runs (Tiled, Element or Dot, which
/// take any alignment).
#[allow(clippy::too_many_arguments)]
pub fn cgemm_with_products(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    products: Products,
    alpha: Complex32,
    a: &impl DevicePtr<Complex32>,
    b: &impl DevicePtr<Complex32>,
    beta: Complex32,
    c: &mut impl DevicePtrMut<Complex32>,
) -> Result<()> {
    let tile = choose_tile_for(g, false, products);
    let pointers = [("a", a.device_ptr(stream).0), ("b", b.device_ptr(stream).0), ("c", c.device_ptr_mut(stream).0)];
    let aligned = pointers.iter().all(|&(buffer, p)| p.is_multiple_of(alignment(tile, buffer)));
    let tile = if aligned { tile } else { choose_tile(g, true) };
    cgemm_with_tile(gpu, stream, g, tile, alpha, a, b, beta, c)
}

/// [`cgemm`] with a variant of the caller's choice: any `Tiled` one computes any problem; a
/// `Whole` one needs matrices it holds and a `Large` or `Tensor` one the stored layouts it was
/// compiled for (else [`Error::InvalidShape`]); `Whole` needs 16-byte-aligned A and B, and
/// `Tensor` 8-byte-aligned A, B and C (else [`Error::Misaligned`]).
#[allow(clippy::too_many_arguments)]
pub fn cgemm_with_tile(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    tile: &CgemmTile,
    alpha: Complex32,
    a: &impl DevicePtr<Complex32>,
    b: &impl DevicePtr<Complex32>,
    beta: Complex32,
    c: &mut impl DevicePtrMut<Complex32>,
) -> Result<()> {
    g.check_lengths(a.len(), b.len(), c.len())?;
    check_owner(gpu, &[("a", a.stream()), ("b", b.stream()), ("c", c.stream())])?;
    {
        let (a_ptr, _as) = a.device_ptr(stream);
        let (b_ptr, _bs) = b.device_ptr(stream);
        let (c_ptr, _cs) = c.device_ptr_mut(stream);
        for (buffer, ptr) in [("a", a_ptr), ("b", b_ptr), ("c", c_ptr)] {
            let align = alignment(tile, buffer);
            if !ptr.is_multiple_of(align) {
                let reason = match tile.family {
                    Family::Whole => "the Whole variants copy operands with 16-byte loads",
                    Family::Register => "the Register variant loads its matrices with 16-byte loads",
                    _ if tile.has_ring() => "the Tensor ring variants copy operands' lines by 16-byte bulk copies",
                    _ => "the Tensor variants copy whole complex elements with cp.async",
                };
                return Err(Error::Misaligned { buffer, align: align as usize, reason });
            }
        }
        let lengths = [a.len() as u64, b.len() as u64];
        launch(gpu, stream, g, tile, alpha, beta, false, [a_ptr, 0], [b_ptr, 0], [c_ptr, 0], lengths)?;
    }
    gpu.check_deferred()
}

/// The same with planar storage: every operand as separate real and imaginary f32 buffers.
#[allow(clippy::too_many_arguments)]
pub fn cgemm_planar<P: DevicePtr<f32>, Q: DevicePtrMut<f32>>(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    alpha: Complex32,
    a: Planar<'_, P>,
    b: Planar<'_, P>,
    beta: Complex32,
    c: PlanarMut<'_, Q>,
) -> Result<()> {
    cgemm_planar_with_tile(gpu, stream, g, choose_tile(g, true), alpha, a, b, beta, c)
}

/// [`cgemm_planar`] with a `Tiled`, `Element` or `Dot` variant of the caller's choice (the others
/// take interleaved storage only: [`Error::InvalidShape`]).
#[allow(clippy::too_many_arguments)]
pub fn cgemm_planar_with_tile<P: DevicePtr<f32>, Q: DevicePtrMut<f32>>(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    tile: &CgemmTile,
    alpha: Complex32,
    a: Planar<'_, P>,
    b: Planar<'_, P>,
    beta: Complex32,
    c: PlanarMut<'_, Q>,
) -> Result<()> {
    if !tile.takes_planar() {
        return Err(Error::invalid("tile", format!("{} takes interleaved storage only", tile.name)));
    }
    // Each part must hold the elements; the shorter of a pair decides.
    let (a_len, b_len) = (a.re.len().min(a.im.len()), b.re.len().min(b.im.len()));
    g.check_lengths(a_len, b_len, c.re.len().min(c.im.len()))?;
    check_owner(
        gpu,
        &[
            ("a.re", a.re.stream()),
            ("a.im", a.im.stream()),
            ("b.re", b.re.stream()),
            ("b.im", b.im.stream()),
            ("c.re", c.re.stream()),
            ("c.im", c.im.stream()),
        ],
    )?;
    {
        let (ar, _ars) = a.re.device_ptr(stream);
        let (ai, _ais) = a.im.device_ptr(stream);
        let (br, _brs) = b.re.device_ptr(stream);
        let (bi, _bis) = b.im.device_ptr(stream);
        let (cr, _crs) = c.re.device_ptr_mut(stream);
        let (ci, _cis) = c.im.device_ptr_mut(stream);
        launch(gpu, stream, g, tile, alpha, beta, true, [ar, ai], [br, bi], [cr, ci], [a_len as u64, b_len as u64])?;
    }
    gpu.check_deferred()
}

/// The byte alignment `tile` needs of interleaved `buffer` ("a", "b" or "c").
fn alignment(tile: &CgemmTile, buffer: &str) -> u64 {
    match tile.family {
        Family::Whole if buffer != "c" => 16,
        Family::Tensor if buffer != "c" && tile.has_ring() => 16,
        Family::Tensor => 8,
        Family::Register => 16,
        Family::Whole | Family::Tiled | Family::Large | Family::Element | Family::Dot | Family::Pointwise => 1,
    }
}

fn check_owner(gpu: &Gpu, streams: &[(&str, &std::sync::Arc<CudaStream>)]) -> Result<()> {
    for (name, stream) in streams {
        gpu.check_stream(stream).map_err(|_| Error::ForeignContext { what: format!("buffer `{name}`") })?;
    }
    Ok(())
}

/// The kernel parameters of batches `[first, first + count)` of the column-major `g` tiled
/// as `shape`, buffer addresses left at 0.
pub fn params(
    g: &BatchedGemm,
    shape: &CgemmShape,
    alpha: Complex32,
    beta: Complex32,
    first: u64,
    count: u64,
) -> CgemmParams {
    let g = g.column_major();
    let spans = g.validate().map(|e| e.span).unwrap_or_default();
    let u = |v: usize| v as u32; // validate() bounds every extent by i32::MAX
    let div = |d: u32| MagicDiv::new(d).expect("tile extents are at least 1");
    let (row_tiles, col_tiles) = shape.tiles(u(g.m), u(g.n));
    let (a_inner, b_inner) =
        (if g.op_a == Op::N { shape.bm } else { shape.bk }, if g.op_b == Op::N { shape.bk } else { shape.bn });
    CgemmParams {
        a: 0,
        b: 0,
        c: 0,
        a_im: 0,
        b_im: 0,
        c_im: 0,
        stride_a: g.stride_a as u64,
        stride_b: g.stride_b as u64,
        stride_c: g.stride_c as u64,
        batch_base: first,
        a_len: 0,
        b_len: 0,
        alpha,
        beta,
        m: u(g.m),
        n: u(g.n),
        k: u(g.k),
        lda: u(g.lda),
        ldb: u(g.ldb),
        ldc: u(g.ldc),
        batches: count as u32,
        items: (count.div_ceil(shape.per_block as u64) * (row_tiles * col_tiles) as u64) as u32,
        op_a: g.op_a as u32,
        op_b: g.op_b as u32,
        planar: 0,
        beta_zero: (beta == Complex32::ZERO) as u32,
        bm: shape.bm,
        bn: shape.bn,
        bk: shape.bk,
        chunks: shape.chunks(u(g.k)),
        per_round: shape.per_round,
        rounds: shape.rounds,
        per_block: shape.per_block,
        thread_cols: shape.thread_cols,
        a_pitch: shape.a_pitch(),
        b_pitch: shape.b_pitch(),
        a_matrix: shape.a_matrix(),
        b_matrix: shape.b_matrix(),
        a_extent: spans[0].min(u32::MAX as usize) as u32,
        b_extent: spans[1].min(u32::MAX as usize) as u32,
        a_pairs: 0,
        b_pairs: 0,
        tiles: div(row_tiles * col_tiles),
        row_tiles: div(row_tiles),
        threads_per_matrix: div(shape.thread_rows * shape.thread_cols),
        thread_rows: div(shape.thread_rows),
        a_chunk: div(shape.bm * shape.bk),
        a_inner: div(a_inner),
        b_chunk: div(shape.bk * shape.bn),
        b_inner: div(b_inner),
    }
}

/// Marks in `p` (its addresses set) the interleaved operands whose element pairs along the
/// stored lines start 16-byte aligned: an aligned buffer, even leading dimension and batch
/// stride (the tiles start lines at even offsets).
pub fn set_pairs(p: &mut CgemmParams) {
    let aligned = |address: u64, ld: u32, stride: u64| {
        (p.planar == 0 && address.is_multiple_of(16) && ld.is_multiple_of(2) && stride.is_multiple_of(2)) as u32
    };
    (p.a_pairs, p.b_pairs) = (aligned(p.a, p.lda, p.stride_a), aligned(p.b, p.ldb, p.stride_b));
}

/// The launches that cover `g`'s batch: `(first, count, items)`, each within [`MAX_ITEMS`]
/// work items.
pub fn launches(g: &BatchedGemm, shape: &CgemmShape) -> Vec<(u64, u64, u32)> {
    let cm = g.column_major();
    let (row_tiles, col_tiles) = shape.tiles(cm.m as u32, cm.n as u32);
    let tiles = row_tiles as u64 * col_tiles as u64;
    let per_block = shape.per_block as u64;
    let per_launch = (MAX_ITEMS / tiles).max(1) * per_block;
    let mut out = Vec::new();
    let mut first = 0u64;
    while first < g.batch as u64 {
        let count = (g.batch as u64 - first).min(per_launch);
        out.push((first, count, (count.div_ceil(per_block) * tiles) as u32));
        first += count;
    }
    out
}

/// Launches `tile` over the whole batch; `[re, im]` addresses (im 0 when interleaved).
#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    tile: &CgemmTile,
    alpha: Complex32,
    beta: Complex32,
    planar: bool,
    a: [u64; 2],
    b: [u64; 2],
    c: [u64; 2],
    lengths: [u64; 2],
) -> Result<()> {
    // Row-major swaps the operands along with their strides and ops.
    let ((a, b), lengths) =
        if g.layout == Layout::RowMajor { ((b, a), [lengths[1], lengths[0]]) } else { ((a, b), lengths) };
    let shape =
        shape(g, tile).ok_or_else(|| Error::invalid("tile", format!("{} does not compute this problem", tile.name)))?;
    if tile.has_ring() && gpu.arch() < 90 {
        return Err(Error::UnsupportedTile { tile: tile.name, reason: "its bulk copies need an sm_90 GPU" });
    }
    // Whole and ring blocks walk their items grid-stride: as many as the SMs hold at once.
    let resident = if tile.family == Family::Whole || tile.has_ring() {
        gpu.resident_blocks(tile.name, tile.threads(), shape.smem_bytes())?.max(1) * gpu.sm_count()
    } else {
        u32::MAX
    };
    for (first, count, items) in launches(g, &shape) {
        let mut p = params(g, &shape, alpha, beta, first, count);
        (p.a, p.a_im, p.b, p.b_im, p.c, p.c_im) = (a[0], a[1], b[0], b[1], c[0], c[1]);
        (p.a_len, p.b_len) = (lengths[0], lengths[1]);
        p.planar = planar as u32;
        set_pairs(&mut p);
        // An Element, Pointwise or Register block covers an item per thread, a Dot block one
        // per warp; the others one at a time.
        let blocks = match tile.family {
            Family::Element | Family::Pointwise | Family::Register => items.div_ceil(tile.threads()),
            Family::Dot => items.div_ceil(CGEMM_THREADS / DOT_LANES),
            _ => items.min(resident),
        };
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (tile.threads(), 1, 1),
            shared_mem_bytes: shape.smem_bytes(),
        };
        // Safety: validate() and the length checks guarantee every offset the kernel forms
        // (batch · stride + row + col · ld, below each extent) lies inside its buffer, and
        // the shape's shared memory holds every slot it stages.
        unsafe { gpu.launch(stream, tile.name, cfg, p) }?;
    }
    Ok(())
}
