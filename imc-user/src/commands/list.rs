//! `imc list`: what this machine offers — each backend, available or not and why, its PMUs with
//! their designated CPUs, and the events it would count.
use crate::cli::{GlobalArgs, ListArgs};
use crate::discovery::{self, Report};
use crate::error::{CliError, CliResult};
use crate::model::{OtherSource, PmuScope, Source, SourceRole};
use crate::sys::perf::{PerfEventAttr, PerfSys, RealPerf, explain_open_error};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

pub fn run(global: &GlobalArgs, args: &ListArgs) -> CliResult<ExitCode> {
    let mut report = load(&global.root)?;
    if describes_this_kernel(&global.root) {
        check_access(&mut report.discovery.sources, &RealPerf);
    }
    let report = report;
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&report))
            .map_err(|e| CliError::runtime(format!("imc list: cannot encode JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        // PMU and event names are sysfs directory entries: anything but a NUL or a slash.
        crate::text::escape_lines(&render(&report, global.verbose > 0)).into_owned()
    };
    crate::error::write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `root` is this machine's own `/`: only then do its PMU types mean anything to the
/// running kernel, so that trying to open them says what this user can use (a fixture tree under
/// `--root` describes another machine).
fn describes_this_kernel(root: &Path) -> bool {
    root.canonicalize().is_ok_and(|r| r == Path::new("/"))
}

/// Tries, as the current user, to open each available source's first event on its first CPU
/// the way `stat` does (system-wide on that CPU). A source the kernel refuses with EACCES or
/// EPERM (a user without CAP_PERFMON under kernel.perf_event_paranoid > 0) becomes unavailable,
/// with that reason: `list` says what this user can open, not only what the machine has. Other
/// failures are left to the commands, which explain them in context.
pub fn check_access(sources: &mut [Source], sys: &dyn PerfSys) {
    for s in sources.iter_mut().filter(|s| s.available) {
        let Some((ev, pmu)) = s.events.iter().find_map(|e| {
            let pmu = s.pmus.iter().find(|p| p.name == e.pmu)?;
            e.config.map(|_| (e, pmu))
        }) else {
            continue;
        };
        let Some(&cpu) = pmu.cpus.first() else {
            continue;
        };
        let attr = PerfEventAttr::counter(
            pmu.pmu_type,
            [ev.config.unwrap_or(0), ev.config1.unwrap_or(0), 0],
            false,
            false,
        );
        match sys.open(&attr, -1, cpu as i32, None) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                s.available = false;
                s.reason = Some(explain_open_error(
                    &format!("this user cannot open {}/{} on CPU {cpu}", ev.pmu, ev.name),
                    &e,
                ));
            }
            // Opened (and closed again as the fd drops), or refused for a reason the counting
            // commands report themselves.
            _ => {}
        }
    }
}

/// Discovery under `root`, with errors turned into the one-line CLI error.
pub fn load(root: &Path) -> CliResult<Report> {
    discovery::discover_report(root).map_err(|e| CliError::from(e).context("imc list"))
}

/// The `--json` document for `root` (what `imc list --json` prints).
pub fn run_json(root: &Path) -> CliResult<Value> {
    load(root).map(|r| to_json(&r))
}

/// The JSON of design.md: `hypervisor`, `packages`, `sources`; plus `nodes` and `online`.
pub fn to_json(r: &Report) -> Value {
    let d = &r.discovery;
    json!({
        "hypervisor": d.hypervisor,
        "packages": d.topology.packages,
        "nodes": d.topology.nodes,
        "online": d.topology.online,
        "sources": d.sources,
        "other_sources": d.other_sources,
    })
}

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

fn render(r: &Report, verbose: bool) -> String {
    let d = &r.discovery;
    let mut o = String::new();
    let m = &r.machine;
    let cpu = match (&m.vendor, m.family, m.model, &m.power) {
        (Some(v), Some(f), Some(md), _) => format!("{v} family {f:#x} model {md:#x}"),
        (_, _, _, Some(p)) => p.clone(),
        _ => "unknown CPU".into(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BackendKind, SourceEvent, SourcePmu};
    use crate::sys::perf::FakePerf;

    fn source(backend: BackendKind, pmu_type: u32, config: u64) -> Source {
        Source {
            backend,
            available: true,
            reason: Some("stand-in".into()),
            pmus: vec![SourcePmu {
                name: "p".into(),
                pmu_type,
                cpus: vec![1, 2],
            }],
            events: vec![SourceEvent {
                name: "e".into(),
                pmu: "p".into(),
                config: Some(config),
                config1: Some(0),
                bytes_per_count: None,
                address: None,
                width: None,
                direction: None,
                counter_bits: 64,
                origin: String::new(),
            }],
        }
    }

    #[test]
    fn a_source_this_user_cannot_open_is_listed_unavailable_with_the_reason() {
        let fake = FakePerf::new();
        fake.fail_open(Some(2), 1, libc::EACCES);
        fake.fail_open(Some(7), 1, libc::ENOENT);
        let mut sources = vec![
            source(BackendKind::Software, 1, 2),
            source(BackendKind::Msr, 9, 0),
            source(BackendKind::IntelUncoreImc, 13, 7),
        ];
        check_access(&mut sources, &fake);
        assert!(!sources[0].available);
        let why = sources[0].reason.as_deref().unwrap();
        assert!(why.contains("cannot open p/e on CPU 1"), "{why}");
        assert!(why.contains("CAP_PERFMON"), "{why}");
        // Opened fine: still available. Refused for another reason: left to the commands.
        assert!(sources[1].available && sources[2].available);
        let opens = fake.opens();
        assert_eq!(opens.len(), 3);
        assert!(opens.iter().all(|o| o.pid == -1 && o.cpu == 1));
        assert_eq!((opens[1].attr.type_, opens[1].attr.config), (9, 0));
    }
}
