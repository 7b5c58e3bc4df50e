//! Per-CPU traffic weights: the core PMU events that say how much memory-controller traffic the
//! task on a CPU caused, so a package's DRAM bytes can be spread by traffic, not by CPU time.
//!
//! A pure table: CPU model (and core PMU, on hybrid parts) → at most four events. Every encoding
//! was checked against a public table, named in the event's `source`:
//! * Intel: Intel's perfmon event files (github.com/intel/perfmon, `<CPU>/events/*_core.json`,
//!   which the kernel's tools/perf/pmu-events/arch/x86 JSON is generated from); counter
//!   restrictions from the same files' `Counter` field.
//! * AMD: the kernel's tools/perf/pmu-events/arch/x86/amdzen{2,3,4,5} JSON and libpfm4's
//!   lib/events/amd64_events_fam{17h_zen2,19h_zen3,19h_zen4,1ah_zen5}.h.
//! * POWER: libpfm4 lib/events/power{8,9,10}_events.h (the codes of the kernel's
//!   tools/perf/pmu-events/arch/powerpc JSON) and arch/powerpc/perf/power9-pmu.c for the format.
//! * Arm: the architected PMUv3 common events in tools/perf/pmu-events/arch/arm64 (and libpfm4
//!   lib/events/arm_neoverse_*_events.h), see `arm`.
//!
//! Where commonly quoted names and encodings differ from those tables:
//! * SKX/CLX `OCR.ALL_READS.L3_MISS_LOCAL_DRAM` has no such plain name: Intel's CLX table has it
//!   only with a snoop qualifier (`.ANY_SNOOP`, `.SNOOP_MISS_OR_NO_FWD`, …) and the remote one is
//!   `L3_MISS_REMOTE_DRAM`/`L3_MISS_REMOTE_HOP1_DRAM`; the SKX table (steppings 0-4) lists only
//!   `OCR.ALL_DATA_RD.*` (no RFOs). The offcore MSR bits are the same core's, so the CLX event is
//!   used for every model 0x55 part.
//! * `OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM`'s request mask differs: 0x477 on ICX, 0x4477 on
//!   SPR/EMR/GNR, where the events are 0x2a/0x2b (0xb7/0xbb on ICX and before).
//! * Three offcore-response events never fit: a thread has two offcore-response MSRs
//!   (MSR_OFFCORE_RSP_0/1). Local and remote reads take both, so the write weight on servers is
//!   `L2_LINES_OUT.NON_SILENT`, and the OCR write events (`OCR.WRITE_ESTIMATE.MEMORY` on ICX+,
//!   `OCR.MODIFIED_WRITE.ANY_RESPONSE` on SPR+) are offered as [`CoreTraffic::alt_write`] for
//!   one-package machines, which need no remote read.
//! * `L2_LINES_OUT.NON_SILENT` is not modified-only everywhere: on SKX and ICX it also counts clean
//!   victims written into the non-inclusive L3 (the SKX description says so), and on Crestmont
//!   (`cpu_atom` of Meteor Lake) it counts every L2 eviction, so it is not used there.
//! * On client cores Intel's only OCR DRAM read is `OCR.DEMAND_DATA_RD.DRAM` (demand data loads
//!   only), so `LONGEST_LAT_CACHE.MISS` (0x2e/0x41: demand, RFO, code and L1/L2 hardware
//!   prefetches) counts more of the truth there.
//! * `OCR.COREWB_M` exists on Gracemont (Alder/Raptor Lake `cpu_atom`) and Lunar Lake's Skymont,
//!   not on Crestmont (Meteor Lake) nor Arrow Lake's Skymont table.
//! * Zen 5's `l2_fill_rsp_src` (0x165) sees every L2 fill, L2-prefetcher fills included, with
//!   near/far DRAM umasks: it replaces both 0x44 and 0x72 there.
//! * POWER8's `PM_MEM_READ`/`PM_MEM_CO` count "for this lpar", the whole partition, so they cannot
//!   tell CPUs apart; POWER8 uses the per-thread `PM_DATA_ALL_FROM_{L,R,D}MEM` reloads instead.
//!   POWER9's `PM_MEM_*` are "from this thread"; POWER10 has no `PM_MEM_CO`.
use crate::discovery::Machine;

mod amd;
pub mod arm;
mod intel;
mod power;
mod table;
#[cfg(test)]
mod tests;

pub use table::{CoreStall, CoreTraffic, CoreTrafficEvent, Locality, Memory, StallEvent, Watchdog};

/// The traffic weight events of this CPU's core PMU `pmu` ("cpu", "cpu_core", "cpu_atom", or
/// POWER's "cpu"), whose caps/pmu_name is `caps_pmu_name` when present; Err(one-line reason)
/// when none is known (unknown model, not a CPU with such events, ...).
pub fn core_traffic(
    m: &Machine,
    pmu: &str,
    caps_pmu_name: Option<&str>,
) -> Result<CoreTraffic, String> {
    if let Some(generation) = m.power.as_deref() {
        return power::traffic(generation, pmu, caps_pmu_name);
    }
    if m.is_intel() {
        return intel::traffic(m, pmu, caps_pmu_name);
    }
    if m.is_amd() {
        return amd::traffic(m, pmu);
    }
    if arm::is_arm(m) {
        return arm::traffic(m, pmu);
    }
    Err(unknown_vendor(m, "traffic weight events"))
}

/// Why a CPU that is neither Intel, AMD nor POWER has no `what` (a vendor imc has no table for,
/// or none named at all).
fn unknown_vendor(m: &Machine, what: &str) -> String {
    match &m.vendor {
        Some(v) => format!("no {what} known for CPU vendor '{v}'"),
        None => "proc/cpuinfo names no CPU vendor or POWER generation".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Victims: the cycles a core spends stalled on a memory load, and the cycles to divide them by.
//
// Every encoding checked against a public table, named in `source`:
// * Intel CYCLE_ACTIVITY.STALLS_L3_MISS (EventCode 0xA3, UMask 0x06, CounterMask 6, counters
//   0-3) in the kernel's tools/perf/pmu-events/arch/x86/{skylakex,icelakex,sapphirerapids,
//   emeraldrapids,graniterapids}/memory.json (generated from Intel's perfmon tables). SPR and
//   later also list MEMORY_ACTIVITY.STALLS_L3_MISS (0x47/0x09, cmask 9, "cacheable" loads only);
//   CYCLE_ACTIVITY's is the one every generation shares, so shares compare across a fleet.
// * The cycles: event 0x3c (CPU_CLK_UNHALTED.THREAD_P), which the kernel places on fixed counter
//   1 (arch/x86/events/intel/core.c FIXED_EVENT_CONSTRAINT(0x003c, 1)) unless that counter is
//   taken (by the NMI watchdog's own cycles event), then on a generic one.
// * AMD Zen 4/5: ex_no_retire.load_not_complete (EventCode 0xD6, UMask 0xA2, "cycles with no
//   retire while the oldest op is waiting for load data") in tools/perf/pmu-events/arch/x86/
//   amdzen4/core.json and amdzen5/execution.json (the same code and umask in both), the event
//   amdzen5/pipeline.json's backend_bound_by_memory metric is built on; cycles ls_not_halted_cyc (0x76), the kernel's PERF_COUNT_HW_CPU_CYCLES for
//   Zen (arch/x86/events/amd/core.c). Zen 2/3 have no ex_no_retire event.
// * POWER8/9: PM_CMPLU_STALL_DMISS_L3MISS (0x4c01a, bound to PMC4): libpfm4
//   lib/events/power8_events.h and tools/perf/pmu-events/arch/powerpc/power9/other.json;
//   POWER10 PM_EXEC_STALL_DMISS_L3MISS (0x2c018, PMC2): tools/perf/pmu-events/arch/powerpc/
//   power10 JSON. Cycles PM_RUN_CYC (0x600f4) on PMC6, which counts nothing else
//   (arch/powerpc/perf/power{9,10}-events-list.h).
// * Generic counters per thread: Intel Skylake-SP 4 with Hyper-Threading (8 without: imc
//   assumes the smaller), Ice Lake-SP and later 8 (CPUID leaf 0xA, as the kernel reads it);
//   AMD Zen 6 core counters (arch/x86/events/amd/core.c, AMD64_NUM_COUNTERS_CORE); POWER 4
//   programmable PMCs beside the fixed PMC5/PMC6 (arch/powerpc/perf/power9-pmu.c).

/// The stall counters of this CPU's core PMU `pmu`; Err(one-line reason) where the core has no
/// event for cycles stalled on memory (or imc does not know it).
pub fn core_stall(
    m: &Machine,
    pmu: &str,
    caps_pmu_name: Option<&str>,
) -> Result<CoreStall, String> {
    if let Some(generation) = m.power.as_deref() {
        return power::stall(generation, pmu);
    }
    if m.is_amd() {
        return amd::stall(m, pmu);
    }
    if arm::is_arm(m) {
        return Err(format!(
            "no memory-stall event known for {} cores (imc has no Arm stall table)",
            arm::core_name(m).unwrap_or("these Arm")
        ));
    }
    let Some(model) = m.intel_model() else {
        return Err(unknown_vendor(m, "memory-stall event"));
    };
    intel::stall(model, pmu, caps_pmu_name)
}
