//! Launcher of the depthwise convolution (`kernels-gpu/src/conv/depthwise.rs`): groups = C,
//! K = C or 2C, square 3x3 ... 9x9 filters, stride 1 or 2, no dilation; whole planes per block
//! for small maps (`kernels-gpu/src/conv/depthwise/planes.rs`); channels last (NHWC,
//! `kernels-gpu/src/conv/depthwise/nhwc.rs`): K = C, 3x3, 5x5 and 7x7. Other NCHW layers run
//! the direct kernel ([`super::direct`]), other NHWC layers cuDNN.

use super::epilogue::{Epilogue, EpilogueArgs};
use crate::{Conv2d, ConvGeometry, Error, Gpu, Result, TensorLayout};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    conv::depthwise::{
        BLOCK_THREADS, COPY_VECTORS, DEPTHWISE_FWD_VARIANTS, DepthwiseFwdParams, DepthwiseProgram, DepthwiseTile,
        STORE_VECTORS,
        nhwc::{DepthwiseNhwcParams, NHWC_BLOCK_THREADS},
        planes::{DepthwisePlanesParams, PLANE_PX, PLANES_QUANTUM, PlanesLayout},
        rows::{ROW_PX, ROWS_WARPS},
    },
};

/// Every variant the PTX holds.
pub fn variants() -> &'static [DepthwiseTile] {
    DEPTHWISE_FWD_VARIANTS
}

/// Why no variant can compute `conv`, if none can (any `conv`, valid or not: no panic).
pub fn layer_unsupported(conv: &Conv2d) -> Option<&'static str> {
    let multiplier = conv.k.checked_div(conv.c).unwrap_or(0);
    let offered = |f: fn(&DepthwiseTile) -> u32, v: usize| DEPTHWISE_FWD_VARIANTS.iter().any(|t| f(t) as usize == v);
    if conv.groups != conv.c || conv.k != conv.c * multiplier || !offered(|t| t.multiplier, multiplier) {
        return Some("depthwise layers only (groups = C, K = C or 2C)");
    }
    if conv.r != conv.s || !offered(|t| t.filter, conv.r) {
        return Some("another filter size (square 3x3, 5x5, 7x7 and 9x9 only)");
    }
    if conv.stride[0] != conv.stride[1] || !offered(|t| t.stride, conv.stride[0]) {
        return Some("another stride (1 or 2, the same along both dimensions)");
    }
    if conv.dilation != [1, 1] {
        return Some("dilation (the direct kernel computes dilated layers)");
    }
    // Planes and filter offsets are 32-bit on the GPU; output offsets are 64-bit.
    let below_2_31 = |factors: [usize; 3]| {
        factors.into_iter().try_fold(1usize, usize::checked_mul).is_some_and(|v| v <= i32::MAX as usize)
    };
    if !below_2_31([conv.n, conv.c, 1]) || !below_2_31([conv.k, conv.r, conv.s]) {
        return Some("more than 2^31 - 1 planes or filter taps");
    }
    None
}

/// Why `tile` cannot compute `conv`, if it cannot.
pub fn unsupported(conv: &Conv2d, tile: &DepthwiseTile) -> Option<&'static str> {
    layer_unsupported(conv).or_else(|| {
        let layer = [conv.r, conv.stride[0], conv.k / conv.c];
        let variant = [tile.filter, tile.stride, tile.multiplier].map(|v| v as usize);
        if layer != variant {
            return Some("the variant is for another filter size, stride or channel multiplier");
        }
        if tile.program == DepthwiseProgram::Channels {
            if conv.layout != TensorLayout::Nhwc {
                return Some("the channels-last variants take NHWC tensors");
            }
            if !conv.c.is_multiple_of(tile.lane_channels as usize) {
                return Some("the variant's channels per thread do not divide C");
            }
            if channels_grid(conv, tile, None).is_none() {
                return Some("more than 2^31 - 1 threads");
            }
            return None;
        }
        if let Some(reason) = super::nchw_unsupported(conv) {
            return Some(reason);
        }
        if tile.program == DepthwiseProgram::Planes {
            if conv.pad.iter().any(|&pad| pad >= conv.r) {
                return Some("the planes variants take padding of at most the filter size - 1");
            }
            if planes_shape(conv, tile).is_none() {
                return Some(
                    "the planes variants take maps of at most 64 threads of outputs per plane, 4 planes in 64 KB of shared memory and 2^31 elements in all",
                );
            }
        }
        if tile.program == DepthwiseProgram::Rows {
            let lane = (ROW_PX * tile.stride) as usize;
            if !conv.w.is_multiple_of(lane) || conv.w > 32 * lane {
                return Some(
                    "the rows variants take rows of a multiple of 4 * stride and at most 128 * stride elements",
                );
            }
            if 2 * conv.pad[1] + 1 != conv.s {
                return Some("the rows variants take outputs as wide as the input (padding (S - 1) / 2)");
            }
            if rows_grid(conv).is_none() {
                return Some("more than 2^27 warps of rows");
            }
        }
        None
    })
}

/// Output rows a `Rows` warp computes at most, for 3x3 filters: on the H200 (N = 64 MobileNetV2
/// layers, 112 and 56 wide) segments of 14 rows ran 0.065 and 0.071 ms, of 28 0.068 and 0.076,
/// whole planes 0.077 and 0.083, of 7 rows 0.065 and 0.074 (each segment reads K - 1 rows more
/// than it outputs). Larger filters take segments of at least 4 (K - 1) rows.
pub const SEGMENT_ROWS: usize = 14;

/// A `Rows` launch: output rows per warp (the output's rows in equal segments of at most
/// [`SEGMENT_ROWS`], or `4 (K - 1)`) and warps. `None` for a layer without a geometry or past
/// 2^27 warps (each lane's thread index is 32 bits).
fn rows_grid(conv: &Conv2d) -> Option<(usize, usize)> {
    let out_h = conv.geometry().ok()?.out_h;
    let most = SEGMENT_ROWS.max(4 * conv.r.saturating_sub(1));
    let segment = out_h.div_ceil(out_h.div_ceil(most));
    let warps = plane_groups(conv).checked_mul(out_h.div_ceil(segment))?;
    (warps <= 1 << 27).then_some((segment, warps))
}

/// Lanes of one row in a `Rows` launch (1 to 32 where the variant applies).
fn row_lanes(conv: &Conv2d) -> usize {
    conv.w.div_ceil(ROW_PX as usize * conv.stride[0].max(1)).clamp(1, 32)
}

/// Plane groups (warps down one segment) of a `Rows` launch.
fn plane_groups(conv: &Conv2d) -> usize {
    (conv.n * conv.c).div_ceil(32 / row_lanes(conv))
}

/// Threads from which a channels-last launch stops shortening its segments: about 500 per
/// SM of the H200, 15 warps (N = 1 layers would otherwise run a few warps per SM).
pub const MIN_CHANNELS_THREADS: usize = 64 << 10;

/// Percent of one wave (the blocks the GPU holds at once) from which a channels-last launch
/// keeps its segments however few its threads: halving them would double the rounds of blocks
/// for the same outputs plus their halo rows. H200, ConvNeXt's 14-wide 7x7 layer (N = 32, 384
/// blocks of a 396-block wave): 0.0177 ms in 7-row segments, 0.0163 in 14-row ones (three runs
/// each).
pub const FULL_WAVE_PERCENT: usize = 95;

/// Input rows a channels-last step may take (`ceil(K / stride)`) for the launch to use the
/// shortest segments, one step each, whatever its size. A thread walks its segment as a chain
/// of dependent loads, so more and shorter chains hide more latency, while the extra halo rows
/// they read come from L2. H100, every N = 64 layer of the depthwise suite, 14-row segments
/// against one step (ms): 3x3 stride 1 c32-112 0.081 / 0.073, c144-56 0.093 / 0.084, c576-14
/// 0.029 / 0.025; 3x3 stride 2 c96-112 0.141 / 0.129 (8, 4 and 28 rows: 0.139, 0.131, 0.148),
/// c192-28 0.024 / 0.021; 5x5 stride 2 c144-56 0.059 / 0.057; no 3x3 layer slower. At 5 rows
/// a step (5x5 stride 1) one step was slower: c240-28 0.045 / 0.048, c480-14 0.025 / 0.027; at
/// 7 (ConvNeXt) within 1%.
pub const SHORTEST_SEGMENT_FED: usize = 3;

/// A `Channels` launch: output rows per thread and threads. One step's rows (`S` below) where a
/// step takes at most [`SHORTEST_SEGMENT_FED`] input rows and that many threads fit a launch;
/// otherwise segments of at most [`SEGMENT_ROWS`], halved while the launch has fewer than
/// [`MIN_CHANNELS_THREADS`] threads and, where `wave` gives the blocks the GPU holds at once, fills
/// less than [`FULL_WAVE_PERCENT`] of it (without `wave`, the most threads a launch can take), down
/// to `S = ceil(K / stride)` rows, each rounded up to a multiple of `S`: the program computes a
/// segment's rows in such multiples, so a shorter one costs as much as `S` rows (H200, e157bd3:
/// halving ConvNeXt's 7-high 7x7 layer to 3-row segments took it from 0.013 to 0.028 ms, its N = 1
/// 56-wide one from 0.009 to 0.018). With no multiply-add spent outside a segment since the
/// channels-last walk's first and last iterations are compiled apart, 7x7 layers no longer take
/// longer ones (the 56-wide ConvNeXt layer: 14 rows 0.0539 ms, 21 rows 0.0575).
/// `None` for a layer without a geometry or past 2^31 - 1 threads.
fn channels_grid(conv: &Conv2d, tile: &DepthwiseTile, wave: Option<usize>) -> Option<(usize, usize)> {
    let geom = conv.geometry().ok()?;
    let per_segment = conv
        .n
        .checked_mul(geom.out_w.div_ceil(tile.tile_w as usize))?
        .checked_mul(conv.c / tile.lane_channels as usize)?;
    let threads = |segment: usize| per_segment.checked_mul(geom.out_h.div_ceil(segment));
    let fed = (tile.filter as usize).div_ceil(tile.stride as usize);
    let fits = |threads: &usize| *threads <= i32::MAX as usize;
    if fed <= SHORTEST_SEGMENT_FED
        && let Some(threads) = threads(fed).filter(fits)
    {
        return Some((fed, threads));
    }
    let even = |most: usize| geom.out_h.div_ceil(geom.out_h.div_ceil(most.max(1))).next_multiple_of(fed);
    let mut segment = even(SEGMENT_ROWS);
    let short = |threads: usize| {
        threads < MIN_CHANNELS_THREADS
            && wave.is_none_or(|wave| 100 * threads.div_ceil(NHWC_BLOCK_THREADS as usize) < FULL_WAVE_PERCENT * wave)
    };
    while segment > fed && short(threads(segment)?) {
        segment = even(segment / 2);
    }
    threads(segment).filter(fits).map(|threads| (segment, threads))
}

/// Input height and width up to which the heuristic takes a `Planes` variant over the tiles.
pub const PLANES_MAX_MAP: usize = 20;

/// Threads per block a `Planes` launch aims at (fewer where it would have too few blocks).
pub const PLANES_BLOCK_THREADS: usize = 128;
/// Most threads per plane of a `Planes` launch (rows of `tile_h` by [`PLANE_PX`] outputs): four
/// planes of them fill the largest block, [`PLANES_MAX_BLOCK_THREADS`].
pub const PLANES_MAX_PLANE_THREADS: usize = 64;
pub const PLANES_MAX_BLOCK_THREADS: usize = PLANES_QUANTUM as usize * PLANES_MAX_PLANE_THREADS;
/// Most shared memory a `Planes` block takes (input planes, guards and output stage), so that
/// several fit an SM.
pub const PLANES_MAX_SMEM: usize = 64 << 10;
/// Blocks per SM below which a `Planes` launch takes fewer planes per block (N = 1 layers
/// would otherwise leave most SMs idle).
pub const PLANES_MIN_BLOCKS_PER_SM: usize = 4;

/// A `Planes` variant's threads per plane, the step in which a block's planes go (the least
/// multiple of [`PLANES_QUANTUM`] that makes whole warps, where four planes do not) and the most
/// planes a block of it may take; `None` for a layer without a geometry, or past the variant's
/// limits (threads per plane, shared memory, 31-bit offsets).
fn planes_shape(conv: &Conv2d, tile: &DepthwiseTile) -> Option<(usize, usize, usize)> {
    let geom = conv.geometry().ok()?;
    let per_plane = geom.out_h.div_ceil(tile.tile_h as usize) * geom.out_w.div_ceil(PLANE_PX);
    if per_plane > PLANES_MAX_PLANE_THREADS {
        return None;
    }
    let quantum = PLANES_QUANTUM as usize;
    // Blocks of 88 threads (a partial third warp) ran 7x7 maps 8% below what whole warps would.
    let step = (quantum..=32).step_by(quantum).find(|s| (s * per_plane).is_multiple_of(32)).unwrap_or(quantum);
    let (in_plane, out_plane) = (conv.h.checked_mul(conv.w)?, geom.out_h * geom.out_w);
    // The guards take at most 64 slots; each plane its input and its M output planes.
    let plane_bytes = 4 * (in_plane.checked_add(out_plane * tile.multiplier as usize)?);
    let fit = PLANES_MAX_SMEM.saturating_sub(4 * 64) / plane_bytes;
    let step = if step * per_plane <= PLANES_MAX_BLOCK_THREADS && step <= fit { step } else { quantum };
    let most = (PLANES_BLOCK_THREADS / per_plane).max(step).min(fit) / step * step;
    // Every element offset of the blocks' planes, the last block's unused ones too, fits 31 bits.
    let padded = (conv.n.checked_mul(conv.c)?).checked_next_multiple_of(most.max(1))?;
    let elements = padded.checked_mul(in_plane.max(out_plane * tile.multiplier as usize))?;
    (most > 0 && elements < 1 << 31).then_some((per_plane, step, most))
}

/// A `Planes` launch for `conv` with `tile` (a variant that computes it) on a GPU of
/// `sm_count` SMs: the parameters (addresses filled in at launch) and the grid.
pub fn planes_params(
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    sm_count: u32,
) -> Option<(DepthwisePlanesParams, LaunchConfig)> {
    let (per_plane, step, most) = planes_shape(conv, tile)?;
    let planes = conv.n * conv.c;
    let mut block_planes = most;
    while block_planes > step && planes.div_ceil(block_planes) < PLANES_MIN_BLOCKS_PER_SM * sm_count as usize {
        block_planes -= step;
    }
    // `planes_shape` bounded every extent and offset to 31 bits.
    let u = |v: usize| v as u32;
    let magic = |d: usize| MagicDiv::new(d as u32).expect("validated extents are non-zero");
    let (in_plane, out_plane) = (conv.h * conv.w, geom.out_h * geom.out_w);
    let layout =
        PlanesLayout::new(tile.filter, tile.stride, tile.multiplier, u(block_planes), u(in_plane), u(out_plane));
    let threads = block_planes * per_plane;
    let params = DepthwisePlanesParams {
        x: 0,
        w: 0,
        y: 0,
        in_h: u(conv.h),
        in_w: u(conv.w),
        out_h: u(geom.out_h),
        out_w: u(geom.out_w),
        pad_h: conv.pad[0] as i32,
        pad_w: conv.pad[1] as i32,
        planes: u(planes),
        block_planes: u(block_planes),
        threads: u(threads),
        in_plane: u(in_plane),
        out_plane: u(out_plane),
        x_len: u(geom.x_len),
        y_len: u(geom.y_len),
        _pad: 0,
        plane_slots: magic(block_planes),
        row_blocks: magic(geom.out_h.div_ceil(tile.tile_h as usize)),
        channels: magic(conv.c),
        out_planes: magic(out_plane),
        out_channels: magic(conv.k),
        epilogue: Epilogue::NONE.params(conv, geom),
    };
    let cfg = LaunchConfig {
        grid_dim: (u(planes.div_ceil(block_planes)), 1, 1),
        block_dim: (u(threads), 1, 1),
        shared_mem_bytes: layout.smem_bytes(),
    };
    Some((params, cfg))
}

/// The heuristic's channels-last variant for buffers aligned to `align` bytes: the first of
/// the layer's in the variants' order (measured preference) whose channels per thread divide
/// C and whose loads the alignment allows.
fn channels_variant(conv: &Conv2d, align: usize) -> Option<DepthwiseTile> {
    supporting_variants(conv)
        .find(|t| t.program == DepthwiseProgram::Channels && align.is_multiple_of(4 * t.lane_channels as usize))
        .copied()
}

/// The variants that can compute `conv`.
pub fn supporting_variants(conv: &Conv2d) -> impl Iterator<Item = &'static DepthwiseTile> + '_ {
    DEPTHWISE_FWD_VARIANTS.iter().filter(|t| unsupported(conv, t).is_none())
}

/// How much output area (edge tiles included) a tile may cover beyond the output's: on the
/// H200 the 32x32 tiles were the fastest on 112, 56 and 28 wide maps (1.31x covered: the
/// 8x8 tiles, which fit 56 exactly, took 1.6x as long), 16x16 on 14 and 8x8 on 7.
pub const MAX_COVER: f64 = 1.35;

/// The heuristic's tile: the largest that covers at most [`MAX_COVER`] times the output's
/// area, else the one that covers the least.
pub fn choose_tile(conv: &Conv2d, geom: &ConvGeometry) -> Result<DepthwiseTile> {
    if let Some(reason) = layer_unsupported(conv) {
        return Err(Error::Unsupported { algorithm: "depthwise", reason: reason.to_owned() });
    }
    if conv.layout == TensorLayout::Nhwc {
        return channels_variant(conv, 16).ok_or_else(|| Error::Unsupported {
            algorithm: "depthwise",
            reason: "channels last: 3x3, 5x5 and 7x7 filters, stride 1 or 2, multiplier 1 only".to_owned(),
        });
    }
    let enough_warps = rows_grid(conv).is_some_and(|(_, warps)| warps >= MIN_ROWS_WARPS);
    if let Some(rows) = supporting_variants(conv).find(|t| t.program == DepthwiseProgram::Rows && enough_warps) {
        return Ok(*rows);
    }
    let small = conv.h.max(conv.w) <= PLANES_MAX_MAP;
    if let Some(planes) = supporting_variants(conv).find(|t| t.program == DepthwiseProgram::Planes && small) {
        return Ok(*planes);
    }
    Ok(tiles_variant(conv, geom))
}

/// Warps from which the heuristic takes a `Rows` variant over the tiles: on the H200 the rows
/// won with 1024 warps and more (a 5x5 multiplier-2 layer on 28-wide maps, 1024 warps: 0.016
/// against 0.017 ms; 3072 to 18 432 warps: 1.1-1.9x) and lost with 144 and 256 (N = 1, 7x7 on
/// a 56-wide map and 3x3 on a 112-wide one: 0.010 and 0.011 ms, where the tiles took 0.007
/// and 0.006 ms in an earlier run): a few warps per SM cannot keep enough loads in flight.
pub const MIN_ROWS_WARPS: usize = 1024;

/// The `Tiles` variant for a layer the depthwise kernel computes: the largest tile that covers
/// at most [`MAX_COVER`] times the output's area, else the one that covers the least.
fn tiles_variant(conv: &Conv2d, geom: &ConvGeometry) -> DepthwiseTile {
    let cover = |t: &DepthwiseTile| {
        let [down, across] = t.tiles(geom.out_h as u64, geom.out_w as u64);
        (down * across * (t.tile_h * t.tile_w) as u64) as f64 / (geom.out_h * geom.out_w) as f64
    };
    let area = |t: &&DepthwiseTile| t.tile_h * t.tile_w;
    let tiles = || supporting_variants(conv).filter(|t| t.program == DepthwiseProgram::Tiles);
    let largest = tiles().filter(|t| cover(t) <= MAX_COVER).max_by_key(area);
    let tile = largest.or_else(|| tiles().min_by(|a, b| cover(a).total_cmp(&cover(b))));
    *tile.expect("every filter, stride and multiplier offered comes in every tile size")
}

/// The kernel parameters for `conv` with `tile`; the addresses are filled in at launch.
/// `x_aligned`, `y_aligned`: whether `x` and `y` are 16-byte aligned (16-byte copies and stores
/// need that, and rows of a multiple of 4 elements).
pub fn params(
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    x_aligned: bool,
    y_aligned: bool,
) -> DepthwiseFwdParams {
    // `Conv2d::geometry` and `unsupported` have checked that every value fits its field.
    let u = |v: usize| v as u32;
    let magic = |d: u64| MagicDiv::new(d as u32).expect("validated extents are non-zero");
    let [_, across] = tile.tiles(geom.out_h as u64, geom.out_w as u64);
    let (row_lanes, segment) = match tile.program {
        // A layer the variant does not compute gets a grid of one row (the launcher refuses it).
        DepthwiseProgram::Rows => (row_lanes(conv), rows_grid(conv).map_or(1, |(segment, _)| segment)),
        // Channels-last variants take `channels_params`; tiles need none of these.
        DepthwiseProgram::Tiles | DepthwiseProgram::Channels | DepthwiseProgram::Planes => (1, 1),
    };
    DepthwiseFwdParams {
        x: 0,
        w: 0,
        y: 0,
        in_h: u(conv.h),
        in_w: u(conv.w),
        in_plane: u(conv.h * conv.w),
        out_h: u(geom.out_h),
        out_w: u(geom.out_w),
        pad_h: conv.pad[0] as i32,
        pad_w: conv.pad[1] as i32,
        planes: u(conv.n * conv.c),
        flags: if y_aligned && geom.out_w.is_multiple_of(4) { STORE_VECTORS } else { 0 }
            | if x_aligned && conv.w.is_multiple_of(4) { COPY_VECTORS } else { 0 },
        z_base: 0,
        tiles_w: magic(across),
        channels: magic(conv.c as u64),
        row_lanes: magic(row_lanes as u64),
        segments: magic(geom.out_h.div_ceil(segment) as u64),
        planes_per_warp: u(32 / row_lanes),
        segment_rows: u(segment),
        epilogue: Epilogue::NONE.params(conv, geom),
    }
}

/// The channels-last kernel's parameters for `conv` with `tile` (a `Channels` variant that
/// computes it), on a GPU that holds `wave` of its blocks at once where known; the addresses
/// are filled in at launch.
pub fn channels_params(
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    wave: Option<usize>,
) -> DepthwiseNhwcParams {
    // `Conv2d::geometry` and `unsupported` have checked that every value fits its field.
    let u = |v: usize| v as u32;
    let magic = |d: usize| MagicDiv::new(d as u32).expect("validated extents are non-zero");
    let (segment, threads) = channels_grid(conv, tile, wave).unwrap_or((1, 0));
    DepthwiseNhwcParams {
        x: 0,
        w: 0,
        y: 0,
        in_h: u(conv.h),
        in_w: u(conv.w),
        out_h: u(geom.out_h),
        out_w: u(geom.out_w),
        pad_h: conv.pad[0] as i32,
        pad_w: conv.pad[1] as i32,
        channels: u(conv.c),
        segment_rows: u(segment),
        threads: u(threads),
        _pad: 0,
        vectors: magic(conv.c / tile.lane_channels as usize),
        tiles_w: magic(geom.out_w.div_ceil(tile.tile_w as usize)),
        segments: magic(geom.out_h.div_ceil(segment)),
        epilogue: Epilogue::NONE.params(conv, geom),
    }
}

/// `y = conv(x, w)` on `stream` with the heuristic's tile. Buffers are NCHW / KCRS, f32,
/// exactly the sizes of [`Conv2d::geometry`], and belong to `gpu`.
pub fn forward(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
) -> Result<()> {
    let geom = conv.geometry()?;
    let tile = choose_tile(conv, &geom)?;
    forward_with(gpu, stream, conv, &tile, x, w, y)
}

/// `y = conv(x, w)` on `stream` with an explicit variant (one of [`variants`]).
pub fn forward_with(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &DepthwiseTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
) -> Result<()> {
    forward_fused(gpu, stream, conv, tile, x, w, y, &EpilogueArgs::NONE)
}

/// `y = epilogue(conv(x, w))` on `stream` with an explicit variant, the epilogue fused into
/// the kernel's stores. A `Rows` variant runs the layer's `Tiles` variant instead where `x`,
/// `y` or the residual is not 16-byte aligned.
#[allow(clippy::too_many_arguments)] // forward_with's, and the epilogue
pub fn forward_fused(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &DepthwiseTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    let geom = conv.geometry()?;
    if !DEPTHWISE_FWD_VARIANTS.contains(tile) {
        return Err(Error::UnsupportedTile {
            tile: tile.name,
            reason: "not a kernel of this build (see depthwise::variants)",
        });
    }
    if let Some(reason) = unsupported(conv, tile) {
        return Err(Error::UnsupportedTile { tile: tile.name, reason });
    }
    if matches!(tile.program, DepthwiseProgram::Rows | DepthwiseProgram::Planes) {
        // Rows and planes read and write 16-byte pieces; tiles take any alignment.
        let aligned = |p: u64| p.is_multiple_of(16);
        let residual_aligned = epilogue.residual.is_none_or(|r| aligned(r.device_ptr(stream).0));
        if !(aligned(x.device_ptr(stream).0) && aligned(y.device_ptr_mut(stream).0) && residual_aligned) {
            return forward_fused(gpu, stream, conv, &tiles_variant(conv, &geom), x, w, y, epilogue);
        }
    }
    // Tiles: x = a plane's tiles, z = plane groups (split into launches); rows: x = blocks
    // of whole warps.
    enum Grid {
        Tiles(super::SplitGrid),
        Warps(LaunchConfig),
    }
    let grid = match tile.program {
        DepthwiseProgram::Channels => return forward_channels_last(gpu, stream, conv, &geom, tile, x, w, y, epilogue),
        DepthwiseProgram::Planes => return forward_planes(gpu, stream, conv, &geom, tile, x, w, y, epilogue),
        DepthwiseProgram::Tiles => {
            let [down, across] = tile.tiles(geom.out_h as u64, geom.out_w as u64);
            let grid_x = u32::try_from(down * across)
                .ok()
                .filter(|&x| x <= i32::MAX as u32)
                .ok_or(Error::UnsupportedTile { tile: tile.name, reason: "more than 2^31 - 1 tiles per plane" })?;
            Grid::Tiles(super::SplitGrid {
                kernel: tile.name,
                grid_x,
                total_z: tile.plane_groups((conv.n * conv.c) as u64),
                block_threads: BLOCK_THREADS,
                smem_bytes: tile.smem_bytes(),
            })
        }
        DepthwiseProgram::Rows => {
            let (_, warps) = rows_grid(conv).expect("unsupported() checked the rows grid");
            Grid::Warps(LaunchConfig {
                grid_dim: (warps.div_ceil(ROWS_WARPS as usize) as u32, 1, 1),
                block_dim: (32 * ROWS_WARPS, 1, 1),
                shared_mem_bytes: 0,
            })
        }
    };
    super::check_buffers(gpu, &geom, x, w, y)?;
    epilogue.check(gpu, conv, &geom)?;
    {
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (w_ptr, _w_sync) = w.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        // 16-byte stores read the residual in 16-byte pieces at the same offsets.
        let residual_aligned = epilogue.residual.is_none_or(|r| r.device_ptr(stream).0.is_multiple_of(16));
        let (x_aligned, y_aligned) = (x_ptr.is_multiple_of(16), y_ptr.is_multiple_of(16) && residual_aligned);
        let mut p = params(conv, &geom, tile, x_aligned, y_aligned);
        (p.x, p.w, p.y) = (x_ptr, w_ptr, y_ptr);
        // Safety: the buffers were checked to hold exactly the shape's extents, which
        // `Conv2d::geometry` and `unsupported` bound to the kernel's index arithmetic (the rows
        // program's lanes cover in_w = out_w columns, its warps fit a 32-bit thread index).
        epilogue.with_params(stream, conv, &geom, |e| {
            p.epilogue = e;
            match &grid {
                Grid::Tiles(tiles) => unsafe { super::launch_split_z(gpu, stream, tiles, p, |p, z| p.z_base = z) },
                Grid::Warps(warps) => unsafe { gpu.launch(stream, tile.entries.of_mode(e.mode()), *warps, p) },
            }
        })?;
    } // the buffers' cross-stream events are recorded here
    gpu.check_deferred()
}

/// [`forward_fused`] of a `Planes` variant (that computes `conv`, with 16-byte aligned `x`, `y`
/// and residual).
#[allow(clippy::too_many_arguments)] // forward_fused's, and the geometry
fn forward_planes(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    let (p, cfg) = planes_params(conv, geom, tile, gpu.sm_count()).expect("unsupported() checked the planes grid");
    let set = |p: &mut DepthwisePlanesParams, [x, w, y]: [u64; 3], e| (p.x, p.w, p.y, p.epilogue) = (x, w, y, e);
    // Safety: the buffers are checked to hold exactly the shape's extents; they are 16-byte
    // aligned (the caller ran the tiles otherwise); `unsupported` bounded every offset, the last
    // block's unused planes included, to 31 bits, and the copies read no element past `x_len`.
    unsafe { launch_checked(gpu, stream, conv, geom, tile, cfg, p, set, x, w, y, epilogue) }
}

/// [`forward_fused`] of a `Channels` variant (that computes `conv`). Buffers not aligned to its
/// loads of `4·lane_channels` bytes run the heuristic's variant for their alignment.
#[allow(clippy::too_many_arguments)] // forward_fused's, and the geometry
fn forward_channels_last(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    let align = |p: u64| 1usize << p.trailing_zeros().min(4);
    let residual = epilogue.residual.map_or(16, |r| align(r.device_ptr(stream).0));
    let aligned = align(x.device_ptr(stream).0).min(align(y.device_ptr_mut(stream).0)).min(residual);
    if !aligned.is_multiple_of(4 * tile.lane_channels as usize) {
        let narrower = channels_variant(conv, aligned)
            .ok_or(Error::UnsupportedTile { tile: tile.name, reason: "x, y or the residual is not 4-byte aligned" })?;
        return forward_channels_last(gpu, stream, conv, geom, &narrower, x, w, y, epilogue);
    }
    // The entry point the epilogue's store mode launches, and how many of its blocks fit.
    let entry = tile.entries.of_mode(epilogue.epilogue.params(conv, geom).mode());
    let wave = gpu.resident_blocks(entry, NHWC_BLOCK_THREADS, 0)? as usize * gpu.sm_count() as usize;
    let p = channels_params(conv, geom, tile, Some(wave));
    let cfg = LaunchConfig {
        grid_dim: (p.threads.div_ceil(NHWC_BLOCK_THREADS), 1, 1),
        block_dim: (NHWC_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let set = |p: &mut DepthwiseNhwcParams, [x, w, y]: [u64; 3], e| (p.x, p.w, p.y, p.epilogue) = (x, w, y, e);
    // Safety: the buffers are checked to hold exactly the shape's extents and are aligned to
    // the variant's vectors; `unsupported` bounded the threads to 31 bits, and C is a multiple
    // of the channels per thread, so every vector lies within one pixel.
    unsafe { launch_checked(gpu, stream, conv, geom, tile, cfg, p, set, x, w, y, epilogue) }
}

/// Checks the buffers and the epilogue, then launches `tile`'s entry point for the epilogue's
/// store mode with `p`, into which `set` writes the addresses of x, w, y and the epilogue's
/// parameters.
///
/// # Safety
/// `p` and `cfg` must be what the kernel's index arithmetic is valid for, given buffers that
/// hold exactly the shape's extents.
#[allow(clippy::too_many_arguments)] // a launch, its parameters and forward_fused's
unsafe fn launch_checked<P: bytemuck::Pod>(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    geom: &ConvGeometry,
    tile: &DepthwiseTile,
    cfg: LaunchConfig,
    mut p: P,
    set: impl Fn(&mut P, [u64; 3], kernels_gpu::conv::epilogue::EpilogueParams),
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    super::check_buffers(gpu, geom, x, w, y)?;
    epilogue.check(gpu, conv, geom)?;
    {
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (w_ptr, _w_sync) = w.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        epilogue.with_params(stream, conv, geom, |e| {
            set(&mut p, [x_ptr, w_ptr, y_ptr], e);
            unsafe { gpu.launch(stream, tile.entries.of_mode(e.mode()), cfg, p) }
        })?;
    } // the buffers' cross-stream events are recorded here
    gpu.check_deferred()
}
