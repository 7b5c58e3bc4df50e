//! `cargo xtask bench-tick`: the cost of imc's tick program per run against a baseline program
//! doing what bpftrace's `profile:hz:1000 { @[pid] = count(); }` does, measured in the same run
//! with the kernel's BPF run-time statistics (run_time_ns / run_cnt), alternating the two.
//!
//! Both run at 1000 Hz on every CPU with the CPUs kept busy (an idle CPU barely ticks); imc's
//! tick reads 2 counter slots (msr/tsc/ and page-faults, the VM's stand-ins for the memory
//! controller's read and write counters).
//!
//! It also measures what package counters cost: a workload CPU's tick (it reads none of them:
//! the same ns with 2, 16 and 48) and the reader's tick (it reads all of its package's: grows
//! with their number), with `msr/tsc/` opened 2, 16 and 48 times per CPU as stand-ins for a
//! server's channel counters. The benchmark's eBPF object (`cargo xtask bench-tick` builds it
//! with the `bench` feature) carries the baseline and the probes.
//!
//! `--breakdown` also measures cost probes (an empty program, the task ids, the clock, one
//! counter read) so the figures say where the tick's time goes.
use imc::discovery::topology::online_cpus;
use imc::model::{Encoded, SlotRole, SlotScope, SlotSpec, StallPart};
use imc::sampler::{
    PackageCounter, ReaderGroup, Sampler, SamplerConfig, SlotPlan, TickProgram, TickSource,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn slot(event: &str, e: &Encoded, cpus: &[u32]) -> SlotPlan {
    let spec = SlotSpec {
        event: event.into(),
        scope: SlotScope::Cpu,
        role: SlotRole::Other,
        bytes_per_count: None,
        counter_bits: 64,
    };
    SlotPlan::per_cpu(spec, e, cpus)
}

/// One thing to time: a program, and how many package counters per CPU (`readers`: each CPU
/// reads its own group at every tick; else no CPU reads them, as on a workload CPU).
#[derive(Clone, Copy, Debug)]
struct Variant {
    label: &'static str,
    program: TickProgram,
    package_counters: usize,
    readers: bool,
    /// Per-CPU weight slots read besides the two (the traffic weights: up to a local read, a
    /// remote read and a write weight; page-faults stands in for a core event here).
    weights: usize,
    /// Per-CPU stall slots read besides those (the victims' stall pair: the cycles stalled on
    /// memory, then the cycles; page-faults stands in for both).
    stalls: usize,
}

/// `n` stand-in package counters per CPU, each CPU its own "package".
fn groups(tsc: &Encoded, cpus: &[u32], n: usize, readers: bool, slot: usize) -> Vec<ReaderGroup> {
    if n == 0 {
        return Vec::new();
    }
    cpus.iter()
        .map(|&c| ReaderGroup {
            package: c,
            readers: if readers { vec![c] } else { Vec::new() },
            counters: (0..n)
                .map(|i| PackageCounter {
                    slot,
                    open_cpu: c,
                    attr: imc::sampler::counting_attr(tsc),
                    name: format!("msr/tsc/#{i}"),
                    channel: format!("msr/tsc/#{i}"),
                })
                .collect(),
        })
        .collect()
}

fn measure(
    v: Variant,
    slots: &[SlotPlan],
    tsc: &Encoded,
    cpus: &[u32],
    secs: f64,
) -> Result<(f64, u64), String> {
    let program = v.program;
    let mut slots = slots.to_vec();
    for i in 0..v.weights {
        let mut w = slots[1].clone();
        w.spec.event = format!("weight {i}");
        w.spec.role = SlotRole::Weight(None);
        slots.push(w);
    }
    for i in 0..v.stalls {
        let mut w = slots[1].clone();
        let part = if i == 0 {
            StallPart::Stalled
        } else {
            StallPart::Cycles
        };
        w.spec.event = format!("stall {}", part.as_str());
        w.spec.role = SlotRole::Stall(part);
        slots.push(w);
    }
    if v.package_counters > 0 {
        slots.push(SlotPlan::package(SlotSpec {
            event: "package".into(),
            scope: SlotScope::Package,
            role: SlotRole::Other,
            bytes_per_count: None,
            counter_bits: 64,
        }));
    }
    let cfg = SamplerConfig {
        tick: TickSource::CpuClock {
            freq: 1000,
            switches: false,
        },
        groups: groups(tsc, cpus, v.package_counters, v.readers, slots.len() - 1),
        slots,
        cpus: cpus.to_vec(),
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: program,
        aggregate: false,
        stacks: None,
    };
    let mut s = Sampler::start(&cfg)
        .map_err(|e| format!("starting {program:?}: {}", imc::text::error_line(&e)))?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut records = 0usize;
    while Instant::now() < end {
        records += s.drain(|_| {});
        std::thread::sleep(Duration::from_millis(10));
    }
    records += s.drain(|_| {});
    let (time, runs) = s.tick_run_stats().map_err(|e| {
        format!(
            "run statistics of {program:?}: {}",
            imc::text::error_line(&e)
        )
    })?;
    // A record a run, drained or overwritten (this process starved on a loaded machine).
    let lost = s.stats().map_or(0, |st| st.lost());
    if program == TickProgram::Imc && records as u64 + lost + 2 * cpus.len() as u64 * 20 < runs {
        return Err(format!(
            "imc tick ran {runs} times but only {records} records were drained and {lost} lost"
        ));
    }
    if runs == 0 {
        return Err("the tick never ran (CPUs idle?)".into());
    }
    Ok((time.as_nanos() as f64 / runs as f64, runs))
}

/// Cost probes in the eBPF object, each one piece of the tick alone (the first is the floor).
const PROBES: [(&str, &str); 5] = [
    ("probe_empty", "empty program (floor)"),
    ("probe_task", "cpu + pid/tgid"),
    ("probe_clock", "bpf_ktime_get_ns"),
    ("probe_read", "read msr/tsc/ (slot 0)"),
    ("probe_read_sw", "read page-faults (slot 1)"),
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Standard error of the mean of `v`.
fn std_error(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    if v.len() < 2 {
        return f64::NAN;
    }
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (var / n).sqrt()
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-tick: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let secs: f64 = env_or("IMC_BENCH_SECONDS", 2.0);
    let rounds: usize = env_or("IMC_BENCH_ROUNDS", 5);
    let breakdown = std::env::args().any(|a| a == "--breakdown");
    let cpus = online_cpus(Path::new("/")).unwrap_or_else(|_| vec![0]);
    let (tsc, slots) = counters(&cpus)?;
    let spinners = Spinners::start(cpus.len());
    let _stats = imc::sys::bpf::enable_run_time_stats()
        .map_err(|e| format!("BPF_ENABLE_STATS: {e} (needs root)"))?;
    println!(
        "bench-tick: {} CPUs, 1000 Hz, {secs} s per measurement, {rounds} rounds alternating",
        cpus.len()
    );
    let (programs, probes_at) = variants(breakdown);
    let mut samples = measure_rounds(&programs, rounds, |v| {
        measure(v, &slots, &tsc, &cpus, secs).map(|m| m.0)
    })?;
    drop(spinners);
    let stderr: Vec<f64> = samples.iter().map(|v| std_error(v)).collect();
    let med: Vec<f64> = samples.iter_mut().map(|v| median(v)).collect();
    print_summary(&programs, probes_at, &med, &stderr);
    if breakdown {
        print_breakdown(&med, probes_at);
    }
    Ok(())
}

/// A positive number from the environment, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The two counters every variant reads per CPU: msr/tsc/ (the package slot) and page-faults.
fn counters(cpus: &[u32]) -> Result<(Encoded, Vec<SlotPlan>), String> {
    let msr_type: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/msr/type")
        .map_err(|e| format!("no msr PMU ({e}): this benchmark reads msr/tsc/"))?
        .trim()
        .parse()
        .map_err(|_| "msr/type is not a number".to_string())?;
    let tsc = Encoded {
        event: "msr/tsc/".into(),
        pmu: "msr".into(),
        pmu_type: msr_type,
        ..Default::default()
    };
    let pf = Encoded {
        event: "page-faults".into(),
        pmu: "software".into(),
        pmu_type: 1,
        config: 2,
        ..Default::default()
    };
    let slots = vec![slot("msr/tsc/", &tsc, cpus), slot("page-faults", &pf, cpus)];
    Ok((tsc, slots))
}

/// One busy thread per CPU for as long as it lives: cpu-clock barely fires on an idle CPU.
struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    fn start(n: usize) -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Every program measured: imc's tick and the baseline first, then package counters on a
/// workload CPU and a reader, weights, and (with `--breakdown`) the probes, which start at the
/// returned index.
fn variants(breakdown: bool) -> (Vec<Variant>, usize) {
    let plain = |label, program| Variant {
        label,
        program,
        package_counters: 0,
        readers: false,
        weights: 0,
        stalls: 0,
    };
    let mut programs = vec![
        plain("imc tick", TickProgram::Imc),
        plain("baseline @[pid]=count()", TickProgram::BaselinePidCount),
    ];
    for (n, workload, reader) in [
        (2, "workload CPU, 2 pkg counters", "reader, 2 pkg counters"),
        (
            16,
            "workload CPU, 16 pkg counters",
            "reader, 16 pkg counters",
        ),
        (
            48,
            "workload CPU, 48 pkg counters",
            "reader, 48 pkg counters",
        ),
    ] {
        for (label, readers) in [(workload, false), (reader, true)] {
            programs.push(Variant {
                label,
                program: TickProgram::Imc,
                package_counters: n,
                readers,
                weights: 0,
                stalls: 0,
            });
        }
    }
    // A workload CPU of a plan with weights: its 2 package slots unread, three weight slots
    // read at every tick (what the weights cost beside the figure above).
    programs.push(Variant {
        label: "workload CPU, 2 pkg + 3 weights",
        program: TickProgram::Imc,
        package_counters: 2,
        readers: false,
        weights: 3,
        stalls: 0,
    });
    // The same with the victims' stall pair beside the weights (one stall counter must cost
    // no more than a counter read, which the weights' figure gives).
    programs.push(Variant {
        label: "workload CPU, 2 pkg + 3 weights + stall pair",
        program: TickProgram::Imc,
        package_counters: 2,
        readers: false,
        weights: 3,
        stalls: 2,
    });
    let probes_at = programs.len();
    if breakdown {
        programs.extend(
            PROBES
                .iter()
                .map(|(name, what)| plain(what, TickProgram::Probe(name))),
        );
    }
    (programs, probes_at)
}

/// Each round runs every variant once, in an order rotated per round, so drift on a shared
/// machine hits all alike; the median over rounds resists the outliers a noisy host makes.
/// Returns each variant's ns/run per round, printing imc's and the baseline's as it goes.
fn measure_rounds(
    programs: &[Variant],
    rounds: usize,
    mut measure: impl FnMut(Variant) -> Result<f64, String>,
) -> Result<Vec<Vec<f64>>, String> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); programs.len()];
    println!(
        "{:>6} {:>22} {:>26}",
        "round", "imc tick (2 slots)", "baseline @[pid]=count()"
    );
    for round in 0..rounds {
        for k in 0..programs.len() {
            let i = (k + round) % programs.len();
            samples[i].push(measure(programs[i])?);
        }
        println!(
            "{:>6} {:>15.1} ns/run {:>19.1} ns/run",
            round + 1,
            samples[0][round],
            samples[1][round]
        );
    }
    Ok(samples)
}

/// imc against the baseline, then the package counters' and the weights' costs.
fn print_summary(programs: &[Variant], probes_at: usize, med: &[f64], stderr: &[f64]) {
    let (imc, base) = (med[0], med[1]);
    println!(
        "median: imc {imc:.1} ± {:.1} ns/run, baseline {base:.1} ± {:.1} ns/run, ratio imc/baseline = {:.2}",
        stderr[0],
        stderr[1],
        imc / base
    );
    println!(
        "package counters (median ns/run ± standard error of the mean; ratio to imc's tick without them; flat = a workload CPU's tick costs the same whatever the number of channels):"
    );
    for i in 2..probes_at {
        println!(
            "{:>44} {:>9.1} ± {:>5.1} {:>8.2}",
            programs[i].label,
            med[i],
            stderr[i],
            med[i] / imc
        );
    }
    let at = |label: &str| {
        programs
            .iter()
            .position(|v| v.label == label)
            .map(|i| med[i])
    };
    if let (Some(w2), Some(w48)) = (
        at("workload CPU, 2 pkg counters"),
        at("workload CPU, 48 pkg counters"),
    ) {
        println!(
            "flatness: a workload CPU's tick with 48 package counters / with 2 = {:.2} (its \
             cost must not follow the channels)",
            w48 / w2
        );
    }
    if let (Some(w2), Some(ww)) = (
        at("workload CPU, 2 pkg counters"),
        at("workload CPU, 2 pkg + 3 weights"),
    ) {
        println!(
            "weights: three per-CPU weight slots add {:.1} ns to a workload CPU's tick ({:.1} ns \
             a counter read)",
            ww - w2,
            (ww - w2) / 3.0
        );
        if let Some(ws) = at("workload CPU, 2 pkg + 3 weights + stall pair") {
            println!(
                "stalls: the stall pair (stalled cycles, cycles) adds {:.1} ns beside the weights \
                 ({:.1} ns a counter, against {:.1} ns a weight's read)",
                ws - ww,
                (ws - ww) / 2.0,
                (ww - w2) / 3.0
            );
        }
    }
}

/// `--breakdown`: each probe's cost above the empty program's floor.
fn print_breakdown(med: &[f64], probes_at: usize) {
    let (imc, base) = (med[0], med[1]);
    let med = &med[probes_at - 2..];
    let floor = med[2];
    println!("breakdown (median ns/run; cost = above the empty program's floor):");
    println!(
        "{:>34} {:>9} {:>9} {:>12}",
        "program", "ns/run", "cost", "/ baseline"
    );
    let mut rows: Vec<(&str, f64)> = vec![("imc tick", imc), ("baseline @[pid]=count()", base)];
    rows.extend(
        PROBES
            .iter()
            .zip(&med[2..])
            .map(|((_, what), m)| (*what, *m)),
    );
    for (what, m) in rows {
        println!("{what:>34} {m:>9.1} {:>9.1} {:>12.2}", m - floor, m / base);
    }
}
