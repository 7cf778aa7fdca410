//! A CUDA device with its stream and the embedded PTX module that matches its architecture.

use crate::{Error, Result, error::Context, ptx::PTX_MODULES};
use cudarc::{
    driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DriverError, sys},
    nvrtc::Ptx,
};
use kernels_gpu::direct::{DIRECT_FWD_VARIANTS, DirectTile};
use std::sync::Arc;

/// One GPU: its context, one stream that every convkit call of this handle runs on, and
/// the kernels loaded for its architecture. cudarc's cross-stream tracking is off for this
/// context: use its buffers on [`Gpu::stream`], or synchronise other streams yourself.
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The direct kernels, in the order of `DIRECT_FWD_VARIANTS`, resolved once.
    direct: Vec<CudaFunction>,
    arch: u32,
    ptx_arch: u32,
    sm_count: u32,
}

impl Gpu {
    /// Opens device `ordinal`. Fails with [`Error::NoDriver`] where libcuda cannot be
    /// loaded, [`Error::NoDevice`] where the driver has no such device and
    /// [`Error::UnsupportedArch`] where this build carries no PTX the device can run.
    pub fn new(ordinal: usize) -> Result<Self> {
        // cudarc panics when it cannot load the library; ask first.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDriver);
        }
        let count = match CudaContext::device_count() {
            Ok(n) => n as usize,
            Err(DriverError(sys::cudaError_enum::CUDA_ERROR_NO_DEVICE)) => 0,
            Err(e) => return Err(e).during("cuInit/cuDeviceGetCount"),
        };
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).during("cuDevicePrimaryCtxRetain")?;
        // convkit orders its work on one stream; cudarc's per-buffer event tracking would only
        // add event records to every launch (and to every timed region).
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().during("cuDeviceGetAttribute(compute capability)")?;
        let arch = (major * 10 + minor) as u32;
        let (ptx_arch, ptx) = pick_ptx(arch, PTX_MODULES)?;
        let module = ctx.load_module(Ptx::from_src(ptx)).during("cuModuleLoadData")?;
        let direct = DIRECT_FWD_VARIANTS
            .iter()
            .map(|t| module.load_function(t.name).during("cuModuleGetFunction"))
            .collect::<Result<_>>()?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("cuDeviceGetAttribute(multiprocessor count)")? as u32;
        let stream = ctx.default_stream();
        Ok(Gpu { ctx, stream, direct, arch, ptx_arch, sm_count })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Compute capability x 10 (90 for an H100/H200).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// The architecture of the PTX module in use (at most [`Gpu::arch`]).
    pub fn ptx_arch(&self) -> u32 {
        self.ptx_arch
    }

    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    pub fn name(&self) -> Result<String> {
        self.ctx.name().during("cuDeviceGetName")
    }

    /// The driver's CUDA version, e.g. 13000.
    pub fn driver_version(&self) -> Result<i32> {
        let mut v = 0;
        unsafe { sys::cuDriverGetVersion(&mut v) }.result().during("cuDriverGetVersion")?;
        Ok(v)
    }

    /// The loaded kernel of a direct tile variant.
    pub(crate) fn direct_function(&self, tile: &DirectTile) -> Result<&CudaFunction> {
        DIRECT_FWD_VARIANTS.iter().position(|t| t == tile).map(|i| &self.direct[i]).ok_or(Error::UnsupportedTile {
            tile: tile.name,
            reason: "not a kernel of this build (see direct::variants)",
        })
    }

    /// Uninitialised device memory for `len` elements.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>> {
        unsafe { self.stream.alloc::<T>(len) }.map_err(|e| match e {
            DriverError(sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY) => {
                Error::OutOfMemory { bytes: len.saturating_mul(size_of::<T>()) }
            }
            other => Error::Cuda { call: "cuMemAlloc", source: other },
        })
    }

    pub fn upload(&self, host: &[f32]) -> Result<CudaSlice<f32>> {
        let mut dev = self.alloc(host.len())?;
        self.stream.memcpy_htod(host, &mut dev).during("cuMemcpyHtoD")?;
        Ok(dev)
    }

    pub fn download(&self, dev: &impl DevicePtr<f32>) -> Result<Vec<f32>> {
        self.stream.clone_dtoh(dev).during("cuMemcpyDtoH")
    }

    /// Fills with a quiet NaN, so that an element no kernel writes cannot pass a check.
    pub fn poison(&self, dev: &mut impl DevicePtrMut<f32>) -> Result<()> {
        self.fill_bits(dev, f32::NAN.to_bits())
    }

    /// Fills every element with the f32 whose bit pattern is `bits`.
    pub fn fill_bits(&self, dev: &mut impl DevicePtrMut<f32>, bits: u32) -> Result<()> {
        let len = dev.len();
        let (ptr, _sync) = dev.device_ptr_mut(&self.stream);
        unsafe { sys::cuMemsetD32Async(ptr, bits, len, self.stream.cu_stream()) }.result().during("cuMemsetD32Async")
    }

    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("cuStreamSynchronize")
    }
}

/// The module for compute capability `arch`: the newest built for `arch` or older (PTX is
/// JIT-compiled forward, never backward).
pub fn pick_ptx<'a>(arch: u32, modules: &[(u32, &'a str)]) -> Result<(u32, &'a str)> {
    modules.iter().filter(|(cc, _)| *cc <= arch).max_by_key(|(cc, _)| *cc).copied().ok_or_else(|| {
        Error::UnsupportedArch {
            device: arch,
            available: modules.iter().map(|(cc, _)| format!("sm_{cc}")).collect::<Vec<_>>().join(", "),
        }
    })
}

/// A `Pod` kernel parameter struct passed by value (the orphan rule keeps us from
/// implementing cudarc's trait on `kernels-gpu` types directly).
#[repr(transparent)]
pub(crate) struct KernelArg<T>(pub T);

unsafe impl<T: bytemuck::Pod> DeviceRepr for KernelArg<T> {}
