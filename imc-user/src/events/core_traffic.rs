//! Per-CPU traffic weights: the core PMU events that say how much memory-controller traffic the
//! task on a CPU caused, so a package's DRAM bytes can be spread by traffic, not by CPU time.
//!
//! A pure table: CPU model (and core PMU, on hybrid parts) → at most four events. Every encoding
//! was checked against a public table, named in the event's `source`:
//! * Intel: Intel's perfmon event files (github.com/intel/perfmon, `<CPU>/events/*_core.json`,
//!   which the kernel's tools/perf/pmu-events/arch/x86 JSON is generated from); counter
//!   restrictions from the same files' `Counter` field.
//! * AMD: the kernel's tools/perf/pmu-events/arch/x86/amdzen{2,3,4,5} JSON and libpfm4's
//!   lib/events/amd64_events_fam{17h_zen2,19h_zen3,19h_zen4,1ah_zen5}.h.
//! * POWER: libpfm4 lib/events/power{8,9,10}_events.h (the codes of the kernel's
//!   tools/perf/pmu-events/arch/powerpc JSON) and arch/powerpc/perf/power9-pmu.c for the format.
//!
//! What the starting points got wrong (checked against those tables):
//! * SKX/CLX `OCR.ALL_READS.L3_MISS_LOCAL_DRAM` has no such plain name: Intel's CLX table has it
//!   only with a snoop qualifier (`.ANY_SNOOP`, `.SNOOP_MISS_OR_NO_FWD`, …) and the remote one is
//!   `L3_MISS_REMOTE_DRAM`/`L3_MISS_REMOTE_HOP1_DRAM`; the SKX table (steppings 0-4) lists only
//!   `OCR.ALL_DATA_RD.*` (no RFOs). The offcore MSR bits are the same core's, so the CLX event is
//!   used for every model 0x55 part.
//! * `OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM`'s request mask differs: 0x477 on ICX, 0x4477 on
//!   SPR/EMR/GNR, where the events are 0x2a/0x2b (0xb7/0xbb on ICX and before), as the issue says.
//! * Three offcore-response events never fit: a thread has two offcore-response MSRs
//!   (MSR_OFFCORE_RSP_0/1). Local and remote reads take both, so the write weight on servers is
//!   `L2_LINES_OUT.NON_SILENT`, and the OCR write events (`OCR.WRITE_ESTIMATE.MEMORY` on ICX+,
//!   `OCR.MODIFIED_WRITE.ANY_RESPONSE` on SPR+) are offered as [`CoreTraffic::alt_write`] for
//!   one-package machines, which need no remote read.
//! * `L2_LINES_OUT.NON_SILENT` is not modified-only everywhere: on SKX and ICX it also counts clean
//!   victims written into the non-inclusive L3 (the SKX description says so), and on Crestmont
//!   (`cpu_atom` of Meteor Lake) it counts every L2 eviction, so it is not used there.
//! * On client cores Intel's only OCR DRAM read is `OCR.DEMAND_DATA_RD.DRAM` (demand data loads
//!   only), so `LONGEST_LAT_CACHE.MISS` (0x2e/0x41: demand, RFO, code and L1/L2 hardware
//!   prefetches) counts more of the truth there.
//! * `OCR.COREWB_M` exists on Gracemont (Alder/Raptor Lake `cpu_atom`) and Lunar Lake's Skymont,
//!   not on Crestmont (Meteor Lake) nor Arrow Lake's Skymont table.
//! * Zen 5's `l2_fill_rsp_src` (0x165) sees every L2 fill, L2-prefetcher fills included, with
//!   near/far DRAM umasks: it replaces both 0x44 and 0x72 there.
//! * POWER8's `PM_MEM_READ`/`PM_MEM_CO` count "for this lpar", the whole partition, so they cannot
//!   tell CPUs apart; POWER8 uses the per-thread `PM_DATA_ALL_FROM_{L,R,D}MEM` reloads instead.
//!   POWER9's `PM_MEM_*` are "from this thread"; POWER10 has no `PM_MEM_CO`.
use crate::discovery::Machine;
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
const CTR_0_3: Option<u64> = Some(0xf);

const fn ev(
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

const NOTE_LLC_CLIENT: &str = "one package: LONGEST_LAT_CACHE.MISS (demand, RFO, code and L1/L2 \
     hardware-prefetch L3 misses; not L3 prefetches) is the read weight, since the client OCR \
     DRAM events count demand data reads only";
const NOTE_NON_SILENT_MODIFIED: &str = "L2_LINES_OUT.NON_SILENT counts modified lines the L2 \
     evicts to the L3: a writeback that the L3 may still absorb";
const NOTE_TWO_OCR: &str = "the local and remote reads hold both offcore-response registers \
     (MSR_OFFCORE_RSP_0/1), so the write weight is a plain event; with one package use alt_write";
const NOTE_NO_L3_PF: &str = "READS_TO_CORE counts demand and L1/L2 prefetch reads, not the L3 \
     prefetcher's own DRAM reads";

/// Intel Skylake-SP / Cascade Lake / Cooper Lake (family 6 model 0x55).
fn skx() -> CoreTraffic {
    CoreTraffic {
        model: "Skylake-SP/Cascade Lake",
        events: vec![
            // CLX/events/cascadelakex_core.json: EventCode 0xB7,0xBB UMask 0x01
            // MSRValue 0x6040007F7 (ALL_READS = demand/prefetch data, RFO and code reads).
            ev(
                "OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD",
                "event=0xb7,umask=0x01,offcore_rsp=0x6040007f7",
                Direction::Read,
                Locality::Local,
                CTR_0_3,
                true,
                "intel/perfmon CLX/events/cascadelakex_core.json OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD",
            ),
            // Same file: MSRValue 0x63B8007F7 (remote DRAM, any hop count).
            ev(
                "OCR.ALL_READS.L3_MISS_REMOTE_DRAM.SNOOP_MISS_OR_NO_FWD",
                "event=0xb7,umask=0x01,offcore_rsp=0x63b8007f7",
                Direction::Read,
                Locality::Remote,
                CTR_0_3,
                true,
                "intel/perfmon CLX/events/cascadelakex_core.json OCR.ALL_READS.L3_MISS_REMOTE_DRAM.SNOOP_MISS_OR_NO_FWD",
            ),
            // SKX/events/skylakex_core.json: EventCode 0xF2 UMask 0x02, counters 0-3.
            ev(
                "L2_LINES_OUT.NON_SILENT",
                "event=0xf2,umask=0x02",
                Direction::Write,
                Locality::Any,
                CTR_0_3,
                false,
                "intel/perfmon SKX/events/skylakex_core.json L2_LINES_OUT.NON_SILENT",
            ),
        ],
        alt_write: None,
        notes: vec![
            "Intel lists OCR.ALL_READS.* for Cascade Lake only (its Skylake-SP table has \
             OCR.ALL_DATA_RD.*, without RFOs); the offcore-response bits are the same core's, so \
             the Cascade Lake encoding serves every model 0x55 part",
            NOTE_TWO_OCR,
            "L2_LINES_OUT.NON_SILENT on Skylake-SP counts clean and modified L2 victims sent to \
             the non-inclusive L3, so writes are weighed by L2 turnover, not by dirty lines alone",
            "no per-core event counts DRAM writebacks on Skylake-SP",
        ],
    }
}

/// Intel Ice Lake-SP (0x6a, 0x6c).
fn icx() -> CoreTraffic {
    CoreTraffic {
        model: "Ice Lake-SP",
        events: vec![
            // ICX/events/icelakex_core.json: EventCode 0xB7,0xBB UMask 0x01 MSRValue 0x70C000477.
            ev(
                "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
                "event=0xb7,umask=0x01,offcore_rsp=0x70c000477",
                Direction::Read,
                Locality::Local,
                CTR_0_3,
                true,
                "intel/perfmon ICX/events/icelakex_core.json OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
            ),
            // Same file: MSRValue 0x730000477.
            ev(
                "OCR.READS_TO_CORE.REMOTE_DRAM",
                "event=0xb7,umask=0x01,offcore_rsp=0x730000477",
                Direction::Read,
                Locality::Remote,
                CTR_0_3,
                true,
                "intel/perfmon ICX/events/icelakex_core.json OCR.READS_TO_CORE.REMOTE_DRAM",
            ),
            // Same file: EventCode 0xF2 UMask 0x02, counters 0-3.
            ev(
                "L2_LINES_OUT.NON_SILENT",
                "event=0xf2,umask=0x02",
                Direction::Write,
                Locality::Any,
                CTR_0_3,
                false,
                "intel/perfmon ICX/events/icelakex_core.json L2_LINES_OUT.NON_SILENT",
            ),
        ],
        // Same file: MSRValue 0xFBFF80822 (RFOs, ItoM, RFO prefetches and streaming stores
        // that likely end in a store to memory).
        alt_write: Some(ev(
            "OCR.WRITE_ESTIMATE.MEMORY",
            "event=0xb7,umask=0x01,offcore_rsp=0xfbff80822",
            Direction::Write,
            Locality::Any,
            CTR_0_3,
            true,
            "intel/perfmon ICX/events/icelakex_core.json OCR.WRITE_ESTIMATE.MEMORY",
        )),
        notes: vec![
            "LOCAL_SOCKET_DRAM (not LOCAL_DRAM) so that with Sub-NUMA Clustering the far \
             cluster's DRAM of the same package still counts as this package's",
            NOTE_NO_L3_PF,
            NOTE_TWO_OCR,
            "L2_LINES_OUT.NON_SILENT on Ice Lake-SP also counts clean victims sent to the L3",
            "OCR.WRITE_ESTIMATE.MEMORY misses lines loaded and then modified in place (no RFO)",
        ],
    }
}

/// Intel Sapphire Rapids, Emerald Rapids, Granite Rapids: the same encodings in each table.
fn spr(model: &'static str, file: Glc) -> CoreTraffic {
    let (local, remote, lines_out, modified) = match file {
        Glc::Spr => (
            "intel/perfmon SPR/events/sapphirerapids_core.json OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
            "intel/perfmon SPR/events/sapphirerapids_core.json OCR.READS_TO_CORE.REMOTE_DRAM",
            "intel/perfmon SPR/events/sapphirerapids_core.json L2_LINES_OUT.NON_SILENT",
            "intel/perfmon SPR/events/sapphirerapids_core.json OCR.MODIFIED_WRITE.ANY_RESPONSE",
        ),
        Glc::Emr => (
            "intel/perfmon EMR/events/emeraldrapids_core.json OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
            "intel/perfmon EMR/events/emeraldrapids_core.json OCR.READS_TO_CORE.REMOTE_DRAM",
            "intel/perfmon EMR/events/emeraldrapids_core.json L2_LINES_OUT.NON_SILENT",
            "intel/perfmon EMR/events/emeraldrapids_core.json OCR.MODIFIED_WRITE.ANY_RESPONSE",
        ),
        Glc::Gnr => (
            "intel/perfmon GNR/events/graniterapids_core.json OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
            "intel/perfmon GNR/events/graniterapids_core.json OCR.READS_TO_CORE.REMOTE_DRAM",
            "intel/perfmon GNR/events/graniterapids_core.json L2_LINES_OUT.NON_SILENT",
            "intel/perfmon GNR/events/graniterapids_core.json OCR.MODIFIED_WRITE.ANY_RESPONSE",
        ),
    };
    CoreTraffic {
        model,
        events: vec![
            // EventCode 0x2A,0x2B UMask 0x01 MSRValue 0x70C004477, Counter 0,1,2,3.
            ev(
                "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM",
                "event=0x2a,umask=0x01,offcore_rsp=0x70c004477",
                Direction::Read,
                Locality::Local,
                CTR_0_3,
                true,
                local,
            ),
            // MSRValue 0x730004477.
            ev(
                "OCR.READS_TO_CORE.REMOTE_DRAM",
                "event=0x2a,umask=0x01,offcore_rsp=0x730004477",
                Direction::Read,
                Locality::Remote,
                CTR_0_3,
                true,
                remote,
            ),
            // EventCode 0x26 UMask 0x02, Counter 0,1,2,3.
            ev(
                "L2_LINES_OUT.NON_SILENT",
                "event=0x26,umask=0x02",
                Direction::Write,
                Locality::Any,
                CTR_0_3,
                false,
                lines_out,
            ),
        ],
        // MSRValue 0x10808: writebacks of modified lines and streaming stores.
        alt_write: Some(ev(
            "OCR.MODIFIED_WRITE.ANY_RESPONSE",
            "event=0x2a,umask=0x01,offcore_rsp=0x10808",
            Direction::Write,
            Locality::Any,
            CTR_0_3,
            true,
            modified,
        )),
        notes: vec![
            "OCR events (0x2a/0x2b) run on counters 0-3 only (the kernel's SPR constraint \
             table agrees)",
            "LOCAL_SOCKET_DRAM (not LOCAL_DRAM) so that with Sub-NUMA Clustering the far \
             cluster's DRAM of the same package still counts as this package's",
            NOTE_NO_L3_PF,
            NOTE_TWO_OCR,
            NOTE_NON_SILENT_MODIFIED,
            "OCR.MODIFIED_WRITE.ANY_RESPONSE also sees non-temporal (streaming) stores, which \
             L2_LINES_OUT does not",
        ],
    }
}

/// Which Intel table (Golden Cove-class servers) an encoding was checked in.
#[derive(Clone, Copy)]
enum Glc {
    Spr,
    Emr,
    Gnr,
}

/// Intel client big cores (`cpu`, or `cpu_core` on hybrid parts): LLC misses and L2 writebacks.
fn client_big(model: &'static str, file: &'static str, evt: Client) -> CoreTraffic {
    let (llc_src, out_src): (&'static str, &'static str) = (file, file);
    let (out_terms, llc_mask, out_mask) = match evt {
        Client::Skl => ("event=0xf2,umask=0x02", CTR_0_3, CTR_0_3),
        Client::Icl => ("event=0xf2,umask=0x02", None, CTR_0_3),
        Client::Glc => ("event=0x26,umask=0x02", None, CTR_0_3),
        Client::Lnc => ("event=0x26,umask=0x02", None, None),
    };
    CoreTraffic {
        model,
        events: vec![
            ev(
                "LONGEST_LAT_CACHE.MISS",
                "event=0x2e,umask=0x41",
                Direction::Read,
                Locality::Any,
                llc_mask,
                false,
                llc_src,
            ),
            ev(
                "L2_LINES_OUT.NON_SILENT",
                out_terms,
                Direction::Write,
                Locality::Any,
                out_mask,
                false,
                out_src,
            ),
        ],
        alt_write: None,
        notes: vec![NOTE_LLC_CLIENT, NOTE_NON_SILENT_MODIFIED],
    }
}

#[derive(Clone, Copy)]
enum Client {
    /// Skylake client generation: L2_LINES_OUT is 0xf2, LLC miss on counters 0-3.
    Skl,
    /// Ice Lake, Tiger Lake, Rocket Lake: 0xf2, LLC miss on any counter.
    Icl,
    /// Golden Cove, Raptor Cove, Redwood Cove: L2_LINES_OUT is 0x26 on counters 0-3.
    Glc,
    /// Lion Cove: 0x26 on any counter.
    Lnc,
}

const NOTE_ATOM_LLC: &str = "LONGEST_LAT_CACHE.MISS on the Atom cores counts demand loads, RFOs, \
     code fetches and L1 hardware prefetches that miss the L3, but no L2 prefetches: a \
     prefetch-heavy E-core task is under-weighed";

/// Intel hybrid E-cores (`cpu_atom`).
fn atom(model: &'static str, llc_src: &'static str, corewb: Option<&'static str>) -> CoreTraffic {
    let mut events = vec![ev(
        "LONGEST_LAT_CACHE.MISS",
        "event=0x2e,umask=0x41",
        Direction::Read,
        Locality::Any,
        None,
        false,
        llc_src,
    )];
    let mut notes = vec![
        NOTE_ATOM_LLC,
        "the Atom OCR DRAM reads (OCR.DEMAND_DATA_RD.DRAM) count demand data loads only, fewer \
         than LONGEST_LAT_CACHE.MISS",
    ];
    match corewb {
        // EventCode 0xB7 UMask 0x01,0x02 MSRValue 0x10008.
        Some(src) => events.push(ev(
            "OCR.COREWB_M.ANY_RESPONSE",
            "event=0xb7,umask=0x01,offcore_rsp=0x10008",
            Direction::Write,
            Locality::Any,
            None,
            true,
            src,
        )),
        None => notes.push(
            "this E-core has no modified-writeback event (no OCR.COREWB_M; its \
             L2_LINES_OUT.NON_SILENT counts clean evictions too): writes are spread by the read \
             weight",
        ),
    }
    CoreTraffic {
        model,
        events,
        alt_write: None,
        notes,
    }
}

/// Knights Landing / Knights Mill: reads served by DDR and by MCDRAM.
fn knl(model: &'static str) -> CoreTraffic {
    let mk = |name, terms, memory, source| CoreTrafficEvent {
        name,
        terms,
        direction: Direction::Read,
        locality: Locality::Any,
        memory,
        bytes_per_count: 64.0,
        counter_mask: Some(0x3),
        offcore_register: true,
        source,
    };
    CoreTraffic {
        model,
        events: vec![
            // KNL/events/knightslanding_core.json: EventCode 0xB7 UMask 0x01
            // MSRValue 0x01818032f7 ("any Read request … from DDR (local and far)"), Counter 0,1.
            mk(
                "OFFCORE_RESPONSE.ANY_READ.DDR",
                "event=0xb7,umask=0x01,offcore_rsp=0x1818032f7",
                Memory::Dram,
                "intel/perfmon KNL/events/knightslanding_core.json OFFCORE_RESPONSE.ANY_READ.DDR",
            ),
            // Same file: MSRValue 0x01806032f7 ("… from MCDRAM (local and far)").
            mk(
                "OFFCORE_RESPONSE.ANY_READ.MCDRAM",
                "event=0xb7,umask=0x01,offcore_rsp=0x1806032f7",
                Memory::Mcdram,
                "intel/perfmon KNL/events/knightslanding_core.json OFFCORE_RESPONSE.ANY_READ.MCDRAM",
            ),
        ],
        alt_write: None,
        notes: vec![
            "a Knights Landing thread has two general-purpose counters: these two weights take \
             both, and both offcore-response registers",
            "each weighs its own controller: DDR events the uncore_imc traffic, MCDRAM events \
             the uncore_edc traffic",
            "no per-core writeback event: writes are spread by the read weight of the same memory",
            "Knights Mill (model 0x85) uses the Knights Landing table (Intel's mapfile)",
        ],
    }
}

const NOTE_ZEN_NO_WRITE: &str = "Zen has no per-core writeback event: writes are spread by the \
     read weight, not by time";
const NOTE_ZEN_DRAM_IO: &str = "the DRAM umasks also count MMIO fills (\"DRAM or IO\"), small \
     beside DRAM traffic";
const NOTE_ZEN_NODES: &str = "local/remote are NUMA nodes, not packages: with NPS2/NPS4 a fill \
     from another node of the same package counts as remote";

/// AMD Zen 2/3/4: data-cache fills from DRAM (local/remote) and L2-prefetcher misses.
fn zen234(generation: Zen) -> CoreTraffic {
    let (model, local, remote, pf) = match generation {
        Zen::Two => (
            "Zen 2",
            // amdzen2/cache.json: ls_refills_from_sys.ls_mabresp_lcl_dram EventCode 0x43 UMask 0x08,
            // .ls_mabresp_rmt_dram UMask 0x40; l2_pf_miss_l2_l3 EventCode 0x72 UMask 0xff.
            ev(
                "ls_refills_from_sys.ls_mabresp_lcl_dram",
                "event=0x43,umask=0x08",
                Direction::Read,
                Locality::Local,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json ls_refills_from_sys.ls_mabresp_lcl_dram; libpfm4 amd64_events_fam17h_zen2.h DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_DRAM",
            ),
            ev(
                "ls_refills_from_sys.ls_mabresp_rmt_dram",
                "event=0x43,umask=0x40",
                Direction::Read,
                Locality::Remote,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json ls_refills_from_sys.ls_mabresp_rmt_dram; libpfm4 amd64_events_fam17h_zen2.h DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_RMT_DRAM",
            ),
            ev(
                "l2_pf_miss_l2_l3",
                "event=0x72,umask=0xff",
                Direction::Read,
                Locality::Any,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen2/cache.json l2_pf_miss_l2_l3 (UMask 0xff)",
            ),
        ),
        Zen::Three => (
            "Zen 3",
            // amdzen3/cache.json: ls_any_fills_from_sys.mem_io_local EventCode 0x44 UMask 0x08,
            // .mem_io_remote UMask 0x40; libpfm4 L2_PREFETCH_MISS_L3:L2_HW_PREFETCHER 0x72/0x1f.
            ev(
                "ls_any_fills_from_sys.mem_io_local",
                "event=0x44,umask=0x08",
                Direction::Read,
                Locality::Local,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen3/cache.json ls_any_fills_from_sys.mem_io_local; libpfm4 amd64_events_fam19h_zen3.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_LCL",
            ),
            ev(
                "ls_any_fills_from_sys.mem_io_remote",
                "event=0x44,umask=0x40",
                Direction::Read,
                Locality::Remote,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen3/cache.json ls_any_fills_from_sys.mem_io_remote; libpfm4 amd64_events_fam19h_zen3.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:MEM_IO_RMT",
            ),
            ev(
                "l2_pf_miss_l2_l3 (L2 prefetchers)",
                "event=0x72,umask=0x1f",
                Direction::Read,
                Locality::Any,
                None,
                false,
                "libpfm4 amd64_events_fam19h_zen3.h L2_PREFETCH_MISS_L3:L2_HW_PREFETCHER (0x72, umask 0x1f)",
            ),
        ),
        Zen::Four => (
            "Zen 4",
            // amdzen4/cache.json: ls_any_fills_from_sys.dram_io_near EventCode 0x44 UMask 0x08,
            // .dram_io_far UMask 0x40; l2_pf_miss_l2_l3 L2 prefetcher umasks 0x01-0x10.
            ev(
                "ls_any_fills_from_sys.dram_io_near",
                "event=0x44,umask=0x08",
                Direction::Read,
                Locality::Local,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json ls_any_fills_from_sys.dram_io_near; libpfm4 amd64_events_fam19h_zen4.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_NEAR",
            ),
            ev(
                "ls_any_fills_from_sys.dram_io_far",
                "event=0x44,umask=0x40",
                Direction::Read,
                Locality::Remote,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen4/cache.json ls_any_fills_from_sys.dram_io_far; libpfm4 amd64_events_fam19h_zen4.h ANY_DATA_CACHE_FILLS_FROM_SYSTEM:DRAM_IO_FAR",
            ),
            ev(
                "l2_pf_miss_l2_l3 (L2 prefetchers)",
                "event=0x72,umask=0x1f",
                Direction::Read,
                Locality::Any,
                None,
                false,
                "libpfm4 amd64_events_fam19h_zen4.h L2_PREFETCH_MISS_L3:L2_STREAM|L2_NEXT_LINE|L2_UP_DOWN|L2_BURST|L2_STRIDE (0x72, umask 0x1f)",
            ),
        ),
    };
    let fills = if matches!(generation, Zen::Two) {
        "ls_refills_from_sys (0x43) counts demand data-cache fills only"
    } else {
        "ls_any_fills_from_sys (0x44) counts demand, software- and L1-hardware-prefetch \
         data-cache fills by source"
    };
    CoreTraffic {
        model,
        events: vec![local, remote, pf],
        alt_write: None,
        notes: vec![
            fills,
            "lines the L2 prefetcher brings from DRAM reach the L1 later as L2 hits, invisible \
             to the fill events: l2_pf_miss_l2_l3 (0x72) adds them; it cannot tell local from \
             remote (Locality::Any) and also counts lines served by another CCX's cache",
            if matches!(generation, Zen::Two) {
                "on Zen 2 the kernel's l2_pf_miss_l2_l3 uses umask 0xff; the L1 prefetcher's \
                 requests are not data-cache refills (0x43 is demand only), so nothing is counted \
                 twice"
            } else {
                "0x72 umask 0x1f keeps the L2 prefetchers only: the L1 prefetchers' requests \
                 (umask 0xe0) fill the L1 and are already in 0x44"
            },
            NOTE_ZEN_DRAM_IO,
            NOTE_ZEN_NODES,
            NOTE_ZEN_NO_WRITE,
        ],
    }
}

#[derive(Clone, Copy)]
enum Zen {
    Two,
    Three,
    Four,
}

/// AMD Zen 5: L2 fills by source, prefetches included.
fn zen5() -> CoreTraffic {
    CoreTraffic {
        model: "Zen 5",
        events: vec![
            // amdzen5/l2-cache.json: l2_fill_rsp_src.dram_io_near EventCode 0x165 UMask 0x08.
            ev(
                "l2_fill_rsp_src.dram_io_near",
                "event=0x165,umask=0x08",
                Direction::Read,
                Locality::Local,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen5/l2-cache.json l2_fill_rsp_src.dram_io_near",
            ),
            // Same file: l2_fill_rsp_src.dram_io_far UMask 0x40 ("a different NUMA node (same or
            // different socket)").
            ev(
                "l2_fill_rsp_src.dram_io_far",
                "event=0x165,umask=0x40",
                Direction::Read,
                Locality::Remote,
                None,
                false,
                "linux tools/perf/pmu-events/arch/x86/amdzen5/l2-cache.json l2_fill_rsp_src.dram_io_far",
            ),
        ],
        alt_write: None,
        notes: vec![
            "l2_fill_rsp_src (0x165) counts every L2 fill by its source, L2-prefetcher fills \
             included, so no second read event (0x44 or 0x72) is added",
            "event 0x165 needs the event format's high bits (config:32-35)",
            NOTE_ZEN_DRAM_IO,
            NOTE_ZEN_NODES,
            NOTE_ZEN_NO_WRITE,
        ],
    }
}

/// IBM POWER8/9/10 (the powerpc `cpu` PMU takes the raw event code as `event`).
fn power(generation: &str) -> Option<CoreTraffic> {
    let mk = |name, terms, direction, locality, pmc: u32, source| CoreTrafficEvent {
        name,
        terms,
        direction,
        locality,
        memory: Memory::Dram,
        bytes_per_count: 128.0,
        // The PMC field (config bits 16-19) binds the event to PMC n (mask bit n-1).
        counter_mask: Some(1 << (pmc - 1)),
        offcore_register: false,
        source,
    };
    Some(match generation {
        "POWER8" => CoreTraffic {
            model: "POWER8",
            events: vec![
                mk(
                    "PM_DATA_ALL_FROM_LMEM",
                    "event=0x62c048",
                    Direction::Read,
                    Locality::Local,
                    2,
                    "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_LMEM (0x62c048)",
                ),
                mk(
                    "PM_DATA_ALL_FROM_RMEM",
                    "event=0x63c04a",
                    Direction::Read,
                    Locality::Remote,
                    3,
                    "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_RMEM (0x63c04a)",
                ),
                mk(
                    "PM_DATA_ALL_FROM_DMEM",
                    "event=0x64c04c",
                    Direction::Read,
                    Locality::Remote,
                    4,
                    "libpfm4 lib/events/power8_events.h PM_DATA_ALL_FROM_DMEM (0x64c04c)",
                ),
            ],
            alt_write: None,
            notes: vec![
                "POWER8's PM_MEM_READ/PM_MEM_CO count for the whole partition (\"for this \
                 lpar\"), the same on every CPU, so the per-thread L1 reloads from local, remote \
                 and distant memory (demand loads and data prefetches) are the weights",
                "remote (RMEM) and distant (DMEM) memory are both another chip's: they add up \
                 to one remote weight",
                "no per-thread castout event: writes are spread by the read weight",
                "instruction fetches and L2/L3 prefetches from memory are not in these events",
            ],
        },
        "POWER9" => CoreTraffic {
            model: "POWER9",
            events: vec![
                mk(
                    "PM_MEM_READ",
                    "event=0x10056",
                    Direction::Read,
                    Locality::Any,
                    1,
                    "libpfm4 lib/events/power9_events.h PM_MEM_READ (0x10056, \"Reads from Memory from this thread\")",
                ),
                mk(
                    "PM_MEM_PREF",
                    "event=0x2c058",
                    Direction::Read,
                    Locality::Any,
                    2,
                    "libpfm4 lib/events/power9_events.h PM_MEM_PREF (0x2c058, \"Memory prefetch for this thread\")",
                ),
                mk(
                    "PM_MEM_RWITM",
                    "event=0x3c05e",
                    Direction::Read,
                    Locality::Any,
                    3,
                    "libpfm4 lib/events/power9_events.h PM_MEM_RWITM (0x3c05e, \"Memory Read With Intent to Modify for this thread\")",
                ),
                mk(
                    "PM_MEM_CO",
                    "event=0x4c058",
                    Direction::Write,
                    Locality::Any,
                    4,
                    "libpfm4 lib/events/power9_events.h PM_MEM_CO (0x4c058, \"Memory castouts from this thread\")",
                ),
            ],
            alt_write: None,
            notes: vec![
                "the three read events (demand/instruction/L1-prefetch reads, L2/L3 prefetches, \
                 read-with-intent-to-modify) add up to one read weight",
                "each event is bound to its own PMC (1-4): together they take all four \
                 programmable counters of the thread",
                "the PM_MEM_* events do not tell local from remote memory (PM_DATA_FROM_LMEM/RMEM \
                 count demand loads only)",
            ],
        },
        "POWER10" => CoreTraffic {
            model: "POWER10",
            events: vec![
                mk(
                    "PM_MEM_READ",
                    "event=0x10056",
                    Direction::Read,
                    Locality::Any,
                    1,
                    "libpfm4 lib/events/power10_events.h PM_MEM_READ (0x10056)",
                ),
                mk(
                    "PM_MEM_PREF",
                    "event=0x2c058",
                    Direction::Read,
                    Locality::Any,
                    2,
                    "libpfm4 lib/events/power10_events.h PM_MEM_PREF (0x2c058)",
                ),
                mk(
                    "PM_MEM_RWITM",
                    "event=0x3c05e",
                    Direction::Read,
                    Locality::Any,
                    3,
                    "libpfm4 lib/events/power10_events.h PM_MEM_RWITM (0x3c05e)",
                ),
            ],
            alt_write: None,
            notes: vec![
                "the three read events add up to one read weight",
                "POWER10 has no PM_MEM_CO: writes are spread by the read weight",
                "the PM_MEM_* events do not tell local from remote memory",
            ],
        },
        _ => return None,
    })
}

/// The traffic weight events of this CPU's core PMU `pmu` ("cpu", "cpu_core", "cpu_atom", or
/// POWER's "cpu"), whose caps/pmu_name is `caps_pmu_name` when present; Err(one-line reason)
/// when none is known (unknown model, not a CPU with such events, ...).
pub fn core_traffic(
    m: &Machine,
    pmu: &str,
    caps_pmu_name: Option<&str>,
) -> Result<CoreTraffic, String> {
    if let Some(generation) = m.power.as_deref() {
        if pmu != "cpu" {
            return Err(format!("POWER has no core PMU '{pmu}' (expected 'cpu')"));
        }
        if let Some(name) = caps_pmu_name
            && !name.eq_ignore_ascii_case(generation)
        {
            return Err(format!(
                "the kernel drives the {generation} core PMU as '{name}' (caps/pmu_name), not as \
                 {generation}: its memory events are not available"
            ));
        }
        return power(generation)
            .ok_or_else(|| format!("no traffic weight events known for {generation}"));
    }
    if m.is_intel() {
        return intel(m, pmu, caps_pmu_name);
    }
    if m.is_amd() {
        return amd(m, pmu);
    }
    Err(match &m.vendor {
        Some(v) => format!("no traffic weight events known for CPU vendor '{v}'"),
        None => "proc/cpuinfo names no CPU vendor or POWER generation".to_string(),
    })
}

fn amd(m: &Machine, pmu: &str) -> Result<CoreTraffic, String> {
    if m.vendor.as_deref() != Some("AuthenticAMD") {
        return Err(format!(
            "no traffic weight events known for {} CPUs",
            m.vendor.as_deref().unwrap_or("unknown")
        ));
    }
    if pmu != "cpu" {
        return Err(format!("AMD has no core PMU '{pmu}' (expected 'cpu')"));
    }
    let (Some(family), Some(model)) = (m.family, m.model) else {
        return Err("proc/cpuinfo gives no AMD family/model".into());
    };
    // The kernel's tools/perf/pmu-events/arch/x86/mapfile.csv: AuthenticAMD-23-([12][0-9A-F]|
    // [0-9A-F]) amdzen1, -23-* amdzen2, -25-([245][0-9A-F]|[0-9A-F]) amdzen3, -25-* amdzen4,
    // -26-* amdzen5.
    match family {
        0x17 if model >= 0x30 => Ok(zen234(Zen::Two)),
        0x17 => Err(format!(
            "AMD family 0x17 model {model:#x} is Zen/Zen+, whose data-cache fill events do not \
             tell DRAM from other caches: no traffic weight"
        )),
        0x19 if model < 0x10 || (0x20..0x30).contains(&model) || (0x40..0x60).contains(&model) => {
            Ok(zen234(Zen::Three))
        }
        0x19 => Ok(zen234(Zen::Four)),
        0x1a => Ok(zen5()),
        f if f < 0x17 => Err(format!(
            "AMD family {f:#x} predates Zen 2: no traffic weight events known"
        )),
        f => Err(format!(
            "AMD family {f:#x} model {model:#x}: no traffic weight events known"
        )),
    }
}

fn intel(m: &Machine, pmu: &str, caps: Option<&str>) -> Result<CoreTraffic, String> {
    let Some(model) = m.intel_model() else {
        return Err(format!(
            "Intel family {} is not family 6: no traffic weight events known",
            m.family.map_or("unknown".to_string(), |f| f.to_string())
        ));
    };
    if let Some(name) = caps
        && name.starts_with("generic_arch")
    {
        return Err(format!(
            "the kernel drives this core PMU in architectural mode only (caps/pmu_name \
             '{name}'): no model-specific events"
        ));
    }
    // caps/pmu_name as arch/x86/events/intel/core.c sets it, for the parts where it is one name.
    let expect = |names: &[&str]| -> Result<(), String> {
        match caps {
            Some(name) if !names.contains(&name) => Err(format!(
                "caps/pmu_name '{name}' does not fit Intel model {model:#x} (expected {})",
                names.join(" or ")
            )),
            _ => Ok(()),
        }
    };
    let hybrid = matches!(
        model,
        0x97 | 0x9a | 0xb7 | 0xba | 0xbf | 0xaa | 0xac | 0xb5 | 0xc5 | 0xc6 | 0xbd
    );
    let big = match (pmu, hybrid) {
        ("cpu", _) | ("cpu_core", true) => true,
        ("cpu_atom", true) => false,
        _ => {
            return Err(format!(
                "Intel model {model:#x} has no core PMU '{pmu}' (expected {})",
                if hybrid {
                    "'cpu_core' or 'cpu_atom'"
                } else {
                    "'cpu'"
                }
            ));
        }
    };
    let skl = "intel/perfmon SKL/events/skylake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let icl = "intel/perfmon ICL/events/icelake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let tgl = "intel/perfmon TGL/events/tigerlake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let rkl = "intel/perfmon RKL/events/rocketlake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let adl = "intel/perfmon ADL/events/alderlake_goldencove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let mtl = "intel/perfmon MTL/events/meteorlake_redwoodcove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let arl = "intel/perfmon ARL/events/arrowlake_lioncove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let lnl = "intel/perfmon LNL/events/lunarlake_lioncove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    Ok(match model {
        0x55 => {
            expect(&["skylake"])?;
            skx()
        }
        0x6a | 0x6c => {
            expect(&["icelake"])?;
            icx()
        }
        0x8f => {
            expect(&["sapphire_rapids"])?;
            spr("Sapphire Rapids", Glc::Spr)
        }
        0xcf => {
            expect(&["sapphire_rapids"])?;
            spr("Emerald Rapids", Glc::Emr)
        }
        0xad | 0xae => {
            // "granite_rapids" since "perf/x86/intel: Add a distinct name for Granite Rapids"
            // (2024); earlier kernels called it sapphire_rapids.
            expect(&["granite_rapids", "sapphire_rapids"])?;
            spr("Granite Rapids", Glc::Gnr)
        }
        0x57 | 0x85 => {
            expect(&["knights-landing"])?;
            knl(if model == 0x57 {
                "Knights Landing"
            } else {
                "Knights Mill"
            })
        }
        0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => {
            expect(&["skylake"])?;
            client_big("Skylake client", skl, Client::Skl)
        }
        0x7d | 0x7e => {
            expect(&["icelake"])?;
            client_big("Ice Lake client", icl, Client::Icl)
        }
        0x8c | 0x8d => {
            expect(&["icelake"])?;
            client_big("Tiger Lake", tgl, Client::Icl)
        }
        0xa7 => {
            expect(&["icelake"])?;
            client_big("Rocket Lake", rkl, Client::Icl)
        }
        0x97 | 0x9a | 0xb7 | 0xba | 0xbf if big => {
            client_big("Alder/Raptor Lake (cpu_core)", adl, Client::Glc)
        }
        0x97 | 0x9a | 0xb7 | 0xba | 0xbf => atom(
            "Alder/Raptor Lake (cpu_atom)",
            "intel/perfmon ADL/events/alderlake_gracemont_core.json LONGEST_LAT_CACHE.MISS",
            Some(
                "intel/perfmon ADL/events/alderlake_gracemont_core.json OCR.COREWB_M.ANY_RESPONSE",
            ),
        ),
        0xaa | 0xac | 0xb5 if big => client_big("Meteor Lake (cpu_core)", mtl, Client::Glc),
        0xaa | 0xac | 0xb5 => atom(
            "Meteor Lake (cpu_atom)",
            "intel/perfmon MTL/events/meteorlake_crestmont_core.json LONGEST_LAT_CACHE.MISS",
            None,
        ),
        0xc5 | 0xc6 if big => client_big("Arrow Lake (cpu_core)", arl, Client::Lnc),
        0xc5 | 0xc6 => atom(
            "Arrow Lake (cpu_atom)",
            "intel/perfmon ARL/events/arrowlake_skymont_core.json LONGEST_LAT_CACHE.MISS",
            None,
        ),
        0xbd if big => client_big("Lunar Lake (cpu_core)", lnl, Client::Lnc),
        0xbd => atom(
            "Lunar Lake (cpu_atom)",
            "intel/perfmon LNL/events/lunarlake_skymont_core.json LONGEST_LAT_CACHE.MISS",
            Some("intel/perfmon LNL/events/lunarlake_skymont_core.json OCR.COREWB_M.ANY_RESPONSE"),
        ),
        _ => {
            return Err(format!(
                "Intel family 6 model {model:#x}: no traffic weight events known for this model"
            ));
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Victims: the cycles a core spends stalled on a memory load, and the cycles to divide them by.
//
// Every encoding checked against a public table, named in `source`:
// * Intel CYCLE_ACTIVITY.STALLS_L3_MISS (EventCode 0xA3, UMask 0x06, CounterMask 6, counters
//   0-3) in the kernel's tools/perf/pmu-events/arch/x86/{skylakex,icelakex,sapphirerapids,
//   emeraldrapids,graniterapids}/memory.json (generated from Intel's perfmon tables). SPR and
//   later also list MEMORY_ACTIVITY.STALLS_L3_MISS (0x47/0x09, cmask 9, "cacheable" loads only);
//   CYCLE_ACTIVITY's is the one every generation shares, so shares compare across a fleet.
// * The cycles: event 0x3c (CPU_CLK_UNHALTED.THREAD_P), which the kernel places on fixed counter
//   1 (arch/x86/events/intel/core.c FIXED_EVENT_CONSTRAINT(0x003c, 1)) unless that counter is
//   taken (by the NMI watchdog's own cycles event), then on a generic one.
// * AMD Zen 4/5: ex_no_retire.load_not_complete (EventCode 0xD6, UMask 0xA2, "cycles with no
//   retire while the oldest op is waiting for load data") in tools/perf/pmu-events/arch/x86/
//   amdzen4/pipeline.json, and the event amdzen5/pipeline.json's backend_bound_by_memory metric
//   is built on; cycles ls_not_halted_cyc (0x76), the kernel's PERF_COUNT_HW_CPU_CYCLES for
//   Zen (arch/x86/events/amd/core.c). Zen 2/3 have no ex_no_retire event.
// * POWER8/9: PM_CMPLU_STALL_DMISS_L3MISS (0x4c01a, bound to PMC4): libpfm4
//   lib/events/power8_events.h and tools/perf/pmu-events/arch/powerpc/power9/other.json;
//   POWER10 PM_EXEC_STALL_DMISS_L3MISS (0x2c018, PMC2): tools/perf/pmu-events/arch/powerpc/
//   power10 JSON. Cycles PM_RUN_CYC (0x600f4) on PMC6, which counts nothing else
//   (arch/powerpc/perf/power{9,10}-events-list.h).
// * Generic counters per thread: Intel Skylake-SP 4 with Hyper-Threading (8 without: imc
//   assumes the smaller), Ice Lake-SP and later 8 (CPUID leaf 0xA, as the kernel reads it);
//   AMD Zen 6 core counters (arch/x86/events/amd/core.c, AMD64_NUM_COUNTERS_CORE); POWER 4
//   programmable PMCs beside the fixed PMC5/PMC6 (arch/powerpc/perf/power9-pmu.c).

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

const INTEL_CYCLES: StallEvent = StallEvent {
    name: "CPU_CLK_UNHALTED.THREAD",
    terms: "event=0x3c",
    counter_mask: None,
    fixed: true,
    source: "intel/perfmon CPU_CLK_UNHALTED.THREAD_P (EventCode 0x3C); linux arch/x86/events/intel/core.c FIXED_EVENT_CONSTRAINT(0x003c, 1)",
};

fn intel_stall(model: &'static str, file: &'static str, generic: usize) -> CoreStall {
    CoreStall {
        model,
        stalled: StallEvent {
            name: "CYCLE_ACTIVITY.STALLS_L3_MISS",
            terms: "event=0xa3,umask=0x06,cmask=6",
            counter_mask: CTR_0_3,
            fixed: false,
            source: file,
        },
        cycles: INTEL_CYCLES,
        generic_counters: generic,
        watchdog: Watchdog::FixedCycles,
        notes: vec![
            "CYCLE_ACTIVITY.STALLS_L3_MISS counts cycles with no uop executed while a demand \
             load that missed the L3 is outstanding: time the task waited on DRAM (or another \
             socket's cache)",
        ],
    }
}

fn zen_stall(model: &'static str, source: &'static str) -> CoreStall {
    CoreStall {
        model,
        stalled: StallEvent {
            name: "ex_no_retire.load_not_complete",
            terms: "event=0xd6,umask=0xa2",
            counter_mask: None,
            fixed: false,
            source,
        },
        cycles: StallEvent {
            name: "ls_not_halted_cyc",
            terms: "event=0x76",
            counter_mask: None,
            fixed: false,
            source: "linux arch/x86/events/amd/core.c PERF_COUNT_HW_CPU_CYCLES = 0x0076 (ls_not_halted_cyc)",
        },
        generic_counters: 6,
        watchdog: Watchdog::Generic,
        notes: vec![
            "ex_no_retire.load_not_complete counts cycles in which the oldest op waits for load \
             data from any level, not only DRAM: a share of stalls on memory, an upper bound \
             of those on DRAM",
        ],
    }
}

fn power_stall(generation: &str) -> Option<CoreStall> {
    let cycles = StallEvent {
        name: "PM_RUN_CYC",
        terms: "event=0x600f4",
        counter_mask: None,
        fixed: true,
        source: "linux arch/powerpc/perf/power9-events-list.h PM_RUN_CYC (0x600f4, PMC6)",
    };
    let (model, stalled) = match generation {
        "POWER8" => (
            "POWER8",
            StallEvent {
                name: "PM_CMPLU_STALL_DMISS_L3MISS",
                terms: "event=0x4c01a",
                counter_mask: Some(1 << 3),
                fixed: false,
                source: "libpfm4 lib/events/power8_events.h PM_CMPLU_STALL_DMISS_L3MISS (0x4c01a)",
            },
        ),
        "POWER9" => (
            "POWER9",
            StallEvent {
                name: "PM_CMPLU_STALL_DMISS_L3MISS",
                terms: "event=0x4c01a",
                counter_mask: Some(1 << 3),
                fixed: false,
                source: "linux tools/perf/pmu-events/arch/powerpc/power9/other.json PM_CMPLU_STALL_DMISS_L3MISS (0x4C01A)",
            },
        ),
        "POWER10" => (
            "POWER10",
            StallEvent {
                name: "PM_EXEC_STALL_DMISS_L3MISS",
                terms: "event=0x2c018",
                counter_mask: Some(1 << 1),
                fixed: false,
                source: "linux tools/perf/pmu-events/arch/powerpc/power10 JSON PM_EXEC_STALL_DMISS_L3MISS (0x2C018)",
            },
        ),
        _ => return None,
    };
    Some(CoreStall {
        model,
        stalled,
        cycles,
        generic_counters: 4,
        watchdog: Watchdog::None,
        notes: vec![
            "the stall event is bound to one PMC (the PMC field of its code): it fits only where \
             no weight holds that PMC",
        ],
    })
}

/// The stall counters of this CPU's core PMU `pmu`; Err(one-line reason) where the core has no
/// event for cycles stalled on memory (or imc does not know it).
pub fn core_stall(
    m: &Machine,
    pmu: &str,
    caps_pmu_name: Option<&str>,
) -> Result<CoreStall, String> {
    if let Some(generation) = m.power.as_deref() {
        if pmu != "cpu" {
            return Err(format!("POWER has no core PMU '{pmu}' (expected 'cpu')"));
        }
        return power_stall(generation)
            .ok_or_else(|| format!("no memory-stall event known for {generation}"));
    }
    if m.is_amd() {
        let (Some(family), Some(model)) = (m.family, m.model) else {
            return Err("proc/cpuinfo gives no AMD family/model".into());
        };
        if pmu != "cpu" {
            return Err(format!("AMD has no core PMU '{pmu}' (expected 'cpu')"));
        }
        // The same Zen 3/Zen 4 split as core_traffic's (the kernel's mapfile.csv).
        return match family {
            0x19 if model < 0x10
                || (0x20..0x30).contains(&model)
                || (0x40..0x60).contains(&model) =>
            {
                Err(
                    "Zen 3 has no event for cycles stalled on a load (ex_no_retire came with \
                     Zen 4)"
                        .into(),
                )
            }
            0x19 => Ok(zen_stall(
                "Zen 4",
                "linux tools/perf/pmu-events/arch/x86/amdzen4/pipeline.json ex_no_retire.load_not_complete (0xd6, umask 0xa2)",
            )),
            0x1a => Ok(zen_stall(
                "Zen 5",
                "linux tools/perf/pmu-events/arch/x86/amdzen5/pipeline.json backend_bound_by_memory (ex_no_retire.load_not_complete); encoding as amdzen4/pipeline.json (0xd6, umask 0xa2)",
            )),
            f => Err(format!(
                "AMD family {f:#x}: no event for cycles stalled on a load before Zen 4"
            )),
        };
    }
    let Some(model) = m.intel_model() else {
        return Err(match &m.vendor {
            Some(v) => format!("no memory-stall event known for CPU vendor '{v}'"),
            None => "proc/cpuinfo names no CPU vendor or POWER generation".to_string(),
        });
    };
    if let Some(name) = caps_pmu_name
        && name.starts_with("generic_arch")
    {
        return Err(format!(
            "the kernel drives this core PMU in architectural mode only (caps/pmu_name \
             '{name}'): no model-specific events"
        ));
    }
    if pmu != "cpu" {
        return Err(format!(
            "Intel model {model:#x}: no memory-stall event in imc's table for the '{pmu}' PMU"
        ));
    }
    Ok(match model {
        0x55 => intel_stall(
            "Skylake-SP/Cascade Lake",
            "linux tools/perf/pmu-events/arch/x86/skylakex/memory.json CYCLE_ACTIVITY.STALLS_L3_MISS",
            4,
        ),
        0x6a | 0x6c => intel_stall(
            "Ice Lake-SP",
            "linux tools/perf/pmu-events/arch/x86/icelakex/memory.json CYCLE_ACTIVITY.STALLS_L3_MISS",
            8,
        ),
        0x8f => intel_stall(
            "Sapphire Rapids",
            "linux tools/perf/pmu-events/arch/x86/sapphirerapids/memory.json CYCLE_ACTIVITY.STALLS_L3_MISS",
            8,
        ),
        0xcf => intel_stall(
            "Emerald Rapids",
            "linux tools/perf/pmu-events/arch/x86/emeraldrapids/memory.json CYCLE_ACTIVITY.STALLS_L3_MISS",
            8,
        ),
        0xad | 0xae => intel_stall(
            "Granite Rapids",
            "linux tools/perf/pmu-events/arch/x86/graniterapids/memory.json CYCLE_ACTIVITY.STALLS_L3_MISS",
            8,
        ),
        0x57 | 0x85 => {
            return Err(
                "Knights Landing/Mill has no L3 and no event for cycles stalled on memory".into(),
            );
        }
        _ => {
            return Err(format!(
                "Intel family 6 model {model:#x}: no memory-stall event in imc's table (server \
                 parts only so far)"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intel(model: u32) -> Machine {
        Machine {
            vendor: Some("GenuineIntel".into()),
            family: Some(6),
            model: Some(model),
            ..Default::default()
        }
    }
    fn amd(family: u32, model: u32) -> Machine {
        Machine {
            vendor: Some("AuthenticAMD".into()),
            family: Some(family),
            model: Some(model),
            ..Default::default()
        }
    }
    fn power(generation: &str) -> Machine {
        Machine {
            power: Some(generation.into()),
            ..Default::default()
        }
    }

    fn find<'a>(t: &'a CoreTraffic, name: &str) -> &'a CoreTrafficEvent {
        t.events
            .iter()
            .chain(t.alt_write.iter())
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{} has no {name}: {:?}", t.model, t.events))
    }

    /// Every CPU the table covers: (machine, core PMU).
    fn all() -> Vec<(Machine, &'static str)> {
        let mut v = Vec::new();
        for m in [
            0x55, 0x6a, 0x6c, 0x8f, 0xcf, 0xad, 0xae, 0x57, 0x85, 0x4e, 0x5e, 0x8e, 0x9e, 0xa5,
            0xa6, 0x7d, 0x7e, 0x8c, 0x8d, 0xa7,
        ] {
            v.push((intel(m), "cpu"));
        }
        for m in [
            0x97, 0x9a, 0xb7, 0xba, 0xbf, 0xaa, 0xac, 0xb5, 0xc5, 0xc6, 0xbd,
        ] {
            v.push((intel(m), "cpu_core"));
            v.push((intel(m), "cpu_atom"));
        }
        for (f, m) in [
            (0x17, 0x31),
            (0x17, 0x71),
            (0x19, 0x01),
            (0x19, 0x21),
            (0x19, 0x50),
            (0x19, 0x11),
            (0x19, 0x61),
            (0x19, 0xa0),
            (0x1a, 0x02),
            (0x1a, 0x44),
        ] {
            v.push((amd(f, m), "cpu"));
        }
        for g in ["POWER8", "POWER9", "POWER10"] {
            v.push((power(g), "cpu"));
        }
        v
    }

    #[test]
    fn every_listed_cpu_has_a_read_weight_within_the_budget() {
        for (m, pmu) in all() {
            let t = core_traffic(&m, pmu, None).unwrap_or_else(|e| panic!("{m:?} {pmu}: {e}"));
            assert!(!t.events.is_empty() && t.events.len() <= 4, "{}", t.model);
            assert!(
                t.events.iter().any(|e| e.direction == Direction::Read),
                "{} has no read weight",
                t.model
            );
            let offcore = t.events.iter().filter(|e| e.offcore_register).count();
            assert!(
                offcore <= 2,
                "{} needs {offcore} offcore registers",
                t.model
            );
            // The alternative write replaces the write and frees the remote reads' registers.
            if let Some(alt) = &t.alt_write {
                assert_eq!(alt.direction, Direction::Write);
                let kept = t
                    .events
                    .iter()
                    .filter(|e| e.offcore_register && e.locality != Locality::Remote)
                    .count();
                assert!(kept + usize::from(alt.offcore_register) <= 2, "{}", t.model);
            }
            for e in t.events.iter().chain(t.alt_write.iter()) {
                assert!(
                    !e.source.is_empty() && e.terms.starts_with("event=0x"),
                    "{e:?}"
                );
                assert_eq!(
                    e.offcore_register,
                    e.terms.contains("offcore_rsp="),
                    "{}: {e:?}",
                    t.model
                );
                let line = if m.power.is_some() { 128.0 } else { 64.0 };
                assert_eq!(e.bytes_per_count, line);
                assert!(!e.terms.contains("cache-misses"));
            }
            if m.is_amd() {
                assert!(t.notes.contains(&NOTE_ZEN_NO_WRITE), "{}", t.model);
                assert!(t.events.iter().all(|e| e.direction == Direction::Read));
            }
        }
    }

    #[test]
    fn intel_server_encodings() {
        let t = core_traffic(&intel(0x55), "cpu", Some("skylake")).unwrap();
        let l = find(&t, "OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD");
        assert_eq!(l.terms, "event=0xb7,umask=0x01,offcore_rsp=0x6040007f7");
        assert_eq!(l.locality, Locality::Local);
        let r = find(&t, "OCR.ALL_READS.L3_MISS_REMOTE_DRAM.SNOOP_MISS_OR_NO_FWD");
        assert_eq!(r.terms, "event=0xb7,umask=0x01,offcore_rsp=0x63b8007f7");
        assert_eq!(
            find(&t, "L2_LINES_OUT.NON_SILENT").terms,
            "event=0xf2,umask=0x02"
        );

        let t = core_traffic(&intel(0x6a), "cpu", Some("icelake")).unwrap();
        assert_eq!(
            find(&t, "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM").terms,
            "event=0xb7,umask=0x01,offcore_rsp=0x70c000477"
        );
        assert_eq!(
            find(&t, "OCR.WRITE_ESTIMATE.MEMORY").terms,
            "event=0xb7,umask=0x01,offcore_rsp=0xfbff80822"
        );

        for model in [0x8f, 0xcf, 0xad] {
            let t = core_traffic(&intel(model), "cpu", None).unwrap();
            let l = find(&t, "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM");
            assert_eq!(l.terms, "event=0x2a,umask=0x01,offcore_rsp=0x70c004477");
            assert_eq!(l.counter_mask, Some(0xf));
            assert_eq!(
                find(&t, "OCR.READS_TO_CORE.REMOTE_DRAM").terms,
                "event=0x2a,umask=0x01,offcore_rsp=0x730004477"
            );
            assert_eq!(
                find(&t, "L2_LINES_OUT.NON_SILENT").terms,
                "event=0x26,umask=0x02"
            );
            let w = t.alt_write.as_ref().unwrap();
            assert_eq!(w.name, "OCR.MODIFIED_WRITE.ANY_RESPONSE");
            assert_eq!(w.terms, "event=0x2a,umask=0x01,offcore_rsp=0x10808");
        }
    }

    #[test]
    fn intel_client_and_hybrid_encodings() {
        let t = core_traffic(&intel(0x8d), "cpu", Some("icelake")).unwrap();
        let llc = find(&t, "LONGEST_LAT_CACHE.MISS");
        assert_eq!(
            (llc.terms, llc.locality),
            ("event=0x2e,umask=0x41", Locality::Any)
        );

        let core = core_traffic(&intel(0x97), "cpu_core", Some("alderlake_hybrid")).unwrap();
        assert_eq!(
            find(&core, "L2_LINES_OUT.NON_SILENT").terms,
            "event=0x26,umask=0x02"
        );
        let atom = core_traffic(&intel(0x97), "cpu_atom", Some("alderlake_hybrid")).unwrap();
        assert_eq!(atom.model, "Alder/Raptor Lake (cpu_atom)");
        assert_eq!(
            find(&atom, "OCR.COREWB_M.ANY_RESPONSE").terms,
            "event=0xb7,umask=0x01,offcore_rsp=0x10008"
        );
        assert!(atom.notes.contains(&NOTE_ATOM_LLC));
        // Meteor Lake's Crestmont has no modified-writeback event.
        let mtl = core_traffic(&intel(0xaa), "cpu_atom", None).unwrap();
        assert!(mtl.events.iter().all(|e| e.direction == Direction::Read));
        // A hybrid part with its E-cores off registers plain `cpu` for the P-cores.
        assert_eq!(
            core_traffic(&intel(0x97), "cpu", None).unwrap().model,
            "Alder/Raptor Lake (cpu_core)"
        );
    }

    #[test]
    fn knl_weighs_ddr_and_mcdram() {
        let t = core_traffic(&intel(0x57), "cpu", Some("knights-landing")).unwrap();
        let ddr = find(&t, "OFFCORE_RESPONSE.ANY_READ.DDR");
        assert_eq!(ddr.terms, "event=0xb7,umask=0x01,offcore_rsp=0x1818032f7");
        assert_eq!((ddr.memory, ddr.counter_mask), (Memory::Dram, Some(0x3)));
        let mc = find(&t, "OFFCORE_RESPONSE.ANY_READ.MCDRAM");
        assert_eq!(mc.terms, "event=0xb7,umask=0x01,offcore_rsp=0x1806032f7");
        assert_eq!(mc.memory, Memory::Mcdram);
    }

    #[test]
    fn amd_encodings() {
        let z2 = core_traffic(&amd(0x17, 0x31), "cpu", None).unwrap();
        assert_eq!(z2.model, "Zen 2");
        assert_eq!(
            find(&z2, "ls_refills_from_sys.ls_mabresp_lcl_dram").terms,
            "event=0x43,umask=0x08"
        );
        assert_eq!(
            find(&z2, "ls_refills_from_sys.ls_mabresp_rmt_dram").locality,
            Locality::Remote
        );
        let z3 = core_traffic(&amd(0x19, 0x01), "cpu", None).unwrap();
        assert_eq!(z3.model, "Zen 3");
        assert_eq!(
            find(&z3, "ls_any_fills_from_sys.mem_io_remote").terms,
            "event=0x44,umask=0x40"
        );
        assert_eq!(
            core_traffic(&amd(0x19, 0x50), "cpu", None).unwrap().model,
            "Zen 3"
        );
        let z4 = core_traffic(&amd(0x19, 0x11), "cpu", None).unwrap();
        assert_eq!(z4.model, "Zen 4");
        assert_eq!(
            find(&z4, "ls_any_fills_from_sys.dram_io_near").terms,
            "event=0x44,umask=0x08"
        );
        assert_eq!(
            find(&z4, "l2_pf_miss_l2_l3 (L2 prefetchers)").terms,
            "event=0x72,umask=0x1f"
        );
        let z5 = core_traffic(&amd(0x1a, 0x02), "cpu", None).unwrap();
        assert_eq!(z5.events.len(), 2);
        assert_eq!(
            find(&z5, "l2_fill_rsp_src.dram_io_far").terms,
            "event=0x165,umask=0x40"
        );
    }

    #[test]
    fn power_encodings() {
        let p9 = core_traffic(&power("POWER9"), "cpu", Some("POWER9")).unwrap();
        let co = find(&p9, "PM_MEM_CO");
        assert_eq!(
            (co.terms, co.direction),
            ("event=0x4c058", Direction::Write)
        );
        assert_eq!(co.counter_mask, Some(0b1000));
        assert_eq!(find(&p9, "PM_MEM_READ").counter_mask, Some(0b0001));
        let p8 = core_traffic(&power("POWER8"), "cpu", None).unwrap();
        assert_eq!(find(&p8, "PM_DATA_ALL_FROM_LMEM").terms, "event=0x62c048");
        assert_eq!(
            find(&p8, "PM_DATA_ALL_FROM_DMEM").locality,
            Locality::Remote
        );
        let p10 = core_traffic(&power("POWER10"), "cpu", None).unwrap();
        assert!(p10.events.iter().all(|e| e.direction == Direction::Read));
    }

    #[test]
    fn unknown_cpus_are_refused_with_a_reason() {
        let cases: Vec<(Machine, &str, Option<&str>, &str)> = vec![
            (amd(0x17, 0x01), "cpu", None, "Zen/Zen+"),
            (amd(0x17, 0x18), "cpu", None, "Zen/Zen+"),
            (amd(0x15, 0x02), "cpu", None, "predates Zen 2"),
            (amd(0x10, 0x02), "cpu", None, "predates Zen 2"),
            (
                Machine {
                    vendor: Some("HygonGenuine".into()),
                    family: Some(0x18),
                    model: Some(0),
                    ..Default::default()
                },
                "cpu",
                None,
                "HygonGenuine",
            ),
            (intel(0x3f), "cpu", None, "model 0x3f"),
            (
                intel(0x55),
                "cpu",
                Some("generic_arch_v4"),
                "architectural mode",
            ),
            (intel(0x55), "cpu", Some("icelake"), "does not fit"),
            (intel(0x55), "cpu_atom", None, "no core PMU 'cpu_atom'"),
            (intel(0x97), "uncore_imc_0", None, "no core PMU"),
            (amd(0x19, 0x11), "cpu_core", None, "no core PMU"),
            (power("POWER7"), "cpu", None, "POWER7"),
            (power("POWER10"), "cpu", Some("ISAv3"), "ISAv3"),
            (Machine::default(), "cpu", None, "no CPU vendor"),
            (
                Machine {
                    vendor: Some("GenuineIntel".into()),
                    family: Some(15),
                    model: Some(4),
                    ..Default::default()
                },
                "cpu",
                None,
                "not family 6",
            ),
        ];
        for (m, pmu, caps, want) in cases {
            let err = core_traffic(&m, pmu, caps).unwrap_err();
            assert!(err.contains(want), "{m:?} {pmu}: '{err}' lacks '{want}'");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    /// On every fixture tree with a memory-controller source, each core PMU the kernel would
    /// expose gets its weights, and every term encodes through that PMU's own format/ files.
    #[test]
    fn fixture_trees_encode_their_weights() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let cases: &[(&str, &[&str], &str)] = &[
            ("skx-2socket", &["cpu"], "Skylake-SP/Cascade Lake"),
            ("skx-noevents", &["cpu"], "Skylake-SP/Cascade Lake"),
            ("icx-gaps", &["cpu"], "Ice Lake-SP"),
            ("spr-2socket", &["cpu"], "Sapphire Rapids"),
            ("icl-client", &["cpu"], "Ice Lake client"),
            ("tgl-client", &["cpu"], "Tiger Lake"),
            ("adl-hybrid", &["cpu_core", "cpu_atom"], "Alder/Raptor Lake"),
            ("knl", &["cpu"], "Knights Landing"),
            ("zen2-1socket", &["cpu"], "Zen 2"),
            ("zen3-ibs", &["cpu"], "Zen 3"),
            ("zen4-2socket", &["cpu"], "Zen 4"),
            ("power9-2chip", &["cpu"], "POWER9"),
            ("power9-imc-full", &["cpu"], "POWER9"),
        ];
        for (tree, pmus, model) in cases {
            let root = fixtures.join(tree);
            let m = crate::discovery::machine::read_machine(&root).unwrap();
            for name in *pmus {
                let pmu = crate::discovery::read_pmu(&root, name)
                    .unwrap_or_else(|e| panic!("{tree}: {e}"));
                let caps = std::fs::read_to_string(pmu.path.join("caps/pmu_name")).ok();
                let t = core_traffic(&m, name, caps.as_deref().map(str::trim))
                    .unwrap_or_else(|e| panic!("{tree} {name}: {e}"));
                assert!(t.model.starts_with(model), "{tree}: {}", t.model);
                for e in t.events.iter().chain(t.alt_write.iter()) {
                    let w = crate::discovery::encode_terms(&pmu, e.terms)
                        .unwrap_or_else(|err| panic!("{tree} {name} {}: {err}", e.name));
                    assert_ne!(w.config, 0, "{tree} {}", e.name);
                    assert_eq!(w.config1 != 0, e.offcore_register, "{tree} {}", e.name);
                }
            }
        }
        // The format files place what the names say: event 0x165 splits over bits 0-7 and
        // 32-35 on AMD; offcore_rsp fills config1 on Intel.
        let zen = crate::discovery::read_pmu(&fixtures.join("zen4-2socket"), "cpu").unwrap();
        let w = crate::discovery::encode_terms(&zen, "event=0x165,umask=0x08").unwrap();
        assert_eq!(w.config, 0x1_0000_0865);
        let spr = crate::discovery::read_pmu(&fixtures.join("spr-2socket"), "cpu").unwrap();
        let t = core_traffic(&intel(0x8f), "cpu", Some("sapphire_rapids")).unwrap();
        let w = crate::discovery::encode_terms(&spr, t.events[0].terms).unwrap();
        assert_eq!((w.config, w.config1), (0x012a, 0x7_0c00_4477));
    }

    #[test]
    fn stall_events_are_chosen_per_model_with_a_source_and_a_reason_where_none() {
        for m in [0x55, 0x6a, 0x6c, 0x8f, 0xcf, 0xad, 0xae] {
            let t = core_stall(&intel(m), "cpu", None).unwrap();
            assert_eq!(t.stalled.name, "CYCLE_ACTIVITY.STALLS_L3_MISS");
            assert_eq!(t.stalled.terms, "event=0xa3,umask=0x06,cmask=6");
            assert_eq!(t.stalled.counter_mask, Some(0xf));
            assert!(t.cycles.fixed && t.cycles.terms == "event=0x3c");
            assert_eq!(t.generic_counters, if m == 0x55 { 4 } else { 8 });
            assert!(t.stalled.source.contains("memory.json"), "{}", t.model);
        }
        for (f, m) in [(0x19, 0x11), (0x19, 0xa0), (0x1a, 0x02)] {
            let t = core_stall(&amd(f, m), "cpu", None).unwrap();
            assert_eq!(t.stalled.terms, "event=0xd6,umask=0xa2");
            assert_eq!(t.cycles.terms, "event=0x76");
            assert_eq!((t.generic_counters, t.watchdog), (6, Watchdog::Generic));
        }
        let p9 = core_stall(&power("POWER9"), "cpu", None).unwrap();
        assert_eq!(
            (p9.stalled.terms, p9.stalled.counter_mask),
            ("event=0x4c01a", Some(0x8))
        );
        let p10 = core_stall(&power("POWER10"), "cpu", None).unwrap();
        assert_eq!(
            (p10.stalled.terms, p10.stalled.counter_mask),
            ("event=0x2c018", Some(0x2))
        );
        assert!(p10.cycles.fixed && p10.watchdog == Watchdog::None);
        for (m, pmu, why) in [
            (amd(0x19, 0x01), "cpu", "Zen 3"),
            (amd(0x17, 0x31), "cpu", "before Zen 4"),
            (intel(0x57), "cpu", "no L3"),
            (intel(0x97), "cpu_atom", "cpu_atom"),
            (intel(0x8c), "cpu", "server parts only"),
        ] {
            let e = core_stall(&m, pmu, None).unwrap_err();
            assert!(e.contains(why), "{m:?} {pmu}: {e}");
        }
        let e = core_stall(&intel(0x55), "cpu", Some("generic_arch_v4")).unwrap_err();
        assert!(e.contains("architectural"), "{e}");
    }
}
