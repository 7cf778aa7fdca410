//! `convkit bench`: our kernels against cuDNN's best in each accuracy class, timed the same
//! way in the same run.
//!
//! For each layer: fresh random inputs in enough copies that one pass over them exceeds the L2
//! cache; the f64 reference on the GPU; the candidates (our direct kernel; our depthwise kernel
//! where it computes the layer; our fused FFT convolution where it computes the layer, one plan per
//! copy of the weights, its filter transform done when the plan is made and not timed, as a
//! framework would cache it; every engine configuration cuDNN's heuristics propose in every mode,
//! built within the workspace limit; the algorithms of the legacy
//! `cudnnFindConvolutionForwardAlgorithmEx` in FMA and in DEFAULT math), each run once on poisoned
//! outputs and compared with the reference; every cuDNN candidate screened with a few host-free
//! launches; the fastest few of each class and ours timed in interleaved host-free rounds
//! ([`crate::timing`]).

use super::{
    check::{CUDNN_EXACT, CUDNN_FAST, plan_tolerance},
    reference::{self, GpuReference},
};
use crate::timing::{GpuQueue, Samples, Schedule, screen, time_interleaved};
use crate::{
    Conv2d, Gpu, Result,
    conv::{
        cudnn::{
            self, MathClass,
            engines::{ALIGNMENT, EngineConv, EnginePlan, HeurMode},
            legacy::{LegacyChoice, LegacyConv, Math},
        },
        depthwise, direct,
        epilogue::{self, Epilogue, EpilogueArgs},
        fft::{self, FftConvPlan},
        fft_gemm::{self, FftGemmPlan},
        igemm::{self, IgemmPlan},
    },
    plan::{Plan, PlanOptions, Planner},
};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use kernels_gpu::{
    conv::{
        depthwise::{DepthwiseProgram, DepthwiseTile},
        direct::DirectTile,
        epilogue::Activation,
        igemm::{IgemmTile, Precision},
    },
    random::mix,
    verify::{CompareStats, Tolerance},
};
use serde::Serialize;
use std::{rc::Rc, sync::Arc, time::Instant};

/// Device memory the tiled FFT convolution's filter spectra may take, per copy of the weights.
const FFT_GEMM_PLAN_LIMIT: usize = 1 << 30;

/// The copy bandwidth measured on the H200 (bytes read + written), for "% of HBM".
pub const HBM_BYTES_PER_S: f64 = 4.3e12;

#[derive(Clone, Debug, Serialize)]
pub struct BenchOptions {
    pub schedule: Schedule,
    /// Host-free launches per cuDNN candidate when screening (after one untimed launch).
    pub screen_reps: usize,
    /// Candidates of each class that go on to the interleaved rounds.
    pub finalists: usize,
    /// The rotated working set is at least this many bytes (twice the H200's 60 MB L2).
    pub min_working_set: usize,
    /// Workspace limit for cuDNN; configurations that need more are skipped and counted.
    pub workspace_bytes: usize,
    /// Time this direct-kernel variant instead of the heuristic's choice.
    #[serde(skip)]
    pub tile: Option<DirectTile>,
    /// Heuristic modes of cuDNN's graph API to draw engine configurations from.
    #[serde(skip)]
    pub heuristics: Vec<HeurMode>,
    /// Also time what the planner's heuristic picks in each class, through [`Plan::forward`].
    pub plans: bool,
    /// Time every direct-, depthwise- and tensor-core-kernel variant, not only the heuristic's
    /// choices.
    pub all_variants: bool,
    /// Also time our direct-style candidates with this epilogue fused (`NAME+epilogue`, held
    /// to the reference followed by the epilogue), and the stand-alone epilogue pass.
    #[serde(skip)]
    pub epilogue: Option<Epilogue>,
}

/// Where an implementation comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Source {
    Convkit,
    /// The planner's heuristic choice in a class, run through the Plan API.
    Plan,
    CudnnEngine,
    CudnnLegacy,
}

/// One implementation's showing on a layer.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub name: String,
    pub source: Source,
    #[serde(serialize_with = "class_name")]
    pub class: MathClass,
    /// Numerical notes (engines) or the math mode (legacy).
    pub notes: String,
    pub workspace: usize,
    /// Against the f64 reference, with the class's bound (ours: the strict f32 bound).
    pub rel_l2: f64,
    pub worst_ratio: f64,
    pub violations: u64,
    /// Median of the screening launches (cuDNN candidates).
    pub screen_ms: Option<f64>,
    /// False where its host blocked while queued, so that it was screened without the gate.
    pub screen_host_free: bool,
    pub timing: Option<Timing>,
    /// Why it was left out, if it was.
    pub excluded: Option<String>,
}

fn class_name<S: serde::Serializer>(class: &MathClass, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(class.name())
}

impl Candidate {
    fn new(name: String, source: Source, class: MathClass, notes: String, workspace: usize) -> Self {
        Candidate {
            name,
            source,
            class,
            notes,
            workspace,
            rel_l2: f64::NAN,
            worst_ratio: f64::NAN,
            violations: 0,
            screen_ms: None,
            screen_host_free: true,
            timing: None,
            excluded: None,
        }
    }

    fn record(&mut self, stats: &CompareStats) {
        (self.rel_l2, self.worst_ratio, self.violations) = (stats.rel_l2(), stats.worst_ratio(), stats.violations);
    }
}

/// The interleaved rounds' result.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub samples: usize,
    pub host_free: bool,
}

impl From<&Samples> for Timing {
    fn from(s: &Samples) -> Self {
        Timing {
            p10: s.quantile(0.1),
            p50: s.median(),
            p90: s.quantile(0.9),
            samples: s.ms.len(),
            host_free: s.host_free,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LayerResult {
    pub label: String,
    pub spec: String,
    pub seed: u64,
    /// The direct kernel's variant, where it computes the layer (NCHW).
    pub tile: Option<&'static str>,
    pub flops: f64,
    pub min_bytes: f64,
    pub sets: usize,
    /// Ours first: the direct kernel where `tile` is set, the depthwise kernel where `depthwise`
    /// is set, the fused FFT convolution where `fft` is set, the tiled one where `fft_gemm` is
    /// set, the tensor-core variants (`igemm`) and, with `--all-variants`, the direct and the
    /// depthwise kernels' other variants (`ours` candidates in all); then the plans and cuDNN's.
    pub candidates: Vec<Candidate>,
    /// Our kernels' candidates at the front of `candidates`.
    pub ours: usize,
    /// The depthwise kernel's variant, where it computes the layer.
    pub depthwise: Option<&'static str>,
    /// The fused FFT convolution's transform, where it computes the layer.
    pub fft: Option<&'static str>,
    /// The tiled FFT convolution's transform, where it computes the layer.
    pub fft_gemm: Option<&'static str>,
    /// Indices of the tensor-core (implicit GEMM) candidates: TF32 in the fast class, 3xTF32
    /// in the exact class (its bound, `igemm::tolerance`, is under twice f32's).
    pub igemm: Vec<usize>,
    /// Indices of the planner's choices (exact class, fast class), where `plans` was set.
    pub plans: Vec<usize>,
    /// With an epilogue: (plain, fused) candidate indices of our direct-style kernels.
    pub fused: Vec<[usize; 2]>,
    /// With an epilogue that keeps the channel order: the stand-alone pass's index.
    pub epilogue_pass: Option<usize>,
    /// With the epilogue `bias,relu`: cuDNN's fused convolution-bias-activation candidates
    /// (one per legacy algorithm FindEx ran), held to the reference with the epilogue and
    /// never counted as cuDNN's best plain convolution.
    pub cudnn_fused: Vec<usize>,
    /// Index of cuDNN's fastest timed candidate in the exact class.
    pub best_exact: Option<usize>,
    /// Index of cuDNN's fastest timed candidate with TF32 allowed: of either class, since
    /// allowing TF32 (as PyTorch does) does not keep cuDNN from an exact kernel that is faster.
    pub best_fast: Option<usize>,
    /// Engine configurations proposed, built, and left out (by reason).
    pub engine_configs: usize,
    pub engine_plans: usize,
    pub skipped: Vec<String>,
    /// Seconds spent building cuDNN plans and screening, and in the final rounds.
    pub setup_s: f64,
    pub timing_s: f64,
    /// Free device memory (MiB) as the layer began, once our candidates were validated, once
    /// cuDNN's were built, and after timing. The stream-ordered pool keeps freed memory a while,
    /// so a drop from one layer's start to the next is a lead to a leak, not proof of one.
    pub free_mib: FreeMemory,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct FreeMemory {
    pub start: usize,
    pub ours: usize,
    pub cudnn: usize,
    pub end: usize,
}

fn free_mib(gpu: &Gpu) -> Result<usize> {
    Ok(gpu.free_memory()? >> 20)
}

impl LayerResult {
    /// Our candidates: the direct kernel, then the depthwise kernel, the FFT convolutions and
    /// the tensor-core variants that ran.
    pub fn convkit(&self) -> &[Candidate] {
        &self.candidates[..self.ours]
    }

    /// Our fastest timed candidate of `class` (the fast class admits both).
    pub fn ours_in(&self, class: MathClass) -> &Candidate {
        let admitted = |c: &&Candidate| class == MathClass::Fast || c.class == MathClass::Exact;
        let fastest = self.convkit().iter().filter(admitted).min_by(|a, b| p50(a).total_cmp(&p50(b)));
        fastest.expect("every layer benchmarked has an exact candidate of ours (direct or depthwise)")
    }

    /// Our fastest timed candidate in the exact class.
    pub fn ours(&self) -> &Candidate {
        self.ours_in(MathClass::Exact)
    }

    /// The fastest tensor-core candidate of `precision`.
    pub fn igemm_candidate(&self, precision: Precision) -> Option<&Candidate> {
        let class = match precision {
            Precision::Tf32 => MathClass::Fast,
            Precision::Tf32x3 => MathClass::Exact,
        };
        let of_precision = self.igemm.iter().map(|&i| &self.candidates[i]).filter(|c| c.class == class);
        of_precision.min_by(|a, b| p50(a).total_cmp(&p50(b)))
    }

    pub fn direct(&self) -> Option<&Candidate> {
        self.tile.map(|_| &self.candidates[0])
    }

    pub fn depthwise_candidate(&self) -> Option<&Candidate> {
        self.depthwise.map(|_| &self.candidates[self.tile.is_some() as usize])
    }

    pub fn fft_candidate(&self) -> Option<&Candidate> {
        let before = self.tile.is_some() as usize + self.depthwise.is_some() as usize;
        self.fft.map(|_| &self.candidates[before])
    }

    pub fn fft_gemm_candidate(&self) -> Option<&Candidate> {
        let before = self.tile.is_some() as usize + self.depthwise.is_some() as usize + self.fft.is_some() as usize;
        self.fft_gemm.map(|_| &self.candidates[before])
    }

    pub fn ours_ms(&self) -> f64 {
        self.ours().timing.as_ref().map_or(f64::NAN, |t| t.p50)
    }

    /// Our fastest kernel of either class (what `--baseline` compares: [`load_baseline`]).
    pub fn fastest_ms(&self) -> f64 {
        p50(self.ours_in(MathClass::Fast))
    }

    pub fn best(&self, class: MathClass) -> Option<&Candidate> {
        let index = match class {
            MathClass::Exact => self.best_exact,
            MathClass::Fast => self.best_fast,
        };
        index.map(|i| &self.candidates[i])
    }

    /// cuDNN's fastest timed fused convolution-bias-ReLU in `class` (the fast class admits
    /// both, as [`Self::best`] does).
    pub fn best_cudnn_fused(&self, class: MathClass) -> Option<&Candidate> {
        let admitted = |c: &&Candidate| class == MathClass::Fast || c.class == MathClass::Exact;
        let timed = self.cudnn_fused.iter().map(|&i| &self.candidates[i]).filter(|c| c.timing.is_some());
        timed.filter(admitted).min_by(|a, b| p50(a).total_cmp(&p50(b)))
    }

    /// cuDNN's best in `class` over ours in it (median times): above 1 we are faster.
    pub fn speedup(&self, class: MathClass) -> Option<f64> {
        let theirs = self.best(class)?.timing.as_ref()?.p50;
        Some(theirs / p50(self.ours_in(class)))
    }

    pub fn gbytes_per_s(&self) -> f64 {
        self.min_bytes / (self.ours_ms() * 1e-3) * 1e-9
    }

    pub fn hbm_percent(&self) -> f64 {
        self.min_bytes / (self.ours_ms() * 1e-3) / HBM_BYTES_PER_S * 100.0
    }

    pub fn gflops(&self) -> f64 {
        self.flops / (self.ours_ms() * 1e-3) * 1e-9
    }

    /// Whether every one of our candidates (and the plans) passed its bound.
    pub fn ours_correct(&self) -> bool {
        let plans = self.plans.iter().map(|&i| &self.candidates[i]);
        let fused = self.fused.iter().map(|&[_, i]| &self.candidates[i]);
        self.convkit().iter().chain(plans).chain(fused).all(|c| c.violations == 0 && c.excluded.is_none())
    }

    /// The plan of a class, where one ran.
    pub fn plan(&self, class: MathClass) -> Option<&Candidate> {
        self.plans.iter().map(|&i| &self.candidates[i]).find(|c| c.class == class)
    }
}

/// Device buffers holding `sets` independent copies of x, w and y, each copy aligned for cuDNN.
struct Arena {
    x: CudaSlice<f32>,
    w: CudaSlice<f32>,
    y: CudaSlice<f32>,
    sets: usize,
    lens: [usize; 3],
    strides: [usize; 3],
}

impl Arena {
    fn new(gpu: &Gpu, stream: &CudaStream, conv: &Conv2d, seed: u64, min_bytes: usize) -> Result<Self> {
        let g = conv.geometry()?;
        let lens = [g.x_len, g.w_len, g.y_len];
        // 256-byte steps: cuDNN's engines were promised 16-byte alignment (ALIGNMENT).
        const STEP: usize = 64;
        const { assert!((4 * STEP).is_multiple_of(ALIGNMENT)) };
        let strides = lens.map(|l| l.next_multiple_of(STEP));
        let set_bytes = 4 * strides.iter().sum::<usize>();
        let sets = min_bytes.div_ceil(set_bytes).max(2);
        let mut x = gpu.alloc::<f32>(strides[0] * sets)?;
        let mut w = gpu.alloc::<f32>(strides[1] * sets)?;
        let y = gpu.alloc::<f32>(strides[2] * sets)?;
        gpu.fill_uniform(stream, &mut x, mix(seed, 1))?;
        gpu.fill_uniform(stream, &mut w, mix(seed, 2))?;
        Ok(Arena { x, w, y, sets, lens, strides })
    }

    /// Our plans (packed or transformed filters), one per copy of the weights, as many copies
    /// as the plans need to span `min_bytes` on their own, and at most one per set: a small
    /// layer rotates over hundreds of sets, and a plan can be far larger than its filters (a
    /// depthwise layer's tensor-core panels, 64x), so a plan per set once ran out of device
    /// memory. Launch `n` uses set `n % sets` and plan `(n % sets) % plans.len()`.
    fn plans<P>(
        &mut self,
        min_bytes: usize,
        plan_bytes: impl Fn(&P) -> usize,
        mut build: impl FnMut(&CudaView<'_, f32>) -> Result<P>,
    ) -> Result<Vec<P>> {
        let first = build(&self.set(0).1)?;
        let copies = self.sets.min(min_bytes.div_ceil(plan_bytes(&first).max(1)).max(2));
        let mut plans = Vec::with_capacity(copies);
        plans.push(first);
        for set in 1..copies {
            plans.push(build(&self.set(set).1)?);
        }
        Ok(plans)
    }

    /// Copy `set` of x, w and y.
    fn set(&mut self, set: usize) -> (CudaView<'_, f32>, CudaView<'_, f32>, CudaViewMut<'_, f32>) {
        let [x, w, y] = [0, 1, 2].map(|i| set * self.strides[i]..set * self.strides[i] + self.lens[i]);
        (self.x.slice(x), self.w.slice(w), self.y.slice_mut(y))
    }
}

/// How a candidate runs.
enum Runner<'g> {
    Direct(DirectTile),
    Depthwise(DepthwiseTile),
    /// Plans for copies of the weights in the arena (`Arena::plans`).
    Igemm(Rc<Vec<IgemmPlan>>),
    Fft(Vec<FftConvPlan>),
    FftGemm(Vec<FftGemmPlan>),
    Engine(EnginePlan),
    Legacy(LegacyChoice),
    /// cuDNN's fused convolution, bias and ReLU with a legacy algorithm.
    LegacyBiasRelu(LegacyChoice),
    Plan(Box<Plan<'g>>),
    /// A direct, depthwise or tensor-core runner with the bench's epilogue fused.
    Fused(Box<Runner<'g>>),
    /// The bench's epilogue as a pass of its own, in place on the output.
    EpiloguePass,
}

/// The bench's epilogue and its inputs: one residual per set of the arena.
struct EpilogueInputs {
    epilogue: Epilogue,
    bias: Option<CudaSlice<f32>>,
    residuals: Vec<CudaSlice<f32>>,
}

impl EpilogueInputs {
    fn args(&self, set: usize) -> EpilogueArgs<'_> {
        EpilogueArgs { epilogue: self.epilogue, bias: self.bias.as_ref(), residual: self.residuals.get(set) }
    }
}

/// What a candidate's launch needs.
struct Env<'a, 'g> {
    gpu: &'g Gpu,
    stream: &'a Arc<CudaStream>,
    conv: &'a Conv2d,
    arena: Arena,
    workspace: &'a mut CudaSlice<u8>,
    engines: Option<EngineConv<'g>>,
    legacy: Option<LegacyConv<'g>>,
    epilogue: Option<EpilogueInputs>,
}

impl<'g> Env<'_, 'g> {
    fn run(&mut self, runner: &Runner<'g>, launch: usize) -> Result<()> {
        let (gpu, stream, conv) = (self.gpu, self.stream, self.conv);
        let set = launch % self.arena.sets;
        let (x, w, mut y) = self.arena.set(set);
        match runner {
            Runner::Direct(tile) => direct::forward_with(gpu, stream, conv, tile, &x, &w, &mut y),
            Runner::Depthwise(tile) => depthwise::forward_with(gpu, stream, conv, tile, &x, &w, &mut y),
            Runner::Igemm(plans) => plans[set % plans.len()].forward(gpu, stream, &x, &mut y),
            Runner::Fft(plans) => plans[set % plans.len()].forward(gpu, stream, &x, &mut y),
            Runner::FftGemm(plans) => plans[set % plans.len()].forward(gpu, stream, &x, &mut y, self.workspace),
            Runner::Engine(plan) => {
                let engines = self.engines.as_ref().expect("engine candidates come with their graph");
                engines.execute(plan, &x, &w, &mut y, self.workspace)
            }
            Runner::Legacy(choice) => {
                let legacy = self.legacy.as_ref().expect("legacy candidates come with their descriptors");
                legacy.forward(choice, &x, &w, &mut y, self.workspace)
            }
            Runner::LegacyBiasRelu(choice) => {
                let legacy = self.legacy.as_ref().expect("legacy candidates come with their descriptors");
                let bias = self.epilogue.as_ref().and_then(|e| e.bias.as_ref()).expect("a bias, by construction");
                legacy.forward_bias_relu(choice, &x, &w, bias, &mut y, self.workspace)
            }
            Runner::Plan(plan) => plan.forward(&x, &mut y, self.workspace),
            Runner::Fused(inner) => {
                let args = self.epilogue.as_ref().expect("fused runners come with the epilogue").args(set);
                match &**inner {
                    Runner::Direct(tile) => direct::forward_fused(gpu, stream, conv, tile, &x, &w, &mut y, &args),
                    Runner::Depthwise(tile) => depthwise::forward_fused(gpu, stream, conv, tile, &x, &w, &mut y, &args),
                    Runner::Igemm(plans) => plans[set % plans.len()].forward_fused(gpu, stream, &x, &mut y, &args),
                    _ => unreachable!("only the direct-style kernels fuse the epilogue"),
                }
            }
            Runner::EpiloguePass => {
                let args = self.epilogue.as_ref().expect("the pass comes with the epilogue").args(set);
                epilogue::apply_pass(gpu, stream, conv, &args, &mut y, None)
            }
        }
    }

    /// Runs `runner` once into poisoned outputs and compares set 0 with the reference.
    fn validate(&mut self, runner: &Runner<'g>, truth: &GpuReference, bound: Tolerance) -> Result<CompareStats> {
        self.gpu.poison(&mut self.arena.y)?;
        self.run(runner, 0)?;
        let (_, _, y0) = self.arena.set(0);
        reference::compare(self.gpu, self.stream, &y0, truth, bound)
    }
}

/// Benchmarks layers on one GPU and stream, reusing its workspace and timing gate.
pub struct Bench<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    queue: GpuQueue<'g>,
    workspace: CudaSlice<u8>,
    pub opts: BenchOptions,
}

impl<'g> Bench<'g> {
    pub fn new(gpu: &'g Gpu, opts: BenchOptions) -> Result<Self> {
        let stream = gpu.stream().clone();
        let queue = GpuQueue::new(gpu, &stream)?;
        let workspace = gpu.alloc::<u8>(opts.workspace_bytes.max(1))?;
        Ok(Bench { gpu, stream, queue, workspace, opts })
    }

    /// Benchmarks one layer; `seed` draws its inputs.
    pub fn layer(&mut self, conv: &Conv2d, seed: u64) -> Result<LayerResult> {
        let started = Instant::now();
        let gpu = self.gpu;
        let mut free = FreeMemory { start: free_mib(gpu)?, ..FreeMemory::default() };
        let geom = conv.geometry()?;
        let mut arena = Arena::new(gpu, &self.stream, conv, seed, self.opts.min_working_set)?;
        let truth = {
            let (x0, w0, _) = arena.set(0);
            reference::gpu_reference(gpu, &self.stream, conv, &x0, &w0)?
        };
        // The direct kernel (NCHW layers): the requested variant or the heuristic's.
        let direct_tile = self.opts.tile.unwrap_or_else(|| direct::choose_tile(conv, &geom, gpu.sm_count()));
        let direct_unsupported = direct::unsupported(conv, &direct_tile);
        let tile = direct_unsupported.is_none().then_some(direct_tile);
        let epilogue = match self.opts.epilogue {
            Some(e) => Some(EpilogueInputs {
                epilogue: e,
                bias: e.bias.then(|| gpu.upload(&reference::host_uniform(mix(seed, 4), conv.k))).transpose()?,
                residuals: if e.residual {
                    (0..arena.sets)
                        .map(|set| gpu.upload(&reference::host_uniform(mix(seed, 5 + set as u64), geom.y_len)))
                        .collect::<Result<_>>()?
                } else {
                    Vec::new()
                },
            }),
            None => None,
        };
        let mut env = Env {
            gpu,
            stream: &self.stream,
            conv,
            arena,
            workspace: &mut self.workspace,
            engines: None,
            legacy: None,
            epilogue,
        };
        let mut skipped = Vec::new();

        // Ours first: each must pass the strict bound.
        let (mut candidates, mut runners) = (Vec::new(), Vec::new());
        let f32_bound = Tolerance::f32_sum(geom.taps(conv) as u64);
        let direct_candidate = |env: &mut Env, tile: DirectTile| -> Result<(Candidate, Runner<'g>)> {
            let runner = Runner::Direct(tile);
            let stats = env.validate(&runner, &truth, f32_bound)?;
            let name = tile.name.trim_start_matches("direct_fwd_").to_owned();
            let mut candidate = Candidate::new(name, Source::Convkit, MathClass::Exact, "f32 FMA".into(), 0);
            candidate.record(&stats);
            Ok((candidate, runner))
        };
        match tile {
            Some(tile) => {
                let (candidate, runner) = direct_candidate(&mut env, tile)?;
                candidates.push(candidate);
                runners.push(runner);
            }
            None => skipped.push(format!("convkit {}: {}", direct_tile.name, direct_unsupported.unwrap_or_default())),
        }

        // Our depthwise kernel, where it computes the layer, to the same bound (with
        // `--all-variants`, its other variants follow the tensor-core ones).
        let depthwise_candidate = |env: &mut Env, tile: DepthwiseTile| -> Result<(Candidate, Runner<'g>)> {
            let runner = Runner::Depthwise(tile);
            let stats = env.validate(&runner, &truth, f32_bound)?;
            let name = tile.name.trim_start_matches("depthwise_").to_owned();
            let notes = match tile.program {
                DepthwiseProgram::Channels => format!("f32 FMA, NHWC, {} channels per thread", tile.lane_channels),
                _ => format!("f32 FMA, {}x{} tiles", tile.tile_h, tile.tile_w),
            };
            let mut candidate = Candidate::new(name, Source::Convkit, MathClass::Exact, notes, 0);
            candidate.record(&stats);
            Ok((candidate, runner))
        };
        let depthwise_tile = match depthwise::choose_tile(conv, &geom) {
            Ok(tile) => {
                let (candidate, runner) = depthwise_candidate(&mut env, tile)?;
                candidates.push(candidate);
                runners.push(runner);
                Some(tile.name)
            }
            Err(e) => {
                skipped.push(format!("convkit depthwise: {e}"));
                None
            }
        };

        // The FFT paths' bound needs set 0's inputs on the host: downloaded once, if at all.
        let mut fft_tolerance = None;
        let mut fft_bound = |env: &mut Env| -> Result<Tolerance> {
            if fft_tolerance.is_none() {
                let (x0, w0, _) = env.arena.set(0);
                let scale = reference::fft_error_scale(&gpu.download(&x0)?, &gpu.download(&w0)?, conv.k);
                fft_tolerance = Some(Tolerance::fft(geom.taps(conv) as u64, scale));
            }
            Ok(fft_tolerance.expect("set above"))
        };
        // Our FFT convolution, where it computes the layer.
        let fft_tile = match fft::choose_tile(conv, &geom) {
            Ok(tile) => {
                let plans = env.arena.plans(self.opts.min_working_set, FftConvPlan::plan_bytes, |w| {
                    FftConvPlan::with_tile(gpu, &self.stream, conv, &tile, w)
                })?;
                let bytes = plans[0].plan_bytes();
                let name = tile.name.trim_start_matches("fftconv_").to_owned();
                let mut candidate = Candidate::new(name, Source::Convkit, MathClass::Exact, "f32 FFT".into(), bytes);
                let (runner, bound) = (Runner::Fft(plans), fft_bound(&mut env)?);
                candidate.record(&env.validate(&runner, &truth, bound)?);
                candidates.push(candidate);
                runners.push(runner);
                Some(tile.name)
            }
            Err(e) => {
                skipped.push(format!("convkit FFT: {e}"));
                None
            }
        };
        // The tiled FFT convolution, in the bench's workspace.
        let fft_gemm_size = match fft_gemm::choose(conv, &geom, FFT_GEMM_PLAN_LIMIT, env.workspace.len()) {
            Ok(shape) => {
                let plans = env.arena.plans(self.opts.min_working_set, FftGemmPlan::plan_bytes, |w| {
                    FftGemmPlan::with_shape(gpu, &self.stream, conv, shape, w)
                })?;
                let name = shape.size.name.to_owned();
                let notes = format!(
                    "f32 FFT, {}x{} tiles of {}x{}",
                    shape.tiles[0], shape.tiles[1], shape.tile[0], shape.tile[1]
                );
                let mut candidate =
                    Candidate::new(name, Source::Convkit, MathClass::Exact, notes, shape.workspace_bytes());
                let (runner, bound) = (Runner::FftGemm(plans), fft_bound(&mut env)?);
                candidate.record(&env.validate(&runner, &truth, bound)?);
                candidates.push(candidate);
                runners.push(runner);
                Some(shape.size.name)
            }
            Err(e) => {
                skipped.push(format!("convkit tiled FFT: {e}"));
                None
            }
        };
        // The tensor-core kernel in both precisions, each to its own bound: the heuristic's
        // variant, or every variant.
        let mut igemm_indices = Vec::new();
        for precision in [Precision::Tf32, Precision::Tf32x3] {
            let tiles: Vec<IgemmTile> = if self.opts.all_variants {
                igemm::supporting_variants(gpu, conv, &geom).filter(|t| t.precision == precision).copied().collect()
            } else {
                match igemm::choose(conv, &geom, precision, gpu.sm_count()) {
                    Ok(shape) => vec![shape.tile],
                    Err(e) => {
                        skipped.push(format!("convkit implicit GEMM: {e}"));
                        vec![]
                    }
                }
            };
            for tile in tiles {
                let plans = env.arena.plans(self.opts.min_working_set, IgemmPlan::plan_bytes, |w| {
                    IgemmPlan::new(gpu, &self.stream, conv, &tile, w)
                })?;
                let (bytes, groups_per_block) = (plans[0].plan_bytes(), plans[0].shape().groups_per_block);
                let runner = Runner::Igemm(Rc::new(plans));
                let stats = env.validate(&runner, &truth, igemm::tolerance(conv, &geom, &tile))?;
                let class = igemm::class(precision);
                let notes = format!("{} mma, {groups_per_block} groups per block", precision.name());
                let name = tile.name.trim_start_matches("igemm_").to_owned();
                let mut candidate = Candidate::new(name, Source::Convkit, class, notes, bytes);
                candidate.record(&stats);
                igemm_indices.push(candidates.len());
                candidates.push(candidate);
                runners.push(runner);
            }
        }
        if self.opts.all_variants {
            for tile in direct::supporting_variants(conv).filter(|t| Some(t.name) != tile.map(|t| t.name)) {
                let (candidate, runner) = direct_candidate(&mut env, *tile)?;
                candidates.push(candidate);
                runners.push(runner);
            }
            for tile in depthwise::supporting_variants(conv).filter(|t| Some(t.name) != depthwise_tile) {
                let (candidate, runner) = depthwise_candidate(&mut env, *tile)?;
                candidates.push(candidate);
                runners.push(runner);
            }
        }
        let ours = candidates.len();
        if ours == 0 {
            return Err(crate::Error::Unsupported {
                algorithm: "bench",
                reason: format!(
                    "no convkit kernel computes {conv}: nothing to compare with cuDNN ({})",
                    skipped.join("; ")
                ),
            });
        }
        // The planner's heuristic choice in each class, through the Plan API (set 0's weights).
        let mut plans = Vec::new();
        if self.opts.plans {
            let planner = Planner::with_cache_file(gpu, None)?;
            for math in [MathClass::Exact, MathClass::Fast] {
                let opts = PlanOptions { math, workspace_limit: Some(env.workspace.len()), ..PlanOptions::default() };
                let plan = {
                    let (_, w0, _) = env.arena.set(0);
                    planner.plan(&self.stream, conv, &opts, &w0)?
                };
                let bound = plan_tolerance(&plan, geom.taps(conv) as u64, || fft_bound(&mut env))?;
                let name = plan.algorithm().to_string();
                let notes = format!("the plan in the {} class", math.name());
                let mut candidate = Candidate::new(name, Source::Plan, math, notes, plan.workspace_bytes());
                let runner = Runner::Plan(Box::new(plan));
                candidate.record(&env.validate(&runner, &truth, bound)?);
                plans.push(candidates.len());
                candidates.push(candidate);
                runners.push(runner);
            }
        }
        // Our direct-style candidates again with the epilogue fused, and the epilogue alone.
        let (mut fused, mut epilogue_pass) = (Vec::new(), None);
        let finished = match &env.epilogue {
            Some(inputs) => {
                let plain = truth.download(gpu)?;
                let bias = inputs.bias.as_ref().map(|b| gpu.download(b)).transpose()?;
                let residual = inputs.residuals.first().map(|r| gpu.download(r)).transpose()?;
                let finished =
                    reference::with_epilogue(conv, &inputs.epilogue, &plain, bias.as_deref(), residual.as_deref())?;
                Some(GpuReference::upload(gpu, &finished)?)
            }
            None => None,
        };
        if let (Some(inputs), Some(finished)) = (&env.epilogue, &finished) {
            let epilogue = inputs.epilogue;
            for i in 0..runners.len() {
                if plans.contains(&i) {
                    continue;
                }
                let inner = match &runners[i] {
                    Runner::Direct(tile) => Runner::Direct(*tile),
                    Runner::Depthwise(tile) => Runner::Depthwise(*tile),
                    // The plain candidate's packed filters, shared.
                    Runner::Igemm(plans) => Runner::Igemm(plans.clone()),
                    _ => continue,
                };
                let bound = match &inner {
                    Runner::Igemm(plans) => igemm::tolerance(conv, &geom, &plans[0].shape().tile),
                    _ => Tolerance::f32_sum(geom.taps(conv) as u64),
                };
                let runner = Runner::Fused(Box::new(inner));
                let stats = env.validate(&runner, finished, bound)?;
                let c = &candidates[i];
                let name = format!("{}+epilogue", c.name);
                let notes = format!("{}, {epilogue} fused", c.notes);
                let mut candidate = Candidate::new(name, Source::Convkit, c.class, notes, c.workspace);
                candidate.record(&stats);
                fused.push([i, candidates.len()]);
                candidates.push(candidate);
                runners.push(runner);
            }
            // Timed on whatever the output holds (the other candidates' outputs, or the NaN
            // that validation poisons with): an elementwise pass's time does not depend on it.
            if !epilogue.shuffle {
                let notes = format!("{epilogue} as a pass of its own, in place");
                epilogue_pass = Some(candidates.len());
                candidates.push(Candidate::new("epilogue-pass".into(), Source::Convkit, MathClass::Exact, notes, 0));
                runners.push(Runner::EpiloguePass);
            }
        }
        let ours_count = runners.len();
        free.ours = free_mib(gpu)?;

        // cuDNN's graph API: every configuration of every heuristic mode.
        let mut engine_configs = 0;
        let mut engine_plans = 0;
        match EngineConv::new(gpu, &self.stream, conv) {
            Ok(graph) => {
                let (configs, failed) = graph.configs(&self.opts.heuristics);
                for (mode, e) in failed {
                    skipped.push(format!("heuristic {mode:?}: {e}"));
                }
                engine_configs = configs.len();
                for config in configs {
                    let tag = config.tag();
                    let plan = match graph.build(config) {
                        Ok(plan) => plan,
                        Err(e) if cudnn::is_unsupported(&e) => {
                            skipped.push(format!("{tag}: not supported"));
                            continue;
                        }
                        Err(e) => {
                            skipped.push(format!("{tag}: {e}"));
                            continue;
                        }
                    };
                    engine_plans += 1;
                    if plan.workspace > env.workspace.len() {
                        skipped.push(format!("{tag}: needs {} MiB of workspace", plan.workspace >> 20));
                        continue;
                    }
                    let notes = plan.config().notes();
                    candidates.push(Candidate::new(tag, Source::CudnnEngine, plan.class(), notes, plan.workspace));
                    runners.push(Runner::Engine(plan));
                }
                env.engines = Some(graph);
            }
            Err(e) => skipped.push(format!("cuDNN graph API: {e}")),
        }

        // The legacy API: what FindEx can run, in both math modes; with the epilogue
        // `bias,relu`, each of those algorithms also through cuDNN's fused call.
        let legacy = LegacyConv::new(gpu, &self.stream, conv)?;
        let bias_relu = Epilogue { bias: true, activation: Activation::Relu, ..Epilogue::NONE };
        let with_cudnn_fused = env.epilogue.as_ref().is_some_and(|e| e.epilogue == bias_relu);
        let mut cudnn_fused = Vec::new();
        for math in [Math::Fma, Math::Default] {
            let (x0, w0, mut y0) = env.arena.set(0);
            match legacy.find(math, &x0, &w0, &mut y0, env.workspace) {
                Ok(found) => {
                    for choice in found {
                        let tensor_ops = if choice.tensor_ops { ", tensor ops" } else { "" };
                        let find_ms = choice.find_ms.map_or(String::new(), |ms| format!(", FindEx {ms:.3} ms"));
                        let notes = format!("{math}{tensor_ops}{find_ms}");
                        let source = Source::CudnnLegacy;
                        if with_cudnn_fused {
                            let notes = format!("{math}, cudnnConvolutionBiasActivationForward");
                            let name = format!("{}+{bias_relu}", choice.name());
                            cudnn_fused.push(candidates.len());
                            candidates.push(Candidate::new(name, source, math.class(), notes, choice.workspace));
                            runners.push(Runner::LegacyBiasRelu(choice));
                        }
                        candidates.push(Candidate::new(choice.name(), source, math.class(), notes, choice.workspace));
                        runners.push(Runner::Legacy(choice));
                    }
                }
                Err(e) => skipped.push(format!("FindEx in {math} math: {e}")),
            }
        }
        env.legacy = Some(legacy);
        free.cudnn = free_mib(gpu)?;

        // Validate every cuDNN candidate, then screen it.
        let mut fastest = [f64::INFINITY; 4]; // screened so far, by class, plain then fused
        for i in ours_count..runners.len() {
            let class = candidates[i].class;
            let bound = match class {
                MathClass::Exact => CUDNN_EXACT,
                MathClass::Fast => CUDNN_FAST,
            };
            let is_fused = cudnn_fused.contains(&i);
            let truth =
                if is_fused { finished.as_ref().expect("fused candidates come with the epilogue") } else { &truth };
            let slot = class as usize + 2 * is_fused as usize;
            match env.validate(&runners[i], truth, bound) {
                Ok(stats) => {
                    candidates[i].record(&stats);
                    if !stats.passed() {
                        let why =
                            format!("wrong output: {} elements beyond the {} bound", stats.violations, class.name());
                        candidates[i].excluded = Some(why);
                        continue;
                    }
                }
                Err(e) => {
                    candidates[i].excluded = Some(format!("failed to run: {e}"));
                    continue;
                }
            }
            let runner = &runners[i];
            let mut launch = |_: &mut GpuQueue, n: usize| env.run(runner, n);
            match screen(&mut self.queue, self.opts.screen_reps, fastest[slot], &mut launch) {
                Ok(samples) => {
                    let ms = samples.median();
                    fastest[slot] = fastest[slot].min(ms);
                    (candidates[i].screen_ms, candidates[i].screen_host_free) = (Some(ms), samples.host_free);
                }
                Err(e) => candidates[i].excluded = Some(format!("failed to run: {e}")),
            }
        }

        // Finalists: ours, and the fastest screened candidates of each class (plain and fused
        // apart).
        let mut finalists: Vec<usize> = (0..ours_count).collect();
        for class in [MathClass::Exact, MathClass::Fast] {
            for fused in [false, true] {
                let mut ranked: Vec<usize> = (ours_count..candidates.len())
                    .filter(|&i| candidates[i].class == class && candidates[i].screen_ms.is_some())
                    .filter(|i| cudnn_fused.contains(i) == fused)
                    .collect();
                ranked.sort_by(|&a, &b| candidates[a].screen_ms.unwrap().total_cmp(&candidates[b].screen_ms.unwrap()));
                finalists.extend(ranked.into_iter().take(self.opts.finalists));
            }
        }
        let setup_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let samples = time_interleaved(&mut self.queue, self.opts.schedule, finalists.len(), &mut |_, which, n| {
            env.run(&runners[finalists[which]], n)
        })?;
        for (&i, s) in finalists.iter().zip(&samples) {
            candidates[i].timing = Some(Timing::from(s));
        }
        let best = |allowed: &[MathClass]| {
            finalists[ours_count..]
                .iter()
                .copied()
                .filter(|&i| allowed.contains(&candidates[i].class) && !cudnn_fused.contains(&i))
                .min_by(|&a, &b| p50(&candidates[a]).total_cmp(&p50(&candidates[b])))
        };
        let best_exact = best(&[MathClass::Exact]);
        let best_fast = best(&[MathClass::Exact, MathClass::Fast]);
        free.end = free_mib(gpu)?;
        Ok(LayerResult {
            label: conv.label(),
            spec: conv.to_string(),
            seed,
            tile: tile.map(|t| t.name),
            ours,
            flops: geom.flops(conv),
            min_bytes: geom.min_bytes(),
            sets: env.arena.sets,
            candidates,
            fft: fft_tile,
            depthwise: depthwise_tile,
            fft_gemm: fft_gemm_size,
            igemm: igemm_indices,
            plans,
            fused,
            epilogue_pass,
            cudnn_fused,
            best_exact,
            best_fast,
            engine_configs,
            engine_plans,
            skipped,
            setup_s,
            timing_s: started.elapsed().as_secs_f64(),
            free_mib: free,
        })
    }
}

fn p50(c: &Candidate) -> f64 {
    c.timing.as_ref().map_or(f64::INFINITY, |t| t.p50)
}

/// Our fastest kernel (either class) on each layer of a stored result (the `--json` of an
/// earlier `bench`; its last repeat), by label: what [`LayerResult::fastest_ms`] gives now.
pub fn load_baseline(path: &std::path::Path) -> Result<Vec<(String, f64)>> {
    let io = |source| crate::Error::Io { path: path.display().to_string(), source };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let malformed = |why: &str| io(std::io::Error::other(format!("not a bench result: {why}")));
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| malformed(&e.to_string()))?;
    let rows = doc["repeats"]
        .as_array()
        .and_then(|r| r.last())
        .and_then(|r| r.as_array())
        .ok_or_else(|| malformed("no repeats"))?;
    rows.iter()
        .map(|row| {
            let label = row["label"].as_str().ok_or_else(|| malformed("a row without a label"))?;
            // Our kernels come first ([`LayerResult::convkit`]): the direct kernel, the
            // families that ran, the tensor-core variants; not the plans or fused twins.
            let families = ["depthwise", "fft", "fft_gemm"].iter().filter(|f| !row[**f].is_null()).count();
            let ours = 1 + families + row["igemm"].as_array().map_or(0, Vec::len);
            let fastest = row["candidates"]
                .as_array()
                .ok_or_else(|| malformed("a row without candidates"))?
                .iter()
                .take(ours)
                .filter_map(|c| c["timing"]["p50"].as_f64())
                .fold(f64::INFINITY, f64::min);
            Ok((label.to_owned(), fastest))
        })
        .collect()
}

/// One layer against the baseline.
#[derive(Clone, Debug)]
pub struct BaselineVerdict {
    pub label: String,
    pub baseline_ms: Option<f64>,
    pub now_ms: Option<f64>,
    pub regressed: bool,
}

impl BaselineVerdict {
    /// Relative change of our time (positive: slower).
    pub fn change(&self) -> Option<f64> {
        Some(self.now_ms? / self.baseline_ms? - 1.0)
    }

    pub fn verdict(&self) -> &'static str {
        match (self.baseline_ms, self.now_ms) {
            (None, _) => "new",
            (_, None) => "not run",
            _ if self.regressed => "SLOWER",
            _ => "ok",
        }
    }
}

/// Our times now (label, median ms) against `baseline`: regressed where slower by more than
/// `max_slowdown` (a fraction); layers only one side has are listed, never failed.
pub fn compare_baseline(now: &[(String, f64)], baseline: &[(String, f64)], max_slowdown: f64) -> Vec<BaselineVerdict> {
    let mut verdicts: Vec<BaselineVerdict> = now
        .iter()
        .map(|(label, ms)| {
            let baseline_ms = baseline.iter().find(|(l, _)| l == label).map(|(_, ms)| *ms).filter(|ms| ms.is_finite());
            let now_ms = Some(*ms).filter(|ms| ms.is_finite());
            let regressed = matches!((baseline_ms, now_ms), (Some(b), Some(n)) if n > b * (1.0 + max_slowdown));
            BaselineVerdict { label: label.clone(), baseline_ms, now_ms, regressed }
        })
        .collect();
    for (label, ms) in baseline {
        if !now.iter().any(|(l, _)| l == label) {
            verdicts.push(BaselineVerdict {
                label: label.clone(),
                baseline_ms: Some(*ms),
                now_ms: None,
                regressed: false,
            });
        }
    }
    verdicts
}
