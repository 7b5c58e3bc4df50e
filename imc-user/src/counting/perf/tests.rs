use super::*;
use crate::counting::Memory;
use crate::model::Scope;
use crate::sys::perf::FakePerf;
use crate::sys::perf::{PerfEventAttr, RingBuffer};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// Records of one ring: (type, payload).
type Records = Vec<(u32, Vec<u8>)>;

/// `FakePerf` with rings: the n-th ring mapped yields the n-th scripted batch of records
/// at its first drain; ioctls are recorded with the raw fd they were issued on.
#[derive(Default)]
struct RingFake {
    inner: FakePerf,
    script: Mutex<Vec<Records>>,
    ioctls: Mutex<Vec<(i32, PerfIoctl)>>,
}

struct ScriptRing(Records);

impl RingBuffer for ScriptRing {
    fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
        for (kind, payload) in self.0.drain(..) {
            f(kind, &payload);
        }
    }
}

impl PerfSys for RingFake {
    fn open(
        &self,
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd> {
        self.inner.open(attr, pid, cpu, group)
    }
    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(fd, buf)
    }
    fn ioctl(&self, fd: BorrowedFd<'_>, op: PerfIoctl) -> io::Result<()> {
        self.ioctls.lock().unwrap().push((fd.as_raw_fd(), op));
        Ok(())
    }
    fn map_ring(&self, _fd: BorrowedFd<'_>, _pages: usize) -> io::Result<Box<dyn RingBuffer>> {
        let mut script = self.script.lock().unwrap();
        let batch = if script.is_empty() {
            Vec::new()
        } else {
            script.remove(0)
        };
        Ok(Box::new(ScriptRing(batch)))
    }
    fn supports_rings(&self) -> bool {
        true
    }
}

fn tsc_on(cpu: u32) -> PerfCounter {
    PerfCounter {
        spec: CounterSpec {
            event: "msr/tsc/".to_string(),
            pmu: "msr".to_string(),
            cpu: Some(cpu),
            scope: Scope::Cpu(cpu),
            package: None,
            direction: None,
            memory: Memory::Dram,
            bytes_per_count: None,
            scale: 1.0,
            counter_bits: 64,
            config: 0,
            sub_channel: None,
        },
        pmu_type: 99,
        config1: 0,
        config2: 0,
        exclude_user: false,
        exclude_kernel: false,
    }
}

/// Opens msr/tsc on CPUs 0 and 1 kernel-timed over `sys`, whose second ring yields
/// `records`; returns the backend and the two leaders' raw fds.
fn two_groups(sys: &Arc<RingFake>, records: Records) -> (PerfBackend, Vec<i32>) {
    *sys.script.lock().unwrap() = vec![Vec::new(), records];
    let b = PerfBackend::open_timed(
        sys.clone(),
        "perf",
        vec![tsc_on(0), tsc_on(1)],
        PERIOD,
        &MonotonicClock,
    )
    .unwrap();
    let leaders: Vec<i32> = sys
        .inner
        .opens()
        .iter()
        .filter(|o| o.group.is_none())
        .filter_map(|o| o.fd)
        .collect();
    assert_eq!(leaders.len(), 2);
    sys.ioctls.lock().unwrap().clear();
    (b, leaders)
}

const PERIOD: u64 = 1_000_000;

/// A (un)throttle record: time, id, stream id.
fn throttle_record(kind: u32, t: u64) -> (u32, Vec<u8>) {
    (
        kind,
        [t, 7, 7].iter().flat_map(|w| w.to_ne_bytes()).collect(),
    )
}

/// The milliseconds of stopped counters `-v` reports.
fn stopped_ms(stats: &str) -> f64 {
    let head = &stats[..stats.find(" ms in all").expect(stats)];
    head.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A throttle record in a group's ring makes imc lift the throttle at once with
/// PERF_EVENT_IOC_PERIOD on its leader, rather than leave its counters stopped until the
/// CPU's next tick; the window counts as time not running.
#[test]
fn a_throttled_group_is_unthrottled_at_once() {
    let sys = Arc::new(RingFake::default());
    let throttled_at = MonotonicClock.now_ns().saturating_sub(3_000_000);
    let (mut b, leaders) = two_groups(&sys, vec![throttle_record(RECORD_THROTTLE, throttled_at)]);
    b.advance_timed(&MonotonicClock, None, &mut |_, _, _| {});
    let ioctls = sys.ioctls.lock().unwrap().clone();
    assert_eq!(ioctls, vec![(leaders[1], PerfIoctl::Period(PERIOD))]);
    let stats = b.run_stats().unwrap();
    assert!(stats.contains("1 throttles (1 lifted by imc"), "{stats}");
    let ms = stopped_ms(&stats);
    assert!((3.0..1000.0).contains(&ms), "{stats}");
    // Lifted once: a later wake-up without a new record issues nothing.
    b.advance_timed(&MonotonicClock, None, &mut |_, _, _| {});
    assert_eq!(sys.ioctls.lock().unwrap().len(), 1);
}

/// A throttle the kernel lifted itself before imc looked: nothing to restart, and the
/// window between the two records counts as time not running.
#[test]
fn a_throttle_the_kernel_lifted_is_only_accounted() {
    let sys = Arc::new(RingFake::default());
    let t = MonotonicClock.now_ns();
    let (mut b, _) = two_groups(
        &sys,
        vec![
            throttle_record(RECORD_THROTTLE, t - 5_000_000),
            throttle_record(RECORD_UNTHROTTLE, t - 3_500_000),
        ],
    );
    b.advance_timed(&MonotonicClock, None, &mut |_, _, _| {});
    assert!(sys.ioctls.lock().unwrap().is_empty());
    let stats = b.run_stats().unwrap();
    assert!(stats.contains("1 throttles (0 lifted by imc"), "{stats}");
    assert_eq!(stopped_ms(&stats), 1.5, "{stats}");
}
