//! Launcher of the fused FFT convolution of depthwise layers (`kernels-gpu/src/conv/fft.rs`).
//!
//! A plan holds the transform size, the twiddles and the filters' spectrum (computed on the
//! GPU when the plan is made, and again only when [`FftConvPlan::set_weights`] is called);
//! [`FftConvPlan::forward`] is then one launch that reads the input once and writes the output
//! once.

use crate::{Conv2d, ConvGeometry, Error, Gpu, Result, fft::twiddles};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    complex::Complex32,
    conv::fft::{FFTCONV_TILES, FftConvParams, FftConvTile, extent, min_side},
};

/// Every transform size the PTX holds, smallest first.
pub fn variants() -> &'static [FftConvTile] {
    FFTCONV_TILES
}

/// The transform side `conv` needs: the larger of the two dimensions' [`min_side`].
pub fn side_needed(conv: &Conv2d, geom: &ConvGeometry) -> u64 {
    let u = |v: usize| v as u32;
    let side = |input, pad, taps, dil, out, stride| min_side(input, pad, extent(taps, dil), out, stride);
    let h = side(u(conv.h), u(conv.pad[0]), u(conv.r), u(conv.dilation[0]), u(geom.out_h), u(conv.stride[0]));
    let w = side(u(conv.w), u(conv.pad[1]), u(conv.s), u(conv.dilation[1]), u(geom.out_w), u(conv.stride[1]));
    h.max(w)
}

/// Why the fused FFT path cannot compute `conv` with `tile`, if it cannot.
pub fn unsupported(conv: &Conv2d, geom: &ConvGeometry, tile: &FftConvTile) -> Option<String> {
    if let Some(reason) = super::nchw_unsupported(conv) {
        return Some(reason.into());
    }
    if conv.groups != conv.c || conv.k != conv.c {
        return Some("the fused FFT path computes depthwise layers (groups = C = K) only".into());
    }
    let needed = side_needed(conv, geom);
    if needed > tile.side() as u64 {
        return Some(format!(
            "needs a transform side of at least {needed} (input + padding, filter extent and output \
             span), {} has {}",
            tile.name,
            tile.side()
        ));
    }
    let blocks = conv.c as u64 * conv.n.div_ceil(2) as u64;
    if blocks > i32::MAX as u64 {
        return Some(format!("needs {blocks} blocks (channels x pairs of images), past the grid's 2^31 - 1"));
    }
    None
}

/// The smallest transform that computes `conv`.
pub fn choose_tile(conv: &Conv2d, geom: &ConvGeometry) -> Result<FftConvTile> {
    let mut why = None;
    for tile in FFTCONV_TILES {
        match unsupported(conv, geom, tile) {
            None => return Ok(*tile),
            Some(reason) => why = Some(reason),
        }
    }
    let largest = FFTCONV_TILES.last().expect("FFTCONV_TILES is not empty");
    let reason = why.unwrap_or_default();
    Err(Error::Unsupported {
        algorithm: "fft",
        reason: format!("{reason} (the largest transform is {})", largest.side()),
    })
}

/// A rough time in seconds for `conv` with `tile`, on the model of the tiled FFT convolution's
/// estimate (one launch, DRAM traffic, the blocks' two transforms: see
/// [`super::fft_gemm::transforms_s`]), so that the two compare. Whole images transform faster
/// per point than tiles: at 4b7c1e0 the fused kernels took 0.75x of that model's transform
/// time on five of the six `large-kernel` layers they ran (within 12%; 13x13 on 7x7 images
/// took 1.7x).
pub fn estimate_s(conv: &Conv2d, geom: &ConvGeometry, tile: &FftConvTile) -> f64 {
    let blocks = conv.c as u64 * conv.n.div_ceil(2) as u64;
    let dram = 4.0 * (geom.x_len + geom.y_len) as f64;
    let transforms = 0.75 * super::fft_gemm::transforms_s(tile.side(), blocks, 2.0);
    super::fft_gemm::LAUNCH_S + dram / 4.3e12 + transforms
}

/// The kernels' parameters for `conv`; the addresses are filled in at launch.
pub fn params(conv: &Conv2d, geom: &ConvGeometry) -> FftConvParams {
    // `Conv2d::geometry` has checked that every value below fits its 32-bit field.
    let u = |v: usize| v as u32;
    let magic = |d: usize| MagicDiv::new(u(d)).expect("validated extents are non-zero");
    FftConvParams {
        x: 0,
        w: 0,
        y: 0,
        spectrum: 0,
        twiddles: 0,
        images: u(conv.n),
        channels: u(conv.c),
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
        pairs: magic(conv.n.div_ceil(2)),
        out_w_div: magic(geom.out_w),
        dil_h: magic(conv.dilation[0]),
        dil_w: magic(conv.dilation[1]),
    }
}

/// A depthwise layer's FFT convolution, ready to run: its transform size and the device
/// tables it reads (the twiddles and the filters' spectrum).
pub struct FftConvPlan {
    conv: Conv2d,
    geom: ConvGeometry,
    tile: FftConvTile,
    spectrum: CudaSlice<Complex32>,
    twiddles: CudaSlice<Complex32>,
}

impl FftConvPlan {
    /// Plans `conv` with the smallest transform that computes it and transforms the filters
    /// `w` (`[C, 1, R, S]`) on `stream`.
    pub fn new(gpu: &Gpu, stream: &CudaStream, conv: &Conv2d, w: &impl DevicePtr<f32>) -> Result<Self> {
        let geom = conv.geometry()?;
        let tile = choose_tile(conv, &geom)?;
        Self::with_tile(gpu, stream, conv, &tile, w)
    }

    /// As [`Self::new`], with an explicit transform size (one of [`variants`]).
    pub fn with_tile(
        gpu: &Gpu,
        stream: &CudaStream,
        conv: &Conv2d,
        tile: &FftConvTile,
        w: &impl DevicePtr<f32>,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        if !FFTCONV_TILES.contains(tile) {
            return Err(Error::UnsupportedTile {
                tile: tile.name,
                reason: "not a kernel of this build (see conv::fft::variants)",
            });
        }
        if let Some(reason) = unsupported(conv, &geom, tile) {
            return Err(Error::Unsupported { algorithm: "fft", reason });
        }
        let spectrum = gpu.alloc::<Complex32>(conv.c * tile.spectrum_len())?;
        let twiddles = gpu.upload(&twiddles(tile.side() as usize))?;
        let mut plan = FftConvPlan { conv: conv.clone(), geom, tile: *tile, spectrum, twiddles };
        plan.set_weights(gpu, stream, w)?;
        Ok(plan)
    }

    pub fn conv(&self) -> &Conv2d {
        &self.conv
    }

    pub fn tile(&self) -> &FftConvTile {
        &self.tile
    }

    /// Device memory the plan holds: the filters' spectrum and the twiddles.
    pub fn plan_bytes(&self) -> usize {
        (self.spectrum.len() + self.twiddles.len()) * size_of::<Complex32>()
    }

    /// Transforms new filters `w` into the plan's spectrum (the layer's weights changed).
    pub fn set_weights(&mut self, gpu: &Gpu, stream: &CudaStream, w: &impl DevicePtr<f32>) -> Result<()> {
        if w.len() != self.geom.w_len {
            return Err(Error::BufferSize { buffer: "w", expected: self.geom.w_len, got: w.len() });
        }
        let mut p = params(&self.conv, &self.geom);
        let cfg = self.launch_config(self.conv.c as u32);
        {
            let (w_ptr, _ws) = w.device_ptr(stream);
            let (s_ptr, _ss) = self.spectrum.device_ptr_mut(stream);
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            (p.w, p.spectrum, p.twiddles) = (w_ptr, s_ptr, t_ptr);
            // Safety: w holds C·R·S filters (checked above), the spectrum C·N² values and the
            // twiddles N, as the kernel reads and writes them.
            unsafe { gpu.launch(stream, self.tile.spectrum_kernel, cfg, p) }?;
        }
        gpu.check_deferred()
    }

    /// `y = conv(x, w)` on `stream`, with the filters of the last [`Self::set_weights`].
    /// Buffers are NCHW, f32, exactly the sizes of [`Conv2d::geometry`], and belong to `gpu`.
    pub fn forward(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
    ) -> Result<()> {
        super::check_io(gpu, &self.geom, x, y)?;
        let mut p = params(&self.conv, &self.geom);
        {
            let (x_ptr, _xs) = x.device_ptr(stream);
            let (y_ptr, _ys) = y.device_ptr_mut(stream);
            let (s_ptr, _ss) = self.spectrum.device_ptr(stream);
            let (t_ptr, _ts) = self.twiddles.device_ptr(stream);
            (p.x, p.y, p.spectrum, p.twiddles) = (x_ptr, y_ptr, s_ptr, t_ptr);
            let blocks = self.conv.c as u32 * p.pair_count();
            let threads = gpu.block_threads(self.tile.name, self.tile.threads, blocks as u64)?;
            let cfg = LaunchConfig { block_dim: (threads, 1, 1), ..self.launch_config(blocks) };
            // Safety: x and y hold exactly the shape's elements (checked above), the spectrum
            // and twiddles were sized for this tile, and `unsupported` bounded the grid.
            unsafe { gpu.launch(stream, self.tile.name, cfg, p) }?;
        }
        gpu.check_deferred()
    }

    fn launch_config(&self, blocks: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (self.tile.threads, 1, 1),
            shared_mem_bytes: self.tile.smem_bytes(),
        }
    }
}
