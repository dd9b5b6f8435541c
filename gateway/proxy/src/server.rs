//! The port-80 HTTP/1.1 server: Host check, then the dashboard, `/api/*` forwarding, or 404.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use svcos_common::Shutdown;
use svcos_common::connlimit::{self, ConnLimiter, ConnPermit};
use svcos_common::httpserve::{self, HostLocal};
use tokio::net::TcpListener;

use crate::envelope::{ProxyRefusal, full};
use crate::forward::Forwarder;
use crate::host::HostPolicy;
use crate::{ProxyBody, ProxyConfig, assets};

struct Proxy {
    hosts: HostPolicy,
    forwarder: Forwarder,
}

impl Proxy {
    async fn handle(
        &self,
        request: Request<Incoming>,
        peer: SocketAddr,
        permit: &ConnPermit,
    ) -> Response<ProxyBody> {
        // The dashboard sends its token on every API call; a false one is answered 401 by the
        // gateway and does not mark the connection authenticated.
        let claims_auth = request.headers().contains_key(header::AUTHORIZATION);
        let _busy = match permit.busy(peer.ip(), claims_auth) {
            Ok(busy) => busy,
            Err(why) => return connlimit::refusal_response(why).map(full),
        };
        let response = self.route(request, peer).await;
        if claims_auth && !matches!(response.status().as_u16(), 401 | 403) {
            permit.authenticated();
        }
        response
    }

    async fn route(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
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

/// Serve HTTP on `listener` until `shutdown`, then give open connections
/// [`httpserve::DRAIN_GRACE`] to finish. Tests bind an ephemeral port and call exactly this.
pub async fn serve(listener: TcpListener, config: ProxyConfig, shutdown: Shutdown) {
    let proxy = Arc::new(Proxy {
        hosts: HostPolicy::with_extra(&config.hostname, &config.allowed_hosts),
        forwarder: Forwarder::new(
            config.upstream,
            config.connect_timeout,
            config.response_timeout,
            config.forward_key.as_deref(),
            config.max_body_bytes,
        ),
    });
    // Each forwarded request holds a second descriptor (the gateway connection).
    let total = connlimit::fd_budget(config.max_connections, 2);
    let limiter = ConnLimiter::new(config.max_connections_per_peer, total);
    let per_connection = move |peer: SocketAddr, permit: Arc<ConnPermit>| {
        let proxy = proxy.clone();
        service_fn(move |request| {
            let (proxy, permit) = (proxy.clone(), permit.clone());
            async move { Ok::<_, Infallible>(proxy.handle(request, peer, &permit).await) }
        })
    };
    httpserve::serve(
        listener,
        limiter,
        HostLocal::PerConnection,
        shutdown,
        per_connection,
    )
    .await;
}
