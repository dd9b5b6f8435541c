//! The legacy API over fake hw-agent / stratum-agent services, for trying third-party clients
//! (pyasic, cgminer-api scripts) without the whole stack:
//! `cargo run -p svcos-legacy-tcp --example fake_miner -- 127.0.0.3:4028`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use svcos_common::Shutdown;
use svcos_common::ipc;
use svcos_legacy_tcp::allow::AllowList;
use svcos_legacy_tcp::commands::Identity;
use svcos_legacy_tcp::live::Live;
use svcos_legacy_tcp::server::{Limits, Peers, Server};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;

fn main() -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.3:4028".into())
        .parse()?;
    let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
    rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        let _fakes = common::start_fakes(dir.path()).await;
        let shutdown = Shutdown::new();
        shutdown.trigger_on_signals()?;
        let peers = Peers {
            hw: HwAgentServiceClient::new(ipc::channel_at(common::sock(dir.path(), "hw-agent"))),
            stratum: StratumServiceClient::new(ipc::channel_at(common::sock(
                dir.path(),
                "stratum-agent",
            ))),
            supervisor: SupervisorServiceClient::new(ipc::channel_at(common::sock(
                dir.path(),
                "supervisor",
            ))),
        };
        let live = Live::start_with(peers.hw.clone(), peers.stratum.clone(), &shutdown);
        let server = Arc::new(Server::new(
            live,
            peers,
            AllowList::default(),
            Limits::default(),
            Identity {
                version: env!("CARGO_PKG_VERSION").into(),
                model: "Antminer S9".into(),
            },
        ));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        println!("cgminer API on {addr}");
        server.serve(listener, shutdown).await?;
        anyhow::Ok(())
    })
}
