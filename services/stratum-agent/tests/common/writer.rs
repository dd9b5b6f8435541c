//! A stand-in for the gateway's config writer (`svcos.config.v1.ConfigService`) on the
//! gateway's socket in the test's directory: the same compare-and-set rule
//! (`svcos_common::config::store`), the same patch merge and atomic save, and the same push back
//! to stratum-agent (`ReloadConfig`), without the HTTP half of the gateway.

use std::path::Path;
use std::sync::Arc;

use svcos_common::config::Config;
use svcos_common::config::change::{config_from_json, merge};
use svcos_common::config::store::{WriteError, check_write};
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::config::v1 as cfgpb;
use svcos_proto::config::v1::config_service_server::{ConfigService, ConfigServiceServer};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

/// The writer's state: the config in force and its generation.
pub struct Writer {
    layout: Layout,
    current: Mutex<(Config, u64)>,
}

impl Writer {
    /// Serve on the gateway socket under `dir` until `shutdown`.
    pub fn start(dir: &Path, config: Config, shutdown: Shutdown) -> tokio::task::JoinHandle<()> {
        let layout = Layout::sim(dir);
        let listener = svcos_common::ipc::bind(&layout.socket(ServiceName::Gateway)).unwrap();
        let writer = Arc::new(Writer {
            layout,
            current: Mutex::new((config, 1)),
        });
        let router = svcos_common::ipc::server().add_service(ConfigServiceServer::from_arc(writer));
        tokio::spawn(async move {
            let _ = svcos_common::ipc::serve(router, listener, shutdown).await;
        })
    }
}

#[tonic::async_trait]
impl ConfigService for Writer {
    async fn get_config(
        &self,
        _: Request<cfgpb::GetConfigRequest>,
    ) -> Result<Response<cfgpb::GetConfigResponse>, Status> {
        let current = self.current.lock().await;
        Ok(Response::new(cfgpb::GetConfigResponse {
            generation: current.1,
            config_toml: current.0.to_toml(),
        }))
    }

    async fn patch_config(
        &self,
        r: Request<cfgpb::PatchConfigRequest>,
    ) -> Result<Response<cfgpb::PatchConfigResponse>, Status> {
        let r = r.into_inner();
        let patch: serde_json::Value = serde_json::from_str(&r.patch_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let generation = {
            let mut current = self.current.lock().await;
            let mut merged = serde_json::to_value(&current.0).unwrap();
            merge(&mut merged, &patch);
            let new = config_from_json(&merged, &patch)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let generation = check_write(current.1, r.generation, &new).map_err(|e| match e {
                WriteError::Stale { .. } => Status::aborted(e.to_string()),
                WriteError::Invalid(_) => Status::invalid_argument(e.to_string()),
            })?;
            new.save(&self.layout.config_path)
                .map_err(|e| Status::internal(e.to_string()))?;
            *current = (new, generation);
            generation
        };
        // The push, as the gateway makes it after a write that changed pools.
        let mut stratum = StratumServiceClient::new(svcos_common::ipc::channel(
            &self.layout,
            ServiceName::StratumAgent,
        ));
        stratum
            .reload_config(pb::ReloadConfigRequest {})
            .await
            .map_err(|s| Status::internal(format!("push: {}", s.message())))?;
        Ok(Response::new(cfgpb::PatchConfigResponse {
            generation,
            changed: Vec::new(),
        }))
    }
}
