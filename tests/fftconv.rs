//! The FFT convolutions without a GPU: the codelets against an f64 DFT, and the block programs
//! of the fused path (`kernels_gpu::conv::fft`) and of the tiled path (`conv::fft_gemm`, with
//! a CPU cgemm between its stages), the code the kernels run, on the CPU against the f64
//! reference convolution, with every shared-memory access tracked: a slot
//! read before it was written, or touched by two work items between two barriers with one of
//! them writing, fails the test (the kernels would race there), as does an output written
//! twice or never.

mod common;

use common::{CpuBlock, assert_within_bound, dft_f64};
use convkit::{
    Conv2d, Error,
    cgemm::{BatchedGemm, Op},
    conv::fft::{choose_tile, params, side_needed, unsupported, variants},
    conv::fft_gemm::{self, FftGemmShape},
    fft::twiddles,
    harness::reference::{cpu_reference, fft_error_scale, host_uniform},
};
use kernels_gpu::{
    complex::Complex32,
    conv::fft::{FftConvParams, FftConvTile, convolve, spectrum},
    conv::fft_gemm::{FftGemmParams, filter_spectra, fused_depthwise, input_spectra, output_tiles},
    fft::{CODELET_LENGTHS, dft_reg, roots, unit_root},
    verify::Tolerance,
};
use rand::{Rng, SeedableRng, rngs::SmallRng};

fn check_codelet<const L: usize>() {
    let x: Vec<Complex32> = host_uniform(L as u64 + 100, 2 * L).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
    for inverse in [false, true] {
        let mut v: [Complex32; L] = x.clone().try_into().unwrap();
        if inverse {
            dft_reg::<L, true>(&mut v)
        } else {
            dft_reg::<L, false>(&mut v)
        }
        let exact = dft_f64(&x, inverse);
        let (mut err, mut norm) = (0.0f64, 0.0f64);
        for (o, e) in v.iter().zip(&exact) {
            err += (o.re as f64 - e.0).powi(2) + (o.im as f64 - e.1).powi(2);
            norm += e.0 * e.0 + e.1 * e.1;
        }
        let rel = (err / norm).sqrt();
        assert!(rel < 3e-7, "length {L}, inverse {inverse}: relative L2 error {rel:e}");
    }
}

#[test]
fn codelets_match_an_f64_dft() {
    check_codelet::<1>();
    check_codelet::<2>();
    check_codelet::<3>();
    check_codelet::<4>();
    check_codelet::<5>();
    check_codelet::<6>();
    check_codelet::<7>();
    check_codelet::<8>();
    check_codelet::<9>();
    check_codelet::<10>();
    check_codelet::<12>();
    check_codelet::<14>();
    check_codelet::<16>();
    assert_eq!(CODELET_LENGTHS.len(), 13, "a new codelet length needs its line above");
}

#[test]
fn compile_time_roots_are_accurate_and_exact_at_quarter_turns() {
    for n in [1u64, 2, 3, 4, 5, 7, 8, 9, 12, 16, 60, 97, 160, 1000] {
        for k in 0..n {
            let (c, s) = unit_root(k, n);
            let angle = 2.0 * std::f64::consts::PI * k as f64 / n as f64;
            assert!((c - angle.cos()).abs() < 1e-15 && (s - angle.sin()).abs() < 1e-15, "root {k}/{n}: ({c}, {s})");
            if (4 * k) % n == 0 {
                assert!(c == c.round() && s == s.round(), "root {k}/{n} should be exact: ({c}, {s})");
            }
        }
    }
    let w = roots::<8, false>();
    assert_eq!((w[2].re, w[2].im), (0.0, -1.0), "W_8^2 = -i forward");
    assert_eq!(roots::<8, true>()[6].im, -1.0, "W_8^-6 = -i");
}

/// Runs block program `which` (spectrum or convolution) of `tile` on the CPU.
fn run_block(tile: &FftConvTile, m: &mut CpuBlock, p: &FftConvParams, block: u32, convolution: bool) {
    macro_rules! dispatch {
        ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
            match (tile.a, tile.b) {
                $(($a, $b) => if convolution { convolve::<$a, $b, _>(m, p, block) } else { spectrum::<$a, $b, _>(m, p, block) },)*
                (a, b) => panic!("no square size {a} x {b}"),
            }
        };
    }
    kernels_gpu::square_sizes!(dispatch)
}

/// The whole FFT convolution of `conv` with `tile` on the CPU: every channel's spectrum, then
/// every block.
fn emulate(conv: &Conv2d, tile: &FftConvTile, x: &[f32], w: &[f32]) -> Vec<f32> {
    let geom = conv.geometry().unwrap();
    let p = params(conv, &geom);
    let table = twiddles(tile.side() as usize);
    let slots = tile.smem_bytes() as usize / size_of::<Complex32>();
    let mut spec = vec![Complex32::new(f32::NAN, f32::NAN); conv.c * tile.spectrum_len()];
    let mut spec_written = vec![false; spec.len()];
    for channel in 0..conv.c as u32 {
        let mut m = CpuBlock::new(slots, &table, &mut spec_written);
        (m.real_in, m.complex_out) = (w, &mut spec);
        run_block(tile, &mut m, &p, channel, false);
    }
    assert!(spec_written.iter().all(|&w| w), "a spectrum value was not written");
    let mut y = vec![f32::NAN; geom.y_len];
    let mut written = vec![false; geom.y_len];
    for block in 0..conv.c as u32 * p.pair_count() {
        let mut m = CpuBlock::new(slots, &table, &mut written);
        (m.real_in, m.complex_in, m.real_out) = (x, &spec, &mut y);
        run_block(tile, &mut m, &p, block, true);
    }
    assert!(written.iter().all(|&w| w), "an output was never written");
    y
}

/// Emulates `conv` with `tile` on fresh inputs and checks it against the f64 reference with
/// the FFT bound; returns the worst error as a fraction of the bound.
fn check(conv: &Conv2d, tile: &FftConvTile, seed: u64) -> f64 {
    let geom = conv.geometry().unwrap();
    let x = host_uniform(seed, geom.x_len);
    let w = host_uniform(seed + 1, geom.w_len);
    let y = emulate(conv, tile, &x, &w);
    let truth = cpu_reference(conv, &x, &w).unwrap();
    let scale = fft_error_scale(&x, &w, conv.k);
    let bound = Tolerance::fft(geom.taps(conv) as u64, scale);
    assert_within_bound(&y, &truth, bound, &format!("{conv} on {}", tile.name))
}

fn depthwise(n: usize, c: usize, h: usize, w: usize, r: usize, s: usize) -> Conv2d {
    Conv2d { n, groups: c, ..Conv2d::new(c, h, w, c, r, s) }
}

#[test]
fn every_tile_convolves_like_the_f64_reference() {
    let mut worst: f64 = 0.0;
    for (i, tile) in variants().iter().enumerate() {
        // An image that needs the full side: input + padding = N.
        let side = tile.side() as usize;
        let (r, s) = ((side / 3) | 1, 5);
        let pad = [r / 2, s / 2];
        let conv = Conv2d { pad, ..depthwise(3, 2, side - pad[0], side - pad[1] - 1, r, s) };
        let geom = conv.geometry().unwrap();
        assert_eq!(unsupported(&conv, &geom, tile), None, "{conv} should fit {}", tile.name);
        worst = worst.max(check(&conv, tile, 10 + i as u64));
    }
    println!("worst error: {worst:.4} of the bound");
}

#[test]
fn random_layers_convolve_like_the_f64_reference() {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut worst: f64 = 0.0;
    for case in 0..60 {
        let (h, w) = (rng.random_range(1..40), rng.random_range(1..40));
        let stride = [rng.random_range(1..4), rng.random_range(1..4)];
        let dilation = [rng.random_range(1..3), rng.random_range(1..3)];
        let (r, s) = (rng.random_range(1..12), rng.random_range(1..12));
        let pad = [rng.random_range(0..r * dilation[0]), rng.random_range(0..s * dilation[1])];
        let conv =
            Conv2d { pad, stride, dilation, ..depthwise(rng.random_range(1..5), rng.random_range(1..4), h, w, r, s) };
        let Ok(geom) = conv.geometry() else { continue };
        let Ok(tile) = choose_tile(&conv, &geom) else { continue };
        assert!(side_needed(&conv, &geom) <= tile.side() as u64);
        worst = worst.max(check(&conv, &tile, 100 + case));
    }
    println!("worst error: {worst:.4} of the bound");
}

#[test]
fn unsupported_layers_get_a_reason() {
    let dense = Conv2d::new(4, 16, 16, 4, 5, 5);
    let geom = dense.geometry().unwrap();
    assert!(matches!(choose_tile(&dense, &geom), Err(Error::Unsupported { algorithm: "fft", .. })));
    let multiplier = Conv2d { groups: 4, ..Conv2d::new(4, 16, 16, 8, 5, 5) };
    let geom = multiplier.geometry().unwrap();
    assert!(choose_tile(&multiplier, &geom).is_err(), "channel multipliers are not fused");
    let huge = depthwise(1, 1, 300, 300, 7, 7);
    let geom = huge.geometry().unwrap();
    let err = choose_tile(&huge, &geom).unwrap_err().to_string();
    assert!(err.contains("at least 300") && err.contains("160"), "{err}");
}

/// Which block program of the tiled FFT convolution to run.
#[derive(Clone, Copy)]
enum Program {
    Input,
    Filter,
    Output,
    Depthwise,
}

fn run_gemm_block(shape: &FftGemmShape, m: &mut CpuBlock, p: &FftGemmParams, block: u32, program: Program) {
    macro_rules! dispatch {
        ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
            match (shape.size.a, shape.size.b) {
                $(($a, $b) => match program {
                    Program::Input => input_spectra::<$a, $b, _>(m, p, block),
                    Program::Filter => filter_spectra::<$a, $b, _>(m, p, block),
                    Program::Output => output_tiles::<$a, $b, _>(m, p, block),
                    Program::Depthwise => fused_depthwise::<$a, $b, _>(m, p, block),
                },)*
                (a, b) => panic!("no square size {a} x {b}"),
            }
        };
    }
    kernels_gpu::square_sizes!(dispatch)
}

/// `C = op(A) · B` for every matrix of `g` (ops N or T, column-major), f32 multiply-adds.
fn cgemm_cpu(g: &BatchedGemm, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let at = |op: Op, ld: usize, row: usize, col: usize| if op == Op::N { row + col * ld } else { col + row * ld };
    for batch in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                let mut acc = Complex32::ZERO;
                for k in 0..g.k {
                    let x = a[batch * g.stride_a + at(g.op_a, g.lda, i, k)];
                    let y = b[batch * g.stride_b + at(g.op_b, g.ldb, k, j)];
                    acc = x.mul_add(y, acc);
                }
                c[batch * g.stride_c + i + j * g.ldc] = acc;
            }
        }
    }
}

/// The tiled FFT convolution of `conv` cut as `shape`, on the CPU: filter spectra, input
/// spectra, the per-frequency product, output tiles, each spectrum checked to be fully written.
fn emulate_gemm(conv: &Conv2d, shape: &FftGemmShape, x: &[f32], w: &[f32]) -> Vec<f32> {
    let geom = conv.geometry().unwrap();
    let p = fft_gemm::params(conv, &geom, shape);
    let side = shape.size.side() as usize;
    let table = twiddles(side);
    let slots = shape.size.smem_bytes() as usize / size_of::<Complex32>();
    let bins = side * side;
    let run = |len: usize, blocks: usize, program: Program, real_in: &[f32], complex_in: &[Complex32]| {
        let mut out = vec![Complex32::new(f32::NAN, f32::NAN); len];
        let mut written = vec![false; len];
        for block in 0..blocks as u32 {
            let mut m = CpuBlock::new(slots, &table, &mut written);
            (m.real_in, m.complex_in, m.complex_out) = (real_in, complex_in, &mut out);
            run_gemm_block(shape, &mut m, &p, block, program);
        }
        assert!(written.iter().all(|&w| w), "a spectrum value was not written");
        out
    };
    let s = run(bins * conv.k * geom.c_per_group, conv.k * geom.c_per_group, Program::Filter, w, &[]);
    let mut y = vec![f32::NAN; geom.y_len];
    let mut written = vec![false; geom.y_len];
    if shape.fused {
        for block in 0..(conv.c * shape.pairs as usize) as u32 {
            let mut m = CpuBlock::new(slots, &table, &mut written);
            (m.real_in, m.complex_in, m.real_out) = (x, &s, &mut y);
            run_gemm_block(shape, &mut m, &p, block, Program::Depthwise);
        }
        assert!(written.iter().all(|&w| w), "an output was never written");
        return y;
    }
    let z = run(bins * shape.pairs as usize * conv.c, conv.c * shape.pairs as usize, Program::Input, x, &[]);
    let g = fft_gemm::gemm(conv, &geom, shape);
    let mut yspec = vec![Complex32::new(f32::NAN, f32::NAN); bins * shape.pairs as usize * conv.k];
    cgemm_cpu(&g, &s, &z, &mut yspec);
    for block in 0..(conv.k * shape.pairs as usize) as u32 {
        let mut m = CpuBlock::new(slots, &table, &mut written);
        (m.complex_in, m.real_out) = (&yspec, &mut y);
        run_gemm_block(shape, &mut m, &p, block, Program::Output);
    }
    assert!(written.iter().all(|&w| w), "an output was never written");
    y
}

#[test]
fn tiled_fft_convolution_matches_the_f64_reference() {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut worst: f64 = 0.0;
    let (mut runs, mut fused) = (0, 0);
    for case in 0..40 {
        let (h, w) = (rng.random_range(1..48), rng.random_range(1..48));
        let stride = [rng.random_range(1..3), rng.random_range(1..3)];
        let dilation = [rng.random_range(1..3), rng.random_range(1..3)];
        let (r, s) = (rng.random_range(1..10), rng.random_range(1..10));
        let pad = [rng.random_range(0..r * dilation[0]), rng.random_range(0..s * dilation[1])];
        let groups = [1, 1, 2, 3, 4][case % 5];
        let (c, k) = if case % 5 == 4 {
            (groups, groups)
        } else {
            (groups * rng.random_range(1..4), groups * rng.random_range(1..4))
        };
        let n = rng.random_range(1..4);
        let conv = Conv2d { n, groups, pad, stride, dilation, ..Conv2d::new(c, h, w, k, r, s) };
        let Ok(geom) = conv.geometry() else { continue };
        // The chosen tiling, and the smallest transform (the most tiles) that fits.
        let chosen = fft_gemm::choose(&conv, &geom, usize::MAX, usize::MAX).unwrap();
        let smallest = fft_gemm::sizes().iter().find_map(|size| fft_gemm::shape(&conv, &geom, size).ok()).unwrap();
        for shape in [chosen, smallest] {
            let x = host_uniform(300 + case as u64, geom.x_len);
            let wv = host_uniform(400 + case as u64, geom.w_len);
            let y = emulate_gemm(&conv, &shape, &x, &wv);
            let truth = cpu_reference(&conv, &x, &wv).unwrap();
            let bound = Tolerance::fft(geom.taps(&conv) as u64, fft_error_scale(&x, &wv, conv.k));
            let what = format!("{conv} on {} ({:?} tiles of {:?})", shape.size.input_kernel, shape.tiles, shape.tile);
            worst = worst.max(assert_within_bound(&y, &truth, bound, &what));
            runs += 1;
            fused += shape.fused as usize;
        }
    }
    assert!(runs >= 40 && fused >= 8, "only {runs} runs, {fused} of them fused");
    println!("worst error: {worst:.4} of the bound over {runs} runs");
}

#[test]
fn the_tiling_respects_memory_limits() {
    let conv = Conv2d { pad: [7, 7], ..Conv2d::new(64, 128, 128, 64, 15, 15) };
    let geom = conv.geometry().unwrap();
    let free = fft_gemm::choose(&conv, &geom, usize::MAX, usize::MAX).unwrap();
    let tight = fft_gemm::choose(&conv, &geom, free.plan_bytes() - 1, usize::MAX).unwrap();
    assert!(tight.plan_bytes() < free.plan_bytes());
    let tight = fft_gemm::choose(&conv, &geom, usize::MAX, free.workspace_bytes() - 1).unwrap();
    assert!(tight.workspace_bytes() < free.workspace_bytes());
    let r = fft_gemm::choose(&conv, &geom, usize::MAX, 1000);
    assert!(matches!(r, Err(Error::WorkspaceTooSmall { given: 1000, .. })), "{r:?}");
    let r = fft_gemm::choose(&conv, &geom, 1000, usize::MAX);
    assert!(matches!(r, Err(Error::Unsupported { algorithm: "fft-gemm", .. })), "{r:?}");
    let wide = Conv2d::new(1, 200, 200, 1, 170, 3);
    let r = fft_gemm::choose(&wide, &wide.geometry().unwrap(), usize::MAX, usize::MAX);
    assert!(matches!(r, Err(Error::Unsupported { algorithm: "fft-gemm", .. })), "{r:?}");
}
