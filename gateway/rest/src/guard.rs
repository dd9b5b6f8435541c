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

use crate::AppState;
use crate::authn::{Session, bearer_token};
use crate::envelope::ApiError;
use crate::registry::{AuthClass, RouteMeta, mode_rank};
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
    let limited = !crate::handlers::firmware::is_upload(g.meta.path);
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
        && crate::handlers::operations::setup::first_boot_open(g.meta.path)
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
        match g.state.sessions.validate(token).await {
            Ok(session) => {
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
        g.state.record_audit(AuditEntry {
            timestamp_ms: g.state.clock.now_ms(),
            method: g.meta.method.as_str(),
            path: g.meta.path,
            status: resp.status().as_u16(),
            session_id,
        });
    }
    resp
}

/// 413 with the envelope.
pub fn payload_too_large(max: usize) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        .detail(format!("the limit is {max} bytes ([api].max_body_bytes)"))
        .code(crate::envelope::ErrorCode::UnclassifiedError)
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

/// Whole-router check: the Host header must be an IP literal, `localhost`, the configured
/// hostname or `<hostname>.local`; anything else is a DNS-rebinding attempt.
pub async fn host_check(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(host) = req.headers().get(header::HOST) {
        let ok = host
            .to_str()
            .ok()
            .is_some_and(|h| host_allowed(h, &state.config().system.hostname));
        if !ok {
            return ApiError::new(StatusCode::FORBIDDEN, "unexpected Host header")
                .detail("the firmware API answers only to its IP address, its hostname or <hostname>.local")
                .code(crate::envelope::ErrorCode::UnclassifiedError)
                .into_response();
        }
    }
    next.run(req).await
}

/// Whether a Host header value names this miner.
pub fn host_allowed(host: &str, hostname: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return rest
            .split_once(']')
            .is_some_and(|(addr, _)| addr.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(host, |(name, _)| name)
    };
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name.eq_ignore_ascii_case(hostname)
        || name
            .strip_suffix(".local")
            .or_else(|| name.strip_suffix(".LOCAL"))
            .is_some_and(|n| n.eq_ignore_ascii_case(hostname))
}

/// The session of an authenticated request, if the route required one.
pub fn session_of(req: &Request) -> Option<&Session> {
    req.extensions().get::<Session>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rules() {
        assert!(host_allowed("192.168.1.5:8080", "rig"));
        assert!(host_allowed("192.168.1.5", "rig"));
        assert!(host_allowed("[::1]:8080", "rig"));
        assert!(host_allowed("rig.local", "rig"));
        assert!(host_allowed("RIG:80", "rig"));
        assert!(host_allowed("localhost:8080", "rig"));
        assert!(!host_allowed("evil.example:8080", "rig"));
        assert!(!host_allowed("rig.evil.example", "rig"));
    }
}
