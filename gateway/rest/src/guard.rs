//! What runs before every handler: body-size limit, bearer auth, mode gating, the debug confirm
//! rule, and the audit record of writes. Plus the whole-router Host check (DNS-rebinding
//! defence).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::Value;
use svcos_common::config::Mode;
use svcos_common::hostcheck::{self, HostPolicy};

use crate::AppState;
use crate::authn::{Session, bearer_token};
use crate::envelope::ApiError;
use crate::routing::{AuthClass, RouteMeta, mode_rank};
use crate::state::AuditEntry;

/// The state of one route's guard.
#[derive(Clone)]
pub struct GuardCtx {
    /// The gateway.
    pub state: AppState,
    /// The route being guarded.
    pub meta: &'static RouteMeta,
}

/// Marks a request made in process on behalf of an integration the owner enabled (an MQTT
/// command), not over HTTP: it stands in for the bearer session and names the caller in the
/// audit log. Only code in this process can attach it (HTTP cannot set extensions); mode gating,
/// the debug confirm rule, validation and the audit record apply as to any caller.
#[derive(Debug, Clone, Copy)]
pub struct InternalCaller(pub &'static str);

/// Check a request against its route's rules, then run the handler.
pub async fn guard(State(g): State<GuardCtx>, req: Request, next: Next) -> Response {
    let config = g.state.config();
    let max_body = config.api.max_body_bytes;
    // Bundle uploads stream to disk under their own, larger limit.
    let limited = !crate::routing::is_upload(g.meta.path);
    if limited
        && let Some(len) = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && len > max_body as u64
    {
        return payload_too_large(max_body).into_response();
    }

    let mut needs_bearer = match g.meta.auth {
        AuthClass::Open => false,
        AuthClass::Bearer => true,
        AuthClass::Metrics => config.api.metrics_require_auth,
    };
    let mut session_id = None;
    if let Some(InternalCaller(caller)) = req.extensions().get::<InternalCaller>().copied() {
        needs_bearer = false;
        session_id = Some(format!("internal:{caller}"));
    }
    // First boot: the wizard's first steps are reachable without a token while no password
    // exists (nobody can hold one yet); fails closed when auth cannot say.
    if needs_bearer
        && !req.headers().contains_key(header::AUTHORIZATION)
        && crate::routing::first_boot_open(g.meta.path)
    {
        let mut auth = g.state.peers.auth.clone();
        let status = auth
            .get_status(svcos_proto::auth::v1::GetStatusRequest {})
            .await;
        needs_bearer = !matches!(status, Ok(r) if !r.get_ref().password_set);
    }
    let mut req = req;
    if needs_bearer {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let Some(token) = token else {
            return ApiError::unauthorized("missing bearer token").into_response();
        };
        match g.state.sessions.validate_for(token, g.meta.mutates()).await {
            Ok(session) => {
                // MCP answers read tools to any token and checks control tools itself.
                if session.read_only && g.meta.mutates() && g.meta.path != "/mcp" {
                    return read_only_forbidden().into_response();
                }
                session_id = Some(session.session_id.clone());
                req.extensions_mut().insert(session);
            }
            Err(e) => return e.into_response(),
        }
    }

    let current = config.system.mode;
    let required = g.meta.required_mode();
    if mode_rank(current) < mode_rank(required) {
        return mode_forbidden(current, required).into_response();
    }

    if required == Mode::Hacker && g.meta.mutates() {
        let (parts, body) = req.into_parts();
        let bytes = match http_body_util::Limited::new(body, max_body).collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) => return payload_too_large(max_body).into_response(),
        };
        let confirmed = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("confirm").and_then(Value::as_bool))
            == Some(true);
        if !confirmed {
            return ApiError::new(
                StatusCode::PRECONDITION_REQUIRED,
                "debug writes need an explicit confirmation",
            )
            .detail("the JSON body must contain \"confirm\": true")
            .suggestion("resend the request with \"confirm\": true in the body")
            .with("current_mode", current.as_str())
            .into_response();
        }
        req = Request::from_parts(parts, Body::from(bytes));
    }

    let resp = next.run(req).await;
    if g.meta.mutates() {
        g.state
            .record_audit(AuditEntry {
                timestamp_ms: g.state.clock.now_ms(),
                method: g.meta.method.as_str(),
                path: g.meta.path,
                status: resp.status().as_u16(),
                session_id,
            })
            .await;
    }
    resp
}

/// 413 with the envelope.
pub fn payload_too_large(max: usize) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        .detail(format!("the limit is {max} bytes ([api].max_body_bytes)"))
        .code(crate::envelope::ErrorCode::UnclassifiedError)
}

/// 403: a write presented with a read-only API token.
pub fn read_only_forbidden() -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "this token is read-only")
        .detail(
            "API tokens may read (GET, and MCP read tools); every change needs an owner session",
        )
        .code(crate::envelope::ErrorCode::UnclassifiedError)
        .suggestion("log in with the owner password (POST /api/auth/session) to make changes")
        .with("token_scope", "read")
}

/// 403 naming the current and the required mode.
pub fn mode_forbidden(current: Mode, required: Mode) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "this endpoint needs {} mode; the miner is in {} mode",
            required.as_str(),
            current.as_str()
        ),
    )
    .detail("operating modes gate API surfaces: home < standard < hacker")
    .suggestion(format!(
        "switch [system].mode to {} (POST /api/config) to use it",
        required.as_str()
    ))
    .with("current_mode", current.as_str())
    .with("required_mode", required.as_str())
}

/// Whole-router check (DNS-rebinding defence): the Host header must name this miner by the
/// policy the proxy uses too ([`svcos_common::hostcheck`]); a refusal is 421 on both ports.
pub async fn host_check(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(host) = req.headers().get(header::HOST) {
        let ok = host.to_str().ok().is_some_and(|h| {
            let config = state.config();
            HostPolicy::with_extra(&config.system.hostname, &config.api.allowed_hosts).allows(h)
        });
        if !ok {
            return ApiError::new(
                StatusCode::from_u16(hostcheck::REFUSED_STATUS).expect("a valid status"),
                "unexpected Host header",
            )
            .detail(hostcheck::REFUSED_DETAIL)
            .code(crate::envelope::ErrorCode::UnclassifiedError)
            .suggestion("open the miner by its IP address, or add the name to [api].allowed_hosts")
            .into_response();
        }
    }
    next.run(req).await
}

/// The session of an authenticated request, if the route required one.
pub fn session_of(req: &Request) -> Option<&Session> {
    req.extensions().get::<Session>()
}
