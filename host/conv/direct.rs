//! Launcher of the grouped direct convolution (`kernels-gpu/src/conv/direct.rs`).

use super::epilogue::EpilogueArgs;
use crate::{Conv2d, ConvGeometry, Error, Gpu, Result};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use kernels_gpu::{
    MagicDiv,
    conv::direct::{BLOCK_THREADS, DIRECT_FWD_VARIANTS, DirectFwdParams, DirectTile, TileShape},
};

/// Every tile variant the PTX holds.
pub fn variants() -> &'static [DirectTile] {
    DIRECT_FWD_VARIANTS
}

/// Why `tile` cannot compute `conv`, if it cannot: NCHW only, and row-window tiles need unit
/// stride and dilation along the width.
pub fn unsupported(conv: &Conv2d, tile: &DirectTile) -> Option<&'static str> {
    super::nchw_unsupported(conv).or_else(|| {
        (!tile.supports(conv.stride[1] as u32, conv.dilation[1] as u32))
            .then_some("row-window tiles need stride_w = dil_w = 1")
    })
}

/// The variants that can compute `conv`.
pub fn supporting_variants(conv: &Conv2d) -> impl Iterator<Item = &'static DirectTile> + '_ {
    DIRECT_FWD_VARIANTS.iter().filter(|t| unsupported(conv, t).is_none())
}

/// The heuristic choice: as many output channels per thread as the group has (up to 8: a
/// 16-channel tile needed 220 registers and measured 7-17% slower, see benches/NOTES.md); a
/// row-window tile where stride and dilation along the width are 1, else 4 scattered pixels
/// per thread; and 1 scattered pixel per thread when the others leave fewer than two blocks
/// per multiprocessor.
pub fn choose_tile(conv: &Conv2d, geom: &ConvGeometry, sm_count: u32) -> DirectTile {
    let k_per_thread = match geom.k_per_group {
        1 => 1,
        2 => 2,
        3 | 4 => 4,
        _ => 8,
    };
    let pick = |shape, px: Option<u32>| {
        *DIRECT_FWD_VARIANTS
            .iter()
            .find(|t| t.k_per_thread == k_per_thread && t.shape == shape && px.is_none_or(|px| t.px_per_thread == px))
            .expect("DIRECT_FWD_VARIANTS covers k_per_thread 1, 2, 4, 8 in every shape, scattered with 1 and 4 pixels")
    };
    let wide = if conv.stride[1] == 1 && conv.dilation[1] == 1 {
        pick(TileShape::RowWindow, None)
    } else {
        pick(TileShape::Scattered, Some(4))
    };
    let blocks = wide.grid_x(conv.n as u64, geom.out_h as u64, geom.out_w as u64) * grid_z(conv, geom, &wide);
    if blocks >= 2 * sm_count as u64 { wide } else { pick(TileShape::Scattered, Some(1)) }
}

/// The kernel parameters for `conv` with tile `tile`; the addresses are filled in at launch.
pub fn params(conv: &Conv2d, geom: &ConvGeometry, tile: &DirectTile) -> DirectFwdParams {
    // `Conv2d::geometry` has checked that every value below fits its 32-bit field.
    let u = |v: usize| v as u32;
    let taps = u(geom.taps(conv));
    let magic = |d: u32| MagicDiv::new(d).expect("validated extents are non-zero");
    let row_groups = u(geom.out_w).div_ceil(tile.px_per_thread);
    DirectFwdParams {
        x: 0,
        w: 0,
        y: 0,
        in_h: u(conv.h),
        in_w: u(conv.w),
        out_h: u(geom.out_h),
        out_w: u(geom.out_w),
        window: super::window(conv),
        channels: u(conv.c),
        out_channels: u(conv.k),
        c_per_group: u(geom.c_per_group),
        k_per_group: u(geom.k_per_group),
        batch_pixels: u(conv.n * geom.out_h * geom.out_w),
        batch_row_groups: u(conv.n * geom.out_h * row_groups as usize),
        taps_per_chunk: tile.taps_per_chunk(taps),
        z_base: 0,
        k_tiles: magic(tile.k_tiles(u(geom.k_per_group))),
        out_plane: magic(u(geom.out_h * geom.out_w)),
        out_w_div: magic(u(geom.out_w)),
        row_groups: magic(row_groups),
        out_h_div: magic(u(geom.out_h)),
        epilogue: super::epilogue::Epilogue::NONE.params(conv, geom),
    }
}

/// Number of packed z-indices (group, k-tile) of a launch of `tile`.
pub fn grid_z(conv: &Conv2d, geom: &ConvGeometry, tile: &DirectTile) -> u64 {
    conv.groups as u64 * tile.k_tiles(geom.k_per_group as u32) as u64
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
    let tile = choose_tile(conv, &geom, gpu.sm_count());
    forward_with(gpu, stream, conv, &tile, x, w, y)
}

/// `y = conv(x, w)` on `stream` with an explicit tile variant (one of [`variants`]).
pub fn forward_with(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &DirectTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
) -> Result<()> {
    forward_fused(gpu, stream, conv, tile, x, w, y, &EpilogueArgs::NONE)
}

/// `y = epilogue(conv(x, w))` on `stream` with an explicit tile variant, the epilogue fused
/// into the kernel's stores.
#[allow(clippy::too_many_arguments)] // forward_with's, and the epilogue
pub fn forward_fused(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    tile: &DirectTile,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
    y: &mut impl DevicePtrMut<f32>,
    epilogue: &EpilogueArgs,
) -> Result<()> {
    let geom = conv.geometry()?;
    if !DIRECT_FWD_VARIANTS.contains(tile) {
        return Err(Error::UnsupportedTile {
            tile: tile.name,
            reason: "not a kernel of this build (see direct::variants)",
        });
    }
    if let Some(reason) = unsupported(conv, tile) {
        return Err(Error::UnsupportedTile { tile: tile.name, reason });
    }
    super::check_buffers(gpu, &geom, x, w, y)?;
    epilogue.check(gpu, conv, &geom)?;
    let mut p = params(conv, &geom, tile);
    let grid_x = tile.grid_x(conv.n as u64, geom.out_h as u64, geom.out_w as u64) as u32;
    let total_z = grid_z(conv, &geom, tile);
    {
        let (x_ptr, _x_sync) = x.device_ptr(stream);
        let (w_ptr, _w_sync) = w.device_ptr(stream);
        let (y_ptr, _y_sync) = y.device_ptr_mut(stream);
        (p.x, p.w, p.y) = (x_ptr, w_ptr, y_ptr);
        let mut grid = super::SplitGrid {
            kernel: tile.name,
            grid_x,
            total_z,
            block_threads: BLOCK_THREADS,
            smem_bytes: tile.smem_bytes(p.taps_per_chunk),
        };
        // Safety: the buffers were checked to hold exactly the shape's extents, which
        // `Conv2d::geometry` bounds to the kernel's 32-bit index arithmetic.
        epilogue.with_params(stream, conv, &geom, |e| {
            (p.epilogue, grid.kernel) = (e, tile.entries.of_mode(e.mode()));
            unsafe { super::launch_split_z(gpu, stream, &grid, p, |p, z| p.z_base = z) }
        })?;
    } // the buffers' cross-stream events are recorded here
    gpu.check_deferred()
}
