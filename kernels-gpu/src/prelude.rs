//! The device prelude: what `cuda_std` would give, over `core::arch::nvptx` and inline PTX.
//! (`cuda_std` needs rust-cuda's codegen, which this project cannot build; see the README.)

use core::arch::{asm, global_asm, nvptx};

// One dynamic shared-memory window for every kernel of the module; launches size it.
global_asm!(".extern .shared .align 16 .b8 dyn_smem[];");

#[inline(always)]
pub fn thread_idx_x() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `%tid.x`, read anew at each call: index math built on it is recomputed where it is used
/// instead of hoisted out of loops, which trades a few integer instructions for registers.
#[inline(always)]
pub fn thread_idx_x_each_time() -> u32 {
    let t: u32;
    unsafe { asm!("mov.u32 {t}, %tid.x;", t = out(reg32) t, options(nomem, nostack)) };
    t
}

#[inline(always)]
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() as u32 }
}

#[inline(always)]
pub fn block_idx_x() -> u32 {
    unsafe { nvptx::_block_idx_x() as u32 }
}

#[inline(always)]
pub fn block_idx_y() -> u32 {
    unsafe { nvptx::_block_idx_y() as u32 }
}

#[inline(always)]
pub fn block_idx_z() -> u32 {
    unsafe { nvptx::_block_idx_z() as u32 }
}

/// `bar.sync 0`: every thread of the block must reach it.
#[inline(always)]
pub fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}

/// Starts copying one f32 from global memory to shared memory (`cp.async`, sm_80 and later)
/// without holding a register; `src_bytes` 0 writes a zero instead (`global_addr` must still be
/// a valid address). Complete after [`cp_async_wait_all`].
#[inline(always)]
pub fn cp_async_f32(smem_addr: u32, global_addr: u64, src_bytes: u32) {
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 4, {n};", d = in(reg32) smem_addr, s = in(reg64) global_addr,
            n = in(reg32) src_bytes, options(nostack))
    };
}

/// [`cp_async_f32`] for 8 bytes (one complex f32); both addresses 8-byte aligned, `src_bytes` 8
/// or 0.
#[inline(always)]
pub fn cp_async_f32x2(smem_addr: u32, global_addr: u64, src_bytes: u32) {
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 8, {n};", d = in(reg32) smem_addr, s = in(reg64) global_addr,
            n = in(reg32) src_bytes, options(nostack))
    };
}

/// [`cp_async_f32`] for 16 bytes, through L2 only (`.cg`); both addresses 16-byte aligned,
/// `src_bytes` 16, 8, 4 or 0 (the rest zero-filled).
#[inline(always)]
pub fn cp_async_f32x4(smem_addr: u32, global_addr: u64, src_bytes: u32) {
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) smem_addr, s = in(reg64) global_addr,
            n = in(reg32) src_bytes, options(nostack))
    };
}

/// [`cp_async_f32x4`] through L1 (`.ca`), for data that other copies read again.
#[inline(always)]
pub fn cp_async_f32x4_l1(smem_addr: u32, global_addr: u64, src_bytes: u32) {
    unsafe {
        asm!("cp.async.ca.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) smem_addr, s = in(reg64) global_addr,
            n = in(reg32) src_bytes, options(nostack))
    };
}

/// Waits for this thread's [`cp_async_f32`] copies (other threads' need a barrier after theirs).
#[inline(always)]
pub fn cp_async_wait_all() {
    unsafe { asm!("cp.async.wait_all;", options(nostack)) };
}

/// Initialises the `mbarrier` at `bar` (an 8-byte aligned shared address) for `count`
/// arrivals per phase (sm_80 and later).
#[inline(always)]
pub fn mbarrier_init(bar: u32, count: u32) {
    unsafe {
        asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) bar, c = in(reg32) count, options(nostack))
    };
}

/// Orders this thread's `mbarrier` initialisations before later uses by other threads and by
/// the async proxy (bulk copies); a block barrier must follow before other threads wait on them.
#[inline(always)]
pub fn fence_mbarrier_init() {
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
}

/// Orders this thread's generic-proxy accesses to shared memory before later async-proxy ones
/// (bulk copies) to the same bytes.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// Arrives on `bar` once, raising the bytes its current phase waits for by `bytes` first (sm_90,
/// PTX 8.0).
#[inline(always)]
pub fn mbarrier_arrive_expect_tx(bar: u32, bytes: u32) {
    unsafe {
        asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar, n = in(reg32) bytes,
            options(nostack))
    };
}

/// Arrives on `bar` once, releasing this thread's earlier accesses to whoever waits on the
/// phase this arrival completes (sm_80 and later).
#[inline(always)]
pub fn mbarrier_arrive(bar: u32) {
    unsafe { asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack)) };
}

/// Waits until every lane of the warp has reached it, ordering their memory accesses
/// (`bar.warp.sync`, all lanes).
#[inline(always)]
pub fn sync_warp() {
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}

/// Stops the kernel with an error the host sees (`trap`): for paths the host never takes.
#[inline(always)]
pub fn trap() -> ! {
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}

/// Starts a bulk copy (the copy engine, sm_90, PTX 8.0) of `bytes` (a multiple of 16) from
/// `global_addr` to `smem_addr` (both 16-byte aligned) that completes `bytes` of `bar`'s phase.
#[inline(always)]
pub fn cp_async_bulk(smem_addr: u32, global_addr: u64, bytes: u32, bar: u32) {
    unsafe {
        asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
            d = in(reg32) smem_addr, s = in(reg64) global_addr, n = in(reg32) bytes, b = in(reg32) bar,
            options(nostack))
    };
}

/// Waits until the phase of `bar` with parity `parity` has completed; what completed it (bulk
/// copies included) is then visible to this thread (sm_90).
#[inline(always)]
pub fn mbarrier_wait_parity(bar: u32, parity: u32) {
    loop {
        let done: u32;
        unsafe {
            asm!("{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph}; selp.u32 {d}, 1, 0, p; }}",
                b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack))
        };
        if done != 0 {
            return;
        }
    }
}

/// `[re, im]` of an 8-byte aligned complex f32 in global memory (`ld.global.v2`).
#[inline(always)]
pub fn ldg_f32x2(global_addr: u64) -> [f32; 2] {
    let (re, im): (f32, f32);
    unsafe {
        asm!("ld.global.v2.f32 {{{r}, {i}}}, [{a}];", a = in(reg64) global_addr, r = out(reg32) re, i = out(reg32) im,
            options(readonly, nostack))
    };
    [re, im]
}

/// The 32-bit shared-window address of the dynamic shared memory.
#[inline(always)]
pub fn smem_base() -> u32 {
    let a: u32;
    unsafe { asm!("mov.u32 {a}, dyn_smem;", a = out(reg32) a, options(pure, nomem, nostack)) };
    a
}

#[inline(always)]
pub fn st_shared_f32(addr: u32, v: f32) {
    unsafe { asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack)) };
}

/// [`st_shared_f32`] where `store`, without a branch.
#[inline(always)]
pub fn st_shared_f32_if(store: bool, addr: u32, v: f32) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; @p st.shared.f32 [{a}], {v}; }}",
            c = in(reg32) store as u32, a = in(reg32) addr, v = in(reg32) v, options(nostack))
    };
}

#[inline(always)]
pub fn ld_shared_f32(addr: u32) -> f32 {
    let v: f32;
    unsafe { asm!("ld.shared.f32 {v}, [{a}];", a = in(reg32) addr, v = out(reg32) v, options(readonly, nostack)) };
    v
}

/// 16-byte shared load; `addr` must be 16-byte aligned.
#[inline(always)]
pub fn ld_shared_f32x4(addr: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    unsafe {
        asm!("ld.shared.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(readonly, nostack))
    };
    [a, b, c, d]
}

/// A generic address of device memory converted once to the global window, so that loads
/// can use `ld.global.nc` (pointers that arrive inside a parameter struct are generic).
#[inline(always)]
pub fn to_global(generic: u64) -> u64 {
    let g: u64;
    unsafe {
        asm!("cvta.to.global.u64 {g}, {p};", g = out(reg64) g, p = in(reg64) generic, options(pure, nomem, nostack))
    };
    g
}

/// Read-only (non-coherent cache) global load: only for buffers no thread writes in the launch.
#[inline(always)]
pub fn ldg_nc_f32(global_addr: u64) -> f32 {
    let v: f32;
    unsafe {
        asm!("ld.global.nc.f32 {v}, [{a}];", a = in(reg64) global_addr, v = out(reg32) v, options(readonly, nostack))
    };
    v
}

#[inline(always)]
pub fn stg_f32(global_addr: u64, v: f32) {
    unsafe { asm!("st.global.f32 [{a}], {v};", a = in(reg64) global_addr, v = in(reg32) v, options(nostack)) };
}

/// `shfl.sync.down` over the full warp (for warp reductions): every lane must reach it
/// together. Not `pure`, so that the compiler keeps it where it is written: sunk into a
/// branch of the lanes that use its result, it would run on those lanes alone.
#[inline(always)]
pub fn shfl_down_f32(v: f32, delta: u32) -> f32 {
    let r: f32;
    unsafe {
        asm!("shfl.sync.down.b32 {r}, {v}, {d}, 0x1f, 0xffffffff;",
            r = out(reg32) r, v = in(reg32) v, d = in(reg32) delta, options(nomem, nostack))
    };
    r
}

/// `shfl.sync.up` over the full warp: lane `i` gets lane `i - delta`'s `v` (its own below
/// `delta`). Not `pure`, as [`shfl_down_f32`].
#[inline(always)]
pub fn shfl_up_f32(v: f32, delta: u32) -> f32 {
    let r: f32;
    unsafe {
        asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, 0xffffffff;",
            r = out(reg32) r, v = in(reg32) v, d = in(reg32) delta, options(nomem, nostack))
    };
    r
}

/// Whether `p` holds on every lane of the warp now running this code (`vote.sync.all` over
/// `activemask`). Not `pure`, as [`shfl_down_f32`]: its result depends on where it runs.
#[inline(always)]
pub fn warp_all(p: bool) -> bool {
    let r: u32;
    unsafe {
        asm!(
            "{{ .reg .pred %a, %r; .reg .b32 %m;",
            "activemask.b32 %m;",
            "setp.ne.u32 %a, {p}, 0;",
            "vote.sync.all.pred %r, %a, %m;",
            "selp.u32 {r}, 1, 0, %r; }}",
            r = out(reg32) r, p = in(reg32) p as u32, options(nomem, nostack)
        )
    };
    r != 0
}

/// High 32 bits of the 64-bit product, as one `mul.hi.u32`.
#[inline(always)]
pub fn mul_hi_u32(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("mul.hi.u32 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, options(pure, nomem, nostack))
    };
    r
}

#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// The first thread index of a grid-stride loop and its stride, in 64 bits.
#[inline(always)]
pub fn grid_stride() -> (u64, u64) {
    let threads = block_dim_x() as u64;
    (block_idx_x() as u64 * threads + thread_idx_x() as u64, grid_dim_x() as u64 * threads)
}

/// The GPU's global nanosecond timer (`%globaltimer`).
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    let t: u64;
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
    t
}

/// Suspends the thread for about `ns` nanoseconds (sm_70+).
#[inline(always)]
pub fn nanosleep(ns: u32) {
    unsafe { asm!("nanosleep.u32 {ns};", ns = in(reg32) ns, options(nomem, nostack)) };
}

/// A load that sees stores of the host (mapped pinned memory) and of other devices.
#[inline(always)]
pub fn ld_relaxed_sys_u32(global_addr: u64) -> u32 {
    let v: u32;
    unsafe {
        asm!("ld.relaxed.sys.global.u32 {v}, [{a}];", a = in(reg64) global_addr, v = out(reg32) v, options(nostack))
    };
    v
}

/// A store that the host (mapped pinned memory) sees.
#[inline(always)]
pub fn st_relaxed_sys_u32(global_addr: u64, v: u32) {
    unsafe {
        asm!("st.relaxed.sys.global.u32 [{a}], {v};", a = in(reg64) global_addr, v = in(reg32) v, options(nostack))
    };
}

#[inline(always)]
pub fn atomic_add_u64(global_addr: u64, v: u64) {
    unsafe { asm!("red.global.add.u64 [{a}], {v};", a = in(reg64) global_addr, v = in(reg64) v, options(nostack)) };
}

#[inline(always)]
pub fn atomic_max_u64(global_addr: u64, v: u64) {
    unsafe { asm!("red.global.max.u64 [{a}], {v};", a = in(reg64) global_addr, v = in(reg64) v, options(nostack)) };
}

#[inline(always)]
pub fn atomic_min_u64(global_addr: u64, v: u64) {
    unsafe { asm!("red.global.min.u64 [{a}], {v};", a = in(reg64) global_addr, v = in(reg64) v, options(nostack)) };
}

#[inline(always)]
pub fn atomic_add_f64(global_addr: u64, v: f64) {
    unsafe { asm!("red.global.add.f64 [{a}], {v};", a = in(reg64) global_addr, v = in(reg64) v, options(nostack)) };
}

/// Read-only (non-coherent cache) 4-byte integer load.
#[inline(always)]
pub fn ldg_nc_u32(global_addr: u64) -> u32 {
    let v: u32;
    unsafe {
        asm!("ld.global.nc.u32 {v}, [{a}];", a = in(reg64) global_addr, v = out(reg32) v, options(readonly, nostack))
    };
    v
}

/// Read-only 8-byte global load (two f32, e.g. one complex); `global_addr` 8-byte aligned.
#[inline(always)]
pub fn ldg_nc_f32x2(global_addr: u64) -> [f32; 2] {
    let (a, b): (f32, f32);
    unsafe {
        asm!("ld.global.nc.v2.f32 {{{a}, {b}}}, [{p}];",
            p = in(reg64) global_addr, a = out(reg32) a, b = out(reg32) b, options(readonly, nostack))
    };
    [a, b]
}

/// Read-only 16-byte global load; `global_addr` 16-byte aligned.
#[inline(always)]
pub fn ldg_nc_f32x4(global_addr: u64) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    unsafe {
        asm!("ld.global.nc.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            p = in(reg64) global_addr, a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            options(readonly, nostack))
    };
    [a, b, c, d]
}

/// A coherent global load, for memory the launch also writes.
#[inline(always)]
pub fn ld_global_f32(global_addr: u64) -> f32 {
    let v: f32;
    unsafe {
        asm!("ld.global.f32 {v}, [{a}];", a = in(reg64) global_addr, v = out(reg32) v, options(readonly, nostack))
    };
    v
}

/// A coherent 8-byte global load; `global_addr` 8-byte aligned.
#[inline(always)]
pub fn ld_global_f32x2(global_addr: u64) -> [f32; 2] {
    let (a, b): (f32, f32);
    unsafe {
        asm!("ld.global.v2.f32 {{{a}, {b}}}, [{p}];",
            p = in(reg64) global_addr, a = out(reg32) a, b = out(reg32) b, options(readonly, nostack))
    };
    [a, b]
}

/// 8-byte global store; `global_addr` 8-byte aligned.
#[inline(always)]
pub fn stg_f32x2(global_addr: u64, v: [f32; 2]) {
    unsafe {
        asm!("st.global.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg64) global_addr, a = in(reg32) v[0], b = in(reg32) v[1],
            options(nostack))
    };
}

/// 16-byte global store; `global_addr` 16-byte aligned.
#[inline(always)]
pub fn stg_f32x4(global_addr: u64, v: [f32; 4]) {
    unsafe {
        asm!("st.global.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) global_addr,
            a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    };
}

/// 8-byte shared store (two f32, e.g. one complex); `addr` 8-byte aligned.
#[inline(always)]
pub fn st_shared_f32x2(addr: u32, v: [f32; 2]) {
    unsafe {
        asm!("st.shared.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1],
            options(nostack))
    };
}

/// 16-byte shared store; `addr` 16-byte aligned.
#[inline(always)]
pub fn st_shared_f32x4(addr: u32, v: [f32; 4]) {
    unsafe {
        asm!("st.shared.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr, a = in(reg32) v[0],
            b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    };
}

/// 8-byte shared load; `addr` 8-byte aligned.
#[inline(always)]
pub fn ld_shared_f32x2(addr: u32) -> [f32; 2] {
    let (a, b): (f32, f32);
    unsafe {
        asm!("ld.shared.v2.f32 {{{a}, {b}}}, [{p}];", p = in(reg32) addr, a = out(reg32) a, b = out(reg32) b,
            options(readonly, nostack))
    };
    [a, b]
}

/// Closes this thread's `cp.async` copies issued since the last commit into one group
/// ([`cp_async_wait_group`] waits for groups).
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Waits until at most `N` of this thread's committed `cp.async` groups are still in flight.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// `v` rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as the bits the
/// tensor cores read.
#[inline(always)]
pub fn cvt_tf32(v: f32) -> u32 {
    let r: u32;
    unsafe { asm!("cvt.rna.tf32.f32 {r}, {v};", r = out(reg32) r, v = in(reg32) v, options(pure, nomem, nostack)) };
    r
}

/// `d = a · b + c` over one warp: A 16x8 (row-major), B 8x8 (column-major), TF32 inputs, f32
/// accumulators, fragments in the PTX ISA's m16n8k8 layout (`kernels_gpu::conv::igemm`
/// spells it out).
#[inline(always)]
pub fn mma_tf32_m16n8k8(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let (d0, d1, d2, d3): (f32, f32, f32, f32);
    unsafe {
        asm!("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
            d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
            a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
            b0 = in(reg32) b[0], b1 = in(reg32) b[1],
            c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
            options(pure, nomem, nostack))
    };
    [d0, d1, d2, d3]
}

/// Orders this warpgroup's register writes before the `wgmma_*` that read them: PTX asks for it
/// before a warpgroup's first `wgmma.mma_async` and after any other write of its A fragment or
/// accumulator registers (sm_90a).
#[inline(always)]
pub fn wgmma_fence() {
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) };
}

/// Closes the group of `wgmma.mma_async` issued since the last one (sm_90a).
#[inline(always)]
pub fn wgmma_commit_group() {
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// Waits until at most `N` groups of `wgmma.mma_async` are pending; their accumulators (and the
/// A fragments they read) may be touched only then (sm_90a).
#[inline(always)]
pub fn wgmma_wait_group<const N: u32>() {
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
}

/// Where a `wgmma`'s accumulator `d` becomes readable, for LLVM: LLVM takes the `wgmma` asm to
/// write `d` at once, so it could move arithmetic on `d` above the [`wgmma_wait_group`] that
/// waits for it; an empty asm that rewrites each register after the wait keeps it below
/// (CUTLASS's `warpgroup_fence_operand`). No instruction.
#[inline(always)]
pub fn wgmma_fence_operands<const NT: usize>(d: &mut [[f32; 4]; NT]) {
    for tile in d.iter_mut() {
        for v in tile.iter_mut() {
            unsafe { asm!("/* {0} */", inout(reg32) * v, options(nostack)) };
        }
    }
}

/// `", {}, {}, {}, {}"`: the accumulator placeholders of one more n8 tile of a `wgmma`.
macro_rules! wgmma_tile_placeholders {
    ($j:tt) => {
        ", {}, {}, {}, {}"
    };
}

/// `$name::<NT>(d, a, b, accumulate)`: `wgmma.mma_async.m64n{8 NT}k8` with TF32 inputs, f32
/// accumulators, for one warpgroup: `d = a · b + (accumulate ? d : 0)`, A (64 x 8) in registers
/// in the m16n8k8 A layout per warp (warp w: rows 16w ..), B (8 x 8 NT) in shared memory at
/// descriptor `b`, `d` one m16n8 accumulator tile per n8 column block (the m16n8k8 layout).
/// Asynchronous: issue after [`wgmma_fence`], read `d` after [`wgmma_commit_group`] and
/// [`wgmma_wait_group`].
macro_rules! wgmma_m64k8 {
    ($name:ident, $n:literal, $first:tt $($j:tt)*) => {
        #[inline(always)]
        pub fn $name<const NT: usize>(d: &mut [[f32; 4]; NT], a: [u32; 4], b: u64, accumulate: bool) {
            unsafe {
                asm!(
                    concat!(
                        "{{ .reg .pred p; setp.ne.u32 p, {scale_d}, 0; wgmma.mma_async.sync.aligned.m64n", $n,
                        "k8.f32.tf32.tf32 {{{}, {}, {}, {}", $(wgmma_tile_placeholders!($j),)*
                        "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1; }}"
                    ),
                    inout(reg32) d[$first][0], inout(reg32) d[$first][1], inout(reg32) d[$first][2], inout(reg32) d[$first][3],
                    $(inout(reg32) d[$j][0], inout(reg32) d[$j][1], inout(reg32) d[$j][2], inout(reg32) d[$j][3],)*
                    a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                    b = in(reg64) b, scale_d = in(reg32) accumulate as u32,
                    options(nostack)
                )
            };
        }
    };
}
wgmma_m64k8!(wgmma_m64n24k8, "24", 0 1 2);
wgmma_m64k8!(wgmma_m64n32k8, "32", 0 1 2 3);
wgmma_m64k8!(wgmma_m64n56k8, "56", 0 1 2 3 4 5 6);
wgmma_m64k8!(wgmma_m64n64k8, "64", 0 1 2 3 4 5 6 7);

/// The `wgmma_m64n{8 NT}k8` of `NT` n8 tiles: those of the warpgroup tiles (a CPU test
/// keeps the variant table to them; the match folds away).
#[inline(always)]
pub fn wgmma_m64k8<const NT: usize>(d: &mut [[f32; 4]; NT], a: [u32; 4], b: u64, accumulate: bool) {
    match NT {
        3 => wgmma_m64n24k8(d, a, b, accumulate),
        4 => wgmma_m64n32k8(d, a, b, accumulate),
        7 => wgmma_m64n56k8(d, a, b, accumulate),
        8 => wgmma_m64n64k8(d, a, b, accumulate),
        _ => unreachable!(),
    }
}

/// `ld.global.nc` of `global_addr` where `load`, else 0, without a branch (a uniform
/// condition tested per element put a branch around every load of a store loop).
#[inline(always)]
pub fn ldg_nc_f32_if(load: bool, global_addr: u64) -> f32 {
    let v: f32;
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; mov.b32 {v}, 0; @p ld.global.nc.f32 {v}, [{a}]; }}",
            c = in(reg32) load as u32, a = in(reg64) global_addr, v = out(reg32) v, options(readonly, nostack))
    };
    v
}

/// `st.global.f32` where `store`, without a branch (a store loop's per-element bounds test
/// otherwise becomes a branch around each store and its epilogue).
#[inline(always)]
pub fn stg_f32_if(store: bool, global_addr: u64, v: f32) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; @p st.global.f32 [{a}], {v}; }}",
            c = in(reg32) store as u32, a = in(reg64) global_addr, v = in(reg32) v, options(nostack))
    };
}

/// [`stg_f32x4`] where `store`, without a branch; `global_addr` 16-byte aligned.
#[inline(always)]
pub fn stg_f32x4_if(store: bool, global_addr: u64, v: [f32; 4]) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; @p st.global.v4.f32 [{p}], {{{a}, {b}, {d}, {e}}}; }}",
            c = in(reg32) store as u32, p = in(reg64) global_addr,
            a = in(reg32) v[0], b = in(reg32) v[1], d = in(reg32) v[2], e = in(reg32) v[3], options(nostack))
    };
}

/// [`ldg_nc_f32x4`] where `load`, else zeros, without a branch; `global_addr` 16-byte aligned.
#[inline(always)]
pub fn ldg_nc_f32x4_if(load: bool, global_addr: u64) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {l}, 0; mov.b32 {a}, 0; mov.b32 {b}, 0; mov.b32 {c}, 0; mov.b32 {d}, 0; \
              @p ld.global.nc.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}]; }}",
            l = in(reg32) load as u32, p = in(reg64) global_addr,
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// [`ldg_nc_f32x2`] where `load`, else zeros, without a branch; `global_addr` 8-byte aligned.
#[inline(always)]
pub fn ldg_nc_f32x2_if(load: bool, global_addr: u64) -> [f32; 2] {
    let (a, b): (f32, f32);
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {l}, 0; mov.b32 {a}, 0; mov.b32 {b}, 0; \
              @p ld.global.nc.v2.f32 {{{a}, {b}}}, [{p}]; }}",
            l = in(reg32) load as u32, p = in(reg64) global_addr, a = out(reg32) a, b = out(reg32) b,
            options(readonly, nostack))
    };
    [a, b]
}

/// [`stg_f32x2`] where `store`, without a branch; `global_addr` 8-byte aligned.
#[inline(always)]
pub fn stg_f32x2_if(store: bool, global_addr: u64, v: [f32; 2]) {
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {c}, 0; @p st.global.v2.f32 [{p}], {{{a}, {b}}}; }}",
            c = in(reg32) store as u32, p = in(reg64) global_addr, a = in(reg32) v[0], b = in(reg32) v[1],
            options(nostack))
    };
}

/// `V` consecutive f32 (`V` of 1, 2 or 4) from `global_addr` where `load`, else zeros, in one
/// load; `global_addr` aligned to `4·V` bytes.
#[inline(always)]
pub fn ldg_nc_vec_if<const V: usize>(load: bool, global_addr: u64) -> [f32; V] {
    const { assert!(V == 1 || V == 2 || V == 4) };
    let mut out = [0.0f32; V];
    match V {
        4 => out.copy_from_slice(&ldg_nc_f32x4_if(load, global_addr)),
        2 => out.copy_from_slice(&ldg_nc_f32x2_if(load, global_addr)),
        _ => out[0] = ldg_nc_f32_if(load, global_addr),
    }
    out
}

/// `V` consecutive f32 (`V` of 1, 2 or 4) to `global_addr` where `store`, in one store;
/// `global_addr` aligned to `4·V` bytes.
#[inline(always)]
pub fn stg_vec_if<const V: usize>(store: bool, global_addr: u64, v: [f32; V]) {
    const { assert!(V == 1 || V == 2 || V == 4) };
    match V {
        4 => stg_f32x4_if(store, global_addr, [v[0], v[1], v[2], v[3]]),
        2 => stg_f32x2_if(store, global_addr, [v[0], v[1]]),
        _ => stg_f32_if(store, global_addr, v[0]),
    }
}
