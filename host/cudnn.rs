//! The convolution through cuDNN: the reference that `check` compares against and that
//! `bench` times. Thin RAII wrappers over cudarc's cuDNN bindings (the safe layer has no
//! `cudnnFindConvolutionForwardAlgorithmEx`).

use crate::{Conv2d, Error, Gpu, Result, error::Context};
use cudarc::{
    cudnn::{result, sys},
    driver::{DevicePtr, DevicePtrMut},
};
use serde::Serialize;
use std::{ffi::c_void, fmt};

pub use sys::cudnnConvolutionFwdAlgo_t as Algo;

/// cuDNN's math mode. `Fma` is plain f32 (what `check` compares with); `Default` lets
/// cuDNN use TF32 tensor cores, which is faster and less exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Math {
    Fma,
    Default,
}

impl Math {
    fn raw(self) -> sys::cudnnMathType_t {
        match self {
            Math::Fma => sys::cudnnMathType_t::CUDNN_FMA_MATH,
            Math::Default => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        }
    }
}

impl fmt::Display for Math {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Math::Fma => "FMA",
            Math::Default => "DEFAULT",
        })
    }
}

/// Short name of an algorithm, as tables print it.
pub fn algo_name(algo: Algo) -> &'static str {
    match algo {
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM => "IMPLICIT_GEMM",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM => "IMPLICIT_PRECOMP_GEMM",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_GEMM => "GEMM",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT => "DIRECT",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_FFT => "FFT",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING => "FFT_TILING",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD => "WINOGRAD",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED => "WINOGRAD_NONFUSED",
        Algo::CUDNN_CONVOLUTION_FWD_ALGO_COUNT => "COUNT",
    }
}

/// One timed algorithm from `cudnnFindConvolutionForwardAlgorithmEx`.
#[derive(Clone, Copy, Debug)]
pub struct AlgoPerf {
    pub algo: Algo,
    pub math: Math,
    /// Whether cuDNN reports it ran with tensor-op math (TF32).
    pub tensor_ops: bool,
    pub time_ms: f32,
    pub workspace: usize,
}

/// The cuDNN library version, e.g. 91400; `None` where libcudnn cannot be loaded.
pub fn version() -> Option<usize> {
    unsafe { sys::is_culib_present() }.then(result::get_version)
}

/// RAII owners of cuDNN's handle and descriptors.
macro_rules! owned {
    ($name:ident, $raw:ty, $destroy:path) => {
        struct $name($raw);
        impl Drop for $name {
            fn drop(&mut self) {
                unsafe { $destroy(self.0) }.ok();
            }
        }
    };
}
owned!(Handle, sys::cudnnHandle_t, result::destroy_handle);
owned!(TensorDesc, sys::cudnnTensorDescriptor_t, result::destroy_tensor_descriptor);
owned!(FilterDesc, sys::cudnnFilterDescriptor_t, result::destroy_filter_descriptor);
owned!(ConvDesc, sys::cudnnConvolutionDescriptor_t, result::destroy_convolution_descriptor);

/// The entries of a ranking whose algorithm can run (cuDNN lists the others with an error).
fn successful(
    perf: &[sys::cudnnConvolutionFwdAlgoPerf_t],
) -> impl Iterator<Item = &sys::cudnnConvolutionFwdAlgoPerf_t> {
    perf.iter().filter(|p| p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
}

/// One convolution problem described to cuDNN, in both math modes, on `gpu`'s stream.
pub struct CudnnConv<'g> {
    gpu: &'g Gpu,
    // Field order is drop order: descriptors before the handle.
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    fma: ConvDesc,
    default: ConvDesc,
    handle: Handle,
}

impl<'g> CudnnConv<'g> {
    pub fn new(gpu: &'g Gpu, conv: &Conv2d) -> Result<Self> {
        if version().is_none() {
            return Err(Error::LibraryNotFound {
                lib: "libcudnn",
                hint: "put cuDNN 9's lib directory on LD_LIBRARY_PATH (scripts/gpu-stage's run script does)",
            });
        }
        let geom = conv.geometry()?;
        let int = |v: usize| v as i32; // geometry() bounds every extent by i32::MAX
        let float = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        unsafe {
            gpu.context().bind_to_thread().during("cuCtxSetCurrent")?;
            let handle = Handle(result::create_handle().during("cudnnCreate")?);
            result::set_stream(handle.0, gpu.stream().cu_stream() as _).during("cudnnSetStream")?;
            let x = TensorDesc(result::create_tensor_descriptor().during("cudnnCreateTensorDescriptor")?);
            result::set_tensor4d_descriptor(x.0, nchw, float, [conv.n, conv.c, conv.h, conv.w].map(int))
                .during("cudnnSetTensor4dDescriptor(x)")?;
            let y = TensorDesc(result::create_tensor_descriptor().during("cudnnCreateTensorDescriptor")?);
            result::set_tensor4d_descriptor(y.0, nchw, float, [conv.n, conv.k, geom.out_h, geom.out_w].map(int))
                .during("cudnnSetTensor4dDescriptor(y)")?;
            let w = FilterDesc(result::create_filter_descriptor().during("cudnnCreateFilterDescriptor")?);
            result::set_filter4d_descriptor(w.0, float, nchw, [conv.k, geom.c_per_group, conv.r, conv.s].map(int))
                .during("cudnnSetFilter4dDescriptor")?;
            let conv_desc = |math: Math| -> Result<ConvDesc> {
                let d = ConvDesc(result::create_convolution_descriptor().during("cudnnCreateConvolutionDescriptor")?);
                result::set_convolution2d_descriptor(
                    d.0,
                    int(conv.pad[0]),
                    int(conv.pad[1]),
                    int(conv.stride[0]),
                    int(conv.stride[1]),
                    int(conv.dilation[0]),
                    int(conv.dilation[1]),
                    sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    float,
                )
                .during("cudnnSetConvolution2dDescriptor")?;
                result::set_convolution_group_count(d.0, int(conv.groups)).during("cudnnSetConvolutionGroupCount")?;
                result::set_convolution_math_type(d.0, math.raw()).during("cudnnSetConvolutionMathType")?;
                Ok(d)
            };
            Ok(CudnnConv { gpu, x, w, y, fma: conv_desc(Math::Fma)?, default: conv_desc(Math::Default)?, handle })
        }
    }

    fn desc(&self, math: Math) -> sys::cudnnConvolutionDescriptor_t {
        match math {
            Math::Fma => self.fma.0,
            Math::Default => self.default.0,
        }
    }

    /// cuDNN's heuristic ranking (no timing), best first, with each algorithm's workspace.
    pub fn heuristic(&self, math: Math) -> Result<Vec<(Algo, usize)>> {
        let mut perf = [unsafe { std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>() }; 8];
        let mut count = 0;
        unsafe {
            result::get_convolution_forward_algorithm(
                self.handle.0,
                self.x.0,
                self.w.0,
                self.desc(math),
                self.y.0,
                perf.len() as i32,
                &mut count,
                perf.as_mut_ptr(),
            )
        }
        .during("cudnnGetConvolutionForwardAlgorithm_v7")?;
        Ok(successful(&perf[..count as usize]).map(|p| (p.algo, p.memory)).collect())
    }

    /// Times every algorithm that fits `workspace` (`cudnnFindConvolutionForwardAlgorithmEx`,
    /// which overwrites `y`); fastest first.
    pub fn find(
        &self,
        math: Math,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<Vec<AlgoPerf>> {
        let stream = self.gpu.stream();
        let (x_ptr, _xs) = x.device_ptr(stream);
        let (w_ptr, _ws) = w.device_ptr(stream);
        let (y_ptr, _ys) = y.device_ptr_mut(stream);
        let ws_len = workspace.len();
        let (ws_ptr, _wss) = workspace.device_ptr_mut(stream);
        let mut perf = [unsafe { std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>() }; 8];
        let mut count = 0;
        unsafe {
            sys::cudnnFindConvolutionForwardAlgorithmEx(
                self.handle.0,
                self.x.0,
                x_ptr as *const c_void,
                self.w.0,
                w_ptr as *const c_void,
                self.desc(math),
                self.y.0,
                y_ptr as *mut c_void,
                perf.len() as i32,
                &mut count,
                perf.as_mut_ptr(),
                ws_ptr as *mut c_void,
                ws_len,
            )
            .result()
        }
        .during("cudnnFindConvolutionForwardAlgorithmEx")?;
        Ok(successful(&perf[..count as usize])
            .map(|p| AlgoPerf {
                algo: p.algo,
                math,
                tensor_ops: p.mathType != sys::cudnnMathType_t::CUDNN_FMA_MATH,
                time_ms: p.time,
                workspace: p.memory,
            })
            .collect())
    }

    pub fn workspace_size(&self, math: Math, algo: Algo) -> Result<usize> {
        unsafe {
            result::get_convolution_forward_workspace_size(
                self.handle.0,
                self.x.0,
                self.w.0,
                self.desc(math),
                self.y.0,
                algo,
            )
        }
        .during("cudnnGetConvolutionForwardWorkspaceSize")
    }

    /// `y = conv(x, w)` with `algo`; `workspace` must hold [`CudnnConv::workspace_size`] bytes.
    pub fn forward(
        &self,
        math: Math,
        algo: Algo,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<()> {
        let needed = self.workspace_size(math, algo)?;
        if workspace.len() < needed {
            return Err(Error::WorkspaceTooSmall { needed, given: workspace.len() });
        }
        let stream = self.gpu.stream();
        let (x_ptr, _xs) = x.device_ptr(stream);
        let (w_ptr, _ws) = w.device_ptr(stream);
        let (y_ptr, _ys) = y.device_ptr_mut(stream);
        let ws_len = workspace.len();
        let (ws_ptr, _wss) = workspace.device_ptr_mut(stream);
        let (alpha, beta) = (1.0f32, 0.0f32);
        unsafe {
            result::convolution_forward(
                self.handle.0,
                &alpha as *const f32 as *const c_void,
                self.x.0,
                x_ptr as *const c_void,
                self.w.0,
                w_ptr as *const c_void,
                self.desc(math),
                algo,
                ws_ptr as *mut c_void,
                ws_len,
                &beta as *const f32 as *const c_void,
                self.y.0,
                y_ptr as *mut c_void,
            )
        }
        .during("cudnnConvolutionForward")
    }
}
