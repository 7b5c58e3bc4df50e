//! `imc top --ibs`: AMD IBS op sampling as a per-process cross-check of bandwidth attribution.
//!
//! IBS tags one micro-op every `period` ops on each CPU and reports, for loads that missed the
//! caches, where the data came from. The kernel (arch/x86/events/amd/ibs.c,
//! perf_ibs_get_mem_lvl) turns IbsOpData2's DataSrc into PERF_SAMPLE_DATA_SRC: DRAM as
//! `mem_lvl` LOC_RAM (older kernels: REM_RAM1 when remote) with `mem_lvl_num` RAM, and
//! `mem_remote` set when RmtNode says another node's memory answered. Counting those samples
//! per process says who loads from DRAM, local or remote: samples, not bytes.
//!
//! Where the PMU has `l3missonly` (Zen 4 IBS extensions) only ops that missed the L3 are tagged,
//! so nearly every sample is a DRAM (or remote cache) access; without it (Zen 3) most samples
//! are cache hits and the DRAM counts are sparser.
use crate::discovery::format::encode_terms;
use crate::model::{OtherSource, Pmu};
use crate::sys::perf::{PerfEventAttr, PerfSys, RECORD_LOST, RECORD_SAMPLE, RingBuffer};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

/// PERF_SAMPLE_TID and PERF_SAMPLE_DATA_SRC (include/uapi/linux/perf_event.h): each sample is
/// `{ u32 pid, tid; u64 data_src; }`.
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_DATA_SRC: u64 = 1 << 15;

// union perf_mem_data_src fields.
const MEM_OP_LOAD: u64 = 0x02; // mem_op, bits 0-4
const MEM_LVL_SHIFT: u32 = 5; // mem_lvl, bits 5-18
const MEM_LVL_LOC_RAM: u64 = 0x80;
const MEM_LVL_REM_RAM1: u64 = 0x100;
const MEM_LVL_REM_RAM2: u64 = 0x200;
const MEM_LVLNUM_SHIFT: u32 = 33; // mem_lvl_num, bits 33-36
const MEM_LVLNUM_RAM: u64 = 0x0d;
const MEM_REMOTE_BIT: u32 = 37; // mem_remote

/// Ops between two samples on a CPU: IBS takes the period's low 4 bits as zero (MaxCnt counts
/// in 16s), so it must be a multiple of 16.
pub const DEFAULT_PERIOD: u64 = 0x40000;
/// Data pages of each CPU's ring (16 KiB samples each; at the default period a busy CPU gives a
/// few thousand samples a second).
const RING_PAGES: usize = 16;

/// Where a sampled load's data came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    LocalDram,
    RemoteDram,
    Other,
}

/// One decoded IBS op sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Process (tgid) and thread of the sampled op.
    pub pid: u32,
    pub tid: u32,
    pub load: bool,
    pub served: Served,
}

/// Decodes a PERF_RECORD_SAMPLE payload of the attr [`attr`] builds.
pub fn decode(payload: &[u8]) -> Option<Sample> {
    let u32_at = |o: usize| {
        payload
            .get(o..o + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
    };
    let pid = u32_at(0)?;
    let tid = u32_at(4)?;
    let ds = u64::from_ne_bytes(payload.get(8..16)?.try_into().ok()?);
    Some(Sample {
        pid,
        tid,
        load: ds & 0x1f & MEM_OP_LOAD != 0,
        served: served(ds),
    })
}

/// DRAM, local or remote, from a `perf_mem_data_src` value.
pub fn served(ds: u64) -> Served {
    let lvl = (ds >> MEM_LVL_SHIFT) & 0x3fff;
    let lvl_num = (ds >> MEM_LVLNUM_SHIFT) & 0xf;
    let remote = (ds >> MEM_REMOTE_BIT) & 1 != 0;
    let dram = lvl_num == MEM_LVLNUM_RAM
        || lvl & (MEM_LVL_LOC_RAM | MEM_LVL_REM_RAM1 | MEM_LVL_REM_RAM2) != 0;
    if !dram {
        Served::Other
    } else if remote || lvl & (MEM_LVL_REM_RAM1 | MEM_LVL_REM_RAM2) != 0 {
        Served::RemoteDram
    } else {
        Served::LocalDram
    }
}

/// Per-process sample counts of one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounts {
    pub samples: u64,
    pub loads: u64,
    pub dram_local: u64,
    pub dram_remote: u64,
}

/// What one interval's samples add up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub by_pid: BTreeMap<u32, ProcessCounts>,
    pub samples: u64,
    /// Samples the kernel dropped because a ring was full (PERF_RECORD_LOST).
    pub lost: u64,
}

impl Tally {
    pub fn add(&mut self, s: &Sample) {
        self.samples += 1;
        let c = self.by_pid.entry(s.pid).or_default();
        c.samples += 1;
        if s.load {
            c.loads += 1;
            match s.served {
                Served::LocalDram => c.dram_local += 1,
                Served::RemoteDram => c.dram_remote += 1,
                Served::Other => {}
            }
        }
    }

    /// Feeds one ring record.
    pub fn record(&mut self, kind: u32, payload: &[u8]) {
        match kind {
            RECORD_SAMPLE => {
                if let Some(s) = decode(payload) {
                    self.add(&s);
                }
            }
            // { u64 id; u64 lost; }
            RECORD_LOST => {
                if let Some(b) = payload.get(8..16) {
                    self.lost += u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                }
            }
            _ => {}
        }
    }
}

/// How `top --ibs` opens IBS op: the PMU type, the config (l3missonly where the PMU has it),
/// the period, and the CPUs (every online CPU: IBS has no cpumask).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IbsPlan {
    pub pmu_type: u32,
    pub config: u64,
    pub l3missonly: bool,
    pub period: u64,
    pub cpus: Vec<u32>,
}

/// Why IBS cannot be sampled here, each a runtime failure naming the PMU or CPU.
#[derive(Debug, thiserror::Error)]
pub enum IbsError {
    #[error(
        "no ibs_op PMU here (AMD IBS: AMD family 10h and later, on bare metal or a guest given IBS)"
    )]
    NoPmu,
    #[error("ibs_op listed but not readable")]
    Unreadable,
    #[error("ibs_op/l3missonly=1/")]
    Encode(#[source] crate::discovery::format::FormatError),
    #[error("no online CPU under --root")]
    NoCpu,
    /// The open's own explanation (permission, unknown event…), which names the event and CPU.
    #[error("{0}")]
    Open(String),
    #[error("cannot map the ring of {what}")]
    Map {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// The plan on a machine with `ibs_op`, or why not.
pub fn plan(others: &[OtherSource], pmus: &[Pmu], online: &[u32]) -> Result<IbsPlan, IbsError> {
    let src = others
        .iter()
        .find(|s| s.pmu == "ibs_op")
        .ok_or(IbsError::NoPmu)?;
    let pmu = pmus
        .iter()
        .find(|p| p.name == "ibs_op")
        .ok_or(IbsError::Unreadable)?;
    let l3missonly = pmu.formats.contains_key("l3missonly");
    let config = if l3missonly {
        encode_terms(pmu, "l3missonly=1")
            .map_err(IbsError::Encode)?
            .config
    } else {
        0
    };
    if online.is_empty() {
        return Err(IbsError::NoCpu);
    }
    Ok(IbsPlan {
        pmu_type: src.pmu_type,
        config,
        l3missonly,
        period: DEFAULT_PERIOD,
        cpus: online.to_vec(),
    })
}

/// The perf_event_attr of one CPU's IBS op event: sampling every `period` ops, pid and data
/// source per sample, user and kernel (IBS refuses exclude_* without swfilt).
pub fn attr(p: &IbsPlan) -> PerfEventAttr {
    PerfEventAttr {
        type_: p.pmu_type,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: p.config,
        sample_period: p.period,
        sample_type: SAMPLE_TID | SAMPLE_DATA_SRC,
        ..Default::default()
    }
}

/// IBS op open on every CPU of the plan, each with its ring.
pub struct IbsSampler {
    rings: Vec<Box<dyn RingBuffer>>,
    _fds: Vec<OwnedFd>,
}

impl IbsSampler {
    /// Opens and maps every CPU; the first failure is the error, naming the PMU, the CPU and
    /// the reason.
    pub fn open(sys: &dyn PerfSys, p: &IbsPlan) -> Result<IbsSampler, IbsError> {
        let a = attr(p);
        let mut rings = Vec::new();
        let mut fds = Vec::new();
        for &cpu in &p.cpus {
            let what = format!(
                "ibs_op/config={:#x}/ (sample period {}) on CPU {cpu}",
                p.config, p.period
            );
            let fd = sys
                .open(&a, -1, cpu as i32, None)
                .map_err(|e| IbsError::Open(crate::sys::perf::explain_open_error(&what, &e)))?;
            let ring = sys
                .map_ring(fd.as_fd(), RING_PAGES)
                .map_err(|source| IbsError::Map { what, source })?;
            rings.push(ring);
            fds.push(fd);
        }
        Ok(IbsSampler { rings, _fds: fds })
    }

    /// Adds everything the rings hold now to `tally`.
    pub fn collect(&mut self, tally: &mut Tally) {
        for r in &mut self.rings {
            r.drain(&mut |kind, payload| tally.record(kind, payload));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sample payload as the kernel writes it for [`attr`].
    pub(crate) fn payload(pid: u32, tid: u32, data_src: u64) -> Vec<u8> {
        let mut v = pid.to_ne_bytes().to_vec();
        v.extend(tid.to_ne_bytes());
        v.extend(data_src.to_ne_bytes());
        v
    }

    /// data_src values as ibs.c builds them.
    pub(crate) fn ds_local_dram_load() -> u64 {
        // mem_op LOAD, mem_lvl LOC_RAM|HIT, mem_lvl_num RAM
        MEM_OP_LOAD | (MEM_LVL_LOC_RAM | 0x2) << MEM_LVL_SHIFT | MEM_LVLNUM_RAM << MEM_LVLNUM_SHIFT
    }
    pub(crate) fn ds_remote_dram_load() -> u64 {
        ds_local_dram_load() | 1 << MEM_REMOTE_BIT
    }
    pub(crate) fn ds_l1_hit_load() -> u64 {
        // mem_lvl L1|HIT
        MEM_OP_LOAD | (0x08 | 0x2) << MEM_LVL_SHIFT
    }

    #[test]
    fn data_sources_decode_to_local_and_remote_dram() {
        assert_eq!(served(ds_local_dram_load()), Served::LocalDram);
        assert_eq!(served(ds_remote_dram_load()), Served::RemoteDram);
        assert_eq!(served(ds_l1_hit_load()), Served::Other);
        // Kernels before 6.6: remote DRAM as mem_lvl REM_RAM1, no mem_lvl_num.
        assert_eq!(
            served(MEM_OP_LOAD | (MEM_LVL_REM_RAM1 | 0x2) << MEM_LVL_SHIFT),
            Served::RemoteDram
        );
        let s = decode(&payload(42, 43, ds_remote_dram_load())).unwrap();
        assert_eq!((s.pid, s.tid, s.load), (42, 43, true));
        assert_eq!(decode(&[0u8; 12]), None);
    }

    #[test]
    fn tally_counts_per_process_and_lost_samples() {
        let mut t = Tally::default();
        t.record(RECORD_SAMPLE, &payload(7, 7, ds_local_dram_load()));
        t.record(RECORD_SAMPLE, &payload(7, 8, ds_remote_dram_load()));
        t.record(RECORD_SAMPLE, &payload(7, 8, ds_l1_hit_load()));
        // a store that went to DRAM is not a load from DRAM
        t.record(
            RECORD_SAMPLE,
            &payload(9, 9, ds_local_dram_load() & !MEM_OP_LOAD),
        );
        let mut lost = 5u64.to_ne_bytes().to_vec();
        lost.splice(0..0, 1u64.to_ne_bytes());
        t.record(RECORD_LOST, &lost);
        assert_eq!(t.samples, 4);
        assert_eq!(t.lost, 5);
        assert_eq!(
            t.by_pid[&7],
            ProcessCounts {
                samples: 3,
                loads: 3,
                dram_local: 1,
                dram_remote: 1
            }
        );
        assert_eq!(t.by_pid[&9].dram_local, 0);
    }

    #[test]
    fn l3missonly_is_set_where_the_pmu_has_it() {
        use crate::discovery::format::parse_format;
        let mk = |fmts: &[(&str, &str)]| Pmu {
            name: "ibs_op".into(),
            pmu_type: 9,
            cpumask: None,
            formats: fmts
                .iter()
                .map(|(n, t)| (n.to_string(), parse_format(n, t).unwrap()))
                .collect(),
            events: BTreeMap::new(),
            path: "/nonexistent/ibs_op".into(),
        };
        let zen4 = [mk(&[("cnt_ctl", "config:19"), ("l3missonly", "config:16")])];
        let others = crate::discovery::non_bandwidth::tests_other_sources(&zen4);
        let p = plan(&others, &zen4, &[0, 1]).unwrap();
        assert_eq!(
            (p.config, p.l3missonly, p.cpus.clone()),
            (1 << 16, true, vec![0, 1])
        );
        let zen3 = [mk(&[("cnt_ctl", "config:19")])];
        let others = crate::discovery::non_bandwidth::tests_other_sources(&zen3);
        let p = plan(&others, &zen3, &[0]).unwrap();
        assert_eq!((p.config, p.l3missonly), (0, false));
        let m = plan(&[], &[], &[0]).unwrap_err().to_string();
        assert!(m.contains("no ibs_op PMU"), "{m}");
    }

    #[test]
    fn attr_samples_tid_and_data_source_at_a_multiple_of_16() {
        let p = IbsPlan {
            pmu_type: 9,
            config: 0,
            l3missonly: false,
            period: DEFAULT_PERIOD,
            cpus: vec![0],
        };
        let a = attr(&p);
        assert_eq!(a.type_, 9);
        assert_eq!(a.sample_period % 16, 0);
        assert_ne!(a.sample_period, 0);
        assert_eq!(a.sample_type, SAMPLE_TID | SAMPLE_DATA_SRC);
        assert_eq!(
            a.flags & (crate::sys::perf::FLAG_EXCLUDE_USER | crate::sys::perf::FLAG_EXCLUDE_KERNEL),
            0
        );
    }
}
