//! A JIT's perf map (`/tmp/perf-PID.map`: lines `START SIZE name`, hex, `0x` optional), the
//! names of code a JIT wrote into anonymous memory. The file is written by the profiled process,
//! so it is untrusted: opened without following a final symlink and without blocking, refused
//! unless it is a regular file owned by the process's user or root, and read up to a byte and
//! an entry cap. A malformed line is skipped and counted. A later line wins where two overlap
//! (a JIT reuses the memory of code it freed, and appends the new name).
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::SymbolsError;
use crate::sys::file::not_regular;

/// What identifies one version of the file: a change means it must be read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
}

impl Stamp {
    pub fn of(md: &std::fs::Metadata) -> Stamp {
        Stamp {
            ino: md.ino(),
            len: md.len(),
            mtime_ns: i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
        }
    }
}

/// The caps on one perf map's read.
#[derive(Clone, Copy, Debug)]
pub struct PerfMapCaps {
    pub max_bytes: u64,
    pub max_entries: usize,
}

/// One perf map, its overlaps resolved: disjoint ranges, each naming one function.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// start → (end, index into `names`).
    ranges: BTreeMap<u64, (u64, u32)>,
    names: Vec<Box<str>>,
    /// Lines skipped as malformed.
    pub malformed: u64,
    /// The file went past a cap; its tail was not read.
    pub truncated: bool,
    /// Bytes of memory held, roughly (names and ranges), for the cache's budget.
    pub held_bytes: u64,
}

impl PerfMap {
    /// The function whose JIT code covers `addr`.
    pub fn find(&self, addr: u64) -> Option<&str> {
        let (_, &(end, name)) = self.ranges.range(..=addr).next_back()?;
        if addr >= end {
            return None;
        }
        self.names.get(name as usize).map(|n| &**n)
    }

    /// Parses perf map text from `r`, which yields at most `caps.max_bytes` bytes.
    pub fn parse(mut r: impl BufRead, caps: PerfMapCaps) -> std::io::Result<PerfMap> {
        let mut map = PerfMap::default();
        let mut line = Vec::new();
        let mut read = 0u64;
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            if read >= caps.max_bytes && line.last() != Some(&b'\n') {
                map.truncated = true;
                break;
            }
            if map.names.len() >= caps.max_entries {
                map.truncated = true;
                break;
            }
            match parse_line(&line) {
                Some((start, end, name)) => map.insert(start, end, name),
                None => map.malformed += 1,
            }
        }
        map.truncated |= read >= caps.max_bytes;
        Ok(map)
    }

    /// Names `[start, end)` `name`, over whatever earlier lines said of any part of it.
    fn insert(&mut self, start: u64, end: u64, name: String) {
        let overlapping: Vec<(u64, (u64, u32))> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(s, v)| (*s, *v))
            .collect();
        for (s, (e, n)) in overlapping {
            self.ranges.remove(&s);
            if s < start {
                self.ranges.insert(s, (start, n));
            }
            if e > end {
                self.ranges.insert(end, (e, n));
            }
        }
        let Ok(index) = u32::try_from(self.names.len()) else {
            self.truncated = true;
            return;
        };
        // A range is about 40 bytes in the tree, a name its length and a box.
        self.held_bytes += name.len() as u64 + 16 + 2 * 40;
        self.names.push(name.into_boxed_str());
        self.ranges.insert(start, (end, index));
    }
}

/// `START SIZE name` → the range and the name; `None` for a malformed line.
fn parse_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(line);
    let mut parts = text.trim_start().splitn(3, ' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim();
    if size == 0 || name.is_empty() {
        return None;
    }
    Some((start, start.checked_add(size)?, name.to_string()))
}

fn hex(s: &str) -> Option<u64> {
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Opens a perf map the process wrote: no final symlink followed, no blocking on a FIFO, a
/// regular file owned by root or by one of `uids` (the process's; empty: not known, any owner).
/// Returns the file and its stamp.
pub fn open(path: &Path, uids: &[u32]) -> Result<(File, Stamp), SymbolsError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| SymbolsError::read(path, e))?;
    let md = f.metadata().map_err(|e| SymbolsError::read(path, e))?;
    if !md.file_type().is_file() {
        return Err(SymbolsError::read(path, not_regular("a special file")));
    }
    let owner = md.uid();
    if owner != 0 && !uids.is_empty() && !uids.contains(&owner) {
        return Err(SymbolsError::PerfMapOwner {
            path: PathBuf::from(path),
            owner,
            process: uids.first().copied().unwrap_or(0),
        });
    }
    Ok((f, Stamp::of(&md)))
}

/// The stamp of the file at `path` now, where it can be seen.
pub fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|md| Stamp::of(&md))
}

/// Reads an opened perf map within `caps`.
pub fn read(path: &Path, f: File, caps: PerfMapCaps) -> Result<PerfMap, SymbolsError> {
    PerfMap::parse(BufReader::new(f.take(caps.max_bytes)), caps)
        .map_err(|e| SymbolsError::read(path, e))
}
