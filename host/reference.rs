//! CPU reference convolution with f64 accumulation: the ground truth of CI's tests and of
//! `convkit check` on small shapes.

use crate::{Conv2d, Error, Result};

/// `y = conv(x, w)` in f64, NCHW / KCRS. Each output row is accumulated tap by tap, which
/// keeps the inner loop a contiguous multiply-add over the row.
pub fn conv2d_forward(conv: &Conv2d, x: &[f32], w: &[f32]) -> Result<Vec<f64>> {
    let g = conv.geometry()?;
    for (buffer, expected, got) in [("x", g.x_len, x.len()), ("w", g.w_len, w.len())] {
        if expected != got {
            return Err(Error::BufferSize { buffer, expected, got });
        }
    }
    let (oh_n, ow_n) = (g.out_h, g.out_w);
    let [pad_h, pad_w] = conv.pad.map(|p| p as isize);
    let [stride_h, stride_w] = conv.stride;
    let [dil_h, dil_w] = conv.dilation;
    let mut y = vec![0.0f64; g.y_len];
    for n in 0..conv.n {
        for k in 0..conv.k {
            let group = k / g.k_per_group;
            let out = &mut y[(n * conv.k + k) * oh_n * ow_n..][..oh_n * ow_n];
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
                            let out_row = &mut out[oh * ow_n..][..ow_n];
                            for (ow, o) in out_row.iter_mut().enumerate() {
                                let iw = (ow * stride_w + s * dil_w) as isize - pad_w;
                                if iw >= 0 && iw < conv.w as isize {
                                    *o += row[iw as usize] as f64 * weight;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(y)
}
