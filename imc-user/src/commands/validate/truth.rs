//! The truth of `imc validate`: every per-CPU event the plan counts (a weight, or a stand-in
//! such as page-faults) also counted by the kernel for each workload alone (perf_event_open on
//! its pid, inherited by its threads and children), as samples with their time: every count of
//! a software event is a sample, so the truth between two instants is exact, whenever they
//! fall. A reading of counters at instants (cpu = -1) would put the counts between two reads on
//! the wrong side of an interval end whenever the reader is late (on a busy VM, up to 17 ms).
//! The kernel refuses a ring on an inherited counter of every CPU (cpu = -1), so there is one
//! per workload, event and CPU.
use crate::model::Encoded;
use crate::plan::Plan;
use crate::sys::perf::{
    FLAG_INHERIT, FLAG_USE_CLOCKID, FLAG_WATERMARK, PerfEventAttr, PerfSys, RECORD_LOST,
    RECORD_SAMPLE, RECORD_THROTTLE, RingBuffer, SAMPLE_TIME, SW_CPU_CLOCK, TYPE_SOFTWARE,
    TYPE_TRACEPOINT,
};
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
/// 64 pages a ring (256 KiB with 4 KiB pages): at 16 bytes a sample, 16k samples, emptied
/// every two milliseconds.
const RING_PAGES: usize = 64;

/// Each workload's events, sampled: the time of every sample (or every period's worth), so the
/// truth between any two instants is counted, not interpolated.
pub struct Truth {
    events: usize,
    periods: Vec<u64>,
    /// `cells[workload * events + event]`: sample times (CLOCK_MONOTONIC ns).
    cells: Arc<Mutex<Vec<Vec<u64>>>>,
    /// Samples the kernel dropped (a full ring) or withheld (throttling).
    lost: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Opening a truth counter failed: which workload and event, and the kernel's answer.
#[derive(Debug, thiserror::Error)]
#[error("{}", crate::sys::perf::explain_open_error(&format!("counting {event} of workload pid {pid}"), source))]
pub struct TruthError {
    pub event: String,
    pub pid: u32,
    #[source]
    pub source: std::io::Error,
}

/// One sampled counter: its cell, fd and ring.
struct Sampled {
    cell: usize,
    _fd: OwnedFd,
    ring: Box<dyn RingBuffer>,
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
        let mut rings = Vec::new();
        let pages = RING_PAGES * crate::sys::devmem::page_size() as usize;
        for (w, &pid) in pids.iter().enumerate() {
            for (k, ev) in events.iter().enumerate() {
                for e in &ev.encodings {
                    for &cpu in cpus {
                        let err = |source| TruthError {
                            event: ev.event.clone(),
                            pid,
                            source,
                        };
                        let attr = sampling_attr(e, pages as u32);
                        let fd = match sys.open(&attr, pid as i32, cpu as i32, None) {
                            Ok(fd) => fd,
                            // A hybrid CPU's core PMU exists on some CPUs only.
                            Err(x) if x.raw_os_error() == Some(libc::ENOENT) && cpus.len() > 1 => {
                                continue;
                            }
                            Err(x) => return Err(err(x)),
                        };
                        let ring = sys.map_ring(fd.as_fd(), RING_PAGES).map_err(err)?;
                        rings.push(Sampled {
                            cell: w * events.len() + k,
                            _fd: fd,
                            ring,
                        });
                    }
                }
            }
        }
        let cells = Arc::new(Mutex::new(vec![Vec::new(); pids.len() * events.len()]));
        let lost = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = std::thread::Builder::new()
            .name("imc-truth".into())
            .spawn({
                let (cells, lost, stop) = (cells.clone(), lost.clone(), stop.clone());
                move || {
                    if let Err(e) = crate::sys::process::realtime_thread() {
                        log::info!("truth reader stays at normal priority: {e}");
                    }
                    loop {
                        let last = stop.load(Ordering::SeqCst);
                        drain(&mut rings, &cells, &lost);
                        if last {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            })
            .ok();
        Ok(Truth {
            events: events.len(),
            periods: events
                .iter()
                .map(|e| e.encodings.first().map_or(1, period_of))
                .collect(),
            cells,
            lost,
            stop,
            reader,
        })
    }

    /// Each workload's count of each event from the start up to `t_ns`.
    pub fn at(&self, t_ns: u64) -> Vec<Vec<f64>> {
        let cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        let counts: Vec<f64> = cells
            .iter()
            .enumerate()
            .map(|(i, times)| {
                let period = self
                    .periods
                    .get(i % self.events.max(1))
                    .copied()
                    .unwrap_or(1);
                (times.partition_point(|&t| t <= t_ns) as u64 * period) as f64
            })
            .collect();
        counts
            .chunks(self.events.max(1))
            .map(<[f64]>::to_vec)
            .collect()
    }

    /// Samples lost or throttled: the truth is short by at least this many periods.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stops sampling after a last drain; the times are sorted for [`Truth::at`].
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        for c in cells.iter_mut() {
            c.sort_unstable();
        }
    }
}

impl Drop for Truth {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The sampling attr of a truth counter: `period_of` the event, each sample its time on
/// CLOCK_MONOTONIC (the sampler's clock), inherited, nobody woken before the ring fills.
fn sampling_attr(e: &Encoded, ring_bytes: u32) -> PerfEventAttr {
    let mut attr = PerfEventAttr::counter(
        e.pmu_type,
        [e.config, e.config1, e.config2],
        e.exclude_user,
        e.exclude_kernel,
    );
    attr.sample_period = period_of(e);
    attr.sample_type = SAMPLE_TIME;
    attr.flags |= FLAG_INHERIT | FLAG_USE_CLOCKID | FLAG_WATERMARK;
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.wakeup_events = ring_bytes / 2;
    attr
}

fn drain(rings: &mut [Sampled], cells: &Mutex<Vec<Vec<u64>>>, lost: &AtomicU64) {
    let mut cells = cells.lock().unwrap_or_else(|p| p.into_inner());
    for s in rings.iter_mut() {
        let Some(times) = cells.get_mut(s.cell) else {
            continue;
        };
        s.ring.drain(&mut |kind, payload| {
            let word = |i: usize| {
                payload
                    .get(i * 8..i * 8 + 8)
                    .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
            };
            match kind {
                RECORD_SAMPLE => times.push(word(0)),
                // { id, lost }
                RECORD_LOST => {
                    lost.fetch_add(word(1), Ordering::SeqCst);
                }
                RECORD_THROTTLE => {
                    lost.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::perf::PerfIoctl;
    use std::os::fd::BorrowedFd;

    /// Each ring yields samples at the times scripted for its (pid, cpu), once.
    #[derive(Default)]
    struct Fake {
        opened: Mutex<Vec<(PerfEventAttr, i32, i32)>>,
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
            let (_, pid, cpu) = *self.opened.lock().unwrap().last().unwrap();
            // pid 41: samples at 10, 20, 30 on each CPU; pid 42: one lost record.
            let recs = if pid == 41 {
                (1..=3)
                    .map(|i| (RECORD_SAMPLE, (i * 10 + cpu as u64).to_ne_bytes().to_vec()))
                    .collect()
            } else {
                let mut lost = 7u64.to_ne_bytes().to_vec();
                lost.extend(5u64.to_ne_bytes());
                vec![(RECORD_LOST, lost)]
            };
            Ok(Box::new(FakeRing(recs)))
        }
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
    fn every_count_is_a_timed_sample_per_task_and_cpu_inherited() {
        let fake = Arc::new(Fake::default());
        let ev = TruthEvent {
            event: "page-faults".into(),
            slot: 0,
            encodings: vec![page_faults()],
        };
        let mut truth = Truth::open(fake.clone(), &[41, 42], &[0, 1], &[ev]).unwrap();
        truth.stop();
        let opened = fake.opened.lock().unwrap();
        let who: Vec<(i32, i32)> = opened.iter().map(|o| (o.1, o.2)).collect();
        assert_eq!(who, [(41, 0), (41, 1), (42, 0), (42, 1)]);
        for (attr, ..) in opened.iter() {
            assert_ne!(attr.flags & FLAG_INHERIT, 0);
            assert_ne!(attr.flags & FLAG_USE_CLOCKID, 0);
            assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
            assert_eq!((attr.type_, attr.config, attr.sample_period), (1, 2, 1));
            assert_eq!(attr.sample_type, SAMPLE_TIME);
        }
        // pid 41: samples at 10, 11, 20, 21, 30, 31.
        assert_eq!(truth.at(9), [[0.0], [0.0]]);
        assert_eq!(truth.at(20), [[3.0], [0.0]]);
        assert_eq!(truth.at(100), [[6.0], [0.0]]);
        assert_eq!(truth.lost(), 10);
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
}
