//! Anonymous shared memory (memfd) that stands in for a BPF_F_MMAPABLE map: the reader maps it
//! with [`super::bpf::MappedMap::map`] exactly as it maps the kernel's rings, and the writer
//! fills it with `pwrite`, without a mapping of its own (so, as with the kernel's rings, only
//! the reader's mapping is in the process's resident memory). Used by the replay benchmark.
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub struct SharedMemory {
    fd: OwnedFd,
    len: usize,
}

impl SharedMemory {
    /// `len` zero bytes, named `name` in /proc/self/fd.
    pub fn new(name: &str, len: usize) -> io::Result<SharedMemory> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in memfd name"))?;
        // SAFETY: a valid C string; no flags that need more.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd too large"))?;
        // SAFETY: a valid fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMemory { fd, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `bytes` at `offset` (within the length given at creation).
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "write past the end of the shared memory",
            ));
        }
        let mut done = 0;
        while done < bytes.len() {
            let rest = &bytes[done..];
            // SAFETY: rest is valid for reading rest.len() bytes; the fd is ours.
            let n = unsafe {
                libc::pwrite(
                    self.fd.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    (offset + done) as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwrite wrote 0"));
            }
            done += n as usize;
        }
        Ok(())
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::bpf::MappedMap;

    #[test]
    fn a_mapping_sees_what_is_written() {
        let m = SharedMemory::new("imc-test", 8192).unwrap();
        let view = MappedMap::map(m.as_fd(), 8192).unwrap();
        m.write_at(4090, &[1, 2, 3, 4, 5]).unwrap();
        // SAFETY: within the 8192 mapped bytes.
        let got: Vec<u8> = (4090..4095)
            .map(|i| unsafe { *view.as_ptr().add(i) })
            .collect();
        assert_eq!(got, [1, 2, 3, 4, 5]);
        assert!(m.write_at(8190, &[0; 3]).is_err());
    }
}
