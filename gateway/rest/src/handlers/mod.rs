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
use axum::http::{HeaderMap, StatusCode, Uri};
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

/// 200 with a typed body (a `svcos_api_types` type, so its schema is derived).
pub fn ok<T: serde::Serialize>(body: T) -> ApiResult {
    Ok(Json(body).into_response())
}

/// The fallback for paths the registry does not mount.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such route")
        .detail(format!("nothing is mounted at {}", uri.path()))
        .code(ErrorCode::UnclassifiedError)
        .suggestion("GET /api/index lists the declared routes")
}

/// Parse an optional JSON object body into `T`: empty means `{}`; what is refused is
/// [`crate::body::json_body`]'s rule. Errors come back as the envelope.
pub fn parse_body<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> ApiResult<T> {
    typed(crate::body::json_body(headers, body, false)?)
}

/// [`parse_body`] for the bodies documented as an object or a bare array (the pool list).
pub fn parse_list_body<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> ApiResult<T> {
    typed(crate::body::json_body(headers, body, true)?)
}

fn typed<T: DeserializeOwned>(value: Option<Value>) -> ApiResult<T> {
    let value = value.unwrap_or_else(|| Value::Object(Default::default()));
    serde_json::from_value(value).map_err(|e| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unexpected JSON body")
            .detail(e.to_string())
            .code(ErrorCode::UnclassifiedError)
            .suggestion("see docs/API-SHAPES.md for the request shape")
    })
}

/// The tuner's state, which each tuner read route renders in its own shape.
pub async fn tuner_get_state(
    state: &crate::state::AppState,
) -> Result<svcos_proto::tuner::v1::GetStateResponse, ApiError> {
    let mut tuner = state.peers.tuner.clone();
    Ok(tuner
        .get_state(svcos_proto::tuner::v1::GetStateRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?
        .into_inner())
}

/// Round a float for JSON output (telemetry does not need 15 digits).
pub fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// The config file's JSON Schema as served: the committed `docs/config.schema.json`, which
/// `tests/registry.rs` keeps derived from the config types (so the image needs no schema code),
/// carried gzipped (build.rs).
pub fn config_json_schema() -> Value {
    let gz: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/config.schema.json.gz"));
    serde_json::from_reader(flate2::read::GzDecoder::new(gz))
        .expect("docs/config.schema.json is JSON (tests/registry.rs writes it)")
}
