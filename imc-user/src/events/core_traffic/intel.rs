//! Intel core events: offcore-response DRAM reads and L2 writebacks on servers, LLC misses on
//! clients, DDR/MCDRAM reads on Xeon Phi, and cycles stalled on an L3 miss.
use super::table::{
    CTR_0_3, CoreStall, CoreTraffic, CoreTrafficEvent, Locality, Memory, StallEvent, Watchdog, ev,
};
use crate::discovery::Machine;
use crate::model::Direction;

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

pub(super) const NOTE_ATOM_LLC: &str = "LONGEST_LAT_CACHE.MISS on the Atom cores counts demand loads, RFOs, \
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
        memory,
        ..ev(
            name,
            terms,
            Direction::Read,
            Locality::Any,
            Some(0x3),
            true,
            source,
        )
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

/// The traffic weights of an Intel core PMU `pmu` (caps/pmu_name `caps` when present).
pub(super) fn traffic(m: &Machine, pmu: &str, caps: Option<&str>) -> Result<CoreTraffic, String> {
    let Some(model) = m.intel_model() else {
        return Err(format!(
            "Intel family {} is not family 6: no traffic weight events known",
            m.family.map_or("unknown".to_string(), |f| f.to_string())
        ));
    };
    architectural_only(caps)?;
    let big = big_core(model, pmu)?;
    match server(model, caps)? {
        Some(table) => Ok(table),
        None => client(model, big, caps),
    }
}

/// Err where the kernel drives the core PMU in architectural mode (caps/pmu_name
/// `generic_arch_v*`): the model's own events are not available then.
fn architectural_only(caps: Option<&str>) -> Result<(), String> {
    if let Some(name) = caps
        && name.starts_with("generic_arch")
    {
        return Err(format!(
            "the kernel drives this core PMU in architectural mode only (caps/pmu_name \
             '{name}'): no model-specific events"
        ));
    }
    Ok(())
}

/// caps/pmu_name as arch/x86/events/intel/core.c sets it, for the parts where it is one name:
/// Err where the kernel names model `model`'s PMU otherwise.
fn expect_caps(caps: Option<&str>, model: u32, names: &[&str]) -> Result<(), String> {
    match caps {
        Some(name) if !names.contains(&name) => Err(format!(
            "caps/pmu_name '{name}' does not fit Intel model {model:#x} (expected {})",
            names.join(" or ")
        )),
        _ => Ok(()),
    }
}

/// Whether `pmu` is model `model`'s big core (`cpu`, or `cpu_core` on hybrid parts) rather
/// than its E-core (`cpu_atom`); Err for a PMU the model does not have.
fn big_core(model: u32, pmu: &str) -> Result<bool, String> {
    let hybrid = matches!(
        model,
        0x97 | 0x9a | 0xb7 | 0xba | 0xbf | 0xaa | 0xac | 0xb5 | 0xc5 | 0xc6 | 0xbd
    );
    match (pmu, hybrid) {
        ("cpu", _) | ("cpu_core", true) => Ok(true),
        ("cpu_atom", true) => Ok(false),
        _ => Err(format!(
            "Intel model {model:#x} has no core PMU '{pmu}' (expected {})",
            if hybrid {
                "'cpu_core' or 'cpu_atom'"
            } else {
                "'cpu'"
            }
        )),
    }
}

/// The server and Xeon Phi tables; None for a model that is not one.
fn server(model: u32, caps: Option<&str>) -> Result<Option<CoreTraffic>, String> {
    let expect = |names: &[&str]| expect_caps(caps, model, names);
    Ok(Some(match model {
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
        _ => return Ok(None),
    }))
}

/// The client tables: big cores, and the E-cores of hybrid parts (`big` false).
fn client(model: u32, big: bool, caps: Option<&str>) -> Result<CoreTraffic, String> {
    let expect = |names: &[&str]| expect_caps(caps, model, names);
    let skl = "intel/perfmon SKL/events/skylake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let icl = "intel/perfmon ICL/events/icelake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let tgl = "intel/perfmon TGL/events/tigerlake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let rkl = "intel/perfmon RKL/events/rocketlake_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let adl = "intel/perfmon ADL/events/alderlake_goldencove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let mtl = "intel/perfmon MTL/events/meteorlake_redwoodcove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let arl = "intel/perfmon ARL/events/arrowlake_lioncove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    let lnl = "intel/perfmon LNL/events/lunarlake_lioncove_core.json LONGEST_LAT_CACHE.MISS, L2_LINES_OUT.NON_SILENT";
    Ok(match model {
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

/// The stall pair of Intel model `model`'s core PMU `pmu` (caps/pmu_name `caps` when present).
pub(super) fn stall(model: u32, pmu: &str, caps: Option<&str>) -> Result<CoreStall, String> {
    architectural_only(caps)?;
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
