//! The accept loop: a connection budget and the header, idle and request time limits.
//!
//! `axum::serve` has neither, and a probe showed what that costs a public server: 22 800 idle
//! connections used up the 20 000 descriptors (new clients timed out), 2 000 connections that
//! never finished their request head were held for good, and RSS went from 10 MB to 206 MB.
//! So connections are served here with hyper directly:
//!
//! - **Header timeout** ([`Limits::header_read_timeout`], 10 s): hyper closes a connection whose
//!   request head is not complete in time. hyper runs the same timer while a keep-alive
//!   connection waits for its next head.
//! - **Idle timeout** ([`Limits::idle_timeout`], 30 s): a watchdog per connection closes it once
//!   it has been inactive that long: no request in flight, none ended and no byte of an answer
//!   written (a slow client still downloading a large answer is active; a client trickling a
//!   request head is not). It does not depend on hyper's header timer covering keep-alive
//!   waits, and it also ends a connection whose client stopped reading its answer (hyper is
//!   then writing, and no header timer runs).
//! - **Request timeout** ([`Limits::request_timeout`], 30 s): a handler that has not answered
//!   by then is answered 503 (handlers are cache lookups; this only bounds a stuck one).
//! - **Closing is immediate**: an idle or evicted connection has nothing to finish, so its
//!   socket is dropped at once; one with a request in flight (an eviction racing a new
//!   request, or shutdown) is closed gracefully and dropped after at most [`CLOSE_GRACE`].
//! - **Connection budget** ([`Limits::budget`]): at most `--max-connections` (4096), and never
//!   more than the descriptor limit leaves after [`RESERVED_FDS`] and [`EVICT_SLACK`]. At the
//!   budget a new connection is admitted by closing the *least recently active idle* one
//!   (idle connections are the cheap thing a flood is made of, and a real client's connection
//!   is kept whenever there is an older idle one to close). Only when every connection has a
//!   request in flight, or [`EVICT_SLACK`] evictions are still closing, is the new one refused
//!   at once with a 503 and closed. An evicted connection keeps its place until its task has
//!   dropped the socket, so at most `budget + EVICT_SLACK` sockets are open.
//! - **Out of descriptors anyway** (EMFILE, ENFILE: another part of the process or the system
//!   holds them): the loop closes one idle connection and waits [`ACCEPT_BACKOFF`] before the
//!   next accept, so it neither spins on the error nor stops serving.
//! - **Bounded buffers**: a connection buffers at most [`MAX_BUF`] of request head, not hyper's
//!   400 KiB default, so the budget also bounds memory (the API's requests are short GETs).
//!
//! Only HTTP/1.1 is spoken (as before: axum's `http2` feature is off). The service sits behind
//! a TLS-terminating proxy or CDN, which speaks HTTP/2 to browsers.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use svcos_netserve::httpserve::Metered;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

/// Default time a client gets to send a complete request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a connection with no request in flight is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a handler gets to answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default connection cap: far more than the clients a CDN or reverse proxy in front opens,
/// and with [`MAX_BUF`] per connection at most ~130 MiB of connection buffers.
pub const MAX_CONNECTIONS: usize = 4096;
/// Descriptors kept out of the budget for everything else the process opens: stdio, the
/// SQLite store with its WAL and shm files, the runtime's epoll and signal descriptors, and
/// the upstream and feed clients during a refresh (about 15 at most; the rest is margin).
pub const RESERVED_FDS: usize = 64;
/// Evicted connections that may still be closing while new ones are admitted in their place.
pub const EVICT_SLACK: usize = 32;
/// How long a connection told to close may take to finish writing the answer under way.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed accept that is not about one connection (EMFILE and the like).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Per-connection buffer bound (hyper's minimum is 8 KiB; a browser's head with cookies fits).
pub const MAX_BUF: usize = 32 * 1024;

/// The connection limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send a complete request head.
    pub header_read_timeout: Duration,
    /// Time a connection with no request in flight is kept.
    pub idle_timeout: Duration,
    /// Time a handler gets before the request is answered 503.
    pub request_timeout: Duration,
    /// Most connections held at once (lowered further by the descriptor limit).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

impl Limits {
    /// The connection cap applied: `max_connections`, or what the descriptor limit leaves after
    /// the reserve and the eviction slack if that is lower (at least 1).
    pub fn budget(&self) -> usize {
        let room = fd_limit().saturating_sub(RESERVED_FDS + EVICT_SLACK);
        self.max_connections.min(room).max(1)
    }
}

/// The soft descriptor limit (`RLIMIT_NOFILE`), the one `accept` runs into.
fn fd_limit() -> usize {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => usize::MAX,
        Ok((soft, _)) => usize::try_from(soft).unwrap_or(usize::MAX),
        // getrlimit cannot fail for a valid resource; assume the common default if it does.
        Err(_) => 1024,
    }
}

/// The open connections: how many, which are idle, and since when.
#[derive(Debug, Clone)]
pub struct Tracker {
    budget: usize,
    /// Origin of the write-progress clocks (milliseconds since, in an atomic).
    epoch: Instant,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    conns: HashMap<u64, Conn>,
    /// Idle connections that are not being evicted, by `active_at`, least recent first.
    /// Write progress does not move an entry (it would cost a lock per write); eviction
    /// re-sorts the entries it finds out of date.
    idle: BTreeSet<(Instant, u64)>,
    /// Connections evicted but not closed yet (still holding their descriptor).
    evicting: usize,
}

#[derive(Debug)]
struct Conn {
    /// Requests in flight (HTTP/1.1 serves one at a time; a count keeps the guard simple).
    busy: usize,
    /// Last time a request ended (or the connection was accepted); the key in `idle`.
    active_at: Instant,
    /// Last write progress (an answer still going out counts as activity).
    wrote: Arc<AtomicU64>,
    evicted: bool,
    kick: Arc<Notify>,
}

impl Conn {
    /// Last activity: a request ending, or bytes of an answer going out. Reads do not count:
    /// a client trickling a request head is not being served.
    fn last_active(&self, epoch: Instant) -> Instant {
        let wrote = epoch + Duration::from_millis(self.wrote.load(Ordering::Relaxed));
        self.active_at.max(wrote)
    }
}

impl Inner {
    /// Mark the least recently active idle connection for closing; whether there was one.
    fn evict_one(&mut self, epoch: Instant) -> bool {
        if self.evicting >= EVICT_SLACK {
            return false;
        }
        // Each entry is re-sorted at most once (its key is then up to date), so this ends.
        while let Some((at, id)) = self.idle.pop_first() {
            let conn = self
                .conns
                .get_mut(&id)
                .expect("idle set holds open connections");
            let active = conn.last_active(epoch);
            if active > at {
                conn.active_at = active;
                self.idle.insert((active, id));
                continue;
            }
            conn.evicted = true;
            conn.kick.notify_one();
            self.evicting += 1;
            return true;
        }
        false
    }
}

impl Tracker {
    /// A tracker admitting at most `budget` connections (at least 1) besides evicted ones.
    pub fn new(budget: usize) -> Self {
        Tracker {
            budget: budget.max(1),
            epoch: Instant::now(),
            inner: Arc::default(),
        }
    }

    /// The cap this tracker applies.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Connections open now, evicted ones still closing included.
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent counts (no update spans a panic
        // point), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit a connection, evicting the least recently active idle one when at the budget;
    /// `None` when nothing can be evicted (the caller refuses the connection).
    pub fn admit(&self) -> Option<Slot> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.conns.len() - inner.evicting >= self.budget && !inner.evict_one(self.epoch) {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let kick = Arc::new(Notify::new());
        let wrote = Arc::new(AtomicU64::new(0));
        inner.conns.insert(
            id,
            Conn {
                busy: 0,
                active_at: now,
                wrote: wrote.clone(),
                evicted: false,
                kick: kick.clone(),
            },
        );
        inner.idle.insert((now, id));
        Some(Slot {
            id,
            tracker: self.clone(),
            kick,
            wrote,
        })
    }

    /// Evict the least recently active idle connection (to free a descriptor after EMFILE).
    pub fn evict_idle(&self) -> bool {
        self.lock().evict_one(self.epoch)
    }
}

/// One admitted connection's place in the [`Tracker`]; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    tracker: Tracker,
    kick: Arc<Notify>,
    wrote: Arc<AtomicU64>,
}

impl Slot {
    /// Mark a request in flight until the guard is dropped.
    pub fn busy(&self) -> Busy {
        let mut inner = self.tracker.lock();
        let Inner { conns, idle, .. } = &mut *inner;
        if let Some(conn) = conns.get_mut(&self.id) {
            if conn.busy == 0 {
                idle.remove(&(conn.active_at, self.id));
            }
            conn.busy += 1;
        }
        Busy {
            id: self.id,
            tracker: self.tracker.clone(),
        }
    }

    /// When the connection has been idle for `timeout`; `None` while a request is in flight.
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        let inner = self.tracker.lock();
        let conn = inner.conns.get(&self.id)?;
        (conn.busy == 0).then(|| conn.last_active(self.tracker.epoch) + timeout)
    }

    /// Whether a request is in flight.
    fn is_busy(&self) -> bool {
        let inner = self.tracker.lock();
        inner.conns.get(&self.id).is_some_and(|c| c.busy > 0)
    }

    /// Resolves once the tracker evicted this connection.
    async fn evicted(&self) {
        self.kick.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.tracker.lock();
        if let Some(conn) = inner.conns.remove(&self.id) {
            if conn.evicted {
                inner.evicting -= 1;
            } else if conn.busy == 0 {
                inner.idle.remove(&(conn.active_at, self.id));
            }
        }
    }
}

/// A request in flight on a connection; dropping it makes the connection idle again.
#[derive(Debug)]
pub struct Busy {
    id: u64,
    tracker: Tracker,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut inner = self.tracker.lock();
        let Some(conn) = inner.conns.get_mut(&self.id) else {
            return;
        };
        conn.busy = conn.busy.saturating_sub(1);
        if conn.busy > 0 {
            return;
        }
        conn.active_at = now;
        // An evicted connection is on its way out and must not be picked (and counted) again.
        if !conn.evicted {
            inner.idle.insert((now, self.id));
        }
    }
}

/// Answer a connection over the budget with a 503 and close it, without a task: a refused
/// connection must not hold a descriptor any longer than the refusal takes. A client whose
/// socket buffer cannot take the few hundred bytes now sees the close instead.
fn refuse(stream: TcpStream) {
    let body = crate::render::error_body(
        503,
        "overloaded",
        "the server holds as many connections as it may; retry in a second",
        None,
        None,
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         cache-control: no-store\r\nretry-after: 1\r\naccess-control-allow-origin: *\r\n\
         x-svc-api: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        crate::registry::NOTICE,
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// Accept errors about one connection (the next accept can succeed at once).
fn per_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Serve `app` on `listener` with `limits` until `shutdown` resolves; then every connection
/// finishes the answer under way (at most [`CLOSE_GRACE`]) and the function returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tracker: Tracker,
    shutdown: impl Future<Output = ()>,
) {
    let stop = crate::process::Shutdown::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        while conns.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => match tracker.admit() {
                Some(slot) => {
                    // Answers go out in one write; Nagle would only hold back the tail of a
                    // body larger than the socket buffer until the client's delayed ACK.
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(
                        stream,
                        peer,
                        app.clone(),
                        limits,
                        slot,
                        stop.clone(),
                    ));
                }
                None => {
                    tracing::debug!(peer = %peer.ip(), "connection over the budget; refused");
                    refuse(stream);
                }
            },
            Err(e) if per_connection_error(&e) => {}
            Err(e) => {
                // Typically EMFILE/ENFILE: the connection stays in the backlog, so retrying at
                // once would fail the same way. Free a descriptor and let it be closed first.
                let evicted = tracker.evict_idle();
                tracing::warn!(error = %e, evicted, open = tracker.open(), "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    drop(listener);
    stop.cancel();
    while conns.join_next().await.is_some() {}
}

/// Serve one connection until the client closes it or a limit closes it.
async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    limits: Limits,
    slot: Slot,
    stop: crate::process::Shutdown,
) {
    let slot = Arc::new(slot);
    let on_request = slot.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = on_request.busy();
        let app = app.clone();
        async move {
            let answer =
                tokio::time::timeout(limits.request_timeout, app.oneshot(req.map(Body::new)));
            let resp = match answer.await {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(_) => crate::server::timeout_response(),
            };
            drop(busy);
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF)
        .keep_alive(true)
        .serve_connection(
            TokioIo::new(Metered::new(stream, note_write(&slot))),
            service,
        );
    tokio::pin!(conn);
    let hard_stop = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hard_stop);
    let mut closing = false;
    loop {
        // While a request is in flight the request timeout bounds it; look again by then.
        let idle_at = slot
            .idle_deadline(limits.idle_timeout)
            .unwrap_or_else(|| Instant::now() + limits.request_timeout.min(limits.idle_timeout));
        let why = tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %peer.ip(), error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut hard_stop, if closing => {
                tracing::debug!(peer = %peer.ip(), "connection did not finish closing; dropped");
                return;
            }
            () = stop.cancelled(), if !closing => "shutdown",
            () = slot.evicted(), if !closing => "evicted",
            () = tokio::time::sleep_until(idle_at), if !closing => {
                match slot.idle_deadline(limits.idle_timeout) {
                    Some(at) if at <= Instant::now() => "idle",
                    _ => continue,
                }
            }
        };
        tracing::trace!(peer = %peer.ip(), why, "closing connection");
        // With no request in flight and nothing written for a while there is nothing to
        // finish: drop the socket now (hyper's graceful close would wait for a half-sent head
        // until its header timer fires). A request under way gets its answer first.
        if why != "shutdown" && !slot.is_busy() {
            return;
        }
        conn.as_mut().graceful_shutdown();
        hard_stop.as_mut().reset(Instant::now() + CLOSE_GRACE);
        closing = true;
    }
}

/// Notes when an answer makes progress on a slot's idle clock ([`Metered`] calls
/// it), so a client still downloading a large answer is not taken for idle.
fn note_write(slot: &Slot) -> impl Fn() + Unpin + use<> {
    let (wrote, epoch) = (slot.wrote.clone(), slot.tracker.epoch);
    move || {
        let ms = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        wrote.store(ms, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_budget_the_least_recently_active_idle_connection_goes() {
        let tracker = Tracker::new(3);
        let a = tracker.admit().unwrap();
        let b = tracker.admit().unwrap();
        let c = tracker.admit().unwrap();
        // a was accepted first but has just answered a request: b is now the oldest idle one.
        tokio::time::sleep(Duration::from_millis(2)).await;
        drop(a.busy());
        let _d = tracker.admit().unwrap();
        assert!(tracker.lock().conns[&b.id].evicted);
        assert!(!tracker.lock().conns[&a.id].evicted);
        assert_eq!(
            tracker.open(),
            4,
            "b holds its descriptor until it has closed"
        );
        drop(b);
        assert_eq!(tracker.open(), 3);
        // c is now the least recently active idle connection.
        let _e = tracker.admit().unwrap();
        assert!(tracker.lock().conns[&c.id].evicted);
    }

    #[tokio::test]
    async fn an_answer_still_going_out_counts_as_activity() {
        let tracker = Tracker::new(2);
        let a = tracker.admit().unwrap();
        let b = tracker.admit().unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        // a is the older by request time, but bytes of its answer went out just now.
        let ms = tracker.epoch.elapsed().as_millis() as u64;
        a.wrote.store(ms, Ordering::Relaxed);
        let _c = tracker.admit().unwrap();
        assert!(tracker.lock().conns[&b.id].evicted);
        assert!(!tracker.lock().conns[&a.id].evicted);
        assert!(a.idle_deadline(IDLE_TIMEOUT).unwrap() > b.idle_deadline(IDLE_TIMEOUT).unwrap());
    }

    #[tokio::test]
    async fn a_connection_with_a_request_in_flight_is_not_evicted_and_refusal_follows() {
        let tracker = Tracker::new(2);
        let a = tracker.admit().unwrap();
        let b = tracker.admit().unwrap();
        let _busy_a = a.busy();
        let _busy_b = b.busy();
        assert!(tracker.admit().is_none(), "nothing idle to evict: refused");
        assert_eq!(tracker.open(), 2);
        assert!(a.idle_deadline(IDLE_TIMEOUT).is_none());
    }

    #[tokio::test]
    async fn evictions_still_closing_are_bounded_by_the_slack() {
        let tracker = Tracker::new(1);
        let mut held = Vec::new();
        held.push(tracker.admit().unwrap());
        for _ in 0..EVICT_SLACK {
            held.push(tracker.admit().expect("the previous one is evicted"));
        }
        assert!(tracker.admit().is_none(), "slack used up: refused");
        assert_eq!(tracker.open(), 1 + EVICT_SLACK);
        held.remove(0);
        assert!(tracker.admit().is_some(), "a closed eviction frees slack");
    }

    #[test]
    fn the_budget_never_exceeds_the_descriptor_limit() {
        let limits = Limits {
            max_connections: usize::MAX,
            ..Limits::default()
        };
        assert!(limits.budget() <= fd_limit().saturating_sub(RESERVED_FDS + EVICT_SLACK).max(1));
        let small = Limits {
            max_connections: 7,
            ..Limits::default()
        };
        assert_eq!(small.budget(), 7.min(limits.budget()));
    }
}
