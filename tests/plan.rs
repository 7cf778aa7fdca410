//! The planner without a GPU: algorithm names, cache keys and files, Find's selection rule on
//! synthetic timings, the heuristic's rules on the shipped suites' layers, and the bench's
//! regression guard.

use convkit::conv::epilogue::{Activation, Epilogue};
use convkit::{
    Conv2d,
    conv::{
        Algorithm,
        cudnn::{
            MathClass,
            legacy::{ALGOS, Algo, Math},
        },
        depthwise, direct, fft, fft_gemm, igemm,
    },
    harness::{
        bench::{compare_baseline, load_baseline},
        suites,
    },
    plan::{
        Origin,
        cache::{self, CacheDocument, CacheEntry, CacheFile, DeviceKey},
        find::{Trial, WORKSPACE_SLACK, select},
        heuristic,
    },
};
use kernels_gpu::conv::igemm::Precision;
use std::{ffi::OsString, path::PathBuf};

#[test]
fn every_algorithm_reads_back_from_its_text() {
    let mut all: Vec<Algorithm> = Vec::new();
    all.extend(direct::variants().iter().map(|t| Algorithm::Direct(t.name)));
    all.extend(fft::variants().iter().map(|t| Algorithm::Fft(t.name)));
    all.extend(fft_gemm::sizes().iter().map(|s| Algorithm::FftGemm(s.name)));
    all.extend(depthwise::variants().iter().map(|t| Algorithm::Depthwise(t.name)));
    all.extend(igemm::variants().iter().map(|t| Algorithm::Igemm(t.name)));
    all.push(Algorithm::CudnnEngine("eng67_k2=2_k13=0_k18=0_k25=1_k27=1_k28=1".into()));
    all.push(Algorithm::CudnnHeuristic(MathClass::Exact));
    all.push(Algorithm::CudnnHeuristic(MathClass::Fast));
    for algo in ALGOS {
        for math in [Math::Fma, Math::Default] {
            all.push(Algorithm::CudnnLegacy(algo, math));
        }
    }
    for a in &all {
        let text = a.to_string();
        assert_eq!(&text.parse::<Algorithm>().unwrap(), a, "{text}");
    }
    let legacy = Algorithm::CudnnLegacy(Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, Math::Fma);
    assert_eq!(legacy.to_string(), "cudnn-legacy:WINOGRAD_NONFUSED/FMA");
    for bad in [
        "",
        "direct_fwd_k3_p1",
        "fftgemm_7",
        "cudnn:",
        "cudnn:heuristic-tf32",
        "cudnn-legacy:FFT",
        "cudnn-legacy:FFT/TF32",
    ] {
        assert!(bad.parse::<Algorithm>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn the_cache_file_follows_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v))
    };
    assert_eq!(
        cache::path_from(env(&[("CONVKIT_PLAN_CACHE", "/x/p.json"), ("HOME", "/h")])),
        Some(PathBuf::from("/x/p.json"))
    );
    assert_eq!(
        cache::path_from(env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])),
        Some(PathBuf::from("/c/convkit/plans.json"))
    );
    assert_eq!(cache::path_from(env(&[("HOME", "/h")])), Some(PathBuf::from("/h/.cache/convkit/plans.json")));
    assert_eq!(
        cache::path_from(env(&[("CONVKIT_PLAN_CACHE", ""), ("HOME", "/h")])),
        Some(PathBuf::from("/h/.cache/convkit/plans.json"))
    );
    assert_eq!(cache::path_from(env(&[])), None);
}

fn device(driver: i32) -> DeviceKey {
    DeviceKey { gpu: "NVIDIA H200".into(), arch: 90, driver, cudnn: 91900, convkit: cache::build_id().into() }
}

#[test]
fn layer_keys_ignore_labels_and_separate_shapes_and_classes() {
    let a: Conv2d = "name=a,n=8,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=4".parse().unwrap();
    let b: Conv2d = "name=b,n=8,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=4".parse().unwrap();
    let c: Conv2d = "n=8,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=8".parse().unwrap();
    assert_eq!(
        cache::layer_key(&a, MathClass::Exact, &Epilogue::NONE),
        cache::layer_key(&b, MathClass::Exact, &Epilogue::NONE)
    );
    assert_ne!(
        cache::layer_key(&a, MathClass::Exact, &Epilogue::NONE),
        cache::layer_key(&a, MathClass::Fast, &Epilogue::NONE)
    );
    assert_ne!(
        cache::layer_key(&a, MathClass::Exact, &Epilogue::NONE),
        cache::layer_key(&c, MathClass::Exact, &Epilogue::NONE)
    );
    let fused = Epilogue { bias: true, activation: Activation::Relu, ..Epilogue::NONE };
    let fused_key = cache::layer_key(&a, MathClass::Exact, &fused);
    assert_ne!(cache::layer_key(&a, MathClass::Exact, &Epilogue::NONE), fused_key);
    assert!(fused_key.ends_with("epilogue=bias,relu"), "{fused_key}");
    let key = cache::layer_key(&a, MathClass::Fast, &Epilogue::NONE);
    for part in ["layout=nchw", "dtype=f32", "math=fast", "epilogue=none", "groups=4"] {
        assert!(key.contains(part), "{key}");
    }
    let last = Conv2d { layout: convkit::TensorLayout::Nhwc, ..a.clone() };
    let last_key = cache::layer_key(&last, MathClass::Fast, &Epilogue::NONE);
    assert_ne!(key, last_key);
    assert_eq!(last_key.matches("layout=").count(), 1, "{last_key}");
    assert!(last_key.contains(";layout=nhwc;"), "{last_key}");
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("convkit-cache-test-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir.join("sub").join("plans.json")
}

fn entry(layer: &str, algorithm: &str, driver: i32) -> CacheEntry {
    CacheEntry {
        device: device(driver),
        layer: layer.into(),
        algorithm: algorithm.into(),
        workspace: 1 << 20,
        time_ms: Some(0.5),
    }
}

#[test]
fn entries_survive_a_round_trip_and_match_only_their_own_versions() {
    let path = temp_path("roundtrip");
    let mut file = CacheFile::open(Some(path.clone()));
    assert!(file.warning().is_none(), "a missing file is an empty cache");
    file.insert(entry("L1", "fftgemm_56", 580)).unwrap();
    file.insert(entry("L2", "cudnn-legacy:WINOGRAD_NONFUSED/FMA", 580)).unwrap();
    file.insert(entry("L1", "fftconv_dw_72", 580)).unwrap(); // replaces
    let again = CacheFile::open(Some(path.clone()));
    assert!(again.warning().is_none());
    assert_eq!(again.entries().len(), 2);
    let choice = again.get(&device(580), "L1").unwrap().choice().unwrap();
    assert_eq!(choice.algorithm, Algorithm::Fft("fftconv_dw_72"));
    assert_eq!((choice.origin, choice.workspace, choice.time_ms), (Origin::CacheFile, 1 << 20, Some(0.5)));
    assert!(again.get(&device(575), "L1").is_none(), "another driver is another key");
    assert!(again.get(&device(580), "L3").is_none());
    // No temporary file is left beside it.
    let dir = path.parent().unwrap();
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
    std::fs::remove_dir_all(dir.parent().unwrap()).ok();
}

#[test]
fn writes_merge_what_another_process_wrote_meanwhile() {
    let path = temp_path("merge");
    let mut first = CacheFile::open(Some(path.clone()));
    let mut second = CacheFile::open(Some(path.clone()));
    first.insert(entry("A", "fftgemm_56", 580)).unwrap();
    second.insert(entry("B", "fftgemm_64", 580)).unwrap();
    let merged = CacheFile::open(Some(path.clone()));
    assert!(merged.get(&device(580), "A").is_some() && merged.get(&device(580), "B").is_some());
    std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).ok();
}

#[test]
fn corrupt_foreign_and_stale_files_are_ignored_with_a_warning_and_left_alone() {
    let current = serde_json::json!({ "format": cache::FORMAT, "version": cache::VERSION, "entries": [] }).to_string();
    assert!(CacheDocument::parse(&current).is_ok());
    let cases = [
        ("corrupt", "{\"format\": \"convkit-plan-cache\", \"version\": 1, \"entries\": [".to_owned(), "not valid JSON"),
        ("foreign", "{\"name\": \"my settings\"}".to_owned(), "not a convkit plan cache"),
        ("stale", serde_json::json!({ "format": cache::FORMAT, "version": 0, "entries": [] }).to_string(), "version"),
        (
            "malformed",
            serde_json::json!({ "format": cache::FORMAT, "version": cache::VERSION, "entries": [1] }).to_string(),
            "malformed",
        ),
    ];
    for (name, text, why) in cases {
        let path = temp_path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        let mut file = CacheFile::open(Some(path.clone()));
        let warning = file.warning().unwrap_or_else(|| panic!("{name}: no warning")).to_owned();
        assert!(warning.contains(why), "{name}: {warning}");
        assert!(file.entries().is_empty());
        file.insert(entry("L", "fftgemm_56", 580)).unwrap();
        assert!(file.get(&device(580), "L").is_some(), "{name}: kept in memory");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name}: the file was overwritten");
        std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap()).ok();
    }
}

#[test]
fn an_entry_naming_an_unknown_algorithm_gives_no_choice() {
    assert!(entry("L", "direct_fwd_k16_p1", 580).choice().is_none());
    assert!(entry("L", "cudnn-legacy:WINOGRAD_NONFUSED/FMA", 580).choice().is_some());
}

fn trial(ms: Option<f64>, workspace: usize) -> Trial {
    Trial {
        algorithm: Algorithm::CudnnEngine(format!("eng{workspace}")),
        class: MathClass::Exact,
        workspace,
        screen_ms: ms,
        ms,
        error: None,
    }
}

#[test]
fn find_takes_the_fastest_or_the_leanest_within_its_slack() {
    let trials =
        [trial(Some(1.00), 1000), trial(Some(1.05), 10), trial(Some(1.08), 0), trial(None, 0), trial(Some(2.0), 0)];
    assert_eq!(select(&trials, false), Some(0));
    assert_eq!(select(&trials, true), Some(2), "least workspace within {WORKSPACE_SLACK}");
    let far = [trial(Some(1.0), 1000), trial(Some(1.0 + WORKSPACE_SLACK + 0.01), 0)];
    assert_eq!(select(&far, true), Some(0));
    let tie = [trial(Some(1.02), 0), trial(Some(1.0), 1000), trial(Some(1.01), 0)];
    assert_eq!(select(&tie, true), Some(2), "equal workspace: the faster");
    assert_eq!(select(&[trial(None, 0)], true), None);
    assert_eq!(select(&[], true), None);
}

fn suite_layer(suite: &str, label: &str) -> Conv2d {
    suites::load_suite(suite).unwrap().into_iter().find(|c| c.name.as_deref() == Some(label)).unwrap()
}

#[test]
fn the_heuristic_follows_the_measured_rules() {
    let choose = |suite: &str, label: &str, math: MathClass, limit: usize| {
        let conv = suite_layer(suite, label);
        let geom = conv.geometry().unwrap();
        let choice = heuristic::choose(132, &conv, &geom, math, limit);
        assert_eq!(choice.origin, Origin::Heuristic);
        assert!(!choice.reason.is_empty());
        choice.algorithm
    };
    let gib = 1 << 30;
    for math in [MathClass::Exact, MathClass::Fast] {
        // Large depthwise filters on many channels: the fused FFT; one channel: tiled, 56 or
        // 64 wide (what Find measured fastest for the 45x45 layer at N = 1, 2 and 8).
        for label in ["replk-dw31-c128-56", "replk-dw13-c1024-7", "slak-dw51-c96-56"] {
            assert!(matches!(choose("large-kernel", label, math, gib), Algorithm::Fft(_)), "{label}");
        }
        assert_eq!(choose("large-kernel", "f45-n1-96", math, gib), Algorithm::FftGemm("fftgemm_56"));
        assert_eq!(choose("large-kernel", "f45-n8-96", math, gib), Algorithm::FftGemm("fftgemm_64"));
        for label in ["dense15-c64-128", "dense31-c64-128"] {
            assert!(matches!(choose("large-kernel", label, math, gib), Algorithm::FftGemm(_)), "{label}");
        }
        // Tiny layers: cuDNN's implicit GEMM for long reductions, else ours.
        let implicit = Algorithm::CudnnLegacy(Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, Math::Fma);
        assert_eq!(choose("smoke", "dense-s2-d2", math, gib), implicit);
        assert!(matches!(choose("smoke", "grouped-mult2", math, gib), Algorithm::Direct(_)));
        // Depthwise layers the depthwise kernel covers: on large maps to it (7x7 over many
        // planes only where its whole rows apply, else to the fused FFT); on 14- and 7-wide maps
        // to its whole planes per block, 3x3 to 7x7. Small filters and few channels per group:
        // the direct kernel.
        for label in [
            "mbv2-dw-c32-112",
            "mbv2-dw-c96-112-s2",
            "effb0-dw5-c240-28",
            "convnext-dw7-c96-56-n1",
            "convnext-dw7-c96-56-x3",
        ] {
            assert!(matches!(choose("depthwise", label, math, gib), Algorithm::Depthwise(_)), "{label} {math:?}");
        }
        for label in [
            "effb0-dw5-c480-14",
            "convnext-dw7-c384-14-x9",
            "convnext-dw7-c768-7-n1",
            "mbv2-dw-c384-14-x4",
            "mbv2-dw-c960-7-x3",
            "convnext-dw7-c768-7-x3",
            "mbv2-dw-c576-14-s2",
        ] {
            let choice = choose("depthwise", label, math, gib);
            assert!(
                matches!(choice, Algorithm::Depthwise(name) if name.starts_with("depthwise_planes_")),
                "{label} {math:?}: {choice:?}"
            );
        }
        // ... except with so many channels that the direct kernel's block per channel dominates.
        assert_eq!(choose("large", "zlimit-c200000", math, gib), Algorithm::Depthwise("depthwise_rows_k3_m1"));
        assert!(matches!(choose("default", "rnx50-c128-56", math, gib), Algorithm::Direct(_)), "{math:?}");
        // Channels last: the depthwise kernel's NHWC program where it applies, except 3x3 at
        // stride 2 (cuDNN's NHWC engine), else cuDNN.
        for conv in suites::load_suite("depthwise").unwrap().into_iter().filter(|c| c.label().ends_with("-nhwc")) {
            let label = conv.label();
            let choice = choose("depthwise", &label, math, gib);
            if conv.r == 3 && conv.stride[0] == 2 {
                assert_eq!(choice, Algorithm::CudnnHeuristic(math), "{label}");
            } else {
                assert!(
                    matches!(choice, Algorithm::Depthwise(name) if name.starts_with("depthwise_nhwc_")),
                    "{label} {math:?}"
                );
            }
        }
        // Other layers of fewer than 128 channels per group: the tensor-core kernel's NHWC tiles
        // (TF32 fast, 3xTF32 exact), except in the fast class for groups of power-of-two widths
        // (cuDNN's grouped engines); wider ones: cuDNN.
        let nhwc = |spec: &str| {
            let conv: Conv2d = format!("{spec},layout=nhwc").parse().unwrap();
            heuristic::choose(132, &conv, &conv.geometry().unwrap(), math, gib).algorithm
        };
        let resnext = "n=8,c=128,h=28,k=128,r=3,s=3,pad=1,groups=32";
        for spec in ["n=8,c=96,h=28,k=96,r=3,s=3,pad=1,groups=4", "n=8,c=60,h=28,k=240,r=1,s=1,groups=3", resnext] {
            if spec == resnext && math == MathClass::Fast {
                assert_eq!(nhwc(spec), Algorithm::CudnnHeuristic(math), "{spec}");
                continue;
            }
            let tile = match nhwc(spec) {
                Algorithm::Igemm(name) => igemm::variants().iter().find(|t| t.name == name).unwrap(),
                other => panic!("{spec}: {other}"),
            };
            assert!(tile.channels_last, "{spec}: {}", tile.name);
            assert_eq!(tile.precision, igemm::precisions(math)[0], "{spec}");
        }
        assert_eq!(nhwc("n=8,c=128,h=28,k=128,r=3,s=3,pad=1"), Algorithm::CudnnHeuristic(math));
        // Where cuDNN does not build, an NHWC layer falls back to 3xTF32 (the direct kernel
        // reads NCHW only).
        let wide: Conv2d = "n=8,c=128,h=28,k=128,r=3,s=3,pad=1,layout=nhwc".parse().unwrap();
        let fallback = heuristic::fallback(132, &wide, &wide.geometry().unwrap()).algorithm;
        let tile = igemm::variants().iter().find(|t| Algorithm::Igemm(t.name) == fallback);
        assert!(tile.is_some_and(|t| t.channels_last && t.precision == Precision::Tf32x3), "{fallback}");
    }
    // 16 and more channels per group (below 128): the tensor-core kernel, TF32 in the fast
    // class, 3xTF32 in the exact one (RegNetY-8GF's 56-wide groups on 28-wide maps too, which
    // took cuDNN's Winograd before the warpgroup tiles); 8 per group: TF32 in the fast class,
    // the direct kernel in the exact one; 4 per group: the direct kernel.
    let precision = |a: Algorithm| match a {
        Algorithm::Igemm(name) => igemm::variants().iter().find(|t| t.name == name).map(|t| t.precision),
        _ => None,
    };
    for (suite, label) in
        [("default", "rnx50-c512-14"), ("default", "rnx50-c1024-7"), ("grouped", "shuf-g8-c384-28-out")]
    {
        assert_eq!(precision(choose(suite, label, MathClass::Fast, gib)), Some(Precision::Tf32), "{label}");
        assert_eq!(precision(choose(suite, label, MathClass::Exact, gib)), Some(Precision::Tf32x3), "{label}");
    }
    assert_eq!(precision(choose("default", "rnx50-c256-28", MathClass::Fast, gib)), Some(Precision::Tf32));
    assert!(matches!(choose("default", "rnx50-c256-28", MathClass::Exact, gib), Algorithm::Direct(_)));
    assert!(matches!(choose("grouped", "rnx50-c128-56-x3", MathClass::Fast, gib), Algorithm::Direct(_)));
    assert_eq!(precision(choose("grouped", "rnx50-c256-56-s2", MathClass::Fast, gib)), Some(Precision::Tf32));
    assert!(matches!(choose("grouped", "rnx50-c256-56-s2", MathClass::Exact, gib), Algorithm::Direct(_)));
    let winograd = Algorithm::CudnnLegacy(Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, Math::Fma);
    assert_eq!(precision(choose("grouped", "regy8-c448-28-x3", MathClass::Exact, gib)), Some(Precision::Tf32x3));
    assert_eq!(precision(choose("grouped", "regy8-c224-56", MathClass::Exact, gib)), Some(Precision::Tf32x3));
    assert_eq!(precision(choose("grouped", "regy8-c448-28-x3", MathClass::Fast, gib)), Some(Precision::Tf32));
    assert_eq!(precision(choose("grouped", "regy8-c896-14-x9", MathClass::Exact, gib)), Some(Precision::Tf32x3));
    // Dense 3x3: cuDNN in both classes, its non-fused Winograd in the exact one.
    assert_eq!(choose("default", "dense3x3-c256-56", MathClass::Exact, gib), winograd);
    assert_eq!(choose("default", "dense3x3-c256-56", MathClass::Fast, gib), Algorithm::CudnnHeuristic(MathClass::Fast));
    // Without workspace the tiled FFT does not fit a dense layer; depthwise needs none.
    assert!(!matches!(choose("large-kernel", "dense15-c64-128", MathClass::Exact, 0), Algorithm::FftGemm(_)));
    assert!(matches!(choose("large-kernel", "f45-n1-96", MathClass::Exact, 0), Algorithm::FftGemm(_)));
}

#[test]
fn the_regression_guard_fails_only_beyond_its_threshold() {
    let base = vec![("a".to_owned(), 1.0), ("b".to_owned(), 2.0), ("gone".to_owned(), 1.0)];
    let now = vec![("a".to_owned(), 1.049), ("b".to_owned(), 2.2), ("new".to_owned(), 1.0)];
    let v = compare_baseline(&now, &base, 0.05);
    let verdict = |l: &str| v.iter().find(|v| v.label == l).unwrap().verdict();
    assert_eq!([verdict("a"), verdict("b"), verdict("new"), verdict("gone")], ["ok", "SLOWER", "new", "not run"]);
    assert_eq!(v.iter().filter(|v| v.regressed).count(), 1);
}

/// Each committed H200 baseline (`benches/baselines/h200-{suite}.json`) loads and times ours
/// on every layer of its suite, so `bench --suite S --baseline` checks the whole suite.
#[test]
fn committed_baselines_cover_their_suites() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/baselines");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let suite = path.file_stem().unwrap().to_str().unwrap().strip_prefix("h200-").unwrap().to_owned();
        let base = load_baseline(&path).unwrap();
        let layers = suites::load_suite(&suite).unwrap();
        assert_eq!(base.len(), layers.len(), "{suite}");
        for conv in &layers {
            let label = conv.label();
            let ms = base.iter().find(|(l, _)| *l == label).map(|(_, ms)| *ms);
            assert!(ms.is_some_and(|ms| ms.is_finite() && ms > 0.0), "{suite}: {label} has no time");
        }
        seen += 1;
    }
    assert!(seen >= 2, "the large-kernel and grouped baselines");
}

#[test]
fn a_planner_is_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<convkit::plan::Planner<'static>>();
}

fn tune_row(find_vs_best: f64, heuristic_vs_find: f64, us: [f64; 3]) -> convkit::harness::tune::TuneRow {
    use convkit::harness::tune::{Evaluation, TuneRow};
    let best_ms = 1.0;
    let find_ms = best_ms * find_vs_best;
    TuneRow {
        label: "l".into(),
        spec: "s".into(),
        math: "exact",
        heuristic: "h".into(),
        heuristic_reason: String::new(),
        heuristic_built: "h".into(),
        find: "f".into(),
        find_reason: String::new(),
        find_s: 0.0,
        candidates: 1,
        heuristic_us: us[0],
        cached_us: us[1],
        file_us: us[2],
        evaluation: Some(Evaluation {
            best: "b".into(),
            best_ms,
            find_ms,
            heuristic_ms: find_ms * heuristic_vs_find,
            cudnn: None,
            cudnn_ms: None,
            seconds: 0.0,
            trials: Vec::new(),
        }),
        trials: Vec::new(),
    }
}

#[test]
fn the_planner_figures_count_rows_within_their_margins() {
    use convkit::harness::tune::figures;
    let rows = [
        tune_row(1.0, 1.0, [3.0, 0.5, 2.0]),
        tune_row(1.03, 1.10, [4.0, 0.7, f64::NAN]),
        tune_row(1.031, 1.101, [2.0, 0.6, 1.0]),
        tune_row(1.2, 2.5, [1.0, 0.4, 1.5]),
    ];
    let f = figures(&rows);
    assert_eq!(f.layers, 4);
    assert_eq!((f.find_within_3pct, f.heuristic_within_10pct), (0.5, 0.5));
    assert_eq!(f.heuristic_worst, 2.5);
    assert_eq!((f.heuristic_us, f.cached_us, f.file_us), (4.0, 0.7, 2.0), "worst medians, NaN (no file) left out");
}
