//! `convkit check`: every direct-, depthwise- and tensor-core-kernel variant that supports a shape
//! (the tensor-core ones to their precision's bound), and the fused FFT convolution where it
//! computes the shape (its smallest transform and the next), element by element against the f64
//! reference on the GPU (itself checked against the CPU reference on small shapes), and cuDNN
//! against the same reference, on fresh random inputs with NaN-poisoned outputs. Some cases put
//! NaN and ±∞ into the input: they must come out exactly where the reference has them (the FFT
//! path, which spreads a NaN over the whole image, and the tensor-core kernels skip those).

use super::reference::{self, GpuReference, Reference, host_uniform};
use crate::{
    Conv2d, Gpu, Result,
    conv::{
        Algorithm,
        cudnn::{
            self, MathClass,
            legacy::{LegacyConv, Math},
        },
        depthwise, direct,
        epilogue::{self, Activation, Epilogue, EpilogueArgs},
        fft,
        fft_gemm::{self, FftGemmPlan},
        igemm,
    },
    error::Context,
    plan::Plan,
};
use cudarc::driver::{CudaSlice, CudaStream};
use kernels_gpu::{
    random::mix,
    verify::{CompareStats, Tolerance},
};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use std::sync::Arc;

/// cuDNN's exact-class algorithms (FFT and Winograd among them) against the f64 reference:
/// a sanity bound, far looser than ours.
pub const CUDNN_EXACT: Tolerance = Tolerance { tol: 1e-4, floor: 1e-5 };
/// TF32 (10-bit mantissa inputs) against the f64 reference: catches garbage, not rounding.
pub const CUDNN_FAST: Tolerance = Tolerance { tol: 1e-2, floor: 1e-4 };

/// The bound a plan's output is held to: the strict f32 one for the direct kernels, the FFT
/// paths' (`fft`, which needs the inputs) for theirs, the tensor-core kernel's precision's for
/// it, cuDNN's class bound for cuDNN's.
pub fn plan_tolerance(plan: &Plan, taps: u64, fft: impl FnOnce() -> Result<Tolerance>) -> Result<Tolerance> {
    Ok(match plan.algorithm() {
        Algorithm::Direct(_) | Algorithm::Depthwise(_) => Tolerance::f32_sum(taps),
        Algorithm::Fft(_) | Algorithm::FftGemm(_) => fft()?,
        Algorithm::Igemm(name) => {
            let tile = igemm::variants().iter().find(|t| t.name == *name).expect("a plan's variant is of this build");
            igemm::tolerance(plan.conv(), &plan.conv().geometry()?, tile)
        }
        _ if plan.class() == MathClass::Exact => CUDNN_EXACT,
        _ => CUDNN_FAST,
    })
}

/// Device memory a checked FFT plan may hold for its filters' spectra.
const PLAN_LIMIT: usize = 1 << 30;

/// One shape to check.
#[derive(Clone, Debug)]
pub struct Case {
    pub conv: Conv2d,
    /// The row of the summary it counts in.
    pub kind: String,
    /// Put NaN, +∞ and -∞ into the input.
    pub nonfinite: bool,
    /// Applied to every variant's outputs: fused by the direct-style kernels, as a pass of its
    /// own after the FFT paths. cuDNN runs the plain convolution.
    pub epilogue: Epilogue,
}

impl Case {
    pub fn new(conv: Conv2d) -> Self {
        let label = conv.label();
        let kind = label.split('#').next().unwrap_or(&label).to_owned();
        Case { conv, kind, nonfinite: false, epilogue: Epilogue::NONE }
    }
}

/// Half the time none; else a bias, a residual and the shuffle each with probability 1/2 and
/// any activation.
pub fn random_epilogue(rng: &mut SmallRng) -> Epilogue {
    if rng.random_bool(0.5) {
        return Epilogue::NONE;
    }
    Epilogue {
        bias: rng.random_bool(0.5),
        activation: Activation::ALL[rng.random_range(0..Activation::ALL.len())],
        residual: rng.random_bool(0.5),
        shuffle: rng.random_bool(0.5),
    }
}

/// A family of our kernels, as `check --families` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Direct,
    Depthwise,
    Igemm,
    /// The fused FFT convolution of depthwise layers.
    Fft,
    /// The tiled FFT convolution (its per-frequency cgemm included).
    FftGemm,
}

impl Family {
    pub const ALL: [Family; 5] = [Family::Direct, Family::Depthwise, Family::Igemm, Family::Fft, Family::FftGemm];

    /// The name of [`crate::conv::Algorithm::family`].
    pub fn name(self) -> &'static str {
        match self {
            Family::Direct => "direct",
            Family::Depthwise => "depthwise",
            Family::Igemm => "igemm",
            Family::Fft => "fft",
            Family::FftGemm => "fft-gemm",
        }
    }
}

impl std::str::FromStr for Family {
    type Err = String;

    fn from_str(name: &str) -> std::result::Result<Self, String> {
        Family::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            let names: Vec<_> = Family::ALL.iter().map(|f| f.name()).collect();
            format!("no kernel family `{name}`; there are {}", names.join(", "))
        })
    }
}

/// One of our variants on one case.
#[derive(Clone, Debug)]
pub struct VariantResult {
    pub tile: &'static str,
    /// The bound it was held to (the FFT path's differs from the direct kernel's).
    pub bound: Tolerance,
    pub stats: CompareStats,
}

/// cuDNN on one case: the algorithm, and its comparison or why it could not run.
#[derive(Clone, Debug)]
pub struct CudnnResult {
    pub algo: String,
    pub outcome: std::result::Result<CompareStats, String>,
    /// Whether a failure to run is cuDNN not supporting the shape (reported, not failed).
    pub unsupported: bool,
}

/// What one case gave.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub case: Case,
    pub bound: Tolerance,
    pub variants: Vec<VariantResult>,
    pub cudnn: Option<CudnnResult>,
    /// Whether the GPU reference equals the CPU reference to the bit (small shapes only).
    pub gpu_reference_exact: Option<bool>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.variants.iter().all(|v| v.stats.passed())
            && self.gpu_reference_exact != Some(false)
            && self.cudnn.as_ref().is_none_or(|c| match &c.outcome {
                Ok(stats) => stats.passed(),
                Err(_) => c.unsupported,
            })
    }

    /// The worst error of our variants, as a fraction of the bound (≤ 1 passes).
    pub fn worst_ratio(&self) -> f64 {
        self.variants.iter().map(|v| v.stats.worst_ratio()).fold(0.0, f64::max)
    }
}

/// Checks shapes on one GPU, reusing its workspace.
pub struct Checker<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    workspace: CudaSlice<u8>,
    /// Also run the CPU reference on shapes of at most this many FLOPs.
    pub cpu_max_flops: f64,
    /// The families whose variants run (all by default); the references and cuDNN always do.
    pub families: Vec<Family>,
}

impl<'g> Checker<'g> {
    pub fn new(gpu: &'g Gpu, workspace_bytes: usize, cpu_max_flops: f64) -> Result<Self> {
        let workspace = gpu.alloc::<u8>(workspace_bytes)?;
        Ok(Checker { gpu, stream: gpu.stream().clone(), workspace, cpu_max_flops, families: Family::ALL.to_vec() })
    }

    /// Checks one case; `seed` draws its inputs.
    pub fn check(&mut self, case: &Case, seed: u64) -> Result<CaseResult> {
        let (gpu, stream) = (self.gpu, &self.stream);
        let conv = &case.conv;
        let geom = conv.geometry()?;
        let mut x = gpu.alloc::<f32>(geom.x_len)?;
        let mut w = gpu.alloc::<f32>(geom.w_len)?;
        gpu.fill_uniform(stream, &mut x, mix(seed, 1))?;
        gpu.fill_uniform(stream, &mut w, mix(seed, 2))?;
        if case.nonfinite {
            plant_nonfinite(gpu, &mut x, mix(seed, 3))?;
        }
        let truth = reference::gpu_reference(gpu, stream, conv, &x, &w)?;

        let gpu_reference_exact = if geom.flops(conv) <= self.cpu_max_flops {
            let cpu = reference::cpu_reference(conv, &gpu.download(&x)?, &gpu.download(&w)?)?;
            Some(same_bits(&cpu, &truth, gpu)?)
        } else {
            None
        };

        // The epilogue's inputs, and the reference followed by the epilogue in f64.
        let bias = case.epilogue.bias.then(|| host_uniform(mix(seed, 4), conv.k));
        let residual = case.epilogue.residual.then(|| host_uniform(mix(seed, 5), geom.y_len));
        let bias_gpu = bias.as_deref().map(|b| gpu.upload(b)).transpose()?;
        let residual_gpu = residual.as_deref().map(|r| gpu.upload(r)).transpose()?;
        let epilogue =
            EpilogueArgs { epilogue: case.epilogue, bias: bias_gpu.as_ref(), residual: residual_gpu.as_ref() };
        let finished = if case.epilogue.is_none() {
            None
        } else {
            let plain = truth.download(gpu)?;
            let finished =
                reference::with_epilogue(conv, &case.epilogue, &plain, bias.as_deref(), residual.as_deref())?;
            Some(GpuReference::upload(gpu, &finished)?)
        };
        let target = finished.as_ref().unwrap_or(&truth);

        let bound = Tolerance::f32_sum(geom.taps(conv) as u64);
        let mut y = gpu.alloc::<f32>(geom.y_len)?;
        let mut variants = Vec::new();
        let runs = |family| self.families.contains(&family);
        for tile in direct::supporting_variants(conv).filter(|_| runs(Family::Direct)) {
            gpu.poison(&mut y)?;
            direct::forward_fused(gpu, stream, conv, tile, &x, &w, &mut y, &epilogue)?;
            let stats = reference::compare(gpu, stream, &y, target, bound)?;
            variants.push(VariantResult { tile: tile.name, bound, stats });
        }
        for tile in depthwise::supporting_variants(conv).filter(|_| runs(Family::Depthwise)) {
            gpu.poison(&mut y)?;
            depthwise::forward_fused(gpu, stream, conv, tile, &x, &w, &mut y, &epilogue)?;
            let stats = reference::compare(gpu, stream, &y, target, bound)?;
            variants.push(VariantResult { tile: tile.name, bound, stats });
        }
        // The tensor-core variants, each to its precision's bound; non-finite inputs spread
        // to other groups there (see `igemm`), so those cases leave them out.
        if !case.nonfinite && runs(Family::Igemm) {
            for tile in igemm::supporting_variants(gpu, conv, &geom) {
                let bound = igemm::tolerance(conv, &geom, tile);
                gpu.poison(&mut y)?;
                igemm::forward_fused(gpu, stream, conv, tile, &x, &w, &mut y, &epilogue)?;
                let stats = reference::compare(gpu, stream, &y, target, bound)?;
                variants.push(VariantResult { tile: tile.name, bound, stats });
            }
        }
        if !case.nonfinite && (runs(Family::Fft) || runs(Family::FftGemm)) {
            let scale = reference::fft_error_scale(&gpu.download(&x)?, &gpu.download(&w)?, conv.k);
            let bound = Tolerance::fft(geom.taps(conv) as u64, scale);
            let fft_tiles =
                fft::variants().iter().filter(|t| runs(Family::Fft) && fft::unsupported(conv, &geom, t).is_none());
            for tile in fft_tiles.take(2) {
                let plan = fft::FftConvPlan::with_tile(gpu, stream, conv, tile, &w)?;
                gpu.poison(&mut y)?;
                plan.forward(gpu, stream, &x, &mut y)?;
                let shuffled = epilogue_pass(gpu, stream, conv, &epilogue, &mut y)?;
                let stats = reference::compare(gpu, stream, shuffled.as_ref().unwrap_or(&y), target, bound)?;
                variants.push(VariantResult { tile: tile.name, bound, stats });
            }
            // The tiled path: the chosen tiling, and the smallest transform (the most tiles).
            let chosen = fft_gemm::choose(conv, &geom, PLAN_LIMIT, self.workspace.len()).ok();
            let smallest = fft_gemm::sizes().iter().find_map(|size| {
                fft_gemm::shape(conv, &geom, size).ok().filter(|s| s.workspace_bytes() <= self.workspace.len())
            });
            let mut shapes: Vec<_> = chosen.into_iter().chain(smallest).filter(|_| runs(Family::FftGemm)).collect();
            shapes.dedup();
            for shape in shapes.into_iter().filter(|s| s.plan_bytes() <= PLAN_LIMIT) {
                let plan = FftGemmPlan::with_shape(gpu, stream, conv, shape, &w)?;
                gpu.poison(&mut y)?;
                plan.forward(gpu, stream, &x, &mut y, &mut self.workspace)?;
                let shuffled = epilogue_pass(gpu, stream, conv, &epilogue, &mut y)?;
                let stats = reference::compare(gpu, stream, shuffled.as_ref().unwrap_or(&y), target, bound)?;
                variants.push(VariantResult { tile: shape.size.name, bound, stats });
            }
        }

        // cuDNN's FFT and Winograd smear a NaN over whole tiles: compare it on finite inputs.
        let cudnn = if case.nonfinite { None } else { Some(self.cudnn(conv, &x, &w, &mut y, &truth)?) };
        Ok(CaseResult { case: case.clone(), bound, variants, cudnn, gpu_reference_exact })
    }

    /// cuDNN's first heuristic choice in FMA math that fits the workspace, against the reference.
    fn cudnn(
        &mut self,
        conv: &Conv2d,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        truth: &GpuReference,
    ) -> Result<CudnnResult> {
        let (gpu, stream) = (self.gpu, &self.stream);
        let run = |workspace: &mut CudaSlice<u8>, y: &mut CudaSlice<f32>| -> Result<(String, CompareStats)> {
            let legacy = LegacyConv::new(gpu, stream, conv)?;
            let choice = legacy
                .heuristic(Math::Fma)?
                .into_iter()
                .find(|c| c.workspace <= workspace.len())
                .ok_or_else(|| crate::Error::CudnnUnsupported("no FMA algorithm fits the workspace".into()))?;
            gpu.poison(y)?;
            legacy.forward(&choice, x, w, y, workspace)?;
            Ok((choice.name(), reference::compare(gpu, stream, y, truth, CUDNN_EXACT)?))
        };
        Ok(match run(&mut self.workspace, y) {
            Ok((algo, stats)) => CudnnResult { algo, outcome: Ok(stats), unsupported: false },
            Err(e) => {
                CudnnResult { algo: "-".into(), unsupported: cudnn::is_unsupported(&e), outcome: Err(e.to_string()) }
            }
        })
    }
}

/// `y` through the stand-alone epilogue pass: in place, or (returned) into a new buffer where
/// the epilogue shuffles.
fn epilogue_pass(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    args: &EpilogueArgs,
    y: &mut CudaSlice<f32>,
) -> Result<Option<CudaSlice<f32>>> {
    if !args.epilogue.shuffle {
        epilogue::apply_pass(gpu, stream, conv, args, y, None)?;
        return Ok(None);
    }
    let mut out = gpu.alloc::<f32>(y.len())?;
    gpu.poison(&mut out)?;
    epilogue::apply_pass(gpu, stream, conv, args, y, Some(&mut out))?;
    Ok(Some(out))
}

/// Whether the GPU reference equals the CPU reference bit for bit (NaN matching NaN).
fn same_bits(cpu: &Reference, gpu_ref: &GpuReference, gpu: &Gpu) -> Result<bool> {
    let value = gpu.download(&gpu_ref.value)?;
    let magnitude = gpu.download(&gpu_ref.magnitude)?;
    let same =
        |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits() || p.is_nan() && q.is_nan());
    Ok(same(&cpu.value, &value) && same(&cpu.magnitude, &magnitude))
}

/// Overwrites about one input in 200 (at least one) with NaN, +∞ or -∞.
fn plant_nonfinite(gpu: &Gpu, x: &mut CudaSlice<f32>, seed: u64) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut host = gpu.download(x)?;
    for _ in 0..(host.len() / 200).max(1) {
        let i = rng.random_range(0..host.len());
        host[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.random_range(0..3)];
    }
    gpu.stream().memcpy_htod(&host, x).during("cuMemcpyHtoD")
}

/// The kinds of layer the random sweep cycles through.
pub const CATEGORIES: &[&str] = &[
    "depthwise",
    "depthwise-tiles",
    "dense",
    "channel-multiplier",
    "grouped",
    "grouped-wide",
    "stride-2",
    "dilation-2",
    "1x1",
    "7x7",
    "45x45",
    "large-depthwise",
    "odd",
    "batch-1",
    "z-split",
    "nonfinite",
    "wide",
    "nhwc",
    "grouped-nhwc",
];

/// A random valid case of category `CATEGORIES[index % len]`, sized to check quickly.
pub fn random_case(rng: &mut SmallRng, index: usize) -> Case {
    random_case_of(rng, index, CATEGORIES)
}

/// A random valid case of category `kinds[index % len]` (names from [`CATEGORIES`]).
pub fn random_case_of(rng: &mut SmallRng, index: usize, kinds: &[&str]) -> Case {
    let category = kinds[index % kinds.len()];
    let pick = |rng: &mut SmallRng, choices: &[usize]| choices[rng.random_range(0..choices.len())];
    let mut conv = Conv2d::new(1, 1, 1, 1, 1, 1);
    conv.name = Some(format!("{category}#{index}"));
    conv.n = rng.random_range(1..=8);
    conv.h = rng.random_range(5..=40);
    conv.w = rng.random_range(5..=40);
    let odd_filter = pick(rng, &[1, 3, 5]);
    (conv.r, conv.s) = (odd_filter, odd_filter);
    let groups = pick(rng, &[1, 2, 4]);
    let (cpg, kpg) = (rng.random_range(1..=8), rng.random_range(1..=12));
    (conv.groups, conv.c, conv.k) = (groups, groups * cpg, groups * kpg);
    match category {
        "depthwise" => {
            conv.c = rng.random_range(1..=64);
            (conv.groups, conv.k) = (conv.c, conv.c);
        }
        "depthwise-tiles" => {
            // The depthwise kernel's ground: its filters, strides and multipliers, maps from
            // smaller than one tile to several tiles.
            let filter = pick(rng, &[3, 5, 7, 9]);
            (conv.r, conv.s) = (filter, filter);
            conv.stride = [pick(rng, &[1, 2]); 2];
            (conv.h, conv.w) = (rng.random_range(1..=80), rng.random_range(1..=80));
            conv.c = rng.random_range(1..=40);
            (conv.groups, conv.k) = (conv.c, conv.c * rng.random_range(1..=2));
        }
        "dense" => (conv.groups, conv.c, conv.k) = (1, rng.random_range(1..=48), rng.random_range(1..=48)),
        "channel-multiplier" => {
            conv.c = rng.random_range(1..=32);
            (conv.groups, conv.k) = (conv.c, conv.c * rng.random_range(2..=4));
        }
        "grouped" => {
            conv.groups = pick(rng, &[2, 3, 8, 16, 32]);
            (conv.c, conv.k) = (conv.groups * rng.random_range(1..=8), conv.groups * rng.random_range(1..=16));
        }
        "grouped-wide" => {
            // The tensor-core kernel's ground: ResNeXt/RegNet-like group widths (several groups
            // per block, several column tiles, ragged channel chunks), and odd ones.
            conv.groups = pick(rng, &[1, 2, 3, 4, 8, 32, 37]);
            let width = |rng: &mut SmallRng| {
                let any = rng.random_range(1..=70);
                pick(rng, &[4, 8, 20, 24, 32, 56, 64, any])
            };
            (conv.c, conv.k) = (conv.groups * width(rng), conv.groups * width(rng));
            conv.n = rng.random_range(1..=4);
            conv.stride = [pick(rng, &[1, 1, 2]); 2];
            (conv.h, conv.w) = (rng.random_range(3..=30), rng.random_range(3..=30));
        }
        "stride-2" => conv.stride = [2, 2],
        "dilation-2" => conv.dilation = [2, 2],
        "1x1" => (conv.r, conv.s) = (1, 1),
        "7x7" => (conv.r, conv.s) = (7, 7),
        "45x45" => {
            (conv.r, conv.s, conv.h, conv.w) = (45, 45, rng.random_range(45..=100), rng.random_range(45..=100));
            (conv.groups, conv.c, conv.k) = (1, rng.random_range(1..=2), rng.random_range(1..=2));
            conv.n = rng.random_range(1..=2);
        }
        "large-depthwise" => {
            // The FFT path's ground: filters from 7 to 31, any stride and dilation.
            (conv.r, conv.s) = (rng.random_range(7..=31), rng.random_range(7..=31));
            conv.stride = [rng.random_range(1..=2), rng.random_range(1..=2)];
            conv.dilation = [rng.random_range(1..=2), rng.random_range(1..=2)];
            conv.c = rng.random_range(1..=32);
            (conv.groups, conv.k) = (conv.c, conv.c);
        }
        "odd" | "nonfinite" => {
            (conv.r, conv.s) = (rng.random_range(1..=9), rng.random_range(1..=9));
            conv.stride = [rng.random_range(1..=3), rng.random_range(1..=3)];
            conv.dilation = [rng.random_range(1..=3), rng.random_range(1..=3)];
        }
        "batch-1" => conv.n = 1,
        "z-split" => {
            // More than 65535 packed (group, k-tile) blocks: several launches.
            (conv.n, conv.c, conv.h, conv.w) = (rng.random_range(1..=2), rng.random_range(65536..=70000), 5, 6);
            (conv.groups, conv.k) = (conv.c, conv.c);
        }
        "wide" => {
            // Larger maps and batches than the other kinds draw.
            (conv.n, conv.h, conv.w) =
                (rng.random_range(8..=64), rng.random_range(40..=160), rng.random_range(40..=160));
            conv.groups = pick(rng, &[1, 4, conv.c]);
            conv.k = conv.groups * rng.random_range(1..=4);
            if !conv.c.is_multiple_of(conv.groups) {
                conv.groups = 1;
            }
        }
        "nhwc" => {
            // Channels last: the depthwise kernel's NHWC ground (channel counts that its
            // 4- and 2-channel threads take, and any), maps from one output column up.
            conv.layout = crate::TensorLayout::Nhwc;
            let filter = pick(rng, &[3, 5, 7]);
            (conv.r, conv.s) = (filter, filter);
            conv.stride = [pick(rng, &[1, 2]); 2];
            (conv.n, conv.h, conv.w) = (rng.random_range(1..=4), rng.random_range(1..=50), rng.random_range(1..=50));
            conv.c = if rng.random_bool(0.5) { 4 * rng.random_range(1..=24) } else { rng.random_range(1..=64) };
            (conv.groups, conv.k) = (conv.c, conv.c);
        }
        "grouped-nhwc" => {
            // Channels last, the tensor-core kernel's NHWC ground: group widths that its 16-byte
            // copies and stores take (multiples of 4) and any, 1x1 to 5x5, stride 1 or 2.
            conv.layout = crate::TensorLayout::Nhwc;
            conv.groups = pick(rng, &[1, 2, 3, 4, 8, 32]);
            let width = |rng: &mut SmallRng| {
                let any = rng.random_range(1..=70);
                pick(rng, &[4, 8, 12, 24, 56, any])
            };
            (conv.c, conv.k) = (conv.groups * width(rng), conv.groups * width(rng));
            conv.n = rng.random_range(1..=4);
            conv.stride = [pick(rng, &[1, 1, 2]); 2];
            (conv.h, conv.w) = (rng.random_range(3..=30), rng.random_range(3..=30));
        }
        _ => unreachable!("every category has an arm"),
    }
    // Padding up to the filter's reach, independently per side, keeps every output valid.
    let reach = |f: usize, d: usize| d * (f - 1) / 2;
    conv.pad =
        [rng.random_range(0..=reach(conv.r, conv.dilation[0])), rng.random_range(0..=reach(conv.s, conv.dilation[1]))];
    conv.h = conv.h.max(conv.dilation[0] * (conv.r - 1) + 1);
    conv.w = conv.w.max(conv.dilation[1] * (conv.s - 1) + 1);
    let mut case = Case::new(conv);
    case.nonfinite = category == "nonfinite";
    case
}

/// A reproducible generator for `--seed`.
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}
