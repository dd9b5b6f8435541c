use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::power::MAX_WATT;

/// Most static peers `[swarm].peers` may list (a room holds a handful of heaters).
pub const MAX_SWARM_PEERS: usize = 16;
/// Shortest swarm key: a shared secret an HMAC-SHA256 tag rests on.
pub const MIN_SWARM_KEY_CHARS: usize = 16;

/// `[swarm]`: units on one LAN that share one room reading and one circuit budget (the power
/// governor in the tuner process; docs/DESIGN.md "Home swarm"). Off by default.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SwarmConfig {
    /// Take part in a swarm. Default false.
    pub enabled: bool,
    /// Shared secret of every member (HMAC-SHA256 of each datagram), 16-256 characters;
    /// required when enabled. Write-only: masked in every answer, never logged. Default empty.
    pub key: String,
    /// The one circuit budget the members split, W (1 to 30000). Required when enabled.
    /// Default 0.
    pub circuit_budget_watt: f64,
    /// UDP port of the swarm's signed datagrams, on every interface. Default 4029.
    pub port: u16,
    /// Other members' `host:port` (IPv4 address or name), each sent every beat; up to 16.
    /// Default empty: with `[network.mdns].enabled` the members find each other over mDNS.
    pub peers: Vec<String>,
}

impl Default for SwarmConfig {
    fn default() -> Self {
        SwarmConfig {
            enabled: false,
            key: String::new(),
            circuit_budget_watt: 0.0,
            port: 4029,
            peers: Vec::new(),
        }
    }
}

// Hand-written so that a config printed with `{:?}` never shows the key.
impl std::fmt::Debug for SwarmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwarmConfig")
            .field("enabled", &self.enabled)
            .field("key_set", &!self.key.is_empty())
            .field("circuit_budget_watt", &self.circuit_budget_watt)
            .field("port", &self.port)
            .field("peers", &self.peers)
            .finish()
    }
}

impl SwarmConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let key_chars = self.key.chars().count();
        if key_chars > 256 || self.key.chars().any(char::is_control) {
            return Err(ConfigError::invalid(
                "swarm.key",
                "up to 256 printable characters",
            ));
        }
        if self.enabled && key_chars < MIN_SWARM_KEY_CHARS {
            return Err(ConfigError::invalid(
                "swarm.key",
                format!("at least {MIN_SWARM_KEY_CHARS} characters when the swarm is enabled"),
            ));
        }
        if !(0.0..=MAX_WATT).contains(&self.circuit_budget_watt)
            || (self.enabled && self.circuit_budget_watt < 1.0)
        {
            return Err(ConfigError::invalid(
                "swarm.circuit_budget_watt",
                format!("1 to {MAX_WATT} W (0 only while the swarm is off)"),
            ));
        }
        if self.port == 0 {
            return Err(ConfigError::invalid("swarm.port", "1-65535"));
        }
        if self.peers.len() > MAX_SWARM_PEERS {
            return Err(ConfigError::invalid(
                "swarm.peers",
                format!("at most {MAX_SWARM_PEERS} peers"),
            ));
        }
        for (i, p) in self.peers.iter().enumerate() {
            if !is_valid_peer(p) {
                return Err(ConfigError::invalid(
                    format!("swarm.peers[{i}]"),
                    "host:port, e.g. 192.168.1.51:4029",
                ));
            }
        }
        Ok(())
    }
}

/// `host:port` with a host name or IPv4 address and a port 1-65535.
pub fn is_valid_peer(peer: &str) -> bool {
    let Some((host, port)) = peer.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok_and(|p| p > 0) && super::is_valid_host(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_their_field() {
        let good = SwarmConfig {
            enabled: true,
            key: "0123456789abcdef".into(),
            circuit_budget_watt: 2400.0,
            peers: vec!["127.0.0.3:4029".into(), "heater-2.local:4029".into()],
            ..Default::default()
        };
        assert!(good.validate().is_ok());
        assert!(SwarmConfig::default().validate().is_ok());
        let rows: Vec<(SwarmConfig, &str)> = vec![
            (
                SwarmConfig {
                    key: "short".into(),
                    ..good.clone()
                },
                "swarm.key",
            ),
            (
                SwarmConfig {
                    circuit_budget_watt: 0.0,
                    ..good.clone()
                },
                "swarm.circuit_budget_watt",
            ),
            (
                SwarmConfig {
                    port: 0,
                    ..good.clone()
                },
                "swarm.port",
            ),
            (
                SwarmConfig {
                    peers: vec!["127.0.0.3:4029".into(), "nope".into()],
                    ..good.clone()
                },
                "swarm.peers[1]",
            ),
            (
                SwarmConfig {
                    peers: vec!["127.0.0.3:0".into()],
                    ..good.clone()
                },
                "swarm.peers[0]",
            ),
        ];
        for (c, field) in rows {
            assert_eq!(c.validate().unwrap_err().field(), Some(field));
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let c = SwarmConfig {
            key: "very-secret-swarm-key".into(),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(shown.contains("key_set: true"));
    }
}
