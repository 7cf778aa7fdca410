//! `convkit tune`: Find on every layer of a suite (filling the plan cache), and with
//! `--evaluate` the planner's three figures: Find's choice against an exhaustive search, the
//! heuristic's choice against Find's, and how long deciding takes.
//!
//! The evaluation is one more, longer search ([`find::THOROUGH`]: twice the finalists of Find's
//! screening, three times the rounds) in which the heuristic's choice and Find's are finalists
//! whatever their screening; both ratios come from its interleaved medians, so the compared
//! times share one measurement. It reuses Find's screening (the slowest part: cuDNN proposes
//! configurations that take seconds a launch) and follows the same rule as Find's choice
//! ([`find::select`]).

use crate::{
    Conv2d, Gpu, Result,
    conv::{Algorithm, cudnn::MathClass},
    plan::{
        Choice, Mode, Origin, Plan, PlanOptions, Planner,
        find::{self, FindReport},
    },
};
use serde::Serialize;
use std::time::Instant;

/// Decisions timed per layer for the decision-time figures.
const DECISIONS: usize = 200;

/// One layer in one math class.
#[derive(Clone, Debug, Serialize)]
pub struct TuneRow {
    pub label: String,
    pub spec: String,
    pub math: &'static str,
    pub heuristic: String,
    pub heuristic_reason: String,
    /// What the heuristic's choice runs once built (a cuDNN heuristic pick's engine).
    pub heuristic_built: String,
    pub find: String,
    pub find_reason: String,
    pub find_s: f64,
    pub candidates: usize,
    /// Median microseconds of a heuristic decision by a planner with empty caches.
    pub heuristic_us: f64,
    /// Median microseconds of a decision from the in-memory cache.
    pub cached_us: f64,
    /// Microseconds of the first decision of a new planner, from the cache file (NaN without
    /// a file).
    pub file_us: f64,
    pub evaluation: Option<Evaluation>,
    /// Find's candidates: (algorithm, screening ms, final ms, error).
    pub trials: Vec<TrialRow>,
}

/// One candidate of a search, for the JSON record.
#[derive(Clone, Debug, Serialize)]
pub struct TrialRow {
    pub algorithm: String,
    pub workspace: usize,
    pub screen_ms: Option<f64>,
    pub ms: Option<f64>,
    pub error: Option<String>,
}

impl TrialRow {
    pub fn of(report: &FindReport) -> Vec<TrialRow> {
        report
            .trials
            .iter()
            .map(|t| TrialRow {
                algorithm: t.algorithm.to_string(),
                workspace: t.workspace,
                screen_ms: t.screen_ms,
                ms: t.ms,
                error: t.error.clone(),
            })
            .collect()
    }
}

/// The exhaustive search's verdict on one layer.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    pub best: String,
    pub best_ms: f64,
    pub find_ms: f64,
    pub heuristic_ms: f64,
    /// cuDNN's fastest finalist (both APIs).
    pub cudnn: Option<String>,
    pub cudnn_ms: Option<f64>,
    pub seconds: f64,
    pub trials: Vec<TrialRow>,
}

impl Evaluation {
    pub fn find_vs_best(&self) -> f64 {
        self.find_ms / self.best_ms
    }

    pub fn heuristic_vs_find(&self) -> f64 {
        self.heuristic_ms / self.find_ms
    }

    /// Find's choice against cuDNN's best (above 1: slower than cuDNN).
    pub fn find_vs_cudnn(&self) -> Option<f64> {
        self.cudnn_ms.map(|c| self.find_ms / c)
    }
}

/// Tunes `conv` in `math` with `planner` (whose cache file receives Find's choice), reusing the
/// screening of `screened`, a search of the same layer in another class; returns Find's report
/// with the row, for the next class.
pub fn tune_layer(
    planner: &Planner,
    conv: &Conv2d,
    math: MathClass,
    evaluate: bool,
    screened: Option<&FindReport>,
) -> Result<(TuneRow, FindReport)> {
    let gpu = planner.gpu();
    let heuristic_opts = PlanOptions { math, mode: Mode::Heuristic, ..PlanOptions::default() };
    let find_opts = PlanOptions { mode: Mode::Find, ..heuristic_opts.clone() };

    let heuristic_us = median_us(DECISIONS, || {
        let fresh = Planner::with_cache_file(gpu, None)?;
        let started = Instant::now();
        fresh.choose(conv, &heuristic_opts)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    let heuristic = Planner::with_cache_file(gpu, None)?.choose(conv, &heuristic_opts)?;
    let heuristic_built = built(planner, conv, &heuristic, &heuristic_opts)?;

    let report = planner.find(conv, &find_opts, &find::QUICK, &[], screened)?;
    let cached_us = median_us(DECISIONS, || {
        let started = Instant::now();
        planner.choose(conv, &find_opts)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    // A new planner on the same file: its first decision reads the file's entry.
    let file_us = match planner.cache_path() {
        Some(path) => {
            let fresh = Planner::with_cache_file(gpu, Some(path))?;
            let started = Instant::now();
            let choice = fresh.choose(conv, &find_opts)?;
            let us = started.elapsed().as_secs_f64() * 1e6;
            if choice.origin == Origin::CacheFile { us } else { f64::NAN }
        }
        None => f64::NAN,
    };

    let evaluation = if evaluate {
        let must = [heuristic_built.clone(), report.choice.algorithm.clone()];
        let limit = planner.workspace_limit(&find_opts);
        let exhaustive = find::search(planner, conv, &find_opts, limit, &find::THOROUGH, &must, Some(&report))?;
        Some(evaluation(&exhaustive, &report, &heuristic_built)?)
    } else {
        None
    };
    let row = TuneRow {
        label: conv.label(),
        spec: conv.to_string(),
        math: math.name(),
        heuristic: heuristic.algorithm.to_string(),
        heuristic_reason: heuristic.reason,
        heuristic_built: heuristic_built.to_string(),
        find: report.choice.algorithm.to_string(),
        find_reason: report.choice.reason.clone(),
        find_s: report.seconds,
        candidates: report.trials.iter().filter(|t| t.error.is_none()).count(),
        heuristic_us,
        cached_us,
        file_us,
        evaluation,
        trials: TrialRow::of(&report),
    };
    Ok((row, report))
}

/// The algorithm a choice runs once built (where it builds; else the plan's fallback).
fn built(planner: &Planner, conv: &Conv2d, choice: &Choice, opts: &PlanOptions) -> Result<Algorithm> {
    let gpu: &Gpu = planner.gpu();
    let geom = conv.geometry()?;
    let mut w = gpu.alloc::<f32>(geom.w_len)?;
    gpu.fill_uniform(gpu.stream(), &mut w, 7)?;
    let limit = planner.workspace_limit(opts);
    match Plan::new(gpu, gpu.stream(), conv, &choice.algorithm, &w, limit) {
        Ok(plan) => Ok(plan.algorithm().clone()),
        Err(_) => Ok(planner.plan(gpu.stream(), conv, opts, &w)?.algorithm().clone()),
    }
}

fn evaluation(exhaustive: &FindReport, find: &FindReport, heuristic: &Algorithm) -> Result<Evaluation> {
    let missing = |what: &str, a: &Algorithm| crate::Error::Timing(format!("the evaluation did not time {what} {a}"));
    let best = &exhaustive.choice.algorithm;
    let best_ms = exhaustive.ms_of(best).ok_or_else(|| missing("its choice", best))?;
    let find_ms =
        exhaustive.ms_of(&find.choice.algorithm).ok_or_else(|| missing("Find's choice", &find.choice.algorithm))?;
    let heuristic_ms = exhaustive.ms_of(heuristic).ok_or_else(|| missing("the heuristic's choice", heuristic))?;
    let cudnn = exhaustive
        .trials
        .iter()
        .filter(|t| !t.algorithm.is_convkit())
        .filter_map(|t| t.ms.map(|ms| (t.algorithm.to_string(), ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    Ok(Evaluation {
        best: best.to_string(),
        best_ms,
        find_ms,
        heuristic_ms,
        cudnn_ms: cudnn.as_ref().map(|c| c.1),
        cudnn: cudnn.map(|c| c.0),
        seconds: exhaustive.seconds,
        trials: TrialRow::of(exhaustive),
    })
}

fn median_us(count: usize, mut once: impl FnMut() -> Result<f64>) -> Result<f64> {
    let mut s = (0..count).map(|_| once()).collect::<Result<Vec<f64>>>()?;
    s.sort_by(f64::total_cmp);
    Ok(s[s.len() / 2] * 1e6)
}

/// The three figures over `rows` (those with an evaluation).
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub layers: usize,
    /// Share of layers where Find's choice is within 3% of the exhaustive best.
    pub find_within_3pct: f64,
    /// Share of layers where the heuristic's choice is within 10% of Find's.
    pub heuristic_within_10pct: f64,
    pub heuristic_worst: f64,
    /// Worst (largest) median decision times, microseconds.
    pub heuristic_us: f64,
    pub cached_us: f64,
    pub file_us: f64,
}

pub fn figures(rows: &[TuneRow]) -> Figures {
    let evaluated: Vec<&Evaluation> = rows.iter().filter_map(|r| r.evaluation.as_ref()).collect();
    let share = |ok: usize| if evaluated.is_empty() { f64::NAN } else { ok as f64 / evaluated.len() as f64 };
    let worst = |f: fn(&TuneRow) -> f64| rows.iter().map(f).filter(|v| !v.is_nan()).fold(0.0, f64::max);
    Figures {
        layers: evaluated.len(),
        find_within_3pct: share(evaluated.iter().filter(|e| e.find_vs_best() <= 1.03).count()),
        heuristic_within_10pct: share(evaluated.iter().filter(|e| e.heuristic_vs_find() <= 1.10).count()),
        heuristic_worst: evaluated.iter().map(|e| e.heuristic_vs_find()).fold(0.0, f64::max),
        heuristic_us: worst(|r| r.heuristic_us),
        cached_us: worst(|r| r.cached_us),
        file_us: worst(|r| r.file_us),
    }
}
