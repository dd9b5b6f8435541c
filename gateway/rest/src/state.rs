//! The gateway's shared state: live config, peer clients, telemetry snapshots and the session
//! cache. History and the audit log are kept by the tuner process (`HistoryService`).

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use svcos_common::config::Config;
use svcos_common::time::Clock;
use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_proto::auth::v1::auth_service_client::AuthServiceClient;
use svcos_proto::auth::v1::{GetStatusRequest, GetStatusResponse, StreamStatusRequest};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{StreamTelemetryRequest, Telemetry};
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::{GetPoolsResponse, StreamPoolsRequest};
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;
use svcos_proto::tuner::v1::history_service_client::HistoryServiceClient;
use svcos_proto::tuner::v1::power_service_client::PowerServiceClient;
use svcos_proto::tuner::v1::tuner_service_client::TunerServiceClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::authn::SessionCache;

/// Deadline of a pool test (connect, subscribe, authorise, first job).
pub const POOL_TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Deadline of login and setup calls (they wait for an argon2 slot).
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of supervisor calls (a restart answers once the new process serves).
pub const SUPERVISOR_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a write's answer may wait for its audit entry to be queued in the history store.
const AUDIT_TIMEOUT: Duration = Duration::from_millis(500);

/// One write that went through the gateway.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    /// When, Unix ms.
    pub timestamp_ms: i64,
    /// HTTP method.
    pub method: &'static str,
    /// Route path (spec notation).
    pub path: &'static str,
    /// HTTP status answered.
    pub status: u16,
    /// The session that made it (None for open routes).
    pub session_id: Option<String>,
}

/// gRPC clients of the peers (lazy channels: a peer that is down costs nothing until called).
#[derive(Debug, Clone)]
pub struct Peers {
    /// Auth service.
    pub auth: AuthServiceClient<Channel>,
    /// Auth service for password checks: argon2 runs a few at a time, so a burst of logins
    /// legitimately queues for longer than the standard deadline.
    pub auth_hash: AuthServiceClient<Channel>,
    /// hw-agent.
    pub hw: HwAgentServiceClient<Channel>,
    /// stratum-agent.
    pub stratum: StratumServiceClient<Channel>,
    /// stratum-agent with the long pool-test deadline.
    pub stratum_slow: StratumServiceClient<Channel>,
    /// The supervisor's control socket.
    pub supervisor: SupervisorServiceClient<Channel>,
    /// Tuner.
    pub tuner: TunerServiceClient<Channel>,
    /// The power governor (served by the tuner process).
    pub power: PowerServiceClient<Channel>,
    /// Lasting history and the audit log (served by the tuner process).
    pub history: HistoryServiceClient<Channel>,
}

impl Peers {
    /// Clients for every peer of this instance.
    pub fn new(layout: &Layout) -> Self {
        Peers {
            auth: AuthServiceClient::new(ipc::channel(layout, ServiceName::Auth)),
            auth_hash: AuthServiceClient::new(ipc::channel_with_deadline(
                layout,
                ServiceName::Auth,
                LOGIN_TIMEOUT,
            )),
            hw: HwAgentServiceClient::new(ipc::channel(layout, ServiceName::HwAgent)),
            stratum: StratumServiceClient::new(ipc::channel(layout, ServiceName::StratumAgent)),
            stratum_slow: StratumServiceClient::new(ipc::channel_with_deadline(
                layout,
                ServiceName::StratumAgent,
                POOL_TEST_TIMEOUT + Duration::from_secs(2),
            )),
            // A restart resolves when the new process is serving, which can take seconds.
            supervisor: SupervisorServiceClient::new(ipc::channel_with_deadline(
                layout,
                ServiceName::Supervisor,
                SUPERVISOR_TIMEOUT,
            )),
            tuner: TunerServiceClient::new(ipc::channel(layout, ServiceName::Tuner)),
            power: PowerServiceClient::new(ipc::channel(layout, ServiceName::Tuner)),
            history: HistoryServiceClient::new(ipc::channel(layout, ServiceName::Tuner)),
        }
    }
}

/// Latest telemetry and pool snapshots, fed by server streams (never polled per request).
#[derive(Debug, Clone)]
pub struct Snapshots {
    /// hw-agent telemetry; `None` while hw-agent is unreachable.
    pub telemetry: watch::Receiver<Option<Telemetry>>,
    /// stratum-agent pools; `None` while stratum-agent is unreachable.
    pub pools: watch::Receiver<Option<GetPoolsResponse>>,
    /// auth's status (whether a password is set), so the open `/api/auth/status` and
    /// `/api/setup/status` need no call; `None` while auth is unreachable.
    pub auth: watch::Receiver<Option<GetStatusResponse>>,
}

impl Snapshots {
    /// Start following both streams.
    pub fn follow(peers: &Peers, shutdown: &Shutdown) -> Self {
        let hw = peers.hw.clone();
        let telemetry = ipc::follow("hw-agent", shutdown.clone(), move || {
            let mut hw = hw.clone();
            async move {
                hw.stream_telemetry(StreamTelemetryRequest {
                    include_chips: false,
                })
                .await
                .map(|r| r.into_inner())
            }
        });
        let stratum = peers.stratum.clone();
        let pools = ipc::follow("stratum-agent", shutdown.clone(), move || {
            let mut s = stratum.clone();
            async move {
                s.stream_pools(StreamPoolsRequest {})
                    .await
                    .map(|r| r.into_inner())
            }
        });
        let auth = peers.auth.clone();
        let auth = ipc::follow("auth", shutdown.clone(), move || {
            let mut a = auth.clone();
            async move {
                a.stream_status(StreamStatusRequest {})
                    .await
                    .map(|r| r.into_inner())
            }
        });
        Snapshots {
            telemetry,
            pools,
            auth,
        }
    }
}

/// The rendered `/api/status` body, rebuilt only when a snapshot changed.
#[derive(Debug)]
pub struct StatusCache {
    telemetry: watch::Receiver<Option<Telemetry>>,
    pools: watch::Receiver<Option<GetPoolsResponse>>,
    /// Config generation the body was rendered with.
    config_gen: u64,
    body: Option<Bytes>,
}

/// Everything handlers share.
#[derive(Debug)]
pub struct Inner {
    /// Paths of this instance.
    pub layout: Layout,
    /// The config in force and its generation ([`svcos_common::config::store`]), read together.
    config: RwLock<(Arc<Config>, u64)>,
    /// The same generation, for the status cache's cheap check.
    config_gen: std::sync::atomic::AtomicU64,
    /// Serialises read-modify-write of the config file.
    pub config_write: tokio::sync::Mutex<()>,
    /// Wall clock (injectable for tests).
    pub clock: Arc<dyn Clock>,
    /// When this gateway started, Unix ms.
    pub started_ms: i64,
    /// Peer clients.
    pub peers: Peers,
    /// Telemetry and pool snapshots.
    pub snapshots: Snapshots,
    /// Bearer validation cache.
    pub sessions: Arc<SessionCache>,
    status_cache: Mutex<StatusCache>,
    /// Stops background tasks (and /ws streams) on shutdown.
    pub shutdown: Shutdown,
    /// MQTT and webhook publishers (background tasks; handlers only read their status).
    pub integrations: svcos_integrations::Integrations,
    /// The mDNS/DNS-SD responder (run by [`crate::serve`]; handlers only read its status).
    pub mdns: svcos_mdns::Responder,
    /// Runtime state route groups keep for themselves (the upload in flight, the wizard's
    /// lock, the last fleet scan), keyed by type so this module never names a group.
    group_state: Mutex<std::collections::HashMap<std::any::TypeId, GroupState>>,
    /// Recognises requests forwarded by the port-80 proxy (whose `X-Forwarded-For` is believed).
    pub proxy_key: svcos_common::proxykey::ProxyKeyCheck,
    /// Damaged state files moved aside, and when the state directory was last scanned (ms).
    recovered: Mutex<(i64, Vec<svcos_common::statefile::Recovered>)>,
    /// The route table, handed down by the router on top (so handlers never import it).
    routes: std::sync::OnceLock<&'static crate::routing::RouteTable<AppState>>,
}

/// One route group's own runtime state (see [`Inner::group_state`]).
type GroupState = Arc<dyn std::any::Any + Send + Sync>;

/// Where the gateway records the last config generation it handed out.
pub fn generation_path(layout: &Layout) -> std::path::PathBuf {
    layout
        .service_state_dir(svcos_common::ServiceName::Gateway)
        .join("config-generation")
}

/// `[network.ssh]` as the SSH server reads it and the LAN settings as networkd reads them; a
/// failure leaves the last file in force.
fn write_ssh_options(layout: &Layout, config: &Config) {
    if let Err(e) = svcos_common::sshkeys::apply_config(layout, config) {
        tracing::warn!(error = %e, "cannot write the SSH server's options");
    }
    match svcos_common::networkd::apply_config(layout, config) {
        Ok(true) => tracing::info!("LAN settings written for networkd"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "cannot write the LAN settings for networkd"),
    }
}

/// The state every handler gets.
pub type AppState = Arc<Inner>;

impl Inner {
    /// Build the state and start the snapshot and revocation followers.
    pub fn start(
        layout: Layout,
        config: Config,
        clock: Arc<dyn Clock>,
        shutdown: Shutdown,
    ) -> AppState {
        let peers = Peers::new(&layout);
        let snapshots = Snapshots::follow(&peers, &shutdown);
        let sessions = Arc::new(SessionCache::new(peers.auth.clone(), clock.clone()));
        sessions.spawn_revocation_follower(shutdown.clone());
        let status_cache = StatusCache {
            telemetry: snapshots.telemetry.clone(),
            pools: snapshots.pools.clone(),
            config_gen: 0,
            body: None,
        };
        let integrations = svcos_integrations::Integrations::start(
            &config,
            svcos_integrations::Sources {
                telemetry: snapshots.telemetry.clone(),
                pools: snapshots.pools.clone(),
                supervisor: peers.supervisor.clone(),
                energy_file: Some(
                    layout
                        .service_state_dir(svcos_common::ServiceName::Gateway)
                        .join(svcos_integrations::energy::FILE),
                ),
                mac: svcos_common::net::primary_mac(),
            },
            clock.clone(),
            shutdown.clone(),
        );
        let mdns = svcos_mdns::Responder::new(&config);
        write_ssh_options(&layout, &config);
        tokio::spawn(svcos_common::sshkeys::guard(
            svcos_common::sshkeys::authorized_keys_path(&layout),
            snapshots.auth.clone(),
            shutdown.clone(),
        ));
        let proxy_key =
            svcos_common::proxykey::ProxyKeyCheck::new(&svcos_common::proxykey::key_path(&layout));
        let generation_file = generation_path(&layout);
        let generation = svcos_common::config::store::start_generation(&generation_file);
        if let Err(e) = generation_file
            .parent()
            .map_or(Ok(()), |d| svcos_common::fsutil::ensure_dir(d, 0o700))
            .and_then(|()| {
                svcos_common::config::store::save_generation(&generation_file, generation)
            })
        {
            // Writes still work; only a restart could then hand out a number again.
            tracing::warn!(error = %e, "cannot record the config generation");
        }
        Arc::new(Inner {
            proxy_key,
            recovered: Mutex::new((i64::MIN, Vec::new())),
            layout,
            config: RwLock::new((Arc::new(config), generation)),
            config_gen: std::sync::atomic::AtomicU64::new(generation),
            config_write: tokio::sync::Mutex::new(()),
            started_ms: clock.now_ms(),
            clock,
            peers,
            snapshots,
            sessions,
            status_cache: Mutex::new(status_cache),
            shutdown,
            integrations,
            mdns,
            group_state: Mutex::new(Default::default()),
            routes: std::sync::OnceLock::new(),
        })
    }

    /// The client address the auth service rate-limits on: the TCP peer, or, for a request the
    /// port-80 proxy forwarded (it carries the proxy's key, [`svcos_common::proxykey`]), the last
    /// address in `X-Forwarded-For`. Any other peer, loopback included, cannot choose its address.
    pub fn client_ip(
        &self,
        peer: std::net::SocketAddr,
        headers: &axum::http::HeaderMap,
    ) -> std::net::IpAddr {
        let forwarded = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<std::net::IpAddr>().ok());
        if let Some(ip) = forwarded
            && headers
                .get(svcos_common::proxykey::HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|key| self.proxy_key.verify(key))
        {
            return ip;
        }
        peer.ip()
    }

    /// State files some service found damaged and moved aside (scanned at most every 10 s).
    pub fn recovered_state_files(&self) -> Vec<svcos_common::statefile::Recovered> {
        let now = self.clock.now_ms();
        let mut cache = self.recovered.lock().expect("recovered lock");
        if now.saturating_sub(cache.0) >= 10_000 {
            *cache = (
                now,
                svcos_common::statefile::recovered(&self.layout.state_dir),
            );
        }
        cache.1.clone()
    }

    /// The runtime state of type `T` a route group keeps, made by `init` on first use.
    pub fn group_state<T: std::any::Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut groups = self.group_state.lock().expect("group state lock");
        let entry = groups
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()));
        Arc::clone(entry)
            .downcast::<T>()
            .expect("entries are keyed by their type")
    }

    /// Hand down the route table (the router does it when it is built).
    pub fn set_routes(&self, table: &'static crate::routing::RouteTable<AppState>) {
        // Every router of a process builds from the same table: a second call changes nothing.
        let _ = self.routes.set(table);
    }

    /// The route table (`/api/index`, MCP tools run rows in process).
    pub fn routes(&self) -> &'static crate::routing::RouteTable<AppState> {
        self.routes
            .get()
            .expect("the router hands the route table down before serving")
    }

    /// The current config.
    pub fn config(&self) -> Arc<Config> {
        self.config.read().expect("config lock").0.clone()
    }

    /// The current config and its generation, the base of a compare-and-set write.
    pub fn config_at(&self) -> (Arc<Config>, u64) {
        self.config.read().expect("config lock").clone()
    }

    /// Replace the in-memory config (after it was saved as `generation`).
    pub fn set_config(&self, config: Config, generation: u64) {
        self.integrations.apply(&config);
        self.mdns.apply(&config);
        write_ssh_options(&self.layout, &config);
        *self.config.write().expect("config lock") = (Arc::new(config), generation);
        self.config_gen
            .store(generation, std::sync::atomic::Ordering::Release);
    }

    /// The latest telemetry, if hw-agent is up (power calibrated by hw-agent).
    pub fn telemetry(&self) -> Option<Telemetry> {
        self.snapshots.telemetry.borrow().clone()
    }

    /// The latest pool snapshot, if stratum-agent is up.
    pub fn pools(&self) -> Option<GetPoolsResponse> {
        self.snapshots.pools.borrow().clone()
    }

    /// Whether a password is set: from auth's followed status, or, while that stream is
    /// (re)connecting, one call.
    /// After this gateway changed whether a password is set: wait (bounded) until the followed
    /// auth snapshot says so, so the caller's next read agrees with the write it just made.
    pub async fn await_password_set(&self, expected: bool) {
        let mut rx = self.snapshots.auth.clone();
        let caught_up = rx.wait_for(|s| s.as_ref().is_none_or(|s| s.password_set == expected));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), caught_up).await;
    }

    pub async fn password_set(&self) -> Result<bool, tonic::Status> {
        if let Some(status) = self.snapshots.auth.borrow().as_ref() {
            return Ok(status.password_set);
        }
        let mut auth = self.peers.auth.clone();
        Ok(auth
            .get_status(GetStatusRequest {})
            .await?
            .into_inner()
            .password_set)
    }

    /// The `/api/status` body: cached bytes, re-rendered with `render` only after a snapshot
    /// or config change.
    pub fn status_body<B: serde::Serialize>(
        &self,
        render: impl FnOnce(&Config, Option<&Telemetry>, Option<&GetPoolsResponse>, i64) -> B,
    ) -> Bytes {
        let mut cache = self.status_cache.lock().expect("status cache lock");
        let config_gen = self.config_gen.load(std::sync::atomic::Ordering::Acquire);
        let changed = cache.telemetry.has_changed().unwrap_or(true)
            || cache.pools.has_changed().unwrap_or(true)
            || cache.config_gen != config_gen;
        if let (false, Some(body)) = (changed, &cache.body) {
            return body.clone();
        }
        let telemetry = cache.telemetry.borrow_and_update().clone();
        let pools = cache.pools.borrow_and_update().clone();
        let config = self.config();
        let body = render(
            &config,
            telemetry.as_ref(),
            pools.as_ref(),
            self.clock.now_ms(),
        );
        let body = Bytes::from(serde_json::to_vec(&body).expect("status serialises"));
        cache.body = Some(body.clone());
        cache.config_gen = config_gen;
        body
    }

    /// Queue a write in the lasting audit log (the history store in the tuner process). The
    /// answer waits for it briefly, so a client that reads the log next sees its write; a
    /// store that does not answer in time costs the entry (logged), never the request.
    pub async fn record_audit(&self, entry: AuditEntry) {
        let req = svcos_proto::tuner::v1::RecordAuditRequest {
            entry: Some(svcos_proto::tuner::v1::AuditEntry {
                timestamp_ms: entry.timestamp_ms,
                method: entry.method.into(),
                path: entry.path.into(),
                status: u32::from(entry.status),
                session_id: entry.session_id.unwrap_or_default(),
            }),
        };
        let mut history = self.peers.history.clone();
        match tokio::time::timeout(AUDIT_TIMEOUT, history.record_audit(req)).await {
            Ok(Ok(_)) => {}
            Ok(Err(s)) => {
                tracing::warn!(code = ?s.code(), path = entry.path, "audit entry not stored")
            }
            Err(_) => tracing::warn!(
                path = entry.path,
                "audit entry not stored: history store slow"
            ),
        }
    }
}
