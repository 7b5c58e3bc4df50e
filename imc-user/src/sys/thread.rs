//! Where and how precisely the calling thread runs: CPU affinity and timer slack.
//!
//! Used by the local readers of kernel-timed `imc stat`, which must read a counter group on the
//! group's own CPU (a local read, not an IPI) and wake close to their deadline.
use std::io;

/// Pins the calling thread to `cpu` alone (`sched_setaffinity(0, {cpu})`). Fails with EINVAL
/// when the CPU is offline or outside this process's cpuset.
///
/// Never inlined: libc's wrapper sets up no frame of its own, so a user stack walked by frame
/// pointers from inside the system call starts at this function's frame. With this function
/// inlined, the walk would skip its caller (a context switch inside the call, where imc takes
/// the stack of the slice it charges, would name the caller's caller).
#[inline(never)]
pub fn pin_to_cpu(cpu: u32) -> io::Result<()> {
    let cpu = cpu as usize;
    // SAFETY: cpu_set_t is plain data, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu is within the set's bounds (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs a thread of its own on each of `cpus` in turn (pinned to one, then the next), so each
/// of them switches to it: whatever the kernel does at a context switch happens on every CPU,
/// the idle ones included, by the time this returns. A CPU it cannot run on (offline, outside
/// this process's cpuset) is passed over; the count of those is returned.
pub fn visit_cpus(cpus: &[u32]) -> io::Result<usize> {
    let cpus = cpus.to_vec();
    std::thread::Builder::new()
        .name("imc-visit".into())
        .spawn(move || cpus.iter().filter(|&&c| pin_to_cpu(c).is_err()).count())?
        .join()
        .map_err(|_| io::Error::other("the visiting thread panicked"))
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> io::Result<u32> {
    // SAFETY: sched_getcpu takes no arguments.
    let r = unsafe { libc::sched_getcpu() };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

/// Blocks every blockable signal in the calling thread, so process-directed signals (Ctrl-C,
/// SIGCHLD of `imc stat -- CMD`) go to the threads that act on them.
pub fn block_signals() -> io::Result<()> {
    // SAFETY: set is a valid sigset_t, filled before use; the old set is not asked for.
    let r = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    // pthread_sigmask returns the error number rather than setting errno.
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`): by default the kernel may run a
/// sleeper's timer up to 50 µs late to batch wake-ups, a twentieth of a 1 ms interval.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes the slack as an unsigned long; the other arguments are
    // unused.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// In a child between fork and exec: SIGKILL when the thread that forked it (imc's main thread,
/// `parent`) ends, however it ends (`PR_SET_PDEATHSIG`). A parent that died before this call is
/// seen by the parent id having changed (the child was re-parented): ESRCH then, and the child
/// does not exec. Only async-signal-safe calls, as a `pre_exec` hook requires.
pub fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes the signal number; the other arguments are unused.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions and cannot fail.
    if unsafe { libc::getppid() } as u32 != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_its_cpu() {
        let cpu = std::thread::spawn(|| {
            pin_to_cpu(0)?;
            std::thread::yield_now();
            current_cpu()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(cpu, 0);
    }

    #[test]
    fn a_visit_passes_over_the_cpus_it_cannot_run_on() {
        assert_eq!(visit_cpus(&[0]).unwrap(), 0);
        assert_eq!(visit_cpus(&[0, 100_000]).unwrap(), 1);
        assert_eq!(visit_cpus(&[]).unwrap(), 0);
    }

    #[test]
    fn pinning_to_a_cpu_that_does_not_exist_fails() {
        let e = std::thread::spawn(|| pin_to_cpu(100_000))
            .join()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = std::thread::spawn(|| pin_to_cpu(1000)).join().unwrap();
        assert!(e.is_err(), "CPU 1000 does not exist on a test machine");
    }

    #[test]
    fn a_thread_that_blocks_signals_does_not_take_them() {
        let blocked = std::thread::spawn(|| {
            block_signals()?;
            // SAFETY: a zeroed sigset_t is valid to be filled by pthread_sigmask.
            let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: a null new set only reads the current mask into `now`.
            let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
            assert_eq!(r, 0);
            // SAFETY: now is a valid, initialised sigset_t.
            Ok::<_, io::Error>(unsafe {
                libc::sigismember(&now, libc::SIGINT) == 1
                    && libc::sigismember(&now, libc::SIGCHLD) == 1
            })
        })
        .join()
        .unwrap()
        .unwrap();
        assert!(blocked);
    }

    #[test]
    fn timer_slack_can_be_set() {
        std::thread::spawn(|| set_timer_slack_ns(1_000))
            .join()
            .unwrap()
            .unwrap();
    }
}
