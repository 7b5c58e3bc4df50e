//! The resctrl file system (Documentation/arch/x86/resctrl.rst): where it is mounted under
//! `--root` (from mountinfo) and whether it monitors memory bandwidth (MBM: the
//! `mbm_total_bytes` / `mbm_local_bytes` features of `info/L3_MON/mon_features`).
use std::path::{Path, PathBuf};

/// What resctrl offers under a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resctrl {
    /// Mounted with MBM: the mount's directory (under root) and the MBM files each monitor
    /// group's `mon_data/mon_L3_*/` holds.
    Mbm { dir: PathBuf, features: Vec<String> },
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
    Resctrl::Mbm { dir, features }
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
            }
        );
    }
}
