//! `/api/auth/*` and `/api/setup/status`: thin forwarding to the auth service, which alone holds
//! the password hash and the session table.

use std::net::{IpAddr, SocketAddr};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::json;
use svcos_proto::auth::v1::{
    CreateSessionRequest, GetStatusRequest, IssueWsTicketRequest, RevokeSessionRequest,
    SetupRequest,
};
use tonic::Code;

use super::{ApiResult, json, parse_body};
use crate::authn::bearer_token;
use crate::envelope::{ApiError, ErrorCode};
use crate::registry::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        route!(POST "/api/auth/session", Open, P, Auth, Full, "Log in with the password; returns a bearer token", create_session),
        route!(DELETE "/api/auth/session/current", Bearer, P, Auth, Full, "Log out: revoke the presented token", revoke_current),
        route!(POST "/api/auth/setup", Open, P, Auth, Full, "Set the first-boot password (3 attempts per 60 s per IP)", setup),
        route!(GET "/api/auth/status", Open, P, Auth, Full, "Whether a password has been set", auth_status),
        route!(POST "/api/auth/ws-ticket", Bearer, P, Auth, Full, "One-time /ws ticket (when [api].websocket_tickets)", ws_ticket),
        route!(GET "/api/setup/status", Open, P, Auth, Full, "Setup wizard state", super::operations::setup::status),
    ]
}

/// `{ "password": "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PasswordBody {
    password: String,
}

/// The client address the auth service rate-limits on: the TCP peer, or, when the peer is the
/// local port-80 proxy, the last address it appended to `X-Forwarded-For`.
pub fn client_ip(peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    if peer.ip().is_loopback()
        && let Some(ip) = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<IpAddr>().ok())
    {
        return ip;
    }
    peer.ip()
}

fn auth_error(status: &tonic::Status) -> ApiError {
    match status.code() {
        Code::ResourceExhausted => {
            let retry = status
                .metadata()
                .get("retry-after")
                .or_else(|| status.metadata().get("retry_after_s"))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(60)
                .max(1);
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too many attempts")
                .detail(status.message().to_string())
                .code(ErrorCode::UnclassifiedError)
                .suggestion(format!("wait {retry} s before trying again"))
                .with("retry_after_s", retry)
                .header(header::RETRY_AFTER, &retry.to_string())
        }
        Code::Unauthenticated => ApiError::unauthorized(if status.message().is_empty() {
            "wrong password"
        } else {
            status.message()
        }),
        Code::FailedPrecondition => {
            ApiError::new(StatusCode::CONFLICT, status.message().to_string())
                .code(ErrorCode::UnclassifiedError)
                .suggestion(
                    "a password exists; it is cleared only by holding the reset button for 15 s",
                )
        }
        Code::InvalidArgument => ApiError::bad_request(status.message().to_string()),
        _ => ApiError::from_grpc("auth", status),
    }
}

async fn create_session(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: PasswordBody = parse_body(&headers, &body)?;
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    let mut auth = state.peers.auth_hash.clone();
    let r = auth
        .create_session(CreateSessionRequest {
            password: b.password,
            client_ip: client_ip(peer, &headers).to_string(),
            user_agent,
        })
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.auth.session.v1",
        "token": r.token,
        "token_type": "Bearer",
        "expires_at": r.expires_at_unix,
        "idle_expires_at": r.idle_expires_at_unix,
    })))
}

async fn revoke_current(
    State(state): State<AppState>,
    session: Option<axum::Extension<crate::authn::Session>>,
    headers: HeaderMap,
) -> ApiResult {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(|| ApiError::unauthorized("missing bearer token"))?
        .to_string();
    let mut auth = state.peers.auth.clone();
    auth.revoke_session(RevokeSessionRequest {
        token: token.clone(),
    })
    .await
    .map_err(|s| auth_error(&s))?;
    // Do not wait for the revocation stream: this gateway must reject the token at once.
    state.sessions.forget_token(&token);
    if let Some(session) = session {
        state.sessions.forget_session(&session.0.session_id);
    }
    Ok(json(
        json!({"schema": "svcos.api.auth.logout.v1", "revoked": true}),
    ))
}

async fn setup(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: PasswordBody = parse_body(&headers, &body)?;
    let mut auth = state.peers.auth_hash.clone();
    auth.setup(SetupRequest {
        password: b.password,
        client_ip: client_ip(peer, &headers).to_string(),
    })
    .await
    .map_err(|s| auth_error(&s))?;
    Ok(json(json!({
        "schema": "svcos.api.auth.setup.v1",
        "password_set": true,
        "next": "POST /api/auth/session with the password",
    })))
}

async fn auth_status(State(state): State<AppState>) -> ApiResult {
    let mut auth = state.peers.auth.clone();
    let r = auth
        .get_status(GetStatusRequest {})
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.auth.status.v1",
        "password_set": r.password_set,
        "setup_required": !r.password_set,
        "websocket_tickets": state.config().api.websocket_tickets,
    })))
}

async fn ws_ticket(State(state): State<AppState>, headers: HeaderMap) -> ApiResult {
    if !state.config().api.websocket_tickets {
        return Err(
            ApiError::new(StatusCode::CONFLICT, "WebSocket tickets are disabled")
                .code(ErrorCode::UnclassifiedError)
                .suggestion(
                    "connect to /ws?token=<bearer token>, or set [api].websocket_tickets = true",
                ),
        );
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(|| ApiError::unauthorized("missing bearer token"))?
        .to_string();
    let mut auth = state.peers.auth.clone();
    let r = auth
        .issue_ws_ticket(IssueWsTicketRequest { token })
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.auth.ws_ticket.v1",
        "ticket": r.ticket,
        "expires_at": r.expires_at_unix,
        "usage": "connect to /ws?ticket=<ticket> on the API port; a ticket works once",
    })))
}
