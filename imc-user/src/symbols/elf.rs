//! A mapped binary opened as its process sees it, and its symbols looked up with blazesym.
//! The file is found, in order, through `proc/PID/map_files/START-END` (the very file mapped,
//! even deleted or replaced since), `proc/PID/root/PATH` (the process's own mount namespace: a
//! container's binaries), and `PATH` under the root. A candidate counts only when it is a
//! regular file with the inode the maps line gives, so a binary replaced on disk is never
//! symbolized with the new file's symbols.
//!
//! A file found through a process's own paths is handed to blazesym by `PATH` under the root
//! where that is the very same file (device, inode, size and modification time): blazesym
//! parses a binary once per path, so every process of one program then shares one parse, and
//! it outlives the process that found it.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use super::error::SymbolsError;
use super::maps::{Backing, Mapping};

/// A binary found for a mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The path blazesym opens it by.
    pub path: PathBuf,
    /// The path lies under `proc/PID/` (it goes with the process).
    pub per_process: bool,
    /// What identifies the file's contents: device, inode, size, mtime.
    pub identity: (u64, u64, u64, i64),
}

/// Why no binary was found for a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// No candidate path opened.
    Missing,
    /// A file is there, but not the one that was mapped (another inode).
    Replaced,
}

/// Finds the file `m` (a file mapping of process `tgid`) maps.
pub fn find(root: &Path, tgid: u32, m: &Mapping) -> Result<Found, NotFound> {
    let mut candidates = vec![(
        root.join(format!("proc/{tgid}/map_files/{:x}-{:x}", m.start, m.end)),
        true,
    )];
    if let Backing::File {
        path,
        deleted: false,
    } = &m.backing
    {
        let rel = path.strip_prefix("/").unwrap_or(path);
        candidates.push((root.join(format!("proc/{tgid}/root")).join(rel), true));
        candidates.push((root.join(rel), false));
    }
    let shared = candidates
        .last()
        .filter(|(_, per_process)| !per_process)
        .cloned();
    let mut why = NotFound::Missing;
    for (path, per_process) in candidates {
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        if !md.file_type().is_file() {
            continue;
        }
        if m.inode != 0 && md.ino() != m.inode {
            why = NotFound::Replaced;
            continue;
        }
        let identity = identity_of(&md);
        if per_process
            && let Some((shared, _)) = shared
            && std::fs::metadata(&shared).is_ok_and(|s| s.is_file() && identity_of(&s) == identity)
        {
            return Ok(Found {
                path: shared,
                per_process: false,
                identity,
            });
        }
        return Ok(Found {
            path,
            per_process,
            identity,
        });
    }
    Err(why)
}

/// What tells one file's contents from another's: device, inode, size, modification time.
fn identity_of(md: &std::fs::Metadata) -> (u64, u64, u64, i64) {
    (md.dev(), md.ino(), md.len(), md.mtime())
}

/// The GNU build ID of the ELF file at `path`, in lowercase hex.
pub fn build_id(path: &Path) -> Option<String> {
    let id = blazesym::helper::read_elf_build_id(path).ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// What a symbol lookup found for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// The symbols of the ELF file at `path` covering each file offset (`None` where none does, as
/// in a stripped binary).
pub fn symbolize(
    blaze: &Symbolizer,
    path: &Path,
    offsets: &[u64],
) -> Result<Vec<Option<Symbol>>, SymbolsError> {
    let src = Source::Elf(Elf::new(path));
    let found = blaze
        .symbolize(&src, Input::FileOffset(offsets))
        .map_err(|source| SymbolsError::Symbolize {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(found.into_iter().map(symbol).collect())
}

fn symbol(s: Symbolized<'_>) -> Option<Symbol> {
    let sym = s.into_sym()?;
    let (file, line) = match &sym.code_info {
        Some(ci) => (Some(ci.to_path().to_string_lossy().into_owned()), ci.line),
        None => (None, None),
    };
    Some(Symbol {
        function: sym.name.into_owned(),
        file,
        line,
    })
}
