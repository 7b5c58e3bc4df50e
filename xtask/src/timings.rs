//! Wall time per phase of `cargo xtask test` (and `cross`), printed at its end, so a contributor
//! sees where the loop's minutes go: the eBPF object, each build, the cross builds, the test
//! build, and each test binary's run. Printed when a phase fails too (up to that phase).
use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A test binary's run shorter than this is counted in one line with the other short ones.
const SHORT: Duration = Duration::from_secs(1);

pub struct Timings {
    start: Instant,
    /// (phase, wall time, how it ran).
    phases: Vec<(String, Duration, Kind)>,
}

/// How a phase ran: one after another, as a test binary of the run before it (listed under
/// it), or beside the others (its time is not theirs to add).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Alone,
    InRun,
    Beside,
}

impl Timings {
    pub fn new() -> Timings {
        Timings {
            start: Instant::now(),
            phases: Vec::new(),
        }
    }

    /// Runs `f` as phase `name` and records its wall time, failed or not.
    pub fn time<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let r = f();
        let name = match r {
            Ok(_) => name.to_string(),
            Err(_) => format!("{name} (failed)"),
        };
        self.phases.push((name, t.elapsed(), Kind::Alone));
        r
    }

    /// Records phase `name`, which ran for `took` beside the others.
    pub fn beside(&mut self, name: &str, took: Duration) {
        self.phases.push((name.to_string(), took, Kind::Beside));
    }

    /// Runs `cmd` (a `cargo test` that builds nothing: its binaries are built) as phase `name`,
    /// passing its output through, and records each test binary's wall time as Cargo starts
    /// the next.
    pub fn time_tests(&mut self, name: &str, cmd: &mut Command) -> Result<()> {
        self.time_tests_telling(name, cmd, Box::new(|_| {}))
    }

    /// [`Timings::time_tests`], telling `starts` each binary's name as Cargo starts it.
    pub fn time_tests_telling(
        &mut self,
        name: &str,
        cmd: &mut Command,
        starts: Box<dyn FnMut(&str) + Send>,
    ) -> Result<()> {
        let t = Instant::now();
        let r = self.run_tests(cmd, starts);
        let name = match r {
            Ok(_) => name.to_string(),
            Err(_) => format!("{name} (failed)"),
        };
        self.phases.push((name, t.elapsed(), Kind::Alone));
        r
    }

    fn run_tests(
        &mut self,
        cmd: &mut Command,
        mut starts: Box<dyn FnMut(&str) + Send>,
    ) -> Result<()> {
        // Cargo says which binary runs on stderr and the binary reports on stdout: one pipe
        // for both keeps them in the order they were written.
        let (reader, writer) = std::io::pipe().context("a pipe for cargo test's output")?;
        let child = cmd
            .stdout(
                writer
                    .try_clone()
                    .context("a pipe for cargo test's output")?,
            )
            .stderr(writer)
            .stdin(Stdio::null())
            .spawn();
        // The command holds the pipe's write end too: dropped, the pipe ends with the child.
        cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        let mut child = child.with_context(|| format!("running {cmd:?}"))?;
        // Read apart from the wait: a process a test left behind may hold the pipe open after
        // cargo exits, and must not hold up the report.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(reader).split(b'\n') {
                let Ok(line) = line else { break };
                let line = String::from_utf8_lossy(&line);
                println!("{line}");
                if let Some(binary) = test_binary(&line) {
                    starts(&binary);
                    if tx.send((binary, Instant::now())).is_err() {
                        break;
                    }
                }
            }
        });
        let status = child
            .wait()
            .with_context(|| format!("waiting for {cmd:?}"))?;
        let end = Instant::now();
        let mut starts = Vec::new();
        while let Ok(start) = rx.recv_timeout(Duration::from_secs(2)) {
            starts.push(start);
        }
        for (i, (name, since)) in starts.iter().enumerate() {
            let until = starts.get(i + 1).map_or(end, |(_, t)| *t);
            self.phases.push((
                name.clone(),
                until.saturating_duration_since(*since),
                Kind::InRun,
            ));
        }
        if !status.success() {
            bail!("{cmd:?} failed: {status}");
        }
        Ok(())
    }

    /// The table: each phase, the test binaries of a run under it (those under [`SHORT`]
    /// together), the phases that ran beside them, and the total since [`Timings::new`].
    pub fn report(&self) -> String {
        let mut out = String::from("xtask: wall time per phase\n");
        let mut short = (0usize, Duration::ZERO);
        let mut tests = Vec::new();
        for (name, d, kind) in &self.phases {
            if *kind == Kind::Beside {
                continue;
            }
            if *kind == Kind::InRun {
                if *d < SHORT {
                    short = (short.0 + 1, short.1 + *d);
                } else {
                    tests.push(format!("      {} {name}\n", clock(*d)));
                }
                continue;
            }
            out.push_str(&format!("  {} {name}\n", clock(*d)));
            out.extend(tests.drain(..));
            if short.0 > 0 {
                out.push_str(&format!(
                    "      {} {} test binaries of under {} s each\n",
                    clock(short.1),
                    short.0,
                    SHORT.as_secs()
                ));
                short = (0, Duration::ZERO);
            }
        }
        for (name, d, _) in self.phases.iter().filter(|p| p.2 == Kind::Beside) {
            out.push_str(&format!(
                "  {} {name} (beside the phases above)\n",
                clock(*d)
            ));
        }
        out.push_str(&format!("  {} total\n", clock(self.start.elapsed())));
        out
    }
}

/// `m:ss.s`, right-aligned.
fn clock(d: Duration) -> String {
    let s = d.as_secs_f64();
    format!("{:>3}:{:04.1}", (s / 60.0).floor() as u64, s % 60.0)
}

/// The test binary a line of `cargo test` starts, named as Cargo names it ("plan.rs",
/// "tests/record.rs", "doc-tests imc_sim"), a crate's unit tests by their crate
/// ("unittests imc-sim: src/lib.rs").
fn test_binary(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(krate) = line.strip_prefix("Doc-tests ") {
        return Some(format!("doc-tests {krate}"));
    }
    let rest = line.strip_prefix("Running ")?;
    let (what, exe) = rest.split_once(" (")?;
    let Some(src) = what.strip_prefix("unittests ") else {
        return Some(what.to_string());
    };
    // target/debug/deps/imc_sim-0123abcd): the crate's name without Cargo's hash.
    let file = exe.trim_end_matches(')').rsplit('/').next()?;
    let krate = file.rsplit_once('-').map_or(file, |(k, _)| k);
    Some(format!("unittests {}: {src}", krate.replace('_', "-")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_test_lines_name_the_binary_they_start() {
        assert_eq!(
            test_binary("     Running plan.rs (target/debug/deps/plan-89e347d159f6c057)"),
            Some("plan.rs".into())
        );
        assert_eq!(
            test_binary(
                "     Running unittests src/lib.rs (target/debug/deps/imc_sim-8b6accbdfa2352ac)"
            ),
            Some("unittests imc-sim: src/lib.rs".into())
        );
        assert_eq!(
            test_binary("   Doc-tests imc_sim"),
            Some("doc-tests imc_sim".into())
        );
        assert_eq!(test_binary("test plan::x ... ok"), None);
        assert_eq!(test_binary("Running without a binary"), None);
    }

    /// A command that writes Cargo's lines to stderr and a binary's report to stdout, then
    /// exits with `code`.
    fn fake_cargo_test(code: u8) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!(
            "echo '     Running a.rs (target/debug/deps/a-1)' >&2; echo 'test result: ok'; \
             echo '   Doc-tests imc' >&2; exit {code}"
        ));
        cmd
    }

    #[test]
    fn each_binary_cargo_test_starts_is_a_phase_of_the_run() {
        let mut t = Timings::new();
        t.time_tests("test run", &mut fake_cargo_test(0)).unwrap();
        let names: Vec<(&str, Kind)> = t.phases.iter().map(|p| (p.0.as_str(), p.2)).collect();
        assert_eq!(
            names,
            [
                ("a.rs", Kind::InRun),
                ("doc-tests imc", Kind::InRun),
                ("test run", Kind::Alone)
            ]
        );
        let mut t = Timings::new();
        assert!(t.time_tests("test run", &mut fake_cargo_test(101)).is_err());
        assert_eq!(t.phases.last().unwrap().0, "test run (failed)");
        assert_eq!(t.phases.len(), 3, "the binaries that ran are still listed");
    }

    #[test]
    fn the_report_lists_long_test_binaries_under_their_run_and_the_short_ones_together() {
        let mut t = Timings::new();
        t.phases = vec![
            ("build".into(), Duration::from_secs(61), Kind::Alone),
            ("plan.rs".into(), Duration::from_millis(6_500), Kind::InRun),
            ("a.rs".into(), Duration::from_millis(200), Kind::InRun),
            ("b.rs".into(), Duration::from_millis(300), Kind::InRun),
            ("test run".into(), Duration::from_secs(7), Kind::Alone),
        ];
        t.beside("cross builds", Duration::from_secs(70));
        let r = t.report();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[1], "    1:01.0 build");
        assert_eq!(lines[2], "    0:07.0 test run");
        assert_eq!(lines[3], "        0:06.5 plan.rs");
        assert_eq!(lines[4], "        0:00.5 2 test binaries of under 1 s each");
        assert_eq!(
            lines[5],
            "    1:10.0 cross builds (beside the phases above)"
        );
        assert!(lines[6].ends_with(" total"), "{r}");
    }
}
