//! Launcher of the grouped implicit GEMM on tensor cores (`kernels-gpu/src/conv/igemm.rs`):
//! any groups, filter, stride, padding and dilation, NCHW or NHWC (flat and spatial tiles in
//! each, read and written as they are: no transform), in TF32 (the fast class,
//! PyTorch's default for convolutions) or 3xTF32 (an error near f32's).
//!
//! Non-finite inputs: a NaN or infinity may also turn the outputs of the other groups that
//! share its block into NaN (their block-diagonal zeros multiply it), and 3xTF32 turns an
//! infinity into NaN (its residual is ∞ - ∞). Finite inputs give finite, bounded outputs.

use super::cudnn::MathClass;
use super::epilogue::EpilogueArgs;
use crate::{Conv2d, ConvGeometry, Error, Gpu, Result, TensorLayout};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels_gpu::{
    MagicDiv,
    conv::epilogue::ModeEntries,
    conv::igemm::{
        BLOCK_THREADS, CHANNELS_LAST, IGEMM_FWD_VARIANTS, INPUT_VECTORS, IgemmFwdParams, IgemmPackParams, IgemmTile,
        PACK_KERNEL, PixelTile, Precision, STORE_VECTORS,
        spatial::{self, IgemmSpatialParams},
    },
    verify::Tolerance,
};

/// Every variant the PTX holds.
pub fn variants() -> &'static [IgemmTile] {
    IGEMM_FWD_VARIANTS
}

/// The bound outputs of `tile` are held to against the f64 reference on `conv` (valid)
/// (`|y - v| <= tol · Σ|x·w| + floor`, see `kernels_gpu::verify`), beyond the f32
/// accumulation's ([`Tolerance::f32_sum`]):
/// - TF32 rounds each input to nearest with 10 mantissa bits (relative error ≤ 2^-11), so a
///   product errs by at most 2^-10 of its magnitude (and 2^-22 more); and the tensor cores
///   truncate as they accumulate, errors of one sign that grow with the mma count: up to half
///   an f32 ulp of the magnitude per mma is allowed for.
/// - 3xTF32 keeps each weight to 2^-22 (value plus residual, both rounded when packed) and
///   each input to 2^-21 (its residual truncated by `mma`: `kernels_gpu::tf32::split_tf32`),
///   and drops the product of the residuals (≤ 2^-22): at most 4 · 2^-22 per product, times
///   `1 + 2^-10` for the values' own size; each chunk's few mma
///   are summed apart and added to the total in f32 (round to nearest), which
///   [`Tolerance::f32_sum`] covers.
pub fn tolerance(conv: &Conv2d, geom: &ConvGeometry, tile: &IgemmTile) -> Tolerance {
    let taps = geom.taps(conv) as u64;
    let sum = Tolerance::f32_sum(taps);
    let extra = match tile.precision {
        Precision::Tf32 => {
            let shape = shape(conv, geom, tile);
            let mmas = (conv.r * conv.s) as f64 * shape.channel_chunks as f64 * tile.k_steps as f64;
            2f64.powi(-10) + mmas * 2f64.powi(-24)
        }
        Precision::Tf32x3 => 4.0 * 2f64.powi(-22) * (1.0 + 2f64.powi(-10)),
    };
    Tolerance { tol: extra + sum.tol, floor: sum.floor }
}

/// The math class of a precision: TF32 the fast one; 3xTF32 the exact one (its bound,
/// [`tolerance`], is under twice the f32 summation's).
pub fn class(precision: Precision) -> MathClass {
    match precision {
        Precision::Tf32 => MathClass::Fast,
        Precision::Tf32x3 => MathClass::Exact,
    }
}

/// The precisions a plan of math class `math` may run, its first choice first: the exact class
/// admits 3xTF32 only, the fast class TF32 before 3xTF32.
pub fn precisions(math: MathClass) -> &'static [Precision] {
    match math {
        MathClass::Exact => &[Precision::Tf32x3],
        MathClass::Fast => &[Precision::Tf32, Precision::Tf32x3],
    }
}

/// Why no variant can compute `conv`, if none can (any `conv`, valid or not: no panic).
pub fn layer_unsupported(conv: &Conv2d) -> Option<&'static str> {
    // Filter offsets are 32-bit on the GPU; `Conv2d::geometry` bounds the rest.
    let filter = [conv.k, conv.c.checked_div(conv.groups).unwrap_or(0), conv.r, conv.s];
    match filter.into_iter().try_fold(1usize, usize::checked_mul) {
        Some(0) => Some("an empty filter (no channels, outputs or groups)"),
        Some(v) if v <= i32::MAX as usize => None,
        _ => Some("a filter of more than 2^31 - 1 elements"),
    }
}

/// Dynamic shared memory a spatial tile keeps to by holding fewer filter taps' weights per step
/// ([`IgemmSpatialParams::tap_steps`]): a third of the H200's 228 KB per multiprocessor less
/// the 1 KB each block reserves, so that three blocks share one. A chunk in one step had held
/// the 56- and 64-column 3xTF32 tiles to 2 blocks per SM at 3x3 (87-97 KB; Nsight Compute,
/// benches/NOTES.md "Tensor-core NHWC"). In two steps `s16x8_n56` (130-136 registers) and
/// `s8x8_n64` (80-96) run 3 and got 9-25% faster on RegNetY's N = 32 layers; the 16-row and
/// 16-column n64 tiles (172-176 registers) stay at 2 and got 5-12% slower (v4 there), so a plan
/// takes one step again where the split adds no busy blocks ([`split_adds_busy_blocks`]).
pub const SPATIAL_SMEM_TARGET: u32 = 75 * 1024;

/// Why `tile`'s layout is not `conv`'s, if it is not.
fn layout_mismatch(conv: &Conv2d, tile: &IgemmTile) -> Option<&'static str> {
    match (conv.layout, tile.channels_last) {
        (TensorLayout::Nchw, true) => Some("a channels-last (NHWC) tile on an NCHW layer"),
        (TensorLayout::Nhwc, false) => Some("an NCHW tile on a channels-last layer"),
        _ => None,
    }
}

/// Why `tile` cannot compute `conv` (valid), if it cannot.
pub fn tile_unsupported(conv: &Conv2d, geom: &ConvGeometry, tile: &IgemmTile) -> Option<&'static str> {
    layer_unsupported(conv).or_else(|| layout_mismatch(conv, tile)).or_else(|| shape(conv, geom, tile).unsupported())
}

/// The shapes of the variants that compute `conv` (valid).
fn supported_shapes<'a>(conv: &'a Conv2d, geom: &'a ConvGeometry) -> impl Iterator<Item = IgemmShape> + 'a {
    let layer = layer_unsupported(conv).is_none();
    IGEMM_FWD_VARIANTS
        .iter()
        .filter(move |t| layer && layout_mismatch(conv, t).is_none())
        .map(|t| shape(conv, geom, t))
        .filter(|s| s.unsupported().is_none())
}

/// Whether `gpu`'s kernels include `tile`'s ([`IgemmTile::in_module`]).
pub fn in_module(gpu: &Gpu, tile: &IgemmTile) -> bool {
    tile.in_module(gpu.ptx_arch())
}

/// The variants that compute `conv` (valid) on `gpu`.
pub fn supporting_variants<'a>(
    gpu: &'a Gpu,
    conv: &'a Conv2d,
    geom: &'a ConvGeometry,
) -> impl Iterator<Item = &'static IgemmTile> + 'a {
    IGEMM_FWD_VARIANTS.iter().filter(move |t| in_module(gpu, t) && tile_unsupported(conv, geom, t).is_none())
}

/// How a spatial tile covers a layer's output planes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpatialShape {
    pub tiles_h: u32,
    pub tiles_w: u32,
    /// Input rows and columns under a tile.
    pub halo_h: u32,
    pub halo_w: u32,
    /// Floats per channel of a halo buffer ([`spatial::halo_stride`]).
    pub halo_stride: u32,
    /// Filter taps whose weights a step holds: all of them where the shared memory stays
    /// within [`SPATIAL_SMEM_TARGET`], else as few steps per chunk as keep it there, their taps
    /// spread evenly.
    pub taps_per_step: u32,
}

/// How a variant covers a layer: its groups per block and the tiles that follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgemmShape {
    pub tile: IgemmTile,
    /// Adjacent groups that share a block (block-diagonal weights): the most that divide the
    /// groups and whose outputs fit the tile's columns, at least 1.
    pub groups_per_block: u32,
    /// Column tiles per block group.
    pub column_tiles: u32,
    /// Chunks of `BK` channels per filter tap.
    pub channel_chunks: u32,
    /// Blocks along x (pixel tiles) and packed z (block groups times column tiles).
    pub grid: [u64; 2],
    /// The tiling of a spatial tile.
    pub spatial: Option<SpatialShape>,
}

impl IgemmShape {
    /// Elements of the packed filters: a panel of `BN x BK` (3xTF32: twice, values and
    /// residuals) per block group, column tile and chunk.
    pub fn packed_len(&self, taps: u64) -> u64 {
        self.grid[1] * taps * self.channel_chunks as u64 * self.tile.panel_floats() as u64
    }

    /// Elements the blocks copy to shared memory: (inputs, weights), zeros included; a
    /// 3xTF32 weight's residual, copied beside it, is not counted (the cost model was fitted
    /// when the kernels split each weight instead).
    pub fn copies(&self, taps: u64) -> (f64, f64) {
        let t = &self.tile;
        let blocks = (self.grid[0] * self.grid[1] * self.channel_chunks as u64) as f64;
        let weights = blocks * (taps * (t.bn() * t.bk()) as u64) as f64;
        match self.spatial {
            None => (blocks * (taps * (t.bm() * t.bk()) as u64) as f64, weights),
            Some(s) => (blocks * (t.bk() * s.halo_h * s.halo_w) as f64, weights),
        }
    }

    /// Why a spatial tile cannot run this shape (a layer `layer_unsupported` passes), if it
    /// cannot; flat tiles run every such layer.
    pub fn unsupported(&self) -> Option<&'static str> {
        let spatial = self.spatial?;
        if spatial.halo_h.saturating_mul(spatial.halo_w) > self.tile.max_halo_plane() {
            Some(if self.tile.channels_last {
                "a tile whose inputs span more than 320 positions (stride or dilation too large)"
            } else {
                "a tile whose inputs span more than 640 positions (stride or dilation too large)"
            })
        } else if self.grid[0] * self.grid[1] > u32::MAX as u64 {
            Some("more than 2^32 - 1 work items (pixel tiles times block groups)")
        } else {
            None
        }
    }

    /// Dynamic shared memory per block.
    pub fn smem_bytes(&self) -> u32 {
        match self.spatial {
            None => self.tile.smem_bytes(),
            Some(s) => spatial::smem_bytes(&self.tile, s.halo_stride, s.taps_per_step),
        }
    }
}

/// How `tile` covers `conv` (`conv` valid; whether it can: [`tile_unsupported`]).
pub fn shape(conv: &Conv2d, geom: &ConvGeometry, tile: &IgemmTile) -> IgemmShape {
    let (groups, kpg, cpg) = (conv.groups as u32, geom.k_per_group as u32, geom.c_per_group as u32);
    // The most groups whose outputs fit the columns (at least 1) that divide the groups.
    let fit = (tile.bn() / kpg).clamp(1, groups);
    let groups_per_block = (1..=fit).rev().find(|&d| groups.is_multiple_of(d)).unwrap_or(1);
    let column_tiles = (groups_per_block * kpg).div_ceil(tile.bn());
    let channel_chunks = (groups_per_block * cpg).div_ceil(tile.bk());
    let z = (groups / groups_per_block) as u64 * column_tiles as u64;
    let (grid_x, spatial) = match tile.pixels {
        PixelTile::Flat => (tile.grid_x((conv.n * geom.out_h * geom.out_w) as u64), None),
        PixelTile::Spatial { .. } => {
            let (rows, cols) = (tile.rows(), tile.cols());
            let extent = |tile: u32, stride: usize, filter: usize, dilation: usize| {
                // Saturating: a huge window only makes the tile unsupported.
                let span =
                    (tile as usize - 1).saturating_mul(stride).saturating_add((filter - 1).saturating_mul(dilation));
                span.saturating_add(1).min(u32::MAX as usize) as u32
            };
            let (halo_h, halo_w) = (
                extent(rows, conv.stride[0], conv.r, conv.dilation[0]),
                extent(cols, conv.stride[1], conv.s, conv.dilation[1]),
            );
            let taps = (conv.r * conv.s).min(u32::MAX as usize) as u32;
            let halo_stride = spatial::halo_stride(halo_h.saturating_mul(halo_w).min(tile.max_halo_plane() + 1));
            // Taps of one step that fit the target: at least one (whose buffers, beside a halo
            // of at most `max_halo_plane` positions, fit in any case: a CPU test checks).
            let fit = (SPATIAL_SMEM_TARGET / (4 * spatial::STAGES))
                .saturating_sub(spatial::halo_floats(tile, halo_stride))
                / tile.panel_floats();
            let steps = taps.div_ceil(fit.clamp(1, taps));
            let s = SpatialShape {
                tiles_h: (geom.out_h as u32).div_ceil(rows),
                tiles_w: (geom.out_w as u32).div_ceil(cols),
                halo_h,
                halo_w,
                halo_stride,
                taps_per_step: taps.div_ceil(steps),
            };
            (conv.n as u64 * (s.tiles_h * s.tiles_w) as u64, Some(s))
        }
    };
    IgemmShape { tile: *tile, groups_per_block, column_tiles, channel_chunks, grid: [grid_x, z], spatial }
}

/// How much an input a spatial tile copies counts against a weight or an input a flat tile
/// copies (1 each): beside the copy, it is rounded to TF32 in shared memory (NHWC tiles round in
/// 16-byte accesses, a quarter of the NCHW tiles' shared-memory instructions) and its halo is
/// read at every tap; in 3xTF32 a residual is stored beside each value and read too.
/// Refitted at d8f326c (H100) on every variant of both grouped suites timed twice (180
/// layer-precision pairs per suite; benches/NOTES.md, "Tensor-core NHWC" v9): the model's first
/// within 5% of the fastest on 79 and 78 NCHW pairs of 90 (72 and 71 with the constants before:
/// weights 1.5, NCHW inputs 4 in both precisions, NHWC 3xTF32 4.5) and 80 and 79 NHWC ones (76
/// and 75), worst 1.24x (1.44x); on the stored H200 runs of a475acc and 101342a 83 and 79 (79
/// and 80). A plateau: weights 0.75-1, NCHW TF32 inputs 2-3, wide 3xTF32 5.5-7 picked alike.
const fn spatial_input_cost(tile: &IgemmTile) -> f64 {
    match (tile.channels_last, tile.precision) {
        (false, Precision::Tf32) => 2.5,
        (true, Precision::Tf32) => 2.0,
        // Tiles of 56 and 64 columns (two stages of packed weights and residuals: 2 or 3
        // blocks per SM) ran RegNetY-8GF's stride-1 layers 1.06-1.32x (NCHW) and 1.34-1.67x
        // (NHWC) as long as the flat tiles at d8f326c.
        (_, Precision::Tf32x3) if tile.bn() > 32 => 6.0,
        (false, Precision::Tf32x3) => 4.5,
        (true, Precision::Tf32x3) => 5.5,
    }
}
/// How much a warpgroup tile's copies count against its `mma.sync` twin's (the same copies,
/// fewer instructions around them: no B fragment loads, 2 or 6 `wgmma` per k-step instead of 14
/// or 42 `mma` at 56 columns). Fitted on every variant of both grouped suites at 958cd11 (H100;
/// benches/NOTES.md, "Tensor-core NHWC" v10), the median warpgroup tile of more than 32 columns
/// ran 1.13x (NCHW) and 1.07x (NHWC) as fast as its twin in 3xTF32, 1.02x and 1.03x in TF32; of
/// 24 or 32 columns 1.06x and 1.04x in 3xTF32, but 0.96x and 0.93x in TF32. With these the
/// model's first is within 5% of the fastest on 75 and 76 of 90 pairs (61 and 62 with the
/// warpgroup tiles left out); wide 3xTF32 0.85-0.95 and wide TF32 0.9-0.97 pick alike.
const fn warpgroup_cost(tile: &IgemmTile) -> f64 {
    match (tile.warpgroup, tile.precision, tile.bn() > 32) {
        (false, _, _) => 1.0,
        (true, Precision::Tf32, false) => 1.05,
        (true, Precision::Tf32, true) => 0.95,
        (true, Precision::Tf32x3, false) => 0.98,
        (true, Precision::Tf32x3, true) => 0.9,
    }
}

/// Blocks per multiprocessor below which a grid counts as proportionally slower in [`ranked`]
/// (fitted with [`spatial_input_cost`]: 2 picked better than 1 or 3).
const FULL_GRID_BLOCKS_PER_SM: u32 = 2;

/// The variants of `precision` for `conv`, cheapest first by the cost model: elements copied
/// (a spatial tile's inputs weighted by [`spatial_input_cost`]), a grid of fewer than
/// `FULL_GRID_BLOCKS_PER_SM` blocks (work items of a spatial tile) per multiprocessor counting
/// as proportionally slower (idle multiprocessors). None where [`tile_unsupported`].
pub fn ranked(
    conv: &Conv2d,
    geom: &ConvGeometry,
    precision: Precision,
    sm_count: u32,
) -> impl Iterator<Item = IgemmShape> {
    let taps = (conv.r * conv.s) as u64;
    let cost = |s: &IgemmShape| {
        let fill = ((s.grid[0] * s.grid[1]) as f64 / (FULL_GRID_BLOCKS_PER_SM * sm_count) as f64).min(1.0);
        let (inputs, weights) = s.copies(taps);
        let input_cost = if s.spatial.is_some() { spatial_input_cost(&s.tile) } else { 1.0 };
        warpgroup_cost(&s.tile) * (input_cost * inputs + weights) / fill
    };
    let mut shapes: Vec<IgemmShape> = supported_shapes(conv, geom).filter(|s| s.tile.precision == precision).collect();
    shapes.sort_by(|a, b| cost(a).total_cmp(&cost(b)));
    shapes.into_iter()
}

/// The heuristic's variant of `precision`: the cheapest by [`ranked`]'s cost model.
pub fn choose(conv: &Conv2d, geom: &ConvGeometry, precision: Precision, sm_count: u32) -> Result<IgemmShape> {
    if let Some(reason) = layer_unsupported(conv) {
        return Err(Error::Unsupported { algorithm: "implicit GEMM", reason: reason.to_owned() });
    }
    Ok(ranked(conv, geom, precision, sm_count).next().expect("every precision comes in several tiles"))
}

/// The kernel parameters of `shape` for `conv`; the addresses are filled in at launch.
/// `x_aligned`, `y_aligned`: whether `x` and `y` (and a residual) are 16-byte aligned (16-byte
/// NHWC input copies and 16-byte stores need that).
pub fn params(
    conv: &Conv2d,
    geom: &ConvGeometry,
    shape: &IgemmShape,
    x_aligned: bool,
    y_aligned: bool,
) -> IgemmFwdParams {
    // `Conv2d::geometry` and `layer_unsupported` have checked that every value fits its field.
    let u = |v: usize| v as u32;
    let magic = |d: u32| MagicDiv::new(d).expect("validated extents are non-zero");
    let out_plane = u(geom.out_h * geom.out_w);
    let (block_channels, block_outputs) =
        (shape.groups_per_block * u(geom.c_per_group), shape.groups_per_block * u(geom.k_per_group));
    let flags = match conv.layout {
        TensorLayout::Nchw => {
            if y_aligned && out_plane.is_multiple_of(4) {
                STORE_VECTORS
            } else {
                0
            }
        }
        TensorLayout::Nhwc => {
            let fours = |v: u32| v.is_multiple_of(4);
            let inputs = x_aligned && fours(u(conv.c)) && fours(block_channels);
            let outputs = y_aligned && fours(u(conv.k)) && fours(block_outputs);
            CHANNELS_LAST | if inputs { INPUT_VECTORS } else { 0 } | if outputs { STORE_VECTORS } else { 0 }
        }
    };
    IgemmFwdParams {
        x: 0,
        w: 0,
        y: 0,
        in_h: u(conv.h),
        in_w: u(conv.w),
        in_plane: u(conv.h * conv.w),
        out_plane,
        window: super::window(conv),
        taps: u(conv.r * conv.s),
        channels: u(conv.c),
        out_channels: u(conv.k),
        c_per_group: u(geom.c_per_group),
        block_channels,
        block_outputs,
        channel_chunks: shape.channel_chunks,
        batch_pixels: u(conv.n) * out_plane,
        z_base: 0,
        flags,
        column_tiles: magic(shape.column_tiles),
        out_plane_div: magic(out_plane),
        out_w_div: magic(u(geom.out_w)),
        c_per_group_div: magic(u(geom.c_per_group)),
        k_per_group_div: magic(u(geom.k_per_group)),
        epilogue: super::epilogue::Epilogue::NONE.params(conv, geom),
    }
}

/// The spatial kernels' parameters for `shape` (a spatial tile's, supported: [`tile_unsupported`])
/// on `conv`; the addresses are filled in at launch.
/// `x_aligned`, `y_aligned` as for [`params`] (NHWC: 16-byte input copies of 4 channels, and
/// 8-byte stores of 2).
pub fn spatial_params(
    conv: &Conv2d,
    geom: &ConvGeometry,
    shape: &IgemmShape,
    x_aligned: bool,
    y_aligned: bool,
) -> IgemmSpatialParams {
    let s = shape.spatial.expect("a spatial tile's shape");
    let magic = |d: u32| MagicDiv::new(d).expect("validated extents are non-zero");
    let halo_plane = s.halo_h * s.halo_w;
    IgemmSpatialParams {
        // NCHW tiles store from their accumulators one output at a time: no vectors.
        conv: params(conv, geom, shape, x_aligned, y_aligned && shape.tile.channels_last),
        out_h: geom.out_h as u32,
        out_w: geom.out_w as u32,
        halo_w: s.halo_w,
        halo_plane,
        halo_stride: s.halo_stride,
        taps_per_step: s.taps_per_step,
        tap_steps: (conv.r * conv.s).div_ceil(s.taps_per_step as usize) as u32,
        work_items: (shape.grid[0] * shape.grid[1]) as u32,
        work_item_div: magic(shape.grid[if shape.tile.channels_last { 1 } else { 0 }] as u32),
        tiles: magic(s.tiles_h * s.tiles_w),
        tile_cols: magic(s.tiles_w),
        halo_w_div: magic(s.halo_w),
    }
}

/// The packing kernel's parameters for `shape` on `conv`; the addresses are filled in at launch.
pub fn pack_params(conv: &Conv2d, geom: &ConvGeometry, shape: &IgemmShape) -> IgemmPackParams {
    let t = &shape.tile;
    let magic = |d: u32| MagicDiv::new(d).expect("tile and layer extents are non-zero");
    IgemmPackParams {
        w: 0,
        packed: 0,
        // `IgemmPlan::new` refuses layers whose packed filters pass 2^32 elements.
        total: shape.packed_len((conv.r * conv.s) as u64) as u32,
        bn: t.bn(),
        split: (t.regions() == 2) as u32,
        warpgroup: t.warpgroup as u32,
        conv: params(conv, geom, shape, false, false),
        panel: magic(t.panel_floats()),
        row: magic(t.bk()),
        chunks: magic((conv.r * conv.s) as u32 * shape.channel_chunks),
        taps: magic((conv.r * conv.s) as u32),
    }
}

/// The least dynamic shared memory from `smem` on (in 1 KB steps) with which at most `cap`
/// blocks of `kernel` share an SM, by the driver's occupancy calculator; `smem` where the
/// kernel's registers or shared memory already allow no more, or where no padding the device
/// allows gets there.
fn capped_smem(gpu: &Gpu, kernel: &'static str, smem: u32, cap: u32) -> Result<u32> {
    let mut padded = smem;
    loop {
        match gpu.resident_blocks(kernel, BLOCK_THREADS, padded)? {
            0 => return Ok(smem),
            n if n <= cap => return Ok(padded),
            _ => padded += 1024,
        }
    }
}

/// `shape` with a spatial tile's chunk of `taps` filter taps in one step where [`shape`] split them (to keep to
/// [`SPATIAL_SMEM_TARGET`]) but the split gives no entry point more busy blocks
/// ([`split_adds_busy_blocks`], by the driver's occupancy calculator): a split chunk pays a
/// barrier per step and has half the compute between refills (H200 at 9f4109e: the 3xTF32
/// `s16x8_n64` tiles, held to 2 blocks per SM by 172-176 registers either way, 5-12% slower
/// split; N = 1 layers, whose few work items fill no third block, 2-16% slower; benches/NOTES.md
/// "Tensor-core NHWC" v4).
fn taps_in_one_step_unless_split_pays(gpu: &Gpu, shape: IgemmShape, taps: u32) -> Result<IgemmShape> {
    let Some(split) = shape.spatial.filter(|s| s.taps_per_step < taps) else {
        return Ok(shape);
    };
    let whole = IgemmShape { spatial: Some(SpatialShape { taps_per_step: taps, ..split }), ..shape };
    let items = shape.grid[0] * shape.grid[1];
    for kernel in shape.tile.entries.all() {
        let blocks = |s: &IgemmShape| gpu.resident_blocks(kernel, BLOCK_THREADS, s.smem_bytes());
        if split_adds_busy_blocks(blocks(&shape)?, blocks(&whole)?, gpu.sm_count(), items) {
            return Ok(shape);
        }
    }
    Ok(whole)
}

/// Whether `split` blocks per SM (a chunk's taps in steps) keep more blocks busy than
/// `unsplit` (0 where one step does not fit) on `sm_count` SMs with `items` work items.
pub fn split_adds_busy_blocks(split: u32, unsplit: u32, sm_count: u32, items: u64) -> bool {
    let busy = |blocks_per_sm: u32| (blocks_per_sm as u64 * sm_count as u64).min(items);
    busy(split) > busy(unsplit)
}

/// A layer's filters packed for one variant: built once per set of filters, run many times.
/// The packed filters hold `shape.packed_len` elements (the filters' own count where a
/// block holds one group and the tiles fit; `groups_per_block` times that at most).
pub struct IgemmPlan {
    conv: Conv2d,
    geom: ConvGeometry,
    shape: IgemmShape,
    packed: CudaSlice<f32>,
    /// Dynamic shared memory per entry point (by `ModeEntries::slot`): the shape's, padded
    /// where the variant caps its blocks per SM ([`IgemmTile::blocks_per_sm_cap`]).
    smem_bytes: [u32; 3],
    /// A spatial tile's persistent grids, per entry point: as many blocks as the GPU holds at
    /// once, at most one per work item (asked of the driver once, here, not at every launch).
    persistent_blocks: [u32; 3],
}

impl IgemmPlan {
    /// Packs `w` (KCRS, or KRSC for NHWC layers; f32, on `gpu`) for `tile` (one of
    /// [`variants`]) on `stream`.
    pub fn new(
        gpu: &Gpu,
        stream: &CudaStream,
        conv: &Conv2d,
        tile: &IgemmTile,
        w: &impl DevicePtr<f32>,
    ) -> Result<Self> {
        let geom = conv.geometry()?;
        if !IGEMM_FWD_VARIANTS.contains(tile) {
            return Err(Error::UnsupportedTile {
                tile: tile.name,
                reason: "not a kernel of this build (see igemm::variants)",
            });
        }
        if let Some(reason) = tile_unsupported(conv, &geom, tile) {
            return Err(Error::UnsupportedTile { tile: tile.name, reason });
        }
        if !in_module(gpu, tile) {
            return Err(Error::UnsupportedTile {
                tile: tile.name,
                reason: "a warpgroup (wgmma) tile, whose kernels only sm_90a modules hold (compute capability 9.0)",
            });
        }
        let shape = taps_in_one_step_unless_split_pays(gpu, shape(conv, &geom, tile), (conv.r * conv.s) as u32)?;
        let len = shape.packed_len((conv.r * conv.s) as u64);
        if len > u32::MAX as u64 {
            return Err(Error::UnsupportedTile {
                tile: tile.name,
                reason: "packed filters of more than 2^32 elements",
            });
        }
        // Per entry point (their registers differ).
        let (mut smem_bytes, mut persistent_blocks) = ([shape.smem_bytes(); 3], [0; 3]);
        for ((smem, blocks), kernel) in smem_bytes.iter_mut().zip(&mut persistent_blocks).zip(tile.entries.all()) {
            if let Some(cap) = tile.blocks_per_sm_cap() {
                *smem = capped_smem(gpu, kernel, *smem, cap)?;
            }
            if let PixelTile::Spatial { .. } = tile.pixels {
                let resident = gpu.resident_blocks(kernel, BLOCK_THREADS, *smem)?.max(1);
                // Below 2^32 work items: `unsupported` checked.
                *blocks = (gpu.sm_count() * resident).min((shape.grid[0] * shape.grid[1]) as u32);
            }
        }
        let packed = gpu.alloc::<f32>(len as usize)?;
        let mut plan = IgemmPlan { conv: conv.clone(), geom, shape, packed, smem_bytes, persistent_blocks };
        plan.set_weights(gpu, stream, w)?;
        Ok(plan)
    }

    /// Packs new filters `w` (the layer's weights changed).
    pub fn set_weights(&mut self, gpu: &Gpu, stream: &CudaStream, w: &impl DevicePtr<f32>) -> Result<()> {
        if w.len() != self.geom.w_len {
            return Err(Error::BufferSize { buffer: "w", expected: self.geom.w_len, got: w.len() });
        }
        gpu.check_buffer("w", w)?;
        let mut p = pack_params(&self.conv, &self.geom, &self.shape);
        {
            let (w_ptr, _ws) = w.device_ptr(stream);
            let (packed_ptr, _ps) = self.packed.device_ptr_mut(stream);
            (p.w, p.packed) = (w_ptr, packed_ptr);
            let cfg = LaunchConfig {
                grid_dim: (p.total.div_ceil(256).min(1 << 20), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // Safety: w holds the layer's filters (checked above) and `packed` the `total`
            // elements the kernel writes; `weight_source` reads inside the filters only.
            unsafe { gpu.launch(stream, PACK_KERNEL, cfg, p) }?;
        }
        gpu.check_deferred()
    }

    pub fn shape(&self) -> &IgemmShape {
        &self.shape
    }

    /// Device memory the packed filters take.
    pub fn plan_bytes(&self) -> usize {
        self.packed.len() * size_of::<f32>()
    }

    /// `y = conv(x, w)` on `stream` with the packed filters. Buffers are in the layer's layout,
    /// f32, exactly the sizes of [`Conv2d::geometry`], and belong to `gpu`.
    pub fn forward(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
    ) -> Result<()> {
        self.forward_fused(gpu, stream, x, y, &EpilogueArgs::NONE)
    }

    /// `y = epilogue(conv(x, w))`, the epilogue fused into the kernel's stores.
    pub fn forward_fused(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        x: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        epilogue: &EpilogueArgs,
    ) -> Result<()> {
        super::check_io(gpu, &self.geom, x, y)?;
        epilogue.check(gpu, &self.conv, &self.geom)?;
        let tile = &self.shape.tile;
        epilogue.with_params(stream, &self.conv, &self.geom, |ep| {
            let (x_ptr, _x_sync) = x.device_ptr(stream);
            let (w_ptr, _w_sync) = self.packed.device_ptr(stream);
            let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
            // 16-byte stores read the residual in 16-byte pieces at the same offsets.
            let y_aligned = y_ptr.is_multiple_of(16) && (ep.residual == 0 || ep.residual.is_multiple_of(16));
            let (kernel, slot) = (tile.entries.of_mode(ep.mode()), ModeEntries::slot(ep.mode()));
            // Safety (both): x and y hold exactly the shape's extents (checked above), which
            // `Conv2d::geometry` and `tile_unsupported` bound to the kernel's index arithmetic,
            // and the packed filters were built for this shape.
            match tile.pixels {
                PixelTile::Flat => {
                    let mut p = params(&self.conv, &self.geom, &self.shape, x_ptr.is_multiple_of(16), y_aligned);
                    (p.x, p.w, p.y, p.epilogue) = (x_ptr, w_ptr, y_ptr, ep);
                    let grid = super::SplitGrid {
                        kernel,
                        // At most 2^31 / 64 pixel tiles: `Conv2d::geometry` bounds the pixels
                        // below 2^31.
                        grid_x: self.shape.grid[0] as u32,
                        total_z: self.shape.grid[1],
                        block_threads: BLOCK_THREADS,
                        smem_bytes: self.smem_bytes[slot],
                    };
                    unsafe { super::launch_split_z(gpu, stream, &grid, p, |p, z| p.z_base = z) }
                }
                PixelTile::Spatial { .. } => {
                    let mut p =
                        spatial_params(&self.conv, &self.geom, &self.shape, x_ptr.is_multiple_of(16), y_aligned);
                    (p.conv.x, p.conv.w, p.conv.y, p.conv.epilogue) = (x_ptr, w_ptr, y_ptr, ep);
                    // Persistent blocks, each walking the work items a grid apart.
                    let cfg = LaunchConfig {
                        grid_dim: (self.persistent_blocks[slot], 1, 1),
                        block_dim: (BLOCK_THREADS, 1, 1),
                        shared_mem_bytes: self.smem_bytes[slot],
                    };
                    unsafe { gpu.launch(stream, kernel, cfg, p) }
                }
            }
        })?; // the buffers' cross-stream events are recorded here
        gpu.check_deferred()
    }
}

/// `y = conv(x, w)` on `stream` with the heuristic's variant of `precision`, packing the
/// filters first (a plan, [`IgemmPlan`], packs them once). Buffers are NCHW / KCRS or NHWC /
/// KRSC (the layer's layout), f32, exactly the sizes of [`Conv2d::geometry`], and belong to `gpu`.
pub fn forward(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    precision: Precision,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
) -> Result<()> {
    let geom = conv.geometry()?;
    let shape = choose(conv, &geom, precision, gpu.sm_count())?;
    forward_with(gpu, stream, conv, &shape.tile, x, w, y)
}

/// `y = conv(x, w)` on `stream` with an explicit variant (one of [`variants`]), packing the
/// filters first.
pub fn forward_with(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &IgemmTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
) -> Result<()> {
    forward_fused(gpu, stream, conv, tile, x, w, y, &EpilogueArgs::NONE)
}

/// `y = epilogue(conv(x, w))` on `stream` with an explicit variant, packing the filters first;
/// the epilogue fused into the kernel's stores.
#[allow(clippy::too_many_arguments)] // forward_with's, and the epilogue
pub fn forward_fused(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &IgemmTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    IgemmPlan::new(gpu, stream, conv, tile, w)?.forward_fused(gpu, stream, x, y, epilogue)
}
