//! The host-free timing loop on a simulated device: a queue that runs its items in order,
//! none before the host has queued it, the gated ones not before the host opens the gate.
//! Launchers that sleep on the host must read the same time as launchers that do not.

use convkit::{
    Error, Result,
    timing::{DeviceQueue, GATE_TIMEOUT_NS, SCREEN_CUT_MS, Samples, Schedule, screen, time_interleaved, time_round},
};

/// Host time a launch call costs, in nanoseconds.
const LAUNCH_NS: u64 = 4_000;

#[derive(Clone, Copy, Debug)]
enum Item {
    Gate { timeout_ns: u64 },
    Kernel { ns: u64 },
    Mark,
}

/// A simulated GPU stream with a host clock and a device clock.
struct SimQueue {
    host_ns: u64,
    /// When the device finished everything drained so far.
    device_ns: u64,
    queued: Vec<(u64, Item)>,
    release_ns: Option<u64>,
    gate_timeout_ns: u64,
    marks: Vec<u64>,
    timed_out: bool,
}

impl SimQueue {
    fn new(gate_timeout_ns: u64) -> Self {
        SimQueue {
            host_ns: 0,
            device_ns: 0,
            queued: Vec::new(),
            release_ns: None,
            gate_timeout_ns,
            marks: Vec::new(),
            timed_out: false,
        }
    }

    fn launch(&mut self, ns: u64) {
        self.host_ns += LAUNCH_NS;
        self.queued.push((self.host_ns, Item::Kernel { ns }));
    }

    fn sleep(&mut self, ns: u64) {
        self.host_ns += ns;
    }
}

impl DeviceQueue for SimQueue {
    fn hold(&mut self) -> Result<()> {
        self.marks.clear();
        self.release_ns = None;
        self.timed_out = false;
        self.queued.push((self.host_ns, Item::Gate { timeout_ns: self.gate_timeout_ns }));
        Ok(())
    }

    fn release(&mut self) -> Result<()> {
        self.release_ns = Some(self.host_ns);
        Ok(())
    }

    fn mark(&mut self) -> Result<usize> {
        self.queued.push((self.host_ns, Item::Mark));
        Ok(self.queued.iter().filter(|(_, i)| matches!(i, Item::Mark)).count() - 1)
    }

    fn drain(&mut self) -> Result<bool> {
        let mut t = self.device_ns;
        let mut marks = Vec::new();
        for (queued_at, item) in self.queued.drain(..) {
            t = t.max(queued_at);
            match item {
                Item::Gate { timeout_ns } => {
                    let release = self.release_ns.unwrap_or(u64::MAX);
                    if release > t + timeout_ns {
                        self.timed_out = true;
                        t += timeout_ns;
                    } else {
                        t = t.max(release);
                    }
                }
                Item::Kernel { ns } => t += ns,
                Item::Mark => marks.push(t),
            }
        }
        self.device_ns = t;
        self.host_ns = self.host_ns.max(t);
        self.marks = marks;
        Ok(!self.timed_out)
    }

    fn elapsed_ms(&self, from: usize, to: usize) -> Result<f64> {
        Ok((self.marks[to] - self.marks[from]) as f64 * 1e-6)
    }
}

const KERNEL_NS: u64 = 25_000;

#[test]
fn a_host_that_sleeps_before_each_launch_reads_the_same_gpu_time() {
    let mut q = SimQueue::new(2_000_000_000);
    let plain = time_round(&mut q, true, 0, 50, &mut |q, _| {
        q.launch(KERNEL_NS);
        Ok(())
    })
    .unwrap()
    .unwrap();
    let sleepy = time_round(&mut q, true, 0, 50, &mut |q, _| {
        q.sleep(200_000);
        q.launch(KERNEL_NS);
        Ok(())
    })
    .unwrap()
    .unwrap();
    assert_eq!(plain, sleepy);
    assert!(plain.iter().all(|&ms| ms == KERNEL_NS as f64 * 1e-6), "{plain:?}");
}

#[test]
fn without_the_gate_host_time_shows_in_the_numbers() {
    let mut q = SimQueue::new(2_000_000_000);
    let sleepy = time_round(&mut q, false, 0, 50, &mut |q, _| {
        q.sleep(200_000);
        q.launch(KERNEL_NS);
        Ok(())
    })
    .unwrap()
    .unwrap();
    let median = Samples { ms: sleepy, host_free: true }.median();
    assert!(median > 0.2, "the sleep should show without the gate: {median} ms");
}

#[test]
fn a_launcher_that_outlasts_the_gate_is_timed_ungated_and_flagged() {
    let mut q = SimQueue::new(1_000_000); // 1 ms
    let schedule = Schedule { warmup: 1, rounds: 3, reps: 10 };
    let samples = time_interleaved(&mut q, schedule, 2, &mut |q, which, _| {
        if which == 1 {
            q.sleep(500_000); // ten of these outlast the 1 ms gate
        }
        q.launch(KERNEL_NS);
        Ok(())
    })
    .unwrap();
    assert!(samples[0].host_free && !samples[1].host_free);
    assert!(samples[0].ms.iter().all(|&ms| ms == KERNEL_NS as f64 * 1e-6));
    assert!(samples[1].median() > 0.5, "{:?}", samples[1].ms);
    assert_eq!((samples[0].ms.len(), samples[1].ms.len()), (30, 30));
}

#[test]
fn rounds_interleave_and_launch_indices_run_on() {
    let mut q = SimQueue::new(2_000_000_000);
    let schedule = Schedule { warmup: 2, rounds: 4, reps: 5 };
    let mut seen: Vec<(usize, usize)> = Vec::new();
    let samples = time_interleaved(&mut q, schedule, 3, &mut |q, which, i| {
        seen.push((which, i));
        q.launch(KERNEL_NS * (which as u64 + 1));
        Ok(())
    })
    .unwrap();
    for (which, s) in samples.iter().enumerate() {
        assert_eq!(s.ms.len(), 20);
        assert!(s.ms.iter().all(|&ms| ms == (KERNEL_NS * (which as u64 + 1)) as f64 * 1e-6));
        let launches: Vec<usize> = seen.iter().filter(|(w, _)| *w == which).map(|(_, i)| *i).collect();
        assert_eq!(launches, (0..22).collect::<Vec<_>>(), "warm-up 0..2, then 2..22 across rounds");
    }
    // After the warm-up, blocks of 5 launches; each round starts one candidate further along.
    let order: Vec<usize> = seen[6..].chunks(5).map(|block| block[0].0).collect();
    assert_eq!(order, vec![0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]);
}

#[test]
fn a_failing_launch_still_opens_the_gate() {
    let mut q = SimQueue::new(2_000_000_000);
    let err = time_round(&mut q, true, 0, 5, &mut |q, i| {
        if i == 3 {
            return Err(Error::Timing("launch failed".into()));
        }
        q.launch(KERNEL_NS);
        Ok(())
    })
    .unwrap_err();
    assert!(err.to_string().contains("launch failed"));
    assert!(q.release_ns.is_some() && !q.timed_out);
}

#[test]
fn quantiles_by_nearest_rank() {
    let s = Samples { ms: (1..=11).rev().map(f64::from).collect(), host_free: true };
    assert_eq!((s.quantile(0.1), s.median(), s.quantile(0.9)), (2.0, 6.0, 10.0));
    assert!(Samples { ms: vec![], host_free: true }.median().is_nan());
}

/// Screens a kernel of `ns` against `fastest` ms: its samples and how many launches it took.
fn screened(ns: u64, fastest: f64) -> (Samples, usize) {
    let mut q = SimQueue::new(GATE_TIMEOUT_NS);
    let mut launches = 0;
    let samples = screen(&mut q, 5, fastest, &mut |q, _| {
        launches += 1;
        q.launch(ns);
        Ok(())
    })
    .unwrap();
    (samples, launches)
}

#[test]
fn screening_cuts_a_slow_candidate_after_its_first_launch() {
    // Within three times the fastest: the first launch, one timed, five more, host-free.
    let (s, launches) = screened(KERNEL_NS, 0.02);
    assert_eq!((launches, s.ms.len(), s.host_free), (7, 6, true));
    // Three times slower, but fast in absolute terms: timed once more before it is cut.
    let (s, launches) = screened(KERNEL_NS, 0.005);
    assert_eq!((launches, s.ms.len()), (2, 1));
    // Past the cut and three times the fastest: one launch, flagged as not host-free.
    let slow = (2.0 * SCREEN_CUT_MS * 1e6) as u64;
    let (s, launches) = screened(slow, 0.1);
    assert_eq!((launches, s.ms.len(), s.host_free), (1, 1, false));
    assert!(s.ms[0] >= 2.0 * SCREEN_CUT_MS);
    // Past the cut but the fastest is slow too: screened; ungated from the start when a launch
    // outlasts the gate (no timed-out round to repeat).
    let long = 2 * GATE_TIMEOUT_NS;
    let (s, launches) = screened(long, long as f64 * 1e-6);
    assert_eq!((launches, s.ms.len(), s.host_free), (7, 6, false));
}
