//! Resource limits: the open-file limit (RLIMIT_NOFILE), whose soft limit `imc serve` raises
//! to the hard one at start and keeps its connections below, and the address-space limit
//! (RLIMIT_AS, `ulimit -v`), which explains a child that could not allocate.
use std::io;

/// The (soft, hard) limits of `resource` for this process.
fn limits(resource: libc::__rlimit_resource_t) -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit to write to.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r.rlim_cur, r.rlim_max))
}

/// The (soft, hard) open-file limits of this process.
pub fn nofile() -> io::Result<(u64, u64)> {
    limits(libc::RLIMIT_NOFILE)
}

/// The soft address-space limit in bytes (`ulimit -v`), None where there is none.
pub fn address_space() -> Option<u64> {
    let (soft, _) = limits(libc::RLIMIT_AS).ok()?;
    (soft != libc::RLIM_INFINITY).then_some(soft)
}

/// Raises the soft open-file limit to the hard limit (an unprivileged process may), and returns
/// the soft limit in force afterwards.
pub fn raise_nofile() -> io::Result<u64> {
    let (soft, hard) = nofile()?;
    if soft >= hard {
        return Ok(soft);
    }
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: r is a valid rlimit; raising the soft limit up to the hard one is always allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(hard)
}

/// File descriptors this process has open now (entries of /proc/self/fd), if it can tell.
pub fn open_fds() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    // One of them is the directory being read.
    Some((dir.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_leaves_soft_equal_to_hard() {
        let (_, hard) = nofile().unwrap();
        assert_eq!(raise_nofile().unwrap(), hard);
        assert_eq!(nofile().unwrap(), (hard, hard));
        assert!(open_fds().unwrap() >= 3);
    }
}
