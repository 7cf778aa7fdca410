//! Find: time every candidate for a layer and keep the fastest.
//!
//! The candidates: each direct-kernel tile and each depthwise-kernel variant that supports the
//! layer; the tensor-core kernel's [`IGEMM_VARIANTS`] cheapest variants of each pixel tiling (flat,
//! spatial) by its cost model in each precision the class admits (3xTF32; TF32 too in the fast class); the FFT convolutions (fused, and the tiled one at its [`TILED_SIZES`] cheapest sizes by
//! estimate) for filters of at least [`FFT_MIN_TAPS`] taps; every cuDNN engine configuration its
//! heuristics propose in any mode; and the legacy algorithms cuDNN ranks as able to run the layer
//! (FMA math, and DEFAULT math in the fast class). Each is built as a [`Plan`] with the same random
//! weights, within the workspace limit, and timed through [`Plan::forward`], the call a user makes:
//! screened with a few host-free launches (see [`crate::timing`]), then the fastest few timed in
//! interleaved rounds on inputs rotated through more memory than the L2 cache holds. Among the
//! finalists within [`WORKSPACE_SLACK`] of the fastest median, the one that needs the least
//! workspace wins unless the caller turned that off ([`select`]).

use super::{Built, Choice, Origin, Plan, PlanOptions, Planner, heuristic};
use crate::{
    Conv2d, ConvGeometry, Result,
    conv::{
        Algorithm,
        cudnn::{
            MathClass,
            engines::{ALL_HEURISTICS, EngineConv},
            legacy::{LegacyConv, Math},
        },
        depthwise, direct, fft, fft_gemm, igemm,
    },
    timing::{GpuQueue, Schedule, screen, time_interleaved},
};
use cudarc::driver::CudaSlice;
use kernels_gpu::{conv::igemm::PixelTile, random::mix};
use std::{rc::Rc, time::Instant};

/// Filter taps (R·S) from which the FFT convolutions are candidates (below, they never won a
/// measurement and their filter spectra cost memory).
pub const FFT_MIN_TAPS: usize = 25;
/// Tile sizes of the tiled FFT convolution tried, the cheapest by its estimate.
pub const TILED_SIZES: usize = 3;
/// Tensor-core variants tried per precision and pixel tiling, the cheapest by its cost model
/// (over the `grouped` suite's 90 layer-precision pairs the 2 of each tiling held a variant
/// within 3% of the fastest on 84, within 11% on all; the 3 cheapest of both together missed
/// by up to 46% on 7x7 maps: benches/NOTES.md).
pub const IGEMM_VARIANTS: usize = 2;
/// Finalists within this fraction of the fastest count as equally fast for the workspace rule.
pub const WORKSPACE_SLACK: f64 = 0.10;
/// The inputs and outputs rotate through at least this many bytes (twice the H200's L2).
pub const MIN_WORKING_SET: usize = 128 << 20;

/// How hard a search looks.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// Host-free launches per candidate when screening.
    pub screen_reps: usize,
    /// Candidates that go on to the interleaved rounds.
    pub finalists: usize,
    pub schedule: Schedule,
}

/// What [`Planner::choose`] runs in [`super::Mode::Find`].
pub const QUICK: Effort = Effort { screen_reps: 5, finalists: 4, schedule: Schedule { warmup: 1, rounds: 5, reps: 4 } };
/// What `convkit tune --evaluate` measures Find against: more finalists, more rounds.
pub const THOROUGH: Effort =
    Effort { screen_reps: 10, finalists: 8, schedule: Schedule { warmup: 2, rounds: 15, reps: 5 } };

/// One candidate's showing.
#[derive(Clone, Debug)]
pub struct Trial {
    pub algorithm: Algorithm,
    pub class: MathClass,
    pub workspace: usize,
    /// Median of the screening launches.
    pub screen_ms: Option<f64>,
    /// Median of the interleaved rounds (finalists).
    pub ms: Option<f64>,
    /// Why it did not run, if it did not.
    pub error: Option<String>,
}

/// A search's result.
#[derive(Clone, Debug)]
pub struct FindReport {
    pub trials: Vec<Trial>,
    pub choice: Choice,
    pub seconds: f64,
}

impl FindReport {
    /// The final median time of `algorithm`, if it was a finalist.
    pub fn ms_of(&self, algorithm: &Algorithm) -> Option<f64> {
        self.trials.iter().find(|t| t.algorithm == *algorithm).and_then(|t| t.ms)
    }
}

/// The finalist to choose: the fastest median, or with `prefer_less_workspace` the least
/// workspace among those within [`WORKSPACE_SLACK`] of it (ties: the faster).
pub fn select(trials: &[Trial], prefer_less_workspace: bool) -> Option<usize> {
    let timed = || trials.iter().enumerate().filter_map(|(i, t)| t.ms.map(|ms| (i, ms, t.workspace)));
    let (fastest, best_ms, _) = timed().min_by(|a, b| a.1.total_cmp(&b.1))?;
    if !prefer_less_workspace {
        return Some(fastest);
    }
    timed()
        .filter(|&(_, ms, _)| ms <= best_ms * (1.0 + WORKSPACE_SLACK))
        .min_by(|a, b| a.2.cmp(&b.2).then(a.1.total_cmp(&b.1)))
        .map(|(i, _, _)| i)
}

/// Searches `conv` in `opts.math` within `limit` bytes of workspace. The heuristic's choice is
/// screened first (so that it sets the pace for the early cut) and `must` (resolved
/// algorithms) are finalists whatever their screening. With `screened`, an earlier search of
/// the same layer and class, its screening is reused: only the interleaved rounds run again.
pub fn search(
    planner: &Planner,
    conv: &Conv2d,
    opts: &PlanOptions,
    limit: usize,
    effort: &Effort,
    must: &[Algorithm],
    screened: Option<&FindReport>,
) -> Result<FindReport> {
    let started = Instant::now();
    let gpu = planner.gpu();
    let stream = gpu.stream().clone();
    let geom = conv.geometry()?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seed = mix(now.as_nanos() as u64, std::process::id() as u64);
    let mut w = gpu.alloc::<f32>(geom.w_len)?;
    gpu.fill_uniform(&stream, &mut w, mix(seed, 2))?;

    let mut trials = Vec::new();
    let mut plans = Vec::new();
    let heuristic = heuristic::choose(gpu.sm_count(), conv, &geom, opts.math, limit);
    for candidate in candidates(planner, conv, &geom, opts.math, limit, &w, &heuristic.algorithm) {
        match candidate {
            Ok(plan) => {
                let algorithm = plan.algorithm().clone();
                if plans.iter().any(|p: &Plan| *p.algorithm() == algorithm) {
                    continue; // the heuristic's cuDNN pick, proposed again by the heuristics
                }
                trials.push(Trial {
                    algorithm,
                    class: plan.class(),
                    workspace: plan.workspace_bytes(),
                    screen_ms: None,
                    ms: None,
                    error: None,
                });
                plans.push(plan);
            }
            Err((algorithm, e)) => trials.push(Trial {
                class: MathClass::Exact,
                algorithm,
                workspace: 0,
                screen_ms: None,
                ms: None,
                error: Some(e.to_string()),
            }),
        }
    }
    // Trials of plans first, in plan order; failures after.
    trials.sort_by_key(|t| t.error.is_some());

    // Rotated inputs and outputs, and one workspace for all.
    let set_len = geom.x_len + geom.y_len;
    let sets = MIN_WORKING_SET.div_ceil(4 * set_len).clamp(2, 64);
    let mut xs = gpu.alloc::<f32>(geom.x_len * sets)?;
    gpu.fill_uniform(&stream, &mut xs, mix(seed, 1))?;
    let mut ys = gpu.alloc::<f32>(geom.y_len * sets)?;
    gpu.poison(&mut ys)?;
    let needed = plans.iter().map(Plan::workspace_bytes).max().unwrap_or(0);
    let mut workspace: CudaSlice<u8> = gpu.alloc(needed.max(1))?;
    let mut run = |plan: &Plan, launch: usize| -> Result<()> {
        let set = launch % sets;
        let x = xs.slice(set * geom.x_len..(set + 1) * geom.x_len);
        let mut y = ys.slice_mut(set * geom.y_len..(set + 1) * geom.y_len);
        plan.forward(&x, &mut y, &mut workspace)
    };

    let mut queue = GpuQueue::new(gpu, &stream)?;
    let mut fastest = f64::INFINITY;
    for (i, plan) in plans.iter().enumerate() {
        let earlier = screened.and_then(|r| r.trials.iter().find(|t| t.algorithm == *plan.algorithm()));
        if let Some(earlier) = earlier {
            (trials[i].screen_ms, trials[i].error) = (earlier.screen_ms, earlier.error.clone());
            continue;
        }
        match screen(&mut queue, effort.screen_reps, fastest, &mut |_, n| run(plan, n)) {
            Ok(samples) => {
                let ms = samples.median();
                fastest = fastest.min(ms);
                trials[i].screen_ms = Some(ms);
            }
            Err(e) => trials[i].error = Some(e.to_string()),
        }
    }
    let mut ranked: Vec<usize> = (0..plans.len()).filter(|&i| trials[i].screen_ms.is_some()).collect();
    ranked.sort_by(|&a, &b| trials[a].screen_ms.unwrap().total_cmp(&trials[b].screen_ms.unwrap()));
    let mut finalists: Vec<usize> = ranked.iter().copied().take(effort.finalists).collect();
    for algorithm in must {
        if let Some(i) = ranked.iter().copied().find(|&i| trials[i].algorithm == *algorithm)
            && !finalists.contains(&i)
        {
            finalists.push(i);
        }
    }
    let samples = time_interleaved(&mut queue, effort.schedule, finalists.len(), &mut |_, which, n| {
        run(&plans[finalists[which]], n)
    })?;
    for (&i, s) in finalists.iter().zip(&samples) {
        trials[i].ms = Some(s.median());
    }
    let Some(best) = select(&trials, opts.prefer_less_workspace) else {
        return Err(crate::Error::Timing(format!("no candidate for {conv} ran")));
    };
    let ms = trials[best].ms.expect("select picks timed trials");
    let quickest = trials.iter().filter_map(|t| t.ms).fold(f64::INFINITY, f64::min);
    let reason = if ms > quickest {
        format!("measured {ms:.4} ms, within {:.0}% of the fastest and less workspace", WORKSPACE_SLACK * 100.0)
    } else {
        format!("measured fastest of {} candidates ({ms:.4} ms)", plans.len())
    };
    let choice = Choice {
        algorithm: trials[best].algorithm.clone(),
        workspace: trials[best].workspace,
        origin: Origin::Find,
        reason,
        time_ms: Some(ms),
    };
    Ok(FindReport { trials, choice, seconds: started.elapsed().as_secs_f64() })
}

type Candidate<'g> = std::result::Result<Plan<'g>, (Algorithm, crate::Error)>;

/// Every candidate of the class, built with weights `w` (the heuristic's choice first).
fn candidates<'g>(
    planner: &Planner<'g>,
    conv: &Conv2d,
    geom: &ConvGeometry,
    math: MathClass,
    limit: usize,
    w: &CudaSlice<f32>,
    first: &Algorithm,
) -> Vec<Candidate<'g>> {
    let gpu = planner.gpu();
    let stream = gpu.stream();
    let build = |algorithm: Algorithm| Plan::new(gpu, stream, conv, &algorithm, w, limit).map_err(|e| (algorithm, e));
    let mut out = vec![build(first.clone())];
    let mut ours: Vec<Algorithm> = direct::supporting_variants(conv).map(|t| Algorithm::Direct(t.name)).collect();
    ours.extend(depthwise::supporting_variants(conv).map(|t| Algorithm::Depthwise(t.name)));
    // The tensor-core kernel in the precisions the class admits: its cost model's best few.
    for &precision in igemm::precisions(math) {
        let ranked: Vec<_> = igemm::ranked(conv, geom, precision, gpu.sm_count()).collect();
        for flat in [true, false] {
            let tiling = ranked.iter().filter(|s| (s.tile.pixels == PixelTile::Flat) == flat);
            ours.extend(tiling.take(IGEMM_VARIANTS).map(|s| Algorithm::Igemm(s.tile.name)));
        }
    }
    if conv.r * conv.s >= FFT_MIN_TAPS {
        if let Ok(tile) = fft::choose_tile(conv, geom) {
            ours.push(Algorithm::Fft(tile.name));
        }
        let mut shapes: Vec<_> = fft_gemm::sizes().iter().filter_map(|s| fft_gemm::shape(conv, geom, s).ok()).collect();
        shapes.retain(|s| s.workspace_bytes() <= limit && s.plan_bytes() <= heuristic::FFT_GEMM_PLAN_LIMIT);
        shapes.sort_by(|a, b| a.estimate_s.total_cmp(&b.estimate_s));
        ours.extend(shapes.iter().take(TILED_SIZES).map(|s| Algorithm::FftGemm(s.size.name)));
    }
    out.extend(ours.into_iter().filter(|a| a != first).map(build));

    match EngineConv::new(gpu, stream, conv) {
        Ok(graph) => {
            let graph = Rc::new(graph);
            let (configs, _failed_modes) = graph.configs(&ALL_HEURISTICS);
            for config in configs {
                if math == MathClass::Exact && config.class() != MathClass::Exact {
                    continue;
                }
                let tag = config.tag();
                let built = match graph.build(config) {
                    Ok(plan) if plan.workspace <= limit => {
                        Plan::from_cudnn(gpu, stream, conv, Built::Engine(graph.clone(), plan), w)
                    }
                    Ok(plan) => Err(crate::Error::WorkspaceTooSmall { needed: plan.workspace, given: limit }),
                    Err(e) => Err(e),
                };
                out.push(built.map_err(|e| (Algorithm::CudnnEngine(tag), e)));
            }
        }
        Err(e) => out.push(Err((Algorithm::CudnnHeuristic(math), e))),
    }
    let maths: &[Math] = match math {
        MathClass::Exact => &[Math::Fma],
        MathClass::Fast => &[Math::Fma, Math::Default],
    };
    match LegacyConv::new(gpu, stream, conv) {
        Ok(legacy) => {
            let legacy = Rc::new(legacy);
            for &m in maths {
                match legacy.heuristic(m) {
                    Ok(choices) => {
                        for choice in choices {
                            let algorithm = Algorithm::CudnnLegacy(choice.algo, choice.math);
                            let built = if choice.workspace <= limit {
                                Plan::from_cudnn(gpu, stream, conv, Built::Legacy(legacy.clone(), choice), w)
                            } else {
                                Err(crate::Error::WorkspaceTooSmall { needed: choice.workspace, given: limit })
                            };
                            out.push(built.map_err(|e| (algorithm, e)));
                        }
                    }
                    Err(e) => out.push(Err((Algorithm::CudnnHeuristic(math), e))),
                }
            }
        }
        Err(e) => out.push(Err((Algorithm::CudnnHeuristic(math), e))),
    }
    out
}
