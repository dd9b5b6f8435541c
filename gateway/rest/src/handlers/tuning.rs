//! Autotuner, tuning profiles, dynamic power scaling and time-of-use schedules, backed by the
//! tuner service (`TunerService`); a few read-only views are derived from its state and the
//! telemetry snapshot. Operations still marked `planned!` answer 501 with the envelope.

use std::fmt::Write as _;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use svcos_api_types::requests::{
    AutotunerActiveRequest, ImportJsonRequest, ProfileRequest, ProfitabilityRequest,
    SiliconActiveRequest, TargetStepRequest, TouScheduleRequest,
};
use svcos_common::timewin::{hhmm, parse_hhmm, parse_hhmm_end};
use svcos_proto::tuner::v1 as pb;

use super::{ApiResult, json, parse_body, round};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, planned, route};
use svcos_api_types::enum_word;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(PUT "/api/autotuner/active", Bearer, P, Tuning, Full, "Turn the autotuner on or off (off restores stock)", set_active),
        route!(GET "/api/autotuner/chip-health", Bearer, P, Tuning, Full, "Per-chip error rate, frequency trim and verdict", chip_health),
        route!(POST "/api/autotuner/decrement_hashrate_target", Bearer, P, Tuning, Full, "Lower the hashrate target by its step", dec_hashrate),
        route!(POST "/api/autotuner/decrement_power_target", Bearer, P, Tuning, Full, "Lower the power target by its step", dec_power),
        route!(POST "/api/autotuner/fleet-profile/export", Bearer, P, Tuning, Full, "Every board's tuned data and the saved profiles, one document", export),
        route!(POST "/api/autotuner/increment_hashrate_target", Bearer, P, Tuning, Full, "Raise the hashrate target by its step", inc_hashrate),
        route!(POST "/api/autotuner/increment_power_target", Bearer, P, Tuning, Full, "Raise the power target by its step", inc_power),
        planned!(POST "/api/autotuner/noise-profile", P, Tuning, "autotuner noise profile"),
        route!(POST "/api/autotuner/profitability", Bearer, P, Tuning, Full, "Daily revenue, cost and margin from measured hashrate and power and the prices given", profitability),
        planned!(POST "/api/autotuner/quota", U, Tuning, "autotuner quota"),
        planned!(POST "/api/autotuner/room-temp-factor", P, Tuning, "autotuner room temperature"),
        route!(GET "/api/autotuner/saved-status", Bearer, P, Tuning, Full, "Whether this board's tuned points are saved and which is in force", saved_status),
        route!(POST "/api/autotuner/set_default_hashrate_target", Bearer, P, Tuning, Full, "Hashrate target back to the default", default_hashrate),
        route!(GET "/api/autotuner/silicon-report", Bearer, P, Tuning, Full, "Per-chain silicon quality from chip health and tuned points", silicon_report),
        route!(GET "/api/autotuner/telemetry/csv", Bearer, P, Tuning, Full, "The tuner's samples as CSV (header row first)", telemetry_csv),
        route!(GET "/api/autotuner/tuned_profiles", Bearer, P, Tuning, Full, "Tuned points of this board, one per mode and target", tuned_profiles),
        planned!(GET "/api/autotuner/visibility", P, Tuning, "autotuner visibility"),
        route!(POST "/api/perf/calibrate", Bearer, U, Tuning, Full, "Search the current target again from stock, dropping its saved point", calibrate),
        route!(GET "/api/profile/download", Bearer, U, Tuning, Full, "Download the tuned and saved profiles (JSON document)", download),
        route!(POST "/api/profile/upload", Bearer, U, Tuning, Full, "Upload a profile document (export or board file)", upload),
        route!(GET "/api/profiles", Bearer, P, Tuning, Full, "Tuned points of this board and saved profiles", list_profiles),
        route!(POST "/api/profiles", Bearer, P, Tuning, Full, "Save the point in force under a name, or apply a profile", post_profiles),
        route!(GET "/api/profiles/silicon", Bearer, P, Tuning, Full, "Boards with stored tuned data", silicon_list),
        route!(GET "/api/profiles/silicon-table", Bearer, P, Tuning, Full, "Every stored tuned point, one row each", silicon_table),
        route!(GET "/api/profiles/silicon/:id", Bearer, P, Tuning, Full, "One board's tuned data", silicon_get),
        route!(DELETE "/api/profiles/silicon/:id", Bearer, P, Tuning, Full, "Forget one board's tuned data", silicon_delete),
        route!(PUT "/api/profiles/silicon/active", Bearer, P, Tuning, Full, "Apply one tuned point of this board (fixed mode)", silicon_active),
        route!(POST "/api/profiles/silicon/import", Bearer, P, Tuning, Full, "Import a profile document (raw JSON body)", upload),
        route!(POST "/api/profiles/silicon/import-json", Bearer, P, Tuning, Full, "Import a profile document wrapped as {document}", import_json),
        route!(POST "/api/profiles/silicon/reload", Bearer, P, Tuning, Full, "Re-read the stored profiles from disk", silicon_reload),
        route!(GET "/api/power/dps", Bearer, P, Thermal, Full, "Dynamic power scaling: settings and the reduction in force", dps),
        planned!(GET "/api/thermal/cold_environment", P, Thermal, "cold-environment handling"),
        route!(GET "/api/tou/schedule", Bearer, P, Thermal, Full, "Time-of-use power targets", tou_get),
        route!(POST "/api/tou/schedule", Bearer, P, Thermal, Full, "Replace the time-of-use power targets", tou_set),
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

fn mode_word(m: i32) -> String {
    enum_word(
        pb::TuneMode::try_from(m)
            .unwrap_or(pb::TuneMode::Unspecified)
            .as_str_name(),
        "TUNE_MODE_",
    )
}

fn chains_json(chains: &[pb::ChainPoint]) -> Value {
    chains
        .iter()
        .map(|c| {
            json!({
                "chain_id": c.chain_id, "frequency_mhz": round(c.frequency_mhz, 2),
                "chips": c.chips.iter().map(|t| json!({"chip": t.chip, "frequency_mhz": round(t.frequency_mhz, 2)})).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn measured_json(m: Option<&pb::Measured>) -> Value {
    let m = m.copied().unwrap_or_default();
    json!({
        "power_watt": round(m.power_watt, 1), "hashrate_ths": round(m.hashrate_ths, 3),
        "efficiency_j_per_th": round(m.efficiency_j_per_th, 2), "hw_error_rate": round(m.hw_error_rate, 6),
        "temp_max_c": round(m.temp_max_c, 1),
    })
}

fn profile_json(p: &pb::Profile) -> Value {
    json!({
        "id": p.id, "mode": mode_word(p.mode), "target": p.target, "voltage_mv": p.voltage_mv,
        "chains": chains_json(&p.chains), "measured": measured_json(p.measured.as_ref()),
        "tuned_at_ms": p.tuned_at_ms, "board_serial": p.board_serial,
    })
}

/// The tuner's full state (`svcos.api.autotuner.run_state.v1`).
pub fn state_json(s: &pb::GetStateResponse) -> Value {
    json!({
        "schema": "svcos.api.autotuner.run_state.v1",
        "state": s.state, "reason": s.reason, "since_ms": s.since_ms, "active": s.active,
        "mode": mode_word(s.mode), "profile": s.profile, "resumed": s.resumed,
        "board_serial": s.board_serial,
        "power_target_watt": s.power_target_watt,
        "configured_power_target_watt": s.configured_power_target_watt,
        "hashrate_target_ths": s.hashrate_target_ths,
        "dps_reduction_watt": s.dps_reduction_watt, "tou_window": s.tou_window,
        "voltage_mv": s.voltage_mv, "chains": chains_json(&s.chains),
        "measured": measured_json(s.measured.as_ref()),
        "efficiency_j_per_th": round(s.efficiency_j_per_th, 2), "steps": s.steps,
        "transitions": s.transitions.iter().map(|t| json!({"at_ms": t.at_ms, "from": t.from, "to": t.to, "reason": t.reason})).collect::<Vec<_>>(),
    })
}

async fn get_state(state: &AppState) -> ApiResult<pb::GetStateResponse> {
    let mut t = state.peers.tuner.clone();
    Ok(t.get_state(pb::GetStateRequest {})
        .await
        .map_err(grpc)?
        .into_inner())
}

fn changed(s: Option<pb::GetStateResponse>) -> Response {
    json(state_json(&s.unwrap_or_default()))
}

async fn set_active(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(field_error(
            "active",
            "a body {\"active\": true|false} is required",
        ));
    }
    let b: AutotunerActiveRequest = parse_body(&headers, &body)?;
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
    Ok(changed(r.state))
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
    let s = get_state(&state).await?;
    Ok(json(json!({
        "schema": "svcos.api.autotuner.saved_status.v1",
        "board_serial": l.board_serial, "saved": l.persisted, "tuned_profiles": l.tuned.len(),
        "saved_profiles": l.saved.len(), "saved_at_ms": l.saved_at_ms,
        "active_profile": l.active_profile, "state": s.state, "resumed": s.resumed,
    })))
}

async fn tuned_profiles(State(state): State<AppState>) -> ApiResult {
    let l = list(&state).await?;
    Ok(json(json!({
        "schema": "svcos.api.autotuner.tuned_profiles.v1",
        "board_serial": l.board_serial, "active_profile": l.active_profile,
        "profiles": l.tuned.iter().map(profile_json).collect::<Vec<_>>(),
    })))
}

async fn list_profiles(State(state): State<AppState>) -> ApiResult {
    let l = list(&state).await?;
    Ok(json(json!({
        "schema": "svcos.api.profiles.v1",
        "board_serial": l.board_serial, "active_profile": l.active_profile,
        "tuned": l.tuned.iter().map(profile_json).collect::<Vec<_>>(),
        "saved": l.saved.iter().map(profile_json).collect::<Vec<_>>(),
    })))
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
            Ok(json(json!({
                "schema": "svcos.api.profiles.saved.v1",
                "profile": r.profile.as_ref().map(profile_json),
            })))
        }
        "apply" => {
            let r = t
                .apply_profile(pb::ApplyProfileRequest { name: b.name })
                .await
                .map_err(grpc)?
                .into_inner();
            Ok(changed(r.state))
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
    Ok(json(json!({
        "schema": "svcos.api.profiles.import.v1", "boards": r.boards, "profiles": r.profiles,
    })))
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
    Ok(json(json!({
        "schema": "svcos.api.profiles.silicon.v1",
        "boards": r.boards.iter().map(|b| json!({
            "id": b.board_serial, "board_serial": b.board_serial, "profiles": b.profiles,
            "updated_at_ms": b.updated_at_ms, "current_board": b.current_board,
        })).collect::<Vec<_>>(),
    })))
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
            let m = p.measured.unwrap_or_default();
            let trims: usize = p.chains.iter().map(|c| c.chips.len()).sum();
            rows.push(json!({
                "board_serial": b.board_serial, "profile": p.id, "mode": mode_word(p.mode), "target": p.target,
                "voltage_mv": p.voltage_mv,
                "mean_frequency_mhz": round(p.chains.iter().map(|c| c.frequency_mhz).sum::<f64>() / p.chains.len().max(1) as f64, 2),
                "trimmed_chips": trims, "power_watt": round(m.power_watt, 1), "hashrate_ths": round(m.hashrate_ths, 3),
                "efficiency_j_per_th": round(m.efficiency_j_per_th, 2), "tuned_at_ms": p.tuned_at_ms,
            }));
        }
    }
    Ok(json(json!({
        "schema": "svcos.api.profiles.silicon_table.v1",
        "columns": ["board_serial", "profile", "mode", "target", "voltage_mv", "mean_frequency_mhz", "trimmed_chips", "power_watt", "hashrate_ths", "efficiency_j_per_th", "tuned_at_ms"],
        "rows": rows,
    })))
}

async fn silicon_get(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .get_silicon(pb::GetSiliconRequest { board_serial: id })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.profiles.silicon_board.v1",
        "board_serial": r.board_serial, "updated_at_ms": r.updated_at_ms,
        "profiles": r.profiles.iter().map(profile_json).collect::<Vec<_>>(),
    })))
}

async fn silicon_delete(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    t.delete_silicon(pb::DeleteSiliconRequest {
        board_serial: id.clone(),
    })
    .await
    .map_err(grpc)?;
    Ok(json(
        json!({"schema": "svcos.api.profiles.silicon_deleted.v1", "board_serial": id, "deleted": true}),
    ))
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
    Ok(changed(r.state))
}

async fn silicon_reload(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .reload_profiles(pb::ReloadProfilesRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(
        json!({"schema": "svcos.api.profiles.silicon_reload.v1", "boards": r.boards}),
    ))
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
    let count = |v: &str| h.chips.iter().filter(|c| c.verdict == v).count();
    Ok(json(json!({
        "schema": "svcos.api.autotuner.chip_health.v1",
        "since_ms": h.window_start_ms,
        "summary": {"ok": count("ok"), "weak": count("weak"), "dead": count("dead")},
        "chips": h.chips.iter().map(|c| json!({
            "chain_id": c.chain_id, "chip": c.chip, "frequency_mhz": round(c.frequency_mhz, 2),
            "trim_mhz": round(c.trim_mhz, 2), "nonces": c.nonces, "hw_errors": c.hw_errors,
            "hw_error_rate": round(c.hw_error_rate, 6), "temp_c": round(c.temp_c, 1), "alive": c.alive,
            "verdict": c.verdict,
        })).collect::<Vec<_>>(),
    })))
}

async fn silicon_report(State(state): State<AppState>) -> ApiResult {
    let h = health(&state).await?;
    let l = list(&state).await?;
    let mut chains: Vec<u32> = h.chips.iter().map(|c| c.chain_id).collect();
    chains.dedup();
    let per_chain: Vec<Value> = chains
        .iter()
        .map(|&id| {
            let chips: Vec<&pb::ChipHealth> = h.chips.iter().filter(|c| c.chain_id == id).collect();
            let n: u64 = chips.iter().map(|c| c.nonces).sum();
            let e: u64 = chips.iter().map(|c| c.hw_errors).sum();
            let mut worst: Vec<&&pb::ChipHealth> = chips.iter().filter(|c| c.hw_errors > 0).collect();
            worst.sort_by(|a, b| b.hw_error_rate.total_cmp(&a.hw_error_rate));
            json!({
                "chain_id": id, "chips": chips.len(),
                "weak": chips.iter().filter(|c| c.verdict == "weak").count(),
                "dead": chips.iter().filter(|c| c.verdict == "dead").count(),
                "trimmed": chips.iter().filter(|c| c.trim_mhz < 0.0).count(),
                "hw_error_rate": if n + e > 0 { round(e as f64 / (n + e) as f64, 6) } else { 0.0 },
                "worst_chips": worst.iter().take(5).map(|c| json!({"chip": c.chip, "hw_error_rate": round(c.hw_error_rate, 6), "trim_mhz": round(c.trim_mhz, 2)})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let best = l
        .tuned
        .iter()
        .filter_map(|p| p.measured.as_ref().map(|m| (p, m.efficiency_j_per_th)))
        .filter(|(_, e)| *e > 0.0)
        .min_by(|a, b| a.1.total_cmp(&b.1));
    Ok(json(json!({
        "schema": "svcos.api.autotuner.silicon_report.v1",
        "board_serial": l.board_serial, "since_ms": h.window_start_ms, "chains": per_chain,
        "tuned_profiles": l.tuned.len(),
        "best_efficiency": best.map(|(p, e)| json!({"profile": p.id, "efficiency_j_per_th": round(e, 2), "voltage_mv": p.voltage_mv})),
    })))
}

/// The tuner's history as CSV, header row first.
pub fn history_csv(samples: &[pb::HistorySample]) -> String {
    let mut out = String::from(
        "at_ms,state,power_watt,power_target_watt,hashrate_ths,voltage_mv,frequency_mhz,temp_max_c,nonces,hw_errors\n",
    );
    for s in samples {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{}",
            s.at_ms,
            s.state,
            round(s.power_watt, 1),
            round(s.power_target_watt, 1),
            round(s.hashrate_ths, 4),
            round(s.voltage_mv, 1),
            round(s.frequency_mhz, 2),
            round(s.temp_max_c, 1),
            s.nonces,
            s.hw_errors
        );
    }
    out
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
        history_csv(&r.samples),
    )
        .into_response())
}

async fn profitability(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ProfitabilityRequest = parse_body(&headers, &body)?;
    let config = state.config();
    let reward = b.block_reward_btc.unwrap_or(3.125);
    let price_kwh = b
        .electricity_price_per_kwh
        .unwrap_or(config.tuner.electricity_price_per_kwh);
    let fee = b.pool_fee_percent.unwrap_or(0.0);
    for (field, v, ok) in [
        ("btc_price", b.btc_price, b.btc_price >= 0.0),
        (
            "network_difficulty",
            b.network_difficulty,
            b.network_difficulty > 0.0,
        ),
        ("block_reward_btc", reward, reward >= 0.0),
        ("electricity_price_per_kwh", price_kwh, price_kwh >= 0.0),
        ("pool_fee_percent", fee, (0.0..=100.0).contains(&fee)),
    ] {
        if !v.is_finite() || !ok {
            return Err(field_error(
                field,
                "a finite number in range (difficulty > 0, fee 0-100, others >= 0)",
            ));
        }
    }
    let t = state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))?;
    let ghs = t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m);
    let hs = ghs * 1e9;
    // Expected blocks a day: hashes a day over the hashes a block takes (difficulty x 2^32).
    let btc_day =
        hs * 86_400.0 / (b.network_difficulty * 4_294_967_296.0) * reward * (1.0 - fee / 100.0);
    let revenue = btc_day * b.btc_price;
    let kwh_day = t.power_watt * 24.0 / 1000.0;
    let cost = kwh_day * price_kwh;
    Ok(json(json!({
        "schema": "svcos.api.autotuner.profitability.v1",
        "hashrate_ths": round(ghs / 1000.0, 3), "power_watt": round(t.power_watt, 1),
        "btc_per_day": btc_day, "revenue_per_day": round(revenue, 4),
        "energy_kwh_per_day": round(kwh_day, 3), "cost_per_day": round(cost, 4),
        "margin_per_day": round(revenue - cost, 4),
        "break_even_price_per_kwh": if kwh_day > 0.0 { round(revenue / kwh_day, 5) } else { 0.0 },
        "currency": config.tuner.currency,
        "inputs": {"btc_price": b.btc_price, "network_difficulty": b.network_difficulty, "block_reward_btc": reward,
                   "electricity_price_per_kwh": price_kwh, "pool_fee_percent": fee},
        "source": "measured 1-minute hashrate and PSU power; prices and difficulty as given (no internet data)",
    })))
}

async fn dps(State(state): State<AppState>) -> ApiResult {
    let s = get_state(&state).await?;
    let c = state.config();
    Ok(json(json!({
        "schema": "svcos.api.power.dps.v1",
        "enabled": c.tuner.dps_enabled, "step_watt": c.tuner.dps_step_watt,
        "min_power_watt": c.tuner.dps_min_power_watt,
        "reduction_watt": s.dps_reduction_watt,
        "configured_power_target_watt": s.configured_power_target_watt,
        "effective_power_target_watt": s.power_target_watt,
        "tuner_state": s.state, "active": s.active && s.dps_reduction_watt > 0.0,
    })))
}

/// `text`: the active window, the zone windows are read in and the next change (RFC 3339).
fn tou_json(enabled: bool, windows: &[pb::TouWindow], [active, tz, next]: [&str; 3]) -> Value {
    json!({
        "schema": "svcos.api.tou.schedule.v1", "enabled": enabled, "timezone": tz,
        "active_window": if active.is_empty() { Value::Null } else { json!(active) },
        "next_change": if next.is_empty() { Value::Null } else { json!(next) },
        "windows": windows.iter().map(|w| json!({
            "start": hhmm(w.start_minute), "end": hhmm(w.end_minute), "power_target_watt": w.power_target_watt, "label": w.label,
        })).collect::<Vec<_>>(),
    })
}

async fn tou_get(State(state): State<AppState>) -> ApiResult {
    let mut t = state.peers.tuner.clone();
    let r = t
        .get_tou_schedule(pb::GetTouScheduleRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let text = [&*r.active_window, &r.timezone, &r.next_change];
    Ok(json(tou_json(r.enabled, &r.windows, text)))
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
    let text = [&*r.active_window, &r.timezone, &r.next_change];
    Ok(json(tou_json(r.enabled, &r.windows, text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_header_row_then_one_row_per_sample() {
        let text = history_csv(&[pb::HistorySample {
            at_ms: 5,
            state: "tuned".into(),
            power_watt: 1000.04,
            nonces: 7,
            ..Default::default()
        }]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("at_ms,state,power_watt"));
        assert!(lines[1].starts_with("5,tuned,1000,"));
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
    }
}
