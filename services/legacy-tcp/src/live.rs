//! The latest hw-agent and stratum-agent snapshots, kept up to date by server streams.
//!
//! Requests never call another service: they read these watch channels. Telemetry and pools
//! come from `StreamTelemetry` (without chips) and `StreamPools` through
//! [`svcos_common::ipc::follow`], which re-opens the streams across restarts and holds `None`
//! while a peer is down. The inventory (chip counts, device paths, model) is fetched once,
//! retried until it arrives, and fetched again whenever hw-agent comes back after a restart.

use svcos_common::ipc::{self, Backoff};
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{
    GetInventoryRequest, GetInventoryResponse, StreamTelemetryRequest, Telemetry,
};
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::{GetPoolsResponse, StreamPoolsRequest};
use tokio::sync::watch;
use tonic::transport::Channel;

/// Receivers of the latest snapshots; cheap to clone.
#[derive(Debug, Clone)]
pub struct Live {
    /// hw-agent telemetry, `None` while hw-agent is unreachable.
    pub telemetry: watch::Receiver<Option<Telemetry>>,
    /// stratum-agent pools, `None` while stratum-agent is unreachable.
    pub pools: watch::Receiver<Option<GetPoolsResponse>>,
    /// hw-agent inventory, `None` until first fetched.
    pub inventory: watch::Receiver<Option<GetInventoryResponse>>,
}

impl Live {
    /// Start following the peers of this instance. Must be called inside a tokio runtime.
    pub fn start(layout: &Layout, shutdown: &Shutdown) -> Self {
        let hw = HwAgentServiceClient::new(ipc::channel(layout, ServiceName::HwAgent));
        let stratum = StratumServiceClient::new(ipc::channel(layout, ServiceName::StratumAgent));
        Self::start_with(hw, stratum, shutdown)
    }

    /// Start following with given clients (tests point them at fakes).
    pub fn start_with(
        hw: HwAgentServiceClient<Channel>,
        stratum: StratumServiceClient<Channel>,
        shutdown: &Shutdown,
    ) -> Self {
        let telemetry = {
            let hw = hw.clone();
            ipc::follow("hw-agent", shutdown.clone(), move || {
                let mut hw = hw.clone();
                async move {
                    hw.stream_telemetry(StreamTelemetryRequest {
                        include_chips: false,
                    })
                    .await
                    .map(tonic::Response::into_inner)
                }
            })
        };
        let pools = ipc::follow("stratum-agent", shutdown.clone(), move || {
            let mut stratum = stratum.clone();
            async move {
                stratum
                    .stream_pools(StreamPoolsRequest {})
                    .await
                    .map(tonic::Response::into_inner)
            }
        });
        let (inventory_tx, inventory) = watch::channel(None);
        tokio::spawn(keep_inventory(
            hw,
            telemetry.clone(),
            inventory_tx,
            shutdown.clone(),
        ));
        Live {
            telemetry,
            pools,
            inventory,
        }
    }
}

/// Fetch the inventory each time hw-agent (re)appears on the telemetry stream.
async fn keep_inventory(
    mut hw: HwAgentServiceClient<Channel>,
    mut telemetry: watch::Receiver<Option<Telemetry>>,
    inventory: watch::Sender<Option<GetInventoryResponse>>,
    shutdown: Shutdown,
) {
    loop {
        // Wait for hw-agent to be up.
        tokio::select! {
            r = telemetry.wait_for(Option::is_some) => if r.is_err() { return },
            _ = shutdown.wait() => return,
        }
        let mut backoff = Backoff::default();
        loop {
            match hw.get_inventory(GetInventoryRequest {}).await {
                Ok(resp) => {
                    inventory.send_replace(Some(resp.into_inner()));
                    break;
                }
                Err(status) => {
                    tracing::debug!(code = ?status.code(), "inventory not available yet");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.wait() => return,
                    }
                }
            }
        }
        // Then wait for it to go away before fetching again on its return.
        tokio::select! {
            r = telemetry.wait_for(Option::is_none) => if r.is_err() { return },
            _ = shutdown.wait() => return,
        }
    }
}
