//! Victims: per CPU, the core's cycles stalled on a memory (L3-miss) load and the cycles they
//! are a share of, chosen per vendor and model ([`core_traffic::core_stall`]), read by every CPU
//! for itself at the same ticks and switches as the weights and charged the same way to the
//! task that ran. They are not weights: they divide no package traffic.
//!
//! They share the core's generic counters with the weights, and the weights come first: the pair
//! is planned only where both fit beside them (the NMI watchdog's counter taken out), else it is
//! refused with the count, never left for the kernel to multiplex.
use super::counters::event_counter;
use super::kernel::Kernel;
use super::types::{Counter, CounterRole, Reader, Refusal};
use super::weights::{CoreUse, NoCoreCounters, each_core, encode_terms, no_core_counters, reasons};
use crate::events::core_traffic::{self, CoreStall, StallEvent, Watchdog};
use crate::model::{CorePmu, Discovery, StallPart, Victims};

/// The stall counters of a plan, or why there are none.
pub struct Chosen {
    pub counters: Vec<Counter>,
    pub victims: Victims,
    pub refusals: Vec<Refusal>,
    pub notes: Vec<String>,
}

fn none(reason: impl Into<String>, refusals: Vec<Refusal>) -> Chosen {
    Chosen {
        counters: Vec::new(),
        victims: Victims::none(reason),
        refusals,
        notes: Vec::new(),
    }
}

/// Chooses the stall pair of every core PMU beside `planned` (the plan's counters so far, its
/// weights among them), within `free` record slots.
pub fn choose(found: &Discovery, kernel: &Kernel, planned: &[Counter], free: usize) -> Chosen {
    if let Some(no) = no_core_counters(found) {
        return none(
            match no {
                NoCoreCounters::Hypervisor => {
                    "no stall counters: running under a hypervisor, whose virtual PMU counts no \
                     memory stalls"
                }
                NoCoreCounters::NoCorePmu => {
                    "no stall counters: no core PMU (sys/bus/event_source/devices/cpu, or \
                     cpu_core/cpu_atom) under --root"
                }
            },
            Vec::new(),
        );
    }
    let mut refusals = Vec::new();
    let mut counters = Vec::new();
    let mut models = Vec::new();
    let mut notes = Vec::new();
    let lookup = core_traffic::core_stall;
    each_core(
        found,
        CoreUse::Stalls,
        lookup,
        &mut refusals,
        |core, table, refusals| match core_pair(core, &table, kernel, planned, free) {
            Ok(pair) => {
                models.push(table.model);
                notes.extend(CoreUse::Stalls.notes(core, &table.notes));
                counters.extend(pair);
            }
            Err(why) => refusals.push(refusal(core, Some(table.stalled.name), why)),
        },
    );
    if counters.is_empty() {
        return none(
            format!("no stall counters: {}", reasons(&refusals)),
            refusals,
        );
    }
    // The CPU's time, charged to the task that ran like the pair: its on-CPU time, which turns
    // its stalled share into seconds. A software event: it takes a record slot, no counter.
    let seconds = free >= 3;
    if seconds {
        match time_counter(found) {
            Ok(c) => counters.push(c),
            Err(e) => notes.push(format!(
                "stalls: cpu-clock: {}: no stall seconds",
                crate::text::error_line(&e)
            )),
        }
    } else {
        notes.push(
            "stalls: no record slot left for cpu-clock, so stalls are shares of cycles, not \
             seconds"
                .into(),
        );
    }
    Chosen {
        victims: victims(&counters, &models, seconds),
        counters,
        refusals,
        notes,
    }
}

/// The stall pair's two counters on `core`, or why they cannot be had: no record slots left,
/// an encoding the PMU refuses, or no generic counters beside the weights.
fn core_pair(
    core: &CorePmu,
    table: &CoreStall,
    kernel: &Kernel,
    planned: &[Counter],
    free: usize,
) -> Result<[Counter; 2], String> {
    if free < 2 {
        return Err(format!(
            "no record slots left for the stall pair ({free} free of {}; the memory \
             controller, -e and the weights take the others)",
            imc_common::MAX_SLOTS
        ));
    }
    let stalled = encode(core, &table.stalled)?;
    let cycles = encode(core, &table.cycles)?;
    budget(core, table, kernel, planned)?;
    Ok([
        (&table.stalled, stalled, StallPart::Stalled),
        (&table.cycles, cycles, StallPart::Cycles),
    ]
    .map(|(ev, enc, part)| {
        let mut c = event_counter(ev.name, &enc, None, None, core.cpus.clone(), None);
        c.reader = Reader::Tick;
        c.bytes_per_count = None;
        c.role = CounterRole::Stall;
        c.stall = Some(part);
        c.counter_mask = ev.counter_mask;
        c
    }))
}

/// cpu-clock on every online CPU, read with the stall pair: the on-CPU time its share is of.
fn time_counter(found: &Discovery) -> Result<Counter, crate::events::EventError> {
    let enc = crate::events::generic::encode("cpu-clock", "cpu-clock", None)?;
    let mut c = event_counter(
        "cpu-clock",
        &enc,
        None,
        None,
        found.topology.online.clone(),
        None,
    );
    c.reader = Reader::Tick;
    c.bytes_per_count = None;
    c.role = CounterRole::Stall;
    c.stall = Some(StallPart::Time);
    Ok(c)
}

/// What the stall `counters` of CPU `models` count, and how a task's share (and, with
/// `seconds`, its stall seconds) follows from them.
fn victims(counters: &[Counter], models: &[&str], seconds: bool) -> Victims {
    let names = |part: StallPart| {
        let mut v: Vec<&str> = counters
            .iter()
            .filter(|c| c.stall == Some(part))
            .map(|c| c.value_key.as_str())
            .collect();
        v.dedup();
        Some(v.join("+"))
    };
    Victims {
        stalled: names(StallPart::Stalled),
        cycles: names(StallPart::Cycles),
        reason: format!(
            "{}: each CPU counts its cycles stalled on memory loads and its cycles at the \
             weights' ticks and switches, charged to the task that ran; a task's \
             stall_share is the first over the second{}",
            models.join(", "),
            if seconds {
                ", and its stall_seconds that share of its on-CPU time (cpu-clock)"
            } else {
                ""
            }
        ),
    }
}

fn encode(core: &CorePmu, ev: &StallEvent) -> Result<crate::model::Encoded, String> {
    encode_terms(core, ev.name, ev.terms)
}

/// Whether the stall pair fits in `core`'s generic counters beside the counters already planned
/// on it (its weights); Err says the count.
fn budget(
    core: &CorePmu,
    table: &CoreStall,
    kernel: &Kernel,
    planned: &[Counter],
) -> Result<(), String> {
    let watchdog = kernel.nmi_watchdog && table.watchdog != Watchdog::None;
    let generic = table
        .generic_counters
        .saturating_sub(usize::from(watchdog && table.watchdog == Watchdog::Generic));
    let mut masks: Vec<Option<u64>> = planned
        .iter()
        .filter(|c| c.pmu == core.pmu.name && c.package.is_none())
        .map(|c| c.counter_mask)
        .collect();
    let held = masks.len();
    masks.push(table.stalled.counter_mask);
    // Intel's cycles go to fixed counter 1 unless the watchdog's own cycles event holds it.
    let cycles_generic =
        !table.cycles.fixed || (watchdog && table.watchdog == Watchdog::FixedCycles);
    if cycles_generic {
        masks.push(table.cycles.counter_mask);
    }
    if fits(&masks, generic) {
        return Ok(());
    }
    let mut why = format!(
        "{} has {} generic counters per thread{}: its {held} weight counter(s) and the stall \
         pair ({} generic counter(s){}) do not fit together, so the stall counters are left \
         out rather than multiplexed",
        table.model,
        generic,
        if watchdog {
            " beside the NMI watchdog's"
        } else {
            ""
        },
        masks.len() - held,
        match table.stalled.counter_mask {
            Some(m) if m.count_ones() == 1 => format!(
                ", {} only on counter {}, which a weight holds",
                table.stalled.name,
                m.trailing_zeros() + 1
            ),
            Some(m) => format!(
                ", {} only on counters {}-{}",
                table.stalled.name,
                m.trailing_zeros(),
                63 - m.leading_zeros()
            ),
            None => String::new(),
        }
    );
    if watchdog {
        why.push_str("; `sysctl kernel.nmi_watchdog=0` frees a counter");
    }
    Err(why)
}

/// Whether events with these counter masks (bit n: generic counter n; None: any) can all be
/// placed on `n` generic counters, one each. The most restricted are placed first, each on the
/// lowest free counter it allows: the masks of the tables (single PMCs, counters 0-3 inside
/// 0-7, any) are nested or apart, and for such masks this finds a placement whenever one exists.
pub fn fits(masks: &[Option<u64>], n: usize) -> bool {
    let all: u64 = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mut allowed: Vec<u64> = masks.iter().map(|m| m.unwrap_or(u64::MAX) & all).collect();
    allowed.sort_by_key(|m| m.count_ones());
    let mut used = 0u64;
    for m in allowed {
        let free = m & !used;
        if free == 0 {
            return false;
        }
        used |= free & free.wrapping_neg();
    }
    true
}

fn refusal(core: &CorePmu, event: Option<&str>, why: String) -> Refusal {
    CoreUse::Stalls.refusal(core, event, why)
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn counters_are_placed_by_their_masks() {
        let ctr_0_3 = Some(0xf);
        // Skylake-SP with Hyper-Threading: three weights and the stall on counters 0-3 fill it.
        assert!(fits(&[ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3], 4));
        // With the watchdog holding the fixed cycles counter, the cycles need a fifth.
        assert!(!fits(&[ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3, None], 4));
        // Ice Lake-SP: eight counters, but only four of them take the restricted events.
        assert!(fits(&[ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3, None], 8));
        assert!(!fits(&[ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3], 8));
        // An unrestricted event placed first must not take a restricted one's counter.
        assert!(fits(
            &[None, None, None, None, ctr_0_3, ctr_0_3, ctr_0_3, ctr_0_3],
            8
        ));
        // POWER9: four weights each on its own PMC; the stall wants PMC4, which one holds.
        let pmc = |n: u32| Some(1u64 << (n - 1));
        assert!(fits(&[pmc(1), pmc(2), pmc(3), pmc(4)], 4));
        assert!(!fits(&[pmc(1), pmc(2), pmc(3), pmc(4), pmc(4)], 4));
        // POWER10: three weights on PMC1-3, the stall on PMC2.
        assert!(!fits(&[pmc(1), pmc(2), pmc(3), pmc(2)], 4));
        // Zen 4: six counters, the watchdog's taken out.
        assert!(fits(&[None; 5], 5));
        assert!(!fits(&[None; 6], 5));
    }
}
