//! A [`Plan`] of a sampling command turned into the sampler's configuration: CPU slots opened on
//! every CPU, package counters grouped per package with the CPUs whose ticks read them.
use super::{PackageCounter, ReaderGroup, SamplerConfig, SlotPlan, TickProgram, TickSource};
use crate::model::{SlotScope, SlotSpec};
use crate::plan::{Plan, Reader};

/// The sampler's configuration for `plan` on `cpus` (the online CPUs), drained every
/// `drain_period_ms`.
pub fn config_of(plan: &Plan, cpus: &[u32], drain_period_ms: u32, bpf_log: bool) -> SamplerConfig {
    SamplerConfig {
        tick: match (plan.tick.source, plan.tick.hz) {
            (crate::plan::TickSource::CpuClock, Some(hz)) => TickSource::CpuClock {
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
        aggregate: plan.records == Some(crate::plan::Records::Aggregated),
        stacks: plan.stacks.as_ref().map(stack_config),
    }
}

/// The plan's `stacks` as the sampler takes them.
fn stack_config(st: &crate::plan::StackPlan) -> super::StackConfig {
    super::StackConfig {
        user: st.user,
        kernel: st.kernel,
        slots_mask: st.weight_slots.iter().fold(0, |m, &s| m | 1 << s),
        map_entries: st.map_entries,
        stack_entries: st.stack_entries,
        spare_entries: st.spare_entries,
        wake_after: st.wake_after,
        overflow: st.period.zip(st.weight_slots.first().copied()),
    }
}

/// What attribution needs of each slot.
pub fn slot_specs(plan: &Plan) -> Vec<SlotSpec> {
    plan.slots.iter().map(crate::plan::Slot::spec).collect()
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
