use super::state::*;
use super::*;
use crate::model::GroupBy;
use crate::model::result::PackageRow;
use crate::model::result::{IntervalResult, TaskRow};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyEvent;
use ratatui::crossterm::event::{KeyCode, KeyModifiers};

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

fn task(pid: u32, comm: &str, read: u64, write: u64, share: f64) -> TaskRow {
    TaskRow {
        pid,
        tgid: pid,
        comm: comm.into(),
        cgroup: 7,
        read_bytes: read,
        write_bytes: write,
        share,
        ..TaskRow::default()
    }
}

fn bytes_cfg() -> ViewConfig {
    ViewConfig {
        units: Units::Bytes { total: false },
        value_events: vec![],
        traffic_events: vec!["uncore_imc_0/read".into(), "uncore_imc_0/write".into()],
        top: 0,
        notice: None,
        by: GroupBy::Pid,
        stalls: false,
        latency: false,
        stacks: false,
    }
}

/// Half a second on a memory controller: 3 tasks, the largest share not the lowest pid.
fn bytes_interval() -> IntervalResult {
    IntervalResult {
        t_start_ns: 1_000_000_000,
        t_end_ns: 1_500_000_000,
        source: "intel-uncore-imc".into(),
        packages: vec![PackageRow {
            id: 0,
            read_bytes: 600_000_000,
            write_bytes: 150_000_000,
            total_bytes: 0,
            ..PackageRow::default()
        }],
        tasks: vec![
            task(300, "stream", 400_000_000, 100_000_000, 0.66),
            task(20, "postgres", 150_000_000, 40_000_000, 0.25),
            task(4000, "bash", 1_000_000, 0, 0.01),
        ],
        unattributed_bytes: 60_000_000,
        unattributed: Default::default(),
        lost_samples: 3,
        weighting: None,
        weight_fallbacks: 0,
    }
}

/// The view through ratatui's test terminal, one string per screen line.
fn screen(
    cfg: &ViewConfig,
    h: &History,
    r: Option<&IntervalResult>,
    st: &mut ViewState,
    w: u16,
    ht: u16,
) -> Vec<String> {
    let mut term = Terminal::new(TestBackend::new(w, ht)).unwrap();
    term.draw(|f| render(cfg, h, r, st, f.area(), f.buffer_mut()))
        .unwrap();
    let buf = term.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

/// The PIDs of the task rows, top to bottom (rows whose first word is a number).
fn pids(lines: &[String]) -> Vec<u32> {
    let head = lines
        .iter()
        .position(|l| l.contains("PID"))
        .expect("table header");
    lines[head + 1..]
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

fn line_with<'a>(lines: &'a [String], what: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?} in\n{}", lines.join("\n")))
}

#[test]
fn victims_have_a_stall_column_and_v_sorts_by_it() {
    let mut cfg = bytes_cfg();
    cfg.stalls = true;
    let mut r = bytes_interval();
    // The streamer stalls little, postgres waits on memory, bash ran no counted cycle.
    let pairs = [(Some(1e8), Some(1e9)), (Some(6e8), Some(1e9)), (None, None)];
    for (t, (stalled, cycles)) in r.tasks.iter_mut().zip(pairs) {
        t.stall_cycles = stalled;
        t.cycles = cycles;
        t.stall_share = crate::model::result::stall_share(stalled, cycles);
    }
    let h = History::default();
    let mut st = ViewState::default();
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
    assert!(line_with(&lines, "PID").contains("STALL"));
    let row: Vec<&str> = line_with(&lines, "postgres").split_whitespace().collect();
    assert_eq!(row.last(), Some(&"60.0%"), "{row:?}");
    let row: Vec<&str> = line_with(&lines, "bash").split_whitespace().collect();
    assert_eq!(
        row.last(),
        Some(&"-"),
        "{row:?}: null, never a made-up share"
    );
    assert!(line_with(&lines, "sort:").contains("v stall"));
    handle_key(&mut st, &cfg, key(KeyCode::Char('v')));
    assert_eq!(st.sort, SortKey::Stall);
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
    assert_eq!(pids(&lines), [20, 300, 4000]);
    // Without the pair: no column, no key.
    cfg.stalls = false;
    let lines = screen(&cfg, &h, Some(&r), &mut ViewState::default(), 120, 20);
    assert!(!line_with(&lines, "PID").contains("STALL"));
    assert!(!line_with(&lines, "sort:").contains("v stall"));
    // …and `v` is ignored: the sort and its marker stay where they were.
    let mut st = ViewState::default();
    screen(&cfg, &h, Some(&r), &mut st, 120, 20);
    assert_eq!(
        handle_key(&mut st, &cfg, key(KeyCode::Char('v'))),
        Action::Ignore
    );
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
    assert!(line_with(&lines, "PID").contains("SHARE▼"), "{lines:?}");
}

#[test]
fn header_packages_and_rows_in_share_order_with_bandwidth() {
    let cfg = bytes_cfg();
    let r = bytes_interval();
    let mut h = History::default();
    h.push(&cfg, &r);
    let mut st = ViewState::default();
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
    let head = &lines[0];
    assert!(head.contains("source intel-uncore-imc"), "{head}");
    assert!(head.contains("interval 0.50 s"), "{head}");
    assert!(head.contains("lost samples 3"), "{head}");
    // 60 MB over 0.5 s.
    assert!(lines[1].contains("unattributed 120.0 MB/s"), "{}", lines[1]);
    assert!(line_with(&lines, "package 0 read").contains("1200.0 MB/s"));
    assert!(line_with(&lines, "package 0 write").contains("300.0 MB/s"));
    assert_eq!(pids(&lines), [300, 20, 4000]);
    // stream: 400 MB read, 100 MB written in 0.5 s, 66 % of the traffic.
    let row: Vec<&str> = line_with(&lines, "stream").split_whitespace().collect();
    assert_eq!(
        row,
        ["300", "300", "stream", "7", "800.0", "200.0", "66.0%"]
    );
    assert!(line_with(&lines, "PID").contains("SHARE▼"));
    assert!(!lines.iter().any(|l| l.contains("counts/s")));
}

#[test]
fn sort_keys_reorder_rows_and_move_the_indicator() {
    let cfg = bytes_cfg();
    let r = bytes_interval();
    let h = History::default();
    let mut st = ViewState::default();
    let mut order = |c: char| {
        assert_eq!(
            handle_key(&mut st, &cfg, key(KeyCode::Char(c))),
            Action::Redraw
        );
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
        (pids(&lines), line_with(&lines, "PID").to_string())
    };
    let (p, head) = order('p');
    assert_eq!(p, [20, 300, 4000]);
    assert!(head.contains("PID▲") && !head.contains("SHARE▼"), "{head}");
    // The same key again reverses.
    assert_eq!(order('p').0, [4000, 300, 20]);
    let (w, head) = order('w');
    assert_eq!(w, [300, 20, 4000]);
    assert!(head.contains("WRITE MB/s▼"), "{head}");
    assert_eq!(order('c').0, [4000, 20, 300], "bash, postgres, stream");
    assert_eq!(order('r').0, [300, 20, 4000]);
    assert_eq!(order('r').0, [4000, 20, 300]);
    assert_eq!(order('t').0, [300, 20, 4000]);
    assert_eq!(order('s').0, [300, 20, 4000]);
}

#[test]
fn names_print_as_text_and_the_notice_stays_in_the_header() {
    let cfg = ViewConfig {
        notice: Some("no memory-controller counters; counting page-faults".into()),
        ..bytes_cfg()
    };
    let mut r = bytes_interval();
    r.source = "imc\x1b]0;pwned\x07".into();
    r.tasks[0].comm = "\x1b[2Jevil".into();
    r.tasks[0].cgroup_path = Some("/x/\x1b[31mred.scope".into());
    let mut h = History::default();
    h.push(&cfg, &r);
    let mut st = ViewState::default();
    let lines = screen(&cfg, &h, Some(&r), &mut st, 160, 20);
    let all = lines.join("\n");
    assert!(!all.contains('\x1b') && !all.contains('\x07'), "{all:?}");
    assert!(line_with(&lines, "evil").contains("\\x1b[2Jevil"), "{all}");
    assert!(
        lines[0].contains("source imc\\x1b]0;pwned\\x07"),
        "{}",
        lines[0]
    );
    assert!(
        lines[..3]
            .iter()
            .any(|l| l.contains("counting page-faults")),
        "the notice is in the header:\n{all}"
    );
}

#[test]
fn a_column_of_counts_has_one_unit() {
    let cfg = ViewConfig {
        units: Units::Counts,
        value_events: vec!["page-faults".into()],
        traffic_events: vec!["page-faults".into()],
        top: 0,
        notice: None,
        by: GroupBy::Pid,
        stalls: false,
        latency: false,
        stacks: false,
    };
    let t = |pid: u32, faults: f64| TaskRow {
        pid,
        tgid: pid,
        comm: format!("t{pid}"),
        values: [("page-faults".to_string(), faults)].into(),
        ..TaskRow::default()
    };
    let mut r = bytes_interval();
    // One second: 128 M/s beside 34.954 M/s and 2/s.
    r.t_end_ns = r.t_start_ns + 1_000_000_000;
    r.tasks = vec![t(1, 128e6), t(2, 34_954_000.0), t(3, 2.0)];
    let mut st = ViewState::default();
    let all = screen(&cfg, &History::default(), Some(&r), &mut st, 120, 30).join("\n");
    assert!(
        all.contains("128M") && all.contains("35M") && all.contains("0M"),
        "{all}"
    );
    assert!(!all.contains("34954k"), "{all}");
}

#[test]
fn top_n_is_taken_after_sorting() {
    let cfg = ViewConfig {
        top: 2,
        ..bytes_cfg()
    };
    let r = bytes_interval();
    let mut st = ViewState::default();
    handle_key(&mut st, &cfg, key(KeyCode::Char('p')));
    let rows: Vec<u32> = sorted_tasks(&cfg, &st, &r).iter().map(|t| t.pid).collect();
    assert_eq!(rows, [20, 300]);
}

#[test]
fn stand_in_shows_counts_per_second_not_zero_bandwidth() {
    let cfg = ViewConfig {
        units: Units::Counts,
        value_events: vec!["page-faults".into()],
        traffic_events: vec!["page-faults".into()],
        top: 0,
        notice: None,
        by: GroupBy::Pid,
        stalls: false,
        latency: false,
        stacks: false,
    };
    let t = |pid: u32, comm: &str, faults: f64, share: f64| TaskRow {
        values: [("page-faults".to_string(), faults)].into(),
        ..task(pid, comm, 0, 0, share)
    };
    let r = IntervalResult {
        t_start_ns: 0,
        t_end_ns: 2_000_000_000,
        source: "proxy:page-faults".into(),
        packages: vec![PackageRow::default()],
        tasks: vec![t(11, "cc1", 9000.0, 0.75), t(12, "ld", 3000.0, 0.25)],
        ..IntervalResult::default()
    };
    let mut h = History::default();
    h.push(&cfg, &r);
    let mut st = ViewState::default();
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 16);
    assert!(
        lines[0].contains("source proxy:page-faults"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("counts/s, not bandwidth"), "{}", lines[1]);
    assert!(
        !lines.iter().any(|l| l.contains("MB/s")),
        "no bandwidth columns for counts:\n{}",
        lines.join("\n")
    );
    // 12000 faults in 2 s over all tasks.
    assert!(line_with(&lines, "page-faults/s ").contains("6000"));
    let row: Vec<&str> = line_with(&lines, "cc1").split_whitespace().collect();
    assert_eq!(row, ["11", "11", "cc1", "7", "75.0%", "4500"]);
    // 't' sorts by the stand-in's counts, so its column carries the indicator.
    handle_key(&mut st, &cfg, key(KeyCode::Char('t')));
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 16);
    assert!(line_with(&lines, "PID").contains("page-faults/s▼"));
    // No read/write split to sort by.
    assert_eq!(
        handle_key(&mut st, &cfg, key(KeyCode::Char('r'))),
        Action::Ignore
    );
    assert_eq!(st.sort, SortKey::Total);
}

#[test]
fn rows_beyond_the_screen_scroll_and_clamp() {
    let cfg = bytes_cfg();
    let mut r = bytes_interval();
    r.tasks = (1..=40)
        .map(|i| task(i, "w", u64::from(1000 - i), 0, f64::from(1000 - i) / 1e5))
        .collect();
    let h = History::default();
    let mut st = ViewState::default();
    let first = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
    assert_eq!(first[0], 1);
    let page = first.len();
    assert!(page > 3 && page < 40, "{page} rows on a 16-line screen");
    assert_eq!(st.page, page);
    handle_key(&mut st, &cfg, key(KeyCode::PageDown));
    let second = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
    assert_eq!(second[0] as usize, page + 1);
    handle_key(&mut st, &cfg, key(KeyCode::End));
    let last = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
    assert_eq!(*last.last().unwrap(), 40);
    assert_eq!(last.len(), page, "the last page is full, not one row");
    handle_key(&mut st, &cfg, key(KeyCode::Home));
    assert_eq!(pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16))[0], 1);
    // Sorting starts again from the top.
    handle_key(&mut st, &cfg, key(KeyCode::End));
    handle_key(&mut st, &cfg, key(KeyCode::Char('p')));
    assert_eq!(st.scroll, 0);
}

#[test]
fn history_keeps_the_last_minute_newest_at_the_right() {
    let cfg = bytes_cfg();
    let mut h = History::default();
    let mut r = bytes_interval();
    for i in 0..(HISTORY as u64 + 15) {
        // Write bandwidth climbs; the newest interval is the largest.
        r.packages[0].write_bytes = 1_000_000 * (i + 1);
        h.push(&cfg, &r);
    }
    assert_eq!(h.packages[&0][1].len(), HISTORY);
    assert_eq!(
        h.packages[&0][1][0],
        2_000_000 * 16,
        "the oldest 15 dropped"
    );
    let mut st = ViewState::default();
    let lines = screen(&cfg, &h, Some(&r), &mut st, 100, 20);
    let write = line_with(&lines, "package 0 write");
    assert!(
        write.ends_with('█'),
        "newest bar at the right edge: {write:?}"
    );
    let bars: String = write.chars().skip(34).collect();
    assert_eq!(bars.chars().count(), 66);
    assert_eq!(bars.chars().filter(|c| *c != ' ').count(), HISTORY);
}

#[test]
fn quit_keys_and_nothing_else_quit() {
    let mut st = ViewState::default();
    let units = &ViewConfig {
        units: Units::Counts,
        ..bytes_cfg()
    };
    assert_eq!(
        handle_key(&mut st, units, key(KeyCode::Char('q'))),
        Action::Quit
    );
    assert_eq!(handle_key(&mut st, units, key(KeyCode::Esc)), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(handle_key(&mut st, units, ctrl_c), Action::Quit);
    assert_eq!(
        handle_key(&mut st, units, key(KeyCode::Char('x'))),
        Action::Ignore
    );
    assert_eq!(st, ViewState::default());
}

#[test]
fn before_the_first_interval_the_view_says_it_waits() {
    let cfg = bytes_cfg();
    let mut st = ViewState::default();
    let lines = screen(&cfg, &History::default(), None, &mut st, 80, 12);
    assert!(lines[0].starts_with("imc top"));
    line_with(&lines, "waiting for the first interval");
    // Tiny terminals do not panic.
    render_buffer(&cfg, &History::default(), None, &mut st, 3, 2);
    render_buffer(
        &cfg,
        &History::default(),
        Some(&bytes_interval()),
        &mut st,
        0,
        0,
    );
}

#[test]
fn a_latency_line_per_package_where_the_plan_reads_it_never_a_made_up_figure() {
    let mut cfg = bytes_cfg();
    let mut r = bytes_interval();
    r.packages[0].read_latency_ns = Some(81.4);
    let mut h = History::default();
    h.push(&cfg, &r);
    let mut st = ViewState::default();
    // Not planned (a VM, no room beside bandwidth): no line.
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 24);
    assert!(!lines.iter().any(|l| l.contains("latency")), "{lines:#?}");
    cfg.latency = true;
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 24);
    let line = line_with(&lines, "package 0 latency");
    let words: Vec<&str> = line.split_whitespace().collect();
    // Read counted, write not planned: `-`, not 0; no utilisation measured, none shown.
    assert_eq!(words[3..], ["read", "81", "ns", "write", "-"], "{line}");
    assert!(!line.contains("utilisation"));
    // The bandwidth lines are all still there above it.
    assert!(line_with(&lines, "package 0 write").contains("MB/s"));
    r.packages[0].read_latency_ns = None;
    let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 24);
    assert!(line_with(&lines, "package 0 latency").contains("read        -"));
}

/// A profile where `stream` (pid 300) made 3/4 of its traffic in `hot_three` (called from
/// `main`) and 1/4 in `hot_one`.
fn stream_profile() -> crate::model::stacks::StackProfile {
    use crate::model::stacks::{Frame, SampleType, Stack, StackProfile, StackSample};
    let sample = |stack, v| StackSample {
        tgid: 300,
        comm: "stream".into(),
        cgroup: None,
        stack,
        values: smallvec::smallvec![v, 0],
    };
    let frame = |f: &str| Frame {
        function: Some(f.into()),
        ..Frame::marker("")
    };
    StackProfile {
        sample_types: vec![
            SampleType {
                name: "read".into(),
                unit: "bytes".into(),
            },
            SampleType {
                name: "write".into(),
                unit: "bytes".into(),
            },
        ],
        frames: vec![frame("main"), frame("hot_three"), frame("hot_one")],
        stacks: vec![Stack { frames: vec![1, 0] }, Stack { frames: vec![2, 0] }],
        samples: vec![sample(0, 300), sample(1, 100)],
        ..Default::default()
    }
}

#[test]
fn with_stacks_f_shows_the_selected_process_functions_and_the_arrows_select() {
    let mut cfg = bytes_cfg();
    let r = bytes_interval();
    let mut h = History::default();
    h.push(&cfg, &r);
    h.stacks = Some(stream_profile());
    let mut st = ViewState::default();
    // Without stacks, f does nothing.
    assert_eq!(
        handle_key(&mut st, &cfg, key(KeyCode::Char('f'))),
        Action::Ignore
    );
    cfg.stacks = true;
    let lines = screen(&cfg, &h, Some(&r), &mut st, 140, 30);
    assert!(line_with(&lines, "sort:").contains("f functions"));
    assert!(!lines.iter().any(|l| l.contains("functions of")));
    assert_eq!(
        handle_key(&mut st, &cfg, key(KeyCode::Char('f'))),
        Action::Redraw
    );
    let lines = screen(&cfg, &h, Some(&r), &mut st, 140, 30);
    // The first row (the largest share) is selected: its process's functions, self and total.
    line_with(&lines, "functions of stream (pid 300)");
    let hot = line_with(&lines, "hot_three");
    assert_eq!(
        hot.split_whitespace().collect::<Vec<_>>(),
        ["75.0%", "75.0%", "hot_three"]
    );
    let main = line_with(&lines, "main");
    assert_eq!(
        main.split_whitespace().collect::<Vec<_>>(),
        ["0.0%", "100.0%", "main"]
    );
    // Down selects the next row, whose process has no stacks.
    assert_eq!(
        handle_key(&mut st, &cfg, key(KeyCode::Down)),
        Action::Redraw
    );
    let lines = screen(&cfg, &h, Some(&r), &mut st, 140, 30);
    line_with(&lines, "functions of postgres (pid 20)");
    line_with(&lines, "no traffic charged to a stack of this process yet");
    // Past the last row the selection stays on it; f closes the panel.
    for _ in 0..5 {
        handle_key(&mut st, &cfg, key(KeyCode::Down));
    }
    let lines = screen(&cfg, &h, Some(&r), &mut st, 140, 30);
    line_with(&lines, "functions of bash (pid 4000)");
    handle_key(&mut st, &cfg, key(KeyCode::Char('f')));
    let lines = screen(&cfg, &h, Some(&r), &mut st, 140, 30);
    assert!(!lines.iter().any(|l| l.contains("functions of")));
}

#[test]
fn a_package_with_a_cxl_tier_has_a_line_of_its_tiers() {
    let cfg = bytes_cfg();
    let mut r = bytes_interval();
    r.packages[0].tiers = vec![
        crate::model::TierBytes {
            tier: crate::model::Tier::Dram,
            read_bytes: 500_000_000,
            write_bytes: 100_000_000,
            total_bytes: 0,
        },
        crate::model::TierBytes {
            tier: crate::model::Tier::Cxl,
            read_bytes: 100_000_000,
            write_bytes: 50_000_000,
            total_bytes: 0,
        },
    ];
    let mut h = History::default();
    h.push(&cfg, &r);
    let lines = screen(&cfg, &h, Some(&r), &mut ViewState::default(), 120, 30);
    // Half a second: 1000 and 200 MB/s of DRAM, 200 and 100 MB/s of CXL.
    let l = line_with(&lines, "package 0 dram");
    assert!(
        l.contains("dram read 1000.0 write 200.0 MB/s | cxl read 200.0 write 100.0 MB/s"),
        "{l}"
    );
    // Without tiers (DRAM alone) there is no such line.
    let plain = bytes_interval();
    let lines = screen(&cfg, &h, Some(&plain), &mut ViewState::default(), 120, 30);
    assert!(!lines.iter().any(|l| l.contains("dram read")), "{lines:?}");
}
