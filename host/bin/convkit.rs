//! The `convkit` command: `check` and `bench` against cuDNN, `info`.

use clap::{Args, Parser, Subcommand};
use convkit::{
    Conv2d, Error, Gpu,
    cgemm::{CGEMM_TILES, CgemmTile, Family},
    conv::{
        cudnn::{MathClass, engines::ALL_HEURISTICS},
        epilogue::{Activation, Epilogue},
    },
    direct,
    fft::{Fft2dAlgorithm, fft2d_sizes},
    harness::{
        bench::{self, Bench, BenchOptions, Candidate, LayerResult, Source},
        cgemm::{self as cgemm_harness, CGEMM_SYNTAX, CgemmCase, CgemmCheck, CgemmRow},
        check::{self, Case, CaseResult, Checker},
        cublas::{Cublas, CublasLtPlan},
        fft::{self as fft_harness, FftCase, FftKind, FftRow},
        report::RunInfo,
        suites::{self, SUITES},
        tune::{self, TuneRow},
    },
    plan::{self, Mode, PlanOptions, Planner},
    problem::SHAPE_SYNTAX,
    timing::{GpuQueue, Schedule},
};
use indicatif::{ProgressBar, ProgressStyle};
use kernels_gpu::{
    conv::{direct::DirectTile, igemm::Precision},
    random::mix,
};
use std::{collections::BTreeMap, path::PathBuf, process::ExitCode, time::SystemTime};

#[derive(Parser)]
#[command(name = "convkit", version, about = "Hand-written GPU convolutions, checked and benchmarked against cuDNN", after_help = SHAPE_SYNTAX)]
struct Cli {
    /// CUDA device ordinal.
    #[arg(long, global = true, default_value_t = 0)]
    device: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every kernel variant against the f64 reference and cuDNN; exits 1 on any failure.
    Check(CheckArgs),
    /// Time our kernels against cuDNN's best exact and best fast (TF32) implementations.
    Bench(BenchArgs),
    /// Explain the plan for a layer: the algorithm chosen, why, and its workspace.
    Plan(PlanArgs),
    /// Run Find on every layer of a suite, fill the plan cache and print the choices.
    Tune(TuneArgs),
    /// Print the device, driver, cuDNN and kernel variants this build would use.
    Info,
}

#[derive(Args)]
struct PlannerArgs {
    /// Math class: exact (f32 only) or fast (TF32 tensor cores allowed, PyTorch's default).
    #[arg(long, value_parser = parse_math, default_value = "exact")]
    math: MathClass,
    /// Workspace limit in MiB (default: a quarter of the GPU's free memory).
    #[arg(long, value_name = "MIB")]
    workspace_mib: Option<u64>,
    /// Among Find's candidates within 10% of the fastest, do not prefer the least workspace.
    #[arg(long)]
    fastest_only: bool,
    /// The plan cache file (default: $CONVKIT_PLAN_CACHE, else ~/.cache/convkit/plans.json).
    #[arg(long, value_name = "FILE")]
    cache: Option<PathBuf>,
    /// Keep the plan cache in memory only.
    #[arg(long, conflicts_with = "cache")]
    no_cache: bool,
    /// What the plan applies to its outputs: `none`, or e.g. `bias,relu` or `bias,silu,residual`.
    #[arg(long, value_parser = parse_epilogue, default_value = "none")]
    epilogue: Epilogue,
}

impl PlannerArgs {
    fn options(&self, math: MathClass, mode: Mode) -> PlanOptions {
        PlanOptions {
            math,
            mode,
            workspace_limit: self.workspace_mib.map(|m| (m as usize).saturating_mul(1 << 20)),
            prefer_less_workspace: !self.fastest_only,
            epilogue: self.epilogue,
        }
    }

    fn planner<'g>(&self, gpu: &'g Gpu) -> Result<Planner<'g>, Error> {
        let path = if self.no_cache { None } else { self.cache.clone().or_else(plan::cache::default_path) };
        Planner::with_cache_file(gpu, path)
    }
}

fn parse_epilogue(text: &str) -> Result<Epilogue, String> {
    text.parse().map_err(|e: Error| e.to_string())
}

fn parse_math(name: &str) -> Result<MathClass, String> {
    match name {
        "exact" => Ok(MathClass::Exact),
        "fast" => Ok(MathClass::Fast),
        other => Err(format!("no math class `{other}`; exact or fast")),
    }
}

#[derive(Args)]
struct PlanArgs {
    /// The layer; see the shape syntax below.
    #[arg(long = "shape", value_name = "SPEC", value_parser = parse_shape)]
    shape: Conv2d,
    /// Time the candidates (Find) unless the cache holds the layer.
    #[arg(long)]
    find: bool,
    /// Time every candidate now and list them (a fresh Find, whatever the cache holds).
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    planner: PlannerArgs,
}

#[derive(Args)]
struct TuneArgs {
    #[command(flatten)]
    layers: Layers,
    /// Math classes to tune: exact, fast or both.
    #[arg(long, default_value = "both", value_parser = ["exact", "fast", "both"])]
    classes: String,
    /// Also measure Find's and the heuristic's choices against a longer, exhaustive search.
    #[arg(long)]
    evaluate: bool,
    /// Also write every row as JSON (rewritten after each row).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    planner: PlannerArgs,
}

#[derive(Args)]
struct Layers {
    /// A layer to run (repeatable); see the shape syntax below.
    #[arg(long = "shape", value_name = "SPEC", value_parser = parse_shape)]
    shapes: Vec<Conv2d>,
    /// A built-in suite (default, smoke, large, large-kernel, depthwise, grouped, grouped-nhwc, sanitize-depthwise, sanitize-grouped) or a file with one shape per line.
    #[arg(long, value_name = "NAME|FILE")]
    suite: Option<String>,
}

impl Layers {
    fn resolve(&self) -> Result<Option<Vec<Conv2d>>, Error> {
        chosen(&self.suite, suites::load_suite, &self.shapes)
    }
}

/// A suite's items (if one is named) then the shapes given one by one; `None` when neither is.
fn chosen<T: Clone>(
    suite: &Option<String>,
    load: impl Fn(&str) -> Result<Vec<T>, Error>,
    shapes: &[T],
) -> Result<Option<Vec<T>>, Error> {
    let mut items = match suite {
        Some(name) => load(name)?,
        None => Vec::new(),
    };
    // An empty suite file would otherwise run the default suite in its place.
    if let (Some(name), true) = (suite, items.is_empty()) {
        let reason = format!("`{name}` holds no shapes (a suite file lists one per line)");
        return Err(Error::InvalidShape { field: "suite", reason });
    }
    items.extend(shapes.iter().cloned());
    Ok((!items.is_empty()).then_some(items))
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct CheckArgs {
    /// Another kernel family than the convolution.
    #[command(subcommand)]
    family: Option<CheckFamily>,
    /// Random shapes to check when no --shape, --suite or --large is given.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    cases: u64,
    /// The `large` suite: realistic sizes up to the validated index limits (needs ~60 GB of GPU memory).
    #[arg(long, conflicts_with_all = ["shapes", "suite"])]
    large: bool,
    /// Seed of the random shapes and inputs (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also run the CPU reference (and compare it with the GPU's) on shapes of at most this many FLOPs.
    #[arg(long, default_value_t = 5e7)]
    cpu_max_flops: f64,
    /// Workspace offered to cuDNN, in MiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    workspace_mib: u64,
    /// Print every case, not only failures.
    #[arg(long, short)]
    verbose: bool,
    /// Draw the random shapes from these kinds only (comma-separated; see the summary's rows).
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    kinds: Vec<&'static str>,
    /// The epilogue every variant applies: `random` (each case draws one; half of them none),
    /// `none`, or a list such as `bias,relu,residual,shuffle`.
    #[arg(long, default_value = "random")]
    epilogue: String,
    /// Run only these families of our kernels (comma-separated: direct, depthwise, igemm, fft,
    /// fft-gemm; default all); the references and cuDNN run on every case.
    #[arg(long, value_delimiter = ',')]
    families: Vec<check::Family>,
    #[command(flatten)]
    layers: Layers,
}

fn parse_kind(name: &str) -> Result<&'static str, String> {
    check::CATEGORIES
        .iter()
        .find(|k| **k == name)
        .copied()
        .ok_or_else(|| format!("no kind `{name}`; there are {}", check::CATEGORIES.join(", ")))
}

#[derive(Subcommand)]
enum CheckFamily {
    /// Check the batched complex GEMM against the f64 reference (random problems by default).
    Cgemm(CgemmCheckArgs),
    /// Check the 2D FFT against an f64 DFT and cuFFT (every size, both directions, by default).
    Fft(FftCheckArgs),
}

#[derive(Subcommand)]
enum BenchFamily {
    /// Time the batched complex GEMM against cuBLAS (`square` suite by default).
    Cgemm(CgemmBenchArgs),
    /// Time the 2D FFT against cuFFT (the FFT convolution's sizes and batches by default).
    Fft(FftBenchArgs),
}

#[derive(Args)]
struct FftCheckArgs {
    /// A batch to check, `NxIMAGES` (repeatable), e.g. 72x2048; every kind of transform each.
    #[arg(long = "case", value_name = "NxIMAGES", value_parser = parse_fft_case)]
    cases: Vec<(usize, usize)>,
    /// Seed of the random inputs (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Args)]
struct FftBenchArgs {
    /// A batch to time, `NxIMAGES` (repeatable), e.g. 72x2048; every kind of transform each.
    #[arg(long = "case", value_name = "NxIMAGES", value_parser = parse_fft_case)]
    cases: Vec<(usize, usize)>,
    #[command(flatten)]
    timing: TimedRunArgs,
}

/// How `bench cgemm` and `bench fft` time and record.
#[derive(Args)]
struct TimedRunArgs {
    /// Timed launches of each implementation per round.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
    reps: u64,
    /// Interleaved rounds (the median is over rounds x reps launches).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Untimed launches of each implementation first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Seed of the random inputs (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the run's header and every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

impl TimedRunArgs {
    fn schedule(&self) -> Schedule {
        Schedule { warmup: self.warmup, rounds: self.rounds as usize, reps: self.reps as usize }
    }
}

fn parse_fft_case(spec: &str) -> Result<(usize, usize), String> {
    fft_harness::parse_case(spec).map_err(|e| e.to_string())
}

/// Every kind of transform (forward, inverse, real-to-complex, complex-to-real) of each
/// `(n, images)`.
fn fft_cases(pairs: &[(usize, usize)]) -> Vec<FftCase> {
    pairs.iter().flat_map(|&(n, images)| FftKind::ALL.map(|kind| FftCase { n, images, kind })).collect()
}

#[derive(Args)]
struct CgemmProblems {
    /// A problem (repeatable); see `convkit bench cgemm --help` for the syntax.
    #[arg(long = "shape", value_name = "SPEC", value_parser = parse_cgemm)]
    shapes: Vec<CgemmCase>,
    /// A built-in suite: square, fftconv.
    #[arg(long, value_name = "NAME")]
    suite: Option<String>,
}

impl CgemmProblems {
    fn resolve(&self) -> Result<Option<Vec<CgemmCase>>, Error> {
        chosen(&self.suite, cgemm_harness::load_suite, &self.shapes)
    }
}

#[derive(Args)]
#[command(after_help = CGEMM_SYNTAX)]
struct CgemmCheckArgs {
    /// Random problems when no --shape or --suite is given.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    cases: u64,
    /// Seed of the random problems and inputs (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print every case, not only failures.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    problems: CgemmProblems,
}

#[derive(Args)]
#[command(after_help = CGEMM_SYNTAX)]
struct CgemmBenchArgs {
    #[command(flatten)]
    problems: CgemmProblems,
    #[command(flatten)]
    timing: TimedRunArgs,
    /// Also time these variants (repeatable; `all` for every one that computes the problem,
    /// `tensor` for every tensor-core one).
    #[arg(long = "variant", value_name = "NAME", value_parser = parse_variant)]
    variants: Vec<Vec<&'static CgemmTile>>,
}

fn parse_variant(name: &str) -> Result<Vec<&'static CgemmTile>, String> {
    match name {
        "all" => return Ok(CGEMM_TILES.iter().collect()),
        "tensor" => return Ok(CGEMM_TILES.iter().filter(|t| t.family == Family::Tensor).collect()),
        _ => {}
    }
    CGEMM_TILES.iter().find(|t| t.name == name).map(|t| vec![t]).ok_or_else(|| {
        format!(
            "no cgemm variant `{name}`; one of: all, tensor, {}",
            CGEMM_TILES.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
        )
    })
}

fn parse_cgemm(spec: &str) -> Result<CgemmCase, String> {
    spec.parse().map_err(|e: Error| e.to_string())
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    /// Another kernel family than the convolution.
    #[command(subcommand)]
    family: Option<BenchFamily>,
    #[command(flatten)]
    layers: Layers,
    #[command(flatten)]
    timing: TimedRunArgs,
    /// Host-free launches per cuDNN candidate when screening.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    screen_reps: u64,
    /// cuDNN candidates of each class timed in the rounds beside ours.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    finalists: u64,
    /// Run the whole suite this many times and report the spread of each ratio.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    repeat: u64,
    /// Workspace limit for cuDNN, in MiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    workspace_mib: u64,
    /// Time this direct-kernel variant (see `convkit info`) instead of the heuristic's choice.
    #[arg(long, value_name = "NAME", value_parser = parse_tile)]
    tile: Option<DirectTile>,
    /// Print every candidate of every layer.
    #[arg(long, short)]
    verbose: bool,
    /// Leave out the planner's choices (timed by default, through the Plan API, in both classes).
    #[arg(long)]
    no_plans: bool,
    /// Time every direct-, depthwise- and tensor-core (implicit GEMM) kernel variant that
    /// computes the layer, not only the heuristic's choice (of each precision).
    #[arg(long)]
    all_variants: bool,
    /// Also time our direct-style kernels with this epilogue fused (e.g. `bias,relu`,
    /// `bias,silu,residual`, `shuffle`) beside the plain ones, and the epilogue as a pass.
    #[arg(long, value_name = "SPEC", value_parser = parse_epilogue)]
    epilogue: Option<Epilogue>,
    /// A stored result (`--json` of an earlier run): exit 1 if a layer of ours got slower by more
    /// than --max-slowdown.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// The slowdown --baseline tolerates, as a fraction (see benches/NOTES.md for why 0.05).
    #[arg(long, default_value_t = 0.05)]
    max_slowdown: f64,
}

fn parse_tile(name: &str) -> Result<DirectTile, String> {
    direct::variants()
        .iter()
        .find(|t| t.name == name || t.name.trim_start_matches("direct_fwd_") == name)
        .copied()
        .ok_or_else(|| {
            let names: Vec<_> = direct::variants().iter().map(|t| t.name).collect();
            format!("no direct kernel `{name}`; there are {}", names.join(", "))
        })
}

fn parse_shape(spec: &str) -> Result<Conv2d, String> {
    let conv: Conv2d = spec.parse().map_err(|e: Error| e.to_string())?;
    conv.geometry().map_err(|e| e.to_string())?;
    Ok(conv)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Check(CheckArgs { family: Some(CheckFamily::Cgemm(args)), .. }) => run_check_cgemm(cli.device, args),
        Command::Bench(BenchArgs { family: Some(BenchFamily::Cgemm(args)), .. }) => run_bench_cgemm(cli.device, args),
        Command::Check(CheckArgs { family: Some(CheckFamily::Fft(args)), .. }) => run_check_fft(cli.device, args),
        Command::Bench(BenchArgs { family: Some(BenchFamily::Fft(args)), .. }) => run_bench_fft(cli.device, args),
        Command::Check(args) => run_check(cli.device, args),
        Command::Bench(args) => run_bench(cli.device, args),
        Command::Plan(args) => run_plan(cli.device, args),
        Command::Tune(args) => run_tune(cli.device, args),
        Command::Info => run_info(cli.device),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("convkit: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn clock_seed() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn progress(len: usize, prefix: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}

fn run_info(device: usize) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    for line in RunInfo::collect(&gpu, 0)?.header().into_iter().skip(2) {
        println!("{line}");
    }
    let names: Vec<_> = direct::variants().iter().map(|t| t.name).collect();
    println!("direct kernels: {}", names.join(", "));
    let names: Vec<_> = convkit::depthwise::variants().iter().map(|t| t.name).collect();
    println!("depthwise kernels: {}", names.join(", "));
    let names: Vec<_> = convkit::conv::igemm::variants().iter().map(|t| t.name).collect();
    println!("tensor-core (implicit GEMM) kernels: {}", names.join(", "));
    let fft: Vec<_> = convkit::conv::fft::variants().iter().map(|t| t.name).collect();
    println!("fused FFT convolution (depthwise) transforms: {}", fft.join(", "));
    let cgemm: Vec<_> = CGEMM_TILES.iter().map(|t| t.name).collect();
    println!("cgemm variants: {}", cgemm.join(", "));
    let suites: Vec<_> = SUITES.iter().map(|(n, _)| *n).collect();
    println!("built-in suites: {}", suites.join(", "));
    Ok(ExitCode::SUCCESS)
}

fn run_check(device: usize, args: &CheckArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut rng = check::rng(seed);
    let cases: Vec<Case> = if args.large {
        suites::load_suite("large")?.into_iter().map(Case::new).collect()
    } else {
        match args.layers.resolve()? {
            Some(layers) => layers.into_iter().map(Case::new).collect(),
            None => {
                let kinds = if args.kinds.is_empty() { check::CATEGORIES } else { &args.kinds[..] };
                (0..args.cases as usize).map(|i| check::random_case_of(&mut rng, i, kinds)).collect()
            }
        }
    };
    let mut cases = cases;
    let fixed = (args.epilogue != "random").then(|| args.epilogue.parse::<Epilogue>()).transpose()?;
    for case in &mut cases {
        case.epilogue = fixed.unwrap_or_else(|| check::random_epilogue(&mut rng));
    }
    let mut info = RunInfo::collect(&gpu, seed)?;
    let workspace = (args.workspace_mib as usize).saturating_mul(1 << 20);
    let mut checker = Checker::new(&gpu, workspace, args.cpu_max_flops)?;
    if !args.families.is_empty() {
        checker.families.clone_from(&args.families);
    }
    let bar = progress(cases.len(), "check");
    let mut results: Vec<CaseResult> = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        bar.set_message(case.conv.label());
        let result = checker.check(case, mix(seed, i as u64))?;
        if args.verbose || !result.passed() {
            bar.suspend(|| print_case(&result));
        }
        results.push(result);
        bar.inc(1);
    }
    bar.finish_and_clear();
    info.finish();
    for line in info.header() {
        println!("{line}");
    }

    #[derive(Default)]
    struct Row {
        cases: usize,
        variants: usize,
        passed: usize,
        worst: f64,
        cudnn_worst: f64,
        cudnn_unsupported: usize,
        cpu_checked: usize,
    }
    let mut by_kind: BTreeMap<String, Row> = BTreeMap::new();
    for r in &results {
        let row = by_kind.entry(r.case.kind.clone()).or_default();
        row.cases += 1;
        row.variants += r.variants.len();
        row.passed += r.passed() as usize;
        row.worst = row.worst.max(r.worst_ratio());
        if let Some(c) = &r.cudnn {
            match &c.outcome {
                Ok(stats) => row.cudnn_worst = row.cudnn_worst.max(stats.worst_ratio()),
                Err(_) => row.cudnn_unsupported += c.unsupported as usize,
            }
        }
        row.cpu_checked += r.gpu_reference_exact.is_some() as usize;
    }
    println!(
        "\n| kind | cases | variants run | passed | worst err / bound | cuDNN worst err / its bound | cuDNN unsupported | CPU-checked |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (kind, row) in &by_kind {
        println!(
            "| {kind} | {} | {} | {} | {:.3} | {:.3} | {} | {} |",
            row.cases, row.variants, row.passed, row.worst, row.cudnn_worst, row.cudnn_unsupported, row.cpu_checked
        );
    }
    // Each kernel family's error (the tensor cores' two precisions apart), measured.
    let mut by_family: BTreeMap<String, (usize, f64, f64)> = BTreeMap::new();
    for v in results.iter().flat_map(|r| &r.variants) {
        let mut words = v.tile.split('_');
        let family = match (words.next(), words.next()) {
            (Some("igemm"), Some(precision)) => format!("igemm_{precision}"),
            (first, _) => first.unwrap_or_default().to_owned(),
        };
        let entry = by_family.entry(family).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(v.stats.worst_ratio());
        entry.2 = entry.2.max(v.stats.rel_l2());
    }
    println!("\n| kernels | runs | worst err / its bound | worst rel L2 |");
    println!("| --- | ---: | ---: | ---: |");
    for (family, (runs, worst, rel_l2)) in &by_family {
        println!("| {family} | {runs} | {worst:.3} | {rel_l2:.1e} |");
    }
    // Each part of the epilogues (a case counts in every part of its own).
    let mut by_part: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for r in &results {
        let e = &r.case.epilogue;
        let parts = [
            e.is_none().then_some("none"),
            e.bias.then_some("bias"),
            (e.activation != Activation::Identity).then(|| e.activation.name()),
            e.residual.then_some("residual"),
            e.shuffle.then_some("shuffle"),
        ];
        for part in parts.into_iter().flatten() {
            let entry = by_part.entry(part).or_default();
            (entry.0, entry.1) = (entry.0 + 1, entry.1 + r.variants.len());
            entry.2 = entry.2.max(r.worst_ratio());
        }
    }
    println!("\n| epilogue part | cases | runs | worst err / its bound |");
    println!("| --- | ---: | ---: | ---: |");
    for (part, (cases, runs, worst)) in &by_part {
        println!("| {part} | {cases} | {runs} | {worst:.3} |");
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    let variants: usize = results.iter().map(|r| r.variants.len()).sum();
    let cpu_checked = results.iter().filter(|r| r.gpu_reference_exact.is_some()).count();
    println!(
        "\ncheck: {} passed, {failed} failed ({variants} kernel runs; the GPU reference matched the CPU reference bit for bit on {cpu_checked} cases)",
        results.len() - failed,
    );
    println!(
        "bound per output: |ours - ref| <= 2^-23 (8 + sqrt(taps)) * sum|x*w| + 2^-126 (ours; the FFT path adds 1e-4 * rms(x) * \
         rms over filters of |w|_2; TF32 adds 2^-10 and 2^-24 per mma, 3xTF32 4 * 2^-22); cuDNN: {:.0e} * sum|x*w| + {:.0e}",
        check::CUDNN_EXACT.tol,
        check::CUDNN_EXACT.floor
    );
    // A run in which no kernel of ours ran checked nothing of ours: not a pass.
    if variants == 0 {
        let families: Vec<_> = checker.families.iter().map(|f| f.name()).collect();
        eprintln!("check: no kernel of ours computes these shapes (families: {})", families.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_case(r: &CaseResult) {
    let verdict = if r.passed() { "ok  " } else { "FAIL" };
    let epilogue = if r.case.epilogue.is_none() { String::new() } else { format!(" epilogue={}", r.case.epilogue) };
    println!("{verdict} {}{epilogue}{}", r.case.conv, if r.case.nonfinite { " (NaN/Inf inputs)" } else { "" });
    for v in &r.variants {
        let s = &v.stats;
        let first = if s.passed() { String::new() } else { format!(", first at output {}", s.first_violation) };
        println!(
            "     {:<24} worst err/bound {:.3}, {} outputs beyond{first}, rel L2 {:.1e}",
            v.tile,
            s.worst_ratio(),
            s.violations,
            s.rel_l2()
        );
    }
    if let Some(c) = &r.cudnn {
        match &c.outcome {
            Ok(s) => println!(
                "     cuDNN {:<18} worst err/bound {:.3}, {} outputs beyond",
                c.algo,
                s.worst_ratio(),
                s.violations
            ),
            Err(e) => println!("     cuDNN: {e}{}", if c.unsupported { " (unsupported, not a failure)" } else { "" }),
        }
    }
    if r.gpu_reference_exact == Some(false) {
        println!("     the GPU reference differs from the CPU reference");
    }
}

fn run_bench(device: usize, args: &BenchArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let layers = match args.layers.resolve()? {
        Some(layers) => layers,
        None => suites::load_suite("default")?,
    };
    let opts = BenchOptions {
        schedule: args.timing.schedule(),
        screen_reps: args.screen_reps as usize,
        finalists: args.finalists as usize,
        min_working_set: 120 << 20,
        workspace_bytes: (args.workspace_mib as usize).saturating_mul(1 << 20),
        tile: args.tile,
        heuristics: ALL_HEURISTICS.to_vec(),
        plans: !args.no_plans,
        all_variants: args.all_variants,
        epilogue: args.epilogue,
    };
    let seed = args.timing.seed.unwrap_or_else(clock_seed);
    let mut info = RunInfo::collect(&gpu, seed)?;
    let mut bench = Bench::new(&gpu, opts.clone())?;
    let repeats = args.repeat as usize;
    let bar = progress(layers.len() * repeats, "bench");
    let mut runs: Vec<Vec<LayerResult>> = Vec::new();
    let mut failed = None;
    'repeats: for repeat in 0..repeats {
        runs.push(Vec::new());
        for (i, conv) in layers.iter().enumerate() {
            bar.set_message(conv.label());
            match bench.layer(conv, mix(seed, (repeat * layers.len() + i) as u64)) {
                Ok(row) => {
                    if args.verbose {
                        bar.suspend(|| print_candidates(&row));
                    }
                    runs.last_mut().expect("pushed above").push(row);
                    bar.inc(1);
                }
                Err(e) => {
                    failed = Some((conv.label(), e));
                    break 'repeats;
                }
            }
        }
    }
    bar.finish_and_clear();
    info.finish();

    // A layer that fails ends the run, but the layers measured before it are still written.
    if let Some(path) = &args.timing.json {
        let error = failed.as_ref().map(|(label, e)| format!("{label}: {e}"));
        let doc = serde_json::json!({ "run": info, "options": opts, "repeats": runs, "error": error });
        let text = serde_json::to_string_pretty(&doc).expect("bench results serialise");
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }
    if let Some((label, e)) = failed {
        eprintln!("convkit: bench stopped at layer {label}");
        return Err(e);
    }

    for line in info.header() {
        println!("{line}");
    }
    let s = opts.schedule;
    println!(
        "timing: host-free (each round queued behind a GPU-side gate, then released), {} warm-up, {} rounds x {} launches, \
         implementations interleaved; median (p10-p90) ms; inputs rotated over >= {} MB",
        s.warmup,
        s.rounds,
        s.reps,
        opts.min_working_set >> 20
    );
    println!(
        "cuDNN: every engine configuration of heuristic modes INSTANT, A, B and FALLBACK within {} MiB of workspace, and the \
         legacy FindEx algorithms (FMA and DEFAULT math); each screened with {} launches, the {} fastest of each class timed",
        opts.workspace_bytes >> 20,
        opts.screen_reps,
        opts.finalists
    );
    println!(
        "ours: our fastest in the exact class (f32 FMA kernels, FFT, 3xTF32 tensor cores); vs fast compares our fastest of \
         either class (TF32 included)"
    );
    println!(
        "exact: cuDNN's fastest in f32 FMA math (no tensor cores, no down-conversion); fast: its fastest with TF32 allowed \
         (PyTorch's default for convolutions), an exact kernel where none that converts is faster"
    );
    let last = runs.last().expect("at least one repeat");
    println!(
        "\n| layer | ours ms (p10-p90) | ours | direct ms | depthwise ms | FFT ms | tiled FFT ms | 3xTF32 ms | TF32 ms | cuDNN exact ms | exact engine | cuDNN fast ms | fast engine | vs exact | vs fast | GB/s | % HBM | err/bound |"
    );
    println!(
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in last {
        let ours = r.ours();
        let t = ours.timing.as_ref();
        let (exact_ms, exact_name) = best_cells(r, MathClass::Exact);
        let (fast_ms, fast_name) = best_cells(r, MathClass::Fast);
        let ratio = |c| r.speedup(c).map_or("-".to_owned(), |v| format!("{v:.2}x"));
        let ms = |c: Option<&Candidate>| {
            c.and_then(|c| c.timing.as_ref()).map_or("-".to_owned(), |t| format!("{:.3}", t.p50))
        };
        println!(
            "| {} | {:.3} ({:.3}-{:.3}) | {} | {} | {} | {} | {} | {} | {} | {exact_ms} | {exact_name} | {fast_ms} | {fast_name} | {} | {} | {:.0} | {:.1} | {:.2} |",
            r.label,
            t.map_or(f64::NAN, |t| t.p50),
            t.map_or(f64::NAN, |t| t.p10),
            t.map_or(f64::NAN, |t| t.p90),
            ours.name,
            ms(r.direct()),
            ms(r.depthwise_candidate()),
            ms(r.fft_candidate()),
            ms(r.fft_gemm_candidate()),
            ms(r.igemm_candidate(Precision::Tf32x3)),
            ms(r.igemm_candidate(Precision::Tf32)),
            ratio(MathClass::Exact),
            ratio(MathClass::Fast),
            r.gbytes_per_s(),
            r.hbm_percent(),
            ours.worst_ratio
        );
    }
    if last.iter().any(|r| !r.plans.is_empty()) {
        println!(
            "\nthrough the Plan API (the planner's heuristic, no timing): each class's plan against cuDNN's best in it"
        );
        println!("| layer | exact plan | ms | vs cuDNN exact | fast plan | ms | vs cuDNN fast |");
        println!("| --- | --- | ---: | ---: | --- | ---: | ---: |");
        for r in last {
            let cells = |class| {
                let plan = r.plan(class).and_then(|p| Some((p, p.timing.as_ref()?.p50)));
                let theirs = r.best(class).and_then(|c| c.timing.as_ref()).map(|t| t.p50);
                match plan {
                    Some((p, ms)) => {
                        let ratio = theirs.map_or("-".to_owned(), |t| format!("{:.2}x", t / ms));
                        format!("{} | {ms:.3} | {ratio}", p.name)
                    }
                    None => "- | - | -".to_owned(),
                }
            };
            println!("| {} | {} | {} |", r.label, cells(MathClass::Exact), cells(MathClass::Fast));
        }
    }
    if let Some(epilogue) = &opts.epilogue {
        let with_cudnn_fused = last.iter().any(|r| !r.cudnn_fused.is_empty());
        println!(
            "\nepilogue `{epilogue}`: each kernel plain and fused; unfused = cuDNN's best in the kernel's class plus our \
             epilogue pass (sum of medians), what a framework without fusion runs{}",
            if with_cudnn_fused {
                "; cuDNN fused = its fastest cudnnConvolutionBiasActivationForward in the kernel's class"
            } else {
                ""
            }
        );
        println!(
            "| layer | kernel | plain ms | fused ms | overhead | pass ms | unfused ms | fused vs unfused |{}",
            if with_cudnn_fused { " cuDNN fused ms | vs cuDNN fused |" } else { "" }
        );
        println!(
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |{}",
            if with_cudnn_fused { " ---: | ---: |" } else { "" }
        );
        let (mut overheads, mut fastest_overheads) = (Vec::new(), Vec::new());
        for r in last {
            // The layer's fastest plain kernel (of those with a fused twin) and its twin.
            let timed = |i: usize| r.candidates[i].timing.as_ref().map(|t| t.p50);
            let fastest =
                r.fused.iter().filter_map(|&[p, f]| Some((timed(p)?, timed(f)?))).min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((p, f)) = fastest {
                fastest_overheads.push((f / p - 1.0) * 100.0);
            }
            let pass = r.epilogue_pass.and_then(|i| r.candidates[i].timing.as_ref()).map(|t| t.p50);
            for &[plain, fused] in &r.fused {
                let (p, f) = (&r.candidates[plain], &r.candidates[fused]);
                let (Some(pt), Some(ft)) = (p.timing.as_ref(), f.timing.as_ref()) else { continue };
                let theirs = r.best(p.class).and_then(|c| c.timing.as_ref()).map(|t| t.p50);
                let unfused = theirs.zip(pass).map(|(t, pass)| t + pass);
                let cell = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.4}"));
                let ratio = |theirs: Option<f64>| theirs.map_or("-".to_owned(), |t| format!("{:.2}x", t / ft.p50));
                let cudnn_fused = r.best_cudnn_fused(p.class).and_then(|c| c.timing.as_ref()).map(|t| t.p50);
                let overhead = (ft.p50 / pt.p50 - 1.0) * 100.0;
                overheads.push(overhead);
                println!(
                    "| {} | {} | {:.4} | {:.4} | {overhead:+.1}% | {} | {} | {} |{}",
                    r.label,
                    p.name,
                    pt.p50,
                    ft.p50,
                    cell(pass),
                    cell(unfused),
                    ratio(unfused),
                    if with_cudnn_fused {
                        format!(" {} | {} |", cell(cudnn_fused), ratio(cudnn_fused))
                    } else {
                        String::new()
                    },
                );
            }
        }
        for (what, mut v) in
            [("(layer, kernel) pairs", overheads), ("layers, each on its fastest kernel", fastest_overheads)]
        {
            if v.is_empty() {
                continue;
            }
            v.sort_by(f64::total_cmp);
            let within = v.iter().filter(|&&o| o <= 5.0).count();
            println!(
                "epilogue overhead over {} {what}: median {:+.1}%, worst {:+.1}%, {within} within 5%",
                v.len(),
                v[v.len() / 2],
                v[v.len() - 1],
            );
        }
    }
    if repeats > 1 {
        println!("\nspread over {repeats} runs of the suite (fresh inputs each): min / median / max of each ratio");
        println!("| layer | vs exact | vs fast |");
        println!("| --- | ---: | ---: |");
        for (i, r) in last.iter().enumerate() {
            let spread = |class| {
                let mut v: Vec<f64> = runs.iter().filter_map(|run| run[i].speedup(class)).collect();
                v.sort_by(f64::total_cmp);
                if v.is_empty() {
                    "-".to_owned()
                } else {
                    format!("{:.2} / {:.2} / {:.2}", v[0], v[v.len() / 2], v[v.len() - 1])
                }
            };
            println!("| {} | {} | {} |", r.label, spread(MathClass::Exact), spread(MathClass::Fast));
        }
    }
    let bad: Vec<_> = runs.iter().flatten().filter(|r| !r.ours_correct()).map(|r| r.label.as_str()).collect();
    if !bad.is_empty() {
        eprintln!("convkit: our output exceeded its error bound on: {}", bad.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    if let Some(path) = &args.baseline {
        let baseline = bench::load_baseline(path)?;
        let now: Vec<(String, f64)> = last.iter().map(|r| (r.label.clone(), r.fastest_ms())).collect();
        let verdicts = bench::compare_baseline(&now, &baseline, args.max_slowdown);
        println!("\nagainst {} (slower by more than {:.0}% fails):", path.display(), args.max_slowdown * 100.0);
        println!("| layer | baseline ms | now ms | change | verdict |");
        println!("| --- | ---: | ---: | ---: | --- |");
        for v in &verdicts {
            let cell = |ms: Option<f64>| ms.map_or("-".to_owned(), |ms| format!("{ms:.4}"));
            let change = v.change().map_or("-".to_owned(), |c| format!("{:+.1}%", c * 100.0));
            println!("| {} | {} | {} | {change} | {} |", v.label, cell(v.baseline_ms), cell(v.now_ms), v.verdict());
        }
        if verdicts.iter().any(|v| v.regressed) {
            eprintln!(
                "convkit: slower than the baseline on: {}",
                verdicts.iter().filter(|v| v.regressed).map(|v| v.label.as_str()).collect::<Vec<_>>().join(", ")
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_plan(device: usize, args: &PlanArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let planner = args.planner.planner(&gpu)?;
    let mode = if args.find { Mode::Find } else { Mode::Heuristic };
    let opts = args.planner.options(args.planner.math, mode);
    let conv = &args.shape;
    let started = std::time::Instant::now();
    let choice = planner.choose(conv, &opts)?;
    let decided_us = started.elapsed().as_secs_f64() * 1e6;
    if args.verbose {
        let report = planner.find(conv, &opts, &plan::find::QUICK, &[], None)?;
        println!("| candidate | workspace MiB | screen ms | ms | |");
        println!("| --- | ---: | ---: | ---: | --- |");
        let mut trials: Vec<_> = tune::TrialRow::of(&report);
        trials.sort_by(|a, b| {
            let key = |t: &tune::TrialRow| (t.ms.unwrap_or(f64::INFINITY), t.screen_ms.unwrap_or(f64::INFINITY));
            key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal)
        });
        for t in &trials {
            let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.4}"));
            println!(
                "| {} | {:.1} | {} | {} | {} |",
                t.algorithm,
                t.workspace as f64 / (1 << 20) as f64,
                ms(t.screen_ms),
                ms(t.ms),
                t.error.as_deref().unwrap_or("")
            );
        }
    }
    let geom = conv.geometry()?;
    let mut w = gpu.alloc::<f32>(geom.w_len)?;
    gpu.fill_uniform(gpu.stream(), &mut w, clock_seed())?;
    let plan = planner.plan(gpu.stream(), conv, &opts, &w)?;
    println!("layer: {conv}");
    println!("math: {}; workspace limit: {} MiB", opts.math.name(), planner.workspace_limit(&opts) >> 20);
    println!("choice: {} ({:?}, decided in {decided_us:.1} us)", choice.algorithm, choice.origin);
    println!("why: {}", choice.reason);
    if plan.algorithm() != &choice.algorithm {
        println!("built as: {}", plan.algorithm());
    }
    if !plan.epilogue().is_none() {
        let how = if plan.fuses_epilogue() { "fused into the kernel's stores" } else { "a pass after the convolution" };
        println!("epilogue: {} ({how})", plan.epilogue());
    }
    println!("workspace: {} bytes; plan holds {} bytes", plan.workspace_bytes(), plan.plan_bytes());
    if let Some(path) = planner.cache_path() {
        println!("cache: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_tune(device: usize, args: &TuneArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let layers = match args.layers.resolve()? {
        Some(layers) => layers,
        None => suites::load_suite("default")?,
    };
    let classes: &[MathClass] = match args.classes.as_str() {
        "exact" => &[MathClass::Exact],
        "fast" => &[MathClass::Fast],
        _ => &[MathClass::Exact, MathClass::Fast],
    };
    let planner = args.planner.planner(&gpu)?;
    let mut info = RunInfo::collect(&gpu, 0)?;
    let bar = progress(layers.len() * classes.len(), "tune");
    // Written after every row (`complete` false until the last), so a run cut short keeps
    // what it measured.
    let write = |rows: &[TuneRow], info: &RunInfo, complete: bool| -> Result<(), Error> {
        let Some(path) = &args.json else { return Ok(()) };
        let doc =
            serde_json::json!({ "run": info, "complete": complete, "rows": rows, "figures": tune::figures(rows) });
        let text = serde_json::to_string_pretty(&doc).expect("tune results serialise");
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })
    };
    let mut rows: Vec<TuneRow> = Vec::new();
    for conv in &layers {
        // The fast class's candidates include the exact class's: its search reuses their screening.
        let mut screened = None;
        for &math in classes {
            bar.set_message(format!("{} ({})", conv.label(), math.name()));
            let (row, report) = tune::tune_layer(&planner, conv, math, args.evaluate, screened.as_ref())?;
            rows.push(row);
            write(&rows, &info, false)?;
            screened = Some(report);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    info.finish();
    write(&rows, &info, true)?;
    let figures = tune::figures(&rows);
    for line in info.header() {
        println!("{line}");
    }
    match planner.cache_path() {
        Some(path) => println!("plan cache: {}", path.display()),
        None => println!("plan cache: in memory only"),
    }
    println!("\n| layer | math | heuristic | Find | Find s | decide us (heuristic / cached / file) |");
    println!("| --- | --- | --- | --- | ---: | ---: |");
    for r in &rows {
        let built = if r.heuristic_built != r.heuristic { format!(" ({})", r.heuristic_built) } else { String::new() };
        println!(
            "| {} | {} | {}{built} | {} | {:.1} | {:.1} / {:.2} / {:.1} |",
            r.label, r.math, r.heuristic, r.find, r.find_s, r.heuristic_us, r.cached_us, r.file_us
        );
    }
    if figures.layers > 0 {
        println!(
            "\nevaluation: a search with {} finalists and {} rounds, the heuristic's and Find's choices among them",
            plan::find::THOROUGH.finalists,
            plan::find::THOROUGH.schedule.rounds
        );
        println!(
            "| layer | math | exhaustive best | best ms | Find / best | heuristic / Find | cuDNN best | Find / cuDNN |"
        );
        println!("| --- | --- | --- | ---: | ---: | ---: | --- | ---: |");
        for r in &rows {
            if let Some(e) = &r.evaluation {
                let cudnn = e.cudnn.clone().unwrap_or_else(|| "-".into());
                let vs = e.find_vs_cudnn().map_or("-".to_owned(), |v| format!("{v:.2}"));
                println!(
                    "| {} | {} | {} | {:.4} | {:.3} | {:.3} | {cudnn} | {vs} |",
                    r.label,
                    r.math,
                    e.best,
                    e.best_ms,
                    e.find_vs_best(),
                    e.heuristic_vs_find()
                );
            }
        }
        println!(
            "\nfigures over {} layers: Find within 3% of the exhaustive best on {:.0}%; heuristic within 10% of Find on {:.0}% \
             (worst {:.2}x); deciding (worst layer's median): heuristic {:.1} us, cached {:.2} us, from the file {:.1} us",
            figures.layers,
            figures.find_within_3pct * 100.0,
            figures.heuristic_within_10pct * 100.0,
            figures.heuristic_worst,
            figures.heuristic_us,
            figures.cached_us,
            figures.file_us
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The time and name of cuDNN's best in `class`, as table cells.
fn best_cells(r: &LayerResult, class: MathClass) -> (String, String) {
    match r.best(class) {
        Some(c) => {
            let t = c.timing.as_ref().expect("a best candidate was timed");
            let host = if t.host_free { "" } else { " (host in timing)" };
            let exact = if class == MathClass::Fast && c.class == MathClass::Exact { " [exact]" } else { "" };
            (format!("{:.3}", t.p50), format!("{}{exact}{host}", display_name(c)))
        }
        None => ("-".into(), "none ran".into()),
    }
}

fn display_name(c: &Candidate) -> String {
    match c.source {
        Source::CudnnLegacy => format!("{} (legacy)", c.name),
        _ => c.name.clone(),
    }
}

fn print_candidates(r: &LayerResult) {
    println!(
        "{}: {} engine configurations, {} plans built, setup {:.1} s, timing {:.1} s",
        r.label, r.engine_configs, r.engine_plans, r.setup_s, r.timing_s
    );
    for c in &r.candidates {
        let timed = c.timing.as_ref().map_or("-".to_owned(), |t| format!("{:.4}", t.p50));
        let screened = c.screen_ms.map_or("-".to_owned(), |ms| format!("{ms:.4}"));
        println!(
            "  {:<44} {:<5} {:<28} ws {:>5} MiB  screen {screened:>8}  timed {timed:>8}  rel L2 {:.1e}{}",
            display_name(c),
            c.class.name(),
            c.notes,
            c.workspace >> 20,
            c.rel_l2,
            c.excluded.as_ref().map_or(String::new(), |e| format!("  [{e}]"))
        );
    }
    for s in &r.skipped {
        println!("  skipped: {s}");
    }
}

fn run_check_cgemm(device: usize, args: &CgemmCheckArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut rng = check::rng(seed);
    let cases = match args.problems.resolve()? {
        Some(cases) => cases,
        None => (0..args.cases as usize).map(|i| cgemm_harness::random_case(&mut rng, i)).collect(),
    };
    let mut info = RunInfo::collect(&gpu, seed)?;
    let bar = progress(cases.len(), "check cgemm");
    let mut results: Vec<CgemmCheck> = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        bar.set_message(case.label());
        let r = cgemm_harness::check_case(&gpu, case, mix(seed, i as u64))?;
        if args.verbose || !r.passed() {
            let verdict = if r.passed() { "ok  " } else { "FAIL" };
            let failures = r.failures();
            let detail = if failures.is_empty() { String::new() } else { format!(" [{}]", failures.join("; ")) };
            let line = format!(
                "{verdict} {} alpha={:?} beta={:?}: worst err/bound over {} variants {:.3}{detail}",
                r.case,
                r.case.alpha,
                r.case.beta,
                r.tiles.len(),
                r.worst_ratio()
            );
            bar.suspend(|| println!("{line}"));
        }
        results.push(r);
        bar.inc(1);
    }
    bar.finish_and_clear();
    info.finish();
    for line in info.header() {
        println!("{line}");
    }
    let mut by_kind: BTreeMap<String, (usize, usize, f64)> = BTreeMap::new();
    for r in &results {
        let g = &r.case.g;
        let kind = format!("{:?}, {}", g.layout, if r.case.planar { "planar" } else { "interleaved" });
        let row = by_kind.entry(kind).or_insert((0, 0, 0.0));
        row.0 += 1;
        row.1 += r.passed() as usize;
        row.2 = row.2.max(r.worst_ratio());
    }
    println!("\n| layout, storage | cases | passed | worst err / bound |");
    println!("| --- | ---: | ---: | ---: |");
    for (kind, (cases, passed, worst)) in &by_kind {
        println!("| {kind} | {cases} | {passed} | {worst:.3} |");
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    let variants: usize = results.iter().map(|r| r.tiles.len()).sum();
    println!(
        "\ncheck cgemm: {} passed, {failed} failed (each case with every variant that computes it: {variants} runs of the {} in the PTX)",
        results.len() - failed,
        CGEMM_TILES.len()
    );
    println!(
        "bound per output part: |ours - ref| <= 2^-23 (8 + sqrt(2k + 4)) * (|alpha| sum|products| + |beta| |c|) + 2^-126; \
         elements of C outside its matrices must be untouched"
    );
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn run_bench_cgemm(device: usize, args: &CgemmBenchArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let cases = match args.problems.resolve()? {
        Some(cases) => cases,
        None => cgemm_harness::load_suite("square")?,
    };
    let seed = args.timing.seed.unwrap_or_else(clock_seed);
    let mut info = RunInfo::collect(&gpu, seed)?;
    let schedule = args.timing.schedule();
    let min_working_set = 120 << 20;
    let mut queue = GpuQueue::new(&gpu, gpu.stream())?;
    let cublas = Cublas::new(&gpu, gpu.stream())?;
    let cublas_version = cublas.version()?;
    let variants: Vec<&'static CgemmTile> = args.variants.iter().flatten().copied().collect();
    let bar = progress(cases.len(), "bench cgemm");
    let mut rows: Vec<CgemmRow> = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        bar.set_message(case.label());
        rows.push(cgemm_harness::bench_case(
            &gpu,
            &mut queue,
            &cublas,
            case,
            &variants,
            mix(seed, i as u64),
            schedule,
            min_working_set,
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    info.finish();
    if let Some(path) = &args.timing.json {
        let doc = serde_json::json!({ "run": info, "cublas": cublas_version, "schedule": schedule, "rows": rows });
        let text = serde_json::to_string_pretty(&doc).expect("bench results serialise");
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }
    for line in info.header() {
        println!("{line}");
    }
    println!(
        "cuBLAS {cublas_version}: the reference is the fastest correct of cublasCgemmStridedBatched, \
         cublasCgemm3mStridedBatched and the algorithms cuBLASLt's heuristic proposes (up to {}, {} MB workspace); \
         timing: host-free, {} warm-up, {} rounds x {} launches, interleaved; median (p10-p90) ms; \
         inputs rotated over >= {} MB; 8 real flops per complex multiply-add",
        CublasLtPlan::MAX_ALGOS,
        CublasLtPlan::WORKSPACE_BYTES >> 20,
        schedule.warmup,
        schedule.rounds,
        schedule.reps,
        min_working_set >> 20
    );
    println!(
        "\n| problem | spec | variant | ours ms (p10-p90) | cuBLAS ms | cuBLAS best | vs cuBLAS | GFLOP/s | GB/s | % HBM | err/bound |"
    );
    println!("| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let ours = &r.candidates[0].timing;
        let (theirs, name) =
            r.best_cublas().map_or(("-".to_owned(), "none correct"), |c| (format!("{:.4}", c.timing.p50), c.name));
        println!(
            "| {} | {} | {} | {:.4} ({:.4}-{:.4}) | {theirs} | {name} | {} | {:.0} | {:.0} | {:.1} | {:.2} |",
            r.label,
            r.spec,
            r.variant,
            ours.p50,
            ours.p10,
            ours.p90,
            r.speedup().map_or("-".to_owned(), |v| format!("{v:.2}x")),
            r.gflops(),
            r.gbytes_per_s(),
            r.hbm_percent(),
            r.candidates[0].worst_ratio
        );
    }
    if rows.iter().any(|r| r.candidates.len() > r.references + 1) {
        println!("\n| problem | variant | ms (p10-p90) | vs cuBLAS | err/bound |");
        println!("| --- | --- | ---: | ---: | ---: |");
        for r in &rows {
            let theirs = r.best_cublas().map(|c| c.timing.p50);
            for c in &r.candidates[r.references + 1..] {
                let t = &c.timing;
                let ratio = theirs.map_or("-".to_owned(), |v| format!("{:.2}x", v / t.p50));
                println!(
                    "| {} | {} | {:.4} ({:.4}-{:.4}) | {ratio} | {:.2} |",
                    r.label, c.name, t.p50, t.p10, t.p90, c.worst_ratio
                );
            }
        }
    }
    let ours =
        |r: &&CgemmRow| r.candidates.iter().enumerate().any(|(i, c)| (i == 0 || i > r.references) && c.violations > 0);
    let bad: Vec<_> = rows.iter().filter(ours).map(|r| r.label.as_str()).collect();
    if bad.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("convkit: our output exceeded its error bound on: {}", bad.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

fn run_check_fft(device: usize, args: &FftCheckArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let pairs: Vec<(usize, usize)> = if args.cases.is_empty() {
        let every_size = fft2d_sizes().iter().map(|s| (s.side() as usize, 3));
        every_size.chain(fft_harness::DEFAULT_CASES.iter().copied()).collect()
    } else {
        args.cases.clone()
    };
    let cases = fft_cases(&pairs);
    let mut info = RunInfo::collect(&gpu, seed)?;
    let bar = progress(cases.len() * Fft2dAlgorithm::ALL.len(), "check fft");
    let mut rows = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for algorithm in Fft2dAlgorithm::ALL {
            bar.set_message(format!("{} {}", case.label(), algorithm.name()));
            rows.push((*case, algorithm, fft_harness::check_case(&gpu, case, algorithm, mix(seed, i as u64))?));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    info.finish();
    for line in info.header() {
        println!("{line}");
    }
    println!("\n| transform | algorithm | ours vs f64 DFT | cuFFT vs f64 DFT | ours vs cuFFT (all images) |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for (case, algorithm, [ours, cufft, between]) in &rows {
        println!("| {} | {} | {ours:.2e} | {cufft:.2e} | {between:.2e} |", case.label(), algorithm.name());
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|(_, _, [ours, _, _])| !fft_passes(*ours))
        .map(|(c, a, _)| format!("{} {}", c.label(), a.name()))
        .collect();
    println!(
        "\ncheck fft: {} passed, {} failed (relative L2 error against an f64 DFT of the first images at most {FFT_TOLERANCE:e})",
        rows.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("convkit: FFT beyond the bound on: {}", failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

/// What `check fft` and `bench fft` hold our transforms to (issue 7: 1e-6 relative).
const FFT_TOLERANCE: f64 = 1e-6;

/// Whether a relative L2 error is within [`FFT_TOLERANCE`] (NaN is not).
fn fft_passes(err: f64) -> bool {
    err <= FFT_TOLERANCE
}

fn run_bench_fft(device: usize, args: &FftBenchArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let pairs = if args.cases.is_empty() { fft_harness::DEFAULT_CASES.to_vec() } else { args.cases.clone() };
    let cases = fft_cases(&pairs);
    let seed = args.timing.seed.unwrap_or_else(clock_seed);
    let mut info = RunInfo::collect(&gpu, seed)?;
    let schedule = args.timing.schedule();
    let min_working_set = 120 << 20;
    let mut queue = GpuQueue::new(&gpu, gpu.stream())?;
    let bar = progress(cases.len(), "bench fft");
    let mut rows: Vec<FftRow> = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        bar.set_message(case.label());
        rows.push(fft_harness::bench_case(&gpu, &mut queue, case, mix(seed, i as u64), schedule, min_working_set)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    info.finish();
    if let Some(path) = &args.timing.json {
        let doc = serde_json::json!({ "run": info, "schedule": schedule, "rows": rows });
        let text = serde_json::to_string_pretty(&doc).expect("bench results serialise");
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }
    for line in info.header() {
        println!("{line}");
    }
    println!(
        "cuFFT: a batched plan of the same kind (cufftPlanMany, rank 2: C2C, R2C, C2R) and images; timing: host-free, {} warm-up, {} rounds x {} \
         launches, interleaved; median (p10-p90) ms; inputs rotated over >= {} MB; errors: relative L2 against an f64 DFT \
         of the first images",
        schedule.warmup,
        schedule.rounds,
        schedule.reps,
        min_working_set >> 20
    );
    println!(
        "\n| transform | ours ms (p10-p90) | ours | whole-image ms | two-pass ms | cuFFT ms | vs cuFFT | % HBM | ours err | cuFFT err |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let (ours, theirs) = (r.ours(), r.cufft());
        let ms = |name: &str| r.candidates.iter().find(|c| c.name == name).map_or(f64::NAN, |c| c.timing.p50);
        println!(
            "| {} | {:.4} ({:.4}-{:.4}) | {} | {:.4} | {:.4} | {:.4} | {:.2}x | {:.1} | {:.1e} | {:.1e} |",
            r.case.label(),
            ours.timing.p50,
            ours.timing.p10,
            ours.timing.p90,
            r.chosen,
            ms(Fft2dAlgorithm::WholeImage.name()),
            ms(Fft2dAlgorithm::TwoPass.name()),
            theirs.timing.p50,
            r.speedup(),
            r.hbm_percent(),
            ours.rel_l2,
            theirs.rel_l2
        );
    }
    // Every algorithm of ours is held to the bound, chosen or not.
    let bad: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            let ours = &r.candidates[..r.candidates.len() - 1];
            ours.iter().filter(|c| !fft_passes(c.rel_l2)).map(move |c| format!("{} {}", r.case.label(), c.name))
        })
        .collect();
    if bad.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("convkit: our FFT exceeded its error bound on: {}", bad.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_suite_is_an_error_not_the_default_suite() {
        let empty = |_: &str| Ok(Vec::<u32>::new());
        let err = chosen(&Some("empty.txt".into()), empty, &[]).unwrap_err();
        assert!(err.to_string().contains("`empty.txt` holds no shapes"), "{err}");
        assert_eq!(chosen(&None, empty, &[]).unwrap(), None);
        assert_eq!(chosen(&None, empty, &[3]).unwrap(), Some(vec![3]));
        assert_eq!(chosen(&Some("s".into()), |_: &str| Ok(vec![1, 2]), &[3]).unwrap(), Some(vec![1, 2, 3]));
    }
}
