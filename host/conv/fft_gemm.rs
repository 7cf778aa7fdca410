//! Launcher of FFT convolution by overlap-save tiles and a per-frequency complex GEMM
//! (`kernels-gpu/src/conv/fft_gemm.rs`), for any grouped layer: input spectra, the batched
//! cgemm over (frequency, group), output tiles. A plan holds the transform size and the
//! filters' spectra (computed when the plan is made and again only on
//! [`FftGemmPlan::set_weights`]); a run writes the input and output spectra into the caller's
//! workspace ([`FftGemmShape::workspace_bytes`]). [`choose`] keeps the two within a caller's
//! limits.

use crate::{
    Conv2d, ConvGeometry, Error, Gpu, Result,
    cgemm::{BatchedGemm, Family, Layout, Op, cgemm, choose_tile},
    fft::twiddles,
};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    complex::Complex32,
    conv::{
        fft::extent,
        fft_gemm::{FFT_GEMM_SIZES, FftGemmParams, FftGemmSize, tile_outputs},
    },
};

/// Every transform size the PTX holds, smallest first.
pub fn sizes() -> &'static [FftGemmSize] {
    FFT_GEMM_SIZES
}

/// How a layer is cut into tiles for one transform size, and what that costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FftGemmShape {
    pub size: FftGemmSize,
    /// Outputs per tile and tiles, per dimension.
    pub tile: [u32; 2],
    pub tiles: [u32; 2],
    /// Images x tiles, and pairs of them (the GEMM's columns).
    pub units: u32,
    pub pairs: u32,
    /// A depthwise layer: one fused launch, no GEMM, no workspace.
    pub fused: bool,
    /// Bytes of the filters' spectra (held by the plan).
    pub filter_bytes: usize,
    /// Bytes of a run's input spectra; its output spectra follow at the next 256-byte boundary.
    pub input_bytes: usize,
    pub output_bytes: usize,
    /// A rough time in seconds, what [`choose`] minimises: a fixed cost per launch, DRAM
    /// traffic at 4.3 TB/s, the transforms' blocks on an H200's 132 SMs ([`transforms_s`]), the
    /// GEMM at a rate for the cgemm family it gets (see [`gemm_rate`]).
    pub estimate_s: f64,
}

impl FftGemmShape {
    /// Device memory a plan of this shape holds: the filters' spectra and the twiddles.
    pub fn plan_bytes(&self) -> usize {
        self.filter_bytes + self.size.side() as usize * size_of::<Complex32>()
    }

    /// Where a run's output spectra start in its workspace.
    pub fn output_offset(&self) -> usize {
        self.input_bytes.next_multiple_of(256)
    }

    /// The workspace a run needs.
    pub fn workspace_bytes(&self) -> usize {
        self.output_offset() + self.output_bytes
    }
}

/// The tiling of `conv` for `size`, or why there is none.
pub fn shape(conv: &Conv2d, geom: &ConvGeometry, size: &FftGemmSize) -> std::result::Result<FftGemmShape, String> {
    if let Some(reason) = super::nchw_unsupported(conv) {
        return Err(reason.into());
    }
    let u = |v: usize| v as u32;
    let t = size.side();
    let dims = [
        (u(conv.r), u(conv.dilation[0]), u(conv.stride[0]), u(geom.out_h)),
        (u(conv.s), u(conv.dilation[1]), u(conv.stride[1]), u(geom.out_w)),
    ];
    let mut tile = [0; 2];
    let mut tiles = [0; 2];
    for (d, &(taps, dil, stride, out)) in dims.iter().enumerate() {
        let e = extent(taps, dil);
        tile[d] = tile_outputs(t, e, stride).min(out);
        if tile[d] == 0 {
            return Err(format!("{} is narrower than the filter's extent {e}", size.side()));
        }
        tiles[d] = out.div_ceil(tile[d]);
    }
    let units = conv.n as u64 * tiles[0] as u64 * tiles[1] as u64;
    let pairs = units.div_ceil(2);
    let blocks = pairs * conv.c.max(conv.k) as u64;
    if blocks > i32::MAX as u64 {
        return Err(format!("needs {blocks} blocks (channels x pairs of tiles), past the grid's 2^31 - 1"));
    }
    let bins = (t * t) as usize;
    let complex = size_of::<Complex32>();
    let fused = conv.groups == conv.c && conv.k == conv.c;
    let filter_bytes = bins * conv.k * geom.c_per_group * complex;
    let per_bin = bins * pairs as usize * complex;
    let (input_bytes, output_bytes) = if fused { (0, 0) } else { (per_bin * conv.c, per_bin * conv.k) };
    let mut shape = FftGemmShape {
        size: *size,
        tile,
        tiles,
        units: units as u32,
        pairs: pairs as u32,
        fused,
        filter_bytes,
        input_bytes,
        output_bytes,
        estimate_s: 0.0,
    };
    let dram = (filter_bytes + 2 * (input_bytes + output_bytes)) as f64 + 4.0 * (geom.x_len + geom.y_len) as f64;
    let (transforms, launches) = if fused {
        (transforms_s(t, pairs * conv.c as u64, 2.0), 1.0)
    } else {
        (transforms_s(t, pairs * conv.c as u64, 1.0) + transforms_s(t, pairs * conv.k as u64, 1.0), 3.0)
    };
    let gemm_s = if fused {
        0.0
    } else {
        let g = gemm(conv, geom, &shape);
        g.validate().map_err(|e| format!("its per-frequency product: {e}"))?;
        8.0 * bins as f64 * (conv.k * geom.c_per_group) as f64 * pairs as f64 / gemm_rate(&g)
    };
    shape.estimate_s = launches * LAUNCH_S + dram / 4.3e12 + transforms + gemm_s;
    Ok(shape)
}

/// SMs the estimate assumes (an H200's).
const MODEL_SMS: u64 = 132;
/// A launch's fixed cost in the estimates: the fastest FFT convolution measured, a few dozen
/// small blocks, took 8.4 µs (host-free, H200).
pub const LAUNCH_S: f64 = 4e-6;

/// The time the H200 takes for `blocks` blocks each running `transforms` 2D transforms of
/// side `t`. Fitted at 4b7c1e0 to the depthwise FFT convolutions of the 45x45 layer (sides
/// 48-120, 13-576 blocks, within 15%): an SM gets through about one radix-2 stage of a point
/// per 0.105 ns whatever its block count and block size (a lone block runs 1024 threads,
/// see `Gpu::block_threads`), and a grid with fewer blocks than SMs still costs one block.
pub fn transforms_s(t: u32, blocks: u64, transforms: f64) -> f64 {
    let per_block = 0.105e-9 * transforms * (t as f64 * t as f64) * (t as f64).log2();
    (blocks as f64 / MODEL_SMS as f64).max(1.0) * per_block
}

/// FLOP/s the estimate expects of the cgemm on `g`, by the family its heuristic picks
/// (measured on the H200 at e3e184b: a Large tile ran the 64 x 8 x 64 products at about
/// 25 TFLOP/s, a Tiled one the 64 x 5 x 64 ones at 3).
pub fn gemm_rate(g: &BatchedGemm) -> f64 {
    match choose_tile(g, false).family {
        // Tensor took over Large's products at 2.3x its speed on the 64 x 8 x 64 one (cgemm
        // bench); the model keeps Large's rate until it is refitted to FFT convolutions.
        Family::Large | Family::Tensor => 25e12,
        Family::Whole => 10e12,
        Family::Tiled | Family::Element | Family::Dot | Family::Pointwise | Family::Register => 3e12,
    }
}

/// The shape with the smallest estimate whose filter spectra fit `plan_limit` bytes and whose
/// runs fit a workspace of `workspace_limit` bytes.
pub fn choose(conv: &Conv2d, geom: &ConvGeometry, plan_limit: usize, workspace_limit: usize) -> Result<FftGemmShape> {
    let shapes: Vec<FftGemmShape> = FFT_GEMM_SIZES.iter().filter_map(|s| shape(conv, geom, s).ok()).collect();
    if shapes.is_empty() {
        let largest = FFT_GEMM_SIZES.last().expect("sizes exist");
        return Err(Error::Unsupported {
            algorithm: "fft-gemm",
            reason: shape(conv, geom, largest).err().unwrap_or_default(),
        });
    }
    let fitting = shapes.iter().filter(|s| s.plan_bytes() <= plan_limit && s.workspace_bytes() <= workspace_limit);
    match fitting.min_by(|a, b| a.estimate_s.total_cmp(&b.estimate_s)) {
        Some(best) => Ok(*best),
        None => {
            let least = shapes.iter().min_by_key(|s| s.workspace_bytes()).expect("shapes is not empty");
            if least.plan_bytes() > plan_limit {
                let least = shapes.iter().map(FftGemmShape::plan_bytes).min().expect("shapes is not empty");
                return Err(Error::Unsupported {
                    algorithm: "fft-gemm",
                    reason: format!("the filters' spectra need at least {least} bytes, the limit is {plan_limit}"),
                });
            }
            Err(Error::WorkspaceTooSmall { needed: least.workspace_bytes(), given: workspace_limit })
        }
    }
}

/// The kernels' parameters for `conv` cut as `shape`; the addresses are filled in at launch.
pub fn params(conv: &Conv2d, geom: &ConvGeometry, shape: &FftGemmShape) -> FftGemmParams {
    // `Conv2d::geometry` and `shape` have checked that every value below fits its field.
    let u = |v: usize| v as u32;
    let magic = |d: u32| MagicDiv::new(d).expect("validated extents are non-zero");
    FftGemmParams {
        x: 0,
        w: 0,
        y: 0,
        input_spectra: 0,
        output_spectra: 0,
        filter_spectra: 0,
        twiddles: 0,
        channels: u(conv.c),
        out_channels: u(conv.k),
        in_h: u(conv.h),
        in_w: u(conv.w),
        out_h: u(geom.out_h),
        out_w: u(geom.out_w),
        pad_h: u(conv.pad[0]),
        pad_w: u(conv.pad[1]),
        stride_h: u(conv.stride[0]),
        stride_w: u(conv.stride[1]),
        filter_r: u(conv.r),
        filter_s: u(conv.s),
        tile_h: shape.tile[0],
        tile_w: shape.tile[1],
        units: shape.units,
        pairs: shape.pairs,
        pair_div: magic(shape.pairs),
        tiles_w: magic(shape.tiles[1]),
        tiles_h: magic(shape.tiles[0]),
        c_per_group: magic(u(geom.c_per_group)),
        k_per_group: magic(u(geom.k_per_group)),
        dil_h: magic(u(conv.dilation[0])),
        dil_w: magic(u(conv.dilation[1])),
        tile_w_div: magic(shape.tile[1]),
    }
}

/// The per-frequency product: for each (bin, group), `Y = op(S) · Z` with `S` a
/// `Cg x Kg` column-major block used transposed, `Z` `Cg x pairs`, `Y` `Kg x pairs`.
pub fn gemm(conv: &Conv2d, geom: &ConvGeometry, shape: &FftGemmShape) -> BatchedGemm {
    let (cg, kg, pairs) = (geom.c_per_group, geom.k_per_group, shape.pairs as usize);
    let bins = (shape.size.side() * shape.size.side()) as usize;
    BatchedGemm {
        m: kg,
        n: pairs,
        k: cg,
        batch: bins * conv.groups,
        op_a: Op::T,
        op_b: Op::N,
        layout: Layout::ColMajor,
        lda: cg,
        ldb: cg,
        ldc: kg,
        stride_a: kg * cg,
        stride_b: pairs * cg,
        stride_c: pairs * kg,
    }
}

/// A layer's tiled FFT convolution, ready to run.
pub struct FftGemmPlan {
    conv: Conv2d,
    geom: ConvGeometry,
    shape: FftGemmShape,
    filter_spectra: CudaSlice<Complex32>,
    twiddles: CudaSlice<Complex32>,
}

impl FftGemmPlan {
    /// Plans `conv` with the cheapest tiling whose filter spectra take at most `plan_limit`
    /// bytes and whose runs take at most `workspace_limit`, and transforms the filters `w`
    /// (`[K, C/G, R, S]`) on `stream`.
    pub fn new(
        gpu: &Gpu,
        stream: &CudaStream,
        conv: &Conv2d,
        w: &impl DevicePtr<f32>,
        plan_limit: usize,
        workspace_limit: usize,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        let shape = choose(conv, &geom, plan_limit, workspace_limit)?;
        Self::with_shape(gpu, stream, conv, shape, w)
    }

    /// As [`Self::new`], with an explicit tiling (from [`shape`]).
    pub fn with_shape(
        gpu: &Gpu,
        stream: &CudaStream,
        conv: &Conv2d,
        tiling: FftGemmShape,
        w: &impl DevicePtr<f32>,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        if shape(conv, &geom, &tiling.size).as_ref() != Ok(&tiling) {
            return Err(Error::invalid("shape", "is not this layer's tiling for its size (see fft_gemm::shape)"));
        }
        let side = tiling.size.side() as usize;
        let mut plan = FftGemmPlan {
            conv: conv.clone(),
            geom,
            shape: tiling,
            filter_spectra: gpu.alloc::<Complex32>(tiling.filter_bytes / size_of::<Complex32>())?,
            twiddles: gpu.upload(&twiddles(side))?,
        };
        plan.set_weights(gpu, stream, w)?;
        Ok(plan)
    }

    pub fn shape(&self) -> &FftGemmShape {
        &self.shape
    }

    /// Device memory the plan holds.
    pub fn plan_bytes(&self) -> usize {
        self.shape.plan_bytes()
    }

    /// The workspace [`Self::forward`] needs.
    pub fn workspace_bytes(&self) -> usize {
        self.shape.workspace_bytes()
    }

    /// Transforms new filters `w` into the plan's spectra (the layer's weights changed).
    pub fn set_weights(&mut self, gpu: &Gpu, stream: &CudaStream, w: &impl DevicePtr<f32>) -> Result<()> {
        if w.len() != self.geom.w_len {
            return Err(Error::BufferSize { buffer: "w", expected: self.geom.w_len, got: w.len() });
        }
        gpu.check_buffer("w", w)?;
        let mut p = params(&self.conv, &self.geom, &self.shape);
        let size = self.shape.size;
        let blocks = (self.conv.k * self.geom.c_per_group) as u32;
        let cfg = self.launch_config(gpu, size.filter_kernel, blocks)?;
        {
            let (w_ptr, _ws) = w.device_ptr(stream);
            let (s_ptr, _ss) = self.filter_spectra.device_ptr_mut(stream);
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            (p.w, p.filter_spectra, p.twiddles) = (w_ptr, s_ptr, t_ptr);
            // Safety: w holds K·Cg·R·S filters (checked above) and the spectra buffer T²·K·Cg
            // values, as the kernel reads and writes them.
            unsafe { gpu.launch(stream, size.filter_kernel, cfg, p) }?;
        }
        gpu.check_deferred()
    }

    /// `y = conv(x, w)` on `stream`, with the filters of the last [`Self::set_weights`].
    /// Buffers are NCHW, f32, exactly the sizes of [`Conv2d::geometry`], and belong to `gpu`;
    /// `workspace` holds at least [`Self::workspace_bytes`].
    pub fn forward(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut CudaSlice<u8>,
    ) -> Result<()> {
        super::check_io(gpu, &self.geom, x, y)?;
        let needed = self.workspace_bytes();
        if workspace.len() < needed {
            return Err(Error::WorkspaceTooSmall { needed, given: workspace.len() });
        }
        gpu.check_buffer("workspace", workspace)?;
        let (size, shape) = (self.shape.size, &self.shape);
        let mut p = params(&self.conv, &self.geom, shape);
        if shape.fused {
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            let (s_ptr, _ss) = self.filter_spectra.device_ptr(stream);
            let (x_ptr, _xs) = x.device_ptr(stream);
            let (y_ptr, _ys) = y.device_ptr_mut(stream);
            (p.twiddles, p.filter_spectra, p.x, p.y) = (t_ptr, s_ptr, x_ptr, y_ptr);
            let cfg = self.launch_config(gpu, size.depthwise_kernel, self.conv.c as u32 * shape.pairs)?;
            // Safety: x and y hold the shape's tensors (checked above), S the tiling's spectra.
            unsafe { gpu.launch(stream, size.depthwise_kernel, cfg, p) }?;
            return gpu.check_deferred();
        }
        let complex = size_of::<Complex32>();
        let (mut z_bytes, mut y_bytes) = workspace.split_at_mut(shape.output_offset());
        // Safety: a Complex32 is two f32, any bits valid; the views are within the workspace.
        let mut z = unsafe { z_bytes.transmute_mut::<Complex32>(shape.input_bytes / complex) }.expect("sized above");
        let mut yspec =
            unsafe { y_bytes.transmute_mut::<Complex32>(shape.output_bytes / complex) }.expect("sized above");
        {
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            let (x_ptr, _xs) = x.device_ptr(stream);
            let (z_ptr, _zs) = z.device_ptr_mut(stream);
            (p.twiddles, p.x, p.input_spectra) = (t_ptr, x_ptr, z_ptr);
            let cfg = self.launch_config(gpu, size.input_kernel, self.conv.c as u32 * shape.pairs)?;
            // Safety: x holds the shape's input (checked above); Z is the tiling's input spectra.
            unsafe { gpu.launch(stream, size.input_kernel, cfg, p) }?;
        }
        let g = gemm(&self.conv, &self.geom, shape);
        cgemm(gpu, stream, &g, Complex32::ONE, &self.filter_spectra, &z, Complex32::ZERO, &mut yspec)?;
        {
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            let (y_ptr, _ys) = y.device_ptr_mut(stream);
            let (o_ptr, _os) = yspec.device_ptr(stream);
            (p.twiddles, p.y, p.output_spectra) = (t_ptr, y_ptr, o_ptr);
            let cfg = self.launch_config(gpu, size.output_kernel, self.conv.k as u32 * shape.pairs)?;
            // Safety: y holds the shape's output (checked above); Y is the tiling's output spectra.
            unsafe { gpu.launch(stream, size.output_kernel, cfg, p) }?;
        }
        gpu.check_deferred()
    }

    fn launch_config(&self, gpu: &Gpu, kernel: &'static str, blocks: u32) -> Result<LaunchConfig> {
        let size = &self.shape.size;
        let threads = gpu.block_threads(kernel, size.threads, blocks as u64)?;
        Ok(LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: size.smem_bytes() })
    }
}
