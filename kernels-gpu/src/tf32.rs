//! TF32 as the tensor cores read it: the split of an f32 into a TF32 value and a residual
//! that the 3xTF32 kernels of both families multiply (`conv::igemm`, `cgemm::tensor`) and the
//! host's emulations of them repeat.

/// `v` as the tensor cores' TF32 value (rounded to nearest, ties away from zero: the add
/// carries into the kept bits exactly when the dropped ones are at least half) and the
/// residual `v - value` (exact in f32; `mma` reads it truncated to TF32, within 2^-10 of
/// itself, so within 2^-21 of `v`). Two integer instructions and one add, where
/// `cvt.rna.tf32.f32` of both compiles to seven. Non-finite `v` gives a NaN residual (the
/// value of a NaN may wrap to zero; the residual carries the NaN into the products).
#[inline(always)]
pub fn split_tf32(v: f32) -> (u32, u32) {
    let big = v.to_bits().wrapping_add(0x1000) & 0xffff_e000;
    (big, (v - f32::from_bits(big)).to_bits())
}
