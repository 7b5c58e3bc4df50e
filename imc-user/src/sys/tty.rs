//! The terminal the live view reads keys from: whether it has input, or has gone away.
//!
//! crossterm's event reader loops without end once its terminal is gone (its read returns EOF
//! or EIO forever, and it retries), so `imc top` asks here first and never hands crossterm a
//! dead terminal.
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

/// What a wait on the terminal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Bytes to read (keys, a resize report).
    Ready,
    /// Nothing within the wait.
    Quiet,
    /// The terminal hung up, or its descriptor is in error: no key will ever come.
    Gone,
}

/// The terminal crossterm reads from: standard input when it is a terminal, else /dev/tty.
pub struct Tty {
    dev_tty: Option<File>,
}

impl Tty {
    pub fn open() -> io::Result<Tty> {
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
            return Ok(Tty { dev_tty: None });
        }
        let f = File::options().read(true).write(true).open("/dev/tty")?;
        Ok(Tty { dev_tty: Some(f) })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match &self.dev_tty {
            Some(f) => f.as_fd(),
            // SAFETY: standard input stays open for the process's life.
            None => unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) },
        }
    }

    /// Waits up to `timeout` for input (`poll(2)`).
    pub fn wait(&self, timeout: Duration) -> io::Result<Input> {
        wait_fd(self.fd(), timeout)
    }

    /// Reads what input is waiting (one `read(2)`, after [`Tty::wait`] said it is ready, so it
    /// does not block): the bytes a key reader left behind.
    pub fn read_waiting(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for buf.len() bytes; the descriptor is open for the Tty's life.
        let n = unsafe { libc::read(self.fd().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// `poll(2)` on one descriptor: hang-up and error beat readable, since a hung-up terminal
/// also reads as readable (its reads return EOF or EIO).
pub fn wait_fd(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Input> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: p is one valid pollfd, and the count passed is 1.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(Input::Quiet)
        } else {
            Err(e)
        };
    }
    if r == 0 {
        return Ok(Input::Quiet);
    }
    if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return Ok(Input::Gone);
    }
    Ok(if p.revents & libc::POLLIN != 0 {
        Input::Ready
    } else {
        Input::Quiet
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::{FromRawFd, OwnedFd};

    fn pipe() -> (OwnedFd, File) {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned here alone.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn input_silence_and_a_closed_writer_are_told_apart() {
        let (r, mut w) = pipe();
        let short = Duration::from_millis(10);
        assert_eq!(wait_fd(r.as_fd(), short).unwrap(), Input::Quiet);
        w.write_all(b"q").unwrap();
        assert_eq!(wait_fd(r.as_fd(), short).unwrap(), Input::Ready);
        drop(w);
        // Unread input and the hang-up: the hang-up wins, no key is waited for.
        assert_eq!(wait_fd(r.as_fd(), short).unwrap(), Input::Gone);
    }
}
