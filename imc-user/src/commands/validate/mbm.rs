//! resctrl monitor groups for `imc validate`: one per workload (`mon_groups/imc-validate-PID-NAME`,
//! PID being imc's), the workload's pid written to its `tasks` (its children follow it), MBM's
//! byte counters read at the start and the end of the run. Groups are removed when dropped (an
//! ended run, an error, SIGINT or SIGTERM); groups of an imc that was killed (its pid gone) are
//! removed by the next run.
use std::path::{Path, PathBuf};

pub const PREFIX: &str = "imc-validate-";

/// One workload's monitor group.
pub struct Group {
    pub dir: PathBuf,
    start: Option<u64>,
}

/// Every monitor group of a run.
pub struct Groups {
    pub groups: Vec<Group>,
    features: Vec<String>,
}

/// The MBM feature whose bytes are compared: total (local + remote) where the CPU has it.
fn feature(features: &[String]) -> Option<&str> {
    ["mbm_total_bytes", "mbm_local_bytes"]
        .into_iter()
        .find(|f| features.iter().any(|x| x == f))
}

/// A group's MBM bytes now: the feature's file summed over every L3 domain (`mon_data/
/// mon_L3_XX/`); None when a domain says `Unavailable` or `Error`, or nothing can be read.
pub fn read_bytes(group: &Path, feature: &str) -> Option<u64> {
    let mut sum = 0u64;
    let mut any = false;
    for e in std::fs::read_dir(group.join("mon_data")).ok()?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("mon_L3_") {
            continue;
        }
        let text = std::fs::read_to_string(e.path().join(feature)).ok()?;
        sum = sum.saturating_add(text.trim().parse::<u64>().ok()?);
        any = true;
    }
    any.then_some(sum)
}

/// Removes the monitor groups of imc runs whose process is gone; returns how many.
pub fn remove_stale(resctrl: &Path, alive: impl Fn(u32) -> bool) -> usize {
    let Ok(dir) = std::fs::read_dir(resctrl.join("mon_groups")) else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !alive(p)) && remove(&e.path()) {
            n += 1;
        }
    }
    n
}

/// rmdir of a monitor group (the kernel removes its files with it); in a plain directory (a
/// test tree) its files are removed first.
fn remove(dir: &Path) -> bool {
    if std::fs::remove_dir(dir).is_ok() {
        return true;
    }
    // A file written while the tree is removed: try again.
    (0..3).any(|_| std::fs::remove_dir_all(dir).is_ok() || !dir.exists())
}

impl Groups {
    /// A group per workload `(name, pid)`, under `resctrl/mon_groups`. An error names the
    /// group and the cause (read-only resctrl, no RMIDs left).
    pub fn create(
        resctrl: &Path,
        features: &[String],
        owner: u32,
        workloads: &[(&str, u32)],
    ) -> Result<Groups, String> {
        let mut g = Groups {
            groups: Vec::new(),
            features: features.to_vec(),
        };
        for (name, pid) in workloads {
            let dir = resctrl
                .join("mon_groups")
                .join(format!("{PREFIX}{owner}-{name}"));
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create the monitor group {}: {e}", dir.display()))?;
            g.groups.push(Group { dir, start: None });
            let last = g.groups.last().expect("just pushed");
            std::fs::write(last.dir.join("tasks"), format!("{pid}\n"))
                .map_err(|e| format!("cannot move pid {pid} into {}: {e}", last.dir.display()))?;
        }
        Ok(g)
    }

    /// Reads every group's bytes as the start of the run.
    pub fn start(&mut self) {
        let Some(f) = feature(&self.features).map(str::to_owned) else {
            return;
        };
        for g in &mut self.groups {
            g.start = read_bytes(&g.dir, &f);
        }
    }

    /// Each group's bytes since `start` (None where either read failed).
    pub fn bytes(&self) -> Vec<Option<u64>> {
        let f = feature(&self.features);
        self.groups
            .iter()
            .map(|g| {
                let end = read_bytes(&g.dir, f?)?;
                Some(end.saturating_sub(g.start?))
            })
            .collect()
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for g in &self.groups {
            remove(&g.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("mon_groups")).unwrap();
        t
    }

    /// What the kernel does on mkdir: the group's mon_data files, here written by the test.
    fn set(group: &Path, domain: &str, bytes: &str) {
        let d = group.join("mon_data").join(domain);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("mbm_total_bytes"), bytes).unwrap();
    }

    #[test]
    fn bytes_are_summed_over_domains_since_the_start_and_groups_go_on_drop() {
        let t = tree();
        let feats = vec!["mbm_total_bytes".to_string()];
        let mut g = Groups::create(t.path(), &feats, 77, &[("reader", 1234)]).unwrap();
        let dir = t.path().join("mon_groups/imc-validate-77-reader");
        assert_eq!(
            std::fs::read_to_string(dir.join("tasks")).unwrap(),
            "1234\n"
        );
        set(&dir, "mon_L3_00", "1000\n");
        set(&dir, "mon_L3_01", "500\n");
        g.start();
        set(&dir, "mon_L3_00", "5000\n");
        set(&dir, "mon_L3_01", "1500\n");
        assert_eq!(g.bytes(), [Some(5000)]);
        set(&dir, "mon_L3_01", "Unavailable\n");
        assert_eq!(g.bytes(), [None]);
        drop(g);
        assert!(!dir.exists());
    }

    #[test]
    fn stale_groups_of_dead_runs_are_removed_and_live_ones_kept() {
        let t = tree();
        for name in ["imc-validate-10-reader", "imc-validate-20-reader", "other"] {
            std::fs::create_dir(t.path().join("mon_groups").join(name)).unwrap();
        }
        assert_eq!(remove_stale(t.path(), |pid| pid == 20), 1);
        assert!(!t.path().join("mon_groups/imc-validate-10-reader").exists());
        assert!(t.path().join("mon_groups/imc-validate-20-reader").exists());
        assert!(t.path().join("mon_groups/other").exists());
    }

    #[test]
    fn a_read_only_tree_is_one_line_naming_the_group() {
        let t = tempfile::tempdir().unwrap();
        // No mon_groups directory: mkdir fails as on a read-only or RMID-less resctrl.
        let e = Groups::create(t.path(), &[], 1, &[("reader", 2)])
            .err()
            .unwrap();
        assert!(
            e.contains("imc-validate-1-reader") && !e.contains('\n'),
            "{e}"
        );
    }
}
