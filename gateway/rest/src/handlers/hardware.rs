//! System identity, lifecycle actions, fans, LEDs, sensors and the hw-agent-backed debug writes.
//!
//! Reads come from the telemetry snapshot where it has the data and from
//! `HwAgentService.GetInventory` otherwise; writes go to hw-agent (fan, LED, sleep, frequency,
//! voltage) or the supervisor (restarts).

use std::str::FromStr;
use svcos_api_types::requests::{
    ChipFrequencyRequest, ChipVoltageRequest, FanRequest, LedRequest, RestartRequest,
};
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use svcos_common::ServiceName;
use svcos_proto::hwagent::v1::{
    FanMode, GetInventoryRequest, GetInventoryResponse, GetTelemetryRequest, LedMode,
    SetFanRequest, SetFrequencyRequest, SetLedRequest, SetSleepRequest, SetVoltageRequest,
};
use svcos_proto::supervisor::v1::{RestartStackRequest, ServiceRequest};

use super::{ApiResult, ok, parse_body};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::supervisor::supervised_services;
use crate::{AppState, route};
use svcos_api_types::enum_word;
use svcos_api_types::hardware::*;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/system/asic", Bearer, P, Identity, Full, "ASIC model, chains, frequency and voltage", system_asic, res: svcos_api_types::hardware::SystemAsicBody),
        route!(GET "/api/system/health", Bearer, P, Identity, Full, "Which services are up", system_health, res: svcos_api_types::hardware::SystemHealthBody),
        route!(POST "/api/system/identify", Bearer, P, Identity, Full, "Blink the locate LED", identify, res: svcos_api_types::hardware::LedBody),
        route!(GET "/api/system/info", Bearer, P, Identity, Full, "Identity, model and versions", system_info, res: svcos_api_types::hardware::SystemInfoBody),
        route!(POST "/api/system/restart", Bearer, P, Identity, Full, "Restart the whole firmware (software reboot)", reboot, res: svcos_api_types::hardware::RebootBody),
        route!(GET "/api/system/stats", Bearer, P, Identity, Full, "Hashrate, power, efficiency, temperatures", system_stats, res: svcos_api_types::hardware::SystemStatsBody),
        route!(POST "/api/action/reboot", Bearer, P, Actions, Full, "Restart the whole firmware (software reboot)", reboot, res: svcos_api_types::hardware::RebootBody),
        route!(POST "/api/action/restart", Bearer, P, Actions, Full, "Restart the mining services (or one named service)", restart, req: svcos_api_types::requests::RestartRequest, res: svcos_api_types::hardware::RestartBody),
        route!(POST "/api/action/sleep", Bearer, P, Actions, Full, "Stop hashing, keep the control board up", sleep, res: svcos_api_types::hardware::SleepBody),
        route!(POST "/api/action/wake", Bearer, P, Actions, Full, "Resume hashing", wake, res: svcos_api_types::hardware::SleepBody),
        route!(POST "/api/fan", Bearer, P, Thermal, Full, "Set fan mode and duty", set_fan, req: svcos_api_types::requests::FanRequest, res: svcos_api_types::hardware::FanBody),
        route!(GET "/api/thermal/cooling_modes", Bearer, P, Thermal, Full, "Available fan modes and the current one", cooling_modes, res: svcos_api_types::hardware::CoolingModesBody),
        route!(GET "/api/hardware/thermal/chipd/chip_temps", Bearer, P, Hardware, Full, "Per-chip temperatures", chip_temps, res: svcos_api_types::hardware::ChipTempsBody),
        route!(GET "/api/hardware/thermal/sensors", Bearer, P, Hardware, Full, "Temperature and power sensors", sensors, res: svcos_api_types::hardware::SensorsBody),
        route!(GET "/api/miner/type", Bearer, P, Hardware, Full, "Miner model, vendor and chip", miner_type, res: svcos_api_types::hardware::MinerTypeBody),
        route!(GET "/api/led/config", Bearer, P, Led, Full, "Current LED mode", led_status, res: svcos_api_types::hardware::LedBody),
        route!(POST "/api/led/config", Bearer, P, Led, Full, "Set the LED mode", led_set, req: svcos_api_types::requests::LedRequest, res: svcos_api_types::hardware::LedBody),
        route!(POST "/api/led/locate", Bearer, P, Led, Full, "Start the locate pattern", identify, res: svcos_api_types::hardware::LedBody),
        route!(POST "/api/led/locate/stop", Bearer, P, Led, Full, "Back to the normal pattern", locate_stop, res: svcos_api_types::hardware::LedBody),
        route!(POST "/api/led/pattern", Bearer, P, Led, Full, "Set the LED pattern", led_set, req: svcos_api_types::requests::LedRequest, res: svcos_api_types::hardware::LedBody),
        route!(GET "/api/led/patterns", Bearer, P, Led, Full, "Available LED patterns", led_patterns, res: svcos_api_types::hardware::LedPatternsBody),
        route!(GET "/api/led/status", Bearer, P, Led, Full, "Current LED mode", led_status, res: svcos_api_types::hardware::LedBody),
        route!(POST "/api/debug/chip/frequency", Bearer, P, Diagnostics, Full, "Set chip frequency (Hacker mode, confirm)", debug_frequency, req: svcos_api_types::requests::ChipFrequencyRequest, res: svcos_api_types::hardware::FrequencyAppliedBody),
        route!(POST "/api/debug/chip/voltage", Bearer, P, Diagnostics, Full, "Set chain voltage (Hacker mode, confirm)", debug_voltage, req: svcos_api_types::requests::ChipVoltageRequest, res: svcos_api_types::hardware::VoltageAppliedBody),
        route!(GET "/api/autotuner/state", Bearer, P, Tuning, Partial, "Tuner state from the tuner service", tuner_state, res: svcos_api_types::hardware::TunerStateBody),
        route!(GET "/api/autotuner/status", Bearer, P, Tuning, Full, "The tuner's full run state: on/off, mode, reason, steps, transitions", tuner_run_state, res: svcos_api_types::tuning::RunStateBody),
    ]
}

async fn inventory(state: &AppState) -> ApiResult<GetInventoryResponse> {
    let mut hw = state.peers.hw.clone();
    Ok(hw
        .get_inventory(GetInventoryRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner())
}

async fn system_info(State(state): State<AppState>) -> Response {
    let config = state.config();
    let inv = inventory(&state).await.ok();
    let t = state.telemetry();
    let body = SystemInfoBody::new(
        config.system.hostname.clone(),
        config.system.mode.as_str(),
        env!("CARGO_PKG_VERSION"),
        svcos_api_types::API_CONTRACT_VERSION,
        inv.as_ref(),
        t.as_ref(),
        (state.clock.now_ms() - state.started_ms).max(0) / 1000,
    );
    Json(body.with_host()).into_response()
}

async fn system_asic(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    let t = state.telemetry();
    let config = state.config();
    Ok(Json(SystemAsicBody::new(
        &inv,
        t.as_ref(),
        config.hardware.target_frequency_mhz(),
        config.hardware.voltage_mv,
    ))
    .into_response())
}

async fn system_health(State(state): State<AppState>) -> Response {
    let supervised = supervised_services(&state).await.ok();
    let hw_up = state.telemetry().is_some();
    let stratum_up = state.pools().is_some();
    let auth_stream = state.sessions.is_live();
    let healthy = hw_up
        && stratum_up
        && supervised.as_ref().is_none_or(|list| {
            list.iter()
                .all(|s| s.state() == svcos_proto::supervisor::v1::ServiceState::Running)
        });
    Json(SystemHealthBody {
        schema: "svcos.api.system.health.v1",
        healthy,
        gateway_view: GatewayView {
            hw_agent_telemetry: hw_up,
            stratum_agent_pools: stratum_up,
            auth_revocation_stream: auth_stream,
        },
        supervisor_reachable: supervised.is_some(),
        services: supervised.map(|l| l.iter().map(Service::from).collect()),
        // The file as every service would read it now (svcos_common::config's fallback rule).
        config_problems: svcos_common::config::Config::load_or_fallback(
            &state.layout.config_path,
            &state.config(),
        )
        .problems
        .into_iter()
        .map(|mut p| {
            p.message = svcos_common::status::redact_paths(&p.message);
            p
        })
        .collect(),
    })
    .into_response()
}

async fn system_stats(State(state): State<AppState>) -> ApiResult {
    let t = state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))?;
    let p = state.pools();
    Ok(Json(SystemStatsBody::new(&t, p.as_ref())).into_response())
}

async fn set_led(state: &AppState, mode: LedMode) -> ApiResult {
    let mut hw = state.peers.hw.clone();
    hw.set_led(SetLedRequest { mode: mode as i32 })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    Ok(Json(LedBody::of(mode.as_str_name())).into_response())
}

async fn identify(State(state): State<AppState>) -> ApiResult {
    set_led(&state, LedMode::Locate).await
}

async fn locate_stop(State(state): State<AppState>) -> ApiResult {
    set_led(&state, LedMode::Normal).await
}

const LED_MODES: [LedMode; 3] = [LedMode::Normal, LedMode::Locate, LedMode::Off];

fn parse_led(word: &str) -> Option<LedMode> {
    LED_MODES
        .into_iter()
        .find(|m| enum_word(m.as_str_name(), "LED_MODE_") == word)
}

async fn led_set(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: LedRequest = parse_body(&headers, &body)?;
    let mode = parse_led(&b.mode).ok_or_else(|| {
        ApiError::bad_request(format!("unknown LED mode {:?}", b.mode))
            .with("field", "mode")
            .suggestion("one of normal, locate, off (GET /api/led/patterns)")
    })?;
    set_led(&state, mode).await
}

async fn led_patterns() -> Response {
    Json(LED_PATTERNS).into_response()
}

async fn led_status(State(state): State<AppState>) -> ApiResult {
    let t = state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))?;
    Ok(Json(LedBody::of(t.led_mode().as_str_name())).into_response())
}

async fn supervisor_restart(state: &AppState, name: &str) -> ApiResult<Restarted> {
    let mut sup = state.peers.supervisor.clone();
    let r = sup
        .restart(ServiceRequest { name: name.into() })
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner();
    Ok(Restarted::new(name, r.service.as_ref()))
}

async fn reboot(State(state): State<AppState>) -> ApiResult {
    // The gateway runs unprivileged and is itself one of the services, so the supervisor does
    // the whole-stack restart: every service stopped in reverse boot order (hw-agent before the
    // simulated board, so it never sees its UARTs vanish), then started in boot order, nothing
    // counted as a crash, one service that does not come back not keeping the others down.
    // Restarting them one by one from here stopped the simulated board under a running
    // hw-agent and left the rest down after the first failed restart. The answer goes out
    // before the gateway stops: its listener drains open requests first.
    let mut sup = state.peers.supervisor.clone();
    let services = sup
        .restart_stack(RestartStackRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner()
        .services;
    let gateway_restart_scheduled = services.iter().any(|s| s == "gateway");
    ok(RebootBody {
        schema: "svcos.api.action.v1",
        action: "reboot",
        services,
        gateway_restart_scheduled,
    })
}

async fn restart(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RestartRequest = parse_body(&headers, &body)?;
    let names: Vec<String> = match b.service {
        Some(name) => {
            let parsed = ServiceName::from_str(&name).map_err(|_| {
                ApiError::bad_request(format!("unknown service {name:?}"))
                    .with("field", "service")
                    .suggestion(
                        "one of hw-agent, stratum-agent, tuner, auth, legacy-tcp, gateway, proxy",
                    )
            })?;
            vec![parsed.as_str().to_string()]
        }
        // The mining daemon: the pool client first so hw-agent re-attaches to fresh work.
        None => vec!["stratum-agent".into(), "hw-agent".into()],
    };
    let mut restarted = Vec::new();
    for name in &names {
        restarted.push(supervisor_restart(&state, name).await?);
    }
    ok(RestartBody {
        schema: "svcos.api.action.v1",
        action: "restart",
        restarted,
    })
}

async fn set_sleep(state: &AppState, sleep: bool) -> ApiResult {
    let mut hw = state.peers.hw.clone();
    let r = hw
        .set_sleep(SetSleepRequest { sleep })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner();
    Ok(Json(SleepBody {
        schema: "svcos.api.action.v1",
        action: if sleep { "sleep" } else { "wake" },
        state: enum_word(r.state().as_str_name(), "MINING_STATE_"),
    })
    .into_response())
}

async fn sleep(State(state): State<AppState>) -> ApiResult {
    set_sleep(&state, true).await
}

async fn wake(State(state): State<AppState>) -> ApiResult {
    set_sleep(&state, false).await
}

fn field_error(field: &str, message: &str) -> ApiError {
    ApiError::bad_request(format!("invalid value for {field}"))
        .detail(message.to_string())
        .with("field", field)
}

async fn set_fan(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: FanRequest = parse_body(&headers, &body)?;
    let mode = match b.mode.as_str() {
        "auto" => FanMode::Auto,
        "manual" => FanMode::Manual,
        _ => return Err(field_error("mode", "one of auto, manual")),
    };
    // The ranges are hw-agent's (svcos_common::bounds); its refusal comes back naming the field.
    let pwm = b.pwm_percent.unwrap_or(0);
    let target = b.target_temp_c.unwrap_or(0.0);
    let mut hw = state.peers.hw.clone();
    hw.set_fan(SetFanRequest {
        mode: mode as i32,
        pwm_percent: pwm,
        target_temp_c: target,
        source: "api".into(),
    })
    .await
    .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    ok(FanBody {
        schema: "svcos.api.fan.v1",
        mode: b.mode,
        pwm_percent: pwm,
        target_temp_c: target,
    })
}

async fn cooling_modes(State(state): State<AppState>) -> Response {
    Json(CoolingModesBody::new(state.telemetry().as_ref())).into_response()
}

async fn chip_temps(State(state): State<AppState>) -> ApiResult {
    let mut hw = state.peers.hw.clone();
    let t = hw
        .get_telemetry(GetTelemetryRequest {
            include_chips: true,
        })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner()
        .telemetry
        .ok_or_else(|| ApiError::unavailable("hw-agent telemetry"))?;
    Ok(Json(ChipTempsBody::from(&t)).into_response())
}

async fn sensors(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    Ok(Json(SensorsBody::from(&inv)).into_response())
}

async fn miner_type(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    Ok(Json(MinerTypeBody::from(&inv)).into_response())
}

async fn debug_frequency(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ChipFrequencyRequest = parse_body(&headers, &body)?;
    if !FREQUENCY_MHZ.contains(b.frequency_mhz) {
        return Err(field_error("frequency_mhz", &FREQUENCY_MHZ.describe()));
    }
    let mut hw = state.peers.hw.clone();
    let r = hw
        .set_frequency(SetFrequencyRequest {
            chain_id: b.chain_id,
            chip: b.chip,
            frequency_mhz: b.frequency_mhz,
        })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner();
    Ok(Json(FrequencyAppliedBody {
        schema: "svcos.api.debug.frequency.v1",
        applied_mhz: r.applied_mhz,
    })
    .into_response())
}

async fn debug_voltage(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: ChipVoltageRequest = parse_body(&headers, &body)?;
    if !VOLTAGE_MV.contains(b.voltage_mv) {
        return Err(field_error("voltage_mv", &VOLTAGE_MV.describe()));
    }
    let mut hw = state.peers.hw.clone();
    let r = hw
        .set_voltage(SetVoltageRequest {
            chain_id: b.chain_id,
            voltage_mv: b.voltage_mv,
        })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner();
    Ok(Json(VoltageAppliedBody {
        schema: "svcos.api.debug.voltage.v1",
        applied_mv: r.applied_mv,
    })
    .into_response())
}

async fn tuner_state(State(state): State<AppState>) -> ApiResult {
    let r = super::tuner_get_state(&state).await?;
    Ok(Json(TunerStateBody::from(&r)).into_response())
}

/// The full run state, the same body the tuner writes answer, so a screen that polls it and
/// writes `PUT /api/autotuner/active` reads back what it wrote (the compact `state.v1` of
/// `/api/autotuner/state` has no `active`, `mode`, `steps` or `transitions`).
async fn tuner_run_state(State(state): State<AppState>) -> ApiResult {
    let r = super::tuner_get_state(&state).await?;
    Ok(Json(svcos_api_types::tuning::RunStateBody::from(&r)).into_response())
}
