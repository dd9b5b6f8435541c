use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// When a service is restarted after it exits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartStrategy {
    /// Whatever the exit (except the "do not restart" codes).
    #[default]
    Always,
    /// Only after a non-zero exit or a signal.
    OnFailure,
    /// Never.
    Never,
}

/// Restart policy of one service. Times in milliseconds unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestartPolicyConfig {
    /// Default "always".
    pub strategy: RestartStrategy,
    /// First restart delay; doubles per consecutive failure. Default 20 ms.
    pub backoff_floor_ms: u64,
    /// Largest restart delay. Default 5000 ms.
    pub backoff_cap_ms: u64,
    /// More than this many restarts within `intensity_window_s` → give up. Default 10.
    pub intensity_max_restarts: u32,
    /// Default 60 s.
    pub intensity_window_s: u64,
    /// Time between the termination signal and SIGKILL. Default 3000 ms.
    pub grace_ms: u64,
    /// A run longer than this resets the backoff. Default 10000 ms.
    pub stable_after_ms: u64,
}

impl Default for RestartPolicyConfig {
    fn default() -> Self {
        RestartPolicyConfig {
            strategy: RestartStrategy::Always,
            backoff_floor_ms: 20,
            backoff_cap_ms: 5000,
            intensity_max_restarts: 10,
            intensity_window_s: 60,
            grace_ms: 3000,
            stable_after_ms: 10_000,
        }
    }
}

impl RestartPolicyConfig {
    fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        if self.backoff_floor_ms > self.backoff_cap_ms {
            return Err(ConfigError::invalid(
                format!("{prefix}.backoff_floor_ms"),
                "must not exceed backoff_cap_ms",
            ));
        }
        if self.intensity_window_s == 0 {
            return Err(ConfigError::invalid(
                format!("{prefix}.intensity_window_s"),
                "must be > 0",
            ));
        }
        if self.grace_ms > 600_000 {
            return Err(ConfigError::invalid(
                format!("{prefix}.grace_ms"),
                "at most 600000 ms",
            ));
        }
        Ok(())
    }
}

/// `[supervisor]`: the default policy plus per-service overrides (`[supervisor.services.auth]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Policy for services without an override.
    pub default: RestartPolicyConfig,
    /// Per-service overrides keyed by service name.
    pub services: BTreeMap<String, RestartPolicyConfig>,
}

impl SupervisorConfig {
    /// The policy in force for a service.
    pub fn policy(&self, service: &str) -> &RestartPolicyConfig {
        self.services.get(service).unwrap_or(&self.default)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.default.validate("supervisor.default")?;
        for (name, policy) in &self.services {
            if name.parse::<crate::ServiceName>().is_err() {
                return Err(ConfigError::invalid(
                    format!("supervisor.services.{name}"),
                    "not a svcOS service name",
                ));
            }
            policy.validate(&format!("supervisor.services.{name}"))?;
        }
        Ok(())
    }
}
