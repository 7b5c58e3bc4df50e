//! Package counters end to end, through the real eBPF program on the kernel's own tick, on a
//! machine without any uncore PMU.
//!
//! The stand-in: `page-faults` opened system-wide on CPU 0 alone (pid -1, cpu 0) is a counter of
//! "package traffic" that, like an uncore counter on a kernel before 6.7, only CPU 0 can read
//! (the kernel's `perf_event_read_local` refuses an event bound to another CPU). It is opened
//! 12 times, as a 12-channel socket's counters would be, all summed into one package slot read by
//! CPU 0's tick alone; a CPU-scope `page-faults` on every CPU is the per-CPU weight. A
//! page-toucher pinned to CPU 0 makes nearly all of the package's counts, a spinner pinned to
//! CPU 1 none: that is the known truth attribution must find.
//!
//! The configuration is built with the library's own types (the plan layer gives real uncore
//! PMUs their scope from their cpumask; a software event has none) and run through `Drainer`, the
//! drain and interval path `imc top` and `imc record` use.
use imc::model::result::IntervalResult;
use imc::model::{SlotRole, SlotScope, SlotSpec, Topology};
use imc::pipeline::{Drainer, IntervalEnds, Sink};
use imc::sampler::{
    PackageCounter, ReaderGroup, Sampler, SamplerConfig, SlotPlan, TickSource, counting_attr,
};
use imc_tests::*;
use std::time::{Duration, Instant};

/// Child roles, run by re-executing this test binary with IMC_TEST_ROLE set (a no-op otherwise):
/// `toucher` faults in fresh pages, `spinner` only computes; both pinned to IMC_TEST_CPU.
#[test]
fn role_child() {
    let Ok(role) = std::env::var("IMC_TEST_ROLE") else {
        return;
    };
    let secs: f64 = std::env::var("IMC_TEST_SECS").unwrap().parse().unwrap();
    let cpu: usize = std::env::var("IMC_TEST_CPU").unwrap().parse().unwrap();
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning to CPU {cpu}"
        );
    }
    let end = Instant::now() + Duration::from_secs_f64(secs);
    match role.as_str() {
        "toucher" => {
            let len = 8 << 20;
            while Instant::now() < end {
                touch_fresh_pages(len);
            }
        }
        "spinner" => spin_until(end),
        other => panic!("unknown role {other}"),
    }
}

fn spawn_role(role: &str, cpu: u32, secs: f64) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["role_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("IMC_TEST_ROLE", role)
        .env("IMC_TEST_SECS", secs.to_string())
        .env("IMC_TEST_CPU", cpu.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn role child")
}

/// Minor page faults of a process so far (field 10 of /proc/PID/stat).
fn minor_faults(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    after
        .split_whitespace()
        .nth(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

const PAGE: f64 = 4096.0;

/// Page faults of every process on each of some CPUs, as the kernel counts them (pid -1): what
/// the stand-in's package counter (CPU 0) and the weights (every CPU) see, strangers included.
struct CpuFaults(Vec<std::os::fd::OwnedFd>);

impl CpuFaults {
    fn open(cpus: &[u32]) -> CpuFaults {
        use imc::sys::perf::{PerfEventAttr, PerfSys, RealPerf, TYPE_SOFTWARE};
        let attr = PerfEventAttr::counting(TYPE_SOFTWARE, 2 /* page-faults */);
        CpuFaults(
            cpus.iter()
                .map(|&c| {
                    RealPerf
                        .open(&attr, -1, c as i32, None)
                        .expect("page-faults on a CPU")
                })
                .collect(),
        )
    }

    fn read(&self) -> Vec<f64> {
        use std::os::fd::AsFd;
        self.0
            .iter()
            .map(|fd| {
                let v = imc::sys::perf::read_counter(&imc::sys::perf::RealPerf, fd.as_fd());
                v.expect("read page-faults").value as f64
            })
            .collect()
    }
}

/// Channels the stand-in package has: more than the 8 slots a record carries.
const CHANNELS: usize = 12;

/// Slot 0: the package stand-in, the sum of CHANNELS counters opened on CPU 0, read by CPU 0.
/// Slot 1: page-faults per CPU as the weight.
fn plans(topology: &Topology, weight: SlotRole) -> (Vec<SlotPlan>, Vec<ReaderGroup>) {
    let package = SlotSpec {
        event: "page-faults@cpu0".into(),
        scope: SlotScope::Package,
        role: SlotRole::Traffic(imc::model::Direction::Total),
        bytes_per_count: Some(PAGE),
        counter_bits: 64,
    };
    let per_cpu = SlotSpec {
        event: "page-faults".into(),
        scope: SlotScope::Cpu,
        role: weight,
        bytes_per_count: None,
        counter_bits: 64,
    };
    let group = ReaderGroup {
        package: topology.package_of(0).unwrap_or(0),
        readers: vec![0],
        counters: (0..CHANNELS)
            .map(|i| PackageCounter {
                slot: 0,
                open_cpu: 0,
                attr: counting_attr(&page_faults()),
                name: format!("page-faults@cpu0#{i}"),
                channel: format!("page-faults@cpu0#{i}"),
            })
            .collect(),
    };
    (
        vec![
            SlotPlan::package(package),
            SlotPlan::per_cpu(per_cpu, &page_faults(), &topology.online),
        ],
        vec![group],
    )
}

/// One sampler at a time: the tests pin children to the same CPUs and count their faults.
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static M: std::sync::Mutex<()> = std::sync::Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sampler as the default `record` runs it: the kernel's tick, a drain period of a second.
fn kernel_tick_config(topo: &Topology, ring: Option<u32>) -> SamplerConfig {
    let (slots, groups) = plans(topo, SlotRole::Weight(None));
    SamplerConfig {
        tick: TickSource::Kernel,
        slots,
        groups,
        cpus: topo.online.clone(),
        ring_bytes: ring,
        drain_period_ms: 1000,
        bpf_log: false,
        tick_program: Default::default(),
        aggregate: false,
        stacks: None,
    }
}

fn this_machine() -> Topology {
    imc::discovery::discover(std::path::Path::new("/"))
        .expect("discovery of /")
        .topology
}

/// Each closed interval's span and package bytes.
#[derive(Default)]
struct Closed(Vec<(u64, u64, u64)>);

impl Sink for Closed {
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.0.push((r.t_start_ns, r.t_end_ns, r.package_bytes()));
        Ok(true)
    }
}

#[test]
fn one_late_drain_closes_each_interval_with_its_own_traffic() {
    if !sampler_prerequisites() {
        return;
    }
    let _one = exclusive();
    let topo = this_machine();
    let mut toucher = spawn_role("toucher", 0, 4.0);
    std::thread::sleep(Duration::from_millis(300));
    let sampler = Sampler::start(&kernel_tick_config(&topo, None)).expect("sampler starts");
    let mut drainer = Drainer::new(sampler, &topo, "test:package-stand-in".into(), 250);
    let mut ends = IntervalEnds::starting(imc::sampler::monotonic_ns(), 100);
    let mut closed = Closed::default();
    // Two drains 1.2 s apart, as `record` sleeps: each closes the 100 ms intervals it passed.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1200));
        let (records, go_on) = drainer
            .drain_into(&mut closed, &mut ends, imc::sampler::monotonic_ns())
            .expect("drain");
        assert!(records > 0 && go_on);
    }
    drop(drainer);
    let _ = toucher.kill();
    let _ = toucher.wait();

    let iv = &closed.0;
    assert!(
        (23..=25).contains(&iv.len()),
        "{} intervals closed in 2.4 s of 100 ms ones",
        iv.len()
    );
    // On the grid, back to back, each exactly 100 ms after the first.
    for w in iv.windows(2) {
        assert_eq!(w[1].0, w[0].1, "intervals back to back: {w:?}");
        assert_eq!(w[1].1 - w[1].0, 100_000_000, "a 100 ms interval: {w:?}");
    }
    // The toucher's steady traffic is in every interval, not lumped where a drain happened
    // (the first interval starts at the first reading; the one after a drain may lag a tick).
    let full = &iv[1..];
    let mean = full.iter().map(|i| i.2 as f64).sum::<f64>() / full.len() as f64;
    assert!(mean > 0.0, "no package traffic in {iv:?}");
    for (n, i) in full.iter().enumerate() {
        assert!(
            i.2 as f64 >= 0.25 * mean && i.2 as f64 <= 2.5 * mean,
            "interval {} holds {} B against a mean of {mean:.0} B: {iv:?}",
            n + 1,
            i.2
        );
    }
}

#[test]
fn a_ring_half_full_wakes_userspace_before_its_timer() {
    if !sampler_prerequisites() {
        return;
    }
    let _one = exclusive();
    let topo = this_machine();
    let mut spinner = spawn_role("spinner", 0, 5.0);
    // 256 records a CPU: a wake-up every 128, about half a second of a busy CPU's ticks.
    let mut sampler =
        Sampler::start(&kernel_tick_config(&topo, Some(256))).expect("sampler starts");
    assert_eq!(sampler.ring_len(), 256);
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&sampler.wake_fd()),
        events: libc::POLLIN,
        revents: 0,
    };
    let t0 = Instant::now();
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 4000) };
    let waited = t0.elapsed();
    let cpus = sampler.take_wakes();
    let mut drained = 0;
    sampler.drain(|_| drained += 1);
    let lost = sampler.lost_records();
    drop(sampler);
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert_eq!(n, 1, "no wake-up within {waited:?}");
    assert!(
        !cpus.is_empty() && cpus.iter().all(|c| topo.online.contains(c)),
        "wake-ups from CPUs {cpus:?}"
    );
    assert!(drained >= 128, "woken with {drained} records drained");
    assert_eq!(lost, 0, "records lost before the wake-up was answered");
}

/// Samples the page-fault stand-in on the kernel's tick for `secs` (the per-CPU page faults in
/// the role `weight`), closing an interval every 500 ms through `Drainer`, as `imc top` does;
/// `at_warm` runs once, when the first (warm-up) interval has closed. The intervals and the
/// program's statistics.
fn sample_toucher_and_spinner(
    topo: &Topology,
    weight: SlotRole,
    secs: f64,
    mut at_warm: impl FnMut(),
) -> (Vec<IntervalResult>, imc::sampler::SamplerStats) {
    let (slots, groups) = plans(topo, weight);
    let cfg = SamplerConfig {
        tick: TickSource::Kernel,
        slots,
        groups,
        cpus: topo.online.clone(),
        ring_bytes: None,
        drain_period_ms: 10,
        bpf_log: false,
        tick_program: Default::default(),
        aggregate: false,
        stacks: None,
    };
    let sampler = Sampler::start(&cfg).expect("sampler starts");
    assert!(
        !sampler.attached().adds_interrupts,
        "{:?}",
        sampler.attached()
    );
    let mut drainer = Drainer::new(sampler, topo, "test:package-stand-in".into(), 250);
    let mut intervals: Vec<IntervalResult> = Vec::new();
    let start = Instant::now();
    let mut next_close = start + Duration::from_millis(500);
    while start.elapsed() < Duration::from_secs_f64(secs) {
        std::thread::sleep(Duration::from_millis(10));
        drainer.drain(|_| {});
        if Instant::now() >= next_close {
            intervals.push(drainer.close(false));
            if intervals.len() == 1 {
                at_warm();
            }
            next_close += Duration::from_millis(500);
        }
    }
    drainer.drain(|_| {});
    intervals.push(drainer.close(true));
    let stats = drainer.sampler().stats().unwrap();
    (intervals, stats)
}

/// This machine's topology, with the sampler to this test alone, where the toucher (CPU 0) and
/// the spinner (CPU 1) can run in one package; None (said) where they cannot.
fn toucher_and_spinner_machine() -> Option<(std::sync::MutexGuard<'static, ()>, Topology)> {
    if !sampler_prerequisites() {
        return None;
    }
    let one = exclusive();
    let topo = this_machine();
    let pkg0 = topo.package_of(0);
    require(
        topo.online.len() >= 2 && pkg0.is_some() && topo.package_of(1) == pkg0,
        "needs CPUs 0 and 1 online in one package",
    )
    .then_some((one, topo))
}

#[test]
fn package_counter_read_on_its_cpu_only_goes_to_the_toucher() {
    let Some((_one, topo)) = toucher_and_spinner_machine() else {
        return;
    };

    let secs = 3.0;
    let cpu_faults = CpuFaults::open(&[0, 1]);
    let mut toucher = spawn_role("toucher", 0, secs + 3.0);
    let mut spinner = spawn_role("spinner", 1, secs + 3.0);
    std::thread::sleep(Duration::from_millis(300));

    let mut faults_at_warm = None;
    let (intervals, stats) =
        sample_toucher_and_spinner(&topo, SlotRole::Weight(None), secs, || {
            faults_at_warm = Some((
                minor_faults(toucher.id()),
                cpu_faults.read(),
                Instant::now(),
            ));
        });
    let (f0, c0, t0) = faults_at_warm.unwrap();
    let true_faults = minor_faults(toucher.id()) - f0;
    let c1 = cpu_faults.read();
    // The fraction of all faults of the window that CPU 1 made (strangers', on a loaded machine).
    let (w0, w1) = (c1[0] - c0[0], c1[1] - c0[1]);
    let cpu1_frac = w1 / (w0 + w1).max(1.0);
    let true_secs = t0.elapsed().as_secs_f64();
    let _ = toucher.kill();
    let _ = spinner.kill();
    let _ = toucher.wait();
    let _ = spinner.wait();

    // One reader: CPU 0's ticks read the 12 counters; CPU 1's ticks never touch them.
    for sl in 0..2 {
        assert_eq!(stats.read_errors(sl), 0, "slot {sl}: {stats:?}");
    }
    let cpu0 = stats.per_cpu.iter().find(|c| c.cpu == 0).unwrap();
    let cpu1 = stats.per_cpu.iter().find(|c| c.cpu == 1).unwrap();
    assert!(
        cpu0.pkg_reads > 100,
        "CPU 0 read its package rarely: {cpu0:?}"
    );
    assert_eq!(cpu1.pkg_reads, 0, "CPU 1 is no reader: {cpu1:?}");
    assert!(cpu0.runs > 0 && cpu1.runs > 0, "{stats:?}");
    // Context switches add records; a drain that a loaded machine delays may lose a few.
    assert!(
        stats.lost() * 100 <= stats.runs(),
        "{} of {} records lost",
        stats.lost(),
        stats.runs()
    );

    // Attribution, after the first (warm-up) interval.
    // Faults other programs make on CPU 0 (other builds on a shared machine) are real package
    // traffic of theirs: the shares are taken over what the test's own processes and nobody
    // got, and the toucher's amount is checked against the kernel's count of its faults below,
    // so traffic given to a stranger, or a stranger's given to the toucher, still fails.
    let me = std::process::id();
    let (mut package, mut touch, mut spin, mut ours, mut unattributed, mut window_ns) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut strangers: std::collections::BTreeMap<String, u64> = Default::default();
    for iv in &intervals[1..] {
        package += iv.packages.iter().map(|p| p.total_bytes).sum::<u64>();
        unattributed += iv.unattributed_bytes;
        window_ns += iv.t_end_ns - iv.t_start_ns;
        for t in &iv.tasks {
            if t.tgid == toucher.id() {
                touch += t.total_bytes;
            } else if t.tgid == spinner.id() {
                spin += t.total_bytes;
            } else if t.tgid == me {
                ours += t.total_bytes;
            } else {
                *strangers.entry(t.comm.clone()).or_default() += t.total_bytes;
            }
        }
    }
    let ours = touch + spin + ours + unattributed;
    let share = |b: u64| b as f64 / ours.max(1) as f64;
    eprintln!(
        "package {package} B, {ours} B to the test's processes or nobody: toucher {:.2}%, spinner {:.3}%, unattributed {:.3}%; CPU 1 made {:.1}% of the faults; strangers {strangers:?}; CPU 0 read the package {} times",
        share(touch) * 100.0,
        share(spin) * 100.0,
        share(unattributed) * 100.0,
        cpu1_frac * 100.0,
        cpu0.pkg_reads
    );
    assert!(
        package as f64 > 10_000.0 * PAGE * CHANNELS as f64,
        "only {package} bytes counted"
    );
    // The stand-in's one imperfection, measured rather than assumed small: its package counter
    // sees CPU 0's faults only, while the weights also see CPU 1's, which strangers make on a
    // loaded machine (on hardware their traffic would be in the package counter too). By
    // weights, CPU 1 then takes `cpu1_frac` of the package and charges it to the task each of
    // its ticks finds, mostly the spinner. The spinner makes no faults of its own: it may get
    // that much, never more. Spreading by on-CPU time instead would give it about half.
    // Between the two of them, by the same token, the toucher has nearly all (by time: half).
    let own = (touch + spin).max(1) as f64;
    assert!(
        touch as f64 / own >= 0.80,
        "toucher got {:.1}% of the toucher's and spinner's bytes",
        touch as f64 / own * 100.0
    );
    let spin_bound = package as f64 * cpu1_frac * 1.25 + 0.02 * ours as f64;
    assert!(
        spin as f64 <= spin_bound,
        "spinner got {:.2}% of the test's bytes, {spin} B > {spin_bound:.0} B that CPU 1's {:.1}% \
         of the faults allow (spreading by time instead of weights gives about half)",
        share(spin) * 100.0,
        cpu1_frac * 100.0
    );
    assert!(
        share(unattributed) <= 0.05,
        "unattributed {:.2}%",
        share(unattributed) * 100.0
    );
    // And the amount is the toucher's real one: its fault rate as the kernel counted it, less
    // what CPU 1's weight takes of CPU 0's count (above). A spread by on-CPU time instead of
    // weights would give it about half, whatever the load. The package slot sums CHANNELS
    // copies of the count.
    let imc_rate = touch as f64 / PAGE / CHANNELS as f64 / (window_ns as f64 / 1e9);
    let true_rate = true_faults / true_secs;
    let expected = true_rate * (1.0 - cpu1_frac);
    assert!(
        (0.75..=1.20).contains(&(imc_rate / expected)),
        "toucher faults/s: imc {imc_rate:.0}, kernel {true_rate:.0} less CPU 1's {:.1}% = {expected:.0}",
        cpu1_frac * 100.0
    );
}

/// On-CPU time of a process so far, in clock ticks (utime + stime of /proc/PID/stat).
fn cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum()
}

/// The same toucher and spinner, the per-CPU page faults counted but not used as a weight
/// (`--weight cpu-time`): the package's traffic is then split by on-CPU time, and the spinner,
/// which makes none of it, is charged its share of the two's CPU time (about half on an idle
/// machine; what the kernel says it ran on a loaded one). Beside the test above (the weight gives
/// the toucher nearly all), this is the difference the weights make, on the real program.
#[test]
fn by_cpu_time_alone_the_spinner_is_charged_for_traffic_it_never_made() {
    let Some((_one, topo)) = toucher_and_spinner_machine() else {
        return;
    };
    let secs = 2.5;
    let mut toucher = spawn_role("toucher", 0, secs + 3.0);
    let mut spinner = spawn_role("spinner", 1, secs + 3.0);
    std::thread::sleep(Duration::from_millis(300));
    let mut ticks_at_warm = None;
    let (intervals, _) = sample_toucher_and_spinner(&topo, SlotRole::Other, secs, || {
        ticks_at_warm = Some((cpu_ticks(spinner.id()), Instant::now()));
    });
    let (s0, warm) = ticks_at_warm.unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // How much of CPU 1 the spinner had (other work on a shared machine takes the rest).
    let spin_use = (cpu_ticks(spinner.id()) - s0) / hz / warm.elapsed().as_secs_f64();
    for c in [&mut toucher, &mut spinner] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (mut touch, mut spin) = (0u64, 0u64);
    for iv in &intervals[1..] {
        let w = iv
            .weighting
            .as_ref()
            .expect("every interval says how it divided");
        assert_eq!(w.method, "cpu-time", "{w:?}");
        for t in &iv.tasks {
            if t.tgid == toucher.id() {
                touch += t.total_bytes;
            } else if t.tgid == spinner.id() {
                spin += t.total_bytes;
            }
        }
    }
    let own = (touch + spin).max(1) as f64;
    // The traffic comes while the toucher runs on CPU 0; by time, each such stretch is split
    // between it and whatever CPU 1 ran: the spinner for `spin_use` of it. So the spinner,
    // which makes none of the traffic, is charged about u/(1+u): a half when it has CPU 1 to
    // itself.
    let expected = spin_use / (1.0 + spin_use);
    eprintln!(
        "by CPU time: toucher {:.1}%, spinner {:.1}% of their {own} B; the spinner had {:.0}% of \
         CPU 1, so about {:.1}% is expected",
        touch as f64 / own * 100.0,
        spin as f64 / own * 100.0,
        spin_use * 100.0,
        expected * 100.0
    );
    if !require(
        spin_use > 0.3,
        "the spinner had less than 30% of CPU 1: the machine is too loaded to tell",
    ) {
        return;
    }
    assert!(
        (spin as f64 / own - expected).abs() <= 0.15,
        "spinner got {:.1}% by CPU time, about {:.1}% expected",
        spin as f64 / own * 100.0,
        expected * 100.0
    );
}
