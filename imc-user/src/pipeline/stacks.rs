//! The stacks of each drain resolved into frames while their processes still run, on a thread
//! of their own: a binary's first symbolization reads its symbols and debug information, which
//! can take seconds, and the sampling loop must not wait for it (its rings would fill and its
//! intervals close late). Each (process, stack) is resolved once and kept, so a short-lived
//! process keeps its frames after it is gone, and a recording needs neither the process nor
//! its binaries. A drain's batch is handed on once every stack it names is resolved, in drain
//! order; the run's end waits for the last ones.
use crate::model::stacks::{
    Frame, LOST_STACK_FRAME, OWN_STACK_FRAME, StackBatch, StackCharge, TRUNCATED_FRAME,
    UNRESOLVED_FRAME,
};
use crate::sampler::RecordSource;
use crate::sampler::stacks::StackEntry;
use crate::symbols::SymbolizerStats;
use imc_common::{NO_STACK, STACK_DEPTH, StackCounts};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Turns addresses into frames (the symbolizer; a plain one in tests).
pub trait FrameSource {
    /// One frame per user address of process `tgid` (leaf first).
    fn user_frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame>;
    /// One frame per kernel address.
    fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame>;
    /// Where process `tgid`'s code is (its `maps` text, its executable's device and inode),
    /// read when its first stack was drained, for resolving its stacks after it is gone.
    fn prepare(&mut self, _tgid: u32, _maps: &[u8], _exe: Option<(u64, u64)>) {}
    /// What resolving has met so far, where the source counts it.
    fn stats(&self) -> Option<SymbolizerStats> {
        None
    }
}

/// Makes the frame source on the resolving thread (a symbolizer need not be `Send`).
pub type MakeFrames = Box<dyn FnOnce() -> Box<dyn FrameSource> + Send>;

/// Stacks kept resolved at once, at most: past it the cache starts afresh (a stack seen again
/// is resolved again).
const CACHE_MAX: usize = 200_000;
/// Bytes of a process's maps read at most (a process with more mappings is read in part, its
/// later mappings resolved from its maps read again, while it lives).
const MAPS_MAX: u64 = 16 << 20;
/// How long the run's end waits for the next stack to be resolved: it waits on while stacks
/// keep coming back (a large binary's first symbolization takes seconds), up to FINISH_MAX.
const FINISH_IDLE: Duration = Duration::from_secs(10);
const FINISH_MAX: Duration = Duration::from_secs(120);
/// New processes whose maps are read at the kernel's notice between two drains, at most (a
/// burst of process starts costs a bounded number of maps reads).
const EARLY_MAX: u32 = 256;
/// How long after its announcement a process's maps are read a second time: the first read
/// may come while the loader is still mapping the program's libraries, whose frames a process
/// gone by its drain could not otherwise be resolved in.
const REREAD_AFTER: Duration = Duration::from_millis(20);
/// The kernel's default timer slack for a thread, in ns (`PR_SET_TIMERSLACK`).
const DEFAULT_TIMER_SLACK_NS: u64 = 50_000;
/// How long the run's end waits before it says what it waits for.
const FINISH_SAY: Duration = Duration::from_secs(1);

/// (tgid, what names its user stack, what names its kernel stack): each a hash of whether the
/// stack was asked for and its addresses. A stack id names a hash bucket, which holds other
/// stacks over a run (its map is emptied each generation), so a stack is known by what it is.
type Key = (u32, u64, u64);

fn stack_name(asked: bool, addresses: &Option<Vec<u64>>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (asked, addresses).hash(&mut h);
    h.finish()
}

/// What a look at the resolving thread's answers found.
enum Taken {
    /// At least one resolved stack.
    Some,
    Nothing,
    /// The thread has ended: nothing more will come.
    ThreadGone,
}

/// What the resolving thread is asked: a process's maps, or a stack.
enum Ask {
    Prepare {
        tgid: u32,
        maps: Vec<u8>,
        exe: Option<(u64, u64)>,
    },
    Resolve(Request),
}

/// Process `tgid`'s executable (device, inode) under `root`; None where it cannot be read: the
/// process is gone or exiting (its maps then read empty), or a kernel thread. Its maps then
/// tell nothing, and the resolver keeps what was read while it ran.
fn exe_of(root: &std::path::Path, tgid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(root.join(format!("proc/{tgid}/exe"))).ok()?;
    Some((m.dev(), m.ino()))
}

/// Process `tgid`'s maps text, where it maps a file's code: maps read mid-exec (the new
/// program not mapped yet) tell nothing, and are read again later.
fn code_maps(root: &std::path::Path, tgid: u32) -> Option<Vec<u8>> {
    let path = root.join(format!("proc/{tgid}/maps"));
    crate::sys::file::read_capped(&path, MAPS_MAX)
        .ok()
        .filter(|m| crate::symbols::maps::maps_file_code(m))
}

/// The resolving thread's ends and what it shares.
struct ResolvingThread {
    requests: Receiver<Ask>,
    done: Sender<(Key, Arc<[Frame]>)>,
    stats: Arc<Mutex<Option<SymbolizerStats>>>,
}

impl ResolvingThread {
    /// Takes maps and stacks until every sender is gone; resolves each stack and sends it back.
    fn run(self, mut frames: Box<dyn FrameSource>) {
        for ask in &self.requests {
            match ask {
                Ask::Prepare { tgid, maps, exe } => frames.prepare(tgid, &maps, exe),
                Ask::Resolve(r) => {
                    if !self.resolve(frames.as_mut(), &r) {
                        return;
                    }
                }
            }
        }
    }

    /// Resolves one stack and sends it back; false where the resolver is gone. A stack whose
    /// resolving fails (a bug, a binary that breaks the reader) is unresolved, and the others
    /// are still resolved.
    fn resolve(&self, frames: &mut dyn FrameSource, r: &Request) -> bool {
        let resolved =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| frames_of(frames, r)));
        let f = resolved.unwrap_or_else(|_| vec![Frame::marker(UNRESOLVED_FRAME)].into());
        if let Some(s) = frames.stats()
            && let Ok(mut shared) = self.stats.lock()
        {
            *shared = Some(s);
        }
        self.done.send((r.key, f)).is_ok()
    }
}

/// A stack to resolve: its addresses, read from the kernel's map at the drain (None: the map
/// holds no such stack, or it was not asked for).
struct Request {
    key: Key,
    user: Option<Vec<u64>>,
    kernel: Option<Vec<u64>>,
    kernel_asked: bool,
}

/// A drain's entries, waiting for their stacks.
struct Pending {
    t_ns: u64,
    /// Each entry's stack, the cgroup its slices ran in, and its counts.
    entries: Vec<(Key, u64, StackCounts)>,
    dropped: u64,
}

/// Resolves each drain's stack entries into [`StackBatch`]es, off the sampling thread.
pub struct StackResolver {
    tx: Option<Sender<Ask>>,
    /// `--root`, where processes' maps are read.
    root: std::path::PathBuf,
    /// The executable each process had when its maps were sent (sent again after an exec).
    prepared: HashMap<u32, (u64, u64)>,
    /// Processes whose executable was looked at in this drain (once per drain is enough).
    seen_this_drain: HashSet<u32>,
    rx: Receiver<(Key, Arc<[Frame]>)>,
    cache: HashMap<Key, Arc<[Frame]>>,
    waiting: HashSet<Key>,
    pending: VecDeque<Pending>,
    entries: Vec<StackEntry>,
    nr_slots: usize,
    dropped_before: u64,
    /// imc's own process, whose stacks are one frame, never resolved ([`OWN_STACK_FRAME`]).
    own: u32,
    /// How long the run's end waits for the next resolved stack ([`FINISH_IDLE`]).
    finish_idle: Duration,
    /// What the resolving thread's frame source has met, as of its last stack.
    stats: Arc<Mutex<Option<SymbolizerStats>>>,
    /// Processes announced since the last drain ([`Self::announced`]); over the run, those whose
    /// maps were read at the announcement and those past [`EARLY_MAX`].
    early_this_drain: u32,
    early_read: u64,
    early_skipped: u64,
    /// Announced processes whose maps were read again ([`REREAD_AFTER`]), and the thread that
    /// reads them.
    reread: Arc<AtomicU64>,
    reread_tx: Option<Sender<(u32, Instant)>>,
    reread_after: Duration,
}

/// A thread of its own that reads each announced process's maps again a while after the first
/// read, and hands them to the resolving thread: on time whatever that thread is resolving (a
/// binary's first symbols take long), and with exact timers (the loop's thread lets the kernel
/// batch its wake-ups).
struct Rereader {
    /// (process, when to read it), in the order announced.
    due: Receiver<(u32, Instant)>,
    to_resolver: Sender<Ask>,
    root: std::path::PathBuf,
    reread: Arc<AtomicU64>,
}

impl Rereader {
    /// Runs until the resolver is dropped (the `due` sender with it).
    fn run(self) {
        // The kernel's default slack: a thread inherits its creator's, and the loop's thread
        // lets its timers run a quarter of a drain period late.
        if let Err(e) = crate::sys::thread::set_timer_slack_ns(DEFAULT_TIMER_SLACK_NS) {
            log::debug!("the maps rereading thread keeps its inherited timer slack: {e}");
        }
        let mut queue: VecDeque<(u32, Instant)> = VecDeque::new();
        loop {
            let next = match queue.front() {
                Some(&(_, at)) => self
                    .due
                    .recv_timeout(at.saturating_duration_since(Instant::now())),
                None => self.due.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match next {
                Ok(d) => queue.push_back(d),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let now = Instant::now();
            while let Some(&(tgid, at)) = queue.front()
                && at <= now
            {
                queue.pop_front();
                if let Some(exe) = exe_of(&self.root, tgid)
                    && let Some(maps) = code_maps(&self.root, tgid)
                    && self
                        .to_resolver
                        .send(Ask::Prepare {
                            tgid,
                            maps,
                            exe: Some(exe),
                        })
                        .is_ok()
                {
                    self.reread.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl StackResolver {
    /// Starts the resolving thread with the frame source `make` builds there; processes'
    /// maps are read under `root`.
    pub fn new(make: MakeFrames, nr_slots: usize, root: &std::path::Path) -> StackResolver {
        StackResolver::start(make, nr_slots, root, REREAD_AFTER)
    }

    /// [`Self::new`], announced processes read again `reread_after` after their first read.
    fn start(
        make: MakeFrames,
        nr_slots: usize,
        root: &std::path::Path,
        reread_after: Duration,
    ) -> StackResolver {
        let (tx, requests) = std::sync::mpsc::channel::<Ask>();
        let (done, rx) = std::sync::mpsc::channel();
        let stats = Arc::new(Mutex::new(None));
        let reread = Arc::new(AtomicU64::new(0));
        let thread = ResolvingThread {
            requests,
            done,
            stats: stats.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("imc-stacks".into())
            .spawn(move || thread.run(make()));
        let (reread_tx, due) = std::sync::mpsc::channel();
        let rereader = Rereader {
            due,
            to_resolver: tx.clone(),
            root: root.to_path_buf(),
            reread: reread.clone(),
        };
        // Without it, an announced process is read once.
        let reread_tx = std::thread::Builder::new()
            .name("imc-maps".into())
            .spawn(move || rereader.run())
            .is_ok()
            .then_some(reread_tx);
        StackResolver {
            // Without the thread every stack stays unresolved (said by its frame).
            tx: spawned.is_ok().then_some(tx),
            root: root.to_path_buf(),
            prepared: HashMap::new(),
            seen_this_drain: HashSet::new(),
            rx,
            cache: HashMap::new(),
            waiting: HashSet::new(),
            pending: VecDeque::new(),
            entries: Vec::new(),
            nr_slots,
            dropped_before: 0,
            own: std::process::id(),
            finish_idle: FINISH_IDLE,
            stats,
            early_this_drain: 0,
            early_read: 0,
            early_skipped: 0,
            reread,
            reread_tx,
            reread_after,
        }
    }

    /// Takes what the kernel charged to stacks since the last drain, asks for the stacks not
    /// resolved yet, and returns the batches whose stacks are all resolved, oldest first.
    pub fn drain(&mut self, src: &mut impl RecordSource, t_ns: u64) -> Vec<StackBatch> {
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        let n = src.drain_stacks(&mut entries);
        self.seen_this_drain.clear();
        self.early_this_drain = 0;
        let dropped_total = src.stacks_dropped();
        let dropped = dropped_total.saturating_sub(self.dropped_before);
        self.dropped_before = dropped_total;
        if n > 0 || dropped > 0 {
            let mut keyed: Vec<(Key, u64, StackCounts)> = Vec::with_capacity(entries.len());
            for e in entries.drain(..) {
                let key = self.ask(e.key.tgid, e.user, e.kernel, e.key.kernel_stack != NO_STACK);
                keyed.push((key, e.key.cgroup, e.counts));
            }
            self.pending.push_back(Pending {
                t_ns,
                entries: keyed,
                dropped,
            });
        }
        self.entries = entries;
        self.take_resolved(None);
        self.ready(false)
    }

    /// The run's end: waits for the stacks still being resolved, as long as they keep coming
    /// back (a bounded time), and returns every batch left; a stack not resolved by then is
    /// shown as unresolved.
    /// `notice` is told, in one line each, what a long wait waits for and what it gave up on.
    pub fn finish(&mut self, notice: &mut dyn FnMut(&str)) -> Vec<StackBatch> {
        let start = Instant::now();
        let (mut last, mut said) = (start, false);
        while !self.waiting.is_empty() {
            let now = Instant::now();
            let until = (start + FINISH_MAX).min(last + self.finish_idle);
            if now >= until {
                break;
            }
            if !said && now - start >= FINISH_SAY {
                said = true;
                notice(&format!(
                    "resolving the frames of the last {} stacks (each binary's symbols are read once)",
                    self.waiting.len()
                ));
            }
            match self.take_resolved(Some((until - now).min(FINISH_SAY))) {
                Taken::Some => last = Instant::now(),
                Taken::Nothing => {}
                Taken::ThreadGone => break,
            }
        }
        if !self.waiting.is_empty() {
            notice(&format!(
                "{} stacks were not resolved in {:.1} s: their frames read {UNRESOLVED_FRAME}",
                self.waiting.len(),
                start.elapsed().as_secs_f64()
            ));
        }
        self.ready(true)
    }

    /// What resolving met over the run, in one line (`-v`); None where the frame source
    /// counts nothing or has resolved no stack.
    pub fn summary(&self) -> Option<String> {
        let stats = self.stats.lock().ok()?;
        let mut line = stats.as_ref()?.summary();
        line.push_str(&format!(
            "; {} processes' maps read as they made their first stack ({} again {} ms later)",
            self.early_read,
            self.reread.load(Ordering::Relaxed),
            REREAD_AFTER.as_millis()
        ));
        if self.early_skipped > 0 {
            line.push_str(&format!(
                " ({} more past {EARLY_MAX} between two drains)",
                self.early_skipped
            ));
        }
        Some(line)
    }

    /// The key of a drained stack, asking the resolving thread for its frames where they are
    /// neither known nor asked for already.
    fn ask(
        &mut self,
        tgid: u32,
        user: Option<Vec<u64>>,
        kernel: Option<Vec<u64>>,
        kernel_asked: bool,
    ) -> Key {
        if tgid == self.own {
            let key = (tgid, 0, 0);
            self.cache
                .entry(key)
                .or_insert_with(|| vec![Frame::marker(OWN_STACK_FRAME)].into());
            return key;
        }
        let key = (
            tgid,
            stack_name(true, &user),
            stack_name(kernel_asked, &kernel),
        );
        if self.cache.contains_key(&key) || self.waiting.contains(&key) {
            return key;
        }
        self.prepare(tgid);
        let req = Request {
            key,
            user,
            kernel,
            kernel_asked,
        };
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send(Ask::Resolve(req)).is_ok());
        if sent {
            self.waiting.insert(key);
        } else {
            self.cache
                .insert(key, vec![Frame::marker(UNRESOLVED_FRAME)].into());
        }
        key
    }

    /// Reads process `tgid`'s maps now, while it runs, for the resolving thread, unless they
    /// were sent for the same executable already (a drain's new stacks of a known process cost
    /// one stat of its executable).
    fn prepare(&mut self, tgid: u32) {
        if self.seen_this_drain.insert(tgid) {
            self.send_maps(tgid, false);
        }
    }

    /// A process that made its first stack entry (the kernel's notice): its maps are read now,
    /// while it runs, however short its life. At most [`EARLY_MAX`] between two drains; past
    /// that, a process's maps are read when its stacks are drained, as they would be anyway.
    pub fn announced(&mut self, tgid: u32) {
        if tgid == self.own {
            return;
        }
        if self.early_this_drain >= EARLY_MAX {
            self.early_skipped += 1;
            return;
        }
        self.early_this_drain += 1;
        if self.send_maps(tgid, true) {
            self.early_read += 1;
        }
    }

    /// Reads process `tgid`'s maps and sends them to the resolving thread, unless they were
    /// sent for its executable already and the process is not `new` (the kernel's word: it
    /// may have exec'ed the same binary, laid out anew; its maps are then read again shortly
    /// after, by the rereading thread); returns whether they were sent.
    fn send_maps(&mut self, tgid: u32, new: bool) -> bool {
        let Some(exe) = exe_of(&self.root, tgid) else {
            return false;
        };
        if !new && self.prepared.get(&tgid) == Some(&exe) {
            return false;
        }
        let Some(maps) = code_maps(&self.root, tgid) else {
            return false;
        };
        if self.prepared.len() >= CACHE_MAX {
            self.prepared.clear();
        }
        self.prepared.insert(tgid, exe);
        let sent = self.tx.as_ref().is_some_and(|tx| {
            tx.send(Ask::Prepare {
                tgid,
                maps,
                exe: Some(exe),
            })
            .is_ok()
        });
        if sent
            && new
            && let Some(r) = &self.reread_tx
        {
            let _ = r.send((tgid, Instant::now() + self.reread_after));
        }
        sent
    }

    /// Takes the resolved stacks that are back (waiting up to `wait` for one, where given).
    fn take_resolved(&mut self, wait: Option<Duration>) -> Taken {
        let mut taken = Taken::Nothing;
        if let Some(w) = wait {
            match self.rx.recv_timeout(w) {
                Ok((k, f)) => {
                    self.keep(k, f);
                    taken = Taken::Some;
                }
                Err(RecvTimeoutError::Timeout) => return Taken::Nothing,
                Err(RecvTimeoutError::Disconnected) => return Taken::ThreadGone,
            }
        }
        while let Ok((k, f)) = self.rx.try_recv() {
            self.keep(k, f);
            taken = Taken::Some;
        }
        taken
    }

    fn keep(&mut self, k: Key, f: Arc<[Frame]>) {
        self.waiting.remove(&k);
        if self.cache.len() >= CACHE_MAX && self.waiting.is_empty() && self.pending.is_empty() {
            self.cache.clear();
        }
        self.cache.insert(k, f);
    }

    /// The pending batches, oldest first, whose stacks are all resolved (all of them, with
    /// unresolved frames for what is missing, when `all`).
    fn ready(&mut self, all: bool) -> Vec<StackBatch> {
        let mut out = Vec::new();
        while let Some(p) = self.pending.front() {
            if !all && p.entries.iter().any(|(k, ..)| !self.cache.contains_key(k)) {
                break;
            }
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let charges = p
                .entries
                .iter()
                .map(|(k, cgroup, c)| StackCharge {
                    tgid: k.0,
                    cgroup: Some(*cgroup),
                    frames: self
                        .cache
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| vec![Frame::marker(UNRESOLVED_FRAME)].into()),
                    on_ns: c.on_ns,
                    slices: c.slices,
                    slots: c.slots[..self.nr_slots.min(c.slots.len())].to_vec(),
                })
                .collect();
            out.push(StackBatch {
                t_ns: p.t_ns,
                charges,
                dropped: p.dropped,
            });
        }
        out
    }
}

/// A stack's frames: kernel frames (where taken) then user frames, each leaf first; a stack
/// the map did not hold is one marker, one cut at the depth limit ends in another.
fn frames_of(src: &mut dyn FrameSource, r: &Request) -> Arc<[Frame]> {
    let mut frames = Vec::new();
    let mut cut = false;
    if r.kernel_asked {
        match &r.kernel {
            Some(a) => {
                cut |= a.len() >= STACK_DEPTH;
                frames.extend(src.kernel_frames(a));
            }
            None => frames.push(Frame::marker(LOST_STACK_FRAME)),
        }
    }
    match &r.user {
        Some(a) => {
            cut |= a.len() >= STACK_DEPTH;
            frames.extend(src.user_frames(r.key.0, a));
        }
        None => frames.push(Frame::marker(LOST_STACK_FRAME)),
    }
    if cut {
        frames.push(Frame::marker(TRUNCATED_FRAME));
    }
    frames.into()
}

impl FrameSource for crate::symbols::Symbolizer {
    fn user_frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        crate::symbols::Symbolizer::user_frames(self, tgid, addrs)
    }
    fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
        crate::symbols::Symbolizer::kernel_frames(self, addrs)
    }
    fn prepare(&mut self, tgid: u32, maps: &[u8], exe: Option<(u64, u64)>) {
        crate::symbols::Symbolizer::prepare(self, tgid, maps, exe);
    }
    fn stats(&self) -> Option<SymbolizerStats> {
        Some(crate::symbols::Symbolizer::stats(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SlotSpec;
    use crate::sampler::ChannelReading;
    use imc_common::{Record, StackKey};
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A sampler that has only stack entries to drain.
    struct Entries(Vec<StackEntry>);

    impl RecordSource for Entries {
        fn slots(&self) -> &[SlotSpec] {
            &[]
        }
        fn drain_append(&mut self, _out: &mut Vec<Record>) -> usize {
            0
        }
        fn lost_records(&self) -> u64 {
            0
        }
        fn read_idle_packages(
            &mut self,
            _all: bool,
            _f: impl FnMut(u32, usize, u64, u64),
        ) -> usize {
            0
        }
        fn read_channels(&self) -> Vec<ChannelReading> {
            Vec::new()
        }
        fn take_wakes(&mut self) -> Vec<u32> {
            Vec::new()
        }
        fn drain_stacks(&mut self, out: &mut Vec<StackEntry>) -> usize {
            let n = self.0.len();
            out.append(&mut self.0);
            n
        }
    }

    /// A frame per address, named `f<hex>`.
    fn named(addrs: &[u64]) -> Vec<Frame> {
        addrs
            .iter()
            .map(|a| Frame::marker(&format!("f{a:x}")))
            .collect()
    }

    /// Names every address `f<hex>`, counting the user stacks it is asked for.
    struct Named(Arc<AtomicUsize>);

    impl FrameSource for Named {
        fn user_frames(&mut self, _tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            self.0.fetch_add(1, Ordering::Relaxed);
            named(addrs)
        }
        fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
            addrs
                .iter()
                .map(|a| Frame::marker(&format!("k{a:x}")))
                .collect()
        }
    }

    fn entry(tgid: u32, user: &[u64]) -> StackEntry {
        StackEntry {
            key: StackKey {
                tgid,
                user_stack: 1,
                kernel_stack: NO_STACK,
                cgroup: 5,
                ..Default::default()
            },
            counts: StackCounts {
                slices: 1,
                ..Default::default()
            },
            user: Some(user.to_vec()),
            kernel: None,
        }
    }

    #[test]
    fn imcs_own_stacks_are_one_frame_and_never_resolved() {
        let asked = Arc::new(AtomicUsize::new(0));
        let source = Named(asked.clone());
        let mut r = StackResolver::new(Box::new(move || Box::new(source)), 0, Path::new("/"));
        let me = std::process::id();
        let other = me.wrapping_add(1);
        let mut src = Entries(vec![
            entry(me, &[0x10, 0x20]),
            entry(me, &[0x30]),
            entry(other, &[0x40]),
        ]);
        let mut batches = r.drain(&mut src, 1);
        batches.extend(r.finish(&mut |_| {}));
        assert_eq!(
            labels(&batches),
            [
                (me, vec![OWN_STACK_FRAME.to_string()]),
                (me, vec![OWN_STACK_FRAME.to_string()]),
                (other, vec!["f40".to_string()]),
            ]
        );
        assert_eq!(
            asked.load(Ordering::Relaxed),
            1,
            "resolved imc's own stacks"
        );
        // Each charge is in the cgroup its kernel entry was charged in.
        assert!(
            batches
                .iter()
                .flat_map(|b| &b.charges)
                .all(|c| c.cgroup == Some(5))
        );
    }

    /// Stacks resolved one at a time, `each` apart, past the idle wait.
    struct Slow(Duration);

    impl FrameSource for Slow {
        fn user_frames(&mut self, _tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            std::thread::sleep(self.0);
            named(addrs)
        }
        fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
            self.user_frames(0, addrs)
        }
    }

    fn labels(batches: &[StackBatch]) -> Vec<(u32, Vec<String>)> {
        batches
            .iter()
            .flat_map(|b| &b.charges)
            .map(|c| (c.tgid, c.frames.iter().map(Frame::label).collect()))
            .collect()
    }

    #[test]
    fn the_run_s_end_waits_while_stacks_keep_coming_back() {
        let each = Duration::from_millis(100);
        let mut r = StackResolver::new(Box::new(move || Box::new(Slow(each))), 0, Path::new("/"));
        r.finish_idle = Duration::from_secs(1);
        let other = std::process::id().wrapping_add(1);
        let mut src = Entries((1..=12).map(|a| entry(other, &[a])).collect());
        let mut batches = r.drain(&mut src, 1);
        batches.extend(r.finish(&mut |_| {}));
        // Twelve stacks take 1.2 s, more than the idle wait, and each comes back well within it.
        let want: Vec<_> = (1..=12).map(|a| (other, vec![format!("f{a:x}")])).collect();
        assert_eq!(labels(&batches), want);
    }

    /// Panics on the stacks of one process.
    struct Breaks(u32);

    impl FrameSource for Breaks {
        fn user_frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            assert_ne!(tgid, self.0, "a reader that breaks on this process");
            named(addrs)
        }
        fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
            self.user_frames(0, addrs)
        }
    }

    #[test]
    fn a_stack_whose_resolving_panics_is_unresolved_and_the_next_ones_resolve() {
        let me = std::process::id();
        let (bad, good) = (me.wrapping_add(1), me.wrapping_add(2));
        let mut r = StackResolver::new(Box::new(move || Box::new(Breaks(bad))), 0, Path::new("/"));
        let mut src = Entries(vec![entry(bad, &[0x10]), entry(good, &[0x20])]);
        let mut batches = r.drain(&mut src, 1);
        let mut src = Entries(vec![entry(good, &[0x30])]);
        batches.extend(r.drain(&mut src, 2));
        batches.extend(r.finish(&mut |_| {}));
        assert_eq!(
            labels(&batches),
            [
                (bad, vec![UNRESOLVED_FRAME.to_string()]),
                (good, vec!["f20".to_string()]),
                (good, vec!["f30".to_string()]),
            ]
        );
    }

    /// Each process prepared, with its maps text.
    type PreparedLog = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;

    /// Records the maps each process is prepared with.
    struct Prepared(PreparedLog);

    impl FrameSource for Prepared {
        fn user_frames(&mut self, _tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            named(addrs)
        }
        fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
            self.user_frames(0, addrs)
        }
        fn prepare(&mut self, tgid: u32, maps: &[u8], _exe: Option<(u64, u64)>) {
            self.0.lock().unwrap().push((tgid, maps.to_vec()));
        }
    }

    /// Process `tgid` under `root`: an executable and `maps`; returns its `proc/PID`.
    fn fake_process(root: &Path, tgid: u32, maps: &[u8]) -> std::path::PathBuf {
        let dir = root.join(format!("proc/{tgid}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("exe"), b"\x7fELF").unwrap();
        std::fs::write(dir.join("maps"), maps).unwrap();
        dir
    }

    /// Maps read mid-exec (only the new stack mapped) are not taken for the program's: the next
    /// drain's new stacks read them again, and once read whole, they are not read again.
    #[test]
    fn maps_that_map_no_code_are_read_again_at_the_next_new_stack() {
        let root = tempfile::tempdir().unwrap();
        let tgid = std::process::id().wrapping_add(1);
        let dir = fake_process(root.path(), tgid, b"");
        let mid_exec = b"7ffc1000-7ffc3000 rw-p 00000000 00:00 0  [stack]\n".to_vec();
        let whole = [
            &b"55d0c000-55d0d000 r-xp 00001000 08:01 42  /usr/bin/two\n"[..],
            &mid_exec,
        ]
        .concat();
        let seen = PreparedLog::default();
        let source = Prepared(seen.clone());
        let mut r = StackResolver::new(Box::new(move || Box::new(source)), 0, root.path());
        let mut drain = |maps: &[u8], addr: u64| {
            std::fs::write(dir.join("maps"), maps).unwrap();
            r.drain(&mut Entries(vec![entry(tgid, &[addr])]), addr);
        };
        drain(&mid_exec, 1);
        drain(&whole, 2);
        drain(&whole, 3);
        r.finish(&mut |_| {});
        assert_eq!(*seen.lock().unwrap(), [(tgid, whole.clone())]);
    }

    /// A process the kernel announces has its maps read at once; at most EARLY_MAX of them
    /// between two drains, and imc's own never.
    #[test]
    fn announced_processes_have_their_maps_read_at_once_within_the_cap() {
        let root = tempfile::tempdir().unwrap();
        let maps = b"55d0c000-55d0d000 r-xp 00001000 08:01 42  /usr/bin/kid\n";
        let first = std::process::id().wrapping_add(1);
        let tgids: Vec<u32> = (first..).take(EARLY_MAX as usize + 3).collect();
        for &t in &tgids {
            fake_process(root.path(), t, maps);
        }
        let seen = PreparedLog::default();
        let source = Prepared(seen.clone());
        let mut r = StackResolver::new(Box::new(move || Box::new(source)), 0, root.path());
        r.announced(std::process::id());
        for &t in &tgids[..tgids.len() - 1] {
            r.announced(t);
        }
        assert_eq!((r.early_read, r.early_skipped), (u64::from(EARLY_MAX), 2));
        // A drain opens the next window.
        let last = tgids[tgids.len() - 1];
        r.drain(&mut Entries(Vec::new()), 1);
        r.announced(last);
        // A stack resolved after them: the thread has taken every map sent before it.
        r.drain(&mut Entries(vec![entry(last, &[1])]), 2);
        r.finish(&mut |_| {});
        // Each in the order announced (a process read again later comes after).
        let mut prepared: Vec<u32> = Vec::new();
        for (t, _) in seen.lock().unwrap().iter() {
            if !prepared.contains(t) {
                prepared.push(*t);
            }
        }
        let mut want = tgids[..EARLY_MAX as usize].to_vec();
        want.push(last);
        assert_eq!(prepared, want);
    }

    /// An announced process's maps are read again shortly after (the loader may still have
    /// been mapping its libraries at the first read): the later maps are handed in too.
    #[test]
    fn an_announced_process_s_maps_are_read_again_shortly_after() {
        let root = tempfile::tempdir().unwrap();
        let tgid = std::process::id().wrapping_add(1);
        let first = b"55d0c000-55d0d000 r-xp 00001000 08:01 42  /usr/bin/kid\n".to_vec();
        let later = [
            &first[..],
            &b"7f000000-7f100000 r-xp 00000000 08:01 43  /usr/lib/libc.so.6\n"[..],
        ]
        .concat();
        let dir = fake_process(root.path(), tgid, &first);
        let seen = PreparedLog::default();
        let source = Prepared(seen.clone());
        let mut r = StackResolver::start(
            Box::new(move || Box::new(source)),
            0,
            root.path(),
            Duration::from_millis(500),
        );
        r.announced(tgid);
        std::fs::write(dir.join("maps"), &later).unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 2 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*seen.lock().unwrap(), [(tgid, first), (tgid, later)]);
        assert_eq!(r.reread.load(Ordering::Relaxed), 1);
    }
}
