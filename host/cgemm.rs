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
    cgemm::{CGEMM_THREADS, CgemmParams, MAX_LAUNCH_ELEMENTS, cgemm_kernel},
};

pub use kernels_gpu::cgemm::{Complex32, Op};

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
}

/// Largest extent or leading dimension (cuBLAS takes `int`; our kernels index in 32 bits).
const MAX_DIM: usize = i32::MAX as usize;

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
    fn stored(&self, operand: Operand) -> (usize, usize) {
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
        if self.m * self.n > MAX_LAUNCH_ELEMENTS as usize - 1 {
            return Err(Error::invalid("m", format!("x n = {} exceeds {}", self.m * self.n, MAX_LAUNCH_ELEMENTS - 1)));
        }
        let mut extents = [0usize; 3];
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
            extents[i] = stride
                .checked_mul(self.batch - 1)
                .and_then(|v| v.checked_add(span))
                .filter(|v| v.checked_mul(size_of::<Complex32>()).is_some())
                .ok_or_else(|| Error::invalid(stride_name, "makes the batch larger than the address space"))?;
        }
        Ok(Extents { a: extents[0], b: extents[1], c: extents[2] })
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
enum Operand {
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

/// `C[b] = α·op(A[b])·op(B[b]) + β·C[b]` on `stream`, interleaved storage. Where β is zero,
/// C is only written (it may hold anything before, NaN included).
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
    g.check_lengths(a.len(), b.len(), c.len())?;
    check_owner(gpu, &[("a", a.stream()), ("b", b.stream()), ("c", c.stream())])?;
    {
        let (a_ptr, _as) = a.device_ptr(stream);
        let (b_ptr, _bs) = b.device_ptr(stream);
        let (c_ptr, _cs) = c.device_ptr_mut(stream);
        launch(gpu, stream, g, alpha, beta, false, [a_ptr, 0], [b_ptr, 0], [c_ptr, 0])?;
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
    // Each part must hold the elements; the shorter of a pair decides.
    g.check_lengths(a.re.len().min(a.im.len()), b.re.len().min(b.im.len()), c.re.len().min(c.im.len()))?;
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
        launch(gpu, stream, g, alpha, beta, true, [ar, ai], [br, bi], [cr, ci])?;
    }
    gpu.check_deferred()
}

fn check_owner(gpu: &Gpu, streams: &[(&str, &std::sync::Arc<CudaStream>)]) -> Result<()> {
    for (name, stream) in streams {
        gpu.check_stream(stream).map_err(|_| Error::ForeignContext { what: format!("buffer `{name}`") })?;
    }
    Ok(())
}

/// The kernel parameters of batches `[first, first + count)` of the column-major `g`.
pub fn params(g: &BatchedGemm, alpha: Complex32, beta: Complex32, first: u64, count: u64) -> CgemmParams {
    let g = g.column_major();
    let u = |v: usize| v as u32; // validate() bounds every extent by i32::MAX
    let mn = u(g.m * g.n);
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
        alpha,
        beta,
        m: u(g.m),
        n: u(g.n),
        k: u(g.k),
        lda: u(g.lda),
        ldb: u(g.ldb),
        ldc: u(g.ldc),
        elements: (count * mn as u64) as u32,
        beta_zero: (beta == Complex32::ZERO) as u32,
        per_matrix: MagicDiv::new(mn).expect("validated m, n >= 1"),
        per_column: MagicDiv::new(u(g.m)).expect("validated m >= 1"),
    }
}

/// Batches per launch: as many as keep the flat output index below 2^31.
pub fn batches_per_launch(g: &BatchedGemm) -> u64 {
    ((MAX_LAUNCH_ELEMENTS - 1) / (g.m * g.n) as u64).max(1)
}

/// Launches the element kernel over the whole batch; `[re, im]` addresses (im 0 when interleaved).
#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    stream: &CudaStream,
    g: &BatchedGemm,
    alpha: Complex32,
    beta: Complex32,
    planar: bool,
    a: [u64; 2],
    b: [u64; 2],
    c: [u64; 2],
) -> Result<()> {
    let cm = g.column_major();
    // Row-major swaps the operands along with their strides and ops.
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let kernel = cgemm_kernel(cm.op_a, cm.op_b, planar);
    let per_launch = batches_per_launch(g);
    let mut first = 0u64;
    while first < g.batch as u64 {
        let count = (g.batch as u64 - first).min(per_launch);
        let mut p = params(g, alpha, beta, first, count);
        (p.a, p.a_im, p.b, p.b_im, p.c, p.c_im) = (a[0], a[1], b[0], b[1], c[0], c[1]);
        let blocks = (p.elements as u64).div_ceil(CGEMM_THREADS as u64) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (CGEMM_THREADS, 1, 1), shared_mem_bytes: 0 };
        // Safety: validate() and the length checks guarantee every offset the kernel forms
        // (batch · stride + row + col · ld, below each extent) lies inside its buffer.
        unsafe { gpu.launch(stream, kernel.name, cfg, p) }?;
        first += count;
    }
    Ok(())
}
