//! Symbolization of sampled call stacks: raw instruction addresses (leaf first, as the kernel's
//! stack map holds them) turned into [`Frame`]s while the process still lives, so that a
//! recording keeps function, module, file offset, build ID and source line, and `imc report`
//! needs neither the process nor its binaries.
//!
//! - User addresses: the process's executable mappings from `proc/PID/maps` under the root; a
//!   file mapping's binary is opened as the process sees it (see [`elf`]) and looked up with
//!   blazesym by file offset; an address in anonymous memory is looked up in the process's perf
//!   map (JIT code, see [`perf_map`]).
//! - Kernel addresses: `proc/kallsyms` under the root, read once (see [`kallsyms`]).
//!
//! Every address but the leaf is a return address: it is looked up one byte earlier, so that a
//! call that is the last instruction of a function is charged to that function, not the next.
//! The frame still carries the address's own offset.
//!
//! Nothing here panics or blocks on what it reads: every file is read within a cap, the caches
//! are bounded ([`Limits`]), and whatever cannot be resolved becomes a module + offset frame,
//! a bare address, or the [`UNRESOLVED_FRAME`] marker, counted in [`SymbolizerStats`].
//! blazesym's symbolizer is single-threaded (`!Send`), so a `Symbolizer` lives on one thread.
pub mod elf;
pub mod error;
pub mod kallsyms;
pub mod maps;
pub mod perf_map;
pub mod process;
mod user;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use blazesym::symbolize::evict::{self, Evict};
use serde::Serialize;

use crate::model::stacks::{Frame, FrameKind, UNRESOLVED_FRAME};
use kallsyms::Kallsyms;
use process::ProcessCache;

/// The bounds on what a [`Symbolizer`] reads and holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Processes cached at once; the least recently used goes first.
    pub max_processes: usize,
    /// Binaries (by the path they were opened by) blazesym keeps parsed at once.
    pub max_modules: usize,
    /// One `maps` file: bytes and lines read (the kernel's default `vm.max_map_count` is 65530).
    pub max_maps_bytes: u64,
    pub max_maps_lines: usize,
    /// One perf map: bytes read and entries kept.
    pub max_perf_map_bytes: u64,
    pub max_perf_map_entries: usize,
    /// All cached perf maps together (memory held, roughly).
    pub perf_map_budget: u64,
    /// `kallsyms`: bytes read and symbols kept.
    pub max_kallsyms_bytes: u64,
    pub max_kallsyms_symbols: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_processes: 1024,
            max_modules: 512,
            max_maps_bytes: 16 << 20,
            max_maps_lines: 100_000,
            max_perf_map_bytes: 64 << 20,
            max_perf_map_entries: 1_000_000,
            perf_map_budget: 256 << 20,
            max_kallsyms_bytes: 64 << 20,
            max_kallsyms_symbols: 2_000_000,
        }
    }
}

/// What symbolization met, for `-v` and JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SymbolizerStats {
    /// User addresses asked for, and those given a function name (ELF or JIT).
    pub user_addresses: u64,
    pub user_resolved: u64,
    /// Kernel addresses asked for, and those given a function name.
    pub kernel_addresses: u64,
    pub kernel_resolved: u64,
    /// Processes whose maps could not be read when their frames were asked for (gone, or not
    /// readable): their frames are [`UNRESOLVED_FRAME`].
    pub processes_gone: u64,
    pub unresolved_frames: u64,
    pub maps_read: u64,
    /// Addresses looked up one at a time in a process's maps (`PROCMAP_QUERY`).
    pub maps_queries: u64,
    /// Maps files longer than the cap (mappings past it are unknown).
    pub maps_truncated: u64,
    /// Mappings whose binary no path opened, or whose file on disk is another one than was
    /// mapped: their frames are module + offset.
    pub binaries_missing: u64,
    pub binaries_replaced: u64,
    /// Binaries blazesym could not parse or look up in.
    pub symbolize_errors: u64,
    pub perf_maps_read: u64,
    /// Perf maps refused: not a regular file, or owned by neither the process's user nor root.
    pub perf_maps_refused: u64,
    pub perf_map_lines_malformed: u64,
    /// Perf maps longer than the byte or entry cap (entries past it are unknown).
    pub perf_maps_truncated: u64,
    /// Processes dropped from the cache to stay within its bounds.
    pub processes_evicted: u64,
    /// `kallsyms` could not be read, or shows only zero addresses (`kptr_restrict`): kernel
    /// frames are bare addresses.
    pub kernel_symbols_unavailable: bool,
    pub kernel_symbols_hidden: bool,
    pub kallsyms_truncated: bool,
}

impl SymbolizerStats {
    /// One line for `-v`: the addresses named, then each thing met that cost frames.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "user addresses {} of {} named, kernel {} of {}",
            self.user_resolved, self.user_addresses, self.kernel_resolved, self.kernel_addresses
        );
        let counts = [
            (self.unresolved_frames, "frames unresolved"),
            (
                self.processes_gone,
                "processes gone before their maps were read",
            ),
            (self.binaries_missing, "binaries not found"),
            (self.binaries_replaced, "binaries replaced on disk"),
            (self.symbolize_errors, "binaries unreadable"),
            (self.maps_truncated, "maps cut at the cap"),
            (self.perf_maps_refused, "perf maps refused"),
            (self.perf_map_lines_malformed, "perf map lines malformed"),
            (self.perf_maps_truncated, "perf maps cut at the cap"),
            (self.processes_evicted, "processes evicted from the cache"),
        ];
        for (n, what) in counts.into_iter().filter(|(n, _)| *n > 0) {
            line.push_str(&format!("; {n} {what}"));
        }
        if self.kernel_symbols_unavailable && self.kernel_addresses > 0 {
            line.push_str("; kernel symbols unavailable");
        }
        line
    }
}

/// Turns sampled addresses into frames; caches per process and per binary, within [`Limits`].
pub struct Symbolizer {
    root: PathBuf,
    limits: Limits,
    blaze: blazesym::symbolize::Symbolizer,
    processes: HashMap<u32, ProcessCache>,
    /// Paths handed to blazesym: last use, and the process the path belongs to (`proc/PID/…`).
    modules: HashMap<PathBuf, (u64, Option<u32>)>,
    /// Build IDs by file identity (device, inode, size, mtime).
    build_ids: HashMap<(u64, u64, u64, i64), Option<String>>,
    kallsyms: Option<Kallsyms>,
    /// Memory the cached perf maps hold together, roughly.
    perf_held: u64,
    clock: u64,
    stats: SymbolizerStats,
}

impl Symbolizer {
    /// `root`: the `--root` directory imc reads `proc/` and `sys/` under ("/" normally).
    pub fn new(root: &Path) -> Symbolizer {
        Symbolizer::with_limits(root, Limits::default())
    }

    pub fn with_limits(root: &Path, limits: Limits) -> Symbolizer {
        let debug_dirs = [root.join("usr/lib/debug"), root.join("lib/debug")];
        let blaze = blazesym::symbolize::Symbolizer::builder()
            .enable_inlined_fns(false)
            .set_debug_dirs(Some(&debug_dirs))
            .build();
        Symbolizer {
            root: root.to_path_buf(),
            limits,
            blaze,
            processes: HashMap::new(),
            modules: HashMap::new(),
            build_ids: HashMap::new(),
            kallsyms: None,
            perf_held: 0,
            clock: 0,
            stats: SymbolizerStats::default(),
        }
    }

    /// Where process `tgid`'s code is, read early (its `maps` text and executable's identity,
    /// taken as it made its first stack, or when its stacks were drained): its stacks may be
    /// resolved after it is gone. The caller hands them in again when the executable changes
    /// (an exec) or the kernel says the process is new: lookups do not check it.
    pub fn prepare(&mut self, tgid: u32, maps: &[u8], exe: Option<(u64, u64)>) {
        // Maps read at exit or mid-exec: what was read while the program ran stays.
        if !maps::maps_file_code(maps) {
            return;
        }
        let l = &self.limits;
        let Ok(parsed) = maps::Maps::parse(maps, l.max_maps_bytes, l.max_maps_lines) else {
            return;
        };
        self.stats.maps_read += 1;
        self.stats.maps_truncated += u64::from(parsed.truncated);
        if let Some(p) = self.processes.get_mut(&tgid)
            && p.exe == exe
        {
            // The same program read again (an exec of the same binary lays it out anew, a
            // library loaded since adds a mapping): what is cached of the mappings still there
            // stays.
            p.replace_maps(parsed);
            p.watched = true;
            return;
        }
        self.forget(tgid);
        self.processes.insert(
            tgid,
            process::ProcessCache {
                maps: parsed,
                exe,
                last_use: self.clock,
                watched: true,
                ..Default::default()
            },
        );
        self.evict_processes(tgid);
    }

    /// Frames for a process's user-space addresses (leaf first), one per address, resolved now.
    pub fn user_frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        self.clock += 1;
        self.stats.user_addresses += addrs.len() as u64;
        let frames = self.resolve_user(tgid, addrs);
        for f in &frames {
            match (f.kind, &f.function) {
                (FrameKind::Marker, _) => self.stats.unresolved_frames += 1,
                (_, Some(_)) => self.stats.user_resolved += 1,
                _ => {}
            }
        }
        frames
    }

    /// Frames for kernel addresses (leaf first), from `proc/kallsyms` under the root. An
    /// address no symbol covers (or every one, where the kernel hides its symbols) is a bare
    /// address frame.
    pub fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
        self.stats.kernel_addresses += addrs.len() as u64;
        let syms = self.kallsyms();
        let frames: Vec<Frame> = addrs
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let lookup = if i == 0 { addr } else { addr.saturating_sub(1) };
                let found = syms.and_then(|k| k.find(lookup));
                Frame {
                    kind: FrameKind::Kernel,
                    function: found.map(|(name, _)| name.to_string()),
                    module: found.map(|(_, m)| m.to_string()),
                    offset: addr,
                    build_id: None,
                    file: None,
                    line: None,
                }
            })
            .collect();
        let resolved = frames.iter().filter(|f| f.function.is_some()).count();
        self.stats.kernel_resolved += resolved as u64;
        frames
    }

    /// kallsyms, read on first use; `None` where it is unreadable or hidden.
    fn kallsyms(&mut self) -> Option<&Kallsyms> {
        if self.kallsyms.is_none() {
            let path = self.root.join("proc/kallsyms");
            let l = &self.limits;
            let k = match Kallsyms::read(&path, l.max_kallsyms_bytes, l.max_kallsyms_symbols) {
                Ok(k) => k,
                Err(e) => {
                    log::debug!("kernel symbols: {}", crate::text::error_line(&e));
                    self.stats.kernel_symbols_unavailable = true;
                    Kallsyms::default()
                }
            };
            self.stats.kernel_symbols_hidden = k.hidden;
            self.stats.kallsyms_truncated = k.truncated;
            if k.hidden || k.is_empty() {
                self.stats.kernel_symbols_unavailable = true;
            }
            self.kallsyms = Some(k);
        }
        self.kallsyms.as_ref().filter(|k| !k.is_empty())
    }

    /// The process ended: drop what is cached for it.
    pub fn forget(&mut self, tgid: u32) {
        if let Some(p) = self.processes.remove(&tgid) {
            self.perf_held = self.perf_held.saturating_sub(p.perf.held_bytes());
        }
        let owned: Vec<PathBuf> = self
            .modules
            .iter()
            .filter(|(_, (_, owner))| *owner == Some(tgid))
            .map(|(p, _)| p.clone())
            .collect();
        for path in owned {
            self.evict_module(&path);
        }
    }

    /// Counters for `-v`/JSON.
    pub fn stats(&self) -> SymbolizerStats {
        self.stats.clone()
    }

    /// Notes that blazesym was handed `path` (of process `owner` where it lies under its
    /// `proc/PID/`), and lets go of the least recently used path past [`Limits::max_modules`].
    fn touch_module(&mut self, path: &Path, owner: Option<u32>) {
        let clock = self.clock;
        match self.modules.get_mut(path) {
            Some(entry) => entry.0 = clock,
            None => {
                self.modules.insert(path.to_path_buf(), (clock, owner));
            }
        }
        while self.modules.len() > self.limits.max_modules {
            let oldest = self.modules.iter().min_by_key(|(_, (t, _))| *t);
            let Some(oldest) = oldest.map(|(p, _)| p.clone()) else {
                break;
            };
            self.evict_module(&oldest);
        }
    }

    fn evict_module(&mut self, path: &Path) {
        self.modules.remove(path);
        if let Err(e) = self.blaze.evict(&Evict::Elf(evict::Elf::new(path))) {
            log::debug!(
                "evicting {}: {}",
                path.display(),
                crate::text::error_line(&e)
            );
        }
    }

    /// Drops the least recently used processes other than `keep` while more than
    /// [`Limits::max_processes`] are cached or their perf maps hold more than the budget.
    fn evict_processes(&mut self, keep: u32) {
        while self.processes.len() > self.limits.max_processes
            || self.perf_held > self.limits.perf_map_budget
        {
            let oldest = self
                .processes
                .iter()
                .filter(|(t, _)| **t != keep)
                .min_by_key(|(_, p)| p.last_use)
                .map(|(t, _)| *t);
            let Some(tgid) = oldest else { return };
            self.forget(tgid);
            self.stats.processes_evicted += 1;
        }
    }
}

/// The frames of a process whose addresses cannot be resolved at all.
fn unresolved(n: usize) -> Vec<Frame> {
    vec![Frame::marker(UNRESOLVED_FRAME); n]
}
