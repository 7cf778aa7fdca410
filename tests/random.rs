//! The counter-based random inputs: reproducible element by element, in [-1, 1).

use convkit::harness::reference::host_uniform;
use kernels_gpu::random::{mix, uniform};

#[test]
fn values_lie_on_the_f32_grid_of_minus_one_to_one() {
    let v = host_uniform(7, 1 << 16);
    assert!(v.iter().all(|&x| (-1.0..1.0).contains(&x)));
    assert!(v.iter().all(|&x| (x * (1 << 23) as f32).fract() == 0.0), "multiples of 2^-23");
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
    assert!(mean.abs() < 0.01 && (var - 1.0 / 3.0).abs() < 0.01, "mean {mean}, variance {var}");
}

#[test]
fn any_element_can_be_drawn_alone_and_seeds_differ() {
    let v = host_uniform(99, 1000);
    assert_eq!(uniform(99, 500), v[500]);
    assert_ne!(host_uniform(98, 1000), v);
    assert_ne!(mix(1, 2), mix(2, 1));
}
