//! How task rows are grouped (`--by`): each group's key, its label and its column title.
use super::result::TaskRow;

/// The hasher of the hashes that split a report's rows into passes: a fixed seed, so a row
/// falls in the same part in every pass of a run (foldhash: a report hashes every row of the
/// file once per pass, and SipHash was a tenth of a debug build's).
fn pass_hasher() -> foldhash::fast::FoldHasher<'static> {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x696d_6370_6173_7365).build_hasher()
}

/// How task rows are grouped (`--by`): one row per thread, process, name, cgroup, container or
/// Kubernetes pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// Thread id.
    Pid,
    /// Process (thread group) id.
    Tgid,
    /// Command name.
    Comm,
    /// cgroup v2 path (the numeric id where it does not resolve).
    Cgroup,
    /// Docker, containerd, CRI-O or Podman container id (tasks in none: one row).
    Container,
    /// Kubernetes pod UID (tasks in none: one row).
    Pod,
}

/// How `record -- CMD` told the command's process tree apart, as the recording's header and
/// the report's JSON name it (`cgroup`, `parentage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandTree {
    /// The command ran in a cgroup of its own: its tree is exact (short-lived children
    /// included).
    Cgroup,
    /// Followed through /proc parentage and the records' tgids: a child that lives between
    /// two scans can be missed.
    Parentage,
}

/// Which of a task row's identity fields a group row carries (see [`GroupBy::identity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub pid: bool,
    pub tgid: bool,
    pub comm: bool,
}

/// The fields of a task row a grouping key is made of, borrowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyParts<'a> {
    pub pid: u32,
    pub tgid: u32,
    pub comm: &'a str,
    pub cgroup: u64,
    pub container_id: Option<&'a str>,
    pub pod_uid: Option<&'a str>,
}

impl<'a> KeyParts<'a> {
    /// A hash of the task itself (pid, tgid, comm, cgroup), the same in every pass of a run:
    /// a report splits rows by it where a group's members may fall in different parts.
    pub fn task_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = pass_hasher();
        (self.pid, self.tgid, self.comm, self.cgroup).hash(&mut h);
        h.finish()
    }

    pub fn of(r: &'a TaskRow) -> KeyParts<'a> {
        KeyParts {
            pid: r.pid,
            tgid: r.tgid,
            comm: &r.comm,
            cgroup: r.cgroup,
            container_id: r.container_id.as_deref(),
            pod_uid: r.pod_uid.as_deref(),
        }
    }
}

/// Docker's short form of a container id: its first 12 characters name a container uniquely
/// enough (counted in characters: an id read from a recording may be anything).
pub fn short_container_id(id: &str) -> String {
    id.chars().take(12).collect()
}

impl GroupBy {
    pub const ALL: [GroupBy; 6] = [
        GroupBy::Pid,
        GroupBy::Tgid,
        GroupBy::Comm,
        GroupBy::Cgroup,
        GroupBy::Container,
        GroupBy::Pod,
    ];

    /// The name `--by` takes.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Pid => "pid",
            GroupBy::Tgid => "tgid",
            GroupBy::Comm => "comm",
            GroupBy::Cgroup => "cgroup",
            GroupBy::Container => "container",
            GroupBy::Pod => "pod",
        }
    }

    /// The key a row is grouped by (the grouping `attribution::group_rows` makes).
    pub fn key(self, r: &TaskRow) -> String {
        match self {
            GroupBy::Pid => r.pid.to_string(),
            GroupBy::Tgid => r.tgid.to_string(),
            GroupBy::Comm => r.comm.clone(),
            GroupBy::Cgroup => r.cgroup.to_string(),
            GroupBy::Container => r.container_id.clone().unwrap_or_default(),
            GroupBy::Pod => r.pod_uid.clone().unwrap_or_default(),
        }
    }

    /// A hash of the key [`key`](Self::key) gives, from a row's parts (no row built): a report
    /// splits a recording's rows by it into passes, and knows a row of a top group by it.
    pub fn key_hash(self, parts: KeyParts<'_>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = pass_hasher();
        match self {
            GroupBy::Pid => parts.pid.hash(&mut h),
            GroupBy::Tgid => parts.tgid.hash(&mut h),
            GroupBy::Comm => parts.comm.hash(&mut h),
            GroupBy::Cgroup => parts.cgroup.hash(&mut h),
            GroupBy::Container => parts.container_id.unwrap_or_default().hash(&mut h),
            GroupBy::Pod => parts.pod_uid.unwrap_or_default().hash(&mut h),
        }
        h.finish()
    }

    /// The key as a table's key column shows it: the id, the name, the cgroup's path (its id
    /// where the path is unknown), the container's short id, the pod's uid, `-` for none.
    pub fn cell(self, r: &TaskRow) -> String {
        match self {
            GroupBy::Pid | GroupBy::Tgid | GroupBy::Comm => self.key(r),
            GroupBy::Cgroup => r
                .cgroup_path
                .clone()
                .unwrap_or_else(|| r.cgroup.to_string()),
            GroupBy::Container => r
                .container_id
                .as_deref()
                .map_or_else(|| "-".into(), short_container_id),
            GroupBy::Pod => r.pod_uid.clone().unwrap_or_else(|| "-".into()),
        }
    }

    /// What a person reads for a group: `stream (pid 12)`, a cgroup path, `container 3f2a…`.
    pub fn label(self, r: &TaskRow) -> String {
        match self {
            GroupBy::Pid => format!("{} (tid {})", r.comm, r.pid),
            GroupBy::Tgid => format!("{} (pid {})", r.comm, r.tgid),
            GroupBy::Comm => r.comm.clone(),
            GroupBy::Cgroup => r
                .cgroup_path
                .clone()
                .unwrap_or_else(|| format!("cgroup {}", r.cgroup)),
            GroupBy::Container => r.container_id.as_deref().map_or_else(
                || "(no container)".into(),
                |c| format!("container {}", short_container_id(c)),
            ),
            GroupBy::Pod => r
                .pod_uid
                .as_deref()
                .map_or_else(|| "(no pod)".into(), |p| format!("pod {p}")),
        }
    }

    /// The member identity a group row carries. A group is named by its key: one member's pid,
    /// tgid or name is not the group's unless the key is that field (`--by tgid`: the process
    /// id, and its name, which is its main thread's; `--by comm`: the name alone; cgroup,
    /// container, pod: none of them).
    pub fn identity(self) -> Identity {
        let (pid, tgid, comm) = match self {
            GroupBy::Pid => (true, true, true),
            GroupBy::Tgid => (false, true, true),
            GroupBy::Comm => (false, false, true),
            GroupBy::Cgroup | GroupBy::Container | GroupBy::Pod => (false, false, false),
        };
        Identity { pid, tgid, comm }
    }

    /// The heading of the key column in a report table (`PID`, `CGROUP`).
    pub fn title(self) -> &'static str {
        match self {
            GroupBy::Pid => "PID",
            GroupBy::Tgid => "TGID",
            GroupBy::Comm => "COMM",
            GroupBy::Cgroup => "CGROUP",
            GroupBy::Container => "CONTAINER",
            GroupBy::Pod => "POD",
        }
    }
}

/// `-p/--pid PID,…` (as perf's): the processes a command shows, each with all its threads (a
/// thread id given names that thread); empty, every task. The one rule `top` and `report` apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PidFilter(Vec<u32>);

impl PidFilter {
    pub fn new(pids: &[u32]) -> PidFilter {
        PidFilter(pids.to_vec())
    }

    pub fn is_all(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a task (thread `pid` of process `tgid`) is shown.
    pub fn keeps(&self, pid: u32, tgid: u32) -> bool {
        self.0.is_empty() || self.0.contains(&tgid) || self.0.contains(&pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_keeps_its_threads_and_a_thread_id_itself() {
        let f = PidFilter::new(&[10, 21]);
        assert!(
            f.keeps(10, 10) && f.keeps(11, 10),
            "the process and its threads"
        );
        assert!(
            f.keeps(21, 20) && !f.keeps(22, 20),
            "thread 21 alone of process 20"
        );
        assert!(!f.keeps(30, 30));
        assert!(PidFilter::default().keeps(30, 30));
    }

    #[test]
    fn a_container_id_is_cut_by_characters_in_the_cell_and_the_label() {
        // An id read from a recording may be anything: cut at a byte, this one panicked.
        let r = TaskRow {
            container_id: Some("ééééééééééééé".into()),
            ..TaskRow::default()
        };
        assert_eq!(GroupBy::Container.cell(&r), "éééééééééééé");
        assert_eq!(GroupBy::Container.label(&r), "container éééééééééééé");
        let none = TaskRow::default();
        assert_eq!(GroupBy::Container.cell(&none), "-");
        assert_eq!(GroupBy::Cgroup.cell(&none), "0");
    }
}
