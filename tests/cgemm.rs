//! The batched complex GEMM without a GPU: validation, the problem syntax, and the kernels'
//! own per-element code (run here on the CPU, with the launcher's parameters, operand swap for
//! row-major and batch split) against the f64 reference.

use convkit::{
    Error,
    cgemm::{self, BatchedGemm, Complex32, Layout, Op},
    harness::{
        cgemm::{CgemmCase, compare, load_suite, random_case},
        check,
        reference::host_uniform,
    },
};
use kernels_gpu::{cgemm::ElementCoords, random::mix};

fn complex(seed: u64, len: usize) -> Vec<Complex32> {
    host_uniform(seed, 2 * len).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect()
}

/// What the launcher and the kernel compute, element by element, on the CPU.
fn emulate(case: &CgemmCase, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let g = &case.g;
    let cm = g.column_major();
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let per_launch = cgemm::batches_per_launch(g);
    let mut first = 0;
    while first < g.batch as u64 {
        let count = (g.batch as u64 - first).min(per_launch);
        let p = cgemm::params(g, case.alpha, case.beta, first, count);
        let input = c.to_vec();
        for flat in 0..p.elements {
            let at: ElementCoords = p.element_coords(flat);
            let v = p.element(cm.op_a, cm.op_b, at, |i| a[i as usize], |i| b[i as usize], |i| input[i as usize]);
            c[p.c_offset(at) as usize] = v;
        }
        first += count;
    }
}

#[test]
fn the_kernels_arithmetic_matches_the_reference_on_random_problems() {
    let mut rng = check::rng(21);
    for i in 0..300 {
        let case = random_case(&mut rng, i);
        let e = case.g.validate().unwrap();
        let (a, b) = (complex(mix(i as u64, 1), e.a), complex(mix(i as u64, 2), e.b));
        let c_in = complex(mix(i as u64, 3), e.c);
        let mut c = c_in.clone();
        emulate(&case, &a, &b, &mut c);
        let stats = compare(&case, &a, &b, &c_in, &c, case.g.batch);
        assert!(stats.passed(), "{case} alpha {:?} beta {:?}: {stats:?}", case.alpha, case.beta);
    }
}

#[test]
fn the_comparison_catches_wrong_and_stray_writes() {
    let case: CgemmCase = "m=5,n=3,k=7,batch=4,op=ct,layout=row".parse().unwrap();
    let mut g = case.g;
    g.ldc += 2; // gaps inside C's buffer that must stay untouched
    g.stride_c = g.ldc * g.m + 1;
    let case = CgemmCase { g, beta: Complex32::new(0.5, -1.0), ..case };
    let e = case.g.validate().unwrap();
    let (a, b, c_in) = (complex(1, e.a), complex(2, e.b), complex(3, e.c));
    let mut c = c_in.clone();
    emulate(&case, &a, &b, &mut c);
    assert!(compare(&case, &a, &b, &c_in, &c, 4).passed());
    let mut wrong = c.clone();
    wrong[g.stride_c + 1].re += 1e-3;
    let stats = compare(&case, &a, &b, &c_in, &wrong, 4);
    assert_eq!((stats.violations, stats.first_violation), (1, g.stride_c as u64 + 1));
    let mut stray = c.clone();
    stray[3].im = 0.0; // a padding element of the first row
    let stats = compare(&case, &a, &b, &c_in, &stray, 4);
    assert_eq!((stats.violations, stats.first_violation), (1, 3));
}

#[test]
fn beta_zero_never_reads_c() {
    let case: CgemmCase = "m=4,n=4,k=4,batch=3".parse().unwrap();
    let e = case.g.validate().unwrap();
    let (a, b) = (complex(4, e.a), complex(5, e.b));
    let c_in = vec![Complex32::new(f32::NAN, f32::NAN); e.c];
    let mut c = c_in.clone();
    emulate(&case, &a, &b, &mut c);
    assert!(c.iter().all(|z| z.re.is_finite() && z.im.is_finite()));
    assert!(compare(&case, &a, &b, &c_in, &c, 3).passed());
}

#[test]
fn packed_problems_and_their_extents() {
    let g = BatchedGemm::packed(3, 5, 7, 11, Op::T, Op::N, Layout::ColMajor);
    assert_eq!((g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c), (7, 7, 3, 21, 35, 15));
    let e = g.validate().unwrap();
    assert_eq!((e.a, e.b, e.c), (21 * 11, 35 * 11, 15 * 11));
    let row = BatchedGemm::packed(3, 5, 7, 2, Op::N, Op::C, Layout::RowMajor);
    assert_eq!((row.lda, row.ldb, row.ldc), (7, 7, 5));
    let cm = row.column_major();
    assert_eq!((cm.m, cm.n, cm.op_a, cm.op_b, cm.lda, cm.ldb), (5, 3, Op::C, Op::N, 7, 7));
    assert_eq!(g.flops(), 8.0 * 3.0 * 5.0 * 7.0 * 11.0);
}

#[test]
fn bad_problems_are_typed_errors() {
    let ok = BatchedGemm::packed(4, 4, 4, 8, Op::N, Op::N, Layout::ColMajor);
    let cases: [(BatchedGemm, &str); 6] = [
        (BatchedGemm { m: 0, ..ok }, "m"),
        (BatchedGemm { batch: 0, ..ok }, "batch"),
        (BatchedGemm { lda: 3, ..ok }, "lda"),
        (BatchedGemm { stride_c: 15, ..ok }, "stride_c"),
        (BatchedGemm { stride_b: usize::MAX / 2, ..ok }, "stride_b"),
        (BatchedGemm { m: 1 << 16, n: 1 << 16, ldc: 1 << 16, lda: 1 << 16, stride_c: 1 << 32, ..ok }, "m"),
    ];
    for (g, field) in cases {
        match g.validate() {
            Err(Error::InvalidShape { field: f, reason }) => assert_eq!(f, field, "{reason}"),
            other => panic!("{g:?}: expected an InvalidShape error for {field}, got {other:?}"),
        }
    }
    // Shared operands (stride 0) are fine for A and B, not for C.
    assert!(BatchedGemm { stride_a: 0, stride_b: 0, ..ok }.validate().is_ok());
    assert!(BatchedGemm { stride_c: 0, ..ok }.validate().is_err());
}

#[test]
fn problem_syntax_round_trips_and_suites_parse() {
    for spec in [
        "m=4,n=2,k=3,batch=5,op=tc,layout=row,storage=planar,beta=1",
        "name=x,m=1,n=1,k=1,batch=1,op=nn,layout=col,storage=interleaved,beta=0",
    ] {
        let case: CgemmCase = spec.parse().unwrap();
        assert_eq!(case.to_string(), spec);
    }
    let default: CgemmCase = "m=4".parse().unwrap();
    assert!(default.g.batch * 8 * 48 >= 64 << 20, "the default batch moves at least 64 MB");
    assert!("m=4,op=nx".parse::<CgemmCase>().is_err());
    assert!("n=4".parse::<CgemmCase>().is_err());
    assert_eq!(load_suite("square").unwrap().len(), 12);
    assert!(!load_suite("fftconv").unwrap().is_empty());
    assert!(load_suite("nope").is_err());
}
