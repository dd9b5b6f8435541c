//! `/api/config/power-calibration`, `/api/config/psu-override` and `/api/config/shared`: thin
//! views of typed config sections, written through the one config write path
//! ([`crate::config_write::apply`]: validate, atomic save, in-memory swap, owner reload).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use svcos_common::config::Config;
use svcos_common::config::shared::{
    self, SHARED_MEMBERS, SharedError, apply_shared, shared_fingerprint, shared_of,
};

use crate::config_write::{apply, patch_write, validation_error};
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, ok, parse_body, round};
use crate::routing::Route;
use crate::{AppState, route};
use svcos_api_types::config::{
    CalibrationBounds, CalibrationPatchRequest, ConfigWriteBody, PowerCalibrationBody,
    PsuOverrideBody, PsuOverrideBounds, PsuOverridePatchRequest, SharedBody, SharedMember,
    SharedPatchRequest,
};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/config/power-calibration", Bearer, P, Config, Full, "PSU power-reading correction (factor, offset)", get_calibration, res: svcos_api_types::config::PowerCalibrationBody),
        route!(POST "/api/config/power-calibration", Bearer, P, Config, Full, "Set the PSU power-reading correction", post_calibration, req: svcos_api_types::config::CalibrationPatchRequest, res: svcos_api_types::config::PowerCalibrationBody),
        route!(GET "/api/config/psu-override", Bearer, P, Config, Full, "Operator-declared PSU model and limits", get_psu_override, res: svcos_api_types::config::PsuOverrideBody),
        route!(POST "/api/config/psu-override", Bearer, P, Config, Full, "Declare the PSU (its rating becomes a power limit)", post_psu_override, req: svcos_api_types::config::PsuOverridePatchRequest, res: svcos_api_types::config::PsuOverrideBody),
        route!(GET "/api/config/shared", Bearer, P, Config, Full, "The fleet-shareable config subset: pools, power target, fan limits", get_shared, res: svcos_api_types::config::SharedBody),
        route!(POST "/api/config/shared", Bearer, P, Config, Full, "Apply a fleet-shared config subset atomically", post_shared, req: svcos_api_types::config::SharedPatchRequest, res: svcos_api_types::config::SharedBody),
    ]
}

/// Only these members may be posted to a section view.
fn only_members(body: &Value, section: &str, allowed: &[&str]) -> ApiResult<Map<String, Value>> {
    let Value::Object(m) = body else {
        return Err(
            ApiError::bad_request("expected a JSON object").code(ErrorCode::ConfigValidation)
        );
    };
    shared::only_members(m, section, allowed)
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?;
    Ok(m.clone())
}

fn calibration_body(state: &AppState, write: Option<ConfigWriteBody>) -> PowerCalibrationBody {
    let config = state.config();
    let p = &config.power;
    // hw-agent calibrates at the source and reports both readings.
    let t = state.telemetry();
    PowerCalibrationBody {
        schema: "svcos.api.config.power_calibration.v1",
        factor: p.calibration_factor,
        offset_watt: p.calibration_offset_watt,
        formula: "reported_watt = raw_watt x factor + offset_watt",
        bounds: CalibrationBounds {
            factor: [0.5, 1.5],
            offset_watt: [-500.0, 500.0],
        },
        raw_power_watt: t.as_ref().map(|t| round(t.power_raw_watt, 1)),
        reported_power_watt: t.as_ref().map(|t| round(t.power_watt, 1)),
        write,
    }
}

async fn get_calibration(State(state): State<AppState>) -> Response {
    Json(calibration_body(&state, None)).into_response()
}

async fn post_calibration(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let CalibrationPatchRequest(b) = parse_body(&headers, &body)?;
    let m = only_members(&b, "power", &["factor", "offset_watt", "reset"])?;
    let mut patch = Map::new();
    if m.get("reset").and_then(Value::as_bool) == Some(true) {
        patch.insert("calibration_factor".into(), json!(1.0));
        patch.insert("calibration_offset_watt".into(), json!(0.0));
    }
    if let Some(v) = m.get("factor") {
        patch.insert("calibration_factor".into(), v.clone());
    }
    if let Some(v) = m.get("offset_watt") {
        patch.insert("calibration_offset_watt".into(), v.clone());
    }
    if patch.is_empty() {
        return Err(
            ApiError::bad_request("send factor and/or offset_watt (or reset: true)")
                .code(ErrorCode::ConfigValidation),
        );
    }
    let report = patch_write(&state, json!({"power": patch})).await?;
    ok(calibration_body(&state, Some(report)))
}

fn psu_body(state: &AppState, write: Option<ConfigWriteBody>) -> PsuOverrideBody {
    let config = state.config();
    let t = state.telemetry();
    let o = &config.power.psu_override;
    PsuOverrideBody {
        schema: "svcos.api.config.psu_override.v1",
        psu_override: o.clone(),
        bounds: PsuOverrideBounds {
            max_watt: [100.0, 5000.0],
            voltage_v: [8.0, 24.0],
            model_max_chars: 64,
        },
        detected_model: t
            .as_ref()
            .and_then(|t| t.psu.as_ref())
            .map(|p| p.model.clone()),
        effective_psu_limit_watt: o.enabled.then_some(o.max_watt),
        note: "when enabled, max_watt is a hard limit: hw-agent clamps every power target to it",
        write,
    }
}

async fn get_psu_override(State(state): State<AppState>) -> Response {
    Json(psu_body(&state, None)).into_response()
}

async fn post_psu_override(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let PsuOverridePatchRequest(b) = parse_body(&headers, &body)?;
    let m = only_members(
        &b,
        "power.psu_override",
        &[
            "enabled",
            "model",
            "max_watt",
            "voltage_min_v",
            "voltage_max_v",
        ],
    )?;
    let report = patch_write(&state, json!({"power": {"psu_override": m}})).await?;
    ok(psu_body(&state, Some(report)))
}

fn shared_body(config: &Config, write: Option<ConfigWriteBody>) -> SharedBody {
    SharedBody {
        schema: "svcos.api.config.shared.v1",
        shared: shared_of(config),
        members: SHARED_MEMBERS
            .iter()
            .map(|&(name, config)| SharedMember { name, config })
            .collect(),
        fingerprint: shared_fingerprint(config),
        secret_mask: crate::config_write::SECRET_MASK,
        write,
    }
}

async fn get_shared(State(state): State<AppState>) -> Response {
    Json(shared_body(&state.config(), None)).into_response()
}

async fn post_shared(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let SharedPatchRequest(b) = parse_body(&headers, &body)?;
    // Accept the GET shape back ({"shared": {...}}) as well as the bare subset.
    let b = match b.get("shared") {
        Some(inner) => inner.clone(),
        None => b,
    };
    let allowed: Vec<&str> = SHARED_MEMBERS.iter().map(|(k, _)| *k).collect();
    let m = only_members(&b, "shared", &allowed)?;
    if m.is_empty() {
        return Err(ApiError::bad_request("nothing to apply")
            .code(ErrorCode::ConfigValidation)
            .suggestion(format!("send any of: {}", allowed.join(", "))));
    }
    let (current, base) = state.config_at();
    let new = apply_shared(&current, &m).map_err(|e| match e {
        SharedError::Config(e) => validation_error(ErrorCode::ConfigValidation, &e),
        // The same parser and rules as POST /api/pools.
        SharedError::Pools(e) => validation_error(ErrorCode::PoolValidation, &e),
    })?;
    // One write for the whole subset: either everything applies or nothing does.
    let report = apply(&state, base, new).await.map_err(|e| {
        e.into_api(
            ErrorCode::ConfigValidation,
            Some(ErrorCode::PoolConfigWriteFailed),
        )
    })?;
    ok(shared_body(&state.config(), Some(report)))
}
