//! AMD's memory controllers: the UMC PMUs (Zen 4 and later) and the data-fabric PMU (family
//! 17h and later: Zen 2, 3 and 5 DRAM events).
use super::want::{Ctx, Want, build, unavailable};
use crate::model::{BackendKind, Direction, Source};

pub(super) fn amd_umc(ctx: &Ctx) -> Source {
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
    let wants = Want::read_write(
        "event=0x0a,rdwrmask=0x1",
        "event=0x0a,rdwrmask=0x2",
        64.0,
        SRC,
    );
    // amd/uncore.c: COUNTER_SHIFT 16, i.e. 48-bit counters.
    build(ctx, kind, &pmus, &wants, 48, None)
}

pub(super) fn amd_df(ctx: &Ctx) -> Source {
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
                let d = if i % 2 == 0 {
                    Direction::Read
                } else {
                    Direction::Write
                };
                wants.push(Want::terms(
                    d,
                    t,
                    64.0,
                    "perf amdzen5/data-fabric.json local_or_remote_socket_*_data_beats_dram_N",
                ));
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
                wants.push(Want::terms(
                    Direction::Total,
                    t,
                    64.0,
                    "perf amdzen2/amdzen3 data-fabric.json dram_channel_data_controller_N",
                ));
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
