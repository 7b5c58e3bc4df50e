//! IBM POWER8/9/10 core events (the powerpc `cpu` PMU takes the raw event code as `event`).
use super::table::{
    CoreStall, CoreTraffic, CoreTrafficEvent, Locality, StallEvent, Watchdog, ev, expect_cpu_pmu,
};
use crate::model::Direction;

/// The traffic weights of POWER `generation`'s `cpu` PMU, whose caps/pmu_name is `caps` when
/// present.
pub(super) fn traffic(
    generation: &str,
    pmu: &str,
    caps: Option<&str>,
) -> Result<CoreTraffic, String> {
    expect_cpu_pmu("POWER", pmu)?;
    if let Some(name) = caps
        && !name.eq_ignore_ascii_case(generation)
    {
        return Err(format!(
            "the kernel drives the {generation} core PMU as '{name}' (caps/pmu_name), not as \
             {generation}: its memory events are not available"
        ));
    }
    match generation {
        "POWER8" => Ok(power8()),
        "POWER9" => Ok(power9()),
        "POWER10" => Ok(power10()),
        _ => Err(format!("no traffic weight events known for {generation}")),
    }
}

/// The stall pair of POWER `generation`'s `cpu` PMU.
pub(super) fn stall(generation: &str, pmu: &str) -> Result<CoreStall, String> {
    expect_cpu_pmu("POWER", pmu)?;
    stall_table(generation).ok_or_else(|| format!("no memory-stall event known for {generation}"))
}

/// One POWER event of 128-byte lines, bound to PMC `pmc`.
fn pmc_event(
    name: &'static str,
    terms: &'static str,
    direction: Direction,
    locality: Locality,
    pmc: u32,
    source: &'static str,
) -> CoreTrafficEvent {
    // The PMC field (config bits 16-19) binds the event to PMC n (mask bit n-1).
    let counter_mask = Some(1 << (pmc - 1));
    CoreTrafficEvent {
        bytes_per_count: 128.0,
        ..ev(
            name,
            terms,
            direction,
            locality,
            counter_mask,
            false,
            source,
        )
    }
}

/// POWER8: the per-thread L1 reloads from local, remote and distant memory.
fn power8() -> CoreTraffic {
    CoreTraffic {
        model: "POWER8",
        events: vec![
            pmc_event(
                "PM_DATA_ALL_FROM_LMEM",
                "event=0x62c048",
                Direction::Read,
                Locality::Local,
                2,
                "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_LMEM (0x62c048)",
            ),
            pmc_event(
                "PM_DATA_ALL_FROM_RMEM",
                "event=0x63c04a",
                Direction::Read,
                Locality::Remote,
                3,
                "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_RMEM (0x63c04a)",
            ),
            pmc_event(
                "PM_DATA_ALL_FROM_DMEM",
                "event=0x64c04c",
                Direction::Read,
                Locality::Remote,
                4,
                "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_DMEM (0x64c04c)",
            ),
        ],
        alt_write: None,
        notes: vec![
            "POWER8's PM_MEM_READ/PM_MEM_CO count for the whole partition (\"for this \
             lpar\"), the same on every CPU, so the per-thread L1 reloads from local, remote \
             and distant memory (demand loads and data prefetches) are the weights",
            "remote (RMEM) and distant (DMEM) memory are both another chip's: they add up \
             to one remote weight",
            "no per-thread castout event: writes are spread by the read weight",
            "instruction fetches and L2/L3 prefetches from memory are not in these events",
        ],
    }
}

/// POWER9: the per-thread `PM_MEM_*` reads and castouts.
fn power9() -> CoreTraffic {
    CoreTraffic {
        model: "POWER9",
        events: vec![
            pmc_event(
                "PM_MEM_READ",
                "event=0x10056",
                Direction::Read,
                Locality::Any,
                1,
                "libpfm4 lib/events/power9_events.h PM_MEM_READ (0x10056, \"Reads from Memory from this thread\")",
            ),
            pmc_event(
                "PM_MEM_PREF",
                "event=0x2c058",
                Direction::Read,
                Locality::Any,
                2,
                "libpfm4 lib/events/power9_events.h PM_MEM_PREF (0x2c058, \"Memory prefetch for this thread\")",
            ),
            pmc_event(
                "PM_MEM_RWITM",
                "event=0x3c05e",
                Direction::Read,
                Locality::Any,
                3,
                "libpfm4 lib/events/power9_events.h PM_MEM_RWITM (0x3c05e, \"Memory Read With Intent to Modify for this thread\")",
            ),
            pmc_event(
                "PM_MEM_CO",
                "event=0x4c058",
                Direction::Write,
                Locality::Any,
                4,
                "libpfm4 lib/events/power9_events.h PM_MEM_CO (0x4c058, \"Memory castouts from this thread\")",
            ),
        ],
        alt_write: None,
        notes: vec![
            "the three read events (demand/instruction/L1-prefetch reads, L2/L3 prefetches, \
             read-with-intent-to-modify) add up to one read weight",
            "each event is bound to its own PMC (1-4): together they take all four \
             programmable counters of the thread",
            "the PM_MEM_* events do not tell local from remote memory (PM_DATA_FROM_LMEM/RMEM \
             count demand loads only)",
        ],
    }
}

/// POWER10: the per-thread `PM_MEM_*` reads (no castout event).
fn power10() -> CoreTraffic {
    CoreTraffic {
        model: "POWER10",
        events: vec![
            pmc_event(
                "PM_MEM_READ",
                "event=0x10056",
                Direction::Read,
                Locality::Any,
                1,
                "libpfm4 lib/events/power10_events.h PM_MEM_READ (0x10056)",
            ),
            pmc_event(
                "PM_MEM_PREF",
                "event=0x2c058",
                Direction::Read,
                Locality::Any,
                2,
                "libpfm4 lib/events/power10_events.h PM_MEM_PREF (0x2c058)",
            ),
            pmc_event(
                "PM_MEM_RWITM",
                "event=0x3c05e",
                Direction::Read,
                Locality::Any,
                3,
                "libpfm4 lib/events/power10_events.h PM_MEM_RWITM (0x3c05e)",
            ),
        ],
        alt_write: None,
        notes: vec![
            "the three read events add up to one read weight",
            "POWER10 has no PM_MEM_CO: writes are spread by the read weight",
            "the PM_MEM_* events do not tell local from remote memory",
        ],
    }
}

/// The stall pair of each POWER generation; None for one imc has no table for.
fn stall_table(generation: &str) -> Option<CoreStall> {
    let cycles = StallEvent {
        name: "PM_RUN_CYC",
        terms: "event=0x600f4",
        counter_mask: None,
        fixed: true,
        source: "linux arch/powerpc/perf/power9-events-list.h PM_RUN_CYC (0x600f4, PMC6)",
    };
    let (model, stalled) = match generation {
        "POWER8" => (
            "POWER8",
            StallEvent {
                name: "PM_CMPLU_STALL_DMISS_L3MISS",
                terms: "event=0x4c01a",
                counter_mask: Some(1 << 3),
                fixed: false,
                source: "libpfm4 lib/events/power8_events.h PM_CMPLU_STALL_DMISS_L3MISS (0x4c01a)",
            },
        ),
        "POWER9" => (
            "POWER9",
            StallEvent {
                name: "PM_CMPLU_STALL_DMISS_L3MISS",
                terms: "event=0x4c01a",
                counter_mask: Some(1 << 3),
                fixed: false,
                source: "linux tools/perf/pmu-events/arch/powerpc/power9/other.json PM_CMPLU_STALL_DMISS_L3MISS (0x4C01A)",
            },
        ),
        "POWER10" => (
            "POWER10",
            StallEvent {
                name: "PM_EXEC_STALL_DMISS_L3MISS",
                terms: "event=0x2c018",
                counter_mask: Some(1 << 1),
                fixed: false,
                source: "linux tools/perf/pmu-events/arch/powerpc/power10 JSON PM_EXEC_STALL_DMISS_L3MISS (0x2C018)",
            },
        ),
        _ => return None,
    };
    Some(CoreStall {
        model,
        stalled,
        cycles,
        generic_counters: 4,
        watchdog: Watchdog::None,
        notes: vec![
            "the stall event is bound to one PMC (the PMC field of its code): it fits only where \
             no weight holds that PMC",
        ],
    })
}
