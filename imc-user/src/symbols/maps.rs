//! A process's executable mappings, parsed from `proc/PID/maps` under the root: which file (or
//! anonymous memory) each code address lies in, and at which file offset. Only executable
//! mappings are kept (a stack's addresses are code addresses), and the read is bounded in bytes
//! and lines, so a hostile or enormous maps file costs at most the cap.
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::error::SymbolsError;
use crate::sys::file::open_regular;

/// What backs a mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A file, by the path the kernel printed; `deleted` when it was unlinked (or replaced)
    /// after it was mapped: only `map_files` can still open it.
    File { path: PathBuf, deleted: bool },
    /// Anonymous memory (no path, `[anon:NAME]`, `/memfd:`): code a JIT wrote.
    Anon,
    /// A kernel-provided area (`[vdso]`, `[vsyscall]`), by its name.
    Special(String),
}

/// Start, end, file offset and inode of a mapping.
pub type MapKey = (u64, u64, u64, u64);

/// One executable mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Inode of the mapped file as the kernel saw it when mapping (0 for anonymous memory).
    pub inode: u64,
    pub backing: Backing,
}

impl Mapping {
    /// What identifies the mapping across reads of the maps file.
    pub fn key(&self) -> MapKey {
        (self.start, self.end, self.offset, self.inode)
    }

    /// The file offset of `addr`, which must lie in this mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.offset)
    }

    /// The name frames carry as their module: the file's path, or the special area's name.
    pub fn module_name(&self) -> Option<String> {
        match &self.backing {
            Backing::File { path, .. } => Some(path.to_string_lossy().into_owned()),
            Backing::Special(name) => Some(name.clone()),
            Backing::Anon => None,
        }
    }
}

/// A process's executable mappings, sorted by start.
#[derive(Debug, Default)]
pub struct Maps {
    pub mappings: Vec<Mapping>,
    /// The file was longer than the byte or line cap; mappings past it are unknown.
    pub truncated: bool,
}

impl Maps {
    /// The index of the mapping `addr` lies in.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = self.mappings.get(i)?;
        (addr < m.end).then_some(i)
    }

    /// Adds `m`, in place of the mappings it overlaps (the process unmapped them and mapped
    /// `m` since they were read); returns their keys.
    pub fn insert(&mut self, m: Mapping) -> Vec<MapKey> {
        let mut gone = Vec::new();
        self.mappings.retain(|o| {
            let keep = o.end <= m.start || m.end <= o.start;
            if !keep {
                gone.push(o.key());
            }
            keep
        });
        let at = self.mappings.partition_point(|o| o.start < m.start);
        self.mappings.insert(at, m);
        gone
    }

    /// Reads `path` (a `proc/PID/maps`), at most `max_bytes` bytes and `max_lines` lines.
    pub fn read(path: &Path, max_bytes: u64, max_lines: usize) -> Result<Maps, SymbolsError> {
        let f = open_regular(path).map_err(|e| SymbolsError::read(path, e))?;
        Maps::parse(BufReader::new(f.take(max_bytes)), max_bytes, max_lines)
            .map_err(|e| SymbolsError::read(path, e))
    }

    /// Parses maps text from `r`, which yields at most `max_bytes` bytes.
    pub fn parse(mut r: impl BufRead, max_bytes: u64, max_lines: usize) -> std::io::Result<Maps> {
        let mut maps = Maps::default();
        let mut line = Vec::new();
        let mut lines = 0usize;
        let mut read = 0u64;
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            lines += 1;
            // A line the byte cap cut short is not parsed.
            if lines > max_lines || (read >= max_bytes && line.last() != Some(&b'\n')) {
                maps.truncated = true;
                break;
            }
            if let Some(m) = parse_line(&line) {
                maps.mappings.push(m);
            }
        }
        maps.truncated |= read >= max_bytes;
        maps.mappings.sort_by_key(|m| m.start);
        Ok(maps)
    }
}

impl From<crate::sys::procmap::Vma> for Mapping {
    /// The mapping the kernel answered a query with (named as its maps line names it).
    fn from(v: crate::sys::procmap::Vma) -> Mapping {
        Mapping {
            start: v.start,
            end: v.end,
            offset: v.offset,
            inode: v.inode,
            backing: backing(&v.name),
        }
    }
}

/// Whether maps text maps a file's code. A running program's maps always do (its executable,
/// or the loader running it); maps read mid-exec (the new program not mapped yet) or at exit
/// (the memory already released) map none, and tell nothing of where the program's code is.
pub fn maps_file_code(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .filter_map(parse_line)
        .any(|m| matches!(m.backing, Backing::File { .. }))
}

/// One maps line (`START-END PERMS OFFSET DEV INODE [PATH]`), when it is an executable mapping.
fn parse_line(line: &[u8]) -> Option<Mapping> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut rest = line;
    let mut field = || -> Option<&[u8]> {
        let start = rest.iter().position(|&b| b != b' ')?;
        let tail = &rest[start..];
        let end = tail.iter().position(|&b| b == b' ').unwrap_or(tail.len());
        let (f, r) = tail.split_at(end);
        rest = r;
        Some(f)
    };
    let range = std::str::from_utf8(field()?).ok()?;
    let perms = field()?;
    let offset = std::str::from_utf8(field()?).ok()?;
    let _dev = field()?;
    let inode = std::str::from_utf8(field()?).ok()?;
    if perms.get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if end <= start {
        return None;
    }
    let path = trim_leading_spaces(rest);
    Some(Mapping {
        start,
        end,
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        backing: backing(path),
    })
}

fn trim_leading_spaces(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|&c| c != b' ').unwrap_or(b.len());
    &b[start..]
}

/// What the path column of a maps line says backs the mapping.
fn backing(path: &[u8]) -> Backing {
    const DELETED: &[u8] = b" (deleted)";
    if path.is_empty() || path.starts_with(b"[anon:") || path.starts_with(b"/memfd:") {
        return Backing::Anon;
    }
    if path.starts_with(b"[") {
        return Backing::Special(String::from_utf8_lossy(path).into_owned());
    }
    let (path, deleted) = match path.strip_suffix(DELETED) {
        Some(p) => (p, true),
        None => (path, false),
    };
    Backing::File {
        path: PathBuf::from(OsStr::from_bytes(path)),
        deleted,
    }
}
