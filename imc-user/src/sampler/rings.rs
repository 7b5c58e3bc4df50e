//! The consumer side of the kernel's per-CPU record rings, read through mmap: no syscall per
//! record, and the producer never waits for us (a record we were too slow for is counted lost).
use crate::sys::bpf::MappedMap;
use imc_common::{CpuHead, FLAG_TASK_OMITTED, MAX_SLOTS, Record, SlotReading};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Threads remembered by id before the table is started afresh: a host with a large pid_max
/// and heavy churn must not grow it without bound (an omitted record of a thread no longer in
/// it falls back to /proc, or to the CPU's last full record).
const MAX_TASKS: usize = 65_536;

/// Task identity of the last full record seen per CPU and per thread, to fill in records where
/// the kernel omitted comm and cgroup (FLAG_TASK_OMITTED).
#[derive(Default)]
pub(super) struct TaskCache {
    by_cpu: Vec<(u32, u64, [u8; 16])>,
    by_pid: HashMap<u64, (u64, [u8; 16])>,
}

/// A thread's key in [`TaskCache::by_pid`]: its id, except that every CPU's idle task is pid 0
/// and named after its CPU (swapper/N), so those are told apart by CPU.
fn thread_key(rec: &Record) -> u64 {
    if rec.pid == 0 {
        (u64::from(rec.cpu) + 1) << 32
    } else {
        u64::from(rec.pid)
    }
}

impl TaskCache {
    fn complete(&mut self, rec: &mut Record) {
        let cpu = rec.cpu as usize;
        if cpu >= self.by_cpu.len() {
            self.by_cpu.resize(cpu + 1, (u32::MAX, 0, [0; 16]));
        }
        let key = thread_key(rec);
        if rec.flags & FLAG_TASK_OMITTED == 0 {
            self.by_cpu[cpu] = (rec.pid, rec.cgroup_id, rec.comm);
            if self.by_pid.len() >= MAX_TASKS && !self.by_pid.contains_key(&key) {
                self.by_pid.clear();
            }
            self.by_pid.insert(key, (rec.cgroup_id, rec.comm));
            return;
        }
        rec.flags &= !FLAG_TASK_OMITTED;
        let (pid, cgroup, comm) = self.by_cpu[cpu];
        if pid == rec.pid {
            rec.cgroup_id = cgroup;
            rec.comm = comm;
        } else if let Some((cgroup, comm)) = self.by_pid.get(&key) {
            // The full record was overwritten before we read it; an earlier one named the task.
            rec.cgroup_id = *cgroup;
            rec.comm = *comm;
        } else if rec.pid == 0 {
            // The idle task (or a slice no known task ran, which the kernel names pid 0) before
            // any full record of it: the idle task of CPU N is swapper/N, and /proc has no pid 0.
            let mut comm = [0u8; 16];
            let name = format!("swapper/{}", rec.cpu);
            let n = name.len().min(15);
            comm[..n].copy_from_slice(&name.as_bytes()[..n]);
            rec.cgroup_id = 0;
            rec.comm = comm;
            self.by_pid.insert(key, (0, comm));
        } else {
            // Never seen in full: ask /proc (the cgroup stays unknown, 0).
            let name = std::fs::read(format!("/proc/{}/comm", rec.pid)).unwrap_or_default();
            let mut comm = [0u8; 16];
            let n = name
                .iter()
                .position(|&b| b == b'\n')
                .unwrap_or(name.len())
                .min(15);
            comm[..n].copy_from_slice(&name[..n]);
            rec.cgroup_id = 0;
            rec.comm = comm;
            self.by_pid.insert(key, (0, comm));
        }
    }
}

/// The consumer side of the per-CPU rings.
pub(super) struct Rings {
    ticks: MappedMap,
    heads: MappedMap,
    ring_len: u32,
    /// Bytes per ring entry: the header and the configured slots (Record::entry_size).
    entry: usize,
    pub(super) tails: Vec<u64>,
    pub(super) lost: Vec<u64>,
    tasks: TaskCache,
}

impl Rings {
    pub(super) fn new(
        ticks: MappedMap,
        heads: MappedMap,
        ring_len: u32,
        entry: usize,
        cpus: usize,
    ) -> Rings {
        Rings {
            ticks,
            heads,
            ring_len,
            entry,
            tails: vec![0; cpus],
            lost: vec![0; cpus],
            tasks: TaskCache::default(),
        }
    }

    pub(super) fn ring_len(&self) -> u32 {
        self.ring_len
    }

    pub(super) fn head(&self, cpu: usize) -> u64 {
        // SAFETY: cpu < possible CPUs = entries of HEADS; `head` is the first, 8-byte aligned
        // field of a 64-byte element; the kernel updates it atomically.
        unsafe {
            let p = self
                .heads
                .as_ptr()
                .add(cpu * std::mem::size_of::<CpuHead>())
                .cast::<AtomicU64>();
            (*p).load(Ordering::Acquire)
        }
    }

    /// Copies record `seq` of `cpu` to `dst`: the header and the slots the record filled (an
    /// entry holds the configured slots only, and each cache line the other CPU wrote costs a
    /// miss); the other slots are zeroed.
    ///
    /// # Safety
    /// `dst` is valid for writing one Record.
    unsafe fn copy_record(&self, cpu: usize, seq: u64, dst: *mut Record) {
        let index = cpu * self.ring_len as usize + (seq % u64::from(self.ring_len)) as usize;
        const HEADER_WORDS: usize = Record::HEADER_SIZE / 8;
        let capacity = (self.entry - Record::HEADER_SIZE) / std::mem::size_of::<SlotReading>();
        // SAFETY: index < possible CPUs × ring_len = entries of TICKS, each `self.entry` bytes
        // (a multiple of 8; the mapping is page-aligned), of which the header and `capacity`
        // slots are read. The header and slots are plain integers, so any bytes are a valid
        // value. The producer may be rewriting the entry; the caller detects that from the
        // head and discards such copies. `dst` is the caller's.
        unsafe {
            let p = self.ticks.as_ptr().add(index * self.entry);
            let words = std::ptr::read_volatile(p.cast::<[u64; HEADER_WORDS]>());
            std::ptr::write(dst.cast::<[u64; HEADER_WORDS]>(), words);
            let nr = usize::from((*dst).nr_slots).min(capacity);
            let src = p.add(Record::HEADER_SIZE).cast::<SlotReading>();
            let slots = (&raw mut (*dst).slots).cast::<SlotReading>();
            for s in 0..nr {
                slots.add(s).write(std::ptr::read_volatile(src.add(s)));
            }
            std::ptr::write_bytes(slots.add(nr), 0, MAX_SLOTS - nr);
        }
    }

    /// Appends every new record of every CPU to `out` (each CPU's in order), copied once from
    /// the rings, with comm and cgroup filled in; returns how many.
    pub(super) fn drain_append(&mut self, out: &mut Vec<Record>) -> usize {
        let len = u64::from(self.ring_len);
        let first = out.len();
        for cpu in 0..self.tails.len() {
            let head = self.head(cpu);
            let mut tail = self.tails[cpu];
            if head == tail {
                continue;
            }
            if head - tail > len {
                self.lost[cpu] += head - tail - len;
                tail = head - len;
            }
            let start = out.len();
            let count = (head - tail) as usize;
            out.reserve(count);
            for (k, seq) in (tail..head).enumerate() {
                // SAFETY: reserved above: start + k < the capacity.
                unsafe { self.copy_record(cpu, seq, out.as_mut_ptr().add(start + k)) };
            }
            // SAFETY: the `count` records after `start` were all written just above.
            unsafe { out.set_len(start + count) };
            // Anything the producer lapped while we copied is torn: drop it, count it lost.
            // Those are the oldest, at the front of this CPU's run.
            let valid_from = self.head(cpu).saturating_sub(len);
            if valid_from > tail {
                let torn = ((valid_from - tail) as usize).min(out.len() - start);
                self.lost[cpu] += torn as u64;
                out.drain(start..start + torn);
            }
            for rec in &mut out[start..] {
                self.tasks.complete(rec);
            }
            self.tails[cpu] = head;
        }
        out.len() - first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cpu: u32, pid: u32, comm: &str, omitted: bool) -> Record {
        let mut r = Record {
            t_ns: 0,
            cgroup_id: 0,
            cpu,
            pid,
            tgid: pid,
            kind: imc_common::KIND_TICK,
            nr_slots: 0,
            failed_mask: 0,
            flags: 0,
            comm: [0; 16],
            t0_ns: 0,
            on_ns: 0,
            slots: [imc_common::SlotReading::default(); MAX_SLOTS],
        };
        if omitted {
            r.flags = FLAG_TASK_OMITTED;
        } else {
            r.comm[..comm.len()].copy_from_slice(comm.as_bytes());
            r.cgroup_id = 7;
        }
        r
    }

    fn completed(cache: &mut TaskCache, mut r: Record) -> (String, u64, u8) {
        cache.complete(&mut r);
        let comm = String::from_utf8_lossy(r.comm_bytes()).into_owned();
        (comm, r.cgroup_id, r.flags)
    }

    #[test]
    fn omitted_records_take_the_name_of_their_own_thread() {
        let mut c = TaskCache::default();
        completed(&mut c, record(0, 42, "worker", false));
        completed(&mut c, record(0, 43, "other", false));
        // Not the CPU's last full record: found by thread id, flag cleared.
        assert_eq!(
            completed(&mut c, record(0, 42, "", true)),
            ("worker".into(), 7, 0)
        );
        // Seen in full on another CPU only.
        assert_eq!(completed(&mut c, record(1, 43, "", true)).0, "other");
    }

    #[test]
    fn an_idle_record_before_any_full_one_is_named_after_its_cpu() {
        let mut c = TaskCache::default();
        completed(&mut c, record(1, 42, "worker", false));
        assert_eq!(
            completed(&mut c, record(1, 0, "", true)),
            ("swapper/1".into(), 0, 0)
        );
    }

    #[test]
    fn each_cpus_idle_task_keeps_its_own_name() {
        let mut c = TaskCache::default();
        completed(&mut c, record(0, 0, "swapper/0", false));
        completed(&mut c, record(1, 0, "swapper/1", false));
        completed(&mut c, record(0, 42, "worker", false));
        completed(&mut c, record(1, 43, "other", false));
        assert_eq!(completed(&mut c, record(0, 0, "", true)).0, "swapper/0");
        assert_eq!(completed(&mut c, record(1, 0, "", true)).0, "swapper/1");
    }
}
