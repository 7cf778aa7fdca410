//! The convolution through cuDNN's legacy API (`cudnnConvolutionForward` and its 8
//! algorithms, ranked by `cudnnFindConvolutionForwardAlgorithmEx`), and its fused
//! convolution, bias and ReLU (`cudnnConvolutionBiasActivationForward`). Thin RAII wrappers
//! over cudarc's bindings (its safe layer has no FindEx).

use super::{Handle, MathClass, Operands};
use crate::{Conv2d, ConvGeometry, Error, Gpu, Result, TensorLayout, error::Context};
use cudarc::{
    cudnn::{result, sys},
    driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut},
};
use std::{ffi::c_void, fmt, sync::Arc};

pub use sys::cudnnConvolutionFwdAlgo_t as Algo;

/// The math mode of a convolution descriptor. `Fma` restricts cuDNN to f32 FMA kernels;
/// `Default` lets it use TF32 tensor cores (on Ampere and later) where it likes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// `Default` math is in the fast class whether or not a given algorithm converts: cuDNN
    /// does not say which of its kernels did.
    pub fn class(self) -> MathClass {
        match self {
            Math::Fma => MathClass::Exact,
            Math::Default => MathClass::Fast,
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

/// Every forward algorithm of the legacy API.
pub const ALGOS: [Algo; 8] = [
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_FFT,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
    Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
];

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

/// An algorithm in a math mode, with the workspace it needs (queried once, not per call).
#[derive(Clone, Copy, Debug)]
pub struct LegacyChoice {
    pub algo: Algo,
    pub math: Math,
    pub workspace: usize,
    /// FindEx's own time (one run), where the choice came from FindEx.
    pub find_ms: Option<f32>,
    /// Whether cuDNN reports a tensor-op math type for the run it timed.
    pub tensor_ops: bool,
}

impl LegacyChoice {
    /// `IMPLICIT_GEMM/FMA`, as tables print it.
    pub fn name(&self) -> String {
        format!("{}/{}", algo_name(self.algo), self.math)
    }
}

/// RAII owners of cuDNN's legacy descriptors.
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
owned!(TensorDesc, sys::cudnnTensorDescriptor_t, result::destroy_tensor_descriptor);
owned!(FilterDesc, sys::cudnnFilterDescriptor_t, result::destroy_filter_descriptor);
owned!(ConvDesc, sys::cudnnConvolutionDescriptor_t, result::destroy_convolution_descriptor);
owned!(ActivationDesc, sys::cudnnActivationDescriptor_t, destroy_activation_descriptor);

/// cudarc's result layer has no destroy for activation descriptors.
unsafe fn destroy_activation_descriptor(desc: sys::cudnnActivationDescriptor_t) -> Result<(), result::CudnnError> {
    unsafe { sys::cudnnDestroyActivationDescriptor(desc) }.result()
}

/// The entries of a ranking whose algorithm can run (cuDNN lists the others with an error).
fn successful(
    perf: &[sys::cudnnConvolutionFwdAlgoPerf_t],
) -> impl Iterator<Item = &sys::cudnnConvolutionFwdAlgoPerf_t> {
    perf.iter().filter(|p| p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
}

/// One convolution problem described to cuDNN's legacy API, in both math modes, on one stream.
pub struct LegacyConv<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    geom: ConvGeometry,
    /// Output channels (the bias's length).
    k: usize,
    // Field order is drop order: descriptors before the handle.
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    fma: ConvDesc,
    default: ConvDesc,
    /// The fused call's bias (1 x K x 1 x 1) and activation (ReLU).
    bias: TensorDesc,
    relu: ActivationDesc,
    handle: Handle,
}

impl<'g> LegacyConv<'g> {
    /// The problem `conv`, run on `stream`.
    pub fn new(gpu: &'g Gpu, stream: &Arc<CudaStream>, conv: &Conv2d) -> Result<Self> {
        let geom = conv.geometry()?;
        let handle = Handle::new(gpu, stream)?;
        let int = |v: usize| v as i32; // geometry() bounds every extent by i32::MAX
        let float = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        // NHWC tensors take an NHWC (KRSC) filter; dimensions stay in NCHW order.
        let format = match conv.layout {
            TensorLayout::Nchw => nchw,
            TensorLayout::Nhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        };
        unsafe {
            let x = TensorDesc(result::create_tensor_descriptor().during("cudnnCreateTensorDescriptor")?);
            result::set_tensor4d_descriptor(x.0, format, float, [conv.n, conv.c, conv.h, conv.w].map(int))
                .during("cudnnSetTensor4dDescriptor(x)")?;
            let y = TensorDesc(result::create_tensor_descriptor().during("cudnnCreateTensorDescriptor")?);
            result::set_tensor4d_descriptor(y.0, format, float, [conv.n, conv.k, geom.out_h, geom.out_w].map(int))
                .during("cudnnSetTensor4dDescriptor(y)")?;
            let w = FilterDesc(result::create_filter_descriptor().during("cudnnCreateFilterDescriptor")?);
            result::set_filter4d_descriptor(w.0, float, format, [conv.k, geom.c_per_group, conv.r, conv.s].map(int))
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
            let (fma, default) = (conv_desc(Math::Fma)?, conv_desc(Math::Default)?);
            let bias = TensorDesc(result::create_tensor_descriptor().during("cudnnCreateTensorDescriptor")?);
            result::set_tensor4d_descriptor(bias.0, nchw, float, [1, int(conv.k), 1, 1])
                .during("cudnnSetTensor4dDescriptor(bias)")?;
            let relu =
                ActivationDesc(result::create_activation_descriptor().during("cudnnCreateActivationDescriptor")?);
            // NaN propagated, as our epilogue does.
            result::set_activation_descriptor(
                relu.0,
                sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU,
                sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                0.0,
            )
            .during("cudnnSetActivationDescriptor")?;
            Ok(LegacyConv { gpu, stream: stream.clone(), geom, k: conv.k, x, w, y, fma, default, bias, relu, handle })
        }
    }

    fn desc(&self, math: Math) -> sys::cudnnConvolutionDescriptor_t {
        match math {
            Math::Fma => self.fma.0,
            Math::Default => self.default.0,
        }
    }

    /// cuDNN's heuristic ranking (no timing), best first.
    pub fn heuristic(&self, math: Math) -> Result<Vec<LegacyChoice>> {
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
        Ok(successful(&perf[..count as usize]).map(|p| choice(p, math, None)).collect())
    }

    /// Times every algorithm that fits `workspace` (`cudnnFindConvolutionForwardAlgorithmEx`,
    /// which overwrites `y`); fastest first by cuDNN's own single timing.
    pub fn find(
        &self,
        math: Math,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<Vec<LegacyChoice>> {
        super::super::check_buffers(self.gpu, &self.geom, x, w, y)?;
        let ops = Operands::new(&self.stream, x, w, y, workspace);
        let mut perf = [unsafe { std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>() }; 8];
        let mut count = 0;
        unsafe {
            sys::cudnnFindConvolutionForwardAlgorithmEx(
                self.handle.0,
                self.x.0,
                ops.x,
                self.w.0,
                ops.w,
                self.desc(math),
                self.y.0,
                ops.y,
                perf.len() as i32,
                &mut count,
                perf.as_mut_ptr(),
                ops.workspace,
                ops.workspace_len,
            )
            .result()
        }
        .during("cudnnFindConvolutionForwardAlgorithmEx")?;
        drop(ops); // records the operands' use
        self.gpu.check_deferred()?;
        Ok(successful(&perf[..count as usize]).map(|p| choice(p, math, Some(p.time))).collect())
    }

    /// `y = conv(x, w)` with `choice`; `workspace` must hold `choice.workspace` bytes.
    pub fn forward(
        &self,
        choice: &LegacyChoice,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<()> {
        self.check_run(choice, x, w, y, workspace)?;
        {
            let ops = Operands::new(&self.stream, x, w, y, workspace);
            let (alpha, beta) = (1.0f32, 0.0f32);
            unsafe {
                result::convolution_forward(
                    self.handle.0,
                    &alpha as *const f32 as *const c_void,
                    self.x.0,
                    ops.x,
                    self.w.0,
                    ops.w,
                    self.desc(choice.math),
                    choice.algo,
                    ops.workspace,
                    ops.workspace_len,
                    &beta as *const f32 as *const c_void,
                    self.y.0,
                    ops.y,
                )
            }
            .during("cudnnConvolutionForward")?;
        }
        self.gpu.check_deferred()
    }
}

impl LegacyConv<'_> {
    /// The checks before running `choice`: the workspace it needs, and the buffers' extents.
    fn check_run(
        &self,
        choice: &LegacyChoice,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &impl DevicePtrMut<f32>,
        workspace: &impl DevicePtrMut<u8>,
    ) -> Result<()> {
        if workspace.len() < choice.workspace {
            return Err(Error::WorkspaceTooSmall { needed: choice.workspace, given: workspace.len() });
        }
        super::super::check_buffers(self.gpu, &self.geom, x, w, y)
    }

    /// `y = relu(conv(x, w) + bias)` in one call (`cudnnConvolutionBiasActivationForward`,
    /// what a cuDNN user fuses); `bias` holds K values, `workspace` `choice.workspace` bytes.
    pub fn forward_bias_relu(
        &self,
        choice: &LegacyChoice,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        bias: &CudaSlice<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<()> {
        self.check_run(choice, x, w, y, workspace)?;
        if bias.len() != self.k {
            return Err(Error::BufferSize { buffer: "bias", expected: self.k, got: bias.len() });
        }
        self.gpu.check_buffer("bias", bias)?;
        {
            let (b, _use) = bias.device_ptr(&self.stream);
            let ops = Operands::new(&self.stream, x, w, y, workspace);
            // alpha2 = 0: the z input (required, here the output itself) adds nothing.
            let (alpha1, alpha2) = (1.0f32, 0.0f32);
            unsafe {
                result::convolution_bias_activation_forward(
                    self.handle.0,
                    &alpha1 as *const f32 as *const c_void,
                    self.x.0,
                    ops.x,
                    self.w.0,
                    ops.w,
                    self.desc(choice.math),
                    choice.algo,
                    ops.workspace,
                    ops.workspace_len,
                    &alpha2 as *const f32 as *const c_void,
                    self.y.0,
                    ops.y,
                    self.bias.0,
                    b as *const c_void,
                    self.relu.0,
                    self.y.0,
                    ops.y,
                )
            }
            .during("cudnnConvolutionBiasActivationForward")?;
        }
        self.gpu.check_deferred()
    }
}

fn choice(p: &sys::cudnnConvolutionFwdAlgoPerf_t, math: Math, find_ms: Option<f32>) -> LegacyChoice {
    use sys::cudnnMathType_t::{CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION};
    LegacyChoice {
        algo: p.algo,
        math,
        workspace: p.memory,
        find_ms,
        tensor_ops: matches!(p.mathType, CUDNN_TENSOR_OP_MATH | CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION),
    }
}
