//! `imc top`: live per-process memory bandwidth from the eBPF tick sampler.
//!
//! What is counted: the `-e` events if given; else the memory controller's read/write counters
//! (package scope); else, on machines without one (a VM), a stand-in said so on stderr and in
//! every object's `source`: core LLC misses where a core PMU exists, else page faults (see
//! [`super::sampling`]).
//!
//! On a terminal (and without `--json`) the intervals feed the full-screen view of
//! [`crate::output::top`]; otherwise each interval is one JSON line, the object of
//! [`crate::model::result`].
use super::naming_sink::{Naming, cgroup_paths};
use super::sampling::{block_on, discover, package_peaks, print_plan, select_for};
use crate::attribution::stack_window::StackWindow;
use crate::cli::{GlobalArgs, TopArgs};
use crate::error::{CliError, CliResult};
use crate::model::SlotSpec;
use crate::model::result::IntervalResult;
use crate::model::{Direction, SlotRole};
use crate::output::top::terminal::{
    MIN_FRAME, RawMode, Screen, give_back_terminal, lock, read_keys,
};
use crate::output::top::{Units, ViewConfig};
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::plan::PlanSource;
use crate::sys::tty::Tty;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `--json` or piped: one object per interval.
struct JsonLines {
    out: std::io::StdoutLock<'static>,
    /// A stand-in or `-e` counts: the byte fields are null, not 0.
    counts: bool,
    /// `--by`: a group row's pid, tgid and comm are null unless the key is that field.
    by: crate::model::GroupBy,
    /// `--stacks`: the intervals and stacks the rows' top functions are taken from.
    stacks: Option<StackWindow>,
}

/// Functions listed per row of `top --json --stacks`.
const TOP_FUNCTIONS: usize = 5;

impl JsonLines {
    /// The interval's JSON line; with `--stacks`, each row with its process's top functions
    /// (`top_functions`: `function`, `self_value`, `total_value`, `share`).
    fn line(&mut self, r: &IntervalResult) -> std::io::Result<String> {
        let unit = self.counts.then_some("counts/s");
        let text = crate::output::json::to_json_by(r, unit, self.by)?;
        let Some(w) = self.stacks.as_mut() else {
            return Ok(text);
        };
        let p = recent_profile(w, r);
        let mut v: serde_json::Value = serde_json::from_str(&text)?;
        for row in v
            .get_mut("tasks")
            .and_then(serde_json::Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(tgid) = row.get("tgid").and_then(serde_json::Value::as_u64) {
                let top =
                    crate::output::stacks::functions::top_functions(&p, tgid as u32, TOP_FUNCTIONS);
                row["top_functions"] = serde_json::json!(top);
            }
        }
        Ok(v.to_string())
    }
}

/// Adds interval `r` to the window and returns the traffic by stack of the last three
/// intervals: stacks come a drain or two after the slices they charge (they are resolved off
/// the loop's thread).
fn recent_profile(w: &mut StackWindow, r: &IntervalResult) -> crate::model::stacks::StackProfile {
    w.add_interval(r);
    let len = r.t_end_ns.saturating_sub(r.t_start_ns);
    w.profile(r.t_start_ns.saturating_sub(2 * len), r.t_end_ns, |t| t)
}

impl Sink for JsonLines {
    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        if let Some(w) = self.stacks.as_mut() {
            w.add_batch(batch);
        }
        Ok(())
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        let line = self
            .line(r)
            .and_then(|s| writeln!(self.out, "{s}"))
            .and_then(|()| self.out.flush());
        match line {
            Ok(()) => Ok(true),
            // The reader went away (`imc top --json | head`): stop quietly, like cat.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e),
        }
    }
}

pub fn run(global: &GlobalArgs, args: &TopArgs) -> CliResult<ExitCode> {
    // -p 0, a pid past pid_max or one not running: one line, exit 2, as record -p says it,
    // never an empty table for as long as top runs.
    if !args.sampler.dry_run {
        super::record::check_pids(&global.root, &args.pid)?;
    }
    // --ibs: AMD IBS op sampling, its own loop (commands/ibs_top.rs).
    if args.ibs {
        return super::ibs_top::run(global, args);
    }
    let found = discover(global)?;
    let sel = select_for(
        global,
        &args.sampler,
        &found,
        crate::plan::CommandKind::Top,
        args.interval_ms,
    )?;
    if args.sampler.dry_run {
        return print_plan(&sel.plan, args.json);
    }
    let json = args.json || !std::io::stdout().is_terminal();
    // Opened (and any warning said) before the full-screen view takes the terminal.
    let paths = cgroup_paths(global);
    let specs = crate::sampler::from_plan::slot_specs(&sel.plan);
    let mut cfg = view_config(&specs, &sel.plan.source, args.top);
    cfg.by = args.by;
    cfg.latency = sel.plan.latency.as_ref().is_some_and(|l| l.read);
    cfg.stacks = sel.plan.stacks.is_some();
    let window = || cfg.stacks.then(|| StackWindow::new(specs.clone()));
    let mut lines;
    let mut live;
    let sink: &mut dyn Sink = if json {
        lines = JsonLines {
            out: std::io::stdout().lock(),
            counts: cfg.units == Units::Counts,
            by: args.by,
            stacks: window(),
        };
        &mut lines
    } else {
        live = LiveView::start(cfg.clone(), window()).map_err(|e| {
            CliError::runtime_because("cannot start the full-screen view on this terminal", e)
                .hint("use --json")
        })?;
        &mut live
    };
    let opts = LoopOptions {
        interval_ms: args.interval_ms,
        duration: args.duration.map(crate::cli::seconds_duration),
        command: &[],
        per_channel: false,
        verbose: global.verbose,
        peaks: package_peaks(&global.root, &found, &sel.plan),
        root: global.root.clone(),
    };
    let mut named = Naming::new(paths, args.by, sink).pids(crate::model::PidFilter::new(&args.pid));
    block_on(async { Ok(sample_loop(&opts, &found, &sel.plan, &mut named).await?) })
}

/// What the view shows follows from the counters the loop reads: bytes when a traffic counter
/// has bytes per count (as the attributor decides), else counts; the counters' own columns for
/// `-e` events and stand-ins, whose names say more than READ/WRITE.
fn view_config(specs: &[SlotSpec], source: &PlanSource, top: usize) -> ViewConfig {
    let traffic = || {
        specs
            .iter()
            .filter(|p| matches!(p.role, SlotRole::Traffic(_)))
    };
    let bytes = crate::model::measures_bytes(specs);
    let units = if bytes {
        Units::Bytes {
            total: specs
                .iter()
                .any(|p| p.counts_bytes() && p.role == SlotRole::Traffic(Direction::Total)),
        }
    } else {
        Units::Counts
    };
    let mut traffic_events: Vec<String> = Vec::new();
    for p in traffic() {
        if !traffic_events.contains(&p.event) {
            traffic_events.push(p.event.clone());
        }
    }
    let mut value_events: Vec<String> = Vec::new();
    if !bytes || source.is_events() || source.stand_in().is_some() {
        for p in specs
            .iter()
            .filter(|p| !matches!(p.role, SlotRole::Stall(_)))
        {
            if !value_events.contains(&p.event) {
                value_events.push(p.event.clone());
            }
        }
    }
    ViewConfig {
        units,
        value_events,
        traffic_events,
        top,
        notice: None,
        by: crate::model::GroupBy::Pid,
        stalls: crate::model::Victims::keys(specs).is_some(),
        latency: false,
        stacks: false,
    }
}

/// The full-screen view as the loop's sink. `interval` only records the interval and draws one
/// frame (the loop's drain is never waited on for keys); a small thread reads keys, redraws on
/// sorting, scrolling and resizing, and on q/Esc/Ctrl-C stops the loop.
struct LiveView {
    screen: Arc<Mutex<Screen>>,
    quit: Arc<AtomicBool>,
    stop_keys: Arc<AtomicBool>,
    /// The terminal went away: nothing more can be drawn, and that is no error.
    gone: Arc<AtomicBool>,
    keys: Option<JoinHandle<()>>,
    /// `--stacks`: the intervals and stacks the functions panel is drawn from.
    stacks: Option<StackWindow>,
}

impl LiveView {
    fn start(cfg: ViewConfig, stacks: Option<StackWindow>) -> std::io::Result<LiveView> {
        let mut mode = RawMode::enter()?;
        let screen = Arc::new(Mutex::new(Screen::new(cfg)?));
        lock(&screen).draw()?;
        let quit = Arc::new(AtomicBool::new(false));
        let stop_keys = Arc::new(AtomicBool::new(false));
        let gone = Arc::new(AtomicBool::new(false));
        let tty = Tty::open()?;
        let keys = std::thread::Builder::new()
            .name("imc-top-keys".into())
            .spawn({
                let (screen, quit, stop, gone) = (
                    screen.clone(),
                    quit.clone(),
                    stop_keys.clone(),
                    gone.clone(),
                );
                move || read_keys(&tty, &screen, &quit, &stop, &gone)
            })?;
        // From here LiveView's Drop gives the terminal back.
        mode.disarm();
        Ok(LiveView {
            screen,
            quit,
            stop_keys,
            gone,
            keys: Some(keys),
            stacks,
        })
    }
}

impl Sink for LiveView {
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        if self.quit.load(Ordering::SeqCst) {
            return Ok(false);
        }
        // Computed before the screen is locked: the key thread never waits on it.
        let profile = self.stacks.as_mut().map(|w| recent_profile(w, r));
        let mut s = lock(&self.screen);
        let Screen { cfg, history, .. } = &mut *s;
        history.push(cfg, r);
        if profile.is_some() {
            history.stacks = profile;
        }
        s.last = Some(r.clone());
        // With intervals shorter than a person can read (-I 10), drawing every one would only
        // cost the loop time: the history still takes every interval, the screen a few a second.
        if s.drawn.is_none_or(|t| t.elapsed() >= MIN_FRAME)
            && let Err(e) = s.draw()
        {
            // A terminal that hung up fails every write (EIO): the run ends quietly.
            if self.gone.load(Ordering::SeqCst) || e.raw_os_error() == Some(libc::EIO) {
                self.gone.store(true, Ordering::SeqCst);
                return Ok(false);
            }
            return Err(e);
        }
        Ok(!self.quit.load(Ordering::SeqCst))
    }

    fn stop_requested(&self) -> bool {
        self.quit.load(Ordering::SeqCst)
    }

    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        if let Some(w) = self.stacks.as_mut() {
            w.add_batch(batch);
        }
        Ok(())
    }

    /// The first (the stand-in's, said before any interval) is shown in the view's header: a
    /// line printed on stderr would land on the screen and be drawn over by the next frame.
    /// Later ones (weights falling back to time) the header shows from the intervals already.
    fn notice(&mut self, text: &str) {
        let mut s = lock(&self.screen);
        if s.cfg.notice.is_none() {
            s.cfg.notice = Some(text.to_string());
            let _ = s.draw();
        }
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.stop_keys.store(true, Ordering::SeqCst);
        if let Some(t) = self.keys.take() {
            // The key thread sees the flag within one 50 ms wait. Should it be stuck in a
            // terminal read that never returns, the process does not wait for it: it ends with
            // the process.
            let until = Instant::now() + Duration::from_millis(500);
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        give_back_terminal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SlotScope, SlotSpec};

    fn plan(event: &str, role: SlotRole, bytes_per_count: Option<f64>) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope: SlotScope::Cpu,
            role,
            bytes_per_count,
            counter_bits: 64,
        }
    }

    fn selection(source: PlanSource, plans: Vec<SlotSpec>) -> (Vec<SlotSpec>, PlanSource) {
        (plans, source)
    }

    #[test]
    fn memory_controller_shows_bytes_without_counter_columns() {
        let sel = selection(
            PlanSource::Backend(crate::model::BackendKind::IntelUncoreImc),
            vec![
                plan(
                    "uncore_imc_0/read",
                    SlotRole::Traffic(Direction::Read),
                    Some(64.0),
                ),
                plan(
                    "uncore_imc_0/write",
                    SlotRole::Traffic(Direction::Write),
                    Some(64.0),
                ),
            ],
        );
        let cfg = view_config(&sel.0, &sel.1, 20);
        assert_eq!(cfg.units, Units::Bytes { total: false });
        assert!(cfg.value_events.is_empty());
        assert_eq!(cfg.top, 20);
    }

    #[test]
    fn stand_in_and_plain_events_show_counts_by_counter() {
        let sel = selection(
            PlanSource::StandIn("page-faults".into()),
            vec![plan(
                "page-faults",
                SlotRole::Traffic(Direction::Total),
                None,
            )],
        );
        let cfg = view_config(&sel.0, &sel.1, 0);
        assert_eq!(cfg.units, Units::Counts);
        assert_eq!(cfg.value_events, ["page-faults"]);
        assert_eq!(cfg.traffic_events, ["page-faults"]);

        // -e page-faults -e context-switches: the first ranks, both are shown.
        let sel = selection(
            PlanSource::SampledEvents(vec!["page-faults".into(), "context-switches".into()]),
            vec![
                plan("page-faults", SlotRole::Traffic(Direction::Total), None),
                plan("context-switches", SlotRole::Other, None),
            ],
        );
        let cfg = view_config(&sel.0, &sel.1, 0);
        assert_eq!(cfg.units, Units::Counts);
        assert_eq!(cfg.value_events, ["page-faults", "context-switches"]);
        assert_eq!(cfg.traffic_events, ["page-faults"]);
    }

    #[test]
    fn a_bandwidth_event_among_others_shows_bytes_and_every_counter() {
        let sel = selection(
            PlanSource::Events,
            vec![
                plan(
                    "uncore_imc/cas_count_all/",
                    SlotRole::Traffic(Direction::Total),
                    Some(64.0),
                ),
                plan("instructions", SlotRole::Other, None),
            ],
        );
        let cfg = view_config(&sel.0, &sel.1, 0);
        assert_eq!(cfg.units, Units::Bytes { total: true });
        assert_eq!(
            cfg.value_events,
            ["uncore_imc/cas_count_all/", "instructions"]
        );
    }
}
