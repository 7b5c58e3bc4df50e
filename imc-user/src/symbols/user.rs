//! User-space frames: a process's addresses resolved through its cached mappings, the binaries
//! found for them and its perf map; the cache read or refreshed as the addresses need.
use std::collections::BTreeMap;

use super::elf::{self, NotFound};
use super::maps::{Backing, Maps};
use super::perf_map::{self, PerfMapCaps};
use super::process::{PerfSlot, ProcessCache, Slot, Status};
use super::{Symbolizer, unresolved};
use crate::model::stacks::{Frame, FrameKind};

/// Addresses remembered per process as lying in no mapping (at most; past it they are
/// forgotten and looked up again).
const MAX_UNMAPPED: usize = 1024;

/// An address's place in the stack, the address looked up, and its mapping's index.
struct Pending {
    index: usize,
    addr: u64,
    lookup: u64,
}

impl Symbolizer {
    pub(super) fn resolve_user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        // A process that exec'ed since its maps were read is another program: start afresh
        // (else its new addresses would be looked up in the old program's mappings). Maps
        // handed in by `prepare` are handed in again after an exec.
        let watched = self.processes.get(&tgid).is_some_and(|p| p.watched);
        let exe = if watched {
            self.processes.get(&tgid).and_then(|p| p.exe)
        } else {
            self.exe_of(tgid)
        };
        if exe.is_some() && self.processes.get(&tgid).is_some_and(|p| p.exe != exe) {
            self.forget(tgid);
        }
        let (mut p, fresh) = match self.processes.remove(&tgid) {
            Some(p) => (p, false),
            None => match self.read_maps(tgid) {
                Some(maps) => {
                    let p = ProcessCache {
                        maps,
                        exe,
                        ..ProcessCache::default()
                    };
                    (p, true)
                }
                None => {
                    self.stats.processes_gone += 1;
                    return unresolved(addrs.len());
                }
            },
        };
        p.last_use = self.clock;
        let lookups: Vec<u64> = addrs
            .iter()
            .enumerate()
            .map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
            .collect();
        self.refresh_maps(tgid, &mut p, &lookups, fresh);
        let mut frames: Vec<Option<Frame>> = vec![None; addrs.len()];
        let mut by_mapping: BTreeMap<usize, Vec<Pending>> = BTreeMap::new();
        let mut perf_checked = false;
        for (index, (&addr, &lookup)) in addrs.iter().zip(&lookups).enumerate() {
            let Some(mi) = p.maps.find(lookup) else {
                frames[index] = Some(self.jit_frame(tgid, &mut p, addr, lookup, &mut perf_checked));
                continue;
            };
            let m = &p.maps.mappings[mi];
            frames[index] = match &m.backing {
                Backing::File { .. } => {
                    by_mapping.entry(mi).or_default().push(Pending {
                        index,
                        addr,
                        lookup,
                    });
                    None
                }
                Backing::Anon => {
                    Some(self.jit_frame(tgid, &mut p, addr, lookup, &mut perf_checked))
                }
                Backing::Special(_) => Some(plain(m.module_name(), m.file_offset(addr), None)),
            };
        }
        for (mi, pending) in by_mapping {
            for (index, frame) in self.file_frames(tgid, &mut p, mi, &pending) {
                frames[index] = Some(frame);
            }
        }
        self.processes.insert(tgid, p);
        self.evict_processes(tgid);
        let bare =
            |(i, f): (usize, Option<Frame>)| f.unwrap_or_else(|| plain(None, addrs[i], None));
        frames.into_iter().enumerate().map(bare).collect()
    }

    /// Finds the mappings of addresses that lie in no known mapping (the process mapped more
    /// since): the kernel is asked for each such address where it answers queries, else the
    /// maps are read again, keeping what was found for the mappings still there. Addresses
    /// found in no mapping (a frame-pointer walk's garbage) are remembered and do not make it
    /// look again, nor does any address of the call that read the maps first (`fresh`).
    fn refresh_maps(&mut self, tgid: u32, p: &mut ProcessCache, lookups: &[u64], fresh: bool) {
        let mut unknown: Vec<u64> = lookups
            .iter()
            .copied()
            .filter(|&a| p.maps.find(a).is_none() && !p.unmapped.contains(&a))
            .collect();
        if unknown.is_empty() {
            return;
        }
        unknown.sort_unstable();
        unknown.dedup();
        if !fresh && self.query_maps(tgid, p, &unknown) {
            return;
        }
        if !fresh && let Some(maps) = self.read_maps(tgid) {
            p.replace_maps(maps);
        }
        let maps = &p.maps;
        for &a in lookups {
            if p.unmapped.len() < MAX_UNMAPPED && maps.find(a).is_none() {
                p.unmapped.insert(a);
            }
        }
    }

    /// Asks the kernel for the executable mapping of each of `unknown` (one query each),
    /// keeping each mapping found and remembering the addresses in none. False where the maps
    /// file answers no query (a kernel before 6.11, a tree's plain file, a process gone).
    fn query_maps(&mut self, tgid: u32, p: &mut ProcessCache, unknown: &[u64]) -> bool {
        let path = self.root.join(format!("proc/{tgid}/maps"));
        let Ok(f) = crate::sys::file::open_regular(&path) else {
            return false;
        };
        for &a in unknown {
            if p.maps.find(a).is_some() {
                continue;
            }
            match crate::sys::procmap::executable_at(&f, a) {
                Ok(Some(vma)) => {
                    for gone in p.maps.insert(vma.into()) {
                        p.slots.remove(&gone);
                    }
                }
                Ok(None) => {
                    if p.unmapped.len() >= MAX_UNMAPPED {
                        p.unmapped.clear();
                    }
                    p.unmapped.insert(a);
                }
                Err(e) => {
                    log::debug!(
                        "process {tgid}: {}: {}",
                        path.display(),
                        crate::text::error_line(&e)
                    );
                    return false;
                }
            }
            self.stats.maps_queries += 1;
        }
        true
    }

    /// The (device, inode) of `root/proc/PID/exe`'s target; None where it cannot be read (a
    /// process gone, a kernel thread, a tree without it).
    pub(super) fn exe_of(&self, tgid: u32) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(self.root.join(format!("proc/{tgid}/exe"))).ok()?;
        Some((m.dev(), m.ino()))
    }

    /// `root/proc/PID/maps`, counted in the stats; `None` where it cannot be read.
    fn read_maps(&mut self, tgid: u32) -> Option<Maps> {
        let path = self.root.join(format!("proc/{tgid}/maps"));
        let l = &self.limits;
        match Maps::read(&path, l.max_maps_bytes, l.max_maps_lines) {
            Ok(maps) => {
                self.stats.maps_read += 1;
                self.stats.maps_truncated += u64::from(maps.truncated);
                Some(maps)
            }
            Err(e) => {
                log::debug!("process {tgid}: {}", crate::text::error_line(&e));
                None
            }
        }
    }

    /// Frames for the addresses of one file mapping, looked up in its binary together.
    fn file_frames(
        &mut self,
        tgid: u32,
        p: &mut ProcessCache,
        mi: usize,
        pending: &[Pending],
    ) -> Vec<(usize, Frame)> {
        let m = &p.maps.mappings[mi];
        let module = m.module_name();
        let offsets: Vec<u64> = pending.iter().map(|x| m.file_offset(x.lookup)).collect();
        let own: Vec<u64> = pending.iter().map(|x| m.file_offset(x.addr)).collect();
        let (build_id, symbols) = self.look_up(tgid, p, mi, &offsets);
        let mut out = Vec::with_capacity(pending.len());
        for (i, x) in pending.iter().enumerate() {
            let mut f = plain(module.clone(), own[i], build_id.clone());
            if let Some(Some(s)) = symbols.get(i) {
                f.function = Some(s.function.clone());
                f.file = s.file.clone();
                f.line = s.line;
            }
            out.push((x.index, f));
        }
        out
    }

    /// The build ID and the symbols at `offsets` of mapping `mi`'s binary. A failed lookup
    /// finds the binary again once (a `proc/PID/` path goes with its process).
    fn look_up(
        &mut self,
        tgid: u32,
        p: &mut ProcessCache,
        mi: usize,
        offsets: &[u64],
    ) -> (Option<String>, Vec<Option<elf::Symbol>>) {
        let key = p.maps.mappings[mi].key();
        for attempt in 0..2 {
            let (found, build_id) = match self.slot(tgid, p, mi) {
                Slot::Found { found, build_id } => (found, build_id),
                Slot::NotFound(_) => return (None, Vec::new()),
            };
            self.touch_module(&found.path, found.per_process.then_some(tgid));
            match elf::symbolize(&self.blaze, &found.path, offsets) {
                Ok(symbols) => return (build_id, symbols),
                Err(e) if attempt == 0 => {
                    log::debug!("process {tgid}: {}", crate::text::error_line(&e));
                    p.slots.remove(&key);
                }
                Err(e) => {
                    log::debug!("process {tgid}: {}", crate::text::error_line(&e));
                    self.stats.symbolize_errors += 1;
                    return (build_id, Vec::new());
                }
            }
        }
        (None, Vec::new())
    }

    /// The binary of mapping `mi`, found on first use and counted where it is not.
    fn slot(&mut self, tgid: u32, p: &mut ProcessCache, mi: usize) -> Slot {
        let m = &p.maps.mappings[mi];
        if let Some(s) = p.slots.get(&m.key()) {
            return s.clone();
        }
        let slot = match elf::find(&self.root, tgid, m) {
            Ok(found) => {
                let build_id = self
                    .build_ids
                    .entry(found.identity)
                    .or_insert_with(|| elf::build_id(&found.path))
                    .clone();
                if self.build_ids.len() > 4 * self.limits.max_modules {
                    self.build_ids.clear();
                }
                Slot::Found { found, build_id }
            }
            Err(why) => {
                match why {
                    NotFound::Missing => self.stats.binaries_missing += 1,
                    NotFound::Replaced => self.stats.binaries_replaced += 1,
                }
                Slot::NotFound(why)
            }
        };
        p.slots.insert(m.key(), slot.clone());
        slot
    }

    /// The frame of an address in anonymous memory or in no mapping: the perf map's name for
    /// it, else the bare address. On a miss the perf map is read again if it changed (once per
    /// call: `checked`).
    fn jit_frame(
        &mut self,
        tgid: u32,
        p: &mut ProcessCache,
        addr: u64,
        lookup: u64,
        checked: &mut bool,
    ) -> Frame {
        if matches!(p.perf, PerfSlot::Unread) {
            self.load_perf_map(tgid, p);
            *checked = true;
        }
        if jit_name(&p.perf, lookup).is_none() && !*checked {
            *checked = true;
            let stale = match &p.perf {
                PerfSlot::Loaded { path, stamp, .. } => perf_map::stamp(path) != Some(*stamp),
                _ => true,
            };
            if stale {
                self.load_perf_map(tgid, p);
            }
        }
        match jit_name(&p.perf, lookup) {
            Some((name, module)) => Frame {
                kind: FrameKind::Jit,
                function: Some(name),
                module: Some(module),
                ..plain(None, addr, None)
            },
            None => plain(None, addr, None),
        }
    }

    /// Looks for the process's perf map in its own root, then in the root's `/tmp`.
    fn load_perf_map(&mut self, tgid: u32, p: &mut ProcessCache) {
        if p.status.is_none() {
            p.status = Status::read(&self.root, tgid);
        }
        let status = p.status.clone().unwrap_or_default();
        let ns_pid = status.ns_pid.unwrap_or(tgid);
        let candidates = [
            (
                self.root
                    .join(format!("proc/{tgid}/root/tmp/perf-{ns_pid}.map")),
                ns_pid,
            ),
            (self.root.join(format!("tmp/perf-{tgid}.map")), tgid),
        ];
        self.perf_held = self.perf_held.saturating_sub(p.perf.held_bytes());
        let caps = PerfMapCaps {
            max_bytes: self.limits.max_perf_map_bytes,
            max_entries: self.limits.max_perf_map_entries,
        };
        p.perf = PerfSlot::Absent;
        for (path, named) in candidates {
            let opened = perf_map::open(&path, &status.uids);
            let (f, stamp) = match opened {
                Ok(x) => x,
                Err(e) if e.is_gone() => continue,
                Err(e) => {
                    log::debug!(
                        "process {tgid}: perf map refused: {}",
                        crate::text::error_line(&e)
                    );
                    self.stats.perf_maps_refused += 1;
                    continue;
                }
            };
            match perf_map::read(&path, f, caps) {
                Ok(map) => {
                    self.stats.perf_maps_read += 1;
                    self.stats.perf_map_lines_malformed += map.malformed;
                    self.stats.perf_maps_truncated += u64::from(map.truncated);
                    let module = format!("/tmp/perf-{named}.map");
                    self.perf_held += map.held_bytes;
                    p.perf = PerfSlot::Loaded {
                        path,
                        module,
                        stamp,
                        map,
                    };
                    return;
                }
                Err(e) => log::debug!("process {tgid}: {}", crate::text::error_line(&e)),
            }
        }
    }
}

/// The perf map's name for `addr`, and the perf map's path as the process names it.
fn jit_name(perf: &PerfSlot, addr: u64) -> Option<(String, String)> {
    match perf {
        PerfSlot::Loaded { map, module, .. } => {
            map.find(addr).map(|n| (n.to_string(), module.clone()))
        }
        _ => None,
    }
}

/// A user frame with no function: module + offset, or the bare address.
fn plain(module: Option<String>, offset: u64, build_id: Option<String>) -> Frame {
    Frame {
        kind: FrameKind::User,
        function: None,
        module,
        offset,
        build_id,
        file: None,
        line: None,
    }
}
