//! `convkit check fft` and `convkit bench fft`: the standalone 2D FFT ([`Fft2dPlan`]) against
//! an f64 DFT (on the host, a few images per case) and against cuFFT (a batched C2C plan of the
//! same images, through cudarc), on fresh random inputs with NaN-poisoned outputs.

use super::{
    bench::Timing,
    reference::fill_uniform,
    timing::{GpuQueue, Schedule, time_interleaved},
};
use crate::{
    Error, Gpu, Result,
    error::Context,
    fft::{Direction, Fft2dPlan},
};
use cudarc::{
    cufft::{CudaFft, FftDirection, sys as cufft_sys},
    driver::{CudaSlice, CudaStream, CudaView, CudaViewMut},
};
use kernels_gpu::{complex::Complex32, random::mix};
use serde::Serialize;
use std::sync::Arc;

/// The transforms `bench fft` times by default: the sizes and batches of the fused FFT
/// convolution on the `large-kernel` suite (images = channels x pairs of images).
pub const DEFAULT_CASES: &[(usize, usize)] =
    &[(14, 16384), (28, 8192), (42, 4096), (72, 2048), (84, 1536), (120, 32), (120, 1024)];

/// One batch of transforms to check or time.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FftCase {
    pub n: usize,
    pub images: usize,
    #[serde(serialize_with = "direction_name")]
    pub direction: Direction,
}

fn direction_name<S: serde::Serializer>(d: &Direction, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(if *d == Direction::Forward { "forward" } else { "inverse" })
}

impl FftCase {
    pub fn label(&self) -> String {
        let dir = if self.direction == Direction::Forward { "fwd" } else { "inv" };
        format!("{0}x{0} x{1} {dir}", self.n, self.images)
    }

    /// One read and one write of every complex value.
    pub fn min_bytes(&self) -> f64 {
        2.0 * 8.0 * (self.n * self.n * self.images) as f64
    }
}

/// cuFFT's batched 2D C2C transform of `images` `n x n` images on `stream`.
pub struct CufftPlan {
    fft: CudaFft,
    direction: FftDirection,
}

impl CufftPlan {
    pub fn new(stream: &Arc<CudaStream>, case: &FftCase) -> Result<Self> {
        let n = case.n as i32;
        let (dist, batch) = (n * n, case.images as i32);
        let c2c = cufft_sys::cufftType::CUFFT_C2C;
        let fft = CudaFft::plan_many(&[n, n], None, 1, dist, None, 1, dist, c2c, batch, stream.clone())
            .during("cufftPlanMany")?;
        let direction =
            if case.direction == Direction::Forward { FftDirection::Forward } else { FftDirection::Inverse };
        Ok(CufftPlan { fft, direction })
    }

    pub fn execute(&self, input: &mut CudaViewMut<Complex32>, output: &mut CudaViewMut<Complex32>) -> Result<()> {
        let len = input.len();
        // Safety: a Complex32 is cuFFT's float2 (two f32, repr(C)); same length, any bits valid.
        let mut input = unsafe { input.transmute_mut::<cufft_sys::float2>(len) }.expect("same size");
        let mut output = unsafe { output.transmute_mut::<cufft_sys::float2>(len) }.expect("same size");
        self.fft.exec_c2c(&mut input, &mut output, self.direction).during("cufftExecC2C")
    }
}

/// One implementation's showing on a case.
#[derive(Clone, Debug, Serialize)]
pub struct FftCandidate {
    pub name: &'static str,
    /// ‖ours − f64‖₂ / ‖f64‖₂ over the images checked on the host.
    pub rel_l2: f64,
    pub timing: Timing,
}

/// A row of `bench fft`: ours, then cuFFT.
#[derive(Clone, Debug, Serialize)]
pub struct FftRow {
    pub case: FftCase,
    pub sets: usize,
    pub checked_images: usize,
    pub candidates: [FftCandidate; 2],
}

impl FftRow {
    pub fn ours_ms(&self) -> f64 {
        self.candidates[0].timing.p50
    }

    /// cuFFT's time over ours: above 1 we are faster.
    pub fn speedup(&self) -> f64 {
        self.candidates[1].timing.p50 / self.ours_ms()
    }

    pub fn hbm_percent(&self) -> f64 {
        self.case.min_bytes() / (self.ours_ms() * 1e-3) / super::bench::HBM_BYTES_PER_S * 100.0
    }
}

/// The f64 2D DFT of one `n x n` image (rows, then columns), forward or inverse.
pub fn dft2d_f64(x: &[Complex32], n: usize, direction: Direction) -> Vec<(f64, f64)> {
    let sign = if direction == Direction::Forward { -1.0 } else { 1.0 };
    let roots: Vec<(f64, f64)> = (0..n)
        .map(|t| {
            let angle = sign * 2.0 * std::f64::consts::PI * t as f64 / n as f64;
            (angle.cos(), angle.sin())
        })
        .collect();
    let dft = |line: &[(f64, f64)]| -> Vec<(f64, f64)> {
        (0..n)
            .map(|k| {
                line.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, &(a, b))| {
                    let (c, s) = roots[(i * k) % n];
                    (re + a * c - b * s, im + a * s + b * c)
                })
            })
            .collect()
    };
    let wide: Vec<(f64, f64)> = x.iter().map(|v| (v.re as f64, v.im as f64)).collect();
    let rows: Vec<(f64, f64)> = wide.chunks(n).flat_map(dft).collect();
    let mut out = vec![(0.0, 0.0); n * n];
    for col in 0..n {
        let column: Vec<(f64, f64)> = (0..n).map(|r| rows[r * n + col]).collect();
        for (k, v) in dft(&column).into_iter().enumerate() {
            out[k * n + col] = v;
        }
    }
    out
}

/// ‖ours − exact‖₂ / ‖exact‖₂ (∞ where ours holds a non-finite value).
pub fn rel_l2(ours: &[Complex32], exact: &[(f64, f64)]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (o, e) in ours.iter().zip(exact) {
        if !(o.re.is_finite() && o.im.is_finite()) {
            return f64::INFINITY;
        }
        err += (o.re as f64 - e.0).powi(2) + (o.im as f64 - e.1).powi(2);
        norm += e.0 * e.0 + e.1 * e.1;
    }
    (err / norm).sqrt()
}

/// `len` random complex values in [-1, 1)² on the GPU.
fn random_complex(gpu: &Gpu, stream: &CudaStream, len: usize, seed: u64) -> Result<CudaSlice<Complex32>> {
    let mut dev = gpu.alloc::<Complex32>(len)?;
    // Safety: a Complex32 is two f32 (repr(C), Pod): the same bytes, any bits valid.
    let mut parts = unsafe { dev.transmute_mut::<f32>(2 * len) }.expect("two f32 per complex");
    fill_uniform(gpu, stream, &mut parts, seed)?;
    Ok(dev)
}

/// Images of a case checked against the f64 DFT on the host (about 4·10⁶ multiply-adds' worth).
fn checked_images(case: &FftCase) -> usize {
    (4_000_000 / (case.n * case.n * case.n)).clamp(1, case.images)
}

/// Relative L2 error of the first `images` images of `output` against the f64 DFT of `input`'s.
fn error_vs_f64(
    gpu: &Gpu,
    case: &FftCase,
    input: &CudaView<Complex32>,
    output: &CudaView<Complex32>,
    images: usize,
) -> Result<f64> {
    let len = images * case.n * case.n;
    let x = gpu.download(&input.slice(..len))?;
    let exact: Vec<(f64, f64)> =
        x.chunks(case.n * case.n).flat_map(|image| dft2d_f64(image, case.n, case.direction)).collect();
    Ok(rel_l2(&gpu.download(&output.slice(..len))?, &exact))
}

/// Checks `case`: ours and cuFFT against the f64 DFT of the first few images, and ours
/// against cuFFT over all of them. Returns `[ours vs f64, cuFFT vs f64, ours vs cuFFT]`.
pub fn check_case(gpu: &Gpu, case: &FftCase, seed: u64) -> Result<[f64; 3]> {
    let stream = gpu.stream();
    let len = case.images * case.n * case.n;
    let plan = Fft2dPlan::new(gpu, case.n)?;
    let cufft = CufftPlan::new(stream, case)?;
    let mut input = random_complex(gpu, stream, len, seed)?;
    let (mut ours, mut theirs) = (gpu.alloc::<Complex32>(len)?, gpu.alloc::<Complex32>(len)?);
    for out in [&mut ours, &mut theirs] {
        // Safety: as in random_complex.
        gpu.poison(&mut unsafe { out.transmute_mut::<f32>(2 * len) }.expect("two f32 per complex"))?;
    }
    plan.execute(gpu, stream, case.direction, 1.0, case.images, &input, &mut ours)?;
    cufft.execute(&mut input.as_view_mut(), &mut theirs.as_view_mut())?;
    let images = checked_images(case);
    let ours_err = error_vs_f64(gpu, case, &input.as_view(), &ours.as_view(), images)?;
    let cufft_err = error_vs_f64(gpu, case, &input.as_view(), &theirs.as_view(), images)?;
    let (a, b) = (gpu.download(&ours)?, gpu.download(&theirs)?);
    let exact: Vec<(f64, f64)> = b.iter().map(|v| (v.re as f64, v.im as f64)).collect();
    Ok([ours_err, cufft_err, rel_l2(&a, &exact)])
}

/// Times `case`, ours and cuFFT interleaved, over copies of the images that exceed the L2
/// cache; each checked against the f64 DFT first.
pub fn bench_case(
    gpu: &Gpu,
    queue: &mut GpuQueue,
    case: &FftCase,
    seed: u64,
    schedule: Schedule,
    min_working_set: usize,
) -> Result<FftRow> {
    let stream = gpu.stream();
    let len = case.images * case.n * case.n;
    let stride = len.next_multiple_of(32);
    let sets = min_working_set.div_ceil(2 * 8 * stride).max(2);
    let plan = Fft2dPlan::new(gpu, case.n)?;
    let cufft = CufftPlan::new(stream, case)?;
    let mut input = random_complex(gpu, stream, stride * sets, mix(seed, 1))?;
    let mut output = gpu.alloc::<Complex32>(stride * sets)?;
    // Safety: as in random_complex.
    gpu.poison(&mut unsafe { output.transmute_mut::<f32>(2 * stride * sets) }.expect("two f32 per complex"))?;
    let run = |which: usize,
               launch: usize,
               input: &mut CudaSlice<Complex32>,
               output: &mut CudaSlice<Complex32>|
     -> Result<()> {
        let at = (launch % sets) * stride..(launch % sets) * stride + len;
        let mut out = output.slice_mut(at.clone());
        if which == 0 {
            plan.execute(gpu, stream, case.direction, 1.0, case.images, &input.slice(at), &mut out)
        } else {
            cufft.execute(&mut input.slice_mut(at), &mut out)
        }
    };
    let checked = checked_images(case);
    let mut errs = [0.0; 2];
    for (which, err) in errs.iter_mut().enumerate() {
        run(which, 0, &mut input, &mut output)?;
        *err = error_vs_f64(gpu, case, &input.as_view(), &output.as_view(), checked)?;
    }
    let samples =
        time_interleaved(queue, schedule, 2, &mut |_, which, launch| run(which, launch, &mut input, &mut output))?;
    let candidate = |i: usize, name| FftCandidate { name, rel_l2: errs[i], timing: Timing::from(&samples[i]) };
    Ok(FftRow {
        case: *case,
        sets,
        checked_images: checked,
        candidates: [candidate(0, "convkit"), candidate(1, "cuFFT")],
    })
}

/// Parses `NxIMAGES` (e.g. `72x2048`).
pub fn parse_case(spec: &str) -> std::result::Result<(usize, usize), Error> {
    let bad = || Error::invalid("fft case", format!("`{spec}` is not NxIMAGES, e.g. 72x2048"));
    let (n, images) = spec.split_once('x').ok_or_else(bad)?;
    Ok((n.trim().parse().map_err(|_| bad())?, images.trim().parse().map_err(|_| bad())?))
}
