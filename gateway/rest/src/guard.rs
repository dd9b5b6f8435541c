//! What runs before every handler: body-size limit, bearer auth, mode gating, the body rule of
//! writes (nothing or a JSON object), the debug confirm rule, and the audit record of writes.
//! Plus the whole-router Host check (DNS-rebinding defence) and Origin check (cross-site request
//! forgery defence).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
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
                if session.read_only && crate::routing::reveals_secrets(g.meta.path) {
                    return read_only_secrets_forbidden().into_response();
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

    // Every write's body is checked here, before its handler runs, so a route that reads no
    // body still refuses a malformed or non-JSON one instead of acting on it, and a debug
    // write's confirm rule reads a body already known to be JSON.
    let mut body = None;
    if g.meta.mutates() && !crate::routing::takes_raw_body(g.meta.path) {
        let (parts, raw) = req.into_parts();
        let bytes = match http_body_util::Limited::new(raw, max_body).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) if svcos_common::httpserve::is_too_slow(&*e) => {
                return ApiError::new(StatusCode::REQUEST_TIMEOUT, e.to_string()).into_response();
            }
            Err(_) => return payload_too_large(max_body).into_response(),
        };
        let arrays = crate::routing::accepts_json_array(g.meta.path);
        body = match crate::body::json_body(&parts.headers, &bytes, arrays) {
            Ok(v) => v,
            Err(e) => return e.into_response(),
        };
        req = Request::from_parts(parts, Body::from(bytes));
    }

    if required == Mode::Hacker && g.meta.mutates() {
        let confirmed = body
            .as_ref()
            .and_then(|v| v.get("confirm"))
            .and_then(Value::as_bool)
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
    }

    let mut resp = next.run(req).await;
    if needs_bearer {
        resp.extensions_mut()
            .insert(svcos_common::connlimit::Authenticated);
    }
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

/// 403: a read that answers secrets in the clear, presented with a read-only API token.
pub fn read_only_secrets_forbidden() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "this token is read-only and this answer holds secrets",
    )
    .detail("the config export (a backup) carries pool, MQTT and webhook secrets unmasked; API tokens read masked copies only (GET /api/config)")
    .code(crate::envelope::ErrorCode::UnclassifiedError)
    .suggestion("log in with the owner password (POST /api/auth/session) to take a backup")
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
    // Two Host headers would let a rebinding page pass the first and leave the second for
    // whatever reads the last one; no client sends two (RFC 9112 §3.2).
    if req.headers().get_all(header::HOST).iter().nth(1).is_some() {
        return ApiError::bad_request("more than one Host header")
            .detail("a request names exactly one host (RFC 9112 section 3.2)")
            .suggestion("send one Host header")
            .into_response();
    }
    // Without a Host, or with an absolute-form target naming another host, the check would
    // pass a request for a name it never saw (RFC 9112 sections 3.2, 3.2.2).
    let host = req.headers().get(header::HOST);
    let target = req.uri().authority().map(|a| a.as_str());
    if host.is_none()
        || target
            .is_some_and(|t| host.is_some_and(|h| !h.as_bytes().eq_ignore_ascii_case(t.as_bytes())))
    {
        return ApiError::bad_request("missing Host header, or a target naming another host")
            .detail("a request names this miner in its Host header, and an absolute-form target names the same host")
            .suggestion("send a Host header naming the miner, and an origin-form target (a path)")
            .into_response();
    }
    if let Some(host) = host {
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

/// Whole-router check (cross-site request forgery defence): a state-changing request a browser
/// sent on behalf of another site's page is refused with 403. Browsers send such "simple"
/// requests (a form post, `text/plain`) without a CORS preflight and mark them with `Origin`
/// (and `Sec-Fetch-Site`); clients that are not browsers (curl, pyasic, fleet tools) send
/// neither and pass. Same origin means `Origin`'s host and port are the `Host` header's: the
/// port-80 proxy forwards `Host` and `Origin` unchanged, so the dashboard it serves is same-origin
/// to the gateway too.
pub async fn origin_check(req: Request, next: Next) -> Response {
    let safe = matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    if !safe && let Some(why) = cross_site(req.headers()) {
        return ApiError::new(StatusCode::FORBIDDEN, "cross-site request refused")
            .detail(why)
            .code(crate::envelope::ErrorCode::UnclassifiedError)
            .suggestion(
                "use the dashboard served by the miner itself, or call the API from a client that is not a browser page of another site",
            )
            .into_response();
    }
    next.run(req).await
}

/// Why a request is cross-site, or `None` when it is same-origin or carries no browser marks.
pub fn cross_site(headers: &axum::http::HeaderMap) -> Option<String> {
    let fetch_site = headers
        .get_all("sec-fetch-site")
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if fetch_site {
        return Some("the browser marked it Sec-Fetch-Site: cross-site".into());
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let origin = origins.next()?;
    if origins.next().is_some() {
        return Some("more than one Origin header".into());
    }
    let origin = origin.to_str().unwrap_or("").trim();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if host.is_some_and(|host| same_origin(origin, host)) {
        None
    } else {
        // `Origin: null` (a sandboxed or file page) lands here too: it names no origin at all.
        Some(format!(
            "Origin {origin:?} is not this miner ({})",
            host.unwrap_or("no Host header")
        ))
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as a `Host` value,
/// an omitted port being the scheme's default.
pub fn same_origin(origin: &str, host: &str) -> bool {
    let Ok(origin) = origin.parse::<axum::http::Uri>() else {
        return false;
    };
    let default_port = match origin.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => 80,
        Some(s) if s.eq_ignore_ascii_case("https") => 443,
        _ => return false,
    };
    if origin.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return false;
    }
    let (Some(origin), Ok(host)) = (
        origin.authority(),
        host.trim().parse::<axum::http::uri::Authority>(),
    ) else {
        return false;
    };
    origin.host().eq_ignore_ascii_case(host.host())
        && origin.port_u16().unwrap_or(default_port) == host.port_u16().unwrap_or(default_port)
}

/// The session of an authenticated request, if the route required one.
pub fn session_of(req: &Request) -> Option<&Session> {
    req.extensions().get::<Session>()
}
