//! The sampling loop that `imc top` and `imc record` share: which counters the tick reads
//! (`-e` events, else the memory controller's read/write counters, else a labelled stand-in) and
//! the loop that drains the sampler into the attributor and hands each interval to a [`Sink`].
use crate::attribution::Attributor;
use crate::cli::{GlobalArgs, SamplerArgs};
use crate::discovery;
use crate::error::{CliError, CliResult};
use crate::model::{BackendKind, Direction, Discovery, Encoded, SlotRole, SlotScope, SlotSpec};
use crate::output::interval::IntervalResult;
use crate::sampler::{Sampler, SamplerConfig, SlotPlan, may_multiplex};
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
/// msr), else package scope, opened on the PMU's designated CPUs and read there.
fn plan_for(e: &Encoded, role: SlotRole, counter_bits: u8, online: &[u32]) -> SlotPlan {
    let (scope, instances) = match &e.cpus {
        Some(cpus) if !cpus.is_empty() => (
            SlotScope::Package,
            cpus.iter().map(|&c| (c, vec![c])).collect(),
        ),
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

fn too_many(n: usize) -> CliError {
    CliError::bad_input(format!(
        "{n} counters to read per tick, at most {}: name fewer with -e",
        imc_common::MAX_SLOTS
    ))
}

/// Chooses the slots from `-e`, the memory controller, or a stand-in.
pub fn select(global: &GlobalArgs, args: &SamplerArgs, found: &Discovery) -> CliResult<Selection> {
    let online = &found.topology.online;
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
                plans.push(plan_for(&e, role, bits, online));
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
                online,
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
        online,
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

/// Drains the sampler every 10 ms into the attributor and hands each interval to the sink,
/// until --duration, the command's exit, SIGINT or SIGTERM. The sampler is dropped (everything
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
        drain_period_ms: 10,
        bpf_log: global.verbose >= 2,
        tick_program: Default::default(),
    };
    let mut sampler = Sampler::start(&cfg).map_err(|e| CliError::runtime(e.to_string()))?;
    let specs: Vec<SlotSpec> = sampler.slots().to_vec();
    let mut attr =
        Attributor::new(&specs, &found.topology, sel.source.clone()).tick_hz(args.sampler.freq);
    let pkg_slots: Vec<(usize, u32, u32)> = sel
        .plans
        .iter()
        .enumerate()
        .filter(|(_, p)| p.spec.scope == SlotScope::Package)
        .flat_map(|(s, p)| {
            p.instances
                .iter()
                .map(move |(cpu, _)| (s, *cpu, found.topology.package_of(*cpu).unwrap_or(0)))
        })
        .collect();

    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("SIGTERM handler: {e}")))?;
    let interval = Duration::from_millis(args.interval_ms);
    let mut drain_tick = tokio::time::interval(Duration::from_millis(10));
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = tokio::time::Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut next_report = start + interval;
    let mut lost_seen = 0u64;
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
            st = child_done => (true, st),
        };
        if let Some(st) = status {
            use std::os::unix::process::ExitStatusExt;
            let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
            exit = ExitCode::from(code.clamp(0, 255) as u8);
            child = None;
        }
        let now = tokio::time::Instant::now();
        let finished = stop || deadline.is_some_and(|d| now >= d);
        sampler.drain(|r| {
            attr.push_tick(r);
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
            // Package counters are also read from userspace at each interval end, so traffic
            // while every CPU of a package idles (and barely ticks) is not lost.
            let t = now_ns();
            for &(slot, cpu, pkg) in &pkg_slots {
                if let Ok(v) = sampler.read_counter(slot, cpu) {
                    attr.push_package_read(pkg, slot, t, v.value);
                }
            }
            if let Ok(st) = sampler.stats() {
                let lost = st.lost();
                attr.add_lost_samples(lost.saturating_sub(lost_seen));
                lost_seen = lost;
            }
            let result = if finished {
                attr.finish(t)
            } else {
                attr.close_interval(t)
            };
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
    drop(sampler);
    if let Some(mut c) = child {
        // Stopped by signal or --duration while the command still runs: leave it running?
        // No: like perf, the measured command ends with the measurement.
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    Ok(exit)
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid to write; CLOCK_MONOTONIC is what bpf_ktime_get_ns reads.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
