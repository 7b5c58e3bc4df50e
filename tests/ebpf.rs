//! The eBPF tick sampler for real, on this machine: load, attach to cpu-clock on every CPU, read
//! a counting-only system-wide PMU (`msr/tsc/`) and a software counter through the same path
//! that reads `uncore_imc` on hardware, and leave nothing loaded.
use imc::model::{Encoded, SlotRole, SlotScope, SlotSpec};
use imc::sampler::{Sampler, SamplerConfig, SlotPlan};
use imc_common::TickRecord;
use imc_tests::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn msr_tsc() -> Encoded {
    let ty = std::fs::read_to_string("/sys/bus/event_source/devices/msr/type")
        .expect("this machine kind has the msr PMU")
        .trim()
        .parse()
        .expect("msr type");
    Encoded {
        event: "msr/tsc/".into(),
        pmu: "msr".into(),
        pmu_type: ty,
        config: 0,
        ..Default::default()
    }
}

fn spec(event: &str) -> SlotSpec {
    SlotSpec {
        event: event.into(),
        scope: SlotScope::Cpu,
        role: SlotRole::Other,
        bytes_per_count: None,
        counter_bits: 64,
    }
}

fn config(slots: Vec<SlotPlan>, cpus: &[u32], freq: u32) -> SamplerConfig {
    SamplerConfig {
        freq,
        slots,
        cpus: cpus.to_vec(),
        precise: false,
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: Default::default(),
    }
}

/// Drains for `dur` while every CPU is kept busy; returns all records.
fn collect(s: &mut Sampler, dur: Duration) -> Vec<TickRecord> {
    let _spin = Spinners::start(online_cpus().len());
    let mut recs = Vec::new();
    let end = Instant::now() + dur;
    while Instant::now() < end {
        s.drain(|r| recs.push(*r));
        std::thread::sleep(Duration::from_millis(10));
    }
    s.drain(|r| recs.push(*r));
    recs
}

#[test]
fn tsc_read_in_the_tick_matches_read_of_the_same_fd() {
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    let tsc = msr_tsc();
    let plan = SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, &cpus);
    let mut s = Sampler::start(&config(vec![plan], &cpus, 1000)).expect("sampler starts");
    let secs = 1.5;
    let recs = collect(&mut s, Duration::from_secs_f64(secs));

    // Ticks on every busy CPU, close to the asked rate.
    let mut by_cpu: BTreeMap<u32, Vec<&TickRecord>> = BTreeMap::new();
    for r in &recs {
        by_cpu.entry(r.cpu).or_default().push(r);
    }
    for &cpu in &cpus {
        let n = by_cpu.get(&cpu).map_or(0, Vec::len);
        assert!(
            n as f64 >= 0.5 * 1000.0 * secs,
            "CPU {cpu}: only {n} ticks in {secs}s at 1000 Hz"
        );
    }
    let stats = s.stats().unwrap();
    assert_eq!(stats.read_errors(0), 0, "read errors: {stats:?}");
    assert_eq!(stats.lost(), 0, "lost records: {stats:?}");
    assert!(recs.iter().all(|r| r.failed_mask == 0 && r.nr_slots == 1));

    for &cpu in &cpus {
        let ticks = &by_cpu[&cpu];
        let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
        // The counter is monotonic and runs the whole time (counting-only, never multiplexed).
        assert!(
            ticks
                .windows(2)
                .all(|w| w[1].slots[0].value >= w[0].slots[0].value)
        );
        assert!(last.slots[0].running > 0 && last.slots[0].running == last.slots[0].enabled);
        assert!(
            ticks.iter().all(|t| t.comm_bytes().len() > 0),
            "every record names its task"
        );
        // TSC rate as the ticks saw it.
        let rate =
            (last.slots[0].value - first.slots[0].value) as f64 / (last.t_ns - first.t_ns) as f64;
        assert!(rate > 0.1, "tsc rate {rate} cycles/ns on CPU {cpu}");
        // Now read the same fd from userspace and compare with the value the last tick
        // predicts for this moment. The window between the two clock reads bounds the drift.
        let t0 = monotonic_ns();
        let v = s.read_counter(0, cpu).expect("read() of the slot's fd");
        let t1 = monotonic_ns();
        let predicted_lo = last.slots[0].value as f64 + (t0 - last.t_ns) as f64 * rate;
        let predicted_hi = last.slots[0].value as f64 + (t1 - last.t_ns) as f64 * rate;
        // Allow 0.5% of the span since the last tick plus 50 µs of cycles for the read itself.
        let slack = 0.005 * (t1 - last.t_ns) as f64 * rate + 50_000.0 * rate;
        let got = v.value as f64;
        assert!(
            got >= predicted_lo - slack && got <= predicted_hi + slack,
            "CPU {cpu}: read() gave {got}, ticks predict {predicted_lo}..{predicted_hi} (±{slack})"
        );
    }
}

#[test]
fn dropping_the_sampler_leaves_no_program_loaded() {
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    let pf = Encoded {
        event: "page-faults".into(),
        pmu: "software".into(),
        pmu_type: 1,
        config: 2,
        ..Default::default()
    };
    let plan = SlotPlan::per_cpu(spec("page-faults"), &pf, &cpus);
    let mut cfg = config(vec![plan], &cpus, 100);
    cfg.precise = true;
    let s = Sampler::start(&cfg).expect("sampler starts");
    let ids = s.program_ids();
    assert_eq!(ids.len(), 2, "tick and switch programs: {ids:?}");
    let loaded = loaded_imc_programs();
    assert!(
        ids.iter().all(|id| loaded.contains(&u64::from(*id))),
        "{ids:?} not in {loaded:?}"
    );
    drop(s);
    let after = loaded_imc_programs();
    assert!(
        ids.iter().all(|id| !after.contains(&u64::from(*id))),
        "still loaded after drop: {after:?}"
    );
}

#[test]
fn precise_mode_records_context_switches() {
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    let tsc = msr_tsc();
    let mut cfg = config(
        vec![SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, &cpus)],
        &cpus,
        100,
    );
    cfg.precise = true;
    let mut s = Sampler::start(&cfg).expect("sampler starts");
    // More spinners than CPUs force switches between them.
    let _extra = Spinners::start(cpus.len() * 2);
    let recs = collect(&mut s, Duration::from_millis(500));
    let switches = recs
        .iter()
        .filter(|r| r.kind == imc_common::KIND_SWITCH)
        .count();
    let ticks = recs
        .iter()
        .filter(|r| r.kind == imc_common::KIND_TIMER)
        .count();
    assert!(
        switches > 0 && ticks > 0,
        "{switches} switch records, {ticks} tick records"
    );
    // The switch record names the task switched out, which was running: never a zero counter.
    assert!(
        recs.iter()
            .filter(|r| r.kind == imc_common::KIND_SWITCH)
            .all(|r| r.slots[0].value > 0)
    );
}
