//! Output of `imc stat`: a human table, `-x SEP` CSV, or `--json` lines, one block per interval.
//!
//! At `-I 1` this runs a thousand times a second, so each interval is formatted into a reused
//! byte buffer (no allocation once warm), JSON keys are escaped once up front, and the whole
//! interval reaches the writer in one `write` + `flush`.
use super::json::json_string;
use crate::counting::Memory;
use crate::counting::stat_loop::{
    Bytes, IntervalReport, Layout, PackageBytes, PackageLayout, StatSink,
};
use crate::output::latency::{LatencyCols, QueueCols};
use std::io::{self, Write};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Csv(String),
    Json,
}

pub struct StatWriter<W: Write> {
    out: W,
    format: Format,
    per_channel: bool,
    buf: Vec<u8>,
    /// JSON-escaped `values` keys and PMU names, computed once.
    json_keys: Vec<String>,
    json_channels: Vec<Vec<String>>,
    json_source: String,
    /// Human row labels per package: (package, its memory kinds, its channels).
    labels: Vec<(String, Vec<String>, Vec<String>)>,
    /// Reference for the human/CSV time column (seconds since the first read).
    t0_ns: Option<u64>,
    header_done: bool,
    /// `stat --latency`: the two counts whose ratio is the average latency.
    latency: Option<LatencyCols>,
    /// `stat --latency` off KNL: the queue latency per package and channel.
    queues: Option<QueueCols>,
}

impl<W: Write> StatSink for StatWriter<W> {
    fn interval(&mut self, layout: &Layout, report: &IntervalReport) -> io::Result<()> {
        self.write_interval(layout, report)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// One package's JSON object: its bytes, its peak and utilisation, its channels (`pmus`: each
/// channel's PMU as a JSON string) and, where it has several, its memory kinds.
fn json_package(
    b: &mut Vec<u8>,
    layout: &Layout,
    r: &IntervalReport,
    p: &PackageLayout,
    pb: &PackageBytes,
    pmus: &[String],
    row: usize,
) {
    let _ = write!(b, "{{\"id\":{},", p.id);
    bytes_json(b, r, &pb.bytes);
    // Extra fields: the theoretical peak and the share of it used, null when unknown.
    if let Some(peak) = p.peak_bytes_per_s {
        b.extend_from_slice(b",\"peak_bytes_per_s\":");
        json_num(b, peak.round());
        b.extend_from_slice(b",\"utilisation\":");
        json_num(b, r.rate(peak_bytes(p, pb)) / peak);
    } else {
        b.extend_from_slice(b",\"utilisation\":null");
    }
    b.extend_from_slice(b",\"channels\":[");
    for (ci, cb) in pb.channels.iter().enumerate() {
        if ci > 0 {
            b.push(b',');
        }
        let _ = write!(b, "{{\"pmu\":{},", pmus[ci]);
        b.extend_from_slice(b"\"read_bytes\":");
        json_num(b, cb.read);
        b.extend_from_slice(b",\"write_bytes\":");
        json_num(b, cb.write);
        if cb.total_only != 0.0 {
            b.extend_from_slice(b",\"total_bytes\":");
            json_num(b, cb.total());
        }
        if p.memories.len() > 1 {
            let _ = write!(b, ",\"memory\":\"{}\"", p.channels[ci].0.as_str());
        }
        if layout.has_sub_channels() {
            // GNR: the channel's schedulers, whose bytes sum to the channel's.
            b.extend_from_slice(b",\"sub_channels\":[");
            for (si, (s, sb)) in layout.sub_channel_bytes(r, row, ci).iter().enumerate() {
                if si > 0 {
                    b.push(b',');
                }
                let _ = write!(b, "{{\"sub_channel\":{s},\"read_bytes\":");
                json_num(b, sb.read);
                b.extend_from_slice(b",\"write_bytes\":");
                json_num(b, sb.write);
                b.push(b'}');
            }
            b.push(b']');
        }
        b.push(b'}');
    }
    b.push(b']');
    if p.memories.len() > 1 {
        // KNL: DDR and MCDRAM apart; DRAM and CXL memory apart; as well as the package total.
        b.extend_from_slice(b",\"memory\":[");
        for (mi, (m, mb)) in p.memories.iter().zip(&pb.memories).enumerate() {
            if mi > 0 {
                b.push(b',');
            }
            let _ = write!(b, "{{\"kind\":\"{}\",", m.as_str());
            bytes_json(b, r, mb);
            b.push(b'}');
        }
        b.push(b']');
    }
    b.push(b'}');
}

/// The bytes a package's SMBIOS peak is measured against: its DRAM's where the package also has
/// CXL memory (SMBIOS describes the DIMMs, not the expander), else all of them.
fn peak_bytes(p: &PackageLayout, pb: &PackageBytes) -> f64 {
    match p.memories.iter().position(|m| *m == Memory::Dram) {
        Some(i) if p.memories.contains(&Memory::Cxl) => pb.memories[i].total(),
        _ => pb.bytes.total(),
    }
}

/// The peak a row's utilisation is shown against: `memory`'s row (None: the package row) has it
/// where its bytes are the ones [`peak_bytes`] takes; a CXL channel never has it.
fn row_peak(p: &PackageLayout, memory: Option<Memory>, peak: Option<f64>) -> Option<f64> {
    let cxl = p.memories.contains(&Memory::Cxl);
    let measured = match memory {
        None => !cxl,
        Some(m) => cxl && m == Memory::Dram,
    };
    peak.filter(|_| measured)
}

/// `"key":value` pairs, comma-separated (the keys already JSON strings).
fn json_fields<'a>(b: &mut Vec<u8>, fields: impl Iterator<Item = (&'a String, &'a f64)>) {
    for (n, (k, v)) in fields.enumerate() {
        if n > 0 {
            b.push(b',');
        }
        b.extend_from_slice(k.as_bytes());
        b.push(b':');
        json_num(b, *v);
    }
}

/// A JSON number: finite values as-is (integers without a fraction), anything else as 0.
fn json_num(buf: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        buf.extend_from_slice(b"0");
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        let _ = write!(buf, "{}", v as i64);
    } else {
        let _ = write!(buf, "{v}");
    }
}

/// Digits with thousands separators, as perf prints counts.
fn grouped(buf: &mut Vec<u8>, v: f64, width: usize) {
    let mut digits = [0u8; 40];
    let mut n = if v.is_finite() && v > 0.0 {
        v.round().min(1e30) as u128
    } else {
        0
    };
    let mut len = 0;
    let mut count = 0;
    loop {
        if count > 0 && count % 3 == 0 {
            digits[len] = b',';
            len += 1;
        }
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        count += 1;
        n /= 10;
        if n == 0 || len >= digits.len() - 1 {
            break;
        }
    }
    for _ in len..width {
        buf.push(b' ');
    }
    for i in (0..len).rev() {
        buf.push(digits[i]);
    }
}

impl<W: Write> StatWriter<W> {
    pub fn new(out: W, format: Format, per_channel: bool, layout: &Layout) -> Self {
        StatWriter {
            out,
            format,
            per_channel,
            buf: Vec::with_capacity(4096),
            json_keys: layout.value_keys.iter().map(|k| json_string(k)).collect(),
            json_channels: layout
                .packages
                .iter()
                .map(|p| p.channels.iter().map(|(_, pmu)| json_string(pmu)).collect())
                .collect(),
            json_source: json_string(&layout.source),
            labels: layout
                .packages
                .iter()
                .map(|p| {
                    (
                        p.id.to_string(),
                        p.memories
                            .iter()
                            .map(|m| format!("{} {}", p.id, m.as_str()))
                            .collect(),
                        p.channels
                            .iter()
                            .map(|(_, pmu)| format!("  {pmu}"))
                            .collect(),
                    )
                })
                .collect(),
            t0_ns: None,
            header_done: false,
            latency: None,
            queues: None,
        }
    }

    /// Adds the queue-latency figures (`stat --latency` off KNL).
    pub fn set_queues(&mut self, layout: Option<crate::counting::latency::QueueLayout>) {
        let per_channel = self.per_channel;
        self.queues = layout.map(|layout| QueueCols {
            layout,
            per_channel,
        });
    }

    /// Adds the average-latency column (`stat --latency`).
    pub fn set_latency(&mut self, cols: Option<LatencyCols>) {
        self.latency = cols;
    }

    /// Writes one interval and flushes it.
    pub fn interval(&mut self, layout: &Layout, r: &IntervalReport) -> io::Result<()> {
        self.write_interval(layout, r)?;
        self.out.flush()
    }

    /// Writes one interval into the (buffered) output without flushing.
    pub fn write_interval(&mut self, layout: &Layout, r: &IntervalReport) -> io::Result<()> {
        self.buf.clear();
        let t0 = *self.t0_ns.get_or_insert(r.t_start_ns);
        // Take the separator out for the call so formatting borrows nothing twice.
        match std::mem::replace(&mut self.format, Format::Json) {
            Format::Json => self.json(layout, r),
            Format::Csv(sep) => {
                self.csv(layout, r, t0, &sep);
                self.format = Format::Csv(sep);
            }
            Format::Human => {
                self.human(layout, r, t0);
                self.format = Format::Human;
            }
        }
        self.out.write_all(&self.buf)
    }

    /// Consumes the writer, returning the underlying output.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn json(&mut self, layout: &Layout, r: &IntervalReport) {
        let b = &mut self.buf;
        let _ = write!(
            b,
            "{{\"t_start_ns\":{},\"t_end_ns\":{},\"source\":{},\"packages\":[",
            r.t_start_ns, r.t_end_ns, self.json_source
        );
        for (pi, (p, pb)) in layout.packages.iter().zip(&r.packages).enumerate() {
            if pi > 0 {
                b.push(b',');
            }
            json_package(b, layout, r, p, pb, &self.json_channels[pi], pi);
        }
        b.push(b']');
        // Utilisation is a package's bytes over its peak: with no package counted (a
        // stand-in) there is none, said as null like an unknown peak, never left out.
        if layout.packages.is_empty() {
            b.extend_from_slice(b",\"utilisation\":null");
        }
        b.extend_from_slice(b",\"values\":{");
        json_fields(b, self.json_keys.iter().zip(&r.values));
        b.push(b'}');
        if let Some(l) = &self.latency {
            l.json(b, r);
        }
        if let Some(q) = &self.queues {
            q.json(b, r);
        }
        if r.multiplexed {
            // Extra field: the fraction of the interval each multiplexed counter ran.
            b.extend_from_slice(b",\"multiplexed\":{");
            let ran = self.json_keys.iter().zip(&r.value_fraction);
            json_fields(b, ran.filter(|(_, f)| **f < 1.0));
            b.push(b'}');
        }
        if !r.missing.is_empty() {
            b.extend_from_slice(b",\"missing\":[");
            for (n, &i) in r.missing.iter().enumerate() {
                if n > 0 {
                    b.push(b',');
                }
                let d = layout.describe.get(i).map_or("", |s| s.as_str());
                b.extend_from_slice(json_string(d).as_bytes());
            }
            b.push(b']');
        }
        b.extend_from_slice(b"}\n");
    }

    fn csv(&mut self, layout: &Layout, r: &IntervalReport, t0: u64, sep: &str) {
        let b = &mut self.buf;
        let time = r.t_end_ns.saturating_sub(t0) as f64 / 1e9;
        let el = r.elapsed_ns() as f64 / 1e9;
        if !self.header_done {
            self.header_done = true;
            let cols = [
                "time_s",
                "elapsed_s",
                "kind",
                "name",
                "read_bytes",
                "write_bytes",
                "read_bytes_per_s",
                "write_bytes_per_s",
                "total_bytes_per_s",
                "count",
            ];
            // One table: package and channel rows leave `count` empty, event rows the bytes.
            let _ = writeln!(b, "# {}", cols.join(sep));
        }
        for (row, (p, pb)) in layout.packages.iter().zip(&r.packages).enumerate() {
            let rows = std::iter::once((String::new(), &pb.bytes)).chain(if p.memories.len() > 1 {
                p.memories
                    .iter()
                    .zip(&pb.memories)
                    .map(|(m, mb)| (format!(":{}", m.as_str()), mb))
                    .collect::<Vec<_>>()
            } else {
                Vec::new()
            });
            for (suffix, bytes) in rows {
                let _ = write!(
                    b,
                    "{time:.9}{sep}{el:.9}{sep}package{sep}{}{suffix}{sep}",
                    p.id
                );
                csv_bytes(b, r, bytes, sep);
            }
            if self.per_channel {
                for (ci, ((_, pmu), cb)) in p.channels.iter().zip(&pb.channels).enumerate() {
                    let _ = write!(
                        b,
                        "{time:.9}{sep}{el:.9}{sep}channel{sep}{}:{pmu}{sep}",
                        p.id
                    );
                    csv_bytes(b, r, cb, sep);
                    for (s, sb) in layout.sub_channel_bytes(r, row, ci) {
                        let _ = write!(
                            b,
                            "{time:.9}{sep}{el:.9}{sep}sub_channel{sep}{}:{pmu}:{s}{sep}",
                            p.id
                        );
                        csv_bytes(b, r, &sb, sep);
                    }
                }
            }
        }
        if layout.packages.is_empty() || layout.value_keys.iter().any(|k| !is_default(k)) {
            for (k, v) in layout.value_keys.iter().zip(&r.values) {
                let _ = write!(b, "{time:.9}{sep}{el:.9}{sep}event{sep}{k}{sep}");
                for _ in 0..5 {
                    b.extend_from_slice(sep.as_bytes());
                }
                json_num(b, *v);
                b.push(b'\n');
            }
        }
        if let Some(l) = &self.latency {
            l.csv(b, r, time, el, sep);
        }
        if let Some(q) = &self.queues {
            q.csv(b, r, time, el, sep);
        }
        not_counted_note(b, layout, r);
    }

    fn human(&mut self, layout: &Layout, r: &IntervalReport, t0: u64) {
        let b = &mut self.buf;
        let time = r.t_end_ns.saturating_sub(t0) as f64 / 1e9;
        let ms = r.elapsed_ns() as f64 / 1e6;
        let peak = layout.packages.iter().any(|p| p.peak_bytes_per_s.is_some());
        if !self.header_done {
            self.header_done = true;
            if !layout.packages.is_empty() {
                let _ = write!(
                    b,
                    "#       time {:>9} {:<16} {:>12} {:>12} {:>12}",
                    "ms", "package", "read MB/s", "write MB/s", "total MB/s"
                );
                if peak {
                    let _ = write!(b, " {:>6}", "util");
                }
                b.push(b'\n');
                if let Some(why) = &layout.peak_unknown {
                    let _ = writeln!(b, "# utilisation unknown: {why}");
                }
            } else {
                let _ = writeln!(b, "#       time {:>9} {:>20}  event", "ms", "count");
            }
        }
        for (row, ((p, pb), (label, mems, chans))) in layout
            .packages
            .iter()
            .zip(&r.packages)
            .zip(&self.labels)
            .enumerate()
        {
            let peak = p.peak_bytes_per_s;
            human_row(b, time, ms, label, r, &pb.bytes, row_peak(p, None, peak));
            if p.memories.len() > 1 {
                for ((m, kind), mb) in mems.iter().zip(&p.memories).zip(&pb.memories) {
                    human_row(b, time, ms, m, r, mb, row_peak(p, Some(*kind), peak));
                }
            }
            if self.per_channel {
                for (ci, (c, cb)) in chans.iter().zip(&pb.channels).enumerate() {
                    let dram = p.channels[ci].0 != Memory::Cxl;
                    let peak = p.channel_peak_bytes_per_s.filter(|_| dram);
                    human_row(b, time, ms, c, r, cb, peak);
                    for (s, sb) in layout.sub_channel_bytes(r, row, ci) {
                        human_row(b, time, ms, &format!("  sub-channel {s}"), r, &sb, None);
                    }
                }
            }
        }
        if layout.packages.is_empty() || layout.value_keys.iter().any(|k| !is_default(k)) {
            for (i, k) in layout.value_keys.iter().enumerate() {
                let (v, counted) = (&r.values[i], &r.value_counted[i]);
                let _ = write!(b, "{time:12.6} {ms:9.3} ");
                if *counted {
                    grouped(b, *v, 20);
                } else {
                    let _ = write!(b, "{:>20}", "<not counted>");
                }
                let _ = write!(b, "  {k}");
                let f = r.value_fraction[i];
                if *counted && f < 1.0 {
                    // As perf does: the share of the interval the counter really ran.
                    let _ = write!(b, "  ({:.2}%)", f * 100.0);
                }
                b.push(b'\n');
            }
        }
        if let Some(l) = &self.latency {
            l.human(b, r, time, ms);
        }
        if let Some(q) = &self.queues {
            q.human(b, r, time, ms);
        }
        not_counted_note(b, layout, r);
    }
}

/// Under an interval whose rows lack some counters' share (stopped by the kernel, or gone with
/// their CPU): a comment line naming them, so the rows are not read as complete.
fn not_counted_note(b: &mut Vec<u8>, layout: &Layout, r: &IntervalReport) {
    if r.missing.is_empty() {
        return;
    }
    b.extend_from_slice(b"# not counted in this interval:");
    for &i in &r.missing {
        let d = layout.describe.get(i).map_or("", |s| s.as_str());
        let _ = write!(b, " {d};");
    }
    b.pop();
    b.push(b'\n');
}

/// The default events' names (the bandwidth rows already show them).
fn is_default(k: &str) -> bool {
    matches!(
        k,
        "read" | "write" | "total" | "mcdram_read" | "mcdram_write" | "mcdram_total"
    ) || crate::model::Tier::of_key(k) == crate::model::Tier::Cxl
        || crate::model::QueuePart::from_key(k).is_some()
}

fn bytes_json(b: &mut Vec<u8>, r: &IntervalReport, x: &Bytes) {
    // Events that count both directions together are folded into read+write totals.
    b.extend_from_slice(b"\"read_bytes\":");
    json_num(b, x.read);
    b.extend_from_slice(b",\"write_bytes\":");
    json_num(b, x.write);
    b.extend_from_slice(b",\"read_bytes_per_s\":");
    json_num(b, r.rate(x.read).round());
    b.extend_from_slice(b",\"write_bytes_per_s\":");
    json_num(b, r.rate(x.write).round());
    if x.total_only != 0.0 {
        b.extend_from_slice(b",\"total_bytes\":");
        json_num(b, x.total());
        b.extend_from_slice(b",\"total_bytes_per_s\":");
        json_num(b, r.rate(x.total()).round());
    }
}

fn csv_bytes(b: &mut Vec<u8>, r: &IntervalReport, x: &Bytes, sep: &str) {
    json_num(b, x.read);
    b.extend_from_slice(sep.as_bytes());
    json_num(b, x.write);
    b.extend_from_slice(sep.as_bytes());
    json_num(b, r.rate(x.read).round());
    b.extend_from_slice(sep.as_bytes());
    json_num(b, r.rate(x.write).round());
    b.extend_from_slice(sep.as_bytes());
    json_num(b, r.rate(x.total()).round());
    // The event rows' count column.
    b.extend_from_slice(sep.as_bytes());
    b.push(b'\n');
}

fn human_row(
    b: &mut Vec<u8>,
    time: f64,
    ms: f64,
    name: &str,
    r: &IntervalReport,
    x: &Bytes,
    peak: Option<f64>,
) {
    let mb = |v: f64| r.rate(v) / 1e6;
    let _ = write!(
        b,
        "{time:12.6} {ms:9.3} {name:<16} {:>12.1} {:>12.1} {:>12.1}",
        mb(x.read),
        mb(x.write),
        mb(x.total())
    );
    if let Some(peak) = peak {
        let _ = write!(b, " {:>5.1}%", r.rate(x.total()) / peak * 100.0);
    }
    b.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        let mut b = Vec::new();
        grouped(&mut b, 1234567.0, 0);
        assert_eq!(b, b"1,234,567");
        b.clear();
        grouped(&mut b, 0.0, 3);
        assert_eq!(b, b"  0");
        b.clear();
        grouped(&mut b, 999.0, 0);
        assert_eq!(b, b"999");
    }

    #[test]
    fn json_numbers_are_valid() {
        let mut b = Vec::new();
        json_num(&mut b, f64::NAN);
        b.push(b' ');
        json_num(&mut b, 64.0);
        b.push(b' ');
        json_num(&mut b, 0.5);
        assert_eq!(b, b"0 64 0.5");
    }
}
