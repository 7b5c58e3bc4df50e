//! Reading recordings: everything up to the first damaged or truncated chunk, then a status
//! saying whether the file ended cleanly, was cut, or is damaged at some offset. The file is
//! streamed chunk by chunk: memory is one chunk plus the string, cgroup and task tables, never
//! the file.
use super::codec::{Cursor, Malformed, crc32, unzigzag};
use super::format::{
    CHUNK_CGROUPS, CHUNK_COMMAND_TASKS, CHUNK_CONTINUED, CHUNK_END, CHUNK_INTERVAL, CHUNK_LATENCY,
    CHUNK_STACKS, CHUNK_STACKS2, CHUNK_STRINGS, CHUNK_TASKS, CHUNK_TICKS, CHUNK_TICKS2,
    CHUNK_TIERS, MAGIC, MAX_CHUNK, RecordError, RecordHeader, TICKS_PER_CHUNK, VERSION,
};
use super::latency::{self, PackageLatency};
use crate::attribution::summary::{amount_of, sort_rows};
use crate::attribution::{bytes_of, traffic_counts};
use crate::discovery::cgroup::{CgroupNames, names_of_path};
use crate::model::result::{IntervalResult, PackageRow, ShareBasis, TaskRow, package_bytes};
use crate::model::{KeyParts, SlotSpec};
use bytes::{BufMut, BytesMut};
use foldhash::{HashMap, HashMapExt};
use imc_common::{KIND_AGGREGATE, MAX_SLOTS, Record, SlotReading};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// One thing read from a recording.
#[derive(Clone, Debug)]
// An interval is read once a chunk and handed on at once: boxing it would allocate per chunk
// for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Item {
    Interval(IntervalResult),
    /// Raw records around a burst, in the order they were written.
    Ticks(Vec<Record>),
    /// What a drain charged to call stacks (`record --stacks`).
    Stacks(crate::model::stacks::StackBatch),
}

/// How the reading ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Not at the end yet.
    Reading,
    /// The file ends with the writer's rotation marker: the run went on in the next segment
    /// (FILE, when this is FILE.1). Nothing was lost at this end.
    Continued,
    /// The END chunk was reached: the writer finished normally.
    Complete,
    /// The file ends on a chunk boundary without END: the writer was stopped (or crashed)
    /// between chunks, or is still writing.
    Unfinished,
    /// A chunk is cut short (`cut`: the file ends inside it), or fails its checksum or does
    /// not decode (damaged), at this offset: everything before it was read.
    Damaged {
        offset: u64,
        reason: String,
        cut: bool,
    },
}

/// What a data chunk gave: an item, or the latency or tier bytes of the interval before it.
// As `Item`: handed on at once, boxing would allocate per chunk for nothing.
#[allow(clippy::large_enum_variant)]
enum Step {
    Item(Item),
    Latency(Vec<PackageLatency>),
    Tiers(Vec<(u32, Vec<crate::model::TierBytes>)>),
}

/// An item read ahead (while looking for the LATENCY chunk of the interval before it), with
/// the figures [`Reader::last_amount`] and its kin had after it.
type Ahead = (Item, [f64; 3]);

/// One entry of the task table: its command name is an index into the string table, so the
/// table costs 24 bytes a task however long the name.
#[derive(Clone, Copy)]
struct TaskDef {
    pid: u32,
    tgid: u32,
    cgroup: u64,
    comm: u32,
}

/// The file's string table in one buffer: every string's text back to back and where each ends
/// (4 bytes a string beyond its text, never a `String` of its own).
#[derive(Default)]
struct Strings {
    text: String,
    ends: Vec<u32>,
}

impl Strings {
    fn get(&self, id: u64) -> Option<&str> {
        let i = usize::try_from(id).ok()?;
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.text.get(start..end)
    }

    fn push(&mut self, s: &[u8]) -> Result<(), Malformed> {
        self.text.push_str(&String::from_utf8_lossy(s));
        let end = u32::try_from(self.text.len()).map_err(|_| Malformed)?;
        self.ends.push(end);
        Ok(())
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// Where the next chunk comes from: the file (buffered) or bytes already in memory.
type Source = Box<dyn Read>;

/// Which task rows of an interval the reader hands out (see [`Reader::keep_rows`]).
type RowFilter = Box<dyn FnMut(KeyParts<'_>) -> bool>;

/// Parsed cgroup names kept at most this many at once (under container churn a file can name a
/// cgroup per task; they are parsed again when needed).
const CGROUP_NAMES_CACHED: usize = 4096;

/// The names of the cgroups task rows have used so far, parsed once from their paths (at most
/// [`CGROUP_NAMES_CACHED`]).
#[derive(Default)]
struct CgroupNamesCache(HashMap<u64, CgroupNames>);

impl CgroupNamesCache {
    /// Cgroup `id`'s names, from its path in the file's tables: one lookup when known.
    fn get(
        &mut self,
        id: u64,
        cgroups: &HashMap<u64, u32>,
        strings: &Strings,
    ) -> Option<&CgroupNames> {
        if self.0.len() >= CGROUP_NAMES_CACHED && !self.0.contains_key(&id) {
            self.0.clear();
        }
        match self.0.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                let sid = *cgroups.get(&id)?;
                Some(v.insert(names_of_path(strings.get(u64::from(sid))?)))
            }
        }
    }
}

pub struct Reader {
    path: PathBuf,
    header: RecordHeader,
    specs: Vec<SlotSpec>,
    src: Source,
    /// File offset of the next chunk.
    pos: u64,
    /// The current chunk (type, length, payload, CRC), reused: memory stays one chunk, at most
    /// [`MAX_CHUNK`], whatever the size of the file.
    chunk: BytesMut,
    strings: Strings,
    tasks: Vec<TaskDef>,
    /// Cgroup id → its path's string id, from the file's CGROUPS chunks (none in recordings
    /// made before they existed: paths read null).
    cgroups: HashMap<u64, u32>,
    cgroup_names: CgroupNamesCache,
    status: ReadStatus,
    has_bytes: bool,
    ended: bool,
    continued: bool,
    /// The type of the last chunk decoded (a LATENCY chunk fills only the INTERVAL right
    /// before it).
    last_kind: u8,
    /// Rows not kept are read past without being built (memory: the rows kept).
    filter: Option<RowFilter>,
    /// The filter's answer per task id (0: not asked yet, 1: kept, 2: left out): it depends
    /// only on the task, so each is asked once per file.
    kept: Vec<u8>,
    /// [`traffic_amount`](crate::attribution::traffic_amount) of the last interval, over all
    /// its rows, kept or not.
    last_amount: f64,
    /// Per task id: of the recorded command's tree (COMMAND_TASKS chunks)?
    members: Vec<bool>,
    /// Hand out only the command's rows (see [`command_only`](Self::command_only)).
    command_only: bool,
    /// The last interval's attributed traffic (bytes, or a stand-in's counts), all rows and
    /// the command's rows.
    last_attributed: f64,
    last_command: f64,
    /// The chunk after an interval, read to fill the interval's latency, when it was another
    /// item: handed out next.
    ahead: Option<Ahead>,
}

/// Largest JSON header a reader accepts (real ones are a few KiB).
const MAX_HEADER: usize = 1 << 20;

/// Reads until `buf` is full or the input ends; the number of bytes read.
/// The `k`-th of a list of task ids written as deltas, after `prev`: ids strictly rise, so a
/// zero delta after the first is malformed (each task at most once).
fn rising_id(c: &mut Cursor, k: usize, prev: u64) -> Result<u64, Malformed> {
    let delta = c.varint()?;
    if k > 0 && delta == 0 {
        return Err(Malformed);
    }
    prev.checked_add(delta).ok_or(Malformed)
}

fn read_full(src: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Reader {
    /// Opens a recording and reads its header; the chunks are read one at a time as they are
    /// asked for. Anything but a regular file (a FIFO, a directory, `/dev/zero`) is refused
    /// before it is read.
    pub fn open(path: &Path) -> Result<Reader, RecordError> {
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = crate::sys::file::open_regular(path).map_err(io)?;
        Self::from_reader(path, Box::new(BufReader::with_capacity(1 << 16, file)))
    }

    /// Parses a recording already in memory (`path` names it in messages).
    pub fn from_bytes(path: &Path, data: Vec<u8>) -> Result<Reader, RecordError> {
        Self::from_reader(path, Box::new(std::io::Cursor::new(data)))
    }

    /// Reads the header from `src`; the chunks follow on demand.
    pub fn from_reader(path: &Path, mut src: Source) -> Result<Reader, RecordError> {
        let bad = |reason: &str| RecordError::BadHeader {
            path: path.to_path_buf(),
            reason: reason.to_owned(),
        };
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut fixed = [0u8; 14];
        let got = read_full(&mut src, &mut fixed).map_err(io)?;
        if got < MAGIC.len() || fixed[..MAGIC.len()] != MAGIC {
            return Err(RecordError::NotARecording {
                path: path.to_path_buf(),
            });
        }
        if got < fixed.len() {
            return Err(bad("cut inside the header"));
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if version > VERSION {
            return Err(RecordError::NewerVersion {
                path: path.to_path_buf(),
                found: version,
            });
        }
        if version == 0 {
            return Err(bad("version 0"));
        }
        let hlen = u32::from_le_bytes([fixed[10], fixed[11], fixed[12], fixed[13]]) as usize;
        if hlen > MAX_HEADER {
            return Err(bad(&format!("header length {hlen} is implausible")));
        }
        let mut json = vec![0u8; hlen + 4];
        if read_full(&mut src, &mut json).map_err(io)? < json.len() {
            return Err(bad("cut inside the header"));
        }
        let crc = json.split_off(hlen);
        if crc32(&[&json]).to_le_bytes()[..] != crc[..] {
            return Err(bad("checksum mismatch"));
        }
        let header: RecordHeader =
            serde_json::from_slice(&json).map_err(|e| bad(&format!("{e}")))?;
        let specs = header.specs().map_err(|e| bad(&e))?;
        let has_bytes = crate::model::measures_bytes(&specs);
        Ok(Reader {
            path: path.to_path_buf(),
            header,
            specs,
            src,
            pos: 18 + hlen as u64,
            chunk: BytesMut::new(),
            strings: Strings::default(),
            tasks: Vec::new(),
            cgroups: HashMap::new(),
            cgroup_names: CgroupNamesCache::default(),
            status: ReadStatus::Reading,
            has_bytes,
            ended: false,
            continued: false,
            last_kind: 0,
            filter: None,
            kept: Vec::new(),
            last_amount: 0.0,
            members: Vec::new(),
            command_only: false,
            last_attributed: 0.0,
            last_command: 0.0,
            ahead: None,
        })
    }

    pub fn header(&self) -> &RecordHeader {
        &self.header
    }

    pub fn specs(&self) -> &[SlotSpec] {
        &self.specs
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn status(&self) -> &ReadStatus {
        &self.status
    }

    /// Hands out only the task rows `keep` says yes to (by their grouping fields); the others
    /// are read past without being built, so an interval of a million rows costs only the rows
    /// kept. Package rows, totals and [`last_amount`](Self::last_amount) still cover every row.
    pub fn keep_rows(&mut self, keep: impl FnMut(KeyParts<'_>) -> bool + 'static) {
        self.filter = Some(Box::new(keep));
        self.kept.clear();
    }

    /// The last interval's traffic (package bytes, or for a stand-in its traffic counts), over
    /// all its rows, the ones [`keep_rows`](Self::keep_rows) left out included.
    pub fn last_amount(&self) -> f64 {
        self.last_amount
    }

    /// Hands out only the rows of the recorded command's tree (nothing from a recording without
    /// one); totals and the amounts still cover every row.
    pub fn command_only(&mut self, yes: bool) {
        self.command_only = yes;
    }

    /// The last interval's attributed traffic over all its rows, kept or not: bytes, or for a
    /// stand-in its traffic counts.
    pub fn last_attributed(&self) -> f64 {
        self.last_attributed
    }

    /// The part of [`last_attributed`](Self::last_attributed) charged to the recorded
    /// command's tree.
    pub fn last_command(&self) -> f64 {
        self.last_command
    }

    /// Tasks of the file's table marked as the recorded command's so far.
    pub fn command_tasks(&self) -> usize {
        self.members.iter().filter(|&&m| m).count()
    }

    /// Tasks the file has defined so far (its task table).
    pub fn tasks_defined(&self) -> usize {
        self.tasks.len()
    }

    /// Cgroup paths the file has defined so far (its cgroup table).
    pub fn cgroups_defined(&self) -> usize {
        self.cgroups.len()
    }

    /// Bytes read so far (the header and every chunk handed out, and the one read ahead after
    /// an interval to find its LATENCY chunk).
    pub fn offset(&self) -> u64 {
        self.pos
    }

    fn damaged<T>(&mut self, offset: u64, reason: impl Into<String>) -> Option<T> {
        self.stop_at(offset, reason.into(), false)
    }

    /// The file ends inside the chunk at `offset`.
    fn cut<T>(&mut self, offset: u64, reason: &str) -> Option<T> {
        self.stop_at(offset, reason.into(), true)
    }

    fn stop_at<T>(&mut self, offset: u64, reason: String, cut: bool) -> Option<T> {
        self.status = ReadStatus::Damaged {
            offset,
            reason,
            cut,
        };
        None
    }

    /// The end of the input on a chunk boundary: how the file ended.
    fn at_end<T>(&mut self) -> Option<T> {
        self.status = if self.ended {
            ReadStatus::Complete
        } else if self.continued {
            ReadStatus::Continued
        } else {
            ReadStatus::Unfinished
        };
        None
    }

    /// The next interval or tick block; None at the end or at the first damage (see
    /// [`status`](Self::status)). An interval comes with its packages' latency and utilisation
    /// where the LATENCY chunk after it holds them (null elsewhere, and in recordings made
    /// before they were stored), so the chunk after each interval is read before it is handed
    /// out.
    pub fn next_item(&mut self) -> Option<Item> {
        let (item, amounts) = match self.ahead.take() {
            Some(ahead) => ahead,
            None => loop {
                // A LATENCY chunk with no interval before it has nothing to fill.
                if let Step::Item(item) = self.next_step()? {
                    break (item, self.amounts());
                }
            },
        };
        let Item::Interval(mut iv) = item else {
            return Some(item);
        };
        loop {
            match self.next_step() {
                Some(Step::Latency(l)) => latency::apply(&mut iv, l),
                Some(Step::Tiers(t)) => super::tiers::apply(&mut iv, t),
                Some(Step::Item(next)) => {
                    self.ahead = Some((next, self.amounts()));
                    break;
                }
                None => break,
            }
        }
        (self.last_amount, self.last_attributed, self.last_command) =
            (amounts[0], amounts[1], amounts[2]);
        Some(Item::Interval(iv))
    }

    /// The per-interval figures of the last interval decoded.
    fn amounts(&self) -> [f64; 3] {
        [self.last_amount, self.last_attributed, self.last_command]
    }

    /// The next data chunk (the tables before it applied); None at the end or at the first
    /// damage.
    fn next_step(&mut self) -> Option<Step> {
        loop {
            if self.status != ReadStatus::Reading {
                return None;
            }
            let at = self.pos;
            let mut head = [0u8; 5];
            let got = match read_full(&mut self.src, &mut head) {
                Ok(n) => n,
                Err(e) => return self.damaged(at, format!("read error: {e}")),
            };
            if got == 0 {
                return self.at_end();
            }
            if got < head.len() {
                return self.cut(at, "file cut inside a chunk header");
            }
            let kind = head[0];
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
            if len > MAX_CHUNK {
                return self.damaged(at, format!("chunk length {len} is implausible"));
            }
            // Payload and CRC, read as they come (a cut file never allocates its claimed
            // length up front).
            self.chunk.clear();
            self.chunk.extend_from_slice(&head);
            let want = u64::from(len) + 4;
            let mut w = (&mut self.chunk).writer();
            let copied = std::io::copy(&mut (&mut self.src).take(want), &mut w);
            match copied {
                Ok(n) if n == want => {}
                Ok(_) => return self.cut(at, "file cut inside a chunk"),
                Err(e) => return self.damaged(at, format!("read error: {e}")),
            }
            let end = 5 + len as usize;
            if crc32(&[&self.chunk[..end]]).to_le_bytes()[..] != self.chunk[end..] {
                return self.damaged(at, "chunk checksum mismatch");
            }
            let chunk = std::mem::take(&mut self.chunk);
            let r = self.decode(kind, &chunk[5..end]);
            self.chunk = chunk;
            let previous = std::mem::replace(&mut self.last_kind, kind);
            let after_interval = matches!(previous, CHUNK_INTERVAL | CHUNK_LATENCY | CHUNK_TIERS);
            match r {
                // FORMAT.md: a LATENCY or TIERS chunk with no INTERVAL right before it (or
                // before the other of them) fills nothing.
                Ok(Some(Step::Latency(_) | Step::Tiers(_))) if !after_interval => {
                    self.pos = at + 5 + want;
                }
                Ok(Some(item)) => {
                    self.pos = at + 5 + want;
                    return Some(item);
                }
                Ok(None) => self.pos = at + 5 + want,
                Err(Malformed) => {
                    return self.damaged(at, format!("malformed chunk of type {kind}"));
                }
            }
        }
    }

    fn decode(&mut self, kind: u8, payload: &[u8]) -> Result<Option<Step>, Malformed> {
        let mut c = Cursor::new(payload);
        let item = |i| Some(Step::Item(i));
        match kind {
            CHUNK_STRINGS => self.decode_strings(&mut c).map(|()| None),
            CHUNK_TASKS => self.decode_tasks(&mut c).map(|()| None),
            CHUNK_COMMAND_TASKS => self.decode_command_tasks(&mut c).map(|()| None),
            CHUNK_CGROUPS => self.decode_cgroups(&mut c).map(|()| None),
            CHUNK_INTERVAL => self
                .decode_interval(&mut c)
                .map(|iv| item(Item::Interval(iv))),
            CHUNK_TICKS => self
                .decode_ticks(&mut c, false)
                .map(|t| item(Item::Ticks(t))),
            CHUNK_TICKS2 => self
                .decode_ticks(&mut c, true)
                .map(|t| item(Item::Ticks(t))),
            CHUNK_LATENCY => {
                let max = self.header.packages.len().max(1);
                let string = |id| self.strings.get(id).map(str::to_owned);
                latency::decode(&mut c, max, string).map(|l| Some(Step::Latency(l)))
            }
            CHUNK_TIERS => {
                let max = self.header.packages.len().max(1);
                super::tiers::decode(&mut c, max).map(|t| Some(Step::Tiers(t)))
            }
            CHUNK_STACKS | CHUNK_STACKS2 => {
                let string = |id| self.strings.get(id).map(str::to_owned);
                let layout = match kind {
                    CHUNK_STACKS => super::stacks::Layout::Stacks,
                    _ => super::stacks::Layout::Stacks2,
                };
                super::stacks::decode(&mut c, layout, string).map(|b| item(Item::Stacks(b)))
            }
            CHUNK_END => {
                self.ended = true;
                Ok(None)
            }
            CHUNK_CONTINUED => {
                self.continued = true;
                Ok(None)
            }
            // Chunk types from a newer minor revision: skipped (FORMAT.md, compatibility).
            _ => Ok(None),
        }
    }

    /// STRINGS: more of the string table.
    fn decode_strings(&mut self, c: &mut Cursor) -> Result<(), Malformed> {
        let n = c.count()?;
        for _ in 0..n {
            let len = c.count()?;
            self.strings.push(c.bytes(len)?)?;
        }
        Ok(())
    }

    /// TASKS: more task definitions, each naming its command by a string already defined.
    fn decode_tasks(&mut self, c: &mut Cursor) -> Result<(), Malformed> {
        let n = c.count()?;
        for _ in 0..n {
            let pid = c.varint_u32()?;
            let tgid = c.varint_u32()?;
            let cgroup = c.varint()?;
            let sid = c.varint()?;
            if sid >= self.strings.len() as u64 {
                return Err(Malformed);
            }
            self.tasks.push(TaskDef {
                pid,
                tgid,
                cgroup,
                comm: sid as u32,
            });
        }
        Ok(())
    }

    /// COMMAND_TASKS: which tasks the file defined belong to the recorded command.
    fn decode_command_tasks(&mut self, c: &mut Cursor) -> Result<(), Malformed> {
        let n = c.count()?;
        let mut id = 0u64;
        for k in 0..n {
            id = rising_id(c, k, id)?;
            // Only tasks the file defined: memory follows the task table.
            let i = usize::try_from(id).map_err(|_| Malformed)?;
            if i >= self.tasks.len() {
                return Err(Malformed);
            }
            if self.members.len() <= i {
                self.members.resize(i + 1, false);
            }
            self.members[i] = true;
        }
        Ok(())
    }

    /// CGROUPS: cgroup ids and their paths (a string already defined); a restated id's names
    /// are parsed again.
    fn decode_cgroups(&mut self, c: &mut Cursor) -> Result<(), Malformed> {
        let n = c.count()?;
        for _ in 0..n {
            let id = c.varint()?;
            let sid = c.varint()?;
            if sid >= self.strings.len() as u64 {
                return Err(Malformed);
            }
            self.cgroups.insert(id, sid as u32);
            self.cgroup_names.0.remove(&id);
        }
        Ok(())
    }

    /// A task's command name.
    fn comm(&self, def: &TaskDef) -> &str {
        self.strings.get(u64::from(def.comm)).unwrap_or_default()
    }

    /// The names of a cgroup the file defined, parsed from its path at first use.
    fn cgroup_names(&mut self, id: u64) -> Option<&CgroupNames> {
        self.cgroup_names.get(id, &self.cgroups, &self.strings)
    }

    /// The writer's limits hold here too, so memory follows the file's tables, never a count
    /// it claims: at most one package row per package of the header, task rows only for tasks
    /// the file defined, each at most once (ids strictly rising), nothing reserved up front.
    fn decode_interval(&mut self, c: &mut Cursor) -> Result<IntervalResult, Malformed> {
        let t_start_ns = c.varint()?;
        let t_end_ns = t_start_ns.checked_add(c.varint()?).ok_or(Malformed)?;
        let lost_samples = c.varint()?;
        let unattributed_bytes = c.varint()?;
        let den = c.varint()? as f64;
        let npkg = c.count()?;
        if npkg > self.header.packages.len().max(1) {
            return Err(Malformed);
        }
        let mut packages = Vec::new();
        for _ in 0..npkg {
            packages.push(PackageRow {
                id: c.varint_u32()?,
                read_bytes: c.varint()?,
                write_bytes: c.varint()?,
                total_bytes: c.varint()?,
                ..PackageRow::default()
            });
        }
        let basis = if self.has_bytes {
            ShareBasis::Bytes(package_bytes(&packages))
        } else {
            ShareBasis::Counts(den)
        };
        let nrows = c.count()?;
        if nrows > self.tasks.len() {
            return Err(Malformed);
        }
        let mut tasks = Vec::new();
        let mut filter = self.filter.take();
        let (mut all_counts, mut all_shares) = (0.0, 0.0);
        (self.last_attributed, self.last_command) = (0.0, 0.0);
        let rows = self.decode_rows(c, nrows, basis, &mut filter, |row, counts, share| {
            all_counts += counts;
            all_shares += share;
            if let Some(row) = row {
                tasks.push(row);
            }
        });
        self.filter = filter;
        rows?;
        self.last_amount = amount_of(package_bytes(&packages), all_counts, all_shares);
        sort_rows(&mut tasks);
        // The device part, where the recording keeps it (after the rows).
        let device_bytes = if c.remaining() > 0 {
            c.varint()?.min(unattributed_bytes)
        } else {
            0
        };
        Ok(IntervalResult {
            t_start_ns,
            t_end_ns,
            source: self.header.source.clone(),
            packages,
            tasks,
            unattributed_bytes,
            unattributed: crate::model::result::Unattributed {
                device_bytes,
                other_bytes: unattributed_bytes - device_bytes,
            },
            lost_samples,
            weighting: Some(self.weighting()),
            weight_fallbacks: 0,
        })
    }

    /// An interval's `nrows` task rows: each one's row (None when the filter leaves it out),
    /// traffic counts and share go to `out`.
    fn decode_rows(
        &mut self,
        c: &mut Cursor,
        nrows: usize,
        basis: ShareBasis,
        filter: &mut Option<RowFilter>,
        mut out: impl FnMut(Option<TaskRow>, f64, f64),
    ) -> Result<(), Malformed> {
        let mut id = 0u64;
        let (mut attributed, mut command) = (0.0, 0.0);
        for k in 0..nrows {
            id = rising_id(c, k, id)?;
            let def = *self.tasks.get(id as usize).ok_or(Malformed)?;
            let mut counts = [0.0; MAX_SLOTS];
            for count in counts.iter_mut().take(self.specs.len()) {
                *count = c.varint()? as f64;
            }
            let (read_bytes, write_bytes, total_bytes) = bytes_of(&self.specs, &counts);
            let bytes = read_bytes + write_bytes + total_bytes;
            let traffic = traffic_counts(&self.specs, &counts);
            let share = basis.share(bytes, traffic);
            let amount = if self.has_bytes {
                bytes as f64
            } else {
                traffic
            };
            attributed += amount;
            let member = self.members.get(id as usize).copied().unwrap_or(false);
            if member {
                command += amount;
            }
            (self.last_attributed, self.last_command) = (attributed, command);
            if (self.command_only && !member) || !self.kept_by(id as usize, &def, filter) {
                out(None, traffic, share);
                continue;
            }
            let mut row = TaskRow {
                pid: def.pid,
                tgid: def.tgid,
                comm: self.comm(&def).to_owned(),
                cgroup: def.cgroup,
                read_bytes,
                write_bytes,
                total_bytes,
                share,
                values: self
                    .specs
                    .iter()
                    .zip(counts)
                    .map(|(spec, v)| (spec.event.clone(), v))
                    .collect(),
                ..TaskRow::default()
            };
            if let Some(n) = self.cgroup_names(def.cgroup) {
                row.set_cgroup_names(n);
            }
            out(Some(row), traffic, share);
        }
        Ok(())
    }

    /// Whether the row filter keeps task `id` (defined as `def`): asked once per task, the
    /// answer kept for its later rows.
    fn kept_by(&mut self, id: usize, def: &TaskDef, filter: &mut Option<RowFilter>) -> bool {
        let known = self.kept.get(id).copied().unwrap_or(0);
        if known == 2 {
            return false;
        }
        let (Some(keep), 0) = (filter.as_mut(), known) else {
            return true;
        };
        let names = self
            .cgroup_names
            .get(def.cgroup, &self.cgroups, &self.strings);
        let comm = self.strings.get(u64::from(def.comm)).unwrap_or_default();
        let parts = KeyParts {
            pid: def.pid,
            tgid: def.tgid,
            comm,
            cgroup: def.cgroup,
            container_id: names.and_then(|n| n.container_id.as_deref()),
            pod_uid: names.and_then(|n| n.pod_uid.as_deref()),
        };
        let yes = keep(parts);
        if self.kept.len() <= id {
            self.kept.resize(id + 1, 0);
        }
        self.kept[id] = if yes { 1 } else { 2 };
        yes
    }

    /// How the run divided package traffic: as its header says, else as its slots show.
    pub fn weighting(&self) -> crate::model::Weighting {
        self.header.weighting.clone().unwrap_or_else(|| {
            crate::model::Weighting::from_slots(&self.header.specs().unwrap_or_default())
        })
    }

    /// TICKS, or with `v2` TICKS2 (a byte for the kind, an aggregate's period and on-CPU time).
    fn decode_ticks(&self, c: &mut Cursor, v2: bool) -> Result<Vec<Record>, Malformed> {
        let n = c.count()?;
        if n > TICKS_PER_CHUNK {
            return Err(Malformed);
        }
        let base = c.varint()?;
        let mut out = Vec::with_capacity(n);
        let mut prev: HashMap<u32, (u64, [SlotReading; MAX_SLOTS])> = HashMap::new();
        for _ in 0..n {
            let cpu = c.varint_u32()?;
            if cpu >= 1 << 16 {
                return Err(Malformed);
            }
            let (kind, nr) = if v2 {
                let kind = c.byte()?;
                (kind, c.byte()? as usize)
            } else {
                let kn = c.byte()?;
                (kn & 1, (kn >> 1) as usize)
            };
            let failed_mask = c.byte()?;
            if nr > MAX_SLOTS {
                return Err(Malformed);
            }
            let pv = prev
                .entry(cpu)
                .or_insert((base, [SlotReading::default(); MAX_SLOTS]));
            let t = pv.0.wrapping_add(unzigzag(c.varint()?) as u64);
            let tid = c.varint()?;
            let def = self.tasks.get(tid as usize).ok_or(Malformed)?;
            let mut comm = [0u8; 16];
            let b = self.comm(def).as_bytes();
            let k = b.len().min(16);
            comm[..k].copy_from_slice(&b[..k]);
            let (t0_ns, on_ns) = if v2 && kind == KIND_AGGREGATE {
                let period = c.varint()?;
                let on = c.varint()?;
                if period > t || on > period {
                    return Err(Malformed);
                }
                (t - period, on)
            } else {
                (0, 0)
            };
            let mut slots = [SlotReading::default(); MAX_SLOTS];
            for (s, slot) in slots.iter_mut().enumerate().take(nr) {
                let dv = unzigzag(c.varint()?);
                let de = unzigzag(c.varint()?);
                let dr = de.wrapping_sub(unzigzag(c.varint()?));
                let a = pv.1[s];
                *slot = SlotReading {
                    value: a.value.wrapping_add(dv as u64),
                    enabled: a.enabled.wrapping_add(de as u64),
                    running: a.running.wrapping_add(dr as u64),
                };
            }
            pv.0 = t;
            pv.1[..nr].copy_from_slice(&slots[..nr]);
            out.push(Record {
                t_ns: t,
                cgroup_id: def.cgroup,
                cpu,
                pid: def.pid,
                tgid: def.tgid,
                kind,
                nr_slots: nr as u8,
                failed_mask,
                flags: 0,
                comm,
                t0_ns,
                on_ns,
                slots,
            });
        }
        Ok(out)
    }
}

impl Iterator for Reader {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        self.next_item()
    }
}
