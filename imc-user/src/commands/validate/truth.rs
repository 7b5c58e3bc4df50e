//! The truth of `imc validate`: every per-CPU event the plan counts (a weight, or a stand-in
//! such as page-faults) also counted by the kernel for each workload alone (perf_event_open on
//! its pid, inherited by its threads and children), as samples with their time. Each sample
//! carries the count of its thread on its CPU (PERF_SAMPLE_READ with PERF_SAMPLE_TID, which the
//! kernel allows on an inherited counter from 6.12), so the truth at any instant is the sum of
//! each thread's count at its last sample before it: exact to a period, whenever the instant
//! falls, and whatever samples went missing in between. A clock's sample timer that fires late
//! by more than a period skips the periods it missed (one sample for several), which a busy or
//! virtualised machine does every few milliseconds: counted as one period a sample, such a
//! truth ran short of the task's time by 1% on a quiet run and more under load. A kernel that
//! refuses the pair gets samples of their time alone, each counted as one period.
//! A reading of counters at instants (cpu = -1) would put the counts between two reads on the
//! wrong side of an interval end whenever the reader is late (on a busy VM, up to 17 ms).
//! The kernel refuses a ring on an inherited counter of every CPU (cpu = -1), so there is one
//! per workload, event and CPU.
use crate::model::Encoded;
use crate::plan::Plan;
use crate::sys::perf::{
    FLAG_INHERIT, FLAG_USE_CLOCKID, FLAG_WATERMARK, PerfEventAttr, PerfSys, RECORD_LOST,
    RECORD_SAMPLE, RECORD_THROTTLE, RingBuffer, SAMPLE_READ, SAMPLE_TID, SAMPLE_TIME, SW_CPU_CLOCK,
    TYPE_SOFTWARE, TYPE_TRACEPOINT,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One event the plan counts per CPU, and each encoding of it (a hybrid CPU has one per core
/// PMU).
#[derive(Clone, Debug, PartialEq)]
pub struct TruthEvent {
    /// The key of `values` in the attributor's rows.
    pub event: String,
    /// The record slot it is read into.
    pub slot: usize,
    pub encodings: Vec<Encoded>,
}

/// The plan's per-CPU counters, one per event (the CPUs' copies are one event).
pub fn truth_events(plan: &Plan) -> Vec<TruthEvent> {
    let mut out: Vec<TruthEvent> = Vec::new();
    // The stall pair is left out: per-task truth counters of it would take two more core
    // counters from every workload beside the weights being checked.
    for c in plan.counters.iter().filter(|c| {
        c.scope == crate::plan::CounterScope::Cpu && c.role != crate::plan::CounterRole::Stall
    }) {
        let Some(slot) = c.slot else { continue };
        let key = if c.value_key.is_empty() {
            c.event.clone()
        } else {
            c.value_key.clone()
        };
        let same = |e: &Encoded| {
            (e.pmu_type, e.config, e.config1, e.config2)
                == (
                    c.encoded.pmu_type,
                    c.encoded.config,
                    c.encoded.config1,
                    c.encoded.config2,
                )
        };
        match out.iter_mut().find(|t| t.event == key) {
            Some(t) if t.encodings.iter().any(same) => {}
            Some(t) => t.encodings.push(c.encoded.clone()),
            None => out.push(TruthEvent {
                event: key,
                slot,
                encodings: vec![c.encoded.clone()],
            }),
        }
    }
    out
}

/// The period each event is sampled with: every count of a software or tracepoint event (each
/// a sample: the truth is exact), 20 µs of on-CPU time for the clocks, a thousand counts of a
/// hardware event (the truth is then exact to a thousand counts at each interval end). A task
/// that lives less than a period leaves no sample: a clock truth misses up to 20 µs of each.
pub fn period_of(e: &Encoded) -> u64 {
    match (e.pmu_type, e.config) {
        (TYPE_SOFTWARE, SW_CPU_CLOCK | SW_TASK_CLOCK) => 20_000,
        (TYPE_SOFTWARE | TYPE_TRACEPOINT, _) => 1,
        _ => 1000,
    }
}

const SW_TASK_CLOCK: u64 = 1;
/// What all the truth's rings may take together. A sample is 32 bytes (header, pid and tid,
/// time, count), so 64 MiB holds two million: on a small machine a ring holds 32k samples, over
/// half a second of a workload faulting on every page; on a large one each CPU's ring is
/// smaller, and so is each CPU's share of the samples.
const RINGS_BYTES: usize = 64 << 20;

/// The pages of each ring (a power of two, as the kernel wants) when there are `rings` of them
/// in [`RINGS_BYTES`]: from 8 (about 1k samples) to 256 (1 MiB with 4 KiB pages).
fn ring_pages(rings: usize, page: usize) -> usize {
    let fit = RINGS_BYTES / rings.max(1) / page.max(1);
    let pow = if fit == 0 { 1 } else { 1 << fit.ilog2() };
    pow.clamp(8, 256)
}

/// How often each CPU's reader empties its rings.
const DRAIN_EVERY: Duration = Duration::from_millis(2);

/// Each workload's events, sampled: the time of every sample and what its thread counted since
/// its last, so the truth between any two instants is counted, not interpolated.
pub struct Truth {
    events: usize,
    /// `cells[workload * events + event]`: (sample time on CLOCK_MONOTONIC ns, counts since
    /// the thread's previous sample on that CPU), and the processes sampled.
    cells: Arc<Mutex<Vec<Cell>>>,
    /// Each cell's counts summed up to each sample time, sorted (once stopped).
    totals: Vec<Vec<(u64, u64)>>,
    /// Samples the kernel dropped (a full ring) or withheld (throttling).
    lost: Arc<AtomicU64>,
    /// Whether the samples carry their thread's count (else each is one period).
    read: bool,
    stop: Arc<AtomicBool>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// The truth could not be set up: a counter the kernel refused (which workload and event, and
/// its answer), or a reader thread that could not start.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    #[error("{}", crate::sys::perf::open_words(&format!("counting {event} of workload pid {pid}"), source))]
    Open {
        event: String,
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("starting the reader of CPU {cpu}'s truth samples")]
    Reader {
        cpu: u32,
        #[source]
        source: std::io::Error,
    },
}

impl TruthError {
    /// The system's answer that stopped the truth.
    pub fn io(&self) -> &std::io::Error {
        match self {
            TruthError::Open { source, .. } | TruthError::Reader { source, .. } => source,
        }
    }
}

/// One workload's samples of one event, and the processes (its own and its children) they came
/// from.
#[derive(Clone, Default)]
struct Cell {
    samples: Vec<(u64, u64)>,
    processes: HashSet<u32>,
}

/// One sampled counter: its cell, fd and ring, and how its samples count.
struct Sampled {
    cell: usize,
    _fd: OwnedFd,
    ring: Box<dyn RingBuffer>,
    /// The samples carry their thread's count: each thread's last one, by thread id.
    read: Option<HashMap<u32, u64>>,
    period: u64,
}

/// A sample's process, time and the counts it adds: with `read` (each thread's count at its
/// last sample, by thread id), its thread's count less that at its previous sample (a thread id
/// seen again with a smaller count is a new thread); without, one `period`.
fn sample(read: &mut Option<HashMap<u32, u64>>, period: u64, payload: &[u8]) -> (u32, u64, u64) {
    let word = |i: usize| {
        payload
            .get(i * 8..i * 8 + 8)
            .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
    };
    // { u32 pid, u32 tid; u64 time; u64 value if read } (PERF_SAMPLE_TID | TIME | READ, in the
    // order of include/uapi/linux/perf_event.h's PERF_RECORD_SAMPLE), native endian.
    let w0 = word(0).to_ne_bytes();
    let pid = u32::from_ne_bytes([w0[0], w0[1], w0[2], w0[3]]);
    let tid = u32::from_ne_bytes([w0[4], w0[5], w0[6], w0[7]]);
    let Some(last) = read.as_mut() else {
        return (pid, word(1), period);
    };
    let value = word(2);
    let before = last.insert(tid, value).unwrap_or(0);
    let added = if value >= before {
        value - before
    } else {
        value
    };
    (pid, word(1), added)
}

impl Truth {
    /// Opens each event on each pid and CPU (inherited by its threads and children, sampling
    /// at once: the workloads are waiting) and starts the thread that empties the rings.
    pub fn open(
        sys: Arc<dyn PerfSys>,
        pids: &[u32],
        cpus: &[u32],
        events: &[TruthEvent],
    ) -> Result<Truth, TruthError> {
        // Each CPU's rings, emptied by a reader of their own on that CPU.
        let mut rings: BTreeMap<u32, Vec<Sampled>> = BTreeMap::new();
        let page = crate::sys::devmem::page_size() as usize;
        let encodings: usize = events.iter().map(|e| e.encodings.len()).sum();
        let ring_pages = ring_pages(pids.len() * encodings * cpus.len(), page);
        let ring_bytes = ring_pages * page;
        let mut read = true;
        for (w, &pid) in pids.iter().enumerate() {
            for (k, ev) in events.iter().enumerate() {
                for e in &ev.encodings {
                    for &cpu in cpus {
                        let err = |source| TruthError::Open {
                            event: ev.event.clone(),
                            pid,
                            source,
                        };
                        let fd =
                            match open_counter(&*sys, e, ring_bytes as u32, pid, cpu, &mut read) {
                                Ok(fd) => fd,
                                // A hybrid CPU's core PMU exists on some CPUs only.
                                Err(x)
                                    if x.raw_os_error() == Some(libc::ENOENT) && cpus.len() > 1 =>
                                {
                                    continue;
                                }
                                Err(x) => return Err(err(x)),
                            };
                        let ring = sys.map_ring(fd.as_fd(), ring_pages).map_err(err)?;
                        rings.entry(cpu).or_default().push(Sampled {
                            cell: w * events.len() + k,
                            _fd: fd,
                            ring,
                            read: read.then(HashMap::new),
                            period: period_of(e),
                        });
                    }
                }
            }
        }
        let cells = Arc::new(Mutex::new(vec![Cell::default(); pids.len() * events.len()]));
        let lost = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        for (cpu, rings) in rings {
            match spawn_reader(cpu, rings, &cells, &lost, &stop) {
                Ok(t) => readers.push(t),
                Err(source) => {
                    stop.store(true, Ordering::SeqCst);
                    readers.into_iter().for_each(|t| drop(t.join()));
                    return Err(TruthError::Reader { cpu, source });
                }
            }
        }
        Ok(Truth {
            events: events.len(),
            cells,
            totals: Vec::new(),
            lost,
            read,
            stop,
            readers,
        })
    }

    /// Each workload's count of each event from the start up to `t_ns` (once stopped).
    pub fn at(&self, t_ns: u64) -> Vec<Vec<f64>> {
        let counts: Vec<f64> = self
            .totals
            .iter()
            .map(|sums| {
                let n = sums.partition_point(|&(t, _)| t <= t_ns);
                n.checked_sub(1).map_or(0.0, |i| sums[i].1 as f64)
            })
            .collect();
        counts
            .chunks(self.events.max(1))
            .map(<[f64]>::to_vec)
            .collect()
    }

    /// The processes the truth of workload `w` counted in (its own and its children's), sorted:
    /// the tasks whose charges are the workload's, and no other run's of the same name.
    pub fn processes(&self, w: usize) -> Vec<u32> {
        let cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.events.max(1);
        let mut all: Vec<u32> = cells
            .iter()
            .skip(w * n)
            .take(n)
            .flat_map(|c| c.processes.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether each sample carried its thread's count (the truth is exact to a period at any
    /// instant), or was counted as one period (short by the periods a late timer skipped).
    pub fn counts_read(&self) -> bool {
        self.read
    }

    /// Samples lost or throttled: without counts read, the truth is short by at least this many
    /// periods (with them, a thread's next sample makes up for them).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stops sampling after a last drain, and sums each cell's counts in time order for
    /// [`Truth::at`].
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.readers.drain(..) {
            let _ = t.join();
        }
        if !self.totals.is_empty() {
            return;
        }
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        self.totals = cells
            .iter_mut()
            .map(|c| {
                c.samples.sort_unstable();
                let mut sum = 0u64;
                c.samples
                    .iter()
                    .map(|&(t, n)| {
                        sum = sum.saturating_add(n);
                        (t, sum)
                    })
                    .collect()
            })
            .collect();
    }
}

impl Drop for Truth {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the reader that empties `cpu`'s rings every [`DRAIN_EVERY`] until `stop`, then once
/// more. It runs on that CPU at real-time priority where it may: a ring's writer and its reader
/// then stop together when a hypervisor takes the CPU away (on a VM, 100 ms and more at a
/// time), and a reader on another CPU stopped so long would find a busy workload's ring full.
fn spawn_reader(
    cpu: u32,
    mut rings: Vec<Sampled>,
    cells: &Arc<Mutex<Vec<Cell>>>,
    lost: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (cells, lost, stop) = (cells.clone(), lost.clone(), stop.clone());
    std::thread::Builder::new()
        .name(format!("imc-truth/{cpu}"))
        .spawn(move || {
            if let Err(e) = crate::sys::thread::pin_to_cpu(cpu) {
                log::info!("truth reader of CPU {cpu} runs on any CPU: {e}");
            }
            if let Err(e) = crate::sys::process::realtime_thread() {
                log::info!("truth reader of CPU {cpu} stays at normal priority: {e}");
            }
            loop {
                let last = stop.load(Ordering::SeqCst);
                drain(&mut rings, &cells, &lost);
                if last {
                    break;
                }
                std::thread::sleep(DRAIN_EVERY);
            }
        })
}

/// One truth counter of `pid` on `cpu`, its samples carrying their thread's count while `read`
/// (turned off for good where the kernel refuses that on an inherited counter: EINVAL).
fn open_counter(
    sys: &dyn PerfSys,
    e: &Encoded,
    ring_bytes: u32,
    pid: u32,
    cpu: u32,
    read: &mut bool,
) -> std::io::Result<OwnedFd> {
    if *read {
        match sys.open(
            &sampling_attr(e, ring_bytes, true),
            pid as i32,
            cpu as i32,
            None,
        ) {
            Err(x) if x.raw_os_error() == Some(libc::EINVAL) => *read = false,
            opened => return opened,
        }
    }
    sys.open(
        &sampling_attr(e, ring_bytes, false),
        pid as i32,
        cpu as i32,
        None,
    )
}

/// The sampling attr of a truth counter: `period_of` the event, each sample its time on
/// CLOCK_MONOTONIC (the sampler's clock), its process and thread and, with `read`, that
/// thread's count, inherited, nobody woken before the ring fills.
fn sampling_attr(e: &Encoded, ring_bytes: u32, read: bool) -> PerfEventAttr {
    let mut attr = PerfEventAttr::counter(
        e.pmu_type,
        [e.config, e.config1, e.config2],
        e.exclude_user,
        e.exclude_kernel,
    );
    attr.sample_period = period_of(e);
    attr.sample_type = SAMPLE_TID | SAMPLE_TIME;
    if read {
        // read_format 0: the one value, the thread's own count on this CPU.
        attr.sample_type |= SAMPLE_READ;
        attr.read_format = 0;
    }
    attr.flags |= FLAG_INHERIT | FLAG_USE_CLOCKID | FLAG_WATERMARK;
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.wakeup_events = ring_bytes / 2;
    attr
}

fn drain(rings: &mut [Sampled], cells: &Mutex<Vec<Cell>>, lost: &AtomicU64) {
    let mut cells = cells.lock().unwrap_or_else(|p| p.into_inner());
    for s in rings.iter_mut() {
        let Some(cell) = cells.get_mut(s.cell) else {
            continue;
        };
        let Sampled {
            ring, read, period, ..
        } = s;
        ring.drain(&mut |kind, payload| match kind {
            RECORD_SAMPLE => {
                let (pid, t, n) = sample(read, *period, payload);
                cell.processes.insert(pid);
                cell.samples.push((t, n));
            }
            // { id, lost }
            RECORD_LOST => {
                let n = payload
                    .get(8..16)
                    .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
                lost.fetch_add(n, Ordering::SeqCst);
            }
            RECORD_THROTTLE => {
                lost.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::perf::PerfIoctl;
    use std::os::fd::BorrowedFd;

    /// What one ring of (pid, cpu) yields, with counts read or not.
    type Script = fn(i32, i32, bool) -> Vec<(u32, Vec<u8>)>;

    /// Each ring yields the records its script gives its (pid, cpu), once; an inherited
    /// counter whose samples would carry counts is refused (EINVAL) when `old_kernel`.
    struct Fake {
        opened: Mutex<Vec<(PerfEventAttr, i32, i32)>>,
        script: Script,
        old_kernel: bool,
    }

    impl Fake {
        fn new(script: Script, old_kernel: bool) -> Arc<Fake> {
            Arc::new(Fake {
                opened: Mutex::default(),
                script,
                old_kernel,
            })
        }
    }

    struct FakeRing(Vec<(u32, Vec<u8>)>);

    impl RingBuffer for FakeRing {
        fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
            for (k, p) in self.0.drain(..) {
                f(k, &p);
            }
        }
    }

    impl PerfSys for Fake {
        fn open(
            &self,
            attr: &PerfEventAttr,
            pid: i32,
            cpu: i32,
            _: Option<BorrowedFd<'_>>,
        ) -> std::io::Result<OwnedFd> {
            if self.old_kernel && attr.sample_type & SAMPLE_READ != 0 {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            self.opened.lock().unwrap().push((*attr, pid, cpu));
            Ok(std::fs::File::open("/dev/null")?.into())
        }
        fn read(&self, _: BorrowedFd<'_>, _: &mut [u8]) -> std::io::Result<usize> {
            Ok(0)
        }
        fn ioctl(&self, _: BorrowedFd<'_>, _: PerfIoctl) -> std::io::Result<()> {
            Ok(())
        }
        fn map_ring(&self, _: BorrowedFd<'_>, _: usize) -> std::io::Result<Box<dyn RingBuffer>> {
            let (attr, pid, cpu) = *self.opened.lock().unwrap().last().unwrap();
            let read = attr.sample_type & SAMPLE_READ != 0;
            Ok(Box::new(FakeRing((self.script)(pid, cpu, read))))
        }
    }

    /// A sample of thread `tid` of `pid` at `t`, carrying the thread's count `value` (or, where
    /// counts are not read, its time alone).
    fn at_time(read: bool, pid: u32, tid: u32, t: u64, value: u64) -> (u32, Vec<u8>) {
        let mut p = pid.to_ne_bytes().to_vec();
        p.extend(tid.to_ne_bytes());
        p.extend(t.to_ne_bytes());
        if read {
            p.extend(value.to_ne_bytes());
        }
        (RECORD_SAMPLE, p)
    }

    pub(crate) fn page_faults() -> Encoded {
        Encoded {
            event: "page-faults".into(),
            pmu: "software".into(),
            pmu_type: 1,
            config: 2,
            ..Default::default()
        }
    }

    #[test]
    fn every_count_is_a_timed_sample_per_thread_and_cpu_inherited() {
        // pid 41: its thread counts 1, 2, 3 at 10, 20, 30 (+ the CPU), a child process 43 of
        // it 1 at 25 on CPU 0; pid 42: one lost record.
        let fake = Fake::new(
            |pid, cpu, read| {
                let c = cpu as u64;
                if pid == 41 {
                    let mut v: Vec<_> = (1..=3)
                        .map(|i| at_time(read, 41, 41, i * 10 + c, i))
                        .collect();
                    if cpu == 0 {
                        v.push(at_time(read, 43, 43, 25, 1));
                    }
                    v
                } else {
                    let mut lost = 7u64.to_ne_bytes().to_vec();
                    lost.extend(5u64.to_ne_bytes());
                    vec![(RECORD_LOST, lost)]
                }
            },
            false,
        );
        let ev = TruthEvent {
            event: "page-faults".into(),
            slot: 0,
            encodings: vec![page_faults()],
        };
        let mut truth = Truth::open(fake.clone(), &[41, 42], &[0, 1], &[ev]).unwrap();
        truth.stop();
        assert!(truth.counts_read());
        let opened = fake.opened.lock().unwrap();
        let who: Vec<(i32, i32)> = opened.iter().map(|o| (o.1, o.2)).collect();
        assert_eq!(who, [(41, 0), (41, 1), (42, 0), (42, 1)]);
        for (attr, ..) in opened.iter() {
            assert_ne!(attr.flags & FLAG_INHERIT, 0);
            assert_ne!(attr.flags & FLAG_USE_CLOCKID, 0);
            assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
            assert_eq!((attr.type_, attr.config, attr.sample_period), (1, 2, 1));
            assert_eq!(attr.sample_type, SAMPLE_TID | SAMPLE_TIME | SAMPLE_READ);
            assert_eq!(attr.read_format, 0);
        }
        // pid 41's samples: 10, 11, 20, 21, 25, 30, 31.
        assert_eq!(truth.at(9), [[0.0], [0.0]]);
        assert_eq!(truth.at(20), [[3.0], [0.0]]);
        assert_eq!(truth.at(100), [[7.0], [0.0]]);
        assert_eq!(truth.lost(), 10);
        // The processes each workload's truth counted in: its own and its child's.
        assert_eq!(truth.processes(0), [41, 43]);
        assert!(truth.processes(1).is_empty());
    }

    /// A clock's thread whose sample timer fired late skipped two periods: its next sample
    /// carries the time it ran all the same, where counting samples would leave it short.
    #[test]
    fn a_late_timers_skipped_periods_are_counted_where_the_kernel_reads_counts() {
        let script: Script = |_, cpu, read| {
            if cpu != 0 {
                return Vec::new();
            }
            [(20, 20_000), (40, 40_000), (100, 100_000), (120, 120_000)]
                .into_iter()
                .map(|(t, v)| at_time(read, 41, 41, t, v))
                .collect()
        };
        let clock = TruthEvent {
            event: "cpu-clock".into(),
            slot: 0,
            encodings: vec![Encoded {
                pmu_type: 1,
                config: 0,
                ..Default::default()
            }],
        };
        let mut truth = Truth::open(
            Fake::new(script, false),
            &[41],
            &[0],
            std::slice::from_ref(&clock),
        )
        .unwrap();
        truth.stop();
        assert_eq!(truth.at(100), [[100_000.0]]);
        assert_eq!(truth.at(1000), [[120_000.0]]);
        // A kernel that refuses counts in the samples of an inherited counter: each sample is
        // one period, and the skipped ones are missing.
        let old = Fake::new(script, true);
        let mut truth = Truth::open(old.clone(), &[41], &[0], &[clock]).unwrap();
        truth.stop();
        assert!(!truth.counts_read());
        assert_eq!(
            old.opened.lock().unwrap()[0].0.sample_type,
            SAMPLE_TID | SAMPLE_TIME
        );
        assert_eq!(truth.at(1000), [[80_000.0]]);
    }

    #[test]
    fn clocks_are_sampled_by_time_and_hardware_by_thousands() {
        let clock = Encoded {
            pmu_type: 1,
            config: 0,
            ..Default::default()
        };
        assert_eq!(period_of(&clock), 20_000);
        assert_eq!(period_of(&page_faults()), 1);
        let hw = Encoded {
            pmu_type: 4,
            config: 0x412e,
            ..Default::default()
        };
        assert_eq!(period_of(&hw), 1000);
    }

    #[test]
    fn rings_share_a_budget_in_powers_of_two_within_bounds() {
        // This VM: 7 workloads, 2 events, 2 CPUs: each ring at the most.
        assert_eq!(ring_pages(28, 4096), 256);
        // 128 CPUs: 64 MiB over 1792 rings is 9 pages; the power of two below.
        assert_eq!(ring_pages(7 * 2 * 128, 4096), 8);
        assert_eq!(ring_pages(300, 4096), 32);
        // Never under a floor, however many; 64 KiB pages hold more a page.
        assert_eq!(ring_pages(1 << 20, 4096), 8);
        assert_eq!(ring_pages(28, 65536), 32);
        assert_eq!(ring_pages(0, 4096), 256);
        for rings in 1..5000 {
            let p = ring_pages(rings, 4096);
            assert!(
                p.is_power_of_two() && (8..=256).contains(&p),
                "{rings}: {p}"
            );
            assert!(p == 8 || p * 4096 * rings <= RINGS_BYTES, "{rings}: {p}");
        }
    }
}
