//! `svcos.config.v1.ConfigService` on the gateway's socket: the config writer's face for the
//! other processes. stratum-agent's pool commands (cgminer `addpool`, `removepool`, ...) write
//! here instead of saving `config.toml` themselves, so the file, the gateway's copy and
//! `GET /api/pools` never disagree. Both calls run the same path as REST
//! ([`crate::config_write::patch_apply`]); [`ApplyError`] maps to a status in one place.

use serde_json::Value;
use svcos_proto::config::v1 as pb;
use svcos_proto::config::v1::config_service_server::ConfigService;
use tonic::{Request, Response, Status};

use crate::AppState;
use crate::config_write::{ApplyError, patch_apply};

/// The ConfigService implementation over the gateway's state.
#[derive(Debug, Clone)]
pub struct ConfigApi {
    state: AppState,
}

impl ConfigApi {
    /// A service writing through `state`'s config path.
    pub fn new(state: AppState) -> Self {
        ConfigApi { state }
    }
}

/// The one mapping from a refused or failed write to a status.
fn to_status(e: ApplyError) -> Status {
    match e {
        // Compare-and-set lost: the caller re-reads and retries (gRPC's ABORTED).
        ApplyError::Stale { expected, current } => Status::aborted(
            svcos_common::config::store::WriteError::Stale { expected, current }.to_string(),
        ),
        ApplyError::Invalid(e) => {
            let mut status = Status::invalid_argument(e.to_string());
            if let Some(field) = e.field()
                && let Ok(v) = field.parse()
            {
                status.metadata_mut().insert("field", v);
            }
            status
        }
        ApplyError::Write(e) => {
            tracing::error!(error = %e, "config write failed");
            Status::internal("the configuration could not be saved")
        }
    }
}

#[tonic::async_trait]
impl ConfigService for ConfigApi {
    async fn get_config(
        &self,
        _: Request<pb::GetConfigRequest>,
    ) -> Result<Response<pb::GetConfigResponse>, Status> {
        let (config, generation) = self.state.config_at();
        Ok(Response::new(pb::GetConfigResponse {
            generation,
            config_toml: config.to_toml(),
        }))
    }

    async fn patch_config(
        &self,
        r: Request<pb::PatchConfigRequest>,
    ) -> Result<Response<pb::PatchConfigResponse>, Status> {
        let r = r.into_inner();
        let patch: Value = serde_json::from_str(&r.patch_json)
            .map_err(|e| Status::invalid_argument(format!("patch_json: {e}")))?;
        if !patch.is_object() {
            return Err(Status::invalid_argument(
                "patch_json: expected a JSON object",
            ));
        }
        let report = patch_apply(&self.state, Some(r.generation), &patch)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::PatchConfigResponse {
            generation: report.generation,
            changed: report.changed,
        }))
    }
}
