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
    use std::io::Write;
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
    let written = create_new(&tmp).and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()));
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

#[cfg(test)]
mod tests {
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
