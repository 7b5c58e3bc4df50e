//! Traffic by call stack: the plan's `stacks` object (any machine, no privileges), and on the
//! real path (root, the eBPF object) a recording with `--stacks` of a program whose two hot
//! functions fault pages, reported as folded lines, a flame graph, a pprof profile and a
//! Perfetto trace's callstack samples, the pprof profile decoded with the messages imc writes.
use imc::output::stacks::pprof::proto::profile as pb;
use imc_tests::{imc, own_fixtures, require, run_ok, sampler_prerequisites};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn dry_run(args: &[&str]) -> std::process::Output {
    let root = own_fixtures().join("vm-guest");
    imc()
        .arg("--root")
        .arg(&root)
        .args(["record", "-o", "/nonexistent/x.imc", "--dry-run", "--json"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_plan_says_where_stacks_are_taken_and_what_they_cost() {
    let out = dry_run(&["--stacks"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let st = &plan["stacks"];
    assert_eq!(st["mode"], "slices");
    assert_eq!(st["taken_at"], serde_json::json!(["tick", "switch"]));
    assert_eq!(st["adds_interrupts"], false);
    assert_eq!(st["skips_imc_stacks"], true);
    assert!(st["map_entries"].as_u64().unwrap() > 0);
    // A stack refused for its bucket has a spare map of its own, smaller than the main one.
    let (main, spare) = (st["stack_entries"].as_u64(), st["spare_entries"].as_u64());
    assert!(
        spare.is_some_and(|s| s > 0 && Some(s) < main),
        "stack_entries {main:?}, spare_entries {spare:?}"
    );
    assert_eq!(st["weight_slots"], serde_json::json!([0]));

    let out = dry_run(&["--stacks", "--stack-period", "1000"]);
    assert!(out.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["stacks"]["mode"], "overflow");
    assert_eq!(plan["stacks"]["period"], 1000);
    assert_eq!(plan["stacks"]["event"], "page-faults");
    assert_eq!(plan["stacks"]["adds_interrupts"], true);

    // Without --stacks the plan has no such object (every other plan stays as it was).
    let plan: serde_json::Value = serde_json::from_slice(&dry_run(&[]).stdout).unwrap();
    assert!(plan.get("stacks").is_none());
}

#[test]
fn stacks_where_records_are_per_switch_or_a_period_of_zero_are_refused_in_one_line() {
    for args in [
        &["--stacks", "--precise", "--freq", "100"][..],
        // Its records are aggregated, but its timer adds interrupts the stacks promise not to.
        &["--stacks", "--freq", "100"],
        &["--stacks", "--stack-period", "0"][..],
        &["--stack-period", "10"][..],
    ] {
        let out = dry_run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

/// A C program whose `hot_three` faults three pages and `hot_one` one page per step, in turns
/// of `phase` seconds; built with frame pointers.
const TWO: &str = r#"
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static volatile long sink;
__attribute__((noinline)) static void touch(int pages){
  char *p = mmap(0, pages*4096L, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  for (int i=0;i<pages;i++) p[i*4096L]=1;
  munmap(p, pages*4096L);
}
__attribute__((noinline)) void hot_three(double until){ while(now()<until){ touch(3); for(int i=0;i<2000;i++) sink+=i; } }
__attribute__((noinline)) void hot_one(double until){ while(now()<until){ touch(1); for(int i=0;i<2000;i++) sink+=i; } }
int main(int argc,char**argv){ double phase=atof(argv[1]); double end=now()+atof(argv[2]);
  while(now()<end){ hot_three(now()+phase); hot_one(now()+phase);} return 0; }
"#;

/// Builds C program `name` from `source` in `dir` with frame pointers (and `flags`); None,
/// said, without a C compiler.
fn build_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let bin = dir.join(name);
    let ok = Command::new("cc")
        .args(["-O1", "-fno-omit-frame-pointer"])
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    require(ok, "no C compiler (cc) to build the test program").then_some(bin)
}

/// `imc record --stacks -v -o REC -- PROGRAM ARGS`, run to its end; what it said (stderr).
fn record_stacks(rec: &Path, program: &Path, args: &[&str]) -> String {
    let out = run_ok(
        imc()
            .args(["record", "--stacks", "-v", "-o"])
            .arg(rec)
            .arg("--")
            .arg(program)
            .args(args),
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_recording_with_stacks_reports_every_attributed_fault_in_some_stack() {
    if !sampler_prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(two) = build_c(dir.path(), "two", TWO, &["-g"]) else {
        return;
    };
    let rec = dir.path().join("s.imc");
    // `-v` says what resolving met: the program's frames are named.
    let said = record_stacks(&rec, &two, &["0.05", "1.5"]);
    let named = said
        .lines()
        .find_map(|l| l.strip_prefix("imc: stacks: user addresses "))
        .and_then(|l| l.split_once(" named")?.0.split_once(" of "))
        .and_then(|(n, of)| Some((n.parse::<u64>().ok()?, of.parse::<u64>().ok()?)))
        .unwrap_or_else(|| panic!("no count of named addresses: {said}"));
    assert!(named.0 > 0 && named.0 <= named.1, "{named:?}: {said}");
    let (folded, pprof, svg, trace) = (
        dir.path().join("s.folded"),
        dir.path().join("s.pb.gz"),
        dir.path().join("s.svg"),
        dir.path().join("s.pftrace"),
    );
    let out = run_ok(
        imc()
            .arg("report")
            .arg(&rec)
            .arg("--folded")
            .arg(&folded)
            .arg("--pprof")
            .arg(&pprof)
            .arg("--flamegraph")
            .arg(&svg)
            .arg("--perfetto")
            .arg(&trace)
            .arg("--json"),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The process's top functions name both hot functions.
    let two_row = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "two")
        .unwrap_or_else(|| panic!("no row of the program: {report}"));
    let top: Vec<&str> = two_row["top_functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    for f in ["hot_three", "hot_one"] {
        assert!(
            top.contains(&f),
            "{f} in {top:?}; the recording said: {said}"
        );
    }
    let faults: f64 = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"] == "two")
        .map(|t| t["values"]["page-faults"].as_f64().unwrap())
        .sum();
    let text = std::fs::read_to_string(&folded).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("two;")).collect();
    let in_stacks: u64 = lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(faults > 1000.0, "the program faulted ({faults})");
    // Each stack's value is rounded: the sum is the process's within a count per line.
    assert!(
        (in_stacks as f64 - faults).abs() <= lines.len() as f64,
        "{in_stacks} in stacks, {faults} attributed"
    );
    assert!(lines.len() >= 2, "both hot functions' stacks: {text}");
    // The trace's callstack samples carry what the folded lines do, through each function.
    // Each stack's samples are its traffic over the quantum, rounded down once.
    let through = |f: &str| -> (u64, u64) {
        let of_f = lines
            .iter()
            .filter(|l| l.split(' ').next().unwrap().split(';').any(|x| x == f));
        let values = of_f.map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap());
        values.fold((0, 0), |(sum, n), v| (sum + v, n + 1))
    };
    let samples = perfetto_samples(&trace);
    let (quantum, counts) = (samples.quantum, &samples.through);
    for f in ["hot_three", "hot_one"] {
        let ((want, stacks), got) = (through(f), counts.get(f).copied().unwrap_or(0) * quantum);
        // A folded line may merge stacks whose frames read alike: allow a thousandth too.
        assert!(
            got <= want && want - got <= (quantum * stacks).max(want / 1000),
            "{f}: {got} in the trace's samples, {want} in the folded lines"
        );
    }
    let gz = std::fs::read(&pprof).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzipped");
    // Each of the program's samples is labelled with its process and the cgroup its stack ran
    // in: the program's own code in the one `record` put the command in, where it made one
    // (the report's row for the whole run names none, as the process started in imc's), else
    // its row's; the child before it joined that cgroup, in imc's (or none, where no task row
    // named that cgroup).
    let profile = pprof_profile(&gz);
    let text_of = |i: i64| profile.string_table[i as usize].as_str();
    let labels = |s: &pb::Sample| -> HashMap<String, (String, i64)> {
        s.label
            .iter()
            .map(|l| {
                (
                    text_of(l.key).to_string(),
                    (text_of(l.str).to_string(), l.num),
                )
            })
            .collect()
    };
    let functions = |s: &pb::Sample| -> Vec<&str> {
        let location = |id: &u64| profile.location.iter().find(|l| l.id == *id);
        let function = |id: u64| profile.function.iter().find(|f| f.id == id);
        s.location_id
            .iter()
            .filter_map(location)
            .flat_map(|l| &l.line)
            .filter_map(|line| function(line.function_id))
            .map(|f| text_of(f.name))
            .collect()
    };
    let of_two: Vec<_> = profile
        .sample
        .iter()
        .map(|s| (labels(s), functions(s)))
        .filter(|(l, _)| l.get("comm").is_some_and(|c| c.0 == "two"))
        .collect();
    assert!(
        of_two.len() >= 2,
        "the program's samples in the pprof profile"
    );
    let cgroup = report["command"]["cgroup_path"]
        .as_str()
        .or(two_row["cgroup_path"].as_str());
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::"));
    let mut in_hot = 0;
    for (l, functions) in &of_two {
        assert_eq!(l.get("pid").map(|p| p.1), two_row["tgid"].as_i64());
        let got = l.get("cgroup").map(|c| c.0.as_str());
        if functions.iter().any(|f| f.starts_with("hot_")) {
            in_hot += 1;
            assert_eq!(got, cgroup, "{l:?} {functions:?}");
        } else {
            assert!(
                got == cgroup || got == own || got.is_none(),
                "{l:?} {functions:?}"
            );
        }
    }
    assert!(in_hot >= 2, "{of_two:?}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    // A recording without stacks is refused in one line.
    let plain = dir.path().join("p.imc");
    let ok = imc()
        .args(["record", "-o"])
        .arg(&plain)
        .args(["--duration", "0.3"])
        .status()
        .unwrap();
    assert!(ok.success());
    let out = imc()
        .arg("report")
        .arg(&plain)
        .arg("--folded")
        .arg(dir.path().join("p.folded"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The `Profile` message of a gzipped pprof file.
fn pprof_profile(gz: &[u8]) -> pb::Profile {
    use protobuf::Message;
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("a gzip stream");
    pb::Profile::parse_from_bytes(&raw).expect("pprof's Profile message")
}

/// A C program that faults one page at the end of each of 10,240 call paths (each step through
/// `left` or `right` by a bit of the path's number), spending about a millisecond in each:
/// more distinct stacks than a stack map holds (8,192), about a thousand a second.
const MANY: &str = r#"
#include <sys/mman.h>
static volatile long sink;
__attribute__((noinline)) static void touch(void){
  char *p = mmap(0, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  p[0] = 1; munmap(p, 4096);
  for (long i = 0; i < 600000; i++) sink += i;
}
__attribute__((noinline)) void left(unsigned path, int depth);
__attribute__((noinline)) void right(unsigned path, int depth);
__attribute__((noinline)) static void step(unsigned path, int depth){
  if (depth == 0) { touch(); return; }
  if (path & 1) left(path >> 1, depth - 1); else right(path >> 1, depth - 1);
  sink++;
}
__attribute__((noinline)) void left(unsigned path, int depth){ step(path, depth); sink++; }
__attribute__((noinline)) void right(unsigned path, int depth){ step(path, depth); sink++; }
int main(void){ for (unsigned p = 0; p < 10240; p++) step(p, 14); return 0; }
"#;

/// A run with more distinct stacks than a stack map holds keeps them: the stacks of each
/// generation are read and their map emptied, so the map never fills with the run's past (it
/// did: past 8,192 stacks, most new ones were refused and charged as not recorded), and a
/// generation that makes many stacks ends early, so its map stays sparse.
#[test]
fn a_run_with_more_stacks_than_a_stack_map_holds_keeps_them() {
    if !sampler_prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = build_c(dir.path(), "many", MANY, &["-fno-optimize-sibling-calls"]) else {
        return;
    };
    let rec = dir.path().join("m.imc");
    run_ok(
        imc()
            .args(["record", "--stacks", "--stack-period", "1", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&bin),
    );
    let folded = dir.path().join("m.folded");
    run_ok(imc().arg("report").arg(&rec).arg("--folded").arg(&folded));
    let text = std::fs::read_to_string(&folded).unwrap();
    let (mut lost, mut total, mut paths) = (0u64, 0u64, 0usize);
    for line in text.lines().filter(|l| l.starts_with("many;")) {
        let count: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        total += count;
        if line.contains("[stack not recorded]") {
            lost += count;
        } else if line.contains(";touch") {
            paths += 1;
        }
    }
    assert!(
        total >= 10_240,
        "the program's faults were charged: {total}"
    );
    // Within one generation a stack may find its bucket taken (a generation ends early after
    // 512 new entries, a sixteenth of 8,192 buckets: about 2% of the faults here, at a new
    // stack every 0.4 ms); the spare map keeps those, so only a stack refused by both is lost
    // (about 0.1%). A map that kept the run's past refuses most of them.
    let said = format!("{lost} of {total} faults in stacks not recorded, {paths} paths recorded");
    assert!((lost as f64) < 0.01 * total as f64, "{said}");
    assert!(paths >= 10_100, "{said}: fewer than 10,100 of 10,240");
}

/// A parent that runs `argv[1]` children one after another, each executing this program again
/// to fault pages in `hot` for `argv[2]` seconds: processes far shorter than a drain period.
const KIDS: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static volatile long sink;
__attribute__((noinline)) static void hot(double secs){ double end=now()+secs;
  while(now()<end){ char *p=mmap(0,64*4096L,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
    for(long i=0;i<64;i++) p[i*4096L]=1; sink+=p[0]; munmap(p,64*4096L); } }
int main(int argc,char**argv){
  if(argc>2&&strcmp(argv[1],"child")==0){ hot(atof(argv[2])); return 0; }
  for(int i=0;i<atoi(argv[1]);i++){ pid_t c=fork();
    if(c==0){ execl(argv[0],argv[0],"child",argv[2],(char*)0); _exit(127); }
    waitpid(c,0,0); }
  return 0; }
"#;

/// The maps of a process are read as it makes its first stack (the kernel announces it), not
/// at the next drain: processes that live 300 ms, most of them gone before the drain that takes
/// their stacks (once a second), are resolved into their functions.
#[test]
fn processes_shorter_than_a_drain_period_keep_their_frames() {
    if !sampler_prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(kids) = build_c(dir.path(), "kids", KIDS, &["-g"]) else {
        return;
    };
    let rec = dir.path().join("k.imc");
    let said = record_stacks(&rec, &kids, &["6", "0.3"]);
    // Read as each made its first stack, and again 20 ms later (its libraries mapped by then).
    let (read_early, read_again) = said
        .lines()
        .find_map(|l| l.split_once(" processes' maps read as they made their first stack ("))
        .and_then(|(l, again)| {
            let early = l.rsplit(' ').next()?.parse::<u64>().ok()?;
            Some((early, again.split(' ').next()?.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no count of maps read early: {said}"));
    assert!(read_early >= 6, "{read_early} read early: {said}");
    assert!(read_again >= 6, "{read_again} read again: {said}");
    let folded = dir.path().join("k.folded");
    run_ok(imc().arg("report").arg(&rec).arg("--folded").arg(&folded));
    let text = std::fs::read_to_string(&folded).unwrap();
    let (mut named, mut total) = (0u64, 0u64);
    for line in text.lines().filter(|l| l.starts_with("kids;")) {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let count: u64 = count.parse().unwrap();
        total += count;
        if stack.split(';').any(|f| f == "main") {
            named += count;
        }
    }
    // The children fault in `hot` for 300 ms each, under `main` (`hot` itself is no frame of
    // the stacks taken in munmap: libc has no frame pointers). Out of `main`: each child's last
    // slice, charged after its memory went (no stack), the faults of each fork before its exec,
    // resolved in the maps of after, and a child imc could not read while it lived (a loaded
    // machine delays imc's wake-up). Read only at the drains, about 0.3 of them would be named.
    assert!(total > 1000, "the children faulted: {total}");
    assert!(
        named as f64 >= 0.8 * total as f64,
        "{named} of {total} faults in stacks through main: {text}\nthe recording said: {said}"
    );
}

/// A Perfetto trace's callstack samples, decoded through its interned data.
struct PerfettoSamples {
    /// What each sample stands for, from the quantum track's name.
    quantum: u64,
    /// Per function, the samples whose stack passes through it.
    through: std::collections::HashMap<String, u64>,
}

fn perfetto_samples(path: &Path) -> PerfettoSamples {
    use imc::output::perfetto_proto::Trace;
    use imc::output::perfetto_proto::trace_packet::Data;
    use protobuf::Message;
    use std::collections::HashMap;
    let t = Trace::parse_from_bytes(&std::fs::read(path).unwrap()).unwrap();
    let (mut names, mut frames, mut stacks) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut out = PerfettoSamples {
        quantum: 0,
        through: HashMap::new(),
    };
    for p in &t.packet {
        if let Some(Data::TrackDescriptor(d)) = &p.data
            && let Some(q) = d.name().strip_prefix("callstack samples: one per ")
        {
            out.quantum = q.split(' ').next().unwrap().parse().unwrap();
        }
        if let Some(d) = p.interned_data.as_ref() {
            for s in &d.function_names {
                names.insert(s.iid(), String::from_utf8_lossy(s.str()).into_owned());
            }
            for f in &d.frames {
                frames.insert(f.iid(), f.function_name_id());
            }
            for c in &d.callstacks {
                stacks.insert(c.iid(), c.frame_ids.clone());
            }
        }
        if let Some(Data::PerfSample(s)) = &p.data {
            let mut seen: Vec<&String> = stacks[&s.callstack_iid()]
                .iter()
                .map(|f| &names[&frames[f]])
                .collect();
            seen.sort();
            seen.dedup();
            for f in seen {
                *out.through.entry(f.clone()).or_insert(0) += 1;
            }
        }
    }
    assert!(out.quantum > 0, "the trace names its quantum");
    out
}
