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
/// Cgroup paths of the tasks' cgroup ids (a later addition: older readers skip it).
pub const CHUNK_CGROUPS: u8 = 6;

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
    /// `read`, `write`, `total` (traffic), `weight`, `weight-read`, `weight-write` or `other`.
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
                SlotRole::Weight(None | Some(Direction::Total)) => "weight",
                SlotRole::Weight(Some(Direction::Read)) => "weight-read",
                SlotRole::Weight(Some(Direction::Write)) => "weight-write",
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
            "weight" => SlotRole::Weight(None),
            "weight-read" => SlotRole::Weight(Some(Direction::Read)),
            "weight-write" => SlotRole::Weight(Some(Direction::Write)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::synth::{Scenario, SynthItem};
    use crate::output::interval::IntervalResult;

    #[test]
    fn raw_ticks_and_intervals_round_trip_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.imc");
        let mut sc = Scenario::busy(3, 1000, 300_000_000);
        sc.precise = true;
        sc.counter_start = (1 << 48) - 1000;
        let header = RecordHeader::new(&sc.specs(), &sc.topology(), 1000, "x", 100_000_000);
        let opts = WriterOptions {
            burst_threshold: Some(0.0),
            ..WriterOptions::default()
        };
        let mut w = Writer::with_options(&path, header.clone(), None, opts).unwrap();
        let mut a = crate::attribution::Attributor::new(&sc.specs(), &sc.topology(), "x");
        let mut sent = Vec::new();
        let mut ivs: Vec<IntervalResult> = Vec::new();
        sc.mark_every_ns = Some(100_000_000);
        for it in sc.stream() {
            match it {
                SynthItem::Tick(r) => {
                    a.push_tick(&r);
                    w.push_tick(&r).unwrap();
                    sent.push(r);
                }
                SynthItem::Mark(t) => {
                    let iv = a.close_interval(t);
                    w.push_interval(&iv).unwrap();
                    ivs.push(iv);
                }
                SynthItem::PackageRead(..) => {}
            }
        }
        let stats = w.finish().unwrap();
        let mut r = Reader::open(&path).unwrap();
        assert_eq!(r.header().slots, header.slots);
        let (mut got_ticks, mut got_ivs) = (Vec::new(), Vec::new());
        for item in r.by_ref() {
            match item {
                Item::Ticks(t) => got_ticks.extend(t),
                Item::Interval(iv) => got_ivs.push(iv),
            }
        }
        assert_eq!(r.status(), &ReadStatus::Complete);
        assert_eq!(got_ivs, ivs);
        // Every interval is a burst (threshold 0): every record was kept, bit for bit.
        assert_eq!(stats.ticks_written as usize, got_ticks.len());
        assert!(!got_ticks.is_empty());
        for g in &got_ticks {
            let s = sent
                .iter()
                .find(|s| s.t_ns == g.t_ns && s.cpu == g.cpu && s.kind == g.kind)
                .unwrap();
            assert_eq!(
                (s.pid, s.tgid, s.cgroup_id, s.comm, s.slots, s.failed_mask),
                (g.pid, g.tgid, g.cgroup_id, g.comm, g.slots, g.failed_mask)
            );
        }
    }

    #[test]
    fn garbage_after_the_header_is_damage_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.imc");
        let sc = Scenario::busy(1, 1000, 1);
        let header = RecordHeader::new(&sc.specs(), &sc.topology(), 1000, "x", 1);
        Writer::create(&path, header, None)
            .unwrap()
            .finish()
            .unwrap();
        let mut data = std::fs::read(&path).unwrap();
        let hdr_end = data.len() - 12;
        for seed in 0..200u32 {
            data.truncate(hdr_end);
            let mut x = seed.wrapping_mul(2_654_435_761);
            for _ in 0..(seed % 64) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                data.push(x as u8);
            }
            let mut r = Reader::from_bytes(&path, data.clone()).unwrap();
            while r.next_item().is_some() {}
            assert_ne!(r.status(), &ReadStatus::Reading);
        }
    }

    /// Intervals with named tasks in ten containers, in turn.
    fn named_intervals(n: u64) -> (Vec<crate::model::SlotSpec>, Vec<IntervalResult>) {
        use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};
        use crate::output::interval::{PackageRow, TaskRow};
        let specs = vec![SlotSpec {
            event: "r".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(Direction::Read),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        }];
        let ivs = (0..n)
            .map(|i| {
                let mut t = TaskRow {
                    pid: 100 + i as u32,
                    tgid: 100,
                    comm: "w".into(),
                    cgroup: 1000 + i % 10,
                    read_bytes: 6400,
                    share: 1.0,
                    values: [("r".to_string(), 100.0)].into(),
                    ..TaskRow::default()
                };
                let path = format!("/system.slice/docker-{:064x}.scope", i % 10 + 1);
                t.set_cgroup_names(&crate::discovery::cgroup::names_of_path(&path));
                // The root cgroup's tasks come without a path (not resolved): null stays null.
                let bare = TaskRow {
                    pid: 1,
                    tgid: 1,
                    comm: "init".into(),
                    cgroup: 1,
                    values: [("r".to_string(), 0.0)].into(),
                    ..TaskRow::default()
                };
                IntervalResult {
                    t_start_ns: i * 100,
                    t_end_ns: (i + 1) * 100,
                    source: "x".into(),
                    packages: vec![PackageRow {
                        id: 0,
                        read_bytes: 6400,
                        ..PackageRow::default()
                    }],
                    tasks: vec![t, bare],
                    ..IntervalResult::default()
                }
            })
            .collect();
        (specs, ivs)
    }

    #[test]
    fn cgroup_paths_survive_the_file_and_its_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.imc");
        let (specs, ivs) = named_intervals(2000);
        let topo = crate::model::Topology {
            packages: vec![crate::model::Package {
                id: 0,
                cpus: vec![0],
            }],
            ..crate::model::Topology::default()
        };
        let header = RecordHeader::new(&specs, &topo, 1000, "x", 100);
        // Small enough to rotate several times.
        let mut w = Writer::create(&path, header, Some(32 << 10)).unwrap();
        for iv in &ivs {
            w.push_interval(iv).unwrap();
        }
        assert!(w.stats().rotations >= 2, "{:?}", w.stats());
        w.finish().unwrap();
        let mut got: Vec<IntervalResult> = Vec::new();
        for p in [rotated_path(&path), path.clone()] {
            got.extend(Reader::open(&p).unwrap().filter_map(|it| match it {
                Item::Interval(iv) => Some(iv),
                Item::Ticks(_) => None,
            }));
        }
        assert!(got.len() > 10);
        for g in &got {
            let want = ivs.iter().find(|i| i.t_start_ns == g.t_start_ns).unwrap();
            // The reader derives the container id from the stored path.
            assert_eq!(g.tasks, want.tasks);
        }
        let last = &got[got.len() - 1].tasks[0];
        assert_eq!(
            last.container_id.as_deref(),
            Some(&*format!("{:064x}", 1999 % 10 + 1))
        );
    }

    #[test]
    fn without_paths_no_cgroups_chunk_is_written_and_paths_read_null() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.imc");
        let (specs, mut ivs) = named_intervals(3);
        // Tasks whose cgroups did not resolve (or a recording made before paths were kept).
        for iv in &mut ivs {
            for t in &mut iv.tasks {
                (t.cgroup_path, t.container_id, t.pod_uid) = (None, None, None);
            }
        }
        let header = RecordHeader::new(&specs, &crate::model::Topology::default(), 1, "x", 100);
        let mut w = Writer::create(&path, header, None).unwrap();
        for iv in &ivs {
            w.push_interval(iv).unwrap();
        }
        w.finish().unwrap();
        let data = std::fs::read(&path).unwrap();
        // Nothing was resolved: no CGROUPS chunk, the file is what earlier versions wrote.
        let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
        let mut at = 18 + hlen;
        let mut kinds = Vec::new();
        while at + 9 <= data.len() {
            kinds.push(data[at]);
            at += 9 + u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
        }
        assert_eq!(at, data.len());
        assert!(!kinds.contains(&CHUNK_CGROUPS), "{kinds:?}");
        let mut r = Reader::from_bytes(&path, data).unwrap();
        let got: Vec<IntervalResult> = r
            .by_ref()
            .filter_map(|it| match it {
                Item::Interval(iv) => Some(iv),
                Item::Ticks(_) => None,
            })
            .collect();
        assert_eq!(r.status(), &ReadStatus::Complete);
        assert_eq!(got.len(), 3);
        assert!(
            got.iter()
                .flat_map(|g| &g.tasks)
                .all(|t| t.cgroup_path.is_none())
        );
    }
}
