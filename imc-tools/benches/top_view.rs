//! `cargo bench -p imc-tools --bench top_view`: what one frame of `imc top`'s full-screen view
//! costs the sampling loop, which draws it inside `Sink::interval`.
//!
//! A frame is the whole path: sort the tasks, render the view, diff it against the previous
//! frame and write the escape sequences (into memory, so the terminal's speed is left out).
//! Consecutive frames alternate between two intervals whose every number differs, so each
//! frame rewrites most of the screen, as a live view does. The baseline, measured in the same
//! run, is what `imc top --json` does per interval instead: serialise the same interval as one
//! JSON line.
use imc::model::result::{IntervalResult, PackageRow, TaskRow};
use imc::output::top::{History, Units, ViewConfig, ViewState, render};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use std::hint::black_box;
use std::time::Instant;

const TASKS: u32 = 500;

/// The terminal's side of the writes: counts the bytes and drops them.
struct Counting(std::rc::Rc<std::cell::Cell<usize>>);

impl std::io::Write for Counting {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.set(self.0.get() + b.len());
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
const FRAMES: usize = 400;

fn interval(seed: u64) -> IntervalResult {
    let tasks = (0..TASKS)
        .map(|i| {
            let v = u64::from(i) * 7919 + seed * 104_729;
            TaskRow {
                pid: 1000 + i,
                tgid: 1000 + i / 4,
                comm: format!("worker-{}", i % 97),
                cgroup: u64::from(i % 13),
                read_bytes: v % 900_000_000,
                write_bytes: (v / 3) % 300_000_000,
                total_bytes: 0,
                share: (v % 1000) as f64 / 1e5,
                values: [
                    ("uncore_imc_0/read".to_string(), (v % 10_000_000) as f64),
                    ("LLC-load-misses".to_string(), (v % 77_777) as f64),
                ]
                .into(),
                ..TaskRow::default()
            }
        })
        .collect();
    IntervalResult {
        t_start_ns: seed * 1_000_000_000,
        t_end_ns: (seed + 1) * 1_000_000_000,
        source: "events".into(),
        packages: (0..2)
            .map(|id| PackageRow {
                id,
                read_bytes: 5_000_000_000 + seed * 1_000_003,
                write_bytes: 1_000_000_000 + seed * 999_983,
                total_bytes: 0,
                ..PackageRow::default()
            })
            .collect(),
        tasks,
        unattributed_bytes: 12_345_678 + seed,
        unattributed: Default::default(),
        lost_samples: seed % 3,
        weighting: None,
        weight_fallbacks: 0,
    }
}

fn main() {
    let cfg = ViewConfig {
        units: Units::Bytes { total: false },
        value_events: vec!["uncore_imc_0/read".into(), "LLC-load-misses".into()],
        traffic_events: vec!["uncore_imc_0/read".into()],
        top: 0,
        notice: None,
        by: imc::model::GroupBy::Pid,
        stalls: false,
        latency: false,
        stacks: false,
    };
    let results = [interval(1), interval(2)];
    let mut history = History::default();
    for i in 0..60 {
        history.push(&cfg, &results[i % 2]);
    }
    // A large terminal: more cells to diff and write than most screens.
    let (w, h) = (220u16, 70u16);
    let written = std::rc::Rc::new(std::cell::Cell::new(0));
    let backend = CrosstermBackend::new(Counting(written.clone()));
    let mut term = Terminal::with_options(
        backend,
        ratatui::TerminalOptions {
            viewport: ratatui::Viewport::Fixed(ratatui::layout::Rect::new(0, 0, w, h)),
        },
    )
    .expect("in-memory terminal");
    let mut state = ViewState::default();

    let mut best_frame = f64::MAX;
    let mut best_json = f64::MAX;
    let mut bytes_written = 0;
    for _round in 0..5 {
        let t = Instant::now();
        for i in 0..FRAMES {
            let r = &results[i % 2];
            written.set(0);
            term.draw(|f| {
                let area = f.area();
                render(&cfg, &history, Some(r), &mut state, area, f.buffer_mut())
            })
            .expect("draw");
            bytes_written = written.get();
            black_box(bytes_written);
        }
        best_frame = best_frame.min(t.elapsed().as_secs_f64() / FRAMES as f64);

        let mut out = Vec::with_capacity(1 << 20);
        let t = Instant::now();
        for i in 0..FRAMES {
            out.clear();
            serde_json::to_writer(&mut out, &results[i % 2]).expect("json");
            out.push(b'\n');
            black_box(&out);
        }
        best_json = best_json.min(t.elapsed().as_secs_f64() / FRAMES as f64);
    }
    println!(
        "top view frame ({w}x{h}, {TASKS} tasks, {bytes_written} bytes of output): {:.3} ms   baseline JSON line of the same interval: {:.3} ms   ratio {:.2}   share of a 1 s interval {:.5}",
        best_frame * 1e3,
        best_json * 1e3,
        best_frame / best_json,
        best_frame
    );
}
