//! Arm server cores (Neoverse N1/N2/V1/V2, AmpereOne): the architected PMUv3 events that see a
//! task's memory traffic, on the arm_pmuv3 core PMU (format `event` = config:0-15).
//!
//! Encodings are the Arm architecture's common event numbers, as the kernel's
//! tools/perf/pmu-events/arch/arm64/common-and-microarch.json lists them and each core's own
//! JSON (arm/neoverse-n1, neoverse-v1, neoverse-n2-v2, ampere/ampereone cache.json,
//! hisilicon/hip08 core-imp-def.json) declares
//! them implemented: L2D_CACHE_REFILL_RD 0x52 (the L2's read refills from beyond the core: the
//! mesh's system cache or DRAM, a 64-byte line each), L2D_CACHE_WB_VICTIM 0x56 (modified lines
//! the L2 writes back on eviction, 64 bytes each). LL_CACHE_MISS_RD (0x37) would leave the
//! system cache's hits out, but the Neoverse JSON says it counts only while firmware sets
//! CPUECTLR.EXTLLC, so on other machines it reads zero: not a weight to depend on.
use super::table::{CoreTraffic, CoreTrafficEvent, Locality, ev};
use crate::discovery::is_arm_core;
use crate::discovery::machine::{arm_core_name, arm_midr_text};
use crate::model::{Direction, Machine};

/// MIDR implementer and part numbers of the cores with a table (the kernel's
/// arch/arm64/include/asm/cputype.h: ARM_CPU_PART_NEOVERSE_N1 0xd0c, _V1 0xd40, _N2 0xd49,
/// _V2 0xd4f; AMPERE_CPU_PART_AMPERE1 0xac3, AMPERE1A 0xac4; HISI_CPU_PART_TSV110 0xd01, whose
/// tools/perf/pmu-events/arch/arm64/hisilicon/hip08/core-imp-def.json declares both events).
const CORES: [(u32, u32); 7] = [
    (0x41, 0xd0c),
    (0x41, 0xd40),
    (0x41, 0xd49),
    (0x41, 0xd4f),
    (0xc0, 0xac3),
    (0xc0, 0xac4),
    (0x48, 0xd01),
];

/// Whether the machine is an Arm one (cpuinfo names an implementer).
pub(super) fn is_arm(m: &Machine) -> bool {
    m.arm_implementer.is_some()
}

/// The core's name, where imc has a table for it.
pub fn core_name(m: &Machine) -> Option<&'static str> {
    let midr = (m.arm_implementer?, m.arm_part?);
    CORES.contains(&midr).then(|| arm_core_name(m)).flatten()
}

fn event(
    name: &'static str,
    terms: &'static str,
    direction: Direction,
    source: &'static str,
) -> CoreTrafficEvent {
    ev(name, terms, direction, Locality::Any, None, false, source)
}

/// The traffic weights of the Arm core PMU `pmu` on machine `m`.
pub(super) fn traffic(m: &Machine, pmu: &str) -> Result<CoreTraffic, String> {
    if !is_arm_core(pmu) {
        return Err(format!(
            "Arm has no core PMU '{pmu}' (expected armv8_* or armv9_*)"
        ));
    }
    let Some(model) = core_name(m) else {
        return Err(format!(
            "no traffic weight events known for the Arm core of {}",
            arm_midr_text(m)
        ));
    };
    Ok(CoreTraffic {
        model,
        events: vec![
            event(
                "L2D_CACHE_REFILL_RD",
                "event=0x52",
                Direction::Read,
                "linux tools/perf/pmu-events/arch/arm64/common-and-microarch.json L2D_CACHE_REFILL_RD (0x52)",
            ),
            event(
                "L2D_CACHE_WB_VICTIM",
                "event=0x56",
                Direction::Write,
                "linux tools/perf/pmu-events/arch/arm64/common-and-microarch.json L2D_CACHE_WB_VICTIM (0x56)",
            ),
        ],
        alt_write: None,
        notes: vec![
            "L2D_CACHE_REFILL_RD counts the L2's read refills from beyond the core: lines the \
             system level (or L3) cache returns count as well as DRAM's, so a task whose data \
             fits that cache weighs more than its DRAM share (measured by imc validate as the \
             event's fidelity)",
            "L2D_CACHE_WB_VICTIM counts modified lines the L2 evicts: the SLC may absorb some \
             before they reach DRAM",
            "the architected events do not tell local from remote memory on a multi-socket \
             part: one read weight covers both",
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(imp: u32, part: u32) -> Machine {
        Machine {
            arm_implementer: Some(imp),
            arm_part: Some(part),
            ..Default::default()
        }
    }

    #[test]
    fn every_neoverse_and_ampere_core_has_a_read_and_a_write_weight() {
        for (imp, part) in CORES {
            let t = traffic(&arm(imp, part), "armv8_pmuv3_0").unwrap();
            let name = arm_core_name(&arm(imp, part)).expect("every weighed core is named");
            assert_eq!(t.model, name);
            let dirs: Vec<Direction> = t.events.iter().map(|e| e.direction).collect();
            assert_eq!(dirs, [Direction::Read, Direction::Write], "{name}");
            assert!(t.events.iter().all(|e| e.bytes_per_count == 64.0));
        }
    }

    #[test]
    fn an_unknown_core_or_pmu_is_refused_with_its_numbers() {
        // Cortex-A72: no table.
        let e = traffic(&arm(0x41, 0xd08), "armv8_pmuv3_0").unwrap_err();
        assert!(e.contains("0x41") && e.contains("0xd08"), "{e}");
        let e = traffic(&arm(0x41, 0xd4f), "cpu").unwrap_err();
        assert!(e.contains("'cpu'"), "{e}");
    }
}
