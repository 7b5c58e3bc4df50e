//! The package counters: which CPU reads its package's counters at a tick, and the sums it puts
//! in the package slots of a record.
use crate::fields::zeroed_sums;
use crate::{GROUP_LAST, PKG, PKG_MIN_GAP_NS, PKG_SLOT, PKG_SLOTS, READERS, bump, set_reading};
use aya_ebpf::{EbpfContext, cty::c_void, helpers::generated::bpf_perf_event_read};
use aya_log_ebpf::warn;
use imc_common::{
    MAX_PKG_COUNTERS, MAX_SLOTS, ReaderCfg, STAT_PKG_READS, STAT_READ_ERROR, SlotReading,
};

/// This CPU's reader configuration and its group's last-read time, when it is a reader and the
/// group was not read within PKG_MIN_GAP_NS.
#[inline(always)]
pub(crate) fn package_due(cpu: u32, now: u64) -> Option<(&'static ReaderCfg, *mut u64)> {
    let cfg = READERS.get(cpu)?;
    if cfg.count == 0 {
        return None;
    }
    let last = GROUP_LAST.get_ptr_mut(cfg.group)?;
    // SAFETY: `last` points into GROUP_LAST (read_package says why a race on it is harmless);
    // the other is a read of a global.
    let (read_at, gap) = unsafe { (*last, core::ptr::read_volatile(&PKG_MIN_GAP_NS)) };
    if now.wrapping_sub(read_at) < gap {
        return None;
    }
    Some((cfg, last))
}

/// The package slots' sums, written only by a run that reads its package: most runs read
/// none, and pay nothing for them.
pub(crate) struct PkgSums(core::mem::MaybeUninit<[u64; MAX_SLOTS]>);

impl PkgSums {
    #[inline(always)]
    pub(crate) fn new() -> PkgSums {
        PkgSums(core::mem::MaybeUninit::uninit())
    }

    /// Slot `s`'s sum where `read` (its bit of [`read_package`]'s mask, which zeroed them all
    /// first), else 0.
    #[inline(always)]
    pub(crate) fn get(&self, s: usize, read: bool) -> u64 {
        if !read {
            return 0;
        }
        // SAFETY: a set bit of read_package's mask means it zeroed every sum and added to
        // this one; `s` is masked into the array.
        unsafe { *self.0.as_ptr().cast::<u64>().add(s & (MAX_SLOTS - 1)) }
    }
}

/// The package slots' sums (into `out`) when the plan has package slots, this CPU is its
/// group's reader and the group was not read within PKG_MIN_GAP_NS; bit `s` of the returned
/// mask set when slot `s`'s sum is complete (a failed counter read leaves its slot out rather
/// than report a partial sum). `out` is written only when the mask is not 0.
#[inline(always)]
pub(crate) fn read_package<C: EbpfContext>(ctx: &C, cpu: u32, now: u64, out: &mut PkgSums) -> u8 {
    // SAFETY: a read of a global.
    if unsafe { core::ptr::read_volatile(&PKG_SLOTS) } == 0 {
        return 0;
    }
    let Some((cfg, last)) = package_due(cpu, now) else {
        return 0;
    };
    let sums = zeroed_sums(&mut out.0);
    // SAFETY: `last` points into GROUP_LAST. Two reader CPUs of one group may both find the
    // read due at the same instant; both readings are then valid, one is merely redundant.
    unsafe { *last = now };
    let _ = bump(STAT_PKG_READS);
    let (first, count) = (cfg.first, cfg.count);
    let mut have: u8 = 0;
    let mut failed: u8 = 0;
    for i in 0..MAX_PKG_COUNTERS {
        if i >= count {
            break;
        }
        let index = first.wrapping_add(i);
        let Some(&slot) = PKG_SLOT.get(index) else {
            continue;
        };
        let s = (slot as usize) & (MAX_SLOTS - 1);
        // SAFETY: PKG is a PERF_EVENT_ARRAY map; the helper checks the index and the entry.
        let v = unsafe { bpf_perf_event_read(&raw const PKG as *mut c_void, u64::from(index)) };
        if (-4095..0).contains(&(v as i64)) {
            failed |= 1 << s;
            // The rare path: said once per CPU and slot (shown with -vv), counted always.
            if bump(STAT_READ_ERROR + s as u32) == 0 {
                warn!(
                    ctx,
                    "CPU {} cannot read package counter {} (slot {}): error {}",
                    cpu,
                    index,
                    s,
                    (v as i64).wrapping_neg()
                );
            }
        } else {
            sums[s] = sums[s].wrapping_add(v);
            have |= 1 << s;
        }
    }
    have & !failed
}

/// A package slot of a record: `sum` when this run read its group (`read`), else nothing (not
/// an error: most records are not a reader's). Returns whether the slot failed.
///
/// # Safety
/// `out` is valid for writing one SlotReading.
#[inline(always)]
pub(crate) unsafe fn fill_package_slot(out: *mut SlotReading, sum: u64, read: bool) -> bool {
    // SAFETY: the caller's.
    unsafe {
        if read {
            set_reading(out, sum, 1, 1);
        } else {
            set_reading(out, 0, 0, 0);
        }
    }
    !read
}
