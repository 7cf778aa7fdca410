//! Host-free GPU timing.
//!
//! A round queues a gate (a kernel that waits for the host), then `reps` launches with an
//! event after each, and only then opens the gate: by the time the GPU runs the first launch
//! the whole round is queued, so the time between two events is GPU time alone. Host work
//! between launches (cudarc's bookkeeping, cuDNN building a variant pack, a sleep) cannot
//! enter it, and every implementation is timed by the same loop. Implementations are
//! interleaved round by round, so that a change of clocks or of the neighbours' load falls
//! on all of them alike.
//!
//! The loop is written against [`DeviceQueue`], which the GPU implements with CUDA events
//! and the timing gate ([`GpuQueue`]) and a test implements with a simulated clock.

use crate::{Error, Gpu, Result, error::Context};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, LaunchConfig, sys};
use kernels_gpu::timing::{GATE_KERNEL, GateParams};
use serde::Serialize;
use std::sync::Arc;

/// What the timing loop needs of a device.
pub trait DeviceQueue {
    /// Queues the gate: work queued after it waits for [`DeviceQueue::release`].
    fn hold(&mut self) -> Result<()>;
    /// Opens the gate from the host.
    fn release(&mut self) -> Result<()>;
    /// Queues a timestamp and returns its id (ids restart after each [`DeviceQueue::hold`]).
    fn mark(&mut self) -> Result<usize>;
    /// Waits until everything queued has run. `Ok(false)` when the gate gave up waiting
    /// before the release came (the round may then contain host time).
    fn drain(&mut self) -> Result<bool>;
    /// Milliseconds between two marks of the last round.
    fn elapsed_ms(&self, from: usize, to: usize) -> Result<f64>;
}

/// How many launches, in how many interleaved rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Schedule {
    /// Untimed launches of each implementation before the first round.
    pub warmup: usize,
    pub rounds: usize,
    /// Timed launches of each implementation per round.
    pub reps: usize,
}

/// The timed launches of one implementation.
#[derive(Clone, Debug, Serialize)]
pub struct Samples {
    /// Milliseconds per launch, in the order measured.
    pub ms: Vec<f64>,
    /// False where a gate timed out for this implementation (its host blocks while queued:
    /// it was then timed without a gate, and host time may be in its numbers).
    pub host_free: bool,
}

impl Samples {
    /// The `q`-quantile (0 ≤ q ≤ 1), nearest rank; NaN without samples.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.ms.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = (q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank]
    }

    pub fn median(&self) -> f64 {
        self.quantile(0.5)
    }
}

/// One round of `reps` launches: `launch(queue, first + i)` for `i < reps`. `gated` puts
/// the round behind the gate; without it (for comparison only) host time between launches
/// shows up in the numbers. `Ok(None)` when the gate timed out.
pub fn time_round<Q: DeviceQueue + ?Sized>(
    queue: &mut Q,
    gated: bool,
    first: usize,
    reps: usize,
    launch: &mut dyn FnMut(&mut Q, usize) -> Result<()>,
) -> Result<Option<Vec<f64>>> {
    if gated {
        queue.hold()?;
    }
    let mut marks = Vec::with_capacity(reps + 1);
    let queued = (|| {
        marks.push(queue.mark()?);
        for i in 0..reps {
            launch(queue, first + i)?;
            marks.push(queue.mark()?);
        }
        Ok::<_, Error>(())
    })();
    // Open the gate even when queueing failed, or the GPU would wait for the timeout.
    if gated {
        queue.release()?;
    }
    let in_time = queue.drain()?;
    queued?;
    if gated && !in_time {
        return Ok(None);
    }
    marks.windows(2).map(|pair| queue.elapsed_ms(pair[0], pair[1])).collect::<Result<Vec<_>>>().map(Some)
}

/// Times `count` implementations: `launch(queue, implementation, i)` runs the `i`-th launch
/// of one (`i` counts on across rounds, so inputs can rotate). Each round times every
/// implementation once, starting one further along each round.
pub fn time_interleaved<Q: DeviceQueue + ?Sized>(
    queue: &mut Q,
    schedule: Schedule,
    count: usize,
    launch: &mut dyn FnMut(&mut Q, usize, usize) -> Result<()>,
) -> Result<Vec<Samples>> {
    let mut samples: Vec<Samples> = (0..count).map(|_| Samples { ms: Vec::new(), host_free: true }).collect();
    for which in 0..count {
        for i in 0..schedule.warmup {
            launch(queue, which, i)?;
        }
    }
    queue.drain()?;
    let mut launched = vec![schedule.warmup; count];
    for round in 0..schedule.rounds {
        for offset in 0..count {
            let which = (round + offset) % count;
            let mut run = |q: &mut Q, i: usize| launch(q, which, i);
            let ms = match time_round(queue, samples[which].host_free, launched[which], schedule.reps, &mut run)? {
                Some(ms) => ms,
                None => {
                    samples[which].host_free = false;
                    time_round(queue, false, launched[which], schedule.reps, &mut run)?
                        .expect("an ungated round cannot time out")
                }
            };
            launched[which] += schedule.reps;
            samples[which].ms.extend(ms);
        }
    }
    Ok(samples)
}

/// A first launch slower than this, and than three times the fastest so far, ends its
/// candidate's screening: one-off costs (lazy module loading, plan set-up) stay far below it,
/// so such a kernel is out of the race. (cuDNN's FFT algorithms and some engines on 200 000
/// channels took 5-8 s a launch, which the screening's next launches repeated twice.)
pub const SCREEN_CUT_MS: f64 = 250.0;

/// Screens a candidate: a first launch timed without the gate (it carries one-off costs, so it
/// can only cut the candidate, past [`SCREEN_CUT_MS`]), one host-free launch, and `reps` more
/// unless that one was already three times slower than the fastest of its class so far. A
/// candidate whose host blocks while queued (the gate times out), or whose first launch
/// outlasts the gate, is screened without the gate, flagged.
pub fn screen<Q: DeviceQueue + ?Sized>(
    queue: &mut Q,
    reps: usize,
    fastest: f64,
    launch: &mut dyn FnMut(&mut Q, usize) -> Result<()>,
) -> Result<Samples> {
    let first_ms = time_round(queue, false, 0, 1, launch)?.expect("an ungated round cannot time out")[0];
    if first_ms > SCREEN_CUT_MS.max(3.0 * fastest) {
        return Ok(Samples { ms: vec![first_ms], host_free: false });
    }
    let mut samples = Samples { ms: Vec::new(), host_free: first_ms * 1e6 < GATE_TIMEOUT_NS as f64 };
    let mut first = 1;
    for count in [1, reps] {
        let ms = match time_round(queue, samples.host_free, first, count, launch)? {
            Some(ms) => ms,
            None => {
                samples.host_free = false;
                time_round(queue, false, first, count, launch)?.expect("an ungated round cannot time out")
            }
        };
        first += count;
        samples.ms.extend(ms);
        if samples.ms[0] > 3.0 * fastest {
            break;
        }
    }
    Ok(samples)
}

/// How long the gate waits for the host before it gives up.
pub const GATE_TIMEOUT_NS: u64 = 2_000_000_000;

/// The GPU's [`DeviceQueue`]: CUDA events on one stream, and the timing gate.
pub struct GpuQueue<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    flags: HostFlags,
    events: Vec<CudaEvent>,
    used: usize,
    timeout_ns: u64,
}

impl<'g> GpuQueue<'g> {
    pub fn new(gpu: &'g Gpu, stream: &Arc<CudaStream>) -> Result<Self> {
        gpu.check_stream(stream)?;
        let flags = HostFlags::new(gpu)?;
        Ok(GpuQueue { gpu, stream: stream.clone(), flags, events: Vec::new(), used: 0, timeout_ns: GATE_TIMEOUT_NS })
    }

    /// How long a gate waits for the host (default [`GATE_TIMEOUT_NS`]).
    pub fn set_timeout(&mut self, timeout: std::time::Duration) {
        self.timeout_ns = timeout.as_nanos().min(u64::MAX as u128) as u64;
    }
}

impl DeviceQueue for GpuQueue<'_> {
    fn hold(&mut self) -> Result<()> {
        self.flags.reset();
        self.used = 0;
        let params = GateParams {
            release: self.flags.device + HostFlags::RELEASE,
            timed_out: self.flags.device + HostFlags::TIMED_OUT,
            timeout_ns: self.timeout_ns,
        };
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        // Safety: both flags live in `self.flags`, which outlives every queued gate (drop
        // synchronises the stream first).
        unsafe { self.gpu.launch(&self.stream, GATE_KERNEL, cfg, params) }
    }

    fn release(&mut self) -> Result<()> {
        self.flags.release();
        Ok(())
    }

    fn mark(&mut self) -> Result<usize> {
        if self.used == self.events.len() {
            let event =
                self.gpu.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).during("cuEventCreate")?;
            self.events.push(event);
        }
        self.events[self.used].record(&self.stream).during("cuEventRecord")?;
        self.used += 1;
        Ok(self.used - 1)
    }

    fn drain(&mut self) -> Result<bool> {
        self.stream.synchronize().during("cuStreamSynchronize")?;
        self.gpu.check_deferred()?;
        Ok(!self.flags.timed_out())
    }

    fn elapsed_ms(&self, from: usize, to: usize) -> Result<f64> {
        let (a, b) = (self.events.get(from), self.events.get(to));
        let (Some(a), Some(b)) = (a, b) else {
            return Err(Error::Timing(format!("no marks {from} and {to} in this round")));
        };
        a.elapsed_ms(b).map(f64::from).during("cuEventElapsedTime")
    }
}

/// Two `u32` flags in mapped, pinned host memory: the gate's release and its time-out.
struct HostFlags {
    host: *mut u32,
    device: u64,
    ctx: Arc<CudaContext>,
}

impl HostFlags {
    const RELEASE: u64 = 0;
    const TIMED_OUT: u64 = 4;

    fn new(gpu: &Gpu) -> Result<Self> {
        gpu.context().bind_to_thread().during("cuCtxSetCurrent")?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let host = unsafe { cudarc::driver::result::malloc_host(8, flags) }.during("cuMemHostAlloc")? as *mut u32;
        let mut device = 0;
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) }.result();
        let this = HostFlags { host, device, ctx: gpu.context().clone() };
        mapped.during("cuMemHostGetDevicePointer")?;
        this.reset();
        Ok(this)
    }

    fn reset(&self) {
        // Safety: `host` points to two u32s that live as long as `self`; the GPU only
        // reads them while a gate is queued, and `reset` runs between rounds.
        unsafe {
            self.host.write_volatile(0);
            self.host.add(1).write_volatile(0);
        }
    }

    fn release(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        unsafe { self.host.write_volatile(1) };
    }

    fn timed_out(&self) -> bool {
        unsafe { self.host.add(1).read_volatile() != 0 }
    }
}

impl Drop for HostFlags {
    fn drop(&mut self) {
        // No gate may still read the flags when they are freed.
        self.release();
        self.ctx.synchronize().ok();
        unsafe { cudarc::driver::result::free_host(self.host.cast()) }.ok();
    }
}
