//! `/api/auth/*` and `/api/setup/status`: thin forwarding to the auth service, which alone holds
//! the password hash and the session table.

use std::net::SocketAddr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use svcos_api_types::auth::*;
use svcos_api_types::requests::{ChangePasswordRequest, CreateTokenRequest, PasswordRequest};
use svcos_proto::auth::v1::{
    CreateSessionRequest, IssueWsTicketRequest, RevokeSessionRequest, SetupRequest,
};
use tonic::Code;

use super::{ApiResult, parse_body};
use crate::authn::bearer_token;
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry; `setup_status` answers `GET /api/setup/status`.
pub fn routes<T: 'static>(
    setup_status: impl axum::handler::Handler<T, AppState>,
) -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/auth/session", Open, P, Auth, Full, "Log in with the password; returns a bearer token", create_session, req: svcos_api_types::requests::PasswordRequest, res: svcos_api_types::auth::SessionBody),
        route!(DELETE "/api/auth/session/current", Bearer, P, Auth, Full, "Log out: revoke the presented token", revoke_current, res: svcos_api_types::auth::LogoutBody),
        route!(POST "/api/auth/setup", Open, P, Auth, Full, "Set the first-boot password (3 attempts per 60 s per IP)", setup, req: svcos_api_types::requests::PasswordRequest, res: svcos_api_types::auth::SetupBody),
        route!(GET "/api/auth/status", Open, P, Auth, Full, "Whether a password has been set", auth_status, res: svcos_api_types::auth::AuthStatusBody),
        route!(POST "/api/auth/ws-ticket", Bearer, P, Auth, Full, "One-time /ws ticket (when [api].websocket_tickets)", ws_ticket, res: svcos_api_types::auth::WsTicketBody),
        route!(GET "/api/setup/status", Open, P, Auth, Full, "Setup wizard state", setup_status, res: svcos_api_types::setup::SetupStatusBody),
        route!(POST "/api/auth/password", Bearer, U, Auth, Full, "Change the password with the current one; other sessions are revoked", change_password, req: svcos_api_types::requests::ChangePasswordRequest, res: svcos_api_types::auth::PasswordChangedBody),
        route!(GET "/api/auth/tokens", Bearer, U, Auth, Full, "The read-only API tokens (owner session only)", list_tokens, res: svcos_api_types::auth::TokensBody),
        route!(POST "/api/auth/tokens", Bearer, U, Auth, Full, "Create a read-only API token (owner session only; shown once)", create_token, req: svcos_api_types::requests::CreateTokenRequest, res: svcos_api_types::auth::CreatedTokenBody),
        route!(DELETE "/api/auth/tokens/:id", Bearer, U, Auth, Full, "Revoke a read-only API token (owner session only)", revoke_token, res: svcos_api_types::auth::TokenRevokedBody),
    ]
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
        Code::PermissionDenied => crate::guard::read_only_forbidden(),
        Code::NotFound => ApiError::new(StatusCode::NOT_FOUND, status.message().to_string())
            .code(ErrorCode::UnclassifiedError)
            .suggestion("GET /api/auth/tokens lists the ids"),
        _ => ApiError::from_grpc("auth", status),
    }
}

async fn create_session(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: PasswordRequest = parse_body(&headers, &body)?;
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
            client_ip: state.client_ip(peer, &headers).to_string(),
            user_agent,
        })
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(Json(SessionBody::new(
        r.token,
        r.expires_at_unix,
        r.idle_expires_at_unix,
    ))
    .into_response())
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
    Ok(Json(LOGOUT).into_response())
}

async fn setup(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: PasswordRequest = parse_body(&headers, &body)?;
    let mut auth = state.peers.auth_hash.clone();
    auth.setup(SetupRequest {
        password: b.password,
        client_ip: state.client_ip(peer, &headers).to_string(),
    })
    .await
    .map_err(|s| auth_error(&s))?;
    state.await_password_set(true).await;
    Ok(Json(SETUP_DONE).into_response())
}

async fn auth_status(State(state): State<AppState>) -> ApiResult {
    let password_set = state.password_set().await.map_err(|s| auth_error(&s))?;
    let tickets = state.config().api.websocket_tickets;
    Ok(Json(AuthStatusBody::new(password_set, tickets)).into_response())
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
    Ok(Json(WsTicketBody::new(r.ticket, r.expires_at_unix)).into_response())
}

/// The caller's bearer token (the guard has validated it).
fn presented_token(headers: &HeaderMap) -> ApiResult<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .map(str::to_string)
        .ok_or_else(|| ApiError::unauthorized("missing bearer token"))
}

/// Token management is for the owner: a read-only token may not even list the others.
fn owner_only(session: &Option<axum::Extension<crate::authn::Session>>) -> ApiResult<()> {
    match session {
        Some(s) if s.0.read_only => Err(crate::guard::read_only_forbidden()),
        _ => Ok(()),
    }
}

async fn change_password(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ChangePasswordRequest = parse_body(&headers, &body)?;
    let token = presented_token(&headers)?;
    let mut auth = state.peers.auth_hash.clone();
    let r = auth
        .change_password(svcos_proto::auth::v1::ChangePasswordRequest {
            token,
            current_password: b.current_password,
            new_password: b.new_password,
            client_ip: state.client_ip(peer, &headers).to_string(),
        })
        .await
        .map_err(|s| match s.code() {
            // The session is fine (the guard checked it): do not answer 401, which tells a
            // client to log in again.
            Code::Unauthenticated => ApiError::bad_request("the current password is wrong")
                .code(ErrorCode::UnclassifiedError)
                .with("field", "current_password"),
            _ => auth_error(&s),
        })?
        .into_inner();
    Ok(Json(PasswordChangedBody::new(r.sessions_revoked)).into_response())
}

async fn list_tokens(
    State(state): State<AppState>,
    session: Option<axum::Extension<crate::authn::Session>>,
) -> ApiResult {
    owner_only(&session)?;
    let mut auth = state.peers.auth.clone();
    let r = auth
        .list_api_tokens(svcos_proto::auth::v1::ListApiTokensRequest {})
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(Json(TokensBody::from(r.tokens.as_slice())).into_response())
}

async fn create_token(
    State(state): State<AppState>,
    session: Option<axum::Extension<crate::authn::Session>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    owner_only(&session)?;
    let b: CreateTokenRequest = parse_body(&headers, &body)?;
    if b.scope.as_deref().is_some_and(|s| s != "read") {
        return Err(ApiError::bad_request("unknown scope")
            .detail("API tokens have one scope: \"read\"")
            .with("field", "scope"));
    }
    let token = presented_token(&headers)?;
    let mut auth = state.peers.auth.clone();
    let r = auth
        .create_api_token(svcos_proto::auth::v1::CreateApiTokenRequest {
            token,
            name: b.name,
        })
        .await
        .map_err(|s| auth_error(&s))?
        .into_inner();
    Ok(Json(CreatedTokenBody::new(r.info.as_ref(), r.api_token)).into_response())
}

async fn revoke_token(
    State(state): State<AppState>,
    session: Option<axum::Extension<crate::authn::Session>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult {
    owner_only(&session)?;
    let mut auth = state.peers.auth.clone();
    auth.revoke_api_token(svcos_proto::auth::v1::RevokeApiTokenRequest { id: id.clone() })
        .await
        .map_err(|s| auth_error(&s))?;
    // Do not wait for the revocation stream: this gateway must reject the token at once.
    state.sessions.forget_session(&id);
    Ok(Json(TokenRevokedBody::new(id)).into_response())
}
