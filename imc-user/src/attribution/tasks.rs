//! The task table: every task seen, with its per-interval accumulators, found by key in O(1)
//! without allocating once the table has grown to the working set.
use imc_common::MAX_SLOTS;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Marks "no task": the idle task (pid 0) or a span nobody ran in.
pub const IDLE: u32 = u32::MAX;

/// What identifies a task in the output: a thread, under one name, in one cgroup. A thread that
/// execs or moves cgroup becomes a new row, which is what the user sees in `top` as well.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TaskKey {
    pub pid: u32,
    pub tgid: u32,
    pub cgroup: u64,
    pub comm: [u8; 16],
}

impl TaskKey {
    pub fn comm_str(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }
}

/// A multiply-rotate hasher (the FxHash recipe): the key is a handful of integers chosen by the
/// kernel, not by an attacker who could aim for collisions, and SipHash would cost a good part
/// of the per-tick budget.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;

pub struct TaskEntry {
    pub key: TaskKey,
    /// Counts attributed in the current interval, per slot.
    pub acc: [f64; MAX_SLOTS],
    /// Already listed in `touched` this interval.
    pub touched: bool,
}

#[derive(Default)]
pub struct TaskTable {
    pub entries: Vec<TaskEntry>,
    index: HashMap<TaskKey, u32, FxBuild>,
    /// Tasks with something in `acc` this interval, so closing an interval costs the number of
    /// active tasks, not the number ever seen.
    pub touched: Vec<u32>,
}

impl TaskTable {
    pub fn lookup(&mut self, key: &TaskKey) -> u32 {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        let i = self.entries.len() as u32;
        self.entries.push(TaskEntry {
            key: *key,
            acc: [0.0; MAX_SLOTS],
            touched: false,
        });
        self.index.insert(*key, i);
        i
    }

    #[inline]
    pub fn add(&mut self, task: u32, slot: usize, amount: f64) {
        if let Some(e) = self.entries.get_mut(task as usize) {
            e.acc[slot] += amount;
            if !e.touched {
                e.touched = true;
                self.touched.push(task);
            }
        }
    }

    /// Forgets every task not in `keep` (indices still referenced elsewhere), returning the map
    /// old index → new index (IDLE for dropped ones). Called between intervals, when all
    /// accumulators are zero, so that a long recording with many short-lived threads does not
    /// grow without bound.
    pub fn compact(&mut self, keep: &[bool]) -> Vec<u32> {
        let mut map = vec![IDLE; self.entries.len()];
        let old = std::mem::take(&mut self.entries);
        self.index.clear();
        for (i, e) in old.into_iter().enumerate() {
            if keep.get(i).copied().unwrap_or(false) {
                map[i] = self.entries.len() as u32;
                self.index.insert(e.key, map[i]);
                self.entries.push(e);
            }
        }
        map
    }
}
