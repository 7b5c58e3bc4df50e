//! What discovery finds and event encoding produces: PMUs and their format fields, the topology,
//! the backends (sources) with their events, the machine, and the non-bandwidth PMUs.
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;

/// Which `perf_event_attr` word a format field writes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigWord {
    Config,
    Config1,
    Config2,
    Config3,
}

/// One `format/<name>` file, e.g. `umask` = `config:8-15,32-55` (bits may be split).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FormatField {
    pub name: String,
    pub word: ConfigWord,
    /// Bit ranges, low part of the value first, in the order the file lists them.
    pub bits: Vec<RangeInclusive<u8>>,
}

/// One `events/<name>` alias with its optional `.scale` and `.unit`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventAlias {
    pub name: String,
    /// The alias text, trimmed: `event=0x04,umask=0x03`.
    pub terms: String,
    pub scale: Option<f64>,
    pub unit: Option<String>,
}

/// One PMU under `sys/bus/event_source/devices/`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pmu {
    pub name: String,
    /// `type`: dynamic on real systems, always read from sysfs.
    #[serde(rename = "type")]
    pub pmu_type: u32,
    /// `cpumask` (or `cpus`) when the PMU has one: the CPUs its events are opened on.
    pub cpumask: Option<Vec<u32>>,
    pub formats: BTreeMap<String, FormatField>,
    pub events: BTreeMap<String, EventAlias>,
    /// Directory the PMU was read from (for error messages).
    #[serde(skip)]
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Package {
    pub id: u32,
    pub cpus: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Vec<u32>,
}

/// CPUs, packages and NUMA nodes of the machine under `--root`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub online: Vec<u32>,
    pub possible: Vec<u32>,
    pub packages: Vec<Package>,
    pub nodes: Vec<NumaNode>,
}

impl Topology {
    /// A machine known only by its packages (a recording's header, a simulated machine): every
    /// CPU of a package online, no NUMA nodes.
    pub fn of_packages(packages: Vec<Package>) -> Topology {
        let cpus: Vec<u32> = packages
            .iter()
            .flat_map(|p| p.cpus.iter().copied())
            .collect();
        Topology {
            online: cpus.clone(),
            possible: cpus,
            packages,
            nodes: Vec::new(),
        }
    }

    /// The package (physical_package_id) a CPU belongs to.
    pub fn package_of(&self, cpu: u32) -> Option<u32> {
        self.packages
            .iter()
            .find(|p| p.cpus.contains(&cpu))
            .map(|p| p.id)
    }
}

/// What one event string turns into: everything `perf_event_open` needs, plus how to turn counts
/// into bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Encoded {
    /// The event string as the user wrote it (or the default event's name).
    pub event: String,
    pub pmu: String,
    #[serde(rename = "type")]
    pub pmu_type: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    /// The alias' `.scale`, if any (perf multiplies counts by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Bytes per raw count when the event measures memory traffic (scale × unit, e.g.
    /// 6.103515625e-5 MiB → 64.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_count: Option<f64>,
    /// The PMU's cpumask: the CPUs to open it on (None: any CPU / every CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<u32>>,
}

/// The backend names of the command-line contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum BackendKind {
    #[serde(rename = "intel-uncore-imc")]
    IntelUncoreImc,
    #[serde(rename = "intel-client-imc")]
    IntelClientImc,
    #[serde(rename = "intel-client-mchbar")]
    IntelClientMchbar,
    #[serde(rename = "amd-umc")]
    AmdUmc,
    #[serde(rename = "amd-df")]
    AmdDf,
    #[serde(rename = "power-nest-imc")]
    PowerNestImc,
    #[serde(rename = "knl-edc")]
    KnlEdc,
    #[serde(rename = "knl-imc")]
    KnlImc,
    #[serde(rename = "nvidia-scf")]
    NvidiaScf,
    #[serde(rename = "arm-cmn")]
    ArmCmn,
    #[serde(rename = "arm-dmc620")]
    ArmDmc620,
    #[serde(rename = "hisi-ddrc")]
    HisiDdrc,
    #[serde(rename = "ampere-mcu")]
    AmpereMcu,
    #[serde(rename = "cxl-pmu")]
    CxlPmu,
    #[serde(rename = "msr")]
    Msr,
    #[serde(rename = "software")]
    Software,
}

impl BackendKind {
    pub const ALL: [BackendKind; 16] = [
        BackendKind::IntelUncoreImc,
        BackendKind::IntelClientImc,
        BackendKind::IntelClientMchbar,
        BackendKind::AmdUmc,
        BackendKind::AmdDf,
        BackendKind::PowerNestImc,
        BackendKind::KnlEdc,
        BackendKind::KnlImc,
        BackendKind::NvidiaScf,
        BackendKind::ArmDmc620,
        BackendKind::HisiDdrc,
        BackendKind::AmpereMcu,
        BackendKind::ArmCmn,
        BackendKind::CxlPmu,
        BackendKind::Msr,
        BackendKind::Software,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::IntelUncoreImc => "intel-uncore-imc",
            BackendKind::IntelClientImc => "intel-client-imc",
            BackendKind::IntelClientMchbar => "intel-client-mchbar",
            BackendKind::AmdUmc => "amd-umc",
            BackendKind::AmdDf => "amd-df",
            BackendKind::PowerNestImc => "power-nest-imc",
            BackendKind::KnlEdc => "knl-edc",
            BackendKind::KnlImc => "knl-imc",
            BackendKind::NvidiaScf => "nvidia-scf",
            BackendKind::ArmCmn => "arm-cmn",
            BackendKind::ArmDmc620 => "arm-dmc620",
            BackendKind::HisiDdrc => "hisi-ddrc",
            BackendKind::AmpereMcu => "ampere-mcu",
            BackendKind::CxlPmu => "cxl-pmu",
            BackendKind::Msr => "msr",
            BackendKind::Software => "software",
        }
    }

    pub fn parse(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// Does this backend measure DRAM (or MCDRAM) traffic, as opposed to a stand-in?
    pub fn is_memory_controller(self) -> bool {
        !matches!(self, BackendKind::Msr | BackendKind::Software)
    }

    /// The memory tier its traffic goes to: CXL memory devices are a tier of their own.
    pub fn tier(self) -> Tier {
        match self {
            BackendKind::CxlPmu => Tier::Cxl,
            _ => Tier::Dram,
        }
    }
}

/// The memory a counter's traffic goes to: the package's own DRAM (or MCDRAM, HBM), or a CXL
/// memory expander, a second tier with its own NUMA node.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    #[default]
    Dram,
    Cxl,
}

impl Tier {
    pub fn is_dram(&self) -> bool {
        *self == Tier::Dram
    }

    /// Its name in the contract: `dram`, `cxl` (as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Dram => "dram",
            Tier::Cxl => "cxl",
        }
    }

    /// The prefix of a CXL counter's value key (`cxl_read`), so that a machine's two tiers stay
    /// apart in every output and a recording's slots keep their tier by name alone.
    pub const CXL_PREFIX: &'static str = "cxl_";

    /// The tier of a default traffic event by its value key: `cxl_read`, `cxl_write`,
    /// `cxl_total` are CXL; anything else (DRAM's `read`, KNL's `mcdram_read`, a user's event
    /// string, which always has a `/` or is a generic name) is DRAM.
    pub fn of_key(key: &str) -> Tier {
        match key.strip_prefix(Self::CXL_PREFIX) {
            Some("read" | "write" | "total") => Tier::Cxl,
            _ => Tier::Dram,
        }
    }
}

/// What a memory-side PMU's driver allows, shown beside each counter of the plan: how many
/// events its hardware counts at once, how many may share a group, how wide its counters are,
/// and the rule in words with its source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PmuLimits {
    /// Hardware counters of one PMU instance, where the driver fixes the number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<u32>,
    /// Hardware events a group may hold (DMC-620: one); imc opens every counter alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_group: Option<u32>,
    /// Width of the hardware counter, where the driver fixes it (the kernel accumulates the
    /// count into 64 bits either way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter_bits: Option<u8>,
    pub rule: String,
}

/// What a bandwidth event measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Read,
    Write,
    Total,
}

impl Direction {
    /// Its name in the contract: `read`, `write`, `total` (as serde writes it).
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Total => "total",
        }
    }
}

/// Where a counter's count belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Scope {
    /// Counts what one CPU does (core and software counters).
    Cpu(u32),
    /// Counts a whole package's memory traffic.
    Package(u32),
    /// One memory channel/controller of a package.
    Channel { package: u32, channel: u32 },
}

/// Facts about the machine from `proc/cpuinfo` and `sys/hypervisor`: vendor, family/model
/// (x86), the POWER generation, and whether we run under a hypervisor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// `vendor_id` (GenuineIntel, AuthenticAMD) on x86.
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
    /// The POWER generation from `cpu : POWER9, altivec supported` → "POWER9".
    pub power: Option<String>,
    /// `platform` on POWER (PowerNV is bare metal; pSeries is an LPAR).
    pub platform: Option<String>,
    /// `CPU implementer` on Arm (MIDR_EL1.Implementer: 0x41 Arm, 0xc0 Ampere, 0x48 HiSilicon).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm_implementer: Option<u32>,
    /// `CPU part` on Arm (MIDR_EL1.PartNum: 0xd0c Neoverse N1, 0xd4f Neoverse V2, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm_part: Option<u32>,
    pub hypervisor: bool,
    /// Why `hypervisor` is set, for messages.
    pub hypervisor_source: Option<String>,
}

impl Machine {
    pub fn is_intel(&self) -> bool {
        self.vendor.as_deref() == Some("GenuineIntel")
    }
    pub fn is_amd(&self) -> bool {
        matches!(
            self.vendor.as_deref(),
            Some("AuthenticAMD") | Some("HygonGenuine")
        )
    }
    /// Intel family-6 model number, if this is one.
    pub fn intel_model(&self) -> Option<u32> {
        (self.is_intel() && self.family == Some(6))
            .then_some(self.model)
            .flatten()
    }
}

/// A core PMU: `cpu`, or on hybrid Intel parts `cpu_core` and `cpu_atom`, each counting on its
/// own CPUs with its own `type`. Its events weigh package traffic per CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CorePmu {
    pub pmu: Pmu,
    /// The CPUs it counts on: its `cpus` file on hybrid parts, else every online CPU.
    pub cpus: Vec<u32>,
    /// `caps/pmu_name` (`skylake`, `sapphire_rapids`, `alderlake_hybrid`), where the kernel
    /// has one.
    pub pmu_name: Option<String>,
}

/// Result of discovery under one root: what `imc list` prints and what `stat`/`top` choose from.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Discovery {
    pub hypervisor: bool,
    pub topology: Topology,
    pub sources: Vec<Source>,
    /// PMUs that are not bandwidth counters but that a planner or a profiler can use: AMD IBS,
    /// POWER core/thread/trace IMC. Empty where the machine has none.
    pub other_sources: Vec<OtherSource>,
    /// The CPU as proc/cpuinfo names it (which core events exist).
    #[serde(skip)]
    pub machine: Machine,
    /// The core PMUs, whose per-CPU events weigh package traffic.
    #[serde(skip)]
    pub cores: Vec<CorePmu>,
    /// The memory controller's queues (or the L3's sampled DRAM latency), for loaded latency:
    /// their events on every channel, or why this machine has none.
    #[serde(skip)]
    pub queues: Queues,
}

/// What one loaded-latency counter counts. Average latency = occupancy ÷ inserts (in the
/// controller's DRAM clocks, the clock rate measured by `DramClocks`), or, on AMD's L3,
/// sampled latency ÷ sampled requests (in units of 10 ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueuePart {
    /// Read pending queue occupancy: each DRAM clock adds the reads waiting.
    ReadOccupancy,
    /// Read pending queue inserts: one per read entering the queue.
    ReadInserts,
    WriteOccupancy,
    WriteInserts,
    /// The channel's DRAM clock ticks (the box's fixed counter).
    DramClocks,
    /// AMD L3: summed latency of sampled DRAM fills (10 ns units), local or remote node.
    SampledLatency {
        remote: bool,
    },
    /// AMD L3: the sampled DRAM fills the latency sum is over.
    SampledRequests {
        remote: bool,
    },
}

/// Serialized as its key (`rpq_occupancy`, `l3_dram_far_requests`).
impl Serialize for QueuePart {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.key())
    }
}

impl QueuePart {
    /// The key of the counter in `values` (JSON) and in the plan: one name per part.
    pub fn key(self) -> &'static str {
        match self {
            QueuePart::ReadOccupancy => "rpq_occupancy",
            QueuePart::ReadInserts => "rpq_inserts",
            QueuePart::WriteOccupancy => "wpq_occupancy",
            QueuePart::WriteInserts => "wpq_inserts",
            QueuePart::DramClocks => "dram_clockticks",
            QueuePart::SampledLatency { remote: false } => "l3_dram_near_latency",
            QueuePart::SampledLatency { remote: true } => "l3_dram_far_latency",
            QueuePart::SampledRequests { remote: false } => "l3_dram_near_requests",
            QueuePart::SampledRequests { remote: true } => "l3_dram_far_requests",
        }
    }

    /// The part a `values` key names (the inverse of [`QueuePart::key`]).
    pub fn from_key(key: &str) -> Option<QueuePart> {
        QueuePart::ALL.into_iter().find(|p| p.key() == key)
    }

    pub const ALL: [QueuePart; 9] = [
        QueuePart::ReadOccupancy,
        QueuePart::ReadInserts,
        QueuePart::WriteOccupancy,
        QueuePart::WriteInserts,
        QueuePart::DramClocks,
        QueuePart::SampledLatency { remote: false },
        QueuePart::SampledLatency { remote: true },
        QueuePart::SampledRequests { remote: false },
        QueuePart::SampledRequests { remote: true },
    ];
}

/// One loaded-latency event on one PMU instance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueEvent {
    pub pmu: String,
    pub part: QueuePart,
    /// The channel's sub-channel (Granite Rapids' scheduler), where it has them.
    pub sub_channel: Option<u32>,
    /// The pseudo-channel whose queue this is (ICX/SPR/GNR), where the queues are per
    /// pseudo-channel.
    pub pseudo_channel: Option<u32>,
    pub config: u64,
    pub config1: u64,
    /// Counted on the box's fixed counter (no generic counter taken).
    pub fixed: bool,
    /// Which latency the event belongs to, in the order the plan keeps them when the PMU runs
    /// out of counters: 0 first.
    pub rank: u8,
    /// The encoding's text and its public source.
    pub origin: String,
}

/// The loaded-latency events of this machine, or why it has none.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Queues {
    /// `intel-imc-queues`, `amd-l3-sampled-latency`; empty where none.
    pub kind: &'static str,
    pub pmus: Vec<SourcePmu>,
    pub events: Vec<QueueEvent>,
    /// Generic counters of one PMU instance (the fixed counter aside).
    pub generic_counters: usize,
    /// Why there are no queue events here (None where there are).
    pub reason: Option<String>,
}

/// One backend, available or not.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Source {
    pub backend: BackendKind,
    pub available: bool,
    /// Why it is unavailable (hypervisor, missing PMU, permission, lockdown …), or a caveat.
    pub reason: Option<String>,
    pub pmus: Vec<SourcePmu>,
    pub events: Vec<SourceEvent>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourcePmu {
    pub name: String,
    #[serde(rename = "type")]
    pub pmu_type: u32,
    /// The CPUs its events are opened on: one per package (from cpumask), or every online CPU
    /// for CPU-scope PMUs without a cpumask.
    pub cpus: Vec<u32>,
}

/// One bandwidth (or stand-in) event of a source, per PMU instance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceEvent {
    /// `read`, `write`, `total` for bandwidth events; other names for auxiliary ones.
    pub name: String,
    pub pmu: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config1: Option<u64>,
    /// The third word, where the encoding sets it (DMC-620's event and clock domain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config2: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_count: Option<f64>,
    /// intel-client-mchbar only: physical address of the counter and its width in bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u8>,
    #[serde(skip)]
    pub direction: Option<Direction>,
    /// The sub-channel of its channel this event counts (Granite Rapids' two command
    /// schedulers per channel); None where a channel has no sub-channels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_channel: Option<u32>,
    /// Counter width in bits for wrap handling (48 for Intel uncore, 64 when unknown).
    #[serde(skip)]
    pub counter_bits: u8,
    /// The sysfs alias or source this encoding came from (for `-v` and error messages).
    #[serde(skip)]
    pub origin: String,
}

/// What a non-bandwidth source is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceRole {
    /// Samples individual instructions or cycles (AMD IBS, POWER trace IMC): no byte counts.
    Profiling,
    /// Counts events, but not bytes of memory traffic (POWER core and thread IMC).
    Counting,
}

/// Whose activity one counter of the PMU covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PmuScope {
    /// A whole chip (POWER nest IMC).
    Chip,
    /// All SMT threads of one core: one event per core, on its designated CPU.
    Core,
    /// One task: events are bound to a task (pid ≥ 0), not opened CPU-wide.
    Thread,
    /// One CPU (per-CPU or per-task events on any CPU, as core PMUs).
    Cpu,
}

/// A group of PMUs of which only one may have events at a time, system-wide.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Exclusivity {
    /// Name of the group (`power-imc-core-thread-trace`).
    pub group: String,
    /// The PMUs of the group present here (this one included).
    pub members: Vec<String>,
    /// What the kernel does when another member is in use (`EBUSY`).
    pub errno: String,
}

/// One `events/` alias of a non-bandwidth PMU, encoded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OtherEvent {
    pub name: String,
    pub config: u64,
    /// The alias' `.scale` (perf multiplies counts by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
}

/// A PMU that is not a bandwidth source, with the facts a planner needs to use it or to say why
/// not: its role, scope, whether it counts or samples, who may open it, and what excludes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OtherSource {
    pub pmu: String,
    #[serde(rename = "type")]
    pub pmu_type: u32,
    pub role: SourceRole,
    pub scope: PmuScope,
    /// perf_event_open in counting mode (sample_period 0) is accepted.
    pub can_count: bool,
    /// Sampling (sample_period > 0) is accepted.
    pub can_sample: bool,
    /// Task-bound events (pid ≥ 0) are accepted.
    pub per_task: bool,
    /// CPU-wide events (pid = -1, cpu ≥ 0) are accepted.
    pub cpu_wide: bool,
    /// Needs CAP_PERFMON (or CAP_SYS_ADMIN) whatever perf_event_paranoid says.
    pub needs_perfmon: bool,
    /// The CPUs to open it on: its cpumask (core IMC: one CPU per core). Empty: no cpumask, any
    /// CPU (IBS on every CPU, thread IMC with the task).
    pub cpus: Vec<u32>,
    /// For a per-core PMU, the CPUs of each designated CPU's core (`thread_siblings_list`), in
    /// the order of `cpus`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cores: Vec<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Exclusivity>,
    /// `format/` files as the kernel writes them (`cnt_ctl` → `config:19`).
    pub formats: BTreeMap<String, String>,
    /// `caps/` files (IBS: `zen4_ibs_extensions`, …); empty when the directory is empty or
    /// absent.
    pub caps: BTreeMap<String, String>,
    pub events: Vec<OtherEvent>,
    /// Why it is not a bandwidth source, in one line.
    pub why: String,
    /// Further facts, one line each (what samples carry, how to record, what is missing).
    pub notes: Vec<String>,
}
