//! Setup wizard steps, safety acknowledgement, extra config sections, fleet and swarm, off-grid,
//! solar and home control.
//!
//! The power-related features (circuit cap, PSU override, night mode, thermostat, solar and
//! off-grid following) are decided by the power governor in the tuner process
//! (`PowerService`): these routes write their config sections, relay readings and map the
//! governor's answers. Operations still marked `planned!` answer 501 with the envelope until
//! their feature lands.

pub mod config_sections;
pub mod energy_api;
pub mod fleet;
pub mod governor;
pub mod home;
pub mod lan;
pub mod setup;
pub mod ssh;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use svcos_api_types::energy::ThermostatBody;
use svcos_common::ServiceName;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::requests::RoomTempRequest;
use svcos_api_types::swarm::SwarmBody;
use svcos_proto::tuner::v1::{
    GetPowerRequest, GetSwarmRequest, PostSwarmRoomTemperatureRequest, PowerStatus,
    ReconcileRequest, ThermostatAction,
};

use crate::envelope::ApiError;
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// A `PowerService` answer, or the envelope for its failure.
pub fn power_call<T>(r: Result<tonic::Response<T>, tonic::Status>) -> ApiResult<T> {
    r.map(tonic::Response::into_inner)
        .map_err(|s| ApiError::from_grpc("tuner", &s))
}

/// The governor's state; with `reconcile`, after it re-read the config and acted on it (so an
/// answer to a write shows the write's effect).
pub async fn power_status(state: &AppState, reconcile: bool) -> ApiResult<PowerStatus> {
    let mut power = state.peers.power.clone();
    let status = if reconcile {
        power_call(power.reconcile(ReconcileRequest {}).await)?.status
    } else {
        power_call(power.get_power(GetPowerRequest {}).await)?.status
    };
    Ok(status.unwrap_or_default())
}

/// The thermostat answer of `[home]` in force and the governor's state.
pub fn thermostat_body(
    state: &AppState,
    power: &PowerStatus,
    action: Option<ThermostatAction>,
    write: Option<Value>,
) -> ThermostatBody {
    ThermostatBody::new(&state.config().home, power, action, write)
}

/// The gateway's state directory.
pub fn state_dir(state: &AppState) -> PathBuf {
    state.layout.service_state_dir(ServiceName::Gateway)
}

/// Read a JSON state file; `None` when missing. A damaged file is moved aside (logged, listed by
/// `/api/safety/warnings`), never fatal.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    svcos_common::statefile::load_json(path)
}

/// Write a JSON state file atomically (failures are logged: the state is rebuilt at runtime).
pub fn write_json<T: Serialize>(path: &Path, value: &T) {
    let result = path
        .parent()
        .map_or(Ok(()), |dir| svcos_common::fsutil::ensure_dir(dir, 0o700))
        .and_then(|()| {
            let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
            svcos_common::fsutil::atomic_write(path, &bytes, 0o600)
        });
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot save state file");
    }
}

/// The rows not owned by one of the groups below (the table lists theirs).
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/swarm", Bearer, P, Fleet, Full, "The home swarm: members, shares of the circuit budget, leader, shared room reading", swarm, res: svcos_api_types::swarm::SwarmBody),
        route!(POST "/api/swarm/room-temp", Bearer, P, Fleet, Full, "A room reading for this unit's thermostat and every swarm member's", swarm_room_temp, req: svcos_api_types::requests::RoomTempRequest, res: svcos_api_types::swarm::SwarmBody),
    ]
}

// The swarm is the power governor's (tuner, `power::swarm`): these relay and map its answers.
async fn swarm(State(state): State<AppState>) -> ApiResult {
    let r = power_call(state.peers.power.clone().get_swarm(GetSwarmRequest {}).await)?;
    ok(SwarmBody::new(&r.status.unwrap_or_default(), None))
}

async fn swarm_room_temp(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RoomTempRequest = parse_body(&headers, &body)?;
    let req = PostSwarmRoomTemperatureRequest { room_c: b.room_c, source: b.source.unwrap_or_default() };
    let r = match state.peers.power.clone().post_swarm_room_temperature(req).await {
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            return Err(ApiError::invalid_field("room_c", s.message()));
        }
        r => power_call(r)?,
    };
    ok(SwarmBody::new(&r.status.unwrap_or_default(), Some(r.action())))
}
