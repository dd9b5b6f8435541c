use serde::{Deserialize, Serialize};

use super::ConfigError;

/// One `[[pools]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// `stratum+tcp://host:port`, `stratum+ssl://host:port` or `stratum2+tcp://host:port/<pubkey>`.
    pub url: String,
    /// Worker name.
    pub user: String,
    /// Worker password (never logged). Default "x".
    pub password: String,
    /// Lower is preferred; ties keep list order. Default 0.
    pub priority: u32,
    /// Share of time in quota (split) mode; 0 = failover only. Default 0.
    pub quota: u32,
    /// Default true.
    pub enabled: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            url: String::new(),
            user: String::new(),
            password: "x".into(),
            priority: 0,
            quota: 0,
            enabled: true,
        }
    }
}

impl PoolConfig {
    /// Validate with `prefix` (e.g. `pools[0]`) naming the entry in errors.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let rest = ["stratum+tcp://", "stratum+ssl://", "stratum2+tcp://"]
            .iter()
            .find_map(|s| self.url.strip_prefix(s));
        let Some(rest) = rest else {
            return Err(ConfigError::invalid(
                format!("{prefix}.url"),
                "must start with stratum+tcp://, stratum+ssl:// or stratum2+tcp://",
            ));
        };
        let authority = rest.split('/').next().unwrap_or("");
        let port_ok = authority.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(ConfigError::invalid(
                format!("{prefix}.url"),
                "needs host:port, e.g. stratum+tcp://pool.example:3333",
            ));
        }
        if self.user.is_empty()
            || self.user.len() > 256
            || self.user.chars().any(char::is_whitespace)
        {
            return Err(ConfigError::invalid(
                format!("{prefix}.user"),
                "1-256 characters without spaces",
            ));
        }
        if self.password.len() > 256 {
            return Err(ConfigError::invalid(
                format!("{prefix}.password"),
                "at most 256 characters",
            ));
        }
        if self.quota > 100 {
            return Err(ConfigError::invalid(format!("{prefix}.quota"), "0-100"));
        }
        Ok(())
    }
}

/// `[stratum]`: pool-client behaviour. Times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct StratumConfig {
    /// Give up a connection attempt after this long. Default 5.
    pub connect_timeout_s: u32,
    /// A connected pool that sent no notify for this long counts as dead. Default 120.
    pub silent_timeout_s: u32,
    /// A higher-priority pool must be healthy this long before failback; also the minimum time
    /// between two switches. Default 300.
    pub failback_hysteresis_s: u32,
    /// Sent as mining.suggest_difficulty when > 0. Default 0.
    pub suggest_difficulty: f64,
    /// Ask the pool for version rolling (BIP 310). Default true.
    pub version_rolling: bool,
    /// Readiness gate for the native Stratum V2 stack. Default false.
    pub sv2_enabled: bool,
    /// Extra CA certificates (PEM file) trusted for `stratum+ssl://` pools besides the webpki
    /// roots; empty = none. Default empty.
    pub tls_ca_file: String,
}

impl Default for StratumConfig {
    fn default() -> Self {
        StratumConfig {
            connect_timeout_s: 5,
            silent_timeout_s: 120,
            failback_hysteresis_s: 300,
            suggest_difficulty: 0.0,
            version_rolling: true,
            sv2_enabled: false,
            tls_ca_file: String::new(),
        }
    }
}

impl StratumConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=120).contains(&self.connect_timeout_s) {
            return Err(ConfigError::invalid("stratum.connect_timeout_s", "1-120 s"));
        }
        if !(1..=3600).contains(&self.silent_timeout_s) {
            return Err(ConfigError::invalid("stratum.silent_timeout_s", "1-3600 s"));
        }
        if self.failback_hysteresis_s > 86_400 {
            return Err(ConfigError::invalid(
                "stratum.failback_hysteresis_s",
                "0-86400 s",
            ));
        }
        if self.suggest_difficulty < 0.0 {
            return Err(ConfigError::invalid(
                "stratum.suggest_difficulty",
                "must be >= 0",
            ));
        }
        Ok(())
    }
}
