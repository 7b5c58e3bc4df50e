//! `imc serve`: the sampling loop of `imc top`, run until SIGINT/SIGTERM, its intervals
//! summed into Prometheus counters served at `/metrics` (see [`crate::output::prometheus`]).
//!
//! The HTTP server (axum) runs on the loop's own runtime: a scrape is answered between two
//! drains, from the counters as of the last closed interval, under the same lock the loop
//! takes to add an interval, so one scrape never mixes two intervals.
use super::naming_sink::{Naming, cgroup_paths};
use super::sampling::{Selection, block_on, discover, package_peaks, print_plan, select_for};
use crate::attribution::stack_window::{StackWindow, WINDOW_S};
use crate::cli::{GlobalArgs, GroupBy, ServeArgs};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::model::Discovery;
use crate::model::result::IntervalResult;
use crate::output::prometheus::{
    CLASSIC_TYPE, ExportMeta, Exporter, OPENMETRICS_TYPE, SlotInfo, direction_label,
    to_classic_text, wants_openmetrics,
};
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::web::config::WebConfig;
use crate::web::server;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The counters, and their text as last encoded: the counters change once an interval, so every
/// scrape in between is answered with the same bytes (a client that pipelines thousands of
/// scrapes costs copies of a reference, not thousands of encodings on the loop's thread).
struct Served {
    exporter: Exporter,
    /// `--stacks`: the last minute of intervals and stacks, for `/debug/pprof/dram`.
    stacks: Option<StackWindow>,
    /// The OpenMetrics text and the classic one, as of the last change (None: changed since).
    text: Option<(bytes::Bytes, bytes::Bytes)>,
}

impl Served {
    /// The exporter, to change: the encoded text is dropped.
    fn changing(&mut self) -> &mut Exporter {
        self.text = None;
        &mut self.exporter
    }
}

type Shared = Arc<Mutex<Served>>;

fn lock(ex: &Shared) -> MutexGuard<'_, Served> {
    // A panic while adding an interval leaves counters that are still counters.
    ex.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn run(global: &GlobalArgs, args: &ServeArgs) -> CliResult<ExitCode> {
    let found = discover(global)?;
    let sel = select_for(
        global,
        &args.sampler,
        &found,
        crate::plan::CommandKind::Serve,
        args.interval_ms,
    )?;
    // The web config is checked before anything listens (and by a dry run too).
    let web = match &args.web_config_file {
        Some(path) => WebConfig::load(path).map_err(|e| CliError::new(ErrorKind::BadInput, e))?,
        None => WebConfig::default(),
    };
    let meta = export_meta(global, &found, &sel);
    if args.sampler.dry_run {
        let code = print_plan(&sel.plan, args.json)?;
        if !args.json {
            print_dry_run(args, &sel, &meta, &web);
        }
        return Ok(code);
    }
    prepare_to_listen(args, &web);
    let peaks = meta.peaks.clone();
    let exporter: Shared = Arc::new(Mutex::new(Served {
        exporter: Exporter::new(ExportMeta {
            max_processes: args.max_processes,
            max_cgroups: args.max_cgroups,
            ..meta
        }),
        text: None,
        stacks: sel
            .plan
            .stacks
            .as_ref()
            .map(|_| StackWindow::new(crate::sampler::from_plan::slot_specs(&sel.plan))),
    }));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/debug/pprof/dram", get(pprof_dram))
        .route("/", get(index))
        .with_state(exporter.clone());
    let opts = LoopOptions {
        interval_ms: args.interval_ms,
        duration: None,
        command: &[],
        per_channel: true,
        verbose: global.verbose,
        peaks,
        root: global.root.clone(),
    };
    block_on(async {
        // Bound first, so a port in use is said before the sampler loads; served only once the
        // sampler runs, so "serving" is never said by a run about to fail.
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| {
                CliError::runtime_because(format!("cannot listen on {}", args.listen), e)
                    .hint("choose another --listen ADDR:PORT")
            })?;
        let mut sink = ServeSink {
            exporter,
            json: args.json.then(|| std::io::stdout().lock()),
            read_errors: 0,
            server: ServerState::Ready(listener, app, web),
            web_config_file: args.web_config_file.clone(),
            max_connections: args.max_connections.map(usize::from),
        };
        // Rows carry their cgroup's path: the `cgroup` label (ids where it does not resolve).
        let mut named = Naming::new(cgroup_paths(global), GroupBy::Pid, &mut sink);
        let code = sample_loop(&opts, &found, &sel.plan, &mut named).await;
        drop(named);
        if let ServerState::Running(task) = sink.server {
            task.abort();
        }
        Ok(code?)
    })
}

/// Whether an address reaches this host only: 127.0.0.0/8, ::1, and IPv4 loopback written as
/// an IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// The HTTP server: bound but not serving until the sampler runs, then its task.
enum ServerState {
    Ready(tokio::net::TcpListener, Router, WebConfig),
    Running(tokio::task::JoinHandle<()>),
    Gone,
}

/// The loop's sink: every interval into the counters (and to stdout with `--json`).
struct ServeSink {
    exporter: Shared,
    json: Option<std::io::StdoutLock<'static>>,
    /// Failed counter reads seen since the last drain ended.
    read_errors: u64,
    server: ServerState,
    /// Read again when it changes.
    web_config_file: Option<std::path::PathBuf>,
    /// --web.max-connections (None: from the open-file limit).
    max_connections: Option<usize>,
}

impl Sink for ServeSink {
    fn started(&mut self) {
        let ServerState::Ready(listener, app, web) =
            std::mem::replace(&mut self.server, ServerState::Gone)
        else {
            return;
        };
        let scheme = if web.tls.is_some() { "https" } else { "http" };
        let bound = listener.local_addr().map(|a| a.to_string());
        // The sampler's descriptors are open by now: the connections get what is left.
        let (nofile, _) = crate::sys::rlimit::nofile().unwrap_or((1024, 1024));
        let open = crate::sys::rlimit::open_fds().unwrap_or(64);
        let max = self
            .max_connections
            .unwrap_or_else(|| server::connection_limit(nofile, open));
        log::info!("at most {max} connections ({open} of {nofile} descriptors in use)");
        let task = tokio::spawn(
            server::Server::new(listener, app, web, self.web_config_file.take(), max).run(),
        );
        self.server = ServerState::Running(task);
        match bound {
            Ok(addr) => eprintln!("imc: serving {scheme}://{addr}/metrics"),
            Err(e) => eprintln!("imc: serving on an address it cannot tell: {e}"),
        }
    }

    fn tick(&mut self, rec: &imc_common::Record) -> std::io::Result<()> {
        let filled = (1u16 << rec.nr_slots.min(8)) - 1;
        self.read_errors += u64::from((u16::from(rec.failed_mask) & filled).count_ones());
        Ok(())
    }

    fn drained(&mut self, _records: usize, took: Duration) {
        let mut served = lock(&self.exporter);
        let ex = served.changing();
        ex.observe_drain(took);
        ex.add_read_errors(std::mem::take(&mut self.read_errors));
    }

    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        if let Some(w) = lock(&self.exporter).stacks.as_mut() {
            w.add_batch(batch);
        }
        Ok(())
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        {
            let mut served = lock(&self.exporter);
            served.changing().add_interval(r);
            if let Some(w) = served.stacks.as_mut() {
                w.add_interval(r);
            }
        }
        if let Some(out) = self.json.as_mut() {
            let written = serde_json::to_writer(&mut *out, r)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
            if let Err(e) = written {
                // The service goes on without its log.
                eprintln!("imc: --json output stopped: {e}");
                self.json = None;
            }
        }
        Ok(true)
    }
}

async fn metrics(State(ex): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let start = Instant::now();
    let (openmetrics, classic) = {
        let mut served = lock(&ex);
        let (o, c) = match &served.text {
            Some(t) => t.clone(),
            None => {
                let text = served.exporter.encode();
                let classic = bytes::Bytes::from(to_classic_text(&text));
                let t = (bytes::Bytes::from(text), classic);
                served.text = Some(t.clone());
                t
            }
        };
        // Observed now, shown from the next change on (the text of this interval is fixed).
        served.exporter.observe_scrape(start.elapsed());
        (o, c)
    };
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    if wants_openmetrics(accept) {
        ([(CONTENT_TYPE, OPENMETRICS_TYPE)], openmetrics)
    } else {
        ([(CONTENT_TYPE, CLASSIC_TYPE)], classic)
    }
}

/// `GET /debug/pprof/dram?seconds=N` (`--stacks`): as Go's net/http/pprof answers
/// `/debug/pprof/profile`, waits N seconds (default 30, at most [`WINDOW_S`]) and answers a
/// gzipped pprof profile of the traffic by call stack over them; 404 without `--stacks`, 400
/// for a bad N.
async fn pprof_dram(
    State(ex): State<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let bad = |code: StatusCode, text: String| (code, text).into_response();
    if lock(&ex).stacks.is_none() {
        return bad(
            StatusCode::NOT_FOUND,
            "imc serve was started without --stacks: no stacks are taken\n".into(),
        );
    }
    let seconds = match seconds_of(query.as_deref()) {
        Ok(s) => s,
        Err(why) => return bad(StatusCode::BAD_REQUEST, format!("{why}\n")),
    };
    let from = crate::sampler::monotonic_ns();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let to = crate::sampler::monotonic_ns();
    let profile = {
        let served = lock(&ex);
        let Some(w) = served.stacks.as_ref() else {
            return bad(StatusCode::NOT_FOUND, "no stacks\n".into());
        };
        w.profile(from, to, realtime_of)
    };
    let mut body = Vec::new();
    if let Err(e) = crate::output::stacks::pprof::write_pprof(&profile, &mut body) {
        return bad(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"));
    }
    (
        [
            (CONTENT_TYPE, "application/octet-stream"),
            (
                axum::http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"dram.pb.gz\"",
            ),
        ],
        body,
    )
        .into_response()
}

/// `seconds=N` of a query (default 30), 1 ..= [`WINDOW_S`].
fn seconds_of(query: Option<&str>) -> Result<u64, String> {
    let given = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("seconds="));
    let Some(text) = given else {
        return Ok(30);
    };
    match text.parse::<u64>() {
        Ok(n) if (1..=WINDOW_S).contains(&n) => Ok(n),
        _ => Err(format!(
            "seconds={}: give whole seconds from 1 to {WINDOW_S}",
            crate::text::escape(text)
        )),
    }
}

/// CLOCK_REALTIME ns of a CLOCK_MONOTONIC instant, by the two clocks' offset now.
fn realtime_of(mono_ns: u64) -> u64 {
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let now = crate::sampler::monotonic_ns();
    real.saturating_sub(now.saturating_sub(mono_ns))
}

async fn index() -> &'static str {
    "imc: metrics at /metrics\n"
}

/// Labels of the plan's traffic slots: the channel label is the PMU its counters are on where
/// they share one (a stand-in's `software`, a client's `uncore_imc`), else `all` (a package
/// slot sums every channel of the package); the backend is the plan's, else the PMU.
fn export_meta(global: &GlobalArgs, found: &Discovery, sel: &Selection) -> ExportMeta {
    let plan = &sel.plan;
    let slots: Vec<Option<SlotInfo>> = plan
        .slots
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            if !matches!(slot.role, crate::model::SlotRole::Traffic(_)) {
                return None;
            }
            let mut pmus: Vec<&str> = plan
                .counters
                .iter()
                .filter(|c| c.slot == Some(i))
                .map(|c| c.pmu.as_str())
                .collect();
            pmus.sort_unstable();
            pmus.dedup();
            Some(SlotInfo {
                event: slot.event.clone(),
                channel: match pmus.as_slice() {
                    [one] => one.to_string(),
                    _ => "all".to_string(),
                },
                direction: slot.direction.unwrap_or(crate::model::Direction::Total),
                bytes_per_count: slot.bytes_per_count,
                tier: crate::model::Tier::of_key(&slot.event),
            })
        })
        .collect();
    // The backend a PMU of the first traffic counter belongs to (for `-e` events), else that
    // PMU's name.
    let first_pmu = slots
        .iter()
        .position(Option::is_some)
        .and_then(|i| plan.counters.iter().find(|c| c.slot == Some(i)))
        .map(|c| c.pmu.clone());
    let backend = plan
        .backend
        .or_else(|| {
            found
                .sources
                .iter()
                .find(|s| s.pmus.iter().any(|p| Some(&p.name) == first_pmu.as_ref()))
                .map(|s| s.backend)
        })
        .map_or_else(
            || first_pmu.clone().unwrap_or_default(),
            |b| b.as_str().to_string(),
        );
    let peaks = package_peaks(&global.root, found, &sel.plan);
    ExportMeta {
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend,
        source: sel.source.clone(),
        tick: plan.tick.label(),
        weighting: plan
            .weighting
            .as_ref()
            .map_or_else(String::new, crate::model::Weighting::label),
        slots,
        max_processes: 0,
        max_cgroups: 0,
        peaks,
        stalls: plan
            .victims
            .as_ref()
            .is_some_and(|v| v.stalled.is_some() && v.cycles.is_some()),
        latency_read: plan.latency.as_ref().is_some_and(|l| l.read),
        latency_write: plan.latency.as_ref().is_some_and(|l| l.write),
    }
}

/// Which latency gauges the plan gives, or why none (`--dry-run`).
fn print_latency_families(plan: &crate::plan::Plan) {
    let Some(l) = &plan.latency else { return };
    if !l.read {
        println!("latency: no imc_dram_*_latency_seconds (the plan's latency line says why)");
        return;
    }
    let mut channels: Vec<(u32, String)> = plan
        .counters
        .iter()
        .filter(|c| c.role == crate::plan::CounterRole::Latency)
        .filter_map(|c| Some((c.package?, c.pmu.clone())))
        .collect();
    channels.sort();
    channels.dedup();
    for (dir, planned) in [("read", l.read), ("write", l.write)] {
        if planned {
            println!(
                "latency: imc_dram_{dir}_latency_seconds{{package,channel}} (gauge, each \
                 interval) on {} channel(s)",
                channels.len()
            );
        } else {
            println!(
                "latency: no imc_dram_{dir}_latency_seconds: its queue is not counted here (the \
                 plan's latency line says why)"
            );
        }
    }
}

/// Before listening: a warning where anyone could read the metrics, and room for connections
/// (the hard file limit, not the soft one systemd and shells default to, 1024).
fn prepare_to_listen(args: &ServeArgs, web: &WebConfig) {
    if !is_loopback(args.listen.ip()) && web.tls.is_none() {
        eprintln!(
            "imc: warning: serving on {} without TLS, not loopback: anyone who reaches it sees process names and cgroups (give --web.config.file a tls_server_config)",
            args.listen
        );
    }
    if let Err(e) = crate::sys::rlimit::raise_nofile() {
        log::info!("the open-file limit stays as it is: {e}");
    }
}

fn print_dry_run(args: &ServeArgs, sel: &Selection, meta: &ExportMeta, web: &WebConfig) {
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    println!("listen: {scheme}://{}/metrics", args.listen);
    if !web.users.is_empty() {
        // Names as the file has them, control characters written out (an ESC or BEL in a
        // user name must not drive the terminal).
        let users: Vec<std::borrow::Cow<'_, str>> =
            web.users.keys().map(|u| crate::text::escape(u)).collect();
        println!("basic auth: {}", users.join(", "));
    }
    println!(
        "imc_info: version={} backend={} source={} tick={}",
        meta.version, meta.backend, meta.source, meta.tick
    );
    for (slot, info) in meta.slots.iter().enumerate() {
        let Some(s) = info else {
            println!("slot {slot}: not a traffic counter, not exported");
            continue;
        };
        let (family, unit) = match s.bytes_per_count {
            Some(b) => (
                "imc_dram_bytes_total".to_string(),
                format!("{b} bytes per count"),
            ),
            None => (
                format!("imc_dram_events_total{{event=\"{}\"}}", s.event),
                "counts".to_string(),
            ),
        };
        // Package counters are exported channel by channel; a CPU slot as itself.
        let mut channels: Vec<String> = sel
            .plan
            .counters
            .iter()
            .filter(|c| c.slot == Some(slot) && c.package.is_some())
            .map(|c| sel.plan.channel_label(c))
            .collect();
        channels.dedup();
        if channels.is_empty() {
            channels.push(s.channel.clone());
        }
        for channel in channels {
            // Every series has its `tier` label; the plan names the one that is not DRAM.
            let tier = if s.tier.is_dram() {
                String::new()
            } else {
                format!(", tier {}", s.tier.as_str())
            };
            println!(
                "slot {slot}: {} (channel {channel}, {}, {unit}{tier}) -> {family}",
                s.event,
                direction_label(s.direction)
            );
        }
    }
    for (package, bytes) in &meta.peaks {
        println!("imc_dram_peak_bytes_per_second{{package=\"{package}\"}} {bytes}");
    }
    print_latency_families(&sel.plan);
    println!(
        "processes exported: the top {} by recent traffic",
        args.max_processes
    );
    println!(
        "cgroups exported: the top {} by recent traffic",
        args.max_cgroups
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_loopback_mapped_into_ipv6_is_loopback() {
        for a in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(a.parse().unwrap()), "{a}");
        }
        for a in [
            "0.0.0.0",
            "10.0.0.1",
            "::",
            "::ffff:10.0.0.1",
            "::ffff:0.0.0.0",
        ] {
            assert!(!is_loopback(a.parse().unwrap()), "{a}");
        }
    }
}
