//! A cgroup v2 child of imc's own cgroup for the command of `imc record -- CMD`: the command
//! joins it between fork and exec, so the command's whole process tree (short-lived children
//! included: a child is born in its parent's cgroup) carries that cgroup's id in every record,
//! the id `bpf_get_current_cgroup_id` gives, which is the directory's inode number
//! (cgroup-v2.rst, "Processes"; bpf-helpers(7)).
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The directory made for one run; removed at drop (processes still in it are moved back to
/// the parent first, never killed: a daemon the command left behind goes on).
pub struct CommandCgroup {
    dir: PathBuf,
    /// `cgroup.procs` of the directory, open for writing: the command writes "0" to it.
    procs: File,
    id: u64,
    /// The directory relative to the cgroup2 mount (`/imc-record-123`).
    path: String,
}

/// The prefix of the directories: `imc-record-PID` (PID: the imc that made it).
const PREFIX: &str = "imc-record-";

impl CommandCgroup {
    /// Makes `imc-record-PID` under `parent` (a directory of the cgroup2 mount `mount`), and
    /// first removes the empty ones that imcs no longer running left there (killed with
    /// SIGKILL, they could not remove their own).
    pub fn create(mount: &Path, parent: &Path) -> io::Result<CommandCgroup> {
        remove_stale(parent);
        let dir = parent.join(format!("{PREFIX}{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // Left by an earlier imc of the same pid (pid reuse): take it over when empty.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_dir(&dir)?;
                std::fs::create_dir(&dir)?;
            }
            Err(e) => return Err(e),
        }
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .and_then(|f| Ok((f, std::fs::metadata(&dir)?.ino())));
        let (procs, id) = match opened {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let rel = dir.strip_prefix(mount).unwrap_or(&dir);
        let path = format!("/{}", rel.to_string_lossy().trim_start_matches('/'));
        Ok(CommandCgroup {
            dir,
            procs,
            id,
            path,
        })
    }

    /// The cgroup id its tasks' records carry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its path under the cgroup2 mount, as `/proc/PID/cgroup` says it (`0::PATH`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The open `cgroup.procs`, for [`join`] in the command between fork and exec.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }
}

/// In a child between fork and exec: moves the calling process into the cgroup whose
/// `cgroup.procs` is open as `fd` (writing "0" names the writer). Async-signal-safe: one
/// write(2).
pub fn join(fd: RawFd) -> io::Result<()> {
    // SAFETY: writes one byte from a static buffer to a descriptor the caller keeps open.
    let r = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    if r == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        // A process that forks while being moved can leave a child behind: a few rounds.
        let back = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for _ in 0..4 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            let Ok(text) = std::fs::read_to_string(self.dir.join("cgroup.procs")) else {
                return;
            };
            if let Some(back) = &back
                && let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(back)
            {
                for pid in text.lines() {
                    let _ = f.write_all(pid.as_bytes());
                }
            }
        }
        log::warn!(
            "{}: could not be removed (processes of the recorded command are still in it)",
            self.dir.display()
        );
    }
}

/// Removes the empty `imc-record-PID` directories under `parent` whose imc has gone (rmdir
/// removes only an empty cgroup, so a live one's is never touched).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}
