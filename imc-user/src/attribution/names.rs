//! Names for the cgroup ids of an interval's tasks: path, container id, pod UID.
use crate::discovery::cgroup::CgroupPaths;
use crate::model::result::IntervalResult;

/// Fills `cgroup_path`, `container_id` and `pod_uid` of every task whose cgroup resolves.
pub fn name_cgroups(iv: &mut IntervalResult, paths: &mut CgroupPaths) {
    for t in &mut iv.tasks {
        if t.cgroup_path.is_none()
            && let Some(n) = paths.resolve(t.cgroup, t.pid)
        {
            t.set_cgroup_names(&n);
        }
    }
}
