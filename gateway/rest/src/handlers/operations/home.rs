//! `/api/home/*` and `/api/swarm*`: thermostat, night mode and swarm of a space-heater miner.
//! All feed the power governor in the tuner (`PowerService`): settings go to the config file,
//! readings to the governor; nothing here calls hw-agent or decides anything.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use svcos_api_types::energy::{HomePresetsBody, NightModeBody, NightModePatchRequest};
use svcos_api_types::requests::{HomeTargetRequest, RoomTempRequest};
use svcos_api_types::swarm::SwarmBody;
use svcos_proto::tuner::v1::{
    GetSwarmRequest, ListPresetsRequest, ListPresetsResponse, NoteSwarmPeersRequest,
    PostRoomTemperatureRequest, PostSwarmRoomTemperatureRequest, PowerStatus,
};

use super::{power_call, power_status, thermostat_body};
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/home/night-mode", Bearer, P, Integrations, Full, "Night (quiet) hours: window, power and fan caps", get_night_mode, res: svcos_api_types::energy::NightModeBody),
        route!(POST "/api/home/night-mode", Bearer, P, Integrations, Full, "Set night (quiet) hours", post_night_mode, req: svcos_api_types::energy::NightModePatchRequest, res: svcos_api_types::energy::NightModeBody),
        route!(GET "/api/home/presets", Bearer, P, Integrations, Full, "Thermostat presets (constants)", presets, res: svcos_api_types::energy::HomePresetsBody),
        route!(POST "/api/home/room-temp", Bearer, P, Integrations, Full, "Post the room temperature; the thermostat moves the power target", room_temp, req: svcos_api_types::requests::RoomTempRequest, res: svcos_api_types::energy::ThermostatBody),
        route!(GET "/api/swarm", Bearer, P, Fleet, Full, "The home swarm: members, leader, shares of the circuit budget, shared room reading", swarm, res: svcos_api_types::swarm::SwarmBody),
        route!(POST "/api/swarm/room-temp", Bearer, P, Fleet, Full, "A room reading for this unit's thermostat and every swarm member's", swarm_room_temp, req: svcos_api_types::requests::RoomTempRequest, res: svcos_api_types::swarm::SwarmBody),
        route!(POST "/api/home/target", Bearer, P, Integrations, Full, "Set the room-temperature target (and thermostat limits)", target, req: svcos_api_types::requests::HomeTargetRequest, res: svcos_api_types::energy::ThermostatBody),
    ]
}

fn night_body(state: &AppState, power: &PowerStatus, report: Option<Value>) -> ApiResult {
    let now = svcos_common::time::unix_ms();
    ok(NightModeBody::new(&state.config(), now, power, report))
}

async fn get_night_mode(State(state): State<AppState>) -> ApiResult {
    let power = power_status(&state, false).await?;
    night_body(&state, &power, None)
}

async fn post_night_mode(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let NightModePatchRequest(b) = parse_body(&headers, &body)?;
    let Value::Object(m) = &b else {
        return Err(
            ApiError::bad_request("expected a JSON object").code(ErrorCode::ConfigValidation)
        );
    };
    // Unknown members are caught by the typed section (deny_unknown_fields) and named.
    let report = patch_config(&state, json!({"home": {"night_mode": m}})).await?;
    let power = power_status(&state, true).await?;
    night_body(&state, &power, Some(report))
}

/// The governor's preset tables (`PowerService.ListPresets`).
async fn preset_tables(state: &AppState) -> ApiResult<ListPresetsResponse> {
    power_call(
        state
            .peers
            .power
            .clone()
            .list_presets(ListPresetsRequest {})
            .await,
    )
}

async fn presets(State(state): State<AppState>) -> ApiResult {
    ok(HomePresetsBody::new(
        &preset_tables(&state).await?.thermostat,
    ))
}

/// A reading's answer: the accepted range is the governor's rule (tuner); its refusal is
/// answered naming the field.
fn room_call<T>(r: Result<tonic::Response<T>, tonic::Status>) -> ApiResult<T> {
    match r {
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            Err(ApiError::invalid_field("room_c", s.message()))
        }
        r => power_call(r),
    }
}

async fn room_temp(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RoomTempRequest = parse_body(&headers, &body)?;
    let (room_c, source) = (b.room_c, b.source.unwrap_or_default());
    let req = PostRoomTemperatureRequest { room_c, source };
    let r = room_call(state.peers.power.clone().post_room_temperature(req).await)?;
    let action = r.action();
    let power = r.status.unwrap_or_default();
    ok(thermostat_body(&state, &power, Some(action), None))
}

async fn target(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: HomeTargetRequest = parse_body(&headers, &body)?;
    let mut home = json!({"thermostat_enabled": b.enabled.unwrap_or(true)});
    if let Some(name) = &b.preset {
        let tables = preset_tables(&state).await?;
        let Some(p) = tables.thermostat.iter().find(|p| &p.name == name) else {
            let names: Vec<&str> = tables.thermostat.iter().map(|p| p.name.as_str()).collect();
            let hint = format!("one of {} (GET /api/home/presets)", names.join(", "));
            return Err(ApiError::invalid_field("preset", &hint));
        };
        home["target_room_c"] = json!(p.target_room_c);
        home["min_watt"] = json!(p.min_watt);
        home["max_watt"] = json!(p.max_watt);
        home["step_watt"] = json!(p.step_watt);
    } else if b.target_room_c.is_none() && b.enabled.is_none() {
        return Err(ApiError::invalid_field(
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
    ok(thermostat_body(&state, &power, None, Some(report)))
}

// The swarm is the governor's (`power::swarm` in the tuner): these relay and map its answers.
async fn swarm(State(state): State<AppState>) -> ApiResult {
    let mut power = state.peers.power.clone();
    let r = power_call(power.get_swarm(GetSwarmRequest {}).await)?;
    ok(SwarmBody::new(&r.status.unwrap_or_default(), None))
}

async fn swarm_room_temp(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RoomTempRequest = parse_body(&headers, &body)?;
    let (room_c, source) = (b.room_c, b.source.unwrap_or_default());
    let req = PostSwarmRoomTemperatureRequest { room_c, source };
    let r = room_call(s.peers.power.clone().post_swarm_room_temperature(req).await)?;
    let action = Some(r.action());
    ok(SwarmBody::new(&r.status.unwrap_or_default(), action))
}

/// Hand the governor the swarm units the mDNS browse found, on each change and again every
/// 10 s (a restarted tuner starts with none); the tuner's beats then reach them.
pub async fn relay_swarm_peers(state: AppState, shutdown: svcos_common::Shutdown) {
    let mut found = state.mdns.swarm_peers();
    loop {
        let addresses = found
            .borrow_and_update()
            .iter()
            .map(|a| a.to_string())
            .collect();
        let req = NoteSwarmPeersRequest { addresses };
        if let Err(e) = state.peers.power.clone().note_swarm_peers(req).await {
            tracing::debug!(error = %e, "swarm peers not handed to the tuner");
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            changed = found.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {}
        }
    }
}
