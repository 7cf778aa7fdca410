//! Batched complex FFTs (kernels in `kernels-gpu/src/fft/`):
//! - [`FftPlan`]: 1D, lengths `2^a 3^b 5^c 7^d` up to [`FFT_MAX_N`], any element stride and a
//!   two-level batch layout (so rows and columns of images are both one launch).
//! - [`Fft2dPlan`]: square 2D transforms of the sizes in [`fft2d_sizes`] (12 to 160), natural
//!   order in and out: one image per block held in shared memory, or, for fewer images than
//!   the GPU has SMs, two passes of a few lines per block ([`Fft2dAlgorithm`]).

use crate::{Error, Gpu, Result};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    complex::Complex32,
    fft::{
        FFT_KERNEL, FFT_THREADS, FftParams, FftPass, passes,
        square::{FFT2D_SIZES, Fft2dParams, Fft2dSize, half_columns},
        two_pass::{self, Fft2dPassParams},
    },
};

pub use kernels_gpu::fft::{FFT_MAX_N, factorize};

/// Which way a transform goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `X[k] = Σ x[i] e^(-2πi ik/N)`.
    Forward,
    /// `x[i] = Σ X[k] e^(+2πi ik/N)`, not divided by N (multiply by `scale` for that).
    Inverse,
}

/// Where a batch of length-`n` transforms lies in a buffer (in complex elements): element `i`
/// of transform `b` at `(b div inner) · outer_dist + (b mod inner) · inner_dist + i · stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftLayout {
    pub n: usize,
    pub batch: usize,
    pub stride: usize,
    pub inner: usize,
    pub inner_dist: usize,
    pub outer_dist: usize,
}

impl FftLayout {
    /// `batch` transforms of `n` contiguous elements, one after another (the rows of images).
    pub fn rows(n: usize, batch: usize) -> Self {
        FftLayout { n, batch, stride: 1, inner: 1, inner_dist: 0, outer_dist: n }
    }

    /// The columns of `images` row-major `height x width` images, one after another.
    pub fn columns(height: usize, width: usize, images: usize) -> Self {
        FftLayout {
            n: height,
            batch: width * images,
            stride: width,
            inner: width.max(1),
            inner_dist: 1,
            outer_dist: height * width,
        }
    }

    /// Checks the layout and returns the elements a buffer must hold. Distinct (transform,
    /// element) pairs must be distinct elements, so that no two outputs collide.
    pub fn validate(&self) -> Result<usize> {
        if factorize(self.n.min(u32::MAX as usize) as u32).is_none() {
            return Err(Error::invalid(
                "n",
                format!("= {} is not a product of 2, 3, 5 and 7 between 1 and {FFT_MAX_N}", self.n),
            ));
        }
        for (field, v) in [("batch", self.batch), ("inner", self.inner)] {
            if v == 0 || v > i32::MAX as usize {
                return Err(Error::invalid(field, format!("= {v} must be between 1 and {}", i32::MAX)));
            }
        }
        if (self.stride == 0 && self.n > 1) || self.stride > i32::MAX as usize {
            return Err(Error::invalid("stride", format!("= {} must be between 1 and {}", self.stride, i32::MAX)));
        }
        let outer = self.batch.div_ceil(self.inner);
        // Every axis as (count, step), nested from the smallest step: each step must clear the
        // span of the axes below it.
        let mut axes = [(self.n, self.stride), (self.inner.min(self.batch), self.inner_dist), (outer, self.outer_dist)];
        axes.sort_by_key(|&(_, step)| step);
        let mut span = 1usize;
        for (count, step) in axes.into_iter().filter(|&(count, _)| count > 1) {
            if step < span {
                return Err(Error::invalid("stride", format!("{self:?} maps two elements of the batch to one place")));
            }
            span = step
                .checked_mul(count - 1)
                .and_then(|v| v.checked_add(span))
                .filter(|v| v.checked_mul(size_of::<Complex32>()).is_some())
                .ok_or_else(|| Error::invalid("batch", "makes the layout larger than the address space"))?;
        }
        Ok(span)
    }
}

/// A transform length's device tables: twiddles `W_N^t` (computed in f64, rounded once) and
/// its Stockham passes.
pub struct FftPlan {
    n: usize,
    passes: usize,
    pass_table: CudaSlice<FftPass>,
    twiddles: CudaSlice<Complex32>,
}

/// `exp(-2πi t / n)` for `t < n`, each computed in f64 and rounded to f32 once.
pub fn twiddles(n: usize) -> Vec<Complex32> {
    (0..n)
        .map(|t| {
            let angle = -2.0 * std::f64::consts::PI * t as f64 / n as f64;
            Complex32::new(angle.cos() as f32, angle.sin() as f32)
        })
        .collect()
}

impl FftPlan {
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self> {
        FftLayout::rows(n, 1).validate()?;
        let (table, count) = passes(n as u32).expect("validated lengths factor");
        // One unused entry keeps the buffer non-empty for length 1.
        let pass_table = gpu.upload(&table[..count.max(1)])?;
        Ok(FftPlan { n, passes: count, pass_table, twiddles: gpu.upload(&twiddles(n))? })
    }

    /// The transforms of `layout` from `input` to `output` on `stream`, every output times
    /// `scale`.
    #[allow(clippy::too_many_arguments)]
    pub fn execute(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        layout: &FftLayout,
        direction: Direction,
        scale: f32,
        input: &impl DevicePtr<Complex32>,
        output: &mut impl DevicePtrMut<Complex32>,
    ) -> Result<()> {
        if layout.n != self.n {
            return Err(Error::invalid("n", format!("= {} but the plan is for {}", layout.n, self.n)));
        }
        let needed = layout.validate()?;
        for (buffer, got) in [("input", input.len()), ("output", output.len())] {
            if got < needed {
                return Err(Error::BufferSize { buffer, expected: needed, got });
            }
        }
        for (what, buffer_stream) in [("input", input.stream()), ("output", output.stream())] {
            gpu.check_stream(buffer_stream).map_err(|_| Error::ForeignContext { what: format!("buffer `{what}`") })?;
        }
        {
            let (twiddles, _t) = self.twiddles.device_ptr(stream);
            let (pass_table, _p) = self.pass_table.device_ptr(stream);
            let (input, _i) = input.device_ptr(stream);
            let (output, _o) = output.device_ptr_mut(stream);
            let p = FftParams {
                input,
                output,
                twiddles,
                pass_table,
                outer_dist: layout.outer_dist as u64,
                inner_dist: layout.inner_dist as u64,
                inner: MagicDiv::new(layout.inner as u32).expect("validated inner >= 1"),
                n: layout.n as u32,
                passes: self.passes as u32,
                batch: layout.batch as u32,
                stride: layout.stride as u32,
                inverse: (direction == Direction::Inverse) as u32,
                scale,
            };
            let cfg = LaunchConfig {
                grid_dim: (p.batch, 1, 1),
                block_dim: (FFT_THREADS, 1, 1),
                shared_mem_bytes: 2 * 8 * p.n,
            };
            // Safety: validate() bounds every element the kernel reads or writes by `needed`,
            // which both buffers hold; the tables are this plan's, for this length.
            unsafe { gpu.launch(stream, FFT_KERNEL, cfg, p) }?;
        }
        gpu.check_deferred()
    }
}

/// The sizes [`Fft2dPlan`] transforms, smallest first.
pub fn fft2d_sizes() -> &'static [Fft2dSize] {
    FFT2D_SIZES
}

/// How [`Fft2dPlan`] runs a batch of images.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fft2dAlgorithm {
    /// A block per image (per pair of images for the real kinds), the image in shared memory:
    /// one read of the input and one write of the output.
    WholeImage,
    /// Rows, then columns, a few lines per block, through the output buffer: many blocks
    /// however few the images.
    TwoPass,
}

impl Fft2dAlgorithm {
    pub const ALL: [Fft2dAlgorithm; 2] = [Fft2dAlgorithm::WholeImage, Fft2dAlgorithm::TwoPass];

    pub fn name(self) -> &'static str {
        match self {
            Fft2dAlgorithm::WholeImage => "whole-image",
            Fft2dAlgorithm::TwoPass => "two-pass",
        }
    }
}

/// Whether two passes beat whole-image blocks on `images` `n x n` images (`real`: the real
/// kinds, whose whole-image blocks take a pair) on a GPU of `sm_count` SMs. Only when whole-image
/// blocks leave SMs idle; then by times fitted to `bench fft` on the H200 (7646df9, 56 to 160,
/// 32 to 128 images): a lone whole-image block takes about `3.5 + n²/1250` µs, the two passes
/// `7.5` µs plus 1 µs per MB of complex images (0.7 of that for the real kinds).
pub fn two_pass_pays(n: usize, images: usize, real: bool, sm_count: u32) -> bool {
    let blocks = if real { images.div_ceil(2) } else { images };
    if blocks >= sm_count as usize {
        return false;
    }
    let whole_image_us = 3.5 + (n * n) as f64 / 1250.0;
    let megabytes = (images * n * n * size_of::<Complex32>()) as f64 / 1e6;
    let two_pass_us = 7.5 + megabytes * if real { 0.7 } else { 1.0 };
    two_pass_us < whole_image_us
}

/// Which transform a launch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Complex(Direction),
    R2c,
    C2r,
}

/// Square 2D transforms of one size: `images` contiguous `n x n` complex images.
pub struct Fft2dPlan {
    size: Fft2dSize,
    twiddles: CudaSlice<Complex32>,
    algorithm: Option<Fft2dAlgorithm>,
}

impl Fft2dPlan {
    /// A plan for `n x n` images; `n` must be one of [`fft2d_sizes`]. It picks the algorithm
    /// per call ([`Fft2dPlan::algorithm`]).
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self> {
        let size = *FFT2D_SIZES.iter().find(|s| s.side() as usize == n).ok_or_else(|| {
            let sides: Vec<String> = FFT2D_SIZES.iter().map(|s| s.side().to_string()).collect();
            Error::invalid("n", format!("= {n} is not a 2D transform size (sizes: {})", sides.join(", ")))
        })?;
        Ok(Fft2dPlan { size, twiddles: gpu.upload(&twiddles(n))?, algorithm: None })
    }

    /// The plan, always running `algorithm`.
    pub fn with_algorithm(self, algorithm: Fft2dAlgorithm) -> Self {
        Fft2dPlan { algorithm: Some(algorithm), ..self }
    }

    pub fn size(&self) -> &Fft2dSize {
        &self.size
    }

    /// The algorithm a call on `images` images runs (`real`: the real-to-complex and
    /// complex-to-real kinds), unless the plan was given one: [`two_pass_pays`] on this GPU.
    pub fn algorithm(&self, gpu: &Gpu, images: usize, real: bool) -> Fft2dAlgorithm {
        self.algorithm.unwrap_or(if two_pass_pays(self.size.side() as usize, images, real, gpu.sm_count()) {
            Fft2dAlgorithm::TwoPass
        } else {
            Fft2dAlgorithm::WholeImage
        })
    }

    /// Transforms the `images` images of `input` into `output` on `stream`, every output
    /// times `scale`.
    #[allow(clippy::too_many_arguments)]
    pub fn execute(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        direction: Direction,
        scale: f32,
        images: usize,
        input: &impl DevicePtr<Complex32>,
        output: &mut impl DevicePtrMut<Complex32>,
    ) -> Result<()> {
        let n = self.size.side() as usize;
        self.launch(gpu, stream, Kind::Complex(direction), images, [n * n, n * n], scale, input, output)
    }

    /// Real-to-complex: the `images` real `n x n` images of `input` into their half spectra
    /// (`n x (n/2 + 1)` each, cuFFT's layout) in `output`, times `scale`.
    pub fn execute_r2c(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        scale: f32,
        images: usize,
        input: &impl DevicePtr<f32>,
        output: &mut impl DevicePtrMut<Complex32>,
    ) -> Result<()> {
        let n = self.size.side() as usize;
        let half = half_columns(n as u32) as usize;
        self.launch(gpu, stream, Kind::R2c, images, [n * n, n * half], scale, input, output)
    }

    /// Complex-to-real: the half spectra of `input` back to real images (unnormalised: times
    /// `scale`, e.g. `1 / n²`). As with cuFFT, each spectrum must be a real image's (Hermitian):
    /// the missing half is taken as the conjugate mirror of the half given, and what is not
    /// Hermitian in columns 0 and `n/2` is not defined to survive.
    pub fn execute_c2r(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        scale: f32,
        images: usize,
        input: &impl DevicePtr<Complex32>,
        output: &mut impl DevicePtrMut<f32>,
    ) -> Result<()> {
        let n = self.size.side() as usize;
        let half = half_columns(n as u32) as usize;
        self.launch(gpu, stream, Kind::C2r, images, [n * half, n * n], scale, input, output)
    }

    /// Checks the call and runs it with the plan's algorithm: `per_image` elements of input
    /// and of output per image.
    #[allow(clippy::too_many_arguments)]
    fn launch<I, O>(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        kind: Kind,
        images: usize,
        per_image: [usize; 2],
        scale: f32,
        input: &impl DevicePtr<I>,
        output: &mut impl DevicePtrMut<O>,
    ) -> Result<()> {
        if images == 0 || images > i32::MAX as usize {
            return Err(Error::invalid("images", format!("= {images} is not in 1..=2^31-1")));
        }
        for ((buffer, got), per) in [("input", input.len()), ("output", output.len())].into_iter().zip(per_image) {
            let needed =
                images.checked_mul(per).ok_or_else(|| Error::invalid("images", "overflows the buffer size"))?;
            if got != needed {
                return Err(Error::BufferSize { buffer, expected: needed, got });
            }
        }
        for (what, buffer_stream) in [("input", input.stream()), ("output", output.stream())] {
            gpu.check_stream(buffer_stream).map_err(|_| Error::ForeignContext { what: format!("buffer `{what}`") })?;
        }
        {
            let (twiddles, _t) = self.twiddles.device_ptr(stream);
            let (input, _i) = input.device_ptr(stream);
            let (output, _o) = output.device_ptr_mut(stream);
            let real = !matches!(kind, Kind::Complex(_));
            // Safety (both): the buffers hold exactly `images` images of their kind (checked
            // above); the twiddles are n.
            match self.algorithm(gpu, images, real) {
                Fft2dAlgorithm::WholeImage => {
                    unsafe { self.whole_image(gpu, stream, kind, images, scale, [twiddles, input, output]) }?
                }
                Fft2dAlgorithm::TwoPass => {
                    unsafe { self.two_pass(gpu, stream, kind, images, scale, [twiddles, input, output]) }?
                }
            }
        }
        gpu.check_deferred()
    }

    /// # Safety
    /// `input` and `output` hold `images` images of `kind`'s input and output.
    unsafe fn whole_image(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        kind: Kind,
        images: usize,
        scale: f32,
        [twiddles, input, output]: [u64; 3],
    ) -> Result<()> {
        let (kernel, inverse) = match kind {
            Kind::Complex(direction) => (self.size.name, (direction == Direction::Inverse) as u32),
            Kind::R2c => (self.size.r2c_kernel, 0),
            Kind::C2r => (self.size.c2r_kernel, 1),
        };
        // The real kernels take a pair of images per block.
        let blocks = if matches!(kind, Kind::Complex(_)) { images } else { images.div_ceil(2) };
        let threads = gpu.block_threads(kernel, self.size.threads, blocks as u64)?;
        let p = Fft2dParams { input, output, twiddles, images: images as u32, inverse, scale, _pad: 0 };
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: self.size.smem_bytes(),
        };
        unsafe { gpu.launch(stream, kernel, cfg, p) }
    }

    /// Rows then columns (complex-to-real: columns then rows), the intermediate in `output`.
    ///
    /// # Safety
    /// As for [`Fft2dPlan::whole_image`].
    unsafe fn two_pass(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        kind: Kind,
        images: usize,
        scale: f32,
        [twiddles, input, output]: [u64; 3],
    ) -> Result<()> {
        let size = &self.size;
        let n = size.side();
        let half = half_columns(n);
        let lines = |count: usize| u32::try_from(count).map_err(|_| Error::invalid("images", "too many lines"));
        let base = Fft2dPassParams {
            input,
            output,
            twiddles,
            lines: 0,
            in_pitch: n,
            out_pitch: n,
            pack_nyquist: 0,
            inverse: 0,
            scale: 1.0,
        };
        let rows = |kernel, p: Fft2dPassParams| unsafe { self.pass(gpu, stream, kernel, p, p.lines, 1) };
        // Blocks over (column groups, images): images past the grid's 65535 in a launch each.
        let columns = |p: Fft2dPassParams| -> Result<()> {
            for first in (0..images).step_by(u16::MAX as usize) {
                let count = (images - first).min(u16::MAX as usize);
                let shift = |ptr: u64, pitch: u32| ptr + (first * (n * pitch) as usize * size_of::<Complex32>()) as u64;
                let p =
                    Fft2dPassParams { input: shift(p.input, p.in_pitch), output: shift(p.output, p.out_pitch), ..p };
                unsafe { self.pass(gpu, stream, size.columns_kernel, p, p.lines, count as u32) }?;
            }
            Ok(())
        };
        let in_place = Fft2dPassParams { input: output, ..base };
        match kind {
            Kind::Complex(direction) => {
                let inverse = (direction == Direction::Inverse) as u32;
                rows(size.rows_kernel, Fft2dPassParams { lines: lines(images * n as usize)?, inverse, ..base })?;
                columns(Fft2dPassParams { lines: n, inverse, scale, ..in_place })
            }
            Kind::R2c => {
                rows(size.rows_r2c_kernel, Fft2dPassParams { lines: lines(images * n as usize / 2)?, ..base })?;
                columns(Fft2dPassParams { lines: half, in_pitch: half, out_pitch: half, scale, ..in_place })
            }
            Kind::C2r => {
                let nyquist = n / 2;
                columns(Fft2dPassParams {
                    lines: nyquist,
                    in_pitch: half,
                    out_pitch: nyquist,
                    pack_nyquist: 1,
                    inverse: 1,
                    ..base
                })?;
                rows(
                    size.rows_c2r_kernel,
                    Fft2dPassParams { lines: lines(images * n as usize / 2)?, scale, ..in_place },
                )
            }
        }
    }

    /// One launch of a two-pass kernel: blocks of `LINES` of the `lines`, times `grid_y`.
    ///
    /// # Safety
    /// `p`'s buffers hold what the kernel reads and writes for those blocks.
    unsafe fn pass(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        kernel: &'static str,
        p: Fft2dPassParams,
        lines: u32,
        grid_y: u32,
    ) -> Result<()> {
        let (a, b) = (self.size.a, self.size.b);
        let cfg = LaunchConfig {
            grid_dim: (lines.div_ceil(two_pass::LINES), grid_y, 1),
            block_dim: (two_pass::threads(a, b), 1, 1),
            shared_mem_bytes: two_pass::smem_bytes(a, b),
        };
        unsafe { gpu.launch(stream, kernel, cfg, p) }
    }
}
