//! `GET /ws`: live telemetry over WebSocket.
//!
//! Authentication: the bearer token in the `token` query parameter (browsers cannot set headers
//! on a WebSocket), an `Authorization: Bearer` header, or — when `[api].websocket_tickets` is
//! true — a one-time `ticket` from `POST /api/auth/ws-ticket`. The query string is never logged.
//!
//! Messages are text frames of JSON `{"type": "telemetry", "schema": "svcos.ws.telemetry.v1",
//! ...}`, one right after the upgrade and then one per change of its content; a heartbeat frame
//! after [`HEARTBEAT`] of silence (frames: [`svcos_api_types::ws`]). The stream reads the same
//! snapshots as `/api/status`; no peer is called per client. A stream closes (code 1008) when
//! its session is revoked, evicted or logged out.
//!
//! `?topic=logs` (with the filters of `GET /api/logs`: `service`, `level`, `q`, `limit`) turns
//! the stream into a live tail of the merged log instead: the last `limit` matching lines (0 by
//! default), then each new one as `{"type": "log", "schema": "svcos.ws.log.v1", ...}`
//! (`svcos-logs` reads the supervisor's files every [`LOG_POLL`]); heartbeats as above.

use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use svcos_api_types::ws::{HEARTBEAT, heartbeat_frame, telemetry_frame};
use svcos_proto::auth::v1::RedeemWsTicketRequest;

use crate::AppState;
use crate::authn::bearer_token;
use crate::envelope::{ApiError, ErrorCode};

/// Query parameters of `/ws`.
#[derive(Debug, Deserialize, Default)]
pub struct WsQuery {
    token: Option<String>,
    ticket: Option<String>,
    topic: Option<String>,
    #[serde(flatten)]
    logs: svcos_logs::LogQuery,
}

/// How often a log tail reads the files.
const LOG_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// What a stream sends: telemetry, or the merged log's lines (`?topic=logs`).
enum Feed {
    Telemetry,
    Logs(Box<svcos_logs::Follow>),
}

/// The feed a query asks for; a bad log filter is refused before the upgrade.
async fn feed(state: &AppState, q: &WsQuery) -> Result<Feed, ApiError> {
    match q.topic.as_deref() {
        None | Some("telemetry") => Ok(Feed::Telemetry),
        Some("logs") => {
            let (dir, query) = (state.layout.runtime_dir.join("logs"), q.logs.clone());
            tokio::task::spawn_blocking(move || svcos_logs::Follow::start(&dir, &query))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map(|f| Feed::Logs(Box::new(f)))
                .map_err(|e| ApiError::bad_request(e.to_string()).with("field", e.field))
        }
        Some(_) => Err(ApiError::bad_request("invalid value for topic")
            .detail("telemetry or logs")
            .with("field", "topic")),
    }
}

async fn authenticate(
    state: &AppState,
    q: &WsQuery,
    headers: &HeaderMap,
) -> Result<String, ApiError> {
    if let Some(ticket) = q.ticket.as_deref().filter(|t| !t.is_empty()) {
        if !state.config().api.websocket_tickets {
            return Err(ApiError::unauthorized(
                "WebSocket tickets are disabled; use ?token=",
            ));
        }
        let mut auth = state.peers.auth.clone();
        return match auth
            .redeem_ws_ticket(RedeemWsTicketRequest {
                ticket: ticket.to_string(),
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().session_id),
            Err(s)
                if s.code() == tonic::Code::Unauthenticated
                    || s.code() == tonic::Code::InvalidArgument
                    || s.code() == tonic::Code::NotFound =>
            {
                Err(ApiError::unauthorized("invalid, used or expired ticket"))
            }
            Err(_) => Err(ApiError::unavailable("auth")),
        };
    }
    let token = q
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token)
        })
        .ok_or_else(|| {
            ApiError::unauthorized("missing token: connect to /ws?token=<bearer token>")
        })?;
    Ok(state.sessions.validate(token).await?.session_id)
}

/// The upgrade handler.
pub async fn upgrade(
    State(state): State<AppState>,
    Query(q): Query<WsQuery>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let session_id = match authenticate(&state, &q, &headers).await {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let feed = match feed(&state, &q).await {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    match ws {
        Ok(ws) => ws.on_upgrade(move |socket| stream(state, socket, session_id, feed)),
        Err(rejection) => ApiError::new(StatusCode::BAD_REQUEST, "expected a WebSocket upgrade")
            .detail(rejection.body_text())
            .code(ErrorCode::UnclassifiedError)
            .suggestion("connect with a WebSocket client to ws://<miner>:8080/ws?token=<token>")
            .into_response(),
    }
}

async fn stream(state: AppState, mut socket: WebSocket, session_id: String, mut feed: Feed) {
    // Subscribe before the first send so a revocation cannot slip in between.
    let mut ended = state.sessions.subscribe_ended();
    let mut telemetry = state.snapshots.telemetry.clone();
    let mut pools = state.snapshots.pools.clone();
    telemetry.mark_changed();
    // The last telemetry frame sent: a snapshot that renders the same bytes is not sent again.
    let mut last_sent = String::new();
    let mut last_frame_at = tokio::time::Instant::now();
    let logs = matches!(feed, Feed::Logs(..));
    loop {
        let frames: Vec<String> = match &mut feed {
            Feed::Telemetry => {
                let t = telemetry.borrow_and_update().clone();
                let p = pools.borrow_and_update().clone();
                vec![telemetry_frame(t.as_ref(), p.as_ref()).to_string()]
                    .into_iter()
                    .filter(|f| *f != last_sent)
                    .collect()
            }
            Feed::Logs(follow) => follow.frames(),
        };
        for text in frames {
            if socket
                .send(Message::Text(text.as_str().into()))
                .await
                .is_err()
            {
                return;
            }
            last_sent = text;
            last_frame_at = tokio::time::Instant::now();
        }
        loop {
            tokio::select! {
                r = telemetry.changed(), if !logs => { if r.is_err() { return; } break; }
                r = pools.changed(), if !logs => { if r.is_err() { return; } break; }
                _ = tokio::time::sleep(LOG_POLL), if logs => break,
                _ = tokio::time::sleep_until(last_frame_at + HEARTBEAT) => {
                    let beat = heartbeat_frame(state.clock.now_ms()).to_string();
                    if socket.send(Message::Text(beat.into())).await.is_err() {
                        return;
                    }
                    last_frame_at = tokio::time::Instant::now();
                }
                incoming = socket.recv() => match incoming {
                    // Pings are answered by the library; anything else from the client is ignored.
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => {}
                },
                gone = ended.recv() => match gone {
                    Ok(id) if id == session_id => {
                        // 1008: policy violation — the session behind this stream has ended.
                        let _ = socket.send(Message::Close(Some(axum::extract::ws::CloseFrame {
                            code: 1008,
                            reason: "session ended".into(),
                        }))).await;
                        return;
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                },
                _ = state.shutdown.wait() => {
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
            }
        }
    }
}
