//! Writing recordings: aggregates every interval, raw ticks only around bursts, size-bounded.
use super::codec::{crc32, put_varint, zigzag};
use super::{
    CHUNK_CGROUPS, CHUNK_END, CHUNK_INTERVAL, CHUNK_STRINGS, CHUNK_TASKS, CHUNK_TICKS, MAGIC,
    RecordError, RecordHeader, VERSION, rotated_path,
};
use crate::attribution::TaskKey;
use crate::attribution::tasks::FxBuild;
use crate::model::{SlotRole, SlotSpec};
use crate::output::interval::IntervalResult;
use imc_common::{MAX_SLOTS, SlotReading, TickRecord};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Knobs of the raw-tick capture; the defaults suit 1000 Hz and 100 ms intervals.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Raw ticks kept before a burst interval starts.
    pub pre_ns: u64,
    /// Raw ticks kept after a burst interval ends.
    pub post_ns: u64,
    /// Bound on the in-memory ring (records), whatever the tick rate.
    pub ring_max: usize,
    /// Raw-tick bytes allowed per hour of recording (a token bucket, so bursts in a row cannot
    /// fill the file with raw ticks): the aggregates always come first.
    pub raw_bytes_per_hour: u64,
    /// Bandwidth (bytes/s) above which an interval is a burst; None: above the default threshold
    /// of the intervals so far (after `warmup_intervals`).
    pub burst_threshold: Option<f64>,
    pub warmup_intervals: u64,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            pre_ns: 20_000_000,
            post_ns: 10_000_000,
            ring_max: 1 << 16,
            raw_bytes_per_hour: 16 << 20,
            burst_threshold: None,
            warmup_intervals: 50,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub intervals: u64,
    pub ticks_written: u64,
    /// Ticks around bursts not written because the raw-tick budget was spent.
    pub ticks_skipped: u64,
    pub bursts: u64,
    pub rotations: u64,
    /// Bytes of TICKS chunks written (all files).
    pub raw_bytes: u64,
    /// Bytes written to the current file.
    pub bytes: u64,
}

/// Per-CPU previous values within one TICKS chunk (delta coding restarts in every chunk, so a
/// chunk decodes alone).
#[derive(Clone, Copy, Default)]
struct TickPrev {
    t: u64,
    slots: [SlotReading; MAX_SLOTS],
}

/// Log-spaced histogram of interval bandwidths: an online 99th percentile in constant memory.
struct Histogram {
    counts: Vec<u64>,
    n: u64,
}

const HIST_PER_OCTAVE: f64 = 8.0;

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; 64 * HIST_PER_OCTAVE as usize + 1],
            n: 0,
        }
    }
    fn bucket(v: f64) -> usize {
        if v < 1.0 {
            0
        } else {
            ((v.log2() * HIST_PER_OCTAVE) as usize + 1).min(64 * HIST_PER_OCTAVE as usize)
        }
    }
    fn add(&mut self, v: f64) {
        self.counts[Self::bucket(v)] += 1;
        self.n += 1;
    }
    /// (lower, upper) edges of the bucket holding the q-th percentile.
    fn percentile(&self, q: f64) -> (f64, f64) {
        let want = ((q / 100.0) * self.n as f64).ceil() as u64;
        let edge = |i: usize| {
            if i == 0 {
                0.0
            } else {
                2f64.powf((i - 1) as f64 / HIST_PER_OCTAVE)
            }
        };
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= want.max(1) {
                return (edge(i), edge(i + 1));
            }
        }
        (f64::INFINITY, f64::INFINITY)
    }
}

pub struct Writer {
    path: PathBuf,
    file: File,
    header: RecordHeader,
    specs: Vec<SlotSpec>,
    max_size: Option<u64>,
    opts: WriterOptions,
    strings: HashMap<String, u64>,
    tasks: HashMap<TaskKey, u64, FxBuild>,
    new_strings: Vec<String>,
    new_tasks: Vec<(TaskKey, u64)>,
    /// Cgroup id → path, for every id whose path the intervals carried.
    cgroups: HashMap<u64, String>,
    new_cgroups: Vec<(u64, u64)>,
    ring: VecDeque<TickRecord>,
    /// Write ticks straight through until this time (the tail of a burst).
    capture_until: Option<u64>,
    capture: Vec<TickRecord>,
    hist: Histogram,
    tokens: f64,
    last_token_t: Option<u64>,
    stats: WriterStats,
    buf: Vec<u8>,
    chunk: Vec<u8>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Ticks per TICKS chunk: small enough that a crash loses little, large enough that the chunk
/// overhead (9 bytes and a per-CPU restart of delta coding) stays negligible.
const TICKS_PER_CHUNK: usize = 1024;

impl Writer {
    /// Creates (truncates) `path`. With `max_size`, the recording is FILE plus at most one
    /// older FILE.1, each at most max_size/2: when FILE would outgrow its half it becomes
    /// FILE.1 (replacing the previous one) and a new FILE starts with its own header.
    pub fn create(
        path: &Path,
        header: RecordHeader,
        max_size: Option<u64>,
    ) -> Result<Writer, RecordError> {
        Self::with_options(path, header, max_size, WriterOptions::default())
    }

    pub fn with_options(
        path: &Path,
        mut header: RecordHeader,
        max_size: Option<u64>,
        opts: WriterOptions,
    ) -> Result<Writer, RecordError> {
        let specs = header.specs().map_err(RecordError::Header)?;
        if header.run_id == 0 {
            // Distinguishes this run's FILE.1 from a stale one left by an earlier run.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            header.run_id = (now ^ (u64::from(std::process::id()) << 40)) | 1;
        }
        let file = File::create(path).map_err(io(path))?;
        let mut w = Writer {
            path: path.to_path_buf(),
            file,
            header,
            specs,
            max_size,
            tokens: opts.raw_bytes_per_hour as f64 / 4.0,
            opts,
            strings: HashMap::new(),
            tasks: HashMap::default(),
            new_strings: Vec::new(),
            new_tasks: Vec::new(),
            cgroups: HashMap::new(),
            new_cgroups: Vec::new(),
            ring: VecDeque::new(),
            capture_until: None,
            capture: Vec::new(),
            hist: Histogram::new(),
            last_token_t: None,
            stats: WriterStats::default(),
            buf: Vec::new(),
            chunk: Vec::new(),
        };
        w.write_header()?;
        Ok(w)
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    fn write_header(&mut self) -> Result<(), RecordError> {
        let json =
            serde_json::to_vec(&self.header).map_err(|e| RecordError::Header(e.to_string()))?;
        let mut out = Vec::with_capacity(json.len() + 18);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&crc32(&[&json]).to_le_bytes());
        self.file.write_all(&out).map_err(io(&self.path))?;
        self.stats.bytes = out.len() as u64;
        Ok(())
    }

    /// One raw record from the sampler. Cheap: it goes to an in-memory ring unless a burst's
    /// tail is being captured.
    pub fn push_tick(&mut self, rec: &TickRecord) -> Result<(), RecordError> {
        if let Some(until) = self.capture_until {
            if rec.t_ns <= until {
                self.capture.push(*rec);
                if self.capture.len() >= TICKS_PER_CHUNK {
                    self.flush_capture()?;
                }
                return Ok(());
            }
            self.flush_capture()?;
            self.capture_until = None;
        }
        self.ring.push_back(*rec);
        if self.ring.len() > self.opts.ring_max {
            self.ring.pop_front();
        }
        Ok(())
    }

    /// One finished interval (what the attributor's `close_interval` returned). Decides whether
    /// it is a burst, and if so writes the raw ticks around it.
    pub fn push_interval(&mut self, iv: &IntervalResult) -> Result<(), RecordError> {
        self.write_interval(iv)?;
        self.stats.intervals += 1;
        let amount = crate::attribution::traffic_amount(iv, &self.specs);
        let dt = iv.t_end_ns.saturating_sub(iv.t_start_ns);
        let bw = if dt > 0 {
            amount * 1e9 / dt as f64
        } else {
            0.0
        };
        // As in the report: above an explicit threshold, or above the default threshold of
        // the run so far (halfway between its median and its 99th percentile; the histogram's
        // bucket edges err towards keeping raw ticks).
        let is_burst = match self.opts.burst_threshold {
            Some(t) => bw > t,
            None if self.hist.n >= self.opts.warmup_intervals => {
                let (_, p50_high) = self.hist.percentile(50.0);
                let (p99_low, _) = self
                    .hist
                    .percentile(crate::attribution::summary::DEFAULT_BURST_PERCENTILE);
                crate::attribution::summary::default_burst_threshold(p50_high, p99_low)
                    .is_some_and(|t| bw > t)
            }
            None => false,
        };
        self.hist.add(bw);
        // Refill the raw-tick budget by recording time.
        if let Some(last) = self.last_token_t {
            let secs = iv.t_end_ns.saturating_sub(last) as f64 / 1e9;
            let cap = self.opts.raw_bytes_per_hour as f64 / 4.0;
            self.tokens =
                (self.tokens + secs * self.opts.raw_bytes_per_hour as f64 / 3600.0).min(cap);
        }
        self.last_token_t = Some(iv.t_end_ns);
        let from = iv.t_start_ns.saturating_sub(self.opts.pre_ns);
        if is_burst && bw > 0.0 {
            self.stats.bursts += 1;
            let ticks: Vec<TickRecord> = self.ring.drain(..).filter(|r| r.t_ns >= from).collect();
            let until = iv.t_end_ns.saturating_add(self.opts.post_ns);
            self.capture
                .extend(ticks.iter().filter(|r| r.t_ns <= until));
            self.capture_until = Some(until);
            self.flush_capture()?;
        } else {
            // Keep only what a burst in the next interval could want.
            let keep_from = iv.t_end_ns.saturating_sub(self.opts.pre_ns);
            while self.ring.front().is_some_and(|r| r.t_ns < keep_from) {
                self.ring.pop_front();
            }
        }
        Ok(())
    }

    /// Ends the recording: the tail of a burst, and the END chunk that marks a clean finish.
    pub fn finish(mut self) -> Result<WriterStats, RecordError> {
        self.flush_capture()?;
        let mut p = Vec::new();
        put_varint(&mut p, self.stats.intervals);
        put_varint(&mut p, self.stats.ticks_written);
        put_varint(&mut p, self.stats.ticks_skipped);
        self.write_chunk(CHUNK_END, &p)?;
        self.file.sync_data().map_err(io(&self.path))?;
        Ok(self.stats)
    }

    fn flush_capture(&mut self) -> Result<(), RecordError> {
        if self.capture.is_empty() {
            return Ok(());
        }
        let ticks = std::mem::take(&mut self.capture);
        for part in ticks.chunks(TICKS_PER_CHUNK) {
            let payload = self.encode_ticks(part);
            // Raw ticks are the first thing to give up: over budget, or too big for a file
            // half of `max_size` (a chunk must never push a file past its bound).
            let too_big = self
                .max_size
                .is_some_and(|m| payload.len() as u64 + 9 > m / 4);
            if too_big || self.tokens < payload.len() as f64 {
                self.stats.ticks_skipped += part.len() as u64;
                continue;
            }
            self.tokens -= payload.len() as f64;
            self.emit_tables()?;
            self.write_chunk(CHUNK_TICKS, &payload)?;
            self.stats.ticks_written += part.len() as u64;
            self.stats.raw_bytes += payload.len() as u64 + 9;
        }
        let mut ticks = ticks;
        ticks.clear();
        self.capture = ticks;
        Ok(())
    }

    fn string_id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.strings.len() as u64;
        self.strings.insert(s.to_owned(), i);
        self.new_strings.push(s.to_owned());
        i
    }

    fn task_id(&mut self, key: &TaskKey) -> u64 {
        if let Some(&i) = self.tasks.get(key) {
            return i;
        }
        let comm = key.comm_str();
        let sid = self.string_id(&comm);
        let i = self.tasks.len() as u64;
        self.tasks.insert(*key, i);
        self.new_tasks.push((*key, sid));
        i
    }

    /// Notes a cgroup's path the first time an interval carries it.
    fn cgroup_def(&mut self, id: u64, path: &str) {
        if !self.cgroups.contains_key(&id) {
            let sid = self.string_id(path);
            self.cgroups.insert(id, path.to_owned());
            self.new_cgroups.push((id, sid));
        }
    }

    /// Writes the string, cgroup and task definitions the next chunk uses, before it: a file cut
    /// after them still decodes, a file cut before the chunk never needs them.
    fn emit_tables(&mut self) -> Result<(), RecordError> {
        if !self.new_strings.is_empty() {
            let mut p = Vec::new();
            put_varint(&mut p, self.new_strings.len() as u64);
            for s in std::mem::take(&mut self.new_strings) {
                put_varint(&mut p, s.len() as u64);
                p.extend_from_slice(s.as_bytes());
            }
            self.write_chunk(CHUNK_STRINGS, &p)?;
        }
        if !self.new_cgroups.is_empty() {
            let mut p = Vec::new();
            put_varint(&mut p, self.new_cgroups.len() as u64);
            for (id, sid) in std::mem::take(&mut self.new_cgroups) {
                put_varint(&mut p, id);
                put_varint(&mut p, sid);
            }
            self.write_chunk(CHUNK_CGROUPS, &p)?;
        }
        if !self.new_tasks.is_empty() {
            let mut p = Vec::new();
            put_varint(&mut p, self.new_tasks.len() as u64);
            for (k, sid) in std::mem::take(&mut self.new_tasks) {
                put_varint(&mut p, u64::from(k.pid));
                put_varint(&mut p, u64::from(k.tgid));
                put_varint(&mut p, k.cgroup);
                put_varint(&mut p, sid);
            }
            self.write_chunk(CHUNK_TASKS, &p)?;
        }
        Ok(())
    }

    fn encode_ticks(&mut self, ticks: &[TickRecord]) -> Vec<u8> {
        let mut p = Vec::with_capacity(ticks.len() * 24);
        put_varint(&mut p, ticks.len() as u64);
        let base = ticks.iter().map(|r| r.t_ns).min().unwrap_or(0);
        put_varint(&mut p, base);
        let mut prev: HashMap<u32, TickPrev> = HashMap::new();
        for r in ticks {
            let mut comm = [0u8; 16];
            comm.copy_from_slice(&r.comm);
            let key = TaskKey {
                pid: r.pid,
                tgid: r.tgid,
                cgroup: r.cgroup_id,
                comm,
            };
            let tid = self.task_id(&key);
            let pv = prev.entry(r.cpu).or_insert(TickPrev {
                t: base,
                slots: [SlotReading::default(); MAX_SLOTS],
            });
            put_varint(&mut p, u64::from(r.cpu));
            let nr = r.nr_slots.min(MAX_SLOTS as u8);
            p.push((r.kind & 1) | (nr << 1));
            p.push(r.failed_mask);
            put_varint(&mut p, zigzag(r.t_ns.wrapping_sub(pv.t) as i64));
            put_varint(&mut p, tid);
            for s in 0..nr as usize {
                let (a, b) = (&pv.slots[s], &r.slots[s]);
                let dv = b.value.wrapping_sub(a.value) as i64;
                let de = b.enabled.wrapping_sub(a.enabled) as i64;
                let dr = b.running.wrapping_sub(a.running) as i64;
                put_varint(&mut p, zigzag(dv));
                put_varint(&mut p, zigzag(de));
                // Usually 0 (not multiplexed): one byte.
                put_varint(&mut p, zigzag(de.wrapping_sub(dr)));
                pv.slots[s] = *b;
            }
            pv.t = r.t_ns;
        }
        p
    }

    fn write_interval(&mut self, iv: &IntervalResult) -> Result<(), RecordError> {
        // Task ids first (they may add table entries), sorted so ids delta-code small.
        let mut rows: Vec<(u64, usize)> = Vec::with_capacity(iv.tasks.len());
        for (i, t) in iv.tasks.iter().enumerate() {
            let mut comm = [0u8; 16];
            let b = t.comm.as_bytes();
            let n = b.len().min(16);
            comm[..n].copy_from_slice(&b[..n]);
            let key = TaskKey {
                pid: t.pid,
                tgid: t.tgid,
                cgroup: t.cgroup,
                comm,
            };
            rows.push((self.task_id(&key), i));
            if let Some(path) = &t.cgroup_path {
                self.cgroup_def(t.cgroup, path);
            }
        }
        rows.sort_unstable();
        let has_bytes = self
            .specs
            .iter()
            .any(|s| matches!(s.role, SlotRole::Traffic(_)) && s.bytes_per_count.is_some());
        let den = if has_bytes {
            0
        } else {
            crate::attribution::traffic_amount(iv, &self.specs).round() as u64
        };
        let mut p = std::mem::take(&mut self.buf);
        p.clear();
        // Absolute (not a delta from the previous interval): a chunk must decode the same in
        // the file a rotation moves it to.
        put_varint(&mut p, iv.t_start_ns);
        put_varint(&mut p, iv.t_end_ns.saturating_sub(iv.t_start_ns));
        put_varint(&mut p, iv.lost_samples);
        put_varint(&mut p, iv.unattributed_bytes);
        put_varint(&mut p, den);
        put_varint(&mut p, iv.packages.len() as u64);
        for pk in &iv.packages {
            put_varint(&mut p, u64::from(pk.id));
            put_varint(&mut p, pk.read_bytes);
            put_varint(&mut p, pk.write_bytes);
            put_varint(&mut p, pk.total_bytes);
        }
        put_varint(&mut p, rows.len() as u64);
        let mut prev_id = 0u64;
        for &(id, i) in &rows {
            put_varint(&mut p, id - prev_id);
            prev_id = id;
            let t = &iv.tasks[i];
            for spec in &self.specs {
                let v = t.values.get(&spec.event).copied().unwrap_or(0.0);
                put_varint(&mut p, if v > 0.0 { v.round() as u64 } else { 0 });
            }
        }
        self.emit_tables()?;
        let r = self.write_chunk(CHUNK_INTERVAL, &p);
        self.buf = p;
        r
    }

    fn write_chunk(&mut self, kind: u8, payload: &[u8]) -> Result<(), RecordError> {
        let total = 9 + payload.len() as u64;
        if let Some(max) = self.max_size
            && kind != CHUNK_STRINGS
            && kind != CHUNK_TASKS
            && kind != CHUNK_CGROUPS
            && self.stats.bytes + total > max / 2
            && self.stats.bytes > 0
        {
            self.rotate()?;
            // Definitions the chunk relies on were in the old file: restate them.
            return self.rewrite_after_rotation(kind, payload);
        }
        let len = payload.len() as u32;
        let mut c = std::mem::take(&mut self.chunk);
        c.clear();
        c.push(kind);
        c.extend_from_slice(&len.to_le_bytes());
        c.extend_from_slice(payload);
        let crc = crc32(&[&c]);
        c.extend_from_slice(&crc.to_le_bytes());
        let r = self.file.write_all(&c).map_err(io(&self.path));
        self.stats.bytes += c.len() as u64;
        self.chunk = c;
        r
    }

    fn rotate(&mut self) -> Result<(), RecordError> {
        let old = rotated_path(&self.path);
        std::fs::rename(&self.path, &old).map_err(io(&self.path))?;
        self.file = File::create(&self.path).map_err(io(&self.path))?;
        self.header.segment += 1;
        self.stats.rotations += 1;
        self.write_header()
    }

    /// After a rotation the new file has empty tables: a chunk that refers to tasks must be
    /// re-encoded against the new tables. Interval chunks are re-encoded by redoing the table
    /// lookups; tick chunks likewise.
    fn rewrite_after_rotation(&mut self, kind: u8, payload: &[u8]) -> Result<(), RecordError> {
        let old_tasks: Vec<(TaskKey, u64)> = {
            let mut v: Vec<(TaskKey, u64)> = self.tasks.iter().map(|(k, &i)| (*k, i)).collect();
            v.sort_by_key(|e| e.1);
            v
        };
        let old_cgroups = std::mem::take(&mut self.cgroups);
        self.strings.clear();
        self.tasks.clear();
        self.new_strings.clear();
        self.new_tasks.clear();
        self.new_cgroups.clear();
        // Every task (and cgroup path) the old file knew is restated: simpler than re-encoding
        // the payload, and small (one entry per task seen).
        for (k, _) in &old_tasks {
            self.task_id(k);
        }
        for (id, path) in &old_cgroups {
            self.cgroup_def(*id, path);
        }
        self.emit_tables()?;
        let saved = self.max_size.take();
        let r = self.write_chunk(kind, payload);
        self.max_size = saved;
        r
    }
}
