//! `convkit bench`: our kernel against cuDNN's fastest algorithm, timed the same way in the
//! same run: CUDA events around each launch, warm-up first, the median of the repetitions,
//! inputs rotated through enough copies that the working set exceeds the L2 cache.

use crate::{
    Conv2d, Gpu, Result,
    check::{TOL_CUDNN, random_values, rel_error},
    cudnn::{self, CudnnConv, Math},
    direct,
    error::Context,
};
use cudarc::driver::{CudaSlice, sys::CUevent_flags};
use kernels_gpu::direct::DirectTile;
use rand::Rng;
use serde::Serialize;

/// cuDNN's ranking (FindEx times each algorithm once, on one input) can misorder close
/// algorithms; this many of its fastest are re-timed our way and the best is kept.
pub const CUDNN_CANDIDATES: usize = 3;

/// The copy bandwidth measured on the H200 (bytes read + written), for "% of HBM".
pub const HBM_BYTES_PER_S: f64 = 4.3e12;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Timed repetitions (the median is reported).
    pub reps: usize,
    pub warmup: usize,
    /// The rotated working set is at least this many bytes (twice the H200's 60 MB L2).
    pub min_working_set: usize,
    /// Workspace offered to cuDNN's algorithm search.
    pub workspace_bytes: usize,
    /// Time this direct-kernel variant instead of the heuristic's choice.
    pub tile: Option<DirectTile>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions { reps: 50, warmup: 5, min_working_set: 120 << 20, workspace_bytes: 1 << 30, tile: None }
    }
}

/// cuDNN's fastest algorithm in one math mode, as re-timed by us.
#[derive(Clone, Debug, Serialize)]
pub struct CudnnTiming {
    pub math: Math,
    pub algo: &'static str,
    pub tensor_ops: bool,
    pub ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub label: String,
    pub spec: String,
    pub tile: &'static str,
    pub ours_ms: f64,
    pub cudnn: Vec<CudnnTiming>,
    /// The faster of cuDNN's math modes.
    pub cudnn_ms: f64,
    /// `cudnn_ms / ours_ms`: above 1 we are faster.
    pub speedup: f64,
    pub gflops: f64,
    pub gbytes_per_s: f64,
    pub hbm_percent: f64,
    /// ‖ours − cuDNN (FMA)‖ / ‖cuDNN (FMA)‖ on the timed outputs.
    pub rel_err: f64,
    /// Rotated copies of the inputs.
    pub sets: usize,
}

impl BenchRow {
    /// Whether our timed output agreed with cuDNN's (false when cuDNN gave none, or on NaN).
    pub fn matches_cudnn(&self) -> bool {
        self.rel_err <= TOL_CUDNN
    }
}

/// Device buffers holding `sets` independent copies of x, w and y.
struct Arena {
    x: CudaSlice<f32>,
    w: CudaSlice<f32>,
    y: CudaSlice<f32>,
    sets: usize,
    lens: [usize; 3],
}

impl Arena {
    fn new(gpu: &Gpu, conv: &Conv2d, rng: &mut impl Rng, min_bytes: usize) -> Result<Self> {
        let g = conv.geometry()?;
        let set_bytes = 4 * (g.x_len + g.w_len + g.y_len);
        let sets = min_bytes.div_ceil(set_bytes).max(2);
        let x = gpu.upload(&random_values(rng, g.x_len * sets))?;
        let w = gpu.upload(&random_values(rng, g.w_len * sets))?;
        let y = gpu.alloc(g.y_len * sets)?;
        Ok(Arena { x, w, y, sets, lens: [g.x_len, g.w_len, g.y_len] })
    }
}

/// Median milliseconds of `run(set)` over `reps` launches, sets taken in turn.
fn time_median(gpu: &Gpu, opts: &BenchOptions, sets: usize, mut run: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    for i in 0..opts.warmup {
        run(i % sets)?;
    }
    let ctx = gpu.context();
    let events = (0..=opts.reps)
        .map(|_| ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).during("cuEventCreate"))
        .collect::<Result<Vec<_>>>()?;
    events[0].record(gpu.stream()).during("cuEventRecord")?;
    for (i, end) in events[1..].iter().enumerate() {
        run((opts.warmup + i) % sets)?;
        end.record(gpu.stream()).during("cuEventRecord")?;
    }
    gpu.synchronize()?;
    let mut times = events
        .windows(2)
        .map(|pair| pair[0].elapsed_ms(&pair[1]).map(f64::from).during("cuEventElapsedTime"))
        .collect::<Result<Vec<_>>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Benchmarks one layer.
pub fn bench_layer(
    gpu: &Gpu,
    conv: &Conv2d,
    opts: &BenchOptions,
    rng: &mut impl Rng,
    workspace: &mut CudaSlice<u8>,
) -> Result<BenchRow> {
    let geom = conv.geometry()?;
    let mut a = Arena::new(gpu, conv, rng, opts.min_working_set)?;
    let [xl, wl, yl] = a.lens;
    let tile = opts.tile.unwrap_or_else(|| direct::choose_tile(conv, &geom, gpu.sm_count()));

    gpu.poison(&mut a.y)?;
    let ours_ms = time_median(gpu, opts, a.sets, |i| {
        let (x, w) = (a.x.slice(i * xl..(i + 1) * xl), a.w.slice(i * wl..(i + 1) * wl));
        direct::forward_with(gpu, conv, &tile, &x, &w, &mut a.y.slice_mut(i * yl..(i + 1) * yl))
    })?;
    let ours = gpu.download(&a.y.slice(0..yl))?;

    let reference = CudnnConv::new(gpu, conv)?;
    let mut cudnn_rows = Vec::new();
    let mut fma_out = None;
    for math in [Math::Fma, Math::Default] {
        let (x0, w0) = (a.x.slice(0..xl), a.w.slice(0..wl));
        let found = reference.find(math, &x0, &w0, &mut a.y.slice_mut(0..yl), workspace)?;
        let mut best: Option<CudnnTiming> = None;
        for candidate in found.iter().take(CUDNN_CANDIDATES) {
            gpu.poison(&mut a.y)?;
            let ms = time_median(gpu, opts, a.sets, |i| {
                let (x, w) = (a.x.slice(i * xl..(i + 1) * xl), a.w.slice(i * wl..(i + 1) * wl));
                reference.forward(math, candidate.algo, &x, &w, &mut a.y.slice_mut(i * yl..(i + 1) * yl), workspace)
            })?;
            if best.as_ref().is_none_or(|b| ms < b.ms) {
                if math == Math::Fma {
                    fma_out = Some(gpu.download(&a.y.slice(0..yl))?);
                }
                let algo = cudnn::algo_name(candidate.algo);
                best = Some(CudnnTiming { math, algo, tensor_ops: candidate.tensor_ops, ms });
            }
        }
        cudnn_rows.extend(best);
    }
    let cudnn_ms = cudnn_rows.iter().map(|t| t.ms).fold(f64::INFINITY, f64::min);
    // Set 0 is the first one both sides wrote after the poison.
    let rel_err =
        fma_out.map_or(f64::NAN, |theirs| rel_error(&ours, &theirs.into_iter().map(f64::from).collect::<Vec<_>>()));
    let seconds = ours_ms * 1e-3;
    Ok(BenchRow {
        label: conv.label(),
        spec: conv.to_string(),
        tile: tile.name,
        ours_ms,
        cudnn: cudnn_rows,
        cudnn_ms,
        speedup: cudnn_ms / ours_ms,
        gflops: geom.flops(conv) / seconds * 1e-9,
        gbytes_per_s: geom.min_bytes() / seconds * 1e-9,
        hbm_percent: geom.min_bytes() / seconds / HBM_BYTES_PER_S * 100.0,
        rel_err,
        sets: a.sets,
    })
}
