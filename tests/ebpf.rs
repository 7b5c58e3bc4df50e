//! The eBPF tick sampler for real, on this machine: load, attach to cpu-clock on every CPU, read
//! a counting-only system-wide PMU (`msr/tsc/`) and a software counter through the same path
//! that reads `uncore_imc` on hardware, and leave nothing loaded.
use imc::model::{Encoded, SlotRole, SlotScope, SlotSpec};
use imc::sampler::{
    PackageCounter, ReaderGroup, Sampler, SamplerConfig, SlotPlan, TickSource, counting_attr,
};
use imc_common::Record;
use imc_tests::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Sampler tests measure the whole machine (ticks, page faults, CPU time, loaded programs), so
/// they run one at a time rather than disturbing each other.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

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
        tick: TickSource::CpuClock {
            freq,
            switches: false,
        },
        slots,
        groups: Vec::new(),
        cpus: cpus.to_vec(),
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: Default::default(),
        aggregate: false,
        stacks: None,
    }
}

/// The TSC on every CPU, on a 100 Hz cpu-clock tick and at every context switch.
fn tsc_with_switches(cpus: &[u32]) -> SamplerConfig {
    let tsc = msr_tsc();
    let mut cfg = config(
        vec![SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, cpus)],
        cpus,
        100,
    );
    cfg.tick = TickSource::CpuClock {
        freq: 100,
        switches: true,
    };
    cfg
}

/// Drains for `dur` while every CPU is kept busy; returns all records.
fn collect(s: &mut Sampler, dur: Duration) -> Vec<Record> {
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
    let _machine = exclusive();
    let cpus = online_cpus();
    let tsc = msr_tsc();
    let plan = SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, &cpus);
    let mut s = Sampler::start(&config(vec![plan], &cpus, 1000)).expect("sampler starts");
    let secs = 1.5;
    let recs = collect(&mut s, Duration::from_secs_f64(secs));

    // Ticks on every busy CPU, close to the asked rate.
    let mut by_cpu: BTreeMap<u32, Vec<&Record>> = BTreeMap::new();
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
            ticks.iter().all(|t| !t.comm_bytes().is_empty()),
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
    let _machine = exclusive();
    let cpus = online_cpus();
    let pf = page_faults();
    let plan = SlotPlan::per_cpu(spec("page-faults"), &pf, &cpus);
    let mut cfg = config(vec![plan], &cpus, 100);
    cfg.tick = TickSource::CpuClock {
        freq: 100,
        switches: true,
    };
    let s = Sampler::start(&cfg).expect("sampler starts");
    let ids = s.program_ids();
    assert_eq!(ids.len(), 3, "tick, switch and exec programs: {ids:?}");
    let loaded = loaded_imc_programs();
    assert!(
        ids.iter().all(|id| loaded.contains(&u64::from(*id))),
        "{ids:?} not in {loaded:?}"
    );
    drop(s);
    // The kernel frees programs after an RCU grace period, so give it a moment.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let after = loaded_imc_programs();
        if ids.iter().all(|id| !after.contains(&u64::from(*id))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still loaded 3 s after drop: {ids:?} in {after:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The program's aya-log lines, as the `log` crate hands them on (imc prints them under -vv).
struct Captured(std::sync::Mutex<Vec<String>>);

impl log::Log for Captured {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURED: Captured = Captured(std::sync::Mutex::new(Vec::new()));

#[test]
fn a_package_counter_its_reader_cannot_read_is_said_once_and_counted_always() {
    let _x = exclusive();
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    if !require(cpus.len() >= 2, "needs two CPUs") {
        return;
    }
    let _ = log::set_logger(&CAPTURED);
    log::set_max_level(log::LevelFilter::Trace);
    // A system-wide counter opened on CPU 0 that CPU 1's ticks are (wrongly) made to read:
    // the kernel refuses a per-CPU event on another CPU (perf_event_read_local).
    let pf = page_faults();
    let package = SlotSpec {
        scope: SlotScope::Package,
        ..spec("page-faults@cpu0")
    };
    let mut cfg = config(vec![SlotPlan::package(package)], &cpus, 1);
    cfg.tick = TickSource::Kernel;
    cfg.bpf_log = true;
    cfg.groups = vec![ReaderGroup {
        package: 0,
        readers: vec![1],
        counters: vec![PackageCounter {
            slot: 0,
            open_cpu: 0,
            attr: counting_attr(&pf),
            name: "page-faults@cpu0".into(),
            channel: "cpu0".into(),
        }],
    }];
    let mut s = Sampler::start(&cfg).expect("sampler starts");
    let _ = collect(&mut s, Duration::from_millis(800));
    let stats = s.stats().unwrap();
    drop(s);
    let cpu1 = stats.per_cpu.iter().find(|c| c.cpu == 1).unwrap();
    assert!(cpu1.read_errors[0] > 1, "counted at every read: {cpu1:?}");
    let lines: Vec<String> = CAPTURED
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("cannot read package counter"))
        .cloned()
        .collect();
    assert_eq!(
        lines,
        ["CPU 1 cannot read package counter 0 (slot 0): error 22"],
        "said once, with the kernel's errno"
    );
}

#[test]
fn the_kernel_tick_runs_the_program_on_busy_cpus_without_a_timer_of_imcs_own() {
    let _x = exclusive();
    if !sampler_prerequisites() {
        return;
    }
    let cpus = online_cpus();
    let tsc = msr_tsc();
    let mut cfg = config(
        vec![SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, &cpus)],
        &cpus,
        1,
    );
    cfg.tick = TickSource::Kernel;
    let mut s = Sampler::start(&cfg).expect("sampler starts on the kernel's tick");
    let attached = s.attached().clone();
    assert!(!attached.adds_interrupts, "{attached:?}");
    assert!(attached.source.starts_with("tracepoint:"), "{attached:?}");
    let recs = collect(&mut s, Duration::from_millis(1000));
    // A busy CPU ticks at HZ (100 to 1000): at least 50 timer records each in a second.
    for &cpu in &cpus {
        let timers = recs
            .iter()
            .filter(|r| r.cpu == cpu && r.kind == imc_common::KIND_TICK)
            .count();
        assert!(timers >= 50, "CPU {cpu}: {timers} timer records in 1 s");
    }
    assert!(
        recs.iter().any(|r| r.kind == imc_common::KIND_SWITCH),
        "context switches are recorded too"
    );
}

#[test]
fn precise_mode_records_context_switches() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let cfg = tsc_with_switches(&cpus);
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
        .filter(|r| r.kind == imc_common::KIND_TICK)
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

/// The unseen switch: a kernel may keep tracepoints from firing while some task runs. This VM
/// kind's traces no switch out of a task of its own (sched_switch shows switches to it, never from
/// it) and runs no program while it runs, so what it counted went to whatever ran next on the CPU
/// (1-48 page faults to a pure spinner in 10 of 25 `--precise` runs). The program finds such a
/// switch at the CPU's next run (the task running is not the `next` of the CPU's last switch) and
/// charges that slice to no task (pid 0). Each record here carries its CPU's `context-switches`
/// count, which the kernel keeps for every switch: between two runs of a CPU it grows by one for a
/// switch record (its own switch) and by nothing for a tick, so any more is a switch no program ran
/// at. Every record after one names no task, and the program's count of those runs
/// (STAT_UNSEEN_SWITCH) is the kernel's: none found where none happened.
#[test]
fn a_switch_no_program_saw_charges_its_slice_to_no_task() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let switches_event = Encoded {
        event: "context-switches".into(),
        pmu: "software".into(),
        pmu_type: imc::sys::perf::TYPE_SOFTWARE,
        // PERF_COUNT_SW_CONTEXT_SWITCHES (include/uapi/linux/perf_event.h).
        config: 3,
        ..Default::default()
    };
    let mut cfg = config(
        vec![SlotPlan::per_cpu(
            spec("context-switches"),
            &switches_event,
            &cpus,
        )],
        &cpus,
        100,
    );
    cfg.tick = TickSource::CpuClock {
        freq: 100,
        switches: true,
    };
    let mut s = Sampler::start(&cfg).expect("sampler starts");
    // More spinners than CPUs, and a thread that sleeps a millisecond at a time: switches of
    // every kind on every CPU.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sleeper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let _extra = Spinners::start(cpus.len() * 2);
    let mut recs = collect(&mut s, Duration::from_millis(2000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sleeper.join().unwrap();
    // Every run the statistics count is in the rings by now.
    let counted = s.stats().unwrap().unseen_switches();
    s.drain(|r| recs.push(*r));
    assert_eq!(s.lost_records(), 0, "records were overwritten unread");
    let mut last: BTreeMap<u32, (u64, bool)> = BTreeMap::new();
    let (mut runs, mut after_unseen, mut misnamed) = (0u64, 0u64, Vec::new());
    for r in &recs {
        assert_eq!(
            r.failed_mask, 0,
            "CPU {}: the count could not be read",
            r.cpu
        );
        let count = r.slots[0].value;
        let switch = r.kind == imc_common::KIND_SWITCH;
        if let Some((before, was_switch)) = last.insert(r.cpu, (count, switch)) {
            runs += 1;
            let unseen = count - before - u64::from(was_switch);
            if unseen > 0 {
                after_unseen += 1;
                if r.pid != 0 {
                    misnamed.push((r.cpu, r.pid, unseen));
                }
            }
        }
    }
    assert!(runs > 200, "only {runs} runs");
    assert!(
        misnamed.is_empty(),
        "records after switches no program ran at charge a task (cpu, pid, unseen): {misnamed:?}"
    );
    // The runs after the statistics were read may add one per CPU.
    assert!(
        counted <= after_unseen && after_unseen <= counted + cpus.len() as u64,
        "the program counted {counted} unseen switches, the kernel's count shows {after_unseen}"
    );
    eprintln!("{after_unseen} runs of {runs} followed a switch no program ran at");
}

#[test]
fn idle_and_woken_threads_are_named_in_every_record() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let cfg = tsc_with_switches(&cpus);
    // Every CPU's first records are of busy threads, so the idle task is first seen later,
    // after each CPU has described other tasks in full.
    let spinners = Spinners::start(cpus.len());
    let mut s = Sampler::start(&cfg).expect("sampler starts");
    std::thread::sleep(Duration::from_millis(100));
    drop(spinners);
    // A thread that sleeps a millisecond at a time: its CPU switches from the idle task (pid 0)
    // to it and back all the time, so records of the idle task come on every CPU it visits.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sleeper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut recs = Vec::new();
    let end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < end {
        s.drain(|r| recs.push(*r));
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sleeper.join().unwrap();
    s.drain(|r| recs.push(*r));
    let idle: Vec<&Record> = recs.iter().filter(|r| r.pid == 0).collect();
    assert!(
        !idle.is_empty(),
        "no record of the idle task in {} records",
        recs.len()
    );
    for r in &idle {
        let comm = String::from_utf8_lossy(r.comm_bytes()).into_owned();
        // Each CPU has its own idle task, all pid 0: the name is this CPU's.
        assert_eq!(
            comm,
            format!("swapper/{}", r.cpu),
            "CPU {}: the idle task's record names {comm:?}",
            r.cpu
        );
    }
    assert!(
        recs.iter().all(|r| !r.comm_bytes().is_empty()),
        "every record names its task"
    );
}

// ---- `imc top` end to end: the real binary, real programs, processes with known behaviour ----

/// Child roles, run by re-executing this test binary with IMC_TEST_ROLE set (a no-op otherwise).
#[test]
fn role_child() {
    let Ok(role) = std::env::var("IMC_TEST_ROLE") else {
        return;
    };
    let secs: f64 = std::env::var("IMC_TEST_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    match role.as_str() {
        // Touches fresh pages as fast as it can: every touch is a page fault.
        "toucher" => {
            let len = 8 << 20;
            while Instant::now() < end {
                touch_fresh_pages(len);
            }
        }
        // Touches fresh pages in bursts, the last second of every three: a recording has quiet
        // stretches and bursts whose cause is known, and one started 0.3 s after the role,
        // lasting a multiple of 3 s less 0.5, starts and ends in the quiet for any start-up of
        // 0.2 to 1.7 s.
        "bursty" => {
            let len = 8 << 20;
            let start = Instant::now();
            while Instant::now() < end {
                if !(2000..3000).contains(&(start.elapsed().as_millis() % 3000)) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                touch_fresh_pages(len);
            }
        }
        // Pure CPU, no memory allocation after start.
        "spinner" => spin_until(end),
        other => panic!("unknown role {other}"),
    }
}

fn spawn_role(role: &str, secs: f64) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["role_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("IMC_TEST_ROLE", role)
        .env("IMC_TEST_SECS", secs.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn role child")
}

/// Fields of /proc/PID/stat after the comm (0 = state).
fn stat_field(pid: u32, i: usize) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    after
        .split_whitespace()
        .nth(i)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// utime + stime of a process in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (stat_field(pid, 11) + stat_field(pid, 12)) / tck
}

/// Minor page faults of a process so far, as the kernel counts them.
fn minor_faults(pid: u32) -> f64 {
    stat_field(pid, 7)
}

#[test]
fn top_charges_page_faults_to_the_toucher_and_cpu_time_to_the_spinner() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let secs = 4.0;
    let mut toucher = spawn_role("toucher", secs + 2.0);
    let mut spinner = spawn_role("spinner", secs + 2.0);
    std::thread::sleep(Duration::from_millis(300));
    let spin_cpu0 = cpu_seconds(spinner.id());
    let (touch_f0, t0) = (minor_faults(toucher.id()), Instant::now());
    let imc_top = imc()
        .args([
            "top",
            "--json",
            "--duration",
            &secs.to_string(),
            "-e",
            "page-faults",
            "-e",
            "cpu-clock",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run imc top");
    let imc_pid = imc_top.id();
    let out = imc_top.wait_with_output().expect("imc top's output");
    let spin_cpu = cpu_seconds(spinner.id()) - spin_cpu0;
    // The toucher faults at a steady rate, so its true rate over imc's whole run (start-up
    // included) is comparable with the rate imc measured over its intervals.
    let true_rate = (minor_faults(toucher.id()) - touch_f0) / t0.elapsed().as_secs_f64();
    let _ = toucher.kill();
    let _ = spinner.kill();
    let _ = toucher.wait();
    let _ = spinner.wait();
    assert!(
        out.status.success(),
        "imc top failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut total_pf, mut toucher_pf, mut total_clock, mut spinner_clock, mut lost) =
        (0.0, 0.0, 0.0, 0.0, 0u64);
    let mut by_comm: BTreeMap<String, f64> = BTreeMap::new();
    let (mut window_ns, mut ours_pf) = (0u64, 0.0);
    let ours = [toucher.id(), spinner.id(), std::process::id(), imc_pid];
    let mut objects = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let o: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
        assert_eq!(o["source"], "events:page-faults,cpu-clock");
        objects += 1;
        lost += o["lost_samples"].as_u64().unwrap();
        window_ns += o["t_end_ns"].as_u64().unwrap() - o["t_start_ns"].as_u64().unwrap();
        for t in o["tasks"].as_array().unwrap() {
            let pf = t["values"]["page-faults"].as_f64().unwrap_or(0.0);
            let clock = t["values"]["cpu-clock"].as_f64().unwrap_or(0.0);
            total_pf += pf;
            total_clock += clock;
            *by_comm
                .entry(format!(
                    "{}:{}",
                    t["comm"].as_str().unwrap_or("?"),
                    t["tgid"]
                ))
                .or_default() += pf;
            let tgid = t["tgid"].as_u64().unwrap_or(0);
            // The test's own processes, and this imc itself (by its pid: another imc on the
            // machine is another program): faults elsewhere on a shared machine are real
            // faults of other programs, not misattributions.
            if ours.iter().any(|&p| u64::from(p) == tgid) {
                ours_pf += pf;
            }
            if t["tgid"].as_u64() == Some(u64::from(toucher.id())) {
                toucher_pf += pf;
            }
            if t["tgid"].as_u64() == Some(u64::from(spinner.id())) {
                spinner_clock += clock;
            }
        }
    }
    assert!(objects >= 3, "{objects} intervals in {secs} s");
    assert_eq!(lost, 0);
    assert!(total_pf > 10_000.0, "only {total_pf} page faults counted");
    let share = toucher_pf / ours_pf;
    let mut others: Vec<(String, f64)> = by_comm.into_iter().collect();
    others.sort_by(|a, b| b.1.total_cmp(&a.1));
    others.truncate(6);
    assert!(
        share >= 0.90,
        "toucher (tgid {}) got {:.1}% of the {ours_pf} page faults of the test's processes; largest: {others:?}",
        toucher.id(),
        share * 100.0
    );
    let imc_rate = toucher_pf / (window_ns as f64 / 1e9);
    assert!(
        (imc_rate / true_rate - 1.0).abs() <= 0.15,
        "toucher faults/s: imc {imc_rate:.0}, kernel {true_rate:.0}"
    );
    // cpu-clock counts ns of CPU time: the spinner's attributed amount is its on-CPU time.
    let spinner_secs = spinner_clock / 1e9;
    assert!(
        (spinner_secs - spin_cpu).abs() <= 0.25 * spin_cpu + 0.1,
        "spinner: imc says {spinner_secs:.2} s on CPU, the kernel says {spin_cpu:.2} s (of {:.2} s attributed in all)",
        total_clock / 1e9
    );
}

/// No count made before a task ran, or by another task, is charged to it. Two spinners that make no
/// page fault (the kernel's own per-task counters say how many they made) share the CPUs with a
/// toucher that faults as fast as it can; over each `imc top` run, aggregated and `--precise`, the
/// spinners are charged at most 10 page faults beyond their truth. The sampler attaches
/// sched_switch before the tick: a tick attached first would, until the switch program was verified
/// and attached, charge everything its CPU counted since the last tick to the task it interrupted,
/// hundreds of the toucher's faults to a spinner in interval 0.
#[test]
fn top_charges_no_task_with_page_faults_it_did_not_make() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    // Two intervals of 500 ms: the race is at the run's start, in its first interval.
    let secs = 1.0;
    for precise in [false, true] {
        for round in 0..3 {
            let mut toucher = spawn_role("toucher", secs + 3.0);
            let mut spinners = [
                spawn_role("spinner", secs + 3.0),
                spawn_role("spinner", secs + 3.0),
            ];
            // Past the spinners' start-up (its faults are theirs, before the truth counts).
            std::thread::sleep(Duration::from_millis(400));
            let truth: Vec<TaskPageFaults> = spinners
                .iter()
                .map(|c| TaskPageFaults::open(c.id()))
                .collect();
            let mut args = vec![
                "top",
                "--json",
                "-I",
                "500",
                "--duration",
                "1",
                "-e",
                "page-faults",
            ];
            if precise {
                args.push("--precise");
            }
            let out = imc().args(&args).output().expect("run imc top");
            let made: Vec<u64> = truth.iter().map(TaskPageFaults::read).collect();
            // Processes (tgid): a role runs in a thread of its test binary.
            let ids: Vec<u64> = spinners.iter().map(|c| u64::from(c.id())).collect();
            for c in spinners.iter_mut().chain([&mut toucher]) {
                let _ = c.kill();
                let _ = c.wait();
            }
            assert!(
                out.status.success(),
                "imc top failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut charged = vec![0.0; ids.len()];
            let mut by_interval = Vec::new();
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let o: serde_json::Value = serde_json::from_str(line).expect("one JSON object");
                let mut this = 0.0;
                for t in o["tasks"].as_array().unwrap() {
                    if let Some(i) = ids.iter().position(|&p| t["tgid"].as_u64() == Some(p)) {
                        let pf = t["values"]["page-faults"].as_f64().unwrap_or(0.0);
                        charged[i] += pf;
                        this += pf;
                    }
                }
                by_interval.push(this);
            }
            assert!(by_interval.len() >= 2, "{} intervals", by_interval.len());
            for i in 0..ids.len() {
                assert!(
                    charged[i] <= made[i] as f64 + 10.0,
                    "{} round {round}: spinner {} charged {} page faults, made {} (the \
                     spinners' charges by interval: {by_interval:?})",
                    if precise { "--precise" } else { "aggregated" },
                    ids[i],
                    charged[i],
                    made[i]
                );
            }
        }
    }
}

/// The page faults a report (or one of its bursts) charged to process `tgid`: its `tasks` rows.
fn page_faults_of(holder: &serde_json::Value, tgid: u64) -> f64 {
    holder["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["tgid"].as_u64() == Some(tgid))
        .map(|t| t["values"]["page-faults"].as_f64().unwrap_or(0.0))
        .sum()
}

/// The seconds a report spans.
fn span_of(v: &serde_json::Value) -> f64 {
    (v["t_end_ns"].as_u64().unwrap() - v["t_start_ns"].as_u64().unwrap()) as f64 / 1e9
}

/// The end-to-end case: `imc record` for 8.5 s (three bursts) at 1000 Hz through the real eBPF
/// path, beside a page-toucher that runs in bursts and a spinner, then `imc report` of the file
/// and of copies cut at three points (a crash mid-write).
#[test]
fn record_three_bursts_at_1000_hz_then_report_it_and_a_cut_copy() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.imc");
    let secs = 8.5;
    let mut toucher = spawn_role("bursty", secs + 3.0);
    let mut spinner = spawn_role("spinner", secs + 3.0);
    // The kernel's own counts of the two processes over imc's whole run: the truth the
    // recording is checked against (other programs on the machine fault as they like).
    std::thread::sleep(Duration::from_millis(300));
    let (touch_truth, spin_truth) = (
        TaskPageFaults::open(toucher.id()),
        TaskPageFaults::open(spinner.id()),
    );
    let out = imc()
        .args(["record", "-o"])
        .arg(&file)
        .args(["--freq", "1000", "-e", "page-faults", "--duration"])
        .arg(format!("{secs}"))
        .output()
        .expect("run imc record");
    let (touch_made, spin_made) = (touch_truth.read() as f64, spin_truth.read() as f64);
    assert!(
        spin_made < 1000.0,
        "the spinner made {spin_made} page faults"
    );
    let (toucher_id, spinner_id) = (u64::from(toucher.id()), u64::from(spinner.id()));
    for c in [&mut toucher, &mut spinner] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "imc record failed: {stderr}");
    assert!(stderr.contains("recorded"), "{stderr}");
    let size = std::fs::metadata(&file).unwrap().len();
    // Per-interval aggregates of a few tasks plus raw ticks around bursts: far below the
    // 50 MB per hour of 64 busy CPUs a recording may take (2 CPUs here, 8.5 s).
    assert!(size > 10_000 && size < 8 << 20, "recording is {size} bytes");

    let report = |path: &std::path::Path| {
        let o = imc()
            .arg("report")
            .arg(path)
            .arg("--json")
            .output()
            .expect("run imc report");
        assert!(
            o.status.success(),
            "imc report {}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        v
    };
    let v = report(&file);
    let span_s = span_of(&v);
    assert!((span_s - secs).abs() < 1.0, "report spans {span_s:.2} s");
    assert_eq!(v["source"], "events:page-faults");
    assert_eq!(v["lost_samples"].as_u64(), Some(0), "{}", v["lost_samples"]);
    let (touch, spin) = (
        page_faults_of(&v, toucher_id),
        page_faults_of(&v, spinner_id),
    );
    // A burst of 1 s every 3 s, each touching tens of thousands of fresh pages.
    assert!(
        touch > 2_000.0 * secs,
        "toucher got {touch} page faults in {secs} s"
    );
    // Against what the toucher made while imc ran (its start-up and end fall in the toucher's
    // quiet stretches, so the two spans hold the same bursts): the timer's ticks come on top of
    // the switches, so every fault is charged to the task that made it, and the bound catches
    // faults lost or counted twice.
    assert!(
        (0.9..=1.1).contains(&(touch / touch_made)),
        "toucher: recorded {touch} page faults, the kernel counted {touch_made}"
    );
    // A spinner sharing CPUs with the toucher makes no fault, and is charged none of the
    // toucher's: a finer timer never hands a tick's counts to whoever it interrupts.
    assert!(
        touch / (touch + spin) >= 0.999,
        "toucher {touch}, spinner {spin} page faults"
    );
    // Bursts are the machine's: another program faulting pages makes its own, and may lead
    // them. What is the test's to check: the toucher's on-phases show as bursts, and in each
    // of them the toucher leads the test's own processes (what it made there, not the spinner).
    let bursts = v["bursts"].as_array().unwrap();
    let with_toucher = bursts
        .iter()
        .filter(|b| page_faults_of(b, toucher_id) > 0.0)
        .count();
    assert!(
        with_toucher >= 1,
        "none of the {} bursts holds the toucher's on-phases",
        bursts.len()
    );
    for b in bursts {
        let (t, s) = (page_faults_of(b, toucher_id), page_faults_of(b, spinner_id));
        if t <= 0.0 {
            // Another program's burst.
            continue;
        }
        assert!(
            t >= s,
            "burst at {}: toucher {t}, spinner {s} page faults",
            b["t_start_ns"]
        );
    }

    // Cut copies (a crash mid-write) at a quarter, half and three quarters of the bytes: each
    // reports what was written before its cut, so a longer cut reports no less time and no
    // fewer faults, and every cut less than the whole file. Where in the run a byte offset
    // falls is the writer's to choose (raw ticks go to the bursts it has learnt to see, most
    // of them after its first 50 intervals), so the checks are on order, not on time shares.
    let bytes = std::fs::read(&file).unwrap();
    let mut before = (0.0, 0.0);
    for quarter in 1..=3 {
        let cut = dir.path().join(format!("cut-{quarter}.imc"));
        std::fs::write(&cut, &bytes[..bytes.len() * quarter / 4]).unwrap();
        let c = report(&cut);
        assert_eq!(
            c["t_start_ns"], v["t_start_ns"],
            "a cut copy starts where the file does"
        );
        let (cut_s, cut_touch) = (span_of(&c), page_faults_of(&c, toucher_id));
        assert!(
            cut_s > 0.0 && cut_s >= before.0 && cut_s < span_s,
            "{quarter}/4 of the file reports {cut_s:.2} s; {:.2} s before it, {span_s:.2} s in all",
            before.0
        );
        assert!(
            cut_touch >= before.1 && cut_touch <= touch,
            "{quarter}/4 of the file: toucher {cut_touch} faults; {} before it, {touch} in all",
            before.1
        );
        before = (cut_s, cut_touch);
    }
    assert!(
        before.1 > 0.0,
        "three quarters of the file hold none of the toucher's faults"
    );
}

/// The command of `record -- CMD` dies with imc, even when imc is killed with SIGKILL (it cannot
/// end the command itself then: the kernel does, through the parent-death signal the command was
/// started with).
#[test]
fn record_command_dies_when_imc_is_killed() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.imc");
    let mut imc_child = imc()
        .args(["record", "-o"])
        .arg(&file)
        .args(["-e", "page-faults", "--", "sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run imc record");
    let imc_pid = imc_child.id();
    // The command is started once the sampler runs: wait for imc's child.
    let deadline = Instant::now() + Duration::from_secs(20);
    let command = loop {
        let kids = children_of(imc_pid);
        if let Some(&pid) = kids.first() {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "imc record never started its command"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill has no memory preconditions; imc_pid is our own child, not yet waited for.
    unsafe { libc::kill(imc_pid as i32, libc::SIGKILL) };
    let _ = imc_child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    let alive = |pid: u32| {
        // Gone, or a zombie waiting for its new parent to reap it: not running either way.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        !matches!(state, None | Some("Z") | Some("X"))
    };
    while alive(command) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survived = alive(command);
    if survived {
        // SAFETY: as above; the pid is the survivor the assertion names.
        unsafe { libc::kill(command as i32, libc::SIGKILL) };
    }
    assert!(
        !survived,
        "the command (pid {command}) outlived imc (pid {imc_pid}) killed with SIGKILL"
    );
}

/// Children of a process, from /proc/PID/task/*/children.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `imc top --duration` exits on time and unloads what it loaded. The programs checked are the
/// child's own, by the ids its fds held while it ran (/proc/PID/fdinfo): an unrelated imc on the
/// machine (a `serve`, another test's sampler) holds others and cannot fail this test.
#[test]
fn top_exits_at_duration_with_nothing_left_loaded() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let _spin = Spinners::start(online_cpus().len());
    let mut cmd = imc();
    cmd.args(["top", "--json", "--duration", "1", "-e", "page-faults"]);
    let (out, mine) = run_collecting_bpf_programs(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() >= 1);
    // The tick and sched_switch programs, at least, were seen held by the child.
    assert!(mine.len() >= 2, "programs held by imc top: {mine:?}");
    // The kernel frees programs after an RCU grace period, so give it a moment.
    let deadline = Instant::now() + Duration::from_secs(3);
    let left = loop {
        let left = still_loaded(&mine);
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        left.is_empty(),
        "programs of the exited imc top still loaded: {left:?} (of {mine:?})"
    );
}

fn one_line_error(args: &[&str], code: i32, needle: &str) {
    let out = imc().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "imc {args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(
        err.contains(needle),
        "imc {args:?}: '{err}' does not name '{needle}'"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn top_bad_input_is_one_line_and_exit_2() {
    one_line_error(
        &["top", "-e", "no-such-event", "--duration", "1"],
        2,
        "no-such-event",
    );
    one_line_error(
        &["top", "-e", "nosuchpmu/foo/", "--duration", "1"],
        2,
        "nosuchpmu",
    );
    one_line_error(&["top", "--freq", "0"], 2, "0");
    one_line_error(&["top", "--freq", "10001"], 2, "10001");
    one_line_error(
        &["top", "--backend", "bogus", "--duration", "1"],
        2,
        "bogus",
    );
}

#[test]
fn top_without_privileges_says_so_and_exits_1() {
    if !require(is_root(), "dropping privileges needs root to start with") {
        return;
    }
    let bin = imc_bin();
    // setpriv drops to nobody with no capabilities; the binary must be reachable by that user.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("imc");
    std::fs::copy(&bin, &copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&copy)
        .args(["top", "--json", "--duration", "1", "-e", "page-faults"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("root") || err.contains("CAP_BPF"), "{err}");
}

#[test]
fn usage_errors_name_the_fix_in_one_line() {
    one_line_error(&[], 2, "a command is needed");
    one_line_error(&["stat", "-I", "0"], 2, "whole milliseconds");
    one_line_error(&["top", "-I", "0"], 2, "whole milliseconds");
    one_line_error(&["report", "/etc/hostname"], 2, "not an imc recording");
    if is_root() {
        // record checks its output before it samples anything.
        one_line_error(
            &[
                "record",
                "-o",
                "/nonexistent/dir/x.imcrec",
                "-e",
                "page-faults",
                "--duration",
                "1",
            ],
            2,
            "directory /nonexistent/dir does not exist",
        );
    }
}

/// The TSC on every CPU, on the kernel's tick and context switches, aggregated (the default).
fn tsc_aggregated(cpus: &[u32]) -> SamplerConfig {
    let tsc = msr_tsc();
    let mut cfg = config(
        vec![SlotPlan::per_cpu(spec("msr/tsc/"), &tsc, cpus)],
        cpus,
        1,
    );
    cfg.tick = TickSource::Kernel;
    cfg.aggregate = true;
    cfg
}

/// The default on the kernel's tick: context switches add to the per-CPU accumulator and each
/// tick flushes one KIND_AGGREGATE record per task that ran. On this machine, with the TSC as
/// the CPU-scope counter: every flush's on-CPU times add up to its period exactly, each CPU's
/// periods follow each other without a gap, and the TSC deltas the aggregates carry add up to
/// the TSC's advance over the CPU's whole time line (nothing counted twice, nothing dropped),
/// each task's in proportion to its on-CPU time.
#[test]
fn aggregates_conserve_time_and_counts_per_cpu() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let mut s = Sampler::start(&tsc_aggregated(&cpus)).expect("sampler starts aggregating");
    // More spinners than CPUs: the scheduler switches between them at every tick or so, and
    // the drain's sleeps switch too.
    let _extra = Spinners::start(cpus.len() * 2);
    let recs = collect(&mut s, Duration::from_millis(1500));
    assert_eq!(s.stats().unwrap().lost(), 0);
    assert!(
        recs.iter().all(|r| r.kind == imc_common::KIND_AGGREGATE),
        "only aggregates: {:?}",
        recs.iter()
            .map(|r| r.kind)
            .collect::<std::collections::BTreeSet<_>>()
    );
    let mut tsc_per_ns = Vec::new();
    for &cpu in &cpus {
        let mine: Vec<&Record> = recs.iter().filter(|r| r.cpu == cpu).collect();
        assert!(mine.len() >= 50, "CPU {cpu}: {} aggregates", mine.len());
        // Flushes: runs of records with the same period.
        let mut flushes: Vec<(u64, u64, u64, u64)> = Vec::new(); // t0, t1, Σon, Σtsc
        for r in &mine {
            assert_eq!(r.failed_mask, 0, "{r:?}");
            assert!(r.t0_ns < r.t_ns && r.on_ns <= r.t_ns - r.t0_ns, "{r:?}");
            match flushes.last_mut() {
                Some(f) if f.0 == r.t0_ns && f.1 == r.t_ns => {
                    f.2 += r.on_ns;
                    f.3 += r.slots[0].value;
                }
                _ => flushes.push((r.t0_ns, r.t_ns, r.on_ns, r.slots[0].value)),
            }
        }
        for w in flushes.windows(2) {
            assert_eq!(w[0].1, w[1].0, "CPU {cpu}: periods follow each other");
        }
        for f in &flushes {
            assert_eq!(
                f.2,
                f.1 - f.0,
                "CPU {cpu}: on-CPU times fill the period {f:?}"
            );
        }
        let span = (flushes.last().unwrap().1 - flushes[0].0) as f64;
        let counted: u64 = flushes.iter().map(|f| f.3).sum();
        tsc_per_ns.push(counted as f64 / span);
        // (A task's own TSC delta over its on-CPU time is not checked: in a VM the vCPU can
        // be descheduled between the program's clock read and its counter read.)
        let _ = &mine;
    }
    // The TSC runs at one rate on every CPU: what the aggregates carry is all of it.
    let (lo, hi) = tsc_per_ns
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    assert!(hi / lo < 1.01, "TSC per ns by CPU: {tsc_per_ns:?}");
}

/// At a run's end every CPU's open slice reaches userspace: `end_open_slices` makes that instant
/// an interval end and visits each CPU, whose switch there flushes what the CPU accumulated
/// since its last flush. Without it each CPU's records stop at its last tick's flush, and that
/// last stretch (up to a tick per CPU) reaches no interval.
#[test]
fn the_runs_end_flushes_every_cpus_open_slice() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let mut s = Sampler::start(&tsc_aggregated(&cpus)).expect("sampler starts aggregating");
    s.set_interval_clock(imc::sampler::monotonic_ns(), 100_000_000)
        .expect("the interval clock is written");
    // Work runs to the end, as when a run is stopped under load.
    let _busy = Spinners::start(cpus.len());
    let _ = collect(&mut s, Duration::from_millis(300));
    let end = imc::sampler::monotonic_ns();
    assert_eq!(s.end_open_slices().expect("every CPU is visited"), 0);
    let mut recs = Vec::new();
    s.drain(|r| recs.push(*r));
    for cpu in &cpus {
        let last = recs.iter().filter(|r| r.cpu == *cpu).map(|r| r.t_ns).max();
        assert!(
            last.is_some_and(|t| t >= end),
            "CPU {cpu}: its last flush at {last:?} ns, before the run's end at {end} ns"
        );
    }
}

/// The interval clock (`Sampler::set_interval_clock`): with it, no flush period of the
/// aggregating path holds more than one task's slice across an interval end, so each interval's
/// counts are each task's own up to the one slice that crosses the end. Spinners switching at
/// every tick, and the drain's sleeps, make periods of several tasks; with ends every 7 ms
/// (off the 4 ms tick) most ends fall inside one.
#[test]
fn aggregates_never_mix_tasks_across_an_interval_end() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let cpus = online_cpus();
    let mut s = Sampler::start(&tsc_aggregated(&cpus)).expect("sampler starts aggregating");
    let period = 7_000_000u64;
    let origin = imc::sampler::monotonic_ns();
    s.set_interval_clock(origin, period)
        .expect("the interval clock is written");
    let _extra = Spinners::start(cpus.len() * 2);
    let recs = collect(&mut s, Duration::from_millis(1500));
    assert_eq!(s.stats().unwrap().lost(), 0);
    // Records of one flush share CPU and period; a period across an end holds one record.
    let mut periods: std::collections::BTreeMap<(u32, u64, u64), Vec<u32>> = Default::default();
    for r in recs.iter().filter(|r| r.t0_ns > origin) {
        periods
            .entry((r.cpu, r.t0_ns, r.t_ns))
            .or_default()
            .push(r.pid);
    }
    let crossing: Vec<_> = periods
        .iter()
        .filter(|((_, t0, t1), _)| imc_common::crosses_interval_end(origin, period, *t0, *t1))
        .collect();
    let mixed: Vec<_> = crossing.iter().filter(|(_, pids)| pids.len() > 1).collect();
    eprintln!(
        "{} periods, {} across an interval end, {} of them with several tasks",
        periods.len(),
        crossing.len(),
        mixed.len()
    );
    assert!(
        crossing.len() >= 50,
        "ends fell inside periods: {}",
        crossing.len()
    );
    assert!(
        mixed.is_empty(),
        "{} periods mix tasks across an end, the first: {:?}",
        mixed.len(),
        &mixed[..mixed.len().min(3)]
    );
}

/// A sampler on the kernel's tick charging page faults to user stacks, drained every 10 ms,
/// with stack maps of `stack_entries` and spare maps of `spare_entries` stacks.
fn stack_sampler_config(stack_entries: u32, spare_entries: u32) -> SamplerConfig {
    let cpus = online_cpus();
    SamplerConfig {
        tick: TickSource::Kernel,
        slots: vec![SlotPlan::per_cpu(
            spec("page-faults"),
            &page_faults(),
            &cpus,
        )],
        groups: Vec::new(),
        cpus,
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: Default::default(),
        aggregate: true,
        stacks: Some(imc::sampler::StackConfig {
            user: true,
            kernel: false,
            slots_mask: 1,
            map_entries: 4096,
            stack_entries,
            spare_entries,
            wake_after: 0,
            overflow: None,
        }),
    }
}

/// With stacks, the kernel takes the stacks of every process but imc's own: imc's traffic is
/// charged under no stack (userspace shows it as one frame and never resolves it), while a
/// child process faulting beside it is charged under its stack. This test's process is imc
/// here (the sampler runs in it).
#[test]
fn stacks_are_taken_of_every_process_but_imcs_own() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let mut s = Sampler::start(&stack_sampler_config(4096, 512)).expect("sampler starts");
    // Both fault fresh pages for about half a second: this process, and a child.
    let child = std::process::Command::new("sh")
        .args(["-c", "i=0; while [ $i -lt 40 ]; do head -c 4000000 /dev/zero | tr '\\0' a > /dev/null; i=$((i+1)); done"])
        .spawn()
        .expect("sh runs");
    let end = Instant::now() + Duration::from_millis(500);
    let mut entries = Vec::new();
    // Kept until the end, so that each block is new memory (a freed one would be reused).
    let mut touched = Vec::new();
    while Instant::now() < end && touched.len() < 32 {
        touched.push(std::hint::black_box(vec![1u8; 2 << 20]));
        imc::sampler::RecordSource::drain_stacks(&mut s, &mut entries);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut child = child;
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(50));
    imc::sampler::RecordSource::drain_stacks(&mut s, &mut entries);
    let me = std::process::id();
    let faults = |e: &imc::sampler::stacks::StackEntry| e.counts.slots[0];
    let own: Vec<_> = entries.iter().filter(|e| e.key.tgid == me).collect();
    let others: Vec<_> = entries
        .iter()
        .filter(|e| e.key.tgid != me && faults(e) > 0)
        .collect();
    assert!(
        own.iter().map(|e| faults(e)).sum::<u64>() > 0,
        "this process's faults are charged: {} entries",
        own.len()
    );
    assert!(
        own.iter()
            .all(|e| e.key.user_stack == imc_common::NO_STACK && e.user.is_none()),
        "no stack of this process is taken: {:?}",
        own.iter().map(|e| e.key.user_stack).collect::<Vec<_>>()
    );
    assert!(
        others
            .iter()
            .any(|e| e.key.user_stack != imc_common::NO_STACK),
        "other processes' stacks are taken: {} entries",
        others.len()
    );
}

/// A drain takes each stack entry with its stacks' addresses and leaves the ended generation's
/// stack map empty, both where the kernel takes entries in batches and stacks with their reads,
/// and where it can do neither (one entry a call, stacks read, then removed in one sweep).
#[test]
fn each_drain_takes_its_stacks_and_empties_their_map_batched_or_one_at_a_time() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    for one_at_a_time in [false, true] {
        let mut s = Sampler::start(&stack_sampler_config(4096, 512)).expect("sampler starts");
        if one_at_a_time {
            s.stacks_one_at_a_time();
        }
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 30 ]; do head -c 4000000 /dev/zero | tr '\\0' a > /dev/null; i=$((i+1)); done"])
            .spawn()
            .expect("sh runs");
        let mut entries = Vec::new();
        let (mut drains, mut left_after) = (0, Vec::new());
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            imc::sampler::RecordSource::drain_stacks(&mut s, &mut entries);
            drains += 1;
            let left = s
                .stacks_left_in_ended_map()
                .expect("the sampler takes stacks");
            if left > 0 {
                left_after.push(left);
            }
            if exited || Instant::now() > end {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let how = if one_at_a_time {
            "one at a time"
        } else {
            "batched"
        };
        let me = std::process::id();
        let theirs: Vec<_> = entries
            .iter()
            .filter(|e| e.key.tgid != me && e.counts.slots[0] > 0)
            .collect();
        let with_stack = theirs
            .iter()
            .filter(|e| e.user.as_ref().is_some_and(|a| !a.is_empty()));
        assert!(
            with_stack.count() * 2 >= theirs.len() && !theirs.is_empty(),
            "{how}: of {} entries of other processes, most come with their stack's addresses",
            theirs.len()
        );
        // A program that read the generation just before the turn may store one stack in the
        // ended map after the drain emptied it; a drain that left its stacks would leave many.
        assert!(
            left_after.len() * 10 <= drains,
            "{how}: {} of {drains} drains left stacks in the ended generation's map: {left_after:?}",
            left_after.len()
        );
    }
}

/// A stack whose bucket another stack holds in its generation's map is kept in the spare map:
/// with a one-bucket main map, nearly every stack of a busy child is refused there, and the
/// spare keeps their addresses; with a one-bucket spare as well, most are lost.
#[test]
fn a_stack_refused_for_its_bucket_is_kept_in_the_spare_map() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let mut kept = Vec::new();
    for spare_entries in [4096, 1] {
        let mut s =
            Sampler::start(&stack_sampler_config(1, spare_entries)).expect("sampler starts");
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 30 ]; do head -c 4000000 /dev/zero | tr '\\0' a > /dev/null; i=$((i+1)); done"])
            .spawn()
            .expect("sh runs");
        let mut entries = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            std::thread::sleep(Duration::from_millis(100));
            imc::sampler::RecordSource::drain_stacks(&mut s, &mut entries);
            if exited || Instant::now() > end {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let me = std::process::id();
        let theirs: Vec<_> = entries.iter().filter(|e| e.key.tgid != me).collect();
        let faults = |e: &&imc::sampler::stacks::StackEntry| e.counts.slots[0];
        let all: u64 = theirs.iter().map(faults).sum();
        let with_stack: u64 = theirs
            .iter()
            .filter(|e| e.user.as_ref().is_some_and(|a| !a.is_empty()))
            .map(faults)
            .sum();
        let spare_ids = theirs
            .iter()
            .filter(|e| e.key.user_stack >= 0 && e.key.user_stack & imc_common::SPARE_STACK != 0)
            .count();
        assert!(all > 0, "the child's faults are charged");
        kept.push((spare_entries, with_stack as f64 / all as f64, spare_ids));
    }
    let (big, one) = (kept[0], kept[1]);
    assert!(
        big.1 >= 0.9 && big.2 > 0,
        "with a spare map of {}: {:.3} of the faults have their stack, {} entries name a spare stack",
        big.0,
        big.1,
        big.2
    );
    assert!(
        one.1 < big.1,
        "a one-bucket spare keeps fewer ({:.3}) than a spare of {} ({:.3})",
        one.1,
        big.0,
        big.1
    );
}
