//! The port-80 HTTP/1.1 server: Host check, then the dashboard, `/api/*` forwarding, or 404.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use svcos_common::Shutdown;
use svcos_common::connlimit::{self, ConnLimiter, ConnPermit};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::envelope::ProxyRefusal;
use crate::forward::Forwarder;
use crate::host::HostPolicy;
use crate::{ProxyBody, ProxyConfig, assets};

/// How long a client may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish at shutdown.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

struct Proxy {
    hosts: HostPolicy,
    forwarder: Forwarder,
}

impl Proxy {
    async fn handle(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        if request
            .headers()
            .get_all(header::HOST)
            .iter()
            .nth(1)
            .is_some()
        {
            return ProxyRefusal::DuplicateHost.to_response();
        }
        // An absolute-form target carries the host; otherwise the Host header does.
        let host = match request.uri().authority() {
            Some(authority) => Some(authority.as_str()),
            None => request
                .headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok()),
        };
        match host {
            None => return ProxyRefusal::MissingHost.to_response(),
            Some(h) if !self.hosts.allows(h) => {
                // The path only: a query string may carry a token.
                tracing::info!(peer = %peer.ip(), path = request.uri().path(), "refused a request for a foreign Host");
                return ProxyRefusal::BadHost.to_response();
            }
            Some(_) => {}
        }
        let path = request.uri().path();
        if path.starts_with("/api/") {
            tracing::debug!(method = %request.method(), path, "forwarding");
            return self.forwarder.forward(request, peer.ip()).await;
        }
        match assets::find(path) {
            Some(asset) => assets::serve(asset, request.method(), request.headers()),
            None => ProxyRefusal::NotFound.to_response(),
        }
    }
}

/// Serve HTTP on `listener` until `shutdown`, then give open connections [`DRAIN_GRACE`] to
/// finish. Tests bind an ephemeral port and call exactly this.
pub async fn serve(listener: TcpListener, config: ProxyConfig, shutdown: Shutdown) {
    let proxy = Arc::new(Proxy {
        hosts: HostPolicy::with_extra(&config.hostname, &config.allowed_hosts),
        forwarder: Forwarder::new(
            config.upstream,
            config.connect_timeout,
            config.response_timeout,
            config.forward_key.as_deref(),
        ),
    });
    // One address holding connections open takes at most its share, and a flood from many
    // addresses is answered 503 at once instead of queueing everyone (the owner's browser
    // included) behind it in the backlog.
    let limiter = ConnLimiter::new(config.max_connections_per_peer, config.max_connections);
    let mut connections = JoinSet::new();
    while let Some((stream, peer, slot)) =
        connlimit::admit_http(&listener, &limiter, &shutdown).await
    {
        while connections.try_join_next().is_some() {}
        connections.spawn(connection(
            proxy.clone(),
            stream,
            peer,
            shutdown.clone(),
            slot,
        ));
    }
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

async fn connection(
    proxy: Arc<Proxy>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: Shutdown,
    _slot: ConnPermit,
) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let proxy = proxy.clone();
        async move { Ok::<_, Infallible>(proxy.handle(request, peer).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
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
}
