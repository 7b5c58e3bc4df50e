//! Which CPUs may read a package counter, found by trying rather than by kernel version.
//!
//! Intel uncore counters can be read from any CPU of their package since Linux 6.7
//! (PERF_EV_CAP_READ_ACTIVE_PKG); before that, on AMD and for every other system-wide counter,
//! `bpf_perf_event_read` works only on the CPU the event was opened on and returns -EINVAL
//! elsewhere. A kernel version says little (backports, other vendors), so the sampler gives a
//! package counter's fd to every CPU of its package and watches the first ticks: a CPU whose
//! reads of that slot fail, with none succeeding, has its array entry removed, after which its
//! ticks find no counter (-ENOENT, counted as absent, not as an error). A CPU that reads the
//! counter once keeps it for good.
//!
//! Probe failures are not read errors: until a CPU is known to be able to read a slot, its
//! failures on that slot are reported apart, as probe failures (see [`ReaderProbe::is_probe`]). No reading is
//! lost either: the CPU the counter was opened on is never probed, and a failed package reading
//! is simply not a point of the package counter for attribution.
use super::SlotPlan;
use crate::sys::bpf::BpfSys;
use imc_common::{MAX_SLOTS, TickRecord};
use serde::Serialize;
use std::io;
use std::os::fd::BorrowedFd;

/// Failed reads (with no successful one) after which a CPU is taken as unable to read a slot.
/// More than one, so that a single odd failure does not cost a CPU its reads for the whole run.
pub const FAILS_TO_REMOVE: u32 = 3;

/// How a package slot ended up being read at the ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadMode {
    /// Some CPU of the package has not ticked often enough yet to tell.
    Probing,
    /// Every CPU of the package reads the counter at its own ticks.
    AnyCpu,
    /// Only the CPU in the PMU's cpumask reads it; the other CPUs' entries were removed.
    CpumaskOnly,
    /// Some CPUs of the package can read it, some cannot.
    Mixed,
}

impl ReadMode {
    pub fn describe(self) -> &'static str {
        match self {
            ReadMode::Probing => "still probing which CPUs can read it",
            ReadMode::AnyCpu => "read at the ticks of any CPU of its package",
            ReadMode::CpumaskOnly => "read only at the ticks of the PMU's cpumask CPU",
            ReadMode::Mixed => "readable from some CPUs of its package only",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pending,
    /// Unable to read: waiting for its entry to be removed.
    Remove,
    Removed,
    Readable,
}

#[derive(Clone, Debug)]
struct Entry {
    slot: usize,
    reader: u32,
    ok: u32,
    failed: u32,
    verdict: Verdict,
}

/// The probe of every (package slot, reader CPU other than the one the counter was opened on).
#[derive(Debug, Default)]
pub struct ReaderProbe {
    entries: Vec<Entry>,
    /// Per CPU: bit s set while this CPU's entry of slot s is undecided. Lets `observe` return
    /// after one load for every record once probing is over.
    pending: Vec<u8>,
    /// Per CPU: bit s set while this CPU's failures on slot s are probe failures (undecided,
    /// or found unable to read).
    probe: Vec<u8>,
}

impl ReaderProbe {
    /// Entries for every CPU that was given a counter it was not opened on.
    pub fn new(plans: &[SlotPlan]) -> ReaderProbe {
        let mut p = ReaderProbe::default();
        for (slot, plan) in plans.iter().enumerate().take(MAX_SLOTS) {
            for (open_cpu, readers) in &plan.instances {
                for &reader in readers.iter().filter(|&&r| r != *open_cpu) {
                    p.entries.push(Entry {
                        slot,
                        reader,
                        ok: 0,
                        failed: 0,
                        verdict: Verdict::Pending,
                    });
                    let c = reader as usize;
                    if p.pending.len() <= c {
                        p.pending.resize(c + 1, 0);
                        p.probe.resize(c + 1, 0);
                    }
                    p.pending[c] |= 1 << slot;
                    p.probe[c] |= 1 << slot;
                }
            }
        }
        p
    }

    /// One record as drained: counts the probed slots' outcomes on its CPU.
    #[inline]
    pub fn observe(&mut self, rec: &TickRecord) {
        let bits = self.pending.get(rec.cpu as usize).copied().unwrap_or(0);
        if bits != 0 {
            self.observe_slow(rec, bits);
        }
    }

    #[cold]
    fn observe_slow(&mut self, rec: &TickRecord, bits: u8) {
        let cpu = rec.cpu as usize;
        for e in &mut self.entries {
            if e.reader != rec.cpu
                || e.verdict != Verdict::Pending
                || bits & (1 << e.slot) == 0
                || e.slot >= usize::from(rec.nr_slots)
            {
                continue;
            }
            if rec.failed_mask & (1 << e.slot) != 0 {
                e.failed += 1;
                if e.failed >= FAILS_TO_REMOVE {
                    e.verdict = Verdict::Remove;
                    self.pending[cpu] &= !(1 << e.slot);
                }
            } else {
                e.ok += 1;
                e.verdict = Verdict::Readable;
                self.pending[cpu] &= !(1 << e.slot);
                // From now on this CPU's failures on the slot are real read errors.
                self.probe[cpu] &= !(1 << e.slot);
            }
        }
    }

    /// Whether some entry is waiting to be removed.
    pub fn has_work(&self) -> bool {
        self.entries.iter().any(|e| e.verdict == Verdict::Remove)
    }

    /// Removes the array entries of CPUs found unable to read them (`maps[slot]` is the slot's
    /// PERF_EVENT_ARRAY). Returns how many were removed; on an error the rest stay queued.
    pub fn apply(&mut self, bpf: &dyn BpfSys, maps: &[BorrowedFd<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for e in &mut self.entries {
            if e.verdict != Verdict::Remove {
                continue;
            }
            let Some(map) = maps.get(e.slot) else {
                continue;
            };
            bpf.perf_array_clear(*map, e.reader).map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!(
                        "removing CPU {} from slot {}'s counter array: {err}",
                        e.reader, e.slot
                    ),
                )
            })?;
            e.verdict = Verdict::Removed;
            n += 1;
        }
        Ok(n)
    }

    /// Whether a failure of `slot` on `cpu` is part of probing (reported as absent, not as a
    /// read error): the CPU is not known to be able to read the slot's counter.
    pub fn is_probe(&self, cpu: u32, slot: usize) -> bool {
        self.probe
            .get(cpu as usize)
            .is_some_and(|b| slot < MAX_SLOTS && b & (1 << slot) != 0)
    }

    /// The read mode of `slot`, or None when it has no probed CPU (a CPU-scope slot, or a
    /// package whose only CPU is the one the counter was opened on).
    pub fn mode(&self, slot: usize) -> Option<ReadMode> {
        let mut it = self.entries.iter().filter(|e| e.slot == slot).peekable();
        it.peek()?;
        let (mut readable, mut removed, mut open) = (0, 0, 0);
        for e in it {
            match e.verdict {
                Verdict::Readable => readable += 1,
                Verdict::Removed => removed += 1,
                Verdict::Pending | Verdict::Remove => open += 1,
            }
        }
        Some(match (readable, removed, open) {
            (_, _, o) if o > 0 => ReadMode::Probing,
            (_, 0, _) => ReadMode::AnyCpu,
            (0, _, _) => ReadMode::CpumaskOnly,
            _ => ReadMode::Mixed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Encoded, SlotRole, SlotScope, SlotSpec};
    use imc_common::SlotReading;
    use std::collections::HashMap;
    use std::os::fd::{AsFd, AsRawFd, OwnedFd};
    use std::sync::Mutex;

    /// A fake bpf(2) that keeps the PERF_EVENT_ARRAY contents, and a fake kernel tick that
    /// reads them the way `perf_event_read_local` does: a counter opened on another CPU reads
    /// only when its PMU can be read package-wide.
    #[derive(Default)]
    struct FakeKernel {
        /// (map fd, index) → perf fd.
        arrays: Mutex<HashMap<(i32, u32), i32>>,
        clears: Mutex<Vec<(i32, u32)>>,
    }

    impl BpfSys for FakeKernel {
        fn perf_array_set(
            &self,
            map: BorrowedFd<'_>,
            index: u32,
            perf_fd: BorrowedFd<'_>,
        ) -> io::Result<()> {
            self.arrays
                .lock()
                .unwrap()
                .insert((map.as_raw_fd(), index), perf_fd.as_raw_fd());
            Ok(())
        }
        fn perf_array_clear(&self, map: BorrowedFd<'_>, index: u32) -> io::Result<()> {
            self.clears.lock().unwrap().push((map.as_raw_fd(), index));
            match self
                .arrays
                .lock()
                .unwrap()
                .remove(&(map.as_raw_fd(), index))
            {
                Some(_) => Ok(()),
                None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }
    }

    struct Counter {
        fd: OwnedFd,
        open_cpu: u32,
        read_active_pkg: bool,
    }

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    impl FakeKernel {
        /// One tick on `cpu`: slot s reads when the CPU's entry holds a counter readable here.
        fn tick(&self, cpu: u32, maps: &[OwnedFd], counters: &[Counter]) -> TickRecord {
            let mut rec = TickRecord {
                t_ns: 0,
                cgroup_id: 0,
                cpu,
                pid: 1,
                tgid: 1,
                kind: 0,
                nr_slots: maps.len() as u8,
                failed_mask: 0,
                flags: 0,
                comm: [0; 16],
                t0_ns: 0,
                on_ns: 0,
                slots: [SlotReading::default(); MAX_SLOTS],
            };
            let arrays = self.arrays.lock().unwrap();
            for (s, map) in maps.iter().enumerate() {
                let readable = arrays
                    .get(&(map.as_raw_fd(), cpu))
                    .and_then(|pfd| counters.iter().find(|c| c.fd.as_raw_fd() == *pfd))
                    .is_some_and(|c| c.open_cpu == cpu || c.read_active_pkg);
                if readable {
                    rec.slots[s].value = 1;
                } else {
                    rec.failed_mask |= 1 << s;
                }
            }
            rec
        }
    }

    fn package_plan(open_cpu: u32, readers: Vec<u32>) -> SlotPlan {
        let spec = SlotSpec {
            event: "uncore_imc_0/cas_count_read/".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(crate::model::Direction::Read),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        };
        SlotPlan::package(spec, &Encoded::default(), vec![(open_cpu, readers)])
    }

    /// Sets up one slot per `read_active_pkg` value on a 4-CPU package opened on CPU 0, the
    /// way the sampler does (every CPU's entry gets the fd), then ticks every CPU `rounds` times,
    /// draining into the probe and applying its decisions after each round.
    fn run(kinds: &[bool], rounds: usize) -> (FakeKernel, ReaderProbe, Vec<OwnedFd>) {
        let k = FakeKernel::default();
        let maps: Vec<OwnedFd> = kinds.iter().map(|_| fd()).collect();
        let counters: Vec<Counter> = kinds
            .iter()
            .map(|&read_active_pkg| Counter {
                fd: fd(),
                open_cpu: 0,
                read_active_pkg,
            })
            .collect();
        let plans: Vec<SlotPlan> = kinds
            .iter()
            .map(|_| package_plan(0, vec![0, 1, 2, 3]))
            .collect();
        for (s, plan) in plans.iter().enumerate() {
            for (_, readers) in &plan.instances {
                for &r in readers {
                    k.perf_array_set(maps[s].as_fd(), r, counters[s].fd.as_fd())
                        .unwrap();
                }
            }
        }
        let mut probe = ReaderProbe::new(&plans);
        for _ in 0..rounds {
            for cpu in 0..4 {
                probe.observe(&k.tick(cpu, &maps, &counters));
            }
            let borrowed: Vec<BorrowedFd<'_>> = maps.iter().map(|m| m.as_fd()).collect();
            probe.apply(&k, &borrowed).unwrap();
        }
        // Once probing is over, the kernel's reads of these slots no longer fail anywhere but
        // on CPUs without an entry.
        let decided = (0..kinds.len()).all(|s| probe.mode(s) != Some(ReadMode::Probing));
        for cpu in (0..4).filter(|_| decided) {
            let rec = k.tick(cpu, &maps, &counters);
            let arrays = k.arrays.lock().unwrap();
            for (s, m) in maps.iter().enumerate() {
                let has_entry = arrays.contains_key(&(m.as_raw_fd(), cpu));
                assert_eq!(
                    rec.failed_mask & (1 << s) != 0,
                    !has_entry,
                    "cpu {cpu} slot {s}"
                );
            }
        }
        (k, probe, maps)
    }

    #[test]
    fn a_pmu_readable_package_wide_keeps_every_cpu() {
        let (k, probe, _maps) = run(&[true], 5);
        assert_eq!(probe.mode(0), Some(ReadMode::AnyCpu));
        assert!(k.clears.lock().unwrap().is_empty());
        assert_eq!(k.arrays.lock().unwrap().len(), 4);
        assert!((0..4).all(|c| !probe.is_probe(c, 0)));
    }

    #[test]
    fn a_pmu_readable_only_on_its_cpu_loses_the_other_entries() {
        let (k, probe, maps) = run(&[false], 5);
        assert_eq!(probe.mode(0), Some(ReadMode::CpumaskOnly));
        let mut cleared: Vec<u32> = k.clears.lock().unwrap().iter().map(|c| c.1).collect();
        cleared.sort();
        assert_eq!(
            cleared,
            [1, 2, 3],
            "each unreadable entry removed exactly once"
        );
        let arrays = k.arrays.lock().unwrap();
        assert_eq!(
            arrays.keys().copied().collect::<Vec<_>>(),
            [(maps[0].as_raw_fd(), 0)]
        );
        // Their failures were probing, not read errors; the opening CPU was never probed.
        assert!((1..4).all(|c| probe.is_probe(c, 0)));
        assert!(!probe.is_probe(0, 0));
    }

    #[test]
    fn slots_are_decided_apart_and_only_after_enough_failures() {
        let (_, probe, _) = run(&[true, false], FAILS_TO_REMOVE as usize - 1);
        assert_eq!(probe.mode(0), Some(ReadMode::AnyCpu));
        assert_eq!(probe.mode(1), Some(ReadMode::Probing));
        assert!(!probe.has_work());
        let (k, probe, _) = run(&[true, false], FAILS_TO_REMOVE as usize);
        assert_eq!(probe.mode(1), Some(ReadMode::CpumaskOnly));
        assert_eq!(k.clears.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_cpu_that_read_once_keeps_its_entry_and_later_failures_are_errors() {
        let mut probe = ReaderProbe::new(&[package_plan(0, vec![0, 1])]);
        let mut rec = FakeKernel::default().tick(1, &[fd()], &[]);
        rec.failed_mask = 0;
        probe.observe(&rec);
        rec.failed_mask = 1;
        for _ in 0..10 {
            probe.observe(&rec);
        }
        assert!(!probe.has_work());
        assert_eq!(probe.mode(0), Some(ReadMode::AnyCpu));
        assert!(!probe.is_probe(1, 0));
    }

    #[test]
    fn cpu_scope_slots_and_single_cpu_packages_are_not_probed() {
        let per_cpu =
            SlotPlan::per_cpu(package_plan(0, vec![0]).spec, &Encoded::default(), &[0, 1]);
        let probe = ReaderProbe::new(&[per_cpu, package_plan(0, vec![0])]);
        assert_eq!(probe.mode(0), None);
        assert_eq!(probe.mode(1), None);
    }
}
