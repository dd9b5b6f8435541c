//! In-process calls of registry routes on behalf of an MCP tool or an MQTT command.
//!
//! A tool does not rebuild what a REST handler already answers: it runs the handler of one fixed
//! registry row, behind that row's own guard, with the caller's `Authorization` header. So the
//! tool gets the route's bearer check, its mode gating, its request validation, its audit record
//! and its error envelope, and an answer that cannot drift from the REST one.

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::AppState;
use crate::envelope;
use crate::guard::{self, GuardCtx};

/// Largest REST answer a tool reads back (the status body is a few KiB; chips a few hundred).
const MAX_ANSWER_BYTES: usize = 4 << 20;

pub use svcos_mcp::RestAnswer;

/// Run `method path` (a registry row) in process with `authorization` and an optional JSON
/// body; the answer is the route's own JSON or its error envelope.
pub async fn call(
    state: &AppState,
    authorization: Option<&HeaderValue>,
    method: Method,
    path: &'static str,
    body: Option<&Value>,
) -> RestAnswer {
    run(state, authorization, None, method, path, body).await.1
}

/// Run `method path` in process for an integration the owner enabled (see
/// [`guard::InternalCaller`]); the answer comes with its HTTP status.
pub async fn call_internal(
    state: &AppState,
    caller: guard::InternalCaller,
    method: Method,
    path: &'static str,
    body: Option<&Value>,
) -> (StatusCode, RestAnswer) {
    run(state, None, Some(caller), method, path, body).await
}

async fn run(
    state: &AppState,
    authorization: Option<&HeaderValue>,
    caller: Option<guard::InternalCaller>,
    method: Method,
    path: &'static str,
    body: Option<&Value>,
) -> (StatusCode, RestAnswer) {
    let table = state.routes();
    let (Some(meta), Some(handler)) = (table.find(&method, path), table.handler(&method, path))
    else {
        // Only reachable through a typo in a tool table; the tests list every tool's route.
        return (
            StatusCode::NOT_FOUND,
            Err(json!({"error": format!("no route {method} {path} is registered")})),
        );
    };
    let ctx = GuardCtx {
        state: state.clone(),
        meta,
    };
    let service = handler
        .clone()
        .route_layer(axum::middleware::from_fn_with_state(ctx, guard::guard))
        .with_state(state.clone());
    let bytes = body.map(|b| serde_json::to_vec(b).expect("JSON values serialise"));
    let mut req = Request::builder().method(method).uri(path);
    if let Some(auth) = authorization {
        req = req.header(header::AUTHORIZATION, auth.clone());
    }
    if let Some(b) = &bytes {
        req = req
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, b.len());
    }
    let mut req = req
        .body(Body::from(bytes.unwrap_or_default()))
        .expect("a request of a registered path and method is valid");
    if let Some(caller) = caller {
        req.extensions_mut().insert(caller);
    }
    let Ok(resp) = service.oneshot(req).await;
    let resp = envelope::normalise(resp).await;
    let status = resp.status();
    let body = match axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return (
                status,
                Err(json!({"error": format!("reading the answer of {path}: {e}")})),
            );
        }
    };
    let value: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        // Non-JSON success bodies (CSV, TOML) are not offered as tools; say so if one slips in.
        json!({"error": format!("{path} did not answer JSON"), "status": status.as_u16()})
    });
    if status.is_success() {
        (status, Ok(value))
    } else {
        (status, Err(value))
    }
}
