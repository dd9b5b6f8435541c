//! legacy-tcp: the cgminer-compatible API on TCP 4028, so existing fleet tools (pyasic,
//! Awesome Miner, Hive, home-grown scripts) can identify and read an svcOS miner.
//!
//! # Design
//! - **Protocol core without I/O.** [`protocol`] frames and parses requests (JSON
//!   `{"command","parameter"}`, plain `command|parameter`, `+` joins); [`commands`] answers them
//!   from a [`commands::View`] of the latest snapshots; [`reply`] encodes cgminer's STATUS
//!   block and sections, JSON or plain text, with the trailing NUL. All of it is unit-tested
//!   and fuzzed (`fuzz/`).
//! - **No gRPC in the request path.** [`live::Live`] keeps hw-agent telemetry and
//!   stratum-agent pools in watch channels fed by server streams; a request only borrows them.
//!   While a peer restarts its snapshot is `None` and replies say so at once, naming the
//!   missing peer: `STATUS=I` with the values still known (pyasic keeps those), `STATUS=W`
//!   when nothing live is left in the reply.
//! - **One request per connection**, like cgminer: read until a complete JSON value (clients
//!   such as pyasic send no newline and wait for EOF), answer, close. Requests are bounded in
//!   size and time; at most `[legacy].max_clients` connections are held at once, a newcomer at
//!   the cap closing the one that has waited longest for its request ([`server`]).
//! - **Privileged commands** (pool switching, restart, ascset, ...) only for addresses on the
//!   `[legacy].allow` list with cgminer's `W:` group ([`allow`]); everyone else gets cgminer's
//!   code 45. Pool changes go to StratumService, `ascset freq`/`ascenable` to HwAgentService,
//!   `restart` to the supervisor (Restart of stratum-agent, then hw-agent). Nothing on this
//!   port reaches passwords, sessions or debug features.
//! - **Identity.** VERSION names svcOS honestly and carries the board's marketing model in
//!   `Type` ("Antminer S9"), so tools keyed on the model (pyasic selects its stock-firmware
//!   BMMiner backend from it) read the miner through the stock code path.

pub mod allow;
pub mod commands;
pub mod live;
pub mod protocol;
pub mod reply;
pub mod server;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use svcos_common::config::Config;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;
use tokio::net::{TcpListener, UnixListener};

use crate::allow::AllowList;
use crate::commands::Identity;
use crate::live::Live;
use crate::server::{Limits, Peers, Server};

/// Build the server for an instance: start following its peers and parse the allowlist.
/// Must be called inside a tokio runtime.
pub fn build(layout: &Layout, config: &Config, shutdown: &Shutdown) -> anyhow::Result<Server> {
    let allow = AllowList::parse(&config.legacy.allow).context("legacy.allow")?;
    let peers = Peers {
        hw: HwAgentServiceClient::new(ipc::channel(layout, ServiceName::HwAgent)),
        stratum: StratumServiceClient::new(ipc::channel(layout, ServiceName::StratumAgent)),
        supervisor: SupervisorServiceClient::new(ipc::channel(layout, ServiceName::Supervisor)),
    };
    let live = Live::start_with(peers.hw.clone(), peers.stratum.clone(), shutdown);
    let identity = Identity {
        version: env!("CARGO_PKG_VERSION").to_string(),
        model: config.hardware.board.preset().4.to_string(),
    };
    let limits = Limits {
        max_clients: config.legacy.max_clients,
        max_clients_per_peer: config.legacy.max_clients_per_peer,
        ..Limits::default()
    };
    Ok(Server::new(live, peers, allow, limits, identity))
}

/// Run the service until `shutdown`: bind TCP `[legacy].bind:[legacy].port`, then serve gRPC
/// health on `listener` (so "healthy" means the port is open) and the API.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let legacy = &ctx.config.legacy;
    if !legacy.enabled {
        tracing::info!("legacy API disabled by [legacy].enabled = false");
        return svcos_common::entry::serve_health_only(listener, shutdown).await;
    }
    let addr = SocketAddr::new(legacy.bind, legacy.port);
    let tcp = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind the cgminer API to {addr}"))?;
    let server = Arc::new(build(&ctx.layout, &ctx.config, &shutdown)?);
    tracing::info!(%addr, max_clients = legacy.max_clients, "cgminer API listening");
    let grpc = ipc::serve(ipc::no_services(), listener, shutdown.clone());
    let api = server.serve(tcp, shutdown.clone());
    let (grpc, api) = tokio::join!(grpc, api);
    grpc?;
    api?;
    Ok(())
}

/// `svcos legacy-tcp`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::LegacyTcp, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::LegacyTcp, args, Flavor::CurrentThread, run)
}
