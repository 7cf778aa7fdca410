//! The ground truth: the f64 reference convolution on the CPU (CI's tests, `check` on small
//! shapes) and on the GPU (every shape), the per-element comparison against it, and the
//! random inputs both sides draw.

use crate::{
    Conv2d, Error, Gpu, Result, TensorLayout,
    conv::epilogue::{Activation, Epilogue},
    error::Context,
    gpu::grid_stride_config,
};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use kernels_gpu::{
    random::uniform,
    verify::{COMPARE_KERNEL, CompareParams, CompareStats, REFERENCE_KERNEL, RefConvParams, Tolerance},
};
use std::sync::Arc;

/// Reference outputs: the value Σ x·w and the magnitude Σ |x·w| of each output, in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub value: Vec<f64>,
    pub magnitude: Vec<f64>,
}

/// The CPU reference in the layer's layout. Each output row is accumulated tap by tap (a
/// contiguous multiply-add over the row of an NCHW copy), taps in (c, r, s) order, as the GPU
/// reference sums them: the two agree to the bit. Padding contributes nothing.
pub fn cpu_reference(conv: &Conv2d, x: &[f32], w: &[f32]) -> Result<Reference> {
    let g = conv.geometry()?;
    for (buffer, expected, got) in [("x", g.x_len, x.len()), ("w", g.w_len, w.len())] {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    if conv.layout == TensorLayout::Nhwc {
        // NHWC / KRSC are NCHW / KCRS with the channel moved last: move it back and forth.
        let nchw = Conv2d { layout: TensorLayout::Nchw, ..conv.clone() };
        let x = channels_first(x, conv.n, conv.c, conv.h * conv.w);
        let w = channels_first(w, conv.k, g.c_per_group, conv.r * conv.s);
        let r = cpu_reference(&nchw, &x, &w)?;
        let back = |v: &[f64]| channels_last(v, conv.n, conv.k, g.out_h * g.out_w);
        return Ok(Reference { value: back(&r.value), magnitude: back(&r.magnitude) });
    }
    let (oh_n, ow_n) = (g.out_h, g.out_w);
    let [pad_h, pad_w] = conv.pad.map(|p| p as isize);
    let [stride_h, stride_w] = conv.stride;
    let [dil_h, dil_w] = conv.dilation;
    let mut value = vec![0.0f64; g.y_len];
    let mut magnitude = vec![0.0f64; g.y_len];
    for n in 0..conv.n {
        for k in 0..conv.k {
            let group = k / g.k_per_group;
            let plane_out = (n * conv.k + k) * oh_n * ow_n..(n * conv.k + k + 1) * oh_n * ow_n;
            let (out, mag) = (&mut value[plane_out.clone()], &mut magnitude[plane_out]);
            for cg in 0..g.c_per_group {
                let c = group * g.c_per_group + cg;
                let plane = &x[(n * conv.c + c) * conv.h * conv.w..][..conv.h * conv.w];
                for r in 0..conv.r {
                    for s in 0..conv.s {
                        let weight = w[((k * g.c_per_group + cg) * conv.r + r) * conv.s + s] as f64;
                        for oh in 0..oh_n {
                            let ih = (oh * stride_h + r * dil_h) as isize - pad_h;
                            if ih < 0 || ih >= conv.h as isize {
                                continue;
                            }
                            let row = &plane[ih as usize * conv.w..][..conv.w];
                            for ow in 0..ow_n {
                                let iw = (ow * stride_w + s * dil_w) as isize - pad_w;
                                if iw >= 0 && iw < conv.w as isize {
                                    let product = row[iw as usize] as f64 * weight;
                                    out[oh * ow_n + ow] += product;
                                    mag[oh * ow_n + ow] += product.abs();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Reference { value, magnitude })
}

/// `[outer][inner][channels]` to `[outer][channels][inner]`.
pub fn channels_first<T: Copy>(v: &[T], outer: usize, channels: usize, inner: usize) -> Vec<T> {
    swap_inner_axes(v, outer, inner, channels)
}

/// `[outer][channels][inner]` to `[outer][inner][channels]`.
pub fn channels_last<T: Copy>(v: &[T], outer: usize, channels: usize, inner: usize) -> Vec<T> {
    swap_inner_axes(v, outer, channels, inner)
}

/// `[outer][a][b]` to `[outer][b][a]`.
fn swap_inner_axes<T: Copy>(v: &[T], outer: usize, a: usize, b: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for o in 0..outer {
        for j in 0..b {
            out.extend((0..a).map(|i| v[(o * a + i) * b + j]));
        }
    }
    out
}

/// The reference kernel's parameters for `conv` (addresses filled in at launch).
pub fn reference_params(conv: &Conv2d) -> Result<RefConvParams> {
    let g = conv.geometry()?;
    let u = |v: usize| v as u32; // geometry() bounds every extent by i32::MAX
    Ok(RefConvParams {
        x: 0,
        w: 0,
        value: 0,
        magnitude: 0,
        n: u(conv.n),
        c: u(conv.c),
        in_h: u(conv.h),
        in_w: u(conv.w),
        k: u(conv.k),
        filter_r: u(conv.r),
        filter_s: u(conv.s),
        out_h: u(g.out_h),
        out_w: u(g.out_w),
        pad_h: u(conv.pad[0]),
        pad_w: u(conv.pad[1]),
        stride_h: u(conv.stride[0]),
        stride_w: u(conv.stride[1]),
        dil_h: u(conv.dilation[0]),
        dil_w: u(conv.dilation[1]),
        groups: u(conv.groups),
        c_per_group: u(g.c_per_group),
        k_per_group: u(g.k_per_group),
        channels_last: (conv.layout == TensorLayout::Nhwc) as u32,
        _pad: 0,
    })
}

/// Reference outputs on the GPU.
pub struct GpuReference {
    pub value: CudaSlice<f64>,
    pub magnitude: CudaSlice<f64>,
}

/// The f64 reference of `conv` on the GPU (the kernel runs [`RefConvParams::output`]).
pub fn gpu_reference(
    gpu: &Gpu,
    stream: &CudaStream,
    conv: &Conv2d,
    x: &impl DevicePtr<f32>,
    w: &impl DevicePtr<f32>,
) -> Result<GpuReference> {
    let g = conv.geometry()?;
    for (buffer, expected, got) in [("x", g.x_len, x.len()), ("w", g.w_len, w.len())] {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    let mut value = gpu.alloc::<f64>(g.y_len)?;
    let mut magnitude = gpu.alloc::<f64>(g.y_len)?;
    let mut p = reference_params(conv)?;
    {
        let (x_ptr, _xs) = x.device_ptr(stream);
        let (w_ptr, _ws) = w.device_ptr(stream);
        let (v_ptr, _vs) = value.device_ptr_mut(stream);
        let (m_ptr, _ms) = magnitude.device_ptr_mut(stream);
        (p.x, p.w, p.value, p.magnitude) = (x_ptr, w_ptr, v_ptr, m_ptr);
        // Safety: x and w hold the shape's elements (checked above), value and magnitude
        // were allocated with one f64 per output.
        unsafe { gpu.launch(stream, REFERENCE_KERNEL, grid_stride_config(gpu, p.output_len()), p) }?;
    }
    gpu.check_deferred()?;
    Ok(GpuReference { value, magnitude })
}

/// Compares `ours` with the reference element by element on the GPU.
pub fn compare(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    ours: &impl DevicePtr<f32>,
    reference: &GpuReference,
    bound: Tolerance,
) -> Result<CompareStats> {
    let len = reference.value.len();
    if ours.len() != len {
        return Err(Error::BufferSize { buffer: "ours", expected: len, got: ours.len() });
    }
    let stats_init = bytemuck::cast::<CompareStats, [u64; 5]>(CompareStats::EMPTY);
    let mut stats = gpu.alloc::<u64>(5)?;
    stream.memcpy_htod(&stats_init, &mut stats).during("cuMemcpyHtoD")?;
    {
        let (o_ptr, _os) = ours.device_ptr(stream);
        let (v_ptr, _vs) = reference.value.device_ptr(stream);
        let (m_ptr, _ms) = reference.magnitude.device_ptr(stream);
        let (s_ptr, _ss) = stats.device_ptr_mut(stream);
        let p = CompareParams { ours: o_ptr, value: v_ptr, magnitude: m_ptr, stats: s_ptr, len: len as u64, bound };
        // Safety: all three arrays hold `len` elements; `stats` holds one CompareStats.
        unsafe { gpu.launch(stream, COMPARE_KERNEL, grid_stride_config(gpu, len as u64), p) }?;
    }
    let raw: Vec<u64> = stream.clone_dtoh(&stats).during("cuMemcpyDtoH")?;
    gpu.check_deferred()?;
    Ok(bytemuck::cast::<[u64; 5], CompareStats>(raw.try_into().expect("five words")))
}

/// The same comparison on the host.
pub fn compare_host(ours: &[f32], reference: &Reference, bound: Tolerance) -> CompareStats {
    assert_eq!(ours.len(), reference.value.len(), "compare_host compares equal-length outputs");
    let mut stats = CompareStats::EMPTY;
    for (i, (&o, (&v, &m))) in ours.iter().zip(reference.value.iter().zip(&reference.magnitude)).enumerate() {
        stats.add(i as u64, o, v, m, &bound);
    }
    stats
}

/// The scale of FFT convolution's rounding error (see [`Tolerance::fft`]): the RMS of `x`
/// times the RMS over the `filters` filters in `w` of their L2 norms.
pub fn fft_error_scale(x: &[f32], w: &[f32], filters: usize) -> f64 {
    let mean_square = |v: &[f32]| v.iter().map(|&e| e as f64 * e as f64).sum::<f64>() / v.len().max(1) as f64;
    (mean_square(x) * mean_square(w) * (w.len() / filters.max(1)) as f64).sqrt()
}

/// `len` values uniform in [-1, 1): element `i` is `uniform(seed, i)`.
pub fn host_uniform(seed: u64, len: usize) -> Vec<f32> {
    (0..len as u64).map(|i| uniform(seed, i)).collect()
}

/// An activation in f64, the form the bound compares against: SiLU `v / (1 + e^-v)`, GELU-tanh
/// `0.5 v (1 + tanh(√(2/π) (v + 0.044715 v³)))` written as `v / (1 + e^-2u)` (the same
/// function; `-∞` gives NaN in both, as `v · sigmoid(v)` does).
pub fn activation_f64(act: Activation, v: f64) -> f64 {
    let relu = if v < 0.0 { 0.0 } else { v };
    match act {
        Activation::Identity => v,
        Activation::Relu => relu,
        // Not `min`, which would turn NaN into 6: NaN passes through, as in the kernels.
        Activation::Relu6 => {
            if relu > 6.0 {
                6.0
            } else {
                relu
            }
        }
        Activation::Silu => v / (1.0 + (-v).exp()),
        Activation::GeluTanh => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            v / (1.0 + (-2.0 * u).exp())
        }
    }
}

/// The reference of `conv` followed by `epilogue` in f64, in the output's layout (shuffled
/// where the epilogue shuffles): `act(value + bias[k]) + residual` with the magnitude
/// `slope · (magnitude + |bias[k]|) + |residual|`, `slope` the activation's largest (an error
/// in its input grows by at most that much; the rounding of the two additions and of the
/// activation itself stays within the f32 bound's own slack of `8 · 2^-23` per magnitude).
pub fn with_epilogue(
    conv: &Conv2d,
    epilogue: &Epilogue,
    plain: &Reference,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) -> Result<Reference> {
    let g = conv.geometry()?;
    let plane = g.out_h * g.out_w;
    let slope = epilogue.activation.max_slope();
    // Element steps of a channel and of a pixel in the output.
    let (channel_step, pixel_step) = match conv.layout {
        TensorLayout::Nchw => (plane, 1),
        TensorLayout::Nhwc => (1, conv.k),
    };
    let mut out = Reference { value: vec![0.0; g.y_len], magnitude: vec![0.0; g.y_len] };
    for image in 0..conv.n {
        for k in 0..conv.k {
            let b = bias.map_or(0.0, |b| b[k] as f64);
            let from = image * conv.k * plane + k * channel_step;
            let to = image * conv.k * plane + epilogue.out_channel(conv, &g, k) * channel_step;
            for i in 0..plane {
                let (from, to) = (from + i * pixel_step, to + i * pixel_step);
                let r = residual.map_or(0.0, |r| r[to] as f64);
                out.value[to] = activation_f64(epilogue.activation, plain.value[from] + b) + r;
                out.magnitude[to] = slope * (plain.magnitude[from] + b.abs()) + r.abs();
            }
        }
    }
    Ok(out)
}

impl GpuReference {
    /// The reference on the host.
    pub fn download(&self, gpu: &Gpu) -> Result<Reference> {
        Ok(Reference { value: gpu.download(&self.value)?, magnitude: gpu.download(&self.magnitude)? })
    }

    /// `reference` on the GPU.
    pub fn upload(gpu: &Gpu, reference: &Reference) -> Result<Self> {
        Ok(GpuReference { value: gpu.upload(&reference.value)?, magnitude: gpu.upload(&reference.magnitude)? })
    }
}
