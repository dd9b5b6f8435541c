//! stratum-agent: the pool client, and the sim's test pool.
//!
//! * [`v1`]: the Stratum V1 codec and client session, pure (no I/O), unit-tested against public
//!   protocol examples and fuzzed.
//! * [`agent`]: the pool manager task (failover, failback with hysteresis, epochs, share queue,
//!   counters, donation windows). It owns all mutable state; gRPC handlers ([`grpc`]) send it
//!   commands and read the snapshots it publishes.
//! * [`pooledit`]: the pool list's rules (switch, enable, add, remove, order; never the last
//!   pool). The list lives in `config.toml`, which only the gateway writes: pool commands read
//!   it from the gateway's ConfigService, edit it, write it back as a compare-and-set, and the
//!   agent picks the result up through `ReloadConfig`, like any other config change.
//! * [`conn`]/[`transport`]: one task per pool connection over TCP or TLS (rustls).
//! * [`state`]: counters, switch history and the current session survive restarts.
//! * [`sharequeue`]: shares waiting for their session's connection, on disk before hw-agent is
//!   told `Queued`, so a SIGKILL loses none; [`persist`] is the one writer of both files.
//! * [`testpool`]: a real Stratum V1 server that verifies every share (for `svcos sim` and tests).
//!
//! Choices worth knowing:
//!
//! * **Epochs.** A JobTemplate's `pool_epoch` names one pool session (pool, extranonce1). A
//!   switch, a new session that did not resume, or `mining.set_extranonce` starts a new epoch and
//!   a clean job; a reconnect that resumes the session (same subscription id and extranonce1)
//!   keeps the epoch, so work in flight stays valid. Epoch numbers are persisted and never repeat.
//! * **Shares.** SubmitShare re-hashes the header (two SHA-256d) against the job's share
//!   difficulty, rejects wrong extranonce2 sizes and version bits outside the BIP 310 mask, and
//!   dedupes per job. While the epoch's connection is down, valid shares are queued and sent once
//!   the session resumes; if it does not, they are dropped as stale. The set of shares taken is
//!   part of the persisted state (written right after each share goes out), and the queue is on
//!   disk before hw-agent hears `Queued` ([`sharequeue`]), so a restart neither loses nor repeats
//!   one.
//! * **Failover/failback.** See [`agent`]. A pool that is connected but sends no notify for
//!   `[stratum].silent_timeout_s` counts as dead. Quota (split) mode: when any enabled pool has a
//!   quota, the alive quota pool furthest behind its share of time is mined, switching at most
//!   once per `failback_hysteresis_s` window.
//! * **client.reconnect** is followed to the same host only (a port change is honoured); a pool
//!   must not be able to redirect the hashrate elsewhere.
//! * **Donation** ([`donation`]): off by default; when enabled, mined in the second half of each
//!   cycle up to the budget; only time actually mined counts, and a window the donation pool
//!   could not serve is not made up later. The donation pool's jobs carry `donation = true` and
//!   `pool_index = u32::MAX`; its switches are recorded with `to_index = -1` and a donation reason.
//! * **Test pool codec.** The SRI `sv1_api` crate is not in this machine's registry mirror, so the
//!   test pool has its own minimal server codec ([`testpool::wire`]) and its own header assembly,
//!   independent of the client's parser and of `svcos_work`.
//! * **Stratum V2** ([`v2`], behind `[stratum].sv2_enabled`, off by default): a
//!   `stratum2+tcp://host:port/<authority key>` pool is just another pool in the ordered list.
//!   The client runs the Noise NX handshake pinned to the URL's authority key, SetupConnection,
//!   one extended channel, and maps its jobs onto the same JobTemplate V1 produces (extranonce
//!   prefix = extranonce1, coinbase prefix/suffix = coinb1/coinb2), so hw-agent and the share
//!   checks do not know the difference. With the gate off such pools are skipped with an error.
//!   The test pool's SV2 upstream ([`testpool::sv2`]) is built from the same reference crates.
//! * **Job declaration** ([`jd`], `[stratum.jd]`, behind the same gate): a JD client task takes
//!   templates from a template provider, declares them to the pool's job-declaration server and
//!   the agent mines each declared job on the SV2 pool's channel (SetCustomMiningJob); while it
//!   has none (refused, disconnected, a new block not yet declared) the pool's own jobs are mined
//!   and `GetJdStatus` says why. The test pool serves both roles on its SV2 port.

pub mod agent;
pub mod conn;
pub mod donation;
pub mod grpc;
pub mod jd;
pub mod jobs;
pub mod persist;
pub mod policy;
pub mod pooledit;
pub mod pooltest;
pub mod sharequeue;
pub mod state;
#[cfg(feature = "test-pool")]
pub mod testpool;
pub mod transport;
pub mod v1;
pub mod v2;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
#[cfg(feature = "test-pool")]
use std::sync::Arc;

use anyhow::Context;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown};
use svcos_proto::stratum::v1::stratum_service_server::StratumServiceServer;
#[cfg(feature = "test-pool")]
use svcos_proto::testpool::v1::test_pool_service_server::TestPoolServiceServer;
#[cfg(feature = "test-pool")]
use tokio::net::TcpListener;
use tokio::net::UnixListener;
use tokio::sync::mpsc;

use crate::agent::{Agent, AgentSettings};
use crate::transport::Tls;

/// Run the service until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let config = &ctx.config;
    let ca =
        (!config.stratum.tls_ca_file.is_empty()).then(|| Path::new(&config.stratum.tls_ca_file));
    let tls = Tls::new(ca).context("stratum TLS setup")?;
    let state_dir = ctx.layout.service_state_dir(ServiceName::StratumAgent);
    let state_path = state_dir.join(state::STATE_FILE);
    let saved = state::load(&state_path);
    let queue_path = state_dir.join(sharequeue::QUEUE_FILE);
    let saved_queue = sharequeue::load(&queue_path, sharequeue::MAX_QUEUE);
    let settings = AgentSettings {
        config_path: ctx.layout.config_path.clone(),
        state_path: state_path.clone(),
        pools: config.pools.clone(),
        stratum: config.stratum.clone(),
        donation: config.donation.clone(),
        tls: tls.clone(),
    };
    let (events_tx, events_rx) = mpsc::channel(1024);
    let (commands_tx, commands_rx) = mpsc::channel(256);
    let (persistence, snapshots, durable) = persist::channels();
    let (agent, views) = Agent::new(settings, saved, saved_queue, events_tx, persistence);

    // The one writer: coalesces snapshots, writes off the runtime thread.
    let paths = persist::Paths {
        state: state_path.clone(),
        queue: queue_path,
    };
    let writer = tokio::spawn(persist::writer(paths.clone(), snapshots, durable));
    let agent_task = tokio::spawn(agent.run(commands_rx, events_rx, shutdown.clone()));

    let api = grpc::StratumApi::new(
        commands_tx,
        views,
        tls,
        config.stratum.version_rolling,
        config.stratum.sv2_enabled,
        svcos_common::ipc::channel(&ctx.layout, ServiceName::Gateway),
    );
    let router = svcos_common::ipc::server().add_service(StratumServiceServer::new(api));
    tracing::info!(pools = config.pools.len(), "stratum-agent serving");
    let served = svcos_common::ipc::serve(router, listener, shutdown.clone()).await;
    shutdown.trigger();
    let final_snapshot = agent_task.await.context("agent task")?;
    let mut last_queue = writer.await.unwrap_or_default();
    persist::write(&paths, &final_snapshot, &mut last_queue);
    served?;
    Ok(())
}

/// `svcos stratum-agent`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::StratumAgent, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::StratumAgent, args, Flavor::CurrentThread, run)
}

#[cfg(feature = "test-pool")]
/// `svcos test-pool`: the Stratum V1 test pool (sim and tests).
pub fn test_pool_entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::TestPool, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(
        ServiceName::TestPool,
        args,
        Flavor::CurrentThread,
        run_test_pool,
    )
}

#[cfg(feature = "test-pool")]
/// Run the test pool until `shutdown`: Stratum on the sim's loopback address:[sim].pool_port,
/// control gRPC and
/// health on `listener`.
pub async fn run_test_pool(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let sim = &ctx.config.sim;
    let settings = testpool::PoolSettings {
        difficulty: sim.pool_difficulty,
        block_interval: std::time::Duration::from_secs(sim.pool_block_interval_s.into()),
        ..Default::default()
    };
    // The sim binds every surface to one loopback address (`svcos sim --bind`); the test pool
    // follows it so that several sims, or a sim on 127.0.0.2, can run side by side. It never
    // listens beyond loopback.
    let ip = if ctx.config.api.bind.is_loopback() {
        ctx.config.api.bind
    } else {
        std::net::IpAddr::from([127, 0, 0, 1])
    };
    let addr = std::net::SocketAddr::new(ip, sim.pool_port);
    let tcp = TcpListener::bind(addr)
        .await
        .with_context(|| format!("test pool cannot listen on {addr}"))?;
    tracing::info!(%addr, difficulty = settings.difficulty, "test pool listening");
    let pool = testpool::TestPool::new(settings);
    let sv2 = if sim.pool_sv2_port != 0 {
        let addr = std::net::SocketAddr::new(ip, sim.pool_sv2_port);
        let tcp = TcpListener::bind(addr)
            .await
            .with_context(|| format!("test pool (Stratum V2) cannot listen on {addr}"))?;
        let authority = testpool::sv2::Authority::generate();
        // Where the sim and tests read the key to pin in stratum2+tcp://host:port/<key>.
        let dir = ctx.layout.service_state_dir(ServiceName::TestPool);
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let key_path = dir.join(testpool::sv2::AUTHORITY_FILE);
        svcos_common::fsutil::atomic_write(
            &key_path,
            format!("{}\n", authority.public_b58()).as_bytes(),
            0o644,
        )
        .with_context(|| format!("write {}", key_path.display()))?;
        tracing::info!(%addr, authority = %authority.public_b58(), "test pool Stratum V2 upstream listening");
        Some(tokio::spawn(testpool::sv2::serve(
            pool.clone(),
            tcp,
            authority,
            shutdown.clone(),
        )))
    } else {
        None
    };
    let served = serve_test_pool(pool, tcp, listener, shutdown).await;
    if let Some(task) = sv2 {
        let _ = task.await;
    }
    served
}

#[cfg(feature = "test-pool")]
/// Serve a test pool on a bound TCP listener plus its control socket (tests call this directly).
pub async fn serve_test_pool(
    pool: Arc<testpool::TestPool>,
    tcp: TcpListener,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let stratum = tokio::spawn(testpool::serve(pool.clone(), tcp, shutdown.clone()));
    let router = svcos_common::ipc::server()
        .add_service(TestPoolServiceServer::new(testpool::ControlService(pool)));
    svcos_common::ipc::serve(router, listener, shutdown.clone()).await?;
    shutdown.trigger();
    let _ = stratum.await;
    Ok(())
}
