//! The resctrl file system (Documentation/filesystems/resctrl.rst): where it is mounted under
//! `--root` (from mountinfo), whether it monitors memory bandwidth (MBM: the `mbm_total_bytes`
//! / `mbm_local_bytes` features of `info/L3_MON/mon_features`), how many monitor groups it
//! has room for (`info/L3_MON/num_rmids`), and what backs it: x86's RDT or PQoS, or on arm64
//! MPAM (Documentation/arch/arm64/mpam.rst). The files are the same on both: the MPAM driver's
//! resctrl glue (drivers/resctrl/mpam_resctrl.c) exports the memory-bandwidth usage monitors
//! (MBWU) of the memory-system components on or after the L3 as `mbm_total_bytes` in each
//! group's `mon_data/mon_L3_<cache-id>/`, the L3's cache-id naming where they count; MPAM cannot
//! tell local traffic from remote, so it has no `mbm_local_bytes`.
use std::path::{Path, PathBuf};

/// What implements resctrl's monitors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Intel RDT or AMD PQoS: a CPU's RMID counters per L3.
    Rdt,
    /// Arm MPAM: MBWU monitors in the memory system, free-running only where there are at
    /// least as many as monitor groups (else resctrl does not export them).
    Mpam,
}

impl Backing {
    /// resctrl on an Arm CPU (cpuinfo names its MIDR implementer) is MPAM's: arm64 has no other.
    fn of(root: &Path) -> Backing {
        let cpuinfo = std::fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_default();
        let m = super::machine::parse_cpuinfo(&cpuinfo);
        if m.arm_implementer.is_some() {
            Backing::Mpam
        } else {
            Backing::Rdt
        }
    }

    /// How the plan and `validate` name it.
    pub fn describe(self) -> &'static str {
        match self {
            Backing::Rdt => "RDT/PQoS",
            Backing::Mpam => {
                "Arm MPAM: the memory-bandwidth usage monitors on or after each L3 cache-id, \
                 total traffic only (MPAM does not tell local from remote)"
            }
        }
    }
}

/// What resctrl offers under a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resctrl {
    /// Mounted with MBM: the mount's directory (under root), the MBM files each monitor
    /// group's `mon_data/mon_L3_*/` holds, the monitor groups it has room for (the default
    /// group's among them; None where `num_rmids` cannot be read) and what backs it.
    Mbm {
        dir: PathBuf,
        features: Vec<String>,
        monitors: Option<u32>,
        backing: Backing,
    },
    /// Not usable, and why (one line).
    Absent(String),
}

/// Mount points of every resctrl file system in a mountinfo text (the fifth field; the type
/// follows ` - `).
pub fn resctrl_mounts(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            (right.split_whitespace().next()? == "resctrl")
                .then(|| left.split_whitespace().nth(4).map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// resctrl under `root`: its mount from `root/proc/self/mountinfo`, its MBM features.
pub fn find(root: &Path) -> Resctrl {
    const NOT_MOUNTED: &str = "resctrl is not mounted (mount -t resctrl resctrl /sys/fs/resctrl, on a CPU with RDT or PQoS)";
    let info = root.join("proc/self/mountinfo");
    // A tree without a mount table (a fixture) has nothing mounted.
    let text = match std::fs::read_to_string(&info) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Resctrl::Absent(NOT_MOUNTED.into());
        }
        Err(e) => return Resctrl::Absent(format!("{} cannot be read: {e}", info.display())),
    };
    let Some(mount) = resctrl_mounts(&text).into_iter().next() else {
        return Resctrl::Absent(NOT_MOUNTED.into());
    };
    let dir = root.join(mount.trim_start_matches('/'));
    let feats = dir.join("info/L3_MON/mon_features");
    let features: Vec<String> = std::fs::read_to_string(&feats)
        .unwrap_or_default()
        .split_whitespace()
        .filter(|f| f.starts_with("mbm_"))
        .map(str::to_owned)
        .collect();
    if features.is_empty() {
        return Resctrl::Absent(format!(
            "resctrl at {} has no memory-bandwidth monitoring (no mbm_* in {})",
            dir.display(),
            feats.display()
        ));
    }
    let monitors = std::fs::read_to_string(dir.join("info/L3_MON/num_rmids"))
        .ok()
        .and_then(|t| t.trim().parse().ok());
    Resctrl::Mbm {
        dir,
        features,
        monitors,
        backing: Backing::of(root),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "40 25 0:38 / /sys/fs/resctrl rw,relatime shared:20 - resctrl resctrl rw\n\
                        30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn mounts_are_found_by_type() {
        assert_eq!(resctrl_mounts(LINE), ["/sys/fs/resctrl"]);
        assert!(resctrl_mounts("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw").is_empty());
    }

    #[test]
    fn absent_without_mount_or_mbm_and_found_with_both() {
        let t = tempfile::tempdir().unwrap();
        // No mount table under the root: nothing is mounted there.
        let Resctrl::Absent(why) = find(t.path()) else {
            panic!("no mountinfo: no MBM")
        };
        assert!(why.starts_with("resctrl is not mounted"), "{why}");
        std::fs::create_dir_all(t.path().join("proc/self")).unwrap();
        std::fs::write(t.path().join("proc/self/mountinfo"), LINE).unwrap();
        let Resctrl::Absent(why) = find(t.path()) else {
            panic!("no mon_features: no MBM")
        };
        assert!(why.contains("mbm"), "{why}");
        let mon = t.path().join("sys/fs/resctrl/info/L3_MON");
        std::fs::create_dir_all(&mon).unwrap();
        std::fs::write(
            mon.join("mon_features"),
            "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
        )
        .unwrap();
        assert_eq!(
            find(t.path()),
            Resctrl::Mbm {
                dir: t.path().join("sys/fs/resctrl"),
                features: vec!["mbm_total_bytes".into(), "mbm_local_bytes".into()],
                monitors: None,
                backing: Backing::Rdt,
            }
        );
    }

    /// An arm64 machine's resctrl is MPAM's: `mbm_total_bytes` alone, and a few monitor groups
    /// (MPAM's PMG values of its PARTIDs).
    #[test]
    fn resctrl_on_an_arm_cpu_is_mpam_with_its_monitor_ids() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/self")).unwrap();
        std::fs::write(t.path().join("proc/self/mountinfo"), LINE).unwrap();
        std::fs::write(
            t.path().join("proc/cpuinfo"),
            "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n",
        )
        .unwrap();
        let mon = t.path().join("sys/fs/resctrl/info/L3_MON");
        std::fs::create_dir_all(&mon).unwrap();
        std::fs::write(mon.join("mon_features"), "llc_occupancy\nmbm_total_bytes\n").unwrap();
        std::fs::write(mon.join("num_rmids"), "4\n").unwrap();
        assert_eq!(
            find(t.path()),
            Resctrl::Mbm {
                dir: t.path().join("sys/fs/resctrl"),
                features: vec!["mbm_total_bytes".into()],
                monitors: Some(4),
                backing: Backing::Mpam,
            }
        );
    }
}
