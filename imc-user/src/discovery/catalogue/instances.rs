//! Backends whose PMU instances stand alone (one per socket, channel or mesh, as on Arm servers
//! and CXL devices): every instance that checks out is planned, and each one that does not is
//! refused on its own, in one line naming the instance and the fix, beside the rest.
use super::want::{Ctx, Spec, Want, encode};
use crate::discovery::sysfs::{DiscoveryError, read_cpulist_file};
use crate::model::{BackendKind, Direction, Pmu, Source, SourceEvent, SourcePmu};

/// One bandwidth event an instance must have: its sysfs alias, the direction it counts, the
/// bytes one count stands for, and where that figure comes from.
pub(super) struct Event {
    pub direction: Direction,
    pub alias: &'static str,
    pub bytes_per_count: f64,
    pub source: &'static str,
}

/// What a backend asks of each of its instances.
pub(super) struct Rule<'a> {
    pub kind: BackendKind,
    pub events: &'a [Event],
    /// Format terms appended to every alias (CMN: `bynodeid=0`, every home node).
    pub extra_terms: &'a str,
    /// Format files the encoding relies on, each with why.
    pub needs_formats: &'a [(&'a str, &'a str)],
    /// Checked for every instance before its events: a reason refuses it.
    pub check: &'a dyn Fn(&Pmu) -> Result<(), String>,
}

/// The instances' events, one source for those that check out and one refused entry per
/// instance that does not (with the instance as its PMU, so that the plan names it).
pub(super) fn instances(ctx: &Ctx, rule: &Rule, pmus: &[&Pmu]) -> Vec<Source> {
    let mut good: Vec<SourcePmu> = Vec::new();
    let mut events: Vec<SourceEvent> = Vec::new();
    let mut refused: Vec<Source> = Vec::new();
    for pmu in pmus {
        match instance(ctx, rule, pmu) {
            Ok((sp, mut evs)) => {
                good.push(sp);
                events.append(&mut evs);
            }
            Err(why) => refused.push(Source {
                backend: rule.kind,
                available: false,
                reason: Some(why),
                pmus: vec![SourcePmu {
                    name: pmu.name.clone(),
                    pmu_type: pmu.pmu_type,
                    cpus: Vec::new(),
                }],
                events: Vec::new(),
            }),
        }
    }
    let first = if good.is_empty() {
        let why = refused
            .first()
            .and_then(|s| s.reason.clone())
            .unwrap_or_else(|| "no instance".into());
        Source {
            backend: rule.kind,
            available: false,
            reason: Some(format!("every instance refused; the first: {why}")),
            pmus: Vec::new(),
            events: Vec::new(),
        }
    } else {
        Source {
            backend: rule.kind,
            available: true,
            reason: None,
            pmus: good,
            events,
        }
    };
    let mut out = vec![first];
    out.append(&mut refused);
    out
}

/// One instance's reader CPU and events, or why it cannot be planned.
fn instance(ctx: &Ctx, rule: &Rule, pmu: &Pmu) -> Result<(SourcePmu, Vec<SourceEvent>), String> {
    let cpu = reader_cpu(ctx, pmu)?;
    for (name, why) in rule.needs_formats {
        if !pmu.formats.contains_key(*name) {
            return Err(format!(
                "{}: missing ({why}); the instance is left out: a kernel whose driver has it \
                 counts it",
                pmu.path.join("format").join(name).display()
            ));
        }
    }
    (rule.check)(pmu)?;
    let mut out = Vec::new();
    for ev in rule.events {
        let Some(alias) = pmu.events.get(ev.alias) else {
            return Err(format!(
                "{}: no event {} (the driver exports it where the hardware counts it); the \
                 instance is left out",
                pmu.path.join("events").display(),
                ev.alias
            ));
        };
        let terms = if rule.extra_terms.is_empty() {
            alias.terms.clone()
        } else {
            format!("{},{}", alias.terms, rule.extra_terms)
        };
        let source = format!("sysfs {}/events/{}; {}", pmu.name, ev.alias, ev.source);
        let want = Want {
            name: ev.direction.name(),
            direction: Some(ev.direction),
            spec: Spec::Terms {
                terms: &terms,
                bytes_per_count: ev.bytes_per_count,
                source: &source,
            },
        };
        // The kernel accumulates these drivers' counts into 64 bits (each handles its
        // hardware counter's overflow), so a read never wraps below 64.
        out.push(encode(pmu, &want, 64)?);
    }
    Ok((
        SourcePmu {
            name: pmu.name.clone(),
            pmu_type: pmu.pmu_type,
            cpus: vec![cpu],
        },
        out,
    ))
}

/// The CPU the driver opens the instance's events on: its `cpumask`, which must name one
/// online CPU, and, where the driver has `associated_cpus` (Arm CoreSight PMUs), one of those.
fn reader_cpu(ctx: &Ctx, pmu: &Pmu) -> Result<u32, String> {
    let mask = pmu.path.join("cpumask");
    let Some(cpus) = &pmu.cpumask else {
        return Err(format!(
            "{}: missing; the driver names the CPU its events are read on there",
            mask.display()
        ));
    };
    let Some(&cpu) = cpus.first() else {
        return Err(format!(
            "{}: empty (every CPU the driver may use is offline); bring one online",
            mask.display()
        ));
    };
    if !ctx.topo.online.contains(&cpu) {
        return Err(format!(
            "{}: names CPU {cpu}, which is offline; bring it online (or reload the driver) so \
             that the driver moves its events to an online CPU",
            mask.display()
        ));
    }
    let assoc = pmu.path.join("associated_cpus");
    if assoc.exists() {
        let allowed =
            read_cpulist_file(&assoc).map_err(|e: DiscoveryError| crate::text::error_line(&e))?;
        if !allowed.contains(&cpu) {
            return Err(format!(
                "{}: CPU {cpu} is not among {} ({}); the tree is inconsistent",
                mask.display(),
                assoc.display(),
                crate::discovery::cpulist::format_cpulist(&allowed)
            ));
        }
    }
    Ok(cpu)
}
