//! The depthwise kernel without a GPU: its block program (`kernels_gpu::conv::depthwise`),
//! the code the GPU runs, over every block of the launcher's grid on the CPU, against the f64
//! reference. Every shared-memory access is tracked: a slot read before it was written, or
//! touched by two threads between two barriers with one of them writing, fails the test (the
//! kernel would race there), as does an output written twice or never, or any access outside
//! the tensors and the block's shared memory.

mod common;

use common::{SharedMemory, assert_within_bound, mark_written};
use convkit::{
    Conv2d, Error, TensorLayout,
    conv::epilogue::{Activation, Epilogue},
    depthwise,
    harness::reference::{cpu_reference, host_uniform, with_epilogue},
};
use kernels_gpu::{
    MagicDiv,
    conv::depthwise::{
        DEPTHWISE_FWD_VARIANTS, DepthwiseFwdParams, DepthwiseOut, DepthwiseProgram, DepthwiseTile, TileBlock,
        channels_program,
        nhwc::{DepthwiseNhwcParams, NhwcLane},
        planes::{PLANES_QUANTUM, PlaneBlock},
        planes_program, program,
        rows::RowLane,
        rows_program,
    },
    verify::Tolerance,
};
use rand::{Rng, SeedableRng, rngs::SmallRng};

/// The CPU's [`TileBlock`] and [`RowLane`]: threads (lanes) run one after another; shared
/// memory ([`SharedMemory`]) and output writes are tracked. A lane's halo is read from the
/// input where the GPU shuffles it from its neighbours' registers (the same row, the same
/// predicate).
struct CpuBlock<'a> {
    smem: SharedMemory<f32>,
    mem: CpuLane<'a>,
}

/// A run's tensors as the kernels see them (the channels-last program's [`NhwcLane`] itself):
/// every output write tracked.
struct CpuLane<'a> {
    x: &'a [f32],
    w: &'a [f32],
    y: &'a mut [f32],
    written: &'a mut [bool],
    /// The epilogue's bias, where it has one.
    bias: Option<&'a [f32]>,
    residual: &'a [f32],
    /// What `all_in_step` answers for a thread whose tile is interior: false stands for a warp
    /// in which some other lane's tile is not.
    interior_warp: bool,
}

impl CpuLane<'_> {
    fn write(&mut self, offset: u64, v: f32) {
        mark_written(self.written, offset);
        self.y[offset as usize] = v;
    }
}

impl DepthwiseOut for CpuBlock<'_> {
    fn write_y4(&mut self, store: bool, offset: u64, v: [f32; 4]) {
        assert!(offset.is_multiple_of(4), "16-byte store at element {offset}");
        if store {
            for (i, v) in v.into_iter().enumerate() {
                self.mem.write(offset + i as u64, v);
            }
        }
    }

    fn bias(&mut self, k: u32) -> f32 {
        self.mem.bias.map_or(0.0, |bias| bias[k as usize])
    }

    fn residual4(&mut self, load: bool, offset: u64) -> [f32; 4] {
        assert!(offset.is_multiple_of(4), "16-byte residual load at element {offset}");
        [0, 1, 2, 3].map(|i| if load { self.mem.residual[offset as usize + i] } else { 0.0 })
    }
}

impl TileBlock for CpuBlock<'_> {
    fn each_thread(&mut self, mut f: impl FnMut(&mut Self, u32)) {
        for thread in 0..kernels_gpu::conv::depthwise::BLOCK_THREADS {
            self.smem.item = thread;
            f(self, thread);
        }
    }

    fn barrier(&mut self) {
        self.smem.barrier();
    }

    fn copy_x(&mut self, slot: u32, offset: u64, inside: bool) {
        assert!(inside || offset == 0, "padding copies from element 0");
        let v = if inside { self.mem.x[offset as usize] } else { 0.0 };
        self.smem.store(slot, v);
    }

    fn copy_x4(&mut self, slot: u32, offset: u64, inside: bool) {
        assert!(slot.is_multiple_of(4) && offset.is_multiple_of(4), "16-byte copy of element {offset} to slot {slot}");
        for i in 0..4 {
            self.copy_x(slot + i, if inside { offset + i as u64 } else { 0 }, inside);
        }
    }

    fn copy_w(&mut self, slot: u32, offset: u64) {
        let v = self.mem.w[offset as usize];
        self.smem.store(slot, v);
    }

    fn wait_copies(&mut self) {}

    fn write_y(&mut self, store: bool, offset: u64, v: f32) {
        if store {
            self.mem.write(offset, v);
        }
    }

    fn residual(&mut self, load: bool, offset: u64) -> f32 {
        if load { self.mem.residual[offset as usize] } else { 0.0 }
    }

    fn load(&mut self, slot: u32) -> f32 {
        self.smem.load(slot)
    }

    fn load2(&mut self, slot: u32) -> [f32; 2] {
        assert!(slot.is_multiple_of(2), "8-byte shared load at slot {slot}");
        [self.load(slot), self.load(slot + 1)]
    }

    fn load4(&mut self, slot: u32) -> [f32; 4] {
        assert!(slot.is_multiple_of(4), "16-byte shared load at slot {slot}");
        [self.load(slot), self.load(slot + 1), self.load(slot + 2), self.load(slot + 3)]
    }
}

impl PlaneBlock for CpuBlock<'_> {
    fn each_thread_of(&mut self, threads: u32, mut f: impl FnMut(&mut Self, u32)) {
        for thread in 0..threads {
            self.smem.item = thread;
            f(self, thread);
        }
    }

    fn tap(&mut self, offset: u64) -> f32 {
        self.mem.w[offset as usize]
    }

    fn stage(&mut self, store: bool, slot: u32, v: f32) {
        if store {
            self.smem.store(slot, v);
        }
    }
}

impl RowLane for CpuBlock<'_> {
    fn load_row<const N: usize>(&mut self, load: bool, offset: u64) -> [f32; N] {
        assert!(offset.is_multiple_of(4), "16-byte loads from element {offset}");
        assert!(load || offset == 0, "a predicated-off load from element 0");
        core::array::from_fn(|i| if load { self.mem.x[offset as usize + i] } else { 0.0 })
    }

    fn halo<const N: usize, const L: usize, const R: usize>(
        &mut self,
        own: [f32; N],
        offset: u64,
        live: bool,
        first: bool,
        last: bool,
    ) -> ([f32; L], [f32; R]) {
        if live {
            assert_eq!(own[..], self.mem.x[offset as usize..offset as usize + N], "the ring gave another row");
        }
        let at = |i: i64| self.mem.x[(offset as i64 + i) as usize];
        let left = core::array::from_fn(|i| if live && !first { at(i as i64 - L as i64) } else { 0.0 });
        let right = core::array::from_fn(|i| if live && !last { at((N + i) as i64) } else { 0.0 });
        (left, right)
    }

    fn tap(&mut self, offset: u64) -> f32 {
        self.mem.w[offset as usize]
    }
}

/// A CPU run's tensors: random inputs, the epilogue's bias and residual, and NaN outputs with
/// a record of which were written.
struct CpuTensors {
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Vec<f32>,
    residual: Vec<f32>,
    y: Vec<f32>,
    written: Vec<bool>,
}

impl CpuTensors {
    fn new(conv: &Conv2d) -> Self {
        let geom = conv.geometry().unwrap();
        CpuTensors {
            x: host_uniform(conv.n as u64 * 7 + conv.c as u64, geom.x_len),
            w: host_uniform(conv.r as u64 * 13 + conv.k as u64, geom.w_len),
            bias: host_uniform(17, conv.k),
            residual: host_uniform(19, geom.y_len),
            y: vec![f32::NAN; geom.y_len],
            written: vec![false; geom.y_len],
        }
    }

    /// The tensors as `epilogue`'s kernels see them.
    fn lane(&mut self, epilogue: &Epilogue) -> CpuLane<'_> {
        CpuLane {
            x: &self.x,
            w: &self.w,
            y: &mut self.y,
            written: &mut self.written,
            bias: epilogue.bias.then_some(&self.bias[..]),
            residual: &self.residual,
            interior_warp: true,
        }
    }

    /// Fails unless every output was written and lies within the f32 bound of the f64
    /// reference followed by `epilogue`; the worst error over the bound.
    fn check(&self, conv: &Conv2d, epilogue: &Epilogue, what: &str) -> f64 {
        assert!(self.written.iter().all(|&w| w), "{what}: outputs never written");
        let plain = cpu_reference(conv, &self.x, &self.w).unwrap();
        let bias = epilogue.bias.then_some(&self.bias[..]);
        let truth = with_epilogue(conv, epilogue, &plain, bias, epilogue.residual.then_some(&self.residual[..]));
        let bound = Tolerance::f32_sum(conv.geometry().unwrap().taps(conv) as u64);
        assert_within_bound(&self.y, &truth.unwrap(), bound, what)
    }
}

/// Runs the planes variant `tile` over the launcher's whole grid for a GPU of `sm_count` SMs on
/// the CPU with `epilogue` and checks it against the f64 reference followed by the epilogue.
fn run_planes_on_cpu(conv: &Conv2d, tile: &DepthwiseTile, sm_count: u32, epilogue: &Epilogue) {
    let geom = conv.geometry().unwrap();
    let mut t = CpuTensors::new(conv);
    let (mut p, cfg) = depthwise::planes_params(conv, &geom, tile, sm_count).expect("a layer the variant computes");
    assert!(p.block_planes.is_multiple_of(PLANES_QUANTUM) && cfg.block_dim.0 == p.threads);
    assert!(p.threads as usize <= depthwise::PLANES_MAX_BLOCK_THREADS);
    p.epilogue = epilogue.params(conv, &geom);
    (p.epilogue.bias, p.epilogue.residual) = (epilogue.bias as u64, epilogue.residual as u64);
    let run = planes_program::<CpuBlock>(tile.name).expect("every planes variant has a program");
    let mut b = CpuBlock { smem: SharedMemory::new(0), mem: t.lane(epilogue) };
    for block in 0..cfg.grid_dim.0 {
        b.smem = SharedMemory::new((cfg.shared_mem_bytes / 4) as usize);
        run(&mut b, &p, block);
    }
    t.check(conv, epilogue, &format!("{conv} on {} ({} planes per block)", tile.name, p.block_planes));
}

/// Runs `tile` over the launcher's whole grid on the CPU with `epilogue` and checks it against
/// the f64 reference followed by the epilogue.
fn run_on_cpu(conv: &Conv2d, tile: &DepthwiseTile, x_aligned: bool, y_aligned: bool, epilogue: &Epilogue) -> f64 {
    let geom = conv.geometry().unwrap();
    let mut t = CpuTensors::new(conv);
    let mut p: DepthwiseFwdParams = depthwise::params(conv, &geom, tile, x_aligned, y_aligned);
    p.epilogue = epilogue.params(conv, &geom);
    // The CPU block reads the slices; the program only asks whether there is a bias or residual.
    (p.epilogue.bias, p.epilogue.residual) = (epilogue.bias as u64, epilogue.residual as u64);
    let mut b = CpuBlock { smem: SharedMemory::new(0), mem: t.lane(epilogue) };
    match tile.program {
        DepthwiseProgram::Rows => {
            // Every warp of the launch, lane by lane, as the entry point runs them.
            let run = rows_program::<CpuBlock>(tile.name).expect("every rows variant has a program");
            let groups = (p.planes as u64).div_ceil(p.planes_per_warp as u64);
            for warp in 0..groups * p.segments.divisor as u64 {
                for lane in 0..32 {
                    run(&mut b, &p, p.row_coords(warp as u32, lane));
                }
            }
        }
        DepthwiseProgram::Channels => unreachable!("channels-last variants run in run_channels_last_on_cpu"),
        DepthwiseProgram::Planes => unreachable!("planes variants run in run_planes_on_cpu"),
        DepthwiseProgram::Tiles => {
            let run = program::<CpuBlock>(tile.name).expect("every variant has a program");
            let [down, across] = tile.tiles(geom.out_h as u64, geom.out_w as u64);
            for group in 0..tile.plane_groups((conv.n * conv.c) as u64) {
                for tile_index in 0..down * across {
                    b.smem = SharedMemory::new((tile.smem_bytes() / 4) as usize);
                    run(&mut b, &p, tile_index as u32, group as u32);
                }
            }
        }
    }
    t.check(conv, epilogue, &format!("{conv} on {}", tile.name))
}

fn depthwise_conv(n: usize, c: usize, hw: [usize; 2], filter: usize, stride: usize, multiplier: usize) -> Conv2d {
    let mut conv = Conv2d::new(c, hw[0], hw[1], c * multiplier, filter, filter);
    (conv.n, conv.groups) = (n, c);
    conv.stride = [stride, stride];
    conv.pad = [filter / 2, filter / 2];
    conv
}

#[test]
fn every_variant_computes_the_convolution_on_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(11);
    for tile in DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program == DepthwiseProgram::Tiles) {
        // A map smaller than the tile and two a little larger than it (partial edge tiles on
        // both sides; rows of a multiple of 4, which 16-byte copies take, and not), plane
        // counts that leave the last block's planes partly empty; random padding.
        let (th, tw) = ((tile.tile_h * tile.stride) as usize, (tile.tile_w * tile.stride) as usize);
        for hw in [[5, 8], [th + 3, tw + 5], [th + 1, tw + 8]] {
            let planes = tile.planes_per_block() as usize + 1;
            let mut conv = depthwise_conv(
                2,
                planes.div_ceil(2),
                hw,
                tile.filter as usize,
                tile.stride as usize,
                tile.multiplier as usize,
            );
            let reach = tile.filter as usize / 2;
            conv.pad = [rng.random_range(0..=reach), rng.random_range(0..=reach)];
            conv.h = conv.h.max(tile.filter as usize);
            conv.w = conv.w.max(tile.filter as usize);
            for (x_aligned, y_aligned) in [(true, true), (false, true), (true, false)] {
                run_on_cpu(&conv, tile, x_aligned, y_aligned, &Epilogue::NONE);
            }
        }
    }
}

#[test]
fn every_variant_applies_the_epilogue_where_it_stores() {
    for (i, tile) in DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program == DepthwiseProgram::Tiles).enumerate() {
        // A partial edge tile and more planes than a block's; vector and scalar stores.
        let hw = [(tile.tile_h * tile.stride) as usize + 1, (tile.tile_w * tile.stride) as usize + 8];
        let planes = tile.planes_per_block() as usize + 1;
        let mut conv = depthwise_conv(
            2,
            planes.div_ceil(2),
            hw,
            tile.filter as usize,
            tile.stride as usize,
            tile.multiplier as usize,
        );
        conv.pad = [tile.filter as usize / 2; 2];
        let epilogue = Epilogue {
            bias: true,
            activation: Activation::ALL[i % Activation::ALL.len()],
            residual: i % 2 == 0,
            shuffle: i % 3 != 0,
        };
        for y_aligned in [true, false] {
            run_on_cpu(&conv, tile, true, y_aligned, &epilogue);
        }
    }
}

#[test]
fn every_rows_variant_computes_the_convolution_on_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(12);
    for (i, tile) in DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program == DepthwiseProgram::Rows).enumerate() {
        // Rows of 1 to 32 lanes (several planes per warp, lanes left idle), maps as short as
        // the filter, odd and even heights at stride 2, plane counts that leave the last warp's planes partly empty, random
        // padding along the height, with and without every epilogue.
        let lane = 4 * tile.stride as usize;
        for (j, lanes) in [1, 2, 3, 7, 14, 28, 32].into_iter().enumerate() {
            let h = rng.random_range(tile.filter as usize..=40);
            let mut conv = depthwise_conv(
                2,
                rng.random_range(1..=5),
                [h, lanes * lane],
                tile.filter as usize,
                tile.stride as usize,
                tile.multiplier as usize,
            );
            conv.pad[0] = rng.random_range(0..=tile.filter as usize / 2);
            assert_eq!(depthwise::unsupported(&conv, tile), None, "{conv}");
            run_on_cpu(&conv, tile, true, true, &Epilogue::NONE);
            let epilogue = Epilogue {
                bias: true,
                activation: Activation::ALL[(i + j) % Activation::ALL.len()],
                residual: j % 2 == 0,
                shuffle: j % 3 != 0,
            };
            run_on_cpu(&conv, tile, true, true, &epilogue);
        }
    }
}

#[test]
fn every_planes_variant_computes_the_convolution_on_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(14);
    for (i, tile) in DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program == DepthwiseProgram::Planes).enumerate() {
        // Maps as small as the filter up to several row blocks and strips, ragged ones, odd
        // plane lengths (16-byte pieces that straddle planes, a partial last copy and store),
        // plane counts that leave the last block partly empty, padding from 0 to K - 1 on each
        // side; a large GPU (fewer planes per block) and a one-SM one; every epilogue.
        let f = tile.filter as usize;
        let mut ran = 0;
        for j in 0..6 {
            let hw = match j {
                0 => [f, f],
                1 => [7, 7],
                2 => [14, 14],
                _ => [rng.random_range(f..=20), rng.random_range(f..=20)],
            };
            let mut conv = depthwise_conv(
                rng.random_range(1..=3),
                rng.random_range(1..=9),
                hw,
                f,
                tile.stride as usize,
                tile.multiplier as usize,
            );
            conv.pad = [rng.random_range(0..f), rng.random_range(0..f)];
            if depthwise::unsupported(&conv, tile).is_some() {
                // Only the threads-per-plane limit refuses a map of at most 20 x 20.
                assert!(hw[0] > 16 || hw[1] > 16, "{conv}: {:?}", depthwise::unsupported(&conv, tile));
                continue;
            }
            let epilogue = Epilogue {
                bias: true,
                activation: Activation::ALL[(i + j) % Activation::ALL.len()],
                residual: j % 2 == 0,
                shuffle: j % 3 != 0,
            };
            for sm_count in [132, 1] {
                run_planes_on_cpu(&conv, tile, sm_count, &Epilogue::NONE);
                run_planes_on_cpu(&conv, tile, sm_count, &epilogue);
            }
            ran += 1;
        }
        assert!(ran >= 3, "{}: {ran} maps", tile.name);
    }
}

#[test]
fn planes_variants_refuse_what_they_cannot_compute() {
    let tile = DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.name == "depthwise_planes_k3_s1_m1").unwrap();
    let ok = depthwise_conv(64, 576, [14, 14], 3, 1, 1);
    assert_eq!(depthwise::unsupported(&ok, tile), None);
    let mut padded = ok.clone();
    padded.pad = [3, 1];
    let wide = depthwise_conv(1, 8, [56, 56], 3, 1, 1);
    let nhwc = Conv2d { layout: TensorLayout::Nhwc, ..ok.clone() };
    for (conv, why) in [(&padded, "padding of K"), (&wide, "112 threads per plane"), (&nhwc, "NHWC")] {
        assert!(depthwise::unsupported(conv, tile).is_some(), "{why}");
    }
    // Too many elements for 31-bit offsets; parameters of an empty layer are no panic.
    let huge = depthwise_conv(1 << 17, 128, [14, 14], 3, 1, 1);
    assert!(depthwise::unsupported(&huge, tile).is_some(), "past 2^31 elements");
    let empty = Conv2d { r: 0, s: 0, ..depthwise_conv(1, 8, [8, 8], 3, 1, 1) };
    assert!(depthwise::unsupported(&empty, tile).is_some());
    // A small launch takes fewer planes per block: N = 1 keeps four blocks per SM.
    let geom = ok.geometry().unwrap();
    let (large, _) = depthwise::planes_params(&ok, &geom, tile, 132).unwrap();
    let one = depthwise_conv(1, 576, [14, 14], 3, 1, 1);
    let (small, cfg) = depthwise::planes_params(&one, &one.geometry().unwrap(), tile, 132).unwrap();
    assert_eq!((large.block_planes, large.threads), (16, 128));
    assert_eq!((small.block_planes, cfg.grid_dim.0), (4, 144));
}

#[test]
fn rows_variants_refuse_what_they_cannot_compute() {
    let tile = DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.name == "depthwise_rows_k3_m1").unwrap();
    let ok = depthwise_conv(2, 8, [20, 28], 3, 1, 1);
    assert_eq!(depthwise::unsupported(&ok, tile), None);
    for (w, pad_w, why) in [(30, 1, "row of 30"), (132, 1, "row past 128"), (28, 0, "narrower output")] {
        let mut conv = depthwise_conv(2, 8, [20, w], 3, 1, 1);
        conv.pad[1] = pad_w;
        assert!(depthwise::unsupported(&conv, tile).is_some(), "{why}");
    }
    let strided = depthwise_conv(2, 8, [20, 28], 3, 2, 1);
    assert!(depthwise::unsupported(&strided, tile).is_some(), "stride 2 on a stride-1 variant");
    let tile_s2 = DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.name == "depthwise_rows_k3_s2_m1").unwrap();
    assert!(depthwise::unsupported(&strided, tile_s2).is_some(), "a row of 28 is not a multiple of 8");
    assert_eq!(depthwise::unsupported(&depthwise_conv(2, 8, [20, 256], 3, 2, 1), tile_s2), None);
    assert!(depthwise::unsupported(&depthwise_conv(2, 8, [20, 264], 3, 2, 1), tile_s2).is_some(), "past 256");
}

#[test]
fn the_heuristic_tile_fits_the_map() {
    let pick = |hw| {
        let conv = depthwise_conv(64, 32, [hw, hw], 3, 1, 1);
        let tile = depthwise::choose_tile(&conv, &conv.geometry().unwrap()).unwrap();
        (tile.program, tile.tile_h, tile.tile_w)
    };
    // Whole rows where they apply (rows of a multiple of 4, at most 128 wide) and the launch
    // has MIN_ROWS_WARPS warps (64 x 32 planes here, segments of 14 rows at most).
    for hw in [28, 56, 64, 112, 128] {
        assert_eq!(pick(hw).0, DepthwiseProgram::Rows, "{hw}");
    }
    // Whole planes per block on small maps (rows there have too few warps, or none).
    for hw in [7, 8, 14, 20] {
        assert_eq!(pick(hw).0, DepthwiseProgram::Planes, "{hw}");
    }
    let one_image = depthwise_conv(1, 32, [112, 112], 3, 1, 1);
    let tile = depthwise::choose_tile(&one_image, &one_image.geometry().unwrap()).unwrap();
    assert_eq!(tile.program, DepthwiseProgram::Tiles, "N = 1: 256 warps of rows");
    // Else the largest tile that wastes at most MAX_COVER of the output area.
    assert_eq!(pick(130), (DepthwiseProgram::Tiles, 16, 16));
    let pick_tiles = |hw| {
        let conv = depthwise_conv(1, 32, [hw, hw], 9, 1, 1);
        let tile = depthwise::choose_tile(&conv, &conv.geometry().unwrap()).unwrap();
        (tile.program, tile.tile_h, tile.tile_w)
    };
    assert_eq!(pick_tiles(14), (DepthwiseProgram::Tiles, 16, 16), "9x9: no planes variant");
    assert_eq!(pick_tiles(18), (DepthwiseProgram::Tiles, 8, 8), "none within the bound: the least covered");
    // Stride 2: rows where they are a multiple of 8.
    let program = |hw| {
        let conv = depthwise_conv(64, 32, [hw, hw], 3, 2, 1);
        depthwise::choose_tile(&conv, &conv.geometry().unwrap()).unwrap().program
    };
    assert_eq!(program(112), DepthwiseProgram::Rows);
    assert_eq!(program(28), DepthwiseProgram::Tiles, "a row of 28 is not a multiple of 8");
}

#[test]
fn layers_outside_the_variants_are_refused_with_a_reason() {
    let ok = depthwise_conv(1, 8, [9, 9], 3, 1, 1);
    assert!(depthwise::choose_tile(&ok, &ok.geometry().unwrap()).is_ok());
    let mut dilated = ok.clone();
    dilated.dilation = [2, 2];
    let mut grouped = ok.clone();
    (grouped.groups, grouped.k) = (4, 8);
    let mut rectangular = ok.clone();
    rectangular.s = 5;
    let mut strided = ok.clone();
    strided.stride = [1, 2];
    let triple = depthwise_conv(1, 8, [9, 9], 3, 1, 3);
    let even = depthwise_conv(1, 8, [9, 9], 4, 1, 1);
    for (conv, words) in [
        (&dilated, "dilation"),
        (&grouped, "depthwise layers only"),
        (&rectangular, "filter size"),
        (&strided, "stride"),
        (&triple, "depthwise layers only"),
        (&even, "filter size"),
    ] {
        match depthwise::choose_tile(conv, &conv.geometry().unwrap()) {
            Err(Error::Unsupported { algorithm: "depthwise", reason }) => {
                assert!(reason.contains(words), "{conv}: {reason:?} does not say {words:?}")
            }
            other => panic!("{conv}: expected a refusal, got {other:?}"),
        }
    }
    // Invalid layers are refused, not a panic (division by C, products past usize).
    let mut empty = ok.clone();
    (empty.c, empty.groups, empty.k) = (0, 0, 0);
    assert!(depthwise::layer_unsupported(&empty).is_some());
    let mut huge = depthwise_conv(1, 8, [9, 9], 3, 1, 1);
    (huge.n, huge.c, huge.groups, huge.k) = (usize::MAX / 4, 8, 8, 8);
    assert!(depthwise::layer_unsupported(&huge).is_some());
    // An explicit variant of another filter size is refused before any launch would be.
    let tile = DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.filter == 5).unwrap();
    assert!(depthwise::unsupported(&ok, tile).is_some());
}

/// One thread's loads, taps and stores on host slices, each vector access checked for the
/// alignment its `4·V`-byte instruction needs.
impl NhwcLane for CpuLane<'_> {
    fn load_pixels<const V: usize, const W: usize>(
        &mut self,
        live: [bool; W],
        offset: u64,
        stride: u64,
    ) -> [[f32; V]; W] {
        core::array::from_fn(|j| {
            if !live[j] {
                return [0.0; V];
            }
            let offset = offset.wrapping_add(j as u64 * stride);
            assert!(offset.is_multiple_of(V as u64), "{}-byte load from element {offset}", 4 * V);
            core::array::from_fn(|i| self.x[offset as usize + i])
        })
    }

    fn tap(&mut self, offset: u64) -> f32 {
        self.w[offset as usize]
    }

    fn bias(&mut self, k: u32) -> f32 {
        self.bias.map_or(0.0, |bias| bias[k as usize])
    }

    fn residual<const V: usize>(&mut self, load: bool, offset: u64) -> [f32; V] {
        assert!(offset.is_multiple_of(V as u64), "{}-byte residual load at element {offset}", 4 * V);
        core::array::from_fn(|i| if load { self.residual[offset as usize + i] } else { 0.0 })
    }

    fn store<const V: usize>(&mut self, store: bool, offset: u64, v: [f32; V]) {
        assert!(offset.is_multiple_of(V as u64), "{}-byte store at element {offset}", 4 * V);
        if store {
            for (i, v) in v.into_iter().enumerate() {
                self.write(offset + i as u64, v);
            }
        }
    }

    fn all_in_step(&mut self, p: bool) -> bool {
        p && self.interior_warp
    }
}

/// Runs the channels-last `tile` over every thread of the launcher's grid on the CPU (with
/// segments of `segment_rows` output rows where given, else the launcher's) and checks it
/// against the f64 reference followed by `epilogue`.
fn run_channels_last_on_cpu(conv: &Conv2d, tile: &DepthwiseTile, segment_rows: Option<u32>, epilogue: &Epilogue) {
    let geom = conv.geometry().unwrap();
    let mut t = CpuTensors::new(conv);
    let mut p: DepthwiseNhwcParams = depthwise::channels_params(conv, &geom, tile, None);
    if let Some(rows) = segment_rows {
        let segments = geom.out_h.div_ceil(rows as usize);
        p.segment_rows = rows;
        p.segments = MagicDiv::new(segments as u32).unwrap();
        p.threads = (conv.n * segments * p.tiles_w.divisor as usize * p.vectors.divisor as usize) as u32;
    }
    p.epilogue = epilogue.params(conv, &geom);
    (p.epilogue.bias, p.epilogue.residual) = (epilogue.bias as u64, epilogue.residual as u64);
    let mut lane = t.lane(epilogue);
    let run = channels_program::<CpuLane>(tile.name).expect("every channels-last variant has a program");
    // Every thread of the launch's blocks, as the entry point runs them (those past the
    // launch's threads return at once).
    let block = kernels_gpu::conv::depthwise::nhwc::NHWC_BLOCK_THREADS;
    for thread in 0..p.threads.div_ceil(block) * block {
        // Every other thread as if a lane of its warp had an edge tile: an interior tile then
        // takes the edge walk, as it does on the GPU in such a warp.
        lane.interior_warp = thread.is_multiple_of(2);
        if let Some(at) = p.coords(thread, tile.lane_channels, tile.tile_w) {
            run(&mut lane, &p, at);
        }
    }
    t.check(conv, epilogue, &format!("{conv} on {} (segments of {segment_rows:?})", tile.name));
}

#[test]
fn every_channels_last_variant_computes_the_convolution_on_the_cpu() {
    let mut rng = SmallRng::seed_from_u64(13);
    let channels_last = DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program == DepthwiseProgram::Channels);
    for (i, tile) in channels_last.enumerate() {
        // Maps from one output column (narrower than a thread's 4) to several threads across
        // with a ragged last one, channel counts of one to several vectors, random padding on
        // each side, segments of one row, several rows with a short last one, and the
        // launcher's; with and without every epilogue.
        for j in 0..6 {
            let f = tile.filter as usize;
            let c = tile.lane_channels as usize * rng.random_range(1..=5);
            let hw = [rng.random_range(f..=f + 20), rng.random_range(1..=f + 14).max(f)];
            let mut conv = depthwise_conv(rng.random_range(1..=3), c, hw, f, tile.stride as usize, 1);
            conv.layout = TensorLayout::Nhwc;
            conv.pad = [rng.random_range(0..=f / 2), rng.random_range(0..=f / 2)];
            if j == 0 {
                (conv.w, conv.pad[1]) = (f, 0);
            }
            assert_eq!(depthwise::unsupported(&conv, tile), None, "{conv}");
            let epilogue = if j % 2 == 0 {
                Epilogue::NONE
            } else {
                Epilogue {
                    bias: true,
                    activation: Activation::ALL[(i + j) % Activation::ALL.len()],
                    residual: j % 3 != 0,
                    shuffle: true,
                }
            };
            for segment in [Some(1), Some(rng.random_range(2..=7)), None] {
                run_channels_last_on_cpu(&conv, tile, segment, &epilogue);
            }
        }
    }
}

#[test]
fn channels_last_variants_take_only_what_they_compute() {
    let nhwc =
        |c, filter, stride| Conv2d { layout: TensorLayout::Nhwc, ..depthwise_conv(2, c, [20, 20], filter, stride, 1) };
    let named = |name: &str| DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.name == name).unwrap();
    let c2 = named("depthwise_nhwc_k3_s1_c2");
    assert_eq!(depthwise::unsupported(&nhwc(8, 3, 1), c2), None);
    assert!(depthwise::unsupported(&nhwc(7, 3, 1), c2).is_some(), "2 channels per thread of 7");
    assert!(depthwise::unsupported(&depthwise_conv(2, 8, [20, 20], 3, 1, 1), c2).is_some(), "NCHW");
    assert!(depthwise::unsupported(&nhwc(8, 3, 2), c2).is_some(), "stride 2");
    // NCHW variants refuse channels-last layers, and the NCHW kernels do.
    let nchw_variants = DEPTHWISE_FWD_VARIANTS.iter().filter(|t| t.program != DepthwiseProgram::Channels);
    for tile in nchw_variants {
        assert!(depthwise::unsupported(&nhwc(8, tile.filter as usize, tile.stride as usize), tile).is_some());
    }
    assert_eq!(convkit::direct::supporting_variants(&nhwc(8, 3, 1)).count(), 0);
    // The heuristic: the first variant of the filter and stride (measured preference) whose
    // channels per thread divide C.
    let pick = |c, filter, stride| {
        let conv = nhwc(c, filter, stride);
        depthwise::choose_tile(&conv, &conv.geometry().unwrap()).map(|t| t.name)
    };
    assert_eq!(pick(96, 3, 1).unwrap(), "depthwise_nhwc_k3_s1_c2");
    assert_eq!(pick(96, 3, 2).unwrap(), "depthwise_nhwc_k3_s2_c1");
    assert_eq!(pick(7, 3, 1).unwrap(), "depthwise_nhwc_k3_s1_c1");
    assert_eq!(pick(96, 7, 1).unwrap(), "depthwise_nhwc_k7_s1_c1");
    for (conv, why) in [
        (nhwc(8, 9, 1), "9x9"),
        (Conv2d { k: 16, ..nhwc(8, 3, 1) }, "multiplier 2"),
        (Conv2d { dilation: [2, 2], ..nhwc(8, 3, 1) }, "dilation"),
    ] {
        assert!(depthwise::choose_tile(&conv, &conv.geometry().unwrap()).is_err(), "{why}");
    }
}

#[test]
fn channels_last_segment_lengths() {
    let layer = |n, c, hw, filter, stride| {
        let conv = Conv2d { layout: TensorLayout::Nhwc, ..depthwise_conv(n, c, [hw, hw], filter, stride, 1) };
        let tile = depthwise::choose_tile(&conv, &conv.geometry().unwrap()).unwrap();
        depthwise::channels_params(&conv, &conv.geometry().unwrap(), &tile, None)
    };
    // A 3x3 step takes 3 input rows (2 at stride 2, 3 for 5x5 at stride 2): one step per
    // segment at any size.
    let large = layer(64, 32, 112, 3, 1);
    assert_eq!(large.segment_rows, 3);
    assert!(large.threads as usize >= depthwise::MIN_CHANNELS_THREADS);
    let step_rows = |filter, stride| layer(64, 96, 112, filter, stride).segment_rows;
    assert_eq!(step_rows(3, 2), 2);
    assert_eq!(step_rows(5, 2), 3);
    // 5x5 at stride 1 (5 rows a step) keeps 14-row segments (112 / 8), rounded up to 15.
    assert_eq!(step_rows(5, 1), 15);
    // Where one step per thread would pass 2^31 - 1 threads (here 2.9e9), the launch takes
    // the longer segments instead (1024 / 74 rounded up to 15: 5.9e8 threads).
    let huge = layer(64, 1024, 1024, 3, 1);
    assert_eq!((huge.segment_rows, huge.threads), (15, 64 * 256 * 512 * 69));
    // Parameters of a layer no variant computes are no panic (a zero-tap filter here).
    let empty = Conv2d { r: 0, s: 0, ..depthwise_conv(1, 8, [8, 8], 3, 1, 1) };
    let tile = DEPTHWISE_FWD_VARIANTS.iter().find(|t| t.program == DepthwiseProgram::Channels).unwrap();
    assert!(depthwise::unsupported(&empty, tile).is_some());
    let geom = depthwise_conv(1, 8, [8, 8], 3, 1, 1).geometry().unwrap();
    assert_eq!(depthwise::channels_params(&empty, &geom, tile, None).threads, 0);
    let small = layer(1, 32, 112, 3, 1);
    assert_eq!(small.segment_rows, 3);
    // A 7x7 layer keeps 14-row segments, in multiples of 7, and a small launch of them stops
    // halving at 7 rows.
    let convnext = |n, hw| layer(n, 96, hw, 7, 1).segment_rows;
    assert_eq!(convnext(32, 56), 14);
    assert_eq!(convnext(1, 56), 7);
    assert_eq!(convnext(32, 7), 7);
    let vectors = small.vectors.divisor as usize;
    assert_eq!(small.threads as usize, vectors * 28 * 112usize.div_ceil(small.segment_rows as usize));
}

#[test]
fn channels_last_segments_stay_whole_where_the_launch_fills_a_wave() {
    // ConvNeXt's 14-wide 7x7 layer at N = 32: 49 152 threads, 384 blocks in 14-row segments.
    let conv = Conv2d { layout: TensorLayout::Nhwc, ..depthwise_conv(32, 384, [14, 14], 7, 1, 1) };
    let geom = conv.geometry().unwrap();
    let tile = depthwise::choose_tile(&conv, &geom).unwrap();
    let segment = |wave| depthwise::channels_params(&conv, &geom, &tile, wave).segment_rows;
    let blocks = 384;
    // Below MIN_CHANNELS_THREADS: halved without a wave, or where the blocks fill too little
    // of it; whole where they fill at least FULL_WAVE_PERCENT.
    assert_eq!(segment(None), 7);
    let filled = blocks * 100 / depthwise::FULL_WAVE_PERCENT;
    assert_eq!(segment(Some(filled)), 14);
    assert_eq!(segment(Some(filled + 1)), 7);
    assert_eq!(segment(Some(2 * blocks)), 7);
    // With or without a wave, a launch within bounds for `unsupported` (which takes none) has
    // no more threads than it counted.
    let most = depthwise::channels_params(&conv, &geom, &tile, None).threads;
    assert!(depthwise::channels_params(&conv, &geom, &tile, Some(filled)).threads <= most);
}
