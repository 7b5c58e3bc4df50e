use super::bytes::{KernelBytes, fidelity_of};
use super::counts::{Bound, Counts, Ident, compare, count_bounds, judged_spans};
use super::truth::TruthEvent;
use super::*;
use crate::model::result::IntervalResult;
use crate::model::result::{PackageRow, TaskRow};

fn ev(name: &str) -> TruthEvent {
    TruthEvent {
        event: name.into(),
        slot: 0,
        encodings: Vec::new(),
    }
}

fn task(tgid: u32, comm: &str, v: f64) -> TaskRow {
    TaskRow {
        pid: tgid,
        tgid,
        comm: comm.into(),
        values: [("page-faults".to_string(), v)].into(),
        ..Default::default()
    }
}

fn interval(t0: u64, t1: u64, tasks: Vec<TaskRow>, total: f64, idle: f64) -> IntervalResult {
    IntervalResult {
        t_start_ns: t0,
        t_end_ns: t1,
        packages: vec![PackageRow {
            slot_counts: vec![total],
            unattributed_counts: vec![idle],
            ..Default::default()
        }],
        tasks,
        ..Default::default()
    }
}

/// The `k`-th interval of one second.
fn second(k: u64, tasks: Vec<TaskRow>, total: f64, idle: f64) -> IntervalResult {
    interval(
        k * 1_000_000_000,
        (k + 1) * 1_000_000_000,
        tasks,
        total,
        idle,
    )
}

/// The bound of `figure` (there is one).
fn bound<'a>(bounds: &'a [Bound], figure: &str) -> &'a Bound {
    bounds.iter().find(|b| b.figure == figure).unwrap()
}

fn idents() -> Vec<Ident> {
    vec![
        Ident {
            name: "toucher",
            pid: 10,
            comm: "imcv-toucher".into(),
            processes: Some(vec![10]),
        },
        // The burst's truth counted in its child 21 too.
        Ident {
            name: "burst",
            pid: 20,
            comm: "imcv-burst".into(),
            processes: Some(vec![20, 21]),
        },
        Ident {
            name: "spinner",
            pid: 30,
            comm: "imcv-spinner".into(),
            processes: Some(vec![30]),
        },
    ]
}

/// Truth: toucher 1000 a second, burst 100 a second, spinner none (t in seconds × 1e9).
/// `compare` of whole intervals against `truth_at`, nothing stolen.
fn judged(events: &[TruthEvent], intervals: &[IntervalResult]) -> Counts {
    judged_stolen(events, intervals, |_, _| 0.0)
}

/// [`judged`] with the host's steal between two instants given by `stolen`.
fn judged_stolen(
    events: &[TruthEvent],
    intervals: &[IntervalResult],
    stolen: impl Fn(u64, u64) -> f64,
) -> Counts {
    compare(events, &idents(), intervals, usize::MAX, truth_at, stolen)
}

fn truth_at(t: u64) -> Vec<Vec<f64>> {
    let s = t as f64 / 1e9;
    vec![vec![1000.0 * s], vec![100.0 * s], vec![0.0]]
}

#[test]
fn errors_are_per_interval_over_its_total_and_children_count_by_their_truth() {
    let events = [ev("page-faults")];
    let intervals = vec![
        // Interval 0 charges the spinner 20 faults the toucher made.
        second(
            0,
            vec![
                task(10, "imcv-toucher", 980.0),
                task(21, "imcv-burst", 60.0),
                task(20, "imcv-burst", 40.0),
                task(30, "imcv-spinner", 20.0),
                task(99, "python3", 400.0),
                // Another run's toucher and burst child: the same names, not these workloads.
                task(77, "imcv-toucher", 450.0),
                task(78, "imcv-burst", 50.0),
            ],
            2000.0,
            0.0,
        ),
        second(
            1,
            vec![
                task(10, "imcv-toucher", 1000.0),
                task(20, "imcv-burst", 100.0),
            ],
            1500.0,
            400.0,
        ),
    ];
    let c = judged(&events, &intervals);
    let toucher = &c.workloads[0];
    assert_eq!((toucher.truth, toucher.attributed), (2000.0, 1980.0));
    assert!((toucher.error - 20.0 / 2000.0).abs() < 1e-12);
    assert_eq!(toucher.worst_interval, 0);
    let burst = &c.workloads[1];
    assert_eq!(
        (burst.truth, burst.attributed, burst.error),
        (200.0, 200.0, 0.0)
    );
    let spinner = &c.workloads[2];
    assert_eq!((spinner.truth, spinner.attributed), (0.0, 20.0));
    let bounds = count_bounds(&events, &c);
    let find = |f: &str| bound(&bounds, f);
    // 0.01 of 2000 is exactly the bound: within.
    assert_eq!(find("error").pass, Some(true), "{}", find("error").text());
    let z = find("zero-charge");
    assert_eq!(
        (z.value, z.workload, z.pass),
        (Some(20.0), Some("spinner"), Some(false))
    );
    assert!(z.text().contains("OUTSIDE"));
    // Interval 0: 2000 attributed + 0 idle = 2000; interval 1: 1100 + 400 = 1500.
    assert_eq!(find("conservation").value, Some(0.0));
}

/// A workload charged short by what imc said it could not place is within; beyond it, or
/// charged over, it is not.
#[test]
fn a_shortfall_imc_said_it_could_not_place_is_allowed_an_excess_never() {
    let events = [ev("page-faults")];
    // Truth 1000 a second for the toucher; 2000 counted a second in all.
    let intervals = vec![
        // 200 unattributed (a slice after a switch the program did not see), toucher short 200.
        second(
            0,
            vec![task(10, "imcv-toucher", 800.0), task(99, "sh", 1000.0)],
            2000.0,
            200.0,
        ),
        // Short 300 with 200 said: 100 unsaid.
        second(
            1,
            vec![task(10, "imcv-toucher", 700.0), task(99, "sh", 1100.0)],
            2000.0,
            200.0,
        ),
        // Over by 200: never excused by what was unattributed.
        second(
            2,
            vec![task(10, "imcv-toucher", 1200.0), task(99, "sh", 600.0)],
            2000.0,
            200.0,
        ),
    ];
    let c = judged(&events, &intervals);
    let cell = |i: usize| &c.intervals[i].workloads[0];
    assert_eq!((cell(0).error, cell(0).error_raw), (0.0, 0.1));
    assert_eq!((cell(1).error, cell(1).error_raw), (0.05, 0.15));
    assert_eq!((cell(2).error, cell(2).error_raw), (0.1, 0.1));
    let toucher = &c.workloads[0];
    assert_eq!((toucher.error, toucher.worst_interval), (0.1, 2));
    assert_eq!(toucher.error_raw, 0.15);
    let b = count_bounds(&events, &c);
    assert!(bound(&b, "error").text().contains("could not place"));
}

/// A count read across an interval's end is divided by time: a workload off by no more than
/// what imc placed so is within, over or short; beyond it, it is not.
#[test]
fn what_imc_placed_by_time_across_an_end_is_allowed_either_way() {
    let events = [ev("page-faults")];
    // Truth 1000 a second for the toucher; 2000 counted a second in all. Second k charges it
    // `charged`, `placed` of which imc placed by time.
    let toucher = |k: u64, charged: f64, placed: f64| {
        let mut t = task(10, "imcv-toucher", charged);
        t.placed_by_time = [("page-faults".to_string(), placed)].into();
        second(k, vec![t, task(99, "sh", 2000.0 - charged)], 2000.0, 0.0)
    };
    let intervals = vec![
        // Over by 60, with 80 placed by time at its end: within.
        toucher(0, 1060.0, 80.0),
        // Short by 60 (the same split's other side), 80 placed by time: within.
        toucher(1, 940.0, 80.0),
        // Over by 100, 40 placed by time: 60 unsaid.
        toucher(2, 1100.0, 40.0),
    ];
    let c = judged(&events, &intervals);
    let cell = |i: usize| &c.intervals[i].workloads[0];
    assert_eq!((cell(0).error, cell(0).error_raw), (0.0, 0.03));
    assert_eq!((cell(1).error, cell(1).error_raw), (0.0, 0.03));
    assert_eq!((cell(2).error, cell(2).error_raw), (0.03, 0.05));
    assert_eq!(cell(0).placed_by_time, 80.0);
    let b = count_bounds(&events, &c);
    assert!(bound(&b, "error").text().contains("placed by time"));
}

/// Counts a CPU reported after their interval was delivered are charged where they are read
/// and said to be late from their span's start: allowed in every interval from that start to
/// the one they were charged in, and nowhere else.
#[test]
fn what_imc_read_late_is_allowed_from_its_span_start_to_where_it_was_charged() {
    let events = [ev("page-faults")];
    let toucher = |k: u64, charged: f64, late: Option<(f64, u64)>| {
        let mut t = task(10, "imcv-toucher", charged);
        if let Some(l) = late {
            t.placed_late = [("page-faults".to_string(), l)].into();
        }
        second(k, vec![t, task(99, "sh", 2000.0 - charged)], 2000.0, 0.0)
    };
    let s = 1_000_000_000;
    let intervals = vec![
        // Second 0 short by 138: its last faults were read in second 2, the CPU silent since
        // 0.9 s; second 1 had none of them.
        toucher(0, 862.0, None),
        toucher(1, 1000.0, None),
        toucher(2, 1138.0, Some((138.0, 9 * s / 10))),
        // Short by 50, with nothing late after it: an error.
        toucher(3, 950.0, None),
        toucher(4, 1000.0, None),
    ];
    let c = judged(&events, &intervals);
    let cell = |i: usize| &c.intervals[i].workloads[0];
    assert_eq!((cell(0).error, cell(0).error_raw), (0.0, 0.069));
    assert_eq!((cell(2).error, cell(2).error_raw), (0.0, 0.069));
    assert_eq!(
        (cell(0).placed_by_time, cell(2).placed_by_time),
        (138.0, 138.0)
    );
    assert_eq!(cell(1).placed_by_time, 138.0);
    assert_eq!(cell(3).error, 0.025);
    assert_eq!((cell(3).placed_by_time, cell(4).placed_by_time), (0.0, 0.0));
}

/// On-CPU time the host stole from a vCPU (steal time) is in imc's figure of the task that
/// vCPU ran and never in the task's own clock: allowed in the intervals it fell in, for clocks
/// only.
#[test]
fn time_the_host_stole_is_allowed_in_on_cpu_time_only() {
    let clock = |tgid: u32, comm: &str, ns: f64| TaskRow {
        pid: tgid,
        tgid,
        comm: comm.into(),
        values: [("cpu-clock".to_string(), ns)].into(),
        ..Default::default()
    };
    // Truth 1000 a second, read as ns here: the toucher charged 1000 + 60 ns in second 0, when
    // 80 ns were stolen, and 1000 + 60 in second 1, when none were.
    let second_of = |k: u64| {
        let tasks = vec![clock(10, "imcv-toucher", 1060.0), clock(99, "sh", 940.0)];
        second(k, tasks, 2000.0, 0.0)
    };
    let intervals = vec![second_of(0), second_of(1)];
    let stolen = |t0: u64, _t1: u64| if t0 == 0 { 80.0 } else { 0.0 };
    let c = judged_stolen(&[ev("cpu-clock")], &intervals, stolen);
    let cell = |i: usize| &c.intervals[i].workloads[0];
    assert_eq!((cell(0).error, cell(1).error), (0.0, 0.03));
    assert_eq!(c.intervals[0].host_stolen_ms, 80.0 / 1e6);
    let b = count_bounds(&[ev("cpu-clock")], &c);
    assert!(bound(&b, "error").text().contains("the host stole"));
    // Counts are not time: the same steal allows nothing.
    let counts = vec![second(
        0,
        vec![task(10, "imcv-toucher", 1060.0), task(99, "sh", 940.0)],
        2000.0,
        0.0,
    )];
    let c = judged_stolen(&[ev("page-faults")], &counts, stolen);
    assert_eq!(c.intervals[0].workloads[0].error, 0.03);
}

#[test]
fn without_the_truths_processes_a_task_of_a_workloads_name_is_its_child() {
    let mut ids = idents();
    ids[1].processes = None;
    let r = second(0, vec![task(78, "imcv-burst", 50.0)], 50.0, 0.0);
    let c = compare(
        &[ev("page-faults")],
        &ids,
        &[r],
        usize::MAX,
        truth_at,
        |_, _| 0.0,
    );
    assert_eq!(c.workloads[1].attributed, 50.0);
}

#[test]
fn what_is_sampled_after_the_runs_whole_intervals_is_judged_with_the_last() {
    // Two whole seconds, then the tail drained before the freeze landed and the settle: 10 of
    // the toucher's faults are placed across the end of second 1, a tenth of the tail's total.
    let events = [ev("page-faults")];
    let intervals = vec![
        second(0, vec![task(10, "imcv-toucher", 1000.0)], 1000.0, 0.0),
        second(1, vec![task(10, "imcv-toucher", 990.0)], 990.0, 0.0),
        interval(
            2_000_000_000,
            2_100_000_000,
            vec![task(10, "imcv-toucher", 110.0)],
            110.0,
            0.0,
        ),
    ];
    let apart = judged(&events, &intervals);
    assert!(
        apart.workloads[0].error > 0.09,
        "{}",
        apart.workloads[0].error
    );
    let c = compare(&events, &idents(), &intervals, 2, truth_at, |_, _| 0.0);
    let toucher = &c.workloads[0];
    assert_eq!((toucher.truth, toucher.attributed), (2100.0, 2100.0));
    assert_eq!(toucher.error, 0.0);
    let ends: Vec<(usize, u64, u64)> = c
        .intervals
        .iter()
        .map(|r| (r.index, r.t_start_ns, r.t_end_ns))
        .collect();
    assert_eq!(
        ends,
        [(0, 0, 1_000_000_000), (1, 1_000_000_000, 2_100_000_000)]
    );
    assert_eq!(c.intervals[1].events[0].total, 1100.0);
    // A run cut short has fewer intervals than it was to have: each is judged apart.
    assert_eq!(judged_spans(2, 5), [0..1, 1..2]);
    assert_eq!(judged_spans(13, 10).last(), Some(&(9..13)));
    assert!(judged_spans(0, 5).is_empty());
}

#[test]
fn a_leak_breaks_conservation_and_names_the_interval() {
    let events = [ev("page-faults")];
    let intervals = vec![
        second(0, vec![task(10, "imcv-toucher", 1000.0)], 1000.0, 0.0),
        second(1, vec![task(10, "imcv-toucher", 1000.0)], 1500.0, 0.0),
    ];
    let c = judged(&events, &intervals);
    let b = count_bounds(&events, &c);
    let cons = bound(&b, "conservation");
    assert_eq!(cons.pass, Some(false));
    assert_eq!(cons.interval, Some(1));
}

#[test]
fn cpu_time_has_twice_the_bound_of_counts() {
    assert_eq!(error_bound("cpu-clock"), 0.02);
    assert_eq!(error_bound("page-faults"), 0.01);
}

#[test]
fn fidelity_is_what_weights_saw_of_what_kernels_moved_and_is_written_whole() {
    let k = |name, read, write, saw| KernelBytes {
        name,
        expected_read: read,
        expected_write: write,
        weights: [("LLC-misses".to_string(), saw)].into(),
        expected_for: [("LLC-misses".to_string(), read + write)].into(),
        ..Default::default()
    };
    let f = fidelity_of(&[
        k("reader", 100.0, 0.0, 90.0),
        k("copier", 200.0, 100.0, 210.0),
    ]);
    assert!((f.weights["LLC-misses"] - 0.75).abs() < 1e-12);
    // reader 0.9, copier 0.7 against 0.75: the larger relative spread is 0.2.
    assert!((f.bound - 0.2).abs() < 1e-12);
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("sub/fidelity.json");
    crate::plan::fidelity::save(&path, &f.weights).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["weights"]["LLC-misses"], 0.75);
    assert_eq!(
        std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
        1
    );
}
