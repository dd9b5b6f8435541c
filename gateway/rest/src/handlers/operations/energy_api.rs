//! `/api/solar/*` and `/api/offgrid/*`: config views of `[energy.solar]` / `[energy.offgrid]`,
//! the follower's live status, a one-shot source test and the decision history. The follower
//! runs in the tuner's power governor (`PowerService`); these routes relay and map its answers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use svcos_api_types::energy::{
    FollowerConfigBody, FollowerStatusBody, GovernorDecision, OffgridPatchRequest,
    OffgridPresetsBody, SolarPatchRequest, SourceTestBody, VerificationHistoryBody, mode_word,
};
use svcos_api_types::requests::EnergySourceTestRequest;
use svcos_common::config::Config;
use svcos_proto::tuner::v1::{
    FollowerMode, ListFollowerDecisionsRequest, ListPresetsRequest, TestSourceRequest,
};

use super::{power_call, power_status};
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/offgrid/config", Bearer, P, OffGrid, Full, "Off-grid following: battery source and thresholds", get_offgrid_config, res: svcos_api_types::energy::FollowerConfigBody<svcos_common::config::OffgridConfig>),
        route!(POST "/api/offgrid/config", Bearer, P, OffGrid, Full, "Set off-grid following", post_offgrid_config, req: svcos_api_types::energy::OffgridPatchRequest, res: svcos_api_types::energy::FollowerConfigBody<svcos_common::config::OffgridConfig>),
        route!(GET "/api/offgrid/presets", Bearer, P, OffGrid, Full, "Battery threshold presets (constants)", offgrid_presets, res: svcos_api_types::energy::OffgridPresetsBody),
        route!(GET "/api/offgrid/status", Bearer, P, OffGrid, Full, "Off-grid follower: last reading and decision", offgrid_status, res: svcos_api_types::energy::FollowerStatusBody),
        route!(POST "/api/offgrid/test", Bearer, P, OffGrid, Full, "Read the battery source once and say what would be done", offgrid_test, req: svcos_api_types::requests::EnergySourceTestRequest, res: svcos_api_types::energy::SourceTestBody),
        route!(GET "/api/solar/config", Bearer, P, OffGrid, Full, "Solar following: surplus source and thresholds", get_solar_config, res: svcos_api_types::energy::FollowerConfigBody<svcos_common::config::SolarConfig>),
        route!(POST "/api/solar/config", Bearer, P, OffGrid, Full, "Set solar following", post_solar_config, req: svcos_api_types::energy::SolarPatchRequest, res: svcos_api_types::energy::FollowerConfigBody<svcos_common::config::SolarConfig>),
        route!(GET "/api/solar/status", Bearer, P, OffGrid, Full, "Solar follower: last reading and decision", solar_status, res: svcos_api_types::energy::FollowerStatusBody),
        route!(POST "/api/solar/test", Bearer, P, OffGrid, Full, "Read the surplus source once and say what would be done", solar_test, req: svcos_api_types::requests::EnergySourceTestRequest, res: svcos_api_types::energy::SourceTestBody),
        route!(GET "/api/solar/verification-history", Bearer, P, OffGrid, Full, "Each follower decision with its reading and the measured power", solar_history, res: svcos_api_types::energy::VerificationHistoryBody),
    ]
}

/// The follower the config enables (solar wins; the config refuses both at once).
fn enabled(config: &Config) -> FollowerMode {
    if config.energy.solar.enabled {
        FollowerMode::Solar
    } else if config.energy.offgrid.enabled {
        FollowerMode::Offgrid
    } else {
        FollowerMode::Unspecified
    }
}

fn config_body(state: &AppState, mode: FollowerMode, report: Option<Value>) -> Response {
    let config = state.config();
    let active = enabled(&config) == mode;
    match mode {
        FollowerMode::Offgrid => {
            let section = config.energy.offgrid.clone();
            Json(FollowerConfigBody::new(mode, section, active, report)).into_response()
        }
        _ => {
            let section = config.energy.solar.clone();
            Json(FollowerConfigBody::new(mode, section, active, report)).into_response()
        }
    }
}

async fn post_config(state: &AppState, mode: FollowerMode, b: Value) -> ApiResult {
    let b = match b.get("config") {
        Some(inner) => inner.clone(),
        None => b,
    };
    if !b.is_object() {
        return Err(
            ApiError::bad_request("expected a JSON object").code(ErrorCode::ConfigValidation)
        );
    }
    let report = patch_config(state, json!({"energy": {mode_word(mode): b}})).await?;
    Ok(config_body(state, mode, Some(report)))
}

async fn status(state: &AppState, mode: FollowerMode) -> ApiResult {
    let power = power_status(state, false).await?;
    let st = power.follower.clone().unwrap_or_default();
    let active = enabled(&state.config()) == mode;
    let t = state.telemetry();
    ok(FollowerStatusBody::new(
        mode,
        active,
        &st,
        t.as_ref(),
        GovernorDecision::of(&power),
    ))
}

async fn test(
    state: &AppState,
    mode: FollowerMode,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult {
    let b: EnergySourceTestRequest = parse_body(headers, body)?;
    let req = TestSourceRequest {
        mode: mode as i32,
        source_url: b.source_url,
        surplus_watt_pointer: b.surplus_watt_pointer,
        soc_pointer: b.soc_pointer,
        voltage_pointer: b.voltage_pointer,
    };
    // Pointer form and "a source is needed" are the follower's rules (tuner); the gateway maps.
    let r = match state.peers.power.clone().test_source(req).await {
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            return Err(
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid JSON pointer")
                    .code(ErrorCode::ConfigValidation)
                    .detail(s.message()),
            );
        }
        Err(s) if s.code() == tonic::Code::FailedPrecondition => {
            let fix = format!(
                "set energy.{}.source_url or send source_url",
                mode_word(mode)
            );
            return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, s.message())
                .code(ErrorCode::ConfigValidation)
                .suggestion(fix));
        }
        r => power_call(r)?,
    };
    ok(SourceTestBody::new(mode, &r))
}

async fn get_offgrid_config(State(state): State<AppState>) -> Response {
    config_body(&state, FollowerMode::Offgrid, None)
}
async fn post_offgrid_config(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let OffgridPatchRequest(b) = parse_body(&headers, &body)?;
    post_config(&state, FollowerMode::Offgrid, b).await
}
async fn offgrid_status(State(state): State<AppState>) -> ApiResult {
    status(&state, FollowerMode::Offgrid).await
}
async fn offgrid_test(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    test(&state, FollowerMode::Offgrid, &headers, &body).await
}
async fn get_solar_config(State(state): State<AppState>) -> Response {
    config_body(&state, FollowerMode::Solar, None)
}
async fn post_solar_config(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let SolarPatchRequest(b) = parse_body(&headers, &body)?;
    post_config(&state, FollowerMode::Solar, b).await
}
async fn solar_status(State(state): State<AppState>) -> ApiResult {
    status(&state, FollowerMode::Solar).await
}
async fn solar_test(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    test(&state, FollowerMode::Solar, &headers, &body).await
}

async fn offgrid_presets(State(state): State<AppState>) -> ApiResult {
    let tables = power_call(
        state
            .peers
            .power
            .clone()
            .list_presets(ListPresetsRequest {})
            .await,
    )?;
    ok(OffgridPresetsBody::new(&tables.battery))
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    limit: Option<usize>,
    mode: Option<String>,
}

async fn solar_history(State(state): State<AppState>, Query(q): Query<HistoryQuery>) -> ApiResult {
    let mode = match q.mode.as_deref() {
        None | Some("all") => FollowerMode::Unspecified,
        Some("solar") => FollowerMode::Solar,
        Some("offgrid") => FollowerMode::Offgrid,
        Some(_) => {
            return Err(ApiError::bad_request("mode is one of solar, offgrid, all"));
        }
    };
    let req = ListFollowerDecisionsRequest {
        mode: mode as i32,
        limit: q.limit.unwrap_or(100).clamp(1, u32::MAX as usize) as u32,
    };
    let r = power_call(state.peers.power.clone().list_follower_decisions(req).await)?;
    ok(VerificationHistoryBody::from(&r))
}
