//! Opening the files imc reads and writes by path (sysfs and proc files under `--root`,
//! recordings), so that a hostile or mistaken path cannot hang or redirect it:
//! - reads open with `O_NONBLOCK` and then insist on a regular file, so a FIFO planted where a
//!   sysfs file or a recording should be is an error at once, never a read that waits forever
//!   (and a directory or a device such as `/dev/zero` is refused before it is read);
//! - small text files are read with a size cap;
//! - files imc creates are created new (`O_EXCL`, which never follows a symlink), so a symlink
//!   planted by another user cannot make imc truncate the file it points to.
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a non-regular file is, in words, for messages.
fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// The error for a path that is there but not a regular file: `InvalidInput`, with the kind of
/// file in the message (`is a FIFO, not a regular file`).
pub fn not_regular(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file"),
    )
}

/// True for errors that say the path itself is wrong (missing, a directory, a FIFO, a symlink
/// loop, a name too long), as opposed to a failure of the system (permission, I/O): the first
/// kind is bad input (exit 2) on the command line.
pub fn is_bad_path(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput | io::ErrorKind::IsADirectory
    ) || matches!(
        e.raw_os_error(),
        Some(libc::ELOOP | libc::ENOTDIR | libc::ENAMETOOLONG | libc::EISDIR)
    )
}

/// True where the user is to fix the path: [`is_bad_path`], or a permission they lack on it (a
/// recording they may not read, a directory they may not write in, a file system mounted
/// read-only). Bad input (exit 2) for a path given on the command line, whichever step meets
/// it.
pub fn is_path_to_fix(e: &io::Error) -> bool {
    is_bad_path(e)
        || e.kind() == io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(libc::EROFS)
}

/// Whether descriptor `fd` is open (`fcntl(F_GETFD)`). Async-signal-safe, and safe before the
/// Rust runtime has started (it only reads the descriptor table).
pub fn is_open(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: F_GETFD on any number only reads the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Whether `program` names a file exec could start: a path (it has a `/`) to a regular file, or
/// a name found as one in a directory of `path` (`$PATH`; an empty entry is the current
/// directory), as execvp(3) looks. Whether it may be executed is left to exec itself.
pub fn program_exists(program: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if program.is_empty() {
        return false;
    }
    if program.as_bytes().contains(&b'/') {
        return Path::new(program).is_file();
    }
    // execvp's default search path where PATH is unset (glibc: /bin:/usr/bin).
    let path = path.unwrap_or(std::ffi::OsStr::new("/bin:/usr/bin"));
    std::env::split_paths(path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir.as_path()
        };
        dir.join(program).is_file()
    })
}

/// Opens `path` for reading without blocking on a FIFO, and refuses anything but a regular
/// file (symlinks to one are followed, as sysfs needs).
pub fn open_regular(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let ft = f.metadata()?.file_type();
    if !ft.is_file() {
        return Err(not_regular(kind_of(&ft)));
    }
    Ok(f)
}

/// Reads at most `cap` bytes of a regular file (sysfs and proc files are small; a bigger one is
/// not what it claims to be, and its tail is not read).
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    let mut buf = Vec::new();
    f.take(cap).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Creates `path`, which must not exist (not even as a dangling symlink): `O_CREAT | O_EXCL`
/// never follows a symlink. Mode 0644 before the umask.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
}

/// Writes `bytes` as `path`, replacing a file (or a symlink: the link itself, never where it
/// points) that is there: a new file beside it, renamed over it once complete, so a reader never
/// sees half of it. A directory, FIFO or device at `path` is refused, not written through.
pub fn replace_with(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_by(path, |f| f.write_all(bytes))
}

/// [`replace_with`], the new file's bytes written by `write` as they come (buffered), so an
/// output larger than memory allows is never held whole.
pub fn replace_by(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> io::Result<()>,
) -> io::Result<()> {
    match what_is_there(path)? {
        None | Some("a file") | Some("a symlink") => {}
        Some(kind) => return Err(not_regular(kind)),
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = create_new(&tmp).and_then(|f| {
        let mut out = io::BufWriter::new(f);
        write(&mut out)?;
        let f = out.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()
    });
    match written.and_then(|_| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// What is at `path` without following a final symlink: None when nothing is.
pub fn what_is_there(path: &Path) -> io::Result<Option<&'static str>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Ok(Some("a symlink")),
        Ok(m) if m.is_file() => Ok(Some("a file")),
        Ok(m) => Ok(Some(kind_of(&m.file_type()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The lock a writer holds on `FILE.lock` beside the file it writes, for as long as it writes
/// it, so that a second writer of the same file is refused at once instead of racing the first
/// (one of them silently losing its data). A POSIX record lock: the kernel drops it when the
/// holder exits however it exits, and `F_GETLK` says who holds it. The lock file is removed
/// when the lock is dropped.
#[derive(Debug)]
pub struct WriteLock {
    path: std::path::PathBuf,
    _file: File,
}

/// Why a [`WriteLock`] was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it (its pid; 0 when it runs in another PID namespace).
    Held { pid: i32, lock: std::path::PathBuf },
    /// The lock file could not be created or locked (the directory is missing, read-only, not
    /// ours, or a symlink was planted at the lock's name).
    Io {
        lock: std::path::PathBuf,
        source: io::Error,
    },
}

/// `FILE.lock`, the lock file of `path`.
pub fn lock_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".lock");
    name.into()
}

fn record_lock(kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is plain old data; all-zero is a valid value (whole file from offset 0).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l
}

impl WriteLock {
    /// Takes the lock of `path` without waiting. Created new or reused, never through a
    /// symlink; a lock file that another holder removed (and perhaps another created again)
    /// between our open and our lock is not the one at the path, so that case tries again.
    pub fn take(path: &Path) -> Result<WriteLock, LockError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let lock = lock_path(path);
        let io_err = |source| LockError::Io {
            lock: lock.clone(),
            source,
        };
        for _ in 0..16 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .mode(0o644)
                .open(&lock)
                .map_err(io_err)?;
            let meta = file.metadata().map_err(io_err)?;
            if !meta.is_file() {
                return Err(io_err(not_regular(kind_of(&meta.file_type()))));
            }
            let fd = file.as_raw_fd();
            let want = record_lock(libc::F_WRLCK as libc::c_short);
            // SAFETY: fcntl on an fd we own, with a valid flock.
            if unsafe { libc::fcntl(fd, libc::F_SETLK, &want) } != 0 {
                let e = io::Error::last_os_error();
                if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
                    return Err(io_err(e));
                }
                let mut who = record_lock(libc::F_WRLCK as libc::c_short);
                // SAFETY: as above; F_GETLK fills `who` with the conflicting lock.
                if unsafe { libc::fcntl(fd, libc::F_GETLK, &mut who) } != 0 {
                    return Err(io_err(io::Error::last_os_error()));
                }
                if i32::from(who.l_type) == libc::F_UNLCK {
                    // Released between the two calls: try again.
                    continue;
                }
                return Err(LockError::Held {
                    pid: who.l_pid,
                    lock: lock.clone(),
                });
            }
            match std::fs::symlink_metadata(&lock) {
                Ok(m) if m.dev() == meta.dev() && m.ino() == meta.ino() => {
                    return Ok(WriteLock {
                        path: lock,
                        _file: file,
                    });
                }
                // Removed (or replaced) by the holder we just outlived: take the new one.
                _ => continue,
            }
        }
        Err(io_err(io::Error::other("the lock file keeps changing")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        // Removed while still held, so nobody locks a file that is no longer at the path
        // (who opened it before sees it gone and tries again).
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        use std::ffi::OsStr;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("prog"), "").unwrap();
        std::fs::create_dir(dir.path().join("adir")).unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert!(program_exists(OsStr::new("prog"), Some(&path)));
        assert!(
            !program_exists(OsStr::new("adir"), Some(&path)),
            "a directory"
        );
        assert!(!program_exists(OsStr::new("nope"), Some(&path)));
        assert!(!program_exists(OsStr::new(""), Some(&path)));
        let full = dir.path().join("prog");
        assert!(program_exists(full.as_os_str(), Some(OsStr::new(""))));
        assert!(!program_exists(
            OsStr::new("./no-such-program"),
            Some(&path)
        ));
        assert!(
            program_exists(OsStr::new("sh"), None),
            "the default search path"
        );
    }

    #[test]
    fn replace_with_writes_a_new_file_and_never_through_a_link_or_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let out = dir.path().join("plot.svg");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        replace_with(&out, b"<svg/>").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&out).unwrap().is_file());
        assert_eq!(std::fs::read(&out).unwrap(), b"<svg/>");
        replace_with(&out, b"again").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"again");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(replace_with(&fifo, b"x").is_err());
        assert!(replace_with(dir.path(), b"x").is_err());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            3,
            "no temporary left"
        );
    }

    use super::*;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_at_once_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("type");
        mkfifo(&fifo);
        let t = Instant::now();
        let e = read_capped(&fifo, 64).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        assert!(is_bad_path(&e));
        let e = open_regular(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        assert!(is_bad_path(&e));
        let e = open_regular(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    #[test]
    fn the_lock_file_lives_as_long_as_the_lock_and_is_never_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.imc");
        let held = WriteLock::take(&out).unwrap();
        assert!(held.path().is_file());
        // (Another process is refused: a POSIX lock does not conflict within one process, so
        // tests/hostile.rs holds it here while imc tries.)
        drop(held);
        assert!(!lock_path(&out).exists());
        let again = WriteLock::take(&out).unwrap();
        drop(again);
        // A symlink at the lock's name is not followed.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, lock_path(&out)).unwrap();
        assert!(matches!(WriteLock::take(&out), Err(LockError::Io { .. })));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; 10_000]).unwrap();
        assert_eq!(read_capped(&f, 100).unwrap().len(), 100);
        assert_eq!(read_capped(&f, 1 << 20).unwrap().len(), 10_000);
    }

    #[test]
    fn create_new_never_follows_a_symlink_nor_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("out.imc");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(what_is_there(&link).unwrap(), Some("a symlink"));
        // A dangling symlink is not followed either.
        let dangling = dir.path().join("d.imc");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
        assert!(create_new(&victim).is_err());
        let fresh = dir.path().join("fresh");
        assert_eq!(what_is_there(&fresh).unwrap(), None);
        create_new(&fresh).unwrap();
        assert_eq!(what_is_there(&fresh).unwrap(), Some("a file"));
        let e = std::fs::File::open(dir.path().join("loop")).err();
        assert!(e.is_some());
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        let e = open_regular(&dir.path().join("loop")).unwrap_err();
        assert!(is_bad_path(&e), "{e}");
    }
}
