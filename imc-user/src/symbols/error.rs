//! Why one step of symbolization failed: a proc file that could not be read, a binary that could
//! not be opened or parsed. None of these stops symbolization: the frames concerned fall back to
//! module + offset, or to the unresolved marker, and the failure is counted in the stats.
use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    /// A proc file, perf map or kallsyms could not be opened or read.
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A perf map was not owned by the process's user or by root, so its names are not trusted.
    #[error("{}: owned by uid {owner}, not by the process's uid {process} or root", path.display())]
    PerfMapOwner {
        path: PathBuf,
        owner: u32,
        process: u32,
    },
    /// blazesym could not parse or symbolize a binary.
    #[error("symbolizing with {}", path.display())]
    Symbolize {
        path: PathBuf,
        #[source]
        source: blazesym::Error,
    },
}

impl SymbolsError {
    /// Reading `path` failed with `source`.
    pub fn read(path: impl Into<PathBuf>, source: io::Error) -> SymbolsError {
        SymbolsError::Read {
            path: path.into(),
            source,
        }
    }

    /// The process (or the file) is gone: the error a read of an ended process's proc files gives.
    pub fn is_gone(&self) -> bool {
        match self {
            SymbolsError::Read { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ESRCH) | Some(libc::ENOTDIR)
                ) || source.kind() == io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}
