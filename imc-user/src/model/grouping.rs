//! How task rows are grouped (`--by`).

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
}
