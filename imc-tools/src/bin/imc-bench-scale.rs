//! `cargo xtask bench-scale`: what imc's userspace costs on a machine far larger than this one,
//! replayed: a synthetic timeline (imc-sim) of a 192-CPU, 2-package machine with
//! 24 memory channels per package (48 in all), the kernel's tick at 250 Hz and 20 000 context
//! switches a second on every CPU, for 10 simulated seconds, fed through the sampler's own
//! drain (its ring consumer and idle-package bookkeeping, over a [`Loopback`] of the program's
//! rings sized as the sampler sizes them) and `imc record`'s pump into the real attributor,
//! interval by interval.
//!
//! Two variants, each in its own child process (so each has its own peak RSS):
//! - precise: a record per context switch and per tick (`--precise`);
//! - aggregated (the default): the same per-switch stream folded by
//!   `sampler::aggregate_twin::Aggregator` into per-task records at each tick BEFORE it reaches the
//!   rings — in a real run the kernel does that fold, so its cost is not userspace's and is
//!   left out of the timed part.
//!
//! Userspace CPU is the calling thread's user+system time (getrusage RUSAGE_THREAD) around each
//! drain-and-attribute step only: generating the timeline, folding it and writing the rings
//! (the kernel's part) run between those steps and are not counted. Peak RSS is the child's
//! VmHWM less that of a child that generates and writes the same stream without draining it
//! (the generator's own memory); both are printed. The stream is generated a chunk at a time
//! (schedules given 10 ms ahead, rings drained whenever one is half full or a second passed, as
//! `imc record` does), never held whole.
//!
//!   imc-bench-scale [--json] [--cpus N] [--seconds S] [--switches N] [--runs R]
//!
//! Progress goes to stderr. `--json`: one object per variant and line, means over the runs.
use imc::model::result::IntervalResult;
use imc::model::{Encoded, SlotScope};
use imc::pipeline::{Drainer, IntervalEnds, Sink};
use imc::sampler::aggregate_twin::Aggregator;
use imc::sampler::loopback::Loopback;
use imc::sampler::{PackageCounter, ReaderGroup, SamplerConfig, SlotPlan, TickProgram, TickSource};
use imc_sim::{Readers, Scenario, SynthItem, SynthTask};
use std::process::{Command, ExitCode};

const HZ: u32 = 250;
const CHANNELS_PER_PACKAGE: usize = 24;
const PACKAGES: u32 = 2;
/// `imc record`'s interval and drain period (ms).
const INTERVAL_MS: u64 = 1000;
const DRAIN_MS: u32 = 1000;
/// Schedules are given this far ahead of the stream.
const CHUNK_NS: u64 = 10_000_000;
/// The scale targets at 192 CPUs × 20k switches/s.
const TARGET_MS_PER_S: f64 = 96.0;
const TARGET_RSS_MB: f64 = 100.0;

#[derive(Clone, Copy, Debug)]
struct Opts {
    cpus: u32,
    seconds: f64,
    switches: u32,
    runs: usize,
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Generate, write the rings, drain and attribute.
    Full,
    /// Generate and write the rings only (the RSS baseline).
    GenerateOnly,
}

/// One child's figures.
#[derive(Clone, Debug, Default)]
struct Figures {
    aggregated: bool,
    /// Per-switch records generated (the precise stream, folded or not).
    generated: u64,
    /// Records the pump drained from the rings.
    drained: u64,
    lost: u64,
    intervals: u64,
    /// Thread CPU in the drain-and-attribute steps (s).
    drain_cpu_s: f64,
    /// Thread CPU of everything (s).
    total_cpu_s: f64,
    /// VmHWM (MB).
    hwm_mb: f64,
}

fn usage() -> String {
    "usage: imc-bench-scale [--json] [--cpus N] [--seconds S] [--switches N] [--runs R]".into()
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        cpus: 192,
        seconds: 10.0,
        switches: 20_000,
        runs: 3,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value; {}", usage()))
        };
        match a.as_str() {
            "--json" => o.json = true,
            "--cpus" => {
                let v = val("--cpus")?;
                o.cpus = v
                    .parse()
                    .ok()
                    .filter(|&n| (PACKAGES..=4096).contains(&n) && n % PACKAGES == 0)
                    .ok_or_else(|| format!("--cpus {v}: an even number from 2 to 4096"))?;
            }
            "--seconds" => {
                let v = val("--seconds")?;
                o.seconds = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.01 && *s <= 3600.0)
                    .ok_or_else(|| format!("--seconds {v}: a number from 0.01 to 3600"))?;
            }
            "--switches" => {
                let v = val("--switches")?;
                o.switches = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=1_000_000).contains(&n))
                    .ok_or_else(|| {
                        format!("--switches {v}: switches per second per CPU, 1 to 1000000")
                    })?;
            }
            "--runs" => {
                let v = val("--runs")?;
                o.runs = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=100).contains(&n))
                    .ok_or_else(|| format!("--runs {v}: 1 to 100"))?;
            }
            other => return Err(format!("unknown argument '{other}'; {}", usage())),
        }
    }
    Ok(o)
}

/// The simulated machine: `cpus` CPUs in two packages, three threads taking turns on each CPU
/// with an idle stretch now and then, a slice every 1/`switches` s on average.
fn scenario(o: &Opts) -> Scenario {
    let n = o.cpus;
    let mut sc = Scenario::busy(n, HZ, (o.seconds * 1e9) as u64);
    let half = n / PACKAGES;
    sc.packages = (0..PACKAGES)
        .map(|p| (p * half..(p + 1) * half).collect())
        .collect();
    sc.tasks = (0..3 * n)
        .map(|i| SynthTask {
            pid: 2000 + i,
            tgid: 2000 + i / 3,
            comm: format!("worker{}", i % 11),
            cgroup: 1 + u64::from(i % 5),
            read_bps: 2.0e7 * f64::from(1 + i % 7),
            write_bps: 1.0e7 * f64::from(1 + i % 4),
        })
        .collect();
    sc.schedule = vec![Vec::new(); n as usize];
    sc.dma_bps = vec![1.0e8; PACKAGES as usize];
    sc.precise = true;
    sc.weights = true;
    sc.readers = Readers::First;
    sc
}

/// CPU `c`'s schedule entries in [from, to): k counts its slices from the start.
struct Scheduler {
    slice_ns: u64,
    next: Vec<(u64, u64)>,
}

impl Scheduler {
    fn new(cpus: u32, switches: u32) -> Scheduler {
        Scheduler {
            slice_ns: (1_000_000_000 / u64::from(switches)).max(2),
            next: (0..u64::from(cpus)).map(|c| (c * 13, 0)).collect(),
        }
    }

    fn chunk(&mut self, c: usize, to: u64, out: &mut Vec<(u64, Option<usize>)>) {
        out.clear();
        let s = self.slice_ns;
        let (t, k) = &mut self.next[c];
        while *t < to {
            let task = match *k % 7 {
                6 => None,
                5 => Some(3 * c + 2),
                j => Some(3 * c + (j % 2) as usize),
            };
            out.push((*t, task));
            // Slices from s/2 to 3s/2, s on average.
            *t += s / 2 + (*k * 7919 + c as u64 * 104_729) % s;
            *k += 1;
        }
    }
}

fn sampler_config(sc: &Scenario, aggregated: bool) -> SamplerConfig {
    let cpus: Vec<u32> = sc.packages.iter().flatten().copied().collect();
    let specs = sc.specs();
    let slots: Vec<SlotPlan> = specs
        .iter()
        .map(|s| match s.scope {
            SlotScope::Package => SlotPlan::package(s.clone()),
            _ => SlotPlan::per_cpu(s.clone(), &Encoded::default(), &cpus),
        })
        .collect();
    let groups = sc
        .packages
        .iter()
        .enumerate()
        .map(|(p, pcpus)| ReaderGroup {
            package: p as u32,
            readers: pcpus.first().copied().into_iter().collect(),
            counters: (0..CHANNELS_PER_PACKAGE)
                .flat_map(|ch| {
                    [0usize, 1].map(|slot| PackageCounter {
                        slot,
                        open_cpu: pcpus[0],
                        attr: imc::sampler::counting_attr(&Encoded::default()),
                        name: format!("uncore_imc_{ch}/{}", ["read", "write"][slot]),
                        channel: format!("uncore_imc_{ch}"),
                    })
                })
                .collect(),
        })
        .collect();
    SamplerConfig {
        tick: TickSource::Kernel,
        slots,
        groups,
        cpus,
        ring_bytes: None,
        drain_period_ms: DRAIN_MS,
        bpf_log: false,
        tick_program: TickProgram::Imc,
        aggregate: aggregated,
        stacks: None,
    }
}

/// `imc record`'s sink without the file: counts what it is handed.
#[derive(Default)]
struct Counting {
    ticks: u64,
    intervals: u64,
    task_rows: u64,
}

impl Sink for Counting {
    fn tick(&mut self, _rec: &imc_common::Record) -> std::io::Result<()> {
        self.ticks += 1;
        Ok(())
    }
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.intervals += 1;
        self.task_rows += r.tasks.len() as u64;
        Ok(true)
    }
}

/// This thread's user+system CPU (s).
fn thread_cpu_s() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is valid to write.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// VmHWM of this process (MB).
fn peak_rss_mb() -> Result<f64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| "/proc/self/status has no VmHWM".into())
}

/// One variant, in this process.
fn child(o: &Opts, aggregated: bool, mode: Mode, label: &str) -> Result<Figures, String> {
    let start_cpu = thread_cpu_s();
    let sc = scenario(o);
    let specs = sc.specs();
    let cfg = sampler_config(&sc, aggregated);
    let lb = Loopback::new(&cfg)
        .map_err(|e| format!("the loopback rings: {}", imc::text::error_line(&e)))?;
    let mut pump = Drainer::new(lb, &sc.topology(), "replay".into(), HZ);
    let mut sink = Counting::default();
    let mut ends = IntervalEnds::starting(0, INTERVAL_MS);
    let mut agg = Aggregator::new(&specs, HZ);
    let mut sched = Scheduler::new(o.cpus, o.switches);
    let mut stream = sc.stream();
    let mut chunk = Vec::new();
    let mut horizon = 0u64;
    horizon += 2 * CHUNK_NS;
    extend_schedules(&mut stream, &mut sched, &mut chunk, o.cpus, horizon);
    let mut f = Figures {
        aggregated,
        ..Default::default()
    };
    let mut folded = Vec::new();
    let mut next_drain = u64::from(DRAIN_MS) * 1_000_000;
    let mut next_progress = 1_000_000_000u64;
    while let Some(item) = stream.next() {
        let SynthItem::Tick(r) = item else {
            continue;
        };
        f.generated += 1;
        let t = r.t_ns;
        if aggregated {
            folded.clear();
            agg.push(&r, &mut folded);
            for x in &folded {
                pump.sampler_mut().push(x);
            }
        } else {
            pump.sampler_mut().push(&r);
        }
        if t + CHUNK_NS >= horizon {
            horizon += CHUNK_NS;
            extend_schedules(&mut stream, &mut sched, &mut chunk, o.cpus, horizon);
        }
        if pump.sampler().wake_pending() || t >= next_drain {
            drain_once(&mut pump, &mut sink, &mut ends, t, &mut f, mode)?;
            next_drain = t + u64::from(DRAIN_MS) * 1_000_000;
        }
        if t >= next_progress {
            eprintln!(
                "bench-scale: {label}: {:.0}/{} s simulated, {} records generated, {} drained",
                t as f64 / 1e9,
                o.seconds,
                f.generated,
                f.drained
            );
            next_progress += 1_000_000_000;
        }
    }
    // The run's end: the last records and every interval up to it.
    let end = (o.seconds * 1e9) as u64 + 1;
    drain_once(&mut pump, &mut sink, &mut ends, end, &mut f, mode)?;
    f.lost = imc::sampler::RecordSource::lost_records(pump.sampler());
    f.intervals = sink.intervals;
    f.total_cpu_s = thread_cpu_s() - start_cpu;
    f.hwm_mb = peak_rss_mb()?;
    if mode == Mode::Full && sink.ticks != f.drained {
        return Err(format!(
            "the sink saw {} records of {} drained",
            sink.ticks, f.drained
        ));
    }
    Ok(f)
}

/// Every CPU's schedule, and the stream's, extended up to `to`.
fn extend_schedules(
    stream: &mut imc_sim::SynthStream,
    sched: &mut Scheduler,
    chunk: &mut Vec<(u64, Option<usize>)>,
    cpus: u32,
    to: u64,
) {
    for c in 0..cpus as usize {
        sched.chunk(c, to, chunk);
        stream.extend_schedule(c, chunk);
    }
}

/// The rings published and, unless only generating, drained into the sink up to `now`: the
/// drain's CPU time and records counted in `f`.
fn drain_once(
    pump: &mut Drainer<Loopback>,
    sink: &mut Counting,
    ends: &mut IntervalEnds,
    now: u64,
    f: &mut Figures,
    mode: Mode,
) -> Result<(), String> {
    pump.sampler_mut()
        .publish()
        .map_err(|e| format!("writing the rings: {e}"))?;
    if mode == Mode::GenerateOnly {
        // Nobody reads: the rings' heads move on, the records are overwritten.
        pump.take_wakes();
        return Ok(());
    }
    let before = thread_cpu_s();
    pump.take_wakes();
    let (n, _) = pump
        .drain_into(sink, ends, now)
        .map_err(|e| format!("the pump: {}", imc::text::error_line(&e)))?;
    f.drain_cpu_s += thread_cpu_s() - before;
    f.drained += n as u64;
    Ok(())
}

fn child_line(f: &Figures) -> String {
    serde_json::json!({
        "aggregated": f.aggregated,
        "generated": f.generated,
        "drained": f.drained,
        "lost": f.lost,
        "intervals": f.intervals,
        "drain_cpu_s": f.drain_cpu_s,
        "total_cpu_s": f.total_cpu_s,
        "hwm_mb": f.hwm_mb,
    })
    .to_string()
}

fn parse_child(line: &str) -> Result<Figures, String> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("child printed {line:?}: {e}"))?;
    let num = |k: &str| {
        v[k].as_f64()
            .ok_or_else(|| format!("child line has no {k}: {line}"))
    };
    Ok(Figures {
        aggregated: v["aggregated"].as_bool().unwrap_or(false),
        generated: num("generated")? as u64,
        drained: num("drained")? as u64,
        lost: num("lost")? as u64,
        intervals: num("intervals")? as u64,
        drain_cpu_s: num("drain_cpu_s")?,
        total_cpu_s: num("total_cpu_s")?,
        hwm_mb: num("hwm_mb")?,
    })
}

fn spawn(o: &Opts, aggregated: bool, mode: Mode) -> Result<Figures, String> {
    // This very program, even when a rebuild replaced its file meanwhile (the open inode).
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let out = Command::new(&exe)
        .args([
            "--child",
            if aggregated { "aggregated" } else { "precise" },
            match mode {
                Mode::Full => "full",
                Mode::GenerateOnly => "generate-only",
            },
            "--cpus",
            &o.cpus.to_string(),
            "--seconds",
            &o.seconds.to_string(),
            "--switches",
            &o.switches.to_string(),
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("the child run failed ({})", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_child(text.lines().last().unwrap_or(""))
}

/// Mean and standard error of the mean (NaN with fewer than two values).
fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

fn verdict(mean: f64, se: f64, target: f64) -> &'static str {
    if !mean.is_finite() {
        "UNRESOLVED"
    } else if !se.is_finite() {
        if mean <= target {
            "PASS (1 run)"
        } else {
            "FAIL (1 run)"
        }
    } else if mean + 2.0 * se <= target {
        "PASS"
    } else if mean - 2.0 * se > target {
        "FAIL"
    } else {
        "UNRESOLVED"
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--child") {
        let aggregated = args.get(1).is_some_and(|a| a == "aggregated");
        let mode = if args.get(2).is_some_and(|a| a == "generate-only") {
            Mode::GenerateOnly
        } else {
            Mode::Full
        };
        let label = format!(
            "{}{}",
            if aggregated { "aggregated" } else { "precise" },
            if mode == Mode::GenerateOnly {
                " (generation only)"
            } else {
                ""
            }
        );
        let result = parse_opts(args.get(3..).unwrap_or_default())
            .and_then(|o| child(&o, aggregated, mode, &label));
        return match result {
            Ok(f) => {
                println!("{}", child_line(&f));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("imc-bench-scale: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let o = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("imc-bench-scale: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("imc-bench-scale: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let started = std::time::Instant::now();
    eprintln!(
        "bench-scale: {} CPUs in {PACKAGES} packages ({} memory channels), {HZ} Hz, {} \
         switches/s per CPU, {} s simulated; {} run(s) per variant, each in its own process",
        o.cpus,
        CHANNELS_PER_PACKAGE * PACKAGES as usize,
        o.switches,
        o.seconds,
        o.runs
    );
    let (gen_mb, runs) = measure_runs(o)?;
    if !o.json {
        print_header(o, started.elapsed().as_secs_f64());
    }
    let seconds = o.seconds;
    let machine_s = seconds * f64::from(o.cpus);
    let mut lines = Vec::new();
    for (i, v) in runs.iter().enumerate() {
        let aggregated = i == 1;
        let [(ms_m, ms_se), (sh_m, sh_se), (rss_m, rss_se), (tot_m, _)] =
            variant_means(v, seconds, machine_s, gen_mb[i]);
        let (drained, generated) = (mean_of(v, |f| f.drained), mean_of(v, |f| f.generated));
        let lost = v.iter().map(|f| f.lost).max().unwrap_or(0);
        let intervals = v.iter().map(|f| f.intervals).max().unwrap_or(0);
        if o.json {
            lines.push(serde_json::json!({
                "aggregated": aggregated,
                "cpus": o.cpus,
                "switches_per_s_per_cpu": o.switches,
                "seconds": seconds,
                "runs": v.len(),
                "records_generated": generated,
                "records_drained": drained,
                "records_per_s": drained / seconds,
                "lost": lost,
                "intervals": intervals,
                "userspace_ms_per_s": ms_m,
                "userspace_ms_per_s_se": ms_se,
                "machine_share": sh_m,
                "machine_share_se": sh_se,
                "peak_rss_mb": rss_m,
                "peak_rss_mb_se": rss_se,
                "peak_rss_total_mb": tot_m,
                "generator_rss_mb": gen_mb[i],
                "target_userspace_ms_per_s": TARGET_MS_PER_S,
                "target_peak_rss_mb": TARGET_RSS_MB,
            }));
        } else {
            println!(
                "{:<11} {:>5} {:>12} {:>12.0} {:>20} {:>22} {:>18} {:>10}",
                if aggregated { "aggregated" } else { "precise" },
                o.cpus,
                o.switches,
                drained / seconds,
                format!("{ms_m:.1} ± {ms_se:.1}"),
                format!("{:.4}% ± {:.4}%", sh_m * 100.0, sh_se * 100.0),
                format!("{rss_m:.1} ± {rss_se:.1}"),
                lost
            );
            println!(
                "{:<11} peak RSS: {tot_m:.1} MB whole process less {:.1} MB of the generator \
                 alone; {intervals} intervals; {generated:.0} per-switch records generated",
                "", gen_mb[i]
            );
        }
    }
    if o.json {
        for l in lines {
            println!("{l}");
        }
        return Ok(());
    }
    print_targets(o, &runs, &gen_mb);
    Ok(())
}

/// The generator's own peak RSS per variant (precise, aggregated), and each variant's runs,
/// the variants alternating which goes first.
#[allow(clippy::type_complexity)]
fn measure_runs(o: &Opts) -> Result<([f64; 2], [Vec<Figures>; 2]), String> {
    // The generator's own peak RSS, once per variant (it does not vary between runs).
    let mut gen_mb = [0.0f64; 2];
    for (i, aggregated) in [false, true].into_iter().enumerate() {
        gen_mb[i] = spawn(o, aggregated, Mode::GenerateOnly)?.hwm_mb;
    }
    let mut runs: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
    for round in 0..o.runs {
        // Alternate which variant goes first, so drift on a shared machine hits both alike.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for aggregated in order {
            runs[usize::from(aggregated)].push(spawn(o, aggregated, Mode::Full)?);
        }
    }
    Ok((gen_mb, runs))
}

/// The text report's heading and the table's header.
fn print_header(o: &Opts, wall_s: f64) {
    println!(
        "bench-scale: replay of {} CPUs × {} switches/s/CPU × {} s at {HZ} Hz through the \
         sampler's drain (loopback rings) and the attributor; mean ± standard error over {} \
         run(s); wall {:.0} s",
        o.cpus, o.switches, o.seconds, o.runs, wall_s
    );
    println!(
        "the aggregated variant's stream is folded per task at each tick before it reaches \
         the rings (sampler/aggregate_twin.rs, the twin of what the kernel does); that fold is not timed"
    );
    println!(
        "{:<11} {:>5} {:>12} {:>12} {:>20} {:>22} {:>18} {:>10}",
        "variant",
        "cpus",
        "switches/s",
        "records/s",
        "userspace ms/sim s",
        "machine share",
        "peak RSS MB",
        "lost"
    );
}

/// The verdicts against the scale targets (userspace time and peak RSS at 192 CPUs × 20k
/// switches/s), per variant.
fn print_targets(o: &Opts, runs: &[Vec<Figures>; 2], gen_mb: &[f64; 2]) {
    let at_scale = o.cpus == 192 && o.switches == 20_000;
    println!(
        "targets (at 192 CPUs × 20k switches/s{}): userspace <= {TARGET_MS_PER_S} ms \
         per simulated second (0.05% of the machine), peak RSS <= {TARGET_RSS_MB} MB; \
         PASS/FAIL: more than 2 standard errors from the target",
        if at_scale {
            ""
        } else {
            "; this run is smaller, so the verdicts are indicative only"
        }
    );
    for (i, v) in runs.iter().enumerate() {
        let name = if i == 1 { "aggregated" } else { "precise" };
        let ms = ms_per_s(v, o.seconds);
        let rss = rss_over_generator(v, gen_mb[i]);
        let (m, se) = mean_se(&ms);
        let (r, rse) = mean_se(&rss);
        println!(
            "  {:<10} {name}: userspace {m:.1} ± {se:.1} ms/s against <= {TARGET_MS_PER_S}",
            verdict(m, se, TARGET_MS_PER_S)
        );
        println!(
            "  {:<10} {name}: peak RSS {r:.1} ± {rse:.1} MB against <= {TARGET_RSS_MB}",
            verdict(r, rse, TARGET_RSS_MB)
        );
    }
}

/// Each run's userspace drain CPU in ms per simulated second.
fn ms_per_s(runs: &[Figures], seconds: f64) -> Vec<f64> {
    runs.iter().map(|f| f.drain_cpu_s * 1e3 / seconds).collect()
}

/// Each run's peak RSS less the generator's own (`gen_mb`), in MB.
fn rss_over_generator(runs: &[Figures], gen_mb: f64) -> Vec<f64> {
    runs.iter().map(|f| (f.hwm_mb - gen_mb).max(0.0)).collect()
}

/// A variant's runs: mean ± standard error of its userspace ms per simulated second, its share
/// of the machine, its peak RSS over the generator's and its whole peak RSS.
fn variant_means(runs: &[Figures], seconds: f64, machine_s: f64, gen_mb: f64) -> [(f64, f64); 4] {
    let share: Vec<f64> = runs.iter().map(|f| f.drain_cpu_s / machine_s).collect();
    let total: Vec<f64> = runs.iter().map(|f| f.hwm_mb).collect();
    [
        mean_se(&ms_per_s(runs, seconds)),
        mean_se(&share),
        mean_se(&rss_over_generator(runs, gen_mb)),
        mean_se(&total),
    ]
}

/// The mean of a count over the runs.
fn mean_of(runs: &[Figures], count: impl Fn(&Figures) -> u64) -> f64 {
    runs.iter().map(count).sum::<u64>() as f64 / runs.len() as f64
}
