//! The fused epilogue without a GPU: its text form, the channel order the kernels store in,
//! and the activations' f32 code (the kernels', compiled for the host) against the f64 forms
//! `check` holds them to, special values included.

use convkit::{
    Conv2d,
    conv::epilogue::{Activation, Epilogue},
    harness::reference::{Reference, activation_f64, with_epilogue},
};

#[test]
fn the_text_form_round_trips_and_names_what_it_refuses() {
    for text in ["none", "bias", "relu", "bias,gelu-tanh,residual,shuffle", "silu,shuffle", "bias,relu6"] {
        let e: Epilogue = text.parse().unwrap();
        assert_eq!(e.to_string(), text);
    }
    assert_eq!("".parse::<Epilogue>().ok(), None);
    let err = "bias,tanh".parse::<Epilogue>().unwrap_err().to_string();
    assert!(err.contains("\"tanh\""), "{err}");
}

#[test]
fn the_shuffle_is_a_permutation_that_interleaves_the_groups() {
    let conv: Conv2d = "n=1,c=6,h=4,w=4,k=12,r=1,s=1,groups=3".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let plain = Epilogue::NONE;
    let shuffled = Epilogue { shuffle: true, ..Epilogue::NONE };
    let order: Vec<usize> = (0..conv.k).map(|k| shuffled.out_channel(&conv, &geom, k)).collect();
    // Group g's channel j (k = 4g + j) goes to 3j + g.
    assert_eq!(order, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
    assert!((0..conv.k).all(|k| plain.out_channel(&conv, &geom, k) == k));
}

#[test]
fn each_activation_in_f32_stays_within_a_few_units_of_its_f64_form() {
    for act in Activation::ALL {
        for i in -4000..=4000 {
            let v = i as f32 * 0.01;
            let (ours, exact) = (act.apply(v) as f64, activation_f64(act, v as f64));
            // The kernels' error, relative to |v| (the bound's scale): a few 2^-24 here, where
            // the host's exp2 and division are exact; the GPU's approximations add about 2^-22.
            assert!(
                (ours - exact).abs() <= 4.0 * f32::EPSILON as f64 * v.abs() as f64 + 1e-45,
                "{act:?}({v}): {ours} vs {exact}"
            );
        }
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e30, -1e30] {
            let (ours, exact) = (act.apply(v), activation_f64(act, v as f64));
            let same = ours.is_nan() && exact.is_nan() || ours as f64 == exact || (ours as f64 - exact).abs() < 1e-30;
            assert!(same, "{act:?}({v}): {ours} vs {exact}");
        }
    }
}

#[test]
fn the_reference_epilogue_moves_adds_and_widens_the_bound() {
    let conv: Conv2d = "n=1,c=2,h=1,w=2,k=4,r=1,s=1,groups=2".parse().unwrap();
    let plain = Reference { value: vec![1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0], magnitude: vec![1.0; 8] };
    let e = Epilogue { bias: true, activation: Activation::Relu, residual: true, shuffle: true };
    let bias = [0.5, 0.5, 0.5, 0.5];
    let residual = [10.0; 8];
    let r = with_epilogue(&conv, &e, &plain, Some(&bias), Some(&residual)).unwrap();
    // Channel k of group g (2 per group) goes to 2k + g: 0 -> 0, 1 -> 2, 2 -> 1, 3 -> 3.
    assert_eq!(r.value, [11.5, 10.0, 15.5, 10.0, 13.5, 10.0, 17.5, 10.0]);
    assert_eq!(r.magnitude, [11.5; 8]);
}

#[test]
fn each_epilogue_runs_the_entry_point_of_its_store_mode() {
    use kernels_gpu::conv::{
        direct::DIRECT_FWD_VARIANTS,
        epilogue::{CLAMP, ModeEntries, PLAIN, SMOOTH},
    };
    let conv: Conv2d = "n=1,c=8,h=4,w=4,k=8,r=1,s=1,groups=2".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let tile = &DIRECT_FWD_VARIANTS[0];
    // The bias's address is filled in at launch (any non-zero one here).
    let entry = |e: Epilogue| {
        let mut p = e.params(&conv, &geom);
        p.bias = if e.bias { 256 } else { 0 };
        tile.entries.of_mode(p.mode())
    };
    assert_eq!(entry(Epilogue::NONE), tile.name);
    for act in [Activation::Identity, Activation::Relu, Activation::Relu6] {
        assert_eq!(entry(Epilogue { bias: true, activation: act, ..Epilogue::NONE }), tile.entries.clamp, "{act:?}");
    }
    for act in [Activation::Silu, Activation::GeluTanh] {
        assert_eq!(entry(Epilogue { activation: act, ..Epilogue::NONE }), tile.entries.smooth, "{act:?}");
    }
    // A shuffle alone moves channels: it needs a storing epilogue, not the plain entry.
    assert_eq!(entry(Epilogue { shuffle: true, ..Epilogue::NONE }), tile.entries.clamp);
    assert_eq!(tile.entries.clamp, format!("{}_clamp", tile.name));
    assert_eq!([PLAIN, CLAMP, SMOOTH].map(ModeEntries::slot), [0, 1, 2]);
}
