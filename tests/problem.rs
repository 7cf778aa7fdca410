//! The shape syntax, validation and its error messages, and the built-in suites.

use convkit::{Conv2d, Error, harness::suites, problem};

fn parse(spec: &str) -> Conv2d {
    spec.parse().unwrap_or_else(|e| panic!("`{spec}` should parse: {e}"))
}

/// The field and message of an invalid shape, from parsing or validating `spec`.
fn invalid(spec: &str) -> (&'static str, String) {
    let err = spec.parse::<Conv2d>().and_then(|c| c.geometry().map(|_| c)).expect_err(spec);
    let message = err.to_string();
    match err {
        Error::InvalidShape { field, .. } => (field, message),
        other => panic!("`{spec}`: expected InvalidShape, got {other:?}"),
    }
}

#[test]
fn defaults_and_full_syntax() {
    let c = parse("c=8,h=10,r=3");
    assert_eq!((c.n, c.w, c.k, c.s, c.pad, c.stride, c.dilation, c.groups), (1, 10, 8, 3, [0, 0], [1, 1], [1, 1], 1));
    let c = parse("n=32, c=256, h=56, w=57, k=128, r=3, s=5, pad=1x2, stride=2, dil_w=3, groups=32, name=x");
    assert_eq!((c.n, c.c, c.h, c.w, c.k, c.r, c.s), (32, 256, 56, 57, 128, 3, 5));
    assert_eq!((c.pad, c.stride, c.dilation, c.groups), ([1, 2], [2, 2], [1, 3], 32));
    assert_eq!(c.name.as_deref(), Some("x"));
}

#[test]
fn display_round_trips() {
    for spec in [
        "n=3,c=6,h=7,w=9,k=12,r=3,s=1,pad=1x0,stride=2,dil=1x2,groups=3",
        "name=a,c=1,h=5,r=5",
        "c=8,h=5,r=3,groups=8,layout=nhwc",
    ] {
        let c = parse(spec);
        assert_eq!(parse(&c.to_string()), c);
    }
}

#[test]
fn geometry_of_known_layers() {
    let g = parse("n=32,c=256,h=56,w=56,k=256,r=3,s=3,pad=1,groups=32").geometry().unwrap();
    assert_eq!((g.out_h, g.out_w, g.c_per_group, g.k_per_group), (56, 56, 8, 8));
    assert_eq!((g.x_len, g.w_len, g.y_len), (32 * 256 * 56 * 56, 256 * 8 * 9, 32 * 256 * 56 * 56));
    let g = parse("c=1,h=96,r=45,pad=22").geometry().unwrap();
    assert_eq!((g.out_h, g.out_w), (96, 96));
    let g = parse("c=1,h=10,w=11,r=3,stride=2,dil=2").geometry().unwrap();
    assert_eq!((g.out_h, g.out_w), (3, 4));
}

#[test]
fn bad_shapes_name_their_field() {
    let cases = [
        ("c=0,h=5,r=3", "c", "at least 1"),
        ("c=4,h=5,r=3,stride=0", "stride_h", "at least 1"),
        ("c=6,h=5,r=3,groups=4", "groups", "does not divide c"),
        ("c=4,h=5,r=3,k=6,groups=4", "groups", "does not divide k"),
        ("c=1,h=5,r=7", "r", "larger than the padded input"),
        ("c=1,h=5,r=3,dil=3", "r", "larger than the padded input"),
        ("c=1,h=9,w=4,r=3,s=5", "s", "larger than the padded input"),
        ("c=1,h=3000000000,r=1", "h", "exceeds"),
        ("n=70000,c=1,h=200,r=1", "n", "exceed"),
        ("c=1,h=65536,r=1", "h", "exceed"),
        ("c=1,h=4,r=1,pad=-1", "pad", "not a non-negative integer"),
        ("c=1,h=4,r=1,pad_w=600000000", "pad_w", "padded input exceed"),
        ("c=1,h=4,r=1,pad=18446744073709551615", "pad_h", "padded input exceed"),
        ("c=1,h=4", "r", "required"),
        ("h=4,r=1", "c", "required"),
        ("c=1,h=4,r=1,q=3", "shape", "unknown key `q`"),
        ("c=1,h=4,r", "shape", "not key=value"),
    ];
    for (spec, field, needle) in cases {
        let (got_field, message) = invalid(spec);
        assert_eq!(got_field, field, "`{spec}`: {message}");
        assert!(message.contains(needle), "`{spec}`: `{message}` lacks `{needle}`");
    }
}

#[test]
fn suites_parse_and_report_lines() {
    for (name, _) in suites::SUITES {
        let layers = suites::load_suite(name).unwrap();
        assert!(!layers.is_empty(), "suite {name} is empty");
        for l in &layers {
            l.geometry().unwrap_or_else(|e| panic!("suite {name}: {l}: {e}"));
        }
    }
    assert_eq!(suites::load_suite("default").unwrap().len(), 17);
    // MobileNetV2's 17 depthwise layers, as 10 distinct shapes with their counts in the names.
    let count = |name: &str| name.rsplit_once("-x").and_then(|(_, n)| n.parse::<usize>().ok()).unwrap_or(1);
    // Each layer twice: NCHW, then channels last (`-nhwc`).
    let depthwise = suites::load_suite("depthwise").unwrap();
    for layout in [convkit::TensorLayout::Nchw, convkit::TensorLayout::Nhwc] {
        let names = depthwise.iter().filter(|c| c.layout == layout).filter_map(|c| c.name.as_deref());
        let mbv2 = names.map(|n| n.trim_end_matches("-nhwc")).filter(|n| n.starts_with("mbv2") && !n.ends_with("-n1"));
        assert_eq!(mbv2.map(count).sum::<usize>(), 17, "{layout:?}");
    }
    let err = problem::parse_suite("# comment\nc=1,h=4,r=1\n\nc=1,h=4,r=1,bogus=2 # trailing\n").unwrap_err();
    assert!(err.to_string().contains("suite line 4"), "{err}");
    assert!(matches!(suites::load_suite("/no/such/suite"), Err(Error::Io { .. })));
}

/// `gpu-run sanitize` runs compute-sanitizer over `check` of the two sanitize suites, each with
/// its families only: a variant no layer there supports would escape memcheck and racecheck.
#[test]
fn the_sanitize_suites_run_every_direct_depthwise_and_tensor_core_variant() {
    use convkit::conv::{depthwise, direct, igemm};
    use std::collections::BTreeSet;
    let depthwise_layers = suites::load_suite("sanitize-depthwise").unwrap();
    let ran: BTreeSet<_> = depthwise_layers.iter().flat_map(depthwise::supporting_variants).map(|t| t.name).collect();
    let missed: Vec<_> = depthwise::variants().iter().filter(|t| !ran.contains(t.name)).map(|t| t.name).collect();
    assert!(missed.is_empty(), "depthwise variants no sanitize-depthwise layer runs: {missed:?}");

    let grouped = suites::load_suite("sanitize-grouped").unwrap();
    let ran: BTreeSet<_> = grouped.iter().flat_map(direct::supporting_variants).map(|t| t.name).collect();
    let missed: Vec<_> = direct::variants().iter().filter(|t| !ran.contains(t.name)).map(|t| t.name).collect();
    assert!(missed.is_empty(), "direct variants no sanitize-grouped layer runs: {missed:?}");
    // Each tensor-core variant through its stage ring: two or more channel chunks, several taps.
    let mut ran = BTreeSet::new();
    for conv in &grouped {
        let geom = conv.geometry().unwrap();
        for tile in igemm::variants().iter().filter(|t| igemm::tile_unsupported(conv, &geom, t).is_none()) {
            if igemm::shape(conv, &geom, tile).channel_chunks >= 2 && conv.r * conv.s > 1 {
                ran.insert(tile.name);
            }
        }
    }
    let missed: Vec<_> = igemm::variants().iter().filter(|t| !ran.contains(t.name)).map(|t| t.name).collect();
    assert!(missed.is_empty(), "tensor-core variants no sanitize-grouped layer runs in chunks: {missed:?}");
}

#[test]
fn kernel_families_parse_by_name() {
    use convkit::harness::check::Family;
    for family in Family::ALL {
        assert_eq!(family.name().parse::<Family>(), Ok(family));
    }
    let err = "cudnn".parse::<Family>().unwrap_err();
    assert!(err.contains("`cudnn`") && err.contains("fft-gemm"), "{err}");
}

#[test]
fn the_layout_defaults_to_nchw_and_prints_only_when_channels_last() {
    assert_eq!(parse("c=8,h=10,r=3").layout, convkit::TensorLayout::Nchw);
    assert!(!parse("c=8,h=10,r=3,layout=nchw").to_string().contains("layout"));
    let last = parse("c=8,h=10,r=3,layout=nhwc");
    assert_eq!(last.layout, convkit::TensorLayout::Nhwc);
    assert!(last.to_string().ends_with(",layout=nhwc"), "{last}");
    let (field, reason) = invalid("c=8,h=10,r=3,layout=nchwc");
    assert_eq!(field, "layout");
    assert!(reason.contains("nchw or nhwc"), "{reason}");
}
