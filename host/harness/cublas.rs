//! cuBLAS's strided-batched complex GEMMs: the reference `convkit bench cgemm` times ours
//! against and checks its outputs with.

use crate::{
    Error, Gpu, Result,
    cgemm::{BatchedGemm, Complex32, Layout, Op},
    error::Context,
};
use cudarc::{
    cublas::{result, sys},
    driver::{CudaStream, DevicePtr, DevicePtrMut},
};
use std::sync::Arc;

/// cuBLAS's two batched complex GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CublasGemm {
    /// `cublasCgemmStridedBatched`.
    Cgemm,
    /// `cublasCgemm3mStridedBatched`: Gauss's three-multiplication form.
    Cgemm3m,
}

impl CublasGemm {
    pub const ALL: [CublasGemm; 2] = [CublasGemm::Cgemm, CublasGemm::Cgemm3m];

    pub fn name(self) -> &'static str {
        match self {
            CublasGemm::Cgemm => "cublasCgemmStridedBatched",
            CublasGemm::Cgemm3m => "cublasCgemm3mStridedBatched",
        }
    }
}

/// A cuBLAS handle bound to one stream.
pub struct Cublas {
    handle: sys::cublasHandle_t,
    stream: Arc<CudaStream>,
}

impl Drop for Cublas {
    fn drop(&mut self) {
        unsafe { result::destroy_handle(self.handle) }.ok();
    }
}

impl Cublas {
    pub fn new(gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<Self> {
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::LibraryNotFound {
                lib: "libcublas",
                hint: "put cuBLAS's lib directory on LD_LIBRARY_PATH (scripts/cudnn-env does)",
            });
        }
        gpu.check_stream(stream)?;
        gpu.context().bind_to_thread().during("cuCtxSetCurrent")?;
        let handle = result::create_handle().during("cublasCreate")?;
        let cublas = Cublas { handle, stream: stream.clone() };
        unsafe { result::set_stream(handle, stream.cu_stream() as _) }.during("cublasSetStream")?;
        Ok(cublas)
    }

    /// cuBLAS's version, e.g. 130100.
    pub fn version(&self) -> Result<i32> {
        let mut v = 0;
        unsafe { sys::cublasGetVersion_v2(self.handle, &mut v) }.result().during("cublasGetVersion")?;
        Ok(v)
    }

    /// `C = α·op(A)·op(B) + β·C` with `which`, on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        which: CublasGemm,
        g: &BatchedGemm,
        alpha: Complex32,
        a: &impl DevicePtr<Complex32>,
        b: &impl DevicePtr<Complex32>,
        beta: Complex32,
        c: &mut impl DevicePtrMut<Complex32>,
    ) -> Result<()> {
        g.check_lengths(a.len(), b.len(), c.len())?;
        let cm = g.column_major();
        let stream = &self.stream;
        let (a_ptr, _as) = a.device_ptr(stream);
        let (b_ptr, _bs) = b.device_ptr(stream);
        let (c_ptr, _cs) = c.device_ptr_mut(stream);
        let (a_ptr, b_ptr) = if g.layout == Layout::RowMajor { (b_ptr, a_ptr) } else { (a_ptr, b_ptr) };
        let op = |op: Op| match op {
            Op::N => sys::cublasOperation_t::CUBLAS_OP_N,
            Op::T => sys::cublasOperation_t::CUBLAS_OP_T,
            Op::C => sys::cublasOperation_t::CUBLAS_OP_C,
        };
        let int = |v: usize| v as i32; // validate() bounds every extent by i32::MAX
        let long = |v: usize| v as i64;
        let f = match which {
            CublasGemm::Cgemm => sys::cublasCgemmStridedBatched,
            CublasGemm::Cgemm3m => sys::cublasCgemm3mStridedBatched,
        };
        let (alpha, beta) = (sys::float2 { x: alpha.re, y: alpha.im }, sys::float2 { x: beta.re, y: beta.im });
        unsafe {
            f(
                self.handle,
                op(cm.op_a),
                op(cm.op_b),
                int(cm.m),
                int(cm.n),
                int(cm.k),
                &alpha,
                a_ptr as *const sys::float2,
                int(cm.lda),
                long(cm.stride_a),
                b_ptr as *const sys::float2,
                int(cm.ldb),
                long(cm.stride_b),
                &beta,
                c_ptr as *mut sys::float2,
                int(cm.ldc),
                long(cm.stride_c),
                int(cm.batch),
            )
        }
        .result()
        .during(which.name())
    }
}
