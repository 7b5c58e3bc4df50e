//! Which libpfm4 PMU (CPU model table) encodes libpfm4 event strings: the one of the CPU that
//! `--root` describes, not necessarily this host's.
//!
//! libpfm4 detects the host CPU when it initialises and reads `LIBPFM_FORCE_PMU` only then
//! (see [`super::pfm`]). So the choice is made once, at start-up, from `DIR/proc/cpuinfo`: when
//! it names another CPU than the host's and imc knows that CPU's libpfm4 PMU, `LIBPFM_FORCE_PMU`
//! is set for this process before libpfm4 is loaded. A user's own `LIBPFM_FORCE_PMU` wins.
use crate::discovery::Machine;
use std::path::Path;

pub use crate::settings::LIBPFM_FORCE_PMU_ENV as FORCE_ENV;

/// The PMU [`apply`] told libpfm4 to use (set once, at start-up).
static APPLIED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The libpfm4 core PMU for a CPU, with the CPU's name, from the models libpfm4 4.13 knows
/// (its pmu_detect tables: lib/pfmlib_intel_*.c, lib/pfmlib_amd64*.c, lib/pfmlib_powerpc*.c).
pub fn libpfm_pmu_for(m: &Machine) -> Option<(&'static str, &'static str)> {
    if let Some(p) = m.power.as_deref() {
        return match p {
            "POWER8" => Some(("power8", "POWER8")),
            "POWER9" => Some(("power9", "POWER9")),
            "POWER10" => Some(("power10", "POWER10")),
            _ => None,
        };
    }
    if let Some(model) = m.intel_model() {
        return Some(match model {
            0x57 => ("knl", "Knights Landing"),
            0x85 => ("knm", "Knights Mill"),
            0x2a => ("snb", "Sandy Bridge"),
            0x2d => ("snb_ep", "Sandy Bridge-EP"),
            0x3a => ("ivb", "Ivy Bridge"),
            0x3e => ("ivb_ep", "Ivy Bridge-EP"),
            0x3c | 0x45 | 0x46 => ("hsw", "Haswell"),
            0x3f => ("hsw_ep", "Haswell-EP"),
            0x3d | 0x47 => ("bdw", "Broadwell"),
            0x4f | 0x56 => ("bdw_ep", "Broadwell-EP"),
            0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => ("skl", "Skylake client"),
            0x55 => ("skx", "Skylake-SP"),
            0x7d | 0x7e => ("icl", "Ice Lake client"),
            0x6a | 0x6c => ("icx", "Ice Lake-SP"),
            0x8f => ("spr", "Sapphire Rapids"),
            _ => return None,
        });
    }
    if m.is_amd() {
        let model = m.model?;
        return match m.family? {
            0x17 if model < 0x30 => Some(("amd64_fam17h_zen1", "Zen")),
            0x17 => Some(("amd64_fam17h_zen2", "Zen 2")),
            0x19 if matches!(model, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => {
                Some(("amd64_fam19h_zen4", "Zen 4"))
            }
            0x19 => Some(("amd64_fam19h_zen3", "Zen 3")),
            _ => None,
        };
    }
    None
}

/// The CPU as one phrase: `GenuineIntel family 0x6 model 0x57`, `POWER9`.
pub fn describe(m: &Machine) -> String {
    match (&m.vendor, m.family, m.model, &m.power) {
        (_, _, _, Some(p)) => p.clone(),
        (Some(v), Some(f), Some(md), _) => format!("{v} family {f:#x} model {md:#x}"),
        (Some(v), _, _, _) => v.clone(),
        _ => "an unknown CPU".into(),
    }
}

fn same_cpu(a: &Machine, b: &Machine) -> bool {
    (&a.vendor, a.family, a.model, &a.power) == (&b.vendor, b.family, b.model, &b.power)
}

/// What libpfm4 will encode for, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PfmModel {
    /// `LIBPFM_FORCE_PMU` to set before libpfm4 initialises (None: leave the environment).
    pub force: Option<String>,
    /// The libpfm4 PMU chosen, when known before libpfm4 runs (None: libpfm4's own detection).
    pub pmu: Option<String>,
    /// One line: which PMU and why.
    pub why: String,
}

/// Chooses libpfm4's PMU from the CPU under `--root` (`root_cpu`, None when the tree has no
/// proc/cpuinfo), this host's CPU, and the user's own `LIBPFM_FORCE_PMU`.
pub fn choose(root_cpu: Option<&Machine>, host: &Machine, user_force: Option<&str>) -> PfmModel {
    if let Some(f) = user_force.filter(|f| !f.is_empty()) {
        return PfmModel {
            force: None,
            pmu: Some(f.to_string()),
            why: format!("libpfm4 PMU {f}: {FORCE_ENV}={f} is set in the environment"),
        };
    }
    let host_detect = |why: String| PfmModel {
        force: None,
        pmu: None,
        why: format!("libpfm4 PMU from libpfm4's own detection of this host: {why}"),
    };
    let Some(root) = root_cpu.filter(|m| m.vendor.is_some() || m.power.is_some()) else {
        return host_detect("--root has no proc/cpuinfo naming a CPU".into());
    };
    if same_cpu(root, host) {
        return host_detect(format!(
            "--root names the same CPU as this host ({})",
            describe(root)
        ));
    }
    match libpfm_pmu_for(root) {
        Some((pmu, name)) => PfmModel {
            force: Some(pmu.to_string()),
            pmu: Some(pmu.to_string()),
            why: format!(
                "libpfm4 PMU {pmu}: --root proc/cpuinfo names {} ({name}), not this host's {}; \
                 {FORCE_ENV}={pmu} set for imc",
                describe(root),
                describe(host)
            ),
        },
        None => host_detect(format!(
            "--root names {}, which imc maps to no libpfm4 PMU (set {FORCE_ENV} to choose one)",
            describe(root)
        )),
    }
}

/// Reads the CPU under `root` and this host's, and decides (see [`choose`]). Pure apart from
/// reading the two cpuinfo files and the user's `LIBPFM_FORCE_PMU` (settings); [`apply`] acts on
/// the result.
pub fn decide(root: &Path) -> PfmModel {
    let user = crate::settings::get().libpfm_force_pmu.clone();
    let root_cpu = crate::discovery::machine::read_machine(root).ok();
    let host = crate::discovery::machine::read_machine(Path::new("/")).unwrap_or_default();
    choose(root_cpu.as_ref(), &host, user.as_deref())
}

/// Sets `LIBPFM_FORCE_PMU` when the choice says so.
///
/// # Safety
/// Changes the process environment: call it only while no other thread runs (at the start of
/// `main`), before libpfm4 is loaded.
pub unsafe fn apply(model: &PfmModel) {
    if let Some(f) = &model.force {
        // SAFETY: the caller guarantees no other thread reads or writes the environment now.
        unsafe { std::env::set_var(FORCE_ENV, f) };
        let _ = APPLIED.set(f.clone());
    }
}

/// The PMU libpfm4 is forced to in this process: the user's `LIBPFM_FORCE_PMU`, else the one
/// [`apply`] set (None: libpfm4 detects the host).
pub fn forced() -> Option<String> {
    crate::settings::get()
        .libpfm_force_pmu
        .clone()
        .or_else(|| APPLIED.get().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::machine::parse_cpuinfo;

    fn cpu(text: &str) -> Machine {
        parse_cpuinfo(text)
    }

    #[test]
    fn knl_tree_on_another_host_forces_knl() {
        let knl = cpu("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 87\n");
        let host = cpu("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 17\n");
        let m = choose(Some(&knl), &host, None);
        assert_eq!(m.force.as_deref(), Some("knl"));
        assert!(m.why.contains("model 0x57 (Knights Landing)"), "{}", m.why);
        assert!(
            m.why.contains("AuthenticAMD family 0x19 model 0x11"),
            "{}",
            m.why
        );
        // The user's own choice wins and nothing is set.
        let m = choose(Some(&knl), &host, Some("skx"));
        assert_eq!((m.force, m.pmu.as_deref()), (None, Some("skx")));
        // The same CPU as the host's: libpfm4's own detection.
        let m = choose(Some(&host), &host, None);
        assert_eq!(m.force, None);
        assert!(m.why.contains("same CPU"), "{}", m.why);
        // No cpuinfo under the root.
        let m = choose(Some(&Machine::default()), &host, None);
        assert!(m.force.is_none() && m.why.contains("no proc/cpuinfo"));
    }

    #[test]
    fn models_map_to_libpfm_pmus() {
        let intel = |model: u32| Machine {
            vendor: Some("GenuineIntel".into()),
            family: Some(6),
            model: Some(model),
            ..Machine::default()
        };
        assert_eq!(libpfm_pmu_for(&intel(0x55)).unwrap().0, "skx");
        assert_eq!(libpfm_pmu_for(&intel(0x7e)).unwrap().0, "icl");
        assert_eq!(libpfm_pmu_for(&intel(0x85)).unwrap().0, "knm");
        assert_eq!(libpfm_pmu_for(&intel(0x01)), None);
        let amd = |f: u32, model: u32| Machine {
            vendor: Some("AuthenticAMD".into()),
            family: Some(f),
            model: Some(model),
            ..Machine::default()
        };
        assert_eq!(
            libpfm_pmu_for(&amd(0x19, 0x01)).unwrap().0,
            "amd64_fam19h_zen3"
        );
        assert_eq!(
            libpfm_pmu_for(&amd(0x19, 0x11)).unwrap().0,
            "amd64_fam19h_zen4"
        );
        assert_eq!(
            libpfm_pmu_for(&amd(0x17, 0x31)).unwrap().0,
            "amd64_fam17h_zen2"
        );
        let p9 = cpu("cpu : POWER9, altivec supported\nplatform : PowerNV\n");
        assert_eq!(libpfm_pmu_for(&p9).unwrap().0, "power9");
        // An unknown model keeps host detection and says how to choose.
        let m = choose(Some(&intel(0x01)), &amd(0x19, 0x11), None);
        assert!(
            m.force.is_none() && m.why.contains("LIBPFM_FORCE_PMU"),
            "{}",
            m.why
        );
    }
}
