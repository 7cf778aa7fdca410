//! The convolution through cuDNN: through its graph (backend) API ([`engines`]: cuDNN 9's
//! engines, what cudnn-frontend and PyTorch run) and through the legacy API ([`legacy`]:
//! `cudnnFindConvolutionForwardAlgorithmEx` and its 8 algorithms).

pub mod engines;
pub mod legacy;

use crate::{Error, Gpu, Result, error::Context};
use cudarc::{
    cudnn::{result, sys},
    driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop},
};
use std::ffi::c_void;

/// The accuracy class of an implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MathClass {
    /// f32 products and sums (FMA); FFT and Winograd transforms in f32 count here too.
    Exact,
    /// Inputs may be rounded to TF32 for tensor cores: what PyTorch runs by default.
    Fast,
}

impl MathClass {
    pub fn name(self) -> &'static str {
        match self {
            MathClass::Exact => "exact",
            MathClass::Fast => "fast",
        }
    }
}

/// The cuDNN library version, e.g. 91900; `None` where libcudnn cannot be loaded.
pub fn version() -> Option<usize> {
    unsafe { sys::is_culib_present() }.then(result::get_version)
}

/// The files of every cuDNN library mapped into this process (the main library and the
/// sub-libraries it has loaded so far), as the loader resolved them.
pub fn loaded_files() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut files: Vec<String> = Vec::new();
    for path in maps.lines().filter_map(|line| line.split_whitespace().nth(5)) {
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.starts_with("libcudnn") && !files.iter().any(|f| f == path) {
            files.push(path.to_owned());
        }
    }
    files
}

fn require_library() -> Result<()> {
    if version().is_none() {
        return Err(Error::LibraryNotFound {
            lib: "libcudnn",
            hint: "put cuDNN 9's lib directory on LD_LIBRARY_PATH (scripts/gpu-run and scripts/bench do)",
        });
    }
    Ok(())
}

/// A cuDNN handle bound to one stream; destroyed on drop.
struct Handle(sys::cudnnHandle_t);

impl Handle {
    fn new(gpu: &Gpu, stream: &CudaStream) -> Result<Self> {
        require_library()?;
        gpu.check_stream(stream)?;
        gpu.context().bind_to_thread().during("cuCtxSetCurrent")?;
        let handle = Handle(result::create_handle().during("cudnnCreate")?);
        unsafe { result::set_stream(handle.0, stream.cu_stream() as _) }.during("cudnnSetStream")?;
        Ok(handle)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { result::destroy_handle(self.0) }.ok();
    }
}

/// The device addresses of a convolution's operands on one stream, as cuDNN takes them. The
/// guards record the operands' use on the stream when dropped (after the cuDNN call).
struct Operands<'a> {
    x: *const c_void,
    w: *const c_void,
    y: *mut c_void,
    workspace: *mut c_void,
    workspace_len: usize,
    _uses: [SyncOnDrop<'a>; 4],
}

impl<'a> Operands<'a> {
    fn new(
        stream: &'a CudaStream,
        x: &'a impl DevicePtr<f32>,
        w: &'a impl DevicePtr<f32>,
        y: &'a mut impl DevicePtrMut<f32>,
        workspace: &'a mut impl DevicePtrMut<u8>,
    ) -> Self {
        let workspace_len = workspace.len();
        let (x, xs) = x.device_ptr(stream);
        let (w, ws) = w.device_ptr(stream);
        let (y, ys) = y.device_ptr_mut(stream);
        let (workspace, wss) = workspace.device_ptr_mut(stream);
        Operands {
            x: x as *const c_void,
            w: w as *const c_void,
            y: y as *mut c_void,
            workspace: workspace as *mut c_void,
            workspace_len,
            _uses: [xs, ws, ys, wss],
        }
    }
}

/// Whether a status says "this configuration cannot run this problem" (as opposed to a
/// failure of the library or the device).
pub fn is_unsupported(error: &Error) -> bool {
    match error {
        // cuDNN 9 numbers the whole CUDNN_STATUS_NOT_SUPPORTED_* family 3000-3999.
        Error::Cudnn { source, .. } => (source.0 as u32) / 1000 == 3,
        Error::CudnnUnsupported(_) => true,
        _ => false,
    }
}
