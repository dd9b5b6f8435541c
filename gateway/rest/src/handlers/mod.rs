//! Route handlers, one module per area. Each module's `routes()` is its part of the registry.

pub mod auth;
pub mod catalog;
pub mod config;
pub mod diagnostics;
pub mod discovery;
pub mod firmware;
pub mod hardware;
pub mod history;
pub mod integrations;
pub mod mcp;
pub mod mining;
pub mod operations;
pub mod pools;
pub mod status;
pub mod sv2;
pub mod tuning;
pub mod ws;

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::envelope::{ApiError, ErrorCode};

/// Result type of handlers.
pub type ApiResult<T = Response> = Result<T, ApiError>;

/// 200 with a JSON body.
pub fn json(value: Value) -> Response {
    Json(value).into_response()
}

/// The fallback for paths the registry does not mount.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such route")
        .detail(format!("nothing is mounted at {}", uri.path()))
        .code(ErrorCode::UnclassifiedError)
        .suggestion("GET /api/index lists the declared routes")
}

/// Parse an optional JSON body: empty means `{}`; otherwise it must be JSON with
/// `Content-Type: application/json`. Errors come back as the envelope.
pub fn parse_body<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> ApiResult<T> {
    let trimmed = body.iter().all(u8::is_ascii_whitespace);
    let value: Value = if trimmed {
        Value::Object(Default::default())
    } else {
        let is_json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                let ct = ct.to_ascii_lowercase();
                ct.starts_with("application/json") || ct.contains("+json")
            });
        if !is_json {
            return Err(
                ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected a JSON body")
                    .code(ErrorCode::UnclassifiedError)
                    .suggestion("send Content-Type: application/json"),
            );
        }
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request("malformed JSON body")
                .detail(e.to_string())
                .suggestion("send a JSON object of the documented shape")
        })?
    };
    serde_json::from_value(value).map_err(|e| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unexpected JSON body")
            .detail(e.to_string())
            .code(ErrorCode::UnclassifiedError)
            .suggestion("see docs/API-SHAPES.md for the request shape")
    })
}

/// Round a float for JSON output (telemetry does not need 15 digits).
pub fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// The config file's JSON Schema as served: the committed `docs/config.schema.json`, which
/// `tests/registry.rs` keeps derived from the config types (so the image needs no schema code).
pub fn config_json_schema() -> Value {
    serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/config.schema.json"
    )))
    .expect("docs/config.schema.json is JSON (tests/registry.rs writes it)")
}

/// Every supervised service as the supervisor reports it (one call, no caching: lifecycle views
/// must show the current pids).
pub async fn supervised_services(
    state: &crate::AppState,
) -> ApiResult<Vec<svcos_proto::supervisor::v1::ServiceInfo>> {
    let mut sup = state.peers.supervisor.clone();
    Ok(sup
        .list_services(svcos_proto::supervisor::v1::ListServicesRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner()
        .services)
}

/// The supervisor's update status (firmware, discovery; 20 s: it may be verifying a bundle).
pub async fn fetch_update_status(
    state: &crate::AppState,
) -> ApiResult<svcos_proto::supervisor::v1::UpdateStatus> {
    use svcos_proto::supervisor::v1::update_service_client::UpdateServiceClient;
    let socket = state.layout.socket(svcos_common::ServiceName::Supervisor);
    let channel =
        svcos_common::ipc::channel_with_timeout(socket, std::time::Duration::from_secs(20));
    UpdateServiceClient::new(channel)
        .get_update_status(svcos_proto::supervisor::v1::GetUpdateStatusRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|s| ApiError::from_grpc("supervisor", &s))
}

/// The current safety warnings (also what the setup wizard records as acknowledged).
pub fn safety_warnings_body(state: &crate::AppState) -> Value {
    let config = state.config();
    let mut warnings = Vec::new();
    let mut warn = |id: &str, severity: &str, message: String| {
        warnings.push(serde_json::json!({"id": id, "severity": severity, "message": message}));
    };
    if config.system.mode == svcos_common::config::Mode::Hacker {
        warn(
            "hacker_mode",
            "warning",
            "Hacker mode is on: raw debug endpoints can damage hardware".into(),
        );
    }
    if config.donation.enabled && config.donation.percent > 0.0 {
        warn(
            "donation_enabled",
            "info",
            format!("{} % of mining time is donated", config.donation.percent),
        );
    }
    if config.thermal.fan_manual_percent > 0 {
        warn(
            "manual_fan",
            "warning",
            format!(
                "fans are fixed at {} %: temperature is not regulated",
                config.thermal.fan_manual_percent
            ),
        );
    }
    for r in state.recovered_state_files() {
        warn(
            "state_file_recovered",
            "warning",
            format!(
                "{}'s {} was damaged: it was moved aside as {} and defaults were used",
                r.service, r.file, r.aside
            ),
        );
    }
    match state.telemetry() {
        None => warn(
            "hw_agent_down",
            "warning",
            "no live telemetry: hw-agent is not reachable".into(),
        ),
        Some(t) => {
            if t.state() == svcos_proto::hwagent::v1::MiningState::Overheat
                || t.temp_max_c >= config.thermal.hot_temp_c
            {
                warn(
                    "overheat",
                    "critical",
                    format!(
                        "chips at {:.1} C (limit {:.0} C)",
                        t.temp_max_c, config.thermal.hot_temp_c
                    ),
                );
            }
            if t.fans.iter().any(|f| f.stalled) {
                warn("fan_stalled", "critical", "a fan has stalled".into());
            }
            if t.psu.as_ref().is_some_and(|p| !p.fault.is_empty()) {
                warn("psu_fault", "critical", "the PSU reports a fault".into());
            }
            if t.state() == svcos_proto::hwagent::v1::MiningState::Fault {
                warn("hardware_fault", "critical", t.state_reason.clone());
            }
        }
    }
    serde_json::json!({
        "schema": "svcos.api.safety.warnings.v1",
        "count": warnings.len(),
        "warnings": warnings,
    })
}
