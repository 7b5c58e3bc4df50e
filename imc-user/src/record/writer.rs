//! Writing recordings: aggregates every interval, raw ticks only around bursts, size-bounded.
use super::codec::{crc32, framed, put_chunk, put_varint, zigzag};
use super::format::{
    CHUNK_CGROUPS, CHUNK_COMMAND_TASKS, CHUNK_CONTINUED, CHUNK_END, CHUNK_INTERVAL, CHUNK_LATENCY,
    CHUNK_STACKS2, CHUNK_STRINGS, CHUNK_TASKS, CHUNK_TICKS2, CHUNK_TIERS, MAGIC, RecordError,
    RecordHeader, TICKS_PER_CHUNK, VERSION, rotated_path, ticks_chunk,
};
use crate::attribution::TaskKey;
use crate::attribution::tasks::FxBuild;
use crate::model::SlotSpec;
use crate::model::result::IntervalResult;
use bytes::{BufMut, BytesMut};
use imc_common::{KIND_AGGREGATE, MAX_SLOTS, Record, SlotReading};
use std::collections::{HashMap, HashSet, VecDeque};
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
    /// Task rows left out of intervals too large for a file of the bound (their bytes are
    /// counted as unattributed).
    pub rows_dropped: u64,
    /// Intervals not written at all (cannot happen above `smallest_max_size`).
    pub intervals_dropped: u64,
    /// Stack charges left out because their STACKS chunk did not fit a file of the bound.
    pub stacks_skipped: u64,
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

/// The string, cgroup and task tables of the current file. Each file has its own (ids start at
/// 0 in every segment), so a rotated file restates only the tasks, and the cgroup paths, its
/// chunks use.
#[derive(Default)]
struct Tables {
    strings: HashMap<String, u64>,
    /// Cgroup ids whose path this file defines.
    cgroups: HashSet<u64, FxBuild>,
    tasks: HashMap<TaskKey, u64, FxBuild>,
    /// Entries not yet written, in id order (cgroups: id and path string id).
    new_strings: Vec<String>,
    new_cgroups: Vec<(u64, u64)>,
    new_tasks: Vec<(TaskKey, u64)>,
    /// Ids of new tasks of the recorded command's tree, not yet written (COMMAND_TASKS).
    new_members: Vec<u64>,
}

/// How many unwritten entries each table has: what [`Tables::rollback`] returns to.
#[derive(Clone, Copy)]
struct Mark {
    strings: usize,
    cgroups: usize,
    tasks: usize,
    members: usize,
}

/// The STRINGS, CGROUPS and TASKS payloads of a chunk's unwritten table entries, in the order
/// they are written (each empty when there are none).
#[derive(Default)]
struct Pending {
    strings: Vec<u8>,
    cgroups: Vec<u8>,
    tasks: Vec<u8>,
    members: Vec<u8>,
}

impl Tables {
    fn string_id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.strings.len() as u64;
        self.strings.insert(s.to_owned(), i);
        self.new_strings.push(s.to_owned());
        i
    }

    /// The task's id in this file, defining it (and saying whether it is of the recorded
    /// command's tree, as `member` answers) the first time.
    fn task_id(&mut self, key: &TaskKey, member: Option<&mut MemberFn>) -> u64 {
        if let Some(&i) = self.tasks.get(key) {
            return i;
        }
        let sid = self.string_id(&key.comm_str());
        let i = self.tasks.len() as u64;
        self.tasks.insert(*key, i);
        self.new_tasks.push((*key, sid));
        if member.is_some_and(|m| m(key.pid, key.tgid, key.cgroup)) {
            self.new_members.push(i);
        }
        i
    }

    /// Defines the path of cgroup `id` in this file, the first time a row of it carries one.
    fn cgroup(&mut self, id: u64, path: &str) {
        if self.cgroups.contains(&id) {
            return;
        }
        let sid = self.string_id(path);
        self.cgroups.insert(id);
        self.new_cgroups.push((id, sid));
    }

    /// How many unwritten entries there are: what [`rollback`](Self::rollback) returns to.
    fn mark(&self) -> Mark {
        Mark {
            strings: self.new_strings.len(),
            cgroups: self.new_cgroups.len(),
            tasks: self.new_tasks.len(),
            members: self.new_members.len(),
        }
    }

    /// Forgets the entries made since `mark` (a chunk that was encoded but not written).
    fn rollback(&mut self, mark: Mark) {
        for s in self.new_strings.drain(mark.strings..) {
            self.strings.remove(&s);
        }
        for (id, _) in self.new_cgroups.drain(mark.cgroups..) {
            self.cgroups.remove(&id);
        }
        for (k, _) in self.new_tasks.drain(mark.tasks..) {
            self.tasks.remove(&k);
        }
        self.new_members.truncate(mark.members);
    }

    /// The entries are written: they are the file's from now on.
    fn written(&mut self) {
        self.new_strings.clear();
        self.new_cgroups.clear();
        self.new_tasks.clear();
        self.new_members.clear();
    }

    /// The table payloads of the unwritten entries.
    fn pending(&self) -> Pending {
        let mut p = Pending::default();
        if !self.new_strings.is_empty() {
            put_varint(&mut p.strings, self.new_strings.len() as u64);
            for s in &self.new_strings {
                put_varint(&mut p.strings, s.len() as u64);
                p.strings.extend_from_slice(s.as_bytes());
            }
        }
        if !self.new_cgroups.is_empty() {
            put_varint(&mut p.cgroups, self.new_cgroups.len() as u64);
            for &(id, sid) in &self.new_cgroups {
                put_varint(&mut p.cgroups, id);
                put_varint(&mut p.cgroups, sid);
            }
        }
        if !self.new_tasks.is_empty() {
            put_varint(&mut p.tasks, self.new_tasks.len() as u64);
            for (k, sid) in &self.new_tasks {
                put_varint(&mut p.tasks, u64::from(k.pid));
                put_varint(&mut p.tasks, u64::from(k.tgid));
                put_varint(&mut p.tasks, k.cgroup);
                put_varint(&mut p.tasks, *sid);
            }
        }
        if !self.new_members.is_empty() {
            // Ids rise: each as the difference from the previous (the first from 0).
            put_varint(&mut p.members, self.new_members.len() as u64);
            let mut prev = 0;
            for &id in &self.new_members {
                put_varint(&mut p.members, id - prev);
                prev = id;
            }
        }
        p
    }
}

/// One data chunk, encoded against the current tables but not yet written.
struct Staged {
    kind: u8,
    payload: Vec<u8>,
    tables: Pending,
    mark: Mark,
    /// An interval's LATENCY and TIERS payloads (empty: none), written right after it in that
    /// order, in the same file: they are staged, measured and rotated with their interval,
    /// never apart.
    trailers: [(u8, Vec<u8>); 2],
}

impl Staged {
    /// Bytes it takes in the file, with the table chunks before it.
    fn bytes(&self) -> u64 {
        let table = |p: &Vec<u8>| if p.is_empty() { 0 } else { framed(p.len()) };
        let t = &self.tables;
        table(&t.strings)
            + table(&t.cgroups)
            + table(&t.tasks)
            + table(&t.members)
            + framed(self.payload.len())
            + self.trailers.iter().map(|(_, p)| table(p)).sum::<u64>()
    }
}

/// What a data chunk holds, for encoding (again after a rotation, against the new tables).
enum Data<'a> {
    /// An interval with the rows at these indices of `iv.tasks` (all but when the interval
    /// alone would not fit in a file: the largest first), and the bytes of the rows left out.
    Interval {
        iv: &'a IntervalResult,
        rows: &'a [usize],
        dropped_bytes: u64,
        /// With its LATENCY and TIERS chunks (where it has them).
        latency: bool,
    },
    Ticks(&'a [Record]),
    Stacks(&'a crate::model::stacks::StackBatch),
}

/// Room kept at the end of every file for the chunk that ends it (END or CONTINUED), so the
/// bound holds whichever way the file ends.
const TAIL_RESERVE: u64 = framed(3 * 10);

/// Task rows an interval must have room for in a file of the smallest accepted bound.
const MIN_ROWS: u64 = 64;

/// Cgroup paths (of up to [`MIN_PATH`] bytes) an interval must have room for likewise.
const MIN_CGROUPS: u64 = 8;
const MIN_PATH: u64 = 128;

/// The smallest `--max-size` for a recording with this header: each half must hold the header,
/// the closing chunk and one interval of [`MIN_ROWS`] new tasks in [`MIN_CGROUPS`] new cgroups
/// (each with its table entries) for every package. Smaller bounds are refused; above it, an
/// interval with more tasks (or longer cgroup paths) than a fresh file can hold keeps its
/// largest rows and counts the rest as unattributed.
pub fn smallest_max_size(header: &RecordHeader) -> u64 {
    let json = serde_json::to_vec(header).map_or(4096, |j| j.len() as u64);
    // Room for the run id and segment number the writer fills in.
    let head = 18 + json + 64;
    let slots = header.slots.len() as u64;
    let packages = header.packages.len() as u64;
    let interval_fixed = 9 + 5 * 10 + 10 + packages * 4 * 10;
    // Row: id delta and a count per slot; table entries: pid, tgid, cgroup, comm id, and a
    // comm of up to 16 bytes.
    let per_row = 3 + slots * 5 + (5 + 5 + 10 + 3) + 17 + 1;
    // Cgroup entry: id, path string id, and the path with its length.
    let per_cgroup = 10 + 5 + 2 + MIN_PATH;
    2 * (head
        + TAIL_RESERVE
        + interval_fixed
        + 4 * 9
        + MIN_ROWS * per_row
        + MIN_CGROUPS * per_cgroup)
}

pub struct Writer {
    path: PathBuf,
    file: File,
    header: RecordHeader,
    /// Bytes of the current file's header: a file no longer than this holds no data yet.
    header_bytes: u64,
    specs: Vec<SlotSpec>,
    max_size: Option<u64>,
    opts: WriterOptions,
    tables: Tables,
    ring: VecDeque<Record>,
    /// Write ticks straight through until this time (the tail of a burst).
    capture_until: Option<u64>,
    capture: Vec<Record>,
    hist: Histogram,
    tokens: f64,
    last_token_t: Option<u64>,
    stats: WriterStats,
    buf: Vec<u8>,
    chunk: BytesMut,
    /// Which tasks are of the recorded command's tree (`record -- CMD`), asked once per task
    /// and file.
    member: Option<Box<MemberFn>>,
}

/// Whether the task (pid, tgid, cgroup id) is of the recorded command's process tree.
pub type MemberFn = dyn FnMut(u32, u32, u64) -> bool;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Writer {
    /// Creates `path`, which must not exist (see [`Writer::with_options`]). With `max_size`,
    /// the recording is FILE plus at most one older FILE.1, each at most max_size/2: when FILE
    /// would outgrow its half it becomes FILE.1 (replacing the previous one) and a new FILE
    /// starts with its own header.
    pub fn create(
        path: &Path,
        header: RecordHeader,
        max_size: Option<u64>,
    ) -> Result<Writer, RecordError> {
        Self::with_options(path, header, max_size, WriterOptions::default())
    }

    /// Creates `path` new: an existing file, or a symlink (even a dangling one), is an error,
    /// never followed nor truncated. Replacing a recording is the caller's decision (`record
    /// --force` removes the old one first).
    pub fn with_options(
        path: &Path,
        mut header: RecordHeader,
        max_size: Option<u64>,
        opts: WriterOptions,
    ) -> Result<Writer, RecordError> {
        let specs = header.specs().map_err(RecordError::Header)?;
        if let Some(m) = max_size {
            let least = smallest_max_size(&header);
            if m < least {
                return Err(RecordError::BoundTooSmall { max: m, least });
            }
        }
        if header.run_id == 0 {
            // Distinguishes this run's FILE.1 from a stale one left by an earlier run.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            header.run_id = (now ^ (u64::from(std::process::id()) << 40)) | 1;
        }
        let file = crate::sys::file::create_new(path).map_err(io(path))?;
        let mut w = Writer {
            path: path.to_path_buf(),
            file,
            header,
            header_bytes: 0,
            specs,
            max_size,
            tokens: opts.raw_bytes_per_hour as f64 / 4.0,
            opts,
            tables: Tables::default(),
            ring: VecDeque::new(),
            capture_until: None,
            capture: Vec::new(),
            hist: Histogram::new(),
            last_token_t: None,
            stats: WriterStats::default(),
            buf: Vec::new(),
            chunk: BytesMut::new(),
            member: None,
        };
        w.write_header()?;
        Ok(w)
    }

    /// Marks the tasks `member` says yes to as the recorded command's tree (COMMAND_TASKS
    /// chunks), from the next task the file defines; the header's `command` says what the
    /// command was.
    pub fn mark_command(&mut self, member: Box<MemberFn>) {
        self.member = Some(member);
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    fn write_header(&mut self) -> Result<(), RecordError> {
        let json =
            serde_json::to_vec(&self.header).map_err(|e| RecordError::Header(e.to_string()))?;
        let mut out = BytesMut::with_capacity(json.len() + 18);
        out.put_slice(&MAGIC);
        out.put_u16_le(VERSION);
        out.put_u32_le(json.len() as u32);
        out.put_slice(&json);
        out.put_u32_le(crc32(&[&json]));
        self.file.write_all(&out).map_err(io(&self.path))?;
        self.stats.bytes = out.len() as u64;
        self.header_bytes = out.len() as u64;
        Ok(())
    }

    /// One raw record from the sampler. Cheap: it goes to an in-memory ring unless a burst's
    /// tail is being captured.
    pub fn push_tick(&mut self, rec: &Record) -> Result<(), RecordError> {
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

    /// What a drain charged to call stacks (`--stacks`): a STACKS2 chunk. One too large for a
    /// file of its own is left out and counted (`stacks_skipped`).
    pub fn push_stacks(&mut self, b: &crate::model::stacks::StackBatch) -> Result<(), RecordError> {
        let staged = self.stage(CHUNK_STACKS2, &Data::Stacks(b));
        if !self.put(staged, &Data::Stacks(b))? {
            self.stats.stacks_skipped += b.charges.len() as u64;
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
            let ticks: Vec<Record> = self.ring.drain(..).filter(|r| r.t_ns >= from).collect();
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

    /// Ends the recording: the tail of a burst, and the END chunk that marks a clean finish
    /// (always room for it: every file keeps [`TAIL_RESERVE`] free).
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
            // Raw ticks are the first thing to give up: over budget, too big for a quarter of
            // `max_size`, or (with their table entries) too big for a file of their own.
            let staged = self.stage(ticks_chunk(part), &Data::Ticks(part));
            let len = staged.payload.len();
            let too_big = self.max_size.is_some_and(|m| framed(len) > m / 4);
            if too_big || self.tokens < len as f64 {
                self.unstage(staged);
                self.stats.ticks_skipped += part.len() as u64;
                continue;
            }
            if self.put(staged, &Data::Ticks(part))? {
                self.tokens -= len as f64;
                self.stats.ticks_written += part.len() as u64;
                self.stats.raw_bytes += framed(len);
            } else {
                self.stats.ticks_skipped += part.len() as u64;
            }
        }
        let mut ticks = ticks;
        ticks.clear();
        self.capture = ticks;
        Ok(())
    }

    /// Encodes `data` against the current tables (adding the entries it needs).
    fn stage(&mut self, kind: u8, data: &Data) -> Staged {
        let mark = self.tables.mark();
        let mut payload = std::mem::take(&mut self.buf);
        payload.clear();
        let mut trailers = [(CHUNK_LATENCY, Vec::new()), (CHUNK_TIERS, Vec::new())];
        match data {
            Data::Interval {
                iv,
                rows,
                dropped_bytes,
                latency,
            } => {
                self.encode_interval(iv, rows, *dropped_bytes, &mut payload);
                if *latency {
                    let [(_, lat), (_, tiers)] = &mut trailers;
                    super::latency::encode(iv, lat, |l| self.tables.string_id(l));
                    super::tiers::encode(iv, tiers);
                }
            }
            Data::Ticks(t) => self.encode_ticks(t, &mut payload),
            Data::Stacks(b) => {
                let layout = super::stacks::Layout::Stacks2;
                super::stacks::encode(b, layout, &mut payload, |t| self.tables.string_id(t));
            }
        }
        Staged {
            kind,
            payload,
            tables: self.tables.pending(),
            mark,
            trailers,
        }
    }

    /// Drops a staged chunk: its new table entries are forgotten.
    fn unstage(&mut self, s: Staged) {
        self.tables.rollback(s.mark);
        self.buf = s.payload;
    }

    /// Whether `s` fits in the current file within the bound (with the tail reserved).
    fn fits(&self, s: &Staged) -> bool {
        self.max_size
            .is_none_or(|m| self.stats.bytes + s.bytes() + TAIL_RESERVE <= m / 2)
    }

    /// Writes a staged chunk, rotating first when it would take the file past its half of the
    /// bound (then re-encoding it against the new file's empty tables, so the new file defines
    /// only what this chunk uses). False: it does not fit even in a fresh file, and nothing
    /// was written.
    fn put(&mut self, staged: Staged, data: &Data) -> Result<bool, RecordError> {
        let staged = if self.fits(&staged) {
            staged
        } else {
            let kind = staged.kind;
            self.unstage(staged);
            if self.stats.bytes <= self.header_bytes {
                return Ok(false);
            }
            self.rotate()?;
            let again = self.stage(kind, data);
            if !self.fits(&again) {
                self.unstage(again);
                return Ok(false);
            }
            again
        };
        // Strings first: the cgroup and task entries name theirs. The whole interval (its
        // tables, itself, its trailers) goes to the file in one write.
        self.chunk.clear();
        for (kind, p) in [
            (CHUNK_STRINGS, &staged.tables.strings),
            (CHUNK_CGROUPS, &staged.tables.cgroups),
            (CHUNK_TASKS, &staged.tables.tasks),
            (CHUNK_COMMAND_TASKS, &staged.tables.members),
        ] {
            if !p.is_empty() {
                put_chunk(&mut self.chunk, kind, p);
            }
        }
        put_chunk(&mut self.chunk, staged.kind, &staged.payload);
        for (kind, p) in &staged.trailers {
            if !p.is_empty() {
                put_chunk(&mut self.chunk, *kind, p);
            }
        }
        let r = self.write_chunks();
        self.buf = staged.payload;
        r?;
        self.tables.written();
        Ok(true)
    }

    /// TICKS or TICKS2 (see [`ticks_chunk`]): the same coding but for the kind, a bit of a
    /// byte in TICKS, a byte of its own in TICKS2, followed in an aggregate by its period's
    /// length and its on-CPU time.
    fn encode_ticks(&mut self, ticks: &[Record], p: &mut Vec<u8>) {
        let v2 = ticks_chunk(ticks) == CHUNK_TICKS2;
        p.reserve(ticks.len() * 24);
        put_varint(p, ticks.len() as u64);
        let base = ticks.iter().map(|r| r.t_ns).min().unwrap_or(0);
        put_varint(p, base);
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
            let tid = self.tables.task_id(&key, self.member.as_deref_mut());
            let pv = prev.entry(r.cpu).or_insert(TickPrev {
                t: base,
                slots: [SlotReading::default(); MAX_SLOTS],
            });
            put_varint(p, u64::from(r.cpu));
            let nr = r.nr_slots.min(MAX_SLOTS as u8);
            if v2 {
                p.push(r.kind);
                p.push(nr);
            } else {
                p.push((r.kind & 1) | (nr << 1));
            }
            p.push(r.failed_mask);
            put_varint(p, zigzag(r.t_ns.wrapping_sub(pv.t) as i64));
            put_varint(p, tid);
            if v2 && r.kind == KIND_AGGREGATE {
                put_varint(p, r.t_ns.wrapping_sub(r.t0_ns));
                put_varint(p, r.on_ns);
            }
            for s in 0..nr as usize {
                let (a, b) = (&pv.slots[s], &r.slots[s]);
                let dv = b.value.wrapping_sub(a.value) as i64;
                let de = b.enabled.wrapping_sub(a.enabled) as i64;
                let dr = b.running.wrapping_sub(a.running) as i64;
                put_varint(p, zigzag(dv));
                put_varint(p, zigzag(de));
                // Usually 0 (not multiplexed): one byte.
                put_varint(p, zigzag(de.wrapping_sub(dr)));
                pv.slots[s] = *b;
            }
            pv.t = r.t_ns;
        }
    }

    /// Writes one interval and its latency; if they would not fit in a file even alone, the
    /// interval's largest rows are kept and the bytes of the others counted as unattributed,
    /// and where not even the empty interval fits beside its latency, the latency is left out
    /// (the bound always holds).
    fn write_interval(&mut self, iv: &IntervalResult) -> Result<(), RecordError> {
        let all: Vec<usize> = (0..iv.tasks.len()).collect();
        let data = Data::Interval {
            iv,
            rows: &all,
            dropped_bytes: 0,
            latency: true,
        };
        let staged = self.stage(CHUNK_INTERVAL, &data);
        if self.put(staged, &data)? {
            return Ok(());
        }
        // Largest rows first; halve until it fits.
        let mut order = all;
        let bytes = |i: usize| {
            let t = &iv.tasks[i];
            t.read_bytes + t.write_bytes + t.total_bytes
        };
        order.sort_by_key(|&i| std::cmp::Reverse((bytes(i), t_amount(iv, i))));
        let mut keep = order.len() / 2;
        let mut latency = true;
        loop {
            let dropped_bytes = order[keep..].iter().map(|&i| bytes(i)).sum();
            let data = Data::Interval {
                iv,
                rows: &order[..keep],
                dropped_bytes,
                latency,
            };
            let staged = self.stage(CHUNK_INTERVAL, &data);
            if self.put(staged, &data)? {
                self.stats.rows_dropped += (order.len() - keep) as u64;
                return Ok(());
            }
            if keep == 0 && latency {
                latency = false;
                continue;
            }
            if keep == 0 {
                // Not even an empty interval fits: the bound was checked against this header at
                // creation, so this cannot happen; count it rather than break the bound.
                self.stats.intervals_dropped += 1;
                return Ok(());
            }
            keep /= 2;
        }
    }

    fn encode_interval(
        &mut self,
        iv: &IntervalResult,
        rows: &[usize],
        dropped_bytes: u64,
        p: &mut Vec<u8>,
    ) {
        // Task ids first (they may add table entries), sorted so ids delta-code small.
        let mut ids: Vec<(u64, usize)> = Vec::with_capacity(rows.len());
        for &i in rows {
            let t = &iv.tasks[i];
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
            ids.push((self.tables.task_id(&key, self.member.as_deref_mut()), i));
            // The path travels with the recording, so a report elsewhere names the container.
            if let Some(path) = &t.cgroup_path {
                self.tables.cgroup(t.cgroup, path);
            }
        }
        ids.sort_unstable();
        let has_bytes = crate::model::measures_bytes(&self.specs);
        let den = if has_bytes {
            0
        } else {
            crate::attribution::traffic_amount(iv, &self.specs).round() as u64
        };
        // Absolute (not a delta from the previous interval): a chunk must decode the same in
        // the file a rotation moves it to.
        put_varint(p, iv.t_start_ns);
        put_varint(p, iv.t_end_ns.saturating_sub(iv.t_start_ns));
        put_varint(p, iv.lost_samples);
        put_varint(p, iv.unattributed_bytes.saturating_add(dropped_bytes));
        put_varint(p, den);
        put_varint(p, iv.packages.len() as u64);
        for pk in &iv.packages {
            put_varint(p, u64::from(pk.id));
            put_varint(p, pk.read_bytes);
            put_varint(p, pk.write_bytes);
            put_varint(p, pk.total_bytes);
        }
        put_varint(p, ids.len() as u64);
        let mut prev_id = 0u64;
        for &(id, i) in &ids {
            put_varint(p, id - prev_id);
            prev_id = id;
            let t = &iv.tasks[i];
            for spec in &self.specs {
                let v = t.values.get(&spec.event).copied().unwrap_or(0.0);
                put_varint(p, if v > 0.0 { v.round() as u64 } else { 0 });
            }
        }
        // Last, so that a recording made before it reads as all "other": the device part of
        // the unattributed bytes.
        put_varint(p, iv.unattributed.device_bytes);
    }

    fn write_chunk(&mut self, kind: u8, payload: &[u8]) -> Result<(), RecordError> {
        self.chunk.clear();
        put_chunk(&mut self.chunk, kind, payload);
        self.write_chunks()
    }

    /// Writes the chunks put in `self.chunk`, in one write.
    fn write_chunks(&mut self) -> Result<(), RecordError> {
        let r = self.file.write_all(&self.chunk).map_err(io(&self.path));
        self.stats.bytes += self.chunk.len() as u64;
        r
    }

    /// Ends the current file with CONTINUED (a clean end: the run goes on), moves it to FILE.1
    /// and starts FILE anew with its own header and empty tables. The new FILE is created new,
    /// like the first: a symlink planted at FILE meanwhile makes this fail, never followed.
    fn rotate(&mut self) -> Result<(), RecordError> {
        self.write_chunk(CHUNK_CONTINUED, &[])?;
        let old = rotated_path(&self.path);
        std::fs::rename(&self.path, &old).map_err(io(&self.path))?;
        self.file = crate::sys::file::create_new(&self.path).map_err(io(&self.path))?;
        self.tables = Tables::default();
        self.header.segment += 1;
        self.stats.rotations += 1;
        self.write_header()
    }
}

/// A row's traffic counts, to order rows of a stand-in source (no bytes) by size too.
fn t_amount(iv: &IntervalResult, i: usize) -> u64 {
    iv.tasks[i]
        .values
        .values()
        .fold(0u64, |a, v| a.saturating_add(v.max(0.0) as u64))
}
