//! `convkit check`: our kernels against cuDNN (f32 FMA math) and, for small shapes, against
//! the CPU reference, on fresh random inputs with NaN-poisoned outputs.

use crate::{
    Conv2d, Gpu, Result,
    cudnn::{self, CudnnConv, Math},
    direct, reference,
};
use cudarc::driver::CudaSlice;
use rand::{Rng, SeedableRng, rngs::SmallRng};

/// Largest ‖ours − cuDNN‖ / ‖cuDNN‖ that passes (cuDNN's FFT and Winograd paths round
/// differently from a direct sum).
pub const TOL_CUDNN: f64 = 1e-4;
/// Largest ‖ours − ref‖ / ‖ref‖ against the f64 CPU reference.
pub const TOL_CPU: f64 = 1e-5;

/// ‖a − b‖₂ / ‖b‖₂; infinite when any element of `a` is not finite (e.g. left poisoned).
pub fn rel_error(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "rel_error compares equal-length tensors");
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        if !x.is_finite() {
            return f64::INFINITY;
        }
        diff += (x as f64 - y) * (x as f64 - y);
        norm += y * y;
    }
    if norm == 0.0 { diff.sqrt() } else { (diff / norm).sqrt() }
}

/// Uniform values in [-1, 1).
pub fn random_values(rng: &mut impl Rng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// What one checked case gave.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub conv: Conv2d,
    pub tile: &'static str,
    pub cudnn_algo: &'static str,
    pub err_cudnn: f64,
    pub err_cpu: Option<f64>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.err_cudnn <= TOL_CUDNN && self.err_cpu.is_none_or(|e| e <= TOL_CPU)
    }
}

/// Checks one shape. `cpu_max_flops` bounds the shapes also run on the CPU reference;
/// `workspace` is what cuDNN's chosen algorithm may use.
pub fn check_case(
    gpu: &Gpu,
    conv: &Conv2d,
    rng: &mut impl Rng,
    cpu_max_flops: f64,
    workspace: &mut CudaSlice<u8>,
) -> Result<CaseResult> {
    let geom = conv.geometry()?;
    let x_host = random_values(rng, geom.x_len);
    let w_host = random_values(rng, geom.w_len);
    let x = gpu.upload(&x_host)?;
    let w = gpu.upload(&w_host)?;

    let mut y = gpu.alloc::<f32>(geom.y_len)?;
    gpu.poison(&mut y)?;
    let tile = direct::choose_tile(conv, &geom, gpu.sm_count());
    direct::forward_with(gpu, conv, &tile, &x, &w, &mut y)?;
    let ours = gpu.download(&y)?;

    let reference = CudnnConv::new(gpu, conv)?;
    let algo = reference
        .heuristic(Math::Fma)?
        .into_iter()
        .find(|&(_, bytes)| bytes <= workspace.len())
        .map_or(cudnn::Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, |(algo, _)| algo);
    gpu.poison(&mut y)?;
    reference.forward(Math::Fma, algo, &x, &w, &mut y, workspace)?;
    let theirs: Vec<f64> = gpu.download(&y)?.into_iter().map(f64::from).collect();

    let err_cudnn = rel_error(&ours, &theirs);
    let err_cpu = if geom.flops(conv) <= cpu_max_flops {
        Some(rel_error(&ours, &reference::conv2d_forward(conv, &x_host, &w_host)?))
    } else {
        None
    };
    Ok(CaseResult { conv: conv.clone(), tile: tile.name, cudnn_algo: cudnn::algo_name(algo), err_cudnn, err_cpu })
}

/// The kinds of layer the random sweep cycles through.
pub const CATEGORIES: &[&str] = &[
    "depthwise",
    "dense",
    "channel-multiplier",
    "grouped",
    "stride-2",
    "dilation-2",
    "1x1",
    "7x7",
    "45x45",
    "odd",
    "batch-1",
    "z-split",
];

/// A random valid shape of category `CATEGORIES[index % len]`, sized to check quickly.
pub fn random_case(rng: &mut SmallRng, index: usize) -> Conv2d {
    let category = CATEGORIES[index % CATEGORIES.len()];
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
        "dense" => (conv.groups, conv.c, conv.k) = (1, rng.random_range(1..=48), rng.random_range(1..=48)),
        "channel-multiplier" => {
            conv.c = rng.random_range(1..=32);
            (conv.groups, conv.k) = (conv.c, conv.c * rng.random_range(2..=4));
        }
        "grouped" => {
            conv.groups = pick(rng, &[2, 3, 8, 16, 32]);
            (conv.c, conv.k) = (conv.groups * rng.random_range(1..=8), conv.groups * rng.random_range(1..=16));
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
        "odd" => {
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
        _ => unreachable!("every category has an arm"),
    }
    // Padding up to the filter's reach, independently per side, keeps every output valid.
    let reach = |f: usize, d: usize| d * (f - 1) / 2;
    conv.pad =
        [rng.random_range(0..=reach(conv.r, conv.dilation[0])), rng.random_range(0..=reach(conv.s, conv.dilation[1]))];
    conv.h = conv.h.max(conv.dilation[0] * (conv.r - 1) + 1);
    conv.w = conv.w.max(conv.dilation[1] * (conv.s - 1) + 1);
    conv
}

/// A reproducible generator for `--seed`.
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}
