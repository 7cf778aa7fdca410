//! Square 2D transforms held by one block in shared memory: the building blocks of the
//! standalone batched 2D FFT ([`FFT2D_SIZES`], launched by `host/fft.rs`) and of the fused
//! FFT convolution (`conv/fft.rs`).
//!
//! - Each side `N = A·B` is a four-step FFT: length-`B` DFTs in registers ([`dft_reg`]),
//!   twiddles `W_N^{a·kb}` from an f64 table, length-`A` DFTs in registers. Each step reads and
//!   writes the same shared-memory slots, so it needs no second buffer, and the frequencies come
//!   out digit-reversed: frequency `kb + B·ka` at position `ka + A·kb` ([`position`]). An
//!   inverse consumes that order directly (its steps run in the opposite order); only a
//!   transform that hands its spectrum to someone else reorders it, in its stores.
//! - Within a row, position `a + A·b` sits at slot `a + (A+1)·b` ([`slot`]): the DFT_B step's
//!   threads then read consecutive slots, the DFT_A step's threads runs `A+1` slots apart,
//!   conflict-free for even `A`.
//! - A block program is written once, generic over [`Block`] (the memory it touches and how its
//!   threads share out work items), so that the host's tests run the very same code on the CPU,
//!   check it against f64 and prove its barriers sufficient.

use super::dft_reg;
use crate::complex::Complex32;
use bytemuck::{Pod, Zeroable};

/// What a block program touches, and how a block's threads share out work items.
pub trait Block {
    /// Runs `f(self, item)` for every `item < count`, each on one thread of the block.
    fn for_each(&mut self, count: u32, f: impl FnMut(&mut Self, u32));
    /// Every thread's earlier shared-memory accesses happen before any later one.
    fn barrier(&mut self);
    fn load(&mut self, slot: u32) -> Complex32;
    fn store(&mut self, slot: u32, v: Complex32);
    /// `W_N^t`.
    fn twiddle(&mut self, t: u32) -> Complex32;
    /// Element `offset` of the program's real input.
    fn read_real(&mut self, offset: u64) -> f32;
    /// Element `offset` of the program's complex input.
    fn read_complex(&mut self, offset: u64) -> Complex32;
    fn write_real(&mut self, offset: u64, v: f32);
    fn write_complex(&mut self, offset: u64, v: Complex32);
}

/// Slot of row `row`, column position `col`.
#[inline(always)]
pub fn slot<const A: usize, const B: usize>(row: u32, col: u32) -> u32 {
    row * ((A as u32 + 1) * B as u32) + col + col / A as u32
}

/// Where frequency `k` of a side sits after the forward transform: `ka + A·kb` for
/// `k = kb + B·ka`.
#[inline(always)]
pub fn position<const A: usize, const B: usize>(k: u32) -> u32 {
    k / B as u32 + A as u32 * (k % B as u32)
}

/// Shared memory of one block: `N` rows of [`slot`]s.
pub const fn smem_bytes(a: u32, b: u32) -> u32 {
    a * b * (a + 1) * b * size_of::<Complex32>() as u32
}

/// Forward transforms of rows `< rows_in` (`value(row, col)`; rows past them are zero), then
/// the columns' DFT_B step; ends with a barrier. `value` is asked for columns below `N` only.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn forward_head<const A: usize, const B: usize, M: Block>(
    m: &mut M,
    rows_in: u32,
    value: impl Fn(&mut M, u32, u32) -> Complex32,
) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    // Rows: DFT_B over the strided elements, twiddle.
    m.for_each(
        n * a_len,
        #[inline(always)]
        |m, item| {
            let (row, a) = (item / a_len, item % a_len);
            let mut v = [Complex32::ZERO; B];
            if row < rows_in {
                for b in 0..B {
                    v[b] = value(m, row, a + a_len * b as u32);
                }
                dft_reg::<B, false>(&mut v);
                for kb in 1..B {
                    v[kb] = v[kb] * m.twiddle(a * kb as u32);
                }
            }
            for kb in 0..B {
                m.store(slot::<A, B>(row, a + a_len * kb as u32), v[kb]);
            }
        },
    );
    m.barrier();
    // Rows: DFT_A over contiguous runs (rows past rows_in are zero and stay so).
    m.for_each(
        rows_in * b_len,
        #[inline(always)]
        |m, item| {
            let (row, kb) = (item / b_len, item % b_len);
            let mut v = [Complex32::ZERO; A];
            for a in 0..A {
                v[a] = m.load(slot::<A, B>(row, a as u32 + a_len * kb));
            }
            dft_reg::<A, false>(&mut v);
            for a in 0..A {
                m.store(slot::<A, B>(row, a as u32 + a_len * kb), v[a]);
            }
        },
    );
    m.barrier();
    // Columns: DFT_B, twiddle.
    m.for_each(
        n * a_len,
        #[inline(always)]
        |m, item| {
            let (a, col) = (item / n, item % n);
            let mut v = [Complex32::ZERO; B];
            for b in 0..B {
                v[b] = m.load(slot::<A, B>(a + a_len * b as u32, col));
            }
            dft_reg::<B, false>(&mut v);
            for kb in 0..B {
                if kb > 0 {
                    v[kb] = v[kb] * m.twiddle(a * kb as u32);
                }
                m.store(slot::<A, B>(a + a_len * kb as u32, col), v[kb]);
            }
        },
    );
    m.barrier();
}

/// The `A` values of column `col` at rows `a + A·kb`: a column's DFT_A run.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn load_column_run<const A: usize, const B: usize, M: Block>(m: &mut M, kb: u32, col: u32) -> [Complex32; A] {
    let mut v = [Complex32::ZERO; A];
    for a in 0..A {
        v[a] = m.load(slot::<A, B>(a as u32 + A as u32 * kb, col));
    }
    v
}

#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn store_column_run<const A: usize, const B: usize, M: Block>(m: &mut M, kb: u32, col: u32, v: &[Complex32; A]) {
    for a in 0..A {
        m.store(slot::<A, B>(a as u32 + A as u32 * kb, col), v[a]);
    }
}

/// The inverse's twiddles after its DFT_A step: `v[a] *= conj(W_N^{a·kb})`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn untwiddle<const A: usize, M: Block>(m: &mut M, v: &mut [Complex32; A], kb: u32) {
    for a in 1..A {
        v[a] = v[a] * m.twiddle(a as u32 * kb).conj();
    }
}

/// Inverse transforms, from the columns' DFT_B step on (their DFT_A step done, untwiddled),
/// then rows `row_of(i)` for `i < rows` only; ends with a barrier, the result in natural
/// order in the slots of those rows.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn inverse_tail<const A: usize, const B: usize, M: Block>(m: &mut M, rows: u32, row_of: impl Fn(u32) -> u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    // Columns: inverse DFT_B.
    m.for_each(
        n * a_len,
        #[inline(always)]
        |m, item| {
            let (a, col) = (item / n, item % n);
            let mut v = [Complex32::ZERO; B];
            for kb in 0..B {
                v[kb] = m.load(slot::<A, B>(a + a_len * kb as u32, col));
            }
            dft_reg::<B, true>(&mut v);
            for b in 0..B {
                m.store(slot::<A, B>(a + a_len * b as u32, col), v[b]);
            }
        },
    );
    m.barrier();
    // Rows: inverse DFT_A, conjugate twiddle.
    m.for_each(
        rows * b_len,
        #[inline(always)]
        |m, item| {
            let (i, kb) = (item / b_len, item % b_len);
            let row = row_of(i);
            let mut v = [Complex32::ZERO; A];
            for ka in 0..A {
                v[ka] = m.load(slot::<A, B>(row, ka as u32 + a_len * kb));
            }
            dft_reg::<A, true>(&mut v);
            untwiddle(m, &mut v, kb);
            for a in 0..A {
                m.store(slot::<A, B>(row, a as u32 + a_len * kb), v[a]);
            }
        },
    );
    m.barrier();
    // Rows: inverse DFT_B.
    m.for_each(
        rows * a_len,
        #[inline(always)]
        |m, item| {
            let (i, a) = (item / a_len, item % a_len);
            let row = row_of(i);
            let mut v = [Complex32::ZERO; B];
            for kb in 0..B {
                v[kb] = m.load(slot::<A, B>(row, a + a_len * kb as u32));
            }
            dft_reg::<B, true>(&mut v);
            for b in 0..B {
                m.store(slot::<A, B>(row, a + a_len * b as u32), v[b]);
            }
        },
    );
    m.barrier();
}

/// The columns' last forward step (DFT_A), each frequency handed to `write(bin, value)` with
/// `bin = position(row)·N + position(col)` (the spectrum's digit-reversed index).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn write_spectrum<const A: usize, const B: usize, M: Block>(m: &mut M, write: impl Fn(&mut M, u32, Complex32)) {
    let n = (A * B) as u32;
    m.for_each(
        n * B as u32,
        #[inline(always)]
        |m, item| {
            let (kb, col) = (item / n, item % n);
            let mut v = load_column_run::<A, B, M>(m, kb, col);
            dft_reg::<A, false>(&mut v);
            for ka in 0..A {
                write(m, (ka as u32 + A as u32 * kb) * n + col, v[ka]);
            }
        },
    );
}

/// Filtering in the middle of the column transforms: the columns' DFT_A step, the product of
/// each frequency with `filter(bin)` (bin as in [`write_spectrum`]), and the inverse's DFT_A
/// step with its twiddles; ends with a barrier, ready for [`inverse_tail`].
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn filter_columns<const A: usize, const B: usize, M: Block>(m: &mut M, filter: impl Fn(&mut M, u32) -> Complex32) {
    let n = (A * B) as u32;
    m.for_each(
        n * B as u32,
        #[inline(always)]
        |m, item| {
            let (kb, col) = (item / n, item % n);
            let mut v = load_column_run::<A, B, M>(m, kb, col);
            dft_reg::<A, false>(&mut v);
            for ka in 0..A {
                v[ka] = v[ka] * filter(m, (ka as u32 + A as u32 * kb) * n + col);
            }
            dft_reg::<A, true>(&mut v);
            untwiddle(m, &mut v, kb);
            store_column_run::<A, B, M>(m, kb, col, &v);
        },
    );
    m.barrier();
}

/// A whole inverse transform of the spectrum `value(row, col)` (natural order), its columns'
/// first step fused with the loads (items go by natural column, so they are coalesced); ends
/// with a barrier, the result in natural order in the slots.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn inverse_from_natural<const A: usize, const B: usize, M: Block>(
    m: &mut M,
    value: impl Fn(&mut M, u32, u32) -> Complex32,
) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    m.for_each(
        n * b_len,
        #[inline(always)]
        |m, item| {
            let (kb, col) = (item / n, item % n);
            let mut v = [Complex32::ZERO; A];
            for ka in 0..A {
                v[ka] = value(m, kb + b_len * ka as u32, col);
            }
            dft_reg::<A, true>(&mut v);
            untwiddle(m, &mut v, kb);
            store_column_run::<A, B, M>(m, kb, position::<A, B>(col), &v);
        },
    );
    m.barrier();
    inverse_tail::<A, B, M>(
        m,
        n,
        #[inline(always)]
        |row| row,
    );
}

/// One transform size of the standalone 2D FFT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fft2dSize {
    /// The complex-to-complex kernel.
    pub name: &'static str,
    /// The real-to-complex (forward) and complex-to-real (inverse) kernels.
    pub r2c_kernel: &'static str,
    pub c2r_kernel: &'static str,
    /// The two-pass kernels ([`super::two_pass`]): complex rows, complex columns, real rows in,
    /// real rows out.
    pub rows_kernel: &'static str,
    pub columns_kernel: &'static str,
    pub rows_r2c_kernel: &'static str,
    pub rows_c2r_kernel: &'static str,
    pub a: u32,
    pub b: u32,
    pub threads: u32,
}

impl Fft2dSize {
    pub const fn side(&self) -> u32 {
        self.a * self.b
    }

    pub const fn smem_bytes(&self) -> u32 {
        smem_bytes(self.a, self.b)
    }
}

/// Parameters of the standalone 2D FFT: `images` contiguous `N x N` images, natural order in
/// and out, each output multiplied by `scale`. Complex-to-complex: complex images both ways.
/// Real-to-complex: real images in, half spectra out (`N x (N/2 + 1)`, the columns
/// `0..=N/2`, as cuFFT lays them out); complex-to-real the other way.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Fft2dParams {
    pub input: u64,
    pub output: u64,
    /// `W_N^t` for `t < N` (forward; the inverse conjugates them).
    pub twiddles: u64,
    pub images: u32,
    /// 1 for the inverse transform, else 0 (the real kernels ignore it).
    pub inverse: u32,
    pub scale: f32,
    pub _pad: u32,
}

/// Columns of a half spectrum: `N/2 + 1`.
pub const fn half_columns(n: u32) -> u32 {
    n / 2 + 1
}

/// Real-to-complex: images `2·pair` and `2·pair + 1` as the real and imaginary parts of one
/// complex transform, separated at the end by the symmetry of real spectra:
/// `X_a[k] = (Z[k] + conj Z[-k]) / 2`, `X_b[k] = (Z[k] - conj Z[-k]) / 2i`.
#[inline(always)]
pub fn fft2d_r2c<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dParams, pair: u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    let half = half_columns(n);
    let (first, second) = (2 * pair, 2 * pair + 1);
    let has_second = second < p.images;
    let image = |i: u32| i as u64 * (n as u64 * n as u64);
    forward_head::<A, B, M>(
        m,
        n,
        #[inline(always)]
        |m, row, col| {
            let at = (row * n + col) as u64;
            let im = if has_second { m.read_real(image(second) + at) } else { 0.0 };
            Complex32::new(m.read_real(image(first) + at), im)
        },
    );
    m.for_each(
        n * b_len,
        #[inline(always)]
        |m, item| {
            let (kb, col) = (item / n, item % n);
            let mut v = load_column_run::<A, B, M>(m, kb, col);
            dft_reg::<A, false>(&mut v);
            store_column_run::<A, B, M>(m, kb, col, &v);
        },
    );
    m.barrier();
    let spectrum = |i: u32| i as u64 * (n as u64 * half as u64);
    m.for_each(
        n * half,
        #[inline(always)]
        |m, item| {
            let (row, col) = (item / half, item % half);
            let mirror = |k: u32| if k == 0 { 0 } else { n - k };
            let z = m.load(slot::<A, B>(position::<A, B>(row), position::<A, B>(col)));
            let zm = m.load(slot::<A, B>(position::<A, B>(mirror(row)), position::<A, B>(mirror(col)))).conj();
            let half_scale = 0.5 * p.scale;
            m.write_complex(spectrum(first) + item as u64, (z + zm).scale(half_scale));
            if has_second {
                // (z - zm) / 2i = -i (z - zm) / 2
                m.write_complex(spectrum(second) + item as u64, (-(z - zm).mul_i()).scale(half_scale));
            }
        },
    );
}

/// Complex-to-real: half spectra `2·pair` and `2·pair + 1` completed by symmetry
/// (`X[-k] = conj X[k]`) and combined into `Z = X_a + i·X_b`, one inverse transform, the real
/// part to image `2·pair` and the imaginary part to `2·pair + 1`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn fft2d_c2r<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dParams, pair: u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    let half = half_columns(n);
    let (first, second) = (2 * pair, 2 * pair + 1);
    let has_second = second < p.images;
    let spectrum = |i: u32| i as u64 * (n as u64 * half as u64);
    // X(row, col) of one half spectrum, the missing columns from their mirror images: one load
    // from a selected address (a load in each branch kept the loads from overlapping, and took
    // registers).
    let value = #[inline(always)]
    |m: &mut M, base: u64, row: u32, col: u32| {
        let mirrored = col >= half;
        let (r, c) = if mirrored { (if row == 0 { 0 } else { n - row }, n - col) } else { (row, col) };
        let v = m.read_complex(base + (r * half + c) as u64);
        Complex32::new(v.re, if mirrored { -v.im } else { v.im })
    };
    inverse_from_natural::<A, B, M>(
        m,
        #[inline(always)]
        |m, row, col| {
            let xb = if has_second { value(m, spectrum(second), row, col) } else { Complex32::ZERO };
            value(m, spectrum(first), row, col) + xb.mul_i()
        },
    );
    let image = |i: u32| i as u64 * (n as u64 * n as u64);
    m.for_each(
        n * n,
        #[inline(always)]
        |m, item| {
            let (row, col) = (item / n, item % n);
            let v = m.load(slot::<A, B>(row, col)).scale(p.scale);
            m.write_real(image(first) + item as u64, v.re);
            if has_second {
                m.write_real(image(second) + item as u64, v.im);
            }
        },
    );
}

/// The block program of the standalone 2D FFT: image `image`, forward or inverse.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register arrays: index loops, fully unrolled
pub fn fft2d<const A: usize, const B: usize, M: Block>(m: &mut M, p: &Fft2dParams, image: u32) {
    let (a_len, b_len) = (A as u32, B as u32);
    let n = a_len * b_len;
    let base = image as u64 * (n as u64 * n as u64);
    // The columns' DFT_A step works on column positions; its items go by natural column so
    // that the global loads and stores it fuses (the reordering to and from natural order)
    // are coalesced.
    if p.inverse == 0 {
        forward_head::<A, B, M>(
            m,
            n,
            #[inline(always)]
            |m, row, col| m.read_complex(base + (row * n + col) as u64),
        );
        m.for_each(
            n * b_len,
            #[inline(always)]
            |m, item| {
                let (kb, col) = (item / n, item % n);
                let mut v = load_column_run::<A, B, M>(m, kb, position::<A, B>(col));
                dft_reg::<A, false>(&mut v);
                for ka in 0..A {
                    let row = kb + b_len * ka as u32;
                    m.write_complex(base + (row * n + col) as u64, v[ka].scale(p.scale));
                }
            },
        );
    } else {
        inverse_from_natural::<A, B, M>(
            m,
            #[inline(always)]
            |m, row, col| m.read_complex(base + (row * n + col) as u64),
        );
        m.for_each(
            n * n,
            #[inline(always)]
            |m, item| {
                let (row, col) = (item / n, item % n);
                let v = m.load(slot::<A, B>(row, col));
                m.write_complex(base + item as u64, v.scale(p.scale));
            },
        );
    }
}

/// Every square transform size, `(N, A, B, threads)` with `N = A·B`, handed to `$then!`: the
/// one list that the standalone FFT and the FFT convolution build their kernels from. `A` is
/// the even factor where there is one (see the module doc).
#[macro_export]
macro_rules! square_sizes {
    ($then:ident) => {
        $then![
            (12, 4, 3, 128),
            (14, 2, 7, 128),
            (16, 4, 4, 128),
            (20, 4, 5, 128),
            (24, 8, 3, 128),
            (28, 4, 7, 128),
            (32, 8, 4, 256),
            (36, 4, 9, 256),
            (40, 8, 5, 256),
            (42, 6, 7, 256),
            (48, 8, 6, 256),
            (56, 8, 7, 256),
            (64, 8, 8, 256),
            (72, 8, 9, 256),
            (80, 8, 10, 256),
            (84, 12, 7, 256),
            (96, 8, 12, 512),
            (112, 16, 7, 512),
            (120, 12, 10, 512),
            (128, 16, 8, 512),
            (144, 16, 9, 512),
            (160, 16, 10, 512),
        ];
    };
}

macro_rules! fft2d_kernels {
    ($(($n:literal, $a:literal, $b:literal, $threads:literal)),* $(,)?) => {
        /// Every size of the standalone 2D FFT in the PTX, smallest first.
        pub const FFT2D_SIZES: &[Fft2dSize] = &[$(Fft2dSize {
            name: concat!("fft2d_", stringify!($n)),
            r2c_kernel: concat!("fft2d_r2c_", stringify!($n)),
            c2r_kernel: concat!("fft2d_c2r_", stringify!($n)),
            rows_kernel: concat!("fft2d_rows_", stringify!($n)),
            columns_kernel: concat!("fft2d_columns_", stringify!($n)),
            rows_r2c_kernel: concat!("fft2d_rows_r2c_", stringify!($n)),
            rows_c2r_kernel: concat!("fft2d_rows_c2r_", stringify!($n)),
            a: $a,
            b: $b,
            threads: $threads,
        }),*];

        #[cfg(target_arch = "nvptx64")]
        mod entry {
            use super::{Fft2dParams, GpuBlock};
            $(
                const _: () = {
                    #[unsafe(export_name = concat!("fft2d_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn kernel(p: Fft2dParams) {
                        let image = crate::prelude::block_idx_x();
                        let mut m = GpuBlock::new(p.twiddles, 0, p.input, 0, p.output);
                        super::fft2d::<$a, $b, _>(&mut m, &p, image);
                    }

                    #[unsafe(export_name = concat!("fft2d_r2c_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn r2c(p: Fft2dParams) {
                        let mut m = GpuBlock::new(p.twiddles, p.input, 0, 0, p.output);
                        super::fft2d_r2c::<$a, $b, _>(&mut m, &p, crate::prelude::block_idx_x());
                    }

                    #[unsafe(export_name = concat!("fft2d_c2r_", stringify!($n)))]
                    pub unsafe extern "ptx-kernel" fn c2r(p: Fft2dParams) {
                        let mut m = GpuBlock::new(p.twiddles, 0, p.input, p.output, 0);
                        super::fft2d_c2r::<$a, $b, _>(&mut m, &p, crate::prelude::block_idx_x());
                    }
                };
            )*
        }
    };
}

square_sizes!(fft2d_kernels);

/// The GPU's [`Block`]: shared memory from the dynamic segment, inputs read through the
/// non-coherent path unless the launch writes them ([`GpuBlock::in_place`]).
#[cfg(target_arch = "nvptx64")]
pub struct GpuBlock {
    smem: u32,
    coherent: bool,
    twiddles: u64,
    real_in: u64,
    complex_in: u64,
    real_out: u64,
    complex_out: u64,
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::{Block, GpuBlock};
    use crate::{complex::Complex32, prelude::*};

    impl GpuBlock {
        /// Generic addresses of the tables and tensors (0 where a program has none).
        #[inline(always)]
        pub fn new(twiddles: u64, real_in: u64, complex_in: u64, real_out: u64, complex_out: u64) -> Self {
            GpuBlock {
                smem: smem_base(),
                coherent: false,
                twiddles: to_global(twiddles),
                real_in: to_global(real_in),
                complex_in: to_global(complex_in),
                real_out: to_global(real_out),
                complex_out: to_global(complex_out),
            }
        }

        /// As [`GpuBlock::new`] for a program whose outputs overwrite its inputs: coherent
        /// loads (`ld.global.nc` requires data that no one writes during the launch).
        #[inline(always)]
        pub fn in_place(twiddles: u64, real_in: u64, complex_in: u64, real_out: u64, complex_out: u64) -> Self {
            GpuBlock { coherent: true, ..Self::new(twiddles, real_in, complex_in, real_out, complex_out) }
        }
    }

    #[inline(always)]
    fn complex([re, im]: [f32; 2]) -> Complex32 {
        Complex32 { re, im }
    }

    impl Block for GpuBlock {
        #[inline(always)]
        fn for_each(&mut self, count: u32, mut f: impl FnMut(&mut Self, u32)) {
            let (mut item, step) = (thread_idx_x(), block_dim_x());
            while item < count {
                f(self, item);
                item += step;
            }
        }

        #[inline(always)]
        fn barrier(&mut self) {
            sync_threads();
        }

        #[inline(always)]
        fn load(&mut self, slot: u32) -> Complex32 {
            complex(ld_shared_f32x2(self.smem + 8 * slot))
        }

        #[inline(always)]
        fn store(&mut self, slot: u32, v: Complex32) {
            st_shared_f32x2(self.smem + 8 * slot, [v.re, v.im]);
        }

        #[inline(always)]
        fn twiddle(&mut self, t: u32) -> Complex32 {
            complex(ldg_nc_f32x2(self.twiddles + 8 * t as u64))
        }

        #[inline(always)]
        fn read_real(&mut self, offset: u64) -> f32 {
            let at = self.real_in + 4 * offset;
            if self.coherent { ld_global_f32(at) } else { ldg_nc_f32(at) }
        }

        #[inline(always)]
        fn read_complex(&mut self, offset: u64) -> Complex32 {
            let at = self.complex_in + 8 * offset;
            complex(if self.coherent { ld_global_f32x2(at) } else { ldg_nc_f32x2(at) })
        }

        #[inline(always)]
        fn write_real(&mut self, offset: u64, v: f32) {
            stg_f32(self.real_out + 4 * offset, v);
        }

        #[inline(always)]
        fn write_complex(&mut self, offset: u64, v: Complex32) {
            stg_f32x2(self.complex_out + 8 * offset, [v.re, v.im]);
        }
    }
}
