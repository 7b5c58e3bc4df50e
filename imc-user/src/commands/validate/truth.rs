//! The truth of `imc validate`: every per-CPU event the plan counts (a weight, or a stand-in
//! such as page-faults) also counted by the kernel for each workload alone (perf_event_open on
//! its pid, cpu = -1, inherited by its threads and children), read by a thread of its own every
//! millisecond with the time of each read, so the truth at any interval end is interpolated
//! between two reads a millisecond apart.
use crate::model::Encoded;
use crate::plan::Plan;
use crate::sys::perf::{FLAG_INHERIT, PerfEventAttr, PerfSys, read_counter};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
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
    for c in plan.counters.iter().filter(|c| c.scope == "cpu") {
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

/// One read of every truth counter: `values[workload * events + event]`.
#[derive(Clone, Debug, PartialEq)]
struct Reading {
    t_ns: u64,
    values: Vec<f64>,
}

/// The truth counters of every workload, read every millisecond until dropped.
pub struct Truth {
    events: usize,
    series: Arc<Mutex<Vec<Reading>>>,
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

type Cells = Vec<Vec<OwnedFd>>;

impl Truth {
    /// Opens each event on each pid (inherited, counting at once: the workloads are waiting)
    /// and starts the reading thread.
    pub fn open(
        sys: Arc<dyn PerfSys>,
        pids: &[u32],
        events: &[TruthEvent],
        now: fn() -> u64,
    ) -> Result<Truth, TruthError> {
        let mut cells: Cells = Vec::new();
        for &pid in pids {
            for ev in events {
                let mut fds = Vec::new();
                for e in &ev.encodings {
                    let mut attr = PerfEventAttr::counter(
                        e.pmu_type,
                        [e.config, e.config1, e.config2],
                        e.exclude_user,
                        e.exclude_kernel,
                    );
                    attr.flags |= FLAG_INHERIT;
                    let fd =
                        sys.open(&attr, pid as i32, -1, None)
                            .map_err(|source| TruthError {
                                event: ev.event.clone(),
                                pid,
                                source,
                            })?;
                    fds.push(fd);
                }
                cells.push(fds);
            }
        }
        let series = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let first = read_all(sys.as_ref(), &cells, now);
        series.lock().unwrap_or_else(|p| p.into_inner()).push(first);
        let reader = std::thread::Builder::new()
            .name("imc-truth".into())
            .spawn({
                let (series, stop) = (series.clone(), stop.clone());
                move || {
                    if let Err(e) = crate::sys::process::realtime_thread() {
                        log::info!("truth reader stays at normal priority: {e}");
                    }
                    while !stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                        let r = read_all(sys.as_ref(), &cells, now);
                        series.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                    }
                }
            })
            .ok();
        Ok(Truth {
            events: events.len(),
            series,
            stop,
            reader,
        })
    }

    /// Each workload's count of each event at `t_ns`: interpolated between the reads around it
    /// (the first read before it, the last after it).
    pub fn at(&self, t_ns: u64) -> Vec<Vec<f64>> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let values = interpolate(&series, t_ns);
        values
            .chunks(self.events.max(1))
            .map(<[f64]>::to_vec)
            .collect()
    }

    /// The largest gap between two reads: how far apart the truth's own points are.
    pub fn largest_gap_ns(&self) -> u64 {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series
            .windows(2)
            .map(|w| w[1].t_ns.saturating_sub(w[0].t_ns))
            .max()
            .unwrap_or(0)
    }

    /// Stops reading (the series is kept).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Truth {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_all(sys: &dyn PerfSys, cells: &Cells, now: fn() -> u64) -> Reading {
    let t0 = now();
    let values = cells
        .iter()
        .map(|fds| {
            fds.iter()
                .filter_map(|fd| read_counter(sys, fd.as_fd()).ok())
                .map(|v| v.scaled().0)
                .sum()
        })
        .collect();
    let t1 = now();
    Reading {
        t_ns: t0 / 2 + t1 / 2,
        values,
    }
}

fn interpolate(series: &[Reading], t: u64) -> Vec<f64> {
    let Some(first) = series.first() else {
        return Vec::new();
    };
    let after = series.partition_point(|r| r.t_ns <= t);
    if after == 0 {
        return first.values.clone();
    }
    let a = &series[after - 1];
    let Some(b) = series.get(after) else {
        return a.values.clone();
    };
    let span = b.t_ns.saturating_sub(a.t_ns).max(1) as f64;
    let f = (t - a.t_ns) as f64 / span;
    a.values
        .iter()
        .zip(&b.values)
        .map(|(x, y)| x + (y - x) * f)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::perf::PerfIoctl;
    use std::os::fd::BorrowedFd;
    use std::sync::atomic::AtomicU64;

    /// Counts grow by pid × 10 every read; records what was opened.
    #[derive(Default)]
    struct Fake {
        opened: Mutex<Vec<(PerfEventAttr, i32, i32)>>,
        reads: AtomicU64,
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
        fn read(&self, _: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.reads.fetch_add(1, Ordering::SeqCst);
            buf[..8].copy_from_slice(&(n * 10).to_ne_bytes());
            buf[8..16].copy_from_slice(&1u64.to_ne_bytes());
            buf[16..24].copy_from_slice(&1u64.to_ne_bytes());
            Ok(24)
        }
        fn ioctl(&self, _: BorrowedFd<'_>, _: PerfIoctl) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn page_faults() -> Encoded {
        Encoded {
            event: "page-faults".into(),
            pmu: "software".into(),
            pmu_type: 1,
            config: 2,
            ..Default::default()
        }
    }

    #[test]
    fn counters_are_per_task_on_any_cpu_and_inherited() {
        let fake = Arc::new(Fake::default());
        let ev = TruthEvent {
            event: "page-faults".into(),
            slot: 0,
            encodings: vec![page_faults()],
        };
        let mut truth =
            Truth::open(fake.clone(), &[41, 42], &[ev], crate::sampler::monotonic_ns).unwrap();
        truth.stop();
        let opened = fake.opened.lock().unwrap();
        assert_eq!(opened.len(), 2);
        for (i, (attr, pid, cpu)) in opened.iter().enumerate() {
            assert_eq!((*pid, *cpu), (41 + i as i32, -1));
            assert_ne!(attr.flags & FLAG_INHERIT, 0);
            assert_eq!((attr.type_, attr.config), (1, 2));
        }
        // Two workloads, one event: one value each, growing.
        let late = truth.at(u64::MAX);
        assert_eq!(late.len(), 2);
        assert!(late[0][0] >= truth.at(0)[0][0]);
    }

    #[test]
    fn truth_between_reads_is_interpolated_and_clamped_outside() {
        let series = vec![
            Reading {
                t_ns: 100,
                values: vec![0.0, 10.0],
            },
            Reading {
                t_ns: 200,
                values: vec![50.0, 10.0],
            },
        ];
        assert_eq!(interpolate(&series, 150), vec![25.0, 10.0]);
        assert_eq!(interpolate(&series, 50), vec![0.0, 10.0]);
        assert_eq!(interpolate(&series, 200), vec![50.0, 10.0]);
        assert_eq!(interpolate(&series, 900), vec![50.0, 10.0]);
        assert!(interpolate(&[], 1).is_empty());
    }
}
