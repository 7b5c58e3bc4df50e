//! Names after an exec: `imc_exec` on sched_process_exec counts execs in [`EXECS`], which every
//! CPU's description cache compares with the count it was emptied at (`describe_task`).
use crate::{AGG, aggregating};
use aya_ebpf::{
    helpers::generated::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};
use core::intrinsics::{AtomicOrdering, atomic_xadd};
use imc_common::AGG_TASKS;

use crate::fields::set_comm;

/// Execs seen since the program was loaded (see [`imc_exec`]).
#[map]
pub(crate) static EXECS: Array<u32> = Array::with_max_entries(1, 0);

/// Execs seen so far.
#[inline(always)]
pub(crate) fn execs() -> u32 {
    // SAFETY: a map value of this object, read whole.
    EXECS
        .get_ptr(0)
        .map_or(0, |n| unsafe { core::ptr::read_volatile(n) })
}

/// sched_process_exec: the task now has its new comm. Every CPU's `recent` goes stale (a
/// thread it described may be this one, under its old name): the count it was emptied at no
/// longer matches. The accumulator entry of this task on this CPU is described again, so the
/// slice that runs on after the exec is charged under the new name; with stacks, the process's
/// next stack announces it again (its new program's maps are to be read).
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn imc_exec(_ctx: RawTracePointContext) -> i32 {
    if let Some(n) = EXECS.get_ptr_mut(0) {
        // SAFETY: a map value of this object; an atomic add (execs on several CPUs at once).
        unsafe { atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(n, 1) };
    }
    if aggregating() {
        // SAFETY: the helper has no preconditions; the entry is this CPU's.
        unsafe { redescribe_entry(bpf_get_current_pid_tgid() as u32) };
    }
    crate::stacks::exec_seen();
    0
}

/// Describes this CPU's accumulator entry of thread `pid` again (its comm after an exec).
///
/// # Safety
/// Runs on the CPU whose accumulator it changes, in the task's context.
#[inline(always)]
unsafe fn redescribe_entry(pid: u32) {
    let Some(st) = AGG.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: the caller's; `tasks` indices are masked into the array.
    unsafe {
        let n = ((*st).n as usize).min(AGG_TASKS);
        for i in 0..AGG_TASKS {
            let e = &raw mut (*st).tasks[i];
            if i < n && (*e).pid == pid {
                if bpf_get_current_comm((*e).comm.as_mut_ptr().cast(), 16) != 0 {
                    set_comm(&raw mut (*e).comm, None);
                }
                (*e).flags = 0;
            }
        }
    }
}
