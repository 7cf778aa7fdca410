//! The batched complex GEMM's harness: its problem syntax and suites, the f64 reference,
//! `convkit check cgemm` and `convkit bench cgemm` (ours against cuBLAS's best, timed the
//! same host-free way as the convolutions).

use super::{
    bench::{HBM_BYTES_PER_S, Timing},
    cublas::{Cublas, CublasGemm, CublasLtPlan},
    reference::host_uniform,
};
use crate::timing::{GpuQueue, Schedule, time_interleaved};
use crate::{
    Error, Gpu, Result,
    cgemm::{self, BatchedGemm, CGEMM_TILES, CgemmTile, Complex32, Layout, Op, Planar, PlanarMut, Products},
    error::Context,
};
use cudarc::driver::{CudaSlice, CudaStream};
use kernels_gpu::{
    random::mix,
    verify::{CompareStats, Tolerance},
};
use rand::{Rng, rngs::SmallRng};
use serde::Serialize;
use std::{fmt, str::FromStr, sync::Arc};

/// One batched product to check or time.
#[derive(Clone, Debug, PartialEq)]
pub struct CgemmCase {
    pub name: Option<String>,
    pub g: BatchedGemm,
    pub alpha: Complex32,
    pub beta: Complex32,
    pub planar: bool,
}

/// The problem syntax, as `--help` and the README give it.
pub const CGEMM_SYNTAX: &str = "\
A cgemm problem is comma-separated key=value pairs, e.g.
  m=4,n=4,k=4,batch=174762,op=nn,layout=col,storage=interleaved,beta=0
keys: m (required), n (default m), k (default m), batch (default: enough matrices to move
  64 MB), op (two of n, t, c for A and B; default nn), layout (col or row, default col),
  storage (interleaved or planar, default interleaved), beta (0 or 1, default 0), name.
  Matrices are packed one after another; alpha is 1.";

/// Bytes a suite's default batch moves at least (once over A, B and C).
pub const SUITE_BYTES: usize = 64 << 20;

impl FromStr for CgemmCase {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let (mut m, mut n, mut k, mut batch) = (None, None, None, None);
        let (mut ops, mut layout, mut planar, mut beta, mut name) = ((Op::N, Op::N), Layout::ColMajor, false, 0, None);
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| Error::invalid("cgemm", format!("`{item}` is not key=value")))?;
            let number = |field: &'static str| {
                value.trim().parse::<usize>().map_err(|_| Error::invalid(field, format!("`{value}` is not a number")))
            };
            match key.trim() {
                "name" => name = Some(value.trim().to_owned()),
                "m" => m = Some(number("m")?),
                "n" => n = Some(number("n")?),
                "k" => k = Some(number("k")?),
                "batch" => batch = Some(number("batch")?),
                "beta" => beta = number("beta")?,
                "op" => ops = parse_ops(value.trim())?,
                "layout" => {
                    layout = match value.trim() {
                        "col" => Layout::ColMajor,
                        "row" => Layout::RowMajor,
                        other => return Err(Error::invalid("layout", format!("`{other}` is not col or row"))),
                    }
                }
                "storage" => {
                    planar = match value.trim() {
                        "interleaved" => false,
                        "planar" => true,
                        other => {
                            return Err(Error::invalid("storage", format!("`{other}` is not interleaved or planar")));
                        }
                    }
                }
                other => return Err(Error::invalid("cgemm", format!("unknown key `{other}` in `{item}`"))),
            }
        }
        let m = m.ok_or_else(|| Error::invalid("m", format!("is required (in `{spec}`)")))?;
        let (n, k) = (n.unwrap_or(m), k.unwrap_or(m));
        let per_matrix = 8 * (m * k + k * n + m * n).max(1);
        let batch = batch.unwrap_or_else(|| SUITE_BYTES.div_ceil(per_matrix));
        if beta > 1 {
            return Err(Error::invalid("beta", "must be 0 or 1"));
        }
        let g = BatchedGemm::packed(m, n, k, batch, ops.0, ops.1, layout);
        g.validate()?;
        let beta = if beta == 1 { Complex32::ONE } else { Complex32::ZERO };
        Ok(CgemmCase { name, g, alpha: Complex32::ONE, beta, planar })
    }
}

fn parse_ops(value: &str) -> Result<(Op, Op)> {
    let op = |c: char| match c {
        'n' | 'N' => Ok(Op::N),
        't' | 'T' => Ok(Op::T),
        'c' | 'C' => Ok(Op::C),
        other => Err(Error::invalid("op", format!("`{other}` is not n, t or c"))),
    };
    let chars: Vec<char> = value.chars().collect();
    match chars[..] {
        [a, b] => Ok((op(a)?, op(b)?)),
        _ => Err(Error::invalid("op", format!("`{value}` is not two of n, t, c"))),
    }
}

fn op_char(op: Op) -> char {
    match op {
        Op::N => 'n',
        Op::T => 't',
        Op::C => 'c',
    }
}

impl fmt::Display for CgemmCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.g;
        if let Some(name) = &self.name {
            write!(f, "name={name},")?;
        }
        write!(
            f,
            "m={},n={},k={},batch={},op={}{},layout={},storage={},beta={}",
            g.m,
            g.n,
            g.k,
            g.batch,
            op_char(g.op_a),
            op_char(g.op_b),
            if g.layout == Layout::ColMajor { "col" } else { "row" },
            if self.planar { "planar" } else { "interleaved" },
            if self.beta == Complex32::ZERO { 0 } else { 1 }
        )
    }
}

impl CgemmCase {
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let g = &self.g;
            format!("m{}n{}k{}-{}{}", g.m, g.n, g.k, op_char(g.op_a), op_char(g.op_b))
        })
    }
}

/// The built-in suites: `square` (m = n = k from 1 to 128) and `fftconv` (the per-frequency
/// channel reductions of FFT convolution: batch = bins x groups, M = images, N and K =
/// channels per group, row-major as the FFT stage writes them).
pub fn load_suite(name: &str) -> Result<Vec<CgemmCase>> {
    let lines: Vec<String> = match name {
        "square" => [1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 64, 128].iter().map(|s| format!("name=sq{s},m={s}")).collect(),
        "fftconv" => include_str!("../../benches/suites/cgemm-fftconv.txt")
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
        other => return Err(Error::invalid("suite", format!("`{other}` is not a cgemm suite (square, fftconv)"))),
    };
    lines.iter().map(|l| l.parse()).collect()
}

/// A random problem for `check cgemm`: sizes 1 to 40 (now and then up to 130), every op,
/// both layouts and storages, padded leading dimensions, gaps and shared (stride 0)
/// operands between matrices, and complex α and β (β = 0 a quarter of the time). One in ten
/// is made of whole 32 x 32 tiles with k = 32 and even paddings: what the `Tensor` ring
/// variants take.
pub fn random_case(rng: &mut SmallRng, index: usize) -> CgemmCase {
    let tiles = rng.random_range(0..10) == 0;
    let size = |rng: &mut SmallRng| {
        if tiles {
            32 * rng.random_range(1..=3)
        } else if rng.random_range(0..8) == 0 {
            rng.random_range(41..=130)
        } else {
            rng.random_range(1..=40)
        }
    };
    let (m, n, k) = (size(rng), size(rng), if tiles { 32 } else { size(rng) });
    let batch = rng.random_range(1..=12);
    let op = |rng: &mut SmallRng| Op::ALL[rng.random_range(0..3)];
    let layout = if rng.random() { Layout::ColMajor } else { Layout::RowMajor };
    let mut g = BatchedGemm::packed(m, n, k, batch, op(rng), op(rng), layout);
    let pad = |rng: &mut SmallRng| rng.random_range(0..4) & if tiles { !1 } else { !0 };
    (g.lda, g.ldb, g.ldc) = (g.lda + pad(rng), g.ldb + pad(rng), g.ldc + pad(rng));
    // Strides: each matrix's span plus a gap, or 0 (one A or B for the whole batch).
    let span = |ld: usize, rows: usize, cols: usize| {
        let (inner, outer) = if layout == Layout::ColMajor { (rows, cols) } else { (cols, rows) };
        debug_assert!(ld >= inner);
        ld * (outer - 1) + inner
    };
    let (ar, ac) = if g.op_a == Op::N { (m, k) } else { (k, m) };
    let (br, bc) = if g.op_b == Op::N { (k, n) } else { (n, k) };
    let shared = |rng: &mut SmallRng| rng.random_range(0..6) == 0;
    g.stride_a = if shared(rng) { 0 } else { span(g.lda, ar, ac) + pad(rng) };
    g.stride_b = if shared(rng) { 0 } else { span(g.ldb, br, bc) + pad(rng) };
    g.stride_c = span(g.ldc, m, n) + pad(rng);
    let complex = |rng: &mut SmallRng| Complex32::new(rng.random_range(-2.0..2.0), rng.random_range(-2.0..2.0));
    let beta = if rng.random_range(0..4) == 0 { Complex32::ZERO } else { complex(rng) };
    CgemmCase { name: Some(format!("random#{index}")), g, alpha: complex(rng), beta, planar: rng.random() }
}

/// Element `(row, col)` of `op(X)` for matrix `b` of a batch, X stored in `layout`.
fn op_element(x: &[Complex32], base: usize, layout: Layout, ld: usize, op: Op, row: usize, col: usize) -> Complex32 {
    let at = |r: usize, c: usize| base + if layout == Layout::ColMajor { r + c * ld } else { r * ld + c };
    match op {
        Op::N => x[at(row, col)],
        Op::T => x[at(col, row)],
        Op::C => x[at(col, row)].conj(),
    }
}

/// Offset of C's element `(row, col)` of matrix `b`.
fn c_index(g: &BatchedGemm, b: usize, row: usize, col: usize) -> usize {
    b * g.stride_c + if g.layout == Layout::ColMajor { row + col * g.ldc } else { row * g.ldc + col }
}

/// The f64 reference of the first matrices of a batch: each output's value and the sum of
/// the absolute values behind it, computed once and compared with any number of results.
pub struct Expected {
    /// `(offset in C, re, im, magnitude)` per output.
    outputs: Vec<(usize, f64, f64, f64)>,
    /// Whether each element of C's buffer, up to `checked_end`, is an output.
    inside: Vec<bool>,
    checked_end: usize,
    bound: Tolerance,
}

/// The reference for the first `batches` matrices of `case`, from `a`, `b` and `c_in` (C
/// before the product).
pub fn expected(case: &CgemmCase, a: &[Complex32], b: &[Complex32], c_in: &[Complex32], batches: usize) -> Expected {
    let g = &case.g;
    let norm1 = |z: Complex32| (z.re.abs() + z.im.abs()) as f64;
    let (alpha, beta) = (case.alpha, case.beta);
    let mut outputs = Vec::with_capacity(batches.min(g.batch) * g.m * g.n);
    let mut inside = vec![false; c_in.len()];
    for batch in 0..batches.min(g.batch) {
        for row in 0..g.m {
            for col in 0..g.n {
                let (mut re, mut im, mut mag) = (0.0f64, 0.0f64, 0.0f64);
                for l in 0..g.k {
                    let x = op_element(a, batch * g.stride_a, g.layout, g.lda, g.op_a, row, l);
                    let y = op_element(b, batch * g.stride_b, g.layout, g.ldb, g.op_b, l, col);
                    let (xr, xi, yr, yi) = (x.re as f64, x.im as f64, y.re as f64, y.im as f64);
                    re += xr * yr - xi * yi;
                    im += xr * yi + xi * yr;
                    mag += (xr * yr).abs() + (xi * yi).abs() + (xr * yi).abs() + (xi * yr).abs();
                }
                let at = c_index(g, batch, row, col);
                inside[at] = true;
                let (ar, ai) = (alpha.re as f64, alpha.im as f64);
                let (mut vr, mut vi) = (ar * re - ai * im, ar * im + ai * re);
                let mut magnitude = norm1(alpha) * mag;
                if beta != Complex32::ZERO {
                    let (br, bi, cr, ci) = (beta.re as f64, beta.im as f64, c_in[at].re as f64, c_in[at].im as f64);
                    (vr, vi) = (vr + br * cr - bi * ci, vi + br * ci + bi * cr);
                    magnitude += norm1(beta) * norm1(c_in[at]);
                }
                outputs.push((at, vr, vi, magnitude));
            }
        }
    }
    let matrices_checked = batches.min(g.batch);
    let checked_end = if matrices_checked == g.batch { c_in.len() } else { matrices_checked * g.stride_c };
    Expected { outputs, inside, checked_end, bound: Tolerance::f32_sum(2 * g.k as u64 + 4) }
}

impl Expected {
    /// Each output's real and imaginary parts within `2^-23 (8 + sqrt(2k + 4))` of the sum of
    /// the absolute values of the real products behind it; every element of `c_out` outside
    /// C's matrices equal to `c_in`'s to the bit (counted as violations at ratio infinity).
    pub fn compare(&self, c_in: &[Complex32], c_out: &[Complex32]) -> CompareStats {
        self.compare_within(c_in, c_out, &self.bound)
    }

    /// [`Self::compare`] within `bound` (a variant's own, [`cgemm::tolerance`]).
    pub fn compare_within(&self, c_in: &[Complex32], c_out: &[Complex32], bound: &Tolerance) -> CompareStats {
        let mut stats = CompareStats::EMPTY;
        for &(at, re, im, magnitude) in &self.outputs {
            stats.add(at as u64, c_out[at].re, re, magnitude, bound);
            stats.add(at as u64, c_out[at].im, im, magnitude, bound);
        }
        for (i, (o, before)) in c_out.iter().zip(c_in).enumerate().take(self.checked_end) {
            let same = o.re.to_bits() == before.re.to_bits() && o.im.to_bits() == before.im.to_bits();
            if !self.inside[i] && !same {
                stats.violations += 1;
                stats.first_violation = stats.first_violation.min(i as u64);
                stats.worst_ratio_bits = f64::INFINITY.to_bits();
            }
        }
        stats
    }
}

/// [`expected`] and [`Expected::compare`] in one.
pub fn compare(
    case: &CgemmCase,
    a: &[Complex32],
    b: &[Complex32],
    c_in: &[Complex32],
    c_out: &[Complex32],
    batches: usize,
) -> CompareStats {
    expected(case, a, b, c_in, batches).compare(c_in, c_out)
}

/// What `check cgemm` found on one case, with every variant that computes it.
#[derive(Clone, Debug)]
pub struct CgemmCheck {
    pub case: CgemmCase,
    /// Per variant, in [`CGEMM_TILES`]' order.
    pub tiles: Vec<(&'static CgemmTile, CompareStats)>,
}

impl CgemmCheck {
    pub fn passed(&self) -> bool {
        self.tiles.iter().all(|(_, s)| s.passed())
    }

    /// The worst error ratio over the tiles.
    pub fn worst_ratio(&self) -> f64 {
        self.tiles.iter().map(|(_, s)| s.worst_ratio()).fold(0.0, f64::max)
    }

    /// The tiles that failed, with their first bad element.
    pub fn failures(&self) -> Vec<String> {
        self.tiles
            .iter()
            .filter(|(_, s)| !s.passed())
            .map(|(t, s)| format!("{}: {} beyond, first at {}", t.name, s.violations, s.first_violation))
            .collect()
    }
}

/// The variants that compute `case`: every `Tiled`, `Element` and `Dot` one and, for 1 x 1
/// matrices, `Pointwise` (planar storage too), and with interleaved storage the `Whole` ones
/// that hold its matrices and the `Large` and `Tensor` ones for its stored layouts.
pub fn variants(case: &CgemmCase) -> impl Iterator<Item = &'static CgemmTile> + '_ {
    CGEMM_TILES.iter().filter(|t| (t.takes_planar() || !case.planar) && cgemm::shape(&case.g, t).is_some())
}

/// Checks one case with every variant that computes it: random A, B and C (NaN where β = 0, which must
/// then not be read), and every element of C's buffer against the reference.
pub fn check_case(gpu: &Gpu, case: &CgemmCase, seed: u64) -> Result<CgemmCheck> {
    let extents = case.g.validate()?;
    let complex = |seed: u64, len: usize| -> Vec<Complex32> {
        host_uniform(seed, 2 * len).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect()
    };
    let a = complex(mix(seed, 1), extents.a);
    let b = complex(mix(seed, 2), extents.b);
    let mut c_in = complex(mix(seed, 3), extents.c);
    if case.beta == Complex32::ZERO {
        // β = 0 must not read C: NaN inside the matrices would show if it did.
        for batch in 0..case.g.batch {
            for row in 0..case.g.m {
                for col in 0..case.g.n {
                    c_in[c_index(&case.g, batch, row, col)] = Complex32::new(f32::NAN, f32::NAN);
                }
            }
        }
    }
    let truth = expected(case, &a, &b, &c_in, case.g.batch);
    let stream = gpu.stream();
    let mut tiles = Vec::new();
    if case.planar {
        let split = |v: &[Complex32]| -> Result<(CudaSlice<f32>, CudaSlice<f32>)> {
            let re: Vec<f32> = v.iter().map(|z| z.re).collect();
            let im: Vec<f32> = v.iter().map(|z| z.im).collect();
            Ok((gpu.upload(&re)?, gpu.upload(&im)?))
        };
        let ((ar, ai), (br, bi)) = (split(&a)?, split(&b)?);
        for tile in variants(case) {
            let (mut cr, mut ci) = split(&c_in)?;
            cgemm::cgemm_planar_with_tile(
                gpu,
                stream,
                &case.g,
                tile,
                case.alpha,
                Planar { re: &ar, im: &ai },
                Planar { re: &br, im: &bi },
                case.beta,
                PlanarMut { re: &mut cr, im: &mut ci },
            )?;
            let (re, im) = (gpu.download(&cr)?, gpu.download(&ci)?);
            let c_out: Vec<Complex32> = re.into_iter().zip(im).map(|(re, im)| Complex32::new(re, im)).collect();
            tiles.push((tile, truth.compare_within(&c_in, &c_out, &cgemm::tolerance(&case.g, tile))));
        }
    } else {
        let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
        for tile in variants(case) {
            let mut c_dev = gpu.upload(&c_in)?;
            cgemm::cgemm_with_tile(gpu, stream, &case.g, tile, case.alpha, &a_dev, &b_dev, case.beta, &mut c_dev)?;
            tiles.push((tile, truth.compare_within(&c_in, &gpu.download(&c_dev)?, &cgemm::tolerance(&case.g, tile))));
        }
    }
    Ok(CgemmCheck { case: case.clone(), tiles })
}

/// One implementation on one problem.
#[derive(Clone, Debug, Serialize)]
pub struct CgemmCandidate {
    pub name: &'static str,
    pub worst_ratio: f64,
    pub violations: u64,
    pub timing: Timing,
}

/// A row of `bench cgemm`.
#[derive(Clone, Debug, Serialize)]
pub struct CgemmRow {
    pub label: String,
    pub spec: String,
    pub flops: f64,
    pub min_bytes: f64,
    pub sets: usize,
    /// Matrices of set 0 compared with the f64 reference.
    pub checked_batches: usize,
    /// `candidates[0]` is ours (the heuristic's variant), then the `references` (cuBLAS's
    /// two GEMMs and cuBLASLt's proposals), then any variants timed on request and the one
    /// `cgemm_with_products` runs with Gauss's products (named after them).
    pub candidates: Vec<CgemmCandidate>,
    pub references: usize,
    /// The variant the heuristic chose.
    pub variant: &'static str,
    /// The variant `cgemm_with_products` runs with Gauss's products, where it differs from
    /// `variant`.
    pub gauss: Option<&'static str>,
}

impl CgemmRow {
    pub fn ours_ms(&self) -> f64 {
        self.candidates[0].timing.p50
    }

    /// cuBLAS's fastest correct result.
    pub fn best_cublas(&self) -> Option<&CgemmCandidate> {
        let references = &self.candidates[1..=self.references];
        references.iter().filter(|c| c.violations == 0).min_by(|a, b| a.timing.p50.total_cmp(&b.timing.p50))
    }

    pub fn speedup(&self) -> Option<f64> {
        Some(self.best_cublas()?.timing.p50 / self.ours_ms())
    }

    pub fn gbytes_per_s(&self) -> f64 {
        self.min_bytes / (self.ours_ms() * 1e-3) * 1e-9
    }

    pub fn hbm_percent(&self) -> f64 {
        self.gbytes_per_s() * 1e9 / HBM_BYTES_PER_S * 100.0
    }

    pub fn gflops(&self) -> f64 {
        self.flops / (self.ours_ms() * 1e-3) * 1e-9
    }
}

/// Times one problem: ours (the heuristic's variant), both cuBLAS GEMMs, the algorithms
/// cuBLASLt's heuristic proposes, each of `variants` (those that compute the problem) and
/// what `cgemm_with_products` runs with Gauss's products where that is a Gauss variant,
/// interleaved, inputs rotated over
/// `min_working_set` bytes, each output of set 0 (its first matrices) checked first.
#[allow(clippy::too_many_arguments)]
pub fn bench_case(
    gpu: &Gpu,
    queue: &mut GpuQueue,
    cublas: &Cublas,
    case: &CgemmCase,
    variants: &[&'static CgemmTile],
    seed: u64,
    schedule: Schedule,
    min_working_set: usize,
) -> Result<CgemmRow> {
    if case.planar {
        return Err(Error::invalid("storage", "bench cgemm times interleaved storage (cuBLAS has no planar GEMM)"));
    }
    let g = &case.g;
    let extents = g.validate()?;
    // 256-byte steps between sets.
    let strides = [extents.a, extents.b, extents.c].map(|e| e.next_multiple_of(32));
    let sets = min_working_set.div_ceil(8 * strides.iter().sum::<usize>()).max(2);
    let stream: &Arc<CudaStream> = gpu.stream();
    let fill = |len: usize, seed: u64| -> Result<CudaSlice<Complex32>> {
        let mut dev = gpu.alloc::<Complex32>(len)?;
        // Safety: a Complex32 is two f32 (repr(C), Pod): the same bytes, any bits valid.
        let mut parts = unsafe { dev.transmute_mut::<f32>(2 * len) }.expect("two f32 per complex");
        gpu.fill_uniform(stream, &mut parts, seed)?;
        Ok(dev)
    };
    let a = fill(strides[0] * sets, mix(seed, 1))?;
    let b = fill(strides[1] * sets, mix(seed, 2))?;
    let mut c = fill(strides[2] * sets, mix(seed, 3))?;

    // The reference for the first matrices of set 0, as much as the CPU does quickly.
    let checked_batches = (50_000_000 / (g.m * g.n * g.k).max(1)).clamp(1, g.batch);
    let a0 = gpu.download(&a.slice(0..extents.a))?;
    let b0 = gpu.download(&b.slice(0..extents.b))?;
    let c0 = gpu.download(&c.slice(0..extents.c))?;

    let mut variants: Vec<&'static CgemmTile> =
        variants.iter().copied().filter(|t| cgemm::shape(g, t).is_some()).collect();
    // What `cgemm_with_products` runs with Gauss's products, where it differs from `cgemm`:
    // always timed beside ours.
    let gauss = cgemm::choose_tile_for(g, false, Products::Gauss);
    let gauss = gauss.mma.is_some_and(|mma| mma.products == Products::Gauss).then_some(gauss);
    if let Some(tile) = gauss
        && !variants.contains(&tile)
    {
        variants.push(tile);
    }
    // cuBLASLt's heuristic may propose nothing for a shape; the row then has no Lt candidate.
    let mut lt = CublasLtPlan::new(gpu, stream, g)?;
    let mut names: Vec<&'static str> = vec!["convkit", CublasGemm::Cgemm.name(), CublasGemm::Cgemm3m.name()];
    names.extend((0..lt.algos()).map(CublasLtPlan::name));
    let references = names.len() - 1;
    names.extend(variants.iter().map(|t| t.name));
    let mut run = |which: usize, launch: usize, c: &mut CudaSlice<Complex32>| -> Result<()> {
        let set = launch % sets;
        let (a, b) = (
            a.slice(set * strides[0]..set * strides[0] + extents.a),
            b.slice(set * strides[1]..set * strides[1] + extents.b),
        );
        let mut c = c.slice_mut(set * strides[2]..set * strides[2] + extents.c);
        match which {
            0 => cgemm::cgemm(gpu, stream, g, case.alpha, &a, &b, case.beta, &mut c),
            1 => cublas.gemm(CublasGemm::Cgemm, g, case.alpha, &a, &b, case.beta, &mut c),
            2 => cublas.gemm(CublasGemm::Cgemm3m, g, case.alpha, &a, &b, case.beta, &mut c),
            r if r <= references => lt.matmul(r - 3, case.alpha, &a, &b, case.beta, &mut c),
            v => cgemm::cgemm_with_tile(
                gpu,
                stream,
                g,
                variants[v - 1 - references],
                case.alpha,
                &a,
                &b,
                case.beta,
                &mut c,
            ),
        }
    };
    let truth = expected(case, &a0, &b0, &c0, checked_batches);
    let chosen = cgemm::choose_tile(g, case.planar);
    let mut checks = Vec::new();
    for which in 0..names.len() {
        // Restore set 0's C (β may be 1) and run once.
        stream.memcpy_htod(&c0, &mut c.slice_mut(0..extents.c)).during("cuMemcpyHtoD")?;
        run(which, 0, &mut c)?;
        let out = gpu.download(&c.slice(0..extents.c))?;
        // Ours and our variants within their own bounds; cuBLAS within f32 summation's.
        let bound = match which {
            0 => cgemm::tolerance(g, chosen),
            r if r <= references => Tolerance::f32_sum(2 * g.k as u64 + 4),
            v => cgemm::tolerance(g, variants[v - 1 - references]),
        };
        checks.push(truth.compare_within(&c0, &out, &bound));
    }
    let samples = time_interleaved(queue, schedule, names.len(), &mut |_, which, launch| run(which, launch, &mut c))?;
    let candidates = names
        .iter()
        .zip(checks)
        .zip(&samples)
        .map(|((&name, stats), s)| CgemmCandidate {
            name,
            worst_ratio: stats.worst_ratio(),
            violations: stats.violations,
            timing: Timing::from(s),
        })
        .collect();
    Ok(CgemmRow {
        references,
        variant: chosen.name,
        gauss: gauss.map(|t| t.name),
        label: case.label(),
        spec: case.to_string(),
        flops: g.flops(),
        min_bytes: g.min_bytes(case.beta == Complex32::ZERO),
        sets,
        checked_batches,
        candidates,
    })
}
