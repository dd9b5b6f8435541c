//! `/api/solar/*` and `/api/offgrid/*`: config views of `[energy.solar]` / `[energy.offgrid]`,
//! the follower's live status, a one-shot source test and the decision history.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::config_sections::patch_config;
use super::energy::{FollowerMode, FollowerState, Params, decide, read_source};
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, json, parse_body, round};
use crate::registry::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
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
        FollowerMode::Solar => "solar",
        FollowerMode::Offgrid => "offgrid",
    }
}

fn config_body(state: &AppState, mode: FollowerMode, report: Option<Value>) -> Value {
    let config = state.config();
    let section_v = match mode {
        FollowerMode::Solar => serde_json::to_value(&config.energy.solar),
        FollowerMode::Offgrid => serde_json::to_value(&config.energy.offgrid),
    }
    .unwrap_or_default();
    json!({
        "schema": format!("svcos.api.{}.config.v1", section(mode)),
        "config": section_v,
        "active": FollowerMode::enabled(&config) == Some(mode),
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

fn status_body(state: &AppState, mode: FollowerMode) -> Value {
    let config = state.config();
    let rt = &state.ops.governor.energy;
    let st = rt.state.lock().expect("follower lock").clone();
    let active = FollowerMode::enabled(&config) == Some(mode);
    let mine = st.mode == Some(mode);
    let p = Params::of(&config, mode);
    let now = state.clock.now_ms();
    let last = rt
        .history
        .lock()
        .expect("history lock")
        .iter()
        .rev()
        .find(|e| e.mode == mode)
        .cloned();
    let t = state.telemetry();
    json!({
        "schema": format!("svcos.api.{}.status.v1", section(mode)),
        "enabled": active,
        "state": match (active, mine && st.last_change_ms.is_some(), st.sleeping) {
            (false, _, _) => "disabled",
            (true, false, _) => "waiting_for_reading",
            (true, true, true) => "sleeping",
            (true, true, false) => "running",
        },
        "target_watt": if mine && !st.sleeping { st.target_watt } else { None },
        "last_reading": if mine { st.last_reading.clone() } else { None },
        "last_error": if mine { st.last_error.clone() } else { None },
        "consecutive_errors": if mine { st.consecutive_errors } else { 0 },
        "last_poll_ms": (mine && st.last_poll_ms > 0).then_some(st.last_poll_ms),
        "last_change_ms": if mine { st.last_change_ms } else { None },
        "dwell_remaining_s": if mine { st.last_change_ms.map(|c| ((c + p.min_dwell_ms - now).max(0) as f64 / 1000.0).ceil()) } else { None },
        "last_decision": last,
        "power_watt": t.as_ref().map(|t| round(super::calibrated_power(&config, t.power_watt), 1)),
        "hw_power_target_watt": t.as_ref().map(|t| t.power_target_watt),
        "hw_state": t.as_ref().map(|t| t.state().as_str_name()),
        "governor": state.ops.governor.last_json(),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestBody {
    #[serde(default)]
    source_url: Option<String>,
    #[serde(default)]
    surplus_watt_pointer: Option<String>,
    #[serde(default)]
    soc_pointer: Option<String>,
    #[serde(default)]
    voltage_pointer: Option<String>,
}

async fn test(
    state: &AppState,
    mode: FollowerMode,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult {
    let b: TestBody = parse_body(headers, body)?;
    let config = state.config();
    let mut p = Params::of(&config, mode);
    if let Some(u) = b.source_url {
        p.url = u;
    }
    for (i, v) in [b.surplus_watt_pointer, b.soc_pointer, b.voltage_pointer]
        .into_iter()
        .enumerate()
    {
        if let Some(v) = v {
            if !(v.is_empty() || v.starts_with('/')) {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid JSON pointer",
                )
                .code(ErrorCode::ConfigValidation)
                .detail("a pointer starts with / (RFC 6901), e.g. /battery/soc"));
            }
            p.pointers[i] = v;
        }
    }
    if p.url.is_empty() {
        return Err(
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "no source configured")
                .code(ErrorCode::ConfigValidation)
                .suggestion(format!(
                    "set energy.{}.source_url or send source_url",
                    section(mode)
                )),
        );
    }
    let reading = read_source(&p).await;
    let st = {
        let st = state
            .ops
            .governor
            .energy
            .state
            .lock()
            .expect("follower lock")
            .clone();
        if st.mode == Some(mode) {
            st
        } else {
            FollowerState::default()
        }
    };
    let step = decide(
        &p,
        &st,
        reading.as_ref().map_err(String::as_str),
        state.clock.now_ms(),
    );
    Ok(json(json!({
        "schema": format!("svcos.api.{}.test.v1", section(mode)),
        "source_url": p.url,
        "ok": reading.is_ok(),
        "reading": reading.as_ref().ok(),
        "error": reading.as_ref().err(),
        "would": {"decision": if step.sleep {"sleep"} else {"run"}, "target_watt": step.target_watt,
                  "reason": step.reason, "held_by_dwell": step.held_by_dwell},
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
async fn offgrid_status(State(state): State<AppState>) -> Response {
    json(status_body(&state, FollowerMode::Offgrid))
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
async fn solar_status(State(state): State<AppState>) -> Response {
    json(status_body(&state, FollowerMode::Solar))
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
        None | Some("all") => None,
        Some("solar") => Some(FollowerMode::Solar),
        Some("offgrid") => Some(FollowerMode::Offgrid),
        Some(_) => {
            return Err(ApiError::bad_request("mode is one of solar, offgrid, all"));
        }
    };
    let limit = q.limit.unwrap_or(100).clamp(1, super::energy::HISTORY_CAP);
    let h = state
        .ops
        .governor
        .energy
        .history
        .lock()
        .expect("history lock");
    let mut entries: Vec<_> = h
        .iter()
        .rev()
        .filter(|e| mode.is_none_or(|m| e.mode == m))
        .take(limit)
        .cloned()
        .collect();
    entries.reverse();
    Ok(json(json!({
        "schema": "svcos.api.solar.verification_history.v1",
        "count": entries.len(),
        "capacity": super::energy::HISTORY_CAP,
        "entries": entries,
    })))
}
