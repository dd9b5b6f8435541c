//! Setup wizard steps, safety acknowledgement, extra config sections, fleet and swarm, off-grid,
//! solar and home control.
//!
//! The power-related features (circuit cap, PSU override, night mode, thermostat, solar and
//! off-grid following) are decided by the power governor in the tuner process
//! (`PowerService`): these routes write their config sections, relay readings and map the
//! governor's answers.

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
use svcos_proto::tuner::v1::{GetPowerRequest, PowerStatus, ReconcileRequest, ThermostatAction};

use crate::AppState;
use crate::envelope::ApiError;
use crate::handlers::ApiResult;

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
