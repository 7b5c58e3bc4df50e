//! `imc list`: what this machine offers — each backend, available or not and why, its PMUs with
//! their designated CPUs, and the events it would count.
use crate::cli::{GlobalArgs, ListArgs};
use crate::discovery::{self, Report};
use crate::error::{CliError, CliResult};
use crate::model::Source;
use crate::sys::perf::{PerfEventAttr, PerfSys, RealPerf, explain_open_error};
use serde_json::{Value, json};
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
            .map_err(|e| CliError::runtime_because("imc list: cannot encode JSON", e))?;
        s.push('\n');
        s
    } else {
        // PMU and event names are sysfs directory entries: anything but a NUL or a slash.
        crate::text::escape_lines(&crate::output::list::render(&report, global.verbose > 0))
            .into_owned()
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

/// The JSON of `imc list --json`: `hypervisor`, `packages`, `sources`, `nodes`, `online` and
/// `other_sources`.
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
                config2: None,
                bytes_per_count: None,
                address: None,
                width: None,
                direction: None,
                sub_channel: None,
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
