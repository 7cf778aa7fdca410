//! The timing gate: a one-thread kernel that holds its stream until the host releases it, so
//! that a whole round of timed launches is queued before the first one runs and no host work
//! (launch overhead, a descriptor built, a sleep) can fall between them.

use bytemuck::{Pod, Zeroable};

/// The gate's entry point (its parameters: [`GateParams`]).
pub const GATE_KERNEL: &str = "timing_gate";

/// Parameters of the gate kernel. Both flags are `u32`s in mapped pinned host memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct GateParams {
    /// Device address of the flag the host sets to non-zero to release the stream.
    pub release: u64,
    /// Device address of the flag the gate sets to 1 when it gave up waiting.
    pub timed_out: u64,
    /// How long to wait for the release before giving up (so a host that blocks cannot hang
    /// the GPU).
    pub timeout_ns: u64,
}

/// Nanoseconds between two polls of the release flag: each poll crosses PCIe.
pub const GATE_POLL_NS: u32 = 2000;

#[cfg(target_arch = "nvptx64")]
mod entry {
    use super::{GATE_POLL_NS, GateParams};
    use crate::prelude::*;

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn timing_gate(p: GateParams) {
        let start = global_timer_ns();
        while ld_relaxed_sys_u32(to_global(p.release)) == 0 {
            if global_timer_ns().wrapping_sub(start) > p.timeout_ns {
                st_relaxed_sys_u32(to_global(p.timed_out), 1);
                return;
            }
            nanosleep(GATE_POLL_NS);
        }
    }
}
