//! AMD Zen 2-5 core events: data-cache and L2 fills by source, and cycles stalled on a load.
use super::table::{
    CoreStall, CoreTraffic, CoreTrafficEvent, Locality, StallEvent, Watchdog, ev, expect_cpu_pmu,
};
use crate::discovery::Machine;
use crate::model::Direction;

pub(super) const NOTE_ZEN_NO_WRITE: &str = "Zen has no per-core writeback event: writes are spread by the \
     read weight, not by time";
const NOTE_ZEN_DRAM_IO: &str = "the DRAM umasks also count MMIO fills (\"DRAM or IO\"), small \
     beside DRAM traffic";
const NOTE_ZEN_NODES: &str = "local/remote are NUMA nodes, not packages: with NPS2/NPS4 a fill \
     from another node of the same package counts as remote";

/// AMD Zen 2/3/4: data-cache fills from DRAM (local/remote) and L2-prefetcher misses.
fn zen234(generation: Zen) -> CoreTraffic {
    let (model, [local, remote, pf]) = match generation {
        Zen::Two => ("Zen 2", zen2()),
        Zen::Three => ("Zen 3", zen3()),
        Zen::Four => ("Zen 4", zen4()),
    };
    let fills = if matches!(generation, Zen::Two) {
        "ls_refills_from_sys (0x43) counts demand data-cache fills only"
    } else {
        "ls_any_fills_from_sys (0x44) counts demand, software- and L1-hardware-prefetch \
         data-cache fills by source"
    };
    CoreTraffic {
        model,
        events: vec![local, remote, pf],
        alt_write: None,
        notes: vec![
            fills,
            "lines the L2 prefetcher brings from DRAM reach the L1 later as L2 hits, invisible \
             to the fill events: l2_pf_miss_l2_l3 (0x72) adds them; it cannot tell local from \
             remote (Locality::Any) and also counts lines served by another CCX's cache",
            if matches!(generation, Zen::Two) {
                "on Zen 2 the kernel's l2_pf_miss_l2_l3 uses umask 0xff; the L1 prefetcher's \
                 requests are not data-cache refills (0x43 is demand only), so nothing is counted \
                 twice"
            } else {
                "0x72 umask 0x1f keeps the L2 prefetchers only: the L1 prefetchers' requests \
                 (umask 0xe0) fill the L1 and are already in 0x44"
            },
            NOTE_ZEN_DRAM_IO,
            NOTE_ZEN_NODES,
            NOTE_ZEN_NO_WRITE,
        ],
    }
}

#[derive(Clone, Copy)]
enum Zen {
    Two,
    Three,
    Four,
}

/// AMD Zen 5: L2 fills by source, prefetches included.
fn zen5() -> CoreTraffic {
    CoreTraffic {
        model: "Zen 5",
        events: vec![
            // amdzen5/l2-cache.json: l2_fill_rsp_src.dram_io_near EventCode 0x165 UMask 0x08.
            ev(
                "l2_fill_rsp_src.dram_io_near",
                "event=0x165,umask=0x08",
                Direction::Read,
                Locality::Local,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen5/l2-cache.json l2_fill_rsp_src.dram_io_near",
            ),
            // Same file: l2_fill_rsp_src.dram_io_far UMask 0x40 ("a different NUMA node (same or
            // different socket)").
            ev(
                "l2_fill_rsp_src.dram_io_far",
                "event=0x165,umask=0x40",
                Direction::Read,
                Locality::Remote,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen5/l2-cache.json l2_fill_rsp_src.dram_io_far",
            ),
        ],
        alt_write: None,
        notes: vec![
            "l2_fill_rsp_src (0x165) counts every L2 fill by its source, L2-prefetcher fills \
             included, so no second read event (0x44 or 0x72) is added",
            "event 0x165 needs the event format's high bits (config:32-35)",
            NOTE_ZEN_DRAM_IO,
            NOTE_ZEN_NODES,
            NOTE_ZEN_NO_WRITE,
        ],
    }
}

/// The traffic weights of an AMD (or Hygon) core PMU `pmu`.
pub(super) fn traffic(m: &Machine, pmu: &str) -> Result<CoreTraffic, String> {
    if m.vendor.as_deref() != Some("AuthenticAMD") {
        return Err(format!(
            "no traffic weight events known for {} CPUs",
            m.vendor.as_deref().unwrap_or("unknown")
        ));
    }
    expect_cpu_pmu("AMD", pmu)?;
    let (family, model) = family_model(m)?;
    // The kernel's tools/perf/pmu-events/arch/x86/mapfile.csv: AuthenticAMD-23-([12][0-9A-F]|
    // [0-9A-F]) amdzen1, -23-* amdzen2, -25-([245][0-9A-F]|[0-9A-F]) amdzen3, -25-* amdzen4,
    // -26-* amdzen5.
    match family {
        0x17 if model >= 0x30 => Ok(zen234(Zen::Two)),
        0x17 => Err(format!(
            "AMD family 0x17 model {model:#x} is Zen/Zen+, whose data-cache fill events do not \
             tell DRAM from other caches: no traffic weight"
        )),
        0x19 if is_zen3(model) => Ok(zen234(Zen::Three)),
        0x19 => Ok(zen234(Zen::Four)),
        0x1a => Ok(zen5()),
        f if f < 0x17 => Err(format!(
            "AMD family {f:#x} predates Zen 2: no traffic weight events known"
        )),
        f => Err(format!(
            "AMD family {f:#x} model {model:#x}: no traffic weight events known"
        )),
    }
}

/// Whether family 0x19 model `model` is a Zen 3 part (else Zen 4), by the kernel's
/// mapfile.csv: AuthenticAMD-25-([245][0-9A-F]|[0-9A-F]) is amdzen3.
fn is_zen3(model: u32) -> bool {
    model < 0x10 || (0x20..0x30).contains(&model) || (0x40..0x60).contains(&model)
}

fn family_model(m: &Machine) -> Result<(u32, u32), String> {
    let (Some(family), Some(model)) = (m.family, m.model) else {
        return Err("proc/cpuinfo gives no AMD family/model".into());
    };
    Ok((family, model))
}

/// The stall pair of an AMD (or Hygon) core PMU `pmu`.
pub(super) fn stall(m: &Machine, pmu: &str) -> Result<CoreStall, String> {
    let (family, model) = family_model(m)?;
    expect_cpu_pmu("AMD", pmu)?;
    match family {
        0x19 if is_zen3(model) => Err(
            "Zen 3 has no event for cycles stalled on a load (ex_no_retire came with Zen 4)".into(),
        ),
        0x19 => Ok(zen_stall(
            "Zen 4",
            "linux tools/perf/pmu-events/arch/x86/amdzen4/core.json ex_no_retire.load_not_complete (0xd6, umask 0xa2)",
        )),
        0x1a => Ok(zen_stall(
            "Zen 5",
            "linux tools/perf/pmu-events/arch/x86/amdzen5/execution.json ex_no_retire.load_not_complete (0xd6, umask 0xa2), the event of amdzen5/pipeline.json's backend_bound_by_memory",
        )),
        f => Err(format!(
            "AMD family {f:#x}: no event for cycles stalled on a load before Zen 4"
        )),
    }
}

fn zen_stall(model: &'static str, source: &'static str) -> CoreStall {
    CoreStall {
        model,
        stalled: StallEvent {
            name: "ex_no_retire.load_not_complete",
            terms: "event=0xd6,umask=0xa2",
            counter_mask: None,
            fixed: false,
            source,
        },
        cycles: StallEvent {
            name: "ls_not_halted_cyc",
            terms: "event=0x76",
            counter_mask: None,
            fixed: false,
            source: "linux arch/x86/events/amd/core.c PERF_COUNT_HW_CPU_CYCLES = 0x0076 (ls_not_halted_cyc)",
        },
        generic_counters: 6,
        watchdog: Watchdog::Generic,
        notes: vec![
            "ex_no_retire.load_not_complete counts cycles in which the oldest op waits for load \
             data from any level, not only DRAM: a share of stalls on memory, an upper bound \
             of those on DRAM",
        ],
    }
}

/// Zen 2: demand data-cache refills from DRAM and every L2-prefetch miss.
fn zen2() -> [CoreTrafficEvent; 3] {
    [
        // amdzen2/cache.json: ls_refills_from_sys.ls_mabresp_lcl_dram EventCode 0x43 UMask 0x08,
        // .ls_mabresp_rmt_dram UMask 0x40; l2_pf_miss_l2_l3 EventCode 0x72 UMask 0xff.
        ev(
            "ls_refills_from_sys.ls_mabresp_lcl_dram",
            "event=0x43,umask=0x08",
            Direction::Read,
            Locality::Local,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json ls_refills_from_sys.ls_mabresp_lcl_dram; libpfm4 amd64_events_fam17h_zen2.h DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_DRAM",
        ),
        ev(
            "ls_refills_from_sys.ls_mabresp_rmt_dram",
            "event=0x43,umask=0x40",
            Direction::Read,
            Locality::Remote,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json ls_refills_from_sys.ls_mabresp_rmt_dram; libpfm4 amd64_events_fam17h_zen2.h DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_RMT_DRAM",
        ),
        ev(
            "l2_pf_miss_l2_l3",
            "event=0x72,umask=0xff",
            Direction::Read,
            Locality::Any,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json l2_pf_miss_l2_l3 (UMask 0xff)",
        ),
    ]
}

/// Zen 3: data-cache fills from DRAM and the L2 prefetchers' misses.
fn zen3() -> [CoreTrafficEvent; 3] {
    [
        // amdzen3/cache.json: ls_any_fills_from_sys.mem_io_local EventCode 0x44 UMask 0x08,
        // .mem_io_remote UMask 0x40; libpfm4 L2_PREFETCH_MISS_L3:L2_HW_PREFETCHER 0x72/0x1f.
        ev(
            "ls_any_fills_from_sys.mem_io_local",
            "event=0x44,umask=0x08",
            Direction::Read,
            Locality::Local,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen3/cache.json ls_any_fills_from_sys.mem_io_local; libpfm4 amd64_events_fam19h_zen3.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_LCL",
        ),
        ev(
            "ls_any_fills_from_sys.mem_io_remote",
            "event=0x44,umask=0x40",
            Direction::Read,
            Locality::Remote,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen3/cache.json ls_any_fills_from_sys.mem_io_remote; libpfm4 amd64_events_fam19h_zen3.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_RMT",
        ),
        ev(
            "l2_pf_miss_l2_l3 (L2 prefetchers)",
            "event=0x72,umask=0x1f",
            Direction::Read,
            Locality::Any,
            None,
            false,
            "libpfm4 amd64_events_fam19h_zen3.h L2_PREFETCH_MISS_L3:L2_HW_PREFETCHER (0x72, umask 0x1f)",
        ),
    ]
}

/// Zen 4: the same events as Zen 3, by their Zen 4 names.
fn zen4() -> [CoreTrafficEvent; 3] {
    [
        // amdzen4/cache.json: ls_any_fills_from_sys.dram_io_near EventCode 0x44 UMask 0x08,
        // .dram_io_far UMask 0x40; l2_pf_miss_l2_l3 L2 prefetcher umasks 0x01-0x10.
        ev(
            "ls_any_fills_from_sys.dram_io_near",
            "event=0x44,umask=0x08",
            Direction::Read,
            Locality::Local,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json ls_any_fills_from_sys.dram_io_near; libpfm4 amd64_events_fam19h_zen4.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_NEAR",
        ),
        ev(
            "ls_any_fills_from_sys.dram_io_far",
            "event=0x44,umask=0x40",
            Direction::Read,
            Locality::Remote,
            None,
            false,
            "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json ls_any_fills_from_sys.dram_io_far; libpfm4 amd64_events_fam19h_zen4.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_FAR",
        ),
        ev(
            "l2_pf_miss_l2_l3 (L2 prefetchers)",
            "event=0x72,umask=0x1f",
            Direction::Read,
            Locality::Any,
            None,
            false,
            "libpfm4 amd64_events_fam19h_zen4.h L2_PREFETCH_MISS_L3:L2_STREAM|L2_NEXT_LINE|L2_UP_DOWN|L2_BURST|L2_STRIDE (0x72, umask 0x1f)",
        ),
    ]
}
