//! Read-only mapping of physical memory (/dev/mem) for the MCHBAR backend.
//!
//! Only the page(s) holding the counters are mapped, read-only, at the page-aligned physical
//! address as the file offset (which is what /dev/mem's mmap expects). `DevMem` is the seam:
//! tests map a regular file through the same code (`RealDevMem`), or substitute a fake to inject
//! the failures a locked-down kernel produces.
use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why mapping or reading physical memory failed.
#[derive(Debug, thiserror::Error)]
pub enum DevMemError {
    #[error("{}{}", path.display(), explain_open(source))]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: mmap of physical address {addr:#x} ({len} bytes) refused ({})",
        path.display(),
        explain_mmap(source)
    )]
    Map {
        path: PathBuf,
        addr: u64,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: is {size:#x} bytes long, too short to hold physical address {end:#x}",
        path.display()
    )]
    TooShort { path: PathBuf, size: u64, end: u64 },
    #[error(
        "physical address {addr:#x} ({width} bits) is outside the mapped window \
         {base:#x}..{end:#x}"
    )]
    OutsideWindow {
        addr: u64,
        width: u8,
        base: u64,
        end: u64,
    },
    #[error("physical address {addr:#x} is not aligned to its {width}-bit width")]
    Misaligned { addr: u64, width: u8 },
    #[error("unsupported counter width {width} bits at {addr:#x} (32 or 64)")]
    Width { addr: u64, width: u8 },
}

impl DevMemError {
    /// True when the kernel itself forbids the mapping (as opposed to a missing device or a bad
    /// address): the kernel's own PMU is then the way to go.
    pub fn is_forbidden(&self) -> bool {
        let errno = match self {
            DevMemError::Open { source, .. } | DevMemError::Map { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        };
        matches!(
            errno,
            Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EFAULT) | Some(libc::EINVAL)
        )
    }
}

/// What to do about `err` opening /dev/mem, in parentheses after the path; nothing where there
/// is nothing to say beyond the cause.
fn explain_open(err: &io::Error) -> String {
    let hint = match err.raw_os_error() {
        Some(libc::ENOENT) => {
            "no such device (kernel built without CONFIG_DEVMEM, or a container without /dev/mem); \
             use --backend intel-client-imc (the kernel's uncore_imc PMU)"
        }
        Some(libc::EPERM) => {
            "the kernel forbids /dev/mem (kernel lockdown, e.g. under Secure Boot); \
             use --backend intel-client-imc (the kernel's uncore_imc PMU)"
        }
        Some(libc::EACCES) => {
            "permission denied: needs root (CAP_SYS_RAWIO); or use --backend intel-client-imc"
        }
        _ => "",
    };
    if hint.is_empty() {
        String::new()
    } else {
        format!(" ({hint})")
    }
}

fn explain_mmap(err: &io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EFAULT) | Some(libc::EINVAL) | Some(libc::EACCES) => {
            "the kernel forbids mapping this range: CONFIG_STRICT_DEVMEM/IO_STRICT_DEVMEM, kernel \
             lockdown or Secure Boot; use --backend intel-client-imc (the kernel's uncore_imc PMU)"
        }
        _ => "mapping /dev/mem failed; --backend intel-client-imc uses the kernel's PMU instead",
    }
}

/// A mapped window of physical memory from which counters are read.
pub trait Region: Send + fmt::Debug {
    /// Physical address of the first mapped byte.
    fn base(&self) -> u64;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads the naturally aligned 32- or 64-bit word at physical address `addr`.
    fn read(&self, addr: u64, width: u8) -> Result<u64, DevMemError>;
}

/// The seam for /dev/mem.
pub trait DevMem: Send + Sync {
    /// Maps `len` bytes at page-aligned physical address `base` of `path`, read-only.
    fn map_readonly(
        &self,
        path: &Path,
        base: u64,
        len: usize,
    ) -> Result<Box<dyn Region>, DevMemError>;
}

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// The page-aligned windows (base, len) covering the given counters: one per run of adjacent
/// pages, so nothing beyond the pages that hold counters is mapped.
pub fn windows(counters: &[(u64, u8)], page: u64) -> Vec<(u64, usize)> {
    let mut pages: Vec<u64> = Vec::new();
    for &(addr, width) in counters {
        let last = addr.saturating_add(u64::from(width / 8).max(1) - 1);
        let mut p = addr - addr % page;
        while p <= last {
            pages.push(p);
            p = match p.checked_add(page) {
                Some(n) => n,
                None => break,
            };
        }
    }
    pages.sort_unstable();
    pages.dedup();
    let mut out: Vec<(u64, usize)> = Vec::new();
    for p in pages {
        match out.last_mut() {
            Some((base, len)) if *base + *len as u64 == p => *len += page as usize,
            _ => out.push((p, page as usize)),
        }
    }
    out
}

/// Checks that `addr` (width bits) lies inside `[base, base+len)` and is aligned; returns its
/// byte offset in the window.
pub fn offset_in_window(addr: u64, width: u8, base: u64, len: usize) -> Result<usize, DevMemError> {
    if width != 32 && width != 64 {
        return Err(DevMemError::Width { addr, width });
    }
    let bytes = u64::from(width / 8);
    let end = base + len as u64;
    if addr < base || addr.checked_add(bytes).is_none_or(|e| e > end) {
        return Err(DevMemError::OutsideWindow {
            addr,
            width,
            base,
            end,
        });
    }
    if !addr.is_multiple_of(bytes) {
        return Err(DevMemError::Misaligned { addr, width });
    }
    Ok((addr - base) as usize)
}

/// mmap(2) of the device (or a regular file standing in for it).
#[derive(Clone, Copy, Debug, Default)]
pub struct RealDevMem;

impl DevMem for RealDevMem {
    fn map_readonly(
        &self,
        path: &Path,
        base: u64,
        len: usize,
    ) -> Result<Box<dyn Region>, DevMemError> {
        // O_NONBLOCK: a FIFO given as --devmem fails at mmap instead of hanging the open.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| DevMemError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        // A regular file (the test stand-in) raises SIGBUS when a mapped page lies past its end;
        // refuse that up front instead. Devices report size 0 and are not checked.
        if let Ok(meta) = file.metadata()
            && meta.is_file()
            && meta.len() < base + len as u64
        {
            return Err(DevMemError::TooShort {
                path: path.to_path_buf(),
                size: meta.len(),
                end: base + len as u64,
            });
        }
        let map_err = |source| DevMemError::Map {
            path: path.to_path_buf(),
            addr: base,
            len,
            source,
        };
        let offset = libc::off_t::try_from(base)
            .map_err(|_| map_err(io::Error::from_raw_os_error(libc::EINVAL)))?;
        // SAFETY: a fresh read-only shared mapping of a file we opened; the kernel validates the
        // range. The mapping is only ever read through volatile loads inside its bounds.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(map_err(io::Error::last_os_error()));
        }
        // The mapping stays valid after the fd is closed.
        Ok(Box::new(MmapRegion {
            ptr: ptr.cast::<u8>(),
            len,
            base,
        }))
    }
}

/// A live read-only mapping; unmapped on drop.
#[derive(Debug)]
pub struct MmapRegion {
    ptr: *const u8,
    len: usize,
    base: u64,
}

// SAFETY: the mapping is read-only and only read through volatile loads; sharing the pointer
// across threads is as safe as sharing a &[u8] of device memory.
unsafe impl Send for MmapRegion {}

impl Region for MmapRegion {
    fn base(&self) -> u64 {
        self.base
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, addr: u64, width: u8) -> Result<u64, DevMemError> {
        let off = offset_in_window(addr, width, self.base, self.len)?;
        // SAFETY: off is inside the mapping and naturally aligned (checked above); volatile
        // because the device (or the test's writer) changes the value behind our back, and
        // MMIO registers must be read with a single access of their width.
        unsafe {
            let p = self.ptr.add(off);
            Ok(match width {
                32 => u64::from(std::ptr::read_volatile(p.cast::<u32>())),
                _ => std::ptr::read_volatile(p.cast::<u64>()),
            })
        }
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the mapping past self.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_only_counter_pages() {
        let w = windows(&[(0xfed1_5050, 32), (0xfed1_5054, 32)], 4096);
        assert_eq!(w, vec![(0xfed1_5000, 4096)]);
        let w = windows(&[(0x1ffc, 64), (0x9000, 32)], 4096);
        assert_eq!(w, vec![(0x1000, 8192), (0x9000, 4096)]);
    }

    #[test]
    fn window_bounds_and_alignment() {
        assert_eq!(offset_in_window(0x5050, 32, 0x5000, 4096).unwrap(), 0x50);
        assert!(matches!(
            offset_in_window(0x6000, 32, 0x5000, 4096),
            Err(DevMemError::OutsideWindow { .. })
        ));
        assert!(matches!(
            offset_in_window(0x5ffc, 64, 0x5000, 4096),
            Err(DevMemError::OutsideWindow { .. })
        ));
        assert!(matches!(
            offset_in_window(0x5052, 32, 0x5000, 4096),
            Err(DevMemError::Misaligned { .. })
        ));
        assert!(matches!(
            offset_in_window(0x5050, 16, 0x5000, 4096),
            Err(DevMemError::Width { .. })
        ));
    }

    #[test]
    fn missing_device_names_the_alternative() {
        let e = RealDevMem
            .map_readonly(Path::new("/nonexistent/mem"), 0, 4096)
            .unwrap_err();
        let msg = crate::text::error_line(&e);
        assert!(
            msg.contains("/nonexistent/mem") && msg.contains("intel-client-imc"),
            "{msg}"
        );
    }
}
