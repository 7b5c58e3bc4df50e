//! The HTTP(S) server of `imc serve`: hyper's HTTP/1 connections around an axum router, on an
//! accept loop of its own so that no client can take the scraper's place:
//!
//! - a request's header must arrive within [`HEADER_TIMEOUT`] of the connection being ready for
//!   it: at the start, and after each response on a kept-alive connection (hyper starts the
//!   timer whenever it waits for a request head), so idle, byte-dripping and idle keep-alive
//!   connections are closed; a TLS handshake has the same time;
//! - at most [`connection_limit`] connections at once, below the open-file limit: at the limit a
//!   new connection takes the place of the oldest one that has not sent a request yet (the
//!   scraper sends one at once, an idle or slow client has not), else it is refused (closed);
//!   when the process runs out of file descriptors anyway, the oldest such connection is
//!   closed to make room;
//! - with TLS (rustls), a plain-HTTP request to the port is answered 400 and closed;
//! - with basic-auth users, every request needs one of them (bcrypt, off the loop's thread,
//!   at most two checks at a time), else 401.
use super::config::WebConfig;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Time for a request's header (and a TLS handshake) to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections at once, whatever the file limit: a scraper needs one, a few people with curl a
/// few more.
pub const MAX_CONNECTIONS: usize = 512;
/// File descriptors kept free for imc itself (cgroup and /proc lookups, the sampler's rings).
const FD_RESERVE: u64 = 64;
/// Bcrypt checks at once (each takes tens of milliseconds of a CPU at cost 10).
const AUTH_CHECKS: usize = 2;

/// The connection cap under a soft open-file limit of `nofile` with `open` descriptors in use.
pub fn connection_limit(nofile: u64, open: u64) -> usize {
    let room = nofile.saturating_sub(open).saturating_sub(FD_RESERVE);
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .clamp(4, MAX_CONNECTIONS)
}

/// Live connections by age (ids increase): whether each has sent a request, and its task.
#[derive(Default)]
struct Table {
    next: u64,
    live: BTreeMap<u64, (Arc<AtomicBool>, tokio::task::AbortHandle)>,
}

impl Table {
    fn prune(&mut self) {
        self.live.retain(|_, (_, task)| !task.is_finished());
    }

    /// Closes the oldest connection that has not sent a request; false when there is none.
    fn evict_oldest_idle(&mut self) -> bool {
        let oldest = self
            .live
            .iter()
            .find(|(_, (served, task))| !served.load(Ordering::Relaxed) && !task.is_finished())
            .map(|(&id, _)| id);
        match oldest.and_then(|id| self.live.remove(&id)) {
            Some((_, task)) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

fn lock(t: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Server {
    listener: TcpListener,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    max_connections: usize,
}

impl Server {
    /// `app` behind the users of `web` (if any), served over TLS if `web` has it.
    pub fn new(
        listener: TcpListener,
        app: Router,
        web: &WebConfig,
        max_connections: usize,
    ) -> Self {
        let app = if web.users.is_empty() {
            app
        } else {
            let auth = Arc::new(Auth {
                users: web.users.clone(),
                checks: tokio::sync::Semaphore::new(AUTH_CHECKS),
            });
            app.layer(axum::middleware::from_fn_with_state(auth, basic_auth))
        };
        Server {
            listener,
            app,
            tls: web.tls.clone().map(tokio_rustls::TlsAcceptor::from),
            max_connections,
        }
    }

    /// Accepts until the task is aborted.
    pub async fn run(self) {
        let table = Arc::new(Mutex::new(Table::default()));
        loop {
            let stream = match self.listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors (EMFILE, ENFILE) or a connection that died in the
                    // queue: make room if that is the reason, and never spin.
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                        lock(&table).evict_oldest_idle();
                    }
                    log::debug!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let mut t = lock(&table);
            t.prune();
            if t.live.len() >= self.max_connections && !t.evict_oldest_idle() {
                log::debug!("{} connections: refusing one", t.live.len());
                drop(stream);
                continue;
            }
            let served = Arc::new(AtomicBool::new(false));
            let task = tokio::spawn(connection(
                stream,
                self.tls.clone(),
                self.app.clone(),
                served.clone(),
            ));
            let id = t.next;
            t.next += 1;
            t.live.insert(id, (served, task.abort_handle()));
        }
    }
}

/// One connection: TLS if configured, then HTTP/1 requests until the client or a time limit
/// ends it.
async fn connection(
    stream: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    served: Arc<AtomicBool>,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => http(TokioIo::new(stream), app, served).await,
        Some(acceptor) => {
            let mut first = [0u8; 1];
            match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
                // A TLS record starts with its content type: 22 for a handshake.
                Ok(Ok(1)) if first[0] == 22 => {}
                Ok(Ok(1)) => {
                    served.store(true, Ordering::Relaxed);
                    plain_http_to_tls(stream).await;
                    return;
                }
                _ => return,
            }
            match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => http(TokioIo::new(s), app, served).await,
                Ok(Err(e)) => log::debug!("TLS handshake: {e}"),
                Err(_) => log::debug!("TLS handshake: no handshake within {HEADER_TIMEOUT:?}"),
            }
        }
    }
}

async fn http<I>(io: TokioIo<I>, app: Router, served: Arc<AtomicBool>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let inner = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |req| {
        served.store(true, Ordering::Relaxed);
        hyper::service::Service::call(&inner, req)
    });
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(io, service)
        .await;
    if let Err(e) = result {
        log::debug!("connection: {e}");
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

struct Auth {
    users: BTreeMap<String, String>,
    checks: tokio::sync::Semaphore,
}

/// `Authorization: Basic base64(user:password)`, split.
fn credentials(value: &HeaderValue) -> Option<(String, String)> {
    let v = value.to_str().ok()?;
    let (scheme, b64) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

async fn basic_auth(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(credentials);
    if let Some((user, password)) = given {
        // An unknown user costs the same check as a known one (against some user's hash), so
        // the time taken does not say which users exist.
        let known = auth.users.get(&user);
        let hash = known
            .or_else(|| auth.users.values().next())
            .cloned()
            .unwrap_or_default();
        let ok = match auth.checks.acquire().await {
            Ok(_permit) => tokio::task::spawn_blocking(move || {
                bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
            })
            .await
            .unwrap_or(false),
            Err(_) => false,
        };
        if ok && known.is_some() {
            return next.run(req).await;
        }
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic")],
        "Unauthorized\n",
    )
        .into_response()
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

    #[test]
    fn basic_credentials_are_decoded() {
        let v = HeaderValue::from_static("Basic cHJvbWV0aGV1czpzM2NyZXQ6eA==");
        assert_eq!(
            credentials(&v),
            Some(("prometheus".to_string(), "s3cret:x".to_string()))
        );
        assert_eq!(credentials(&HeaderValue::from_static("Bearer abc")), None);
        assert_eq!(credentials(&HeaderValue::from_static("Basic !!!")), None);
    }
}
