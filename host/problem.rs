//! The convolution problem: its text syntax (`n=32,c=256,h=56,w=56,k=256,r=3,s=3,pad=1,groups=32`),
//! validation with typed errors, and the sizes derived from it. Knows no algorithm.

use crate::{Error, Result};
use kernels_gpu::geometry::out_extent;
use std::{fmt, str::FromStr};

/// A 2-D forward convolution, input `[n, c, h, w]`, filter `[k, c/groups, r, s]`, output
/// `[n, k, out_h, out_w]`, stored in the order [`TensorLayout`] names. Cross-correlation, as
/// cuDNN and PyTorch compute it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// A label for tables; not part of the math.
    pub name: Option<String>,
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub r: usize,
    pub s: usize,
    /// `[height, width]` zero padding on each side.
    pub pad: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub layout: TensorLayout,
}

/// How the tensors of a [`Conv2d`] lie in memory (each packed, no padding between elements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TensorLayout {
    /// Input NCHW, filter KCRS, output NCHW: PyTorch's default (contiguous) tensors.
    #[default]
    Nchw,
    /// Channels last: input NHWC, filter KRSC (`[k][r][s][c/groups]`), output NHWC, as PyTorch's
    /// `channels_last` tensors and cuDNN's NHWC descriptors store them. For depthwise layers
    /// (one input channel per group) the filter is the same as KCRS.
    Nhwc,
}

impl TensorLayout {
    pub const fn name(self) -> &'static str {
        match self {
            TensorLayout::Nchw => "nchw",
            TensorLayout::Nhwc => "nhwc",
        }
    }
}

/// A validated [`Conv2d`] with the sizes derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    pub out_h: usize,
    pub out_w: usize,
    pub c_per_group: usize,
    pub k_per_group: usize,
    /// Elements of the input, filter and output tensors.
    pub x_len: usize,
    pub w_len: usize,
    pub y_len: usize,
}

impl ConvGeometry {
    /// Multiply-adds x 2.
    pub fn flops(&self, conv: &Conv2d) -> f64 {
        2.0 * self.y_len as f64 * (self.c_per_group * conv.r * conv.s) as f64
    }

    /// The fewest bytes a forward pass moves: every tensor read or written once.
    pub fn min_bytes(&self) -> f64 {
        4.0 * (self.x_len + self.w_len + self.y_len) as f64
    }

    /// Filter taps summed into each output: `C/G x R x S`.
    pub fn taps(&self, conv: &Conv2d) -> usize {
        self.c_per_group * conv.r * conv.s
    }
}

/// Largest extent of any single dimension (cuDNN takes `int`, our kernels index in 32 bits).
const MAX_DIM: usize = i32::MAX as usize;
/// Largest padded input extent, `h + 2 * pad_h` (and likewise for the width).
const MAX_PADDED: usize = 1 << 30;

impl Conv2d {
    /// A `c -> k` convolution with an `r x s` filter, batch 1, stride 1, no padding, dense.
    pub fn new(c: usize, h: usize, w: usize, k: usize, r: usize, s: usize) -> Self {
        Conv2d {
            name: None,
            n: 1,
            c,
            h,
            w,
            k,
            r,
            s,
            pad: [0, 0],
            stride: [1, 1],
            dilation: [1, 1],
            groups: 1,
            layout: TensorLayout::Nchw,
        }
    }

    /// Checks every field and derives the output size; the error names the offending field.
    pub fn geometry(&self) -> Result<ConvGeometry> {
        let dims = [
            ("n", self.n),
            ("c", self.c),
            ("h", self.h),
            ("w", self.w),
            ("k", self.k),
            ("r", self.r),
            ("s", self.s),
            ("stride_h", self.stride[0]),
            ("stride_w", self.stride[1]),
            ("dil_h", self.dilation[0]),
            ("dil_w", self.dilation[1]),
            ("groups", self.groups),
        ];
        for (field, v) in dims {
            if v == 0 {
                return Err(Error::invalid(field, "must be at least 1"));
            }
            if v > MAX_DIM {
                return Err(Error::invalid(field, format!("= {v} exceeds {MAX_DIM}")));
            }
        }
        // Kernels index the padded input with i32 and step a few elements past its end.
        for (field, input, pad) in [("pad_h", self.h, self.pad[0]), ("pad_w", self.w, self.pad[1])] {
            if pad > MAX_PADDED || input + 2 * pad > MAX_PADDED {
                return Err(Error::invalid(field, format!("= {pad} makes the padded input exceed {MAX_PADDED}")));
            }
        }
        if !self.c.is_multiple_of(self.groups) {
            return Err(Error::invalid("groups", format!("= {} does not divide c = {}", self.groups, self.c)));
        }
        if !self.k.is_multiple_of(self.groups) {
            return Err(Error::invalid("groups", format!("= {} does not divide k = {}", self.groups, self.k)));
        }
        let out = |field, input: usize, filter: usize, pad: usize, stride: usize, dil: usize| {
            let extent =
                out_extent(input as u64, filter as u64, pad as u64, stride as u64, dil as u64).ok_or_else(|| {
                    Error::invalid(
                        field,
                        format!(
                            "= {filter}: the dilated filter ({}) is larger than the padded input ({})",
                            (dil as u64) * (filter as u64 - 1) + 1,
                            input as u64 + 2 * pad as u64
                        ),
                    )
                })?;
            Ok::<usize, Error>(extent as usize)
        };
        let out_h = out("r", self.h, self.r, self.pad[0], self.stride[0], self.dilation[0])?;
        let out_w = out("s", self.w, self.s, self.pad[1], self.stride[1], self.dilation[1])?;
        let c_per_group = self.c / self.groups;
        let k_per_group = self.k / self.groups;

        let product = |field: &'static str, factors: &[usize]| {
            factors
                .iter()
                .try_fold(1usize, |acc, &f| acc.checked_mul(f))
                .filter(|&v| v <= MAX_DIM)
                .ok_or_else(|| Error::invalid(field, format!("makes {} exceed {MAX_DIM}", factors_text(factors))))
        };
        // Planes, the flat output-pixel range and per-group filter taps are 32-bit on the GPU.
        product("h", &[self.h, self.w])?;
        product("n", &[self.n, out_h, out_w])?;
        product("c", &[c_per_group, self.r, self.s])?;
        let total = |field: &'static str, factors: &[usize]| {
            factors
                .iter()
                .try_fold(1usize, |acc, &f| acc.checked_mul(f))
                .filter(|&v| v.checked_mul(4).is_some())
                .ok_or_else(|| Error::invalid(field, "makes a tensor larger than the address space"))
        };
        Ok(ConvGeometry {
            out_h,
            out_w,
            c_per_group,
            k_per_group,
            x_len: total("n", &[self.n, self.c, self.h, self.w])?,
            w_len: total("k", &[self.k, c_per_group, self.r, self.s])?,
            y_len: total("n", &[self.n, self.k, out_h, out_w])?,
        })
    }

    /// The label if any, else the spec.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.to_string())
    }
}

fn factors_text(factors: &[usize]) -> String {
    factors.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("*")
}

/// Prints the canonical spec: every field, `AxB` where height and width differ; the layout only
/// where it is not the default NCHW (so NCHW specs read as they always have).
impl fmt::Display for Conv2d {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pair = |[a, b]: [usize; 2]| if a == b { a.to_string() } else { format!("{a}x{b}") };
        if let Some(name) = &self.name {
            write!(f, "name={name},")?;
        }
        write!(
            f,
            "n={},c={},h={},w={},k={},r={},s={},pad={},stride={},dil={},groups={}",
            self.n,
            self.c,
            self.h,
            self.w,
            self.k,
            self.r,
            self.s,
            pair(self.pad),
            pair(self.stride),
            pair(self.dilation),
            self.groups
        )?;
        if self.layout != TensorLayout::Nchw {
            write!(f, ",layout={}", self.layout.name())?;
        }
        Ok(())
    }
}

/// The shape syntax, as `--help` and the README give it.
pub const SHAPE_SYNTAX: &str = "\
A shape is comma-separated key=value pairs, e.g.
  n=32,c=256,h=56,w=56,k=256,r=3,s=3,pad=1,stride=1,dil=1,groups=32
keys: n (batch, default 1), c (input channels, required), h (input height, required),
  w (input width, default h), k (output channels, default c), r (filter height, required),
  s (filter width, default r), pad / stride / dil (one number, or HxW such as 1x2;
  also pad_h, pad_w, stride_h, stride_w, dil_h, dil_w), groups (default 1; must divide
  c and k; groups=c is depthwise), layout (nchw, the default, or nhwc: channels last, the
  filter then KRSC), name (a label for tables).
A suite file holds one shape per line; blank lines and text after # are ignored.";

impl FromStr for Conv2d {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        let mut conv = Conv2d::new(0, 0, 0, 0, 0, 0);
        let (mut w, mut k, mut s) = (None, None, None);
        let mut seen = [false; 3]; // c, h, r
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| Error::invalid("shape", format!("`{item}` is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            let one = |field: &'static str| parse_dim(field, value);
            match key {
                "name" => conv.name = Some(value.to_owned()),
                "n" => conv.n = one("n")?,
                "c" => (conv.c, seen[0]) = (one("c")?, true),
                "h" => (conv.h, seen[1]) = (one("h")?, true),
                "w" => w = Some(one("w")?),
                "k" => k = Some(one("k")?),
                "r" => (conv.r, seen[2]) = (one("r")?, true),
                "s" => s = Some(one("s")?),
                "groups" | "g" => conv.groups = one("groups")?,
                "pad" => conv.pad = parse_pair("pad", value)?,
                "pad_h" => conv.pad[0] = one("pad_h")?,
                "pad_w" => conv.pad[1] = one("pad_w")?,
                "stride" => conv.stride = parse_pair("stride", value)?,
                "stride_h" => conv.stride[0] = one("stride_h")?,
                "stride_w" => conv.stride[1] = one("stride_w")?,
                "dil" | "dilation" => conv.dilation = parse_pair("dil", value)?,
                "dil_h" => conv.dilation[0] = one("dil_h")?,
                "dil_w" => conv.dilation[1] = one("dil_w")?,
                "layout" => {
                    conv.layout = match value {
                        "nchw" => TensorLayout::Nchw,
                        "nhwc" => TensorLayout::Nhwc,
                        _ => return Err(Error::invalid("layout", format!("`{value}` is not nchw or nhwc"))),
                    }
                }
                _ => return Err(Error::invalid("shape", format!("unknown key `{key}` in `{item}`"))),
            }
        }
        for (field, present) in ["c", "h", "r"].into_iter().zip(seen) {
            if !present {
                return Err(Error::invalid(field, format!("is required (in `{spec}`)")));
            }
        }
        conv.w = w.unwrap_or(conv.h);
        conv.k = k.unwrap_or(conv.c);
        conv.s = s.unwrap_or(conv.r);
        Ok(conv)
    }
}

fn parse_dim(field: &'static str, value: &str) -> Result<usize> {
    value.parse().map_err(|_| Error::invalid(field, format!("`{value}` is not a non-negative integer")))
}

fn parse_pair(field: &'static str, value: &str) -> Result<[usize; 2]> {
    match value.split_once('x') {
        Some((a, b)) => Ok([parse_dim(field, a)?, parse_dim(field, b)?]),
        None => {
            let v = parse_dim(field, value)?;
            Ok([v, v])
        }
    }
}

/// Parses a suite: one shape per line, `#` starts a comment. Errors name the line.
pub fn parse_suite(text: &str) -> Result<Vec<Conv2d>> {
    let mut shapes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let conv: Conv2d = line.parse().map_err(|e| match e {
            Error::InvalidShape { field, reason } => {
                Error::InvalidShape { field, reason: format!("{reason} (suite line {})", i + 1) }
            }
            other => other,
        })?;
        shapes.push(conv);
    }
    Ok(shapes)
}
