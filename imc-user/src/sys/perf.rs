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
}

impl PerfIoctl {
    fn request(self) -> libc::c_ulong {
        // _IO('$', n)
        match self {
            PerfIoctl::Enable => 0x2400,
            PerfIoctl::Disable => 0x2401,
            PerfIoctl::Reset => 0x2403,
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
        // SAFETY: the perf ioctls used here take an integer argument (0).
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), op.request() as _, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
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
    let word = |i: usize| u64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
    Ok(CounterValue {
        value: word(0),
        enabled: word(1),
        running: word(2),
    })
}

/// Explains a perf_event_open failure in one line, with what to do about it.
pub fn explain_open_error(what: &str, err: &io::Error) -> String {
    let hint = match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "permission denied: run as root or grant CAP_PERFMON (and lower kernel.perf_event_paranoid)"
        }
        Some(libc::ENOENT) => "the kernel does not know this event on this PMU",
        Some(libc::EINVAL) => "the kernel rejected the event's encoding or the CPU for this PMU",
        Some(libc::ENODEV) => "no such CPU or PMU (CPU offline?)",
        Some(libc::EOPNOTSUPP) => "this PMU cannot do that (sampling on an uncore PMU?)",
        Some(libc::EMFILE) => "too many open files: raise the fd limit (ulimit -n)",
        _ => "",
    };
    if hint.is_empty() {
        format!("{what}: {err}")
    } else {
        format!("{what}: {err} ({hint})")
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
