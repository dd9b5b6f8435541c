//! The REST port's accept loop ([`svcos_common::httpserve`]: caps, header and idle timeouts,
//! minimum body rate) and drained bodies. A request the port-80 proxy forwarded counts for the
//! client it names ([`crate::AppState::client_ip`]), not for the proxy's loopback address.
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
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use svcos_common::Shutdown;
use svcos_common::connlimit::{self, Authenticated, ConnLimiter};
use svcos_common::httpserve::{self, HostLocal, MinRate};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long a left-over request body may take to arrive before the connection is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `app` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: crate::AppState,
    limiter: ConnLimiter,
    shutdown: Shutdown,
) {
    let per_connection = move |peer, permit: std::sync::Arc<connlimit::ConnPermit>| {
        let (app, state) = (app.clone(), state.clone());
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut()
                .insert(ConnectInfo::<std::net::SocketAddr>(peer));
            let claims_auth = req.headers().contains_key(header::AUTHORIZATION);
            let busy = permit.busy(state.client_ip(peer, req.headers()), claims_auth);
            let (app, permit) = (app.clone(), permit.clone());
            async move {
                let _busy = match busy {
                    Ok(b) => b,
                    Err(why) => return Ok(connlimit::refusal_response(why).map(Body::from)),
                };
                let resp = infallible(app.oneshot(req.map(|b| Body::new(MinRate::new(b)))).await);
                if resp.extensions().get::<Authenticated>().is_some() {
                    permit.authenticated();
                }
                Ok::<_, Infallible>(resp)
            }
        })
    };
    httpserve::serve(
        listener,
        limiter,
        HostLocal::PerRequest,
        shutdown,
        per_connection,
    )
    .await;
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
