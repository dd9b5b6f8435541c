//! Views derived from the snapshots (and the supervisor for boot data): the mining pipeline,
//! boot phase and timeline, local rejects, troubleshooting verdicts, efficiency and tuning
//! constraints. Nothing here talks to hardware; each answer is computed from live state.

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};
use svcos_proto::hwagent::v1::{ChainState, GetInventoryRequest, MiningState, Telemetry};
use svcos_proto::stratum::v1::PoolState;
use svcos_proto::tuner::v1::GetStateRequest;

use super::{ApiResult, json, round};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};
use svcos_api_types::enum_word;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/system/boot_timeline", Bearer, P, Identity, Full, "When each service and mining started", boot_timeline),
        route!(GET "/api/boot/timeline", Bearer, U, Actions, Full, "When each service and mining started", boot_timeline),
        route!(GET "/api/boot/phase", Bearer, U, Actions, Full, "Where the unit is between power-on and mining", boot_phase),
        route!(GET "/api/mining/work/posture", Bearer, P, Telemetry, Full, "Whether the chips have current work and from where", work_posture),
        route!(GET "/api/mining/ramp", Bearer, P, Telemetry, Full, "Frequency ramp progress per chain", ramp),
        route!(GET "/api/mining/handoff/state", Bearer, P, Telemetry, Full, "Share handoff between hw-agent and stratum-agent", handoff),
        route!(GET "/api/mining/pipeline/manifest", Bearer, P, Telemetry, Full, "Stages of the mining pipeline and their owners", pipeline_manifest),
        route!(GET "/api/mining/pipeline/snapshot", Bearer, P, Telemetry, Full, "Live state of every pipeline stage", pipeline_snapshot),
        route!(GET "/api/mining/pipeline/snapshot/schema", Bearer, P, Telemetry, Full, "JSON Schema of the pipeline snapshot", pipeline_schema),
        route!(GET "/api/diagnostics/shares/local_rejects", Bearer, P, Diagnostics, Full, "Results rejected locally before reaching the pool", local_rejects),
        route!(GET "/api/diagnostics/sensor_outlier", Bearer, P, Diagnostics, Full, "Chain temperatures far from the median", sensor_outlier),
        route!(GET "/api/diagnostics/troubleshoot/network", Bearer, P, Diagnostics, Full, "Pool connectivity verdicts", troubleshoot_network),
        route!(GET "/api/diagnostics/troubleshoot/psu", Bearer, P, Diagnostics, Full, "PSU verdict", troubleshoot_psu),
        route!(GET "/api/diagnostics/troubleshoot/asic-comm", Bearer, P, Diagnostics, Full, "Chain communication verdicts", troubleshoot_asic_comm),
        route!(GET "/api/tuning/constraints", Bearer, P, Tuning, Full, "Allowed frequency, voltage and power ranges", tuning_constraints),
        route!(GET "/api/autotuner/efficiency", Bearer, P, Tuning, Full, "Measured efficiency, whole unit and per chain", efficiency),
        route!(GET "/api/perf/efficiency", Bearer, U, Tuning, Full, "Measured efficiency, whole unit and per chain", efficiency),
        route!(GET "/api/autotuner/target", Bearer, P, Tuning, Partial, "Power and hashrate targets", autotuner_target),
        route!(GET "/api/autotuner/telemetry", Bearer, P, Tuning, Full, "Per-chain frequency, voltage, hashrate and power", autotuner_telemetry),
        route!(GET "/api/debug/pid-state", Bearer, P, Diagnostics, Partial, "Fan controller inputs and outputs", pid_state),
    ]
}

fn telemetry(state: &AppState) -> ApiResult<Telemetry> {
    state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))
}

fn mining_word(t: &Telemetry) -> String {
    enum_word(t.state().as_str_name(), "MINING_STATE_")
}

async fn boot_timeline(State(state): State<AppState>) -> ApiResult {
    let services = super::hardware::supervised_services(&state).await?;
    let now = state.clock.now_ms();
    let mut events: Vec<Value> = services
        .iter()
        .filter(|s| s.uptime_s > 0 || s.pid > 0)
        .map(|s| {
            json!({
                "event": "service_started", "name": s.name,
                "at_ms": now - s.uptime_s as i64 * 1000, "restarts": s.restarts,
                "state": enum_word(s.state().as_str_name(), "SERVICE_STATE_"),
            })
        })
        .collect();
    if let Some(t) = state.telemetry()
        && t.mining_uptime_s > 0
    {
        events.push(json!({"event": "mining_started", "at_ms": t.timestamp_ms - t.mining_uptime_s as i64 * 1000}));
    }
    events.sort_by_key(|e| e["at_ms"].as_i64().unwrap_or(0));
    Ok(json(
        json!({"schema": "svcos.api.boot.timeline.v1", "events": events}),
    ))
}

/// The boot phase from what is known: peers up, mining state.
pub fn phase(t: Option<&Telemetry>, stratum_up: bool) -> &'static str {
    match t {
        None => "starting_services",
        Some(t) => match t.state() {
            MiningState::Unspecified | MiningState::Bringup => "chain_bringup",
            MiningState::NoWork if !stratum_up => "waiting_for_pool_client",
            MiningState::NoWork => "waiting_for_work",
            MiningState::Mining => "mining",
            MiningState::Sleeping => "sleeping",
            MiningState::Overheat => "overheat_pause",
            MiningState::Fault => "fault",
        },
    }
}

async fn boot_phase(State(state): State<AppState>) -> Response {
    let t = state.telemetry();
    let stratum_up = state.pools().is_some();
    json(json!({
        "schema": "svcos.api.boot.phase.v1",
        "phase": phase(t.as_ref(), stratum_up),
        "hw_agent_up": t.is_some(),
        "stratum_agent_up": stratum_up,
        "state_reason": t.as_ref().map(|t| t.state_reason.clone()),
        "mining_uptime_s": t.as_ref().map(|t| t.mining_uptime_s),
    }))
}

async fn work_posture(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let p = state.pools();
    let active = p.as_ref().and_then(|p| p.pools.iter().find(|x| x.active));
    let has_work = t.job_received_at_ms > 0;
    Ok(json(json!({
        "schema": "svcos.api.mining.work_posture.v1",
        "has_work": has_work,
        "job_age_ms": has_work.then(|| (t.timestamp_ms - t.job_received_at_ms).max(0)),
        "mining_state": mining_word(&t),
        "stratum_agent_up": p.is_some(),
        "active_pool": active.map(|a| json!({"index": a.index, "url": a.url, "state": enum_word(a.state().as_str_name(), "POOL_STATE_"), "difficulty": a.difficulty})),
        "donation_active": p.as_ref().map(|p| p.donation_active),
        "shares_queued": t.shares_queued,
    })))
}

async fn ramp(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let target = state.config().hardware.target_frequency_mhz();
    let chains: Vec<Value> = t
        .chains
        .iter()
        .map(|c| {
            let progress = if target > 0.0 { (c.frequency_mhz / target * 100.0).min(100.0) } else { 0.0 };
            json!({"chain_id": c.chain_id, "frequency_mhz": round(c.frequency_mhz, 2), "target_mhz": target, "progress_percent": round(progress, 1)})
        })
        .collect();
    let complete = !t.chains.is_empty() && t.chains.iter().all(|c| c.frequency_mhz >= target - 0.5);
    Ok(json(
        json!({"schema": "svcos.api.mining.ramp.v1", "target_mhz": target, "complete": complete, "chains": chains}),
    ))
}

async fn handoff(State(state): State<AppState>) -> Response {
    let t = state.telemetry();
    let p = state.pools();
    json(json!({
        "schema": "svcos.api.mining.handoff.v1",
        "hw_agent_up": t.is_some(),
        "stratum_agent_up": p.is_some(),
        "shares_sent": t.as_ref().map(|t| t.shares_sent),
        "shares_queued": t.as_ref().map(|t| t.shares_queued),
        "pool_accepted": p.as_ref().map(|p| p.accepted),
        "pool_rejected": p.as_ref().map(|p| p.rejected),
        "pool_stale": p.as_ref().map(|p| p.stale),
        "note": "hw-agent queues shares while stratum-agent is unreachable and hands them over when it is back",
    }))
}

const STAGES: [(&str, &str, &str); 5] = [
    (
        "pool",
        "stratum-agent",
        "connect, subscribe, authorise; receive notify",
    ),
    (
        "job",
        "stratum-agent",
        "build job templates (coinbase, merkle root) and stream them to hw-agent",
    ),
    (
        "chips",
        "hw-agent",
        "send work to every chain over UART; chips roll nonces and versions",
    ),
    (
        "nonces",
        "hw-agent",
        "verify every returned nonce against the job; count hardware errors",
    ),
    (
        "shares",
        "stratum-agent",
        "submit nonces meeting the pool target; account accepts and rejects",
    ),
];

async fn pipeline_manifest() -> Response {
    json(json!({
        "schema": "svcos.api.mining.pipeline_manifest.v1",
        "stages": STAGES.iter().map(|(id, owner, what)| json!({"stage": id, "owner": owner, "does": what})).collect::<Vec<_>>(),
    }))
}

async fn pipeline_snapshot(State(state): State<AppState>) -> Response {
    let t = state.telemetry();
    let p = state.pools();
    let active = p
        .as_ref()
        .and_then(|p| p.pools.iter().find(|x| x.active).cloned());
    let stage = |id: &str, ok: Option<bool>, detail: Value| json!({"stage": id, "ok": ok, "detail": detail});
    let stages = vec![
        stage(
            "pool",
            p.as_ref().map(|_| {
                active
                    .as_ref()
                    .is_some_and(|a| a.state() == PoolState::Alive)
            }),
            json!({"active_url": active.as_ref().map(|a| a.url.clone())}),
        ),
        stage(
            "job",
            t.as_ref().map(|t| t.job_received_at_ms > 0),
            json!({"job_received_at_ms": t.as_ref().map(|t| t.job_received_at_ms)}),
        ),
        stage(
            "chips",
            t.as_ref()
                .map(|t| t.chains.iter().any(|c| c.state() == ChainState::Mining)),
            json!({"chains_mining": t.as_ref().map(|t| t.chains.iter().filter(|c| c.state() == ChainState::Mining).count())}),
        ),
        stage(
            "nonces",
            t.as_ref().map(|t| t.nonces > 0),
            json!({"nonces": t.as_ref().map(|t| t.nonces), "hw_errors": t.as_ref().map(|t| t.hw_errors)}),
        ),
        stage(
            "shares",
            p.as_ref().map(|p| p.accepted > 0),
            json!({"sent": t.as_ref().map(|t| t.shares_sent), "accepted": p.as_ref().map(|p| p.accepted), "rejected": p.as_ref().map(|p| p.rejected)}),
        ),
    ];
    json(json!({
        "schema": "svcos.api.mining.pipeline_snapshot.v1",
        "at_ms": t.as_ref().map(|t| t.timestamp_ms),
        "stages": stages,
    }))
}

async fn pipeline_schema() -> Response {
    json(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "svcos.api.mining.pipeline_snapshot.v1",
        "type": "object",
        "required": ["schema", "at_ms", "stages"],
        "properties": {
            "schema": {"const": "svcos.api.mining.pipeline_snapshot.v1"},
            "at_ms": {"type": ["integer", "null"]},
            "stages": {"type": "array", "items": {
                "type": "object",
                "required": ["stage", "ok", "detail"],
                "properties": {
                    "stage": {"enum": STAGES.map(|s| s.0)},
                    "ok": {"type": ["boolean", "null"], "description": "null while the owning service is unreachable"},
                    "detail": {"type": "object"},
                },
            }},
        },
    }))
}

async fn local_rejects(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let total = t.nonces + t.hw_errors;
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.local_rejects.v1",
        "hw_errors": t.hw_errors,
        "duplicate_nonces": t.duplicate_nonces,
        "stale_nonces": t.stale_nonces,
        "hw_error_rate": if total > 0 { round(t.hw_errors as f64 / total as f64, 6) } else { 0.0 },
        "chains": t.chains.iter().map(|c| json!({"chain_id": c.chain_id, "hw_errors": c.hw_errors, "nonces": c.nonces})).collect::<Vec<_>>(),
    })))
}

/// Chains whose chip temperature is more than `limit_c` from the median.
pub fn outliers(temps: &[(u32, f64)], limit_c: f64) -> (f64, Vec<u32>) {
    if temps.is_empty() {
        return (0.0, Vec::new());
    }
    let mut sorted: Vec<f64> = temps.iter().map(|t| t.1).collect();
    sorted.sort_by(f64::total_cmp);
    let median = if sorted.len() % 2 == 1 {
        sorted[sorted.len() / 2]
    } else {
        (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
    };
    let out = temps
        .iter()
        .filter(|(_, t)| (t - median).abs() > limit_c)
        .map(|(id, _)| *id)
        .collect();
    (median, out)
}

async fn sensor_outlier(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let temps: Vec<(u32, f64)> = t
        .chains
        .iter()
        .map(|c| (c.chain_id, c.temp_chip_c))
        .collect();
    let (median, out) = outliers(&temps, 10.0);
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.sensor_outlier.v1",
        "rule": "a chain whose chip temperature is more than 10 C from the median of all chains",
        "median_c": round(median, 1),
        "outlier_chains": out,
        "chains": temps.iter().map(|(id, c)| json!({"chain_id": id, "temp_chip_c": round(*c, 1)})).collect::<Vec<_>>(),
    })))
}

async fn troubleshoot_network(State(state): State<AppState>) -> ApiResult {
    let p = state
        .pools()
        .ok_or_else(|| ApiError::unavailable("stratum-agent"))?;
    let pools: Vec<Value> = p
        .pools
        .iter()
        .map(|x| {
            let verdict = match x.state() {
                PoolState::Alive => "ok",
                PoolState::Disabled => "disabled",
                PoolState::AuthFailed => "check worker name and password",
                PoolState::Silent => "connected but no work: check the pool",
                PoolState::Dead => "unreachable: check DNS, routing and the URL",
                _ => "connecting",
            };
            json!({"index": x.index, "url": x.url, "state": enum_word(x.state().as_str_name(), "POOL_STATE_"),
                   "verdict": verdict, "last_error": x.last_error, "get_failures": x.get_failures,
                   "remote_failures": x.remote_failures, "last_share_latency_ms": x.last_share_latency_ms})
        })
        .collect();
    let any_alive = p.pools.iter().any(|x| x.state() == PoolState::Alive);
    Ok(json(
        json!({"schema": "svcos.api.troubleshoot.network.v1", "ok": any_alive, "pools": pools}),
    ))
}

async fn troubleshoot_psu(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let psu = t.psu.clone().unwrap_or_default();
    let deviation = if psu.voltage_setpoint_v > 0.0 {
        psu.voltage_v - psu.voltage_setpoint_v
    } else {
        0.0
    };
    let mut findings = Vec::new();
    if !psu.fault.is_empty() {
        findings.push(format!("PSU reports: {}", psu.fault));
    }
    if deviation.abs() > 0.3 {
        findings.push(format!(
            "output {:.2} V is {:+.2} V from the setpoint",
            psu.voltage_v, deviation
        ));
    }
    if !psu.enabled && t.state() == MiningState::Mining {
        findings.push("mining while the PSU output reads disabled".into());
    }
    Ok(json(json!({
        "schema": "svcos.api.troubleshoot.psu.v1",
        "ok": findings.is_empty(),
        "findings": findings,
        "psu": {"model": psu.model, "enabled": psu.enabled, "voltage_v": round(psu.voltage_v, 3),
                "voltage_setpoint_v": round(psu.voltage_setpoint_v, 3), "power_watt": round(psu.power_watt, 1),
                "current_a": round(psu.current_a, 2)},
    })))
}

async fn troubleshoot_asic_comm(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let mut hw = state.peers.hw.clone();
    let inventory = hw
        .get_inventory(GetInventoryRequest {})
        .await
        .ok()
        .map(|r| r.into_inner());
    let chains: Vec<Value> = t
        .chains
        .iter()
        .map(|c| {
            let missing = inventory
                .as_ref()
                .and_then(|i| i.chains.iter().find(|x| x.chain_id == c.chain_id))
                .map(|x| x.missing_chips.clone());
            let total = c.nonces + c.hw_errors;
            let rate = if total > 0 { c.hw_errors as f64 / total as f64 } else { 0.0 };
            let verdict = if matches!(c.state(), ChainState::Missing) {
                "chain not detected: check the ribbon cable and hashboard power"
            } else if c.chips_detected < c.chips_expected {
                "chips missing: the chain breaks after the last detected chip"
            } else if rate > 0.05 {
                "high error rate: lower frequency or raise voltage"
            } else {
                "ok"
            };
            json!({"chain_id": c.chain_id, "chips_detected": c.chips_detected, "chips_expected": c.chips_expected,
                   "missing_chips": missing, "hw_error_rate": round(rate, 6), "baud": c.baud, "verdict": verdict})
        })
        .collect();
    let ok = chains.iter().all(|c| c["verdict"] == "ok");
    Ok(json(
        json!({"schema": "svcos.api.troubleshoot.asic_comm.v1", "ok": ok, "chains": chains}),
    ))
}

async fn tuning_constraints(State(state): State<AppState>) -> Response {
    let c = state.config();
    json(json!({
        "schema": "svcos.api.tuning.constraints.v1",
        "source": "the config validation rules of this build",
        "frequency_mhz": {"min": FREQUENCY_MHZ.min, "max": FREQUENCY_MHZ.max, "target": c.hardware.target_frequency_mhz()},
        "voltage_mv": {"min": VOLTAGE_MV.min, "max": VOLTAGE_MV.max, "current": c.hardware.voltage_mv},
        "power_target_watt": {"min": 0.0, "current": c.hardware.power_target_watt, "zero_means": "no target"},
        "temperature_c": {"target": c.thermal.target_temp_c, "hot": c.thermal.hot_temp_c, "dangerous": c.thermal.dangerous_temp_c},
        "fan_percent": {"min": c.thermal.fan_min_percent, "max": c.thermal.fan_max_percent},
    }))
}

fn j_per_th(watt: f64, ghs: f64) -> Option<f64> {
    (ghs > 0.0 && watt > 0.0).then(|| round(watt / (ghs / 1000.0), 2))
}

async fn efficiency(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let ghs = t.hashrate.map_or(0.0, |h| h.ghs_1m);
    Ok(json(json!({
        "schema": "svcos.api.efficiency.v1",
        "efficiency_j_per_th": j_per_th(t.power_watt, ghs),
        "power_watt": round(t.power_watt, 1),
        "hashrate_ghs_1m": round(ghs, 3),
        "chains": t.chains.iter().map(|c| {
            let ghs = c.hashrate.map_or(0.0, |h| h.ghs_1m);
            json!({"chain_id": c.chain_id, "efficiency_j_per_th": j_per_th(c.power_watt, ghs), "power_watt": round(c.power_watt, 1), "hashrate_ghs_1m": round(ghs, 3)})
        }).collect::<Vec<_>>(),
    })))
}

async fn autotuner_target(State(state): State<AppState>) -> ApiResult {
    let mut tuner = state.peers.tuner.clone();
    let r = tuner
        .get_state(GetStateRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.autotuner.target.v1",
        "power_target_watt": r.power_target_watt,
        "hashrate_target_ghs": r.hashrate_target_ghs,
        "configured_power_target_watt": state.config().hardware.power_target_watt,
    })))
}

async fn autotuner_telemetry(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(json(json!({
        "schema": "svcos.api.autotuner.telemetry.v1",
        "at_ms": t.timestamp_ms,
        "chains": t.chains.iter().map(|c| json!({
            "chain_id": c.chain_id, "frequency_mhz": round(c.frequency_mhz, 2), "voltage_mv": round(c.voltage_mv, 1),
            "hashrate_ghs_1m": round(c.hashrate.map_or(0.0, |h| h.ghs_1m), 3),
            "hashrate_ghs_expected": round(c.hashrate.map_or(0.0, |h| h.ghs_expected), 3),
            "power_watt": round(c.power_watt, 1), "temp_chip_c": round(c.temp_chip_c, 1),
        })).collect::<Vec<_>>(),
    })))
}

async fn pid_state(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(json(json!({
        "schema": "svcos.api.debug.pid_state.v1",
        "fan_mode": enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"),
        "input_temp_max_c": round(t.temp_max_c, 1),
        "setpoint_c": round(t.temp_target_c, 1),
        "error_c": round(t.temp_max_c - t.temp_target_c, 1),
        "output_pwm_percent": t.fans.iter().map(|f| f.pwm_percent).collect::<Vec<_>>(),
        "note": "controller gains and integral state live in hw-agent and are not exported",
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outlier_rule() {
        let (median, out) = outliers(&[(0, 70.0), (1, 71.0), (2, 90.0)], 10.0);
        assert_eq!(median, 71.0);
        assert_eq!(out, vec![2]);
        assert_eq!(outliers(&[], 10.0).1, Vec::<u32>::new());
    }

    #[test]
    fn phases() {
        assert_eq!(phase(None, true), "starting_services");
        let mut t = Telemetry {
            state: MiningState::NoWork as i32,
            ..Default::default()
        };
        assert_eq!(phase(Some(&t), false), "waiting_for_pool_client");
        t.state = MiningState::Mining as i32;
        assert_eq!(phase(Some(&t), true), "mining");
    }
}
