//! bpf(2) calls that aya 0.14 does not wrap: storing and removing external perf fds in a
//! PERF_EVENT_ARRAY (aya only fills those arrays with perf buffers it creates itself), taking a
//! hash map's entries out, all in one call where the kernel can (lookup-and-delete batch) or
//! one at a time (lookup-and-delete: nothing the program adds between the read and the removal
//! is lost), and kernel.bpf_stats.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;
const BPF_ENABLE_STATS: libc::c_long = 32;
/// The kernel's "not supported" (ENOTSUPP, not in libc): what an older kernel's map answers a
/// batch command with.
const ENOTSUPP: i32 = 524;
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

/// `cmd` on the entry of `map` at `key` (none: the map's first), with `value` (none: no value):
/// true when the kernel did it, false when it has no such entry (ENOENT).
fn on_entry(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    key: Option<&[u8]>,
    value: Option<&mut [u8]>,
) -> io::Result<bool> {
    let attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: value.map_or(0, |v| v.as_mut_ptr() as u64),
        flags: 0,
    };
    absent_is_false(map_elem(cmd, &attr))
}

/// The key after `prev` in a map (the first with None) written into `next`; false when there
/// is none. `next` and `prev` are the map's key size.
pub fn map_next_key(map: BorrowedFd<'_>, prev: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    on_entry(BPF_MAP_GET_NEXT_KEY, map, prev, Some(next))
}

/// Takes `key`'s entry out of a map into `value` at once (BPF_MAP_LOOKUP_AND_DELETE_ELEM,
/// Linux 5.14 for hash maps); false when it has none. `key` and `value` are the map's sizes.
pub fn map_take(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    on_entry(BPF_MAP_LOOKUP_AND_DELETE_ELEM, map, Some(key), Some(value))
}

/// Reads `key`'s entry into `value`; false when the map has none.
pub fn map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    on_entry(BPF_MAP_LOOKUP_ELEM, map, Some(key), Some(value))
}

/// Removes `key`'s entry; false when the map had none.
pub fn map_delete(map: BorrowedFd<'_>, key: &[u8]) -> io::Result<bool> {
    on_entry(BPF_MAP_DELETE_ELEM, map, Some(key), None)
}

/// Takes every entry out of a hash map in as few calls as its size allows
/// (BPF_MAP_LOOKUP_AND_DELETE_BATCH, Linux 5.6: each bucket's entries read and removed under
/// its lock, so nothing the program adds meanwhile is lost), appending the keys to `keys` and
/// the values to `values` (`key_size` and `value_size` bytes each, `chunk` entries a call at
/// most). Returns how many were taken, or None where the kernel has no batch command for the
/// map (before any entry was taken: the caller takes them one at a time instead).
pub fn map_take_all(
    map: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    chunk: u32,
    keys: &mut Vec<u8>,
    values: &mut Vec<u8>,
) -> io::Result<Option<usize>> {
    #[repr(C)]
    struct BatchAttr {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    let chunk = chunk.max(1);
    // The hash map's batch token is a bucket index.
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut first = true;
    let mut taken = 0usize;
    loop {
        let (k0, v0) = (keys.len(), values.len());
        keys.resize(k0 + key_size * chunk as usize, 0);
        values.resize(v0 + value_size * chunk as usize, 0);
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &token_in as *const u32 as u64
            },
            out_batch: &mut token_out as *mut u32 as u64,
            keys: keys[k0..].as_mut_ptr() as u64,
            values: values[v0..].as_mut_ptr() as u64,
            count: chunk,
            map_fd: map.as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: attr is the bpf_attr of the batch commands; keys and values have room for
        // `count` entries of the map's key and value sizes, and the tokens live for the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_AND_DELETE_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>() as u32,
            )
        };
        let err = (r < 0).then(io::Error::last_os_error);
        // The kernel says how many it filled, on success and at the end (ENOENT) alike.
        let n = if err.is_none()
            || err.as_ref().and_then(io::Error::raw_os_error) == Some(libc::ENOENT)
        {
            attr.count.min(chunk) as usize
        } else {
            0
        };
        keys.truncate(k0 + key_size * n);
        values.truncate(v0 + value_size * n);
        taken += n;
        match err.as_ref().and_then(io::Error::raw_os_error) {
            None => {}
            Some(libc::ENOENT) => return Ok(Some(taken)),
            Some(_) if first && err.as_ref().is_some_and(unsupported) => return Ok(None),
            // What was taken is kept; the rest stays in the map for the next call.
            Some(_) if taken > 0 => return Ok(Some(taken)),
            Some(_) => return Err(err.unwrap_or_else(io::Error::last_os_error)),
        }
        first = false;
        token_in = token_out;
    }
}

/// Whether a map command failed because the kernel has no such command for the map.
pub fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP | libc::ENOSYS)
    )
}

fn absent_is_false(r: io::Result<()>) -> io::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
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

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;

/// A PERF_EVENT_ARRAY with more entries than there are CPUs, pinned on a private bpffs mount so
/// that the loader uses it by pin path: aya caps the PERF_EVENT_ARRAYs it creates at the CPU
/// count, and a small machine can have more package counters than CPUs. Dropping it removes the
/// pin and the mount; the map lives on in the loaded program's references.
pub struct PinnedPerfArray {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    mounted: bool,
}

impl PinnedPerfArray {
    /// Creates the array with `entries` entries and pins it as `name` on a bpffs mounted in a
    /// new directory under `parent` (needs CAP_SYS_ADMIN for the mount).
    pub fn create(parent: &std::path::Path, name: &str, entries: u32) -> io::Result<Self> {
        use std::ffi::CString;
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("imc-bpf-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let mut me = PinnedPerfArray {
            path: dir.join(name),
            dir,
            mounted: false,
        };
        let cdir = CString::new(me.dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
        // SAFETY: valid NUL-terminated strings; a null data pointer is allowed for bpffs.
        let r = unsafe {
            libc::mount(
                c"bpf".as_ptr(),
                cdir.as_ptr(),
                c"bpf".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        me.mounted = true;

        // bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries, map_flags,
        // then fields left zero.
        let mut attr = [0u32; 30];
        attr[0] = BPF_MAP_TYPE_PERF_EVENT_ARRAY;
        attr[1] = 4;
        attr[2] = 4;
        attr[3] = entries;
        // SAFETY: attr is a zeroed bpf_attr prefix of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_CREATE,
                attr.as_ptr(),
                std::mem::size_of_val(&attr) as u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new fd we own.
        let map = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
        let cpath = CString::new(me.path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        #[repr(C)]
        struct PinAttr {
            pathname: u64,
            bpf_fd: u32,
            file_flags: u32,
        }
        let pin = PinAttr {
            pathname: cpath.as_ptr() as u64,
            bpf_fd: map.as_raw_fd() as u32,
            file_flags: 0,
        };
        // SAFETY: pin is a valid bpf_attr prefix for BPF_OBJ_PIN; the path outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_OBJ_PIN,
                &pin as *const PinAttr,
                std::mem::size_of::<PinAttr>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(me)
    }

    /// Where the loader finds it (`EbpfLoader::map_pin_path`).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for PinnedPerfArray {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if self.mounted {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(self.dir.as_os_str().as_bytes()) {
                // SAFETY: a valid path; MNT_DETACH never blocks.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
