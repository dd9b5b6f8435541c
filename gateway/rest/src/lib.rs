//! The REST gateway: every route of the spec's inventory on TCP `[api].bind:[api].port`, plus
//! `/ws` and `/metrics`, with health on the gRPC Unix socket.
//!
//! Design:
//! - **One route registry** ([`registry`]): each operation's method, path, auth class, pinned
//!   flag, group, support grade, handler and registering file. The router, the OpenAPI
//!   description ([`openapi`]), `/api/index` and the tests derive from it.
//! - **Guards before handlers** ([`guard`]): body limit, bearer validation through
//!   `AuthService.ValidateSession` with a short positive cache dropped on revocation
//!   ([`authn`]), mode gating (Home / Standard / Hacker), the debug `confirm` rule.
//! - **One envelope** ([`envelope`]): a layer around the whole router turns every non-2xx into
//!   `{error, detail?, code?, suggestion?}`; one mapping from gRPC codes to HTTP statuses.
//! - **No per-request fan-out for status**: hw-agent telemetry and stratum-agent pools are
//!   followed as streams into watch channels ([`state::Snapshots`]); `/api/status`, `/metrics`
//!   and `/ws` read the latest snapshot, and `/api/status` reuses its rendered bytes until a
//!   snapshot changes. When a peer is down the answer says so instead of hanging.
//! - Single-threaded runtime: one core serves the measured load (see docs/PERFORMANCE.md) and
//!   the footprint target counts every thread.

// `ApiError` carries the whole envelope plus headers; it is built only on the error path, so
// its size never costs the success path anything.
#![allow(clippy::result_large_err)]

pub mod authn;
pub mod envelope;
pub mod guard;
pub mod handlers;
pub mod listener;
pub mod mcp;
pub mod mqtt_control;
pub mod openapi;
pub mod registry;
pub mod state;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::time::{Clock, SystemClock};
use svcos_common::{ServiceName, Shutdown, ipc};
use tokio::net::{TcpListener, UnixListener};

pub use state::AppState;

/// Build the whole HTTP router for a state: the registry's routes, each behind its guard,
/// `/ws`, the fallbacks, the Host check and the envelope layer.
pub fn router(state: AppState) -> Router {
    let mut by_path: std::collections::BTreeMap<String, axum::routing::MethodRouter<AppState>> =
        std::collections::BTreeMap::new();
    for route in registry::all() {
        let ctx = guard::GuardCtx {
            state: state.clone(),
            meta: registry::find(&route.meta.method, route.meta.path)
                .expect("every route is in the registry"),
        };
        let handler = route
            .handler
            .route_layer(axum::middleware::from_fn_with_state(ctx, guard::guard));
        let path = route.meta.axum_path();
        let merged = match by_path.remove(&path) {
            Some(existing) => existing.merge(handler),
            None => handler,
        };
        by_path.insert(path, merged);
    }
    let mut router: Router<AppState> = Router::new();
    for (path, handler) in by_path {
        router = router.route(&path, handler);
    }
    let max_body = state.config().api.max_body_bytes;
    router
        .route("/ws", axum::routing::get(handlers::ws::upgrade))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::host_check,
        ))
        .layer(axum::middleware::from_fn_with_state(
            max_body,
            listener::drain_unread_body,
        ))
        .layer(axum::middleware::map_response(envelope::normalise))
        .with_state(state)
}

/// Serve HTTP on `http` and gRPC health on `grpc` until `shutdown`, with the real clock.
pub async fn serve(
    ctx: ServiceContext,
    grpc: UnixListener,
    http: TcpListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    serve_with_clock(ctx, grpc, http, shutdown, Arc::new(SystemClock)).await
}

/// [`serve`] with an injectable clock (tests move session expiry by hand).
pub async fn serve_with_clock(
    ctx: ServiceContext,
    grpc: UnixListener,
    http: TcpListener,
    shutdown: Shutdown,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<()> {
    let limiter = svcos_common::connlimit::ConnLimiter::new(
        ctx.config.api.max_connections_per_peer,
        ctx.config.api.max_connections,
    );
    let state = state::Inner::start(ctx.layout, ctx.config, clock, shutdown.clone());
    let app = router(state);
    let (_reporter, health) = ipc::health().await;
    let grpc_server = ipc::serve(ipc::server().add_service(health), grpc, shutdown.clone());
    let http_server = listener::serve(http, app, limiter, shutdown.clone());
    let (g, ()) = tokio::join!(grpc_server, http_server);
    g?;
    Ok(())
}

/// Run the service until `shutdown`: bind `[api].bind:[api].port`, serve HTTP there and gRPC
/// health on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let addr = SocketAddr::new(ctx.config.api.bind, ctx.config.api.port);
    let http = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the REST API on {addr}: {e}"))?;
    tracing::info!(%addr, "REST API listening");
    serve(ctx, listener, http, shutdown).await
}

/// `svcos gateway`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Gateway, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Gateway, args, Flavor::CurrentThread, run)
}
