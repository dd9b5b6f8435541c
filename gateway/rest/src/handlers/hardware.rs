//! System identity, lifecycle actions, fans, LEDs, sensors and the hw-agent-backed debug writes.
//!
//! Reads come from the telemetry snapshot where it has the data and from
//! `HwAgentService.GetInventory` otherwise; writes go to hw-agent (fan, LED, sleep, frequency,
//! voltage) or the supervisor (restarts).

use std::str::FromStr;
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use svcos_common::ServiceName;
use svcos_proto::hwagent::v1::{
    FanMode, GetInventoryRequest, GetInventoryResponse, GetTelemetryRequest, LedMode,
    SetFanRequest, SetFrequencyRequest, SetLedRequest, SetSleepRequest, SetVoltageRequest,
};
use svcos_proto::supervisor::v1::{ListServicesRequest, ServiceInfo, ServiceRequest};
use svcos_proto::tuner::v1::GetStateRequest;

use super::{ApiResult, json, parse_body, round};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};
use svcos_api_types::enum_word;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/system/asic", Bearer, P, Identity, Full, "ASIC model, chains, frequency and voltage", system_asic),
        route!(GET "/api/system/health", Bearer, P, Identity, Full, "Which services are up", system_health),
        route!(POST "/api/system/identify", Bearer, P, Identity, Full, "Blink the locate LED", identify),
        route!(GET "/api/system/info", Bearer, P, Identity, Full, "Identity, model and versions", system_info),
        route!(POST "/api/system/restart", Bearer, P, Identity, Full, "Restart the whole firmware (software reboot)", reboot),
        route!(GET "/api/system/stats", Bearer, P, Identity, Full, "Hashrate, power, efficiency, temperatures", system_stats),
        route!(POST "/api/action/reboot", Bearer, P, Actions, Full, "Restart the whole firmware (software reboot)", reboot),
        route!(POST "/api/action/restart", Bearer, P, Actions, Full, "Restart the mining services (or one named service)", restart),
        route!(POST "/api/action/sleep", Bearer, P, Actions, Full, "Stop hashing, keep the control board up", sleep),
        route!(POST "/api/action/wake", Bearer, P, Actions, Full, "Resume hashing", wake),
        route!(POST "/api/fan", Bearer, P, Thermal, Full, "Set fan mode and duty", set_fan),
        route!(GET "/api/thermal/cooling_modes", Bearer, P, Thermal, Full, "Available fan modes and the current one", cooling_modes),
        route!(GET "/api/hardware/thermal/chipd/chip_temps", Bearer, P, Hardware, Full, "Per-chip temperatures", chip_temps),
        route!(GET "/api/hardware/thermal/sensors", Bearer, P, Hardware, Full, "Temperature and power sensors", sensors),
        route!(GET "/api/miner/type", Bearer, P, Hardware, Full, "Miner model, vendor and chip", miner_type),
        route!(GET "/api/led/config", Bearer, P, Led, Full, "Current LED mode", led_status),
        route!(POST "/api/led/config", Bearer, P, Led, Full, "Set the LED mode", led_set),
        route!(POST "/api/led/locate", Bearer, P, Led, Full, "Start the locate pattern", identify),
        route!(POST "/api/led/locate/stop", Bearer, P, Led, Full, "Back to the normal pattern", locate_stop),
        route!(POST "/api/led/pattern", Bearer, P, Led, Full, "Set the LED pattern", led_set),
        route!(GET "/api/led/patterns", Bearer, P, Led, Full, "Available LED patterns", led_patterns),
        route!(GET "/api/led/status", Bearer, P, Led, Full, "Current LED mode", led_status),
        route!(POST "/api/debug/chip/frequency", Bearer, P, Diagnostics, Full, "Set chip frequency (Hacker mode, confirm)", debug_frequency),
        route!(POST "/api/debug/chip/voltage", Bearer, P, Diagnostics, Full, "Set chain voltage (Hacker mode, confirm)", debug_voltage),
        route!(GET "/api/autotuner/state", Bearer, P, Tuning, Partial, "Tuner state from the tuner service", tuner_state),
        route!(GET "/api/autotuner/status", Bearer, P, Tuning, Partial, "Tuner state from the tuner service", tuner_state),
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
    json(json!({
        "schema": "svcos.api.system.info.v1",
        "hostname": config.system.hostname,
        "mode": config.system.mode.as_str(),
        "firmware": "svcOS",
        "version": env!("CARGO_PKG_VERSION"),
        "api_contract_version": super::discovery::API_CONTRACT_VERSION,
        "model": inv.as_ref().map(|i| i.model.clone()),
        "vendor": inv.as_ref().map(|i| i.vendor.clone()),
        "board": inv.as_ref().map(|i| i.board.clone()),
        "chip_model": inv.as_ref().map(|i| i.chip_model.clone()),
        "serial_number": inv.as_ref().map(|i| i.serial_number.clone()),
        "driver": inv.as_ref().map(|i| i.driver.clone()),
        "gateway_uptime_s": (state.clock.now_ms() - state.started_ms).max(0) / 1000,
        "mining_uptime_s": t.as_ref().map(|t| t.mining_uptime_s),
        "hw_agent_up": t.is_some(),
    }))
}

async fn system_asic(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    let t = state.telemetry();
    let config = state.config();
    Ok(json(json!({
        "schema": "svcos.api.system.asic.v1",
        "chip_model": inv.chip_model,
        "chains": inv.chains.iter().map(|c| {
            let live = t.as_ref().and_then(|t| t.chains.iter().find(|x| x.chain_id == c.chain_id));
            json!({
                "chain_id": c.chain_id, "chips_expected": c.chips_expected, "chips_detected": c.chips_detected,
                "missing_chips": c.missing_chips, "device": c.device,
                "frequency_mhz": live.map(|l| round(l.frequency_mhz, 2)),
                "voltage_mv": live.map(|l| round(l.voltage_mv, 1)),
                "baud": live.map(|l| l.baud),
            })
        }).collect::<Vec<_>>(),
        "target_frequency_mhz": config.hardware.target_frequency_mhz(),
        "target_voltage_mv": config.hardware.voltage_mv,
        "nominal_ghs": inv.nominal_ghs,
        "nominal_power_watt": inv.nominal_power_watt,
    })))
}

fn service_json(s: &ServiceInfo) -> Value {
    json!({
        "name": s.name, "state": enum_word(s.state().as_str_name(), "SERVICE_STATE_"),
        "pid": s.pid, "restarts": s.restarts, "uptime_s": s.uptime_s, "last_exit": s.last_exit,
        "backoff_ms": s.backoff_ms, "escalation": s.escalation, "recent_restarts": s.recent_restarts,
    })
}

/// Every supervised service as the supervisor reports it (one call, no caching: lifecycle views
/// must show the current pids).
pub(crate) async fn supervised_services(state: &AppState) -> ApiResult<Vec<ServiceInfo>> {
    let mut sup = state.peers.supervisor.clone();
    Ok(sup
        .list_services(ListServicesRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner()
        .services)
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
    json(json!({
        "schema": "svcos.api.system.health.v1",
        "healthy": healthy,
        "gateway_view": {
            "hw_agent_telemetry": hw_up,
            "stratum_agent_pools": stratum_up,
            "auth_revocation_stream": auth_stream,
        },
        "supervisor_reachable": supervised.is_some(),
        "services": supervised.map(|l| l.iter().map(service_json).collect::<Vec<_>>()),
    }))
}

async fn system_stats(State(state): State<AppState>) -> ApiResult {
    let t = state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))?;
    let p = state.pools();
    let ghs = t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m);
    let efficiency = if ghs > 0.0 {
        round(t.power_watt / (ghs / 1000.0), 2)
    } else {
        0.0
    };
    Ok(json(json!({
        "schema": "svcos.api.system.stats.v1",
        "hashrate_ghs_1m": round(ghs, 3),
        "power_watt": round(t.power_watt, 1),
        "efficiency_j_per_th": efficiency,
        "temp_max_c": round(t.temp_max_c, 1),
        "fan_rpm": t.fans.iter().map(|f| f.rpm).collect::<Vec<_>>(),
        "shares_accepted": p.as_ref().map(|p| p.accepted),
        "shares_rejected": p.as_ref().map(|p| p.rejected),
        "best_share": p.as_ref().map(|p| p.best_share),
        "mining_uptime_s": t.mining_uptime_s,
    })))
}

async fn set_led(state: &AppState, mode: LedMode) -> ApiResult {
    let mut hw = state.peers.hw.clone();
    hw.set_led(SetLedRequest { mode: mode as i32 })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    Ok(json(json!({
        "schema": "svcos.api.led.v1",
        "mode": enum_word(mode.as_str_name(), "LED_MODE_"),
    })))
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LedBody {
    #[serde(alias = "pattern")]
    mode: String,
}

async fn led_set(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: LedBody = parse_body(&headers, &body)?;
    let mode = parse_led(&b.mode).ok_or_else(|| {
        ApiError::bad_request(format!("unknown LED mode {:?}", b.mode))
            .with("field", "mode")
            .suggestion("one of normal, locate, off (GET /api/led/patterns)")
    })?;
    set_led(&state, mode).await
}

async fn led_patterns() -> Response {
    json(json!({
        "schema": "svcos.api.led.patterns.v1",
        "patterns": [
            {"name": "normal", "description": "status indication by the firmware"},
            {"name": "locate", "description": "blink to find this unit in a rack"},
            {"name": "off", "description": "LEDs off"},
        ],
    }))
}

async fn led_status(State(state): State<AppState>) -> ApiResult {
    let t = state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))?;
    Ok(json(json!({
        "schema": "svcos.api.led.v1",
        "mode": enum_word(t.led_mode().as_str_name(), "LED_MODE_"),
    })))
}

async fn supervisor_restart(state: &AppState, name: &str) -> ApiResult<Value> {
    let mut sup = state.peers.supervisor.clone();
    let r = sup
        .restart(ServiceRequest { name: name.into() })
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner();
    Ok(r.service
        .as_ref()
        .map_or_else(|| json!({"name": name}), service_json))
}

async fn reboot(State(state): State<AppState>) -> ApiResult {
    // The gateway runs unprivileged, so a "reboot" restarts every supervised service, which is
    // everything the firmware controls: in boot order, the gateway itself last and only after
    // this answer has been sent.
    let services = supervised_services(&state).await?;
    let mut restarted = Vec::new();
    let mut restart_self = false;
    for s in &services {
        match s.name.as_str() {
            "gateway" => restart_self = true,
            "supervisor" => {}
            name => restarted.push(supervisor_restart(&state, name).await?),
        }
    }
    if restart_self {
        let mut sup = state.peers.supervisor.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let _ = sup
                .restart(ServiceRequest {
                    name: "gateway".into(),
                })
                .await;
        });
    }
    Ok(json(json!({
        "schema": "svcos.api.action.v1",
        "action": "reboot",
        "restarted": restarted,
        "gateway_restart_scheduled": restart_self,
    })))
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestartBody {
    #[serde(default)]
    service: Option<String>,
}

async fn restart(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RestartBody = parse_body(&headers, &body)?;
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
    Ok(json(
        json!({"schema": "svcos.api.action.v1", "action": "restart", "restarted": restarted}),
    ))
}

async fn set_sleep(state: &AppState, sleep: bool) -> ApiResult {
    let mut hw = state.peers.hw.clone();
    let r = hw
        .set_sleep(SetSleepRequest { sleep })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.action.v1",
        "action": if sleep { "sleep" } else { "wake" },
        "state": enum_word(r.state().as_str_name(), "MINING_STATE_"),
    })))
}

async fn sleep(State(state): State<AppState>) -> ApiResult {
    set_sleep(&state, true).await
}

async fn wake(State(state): State<AppState>) -> ApiResult {
    set_sleep(&state, false).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FanBody {
    mode: String,
    #[serde(default)]
    pwm_percent: Option<u32>,
    #[serde(default)]
    target_temp_c: Option<f64>,
}

fn field_error(field: &str, message: &str) -> ApiError {
    ApiError::bad_request(format!("invalid value for {field}"))
        .detail(message.to_string())
        .with("field", field)
}

async fn set_fan(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: FanBody = parse_body(&headers, &body)?;
    let mode = match b.mode.as_str() {
        "auto" => FanMode::Auto,
        "manual" => FanMode::Manual,
        _ => return Err(field_error("mode", "one of auto, manual")),
    };
    let pwm = b.pwm_percent.unwrap_or(0);
    if mode == FanMode::Manual && !(1..=100).contains(&pwm) {
        return Err(field_error("pwm_percent", "manual mode needs 1-100"));
    }
    let target = b.target_temp_c.unwrap_or(0.0);
    if target != 0.0 && !(30.0..=95.0).contains(&target) {
        return Err(field_error(
            "target_temp_c",
            "30-95 C, or omit to keep the current target",
        ));
    }
    let mut hw = state.peers.hw.clone();
    hw.set_fan(SetFanRequest {
        mode: mode as i32,
        pwm_percent: pwm,
        target_temp_c: target,
    })
    .await
    .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    Ok(json(
        json!({"schema": "svcos.api.fan.v1", "mode": b.mode, "pwm_percent": pwm, "target_temp_c": target}),
    ))
}

async fn cooling_modes(State(state): State<AppState>) -> Response {
    let current = state
        .telemetry()
        .map(|t| enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"));
    json(json!({
        "schema": "svcos.api.thermal.cooling_modes.v1",
        "modes": [
            {"name": "auto", "description": "PID on the hottest chip toward [thermal].target_temp_c within fan_min/max_percent"},
            {"name": "manual", "description": "fixed duty; temperature is not regulated, the overheat cut-off still applies"},
        ],
        "current": current,
    }))
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
    Ok(json(json!({
        "schema": "svcos.api.chip_temps.v1",
        "chains": t.chains.iter().map(|c| json!({
            "chain_id": c.chain_id,
            "temp_chip_c": round(c.temp_chip_c, 1),
            "chips": c.chips.iter().map(|chip| json!({"index": chip.index, "temp_c": round(chip.temp_c, 1)})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })))
}

async fn sensors(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    Ok(json(json!({
        "schema": "svcos.api.sensors.v1",
        "sensors": inv.sensors.iter().map(|s| json!({
            "name": s.name, "kind": s.kind, "chain_id": s.chain_id, "bus": s.bus,
            "address": s.address, "value": s.value, "unit": s.unit,
        })).collect::<Vec<_>>(),
    })))
}

async fn miner_type(State(state): State<AppState>) -> ApiResult {
    let inv = inventory(&state).await?;
    Ok(json(json!({
        "schema": "svcos.api.miner_type.v1",
        "model": inv.model, "vendor": inv.vendor, "board": inv.board, "chip_model": inv.chip_model,
        "chains": inv.chains.len(), "fan_count": inv.fan_count, "firmware": "svcOS",
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrequencyBody {
    #[allow(dead_code)]
    confirm: bool,
    frequency_mhz: f64,
    #[serde(default)]
    chain_id: Option<u32>,
    #[serde(default)]
    chip: Option<u32>,
}

async fn debug_frequency(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: FrequencyBody = parse_body(&headers, &body)?;
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
    Ok(json(
        json!({"schema": "svcos.api.debug.frequency.v1", "applied_mhz": r.applied_mhz}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VoltageBody {
    #[allow(dead_code)]
    confirm: bool,
    voltage_mv: f64,
    #[serde(default)]
    chain_id: Option<u32>,
}

async fn debug_voltage(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: VoltageBody = parse_body(&headers, &body)?;
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
    Ok(json(
        json!({"schema": "svcos.api.debug.voltage.v1", "applied_mv": r.applied_mv}),
    ))
}

async fn tuner_state(State(state): State<AppState>) -> ApiResult {
    let mut tuner = state.peers.tuner.clone();
    let r = tuner
        .get_state(GetStateRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.autotuner.state.v1",
        "state": r.state, "profile": r.profile,
        "power_target_watt": r.power_target_watt, "hashrate_target_ghs": r.hashrate_target_ghs,
        "efficiency_j_per_th": r.efficiency_j_per_th,
    })))
}
