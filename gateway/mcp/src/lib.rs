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
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use futures::future::BoxFuture;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::de::IgnoredAny;
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
    let req = match checked_message(req, max_body_bytes).await {
        Ok(req) => req,
        Err(refusal) => return refusal,
    };
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

/// A JSON body that is not one JSON-RPC message gets 400 with the envelope here: rmcp answers it
/// 415 "unsupported media type", which sends a client that did set `application/json` after the
/// wrong fault. The Streamable HTTP transport asks for an HTTP error status such as 400 for input
/// the server cannot accept; `jsonrpc_code` carries JSON-RPC's own verdict (-32700 parse error,
/// -32600 invalid request). Any other content type is left to rmcp's 415.
async fn checked_message(req: Request, max_body_bytes: usize) -> Result<Request, Response> {
    let json = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        });
    if !json {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max_body_bytes).await else {
        return Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            envelope(
                "request body too large",
                &format!("the limit is {max_body_bytes} bytes ([api].max_body_bytes)"),
                Some("unclassified_error"),
                "send a smaller message",
                &[],
            ),
        ));
    };
    if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        let (error, jsonrpc_code) = if serde_json::from_slice::<IgnoredAny>(&bytes).is_err() {
            ("malformed JSON body", -32700)
        } else {
            ("not a JSON-RPC 2.0 request or notification", -32600)
        };
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            envelope(
                error,
                &e.to_string(),
                Some("unclassified_error"),
                "send one JSON-RPC 2.0 message object, e.g. {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
                &[("jsonrpc_code", jsonrpc_code.into())],
            ),
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

fn refusal(status: StatusCode, envelope: Value) -> Response {
    let mut resp = Response::new(Body::from(envelope.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
