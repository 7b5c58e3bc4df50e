//! IBM POWER's nest memory-controller PMUs (`nest_*_imc`, POWER9 and later on bare metal).
use super::want::{Ctx, Want, encode, unavailable};
use crate::model::{BackendKind, Direction, Pmu, Source};

pub(super) fn power_nest(ctx: &Ctx) -> Source {
    let kind = BackendKind::PowerNestImc;
    let nest: Vec<&Pmu> = ctx
        .pmus
        .iter()
        .filter(|p| p.name.starts_with("nest_") && p.name.ends_with("_imc"))
        .collect();
    if nest.is_empty() {
        return unavailable(
            kind,
            "no nest_*_imc PMU (POWER9+ bare metal (PowerNV) with IMC firmware)",
        );
    }
    // Two encodings exist; counting both would count the same traffic twice. Prefer the MCS
    // "128B" dispatch events, for which IBM publishes the bandwidth recipe
    // (developer.ibm.com/articles/power9-in-memory-collection-counters): bytes = Σ(count ×
    // .scale) × 64. The event names suggest 128-byte units and the firmware scale of 256
    // suggests prescaled counters, so the ×64 is IBM's word, not derived here; see the README.
    let mcs: Vec<&Pmu> = nest
        .iter()
        .copied()
        .filter(|p| p.name.starts_with("nest_mcs"))
        .collect();
    let (pmus, reason) = if !mcs.is_empty() {
        (
            mcs,
            "IBM's recipe: bytes = scaled 128B_*_DISP counts × 64 (not verified against hardware documentation)",
        )
    } else {
        (
            nest.iter()
                .copied()
                .filter(|p| p.name.starts_with("nest_mba"))
                .collect(),
            "MBA READ_BYTES/WRITE_BYTES: bytes = count × .scale",
        )
    };
    let mut events = Vec::new();
    for pmu in &pmus {
        for alias in pmu.events.values() {
            let n = alias.name.as_str();
            let (dir, mult) = if n.contains("_128B_RD_DISP_") {
                (Direction::Read, 64.0)
            } else if n.contains("_128B_WR_DISP_") {
                (Direction::Write, 64.0)
            } else if n.ends_with("_READ_BYTES") {
                (Direction::Read, 1.0)
            } else if n.ends_with("_WRITE_BYTES") {
                (Direction::Write, 1.0)
            } else {
                continue;
            };
            let want = Want::alias(dir, n);
            match encode(pmu, &want, 64) {
                Ok(mut e) => {
                    e.bytes_per_count = Some(alias.scale.unwrap_or(1.0) * mult);
                    events.push(e);
                }
                Err(why) => return unavailable(kind, why),
            }
        }
    }
    if events.is_empty() {
        return unavailable(
            kind,
            "nest_*_imc PMUs have no *_128B_RD_DISP_* or *_READ_BYTES events",
        );
    }
    Source {
        backend: kind,
        available: true,
        reason: Some(reason.into()),
        pmus: pmus.iter().map(|p| ctx.source_pmu(p)).collect(),
        events,
    }
}
