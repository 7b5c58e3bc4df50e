//! `imc top --ibs`: per process, how many sampled loads AMD IBS saw served from DRAM, local or
//! remote node, per interval — a cross-check of the bandwidth attribution (see
//! [`crate::counting::ibs`]). One JSON object per interval with `--json` or when piped, else a
//! plain table per interval.
use crate::cli::{GlobalArgs, TopArgs};
use crate::counting::clock::{Clock, MonotonicClock};
use crate::counting::ibs::{IbsPlan, IbsSampler, ProcessCounts, Tally, plan};
use crate::error::{CliError, CliResult};
use crate::output::ibs_top::{IbsInterval, IbsTask};
use crate::sys::perf::{PerfSys, RealPerf};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn run(global: &GlobalArgs, args: &TopArgs) -> CliResult<ExitCode> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    let json = args.json || !std::io::stdout().is_terminal();
    let out = std::io::stdout().lock();
    run_with(global, args, &RealPerf, &MonotonicClock, json, out, &|| {
        STOP.load(Ordering::SeqCst)
    })
}

fn comm(root: &Path, pid: u32) -> String {
    std::fs::read_to_string(root.join(format!("proc/{pid}/comm")))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// The interval object from a tally: processes by DRAM loads, then samples, then pid.
pub fn interval(
    root: &Path,
    p: &IbsPlan,
    t: &Tally,
    (t_start_ns, t_end_ns): (u64, u64),
    top: usize,
) -> IbsInterval {
    let mut tasks: Vec<(&u32, &ProcessCounts)> = t.by_pid.iter().collect();
    tasks.sort_by_key(|(pid, c)| {
        (
            std::cmp::Reverse(c.dram_local + c.dram_remote),
            std::cmp::Reverse(c.samples),
            **pid,
        )
    });
    if top > 0 {
        tasks.truncate(top);
    }
    IbsInterval {
        t_start_ns,
        t_end_ns,
        source: "ibs_op",
        l3missonly: p.l3missonly,
        sample_period: p.period,
        samples: t.samples,
        lost_samples: t.lost,
        tasks: tasks
            .into_iter()
            .map(|(&pid, c)| IbsTask {
                pid,
                comm: comm(root, pid),
                samples: c.samples,
                loads: c.loads,
                dram_local: c.dram_local,
                dram_remote: c.dram_remote,
            })
            .collect(),
    }
}

/// `top --ibs` with its OS edges given (tests pass a scripted `PerfSys`).
pub fn run_with<W: Write>(
    global: &GlobalArgs,
    args: &TopArgs,
    sys: &dyn PerfSys,
    clock: &dyn Clock,
    json: bool,
    mut out: W,
    stop: &dyn Fn() -> bool,
) -> CliResult<ExitCode> {
    let found = crate::discovery::discover(&global.root)
        .map_err(|e| CliError::from(e).context("top --ibs"))?;
    let pmus = crate::discovery::read_pmus(&global.root)
        .map_err(|e| CliError::from(e).context("top --ibs"))?;
    let p = plan(&found.other_sources, &pmus, &found.topology.online)
        .map_err(|e| CliError::runtime_because("top --ibs", e))?;
    let mut sampler =
        IbsSampler::open(sys, &p).map_err(|e| CliError::runtime_because("top --ibs", e))?;
    let interval_ns = args.interval_ms.saturating_mul(1_000_000);
    let t0 = clock.now_ns();
    let end = args.duration.map(|s| t0 + (s * 1e9).round() as u64);
    let mut start = t0;
    let mut buf = Vec::new();
    loop {
        let deadline = end.map_or(start + interval_ns, |e| (start + interval_ns).min(e));
        // Sleep in short steps so a stop signal is seen promptly.
        while clock.now_ns() < deadline && !stop() {
            let step = (clock.now_ns() + 50_000_000).min(deadline);
            clock.sleep_until(step);
        }
        let now = clock.now_ns();
        let mut tally = Tally::default();
        sampler.collect(&mut tally);
        let i = interval(&global.root, &p, &tally, (start, now), args.top);
        buf.clear();
        if json {
            serde_json::to_writer(&mut buf, &i)
                .map_err(|e| CliError::runtime_because("cannot write JSON", e))?;
            buf.push(b'\n');
        } else {
            crate::output::ibs_top::table(&mut buf, &i, t0);
        }
        match out.write_all(&buf).and_then(|()| out.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(CliError::output(e)),
        }
        start = now;
        if stop() || end.is_some_and(|e| now >= e) {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counting::ibs::tests::{
        ds_l1_hit_load, ds_local_dram_load, ds_remote_dram_load, payload,
    };
    use crate::sys::perf::{PerfEventAttr, PerfIoctl, RECORD_SAMPLE, RingBuffer};
    use std::io;
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::path::PathBuf;
    use std::sync::Mutex;

    /// A kernel whose IBS rings hold scripted samples: CPU 0 and CPU 1 each get their records
    /// once, at the first drain.
    #[derive(Default)]
    struct ScriptedIbs {
        opens: Mutex<Vec<(PerfEventAttr, i32)>>,
    }

    struct Ring(Vec<(u32, Vec<u8>)>);

    impl RingBuffer for Ring {
        fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
            for (k, p) in self.0.drain(..) {
                f(k, &p);
            }
        }
    }

    impl PerfSys for ScriptedIbs {
        fn open(
            &self,
            attr: &PerfEventAttr,
            _pid: i32,
            cpu: i32,
            _group: Option<BorrowedFd<'_>>,
        ) -> io::Result<OwnedFd> {
            self.opens.lock().unwrap().push((*attr, cpu));
            Ok(std::fs::File::open("/dev/null")?.into())
        }
        fn read(&self, _fd: BorrowedFd<'_>, _buf: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }
        fn ioctl(&self, _fd: BorrowedFd<'_>, _op: PerfIoctl) -> io::Result<()> {
            Ok(())
        }
        fn map_ring(&self, _fd: BorrowedFd<'_>, _pages: usize) -> io::Result<Box<dyn RingBuffer>> {
            let n = self.opens.lock().unwrap().len();
            let recs = match n {
                // CPU 0: process 100 loads from local DRAM twice, remote once, hits L1 once.
                1 => vec![
                    (RECORD_SAMPLE, payload(100, 100, ds_local_dram_load())),
                    (RECORD_SAMPLE, payload(100, 101, ds_local_dram_load())),
                    (RECORD_SAMPLE, payload(100, 101, ds_remote_dram_load())),
                    (RECORD_SAMPLE, payload(100, 100, ds_l1_hit_load())),
                ],
                // CPU 1: process 200 only hits the cache.
                2 => vec![(RECORD_SAMPLE, payload(200, 200, ds_l1_hit_load()))],
                _ => Vec::new(),
            };
            Ok(Box::new(Ring(recs)))
        }
        fn supports_rings(&self) -> bool {
            true
        }
    }

    fn args() -> (GlobalArgs, TopArgs) {
        use clap::Parser;
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/zen3-ibs");
        let cli = crate::cli::Cli::try_parse_from([
            "imc",
            "top",
            "--ibs",
            "-I",
            "10",
            "--duration",
            "0.03",
        ])
        .unwrap();
        let crate::cli::Command::Top(t) = cli.command else {
            panic!("not top")
        };
        (GlobalArgs { root, ..cli.global }, t)
    }

    #[test]
    fn samples_become_per_process_dram_loads() {
        let (g, a) = args();
        let sys = ScriptedIbs::default();
        let mut out = Vec::new();
        run_with(&g, &a, &sys, &MonotonicClock, true, &mut out, &|| false).unwrap();
        // IBS op on each of the tree's 32 CPUs, sampling pid and data source.
        let opens = sys.opens.lock().unwrap();
        assert_eq!(opens.len(), 32);
        assert!(
            opens
                .iter()
                .all(|(a, _)| a.type_ == 9 && a.sample_period % 16 == 0)
        );
        assert_eq!(
            opens.iter().map(|(_, c)| *c).collect::<Vec<_>>(),
            (0..32).collect::<Vec<i32>>()
        );
        // Zen 3 has no l3missonly: config 0.
        assert!(opens.iter().all(|(a, _)| a.config == 0));
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(lines.len() >= 2, "{lines:?}");
        let first = &lines[0];
        assert_eq!(first["source"], "ibs_op");
        assert_eq!(first["samples"], 5);
        assert_eq!(first["l3missonly"], false);
        let tasks = first["tasks"].as_array().unwrap();
        assert_eq!(tasks[0]["pid"], 100);
        assert_eq!(
            (
                tasks[0]["dram_local"].as_u64(),
                tasks[0]["dram_remote"].as_u64()
            ),
            (Some(2), Some(1))
        );
        assert_eq!(tasks[0]["loads"], 4);
        assert_eq!(tasks[1]["pid"], 200);
        assert_eq!(tasks[1]["dram_local"], 0);
        // Later intervals: nothing new in the rings.
        assert_eq!(lines[1]["samples"], 0);
        assert!(lines[1]["t_start_ns"].as_u64() >= first["t_end_ns"].as_u64());
    }

    #[test]
    fn the_table_lists_processes_by_dram_loads() {
        let (g, a) = args();
        let mut out = Vec::new();
        run_with(
            &g,
            &a,
            &ScriptedIbs::default(),
            &MonotonicClock,
            false,
            &mut out,
            &|| true,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(rows[0].contains("dram_local"), "{text}");
        let cols: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(cols[0], "100");
        assert_eq!(&cols[2..], ["2", "1", "4", "4"]);
    }
}
