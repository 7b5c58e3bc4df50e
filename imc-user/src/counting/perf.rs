//! Counting through perf_event_open from userspace: each planned counter is opened system-wide
//! (`pid = -1`) on its CPU; counters of the same PMU instance on the same CPU form one group, so
//! one `read(2)` returns them all under the same enabled/running times. PMUs that refuse groups
//! get one fd per counter instead.
//!
//! `open_timed` goes further for short intervals: a cpu-clock leader per group makes the kernel
//! read the group at every boundary (PERF_SAMPLE_READ) into a ring, so imc wakes every
//! `timed::COLLECT_NS` to drain instead of once per interval, and does not read another CPU's
//! counters through an IPI. In a VM, a wake-up alone costs 15–30 µs and a remote read ~35 µs:
//! at `-I 1` that is the difference between ~10% of a core and well under 1%. Groups whose CPU
//! idles without delivering are read from userspace at the boundaries they miss (`timed` decides
//! which and when), by a thread pinned to that CPU (`local`) so the read is local, or from imc's
//! own thread through an IPI when no such thread can run there. Kernels normally sample idle
//! CPUs too; some do not: this project's test VMs run a kernel patched to hide sandbox tasks
//! from perf, which drops every sample (cpu-clock and tracepoint leaders alike) taken while one
//! vCPU's idle task is current, with no lost or throttle records.
use super::clock::{Clock, MonotonicClock};
use super::from_plan::PerfCounter;
use super::local::{Grid, LocalEvent, LocalReaders, LocalReading};
use super::timed::Boundaries;
use super::{Backend, BackendError, CounterFailure, CounterSpec, RawReading};
use crate::sys::perf::{
    GROUP_READ_FORMAT, PerfIoctl, PerfSys, RECORD_SAMPLE, RECORD_THROTTLE, RECORD_UNTHROTTLE,
    read_counter,
};
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

mod group;
#[cfg(test)]
mod tests;

use group::*;

pub struct PerfBackend {
    sys: Arc<dyn PerfSys>,
    source: String,
    counters: Vec<CounterSpec>,
    groups: Vec<Group>,
    failures: Vec<CounterFailure>,
    /// Kernel-timed mode: which reading closes which boundary.
    timing: Option<Boundaries>,
    /// Kernel-timed mode: the threads that read watched groups on their own CPUs, and their
    /// readings per group not yet merged with the kernel's samples.
    local: Option<LocalReaders>,
    pending: Vec<VecDeque<LocalReading>>,
    /// Kernel-timed mode, reused: groups to read now, one boundary's words per group, one
    /// boundary's readings.
    patch: Vec<usize>,
    words: Vec<Vec<u64>>,
    scratch: Vec<RawReading>,
    /// Kernel-timed mode: throttle records seen (the kernel stopped a leader's timer), wake-ups,
    /// userspace group reads, boundaries emitted.
    throttled: u64,
    wakes: u64,
    user_reads: u64,
    boundaries: u64,
    /// CPUs whose reader could not pin itself, with why (for `-v`).
    unpinned: Vec<String>,
    /// How long throttles kept counters stopped, in all groups, and how many imc lifted.
    paused_ns: u64,
    lifted: u64,
}

impl PerfBackend {
    /// Opens every planned counter. Counters that fail to open are reported through
    /// `take_failures` and left out; it is an error only when none opens.
    pub fn open(
        sys: Arc<dyn PerfSys>,
        source: &str,
        planned: Vec<PerfCounter>,
    ) -> Result<PerfBackend, BackendError> {
        let mut failures = Vec::new();
        let mut first_errno = None;
        let members = groups_by_pmu_cpu(&planned);
        let mut groups = Vec::new();
        for m in members {
            let mut fail = |i: usize, e: &io::Error, failures: &mut Vec<CounterFailure>| {
                first_errno = first_errno.or(e.raw_os_error());
                failures.push(open_failure(&planned, i, e));
            };
            if m.len() > 1 {
                // On Err the PMU refused the group (or its leader): one fd per counter below.
                if let Ok((g, errs)) = Self::open_grouped(sys.as_ref(), &planned, &m) {
                    for (i, e) in errs {
                        fail(i, &e, &mut failures);
                    }
                    groups.push(g);
                    continue;
                }
            }
            for &i in &m {
                let c = &planned[i];
                let cpu = c.spec.cpu.map_or(-1, |c| c as i32);
                match sys.open(&attr_for(c), -1, cpu, None) {
                    Ok(fd) => groups.push(Group::new(vec![fd], vec![i], false, 0)),
                    Err(e) => fail(i, &e, &mut failures),
                }
            }
        }
        if groups.is_empty() {
            return Err(nothing_opened(&failures, first_errno));
        }
        Ok(Self::keep_opened(
            sys, source, planned, groups, failures, None,
        ))
    }

    /// The backend over the counters that opened: the others were reported and are left out, so
    /// a package whose CPU is offline shows no row rather than a row of zeros.
    fn keep_opened(
        sys: Arc<dyn PerfSys>,
        source: &str,
        planned: Vec<PerfCounter>,
        mut groups: Vec<Group>,
        mut failures: Vec<CounterFailure>,
        timing: Option<Boundaries>,
    ) -> PerfBackend {
        let mut new_index = vec![None; planned.len()];
        let mut order: Vec<usize> = groups.iter().flat_map(|g| g.counters.clone()).collect();
        order.sort_unstable();
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = Some(new);
        }
        for g in &mut groups {
            for i in &mut g.counters {
                *i = new_index[*i].unwrap_or(*i);
            }
        }
        for f in &mut failures {
            f.counter = f.counter.and_then(|i| new_index.get(i).copied().flatten());
        }
        let counters: Vec<CounterSpec> = planned
            .into_iter()
            .enumerate()
            .filter(|(i, _)| new_index[*i].is_some())
            .map(|(_, c)| c.spec)
            .collect();
        let n = counters.len();
        let ng = groups.len();
        let local = timing.as_ref().map(|t| {
            LocalReaders::new(
                sys.clone(),
                Grid::new(t.base(), t.period()),
                Arc::new(|| Box::new(MonotonicClock)),
            )
        });
        PerfBackend {
            sys,
            source: source.to_string(),
            counters,
            groups,
            failures,
            local,
            pending: (0..ng).map(|_| VecDeque::new()).collect(),
            timing,
            patch: Vec::with_capacity(ng),
            words: (0..ng).map(|_| Vec::with_capacity(16)).collect(),
            scratch: vec![RawReading::default(); n],
            throttled: 0,
            wakes: 0,
            user_reads: 0,
            boundaries: 0,
            unpinned: Vec::new(),
            paused_ns: 0,
            lifted: 0,
        }
    }

    /// Lifts the throttles the rings reported. The kernel throttles a sampling event that
    /// overflowed more than `perf_event_max_sample_rate / HZ` times without a scheduler tick,
    /// which a CPU idling tickless at `-I 1` can reach in under half a second; since Linux 6.16
    /// that stops the whole group, the counters with it, until that CPU's next tick, which an
    /// idle CPU may not have for a long while (670 ms seen here). PERF_EVENT_IOC_PERIOD
    /// restarts it at once. What the counters missed meanwhile is gone: the bookkeeping gives
    /// the intervals around the window no running time, so they list those counters as not
    /// counted (JSON `missing`) rather than report them low, and `-v` says how long it was.
    fn lift_throttles(&mut self, clock: &dyn Clock) {
        let Some(timing) = self.timing.as_mut() else {
            return;
        };
        let period = timing.period();
        for (gi, g) in self.groups.iter_mut().enumerate() {
            let Some(since) = g.throttled_since else {
                continue;
            };
            if g.dead {
                continue;
            }
            match self.sys.ioctl(g.fds[0].as_fd(), PerfIoctl::Period(period)) {
                Ok(()) => {
                    let until = clock.now_ns();
                    g.throttled_since = None;
                    timing.pause(gi, since, until);
                    self.paused_ns += until.saturating_sub(since);
                    self.lifted += 1;
                }
                Err(e) => log::info!("imc: cannot lift the kernel's throttle of a group: {e}"),
            }
        }
    }

    /// Opens the planned counters so that the kernel reads them every `period_ns` itself: per
    /// PMU instance and CPU, a cpu-clock event samples the group (PERF_SAMPLE_READ, timestamps
    /// on CLOCK_MONOTONIC) into a ring that `advance_timed` empties. imc then wakes every
    /// `timed::COLLECT_NS` instead of at every interval (except for groups whose CPU idles), and
    /// no counter of another CPU is read through an IPI. Err when this is not possible here (the
    /// PMU refuses a software leader, the syscall layer has no rings): the caller falls back to
    /// `open`.
    pub fn open_timed(
        sys: Arc<dyn PerfSys>,
        source: &str,
        planned: Vec<PerfCounter>,
        period_ns: u64,
        clock: &dyn Clock,
    ) -> Result<PerfBackend, BackendError> {
        if !sys.supports_rings() {
            return Err(BackendError::NothingOpened {
                message: "kernel-timed sampling unavailable: no perf rings in this syscall layer"
                    .to_string(),
                errno: None,
            });
        }
        let mut failures = Vec::new();
        let members = groups_by_pmu_cpu(&planned);
        let refused = |e: io::Error| BackendError::NothingOpened {
            message: format!("kernel-timed sampling unavailable: {e}"),
            errno: e.raw_os_error(),
        };
        let mut groups = Vec::new();
        for m in members {
            let opened = open_timed_group(sys.as_ref(), &planned, &m, period_ns, &mut failures);
            groups.extend(opened.map_err(refused)?);
        }
        if groups.is_empty() {
            return Err(nothing_opened(&failures, None));
        }
        // Start every group as close together as possible so their samples line up; the
        // boundaries count from just before, so no sample is ever early.
        let base = clock.now_ns();
        for g in &groups {
            sys.ioctl(g.fds[0].as_fd(), PerfIoctl::Enable)
                .map_err(refused)?;
        }
        let widths: Vec<usize> = groups.iter().map(|g| g.counters.len()).collect();
        Ok(Self::keep_opened(
            sys,
            source,
            planned,
            groups,
            failures,
            Some(Boundaries::new(base, period_ns, &widths)),
        ))
    }

    /// Hands every group's new ring samples, and the local readers' readings, to the boundary
    /// bookkeeping in boundary order. A boundary both delivered keeps the kernel's sample.
    fn fill_queues(&mut self) {
        let Some(timing) = self.timing.as_mut() else {
            return;
        };
        for (gi, g) in self.groups.iter_mut().enumerate() {
            if g.dead {
                continue;
            }
            let Some(ring) = g.ring.as_mut() else {
                continue;
            };
            let nvals = g.counters.len() + g.lead;
            let lead = g.lead;
            let values = &mut g.values;
            let samples = &mut g.samples;
            let throttled = &mut self.throttled;
            let throttled_since = &mut g.throttled_since;
            let paused_ns = &mut self.paused_ns;
            let pending = &mut self.pending[gi];
            let mut local_before = |timing: &mut Boundaries, k: u64| {
                while let Some(r) = pending.front() {
                    if r.k > k {
                        break;
                    }
                    if r.k < k {
                        timing.patched(gi, r.k, r.read, r.enabled, r.running, &r.values[lead..]);
                    }
                    pending.pop_front();
                }
            };
            ring.drain(&mut |kind, p| {
                // (Un)throttle records start with their time, on the leader's clock.
                let record_time = || {
                    p.get(..8)
                        .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                };
                if kind == RECORD_THROTTLE {
                    *throttled += 1;
                    throttled_since.get_or_insert(record_time());
                }
                // The kernel lifted it itself (the CPU ticked) before imc did; a record that
                // imc's own lift caused finds nothing pending.
                if kind == RECORD_UNTHROTTLE
                    && let Some(since) = throttled_since.take()
                {
                    let until = record_time();
                    timing.pause(gi, since, until);
                    *paused_ns += until.saturating_sub(since);
                }
                if kind != RECORD_SAMPLE {
                    // Lost or throttled samples leave gaps that userspace reads patch.
                    return;
                }
                let word = |i: usize| -> Option<u64> {
                    let b = p.get(i * 8..i * 8 + 8)?;
                    Some(u64::from_ne_bytes(b.try_into().ok()?))
                };
                // PERF_SAMPLE_TIME, then the group read: nr, enabled, running, values (the
                // leader's own first).
                let (Some(t), Some(nr), Some(en), Some(run)) = (word(0), word(1), word(2), word(3))
                else {
                    return;
                };
                if nr as usize != nvals || values.len() < nvals {
                    return;
                }
                for (j, v) in values.iter_mut().enumerate().take(nvals) {
                    *v = word(4 + j).unwrap_or(0);
                }
                *samples += 1;
                local_before(timing, timing.sample_boundary(t));
                timing.kernel_sample(gi, t, en, run, &values[1..nvals]);
            });
            local_before(timing, u64::MAX);
        }
    }

    /// Takes the local readers' readings (in boundary order per group) and failures. Done before
    /// the rings are drained: a reader reads after the kernel would have sampled, so a reading
    /// here means the kernel's sample of that boundary, if any, is in the ring already.
    fn take_local(&mut self) {
        let Some(local) = self.local.as_ref() else {
            return;
        };
        let mut failed = Vec::new();
        let pending = &mut self.pending;
        local.drain(&mut |e| match e {
            LocalEvent::Reading(r) => {
                if let Some(p) = pending.get_mut(r.group) {
                    p.push_back(r);
                }
            }
            LocalEvent::Failed { group, error } => failed.push((group, error)),
        });
        for (gi, e) in failed {
            if let Some(t) = self.timing.as_mut() {
                t.kill(gi);
            }
            if !self.groups[gi].dead {
                self.stop_group(gi, &e);
            }
        }
    }

    /// Starts, wakes or parks the local readers to match which groups are watched, and tells
    /// the bookkeeping which groups a running reader covers.
    fn sync_local(&mut self) {
        let (Some(local), Some(timing)) = (self.local.as_mut(), self.timing.as_mut()) else {
            return;
        };
        let offset = local.grid().offset;
        for gi in 0..self.groups.len() {
            let g = &self.groups[gi];
            let watched = !g.dead && timing.is_watched(gi);
            if watched
                && !local.has_reader(gi)
                && let Some(cpu) = group_cpu(&self.counters, g)
            {
                // Every live group of that CPU, so one wake-up reads them all.
                let on_cpu: Vec<(usize, std::os::fd::BorrowedFd<'_>, usize)> = self
                    .groups
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| !o.dead && group_cpu(&self.counters, o) == Some(cpu))
                    .map(|(i, o)| (i, o.fds[0].as_fd(), o.values.len()))
                    .collect();
                if let Err(e) = local.start(cpu, &on_cpu) {
                    self.unpinned.push(format!("CPU {cpu}: {e}"));
                }
            }
            local.set_watched(gi, watched);
            timing.set_covered(gi, local.covers(gi), offset);
        }
        for (cpu, e) in local.take_unpinned() {
            log::info!(
                "imc: cannot run a reader on CPU {cpu} ({e}); reading its counters from another CPU"
            );
            self.unpinned.push(format!("CPU {cpu}: {e}"));
        }
    }

    /// Kernel-timed mode, at `clock`'s now: collects the rings, reads from userspace the groups
    /// whose sample for the boundary just passed is missing, calls `f(k, t, readings)` for every
    /// boundary complete, and returns when to call again (absolute CLOCK_MONOTONIC ns).
    fn advance(
        &mut self,
        clock: &dyn Clock,
        final_k: Option<u64>,
        f: &mut dyn FnMut(u64, u64, &[RawReading]),
    ) -> u64 {
        self.take_local();
        self.fill_queues();
        self.lift_throttles(clock);
        self.wakes += 1;
        let Some(timing) = self.timing.as_mut() else {
            return u64::MAX;
        };
        let now = clock.now_ns();
        let k = timing.plan(now, final_k, &mut self.patch);
        let mut stopped = Vec::new();
        for &gi in &self.patch {
            let g = &mut self.groups[gi];
            if g.dead {
                continue;
            }
            let (r, tries) = read_timed_group(self.sys.as_ref(), g, clock);
            self.user_reads += u64::from(tries);
            match r {
                Ok(read) => {
                    let (en, run) = (read.enabled, read.running);
                    timing.patched(
                        gi,
                        k,
                        (read.before, read.after),
                        en,
                        run,
                        &g.values[g.lead..],
                    );
                }
                Err(e) => {
                    timing.kill(gi);
                    stopped.push((gi, e));
                }
            }
        }
        for (gi, e) in stopped {
            self.stop_group(gi, &e);
        }
        self.sync_local();
        let Some(timing) = self.timing.as_mut() else {
            return u64::MAX;
        };
        while let Some((k, t)) = timing.pop_complete(&mut self.words) {
            readings_of(&self.groups, &self.words, &mut self.scratch);
            self.boundaries += 1;
            f(k, t, &self.scratch);
        }
        timing.next_wake(final_k)
    }

    /// Throttle records seen in kernel-timed mode (for `-v`).
    pub fn throttled(&self) -> u64 {
        self.throttled
    }

    /// Opens `members` as one group. Err when the leader fails or the PMU refuses groups (the
    /// caller then opens them one by one); Ok with the siblings that failed for other reasons.
    #[allow(clippy::type_complexity)]
    fn open_grouped(
        sys: &dyn PerfSys,
        planned: &[PerfCounter],
        members: &[usize],
    ) -> io::Result<(Group, Vec<(usize, io::Error)>)> {
        let cpu = planned[members[0]].spec.cpu.map_or(-1, |c| c as i32);
        let mut attr = attr_for(&planned[members[0]]);
        attr.read_format = GROUP_READ_FORMAT;
        let leader = sys.open(&attr, -1, cpu, None)?;
        let mut fds = vec![leader];
        let mut counters = vec![members[0]];
        let mut errs = Vec::new();
        for &i in &members[1..] {
            let mut attr = attr_for(&planned[i]);
            attr.read_format = GROUP_READ_FORMAT;
            match sys.open(&attr, -1, cpu, Some(fds[0].as_fd())) {
                Ok(fd) => {
                    fds.push(fd);
                    counters.push(i);
                }
                Err(e) if is_group_refusal(&e) => return Err(e),
                Err(e) => errs.push((i, e)),
            }
        }
        Ok((Group::new(fds, counters, true, 0), errs))
    }

    /// How many fds are open (for `-v` and tests).
    pub fn open_fds(&self) -> usize {
        self.groups.iter().map(|g| g.fds.len()).sum()
    }

    /// Whether the counters of each group were grouped (one read per group).
    pub fn grouped(&self) -> Vec<bool> {
        self.groups.iter().map(|g| g.grouped).collect()
    }

    fn stop_group(&mut self, g: usize, err: &io::Error) {
        let group = &mut self.groups[g];
        group.dead = true;
        for &i in &group.counters {
            let c = &self.counters[i];
            let hint = if err.kind() == io::ErrorKind::UnexpectedEof
                || err.raw_os_error() == Some(libc::ENODEV)
            {
                " (its CPU went offline?)"
            } else {
                ""
            };
            self.failures.push(CounterFailure {
                counter: Some(i),
                message: format!("{} stopped counting: {err}{hint}", c.describe()),
            });
        }
    }
}

impl Backend for PerfBackend {
    fn source(&self) -> &str {
        &self.source
    }

    fn counters(&self) -> &[CounterSpec] {
        &self.counters
    }

    fn read(&mut self, out: &mut [RawReading]) {
        for r in out.iter_mut() {
            r.ok = false;
        }
        for g in 0..self.groups.len() {
            let group = &mut self.groups[g];
            if group.dead {
                continue;
            }
            if group.grouped {
                match group
                    .reader
                    .read(self.sys.as_ref(), group.fds[0].as_fd(), &mut group.values)
                {
                    Ok((enabled, running)) => {
                        for (k, &i) in group.counters.iter().enumerate() {
                            if let Some(r) = out.get_mut(i) {
                                *r = RawReading {
                                    value: group.values[group.lead + k],
                                    enabled,
                                    running,
                                    ok: true,
                                };
                            }
                        }
                    }
                    Err(e) => self.stop_group(g, &e),
                }
            } else {
                match read_counter(self.sys.as_ref(), group.fds[0].as_fd()) {
                    Ok(v) => {
                        if let Some(r) = out.get_mut(group.counters[0]) {
                            *r = RawReading {
                                value: v.value,
                                enabled: v.enabled,
                                running: v.running,
                                ok: true,
                            };
                        }
                    }
                    Err(e) => self.stop_group(g, &e),
                }
            }
        }
    }

    fn timed_period(&self) -> Option<u64> {
        self.timing.as_ref().map(|t| t.period())
    }

    fn advance_timed(
        &mut self,
        clock: &dyn Clock,
        final_k: Option<u64>,
        f: &mut dyn FnMut(u64, u64, &[RawReading]),
    ) -> u64 {
        self.advance(clock, final_k, f)
    }

    fn run_stats(&self) -> Option<String> {
        let t = self.timing.as_ref()?;
        let per_cpu: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let cpu = g
                    .counters
                    .first()
                    .and_then(|&i| self.counters.get(i))
                    .and_then(|c| c.cpu)
                    .map_or("-".to_string(), |c| c.to_string());
                format!("CPU {cpu}: {}", g.samples)
            })
            .collect();
        let (local_reads, readers, untimed) = self
            .local
            .as_ref()
            .map_or((0, 0, 0), |l| (l.reads(), l.started(), l.untimed()));
        let unpinned = if self.unpinned.is_empty() {
            String::new()
        } else {
            format!("; no reader could run on {}", self.unpinned.join(", "))
        };
        Some(format!(
            "kernel-timed: {} boundaries {} ns apart from {} ns (CLOCK_MONOTONIC), {} wake-ups, {} group reads from imc's thread, {} group \
             reads by {} reader thread(s) on the groups' own CPUs ({} left out: no read tight \
             enough to time), {} times a group missed a \
             boundary and was watched, {} throttles ({} lifted by imc; counters stopped \
             {:.1} ms in all, not counted in those intervals); kernel samples per group: {}{}",
            self.boundaries,
            t.period(),
            t.base(),
            self.wakes,
            self.user_reads,
            local_reads,
            readers,
            untimed,
            t.watch_entries,
            self.throttled,
            self.lifted,
            self.paused_ns as f64 / 1e6,
            per_cpu.join(", "),
            unpinned
        ))
    }

    fn take_failures(&mut self) -> Vec<CounterFailure> {
        std::mem::take(&mut self.failures)
    }
}

/// Not one counter opened: the first failure says why (or that there was nothing to open).
fn nothing_opened(failures: &[CounterFailure], errno: Option<i32>) -> BackendError {
    let message = failures
        .first()
        .map_or_else(|| "no counters to open".to_string(), |f| f.message.clone());
    BackendError::NothingOpened { message, errno }
}
