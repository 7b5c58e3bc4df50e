//! The known workloads of `imc validate`, each its own process: imc re-executes itself
//! (`/proc/self/exe validate --workload KIND`) so that the installed binary alone suffices.
//!
//! A workload prepares (its buffers faulted in), says `ready` on stdout and waits; imc opens the
//! truth counters on it and starts the sampler, then writes one byte to its stdin: it works
//! until its stdin closes, then says how many passes it made and exits. It dies with imc
//! (PR_SET_PDEATHSIG), and every workload is in one process group that imc kills at the end.
//!
//! Expected DRAM traffic of a pass over a buffer of B bytes (buffers far beyond the last-level
//! cache): a read streams B in; non-temporal stores write B without reading it first; ordinary
//! stores first read each line for ownership (write-allocate) and later write it back, 2 B;
//! a copy reads the source, reads the destination for ownership and writes it back, 3 B. These
//! are the factors of STREAM's documentation (McCalpin, "STREAM: Sustainable Memory Bandwidth",
//! www.cs.virginia.edu/stream/ref.html, on counting and on write-allocate traffic) and of
//! Intel's optimization manual on non-temporal stores (they bypass the cache and avoid the
//! read-for-ownership).
use crate::sys::process;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Streaming buffers: far beyond the last-level cache of most machines.
pub const BUFFER_BYTES: usize = 64 << 20;
/// The stack of threads that only read a pipe (a workload's stdin, its stderr in imc).
const PIPE_THREAD_STACK: usize = 64 << 10;
/// The page toucher's and the short-lived children's fresh memory per step.
const TOUCH_BYTES: usize = 256 << 10;
const CHILD_BYTES: usize = 64 << 10;

/// One workload: its name (and comm `imcv-NAME`), what it does, and its DRAM traffic per pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kind {
    pub name: &'static str,
    pub what: &'static str,
    /// Expected (read, write) bytes per pass over the buffer; None: no bandwidth kernel.
    pub per_pass: Option<(f64, f64)>,
}

/// Whether this CPU has non-temporal stores imc uses (x86-64's MOVNTI, part of SSE2, which
/// every x86-64 CPU has).
pub const HAS_NT_STORES: bool = cfg!(target_arch = "x86_64");

const B: f64 = BUFFER_BYTES as f64;

pub const KINDS: &[Kind] = &[
    Kind {
        name: "toucher",
        what: "maps fresh pages, writes one byte in each, unmaps them: page faults",
        per_pass: None,
    },
    Kind {
        name: "reader",
        what: "streams reads over a 64 MiB buffer (factor 1)",
        per_pass: Some((B, 0.0)),
    },
    if HAS_NT_STORES {
        Kind {
            name: "nt-writer",
            what: "writes a 64 MiB buffer with non-temporal stores (factor 1)",
            per_pass: Some((0.0, B)),
        }
    } else {
        Kind {
            name: "writer",
            what: "writes a 64 MiB buffer with ordinary stores (write-allocate: factor 2)",
            per_pass: Some((B, B)),
        }
    },
    Kind {
        name: "copier",
        what: "copies one 64 MiB buffer into another (read, read for ownership, write: 3)",
        per_pass: Some((2.0 * B, B)),
    },
    Kind {
        name: "spinner",
        what: "integer arithmetic in registers: no memory traffic, no page fault",
        per_pass: None,
    },
    Kind {
        name: "burst",
        what: "forks short-lived processes that each fault 64 KiB of fresh pages",
        per_pass: None,
    },
    Kind {
        name: "migrator",
        what: "faults fresh pages while moving itself between CPUs",
        per_pass: None,
    },
];

impl Kind {
    pub fn find(name: &str) -> Option<&'static Kind> {
        KINDS.iter().find(|k| k.name == name)
    }

    /// The comm the workload (and the burst's children) run under.
    pub fn comm(&self) -> String {
        format!("imcv-{}", self.name)
    }
}

// ---- the workload's side ------------------------------------------------------------------

/// Runs workload `name` in this process (the hidden `--workload`): prepare, `ready`, wait for
/// the go byte, work until stdin closes, report the passes.
pub fn run_workload(name: &str) -> std::io::Result<()> {
    let kind = Kind::find(name).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("no workload '{name}'"),
        )
    })?;
    // The parent may have died between fork and prctl: then nobody will stop us.
    process::die_with_parent()?;
    if process::parent_pid() == 1 {
        return Ok(());
    }
    process::set_comm(&kind.comm())?;
    let mut work = Work::prepare(kind.name);
    // One step before `ready`, not counted: the code it runs is mapped in now (the kernel maps
    // a binary's pages at their first use, each a page fault), so a spinner faults no more. A
    // page of each buffer is enough to run a pass's code; a whole pass would only take time.
    work.step_over(4096 / 8)?;
    // The thread that waits for the go byte and then for stdin's end starts before `ready`, so
    // that its stack's page faults are not the workload's: a spinner makes none once it goes.
    let stop = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = std::sync::mpsc::sync_channel::<bool>(1);
    // It only reads stdin: a small stack, which leaves the address space to the buffers.
    std::thread::Builder::new()
        .name("go".into())
        .stack_size(PIPE_THREAD_STACK)
        .spawn({
            let stop = stop.clone();
            move || {
                let mut buf = [0u8; 64];
                let mut stdin = std::io::stdin().lock();
                let went = stdin.read(&mut buf).is_ok_and(|n| n > 0);
                let _ = go_tx.send(went);
                while went && stdin.read(&mut buf).is_ok_and(|n| n > 0) {}
                stop.store(true, Ordering::SeqCst);
            }
        })
        .map_err(|e| std::io::Error::new(e.kind(), format!("starting its stdin thread: {e}")))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    if !go_rx.recv().unwrap_or(false) {
        return Ok(());
    }
    let mut passes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        work.step()?;
        passes += 1;
    }
    writeln!(out, "passes {passes}")?;
    out.flush()
}

/// One workload's state: its buffers, faulted in before `ready`.
struct Work {
    name: &'static str,
    a: Vec<u64>,
    b: Vec<u64>,
    cpus: Vec<u32>,
    next_cpu: usize,
    x: u64,
}

impl Work {
    fn prepare(name: &'static str) -> Work {
        let words = BUFFER_BYTES / 8;
        let (a, b) = match name {
            "reader" | "nt-writer" | "writer" => (faulted_in(words, 1), Vec::new()),
            "copier" => (faulted_in(words, 1), faulted_in(words, 2)),
            _ => (Vec::new(), Vec::new()),
        };
        Work {
            name,
            a,
            b,
            cpus: process::allowed_cpus().unwrap_or_default(),
            next_cpu: 0,
            x: 1,
        }
    }

    /// One pass (streaming kernels) or one step (the others), each in a function of its own
    /// (`validate_<kind>`, never inlined): `validate --stacks` finds it in the stacks its
    /// traffic was charged to.
    fn step(&mut self) -> std::io::Result<()> {
        self.step_over(usize::MAX)
    }

    /// A step whose passes cover the first `words` words of the buffers only.
    fn step_over(&mut self, words: usize) -> std::io::Result<()> {
        let (na, nb) = (words.min(self.a.len()), words.min(self.b.len()));
        let (a, b) = (&mut self.a[..na], &mut self.b[..nb]);
        match self.name {
            "toucher" => validate_toucher()?,
            "reader" => validate_reader(a),
            "nt-writer" => validate_nt_writer(a, self.x),
            "writer" => validate_writer(a, self.x),
            "copier" => validate_copier(a, b),
            "spinner" => self.x = validate_spinner(self.x),
            "burst" => validate_burst()?,
            "migrator" => {
                validate_migrator(&self.cpus, self.next_cpu)?;
                self.next_cpu += 1;
            }
            _ => {}
        }
        self.x = self.x.wrapping_add(1);
        Ok(())
    }
}

/// `words` words of `byte` bytes, each page written (faulted in) now, not at its first touch
/// while measured: one memset, as fast in a debug build as in a release one.
fn faulted_in(words: usize, byte: u8) -> Vec<u64> {
    let mut v = Vec::<u64>::with_capacity(words);
    // SAFETY: the allocation holds `words` u64s; write_bytes initialises all of them (any bytes
    // are a valid u64) before set_len makes them the vector's.
    unsafe {
        std::ptr::write_bytes(v.as_mut_ptr(), byte, words);
        v.set_len(words);
    }
    v
}

/// The function each workload's traffic is made in (see [`Work::step`]).
pub fn function_of(kind: &str) -> String {
    format!("validate_{}", kind.replace('-', "_"))
}

/// A helper's result, returned through the workload's own function: the call it comes from
/// cannot be a tail call, so the workload's frame stays on the stack while the helper runs and
/// a stack walked by frame pointers there passes through the workload's function. (A release
/// build turns `fn f() { g() }` into a jump to `g`, and `f` vanishes from every stack.)
fn kept_frame<T>(result: T) -> T {
    std::hint::black_box(result)
}

#[inline(never)]
fn validate_toucher() -> std::io::Result<()> {
    kept_frame(process::touch_fresh_pages(TOUCH_BYTES))
}

#[inline(never)]
fn validate_reader(a: &[u64]) {
    let mut sum = 0u64;
    for w in a {
        sum = sum.wrapping_add(*w);
    }
    std::hint::black_box(sum);
}

#[inline(never)]
fn validate_nt_writer(a: &mut [u64], x: u64) {
    nt_fill(a, x);
}

#[inline(never)]
fn validate_writer(a: &mut [u64], x: u64) {
    for w in a.iter_mut() {
        // SAFETY: w is a valid, aligned reference; volatile keeps each store.
        unsafe { std::ptr::write_volatile(w, x) };
    }
}

#[inline(never)]
fn validate_copier(a: &[u64], b: &mut [u64]) {
    // Word by word and volatile: a memcpy of this size may use non-temporal stores (glibc does
    // above its threshold), which would make the factor 2, not 3.
    for (d, s) in b.iter_mut().zip(a.iter()) {
        // SAFETY: both are valid, aligned references.
        unsafe { std::ptr::write_volatile(d, std::ptr::read_volatile(s)) };
    }
}

#[inline(never)]
fn validate_spinner(mut x: u64) -> u64 {
    for _ in 0..1_000_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    std::hint::black_box(x)
}

#[inline(never)]
fn validate_burst() -> std::io::Result<()> {
    process::short_lived_child(CHILD_BYTES)?;
    std::thread::sleep(std::time::Duration::from_millis(2));
    Ok(())
}

#[inline(never)]
fn validate_migrator(cpus: &[u32], next: usize) -> std::io::Result<()> {
    if !cpus.is_empty() {
        let cpu = cpus[next % cpus.len()];
        // A CPU taken offline meanwhile: stay where we are.
        let _ = crate::sys::thread::pin_to_cpu(cpu);
    }
    kept_frame(process::touch_fresh_pages(TOUCH_BYTES / 4))
}

/// Fills `buf` with non-temporal stores (MOVNTI), then fences them.
#[cfg(target_arch = "x86_64")]
fn nt_fill(buf: &mut [u64], v: u64) {
    use std::arch::x86_64::{_mm_sfence, _mm_stream_si64};
    for w in buf.iter_mut() {
        // SAFETY: SSE2 is part of x86-64; w is a valid, aligned 8-byte location.
        unsafe { _mm_stream_si64(w as *mut u64 as *mut i64, v as i64) };
    }
    // SAFETY: SSE2; orders the streaming stores before what follows.
    unsafe { _mm_sfence() };
}

#[cfg(not(target_arch = "x86_64"))]
fn nt_fill(buf: &mut [u64], v: u64) {
    for w in buf.iter_mut() {
        // SAFETY: w is a valid, aligned reference.
        unsafe { std::ptr::write_volatile(w, v) };
    }
}

// ---- imc's side ---------------------------------------------------------------------------

/// A started workload, waiting for its go byte.
pub struct Running {
    pub kind: &'static Kind,
    pub pid: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The first non-blank line it wrote to stderr (why it did not start, if it did not).
    first_error: Arc<std::sync::Mutex<Option<String>>>,
}

/// Reads a workload's stderr to its end, on a thread of its own: its first line is kept for
/// [`Running::why`], and its own one-line errors (`imc: …`) are passed on; the rest (an
/// allocator's abort message, a backtrace) is said only through the first line. The thread
/// reads lines only: a small stack, which leaves the address space to the workloads (under
/// `ulimit -v` seven threads of the default 2 MiB took 14 MiB of it); one that cannot start is
/// an error.
fn drain_stderr(
    name: &'static str,
    stderr: std::process::ChildStderr,
) -> std::io::Result<Arc<std::sync::Mutex<Option<String>>>> {
    let first = Arc::new(std::sync::Mutex::new(None));
    let keep = first.clone();
    let reader = std::thread::Builder::new()
        .name(format!("{name}-stderr"))
        .stack_size(PIPE_THREAD_STACK);
    let started = reader.spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut f = keep.lock().unwrap_or_else(|p| p.into_inner());
            if f.is_none() && !line.trim().is_empty() {
                *f = Some(line.clone());
            }
            drop(f);
            if line.starts_with("imc:") {
                eprintln!("imc: workload {name}: {}", crate::text::escape(&line));
            }
        }
    });
    started.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("a thread to read workload {name}'s errors did not start: {e}"),
        )
    })?;
    Ok(first)
}

impl Running {
    /// Why a workload that did not say `ready` did not: how it ended and the first line it
    /// wrote (an allocation that failed under `ulimit -v`, say).
    fn why(&mut self) -> String {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if std::time::Instant::now() < end => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => break None,
            }
        };
        // Its stderr's reader gets the last lines once the process is gone.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let said = self
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut why = match status {
            Some(s) => format!("it ended ({s})"),
            None => "it said nothing".to_string(),
        };
        if let Some(line) = said {
            why += &format!(": {}", crate::text::escape(&line));
        }
        let aborted = status.is_some_and(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.signal() == Some(libc::SIGABRT)
        });
        // Whatever it ran out of first (a buffer, a thread's stack), a limit on the address
        // space is the cause to name.
        match crate::sys::rlimit::address_space() {
            Some(limit) => {
                why += &format!(
                    " (imc runs under an address-space limit of {} MiB, ulimit -v: a workload \
                     needs up to {} MiB of buffers beside imc's own; raise or lift the limit)",
                    limit >> 20,
                    (2 * BUFFER_BYTES) >> 20
                )
            }
            None if aborted => why += " (an allocation failed: its buffers need memory)",
            None => {}
        }
        why
    }
}

/// Every workload of a run: one process group, killed on every way out (Drop).
pub struct Workloads {
    pub running: Vec<Running>,
    pgid: Option<u32>,
}

impl Workloads {
    /// Starts each kind (`exe`: this binary) and waits until each says `ready`.
    pub fn start(exe: &std::path::Path, kinds: &[&'static Kind]) -> std::io::Result<Workloads> {
        use std::os::unix::process::CommandExt;
        let mut w = Workloads {
            running: Vec::new(),
            pgid: None,
        };
        for kind in kinds {
            let mut cmd = Command::new(exe);
            cmd.args(["validate", "--workload", kind.name])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // The first starts the group, the others join it: one kill ends them all.
                .process_group(w.pgid.map_or(0, |p| p as i32));
            // SAFETY: the closure calls only prctl, which is async-signal-safe.
            unsafe {
                cmd.pre_exec(process::die_with_parent);
            }
            let mut child = cmd.spawn()?;
            let pid = child.id();
            w.pgid.get_or_insert(pid);
            let stdin = child.stdin.take();
            let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
            let first_error = drain_stderr(kind.name, child.stderr.take().expect("piped"))?;
            w.running.push(Running {
                kind,
                pid,
                child,
                stdin,
                stdout,
                first_error,
            });
        }
        for r in &mut w.running {
            let mut line = String::new();
            r.stdout.read_line(&mut line)?;
            if line.trim() != "ready" {
                let why = r.why();
                return Err(std::io::Error::other(format!(
                    "workload {} (pid {}) did not start: {why}",
                    r.kind.name, r.pid
                )));
            }
        }
        Ok(w)
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) every process of the workloads' group at once.
    pub fn signal(&self, signal: i32) {
        if let Some(pgid) = self.pgid {
            let _ = process::kill_group(pgid, signal);
        }
    }

    /// Lets every workload work.
    pub fn go(&mut self) {
        for r in &mut self.running {
            if let Some(s) = r.stdin.as_mut() {
                let _ = s.write_all(b"g").and_then(|()| s.flush());
            }
        }
    }

    /// Stops every workload (stdin closed), collects the passes each made (waiting up to
    /// `patience`), then kills what is left of the group.
    pub fn stop(&mut self, patience: std::time::Duration) -> Vec<Option<u64>> {
        self.signal(libc::SIGCONT);
        for r in &mut self.running {
            r.stdin.take();
        }
        let deadline = std::time::Instant::now() + patience;
        let mut passes = Vec::new();
        for r in &mut self.running {
            let mut got = None;
            while std::time::Instant::now() < deadline {
                match r.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
            if matches!(r.child.try_wait(), Ok(Some(_))) {
                let mut text = String::new();
                let _ = r.stdout.read_to_string(&mut text);
                got = text
                    .lines()
                    .find_map(|l| l.strip_prefix("passes "))
                    .and_then(|n| n.trim().parse().ok());
            }
            passes.push(got);
        }
        self.kill();
        passes
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = process::kill_group(pgid, libc::SIGKILL);
        }
        for r in &mut self.running {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

impl Drop for Workloads {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_unique_fit_a_comm_and_carry_the_documented_factors() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(k.comm().len() <= 15, "{}", k.comm());
            assert!(KINDS[i + 1..].iter().all(|o| o.name != k.name));
        }
        let total = |n: &str| {
            Kind::find(n)
                .and_then(|k| k.per_pass)
                .map(|(r, w)| (r + w) / B)
        };
        assert_eq!(total("reader"), Some(1.0));
        assert_eq!(total("copier"), Some(3.0));
        assert_eq!(total("spinner"), None);
        if HAS_NT_STORES {
            assert_eq!(total("nt-writer"), Some(1.0));
        } else {
            assert_eq!(total("writer"), Some(2.0));
        }
    }

    #[test]
    fn a_step_of_each_small_kind_runs() {
        for name in ["toucher", "spinner", "burst", "migrator"] {
            let mut w = Work::prepare(Kind::find(name).unwrap().name);
            w.step().unwrap();
        }
    }
}
