//! The MCP server behind `POST /mcp` (Model Context Protocol, official Rust SDK `rmcp`).
//!
//! Design:
//! - **Stateless Streamable HTTP with JSON answers**: every `POST /mcp` carries one JSON-RPC
//!   message and gets one `application/json` answer; there are no MCP sessions, so the gateway
//!   keeps its single `POST /mcp` row (no `GET`/`DELETE` for session streams).
//! - **Mounted, not embedded**: this crate knows nothing of the gateway's state, routes or
//!   guard. The gateway hands [`handle`] a [`Gateway`]: the one way for a tool to run a REST
//!   route in process, to tell an owner session from any other caller, and to switch pools.
//!   So the gateway's route groups never import MCP and MCP never imports a route group.
//! - **Behind the gateway's guard**: the route is a bearer row of the gateway's registry, so a
//!   request without a valid session gets 401 with the envelope before MCP sees it, and the
//!   mode table applies. The Host check is the gateway's, not rmcp's.
//! - **Tools answer from the REST routes** ([`Gateway::call`]): each tool runs fixed registry
//!   rows with the caller's token, so MCP and REST cannot disagree and each control tool keeps
//!   its REST equivalent's mode gating and validation ([`tools`]).
//! - **Monitoring for any agent, control for the owner** ([`Gateway::is_owner`]): read tools
//!   only call `GET` rows; control tools also need an owner session.

pub mod tools;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use futures::future::BoxFuture;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value};

/// A REST answer as a tool sees it: the JSON body of a 2xx, or the error envelope of anything
/// else.
pub type RestAnswer = Result<Value, Value>;

/// What the gateway lends the MCP server for one request.
pub trait Gateway: Send + Sync + 'static {
    /// Run the registry row `method path` in process behind its own guard, with the caller's
    /// `Authorization` header and an optional JSON body.
    fn call<'a>(
        &'a self,
        authorization: Option<&'a HeaderValue>,
        method: Method,
        path: &'static str,
        body: Option<&'a Value>,
    ) -> BoxFuture<'a, RestAnswer>;

    /// Whether the HTTP request behind a tool call carries an owner session (one that the auth
    /// service validated and that is not a read-only API token).
    fn is_owner(&self, parts: &Parts) -> bool;

    /// Switch mining to pool `index` now (not saved), under the mode rule of `POST /api/pools`;
    /// an error is the envelope.
    fn switch_pool(&self, index: u32) -> BoxFuture<'_, Result<(), Value>>;
}

/// The error envelope (`{error, detail?, code?, suggestion?, ...extra}`, empty members
/// omitted) for errors a tool raises itself: the members and order of the gateway's envelope.
pub fn envelope(
    error: &str,
    detail: &str,
    code: Option<&str>,
    suggestion: &str,
    extra: &[(&str, Value)],
) -> Value {
    let mut m = Map::new();
    m.insert("error".into(), error.into());
    if !detail.is_empty() {
        m.insert("detail".into(), detail.into());
    }
    if let Some(code) = code {
        m.insert("code".into(), code.into());
    }
    if !suggestion.is_empty() {
        m.insert("suggestion".into(), suggestion.into());
    }
    for (k, v) in extra {
        m.insert((*k).into(), v.clone());
    }
    Value::Object(m)
}

/// `POST /mcp`: hand the request to the stateless Streamable HTTP transport. Bodies above
/// `max_body_bytes` are refused (the gateway passes its `[api].max_body_bytes`).
pub async fn handle(gateway: Arc<dyn Gateway>, max_body_bytes: usize, req: Request) -> Response {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The gateway's Host check (IP literal, localhost, hostname, hostname.local) already ran.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(max_body_bytes);
    let service = StreamableHttpService::new(
        move || Ok(tools::SvcosMcp::new(gateway.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    service.handle(req).await.map(Body::new)
}
