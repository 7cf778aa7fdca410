//! The batched FFT without a GPU: factorisation, the kernel's passes (its own butterfly index
//! math and length-R DFTs, in f32 on the CPU) against an f64 DFT, and layout validation.

mod common;

use common::{CpuBlock, dft_f64};
use convkit::{
    Error,
    fft::{FFT_MAX_N, FftLayout, factorize, twiddles, two_pass_pays},
    harness::reference::host_uniform,
};
use kernels_gpu::{
    cgemm::Complex32,
    fft::{
        dft, passes,
        square::{FFT2D_SIZES, Fft2dParams, Fft2dSize, fft2d, fft2d_c2r, fft2d_r2c, half_columns},
        two_pass::{self, Fft2dPassParams, LINES},
    },
};

/// ‖ours − exact‖₂ / ‖exact‖₂.
fn rel_l2(ours: &[Complex32], exact: &[(f64, f64)]) -> f64 {
    let (mut err, mut norm) = (0.0, 0.0);
    for (o, e) in ours.iter().zip(exact) {
        err += (o.re as f64 - e.0).powi(2) + (o.im as f64 - e.1).powi(2);
        norm += e.0 * e.0 + e.1 * e.1;
    }
    (err / norm).sqrt()
}

/// One radix-`R` pass as the kernel runs it: every butterfly `j < n / R`.
fn pass<const R: usize>(
    pass: &kernels_gpu::fft::FftPass,
    src: &[Complex32],
    dst: &mut [Complex32],
    table: &[Complex32],
    inverse: bool,
) {
    let n = src.len() as u32;
    let tw = |t: u32| {
        let w = table[t as usize];
        if inverse { w.conj() } else { w }
    };
    let mut root = [Complex32::ONE; R];
    for (q, w) in root.iter_mut().enumerate().skip(1) {
        *w = tw(q as u32 * (n / R as u32));
    }
    let mut written = vec![false; dst.len()];
    for j in 0..n / R as u32 {
        let b = pass.butterfly(j, n);
        let mut v = [Complex32::ZERO; R];
        for r in 0..R {
            v[r] = src[(b.src + r as u32 * b.src_step) as usize];
            if r > 0 {
                v[r] = v[r].mul_add(tw(r as u32 * b.twiddle), Complex32::ZERO);
            }
        }
        dft::<R>(&mut v, &root);
        for (s, value) in v.into_iter().enumerate() {
            let at = (b.dst + s as u32 * b.dst_step) as usize;
            assert!(!written[at], "n = {n}, radix {R}: output {at} written twice");
            written[at] = true;
            dst[at] = value;
        }
    }
    assert!(written.iter().all(|&w| w), "n = {n}, radix {R}: an output not written");
}

/// The kernel's transform of `x` on the CPU.
fn emulate(x: &[Complex32], inverse: bool) -> Vec<Complex32> {
    let n = x.len();
    let table = twiddles(n);
    let (passes, count) = passes(n as u32).unwrap();
    let (mut src, mut dst) = (x.to_vec(), vec![Complex32::ZERO; n]);
    for p in &passes[..count] {
        match p.radix {
            2 => pass::<2>(p, &src, &mut dst, &table, inverse),
            3 => pass::<3>(p, &src, &mut dst, &table, inverse),
            4 => pass::<4>(p, &src, &mut dst, &table, inverse),
            5 => pass::<5>(p, &src, &mut dst, &table, inverse),
            7 => pass::<7>(p, &src, &mut dst, &table, inverse),
            8 => pass::<8>(p, &src, &mut dst, &table, inverse),
            r => panic!("radix {r}"),
        }
        std::mem::swap(&mut src, &mut dst);
    }
    src
}

fn smooth(n: u32) -> bool {
    let mut m = n;
    for p in [2, 3, 5, 7] {
        while m.is_multiple_of(p) {
            m /= p;
        }
    }
    m == 1
}

#[test]
fn lengths_factor_into_the_radices() {
    for n in 0..=FFT_MAX_N + 10 {
        let expect = (1..=FFT_MAX_N).contains(&n) && smooth(n);
        match factorize(n) {
            Some((radices, count)) => {
                assert!(expect, "{n} should not factor");
                assert_eq!(radices[..count].iter().product::<u32>(), n);
            }
            None => assert!(!expect, "{n} should factor"),
        }
    }
    assert_eq!(factorize(2048).unwrap().1, 4, "2048 = 8 · 8 · 8 · 4");
}

#[test]
fn the_kernels_passes_match_an_f64_dft() {
    let mut worst: f64 = 0.0;
    for n in (1..=FFT_MAX_N).filter(|&n| smooth(n)).filter(|&n| n <= 512 || n % 7 == 0 || n.is_power_of_two()) {
        let x: Vec<Complex32> =
            host_uniform(n as u64, 2 * n as usize).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
        for inverse in [false, true] {
            let ours = emulate(&x, inverse);
            let err = rel_l2(&ours, &dft_f64(&x, inverse));
            assert!(err <= 1e-6, "n = {n}, inverse {inverse}: relative L2 error {err:e}");
            worst = worst.max(err);
        }
    }
    println!("worst relative L2 error: {worst:e}");
}

#[test]
fn layouts_are_validated() {
    assert_eq!(FftLayout::rows(8, 3).validate().unwrap(), 24);
    assert_eq!(FftLayout::columns(6, 10, 2).validate().unwrap(), 120);
    let bad = |layout: FftLayout, field: &str| match layout.validate() {
        Err(Error::InvalidShape { field: f, .. }) => assert_eq!(f, field, "{layout:?}"),
        other => panic!("{layout:?}: expected an InvalidShape error for {field}, got {other:?}"),
    };
    bad(FftLayout::rows(11, 1), "n");
    bad(FftLayout::rows(4096, 1), "n");
    bad(FftLayout::rows(0, 1), "n");
    bad(FftLayout::rows(8, 0), "batch");
    bad(FftLayout { outer_dist: 7, ..FftLayout::rows(8, 2) }, "stride");
    bad(FftLayout { inner_dist: 0, ..FftLayout::columns(4, 4, 1) }, "stride");
    bad(FftLayout { outer_dist: usize::MAX / 4, ..FftLayout::rows(8, 9) }, "batch");
}

/// The standalone 2D FFT's block program for `size` on the CPU, over every image of `input`.
fn emulate_2d(size: &Fft2dSize, input: &[Complex32], inverse: bool, scale: f32) -> Vec<Complex32> {
    let n = size.side() as usize;
    let table = twiddles(n);
    let mut output = vec![Complex32::new(f32::NAN, f32::NAN); input.len()];
    let mut written = vec![false; input.len()];
    let p = Fft2dParams {
        input: 0,
        output: 0,
        twiddles: 0,
        images: (input.len() / (n * n)) as u32,
        inverse: inverse as u32,
        scale,
        _pad: 0,
    };
    for image in 0..p.images {
        let mut m = CpuBlock::new(size.smem_bytes() as usize / size_of::<Complex32>(), &table, &mut written);
        (m.complex_in, m.complex_out) = (input, &mut output);
        macro_rules! dispatch {
            ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
                match (size.a, size.b) {
                    $(($a, $b) => fft2d::<$a, $b, _>(&mut m, &p, image),)*
                    (a, b) => panic!("no square size {a} x {b}"),
                }
            };
        }
        kernels_gpu::square_sizes!(dispatch);
    }
    assert!(written.iter().all(|&w| w), "{}: an output was never written", size.name);
    output
}

/// The f64 2D DFT of one `n x n` image (rows, then columns).
fn dft2d_f64(x: &[Complex32], n: usize) -> Vec<(f64, f64)> {
    let rows: Vec<(f64, f64)> = x.chunks(n).flat_map(|row| dft_f64(row, false)).collect();
    let mut out = vec![(0.0, 0.0); n * n];
    for col in 0..n {
        // dft_f64 takes f32 input: split the f64 column into a head and a tail that sum to it.
        let head: Vec<Complex32> =
            (0..n).map(|r| Complex32::new(rows[r * n + col].0 as f32, rows[r * n + col].1 as f32)).collect();
        let tail: Vec<Complex32> = (0..n)
            .map(|r| {
                let (re, im) = rows[r * n + col];
                Complex32::new((re - head[r].re as f64) as f32, (im - head[r].im as f64) as f32)
            })
            .collect();
        for (k, (h, t)) in dft_f64(&head, false).into_iter().zip(dft_f64(&tail, false)).enumerate() {
            out[k * n + col] = (h.0 + t.0, h.1 + t.1);
        }
    }
    out
}

#[test]
fn the_2d_transforms_match_an_f64_dft_and_invert() {
    let mut worst: f64 = 0.0;
    for (i, size) in FFT2D_SIZES.iter().enumerate() {
        let n = size.side() as usize;
        let x: Vec<Complex32> =
            host_uniform(500 + i as u64, 4 * n * n).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
        let forward = emulate_2d(size, &x, false, 1.0);
        for image in 0..2 {
            let at = image * n * n..(image + 1) * n * n;
            let err = rel_l2(&forward[at.clone()], &dft2d_f64(&x[at], n));
            assert!(err <= 1e-6, "{}: forward relative L2 error {err:e}", size.name);
            worst = worst.max(err);
        }
        let back = emulate_2d(size, &forward, true, 1.0 / (n * n) as f32);
        let exact: Vec<(f64, f64)> = x.iter().map(|v| (v.re as f64, v.im as f64)).collect();
        let err = rel_l2(&back, &exact);
        assert!(err <= 1e-6, "{}: round trip relative L2 error {err:e}", size.name);
    }
    println!("worst relative L2 error of the forward 2D transforms: {worst:e}");
}

/// The real transforms' block programs for `size` on the CPU: real-to-complex of the real
/// `images` (`r2c`), or complex-to-real of the half `spectra`.
fn emulate_real(
    size: &Fft2dSize,
    images: usize,
    real: &[f32],
    spectra: &[Complex32],
    r2c: bool,
) -> (Vec<f32>, Vec<Complex32>) {
    let n = size.side() as usize;
    let half = half_columns(n as u32) as usize;
    let table = twiddles(n);
    let (mut real_out, mut complex_out) = if r2c {
        (Vec::new(), vec![Complex32::new(f32::NAN, f32::NAN); images * n * half])
    } else {
        (vec![f32::NAN; images * n * n], Vec::new())
    };
    let mut written = vec![false; real_out.len().max(complex_out.len())];
    let p = Fft2dParams { input: 0, output: 0, twiddles: 0, images: images as u32, inverse: 0, scale: 1.0, _pad: 0 };
    for pair in 0..images.div_ceil(2) as u32 {
        let mut m = CpuBlock::new(size.smem_bytes() as usize / size_of::<Complex32>(), &table, &mut written);
        (m.real_in, m.complex_in, m.real_out, m.complex_out) = (real, spectra, &mut real_out, &mut complex_out);
        macro_rules! dispatch {
            ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
                match (size.a, size.b) {
                    $(($a, $b) => if r2c { fft2d_r2c::<$a, $b, _>(&mut m, &p, pair) } else { fft2d_c2r::<$a, $b, _>(&mut m, &p, pair) },)*
                    (a, b) => panic!("no square size {a} x {b}"),
                }
            };
        }
        kernels_gpu::square_sizes!(dispatch);
    }
    assert!(written.iter().all(|&w| w), "{}: an output was never written", size.name);
    (real_out, complex_out)
}

#[test]
fn the_real_2d_transforms_match_an_f64_dft_and_invert() {
    let mut worst: f64 = 0.0;
    for (i, size) in FFT2D_SIZES.iter().enumerate() {
        let n = size.side() as usize;
        let half = half_columns(n as u32) as usize;
        // An odd count: the last pair has one image.
        let images = 3;
        let x = host_uniform(900 + i as u64, images * n * n);
        let (_, spectra) = emulate_real(size, images, &x, &[], true);
        for image in 0..images {
            let complex: Vec<Complex32> = x[image * n * n..][..n * n].iter().map(|&v| Complex32::new(v, 0.0)).collect();
            let full = dft2d_f64(&complex, n);
            let exact: Vec<(f64, f64)> =
                (0..n).flat_map(|r| (0..half).map(move |c| (r, c))).map(|(r, c)| full[r * n + c]).collect();
            let err = rel_l2(&spectra[image * n * half..][..n * half], &exact);
            assert!(err <= 1e-6, "{} image {image}: real-to-complex relative L2 error {err:e}", size.name);
            worst = worst.max(err);
        }
        let (back, _) = emulate_real(size, images, &[], &spectra, false);
        let scale = 1.0 / (n * n) as f64;
        let back: Vec<Complex32> = back.iter().map(|&v| Complex32::new((v as f64 * scale) as f32, 0.0)).collect();
        let exact: Vec<(f64, f64)> = x.iter().map(|&v| (v as f64, 0.0)).collect();
        let err = rel_l2(&back, &exact);
        assert!(err <= 1e-6, "{}: real round trip relative L2 error {err:e}", size.name);
    }
    println!("worst relative L2 error of the real-to-complex transforms: {worst:e}");
}

/// A two-pass program ([`two_pass`]).
#[derive(Clone, Copy)]
enum Pass {
    Rows,
    Columns,
    RowsR2c,
    RowsC2r,
}

/// One launch of a two-pass program for `size` on the CPU over blocks `(x, y)`,
/// `x < lines / LINES` (rounded up), `y < grid_y`; returns the real and complex outputs
/// (`out_len` of the kind the program writes). Every output must be written exactly once.
#[allow(clippy::too_many_arguments)]
fn emulate_pass(
    size: &Fft2dSize,
    pass: Pass,
    p: &Fft2dPassParams,
    grid_y: u32,
    real_in: &[f32],
    complex_in: &[Complex32],
    out_len: usize,
) -> (Vec<f32>, Vec<Complex32>) {
    let table = twiddles(size.side() as usize);
    let real_out = matches!(pass, Pass::RowsC2r);
    let (mut reals, mut complexes) = if real_out {
        (vec![f32::NAN; out_len], Vec::new())
    } else {
        (Vec::new(), vec![Complex32::new(f32::NAN, f32::NAN); out_len])
    };
    let mut written = vec![false; out_len];
    let slots = two_pass::smem_bytes(size.a, size.b) as usize / size_of::<Complex32>();
    for y in 0..grid_y {
        for x in 0..p.lines.div_ceil(LINES) {
            let mut m = CpuBlock::new(slots, &table, &mut written);
            (m.real_in, m.complex_in, m.real_out, m.complex_out) = (real_in, complex_in, &mut reals, &mut complexes);
            macro_rules! dispatch {
                ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
                    match (size.a, size.b) {
                        $(($a, $b) => match pass {
                            Pass::Rows => two_pass::rows::<$a, $b, _>(&mut m, p, x),
                            Pass::Columns => two_pass::columns::<$a, $b, _>(&mut m, p, x, y),
                            Pass::RowsR2c => two_pass::rows_r2c::<$a, $b, _>(&mut m, p, x),
                            Pass::RowsC2r => two_pass::rows_c2r::<$a, $b, _>(&mut m, p, x),
                        },)*
                        (a, b) => panic!("no square size {a} x {b}"),
                    }
                };
            }
            kernels_gpu::square_sizes!(dispatch);
        }
    }
    assert!(written.iter().all(|&w| w), "{}: an output of a pass was never written", size.name);
    (reals, complexes)
}

/// The host's two-pass launches (`host/fft.rs`) for `images` images: complex both ways, real
/// to complex, complex to real.
struct TwoPass<'a> {
    size: &'a Fft2dSize,
    images: usize,
}

impl TwoPass<'_> {
    fn params(&self, lines: u32, pitch: [u32; 2]) -> Fft2dPassParams {
        let [in_pitch, out_pitch] = pitch;
        Fft2dPassParams {
            input: 0,
            output: 0,
            twiddles: 0,
            lines,
            in_pitch,
            out_pitch,
            pack_nyquist: 0,
            inverse: 0,
            scale: 1.0,
        }
    }

    fn complex(&self, x: &[Complex32], inverse: bool) -> Vec<Complex32> {
        let n = self.size.side();
        let len = x.len();
        let inverse = inverse as u32;
        let rows = Fft2dPassParams { inverse, ..self.params(self.images as u32 * n, [n, n]) };
        let (_, mid) = emulate_pass(self.size, Pass::Rows, &rows, 1, &[], x, len);
        let columns = Fft2dPassParams { inverse, ..self.params(n, [n, n]) };
        emulate_pass(self.size, Pass::Columns, &columns, self.images as u32, &[], &mid, len).1
    }

    fn r2c(&self, x: &[f32]) -> Vec<Complex32> {
        let n = self.size.side();
        let half = half_columns(n);
        let len = self.images * (n * half) as usize;
        let rows = self.params(self.images as u32 * n / 2, [n, n]);
        let (_, mid) = emulate_pass(self.size, Pass::RowsR2c, &rows, 1, x, &[], len);
        let columns = self.params(half, [half, half]);
        emulate_pass(self.size, Pass::Columns, &columns, self.images as u32, &[], &mid, len).1
    }

    fn c2r(&self, spectra: &[Complex32]) -> Vec<f32> {
        let n = self.size.side();
        let half = half_columns(n);
        let columns = Fft2dPassParams { pack_nyquist: 1, inverse: 1, ..self.params(n / 2, [half, n / 2]) };
        let mid_len = self.images * (n * n / 2) as usize;
        let (_, mid) = emulate_pass(self.size, Pass::Columns, &columns, self.images as u32, &[], spectra, mid_len);
        let rows = self.params(self.images as u32 * n / 2, [n, n]);
        emulate_pass(self.size, Pass::RowsC2r, &rows, 1, &[], &mid, 2 * mid_len).0
    }
}

#[test]
fn the_two_pass_2d_transforms_match_an_f64_dft_and_invert() {
    let mut worst: f64 = 0.0;
    for (i, size) in FFT2D_SIZES.iter().enumerate() {
        let n = size.side() as usize;
        let half = half_columns(n as u32) as usize;
        // 3 images: a partial block of rows for most sizes.
        let two_pass = TwoPass { size, images: 3 };
        let x: Vec<Complex32> =
            host_uniform(700 + i as u64, 6 * n * n).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect();
        let forward = two_pass.complex(&x, false);
        for image in 0..3 {
            let at = image * n * n..(image + 1) * n * n;
            let err = rel_l2(&forward[at.clone()], &dft2d_f64(&x[at], n));
            assert!(err <= 1e-6, "{}: two-pass forward relative L2 error {err:e}", size.name);
            worst = worst.max(err);
        }
        let scale = 1.0 / (n * n) as f64;
        let back: Vec<Complex32> = two_pass.complex(&forward, true).iter().map(|v| v.scale(scale as f32)).collect();
        let exact: Vec<(f64, f64)> = x.iter().map(|v| (v.re as f64, v.im as f64)).collect();
        let err = rel_l2(&back, &exact);
        assert!(err <= 1e-6, "{}: two-pass round trip relative L2 error {err:e}", size.name);

        let real = host_uniform(800 + i as u64, 3 * n * n);
        let spectra = two_pass.r2c(&real);
        for image in 0..3 {
            let complex: Vec<Complex32> =
                real[image * n * n..][..n * n].iter().map(|&v| Complex32::new(v, 0.0)).collect();
            let full = dft2d_f64(&complex, n);
            let exact: Vec<(f64, f64)> =
                (0..n).flat_map(|r| (0..half).map(move |c| (r, c))).map(|(r, c)| full[r * n + c]).collect();
            let err = rel_l2(&spectra[image * n * half..][..n * half], &exact);
            assert!(err <= 1e-6, "{} image {image}: two-pass real-to-complex relative L2 error {err:e}", size.name);
            worst = worst.max(err);
        }
        let back: Vec<Complex32> =
            two_pass.c2r(&spectra).iter().map(|&v| Complex32::new((v as f64 * scale) as f32, 0.0)).collect();
        let exact: Vec<(f64, f64)> = real.iter().map(|&v| (v as f64, 0.0)).collect();
        let err = rel_l2(&back, &exact);
        assert!(err <= 1e-6, "{}: two-pass real round trip relative L2 error {err:e}", size.name);
    }
    println!("worst relative L2 error of the two-pass forward transforms: {worst:e}");
}

#[test]
fn two_passes_are_chosen_for_few_large_images_only() {
    let h200 = 132;
    // (n, images, real, two passes?): as measured at 7646df9.
    let cases = [
        (120, 32, false, true),
        (120, 32, true, true),
        (160, 32, true, true),
        (144, 64, true, true),
        (120, 128, false, false),
        (96, 128, true, false),
        (56, 32, false, false),
        (64, 100, true, false),
        (120, 1024, true, false),
        (14, 16384, false, false),
    ];
    for (n, images, real, expect) in cases {
        assert_eq!(two_pass_pays(n, images, real, h200), expect, "{n}x{n} x{images} real {real}");
    }
    // Whole-image blocks that fill the GPU never give way.
    assert!(!two_pass_pays(160, 64, false, 32));
}
