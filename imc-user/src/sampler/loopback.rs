//! The sampler's rings without the kernel: per-CPU rings and heads laid out exactly as the
//! program's TICKS and HEADS maps, in shared memory that a benchmark fills where the program
//! would, and read by the sampler's own consumer ([`Rings`], through the same read-only
//! mapping) and idle-package bookkeeping. `cargo xtask bench-scale` replays a 192-CPU machine's
//! record stream through it and the real attributor, on any machine and without privileges.
//!
//! What the program does to a record before userspace sees it is done here too: a CPU's record
//! of a thread one of its four recent full records described carries no comm or cgroup
//! ([`FLAG_TASK_OMITTED`]; every 64th is full anyway), and a CPU whose head reaches a multiple
//! of half its ring asks for a drain. Rings are sized as the sampler sizes them for the same
//! configuration. There are no counters behind it: package slots come only in the records.
use super::fallback::IdleFallback;
use super::rings::Rings;
use super::{ChannelReading, RecordSource, SamplerConfig, drain_rings};
use crate::model::SlotSpec;
use crate::sys::bpf::MappedMap;
use crate::sys::shm::SharedMemory;
use imc_common::{CpuHead, FLAG_TASK_OMITTED, RECENT_TASKS, Record};
use std::io;
use std::os::fd::AsFd;

/// One CPU's producer state, as the program keeps it in its [`CpuHead`].
#[derive(Clone, Default)]
struct Producer {
    head: u64,
    recent: [u32; RECENT_TASKS],
    next: u32,
    /// Records written since the last publish (the program makes each visible at once; here
    /// they are written to the ring and published together, before the next drain).
    staged: Vec<Record>,
}

pub struct Loopback {
    ticks: SharedMemory,
    heads: SharedMemory,
    rings: Rings,
    fallback: IdleFallback,
    producers: Vec<Producer>,
    ring_len: u32,
    /// Bytes per ring entry, as the program's rings are loaded.
    entry: usize,
    wake_every: u32,
    wakes: Vec<u32>,
    slots: Vec<SlotSpec>,
    /// Bytes of one staged run, reused.
    bytes: Vec<u8>,
}

impl Loopback {
    /// Rings for `cfg.cpus` (possible CPUs: up to the highest), sized as [`super::Sampler`]
    /// sizes them for `cfg`.
    pub fn new(cfg: &SamplerConfig) -> io::Result<Loopback> {
        let possible = cfg.cpus.iter().copied().max().map_or(1, |m| m + 1);
        let ring_len = super::ring_len(cfg, possible);
        let n = possible as usize;
        let entry = Record::entry_size(cfg.slots.len());
        let ticks_len = n * ring_len as usize * entry;
        let heads_len = n * std::mem::size_of::<CpuHead>();
        let ticks = SharedMemory::new("imc-loopback-ticks", ticks_len)?;
        let heads = SharedMemory::new("imc-loopback-heads", heads_len)?;
        let rings = Rings::new(
            MappedMap::map(ticks.as_fd(), ticks_len)?,
            MappedMap::map(heads.as_fd(), heads_len)?,
            ring_len,
            entry,
            n,
        );
        Ok(Loopback {
            ticks,
            heads,
            rings,
            fallback: super::idle_fallback(cfg),
            producers: vec![Producer::default(); n],
            ring_len,
            entry,
            wake_every: super::wake_every(ring_len),
            wakes: Vec::new(),
            slots: cfg.slots.iter().map(|p| p.spec.clone()).collect(),
            bytes: Vec::new(),
        })
    }

    /// Records per CPU ring.
    pub fn ring_len(&self) -> u32 {
        self.ring_len
    }

    /// The program's side: one record of `rec.cpu` (a CPU beyond the rings is ignored).
    pub fn push(&mut self, rec: &Record) {
        let wake_every = u64::from(self.wake_every);
        let Some(p) = self.producers.get_mut(rec.cpu as usize) else {
            return;
        };
        let seq = p.head + p.staged.len() as u64;
        let mut r = *rec;
        let tag = r.pid.wrapping_add(1);
        let known = p.recent.contains(&tag);
        if !known || seq & 63 == 0 {
            r.flags = 0;
            if !known {
                p.recent[p.next as usize & (RECENT_TASKS - 1)] = tag;
                p.next = p.next.wrapping_add(1);
            }
        } else {
            r.flags = FLAG_TASK_OMITTED;
            r.comm = [0; 16];
            r.cgroup_id = 0;
        }
        p.staged.push(r);
        if (seq + 1).is_multiple_of(wake_every) {
            self.wakes.push(rec.cpu);
        }
    }

    /// Whether a CPU's ring asked for a drain (reached a multiple of half its length) since
    /// the last [`RecordSource::take_wakes`].
    pub fn wake_pending(&self) -> bool {
        !self.wakes.is_empty()
    }

    /// Writes every staged record to its ring and moves the heads past them, as the program
    /// does record by record.
    pub fn publish(&mut self) -> io::Result<()> {
        let len = u64::from(self.ring_len);
        for (cpu, p) in self.producers.iter_mut().enumerate() {
            if p.staged.is_empty() {
                continue;
            }
            // A ring holds its last `len` records: older staged ones are overwritten, as a
            // slow reader finds them.
            let skip = p.staged.len().saturating_sub(len as usize);
            let mut seq = p.head + skip as u64;
            let mut rest = &p.staged[skip..];
            // One write per contiguous run of the ring (two where it wraps).
            while !rest.is_empty() {
                let at = (seq % len) as usize;
                let run = rest.len().min(len as usize - at);
                self.bytes.clear();
                for r in &rest[..run] {
                    // SAFETY: Record is repr(C) plain integers without padding, and an
                    // entry is a prefix of it (the header and the configured slots).
                    self.bytes.extend_from_slice(unsafe {
                        std::slice::from_raw_parts((r as *const Record).cast::<u8>(), self.entry)
                    });
                }
                let offset = (cpu * len as usize + at) * self.entry;
                self.ticks.write_at(offset, &self.bytes)?;
                seq += run as u64;
                rest = &rest[run..];
            }
            p.head += p.staged.len() as u64;
            p.staged.clear();
            let offset = cpu * std::mem::size_of::<CpuHead>();
            self.heads.write_at(offset, &p.head.to_ne_bytes())?;
        }
        Ok(())
    }
}

impl RecordSource for Loopback {
    fn slots(&self) -> &[SlotSpec] {
        &self.slots
    }
    fn drain_append(&mut self, out: &mut Vec<Record>) -> usize {
        drain_rings(&mut self.rings, &mut self.fallback, out)
    }
    fn lost_records(&self) -> u64 {
        self.rings.lost.iter().sum()
    }
    /// No counter is behind the loopback: the packages' readings come in the records only.
    fn read_idle_packages(&mut self, _all: bool, _f: impl FnMut(u32, usize, u64, u64)) -> usize {
        0
    }
    fn read_channels(&self) -> Vec<ChannelReading> {
        Vec::new()
    }
    fn take_wakes(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.wakes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{TickProgram, TickSource};
    use imc_common::{KIND_SWITCH, MAX_SLOTS, SlotReading};

    fn cfg(cpus: u32, ring: u32) -> SamplerConfig {
        SamplerConfig {
            tick: TickSource::Kernel,
            slots: Vec::new(),
            groups: Vec::new(),
            cpus: (0..cpus).collect(),
            ring_bytes: Some(ring),
            drain_period_ms: 1000,
            bpf_log: false,
            tick_program: TickProgram::Imc,
            aggregate: false,
            stacks: None,
        }
    }

    fn rec(cpu: u32, t: u64, pid: u32) -> Record {
        let mut r = Record {
            t_ns: t,
            cpu,
            pid,
            kind: KIND_SWITCH,
            cgroup_id: 9,
            ..Record::default()
        };
        r.comm[..4].copy_from_slice(b"task");
        r
    }

    #[test]
    fn the_consumer_reads_what_was_pushed_in_order_with_names_filled_in() {
        let mut lb = Loopback::new(&cfg(2, 8)).unwrap();
        for k in 0..6u64 {
            lb.push(&rec((k % 2) as u32, 100 + k, 7 + (k % 2) as u32));
        }
        lb.publish().unwrap();
        let mut out = Vec::new();
        assert_eq!(lb.drain_append(&mut out), 6);
        let times: Vec<u64> = out.iter().map(|r| r.t_ns).collect();
        assert_eq!(times, [100, 102, 104, 101, 103, 105]);
        // Later records of the same thread came without names and got them back.
        assert!(
            out.iter()
                .all(|r| r.comm_bytes() == b"task" && r.cgroup_id == 9)
        );
        assert!(out.iter().all(|r| r.flags == 0));
        assert_eq!(lb.lost_records(), 0);
        out.clear();
        assert_eq!(lb.drain_append(&mut out), 0);
    }

    #[test]
    fn entries_carry_the_configured_slots_only() {
        use crate::model::{Encoded, SlotRole, SlotScope, SlotSpec};
        let spec = SlotSpec {
            event: "page-faults".into(),
            scope: SlotScope::Cpu,
            role: SlotRole::Other,
            bytes_per_count: None,
            counter_bits: 64,
        };
        let mut c = cfg(2, 4);
        let plan = super::super::SlotPlan::per_cpu(spec, &Encoded::default(), &c.cpus);
        c.slots = vec![plan.clone(), plan];
        let mut lb = Loopback::new(&c).unwrap();
        assert_eq!(lb.entry, 64 + 2 * 24);
        for (k, mut r) in [rec(0, 1, 7), rec(1, 1, 8), rec(1, 2, 8)]
            .into_iter()
            .enumerate()
        {
            // The last claims more slots than an entry holds: it is read up to what it holds.
            r.nr_slots = if k == 2 { MAX_SLOTS as u8 } else { 2 };
            for (s, slot) in r.slots.iter_mut().enumerate() {
                *slot = SlotReading {
                    value: u64::from(r.cpu) * 1000 + r.t_ns * 10 + s as u64,
                    enabled: 5,
                    running: 5,
                };
            }
            lb.push(&r);
        }
        lb.publish().unwrap();
        let mut out = Vec::new();
        assert_eq!(lb.drain_append(&mut out), 3);
        for r in &out {
            let want: Vec<u64> = (0..2)
                .map(|s| u64::from(r.cpu) * 1000 + r.t_ns * 10 + s)
                .collect();
            let got: Vec<u64> = r.slots[..2].iter().map(|s| s.value).collect();
            assert_eq!(got, want, "{r:?}");
            assert!(r.slots[2..].iter().all(|s| *s == SlotReading::default()));
        }
        // Neighbouring entries did not overlap: the second CPU's first record is intact.
        assert_eq!((out[1].cpu, out[1].t_ns, out[1].pid), (1, 1, 8));
    }

    #[test]
    fn a_half_full_ring_wakes_and_an_overrun_is_lost() {
        let mut lb = Loopback::new(&cfg(1, 8)).unwrap();
        for k in 0..3 {
            lb.push(&rec(0, k, 1));
        }
        assert!(!lb.wake_pending());
        lb.push(&rec(0, 3, 1));
        assert!(lb.wake_pending());
        assert_eq!(lb.take_wakes(), [0]);
        for k in 4..12 {
            lb.push(&rec(0, k, 1));
        }
        lb.publish().unwrap();
        let mut out = Vec::new();
        assert_eq!(lb.drain_append(&mut out), 8);
        assert_eq!(out[0].t_ns, 4);
        assert_eq!(lb.lost_records(), 4);
    }
}
