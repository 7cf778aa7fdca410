//! Square 2D transforms of few images as two launches, rows then columns, each block holding
//! [`LINES`] lines in shared memory. A whole-image block ([`super::square`]) takes an image's
//! full latency on one SM: with fewer images than SMs most of the GPU idles (120 x 120 x 32
//! real images: 16 blocks on 132 SMs). Here 32 such images are 480 blocks per pass; the
//! intermediate goes through the output buffer, which these few images keep in L2.
//!
//! - A line of `N = A·B` points is a four-step transform: length-`B` DFTs over the elements
//!   `a + A·b` in registers, twiddles `W_N^{a·kb}`, length-`A` DFTs over `a` at each `kb` in
//!   registers, frequency `kb + B·ka` ([`lines`]). Shared memory holds the lines between the
//!   two steps, in the padded slots of [`slot`].
//! - The column pass runs in place in the output (every block reads its own columns whole
//!   before it writes them); so does the complex-to-real row pass. Those reads are coherent
//!   loads, as the output is written during the launch.
//! - Real-to-complex: rows `2g`, `2g+1` as one complex line, separated by the symmetry of real
//!   spectra before the half-spectrum rows are written; then the `N/2 + 1` columns.
//! - Complex-to-real: the columns first, into the real output as `N/2` complex columns: column
//!   0 carries `X[:, 0] + i·X[:, N/2]`, whose inverse is real plus `i·`real (both columns of a
//!   real image's spectrum are Hermitian), so the half spectrum's one extra column fits; then
//!   rows `2g`, `2g+1` completed by symmetry, as one complex line, real and imaginary parts out.

use super::{
    dft_reg,
    square::{Block, position, slot},
};
use crate::complex::Complex32;
use bytemuck::{Pod, Zeroable};

/// Lines one block transforms.
pub const LINES: u32 = 8;

/// Shared memory of one block: [`LINES`] lines of `A·B` points in padded slots.
pub const fn smem_bytes(a: u32, b: u32) -> u32 {
    LINES * (a + 1) * b * size_of::<Complex32>() as u32
}

/// Threads of one block: a thread per item of the larger step, whole warps.
pub const fn threads(a: u32, b: u32) -> u32 {
    let items = LINES * if a > b { a } else { b };
    items.div_ceil(32) * 32
}

/// Parameters of one pass.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Fft2dPassParams {
    pub input: u64,
    pub output: u64,
    /// `W_N^t` for `t < N` (forward; the inverse conjugates them).
    pub twiddles: u64,
    /// Row passes: the lines of all images (rows; pairs of rows for the real kinds), block
    /// `x` taking lines `LINES·x ..`. Column pass: the columns per image, block `(x, y)`
    /// taking columns `LINES·x ..` of image `y`.
    pub lines: u32,
    /// Column pass: complex elements per row of the input and of the output.
    pub in_pitch: u32,
    pub out_pitch: u32,
    /// Column pass of complex-to-real: column 0 transforms input columns `0 + i·N/2`.
    pub pack_nyquist: u32,
    /// 1 for the inverse transform (complex kinds and the column pass), else 0.
    pub inverse: u32,
    pub scale: f32,
}

/// Transforms [`LINES`] lines of `N = A·B` points: element `i` of line `l` from `load(l, i)`,
/// frequency `k` handed to `emit(l, k, v)`. `line_fastest` numbers work items line first
/// (neighbouring threads on neighbouring lines: columns, coalesced) or element first (rows).
/// `load` and `emit` are asked for every line below [`LINES`]; they skip lines past the data.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn lines<const A: usize, const B: usize, const INV: bool, M: Block>(
    m: &mut M,
    line_fastest: bool,
    load: impl Fn(&mut M, u32, u32) -> Complex32,
    emit: impl Fn(&mut M, u32, u32, Complex32),
) {
    let (a_len, b_len) = (A as u32, B as u32);
    let split =
        |item: u32, len: u32| if line_fastest { (item % LINES, item / LINES) } else { (item / len, item % len) };
    m.for_each(
        LINES * a_len,
        #[inline(always)]
        |m, item| {
            let (line, a) = split(item, a_len);
            // Twiddles first in program order (ptxas still issues most after the data loads).
            let mut w = [Complex32::ONE; B];
            for kb in 1..B {
                let t = m.twiddle(a * kb as u32);
                w[kb] = if INV { t.conj() } else { t };
            }
            let mut v = [Complex32::ZERO; B];
            for b in 0..B {
                v[b] = load(m, line, a + a_len * b as u32);
            }
            dft_reg::<B, INV>(&mut v);
            for kb in 0..B {
                if kb > 0 {
                    v[kb] = v[kb] * w[kb];
                }
                m.store(slot::<A, B>(line, a + a_len * kb as u32), v[kb]);
            }
        },
    );
    m.barrier();
    m.for_each(
        LINES * b_len,
        #[inline(always)]
        |m, item| {
            let (line, kb) = split(item, b_len);
            let mut v = [Complex32::ZERO; A];
            for a in 0..A {
                v[a] = m.load(slot::<A, B>(line, a as u32 + a_len * kb));
            }
            dft_reg::<A, INV>(&mut v);
            for ka in 0..A {
                emit(m, line, kb + b_len * ka as u32, v[ka]);
            }
        },
    );
}

/// Complex rows, forward or inverse: line `l` of block `block` is row `LINES·block + l` of
/// the images, contiguous rows of `N`.
#[inline(always)]
pub fn rows<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dPassParams, block: u32) {
    let n = (A * B) as u32;
    let first = block * LINES;
    let valid = move |line: u32| first + line < p.lines;
    let at = move |line: u32, i: u32| (first + line) as u64 * n as u64 + i as u64;
    let load =
        #[inline(always)]
        move |m: &mut M, line: u32, i: u32| if valid(line) { m.read_complex(at(line, i)) } else { Complex32::ZERO };
    let emit = #[inline(always)]
    move |m: &mut M, line: u32, k: u32, v: Complex32| {
        if valid(line) {
            m.write_complex(at(line, k), v.scale(p.scale));
        }
    };
    if p.inverse == 0 {
        lines::<A, B, false, M>(m, false, load, emit)
    } else {
        lines::<A, B, true, M>(m, false, load, emit)
    }
}

/// Complex columns, forward or inverse: line `l` of block `(block, image)` is column
/// `LINES·block + l` of image `image`, rows of `in_pitch` / `out_pitch` elements.
#[inline(always)]
pub fn columns<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dPassParams, block: u32, image: u32) {
    let n = (A * B) as u64;
    let first = block * LINES;
    let valid = move |line: u32| first + line < p.lines;
    let base = |pitch: u32| image as u64 * n * pitch as u64;
    let (in_base, out_base) = (base(p.in_pitch), base(p.out_pitch));
    let nyquist = n / 2;
    let emit = #[inline(always)]
    move |m: &mut M, line: u32, k: u32, v: Complex32| {
        if valid(line) {
            m.write_complex(out_base + k as u64 * p.out_pitch as u64 + (first + line) as u64, v.scale(p.scale));
        }
    };
    // No branch around a load (one kept the loads of a column from overlapping): lines past
    // the data read the block's first column and are set to zero.
    let element = move |line: u32, i: u32| {
        let column = first + if valid(line) { line } else { 0 };
        in_base + i as u64 * p.in_pitch as u64 + column as u64
    };
    let kept = move |line: u32, v: Complex32| if valid(line) { v } else { Complex32::ZERO };
    let load = #[inline(always)]
    move |m: &mut M, line: u32, i: u32| kept(line, m.read_complex(element(line, i)));
    // Column 0 adds i times column N/2; the other columns read their element twice (the
    // second read hits L1) and add nothing.
    let load_packed = #[inline(always)]
    move |m: &mut M, line: u32, i: u32| {
        let at = element(line, i);
        let first_column = first + line == 0;
        let v = m.read_complex(at);
        let w = m.read_complex(if first_column { at + nyquist } else { at });
        kept(line, w.mul_i().scale_add(if first_column { 1.0 } else { 0.0 }, v))
    };
    match (p.inverse != 0, p.pack_nyquist != 0) {
        (false, _) => lines::<A, B, false, M>(m, true, load, emit),
        (true, false) => lines::<A, B, true, M>(m, true, load, emit),
        (true, true) => lines::<A, B, true, M>(m, true, load_packed, emit),
    }
}

/// Real-to-complex rows: line `l` of block `block` is the pair of real rows `2g`, `2g+1`,
/// `g = LINES·block + l`, as one complex line; its spectrum `Z` splits into the rows' half
/// spectra `X_0[k] = (Z[k] + conj Z[-k]) / 2`, `X_1[k] = (Z[k] - conj Z[-k]) / 2i`, written
/// as rows `2g`, `2g+1` of `N/2 + 1` elements.
#[inline(always)]
pub fn rows_r2c<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dPassParams, block: u32) {
    let n = (A * B) as u32;
    let half = n / 2 + 1;
    let first = block * LINES;
    let valid = move |line: u32| first + line < p.lines;
    let real_row = move |line: u32, which: u32| (2 * (first + line) + which) as u64 * n as u64;
    lines::<A, B, false, M>(
        m,
        false,
        #[inline(always)]
        move |m, line, i| {
            if valid(line) {
                Complex32::new(m.read_real(real_row(line, 0) + i as u64), m.read_real(real_row(line, 1) + i as u64))
            } else {
                Complex32::ZERO
            }
        },
        // Frequency k lands where its step read from (position(k)): each thread overwrites
        // only the slots it read.
        #[inline(always)]
        |m, line, k, v| m.store(slot::<A, B>(line, position::<A, B>(k)), v),
    );
    m.barrier();
    let half_scale = 0.5 * p.scale;
    m.for_each(
        LINES * half,
        #[inline(always)]
        |m, item| {
            let (line, k) = (item / half, item % half);
            if valid(line) {
                let mirror = if k == 0 { 0 } else { n - k };
                let z = m.load(slot::<A, B>(line, position::<A, B>(k)));
                let zm = m.load(slot::<A, B>(line, position::<A, B>(mirror))).conj();
                let out = |which: u32| (2 * (first + line) + which) as u64 * half as u64 + k as u64;
                m.write_complex(out(0), (z + zm).scale(half_scale));
                // (z - zm) / 2i = -i (z - zm) / 2
                m.write_complex(out(1), (-(z - zm).mul_i()).scale(half_scale));
            }
        },
    );
}

/// Complex-to-real rows, in place: line `l` of block `block` reads rows `2g`, `2g+1`
/// (`g = LINES·block + l`) of the column pass's output (`N/2` complex each: element 0 is
/// `X[0] + i·X[N/2]`, both real), completes each to `N` frequencies by symmetry, transforms
/// `X_{2g} + i·X_{2g+1}` and writes the real and imaginary parts as real rows `2g`, `2g+1`.
#[inline(always)]
pub fn rows_c2r<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dPassParams, block: u32) {
    let n = (A * B) as u32;
    let nyquist = n / 2;
    let first = block * LINES;
    let valid = move |line: u32| first + line < p.lines;
    // Frequency k of row `row`: one load from a selected element.
    let value = #[inline(always)]
    move |m: &mut M, row: u64, k: u32| {
        let mirrored = k > nyquist;
        let j = if mirrored { n - k } else { k };
        let v = m.read_complex(row * nyquist as u64 + if j == nyquist { 0 } else { j } as u64);
        if j == 0 {
            Complex32::new(v.re, 0.0)
        } else if j == nyquist {
            Complex32::new(v.im, 0.0)
        } else if mirrored {
            v.conj()
        } else {
            v
        }
    };
    lines::<A, B, true, M>(
        m,
        false,
        #[inline(always)]
        move |m, line, k| {
            if valid(line) {
                let row = 2 * (first + line) as u64;
                value(m, row, k) + value(m, row + 1, k).mul_i()
            } else {
                Complex32::ZERO
            }
        },
        #[inline(always)]
        move |m, line, i, v| {
            if valid(line) {
                let row = 2 * (first + line) as u64 * n as u64 + i as u64;
                m.write_real(row, v.re * p.scale);
                m.write_real(row + n as u64, v.im * p.scale);
            }
        },
    );
}

macro_rules! two_pass_kernels {
    ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::Fft2dPassParams;
            use crate::{fft::square::GpuBlock, prelude::{block_idx_x, block_idx_y}};
            $(
                const _: () = {
                    #[unsafe(export_name = concat!("fft2d_rows_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn rows(p: Fft2dPassParams) {
                        let mut m = GpuBlock::new(p.twiddles, 0, p.input, 0, p.output);
                        super::rows::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fft2d_columns_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn columns(p: Fft2dPassParams) {
                        // In place unless it is complex-to-real's first pass: coherent loads.
                        let mut m = GpuBlock::in_place(p.twiddles, 0, p.input, 0, p.output);
                        super::columns::<$a, $b, _>(&mut m, &p, block_idx_x(), block_idx_y());
                    }

                    #[unsafe(export_name = concat!("fft2d_rows_r2c_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn rows_r2c(p: Fft2dPassParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.input, 0, 0, p.output);
                        super::rows_r2c::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fft2d_rows_c2r_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn rows_c2r(p: Fft2dPassParams) {
                        // In place: the complex rows read are the real rows written.
                        let mut m = GpuBlock::in_place(p.twiddles, 0, p.input, p.output, 0);
                        super::rows_c2r::<$a, $b, _>(&mut m, &p, block_idx_x());
                    }
                };
            )*
        }
    };
}

crate::square_sizes!(two_pass_kernels);
