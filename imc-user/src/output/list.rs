//! `imc list` as text: each bandwidth source with its PMUs and events, then the PMUs that are
//! not bandwidth sources.
use crate::discovery::Report;
use crate::discovery::machine::arm_cpu_text;
use crate::model::{OtherSource, PmuScope, Source, SourceRole};
use std::fmt::Write as _;

fn cpus_text(cpus: &[u32]) -> String {
    // Compact ranges as the kernel prints them: 0-3,8.
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    if out.is_empty() { "-".into() } else { out }
}

/// `imc list` as a person reads it; `verbose`: every event and PMU fact.
pub fn render(r: &Report, verbose: bool) -> String {
    let d = &r.discovery;
    let mut o = String::new();
    let m = &r.machine;
    let cpu = match (&m.vendor, m.family, m.model, &m.power) {
        (Some(v), Some(f), Some(md), _) => format!("{v} family {f:#x} model {md:#x}"),
        (_, _, _, Some(p)) => p.clone(),
        _ => arm_cpu_text(m).unwrap_or_else(|| "unknown CPU".into()),
    };
    let _ = writeln!(
        o,
        "machine: {cpu}, {} online CPUs, {} package(s){}",
        d.topology.online.len(),
        d.topology.packages.len(),
        if d.hypervisor {
            ", under a hypervisor"
        } else {
            ""
        }
    );
    for p in &d.topology.packages {
        let _ = writeln!(o, "  package {}: cpus {}", p.id, cpus_text(&p.cpus));
    }
    for n in &d.topology.nodes {
        let _ = writeln!(o, "  node {}: cpus {}", n.id, cpus_text(&n.cpus));
    }
    let _ = writeln!(o);
    for s in &d.sources {
        render_source(&mut o, s, verbose);
    }
    let any_mc = d
        .sources
        .iter()
        .any(|s| s.available && s.backend.is_memory_controller());
    if !any_mc {
        let _ = writeln!(o, "\nno memory-bandwidth backend available");
    }
    if !d.other_sources.is_empty() {
        let _ = writeln!(o, "\nother sources (not bandwidth):");
        for s in &d.other_sources {
            render_other(&mut o, s, verbose);
        }
    }
    o
}

/// The first line of a non-bandwidth PMU: role, scope, what it can do, where, and why it is not
/// bandwidth.
fn other_summary(s: &OtherSource) -> String {
    let role = match s.role {
        SourceRole::Profiling => "profiling",
        SourceRole::Counting => "counting",
    };
    let scope = match s.scope {
        PmuScope::Chip => "per chip",
        PmuScope::Core => "per core",
        PmuScope::Thread => "per thread (task-bound)",
        PmuScope::Cpu => "per CPU",
    };
    let count = if s.can_count {
        "counts"
    } else {
        "cannot count"
    };
    let sample = if s.can_sample {
        "samples"
    } else {
        "cannot sample"
    };
    let cpus = if s.cpus.is_empty() {
        "any CPU".to_string()
    } else {
        format!("cpus {}", cpus_text(&s.cpus))
    };
    format!(
        "{:<20} {role}, {scope}, {count}, {sample}, {cpus}: {}",
        s.pmu, s.why
    )
}

/// One non-bandwidth PMU: its summary, exclusivity, formats, caps, notes and events (the first
/// few events only, unless -v).
fn render_other(o: &mut String, s: &OtherSource, verbose: bool) {
    let _ = writeln!(o, "{}", other_summary(s));
    let _ = writeln!(o, "  pmu {:<28} type {}", s.pmu, s.pmu_type);
    if let Some(ex) = &s.exclusive {
        let _ = writeln!(
            o,
            "  exclusive group {}: {} ({} while another member is in use)",
            ex.group,
            ex.members.join(", "),
            ex.errno
        );
    }
    let fmts: Vec<String> = s.formats.iter().map(|(n, f)| format!("{n}={f}")).collect();
    let _ = writeln!(o, "  formats {}", fmts.join(" "));
    let caps: Vec<String> = s.caps.iter().map(|(n, v)| format!("{n}={v}")).collect();
    // IBS says "(none)" too: an empty caps/ is itself a fact (no Zen 4 extensions).
    if s.pmu.starts_with("ibs_") || !caps.is_empty() {
        let _ = writeln!(
            o,
            "  caps {}",
            if caps.is_empty() {
                "(none)".to_string()
            } else {
                caps.join(" ")
            }
        );
    }
    for n in &s.notes {
        let _ = writeln!(o, "  note {n}");
    }
    const SHOWN: usize = 8;
    for (i, e) in s.events.iter().enumerate() {
        if i == SHOWN && !verbose {
            let _ = writeln!(
                o,
                "  … {} more events (imc -v list shows all)",
                s.events.len() - SHOWN
            );
            break;
        }
        let scale = e.scale.map_or(String::new(), |x| format!("  scale {x}"));
        let _ = writeln!(o, "  event {:<32} config {:#x}{scale}", e.name, e.config);
    }
}

fn render_source(o: &mut String, s: &Source, verbose: bool) {
    let status = if s.available {
        "available"
    } else {
        "unavailable"
    };
    let _ = write!(o, "{:<20} {status}", s.backend.as_str());
    match &s.reason {
        Some(r) => {
            let _ = writeln!(o, ": {r}");
        }
        None => {
            let _ = writeln!(o);
        }
    }
    for p in &s.pmus {
        let _ = writeln!(
            o,
            "  pmu {:<28} type {:<4} cpus {}",
            p.name,
            p.pmu_type,
            cpus_text(&p.cpus)
        );
    }
    for e in &s.events {
        let enc = match (e.config, e.address) {
            (Some(c), _) => match e.config1 {
                Some(c1) if c1 != 0 => format!("config {c:#x} config1 {c1:#x}"),
                _ => format!("config {c:#x}"),
            },
            (None, Some(a)) => format!("address {a:#x} width {}", e.width.unwrap_or(0)),
            (None, None) => "-".into(),
        };
        let bpc = e
            .bytes_per_count
            .map_or(String::new(), |b| format!("  {b} B/count"));
        let _ = write!(o, "  event {:<11} {:<28} {enc}{bpc}", e.name, e.pmu);
        if verbose {
            let _ = write!(o, "  [{}]", e.origin);
        }
        let _ = writeln!(o);
    }
}
