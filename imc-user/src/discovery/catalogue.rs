//! The backend catalogue: for every `BackendKind`, whether this machine offers it, why not,
//! its PMUs with their designated CPUs, and the events it would count.
//!
//! Encodings come from the PMU's sysfs aliases through `encode_terms` whenever the kernel
//! provides them. Where a kernel exports no alias (older kernels, AMD, KNL), imc carries the
//! alias *text* (`event=0x04,umask=0x03`) with its public source and still encodes it through
//! the PMU's own `format/` files, so no config integer or PMU type is hard-coded.
use super::format::encode_terms;
use super::machine::Machine;
use super::mchbar;
use super::sysfs::{DiscoveryError, bytes_per_count, read_optional};
use super::topology::designated_cpus;
use crate::model::{BackendKind, Direction, Pmu, Source, SourceEvent, SourcePmu, Topology};
use std::path::Path;

pub(crate) struct Ctx<'a> {
    pub root: &'a Path,
    pub topo: &'a Topology,
    pub machine: &'a Machine,
    pub pmus: &'a [Pmu],
}

impl Ctx<'_> {
    fn pmu(&self, name: &str) -> Option<&Pmu> {
        self.pmus.iter().find(|p| p.name == name)
    }

    /// PMUs named `<prefix><N>`, sorted by N (numbering may have gaps: never assume 0..n).
    fn numbered(&self, prefix: &str) -> Vec<&Pmu> {
        let mut v: Vec<(u32, &Pmu)> = self
            .pmus
            .iter()
            .filter_map(|p| {
                let n = p.name.strip_prefix(prefix)?;
                (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse().ok().map(|n| (n, p)))
                    .flatten()
            })
            .collect();
        v.sort_by_key(|(n, _)| *n);
        v.into_iter().map(|(_, p)| p).collect()
    }

    fn source_pmu(&self, pmu: &Pmu) -> SourcePmu {
        let cpus = match &pmu.cpumask {
            Some(mask) => designated_cpus(self.topo, mask),
            // No cpumask: a CPU-scope PMU, opened on every online CPU.
            None => self.topo.online.clone(),
        };
        SourcePmu {
            name: pmu.name.clone(),
            pmu_type: pmu.pmu_type,
            cpus,
        }
    }
}

fn unavailable(backend: BackendKind, reason: impl Into<String>) -> Source {
    Source {
        backend,
        available: false,
        reason: Some(reason.into()),
        pmus: Vec::new(),
        events: Vec::new(),
    }
}

/// How an event is specified: a sysfs alias of the PMU, or alias text imc carries.
enum Spec<'a> {
    Alias(&'a str),
    Terms {
        terms: &'a str,
        bytes_per_count: f64,
        source: &'a str,
    },
}

struct Want<'a> {
    name: &'a str,
    direction: Option<Direction>,
    spec: Spec<'a>,
}

/// Encodes one event on one PMU. Errors (a missing alias, a term the PMU's formats do not
/// define) become a one-line reason naming the file.
fn encode(pmu: &Pmu, want: &Want, counter_bits: u8) -> Result<SourceEvent, String> {
    let (terms, bpc, origin) = match &want.spec {
        Spec::Alias(alias) => {
            let Some(a) = pmu.events.get(*alias) else {
                return Err(DiscoveryError::NoEvents {
                    path: pmu.path.join("events").join(alias),
                    pmu: pmu.name.clone(),
                    alias: alias.to_string(),
                }
                .to_string());
            };
            (
                a.terms.clone(),
                bytes_per_count(a.scale, a.unit.as_deref()),
                format!("sysfs {}/events/{}", pmu.name, alias),
            )
        }
        Spec::Terms {
            terms,
            bytes_per_count,
            source,
        } => (
            terms.to_string(),
            Some(*bytes_per_count),
            format!("{terms} ({source})"),
        ),
    };
    let words = encode_terms(pmu, &terms).map_err(|e| {
        format!(
            "{}: {e}",
            pmu.path
                .join(match &want.spec {
                    Spec::Alias(a) => format!("events/{a}"),
                    Spec::Terms { .. } => "format".to_string(),
                })
                .display()
        )
    })?;
    Ok(SourceEvent {
        name: want.name.to_string(),
        pmu: pmu.name.clone(),
        config: Some(words.config),
        config1: Some(words.config1),
        bytes_per_count: bpc,
        address: None,
        width: None,
        direction: want.direction,
        counter_bits,
        origin,
    })
}

/// A source over `pmus`, each with every event of `wants`.
fn build(
    ctx: &Ctx,
    backend: BackendKind,
    pmus: &[&Pmu],
    wants: &[Want],
    counter_bits: u8,
    reason: Option<String>,
) -> Source {
    let mut events = Vec::new();
    for pmu in pmus {
        for w in wants {
            match encode(pmu, w, counter_bits) {
                Ok(e) => events.push(e),
                Err(why) => return unavailable(backend, why),
            }
        }
    }
    Source {
        backend,
        available: true,
        reason,
        pmus: pmus.iter().map(|p| ctx.source_pmu(p)).collect(),
        events,
    }
}

// Intel family-6 model numbers (arch/x86/include/asm/intel-family.h).
const HASWELL_X: u32 = 0x3f;
const BROADWELL_X: u32 = 0x4f;
const SKYLAKE_X: u32 = 0x55; // also Cascade Lake and Cooper Lake
const ICELAKE_X: u32 = 0x6a;
const ICELAKE_D: u32 = 0x6c;
const SAPPHIRERAPIDS_X: u32 = 0x8f;
const EMERALDRAPIDS_X: u32 = 0xcf;
const GRANITERAPIDS_X: u32 = 0xad;
const GRANITERAPIDS_D: u32 = 0xae;
const SIERRAFOREST_X: u32 = 0xaf;
const GRANDRIDGE: u32 = 0xb6;
const XEON_PHI_KNL: u32 = 0x57;
const XEON_PHI_KNM: u32 = 0x85;

fn is_gnr_family(model: Option<u32>) -> bool {
    // CPUs that use gnr_uncores[]: two command schedulers per channel (uncore_snbep.c,
    // "Add per-scheduler IMC CAS count events").
    matches!(
        model,
        Some(GRANITERAPIDS_X | GRANITERAPIDS_D | SIERRAFOREST_X | GRANDRIDGE)
    )
}

fn is_knl(ctx: &Ctx) -> bool {
    matches!(ctx.machine.intel_model(), Some(XEON_PHI_KNL | XEON_PHI_KNM))
        || !ctx.numbered("uncore_edc_eclk_").is_empty()
}

/// Raw CAS encodings for server uncore IMC PMUs whose kernel exports no `events/`.
fn server_raw(model: u32) -> Option<(&'static str, &'static str, &'static str)> {
    match model {
        // uncore_snbep.c hswep_uncore_imc_events (used by hswep/bdx/skx imc);
        // perf pmu-events skylakex/uncore-memory.json UNC_M_CAS_COUNT.RD umask 0x3, WR 0xc.
        HASWELL_X | BROADWELL_X | SKYLAKE_X => Some((
            "event=0x04,umask=0x03",
            "event=0x04,umask=0x0c",
            "uncore_snbep.c hswep_uncore_imc_events",
        )),
        // uncore_snbep.c snr_uncore_imc_events, used by icx_uncore_imc since the fix
        // "Fix the ICX cas_count_read/write encodings" (RD b00001111, WR b00110000).
        ICELAKE_X | ICELAKE_D => Some((
            "event=0x04,umask=0x0f",
            "event=0x04,umask=0x30",
            "uncore_snbep.c snr_uncore_imc_events (ICX)",
        )),
        // uncore_snbep.c spr_uncore_imc_events; perf sapphirerapids uncore-memory.json.
        SAPPHIRERAPIDS_X | EMERALDRAPIDS_X => Some((
            "event=0x05,umask=0xcf",
            "event=0x05,umask=0xf0",
            "uncore_snbep.c spr_uncore_imc_events",
        )),
        _ => None,
    }
}

const CAS_64: f64 = 64.0;

fn intel_uncore_imc(ctx: &Ctx) -> Source {
    let kind = BackendKind::IntelUncoreImc;
    let pmus = ctx.numbered("uncore_imc_");
    if pmus.is_empty() {
        return unavailable(
            kind,
            "no uncore_imc_N PMU in sysfs (not an Intel server, or the uncore driver is not loaded)",
        );
    }
    if is_knl(ctx) {
        return unavailable(
            kind,
            "Knights Landing/Mill: uncore_imc_N are the DDR channels of knl-imc (see knl-imc and knl-edc)",
        );
    }
    let model = ctx.machine.intel_model();
    // Every instance has the same events; look at the first.
    let first = pmus[0];
    let has = |a: &str| first.events.contains_key(a);

    if is_gnr_family(model) {
        const SRC: &str = "uncore_snbep.c gnr_uncore_imc_events";
        let per_sched = has("cas_count_read_sch0") && has("cas_count_read_sch1");
        let wants: Vec<Want> = if per_sched {
            ["cas_count_read_sch0", "cas_count_read_sch1"]
                .iter()
                .map(|a| Want {
                    name: "read",
                    direction: Some(Direction::Read),
                    spec: Spec::Alias(a),
                })
                .chain(
                    ["cas_count_write_sch0", "cas_count_write_sch1"]
                        .iter()
                        .map(|a| Want {
                            name: "write",
                            direction: Some(Direction::Write),
                            spec: Spec::Alias(a),
                        }),
                )
                .collect()
        } else {
            let t = |terms, name, d| Want {
                name,
                direction: Some(d),
                spec: Spec::Terms {
                    terms,
                    bytes_per_count: CAS_64,
                    source: SRC,
                },
            };
            vec![
                t("event=0x05,umask=0xcf", "read", Direction::Read),
                t("event=0x06,umask=0xcf", "read", Direction::Read),
                t("event=0x05,umask=0xf0", "write", Direction::Write),
                t("event=0x06,umask=0xf0", "write", Direction::Write),
            ]
        };
        let reason = (!per_sched).then(|| {
            "two command schedulers per channel: counting SCH0 and SCH1 (a plain cas_count_read alias counts SCH0 only)".to_string()
        });
        return build(ctx, kind, &pmus, &wants, 48, reason);
    }

    if has("cas_count_read") && has("cas_count_write") {
        let mut wants = vec![
            Want {
                name: "read",
                direction: Some(Direction::Read),
                spec: Spec::Alias("cas_count_read"),
            },
            Want {
                name: "write",
                direction: Some(Direction::Write),
                spec: Spec::Alias("cas_count_write"),
            },
        ];
        let mut reason = None;
        // Kernels before the ICX fix exported the Haswell encodings on Ice Lake-SP, which count
        // only part of the CAS commands; use the corrected ones and say so.
        if matches!(model, Some(ICELAKE_X | ICELAKE_D))
            && first.events.get("cas_count_read").map(|a| a.terms.as_str())
                == Some("event=0x04,umask=0x03")
            && let Some((rd, wr, src)) = server_raw(ICELAKE_X)
        {
            wants = vec![
                Want {
                    name: "read",
                    direction: Some(Direction::Read),
                    spec: Spec::Terms {
                        terms: rd,
                        bytes_per_count: CAS_64,
                        source: src,
                    },
                },
                Want {
                    name: "write",
                    direction: Some(Direction::Write),
                    spec: Spec::Terms {
                        terms: wr,
                        bytes_per_count: CAS_64,
                        source: src,
                    },
                },
            ];
            reason = Some("this kernel's ICX cas_count aliases predate the encoding fix; using umask 0x0f/0x30".into());
        }
        return build(ctx, kind, &pmus, &wants, 48, reason);
    }

    let Some((rd, wr, src)) = model.and_then(server_raw) else {
        let path = first.path.join("events/cas_count_read");
        return unavailable(
            kind,
            format!(
                "{}: no such alias, and imc has no CAS encoding for CPU model {}",
                path.display(),
                model.map_or("unknown".to_string(), |m| format!("{m:#x}"))
            ),
        );
    };
    let wants = [
        Want {
            name: "read",
            direction: Some(Direction::Read),
            spec: Spec::Terms {
                terms: rd,
                bytes_per_count: CAS_64,
                source: src,
            },
        },
        Want {
            name: "write",
            direction: Some(Direction::Write),
            spec: Spec::Terms {
                terms: wr,
                bytes_per_count: CAS_64,
                source: src,
            },
        },
    ];
    build(ctx, kind, &pmus, &wants, 48, None)
}

fn intel_client_imc(ctx: &Ctx) -> Source {
    let kind = BackendKind::IntelClientImc;
    // Skylake … Rocket Lake: one `uncore_imc` (snb_uncore_imc, num_boxes 1, no suffix).
    if let Some(p) = ctx.pmu("uncore_imc")
        && p.events.contains_key("data_reads")
    {
        let wants = [
            Want {
                name: "read",
                direction: Some(Direction::Read),
                spec: Spec::Alias("data_reads"),
            },
            Want {
                name: "write",
                direction: Some(Direction::Write),
                spec: Spec::Alias("data_writes"),
            },
        ];
        // The hardware counter is 32-bit, but the kernel polls it (5 s hrtimer) and perf reads
        // return its 64-bit accumulation.
        return build(ctx, kind, &[p], &wants, 64, None);
    }
    // Tiger Lake … Arrow Lake: `uncore_imc_free_running_N`, one per controller, summed. Server
    // parts (ICX/SPR) also have free-running IMC PMUs, with read/write aliases instead of
    // data_read/data_write; those are not this backend.
    let pmus: Vec<&Pmu> = ctx
        .numbered("uncore_imc_free_running_")
        .into_iter()
        .filter(|p| p.events.contains_key("data_read"))
        .collect();
    if pmus.is_empty() {
        return unavailable(
            kind,
            "no client IMC PMU (uncore_imc with data_reads, or uncore_imc_free_running_N with data_read)",
        );
    }
    let wants = [
        Want {
            name: "read",
            direction: Some(Direction::Read),
            spec: Spec::Alias("data_read"),
        },
        Want {
            name: "write",
            direction: Some(Direction::Write),
            spec: Spec::Alias("data_write"),
        },
        Want {
            name: "total",
            direction: Some(Direction::Total),
            spec: Spec::Alias("data_total"),
        },
    ];
    build(ctx, kind, &pmus, &wants, 64, None)
}

fn intel_client_mchbar(ctx: &Ctx) -> Result<Source, DiscoveryError> {
    let kind = BackendKind::IntelClientMchbar;
    let dev = ctx.root.join("sys/bus/pci/devices/0000:00:00.0");
    let Some(vendor) = read_optional(&dev.join("vendor"))? else {
        return Ok(unavailable(
            kind,
            format!("{}: no PCI host bridge 0000:00:00.0", dev.display()),
        ));
    };
    if vendor != "0x8086" {
        return Ok(unavailable(
            kind,
            format!("PCI 0000:00:00.0 vendor is {vendor}, not Intel (0x8086)"),
        ));
    }
    let device_path = dev.join("device");
    let device_text = read_optional(&device_path)?.unwrap_or_default();
    let Some(device) = device_text
        .strip_prefix("0x")
        .and_then(|h| u16::from_str_radix(h, 16).ok())
    else {
        return Err(DiscoveryError::Invalid {
            path: device_path,
            expected: "a PCI device id such as 0x8a12".into(),
            found: device_text,
        });
    };
    let model = ctx.machine.intel_model();
    let generation = mchbar::generation_for_device(device)
        .or_else(|| model.and_then(mchbar::generation_for_model));
    let Some((gen_name, mut layout)) = generation else {
        return Ok(unavailable(
            kind,
            format!(
                "host bridge {device:#06x} is not a known Intel client memory controller (uncore_snb.c tables)"
            ),
        ));
    };
    // The kernel picks the TGL-L layout by CPU model (tgl_l_uncore_init for TIGERLAKE_L).
    if model == Some(0x8c) && layout == mchbar::Layout::FreeRunning {
        layout = mchbar::Layout::TigerLakeL;
    }
    if let Some(mode) = lockdown(ctx.root)? {
        return Ok(unavailable(
            kind,
            format!("kernel lockdown ({mode}) forbids /dev/mem access"),
        ));
    }
    let cfg_path = dev.join("config");
    let config = match super::sysfs::read_small(&cfg_path) {
        Ok(c) => c,
        Err(e) => {
            return Ok(unavailable(
                kind,
                format!("cannot read {}: {e}", cfg_path.display()),
            ));
        }
    };
    let base = match mchbar::mchbar_base(&config) {
        Ok(b) => b,
        Err(why) => return Ok(unavailable(kind, format!("{gen_name}: {why}"))),
    };
    let events = mchbar::counters(base, layout)
        .into_iter()
        .map(|c| SourceEvent {
            name: direction_name(c.direction).to_string(),
            pmu: c.pmu,
            config: None,
            config1: None,
            bytes_per_count: Some(64.0),
            address: Some(c.address),
            width: Some(c.width),
            direction: Some(c.direction),
            counter_bits: c.width,
            origin: format!("{gen_name} MCHBAR {base:#x} (uncore_snb.c)"),
        })
        .collect();
    Ok(Source {
        backend: kind,
        available: true,
        reason: Some(format!(
            "{gen_name}: reads /dev/mem (root, no kernel lockdown)"
        )),
        pmus: Vec::new(),
        events,
    })
}

/// The active mode of `sys/kernel/security/lockdown` ("none [integrity] confidentiality"),
/// when it is not "none".
fn lockdown(root: &Path) -> Result<Option<String>, DiscoveryError> {
    let Some(text) = read_optional(&root.join("sys/kernel/security/lockdown"))? else {
        return Ok(None);
    };
    let active = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    Ok(active.filter(|m| *m != "none").map(str::to_string))
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Read => "read",
        Direction::Write => "write",
        Direction::Total => "total",
    }
}

fn amd_umc(ctx: &Ctx) -> Source {
    let kind = BackendKind::AmdUmc;
    let pmus = ctx.numbered("amd_umc_");
    if pmus.is_empty() {
        return unavailable(
            kind,
            "no amd_umc_N PMU (needs AMD Zen 4 or later with PerfMonV2 and Linux 6.7+)",
        );
    }
    // perf pmu-events amdzen4/amdzen5 memory-controller.json: umc_cas_cmd.rd = EventCode 0x0a
    // RdWrMask 0x1, .wr = RdWrMask 0x2; recommended.json umc_mem_read_bandwidth =
    // umc_cas_cmd.rd × 64 bytes. Formats event=config:0-7, rdwrmask=config:8-9 (amd/uncore.c).
    const SRC: &str = "perf amdzen4/amdzen5 memory-controller.json umc_cas_cmd";
    let wants = [
        Want {
            name: "read",
            direction: Some(Direction::Read),
            spec: Spec::Terms {
                terms: "event=0x0a,rdwrmask=0x1",
                bytes_per_count: 64.0,
                source: SRC,
            },
        },
        Want {
            name: "write",
            direction: Some(Direction::Write),
            spec: Spec::Terms {
                terms: "event=0x0a,rdwrmask=0x2",
                bytes_per_count: 64.0,
                source: SRC,
            },
        },
    ];
    // amd/uncore.c: COUNTER_SHIFT 16, i.e. 48-bit counters.
    build(ctx, kind, &pmus, &wants, 48, None)
}

fn amd_df(ctx: &Ctx) -> Source {
    let kind = BackendKind::AmdDf;
    let Some(pmu) = ctx.pmu("amd_df") else {
        return unavailable(kind, "no amd_df PMU (AMD family 17h or later)");
    };
    // amd/uncore.c: PerfMonV2 DF formats are event=config:0-7,32-37 and
    // umask=config:8-15,24-27; before, event=config:0-7,32-35(,59-60) and umask=config:8-15.
    let v2 = pmu.formats.get("umask").is_some_and(|f| f.bits.len() > 1);
    let family = ctx.machine.family.filter(|_| ctx.machine.is_amd());
    let mut wants = Vec::new();
    let names: Vec<String>;
    match (family, v2) {
        (Some(0x1a), true) => {
            // perf amdzen5/data-fabric.json: local_or_remote_socket_{read,write}_data_beats_
            // dram_N, EventCode 0x1f + 0x40·(N mod 4) + 0x100·(N div 4), UMask 0xffe (read) /
            // 0xfff (write), 64-byte beats, channels 0..11.
            names = (0..12u32)
                .flat_map(|n| {
                    let ev = 0x1f + 0x40 * (n % 4) + 0x100 * (n / 4);
                    [
                        format!("event={ev:#x},umask=0xffe"),
                        format!("event={ev:#x},umask=0xfff"),
                    ]
                })
                .collect();
            for (i, t) in names.iter().enumerate() {
                let (name, d) = if i % 2 == 0 {
                    ("read", Direction::Read)
                } else {
                    ("write", Direction::Write)
                };
                wants.push(Want {
                    name,
                    direction: Some(d),
                    spec: Spec::Terms {
                        terms: t,
                        bytes_per_count: 64.0,
                        source: "perf amdzen5/data-fabric.json local_or_remote_socket_*_data_beats_dram_N",
                    },
                });
            }
        }
        (Some(0x17 | 0x19), false) => {
            // perf amdzen2/amdzen3 data-fabric.json dram_channel_data_controller_N: EventCode
            // 0x07 + 0x40·N (0x107 … 0x1c7 for N ≥ 4), UMask 0x38, "Requests with Data
            // (64B)": reads and writes together, hence `total`.
            names = (0..8u32)
                .map(|n| format!("event={:#x},umask=0x38", 0x07 + 0x40 * n))
                .collect();
            for t in &names {
                wants.push(Want {
                    name: "total",
                    direction: Some(Direction::Total),
                    spec: Spec::Terms {
                        terms: t,
                        bytes_per_count: 64.0,
                        source: "perf amdzen2/amdzen3 data-fabric.json dram_channel_data_controller_N",
                    },
                });
            }
        }
        (Some(0x19), true) => {
            return unavailable(
                kind,
                "Zen 4 DF: Linux perf's pmu-events carry no Zen 4 DRAM data-fabric events; use amd-umc",
            );
        }
        _ => {
            return unavailable(
                kind,
                format!(
                    "amd_df present but AMD family {} with this DF format has no known DRAM events",
                    family.map_or("unknown".into(), |f| format!("{f:#x}"))
                ),
            );
        }
    }
    build(ctx, kind, &[pmu], &wants, 48, None)
}

fn power_nest(ctx: &Ctx) -> Source {
    let kind = BackendKind::PowerNestImc;
    let nest: Vec<&Pmu> = ctx
        .pmus
        .iter()
        .filter(|p| p.name.starts_with("nest_") && p.name.ends_with("_imc"))
        .collect();
    if nest.is_empty() {
        return unavailable(
            kind,
            "no nest_*_imc PMU (POWER9+ bare metal (PowerNV) with IMC firmware)",
        );
    }
    // Two encodings exist; counting both would count the same traffic twice. Prefer the MCS
    // "128B" dispatch events, for which IBM publishes the bandwidth recipe
    // (developer.ibm.com/articles/power9-in-memory-collection-counters): bytes = Σ(count ×
    // .scale) × 64. The event names suggest 128-byte units and the firmware scale of 256
    // suggests prescaled counters, so the ×64 is IBM's word, not derived here; see the README.
    let mcs: Vec<&Pmu> = nest
        .iter()
        .copied()
        .filter(|p| p.name.starts_with("nest_mcs"))
        .collect();
    let (pmus, reason) = if !mcs.is_empty() {
        (
            mcs,
            "IBM's recipe: bytes = scaled 128B_*_DISP counts × 64 (not verified against hardware documentation)",
        )
    } else {
        (
            nest.iter()
                .copied()
                .filter(|p| p.name.starts_with("nest_mba"))
                .collect(),
            "MBA READ_BYTES/WRITE_BYTES: bytes = count × .scale",
        )
    };
    let mut events = Vec::new();
    for pmu in &pmus {
        for alias in pmu.events.values() {
            let n = alias.name.as_str();
            let (dir, mult) = if n.contains("_128B_RD_DISP_") {
                (Direction::Read, 64.0)
            } else if n.contains("_128B_WR_DISP_") {
                (Direction::Write, 64.0)
            } else if n.ends_with("_READ_BYTES") {
                (Direction::Read, 1.0)
            } else if n.ends_with("_WRITE_BYTES") {
                (Direction::Write, 1.0)
            } else {
                continue;
            };
            let want = Want {
                name: direction_name(dir),
                direction: Some(dir),
                spec: Spec::Alias(n),
            };
            match encode(pmu, &want, 64) {
                Ok(mut e) => {
                    e.bytes_per_count = Some(alias.scale.unwrap_or(1.0) * mult);
                    events.push(e);
                }
                Err(why) => return unavailable(kind, why),
            }
        }
    }
    if events.is_empty() {
        return unavailable(
            kind,
            "nest_*_imc PMUs have no *_128B_RD_DISP_* or *_READ_BYTES events",
        );
    }
    Source {
        backend: kind,
        available: true,
        reason: Some(reason.into()),
        pmus: pmus.iter().map(|p| ctx.source_pmu(p)).collect(),
        events,
    }
}

fn knl(ctx: &Ctx, kind: BackendKind) -> Source {
    if !is_knl(ctx) {
        return unavailable(
            kind,
            "not a Knights Landing/Mill (family 6 model 0x57/0x85) system",
        );
    }
    // intel/perfmon KNL uncore JSON (= libpfm4 knl_unc_imc/edc tables), 64 bytes per CAS/insert.
    let (prefix, rd, wr, src) = if kind == BackendKind::KnlImc {
        (
            "uncore_imc_",
            "event=0x03,umask=0x01",
            "event=0x03,umask=0x02",
            "intel/perfmon KnightsLanding_uncore.json UNC_M_CAS_COUNT.RD/WR",
        )
    } else {
        (
            "uncore_edc_eclk_",
            "event=0x01,umask=0x01",
            "event=0x02,umask=0x01",
            "intel/perfmon KnightsLanding_uncore.json UNC_E_RPQ_INSERTS/UNC_E_WPQ_INSERTS",
        )
    };
    let pmus = ctx.numbered(prefix);
    if pmus.is_empty() {
        return unavailable(kind, format!("Knights Landing without {prefix}N PMUs"));
    }
    let wants = [
        Want {
            name: "read",
            direction: Some(Direction::Read),
            spec: Spec::Terms {
                terms: rd,
                bytes_per_count: 64.0,
                source: src,
            },
        },
        Want {
            name: "write",
            direction: Some(Direction::Write),
            spec: Spec::Terms {
                terms: wr,
                bytes_per_count: 64.0,
                source: src,
            },
        },
    ];
    build(ctx, kind, &pmus, &wants, 48, None)
}

fn msr(ctx: &Ctx) -> Source {
    let kind = BackendKind::Msr;
    let Some(p) = ctx.pmu("msr") else {
        return unavailable(kind, "no msr PMU");
    };
    if !p.events.contains_key("tsc") {
        return unavailable(
            kind,
            format!("{}: no tsc event", p.path.join("events").display()),
        );
    }
    let want = Want {
        name: "tsc",
        direction: None,
        spec: Spec::Alias("tsc"),
    };
    let mut s = build(ctx, kind, &[p], &[want], 64, Some(STAND_IN.into()));
    for pm in &mut s.pmus {
        pm.cpus = ctx.topo.online.clone();
    }
    s
}

const STAND_IN: &str = "stand-in, not a memory-controller counter (readable in a VM)";

fn software(ctx: &Ctx) -> Source {
    let kind = BackendKind::Software;
    let Some(p) = ctx.pmu("software") else {
        return unavailable(kind, "no software PMU in sysfs");
    };
    // The software PMU has no format/ or events/; its configs are the perf ABI's
    // enum perf_sw_ids (include/uapi/linux/perf_event.h): PERF_COUNT_SW_PAGE_FAULTS = 2.
    Source {
        backend: kind,
        available: true,
        reason: Some(STAND_IN.into()),
        pmus: vec![SourcePmu {
            name: p.name.clone(),
            pmu_type: p.pmu_type,
            cpus: ctx.topo.online.clone(),
        }],
        events: vec![SourceEvent {
            name: "page-faults".into(),
            pmu: p.name.clone(),
            config: Some(2),
            config1: Some(0),
            bytes_per_count: None,
            address: None,
            width: None,
            direction: None,
            counter_bits: 64,
            origin: "PERF_COUNT_SW_PAGE_FAULTS".into(),
        }],
    }
}

pub(crate) fn catalogue(ctx: &Ctx) -> Result<Vec<Source>, DiscoveryError> {
    let mut out = Vec::new();
    for kind in BackendKind::ALL {
        if ctx.machine.hypervisor && kind.is_memory_controller() {
            out.push(unavailable(
                kind,
                format!(
                    "running under a hypervisor ({}): guests get no memory-controller counters",
                    ctx.machine
                        .hypervisor_source
                        .as_deref()
                        .unwrap_or("detected")
                ),
            ));
            continue;
        }
        out.push(match kind {
            BackendKind::IntelUncoreImc => intel_uncore_imc(ctx),
            BackendKind::IntelClientImc => intel_client_imc(ctx),
            BackendKind::IntelClientMchbar => intel_client_mchbar(ctx)?,
            BackendKind::AmdUmc => amd_umc(ctx),
            BackendKind::AmdDf => amd_df(ctx),
            BackendKind::PowerNestImc => power_nest(ctx),
            BackendKind::KnlEdc | BackendKind::KnlImc => knl(ctx, kind),
            BackendKind::Msr => msr(ctx),
            BackendKind::Software => software(ctx),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::format::parse_format;
    use crate::model::{EventAlias, Package};
    use std::collections::BTreeMap;

    fn pmu(name: &str, ty: u32, formats: &[(&str, &str)], events: &[(&str, &str)]) -> Pmu {
        Pmu {
            name: name.into(),
            pmu_type: ty,
            cpumask: Some(vec![0, 4]),
            formats: formats
                .iter()
                .map(|(n, t)| (n.to_string(), parse_format(n, t).unwrap()))
                .collect(),
            events: events
                .iter()
                .map(|(n, t)| {
                    (
                        n.to_string(),
                        EventAlias {
                            name: n.to_string(),
                            terms: t.to_string(),
                            scale: Some(6.103515625e-5),
                            unit: Some("MiB".into()),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
            path: format!("/r/sys/devices/{name}").into(),
        }
    }

    fn topo() -> Topology {
        Topology {
            online: (0..8).collect(),
            possible: (0..8).collect(),
            packages: vec![
                Package {
                    id: 0,
                    cpus: vec![0, 1, 2, 3],
                },
                Package {
                    id: 1,
                    cpus: vec![4, 5, 6, 7],
                },
            ],
            nodes: vec![],
        }
    }

    fn intel(model: u32) -> Machine {
        Machine {
            vendor: Some("GenuineIntel".into()),
            family: Some(6),
            model: Some(model),
            ..Machine::default()
        }
    }

    const SPR_FMT: &[(&str, &str)] = &[("event", "config:0-7"), ("umask", "config:8-15,32-55")];

    fn configs(s: &Source, name: &str) -> Vec<u64> {
        s.events
            .iter()
            .filter(|e| e.name == name)
            .map(|e| e.config.unwrap())
            .collect()
    }

    #[test]
    fn granite_rapids_counts_both_schedulers() {
        let t = topo();
        let m = intel(GRANITERAPIDS_X);
        // An older kernel: only the SCH0-only alias exists, which must not be used alone.
        let pmus = [pmu(
            "uncore_imc_0",
            40,
            SPR_FMT,
            &[("cas_count_read", "event=0x05,umask=0xcf")],
        )];
        let ctx = Ctx {
            root: Path::new("/r"),
            topo: &t,
            machine: &m,
            pmus: &pmus,
        };
        let s = intel_uncore_imc(&ctx);
        assert!(s.available);
        assert_eq!(configs(&s, "read"), [0xcf05, 0xcf06]);
        assert_eq!(configs(&s, "write"), [0xf005, 0xf006]);
        assert!(s.reason.unwrap().contains("SCH1"));

        // A newer kernel with per-scheduler aliases: those are used.
        let pmus = [pmu(
            "uncore_imc_0",
            40,
            SPR_FMT,
            &[
                ("cas_count_read_sch0", "event=0x05,umask=0xcf"),
                ("cas_count_read_sch1", "event=0x06,umask=0xcf"),
                ("cas_count_write_sch0", "event=0x05,umask=0xf0"),
                ("cas_count_write_sch1", "event=0x06,umask=0xf0"),
            ],
        )];
        let ctx = Ctx { pmus: &pmus, ..ctx };
        let s = intel_uncore_imc(&ctx);
        assert_eq!(configs(&s, "read"), [0xcf05, 0xcf06]);
        assert!(s.events[0].origin.contains("cas_count_read_sch0"));
    }

    #[test]
    fn icx_pre_fix_aliases_are_replaced() {
        let t = topo();
        let m = intel(ICELAKE_X);
        let pmus = [pmu(
            "uncore_imc_0",
            30,
            &[("event", "config:0-7"), ("umask", "config:8-15")],
            &[
                ("cas_count_read", "event=0x04,umask=0x03"),
                ("cas_count_write", "event=0x04,umask=0x0c"),
            ],
        )];
        let ctx = Ctx {
            root: Path::new("/r"),
            topo: &t,
            machine: &m,
            pmus: &pmus,
        };
        let s = intel_uncore_imc(&ctx);
        assert_eq!(configs(&s, "read"), [0x0f04]);
        assert_eq!(configs(&s, "write"), [0x3004]);
        assert!(s.reason.unwrap().contains("predate"));
    }

    #[test]
    fn zen5_df_channels() {
        let t = topo();
        let m = Machine {
            vendor: Some("AuthenticAMD".into()),
            family: Some(0x1a),
            model: Some(0x02),
            ..Machine::default()
        };
        let pmus = [pmu(
            "amd_df",
            11,
            &[
                ("event", "config:0-7,32-37"),
                ("umask", "config:8-15,24-27"),
            ],
            &[],
        )];
        let ctx = Ctx {
            root: Path::new("/r"),
            topo: &t,
            machine: &m,
            pmus: &pmus,
        };
        let s = amd_df(&ctx);
        assert!(s.available, "{:?}", s.reason);
        let rd = configs(&s, "read");
        assert_eq!(rd.len(), 12);
        // Channel 0: event 0x1f, umask 0xffe → bits 8-15 = 0xfe, bits 24-27 = 0xf.
        assert_eq!(rd[0], 0x1f | 0xfe << 8 | 0xf << 24);
        // Channel 4: event 0x11f → bit 32 set.
        assert_eq!(rd[4], 0x1f | 0xfe << 8 | 0xf << 24 | 1 << 32);
        assert_eq!(configs(&s, "write")[0], 0x1f | 0xff << 8 | 0xf << 24);
        // Designated CPUs: one per package from cpumask 0,4.
        assert_eq!(s.pmus[0].cpus, [0, 4]);
    }

    #[test]
    fn lockdown_mode() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(lockdown(d.path()).unwrap(), None);
        let p = d.path().join("sys/kernel/security");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("lockdown"), "[none] integrity confidentiality\n").unwrap();
        assert_eq!(lockdown(d.path()).unwrap(), None);
        std::fs::write(p.join("lockdown"), "none integrity [confidentiality]\n").unwrap();
        assert_eq!(
            lockdown(d.path()).unwrap().as_deref(),
            Some("confidentiality")
        );
    }
}
