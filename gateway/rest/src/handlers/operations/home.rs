//! `/api/home/*` writes and presets: the room thermostat and night mode of a space-heater
//! miner. Both feed the power governor in the tuner (`PowerService`): settings go to the config
//! file, readings to the governor; nothing here calls hw-agent or decides anything.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use svcos_api_types::requests::{HomeTargetRequest, RoomTempRequest};
use svcos_proto::tuner::v1::{PostRoomTemperatureRequest, PowerStatus};

use super::{power_call, power_status, thermostat_body};
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, json, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/home/night-mode", Bearer, P, Integrations, Full, "Night (quiet) hours: window, power and fan caps", get_night_mode),
        route!(POST "/api/home/night-mode", Bearer, P, Integrations, Full, "Set night (quiet) hours", post_night_mode),
        route!(GET "/api/home/presets", Bearer, P, Integrations, Full, "Thermostat presets (constants)", presets),
        route!(POST "/api/home/room-temp", Bearer, P, Integrations, Full, "Post the room temperature; the thermostat moves the power target", room_temp),
        route!(POST "/api/home/target", Bearer, P, Integrations, Full, "Set the room-temperature target (and thermostat limits)", target),
    ]
}

/// (name, target room C, min W, max W, step W, description).
pub const PRESETS: &[(&str, f64, f64, f64, f64, &str)] = &[
    (
        "eco",
        19.0,
        300.0,
        800.0,
        100.0,
        "Cool room, low power, quiet",
    ),
    ("comfort", 21.0, 300.0, 1200.0, 100.0, "Living-room comfort"),
    (
        "warm",
        23.0,
        400.0,
        1400.0,
        150.0,
        "Warm room, more heat and hashrate",
    ),
    ("boost", 24.0, 600.0, 2000.0, 200.0, "Heat a cold room fast"),
];

fn invalid(field: &str, message: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("invalid value for {field}"),
    )
    .code(ErrorCode::ConfigValidation)
    .detail(message.to_string())
    .with("field", field)
}

fn night_body(state: &AppState, power: &PowerStatus, report: Option<Value>) -> Value {
    let config = state.config();
    let n = &config.home.night_mode;
    let clock = n.clock(&config.system, svcos_common::time::unix_ms());
    json!({
        "schema": "svcos.api.home.night_mode.v1",
        "night_mode": n, "timezone": clock.timezone, "next_change": clock.next_change,
        "active_now": power.decision.as_ref().is_some_and(|d| d.night_active),
        "fan_capped_now": power.applied.is_some_and(|a| a.fan_capped),
        "note": "inside the window the power cap joins the governor's limits and fans are held at fan_max_percent; hw-agent's overheat protection still applies",
        "write": report,
    })
}

async fn get_night_mode(State(state): State<AppState>) -> ApiResult {
    let power = power_status(&state, false).await?;
    Ok(json(night_body(&state, &power, None)))
}

async fn post_night_mode(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: Value = parse_body(&headers, &body)?;
    let Value::Object(m) = &b else {
        return Err(
            ApiError::bad_request("expected a JSON object").code(ErrorCode::ConfigValidation)
        );
    };
    // Unknown members are caught by the typed section (deny_unknown_fields) and named.
    let report = patch_config(&state, json!({"home": {"night_mode": m}})).await?;
    let power = power_status(&state, true).await?;
    Ok(json(night_body(&state, &power, Some(report))))
}

async fn presets(State(_state): State<AppState>) -> Response {
    let list: Vec<Value> = PRESETS
        .iter()
        .map(|(name, t, min, max, step, what)| {
            json!({"name": name, "target_room_c": t, "min_watt": min, "max_watt": max,
                   "step_watt": step, "description": what})
        })
        .collect();
    json(json!({
        "schema": "svcos.api.home.presets.v1",
        "presets": list,
        "apply": "POST /api/home/target with {\"preset\": \"<name>\"}",
    }))
}

async fn room_temp(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RoomTempRequest = parse_body(&headers, &body)?;
    let req = PostRoomTemperatureRequest {
        room_c: b.room_c,
        source: b.source.unwrap_or_default(),
    };
    // The accepted range is the governor's rule (tuner); its refusal is answered naming the field.
    let r = match state.peers.power.clone().post_room_temperature(req).await {
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            return Err(invalid("room_c", s.message()));
        }
        r => power_call(r)?,
    };
    let action = r.action();
    let power = r.status.unwrap_or_default();
    Ok(json(thermostat_body(&state, &power, Some(action))))
}

async fn target(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: HomeTargetRequest = parse_body(&headers, &body)?;
    let mut home = json!({"thermostat_enabled": b.enabled.unwrap_or(true)});
    if let Some(name) = &b.preset {
        let Some(p) = PRESETS.iter().find(|p| p.0 == name) else {
            return Err(invalid(
                "preset",
                "one of eco, comfort, warm, boost (GET /api/home/presets)",
            ));
        };
        home["target_room_c"] = json!(p.1);
        home["min_watt"] = json!(p.2);
        home["max_watt"] = json!(p.3);
        home["step_watt"] = json!(p.4);
    } else if b.target_room_c.is_none() && b.enabled.is_none() {
        return Err(invalid(
            "target_room_c",
            "send target_room_c (5-30 C), a preset, or enabled",
        ));
    }
    for (k, v) in [
        ("target_room_c", b.target_room_c),
        ("hysteresis_c", b.hysteresis_c),
        ("min_watt", b.min_watt),
        ("max_watt", b.max_watt),
        ("step_watt", b.step_watt),
    ] {
        if let Some(v) = v {
            home[k] = json!(v);
        }
    }
    let report = patch_config(&state, json!({"home": home})).await?;
    let power = power_status(&state, true).await?;
    let mut body = thermostat_body(&state, &power, None);
    body["write"] = report;
    Ok(json(body))
}
