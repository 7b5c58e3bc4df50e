//! The command line of the README's "Commands". Each subcommand's arguments are one struct so that
//! the command modules take exactly what they need.
use crate::model::BackendKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where `imc serve` listens unless told: loopback only, on a port outside the 9100-9999
/// range of Prometheus exporters (all allocated) and of no well-known service.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10160";

/// Cgroups `imc serve` exports by default: a node's services and containers (Kubernetes allows
/// 110 pods a node), each with a read and a write series.
pub const DEFAULT_MAX_CGROUPS: usize = 100;

#[derive(Parser, Debug)]
#[command(
    name = "imc",
    version,
    about = "Per-process memory bandwidth from memory-controller counters"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Read sys/ and proc/ under DIR instead of the host's (a container's /host, a test tree).
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// The physical-memory device for the intel-client-mchbar backend.
    #[arg(long, global = true, value_name = "PATH", default_value = "/dev/mem")]
    pub devmem: PathBuf,
    /// More detail (repeat for debug output, including the eBPF program's log).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// What this machine offers: each backend, available or not and why.
    List(ListArgs),
    /// How event strings become perf_event_attr fields.
    Encode(EncodeArgs),
    /// System memory bandwidth per package (and channel).
    Stat(StatArgs),
    /// Live per-process memory bandwidth.
    Top(TopArgs),
    /// Continuous low-overhead recording, bounded in size.
    Record(RecordArgs),
    /// Attribution and bursts from a recording.
    Report(ReportArgs),
    /// The sampler as a service: Prometheus/OpenMetrics at /metrics.
    Serve(ServeArgs),
    /// Known workloads of imc's own, sampled like `imc top`, against the kernel's per-task truth.
    Validate(ValidateArgs),
    /// Shell completions for imc, written to standard output (for packagers).
    #[command(hide = true)]
    Completions(CompletionsArgs),
    /// The man page imc(1) in roff, written to standard output (for packagers).
    #[command(hide = true)]
    Manpage,
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// One JSON object (sources, PMUs, packages, nodes) instead of the text listing.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct EncodeArgs {
    /// Event strings: PMU/alias/, PMU/term=value,.../, a perf generic name, or libpfm4 syntax.
    #[arg(required = true, value_name = "EVENT")]
    pub events: Vec<String>,
    /// One JSON object per event (its perf_event_attr fields) instead of the text listing.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// Interval: milliseconds, or with units (100ms, 2s); 1 ms to a day.
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms, allow_negative_numbers = true)]
    pub interval_ms: u64,
    /// Stop after this long: seconds (fractions allowed), or with units (10s, 500ms, 2m).
    #[arg(long, value_name = "S", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Counters to read instead of the backend's default read/write events.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Show each memory channel (PMU instance) as well as the package.
    #[arg(long)]
    pub per_channel: bool,
    /// One JSON object per interval instead of the table.
    #[arg(long, conflicts_with = "separator")]
    pub json: bool,
    /// CSV output with this field separator.
    #[arg(short = 'x', value_name = "SEP")]
    pub separator: Option<String>,
    /// Which counters to read: auto (the first available memory-controller backend in
    /// `imc list` order) or a backend `imc list` names.
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = backend_names())]
    pub backend: BackendChoice,
    /// Print the plan (counters, readers, refusals) and exit, without privileges; with --json
    /// as one JSON object.
    #[arg(long)]
    pub dry_run: bool,
    /// Knights Landing/Mill: average memory latency in core cycles for these request types
    /// (libpfm4 umask names, e.g. DMND_DATA_RD:DMND_RFO; default DMND_DATA_RD), beside DDR
    /// and MCDRAM bandwidth.
    #[arg(long, value_name = "REQUEST-TYPES", num_args = 0..=1,
          default_missing_value = crate::counting::latency::DEFAULT_REQUEST_TYPES,
          conflicts_with_all = ["events", "backend"])]
    pub latency: Option<String>,
    /// Run this command and measure until it exits (exit with its status).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug, Clone)]
pub struct SamplerArgs {
    /// Sample on a timer of imc's own, HZ times a second on every CPU, for finer resolution than
    /// the kernel's tick (adds a timer interrupt per CPU per period). Default: the kernel's own
    /// tick and context switches, which add no interrupt.
    #[arg(long, value_name = "HZ", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub freq: Option<u32>,
    /// Print the plan (counters, readers, tick source, refusals) and exit, without privileges;
    /// with --json as one JSON object.
    #[arg(long)]
    pub dry_run: bool,
    /// Counters to read at each tick (default: the memory-controller read/write events).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Which counters to read: auto (the first available memory-controller backend in
    /// `imc list` order) or a backend `imc list` names.
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = backend_names())]
    pub backend: BackendChoice,
    /// A record at every context switch (sched_switch). The program otherwise sums each task's
    /// time and counts per CPU between switches and writes one record per task at each tick
    /// (its cost flat in the switch rate), on the kernel's tick or --freq's timer alike.
    #[arg(long)]
    pub precise: bool,
    /// How a package's traffic is divided among the tasks that ran: auto (each CPU's own
    /// memory traffic, counted by the core counters this CPU model has; CPU time where it has
    /// none, said in the plan), cpu-time, or per-CPU events (EVENT:read / EVENT:write weigh one
    /// direction). Repeatable.
    #[arg(long = "weight", value_name = "W")]
    pub weight: Vec<String>,
    /// Also charge the traffic to the call stacks it came from: the user stack (frame
    /// pointers) of each task where its slice is charged, at the kernel's tick and switches
    /// (no interrupt added). `report --folded/--flamegraph/--pprof` show them.
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: the kernel stack too.
    #[arg(long, requires = "stacks")]
    pub kernel_stacks: bool,
    /// With --stacks: sample on the weight counter's overflow every N events instead (perf's
    /// -c N), for phases shorter than a tick; adds an interrupt per N events on each CPU.
    #[arg(long, value_name = "N", requires = "stacks", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000))]
    pub stack_period: Option<u64>,
}

#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// Stop after this long: seconds (fractions allowed), or with units (10s, 500ms, 2m).
    #[arg(long, value_name = "S", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// One JSON object per interval instead of the full-screen view (default when piped).
    #[arg(long)]
    pub json: bool,
    /// Interval between updates: milliseconds, or with units (100ms, 2s).
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms, allow_negative_numbers = true)]
    pub interval_ms: u64,
    /// Rows of tasks to show (0: all).
    #[arg(
        short = 'n',
        long = "top",
        value_name = "N",
        default_value_t = 20,
        allow_negative_numbers = true
    )]
    pub top: usize,
    /// One row per thread (pid), process (tgid; `process` means the same), name (comm), cgroup
    /// (its v2 path), container (Docker, containerd, CRI-O or Podman id) or Kubernetes pod (UID);
    /// tasks in no container (pod) are one row. A group row shows its key, not a member's pid.
    #[arg(long, value_enum, default_value = "pid", conflicts_with = "ibs")]
    pub by: GroupBy,
    /// Only these processes (comma-separated pids, their threads included; a thread id names
    /// that thread), as perf's -p. Each must be running when top starts; one that exits
    /// later shows nothing.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// AMD: sample with IBS op instead and show, per process, how many sampled loads DRAM
    /// served, local or remote node (L3 misses only where the PMU has l3missonly).
    #[arg(long, conflicts_with_all = ["events", "dry_run"])]
    pub ibs: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// How long the workloads run and are sampled, in seconds (fractions allowed).
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = parse_seconds,
          allow_negative_numbers = true)]
    pub duration: f64,
    /// One JSON object (workloads, intervals, bytes, mbm, fidelity, bounds, pass).
    #[arg(long)]
    pub json: bool,
    /// Interval in milliseconds: each interval's figures are compared on their own.
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms, allow_negative_numbers = true)]
    pub interval_ms: u64,
    /// Keep the measured fidelity of the weights (where the memory controller is real) in
    /// IMC_FIDELITY_FILE, else /var/lib/imc/fidelity.json, where attribution reads it.
    #[arg(long, conflicts_with = "dry_run")]
    pub save: bool,
    /// Internal: run one workload (imc re-executes itself for each).
    #[arg(long, hide = true, value_name = "KIND")]
    pub workload: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// Output file. It is created when the run starts, never through a symlink; an existing
    /// file is an error unless --force.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        required_unless_present_any = ["dry_run", "stray"]
    )]
    pub output: Option<PathBuf>,
    /// A file name without -o (`imc record x.imc`): refused with the form to use.
    #[arg(value_name = "FILE", hide = true)]
    pub stray: Option<PathBuf>,
    /// Replace an existing FILE (a symlink there is removed, not followed).
    #[arg(long)]
    pub force: bool,
    /// With --dry-run: the plan as one JSON object.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// Stop after this long: seconds (fractions allowed) or with units (10s, 2m); default: until
    /// -- CMD exits, or Ctrl-C.
    #[arg(long, value_name = "S", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Largest size of the recording; older data rotates out beyond it (e.g. 100M, 2G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub max_size: Option<u64>,
    /// Aggregation interval: milliseconds, or with units (100ms, 1s).
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 100,
          value_parser = parse_interval_ms, allow_negative_numbers = true)]
    pub interval_ms: u64,
    /// Only these processes' task rows (comma-separated pids, their threads included; a thread
    /// id names that thread), as top -p and report -p: package totals stay the whole machine's.
    /// Each must be running when the recording starts.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// Run this command and record until it exits. Unlike perf record, which counts the command
    /// alone unless -a, imc records the whole machine (the memory controller serves everyone)
    /// and marks the command's process tree in the recording, by a cgroup of its own where one
    /// can be made (exact), else by /proc parentage; `imc report` shows the command first.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// Address and port of the HTTP server (/metrics). Loopback by default; any other
    /// address exposes per-process data to the network. Also spelt --web.listen-address, as
    /// node_exporter does; `:PORT` alone means every IPv4 address (0.0.0.0:PORT), as there.
    #[arg(long, visible_alias = "web.listen-address", value_name = "ADDR:PORT",
          default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Processes exported individually: the busiest N by recent traffic (their series are
    /// removed when they drop out, so the series count stays bounded).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub max_processes: usize,
    /// Cgroups exported individually: the busiest N by recent traffic (a cgroup that drops
    /// out loses its series, so the series count stays bounded however many come and go).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CGROUPS)]
    pub max_cgroups: usize,
    /// TLS and basic-auth users, in the web configuration format of Prometheus exporters
    /// (exporter-toolkit): tls_server_config {cert_file, key_file, client_auth_type,
    /// client_ca_file} and basic_auth_users {user: bcrypt hash}.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// How often the counters are brought up to date: milliseconds, or with units (500ms, 5s).
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms)]
    pub interval_ms: u64,
    /// Also write every interval to standard output as one JSON line (the object of
    /// `imc top --json`), e.g. to check the exporter against.
    #[arg(long)]
    pub json: bool,
    /// Connections at once (default: 512, fewer under a low open-file limit). Hidden: for
    /// tests and benchmarks that fill every slot.
    #[arg(long = "web.max-connections", value_name = "N", hide = true,
          value_parser = clap::value_parser!(u16).range(4..))]
    pub max_connections: Option<u16>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub use crate::model::GroupBy;

/// `--by`'s values, as clap lists them (the type itself is the model's). Plain names, no help
/// text: values with help text would switch clap's whole `--help` to the long layout, which the
/// usage tests read line by line.
impl ValueEnum for GroupBy {
    fn value_variants<'a>() -> &'a [Self] {
        &GroupBy::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let v = clap::builder::PossibleValue::new(self.name());
        // `process` is the tgid grouping, as ps and perf call a thread group.
        Some(if *self == GroupBy::Tgid {
            v.alias("process")
        } else {
            v
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A recording made by `imc record -o FILE`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// One JSON object instead of the text report: the run's `packages`, `tasks` (the busiest
    /// rows, grouped --by), `others` (the rest summed, when there are more), `unattributed_bytes`,
    /// `lost_samples` and `bursts`; with a recorded command, `command` (see --command); where
    /// the recording has loaded latency or utilisation, `package_latency` (per interval) and
    /// `latency_summary` (per package, mean and max), else null.
    #[arg(long)]
    pub json: bool,
    /// What to add the traffic up by: process (tgid; `process` means the same), thread (pid),
    /// command name, cgroup (its v2 path), container (Docker, containerd, CRI-O or Podman id) or
    /// Kubernetes pod (UID). A group row shows its key, not a member's pid or name.
    #[arg(long, value_enum, default_value = "tgid")]
    pub by: GroupBy,
    /// Only these processes (comma-separated pids, their threads included; a thread id names
    /// that thread), as perf's -p. A pid that has exited shows nothing.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// List the bursts (always included in --json).
    #[arg(long)]
    pub bursts: bool,
    /// Per burst, its culprits (bytes) and its victims: per task, the stall time the burst
    /// added over the task's own baseline outside bursts, (stall share in the burst − stall
    /// share outside bursts) × its on-CPU seconds in the burst (its cycles there, in seconds),
    /// most first; and per task over the run: stall seconds in bursts, outside, added. Needs a
    /// recording with stall counters (JSON `victims` always, null without them).
    #[arg(long)]
    pub victims: bool,
    /// Show the recorded command's process tree first (`record -- CMD`): its rows and its share
    /// of the machine's traffic, over the run, per burst and at its busiest interval (JSON
    /// `command`). The default when the recording has a command; an error when it has none.
    #[arg(long, conflicts_with = "no_command")]
    pub command: bool,
    /// The machine alone, even when the recording has a command.
    #[arg(long)]
    pub no_command: bool,
    /// Rate above which an interval is a burst, in the recording's unit: bytes/s (K, M, G: powers
    /// of 1024) for memory-controller counters, counts/s (K, M, G: powers of 1000) for a
    /// stand-in such as page faults (default: halfway between the run's median and its 99th
    /// percentile; none in a flat run).
    #[arg(long, value_name = "RATE", value_parser = parse_rate, allow_hyphen_values = true)]
    pub burst_threshold: Option<Rate>,
    /// Also write a Perfetto trace (open it in ui.perfetto.dev): package bandwidth, the top
    /// processes' bandwidth and the bursts on a timeline; with stall counters, each burst's
    /// victims beside its culprits and the top victims' stall share.
    #[arg(long, value_name = "OUT")]
    pub perfetto: Option<PathBuf>,
    /// Also draw bandwidth over time, stacked by the top processes, as an SVG file.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Traffic by call stack (a recording made with --stacks), as folded lines
    /// (`comm;root;…;leaf COUNT`) that flamegraph.pl and inferno read.
    #[arg(long, value_name = "OUT")]
    pub folded: Option<PathBuf>,
    /// Traffic by call stack as a flame graph (SVG).
    #[arg(long, value_name = "OUT.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Traffic by call stack as a gzipped pprof profile (read bytes and write bytes, or the
    /// stand-in's count), for pprof, Pyroscope, Parca and Perfetto.
    #[arg(long, value_name = "OUT")]
    pub pprof: Option<PathBuf>,
    /// Replace an existing --perfetto, --plot, --folded, --flamegraph or --pprof file (a
    /// symlink there is replaced, not followed).
    #[arg(long)]
    pub force: bool,
}

/// A rate as given on the command line: a number and the power of its K/M/G/T suffix, whose
/// base depends on the unit it turns out to be in (1024 for bytes, 1000 for counts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub number: f64,
    pub power: u8,
}

impl Rate {
    /// Per second, in bytes (`bytes`: the suffix counts powers of 1024) or counts (1000).
    pub fn per_s(self, bytes: bool) -> f64 {
        let base: f64 = if bytes { 1024.0 } else { 1000.0 };
        self.number * base.powi(i32::from(self.power))
    }
}

/// `--backend`: auto (the first available memory-controller backend in `imc list` order) or
/// the one backend named as `imc list` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    #[default]
    Auto,
    One(BackendKind),
}

impl BackendChoice {
    /// The command line's word for it: `auto` or the backend's name.
    pub fn parse(name: &str) -> Option<BackendChoice> {
        match name {
            "auto" => Some(BackendChoice::Auto),
            _ => BackendKind::parse(name).map(BackendChoice::One),
        }
    }

    /// The backend asked for; None for auto.
    pub fn kind(self) -> Option<BackendKind> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::One(k) => Some(k),
        }
    }
}

/// `--backend` values: auto or a backend name (each listed in --help and the completions).
fn backend_names() -> impl clap::builder::TypedValueParser<Value = BackendChoice> {
    use clap::builder::TypedValueParser;
    let names = BackendKind::ALL.map(|b| b.as_str());
    clap::builder::PossibleValuesParser::new(std::iter::once("auto").chain(names)).try_map(|s| {
        BackendChoice::parse(&s).ok_or_else(|| format!("--backend '{s}': not a backend"))
    })
}

/// Longest interval: one day. Longer ones are typing mistakes, and every interval becomes a
/// `Duration` added to an `Instant` and nanoseconds in a `u64`, which must not overflow.
pub const MAX_INTERVAL_MS: u64 = 24 * 3600 * 1000;

/// Longest `--duration`: one year (365 days). Beyond that `Instant + Duration` can overflow
/// (`Duration::from_secs_f64` panics from about 1.8e19 s), and no run is meant to last longer.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A duration with units (`100ms`, `1s`, `2m`, `1h 30m`), read by humantime: the units of
/// systemd and Prometheus' exporters. `None` when the text is no such duration.
fn with_units(s: &str) -> Option<std::time::Duration> {
    let t = s.trim();
    // A bare number is the option's own unit, said by the caller; humantime wants a unit.
    if t.is_empty() || t.starts_with(|c: char| !c.is_ascii_digit()) {
        return None;
    }
    humantime::parse_duration(t).ok()
}

/// An interval in whole milliseconds, from 1 to [`MAX_INTERVAL_MS`]: a bare number is
/// milliseconds, or a duration with units (`100ms`, `2s`).
pub fn parse_interval_ms(s: &str) -> Result<u64, String> {
    let ms = match s.trim().parse::<u64>() {
        Ok(v) => Some(v),
        Err(_) => with_units(s)
            .filter(|d| d.subsec_nanos() % 1_000_000 == 0)
            .and_then(|d| u64::try_from(d.as_millis()).ok()),
    };
    match ms {
        Some(v) if (1..=MAX_INTERVAL_MS).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not an interval: give whole milliseconds, 1 or more (100), or a duration with units (100ms, 2s); at most a day"
        )),
    }
}

/// A socket address to listen on: `127.0.0.1:10160`, `[::1]:10160`, `0.0.0.0:10160`, or
/// node_exporter's `:10160` (every IPv4 address: imc never listens beyond loopback unless told,
/// and `:PORT` is telling it; a warning follows without TLS).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    if let Some(port) = t.strip_prefix(':')
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    t.parse().map_err(|_| {
        format!("'{s}' is not ADDR:PORT (e.g. 127.0.0.1:10160, [::1]:10160 or 0.0.0.0:10160)")
    })
}

/// Seconds up to [`MAX_SECONDS`]: a bare positive decimal is seconds (`10`, `0.5`), or a
/// duration with units (`10s`, `500ms`, `2m`, `1h`).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let secs = match s.trim().parse::<f64>() {
        Ok(v) => Some(v),
        Err(_) => with_units(s).map(|d| d.as_secs_f64()),
    };
    match secs {
        Some(v) if v.is_finite() && v > 0.0 && v <= MAX_SECONDS => Ok(v),
        _ => Err(format!(
            "'{s}' is not a duration: give a positive number of seconds (10, 0.5) or a duration with units (10s, 500ms, 2m); at most a year"
        )),
    }
}

/// A positive rate with an optional K/M/G/T suffix: `300K`, `1.5G`, `250000`.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let t = s.trim();
    let (num, power) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => match "KMGT".find(c.to_ascii_uppercase()) {
            Some(p) => (&t[..i], p as u8 + 1),
            None => {
                return Err(format!(
                    "'{s}': unknown rate suffix '{c}' (use K, M, G or T)"
                ));
            }
        },
        _ => (t, 0),
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(Rate { number: n, power }),
        _ => Err(format!(
            "'{s}' is not a positive rate per second (e.g. 300K)"
        )),
    }
}

/// The `Duration` of a `--duration` value, checked again here so that no caller can panic on
/// a value that did not come through [`parse_seconds`].
pub fn seconds_duration(s: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(s.clamp(0.0, MAX_SECONDS))
        .unwrap_or(std::time::Duration::ZERO)
}

/// A byte count with an optional K/M/G/T suffix (powers of 1024): `512M`, `2G`, `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "'{s}': unknown size suffix '{c}' (use K, M, G or T)"
                    ));
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive size (e.g. 512M)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("0").is_err());
        assert!(parse_size("5X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn rates_take_their_base_from_the_unit() {
        let r = parse_rate("300K").unwrap();
        assert_eq!(r.per_s(true), 300.0 * 1024.0);
        assert_eq!(r.per_s(false), 300_000.0);
        assert_eq!(parse_rate("1.5m").unwrap().per_s(false), 1_500_000.0);
        assert_eq!(parse_rate("42").unwrap().per_s(true), 42.0);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-5K").is_err());
        assert!(parse_rate("5X").is_err());
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval_ms("1"), Ok(1));
        assert!(parse_interval_ms("0").is_err());
        assert!(parse_interval_ms("1.5").is_err());
        assert_eq!(parse_interval_ms("86400000"), Ok(MAX_INTERVAL_MS));
        assert!(parse_interval_ms("86400001").is_err());
    }

    #[test]
    fn durations_take_units_and_bare_numbers_keep_their_unit() {
        assert_eq!(parse_seconds("10s"), Ok(10.0));
        assert_eq!(parse_seconds("500ms"), Ok(0.5));
        assert_eq!(parse_seconds("2m"), Ok(120.0));
        assert_eq!(parse_seconds("1h 30m"), Ok(5400.0));
        assert_eq!(parse_seconds("10"), Ok(10.0));
        assert_eq!(parse_seconds("365days"), Ok(MAX_SECONDS));
        assert!(parse_seconds("366d").is_err());
        assert!(parse_seconds("0s").is_err());
        assert!(parse_seconds("10parsecs").is_err());
        assert!(parse_seconds("s").is_err());
        assert_eq!(parse_interval_ms("100ms"), Ok(100));
        assert_eq!(parse_interval_ms("2s"), Ok(2000));
        assert_eq!(parse_interval_ms("100"), Ok(100));
        assert_eq!(parse_interval_ms("1d"), Ok(MAX_INTERVAL_MS));
        assert!(parse_interval_ms("1d 1ms").is_err());
        assert!(parse_interval_ms("500us").is_err());
        assert!(parse_interval_ms("1500us").is_err());
        assert!(parse_interval_ms("0ms").is_err());
        for bad in ["1e99", "10x", "-1s"] {
            let e = parse_seconds(bad).unwrap_err();
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("nan").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        // Bounded before Duration::from_secs_f64, which panics on values this large.
        assert!(parse_seconds("1e99").is_err());
        assert!(parse_seconds("1e19").is_err());
        assert!(parse_seconds("31536001").is_err());
        assert_eq!(parse_seconds("31536000"), Ok(MAX_SECONDS));
        assert_eq!(seconds_duration(f64::NAN), std::time::Duration::ZERO);
        assert_eq!(seconds_duration(1e99).as_secs(), MAX_SECONDS as u64);
    }

    #[test]
    fn absurd_values_are_one_line_errors_not_panics() {
        for args in [
            &["imc", "top", "--duration", "1e99"][..],
            &["imc", "record", "-o", "x", "--duration", "1e19"],
            &["imc", "stat", "--duration", "1e300"],
            &["imc", "stat", "-I", "18446744073709551615"],
            &["imc", "record", "-o", "x", "-I", "86400001"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{args:?}"
            );
        }
    }

    #[test]
    fn serve_defaults_to_loopback_and_twenty_processes() {
        let cli = Cli::try_parse_from(["imc", "serve", "-e", "page-faults"]).unwrap();
        match cli.command {
            Command::Serve(s) => {
                assert!(s.listen.ip().is_loopback());
                assert_eq!(s.listen.port(), 10160);
                assert_eq!(s.max_processes, 20);
                assert_eq!(s.max_cgroups, DEFAULT_MAX_CGROUPS);
                assert_eq!(s.web_config_file, None);
                assert_eq!(s.sampler.events, ["page-faults"]);
            }
            _ => panic!("parsed as another command"),
        }
        assert!(Cli::try_parse_from(["imc", "serve", "--listen", "localhost"]).is_err());
    }

    #[test]
    fn node_exporters_listen_flag_and_port_alone_are_accepted() {
        let listen = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Serve(s)) => Some(s.listen),
            _ => None,
        };
        assert_eq!(
            listen(&["imc", "serve", "--web.listen-address", ":10160"]),
            Some("0.0.0.0:10160".parse().unwrap())
        );
        assert_eq!(
            listen(&["imc", "serve", "--listen", "[::1]:9"]),
            Some("[::1]:9".parse().unwrap())
        );
        assert_eq!(listen(&["imc", "serve", "--listen", ":"]), None);
        assert_eq!(listen(&["imc", "serve", "--listen", ":99999"]), None);
    }

    #[test]
    fn every_option_and_argument_has_help_text() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                if arg.get_help().is_none() && arg.get_id() != "help" {
                    missing.push(format!("imc {} {}", sub.get_name(), arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn freq_range_is_enforced() {
        let bad = Cli::try_parse_from(["imc", "top", "--freq", "0"]);
        assert!(bad.is_err());
        let ok = Cli::try_parse_from(["imc", "top", "--freq", "10000"]).unwrap();
        match ok.command {
            Command::Top(t) => assert_eq!(t.sampler.freq, Some(10000)),
            _ => panic!("parsed as another command"),
        }
    }
}
