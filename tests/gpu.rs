//! GPU tests: run on the device with `--include-ignored` (scripts/gpu-stage stages them).
//! Without a GPU they fail at `Gpu::new`, they never pass silently. They take the GPU one at
//! a time, whatever `--test-threads` says: the timing tests need it to themselves.

use convkit::timing::{DeviceQueue, GpuQueue, Samples, time_round};
use convkit::{
    Conv2d, Error, Gpu, ModuleKind, TensorLayout,
    cgemm::{self as cgemm_api, BatchedGemm, Complex32, Layout, Op, Products},
    conv::cudnn::{
        self, MathClass,
        engines::{ALL_HEURISTICS, EngineConv},
        legacy::{LegacyConv, Math},
    },
    conv::epilogue::{Activation, Epilogue},
    conv::igemm,
    direct,
    harness::{
        cgemm::{self, CgemmCase},
        check::{self, CUDNN_EXACT, CUDNN_FAST, Checker},
        cublas::{Cublas, CublasGemm, CublasLtPlan},
        reference,
    },
    ptx::CUBIN_MODULES,
};
use cudarc::driver::{CudaSlice, CudaViewMut};
use kernels_gpu::{conv::depthwise::DepthwiseProgram, random::mix, verify::Tolerance};
use std::{
    sync::{Mutex, MutexGuard},
    time::Duration,
};

/// The GPU, held by one test at a time until the returned value drops.
struct TestGpu {
    gpu: Gpu,
    _turn: MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestGpu {
    type Target = Gpu;

    fn deref(&self) -> &Gpu {
        &self.gpu
    }
}

fn gpu() -> TestGpu {
    static TURN: Mutex<()> = Mutex::new(());
    // A test that panicked while holding it leaves it poisoned; the next one still runs.
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    TestGpu { gpu: Gpu::new(0).expect("this test needs a CUDA GPU and driver"), _turn: turn }
}

/// Random x and w for `conv`, on the host (for the CPU reference) and on the GPU.
fn inputs(gpu: &Gpu, conv: &Conv2d, seed: u64) -> (Vec<f32>, Vec<f32>, CudaSlice<f32>, CudaSlice<f32>) {
    let geom = conv.geometry().unwrap();
    let x_host = reference::host_uniform(mix(seed, 1), geom.x_len);
    let w_host = reference::host_uniform(mix(seed, 2), geom.w_len);
    let (x, w) = (gpu.upload(&x_host).unwrap(), gpu.upload(&w_host).unwrap());
    (x_host, w_host, x, w)
}

/// Random cases per run; `CONVKIT_GPU_CASES` lowers it under compute-sanitizer.
fn case_count() -> usize {
    std::env::var("CONVKIT_GPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(240)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_embedded_cubin_runs_where_the_build_has_one_for_this_gpu() {
    let gpu = gpu();
    let built = CUBIN_MODULES.iter().any(|(cc, _)| *cc == gpu.arch());
    let expected = if built { ModuleKind::Cubin } else { ModuleKind::Ptx };
    // A cubin the driver refused would leave the PTX silently; this is where that shows.
    let cubins: Vec<u32> = CUBIN_MODULES.iter().map(|(cc, _)| *cc).collect();
    assert_eq!(gpu.module_kind(), expected, "sm_{} with cubins for {cubins:?}", gpu.arch());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_variant_matches_the_reference_on_random_shapes() {
    let gpu = gpu();
    let mut rng = check::rng(0x5eed_c0de);
    let mut checker = Checker::new(&gpu, 256 << 20, 5e7).unwrap();
    let cases = case_count();
    let mut failures = Vec::new();
    for i in 0..cases {
        let mut case = check::random_case(&mut rng, i);
        case.epilogue = check::random_epilogue(&mut rng);
        let r = checker.check(&case, mix(7, i as u64)).unwrap();
        assert!(!r.variants.is_empty(), "{}: no variant ran", case.conv);
        if !r.passed() {
            failures.push(format!("{} worst ratio {:.2} cudnn {:?}", case.conv, r.worst_ratio(), r.cudnn));
        }
    }
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_activation_with_bias_residual_and_shuffle_in_every_family() {
    let gpu = gpu();
    let mut checker = Checker::new(&gpu, 256 << 20, 0.0).unwrap();
    // Direct and tensor-core kernels (grouped, several outputs per group), the depthwise kernel
    // with a channel multiplier of 2 (the shuffle moves its channels), and a large depthwise
    // filter (the FFT paths, through the stand-alone pass); the depthwise planes program (14 x
    // 14 maps, which adds the bias before its output stage); channels last, grouped: the
    // tensor-core kernel's NHWC tiles (the only family of ours that reads it).
    let shapes = [
        "n=2,c=48,h=13,w=17,k=72,r=3,s=3,pad=1,groups=3",
        "n=3,c=12,h=20,w=24,k=24,r=3,s=3,pad=1,stride=2,groups=12",
        "n=3,c=10,h=14,w=14,k=20,r=3,s=3,pad=1,groups=10",
        "n=2,c=8,h=40,w=36,k=8,r=15,s=15,pad=7,groups=8",
        "n=2,c=48,h=13,w=17,k=72,r=3,s=3,pad=1,groups=3,layout=nhwc",
    ];
    for shape in shapes {
        let conv: Conv2d = shape.parse().unwrap();
        let families_expected = if conv.layout == TensorLayout::Nhwc { 1 } else { 2 };
        for (i, activation) in Activation::ALL.into_iter().enumerate() {
            let mut case = check::Case::new(conv.clone());
            case.epilogue = Epilogue { bias: true, activation, residual: i % 2 == 0, shuffle: true };
            let r = checker.check(&case, mix(11, i as u64)).unwrap();
            let families: std::collections::BTreeSet<_> =
                r.variants.iter().map(|v| v.tile.split('_').next().unwrap_or_default()).collect();
            assert!(r.passed(), "{shape} with {}: worst ratio {:.2}", case.epilogue, r.worst_ratio());
            assert!(families.len() >= families_expected, "{shape}: only {families:?} ran");
            assert!(r.variants.iter().any(|v| v.tile.starts_with("igemm")) || conv.r > 3, "{shape}: {families:?}");
            assert!(conv.h != 14 || r.variants.iter().any(|v| v.tile.contains("planes")), "{shape}: {families:?}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gpu_fill_and_reference_agree_with_the_host_to_the_bit() {
    let gpu = gpu();
    let stream = gpu.stream();
    let mut data = gpu.alloc::<f32>(100_003).unwrap();
    gpu.fill_uniform(stream, &mut data, 42).unwrap();
    assert_eq!(gpu.download(&data).unwrap(), reference::host_uniform(42, 100_003));

    for spec in ["n=2,c=6,h=13,w=11,k=12,r=3,s=5,pad=1x2,stride=2x1,dil=1x2,groups=3", "n=1,c=2,h=50,k=1,r=45,pad=22"] {
        let conv: Conv2d = spec.parse().unwrap();
        let (mut x_host, w_host, mut x, w) = inputs(&gpu, &conv, 5);
        for (i, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY].into_iter().enumerate() {
            x_host[i * 97] = v;
        }
        gpu.stream().memcpy_htod(&x_host, &mut x).unwrap();
        let cpu = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
        let on_gpu = reference::gpu_reference(&gpu, stream, &conv, &x, &w).unwrap();
        let same =
            |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits() || p.is_nan() && q.is_nan());
        assert!(same(&gpu.download(&on_gpu.value).unwrap(), &cpu.value), "{spec}: values");
        assert!(same(&gpu.download(&on_gpu.magnitude).unwrap(), &cpu.magnitude), "{spec}: magnitudes");
        assert!(cpu.value.iter().any(|v| v.is_nan()) && cpu.value.iter().any(|v| v.is_infinite()));
    }
}

/// A bit pattern no arithmetic produces (a signalling NaN with a payload).
const GUARD_BITS: u32 = 0x7f80_c0de;
const GUARD: usize = 4096;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_variant_writes_all_of_its_output_and_nothing_else() {
    let gpu = gpu();
    let stream = gpu.stream();
    let shapes = [
        "n=2,c=6,h=13,w=11,k=6,r=3,s=3,pad=1,groups=6",
        "n=3,c=8,h=19,w=23,k=20,r=5,s=3,pad=2x1,stride=2,groups=4",
        "n=1,c=3,h=40,w=37,k=9,r=7,s=7,pad=3,dil=2",
        "n=2,c=4,h=9,w=9,k=12,r=1,s=1,groups=2",
        // Rows shorter than one row-window thread, and a dilated height.
        "n=4,c=2,h=11,w=3,k=2,r=3,s=3,pad=1,dil=2x1,groups=2",
        // More taps than one shared-memory chunk holds for every variant.
        "n=1,c=64,h=12,w=12,k=16,r=9,s=9,pad=4",
    ];
    for (seed, spec) in shapes.into_iter().enumerate() {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, &conv, seed as u64);
        let want = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
        let bound = Tolerance::f32_sum(geom.taps(&conv) as u64);
        for tile in direct::variants() {
            if !tile.supports(conv.stride[1] as u32, conv.dilation[1] as u32) {
                let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
                let err = direct::forward_with(&gpu, stream, &conv, tile, &x, &w, &mut y).unwrap_err();
                assert!(matches!(err, Error::UnsupportedTile { .. }), "{} on {spec}: {err}", tile.name);
                continue;
            }
            let what = format!("{} on {spec}", tile.name);
            for (offset, got) in guarded_outputs(&gpu, geom.y_len, &what, |y| {
                direct::forward_with(&gpu, stream, &conv, tile, &x, &w, y).unwrap()
            }) {
                let stats = reference::compare_host(&got, &want, bound);
                assert!(stats.passed(), "{what} at offset {offset}: {stats:?}");
            }
        }
    }
}

/// Runs `launch` into NaN-poisoned outputs of `len` elements between guard bands, 16-byte
/// aligned (vector stores where the shapes allow) and 4 bytes off; fails if anything outside
/// them was written. Returns each placement's offset and output.
fn guarded_outputs(
    gpu: &Gpu,
    len: usize,
    what: &str,
    mut launch: impl FnMut(&mut CudaViewMut<f32>),
) -> Vec<(usize, Vec<f32>)> {
    [GUARD, GUARD + 1]
        .into_iter()
        .map(|offset| {
            let mut y: CudaSlice<f32> = gpu.alloc(len + 2 * GUARD).unwrap();
            gpu.fill_bits(&mut y, GUARD_BITS).unwrap();
            let range = offset..offset + len;
            gpu.poison(&mut y.slice_mut(range.clone())).unwrap();
            launch(&mut y.slice_mut(range.clone()));
            let got = gpu.download(&y).unwrap();
            for (side, band) in [("before", &got[..offset]), ("after", &got[range.end..])] {
                let bad = band.iter().filter(|v| v.to_bits() != GUARD_BITS).count();
                assert_eq!(bad, 0, "{what}: wrote {bad} elements {side} its output");
            }
            (offset, got[range].to_vec())
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn depthwise_variants_write_all_of_their_output_and_nothing_else() {
    let gpu = gpu();
    let stream = gpu.stream();
    // Each shape, and how many tile, rows (rows of a multiple of 4·stride), channels-last and
    // planes (small maps) variants compute it.
    let shapes = [
        // Edge tiles on both sides, planes that leave the last block partly empty, K = 2C.
        ("n=3,c=5,h=37,w=45,k=5,r=3,s=3,pad=1,groups=5", [3, 0, 0, 0]),
        ("n=2,c=7,h=20,w=29,k=14,r=5,s=5,pad=1x2,stride=2,groups=7", [3, 0, 0, 0]),
        ("n=1,c=3,h=70,w=66,k=3,r=7,s=7,pad=3,groups=3", [3, 0, 0, 0]),
        ("n=2,c=4,h=9,w=12,k=8,r=9,s=9,pad=4x0,stride=2,groups=4", [3, 0, 0, 0]),
        // More planes than the grid's z holds for one-plane blocks: several launches; whole
        // rows of one lane, 32 planes per warp.
        ("n=2,c=40000,h=4,w=4,k=40000,r=3,s=3,pad=1,groups=40000", [3, 1, 0, 1]),
        // Rows: two planes per warp with lanes left idle, segments down the map, K = 2C, 32
        // lanes of 8 columns at stride 2, odd heights.
        ("n=3,c=5,h=37,w=44,k=5,r=3,s=3,pad=1,groups=5", [3, 1, 0, 0]),
        ("n=2,c=7,h=21,w=24,k=14,r=5,s=5,pad=2,groups=7", [3, 1, 0, 1]),
        ("n=2,c=6,h=19,w=48,k=6,r=7,s=7,pad=3,stride=2,groups=6", [3, 1, 0, 0]),
        ("n=1,c=5,h=13,w=256,k=10,r=3,s=3,pad=1,stride=2,groups=5", [3, 1, 0, 0]),
        // Channels last: 2 and 1 channels per thread (the misaligned placement runs the
        // 1-channel variant), ragged thread columns, one-column maps, uneven padding.
        ("n=3,c=12,h=17,w=15,k=12,r=3,s=3,pad=1,groups=12,layout=nhwc", [0, 0, 2, 0]),
        ("n=1,c=36,h=9,w=30,k=36,r=3,s=3,pad=0x1,stride=2,groups=36,layout=nhwc", [0, 0, 1, 0]),
        ("n=2,c=10,h=20,w=23,k=10,r=5,s=5,pad=2x1,groups=10,layout=nhwc", [0, 0, 1, 0]),
        ("n=2,c=9,h=21,w=7,k=9,r=5,s=5,pad=2,stride=2,groups=9,layout=nhwc", [0, 0, 1, 0]),
        ("n=2,c=6,h=22,w=7,k=6,r=7,s=7,pad=3x0,groups=6,layout=nhwc", [0, 0, 1, 0]),
        ("n=1,c=5,h=15,w=13,k=5,r=7,s=7,pad=3,stride=2,groups=5,layout=nhwc", [0, 0, 1, 0]),
        // Planes: an odd count of 7x7 planes (the last 16-byte copy and store partial), 14x14
        // at stride 2, ragged strips and uneven padding, padding of K - 1, K = 2C; 7x7 and 5x5
        // filters on maps of at most 7 rows (rows of padding above and below).
        ("n=3,c=7,h=7,w=7,k=7,r=3,s=3,pad=1,groups=7", [3, 0, 0, 1]),
        ("n=2,c=33,h=7,w=7,k=33,r=7,s=7,pad=3,groups=33", [3, 0, 0, 1]),
        ("n=1,c=13,h=5,w=9,k=13,r=5,s=5,pad=2x1,groups=13", [3, 0, 0, 1]),
        ("n=2,c=9,h=14,w=14,k=9,r=5,s=5,pad=2,stride=2,groups=9", [3, 0, 0, 1]),
        ("n=1,c=30,h=14,w=13,k=30,r=7,s=7,pad=3x2,groups=30", [3, 0, 0, 1]),
        ("n=2,c=5,h=10,w=11,k=10,r=3,s=3,pad=2x0,groups=5", [3, 0, 0, 1]),
    ];
    for (seed, (spec, counts)) in shapes.into_iter().enumerate() {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, &conv, 20 + seed as u64);
        let want = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
        let bound = Tolerance::f32_sum(geom.taps(&conv) as u64);
        let tiles: Vec<_> = convkit::depthwise::supporting_variants(&conv).collect();
        let program = |p| tiles.iter().filter(|t| t.program == p).count();
        let programs =
            [DepthwiseProgram::Tiles, DepthwiseProgram::Rows, DepthwiseProgram::Channels, DepthwiseProgram::Planes];
        assert_eq!(programs.map(program), counts, "{spec}: variants of each program");
        for tile in tiles {
            let what = format!("{} on {spec}", tile.name);
            for (offset, got) in guarded_outputs(&gpu, geom.y_len, &what, |y| {
                convkit::depthwise::forward_with(&gpu, stream, &conv, tile, &x, &w, y).unwrap()
            }) {
                let stats = reference::compare_host(&got, &want, bound);
                assert!(stats.passed(), "{what} at offset {offset}: {stats:?}");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tensor_core_variants_write_all_of_their_output_and_nothing_else() {
    let gpu = gpu();
    let stream = gpu.stream();
    let shapes = [
        // 4-wide groups (several per block), a ragged last pixel tile, padding on both sides.
        "n=3,c=32,h=13,w=11,k=32,r=3,s=3,pad=1,groups=8",
        // 24-wide groups over a prime group count, stride 2: one group per block.
        "n=2,c=120,h=15,w=15,k=120,r=3,s=3,pad=1,stride=2,groups=5",
        // Wider than the widest column tile, ragged channel chunks, dilation, rectangular.
        "n=2,c=70,h=12,w=17,k=150,r=3,s=2,pad=2x1,dilation=2,groups=1",
        // 1x1 grouped (ShuffleNet), output planes not a multiple of 4 (no vector stores).
        "n=2,c=60,h=7,w=7,k=240,r=1,s=1,groups=3",
        // More block groups than the grid's z holds: several launches.
        "n=1,c=70000,h=3,w=3,k=70000,r=3,s=3,pad=1,groups=70000",
        // Output rows a multiple of 4 wide (the spatial tiles' vector stores), ragged tiles.
        "n=2,c=64,h=20,w=28,k=64,r=3,s=3,pad=1,groups=4",
        // 5x5: the spatial tiles of 16 columns and more split each chunk's taps into steps
        // where that gives them more busy blocks (these many work items), else take one step
        // (the few of the small layer).
        "n=2,c=48,h=14,w=13,k=48,r=5,s=5,pad=2,groups=2",
        "n=2,c=48,h=14,w=13,k=48,r=5,s=5,pad=2,groups=2,layout=nhwc",
        "n=4,c=256,h=24,w=24,k=256,r=5,s=5,pad=2,groups=64",
        "n=4,c=256,h=24,w=24,k=256,r=5,s=5,pad=2,groups=64,layout=nhwc",
        // Channels last (the NHWC flat and spatial tiles): 4-wide groups, 16-byte copies and stores where
        // y is aligned; 24-wide groups at stride 2; channel counts not a multiple of 4 (4-byte
        // copies, 4-byte stores); 1x1 grouped.
        "n=3,c=32,h=13,w=11,k=32,r=3,s=3,pad=1,groups=8,layout=nhwc",
        "n=2,c=120,h=15,w=15,k=120,r=3,s=3,pad=1,stride=2,groups=5,layout=nhwc",
        "n=2,c=70,h=12,w=17,k=150,r=3,s=2,pad=2x1,dilation=2,groups=1,layout=nhwc",
        "n=2,c=60,h=7,w=7,k=240,r=1,s=1,groups=3,layout=nhwc",
    ];
    let mut ran = std::collections::HashSet::new();
    // Plans whose chunks run in steps, and plans that take one step where `igemm::shape` split.
    let (mut in_steps, mut steps_undone) = (0, 0);
    for (seed, spec) in shapes.into_iter().enumerate() {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, &conv, 40 + seed as u64);
        let want = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
        let taps = (conv.r * conv.s) as u32;
        for tile in igemm::supporting_variants(&gpu, &conv, &geom) {
            ran.insert(tile.name);
            let plan = igemm::IgemmPlan::new(&gpu, stream, &conv, tile, &w).unwrap();
            let steps = |s: &igemm::IgemmShape| s.spatial.is_some_and(|s| s.taps_per_step < taps);
            in_steps += steps(plan.shape()) as u32;
            steps_undone += (steps(&igemm::shape(&conv, &geom, tile)) && !steps(plan.shape())) as u32;
            let bound = igemm::tolerance(&conv, &geom, tile);
            let what = format!("{} on {spec}", tile.name);
            for (offset, got) in
                guarded_outputs(&gpu, geom.y_len, &what, |y| plan.forward(&gpu, stream, &x, y).unwrap())
            {
                let stats = reference::compare_host(&got, &want, bound);
                assert!(stats.passed(), "{what} at offset {offset}: {stats:?}");
            }
        }
    }
    // No variant left out unnoticed (NHWC 16x8 and 8x16 spatial tiles refuse the stride-2
    // shapes: their halos pass what the copies cover).
    let missed: Vec<_> = igemm::variants()
        .iter()
        .filter(|t| igemm::in_module(&gpu, t) && !ran.contains(t.name))
        .map(|t| t.name)
        .collect();
    assert!(missed.is_empty(), "variants no shape ran: {missed:?}");
    assert!(in_steps > 0 && steps_undone > 0, "{in_steps} plans in steps, {steps_undone} split ones in one step");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn packed_grid_beyond_the_z_limit_is_split_into_launches() {
    let gpu = gpu();
    // 70000 groups of one k-tile each: packed z-indices beyond 65535.
    let conv: Conv2d = "n=2,c=70000,h=5,w=6,k=70000,r=3,s=3,pad=1,groups=70000".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let tile = direct::choose_tile(&conv, &geom, gpu.sm_count());
    assert!(direct::grid_z(&conv, &geom, &tile) > 65535);
    let (x_host, w_host, x, w) = inputs(&gpu, &conv, 11);
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    gpu.poison(&mut y).unwrap();
    direct::forward(&gpu, gpu.stream(), &conv, &x, &w, &mut y).unwrap();
    let want = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
    let stats = reference::compare_host(&gpu.download(&y).unwrap(), &want, Tolerance::f32_sum(9));
    assert!(stats.passed(), "{stats:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_second_stream_is_ordered_by_event_tracking() {
    let gpu = gpu();
    let conv: Conv2d = "n=8,c=64,h=56,k=64,r=3,pad=1,groups=64".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let (x_host, w_host, x, w) = inputs(&gpu, &conv, 13);
    let other = gpu.stream().fork().unwrap();
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    gpu.poison(&mut y).unwrap();
    // Written on `other`, read back on the default stream with no explicit synchronisation.
    direct::forward(&gpu, &other, &conv, &x, &w, &mut y).unwrap();
    let got = gpu.download(&y).unwrap();
    let want = reference::cpu_reference(&conv, &x_host, &w_host).unwrap();
    assert!(reference::compare_host(&got, &want, Tolerance::f32_sum(9)).passed());
    gpu.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mismatched_buffers_are_typed_errors() {
    let gpu = gpu();
    let conv: Conv2d = "n=2,c=4,h=8,k=4,r=3".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let x = gpu.alloc::<f32>(geom.x_len).unwrap();
    let w = gpu.alloc::<f32>(geom.w_len + 1).unwrap();
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    match direct::forward(&gpu, gpu.stream(), &conv, &x, &w, &mut y) {
        Err(Error::BufferSize { buffer: "w", expected, got }) => {
            assert_eq!((expected, got), (geom.w_len, geom.w_len + 1))
        }
        other => panic!("expected a BufferSize error for w, got {other:?}"),
    }
    let bad: Conv2d = "n=2,c=4,h=8,k=6,r=3,groups=4".parse().unwrap();
    let result = direct::forward(&gpu, gpu.stream(), &bad, &x, &w, &mut y);
    assert!(matches!(result, Err(Error::InvalidShape { field: "groups", .. })));
    let small = gpu.alloc::<u8>(16).unwrap();
    let legacy = LegacyConv::new(&gpu, gpu.stream(), &conv).unwrap();
    let needy = legacy.heuristic(Math::Fma).unwrap().into_iter().find(|c| c.workspace > 16);
    if let Some(choice) = needy {
        let w = gpu.alloc::<f32>(geom.w_len).unwrap();
        let mut ws = small;
        let result = legacy.forward(&choice, &x, &w, &mut y, &mut ws);
        assert!(matches!(result, Err(Error::WorkspaceTooSmall { .. })), "{result:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cudnn_fused_bias_relu_matches_the_reference_and_checks_its_bias() {
    let gpu = gpu();
    let stream = gpu.stream();
    let conv: Conv2d = "n=4,c=32,h=20,w=24,k=64,r=3,s=3,pad=1,groups=4".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let (_, _, x, w) = inputs(&gpu, &conv, 23);
    let bias_host = reference::host_uniform(mix(23, 3), conv.k);
    let bias = gpu.upload(&bias_host).unwrap();
    let plain = reference::gpu_reference(&gpu, stream, &conv, &x, &w).unwrap().download(&gpu).unwrap();
    let epilogue = Epilogue { bias: true, activation: Activation::Relu, ..Epilogue::NONE };
    let finished = reference::with_epilogue(&conv, &epilogue, &plain, Some(&bias_host), None).unwrap();
    let truth = reference::GpuReference::upload(&gpu, &finished).unwrap();
    let legacy = LegacyConv::new(&gpu, stream, &conv).unwrap();
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    let limit = 256 << 20;
    let mut workspace = gpu.alloc::<u8>(limit).unwrap();
    let choices = legacy.heuristic(Math::Fma).unwrap();
    let mut ran = 0;
    for choice in choices.iter().filter(|c| c.workspace <= limit) {
        gpu.poison(&mut y).unwrap();
        legacy.forward_bias_relu(choice, &x, &w, &bias, &mut y, &mut workspace).unwrap();
        let stats = reference::compare(&gpu, stream, &y, &truth, CUDNN_EXACT).unwrap();
        assert!(stats.passed(), "{}: {stats:?}", choice.name());
        ran += 1;
    }
    assert!(ran > 0, "no legacy algorithm fit the workspace: {choices:?}");
    let short = gpu.alloc::<f32>(conv.k - 1).unwrap();
    let result = legacy.forward_bias_relu(&choices[0], &x, &w, &short, &mut y, &mut workspace);
    assert!(matches!(result, Err(Error::BufferSize { buffer: "bias", .. })), "{result:?}");
}

/// The test's kernel: a depthwise layer of about 50 MB, some tens of microseconds.
fn timed_layer(gpu: &Gpu) -> (Conv2d, CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>) {
    let conv: Conv2d = "n=16,c=128,h=56,k=128,r=3,pad=1,groups=128".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let (_, _, x, w) = inputs(gpu, &conv, 17);
    let y = gpu.alloc::<f32>(geom.y_len).unwrap();
    (conv, x, w, y)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_that_sleeps_before_each_launch_reads_the_same_gpu_time() {
    let gpu = gpu();
    let (conv, x, w, mut y) = timed_layer(&gpu);
    let mut queue = GpuQueue::new(&gpu, gpu.stream()).unwrap();
    let mut run = |sleep: bool, gated: bool, queue: &mut GpuQueue| {
        let mut launch = |_: &mut GpuQueue, _| {
            if sleep {
                std::thread::sleep(Duration::from_micros(300));
            }
            direct::forward(&gpu, gpu.stream(), &conv, &x, &w, &mut y)
        };
        let ms = time_round(queue, gated, 0, 40, &mut launch).unwrap().expect("the gate held");
        Samples { ms, host_free: gated }.median()
    };
    run(false, true, &mut queue); // warm-up
    let plain = run(false, true, &mut queue);
    let sleepy = run(true, true, &mut queue);
    let ungated = run(true, false, &mut queue);
    assert!((sleepy - plain).abs() <= 0.1 * plain, "gated: {plain} ms without sleeps, {sleepy} ms with");
    assert!(ungated > plain + 0.2, "without the gate the 0.3 ms sleeps should show: {ungated} ms vs {plain} ms");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gate_gives_up_on_a_host_that_never_releases_it() {
    let gpu = gpu();
    let (conv, x, w, mut y) = timed_layer(&gpu);
    let mut queue = GpuQueue::new(&gpu, gpu.stream()).unwrap();
    queue.set_timeout(Duration::from_millis(50));
    let mut launch = |_: &mut GpuQueue, i| {
        if i == 0 {
            std::thread::sleep(Duration::from_millis(150));
        }
        direct::forward(&gpu, gpu.stream(), &conv, &x, &w, &mut y)
    };
    assert!(time_round(&mut queue, true, 0, 3, &mut launch).unwrap().is_none(), "the gate should time out");
    // The next round is clean again.
    let mut quick = |_: &mut GpuQueue, _| direct::forward(&gpu, gpu.stream(), &conv, &x, &w, &mut y);
    assert!(time_round(&mut queue, true, 0, 3, &mut quick).unwrap().is_some());
    assert!(queue.drain().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cudnn_engines_of_both_classes_compute_the_convolution() {
    let gpu = gpu();
    let stream = gpu.stream();
    let mut classes = Vec::new();
    for spec in ["n=8,c=128,h=28,k=128,r=3,pad=1,groups=32", "n=8,c=64,h=28,k=64,r=3,pad=1,groups=64"] {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        let (_, _, x, w) = inputs(&gpu, &conv, 19);
        let truth = reference::gpu_reference(&gpu, stream, &conv, &x, &w).unwrap();
        let engines = EngineConv::new(&gpu, stream, &conv).unwrap();
        let (configs, failed) = engines.configs(&ALL_HEURISTICS);
        assert!(!configs.is_empty(), "{spec}: no engine configurations ({} modes failed)", failed.len());
        let mut workspace = gpu.alloc::<u8>(1 << 30).unwrap();
        let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
        let mut ran = 0;
        for config in configs {
            let tag = config.tag();
            let plan = match engines.build(config) {
                Ok(plan) if plan.workspace <= workspace.len() => plan,
                Ok(_) => continue,
                Err(e) if cudnn::is_unsupported(&e) => continue,
                Err(e) => panic!("{spec}: {tag}: {e}"),
            };
            gpu.poison(&mut y).unwrap();
            engines.execute(&plan, &x, &w, &mut y, &mut workspace).unwrap();
            let bound = if plan.class() == MathClass::Exact { CUDNN_EXACT } else { CUDNN_FAST };
            let stats = reference::compare(&gpu, stream, &y, &truth, bound).unwrap();
            assert!(stats.passed(), "{spec}: {tag} ({}): {stats:?}", plan.config().notes());
            classes.push(plan.class());
            ran += 1;
        }
        assert!(ran > 0, "{spec}: no plan could run");
    }
    assert!(classes.contains(&MathClass::Exact) && classes.contains(&MathClass::Fast), "{classes:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cgemm_matches_the_reference_on_random_problems() {
    let gpu = gpu();
    let mut rng = check::rng(0xc9e3);
    let cases = case_count();
    let mut failures = Vec::new();
    for i in 0..cases {
        let case = cgemm::random_case(&mut rng, i);
        let r = cgemm::check_case(&gpu, &case, mix(23, i as u64)).unwrap();
        if !r.passed() {
            failures.push(format!("{case}: {}", r.failures().join("; ")));
        }
    }
    assert!(failures.is_empty(), "{} of {cases} problems failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cgemm_ring_tiles_walk_many_items_and_refuse_misaligned_operands() {
    let gpu = gpu();
    // Many more items than resident blocks, so each block goes round its ring several times;
    // every layout.
    for spec in ["m=32,batch=3000", "m=64,n=32,k=32,batch=700,op=tc", "m=32,batch=900,op=cn,layout=row,beta=0"] {
        let case: CgemmCase = spec.parse().unwrap();
        let r = cgemm::check_case(&gpu, &case, mix(29, case.g.batch as u64)).unwrap();
        let rings = r.tiles.iter().filter(|(t, _)| t.has_ring()).count();
        assert_eq!(rings, 3, "{spec}: every ring tile ran");
        assert!(r.passed(), "{spec}: {}", r.failures().join("; "));
    }
    // An operand 8 bytes off a 16-byte boundary: the ring tiles' bulk copies refuse it.
    let g = BatchedGemm::packed(32, 32, 32, 4, Op::N, Op::N, Layout::ColMajor);
    let tile = kernels_gpu::cgemm::CGEMM_TILES.iter().find(|t| t.name == "cgemm_tc_32x32_k32_r2_mk").unwrap();
    let a = gpu.alloc::<Complex32>(4 * 1024 + 1).unwrap();
    let b = gpu.alloc::<Complex32>(4 * 1024).unwrap();
    let mut c = gpu.alloc::<Complex32>(4 * 1024).unwrap();
    let result = cgemm_api::cgemm_with_tile(
        &gpu,
        gpu.stream(),
        &g,
        tile,
        Complex32::ONE,
        &a.slice(1..),
        &b,
        Complex32::ZERO,
        &mut c,
    );
    assert!(matches!(result, Err(Error::Misaligned { buffer: "a", align: 16, .. })), "{result:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cgemm_agrees_with_cublas_and_cublaslt_and_refuses_short_buffers() {
    let gpu = gpu();
    let stream = gpu.stream();
    let cublas = Cublas::new(&gpu, stream).unwrap();
    for spec in ["m=4,batch=1000,op=nc", "m=24,n=7,k=33,batch=50,op=tn,layout=row,beta=1", "m=64,k=40,batch=20,op=cn"] {
        let case: CgemmCase = spec.parse().unwrap();
        let e = case.g.validate().unwrap();
        let data = |seed: u64, len: usize| -> Vec<Complex32> {
            reference::host_uniform(seed, 2 * len).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect()
        };
        let (a_host, b_host, c_host) = (data(1, e.a), data(2, e.b), data(3, e.c));
        let (a, b) = (gpu.upload(&a_host).unwrap(), gpu.upload(&b_host).unwrap());
        for which in CublasGemm::ALL {
            let mut c = gpu.upload(&c_host).unwrap();
            cublas.gemm(which, &case.g, case.alpha, &a, &b, case.beta, &mut c).unwrap();
            let stats = cgemm::compare(&case, &a_host, &b_host, &c_host, &gpu.download(&c).unwrap(), case.g.batch);
            // cuBLAS is held to a looser bound than ours (Gauss's 3M form among them).
            assert!(stats.worst_ratio() < 50.0, "{spec} {}: {stats:?}", which.name());
        }
        let mut lt = CublasLtPlan::new(&gpu, stream, &case.g).unwrap();
        assert!(lt.algos() > 0, "{spec}: cuBLASLt proposed no algorithm");
        for i in 0..lt.algos() {
            let mut c = gpu.upload(&c_host).unwrap();
            lt.matmul(i, case.alpha, &a, &b, case.beta, &mut c).unwrap();
            let stats = cgemm::compare(&case, &a_host, &b_host, &c_host, &gpu.download(&c).unwrap(), case.g.batch);
            assert!(stats.worst_ratio() < 50.0, "{spec} {}: {stats:?}", CublasLtPlan::name(i));
        }
        let mut c = gpu.upload(&c_host).unwrap();
        cgemm_api::cgemm(&gpu, stream, &case.g, case.alpha, &a, &b, case.beta, &mut c).unwrap();
        let stats = cgemm::compare(&case, &a_host, &b_host, &c_host, &gpu.download(&c).unwrap(), case.g.batch);
        assert!(stats.passed(), "{spec}: {stats:?}");
        // Gauss's products within their own bound (a Tensor variant on the 64 x 64 product).
        let mut c = gpu.upload(&c_host).unwrap();
        cgemm_api::cgemm_with_products(&gpu, stream, &case.g, Products::Gauss, case.alpha, &a, &b, case.beta, &mut c)
            .unwrap();
        let tile = cgemm_api::choose_tile_for(&case.g, false, Products::Gauss);
        assert_eq!(tile.mma.map(|t| t.products), (case.g.m == 64).then_some(Products::Gauss), "{spec}");
        let truth = cgemm::expected(&case, &a_host, &b_host, &c_host, case.g.batch);
        let stats = truth.compare_within(&c_host, &gpu.download(&c).unwrap(), &cgemm_api::tolerance(&case.g, tile));
        assert!(stats.passed(), "{spec} {}: {stats:?}", tile.name);
    }
    let g = BatchedGemm::packed(8, 8, 8, 10, Op::N, Op::N, Layout::ColMajor);
    let (a, b) = (gpu.alloc::<Complex32>(640).unwrap(), gpu.alloc::<Complex32>(639).unwrap());
    let mut c = gpu.alloc::<Complex32>(640).unwrap();
    let result = cgemm_api::cgemm(&gpu, stream, &g, Complex32::ONE, &a, &b, Complex32::ZERO, &mut c);
    assert!(matches!(result, Err(Error::BufferSize { buffer: "b", expected: 640, got: 639 })), "{result:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fft_matches_an_f64_dft_in_rows_and_columns_and_leaves_gaps_alone() {
    use convkit::fft::{Direction, FftLayout, FftPlan};
    let gpu = gpu();
    let stream = gpu.stream();
    let lengths = [1usize, 2, 3, 7, 8, 12, 35, 64, 100, 128, 343, 360, 512, 1000, 1024, 2048];
    let mut worst: f64 = 0.0;
    for (i, &n) in lengths.iter().enumerate() {
        let plan = FftPlan::new(&gpu, n).unwrap();
        let batch = 1 + (mix(0xff7, i as u64) % 5) as usize;
        // Rows with a gap of 3 after each, and the columns of `batch` images n high, 5 wide.
        let layouts = [FftLayout { outer_dist: n + 3, ..FftLayout::rows(n, batch) }, FftLayout::columns(n, 5, batch)];
        for (l, layout) in layouts.iter().enumerate() {
            let len = layout.validate().unwrap() + 3;
            let x: Vec<Complex32> = reference::host_uniform(mix(i as u64, l as u64), 2 * len)
                .chunks(2)
                .map(|p| Complex32::new(p[0], p[1]))
                .collect();
            let input = gpu.upload(&x).unwrap();
            for direction in [Direction::Forward, Direction::Inverse] {
                let sentinel = Complex32::new(f32::NAN, 7.0);
                let mut output = gpu.upload(&vec![sentinel; len]).unwrap();
                let scale = if direction == Direction::Inverse { 1.0 / n as f32 } else { 1.0 };
                plan.execute(&gpu, stream, layout, direction, scale, &input, &mut output).unwrap();
                let out = gpu.download(&output).unwrap();
                let mut touched = vec![false; len];
                for b in 0..layout.batch {
                    let base = (b / layout.inner) * layout.outer_dist + (b % layout.inner) * layout.inner_dist;
                    let at: Vec<usize> = (0..n).map(|e| base + e * layout.stride).collect();
                    let sign = if direction == Direction::Inverse { 1.0 } else { -1.0 };
                    let (mut err, mut norm) = (0.0f64, 0.0f64);
                    for k in 0..n {
                        let (mut re, mut im) = (0.0f64, 0.0f64);
                        for (e, &src) in at.iter().enumerate() {
                            let angle = sign * 2.0 * std::f64::consts::PI * ((e * k) % n) as f64 / n as f64;
                            let (c, s) = (angle.cos(), angle.sin());
                            re += x[src].re as f64 * c - x[src].im as f64 * s;
                            im += x[src].re as f64 * s + x[src].im as f64 * c;
                        }
                        let (re, im) = (re * scale as f64, im * scale as f64);
                        let o = out[at[k]];
                        touched[at[k]] = true;
                        err += (o.re as f64 - re).powi(2) + (o.im as f64 - im).powi(2);
                        norm += re * re + im * im;
                    }
                    let rel = (err / norm).sqrt();
                    assert!(rel <= 1e-6, "n = {n}, {layout:?}, {direction:?}, transform {b}: relative L2 {rel:e}");
                    worst = worst.max(rel);
                }
                for (e, o) in out.iter().enumerate().filter(|(e, _)| !touched[*e]) {
                    assert!(
                        o.re.is_nan() && o.im == 7.0,
                        "n = {n}, {layout:?}: element {e} outside the layout written"
                    );
                }
            }
        }
    }
    println!("worst relative L2 error {worst:e}");
    // A plan for one length refuses another, and short buffers are typed errors.
    let plan = FftPlan::new(&gpu, 8).unwrap();
    let (input, mut output) = (gpu.alloc::<Complex32>(16).unwrap(), gpu.alloc::<Complex32>(15).unwrap());
    let r = plan.execute(&gpu, stream, &FftLayout::rows(8, 2), Direction::Forward, 1.0, &input, &mut output);
    assert!(matches!(r, Err(Error::BufferSize { buffer: "output", expected: 16, got: 15 })), "{r:?}");
    let r = plan.execute(&gpu, stream, &FftLayout::rows(4, 2), Direction::Forward, 1.0, &input, &mut output);
    assert!(matches!(r, Err(Error::InvalidShape { field: "n", .. })), "{r:?}");
    assert!(matches!(FftPlan::new(&gpu, 11), Err(Error::InvalidShape { field: "n", .. })));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fft_convolution_matches_the_reference_writes_only_its_output_and_follows_new_weights() {
    use convkit::conv::fft::{FftConvPlan, variants};
    let gpu = gpu();
    let stream = gpu.stream();
    let dw = |n, c, h, w, r, s, pad: [usize; 2]| Conv2d { n, groups: c, pad, ..Conv2d::new(c, h, w, c, r, s) };
    let mut layers = vec![
        dw(3, 5, 56, 56, 31, 31, [15, 15]),
        dw(2, 3, 28, 28, 29, 29, [14, 14]),
        dw(1, 1, 96, 96, 45, 45, [22, 22]),
        dw(5, 2, 7, 7, 13, 13, [6, 6]),
        dw(4, 3, 56, 56, 51, 51, [25, 25]),
        Conv2d { stride: [2, 3], dilation: [2, 1], ..dw(3, 4, 40, 33, 9, 13, [8, 2]) },
    ];
    // Every transform size at least once: an image that needs the whole side.
    for tile in variants() {
        let side = tile.side() as usize;
        layers.push(dw(3, 2, side - 3, side - 4, 7, 5, [3, 2]));
    }
    let mut worst: f64 = 0.0;
    for (i, conv) in layers.iter().enumerate() {
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, conv, 0xff7c + i as u64);
        let truth = reference::gpu_reference(&gpu, stream, conv, &x, &w).unwrap();
        let bound = Tolerance::fft(geom.taps(conv) as u64, reference::fft_error_scale(&x_host, &w_host, conv.k));
        let plan = FftConvPlan::new(&gpu, stream, conv, &w).unwrap();
        // The output sits between two guard regions that must keep their sentinel.
        let guard = 4096;
        let mut y = gpu.upload(&vec![f32::NAN; geom.y_len + 2 * guard]).unwrap();
        gpu.fill_bits(&mut y.slice_mut(..guard), 0x7f80_0001).unwrap();
        gpu.fill_bits(&mut y.slice_mut(guard + geom.y_len..), 0x7f80_0001).unwrap();
        plan.forward(&gpu, stream, &x, &mut y.slice_mut(guard..guard + geom.y_len)).unwrap();
        let stats = reference::compare(&gpu, stream, &y.slice(guard..guard + geom.y_len), &truth, bound).unwrap();
        assert!(stats.passed(), "{conv} on {}: {stats:?}", plan.tile().name);
        worst = worst.max(stats.worst_ratio());
        let all = gpu.download(&y).unwrap();
        let untouched = all[..guard].iter().chain(&all[guard + geom.y_len..]).all(|v| v.to_bits() == 0x7f80_0001);
        assert!(untouched, "{conv}: a write outside the output");
    }
    println!("worst error {worst:.4} of the bound");

    // New weights: the plan follows them only when told.
    let conv = dw(2, 3, 20, 20, 9, 9, [4, 4]);
    let geom = conv.geometry().unwrap();
    let (x_host, _, x, w) = inputs(&gpu, &conv, 1);
    let (_, w2_host, _, w2) = inputs(&gpu, &conv, 2);
    let mut plan = FftConvPlan::new(&gpu, stream, &conv, &w).unwrap();
    plan.set_weights(&gpu, stream, &w2).unwrap();
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    gpu.poison(&mut y).unwrap();
    plan.forward(&gpu, stream, &x, &mut y).unwrap();
    let truth = reference::gpu_reference(&gpu, stream, &conv, &x, &w2).unwrap();
    let bound = Tolerance::fft(geom.taps(&conv) as u64, reference::fft_error_scale(&x_host, &w2_host, conv.k));
    assert!(reference::compare(&gpu, stream, &y, &truth, bound).unwrap().passed());

    // Typed errors: short buffers, a dense layer, a layer too large for any transform.
    let r = plan.forward(&gpu, stream, &x.slice(1..), &mut y);
    assert!(matches!(r, Err(Error::BufferSize { buffer: "x", .. })), "{r:?}");
    let r = plan.set_weights(&gpu, stream, &w.slice(1..));
    assert!(matches!(r, Err(Error::BufferSize { buffer: "w", .. })), "{r:?}");
    let dense = Conv2d::new(2, 16, 16, 2, 5, 5);
    let (_, _, _, w_dense) = inputs(&gpu, &dense, 3);
    let r = FftConvPlan::new(&gpu, stream, &dense, &w_dense);
    assert!(matches!(r, Err(Error::Unsupported { algorithm: "fft", .. })), "{:?}", r.err());
    let big = dw(1, 1, 400, 400, 3, 3, [1, 1]);
    let (_, _, _, w_big) = inputs(&gpu, &big, 4);
    let r = FftConvPlan::new(&gpu, stream, &big, &w_big);
    assert!(matches!(r, Err(Error::Unsupported { algorithm: "fft", .. })), "{:?}", r.err());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fft2d_matches_an_f64_dft_and_cufft_at_every_size_by_each_algorithm() {
    use convkit::{
        fft::{Direction, Fft2dAlgorithm, Fft2dPlan, fft2d_sizes},
        harness::fft::{FftCase, FftKind, check_case},
    };
    let gpu = gpu();
    for (i, size) in fft2d_sizes().iter().enumerate() {
        for kind in FftKind::ALL {
            for algorithm in Fft2dAlgorithm::ALL {
                let case = FftCase { n: size.side() as usize, images: 3, kind };
                let label = format!("{} {}", case.label(), algorithm.name());
                let [ours, cufft, between] = check_case(&gpu, &case, algorithm, 0xf2d + i as u64).unwrap();
                assert!(ours <= 1e-6, "{label}: relative L2 error {ours:e} against the f64 DFT");
                assert!(cufft <= 1e-6 && between <= 2e-6, "{label}: cuFFT {cufft:e}, ours vs cuFFT {between:e}");
            }
        }
    }
    // Few images get two passes, many a block per image.
    let plan = Fft2dPlan::new(&gpu, 120).unwrap();
    assert_eq!(plan.algorithm(&gpu, 32, true), Fft2dAlgorithm::TwoPass);
    assert_eq!(plan.algorithm(&gpu, 1024, true), Fft2dAlgorithm::WholeImage);
    let r = Fft2dPlan::new(&gpu, 11);
    assert!(matches!(r, Err(Error::InvalidShape { field: "n", .. })), "{:?}", r.err());
    let plan = Fft2dPlan::new(&gpu, 12).unwrap();
    let (input, mut output) = (gpu.alloc::<Complex32>(2 * 144).unwrap(), gpu.alloc::<Complex32>(2 * 144 - 1).unwrap());
    let r = plan.execute(&gpu, gpu.stream(), Direction::Forward, 1.0, 2, &input, &mut output);
    assert!(matches!(r, Err(Error::BufferSize { buffer: "output", .. })), "{r:?}");
    let r = plan.execute(&gpu, gpu.stream(), Direction::Forward, 1.0, 0, &input, &mut output);
    assert!(matches!(r, Err(Error::InvalidShape { field: "images", .. })), "{r:?}");
    // Real transforms: 2 real 12 x 12 images have 2 x 12 x 7 half-spectrum values.
    let real = gpu.alloc::<f32>(2 * 144).unwrap();
    let mut half = gpu.alloc::<Complex32>(2 * 12 * 7 + 1).unwrap();
    let r = plan.execute_r2c(&gpu, gpu.stream(), 1.0, 2, &real, &mut half);
    assert!(matches!(r, Err(Error::BufferSize { buffer: "output", expected: 168, .. })), "{r:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiled_fft_convolution_matches_the_reference_and_checks_its_workspace() {
    use convkit::conv::fft_gemm::{self, FftGemmPlan};
    let gpu = gpu();
    let stream = gpu.stream();
    let layers = [
        Conv2d { pad: [7, 7], ..Conv2d::new(16, 64, 64, 24, 15, 15) },
        Conv2d { n: 3, groups: 4, pad: [5, 2], stride: [2, 1], ..Conv2d::new(8, 37, 50, 12, 11, 5) },
        Conv2d { n: 2, groups: 6, pad: [6, 6], dilation: [2, 2], ..Conv2d::new(6, 30, 30, 6, 7, 7) },
        Conv2d { n: 1, pad: [15, 15], ..Conv2d::new(4, 128, 128, 4, 31, 31) },
    ];
    let mut workspace = gpu.alloc::<u8>(256 << 20).unwrap();
    let mut worst: f64 = 0.0;
    for (i, conv) in layers.iter().enumerate() {
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, conv, 0xf6e + i as u64);
        let truth = reference::gpu_reference(&gpu, stream, conv, &x, &w).unwrap();
        let bound = Tolerance::fft(geom.taps(conv) as u64, reference::fft_error_scale(&x_host, &w_host, conv.k));
        // The chosen tiling and the smallest transform that fits (the most tiles).
        let chosen = fft_gemm::choose(conv, &geom, 1 << 30, workspace.len()).unwrap();
        let smallest = fft_gemm::sizes().iter().find_map(|s| fft_gemm::shape(conv, &geom, s).ok()).unwrap();
        for shape in [chosen, smallest] {
            let plan = FftGemmPlan::with_shape(&gpu, stream, conv, shape, &w).unwrap();
            let guard = 4096;
            let mut y = gpu.upload(&vec![f32::NAN; geom.y_len + 2 * guard]).unwrap();
            gpu.fill_bits(&mut y.slice_mut(..guard), 0x7f80_0001).unwrap();
            gpu.fill_bits(&mut y.slice_mut(guard + geom.y_len..), 0x7f80_0001).unwrap();
            plan.forward(&gpu, stream, &x, &mut y.slice_mut(guard..guard + geom.y_len), &mut workspace).unwrap();
            let stats = reference::compare(&gpu, stream, &y.slice(guard..guard + geom.y_len), &truth, bound).unwrap();
            assert!(stats.passed(), "{conv} on {} ({:?} tiles): {stats:?}", shape.size.name, shape.tiles);
            worst = worst.max(stats.worst_ratio());
            let all = gpu.download(&y).unwrap();
            let untouched = all[..guard].iter().chain(&all[guard + geom.y_len..]).all(|v| v.to_bits() == 0x7f80_0001);
            assert!(untouched, "{conv}: a write outside the output");
        }
    }
    println!("worst error {worst:.4} of the bound");
    // A workspace one byte short is a typed error.
    let conv = &layers[0];
    let (_, _, x, w) = inputs(&gpu, conv, 1);
    let plan = FftGemmPlan::new(&gpu, stream, conv, &w, 1 << 30, workspace.len()).unwrap();
    let mut short = gpu.alloc::<u8>(plan.workspace_bytes() - 1).unwrap();
    let mut y = gpu.alloc::<f32>(conv.geometry().unwrap().y_len).unwrap();
    let r = plan.forward(&gpu, stream, &x, &mut y, &mut short);
    assert!(matches!(r, Err(Error::WorkspaceTooSmall { .. })), "{r:?}");
}

/// The bound a plan's output is held to, the FFT paths' from the host inputs.
fn plan_bound(plan: &convkit::plan::Plan, conv: &Conv2d, x: &[f32], w: &[f32]) -> Tolerance {
    let taps = conv.geometry().unwrap().taps(conv) as u64;
    check::plan_tolerance(plan, taps, || Ok(Tolerance::fft(taps, reference::fft_error_scale(x, w, conv.k)))).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn plans_apply_their_epilogue_fused_or_as_a_pass_and_refuse_missing_buffers() {
    use convkit::plan::{PlanOptions, Planner};
    let gpu = gpu();
    let stream = gpu.stream();
    let planner = Planner::with_cache_file(&gpu, None).unwrap();
    // Grouped (a fusing kernel), dense 3x3 (cuDNN, then the pass; shuffled: a fusing kernel
    // instead), depthwise with a large filter (the FFT, then the pass); channels last: depthwise
    // (the NHWC program, fused), dense and wide (cuDNN, then the pass; shuffled: the fallback,
    // the tensor-core kernel's NHWC tiles in 3xTF32) and grouped (those tiles, fused).
    let layers: [Conv2d; 6] = [
        "n=4,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=16".parse().unwrap(),
        "n=4,c=64,h=28,w=28,k=64,r=3,s=3,pad=1".parse().unwrap(),
        "n=8,c=32,h=48,w=48,k=32,r=31,s=31,pad=15,groups=32".parse().unwrap(),
        "n=4,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=64,layout=nhwc".parse().unwrap(),
        "n=4,c=128,h=14,w=14,k=128,r=3,s=3,pad=1,layout=nhwc".parse().unwrap(),
        "n=4,c=64,h=28,w=28,k=96,r=3,s=3,pad=1,groups=8,layout=nhwc".parse().unwrap(),
    ];
    let epilogues = [
        Epilogue { bias: true, activation: Activation::Relu, residual: true, shuffle: false },
        Epilogue { bias: true, activation: Activation::GeluTanh, residual: false, shuffle: true },
    ];
    let (mut fused, mut passes) = (0, 0);
    for (i, conv) in layers.iter().enumerate() {
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, conv, 0xe91 + i as u64);
        let plain = reference::gpu_reference(&gpu, stream, conv, &x, &w).unwrap().download(&gpu).unwrap();
        let bias_host = reference::host_uniform(3, conv.k);
        let residual_host = reference::host_uniform(4, geom.y_len);
        let (bias, residual) = (gpu.upload(&bias_host).unwrap(), gpu.upload(&residual_host).unwrap());
        for e in epilogues {
            let opts = PlanOptions { epilogue: e, ..PlanOptions::default() };
            let plan = planner.plan(stream, conv, &opts, &w).unwrap();
            assert_eq!(plan.epilogue(), &e);
            assert!(!e.shuffle || plan.fuses_epilogue(), "{conv}: {} cannot shuffle", plan.algorithm());
            if i == 5 || i == 4 && e.shuffle {
                assert!(plan.algorithm().to_string().starts_with("igemm_3xtf32_nhwc"), "{conv}: {}", plan.algorithm());
            }
            (fused, passes) = if plan.fuses_epilogue() { (fused + 1, passes) } else { (fused, passes + 1) };
            let mut workspace = gpu.alloc::<u8>(plan.workspace_bytes().max(1)).unwrap();
            let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
            let missing = plan.forward(&x, &mut y, &mut workspace);
            assert!(matches!(missing, Err(Error::InvalidShape { field: "epilogue", .. })), "{missing:?}");
            gpu.poison(&mut y).unwrap();
            let r = e.residual.then_some(&residual);
            plan.forward_fused(&x, &mut y, &mut workspace, Some(&bias), r).unwrap();
            let finished = reference::with_epilogue(conv, &e, &plain, Some(&bias_host), r.map(|_| &residual_host[..]));
            let truth = reference::GpuReference::upload(&gpu, &finished.unwrap()).unwrap();
            let bound = plan_bound(&plan, conv, &x_host, &w_host);
            let stats = reference::compare(&gpu, stream, &y, &truth, bound).unwrap();
            assert!(stats.passed(), "{conv} with {e} through {}: {stats:?}", plan.algorithm());
        }
    }
    assert!(fused > 0 && passes > 0, "fused {fused}, passes {passes}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn plans_compute_the_convolution_and_find_fills_a_cache_that_a_new_planner_reads() {
    use convkit::plan::{Mode, Origin, PlanOptions, Planner, cache};
    let gpu = gpu();
    let stream = gpu.stream();
    let dir = std::env::temp_dir().join(format!("convkit-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plans.json");
    std::fs::remove_file(&path).ok();
    let planner = Planner::with_cache_file(&gpu, Some(path.clone())).unwrap();
    // One layer for each of the heuristic's branches: grouped, depthwise with a large filter
    // (fused FFT), dense with a large filter (tiled FFT), dense 3x3 (cuDNN).
    let layers: [Conv2d; 4] = [
        "n=4,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,groups=16".parse().unwrap(),
        "n=16,c=64,h=48,w=48,k=64,r=31,s=31,pad=15,groups=64".parse().unwrap(),
        "n=1,c=16,h=64,w=64,k=16,r=15,s=15,pad=7".parse().unwrap(),
        "n=4,c=128,h=28,w=28,k=128,r=3,s=3,pad=1".parse().unwrap(),
    ];
    let mut families = Vec::new();
    for (i, conv) in layers.iter().enumerate() {
        let geom = conv.geometry().unwrap();
        let (x_host, w_host, x, w) = inputs(&gpu, conv, 0x91a + i as u64);
        let truth = reference::gpu_reference(&gpu, stream, conv, &x, &w).unwrap();
        for math in [MathClass::Exact, MathClass::Fast] {
            for mode in [Mode::Heuristic, Mode::Find] {
                let opts = PlanOptions { math, mode, ..PlanOptions::default() };
                let plan = planner.plan(stream, conv, &opts, &w).unwrap();
                assert!(math == MathClass::Fast || plan.class() == MathClass::Exact, "{conv}: {}", plan.algorithm());
                let mut workspace = gpu.alloc::<u8>(plan.workspace_bytes().max(1)).unwrap();
                let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
                gpu.poison(&mut y).unwrap();
                plan.forward(&x, &mut y, &mut workspace).unwrap();
                let stats =
                    reference::compare(&gpu, stream, &y, &truth, plan_bound(&plan, conv, &x_host, &w_host)).unwrap();
                assert!(stats.passed(), "{conv} ({math:?}, {mode:?}) through {}: {stats:?}", plan.algorithm());
                families.push(plan.algorithm().family());
                if plan.workspace_bytes() > 0 {
                    let mut short = gpu.alloc::<u8>(plan.workspace_bytes() - 1).unwrap();
                    let r = plan.forward(&x, &mut y, &mut short);
                    assert!(matches!(r, Err(Error::WorkspaceTooSmall { .. })), "{r:?}");
                }
            }
            // Find's choice is in the file, and a new planner decides from it.
            let find = PlanOptions { math, mode: Mode::Find, ..PlanOptions::default() };
            let chosen = planner.choose(conv, &find).unwrap();
            let reader = Planner::with_cache_file(&gpu, Some(path.clone())).unwrap();
            let read = reader.choose(conv, &find).unwrap();
            assert_eq!(read.origin, Origin::CacheFile, "{conv}");
            assert_eq!(read.algorithm, chosen.algorithm, "{conv}");
        }
    }
    println!("plans ran: {families:?}");
    for family in ["direct", "fft", "fft-gemm", "cudnn-legacy", "cudnn"] {
        assert!(families.contains(&family), "no plan ran the {family} family: {families:?}");
    }
    // New weights reach every kind of plan.
    for (i, conv) in layers.iter().enumerate() {
        let geom = conv.geometry().unwrap();
        let (x_host, _, x, w) = inputs(&gpu, conv, 0x5e7 + i as u64);
        let (_, w2_host, _, w2) = inputs(&gpu, conv, 0x5e8 + i as u64);
        let opts = PlanOptions::default();
        let mut plan = planner.plan(stream, conv, &opts, &w).unwrap();
        plan.set_weights(&w2).unwrap();
        let truth = reference::gpu_reference(&gpu, stream, conv, &x, &w2).unwrap();
        let mut workspace = gpu.alloc::<u8>(plan.workspace_bytes().max(1)).unwrap();
        let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
        gpu.poison(&mut y).unwrap();
        plan.forward(&x, &mut y, &mut workspace).unwrap();
        let stats = reference::compare(&gpu, stream, &y, &truth, plan_bound(&plan, conv, &x_host, &w2_host)).unwrap();
        assert!(stats.passed(), "{conv} after set_weights through {}: {stats:?}", plan.algorithm());
    }
    // A corrupt file: ignored with a warning, decided by the heuristic, left as it was.
    std::fs::write(&path, "{ not json").unwrap();
    let planner = Planner::with_cache_file(&gpu, Some(path.clone())).unwrap();
    assert!(planner.cache_warning().is_some());
    let choice = planner.choose(&layers[0], &PlanOptions { mode: Mode::Find, ..PlanOptions::default() }).unwrap();
    assert_eq!(choice.origin, Origin::Find);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{ not json");
    assert!(cache::CacheDocument::parse("{ not json").is_err());
    std::fs::remove_dir_all(&dir).ok();
}
