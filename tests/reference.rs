//! The f64 references: the CPU one against the plainest possible loop nest, and the GPU
//! kernel's per-output function (run here on the CPU) against the CPU one, bit for bit.

use convkit::{
    Conv2d,
    harness::{
        check,
        reference::{self, Reference},
    },
};
use kernels_gpu::random::mix;

/// Seven nested loops straight from the definition, one output at a time, in either layout.
fn naive(conv: &Conv2d, x: &[f32], w: &[f32]) -> Reference {
    let g = conv.geometry().unwrap();
    let last = conv.layout == convkit::TensorLayout::Nhwc;
    let mut value = vec![0.0; g.y_len];
    let mut magnitude = vec![0.0; g.y_len];
    for n in 0..conv.n {
        for k in 0..conv.k {
            let group = k / g.k_per_group;
            for oh in 0..g.out_h {
                for ow in 0..g.out_w {
                    let (mut sum, mut abs) = (0.0f64, 0.0f64);
                    for cg in 0..g.c_per_group {
                        let c = group * g.c_per_group + cg;
                        for r in 0..conv.r {
                            for s in 0..conv.s {
                                let ih = (oh * conv.stride[0] + r * conv.dilation[0]) as i64 - conv.pad[0] as i64;
                                let iw = (ow * conv.stride[1] + s * conv.dilation[1]) as i64 - conv.pad[1] as i64;
                                if ih < 0 || iw < 0 || ih >= conv.h as i64 || iw >= conv.w as i64 {
                                    continue;
                                }
                                let (ih, iw) = (ih as usize, iw as usize);
                                let xv = if last {
                                    x[((n * conv.h + ih) * conv.w + iw) * conv.c + c]
                                } else {
                                    x[((n * conv.c + c) * conv.h + ih) * conv.w + iw]
                                };
                                let wv = if last {
                                    w[((k * conv.r + r) * conv.s + s) * g.c_per_group + cg]
                                } else {
                                    w[((k * g.c_per_group + cg) * conv.r + r) * conv.s + s]
                                };
                                sum += xv as f64 * wv as f64;
                                abs += (xv as f64 * wv as f64).abs();
                            }
                        }
                    }
                    let at = if last {
                        ((n * g.out_h + oh) * g.out_w + ow) * conv.k + k
                    } else {
                        ((n * conv.k + k) * g.out_h + oh) * g.out_w + ow
                    };
                    (value[at], magnitude[at]) = (sum, abs);
                }
            }
        }
    }
    Reference { value, magnitude }
}

/// Random cases of every category, small enough for the naive loop.
fn small_cases(count: usize) -> impl Iterator<Item = (check::Case, Vec<f32>, Vec<f32>)> {
    let mut rng = check::rng(3);
    (0..count).map(move |i| {
        let mut case = check::random_case(&mut rng, i);
        let conv = &mut case.conv;
        conv.n = conv.n.min(2);
        (conv.h, conv.w) = (conv.h.min(48), conv.w.min(48));
        conv.h = conv.h.max(conv.dilation[0] * (conv.r - 1) + 1);
        conv.w = conv.w.max(conv.dilation[1] * (conv.s - 1) + 1);
        let g = conv.geometry().unwrap();
        let mut x = reference::host_uniform(mix(i as u64, 1), g.x_len);
        let w = reference::host_uniform(mix(i as u64, 2), g.w_len);
        if case.nonfinite {
            for (j, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY].into_iter().enumerate() {
                x[(j * 7919) % g.x_len] = v;
            }
        }
        (case, x, w)
    })
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits() || p.is_nan() && q.is_nan())
}

#[test]
fn matches_the_naive_loop_on_random_shapes() {
    for (case, x, w) in small_cases(140) {
        let got = reference::cpu_reference(&case.conv, &x, &w).unwrap();
        let want = naive(&case.conv, &x, &w);
        assert!(same_bits(&got.value, &want.value), "{}: values differ", case.conv);
        assert!(same_bits(&got.magnitude, &want.magnitude), "{}: magnitudes differ", case.conv);
    }
}

#[test]
fn the_gpu_kernels_per_output_function_agrees_to_the_bit() {
    for (case, x, w) in small_cases(140) {
        let p = reference::reference_params(&case.conv).unwrap();
        let cpu = reference::cpu_reference(&case.conv, &x, &w).unwrap();
        let (value, magnitude): (Vec<f64>, Vec<f64>) =
            (0..p.output_len()).map(|i| p.output(i, |j| x[j as usize], |j| w[j as usize])).unzip();
        assert!(same_bits(&value, &cpu.value), "{}: values differ", case.conv);
        assert!(same_bits(&magnitude, &cpu.magnitude), "{}: magnitudes differ", case.conv);
    }
}

#[test]
fn a_hand_computed_case() {
    // 1x1x3x3 input 1..9, 2x2 filter of ones, stride 1, no padding: sums of 2x2 windows.
    let conv: Conv2d = "c=1,h=3,r=2".parse().unwrap();
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let y = reference::cpu_reference(&conv, &x, &[1.0; 4]).unwrap();
    assert_eq!(y.value, vec![12.0, 16.0, 24.0, 28.0]);
    // Padding 1 with stride 2 samples the corners' windows; a negative weight shows in the
    // value but not in the magnitude.
    let conv: Conv2d = "c=1,h=3,r=2,pad=1,stride=2".parse().unwrap();
    let y = reference::cpu_reference(&conv, &x, &[1.0, 1.0, 1.0, -1.0]).unwrap();
    assert_eq!(y.value, vec![-1.0, -1.0, -3.0, 10.0]);
    assert_eq!(y.magnitude, vec![1.0, 5.0, 11.0, 28.0]);
}

#[test]
fn padding_contributes_nothing_not_zero_times_the_weight() {
    // An infinite weight over padding would give 0 * inf = NaN if padding were multiplied.
    let conv: Conv2d = "c=1,h=3,r=3,pad=1".parse().unwrap();
    let y = reference::cpu_reference(&conv, &[1.0; 9], &[f32::INFINITY; 9]).unwrap();
    assert!(y.value.iter().all(|v| *v == f64::INFINITY), "{:?}", y.value);
    let p = reference::reference_params(&conv).unwrap();
    assert!((0..9).all(|i| p.output(i, |_| 1.0, |_| f32::INFINITY).0 == f64::INFINITY));
}

#[test]
fn nonfinite_inputs_propagate() {
    let conv: Conv2d = "c=1,h=3,r=3,pad=1".parse().unwrap();
    let mut x = [1.0f32; 9];
    x[0] = f32::NAN;
    x[8] = f32::NEG_INFINITY;
    let y = reference::cpu_reference(&conv, &x, &[1.0; 9]).unwrap();
    // Output (0,0) sees x[0] (NaN) only; (2,2) sees x[8] (-inf) only; (1,1) sees both.
    assert!(y.value[0].is_nan());
    assert_eq!(y.value[8], f64::NEG_INFINITY);
    assert!(y.value[4].is_nan());
    assert_eq!(y.value[2], 4.0);
}

#[test]
fn channels_last_reference_agrees_with_its_per_output_function_and_with_nchw() {
    for (case, x, w) in small_cases(60) {
        let nchw = Conv2d { layout: convkit::TensorLayout::Nchw, ..case.conv };
        let nhwc = Conv2d { layout: convkit::TensorLayout::Nhwc, ..nchw.clone() };
        let g = nchw.geometry().unwrap();
        // The same tensors channels last: NHWC input, KRSC filter.
        let x_last = reference::channels_last(&x, nchw.n, nchw.c, nchw.h * nchw.w);
        let w_last = reference::channels_last(&w, nchw.k, g.c_per_group, nchw.r * nchw.s);
        let cpu = reference::cpu_reference(&nhwc, &x_last, &w_last).unwrap();
        let p = reference::reference_params(&nhwc).unwrap();
        let (value, magnitude): (Vec<f64>, Vec<f64>) =
            (0..p.output_len()).map(|i| p.output(i, |j| x_last[j as usize], |j| w_last[j as usize])).unzip();
        assert!(same_bits(&value, &cpu.value), "{nhwc}: values differ");
        assert!(same_bits(&magnitude, &cpu.magnitude), "{nhwc}: magnitudes differ");
        let planar = reference::cpu_reference(&nchw, &x, &w).unwrap();
        let back = reference::channels_last(&planar.value, nchw.n, nchw.k, g.out_h * g.out_w);
        assert!(same_bits(&back, &cpu.value), "{nhwc}: not the NCHW result channels last");
    }
}

#[test]
fn a_hand_computed_channels_last_case() {
    // Two channels of a 1x2 map, interleaved (c0 = 1, 2; c1 = 10, 20); a dense 1x2 filter from
    // both channels to one output, KRSC: w[s][c] = (1, 100), (2, 200).
    let conv: Conv2d = "c=2,h=1,w=2,k=1,r=1,s=2,layout=nhwc".parse().unwrap();
    let y = reference::cpu_reference(&conv, &[1.0, 10.0, 2.0, 20.0], &[1.0, 100.0, 2.0, 200.0]).unwrap();
    assert_eq!(y.value, vec![1.0 + 1000.0 + 4.0 + 4000.0]);
}
