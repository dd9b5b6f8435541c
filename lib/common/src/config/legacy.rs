use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[legacy]`: the cgminer-compatible API on TCP 4028.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// Connections held at once; at the cap a new one is admitted by closing the one that has
    /// waited longest without sending its request. Default 64.
    pub max_clients: usize,
    /// Concurrent connections one client (an IPv4 address, or an IPv6 /64) may hold; more are
    /// closed at once, so a flood from one client never makes others wait. Default 8.
    pub max_clients_per_peer: usize,
}

impl Default for LegacyConfig {
    fn default() -> Self {
        LegacyConfig {
            enabled: true,
            bind: IpAddr::from([0, 0, 0, 0]),
            port: 4028,
            allow: Vec::new(),
            max_clients: 64,
            max_clients_per_peer: 8,
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
        if !(1..=self.max_clients).contains(&self.max_clients_per_peer) {
            return Err(ConfigError::invalid(
                "legacy.max_clients_per_peer",
                "1 to legacy.max_clients",
            ));
        }
        for (i, entry) in self.allow.iter().enumerate() {
            if super::allow::AllowEntry::parse(entry).is_err() {
                return Err(ConfigError::invalid(
                    format!("legacy.allow[{i}]"),
                    "expected [W:]ADDRESS[/PREFIX] with a prefix of at most 32 (IPv4) or 128 \
                     (IPv6), e.g. \"W:192.168.1.0/24\"",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_entries_use_the_service_parser() {
        for (entry, ok) in [
            ("W:127.0.0.5/32", true),
            ("W:127.0.0.5/33", false),
            ("w:10.0.0.0/8", true),
            ("W:fd00::/8", true),
            ("W:fd00::/129", false),
            ("W:", false),
        ] {
            let c = LegacyConfig {
                allow: vec![entry.into()],
                ..Default::default()
            };
            assert_eq!(c.validate().is_ok(), ok, "{entry}");
        }
    }
}
