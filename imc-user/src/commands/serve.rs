//! `imc serve`: the sampling loop of `imc top`, run until SIGINT/SIGTERM, its intervals
//! summed into Prometheus counters served at `/metrics` (see [`crate::output::prometheus`]).
//!
//! The HTTP server (axum) runs on the loop's own runtime: a scrape is answered between two
//! drains, from the counters as of the last closed interval, under the same lock the loop
//! takes to add an interval, so one scrape never mixes two intervals.
use super::sampling::{LoopOptions, Selection, Sink, block_on, discover, sample_loop, select};
use crate::cli::{GlobalArgs, SamplerArgs, ServeArgs};
use crate::error::{CliError, CliResult};
use crate::events::generic::type_name;
use crate::model::{BackendKind, Discovery, SlotRole};
use crate::output::interval::IntervalResult;
use crate::output::prometheus::{
    CLASSIC_TYPE, ExportMeta, Exporter, OPENMETRICS_TYPE, SlotInfo, direction_label,
    to_classic_text, wants_openmetrics,
};
use crate::sampler::SlotPlan;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

type Shared = Arc<Mutex<Exporter>>;

fn lock(ex: &Shared) -> MutexGuard<'_, Exporter> {
    // A panic while adding an interval leaves counters that are still counters.
    ex.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn run(global: &GlobalArgs, args: &ServeArgs) -> CliResult<ExitCode> {
    let found = discover(global)?;
    let sel = select(global, &args.sampler, &found)?;
    let meta = export_meta(global, args, &found, &sel);
    if args.dry_run {
        print_dry_run(args, &meta);
        return Ok(ExitCode::SUCCESS);
    }
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "imc: warning: serving on {}, not loopback: anyone who reaches it sees process names and cgroups",
            args.listen
        );
    }
    let exporter: Shared = Arc::new(Mutex::new(Exporter::new(meta)));
    let mut sink = ServeSink {
        exporter: exporter.clone(),
        json: args.json.then(|| std::io::stdout().lock()),
        read_errors: 0,
    };
    let opts = LoopOptions {
        sampler: &args.sampler,
        interval_ms: args.interval_ms,
        duration: None,
        command: &[],
    };
    block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| {
                CliError::runtime(format!(
                    "cannot listen on {}: {e} (choose another --listen ADDR:PORT)",
                    args.listen
                ))
            })?;
        let bound = listener
            .local_addr()
            .map_err(|e| CliError::runtime(format!("listening socket: {e}")))?;
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/", get(index))
            .with_state(exporter);
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        eprintln!("imc: serving http://{bound}/metrics");
        let code = sample_loop(global, &opts, &found, sel, &mut sink).await;
        server.abort();
        code
    })
}

/// The loop's sink: every interval into the counters (and to stdout with `--json`).
struct ServeSink {
    exporter: Shared,
    json: Option<std::io::StdoutLock<'static>>,
    /// Failed counter reads seen since the last drain ended.
    read_errors: u64,
}

impl Sink for ServeSink {
    fn tick(&mut self, rec: &imc_common::TickRecord) -> std::io::Result<()> {
        let filled = (1u16 << rec.nr_slots.min(8)) - 1;
        self.read_errors += u64::from((u16::from(rec.failed_mask) & filled).count_ones());
        Ok(())
    }

    fn drained(&mut self, _records: usize, took: Duration) {
        let ex = lock(&self.exporter);
        ex.observe_drain(took);
        ex.add_read_errors(std::mem::take(&mut self.read_errors));
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        lock(&self.exporter).add_interval(r);
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
    let text = {
        let ex = lock(&ex);
        let text = ex.encode();
        ex.observe_scrape(start.elapsed());
        text
    };
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    if wants_openmetrics(accept) {
        ([(CONTENT_TYPE, OPENMETRICS_TYPE)], text)
    } else {
        ([(CONTENT_TYPE, CLASSIC_TYPE)], to_classic_text(&text))
    }
}

async fn index() -> &'static str {
    "imc: metrics at /metrics\n"
}

/// The tick source as `imc_info` names it. One place for the planning layer to replace.
pub fn tick_label(s: &SamplerArgs) -> String {
    let mut t = format!("cpu-clock:{}Hz", s.freq);
    if s.precise {
        t.push_str("+sched_switch");
    }
    t
}

/// Labels of the selection's traffic counters: the channel is the counter's PMU (found by its
/// perf type among the PMUs under --root, else perf's name for a generic type, else the PMU
/// part of the event string); the backend is the one that PMU belongs to, else the PMU.
fn export_meta(
    global: &GlobalArgs,
    args: &ServeArgs,
    found: &Discovery,
    sel: &Selection,
) -> ExportMeta {
    let pmus = crate::discovery::read_pmus(&global.root).unwrap_or_default();
    let channel = |p: &SlotPlan| {
        pmus.iter()
            .find(|m| m.pmu_type == p.attr.type_)
            .map(|m| m.name.clone())
            .or_else(|| type_name(p.attr.type_).map(str::to_string))
            .unwrap_or_else(|| p.spec.event.split('/').next().unwrap_or("").to_string())
    };
    let slots: Vec<Option<SlotInfo>> = sel
        .plans
        .iter()
        .map(|p| match p.spec.role {
            SlotRole::Traffic(direction) => Some(SlotInfo {
                event: p.spec.event.clone(),
                channel: channel(p),
                direction,
                bytes_per_count: p.spec.bytes_per_count,
            }),
            _ => None,
        })
        .collect();
    let first = slots.iter().flatten().next().map(|s| s.channel.as_str());
    let backend = BackendKind::parse(&sel.source)
        .or_else(|| {
            let src = found
                .sources
                .iter()
                .find(|s| s.pmus.iter().any(|p| Some(p.name.as_str()) == first));
            src.map(|s| s.backend)
        })
        .map_or_else(
            || first.unwrap_or("").to_string(),
            |b| b.as_str().to_string(),
        );
    ExportMeta {
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend,
        source: sel.source.clone(),
        tick: tick_label(&args.sampler),
        slots,
        max_processes: args.max_processes,
    }
}

fn print_dry_run(args: &ServeArgs, meta: &ExportMeta) {
    println!("listen: http://{}/metrics", args.listen);
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
        println!(
            "slot {slot}: {} (channel {}, {}, {unit}) -> {family}",
            s.event,
            s.channel,
            direction_label(s.direction)
        );
    }
    println!(
        "processes exported: the top {} by recent traffic",
        meta.max_processes
    );
}
