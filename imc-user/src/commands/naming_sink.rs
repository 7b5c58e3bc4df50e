//! The sink between the sampling loop and `top`/`record`/`serve`: names every task's cgroup (path,
//! container, pod) and, for `top --by`, groups the rows, before the real sink sees the interval.
use crate::attribution::group_rows;
use crate::attribution::names::name_cgroups;
use crate::cli::{GlobalArgs, GroupBy};
use crate::discovery::cgroup::CgroupPaths;
use crate::model::result::IntervalResult;
use crate::pipeline::Sink;

pub struct Naming<'a> {
    paths: Option<CgroupPaths>,
    by: GroupBy,
    inner: &'a mut dyn Sink,
    /// `-p`: the tasks shown (all by default).
    pids: crate::model::PidFilter,
}

/// The cgroup path resolver under --root. Without a cgroup2 mount there, says so once (before
/// any full-screen view starts) and leaves the names null: the measurement does not need them.
pub fn cgroup_paths(global: &GlobalArgs) -> Option<CgroupPaths> {
    match CgroupPaths::open(&global.root) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("imc: warning: {e}: cgroup paths, container ids and pod UIDs are null");
            None
        }
    }
}

impl<'a> Naming<'a> {
    pub fn new(paths: Option<CgroupPaths>, by: GroupBy, inner: &'a mut dyn Sink) -> Naming<'a> {
        Naming {
            paths,
            by,
            inner,
            pids: crate::model::PidFilter::default(),
        }
    }

    /// Shows only the tasks `-p` names.
    pub fn pids(mut self, pids: crate::model::PidFilter) -> Naming<'a> {
        self.pids = pids;
        self
    }
}

impl Sink for Naming<'_> {
    fn tick(&mut self, rec: &imc_common::Record) -> std::io::Result<()> {
        self.inner.tick(rec)
    }

    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        self.inner.stacks(batch)
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        let mut named = r.clone();
        if let Some(p) = self.paths.as_mut() {
            name_cgroups(&mut named, p);
        }
        named.tasks.retain(|t| self.pids.keeps(t.pid, t.tgid));
        if self.by != GroupBy::Pid {
            named.tasks = group_rows(std::mem::take(&mut named.tasks), self.by);
        }
        self.inner.interval(&named)
    }

    fn stop_requested(&self) -> bool {
        self.inner.stop_requested()
    }

    fn drained(&mut self, records: usize, took: std::time::Duration) {
        self.inner.drained(records, took);
    }

    fn started(&mut self) {
        self.inner.started();
    }

    fn command_cgroup(&self) -> Option<std::os::fd::RawFd> {
        self.inner.command_cgroup()
    }

    fn command_started(&mut self, pid: u32) {
        self.inner.command_started(pid);
    }

    fn notice(&mut self, text: &str) {
        self.inner.notice(text);
    }
}
