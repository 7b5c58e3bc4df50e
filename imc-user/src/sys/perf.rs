//! `perf_event_open(2)`, its ioctls and `read(2)` of counter fds.
//!
//! `PerfSys` is the seam: the real implementation calls the kernel; tests substitute a fake that
//! records what was opened (type, config, cpu, pid) and returns scripted counts.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `struct perf_event_attr`, PERF_ATTR_SIZE_VER8 (136 bytes, Linux 6.3+; older kernels accept
/// it as long as the fields they do not know are zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    /// sample_period or sample_freq (with `FLAG_FREQ`).
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield word: `FLAG_*`.
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
    pub config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_INHERIT: u64 = 1 << 1;
pub const FLAG_EXCLUDE_USER: u64 = 1 << 4;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub const FLAG_FREQ: u64 = 1 << 10;
pub const FLAG_WATERMARK: u64 = 1 << 14;
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;

pub const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub const FORMAT_ID: u64 = 1 << 2;
pub const FORMAT_GROUP: u64 = 1 << 3;

pub const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_TRACEPOINT: u32 = 2;
pub const TYPE_HW_CACHE: u32 = 3;
pub const TYPE_RAW: u32 = 4;
pub const TYPE_BREAKPOINT: u32 = 5;

pub const SW_CPU_CLOCK: u64 = 0;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// The ioctls imc issues on counter fds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfIoctl {
    Enable,
    Disable,
    Reset,
    /// PERF_EVENT_IOC_PERIOD: a new sample period; also lifts a throttle at once.
    Period(u64),
    /// PERF_EVENT_IOC_SET_BPF: run this BPF program (fd) at each overflow.
    SetBpf(i32),
}

impl PerfIoctl {
    fn request(self) -> libc::c_ulong {
        // _IO('$', n), and _IOW('$', 4, u64) for the period
        match self {
            PerfIoctl::Enable => 0x2400,
            PerfIoctl::Disable => 0x2401,
            PerfIoctl::Reset => 0x2403,
            PerfIoctl::Period(_) => 0x4008_2404,
            PerfIoctl::SetBpf(_) => 0x4004_2408,
        }
    }
}

impl PerfEventAttr {
    /// A counting (non-sampling) event with value, time enabled and time running readable.
    pub fn counting(type_: u32, config: u64) -> Self {
        PerfEventAttr {
            type_,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            read_format: FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING,
            ..Default::default()
        }
    }
}

impl PerfEventAttr {
    /// A counting event with every encoding word and the user/kernel exclusions set: what both
    /// `imc stat` and the sampler open.
    pub fn counter(type_: u32, config: [u64; 3], exclude_user: bool, exclude_kernel: bool) -> Self {
        let mut attr = PerfEventAttr::counting(type_, config[0]);
        attr.config1 = config[1];
        attr.config2 = config[2];
        if exclude_user {
            attr.flags |= FLAG_EXCLUDE_USER;
        }
        if exclude_kernel {
            attr.flags |= FLAG_EXCLUDE_KERNEL;
        }
        attr
    }
}

/// One counter reading: `{ value, time_enabled, time_running }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterValue {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

impl CounterValue {
    /// The value scaled for multiplexing (`value × enabled / running`), and whether scaling was
    /// needed. A counter that never ran reads as 0.
    pub fn scaled(&self) -> (f64, bool) {
        if self.running == 0 {
            return (0.0, self.enabled != 0);
        }
        if self.running >= self.enabled {
            return (self.value as f64, false);
        }
        (
            self.value as f64 * self.enabled as f64 / self.running as f64,
            true,
        )
    }
}

/// The syscall seam.
pub trait PerfSys: Send + Sync {
    /// `perf_event_open(attr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC)`.
    fn open(
        &self,
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd>;
    /// `read(fd, buf)`.
    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize>;
    fn ioctl(&self, fd: BorrowedFd<'_>, op: PerfIoctl) -> io::Result<()>;
    /// Maps the ring buffer of a sampling event (`data_pages` a power of two). Fakes that do not
    /// implement it make callers fall back to reading counters with `read`.
    fn map_ring(&self, _fd: BorrowedFd<'_>, _data_pages: usize) -> io::Result<Box<dyn RingBuffer>> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    /// Whether `map_ring` works, asked before opening anything for kernel-timed sampling.
    fn supports_rings(&self) -> bool {
        false
    }
}

/// A perf ring buffer the kernel writes records into.
pub trait RingBuffer: Send {
    /// Calls `f(type, payload)` for every record written since the last call (the payload is
    /// what follows the 8-byte header), then hands the space back to the kernel.
    fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8]));
}

pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const RECORD_LOST: u32 = 2;
pub const RECORD_THROTTLE: u32 = 5;
pub const RECORD_UNTHROTTLE: u32 = 6;
pub const RECORD_SAMPLE: u32 = 9;

/// The mmap'd ring of a sampling event: one metadata page, then `data_pages` of data.
pub struct MmapRing {
    base: *mut u8,
    len: usize,
    data_size: u64,
    /// Records are copied out here so a record that wraps the ring's end reads contiguously;
    /// preallocated, so draining does not allocate.
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value and only accessed through &mut self.
unsafe impl Send for MmapRing {}

/// Offsets of data_head/data_tail in struct perf_event_mmap_page.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

impl RingBuffer for MmapRing {
    fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
        use std::sync::atomic::{AtomicU64, Ordering};
        // SAFETY: base points at the metadata page; data_head/data_tail are naturally aligned
        // u64 fields that the kernel and we access atomically, as the perf ABI prescribes.
        let (head_p, tail_p) = unsafe {
            (
                &*(self.base.add(DATA_HEAD) as *const AtomicU64),
                &*(self.base.add(DATA_TAIL) as *const AtomicU64),
            )
        };
        let head = head_p.load(Ordering::Acquire);
        let mut tail = tail_p.load(Ordering::Relaxed);
        let page = self.len as u64 - self.data_size;
        // SAFETY: the data area follows the metadata page inside the mapping.
        let data = unsafe { self.base.add(page as usize) };
        while head.wrapping_sub(tail) >= 8 {
            let copy = |dst: &mut [u8], from: u64| {
                for (i, b) in dst.iter_mut().enumerate() {
                    let off = (from + i as u64) % self.data_size;
                    // SAFETY: off < data_size, inside the data area.
                    *b = unsafe { *data.add(off as usize) };
                }
            };
            let mut hdr = [0u8; 8];
            copy(&mut hdr, tail);
            let kind = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let size = u64::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
            if size < 8 || head.wrapping_sub(tail) < size {
                // A torn or corrupt record: drop everything up to head rather than loop.
                tail = head;
                break;
            }
            let n = (size - 8) as usize;
            if self.scratch.len() < n {
                self.scratch.resize(n, 0);
            }
            let mut buf = std::mem::take(&mut self.scratch);
            copy(&mut buf[..n], tail + 8);
            f(kind, &buf[..n]);
            self.scratch = buf;
            tail = tail.wrapping_add(size);
        }
        tail_p.store(tail, Ordering::Release);
    }
}

impl Drop for MmapRing {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// The kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealPerf;

impl PerfSys for RealPerf {
    fn open(
        &self,
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd> {
        let group_fd = group.map_or(-1, |g| g.as_raw_fd());
        // SAFETY: attr points at a valid, fully initialised perf_event_attr of the size it states.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const PerfEventAttr,
                pid,
                cpu,
                group_fd,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn ioctl(&self, fd: BorrowedFd<'_>, op: PerfIoctl) -> io::Result<()> {
        let r = match op {
            PerfIoctl::Period(period) => {
                // SAFETY: PERF_EVENT_IOC_PERIOD reads one u64 through the pointer, which lives
                // across the call.
                unsafe { libc::ioctl(fd.as_raw_fd(), op.request() as _, &period as *const u64) }
            }
            // SAFETY: PERF_EVENT_IOC_SET_BPF takes the program's fd as its integer argument.
            PerfIoctl::SetBpf(prog) => unsafe {
                libc::ioctl(fd.as_raw_fd(), op.request() as _, prog as libc::c_ulong)
            },
            // SAFETY: the other perf ioctls used here take an integer argument (0).
            _ => unsafe { libc::ioctl(fd.as_raw_fd(), op.request() as _, 0) },
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn supports_rings(&self) -> bool {
        true
    }

    fn map_ring(&self, fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<Box<dyn RingBuffer>> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = crate::sys::devmem::page_size() as usize;
        let len = (data_pages + 1) * page;
        // SAFETY: a fresh shared mapping of a perf fd; the kernel validates the size. Writable
        // because data_tail is how the reader hands space back.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Box::new(MmapRing {
            base: p.cast(),
            len,
            data_size: (data_pages * page) as u64,
            scratch: vec![0; 256],
        }))
    }
}

/// Reads a single counter opened with `PerfEventAttr::counting` (read_format enabled|running).
pub fn read_counter(sys: &dyn PerfSys, fd: BorrowedFd<'_>) -> io::Result<CounterValue> {
    let mut buf = [0u8; 24];
    let n = sys.read(fd, &mut buf)?;
    if n != buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read of a perf counter: {n} of 24 bytes"),
        ));
    }
    Ok(CounterValue {
        value: word(&buf, 0),
        enabled: word(&buf, 1),
        running: word(&buf, 2),
    })
}

/// The `i`-th u64 of a perf read buffer (the kernel writes them in native byte order).
fn word(buf: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&buf[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(w)
}

/// Explains a perf_event_open failure in one line, with what to do about it.
pub fn explain_open_error(what: &str, err: &io::Error) -> String {
    match open_hint(err) {
        Some(hint) => format!("{what}: {err} ({hint})"),
        None => format!("{what}: {err}"),
    }
}

/// `what` with what to do about `err` in parentheses, its cause left out: the words of a typed
/// error that keeps `err` as its source (the line says the cause after them).
pub fn open_words(what: &str, err: &io::Error) -> String {
    match open_hint(err) {
        Some(hint) => format!("{what} ({hint})"),
        None => what.to_string(),
    }
}

/// What to do about a perf_event_open failure, where its errno says.
fn open_hint(err: &io::Error) -> Option<&'static str> {
    Some(match err.raw_os_error()? {
        libc::EACCES | libc::EPERM => {
            "permission denied: run as root or grant CAP_PERFMON (and lower kernel.perf_event_paranoid)"
        }
        libc::ENOENT => "the kernel does not know this event on this PMU",
        libc::EINVAL => "the kernel rejected the event's encoding or the CPU for this PMU",
        libc::ENODEV => "no such CPU or PMU (CPU offline?)",
        libc::EOPNOTSUPP => "this PMU cannot do that (sampling on an uncore PMU?)",
        libc::EMFILE => "too many open files: raise the fd limit (ulimit -n)",
        _ => return None,
    })
}

/// read_format of a group leader: `{ nr, time_enabled, time_running, value[nr] }`.
pub const GROUP_READ_FORMAT: u64 =
    FORMAT_GROUP | FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING;

/// One `read(2)` of a whole group: every member's value under one pair of times, so the values
/// are mutually consistent and an interval costs one syscall per group instead of one per event.
#[derive(Clone, Debug)]
pub struct GroupReader {
    /// Preallocated so that reading allocates nothing.
    buf: Vec<u8>,
    members: usize,
}

impl GroupReader {
    pub fn new(members: usize) -> Self {
        GroupReader {
            buf: vec![0; 8 * (3 + members)],
            members,
        }
    }

    pub fn members(&self) -> usize {
        self.members
    }

    /// Reads the group whose leader is `fd` (opened with `GROUP_READ_FORMAT`) into `values`
    /// (`members` long) and returns `(time_enabled, time_running)`.
    pub fn read(
        &mut self,
        sys: &dyn PerfSys,
        fd: BorrowedFd<'_>,
        values: &mut [u64],
    ) -> io::Result<(u64, u64)> {
        let n = sys.read(fd, &mut self.buf)?;
        if n < 24 {
            // The kernel returns 0 bytes for an event in error state (its CPU went away).
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read of a perf group: {n} bytes"),
            ));
        }
        let nr = word(&self.buf, 0) as usize;
        if nr != self.members || n < 8 * (3 + nr) || values.len() < nr {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "perf group read returned {nr} members in {n} bytes, expected {}",
                    self.members
                ),
            ));
        }
        for (i, v) in values.iter_mut().take(nr).enumerate() {
            *v = word(&self.buf, 3 + i);
        }
        Ok((word(&self.buf, 1), word(&self.buf, 2)))
    }
}

/// A `PerfSys` for tests and dry runs: every open succeeds (unless scripted to fail) and hands
/// out a real fd (a dup of /dev/null, so fd lifetimes behave as with the kernel); reads return
/// counts that advance by a fixed step per read. It records every open so tests can check what
/// would have been asked of the kernel.
#[derive(Debug, Default)]
pub struct FakePerf {
    state: std::sync::Mutex<FakeState>,
}

/// What one `FakePerf::open` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeOpen {
    pub attr: PerfEventAttr,
    pub pid: i32,
    pub cpu: i32,
    /// The raw fd of the group leader, when opened into a group.
    pub group: Option<i32>,
    /// The raw fd handed out (None when the open was scripted to fail).
    pub fd: Option<i32>,
}

#[derive(Debug, Default)]
struct FakeState {
    opens: Vec<FakeOpen>,
    /// Per raw fd: (index into opens, reads so far).
    fds: std::collections::HashMap<i32, (usize, u64)>,
    fail_open: Vec<(Option<u64>, i32, i32)>,
    fail_read_after: Vec<(i32, u64, i32)>,
    refuse_groups: bool,
    step: std::collections::HashMap<u64, u64>,
}

impl FakePerf {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        // A poisoned lock only means another test thread panicked; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens of `config` (any config when None) on `cpu` fail with `errno`.
    pub fn fail_open(&self, config: Option<u64>, cpu: i32, errno: i32) {
        self.lock().fail_open.push((config, cpu, errno));
    }

    /// Reads of events on `cpu` fail with `errno` (0: return 0 bytes, as the kernel does for an
    /// event in error state) after `reads` successful reads.
    pub fn fail_reads_after(&self, cpu: i32, reads: u64, errno: i32) {
        self.lock().fail_read_after.push((cpu, reads, errno));
    }

    /// Refuse group siblings with EINVAL, as PMUs that cannot group do.
    pub fn refuse_groups(&self) {
        self.lock().refuse_groups = true;
    }

    /// Each read of an event with this config advances its count by `step` (default 1000).
    pub fn set_step(&self, config: u64, step: u64) {
        self.lock().step.insert(config, step);
    }

    /// Every open so far, in order.
    pub fn opens(&self) -> Vec<FakeOpen> {
        self.lock().opens.clone()
    }
}

impl PerfSys for FakePerf {
    fn open(
        &self,
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd> {
        let mut st = self.lock();
        let group_raw = group.map(|g| g.as_raw_fd());
        let failing = st
            .fail_open
            .iter()
            .find(|(cfg, c, _)| *c == cpu && cfg.is_none_or(|cfg| cfg == attr.config));
        let err = match failing {
            Some(&(_, _, errno)) => Some(errno),
            None if group_raw.is_some() && st.refuse_groups => Some(libc::EINVAL),
            None => None,
        };
        let mut rec = FakeOpen {
            attr: *attr,
            pid,
            cpu,
            group: group_raw,
            fd: None,
        };
        if let Some(errno) = err {
            st.opens.push(rec);
            return Err(io::Error::from_raw_os_error(errno));
        }
        let fd: OwnedFd = std::fs::File::open("/dev/null")?.into();
        rec.fd = Some(fd.as_raw_fd());
        let idx = st.opens.len();
        st.opens.push(rec);
        st.fds.insert(fd.as_raw_fd(), (idx, 0));
        Ok(fd)
    }

    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let raw = fd.as_raw_fd();
        let Some(&(idx, reads)) = st.fds.get(&raw) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        let open = st.opens[idx].clone();
        if let Some(&(_, _, errno)) = st
            .fail_read_after
            .iter()
            .find(|(cpu, after, _)| *cpu == open.cpu && reads >= *after)
        {
            if errno == 0 {
                return Ok(0);
            }
            return Err(io::Error::from_raw_os_error(errno));
        }
        let reads = reads + 1;
        st.fds.insert(raw, (idx, reads));
        let value_of = |st: &FakeState, attr: &PerfEventAttr| {
            reads * st.step.get(&attr.config).copied().unwrap_or(1000)
        };
        // Times advance 1 ms per read; running == enabled (no multiplexing).
        let t = reads * 1_000_000;
        let mut words: Vec<u64> = Vec::new();
        if open.attr.read_format & FORMAT_GROUP != 0 {
            let members: Vec<PerfEventAttr> = std::iter::once(open.attr)
                .chain(
                    st.opens
                        .iter()
                        .filter(|o| o.group == Some(raw) && o.fd.is_some())
                        .map(|o| o.attr),
                )
                .collect();
            words.push(members.len() as u64);
            words.push(t);
            words.push(t);
            for a in &members {
                words.push(value_of(&st, a));
            }
        } else {
            words.push(value_of(&st, &open.attr));
            words.push(t);
            words.push(t);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        if buf.len() < bytes.len() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(bytes.len())
    }

    fn ioctl(&self, _fd: BorrowedFd<'_>, _op: PerfIoctl) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling() {
        assert_eq!(
            CounterValue {
                value: 100,
                enabled: 10,
                running: 10
            }
            .scaled(),
            (100.0, false)
        );
        assert_eq!(
            CounterValue {
                value: 100,
                enabled: 20,
                running: 10
            }
            .scaled(),
            (200.0, true)
        );
        assert_eq!(
            CounterValue {
                value: 0,
                enabled: 0,
                running: 0
            }
            .scaled(),
            (0.0, false)
        );
    }

    #[test]
    fn software_counter_reads_back() {
        // task-clock on this thread counts on any Linux with perf events; skip where perf is off.
        let attr = PerfEventAttr::counting(TYPE_SOFTWARE, 1 /* task-clock */);
        let fd = match RealPerf.open(&attr, 0, -1, None) {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("skipping: perf_event_open unavailable here: {e}");
                return;
            }
        };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let v = read_counter(&RealPerf, std::os::fd::AsFd::as_fd(&fd)).unwrap();
        assert!(v.value > 0 && v.enabled > 0 && v.running > 0, "{v:?}");
    }
}
