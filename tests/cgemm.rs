//! The batched complex GEMM without a GPU: validation, the problem syntax, and the kernels'
//! own per-element code (run here on the CPU, with the launcher's parameters, operand swap for
//! row-major and batch split) against the f64 reference.

mod common;

use common::{SharedMemory, mma};
use convkit::{
    Error,
    cgemm::{self, BatchedGemm, CGEMM_TILES, CgemmTile, Complex32, Family, Layout, Op},
    harness::{
        cgemm::{CgemmCase, compare, expected, load_suite, random_case, variants},
        check,
        reference::host_uniform,
    },
};
use kernels_gpu::{
    cgemm::{
        CGEMM_THREADS, CgemmShape, DOT_LANES, LARGE_BK, MmaTile, Products, STAGE_ELEMENTS, ThreadCoords, large_element,
        tensor::STAGES,
    },
    random::mix,
    tf32::split_tf32,
};
use rand::Rng;

fn complex(seed: u64, len: usize) -> Vec<Complex32> {
    host_uniform(seed, 2 * len).chunks(2).map(|p| Complex32::new(p[0], p[1])).collect()
}

/// What the launcher and the tiled kernel compute with `tile`, block by block and thread by
/// thread on the CPU, with the kernel's own index math (the launcher's parameters, operand swap
/// for row-major, launch split, staging slots, thread and output coordinates). Asserts what
/// the kernel relies on: every slot a thread reads for an output of its tile was staged in the
/// same step, no slot is staged twice, every access inside the block's shared memory, and
/// each output written once.
fn emulate(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    match tile.family {
        Family::Whole => return emulate_whole(case, tile, a, b, c),
        Family::Large => return emulate_large(case, tile, a, b, c),
        Family::Element => return emulate_element(case, tile, a, b, c),
        Family::Dot => return emulate_dot(case, tile, a, b, c),
        Family::Pointwise => return emulate_pointwise(case, tile, a, b, c),
        Family::Register => return emulate_register(case, tile, a, b, c),
        Family::Tensor => return emulate_tensor(case, tile, a, b, c),
        Family::Tiled => {}
    }
    let g = &case.g;
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let shape = cgemm::shape(g, tile).unwrap();
    assert!(shape.staged() <= STAGE_ELEMENTS, "{shape:?}");
    let (tm, tn) = (tile.tm as usize, tile.tn as usize);
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    let smem_len = (shape.smem_bytes() / 8) as usize;
    let threads: Vec<_> = (0..CGEMM_THREADS).map(|t| shape_thread(&shape, t)).collect();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        assert_eq!(p.items, items);
        let b_region = (p.per_block * p.a_matrix) as usize;
        // Any grid walks the same items; each item's steps run in order.
        for item in 0..items {
            let at = p.item_coords(item);
            let mut smem = vec![Complex32::ZERO; smem_len];
            let mut acc = vec![Complex32::ZERO; (CGEMM_THREADS * p.rounds) as usize * tm * tn];
            for chunk in 0..p.chunks {
                let l0 = chunk * p.bk;
                let mut staged = vec![false; smem_len];
                for e in 0..p.staged() {
                    let (is_a, s) = p.stage(e, at, l0);
                    let slot = s.slot as usize;
                    assert!(
                        if is_a { slot < b_region } else { slot >= b_region && slot < smem_len },
                        "{case}: slot {slot}"
                    );
                    assert!(!staged[slot], "{case}: slot {slot} staged twice");
                    staged[slot] = true;
                    let (src, op) = if is_a { (a, p.op_a) } else { (b, p.op_b) };
                    let v = s.offset.map_or(Complex32::ZERO, |o| src[o as usize]);
                    smem[slot] = if op == Op::C as u32 { v.conj() } else { v };
                }
                let length = (p.k - l0).min(p.bk);
                for (t, me) in threads.iter().enumerate().filter(|(_, me)| me.matrix < p.per_round) {
                    for round in 0..p.rounds {
                        let matrix = me.matrix + round * p.per_round;
                        let cell0 = ((t * p.rounds as usize + round as usize) * tm) * tn;
                        for l in 0..length {
                            for i in 0..tm {
                                for j in 0..tn {
                                    let (row, col) =
                                        (me.row + i as u32 * p.thread_rows.divisor, me.col + j as u32 * p.thread_cols);
                                    let x = (matrix * p.a_matrix + l * p.a_pitch + row) as usize;
                                    let y = b_region + (matrix * p.b_matrix + l * p.b_pitch + col) as usize;
                                    assert!(x < smem_len && y < smem_len, "{case}: a read past shared memory");
                                    // Rows (columns) past the block tile read padding; their outputs are dropped.
                                    assert!(
                                        row >= p.bm || col >= p.bn || staged[x] && staged[y],
                                        "{case}: unstaged read"
                                    );
                                    let cell = &mut acc[cell0 + i * tn + j];
                                    *cell = smem[x].mul_add(smem[y], *cell);
                                }
                            }
                        }
                        if chunk + 1 == p.chunks {
                            let t_round = ThreadCoords { matrix, ..*me };
                            for i in 0..tm {
                                for j in 0..tn {
                                    if let Some(o) = p.output(at, t_round, i as u32, j as u32) {
                                        let o = o as usize;
                                        written[o] += 1;
                                        c[o] = p.epilogue(acc[cell0 + i * tn + j], || input[o]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// The `Whole` kernel on the CPU: each block's verbatim copies (pair by pair, as the kernel
/// loads and stores them), then every thread's register tile read through the ops. Asserts
/// that the copies stay inside the buffers and shared memory and that each output is written
/// once.
fn emulate_whole(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let g = &case.g;
    let cm = g.column_major();
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let shape = cgemm::shape(g, tile).expect("a Whole variant that holds the matrices");
    let (tm, tn) = (tile.tm, tile.tn);
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    let threads: Vec<_> = (0..tile.threads()).map(|t| shape_thread(&shape, t)).collect();
    let stage = tile.whole.expect("a Whole variant has its block").stage();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let mut p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        (p.a_len, p.b_len) = (a.len() as u64, b.len() as u64);
        for item in 0..items {
            let at = p.item_coords(item);
            let copies = p.whole_copies(at);
            let matrices = p.whole_matrices(at);
            // One stage: pair q of both copies together at slots 2q and 2q + 1.
            let mut smem = vec![Complex32::new(f32::NAN, f32::NAN); stage as usize];
            let mut region = 0usize;
            let mut bases = [0usize; 2];
            for (which, (copy, src)) in copies.iter().zip([a, b]).enumerate() {
                bases[which] = region + copy.odd as usize;
                for q in 0..copy.pairs {
                    let e = 2 * (copy.first_pair + q as u64) as usize;
                    let read = copy.pair_bytes(q) as usize / 8;
                    assert!(e + read <= src.len(), "{case}: a load past the buffer");
                    assert!(region + 2 * q as usize + 1 < smem.len(), "{case}: copies past the stage");
                    smem[region + 2 * q as usize] = src[e];
                    if read == 2 {
                        smem[region + 2 * q as usize + 1] = src[e + 1];
                    }
                }
                region += copy.slots() as usize;
            }
            assert!(region <= smem.len(), "{case}: copies past shared memory");
            let (a_row, a_l) = if cm.op_a == Op::N { (1, cm.lda) } else { (cm.lda, 1) };
            let (b_l, b_col) = if cm.op_b == Op::N { (1, cm.ldb) } else { (cm.ldb, 1) };
            let c_item = ((first + at.first as u64) as usize) * cm.stride_c;
            for me in threads.iter().filter(|me| me.matrix < p.per_round) {
                for round in 0..p.rounds {
                    let matrix = me.matrix + round * p.per_round;
                    if matrix >= matrices {
                        break;
                    }
                    for i in 0..tm {
                        for j in 0..tn {
                            let (row, col) =
                                ((me.row + i * p.thread_rows.divisor) as usize, (me.col + j * p.thread_cols) as usize);
                            let (row, col) = (row.min(cm.m - 1), col.min(cm.n - 1));
                            let mut acc = Complex32::ZERO;
                            for l in 0..cm.k {
                                let (x_at, y_at) = (
                                    matrix as usize * cm.stride_a + row * a_row + l * a_l,
                                    matrix as usize * cm.stride_b + l * b_l + col * b_col,
                                );
                                assert!(x_at < copies[0].count as usize && y_at < copies[1].count as usize);
                                let mut x = smem[bases[0] + x_at];
                                let mut y = smem[bases[1] + y_at];
                                if cm.op_a == Op::C {
                                    x = x.conj();
                                }
                                if cm.op_b == Op::C {
                                    y = y.conj();
                                }
                                acc = x.mul_add(y, acc);
                            }
                            if let Some(o) = p.whole_output(*me, i, j) {
                                let o = c_item + matrix as usize * cm.stride_c + o as usize;
                                written[o] += 1;
                                c[o] = p.epilogue(acc, || input[o]);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// The `Large` kernel on the CPU: per tile and chunk, each thread's staged elements (slot
/// and offset from `large_element`, as the kernel computes them once per tile), then the
/// 16 x 16 threads' register tiles at their constant shared-memory offsets.
fn emulate_large(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let g = &case.g;
    let cm = g.column_major();
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let shape = cgemm::shape(g, tile).expect("a Large variant for these layouts");
    let [ak, bk] = tile.k_contiguous.unwrap();
    let (tm, tn) = (tile.tm as usize, tile.tn as usize);
    let (bm, bn) = (shape.bm, shape.bn);
    let (a_pitch, b_pitch) = (bm + 1, bn + 1);
    let b_region = (LARGE_BK * a_pitch) as usize;
    let stage_len = b_region + (LARGE_BK * b_pitch) as usize;
    assert_eq!(shape.smem_bytes() as usize, 8 * 2 * stage_len, "two stages of both chunks");
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        for item in 0..items {
            let at = p.item_coords(item);
            let batch = (p.batch_base + at.first as u64) as usize;
            let mut acc = vec![Complex32::ZERO; 256 * tm * tn];
            let mut smem = vec![Complex32::new(f32::NAN, f32::NAN); (shape.smem_bytes() / 8) as usize];
            let mut l0 = 0;
            while l0 < p.k {
                // Chunk c lives in stage c mod 2; what it stages there is all its reads see.
                let base = (l0 / LARGE_BK % 2) as usize * stage_len;
                let mut staged = vec![false; smem.len()];
                for t in 0..CGEMM_THREADS {
                    for (per_thread, extent, pitch, kc, region, first, limit, ld, stride, src, conj) in [
                        (tm, bm, a_pitch, ak, 0, at.row0, p.m, cm.lda, cm.stride_a, a, cm.op_a == Op::C),
                        (tn, bn, b_pitch, bk, b_region, at.col0, p.n, cm.ldb, cm.stride_b, b, cm.op_b == Op::C),
                    ] {
                        for u in 0..per_thread as u32 {
                            let (index, l) = large_element(t + u * CGEMM_THREADS, extent, kc);
                            let slot = base + region + (l * pitch + index) as usize;
                            assert!(slot < base + stage_len, "{case}: a slot outside its stage");
                            assert!(!staged[slot], "{case}: slot staged twice");
                            staged[slot] = true;
                            let (i, ll) = ((first + index) as usize, (l0 + l) as usize);
                            smem[slot] = if first + index < limit && l0 + l < p.k {
                                let v = src[batch * stride + if kc { ll + i * ld } else { i + ll * ld }];
                                if conj { v.conj() } else { v }
                            } else {
                                Complex32::ZERO
                            };
                        }
                    }
                }
                for t in 0..CGEMM_THREADS as usize {
                    let (tx, ty) = (t % 16, t / 16);
                    for l in 0..LARGE_BK as usize {
                        for i in 0..tm {
                            for j in 0..tn {
                                let x = base + l * a_pitch as usize + tx + 16 * i;
                                let y = base + b_region + l * b_pitch as usize + ty + 16 * j;
                                assert!(staged[x] && staged[y], "{case}: unstaged read");
                                let cell = &mut acc[(t * tm + i) * tn + j];
                                *cell = smem[x].mul_add(smem[y], *cell);
                            }
                        }
                    }
                }
                l0 += LARGE_BK;
            }
            for t in 0..CGEMM_THREADS as usize {
                let (tx, ty) = (t % 16, t / 16);
                for i in 0..tm {
                    for j in 0..tn {
                        let (row, col) = (at.row0 as usize + tx + 16 * i, at.col0 as usize + ty + 16 * j);
                        if row < cm.m && col < cm.n {
                            let o = batch * cm.stride_c + row + col * cm.ldc;
                            written[o] += 1;
                            c[o] = p.epilogue(acc[(t * tm + i) * tn + j], || input[o]);
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// What an emulation starts from: the problem, its column-major form, A and B as the
/// column-major problem sees them (swapped for row-major) and the variant's shape.
fn column_major<'a>(
    case: &'a CgemmCase,
    tile: &CgemmTile,
    a: &'a [Complex32],
    b: &'a [Complex32],
) -> (&'a BatchedGemm, BatchedGemm, &'a [Complex32], &'a [Complex32], CgemmShape) {
    let g = &case.g;
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    (g, g.column_major(), a, b, cgemm::shape(g, tile).unwrap())
}

/// The `Element` kernels on the CPU: each work item `tm` outputs of one column at the
/// coordinates the kernel unpacks, their rows (the last row for those past the matrix) and
/// column read through the ops in steps of k; where the kernel reads two rows as one 16-byte
/// pair, asserts the pair is aligned and inside the buffer.
fn emulate_element(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let g = &case.g;
    let cm = g.column_major();
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let shape = cgemm::shape(g, tile).unwrap();
    let rows = tile.tm as usize;
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let mut p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        cgemm::set_pairs(&mut p);
        assert_eq!(items as u64, count * (cm.m.div_ceil(rows) * cm.n) as u64);
        for item in 0..items {
            let at = p.item_coords(item);
            let batch = (p.batch_base + at.first as u64) as usize;
            let (row0, col) = (at.row0 as usize, at.col0 as usize);
            assert!(row0 < cm.m && col < cm.n);
            let paired = rows.is_multiple_of(2) && p.a_pairs != 0 && cm.op_a == Op::N && row0 + rows <= cm.m;
            let row_of = |r: usize| p.element_row(at, rows as u32, r as u32) as usize;
            for r in 0..rows {
                let row = row_of(r).min(cm.m - 1);
                let mut acc = Complex32::ZERO;
                for l in 0..cm.k {
                    let x = match cm.op_a {
                        Op::N => a[batch * cm.stride_a + row + l * cm.lda],
                        Op::T => a[batch * cm.stride_a + l + row * cm.lda],
                        Op::C => a[batch * cm.stride_a + l + row * cm.lda].conj(),
                    };
                    if paired {
                        assert_eq!(row_of(r & !1) + r % 2, row, "{case}: a pair of rows apart");
                        let pair = batch * cm.stride_a + row_of(r & !1) + l * cm.lda;
                        assert!(
                            pair.is_multiple_of(2) && pair + 1 < a.len(),
                            "{case}: a 16-byte pair off its alignment or the buffer"
                        );
                    }
                    let y = match cm.op_b {
                        Op::N => b[batch * cm.stride_b + l + col * cm.ldb],
                        Op::T => b[batch * cm.stride_b + col + l * cm.ldb],
                        Op::C => b[batch * cm.stride_b + col + l * cm.ldb].conj(),
                    };
                    acc = x.mul_add(y, acc);
                }
                if row_of(r) < cm.m {
                    let o = batch * cm.stride_c + row_of(r) + col * cm.ldc;
                    written[o] += 1;
                    c[o] = p.epilogue(acc, || input[o]);
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// The `Pointwise` kernel on the CPU: each work item two batches' products (one past the
/// launch's batches dropped), read as 16-byte pairs where the launch is packed and aligned
/// (asserting the pair's alignment, with buffers placed at address 0), else through the
/// strides.
fn emulate_pointwise(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let (g, cm, a, b, shape) = column_major(case, tile, a, b);
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    let op = |v: Complex32, op: Op| if op == Op::C { v.conj() } else { v };
    for (first, count, items) in cgemm::launches(g, &shape) {
        let mut p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        p.planar = case.planar as u32;
        assert_eq!(items as u64, count.div_ceil(2));
        for item in 0..items as u64 {
            let both = 2 * item + 1 < count;
            if both && p.pointwise_packed() {
                assert!((first + 2 * item).is_multiple_of(2), "{case}: a 16-byte pair off its alignment");
            }
            for h in 0..1 + both as u64 {
                let batch = (first + 2 * item + h) as usize;
                let x = op(a[batch * cm.stride_a], cm.op_a);
                let y = op(b[batch * cm.stride_b], cm.op_b);
                let o = batch * cm.stride_c;
                written[o] += 1;
                c[o] = p.epilogue(x * y, || input[o]);
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// The `Register` kernels on the CPU: each work item one packed matrix, read whole at the
/// item's offset (16-byte pairs of rows: asserted aligned, with buffers placed at address 0)
/// and its outputs written in place.
fn emulate_register(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let (_, cm, a, b, shape) = column_major(case, tile, a, b);
    let s = tile.tm as usize;
    assert_eq!((cm.m, cm.n, cm.k, cm.lda, cm.ldb, cm.ldc), (s, s, s, s, s, s));
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    let op = |v: &[Complex32], at: usize, op: Op| if op == Op::C { v[at].conj() } else { v[at] };
    for (first, count, items) in cgemm::launches(&case.g, &shape) {
        let p = cgemm::params(&case.g, &shape, case.alpha, case.beta, first, count);
        assert_eq!(items as u64, count, "{case}: a work item per matrix");
        for item in 0..items as u64 {
            let at = ((p.batch_base + item) as usize) * s * s;
            assert!(at.is_multiple_of(2), "{case}: a 16-byte pair off its alignment");
            for j in 0..s {
                for i in 0..s {
                    let mut acc = Complex32::ZERO;
                    for l in 0..s {
                        let x = if cm.op_a == Op::N {
                            op(a, at + i + l * s, cm.op_a)
                        } else {
                            op(a, at + l + i * s, cm.op_a)
                        };
                        let y = if cm.op_b == Op::N {
                            op(b, at + l + j * s, cm.op_b)
                        } else {
                            op(b, at + j + l * s, cm.op_b)
                        };
                        acc = x.mul_add(y, acc);
                    }
                    let o = at + i + j * s;
                    written[o] += 1;
                    c[o] = p.epilogue(acc, || input[o]);
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// The `Dot` kernel on the CPU: each work item one output, summed as its warp does (each
/// lane's k-steps in order, pairs of them where both operands are contiguous and aligned
/// along k, then the shuffle tree); asserts every 16-byte pair aligned and inside its buffer.
fn emulate_dot(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    let (g, cm, a, b, shape) = column_major(case, tile, a, b);
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let mut p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        cgemm::set_pairs(&mut p);
        assert_eq!(items as u64, count * (cm.m * cm.n) as u64);
        for item in 0..items {
            let at = p.item_coords(item);
            let batch = (p.batch_base + at.first as u64) as usize;
            let (row, col) = (at.row0 as usize, at.col0 as usize);
            assert!(row < cm.m && col < cm.n);
            let (a_row, a_l) = if cm.op_a == Op::N { (row, cm.lda) } else { (row * cm.lda, 1) };
            let (b_col, b_l) = if cm.op_b == Op::N { (col * cm.ldb, 1) } else { (col, cm.ldb) };
            let (a_row, b_col) = (batch * cm.stride_a + a_row, batch * cm.stride_b + b_col);
            let step = if p.a_pairs != 0 && p.b_pairs != 0 && a_l == 1 && b_l == 1 { 2 } else { 1 };
            let read = |v: &[Complex32], at: usize, op: Op| if op == Op::C { v[at].conj() } else { v[at] };
            let mut lanes = [Complex32::ZERO; DOT_LANES as usize];
            for (lane, acc) in lanes.iter_mut().enumerate() {
                let mut l0 = lane * step;
                while l0 < cm.k {
                    if step == 2 && l0 + 1 < cm.k {
                        for at in [a_row + l0, b_col + l0] {
                            assert!(at.is_multiple_of(2), "{case}: a 16-byte pair off its alignment");
                        }
                        assert!(a_row + l0 + 1 < a.len() && b_col + l0 + 1 < b.len(), "{case}: a pair past its buffer");
                    }
                    for l in l0..(l0 + step).min(cm.k) {
                        *acc = read(a, a_row + l * a_l, cm.op_a).mul_add(read(b, b_col + l * b_l, cm.op_b), *acc);
                    }
                    l0 += DOT_LANES as usize * step;
                }
            }
            let mut delta = DOT_LANES as usize / 2;
            while delta > 0 {
                for lane in 0..delta {
                    lanes[lane] = lanes[lane] + lanes[lane + delta];
                }
                delta /= 2;
            }
            let o = batch * cm.stride_c + row + col * cm.ldc;
            written[o] += 1;
            c[o] = p.epilogue(lanes[0], || input[o]);
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// A TF32 operand as the tensor cores read its bits: the low 13 ignored.
fn tf32_operand(bits: u32) -> f32 {
    f32::from_bits(bits & !0x1fff)
}

/// The `Tensor` kernel on the CPU, launch by launch and block by block, on a tracked shared
/// memory (a read before a write, or two threads racing between barriers, fails): every
/// thread's copies (`copy_first`, `copy_step`, `tensor_copies`) into the stages at `a_slot` and
/// `b_slot`, every warp's fragments read at `a_fragment` / `b_fragment`, split (`split_tf32`,
/// read as the tensor cores read TF32) and multiplied in the PTX ISA's m16n8k8 layout (exact
/// products, f64 sums) chunk by chunk, and the accumulators stored from `acc_place`. Each
/// output written once.
fn emulate_tensor(case: &CgemmCase, tile: &CgemmTile, a: &[Complex32], b: &[Complex32], c: &mut [Complex32]) {
    type Fragment<const N: usize> = [[f32; N]; 32];
    /// A fragment's value and residual registers, per part (re, im) and for their f32 sum
    /// (Gauss's products).
    struct Split<const N: usize> {
        big: [Fragment<N>; 3],
        small: [Fragment<N>; 3],
    }
    impl<const N: usize> Split<N> {
        fn new() -> Self {
            Split { big: [[[0.0; N]; 32]; 3], small: [[[0.0; N]; 32]; 3] }
        }
        fn set(&mut self, lane: u32, e: usize, v: Complex32, conj: bool) {
            let im = if conj { -v.im } else { v.im };
            for (part, x) in [v.re, im, v.re + im].into_iter().enumerate() {
                let (big, small) = split_tf32(x);
                self.big[part][lane as usize][e] = tf32_operand(big);
                self.small[part][lane as usize][e] = tf32_operand(small);
            }
        }
    }
    let negated = |f: &Fragment<2>| f.map(|r| r.map(|v| -v));

    let g = &case.g;
    let (a, b) = if g.layout == Layout::RowMajor { (b, a) } else { (a, b) };
    let shape = cgemm::shape(g, tile).expect("a Tensor variant computes its stored layouts");
    let t: MmaTile = tile.mma.unwrap();
    let kc = tile.k_contiguous.unwrap();
    let stage_slots = t.stage_slots(kc);
    let warps = t.threads() / 32;
    let (mt, nt) = (t.m_tiles as usize, t.n_tiles as usize);
    let mut written = vec![0u8; c.len()];
    let input = c.to_vec();
    for (first, count, items) in cgemm::launches(g, &shape) {
        let mut p = cgemm::params(g, &shape, case.alpha, case.beta, first, count);
        cgemm::set_pairs(&mut p); // buffers at address 0: pairs wherever the strides allow
        assert_eq!(kc, [p.op_a != Op::N as u32, p.op_b == Op::N as u32], "{case}: the variant's layouts");
        let conj = [p.op_a == Op::C as u32, p.op_b == Op::C as u32];
        for item in 0..items {
            let at = p.item_coords(item);
            let mut smem = SharedMemory::<Complex32>::new((shape.smem_bytes() / 8) as usize);
            let copy = |smem: &mut SharedMemory<Complex32>, stage: u32, chunk: u32| {
                if t.ring > 0 {
                    // The producer's bulk copies, one per stored line: the thread that issues
                    // one does not matter, so one item writes the stage.
                    smem.item = t.threads();
                    for (is_a, src) in [(true, a), (false, b)] {
                        let kc_x = kc[!is_a as usize];
                        let bytes = t.ring_line_bytes(is_a, kc_x);
                        for line in 0..t.ring_lines(is_a, kc_x) {
                            let (first, slot) = t.ring_line(line, is_a, kc);
                            let source = p.tensor_copies(is_a, kc_x, 0, at, first).source(kc_x, (0, 0), 0);
                            let source = source.unwrap_or_else(|| panic!("{case}: a ring line past the matrix or k"));
                            assert!(
                                source.is_multiple_of(16) && slot.is_multiple_of(2) && bytes.is_multiple_of(16),
                                "{case}: a bulk copy not in 16-byte units"
                            );
                            for e in 0..bytes / 8 {
                                // Element e of the line is the next along the stored line.
                                let (index, l) = if kc_x { (first.0, first.1 + e) } else { (first.0 + e, first.1) };
                                let expected = if is_a { t.a_slot(index, l, kc[0]) } else { t.b_slot(l, index, kc) };
                                assert_eq!(slot + e, expected, "{case}: line {line}'s element {e} lands off its slot");
                                smem.store(stage * stage_slots + slot + e, src[source as usize / 8 + e as usize]);
                            }
                        }
                    }
                    return;
                }
                for thread in 0..t.threads() {
                    smem.item = thread;
                    for (is_a, src) in [(true, a), (false, b)] {
                        let kc_x = kc[!is_a as usize];
                        let pairs = p.a_pairs != 0 && p.b_pairs != 0 && t.pairs_fit(is_a, kc_x);
                        let first = t.copy_first(thread, is_a, kc_x, pairs);
                        let sources = p.tensor_copies(is_a, kc_x, 0, at, first);
                        for u in 0..t.copies(is_a, pairs) {
                            let step = t.copy_step(u, is_a, kc_x, pairs);
                            let (index, l) = (first.0 + step.0, first.1 + step.1);
                            let (address, bytes) = if pairs {
                                sources.pair_source(kc_x, step, chunk * t.bk)
                            } else {
                                let address = sources.source(kc_x, step, chunk * t.bk);
                                (address, if address.is_some() { 8 } else { 0 })
                            };
                            // The pair's second element is the next along the stored line.
                            let (d_index, d_l) = if kc_x { (0, 1) } else { (1, 0) };
                            for (h, (index, l)) in [(index, l), (index + d_index, l + d_l)]
                                .into_iter()
                                .enumerate()
                                .take(1 + pairs as usize)
                            {
                                let slot = if is_a { t.a_slot(index, l, kc[0]) } else { t.b_slot(l, index, kc) };
                                assert!(slot < stage_slots, "{case}: a copy past its stage");
                                let v = match address {
                                    Some(address) if 8 * h < bytes as usize => src[address as usize / 8 + h],
                                    _ => Complex32::ZERO,
                                };
                                smem.store(stage * stage_slots + slot, v);
                            }
                        }
                    }
                }
            };
            for stage in 0..(STAGES - 1).min(p.chunks) {
                copy(&mut smem, stage, stage);
            }
            let cells = (warps as usize) * mt * nt;
            let (mut acc_re, mut acc_im) = (vec![[[0.0f64; 4]; 32]; cells], vec![[[0.0f64; 4]; 32]; cells]);
            for q in 0..p.chunks {
                smem.barrier();
                let next = q + STAGES - 1;
                if next < p.chunks {
                    copy(&mut smem, next % STAGES, next);
                }
                let stage = (q % STAGES) * stage_slots;
                for warp in 0..warps {
                    // The parts (re, im) or Gauss's products (p, q, s).
                    let mut sums = vec![vec![[[0.0f64; 4]; 32]; mt * nt]; 3];
                    for ks in 0..t.k_steps() {
                        let mut x: Vec<Split<4>> = (0..mt).map(|_| Split::new()).collect();
                        let mut y: Vec<Split<2>> = (0..nt).map(|_| Split::new()).collect();
                        for lane in 0..32 {
                            smem.item = warp * 32 + lane;
                            for (i, x) in x.iter_mut().enumerate() {
                                for e in 0..4 {
                                    let (r, l) = t.a_fragment(lane, warp, i as u32, ks, e);
                                    x.set(lane, e as usize, smem.load(stage + t.a_slot(r, l, kc[0])), conj[0]);
                                }
                            }
                            for (j, y) in y.iter_mut().enumerate() {
                                for e in 0..2 {
                                    let (l, col) = t.b_fragment(lane, warp, j as u32, ks, e);
                                    y.set(lane, e as usize, smem.load(stage + t.b_slot(l, col, kc)), conj[1]);
                                }
                            }
                        }
                        for (i, x) in x.iter().enumerate() {
                            for (j, y) in y.iter().enumerate() {
                                if t.products == Products::Gauss {
                                    for (v, sum) in sums.iter_mut().enumerate() {
                                        let sum = &mut sum[i * nt + j];
                                        mma(&x.small[v], &y.big[v], sum);
                                        mma(&x.big[v], &y.small[v], sum);
                                        mma(&x.big[v], &y.big[v], sum);
                                    }
                                    continue;
                                }
                                let (neg, neg_small) = (negated(&y.big[1]), negated(&y.small[1]));
                                let re = &mut sums[0][i * nt + j];
                                mma(&x.small[0], &y.big[0], re);
                                mma(&x.big[0], &y.small[0], re);
                                mma(&x.small[1], &neg, re);
                                mma(&x.big[1], &neg_small, re);
                                mma(&x.big[0], &y.big[0], re);
                                mma(&x.big[1], &neg, re);
                                let im = &mut sums[1][i * nt + j];
                                mma(&x.small[0], &y.big[1], im);
                                mma(&x.big[0], &y.small[1], im);
                                mma(&x.small[1], &y.big[0], im);
                                mma(&x.big[1], &y.small[0], im);
                                mma(&x.big[0], &y.big[1], im);
                                mma(&x.big[1], &y.big[0], im);
                            }
                        }
                    }
                    if t.products == Products::Gauss {
                        let [p, q, s] = [&sums[0], &sums[1], &sums[2]].map(|v| v.as_flattened().as_flattened());
                        let parts: Vec<[f64; 2]> =
                            p.iter().zip(q).zip(s).map(|((p, q), s)| [p - q, s - (p + q)]).collect();
                        for (h, sum) in sums.iter_mut().take(2).enumerate() {
                            for (v, part) in sum.as_flattened_mut().as_flattened_mut().iter_mut().zip(&parts) {
                                *v = part[h];
                            }
                        }
                    }
                    let (part_re, part_im) = (&sums[0], &sums[1]);
                    let cells = (warp as usize) * mt * nt..;
                    for (acc, part) in [(&mut acc_re[cells.clone()], part_re), (&mut acc_im[cells], part_im)] {
                        for (cell, part) in acc.iter_mut().zip(part) {
                            for (values, sums) in cell.iter_mut().zip(part) {
                                for (v, s) in values.iter_mut().zip(sums) {
                                    *v += s;
                                }
                            }
                        }
                    }
                }
            }
            let c_matrix = (p.batch_base + at.first as u64) * p.stride_c;
            for warp in 0..warps {
                for lane in 0..32 {
                    for i in 0..mt {
                        for j in 0..nt {
                            for e in 0..4 {
                                let (r, col) = t.acc_place(lane, warp, i as u32, j as u32, e as u32);
                                let (row, column) = (at.row0 + r, at.col0 + col);
                                if row < p.m && column < p.n {
                                    let cell = (warp as usize * mt + i) * nt + j;
                                    let (re, im) = (acc_re[cell][lane as usize][e], acc_im[cell][lane as usize][e]);
                                    let o = (c_matrix + row as u64 + column as u64 * p.ldc as u64) as usize;
                                    written[o] += 1;
                                    c[o] = p.epilogue(Complex32::new(re as f32, im as f32), || input[o]);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(written.iter().all(|&w| w <= 1), "{case}: an output written twice");
}

/// A thread's coordinates, as the kernel unpacks them.
fn shape_thread(shape: &CgemmShape, t: u32) -> ThreadCoords {
    let per_matrix = shape.thread_rows * shape.thread_cols;
    let (matrix, in_matrix) = (t / per_matrix, t % per_matrix);
    ThreadCoords { matrix, row: in_matrix % shape.thread_rows, col: in_matrix / shape.thread_rows }
}

/// Every variant that computes `case` on the CPU against the f64 reference; how many ran.
fn check_every_tile(case: &CgemmCase, seed: u64) -> usize {
    let e = case.g.validate().unwrap();
    let (a, b) = (complex(mix(seed, 1), e.a), complex(mix(seed, 2), e.b));
    let c_in = complex(mix(seed, 3), e.c);
    let mut ran = 0;
    for tile in variants(case) {
        ran += 1;
        let mut c = c_in.clone();
        emulate(case, tile, &a, &b, &mut c);
        let stats =
            expected(case, &a, &b, &c_in, case.g.batch).compare_within(&c_in, &c, &cgemm::tolerance(&case.g, tile));
        assert!(stats.passed(), "{case} {} alpha {:?} beta {:?}: {stats:?}", tile.name, case.alpha, case.beta);
    }
    ran
}

#[test]
fn the_kernels_arithmetic_matches_the_reference_on_random_problems() {
    let mut rng = check::rng(21);
    let mut others = 0;
    for i in 0..150 {
        others += check_every_tile(&random_case(&mut rng, i), i as u64) - 10;
    }
    assert!(others > 150, "the random problems exercise the Whole and Large variants ({others} runs)");
    // Whole matrices many to a block, a tile of a tall matrix, chunks of k, more matrices
    // than one block's group, Element's rows dealt out over a warp (m a multiple of 128), and
    // the one-chunk Tensor tiles with k short of their chunk.
    for spec in [
        "m=1,batch=700",
        "m=3,n=5,k=2,batch=3001,op=ct",
        "m=200,n=3,k=40,batch=3",
        "m=8,n=70,k=100,batch=5,op=tc",
        "m=256,n=1,k=20,batch=3",
        "m=24,n=24,k=24,batch=5,op=cn",
        "m=16,n=40,k=12,batch=4,op=nc",
        "m=1,n=1,k=1,batch=9,op=cn",
        "m=2,batch=7,op=tc,layout=row",
        "m=2,batch=6,op=cn",
    ] {
        check_every_tile(&spec.parse().unwrap(), 7);
    }
    // The ring tiles, in every stored layout: interior tiles with k their chunk.
    for spec in [
        "m=64,n=32,k=32,batch=3",
        "m=32,n=64,k=32,batch=2,op=tc",
        "m=32,n=32,k=32,batch=3,op=nt,layout=row",
        "m=96,n=32,k=32,batch=2,op=ct",
    ] {
        let case: CgemmCase = spec.parse().unwrap();
        assert!(variants(&case).any(|t| t.has_ring()), "{case}: no ring tile computes it");
        check_every_tile(&case, 8);
    }
}

/// An mbarrier as the ring uses it: `count` arrivals complete a phase (the bulk copies' bytes
/// are counted as landed with the producer's arrival).
struct Mbarrier {
    count: u32,
    pending: u32,
    completed: u32,
}

impl Mbarrier {
    fn new(count: u32) -> Self {
        Mbarrier { count, pending: count, completed: 0 }
    }

    fn arrive(&mut self) {
        self.pending -= 1;
        if self.pending == 0 {
            (self.pending, self.completed) = (self.count, self.completed + 1);
        }
    }

    /// `mbarrier.try_wait.parity`: whether the phase of parity `parity` has completed, that
    /// is, the current phase has the other parity (a fresh mbarrier's phase before its first
    /// counts as completed).
    fn passed(&self, parity: u32) -> bool {
        self.completed & 1 != parity
    }
}

#[test]
fn the_ring_hands_each_item_its_stage_after_it_is_filled_and_before_it_is_refilled() {
    use kernels_gpu::cgemm::tensor::RingSlot;
    let mut rng = check::rng(5);
    for stages in 1..=4u32 {
        for items in [1u32, 2, 3, 7, 20] {
            for schedule in 0..20 {
                let consumers = 4; // warps, one arrival each here
                let mut full: Vec<_> = (0..stages).map(|_| Mbarrier::new(1)).collect();
                let mut empty: Vec<_> = (0..stages).map(|_| Mbarrier::new(consumers)).collect();
                // Which item a stage holds, and whether every consumer is done with it.
                let mut held: Vec<Option<(u32, u32)>> = vec![None; stages as usize];
                let (mut producer, mut produced) = (RingSlot::default(), 0);
                let mut consumer: Vec<(RingSlot, u32)> = vec![(RingSlot::default(), 0); consumers as usize];
                loop {
                    let can_produce = produced < items && empty[producer.stage as usize].passed(producer.freed());
                    let ready: Vec<usize> = (0..consumers as usize)
                        .filter(|&w| {
                            consumer[w].1 < items && full[consumer[w].0.stage as usize].passed(consumer[w].0.filled())
                        })
                        .collect();
                    if !can_produce && ready.is_empty() {
                        break;
                    }
                    // Any order the hardware could take, a new one per schedule.
                    let pick = rng.random_range(0..ready.len() + can_produce as usize);
                    if pick == ready.len() {
                        let s = producer.stage as usize;
                        if let Some((item, done)) = held[s] {
                            assert_eq!(done, consumers, "stage {s} refilled while item {item} is read");
                        }
                        held[s] = Some((produced, 0));
                        full[s].arrive();
                        (producer, produced) = (producer.next(stages), produced + 1);
                    } else {
                        let w = ready[pick];
                        let (slot, item) = consumer[w];
                        let s = slot.stage as usize;
                        let (holds, done) = held[s].expect("a stage read before it was filled");
                        assert_eq!(holds, item, "warp {w} reads stage {s} for item {item}");
                        held[s] = Some((holds, done + 1));
                        empty[s].arrive();
                        consumer[w] = (slot.next(stages), item + 1);
                    }
                }
                assert_eq!(
                    produced, items,
                    "{stages} stages, {items} items, schedule {schedule}: the producer stalled"
                );
                assert!(consumer.iter().all(|&(_, item)| item == items), "the consumers stalled");
            }
        }
    }
}

#[test]
fn the_comparison_catches_wrong_and_stray_writes() {
    let case: CgemmCase = "m=5,n=3,k=7,batch=4,op=ct,layout=row".parse().unwrap();
    let mut g = case.g;
    g.ldc += 2; // gaps inside C's buffer that must stay untouched
    g.stride_c = g.ldc * g.m + 1;
    let case = CgemmCase { g, beta: Complex32::new(0.5, -1.0), ..case };
    let e = case.g.validate().unwrap();
    let (a, b, c_in) = (complex(1, e.a), complex(2, e.b), complex(3, e.c));
    let mut c = c_in.clone();
    emulate(&case, cgemm::choose_tile(&case.g, false), &a, &b, &mut c);
    assert!(compare(&case, &a, &b, &c_in, &c, 4).passed());
    let mut wrong = c.clone();
    wrong[g.stride_c + 1].re += 1e-3;
    let stats = compare(&case, &a, &b, &c_in, &wrong, 4);
    assert_eq!((stats.violations, stats.first_violation), (1, g.stride_c as u64 + 1));
    let mut stray = c.clone();
    stray[3].im = 0.0; // a padding element of the first row
    let stats = compare(&case, &a, &b, &c_in, &stray, 4);
    assert_eq!((stats.violations, stats.first_violation), (1, 3));
}

#[test]
fn beta_zero_never_reads_c() {
    let case: CgemmCase = "m=4,n=4,k=4,batch=3".parse().unwrap();
    let e = case.g.validate().unwrap();
    let (a, b) = (complex(4, e.a), complex(5, e.b));
    let c_in = vec![Complex32::new(f32::NAN, f32::NAN); e.c];
    let mut c = c_in.clone();
    emulate(&case, cgemm::choose_tile(&case.g, false), &a, &b, &mut c);
    assert!(c.iter().all(|z| z.re.is_finite() && z.im.is_finite()));
    assert!(compare(&case, &a, &b, &c_in, &c, 3).passed());
}

#[test]
fn packed_problems_and_their_extents() {
    let g = BatchedGemm::packed(3, 5, 7, 11, Op::T, Op::N, Layout::ColMajor);
    assert_eq!((g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c), (7, 7, 3, 21, 35, 15));
    let e = g.validate().unwrap();
    assert_eq!((e.a, e.b, e.c), (21 * 11, 35 * 11, 15 * 11));
    let row = BatchedGemm::packed(3, 5, 7, 2, Op::N, Op::C, Layout::RowMajor);
    assert_eq!((row.lda, row.ldb, row.ldc), (7, 7, 5));
    let cm = row.column_major();
    assert_eq!((cm.m, cm.n, cm.op_a, cm.op_b, cm.lda, cm.ldb), (5, 3, Op::C, Op::N, 7, 7));
    assert_eq!(g.flops(), 8.0 * 3.0 * 5.0 * 7.0 * 11.0);
}

#[test]
fn bad_problems_are_typed_errors() {
    let ok = BatchedGemm::packed(4, 4, 4, 8, Op::N, Op::N, Layout::ColMajor);
    let cases: [(BatchedGemm, &str); 6] = [
        (BatchedGemm { m: 0, ..ok }, "m"),
        (BatchedGemm { batch: 0, ..ok }, "batch"),
        (BatchedGemm { lda: 3, ..ok }, "lda"),
        (BatchedGemm { stride_c: 15, ..ok }, "stride_c"),
        (BatchedGemm { stride_b: usize::MAX / 2, ..ok }, "stride_b"),
        (BatchedGemm { m: 1 << 16, n: 1 << 16, ldc: 1 << 16, lda: 1 << 16, stride_c: 1 << 32, ..ok }, "m"),
    ];
    for (g, field) in cases {
        match g.validate() {
            Err(Error::InvalidShape { field: f, reason }) => assert_eq!(f, field, "{reason}"),
            other => panic!("{g:?}: expected an InvalidShape error for {field}, got {other:?}"),
        }
    }
    // Shared operands (stride 0) are fine for A and B, not for C.
    assert!(BatchedGemm { stride_a: 0, stride_b: 0, ..ok }.validate().is_ok());
    assert!(BatchedGemm { stride_c: 0, ..ok }.validate().is_err());
}

#[test]
fn problem_syntax_round_trips_and_suites_parse() {
    for spec in [
        "m=4,n=2,k=3,batch=5,op=tc,layout=row,storage=planar,beta=1",
        "name=x,m=1,n=1,k=1,batch=1,op=nn,layout=col,storage=interleaved,beta=0",
    ] {
        let case: CgemmCase = spec.parse().unwrap();
        assert_eq!(case.to_string(), spec);
    }
    let default: CgemmCase = "m=4".parse().unwrap();
    assert!(default.g.batch * 8 * 48 >= 64 << 20, "the default batch moves at least 64 MB");
    assert!("m=4,op=nx".parse::<CgemmCase>().is_err());
    assert!("n=4".parse::<CgemmCase>().is_err());
    assert_eq!(load_suite("square").unwrap().len(), 12);
    assert!(!load_suite("fftconv").unwrap().is_empty());
    assert!(load_suite("nope").is_err());
}

#[test]
fn shapes_fit_shared_memory_and_cover_their_tiles() {
    for tile in CGEMM_TILES.iter().filter(|t| t.family == Family::Tiled) {
        for (m, n, k, batch) in
            [(1, 1, 1, 1), (1, 1, 1, 1 << 20), (5, 5, 5, 9), (64, 64, 64, 3), (256, 1, 256, 99), (7, 300, 1000, 2)]
        {
            let s = CgemmShape::new(*tile, m, n, k, batch);
            assert!(s.staged() <= STAGE_ELEMENTS && s.smem_bytes() <= 40 << 10, "{s:?}");
            assert!(s.computing_threads() <= CGEMM_THREADS && s.per_round >= 1 && s.rounds >= 1 && s.bk >= 1, "{s:?}");
            assert!(s.rounds == 1 || s.bk == k, "{s:?}: rounds need all of k in one step");
            assert!(s.thread_rows * tile.tm >= s.bm && s.thread_cols * tile.tn >= s.bn, "{s:?}");
            assert!(s.bk >= k.min(8), "{s:?}: a chunk of k shorter than 8");
        }
    }
    let pair = BatchedGemm::packed(2, 2, 2, 1000, Op::N, Op::N, Layout::ColMajor);
    assert_eq!(cgemm::choose_tile(&pair, false).name, "cgemm_register_2x2", "packed 2 x 2 matrices in registers");
    let padded = BatchedGemm { ldc: 3, stride_c: 6, ..pair };
    assert_eq!(cgemm::choose_tile(&padded, false).family, Family::Whole, "padded C: through shared memory");
    let g = BatchedGemm::packed(4, 4, 4, 1000, Op::N, Op::N, Layout::ColMajor);
    let tile = cgemm::choose_tile(&g, false);
    assert_eq!(tile.family, Family::Whole);
    let small = cgemm::shape(&g, tile).unwrap();
    assert_eq!((small.bm, small.bn, small.bk), (4, 4, 4));
    assert!(small.per_block >= 32, "{small:?}: many whole 4 x 4 matrices per block");
    // Whole rounds where they cost the stage little: 3 x 3 matrices (9 threads each, 28 per
    // round) 112 to a block in four rounds, not 113 in five (and 112 · 72 bytes are whole
    // lines). 5 x 5 ones, 40 of which fit: 32 in two rounds, whole lines (6 400 bytes);
    // 11 x 11 ones keep the 8 that fit, since 16 would be the first count of whole lines.
    let whole = |size: usize, name: &str| {
        let g = BatchedGemm::packed(size, size, size, 100_000, Op::N, Op::N, Layout::ColMajor);
        let tile = CGEMM_TILES.iter().find(|t| t.name == name).unwrap();
        let s = cgemm::shape(&g, tile).unwrap();
        (s.per_block, s.per_round, s.rounds)
    };
    assert_eq!(whole(3, "cgemm_whole_t1x1"), (112, 28, 4));
    assert_eq!(whole(5, "cgemm_whole_t1x2"), (32, 17, 2));
    assert_eq!(whole(11, "cgemm_whole_t1x1").0, 8);
    assert_eq!(cgemm::choose_tile(&g, true).family, Family::Tiled, "planar storage takes the tiled kernel");
    let big = BatchedGemm::packed(64, 64, 64, 10, Op::N, Op::N, Layout::ColMajor);
    assert_eq!(cgemm::choose_tile(&big, false).name, "cgemm_tc_64x64_mk");
    let dense = BatchedGemm::packed(32, 256, 256, 10, Op::N, Op::N, Layout::RowMajor);
    assert_eq!(cgemm::choose_tile(&dense, false).name, "cgemm_tc_128x32_mk", "C^T is 256 x 32");
    let gemv = BatchedGemm::packed(1, 256, 256, 10, Op::N, Op::N, Layout::RowMajor);
    assert_eq!(cgemm::choose_tile(&gemv, false).name, "cgemm_element_t2x1", "x . W, one row of C");
    let gemv_many = BatchedGemm { batch: 2664, ..gemv };
    assert_eq!(cgemm::choose_tile(&gemv_many, false).name, "cgemm_element_t2x1", "two rows at any batch");
    let gemv_32 = BatchedGemm::packed(1, 32, 32, 10, Op::N, Op::N, Layout::RowMajor);
    assert_eq!(cgemm::choose_tile(&gemv_32, false).name, "cgemm_element_t2x1", "rows not dealt out under 128");
    let sq = |size: usize| {
        cgemm::choose_tile(&BatchedGemm::packed(size, size, size, 10, Op::N, Op::N, Layout::ColMajor), false).name
    };
    assert_eq!(
        (sq(16), sq(24), sq(32), sq(33)),
        ("cgemm_tc_16x16_k16_mk", "cgemm_tc_32x32_k32_mk", "cgemm_tc_32x32_k32_mk", "cgemm_tc_32x32_mk")
    );
    assert_eq!(cgemm::choose_tile(&gemv, true).name, "cgemm_element", "planar: one row per thread");
    let gemv_t = BatchedGemm::packed(256, 1, 256, 10, Op::C, Op::N, Layout::ColMajor);
    assert_eq!(cgemm::choose_tile(&gemv_t, false).family, Family::Dot, "A^H x: A's rows run along k");
    assert_eq!(cgemm::choose_tile(&big, true).name, "cgemm_t4x4");
}

#[test]
fn the_heuristic_always_picks_a_variant_that_computes_the_problem() {
    // Every op pair, layout and storage, over sizes around each rule's thresholds.
    let sizes = [1, 2, 7, 8, 9, 12, 15, 16, 17, 23, 24, 31, 32, 33, 63, 64, 65, 127, 128, 200];
    for layout in [Layout::ColMajor, Layout::RowMajor] {
        for op_a in Op::ALL {
            for op_b in Op::ALL {
                for &m in &sizes {
                    for &n in &sizes {
                        for k in [1, 7, 8, 16, 17, 32, 33, 100] {
                            let g = BatchedGemm::packed(m, n, k, 3, op_a, op_b, layout);
                            for planar in [false, true] {
                                let tile = cgemm::choose_tile(&g, planar);
                                assert!(cgemm::shape(&g, tile).is_some(), "{} for {g:?}", tile.name);
                                assert!(!planar || tile.takes_planar());
                                // Gauss's products change a Tensor tile's products (and the
                                // two widest tiles to 64 x 32), nothing else.
                                let gauss = cgemm::choose_tile_for(&g, planar, Products::Gauss);
                                assert!(cgemm::shape(&g, gauss).is_some(), "{} for {g:?}", gauss.name);
                                match (tile.mma, gauss.mma) {
                                    (Some(four), Some(three)) => {
                                        assert_eq!((four.products, three.products), (Products::Four, Products::Gauss));
                                        let wide = matches!((four.bm(), four.bn()), (64, 64) | (128, 32));
                                        let expected = if wide { (64, 32) } else { (four.bm(), four.bn()) };
                                        assert_eq!(
                                            (three.bm(), three.bn(), three.one_chunk),
                                            (expected.0, expected.1, four.one_chunk)
                                        );
                                        assert_eq!(tile.k_contiguous, gauss.k_contiguous);
                                    }
                                    _ => assert_eq!(tile, gauss, "{g:?}"),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn verbatim_copies_cover_their_range_once() {
    use kernels_gpu::cgemm::VerbatimCopy;
    for (from, count, len) in
        [(0u64, 1u32, 1u64), (1, 1, 2), (3, 6, 9), (4, 5, 9), (5, 4, 9), (0, 2044, 4096), (7, 2044, 2051)]
    {
        let copy = VerbatimCopy::new(from, count, len);
        let mut seen = vec![0; count as usize];
        for q in 0..copy.pairs {
            let element = 2 * (copy.first_pair + q as u64);
            let read = copy.pair_bytes(q) as u64 / 8;
            assert!(element + read <= len, "{copy:?}: a load past the buffer");
            for half in 0..read {
                // Pair q fills slots 2q and 2q + 1; element from + e belongs in slot odd + e.
                let slot = 2 * q as u64 + half;
                if let Some(e) = slot.checked_sub(copy.odd as u64).filter(|&e| e < count as u64) {
                    assert_eq!(element + half, from + e, "{copy:?}: slot {slot}");
                    seen[e as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{copy:?}: {seen:?}");
    }
}

#[test]
fn tensor_copies_step_by_constants_and_fragment_loads_are_free_of_bank_conflicts() {
    // An 8-byte load is served per half-warp: its 16 slots must fall on 16 distinct pairs of
    // banks (slot mod 16), in every stored layout.
    let distinct = |slots: Vec<u32>| {
        let mut pairs: Vec<u32> = slots.iter().map(|s| s % 16).collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs.len() == slots.len()
    };
    for tile in CGEMM_TILES.iter().filter(|t| t.family == Family::Tensor) {
        let (t, kc) = (tile.mma.unwrap(), tile.k_contiguous.unwrap());
        assert_eq!(t.bk % 8, 0, "{}: whole k-steps per chunk", tile.name);
        assert_eq!(t.bk * t.bm() % t.threads(), 0, "{}: A's copies fill whole rounds of threads", tile.name);
        assert_eq!(t.bk * t.bn() % t.threads(), 0, "{}: B's copies fill whole rounds of threads", tile.name);
        assert_eq!(t.a_slots(kc[0]) % 2, 0, "{}: B's region 16-byte aligned", tile.name);
        // Where pairs fit, each pair's place is its thread's first plus a constant step, and
        // the pairs cover the chunk once.
        for (is_a, kc) in [(true, kc[0]), (false, kc[1])] {
            if !t.pairs_fit(is_a, kc) {
                continue;
            }
            let (extent, line_along_k) = (if is_a { t.bm() } else { t.bn() }, kc);
            let mut seen = vec![0u8; (extent * t.bk) as usize];
            for thread in 0..t.threads() {
                for u in 0..t.copies(is_a, true) {
                    let (first, step) = (t.copy_first(thread, is_a, kc, true), t.copy_step(u, is_a, kc, true));
                    let (index, l) = (first.0 + step.0, first.1 + step.1);
                    let second = if line_along_k { (index, l + 1) } else { (index + 1, l) };
                    for (index, l) in [(index, l), second] {
                        seen[(index * t.bk + l) as usize] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{}: pairs cover the chunk once", tile.name);
        }
        // Each copy's place is its thread's first plus a constant step, in stored order.
        for (is_a, kc) in [(true, kc[0]), (false, kc[1])] {
            let before = if is_a { 0 } else { t.copies(true, false) * t.threads() };
            for thread in 0..t.threads() {
                for u in 0..t.copies(is_a, false) {
                    let (first, step) = (t.copy_first(thread, is_a, kc, false), t.copy_step(u, is_a, kc, false));
                    let e = before + thread + u * t.threads();
                    assert_eq!(t.copy_element(e, is_a, kc), (first.0 + step.0, first.1 + step.1), "{}", tile.name);
                }
            }
        }
        for warp in 0..t.threads() / 32 {
            for ks in 0..t.k_steps() {
                for half in [0u32, 16] {
                    for i in 0..t.m_tiles {
                        for e in 0..4 {
                            let slots = (half..half + 16)
                                .map(|lane| {
                                    let (r, l) = t.a_fragment(lane, warp, i, ks, e);
                                    t.a_slot(r, l, kc[0])
                                })
                                .collect();
                            assert!(distinct(slots), "{}: A loads conflict", tile.name);
                        }
                    }
                    for j in 0..t.n_tiles {
                        for e in 0..2 {
                            let slots = (half..half + 16)
                                .map(|lane| {
                                    let (l, col) = t.b_fragment(lane, warp, j, ks, e);
                                    t.b_slot(l, col, kc)
                                })
                                .collect();
                            assert!(distinct(slots), "{}: B loads conflict", tile.name);
                        }
                    }
                }
            }
        }
    }
}
