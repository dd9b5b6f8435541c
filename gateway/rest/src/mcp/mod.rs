//! The MCP server behind `POST /mcp` (Model Context Protocol, official Rust SDK `rmcp`).
//!
//! Design:
//! - **Stateless Streamable HTTP with JSON answers**: every `POST /mcp` carries one JSON-RPC
//!   message and gets one `application/json` answer; there are no MCP sessions, so the registry
//!   keeps its single `POST /mcp` row (no `GET`/`DELETE` for session streams).
//! - **Behind the gateway's guard**: the route is a bearer row of the registry, so a request
//!   without a valid session gets 401 with the envelope before MCP sees it, and the mode table
//!   applies (`/mcp` is reachable in every mode). The Host check is the gateway's, not rmcp's.
//! - **Tools answer from the REST routes** ([`dispatch`]): each tool runs fixed registry rows
//!   in process with the caller's token, so MCP and REST cannot disagree and each control tool
//!   keeps its REST equivalent's mode gating and validation ([`tools`]).
//! - **Monitoring for any agent, control for the owner** ([`tools::Access`]): read tools only
//!   dispatch `GET` rows; control tools also need an owner session.

pub mod dispatch;
pub mod tools;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::AppState;

/// `POST /mcp`: hand the request to the stateless Streamable HTTP transport.
pub async fn handle(State(state): State<AppState>, req: Request) -> Response {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        // The gateway's Host check (IP literal, localhost, hostname, hostname.local) already ran.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(state.config().api.max_body_bytes);
    let service = StreamableHttpService::new(
        move || Ok(tools::SvcosMcp::new(state.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    service.handle(req).await.map(Body::new)
}
