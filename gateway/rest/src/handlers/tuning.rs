//! Autotuner, tuning profiles, dynamic power scaling and time-of-use schedules, backed by the
//! tuner service (`TunerService`); a few read-only views are derived from its state and the
//! telemetry snapshot. The governor's noise, quota and room routes are `operations::governor`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use svcos_api_types::governor::VisibilityBody;
use svcos_api_types::requests::{
    AutotunerActiveRequest, ImportJsonRequest, ProfileRequest, ProfitabilityRequest,
    SiliconActiveRequest, TargetStepRequest, TouScheduleRequest,
};
use svcos_api_types::tuning::{
    ChipHealthBody, DpsBody, ImportBody, PostProfilesBody, ProfileSavedBody, ProfilesBody,
    ProfitabilityBody, RunStateBody, SavedStatusBody, SiliconBoardBody, SiliconDeletedBody,
    SiliconListBody, SiliconReloadBody, SiliconReportBody, SiliconRow, SiliconTableBody,
    TouScheduleBody, TunedProfilesBody,
};
use svcos_common::timewin::{parse_hhmm, parse_hhmm_end};
use svcos_proto::tuner::v1 as pb;

use super::{ApiResult, json, ok, parse_body};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(PUT "/api/autotuner/active", Bearer, P, Tuning, Full, "Turn the autotuner on or off (off restores stock)", set_active, req: svcos_api_types::requests::AutotunerActiveRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(GET "/api/autotuner/chip-health", Bearer, P, Tuning, Full, "Per-chip error rate, frequency trim and verdict", chip_health, res: svcos_api_types::tuning::ChipHealthBody),
        route!(POST "/api/autotuner/decrement_hashrate_target", Bearer, P, Tuning, Full, "Lower the hashrate target by its step", dec_hashrate, req: svcos_api_types::requests::TargetStepRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(POST "/api/autotuner/decrement_power_target", Bearer, P, Tuning, Full, "Lower the power target by its step", dec_power, req: svcos_api_types::requests::TargetStepRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(POST "/api/autotuner/fleet-profile/export", Bearer, P, Tuning, Full, "Every board's tuned data and the saved profiles, one document", export),
        route!(POST "/api/autotuner/increment_hashrate_target", Bearer, P, Tuning, Full, "Raise the hashrate target by its step", inc_hashrate, req: svcos_api_types::requests::TargetStepRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(POST "/api/autotuner/increment_power_target", Bearer, P, Tuning, Full, "Raise the power target by its step", inc_power, req: svcos_api_types::requests::TargetStepRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(POST "/api/autotuner/profitability", Bearer, P, Tuning, Full, "Daily revenue, cost and margin from measured hashrate and power and the prices given", profitability, req: svcos_api_types::requests::ProfitabilityRequest, res: svcos_api_types::tuning::ProfitabilityBody),
        route!(GET "/api/autotuner/saved-status", Bearer, P, Tuning, Full, "Whether this board's tuned points are saved and which is in force", saved_status, res: svcos_api_types::tuning::SavedStatusBody),
        route!(POST "/api/autotuner/set_default_hashrate_target", Bearer, P, Tuning, Full, "Hashrate target back to the default", default_hashrate, res: svcos_api_types::tuning::RunStateBody),
        route!(GET "/api/autotuner/silicon-report", Bearer, P, Tuning, Full, "Per-chain silicon quality from chip health and tuned points", silicon_report, res: svcos_api_types::tuning::SiliconReportBody),
        route!(GET "/api/autotuner/telemetry/csv", Bearer, P, Tuning, Full, "The tuner's samples as CSV (header row first)", telemetry_csv),
        route!(GET "/api/autotuner/tuned_profiles", Bearer, P, Tuning, Full, "Tuned points of this board, one per mode and target", tuned_profiles, res: svcos_api_types::tuning::TunedProfilesBody),
        route!(GET "/api/autotuner/visibility", Bearer, P, Tuning, Full, "What the tuner does to each chip and why: frequency, verdict, reason, with its state and steps", visibility, res: svcos_api_types::governor::VisibilityBody),
        route!(POST "/api/perf/calibrate", Bearer, U, Tuning, Full, "Search the current target again from stock, dropping its saved point", calibrate, res: svcos_api_types::tuning::RunStateBody),
        route!(GET "/api/profile/download", Bearer, U, Tuning, Full, "Download the tuned and saved profiles (JSON document)", download),
        route!(POST "/api/profile/upload", Bearer, U, Tuning, Full, "Upload a profile document (export or board file)", upload, res: svcos_api_types::tuning::ImportBody),
        route!(GET "/api/profiles", Bearer, P, Tuning, Full, "Tuned points of this board and saved profiles", list_profiles, res: svcos_api_types::tuning::ProfilesBody),
        route!(POST "/api/profiles", Bearer, P, Tuning, Full, "Save the point in force under a name, or apply a profile", post_profiles, req: svcos_api_types::requests::ProfileRequest, res: svcos_api_types::tuning::PostProfilesBody),
        route!(GET "/api/profiles/silicon", Bearer, P, Tuning, Full, "Boards with stored tuned data", silicon_list, res: svcos_api_types::tuning::SiliconListBody),
        route!(GET "/api/profiles/silicon-table", Bearer, P, Tuning, Full, "Every stored tuned point, one row each", silicon_table, res: svcos_api_types::tuning::SiliconTableBody),
        route!(GET "/api/profiles/silicon/:id", Bearer, P, Tuning, Full, "One board's tuned data", silicon_get, res: svcos_api_types::tuning::SiliconBoardBody),
        route!(DELETE "/api/profiles/silicon/:id", Bearer, P, Tuning, Full, "Forget one board's tuned data", silicon_delete, res: svcos_api_types::tuning::SiliconDeletedBody),
        route!(PUT "/api/profiles/silicon/active", Bearer, P, Tuning, Full, "Apply one tuned point of this board (fixed mode)", silicon_active, req: svcos_api_types::requests::SiliconActiveRequest, res: svcos_api_types::tuning::RunStateBody),
        route!(POST "/api/profiles/silicon/import", Bearer, P, Tuning, Full, "Import a profile document (raw JSON body)", upload, res: svcos_api_types::tuning::ImportBody),
        route!(POST "/api/profiles/silicon/import-json", Bearer, P, Tuning, Full, "Import a profile document wrapped as {document}", import_json, req: svcos_api_types::requests::ImportJsonRequest, res: svcos_api_types::tuning::ImportBody),
        route!(POST "/api/profiles/silicon/reload", Bearer, P, Tuning, Full, "Re-read the stored profiles from disk", silicon_reload, res: svcos_api_types::tuning::SiliconReloadBody),
        route!(GET "/api/power/dps", Bearer, P, Thermal, Full, "Dynamic power scaling: settings and the reduction in force", dps, res: svcos_api_types::tuning::DpsBody),
        route!(GET "/api/tou/schedule", Bearer, P, Thermal, Full, "Time-of-use power targets", tou_get, res: svcos_api_types::tuning::TouScheduleBody),
        route!(POST "/api/tou/schedule", Bearer, P, Thermal, Full, "Replace the time-of-use power targets", tou_set, req: svcos_api_types::requests::TouScheduleRequest, res: svcos_api_types::tuning::TouScheduleBody),
    ]
}

fn grpc(s: tonic::Status) -> ApiError {
    ApiError::from_grpc("tuner", &s)
}

fn field_error(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(format!("invalid value for {field}"))
        .detail(message.into())
        .with("field", field)
}

fn changed(s: Option<pb::GetStateResponse>) -> Response {
    Json(RunStateBody::from(&s.unwrap_or_default())).into_response()
}

async fn set_active(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(field_error(
            "active",
            "a body {\"active\": true|false} is required",
        ));
    }
    let b: AutotunerActiveRequest = parse_body(&headers, &body)?;
    // `[tuner].enabled` is the switch's home (the tuner follows the file across restarts);
    // the call below only makes the change take effect without waiting for the reload.
    crate::config_write::patch_write(&state, serde_json::json!({"tuner": {"enabled": b.active}}))
        .await?;
    let mut t = state.peers.tuner.clone();
    let r = t
        .set_active(pb::SetActiveRequest { active: b.active })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(changed(r.state))
}

async fn adjust(
    state: &AppState,
    headers: &HeaderMap,
    body: &Bytes,
    kind: pb::TargetKind,
    direction: i32,
) -> ApiResult {
    let b: TargetStepRequest = parse_body(headers, body)?;
    let amount = b.amount.unwrap_or(0.0);
    if !(amount.is_finite() && amount >= 0.0) {
        return Err(field_error(
            "amount",
            "a step >= 0 (omit for the configured step)",
        ));
    }
    let mut t = state.peers.tuner.clone();
    let r = t
        .adjust_target(pb::AdjustTargetRequest {
            kind: kind as i32,
            direction,
            amount,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    if kind == pb::TargetKind::Power {
        let watt = r
            .state
            .as_ref()
            .map_or(0.0, |s| s.configured_power_target_watt);
        follow_in_config(state, watt).await?;
    }
    Ok(changed(r.state))
}

/// Applying a profile turns the tuner on (fixed mode runs in the tuner): the switch's one home,
/// `[tuner].enabled`, says so too, or the Tuner screen, `/api/config` and the tuner after its
/// next restart would each tell another story (issue 31 defect 6). Written after the tuner
/// accepted the profile, so a refused profile changes nothing.
async fn switch_in_config(state: &AppState, active: bool) -> Result<(), ApiError> {
    if state.config().tuner.enabled == active {
        return Ok(());
    }
    crate::config_write::patch_write(state, serde_json::json!({"tuner": {"enabled": active}}))
        .await
        .map(drop)
}

/// A power target moved by step is the operator's target from then on, so it goes into
/// `[hardware].power_target_watt` like the wizard's or the heat level's. Left only in the tuner,
/// the config would go on showing the older figure (the power form, `/api/config`, a fleet
/// export), and a restore of that figure would be taken for no change.
async fn follow_in_config(state: &AppState, watt: f64) -> Result<(), ApiError> {
    let configured = state.config().hardware.power_target_watt;
    if !(watt.is_finite() && watt > 0.0) || (watt - configured).abs() < 1e-9 {
        return Ok(());
    }
    crate::config_write::patch_write(
        state,
        serde_json::json!({"hardware": {"power_target_watt": watt}}),
    )
    .await
    .map(drop)
    .map_err(|e| {
        let held = format!(
            "the tuner now holds {watt:.0} W; the config file still says {configured:.0} W"
        );
        let detail = if e.detail.is_empty() {
            held
        } else {
            format!("{}; {held}", e.detail)
        };
        e.detail(detail)
    })
}

async fn inc_power(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    adjust(&s, &h, &b, pb::TargetKind::Power, 1).await
}
async fn dec_power(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    adjust(&s, &h, &b, pb::TargetKind::Power, -1).await
}
async fn inc_hashrate(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    adjust(&s, &h, &b, pb::TargetKind::Hashrate, 1).await
}
async fn dec_hashrate(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    adjust(&s, &h, &b, pb::TargetKind::Hashrate, -1).await
}

async fn default_hashrate(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .set_default(pb::SetDefaultRequest {
            kind: pb::TargetKind::Hashrate as i32,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(changed(r.state))
}

async fn calibrate(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .recalibrate(pb::RecalibrateRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(changed(r.state))
}

async fn list(state: &AppState) -> ApiResult<pb::ListProfilesResponse> {
    let mut t = state.peers.tuner.clone();
    Ok(t.list_profiles(pb::ListProfilesRequest {})
        .await
        .map_err(grpc)?
        .into_inner())
}

async fn saved_status(State(state): State<AppState>) -> ApiResult {
    let l = list(&state).await?;
    let s = super::tuner_get_state(&state).await?;
    ok(SavedStatusBody::new(&l, &s))
}

async fn tuned_profiles(State(state): State<AppState>) -> ApiResult {
    let l = list(&state).await?;
    ok(TunedProfilesBody::from(&l))
}

async fn list_profiles(State(state): State<AppState>) -> ApiResult {
    let l = list(&state).await?;
    ok(ProfilesBody::from(&l))
}

async fn post_profiles(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ProfileRequest = parse_body(&headers, &body)?;
    let mut t = state.peers.tuner.clone();
    match b.action.as_deref().unwrap_or("save") {
        "save" => {
            let r = t
                .save_profile(pb::SaveProfileRequest { name: b.name })
                .await
                .map_err(grpc)?
                .into_inner();
            ok(PostProfilesBody::Saved(ProfileSavedBody::from(&r)))
        }
        "apply" => {
            let r = t
                .apply_profile(pb::ApplyProfileRequest { name: b.name })
                .await
                .map_err(grpc)?
                .into_inner();
            let run = r.state.unwrap_or_default();
            switch_in_config(&state, run.active).await?;
            let state = RunStateBody::from(&run);
            ok(PostProfilesBody::Applied(Box::new(state)))
        }
        other => Err(field_error(
            "action",
            format!("\"save\" or \"apply\", not {other:?}"),
        )),
    }
}

async fn export_doc(state: &AppState) -> ApiResult<String> {
    let mut t = state.peers.tuner.clone();
    Ok(t.export(pb::ExportRequest {})
        .await
        .map_err(grpc)?
        .into_inner()
        .document)
}

async fn export(State(state): State<AppState>) -> ApiResult {
    let doc = export_doc(&state).await?;
    let v: Value = serde_json::from_str(&doc)
        .map_err(|_| ApiError::internal("the tuner's export is not JSON"))?;
    Ok(json(v))
}

async fn download(State(state): State<AppState>) -> ApiResult {
    let doc = export_doc(&state).await?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"svcos-profiles.json\""),
            ),
        ],
        doc,
    )
        .into_response())
}

async fn import_text(state: &AppState, document: String) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .import(pb::ImportRequest { document })
        .await
        .map_err(grpc)?
        .into_inner();
    ok(ImportBody::from(&r))
}

async fn upload(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    // Any JSON object: the tuner checks it is an export or a board file.
    let v: Value = parse_body(&headers, &body)?;
    if !v.is_object() || v.as_object().is_some_and(|o| o.is_empty()) {
        return Err(field_error(
            "document",
            "send an export (svcos.tuner.export.v1) or a board file (svcos.tuner.board.v1)",
        ));
    }
    import_text(&state, v.to_string()).await
}

async fn import_json(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ImportJsonRequest = parse_body(&headers, &body)?;
    let text = match b.document {
        Value::String(s) => s,
        v @ Value::Object(_) => v.to_string(),
        _ => {
            return Err(field_error(
                "document",
                "a JSON object or a string holding one",
            ));
        }
    };
    import_text(&state, text).await
}

async fn silicon_list(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .list_silicon(pb::ListSiliconRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    ok(SiliconListBody::from(&r))
}

async fn silicon_table(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let boards = t
        .list_silicon(pb::ListSiliconRequest {})
        .await
        .map_err(grpc)?
        .into_inner()
        .boards;
    let mut rows = Vec::new();
    for b in boards {
        let r = t
            .get_silicon(pb::GetSiliconRequest {
                board_serial: b.board_serial.clone(),
            })
            .await
            .map_err(grpc)?
            .into_inner();
        for p in &r.profiles {
            rows.push(SiliconRow::new(&b.board_serial, p));
        }
    }
    ok(SiliconTableBody::new(rows))
}

async fn silicon_get(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .get_silicon(pb::GetSiliconRequest { board_serial: id })
        .await
        .map_err(grpc)?
        .into_inner();
    ok(SiliconBoardBody::from(&r))
}

async fn silicon_delete(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    t.delete_silicon(pb::DeleteSiliconRequest {
        board_serial: id.clone(),
    })
    .await
    .map_err(grpc)?;
    ok(SiliconDeletedBody::new(id))
}

async fn silicon_active(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: SiliconActiveRequest = parse_body(&headers, &body)?;
    let mut t = state.peers.tuner.clone();
    let r = t
        .set_active_silicon(pb::SetActiveSiliconRequest {
            profile_id: b.profile_id,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    switch_in_config(&state, r.state.as_ref().is_some_and(|s| s.active)).await?;
    Ok(changed(r.state))
}

async fn silicon_reload(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .reload_profiles(pb::ReloadProfilesRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    ok(SiliconReloadBody::from(&r))
}

async fn health(state: &AppState) -> ApiResult<pb::GetChipHealthResponse> {
    let mut t = state.peers.tuner.clone();
    Ok(t.get_chip_health(pb::GetChipHealthRequest {})
        .await
        .map_err(grpc)?
        .into_inner())
}

async fn chip_health(State(state): State<AppState>) -> ApiResult {
    let h = health(&state).await?;
    ok(ChipHealthBody::from(&h))
}

async fn visibility(State(state): State<AppState>) -> ApiResult {
    let s = super::tuner_get_state(&state).await?;
    ok(VisibilityBody::new(&s, &health(&state).await?))
}

async fn silicon_report(State(state): State<AppState>) -> ApiResult {
    let h = health(&state).await?;
    let l = list(&state).await?;
    ok(SiliconReportBody::new(&h, &l))
}

async fn telemetry_csv(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .get_history(pb::GetHistoryRequest { limit: 0 })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/csv; charset=utf-8"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"autotuner-telemetry.csv\""),
            ),
        ],
        svcos_api_types::downloads::tuner_history_csv(&r.samples),
    )
        .into_response())
}

async fn profitability(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ProfitabilityRequest = parse_body(&headers, &body)?;
    // The tuner owns the money math and its ranges; a refusal comes back naming the field.
    let mut tuner = state.peers.tuner.clone();
    let e = tuner
        .estimate_profitability(pb::EstimateProfitabilityRequest {
            btc_price: b.btc_price,
            network_difficulty: b.network_difficulty,
            block_reward_btc: b.block_reward_btc,
            electricity_price_per_kwh: b.electricity_price_per_kwh,
            pool_fee_percent: b.pool_fee_percent,
        })
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?
        .into_inner();
    ok(ProfitabilityBody::from(&e))
}

async fn dps(State(state): State<AppState>) -> ApiResult {
    let s = super::tuner_get_state(&state).await?;
    let c = state.config();
    ok(DpsBody {
        schema: "svcos.api.power.dps.v1",
        enabled: c.tuner.dps_enabled,
        step_watt: c.tuner.dps_step_watt,
        min_power_watt: c.tuner.dps_min_power_watt,
        reduction_watt: s.dps_reduction_watt,
        configured_power_target_watt: s.configured_power_target_watt,
        effective_power_target_watt: s.power_target_watt,
        active: s.active && s.dps_reduction_watt > 0.0,
        tuner_state: s.state,
    })
}

async fn tou_get(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .get_tou_schedule(pb::GetTouScheduleRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    ok(TouScheduleBody::from(&r))
}

async fn tou_set(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(field_error(
            "enabled",
            "a body {\"enabled\": bool, \"windows\": [...]} is required",
        ));
    }
    let b: TouScheduleRequest = parse_body(&headers, &body)?;
    let mut windows = Vec::new();
    for (i, w) in b.windows.iter().enumerate() {
        let start = parse_hhmm(&w.start)
            .ok_or_else(|| field_error(&format!("windows[{i}].start"), "HH:MM, 00:00-23:59"))?;
        let end = parse_hhmm_end(&w.end)
            .ok_or_else(|| field_error(&format!("windows[{i}].end"), "HH:MM, 00:00-24:00"))?;
        if w.label.len() > 64 {
            return Err(field_error(
                &format!("windows[{i}].label"),
                "at most 64 characters",
            ));
        }
        windows.push(pb::TouWindow {
            start_minute: start,
            end_minute: end,
            power_target_watt: w.power_target_watt,
            label: w.label.clone(),
        });
    }
    let mut t = state.peers.tuner.clone();
    let r = t
        .set_tou_schedule(pb::SetTouScheduleRequest {
            enabled: b.enabled,
            windows,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    ok(TouScheduleBody::from(&r))
}
