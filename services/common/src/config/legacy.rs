use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[legacy]`: the cgminer-compatible API on TCP 4028.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LegacyConfig {
    /// Serve the legacy API at all. Default true.
    pub enabled: bool,
    /// Bind address. Default 0.0.0.0; `svcos sim` uses 127.0.0.1.
    pub bind: IpAddr,
    /// Port. Default 4028.
    pub port: u16,
    /// cgminer `api-allow` entries granting privileged commands, e.g. "W:192.168.1.0/24".
    /// Default empty: nobody may change anything over 4028.
    pub allow: Vec<String>,
    /// Concurrent connections served; more wait. Default 64.
    pub max_clients: usize,
}

impl Default for LegacyConfig {
    fn default() -> Self {
        LegacyConfig {
            enabled: true,
            bind: IpAddr::from([0, 0, 0, 0]),
            port: 4028,
            allow: Vec::new(),
            max_clients: 64,
        }
    }
}

impl LegacyConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.port == 0 {
            return Err(ConfigError::invalid("legacy.port", "must be 1-65535"));
        }
        if self.max_clients == 0 || self.max_clients > 4096 {
            return Err(ConfigError::invalid("legacy.max_clients", "must be 1-4096"));
        }
        for (i, entry) in self.allow.iter().enumerate() {
            let spec = entry.strip_prefix("W:").unwrap_or(entry);
            let (addr, prefix) = spec.split_once('/').unwrap_or((spec, ""));
            let addr_ok = addr.parse::<IpAddr>().is_ok();
            let prefix_ok = prefix.is_empty() || prefix.parse::<u8>().is_ok_and(|p| p <= 128);
            if !addr_ok || !prefix_ok {
                return Err(ConfigError::invalid(
                    format!("legacy.allow[{i}]"),
                    "expected [W:]ADDRESS[/PREFIX], e.g. \"W:192.168.1.0/24\"",
                ));
            }
        }
        Ok(())
    }
}
