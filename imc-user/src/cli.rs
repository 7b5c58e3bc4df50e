//! The command line of the contract in shared/design.md. Each subcommand's arguments are one
//! struct so that the command modules take exactly what they need.
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

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
}

#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct EncodeArgs {
    /// Event strings: PMU/alias/, PMU/term=value,.../, a perf generic name, or libpfm4 syntax.
    #[arg(required = true, value_name = "EVENT")]
    pub events: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// Interval in milliseconds (1 ms and up).
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms)]
    pub interval_ms: u64,
    /// Stop after S seconds (fractions allowed).
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Counters to read instead of the backend's default read/write events.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Show each memory channel (PMU instance) as well as the package.
    #[arg(long)]
    pub per_channel: bool,
    #[arg(long, conflicts_with = "separator")]
    pub json: bool,
    /// CSV output with this field separator.
    #[arg(short = 'x', value_name = "SEP")]
    pub separator: Option<String>,
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub backend: String,
    /// Run this command and measure until it exits (exit with its status).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct SamplerArgs {
    /// Timer ticks per second on every CPU.
    #[arg(long, value_name = "HZ", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub freq: u32,
    /// Counters to read at each tick (default: the memory-controller read/write events).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub backend: String,
    /// Also read the counters at every context switch (sched_switch), so shares do not depend
    /// on where the ticks landed.
    #[arg(long)]
    pub precise: bool,
}

#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// Stop after S seconds.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// One JSON object per interval instead of the full-screen view (default when piped).
    #[arg(long)]
    pub json: bool,
    /// Interval between updates in milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 1000,
          value_parser = parse_interval_ms)]
    pub interval_ms: u64,
    /// Rows of tasks to show (0: all).
    #[arg(short = 'n', long = "top", value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// One row per thread (pid), process (tgid), name (comm), cgroup, container or pod.
    #[arg(long, value_enum, default_value = "pid")]
    pub by: GroupBy,
}

#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    #[command(flatten)]
    pub sampler: SamplerArgs,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Largest size of the recording; older data rotates out beyond it (e.g. 100M, 2G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Aggregation interval in milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 100,
          value_parser = parse_interval_ms)]
    pub interval_ms: u64,
    /// Run this command and record until it exits.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Pid,
    Tgid,
    Comm,
    Cgroup,
    /// Docker, containerd, CRI-O or Podman container id (tasks in none: one row).
    Container,
    /// Kubernetes pod UID (tasks in none: one row).
    Pod,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_enum, default_value = "tgid")]
    pub by: GroupBy,
    /// List the bursts (always included in --json).
    #[arg(long)]
    pub bursts: bool,
    /// Bandwidth above which an interval is a burst (default: halfway between the run's median
    /// and its 99th percentile; none in a flat run).
    #[arg(long, value_name = "BYTES/S", value_parser = parse_size)]
    pub burst_threshold: Option<u64>,
    /// Also write a Perfetto trace (open it in ui.perfetto.dev): package bandwidth, the top
    /// processes' bandwidth and the bursts on a timeline.
    #[arg(long, value_name = "OUT")]
    pub perfetto: Option<PathBuf>,
    /// Also draw bandwidth over time, stacked by the top processes, as an SVG file.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
}

/// An interval in whole milliseconds, at least 1.
pub fn parse_interval_ms(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!(
            "'{s}' is not an interval: give whole milliseconds, 1 or more"
        )),
    }
}

/// Seconds as a positive decimal: `10`, `0.5`.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
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
    fn intervals() {
        assert_eq!(parse_interval_ms("1"), Ok(1));
        assert!(parse_interval_ms("0").is_err());
        assert!(parse_interval_ms("1.5").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("nan").is_err());
        assert!(parse_seconds("-1").is_err());
    }

    #[test]
    fn freq_range_is_enforced() {
        let bad = Cli::try_parse_from(["imc", "top", "--freq", "0"]);
        assert!(bad.is_err());
        let ok = Cli::try_parse_from(["imc", "top", "--freq", "10000"]).unwrap();
        match ok.command {
            Command::Top(t) => assert_eq!(t.sampler.freq, 10000),
            _ => panic!("parsed as another command"),
        }
    }
}
