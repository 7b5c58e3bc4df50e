//! Facts about the machine from `proc/cpuinfo` and `sys/hypervisor`: vendor, family/model
//! (x86), the POWER generation, and whether we run under a hypervisor.
use super::sysfs::{DiscoveryError, read_head_optional, read_optional};
use std::path::Path;

pub use crate::model::Machine;

/// Parses cpuinfo text. Only the first processor block matters for vendor/model; the
/// `hypervisor` flag is looked for in every `flags` line.
pub fn parse_cpuinfo(text: &str) -> Machine {
    let mut m = Machine::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "vendor_id" if m.vendor.is_none() => m.vendor = Some(value.to_string()),
            "cpu family" if m.family.is_none() => m.family = value.parse().ok(),
            // POWER's trailer has `model : 9006-22P`, which does not parse and is ignored.
            "model" if m.model.is_none() => m.model = value.parse().ok(),
            "cpu" if m.power.is_none() => {
                let first = value.split([',', ' ']).next().unwrap_or("");
                if first.starts_with("POWER") {
                    m.power = Some(first.to_string());
                }
            }
            "platform" if m.platform.is_none() => m.platform = Some(value.to_string()),
            "CPU implementer" if m.arm_implementer.is_none() => m.arm_implementer = hex(value),
            "CPU part" if m.arm_part.is_none() => m.arm_part = hex(value),
            "flags" if value.split_whitespace().any(|f| f == "hypervisor") => {
                m.hypervisor = true;
                m.hypervisor_source = Some("the 'hypervisor' CPU flag in proc/cpuinfo".into());
            }
            _ => {}
        }
    }
    m
}

/// A `0x`-prefixed hexadecimal cpuinfo value (`CPU part : 0xd4f`).
fn hex(value: &str) -> Option<u32> {
    u32::from_str_radix(value.strip_prefix("0x")?, 16).ok()
}

/// MIDR_EL1.Implementer codes of server-class Arm vendors (the kernel's
/// arch/arm64/include/asm/cputype.h, ARM_CPU_IMP_*).
const ARM_IMPLEMENTERS: [(u32, &str); 9] = [
    (0x41, "Arm"),
    (0x42, "Broadcom"),
    (0x43, "Cavium"),
    (0x46, "Fujitsu"),
    (0x48, "HiSilicon"),
    (0x4e, "NVIDIA"),
    (0x50, "Applied Micro"),
    (0x51, "Qualcomm"),
    (0xc0, "Ampere"),
];

/// (implementer, part, name) of the server cores imc names (cputype.h: ARM_CPU_PART_CORTEX_A72
/// 0xd08, NEOVERSE_N1 0xd0c, _V1 0xd40, _N2 0xd49, _V2 0xd4f, _V3 0xd84, _N3 0xd8e;
/// CAVIUM_CPU_PART_THUNDERX2 0x0af; FUJITSU_CPU_PART_A64FX 0x001; HISI_CPU_PART_TSV110 0xd01;
/// AMPERE_CPU_PART_AMPERE1 0xac3, AMPERE1A 0xac4). Grace reports Arm's Neoverse V2 and Altra
/// Arm's Neoverse N1: their vendors license the core unchanged.
const ARM_CORES: [(u32, u32, &str); 12] = [
    (0x41, 0xd08, "Cortex-A72"),
    (0x41, 0xd0c, "Neoverse N1"),
    (0x41, 0xd40, "Neoverse V1"),
    (0x41, 0xd49, "Neoverse N2"),
    (0x41, 0xd4f, "Neoverse V2"),
    (0x41, 0xd84, "Neoverse V3"),
    (0x41, 0xd8e, "Neoverse N3"),
    (0x43, 0x0af, "ThunderX2"),
    (0x46, 0x001, "A64FX"),
    (0x48, 0xd01, "TSV110 (Kunpeng 920)"),
    (0xc0, 0xac3, "AmpereOne"),
    (0xc0, 0xac4, "AmpereOne A"),
];

/// The Arm core's name from its MIDR implementer and part, where imc knows it.
pub fn arm_core_name(m: &Machine) -> Option<&'static str> {
    let (imp, part) = (m.arm_implementer?, m.arm_part?);
    ARM_CORES
        .iter()
        .find(|(i, p, _)| *i == imp && *p == part)
        .map(|(_, _, name)| *name)
}

/// The vendor that an Arm MIDR implementer code stands for, where imc knows it.
pub fn arm_implementer_name(implementer: u32) -> Option<&'static str> {
    ARM_IMPLEMENTERS
        .iter()
        .find(|(i, _)| *i == implementer)
        .map(|(_, name)| *name)
}

/// The MIDR fields as cpuinfo gives them, for messages: `implementer 0x41, part 0xd4f`.
pub fn arm_midr_text(m: &Machine) -> String {
    format!(
        "implementer {}, part {}",
        m.arm_implementer
            .map_or("unknown".into(), |i| format!("{i:#04x}")),
        m.arm_part.map_or("unknown".into(), |p| format!("{p:#05x}"))
    )
}

/// An Arm machine's CPU as a person reads it: vendor and core where known, and the MIDR fields
/// they were read from (`Arm Neoverse V2 [implementer 0x41, part 0xd4f]`); None off Arm.
pub fn arm_cpu_text(m: &Machine) -> Option<String> {
    let implementer = m.arm_implementer?;
    let vendor = arm_implementer_name(implementer).unwrap_or("unknown vendor's");
    let core = arm_core_name(m).unwrap_or("core unknown to imc");
    Some(format!("{vendor} {core} [{}]", arm_midr_text(m)))
}

pub fn read_machine(root: &Path) -> Result<Machine, DiscoveryError> {
    // A tree without proc/cpuinfo still lists PMUs; model-specific encodings are then unknown.
    let mut m = read_head_optional(&root.join("proc/cpuinfo"))?
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default();
    if !m.hypervisor
        && let Some(t) = read_optional(&root.join("sys/hypervisor/type"))?
        && !t.is_empty()
    {
        m.hypervisor = true;
        m.hypervisor_source = Some(format!("sys/hypervisor/type = {t}"));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_fields() {
        let m = parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nflags\t\t: fpu tsc\n",
        );
        assert_eq!(m.intel_model(), Some(85));
        assert!(!m.hypervisor);
    }

    #[test]
    fn hypervisor_flag() {
        let m = parse_cpuinfo("vendor_id : GenuineIntel\nflags : fpu hypervisor lahf_lm\n");
        assert!(m.hypervisor);
        // A flag that merely contains the word is not the flag.
        let m = parse_cpuinfo("flags : fpu nohypervisorx\n");
        assert!(!m.hypervisor);
    }

    #[test]
    fn power9() {
        let m = parse_cpuinfo(
            "processor\t: 0\ncpu\t\t: POWER9, altivec supported\n\nplatform\t: PowerNV\nmodel\t\t: 9006-22P\n",
        );
        assert_eq!(m.power.as_deref(), Some("POWER9"));
        assert_eq!(m.model, None);
        assert_eq!(m.platform.as_deref(), Some("PowerNV"));
    }

    #[test]
    fn arm_midr_fields() {
        let m = parse_cpuinfo(
            "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n\
             CPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 1\n",
        );
        assert_eq!((m.arm_implementer, m.arm_part), (Some(0x41), Some(0xd4f)));
        assert_eq!(m.vendor, None);
        // Not hexadecimal as the kernel writes it: unknown, not a guess.
        let m = parse_cpuinfo("CPU implementer : 65\nCPU part : d4f\n");
        assert_eq!((m.arm_implementer, m.arm_part), (None, None));
    }

    #[test]
    fn arm_names() {
        let m = |imp, part| Machine {
            arm_implementer: Some(imp),
            arm_part: part,
            ..Machine::default()
        };
        assert_eq!(
            arm_cpu_text(&m(0x41, Some(0xd4f))).as_deref(),
            Some("Arm Neoverse V2 [implementer 0x41, part 0xd4f]")
        );
        assert_eq!(
            arm_cpu_text(&m(0x48, Some(0xd01))).as_deref(),
            Some("HiSilicon TSV110 (Kunpeng 920) [implementer 0x48, part 0xd01]")
        );
        // The same part number under another implementer is another core.
        assert_eq!(arm_core_name(&m(0x48, Some(0xd4f))), None);
        assert_eq!(
            arm_cpu_text(&m(0x41, Some(0xd99))).as_deref(),
            Some("Arm core unknown to imc [implementer 0x41, part 0xd99]")
        );
        assert_eq!(
            arm_cpu_text(&m(0x99, None)).as_deref(),
            Some("unknown vendor's core unknown to imc [implementer 0x99, part unknown]")
        );
        assert_eq!(arm_cpu_text(&Machine::default()), None);
    }

    #[test]
    fn amd() {
        let m = parse_cpuinfo("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 17\n");
        assert!(m.is_amd());
        assert_eq!((m.family, m.model), (Some(25), Some(17)));
        assert_eq!(m.intel_model(), None);
    }
}
