//! `/api/solar/*` and `/api/offgrid/*`: config views of `[energy.solar]` / `[energy.offgrid]`,
//! the follower's live status, a one-shot source test and the decision history. The follower
//! runs in the tuner's power governor (`PowerService`); these routes relay and map its answers.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use svcos_api_types::requests::EnergySourceTestRequest;
use svcos_common::config::Config;
use svcos_proto::tuner::v1::{
    EnergyReading, FollowerDecision, FollowerMode, ListFollowerDecisionsRequest, TestSourceRequest,
};

use super::{decision_json, power_call, power_status};
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, json, parse_body, round};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/offgrid/config", Bearer, P, OffGrid, Full, "Off-grid following: battery source and thresholds", get_offgrid_config),
        route!(POST "/api/offgrid/config", Bearer, P, OffGrid, Full, "Set off-grid following", post_offgrid_config),
        route!(GET "/api/offgrid/presets", Bearer, P, OffGrid, Full, "Battery threshold presets (constants)", offgrid_presets),
        route!(GET "/api/offgrid/status", Bearer, P, OffGrid, Full, "Off-grid follower: last reading and decision", offgrid_status),
        route!(POST "/api/offgrid/test", Bearer, P, OffGrid, Full, "Read the battery source once and say what would be done", offgrid_test),
        route!(GET "/api/solar/config", Bearer, P, OffGrid, Full, "Solar following: surplus source and thresholds", get_solar_config),
        route!(POST "/api/solar/config", Bearer, P, OffGrid, Full, "Set solar following", post_solar_config),
        route!(GET "/api/solar/status", Bearer, P, OffGrid, Full, "Solar follower: last reading and decision", solar_status),
        route!(POST "/api/solar/test", Bearer, P, OffGrid, Full, "Read the surplus source once and say what would be done", solar_test),
        route!(GET "/api/solar/verification-history", Bearer, P, OffGrid, Full, "Each follower decision with its reading and the measured power", solar_history),
    ]
}

/// (name, chemistry, stop SoC %, resume SoC %, stop V, resume V, description).
pub const BATTERY_PRESETS: &[(&str, &str, f64, f64, f64, f64, &str)] = &[
    (
        "lifepo4-12v",
        "LiFePO4",
        30.0,
        80.0,
        12.8,
        13.3,
        "4S LiFePO4 (12.8 V nominal)",
    ),
    (
        "lifepo4-24v",
        "LiFePO4",
        30.0,
        80.0,
        25.6,
        26.6,
        "8S LiFePO4 (25.6 V nominal)",
    ),
    (
        "lifepo4-48v",
        "LiFePO4",
        30.0,
        80.0,
        51.2,
        53.2,
        "16S LiFePO4 (51.2 V nominal)",
    ),
    (
        "lead-acid-12v",
        "lead-acid",
        60.0,
        90.0,
        12.2,
        12.8,
        "Flooded/AGM 12 V: shallow cycling only",
    ),
    (
        "lead-acid-48v",
        "lead-acid",
        60.0,
        90.0,
        48.8,
        51.2,
        "Flooded/AGM 48 V: shallow cycling only",
    ),
];

fn section(mode: FollowerMode) -> &'static str {
    match mode {
        FollowerMode::Offgrid => "offgrid",
        _ => "solar",
    }
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

fn reading_json(r: Option<&EnergyReading>) -> Value {
    r.map_or(Value::Null, |r| {
        json!({"surplus_watt": r.surplus_watt, "soc_percent": r.soc_percent, "voltage_v": r.voltage_v})
    })
}

fn entry_json(e: &FollowerDecision) -> Value {
    json!({
        "t_ms": e.t_ms,
        "mode": section(e.mode()),
        "reading": reading_json(e.reading.as_ref()),
        "error": (!e.error.is_empty()).then_some(&e.error),
        "decision": e.decision,
        "target_watt": e.target_watt,
        "reason": e.reason,
        "actual_power_watt": e.actual_power_watt,
        "hw_power_target_watt": e.hw_power_target_watt,
        "hw_state": (!e.hw_state.is_empty()).then_some(&e.hw_state),
    })
}

fn config_body(state: &AppState, mode: FollowerMode, report: Option<Value>) -> Value {
    let config = state.config();
    let section_v = match mode {
        FollowerMode::Solar => serde_json::to_value(&config.energy.solar),
        _ => serde_json::to_value(&config.energy.offgrid),
    }
    .unwrap_or_default();
    json!({
        "schema": format!("svcos.api.{}.config.v1", section(mode)),
        "config": section_v,
        "active": enabled(&config) == mode,
        "config_section": format!("energy.{}", section(mode)),
        "write": report,
    })
}

async fn post_config(
    state: &AppState,
    mode: FollowerMode,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult {
    let b: Value = parse_body(headers, body)?;
    let b = match b.get("config") {
        Some(inner) => inner.clone(),
        None => b,
    };
    if !b.is_object() {
        return Err(
            ApiError::bad_request("expected a JSON object").code(ErrorCode::ConfigValidation)
        );
    }
    let report = patch_config(state, json!({"energy": {section(mode): b}})).await?;
    Ok(json(config_body(state, mode, Some(report))))
}

async fn status(state: &AppState, mode: FollowerMode) -> ApiResult {
    let config = state.config();
    let power = power_status(state, false).await?;
    let st = power.follower.clone().unwrap_or_default();
    let active = enabled(&config) == mode;
    let mine = st.mode() == mode;
    let last = power_call(
        state
            .peers
            .power
            .clone()
            .list_follower_decisions(ListFollowerDecisionsRequest {
                mode: mode as i32,
                limit: 1,
            })
            .await,
    )?
    .entries
    .pop();
    let t = state.telemetry();
    Ok(json(json!({
        "schema": format!("svcos.api.{}.status.v1", section(mode)),
        "enabled": active,
        "state": match (active, mine && st.last_change_ms.is_some(), st.sleeping) {
            (false, _, _) => "disabled",
            (true, false, _) => "waiting_for_reading",
            (true, true, true) => "sleeping",
            (true, true, false) => "running",
        },
        "target_watt": if mine && !st.sleeping { st.target_watt } else { None },
        "last_reading": if mine { reading_json(st.last_reading.as_ref()) } else { Value::Null },
        "last_error": (mine && !st.last_error.is_empty()).then_some(&st.last_error),
        "consecutive_errors": if mine { st.consecutive_errors } else { 0 },
        "last_poll_ms": (mine && st.last_poll_ms > 0).then_some(st.last_poll_ms),
        "last_change_ms": if mine { st.last_change_ms } else { None },
        "dwell_remaining_s": if mine { st.dwell_remaining_s } else { None },
        "last_decision": last.as_ref().map(entry_json),
        "power_watt": t.as_ref().map(|t| round(t.power_watt, 1)),
        "hw_power_target_watt": t.as_ref().map(|t| t.power_target_watt),
        "hw_state": t.as_ref().map(|t| t.state().as_str_name()),
        "governor": decision_json(&power),
    })))
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
            let fix = format!("set energy.{}.source_url or send source_url", section(mode));
            return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, s.message())
                .code(ErrorCode::ConfigValidation)
                .suggestion(fix));
        }
        r => power_call(r)?,
    };
    Ok(json(json!({
        "schema": format!("svcos.api.{}.test.v1", section(mode)),
        "source_url": r.source_url,
        "ok": r.ok,
        "reading": if r.ok { reading_json(r.reading.as_ref()) } else { Value::Null },
        "error": (!r.ok).then_some(&r.error),
        "would": {"decision": r.decision, "target_watt": r.target_watt,
                  "reason": r.reason, "held_by_dwell": r.held_by_dwell},
        "applied": false,
    })))
}

async fn get_offgrid_config(State(state): State<AppState>) -> Response {
    json(config_body(&state, FollowerMode::Offgrid, None))
}
async fn post_offgrid_config(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    post_config(&state, FollowerMode::Offgrid, &headers, &body).await
}
async fn offgrid_status(State(state): State<AppState>) -> ApiResult {
    status(&state, FollowerMode::Offgrid).await
}
async fn offgrid_test(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    test(&state, FollowerMode::Offgrid, &headers, &body).await
}
async fn get_solar_config(State(state): State<AppState>) -> Response {
    json(config_body(&state, FollowerMode::Solar, None))
}
async fn post_solar_config(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    post_config(&state, FollowerMode::Solar, &headers, &body).await
}
async fn solar_status(State(state): State<AppState>) -> ApiResult {
    status(&state, FollowerMode::Solar).await
}
async fn solar_test(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    test(&state, FollowerMode::Solar, &headers, &body).await
}

async fn offgrid_presets(State(_state): State<AppState>) -> Response {
    let list: Vec<Value> = BATTERY_PRESETS
        .iter()
        .map(|(name, chem, stop, resume, stop_v, resume_v, what)| {
            json!({"name": name, "chemistry": chem, "stop_soc_percent": stop, "resume_soc_percent": resume,
                   "stop_voltage_v": stop_v, "resume_voltage_v": resume_v, "description": what})
        })
        .collect();
    json(json!({
        "schema": "svcos.api.offgrid.presets.v1",
        "presets": list,
        "apply": "POST /api/offgrid/config with the preset's thresholds",
    }))
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
    let entries: Vec<Value> = r.entries.iter().map(entry_json).collect();
    Ok(json(json!({
        "schema": "svcos.api.solar.verification_history.v1",
        "count": entries.len(),
        "capacity": r.capacity,
        "entries": entries,
    })))
}
