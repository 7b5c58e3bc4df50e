//! The recording file of `imc record` / `imc report`: a versioned header, then self-delimiting,
//! checksummed chunks (per-interval per-task aggregates; raw ticks around bursts). The format
//! is specified in FORMAT.md beside this file.
//!
//! The writer keeps the file small (varints, a string table and a task table, raw ticks only
//! around bursts and within a budget) and bounded (`max_size`: FILE plus one rotated FILE.1).
//! The reader stops at the first damaged or truncated chunk and hands back everything before
//! it, saying where and why it stopped.
pub mod codec;
mod reader;
mod writer;

pub use reader::{Item, ReadStatus, Reader};
pub use writer::{Writer, WriterOptions, WriterStats};

use crate::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
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

/// Largest chunk payload a reader accepts (a corrupt length must not allocate gigabytes).
pub const MAX_CHUNK: u32 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {source}", path.display())]
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
}

/// One slot as the header stores it (the model's `SlotSpec`, in words).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeaderSlot {
    pub event: String,
    /// `cpu` or `package`.
    pub scope: String,
    /// `read`, `write`, `total` (traffic), `weight` or `other`.
    pub role: String,
    pub bytes_per_count: Option<f64>,
    pub counter_bits: u8,
}

impl HeaderSlot {
    pub fn from_spec(s: &SlotSpec) -> HeaderSlot {
        HeaderSlot {
            event: s.event.clone(),
            scope: match s.scope {
                SlotScope::Cpu => "cpu",
                SlotScope::Package => "package",
            }
            .into(),
            role: match s.role {
                SlotRole::Traffic(Direction::Read) => "read",
                SlotRole::Traffic(Direction::Write) => "write",
                SlotRole::Traffic(Direction::Total) => "total",
                SlotRole::Weight => "weight",
                SlotRole::Other => "other",
            }
            .into(),
            bytes_per_count: s.bytes_per_count,
            counter_bits: s.counter_bits,
        }
    }

    pub fn to_spec(&self) -> Result<SlotSpec, String> {
        let scope = match self.scope.as_str() {
            "cpu" => SlotScope::Cpu,
            "package" => SlotScope::Package,
            o => return Err(format!("slot '{}': unknown scope '{o}'", self.event)),
        };
        let role = match self.role.as_str() {
            "read" => SlotRole::Traffic(Direction::Read),
            "write" => SlotRole::Traffic(Direction::Write),
            "total" => SlotRole::Traffic(Direction::Total),
            "weight" => SlotRole::Weight,
            "other" => SlotRole::Other,
            o => return Err(format!("slot '{}': unknown role '{o}'", self.event)),
        };
        Ok(SlotSpec {
            event: self.event.clone(),
            scope,
            role,
            bytes_per_count: self.bytes_per_count.filter(|b| b.is_finite() && *b >= 0.0),
            counter_bits: self.counter_bits,
        })
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
        self.slots.iter().map(HeaderSlot::to_spec).collect()
    }

    pub fn topology(&self) -> Topology {
        let cpus: Vec<u32> = self.packages.iter().flat_map(|p| p.cpus.clone()).collect();
        Topology {
            online: cpus.clone(),
            possible: cpus,
            packages: self
                .packages
                .iter()
                .map(|p| Package {
                    id: p.id,
                    cpus: p.cpus.clone(),
                })
                .collect(),
            nodes: Vec::new(),
        }
    }
}

/// The rotated predecessor of a recording: `FILE.1`.
pub fn rotated_path(path: &std::path::Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}
