//! The shapes of the core event tables ([`CoreTraffic`], [`CoreStall`]) and what every vendor's
//! table is written with.
use crate::model::Direction;
use serde::Serialize;

/// Which memory a read weight's lines came from, as the core's event tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Locality {
    /// The memory of this CPU's own package (Intel "local socket", AMD "near"/"local" node).
    Local,
    /// Another package's memory.
    Remote,
    /// Either: the event does not tell.
    Any,
}

/// Which memory controller's traffic an event weighs (Knights Landing has both kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Memory {
    Dram,
    Mcdram,
}

/// One core event used as a traffic weight.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreTrafficEvent {
    /// The vendor's (or perf's) event name.
    pub name: &'static str,
    /// Terms in the core PMU's `format/` vocabulary (`event=…,umask=…,offcore_rsp=…`).
    pub terms: &'static str,
    /// The memory-controller direction it weighs.
    pub direction: Direction,
    pub locality: Locality,
    pub memory: Memory,
    /// Bytes one count stands for (a cache line: 64, 128 on POWER).
    pub bytes_per_count: f64,
    /// Bit n set: the event may use general-purpose counter n; None: any counter.
    pub counter_mask: Option<u64>,
    /// Uses one of the thread's two offcore-response MSRs (the kernel moves 0xb7↔0xbb,
    /// 0x2a↔0x2b, or umask 0x01↔0x02 on Atom, to whichever is free).
    pub offcore_register: bool,
    /// Where the encoding was verified: file and event name.
    pub source: &'static str,
}

/// The traffic weights of one core type.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreTraffic {
    pub model: &'static str,
    /// At most four; events of the same direction, locality and memory add up to one weight.
    /// Together they never need more than two offcore-response registers.
    pub events: Vec<CoreTrafficEvent>,
    /// A better write weight that needs an offcore-response register the remote read holds: on a
    /// machine with one package (no remote DRAM) drop the `Remote` events and use this one in
    /// place of the `Write` event.
    pub alt_write: Option<CoreTrafficEvent>,
    pub notes: Vec<&'static str>,
}

/// Counters 0-3 (Intel's `"Counter": "0,1,2,3"`).
pub(super) const CTR_0_3: Option<u64> = Some(0xf);

pub(super) const fn ev(
    name: &'static str,
    terms: &'static str,
    direction: Direction,
    locality: Locality,
    counter_mask: Option<u64>,
    offcore_register: bool,
    source: &'static str,
) -> CoreTrafficEvent {
    CoreTrafficEvent {
        name,
        terms,
        direction,
        locality,
        memory: Memory::Dram,
        bytes_per_count: 64.0,
        counter_mask,
        offcore_register,
        source,
    }
}

/// Where the NMI watchdog's counter comes from, when `kernel.nmi_watchdog` is 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watchdog {
    /// x86 Intel: a cycles event on fixed counter 1, so imc's own cycles event takes a generic
    /// counter instead.
    FixedCycles,
    /// AMD: a cycles event on one of the generic counters.
    Generic,
    /// POWER: the hard-lockup detector does not use the PMU.
    None,
}

/// One core event of the stall pair.
#[derive(Clone, Debug, PartialEq)]
pub struct StallEvent {
    pub name: &'static str,
    /// Terms in the core PMU's `format/` vocabulary.
    pub terms: &'static str,
    /// Bit n set: the event may use generic counter n; None: any generic counter.
    pub counter_mask: Option<u64>,
    /// Counted on a fixed counter of its own (takes no generic counter).
    pub fixed: bool,
    pub source: &'static str,
}

/// The per-CPU stall counters of one core type: cycles stalled on a memory load and the cycles
/// they are a share of, and how many generic counters the core has for them and the weights.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreStall {
    pub model: &'static str,
    pub stalled: StallEvent,
    pub cycles: StallEvent,
    /// Generic (programmable) counters per hardware thread.
    pub generic_counters: usize,
    pub watchdog: Watchdog,
    pub notes: Vec<&'static str>,
}

/// AMD and POWER name their one core PMU `cpu`: any other name is not theirs.
pub(super) fn expect_cpu_pmu(vendor: &str, pmu: &str) -> Result<(), String> {
    if pmu != "cpu" {
        return Err(format!("{vendor} has no core PMU '{pmu}' (expected 'cpu')"));
    }
    Ok(())
}
