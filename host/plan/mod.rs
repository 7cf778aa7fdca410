//! One plan for every convolution: describe the layer, get the algorithm that runs it fastest
//! among convkit's kernels and cuDNN's, and run it many times.
//!
//! ```no_run
//! # fn main() -> convkit::Result<()> {
//! use convkit::{Conv2d, Gpu, plan::{PlanOptions, Planner}};
//! let gpu = Gpu::new(0)?;
//! let planner = Planner::new(&gpu)?; // loads the plan cache (see [`cache`])
//! let conv: Conv2d = "n=32,c=128,h=56,w=56,k=128,r=31,s=31,pad=15,groups=128".parse()?;
//! let geom = conv.geometry()?;
//! let (x, w) = (gpu.alloc::<f32>(geom.x_len)?, gpu.alloc::<f32>(geom.w_len)?);
//! let mut y = gpu.alloc::<f32>(geom.y_len)?;
//! let plan = planner.plan(gpu.stream(), &conv, &PlanOptions::default(), &w)?;
//! let mut workspace = gpu.alloc::<u8>(plan.workspace_bytes().max(1))?;
//! plan.forward(&x, &mut y, &mut workspace)?; // again after `plan.set_weights(&w)` when w changes
//! # Ok(()) }
//! ```
//!
//! A [`Planner`] decides ([`Planner::choose`]): from its cache (in memory, loaded from the
//! persistent cache file, [`cache`], when the planner is made), else by [`heuristic`] rules
//! (the default, no GPU work) or by timing the candidates ([`find`], with [`Mode::Find`]),
//! whose result it writes to the file. A [`Plan`] is the decision made runnable: it holds the layer's weights in the form its
//! algorithm reads them (a copy, or the FFT convolutions' filter spectra).

pub mod cache;
pub mod find;
pub mod heuristic;

use crate::{
    Conv2d, ConvGeometry, Error, Gpu, Result,
    conv::{
        Algorithm,
        cudnn::{
            MathClass,
            engines::{ALL_HEURISTICS, EngineConv, EnginePlan, HeurMode},
            legacy::{LegacyChoice, LegacyConv},
        },
        depthwise, direct,
        epilogue::{self, Epilogue, EpilogueArgs},
        fft::{self, FftConvPlan},
        fft_gemm::{self, FftGemmPlan},
        igemm::{self, IgemmPlan},
    },
    error::Context,
};
use cache::{CacheEntry, CacheFile, DeviceKey};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kernels_gpu::conv::{depthwise::DepthwiseTile, direct::DirectTile};
use std::{
    collections::HashMap,
    rc::Rc,
    sync::{Arc, Mutex},
};

/// How a [`Planner`] decides when no cache holds the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Rules fitted to measurements ([`heuristic`]): no GPU work, a few microseconds.
    Heuristic,
    /// Time the candidates on the GPU ([`find`]) and remember the result in the cache file.
    Find,
}

/// What a caller asks of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOptions {
    /// `Exact` runs f32 arithmetic only; `Fast` also allows TF32 tensor-core kernels (what
    /// PyTorch allows for convolutions by default).
    pub math: MathClass,
    pub mode: Mode,
    /// Bytes of workspace a plan may need; `None`: a quarter of the GPU's free memory (when
    /// the [`Planner`] was made).
    pub workspace_limit: Option<usize>,
    /// Find: among candidates within 10% of the fastest, take the one that needs the least
    /// workspace (on by default).
    pub prefer_less_workspace: bool,
    /// What the plan applies to its outputs ([`Plan::forward_fused`]). The algorithm is chosen
    /// for the plain convolution; convkit's direct, depthwise and tensor-core kernels fuse the
    /// epilogue, the others are followed by it as a pass of its own (in place; a shuffling
    /// epilogue needs a fusing kernel, so the plan falls back to one).
    pub epilogue: Epilogue,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            math: MathClass::Exact,
            mode: Mode::Heuristic,
            workspace_limit: None,
            prefer_less_workspace: true,
            epilogue: Epilogue::NONE,
        }
    }
}

/// Where a [`Choice`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Heuristic,
    Find,
    /// The persistent cache (a Find of an earlier run).
    CacheFile,
}

/// A planner's decision for one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub algorithm: Algorithm,
    /// Workspace bytes the algorithm needs (for `CudnnHeuristic`: known once built, 0 here).
    pub workspace: usize,
    pub origin: Origin,
    /// Why, in a sentence.
    pub reason: String,
    /// Find's median time, where it timed the choice.
    pub time_ms: Option<f64>,
}

/// Decides and builds plans on one GPU; shareable between threads (one search per layer at a
/// time; a second caller for the same layer waits for the first's result).
pub struct Planner<'g> {
    gpu: &'g Gpu,
    device: DeviceKey,
    file: Mutex<CacheFile>,
    memory: Mutex<HashMap<String, Choice>>,
    /// A quarter of the free memory when the planner was made: the default workspace limit.
    default_limit: usize,
    searches: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl<'g> Planner<'g> {
    /// A planner with the cache file at [`cache::default_path`] (none where it has none).
    pub fn new(gpu: &'g Gpu) -> Result<Self> {
        Self::with_cache_file(gpu, cache::default_path())
    }

    /// A planner whose persistent cache is `path` (`None`: in memory only). A file that cannot
    /// be read as a current plan cache is ignored with one warning on stderr.
    pub fn with_cache_file(gpu: &'g Gpu, path: Option<std::path::PathBuf>) -> Result<Self> {
        let device = DeviceKey::of(gpu)?;
        let file = CacheFile::open(path);
        if let Some(warning) = file.warning() {
            eprintln!("convkit: warning: {warning}");
        }
        // This device's entries go to memory now: a decision from the file is then a lookup.
        let memory = file
            .entries()
            .iter()
            .filter(|e| e.device == device)
            .filter_map(|e| Some((e.layer.clone(), e.choice()?)))
            .collect();
        Ok(Planner {
            gpu,
            device,
            default_limit: gpu.free_memory()? / 4,
            file: Mutex::new(file),
            memory: Mutex::new(memory),
            searches: Mutex::default(),
        })
    }

    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// The versions a cache entry must match.
    pub fn device(&self) -> &DeviceKey {
        &self.device
    }

    /// The cache file, if the planner has one.
    pub fn cache_path(&self) -> Option<std::path::PathBuf> {
        lock(&self.file).path().map(|p| p.to_path_buf())
    }

    /// Why the cache file was ignored, if it was.
    pub fn cache_warning(&self) -> Option<String> {
        lock(&self.file).warning().map(str::to_owned)
    }

    /// The workspace limit `opts` implies: the caller's, else a quarter of the memory that was
    /// free when the planner was made.
    pub fn workspace_limit(&self, opts: &PlanOptions) -> usize {
        opts.workspace_limit.unwrap_or(self.default_limit)
    }

    /// The decision for `conv` under `opts` (see the module's documentation for the order).
    pub fn choose(&self, conv: &Conv2d, opts: &PlanOptions) -> Result<Choice> {
        let geom = conv.geometry()?;
        let limit = self.workspace_limit(opts);
        let key = cache::layer_key(conv, opts.math, &opts.epilogue);
        let usable =
            |c: &Choice| c.workspace <= limit && (opts.mode == Mode::Heuristic || c.origin != Origin::Heuristic);
        if let Some(choice) = lock(&self.memory).get(&key).filter(|c| usable(c)) {
            return Ok(choice.clone());
        }
        // Entries other processes wrote, merged in when this planner last wrote the file.
        let stored = lock(&self.file).get(&self.device, &key).and_then(|e| e.choice());
        if let Some(choice) = stored.filter(|c| c.workspace <= limit) {
            lock(&self.memory).insert(key.clone(), choice.clone());
            return Ok(choice);
        }
        match opts.mode {
            Mode::Heuristic => {
                let choice = heuristic::choose(self.gpu.sm_count(), conv, &geom, opts.math, limit);
                lock(&self.memory).insert(key, choice.clone());
                Ok(choice)
            }
            Mode::Find => {
                // One search per layer: later callers wait here, then find the result cached.
                let gate = lock(&self.searches).entry(key.clone()).or_default().clone();
                let _searching = lock(&gate);
                if let Some(choice) = lock(&self.memory).get(&key).filter(|c| usable(c)) {
                    return Ok(choice.clone());
                }
                // `find` caches its choice in memory and in the file.
                Ok(self.find(conv, opts, &find::QUICK, &[], None)?.choice)
            }
        }
    }

    /// Times the candidates for `conv` now (whatever the caches hold) with `effort`, `must`
    /// among the finalists, the screening of `screened` reused (see [`find::search`]), and
    /// remembers the choice in both caches.
    pub fn find(
        &self,
        conv: &Conv2d,
        opts: &PlanOptions,
        effort: &find::Effort,
        must: &[Algorithm],
        screened: Option<&find::FindReport>,
    ) -> Result<find::FindReport> {
        let limit = self.workspace_limit(opts);
        let report = find::search(self, conv, opts, limit, effort, must, screened)?;
        let key = cache::layer_key(conv, opts.math, &opts.epilogue);
        let entry = CacheEntry::new(&self.device, &key, &report.choice);
        if let Err(e) = lock(&self.file).insert(entry) {
            eprintln!("convkit: warning: the plan cache was not written: {e}");
        }
        lock(&self.memory).insert(key, report.choice.clone());
        Ok(report)
    }

    /// Decides (as [`Self::choose`]) and builds the plan with weights `w` on `stream`. A choice
    /// that does not build (a cached cuDNN engine this cuDNN no longer proposes, a cuDNN
    /// algorithm that needs more workspace than allowed) gives way to the heuristic's choice,
    /// then to the direct kernel; a cache entry that failed so is dropped.
    pub fn plan(
        &self,
        stream: &Arc<CudaStream>,
        conv: &Conv2d,
        opts: &PlanOptions,
        w: &impl DevicePtr<f32>,
    ) -> Result<Plan<'g>> {
        let choice = self.choose(conv, opts)?;
        let limit = self.workspace_limit(opts);
        let build = |algorithm: &Algorithm| {
            Plan::new(self.gpu, stream, conv, algorithm, w, limit).and_then(|p| p.with_epilogue(opts.epilogue))
        };
        let first = match build(&choice.algorithm) {
            Ok(plan) => return Ok(plan),
            Err(e) => e,
        };
        let key = cache::layer_key(conv, opts.math, &opts.epilogue);
        if choice.origin != Origin::Heuristic {
            lock(&self.file).remove(&self.device, &key);
            eprintln!("convkit: warning: cached plan {} no longer builds ({first}); deciding again", choice.algorithm);
        }
        let geom = conv.geometry()?;
        let sms = self.gpu.sm_count();
        for alternative in
            [heuristic::choose(sms, conv, &geom, opts.math, limit), heuristic::fallback(sms, conv, &geom)]
        {
            if alternative.algorithm == choice.algorithm {
                continue;
            }
            if let Ok(plan) = build(&alternative.algorithm) {
                lock(&self.memory).insert(key, alternative);
                return Ok(plan);
            }
        }
        Err(first)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How a plan runs, with what it holds.
enum Runner<'g> {
    Direct { tile: DirectTile, w: CudaSlice<f32> },
    Depthwise { tile: DepthwiseTile, w: CudaSlice<f32> },
    Fft(FftConvPlan),
    FftGemm(FftGemmPlan),
    Igemm(IgemmPlan),
    Engine { graph: Rc<EngineConv<'g>>, plan: EnginePlan, w: CudaSlice<f32> },
    Legacy { conv: Rc<LegacyConv<'g>>, choice: LegacyChoice, w: CudaSlice<f32> },
}

/// A cuDNN candidate already built: Find builds many from one graph or descriptor set.
pub(crate) enum Built<'g> {
    Engine(Rc<EngineConv<'g>>, EnginePlan),
    Legacy(Rc<LegacyConv<'g>>, LegacyChoice),
}

/// A convolution ready to run on one stream: the algorithm, and the layer's weights in the form
/// it reads them.
pub struct Plan<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    conv: Conv2d,
    geom: ConvGeometry,
    algorithm: Algorithm,
    class: MathClass,
    workspace: usize,
    runner: Runner<'g>,
    epilogue: Epilogue,
}

impl<'g> Plan<'g> {
    /// Builds `algorithm` for `conv` on `stream` with weights `w`; fails if it needs more than
    /// `workspace_limit` bytes of workspace or cannot compute the layer.
    pub fn new(
        gpu: &'g Gpu,
        stream: &Arc<CudaStream>,
        conv: &Conv2d,
        algorithm: &Algorithm,
        w: &impl DevicePtr<f32>,
        workspace_limit: usize,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        gpu.check_stream(stream)?;
        if w.len() != geom.w_len {
            return Err(Error::BufferSize { buffer: "w", expected: geom.w_len, got: w.len() });
        }
        let plan = |algorithm: &Algorithm, class, workspace, runner| Plan {
            gpu,
            stream: stream.clone(),
            conv: conv.clone(),
            geom,
            algorithm: algorithm.clone(),
            class,
            workspace,
            runner,
            epilogue: Epilogue::NONE,
        };
        match algorithm {
            Algorithm::Direct(name) => {
                let tile = *direct::variants().iter().find(|t| t.name == *name).ok_or_else(|| unknown(algorithm))?;
                if let Some(reason) = direct::unsupported(conv, &tile) {
                    return Err(Error::UnsupportedTile { tile: tile.name, reason });
                }
                let w = copy_weights(gpu, stream, w)?;
                Ok(plan(algorithm, MathClass::Exact, 0, Runner::Direct { tile, w }))
            }
            Algorithm::Depthwise(name) => {
                let tile = *depthwise::variants().iter().find(|t| t.name == *name).ok_or_else(|| unknown(algorithm))?;
                if let Some(reason) = depthwise::unsupported(conv, &tile) {
                    return Err(Error::UnsupportedTile { tile: tile.name, reason });
                }
                let w = copy_weights(gpu, stream, w)?;
                Ok(plan(algorithm, MathClass::Exact, 0, Runner::Depthwise { tile, w }))
            }
            Algorithm::Fft(name) => {
                let tile = *fft::variants().iter().find(|t| t.name == *name).ok_or_else(|| unknown(algorithm))?;
                let fft = FftConvPlan::with_tile(gpu, stream, conv, &tile, w)?;
                Ok(plan(algorithm, MathClass::Exact, 0, Runner::Fft(fft)))
            }
            Algorithm::FftGemm(name) => {
                let size = fft_gemm::sizes().iter().find(|s| s.name == *name).ok_or_else(|| unknown(algorithm))?;
                let shape = fft_gemm::shape(conv, &geom, size)
                    .map_err(|reason| Error::Unsupported { algorithm: "fft-gemm", reason })?;
                if shape.workspace_bytes() > workspace_limit {
                    return Err(Error::WorkspaceTooSmall { needed: shape.workspace_bytes(), given: workspace_limit });
                }
                let fft = FftGemmPlan::with_shape(gpu, stream, conv, shape, w)?;
                Ok(plan(algorithm, MathClass::Exact, shape.workspace_bytes(), Runner::FftGemm(fft)))
            }
            Algorithm::Igemm(name) => {
                let tile = igemm::variants().iter().find(|t| t.name == *name).ok_or_else(|| unknown(algorithm))?;
                let packed = IgemmPlan::new(gpu, stream, conv, tile, w)?;
                Ok(plan(algorithm, igemm::class(tile.precision), 0, Runner::Igemm(packed)))
            }
            Algorithm::CudnnEngine(_) | Algorithm::CudnnHeuristic(_) => {
                let graph = Rc::new(EngineConv::new(gpu, stream, conv)?);
                let built = build_engine(&graph, algorithm, workspace_limit)?;
                Self::from_cudnn(gpu, stream, conv, Built::Engine(graph, built), w)
            }
            Algorithm::CudnnLegacy(algo, math) => {
                let legacy = LegacyConv::new(gpu, stream, conv)?;
                let choice = legacy
                    .heuristic(*math)?
                    .into_iter()
                    .find(|c| c.algo == *algo)
                    .ok_or_else(|| Error::CudnnUnsupported(format!("{algorithm} cannot compute this layer")))?;
                if choice.workspace > workspace_limit {
                    return Err(Error::WorkspaceTooSmall { needed: choice.workspace, given: workspace_limit });
                }
                Self::from_cudnn(gpu, stream, conv, Built::Legacy(Rc::new(legacy), choice), w)
            }
        }
    }

    /// The plan of a cuDNN candidate built elsewhere (on `stream`'s graph), with weights `w`.
    pub(crate) fn from_cudnn(
        gpu: &'g Gpu,
        stream: &Arc<CudaStream>,
        conv: &Conv2d,
        built: Built<'g>,
        w: &impl DevicePtr<f32>,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        let w = copy_weights(gpu, stream, w)?;
        let (algorithm, class, workspace, runner) = match built {
            Built::Engine(graph, plan) => {
                let algorithm = Algorithm::CudnnEngine(plan.tag());
                (algorithm, plan.class(), plan.workspace, Runner::Engine { graph, plan, w })
            }
            Built::Legacy(conv, choice) => {
                let algorithm = Algorithm::CudnnLegacy(choice.algo, choice.math);
                (algorithm, choice.math.class(), choice.workspace, Runner::Legacy { conv, choice, w })
            }
        };
        let epilogue = Epilogue::NONE;
        Ok(Plan {
            gpu,
            stream: stream.clone(),
            conv: conv.clone(),
            geom,
            algorithm,
            class,
            workspace,
            runner,
            epilogue,
        })
    }

    /// The plan with `epilogue` applied by [`Self::forward_fused`]: fused by convkit's direct,
    /// depthwise and tensor-core kernels, as a pass after the others (which cannot shuffle).
    pub fn with_epilogue(mut self, epilogue: Epilogue) -> Result<Self> {
        if epilogue.shuffle && !self.fuses_epilogue() {
            return Err(Error::Unsupported {
                algorithm: "epilogue",
                reason: format!(
                    "{} cannot store shuffled channels (only convkit's direct-style kernels do)",
                    self.algorithm
                ),
            });
        }
        self.epilogue = epilogue;
        Ok(self)
    }

    pub fn epilogue(&self) -> &Epilogue {
        &self.epilogue
    }

    /// Whether the kernel applies the epilogue in its stores (else a pass follows it).
    pub fn fuses_epilogue(&self) -> bool {
        matches!(self.runner, Runner::Direct { .. } | Runner::Depthwise { .. } | Runner::Igemm(_))
    }

    /// The algorithm it runs (a cuDNN heuristic pick resolved to its engine configuration).
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    pub fn class(&self) -> MathClass {
        self.class
    }

    pub fn conv(&self) -> &Conv2d {
        &self.conv
    }

    /// Bytes of workspace [`Self::forward`] needs.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace
    }

    /// Device memory the plan itself holds (weights or their spectra, tables).
    pub fn plan_bytes(&self) -> usize {
        match &self.runner {
            Runner::Fft(p) => p.plan_bytes(),
            Runner::FftGemm(p) => p.plan_bytes(),
            Runner::Igemm(p) => p.plan_bytes(),
            Runner::Direct { w, .. }
            | Runner::Depthwise { w, .. }
            | Runner::Engine { w, .. }
            | Runner::Legacy { w, .. } => w.len() * 4,
        }
    }

    /// New weights `w` (`[K, C/G, R, S]`): copied, or transformed into the plan's spectra.
    pub fn set_weights(&mut self, w: &impl DevicePtr<f32>) -> Result<()> {
        if w.len() != self.geom.w_len {
            return Err(Error::BufferSize { buffer: "w", expected: self.geom.w_len, got: w.len() });
        }
        self.gpu.check_buffer("w", w)?;
        let stream = &self.stream;
        match &mut self.runner {
            Runner::Fft(p) => p.set_weights(self.gpu, stream, w),
            Runner::FftGemm(p) => p.set_weights(self.gpu, stream, w),
            Runner::Igemm(p) => p.set_weights(self.gpu, stream, w),
            Runner::Direct { w: own, .. }
            | Runner::Depthwise { w: own, .. }
            | Runner::Engine { w: own, .. }
            | Runner::Legacy { w: own, .. } => stream.memcpy_dtod(w, own).during("cuMemcpyDtoDAsync"),
        }
    }

    /// `y = conv(x, w)` on the plan's stream with the weights it holds. `x` and `y` are NCHW,
    /// f32, exactly the layer's sizes; `workspace` holds at least [`Self::workspace_bytes`]
    /// (any buffer, one byte will do, where that is 0).
    pub fn forward(
        &self,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut CudaSlice<u8>,
    ) -> Result<()> {
        self.forward_fused(x, y, workspace, None, None)
    }

    /// `y = epilogue(conv(x, w))` with the plan's epilogue ([`Self::with_epilogue`]): `bias`
    /// (K floats) exactly where it has a bias, `residual` (the output's size, in its layout)
    /// exactly where it has a residual. Otherwise as [`Self::forward`].
    pub fn forward_fused(
        &self,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut CudaSlice<u8>,
        bias: Option<&CudaSlice<f32>>,
        residual: Option<&CudaSlice<f32>>,
    ) -> Result<()> {
        if workspace.len() < self.workspace {
            return Err(Error::WorkspaceTooSmall { needed: self.workspace, given: workspace.len() });
        }
        let (gpu, stream, conv) = (self.gpu, &self.stream, &self.conv);
        let args = EpilogueArgs { epilogue: self.epilogue, bias, residual };
        args.check(gpu, conv, &self.geom)?;
        match &self.runner {
            Runner::Direct { tile, w } => return direct::forward_fused(gpu, stream, conv, tile, x, w, y, &args),
            Runner::Depthwise { tile, w } => return depthwise::forward_fused(gpu, stream, conv, tile, x, w, y, &args),
            Runner::Igemm(p) => return p.forward_fused(gpu, stream, x, y, &args),
            Runner::Fft(p) => p.forward(gpu, stream, x, y),
            Runner::FftGemm(p) => p.forward(gpu, stream, x, y, workspace),
            Runner::Engine { graph, plan, w } => graph.execute(plan, x, w, y, workspace),
            Runner::Legacy { conv, choice, w } => conv.forward(choice, x, w, y, workspace),
        }?;
        // `with_epilogue` admits no shuffle here: the pass runs in place.
        epilogue::apply_pass(gpu, stream, conv, &args, y, None)
    }
}

/// A copy of the weights the plan owns.
fn copy_weights(gpu: &Gpu, stream: &Arc<CudaStream>, w: &impl DevicePtr<f32>) -> Result<CudaSlice<f32>> {
    gpu.check_buffer("w", w)?;
    let mut owned = gpu.alloc::<f32>(w.len())?;
    stream.memcpy_dtod(w, &mut owned).during("cuMemcpyDtoDAsync")?;
    Ok(owned)
}

fn unknown(algorithm: &Algorithm) -> Error {
    Error::invalid("algorithm", format!("{algorithm} is not an algorithm of this build"))
}

/// The execution plan of an engine configuration (by tag), or of the first configuration of a
/// class cuDNN's heuristics propose that builds within `workspace_limit`.
pub(crate) fn build_engine(graph: &EngineConv, algorithm: &Algorithm, workspace_limit: usize) -> Result<EnginePlan> {
    let (modes, wanted): (&[HeurMode], _) = match algorithm {
        Algorithm::CudnnHeuristic(class) => (&[HeurMode::CUDNN_HEUR_MODE_A], Err(*class)),
        Algorithm::CudnnEngine(tag) => (&ALL_HEURISTICS, Ok(tag.as_str())),
        _ => unreachable!("build_engine takes cuDNN engine algorithms"),
    };
    let (configs, _failed_modes) = graph.configs(modes);
    let mut last = None;
    for config in configs {
        let matches = match wanted {
            Ok(tag) => config.tag() == tag,
            Err(MathClass::Exact) => config.class() == MathClass::Exact,
            Err(MathClass::Fast) => true,
        };
        if !matches {
            continue;
        }
        match graph.build(config) {
            Ok(plan) if plan.workspace <= workspace_limit => return Ok(plan),
            Ok(plan) => last = Some(Error::WorkspaceTooSmall { needed: plan.workspace, given: workspace_limit }),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::CudnnUnsupported(format!("cuDNN's heuristics propose no {algorithm} for this layer"))
    }))
}
