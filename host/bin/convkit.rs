//! The `convkit` command: `check` against cuDNN, `bench` against cuDNN, `info`.

use clap::{Args, Parser, Subcommand};
use convkit::{
    Conv2d, Error, Gpu,
    bench::{self, BenchOptions, BenchRow},
    check::{self, CaseResult},
    cudnn, direct,
    shape::{self, SHAPE_SYNTAX},
};
use indicatif::{ProgressBar, ProgressStyle};
use kernels_gpu::direct::DirectTile;
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
    /// Compare our kernels with cuDNN (and the CPU reference on small shapes); exits 1 on any failure.
    Check(CheckArgs),
    /// Time our kernels against cuDNN's fastest algorithm.
    Bench(BenchArgs),
    /// Print the device, driver, cuDNN and kernel variants this build would use.
    Info,
}

#[derive(Args)]
struct Layers {
    /// A layer to run (repeatable); see the shape syntax below.
    #[arg(long = "shape", value_name = "SPEC", value_parser = parse_shape)]
    shapes: Vec<Conv2d>,
    /// A built-in suite (default, smoke) or a file with one shape per line.
    #[arg(long, value_name = "NAME|FILE")]
    suite: Option<String>,
}

impl Layers {
    fn resolve(&self) -> Result<Option<Vec<Conv2d>>, Error> {
        let mut layers = match &self.suite {
            Some(name) => shape::load_suite(name)?,
            None => Vec::new(),
        };
        layers.extend(self.shapes.iter().cloned());
        Ok((!layers.is_empty()).then_some(layers))
    }
}

#[derive(Args)]
struct CheckArgs {
    /// Random shapes to check when no --shape or --suite is given.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    cases: u64,
    /// Seed of the random shapes and inputs (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also run the CPU reference on shapes of at most this many FLOPs.
    #[arg(long, default_value_t = 5e7)]
    cpu_max_flops: f64,
    /// Print every case, not only failures.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    layers: Layers,
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    layers: Layers,
    /// Timed repetitions per implementation (median reported; at least 20).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(20..))]
    reps: u64,
    /// Untimed warm-up launches.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Seed of the random inputs (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Workspace offered to cuDNN, in MiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    workspace_mib: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Time this direct-kernel variant (see `convkit info`) instead of the heuristic's choice.
    #[arg(long, value_name = "NAME", value_parser = parse_tile)]
    tile: Option<DirectTile>,
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
        Command::Check(args) => run_check(cli.device, args),
        Command::Bench(args) => run_bench(cli.device, args),
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

fn progress(len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar
}

fn device_line(gpu: &Gpu) -> Result<String, Error> {
    let driver = gpu.driver_version()?;
    let cudnn =
        cudnn::version().map_or("not found".to_owned(), |v| format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100));
    Ok(format!(
        "{} (sm_{}, {} SMs, PTX sm_{}), CUDA driver {}.{}, cuDNN {cudnn}",
        gpu.name()?,
        gpu.arch(),
        gpu.sm_count(),
        gpu.ptx_arch(),
        driver / 1000,
        driver % 1000 / 10
    ))
}

fn run_info(device: usize) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    println!("{}", device_line(&gpu)?);
    let names: Vec<_> = direct::variants().iter().map(|t| t.name).collect();
    println!("direct kernels: {}", names.join(", "));
    Ok(ExitCode::SUCCESS)
}

fn run_check(device: usize, args: &CheckArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut rng = check::rng(seed);
    let layers = match args.layers.resolve()? {
        Some(layers) => layers,
        None => (0..args.cases as usize).map(|i| check::random_case(&mut rng, i)).collect(),
    };
    println!("{}", device_line(&gpu)?);
    println!("checking {} shapes, seed {seed}", layers.len());
    let mut workspace = gpu.alloc::<u8>(256 << 20)?;
    let bar = progress(layers.len());
    bar.set_prefix("check");
    let mut results: Vec<CaseResult> = Vec::new();
    for conv in &layers {
        bar.set_message(conv.label());
        let result = check::check_case(&gpu, conv, &mut rng, args.cpu_max_flops, &mut workspace)?;
        if args.verbose || !result.passed() {
            bar.suspend(|| print_case(&result));
        }
        results.push(result);
        bar.inc(1);
    }
    bar.finish_and_clear();

    // Summary by category: the label's part before '#', else the whole label.
    let mut by_kind: BTreeMap<String, (usize, usize, f64, f64)> = BTreeMap::new();
    for r in &results {
        let label = r.conv.label();
        let kind = label.split('#').next().unwrap_or(&label).to_owned();
        let row = by_kind.entry(kind).or_insert((0, 0, 0.0, f64::NAN));
        row.0 += 1;
        row.1 += r.passed() as usize;
        row.2 = row.2.max(r.err_cudnn);
        if let Some(e) = r.err_cpu {
            row.3 = if row.3.is_nan() { e } else { row.3.max(e) };
        }
    }
    println!("\n| kind | cases | passed | max err vs cuDNN | max err vs CPU |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (kind, (cases, passed, e_gpu, e_cpu)) in &by_kind {
        let cpu = if e_cpu.is_nan() { "-".to_owned() } else { format!("{e_cpu:.2e}") };
        println!("| {kind} | {cases} | {passed} | {e_gpu:.2e} | {cpu} |");
    }
    let failed = results.iter().filter(|r| !r.passed()).count();
    let cpu_checked = results.iter().filter(|r| r.err_cpu.is_some()).count();
    println!(
        "\ncheck: {} passed, {failed} failed ({cpu_checked} also against the CPU reference; tolerances {:.0e} vs cuDNN FMA math, {:.0e} vs CPU f64)",
        results.len() - failed,
        check::TOL_CUDNN,
        check::TOL_CPU
    );
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_case(r: &CaseResult) {
    let cpu = r.err_cpu.map_or("-".to_owned(), |e| format!("{e:.2e}"));
    let verdict = if r.passed() { "ok  " } else { "FAIL" };
    println!("{verdict} {} tile={} cudnn={} err_cudnn={:.2e} err_cpu={cpu}", r.conv, r.tile, r.cudnn_algo, r.err_cudnn);
}

fn run_bench(device: usize, args: &BenchArgs) -> Result<ExitCode, Error> {
    let gpu = Gpu::new(device)?;
    let layers = match args.layers.resolve()? {
        Some(layers) => layers,
        None => shape::load_suite("default")?,
    };
    let opts = BenchOptions {
        reps: args.reps as usize,
        warmup: args.warmup,
        workspace_bytes: (args.workspace_mib as usize).saturating_mul(1 << 20),
        tile: args.tile,
        ..BenchOptions::default()
    };
    let mut rng = check::rng(args.seed.unwrap_or_else(clock_seed));
    let header = device_line(&gpu)?;
    let mut workspace = gpu.alloc::<u8>(opts.workspace_bytes)?;
    let bar = progress(layers.len());
    bar.set_prefix("bench");
    let mut rows: Vec<BenchRow> = Vec::new();
    for conv in &layers {
        bar.set_message(conv.label());
        rows.push(bench::bench_layer(&gpu, conv, &opts, &mut rng, &mut workspace)?);
        bar.inc(1);
    }
    bar.finish_and_clear();

    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "device": header,
            "unix_time": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "reps": opts.reps,
            "rows": rows,
        });
        let text = serde_json::to_string_pretty(&doc).expect("bench rows serialise");
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }

    println!("{header}");
    println!(
        "median of {} runs after {} warm-up, inputs rotated over >= {} MB",
        opts.reps,
        opts.warmup,
        opts.min_working_set >> 20
    );
    println!(
        "\n| layer | ours ms | tile | cuDNN FMA ms (algo) | cuDNN default ms (algo) | speedup | GFLOP/s | GB/s | % HBM | rel err |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let cell = |math| {
            r.cudnn.iter().find(|t| t.math == math).map_or("-".to_owned(), |t| {
                format!("{:.3} ({}{})", t.ms, t.algo, if t.tensor_ops { ", TF32" } else { "" })
            })
        };
        println!(
            "| {} | {:.3} | {} | {} | {} | {:.2}x | {:.0} | {:.0} | {:.1} | {:.1e} |",
            r.label,
            r.ours_ms,
            r.tile.trim_start_matches("direct_fwd_"),
            cell(cudnn::Math::Fma),
            cell(cudnn::Math::Default),
            r.speedup,
            r.gflops,
            r.gbytes_per_s,
            r.hbm_percent,
            r.rel_err
        );
    }
    let bad: Vec<_> = rows.iter().filter(|r| !r.matches_cudnn()).map(|r| r.label.as_str()).collect();
    if bad.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("convkit: bench outputs differ from cuDNN on: {}", bad.join(", "));
        Ok(ExitCode::FAILURE)
    }
}
