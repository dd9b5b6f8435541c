use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[api]`: the REST gateway (8080), /ws, /metrics and the port-80 proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
        Ok(())
    }
}
