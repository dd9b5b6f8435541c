use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[api]`: the REST gateway (8080), /ws, /metrics and the port-80 proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Address both HTTP ports bind. Default 0.0.0.0 (LAN); `svcos sim` uses 127.0.0.1.
    pub bind: IpAddr,
    /// REST API port. Default 8080.
    pub port: u16,
    /// Dashboard and /api/* proxy port. Default 80.
    pub http_port: u16,
    /// When true, /ws also accepts a one-time ticket. Default false.
    pub websocket_tickets: bool,
    /// When true, GET /metrics needs a bearer token. Default false.
    pub metrics_require_auth: bool,
    /// Largest request body accepted, in bytes. Default 1 MiB.
    pub max_body_bytes: usize,
    /// Names besides IP literals, `localhost`, `[system].hostname` and `<hostname>.local` that
    /// both HTTP ports answer to (DNS-rebinding defence): exact names (`miner.lan`, a reverse
    /// proxy's name) or `*.suffix` for any name under a suffix (`*.home.arpa`). At most 32.
    /// Default empty.
    pub allowed_hosts: Vec<String>,
    /// Connections the REST port holds at once (file descriptors are finite; the descriptor
    /// limit may lower it). At the cap a new one is admitted by closing an idle or
    /// unauthenticated one; only when all serve authenticated requests is it refused with 503.
    /// Default 512.
    pub max_connections: usize,
    /// Connections one client (an IPv4 address, or an IPv6 /64; behind the port-80 proxy, the
    /// client it forwards for) may hold at once on each HTTP port; more are refused with 503,
    /// so a flood from one client never locks the owner out. Default 32 (a browser opens
    /// about 6).
    pub max_connections_per_peer: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            bind: IpAddr::from([0, 0, 0, 0]),
            port: 8080,
            http_port: 80,
            websocket_tickets: false,
            metrics_require_auth: false,
            max_body_bytes: 1 << 20,
            allowed_hosts: Vec::new(),
            max_connections: 512,
            max_connections_per_peer: 32,
        }
    }
}

impl ApiConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.port == 0 {
            return Err(ConfigError::invalid("api.port", "must be 1-65535"));
        }
        if self.http_port == 0 {
            return Err(ConfigError::invalid("api.http_port", "must be 1-65535"));
        }
        if self.port == self.http_port {
            return Err(ConfigError::invalid(
                "api.http_port",
                "must differ from api.port",
            ));
        }
        if !(1024..=64 << 20).contains(&self.max_body_bytes) {
            return Err(ConfigError::invalid(
                "api.max_body_bytes",
                "must be between 1024 and 67108864",
            ));
        }
        if !(16..=16_384).contains(&self.max_connections) {
            return Err(ConfigError::invalid("api.max_connections", "16-16384"));
        }
        if !(1..=self.max_connections).contains(&self.max_connections_per_peer) {
            return Err(ConfigError::invalid(
                "api.max_connections_per_peer",
                "1 to api.max_connections",
            ));
        }
        if self.allowed_hosts.len() > 32 {
            return Err(ConfigError::invalid(
                "api.allowed_hosts",
                "at most 32 names",
            ));
        }
        for (i, name) in self.allowed_hosts.iter().enumerate() {
            if !crate::hostcheck::is_valid_extra_name(name) {
                return Err(ConfigError::invalid(
                    format!("api.allowed_hosts[{i}]"),
                    "a DNS name (miner.lan) or *. and a DNS name (*.home.arpa)",
                ));
            }
        }
        Ok(())
    }
}
