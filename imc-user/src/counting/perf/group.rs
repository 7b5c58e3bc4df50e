//! Perf groups: counters of one PMU instance on one CPU opened as one group (read together,
//! scheduled together), or one fd each where the PMU refuses groups; in kernel-timed mode a
//! cpu-clock leader that samples the group into a ring, and the reads of such a group.

use super::super::clock::Clock;
use super::super::from_plan::PerfCounter;
use super::super::{CounterFailure, CounterSpec, RawReading};
use crate::sys::perf::{
    FLAG_DISABLED, FLAG_USE_CLOCKID, FLAG_WATERMARK, GROUP_READ_FORMAT, GroupReader, PerfEventAttr,
    PerfSys, RingBuffer, SAMPLE_READ, SAMPLE_TIME, SW_CPU_CLOCK, TYPE_SOFTWARE, explain_open_error,
};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// Data pages of each sampling ring: at 1 ms a sample of a few counters is ~60 bytes, so 32 KiB
/// holds about half a second, fifty times the collect period.
pub(super) const RING_PAGES: usize = 8;
/// A userspace group read slower than this is repeated (up to `READ_TRIES` reads): a remote
/// read through an IPI takes 10–40 µs in a VM when the other vCPU runs.
pub(super) const SLOW_READ_NS: u64 = 60_000;
pub(super) const READ_TRIES: u32 = 3;

/// Counters sharing one PMU instance and CPU.
pub(super) struct Group {
    /// Open fds; with `grouped`, the first is the leader and the only one read.
    pub(super) fds: Vec<OwnedFd>,
    /// Counter index of each counting fd (after the `lead` timer leader, if any).
    pub(super) counters: Vec<usize>,
    pub(super) grouped: bool,
    /// 1 when fds[0] is a cpu-clock leader that samples the group (kernel-timed mode).
    pub(super) lead: usize,
    pub(super) reader: GroupReader,
    pub(super) values: Vec<u64>,
    /// Stopped after a read error; its counters read as not ok from then on.
    pub(super) dead: bool,
    /// Kernel-timed mode: the leader's ring of boundary samples, and how many it delivered.
    pub(super) ring: Option<Box<dyn RingBuffer>>,
    pub(super) samples: u64,
    /// Kernel-timed mode: since when the kernel has the group throttled (its counters stopped).
    pub(super) throttled_since: Option<u64>,
}

impl Group {
    pub(super) fn new(
        fds: Vec<OwnedFd>,
        counters: Vec<usize>,
        grouped: bool,
        lead: usize,
    ) -> Group {
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
            samples: 0,
            throttled_since: None,
        }
    }
}

/// The CPU a group's counters are opened on.
pub(super) fn group_cpu(counters: &[CounterSpec], g: &Group) -> Option<u32> {
    g.counters
        .first()
        .and_then(|&i| counters.get(i))
        .and_then(|c| c.cpu)
}

/// Indices of the planned counters grouped by (PMU, CPU), groups and members in plan order:
/// the counters that can share one perf group (read together, scheduled together).
pub(super) fn groups_by_pmu_cpu(planned: &[PerfCounter]) -> Vec<Vec<usize>> {
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

/// A userspace read of a kernel-timed group: the clock just before and just after it, and the
/// group's time enabled and running as the kernel read them with the counts (the boundary
/// bookkeeping times the read from these).
pub(super) struct GroupRead {
    pub(super) before: u64,
    pub(super) after: u64,
    pub(super) enabled: u64,
    pub(super) running: u64,
}

/// Reads a kernel-timed group from userspace, with the number of reads it took. A read of
/// another CPU's group waits for an IPI; when the host has not run that vCPU for a while the
/// read takes long. Read again then: the vCPU now runs and the read is quick.
pub(super) fn read_timed_group(
    sys: &dyn PerfSys,
    g: &mut Group,
    clock: &dyn Clock,
) -> (io::Result<GroupRead>, u32) {
    let mut tries = 0;
    loop {
        let a = clock.now_ns();
        let r = g.reader.read(sys, g.fds[0].as_fd(), &mut g.values);
        let b = clock.now_ns();
        tries += 1;
        if r.is_err() || b.saturating_sub(a) <= SLOW_READ_NS || tries == READ_TRIES {
            let read = r.map(|(enabled, running)| GroupRead {
                before: a,
                after: b,
                enabled,
                running,
            });
            return (read, tries);
        }
    }
}

/// One boundary's group words (time enabled, time running, then the values) as each
/// counter's reading; a counter of a dead or short group is not ok.
pub(super) fn readings_of(groups: &[Group], words: &[Vec<u64>], scratch: &mut [RawReading]) {
    for r in scratch.iter_mut() {
        r.ok = false;
    }
    for (g, w) in groups.iter().zip(words) {
        if g.dead || w.len() < 2 + g.counters.len() {
            continue;
        }
        for (j, &i) in g.counters.iter().enumerate() {
            if let Some(r) = scratch.get_mut(i) {
                *r = RawReading {
                    value: w[2 + j],
                    enabled: w[0],
                    running: w[1],
                    ok: true,
                };
            }
        }
    }
}

/// The cpu-clock event that leads a kernel-timed group: every `period_ns` it samples the
/// group's counters (PERF_SAMPLE_READ, timestamps on CLOCK_MONOTONIC) into its ring.
pub(super) fn timer_leader(period_ns: u64) -> PerfEventAttr {
    let mut lead = PerfEventAttr::counting(TYPE_SOFTWARE, SW_CPU_CLOCK);
    lead.sample_period = period_ns;
    lead.sample_type = SAMPLE_TIME | SAMPLE_READ;
    lead.read_format = GROUP_READ_FORMAT;
    lead.flags = FLAG_DISABLED | FLAG_USE_CLOCKID | FLAG_WATERMARK;
    lead.clockid = libc::CLOCK_MONOTONIC;
    // Nobody polls the ring: a watermark of the whole ring keeps the kernel from
    // queueing a wake-up per sample.
    lead.wakeup_events = (RING_PAGES * crate::sys::devmem::page_size() as usize) as u32;
    lead
}

/// Counter `i` did not open: the run goes on without it.
pub(super) fn open_failure(planned: &[PerfCounter], i: usize, e: &io::Error) -> CounterFailure {
    CounterFailure {
        counter: Some(i),
        message: explain_open_error(&format!("cannot open {}", planned[i].spec.describe()), e),
    }
}

/// One kernel-timed group: the counters `m` (one PMU instance on one CPU) under a timer
/// leader, with its ring. Ok(None) when none of them opened (an offline CPU, counters the PMU
/// refuses: said in `failures`); Err when kernel-timed sampling is not possible here.
pub(super) fn open_timed_group(
    sys: &dyn PerfSys,
    planned: &[PerfCounter],
    m: &[usize],
    period_ns: u64,
    failures: &mut Vec<CounterFailure>,
) -> io::Result<Option<Group>> {
    let cpu = planned[m[0]].spec.cpu.map_or(-1, |c| c as i32);
    let leader = match sys.open(&timer_leader(period_ns), -1, cpu, None) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            // This CPU is offline: its counters fail, the others keep going.
            failures.extend(m.iter().map(|&i| open_failure(planned, i, &e)));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut fds = vec![leader];
    let mut counters = Vec::new();
    for &i in m {
        let mut attr = attr_for(&planned[i]);
        attr.read_format = GROUP_READ_FORMAT;
        attr.flags |= FLAG_USE_CLOCKID;
        attr.clockid = libc::CLOCK_MONOTONIC;
        match sys.open(&attr, -1, cpu, Some(fds[0].as_fd())) {
            Ok(fd) => {
                fds.push(fd);
                counters.push(i);
            }
            Err(e) if is_group_refusal(&e) => return Err(e),
            Err(e) => failures.push(open_failure(planned, i, &e)),
        }
    }
    if counters.is_empty() {
        return Ok(None);
    }
    let ring = sys.map_ring(fds[0].as_fd(), RING_PAGES)?;
    let mut g = Group::new(fds, counters, true, 1);
    g.ring = Some(ring);
    Ok(Some(g))
}

pub(super) fn attr_for(c: &PerfCounter) -> PerfEventAttr {
    PerfEventAttr::counter(
        c.pmu_type,
        [c.spec.config, c.config1, c.config2],
        c.exclude_user,
        c.exclude_kernel,
    )
}

/// Errors that mean "this PMU cannot put these events in one group", after which each event is
/// opened on its own.
pub(super) fn is_group_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSPC)
    )
}
