//! The LAN settings (`[network.ipv4]`, `[system].hostname`): the rules live on the config type,
//! the save is the config writer's, which also writes the networkd file
//! (`svcos_common::networkd`, from `state::set_config`); these handlers parse, call and map.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::discovery::NetworkConfigBody;
use svcos_api_types::requests::{NetworkConfigRequest, request_field};
use svcos_common::config::ConfigError;
use svcos_common::networkd;

use crate::config_write::ApplyError;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/network/config", Bearer, U, Fleet, Full, "LAN settings: DHCP or static address, gateway, DNS, hostname", get_lan, res: svcos_api_types::discovery::NetworkConfigBody),
        route!(PUT "/api/network/config", Bearer, U, Fleet, Full, "Set the LAN settings (validated, saved, written for systemd-networkd)", put_lan, req: svcos_api_types::requests::NetworkConfigRequest, res: svcos_api_types::discovery::NetworkConfigBody),
    ]
}

fn answer(state: &AppState, written: Option<bool>) -> ApiResult {
    let (c, generation) = state.config_at();
    let path = networkd::network_file_path(&state.layout);
    ok(NetworkConfigBody::new(&c, &path, written, generation))
}

async fn get_lan(State(state): State<AppState>) -> ApiResult {
    answer(&state, None)
}

async fn put_lan(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let req: NetworkConfigRequest = parse_body(&headers, &body)?;
    let patch = req
        .to_patch()
        .map_err(|(field, message)| ApiError::invalid_field(&field, message))?;
    let path = networkd::network_file_path(&state.layout);
    let before = std::fs::read_to_string(&path).ok();
    crate::config_write::patch_apply(&state, None, &patch)
        .await
        .map_err(|e| match e {
            ApplyError::Invalid(ConfigError::Invalid { field, message }) => {
                ApiError::invalid_field(request_field(&field), message)
            }
            other => other.into_api(ErrorCode::ConfigValidation, None),
        })?;
    let after = std::fs::read_to_string(&path).ok();
    if after.as_deref() != Some(networkd::render(&state.config()).as_str()) {
        // Saved, but the file still holds the previous settings (the writer logged why).
        return Err(
            ApiError::internal("the settings could not be written for networkd")
                .detail(format!("{} was not updated", path.display())),
        );
    }
    tracing::info!(method = %req.method, "LAN settings saved");
    answer(&state, Some(before != after))
}
