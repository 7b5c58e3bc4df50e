//! What is cached for one process: its executable mappings, the binary found for each, its perf
//! map, and the two lines of `proc/PID/status` a perf map needs (the user that may own it, and
//! the process's pid in its own namespace, which names it).
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::elf::{Found, NotFound};
use super::maps::{MapKey, Maps};
use super::perf_map::{PerfMap, Stamp};
use crate::sys::file::read_capped;

/// The binary found (or not) for one mapping.
#[derive(Clone, Debug)]
pub enum Slot {
    Found {
        found: Found,
        build_id: Option<String>,
    },
    NotFound(NotFound),
}

/// A process's perf map, as last looked for.
#[derive(Debug, Default)]
pub enum PerfSlot {
    /// Not looked for yet.
    #[default]
    Unread,
    /// Looked for, not there (or refused).
    Absent,
    /// Read from `path` (named `module` in frames) when it had `stamp`.
    Loaded {
        path: PathBuf,
        module: String,
        stamp: Stamp,
        map: PerfMap,
    },
}

impl PerfSlot {
    /// Memory the perf map holds, roughly.
    pub fn held_bytes(&self) -> u64 {
        match self {
            PerfSlot::Loaded { map, .. } => map.held_bytes,
            _ => 0,
        }
    }
}

/// The user ids and namespace pid of a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Real, effective, saved and filesystem uids.
    pub uids: Vec<u32>,
    /// The pid in the process's innermost pid namespace.
    pub ns_pid: Option<u32>,
}

impl Status {
    /// Reads `root/proc/PID/status`; `None` where it cannot be read.
    pub fn read(root: &Path, tgid: u32) -> Option<Status> {
        let bytes = read_capped(&root.join(format!("proc/{tgid}/status")), 64 * 1024).ok()?;
        Some(Status::parse(&String::from_utf8_lossy(&bytes)))
    }

    pub fn parse(text: &str) -> Status {
        let mut st = Status::default();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("Uid:") {
                st.uids = v
                    .split_whitespace()
                    .filter_map(|u| u.parse().ok())
                    .collect();
            } else if let Some(v) = line.strip_prefix("NSpid:") {
                st.ns_pid = v
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .next_back();
            }
        }
        st
    }
}

/// Everything cached for one process.
#[derive(Debug, Default)]
pub struct ProcessCache {
    pub maps: Maps,
    pub slots: HashMap<MapKey, Slot>,
    pub perf: PerfSlot,
    pub status: Option<Status>,
    /// Addresses found in no mapping (bounded).
    pub unmapped: HashSet<u64>,
    /// The symbolizer's clock at the last use (for evicting the least recently used).
    pub last_use: u64,
    /// The process's executable (device, inode) when its maps were read: another one means
    /// it has exec'ed since, and what is cached of it is another program's.
    pub exe: Option<(u64, u64)>,
    /// The maps were handed in by [`super::Symbolizer::prepare`], whose caller watches the
    /// executable and hands them in again after an exec: they are not checked per lookup.
    pub watched: bool,
}

impl ProcessCache {
    /// The process's maps read again: what is cached of each mapping still there stays, and
    /// addresses found in no mapping are looked up again in the new ones.
    pub fn replace_maps(&mut self, maps: Maps) {
        let keys: HashSet<_> = maps.mappings.iter().map(|m| m.key()).collect();
        self.slots.retain(|k, _| keys.contains(k));
        self.unmapped.retain(|&a| maps.find(a).is_none());
        self.maps = maps;
    }
}
