//! The tensor-core kernel's math without a GPU (`kernels_gpu::conv::igemm`): its copies, its
//! fragment slots and its output positions, the functions the GPU runs, composed on the CPU
//! with an m16n8k8 multiply written from the PTX ISA's fragment layout, over the launcher's
//! whole grid, against the f64 reference. Shared memory is tracked (a slot read before it was
//! written, or written by two threads in one chunk, fails), as are outputs written twice or
//! never. The shared layouts' bank-conflict claims are checked too.

mod common;

use common::{SharedMemory, assert_within_bound, mark_written, mma};
use convkit::{
    Conv2d,
    conv::igemm,
    harness::reference::{cpu_reference, host_uniform},
};
use kernels_gpu::{
    conv::{
        epilogue::PLAIN,
        igemm::{
            BLOCK_THREADS, CHANNELS_LAST, Chunk, IGEMM_FWD_VARIANTS, INPUT_VECTORS, IgemmFwdParams, IgemmTile, LEAD,
            NCHW_INPUT_COPIES, PixelTile, Precision, STORE_VECTORS, WARPS, conflict_free_stride, spatial,
        },
    },
    tf32::split_tf32,
    verify::Tolerance,
};
use rand::{Rng, SeedableRng, rngs::SmallRng};

/// Runs `tile` over the launcher's whole grid on the CPU and checks it against f64; `aligned`
/// says whether x and y are 16-byte aligned.
fn run_on_cpu(conv: &Conv2d, tile: &IgemmTile, aligned: [bool; 2]) {
    match tile.pixels {
        PixelTile::Flat => run_flat_on_cpu(conv, tile, aligned),
        PixelTile::Spatial { .. } => run_spatial_on_cpu(conv, tile, aligned),
    }
}

/// The inputs, filters and packed filters of a CPU run: 3xTF32's TF32 values and residuals
/// as the packing kernel writes them (TF32's weights are left exact here, within the f32
/// bound: its rounding has a bound of its own).
fn cpu_operands(conv: &Conv2d, shape: &igemm::IgemmShape) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let geom = conv.geometry().unwrap();
    let x = host_uniform(conv.n as u64 * 7 + conv.c as u64, geom.x_len);
    let w = host_uniform(conv.r as u64 * 13 + conv.k as u64, geom.w_len);
    let pack = igemm::pack_params(conv, &geom, shape);
    let split = shape.tile.precision == Precision::Tf32x3;
    let packed: Vec<f32> = (0..pack.total as u32)
        .map(|e| {
            let source = pack.source(e);
            let v = source.offset.map_or(0.0, |o| w[o as usize]);
            match (split, source.residual) {
                (false, _) => v,
                (true, false) => tf32(v),
                (true, true) => tf32(v - tf32(v)),
            }
        })
        .collect();
    (x, w, packed)
}

/// The (slot, value) pairs one input copy writes: 4 adjacent elements where `wide` (16 bytes,
/// which the flags must allow and both ends must be aligned for), else 1; zeros where not
/// `inside`.
fn input_copy(
    p: &IgemmFwdParams,
    x: &[f32],
    slot: u32,
    offset: u64,
    inside: bool,
    wide: bool,
) -> impl Iterator<Item = (u32, f32)> {
    if wide {
        assert!(p.flags & INPUT_VECTORS != 0, "16-byte input copies without the flag");
        assert!(slot.is_multiple_of(4) && offset.is_multiple_of(4), "16-byte copy {offset} -> {slot}");
    }
    (0..if wide { 4 } else { 1 }).map(move |i| (slot + i, if inside { x[(offset + i as u64) as usize] } else { 0.0 }))
}

/// The shared-memory slot (4-byte word) that `wgmma` reads for element (row `n`, k `kk`) of a
/// K-major operand at matrix descriptor `desc`, as the PTX ISA defines it ("Matrix Descriptor
/// Format", canonical K-major layout without swizzling: core matrices of 8 rows by 16 bytes, the
/// leading byte offset between k-adjacent ones, the stride byte offset between 8-row groups).
fn wgmma_k_major_slot(desc: u64, n: u32, kk: u32) -> u32 {
    let field = |shift: u32| ((desc >> shift) & 0x3fff) as u32 * 16;
    let (start, leading, stride) = (field(0), field(16), field(32));
    assert_eq!(desc >> 62, 0, "no swizzling");
    assert_eq!((desc >> 49) & 7, 0, "no base offset");
    let byte = start + (n / 8) * stride + (kk / 4) * leading + (n % 8) * 16 + (kk % 4) * 4;
    assert!(byte.is_multiple_of(4));
    byte / 4
}

/// The flat tile ([`PixelTile::Flat`]), NCHW or NHWC.
fn run_flat_on_cpu(conv: &Conv2d, tile: &IgemmTile, [x_aligned, y_aligned]: [bool; 2]) {
    let geom = conv.geometry().unwrap();
    let mut y = vec![f32::NAN; geom.y_len];
    let mut written = vec![false; geom.y_len];
    let shape = igemm::shape(conv, &geom, tile);
    let p = igemm::params(conv, &geom, &shape, x_aligned, y_aligned);
    assert_eq!(p.flags & CHANNELS_LAST != 0, tile.channels_last, "{conv}: the layer's layout is the tile's");
    let (x, w, packed) = cpu_operands(conv, &shape);
    let (mt, nt) = (tile.m_tiles, tile.n_tiles);
    for z in 0..shape.grid[1] as u32 {
        let block = p.block_coords(z);
        for pixel_tile in 0..shape.grid[0] as u32 {
            let mut acc = vec![[[0.0f64; 4]; 32]; (WARPS * mt * nt) as usize];
            let sources: Vec<_> = (0..BLOCK_THREADS).map(|t| tile.copy_sources(&p, block, pixel_tile, t)).collect();
            let mut chunk = Chunk::FIRST;
            for _ in 0..p.chunks() {
                // One stage: every thread's copies, then every warp's fragments.
                let mut smem = SharedMemory::<f32>::new(tile.stage_floats() as usize);
                for thread in 0..BLOCK_THREADS {
                    let (mut from_x, mut from_w) = (Vec::new(), Vec::new());
                    tile.copy_chunk(
                        &p,
                        &sources[thread as usize],
                        thread,
                        chunk,
                        |slot, offset, inside, wide| {
                            for (slot, v) in input_copy(&p, &x, slot, offset, inside, wide) {
                                from_x.push((slot, v, inside, offset));
                            }
                        },
                        |slot, offset| {
                            assert!(
                                slot.is_multiple_of(4) && offset.is_multiple_of(4),
                                "16-byte copy {offset} -> {slot}"
                            );
                            for i in 0..4 {
                                from_w.push((slot + i, packed[offset as usize + i as usize], true, 0));
                            }
                        },
                    );
                    smem.item = thread;
                    for (slot, v, inside, offset) in from_x.into_iter().chain(from_w) {
                        assert!(inside || offset == 0, "a zero copy reads element {offset}, not 0");
                        smem.store(slot, v);
                    }
                }
                smem.barrier();
                for warp in 0..WARPS {
                    for ks in 0..tile.k_steps {
                        for i in 0..mt {
                            for j in 0..nt {
                                let (mut a, mut b) = ([[0.0f32; 4]; 32], [[0.0f32; 2]; 32]);
                                for lane in 0..32 {
                                    smem.item = warp * 32 + lane;
                                    let pair = |smem: &mut SharedMemory<f32>, slot: u32| {
                                        assert!(slot.is_multiple_of(2), "8-byte load at slot {slot}");
                                        [smem.load(slot), smem.load(slot + 1)]
                                    };
                                    let [at0, at1] = tile.a_pairs(lane, warp, i, ks);
                                    let loaded = [pair(&mut smem, at0), pair(&mut smem, at1)];
                                    a[lane as usize] = tile.a_fragment(loaded);
                                    // 3xTF32: the weight as its value and residual.
                                    let regions = if tile.precision == Precision::Tf32x3 { 2 } else { 1 };
                                    b[lane as usize] = if tile.warpgroup {
                                        // The tensor cores read B through the descriptor: lane
                                        // (g, t)'s m16n8k8 pair is k t and t + 4 of column 8j + g.
                                        let (g, t) = (lane / 4, lane % 4);
                                        let element = |smem: &mut SharedMemory<f32>, residual, kk| {
                                            let desc = tile.b_descriptor(0, ks, residual);
                                            smem.load(wgmma_k_major_slot(desc, 8 * j + g, kk))
                                        };
                                        (0..regions).fold([0.0; 2], |[b0, b1], region| {
                                            let residual = region == 1;
                                            [
                                                b0 + element(&mut smem, residual, t),
                                                b1 + element(&mut smem, residual, t + 4),
                                            ]
                                        })
                                    } else {
                                        let at = tile.b_pair(lane, j, ks);
                                        (0..regions).fold([0.0; 2], |[b0, b1], region| {
                                            let [v0, v1] = pair(&mut smem, at + region * tile.b_residual());
                                            [b0 + v0, b1 + v1]
                                        })
                                    };
                                }
                                mma(&a, &b, &mut acc[((warp * mt + i) * nt + j) as usize]);
                            }
                        }
                    }
                }
                chunk = chunk.next(&p);
            }
            assert_eq!(
                (chunk.r, chunk.s, chunk.cc, chunk.index),
                (0, 0, p.channel_chunks, p.chunks()),
                "the chunks walk every tap and channel chunk once"
            );

            // Epilogue: accumulators to the staging tile, then whole runs of 4 out (NCHW 4 pixels
            // of a channel, NHWC 4 channels of a pixel).
            let mut staging = SharedMemory::<f32>::new((tile.smem_bytes() / 4) as usize);
            for warp in 0..WARPS {
                for lane in 0..32 {
                    staging.item = warp * 32 + lane;
                    for i in 0..mt {
                        for j in 0..nt {
                            for e in 0..4 {
                                let (m, n) = tile.acc_position(lane, warp, i, j, e);
                                let v = acc[((warp * mt + i) * nt + j) as usize][lane as usize][e as usize];
                                staging.store(tile.out_slot(m, n), v as f32);
                            }
                        }
                    }
                }
            }
            staging.barrier();
            for n in 0..tile.bn() {
                let column = block.column_tile * tile.bn() + n;
                for pixel in 0..tile.bm() {
                    let flat = pixel_tile * tile.bm() + pixel;
                    if column < p.block_outputs && flat < p.batch_pixels {
                        let k = block.block_group * p.block_outputs + column;
                        let offset = tile.output_offset(&p, flat, k);
                        mark_written(&mut written, offset);
                        y[offset as usize] = staging.load(tile.out_slot(pixel, n));
                        let vectors = p.flags & STORE_VECTORS != 0;
                        if tile.channels_last {
                            if vectors && n % 4 == 0 {
                                assert!(offset.is_multiple_of(4), "16-byte store at element {offset}");
                                assert!(column + 4 <= p.block_outputs, "a 16-byte run past the block's outputs");
                                assert_eq!(
                                    tile.output_offset(&p, flat, k + 3),
                                    offset + 3,
                                    "a 16-byte run crosses pixels"
                                );
                            }
                        } else if vectors && pixel % 4 == 0 && flat + 4 <= p.batch_pixels {
                            assert!(offset.is_multiple_of(4), "16-byte store at element {offset}");
                            assert_eq!(tile.output_offset(&p, flat + 3, k), offset + 3, "a 16-byte run crosses planes");
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w), "{conv} on {}: outputs never written", tile.name);
    let truth = cpu_reference(conv, &x, &w).unwrap();
    let bound = Tolerance::f32_sum(geom.taps(conv) as u64);
    assert_within_bound(&y, &truth, bound, &format!("{conv} on {}", tile.name));
}

/// The 3xTF32 input split (`split_tf32`, the kernels' own): the value is TF32, to nearest
/// with ties away from zero; value plus residual is the input exactly; and with the residual
/// as `mma` reads it (truncated to TF32) the input is kept to 2^-21, the term
/// `igemm::tolerance` allows. Non-finite inputs leave a NaN residual, so their products are NaN.
#[test]
fn the_tf32_split_keeps_an_input_to_2_pow_minus_21() {
    let mut rng = SmallRng::seed_from_u64(21);
    let mut checked = 0;
    for i in 0..200_000u32 {
        // Random bit patterns (every exponent, NaN and infinity), then values at ties.
        let v = f32::from_bits(if i % 4 == 3 { rng.random::<u32>() & !0xfff | 0x1000 } else { rng.random::<u32>() });
        let (big, small) = split_tf32(v);
        let (value, residual) = (f32::from_bits(big), f32::from_bits(small));
        if !v.is_finite() {
            assert!(residual.is_nan(), "{v:e}: residual {residual:e}");
            continue;
        }
        if value.is_infinite() {
            // Rounding past f32's largest TF32 value, as `cvt.rna` does.
            assert!(v.abs() > 3.4e38, "{v:e}");
            continue;
        }
        assert_eq!(big & 0x1fff, 0, "{v:e}: not TF32");
        assert_eq!(value as f64 + residual as f64, v as f64, "{v:e}: the residual is not exact");
        if !(2f32.powi(-100)..=2f32.powi(100)).contains(&v.abs()) {
            continue; // subnormal residuals: the absolute floor of the bound covers them
        }
        let (v64, error) = (v.abs() as f64, (v as f64 - value as f64).abs());
        assert!(error <= v64 * 2f64.powi(-11), "{v:e}: rounded by {error:e}");
        let half = (v.to_bits() & 0x1fff) == 0x1000;
        assert!(!half || value.abs() > v.abs(), "{v:e}: a tie not rounded away from zero");
        let read = f32::from_bits(small & 0xffff_e000) as f64;
        let kept = (v as f64 - value as f64 - read).abs();
        assert!(kept <= v64 * 2f64.powi(-21), "{v:e}: kept to {:e} of itself", kept / v64);
        checked += 1;
    }
    assert!(checked > 100_000, "only {checked} normal inputs checked");
}

/// `v` rounded to TF32 as `cvt.rna.tf32.f32` does (10 mantissa bits, to nearest, ties away
/// from zero; finite `v`).
fn tf32(v: f32) -> f32 {
    f32::from_bits((v.to_bits() + 0x1000) & !0x1fff)
}

/// The spatial tile ([`PixelTile::Spatial`]), NCHW or NHWC: halo copies per channel chunk,
/// every tap's fragments read from them; `aligned`: whether x and y are 16-byte aligned.
fn run_spatial_on_cpu(conv: &Conv2d, tile: &IgemmTile, [x_aligned, y_aligned]: [bool; 2]) {
    let geom = conv.geometry().unwrap();
    let mut y = vec![f32::NAN; geom.y_len];
    let mut written = vec![false; geom.y_len];
    let shape = igemm::shape(conv, &geom, tile);
    let sp = igemm::spatial_params(conv, &geom, &shape, x_aligned, y_aligned);
    let p = &sp.conv;
    assert_eq!(p.flags & CHANNELS_LAST != 0, tile.channels_last, "{conv}: the layer's layout is the tile's");
    let (x, w, packed) = cpu_operands(conv, &shape);
    let (mt, nt) = (tile.m_tiles, tile.n_tiles);
    assert_eq!(sp.work_items as u64, shape.grid[0] * shape.grid[1]);
    // Each work item as one of the persistent blocks computes it (which block takes which
    // item changes nothing but the order).
    for item in 0..sp.work_items {
        let (block, pixel_tile) = sp.work_item(tile, item);
        let origin = sp.origin(tile, pixel_tile);
        let sources: Vec<_> = (0..BLOCK_THREADS).map(|t| sp.tile_source(tile, item, t)).collect();
        let mut acc = vec![[[0.0f64; 4]; 32]; (WARPS * mt * nt) as usize];
        // The kernel's pipeline, one phase per step: the halo copied in the phase before is
        // rounded by its copiers, a barrier, then the next step's weights (and at a chunk's
        // first step the next chunk's halo) are copied while this step's taps read the other
        // buffers (the same phase: shared memory flags any overlap).
        let steps: Vec<(u32, u32)> =
            (0..p.channel_chunks).flat_map(|cc| (0..sp.tap_steps).map(move |step| (cc, step))).collect();
        let mut smem = SharedMemory::<f32>::new((shape.smem_bytes() / 4) as usize);
        let halo_of = |cc: u32| sp.halo_buffer(tile, cc % 2);
        let weights_of = |k: usize| sp.weight_buffer(tile, k as u32 % 2);
        let copy_halo = |smem: &mut SharedMemory<f32>, cc: u32| {
            let halo = halo_of(cc);
            for thread in 0..BLOCK_THREADS {
                let mut stores = Vec::new();
                sp.copy_halo(tile, &sources[thread as usize], thread, cc, |slot, offset, inside, wide| {
                    assert!(inside || offset == 0, "a zero copy reads element {offset}, not 0");
                    stores.extend(input_copy(p, &x, halo + slot, offset, inside, wide));
                });
                // The slots a thread rounds after its copies land are exactly its copies'.
                let mut owned = Vec::new();
                sp.own_slots(tile, thread, |slot| owned.extend(halo + slot..halo + slot + tile.own_run()));
                let mut copied: Vec<u32> = stores.iter().map(|&(slot, _)| slot).collect();
                copied.sort_unstable();
                owned.sort_unstable();
                assert_eq!(owned, copied, "thread {thread} would round slots it did not copy");
                smem.item = thread;
                for (slot, v) in stores {
                    smem.store(slot, v);
                }
            }
        };
        let copy_weights = |smem: &mut SharedMemory<f32>, k: usize| {
            let ((cc, step), weights) = (steps[k], weights_of(k));
            for thread in 0..BLOCK_THREADS {
                smem.item = thread;
                sp.copy_step_weights(tile, sources[thread as usize].block, thread, cc, step, |slot, offset| {
                    assert!(slot.is_multiple_of(4) && offset.is_multiple_of(4), "16-byte copy {offset} -> {slot}");
                    for i in 0..4 {
                        smem.store(weights + slot + i, packed[(offset + i as u64) as usize]);
                    }
                });
            }
        };
        copy_halo(&mut smem, 0);
        copy_weights(&mut smem, 0);
        let mut landing = Some(0);
        for (k, &(cc, step)) in steps.iter().enumerate() {
            let (halo, weights) = (halo_of(cc), weights_of(k));
            if let Some(landed) = landing {
                let halo = halo_of(landed);
                let mut runs = vec![Vec::new(); BLOCK_THREADS as usize];
                for thread in 0..BLOCK_THREADS {
                    smem.item = thread;
                    sp.own_slots(tile, thread, |slot| {
                        // NHWC runs are rewritten by 16-byte accesses.
                        assert!(slot.is_multiple_of(tile.own_run()), "a run at slot {slot}");
                        assert!((slot + sp.residual_offset()).is_multiple_of(tile.own_run()));
                        runs[thread as usize].push(slot);
                        // 3xTF32: the split the thread makes once its copies land (TF32 is
                        // left exact here, within the f32 bound: its rounding has a bound of
                        // its own).
                        if tile.precision == Precision::Tf32x3 {
                            for slot in halo + slot..halo + slot + tile.own_run() {
                                let v = smem.load(slot);
                                let (big, small) = split_tf32(v);
                                smem.store(slot, f32::from_bits(big));
                                smem.store(slot + sp.residual_offset(), f32::from_bits(small));
                            }
                        }
                    });
                }
                // A 16-byte access is served 8 lanes at a time: their runs must fall on 8
                // distinct groups of 4 banks.
                if tile.own_run() == 4 {
                    for quarter in runs.chunks(8) {
                        for call in 0..quarter[0].len() {
                            let mut groups: Vec<u32> =
                                quarter.iter().filter_map(|r| r.get(call)).map(|slot| slot / 4 % 8).collect();
                            let calls = groups.len();
                            groups.sort_unstable();
                            groups.dedup();
                            assert_eq!(groups.len(), calls, "{}: the rounding pass's accesses conflict", tile.name);
                        }
                    }
                }
            }
            smem.barrier();
            if k + 1 < steps.len() {
                copy_weights(&mut smem, k + 1);
            }
            landing = None;
            if step == 0 && cc + 1 < p.channel_chunks {
                copy_halo(&mut smem, cc + 1);
                landing = Some(cc + 1);
            }
            let (first, taps) = sp.step_taps(step);
            for tap in 0..taps {
                let (r, s) = ((first + tap) / p.window.filter_s, (first + tap) % p.window.filter_s);
                let offset = sp.tap_offset(tile, r, s);
                for warp in 0..WARPS {
                    for i in 0..mt {
                        for j in 0..nt {
                            let (mut a, mut b) = ([[0.0f32; 4]; 32], [[0.0f32; 2]; 32]);
                            for lane in 0..32 {
                                smem.item = warp * 32 + lane;
                                if tile.channels_last {
                                    // The kernel loads elements e and e + 2 as one 8-byte pair.
                                    for e in 0..2 {
                                        let slot = sp.a_slot(tile, lane, warp, i, e, offset);
                                        assert!(slot.is_multiple_of(2), "8-byte load at slot {slot}");
                                        assert_eq!(sp.a_slot(tile, lane, warp, i, e + 2, offset), slot + 1);
                                    }
                                }
                                for e in 0..4 {
                                    let slot = halo + sp.a_slot(tile, lane, warp, i, e, offset);
                                    a[lane as usize][e as usize] = if tile.precision == Precision::Tf32x3 {
                                        smem.load(slot) + smem.load(slot + sp.residual_offset())
                                    } else {
                                        smem.load(slot)
                                    };
                                }
                                let pair = weights + spatial::IgemmSpatialParams::b_pair(tile, lane, j, tap);
                                assert!(pair.is_multiple_of(2), "8-byte load at slot {pair}");
                                b[lane as usize] = [smem.load(pair), smem.load(pair + 1)];
                                if tile.precision == Precision::Tf32x3 {
                                    let residual = pair + spatial::IgemmSpatialParams::b_residual(tile);
                                    b[lane as usize][0] += smem.load(residual);
                                    b[lane as usize][1] += smem.load(residual + 1);
                                }
                            }
                            mma(&a, &b, &mut acc[((warp * mt + i) * nt + j) as usize]);
                        }
                    }
                }
            }
        }

        // The epilogue: each accumulator straight to its output.
        for warp in 0..WARPS {
            for lane in 0..32 {
                for i in 0..mt {
                    for j in 0..nt {
                        for e in 0..4 {
                            let (m, n) = tile.acc_position(lane, warp, i, j, e);
                            let (Some((_, plane)), Some(at)) = (
                                sp.output_plane::<PLAIN>(tile, block, origin.image, n),
                                sp.output_pixel(tile, &origin, m),
                            ) else {
                                continue;
                            };
                            let offset = plane + at;
                            if tile.channels_last && p.flags & STORE_VECTORS != 0 && e % 2 == 0 {
                                // The kernel stores elements e and e + 1 (outputs 2t, 2t + 1) as a pair.
                                assert!(offset.is_multiple_of(2), "8-byte store at element {offset}");
                                let (Some((_, next)), _) = (
                                    sp.output_plane::<PLAIN>(tile, block, origin.image, n + 1),
                                    tile.acc_position(lane, warp, i, j, e + 1),
                                ) else {
                                    panic!("{}: a pair's second output is past the block's", tile.name);
                                };
                                assert_eq!(next + at, offset + 1, "a pair's outputs are not adjacent");
                            }
                            mark_written(&mut written, offset);
                            y[offset as usize] =
                                acc[((warp * mt + i) * nt + j) as usize][lane as usize][e as usize] as f32;
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w), "{conv} on {}: outputs never written", tile.name);
    let truth = cpu_reference(conv, &x, &w).unwrap();
    let bound = Tolerance::f32_sum(geom.taps(conv) as u64);
    assert_within_bound(&y, &truth, bound, &format!("{conv} on {}", tile.name));
}

/// `spec` in `tile`'s layout.
fn in_layout_of(tile: &IgemmTile, spec: &str) -> Conv2d {
    let layout = if tile.channels_last { ",layout=nhwc" } else { "" };
    format!("{spec}{layout}").parse().unwrap()
}

#[test]
fn every_variant_computes_grouped_convolutions_on_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(5);
    let specs = [
        // 4-wide groups, several per block; padding; a ragged last pixel tile.
        "n=2,c=16,h=9,w=7,k=16,r=3,s=3,pad=1,groups=4",
        // Odd widths: ragged channel chunks and column tiles, stride 2, dilation, rectangular.
        "n=1,c=30,h=11,w=10,k=27,r=3,s=2,pad=2x1,stride=2,dilation=2x1,groups=3",
        // Dense, more outputs than the widest column tile; 1x1 grouped with odd planes.
        "n=1,c=9,h=6,w=6,k=70,r=2,s=3,pad=0x1,groups=1",
        "n=3,c=24,h=5,w=5,k=36,r=1,s=1,groups=4",
        // Groups of 12 channels and 20 outputs: NHWC copies 4 channels at once, chunks ragged.
        "n=2,c=36,h=7,w=6,k=60,r=3,s=3,pad=1,stride=2x1,groups=3",
        // 5x5: spatial tiles of 32 columns and more take the taps in several steps, rows of
        // the filter split across them.
        "n=1,c=16,h=9,w=10,k=24,r=5,s=5,pad=2,groups=2",
    ];
    for tile in IGEMM_FWD_VARIANTS {
        let mut ran = 0;
        for spec in specs {
            let conv = in_layout_of(tile, spec);
            // Spatial tiles refuse layers whose halo their copies do not cover (NHWC 16x8 and
            // 8x16 tiles at stride 2): a refusal is tested below.
            if igemm::tile_unsupported(&conv, &conv.geometry().unwrap(), tile).is_some() {
                assert!(tile.pixels != PixelTile::Flat && spec.contains("stride=2"), "{conv} refused by {}", tile.name);
                continue;
            }
            run_on_cpu(&conv, tile, [rng.random_bool(0.5), rng.random_bool(0.5)]);
            ran += 1;
        }
        assert!(ran >= 3, "{} ran {ran} layers", tile.name);
    }
}

/// The NHWC tiles copy 4 channels at once and store 4 at once exactly where the channel counts
/// and the buffers' alignment allow, and compute the same either way.
#[test]
fn channels_last_vectors_follow_channel_counts_and_alignment() {
    let wide = |spec: &str, aligned: [bool; 2]| {
        let conv: Conv2d = format!("{spec},layout=nhwc").parse().unwrap();
        let geom = conv.geometry().unwrap();
        let tile = IGEMM_FWD_VARIANTS.iter().find(|t| t.name == "igemm_tf32_nhwc_m128_n8_k8").unwrap();
        let p = igemm::params(&conv, &geom, &igemm::shape(&conv, &geom, tile), aligned[0], aligned[1]);
        run_on_cpu(&conv, tile, aligned);
        [p.flags & INPUT_VECTORS != 0, p.flags & STORE_VECTORS != 0]
    };
    let fours = "n=1,c=16,h=6,w=5,k=32,r=3,s=3,pad=1,groups=4";
    assert_eq!(wide(fours, [true, true]), [true, true]);
    assert_eq!(wide(fours, [false, true]), [false, true]);
    assert_eq!(wide(fours, [true, false]), [true, false]);
    // 2 channels and 6 outputs per group: a block of 1 group (6 outputs fill 8 columns but
    // no 2 groups do) has neither 4 channels nor 4 outputs at a multiple of 4.
    assert_eq!(wide("n=1,c=6,h=6,w=5,k=18,r=3,s=3,pad=1,groups=3", [true, true]), [false, false]);
}

#[test]
fn packing_places_every_filter_element_once() {
    for spec in ["n=1,c=128,h=8,w=8,k=128,r=3,s=3,pad=1,groups=32", "n=1,c=30,h=9,w=9,k=27,r=3,s=2,groups=3"] {
        for tile in IGEMM_FWD_VARIANTS {
            let conv = in_layout_of(tile, spec);
            let geom = conv.geometry().unwrap();
            let shape = igemm::shape(&conv, &geom, tile);
            let pack = igemm::pack_params(&conv, &geom, &shape);
            // Values, and for 3xTF32 residuals: each element once in each.
            let mut seen = vec![[0u32; 2]; geom.w_len];
            for e in 0..pack.total as u32 {
                let source = pack.source(e);
                if let Some(offset) = source.offset {
                    seen[offset as usize][source.residual as usize] += 1;
                }
            }
            let expected = [1, (tile.precision == Precision::Tf32x3) as u32];
            assert!(
                seen.iter().all(|&n| n == expected),
                "{spec} on {}: an element packed {:?} times (values, residuals)",
                tile.name,
                seen.iter().find(|&&n| n != expected)
            );
        }
    }
}

#[test]
fn groups_per_block_fill_the_columns() {
    let conv: Conv2d = "n=1,c=128,h=8,w=8,k=128,r=3,s=3,pad=1,groups=32".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let by_name = |name: &str| IGEMM_FWD_VARIANTS.iter().find(|t| t.name == name).unwrap();
    // 4 outputs per group: 2 groups fill 8 columns, 16 fill 64.
    let narrow = igemm::shape(&conv, &geom, by_name("igemm_tf32_m128_n8_k8"));
    assert_eq!((narrow.groups_per_block, narrow.column_tiles, narrow.channel_chunks), (2, 1, 1));
    let wide = igemm::shape(&conv, &geom, by_name("igemm_tf32_m128_n64_k16"));
    assert_eq!((wide.groups_per_block, wide.column_tiles, wide.channel_chunks), (16, 1, 4));
    // 37 groups (prime) of 24: one group per block in 24 columns, no zeros.
    let regnet: Conv2d = "n=1,c=888,h=7,w=7,k=888,r=3,s=3,pad=1,groups=37".parse().unwrap();
    let fit = igemm::shape(&regnet, &regnet.geometry().unwrap(), by_name("igemm_tf32_m128_n24_k8"));
    assert_eq!((fit.groups_per_block, fit.column_tiles, fit.channel_chunks, fit.grid[1]), (1, 1, 3, 37));
}

/// Whether `words` (4-byte shared-memory slots one instruction touches) lie in different banks.
fn distinct_banks(words: Vec<u32>) -> bool {
    let mut banks: Vec<u32> = words.iter().map(|w| w % 32).collect();
    banks.sort_unstable();
    banks.dedup();
    banks.len() == words.len()
}

/// `conflict_free_stride`'s closed form is its definition: the least multiple of 8 from `min`
/// on that is 8 or 24 mod 32 (so that 4 rows of 8-byte pairs, 16 lanes, cover all 32 banks).
#[test]
fn conflict_free_stride_is_the_least_stride_whose_rows_cover_every_bank() {
    for min in 0..2048u32 {
        let least = (min..).find(|s| s % 8 == 0 && matches!(s % 32, 8 | 24)).unwrap();
        assert_eq!(conflict_free_stride(min), least, "min {min}");
        // Four rows of 8 words each (4 lanes' pairs per row).
        let words: Vec<u32> = (0..4).flat_map(|row| (0..8).map(move |w| row * least + w)).collect();
        assert!(distinct_banks(words), "stride {least}");
    }
}

/// The banks (4-byte words mod 32) that the lanes of each 8-byte load phase (16 lanes) or
/// store (4-byte: 32 lanes; NHWC's 8-byte: 16) touch are all different: no bank conflicts.
#[test]
fn fragment_loads_and_staging_stores_are_free_of_bank_conflicts() {
    for tile in IGEMM_FWD_VARIANTS {
        for warp in 0..WARPS {
            for ks in (0..tile.k_steps).filter(|_| tile.pixels == PixelTile::Flat) {
                for half in [0u32, 16] {
                    for i in 0..tile.m_tiles {
                        for load in 0..2 {
                            let words = (half..half + 16).flat_map(|l| {
                                let s = tile.a_pairs(l, warp, i, ks)[load];
                                [s, s + 1]
                            });
                            assert!(distinct_banks(words.collect()), "{}: A loads conflict", tile.name);
                        }
                    }
                    // A warpgroup's tensor cores read B themselves.
                    for j in (0..tile.n_tiles).filter(|_| !tile.warpgroup) {
                        for region in 0..tile.regions() {
                            let words = (half..half + 16).flat_map(|l| {
                                let s = tile.b_pair(l, j, ks) + region * tile.b_residual();
                                [s, s + 1]
                            });
                            assert!(distinct_banks(words.collect()), "{}: B loads conflict", tile.name);
                        }
                    }
                }
            }
            for i in 0..tile.m_tiles {
                for j in 0..tile.n_tiles {
                    for e in 0..4 {
                        let slot = |l| {
                            let (m, n) = tile.acc_position(l, warp, i, j, e);
                            tile.out_slot(m, n)
                        };
                        let conflict_free = if tile.channels_last {
                            // Pairs (e, e + 1), adjacent: 8-byte stores, 16 lanes a phase.
                            e % 2 == 1
                                || [0u32, 16].into_iter().all(|half| {
                                    distinct_banks((half..half + 16).flat_map(|l| [slot(l), slot(l) + 1]).collect())
                                })
                        } else {
                            distinct_banks((0..32).map(slot).collect())
                        };
                        assert!(conflict_free, "{}: staging stores conflict", tile.name);
                    }
                }
            }
        }
    }
}

/// The spatial tiles' A loads (NCHW 4-byte, 32 lanes; NHWC 8-byte pairs, 16 lanes a phase)
/// and 8-byte B loads touch 32 different banks at stride 1, whatever the halo's width, at
/// every tap.
#[test]
fn spatial_fragment_loads_are_free_of_bank_conflicts_at_stride_one() {
    for spec in ["n=1,c=16,h=56,w=56,k=16,r=3,s=3,pad=1,groups=2", "n=1,c=16,h=13,w=9,k=16,r=5,s=5,pad=2,groups=2"] {
        for tile in IGEMM_FWD_VARIANTS.iter().filter(|t| t.pixels != PixelTile::Flat) {
            let conv = in_layout_of(tile, spec);
            let geom = conv.geometry().unwrap();
            let shape = igemm::shape(&conv, &geom, tile);
            let sp = igemm::spatial_params(&conv, &geom, &shape, true, true);
            for (r, s) in [(0, 0), (1, 2), (2, 1)] {
                let offset = sp.tap_offset(tile, r, s);
                for warp in 0..WARPS {
                    for i in 0..tile.m_tiles {
                        if tile.channels_last {
                            for e in 0..2 {
                                for half in [0u32, 16] {
                                    let words = (half..half + 16).flat_map(|l| {
                                        let slot = sp.a_slot(tile, l, warp, i, e, offset);
                                        [slot, slot + 1]
                                    });
                                    assert!(
                                        distinct_banks(words.collect()),
                                        "{spec} on {}: A loads conflict",
                                        tile.name
                                    );
                                }
                            }
                        } else {
                            for e in 0..4 {
                                let words = (0..32).map(|l| sp.a_slot(tile, l, warp, i, e, offset));
                                assert!(distinct_banks(words.collect()), "{spec} on {}: A loads conflict", tile.name);
                            }
                        }
                    }
                }
                for j in 0..tile.n_tiles {
                    for half in [0u32, 16] {
                        for region in 0..tile.regions() {
                            let words = (half..half + 16).flat_map(|l| {
                                let slot = spatial::IgemmSpatialParams::b_pair(tile, l, j, r * 3 + s)
                                    + region * spatial::IgemmSpatialParams::b_residual(tile);
                                [slot, slot + 1]
                            });
                            assert!(distinct_banks(words.collect()), "{spec} on {}: B loads conflict", tile.name);
                        }
                    }
                }
            }
        }
    }
}

/// The cost model's first choices on `grouped` suite layers, each the variant measured fastest
/// on the H200 (or within 1%) with every variant timed (benches/NOTES.md): spatial tiles for
/// 3x3 filters at stride 1, flat ones at stride 2 and for 1x1 filters.
#[test]
fn the_heuristic_picks_the_measured_fastest_tiles() {
    let pick = |spec: &str, precision| {
        let conv: Conv2d = spec.parse().unwrap();
        igemm::choose(&conv, &conv.geometry().unwrap(), precision, 132).unwrap().tile.name
    };
    use Precision::{Tf32, Tf32x3};
    let resnext = "n=32,c=128,h=56,w=56,k=128,r=3,s=3,pad=1,groups=32";
    assert_eq!(pick(resnext, Tf32), "igemm_tf32_s16x8_n8");
    assert_eq!(pick(resnext, Tf32x3), "igemm_3xtf32_s16x8_n8");
    let resnext_s2 = "n=32,c=256,h=56,w=56,k=256,r=3,s=3,pad=1,stride=2,groups=32";
    assert_eq!(pick(resnext_s2, Tf32x3), "igemm_3xtf32_m128_n8_k8");
    // RegNetY-1.6GF's 24-wide groups fit their tile exactly.
    assert_eq!(pick("n=32,c=120,h=28,w=28,k=120,r=3,s=3,pad=1,groups=5", Tf32), "igemm_tf32_s16x8_n24");
    assert_eq!(pick("n=32,c=384,h=28,w=28,k=96,r=1,s=1,groups=8", Tf32), "igemm_tf32_m128_n16_k8");
    // RegNetY-8GF's 56-wide groups in 3xTF32 on the flat warpgroup tile (0.411 against the
    // `mma.sync` flat tile's 0.473 ms, 958cd11), ResNeXt's 32-wide groups on 7x7 maps in TF32 on
    // the spatial one (0.022 against the flat tile's 0.032 ms; d8f326c; both on an H100).
    assert_eq!(pick("n=32,c=224,h=56,w=56,k=224,r=3,s=3,pad=1,groups=4", Tf32x3), "igemm_3xtf32_wg_m128_n56_k8");
    assert_eq!(pick("n=32,c=1024,h=7,w=7,k=1024,r=3,s=3,pad=1,groups=32", Tf32), "igemm_tf32_s8x8_n32");
}

/// The cost model's first choice per precision among the variants that stored runs timed
/// (every variant: NCHW at a475acc and NHWC at 101342a on an H200, both at d8f326c and, with the
/// warpgroup tiles, at 958cd11 on an H100): within 5% of the fastest on at least as many layers
/// as when the model was refitted on them, so that a change to the model shows in measured data
/// (benches/NOTES.md, "Tensor-core grouped kernel" v2.3 and "Tensor-core NHWC" v3, v9 and v10).
/// The v9 refit took 101342a's NHWC run from 80 to 79 and the three others up by 4 to 7.
#[test]
fn the_cost_model_picks_near_the_fastest_variant_in_the_stored_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/results");
    for (file, at_least) in [
        ("h200-2026-12-02-a475acc-grouped-all-variants.json", 83),
        ("h200-2026-12-03-101342a-grouped-nhwc-all-variants.json", 79),
        ("h100-2026-12-07-d8f326c-grouped-all-variants.json", 79),
        ("h100-2026-12-07-d8f326c-grouped-nhwc-all-variants.json", 80),
        ("h100-2026-12-07-958cd11-grouped-all-variants.json", 75),
        ("h100-2026-12-07-958cd11-grouped-nhwc-all-variants.json", 76),
    ] {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        let layers = doc["repeats"].as_array().and_then(|r| r.last()).and_then(|r| r.as_array()).unwrap();
        let mut near = 0;
        for layer in layers {
            let conv: Conv2d = layer["spec"].as_str().unwrap().parse().unwrap();
            let ours = layer["ours"].as_u64().unwrap() as usize;
            let times: Vec<(&str, f64)> = layer["candidates"].as_array().unwrap()[..ours]
                .iter()
                .map(|c| (c["name"].as_str().unwrap(), c["timing"]["p50"].as_f64().unwrap()))
                .collect();
            for (precision, prefix) in [(Precision::Tf32, "tf32_"), (Precision::Tf32x3, "3xtf32_")] {
                let time = |name: &str| {
                    times.iter().find(|(n, _)| *n == name.strip_prefix("igemm_").unwrap()).map(|&(_, t)| t)
                };
                // The model's first choice among the variants the run timed (a run may predate some).
                let picked = igemm::ranked(&conv, &conv.geometry().unwrap(), precision, 132)
                    .find_map(|s| time(s.tile.name))
                    .expect("the run timed one of the model's choices");
                let fastest =
                    times.iter().filter(|(n, _)| n.starts_with(prefix)).map(|&(_, t)| t).fold(f64::INFINITY, f64::min);
                near += usize::from(picked <= 1.05 * fastest);
            }
        }
        assert!(near >= at_least, "{file}: {near} of {} pairs within 5%, expected {at_least}", 2 * layers.len());
    }
}

/// Caps on blocks per SM were measured on flat tiles only (a spatial tile's persistent grid,
/// sized from what fits, has never been timed with one), and the measured one is in the table.
#[test]
fn only_flat_tiles_cap_their_blocks_per_sm() {
    for tile in IGEMM_FWD_VARIANTS {
        assert!(tile.blocks_per_sm_cap().is_none() || tile.pixels == PixelTile::Flat, "{}", tile.name);
    }
    assert!(IGEMM_FWD_VARIANTS.iter().any(|t| t.blocks_per_sm_cap().is_some()), "the measured cap is in the table");
}

#[test]
fn each_precision_has_its_documented_bound() {
    let conv: Conv2d = "n=1,c=64,h=8,w=8,k=64,r=3,s=3,pad=1,groups=4".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let f32_sum = Tolerance::f32_sum(geom.taps(&conv) as u64);
    for tile in IGEMM_FWD_VARIANTS {
        let bound = igemm::tolerance(&conv, &geom, tile);
        assert_eq!(bound.floor, f32_sum.floor);
        match tile.precision {
            // Rounded inputs: 2^-10 of each product's magnitude dominates.
            Precision::Tf32 => assert!(bound.tol > 2f64.powi(-10) && bound.tol < 2f64.powi(-9), "{}", tile.name),
            // Value plus residual: within twice the f32 summation's bound.
            Precision::Tf32x3 => assert!(bound.tol > f32_sum.tol && bound.tol < 2.0 * f32_sum.tol, "{}", tile.name),
        }
    }
}

#[test]
fn oversized_or_invalid_layers_are_refused_without_a_panic() {
    // A filter of more than 2^31 - 1 elements, and groups of zero (no division by it).
    let mut huge: Conv2d = "n=1,c=4,h=8,w=8,k=4,r=3,s=3,groups=1".parse().unwrap();
    (huge.k, huge.c, huge.r, huge.s) = (1 << 16, 1 << 16, 3, 3);
    assert!(igemm::layer_unsupported(&huge).is_some());
    let mut empty = huge.clone();
    (empty.c, empty.groups) = (0, 0);
    assert!(igemm::layer_unsupported(&empty).is_some());
    let geom = huge.geometry();
    assert!(geom.is_err() || igemm::choose(&huge, &geom.unwrap(), Precision::Tf32, 132).is_err());
}

/// Spatial tiles refuse layers whose halo or per-chunk weights do not fit (with a reason, no
/// panic); the flat tiles take every valid layer, and the model ranks only what can run.
/// Spatial tiles refuse halos their copies do not cover, and hold the weights of as many taps
/// per step as keep them within the shared-memory target (large filters too).
#[test]
fn spatial_tiles_refuse_halos_beyond_their_copies_and_step_through_large_filters() {
    let spatial = |t: &&IgemmTile| t.pixels != PixelTile::Flat;
    // Dilation 8: a 16x8 tile's halo spans 31 x 23 inputs, an 8x8 one 23 x 23 (529, fits).
    let conv: Conv2d = "n=1,c=16,h=40,w=40,k=16,r=3,s=3,pad=8,dilation=8,groups=2".parse().unwrap();
    let geom = conv.geometry().unwrap();
    let refused: Vec<_> = IGEMM_FWD_VARIANTS
        .iter()
        .filter(|t| !t.channels_last && igemm::tile_unsupported(&conv, &geom, t).is_some())
        .collect();
    assert!(!refused.is_empty() && refused.iter().all(spatial), "{refused:?}");
    for tile in &refused {
        let s = igemm::shape(&conv, &geom, tile).spatial.unwrap();
        assert!(s.halo_h * s.halo_w > tile.max_halo_plane(), "{}", tile.name);
    }
    assert!(
        IGEMM_FWD_VARIANTS.iter().any(|t| spatial(&t) && igemm::tile_unsupported(&conv, &geom, t).is_none()),
        "some spatial tile fits"
    );
    for precision in [Precision::Tf32, Precision::Tf32x3] {
        assert!(igemm::ranked(&conv, &geom, precision, 132).all(|s| !refused.contains(&&s.tile)));
    }

    for (spec, taps) in [
        ("n=1,c=64,h=20,w=20,k=64,r=3,s=3,pad=1,groups=1", 9),
        // 49 taps of 64 columns are 200 KB of 3xTF32 weights per chunk.
        ("n=1,c=64,h=20,w=20,k=64,r=7,s=7,pad=3,groups=1", 49),
    ] {
        for tile in IGEMM_FWD_VARIANTS.iter().filter(spatial) {
            let conv = in_layout_of(tile, spec);
            let geom = conv.geometry().unwrap();
            assert_eq!(igemm::tile_unsupported(&conv, &geom, tile), None, "{spec} on {}", tile.name);
            let shape = igemm::shape(&conv, &geom, tile);
            let (s, sp) = (shape.spatial.unwrap(), igemm::spatial_params(&conv, &geom, &shape, true, true));
            assert!(shape.smem_bytes() <= igemm::SPATIAL_SMEM_TARGET, "{spec} on {}", tile.name);
            // As few steps as fit, their taps spread evenly: all taps covered once.
            let covered: u32 = (0..sp.tap_steps).map(|step| sp.step_taps(step).1).sum();
            assert_eq!(covered, taps, "{spec} on {}", tile.name);
            assert!(sp.step_taps(sp.tap_steps - 1).1 >= 1 && s.taps_per_step <= taps);
            if sp.tap_steps > 1 {
                let wider = spatial::smem_bytes(tile, s.halo_stride, taps.div_ceil(sp.tap_steps - 1));
                assert!(wider > igemm::SPATIAL_SMEM_TARGET, "{spec} on {}: fewer steps fit", tile.name);
            }
        }
    }
    // The 3x3 layers' wide 3xTF32 tiles take two steps of 5 and 4 taps; the rest one.
    let conv: Conv2d = "n=1,c=64,h=20,w=20,k=64,r=3,s=3,pad=1,groups=1".parse().unwrap();
    let geom = conv.geometry().unwrap();
    for tile in IGEMM_FWD_VARIANTS.iter().filter(|t| spatial(t) && !t.channels_last) {
        let s = igemm::shape(&conv, &geom, tile).spatial.unwrap();
        let wide_split = tile.precision == Precision::Tf32x3 && tile.bn() > 32;
        assert_eq!(s.taps_per_step, if wide_split { 5 } else { 9 }, "{}", tile.name);
    }
    // One tap beside the largest halo a tile copies fits the device's shared memory per block.
    for tile in IGEMM_FWD_VARIANTS.iter().filter(spatial) {
        let stride = spatial::halo_stride(tile.max_halo_plane());
        assert!(spatial::smem_bytes(tile, stride, 1) <= 227 * 1024, "{}", tile.name);
    }
}

#[test]
fn a_chunk_runs_in_steps_only_where_that_keeps_more_blocks_busy() {
    // 132 SMs: 3 split blocks per SM against 2 pays with work for the third, not without.
    assert!(igemm::split_adds_busy_blocks(3, 2, 132, 10_000));
    assert!(igemm::split_adds_busy_blocks(3, 2, 132, 300));
    assert!(!igemm::split_adds_busy_blocks(3, 2, 132, 264));
    // Registers that hold both to 2 blocks.
    assert!(!igemm::split_adds_busy_blocks(2, 2, 132, 10_000));
    // One step that does not fit at all.
    assert!(igemm::split_adds_busy_blocks(1, 0, 132, 1));
}

#[test]
fn a_class_admits_no_precision_less_accurate_than_itself() {
    use convkit::conv::cudnn::MathClass;
    for math in [MathClass::Exact, MathClass::Fast] {
        let admitted = igemm::precisions(math);
        assert!(!admitted.is_empty());
        for &precision in admitted {
            let class = igemm::class(precision);
            assert!(class == MathClass::Exact || math == MathClass::Fast, "{math:?} admits {precision:?}");
        }
    }
    assert_eq!(igemm::precisions(MathClass::Exact), &[Precision::Tf32x3]);
}

/// A tile runs its own layout only (NCHW layers the NCHW tiles, NHWC layers the NHWC ones,
/// flat and spatial alike), and the refusals say why.
#[test]
fn each_tile_runs_the_layout_it_was_built_for() {
    for layout in ["", ",layout=nhwc"] {
        let conv: Conv2d = format!("n=2,c=64,h=14,w=14,k=64,r=3,s=3,pad=1,groups=8{layout}").parse().unwrap();
        let geom = conv.geometry().unwrap();
        for tile in IGEMM_FWD_VARIANTS {
            let reason = igemm::tile_unsupported(&conv, &geom, tile);
            let runs = tile.channels_last == layout.contains("nhwc");
            assert_eq!(reason.is_none(), runs, "{conv} on {}: {reason:?}", tile.name);
        }
        for precision in [Precision::Tf32, Precision::Tf32x3] {
            let chosen = igemm::choose(&conv, &geom, precision, 132).unwrap().tile;
            assert_eq!(chosen.channels_last, layout.contains("nhwc"), "{conv}: {}", chosen.name);
        }
    }
}

/// NHWC tiles: two adjacent lanes share a pixel, so a warp's input copies reach 16 pixels (each
/// pixel a warp touches is a pass of the L1), every pixel of the block once per chunk.
#[test]
fn channels_last_warps_copy_sixteen_pixels_each() {
    for tile in IGEMM_FWD_VARIANTS.iter().filter(|t| t.channels_last) {
        assert_lane_pairs_cover(tile, tile.bm(), tile.copy_pixels(), |thread, j| tile.copy_row(thread, j));
    }
}

/// Each warp's copies in each round reach 16 items (pixels or halo positions), and over the
/// rounds every one of `items` is copied by exactly one lane pair.
fn assert_lane_pairs_cover(tile: &IgemmTile, items: u32, rounds: u32, item: impl Fn(u32, u32) -> u32) {
    let mut seen = vec![0u32; items as usize];
    for round in 0..rounds {
        for warp in 0..WARPS {
            let mut copied: Vec<u32> = (0..32).map(|lane| item(32 * warp + lane, round)).collect();
            copied.iter().for_each(|&m| seen[m as usize] += 1);
            copied.dedup();
            assert_eq!(copied.len(), 16, "{}: warp {warp} copies {copied:?}", tile.name);
        }
    }
    assert!(seen.iter().all(|&n| n == 2), "{}: each item by one lane pair", tile.name);
}

/// NHWC spatial tiles copy a halo position's 8 channels by a lane pair too (16 positions per
/// warp instruction), every position of a halo once per chunk; their halos hold half as many
/// positions as NCHW's, so a 16x8 tile refuses stride 2 there while an 8x8 one fits.
#[test]
fn channels_last_spatial_tiles_copy_sixteen_positions_per_warp() {
    for tile in IGEMM_FWD_VARIANTS.iter().filter(|t| t.channels_last && t.pixels != PixelTile::Flat) {
        assert_eq!(tile.max_halo_plane(), spatial::HALO_ROUNDS as u32 * BLOCK_THREADS / 2, "{}", tile.name);
        let rounds = spatial::HALO_ROUNDS as u32;
        assert_lane_pairs_cover(tile, tile.max_halo_plane(), rounds, |thread, i| tile.halo_position(thread, i));
    }
    let stride2: Conv2d = "n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1,stride=2,groups=8,layout=nhwc".parse().unwrap();
    let geom = stride2.geometry().unwrap();
    let by_name = |name: &str| IGEMM_FWD_VARIANTS.iter().find(|t| t.name == name).unwrap();
    // 16x8 pixels at stride 2 lie under 33 x 17 = 561 inputs; 8x8 under 17 x 17 = 289.
    let refused = igemm::tile_unsupported(&stride2, &geom, by_name("igemm_tf32_nhwc_s16x8_n16"));
    assert!(refused.is_some_and(|r| r.contains("320 positions")), "{refused:?}");
    assert_eq!(igemm::tile_unsupported(&stride2, &geom, by_name("igemm_tf32_nhwc_s8x8_n16")), None);
}

/// Warpgroup tiles are flat tiles of two m64 `wgmma` per k-step, of the column counts the
/// device prelude has a `wgmma_m64n{8 NT}k8` for (its dispatch has no other). Those that keep a
/// chunk's `wgmma` in flight (3xTF32 n64) have a stage more for it; only the NHWC 3xTF32 n24
/// tile has launch bounds (for its 5th block per SM).
#[test]
fn warpgroup_tiles_use_the_wgmma_shapes_the_prelude_has() {
    let warpgroup: Vec<_> = IGEMM_FWD_VARIANTS.iter().filter(|t| t.warpgroup).collect();
    assert_eq!(warpgroup.len(), 16, "4 tiles in 2 precisions and 2 layouts");
    for t in warpgroup {
        assert_eq!((t.pixels, t.m_tiles, t.bm()), (PixelTile::Flat, 2, 128), "{}", t.name);
        assert!(matches!(t.n_tiles, 3 | 4 | 7 | 8), "{}: no wgmma for {} columns", t.name, t.bn());
        let in_flight = t.wgmma_in_flight();
        assert_eq!(in_flight, t.precision == Precision::Tf32x3 && t.n_tiles == 8, "{}", t.name);
        // Iteration q copies chunk q + LEAD into stage (q + LEAD) % stages while chunks
        // q .. q + LEAD are in flight or computed and, where in flight, chunk q - 1's `wgmma` runs.
        for q in 0..64u32 {
            let refilled = (q + LEAD) % t.stages();
            for busy in q.saturating_sub(in_flight as u32)..q + LEAD {
                assert_ne!(busy % t.stages(), refilled, "{}: chunk {q} refills chunk {busy}'s stage", t.name);
            }
        }
        assert!(t.smem_bytes() >= 4 * t.stages() * t.stage_floats(), "{}", t.name);
        let bounds = (t.name == "igemm_3xtf32_nhwc_wg_m128_n24_k8").then_some(5);
        assert_eq!((t.min_blocks_per_sm(), t.blocks_per_sm_cap()), (bounds, None), "{}", t.name);
    }
}

/// A 3xTF32 tile's sums (products the tensor cores add up, truncating, before one f32 add to
/// the total) take every chunk's products once, in runs of at most 2 k-steps (the truncation
/// the bound covers); the warpgroup tiles of 8-channel chunks that wait per k-step sum two
/// chunks, the others one. TF32 tiles accumulate in the tensor cores and have no sums.
#[test]
fn every_3xtf32_sum_takes_whole_chunks_once_in_runs_of_two_k_steps_at_most() {
    for t in IGEMM_FWD_VARIANTS.iter().filter(|t| t.precision == Precision::Tf32x3) {
        let paired = t.warpgroup && t.k_steps == 1 && !t.wgmma_in_flight();
        assert_eq!(t.chunks_per_sum(), if paired { 2 } else { 1 }, "{}", t.name);
        for chunks in 1..=9u32 {
            let (mut open, mut added) = (None::<u32>, 0);
            for q in 0..chunks {
                assert_eq!(t.opens_sum(q), open.is_none(), "{}: chunk {q} of {chunks}", t.name);
                let run = open.get_or_insert(0);
                *run += t.k_steps;
                assert!(*run <= 2, "{}: a sum of {run} k-steps", t.name);
                if t.closes_sum(q, chunks) {
                    added += *run / t.k_steps;
                    open = None;
                }
            }
            assert_eq!((open, added), (None, chunks), "{}: {chunks} chunks", t.name);
        }
    }
}

/// An NCHW flat tile's input copies are one unrolled run per thread (`copy_chunk`): its threads
/// are `BM` times `threads_per_pixel`, so a thread's first channel `thread / BM` is below
/// `threads_per_pixel`, and the run of `BK / threads_per_pixel` copies fits the
/// `NCHW_INPUT_COPIES` it unrolls.
#[test]
fn nchw_flat_input_copies_fit_one_unrolled_run() {
    for t in IGEMM_FWD_VARIANTS.iter().filter(|t| t.pixels == PixelTile::Flat && !t.channels_last) {
        let tpp = t.threads_per_pixel();
        assert_eq!(t.bm() * tpp, BLOCK_THREADS, "{}", t.name);
        assert!(
            t.bk().is_multiple_of(tpp) && t.bk() / tpp <= NCHW_INPUT_COPIES as u32,
            "{}: {} copies",
            t.name,
            t.bk() / tpp
        );
    }
}
