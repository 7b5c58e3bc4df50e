//! bpf(2) calls that aya 0.14 does not wrap: storing and removing external perf fds in a
//! PERF_EVENT_ARRAY (aya only fills those arrays with perf buffers it creates itself), and
//! kernel.bpf_stats.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_STATS_RUN_TIME: u32 = 0;

/// The syscall seam for the sampler's map updates.
pub trait BpfSys: Send + Sync {
    /// `BPF_MAP_UPDATE_ELEM(map, &index, &perf_fd, BPF_ANY)` on a PERF_EVENT_ARRAY.
    fn perf_array_set(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        perf_fd: BorrowedFd<'_>,
    ) -> io::Result<()>;

    /// `BPF_MAP_DELETE_ELEM(map, &index)` on a PERF_EVENT_ARRAY: the program then finds no
    /// counter at `index` (-ENOENT) instead of one it cannot read there.
    fn perf_array_clear(&self, map: BorrowedFd<'_>, index: u32) -> io::Result<()>;
}

#[derive(Clone, Copy, Debug, Default)]
pub struct RealBpf;

#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// One `bpf(cmd, attr)` call on a map element; `Ok` when the kernel returned 0.
fn map_elem(cmd: libc::c_long, attr: &MapElemAttr) -> io::Result<()> {
    // SAFETY: attr is a valid bpf_attr prefix for the map-element commands (map_fd, key, value,
    // flags); the caller's key and value pointers point at live values for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const MapElemAttr,
            std::mem::size_of::<MapElemAttr>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl BpfSys for RealBpf {
    fn perf_array_set(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        perf_fd: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let value: u32 = perf_fd.as_raw_fd() as u32;
        let attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            _pad: 0,
            key: &index as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: 0, // BPF_ANY
        };
        map_elem(BPF_MAP_UPDATE_ELEM, &attr)
    }

    fn perf_array_clear(&self, map: BorrowedFd<'_>, index: u32) -> io::Result<()> {
        let attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            _pad: 0,
            key: &index as *const u32 as u64,
            value: 0,
            flags: 0,
        };
        map_elem(BPF_MAP_DELETE_ELEM, &attr)
    }
}

/// Turns on per-program run-time statistics (run_time_ns, run_cnt in bpf_prog_info) for as long
/// as the returned fd is open, without touching the kernel.bpf_stats_enabled sysctl.
pub fn enable_run_time_stats() -> io::Result<std::os::fd::OwnedFd> {
    #[repr(C)]
    struct EnableStatsAttr {
        stats_type: u32,
    }
    let attr = EnableStatsAttr {
        stats_type: BPF_STATS_RUN_TIME,
    };
    // SAFETY: valid bpf_attr prefix for BPF_ENABLE_STATS.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_ENABLE_STATS,
            &attr as *const EnableStatsAttr,
            4u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// A read-only shared mapping of a BPF_F_MMAPABLE array map, unmapped on drop.
pub struct MappedMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through volatile/atomic reads.
unsafe impl Send for MappedMap {}

impl MappedMap {
    /// Maps the first `len` bytes of the map's values (offset 0), read-only.
    pub fn map(map: BorrowedFd<'_>, len: usize) -> io::Result<MappedMap> {
        // SAFETY: a fresh mapping of a valid fd; the kernel checks len against the map size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedMap {
            ptr: std::ptr::NonNull::new(p.cast()).expect("mmap returned non-null"),
            len,
        })
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what map() mapped.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
