//! Loaded latency: the events whose ratio is the average time a DRAM access waits, per channel
//! (Intel's memory-controller queues) or per CCX (AMD's L3 sampled DRAM-fill latency), or why
//! this machine has none.
//!
//! Intel: average latency = queue occupancy ÷ queue inserts, in DRAM clocks (each DRAM clock
//! the occupancy counter adds the requests waiting; Little's law). The clock rate comes from
//! the box's fixed counter (uncore.c: config 0xff, UNCORE_FIXED_EVENT, selects the box's fixed
//! counter; skx/icx/spr/gnr_uncore_imc all have `fixed_ctr`, counting DRAM clocks), so the
//! latency is also in ns. Encodings from Linux perf's pmu-events JSON (`Unit: iMC`, `Counter:
//! 0,1,2,3`: four generic counters per channel) and Intel's perfmon tables they are generated
//! from:
//! - skylakex/cascadelakex uncore-memory.json: UNC_M_RPQ_OCCUPANCY 0x80, UNC_M_RPQ_INSERTS
//!   0x10, UNC_M_WPQ_OCCUPANCY 0x81, UNC_M_WPQ_INSERTS 0x20.
//! - icelakex uncore-memory.json: UNC_M_RPQ_OCCUPANCY_PCH0/PCH1 0x80/0x81,
//!   UNC_M_RPQ_INSERTS.PCH0/PCH1 0x10 umask 0x01/0x02, UNC_M_WPQ_OCCUPANCY_PCH0/PCH1 0x82/0x83,
//!   UNC_M_WPQ_INSERTS.PCH0/PCH1 0x20 umask 0x01/0x02.
//! - sapphirerapids (and emeraldrapids) uncore-memory.json: the same codes as icelakex,
//!   UNC_M_WPQ_INSERTS.PCH0/1 0x20 umask 0x01/0x02 (0x22 is Granite Rapids' code only).
//! - graniterapids (and sierraforest) uncore-memory.json, per sub-channel (scheduler) and
//!   pseudo-channel: UNC_M_RPQ_OCCUPANCY_SCH{s}_PCH{p} 0x80 + 2s + p, UNC_M_RPQ_INSERTS.SCH{s}_PCH{p}
//!   0x10 umask 0x10 << (2s + p), UNC_M_WPQ_OCCUPANCY_SCH{s}_PCH{p} 0x84 + 2s + p,
//!   UNC_M_WPQ_INSERTS.SCH{s}_PCH{p} 0x22 umask 0x10 << (2s + p).
//!
//! AMD Zen 4/5: the L3 samples DRAM fills; perf amdzen4/amdzen5 cache.json
//! l3_xi_sampled_latency.dram_near/.dram_far (EventCode 0xac, UMask 0x01/0x02) and
//! l3_xi_sampled_latency_requests.dram_near/.dram_far (0xad, 0x01/0x02), each with EnAllCores,
//! EnAllSlices, SliceId 0x3, ThreadMask 0x3; recommended.json's l3_read_miss_latency metrics
//! divide the first by the second and multiply by 10 for ns. Six counters per L3 (amd/uncore.c
//! NUM_COUNTERS_L3).
use super::intel::{IntelQueues, is_knl, server_model_family};
use super::want::{Ctx, designated_cpus_all};
use crate::discovery::format::encode_terms;
use crate::model::{Pmu, QueueEvent, QueuePart, Queues};

/// One event as (part, sub-channel, pseudo-channel, terms, rank, fixed).
type Want = (
    QueuePart,
    Option<u32>,
    Option<u32>,
    String,
    u8,
    bool,
    &'static str,
);

const FIXED_CLOCKS: &str = "event=0xff";
const SRC_FIXED: &str = "uncore.c UNCORE_FIXED_EVENT: the box's fixed DRAM-clock counter";

fn intel_wants(q: IntelQueues) -> Vec<Want> {
    use QueuePart::*;
    let mut v: Vec<Want> = vec![(
        DramClocks,
        None,
        None,
        FIXED_CLOCKS.into(),
        0,
        true,
        SRC_FIXED,
    )];
    match q {
        IntelQueues::Skx => {
            const S: &str = "skylakex uncore-memory.json";
            v.push((ReadOccupancy, None, None, "event=0x80".into(), 0, false, S));
            v.push((ReadInserts, None, None, "event=0x10".into(), 0, false, S));
            v.push((WriteOccupancy, None, None, "event=0x81".into(), 1, false, S));
            v.push((WriteInserts, None, None, "event=0x20".into(), 1, false, S));
        }
        IntelQueues::Icx | IntelQueues::Spr => {
            let s = if q == IntelQueues::Icx {
                "icelakex uncore-memory.json"
            } else {
                "sapphirerapids uncore-memory.json"
            };
            for p in 0..2u32 {
                let pch = Some(p);
                // Pseudo-channel 0's read queue first; then the other's; writes last.
                let occ = format!("event={:#x}", 0x80 + p);
                let ins = format!("event=0x10,umask={:#x}", 1 << p);
                v.push((ReadOccupancy, None, pch, occ, p as u8, false, s));
                v.push((ReadInserts, None, pch, ins, p as u8, false, s));
            }
            for p in 0..2u32 {
                let pch = Some(p);
                let occ = format!("event={:#x}", 0x82 + p);
                let ins = format!("event=0x20,umask={:#x}", 1 << p);
                v.push((WriteOccupancy, None, pch, occ, 2 + p as u8, false, s));
                v.push((WriteInserts, None, pch, ins, 2 + p as u8, false, s));
            }
        }
        IntelQueues::Gnr => {
            const S: &str = "graniterapids uncore-memory.json";
            // Rank: pseudo-channel 0's read queue of both sub-channels first (one latency per
            // sub-channel), then pseudo-channel 1's, then the write queues alike.
            for (write, base_occ, ins_code) in [(false, 0x80, 0x10), (true, 0x84, 0x22)] {
                for p in 0..2u32 {
                    for s in 0..2u32 {
                        let i = 2 * s + p;
                        let rank = u8::from(write) * 2 + p as u8;
                        let (occ_part, ins_part) = if write {
                            (WriteOccupancy, WriteInserts)
                        } else {
                            (ReadOccupancy, ReadInserts)
                        };
                        let occ = format!("event={:#x}", base_occ + i);
                        let ins = format!("event={ins_code:#x},umask={:#x}", 0x10 << i);
                        v.push((occ_part, Some(s), Some(p), occ, rank, false, S));
                        v.push((ins_part, Some(s), Some(p), ins, rank, false, S));
                    }
                }
            }
        }
    }
    v
}

fn none(reason: impl Into<String>) -> Queues {
    Queues {
        reason: Some(reason.into()),
        ..Queues::default()
    }
}

/// Encodes `wants` on every PMU of `pmus`; a term the PMU's formats lack makes the whole
/// source unavailable, with the file named.
fn encode_all(
    ctx: &Ctx,
    kind: &'static str,
    pmus: &[&Pmu],
    wants: &[Want],
    generic: usize,
    all_cpus: bool,
) -> Queues {
    let mut events = Vec::new();
    for pmu in pmus {
        for (part, sub, pch, terms, rank, fixed, src) in wants {
            let words = match encode_terms(pmu, terms) {
                Ok(w) => w,
                Err(e) => {
                    return none(format!(
                        "{}: {terms}: {}",
                        pmu.path.join("format").display(),
                        crate::text::error_line(&e)
                    ));
                }
            };
            events.push(QueueEvent {
                pmu: pmu.name.clone(),
                part: *part,
                sub_channel: *sub,
                pseudo_channel: *pch,
                config: words.config,
                config1: words.config1,
                fixed: *fixed,
                rank: *rank,
                origin: format!("{terms} ({src})"),
            });
        }
    }
    let pmus = pmus
        .iter()
        .map(|p| {
            let mut sp = ctx.source_pmu(p);
            if all_cpus && let Some(mask) = &p.cpumask {
                sp.cpus = designated_cpus_all(ctx.topo, mask);
            }
            sp
        })
        .collect();
    Queues {
        kind,
        pmus,
        events,
        generic_counters: generic,
        reason: None,
    }
}

/// The loaded-latency events of this machine, or why there are none.
pub(crate) fn queues(ctx: &Ctx) -> Queues {
    if ctx.machine.hypervisor {
        return none(
            "running under a hypervisor: guests see no memory-controller queues or L3 counters",
        );
    }
    if is_knl(ctx) {
        return none(
            "Knights Landing/Mill: loaded latency comes from the cores' OFFCORE_RESPONSE pair \
             (stat --latency REQUEST-TYPES), not from controller queues",
        );
    }
    let imcs = ctx.numbered("uncore_imc_");
    if !imcs.is_empty() {
        let Some(q) = ctx.machine.intel_model().and_then(server_model_family) else {
            return none(format!(
                "imc has no queue encodings for CPU model {} (Skylake-SP, Cascade Lake, Ice \
                 Lake-SP, Sapphire/Emerald Rapids, Granite Rapids and Sierra Forest have them)",
                ctx.machine
                    .intel_model()
                    .map_or("unknown".into(), |m| format!("{m:#x}"))
            ));
        };
        // Four generic counters per IMC box (pmu-events `Counter: 0,1,2,3`; skx/icx/spr
        // uncore_imc num_counters = 4), the DRAM clock on the fixed counter.
        return encode_all(ctx, "intel-imc-queues", &imcs, &intel_wants(q), 4, false);
    }
    if ctx.machine.vendor.as_deref() == Some("AuthenticAMD") {
        let (family, model) = (
            ctx.machine.family.unwrap_or(0),
            ctx.machine.model.unwrap_or(0),
        );
        let zen4 = family == 0x19 && matches!(model, 0x10..=0x1f | 0x60..=0x7f | 0x90..=0xaf);
        let zen5 = family == 0x1a;
        if !(zen4 || zen5) {
            return none(format!(
                "AMD family {family:#x} model {model:#x} (Zen 1-3): the L3 has no sampled \
                 DRAM-latency events (perf's amdzen1-3 pmu-events list none) and the data \
                 fabric counts no queue occupancy"
            ));
        }
        let Some(l3) = ctx.pmu("amd_l3") else {
            return none("no amd_l3 PMU in sysfs (the AMD uncore driver is not loaded)");
        };
        const S: &str = "amdzen4/amdzen5 cache.json";
        let all = "enallcores=1,enallslices=1,sliceid=0x3,threadmask=0x3";
        let mut wants: Vec<Want> = Vec::new();
        for (remote, umask) in [(false, 1), (true, 2)] {
            let rank = u8::from(remote);
            wants.push((
                QueuePart::SampledLatency { remote },
                None,
                None,
                format!("event=0xac,umask={umask:#x},{all}"),
                rank,
                false,
                S,
            ));
            wants.push((
                QueuePart::SampledRequests { remote },
                None,
                None,
                format!("event=0xad,umask={umask:#x},{all}"),
                rank,
                false,
                S,
            ));
        }
        return encode_all(ctx, "amd-l3-sampled-latency", &[l3], &wants, 6, true);
    }
    if !ctx.numbered("uncore_imc_free_running_").is_empty() || ctx.pmu("uncore_imc").is_some() {
        return none(
            "an Intel client memory controller: its counters are free-running byte counts, \
             with no queue occupancy",
        );
    }
    none(
        "no memory-controller PMU with queue occupancy (Intel server uncore_imc_N, AMD Zen 4+ amd_l3)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnr_queues_follow_the_graniterapids_table() {
        let w = intel_wants(IntelQueues::Gnr);
        let find = |part, s, p| {
            w.iter()
                .find(|x| x.0 == part && x.1 == Some(s) && x.2 == Some(p))
                .map(|x| x.3.clone())
                .unwrap()
        };
        // UNC_M_RPQ_OCCUPANCY_SCH1_PCH0 = 0x82, UNC_M_RPQ_INSERTS.SCH1_PCH0 umask 0x40.
        assert_eq!(find(QueuePart::ReadOccupancy, 1, 0), "event=0x82");
        assert_eq!(find(QueuePart::ReadInserts, 1, 0), "event=0x10,umask=0x40");
        // UNC_M_WPQ_OCCUPANCY_SCH0_PCH1 = 0x85, UNC_M_WPQ_INSERTS.SCH0_PCH1 umask 0x20.
        assert_eq!(find(QueuePart::WriteOccupancy, 0, 1), "event=0x85");
        assert_eq!(find(QueuePart::WriteInserts, 0, 1), "event=0x22,umask=0x20");
        // The first rank: pseudo-channel 0's read queue of each sub-channel, four counters.
        let rank0 = w.iter().filter(|x| x.4 == 0 && !x.5).count();
        assert_eq!(rank0, 4);
    }

    #[test]
    fn icx_and_spr_count_write_inserts_by_one_code() {
        // Intel's perfmon tables (the kernel's sapphirerapids/uncore-memory.json): SPR's
        // UNC_M_WPQ_INSERTS.PCH0/1 are 0x20 as on ICX; 0x22 is Granite Rapids' code.
        let ins = |q| {
            intel_wants(q)
                .into_iter()
                .find(|x| x.0 == QueuePart::WriteInserts && x.2 == Some(1))
                .unwrap()
                .3
        };
        assert_eq!(ins(IntelQueues::Icx), "event=0x20,umask=0x2");
        assert_eq!(ins(IntelQueues::Spr), "event=0x20,umask=0x2");
    }
}
