//! How loaded the machine was while the workloads ran: the tasks runnable beside them (the
//! kernel's `procs_running` in /proc/stat, read at every drain), the load average at the start
//! and the end (/proc/loadavg), and the share of the CPUs' time the workloads got (their own
//! and their reaped children's time in /proc/PID/stat). Other tasks wanting the CPUs cut the
//! workloads' slices shorter and more often, so more of them cross an interval end; the report
//! says so beside its figures. In a VM the host may also stop running a vCPU for a while (steal
//! time, /proc/stat's eighth `cpu` value): the guest's clocks run on meanwhile, and imc charges
//! that time to the task the vCPU was running where the task's own clock leaves it out, so the
//! time stolen in an interval is said, and allowed in its on-CPU time.
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Beside this many other runnable tasks on average per CPU, the run was a loaded one.
const LOADED_PER_CPU: f64 = 0.5;

/// What the run saw of the machine's load.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Load {
    pub cpus: usize,
    /// Runnable tasks besides the workloads, on average over the drains and at most.
    pub others_runnable_mean: f64,
    pub others_runnable_max: u32,
    /// The 1-minute load average at the start and at the end of the run.
    pub loadavg_start: Option<f64>,
    pub loadavg_end: Option<f64>,
    /// The workloads' CPU time over the CPUs' time in the run (0..1; None: not read).
    pub workloads_cpu_share: Option<f64>,
    /// Per event, the share of the run's counts imc could not place (unattributed).
    pub unattributed_share: std::collections::BTreeMap<String, f64>,
    /// Time the host kept the vCPUs from running (steal time), summed over CPUs, in ms.
    pub host_stolen_ms: f64,
    /// Other tasks wanted the CPUs: at least half a task per CPU on average beside the
    /// workloads.
    pub loaded: bool,
}

/// Watches the load through a run: a sample at the start and at every drain.
pub struct LoadWatch {
    root: PathBuf,
    pids: Vec<u32>,
    cpus: usize,
    runnable: Vec<u32>,
    loadavg_start: Option<f64>,
    started: Option<(std::time::Instant, u64)>,
    /// Steal time seen at each sample: (CLOCK_MONOTONIC ns, stolen ns so far).
    steal: Vec<(u64, u64)>,
}

impl LoadWatch {
    /// For the workloads `pids` on `cpus` CPUs, reading /proc under `root`.
    pub fn new(root: &Path, pids: &[u32], cpus: usize) -> LoadWatch {
        LoadWatch {
            root: root.to_path_buf(),
            pids: pids.to_vec(),
            cpus: cpus.max(1),
            runnable: Vec::new(),
            loadavg_start: None,
            started: None,
            steal: Vec::new(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }

    /// The workloads are let go now.
    pub fn start(&mut self) {
        self.loadavg_start = self.read("proc/loadavg").as_deref().and_then(loadavg_1m);
        self.started = Some((std::time::Instant::now(), self.workload_ticks()));
    }

    /// One look at the runnable tasks and the steal time (each drain).
    pub fn sample(&mut self) {
        let stat = self.read("proc/stat");
        if let Some(n) = stat.as_deref().and_then(procs_running) {
            // This thread is running as it reads, and so is each workload that has a CPU.
            let others = n.saturating_sub(1 + self.pids.len() as u32);
            self.runnable.push(others);
        }
        self.note_steal(stat.as_deref());
    }

    /// One look at the steal time alone (drains after the workloads were frozen: their last
    /// intervals are still being judged).
    pub fn sample_steal(&mut self) {
        let stat = self.read("proc/stat");
        self.note_steal(stat.as_deref());
    }

    fn note_steal(&mut self, stat: Option<&str>) {
        if let Some(ticks) = stat.and_then(steal_ticks) {
            let now = crate::sampler::monotonic_ns();
            self.steal.push((
                now,
                ticks.saturating_mul(1_000_000_000 / clock_ticks_per_s()),
            ));
        }
    }

    /// The steal time over `t0 .. t1` (CLOCK_MONOTONIC ns), in ns: from the last look at or
    /// before `t0` to the first at or after `t1`, so never less than what was stolen between
    /// them (the kernel counts it in whole clock ticks).
    pub fn stolen_ns(&self, t0: u64, t1: u64) -> u64 {
        let (Some(first), Some(last)) = (self.steal.first(), self.steal.last()) else {
            return 0;
        };
        let before = self.steal.iter().rev().find(|s| s.0 <= t0).unwrap_or(first);
        let after = self.steal.iter().find(|s| s.0 >= t1).unwrap_or(last);
        after.1.saturating_sub(before.1)
    }

    /// The workloads' CPU time so far, in clock ticks, their reaped children's included.
    fn workload_ticks(&self) -> u64 {
        self.pids
            .iter()
            .filter_map(|p| self.read(&format!("proc/{p}/stat")))
            .filter_map(|s| cpu_ticks(&s))
            .sum()
    }

    /// The run's end (the workloads frozen): what was seen.
    pub fn finish(&self) -> Load {
        let share = self.started.and_then(|(t0, ticks0)| {
            let hz = clock_ticks_per_s();
            let wall = t0.elapsed().as_secs_f64() * self.cpus as f64;
            (wall > 0.0).then(|| {
                let used = self.workload_ticks().saturating_sub(ticks0) as f64 / hz as f64;
                (used / wall).clamp(0.0, 1.0)
            })
        });
        let mut load = summarise(
            self.cpus,
            &self.runnable,
            self.loadavg_start,
            self.read("proc/loadavg").as_deref().and_then(loadavg_1m),
            share,
        );
        if let (Some(a), Some(b)) = (self.steal.first(), self.steal.last()) {
            load.host_stolen_ms = b.1.saturating_sub(a.1) as f64 / 1e6;
        }
        load
    }
}

/// USER_HZ, the clock ticks a second that /proc's times count in (100 where sysconf does not
/// say).
fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// The steal time of the `cpu` line of /proc/stat (its eighth value), in clock ticks; None
/// where the line has no such value.
fn steal_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

fn summarise(
    cpus: usize,
    runnable: &[u32],
    loadavg_start: Option<f64>,
    loadavg_end: Option<f64>,
    share: Option<f64>,
) -> Load {
    let mean = if runnable.is_empty() {
        0.0
    } else {
        runnable.iter().map(|&n| f64::from(n)).sum::<f64>() / runnable.len() as f64
    };
    Load {
        cpus,
        others_runnable_mean: mean,
        others_runnable_max: runnable.iter().copied().max().unwrap_or(0),
        loadavg_start,
        loadavg_end,
        workloads_cpu_share: share,
        unattributed_share: Default::default(),
        host_stolen_ms: 0.0,
        loaded: mean >= LOADED_PER_CPU * cpus as f64,
    }
}

/// `procs_running N` of /proc/stat.
fn procs_running(stat: &str) -> Option<u32> {
    stat.lines()
        .find_map(|l| l.strip_prefix("procs_running "))
        .and_then(|v| v.trim().parse().ok())
}

/// The first field of /proc/loadavg.
fn loadavg_1m(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// utime + stime + cutime + cstime of a /proc/PID/stat line (fields 14-17; the command name,
/// field 2, is in parentheses and may hold spaces, so fields are counted after its `)`).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: field 3 (state) is f[0], so field n is f[n - 3].
    (11..=14)
        .map(|i| f.get(i)?.parse::<i64>().ok().map(|v| v.max(0) as u64))
        .sum()
}

impl Load {
    /// One line for the report: how busy the machine was, and what that did to the figures.
    pub fn text(&self) -> String {
        let avg = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.2}"));
        let mut s = format!(
            "load: {:.1} other tasks runnable on average ({} at most) beside the workloads on {} \
             CPUs, load average {} at the start and {} at the end",
            self.others_runnable_mean,
            self.others_runnable_max,
            self.cpus,
            avg(self.loadavg_start),
            avg(self.loadavg_end)
        );
        if let Some(share) = self.workloads_cpu_share {
            s += &format!(
                "; the workloads had {:.0}% of the CPUs' time",
                share * 100.0
            );
        }
        for (event, share) in &self.unattributed_share {
            s += &format!(
                "; imc could not place {:.2}% of the {event} (unattributed)",
                share * 100.0
            );
        }
        if self.host_stolen_ms > 0.0 {
            s += &format!(
                "; the host stole {:.0} ms from the vCPUs (steal time: the guest's clocks ran on, \
                 and imc charged that time to the task each vCPU ran, where the task's own clock \
                 leaves it out; allowed in the on-CPU time of the intervals it fell in)",
                self.host_stolen_ms
            );
        }
        s += if self.loaded {
            ": a loaded machine, whose tasks cut the workloads' slices shorter and more \
             often, so more of them cross an interval end (each split there by time); the \
             bounds above are the ones a loaded machine is held to"
        } else {
            ": a quiet machine"
        };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_for_runnable_tasks_load_and_cpu_time() {
        let stat = "cpu  1 2 3\nctxt 5\nprocs_running 12\nprocs_blocked 0\n";
        assert_eq!(procs_running(stat), Some(12));
        assert_eq!(procs_running("cpu 1\n"), None);
        let stat = "cpu  1 2 3 4 5 6 7 17928 0 0\ncpu0 1 2 3 4 5 6 7 8882 0 0\n";
        assert_eq!(steal_ticks(stat), Some(17928));
        assert_eq!(steal_ticks("cpu  1 2 3\n"), None);
        assert_eq!(loadavg_1m("4.75 2.43 1.86 9/300 1234\n"), Some(4.75));
        // A name with spaces and a parenthesis; utime 100, stime 20, cutime 3, cstime 4.
        let pid = "42 (a b) c) R 1 42 42 0 -1 4194304 10 0 0 0 100 20 3 4 20 0 1 0 5 6 7";
        assert_eq!(cpu_ticks(pid), Some(127));
        assert_eq!(cpu_ticks("42 (x) R 1"), None);
    }

    /// The steal over a span runs from the last look at or before its start to the first at
    /// or after its end.
    #[test]
    fn steal_over_a_span_is_read_from_the_looks_around_it() {
        let mut w = LoadWatch::new(Path::new("/nonexistent"), &[], 2);
        assert_eq!(w.stolen_ns(0, 100), 0);
        w.steal = vec![(100, 0), (200, 10), (300, 110), (400, 110)];
        assert_eq!(w.stolen_ns(200, 300), 100);
        assert_eq!(w.stolen_ns(250, 350), 100);
        assert_eq!(w.stolen_ns(0, 1_000), 110);
        assert_eq!(w.stolen_ns(300, 400), 0);
    }

    #[test]
    fn a_machine_is_loaded_beside_half_a_task_per_cpu_and_says_so() {
        let quiet = summarise(2, &[0, 1, 0, 0], Some(0.5), Some(1.0), Some(0.98));
        assert!(!quiet.loaded);
        assert_eq!(quiet.others_runnable_max, 1);
        assert!(quiet.text().contains("a quiet machine"), "{}", quiet.text());
        let busy = summarise(2, &[3, 1, 2, 2], Some(4.2), Some(5.0), Some(0.61));
        assert!(busy.loaded);
        assert_eq!(busy.others_runnable_mean, 2.0);
        let t = busy.text();
        assert!(
            t.contains("2.0 other tasks runnable on average (3 at most)"),
            "{t}"
        );
        assert!(
            t.contains("load average 4.20 at the start and 5.00 at the end"),
            "{t}"
        );
        assert!(t.contains("61% of the CPUs' time"), "{t}");
        assert!(t.contains("a loaded machine"), "{t}");
        let mut said = busy.clone();
        said.unattributed_share.insert("page-faults".into(), 0.0123);
        let t = said.text();
        assert!(
            t.contains("could not place 1.23% of the page-faults"),
            "{t}"
        );
        assert!(!summarise(2, &[], None, None, None).loaded);
    }
}
