//! `cargo xtask bench-tick`: the cost of imc's tick program per run against a baseline program
//! doing what bpftrace's `profile:hz:1000 { @[pid] = count(); }` does, measured in the same run
//! with the kernel's BPF run-time statistics (run_time_ns / run_cnt), alternating the two.
//!
//! Both run at 1000 Hz on every CPU with the CPUs kept busy (an idle CPU barely ticks); imc's
//! tick reads 2 counter slots (msr/tsc/ and page-faults, the VM's stand-ins for the memory
//! controller's read and write counters).
use imc::model::{Encoded, SlotRole, SlotScope, SlotSpec};
use imc::sampler::{Sampler, SamplerConfig, SlotPlan, TickProgram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    imc::discovery::cpulist::parse_cpulist(&text).unwrap_or_else(|_| vec![0])
}

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

fn measure(
    program: TickProgram,
    slots: &[SlotPlan],
    cpus: &[u32],
    secs: f64,
) -> Result<(f64, u64), String> {
    let cfg = SamplerConfig {
        freq: 1000,
        slots: slots.to_vec(),
        cpus: cpus.to_vec(),
        precise: false,
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: program,
    };
    let mut s = Sampler::start(&cfg).map_err(|e| format!("starting {program:?}: {e}"))?;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut records = 0usize;
    while Instant::now() < end {
        records += s.drain(|_| {});
        std::thread::sleep(Duration::from_millis(10));
    }
    records += s.drain(|_| {});
    let (time, runs) = s
        .tick_run_stats()
        .map_err(|e| format!("run statistics of {program:?}: {e}"))?;
    if program == TickProgram::Imc && records as u64 + 2 * cpus.len() as u64 * 20 < runs {
        return Err(format!(
            "imc tick ran {runs} times but only {records} records were drained"
        ));
    }
    if runs == 0 {
        return Err("the tick never ran (CPUs idle?)".into());
    }
    Ok((time.as_nanos() as f64 / runs as f64, runs))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-tick: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let secs: f64 = std::env::var("IMC_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let rounds: usize = std::env::var("IMC_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let cpus = online_cpus();
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
    let slots = vec![
        slot("msr/tsc/", &tsc, &cpus),
        slot("page-faults", &pf, &cpus),
    ];

    // Keep every CPU busy: cpu-clock barely fires on an idle CPU.
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = cpus
        .iter()
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

    let _stats = imc::sys::bpf::enable_run_time_stats()
        .map_err(|e| format!("BPF_ENABLE_STATS: {e} (needs root)"))?;
    println!(
        "bench-tick: {} CPUs, 1000 Hz, {secs} s per measurement, {rounds} rounds alternating",
        cpus.len()
    );
    println!(
        "{:>6} {:>22} {:>22}",
        "round", "imc tick (2 slots)", "baseline @[pid]=count()"
    );
    let (mut imc_sum, mut base_sum) = (0.0, 0.0);
    for round in 1..=rounds {
        // Alternate the order each round so drift on a shared machine hits both alike.
        let order = if round % 2 == 1 {
            [TickProgram::Imc, TickProgram::BaselinePidCount]
        } else {
            [TickProgram::BaselinePidCount, TickProgram::Imc]
        };
        let mut got = [(0.0, 0u64); 2];
        for p in order {
            let m = measure(p, &slots, &cpus, secs)?;
            got[(p == TickProgram::BaselinePidCount) as usize] = m;
        }
        println!(
            "{round:>6} {:>14.1} ns/run ({:>6}) {:>11.1} ns/run ({:>6})",
            got[0].0, got[0].1, got[1].0, got[1].1
        );
        imc_sum += got[0].0;
        base_sum += got[1].0;
    }
    stop.store(true, Ordering::Relaxed);
    for t in spinners {
        let _ = t.join();
    }
    let (imc_mean, base_mean) = (imc_sum / rounds as f64, base_sum / rounds as f64);
    println!(
        "mean: imc {imc_mean:.1} ns/run, baseline {base_mean:.1} ns/run, ratio imc/baseline = {:.2} (target <= 0.50)",
        imc_mean / base_mean
    );
    Ok(())
}
