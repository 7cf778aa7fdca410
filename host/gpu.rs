//! A CUDA device, its default stream and the embedded module that matches its architecture
//! (a cubin built for exactly it where the build has one, else PTX). Kernels are looked up by
//! name; this module knows no algorithm.

use crate::{
    Error, Result,
    error::Context,
    ptx::{CUBIN_MODULES, PTX_MODULES},
};
use bytemuck::AnyBitPattern;
use cudarc::{
    driver::{
        CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice,
        DriverError, LaunchConfig, PushKernelArg, sys,
    },
    nvrtc::Ptx,
};
use kernels_gpu::random::{FILL_KERNEL, FillParams};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// A resolved entry point, with the block size its registers allow.
#[derive(Clone, Debug)]
struct Kernel {
    function: CudaFunction,
    max_threads: u32,
    /// Dynamic shared memory one block may take, in bytes.
    max_dynamic_smem: u32,
}

/// One GPU: its context, a default stream and the kernels loaded for its architecture.
///
/// Every launch takes the stream it runs on ([`Gpu::stream`] is the default). Buffers keep
/// cudarc's event tracking, so a buffer written on one stream and read on another is
/// ordered correctly; with a single stream that tracking costs nothing.
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    /// Entry points resolved so far, so that a launch does not look its kernel up again.
    functions: Mutex<HashMap<&'static str, Kernel>>,
    /// Occupancy answers so far, by kernel, block size and dynamic shared memory: launchers
    /// ask on every call, and the driver's occupancy calculator costs microseconds.
    resident: Mutex<HashMap<(&'static str, u32, u32), u32>>,
    arch: u32,
    ptx_arch: u32,
    module_kind: ModuleKind,
    sm_count: u32,
    /// Shared memory one block may opt in to, in bytes.
    smem_optin: i32,
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
        let (major, minor) = ctx.compute_capability().during("cuDeviceGetAttribute(compute capability)")?;
        let arch = (major * 10 + minor) as u32;
        let (ptx_arch, ptx) = pick_ptx(arch, PTX_MODULES)?;
        // A cubin the driver refuses (one from a newer ptxas than the driver knows) leaves
        // the PTX, which any driver as new as its ISA version JIT-compiles.
        let cubin = CUBIN_MODULES.iter().find(|(cc, _)| *cc == arch);
        let (module, module_kind) = match cubin.map(|(_, image)| ctx.load_module(Ptx::from_binary(image.to_vec()))) {
            Some(Ok(module)) => (module, ModuleKind::Cubin),
            _ => (ctx.load_module(Ptx::from_src(ptx)).during("cuModuleLoadData")?, ModuleKind::Ptx),
        };
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .during("cuDeviceGetAttribute(multiprocessor count)")? as u32;
        let smem_optin = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .during("cuDeviceGetAttribute(max shared memory per block, opt-in)")?;
        let stream = ctx.default_stream();
        Ok(Gpu {
            ctx,
            stream,
            module,
            functions: Mutex::default(),
            resident: Mutex::default(),
            arch,
            ptx_arch,
            module_kind,
            sm_count,
            smem_optin,
        })
    }

    /// The default stream (CUDA's legacy default stream of this context).
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

    /// Whether the kernels run from a cubin or from PTX the driver compiled.
    pub fn module_kind(&self) -> ModuleKind {
        self.module_kind
    }

    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// Device memory free now, in bytes (all contexts' allocations and reservations counted).
    pub fn free_memory(&self) -> Result<usize> {
        self.ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        let (free, _) = cudarc::driver::result::mem_get_info().during("cuMemGetInfo")?;
        Ok(free)
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

    /// The PCI bus id, e.g. `0000:1B:00.0` (how NVML finds the same device).
    pub fn pci_bus_id(&self) -> Result<String> {
        let mut buf = [0 as std::ffi::c_char; 32];
        unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, self.ctx.cu_device()) }
            .result()
            .during("cuDeviceGetPCIBusId")?;
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// The kernel `name` of the loaded module.
    pub(crate) fn function(&self, name: &'static str) -> Result<CudaFunction> {
        self.kernel(name).map(|k| k.function)
    }

    /// The kernel `name` and what launches ask of it, resolved once.
    fn kernel(&self, name: &'static str) -> Result<Kernel> {
        let mut functions = self.functions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(k) = functions.get(name) {
            return Ok(k.clone());
        }
        let f = self.module.load_function(name).during("cuModuleGetFunction")?;
        // Every kernel may take all the dynamic shared memory the device allows (48 KB without
        // this); a launch still asks only for what it needs.
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        let static_bytes = f.shared_size_bytes().during("cuFuncGetAttribute(shared size)")?;
        let max_dynamic_smem = self.smem_optin - static_bytes;
        f.set_attribute(attr, max_dynamic_smem).during("cuFuncSetAttribute(max dynamic shared)")?;
        let max_threads = f.max_threads_per_block().during("cuFuncGetAttribute(max threads)")? as u32;
        let k = Kernel { function: f, max_threads, max_dynamic_smem: max_dynamic_smem.max(0) as u32 };
        functions.insert(name, k.clone());
        Ok(k)
    }

    /// Blocks of `threads` threads and `smem_bytes` of dynamic shared memory that one SM holds
    /// at once running kernel `name` (0 where one block asks for more shared memory than it may take).
    pub(crate) fn resident_blocks(&self, name: &'static str, threads: u32, smem_bytes: u32) -> Result<u32> {
        let key = (name, threads, smem_bytes);
        if let Some(&blocks) = self.resident.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key) {
            return Ok(blocks);
        }
        let kernel = self.kernel(name)?;
        let blocks = if smem_bytes > kernel.max_dynamic_smem {
            0
        } else {
            kernel
                .function
                .occupancy_max_active_blocks_per_multiprocessor(threads, smem_bytes as usize, None)
                .during("cuOccupancyMaxActiveBlocksPerMultiprocessor")?
        };
        self.resident.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(key, blocks);
        Ok(blocks)
    }

    /// Threads per block for a kernel whose blocks each work through their items with a
    /// block-stride loop (any block size computes the same): `preferred` when there are enough
    /// blocks to fill the GPU, else as many as the kernel's registers allow (up to 1024), so
    /// that a lone block or a few get all the threads an SM can give them.
    pub(crate) fn block_threads(&self, name: &'static str, preferred: u32, blocks: u64) -> Result<u32> {
        let most = self.kernel(name)?.max_threads;
        let threads = if blocks >= self.sm_count as u64 { preferred } else { 1024 };
        // Whole warps, within what the kernel's registers allow.
        Ok(threads.min(most) / 32 * 32)
    }

    /// Launches kernel `name` with its parameter struct on `stream` (checked to be ours).
    ///
    /// # Safety
    /// `params` must be what the kernel expects, and every address in it must stay valid
    /// and correctly sized for the whole launch.
    pub(crate) unsafe fn launch<P: bytemuck::Pod>(
        &self,
        stream: &CudaStream,
        name: &'static str,
        cfg: LaunchConfig,
        params: P,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let function = self.function(name)?;
        let arg = KernelArg(params);
        unsafe { stream.launch_builder(&function).arg(&arg).launch(cfg) }
            .map(drop)
            .map_err(|source| Error::Cuda { call: "cuLaunchKernel", source })
    }

    /// Fails unless `stream` belongs to this GPU's context.
    pub(crate) fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if stream.context().cu_ctx() == self.ctx.cu_ctx() {
            Ok(())
        } else {
            Err(Error::ForeignContext { what: "stream".to_owned() })
        }
    }

    /// Fails unless `buffer` was allocated in this GPU's context.
    pub(crate) fn check_buffer<T>(&self, what: &str, buffer: &impl DeviceSlice<T>) -> Result<()> {
        if buffer.stream().context().cu_ctx() == self.ctx.cu_ctx() {
            Ok(())
        } else {
            Err(Error::ForeignContext { what: format!("buffer `{what}`") })
        }
    }

    /// Surfaces an error that cudarc could only record (in drop paths: the event records
    /// and waits that order buffers across streams).
    pub fn check_deferred(&self) -> Result<()> {
        self.ctx.check_err().during("a deferred cross-stream event record/wait")
    }

    /// Device memory for `len` elements of a type for which every bit pattern is a value
    /// (so the memory's arbitrary initial contents are valid reads).
    pub fn alloc<T: DeviceRepr + AnyBitPattern>(&self, len: usize) -> Result<CudaSlice<T>> {
        unsafe { self.stream.alloc::<T>(len) }.map_err(|e| match e {
            DriverError(sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY) => {
                Error::OutOfMemory { bytes: len.saturating_mul(size_of::<T>()) }
            }
            other => Error::Cuda { call: "cuMemAlloc", source: other },
        })
    }

    pub fn upload<T: DeviceRepr + AnyBitPattern>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        let mut dev = self.alloc(host.len())?;
        self.stream.memcpy_htod(host, &mut dev).during("cuMemcpyHtoD")?;
        Ok(dev)
    }

    pub fn download<T: DeviceRepr + AnyBitPattern>(&self, dev: &impl DevicePtr<T>) -> Result<Vec<T>> {
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

    /// `data[i] = uniform(seed, i)`, values in [-1, 1) from `kernels_gpu::random` (the same
    /// function the host-side references draw from), on `stream`.
    pub fn fill_uniform(&self, stream: &CudaStream, data: &mut impl DevicePtrMut<f32>, seed: u64) -> Result<()> {
        let len = data.len() as u64;
        {
            let (ptr, _sync) = data.device_ptr_mut(stream);
            let params = FillParams { data: ptr, len, seed };
            // Safety: the kernel writes `len` f32s from `ptr`.
            unsafe { self.launch(stream, FILL_KERNEL, grid_stride_config(self, len), params) }?;
        }
        self.check_deferred()
    }

    /// Waits for the default stream, then surfaces deferred errors.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("cuStreamSynchronize")?;
        self.check_deferred()
    }
}

/// What the loaded kernels came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    /// Machine code for the device's architecture, assembled at build time (`CONVKIT_PTXAS`).
    Cubin,
    /// PTX, JIT-compiled by the driver at load time (or taken from its compute cache).
    Ptx,
}

/// The module for compute capability `arch`: the newest built for `arch` or older (PTX is
/// JIT-compiled forward, never backward), an architecture-specific one (`sm_90a`,
/// [`kernels_gpu::arch_specific`]) for its own only.
pub fn pick_ptx<'a>(arch: u32, modules: &[(u32, &'a str)]) -> Result<(u32, &'a str)> {
    let runs = |cc: u32| cc == arch || (cc < arch && !kernels_gpu::arch_specific(cc));
    modules.iter().filter(|(cc, _)| runs(*cc)).max_by_key(|(cc, _)| *cc).copied().ok_or_else(|| {
        Error::UnsupportedArch {
            device: arch,
            available: modules
                .iter()
                .map(|(cc, _)| format!("sm_{cc}{}", kernels_gpu::arch_suffix(*cc)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    })
}

/// A `Pod` kernel parameter struct passed by value (the orphan rule keeps us from
/// implementing cudarc's trait on `kernels-gpu` types directly).
#[repr(transparent)]
struct KernelArg<T>(T);

unsafe impl<T: bytemuck::Pod> DeviceRepr for KernelArg<T> {}

/// A grid-stride launch over `len` items: enough blocks to fill the GPU a few times over,
/// no more than the items need.
pub(crate) fn grid_stride_config(gpu: &Gpu, len: u64) -> LaunchConfig {
    const THREADS: u32 = 256;
    let wanted = len.div_ceil(THREADS as u64).max(1);
    let blocks = wanted.min(gpu.sm_count() as u64 * 8) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}
