//! Local readers for kernel-timed counting: a thread pinned to a CPU reads that CPU's counter
//! groups at every boundary while the kernel's own boundary samples do not come.
//!
//! Why on the group's own CPU: reading a group opened on another CPU makes the kernel run the
//! read there through an IPI, and the reading thread spins until that CPU answers. For a halted
//! vCPU that is 20–60 µs of imc's CPU per read, and the moment the counters were read is
//! uncertain by as much (at `-I 1`, up to a twentieth of the interval). On the group's CPU the
//! read is a function call inside `read(2)`, bracketed by the clock within a microsecond or two.
//! The reader sleeps on absolute deadlines `offset` after each boundary: late enough that the
//! kernel's sample of the same boundary (taken just after it) is already in the ring, so the
//! reader never runs at the moment the kernel samples, and a CPU busy with real work is still
//! seen to deliver by itself.
//!
//! A reader is started the first time a group of its CPU is watched, parks while none is, and
//! hands its readings to the backend, which merges them with the kernel's samples by boundary.
//! When a reader cannot pin itself (an offline CPU, a cpuset without that CPU) it says so and
//! the backend reads that group from its own thread as before.
use super::clock::Clock;
use crate::sys::perf::{GroupReader, PerfSys};
use crate::sys::thread;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Timer slack of a reader: the default 50 µs would blur a 1 ms boundary.
const READER_SLACK_NS: u64 = 1_000;
/// A local read takes a microsecond or two; one whose clock bracket is wider than this was
/// interrupted or preempted around the read, so its midpoint may be far from the read itself:
/// it is read again, up to `READ_TRIES` reads, and when none is tight the boundary gets no
/// reading (its interval merges with the next) rather than one whose time is unknown.
const TIGHT_READ_NS: u64 = 20_000;
const READ_TRIES: u32 = 3;
/// How long a reader with nothing to read parks before looking at its flags again (a wake-up
/// from the backend comes sooner; this only bounds a missed one).
const PARK_NS: u64 = 200_000_000;

/// One reading of a group by its local reader, for boundary `k`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalReading {
    /// The backend's index of the group.
    pub group: usize,
    pub k: u64,
    /// The clock read just before and just after the read.
    pub read: (u64, u64),
    pub enabled: u64,
    pub running: u64,
    /// The group's values in read order (leader first).
    pub values: Vec<u64>,
}

/// What a reader hands back.
#[derive(Debug)]
pub enum LocalEvent {
    Reading(LocalReading),
    /// A read of this group failed: it stopped counting (its CPU went offline).
    Failed {
        group: usize,
        error: io::Error,
    },
}

const STARTING: u8 = 0;
const RUNNING: u8 = 1;
const UNPINNED: u8 = 2;

/// What the backend and one reader thread share.
struct Shared {
    stop: AtomicBool,
    /// Per slot: read it at every boundary.
    watched: Vec<AtomicBool>,
    state: AtomicU8,
    /// Why pinning failed, once `state` is UNPINNED.
    pin_error: Mutex<Option<io::Error>>,
    out: Mutex<Vec<LocalEvent>>,
    reads: AtomicU64,
    /// Boundaries left without a reading: no read was tight enough to be timed.
    untimed: AtomicU64,
}

/// A group a reader serves: the backend's index, a duplicate of its leader fd, its size.
struct Slot {
    group: usize,
    fd: OwnedFd,
    reader: GroupReader,
    values: Vec<u64>,
    dead: bool,
}

struct Reader {
    cpu: u32,
    /// Backend group indices, in slot order.
    groups: Vec<usize>,
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

/// The boundaries `base + k × period` and where in each period readers read.
#[derive(Clone, Copy, Debug)]
pub struct Grid {
    pub base: u64,
    pub period: u64,
    /// How long after each boundary a reader reads.
    pub offset: u64,
}

impl Grid {
    /// A quarter of the period after each boundary, at most 250 µs: clear of the kernel's
    /// sample (tens of µs after the boundary), early enough that the reading still belongs to
    /// its boundary even when the reader wakes late.
    pub fn new(base: u64, period: u64) -> Grid {
        let period = period.max(1);
        Grid {
            base,
            period,
            offset: (period / 4).min(250_000),
        }
    }

    fn boundary_at(&self, t: u64) -> u64 {
        t.saturating_sub(self.base) / self.period
    }

    fn time_of(&self, k: u64) -> u64 {
        self.base.saturating_add(k.saturating_mul(self.period))
    }
}

/// The readers of one backend, one per CPU that has had a watched group.
pub struct LocalReaders {
    sys: Arc<dyn PerfSys>,
    grid: Grid,
    readers: Vec<Reader>,
    /// Makes each reader's clock (tests give a scripted one).
    clock: Arc<dyn Fn() -> Box<dyn Clock + Send> + Send + Sync>,
}

impl LocalReaders {
    pub fn new(
        sys: Arc<dyn PerfSys>,
        grid: Grid,
        clock: Arc<dyn Fn() -> Box<dyn Clock + Send> + Send + Sync>,
    ) -> LocalReaders {
        LocalReaders {
            sys,
            grid,
            readers: Vec::new(),
            clock,
        }
    }

    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// Starts the reader of `cpu` for `groups` (backend index, leader fd, fds in the group),
    /// unless it runs already. The fds are duplicated: the backend keeps its own.
    pub fn start(
        &mut self,
        cpu: u32,
        groups: &[(usize, std::os::fd::BorrowedFd<'_>, usize)],
    ) -> io::Result<()> {
        if self.readers.iter().any(|r| r.cpu == cpu) {
            return Ok(());
        }
        let mut slots = Vec::with_capacity(groups.len());
        for &(group, fd, members) in groups {
            slots.push(Slot {
                group,
                fd: fd.try_clone_to_owned()?,
                reader: GroupReader::new(members),
                values: vec![0; members],
                dead: false,
            });
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            watched: groups.iter().map(|_| AtomicBool::new(false)).collect(),
            state: AtomicU8::new(STARTING),
            pin_error: Mutex::new(None),
            out: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            untimed: AtomicU64::new(0),
        });
        let run = {
            let shared = shared.clone();
            let sys = self.sys.clone();
            let grid = self.grid;
            let clock = (self.clock)();
            move || run_reader(cpu, shared, slots, sys, grid, clock)
        };
        let handle = std::thread::Builder::new()
            .name(format!("imc-read-{cpu}"))
            .stack_size(64 * 1024)
            .spawn(run)?;
        self.readers.push(Reader {
            cpu,
            groups: groups.iter().map(|g| g.0).collect(),
            shared,
            handle: Some(handle),
        });
        Ok(())
    }

    fn find(&self, group: usize) -> Option<(&Reader, usize)> {
        self.readers.iter().find_map(|r| {
            r.groups
                .iter()
                .position(|&g| g == group)
                .map(|slot| (r, slot))
        })
    }

    /// Whether `group` has a reader (started, whatever its state).
    pub fn has_reader(&self, group: usize) -> bool {
        self.find(group).is_some()
    }

    /// Tells the reader of `group` whether to read it at every boundary.
    pub fn set_watched(&self, group: usize, watched: bool) {
        if let Some((r, slot)) = self.find(group) {
            let was = r.shared.watched[slot].swap(watched, Ordering::AcqRel);
            if watched
                && !was
                && let Some(h) = &r.handle
            {
                h.thread().unpark();
            }
        }
    }

    /// Whether the reader of `group` runs pinned to its CPU and reads it at every boundary:
    /// then the backend need not.
    pub fn covers(&self, group: usize) -> bool {
        self.find(group).is_some_and(|(r, slot)| {
            r.shared.state.load(Ordering::Acquire) == RUNNING
                && r.shared.watched[slot].load(Ordering::Acquire)
        })
    }

    /// Readers that could not pin themselves, with why, each reported once.
    pub fn take_unpinned(&mut self) -> Vec<(u32, io::Error)> {
        let mut v = Vec::new();
        for r in &self.readers {
            if r.shared.state.load(Ordering::Acquire) == UNPINNED
                && let Some(e) = r
                    .shared
                    .pin_error
                    .lock()
                    .map(|mut e| e.take())
                    .ok()
                    .flatten()
            {
                v.push((r.cpu, e));
            }
        }
        v
    }

    /// Hands every reading and failure since the last call to `f`, each reader's in order.
    pub fn drain(&self, f: &mut dyn FnMut(LocalEvent)) {
        for r in &self.readers {
            let events = match r.shared.out.lock() {
                Ok(mut out) => std::mem::take(&mut *out),
                Err(_) => continue,
            };
            for e in events {
                f(e);
            }
        }
    }

    /// Group reads done by all readers.
    pub fn reads(&self) -> u64 {
        self.readers
            .iter()
            .map(|r| r.shared.reads.load(Ordering::Relaxed))
            .sum()
    }

    /// Boundaries the readers left without a reading (no read tight enough to be timed).
    pub fn untimed(&self) -> u64 {
        self.readers
            .iter()
            .map(|r| r.shared.untimed.load(Ordering::Relaxed))
            .sum()
    }

    /// How many reader threads were started.
    pub fn started(&self) -> usize {
        self.readers.len()
    }
}

impl Drop for LocalReaders {
    /// Tells every reader to stop and leaves them to end at their next wake-up (at most a
    /// period away): joining would hold up imc's exit by as much.
    fn drop(&mut self) {
        for r in &mut self.readers {
            r.shared.stop.store(true, Ordering::Release);
            if let Some(h) = r.handle.take() {
                h.thread().unpark();
            }
        }
    }
}

/// Pins the reader to its CPU and says so in `shared.state`; false (the reader ends) where the
/// CPU refuses it, the error kept for the sampler to report.
fn settle_on(cpu: u32, shared: &Shared) -> bool {
    if let Err(e) = thread::pin_to_cpu(cpu) {
        if let Ok(mut slot) = shared.pin_error.lock() {
            *slot = Some(e);
        }
        shared.state.store(UNPINNED, Ordering::Release);
        return false;
    }
    // Best effort: without it the reads come up to 50 µs later, still correctly timed. And
    // signals are for imc's own thread, whose sleep they must cut short.
    let _ = thread::set_timer_slack_ns(READER_SLACK_NS);
    let _ = thread::block_signals();
    shared.state.store(RUNNING, Ordering::Release);
    true
}

/// Reads a slot, again while a read takes longer than TIGHT_READ_NS (up to READ_TRIES times):
/// the last read's start and end on `clock`, and its result. Every try is counted in `reads`.
fn tight_read(
    s: &mut Slot,
    sys: &dyn PerfSys,
    clock: &(dyn Clock + Send),
    reads: &AtomicU64,
) -> (u64, u64, io::Result<(u64, u64)>) {
    let mut tries = 0;
    let out = loop {
        let a = clock.now_ns();
        let r = s.reader.read(sys, s.fd.as_fd(), &mut s.values);
        let b = clock.now_ns();
        tries += 1;
        if r.is_err() || b.saturating_sub(a) <= TIGHT_READ_NS || tries == READ_TRIES {
            break (a, b, r);
        }
    };
    reads.fetch_add(tries.into(), Ordering::Relaxed);
    out
}

fn run_reader(
    cpu: u32,
    shared: Arc<Shared>,
    mut slots: Vec<Slot>,
    sys: Arc<dyn PerfSys>,
    grid: Grid,
    clock: Box<dyn Clock + Send>,
) {
    if !settle_on(cpu, &shared) {
        return;
    }
    let mut last_k = 0u64;
    let mut batch = Vec::new();
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let any = slots
            .iter()
            .zip(&shared.watched)
            .any(|(s, w)| !s.dead && w.load(Ordering::Acquire));
        if !any {
            std::thread::park_timeout(Duration::from_nanos(PARK_NS));
            continue;
        }
        // The next boundary whose read time is still ahead.
        let now = clock.now_ns();
        let k = (grid.boundary_at(now.saturating_sub(grid.offset)) + 1).max(last_k + 1);
        let at = grid.time_of(k).saturating_add(grid.offset);
        while clock.now_ns() < at {
            clock.sleep_until(at);
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
        }
        for (s, w) in slots.iter_mut().zip(&shared.watched) {
            if s.dead || !w.load(Ordering::Acquire) {
                continue;
            }
            let (a, b, r) = tight_read(s, sys.as_ref(), clock.as_ref(), &shared.reads);
            match r {
                Ok(_) if b.saturating_sub(a) > TIGHT_READ_NS => {
                    shared.untimed.fetch_add(1, Ordering::Relaxed);
                }
                Ok((enabled, running)) => {
                    // A reader woken late (preempted, or its vCPU not run) labels the reading
                    // with the boundary it really follows.
                    let k = k.max(grid.boundary_at(a));
                    last_k = last_k.max(k);
                    batch.push(LocalEvent::Reading(LocalReading {
                        group: s.group,
                        k,
                        read: (a, b),
                        enabled,
                        running,
                        values: s.values.clone(),
                    }));
                }
                Err(error) => {
                    s.dead = true;
                    batch.push(LocalEvent::Failed {
                        group: s.group,
                        error,
                    });
                }
            }
        }
        last_k = last_k.max(k);
        if let Ok(mut out) = shared.out.lock() {
            out.append(&mut batch);
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counting::clock::MonotonicClock;
    use crate::sys::perf::PerfEventAttr;
    use std::os::fd::BorrowedFd;

    /// Answers every group read with [nr, enabled, running, values...] where the values count
    /// the reads and the times are the clock, and remembers which CPU each read ran on.
    struct CountingSys {
        members: usize,
        reads: AtomicU64,
        cpus: Mutex<Vec<u32>>,
        fail_after: Option<u64>,
    }

    impl PerfSys for CountingSys {
        fn open(
            &self,
            _: &PerfEventAttr,
            _: i32,
            _: i32,
            _: Option<BorrowedFd<'_>>,
        ) -> io::Result<OwnedFd> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }
        fn read(&self, _fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
            if self.fail_after.is_some_and(|f| n > f) {
                return Ok(0);
            }
            self.cpus.lock().unwrap().push(thread::current_cpu()?);
            let t = MonotonicClock.now_ns();
            let mut words = vec![self.members as u64, t, t];
            words.extend((0..self.members as u64).map(|i| n * 10 + i));
            for (i, w) in words.iter().enumerate() {
                buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
            }
            Ok(words.len() * 8)
        }
        fn ioctl(&self, _: BorrowedFd<'_>, _: crate::sys::perf::PerfIoctl) -> io::Result<()> {
            Ok(())
        }
    }

    /// A reader of one group (`members` values, reads failing after `fail_after`) on `cpu`,
    /// watched from the start, on a grid of `period`.
    fn watched_reader(
        members: usize,
        fail_after: Option<u64>,
        period: u64,
        cpu: u32,
        group: usize,
    ) -> (Arc<CountingSys>, LocalReaders) {
        let sys = Arc::new(CountingSys {
            members,
            reads: AtomicU64::new(0),
            cpus: Mutex::new(Vec::new()),
            fail_after,
        });
        let grid = Grid::new(MonotonicClock.now_ns(), period);
        let mut r = LocalReaders::new(sys.clone(), grid, Arc::new(|| Box::new(MonotonicClock)));
        let null = std::fs::File::open("/dev/null").unwrap();
        r.start(cpu, &[(group, null.as_fd(), members)]).unwrap();
        assert!(!r.covers(group), "not watched yet");
        r.set_watched(group, true);
        (sys, r)
    }

    fn collect(r: &LocalReaders, until: impl Fn(&[LocalReading]) -> bool) -> Vec<LocalReading> {
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while !until(&got) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
            r.drain(&mut |e| {
                if let LocalEvent::Reading(x) = e {
                    got.push(x)
                }
            });
        }
        got
    }

    /// A watched group is read on its own CPU, once per boundary, after the boundary by the
    /// grid's offset and before the next one; boundaries only go forward.
    #[test]
    fn a_watched_group_is_read_on_its_cpu_after_every_boundary() {
        let (sys, r) = watched_reader(2, None, 2_000_000, 0, 7);
        let got = collect(&r, |g| g.len() >= 50);
        assert!(got.len() >= 50, "{} readings in 10 s", got.len());
        assert!(r.covers(7));
        let grid = r.grid();
        for w in got.windows(2) {
            assert!(
                w[1].k > w[0].k,
                "boundaries go forward: {} then {}",
                w[0].k,
                w[1].k
            );
            assert!(w[1].read.0 > w[0].read.1);
            assert!(w[1].values[0] > w[0].values[0], "values from the reads");
        }
        // Labelled with the boundary each follows; read `offset` after it unless the reader woke
        // late. A loaded test machine may not run the reader at every boundary: most, though.
        assert!(
            got.iter().all(
                |x| x.read.0 >= grid.time_of(x.k) && x.read.0 < grid.time_of(x.k + 1) + 100_000
            ),
            "a reading outside its boundary's period"
        );
        let on_time = got
            .iter()
            .filter(|x| {
                x.read.0 >= grid.time_of(x.k) + grid.offset && x.read.0 < grid.time_of(x.k + 1)
            })
            .count();
        assert!(
            on_time * 2 >= got.len(),
            "{on_time} of {} on time",
            got.len()
        );
        let span = got[got.len() - 1].k - got[0].k + 1;
        assert!(
            got.len() as u64 * 10 >= span * 6,
            "{} readings for {span} boundaries",
            got.len()
        );
        assert!(got.iter().all(|x| x.group == 7 && x.values.len() == 2));
        assert!(
            sys.cpus.lock().unwrap().iter().all(|&c| c == 0),
            "read on CPU 0 only"
        );

        // Unwatched, it parks: no more reads.
        r.set_watched(7, false);
        std::thread::sleep(Duration::from_millis(20));
        let before = sys.reads.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(sys.reads.load(Ordering::Relaxed), before, "parked");
        assert!(!r.covers(7));
    }

    /// A failed read is reported once and the group is not read again.
    #[test]
    fn a_failing_group_is_reported_and_dropped() {
        let (sys, r) = watched_reader(1, Some(3), 1_000_000, 0, 0);
        let mut readings = 0;
        let mut failures = 0;
        let t0 = std::time::Instant::now();
        while failures == 0 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
            r.drain(&mut |e| match e {
                LocalEvent::Reading(_) => readings += 1,
                LocalEvent::Failed { group, error } => {
                    assert_eq!(group, 0);
                    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
                    failures += 1;
                }
            });
        }
        // Three good reads (a slow one is repeated, so fewer readings), then the failure.
        assert!(
            (1..=3).contains(&readings) && failures == 1,
            "{readings} {failures}"
        );
        let reads = sys.reads.load(Ordering::Relaxed);
        assert_eq!(reads, 4);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            sys.reads.load(Ordering::Relaxed),
            reads,
            "no read after the failure"
        );
    }

    /// A reader that cannot pin itself says why and never claims to cover its group.
    #[test]
    fn a_reader_that_cannot_pin_reports_it() {
        let (sys, mut r) = watched_reader(1, None, 1_000_000, 100_000, 3);
        let t0 = std::time::Instant::now();
        let mut unpinned = Vec::new();
        while unpinned.is_empty() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(2));
            unpinned = r.take_unpinned();
        }
        assert_eq!(unpinned.len(), 1);
        assert_eq!(unpinned[0].0, 100_000);
        assert!(!r.covers(3));
        assert!(r.take_unpinned().is_empty(), "reported once");
        assert_eq!(sys.reads.load(Ordering::Relaxed), 0);
    }
}
