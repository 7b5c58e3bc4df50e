//! How task rows are grouped (`--by`): each group's key, its label and its column title.
use super::result::TaskRow;

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

/// Which of a task row's identity fields a group row carries (see [`GroupBy::identity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub pid: bool,
    pub tgid: bool,
    pub comm: bool,
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
                |c| format!("container {}", &c[..c.len().min(12)]),
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
