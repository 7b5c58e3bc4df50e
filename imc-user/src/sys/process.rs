//! The process calls of `imc validate`'s workloads: dying with imc, their own name, fresh
//! anonymous pages, short-lived children, a process group killed at once, and a real-time
//! priority for the thread that reads the truth counters on time.
use std::io;

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the calling process is killed when the thread that
/// started it ends (imc killed by SIGKILL included). Async-signal-safe: callable between fork
/// and exec.
pub fn die_with_parent() -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes the signal number; the other arguments are unused.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    })
}

/// The parent's pid as the kernel sees it now (1 or a subreaper once the parent died).
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() as u32 }
}

/// `prctl(PR_SET_NAME)`: the calling thread's comm (15 bytes at most; longer is cut).
pub fn set_comm(name: &str) -> io::Result<()> {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: buf is NUL-terminated and lives across the call.
    check(unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) })
}

/// Maps `len` bytes of fresh anonymous memory, writes one byte per 4 KiB page and unmaps it:
/// one minor page fault per page. Uses only system calls, so a forked child may call it.
/// Never inlined, as [`crate::sys::thread::pin_to_cpu`]: a stack walked by frame pointers from
/// inside its mmap or munmap keeps its caller.
#[inline(never)]
pub fn touch_fresh_pages(len: usize) -> io::Result<()> {
    // SAFETY: a fresh private anonymous mapping, written within its length, then unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        for off in (0..len).step_by(4096) {
            (p as *mut u8).add(off).write_volatile(1);
        }
        libc::munmap(p, len);
    }
    Ok(())
}

/// Starts a child process that touches `len` bytes of fresh pages and exits at once (killed
/// with its parent should that die first), and waits for it: one short-lived process. The child
/// shares its parent's memory until it exits (`CLONE_VM | CLONE_VFORK`, the parent waiting
/// meanwhile), so no address space is copied for it or torn down after it: a forked child of a
/// large process spends some 0.4 ms doing so that its own inherited per-task counters do not
/// count, while the CPU's clock charged to whatever runs does (measured on a 2-vCPU VM,
/// kernel 6.18: 40 ms a second for 100 children a second; 75 µs a child without the copy).
pub fn short_lived_child(len: usize) -> io::Result<()> {
    extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
        let len = arg as usize;
        let _ = die_with_parent();
        i32::from(touch_fresh_pages(len).is_err())
    }
    // The child's own stack, 64 KiB: it runs `child` only, which makes system calls alone.
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: the stack grows down from the end of a live buffer the parent keeps until the
    // child has exited (CLONE_VFORK suspends the parent until then); `child` touches nothing of
    // the parent's but its own argument.
    let pid = unsafe {
        // The ABIs want the stack pointer 16-byte aligned.
        let end = stack.as_mut_ptr().add(stack.len());
        let top = end.sub(end as usize % 16) as *mut libc::c_void;
        libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            len as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child just started; status is valid to write.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `signal` to every process of group `pgid`.
pub fn kill_group(pgid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: kill with a negative pid signals a process group; no memory is passed.
    check(unsafe { libc::kill(-(pgid as libc::pid_t), signal) })
}

/// Whether a process `pid` exists (signal 0).
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 checks only existence and permission.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// The CPUs the calling thread may run on (`sched_getaffinity`).
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid cpu_set_t of the size passed.
    check(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) })?;
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: every index is within the set's bounds.
    Ok((0..bits)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// SCHED_FIFO at the lowest real-time priority for the calling thread, so that it wakes on
/// time beside busy workloads (refused without CAP_SYS_NICE).
pub fn realtime_thread() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: param is valid for the call; pid 0 is the calling thread.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })
}

static STOP_SIGNALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_SIGNALLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT only set a flag ([`stop_signalled`]) from now on, so
/// that a run interrupted before its loop listens still cleans up. A handler installed later
/// (the sampling loop's) takes over.
pub fn catch_stop_signals() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an atomic (which is
        // async-signal-safe); the old action is not asked for.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        check(r)?;
    }
    Ok(())
}

/// Whether SIGINT, SIGTERM, SIGHUP or SIGQUIT came since [`catch_stop_signals`].
pub fn stop_signalled() -> bool {
    STOP_SIGNALLED.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_lived_child_is_waited_for_and_the_group_of_none_is_refused() {
        short_lived_child(64 << 10).unwrap();
        assert!(alive(std::process::id()));
        // No process has group id 0x7fff_fff0: ESRCH, never a success.
        assert!(kill_group(0x7fff_fff0, 0).is_err());
        assert!(!allowed_cpus().unwrap().is_empty());
    }

    #[test]
    fn comm_is_cut_to_fifteen_bytes() {
        std::thread::spawn(|| {
            set_comm("imcv-a-very-long-name").unwrap();
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            assert_eq!(comm.trim_end(), "imcv-a-very-lon");
        })
        .join()
        .unwrap();
    }
}
