//! Intel's memory controllers: the server uncore IMC (family-6 models by number), the client
//! IMC PMU, and the client MCHBAR registers read through /dev/mem.
use super::want::{Ctx, Want, build, unavailable};
use crate::discovery::mchbar;
use crate::discovery::sysfs::{DiscoveryError, read_optional};
use crate::model::{BackendKind, Direction, Pmu, Source, SourceEvent};
use std::path::Path;

// Intel family-6 model numbers (arch/x86/include/asm/intel-family.h).
const HASWELL_X: u32 = 0x3f;
const BROADWELL_X: u32 = 0x4f;
const SKYLAKE_X: u32 = 0x55; // also Cascade Lake and Cooper Lake
pub(super) const ICELAKE_X: u32 = 0x6a;
const ICELAKE_D: u32 = 0x6c;
const SAPPHIRERAPIDS_X: u32 = 0x8f;
const EMERALDRAPIDS_X: u32 = 0xcf;
pub(super) const GRANITERAPIDS_X: u32 = 0xad;
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

/// Which queue layout an Intel server part has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntelQueues {
    /// SKX/CLX: one read and one write queue per channel.
    Skx,
    /// ICX: per pseudo-channel.
    Icx,
    /// SPR/EMR: per pseudo-channel (WPQ inserts at 0x22).
    Spr,
    /// GNR/SRF: per sub-channel (scheduler) and pseudo-channel.
    Gnr,
}

/// The queue layout of an Intel server part (discovery/catalogue/queues.rs reads it), by model.
pub(super) fn server_model_family(model: u32) -> Option<IntelQueues> {
    match model {
        SKYLAKE_X => Some(IntelQueues::Skx),
        ICELAKE_X | ICELAKE_D => Some(IntelQueues::Icx),
        SAPPHIRERAPIDS_X | EMERALDRAPIDS_X => Some(IntelQueues::Spr),
        m if is_gnr_family(Some(m)) => Some(IntelQueues::Gnr),
        _ => None,
    }
}

pub(super) fn is_knl(ctx: &Ctx) -> bool {
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

pub(super) fn intel_uncore_imc(ctx: &Ctx) -> Source {
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
        return gnr_schedulers(ctx, &pmus);
    }
    if has("cas_count_read") && has("cas_count_write") {
        return cas_aliases(ctx, &pmus, model);
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
    build(
        ctx,
        kind,
        &pmus,
        &Want::read_write(rd, wr, CAS_64, src),
        48,
        None,
    )
}

/// Granite Rapids and its kin: both command schedulers of every channel, by their own aliases
/// where the kernel has them, else by the encodings of gnr_uncore_imc_events.
fn gnr_schedulers(ctx: &Ctx, pmus: &[&Pmu]) -> Source {
    const SRC: &str = "uncore_snbep.c gnr_uncore_imc_events";
    let has = |a: &str| pmus[0].events.contains_key(a);
    let per_sched = has("cas_count_read_sch0") && has("cas_count_read_sch1");
    let wants: Vec<Want> = if per_sched {
        vec![
            Want::alias(Direction::Read, "cas_count_read_sch0"),
            Want::alias(Direction::Read, "cas_count_read_sch1"),
            Want::alias(Direction::Write, "cas_count_write_sch0"),
            Want::alias(Direction::Write, "cas_count_write_sch1"),
        ]
    } else {
        vec![
            Want::terms(Direction::Read, "event=0x05,umask=0xcf", CAS_64, SRC),
            Want::terms(Direction::Read, "event=0x06,umask=0xcf", CAS_64, SRC),
            Want::terms(Direction::Write, "event=0x05,umask=0xf0", CAS_64, SRC),
            Want::terms(Direction::Write, "event=0x06,umask=0xf0", CAS_64, SRC),
        ]
    };
    let reason = (!per_sched).then(|| {
        "two command schedulers per channel: counting SCH0 and SCH1 (a plain cas_count_read alias counts SCH0 only)".to_string()
    });
    let mut s = build(ctx, BackendKind::IntelUncoreImc, pmus, &wants, 48, reason);
    // Each PMU is one channel; its two schedulers are the channel's sub-channels (wants
    // alternate SCH0, SCH1 per direction).
    for (i, e) in s.events.iter_mut().enumerate() {
        e.sub_channel = Some((i % 2) as u32);
    }
    s
}

/// The kernel's cas_count_read/write aliases, except where they are Ice Lake-SP's pre-fix ones.
fn cas_aliases(ctx: &Ctx, pmus: &[&Pmu], model: Option<u32>) -> Source {
    let mut wants = vec![
        Want::alias(Direction::Read, "cas_count_read"),
        Want::alias(Direction::Write, "cas_count_write"),
    ];
    let mut reason = None;
    // Kernels before the ICX fix exported the Haswell encodings on Ice Lake-SP, which count
    // only part of the CAS commands; use the corrected ones and say so.
    if matches!(model, Some(ICELAKE_X | ICELAKE_D))
        && pmus[0]
            .events
            .get("cas_count_read")
            .map(|a| a.terms.as_str())
            == Some("event=0x04,umask=0x03")
        && let Some((rd, wr, src)) = server_raw(ICELAKE_X)
    {
        wants = Want::read_write(rd, wr, CAS_64, src).into();
        reason = Some(
            "this kernel's ICX cas_count aliases predate the encoding fix; using umask 0x0f/0x30"
                .into(),
        );
    }
    build(ctx, BackendKind::IntelUncoreImc, pmus, &wants, 48, reason)
}

pub(super) fn intel_client_imc(ctx: &Ctx) -> Source {
    let kind = BackendKind::IntelClientImc;
    // Skylake … Rocket Lake: one `uncore_imc` (snb_uncore_imc, num_boxes 1, no suffix).
    if let Some(p) = ctx.pmu("uncore_imc")
        && p.events.contains_key("data_reads")
    {
        let wants = [
            Want::alias(Direction::Read, "data_reads"),
            Want::alias(Direction::Write, "data_writes"),
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
        Want::alias(Direction::Read, "data_read"),
        Want::alias(Direction::Write, "data_write"),
        Want::alias(Direction::Total, "data_total"),
    ];
    build(ctx, kind, &pmus, &wants, 64, None)
}

pub(super) fn intel_client_mchbar(ctx: &Ctx) -> Result<Source, DiscoveryError> {
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
    mchbar_counters(ctx, &dev, gen_name, layout)
}

/// The MCHBAR counters of host bridge `dev`, a `gen_name` controller with `layout`, where the
/// kernel lets /dev/mem be read and the bridge's config space gives the MCHBAR base.
fn mchbar_counters(
    ctx: &Ctx,
    dev: &Path,
    gen_name: &str,
    layout: mchbar::Layout,
) -> Result<Source, DiscoveryError> {
    let kind = BackendKind::IntelClientMchbar;
    if let Some(mode) = lockdown(ctx.root)? {
        return Ok(unavailable(
            kind,
            format!("kernel lockdown ({mode}) forbids /dev/mem access"),
        ));
    }
    let cfg_path = dev.join("config");
    let config = match crate::discovery::sysfs::read_small(&cfg_path) {
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
    let events = mchbar::registers(base, layout)
        .into_iter()
        .map(|c| SourceEvent {
            name: c.direction.name().to_string(),
            pmu: c.pmu,
            config: None,
            config1: None,
            config2: None,
            bytes_per_count: Some(64.0),
            address: Some(c.address),
            width: Some(c.width),
            direction: Some(c.direction),
            sub_channel: None,
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
pub(super) fn lockdown(root: &Path) -> Result<Option<String>, DiscoveryError> {
    let Some(text) = read_optional(&root.join("sys/kernel/security/lockdown"))? else {
        return Ok(None);
    };
    let active = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    Ok(active.filter(|m| *m != "none").map(str::to_string))
}
