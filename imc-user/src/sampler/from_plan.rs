//! A [`Plan`] of a sampling command turned into the sampler's configuration: CPU slots opened on
//! every CPU, package counters grouped per package with the CPUs whose ticks read them.
use super::{PackageCounter, ReaderGroup, SamplerConfig, SlotPlan, TickProgram, TickSource};
use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};
use crate::plan::{Plan, Reader};

/// The sampler's configuration for `plan` on `cpus` (the online CPUs), drained every
/// `drain_period_ms`.
pub fn config_of(plan: &Plan, cpus: &[u32], drain_period_ms: u32, bpf_log: bool) -> SamplerConfig {
    SamplerConfig {
        tick: match (plan.tick.source, plan.tick.hz) {
            ("cpu-clock", Some(hz)) => TickSource::CpuClock {
                freq: hz as u32,
                switches: plan.tick.switches,
            },
            _ => TickSource::Kernel,
        },
        slots: slot_plans(plan, cpus),
        groups: reader_groups(plan),
        cpus: cpus.to_vec(),
        ring_bytes: None,
        drain_period_ms,
        bpf_log,
        tick_program: TickProgram::Imc,
        // Per-task aggregates on the kernel's tick; `--freq --precise` asked for every switch.
        aggregate: plan.tick.source != "cpu-clock",
    }
}

/// What attribution needs of each slot.
pub fn slot_specs(plan: &Plan) -> Vec<SlotSpec> {
    plan.slots
        .iter()
        .map(|s| SlotSpec {
            event: s.event.clone(),
            scope: if s.scope == "package" {
                SlotScope::Package
            } else {
                SlotScope::Cpu
            },
            role: match s.role {
                "traffic" => SlotRole::Traffic(s.direction.unwrap_or(Direction::Total)),
                "weight" if s.remote => SlotRole::RemoteWeight(s.direction),
                "weight" => SlotRole::Weight(s.direction),
                "stall" => SlotRole::Stall(s.stall.unwrap_or(crate::model::StallPart::Stalled)),
                _ => SlotRole::Other,
            },
            bytes_per_count: s.bytes_per_count,
            // Package slots carry sums of the kernel's 64-bit counts.
            counter_bits: 64,
        })
        .collect()
}

fn slot_plans(plan: &Plan, cpus: &[u32]) -> Vec<SlotPlan> {
    slot_specs(plan)
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            if spec.scope == SlotScope::Package {
                return SlotPlan::package(spec);
            }
            // A weight slot of a hybrid part has a counter per core PMU, each on its CPUs.
            let parts: Vec<(&crate::model::Encoded, Vec<u32>)> = plan
                .counters
                .iter()
                .filter(|c| c.slot == Some(i))
                .map(|c| {
                    let on = c.cpus.iter().copied().filter(|x| cpus.contains(x));
                    (&c.encoded, on.collect())
                })
                .collect();
            SlotPlan::per_cpu_parts(spec, &parts)
        })
        .collect()
}

fn reader_groups(plan: &Plan) -> Vec<ReaderGroup> {
    let mut groups: Vec<ReaderGroup> = Vec::new();
    for c in plan.counters.iter().filter(|c| c.package.is_some()) {
        let (Some(package), Some(slot), Some(&open_cpu)) = (c.package, c.slot, c.cpus.first())
        else {
            continue;
        };
        let readers = match &c.reader {
            Reader::PackageTick { cpus, .. } => cpus.clone(),
            _ => Vec::new(),
        };
        let counter = PackageCounter {
            slot,
            open_cpu,
            attr: super::counting_attr(&c.encoded),
            name: format!("{}/{}", c.pmu, c.event),
            channel: plan.channel_label(c),
        };
        match groups.iter_mut().find(|g| g.package == package) {
            Some(g) => g.counters.push(counter),
            None => groups.push(ReaderGroup {
                package,
                readers,
                counters: vec![counter],
            }),
        }
    }
    groups
}
