//! Counting through perf_event_open from userspace: each planned counter is opened system-wide
//! (`pid = -1`) on its CPU; counters of the same PMU instance on the same CPU form one group, so
//! one `read(2)` returns them all under the same enabled/running times. PMUs that refuse groups
//! get one fd per counter instead.
//!
//! `open_timed` goes further for short intervals: a cpu-clock leader per group makes the kernel
//! read the group at every boundary (PERF_SAMPLE_READ) into a ring, so imc wakes a few times a
//! second to drain instead of once per interval, and never reads another CPU's counter through
//! an IPI. In a VM, a wake-up alone costs 15–25 µs and a remote read ~35 µs: at `-I 1` that is
//! the difference between ~5% of a core and well under 1%.
use super::plan::PerfCounter;
use super::{Backend, BackendError, CounterFailure, CounterSpec, RawReading};
use crate::sys::perf::{
    FLAG_DISABLED, FLAG_USE_CLOCKID, FLAG_WATERMARK, GROUP_READ_FORMAT, GroupReader, PerfEventAttr,
    PerfIoctl, PerfSys, RECORD_SAMPLE, RingBuffer, SAMPLE_READ, SAMPLE_TIME, SW_CPU_CLOCK,
    TYPE_SOFTWARE, explain_open_error, read_counter,
};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// Counters sharing one PMU instance and CPU.
struct Group {
    /// Open fds; with `grouped`, the first is the leader and the only one read.
    fds: Vec<OwnedFd>,
    /// Counter index of each counting fd (after the `lead` timer leader, if any).
    counters: Vec<usize>,
    grouped: bool,
    /// 1 when fds[0] is a cpu-clock leader that samples the group (kernel-timed mode).
    lead: usize,
    reader: GroupReader,
    values: Vec<u64>,
    /// Stopped after a read error; its counters read as not ok from then on.
    dead: bool,
    /// Kernel-timed mode: the leader's ring and the samples not yet emitted, flat:
    /// `[k, t, enabled, running, value...]` per sample (no allocation per sample).
    ring: Option<Box<dyn RingBuffer>>,
    queue: VecDeque<u64>,
    t0: Option<u64>,
    last_t: u64,
}

impl Group {
    fn new(fds: Vec<OwnedFd>, counters: Vec<usize>, grouped: bool, lead: usize) -> Group {
        let n = if grouped { fds.len() } else { 0 };
        Group {
            fds,
            counters,
            grouped,
            lead,
            reader: GroupReader::new(n),
            values: vec![0; n],
            dead: false,
            ring: None,
            queue: VecDeque::new(),
            t0: None,
            last_t: 0,
        }
    }

    fn stride(&self) -> usize {
        4 + self.counters.len()
    }
}

/// Data pages of each sampling ring: at 1 ms a sample of a few counters is ~60 bytes, so 32 KiB
/// holds about half a second, five times the drain period.
const RING_PAGES: usize = 8;
/// A group whose samples lag the others' by this much has stopped (its CPU went offline). Long
/// enough that a vCPU the host did not run for a while is not taken for an offline CPU.
const STALL_NS: u64 = 1_000_000_000;

pub struct PerfBackend {
    sys: Arc<dyn PerfSys>,
    source: String,
    counters: Vec<CounterSpec>,
    groups: Vec<Group>,
    failures: Vec<CounterFailure>,
    /// Kernel-timed mode: the sampling period.
    period_ns: Option<u64>,
    /// Readings of one boundary, reused.
    scratch: Vec<RawReading>,
}

/// Indices of the planned counters grouped by (PMU, CPU), groups and members in plan order:
/// the counters that can share one perf group (read together, scheduled together).
fn groups_by_pmu_cpu(planned: &[PerfCounter]) -> Vec<Vec<usize>> {
    let mut keys: Vec<(&str, Option<u32>)> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, c) in planned.iter().enumerate() {
        let key = (c.spec.pmu.as_str(), c.spec.cpu);
        match keys.iter().position(|k| *k == key) {
            Some(g) => members[g].push(i),
            None => {
                keys.push(key);
                members.push(vec![i]);
            }
        }
    }
    members
}

fn attr_for(c: &PerfCounter) -> PerfEventAttr {
    PerfEventAttr::counter(
        c.pmu_type,
        [c.spec.config, c.config1, c.config2],
        c.exclude_user,
        c.exclude_kernel,
    )
}

/// Errors that mean "this PMU cannot put these events in one group", after which each event is
/// opened on its own.
fn is_group_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSPC)
    )
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
                failures.push(CounterFailure {
                    counter: Some(i),
                    message: explain_open_error(
                        &format!("cannot open {}", planned[i].spec.describe()),
                        e,
                    ),
                });
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
            let message = failures
                .first()
                .map_or_else(|| "no counters to open".to_string(), |f| f.message.clone());
            return Err(BackendError::NothingOpened {
                message,
                errno: first_errno,
            });
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
        period_ns: Option<u64>,
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
        PerfBackend {
            sys,
            source: source.to_string(),
            counters,
            groups,
            failures,
            period_ns,
            scratch: vec![RawReading::default(); n],
        }
    }

    /// Opens the planned counters so that the kernel reads them every `period_ns` itself: per
    /// PMU instance and CPU, a cpu-clock event samples the group (PERF_SAMPLE_READ, timestamps
    /// on CLOCK_MONOTONIC) into a ring that `drain_timed` empties. imc then wakes a few times a
    /// second instead of at every interval, and no counter of another CPU is read through an
    /// IPI. Err when this is not possible here (the PMU refuses a software leader, the syscall
    /// layer has no rings): the caller falls back to `open`.
    pub fn open_timed(
        sys: Arc<dyn PerfSys>,
        source: &str,
        planned: Vec<PerfCounter>,
        period_ns: u64,
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
            let cpu = planned[m[0]].spec.cpu.map_or(-1, |c| c as i32);
            let mut lead = PerfEventAttr::counting(TYPE_SOFTWARE, SW_CPU_CLOCK);
            lead.sample_period = period_ns;
            lead.sample_type = SAMPLE_TIME | SAMPLE_READ;
            lead.read_format = GROUP_READ_FORMAT;
            lead.flags = FLAG_DISABLED | FLAG_USE_CLOCKID | FLAG_WATERMARK;
            lead.clockid = libc::CLOCK_MONOTONIC;
            // Nobody polls the ring: a watermark of the whole ring keeps the kernel from
            // queueing a wake-up per sample.
            lead.wakeup_events = (RING_PAGES * crate::sys::devmem::page_size() as usize) as u32;
            let leader = match sys.open(&lead, -1, cpu, None) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                    // This CPU is offline: its counters fail, the others keep going.
                    for &i in &m {
                        failures.push(CounterFailure {
                            counter: Some(i),
                            message: explain_open_error(
                                &format!("cannot open {}", planned[i].spec.describe()),
                                &e,
                            ),
                        });
                    }
                    continue;
                }
                Err(e) => return Err(refused(e)),
            };
            let mut fds = vec![leader];
            let mut counters = Vec::new();
            for &i in &m {
                let mut attr = attr_for(&planned[i]);
                attr.read_format = GROUP_READ_FORMAT;
                attr.flags |= FLAG_USE_CLOCKID;
                attr.clockid = libc::CLOCK_MONOTONIC;
                match sys.open(&attr, -1, cpu, Some(fds[0].as_fd())) {
                    Ok(fd) => {
                        fds.push(fd);
                        counters.push(i);
                    }
                    Err(e) if is_group_refusal(&e) => return Err(refused(e)),
                    Err(e) => failures.push(CounterFailure {
                        counter: Some(i),
                        message: explain_open_error(
                            &format!("cannot open {}", planned[i].spec.describe()),
                            &e,
                        ),
                    }),
                }
            }
            if counters.is_empty() {
                continue;
            }
            let ring = sys.map_ring(fds[0].as_fd(), RING_PAGES).map_err(refused)?;
            let mut g = Group::new(fds, counters, true, 1);
            g.ring = Some(ring);
            g.queue = VecDeque::with_capacity(g.stride() * 1024);
            groups.push(g);
        }
        if groups.is_empty() {
            let message = failures
                .first()
                .map_or_else(|| "no counters to open".to_string(), |f| f.message.clone());
            return Err(BackendError::NothingOpened {
                message,
                errno: None,
            });
        }
        // Start every group as close together as possible so their samples line up.
        for g in &groups {
            sys.ioctl(g.fds[0].as_fd(), PerfIoctl::Enable)
                .map_err(refused)?;
        }
        Ok(Self::keep_opened(
            sys,
            source,
            planned,
            groups,
            failures,
            Some(period_ns),
        ))
    }

    /// Moves every group's new samples from its ring into its queue.
    fn fill_queues(&mut self, period: u64) {
        for g in &mut self.groups {
            if g.dead {
                continue;
            }
            let Some(ring) = g.ring.as_mut() else {
                continue;
            };
            let nvals = g.counters.len() + g.lead;
            let queue = &mut g.queue;
            let t0 = &mut g.t0;
            let last_t = &mut g.last_t;
            ring.drain(&mut |kind, p| {
                if kind != RECORD_SAMPLE {
                    // Lost or throttled samples just leave gaps; the boundaries around them
                    // merge into a longer interval.
                    return;
                }
                let word = |i: usize| -> Option<u64> {
                    let b = p.get(i * 8..i * 8 + 8)?;
                    Some(u64::from_ne_bytes(b.try_into().ok()?))
                };
                // PERF_SAMPLE_TIME, then the group read: nr, enabled, running, values.
                let (Some(t), Some(nr), Some(en), Some(run)) = (word(0), word(1), word(2), word(3))
                else {
                    return;
                };
                if nr as usize != nvals {
                    return;
                }
                let base = *t0.get_or_insert(t);
                // Samples keep the phase of the first one (the kernel's hrtimer forwards by
                // whole periods) and are never early, only late: a sample up to 0.9 period late
                // still closes its own boundary (the next one follows on time), while 0.1 period
                // of slack absorbs the first sample's own lateness.
                let k = (t.saturating_sub(base) + period / 10) / period;
                queue.push_back(k);
                queue.push_back(t);
                queue.push_back(en);
                queue.push_back(run);
                for j in 0..nvals - 1 {
                    queue.push_back(word(5 + j).unwrap_or(0));
                }
                *last_t = t;
            });
        }
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

    fn is_timed(&self) -> bool {
        self.period_ns.is_some()
    }

    fn drain_timed(&mut self, f: &mut dyn FnMut(u64, u64, &[RawReading])) {
        let Some(period) = self.period_ns else { return };
        self.fill_queues(period);
        // A group whose samples stopped while the others' went on has lost its CPU.
        let live_t = || self.groups.iter().filter(|g| !g.dead && g.t0.is_some());
        let newest = live_t().map(|g| g.last_t).max();
        let first = live_t().filter_map(|g| g.t0).min();
        if let (Some(newest), Some(first)) = (newest, first) {
            for gi in 0..self.groups.len() {
                let g = &self.groups[gi];
                let since = g.t0.map_or(first, |_| g.last_t);
                if !g.dead && newest.saturating_sub(since) > STALL_NS {
                    let err = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "no samples for 1 s while the other counters delivered",
                    );
                    self.stop_group(gi, &err);
                    self.groups[gi].queue.clear();
                }
            }
        }
        loop {
            let live = || self.groups.iter().filter(|g| !g.dead);
            if live().next().is_none() || live().any(|g| g.queue.is_empty()) {
                return;
            }
            let kmax = live().map(|g| g.queue[0]).max().unwrap_or(0);
            if live().all(|g| g.queue[0] == kmax) {
                let mut tsum: u128 = 0;
                let mut n: u128 = 0;
                for r in self.scratch.iter_mut() {
                    r.ok = false;
                }
                for g in self.groups.iter_mut().filter(|g| !g.dead) {
                    let (t, en, run) = (g.queue[1], g.queue[2], g.queue[3]);
                    tsum += u128::from(t);
                    n += 1;
                    for (j, &i) in g.counters.iter().enumerate() {
                        if let Some(r) = self.scratch.get_mut(i) {
                            *r = RawReading {
                                value: g.queue[4 + j],
                                enabled: en,
                                running: run,
                                ok: true,
                            };
                        }
                    }
                    let stride = g.stride();
                    g.queue.drain(..stride);
                }
                // The boundary's time: the mean of the groups' sample times (a few µs apart).
                f(kmax, (tsum / n.max(1)) as u64, &self.scratch);
            } else {
                // Some group missed this boundary: drop the older samples; the next complete
                // boundary closes a longer interval.
                for g in self.groups.iter_mut().filter(|g| !g.dead) {
                    if g.queue[0] < kmax {
                        let stride = g.stride();
                        g.queue.drain(..stride);
                    }
                }
            }
        }
    }

    fn take_failures(&mut self) -> Vec<CounterFailure> {
        std::mem::take(&mut self.failures)
    }
}
