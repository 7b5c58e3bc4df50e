//! Counting through perf_event_open from userspace: each planned counter is opened system-wide
//! (`pid = -1`) on its CPU; counters of the same PMU instance on the same CPU form one group, so
//! one `read(2)` returns them all under the same enabled/running times. PMUs that refuse groups
//! get one fd per counter instead.
use super::plan::PerfCounter;
use super::{Backend, BackendError, CounterFailure, CounterSpec, RawReading};
use crate::sys::perf::{
    FLAG_EXCLUDE_KERNEL, FLAG_EXCLUDE_USER, GROUP_READ_FORMAT, GroupReader, PerfEventAttr, PerfSys,
    explain_open_error, read_counter,
};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// Counters sharing one PMU instance and CPU.
struct Group {
    /// Open fds; with `grouped`, the first is the leader and the only one read.
    fds: Vec<OwnedFd>,
    /// Counter index of each fd.
    counters: Vec<usize>,
    grouped: bool,
    reader: GroupReader,
    values: Vec<u64>,
    /// Stopped after a read error; its counters read as not ok from then on.
    dead: bool,
}

pub struct PerfBackend {
    sys: Arc<dyn PerfSys>,
    source: String,
    counters: Vec<CounterSpec>,
    groups: Vec<Group>,
    failures: Vec<CounterFailure>,
}

fn attr_for(c: &PerfCounter) -> PerfEventAttr {
    let mut attr = PerfEventAttr::counting(c.pmu_type, c.spec.config);
    attr.config1 = c.config1;
    attr.config2 = c.config2;
    if c.exclude_user {
        attr.flags |= FLAG_EXCLUDE_USER;
    }
    if c.exclude_kernel {
        attr.flags |= FLAG_EXCLUDE_KERNEL;
    }
    attr
}

/// Errors that mean "this PMU cannot put these events in one group", after which each event is
/// opened on its own.
fn is_group_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSPC)
    )
}

impl PerfBackend {
    /// Opens every planned counter. Counters that fail to open are reported through
    /// `take_failures` and left out; it is an error only when none opens.
    pub fn open(
        sys: Arc<dyn PerfSys>,
        source: &str,
        planned: Vec<PerfCounter>,
    ) -> Result<PerfBackend, BackendError> {
        let mut failures = Vec::new();
        let mut first_errno = None;
        // Group members by (PMU, CPU), in plan order.
        let mut keys: Vec<(String, Option<u32>)> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, c) in planned.iter().enumerate() {
            let key = (c.spec.pmu.clone(), c.spec.cpu);
            match keys.iter().position(|k| *k == key) {
                Some(g) => members[g].push(i),
                None => {
                    keys.push(key);
                    members.push(vec![i]);
                }
            }
        }
        let mut groups = Vec::new();
        for m in members {
            let mut fail = |i: usize, e: &io::Error, failures: &mut Vec<CounterFailure>| {
                first_errno = first_errno.or(e.raw_os_error());
                failures.push(CounterFailure {
                    counter: Some(i),
                    message: explain_open_error(
                        &format!("cannot open {}", planned[i].spec.describe()),
                        e,
                    ),
                });
            };
            if m.len() > 1 {
                // On Err the PMU refused the group (or its leader): one fd per counter below.
                if let Ok((g, errs)) = Self::open_grouped(sys.as_ref(), &planned, &m) {
                    for (i, e) in errs {
                        fail(i, &e, &mut failures);
                    }
                    groups.push(g);
                    continue;
                }
            }
            for &i in &m {
                let c = &planned[i];
                let cpu = c.spec.cpu.map_or(-1, |c| c as i32);
                match sys.open(&attr_for(c), -1, cpu, None) {
                    Ok(fd) => groups.push(Group {
                        fds: vec![fd],
                        counters: vec![i],
                        grouped: false,
                        reader: GroupReader::new(0),
                        values: Vec::new(),
                        dead: false,
                    }),
                    Err(e) => fail(i, &e, &mut failures),
                }
            }
        }
        if groups.is_empty() {
            let message = failures
                .first()
                .map_or_else(|| "no counters to open".to_string(), |f| f.message.clone());
            return Err(BackendError::NothingOpened {
                message,
                errno: first_errno,
            });
        }
        Ok(PerfBackend {
            sys,
            source: source.to_string(),
            counters: planned.into_iter().map(|c| c.spec).collect(),
            groups,
            failures,
        })
    }

    /// Opens `members` as one group. Err when the leader fails or the PMU refuses groups (the
    /// caller then opens them one by one); Ok with the siblings that failed for other reasons.
    #[allow(clippy::type_complexity)]
    fn open_grouped(
        sys: &dyn PerfSys,
        planned: &[PerfCounter],
        members: &[usize],
    ) -> io::Result<(Group, Vec<(usize, io::Error)>)> {
        let cpu = planned[members[0]].spec.cpu.map_or(-1, |c| c as i32);
        let mut attr = attr_for(&planned[members[0]]);
        attr.read_format = GROUP_READ_FORMAT;
        let leader = sys.open(&attr, -1, cpu, None)?;
        let mut fds = vec![leader];
        let mut counters = vec![members[0]];
        let mut errs = Vec::new();
        for &i in &members[1..] {
            let mut attr = attr_for(&planned[i]);
            attr.read_format = GROUP_READ_FORMAT;
            match sys.open(&attr, -1, cpu, Some(fds[0].as_fd())) {
                Ok(fd) => {
                    fds.push(fd);
                    counters.push(i);
                }
                Err(e) if is_group_refusal(&e) => return Err(e),
                Err(e) => errs.push((i, e)),
            }
        }
        let n = fds.len();
        Ok((
            Group {
                fds,
                counters,
                grouped: true,
                reader: GroupReader::new(n),
                values: vec![0; n],
                dead: false,
            },
            errs,
        ))
    }

    /// How many fds are open (for `-v` and tests).
    pub fn open_fds(&self) -> usize {
        self.groups.iter().map(|g| g.fds.len()).sum()
    }

    /// Whether the counters of each group were grouped (one read per group).
    pub fn grouped(&self) -> Vec<bool> {
        self.groups.iter().map(|g| g.grouped).collect()
    }

    fn stop_group(&mut self, g: usize, err: &io::Error) {
        let group = &mut self.groups[g];
        group.dead = true;
        for &i in &group.counters {
            let c = &self.counters[i];
            let hint = if err.kind() == io::ErrorKind::UnexpectedEof
                || err.raw_os_error() == Some(libc::ENODEV)
            {
                " (its CPU went offline?)"
            } else {
                ""
            };
            self.failures.push(CounterFailure {
                counter: Some(i),
                message: format!("{} stopped counting: {err}{hint}", c.describe()),
            });
        }
    }
}

impl Backend for PerfBackend {
    fn source(&self) -> &str {
        &self.source
    }

    fn counters(&self) -> &[CounterSpec] {
        &self.counters
    }

    fn read(&mut self, out: &mut [RawReading]) {
        for r in out.iter_mut() {
            r.ok = false;
        }
        for g in 0..self.groups.len() {
            let group = &mut self.groups[g];
            if group.dead {
                continue;
            }
            if group.grouped {
                match group
                    .reader
                    .read(self.sys.as_ref(), group.fds[0].as_fd(), &mut group.values)
                {
                    Ok((enabled, running)) => {
                        for (k, &i) in group.counters.iter().enumerate() {
                            if let Some(r) = out.get_mut(i) {
                                *r = RawReading {
                                    value: group.values[k],
                                    enabled,
                                    running,
                                    ok: true,
                                };
                            }
                        }
                    }
                    Err(e) => self.stop_group(g, &e),
                }
            } else {
                match read_counter(self.sys.as_ref(), group.fds[0].as_fd()) {
                    Ok(v) => {
                        if let Some(r) = out.get_mut(group.counters[0]) {
                            *r = RawReading {
                                value: v.value,
                                enabled: v.enabled,
                                running: v.running,
                                ok: true,
                            };
                        }
                    }
                    Err(e) => self.stop_group(g, &e),
                }
            }
        }
    }

    fn take_failures(&mut self) -> Vec<CounterFailure> {
        std::mem::take(&mut self.failures)
    }
}
