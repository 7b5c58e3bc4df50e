//! A plan as a person reads it (`--dry-run` without `--json`).
use super::types::{Counter, Plan, Reader};
use std::fmt::Write;

fn cpus(list: &[u32]) -> String {
    crate::discovery::cpulist::format_cpulist(list)
}

/// Who reads a counter; `switches`: whether context switches read the CPU's counters too (not
/// where records are per tick only).
fn reader(r: &Reader, switches: bool) -> String {
    match r {
        Reader::Tick if switches => "each CPU's tick and context switches, for itself".into(),
        Reader::Tick => "each CPU's tick, for itself (none at switches)".into(),
        Reader::PackageTick {
            cpus: c,
            idle_every_ms,
        } => format!(
            "the tick of {} {} once per tick period (userspace after {idle_every_ms} ms without one)",
            if c.len() == 1 { "CPU" } else { "one of CPUs" },
            cpus(c)
        ),
        Reader::Userspace { every_ms } => format!("userspace every {every_ms} ms"),
        Reader::Interval { every_ms } => {
            format!("userspace at the end of each {every_ms} ms interval")
        }
    }
}

fn counter_line(c: &Counter, switches: bool) -> String {
    let mut where_ = String::new();
    if let Some(p) = c.package {
        let _ = write!(where_, "package {p}");
    }
    if let Some(ch) = c.channel {
        let _ = write!(where_, " channel {ch}");
    }
    if let Some(sub) = c.sub_channel {
        let _ = write!(where_, ".{sub}");
    }
    if let Some(pch) = c.pseudo_channel {
        let _ = write!(where_, " pch {pch}");
    }
    if where_.is_empty() {
        where_ = "every CPU".into();
    }
    let dir = match (c.direction, c.queue) {
        (Some(d), _) => format!("{d:?}").to_lowercase(),
        (None, Some(_)) => "latency".to_string(),
        (None, None) => "-".to_string(),
    };
    let slot = c.slot.map_or(String::new(), |s| format!(" slot {s},"));
    let tier = if c.tier.is_dram() {
        String::new()
    } else {
        format!(" [tier {}]", c.tier.as_str())
    };
    format!(
        "  {where_:<20} {dir:<6} {}/{}{tier}  (on CPU {},{slot} read by {})",
        c.pmu,
        c.event,
        cpus(&c.cpus),
        reader(&c.reader, switches)
    )
}

/// Each distinct driver limit of the plan's counters once, with the PMU instances it covers.
fn limits(s: &mut String, plan: &Plan) {
    let mut seen: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in &plan.counters {
        let Some(l) = &c.limits else { continue };
        match seen.iter_mut().find(|(rule, _)| *rule == l.rule) {
            Some((_, pmus)) if !pmus.contains(&c.pmu.as_str()) => pmus.push(&c.pmu),
            Some(_) => {}
            None => seen.push((&l.rule, vec![&c.pmu])),
        }
    }
    for (rule, pmus) in seen {
        let _ = writeln!(s, "limits: {} — {rule}", pmus.join(", "));
    }
}

/// How traffic is divided, who the victims are and what latency is read (sampling commands).
fn how_divided(s: &mut String, plan: &Plan) {
    if let Some(w) = &plan.weighting {
        let _ = writeln!(
            s,
            "weighting: {}{} — {}",
            w.phrase(),
            if w.numa {
                ", local and remote apart"
            } else {
                ""
            },
            w.reason
        );
    }
    if let Some(v) = &plan.victims {
        match (&v.stalled, &v.cycles) {
            (Some(st), Some(cy)) => {
                let _ = writeln!(s, "victims: stalls {st} ÷ {cy} — {}", v.reason);
            }
            _ => {
                let _ = writeln!(s, "victims: {}", v.reason);
            }
        }
    }
    if let Some(l) = &plan.latency {
        let what = match (&l.source, l.write) {
            (Some(src), true) => format!("read and write, from {src} — "),
            (Some(src), false) => format!("read, from {src} — "),
            (None, _) => String::new(),
        };
        let _ = writeln!(s, "latency: {what}{}", l.reason);
    }
}

/// The plan as lines of text.
pub fn render(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "imc {:?} plan: source {}", plan.command, plan.source);
    let _ = writeln!(
        s,
        "tick: {}{} — {}; adds interrupts: {}",
        plan.tick.source,
        plan.tick
            .hz
            .map_or(String::new(), |h| format!(" at {h:.0} Hz")),
        plan.tick.reason,
        if plan.tick.adds_interrupts {
            "yes"
        } else {
            "no"
        }
    );
    if let Some(r) = plan.records {
        let _ = writeln!(s, "records: {} — {}", r.as_str(), r.meaning());
    }
    if let Some(st) = &plan.stacks {
        let _ = writeln!(
            s,
            "stacks: {}{} — {}; the kernel holds {} (process, cgroup, stack) entries between drains \
             and {} stacks of up to {} frames in each of two stack maps, emptied in turn at \
             the drains, with {} more in a spare map each for stacks whose bucket another holds \
             (a drain comes early after {} new entries){}; adds interrupts: {}",
            if st.user { "user" } else { "" },
            if st.kernel { " + kernel" } else { "" },
            st.reason,
            st.map_entries,
            st.stack_entries,
            st.depth,
            st.spare_entries,
            st.wake_after,
            if st.skips_imc_stacks {
                "; imc's own traffic goes under one frame, its stacks not taken"
            } else {
                ""
            },
            if st.adds_interrupts { "yes" } else { "no" }
        );
    }
    if let Some(d) = &plan.drain {
        let _ = writeln!(s, "drain: {}", d.reason);
    }
    if let Some(r) = &plan.kernel.release {
        let _ = writeln!(s, "kernel: {r}");
    }
    how_divided(&mut s, plan);
    let _ = writeln!(s, "counters ({}):", plan.counters.len());
    for c in &plan.counters {
        let switches = plan.tick.switches;
        let _ = writeln!(s, "{}", counter_line(c, switches));
    }
    limits(&mut s, plan);
    if !plan.slots.is_empty() {
        let _ = writeln!(s, "record slots ({}):", plan.slots.len());
        for (i, sl) in plan.slots.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {i}: {} ({} scope, {}{})",
                sl.event,
                sl.scope.as_str(),
                super::CounterRole::of_slot(sl.role),
                sl.sum.as_ref().map_or(String::new(), |x| format!(", {x}"))
            );
        }
    }
    for n in &plan.notes {
        let _ = writeln!(s, "why: {n}");
    }
    if !plan.other_sources.is_empty() {
        let _ = writeln!(s, "other sources (not bandwidth):");
        for o in &plan.other_sources {
            let verdict = if o.refused { "refused" } else { "possible" };
            let _ = writeln!(s, "  {verdict}: {} — {}", o.what, o.reason);
        }
    }
    if !plan.refusals.is_empty() {
        let _ = writeln!(s, "refused:");
        for r in &plan.refusals {
            let _ = writeln!(s, "  {}", r.reason);
        }
    }
    s
}
