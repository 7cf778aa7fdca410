//! `convkit check fft` and `convkit bench fft`: the standalone 2D FFTs ([`Fft2dPlan`]:
//! complex-to-complex both ways, real-to-complex, complex-to-real; each of its algorithms)
//! against an f64 DFT (on the host, a few images per case) and against cuFFT (a batched plan
//! of the same kind and images, through cudarc), on fresh random inputs with NaN-poisoned
//! outputs.

use super::bench::Timing;
use crate::timing::{GpuQueue, Schedule, time_interleaved};
use crate::{
    Error, Gpu, Result,
    error::Context,
    fft::{Direction, Fft2dAlgorithm, Fft2dPlan},
};
use cudarc::{
    cufft::{CudaFft, FftDirection, sys as cufft_sys},
    driver::{CudaSlice, CudaStream, CudaViewMut},
};
use kernels_gpu::{complex::Complex32, random::mix};
use serde::Serialize;
use std::sync::Arc;

/// The transforms `bench fft` times by default: the sizes and batches (transforms per launch)
/// of the FFT convolutions the planner runs on the `large-kernel` suite: the fused whole-image
/// path on RepLKNet's and SLaK's layers (channels x pairs of images), the tiled path on the
/// 45x45 and dense layers (channels x pairs of tiles); and 120 x 120, 32 transforms (the fused
/// path's size and batch for the 45x45 layer at N = 64, before the planner moved it to tiles)
/// and 1024.
pub const DEFAULT_CASES: &[(usize, usize)] = &[
    (14, 16384),
    (28, 8192),
    (42, 4096),
    (72, 2048),
    (84, 1536),
    (56, 32),
    (64, 100),
    (96, 128),
    (40, 832),
    (56, 512),
    (64, 512),
    (120, 32),
    (120, 1024),
];

/// Which transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FftKind {
    /// Complex to complex, forward.
    Forward,
    /// Complex to complex, inverse.
    Inverse,
    /// Real to complex (forward), half spectra out.
    R2c,
    /// Complex to real (inverse), half spectra in.
    C2r,
}

impl FftKind {
    pub const ALL: [FftKind; 4] = [FftKind::Forward, FftKind::Inverse, FftKind::R2c, FftKind::C2r];

    /// Real-to-complex or complex-to-real.
    pub fn is_real(self) -> bool {
        matches!(self, FftKind::R2c | FftKind::C2r)
    }

    pub fn name(self) -> &'static str {
        match self {
            FftKind::Forward => "fwd",
            FftKind::Inverse => "inv",
            FftKind::R2c => "r2c",
            FftKind::C2r => "c2r",
        }
    }
}

/// One batch of transforms to check or time.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FftCase {
    pub n: usize,
    pub images: usize,
    pub kind: FftKind,
}

impl FftCase {
    pub fn label(&self) -> String {
        format!("{0}x{0} x{1} {2}", self.n, self.images, self.kind.name())
    }

    /// Elements (real or complex) of one image's input and output.
    pub fn elements(&self) -> [usize; 2] {
        let (full, half) = (self.n * self.n, self.n * (self.n / 2 + 1));
        match self.kind {
            FftKind::Forward | FftKind::Inverse => [full, full],
            FftKind::R2c => [full, half],
            FftKind::C2r => [half, full],
        }
    }

    /// f32 values of one image's input and output (a complex value is two).
    pub fn per_image(&self) -> [usize; 2] {
        let [input, output] = self.elements();
        let [real_in, real_out] = [self.kind == FftKind::R2c, self.kind == FftKind::C2r];
        [if real_in { input } else { 2 * input }, if real_out { output } else { 2 * output }]
    }

    /// One read of the input and one write of the output.
    pub fn min_bytes(&self) -> f64 {
        4.0 * (self.per_image()[0] + self.per_image()[1]) as f64 * self.images as f64
    }
}

/// cuFFT's batched 2D transform of `case`'s kind and images on `stream`.
pub struct CufftPlan {
    fft: CudaFft,
    kind: FftKind,
}

impl CufftPlan {
    pub fn new(stream: &Arc<CudaStream>, case: &FftCase) -> Result<Self> {
        let n = case.n as i32;
        let [idist, odist] = case.elements().map(|e| e as i32);
        let kind = match case.kind {
            FftKind::Forward | FftKind::Inverse => cufft_sys::cufftType::CUFFT_C2C,
            FftKind::R2c => cufft_sys::cufftType::CUFFT_R2C,
            FftKind::C2r => cufft_sys::cufftType::CUFFT_C2R,
        };
        let fft = CudaFft::plan_many(&[n, n], None, 1, idist, None, 1, odist, kind, case.images as i32, stream.clone())
            .during("cufftPlanMany")?;
        Ok(CufftPlan { fft, kind: case.kind })
    }

    /// `input` and `output` hold the case's f32 values (complex ones interleaved).
    pub fn execute(&self, input: &mut CudaViewMut<f32>, output: &mut CudaViewMut<f32>) -> Result<()> {
        let complex = as_pairs::<cufft_sys::float2>;
        let call = "cufftExec";
        match self.kind {
            FftKind::Forward | FftKind::Inverse => {
                let direction =
                    if self.kind == FftKind::Forward { FftDirection::Forward } else { FftDirection::Inverse };
                self.fft.exec_c2c(&mut complex(input), &mut complex(output), direction).during(call)
            }
            FftKind::R2c => self.fft.exec_r2c(input, &mut complex(output)).during(call),
            FftKind::C2r => self.fft.exec_c2r(&mut complex(input), output).during(call),
        }
    }
}

/// A view of interleaved f32 pairs as complex values (`T` is two f32, `repr(C)`: Complex32 or
/// cuFFT's float2).
fn as_pairs<'a, T>(v: &'a mut CudaViewMut<'_, f32>) -> CudaViewMut<'a, T> {
    const { assert!(size_of::<T>() == 8) };
    let len = v.len() / 2;
    // Safety: T is two f32 and every bit pattern of them is valid.
    unsafe { v.transmute_mut::<T>(len) }.expect("two f32 per complex")
}

/// Ours on `case`: f32 values in and out (complex ones interleaved).
fn run_ours(
    gpu: &Gpu,
    plan: &Fft2dPlan,
    case: &FftCase,
    input: &mut CudaViewMut<f32>,
    output: &mut CudaViewMut<f32>,
) -> Result<()> {
    let stream = gpu.stream();
    let complex = as_pairs::<Complex32>;
    match case.kind {
        FftKind::Forward | FftKind::Inverse => {
            let direction = if case.kind == FftKind::Forward { Direction::Forward } else { Direction::Inverse };
            plan.execute(gpu, stream, direction, 1.0, case.images, &complex(input), &mut complex(output))
        }
        FftKind::R2c => plan.execute_r2c(gpu, stream, 1.0, case.images, input, &mut complex(output)),
        FftKind::C2r => plan.execute_c2r(gpu, stream, 1.0, case.images, &complex(input), output),
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

/// A row of `bench fft`: each of our algorithms ([`Fft2dAlgorithm::ALL`]'s order), then
/// cuFFT.
#[derive(Clone, Debug, Serialize)]
pub struct FftRow {
    pub case: FftCase,
    pub sets: usize,
    pub checked_images: usize,
    pub candidates: Vec<FftCandidate>,
    /// The algorithm the plan picks for the case (what "ours" is).
    pub chosen: &'static str,
}

impl FftRow {
    pub fn ours(&self) -> &FftCandidate {
        self.candidates.iter().find(|c| c.name == self.chosen).expect("the chosen algorithm was timed")
    }

    pub fn cufft(&self) -> &FftCandidate {
        self.candidates.last().expect("cuFFT was timed")
    }

    pub fn ours_ms(&self) -> f64 {
        self.ours().timing.p50
    }

    /// cuFFT's time over ours: above 1 we are faster.
    pub fn speedup(&self) -> f64 {
        self.cufft().timing.p50 / self.ours_ms()
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

/// ‖ours − exact‖₂ / ‖exact‖₂ over pairs of f32 (re, im) against f64 pairs (∞ where ours
/// holds a non-finite value).
pub fn rel_l2(ours: &[f32], exact: &[(f64, f64)]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (o, e) in ours.chunks(2).zip(exact) {
        if !o.iter().all(|v| v.is_finite()) {
            return f64::INFINITY;
        }
        err += (o[0] as f64 - e.0).powi(2) + (o[1] as f64 - e.1).powi(2);
        norm += e.0 * e.0 + e.1 * e.1;
    }
    (err / norm).sqrt()
}

/// Images of a case checked against the f64 DFT on the host (about 4·10⁶ multiply-adds' worth).
fn checked_images(case: &FftCase) -> usize {
    (4_000_000 / (case.n * case.n * case.n)).clamp(1, case.images)
}

/// The f64 result of `case` for one image's f32 input values.
fn exact(case: &FftCase, input: &[f32]) -> Vec<(f64, f64)> {
    let (n, half) = (case.n, case.n / 2 + 1);
    let complex: Vec<Complex32> = match case.kind {
        FftKind::Forward | FftKind::Inverse => input.chunks(2).map(|v| Complex32::new(v[0], v[1])).collect(),
        FftKind::R2c => input.iter().map(|&v| Complex32::new(v, 0.0)).collect(),
        FftKind::C2r => {
            // The half spectrum completed as the kernel completes it.
            let at = |r: usize, c: usize| Complex32::new(input[2 * (r * half + c)], input[2 * (r * half + c) + 1]);
            (0..n * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    if c < half { at(r, c) } else { at((n - r) % n, n - c).conj() }
                })
                .collect()
        }
    };
    let direction =
        if matches!(case.kind, FftKind::Inverse | FftKind::C2r) { Direction::Inverse } else { Direction::Forward };
    let full = dft2d_f64(&complex, n, direction);
    match case.kind {
        FftKind::Forward | FftKind::Inverse => full,
        FftKind::R2c => (0..n).flat_map(|r| (0..half).map(move |c| (r, c))).map(|(r, c)| full[r * n + c]).collect(),
        // Real outputs: compared as (value, 0) pairs.
        FftKind::C2r => full.iter().map(|&(re, _)| (re, 0.0)).collect(),
    }
}

/// The f64 results for the first `images` images of `input`.
fn reference(gpu: &Gpu, case: &FftCase, input: &CudaSlice<f32>, images: usize) -> Result<Vec<(f64, f64)>> {
    let per_in = case.per_image()[0];
    let x = gpu.download(&input.slice(..images * per_in))?;
    Ok(x.chunks(per_in).flat_map(|image| exact(case, image)).collect())
}

/// Relative L2 error of the first images of `output` against `reference` (as many images).
fn error(gpu: &Gpu, case: &FftCase, output: &CudaSlice<f32>, reference: &[(f64, f64)]) -> Result<f64> {
    let per_pair = if case.kind == FftKind::C2r { 1 } else { 2 };
    let ours = gpu.download(&output.slice(..reference.len() * per_pair))?;
    let ours = if case.kind == FftKind::C2r { ours.iter().flat_map(|&v| [v, 0.0]).collect() } else { ours };
    Ok(rel_l2(&ours, reference))
}

/// Fresh inputs for `sets` copies of `case`'s input, `stride` f32 apart: uniform in [-1, 1),
/// and for complex-to-real, the half spectra of such real images (made by cuFFT), so that
/// they are the spectra of real images.
fn inputs(gpu: &Gpu, case: &FftCase, sets: usize, stride: usize, seed: u64) -> Result<CudaSlice<f32>> {
    let stream = gpu.stream();
    let mut input = gpu.alloc::<f32>(stride * sets)?;
    if case.kind != FftKind::C2r {
        gpu.fill_uniform(stream, &mut input, seed)?;
        return Ok(input);
    }
    let real = FftCase { kind: FftKind::R2c, ..*case };
    let r2c = CufftPlan::new(stream, &real)?;
    let mut images = gpu.alloc::<f32>(real.per_image()[0] * case.images)?;
    for set in 0..sets {
        gpu.fill_uniform(stream, &mut images, mix(seed, set as u64))?;
        r2c.execute(&mut images.as_view_mut(), &mut input.slice_mut(set * stride..set * stride + stride))?;
    }
    Ok(input)
}

/// Checks `case` run by `algorithm`: ours and cuFFT against the f64 DFT of the first few
/// images, and ours against cuFFT over all of them. Returns `[ours vs f64, cuFFT vs f64, ours
/// vs cuFFT]`.
pub fn check_case(gpu: &Gpu, case: &FftCase, algorithm: Fft2dAlgorithm, seed: u64) -> Result<[f64; 3]> {
    let stream = gpu.stream();
    let [per_in, per_out] = case.per_image();
    let (len_in, len_out) = (per_in * case.images, per_out * case.images);
    let plan = Fft2dPlan::new(gpu, case.n)?.with_algorithm(algorithm);
    let cufft = CufftPlan::new(stream, case)?;
    let mut input = inputs(gpu, case, 1, len_in, seed)?;
    let (mut ours, mut theirs) = (gpu.alloc::<f32>(len_out)?, gpu.alloc::<f32>(len_out)?);
    gpu.poison(&mut ours)?;
    gpu.poison(&mut theirs)?;
    run_ours(gpu, &plan, case, &mut input.as_view_mut(), &mut ours.as_view_mut())?;
    // cuFFT's complex-to-real may overwrite its input: it runs on a copy.
    let mut copy = gpu.alloc::<f32>(len_in)?;
    stream.memcpy_dtod(&input, &mut copy).during("cuMemcpyDtoD")?;
    cufft.execute(&mut copy.as_view_mut(), &mut theirs.as_view_mut())?;
    let truth = reference(gpu, case, &input, checked_images(case))?;
    let (ours_err, cufft_err) = (error(gpu, case, &ours, &truth)?, error(gpu, case, &theirs, &truth)?);
    let (a, b) = (gpu.download(&ours)?, gpu.download(&theirs)?);
    let widen = |v: &[f32]| -> Vec<f32> {
        if case.kind == FftKind::C2r { v.iter().flat_map(|&e| [e, 0.0]).collect() } else { v.to_vec() }
    };
    let exact: Vec<(f64, f64)> = widen(&b).chunks(2).map(|v| (v[0] as f64, v[1] as f64)).collect();
    Ok([ours_err, cufft_err, rel_l2(&widen(&a), &exact)])
}

/// Times `case`, each of our algorithms and cuFFT interleaved, over copies of the images that
/// exceed the L2 cache; each checked against the f64 DFT first.
pub fn bench_case(
    gpu: &Gpu,
    queue: &mut GpuQueue,
    case: &FftCase,
    seed: u64,
    schedule: Schedule,
    min_working_set: usize,
) -> Result<FftRow> {
    let [per_in, per_out] = case.per_image();
    let (len_in, len_out) = (per_in * case.images, per_out * case.images);
    let strides = [len_in.next_multiple_of(64), len_out.next_multiple_of(64)];
    let sets = min_working_set.div_ceil(4 * (strides[0] + strides[1])).max(2);
    let plans = Fft2dAlgorithm::ALL.map(|a| Fft2dPlan::new(gpu, case.n).map(|p| p.with_algorithm(a)));
    let plans = plans.into_iter().collect::<Result<Vec<_>>>()?;
    let chosen = Fft2dPlan::new(gpu, case.n)?.algorithm(gpu, case.images, case.kind.is_real());
    let cufft = CufftPlan::new(gpu.stream(), case)?;
    let mut input = inputs(gpu, case, sets, strides[0], mix(seed, 1))?;
    let mut output = gpu.alloc::<f32>(strides[1] * sets)?;
    // cuFFT's complex-to-real may overwrite its input: the timed runs do not mind, the
    // reference is taken before any run, and cuFFT's checked run comes last.
    let run = |which: usize, launch: usize, input: &mut CudaSlice<f32>, output: &mut CudaSlice<f32>| -> Result<()> {
        let set = launch % sets;
        let mut x = input.slice_mut(set * strides[0]..set * strides[0] + len_in);
        let mut y = output.slice_mut(set * strides[1]..set * strides[1] + len_out);
        match plans.get(which) {
            Some(plan) => run_ours(gpu, plan, case, &mut x, &mut y),
            None => cufft.execute(&mut x, &mut y),
        }
    };
    let names: Vec<&'static str> = Fft2dAlgorithm::ALL.iter().map(|a| a.name()).chain(["cuFFT"]).collect();
    let checked = checked_images(case);
    let truth = reference(gpu, case, &input, checked)?;
    let mut errs = vec![0.0; names.len()];
    for (which, err) in errs.iter_mut().enumerate() {
        gpu.poison(&mut output)?;
        run(which, 0, &mut input, &mut output)?;
        *err = error(gpu, case, &output, &truth)?;
    }
    let samples = time_interleaved(queue, schedule, names.len(), &mut |_, which, launch| {
        run(which, launch, &mut input, &mut output)
    })?;
    let candidates = names
        .iter()
        .zip(errs.iter().zip(&samples))
        .map(|(&name, (&rel_l2, samples))| FftCandidate { name, rel_l2, timing: Timing::from(samples) })
        .collect();
    Ok(FftRow { case: *case, sets, checked_images: checked, candidates, chosen: chosen.name() })
}

/// Parses `NxIMAGES` (e.g. `72x2048`).
pub fn parse_case(spec: &str) -> std::result::Result<(usize, usize), Error> {
    let bad = || Error::invalid("fft case", format!("`{spec}` is not NxIMAGES, e.g. 72x2048"));
    let (n, images) = spec.split_once('x').ok_or_else(bad)?;
    Ok((n.trim().parse().map_err(|_| bad())?, images.trim().parse().map_err(|_| bad())?))
}
