//! Convolution algorithms, one module each: [`direct`], [`depthwise`], [`fft`] (fused, depthwise),
//! [`fft_gemm`] (overlap-save tiles and a per-frequency cgemm, any groups) and [`igemm`]
//! (implicit GEMM on tensor cores, TF32 and 3xTF32), convkit's kernels;
//! [`cudnn`] (cuDNN, through its legacy and its graph API).

pub mod cudnn;
pub mod depthwise;
pub mod direct;
pub mod epilogue;
pub mod fft;
pub mod fft_gemm;
pub mod igemm;

use crate::{ConvGeometry, Error, Gpu, Result};
use cudarc::driver::{CudaStream, DeviceSlice, LaunchConfig};
use cudnn::MathClass;
use kernels_gpu::conv::{MAX_GRID_Z, Window};

/// Why a kernel that reads and writes NCHW tensors cannot compute `conv`, if it cannot: every
/// convkit kernel but the depthwise kernel's channels-last program.
pub(crate) fn nchw_unsupported(conv: &crate::Conv2d) -> Option<&'static str> {
    (conv.layout != crate::TensorLayout::Nchw)
        .then_some("NCHW tensors only (channels-last layers: the depthwise kernel's NHWC program, the tensor-core kernel's NHWC tiles or cuDNN)")
}

/// Fails unless x, w and y belong to `gpu` and hold exactly the shape's elements.
pub(crate) fn check_buffers(
    gpu: &Gpu,
    geom: &ConvGeometry,
    x: &impl DeviceSlice<f32>,
    w: &impl DeviceSlice<f32>,
    y: &impl DeviceSlice<f32>,
) -> Result<()> {
    for (buffer, expected, got) in [("x", geom.x_len, x.len()), ("w", geom.w_len, w.len()), ("y", geom.y_len, y.len())]
    {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    gpu.check_buffer("x", x)?;
    gpu.check_buffer("w", w)?;
    gpu.check_buffer("y", y)
}

/// The kernels' [`Window`] of `conv` (valid: `Conv2d::geometry` bounds every value to 32 bits).
pub(crate) fn window(conv: &crate::Conv2d) -> Window {
    let u = |v: usize| v as u32;
    Window {
        filter_r: u(conv.r),
        filter_s: u(conv.s),
        pad_h: conv.pad[0] as i32,
        pad_w: conv.pad[1] as i32,
        stride_h: u(conv.stride[0]),
        stride_w: u(conv.stride[1]),
        dil_h: u(conv.dilation[0]),
        dil_w: u(conv.dilation[1]),
    }
}

/// A grid whose z-index packs more than CUDA's z-limit may hold.
pub(crate) struct SplitGrid {
    pub kernel: &'static str,
    pub grid_x: u32,
    /// Packed z-indices in all.
    pub total_z: u64,
    pub block_threads: u32,
    pub smem_bytes: u32,
}

/// Launches `grid` on `stream` as launches of at most [`MAX_GRID_Z`] z-indices, telling each
/// its first z-index through `set_z_base`.
///
/// # Safety
/// `params` must hold buffers and extents the kernel's index arithmetic is valid for.
pub(crate) unsafe fn launch_split_z<P: bytemuck::Pod>(
    gpu: &Gpu,
    stream: &CudaStream,
    grid: &SplitGrid,
    mut params: P,
    set_z_base: impl Fn(&mut P, u32),
) -> Result<()> {
    let mut z_base = 0u64;
    while z_base < grid.total_z {
        let z = (grid.total_z - z_base).min(MAX_GRID_Z as u64) as u32;
        set_z_base(&mut params, z_base as u32);
        let cfg = LaunchConfig {
            grid_dim: (grid.grid_x, 1, z),
            block_dim: (grid.block_threads, 1, 1),
            shared_mem_bytes: grid.smem_bytes,
        };
        unsafe { gpu.launch(stream, grid.kernel, cfg, params) }?;
        z_base += z as u64;
    }
    Ok(())
}

/// Fails unless x and y belong to `gpu` and hold exactly the shape's elements (algorithms whose
/// filters live in a plan).
pub(crate) fn check_io(
    gpu: &Gpu,
    geom: &ConvGeometry,
    x: &impl DeviceSlice<f32>,
    y: &impl DeviceSlice<f32>,
) -> Result<()> {
    for (buffer, expected, got) in [("x", geom.x_len, x.len()), ("y", geom.y_len, y.len())] {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    gpu.check_buffer("x", x)?;
    gpu.check_buffer("y", y)
}

/// One way to compute a convolution: an algorithm and its variant. Its text form (what plan
/// caches store and tables print) is the kernel's name for convkit's algorithms
/// (`direct_fwd_rows_k8_p4`, `depthwise_k3_s1_m1_32x32`, `fftconv_dw_72`, `fftgemm_56`,
/// `igemm_tf32_m128_n56_k8`) and `cudnn:` followed by an engine
/// configuration's tag, `cudnn:heuristic-exact`/`-fast`, or `cudnn-legacy:` followed by a
/// legacy algorithm and math mode (`cudnn-legacy:WINOGRAD_NONFUSED/FMA`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// The direct kernel with one of [`direct::variants`].
    Direct(&'static str),
    /// The depthwise kernel with one of [`depthwise::variants`].
    Depthwise(&'static str),
    /// The fused whole-image FFT convolution (depthwise) with one of [`fft::variants`].
    Fft(&'static str),
    /// The tiled FFT convolution with one of [`fft_gemm::sizes`].
    FftGemm(&'static str),
    /// The tensor-core implicit GEMM with one of [`igemm::variants`]: TF32 ones in the fast
    /// class, 3xTF32 ones in the exact class.
    Igemm(&'static str),
    /// A cuDNN 9 engine configuration, by its cudnn-frontend tag (`eng67_k2=2_k13=0...`).
    CudnnEngine(String),
    /// The first configuration of this class that cuDNN's heuristics (mode A) propose and
    /// that builds within the workspace limit, resolved when a plan is built.
    CudnnHeuristic(MathClass),
    /// A legacy cuDNN algorithm in a math mode.
    CudnnLegacy(cudnn::legacy::Algo, cudnn::legacy::Math),
}

impl Algorithm {
    /// The family, for tables: `direct`, `depthwise`, `fft`, `fft-gemm`, `cudnn` or `cudnn-legacy`.
    pub fn family(&self) -> &'static str {
        match self {
            Algorithm::Direct(_) => "direct",
            Algorithm::Depthwise(_) => "depthwise",
            Algorithm::Fft(_) => "fft",
            Algorithm::FftGemm(_) => "fft-gemm",
            Algorithm::Igemm(_) => "igemm",
            Algorithm::CudnnEngine(_) | Algorithm::CudnnHeuristic(_) => "cudnn",
            Algorithm::CudnnLegacy(..) => "cudnn-legacy",
        }
    }

    /// Whether convkit's own kernels run it.
    pub fn is_convkit(&self) -> bool {
        matches!(
            self,
            Algorithm::Direct(_)
                | Algorithm::Depthwise(_)
                | Algorithm::Fft(_)
                | Algorithm::FftGemm(_)
                | Algorithm::Igemm(_)
        )
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Algorithm::Direct(name)
            | Algorithm::Depthwise(name)
            | Algorithm::Fft(name)
            | Algorithm::FftGemm(name)
            | Algorithm::Igemm(name) => f.write_str(name),
            Algorithm::CudnnEngine(tag) => write!(f, "cudnn:{tag}"),
            Algorithm::CudnnHeuristic(class) => write!(f, "cudnn:heuristic-{}", class.name()),
            Algorithm::CudnnLegacy(algo, math) => write!(f, "cudnn-legacy:{}/{math}", cudnn::legacy::algo_name(*algo)),
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = Error;

    /// Parses the text form; a kernel name this build does not hold is an error.
    fn from_str(text: &str) -> Result<Self> {
        let unknown = || Error::invalid("algorithm", format!("{text:?} is not an algorithm of this build"));
        if let Some(rest) = text.strip_prefix("cudnn-legacy:") {
            let (algo, math) = rest.split_once('/').ok_or_else(unknown)?;
            let algo =
                cudnn::legacy::ALGOS.iter().find(|&&a| cudnn::legacy::algo_name(a) == algo).ok_or_else(unknown)?;
            let math = [cudnn::legacy::Math::Fma, cudnn::legacy::Math::Default]
                .into_iter()
                .find(|m| m.to_string() == math)
                .ok_or_else(unknown)?;
            return Ok(Algorithm::CudnnLegacy(*algo, math));
        }
        if let Some(rest) = text.strip_prefix("cudnn:") {
            return Ok(match rest {
                "heuristic-exact" => Algorithm::CudnnHeuristic(MathClass::Exact),
                "heuristic-fast" => Algorithm::CudnnHeuristic(MathClass::Fast),
                tag if tag.starts_with("eng") => Algorithm::CudnnEngine(tag.to_owned()),
                _ => return Err(unknown()),
            });
        }
        if let Some(tile) = direct::variants().iter().find(|t| t.name == text) {
            return Ok(Algorithm::Direct(tile.name));
        }
        if let Some(tile) = depthwise::variants().iter().find(|t| t.name == text) {
            return Ok(Algorithm::Depthwise(tile.name));
        }
        if let Some(tile) = fft::variants().iter().find(|t| t.name == text) {
            return Ok(Algorithm::Fft(tile.name));
        }
        if let Some(size) = fft_gemm::sizes().iter().find(|s| s.name == text) {
            return Ok(Algorithm::FftGemm(size.name));
        }
        if let Some(tile) = igemm::variants().iter().find(|t| t.name == text) {
            return Ok(Algorithm::Igemm(tile.name));
        }
        Err(unknown())
    }
}
