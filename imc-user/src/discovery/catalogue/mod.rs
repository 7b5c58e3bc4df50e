//! The backend catalogue: for every `BackendKind`, whether this machine offers it, why not,
//! its PMUs with their designated CPUs, and the events it would count.
//!
//! Encodings come from the PMU's sysfs aliases through `encode_terms` whenever the kernel
//! provides them. Where a kernel exports no alias (older kernels, AMD, KNL), imc carries the
//! alias *text* (`event=0x04,umask=0x03`) with its public source and still encodes it through
//! the PMU's own `format/` files, so no config integer or PMU type is hard-coded.
mod amd;
mod arm;
mod cxl;
mod instances;
mod intel;
mod knl;
mod power;
mod queues;
mod stand_in;
mod want;

use super::sysfs::DiscoveryError;
use crate::model::{BackendKind, Source};
use amd::{amd_df, amd_umc};
pub use arm::pmu_limits;
use arm::{ampere_mcu, arm_cmn, arm_dmc620, hisi_ddrc, nvidia_scf};
use cxl::cxl_pmu;
use intel::{intel_client_imc, intel_client_mchbar, intel_uncore_imc};
use knl::knl;
use power::power_nest;
pub(crate) use queues::queues;
use stand_in::{msr, software};
pub(crate) use want::Ctx;
use want::unavailable;

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
        // Backends of standalone instances give one entry, then one per refused instance.
        out.extend(match kind {
            BackendKind::IntelUncoreImc => vec![intel_uncore_imc(ctx)],
            BackendKind::IntelClientImc => vec![intel_client_imc(ctx)],
            BackendKind::IntelClientMchbar => vec![intel_client_mchbar(ctx)?],
            BackendKind::AmdUmc => vec![amd_umc(ctx)],
            BackendKind::AmdDf => vec![amd_df(ctx)],
            BackendKind::PowerNestImc => vec![power_nest(ctx)],
            BackendKind::KnlEdc | BackendKind::KnlImc => vec![knl(ctx, kind)],
            BackendKind::NvidiaScf => nvidia_scf(ctx),
            BackendKind::ArmCmn => arm_cmn(ctx),
            BackendKind::ArmDmc620 => arm_dmc620(ctx),
            BackendKind::HisiDdrc => hisi_ddrc(ctx),
            BackendKind::AmpereMcu => ampere_mcu(ctx),
            BackendKind::CxlPmu => cxl_pmu(ctx),
            BackendKind::Msr => vec![msr(ctx)],
            BackendKind::Software => vec![software(ctx)],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::intel::{GRANITERAPIDS_X, ICELAKE_X, lockdown};
    use super::*;
    use crate::discovery::format::parse_format;
    use crate::discovery::machine::Machine;
    use crate::model::{EventAlias, Package, Pmu, Topology};
    use std::collections::BTreeMap;
    use std::path::Path;

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

    /// A catalogue context over `pmus`, rooted at /r (where no file exists).
    fn ctx<'a>(topo: &'a Topology, machine: &'a Machine, pmus: &'a [Pmu]) -> Ctx<'a> {
        Ctx {
            root: Path::new("/r"),
            topo,
            machine,
            pmus,
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
        let ctx = ctx(&t, &m, &pmus);
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
        let ctx = ctx(&t, &m, &pmus);
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
        let ctx = ctx(&t, &m, &pmus);
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
