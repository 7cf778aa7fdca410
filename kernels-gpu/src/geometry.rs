//! Problem geometry shared by every kernel family and the host's validation.

/// Output extent of one spatial dimension, `None` when the (dilated) filter does not fit
/// the padded input or an argument is zero.
pub const fn out_extent(input: u64, filter: u64, pad: u64, stride: u64, dilation: u64) -> Option<u64> {
    if input == 0 || filter == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let span = dilation * (filter - 1) + 1;
    let padded = input + 2 * pad;
    if padded < span { None } else { Some((padded - span) / stride + 1) }
}
