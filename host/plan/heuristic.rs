//! The default decision: rules fitted to the H200 measurements in `benches/results/` (the
//! `default` and `large-kernel` suites; `benches/NOTES.md`, "Planner"), with no GPU work.
//!
//! - Channels-last (NHWC) layers: the depthwise kernel's NHWC program where it applies
//!   (depthwise 3x3, 5x5 and 7x7, stride 1 or 2, multiplier 1) except 3x3 at stride 2 (cuDNN's
//!   NHWC depthwise engine ran MobileNetV2's four stride-2 layers 6-21% faster than ours, at
//!   73-85% of HBM bandwidth on the large ones; `benches/NOTES.md`, "Depthwise v5"); grouped
//!   layers of fewer than [`CUDNN_MIN_CHANNELS`] channels per group to the tensor-core
//!   kernel's NHWC tiles, 3xTF32 in the exact class (1.2-5.0x cuDNN's exact best on the
//!   `grouped-nhwc` suite), TF32 in the fast class except for groups whose input and output
//!   widths are both powers of two, where cuDNN's grouped TF32 engines run (ResNeXt's 4 to 32
//!   wide groups at N = 32: ours 0.49-0.99x of them at 26f9b09, spatial tiles included;
//!   RegNetY's 24 and 56, ShuffleNet's 12/48 and 20/80: 0.95-2.54x, 2 of 22 below 1x); the
//!   rest to cuDNN (its heuristic's first choice).
//! - Filters of at least [`FFT_MIN_TAPS`] taps go to an FFT convolution: the fused
//!   whole-image kernel (depthwise layers) or the tiled one at one of its tile sizes, whichever
//!   the shared cost model ([`fft_gemm::transforms_s`]) estimates faster. Measured: 3.9-61x
//!   faster than cuDNN's best and 1.5-42x than the direct kernel.
//! - Depthwise layers that the depthwise kernel covers (3x3 ... 9x9, stride 1 or 2, multiplier
//!   1 or 2): where its tile heuristic takes whole planes per block (3x3, 5x5 and 7x7 on maps up
//!   to `depthwise::PLANES_MAX_MAP`) to it (on the `depthwise` suite's 14- and 7-wide layers
//!   1.15-1.76x faster than the direct kernel and the fused FFT at N = 32 and 64; at N = 1, 5x5
//!   stride 2, level with the fused FFT); on maps of at least [`DEPTHWISE_MIN_MAP`] to it (with its own tile heuristic),
//!   except 7x7 and larger filters over many planes where its whole-rows program does not
//!   apply, which go to the fused FFT; on smaller
//!   maps to the fused FFT for 5x5 and larger filters on maps of at least [`FUSED_FFT_MIN_MAP`]
//!   and for 7x7 and larger over few planes on the smallest, to the depthwise kernel from
//!   [`DEPTHWISE_MIN_CHANNELS_PER_SM`] channels per SM, else to the direct kernel (`depthwise`
//!   and `large` suites, `benches/NOTES.md`).
//! - Layers with few outputs and long reductions ([`TINY_OUTPUTS`], [`TINY_MIN_TAPS`]) go to
//!   cuDNN's implicit GEMM: the direct kernel gives each thread a whole reduction, which a
//!   grid of a few thousand outputs cannot hide (a 5040-output layer with 72 taps per output:
//!   13 µs direct, 6.6 µs cuDNN).
//! - Smaller filters with many channels per group ([`CUDNN_MIN_CHANNELS`] and more, dense
//!   layers among them) go to cuDNN: its TF32 implicit GEMMs in the fast class, in the exact
//!   one its non-fused Winograd where it fits (a dense 3x3 layer takes our direct kernel
//!   6.1 ms and the Winograd 0.89 ms), else its exact heuristic choice.
//! - Grouped layers whose groups hold at least [`TENSOR_CORE_MIN_PRODUCT`] channel pairs
//!   (C/G · K/G) go to the tensor-core kernel, TF32 in the fast class and 3xTF32 in the exact
//!   one, with its own tile heuristic: on the `grouped` suite it was the fastest of everything
//!   on 29 of 33 such layers in the fast class and 31 of 33 in the exact one (1.3-5.7x the
//!   direct kernel), within 1.2x on the rest. RegNetY-8GF's 56-wide groups on 56- and 28-wide
//!   maps went to cuDNN's non-fused Winograd in the exact class until the warpgroup tiles
//!   (a65fb3c, H100: 3xTF32 0.414 against its 0.480 ms, 0.213 against 0.260 ms).
//! - Narrower groups (ResNeXt's 4 and 8 per group) run the direct kernel in the exact class
//!   (3xTF32 took 1.0-2.4x as long there), and from [`TF32_MIN_PRODUCT`] channel pairs the
//!   tensor-core kernel in the fast class (TF32 computed ResNeXt's 8-wide groups 1.2-1.5x
//!   faster than the direct kernel once its spatial tiles came).
//! - Everything else runs the direct kernel with its own tile heuristic.

use super::{Choice, Origin};
use crate::{
    Conv2d, ConvGeometry, TensorLayout,
    conv::{
        Algorithm,
        cudnn::{
            MathClass,
            legacy::{Algo, Math},
        },
        depthwise, direct, fft, fft_gemm, igemm,
    },
};
use kernels_gpu::conv::{depthwise::DepthwiseProgram, igemm::Precision};

/// Filter taps (R·S) from which an FFT convolution is chosen (13x13 depthwise measured 1.5x
/// faster through the fused FFT than directly; 7x7 2x slower).
pub const FFT_MIN_TAPS: usize = 121;
/// Input width and height from which a depthwise layer the depthwise kernel covers runs it (or
/// the fused FFT, below): on 28-wide and larger maps it beat the direct kernel by 1.1-1.8x,
/// on 14-wide ones the direct kernel won by up to 17%.
pub const DEPTHWISE_MIN_MAP: usize = 24;
/// Input width and height from which the fused FFT takes such layers with
/// [`FUSED_FFT_SMALL_MAP_MIN_FILTER`] and larger filters: on 14-wide maps it beat both kernels (0.036 against 0.043 and 0.045 ms); on 7-wide
/// maps it lost to the direct kernel by up to 2.2x, except for 7x7 filters over few planes
/// (N = 1, 768 channels: 0.0055 against 0.0117 ms).
pub const FUSED_FFT_MIN_MAP: usize = 12;
/// Channels per SM from which a depthwise layer on a small map runs the depthwise kernel, not
/// the direct one: the direct kernel gives each channel a block of its own, the depthwise
/// kernel packs several on small maps. 200 000 channels of 8x8 (N = 1): 0.046 ms against
/// 0.649 ms; 1152 channels of 7x7 (N = 64, 8.7 per SM): the direct kernel, 0.0324 against
/// 0.0345 ms (`large` and `depthwise` suites).
pub const DEPTHWISE_MIN_CHANNELS_PER_SM: usize = 16;
/// Below [`DEPTHWISE_MIN_MAP`], the filter size from which the fused FFT is chosen.
pub const FUSED_FFT_SMALL_MAP_MIN_FILTER: usize = 5;
/// From this filter size and this many planes (`n * c`), the fused FFT beats the depthwise
/// kernel's tiles on large maps too (7x7 on 56-wide maps, N = 32: 0.057 against 0.080 ms; at
/// N = 1 the depthwise kernel won, 0.007 against 0.011 ms); on small maps it is the other way
/// round. Not its whole rows, where they apply (0.050 ms on that layer, 0.034 against 0.035 on
/// the 28-wide one).
pub const FUSED_FFT_MIN_FILTER: usize = 7;
pub const FUSED_FFT_MIN_PLANES: usize = 1024;
/// Outputs up to which a layer counts as tiny.
pub const TINY_OUTPUTS: usize = 32 << 10;
/// Taps per output (C/G·R·S) from which a tiny layer goes to cuDNN.
pub const TINY_MIN_TAPS: usize = 32;
/// Channels per group (input and output) from which cuDNN is chosen: dense layers (a 3x3
/// layer of 256 channels: cuDNN's TF32 kernels and its Winograd were Find's choices); at 80
/// and 320 per group (ShuffleNet's G = 3 1x1 layers) the tensor-core kernel beat cuDNN's
/// choices by 1.3-5.1x.
pub const CUDNN_MIN_CHANNELS: usize = 128;
/// Channel pairs per group (C/G · K/G) from which the tensor-core kernel is chosen: 16 x 16
/// (ResNeXt's 16-wide groups: 0.042 against the direct kernel's 0.076 ms in TF32) and 12 x 48
/// (ShuffleNet's 1x1 layers: 0.019 against 0.055 ms) went to it, 8 x 8 stayed with the direct
/// kernel (0.073 against 0.076 ms, and 1.3x in 3xTF32).
pub const TENSOR_CORE_MIN_PRODUCT: usize = 144;
/// [`TENSOR_CORE_MIN_PRODUCT`] in the fast class: 8 x 8 (ResNeXt's 8-wide groups at 9ab403c,
/// TF32 against the direct kernel: 0.051 against 0.075 ms and 0.095 against 0.126 on 28x28
/// maps, 0.073 against 0.086 and 0.138 against 0.165 at stride 2); 4 x 4 stays with the
/// direct kernel (0.083 against 0.081 ms on 56x56 maps).
pub const TF32_MIN_PRODUCT: usize = 64;
/// Device memory the tiled FFT's filter spectra may take.
pub const FFT_GEMM_PLAN_LIMIT: usize = 1 << 30;

/// The heuristic's choice for `conv` in `math` with workspace up to `workspace_limit` bytes.
pub fn choose(sm_count: u32, conv: &Conv2d, geom: &ConvGeometry, math: MathClass, workspace_limit: usize) -> Choice {
    let pick = |algorithm, workspace, reason: String| Choice {
        algorithm,
        workspace,
        origin: Origin::Heuristic,
        reason,
        time_ms: None,
    };
    let depthwise = conv.groups == conv.c && conv.k == conv.c;
    let narrowest = geom.c_per_group.min(geom.k_per_group);
    if conv.layout == TensorLayout::Nhwc {
        let cudnn_faster = conv.r == 3 && conv.stride[0] == 2;
        if !cudnn_faster && let Ok(tile) = depthwise::choose_tile(conv, geom) {
            let why = format!(
                "depthwise {}x{}, stride {}, channels last: the depthwise kernel, {} channels per thread",
                conv.r, conv.s, conv.stride[0], tile.lane_channels
            );
            return pick(Algorithm::Depthwise(tile.name), 0, why);
        }
        let precision = igemm::precisions(math)[0];
        let grouped = !depthwise && narrowest < CUDNN_MIN_CHANNELS;
        let cudnn_grouped =
            math == MathClass::Fast && geom.c_per_group.is_power_of_two() && geom.k_per_group.is_power_of_two();
        if grouped
            && !cudnn_grouped
            && let Ok(shape) = igemm::choose(conv, geom, precision, sm_count)
        {
            let why = format!(
                "channels last, {} input and {} output channels per group: the tensor-core kernel in {}, {} groups per block",
                geom.c_per_group,
                geom.k_per_group,
                precision.name(),
                shape.groups_per_block
            );
            return pick(Algorithm::Igemm(shape.tile.name), 0, why);
        }
        let why = if grouped && cudnn_grouped {
            format!(
                "channels last, groups {} and {} wide (powers of two): cuDNN's grouped TF32 engines",
                geom.c_per_group, geom.k_per_group
            )
        } else {
            "channels last: cuDNN's heuristic choice".to_owned()
        };
        return pick(Algorithm::CudnnHeuristic(math), 0, why);
    }
    let taps = conv.r * conv.s;
    if taps >= FFT_MIN_TAPS {
        let filter = format!("{}x{} filter", conv.r, conv.s);
        let fused = fft::choose_tile(conv, geom).ok().map(|tile| (fft::estimate_s(conv, geom, &tile), tile));
        let tiled = fft_gemm::choose(conv, geom, FFT_GEMM_PLAN_LIMIT, workspace_limit).ok();
        match (fused, tiled) {
            (Some((fused_s, tile)), tiled) if tiled.is_none_or(|t| fused_s <= t.estimate_s) => {
                let why = format!("depthwise {filter}: the fused FFT (estimate {:.1} us)", fused_s * 1e6);
                return pick(Algorithm::Fft(tile.name), 0, why);
            }
            (_, Some(shape)) => {
                let why = format!(
                    "{filter}: the tiled FFT, {}x{} tiles of {}x{} outputs (estimate {:.1} us, the least)",
                    shape.tiles[0],
                    shape.tiles[1],
                    shape.tile[0],
                    shape.tile[1],
                    shape.estimate_s * 1e6
                );
                return pick(Algorithm::FftGemm(shape.size.name), shape.workspace_bytes(), why);
            }
            _ => {}
        }
    }
    if let Ok(tile) = depthwise::choose_tile(conv, geom) {
        let map = conv.h.min(conv.w);
        let layer = format!("depthwise {}x{}, stride {}, {map}-wide input", conv.r, conv.s, conv.stride[0]);
        let fused = fft::choose_tile(conv, geom).ok();
        let many_planes = conv.n * conv.c >= FUSED_FFT_MIN_PLANES;
        let rows = tile.program == DepthwiseProgram::Rows;
        let planes = tile.program == DepthwiseProgram::Planes;
        let fused_wins = if planes {
            false
        } else if map >= DEPTHWISE_MIN_MAP {
            conv.r >= FUSED_FFT_MIN_FILTER && many_planes && !rows
        } else if map >= FUSED_FFT_MIN_MAP {
            conv.r >= FUSED_FFT_SMALL_MAP_MIN_FILTER
        } else {
            conv.r >= FUSED_FFT_MIN_FILTER && !many_planes
        };
        match fused {
            Some(fft_tile) if fused_wins => {
                let why = format!("{layer}, {} planes: the fused FFT", conv.n * conv.c);
                return pick(Algorithm::Fft(fft_tile.name), 0, why);
            }
            _ if planes || map >= DEPTHWISE_MIN_MAP || conv.c >= DEPTHWISE_MIN_CHANNELS_PER_SM * sm_count as usize => {
                let why = if rows {
                    format!("{layer}, {} channels: the depthwise kernel, whole rows per warp", conv.c)
                } else if planes {
                    format!("{layer}, {} planes: the depthwise kernel, whole planes per block", conv.n * conv.c)
                } else {
                    format!("{layer}, {} channels: the depthwise kernel, {}x{} tiles", conv.c, tile.tile_h, tile.tile_w)
                };
                return pick(Algorithm::Depthwise(tile.name), 0, why);
            }
            _ => return direct_choice(sm_count, conv, geom, format!("{layer}: the direct kernel")),
        }
    }
    if geom.y_len <= TINY_OUTPUTS && geom.taps(conv) >= TINY_MIN_TAPS {
        let why = format!("{} outputs of {} taps each: cuDNN's implicit GEMM (FMA)", geom.y_len, geom.taps(conv));
        return pick(Algorithm::CudnnLegacy(Algo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, Math::Fma), 0, why);
    }
    if !depthwise {
        let channels = format!("{} input and {} output channels per group", geom.c_per_group, geom.k_per_group);
        if narrowest >= CUDNN_MIN_CHANNELS {
            return match math {
                MathClass::Fast => {
                    let why = format!("{channels}: cuDNN's TF32 tensor-core kernels (its heuristic's first choice)");
                    pick(Algorithm::CudnnHeuristic(MathClass::Fast), 0, why)
                }
                MathClass::Exact if winograd_fits(conv) => {
                    let why = format!("{channels}, 3x3, unit stride: cuDNN's non-fused Winograd (FMA)");
                    let winograd = Algo::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
                    pick(Algorithm::CudnnLegacy(winograd, Math::Fma), 0, why)
                }
                MathClass::Exact => {
                    let why = format!("{channels}: cuDNN's exact kernels (its heuristic's first choice)");
                    pick(Algorithm::CudnnHeuristic(MathClass::Exact), 0, why)
                }
            };
        }
        let min_product = if math == MathClass::Fast { TF32_MIN_PRODUCT } else { TENSOR_CORE_MIN_PRODUCT };
        if geom.c_per_group * geom.k_per_group >= min_product {
            let precision = igemm::precisions(math)[0];
            if let Ok(shape) = igemm::choose(conv, geom, precision, sm_count) {
                let why = format!(
                    "{channels}: the tensor-core kernel in {}, {} groups per block",
                    precision.name(),
                    shape.groups_per_block
                );
                return pick(Algorithm::Igemm(shape.tile.name), 0, why);
            }
        }
    }
    let why = format!("{}x{} filter, {narrowest} channels per group: the direct kernel", conv.r, conv.s);
    direct_choice(sm_count, conv, geom, why)
}

/// The plan's last resort when the first choice does not build (a cuDNN algorithm): the
/// direct kernel, which computes every valid NCHW layer; for NHWC layers the tensor-core
/// kernel's NHWC tiles in 3xTF32 (every valid layer, in either math class).
pub fn fallback(sm_count: u32, conv: &Conv2d, geom: &ConvGeometry) -> Choice {
    if conv.layout == TensorLayout::Nhwc
        && let Ok(shape) = igemm::choose(conv, geom, Precision::Tf32x3, sm_count)
    {
        let reason = "the tensor-core kernel in 3xTF32 (the first choice did not build)".to_owned();
        return Choice {
            algorithm: Algorithm::Igemm(shape.tile.name),
            workspace: 0,
            origin: Origin::Heuristic,
            reason,
            time_ms: None,
        };
    }
    direct_choice(sm_count, conv, geom, "the direct kernel (the first choice did not build)".into())
}

/// The direct kernel with its tile heuristic's tile.
fn direct_choice(sm_count: u32, conv: &Conv2d, geom: &ConvGeometry, reason: String) -> Choice {
    let tile = direct::choose_tile(conv, geom, sm_count);
    Choice { algorithm: Algorithm::Direct(tile.name), workspace: 0, origin: Origin::Heuristic, reason, time_ms: None }
}

/// Where cuDNN's non-fused Winograd applies: 3x3, unit stride and dilation.
fn winograd_fits(conv: &Conv2d) -> bool {
    conv.r == 3 && conv.s == 3 && conv.stride == [1, 1] && conv.dilation == [1, 1]
}
