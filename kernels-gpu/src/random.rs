//! Counter-based random numbers: element `i` of a fill depends only on `(seed, i)`, so the
//! GPU fills large inputs in place and the host reproduces any element of them.

use bytemuck::{Pod, Zeroable};

/// SplitMix64's output function over `seed + (index + 1) · φ`.
#[inline(always)]
pub const fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A value uniform on the 2^24 multiples of 2^-23 in [-1, 1) (exact in f32).
#[inline(always)]
pub fn uniform(seed: u64, index: u64) -> f32 {
    (mix(seed, index) >> 40) as u32 as f32 * (1.0 / (1u32 << 23) as f32) - 1.0
}

/// The fill's entry point (its parameters: [`FillParams`]).
pub const FILL_KERNEL: &str = "random_uniform_f32";

/// Parameters of the fill kernel: `data[i] = uniform(seed, i)` for `i < len`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct FillParams {
    pub data: u64,
    pub len: u64,
    pub seed: u64,
}

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::{FillParams, uniform};
    use crate::prelude::grid_stride;

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn random_uniform_f32(p: FillParams) {
        let data = p.data as *mut f32;
        let (mut i, stride) = grid_stride();
        while i < p.len {
            unsafe { *data.add(i as usize) = uniform(p.seed, i) };
            i += stride;
        }
    }
}
