//! The HTTP ports' accept loop and connection driver (gateway 8080, proxy 80), on a
//! [`ConnLimiter`]:
//!
//! - **Header timeout** ([`HEADER_READ_TIMEOUT`], 10 s): hyper closes a connection whose request
//!   head is not complete in time, so a slow head never reaches a handler.
//! - **Idle timeout** ([`IDLE_TIMEOUT`], 15 s): a watchdog closes a connection with no request in
//!   flight, none ended and no byte of an answer written for that long (a keep-alive connection
//!   nobody uses, or a client that stopped reading). It does not rely on hyper's header timer
//!   covering keep-alive waits.
//! - **Minimum body rate** ([`MinRate`]): every [`BODY_GRACE`] of a request body must bring
//!   [`BODY_GRACE`] × [`MIN_BODY_RATE`] bytes or its end, or reading it fails; one byte a second
//!   (or a fast start, then a stall holding what was buffered) holds a slot for about 10 s, not for
//!   as long as the attacker likes.
//! - **Eviction and closing**: a connection the limiter evicts is dropped at once when idle, or
//!   closed gracefully (at most [`CLOSE_GRACE`]) when a request is in flight.
//! - **Out of descriptors anyway** (EMFILE, ENFILE): one connection is evicted and the next accept
//!   waits [`ACCEPT_BACKOFF`], so the loop neither spins nor stops serving.
//! - **Bounded buffers**: at most [`MAX_BUF`] of request head per connection.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Buf, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::Shutdown;
use crate::connlimit::{self, ConnLimiter, ConnPermit};

/// Time a client gets to send a complete request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a connection with nothing in flight is kept: a dashboard polling every few seconds
/// keeps its connections, while a flood's idle ones are released four times sooner than the
/// 60 s browsers keep them. hyper's header timer does not cover this wait (measured: an idle
/// keep-alive connection stayed open until this watchdog closed it).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// The window over which a request body's rate is judged.
pub const BODY_GRACE: Duration = Duration::from_secs(10);
/// Bytes per second a request body must average over every [`BODY_GRACE`]: a bundle upload over the
/// worst Wi-Fi is thousands of times faster; a trickle is not.
pub const MIN_BODY_RATE: u64 = 1024;
/// How long a connection told to close may take to finish the answer under way.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long open connections get to finish at shutdown.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Pause after a failed accept that is not about one connection (EMFILE and the like).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Per-connection buffer bound (a browser's head with cookies fits).
pub const MAX_BUF: usize = 64 * 1024;

/// The API paths that take a bundle upload: streamed to the gateway under its own size limit;
/// every other request body is at most `[api].max_body_bytes` (the proxy reads those whole
/// before forwarding, so a slow body never holds a gateway connection).
pub const UPLOAD_PATHS: [&str; 3] = [
    "/api/system/upgrade",
    "/api/v1/firmware/update",
    "/api/v1/system/upgrade",
];

/// How connections from this host itself are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLocal {
    /// Like any other client.
    PerConnection,
    /// Per request and forwarded client ([`ConnLimiter::try_acquire_host_local`]): the gateway,
    /// whose port-80 proxy connects from this host with many clients' requests.
    PerRequest,
}

/// Serve on `listener` until `shutdown`, then give open connections [`DRAIN_GRACE`].
/// `make_service` builds one connection's service; it should mark requests with
/// [`ConnPermit::busy`] (refusing them with [`connlimit::refusal_response`]).
pub async fn serve<F, S, B>(
    listener: TcpListener,
    limiter: ConnLimiter,
    host_local: HostLocal,
    shutdown: Shutdown,
    mut make_service: F,
) where
    F: FnMut(SocketAddr, Arc<ConnPermit>) -> S,
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<B>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait() => break,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) if per_connection_error(&e) => continue,
            Err(e) => {
                // The connection stays in the backlog, so retrying at once would fail the same
                // way: free a descriptor and let it close first.
                let evicted = limiter.evict_idle();
                tracing::warn!(error = %e, evicted, held = limiter.held(), "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let local = host_local == HostLocal::PerRequest
            && stream.local_addr().is_ok_and(|a| a.ip() == peer.ip());
        let admitted = if local {
            limiter.try_acquire_host_local()
        } else {
            limiter.try_acquire(peer.ip())
        };
        match admitted {
            Ok(permit) => {
                // Small JSON answers: send them now, not after Nagle's delay.
                let _ = stream.set_nodelay(true);
                let permit = Arc::new(permit);
                let service = make_service(peer, permit.clone());
                connections.spawn(connection(stream, peer, service, permit, shutdown.clone()));
            }
            Err(why) => {
                tracing::debug!(peer = %peer.ip(), ?why, "connection refused");
                connlimit::refuse_http(stream, why);
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
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

/// Serve one connection until the client closes it, a limit closes it, or shutdown.
async fn connection<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    service: S,
    permit: Arc<ConnPermit>,
    shutdown: Shutdown,
) where
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<B>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let noted = permit.clone();
    let io = Metered::new(stream, move || noted.note_write());
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_BUF)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let hard_stop = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hard_stop);
    let mut closing = false;
    loop {
        // While a request is in flight its own limits bound it; look again after a while.
        let idle_at = permit
            .idle_deadline(IDLE_TIMEOUT)
            .unwrap_or_else(|| Instant::now() + IDLE_TIMEOUT);
        let why = tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %peer.ip(), error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut hard_stop, if closing => return,
            _ = shutdown.wait(), if !closing => "shutdown",
            () = permit.evicted(), if !closing => "evicted",
            () = tokio::time::sleep_until(idle_at), if !closing => {
                match permit.idle_deadline(IDLE_TIMEOUT) {
                    Some(at) if at <= Instant::now() => "idle",
                    _ => continue,
                }
            }
        };
        tracing::debug!(peer = %peer.ip(), why, "closing connection");
        // Nothing in flight: nothing to finish (hyper's graceful close would wait for a
        // half-sent head until its header timer fires).
        if why != "shutdown" && !permit.is_busy() {
            return;
        }
        conn.as_mut().graceful_shutdown();
        hard_stop.as_mut().reset(Instant::now() + CLOSE_GRACE);
        closing = true;
    }
}

/// A connection's socket that calls `on_write` whenever an answer makes progress, so a client
/// still downloading a large answer (or following a stream) is not taken for idle. The
/// open-data server's accept loop uses it with its own idle clock.
pub struct Metered<F> {
    io: TcpStream,
    on_write: F,
}

impl<F: Fn() + Unpin> Metered<F> {
    /// Wrap `io`; `on_write` runs after each write that moved at least one byte.
    pub fn new(io: TcpStream, on_write: F) -> Self {
        Metered { io, on_write }
    }

    fn note(&self, r: &Poll<std::io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r
            && *n > 0
        {
            (self.on_write)();
        }
    }
}

impl<F: Fn() + Unpin> AsyncRead for Metered<F> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<F: Fn() + Unpin> AsyncWrite for Metered<F> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A request body arriving slower than [`MIN_BODY_RATE`] over a [`BODY_GRACE`] window.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body arrived too slowly (at least {MIN_BODY_RATE} bytes/s over every {} s)",
    BODY_GRACE.as_secs()
)]
pub struct BodyTooSlow;

/// A request body that fails with [`BodyTooSlow`] once fewer than
/// a [`BODY_GRACE`] window ends with fewer than `BODY_GRACE * MIN_BODY_RATE` bytes and the body
/// not complete. A window (not the average since the start) so that a fast start followed by a
/// stall cannot hold a buffered megabyte for a quarter of an hour.
pub struct MinRate<B> {
    inner: B,
    in_window: u64,
    deadline: Pin<Box<Sleep>>,
}

impl<B> MinRate<B> {
    /// Time `inner` from now.
    pub fn new(inner: B) -> Self {
        MinRate {
            inner,
            in_window: 0,
            deadline: Box::pin(tokio::time::sleep(BODY_GRACE)),
        }
    }
}

impl<B> Body for MinRate<B>
where
    B: Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.in_window += data.remaining() as u64;
                    if this.in_window >= MIN_BODY_RATE * BODY_GRACE.as_secs() {
                        this.in_window = 0;
                        this.deadline.as_mut().reset(Instant::now() + BODY_GRACE);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTooSlow)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether a body error (through any wrapping that keeps the source chain) is [`BodyTooSlow`].
pub fn is_too_slow(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTooSlow>() {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Bytes;
    use tokio::sync::mpsc;

    /// A body fed by the test.
    struct Fed(mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    async fn next(body: &mut MinRate<Fed>) -> Option<Result<usize, String>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
            .await
            .map(|r| {
                r.map(|f| f.into_data().map_or(0, |d| d.len()))
                    .map_err(|e| e.to_string())
            })
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_or_a_stall_is_cut_within_a_window_a_steady_body_is_not() {
        let (tx, rx) = mpsc::channel(4);
        let mut slow = MinRate::new(Fed(rx));
        let feeder = tokio::spawn(async move {
            loop {
                if tx.send(Bytes::from_static(b"x")).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let started = Instant::now();
        let failed_at = loop {
            match next(&mut slow).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    assert!(e.contains("too slowly"), "{e}");
                    break started.elapsed();
                }
                None => panic!("the body cannot end"),
            }
        };
        assert!(failed_at >= BODY_GRACE && failed_at < BODY_GRACE + Duration::from_secs(1));
        feeder.abort();

        let (tx, rx) = mpsc::channel(4);
        let mut steady = MinRate::new(Fed(rx));
        tokio::spawn(async move {
            for _ in 0..60 {
                tx.send(Bytes::from(vec![0u8; 2 * MIN_BODY_RATE as usize]))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut total = 0;
        while let Some(frame) = next(&mut steady).await {
            total += frame.expect("a body at the minimum rate is never cut");
        }
        assert_eq!(total, 60 * 2 * MIN_BODY_RATE as usize);

        // A fast start, then a stall: the next window brings nothing and the body is cut.
        let (tx, rx) = mpsc::channel(4);
        let mut stalled = MinRate::new(Fed(rx));
        tx.send(Bytes::from(vec![0u8; 1 << 20])).await.unwrap();
        assert_eq!(next(&mut stalled).await, Some(Ok(1 << 20)));
        let started = Instant::now();
        assert!(next(&mut stalled).await.unwrap().is_err());
        assert!(started.elapsed() <= BODY_GRACE);
        drop(tx);
    }

    #[test]
    fn too_slow_is_found_through_wrapping() {
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(BodyTooSlow);
        assert!(is_too_slow(&*boxed));
        // How axum hands a body error on: as the source of its own error type.
        #[derive(Debug, thiserror::Error)]
        #[error("body")]
        struct Wrapped(#[source] Box<dyn std::error::Error + Send + Sync>);
        assert!(is_too_slow(&Wrapped(boxed)));
        assert!(!is_too_slow(&Wrapped("reset".into())));
    }
}
