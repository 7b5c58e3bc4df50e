//! `imc report` of a recording with a command (`record -- CMD`): the command's tree first, its
//! shares of the machine's traffic, `--no-command`, `--command` on a recording without one
//! (a committed recording made by an imc from before commands were marked), across a rotation.
//! Recordings are written by the real writer (no eBPF needed).
use imc::model::CommandTree;
use imc::model::result::{IntervalResult, PackageRow, TaskRow};
use imc::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
use imc::record::{HeaderCommand, RecordHeader, Writer, rotated_path};
use imc_tests::imc;
use serde_json::Value;
use std::path::{Path, PathBuf};

const INTERVAL: u64 = 100_000_000;
/// The command's process and its child; 7 is someone else.
const CMD: u32 = 500;
const CHILD: u32 = 501;
const OTHER: u32 = 7;

fn specs() -> Vec<SlotSpec> {
    ["read", "write"]
        .iter()
        .zip([Direction::Read, Direction::Write])
        .map(|(e, d)| SlotSpec {
            event: e.to_string(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(d),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        })
        .collect()
}

/// Cache lines read by each task in interval `k`: the command's child only in intervals 3-5
/// (interval 4 its busiest), the other process throughout. 10 lines of each interval are
/// unattributed.
fn lines(k: u64) -> [(u32, u64); 3] {
    let child = match k {
        3 | 5 => 100,
        4 => 900,
        _ => 0,
    };
    [(CMD, 20), (CHILD, child), (OTHER, 80)]
}

fn interval(k: u64) -> IntervalResult {
    let rows: Vec<TaskRow> = lines(k)
        .iter()
        .filter(|(_, l)| *l > 0)
        .map(|&(pid, l)| TaskRow {
            pid,
            tgid: pid,
            comm: if pid == OTHER { "other" } else { "cmd" }.into(),
            cgroup: 1,
            read_bytes: l * 64,
            values: [("read".to_string(), l as f64), ("write".into(), 0.0)].into(),
            ..TaskRow::default()
        })
        .collect();
    let attributed: u64 = rows.iter().map(|r| r.read_bytes).sum();
    IntervalResult {
        t_start_ns: k * INTERVAL,
        t_end_ns: (k + 1) * INTERVAL,
        source: "intel-uncore-imc".into(),
        packages: vec![PackageRow {
            id: 0,
            read_bytes: attributed + 640,
            ..PackageRow::default()
        }],
        tasks: rows,
        unattributed_bytes: 640,
        ..IntervalResult::default()
    }
}

/// Ten intervals recorded as `record -- CMD` records them: the command's tasks marked.
fn recording(dir: &Path, max_size: Option<u64>, intervals: u64) -> PathBuf {
    let path = dir.join("cmd.imc");
    let topo = Topology {
        packages: vec![Package {
            id: 0,
            cpus: vec![0, 1],
        }],
        ..Topology::default()
    };
    let mut header = RecordHeader::new(&specs(), &topo, 250, "intel-uncore-imc", INTERVAL);
    header.command = Some(HeaderCommand {
        argv: vec!["sh".into(), "-c".into(), "stream; stream".into()],
        pid: CMD,
        tree: CommandTree::Cgroup,
        cgroup_id: Some(4242),
        cgroup_path: Some("/imc-record-1".into()),
    });
    let mut w = Writer::create(&path, header, max_size).unwrap();
    w.mark_command(Box::new(|_, tgid, _| tgid == CMD || tgid == CHILD));
    for k in 0..intervals {
        w.push_interval(&interval(k)).unwrap();
    }
    w.finish().unwrap();
    path
}

fn report(args: &[&str]) -> (i32, String, String) {
    let out = imc().arg("report").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = report(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn the_command_comes_first_with_its_share_of_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), None, 10);
    let p = path.to_str().unwrap();
    let v = json(&[p, "--json"]);
    let c = &v["command"];
    assert_eq!(c["pid"], CMD);
    assert_eq!(c["tree"], "cgroup");
    assert_eq!(c["argv"][2], "stream; stream");
    // Over the run: the command's bytes, of the rows' bytes and of the packages' bytes.
    let (mut cmd, mut attributed) = (0u64, 0u64);
    for k in 0..10 {
        for (pid, l) in lines(k) {
            attributed += l * 64;
            if pid != OTHER {
                cmd += l * 64;
            }
        }
    }
    let total = attributed + 10 * 640;
    assert_eq!(c["traffic"].as_f64().unwrap(), cmd as f64);
    assert_eq!(c["machine_total"].as_f64().unwrap(), total as f64);
    assert!(close(
        c["share_of_attributed"].as_f64().unwrap(),
        cmd as f64 / attributed as f64
    ));
    assert!(close(
        c["share_of_total"].as_f64().unwrap(),
        cmd as f64 / total as f64
    ));
    // Its rows are its two processes, the busiest first; the machine's rows are all three.
    let tgids: Vec<u64> = c["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tgid"].as_u64().unwrap())
        .collect();
    assert_eq!(tgids, [u64::from(CHILD), u64::from(CMD)]);
    assert_eq!(v["tasks"].as_array().unwrap().len(), 3);
    // Per interval, and its busiest: interval 4 (920 of 1000 attributed lines).
    let per = c["per_interval"].as_array().unwrap();
    assert_eq!(per.len(), 10);
    let i4 = &per[4];
    assert!(close(
        i4["share_of_attributed"].as_f64().unwrap(),
        920.0 / 1000.0
    ));
    assert!(close(
        i4["share_of_total"].as_f64().unwrap(),
        920.0 / 1010.0
    ));
    assert_eq!(c["busiest"]["t_start_ns"], 4 * INTERVAL);

    let (code, text, err) = report(&[p]);
    assert_eq!(code, 0, "{err}");
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("command: sh -c 'stream; stream' (pid 500)"),
        "{text}"
    );
    assert!(first.contains("cgroup /imc-record-1"), "{first}");
    let pct = format!("{:.1}%", 100.0 * cmd as f64 / total as f64);
    assert!(text.lines().nth(1).unwrap().contains(&pct), "{pct}: {text}");
    let machine = text
        .find("the machine:")
        .expect("the machine's report follows");
    assert!(text[..machine].contains("busiest interval"), "{text}");
    assert!(text[machine..].contains("other"), "{text}");
    assert!(!text[..machine].contains("other"), "{text}");
}

#[test]
fn no_command_gives_the_machine_alone_and_p_narrows_the_command_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), None, 10);
    let p = path.to_str().unwrap();
    let (code, text, _) = report(&[p, "--no-command"]);
    assert_eq!(code, 0);
    assert!(
        !text.contains("command:") && !text.contains("the machine:"),
        "{text}"
    );
    let v = json(&[p, "--json", "--no-command"]);
    assert!(v.get("command").is_none());
    let v = json(&[p, "--json", "-p", "500"]);
    let tasks = v["command"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["tgid"], CMD);
    let (code, _, err) = report(&[p, "--command", "--no-command"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_command_is_kept_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), Some(16 * 1024), 3000);
    assert!(rotated_path(&path).exists(), "the bound rotated the run");
    let v = json(&[path.to_str().unwrap(), "--json"]);
    let c = &v["command"];
    // Both files' intervals, the command's rows marked in each (each file restates them).
    let n = c["per_interval"].as_array().unwrap().len() as u64;
    assert!(n > 10 && n < 3000, "{n} intervals kept");
    let first = c["per_interval"][0]["t_start_ns"].as_u64().unwrap() / INTERVAL;
    let want: u64 = (first..first + n)
        .flat_map(lines)
        .filter(|(pid, _)| *pid != OTHER)
        .map(|(_, l)| l * 64)
        .sum();
    assert_eq!(c["traffic"].as_f64().unwrap(), want as f64);
    let rows: f64 = c["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["read_bytes"].as_f64().unwrap())
        .sum();
    assert_eq!(rows, want as f64);
}

/// A recording made by imc before commands were marked (`record -- sh -c …` on a VM): it still
/// reads, as the machine's.
#[test]
fn a_recording_from_before_commands_reads_as_the_machine_and_command_is_refused() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/before-commands.imc");
    let p = old.to_str().unwrap();
    let (code, text, err) = report(&[p]);
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with(p) && !text.contains("command:"), "{text}");
    let v = json(&[p, "--json"]);
    assert!(v.get("command").is_none());
    assert!(!v["tasks"].as_array().unwrap().is_empty());
    let (code, out, err) = report(&[p, "--command"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("before-commands.imc") && err.contains("without a command"),
        "{err}"
    );
}

/// `--perfetto`: the command's tree has a counter track of its own, its rate per interval as
/// the report's `per_interval` says (bytes over the interval's length), zero after the last.
#[test]
fn the_perfetto_trace_has_the_commands_track() {
    use imc::output::perfetto_proto::Trace;
    use imc::output::perfetto_proto::track_event::Type;
    use protobuf::Message;
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), None, 10);
    let out = dir.path().join("t.pftrace");
    let p = path.to_str().unwrap();
    let (code, _, err) = report(&[p, "--perfetto", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let trace = Trace::parse_from_bytes(&std::fs::read(&out).unwrap()).unwrap();
    let uuid = trace
        .packet
        .iter()
        .filter(|p| p.has_track_descriptor())
        .map(|p| p.track_descriptor())
        .find(|d| {
            d.name()
                .starts_with("command: sh -c stream; stream (pid 500)")
        })
        .expect("the command's track")
        .uuid();
    let values: Vec<(u64, f64)> = trace
        .packet
        .iter()
        .filter(|p| p.has_track_event())
        .filter(|p| {
            let e = p.track_event();
            e.track_uuid() == uuid && e.type_() == Type::TYPE_COUNTER
        })
        .map(|p| (p.timestamp(), p.track_event().double_counter_value()))
        .collect();
    assert_eq!(values.len(), 11, "{values:?}");
    for (k, &(t, v)) in values.iter().take(10).enumerate() {
        let k = k as u64;
        let bytes: u64 = lines(k)
            .iter()
            .filter(|(pid, _)| *pid != OTHER)
            .map(|(_, l)| l * 64)
            .sum();
        assert_eq!(t, k * INTERVAL);
        assert!(close(v, bytes as f64 / 0.1), "interval {k}: {v}");
    }
    assert_eq!(values[10], (10 * INTERVAL, 0.0));
}

/// A command recording cut anywhere or with a byte flipped reports what it holds or refuses in
/// one line (never a panic), and a command line with terminal controls is printed as text.
#[test]
fn damaged_command_recordings_and_hostile_argv_report_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), None, 10);
    let data = std::fs::read(&path).unwrap();
    let bad = dir.path().join("bad.imc");
    let mut cases: Vec<Vec<u8>> = (0..data.len())
        .step_by(5)
        .map(|n| data[..n].to_vec())
        .collect();
    for at in (0..data.len()).step_by(11) {
        let mut d = data.clone();
        d[at] ^= 0x5a;
        cases.push(d);
    }
    for d in &cases {
        std::fs::write(&bad, d).unwrap();
        let (code, _, err) = report(&[bad.to_str().unwrap(), "--json"]);
        assert!(code == 0 || code == 2, "exit {code}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        if code == 2 {
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    // ESC and BEL in the command line come out as text.
    let path = dir.path().join("esc.imc");
    let topo = Topology::default();
    let mut header = RecordHeader::new(&specs(), &topo, 250, "intel-uncore-imc", INTERVAL);
    header.command = Some(HeaderCommand {
        argv: vec!["x\u{1b}[2J\u{7}".into()],
        pid: CMD,
        tree: CommandTree::Parentage,
        cgroup_id: None,
        cgroup_path: None,
    });
    let mut w = Writer::create(&path, header, None).unwrap();
    w.mark_command(Box::new(|_, tgid, _| tgid == CMD));
    w.push_interval(&interval(0)).unwrap();
    w.finish().unwrap();
    let (code, text, err) = report(&[path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.lines().next().unwrap().contains("parentage"), "{text}");
}

/// `--plot`: the command's rate is a black line (two points an interval, highest where the
/// command was busiest) over the bands, named in the legend with its share of all traffic.
#[test]
fn the_plot_draws_the_commands_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), None, 10);
    let out = dir.path().join("p.svg");
    let (code, _, err) = report(&[path.to_str().unwrap(), "--plot", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let line: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
        .find(|n| n.attribute("stroke") == Some("#000000"))
        .expect("the command's line")
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|xy| {
            let (x, y) = xy.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect();
    assert_eq!(line.len(), 20);
    // SVG y grows downwards: the busiest interval (4) is the line's highest step.
    let top = line
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
        .unwrap()
        .0;
    assert_eq!(top / 2, 4, "{line:?}");
    // 1300 of the command's lines (200 of its own, 1100 of its child's) of 2100 attributed,
    // plus 10 x 640 bytes unattributed.
    let share = 100.0 * 1300.0 * 64.0 / (2100.0 * 64.0 + 6400.0);
    assert!(
        svg.contains(&format!("command (pid 500) {share:.1}%")),
        "{share:.1}"
    );
}
