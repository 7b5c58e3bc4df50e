//! `cargo xtask accuracy --stacks [--rounds R]`: traffic by call stack against exact truth on
//! this machine. A C program (built here with frame pointers) faults three pages in `hot_three`
//! for every one in `hot_one`, in equal time, in turns of a phase; the same program is run
//! under `perf record -e page-faults -c 1 -g` (every fault a sample with its stack: exact per
//! stack where page faults stand in for DRAM traffic) and under `imc record --stacks` (50 ms
//! phases at the kernel's tick; 2 ms phases with `--stack-period 1`). Per function, each tool's
//! share of the program's faults, the error, and the bound (0.03).
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workload: each step of `hot_three` faults three fresh pages and `hot_one` one, and every
/// step lasts the same 200 µs (spun out), so their faults are 3 : 1 in equal time.
const PROGRAM: &str = r#"
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((noinline)) static void touch(int pages){
  char *p = mmap(0, pages*4096L, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  for (int i=0;i<pages;i++) p[i*4096L]=1;
  munmap(p, pages*4096L);
}
__attribute__((noinline)) static void step(int pages){ double end=now()+200e-6; touch(pages); while(now()<end){} }
__attribute__((noinline)) void hot_three(double until){ while(now()<until) step(3); }
__attribute__((noinline)) void hot_one(double until){ while(now()<until) step(1); }
int main(int argc,char**argv){ double phase=atof(argv[1]); double end=now()+atof(argv[2]);
  while(now()<end){ hot_three(now()+phase); hot_one(now()+phase);} return 0; }
"#;

const FUNCTIONS: [&str; 2] = ["hot_three", "hot_one"];
/// The most a function's share may differ from perf's.
const BOUND: f64 = 0.03;
/// Seconds each run lasts.
const SECONDS: &str = "3";

/// One mode: the phase and imc's extra arguments.
struct Mode {
    name: &'static str,
    phase: &'static str,
    imc_args: &'static [&'static str],
}

const MODES: [Mode; 2] = [
    Mode {
        name: "tick and switches, 50 ms phases",
        phase: "0.05",
        imc_args: &[],
    },
    Mode {
        name: "--stack-period 1, 2 ms phases",
        phase: "0.002",
        imc_args: &["--stack-period", "1"],
    },
];

/// Runs every mode `rounds` times; prints the table; false when a mean error is past the bound.
pub fn run(imc: &Path, rounds: u32) -> Result<bool> {
    let dir = tempfile_dir()?;
    let prog = build_program(&dir)?;
    println!("accuracy --stacks: share of the program's page faults per function, imc vs perf");
    println!(
        "{:<34} {:<10} {:>14} {:>14} {:>16}",
        "MODE", "FUNCTION", "PERF", "IMC", "ERROR"
    );
    let mut ok = true;
    for m in &MODES {
        let mut errs: Vec<Vec<f64>> = vec![Vec::new(); FUNCTIONS.len()];
        let mut perf_s = vec![Vec::new(); FUNCTIONS.len()];
        let mut imc_s = vec![Vec::new(); FUNCTIONS.len()];
        for _ in 0..rounds {
            let truth = perf_shares(&dir, &prog, m.phase)?;
            let got = imc_shares(imc, &dir, &prog, m)?;
            for i in 0..FUNCTIONS.len() {
                errs[i].push((got[i] - truth[i]).abs());
                perf_s[i].push(truth[i]);
                imc_s[i].push(got[i]);
            }
        }
        for (i, f) in FUNCTIONS.iter().enumerate() {
            let (pm, _) = crate::accuracy_live::mean_se(&perf_s[i]);
            let (im, _) = crate::accuracy_live::mean_se(&imc_s[i]);
            let (e, se) = crate::accuracy_live::mean_se(&errs[i]);
            ok &= e <= BOUND;
            println!(
                "{:<34} {:<10} {:>14.4} {:>14.4} {:>9.4} ± {:.4}",
                m.name, f, pm, im, e, se
            );
        }
    }
    println!(
        "bound: each function's share within {BOUND} of perf's ({rounds} round(s), mean ± s.e.)"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("imc-accuracy-stacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn build_program(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("two.c");
    std::fs::write(&src, PROGRAM)?;
    let bin = dir.join("two");
    let st = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .context("running cc (scripts/setup.sh installs build-essential)")?;
    if !st.success() {
        bail!("cc failed to build the accuracy program");
    }
    Ok(bin)
}

/// Each function's share of the program's faults as a stack's frames name them: a stack is
/// the function's when any of its frames is.
fn shares(stacks: impl Iterator<Item = (Vec<String>, u64)>) -> [f64; 2] {
    let mut by = [0u64; 2];
    for (frames, n) in stacks {
        for (i, f) in FUNCTIONS.iter().enumerate() {
            if frames.iter().any(|x| x == f) {
                by[i] += n;
                break;
            }
        }
    }
    let all = (by[0] + by[1]).max(1) as f64;
    [by[0] as f64 / all, by[1] as f64 / all]
}

/// perf's exact count: every page fault of the program, with its call stack.
fn perf_shares(dir: &Path, prog: &Path, phase: &str) -> Result<[f64; 2]> {
    let data = dir.join("perf.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-e", "page-faults", "-c", "1", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(prog)
        .args([phase, SECONDS])
        .status()
        .context("running perf (scripts/setup.sh installs linux-perf)")?;
    if !st.success() {
        bail!("perf record failed");
    }
    let out = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .output()
        .context("running perf script")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Samples are blank-line separated: a header line, then one frame per line (`ip sym`).
    let stacks = text.split("\n\n").filter_map(|block| {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next()?;
        head.trim_start().starts_with("two").then(|| {
            let frames = lines
                .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
                .collect::<Vec<_>>();
            (frames, 1)
        })
    });
    Ok(shares(stacks))
}

/// imc's: the recording's folded stacks of the program.
fn imc_shares(imc: &Path, dir: &Path, prog: &Path, m: &Mode) -> Result<[f64; 2]> {
    let rec = dir.join("s.imc");
    let folded = dir.join("s.folded");
    let st = Command::new(imc)
        .args(["record", "--stacks", "--force", "-o"])
        .arg(&rec)
        .args(m.imc_args)
        .arg("--")
        .arg(prog)
        .args([m.phase, SECONDS])
        .status()?;
    if !st.success() {
        bail!("imc record --stacks failed");
    }
    let st = Command::new(imc)
        .arg("report")
        .arg(&rec)
        .arg("--folded")
        .arg(&folded)
        .arg("--force")
        .stdout(std::process::Stdio::null())
        .status()?;
    if !st.success() {
        bail!("imc report --folded failed");
    }
    let text = std::fs::read_to_string(&folded)?;
    let stacks = text
        .lines()
        .filter(|l| l.starts_with("two;"))
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let frames = stack.split(';').map(str::to_string).collect();
            Some((frames, n.parse().ok()?))
        });
    Ok(shares(stacks))
}
