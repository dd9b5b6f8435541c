//! The power governor's own controllers (`[governor]`): the noise ceiling, the daily energy
//! quota, the room-temperature factor and the cold-environment warm-up. Like `/api/home/*`,
//! settings go to the config file (the one rule on their ranges is the config's validation,
//! answered here naming the request's member) and the governor is asked to reconcile at once,
//! so the answer shows the write's effect; the controllers themselves run in the tuner
//! (`services/tuner/src/power`).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Map, Value, json};
use svcos_api_types::governor::{
    ColdEnvironmentBody, NoiseProfileBody, QuotaBody, RoomTempFactorBody,
};
use svcos_api_types::requests::{NoiseProfileRequest, QuotaRequest, RoomTempFactorRequest};
use svcos_common::config::ConfigError;

use super::power_status;
use crate::config_write::{config_from_json, merge, patch_config};
use crate::envelope::ApiError;
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/autotuner/noise-profile", Bearer, P, Tuning, Full, "Fan-duty ceiling met by a lower power target (slow controller with hysteresis)", noise_profile),
        route!(POST "/api/autotuner/quota", Bearer, U, Tuning, Full, "Daily energy budget (kWh per local day), spread over the day as a power limit", quota),
        route!(POST "/api/autotuner/room-temp-factor", Bearer, P, Tuning, Full, "Power target compensated for the room temperature (W per degree C)", room_temp_factor),
        route!(GET "/api/thermal/cold_environment", Bearer, P, Thermal, Full, "Cold starts: minimum fan duty and the warm-up power cap, settings and state", cold_environment),
    ]
}

fn field_error(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(format!("invalid value for {field}"))
        .detail(message.into())
        .with("field", field)
}

/// The members a request sets, as a `[governor.<section>]` patch: `None` numbers are left out,
/// whole-number members (`integers`) must be whole and not negative. A body that sets
/// anything switches the section on unless it says `enabled` itself; an empty one is refused
/// naming `main`, the member that matters most.
fn section_patch(
    enabled: Option<bool>,
    numbers: &[(&str, Option<f64>)],
    integers: &[&str],
    main: &str,
) -> ApiResult<Map<String, Value>> {
    let mut patch = Map::new();
    for (name, v) in numbers {
        let Some(v) = v else { continue };
        if !v.is_finite() {
            return Err(field_error(name, "a finite number"));
        }
        let value = if integers.contains(name) {
            if v.fract() != 0.0 || *v < 0.0 || *v > f64::from(u32::MAX) {
                return Err(field_error(name, "a whole number >= 0"));
            }
            json!(*v as u32)
        } else {
            json!(v)
        };
        patch.insert((*name).to_string(), value);
    }
    if patch.is_empty() && enabled.is_none() {
        return Err(field_error(
            main,
            format!("send {main} (or enabled) to change the setting"),
        ));
    }
    patch.insert("enabled".into(), Value::Bool(enabled.unwrap_or(true)));
    Ok(patch)
}

/// Write `[governor.<section>]` and reconcile. The ranges are the config's one rule
/// (`svcos_common::config::GovernorConfig`); its refusal is answered here as a 400 naming the
/// request's member (`fan_max_percent`, not `governor.noise.fan_max_percent`).
async fn write_section(
    state: &AppState,
    section: &str,
    patch: Map<String, Value>,
) -> ApiResult<Value> {
    let patch = json!({"governor": {section: patch}});
    let mut merged = serde_json::to_value(&*state.config()).unwrap_or(Value::Null);
    merge(&mut merged, &patch);
    let checked = config_from_json(&merged, &patch).and_then(|c| c.validate());
    if let Err(ConfigError::Invalid { field, message }) = checked {
        let prefix = format!("governor.{section}.");
        let member = field.strip_prefix(&prefix).unwrap_or(&field);
        return Err(field_error(member, message));
    }
    patch_config(state, patch).await
}

async fn noise_profile(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: NoiseProfileRequest = parse_body(&headers, &body)?;
    let patch = section_patch(
        b.enabled,
        &[
            ("fan_max_percent", b.fan_max_percent),
            ("hysteresis_percent", b.hysteresis_percent),
            ("step_watt", b.step_watt),
            ("min_watt", b.min_watt),
            ("interval_s", b.interval_s),
        ],
        &["fan_max_percent", "hysteresis_percent", "interval_s"],
        "fan_max_percent",
    )?;
    let report = write_section(&state, "noise", patch).await?;
    let power = power_status(&state, true).await?;
    let config = state.config();
    ok(NoiseProfileBody::new(
        &config.governor.noise,
        &power,
        Some(report),
    ))
}

async fn quota(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: QuotaRequest = parse_body(&headers, &body)?;
    let patch = section_patch(
        b.enabled,
        &[("daily_kwh", b.daily_kwh), ("min_watt", b.min_watt)],
        &[],
        "daily_kwh",
    )?;
    let report = write_section(&state, "quota", patch).await?;
    let power = power_status(&state, true).await?;
    let config = state.config();
    ok(QuotaBody::new(&config.governor.quota, &power, Some(report)))
}

async fn room_temp_factor(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: RoomTempFactorRequest = parse_body(&headers, &body)?;
    let patch = section_patch(
        b.enabled,
        &[
            ("watt_per_c", b.watt_per_c),
            ("reference_room_c", b.reference_room_c),
            ("base_watt", b.base_watt),
            ("max_raise_watt", b.max_raise_watt),
            ("min_watt", b.min_watt),
        ],
        &[],
        "watt_per_c",
    )?;
    let report = write_section(&state, "room_factor", patch).await?;
    let power = power_status(&state, true).await?;
    let config = state.config();
    ok(RoomTempFactorBody::new(
        &config.governor.room_factor,
        config.hardware.power_target_watt,
        &power,
        Some(report),
    ))
}

async fn cold_environment(State(state): State<AppState>) -> ApiResult {
    let power = power_status(&state, false).await?;
    let config = state.config();
    ok(ColdEnvironmentBody::new(
        &config.governor.cold_environment,
        &config.thermal,
        &power,
    ))
}
