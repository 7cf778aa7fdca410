//! The direct kernel's host-side tile math: the same functions the GPU runs to unpack its
//! block index, checked against the packing the launcher uses.

use convkit::{Conv2d, direct, pick_ptx};
use kernels_gpu::{
    conv::direct::{BlockCoords, DIRECT_FWD_VARIANTS, PixelCoords, RowCoords, SMEM_BUDGET_BYTES, TileShape},
    geometry::out_extent,
};

#[test]
fn block_coords_invert_the_packing() {
    for spec in ["n=3,c=12,h=9,k=24,r=3,groups=4", "n=5,c=7,h=5,k=7,r=1,groups=7", "n=2,c=3,h=6,k=40,r=3"] {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        for tile in DIRECT_FWD_VARIANTS {
            let p = direct::params(&conv, &geom, tile);
            let k_tiles = tile.k_tiles(geom.k_per_group as u32);
            let mut z = 0;
            for group in 0..conv.groups as u32 {
                for k_tile in 0..k_tiles {
                    assert_eq!(p.block_coords(z), BlockCoords { group, k_tile }, "{spec} {}", tile.name);
                    z += 1;
                }
            }
            assert_eq!(z as u64, direct::grid_z(&conv, &geom, tile));
            let mut flat = 0;
            for image in 0..conv.n as u32 {
                for oh in 0..geom.out_h as u32 {
                    for ow in 0..geom.out_w as u32 {
                        let pixel = oh * geom.out_w as u32 + ow;
                        assert_eq!(p.pixel_coords(flat), PixelCoords { image, pixel, oh, ow }, "{spec}");
                        flat += 1;
                    }
                }
            }
            assert_eq!(flat, p.batch_pixels);
            let px = tile.px_per_thread;
            let mut flat = 0;
            for image in 0..conv.n as u32 {
                for oh in 0..geom.out_h as u32 {
                    for ow in (0..geom.out_w as u32).step_by(px as usize) {
                        assert_eq!(p.row_coords(flat, px), RowCoords { image, oh, ow }, "{spec}");
                        flat += 1;
                    }
                }
            }
            assert_eq!(flat, p.batch_row_groups);
        }
    }
}

#[test]
fn shared_memory_chunks_stay_in_budget() {
    for tile in DIRECT_FWD_VARIANTS {
        for taps in [1, 9, 2025, 4096, 1 << 20] {
            let chunk = tile.taps_per_chunk(taps);
            assert!(chunk >= 1 && chunk <= taps);
            assert!(tile.smem_bytes(chunk) <= SMEM_BUDGET_BYTES, "{} taps={taps}", tile.name);
        }
    }
}

#[test]
fn heuristic_picks_a_compiled_variant_that_fits_the_group() {
    for spec in
        ["c=8,h=56,r=3,groups=8", "c=8,h=56,k=16,r=3,groups=8", "c=64,h=56,k=64,r=3", "c=4,h=7,k=12,r=3,groups=4"]
    {
        let conv: Conv2d = spec.parse().unwrap();
        let geom = conv.geometry().unwrap();
        let tile = direct::choose_tile(&conv, &geom, 132);
        assert!(DIRECT_FWD_VARIANTS.contains(&tile));
        assert!(tile.supports(conv.stride[1] as u32, conv.dilation[1] as u32), "{spec}: {tile:?}");
        assert!(tile.k_per_thread as usize <= geom.k_per_group.next_power_of_two().max(1), "{spec}: {tile:?}");
    }
}

#[test]
fn row_window_tiles_need_unit_stride_and_dilation_along_the_width() {
    for tile in DIRECT_FWD_VARIANTS {
        let rows = tile.shape == TileShape::RowWindow;
        assert!(tile.supports(1, 1));
        assert_eq!(tile.supports(2, 1), !rows);
        assert_eq!(tile.supports(1, 2), !rows);
    }
    let strided: Conv2d = "n=32,c=64,h=56,k=64,r=3,stride=1x2".parse().unwrap();
    let tile = direct::choose_tile(&strided, &strided.geometry().unwrap(), 132);
    assert_eq!(tile.shape, TileShape::Scattered);
}

#[test]
fn output_extent_formula() {
    assert_eq!(out_extent(56, 3, 1, 1, 1), Some(56));
    assert_eq!(out_extent(112, 3, 1, 2, 1), Some(56));
    assert_eq!(out_extent(10, 3, 0, 1, 5), None);
    assert_eq!(out_extent(10, 3, 0, 0, 1), None);
    assert_eq!(out_extent(1, 1, 0, 7, 1), Some(1));
}

#[test]
fn module_choice_prefers_the_newest_compatible_arch() {
    let modules = [(80, "a"), (90, "b")];
    assert_eq!(pick_ptx(90, &modules).unwrap(), (90, "b"));
    assert_eq!(pick_ptx(89, &modules).unwrap(), (80, "a"));
    // sm_90a (wgmma) runs on compute capability 9.0 alone; a later GPU takes the older module.
    assert_eq!(pick_ptx(100, &modules).unwrap(), (80, "a"));
    assert_eq!(pick_ptx(120, &[(80, "a"), (90, "b"), (100, "c")]).unwrap(), (100, "c"));
    let err = pick_ptx(75, &modules).unwrap_err().to_string();
    assert!(err.contains("sm_75") && err.contains("sm_80, sm_90a"), "{err}");
    let err = pick_ptx(100, &[(90, "b")]).unwrap_err().to_string();
    assert!(err.contains("sm_100") && err.contains("sm_90a"), "{err}");
}
