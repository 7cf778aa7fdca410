//! The per-element bound `check` and `bench` hold our outputs to: an honest f32 summation
//! passes it with room to spare, while one dropped filter tap or one wrong element in a
//! large output fails it, where one relative L2 error over the output (the old check) let
//! both through.

use convkit::{
    Conv2d,
    harness::reference::{self, Reference},
};
use kernels_gpu::{
    random::mix,
    verify::{CompareStats, RefConvParams, Tolerance},
};

/// The layer the mutants are planted in: 131 072 outputs of 576 taps each.
const LAYER: &str = "n=2,c=64,h=32,w=32,k=64,r=3,pad=1";

struct Layer {
    params: RefConvParams,
    x: Vec<f32>,
    w: Vec<f32>,
    truth: Reference,
    bound: Tolerance,
}

fn layer() -> Layer {
    let conv: Conv2d = LAYER.parse().unwrap();
    let g = conv.geometry().unwrap();
    let x = reference::host_uniform(mix(11, 1), g.x_len);
    let w = reference::host_uniform(mix(11, 2), g.w_len);
    let truth = reference::cpu_reference(&conv, &x, &w).unwrap();
    let params = reference::reference_params(&conv).unwrap();
    let bound = Tolerance::f32_sum(g.taps(&conv) as u64);
    Layer { params, x, w, truth, bound }
}

/// Our output as an f32 kernel computes it: FMAs in tap order (or reversed).
fn f32_sums(l: &Layer, reversed: bool) -> Vec<f32> {
    (0..l.params.output_len())
        .map(|o| {
            let mut acc = 0.0f32;
            let mut step = |(x, w): (f32, f32)| acc = x.mul_add(w, acc);
            let pairs = pairs(l, o);
            if reversed {
                pairs.into_iter().rev().for_each(&mut step)
            } else {
                pairs.into_iter().for_each(&mut step)
            }
            acc
        })
        .collect()
}

/// The (x, w) pairs of one output, in tap order.
fn pairs(l: &Layer, output: u64) -> Vec<(f32, f32)> {
    let xs = std::cell::RefCell::new(Vec::new());
    let ws = std::cell::RefCell::new(Vec::new());
    l.params.output(
        output,
        |i| {
            xs.borrow_mut().push(l.x[i as usize]);
            l.x[i as usize]
        },
        |i| {
            ws.borrow_mut().push(l.w[i as usize]);
            l.w[i as usize]
        },
    );
    xs.into_inner().into_iter().zip(ws.into_inner()).collect()
}

fn compare(l: &Layer, ours: &[f32]) -> CompareStats {
    reference::compare_host(ours, &l.truth, l.bound)
}

#[test]
fn f32_summation_in_any_order_passes_with_room() {
    let l = layer();
    for reversed in [false, true] {
        let stats = compare(&l, &f32_sums(&l, reversed));
        assert!(stats.passed(), "{stats:?}");
        // The bound is several times the error actually seen.
        assert!(stats.worst_ratio() < 0.5, "worst ratio {}", stats.worst_ratio());
    }
}

#[test]
fn one_dropped_tap_fails() {
    let l = layer();
    let mut ours = f32_sums(&l, false);
    let output = 2 * 64 * 32 * 32 / 3; // somewhere inside
    // Drop a typical tap: the product of median magnitude among the output's 576.
    let mut products: Vec<f32> = pairs(&l, output as u64).into_iter().map(|(x, w)| x * w).collect();
    products.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
    let dropped = products[products.len() / 2];
    ours[output] -= dropped;
    let stats = compare(&l, &ours);
    assert_eq!((stats.violations, stats.first_violation), (1, output as u64), "{stats:?}");
    // One relative L2 error over the whole output would have passed it.
    assert!(stats.rel_l2() < 1e-4, "rel L2 {}", stats.rel_l2());
}

#[test]
fn one_wrong_element_fails() {
    let l = layer();
    let mut ours = f32_sums(&l, false);
    let output = 77_777;
    ours[output] += 1e-3 * l.truth.magnitude[output] as f32;
    let stats = compare(&l, &ours);
    assert_eq!((stats.violations, stats.first_violation), (1, output as u64), "{stats:?}");
    assert!(stats.rel_l2() < 1e-4, "rel L2 {}", stats.rel_l2());
}

#[test]
fn an_unwritten_output_fails() {
    let l = layer();
    let mut ours = f32_sums(&l, false);
    ours[5] = f32::NAN;
    let stats = compare(&l, &ours);
    assert_eq!((stats.violations, stats.first_violation), (1, 5));
    assert_eq!(stats.worst_ratio(), f64::INFINITY);
}

#[test]
fn nonfinite_values_must_match_exactly() {
    let b = Tolerance::f32_sum(9);
    assert_eq!(b.ratio(f32::NAN, f64::NAN, 1.0), 0.0);
    assert_eq!(b.ratio(1.0, f64::NAN, 1.0), f64::INFINITY);
    assert_eq!(b.ratio(f32::INFINITY, f64::INFINITY, f64::INFINITY), 0.0);
    assert_eq!(b.ratio(f32::NEG_INFINITY, f64::INFINITY, f64::INFINITY), f64::INFINITY);
    assert_eq!(b.ratio(f32::MAX, f64::INFINITY, f64::INFINITY), f64::INFINITY);
    assert_eq!(b.ratio(f32::INFINITY, 1.0, 1.0), f64::INFINITY);
    assert_eq!(b.ratio(f32::NAN, 1.0, 1.0), f64::INFINITY);
    // An output whose every tap is zero must be exactly zero (up to the smallest normal).
    assert_eq!(b.ratio(0.0, 0.0, 0.0), 0.0);
    assert!(b.ratio(1e-30, 0.0, 0.0) > 1.0);
}

#[test]
fn the_bound_grows_with_the_square_root_of_the_taps() {
    let eps = f32::EPSILON as f64;
    assert_eq!(Tolerance::f32_sum(0).tol, 8.0 * eps);
    assert!((Tolerance::f32_sum(9).tol - 11.0 * eps).abs() < 1e-20);
    assert!((Tolerance::f32_sum(2025).tol - 53.0 * eps).abs() < 1e-18);
    assert_eq!(Tolerance::f32_sum(1).floor, f32::MIN_POSITIVE as f64);
}

#[test]
fn stats_merge_like_the_gpu_threads_do() {
    let b = Tolerance { tol: 0.1, floor: 0.0 };
    let mut s = CompareStats::EMPTY;
    s.add(3, 1.05, 1.0, 1.0, &b); // ratio 0.5
    s.add(9, 1.3, 1.0, 1.0, &b); // ratio 3: a violation
    s.add(4, 2.0, 1.0, 1.0, &b); // ratio 10: the worst, and the first violation by index
    assert_eq!((s.violations, s.first_violation), (2, 4));
    assert!((s.worst_ratio() - 10.0).abs() < 1e-9);
    let want_l2 = ((0.05f64.powi(2) + 0.3f64.powi(2) + 1.0) / 3.0).sqrt();
    assert!((s.rel_l2() - want_l2).abs() < 1e-6, "{} vs {want_l2}", s.rel_l2());
}
