//! Arm servers' memory side: NVIDIA Grace's SCF (one PMU per socket), Arm's CMN mesh (Graviton,
//! Ampere Altra: the home nodes' requests to memory), Arm's DMC-620 and HiSilicon's DDRC (one PMU
//! per DRAM channel), and AmpereOne's MCU (one per channel). Each instance is read on the CPU
//! its driver names in `cpumask`; the instances the driver's files do not allow are refused one
//! by one.
use super::instances::{Event, Rule, instances};
use super::want::{Ctx, unavailable};
use crate::model::{BackendKind, Direction, Pmu, PmuLimits, Source};

fn no_check(_: &Pmu) -> Result<(), String> {
    Ok(())
}

/// PMUs whose names start with `prefix`, in name order (numbering may have gaps, and DMC-620
/// instances are named by address).
fn named<'a>(ctx: &'a Ctx, prefix: &str) -> Vec<&'a Pmu> {
    let mut v: Vec<&Pmu> = ctx
        .pmus
        .iter()
        .filter(|p| p.name.starts_with(prefix))
        .collect();
    v.sort_by(|a, b| (a.name.len(), a.name.as_str()).cmp(&(b.name.len(), b.name.as_str())));
    v
}

pub(super) fn nvidia_scf(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::NvidiaScf;
    let pmus = ctx.numbered("nvidia_scf_pmu_");
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no nvidia_scf_pmu_N PMU (NVIDIA Grace with the arm_cspmu_module and nvidia_cspmu drivers)",
        )];
    }
    // drivers/perf/arm_cspmu/nvidia_cspmu.c scf_pmu_event_attrs: cmem_rd_data 0x1a5 (reads of
    // this socket's CPU memory, from this socket's and the other's CPUs), cmem_wr_total_bytes
    // 0x1db; NVIDIA's Grace tuning guide turns them into bandwidth as cmem_rd_data × 32 bytes
    // and cmem_wr_total_bytes as bytes.
    const SRC: &str = "nvidia_cspmu.c scf_pmu_event_attrs; NVIDIA Grace Performance Tuning Guide";
    let events = [
        Event {
            direction: Direction::Read,
            alias: "cmem_rd_data",
            bytes_per_count: 32.0,
            source: SRC,
        },
        Event {
            direction: Direction::Write,
            alias: "cmem_wr_total_bytes",
            bytes_per_count: 1.0,
            source: SRC,
        },
    ];
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "",
        needs_formats: &[("event", "arm_cspmu's event field, config:0-32")],
        check: &no_check,
    };
    instances(ctx, &rule, &pmus)
}

pub(super) fn arm_cmn(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::ArmCmn;
    let pmus = ctx.numbered("arm_cmn_");
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no arm_cmn_N PMU (Arm CMN-600/650/700 mesh: Graviton 2/3/4, Ampere Altra; the arm-cmn driver)",
        )];
    }
    // drivers/perf/arm-cmn.c: HN-F event mc_reqs = type 0x5 (CMN_TYPE_HNF), eventid 0x0d,
    // requests the home nodes send to the memory controllers, a 64-byte line each. With
    // bynodeid=0 the driver counts it on every HN-F of the mesh and sums them; the format's
    // node filter (bynodeid config:31, nodeid config:32-47) is what makes that explicit. The
    // mesh is counted whole, never node by node: Documentation/admin-guide/perf/arm-cmn.rst,
    // each XP's DTM has 4 local counters and the DTC 8 global ones, a node-filtered event takes
    // a global counter of its own, and the node ids come from debugfs alone.
    let events = [Event {
        direction: Direction::Total,
        alias: "hnf_mc_reqs",
        bytes_per_count: 64.0,
        source: "arm-cmn.c CMN_EVENT_HNF mc_reqs 0x0d, one 64-byte line a request",
    }];
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "bynodeid=0",
        needs_formats: &[
            ("type", "the node type of arm-cmn's events"),
            ("eventid", "the event within the node type"),
            (
                "bynodeid",
                "the node filter: without it imc cannot say which home nodes a count covers",
            ),
            ("nodeid", "the node filter's node"),
        ],
        check: &no_check,
    };
    instances(ctx, &rule, &pmus)
}

pub(super) fn arm_dmc620(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::ArmDmc620;
    let pmus = named(ctx, "arm_dmc620_");
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no arm_dmc620_ADDR PMU (Arm DMC-620 memory controllers: Ampere Altra; the arm_dmc620_pmu driver)",
        )];
    }
    // drivers/perf/arm_dmc620_pmu.c: clkdiv2_rdwr = event 0x12 with clkdiv2=1, the read and
    // write commands the controller issues to DRAM; one command is a BL8 burst of a 64-bit
    // channel, 64 bytes.
    let events = [Event {
        direction: Direction::Total,
        alias: "clkdiv2_rdwr",
        bytes_per_count: 64.0,
        source: "arm_dmc620_pmu.c clkdiv2_rdwr 0x12, a 64-byte burst a command",
    }];
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "",
        needs_formats: &[
            ("event", "config2:3-8"),
            ("clkdiv2", "config2:9, the clock domain"),
        ],
        check: &no_check,
    };
    instances(ctx, &rule, &pmus)
}

/// `hisi_scclX_ddrcY` (and `hisi_scclX_ddrcY_Z` of newer parts).
fn is_ddrc(name: &str) -> bool {
    name.strip_prefix("hisi_sccl")
        .and_then(|r| r.split_once("_ddrc"))
        .is_some_and(|(sccl, _)| !sccl.is_empty() && sccl.bytes().all(|b| b.is_ascii_digit()))
}

pub(super) fn hisi_ddrc(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::HisiDdrc;
    let mut pmus: Vec<&Pmu> = ctx.pmus.iter().filter(|p| is_ddrc(&p.name)).collect();
    pmus.sort_by(|a, b| (a.name.len(), a.name.as_str()).cmp(&(b.name.len(), b.name.as_str())));
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no hisi_scclX_ddrcY PMU (HiSilicon Kunpeng; the hisi_uncore_ddrc_pmu driver)",
        )];
    }
    // drivers/perf/hisilicon/hisi_uncore_ddrc_pmu.c: flux_wr 0x00, flux_rd 0x01 (each on its
    // own fixed counter); tools/perf/pmu-events/arch/arm64/hisilicon/hip09/sys/uncore-ddrc.json
    // ddrc_bw_read = flux_rd × 32 / duration_time, ddrc_bw_write likewise: 32 bytes a count.
    const SRC: &str =
        "hisi_uncore_ddrc_pmu.c; perf hip09 uncore-ddrc.json ddrc_bw_*, 32 bytes a count";
    let events = [
        Event {
            direction: Direction::Read,
            alias: "flux_rd",
            bytes_per_count: 32.0,
            source: SRC,
        },
        Event {
            direction: Direction::Write,
            alias: "flux_wr",
            bytes_per_count: 32.0,
            source: SRC,
        },
    ];
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "",
        needs_formats: &[("event", "config:0-4")],
        check: &no_check,
    };
    instances(ctx, &rule, &pmus)
}

pub(super) fn ampere_mcu(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::AmpereMcu;
    let pmus = ctx.numbered("ampere_mcu_pmu_");
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no ampere_mcu_pmu_N PMU (AmpereOne with the arm_cspmu_module and ampere_cspmu drivers)",
        )];
    }
    // drivers/perf/arm_cspmu/ampere_cspmu.c: rd_rda_sent 0x0f and wr_wra_sent 0x10, the reads
    // and writes (with or without auto-precharge) sent to DRAM, a 64-byte burst each.
    const SRC: &str = "ampere_cspmu.c ampereone_mcu_pmu_event_attrs, a 64-byte burst a command";
    let events = [
        Event {
            direction: Direction::Read,
            alias: "rd_rda_sent",
            bytes_per_count: 64.0,
            source: SRC,
        },
        Event {
            direction: Direction::Write,
            alias: "wr_wra_sent",
            bytes_per_count: 64.0,
            source: SRC,
        },
    ];
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "",
        needs_formats: &[("event", "arm_cspmu's event field")],
        check: &no_check,
    };
    instances(ctx, &rule, &pmus)
}

/// What the driver of a memory-side PMU instance allows, by its name; None for PMUs whose
/// limits the plan already states another way.
pub fn pmu_limits(pmu: &str) -> Option<PmuLimits> {
    let l = |counters, per_group, bits, rule: &str| {
        Some(PmuLimits {
            counters,
            events_per_group: per_group,
            counter_bits: bits,
            rule: rule.to_string(),
        })
    };
    if pmu.starts_with("arm_dmc620_") {
        return l(
            Some(8),
            Some(1),
            Some(32),
            "arm_dmc620_pmu.c: 8 clkdiv2 and 2 clk counters of 32 bits; a group holds one \
             hardware event (the counters cannot be stopped together), so imc opens each alone",
        );
    }
    if is_ddrc(pmu) {
        return l(
            Some(8),
            None,
            Some(32),
            "hisi_uncore_ddrc_pmu.c: 8 fixed-purpose 32-bit counters, one per event code",
        );
    }
    if pmu.starts_with("ampere_mcu_pmu_") {
        return l(
            None,
            None,
            None,
            "ampere_cspmu.c: every event of one instance must share its threshold, rank and \
             bank filter (imc leaves all three 0)",
        );
    }
    if pmu.starts_with("nvidia_scf_pmu_") {
        return l(
            None,
            None,
            None,
            "arm_cspmu: counters read on the cpumask CPU only, one of associated_cpus",
        );
    }
    if pmu.starts_with("arm_cmn_") {
        return l(
            Some(8),
            None,
            None,
            "arm-cmn.c: 8 counters per DTC, and 4 per crosspoint for the nodes under it; an \
             event without a node filter takes one on every home node, and the DTC sums them \
             into one: the whole mesh is counted. A count per home node would take a global \
             counter each, more than a mesh with more home nodes than that has, and its node \
             id is shown only by debugfs (arm-cmn/map); addresses are hashed over the home \
             nodes, so one node's count is not a channel's either",
        );
    }
    if pmu.starts_with("cxl_pmu_mem") {
        return l(
            None,
            None,
            None,
            "cxl_pmu.c: counters and their width are the device's own (CPMU capability \
             register); no sampling, no per-task events",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddrc_names_are_the_drivers() {
        assert!(is_ddrc("hisi_sccl1_ddrc0"));
        assert!(is_ddrc("hisi_sccl13_ddrc3_1"));
        assert!(!is_ddrc("hisi_sccl_ddrc0"));
        assert!(!is_ddrc("hisi_sccl1_hha0"));
        assert!(!is_ddrc("hisi_sccl1x_ddrc0"));
    }

    #[test]
    fn limits_follow_the_driver_of_each_instance() {
        let dmc = pmu_limits("arm_dmc620_10008c000").unwrap();
        assert_eq!(
            (dmc.counters, dmc.events_per_group, dmc.counter_bits),
            (Some(8), Some(1), Some(32))
        );
        let ddrc = pmu_limits("hisi_sccl3_ddrc1").unwrap();
        assert_eq!((ddrc.counters, ddrc.counter_bits), (Some(8), Some(32)));
        assert!(pmu_limits("cxl_pmu_mem0.0").is_some());
        // Other vendors' PMUs state their limits elsewhere in the plan.
        assert_eq!(pmu_limits("uncore_imc_0"), None);
        assert_eq!(pmu_limits("amd_df"), None);
    }
}
