//! How each package's traffic is divided among the tasks that ran: the per-CPU core counters
//! that weigh it ([`Weighting`]), chosen from the machine's own description under `--root`.
//!
//! A package counter sees the whole socket; the tasks that made the traffic are found by what
//! each CPU's core counted of its own memory traffic over the same time (LLC misses, offcore
//! responses from DRAM, DRAM fills, PM_MEM_*), read by every CPU for itself at its ticks and
//! context switches. Where the core tells local from remote DRAM, a package's traffic is also
//! weighed by the other packages' CPUs' remote counts. Without any such counter, traffic is
//! split by on-CPU time: said, with the reason, never silently.
use super::counters::event_counter;
use super::types::{
    Counter, PlanError, Reader, Refusal, Request, WeightEvent, WeightRequest, WeightRole,
};
use crate::events::core_traffic::{self, CoreTrafficEvent, Locality};
use crate::model::{CorePmu, Direction, Discovery, Encoded, Machine, Weighting};

impl WeightRequest {
    /// Splits `EVENT:read` / `EVENT:write` into the event text and its direction.
    pub fn split_direction(text: &str) -> (&str, Option<Direction>) {
        match text.rsplit_once(':') {
            Some((e, "read")) if !e.is_empty() => (e, Some(Direction::Read)),
            Some((e, "write")) if !e.is_empty() => (e, Some(Direction::Write)),
            _ => (text, None),
        }
    }
}

/// The weight counters of a plan and how they divide traffic, with what was refused.
pub struct Chosen {
    pub counters: Vec<Counter>,
    pub weighting: Weighting,
    pub refusals: Vec<Refusal>,
    /// What the chosen events count and miss, one line each (the plan's notes).
    pub notes: Vec<String>,
}

/// Offcore-response events share two MSRs per thread (Intel core.c's extra registers).
const OFFCORE_REGISTERS: usize = 2;

/// Chooses the weight counters for the `traffic` counters of a sampling plan, within `free`
/// record slots.
pub fn choose(
    found: &Discovery,
    kernel: &super::Kernel,
    req: &Request,
    traffic: &[Counter],
    free: usize,
) -> Result<Chosen, PlanError> {
    let packaged = traffic
        .iter()
        .any(|c| c.package.is_some() && c.direction.is_some());
    if !packaged {
        return Ok(Chosen {
            counters: Vec::new(),
            weighting: Weighting {
                method: Weighting::TRAFFIC.into(),
                read: None,
                write: None,
                numa: false,
                reason: "the counters count per CPU: each CPU's count goes to the task that ran \
                         there, no package traffic to divide"
                    .into(),
                fidelity: Default::default(),
            },
            refusals: Vec::new(),
            notes: Vec::new(),
        });
    }
    match &req.weight {
        WeightRequest::CpuTime => Ok(time_only("--weight cpu-time: asked for", Vec::new())),
        WeightRequest::Events(events) => user_weights(found, events, free),
        WeightRequest::Auto => {
            let mut chosen = auto(found, traffic, free);
            if kernel.nmi_watchdog && !chosen.counters.is_empty() {
                chosen.notes.push(format!(
                    "the NMI watchdog (proc/sys/kernel/nmi_watchdog = 1) holds a core counter on \
                     every CPU: with {} weight events the kernel may take turns with them, and \
                     stretches where a weight did not run are divided by time and counted \
                     (weight_fallbacks); `sysctl kernel.nmi_watchdog=0` frees it",
                    chosen.counters.len()
                ));
            }
            Ok(chosen)
        }
    }
}

fn time_only(reason: impl Into<String>, refusals: Vec<Refusal>) -> Chosen {
    Chosen {
        counters: Vec::new(),
        weighting: Weighting::cpu_time(reason),
        refusals,
        notes: Vec::new(),
    }
}

/// `--weight EVENT[:read|:write]`: the user's per-CPU events.
fn user_weights(
    found: &Discovery,
    events: &[WeightEvent],
    free: usize,
) -> Result<Chosen, PlanError> {
    let mut counters = Vec::new();
    for ev in events {
        for enc in &ev.encoded {
            if enc.cpus.is_some() {
                return Err(PlanError::WeightNotPerCpu {
                    event: ev.text.clone(),
                    pmu: enc.pmu.clone(),
                });
            }
            counters.push(weight_counter(
                &ev.text,
                enc,
                found.topology.online.clone(),
                WeightRole {
                    direction: ev.direction,
                    remote: false,
                    ordinal: 0,
                },
            ));
        }
    }
    let slots = distinct_roles(&counters);
    if slots > free {
        return Err(PlanError::TooManyWeights {
            weights: slots,
            free,
        });
    }
    let names = |d: Direction| {
        let v: Vec<&str> = events
            .iter()
            .filter(|e| e.direction.is_none_or(|x| x == d))
            .map(|e| e.text.as_str())
            .collect();
        (!v.is_empty()).then(|| v.join("+"))
    };
    Ok(Chosen {
        weighting: Weighting {
            method: Weighting::TRAFFIC.into(),
            read: names(Direction::Read),
            write: names(Direction::Write),
            numa: false,
            reason: "--weight: the events given, read by each CPU for itself at its ticks and \
                     switches"
                .into(),
            fidelity: unit_fidelity(&counters),
        },
        counters,
        refusals: Vec::new(),
        notes: Vec::new(),
    })
}

/// The core PMU's own traffic events for this CPU model, within the counter and slot budgets.
fn auto(found: &Discovery, traffic: &[Counter], free: usize) -> Chosen {
    if let Some(no) = no_core_counters(found) {
        return time_only(
            match no {
                NoCoreCounters::Hypervisor => {
                    "running under a hypervisor: its virtual PMU counts no memory traffic to \
                     weigh by"
                }
                NoCoreCounters::NoCorePmu => {
                    "no core PMU (sys/bus/event_source/devices/cpu, or cpu_core/cpu_atom) under \
                     --root to weigh by"
                }
            },
            Vec::new(),
        );
    }
    let packages = found.topology.packages.len();
    let mut refusals = Vec::new();
    let mut counters: Vec<Counter> = Vec::new();
    let mut models = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let lookup = core_traffic::core_traffic;
    each_core(
        found,
        CoreUse::Weights,
        lookup,
        &mut refusals,
        |core, table, refusals| {
            models.push(if table.model.contains(core.pmu.name.as_str()) {
                table.model.to_string()
            } else {
                format!("{} ({})", table.model, core.pmu.name)
            });
            notes.extend(CoreUse::Weights.notes(core, &table.notes));
            counters.extend(core_weights(core, &table, packages, traffic, refusals));
        },
    );
    fit_slots(&mut counters, free, &mut refusals);
    if counters.is_empty() {
        return time_only(
            format!(
                "no core counter of this CPU's own memory traffic could be had: {}",
                reasons(&refusals)
            ),
            refusals,
        );
    }
    Chosen {
        weighting: traffic_weighting(&counters, &models),
        counters,
        refusals,
        notes,
    }
}

/// The weight counters of one core PMU from its `table`: the events this machine has use for,
/// within the thread's offcore-response registers; the others refused.
fn core_weights(
    core: &CorePmu,
    table: &core_traffic::CoreTraffic,
    packages: usize,
    traffic: &[Counter],
    refusals: &mut Vec<Refusal>,
) -> Vec<Counter> {
    let mut counters = Vec::new();
    let mut offcore = 0;
    let mut ordinals: Vec<(Direction, bool)> = Vec::new();
    for ev in events_for(table, packages) {
        if let Some(why) = unused_memory(ev, traffic) {
            refusals.push(refusal(core, Some(ev.name), why));
            continue;
        }
        if ev.offcore_register {
            if offcore == OFFCORE_REGISTERS {
                refusals.push(refusal(
                    core,
                    Some(ev.name),
                    format!(
                        "the core has {OFFCORE_REGISTERS} offcore-response registers per \
                         thread, taken by the events before it"
                    ),
                ));
                continue;
            }
            offcore += 1;
        }
        let remote = ev.locality == Locality::Remote;
        match encode(core, ev) {
            Ok(enc) => {
                let ordinal = ordinals
                    .iter()
                    .filter(|&&r| r == (ev.direction, remote))
                    .count() as u8;
                ordinals.push((ev.direction, remote));
                let mut c = weight_counter(
                    ev.name,
                    &enc,
                    core.cpus.clone(),
                    WeightRole {
                        direction: Some(ev.direction),
                        remote,
                        ordinal,
                    },
                );
                // A count is a line of this many bytes: what the weights account for can be
                // set against the controller's bytes (a user's --weight event has none).
                c.bytes_per_count = Some(ev.bytes_per_count);
                c.counter_mask = ev.counter_mask;
                counters.push(c);
            }
            Err(why) => refusals.push(refusal(core, Some(ev.name), why)),
        }
    }
    counters
}

/// How the chosen core weight `counters` of CPU `models` divide traffic, and what they miss.
fn traffic_weighting(counters: &[Counter], models: &[String]) -> Weighting {
    let names = |d: Direction| {
        let mut v: Vec<&str> = counters
            .iter()
            .filter(|c| c.weight.is_some_and(|w| w.direction == Some(d)))
            .map(|c| c.value_key.as_str())
            .collect();
        v.dedup();
        (!v.is_empty()).then(|| v.join("+"))
    };
    let numa = counters.iter().any(|c| c.weight.is_some_and(|w| w.remote));
    let write = names(Direction::Write);
    let mut reason = format!(
        "{}: each CPU counts its own memory traffic at its ticks and switches",
        models.join(", ")
    );
    if write.is_none() {
        reason.push_str("; no write event: writes are spread by the read weight");
    }
    if numa {
        reason.push_str("; local and remote DRAM apart: a package's traffic is also charged to the other packages' tasks that read it");
        if let Some(w) = write.as_deref().filter(|_| blind_write(counters)) {
            reason.push_str(&format!(
                "; {w} cannot tell local from remote: each task's writes take the locality of its \
                 own reads"
            ));
        }
    }
    reason.push_str(
        "; controller bytes beyond what the weights account for (their lines ÷ fidelity) are \
         no task's: unattributed, as device traffic",
    );
    Weighting {
        method: Weighting::TRAFFIC.into(),
        read: names(Direction::Read),
        write,
        numa,
        reason,
        fidelity: unit_fidelity(counters),
    }
}

/// Why no core PMU's counters can be planned at all, for weights or stalls alike.
pub(super) enum NoCoreCounters {
    /// A guest: the hypervisor's virtual PMU counts no memory traffic or stalls.
    Hypervisor,
    /// No `cpu` (or `cpu_core`/`cpu_atom`) PMU under --root.
    NoCorePmu,
}

pub(super) fn no_core_counters(found: &Discovery) -> Option<NoCoreCounters> {
    if found.hypervisor {
        Some(NoCoreCounters::Hypervisor)
    } else if found.cores.is_empty() {
        Some(NoCoreCounters::NoCorePmu)
    } else {
        None
    }
}

/// What a core PMU's counters are planned for: the words its refusals use.
#[derive(Clone, Copy)]
pub(super) enum CoreUse {
    Weights,
    Stalls,
}

impl CoreUse {
    fn words(self) -> (&'static str, &'static str) {
        match self {
            CoreUse::Weights => ("weight", "weights"),
            CoreUse::Stalls => ("stall", "stalls"),
        }
    }

    /// The table's notes on what `core`'s events count and miss, each naming the core PMU.
    pub(super) fn notes(self, core: &CorePmu, notes: &[&str]) -> Vec<String> {
        let all = self.words().1;
        notes
            .iter()
            .map(|n| format!("{all} on {}: {n}", core.pmu.name))
            .collect()
    }

    /// A refusal on `core`, of its `event` when one is named, else of all its events.
    pub(super) fn refusal(self, core: &CorePmu, event: Option<&str>, why: String) -> Refusal {
        let (one, all) = self.words();
        Refusal {
            pmu: Some(core.pmu.name.clone()),
            event: event.map(str::to_string),
            reason: match event {
                Some(e) => format!("{one} {e} on {}: {why}", core.pmu.name),
                None => format!("{all} on {}: {why}", core.pmu.name),
            },
        }
    }
}

/// Every core PMU of `found`, in order, with its table by `lookup` (the weights' or the
/// stalls' of core_traffic) handed to `each`; a core PMU without one becomes a refusal.
pub(super) fn each_core<T>(
    found: &Discovery,
    what: CoreUse,
    lookup: fn(&Machine, &str, Option<&str>) -> Result<T, String>,
    refusals: &mut Vec<Refusal>,
    mut each: impl FnMut(&CorePmu, T, &mut Vec<Refusal>),
) {
    for core in &found.cores {
        match lookup(&found.machine, &core.pmu.name, core.pmu_name.as_deref()) {
            Ok(table) => each(core, table, refusals),
            Err(why) => refusals.push(what.refusal(core, None, why)),
        }
    }
}

/// The refusals' reasons, one after the other.
pub(super) fn reasons(refusals: &[Refusal]) -> String {
    refusals
        .iter()
        .map(|r| r.reason.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A write weight beside remote read weights but with no remote write weight of its own: the
/// event counts writes to every package's memory alike (Skylake-SP's L2_LINES_OUT.NON_SILENT).
fn blind_write(counters: &[Counter]) -> bool {
    let has = |dir: Direction, remote: bool| {
        counters.iter().any(|c| {
            c.weight
                .is_some_and(|w| w.direction == Some(dir) && w.remote == remote)
        })
    };
    has(Direction::Write, false) && !has(Direction::Write, true) && has(Direction::Read, true)
}

/// Every weight event at fidelity 1 (not measured yet).
fn unit_fidelity(counters: &[Counter]) -> std::collections::BTreeMap<String, f64> {
    counters
        .iter()
        .filter(|c| c.weight.is_some())
        .map(|c| (c.value_key.clone(), 1.0))
        .collect()
}

/// The measured fidelity of the plan's weight events (`{"<event>": f}`, as `imc validate
/// --save` keeps it) set into its weighting; events it does not name stay at 1.
pub fn apply_fidelity(plan: &mut super::Plan, measured: &std::collections::BTreeMap<String, f64>) {
    if let Some(w) = plan.weighting.as_mut() {
        for (event, f) in w.fidelity.iter_mut() {
            if let Some(&m) = measured.get(event)
                && m.is_finite()
                && m > 0.0
            {
                *f = m;
            }
        }
    }
}

/// The events to weigh by on a machine of `packages` packages: with one package there is no
/// remote memory, so the remote reads are left out, and the better write event that needed
/// their offcore-response register takes the plain write event's place.
fn events_for(table: &core_traffic::CoreTraffic, packages: usize) -> Vec<&CoreTrafficEvent> {
    if packages >= 2 {
        return table.events.iter().collect();
    }
    let local = table
        .events
        .iter()
        .filter(|e| e.locality != Locality::Remote);
    match &table.alt_write {
        Some(alt) => local
            .filter(|e| e.direction != Direction::Write)
            .chain(std::iter::once(alt))
            .collect(),
        None => local.collect(),
    }
}

/// Why a weight event has nothing to weigh here: it sees a memory the plan does not count.
fn unused_memory(ev: &CoreTrafficEvent, traffic: &[Counter]) -> Option<String> {
    let mcdram = |c: &Counter| c.value_key.starts_with("mcdram_");
    let counted = match ev.memory {
        core_traffic::Memory::Dram => traffic.iter().any(|c| !mcdram(c)),
        core_traffic::Memory::Mcdram => traffic.iter().any(mcdram),
    };
    (!counted).then(|| "the plan counts no traffic of the memory it sees".to_string())
}

/// The event's terms encoded on this core PMU through its own `format/` files.
fn encode(core: &CorePmu, ev: &CoreTrafficEvent) -> Result<Encoded, String> {
    encode_terms(core, ev.name, ev.terms)
}

/// `terms` encoded on this core PMU through its own `format/` files, named `name`.
pub(super) fn encode_terms(core: &CorePmu, name: &str, terms: &str) -> Result<Encoded, String> {
    let text = format!("{}/{terms}/", core.pmu.name);
    let mut enc = crate::events::parse_event(std::slice::from_ref(&core.pmu), &text)
        .map_err(|e| format!("{name}: {}", crate::text::error_line(&e)))?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{name}: did not encode"))?;
    enc.event = name.to_string();
    enc.cpus = None;
    Ok(enc)
}

/// Weight slots beyond the free ones are dropped, remote ones first, then write ones.
fn fit_slots(counters: &mut Vec<Counter>, free: usize, refusals: &mut Vec<Refusal>) {
    let priority = |c: &Counter| match c.weight {
        Some(WeightRole { remote: true, .. }) => 0,
        Some(WeightRole {
            direction: Some(Direction::Write),
            ..
        }) => 1,
        _ => 2,
    };
    while distinct_roles(counters) > free {
        let Some(least) = counters.iter().map(priority).min() else {
            return;
        };
        counters.retain(|c| {
            let keep = priority(c) != least;
            if !keep {
                refusals.push(Refusal {
                    pmu: Some(c.pmu.clone()),
                    event: Some(c.value_key.clone()),
                    reason: format!(
                        "{}: no record slot left for it (the memory controller and -e take the \
                         others)",
                        c.value_key
                    ),
                });
            }
            keep
        });
    }
}

/// Weight counters of one role share a record slot (a hybrid part's `cpu_core` and `cpu_atom`
/// events, each on its own CPUs).
pub fn distinct_roles(counters: &[Counter]) -> usize {
    let mut roles: Vec<WeightRole> = counters.iter().filter_map(|c| c.weight).collect();
    roles.sort();
    roles.dedup();
    roles.len()
}

fn refusal(core: &CorePmu, event: Option<&str>, why: String) -> Refusal {
    CoreUse::Weights.refusal(core, event, why)
}

fn weight_counter(name: &str, enc: &Encoded, cpus: Vec<u32>, role: WeightRole) -> Counter {
    let mut c = event_counter(name, enc, None, None, cpus, None);
    c.reader = Reader::Tick;
    c.bytes_per_count = None;
    c.weight = Some(role);
    c
}
