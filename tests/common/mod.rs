//! Helpers shared by the CPU tests of the kernels (FFT, FFT convolution, depthwise, tensor cores).
#![allow(dead_code)] // each test binary uses its part

use convkit::harness::reference::{Reference, compare_host};
use kernels_gpu::{complex::Complex32, fft::square::Block, verify::Tolerance};
use std::collections::HashMap;

/// The f64 DFT of `x`, forward (`W = exp(-2πi/n)`) or inverse, unnormalised.
pub fn dft_f64(x: &[Complex32], inverse: bool) -> Vec<(f64, f64)> {
    let n = x.len();
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            x.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, v)| {
                let angle = sign * 2.0 * std::f64::consts::PI * ((i * k) % n) as f64 / n as f64;
                let (c, s) = (angle.cos(), angle.sin());
                (re + v.re as f64 * c - v.im as f64 * s, im + v.re as f64 * s + v.im as f64 * c)
            })
        })
        .collect()
}

/// Who touched a slot since the last barrier.
#[derive(Default)]
struct Access {
    readers: Vec<u32>,
    writer: Option<u32>,
}

/// A block's shared memory on the CPU, every access tracked: a slot read before it was
/// written, touched by two work items between two barriers with one of them writing, or past
/// the end panics (the kernel would read garbage, race or fault there).
pub struct SharedMemory<T> {
    slots: Vec<Option<T>>,
    access: HashMap<u32, Access>,
    /// The work item (thread) whose accesses follow.
    pub item: u32,
}

impl<T: Copy> SharedMemory<T> {
    /// `slots` slots, none written yet.
    pub fn new(slots: usize) -> Self {
        SharedMemory { slots: vec![None; slots], access: HashMap::new(), item: 0 }
    }

    pub fn barrier(&mut self) {
        self.access.clear();
    }

    pub fn load(&mut self, slot: u32) -> T {
        self.touch(slot, false);
        self.slots[slot as usize].unwrap_or_else(|| panic!("slot {slot} read before it was written"))
    }

    pub fn store(&mut self, slot: u32, v: T) {
        self.touch(slot, true);
        self.slots[slot as usize] = Some(v);
    }

    fn touch(&mut self, slot: u32, write: bool) {
        assert!((slot as usize) < self.slots.len(), "slot {slot} is past the block's shared memory");
        let item = self.item;
        let a = self.access.entry(slot).or_default();
        if let Some(w) = a.writer {
            assert_eq!(w, item, "slot {slot}: item {item} touches what item {w} wrote in the same phase");
        }
        if write {
            assert!(
                a.readers.iter().all(|&r| r == item),
                "slot {slot}: item {item} writes what other items read in the same phase"
            );
            a.writer = Some(item);
        } else if !a.readers.contains(&item) {
            a.readers.push(item);
        }
    }
}

/// `y` against the f64 reference within `bound`, element by element; fails naming `what`, how
/// many outputs broke the bound and the first. Returns the worst error as a fraction of it.
pub fn assert_within_bound(y: &[f32], truth: &Reference, bound: Tolerance, what: &str) -> f64 {
    let stats = compare_host(y, truth, bound);
    assert!(
        stats.passed(),
        "{what}: {} outputs beyond the bound (worst {:.3} of it, first at {})",
        stats.violations,
        stats.worst_ratio(),
        stats.first_violation
    );
    stats.worst_ratio()
}

/// Marks output `offset` written; written twice panics.
pub fn mark_written(written: &mut [bool], offset: u64) {
    assert!(!written[offset as usize], "output {offset} written twice");
    written[offset as usize] = true;
}

/// The CPU's [`Block`]: work items run one after another; shared memory is tracked
/// ([`SharedMemory`]), and so are writes of the outputs (twice panics).
pub struct CpuBlock<'a> {
    smem: SharedMemory<Complex32>,
    pub twiddles: &'a [Complex32],
    pub real_in: &'a [f32],
    pub complex_in: &'a [Complex32],
    pub real_out: &'a mut [f32],
    pub complex_out: &'a mut [Complex32],
    /// Which outputs were written (both kinds): none may be written twice.
    pub written: &'a mut [bool],
}

impl<'a> CpuBlock<'a> {
    /// A block with `slots` of shared memory, none written yet.
    pub fn new(slots: usize, twiddles: &'a [Complex32], written: &'a mut [bool]) -> Self {
        CpuBlock {
            smem: SharedMemory::new(slots),
            twiddles,
            real_in: &[],
            complex_in: &[],
            real_out: &mut [],
            complex_out: &mut [],
            written,
        }
    }
}

impl Block for CpuBlock<'_> {
    fn for_each(&mut self, count: u32, mut f: impl FnMut(&mut Self, u32)) {
        for item in 0..count {
            self.smem.item = item;
            f(self, item);
        }
    }

    fn barrier(&mut self) {
        self.smem.barrier();
    }

    fn load(&mut self, slot: u32) -> Complex32 {
        self.smem.load(slot)
    }

    fn store(&mut self, slot: u32, v: Complex32) {
        self.smem.store(slot, v);
    }

    fn twiddle(&mut self, t: u32) -> Complex32 {
        self.twiddles[t as usize]
    }

    fn read_real(&mut self, offset: u64) -> f32 {
        self.real_in[offset as usize]
    }

    fn read_complex(&mut self, offset: u64) -> Complex32 {
        self.complex_in[offset as usize]
    }

    fn write_real(&mut self, offset: u64, v: f32) {
        mark_written(self.written, offset);
        self.real_out[offset as usize] = v;
    }

    fn write_complex(&mut self, offset: u64, v: Complex32) {
        mark_written(self.written, offset);
        self.complex_out[offset as usize] = v;
    }
}

/// Lane `4g + t`'s elements of the PTX ISA's m16n8k8 fragments: A (row, k), B (k, column),
/// accumulator (row, column).
pub fn a_element(lane: u32, e: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)][e as usize]
}

pub fn b_element(lane: u32, e: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    [(t, g), (t + 4, g)][e as usize]
}

pub fn c_element(lane: u32, e: u32) -> (u32, u32) {
    let (g, t) = (lane / 4, lane % 4);
    [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)][e as usize]
}

/// `d = a · b + c` over one warp's fragments (exact products, f64 sums: the CPU model checks
/// positions, not rounding).
pub fn mma(a: &[[f32; 4]; 32], b: &[[f32; 2]; 32], c: &mut [[f64; 4]; 32]) {
    let mut am = [[0.0f64; 8]; 16];
    let mut bm = [[0.0f64; 8]; 8];
    for lane in 0..32 {
        for e in 0..4 {
            let (r, k) = a_element(lane, e);
            am[r as usize][k as usize] = a[lane as usize][e as usize] as f64;
        }
        for e in 0..2 {
            let (k, n) = b_element(lane, e);
            bm[k as usize][n as usize] = b[lane as usize][e as usize] as f64;
        }
    }
    for lane in 0..32 {
        for e in 0..4 {
            let (r, n) = c_element(lane, e);
            c[lane as usize][e as usize] += (0..8).map(|k| am[r as usize][k] * bm[k][n as usize]).sum::<f64>();
        }
    }
}
