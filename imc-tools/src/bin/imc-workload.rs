//! The workload `cargo xtask bench-overhead` times alone and under a collector (`imc record`,
//! `perf record`): a fixed amount of work, timed by itself so that the collector's start-up and
//! tear-down stay outside the figure.
//!
//!   imc-workload mem|cpu|switch|wake UNITS [--probe-parent] [--warm-up-ms MS] [--bare-switch | --bare-switch-read | --bare-switch-clock | --bare-switch-charge | --bare-hooks HZ]
//!
//! mem: UNITS passes of read-modify-write over a 256 MiB buffer (far beyond any LLC), split
//! between one thread per online CPU. cpu: UNITS million steps of an integer/FP recurrence on
//! each of those threads, all in registers. switch: UNITS thousand round trips of one byte
//! between two threads through a pair of pipes, so that nearly all the time goes into context
//! switches. wake: UNITS seconds of 1 ms boundaries, one thread pinned to each online CPU
//! sleeping to every boundary (absolute deadlines, 1 µs timer slack) and doing nothing else:
//! what any design that wakes a thread on every CPU every millisecond costs at the least
//! (`cargo xtask bench-stat` sets it beside `imc stat -I 1`'s local readers).
//!
//! Prints one line of key=value figures on stdout, among them `loc=`: the local timer
//! interrupts (/proc/interrupts LOC, all CPUs) taken during the timed work.
//!
//! --probe-parent: just before and just after the timed work (outside it), read the parent's
//! CPU time and the run statistics of the BPF programs it holds. Under `imc record -- CMD` the
//! parent is imc, so the differences are imc's own CPU and the number (and kernel cost) of its
//! ticks during exactly the measured window: the proof that it was sampling. Alone, the parent is
//! the benchmark, which holds no BPF program: the same reads, so both sides pay the same. The
//! perf-event programs' share is printed apart (`parent_timer_runs=`, `parent_timer_run_ns=`):
//! a timer's runs, where the tracepoint programs also run at every context switch.
//!
//! --warm-up-ms MS: before the timed work, the same work for at least MS milliseconds, untimed,
//! so that what a collector does once for a new program (`imc record --stacks` reads and
//! indexes its symbols when its first stacks come) falls before the window; with
//! --probe-parent the parent's CPU over the warm-up is printed apart (`warmup_parent_cpu_ns=`).
//!
//! --bare-switch: load the `bare_switch` program of the benchmark's eBPF object (IMC_BPF_OBJECT,
//! built with the `bench` feature) on sched_switch for the timed work, and print its runs and
//! run time (`bare_runs=`, `bare_run_ns=`): the context switches of the window, and the floor a
//! program on that hook costs per switch.
//!
//! --bare-switch-read: the same with `bare_switch_read`, which also reads a page-faults counter
//! of its CPU (opened here on every online CPU): the floor plus one counter read.
//! --bare-switch-clock: the same with `bare_switch_clock`, which reads the clock: the floor plus
//! the timestamp a switch needs.
//! --bare-switch-charge: the same with `bare_switch_charge`, which reads the page-faults counter
//! and the clock, names the task leaving and adds the counter's delta into a per-CPU
//! accumulator: the least a charge to a task can cost on the hook.
//! --bare-hooks HZ: `bare_hooks_switch` on sched_switch, reading the page-faults counter of its
//! CPU and the clock, and `bare_hooks_tick` on the kernel's tick tracepoint (the first of imc's
//! own choices that attaches), reading the clock and, once per tick period of HZ, the counter:
//! the reads imc's default collector makes on the same workload, and nothing else.
use imc::discovery::topology::online_cpus;
use imc::sys::bpf::BpfSys;
use imc::sys::perf::PerfSys;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

const MEM_BYTES: usize = 256 << 20;
const CPU_STEPS_PER_UNIT: u64 = 1_000_000;
const ROUND_TRIPS_PER_UNIT: u64 = 1_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Mem,
    Cpu,
    Switch,
    Wake,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "mem" => Some(Mode::Mem),
            "cpu" => Some(Mode::Cpu),
            "switch" => Some(Mode::Switch),
            "wake" => Some(Mode::Wake),
            _ => None,
        }
    }
}

/// user+sys CPU of this whole process (all threads, joined ones included), in ns.
fn self_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is valid to write.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// One process's CPU and BPF-program statistics at an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Probe {
    /// Sum of the first field of /proc/PID/task/*/schedstat (ns on CPU, per thread).
    cpu_ns: u64,
    /// BPF programs the process holds an fd to.
    progs: u64,
    /// Sum of run_cnt and run_time_ns over them (counted while run-time stats are enabled).
    runs: u64,
    run_ns: u64,
    /// The same over its perf-event programs alone: a timer's (`--freq`), apart from the
    /// tracepoint programs that run at context switches and the kernel's tick.
    timer_runs: u64,
    timer_run_ns: u64,
}

/// BPF_PROG_TYPE_PERF_EVENT (include/uapi/linux/bpf.h): a program run by a perf event's
/// overflow, here imc's cpu-clock timer.
const PROG_TYPE_PERF_EVENT: u64 = 7;

/// The `prog_type:` of a BPF program's fdinfo (0, the unspecified type, when absent).
fn parse_prog_type(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("prog_type:")?.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// run_cnt and run_time_ns from a BPF program's fdinfo (absent when stats were never enabled).
fn parse_prog_fdinfo(text: &str) -> (u64, u64) {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("run_cnt:"), field("run_time_ns:"))
}

fn probe(pid: u32) -> Probe {
    let mut p = Probe::default();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            p.cpu_ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            let is_prog =
                std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:bpf-prog");
            if !is_prog {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            let text = std::fs::read_to_string(info).unwrap_or_default();
            let (runs, ns) = parse_prog_fdinfo(&text);
            p.progs += 1;
            p.runs += runs;
            p.run_ns += ns;
            if parse_prog_type(&text) == PROG_TYPE_PERF_EVENT {
                p.timer_runs += runs;
                p.timer_run_ns += ns;
            }
        }
    }
    p
}

/// The LOC line of /proc/interrupts ("Local timer interrupts") summed over the CPUs: the
/// timer interrupts every CPU has taken since boot.
fn parse_local_timer_interrupts(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("LOC:"))?;
    let counts: Vec<u64> = line
        .split_whitespace()
        .map_while(|f| f.parse::<u64>().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

fn local_timer_interrupts() -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    parse_local_timer_interrupts(&text).unwrap_or_else(|| {
        eprintln!("imc-workload: /proc/interrupts has no LOC line: the timer interrupts are not counted here");
        std::process::exit(1);
    })
}

/// Streams over `buf` `passes` times, reading and writing every word.
fn mem_work(buf: &mut [u64], passes: u64) {
    for pass in 0..passes {
        for w in buf.iter_mut() {
            *w = w.wrapping_mul(3).wrapping_add(pass);
        }
        std::hint::black_box(&mut *buf);
    }
}

/// A dependent chain of integer and floating-point steps: no memory traffic.
fn cpu_work(steps: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    let mut f = 1.0f64 + seed as f64;
    for _ in 0..steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f = f * 0.999_999_9 + (x & 0xff) as f64;
    }
    x ^ f.to_bits()
}

/// `round_trips` times: one thread writes a byte into a pipe, the other reads it and writes it
/// back through a second pipe. Each leg wakes the other thread: two context switches (or two
/// cross-CPU wake-ups) per round trip, and almost no work in between.
fn switch_work(round_trips: u64) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let (mut ping_rx, mut ping_tx) = std::io::pipe()?;
    let (mut pong_rx, mut pong_tx) = std::io::pipe()?;
    std::thread::scope(|s| {
        let echo = s.spawn(move || -> std::io::Result<()> {
            let mut b = [0u8; 1];
            for _ in 0..round_trips {
                ping_rx.read_exact(&mut b)?;
                pong_tx.write_all(&b)?;
            }
            Ok(())
        });
        let mut b = [0u8; 1];
        for i in 0..round_trips {
            ping_tx.write_all(&[i as u8])?;
            pong_rx.read_exact(&mut b)?;
        }
        echo.join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the echo thread panicked")))
    })
}

/// `wake`: 1 ms boundaries per unit (a second).
const WAKES_PER_UNIT: u64 = 1_000;
const WAKE_PERIOD_NS: u64 = 1_000_000;

/// Pinned to `cpu` with a 1 µs timer slack, as `imc stat`'s local readers are, sleeps to each of
/// the next `boundaries` millisecond boundaries and does nothing when it wakes.
fn wake_work(cpu: u32, boundaries: u64) {
    use imc::counting::clock::{Clock, MonotonicClock};
    if let Err(e) = imc::sys::thread::pin_to_cpu(cpu) {
        eprintln!("imc-workload: pinning a thread to CPU {cpu}: {e}");
        std::process::exit(1);
    }
    let _ = imc::sys::thread::set_timer_slack_ns(1_000);
    let clock = MonotonicClock;
    let start = clock.now_ns() / WAKE_PERIOD_NS * WAKE_PERIOD_NS;
    for k in 1..=boundaries {
        let at = start + k * WAKE_PERIOD_NS;
        while clock.now_ns() < at {
            clock.sleep_until(at);
        }
    }
}

fn run_work(mode: Mode, units: u64, threads: usize, buf: &mut [u64]) {
    match mode {
        Mode::Mem => std::thread::scope(|s| {
            let per = buf.len().div_ceil(threads);
            for chunk in buf.chunks_mut(per) {
                s.spawn(move || mem_work(chunk, units));
            }
        }),
        Mode::Cpu => std::thread::scope(|s| {
            for i in 0..threads {
                s.spawn(move || {
                    std::hint::black_box(cpu_work(units * CPU_STEPS_PER_UNIT, i as u64))
                });
            }
        }),
        Mode::Switch => {
            if let Err(e) = switch_work(units * ROUND_TRIPS_PER_UNIT) {
                eprintln!("imc-workload: passing a byte through a pipe: {e}");
                std::process::exit(1);
            }
        }
        Mode::Wake => std::thread::scope(|s| {
            for cpu in online_cpu_list() {
                s.spawn(move || wake_work(cpu, units * WAKES_PER_UNIT));
            }
        }),
    }
}

/// A bare program of the benchmark's object to load for the timed work.
#[derive(Clone, Copy)]
struct Bare {
    /// The program on sched_switch.
    name: &'static str,
    /// It reads slot 0: a page-faults counter of every online CPU goes there first.
    reads: bool,
    /// A second program on the kernel's tick tracepoint, and the kernel's HZ, from which its
    /// read period is set as imc's is.
    tick: Option<(&'static str, u32)>,
}

impl Bare {
    /// A program on sched_switch alone.
    fn switch(name: &'static str, reads: bool) -> Bare {
        Bare {
            name,
            reads,
            tick: None,
        }
    }
}

/// The benchmark object's bare program, loaded and attached to sched_switch (and `bare.tick`'s
/// to the first of imc's kernel tick tracepoints that attaches, its read period imc's for that
/// HZ), detached when the returned handle is dropped; with `bare.reads`, a page-faults counter of
/// every online CPU in its slot 0 array first (the counters live as long as the handle).
fn load_bare(bare: Bare) -> Result<(aya::Ebpf, Vec<OwnedFd>), String> {
    let name = bare.name;
    let path = std::env::var_os(imc::sampler::object::OBJECT_ENV).ok_or_else(|| {
        format!(
            "{} names no object (cargo xtask bench-overhead sets it to the bench build)",
            imc::sampler::object::OBJECT_ENV
        )
    })?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.to_string_lossy()))?;
    let cpus = online_cpu_list();
    let possible = cpus.iter().max().map_or(1, |m| m + 1);
    let min_flush = imc_common::tick_rules::min_flush_ns(bare.tick.map_or(0, |(_, hz)| hz));
    let mut ebpf = aya::EbpfLoader::new()
        .map_max_entries(imc_common::SLOT_MAP_NAMES[0], possible)
        .override_global(imc_common::MIN_FLUSH_GLOBAL, &min_flush, true)
        .load(&bytes)
        .map_err(|e| format!("loading the object: {e}"))?;
    let mut counters = Vec::new();
    if bare.reads {
        let map = match ebpf.map(imc_common::SLOT_MAP_NAMES[0]) {
            Some(aya::maps::Map::PerfEventArray(m)) => m.fd().as_fd().try_clone_to_owned(),
            _ => return Err("the object has no slot 0 array".into()),
        }
        .map_err(|e| format!("slot 0 array: {e}"))?;
        // The software page-faults counter (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS).
        let attr = imc::sys::perf::PerfEventAttr::counting(1, 2);
        for &cpu in &cpus {
            let fd = imc::sys::perf::RealPerf
                .open(&attr, -1, cpu as i32, None)
                .map_err(|e| format!("page-faults counter on CPU {cpu}: {e}"))?;
            imc::sys::bpf::RealBpf
                .perf_array_set(map.as_fd(), cpu, fd.as_fd())
                .map_err(|e| format!("storing the counter of CPU {cpu}: {e}"))?;
            counters.push(fd);
        }
    }
    attach_bare(&mut ebpf, name, &["sched_switch"])?;
    if let Some((tick, _)) = bare.tick {
        attach_bare(&mut ebpf, tick, &imc::sampler::KERNEL_TICK_TRACEPOINTS)?;
    }
    Ok((ebpf, counters))
}

/// Loads the object's raw tracepoint program `name` and attaches it to the first of
/// `tracepoints` that takes it.
fn attach_bare(ebpf: &mut aya::Ebpf, name: &str, tracepoints: &[&str]) -> Result<(), String> {
    let prog: &mut aya::programs::RawTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| {
            format!("no {name} program: the object was not built with the bench feature")
        })?
        .try_into()
        .map_err(|e| format!("{name}: {e}"))?;
    prog.load().map_err(|e| format!("loading {name}: {e}"))?;
    let mut refused = Vec::new();
    for tp in tracepoints {
        match prog.attach(tp) {
            Ok(_) => return Ok(()),
            Err(e) => refused.push(format!("{tp}: {e}")),
        }
    }
    Err(format!("attaching {name}: {}", refused.join("; ")))
}

/// The online CPUs' numbers (CPU 0 alone where they cannot be read).
fn online_cpu_list() -> Vec<u32> {
    online_cpus(Path::new("/")).unwrap_or_else(|_| vec![0])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Args {
        mode,
        units,
        probe_parent,
        warm_up,
        bare,
    } = parse_args(&args);
    let threads = match mode {
        Mode::Switch => 2,
        Mode::Mem | Mode::Cpu | Mode::Wake => online_cpu_list().len(),
    };

    // Set-up outside the timed work: fault the buffer in; turn on BPF run statistics (held until
    // exit) so the parent's tick program counts its runs.
    let mut buf = if mode == Mode::Mem {
        vec![1u64; MEM_BYTES / 8]
    } else {
        Vec::new()
    };
    let _stats = if probe_parent || bare.is_some() {
        match imc::sys::bpf::enable_run_time_stats() {
            Ok(fd) => Some(fd),
            Err(e) => {
                eprintln!("imc-workload: BPF_ENABLE_STATS: {e} (--probe-parent needs root)");
                std::process::exit(1);
            }
        }
    } else {
        None
    };
    let _bare = bare.map(|b| match load_bare(b) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("imc-workload: {}: {e}", b.name);
            std::process::exit(1);
        }
    });
    let bare = bare.is_some();
    let ppid = std::os::unix::process::parent_id();
    let warm_before = (probe_parent && !warm_up.is_zero()).then(|| probe(ppid));
    let warm_start = Instant::now();
    while warm_start.elapsed() < warm_up {
        run_work(mode, WARM_UP_UNITS, threads, &mut buf);
    }
    let warm_took = warm_start.elapsed();
    let before = probe_parent.then(|| probe(ppid));
    let bare_before = bare.then(|| probe(std::process::id()));

    let loc0 = local_timer_interrupts();
    let cpu0 = self_cpu_ns();
    let t0 = Instant::now();
    run_work(mode, units, threads, &mut buf);
    let elapsed = t0.elapsed();
    let cpu_ns = self_cpu_ns() - cpu0;
    let loc = local_timer_interrupts().saturating_sub(loc0);

    let after = probe_parent.then(|| probe(ppid));
    let bare_after = bare.then(|| probe(std::process::id()));
    let mut line = format!(
        "imc-workload: mode={} units={units} threads={threads} pid={} elapsed_ns={} cpu_ns={cpu_ns} loc={loc}",
        args[0],
        std::process::id(),
        elapsed.as_nanos()
    );
    if let (Some(b), Some(a)) = (before, after) {
        line += &format!(
            " parent_progs={} parent_cpu_ns={} parent_bpf_runs={} parent_bpf_run_ns={} \
             parent_timer_runs={} parent_timer_run_ns={}",
            a.progs,
            a.cpu_ns.saturating_sub(b.cpu_ns),
            a.runs.saturating_sub(b.runs),
            a.run_ns.saturating_sub(b.run_ns),
            a.timer_runs.saturating_sub(b.timer_runs),
            a.timer_run_ns.saturating_sub(b.timer_run_ns)
        );
    }
    if let (Some(w), Some(b)) = (warm_before, before) {
        line += &format!(
            " warmup_ns={} warmup_parent_cpu_ns={}",
            warm_took.as_nanos(),
            b.cpu_ns.saturating_sub(w.cpu_ns)
        );
    }
    if let (Some(b), Some(a)) = (bare_before, bare_after) {
        line += &format!(
            " bare_runs={} bare_run_ns={}",
            a.runs.saturating_sub(b.runs),
            a.run_ns.saturating_sub(b.run_ns)
        );
    }
    println!("{line}");
    std::hint::black_box(&buf);
}

/// What the command line asks for.
struct Args {
    mode: Mode,
    units: u64,
    probe_parent: bool,
    /// Untimed work before the window (zero: none).
    warm_up: std::time::Duration,
    /// The bare program to load, if any.
    bare: Option<Bare>,
}

/// Units of work between two looks at the clock during the warm-up.
const WARM_UP_UNITS: u64 = 10;

fn parse_args(args: &[String]) -> Args {
    let usage = "usage: imc-workload mem|cpu|switch|wake UNITS [--probe-parent] [--warm-up-ms MS] [--bare-switch | --bare-switch-read | --bare-switch-clock | --bare-switch-charge | --bare-hooks HZ] (UNITS: a whole number >= 1; MS: a whole number of milliseconds)";
    let fail = |what: String| -> ! {
        eprintln!("imc-workload: {what}{usage}");
        std::process::exit(2);
    };
    let mode = args.first().and_then(|m| Mode::parse(m));
    let (mode, units) = match (mode, args.get(1).map(|u| u.parse::<u64>())) {
        (Some(m), Some(Ok(u))) if u >= 1 => (m, u),
        _ => fail(String::new()),
    };
    let mut out = Args {
        mode,
        units,
        probe_parent: false,
        warm_up: std::time::Duration::ZERO,
        bare: None,
    };
    let mut rest = args.iter().skip(2);
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--probe-parent" => out.probe_parent = true,
            "--warm-up-ms" => {
                let v = rest.next().map_or("", String::as_str);
                match v.parse::<u64>() {
                    Ok(ms) if ms <= 600_000 => {
                        out.warm_up = std::time::Duration::from_millis(ms);
                    }
                    _ => fail(format!("--warm-up-ms takes up to 600000, not '{v}'; ")),
                }
            }
            "--bare-switch" => out.bare = Some(Bare::switch("bare_switch", false)),
            "--bare-switch-read" => out.bare = Some(Bare::switch("bare_switch_read", true)),
            "--bare-switch-clock" => out.bare = Some(Bare::switch("bare_switch_clock", false)),
            "--bare-switch-charge" => out.bare = Some(Bare::switch("bare_switch_charge", true)),
            "--bare-hooks" => {
                let v = rest.next().map_or("", String::as_str);
                match v.parse::<u32>() {
                    Ok(hz) if (1..=100_000).contains(&hz) => {
                        out.bare = Some(Bare {
                            name: "bare_hooks_switch",
                            reads: true,
                            tick: Some(("bare_hooks_tick", hz)),
                        })
                    }
                    _ => fail(format!(
                        "--bare-hooks takes the kernel's HZ (1 to 100000), not '{v}'; "
                    )),
                }
            }
            other => fail(format!("unknown argument '{other}'; ")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_run_statistics_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t7\n\
                    prog_jited:\t1\nprog_tag:\t4cc3a1d2d6dc7d1e\nmemlock:\t4096\nprog_id:\t42\n\
                    run_time_ns:\t1234567\nrun_cnt:\t2001\nrecursion_misses:\t0\n\
                    verified_insns:\t389\n";
        assert_eq!(parse_prog_fdinfo(info), (2001, 1234567));
        assert_eq!(parse_prog_fdinfo("prog_type:\t7\n"), (0, 0));
        assert_eq!(parse_prog_type(info), PROG_TYPE_PERF_EVENT);
        assert_eq!(parse_prog_type("prog_type:\t17\nrun_cnt:\t3\n"), 17);
        assert_eq!(parse_prog_type("run_cnt:\t3\n"), 0);
    }

    #[test]
    fn probing_this_process_sees_its_own_cpu() {
        let a = probe(std::process::id());
        std::hint::black_box(cpu_work(2_000_000, 1));
        let b = probe(std::process::id());
        assert!(b.cpu_ns > a.cpu_ns, "{a:?} then {b:?}");
        assert_eq!(b.progs, 0);
    }

    #[test]
    fn sums_the_local_timer_line_over_cpus() {
        let text = "           CPU0       CPU1       \n  26:          0         15  IO-APIC   4-edge      ttyS0\n\
                    NMI:          0          0   Non-maskable interrupts\n\
                    LOC:     656160     712965   Local timer interrupts\n\
                    RES:     139165      70047   Rescheduling interrupts\n";
        assert_eq!(parse_local_timer_interrupts(text), Some(656160 + 712965));
        assert_eq!(
            parse_local_timer_interrupts("NMI: 0 0 Non-maskable\n"),
            None
        );
        assert_eq!(parse_local_timer_interrupts("LOC: Local timer\n"), None);
    }

    #[test]
    fn passes_every_byte_back() {
        switch_work(500).unwrap();
        assert!(
            local_timer_interrupts() > 0,
            "this machine counts no timer interrupt"
        );
    }

    #[test]
    fn work_is_deterministic_and_not_optimised_away() {
        assert_eq!(cpu_work(1000, 3), cpu_work(1000, 3));
        assert_ne!(cpu_work(1000, 3), cpu_work(1001, 3));
        let mut b = vec![1u64; 8];
        mem_work(&mut b, 2);
        // pass 0: 1*3+0 = 3; pass 1: 3*3+1 = 10.
        assert_eq!(b, vec![10u64; 8]);
    }
}
