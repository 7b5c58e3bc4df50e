//! The sampler's counter slots and how their counts weigh package traffic.
use serde::Serialize;
use std::collections::BTreeMap;

use super::Direction;

/// How the sampler reads one counter slot at each tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotScope {
    /// One counter per CPU, counting what that CPU does (core, software, msr counters).
    Cpu,
    /// One counter per package (uncore); only CPUs allowed to read it have an array entry.
    Package,
}

impl SlotScope {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotScope::Cpu => "cpu",
            SlotScope::Package => "package",
        }
    }
}

/// What a slot's counts mean to attribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotRole {
    /// Memory traffic in this direction (bytes = count × bytes_per_count).
    Traffic(Direction),
    /// A per-CPU weight for spreading package traffic (LLC misses, offcore requests). With a
    /// direction it weighs only the package traffic of that direction (LLC misses for reads,
    /// writebacks or RFOs for writes), so a task's read/write split is its own and not the
    /// package's ratio; without one (or `Total`) it weighs every direction.
    Weight(Option<Direction>),
    /// A per-CPU weight of the traffic this CPU makes to *another* package's memory (Intel OCR
    /// remote-DRAM responses, AMD remote-DRAM fills): it weighs the other packages' controller
    /// traffic, so a task reading the other socket's memory is charged for it. Its own
    /// package's traffic is weighed by the [`SlotRole::Weight`] slots.
    RemoteWeight(Option<Direction>),
    /// Counted and reported (`values`), not bandwidth.
    Other,
    /// One of the per-CPU stall pair (victims): charged to the running task like any CPU
    /// count, never a weight of package traffic.
    Stall(StallPart),
}

/// Which count of the stall pair a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StallPart {
    /// Cycles the core was stalled on a memory (L3-miss) load.
    Stalled,
    /// The core's unhalted cycles the stalls are a share of.
    Cycles,
    /// The CPU's time (the software `cpu-clock`, ns): charged to the task that ran, its
    /// on-CPU time, which turns its stalled share into seconds.
    Time,
}

impl StallPart {
    pub fn as_str(self) -> &'static str {
        match self {
            StallPart::Stalled => "stalled",
            StallPart::Cycles => "cycles",
            StallPart::Time => "time",
        }
    }
}

/// Which per-CPU counters tell how long each task waited on memory (`victims` in the plan):
/// the events, or null with the reason none is counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Victims {
    /// The stall event (`CYCLE_ACTIVITY.STALLS_L3_MISS`), or null.
    pub stalled: Option<String>,
    /// The cycles it is a share of (`CPU_CLK_UNHALTED.THREAD`), or null.
    pub cycles: Option<String>,
    pub reason: String,
}

impl Victims {
    pub fn none(reason: impl Into<String>) -> Victims {
        Victims {
            stalled: None,
            cycles: None,
            reason: reason.into(),
        }
    }

    /// The value keys of the pair in a slot list (both, or none).
    pub fn keys(specs: &[SlotSpec]) -> Option<(&str, &str)> {
        Some((
            Self::key(specs, StallPart::Stalled)?,
            Self::key(specs, StallPart::Cycles)?,
        ))
    }

    /// The value key of one part of the stall counters in a slot list.
    pub fn key(specs: &[SlotSpec], part: StallPart) -> Option<&str> {
        specs
            .iter()
            .find(|s| s.role == SlotRole::Stall(part) && s.scope == SlotScope::Cpu)
            .map(|s| s.event.as_str())
    }
}

/// One configured counter slot of the sampler (slot index = position in the list).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlotSpec {
    /// The event string as the user gave it (the key of `values` in JSON output).
    pub event: String,
    pub scope: SlotScope,
    pub role: SlotRole,
    pub bytes_per_count: Option<f64>,
    /// Counter width for wrap handling: 64 for software/msr/core, 48 for Intel uncore.
    pub counter_bits: u8,
}

impl SlotSpec {
    /// A traffic slot whose counts convert to bytes.
    pub fn counts_bytes(&self) -> bool {
        matches!(self.role, SlotRole::Traffic(_)) && self.bytes_per_count.is_some()
    }
}

/// Does a run with these slots measure bytes, or only counts (a stand-in source)?
pub fn measures_bytes(specs: &[SlotSpec]) -> bool {
    specs.iter().any(SlotSpec::counts_bytes)
}

/// What a run's traffic amounts are: bytes, or counts of its traffic events (a stand-in such as
/// page faults, `-e` events without bytes) that must never be shown as bytes. Decided here once
/// for every output (report, plot, Perfetto).
#[derive(Clone, Debug, PartialEq)]
pub enum Unit {
    Bytes,
    /// Counts of these events.
    Counts(Vec<String>),
}

impl Unit {
    pub fn of(specs: &[SlotSpec]) -> Unit {
        if measures_bytes(specs) {
            Unit::Bytes
        } else {
            Unit::Counts(
                specs
                    .iter()
                    .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
                    .map(|s| s.event.clone())
                    .collect(),
            )
        }
    }

    pub fn is_bytes(&self) -> bool {
        matches!(self, Unit::Bytes)
    }

    /// What a rate is per second of: `bytes/s`, `page-faults/s`.
    pub fn per_s(&self) -> String {
        match self {
            Unit::Bytes => "bytes/s".into(),
            Unit::Counts(events) => format!("{}/s", events.join("+")),
        }
    }
}

/// How package traffic is divided among the tasks that ran (`weighting` in the plan, in
/// `top --json` and `report --json`, in recordings and in `imc_info`).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Weighting {
    /// `traffic`: by per-CPU core counters of each CPU's own memory traffic; `cpu-time`: by
    /// on-CPU time alone (no weight counter could be had, or `--weight cpu-time`).
    pub method: String,
    /// The read weight's events (`OCR.ALL_READS.L3_MISS_LOCAL_DRAM+…`), or null.
    pub read: Option<String>,
    /// The write weight's events, or null (then writes are spread by the read weight).
    pub write: Option<String>,
    /// Local and remote memory are told apart: a package's traffic is also charged to the
    /// other packages' tasks that made it.
    pub numa: bool,
    /// Why: which core PMU and model, or why it fell back to CPU time.
    pub reason: String,
    /// Per weight event: its measured fidelity f (bytes its counts stand for ÷ the bytes the
    /// controller counted for the same work; 1 until `imc validate --save` measured it). A task
    /// is charged its weight's bytes / f; controller bytes beyond what every weight accounts
    /// for stay unattributed, as device traffic.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fidelity: BTreeMap<String, f64>,
}

impl Weighting {
    pub const TRAFFIC: &'static str = "traffic";
    pub const CPU_TIME: &'static str = "cpu-time";

    pub fn cpu_time(reason: impl Into<String>) -> Weighting {
        Weighting {
            method: Self::CPU_TIME.into(),
            read: None,
            write: None,
            numa: false,
            reason: reason.into(),
            fidelity: BTreeMap::new(),
        }
    }

    /// How it reads in a header line: "by OCR.ALL_READS.L3_MISS_LOCAL_DRAM" or "split by CPU
    /// time".
    pub fn phrase(&self) -> String {
        if self.method == Self::CPU_TIME {
            return "split by CPU time".into();
        }
        match (&self.read, &self.write) {
            (Some(r), Some(w)) => format!("by {r} (reads) and {w} (writes)"),
            (Some(r), None) => format!("by {r}"),
            (None, Some(w)) => format!("by {w}"),
            (None, None) => "by each CPU's own counts".into(),
        }
    }

    /// What a slot list weighs by, where nothing better is known (a recording made before
    /// recordings said it, a test's own slots): its weight slots' events, else CPU time.
    pub fn from_slots(specs: &[SlotSpec]) -> Weighting {
        let names = |dir: Direction| {
            let v: Vec<&str> = specs
                .iter()
                .filter(|s| match s.role {
                    SlotRole::Weight(d) | SlotRole::RemoteWeight(d) => {
                        d.is_none_or(|d| d == dir || d == Direction::Total)
                    }
                    _ => false,
                })
                .map(|s| s.event.as_str())
                .collect();
            (!v.is_empty()).then(|| v.join("+"))
        };
        let (read, write) = (names(Direction::Read), names(Direction::Write));
        let packaged = specs
            .iter()
            .any(|s| s.scope == SlotScope::Package && matches!(s.role, SlotRole::Traffic(_)));
        if read.is_none() && write.is_none() {
            return if packaged {
                Weighting::cpu_time("no weight counter among the slots")
            } else {
                Weighting {
                    method: Self::TRAFFIC.into(),
                    read: None,
                    write: None,
                    numa: false,
                    reason: "the counters count per CPU: each CPU's count goes to the task \
                             that ran there"
                        .into(),
                    fidelity: BTreeMap::new(),
                }
            };
        }
        Weighting {
            method: Self::TRAFFIC.into(),
            numa: specs
                .iter()
                .any(|s| matches!(s.role, SlotRole::RemoteWeight(_))),
            reason: "the weight slots' events".into(),
            read,
            write,
            fidelity: BTreeMap::new(),
        }
    }

    /// The one-word label of `imc_info{weighting}`: `traffic`, `traffic+numa`, `cpu-time`.
    pub fn label(&self) -> String {
        if self.numa {
            format!("{}+numa", self.method)
        } else {
            self.method.clone()
        }
    }
}
