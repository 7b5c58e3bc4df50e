//! The recording's format as both halves use it: the magic and version, the chunk kinds, the
//! bounds, the header (slots, packages, the measured command) and the errors of reading and
//! writing a recording. Below the reader and the writer, which both build on it.
use crate::model::{CommandTree, Package, SlotRole, SlotScope, SlotSpec, Topology};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// First bytes of every recording.
pub const MAGIC: [u8; 8] = *b"IMCREC\0\n";
/// The format version this build writes and the newest it reads.
pub const VERSION: u16 = 1;

pub const CHUNK_STRINGS: u8 = 1;
pub const CHUNK_TASKS: u8 = 2;
pub const CHUNK_INTERVAL: u8 = 3;
pub const CHUNK_TICKS: u8 = 4;
pub const CHUNK_END: u8 = 5;
/// Last chunk of a file the writer rotated out: the run continues in the next segment.
pub const CHUNK_CONTINUED: u8 = 6;
/// Cgroup paths of the tasks' cgroup ids, per file like the task table (a later addition: older
/// readers skip it). A chunk kind keeps its number for ever: 6 is CONTINUED.
pub const CHUNK_CGROUPS: u8 = 7;
/// Raw records of every kind, the per-task aggregates (`KIND_AGGREGATE`) among them: TICKS
/// with a whole byte for the kind and the aggregates' period and on-CPU time. A later
/// addition, so older readers skip it; TICKS stays for chunks with timer and switch records
/// only, which every reader reads.
pub const CHUNK_TICKS2: u8 = 8;
/// The task ids of the file's table that belong to the recorded command's process tree
/// (`record -- CMD`): a later addition, so older readers skip it (they report the machine).
pub const CHUNK_COMMAND_TASKS: u8 = 9;
/// Each package's loaded latency and utilisation over the INTERVAL chunk it follows (and its
/// channels' latency), written only where some package has one: a later addition, so older
/// readers skip it (they report bandwidth alone).
pub const CHUNK_LATENCY: u8 = 10;
/// What a drain charged to each process's call stacks, with the stacks' frames (`--stacks`):
/// a later addition, so older readers skip it.
pub const CHUNK_STACKS: u8 = 11;
/// Each package's bytes per memory tier (DRAM, CXL) over the INTERVAL chunk it follows (after
/// its LATENCY chunk, where it has one), written only where the plan counts a CXL tier: a later
/// addition, so older readers skip it (they report the packages' totals).
pub const CHUNK_TIERS: u8 = 12;
/// STACKS with the cgroup each charge's slices ran in: what this build writes. A later
/// addition, so older readers skip it; this one reads both.
pub const CHUNK_STACKS2: u8 = 13;

/// Ticks per TICKS chunk: small enough that a crash loses little, large enough that the chunk
/// overhead (9 bytes and a per-CPU restart of delta coding) stays negligible. Readers refuse a
/// chunk claiming more.
pub const TICKS_PER_CHUNK: usize = 1024;

/// Largest chunk payload a reader accepts (a corrupt length must not allocate gigabytes).
pub const MAX_CHUNK: u32 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not an imc recording (no imc header)", path.display())]
    NotARecording { path: PathBuf },
    #[error(
        "{}: recording format version {found} is newer than this imc reads ({VERSION}); use a newer imc",
        path.display()
    )]
    NewerVersion { path: PathBuf, found: u16 },
    #[error("{}: damaged header: {reason}", path.display())]
    BadHeader { path: PathBuf, reason: String },
    #[error("header: {0}")]
    Header(String),
    #[error(
        "--max-size {max} is too small: each half of the bound must hold the header and one interval; give at least {least} bytes ({}K)",
        least.div_ceil(1024)
    )]
    BoundTooSmall { max: u64, least: u64 },
}

/// One slot as the header stores it: the model's `SlotSpec`, its role in the words of the
/// recording format (FORMAT.md), so recordings of every version read alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeaderSlot {
    pub event: String,
    pub scope: SlotScope,
    #[serde(with = "role_words")]
    pub role: SlotRole,
    pub bytes_per_count: Option<f64>,
    pub counter_bits: u8,
}

impl HeaderSlot {
    pub fn from_spec(s: &SlotSpec) -> HeaderSlot {
        HeaderSlot {
            event: s.event.clone(),
            scope: s.scope,
            role: s.role,
            bytes_per_count: s.bytes_per_count,
            counter_bits: s.counter_bits,
        }
    }

    pub fn to_spec(&self) -> SlotSpec {
        SlotSpec {
            event: self.event.clone(),
            scope: self.scope,
            role: self.role,
            bytes_per_count: self.bytes_per_count.filter(|b| b.is_finite() && *b >= 0.0),
            counter_bits: self.counter_bits,
        }
    }
}

/// A slot's role as the header spells it: `read`, `write`, `total` (traffic), `weight`,
/// `weight-read`, `weight-write`, their `-remote` forms (weights of traffic to other packages'
/// memory), `stall`, `stall-cycles`, `stall-time` (the victims' counts) or `other`.
mod role_words {
    use crate::model::{Direction, SlotRole, StallPart};
    use serde::{Deserialize, Deserializer, Serializer};

    const WORDS: [(&str, SlotRole); 13] = [
        ("read", SlotRole::Traffic(Direction::Read)),
        ("write", SlotRole::Traffic(Direction::Write)),
        ("total", SlotRole::Traffic(Direction::Total)),
        ("weight", SlotRole::Weight(None)),
        ("weight-read", SlotRole::Weight(Some(Direction::Read))),
        ("weight-write", SlotRole::Weight(Some(Direction::Write))),
        ("weight-remote", SlotRole::RemoteWeight(None)),
        (
            "weight-read-remote",
            SlotRole::RemoteWeight(Some(Direction::Read)),
        ),
        (
            "weight-write-remote",
            SlotRole::RemoteWeight(Some(Direction::Write)),
        ),
        ("other", SlotRole::Other),
        // The per-CPU stall pair (victims), charged like `other`, and the CPU's time that
        // turns it into seconds.
        ("stall", SlotRole::Stall(StallPart::Stalled)),
        ("stall-cycles", SlotRole::Stall(StallPart::Cycles)),
        ("stall-time", SlotRole::Stall(StallPart::Time)),
    ];

    pub fn serialize<S: Serializer>(role: &SlotRole, s: S) -> Result<S::Ok, S::Error> {
        // A weight of every direction is written as one without a direction.
        let role = match *role {
            SlotRole::Weight(Some(Direction::Total)) => SlotRole::Weight(None),
            SlotRole::RemoteWeight(Some(Direction::Total)) => SlotRole::RemoteWeight(None),
            r => r,
        };
        let word = WORDS
            .iter()
            .find(|(_, r)| *r == role)
            .map_or("other", |(w, _)| w);
        s.serialize_str(word)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SlotRole, D::Error> {
        let word = String::deserialize(d)?;
        WORDS
            .iter()
            .find(|(w, _)| *w == word)
            .map(|(_, r)| *r)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown slot role '{word}'")))
    }
}

/// What a recording was made of. Written once at the start of each file (JSON, see FORMAT.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordHeader {
    pub slots: Vec<HeaderSlot>,
    pub packages: Vec<HeaderPackage>,
    pub freq_hz: u32,
    /// What was measured (`intel-uncore-imc`, `proxy:page-faults`).
    pub source: String,
    /// Precise mode: the ticks include context-switch records.
    #[serde(default)]
    pub precise: bool,
    /// CLOCK_MONOTONIC and CLOCK_REALTIME at the start, to place monotonic times on a calendar.
    pub start_monotonic_ns: u64,
    pub start_realtime_ns: u64,
    pub interval_ns: u64,
    /// Identifies the run across rotated files; `segment` counts rotations (0: first file).
    #[serde(default)]
    pub run_id: u64,
    #[serde(default)]
    pub segment: u32,
    /// How the run divided package traffic (absent in recordings made before imc said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighting: Option<crate::model::Weighting>,
    /// `record -- CMD`: the command and how its process tree is told apart (absent in
    /// recordings of the machine alone, and in those made before imc marked commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<HeaderCommand>,
    /// `record -p`: only these processes' task rows were recorded (package totals are the
    /// whole machine's). Empty: every task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
}

/// The recorded command (`record -- CMD`): which tasks are its tree is stored per task, in
/// COMMAND_TASKS chunks; this says what it was and how the tree was followed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeaderCommand {
    /// Its arguments (lossily UTF-8: a byte that is not is U+FFFD).
    pub argv: Vec<String>,
    pub pid: u32,
    /// `cgroup` (exact) or `parentage` (can miss a child that lives between two scans).
    pub tree: CommandTree,
    /// The command's cgroup (with `tree` = `cgroup`): its id and its path.
    #[serde(default)]
    pub cgroup_id: Option<u64>,
    #[serde(default)]
    pub cgroup_path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeaderPackage {
    pub id: u32,
    pub cpus: Vec<u32>,
}

impl RecordHeader {
    pub fn new(
        specs: &[SlotSpec],
        topology: &Topology,
        freq_hz: u32,
        source: impl Into<String>,
        interval_ns: u64,
    ) -> RecordHeader {
        RecordHeader {
            slots: specs.iter().map(HeaderSlot::from_spec).collect(),
            packages: topology
                .packages
                .iter()
                .map(|p| HeaderPackage {
                    id: p.id,
                    cpus: p.cpus.clone(),
                })
                .collect(),
            freq_hz,
            source: source.into(),
            precise: false,
            start_monotonic_ns: 0,
            start_realtime_ns: 0,
            interval_ns,
            run_id: 0,
            segment: 0,
            weighting: None,
            command: None,
            pids: Vec::new(),
        }
    }

    pub fn specs(&self) -> Result<Vec<SlotSpec>, String> {
        if self.slots.len() > imc_common::MAX_SLOTS {
            return Err(format!(
                "{} slots (at most {})",
                self.slots.len(),
                imc_common::MAX_SLOTS
            ));
        }
        Ok(self.slots.iter().map(HeaderSlot::to_spec).collect())
    }

    pub fn topology(&self) -> Topology {
        Topology::of_packages(
            self.packages
                .iter()
                .map(|p| Package {
                    id: p.id,
                    cpus: p.cpus.clone(),
                })
                .collect(),
        )
    }
}

/// The rotated predecessor of a recording: `FILE.1`.
pub fn rotated_path(path: &std::path::Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}

/// The chunk type for `ticks`: TICKS, which every reader reads, unless some are of a kind its
/// one bit cannot say (aggregates).
pub fn ticks_chunk(ticks: &[imc_common::Record]) -> u8 {
    if ticks.iter().any(|r| r.kind > 1) {
        CHUNK_TICKS2
    } else {
        CHUNK_TICKS
    }
}
