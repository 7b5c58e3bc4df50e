//! A process and its descendants, followed through `/proc` parentage (proc(5): the fourth
//! field of `/proc/PID/stat` is the parent's pid): `imc record -- CMD`'s fallback where the
//! command cannot be given a cgroup of its own. What it can miss: a process that is born and
//! ends between two scans, and one whose parent ended before a scan saw it (it is re-parented
//! to init or a subreaper). The records' own tgids add a member's threads, seen or not.
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The pids known to descend from the root process (the root included).
pub struct ProcessTree {
    proc_dir: PathBuf,
    members: HashSet<u32>,
    /// The parents of the other processes listed at the last scan: a scan reads the `stat` of
    /// new processes only (a process that is not of the tree never becomes so: an orphan is
    /// re-parented to init or a subreaper, never into the tree).
    others: HashMap<u32, u32>,
    scans: u64,
}

impl ProcessTree {
    /// The tree of `root_pid`, read under `root/proc`.
    pub fn new(root: &Path, root_pid: u32) -> ProcessTree {
        ProcessTree {
            proc_dir: root.join("proc"),
            members: HashSet::from([root_pid]),
            others: HashMap::new(),
            scans: 0,
        }
    }

    /// Whether `pid` is known to be of the tree.
    pub fn contains(&self, pid: u32) -> bool {
        self.members.contains(&pid)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// How many times `/proc` was read.
    pub fn scans(&self) -> u64 {
        self.scans
    }

    /// Reads every process' parent under `/proc` and adds the descendants of the members
    /// (known members stay: a process that ended is still the command's in the recording).
    pub fn scan(&mut self) {
        self.scans += 1;
        let Ok(dir) = std::fs::read_dir(&self.proc_dir) else {
            return;
        };
        let mut parent: HashMap<u32, u32> = HashMap::new();
        let mut listed: Vec<u32> = Vec::new();
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if self.members.contains(&pid) {
                continue;
            }
            listed.push(pid);
            if self.others.contains_key(&pid) {
                continue;
            }
            if let Some(ppid) = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| parent_of_stat(&s))
            {
                parent.insert(pid, ppid);
            }
        }
        // Joins in rounds until nothing more joins: a grandchild may be listed before its
        // parent.
        loop {
            let joined: Vec<u32> = parent
                .iter()
                .filter(|(_, pp)| self.members.contains(pp))
                .map(|(&p, _)| p)
                .collect();
            if joined.is_empty() {
                break;
            }
            for p in joined {
                parent.remove(&p);
                self.members.insert(p);
            }
        }
        // What did not join is someone else's; what is no longer listed has ended.
        let mut others = std::mem::take(&mut self.others);
        others.extend(parent);
        self.others = listed
            .into_iter()
            .filter_map(|p| others.get(&p).map(|&pp| (p, pp)))
            .collect();
    }
}

/// The parent pid in a `/proc/PID/stat` line: the field after the state, which follows the
/// command name in parentheses (which may itself hold spaces and parentheses: the last `)`
/// ends it).
pub fn parent_of_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    f.next()?; // state
    f.next()?.parse().ok()
}

/// This process' cgroup v2 path (`0::PATH` in `root/proc/self/cgroup`).
pub fn own_cgroup2_path(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("proc/self/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_follows_a_name_with_spaces_and_parentheses() {
        assert_eq!(parent_of_stat("42 (a b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of_stat("42 (x"), None);
    }

    #[test]
    fn descendants_join_in_any_listing_order_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let proc_ = dir.path().join("proc");
        // 10 → 20 → 30 (listed before its parent joins), 40 is someone else's.
        for (pid, ppid) in [(30, 20), (20, 10), (10, 1), (40, 1), (50, 30)] {
            std::fs::create_dir_all(proc_.join(pid.to_string())).unwrap();
            std::fs::write(
                proc_.join(pid.to_string()).join("stat"),
                format!("{pid} (w) S {ppid} 1 1 0"),
            )
            .unwrap();
        }
        let mut t = ProcessTree::new(dir.path(), 10);
        t.scan();
        assert!(t.contains(10) && t.contains(20) && t.contains(30) && t.contains(50));
        assert!(!t.contains(40) && !t.contains(1));
        // A member that ended stays the command's.
        std::fs::remove_dir_all(proc_.join("30")).unwrap();
        t.scan();
        assert!(t.contains(30));
        assert_eq!(t.len(), 4);
    }
}
