//! The sampling loop that `imc top` and `imc record` share: which counters the tick reads
//! (`-e` events, else the memory controller's read/write counters, else a labelled stand-in) and
//! the loop that drains the sampler into the attributor and hands each interval to a [`Sink`].
use crate::attribution::Attributor;
use crate::cli::{GlobalArgs, SamplerArgs};
use crate::discovery;
use crate::error::{CliError, CliResult};
use crate::model::{
    BackendKind, Direction, Discovery, Encoded, SlotRole, SlotScope, SlotSpec, Topology,
};
use crate::output::interval::IntervalResult;
use crate::sampler::probe::ReadMode;
use crate::sampler::{Sampler, SamplerConfig, SlotPlan, may_multiplex};
use imc_common::TickRecord;
use std::process::ExitCode;
use std::time::Duration;

/// What the sampler will read and how to label it.
pub struct Selection {
    pub plans: Vec<SlotPlan>,
    pub source: String,
}

fn direction_of(name: &str) -> Direction {
    let n = name.to_ascii_lowercase();
    if n.contains("write") || n.contains("wr") && !n.contains("rd") {
        Direction::Write
    } else if n.contains("read") || n.contains("rd") {
        Direction::Read
    } else {
        Direction::Total
    }
}

/// One slot for one encoded counter: CPU scope when its PMU has no cpumask (core, software,
/// msr), else package scope, opened on the PMU's designated CPUs.
fn plan_for(e: &Encoded, role: SlotRole, counter_bits: u8, topology: &Topology) -> SlotPlan {
    let online = &topology.online;
    let (scope, instances) = match &e.cpus {
        Some(cpus) if !cpus.is_empty() => (SlotScope::Package, package_readers(cpus, topology)),
        _ => (
            SlotScope::Cpu,
            online.iter().map(|&c| (c, vec![c])).collect(),
        ),
    };
    let spec = SlotSpec {
        event: e.event.clone(),
        scope,
        role,
        bytes_per_count: e.bytes_per_count,
        counter_bits,
    };
    let mut plan = SlotPlan::per_cpu(spec, e, online);
    plan.instances = instances;
    plan.may_multiplex = may_multiplex(e);
    plan
}

/// For each CPU a package PMU is opened on (its cpumask): the CPUs whose ticks are given the
/// counter. Every online CPU of its package, so that the sampler can find out by trying which
/// of them may read it (any, on Intel uncore since Linux 6.7; only the opening CPU otherwise).
/// A package with several opening CPUs (one PMU instance per die) keeps each to itself: an
/// array entry holds one counter, and which die a CPU's traffic goes to is not known here.
pub fn package_readers(open_cpus: &[u32], topology: &Topology) -> Vec<(u32, Vec<u32>)> {
    open_cpus
        .iter()
        .map(|&c| {
            let pkg = topology.package_of(c);
            let shared = open_cpus
                .iter()
                .filter(|&&o| topology.package_of(o) == pkg)
                .count()
                > 1;
            let readers = match pkg.and_then(|p| topology.packages.iter().find(|x| x.id == p)) {
                Some(p) if !shared => {
                    let mut r: Vec<u32> = p
                        .cpus
                        .iter()
                        .copied()
                        .filter(|x| topology.online.contains(x) || *x == c)
                        .collect();
                    if !r.contains(&c) {
                        r.push(c);
                    }
                    r
                }
                _ => vec![c],
            };
            (c, readers)
        })
        .collect()
}

fn too_many(n: usize) -> CliError {
    CliError::bad_input(format!(
        "{n} counters to read per tick, at most {}: name fewer with -e",
        imc_common::MAX_SLOTS
    ))
}

/// Chooses the slots from `-e`, the memory controller, or a stand-in.
pub fn select(global: &GlobalArgs, args: &SamplerArgs, found: &Discovery) -> CliResult<Selection> {
    let mut plans = Vec::new();
    if !args.events.is_empty() {
        for (i, text) in args.events.iter().enumerate() {
            let encoded = crate::events::resolve(&global.root, text)
                .map_err(|e| CliError::bad_input(e.to_string()))?;
            for e in encoded {
                // The first event is what "share" ranks by; bandwidth events keep their
                // direction, others count as an unspecified total.
                let role = if i == 0 || e.bytes_per_count.is_some() {
                    SlotRole::Traffic(direction_of(&e.event))
                } else {
                    SlotRole::Other
                };
                let bits = if e.cpus.is_some() { 48 } else { 64 };
                plans.push(plan_for(&e, role, bits, &found.topology));
            }
        }
        if plans.len() > imc_common::MAX_SLOTS {
            return Err(too_many(plans.len()));
        }
        let source = if plans.iter().any(|p| p.spec.bytes_per_count.is_some()) {
            "events".to_string()
        } else {
            format!("events:{}", args.events.join(","))
        };
        return Ok(Selection { plans, source });
    }

    let wanted = BackendKind::parse(&args.backend);
    if args.backend != "auto" && wanted.is_none() {
        return Err(CliError::bad_input(format!(
            "--backend '{}': unknown (one of auto, {})",
            args.backend,
            BackendKind::ALL.map(BackendKind::as_str).join(", ")
        )));
    }
    let mc = found.sources.iter().find(|s| {
        s.available
            && s.backend.is_memory_controller()
            && s.backend != BackendKind::IntelClientMchbar
            && wanted.is_none_or(|w| w == s.backend)
    });
    if let Some(src) = mc {
        for ev in src
            .events
            .iter()
            .filter(|e| matches!(e.name.as_str(), "read" | "write"))
        {
            let Some(pmu) = src.pmus.iter().find(|p| p.name == ev.pmu) else {
                continue;
            };
            let e = Encoded {
                event: format!("{}/{}", ev.pmu, ev.name),
                pmu: ev.pmu.clone(),
                pmu_type: pmu.pmu_type,
                config: ev.config.unwrap_or(0),
                config1: ev.config1.unwrap_or(0),
                bytes_per_count: ev.bytes_per_count,
                cpus: Some(pmu.cpus.clone()),
                ..Default::default()
            };
            let dir = ev.direction.unwrap_or_else(|| direction_of(&ev.name));
            plans.push(plan_for(
                &e,
                SlotRole::Traffic(dir),
                ev.counter_bits.max(1),
                &found.topology,
            ));
        }
        if plans.len() > imc_common::MAX_SLOTS {
            return Err(CliError::runtime(format!(
                "{} has {} read/write counters, more than the {} a tick reads: choose channels with -e (e.g. -e {}/cas_count_read/)",
                src.backend.as_str(),
                plans.len(),
                imc_common::MAX_SLOTS,
                src.pmus.first().map_or("uncore_imc_0", |p| p.name.as_str())
            )));
        }
        if !plans.is_empty() {
            return Ok(Selection {
                plans,
                source: src.backend.as_str().to_string(),
            });
        }
    }
    if let Some(w) = wanted {
        let why = found
            .sources
            .iter()
            .find(|s| s.backend == w)
            .and_then(|s| s.reason.clone())
            .unwrap_or_else(|| "not found".into());
        return Err(CliError::runtime(format!(
            "--backend {}: unavailable: {why}",
            w.as_str()
        )));
    }

    // No memory controller: a labelled stand-in, so the tool still shows who is busy.
    let why = found
        .sources
        .iter()
        .filter(|s| s.backend.is_memory_controller())
        .find_map(|s| s.reason.clone())
        .unwrap_or_else(|| "no memory-controller PMU found".into());
    let core_pmu = discovery::read_pmu(&global.root, "cpu").is_ok();
    let (name, proxy) = if core_pmu {
        (
            "LLC-load-misses",
            crate::events::resolve(&global.root, "LLC-load-misses").ok(),
        )
    } else {
        ("page-faults", None)
    };
    let (name, e) = match proxy.and_then(|v| v.into_iter().next()) {
        Some(e) => (name, e),
        None => (
            "page-faults",
            crate::events::resolve(&global.root, "page-faults")
                .map_err(|e| CliError::runtime(e.to_string()))?
                .into_iter()
                .next()
                .ok_or_else(|| CliError::runtime("page-faults did not encode"))?,
        ),
    };
    eprintln!("imc: no memory-controller counters ({why}); using {name} per process as a stand-in");
    plans.push(plan_for(
        &e,
        SlotRole::Traffic(Direction::Total),
        64,
        &found.topology,
    ));
    Ok(Selection {
        plans,
        source: format!("proxy:{name}"),
    })
}

/// Where the sampling loop's output goes: `imc top` prints intervals, `imc record` writes
/// ticks and intervals to a recording.
pub trait Sink {
    /// Every record, in drain order (time order per CPU).
    fn tick(&mut self, _rec: &imc_common::TickRecord) -> std::io::Result<()> {
        Ok(())
    }
    /// One closed interval. `Ok(false)` stops the loop quietly (the reader went away).
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool>;
    /// Asked at every drain: true ends the loop as SIGINT would (the live view's quit key), with
    /// a last interval up to now.
    fn stop_requested(&self) -> bool {
        false
    }
}

/// How often the loop drains the rings: a quarter of the interval, so an interval closes at most
/// a quarter late, between 10 ms (shorter intervals close at the next drain) and 50 ms. Each
/// drain wakes imc, which is most of its own CPU use at long intervals: a 1 s interval drains
/// 20 times a second, not 100.
pub fn drain_period_ms(interval_ms: u64) -> u32 {
    (interval_ms / 4).clamp(10, 50) as u32
}

/// Discovery under --root, with bad trees as bad input (exit 2).
pub fn discover(global: &GlobalArgs) -> CliResult<Discovery> {
    discovery::discover(&global.root).map_err(|e| {
        if e.is_bad_input() {
            CliError::bad_input(e.to_string())
        } else {
            CliError::runtime(e.to_string())
        }
    })
}

pub fn block_on<F: std::future::Future<Output = CliResult<ExitCode>>>(f: F) -> CliResult<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::runtime(format!("starting the runtime: {e}")))?
        .block_on(f)
}

pub struct LoopOptions<'a> {
    pub sampler: &'a SamplerArgs,
    pub interval_ms: u64,
    pub duration: Option<f64>,
    /// `-- CMD ARGS`: run it, stop when it exits, exit with its status.
    pub command: &'a [String],
}

/// Drains the sampler every [`drain_period_ms`] into the attributor and hands each interval to the sink,
/// until --duration, the command's exit, SIGINT, SIGTERM or SIGHUP. The sampler is dropped (everything
/// detached) on every way out of this function.
pub async fn sample_loop(
    global: &GlobalArgs,
    args: &LoopOptions<'_>,
    found: &Discovery,
    sel: Selection,
    sink: &mut dyn Sink,
) -> CliResult<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let cfg = SamplerConfig {
        freq: args.sampler.freq,
        slots: sel.plans.clone(),
        cpus: found.topology.online.clone(),
        precise: args.sampler.precise,
        ring_bytes: None,
        drain_period_ms: drain_period_ms(args.interval_ms),
        bpf_log: global.verbose >= 2,
        tick_program: Default::default(),
    };
    let sampler = Sampler::start(&cfg).map_err(|e| CliError::runtime(e.to_string()))?;
    let mut pump = Pump::new(
        sampler,
        &found.topology,
        sel.source.clone(),
        args.sampler.freq,
        global.verbose > 0,
    );

    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("SIGTERM handler: {e}")))?;
    // A closed terminal or session (SIGHUP) ends the run like INT/TERM: the sink finishes its
    // output (a recording gets its end marker) instead of the process dying mid-write.
    let mut sighup = signal(SignalKind::hangup())
        .map_err(|e| CliError::runtime(format!("SIGHUP handler: {e}")))?;
    let interval = Duration::from_millis(args.interval_ms);
    let mut drain_tick = tokio::time::interval(Duration::from_millis(cfg.drain_period_ms.into()));
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = tokio::time::Instant::now();
    let deadline = args
        .duration
        .map(|d| start + crate::cli::seconds_duration(d));
    let mut next_report = start + interval;
    // Start the command only once the sampler runs, so none of its traffic is missed.
    let mut child = match args.command.split_first() {
        Some((prog, rest)) => Some(
            tokio::process::Command::new(prog)
                .args(rest)
                .spawn()
                .map_err(|e| CliError::bad_input(format!("cannot run '{prog}': {e}")))?,
        ),
        None => None,
    };
    let mut exit = ExitCode::SUCCESS;
    let mut sink_error: Option<std::io::Error> = None;
    loop {
        let child_done = async {
            match child.as_mut() {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        let (stop, status) = tokio::select! {
            _ = drain_tick.tick() => (false, None),
            _ = sigint.recv() => (true, None),
            _ = sigterm.recv() => (true, None),
            _ = sighup.recv() => (true, None),
            st = child_done => (true, st),
        };
        if let Some(st) = status {
            use std::os::unix::process::ExitStatusExt;
            let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
            exit = ExitCode::from(code.clamp(0, 255) as u8);
            child = None;
        }
        let now = tokio::time::Instant::now();
        let finished = stop || sink.stop_requested() || deadline.is_some_and(|d| now >= d);
        pump.drain(|r| {
            if sink_error.is_none()
                && let Err(e) = sink.tick(r)
            {
                sink_error = Some(e);
            }
        });
        if let Some(e) = sink_error.take() {
            return Err(CliError::runtime(format!("writing output: {e}")));
        }
        if now >= next_report || finished {
            let result = pump.close(finished);
            match sink.interval(&result) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(CliError::runtime(format!("writing output: {e}"))),
            }
            next_report += interval;
            if next_report < now {
                next_report = now + interval;
            }
        }
        if finished {
            break;
        }
    }
    drop(pump);
    if let Some(mut c) = child {
        // Stopped by signal or --duration while the command still runs: leave it running?
        // No: like perf, the measured command ends with the measurement.
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    Ok(exit)
}

/// The sampler and the attributor joined the way every sampling command runs them: what one
/// drain and one interval end do, apart from timers, signals and output, so that tests can run
/// exactly this path against the real program with counters of their choosing.
pub struct Pump {
    sampler: Sampler,
    attr: Attributor,
    /// (slot, CPU a package counter is opened on) → its package id.
    package_of: Vec<((usize, u32), u32)>,
    lost_seen: u64,
    /// Say under -v how each package slot ended up being read.
    verbose: bool,
    modes_told: Vec<Option<ReadMode>>,
}

impl Pump {
    pub fn new(
        sampler: Sampler,
        topology: &Topology,
        source: String,
        freq: u32,
        verbose: bool,
    ) -> Pump {
        let specs: Vec<SlotSpec> = sampler.slots().to_vec();
        let attr = Attributor::new(&specs, topology, source).tick_hz(freq);
        let package_of = sampler
            .package_instances()
            .into_iter()
            .map(|(s, cpu)| ((s, cpu), topology.package_of(cpu).unwrap_or(0)))
            .collect();
        Pump {
            modes_told: vec![None; specs.len()],
            sampler,
            attr,
            package_of,
            lost_seen: 0,
            verbose,
        }
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    pub fn attributor(&self) -> &Attributor {
        &self.attr
    }

    /// Drains every record into the attributor (and `tick`), then reads from userspace the
    /// package counters no tick has read lately, so an idle package's traffic keeps its time.
    pub fn drain(&mut self, mut tick: impl FnMut(&TickRecord)) -> usize {
        let attr = &mut self.attr;
        let n = self.sampler.drain(|r| {
            attr.push_tick(r);
            tick(r)
        });
        self.read_packages(false);
        self.tell_modes();
        n
    }

    /// Ends the interval now (the run when `last`): every package counter is read first, so the
    /// interval holds its traffic up to its end.
    pub fn close(&mut self, last: bool) -> IntervalResult {
        self.read_packages(true);
        if let Ok(st) = self.sampler.stats() {
            let lost = st.lost();
            self.attr
                .add_lost_samples(lost.saturating_sub(self.lost_seen));
            self.lost_seen = lost;
        }
        let t = crate::sampler::monotonic_ns();
        if last {
            self.attr.finish(t)
        } else {
            self.attr.close_interval(t)
        }
    }

    fn read_packages(&mut self, all: bool) {
        let (attr, package_of) = (&mut self.attr, &self.package_of);
        self.sampler.read_idle_packages(all, |slot, cpu, t, v| {
            if let Some(&(_, pkg)) = package_of.iter().find(|(k, _)| *k == (slot, cpu)) {
                attr.push_package_read(pkg, slot, t, v.value);
            }
        });
    }

    fn tell_modes(&mut self) {
        if !self.verbose {
            return;
        }
        for (s, mode) in self.sampler.read_modes().into_iter().enumerate() {
            if mode != self.modes_told[s] && mode.is_some_and(|m| m != ReadMode::Probing) {
                eprintln!(
                    "imc: {}: {}",
                    self.sampler.slots()[s].event,
                    mode.map_or("", ReadMode::describe)
                );
                self.modes_told[s] = mode;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Package;

    fn topo(packages: &[&[u32]], online: &[u32]) -> Topology {
        Topology {
            online: online.to_vec(),
            possible: online.to_vec(),
            packages: packages
                .iter()
                .enumerate()
                .map(|(i, c)| Package {
                    id: i as u32,
                    cpus: c.to_vec(),
                })
                .collect(),
            nodes: Vec::new(),
        }
    }

    #[test]
    fn package_counters_are_offered_to_the_online_cpus_of_their_package() {
        // Two sockets, CPU 5 offline: each cpumask CPU's counter goes to its own package.
        let t = topo(&[&[0, 1, 2, 3], &[4, 5, 6, 7]], &[0, 1, 2, 3, 4, 6, 7]);
        assert_eq!(
            package_readers(&[0, 4], &t),
            [(0, vec![0, 1, 2, 3]), (4, vec![4, 6, 7])]
        );
        // One PMU instance per die, two in a package: which die a CPU's traffic goes to is not
        // known, so each stays with its own CPU.
        assert_eq!(
            package_readers(&[0, 2], &topo(&[&[0, 1, 2, 3]], &[0, 1, 2, 3])),
            [(0, vec![0]), (2, vec![2])]
        );
        // A cpumask CPU outside the known packages still reads its own counter.
        assert_eq!(package_readers(&[9], &t), [(9, vec![9])]);
    }
}
