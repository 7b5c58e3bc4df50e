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
    fn amd() {
        let m = parse_cpuinfo("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 17\n");
        assert!(m.is_amd());
        assert_eq!((m.family, m.model), (Some(25), Some(17)));
        assert_eq!(m.intel_model(), None);
    }
}
