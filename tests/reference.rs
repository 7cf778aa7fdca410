//! The CPU reference against the plainest possible loop nest.

use convkit::{Conv2d, check, reference};

/// Seven nested loops straight from the definition, one output at a time.
fn naive(conv: &Conv2d, x: &[f32], w: &[f32]) -> Vec<f64> {
    let g = conv.geometry().unwrap();
    let mut y = vec![0.0; g.y_len];
    for n in 0..conv.n {
        for k in 0..conv.k {
            let group = k / g.k_per_group;
            for oh in 0..g.out_h {
                for ow in 0..g.out_w {
                    let mut sum = 0.0f64;
                    for cg in 0..g.c_per_group {
                        let c = group * g.c_per_group + cg;
                        for r in 0..conv.r {
                            for s in 0..conv.s {
                                let ih = (oh * conv.stride[0] + r * conv.dilation[0]) as i64 - conv.pad[0] as i64;
                                let iw = (ow * conv.stride[1] + s * conv.dilation[1]) as i64 - conv.pad[1] as i64;
                                if ih < 0 || iw < 0 || ih >= conv.h as i64 || iw >= conv.w as i64 {
                                    continue;
                                }
                                let xv = x[((n * conv.c + c) * conv.h + ih as usize) * conv.w + iw as usize];
                                let wv = w[((k * g.c_per_group + cg) * conv.r + r) * conv.s + s];
                                sum += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((n * conv.k + k) * g.out_h + oh) * g.out_w + ow] = sum;
                }
            }
        }
    }
    y
}

#[test]
fn matches_the_naive_loop_on_random_shapes() {
    let mut rng = check::rng(3);
    for i in 0..120 {
        let mut conv = check::random_case(&mut rng, i);
        // Keep the naive loop quick: the category's features, small extents.
        conv.n = conv.n.min(2);
        if conv.name.as_deref().is_some_and(|n| n.starts_with("z-split")) {
            conv.n = 2;
        }
        let g = conv.geometry().unwrap();
        let x = check::random_values(&mut rng, g.x_len);
        let w = check::random_values(&mut rng, g.w_len);
        let got = reference::conv2d_forward(&conv, &x, &w).unwrap();
        let want = naive(&conv, &x, &w);
        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-9, "{conv}: max abs difference {err}");
    }
}

#[test]
fn a_hand_computed_case() {
    // 1x1x3x3 input 1..9, 2x2 filter of ones, stride 1, no padding: sums of 2x2 windows.
    let conv: Conv2d = "c=1,h=3,r=2".parse().unwrap();
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let y = reference::conv2d_forward(&conv, &x, &[1.0; 4]).unwrap();
    assert_eq!(y, vec![12.0, 16.0, 24.0, 28.0]);
    // Padding 1 with stride 2 samples the corners' windows.
    let conv: Conv2d = "c=1,h=3,r=2,pad=1,stride=2".parse().unwrap();
    let y = reference::conv2d_forward(&conv, &x, &[1.0; 4]).unwrap();
    assert_eq!(y, vec![1.0, 5.0, 11.0, 28.0]);
}

#[test]
fn rel_error_flags_nan_and_measures_norms() {
    assert_eq!(check::rel_error(&[1.0, f32::NAN], &[1.0, 2.0]), f64::INFINITY);
    let e = check::rel_error(&[3.0, 4.0], &[3.0, 4.5]);
    assert!((e - 0.5 / (3.0f64 * 3.0 + 4.5 * 4.5).sqrt()).abs() < 1e-12);
}
