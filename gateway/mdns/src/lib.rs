//! The mDNS/DNS-SD responder (RFC 6762/6763), run inside the gateway process.
//!
//! Design:
//! - **What is announced comes from the config alone** ([`Announcement::from_config`], no I/O):
//!   the host name `<system.hostname>.local.` (A/AAAA: the address `[api].bind` names, or, when
//!   it binds every address, the addresses of the interfaces answered on); `_http._tcp` on
//!   `[api].http_port` (the dashboard, with the REST API under `/api` behind it); and, while
//!   `[legacy].enabled`, `_cgminer._tcp` on `[legacy].port`. The instance name of both is the
//!   hostname. TXT records carry what a fleet tool needs to pick the unit out without a request:
//!   `model`, `firmware`, `version` (and `path`/`api` for HTTP).
//! - **Built on `mdns-sd`**: its daemon runs on a thread of its own with a `mio` poll loop (no
//!   second async runtime), probes the names before announcing them (RFC 6762 §8), answers
//!   queries, re-announces when interface addresses change, and sends goodbye packets (TTL 0,
//!   repeated once) when a service is unregistered. This crate only decides *what* and *when*.
//! - **Live reconfiguration** ([`Responder::apply`]): every saved config is offered; a change of
//!   anything announced withdraws the old records (goodbye packets), stops the daemon and starts
//!   one with the new records; `enabled = false` withdraws and leaves the multicast group.
//! - **Shutdown says goodbye**: [`Responder::run`] withdraws everything before it returns, so a
//!   stopped gateway disappears from browsers at once instead of after the records' TTL. A
//!   killed gateway cannot; its records age out (120 s for the host, 75 min for services).
//! - The daemon's errors and name conflicts are logged once per new message and shown in
//!   `GET /api/network/info` ([`Responder::status`]).
//! - **Swarm discovery**: while `[swarm].enabled`, the unit also announces `_svcos-swarm._udp`
//!   on `[swarm].port` and browses for it; the other units found are offered to the gateway
//!   ([`Responder::swarm_peers`]), which hands them to the tuner's swarm to beat to. Only the
//!   address and port come from here: a found unit is admitted by its signed beats alone.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mdns_sd::{DaemonEvent, IfKind, ServiceDaemon, ServiceEvent, ServiceInfo, TxtProperty};
use svcos_api_types::discovery::{MdnsService, MdnsStatus};
use svcos_common::Shutdown;
use svcos_common::config::Config;
use tokio::sync::watch;

/// DNS-SD service type of the dashboard and REST API (RFC 6763 §7, IANA "http").
pub const HTTP_SERVICE: &str = "_http._tcp.local.";
/// DNS-SD service type of the cgminer-compatible API. Not IANA-registered; the name fleet tools
/// that browse for cgminer-style miners look for (docs/API-SHAPES.md "mDNS/DNS-SD").
pub const CGMINER_SERVICE: &str = "_cgminer._tcp.local.";
/// DNS-SD service type of the home swarm's signed beats (UDP, `[swarm].port`). Not
/// IANA-registered: only svcOS units browse for it.
pub const SWARM_SERVICE: &str = "_svcos-swarm._udp.local.";
/// The firmware name in TXT records (as `GET /api/version` says it).
pub const FIRMWARE: &str = "svcOS";
/// How long one answer of the daemon (unregister, shutdown) is awaited.
const DAEMON_ANSWER: Duration = Duration::from_secs(2);
/// The daemon repeats a goodbye 120 ms after the first; it must still run then.
const GOODBYE_REPEAT: Duration = Duration::from_millis(250);

/// One DNS-SD service instance to announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRecord {
    /// Service type with the domain, e.g. [`HTTP_SERVICE`].
    pub service_type: &'static str,
    /// TCP port of the SRV record.
    pub port: u16,
    /// TXT record entries, in the order sent (`txtvers` first, RFC 6763 §6.7).
    pub txt: Vec<(&'static str, String)>,
}

/// Everything the responder announces, derived from one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// `[system].hostname`, the host label and the instance name.
    pub hostname: String,
    /// `[network.mdns].interfaces`; empty = every interface with an address.
    pub interfaces: Vec<String>,
    /// The one address to announce, or `None` for the interfaces' own addresses.
    pub address: Option<IpAddr>,
    /// The service instances.
    pub services: Vec<ServiceRecord>,
}

impl Announcement {
    /// What `config` announces; `None` when `[network.mdns].enabled` is false.
    pub fn from_config(config: &Config) -> Option<Announcement> {
        if !config.network.mdns.enabled {
            return None;
        }
        let model = config.hardware.board.preset().4;
        let common = |mut txt: Vec<(&'static str, String)>| {
            txt.splice(
                0..0,
                [
                    ("txtvers", "1".to_string()),
                    ("model", model.to_string()),
                    ("firmware", FIRMWARE.to_string()),
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                ],
            );
            txt
        };
        let mut services = vec![ServiceRecord {
            service_type: HTTP_SERVICE,
            port: config.api.http_port,
            txt: common(vec![("path", "/".to_string()), ("api", "/api".to_string())]),
        }];
        if config.legacy.enabled {
            services.push(ServiceRecord {
                service_type: CGMINER_SERVICE,
                port: config.legacy.port,
                txt: common(Vec::new()),
            });
        }
        if config.swarm.enabled {
            services.push(ServiceRecord {
                service_type: SWARM_SERVICE,
                port: config.swarm.port,
                txt: common(Vec::new()),
            });
        }
        // A gateway bound to one address is reachable there only; announcing the interface's
        // other addresses would send browsers where nothing answers.
        let address = Some(config.api.bind).filter(|a| !a.is_unspecified());
        Some(Announcement {
            hostname: config.system.hostname.clone(),
            interfaces: config.network.mdns.interfaces.clone(),
            address,
            services,
        })
    }

    /// The host name answered for, `<hostname>.local.`.
    pub fn host_name(&self) -> String {
        format!("{}.local.", self.hostname)
    }

    /// The full instance name of `service`, `<hostname>.<type>`.
    pub fn instance(&self, service: &ServiceRecord) -> String {
        format!("{}.{}", self.hostname, service.service_type)
    }

    /// `service` as the daemon takes it.
    fn service_info(&self, service: &ServiceRecord) -> Result<ServiceInfo, mdns_sd::Error> {
        let txt: Vec<TxtProperty> = service
            .txt
            .iter()
            .map(|(k, v)| TxtProperty::from((*k, v.as_str())))
            .collect();
        let host = self.host_name();
        let info = match self.address {
            Some(addr) => ServiceInfo::new(
                service.service_type,
                &self.hostname,
                &host,
                addr,
                service.port,
                txt,
            )?,
            None => ServiceInfo::new(
                service.service_type,
                &self.hostname,
                &host,
                (),
                service.port,
                txt,
            )?
            .enable_addr_auto(),
        };
        Ok(info)
    }

    /// The status `GET /api/network/info` shows while these records are registered.
    fn running_status(&self) -> MdnsStatus {
        MdnsStatus {
            enabled: true,
            running: true,
            host: Some(self.host_name()),
            interfaces: self.interfaces.clone(),
            services: self
                .services
                .iter()
                .map(|s| MdnsService {
                    service_type: s.service_type.to_string(),
                    instance: self.instance(s),
                    port: s.port,
                    txt: s.txt.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                })
                .collect(),
            error: None,
        }
    }
}

/// The gateway's handle: offer configs, read the status, run the responder.
#[derive(Debug)]
pub struct Responder {
    desired: watch::Sender<Option<Arc<Announcement>>>,
    status: Arc<Mutex<MdnsStatus>>,
    swarm_peers: watch::Sender<Vec<SocketAddr>>,
}

impl Responder {
    /// A responder for `config`; nothing is sent before [`Responder::run`] runs.
    pub fn new(config: &Config) -> Self {
        let (desired, _) = watch::channel(Announcement::from_config(config).map(Arc::new));
        Responder {
            desired,
            status: Arc::new(Mutex::new(MdnsStatus {
                enabled: config.network.mdns.enabled,
                interfaces: config.network.mdns.interfaces.clone(),
                ..MdnsStatus::default()
            })),
            swarm_peers: watch::channel(Vec::new()).0,
        }
    }

    /// Take a newly saved config; the responder re-announces only when its records changed.
    pub fn apply(&self, config: &Config) {
        let new = Announcement::from_config(config).map(Arc::new);
        self.desired.send_if_modified(|cur| {
            if *cur == new {
                false
            } else {
                *cur = new;
                true
            }
        });
    }

    /// The other swarm units found by browsing (`address:port` of their beats); empty while
    /// the responder or the swarm is off.
    pub fn swarm_peers(&self) -> watch::Receiver<Vec<SocketAddr>> {
        self.swarm_peers.subscribe()
    }

    /// What is announced now.
    pub fn status(&self) -> MdnsStatus {
        self.status.lock().expect("mdns status lock").clone()
    }

    /// Announce what the config says, follow [`Responder::apply`], and withdraw everything
    /// (goodbye packets) when `shutdown` fires; returns after the goodbye.
    pub async fn run(&self, shutdown: Shutdown) {
        let mut desired = self.desired.subscribe();
        let mut live: Option<Live> = None;
        loop {
            let want = desired.borrow_and_update().clone();
            if live.as_ref().map(|l| &l.announcement) != want.as_ref() {
                if let Some(old) = live.take() {
                    old.withdraw().await;
                }
                live = match want {
                    Some(a) => Live::start(a, self.status.clone(), &self.swarm_peers),
                    None => {
                        *self.status.lock().expect("mdns status lock") = MdnsStatus::default();
                        None
                    }
                };
            }
            tokio::select! {
                _ = shutdown.wait() => break,
                changed = desired.changed() => if changed.is_err() { break },
            }
        }
        if let Some(old) = live.take() {
            old.withdraw().await;
        }
    }
}

/// A running daemon with its records registered.
struct Live {
    daemon: ServiceDaemon,
    announcement: Arc<Announcement>,
}

impl Live {
    /// Start a daemon and register `announcement`; on failure the status says why.
    fn start(
        announcement: Arc<Announcement>,
        status: Arc<Mutex<MdnsStatus>>,
        swarm_peers: &watch::Sender<Vec<SocketAddr>>,
    ) -> Option<Live> {
        let failed = |what: &str, e: mdns_sd::Error| {
            tracing::warn!(error = %e, "mDNS responder: {what}");
            *status.lock().expect("mdns status lock") = MdnsStatus {
                enabled: true,
                interfaces: announcement.interfaces.clone(),
                error: Some(format!("{what}: {e}")),
                ..MdnsStatus::default()
            };
        };
        let daemon = match ServiceDaemon::new() {
            Ok(d) => d,
            Err(e) => {
                failed("cannot start", e);
                return None;
            }
        };
        // Commands run in order on the daemon's thread, so the interface choice is in force
        // before the first record is announced.
        if !announcement.interfaces.is_empty() {
            let chosen: Vec<IfKind> = announcement
                .interfaces
                .iter()
                .map(|n| IfKind::Name(n.clone()))
                .collect();
            if let Err(e) = daemon
                .disable_interface(IfKind::All)
                .and_then(|()| daemon.enable_interface(chosen))
            {
                failed("cannot choose the interfaces", e);
                let _ = daemon.shutdown();
                return None;
            }
        }
        match daemon.monitor() {
            Ok(events) => {
                tokio::spawn(watch_events(events, status.clone()));
            }
            Err(e) => tracing::warn!(error = %e, "mDNS responder: no event monitor"),
        }
        for service in &announcement.services {
            let registered = announcement
                .service_info(service)
                .and_then(|info| daemon.register(info));
            if let Err(e) = registered {
                failed("cannot register the records", e);
                let _ = daemon.shutdown();
                return None;
            }
        }
        if let Some(own) = announcement
            .services
            .iter()
            .find(|s| s.service_type == SWARM_SERVICE)
        {
            match daemon.browse(SWARM_SERVICE) {
                Ok(events) => {
                    let own = announcement.instance(own);
                    tokio::spawn(follow_swarm(events, own, swarm_peers.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "mDNS responder: cannot browse the swarm"),
            }
        }
        tracing::info!(
            host = %announcement.host_name(),
            services = announcement.services.len(),
            "mDNS responder announcing"
        );
        *status.lock().expect("mdns status lock") = announcement.running_status();
        Some(Live {
            daemon,
            announcement,
        })
    }

    /// Unregister every service (goodbye packets), let the repeat go out, stop the daemon.
    async fn withdraw(self) {
        for service in &self.announcement.services {
            let name = self.announcement.instance(service);
            match self.daemon.unregister(&name) {
                Ok(answer) => {
                    let _ = tokio::time::timeout(DAEMON_ANSWER, answer.recv_async()).await;
                }
                Err(e) => tracing::warn!(error = %e, %name, "mDNS responder: cannot unregister"),
            }
        }
        tokio::time::sleep(GOODBYE_REPEAT).await;
        if let Ok(answer) = self.daemon.shutdown() {
            let _ = tokio::time::timeout(DAEMON_ANSWER, answer.recv_async()).await;
        }
        tracing::info!(host = %self.announcement.host_name(), "mDNS responder withdrew its records");
    }
}

/// Keep `peers` at the swarm units the browse has resolved, ours excepted, until the daemon
/// stops (then none).
async fn follow_swarm(
    events: mdns_sd::Receiver<ServiceEvent>,
    own: String,
    peers: watch::Sender<Vec<SocketAddr>>,
) {
    let mut found: BTreeMap<String, Vec<SocketAddr>> = BTreeMap::new();
    while let Ok(event) = events.recv_async().await {
        match event {
            ServiceEvent::ServiceResolved(s) if s.fullname != own => {
                let addresses = s
                    .addresses
                    .iter()
                    .map(|ip| SocketAddr::new(ip.to_ip_addr(), s.port))
                    .collect();
                found.insert(s.fullname.clone(), addresses);
            }
            ServiceEvent::ServiceRemoved(_, name) => {
                found.remove(&name);
            }
            _ => continue,
        }
        let now: Vec<SocketAddr> = found.values().flatten().copied().collect();
        tracing::debug!(units = found.len(), "mDNS: swarm units found");
        peers.send_replace(now);
    }
    peers.send_replace(Vec::new());
}

/// Log the daemon's errors and name conflicts (each new message once) and show the last one.
async fn watch_events(events: mdns_sd::Receiver<DaemonEvent>, status: Arc<Mutex<MdnsStatus>>) {
    while let Ok(event) = events.recv_async().await {
        let message = match event {
            DaemonEvent::Error(e) => e.to_string(),
            DaemonEvent::NameChange(change) => format!(
                "name conflict on the LAN: {} is announced as {}",
                change.original, change.new_name
            ),
            _ => continue,
        };
        let mut status = status.lock().expect("mdns status lock");
        if status.error.as_deref() != Some(message.as_str()) {
            tracing::warn!(%message, "mDNS responder");
            status.error = Some(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txt<'a>(s: &'a ServiceRecord, key: &str) -> Option<&'a str> {
        s.txt
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_config_names_every_record() {
        let mut c = Config::default();
        c.system.hostname = "rig-7".into();
        c.api.http_port = 80;
        c.legacy.port = 4028;
        let a = Announcement::from_config(&c).expect("on by default");
        assert_eq!(a.host_name(), "rig-7.local.");
        assert_eq!(
            a.address, None,
            "0.0.0.0 announces the interfaces' addresses"
        );
        let types: Vec<_> = a
            .services
            .iter()
            .map(|s| (s.service_type, s.port))
            .collect();
        assert_eq!(types, [(HTTP_SERVICE, 80), (CGMINER_SERVICE, 4028)]);
        let http = &a.services[0];
        assert_eq!(a.instance(http), "rig-7._http._tcp.local.");
        assert_eq!(http.txt[0], ("txtvers", "1".to_string()));
        assert_eq!(txt(http, "model"), Some("Antminer S9"));
        assert_eq!(txt(http, "firmware"), Some("svcOS"));
        assert_eq!(txt(http, "version"), Some(env!("CARGO_PKG_VERSION")));
        assert_eq!(txt(http, "path"), Some("/"));
        assert_eq!(txt(http, "api"), Some("/api"));
        assert_eq!(txt(&a.services[1], "path"), None);
        // Every TXT entry fits the 255-byte string limit of RFC 6763 §6.1.
        for s in &a.services {
            for (k, v) in &s.txt {
                assert!(k.len() + 1 + v.len() <= 255);
            }
            a.service_info(s).expect("the daemon accepts the record");
        }
    }

    #[test]
    fn the_switches_withdraw_what_they_name() {
        let mut c = Config::default();
        c.legacy.enabled = false;
        let a = Announcement::from_config(&c).unwrap();
        assert_eq!(
            a.services.len(),
            1,
            "no cgminer record without the cgminer API"
        );
        c.network.mdns.enabled = false;
        assert_eq!(Announcement::from_config(&c), None);
    }

    #[test]
    fn the_swarm_is_announced_on_its_port_while_it_is_on() {
        let mut c = Config::default();
        c.system.hostname = "den".into();
        let off = Announcement::from_config(&c).unwrap();
        assert!(off.services.iter().all(|s| s.service_type != SWARM_SERVICE));
        c.swarm.enabled = true;
        c.swarm.port = 4100;
        let on = Announcement::from_config(&c).unwrap();
        let swarm = on
            .services
            .iter()
            .find(|s| s.service_type == SWARM_SERVICE)
            .expect("announced");
        assert_eq!(swarm.port, 4100);
        assert_eq!(on.instance(swarm), "den._svcos-swarm._udp.local.");
        on.service_info(swarm)
            .expect("the daemon accepts the record");
    }

    #[test]
    fn a_bound_address_is_the_one_announced() {
        let mut c = Config::default();
        c.api.bind = "192.0.2.7".parse().unwrap();
        c.network.mdns.interfaces = vec!["eth0".into()];
        let a = Announcement::from_config(&c).unwrap();
        assert_eq!(a.address, Some("192.0.2.7".parse().unwrap()));
        assert_eq!(a.interfaces, ["eth0"]);
        let status = a.running_status();
        assert!(status.running);
        assert_eq!(status.services[0].instance, "svcos._http._tcp.local.");
        assert!(status.services[0].txt.contains(&"api=/api".to_string()));
    }

    #[tokio::test]
    async fn a_disabled_responder_sends_nothing_and_stops_at_shutdown() {
        // No daemon is started when off (so this test opens no socket), and `run` returns at
        // shutdown.
        let mut c = Config::default();
        c.network.mdns.enabled = false;
        let responder = Responder::new(&c);
        let shutdown = Shutdown::new();
        let run = responder.run(shutdown.clone());
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("returns at shutdown");
        let status = responder.status();
        assert!(!status.enabled && !status.running && status.services.is_empty());
    }
}
