//! Container names: a task's cgroup v2 id → its cgroup path → systemd unit, container id and
//! Kubernetes pod UID.
//!
//! The eBPF program records `bpf_get_current_cgroup_id()`, the id of the task's cgroup in the
//! v2 hierarchy, which is the inode number of that cgroup's directory in the cgroup2 file
//! system. So an id is resolved by finding the cgroup2 mount (from mountinfo under `--root`:
//! `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one) and looking for
//! the directory with that inode: first where the task's `/proc/PID/cgroup` says it is (one
//! `stat`), else by walking the tree. Walks are rate-limited, so a stream of tasks in cgroups
//! that are already gone cannot make every interval walk the tree.
//!
//! Names come from the path alone ([`names_of_path`]), so a recording that stores the path is
//! enough to name containers on another machine.
pub use crate::model::CgroupNames;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no cgroup2 mount under {}: looked in proc/self/mountinfo, proc/1/mountinfo, sys/fs/cgroup and sys/fs/cgroup/unified",
        root.display()
    )]
    NoMount { root: PathBuf },
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container id from one path component: `docker-<id>.scope`, `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `libpod-<id>.scope` (systemd cgroup driver), or a bare 64-hex-digit
/// component (cgroupfs driver: `/docker/<id>`, `/kubepods/burstable/pod<uid>/<id>`). CRI-O's
/// `crio-conmon-<id>.scope` is its monitor process, not the container: no id.
fn container_of(component: &str) -> Option<&str> {
    if let Some(stem) = component.strip_suffix(".scope") {
        for prefix in ["docker-", "cri-containerd-", "crio-", "libpod-"] {
            if let Some(id) = stem.strip_prefix(prefix)
                && id.len() >= 12
                && is_hex(id)
            {
                return Some(id);
            }
        }
        return None;
    }
    (component.len() == 64 && is_hex(component)).then_some(component)
}

/// A pod UID from one path component: `kubepods-<qos>-pod<uid>.slice` or `kubepods-pod<uid>.slice`
/// (systemd driver, the UID's dashes written as underscores), or `pod<uid>` below a `kubepods`
/// component (cgroupfs driver).
fn pod_of(component: &str, under_kubepods: bool) -> Option<String> {
    let uid = if let Some(stem) = component.strip_suffix(".slice") {
        if !stem.starts_with("kubepods") {
            return None;
        }
        let at = stem.rfind("-pod")?;
        stem[at + 4..].replace('_', "-")
    } else if under_kubepods {
        component.strip_prefix("pod")?.to_owned()
    } else {
        return None;
    };
    let ok = uid.len() >= 32 && uid.split('-').all(is_hex) && uid.contains('-');
    ok.then_some(uid)
}

fn unit_of(component: &str) -> Option<&str> {
    const UNITS: [&str; 4] = [".service", ".scope", ".socket", ".mount"];
    UNITS
        .iter()
        .any(|u| component.len() > u.len() && component.ends_with(u))
        .then_some(component)
}

/// The names in a cgroup path (relative to the cgroup2 root). The innermost match of each kind
/// wins: a container that makes its own sub-cgroups is still that container.
pub fn names_of_path(path: &str) -> CgroupNames {
    let mut names = CgroupNames {
        path: if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        },
        ..CgroupNames::default()
    };
    let mut under_kubepods = false;
    let mut slice = None;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if let Some(id) = container_of(c) {
            names.container_id = Some(id.to_owned());
        }
        if let Some(uid) = pod_of(c, under_kubepods) {
            names.pod_uid = Some(uid);
        }
        if let Some(u) = unit_of(c) {
            names.unit = Some(u.to_owned());
        } else if c.ends_with(".slice") {
            slice = Some(c);
        }
        under_kubepods |= c == "kubepods" || c.starts_with("kubepods.") || c == "kubepods.slice";
    }
    if names.unit.is_none() {
        names.unit = slice.map(str::to_owned);
    }
    names
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points of every cgroup2 file system in a mountinfo text (proc(5): the mount point is
/// the fifth field; the file-system type follows the ` - ` separator).
pub fn cgroup2_mounts(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            if fstype != "cgroup2" {
                return None;
            }
            left.split_whitespace().nth(4).map(unescape)
        })
        .collect()
}

fn is_cgroup2_root(dir: &Path) -> bool {
    dir.join("cgroup.controllers").is_file()
}

/// The cgroup2 mount as a directory under `root`. Mountinfo is read from `root/proc/self` (the
/// host's view when root is `/`) and `root/proc/1` (the host's init, when a container mounts
/// the host at /host and shares its PID namespace); a mount point is looked for under `root`
/// and, when it already lies under `root` (this process' own view of /host), as it is.
pub fn find_cgroup2_mount(root: &Path) -> Result<PathBuf, CgroupError> {
    for who in ["self", "1"] {
        let Ok(text) = std::fs::read_to_string(root.join("proc").join(who).join("mountinfo"))
        else {
            continue;
        };
        for m in cgroup2_mounts(&text) {
            let under_root = root.join(m.trim_start_matches('/'));
            let as_is = PathBuf::from(&m);
            let as_is_ok = root != Path::new("/") && as_is.starts_with(root);
            for dir in [Some(under_root), as_is_ok.then_some(as_is)]
                .into_iter()
                .flatten()
            {
                if is_cgroup2_root(&dir) {
                    return Ok(dir);
                }
            }
        }
    }
    ["sys/fs/cgroup", "sys/fs/cgroup/unified"]
        .iter()
        .map(|p| root.join(p))
        .find(|d| is_cgroup2_root(d))
        .ok_or_else(|| CgroupError::NoMount {
            root: root.to_path_buf(),
        })
}

/// The shortest time between two walks of the cgroup tree.
pub const MIN_RESCAN: Duration = Duration::from_secs(1);
/// Names kept for cgroups; beyond this (container churn on a long run) a walk starts afresh,
/// keeping only cgroups that still exist.
pub const MAX_CACHED: usize = 1 << 16;

/// Resolves cgroup ids to names, caching by id.
pub struct CgroupPaths {
    root: PathBuf,
    mount: PathBuf,
    by_id: HashMap<u64, Arc<CgroupNames>>,
    last_walk: Option<Instant>,
    min_rescan: Duration,
    walks: u64,
}

impl CgroupPaths {
    /// Finds the cgroup2 mount under `root` and walks it once.
    pub fn open(root: &Path) -> Result<CgroupPaths, CgroupError> {
        let mount = find_cgroup2_mount(root)?;
        let mut p = CgroupPaths {
            root: root.to_path_buf(),
            mount,
            by_id: HashMap::new(),
            last_walk: None,
            min_rescan: MIN_RESCAN,
            walks: 0,
        };
        p.walk();
        Ok(p)
    }

    /// Allows walks this often (tests use zero).
    pub fn with_min_rescan(mut self, d: Duration) -> CgroupPaths {
        self.min_rescan = d;
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// How many times the tree was walked (the first at `open`).
    pub fn walks(&self) -> u64 {
        self.walks
    }

    /// The names of cgroup `id`; `pid` (a task seen in it) is a hint: its `/proc/PID/cgroup`
    /// usually names the directory directly. None when the cgroup is gone (or was never under
    /// this mount), until a later walk finds it.
    pub fn resolve(&mut self, id: u64, pid: u32) -> Option<Arc<CgroupNames>> {
        if let Some(n) = self.by_id.get(&id) {
            return Some(n.clone());
        }
        if let Some(path) = self.path_from_proc(id, pid) {
            return Some(self.insert(id, &path));
        }
        if self
            .last_walk
            .is_none_or(|t| t.elapsed() >= self.min_rescan)
        {
            self.walk();
        }
        self.by_id.get(&id).cloned()
    }

    fn insert(&mut self, id: u64, path: &str) -> Arc<CgroupNames> {
        let n = Arc::new(names_of_path(path));
        self.by_id.insert(id, n.clone());
        n
    }

    /// The `0::PATH` line of `/proc/PID/cgroup`, when the directory it names has inode `id`.
    fn path_from_proc(&self, id: u64, pid: u32) -> Option<String> {
        if pid == 0 || pid == u32::MAX {
            return None;
        }
        let text =
            std::fs::read_to_string(self.root.join("proc").join(pid.to_string()).join("cgroup"))
                .ok()?;
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
        let dir = self.mount.join(path.trim_start_matches('/'));
        let ino = std::fs::metadata(&dir).ok()?.ino();
        (ino == id).then(|| path.to_owned())
    }

    /// Walks the whole tree, recording every directory's inode → path. Cached entries stay:
    /// an id is never reused while its cgroup exists, and names of a cgroup that went away
    /// are still the right names for the traffic it made.
    fn walk(&mut self) {
        if self.by_id.len() > MAX_CACHED {
            self.by_id.clear();
        }
        self.walks += 1;
        self.last_walk = Some(Instant::now());
        let mut stack = vec![(self.mount.clone(), String::from("/"))];
        while let Some((dir, rel)) = stack.pop() {
            let Ok(md) = std::fs::metadata(&dir) else {
                continue;
            };
            if !self.by_id.contains_key(&md.ino()) {
                self.insert(md.ino(), &rel);
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((e.path(), child));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKER: &str = "2f1a3c9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f5e4d3c";
    const POD: &str = "6b1c1e2a-3f4d-4c5b-9a8e-7d6c5b4a3928";

    #[test]
    fn docker_systemd_and_cgroupfs_paths() {
        let n = names_of_path(&format!("/system.slice/docker-{DOCKER}.scope"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        assert_eq!(n.unit, Some(format!("docker-{DOCKER}.scope")));
        assert_eq!(n.pod_uid, None);
        let n = names_of_path(&format!("/docker/{DOCKER}"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        assert_eq!(n.unit, None);
    }

    #[test]
    fn kubernetes_systemd_driver_containerd_and_crio() {
        let uid_ = POD.replace('-', "_");
        let base =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice");
        let n = names_of_path(&format!("{base}/cri-containerd-{DOCKER}.scope"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        assert_eq!(n.pod_uid.as_deref(), Some(POD));
        assert_eq!(n.unit, Some(format!("cri-containerd-{DOCKER}.scope")));
        let n = names_of_path(&format!("{base}/crio-{DOCKER}.scope"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        // CRI-O's monitor is in the pod but is no container.
        let n = names_of_path(&format!("{base}/crio-conmon-{DOCKER}.scope"));
        assert_eq!(n.container_id, None);
        assert_eq!(n.pod_uid.as_deref(), Some(POD));
        // A guaranteed pod has no QoS slice; the pause of a pod slice alone has no container.
        let n = names_of_path(&format!("/kubepods.slice/kubepods-pod{uid_}.slice"));
        assert_eq!(n.pod_uid.as_deref(), Some(POD));
        assert_eq!(n.container_id, None);
        assert_eq!(n.unit, Some(format!("kubepods-pod{uid_}.slice")));
    }

    #[test]
    fn kubernetes_cgroupfs_driver() {
        let n = names_of_path(&format!("/kubepods/besteffort/pod{POD}/{DOCKER}"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        assert_eq!(n.pod_uid.as_deref(), Some(POD));
        // `pod…` outside kubepods is someone's directory, not a pod.
        let n = names_of_path(&format!("/mystuff/pod{POD}"));
        assert_eq!(n.pod_uid, None);
    }

    #[test]
    fn plain_services_and_the_root() {
        let n = names_of_path("/system.slice/nginx.service");
        assert_eq!(
            n,
            CgroupNames {
                path: "/system.slice/nginx.service".into(),
                unit: Some("nginx.service".into()),
                container_id: None,
                pod_uid: None,
            }
        );
        let n = names_of_path("/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope");
        assert_eq!(n.unit.as_deref(), Some("x.scope"));
        let n = names_of_path("/user.slice");
        assert_eq!(n.unit.as_deref(), Some("user.slice"));
        let n = names_of_path("/");
        assert_eq!(n.path, "/");
        assert_eq!((n.unit, n.container_id, n.pod_uid), (None, None, None));
        // A scope whose id is not hex is not a container.
        assert_eq!(names_of_path("/docker-notanid.scope").container_id, None);
    }

    #[test]
    fn mountinfo_hybrid_and_pure_v2() {
        let hybrid = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(cgroup2_mounts(hybrid), ["/sys/fs/cgroup/unified"]);
        let v2 = "29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        assert_eq!(cgroup2_mounts(v2), ["/sys/fs/cgroup"]);
        let spaced = "50 1 0:40 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mounts(spaced), ["/mnt/my cg"]);
        assert!(cgroup2_mounts("garbage\n\n1 2 3\n").is_empty());
    }

    /// A fake root: proc/self/mountinfo naming a hybrid cgroup2 mount, and a cgroup tree.
    fn fake_root(mountinfo: &str, mount: &str, dirs: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/self")).unwrap();
        std::fs::write(t.path().join("proc/self/mountinfo"), mountinfo).unwrap();
        let m = t.path().join(mount);
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(m.join("cgroup.controllers"), "cpu memory\n").unwrap();
        for d in dirs {
            std::fs::create_dir_all(m.join(d)).unwrap();
        }
        t
    }

    fn ino(p: &Path) -> u64 {
        std::fs::metadata(p).unwrap().ino()
    }

    #[test]
    fn ids_resolve_to_paths_on_a_fake_tree() {
        let info = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let svc = format!("system.slice/docker-{DOCKER}.scope");
        let t = fake_root(info, "sys/fs/cgroup/unified", &[&svc, "user.slice"]);
        let m = t.path().join("sys/fs/cgroup/unified");
        let mut p = CgroupPaths::open(t.path()).unwrap();
        assert_eq!(p.mount(), m);
        let n = p.resolve(ino(&m.join(&svc)), 0).unwrap();
        assert_eq!(n.path, format!("/{svc}"));
        assert_eq!(n.container_id.as_deref(), Some(DOCKER));
        assert_eq!(p.resolve(ino(&m), 0).unwrap().path, "/");
        assert_eq!(p.walks(), 1, "known ids come from the cache");
    }

    #[test]
    fn a_new_cgroup_is_found_by_the_pid_hint_or_a_rate_limited_walk() {
        let info = "29 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let t = fake_root(info, "sys/fs/cgroup", &["a.slice"]);
        let m = t.path().join("sys/fs/cgroup");
        let mut p = CgroupPaths::open(t.path())
            .unwrap()
            .with_min_rescan(Duration::from_secs(3600));
        // Created after the first walk; task 42 says where it is.
        std::fs::create_dir_all(m.join("a.slice/new.service")).unwrap();
        std::fs::create_dir_all(t.path().join("proc/42")).unwrap();
        std::fs::write(t.path().join("proc/42/cgroup"), "0::/a.slice/new.service\n").unwrap();
        let id = ino(&m.join("a.slice/new.service"));
        assert_eq!(
            p.resolve(id, 42).unwrap().unit.as_deref(),
            Some("new.service")
        );
        assert_eq!(p.walks(), 1);
        // No hint: a miss walks again, but not more than once per min_rescan.
        std::fs::create_dir_all(m.join("b.scope")).unwrap();
        std::fs::create_dir_all(m.join("c.scope")).unwrap();
        assert!(p.resolve(ino(&m.join("b.scope")), 0).is_none());
        assert_eq!(
            p.walks(),
            1,
            "a walk within min_rescan of the last is skipped"
        );
        assert!(p.resolve(999_999_999, 0).is_none());
        let mut p = p.with_min_rescan(Duration::ZERO);
        assert_eq!(
            p.resolve(ino(&m.join("b.scope")), 0).unwrap().path,
            "/b.scope"
        );
        assert_eq!(p.walks(), 2);
        // The same walk found c.scope: no walk for it.
        assert_eq!(
            p.resolve(ino(&m.join("c.scope")), 0).unwrap().path,
            "/c.scope"
        );
        assert_eq!(p.walks(), 2);
    }

    #[test]
    fn pure_v2_without_mountinfo_and_no_mount_at_all() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("sys/fs/cgroup")).unwrap();
        assert!(matches!(
            find_cgroup2_mount(t.path()),
            Err(CgroupError::NoMount { .. })
        ));
        std::fs::write(t.path().join("sys/fs/cgroup/cgroup.controllers"), "").unwrap();
        assert_eq!(
            find_cgroup2_mount(t.path()).unwrap(),
            t.path().join("sys/fs/cgroup")
        );
    }
}
