//! imc-sim, the simulator: known truth for what this machine cannot run. A crate of its own on
//! top of imc's library: it drives the real plan, the real attributor and the real recording
//! writer, and imc cannot import it (imc-user does not depend on it; tests/layers.rs holds its
//! manifest to that): only the tools (imc-tools: the accuracy and benchmark binaries) and the
//! tests do.
//!
//! Synthetic timelines with known truth, for tests and benchmarks: tasks with fixed bandwidths
//! scheduled on CPUs, package counters that integrate exactly what ran (plus DMA), weight
//! counters proportional to each task's traffic, and the record stream the eBPF program would
//! emit for it (timer ticks, context switches in precise mode, userspace fallback reads).
//!
//! Generation is a streaming iterator ordered by time, so that a 64-CPU × 1000 Hz × 60 s
//! benchmark stream never has to sit in memory (3.84 M records × 240 bytes).
//!
//! Two slot layouts: the fixed one of [`Scenario::specs`] (package read and write, LLC-miss
//! weights), or with [`Scenario::layout`] whatever slots a real plan chose ([`Layout`]: its
//! package slots read by the plan's reader CPUs at most once per tick period, its per-CPU
//! weights of local and remote traffic, userspace reads of packages no tick read lately), with
//! each task's memory on any package and weights that see only a fraction of its bytes
//! ([`TaskTraits`]).
pub mod record;
pub mod scenario;
mod synth;

pub use synth::{LatencyModel, Layout, Readers, Scenario, SynthSlot, SynthTask, TaskTraits};

use imc::model::{Direction, StallPart};
use imc_common::{KIND_SWITCH, KIND_TICK, MAX_SLOTS, Record, SlotReading};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

impl Scenario {
    /// The scenario's record stream, generated as it is read.
    pub fn stream(&self) -> SynthStream {
        SynthStream::new(self.clone())
    }
}

/// One item of the stream, in time order.
#[derive(Clone, Copy, Debug)]
// Ticks are nearly every item: boxing them would allocate per record for nothing.
#[allow(clippy::large_enum_variant)]
pub enum SynthItem {
    Tick(Record),
    /// A userspace read of a package counter: (package id, slot, t_ns, value).
    PackageRead(u32, usize, u64, u64),
    /// A point in time (see `Scenario::mark_every_ns`); `SynthStream::truth` is exact here.
    Mark(u64),
}

/// What really happened, to compare attribution against.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// Per task (index of `Scenario::tasks`): bytes read and written while it ran.
    pub task_read: Vec<f64>,
    pub task_write: Vec<f64>,
    /// Per package: DMA bytes.
    pub dma: Vec<f64>,
    /// Per task: core cycles stalled on memory loads, and cycles run.
    pub task_stall: Vec<f64>,
    pub task_cycles: Vec<f64>,
    /// Per package: its read queue as the controller's counters see it.
    pub queues: Vec<QueueTruth>,
}

/// One package's read queue over the run: the occupancy, inserts and DRAM clocks its counters
/// count (true, fractional), and the latency the reads really had.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueTruth {
    /// Σ queue length per DRAM clock (Little: lines/s × latency × clocks).
    pub occupancy: f64,
    /// Read lines that entered the queue.
    pub inserts: f64,
    pub dram_clocks: f64,
    /// Σ latency (ns) × lines: ÷ `inserts`, the reads' mean latency.
    pub latency_ns_lines: f64,
}

impl QueueTruth {
    /// The reads' mean latency over the run (ns), or None without reads.
    pub fn latency_ns(&self) -> Option<f64> {
        (self.inserts > 0.0).then(|| self.latency_ns_lines / self.inserts)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Schedule change on a CPU (index into its schedule).
    Switch(u32, usize),
    Tick(u32),
    Fallback,
    /// A userspace drain of a plan-driven layout.
    Drain,
    Mark,
}

/// Per-CPU weight counts (true, fractional) of a plan-driven layout: read and write traffic to
/// the CPU's own package's memory, and to other packages'.
#[derive(Clone, Copy, Default)]
struct CpuWeights {
    local: [f64; 2],
    remote: [f64; 2],
}

impl CpuWeights {
    /// What a weight slot of `direction` has counted (`share` of the lines it sees): the
    /// remote lines, or the local ones, or both where it cannot tell them apart.
    fn counts(
        &self,
        direction: Option<Direction>,
        remote: bool,
        sees_remote: bool,
        share: f64,
    ) -> f64 {
        let acc = if remote {
            self.remote
        } else if sees_remote {
            [
                self.local[0] + self.remote[0],
                self.local[1] + self.remote[1],
            ]
        } else {
            self.local
        };
        share
            * match direction {
                Some(Direction::Read) => acc[0],
                Some(Direction::Write) => acc[1],
                _ => acc[0] + acc[1],
            }
    }
}

/// A record of `cpu` at `t` with `nr_slots` slots, all read as 0 and no task named yet.
fn blank_record(cpu: u32, kind: u8, t: u64, nr_slots: u8) -> Record {
    Record {
        t_ns: t,
        cgroup_id: 0,
        cpu,
        pid: 0,
        tgid: 0,
        kind,
        nr_slots,
        failed_mask: 0,
        flags: 0,
        comm: [0; 16],
        t0_ns: 0,
        on_ns: 0,
        slots: [SlotReading::default(); MAX_SLOTS],
    }
}

/// Where the weight counters of every CPU start: 2^64 minus a few million, so that every busy
/// CPU's counters wrap early in a run.
fn weight_start(cpu: usize) -> u64 {
    u64::MAX - 3_000_000 * (cpu as u64 + 1)
}

pub struct SynthStream {
    sc: Scenario,
    heap: BinaryHeap<Reverse<(u64, Ev)>>,
    pkg_of: Vec<usize>,
    /// Per CPU: running task.
    running: Vec<Option<usize>>,
    /// Per CPU: weight counters (true counts): reads and writes.
    weight: Vec<f64>,
    /// Per CPU: its stall counters (true counts): cycles stalled on memory and cycles.
    stall: Vec<[f64; 2]>,
    /// Every CPU's cpu-clock count (ns): it counts whether a task or the idle task runs, so
    /// every CPU's is the same sum.
    clock_ns: f64,
    /// Per package: the traffic (bytes/s) and read lines per second of the running tasks whose
    /// memory it is, kept as tasks switch; its latency (ns) over the last step, and the sum of
    /// its latency over time (ns × s).
    task_bps: Vec<f64>,
    task_read_lines: Vec<f64>,
    pkg_latency: Vec<f64>,
    latency_integral: Vec<f64>,
    /// Per package: the rates (per second) of its counters' task parts, kept as tasks switch:
    /// the controller's bytes read and written in a plan-driven layout, else its CPUs' tasks'
    /// read and written lines.
    counter_rate: Vec<[f64; 2]>,
    /// Per CPU: the time its counters and its task's truth were integrated to, and its
    /// memory's latency sum then.
    since: Vec<u64>,
    since_integral: Vec<f64>,
    /// The CPUs integrated at every step (see [`SynthStream::saturates`]).
    eager: Vec<usize>,
    weight_w: Vec<f64>,
    /// Per package: cumulative read/write counts (true) and their rate.
    pkg_read: Vec<f64>,
    pkg_write: Vec<f64>,
    t_now: u64,
    records_of_cpu: Vec<u64>,
    /// What ran, exact at each [`SynthItem::Mark`] and once the stream has ended (each CPU's
    /// part is integrated when it is read, switches, or at those points).
    pub truth: Truth,
    queue: Vec<SynthItem>,
    /// Layout mode: per CPU its weights; per package the controller's task bytes (read,
    /// write), the time its package slots were last read by a tick (the program's
    /// group clock) and by anyone (userspace's freshness).
    cpu_w: Vec<CpuWeights>,
    ctrl: Vec<[f64; 2]>,
    group_last: Vec<Option<u64>>,
    read_last: Vec<Option<u64>>,
    /// Layout mode: per CPU, the package whose slots its ticks read (usize::MAX: none).
    reads_pkg: Vec<usize>,
    /// Layout mode: per CPU, the time of its last record (the program's last run there).
    last_rec: Vec<Option<u64>>,
    traits: Vec<TaskTraits>,
    /// Per CPU: the index (counted from the start of the run) of `schedule[c][0]`, and of the
    /// entry whose Switch event is pending (None: the CPU's schedule ran out). See
    /// [`SynthStream::extend_schedule`].
    sched_base: Vec<usize>,
    sched_next: Vec<Option<usize>>,
}

impl SynthStream {
    fn new(sc: Scenario) -> SynthStream {
        let ncpu = sc.schedule.len();
        let mut pkg_of = vec![usize::MAX; ncpu];
        for (p, cpus) in sc.packages.iter().enumerate() {
            for &c in cpus {
                if let Some(x) = pkg_of.get_mut(c as usize) {
                    *x = p;
                }
            }
        }
        let mut heap = BinaryHeap::new();
        let period = 1_000_000_000 / u64::from(sc.freq_hz.max(1));
        for c in 0..ncpu as u32 {
            // CPUs tick at different phases, as their hrtimers do.
            let phase = (u64::from(c) * 7919) % period;
            heap.push(Reverse((phase, Ev::Tick(c))));
            if let Some(first) = sc.schedule[c as usize].first() {
                heap.push(Reverse((first.0, Ev::Switch(c, 0))));
            }
        }
        let mut reads_pkg = vec![usize::MAX; ncpu];
        if let Some(l) = &sc.layout {
            // Userspace reads every package once as the sampler starts (the drainer's first
            // act), so a package whose readers idle has its baseline at the start, not at the
            // first drain; then at every drain.
            heap.push(Reverse((0, Ev::Drain)));
            for (p, cpus) in l.readers.iter().enumerate() {
                for &c in cpus {
                    if let Some(x) = reads_pkg.get_mut(c as usize) {
                        *x = p;
                    }
                }
            }
        } else if sc.fallback_every_ns.is_some() {
            heap.push(Reverse((0, Ev::Fallback)));
        }
        if let Some(every) = sc.mark_every_ns {
            heap.push(Reverse((every.max(1), Ev::Mark)));
        }
        let npkg = sc.packages.len();
        let truth = Truth {
            task_read: vec![0.0; sc.tasks.len()],
            task_write: vec![0.0; sc.tasks.len()],
            dma: vec![0.0; npkg],
            task_stall: vec![0.0; sc.tasks.len()],
            task_cycles: vec![0.0; sc.tasks.len()],
            queues: vec![QueueTruth::default(); npkg],
        };
        SynthStream {
            heap,
            pkg_of,
            running: vec![None; ncpu],
            weight: vec![0.0; ncpu],
            weight_w: vec![0.0; ncpu],
            stall: vec![[0.0; 2]; ncpu],
            clock_ns: 0.0,
            task_bps: vec![0.0; npkg],
            task_read_lines: vec![0.0; npkg],
            pkg_latency: vec![0.0; npkg],
            latency_integral: vec![0.0; npkg],
            counter_rate: vec![[0.0; 2]; npkg],
            since: vec![0; ncpu],
            since_integral: vec![0.0; ncpu],
            eager: Vec::new(),
            pkg_read: vec![0.0; npkg],
            pkg_write: vec![0.0; npkg],
            t_now: 0,
            records_of_cpu: vec![0; ncpu],
            truth,
            queue: Vec::new(),
            cpu_w: vec![CpuWeights::default(); ncpu],
            ctrl: vec![[0.0; 2]; npkg],
            group_last: vec![None; npkg],
            read_last: vec![None; npkg],
            reads_pkg,
            last_rec: vec![None; ncpu],
            traits: (0..sc.tasks.len()).map(|i| sc.traits_of(i)).collect(),
            sched_base: vec![0; ncpu],
            sched_next: sc
                .schedule
                .iter()
                .map(|s| (!s.is_empty()).then_some(0))
                .collect(),
            sc,
        }
    }

    /// Appends `more` (sorted, not before what CPU `cpu`'s schedule already holds) to its
    /// schedule and forgets the entries already played, so that a long run's schedule can be
    /// given a chunk at a time instead of held whole (38 M switches of a 192-CPU benchmark).
    /// Give each chunk before the stream reaches it: a CPU whose schedule ran out resumes at
    /// the first new entry, or now if that is past.
    pub fn extend_schedule(&mut self, cpu: usize, more: &[(u64, Option<usize>)]) {
        let Some(sched) = self.sc.schedule.get_mut(cpu) else {
            return;
        };
        let base = self.sched_base[cpu];
        let played = self.sched_next[cpu].map_or(sched.len(), |i| i - base);
        sched.drain(..played);
        self.sched_base[cpu] = base + played;
        sched.extend_from_slice(more);
        if self.sched_next[cpu].is_none()
            && let Some(&(t, _)) = more.first()
        {
            let i = self.sched_base[cpu] + sched.len() - more.len();
            self.sched_next[cpu] = Some(i);
            self.heap
                .push(Reverse((t.max(self.t_now), Ev::Switch(cpu as u32, i))));
        }
    }

    /// Integrates the packages from t_now to t with the tasks now running (the CPUs that run a
    /// task whose stalls may saturate too), in steps of the number of packages: each package's
    /// queue and latency from its traffic, its counters from its running tasks' rates, every
    /// CPU's cpu-clock. A CPU's own counters and its task's truth are integrated when the CPU
    /// is read or switches ([`Self::integrate_cpu`]), so an event costs the same on 192 CPUs
    /// as on 2.
    fn advance(&mut self, t: u64) {
        if t <= self.t_now {
            return;
        }
        let dt = (t - self.t_now) as f64 / 1e9;
        let model = self.sc.latency;
        for p in 0..self.truth.queues.len() {
            let dma = self.sc.dma_bps.get(p).copied().unwrap_or(0.0);
            let lat = model.latency_ns(dma + self.task_bps[p], self.sc.peak_bps.get(p).copied());
            self.pkg_latency[p] = lat;
            self.latency_integral[p] += lat * dt;
            let q = &mut self.truth.queues[p];
            let lines = (dma / 64.0 + self.task_read_lines[p]) * dt;
            q.inserts += lines;
            q.occupancy += lines * lat * 1e-9 * model.dram_hz;
            q.dram_clocks += dt * model.dram_hz;
            q.latency_ns_lines += lines * lat;
            let [r, w] = self.counter_rate[p];
            if self.sc.layout.is_some() {
                self.ctrl[p][0] += r * dt;
                self.ctrl[p][1] += w * dt;
            } else {
                self.pkg_read[p] += r * dt;
                self.pkg_write[p] += w * dt;
            }
        }
        self.clock_ns += dt * 1e9;
        self.t_now = t;
        for p in 0..self.truth.dma.len() {
            self.truth.dma[p] = self.dma_bytes(p);
        }
        for i in 0..self.eager.len() {
            self.integrate_cpu(self.eager[i]);
        }
    }

    /// CPU `c` from its last integration to t_now with the task it runs: its stalled cycles
    /// at its memory's latency and its cycles, its task's traffic in the truth, and its
    /// weights. Its stalled share of cycles is `stall_per_miss × lines/s × latency`, summed over
    /// the package's latency integral; a task whose share could pass 1 (where it is clamped) is
    /// integrated at every step instead, at that step's latency.
    fn integrate_cpu(&mut self, c: usize) {
        let since = std::mem::replace(&mut self.since[c], self.t_now);
        let Some(ti) = self.running[c] else { return };
        let m = self.memory_index(ti, c);
        let integral = self.latency_integral.get(m).copied().unwrap_or(0.0);
        let since_integral = std::mem::replace(&mut self.since_integral[c], integral);
        let dt = (self.t_now - since) as f64 / 1e9;
        if dt <= 0.0 {
            return;
        }
        let model = self.sc.latency;
        let cycles = dt * model.cpu_hz;
        let per_latency = self.stall_share_per_ns(ti);
        // At the latency of this step (a saturating task is integrated at every step), or the
        // idle latency of a CPU in no package; else summed over the latency's integral.
        let stalled = if self.saturates(ti) || m >= self.latency_integral.len() {
            let l = self.pkg_latency.get(m).copied().unwrap_or(model.idle_ns);
            (per_latency * l).clamp(0.0, 1.0) * cycles
        } else {
            per_latency * (integral - since_integral) * model.cpu_hz
        };
        let task = &self.sc.tasks[ti];
        let tr = self.traits[ti];
        self.stall[c][0] += stalled;
        self.stall[c][1] += cycles;
        self.truth.task_stall[ti] += stalled;
        self.truth.task_cycles[ti] += cycles;
        let (r, w) = (task.read_bps * dt, task.write_bps * dt);
        self.truth.task_read[ti] += r;
        self.truth.task_write[ti] += w;
        if self.sc.layout.is_some() {
            let own = self.pkg_of.get(c).copied().unwrap_or(usize::MAX);
            let cw = &mut self.cpu_w[c];
            let acc = if m == own {
                &mut cw.local
            } else {
                &mut cw.remote
            };
            acc[0] += r * tr.read_weight_per_byte;
            acc[1] += w * tr.write_weight_per_byte;
        } else if self.sc.directed_weights {
            self.weight[c] += r / 64.0;
            self.weight_w[c] += w / 64.0;
        } else {
            self.weight[c] += (r + w) / 64.0;
        }
    }

    /// Every CPU integrated to t_now: the truth is exact.
    fn integrate_all(&mut self) {
        for c in 0..self.running.len() {
            self.integrate_cpu(c);
        }
    }

    /// Task `ti`'s stalled share of cycles per ns of latency: `stall_per_miss × lines/s`.
    fn stall_share_per_ns(&self, ti: usize) -> f64 {
        self.traits[ti].stall_per_miss * self.sc.tasks[ti].read_bps / 64.0 * 1e-9
    }

    /// Whether task `ti`'s stalled share could reach 1 at the model's highest latency, where
    /// the share is clamped and no longer follows the latency's sum.
    fn saturates(&self, ti: usize) -> bool {
        self.stall_share_per_ns(ti) * self.sc.latency.max_latency_ns() >= 1.0
    }

    /// CPU `c` runs `next` from t_now: what ran is integrated, and the packages' rates and the
    /// CPUs integrated at every step follow the change.
    fn switch_to(&mut self, c: usize, next: Option<usize>) {
        self.integrate_cpu(c);
        if let Some(ti) = self.running[c] {
            self.add_rates(c, ti, -1.0);
        }
        self.running[c] = next;
        self.eager.retain(|&e| e != c);
        if let Some(ti) = next {
            self.add_rates(c, ti, 1.0);
            let m = self.memory_index(ti, c);
            self.since_integral[c] = self.latency_integral.get(m).copied().unwrap_or(0.0);
            if self.saturates(ti) {
                self.eager.push(c);
            }
        }
    }

    /// Task `ti` on CPU `c` added to (`sign` 1) or taken from (-1) its packages' rates: its
    /// memory's traffic and read lines, and the counters that count it (the controller of its
    /// memory in a plan-driven layout, else its CPU's package's lines).
    fn add_rates(&mut self, c: usize, ti: usize, sign: f64) {
        let task = &self.sc.tasks[ti];
        let (read, write) = (sign * task.read_bps, sign * task.write_bps);
        let m = self.memory_index(ti, c);
        if m < self.task_bps.len() {
            self.task_bps[m] += read + write;
            self.task_read_lines[m] += read / 64.0;
        }
        if self.sc.layout.is_some() {
            if let Some(rate) = self.counter_rate.get_mut(m) {
                rate[0] += read;
                rate[1] += write;
            }
        } else if let Some(rate) = self
            .pkg_of
            .get(c)
            .and_then(|&own| self.counter_rate.get_mut(own))
        {
            rate[0] += read / 64.0;
            rate[1] += write / 64.0;
        }
    }

    /// The package (index) whose memory serves task `ti` on CPU `c`.
    fn memory_index(&self, ti: usize, c: usize) -> usize {
        let own = self.pkg_of.get(c).copied().unwrap_or(usize::MAX);
        if self.sc.layout.is_some() {
            self.traits[ti].memory_package.unwrap_or(own)
        } else {
            own
        }
    }

    /// DMA bytes of package p up to now, computed from the time rather than accumulated, so
    /// that a round rate gives exact integer counts at round times (the idle-package test
    /// compares unattributed bytes for equality).
    fn dma_bytes(&self, p: usize) -> f64 {
        self.sc.dma_bps.get(p).copied().unwrap_or(0.0) * self.t_now as f64 / 1e9
    }

    /// The package counter of `slot` (0 read, 1 write) of package `p` now: what a userspace
    /// read at the last item's time returns.
    pub fn package_value(&self, p: usize, slot: usize) -> u64 {
        self.pkg_value(p, slot == 1)
    }

    fn pkg_value(&self, p: usize, write: bool) -> u64 {
        let v = if write {
            self.pkg_write[p]
        } else {
            self.pkg_read[p] + self.dma_bytes(p) / 64.0
        };
        self.sc.counter_start.wrapping_add(v.floor() as u64) & ((1u64 << 48) - 1)
    }

    /// Package `p`'s counter of a plan-driven Traffic slot now: the sum of its channels'
    /// counts (whole counts of each direction).
    fn layout_pkg_value(&self, p: usize, direction: Direction, bytes_per_count: f64) -> u64 {
        let ctrl = self.ctrl.get(p).copied().unwrap_or([0.0; 2]);
        let bpc = if bytes_per_count > 0.0 {
            bytes_per_count
        } else {
            64.0
        };
        let read = ((ctrl[0] + self.dma_bytes(p)) / bpc).floor() as u64;
        let write = (ctrl[1] / bpc).floor() as u64;
        let v = match direction {
            Direction::Read => read,
            Direction::Write => write,
            Direction::Total => read + write,
        };
        // The kernel's 64-bit counts start at zero when opened; a sum never wraps in a run.
        v.wrapping_add(self.sc.counter_start)
    }

    /// A record of a plan-driven layout: the running task, its CPU's weights, and the package
    /// slots when this CPU is a reader of its package and the group was not read within the
    /// program's minimum gap.
    fn layout_record(&mut self, cpu: u32, kind: u8, t: u64) -> Record {
        let c = cpu as usize;
        let layout = self.sc.layout.as_ref().expect("layout mode");
        let n = layout.slots.len().min(MAX_SLOTS);
        let mut rec = blank_record(cpu, kind, t, n as u8);
        self.describe(&mut rec);
        let p = self.reads_pkg[c];
        let period = 1_000_000_000 / u64::from(self.sc.freq_hz.max(1));
        let flushes = !self.sc.aggregate
            || kind != KIND_SWITCH
            || self.last_rec[c].is_some_and(|l| t.saturating_sub(l) > 2 * period);
        self.last_rec[c] = Some(t);
        let reads = flushes
            && p != usize::MAX
            && self.group_last[p].is_none_or(|last| t.saturating_sub(last) >= layout.min_gap_ns);
        if reads {
            self.group_last[p] = Some(t);
            self.read_last[p] = Some(t);
        }
        let w = self.cpu_w[c];
        for (s, slot) in layout.slots.iter().take(n).enumerate() {
            match *slot {
                SynthSlot::Traffic {
                    direction,
                    bytes_per_count,
                } => {
                    if reads {
                        rec.slots[s] = SlotReading {
                            value: self.layout_pkg_value(p, direction, bytes_per_count),
                            enabled: 1,
                            running: 1,
                        };
                    } else {
                        rec.failed_mask |= 1 << s;
                    }
                }
                SynthSlot::Weight {
                    direction,
                    remote,
                    sees_remote,
                    share,
                } => {
                    let counts = w.counts(direction, remote, sees_remote, share);
                    rec.slots[s] = SlotReading {
                        value: weight_start(c).wrapping_add(counts.floor() as u64),
                        enabled: t,
                        running: t,
                    };
                }
                SynthSlot::Stall(part) => {
                    let count = match part {
                        StallPart::Stalled => self.stall[c][0],
                        StallPart::Cycles => self.stall[c][1],
                        StallPart::Time => self.clock_ns,
                    };
                    rec.slots[s] = SlotReading {
                        value: count.floor() as u64,
                        enabled: t,
                        running: t,
                    };
                }
                SynthSlot::Other => {
                    rec.slots[s] = SlotReading {
                        value: 0,
                        enabled: t,
                        running: t,
                    };
                }
            }
        }
        rec
    }

    /// The record names the CPU's running task (or the idle task).
    fn describe(&self, rec: &mut Record) {
        if let Some(ti) = self.running[rec.cpu as usize] {
            let task = &self.sc.tasks[ti];
            rec.pid = task.pid;
            rec.tgid = task.tgid;
            rec.cgroup_id = task.cgroup;
            let n = task.comm.len().min(15);
            rec.comm[..n].copy_from_slice(&task.comm.as_bytes()[..n]);
        } else {
            rec.comm[..9].copy_from_slice(b"swapper/0");
        }
    }

    /// Userspace's drain in layout mode: every package counter no record read within the
    /// maximum age (and every one no tick reads) is read now.
    fn drain_reads(&mut self, t: u64) {
        let Some(layout) = self.sc.layout.as_ref() else {
            return;
        };
        for p in 0..self.sc.packages.len() {
            let due = layout.readers.get(p).is_none_or(|r| r.is_empty())
                || self.read_last[p].is_none_or(|last| t.saturating_sub(last) > layout.max_age_ns);
            if !due {
                continue;
            }
            self.read_last[p] = Some(t);
            let reads = self.package_reads(layout, p, t);
            self.queue.extend(reads);
        }
    }

    /// Package `p`'s traffic counters read at `t`: one item per traffic slot of the layout.
    fn package_reads(&self, layout: &Layout, p: usize, t: u64) -> Vec<SynthItem> {
        let id = layout.package_ids.get(p).copied().unwrap_or(p as u32);
        layout
            .slots
            .iter()
            .enumerate()
            .filter_map(|(s, slot)| match *slot {
                SynthSlot::Traffic {
                    direction,
                    bytes_per_count,
                } => Some(SynthItem::PackageRead(
                    id,
                    s,
                    t,
                    self.layout_pkg_value(p, direction, bytes_per_count),
                )),
                _ => None,
            })
            .collect()
    }

    /// Userspace reads every package's counters (at the end of a run, as `imc` does before its
    /// last interval).
    pub fn read_all_packages(&mut self) -> Vec<SynthItem> {
        let mut out = Vec::new();
        if let Some(layout) = self.sc.layout.as_ref() {
            for p in 0..self.sc.packages.len() {
                out.extend(self.package_reads(layout, p, self.t_now));
            }
        }
        out
    }

    /// Controller bytes so far per package (index into `packages`): (task reads + DMA, task
    /// writes), exact.
    pub fn controller_bytes(&self) -> Vec<(f64, f64)> {
        (0..self.sc.packages.len())
            .map(|p| {
                let c = self.ctrl.get(p).copied().unwrap_or([0.0; 2]);
                (c[0] + self.dma_bytes(p), c[1])
            })
            .collect()
    }

    fn record(&mut self, cpu: u32, kind: u8, t: u64) -> Record {
        self.integrate_cpu(cpu as usize);
        if self.sc.layout.is_some() {
            return self.layout_record(cpu, kind, t);
        }
        let c = cpu as usize;
        let nr_slots = match (self.sc.weights, self.sc.directed_weights) {
            (true, true) => 4,
            (true, false) => 3,
            _ => 2,
        };
        let mut rec = blank_record(cpu, kind, t, nr_slots);
        self.describe(&mut rec);
        let p = self.pkg_of[c];
        let first = self.sc.packages.get(p).and_then(|cpus| cpus.first()) == Some(&cpu);
        let reads_pkg = match self.sc.readers {
            Readers::All => p < self.pkg_read.len(),
            Readers::First => first,
            Readers::None => false,
        };
        if reads_pkg {
            for (s, write) in [(0, false), (1, true)] {
                rec.slots[s] = SlotReading {
                    value: self.pkg_value(p, write),
                    enabled: t,
                    running: t,
                };
            }
        } else {
            // Not allowed to read the package counter here: the program reports it failed.
            rec.failed_mask |= 0b11;
        }
        if self.sc.weights {
            let running = (t as f64 * self.sc.weight_running) as u64;
            rec.slots[2] = SlotReading {
                value: (self.weight[c] * self.sc.weight_running).floor() as u64,
                enabled: t,
                running,
            };
            if self.sc.directed_weights {
                rec.slots[3] = SlotReading {
                    value: (self.weight_w[c] * self.sc.weight_running).floor() as u64,
                    enabled: t,
                    running,
                };
            }
        }
        self.records_of_cpu[c] += 1;
        if let Some((fc, n)) = self.sc.fail_every
            && fc == cpu
            && n > 0
            && self.records_of_cpu[c].is_multiple_of(n)
        {
            rec.failed_mask = (1u8 << rec.nr_slots) - 1;
            rec.slots = [SlotReading::default(); MAX_SLOTS];
        }
        rec
    }

    fn step(&mut self) -> bool {
        let Some(Reverse((t, ev))) = self.heap.pop() else {
            self.integrate_all();
            return false;
        };
        if t > self.sc.duration_ns {
            self.advance(self.sc.duration_ns);
            self.integrate_all();
            self.heap.clear();
            return false;
        }
        self.advance(t);
        let period = 1_000_000_000 / u64::from(self.sc.freq_hz.max(1));
        match ev {
            Ev::Tick(c) => {
                if self.running[c as usize].is_some() || !self.sc.nohz {
                    let rec = self.record(c, KIND_TICK, t);
                    self.queue.push(SynthItem::Tick(rec));
                }
                self.heap.push(Reverse((t + period, Ev::Tick(c))));
            }
            Ev::Switch(c, i) => {
                let base = self.sched_base[c as usize];
                let next = self.sc.schedule[c as usize][i - base].1;
                if next != self.running[c as usize] {
                    if self.sc.precise {
                        let rec = self.record(c, KIND_SWITCH, t);
                        self.queue.push(SynthItem::Tick(rec));
                    }
                    self.switch_to(c as usize, next);
                }
                self.sched_next[c as usize] = None;
                if let Some(&(tn, _)) = self.sc.schedule[c as usize].get(i + 1 - base) {
                    self.sched_next[c as usize] = Some(i + 1);
                    self.heap.push(Reverse((tn.max(t), Ev::Switch(c, i + 1))));
                }
            }
            Ev::Fallback => {
                for p in 0..self.sc.packages.len() {
                    for (s, write) in [(0usize, false), (1, true)] {
                        let v = self.pkg_value(p, write);
                        self.queue.push(SynthItem::PackageRead(p as u32, s, t, v));
                    }
                }
                if let Some(every) = self.sc.fallback_every_ns {
                    self.heap.push(Reverse((t + every.max(1), Ev::Fallback)));
                }
            }
            Ev::Drain => {
                self.drain_reads(t);
                if let Some(l) = &self.sc.layout {
                    self.heap.push(Reverse((t + l.drain_ns.max(1), Ev::Drain)));
                }
            }
            Ev::Mark => {
                self.integrate_all();
                self.queue.push(SynthItem::Mark(t));
                if let Some(every) = self.sc.mark_every_ns {
                    self.heap.push(Reverse((t + every.max(1), Ev::Mark)));
                }
            }
        }
        true
    }
}

impl Iterator for SynthStream {
    type Item = SynthItem;
    fn next(&mut self) -> Option<SynthItem> {
        loop {
            if let Some(item) = self.queue.pop() {
                return Some(item);
            }
            if !self.step() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(stream: &mut SynthStream, until: u64) -> Vec<(u64, u32, u32, u8)> {
        let mut v = Vec::new();
        for it in stream.by_ref() {
            if let SynthItem::Tick(r) = it {
                v.push((r.t_ns, r.cpu, r.pid, r.kind));
                if r.t_ns >= until {
                    break;
                }
            }
        }
        v
    }

    #[test]
    fn a_schedule_given_in_chunks_plays_like_the_whole() {
        let ms = 1_000_000;
        let mut sc = Scenario::busy(2, 250, 40 * ms);
        sc.precise = true;
        let whole: Vec<Vec<(u64, Option<usize>)>> = (0..2)
            .map(|c| {
                (0..400u64)
                    .map(|k| (k * 100_000 + c * 7, Some((k as usize + c as usize) % 2)))
                    .collect()
            })
            .collect();
        sc.schedule = whole.clone();
        let expected = items(&mut sc.stream(), u64::MAX);
        // The first 5 ms given at the start, then each next 5 ms once the stream is 5 ms
        // before it.
        sc.schedule = whole.iter().map(|s| s[..50].to_vec()).collect();
        let mut stream = sc.stream();
        let mut got = Vec::new();
        for k in 1..8 {
            got.extend(items(&mut stream, k * 5 * ms - 5 * ms / 2));
            for (c, s) in whole.iter().enumerate() {
                stream.extend_schedule(c, &s[k as usize * 50..(k as usize + 1) * 50]);
            }
            assert!(stream.sc.schedule.iter().all(|s| s.len() <= 100));
        }
        got.extend(items(&mut stream, u64::MAX));
        assert_eq!(got.len(), expected.len());
        assert_eq!(got, expected);
    }
}
