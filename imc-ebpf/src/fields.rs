//! Writing a record's and an accumulator's fields one word at a time: here a struct assignment,
//! a literal or an array copy becomes a call to compiler_builtins' memset/memcpy, which copies a
//! byte at a time.
use imc_common::{MAX_SLOTS, SlotReading};

/// Stores one reading field by field. Here a struct assignment, `SlotReading::default()` or an
/// array copy becomes a call to compiler_builtins' memset/memcpy, which copies a byte at a time
/// (about five instructions a byte: a 24-byte reading ~120, a task's 8 readings ~1,000) — most
/// of what a switch cost on top of its clock and counter reads. Volatile stores are never merged
/// back into such a call.
///
/// # Safety
/// `dst` is valid for writing one SlotReading.
#[inline(always)]
pub(crate) unsafe fn set_reading(dst: *mut SlotReading, value: u64, enabled: u64, running: u64) {
    // SAFETY: the caller's.
    unsafe {
        core::ptr::write_volatile(&raw mut (*dst).value, value);
        core::ptr::write_volatile(&raw mut (*dst).enabled, enabled);
        core::ptr::write_volatile(&raw mut (*dst).running, running);
    }
}

/// The package sums' array, zeroed word by word (`[0; MAX_SLOTS]` is a byte-wise memset here:
/// see [`set_reading`]).
#[inline(always)]
pub(crate) fn zeroed_sums(
    sums: &mut core::mem::MaybeUninit<[u64; MAX_SLOTS]>,
) -> &mut [u64; MAX_SLOTS] {
    let words = sums.as_mut_ptr().cast::<u64>();
    for i in 0..MAX_SLOTS {
        // SAFETY: `words` points to MAX_SLOTS u64s.
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
    }
    // SAFETY: every word was just written.
    unsafe { sums.assume_init_mut() }
}

/// `*dst = *src`, field by field (see [`set_reading`]).
///
/// # Safety
/// `dst` and `src` are valid for one SlotReading each.
#[inline(always)]
pub(crate) unsafe fn copy_reading(dst: *mut SlotReading, src: *const SlotReading) {
    // SAFETY: the caller's.
    unsafe { set_reading(dst, (*src).value, (*src).enabled, (*src).running) }
}

/// A task name, 16 bytes, copied (or zeroed: `src` None) as two words (see [`set_reading`]).
///
/// # Safety
/// `dst` and `src` are 8-byte aligned (every comm field here is: the records and entries are
/// 8-aligned and their comm sits at a multiple of 8) and valid for 16 bytes.
#[inline(always)]
pub(crate) unsafe fn set_comm(dst: *mut [u8; 16], src: Option<*const [u8; 16]>) {
    // SAFETY: the caller's.
    unsafe {
        let (lo, hi) = match src {
            Some(src) => {
                let src = src.cast::<u64>();
                (*src, *src.add(1))
            }
            None => (0, 0),
        };
        let dst = dst.cast::<u64>();
        core::ptr::write_volatile(dst, lo);
        core::ptr::write_volatile(dst.add(1), hi);
    }
}
