//! The fused epilogue: what happens to an output between its accumulator and memory. A bias
//! per output channel, an activation, a residual add (`y = act(acc + bias[k]) + residual`),
//! and where each output channel is stored: in the groups' order, or shuffled across groups
//! (ShuffleNet's channel shuffle, with no pass of its own). Every direct-style kernel (direct,
//! depthwise, implicit GEMM) applies it in registers before its store; [`EPILOGUE_KERNEL`]
//! applies it as a pass of its own after algorithms that cannot fuse it (the FFT paths, cuDNN).
//!
//! Everything here compiles for the host too: the host's tests run [`Activation::apply`] and
//! [`EpilogueParams::out_channel`], the very code the kernels run.

use crate::MagicDiv;
use bytemuck::{Pod, Zeroable};

/// An activation applied after the bias. NaN passes through every one of them.
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activation {
    #[default]
    Identity = 0,
    /// `max(v, 0)`.
    Relu = 1,
    /// `min(max(v, 0), 6)` (MobileNet).
    Relu6 = 2,
    /// `v · sigmoid(v)` (EfficientNet's swish).
    Silu = 3,
    /// `0.5 v (1 + tanh(√(2/π) (v + 0.044715 v³)))`, PyTorch's `gelu(approximate="tanh")`.
    GeluTanh = 4,
}

/// `√(2/π)`, the GELU approximation's scale.
const GELU_SCALE: f32 = 0.797_884_6;
/// The GELU approximation's cubic coefficient.
const GELU_CUBIC: f32 = 0.044_715;
/// `1 / ln 2`: `e^v = 2^(v / ln 2)`.
const LOG2_E: f32 = core::f32::consts::LOG2_E;

impl Activation {
    pub const ALL: [Activation; 5] =
        [Activation::Identity, Activation::Relu, Activation::Relu6, Activation::Silu, Activation::GeluTanh];

    pub const fn name(self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Relu => "relu",
            Activation::Relu6 => "relu6",
            Activation::Silu => "silu",
            Activation::GeluTanh => "gelu-tanh",
        }
    }

    /// The activation a kernel parameter names (unknown values: identity).
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Self {
        match v {
            1 => Activation::Relu,
            2 => Activation::Relu6,
            3 => Activation::Silu,
            4 => Activation::GeluTanh,
            _ => Activation::Identity,
        }
    }

    /// The largest slope of the function: an error in its input grows by at most this much
    /// (SiLU's is 1.0998, GELU-tanh's 1.1289).
    pub const fn max_slope(self) -> f64 {
        match self {
            Activation::Identity | Activation::Relu | Activation::Relu6 => 1.0,
            Activation::Silu => 1.1,
            Activation::GeluTanh => 1.13,
        }
    }

    /// The activation in f32. SiLU and GELU-tanh are both `v · sigmoid(z)` (GELU-tanh's
    /// `0.5 (1 + tanh u)` is `sigmoid(2u)`): no cancellation near 0, an error of a few units
    /// of `2^-24 |v|` with the GPU's `ex2.approx` and `rcp.approx`, and `-∞` gives NaN as
    /// `v · sigmoid(v)` does.
    #[inline(always)]
    pub fn apply(self, v: f32) -> f32 {
        let gelu = self == Activation::GeluTanh;
        if self.class() == CLAMP {
            activate::<CLAMP>(v, self.bounds(), gelu)
        } else {
            activate::<SMOOTH>(v, self.bounds(), gelu)
        }
    }

    /// The store mode whose code computes this activation: [`CLAMP`] or [`SMOOTH`].
    #[inline(always)]
    pub const fn class(self) -> u32 {
        match self {
            Activation::Identity | Activation::Relu | Activation::Relu6 => CLAMP,
            Activation::Silu | Activation::GeluTanh => SMOOTH,
        }
    }

    /// A clamping activation's `[low, high]` (the smooth ones': unbounded, unused).
    #[inline(always)]
    pub const fn bounds(self) -> [f32; 2] {
        match self {
            Activation::Relu => [0.0, f32::INFINITY],
            Activation::Relu6 => [0.0, 6.0],
            _ => [f32::NEG_INFINITY, f32::INFINITY],
        }
    }
}

/// The code of the activations of class `CLASS` (a compile-time constant), told which one by
/// values a kernel reads from its parameters: a kernel thus holds one copy of its store code
/// per class, not per activation (six copies in a persistent tensor-core tile took up to 16
/// registers more than one), and the bounds stay in the constant bank, not in registers held
/// across the kernel (selected from the activation in the kernel, LLVM hoisted them: 46 more
/// registers).
#[inline(always)]
pub fn activate<const CLASS: u32>(v: f32, [low, high]: [f32; 2], gelu: bool) -> f32 {
    if CLASS == CLAMP {
        crate::clamp_nan(v, low, high)
    } else {
        let z = if gelu { 2.0 * GELU_SCALE * v * (1.0 + GELU_CUBIC * v * v) } else { v };
        v * crate::recip(1.0 + crate::exp2(-z * LOG2_E))
    }
}

/// The store mode of the clamping activations: identity, ReLU and ReLU6, `low ≤ v ≤ high`.
pub const CLAMP: u32 = 0;
/// The store mode of the smooth activations: SiLU and GELU-tanh, `v · sigmoid(z)`. Their code
/// is long (an exponential and a reciprocal): kernels store in rolled loops (see `direct.rs`).
pub const SMOOTH: u32 = 1;

/// The store mode of an epilogue with nothing to apply (see [`EpilogueParams::mode`]).
pub const PLAIN: u32 = u32::MAX;

/// `$body` with `$mode` a compile-time constant: the epilogue's [`EpilogueParams::mode`]. A
/// kernel's store code is thus compiled once per class of activation ([`CLAMP`], [`SMOOTH`])
/// and once [`PLAIN`], each copy free of a per-output `match` (with one, the depthwise kernel,
/// issue-bound, took 16-37% longer with bias and ReLU).
#[macro_export]
macro_rules! by_mode {
    ($epilogue:expr, $mode:ident => $body:expr) => {
        match $epilogue.mode() {
            $crate::conv::epilogue::CLAMP => {
                const $mode: u32 = $crate::conv::epilogue::CLAMP;
                $body
            }
            $crate::conv::epilogue::SMOOTH => {
                const $mode: u32 = $crate::conv::epilogue::SMOOTH;
                $body
            }
            _ => {
                const $mode: u32 = $crate::conv::epilogue::PLAIN;
                $body
            }
        }
    };
}

/// The three entry points of a direct-style variant `$name`, one per store mode: `$name`
/// ([`PLAIN`]), `$name_clamp` ([`CLAMP`]) and `$name_smooth` ([`SMOOTH`]), each running
/// `$body::<$generic..., MODE>`. Apart, so that no mode's code costs another registers: with
/// the clamp and smooth stores in one kernel, rows_k8_p4 held 113 registers, each alone 78-80.
/// (`unsafe` for bodies that are `unsafe fn`; others take it as unused.)
#[macro_export]
macro_rules! mode_entry_points {
    ($name:ident, $params:ty, $($body:ident)::+, [$($generic:tt)*]) => {
        #[unsafe(no_mangle)]
        #[allow(unused_unsafe)]
        pub unsafe extern "ptx-kernel" fn $name(p: $params) {
            unsafe { $($body)::+::<$($generic)*, { $crate::conv::epilogue::PLAIN }>(&p) }
        }
        const _: () = {
            #[unsafe(export_name = concat!(stringify!($name), "_clamp"))]
            #[allow(unused_unsafe)]
            unsafe extern "ptx-kernel" fn clamp(p: $params) {
                unsafe { $($body)::+::<$($generic)*, { $crate::conv::epilogue::CLAMP }>(&p) }
            }
            #[unsafe(export_name = concat!(stringify!($name), "_smooth"))]
            #[allow(unused_unsafe)]
            unsafe extern "ptx-kernel" fn smooth(p: $params) {
                unsafe { $($body)::+::<$($generic)*, { $crate::conv::epilogue::SMOOTH }>(&p) }
            }
        };
    };
}

/// A variant's entry-point names by store mode, as [`mode_entry_points`] exports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeEntries {
    pub plain: &'static str,
    pub clamp: &'static str,
    pub smooth: &'static str,
}

impl ModeEntries {
    /// The entry point that stores in `mode` ([`EpilogueParams::mode`]).
    pub const fn of_mode(&self, mode: u32) -> &'static str {
        self.all()[Self::slot(mode)]
    }

    /// The entry points, plain, clamp, smooth.
    pub const fn all(&self) -> [&'static str; 3] {
        [self.plain, self.clamp, self.smooth]
    }

    /// Where `mode`'s entry point is in [`Self::all`].
    pub const fn slot(mode: u32) -> usize {
        match mode {
            CLAMP => 1,
            SMOOTH => 2,
            _ => 0,
        }
    }
}

/// [`ModeEntries`] of variant `$name`.
#[macro_export]
macro_rules! mode_entries {
    ($name:ident) => {
        $crate::conv::epilogue::ModeEntries {
            plain: stringify!($name),
            clamp: concat!(stringify!($name), "_clamp"),
            smooth: concat!(stringify!($name), "_smooth"),
        }
    };
}

/// The epilogue of one launch, inside each direct-style kernel's parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct EpilogueParams {
    /// Device address of `K` biases, by output channel in the groups' order
    /// (`group * k_per_group + k`); 0: none.
    pub bias: u64,
    /// Device address of a tensor of the output's shape and layout, added last; 0: none.
    pub residual: u64,
    /// An [`Activation`] as `u32`.
    pub activation: u32,
    /// Output channel `k` of group `g` is stored as channel `g · group_step + k ·
    /// channel_step` of its image: `(k_per_group, 1)` keeps the groups' order, `(1, groups)`
    /// shuffles them (channel `k · groups + g`).
    pub group_step: u32,
    pub channel_step: u32,
    /// The activation's [`Activation::bounds`] as `f32` bits (the struct stays `Eq`).
    pub low: u32,
    pub high: u32,
    /// Keeps the struct free of implicit padding.
    pub _pad: u32,
    /// Divides an output channel by `k_per_group`: (group, channel in group).
    pub k_per_group: MagicDiv,
}

impl EpilogueParams {
    /// No bias, no activation, no residual, the groups' order.
    pub fn plain(k_per_group: u32) -> Self {
        let k_per_group = MagicDiv::new(k_per_group.max(1)).expect("non-zero");
        EpilogueParams {
            bias: 0,
            residual: 0,
            activation: 0,
            group_step: k_per_group.divisor,
            channel_step: 1,
            low: 0,
            high: 0,
            _pad: 0,
            k_per_group,
        }
        .with_activation(Activation::Identity)
    }

    /// These parameters with `activation` (and its bounds).
    pub fn with_activation(self, activation: Activation) -> Self {
        let [low, high] = activation.bounds();
        EpilogueParams { activation: activation as u32, low: low.to_bits(), high: high.to_bits(), ..self }
    }

    /// Whether stores go to the output as the accumulators hold it (nothing to apply).
    #[inline(always)]
    pub fn is_plain(&self) -> bool {
        self.bias == 0 && self.residual == 0 && self.activation == Activation::Identity as u32
    }

    /// The channel of its image where output channel `k` (in the groups' order) is stored.
    #[inline(always)]
    pub fn out_channel(&self, k: u32) -> u32 {
        let (group, k_in_group) = self.k_per_group.div_rem(k);
        group * self.group_step + k_in_group * self.channel_step
    }

    /// `act(v + bias) + residual`: the bias and residual as loaded (0 where there are none).
    #[inline(always)]
    pub fn apply(&self, v: f32, bias: f32, residual: f32) -> f32 {
        if self.mode() == SMOOTH {
            self.apply_in::<SMOOTH>(v, bias, residual)
        } else {
            self.apply_in::<CLAMP>(v, bias, residual)
        }
    }

    /// [`Self::apply`] in a store of mode `MODE` (a compile-time constant, this one's
    /// [`Self::mode`]; not [`PLAIN`]).
    #[inline(always)]
    pub fn apply_in<const MODE: u32>(&self, v: f32, bias: f32, residual: f32) -> f32 {
        self.activate_in::<MODE>(v + bias) + residual
    }

    /// The activation alone in a store of mode `MODE` (not [`PLAIN`]): for kernels that add
    /// the bias where their sums are and apply the rest at the store.
    #[inline(always)]
    pub fn activate_in<const MODE: u32>(&self, x: f32) -> f32 {
        let bounds = [f32::from_bits(self.low), f32::from_bits(self.high)];
        activate::<MODE>(x, bounds, self.activation == Activation::GeluTanh as u32)
    }

    /// Whether every output channel is stored where it is (the groups' order, or a shuffle
    /// that moves nothing: one group, or one channel per group).
    #[inline(always)]
    pub fn keeps_order(&self) -> bool {
        self.channel_step == 1 || self.k_per_group.divisor == 1
    }

    /// [`PLAIN`] where there is nothing to apply and nothing to move, else the activation's
    /// [`Activation::class`].
    #[inline(always)]
    pub fn mode(&self) -> u32 {
        if self.is_plain() && self.keeps_order() { PLAIN } else { Activation::from_u32(self.activation).class() }
    }

    /// [`Self::out_channel`] in a store of mode `MODE` (a compile-time constant): `k` itself in
    /// a [`PLAIN`] one, which thus stores as a kernel without an epilogue does.
    #[inline(always)]
    pub fn stored_channel<const MODE: u32>(&self, k: u32) -> u32 {
        if MODE == PLAIN { k } else { self.out_channel(k) }
    }
}

/// Entry point of the stand-alone epilogue pass ([`EpiloguePassParams`]).
pub const EPILOGUE_KERNEL: &str = "epilogue_pass";

/// Parameters of [`EPILOGUE_KERNEL`]: reads a convolution's output in the groups' order and
/// writes it through the epilogue. A block walks output planes (NCHW) or pixels (NHWC)
/// `gridDim.x` apart, its threads their elements. In place (`src == dst`) when the epilogue
/// keeps the order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct EpiloguePassParams {
    pub src: u64,
    pub dst: u64,
    /// Output planes, `n * K` (NCHW), or pixels, `n * out_h * out_w` (NHWC).
    pub planes: u64,
    /// Elements per output plane (`out_h * out_w`; NHWC: unused).
    pub plane: u32,
    /// Output channels `K`.
    pub channels: u32,
    /// 1: the output is NHWC (a pixel's channels adjacent), 0: NCHW.
    pub channels_last: u32,
    /// Keeps the struct free of implicit padding.
    pub _pad: u32,
    pub epilogue: EpilogueParams,
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::{EpilogueParams, EpiloguePassParams, PLAIN};
    use crate::prelude::*;

    impl EpilogueParams {
        /// `v` through the epilogue of mode `MODE` (this one's [`EpilogueParams::mode`], a
        /// compile-time constant: [`by_mode`]) for output element `offset`, whose residual is
        /// read only where `live` (the element exists).
        #[inline(always)]
        pub fn finish_as<const MODE: u32>(&self, v: f32, bias: f32, offset: u64, live: bool) -> f32 {
            if MODE == PLAIN {
                return v;
            }
            let residual = ldg_nc_f32_if(live && self.residual != 0, to_global(self.residual) + 4 * offset);
            self.apply_in::<MODE>(v, bias, residual)
        }

        /// Four adjacent outputs from `offset` on (a multiple of 4), with their biases: four
        /// pixels of one channel (NCHW, one bias four times) or four channels of one pixel (NHWC).
        #[inline(always)]
        pub fn finish4_as<const MODE: u32>(&self, v: [f32; 4], bias: [f32; 4], offset: u64) -> [f32; 4] {
            if MODE == PLAIN {
                return v;
            }
            let residual = ldg_nc_f32x4_if(self.residual != 0, to_global(self.residual) + 4 * offset);
            [0, 1, 2, 3].map(|i| self.apply_in::<MODE>(v[i], bias[i], residual[i]))
        }

        /// The bias of output channel `k`, 0 without one.
        #[inline(always)]
        pub fn load_bias(&self, k: u32) -> f32 {
            ldg_nc_f32_if(self.bias != 0, to_global(self.bias) + 4 * k as u64)
        }

        /// `v` through the epilogue, its mode read at run time (the stand-alone pass), for
        /// output element `offset` (where it is stored).
        #[inline(always)]
        pub fn finish(&self, v: f32, bias: f32, offset: u64) -> f32 {
            if self.is_plain() {
                return v;
            }
            let residual = if self.residual != 0 { ldg_nc_f32(to_global(self.residual) + 4 * offset) } else { 0.0 };
            self.apply(v, bias, residual)
        }
    }

    /// A block per output plane at a time: its channel and destination once, then the
    /// plane's elements one per thread (NHWC: a block per pixel, a thread per channel).
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn epilogue_pass(p: EpiloguePassParams) {
        let (src, dst) = (to_global(p.src), to_global(p.dst));
        let (channels, plane) = (p.channels as u64, p.plane as u64);
        let mut q = block_idx_x() as u64;
        if p.channels_last != 0 {
            while q < p.planes {
                let mut k = thread_idx_x();
                while k < p.channels {
                    let (from, to) = (q * channels + k as u64, q * channels + p.epilogue.out_channel(k) as u64);
                    let v = ld_global_f32(src + 4 * from);
                    stg_f32(dst + 4 * to, p.epilogue.finish(v, p.epilogue.load_bias(k), to));
                    k += block_dim_x();
                }
                q += grid_dim_x() as u64;
            }
            return;
        }
        while q < p.planes {
            let (image, k) = (q / channels, (q % channels) as u32);
            let to = (image * channels + p.epilogue.out_channel(k) as u64) * plane;
            let bias = p.epilogue.load_bias(k);
            let mut i = thread_idx_x() as u64;
            while i < plane {
                let v = ld_global_f32(src + 4 * (q * plane + i));
                stg_f32(dst + 4 * (to + i), p.epilogue.finish(v, bias, to + i));
                i += block_dim_x() as u64;
            }
            q += grid_dim_x() as u64;
        }
    }
}
