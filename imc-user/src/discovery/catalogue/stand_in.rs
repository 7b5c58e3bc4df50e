//! The stand-ins every machine has, for runs without a memory controller: the `msr` PMU's TSC
//! and the software PMU's page faults. Neither counts memory traffic; each says so.
use super::want::{Ctx, Spec, Want, build, unavailable};
use crate::model::{BackendKind, Source, SourceEvent, SourcePmu};

pub(super) fn msr(ctx: &Ctx) -> Source {
    let kind = BackendKind::Msr;
    let Some(p) = ctx.pmu("msr") else {
        return unavailable(kind, "no msr PMU");
    };
    if !p.events.contains_key("tsc") {
        return unavailable(
            kind,
            format!("{}: no tsc event", p.path.join("events").display()),
        );
    }
    let want = Want {
        name: "tsc",
        direction: None,
        spec: Spec::Alias("tsc"),
    };
    let mut s = build(ctx, kind, &[p], &[want], 64, Some(STAND_IN.into()));
    for pm in &mut s.pmus {
        pm.cpus = ctx.topo.online.clone();
    }
    s
}

const STAND_IN: &str = "stand-in, not a memory-controller counter (readable in a VM)";

pub(super) fn software(ctx: &Ctx) -> Source {
    let kind = BackendKind::Software;
    let Some(p) = ctx.pmu("software") else {
        return unavailable(kind, "no software PMU in sysfs");
    };
    // The software PMU has no format/ or events/; its configs are the perf ABI's
    // enum perf_sw_ids (include/uapi/linux/perf_event.h): PERF_COUNT_SW_PAGE_FAULTS = 2.
    Source {
        backend: kind,
        available: true,
        reason: Some(STAND_IN.into()),
        pmus: vec![SourcePmu {
            name: p.name.clone(),
            pmu_type: p.pmu_type,
            cpus: ctx.topo.online.clone(),
        }],
        events: vec![SourceEvent {
            name: "page-faults".into(),
            pmu: p.name.clone(),
            config: Some(2),
            config1: Some(0),
            config2: None,
            bytes_per_count: None,
            address: None,
            width: None,
            direction: None,
            sub_channel: None,
            counter_bits: 64,
            origin: "PERF_COUNT_SW_PAGE_FAULTS".into(),
        }],
    }
}
