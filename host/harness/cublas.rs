//! cuBLAS's strided-batched complex GEMMs and cuBLASLt's heuristic choices for the same
//! batched matmul: the references `convkit bench cgemm` times ours against and checks.

use crate::{
    Error, Gpu, Result,
    cgemm::{BatchedGemm, Complex32, Layout, Op, Operand},
    error::Context,
};
use cudarc::{
    cublas::{result, sys},
    cublaslt::{result as ltresult, sys as ltsys},
    driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut},
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

fn cublas_op(op: Op) -> sys::cublasOperation_t {
    match op {
        Op::N => sys::cublasOperation_t::CUBLAS_OP_N,
        Op::T => sys::cublasOperation_t::CUBLAS_OP_T,
        Op::C => sys::cublasOperation_t::CUBLAS_OP_C,
    }
}

/// Sets one attribute of a live cuBLASLt matrix layout to `value`.
fn set_layout_attribute<T: Copy>(
    layout: ltsys::cublasLtMatrixLayout_t,
    attr: ltsys::cublasLtMatrixLayoutAttribute_t,
    value: T,
) -> Result<()> {
    // Safety: `layout` was created by this module and not yet destroyed; `value` outlives the call.
    unsafe { ltresult::set_matrix_layout_attribute(layout, attr, (&value as *const T).cast(), size_of::<T>()) }
        .during("cublasLtMatrixLayoutSetAttribute")
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
                cublas_op(cm.op_a),
                cublas_op(cm.op_b),
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

/// cuBLASLt's batched complex matmul for one problem: the algorithms its heuristic proposes
/// (up to [`CublasLtPlan::MAX_ALGOS`], each within the workspace), ready to run.
pub struct CublasLtPlan {
    handle: ltsys::cublasLtHandle_t,
    desc: ltsys::cublasLtMatmulDesc_t,
    layouts: [ltsys::cublasLtMatrixLayout_t; 3],
    algos: Vec<ltsys::cublasLtMatmulHeuristicResult_t>,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
    g: BatchedGemm,
}

impl Drop for CublasLtPlan {
    fn drop(&mut self) {
        unsafe {
            for layout in self.layouts {
                ltresult::destroy_matrix_layout(layout).ok();
            }
            ltresult::destroy_matmul_desc(self.desc).ok();
            ltresult::destroy_handle(self.handle).ok();
        }
    }
}

impl CublasLtPlan {
    /// Algorithms asked of the heuristic.
    pub const MAX_ALGOS: usize = 4;
    /// Workspace offered to them.
    pub const WORKSPACE_BYTES: usize = 32 << 20;

    /// Asks cuBLASLt's heuristic for `g` (complex f32, f32 compute, strided batches).
    pub fn new(gpu: &Gpu, stream: &Arc<CudaStream>, g: &BatchedGemm) -> Result<Self> {
        if !unsafe { ltsys::is_culib_present() } {
            return Err(Error::LibraryNotFound {
                lib: "libcublasLt",
                hint: "put cuBLAS's lib directory on LD_LIBRARY_PATH (scripts/cudnn-env does)",
            });
        }
        g.validate()?;
        gpu.check_stream(stream)?;
        gpu.context().bind_to_thread().during("cuCtxSetCurrent")?;
        let cm = g.column_major();
        let handle = ltresult::create_handle().during("cublasLtCreate")?;
        let desc = ltresult::create_matmul_desc(
            ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ltsys::cudaDataType::CUDA_C_32F,
        );
        let desc = match desc {
            Ok(d) => d,
            Err(e) => {
                unsafe { ltresult::destroy_handle(handle) }.ok();
                return Err(e).during("cublasLtMatmulDescCreate");
            }
        };
        let mut plan = CublasLtPlan {
            handle,
            desc,
            layouts: [std::ptr::null_mut(); 3],
            algos: Vec::new(),
            workspace: gpu.alloc::<u8>(Self::WORKSPACE_BYTES)?,
            stream: stream.clone(),
            g: *g,
        };
        let set_desc = |attr, value: sys::cublasOperation_t| unsafe {
            ltresult::set_matmul_desc_attribute(
                desc,
                attr,
                (&value as *const sys::cublasOperation_t).cast(),
                size_of_val(&value),
            )
        };
        set_desc(ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, cublas_op(cm.op_a))
            .during("cublasLtMatmulDescSetAttribute")?;
        set_desc(ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, cublas_op(cm.op_b))
            .during("cublasLtMatmulDescSetAttribute")?;
        // Each operand as stored (before its op), with its batch count and stride.
        let shapes = [
            (cm.stored(Operand::A), cm.lda, cm.stride_a),
            (cm.stored(Operand::B), cm.ldb, cm.stride_b),
            (cm.stored(Operand::C), cm.ldc, cm.stride_c),
        ];
        for (i, ((rows, cols), ld, stride)) in shapes.into_iter().enumerate() {
            let layout =
                ltresult::create_matrix_layout(ltsys::cudaDataType::CUDA_C_32F, rows as u64, cols as u64, ld as i64)
                    .during("cublasLtMatrixLayoutCreate")?;
            plan.layouts[i] = layout;
            set_layout_attribute(
                layout,
                ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                cm.batch as i32,
            )?;
            set_layout_attribute(
                layout,
                ltsys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                stride as i64,
            )?;
        }
        let pref = ltresult::create_matmul_pref().during("cublasLtMatmulPreferenceCreate")?;
        let max_workspace = Self::WORKSPACE_BYTES as u64;
        let mut results = [unsafe { std::mem::zeroed::<ltsys::cublasLtMatmulHeuristicResult_t>() }; Self::MAX_ALGOS];
        let mut found = 0;
        let status = unsafe {
            ltresult::set_matmul_pref_attribute(
                pref,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&max_workspace as *const u64).cast(),
                size_of::<u64>(),
            )
            .and_then(|()| {
                ltsys::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                    Self::MAX_ALGOS as i32,
                    results.as_mut_ptr(),
                    &mut found,
                )
                .result()
            })
        };
        unsafe { ltresult::destroy_matmul_pref(pref) }.ok();
        status.during("cublasLtMatmulAlgoGetHeuristic")?;
        plan.algos = results[..found.max(0) as usize]
            .iter()
            .filter(|r| r.state == ltsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .copied()
            .collect();
        Ok(plan)
    }

    /// Algorithms the heuristic proposed (possibly none).
    pub fn algos(&self) -> usize {
        self.algos.len()
    }

    /// The name of algorithm `i` in tables.
    pub fn name(i: usize) -> &'static str {
        ["cublasLt#0", "cublasLt#1", "cublasLt#2", "cublasLt#3"][i]
    }

    /// `C = α·op(A)·op(B) + β·C` with algorithm `i`, on the plan's stream.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &mut self,
        i: usize,
        alpha: Complex32,
        a: &impl DevicePtr<Complex32>,
        b: &impl DevicePtr<Complex32>,
        beta: Complex32,
        c: &mut impl DevicePtrMut<Complex32>,
    ) -> Result<()> {
        self.g.check_lengths(a.len(), b.len(), c.len())?;
        let stream = self.stream.clone();
        let (a_ptr, _as) = a.device_ptr(&stream);
        let (b_ptr, _bs) = b.device_ptr(&stream);
        let (c_ptr, _cs) = c.device_ptr_mut(&stream);
        let (w_ptr, _ws) = self.workspace.device_ptr_mut(&stream);
        let (a_ptr, b_ptr) = if self.g.layout == Layout::RowMajor { (b_ptr, a_ptr) } else { (a_ptr, b_ptr) };
        let algo = &self.algos[i];
        unsafe {
            ltresult::matmul(
                self.handle,
                self.desc,
                (&alpha as *const Complex32).cast(),
                (&beta as *const Complex32).cast(),
                a_ptr as *const std::ffi::c_void,
                self.layouts[0],
                b_ptr as *const std::ffi::c_void,
                self.layouts[1],
                c_ptr as *const std::ffi::c_void,
                self.layouts[2],
                c_ptr as *mut std::ffi::c_void,
                self.layouts[2],
                &algo.algo,
                w_ptr as *mut std::ffi::c_void,
                algo.workspaceSize.min(Self::WORKSPACE_BYTES),
                stream.cu_stream() as _,
            )
        }
        .during("cublasLtMatmul")
    }
}
