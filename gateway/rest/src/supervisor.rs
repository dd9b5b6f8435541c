//! Calls to the supervisor that several route groups make (lifecycle, mining and discovery
//! views), kept under the groups so none of them imports another.

use std::time::Duration;

use svcos_common::{ServiceName, ipc};
use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::update_service_client::UpdateServiceClient;

use crate::AppState;
use crate::envelope::ApiError;

/// Deadline of the update-status call (the supervisor reads its persisted state machine).
const STATUS_TIMEOUT: Duration = Duration::from_secs(20);

/// Every supervised service as the supervisor reports it (one call, no caching: lifecycle views
/// must show the current pids).
pub async fn supervised_services(state: &AppState) -> Result<Vec<pb::ServiceInfo>, ApiError> {
    let mut sup = state.peers.supervisor.clone();
    Ok(sup
        .list_services(pb::ListServicesRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("supervisor", &s))?
        .into_inner()
        .services)
}

/// The supervisor's firmware-update state machine (`UpdateService.GetUpdateStatus`).
pub async fn update_status(state: &AppState) -> Result<pb::UpdateStatus, ApiError> {
    let channel =
        ipc::channel_with_timeout(state.layout.socket(ServiceName::Supervisor), STATUS_TIMEOUT);
    UpdateServiceClient::new(channel)
        .get_update_status(pb::GetUpdateStatusRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|s| ApiError::from_grpc("supervisor", &s))
}
