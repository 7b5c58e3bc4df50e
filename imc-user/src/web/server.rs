//! The HTTP(S) server of `imc serve`: hyper's HTTP/1 connections around an axum router, on an
//! accept loop of its own so that no client can take the scraper's place:
//!
//! - a request's header must arrive within [`HEADER_TIMEOUT`] of the connection being ready for
//!   it: at the start, and after each response on a kept-alive connection (hyper starts the
//!   timer whenever it waits for a request head), so idle, byte-dripping and idle keep-alive
//!   connections are closed; a TLS handshake has the same time;
//! - a connection that waits on its client, to read from it or to write to it, without a byte
//!   going either way for [`STALL_TIMEOUT`] is closed (a client that sends requests and never
//!   reads the answers fills its socket's buffers, then stalls);
//! - at most [`connection_limit`] connections at once, below the open-file limit. At the limit
//!   a new connection gets in as soon as another has been heard out: a connection is never
//!   closed to make room before imc has read what its client sent first and answered its first
//!   request (or its client has sent no request for [`QUIET_GRACE`] since it connected), so a
//!   scraper on a new connection is answered
//!   however fast other clients connect; the new connection waits (unread, the rest in the
//!   kernel's accept queue behind it) until one has been heard out. It takes the place of
//!   another, chosen in this order:
//!   one whose answers wait on a client that does not read them or that pipelines its requests
//!   (sends the next before the answer to the last: no scraper does), then one that has never been
//!   answered a scrape (a `/metrics` request answered 200, so past basic auth where there are
//!   users) and is between requests, then one such in the middle of a request, then scrapers,
//!   oldest first within each. So clients that only keep themselves alive make way for a new
//!   connection, and a scraper, once answered, is the last to go; when the process runs out of
//!   file descriptors anyway, one is closed the same way to make room;
//! - with TLS (rustls), a plain-HTTP request to the port is answered 400 and closed;
//! - with basic-auth users, every request needs one of them ([`super::auth`]: remembered once
//!   verified, wrong passwords held per client address), else 401 (429 while its address is
//!   held);
//! - with `--web.config.file`, the file and the certificates it names are looked at every
//!   [`RELOAD_CHECK`] and read again when one changes (rotated certificates, changed users), as
//!   exporter-toolkit reads its file again; a new file that does not load leaves the old one in
//!   use and is said in one line.
use super::auth::{Auth, Verdict};
use super::config::WebConfig;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Time for a request's header (and a TLS handshake) to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection may wait on its client with nothing read or written.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections at once, whatever the file limit: a scraper needs one, a few people with curl a
/// few more.
pub const MAX_CONNECTIONS: usize = 512;
/// How often the web config's files are looked at for changes.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);
/// File descriptors kept free for imc itself (cgroup and /proc lookups, the sampler's rings).
const FD_RESERVE: u64 = 64;

/// The connection cap under a soft open-file limit of `nofile` with `open` descriptors in use.
pub fn connection_limit(nofile: u64, open: u64) -> usize {
    let room = nofile.saturating_sub(open).saturating_sub(FD_RESERVE);
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .clamp(4, MAX_CONNECTIONS)
}

/// What the accept loop knows of a live connection.
#[derive(Default)]
struct ConnState {
    /// Requests being answered.
    answering: AtomicU32,
    /// A write waits on the client (its receive window is full: it does not read).
    stalled: AtomicBool,
    /// A scrape was answered (200 on /metrics, past basic auth where there are users).
    scraped: AtomicBool,
    /// Reads that brought bytes, so far.
    reads: AtomicU64,
    /// `reads` when the last request was taken up.
    reads_at_request: AtomicU64,
    /// A request arrived with the one before it, before its answer (pipelining: no scraper
    /// does it, and a client that never reads its answers does it to hold its slot).
    pipelined: AtomicBool,
    /// Requests taken up, so far.
    requests: AtomicU64,
    /// Its first request was answered. Until then, or until [`QUIET_GRACE`] has passed with no
    /// request (see [`ConnState::heard_out`]), it is never closed to make room.
    heard: AtomicBool,
    opened: Opened,
}

/// When a connection was accepted.
struct Opened(Instant);

impl Default for Opened {
    fn default() -> Self {
        Opened(Instant::now())
    }
}

/// How long a new connection may send nothing whole (no request taken up) and still be
/// heard out before it can be closed to make room. A client writes its request right after
/// connecting, but on a loaded machine that write can come well after imc's first read of
/// the connection: a connection is not taken for an idle one because its request had not
/// arrived at that read, only once its client has said nothing for this long (idle and
/// byte-dripping connections still go long before the header timeout closes them).
const QUIET_GRACE: Duration = Duration::from_secs(1);

impl ConnState {
    /// The order connections make room in, lowest first: stalled ones, then those never
    /// answered a scrape before scrapers; between requests before in the middle of one.
    fn rank(&self) -> (bool, bool, bool) {
        let pipelined = self.pipelined.load(Ordering::Relaxed);
        (
            !self.stalled.load(Ordering::Relaxed) && !pipelined,
            self.scraped.load(Ordering::Relaxed) && !pipelined,
            self.answering.load(Ordering::Relaxed) > 0,
        )
    }

    /// Heard out: its first request was answered, or it has been open [`QUIET_GRACE`] without
    /// sending one.
    fn heard_out(&self) -> bool {
        self.heard.load(Ordering::Relaxed)
            || (self.requests.load(Ordering::Relaxed) == 0
                && self.opened.0.elapsed() >= QUIET_GRACE)
    }

    /// A request is taken up: pipelined if no read brought bytes since the one before.
    fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let reads = self.reads.load(Ordering::Relaxed);
        if self.reads_at_request.swap(reads, Ordering::Relaxed) == reads && reads > 0 {
            self.pipelined.store(true, Ordering::Relaxed);
        }
    }
}

/// Live connections by age (ids increase).
#[derive(Default)]
struct Table {
    next: u64,
    live: BTreeMap<u64, (Arc<ConnState>, tokio::task::AbortHandle)>,
    /// Since when a scraper has been spared for a connection being heard out.
    sparing_since: Option<Instant>,
}

/// How long a scraper is spared for connections being heard out (a client that pipelines
/// looks like a scraper until its second request, so a flood of them must not hold every new
/// connection off for longer).
const SCRAPER_GRACE: Duration = Duration::from_millis(100);

impl Table {
    fn prune(&mut self) {
        self.live.retain(|_, (_, task)| !task.is_finished());
    }

    /// Closes the connection that makes room first (see the module's order); false when there
    /// is none (every live one is still being heard out), and, for at most [`SCRAPER_GRACE`],
    /// while the first to go would be a scraper and some connection is still being heard out:
    /// that one, once heard, goes before any scraper unless it scrapes too.
    fn evict_one(&mut self) -> bool {
        let live = || {
            self.live
                .iter()
                .filter(|(_, (_, task))| !task.is_finished())
        };
        let heard = |state: &ConnState| state.heard_out();
        // min_by_key keeps the first of equals: the oldest.
        let victim = live()
            .filter(|(_, (state, _))| heard(state))
            .min_by_key(|(_, (state, _))| state.rank());
        let pending = live().any(|(_, (state, _))| !heard(state));
        let spare_scraper = victim.is_some_and(|(_, (state, _))| pending && state.rank().1);
        let victim = victim.map(|(&id, _)| id);
        let since = *self.sparing_since.get_or_insert_with(Instant::now);
        if spare_scraper && since.elapsed() < SCRAPER_GRACE {
            return false;
        }
        self.sparing_since = None;
        match victim.and_then(|id| self.live.remove(&id)) {
            Some((_, task)) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

fn lock<T>(t: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// The web configuration in use, replaced when its file changes.
struct Live {
    /// Where it was read from (None: no --web.config.file).
    path: Option<PathBuf>,
    tls: RwLock<Option<tokio_rustls::TlsAcceptor>>,
    auth: Arc<Auth>,
}

pub struct Server {
    listener: TcpListener,
    app: Router,
    live: Arc<Live>,
    /// The configuration as loaded (its files, to watch).
    loaded: WebConfig,
    max_connections: usize,
}

impl Server {
    /// `app` behind the users of `web` (if any), served over TLS if `web` has it; `path` is
    /// the file `web` was read from, read again when it changes.
    pub fn new(
        listener: TcpListener,
        app: Router,
        web: WebConfig,
        path: Option<PathBuf>,
        max_connections: usize,
    ) -> Self {
        let auth = Arc::new(Auth::new(web.users.clone()));
        // Always behind the check: users may appear when the file is read again.
        let app = app.layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            basic_auth,
        ));
        let live = Arc::new(Live {
            path,
            tls: RwLock::new(web.tls.clone().map(tokio_rustls::TlsAcceptor::from)),
            auth,
        });
        Server {
            listener,
            app,
            live,
            loaded: web,
            max_connections,
        }
    }

    /// Accepts until the task is aborted.
    pub async fn run(self) {
        let reload = tokio::spawn(watch(self.live.clone(), self.loaded));
        let _stop_reload = AbortOnDrop(reload.abort_handle());
        let table = Arc::new(Mutex::new(Table::default()));
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors (EMFILE, ENFILE) or a connection that died in the
                    // queue: make room if that is the reason, and never spin.
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        lock(&table).evict_one();
                    }
                    log::debug!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            make_room(&table, self.max_connections).await;
            let state = Arc::new(ConnState::default());
            let tls = self
                .live
                .tls
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let task = tokio::spawn(connection(
                stream,
                peer,
                tls,
                self.app.clone(),
                state.clone(),
            ));
            let mut t = lock(&table);
            let id = t.next;
            t.next += 1;
            t.live.insert(id, (state, task.abort_handle()));
        }
    }
}

/// Returns once fewer than `max` connections are live, closing one to make room where every
/// slot is taken; while every live connection is still being heard out, waits for one to be
/// (their tasks run meanwhile).
async fn make_room(table: &Mutex<Table>, max: usize) {
    loop {
        {
            let mut t = lock(table);
            t.prune();
            if t.live.len() < max || t.evict_one() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What identifies a file's content without reading it: device, inode, size, modification
/// time (a rotation by rename or symlink swap changes the inode, an edit in place the time).
type Stamp = Option<(u64, u64, u64, i64, i64)>;

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        })
        .collect()
}

/// Reads the web config again whenever its file or a file it names changes.
async fn watch(live: Arc<Live>, loaded: WebConfig) {
    let Some(path) = live.path.clone() else {
        return;
    };
    let mut files = loaded.files().to_vec();
    let mut seen = stamps(&files);
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = stamps(&files);
        if now == seen {
            continue;
        }
        seen = now;
        let p = path.clone();
        let Ok(result) = tokio::task::spawn_blocking(move || WebConfig::load(&p)).await else {
            continue;
        };
        let had_tls = live.tls.read().unwrap_or_else(|p| p.into_inner()).is_some();
        match result {
            Ok(web) if web.tls.is_some() != had_tls => eprintln!(
                "imc: warning: web config {} now turns TLS {}: restart imc for that; the previous configuration stays in use",
                path.display(),
                if had_tls { "off" } else { "on" }
            ),
            Ok(web) => {
                files = web.files().to_vec();
                seen = stamps(&files);
                *live.tls.write().unwrap_or_else(|p| p.into_inner()) =
                    web.tls.clone().map(tokio_rustls::TlsAcceptor::from);
                live.auth.set_users(web.users);
                eprintln!("imc: web config {} read again", path.display());
            }
            Err(e) => eprintln!(
                "imc: warning: {}; the previous web configuration stays in use",
                crate::text::escape(&crate::text::error_line(&e))
            ),
        }
    }
}

/// One connection: TLS if configured, then HTTP/1 requests until the client or a time limit
/// ends it.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    state: Arc<ConnState>,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => http(Deadlined::new(stream, state.clone()), peer, app, state).await,
        Some(acceptor) => {
            let mut first = [0u8; 1];
            match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
                // A TLS record starts with its content type: 22 for a handshake.
                Ok(Ok(1)) if first[0] == 22 => {}
                Ok(Ok(1)) => {
                    plain_http_to_tls(stream).await;
                    return;
                }
                _ => return,
            }
            let stream = Deadlined::new(stream, state.clone());
            match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => http(s, peer, app, state).await,
                Ok(Err(e)) => log::debug!("TLS handshake: {e}"),
                Err(_) => log::debug!("TLS handshake: no handshake within {HEADER_TIMEOUT:?}"),
            }
        }
    }
}

/// The client's address, for the requests' handlers.
#[derive(Clone, Copy)]
struct Peer(IpAddr);

async fn http<I>(io: I, peer: SocketAddr, app: Router, state: Arc<ConnState>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let inner = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let scrape = req.uri().path() == "/metrics";
        req.extensions_mut().insert(Peer(peer.ip()));
        state.request();
        state.answering.fetch_add(1, Ordering::Relaxed);
        let answered = hyper::service::Service::call(&inner, req);
        let state = state.clone();
        async move {
            // One answer, then the other connections' turn: a client that pipelines thousands
            // of requests is answered one per round of the loop, as each other client is.
            tokio::task::yield_now().await;
            let r = answered.await;
            state.answering.fetch_sub(1, Ordering::Relaxed);
            state.heard.store(true, Ordering::Relaxed);
            if scrape && r.as_ref().is_ok_and(|r| r.status() == StatusCode::OK) {
                state.scraped.store(true, Ordering::Relaxed);
            }
            r
        }
    });
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = result {
        log::debug!("connection: {e}");
    }
}

/// A socket that fails once a read or a write has waited on the client for [`STALL_TIMEOUT`]
/// (each direction on its own: a client that sends requests does not keep alive the answers it
/// never reads), and says while a write waits (for the order connections make room in).
struct Deadlined<S> {
    inner: S,
    state: Arc<ConnState>,
    /// Armed while a read waits; dropped when a byte is read.
    read_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Armed while a write waits; dropped when a byte is written.
    write_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Deadlined<S> {
    fn new(inner: S, state: Arc<ConnState>) -> Self {
        Deadlined {
            inner,
            state,
            read_deadline: None,
            write_deadline: None,
        }
    }
}

/// The client made a call wait: Pending until `deadline` (armed now if it is not), then an
/// error.
fn waiting<T>(
    deadline: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    what: &str,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<T>> {
    let d = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(STALL_TIMEOUT)));
    match d.as_mut().poll(cx) {
        Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client {what} nothing for {STALL_TIMEOUT:?}"),
        ))),
        Poll::Pending => Poll::Pending,
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadlined<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => waiting(&mut this.read_deadline, "sent", cx),
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.read_deadline = None;
                    this.state.reads.fetch_add(1, Ordering::Relaxed);
                }
                Poll::Ready(r)
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> Deadlined<S> {
    /// A write's outcome: a wait arms the deadline and marks the connection stalled, a byte
    /// written ends both.
    fn wrote(
        &mut self,
        r: Poll<std::io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        match r {
            Poll::Pending => {
                self.state.stalled.store(true, Ordering::Relaxed);
                waiting(&mut self.write_deadline, "read", cx)
            }
            Poll::Ready(r) => {
                if r.as_ref().is_ok_and(|&n| n > 0) {
                    self.state.stalled.store(false, Ordering::Relaxed);
                    self.write_deadline = None;
                }
                Poll::Ready(r)
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadlined<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => waiting(&mut this.write_deadline, "read", cx),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => waiting(&mut this.write_deadline, "read", cx),
            ready => ready,
        }
    }
}

/// What Go's servers (and so the exporters operators know) answer to plain HTTP on a TLS port.
async fn plain_http_to_tls(mut stream: TcpStream) {
    let body = "Client sent an HTTP request to an HTTPS server.\n";
    let reply = format!(
        "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(HEADER_TIMEOUT, stream.write_all(reply.as_bytes())).await;
    let _ = stream.shutdown().await;
}

async fn basic_auth(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if !auth.enabled() {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<Peer>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0);
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match auth.check(given, peer).await {
        Verdict::Allowed => next.run(req).await,
        Verdict::Denied => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic")],
            "Unauthorized\n",
        )
            .into_response(),
        Verdict::TooMany => Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header(header::RETRY_AFTER, "1")
            .body(Body::from(
                "Too many failed logins from this address: try again later\n",
            ))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_file_limit() {
        assert_eq!(connection_limit(1024, 30), 512);
        assert_eq!(connection_limit(400, 30), 400 - 30 - FD_RESERVE as usize);
        assert_eq!(connection_limit(1 << 20, 30), MAX_CONNECTIONS);
        assert_eq!(connection_limit(50, 30), 4);
    }

    fn conn(stalled: bool, scraped: bool, answering: u32) -> Arc<ConnState> {
        let s = ConnState::default();
        s.stalled.store(stalled, Ordering::Relaxed);
        s.scraped.store(scraped, Ordering::Relaxed);
        s.answering.store(answering, Ordering::Relaxed);
        s.heard.store(true, Ordering::Relaxed);
        Arc::new(s)
    }

    /// Runs `check` on a table of live connections of `states` (ids 0, 1, … in that order),
    /// each on a task that never ends by itself.
    fn with_table(states: &[Arc<ConnState>], check: impl FnOnce(&mut Table)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut t = Table::default();
            let mut tasks = Vec::new();
            for s in states {
                let task = tokio::spawn(std::future::pending::<()>());
                t.live.insert(t.next, (s.clone(), task.abort_handle()));
                t.next += 1;
                tasks.push(task);
            }
            check(&mut t);
        });
    }

    #[test]
    fn a_connection_not_yet_heard_out_is_never_closed_to_make_room() {
        // Oldest first: one whose first request is being answered, one never read yet.
        let answering = ConnState::default();
        answering.reads.fetch_add(1, Ordering::Relaxed);
        answering.request();
        answering.answering.store(1, Ordering::Relaxed);
        let states = [Arc::new(answering), Arc::new(ConnState::default())];
        with_table(&states, |t| {
            assert!(!t.evict_one(), "closed one not yet heard out");
            // Answered once, the first is heard out and can make room; the other still not.
            states[0].heard.store(true, Ordering::Relaxed);
            assert!(t.evict_one());
            assert_eq!(t.live.keys().copied().collect::<Vec<_>>(), [1]);
        });
    }

    #[test]
    fn a_connection_that_has_sent_nothing_yet_is_spared_for_the_grace_then_may_go() {
        // A scraper's request can arrive after imc's first read of its connection: a read
        // that finds nothing does not make it an idle one.
        let fresh = Arc::new(ConnState::default());
        let quiet = ConnState::default();
        let Some(then) = Instant::now().checked_sub(QUIET_GRACE) else {
            return;
        };
        let quiet = Arc::new(ConnState {
            opened: Opened(then),
            ..quiet
        });
        assert!(!fresh.heard_out());
        assert!(quiet.heard_out());
        // One that sent a request is heard out when it is answered, however long it has been.
        quiet.request();
        assert!(!quiet.heard_out());
        let states = [fresh.clone()];
        with_table(&states, |t| {
            assert!(
                !t.evict_one(),
                "closed a connection whose request may be on its way"
            );
        });
    }

    #[test]
    fn a_read_that_finds_the_request_not_yet_sent_does_not_make_room_of_the_connection() {
        // imc's first read of a new connection can come before its client's request does (the
        // client's write after connect is late on a loaded machine): that connection is a
        // scraper on its way, and must not be closed for the next newcomer.
        use tokio::io::AsyncReadExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut client, server) = tokio::io::duplex(4096);
            let state = Arc::new(ConnState::default());
            let mut conn = Deadlined::new(server, state.clone());
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_millis(20), conn.read(&mut buf)).await;
            assert!(read.is_err(), "read something nobody sent");
            assert!(
                !state.heard_out(),
                "a read that found nothing heard the connection out"
            );
            client
                .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
                .await
                .unwrap();
            assert!(conn.read(&mut buf).await.unwrap() > 0);
        });
    }

    #[test]
    fn a_scraper_waits_to_go_until_the_connections_being_heard_out_have_been() {
        // Oldest first: a scraper, answered; a newcomer not yet heard out.
        let states = [conn(false, true, 0), Arc::new(ConnState::default())];
        with_table(&states, |t| {
            assert!(
                !t.evict_one(),
                "closed the scraper while the newcomer may go first"
            );
            // Heard out without scraping: it goes, the scraper stays.
            states[1].heard.store(true, Ordering::Relaxed);
            assert!(t.evict_one());
            assert_eq!(t.live.keys().copied().collect::<Vec<_>>(), [0]);
            // Alone with nothing being heard out, a scraper makes room as the last resort.
            assert!(t.evict_one());
        });
    }

    #[test]
    fn a_request_that_came_with_the_one_before_is_pipelined() {
        let s = ConnState::default();
        // One request a read: a scraper, a person with curl.
        for _ in 0..3 {
            s.reads.fetch_add(1, Ordering::Relaxed);
            s.request();
        }
        assert!(!s.pipelined.load(Ordering::Relaxed));
        s.scraped.store(true, Ordering::Relaxed);
        let scraper = s.rank();
        // Two requests out of one read.
        s.reads.fetch_add(1, Ordering::Relaxed);
        s.request();
        s.request();
        assert!(s.pipelined.load(Ordering::Relaxed));
        assert!(s.rank() < conn(false, false, 1).rank());
        assert!(s.rank() < scraper);
    }

    #[test]
    fn room_is_made_by_non_readers_then_non_scrapers_then_the_oldest() {
        // Oldest first: a scraper between scrapes, a keep-alive client in a request, an idle
        // keep-alive client, a client that does not read its answers.
        let states = [
            conn(false, true, 0),
            conn(false, false, 1),
            conn(false, false, 0),
            conn(true, true, 1),
        ];
        with_table(&states, |t| {
            let order: Vec<u64> = (0..4)
                .map(|_| {
                    let before: Vec<u64> = t.live.keys().copied().collect();
                    assert!(t.evict_one());
                    *before.iter().find(|id| !t.live.contains_key(id)).unwrap()
                })
                .collect();
            assert_eq!(order, [3, 2, 1, 0]);
            assert!(!t.evict_one());
        });
    }
}
