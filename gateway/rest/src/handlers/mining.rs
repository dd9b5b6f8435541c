//! Views derived from the snapshots (and the supervisor for boot data): the mining pipeline,
//! boot phase and timeline, local rejects, troubleshooting verdicts, efficiency and tuning
//! constraints. Nothing here talks to hardware; each answer is computed from live state.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};
use svcos_proto::hwagent::v1::{GetInventoryRequest, Telemetry};

use super::{ApiResult, json, ok};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};
use svcos_api_types::enum_word;
use svcos_api_types::mining::*;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/system/boot_timeline", Bearer, P, Identity, Full, "When each service and mining started", boot_timeline, res: svcos_api_types::mining::BootTimelineBody),
        route!(GET "/api/boot/timeline", Bearer, U, Actions, Full, "When each service and mining started", boot_timeline, res: svcos_api_types::mining::BootTimelineBody),
        route!(GET "/api/boot/phase", Bearer, U, Actions, Full, "Where the unit is between power-on and mining", boot_phase, res: svcos_api_types::mining::BootPhaseBody),
        route!(GET "/api/mining/work/posture", Bearer, P, Telemetry, Full, "Whether the chips have current work and from where", work_posture, res: svcos_api_types::mining::WorkPostureBody),
        route!(GET "/api/mining/ramp", Bearer, P, Telemetry, Full, "Frequency ramp progress per chain", ramp, res: svcos_api_types::mining::RampBody),
        route!(GET "/api/mining/handoff/state", Bearer, P, Telemetry, Full, "Share handoff between hw-agent and stratum-agent", handoff, res: svcos_api_types::mining::HandoffBody),
        route!(GET "/api/mining/pipeline/manifest", Bearer, P, Telemetry, Full, "Stages of the mining pipeline and their owners", pipeline_manifest, res: svcos_api_types::mining::PipelineManifestBody),
        route!(GET "/api/mining/pipeline/snapshot", Bearer, P, Telemetry, Full, "Live state of every pipeline stage", pipeline_snapshot, res: svcos_api_types::mining::PipelineSnapshotBody),
        route!(GET "/api/mining/pipeline/snapshot/schema", Bearer, P, Telemetry, Full, "JSON Schema of the pipeline snapshot", pipeline_schema),
        route!(GET "/api/diagnostics/shares/local_rejects", Bearer, P, Diagnostics, Full, "Results rejected locally before reaching the pool", local_rejects, res: svcos_api_types::mining::LocalRejectsBody),
        route!(GET "/api/diagnostics/sensor_outlier", Bearer, P, Diagnostics, Full, "Chain temperatures far from the median", sensor_outlier, res: svcos_api_types::mining::SensorOutlierBody),
        route!(GET "/api/diagnostics/troubleshoot/network", Bearer, P, Diagnostics, Full, "Pool connectivity verdicts", troubleshoot_network, res: svcos_api_types::mining::NetworkBody),
        route!(GET "/api/diagnostics/troubleshoot/psu", Bearer, P, Diagnostics, Full, "PSU verdict", troubleshoot_psu, res: svcos_api_types::mining::PsuTroubleshootBody),
        route!(GET "/api/diagnostics/troubleshoot/asic-comm", Bearer, P, Diagnostics, Full, "Chain communication verdicts", troubleshoot_asic_comm, res: svcos_api_types::mining::AsicCommBody),
        route!(GET "/api/tuning/constraints", Bearer, P, Tuning, Full, "Allowed frequency, voltage and power ranges", tuning_constraints, res: svcos_api_types::mining::TuningConstraintsBody),
        route!(GET "/api/autotuner/efficiency", Bearer, P, Tuning, Full, "Measured efficiency, whole unit and per chain", efficiency, res: svcos_api_types::mining::EfficiencyBody),
        route!(GET "/api/perf/efficiency", Bearer, U, Tuning, Full, "Measured efficiency, whole unit and per chain", efficiency, res: svcos_api_types::mining::EfficiencyBody),
        route!(GET "/api/autotuner/target", Bearer, P, Tuning, Partial, "Power and hashrate targets", autotuner_target, res: svcos_api_types::mining::TunerTargetBody),
        route!(GET "/api/autotuner/telemetry", Bearer, P, Tuning, Full, "Per-chain frequency, voltage, hashrate and power", autotuner_telemetry, res: svcos_api_types::mining::TunerTelemetryBody),
        route!(GET "/api/debug/pid-state", Bearer, P, Diagnostics, Partial, "Fan controller inputs and outputs", pid_state, res: svcos_api_types::mining::PidStateBody),
    ]
}

fn telemetry(state: &AppState) -> ApiResult<Telemetry> {
    state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))
}

async fn boot_timeline(State(state): State<AppState>) -> ApiResult {
    let services = crate::supervisor::supervised_services(&state).await?;
    let now = state.clock.now_ms();
    let mut events: Vec<BootEvent> = services
        .iter()
        .filter(|s| s.uptime_s > 0 || s.pid > 0)
        .map(|s| BootEvent::ServiceStarted {
            name: s.name.clone(),
            at_ms: now - s.uptime_s as i64 * 1000,
            restarts: s.restarts,
            state: enum_word(s.state().as_str_name(), "SERVICE_STATE_"),
        })
        .collect();
    if let Some(t) = state.telemetry()
        && t.mining_uptime_s > 0
    {
        let at_ms = t.timestamp_ms - t.mining_uptime_s as i64 * 1000;
        events.push(BootEvent::MiningStarted { at_ms });
    }
    events.sort_by_key(BootEvent::at_ms);
    let schema = "svcos.api.boot.timeline.v1";
    ok(BootTimelineBody { schema, events })
}

async fn boot_phase(State(state): State<AppState>) -> Response {
    let t = state.telemetry();
    Json(BootPhaseBody::new(t.as_ref(), state.pools().is_some())).into_response()
}

async fn work_posture(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(WorkPostureBody::new(&t, state.pools().as_ref())).into_response())
}

async fn ramp(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let target = state.config().hardware.target_frequency_mhz();
    Ok(Json(RampBody::new(&t, target)).into_response())
}

async fn handoff(State(state): State<AppState>) -> Response {
    let t = state.telemetry();
    let p = state.pools();
    Json(HandoffBody::new(t.as_ref(), p.as_ref())).into_response()
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
    let stages = STAGES
        .iter()
        .map(|&(stage, owner, does)| PipelineStage { stage, owner, does });
    Json(PipelineManifestBody {
        schema: "svcos.api.mining.pipeline_manifest.v1",
        stages: stages.collect(),
    })
    .into_response()
}

async fn pipeline_snapshot(State(state): State<AppState>) -> ApiResult {
    ok(PipelineSnapshotBody::new(
        state.telemetry().as_ref(),
        state.pools().as_ref(),
    ))
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
    Ok(Json(LocalRejectsBody::from(&t)).into_response())
}

async fn sensor_outlier(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(SensorOutlierBody::from(&t)).into_response())
}

async fn troubleshoot_network(State(state): State<AppState>) -> ApiResult {
    let p = state
        .pools()
        .ok_or_else(|| ApiError::unavailable("stratum-agent"))?;
    Ok(Json(NetworkBody::from(&p)).into_response())
}

async fn troubleshoot_psu(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(PsuTroubleshootBody::from(&t)).into_response())
}

async fn troubleshoot_asic_comm(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    let mut hw = state.peers.hw.clone();
    let inventory = hw
        .get_inventory(GetInventoryRequest {})
        .await
        .ok()
        .map(|r| r.into_inner());
    Ok(Json(AsicCommBody::new(&t, inventory.as_ref())).into_response())
}

async fn tuning_constraints(State(state): State<AppState>) -> Response {
    let c = state.config();
    let (hw, th) = (&c.hardware, &c.thermal);
    Json(TuningConstraintsBody {
        schema: "svcos.api.tuning.constraints.v1",
        source: "the config validation rules of this build",
        frequency_mhz: FrequencyRange {
            min: FREQUENCY_MHZ.min,
            max: FREQUENCY_MHZ.max,
            target: hw.target_frequency_mhz(),
        },
        voltage_mv: VoltageRange {
            min: VOLTAGE_MV.min,
            max: VOLTAGE_MV.max,
            current: hw.voltage_mv,
        },
        power_target_watt: PowerRange {
            min: 0.0,
            current: hw.power_target_watt,
            zero_means: "no target",
        },
        temperature_c: TemperatureLimits {
            target: th.target_temp_c,
            hot: th.hot_temp_c,
            dangerous: th.dangerous_temp_c,
        },
        fan_percent: FanRange {
            min: th.fan_min_percent,
            max: th.fan_max_percent,
        },
    })
    .into_response()
}

async fn efficiency(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(EfficiencyBody::from(&t)).into_response())
}

async fn autotuner_target(State(state): State<AppState>) -> ApiResult {
    let r = super::tuner_get_state(&state).await?;
    let configured = state.config().hardware.power_target_watt;
    Ok(Json(TunerTargetBody::new(&r, configured)).into_response())
}

async fn autotuner_telemetry(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(TunerTelemetryBody::from(&t)).into_response())
}

async fn pid_state(State(state): State<AppState>) -> ApiResult {
    let t = telemetry(&state)?;
    Ok(Json(PidStateBody::from(&t)).into_response())
}
