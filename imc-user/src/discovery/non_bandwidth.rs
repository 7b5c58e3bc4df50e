//! PMUs that are not bandwidth sources but that `imc list` shows and a planner needs to know:
//! AMD IBS (`ibs_fetch`, `ibs_op`) and POWER core, thread and trace IMC.
//!
//! The facts come from the kernel drivers: arch/x86/events/amd/ibs.c (IBS samples only: a zero
//! period is refused; one IBS event per CPU per PMU; formats and `caps/` depend on the CPU) and
//! arch/powerpc/perf/imc-pmu.c (core IMC counts per core with no per-task events; thread IMC
//! counts per task and refuses CPU-wide opens; trace IMC samples only; core, thread and trace IMC
//! share one system-wide lock, `imc_global_refc`, so events of one make the others' event_init
//! fail with EBUSY; nest IMC is not part of it).
use super::format::encode_terms;
use super::sysfs::{DiscoveryError, read_cpulist_file, read_optional};
use crate::model::{
    ConfigWord, Exclusivity, FormatField, OtherEvent, OtherSource, Pmu, PmuScope, SourceRole,
};
use std::collections::BTreeMap;
use std::path::Path;

/// Name of the system-wide lock shared by POWER core, thread and trace IMC.
pub const POWER_IMC_GROUP: &str = "power-imc-core-thread-trace";
const POWER_EXCLUSIVE: [&str; 3] = ["core_imc", "thread_imc", "trace_imc"];

/// Every non-bandwidth source present under `root`, in the order of `pmus`.
pub(crate) fn other_sources(root: &Path, pmus: &[Pmu]) -> Result<Vec<OtherSource>, DiscoveryError> {
    let mut out = Vec::new();
    for p in pmus {
        let s = match p.name.as_str() {
            "ibs_fetch" | "ibs_op" => Some(ibs(p)?),
            "core_imc" => Some(core_imc(root, p, pmus)?),
            "thread_imc" => Some(thread_imc(p, pmus)),
            "trace_imc" => Some(trace_imc(p, pmus)),
            _ => None,
        };
        out.extend(s);
    }
    Ok(out)
}

/// `other_sources` for hand-built PMUs (unit tests elsewhere in the crate).
#[cfg(test)]
pub(crate) fn tests_other_sources(pmus: &[Pmu]) -> Vec<OtherSource> {
    other_sources(Path::new("/nonexistent"), pmus).unwrap()
}

/// A format field as the kernel writes it: `config:0-7,32-35`.
pub fn format_text(f: &FormatField) -> String {
    let word = match f.word {
        ConfigWord::Config => "config",
        ConfigWord::Config1 => "config1",
        ConfigWord::Config2 => "config2",
        ConfigWord::Config3 => "config3",
    };
    let bits: Vec<String> = f
        .bits
        .iter()
        .map(|r| {
            if r.start() == r.end() {
                r.start().to_string()
            } else {
                format!("{}-{}", r.start(), r.end())
            }
        })
        .collect();
    format!("{word}:{}", bits.join(","))
}

fn formats(p: &Pmu) -> BTreeMap<String, String> {
    p.formats
        .iter()
        .map(|(n, f)| (n.clone(), format_text(f)))
        .collect()
}

/// `caps/` of a PMU: file name → trimmed content. A missing directory is the same as an empty
/// one (git keeps no empty directories; Zen 3 IBS has an empty `caps/`).
fn caps(p: &Pmu) -> Result<BTreeMap<String, String>, DiscoveryError> {
    let dir = p.path.join("caps");
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = read_optional(&dir.join(&name))? {
            out.insert(name, v);
        }
    }
    Ok(out)
}

/// The PMU's `events/` aliases encoded with its own formats; an alias that does not encode is
/// left out and named in `notes`.
fn events(p: &Pmu, notes: &mut Vec<String>) -> Vec<OtherEvent> {
    let mut out = Vec::new();
    for a in p.events.values() {
        match encode_terms(p, &a.terms) {
            Ok(w) => out.push(OtherEvent {
                name: a.name.clone(),
                config: w.config,
                scale: a.scale,
            }),
            Err(e) => notes.push(format!(
                "{}: {}",
                p.path.join("events").join(&a.name).display(),
                crate::text::error_line(&e)
            )),
        }
    }
    out
}

fn ibs(p: &Pmu) -> Result<OtherSource, DiscoveryError> {
    let caps = caps(p)?;
    let op = p.name == "ibs_op";
    let mut notes = vec![
        "sampling only: a zero period is refused (EINVAL); give a sample period (low 4 bits 0) \
         or MaxCnt in config"
            .to_string(),
        format!(
            "one {} event per CPU (a second one gets ENOSPC); per-task and per-CPU events allowed",
            p.name
        ),
        "exclude_user/exclude_kernel need swfilt=1 (filtered in software), else EINVAL".to_string(),
    ];
    if op {
        notes.push(
            "samples carry the data source (DRAM local or remote node), the miss latency \
             (weight) and the data address: which loads came from DRAM, per process"
                .to_string(),
        );
        let l3 = p.formats.contains_key("l3missonly");
        notes.push(if l3 {
            "l3missonly=1 keeps only ops that missed the L3 (Zen 4 IBS extensions)".to_string()
        } else {
            format!(
                "no l3missonly filter: {} has no format/l3missonly (needs the Zen 4 IBS \
                 extensions, caps/zen4_ibs_extensions)",
                p.name
            )
        });
    }
    Ok(OtherSource {
        pmu: p.name.clone(),
        pmu_type: p.pmu_type,
        role: SourceRole::Profiling,
        scope: PmuScope::Cpu,
        can_count: false,
        can_sample: true,
        per_task: true,
        cpu_wide: true,
        needs_perfmon: false,
        cpus: p.cpumask.clone().unwrap_or_default(),
        cores: Vec::new(),
        exclusive: None,
        formats: formats(p),
        caps,
        events: Vec::new(),
        why: format!(
            "AMD IBS {}: tags single {} and samples them; no byte counter, so a profiling \
             source, not bandwidth",
            if op { "op" } else { "fetch" },
            if op {
                "micro-ops (address, data source, latency)"
            } else {
                "instruction fetches"
            }
        ),
        notes,
    })
}

/// The exclusivity group of a POWER core/thread/trace IMC PMU, with the members present.
fn power_exclusive(pmus: &[Pmu]) -> Exclusivity {
    Exclusivity {
        group: POWER_IMC_GROUP.to_string(),
        members: POWER_EXCLUSIVE
            .iter()
            .filter(|n| pmus.iter().any(|p| p.name == **n))
            .map(|n| n.to_string())
            .collect(),
        errno: "EBUSY".to_string(),
    }
}

fn power_base(p: &Pmu, pmus: &[Pmu], role: SourceRole, scope: PmuScope) -> OtherSource {
    let ex = power_exclusive(pmus);
    let mut notes = Vec::new();
    let events = events(p, &mut notes);
    OtherSource {
        pmu: p.name.clone(),
        pmu_type: p.pmu_type,
        role,
        scope,
        can_count: true,
        can_sample: false,
        per_task: false,
        cpu_wide: true,
        needs_perfmon: false,
        cpus: p.cpumask.clone().unwrap_or_default(),
        cores: Vec::new(),
        exclusive: Some(ex),
        formats: formats(p),
        caps: BTreeMap::new(),
        events,
        why: String::new(),
        notes,
    }
}

fn core_imc(root: &Path, p: &Pmu, pmus: &[Pmu]) -> Result<OtherSource, DiscoveryError> {
    let mut s = power_base(p, pmus, SourceRole::Counting, PmuScope::Core);
    let mut cores = Vec::new();
    for &cpu in &s.cpus {
        let f = root.join(format!(
            "sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        ));
        cores.push(if f.exists() {
            read_cpulist_file(&f)?
        } else {
            vec![cpu]
        });
    }
    s.cores = cores;
    if s.cpus.is_empty() {
        s.notes
            .push("no cpumask: cannot tell which CPU stands for each core".into());
    }
    s.why = "per-core counters of the cores' own events (cycles, instructions, loads by \
             source), not bytes: not a bandwidth source"
        .into();
    s.notes.push(
        "one event per core on its cpumask CPU: the threads of a core read the same counters, so \
         opening it on every CPU multiplies the counts; no per-task events, no sampling (EINVAL)"
            .into(),
    );
    Ok(s)
}

fn thread_imc(p: &Pmu, pmus: &[Pmu]) -> OtherSource {
    let mut s = power_base(p, pmus, SourceRole::Counting, PmuScope::Thread);
    s.per_task = true;
    s.cpu_wide = false;
    s.needs_perfmon = true;
    s.why = "per-task counters of core events, not bytes: not a bandwidth source".into();
    s.notes.push(
        "task-bound events only (pid >= 0): a CPU-wide open (pid -1) is refused (EINVAL); no \
         sampling; needs CAP_PERFMON (EACCES)"
            .into(),
    );
    s
}

fn trace_imc(p: &Pmu, pmus: &[Pmu]) -> OtherSource {
    let mut s = power_base(p, pmus, SourceRole::Profiling, PmuScope::Cpu);
    s.can_count = false;
    s.can_sample = true;
    s.per_task = true;
    s.needs_perfmon = true;
    s.why =
        "records IP samples into a per-CPU trace buffer: a profiling source, not bandwidth".into();
    s.notes.push(format!(
        "sampling only: counting (sample_period 0) is refused (ENOENT); record with perf record \
         -e {}/trace_cycles/; needs CAP_PERFMON",
        p.name
    ));
    s.notes.push(
        "the firmware fixes the sampled event (cycles); samples reach perf when the event \
         stops, no interrupt"
            .into(),
    );
    s
}

/// Why a CPU-wide counting tool (`imc stat -e`, which opens pid -1 on CPUs) cannot count
/// `event` on `pmu`, in one line naming both; None when it can (or the PMU is not one of these).
pub fn cpu_wide_count_refusal(others: &[OtherSource], pmu: &str, event: &str) -> Option<String> {
    let s = others.iter().find(|s| s.pmu == pmu)?;
    if !s.can_count {
        return Some(format!(
            "event '{event}': PMU {pmu} only samples ({}); imc stat counts — see 'imc list'",
            if pmu.starts_with("ibs_") {
                "AMD IBS, a profiling source"
            } else {
                "a profiling source; record it with perf record"
            }
        ));
    }
    if !s.cpu_wide {
        return Some(format!(
            "event '{event}': PMU {pmu} counts per task only (the kernel refuses CPU-wide opens \
             with EINVAL); imc stat opens counters CPU-wide"
        ));
    }
    None
}

/// Why a PMU lacks a format term that the same PMU has on other CPUs, in one line naming the
/// PMU and the term (AMD IBS filters that only newer cores have).
pub fn missing_term_reason(pmu: &str, term: &str) -> Option<String> {
    let needs = match (pmu, term) {
        ("ibs_op" | "ibs_fetch", "l3missonly") => {
            "the Zen 4 IBS extensions (caps/zen4_ibs_extensions); Zen 3 and older have none"
        }
        ("ibs_op", "ldlat") => "the Zen 5 IBS load-latency filter (caps/ldlat)",
        ("ibs_op", "cnt_ctl") => "IBS op counting control (CPUID 8000_001B OpCnt)",
        ("ibs_op" | "ibs_fetch", "swfilt") => {
            "Linux 6.14 or later (software privilege filtering for IBS)"
        }
        _ => return None,
    };
    Some(format!(
        "PMU '{pmu}' has no '{term}' on this machine (no format/{term}): it needs {needs}"
    ))
}

/// One thing a plan would do with a non-bandwidth source, or refuse, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanNote {
    /// What: `core_imc on CPU 4 (core of CPUs 4-7)`, `thread_imc CPU-wide`.
    pub what: String,
    pub reason: String,
    /// True when the kernel does not allow it (a refusal), false for a choice the plan makes.
    pub refused: bool,
}

fn cpus_text(cpus: &[u32]) -> String {
    super::cpulist::format_cpulist(cpus)
}

/// How a plan may use one POWER core/thread/trace IMC source, and what it must refuse: core IMC
/// once per core on its designated CPU, thread IMC per task only, trace IMC only by sampling,
/// and never two of them at once. Empty for any other PMU.
pub fn power_imc_plan_notes(s: &OtherSource) -> Vec<PlanNote> {
    let mut v = Vec::new();
    let refuse = |what: String, reason: &str| PlanNote {
        what,
        reason: reason.to_string(),
        refused: true,
    };
    match s.pmu.as_str() {
        "core_imc" => {
            for (i, &cpu) in s.cpus.iter().enumerate() {
                let core = s.cores.get(i).map_or(String::new(), |c| {
                    format!(" (core of CPUs {})", cpus_text(c))
                });
                v.push(PlanNote {
                    what: format!("core_imc on CPU {cpu}{core}"),
                    reason: "per-core counters: one event per core, on the CPU the cpumask names"
                        .into(),
                    refused: false,
                });
            }
            v.push(refuse(
                "core_imc per task".into(),
                "the kernel refuses per-task core_imc events (EINVAL): the counters belong to the core",
            ));
            v.push(refuse(
                "core_imc sampling".into(),
                "core_imc cannot sample (EINVAL)",
            ));
        }
        "thread_imc" => {
            v.push(PlanNote {
                what: "thread_imc per task".into(),
                reason:
                    "per-thread counters follow the task (pid >= 0, any CPU); needs CAP_PERFMON"
                        .into(),
                refused: false,
            });
            v.push(refuse(
                "thread_imc CPU-wide".into(),
                "the kernel refuses thread_imc events without a task (pid -1 → EINVAL)",
            ));
        }
        "trace_imc" => {
            v.push(refuse(
                "trace_imc counting".into(),
                "trace_imc only samples (sample_period 0 → ENOENT); record it with perf record -e trace_imc/trace_cycles/",
            ));
        }
        _ => return v,
    }
    if let Some(ex) = &s.exclusive {
        let others: Vec<&str> = ex
            .members
            .iter()
            .map(String::as_str)
            .filter(|m| *m != s.pmu)
            .collect();
        if !others.is_empty() {
            v.push(refuse(
                format!("{} together with {}", s.pmu, others.join(" or ")),
                "core, thread and trace IMC exclude each other system-wide (EBUSY while another has events anywhere)",
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::format::parse_format;
    use crate::model::EventAlias;

    fn pmu(name: &str, ty: u32, cpumask: Option<Vec<u32>>, fmts: &[(&str, &str)]) -> Pmu {
        Pmu {
            name: name.into(),
            pmu_type: ty,
            cpumask,
            formats: fmts
                .iter()
                .map(|(n, t)| (n.to_string(), parse_format(n, t).unwrap()))
                .collect(),
            events: BTreeMap::new(),
            path: format!("/nonexistent/{name}").into(),
        }
    }

    const IMC_FMT: &[(&str, &str)] = &[
        ("event", "config:0-61"),
        ("offset", "config:0-31"),
        ("rvalue", "config:32"),
        ("mode", "config:33-40"),
    ];

    fn power_pmus() -> Vec<Pmu> {
        let mut core = pmu("core_imc", 30, Some(vec![0, 4]), IMC_FMT);
        core.events.insert(
            "CPM_CCYC".into(),
            EventAlias {
                name: "CPM_CCYC".into(),
                terms: "event=0x98".into(),
                scale: Some(512.0),
                unit: None,
            },
        );
        vec![
            pmu(
                "nest_mba0_imc",
                22,
                Some(vec![0]),
                &[("event", "config:0-61")],
            ),
            core,
            pmu("thread_imc", 31, None, IMC_FMT),
            pmu("trace_imc", 32, None, &[("event", "config:0-61")]),
        ]
    }

    #[test]
    fn format_text_round_trips_split_fields() {
        let f = parse_format("event", "config:0-7,32-35,59-60").unwrap();
        assert_eq!(format_text(&f), "config:0-7,32-35,59-60");
        let f = parse_format("swfilt", "config2:0").unwrap();
        assert_eq!(format_text(&f), "config2:0");
    }

    #[test]
    fn power_imc_scopes_and_exclusivity() {
        let pmus = power_pmus();
        let v = other_sources(Path::new("/nonexistent"), &pmus).unwrap();
        let names: Vec<&str> = v.iter().map(|s| s.pmu.as_str()).collect();
        assert_eq!(names, ["core_imc", "thread_imc", "trace_imc"]);
        let (core, thread, trace) = (&v[0], &v[1], &v[2]);
        assert_eq!(core.scope, PmuScope::Core);
        assert!(core.can_count && !core.can_sample && !core.per_task && core.cpu_wide);
        assert_eq!(core.events[0].config, 0x98);
        assert_eq!(core.events[0].scale, Some(512.0));
        // Without thread_siblings_list files each designated CPU stands for itself.
        assert_eq!(core.cores, vec![vec![0], vec![4]]);
        assert_eq!(thread.scope, PmuScope::Thread);
        assert!(thread.per_task && !thread.cpu_wide && thread.needs_perfmon);
        assert!(thread.cpus.is_empty());
        assert_eq!(trace.role, SourceRole::Profiling);
        assert!(!trace.can_count && trace.can_sample);
        let ex = core.exclusive.as_ref().unwrap();
        assert_eq!(ex.members, ["core_imc", "thread_imc", "trace_imc"]);
        assert_eq!(ex.errno, "EBUSY");
    }

    #[test]
    fn plan_notes_per_core_per_thread_and_refusals() {
        let pmus = power_pmus();
        let mut v = other_sources(Path::new("/nonexistent"), &pmus).unwrap();
        v[0].cores = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        let core = power_imc_plan_notes(&v[0]);
        let planned: Vec<&str> = core
            .iter()
            .filter(|n| !n.refused)
            .map(|n| n.what.as_str())
            .collect();
        assert_eq!(
            planned,
            [
                "core_imc on CPU 0 (core of CPUs 0-3)",
                "core_imc on CPU 4 (core of CPUs 4-7)"
            ]
        );
        let refused: Vec<&PlanNote> = core.iter().filter(|n| n.refused).collect();
        assert!(refused.iter().any(|n| n.what == "core_imc per task"));
        assert!(refused.iter().any(
            |n| n.what == "core_imc together with thread_imc or trace_imc"
                && n.reason.contains("EBUSY")
        ));
        let thread = power_imc_plan_notes(&v[1]);
        assert!(!thread[0].refused && thread[0].what == "thread_imc per task");
        assert!(
            thread.iter().any(|n| n.refused
                && n.what == "thread_imc CPU-wide"
                && n.reason.contains("EINVAL"))
        );
        let trace = power_imc_plan_notes(&v[2]);
        assert!(trace[0].refused && trace[0].reason.contains("ENOENT"));
        // Nothing to say for other PMUs; a lone member has no exclusivity refusal.
        let mut alone = v[1].clone();
        alone.exclusive.as_mut().unwrap().members = vec!["thread_imc".into()];
        assert!(
            !power_imc_plan_notes(&alone)
                .iter()
                .any(|n| n.what.contains("together"))
        );
    }

    #[test]
    fn cpu_wide_counting_refusals_name_pmu_and_event() {
        let v = other_sources(Path::new("/nonexistent"), &power_pmus()).unwrap();
        assert_eq!(
            cpu_wide_count_refusal(&v, "core_imc", "core_imc/CPM_CCYC/"),
            None
        );
        let m = cpu_wide_count_refusal(&v, "thread_imc", "thread_imc/x/").unwrap();
        assert!(m.contains("thread_imc/x/") && m.contains("per task"), "{m}");
        let m = cpu_wide_count_refusal(&v, "trace_imc", "trace_imc/trace_cycles/").unwrap();
        assert!(m.contains("only samples"), "{m}");
        assert_eq!(cpu_wide_count_refusal(&v, "nest_mba0_imc", "e"), None);
    }

    #[test]
    fn ibs_without_caps_has_no_l3missonly() {
        let pmus = [
            pmu(
                "ibs_fetch",
                8,
                None,
                &[("rand_en", "config:57"), ("swfilt", "config2:0")],
            ),
            pmu(
                "ibs_op",
                9,
                None,
                &[("swfilt", "config2:0"), ("cnt_ctl", "config:19")],
            ),
        ];
        let v = other_sources(Path::new("/nonexistent"), &pmus).unwrap();
        assert_eq!(v.len(), 2);
        let op = &v[1];
        assert_eq!(op.role, SourceRole::Profiling);
        assert!(op.can_sample && !op.can_count && op.per_task);
        assert_eq!(op.formats["cnt_ctl"], "config:19");
        assert!(op.caps.is_empty());
        assert!(op.notes.iter().any(|n| n.contains("no l3missonly")));
        assert!(v[0].why.contains("not bandwidth"));
        assert!(power_imc_plan_notes(op).is_empty());
    }
}
