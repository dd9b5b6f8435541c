//! The REST port's accept loop: connection caps, header and idle timeouts, drained bodies.
//!
//! `axum::serve` has no connection cap and no timeouts, so about 20 000 idle connections used up
//! the gateway's file descriptors. Here every connection needs a slot of a
//! [`ConnLimiter`] (per client address and in total, `[api].max_connections_per_peer` /
//! `[api].max_connections`; refused with a 503 envelope), and hyper closes a connection that
//! takes longer than [`HEADER_READ_TIMEOUT`] to send a request head, which includes an idle
//! keep-alive connection waiting for its next request (hyper starts the timer whenever it
//! waits for a head). `/ws` upgrades keep working (`with_upgrades`).
//!
//! A handler that answers without reading the request body (a 401, a 404, a route without a
//! body) would make hyper close the connection with the body half sent, which a client (and the
//! port-80 proxy, which then answered 502) sees as a broken connection. [`drain_unread_body`]
//! reads what is left of a body, up to `[api].max_body_bytes`, after the answer is sent.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use svcos_common::Shutdown;
use svcos_common::connlimit::{self, ConnLimiter};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::ServiceExt;

/// How long a client may take to send a request head, and how long an idle keep-alive
/// connection is kept.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a left-over request body may take to arrive before the connection is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish at shutdown.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Serve `app` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, app: Router, limiter: ConnLimiter, shutdown: Shutdown) {
    let mut connections = JoinSet::new();
    while let Some((stream, peer, slot)) =
        connlimit::admit_http(&listener, &limiter, &shutdown).await
    {
        while connections.try_join_next().is_some() {}
        // Small JSON answers: send them now, not after Nagle's delay.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut()
                    .insert(ConnectInfo::<std::net::SocketAddr>(peer));
                let app = app.clone();
                async move { Ok::<_, Infallible>(infallible(app.oneshot(req.map(Body::new)).await)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shutdown.wait() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = %peer.ip(), error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

fn infallible<T>(r: Result<T, Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(never) => match never {},
    }
}

/// Middleware: hand the handler a body that, if dropped unread, is read to its end in the
/// background (up to `max` bytes and [`DRAIN_TIMEOUT`]) so the connection stays usable.
pub async fn drain_unread_body(State(max): State<usize>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let body = Body::new(DrainOnDrop {
        inner: Some(body),
        max,
    });
    next.run(Request::from_parts(parts, body)).await
}

struct DrainOnDrop {
    inner: Option<Body>,
    max: usize,
}

impl HttpBody for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() || body.size_hint().lower() > self.max as u64 {
            return;
        }
        let max = self.max;
        // Dropping outside a runtime (never in the server) just closes the connection.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = tokio::time::timeout(
                    DRAIN_TIMEOUT,
                    http_body_util::Limited::new(body, max).collect(),
                )
                .await;
            });
        }
    }
}
