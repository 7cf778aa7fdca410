//! GPU tests: run on the device with `--include-ignored` (scripts/gpu-stage stages them).
//! Without a GPU they fail at `Gpu::new`, they never pass silently.

use convkit::{
    Conv2d, Error, Gpu,
    check::{self, random_values, rel_error},
    direct, reference,
};
use cudarc::driver::CudaSlice;

fn gpu() -> Gpu {
    Gpu::new(0).expect("this test needs a CUDA GPU and driver")
}

/// Fresh random x and w for `conv`, on the host (for the CPU reference) and on the GPU.
fn random_inputs(gpu: &Gpu, conv: &Conv2d, seed: u64) -> (Vec<f32>, Vec<f32>, CudaSlice<f32>, CudaSlice<f32>) {
    let geom = conv.geometry().unwrap();
    let mut rng = check::rng(seed);
    let x_host = random_values(&mut rng, geom.x_len);
    let w_host = random_values(&mut rng, geom.w_len);
    let (x, w) = (gpu.upload(&x_host).unwrap(), gpu.upload(&w_host).unwrap());
    (x_host, w_host, x, w)
}

/// Random cases per run; `CONVKIT_GPU_CASES` lowers it under compute-sanitizer.
fn case_count() -> usize {
    std::env::var("CONVKIT_GPU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(240)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn random_shapes_match_cudnn() {
    let gpu = gpu();
    let mut rng = check::rng(0x5eed_c0de);
    let mut workspace: CudaSlice<u8> = gpu.alloc(256 << 20).unwrap();
    let cases = case_count();
    let mut failures = Vec::new();
    for i in 0..cases {
        let conv = check::random_case(&mut rng, i);
        let r = check::check_case(&gpu, &conv, &mut rng, 5e7, &mut workspace).unwrap();
        if !r.passed() {
            failures.push(format!("{} tile={} err_cudnn={:.2e} err_cpu={:?}", r.conv, r.tile, r.err_cudnn, r.err_cpu));
        }
    }
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
}

/// A bit pattern no arithmetic produces (a signalling NaN with a payload).
const GUARD_BITS: u32 = 0x7f80_c0de;
const GUARD: usize = 4096;

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_variant_writes_all_of_its_output_and_nothing_else() {
    let gpu = gpu();
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
        let (x_host, w_host, x, w) = random_inputs(&gpu, &conv, seed as u64);
        let want = reference::conv2d_forward(&conv, &x_host, &w_host).unwrap();
        for tile in direct::variants() {
            if !tile.supports(conv.stride[1] as u32, conv.dilation[1] as u32) {
                let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
                let err = direct::forward_with(&gpu, &conv, tile, &x, &w, &mut y).unwrap_err();
                assert!(matches!(err, Error::UnsupportedTile { .. }), "{} on {spec}: {err}", tile.name);
                continue;
            }
            let mut y: CudaSlice<f32> = gpu.alloc(geom.y_len + 2 * GUARD).unwrap();
            gpu.fill_bits(&mut y, GUARD_BITS).unwrap();
            gpu.poison(&mut y.slice_mut(GUARD..GUARD + geom.y_len)).unwrap();
            direct::forward_with(&gpu, &conv, tile, &x, &w, &mut y.slice_mut(GUARD..GUARD + geom.y_len)).unwrap();
            let got = gpu.download(&y).unwrap();
            let (before, rest) = got.split_at(GUARD);
            let (inner, after) = rest.split_at(geom.y_len);
            for (side, band) in [("before", before), ("after", after)] {
                let bad = band.iter().filter(|v| v.to_bits() != GUARD_BITS).count();
                assert_eq!(bad, 0, "{} wrote {bad} elements {side} the output of {spec}", tile.name);
            }
            let unwritten = inner.iter().filter(|v| v.is_nan()).count();
            assert_eq!(unwritten, 0, "{} left {unwritten} outputs of {spec} unwritten", tile.name);
            let err = rel_error(inner, &want);
            assert!(err <= check::TOL_CPU, "{} on {spec}: rel err {err:.2e}", tile.name);
        }
    }
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
    let (x_host, w_host, x, w) = random_inputs(&gpu, &conv, 11);
    let mut y = gpu.alloc::<f32>(geom.y_len).unwrap();
    gpu.poison(&mut y).unwrap();
    direct::forward(&gpu, &conv, &x, &w, &mut y).unwrap();
    let err = rel_error(&gpu.download(&y).unwrap(), &reference::conv2d_forward(&conv, &x_host, &w_host).unwrap());
    assert!(err <= check::TOL_CPU, "rel err {err:.2e}");
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
    match direct::forward(&gpu, &conv, &x, &w, &mut y) {
        Err(Error::BufferSize { buffer: "w", expected, got }) => {
            assert_eq!((expected, got), (geom.w_len, geom.w_len + 1))
        }
        other => panic!("expected a BufferSize error for w, got {other:?}"),
    }
    let bad: Conv2d = "n=2,c=4,h=8,k=6,r=3,groups=4".parse().unwrap();
    assert!(matches!(direct::forward(&gpu, &bad, &x, &w, &mut y), Err(Error::InvalidShape { field: "groups", .. })));
}
