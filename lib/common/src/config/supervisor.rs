use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// When a service is restarted after it exits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct RestartPolicyConfig {
    /// Default "always".
    pub strategy: RestartStrategy,
    /// First restart delay; doubles per consecutive failure. Default 20 ms.
    pub backoff_floor_ms: u64,
    /// Largest restart delay. Default 5000 ms.
    pub backoff_cap_ms: u64,
    /// More than this many restarts within `intensity_window_s` → escalate one level (see
    /// [`EscalationConfig`]); a service is never given up on for crashing. Default 10.
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

/// `[supervisor.escalation]`: what follows when a service keeps failing (more than
/// `intensity_max_restarts` restarts within `intensity_window_s`), one level per breach of the
/// intensity limit: restart the service with its dependants (every service after it in boot
/// order), then reboot (through systemd on the image; the whole stack restarted in the sim),
/// guarded against reboot loops, then slow retries forever. A service stays `failed` only for
/// the exit codes that mean a restart cannot help (bad usage or config) or `strategy = "never"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct EscalationConfig {
    /// First level: restart the failing service's dependants with it. Default true.
    pub restart_dependants: bool,
    /// Second level: reboot. Default true.
    pub reboot: bool,
    /// At most this many escalation reboots within `reboot_window_s`; beyond, no reboot and
    /// slow retries instead (reboot-loop guard, persisted across boots). Default 3.
    pub reboot_max: u32,
    /// Default 3600 s.
    pub reboot_window_s: u64,
    /// Delay between restarts once every other level is spent. Default 30000 ms.
    pub slow_retry_ms: u64,
}

impl Default for EscalationConfig {
    fn default() -> Self {
        EscalationConfig {
            restart_dependants: true,
            reboot: true,
            reboot_max: 3,
            reboot_window_s: 3600,
            slow_retry_ms: 30_000,
        }
    }
}

impl EscalationConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.reboot_window_s == 0 {
            return Err(ConfigError::invalid(
                "supervisor.escalation.reboot_window_s",
                "must be > 0",
            ));
        }
        if !(100..=3_600_000).contains(&self.slow_retry_ms) {
            return Err(ConfigError::invalid(
                "supervisor.escalation.slow_retry_ms",
                "must be 100 ms to 1 hour",
            ));
        }
        Ok(())
    }
}

/// Services whose restart delay is capped at [`SupervisorConfig::critical_backoff_cap_ms`] by
/// default: while they are down, nothing is mined.
pub const MINING_CRITICAL: [&str; 2] = ["hw-agent", "stratum-agent"];

/// `[supervisor]`: the default policy plus per-service overrides (`[supervisor.services.auth]`),
/// the mining-critical services and the escalation ladder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Policy for services without an override.
    pub default: RestartPolicyConfig,
    /// Per-service overrides keyed by service name.
    pub services: BTreeMap<String, RestartPolicyConfig>,
    /// Services whose backoff never exceeds `critical_backoff_cap_ms`. Default hw-agent and
    /// stratum-agent.
    pub critical: Vec<String>,
    /// Backoff cap of the critical services, whatever their policy says. Default 1000 ms.
    pub critical_backoff_cap_ms: u64,
    /// What follows repeated failure.
    pub escalation: EscalationConfig,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            default: RestartPolicyConfig::default(),
            services: BTreeMap::new(),
            critical: MINING_CRITICAL.iter().map(|s| s.to_string()).collect(),
            critical_backoff_cap_ms: 1000,
            escalation: EscalationConfig::default(),
        }
    }
}

impl SupervisorConfig {
    /// The policy in force for a service.
    pub fn policy(&self, service: &str) -> &RestartPolicyConfig {
        self.services.get(service).unwrap_or(&self.default)
    }

    /// The policy in force for a service with the critical cap applied.
    pub fn effective_policy(&self, service: &str) -> RestartPolicyConfig {
        let mut p = self.policy(service).clone();
        if self.critical.iter().any(|c| c == service) {
            p.backoff_cap_ms = p.backoff_cap_ms.min(self.critical_backoff_cap_ms);
            p.backoff_floor_ms = p.backoff_floor_ms.min(p.backoff_cap_ms);
        }
        p
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
        for name in &self.critical {
            if name.parse::<crate::ServiceName>().is_err() {
                return Err(ConfigError::invalid(
                    "supervisor.critical",
                    format!("{name:?} is not a svcOS service name"),
                ));
            }
        }
        if self.critical_backoff_cap_ms > 600_000 {
            return Err(ConfigError::invalid(
                "supervisor.critical_backoff_cap_ms",
                "at most 600000 ms",
            ));
        }
        self.escalation.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn critical_services_get_the_short_cap() {
        let c = SupervisorConfig::default();
        assert_eq!(c.effective_policy("hw-agent").backoff_cap_ms, 1000);
        assert_eq!(c.effective_policy("stratum-agent").backoff_cap_ms, 1000);
        assert_eq!(c.effective_policy("gateway").backoff_cap_ms, 5000);
    }

    #[test]
    fn escalation_and_critical_are_validated() {
        for (text, field) in [
            (
                "[supervisor]\ncritical = [\"nope\"]\n",
                "supervisor.critical",
            ),
            (
                "[supervisor.escalation]\nreboot_window_s = 0\n",
                "supervisor.escalation.reboot_window_s",
            ),
            (
                "[supervisor.escalation]\nslow_retry_ms = 5\n",
                "supervisor.escalation.slow_retry_ms",
            ),
        ] {
            let err = Config::from_toml_str(text, Path::new("c.toml")).unwrap_err();
            assert_eq!(err.field(), Some(field), "{err}");
        }
        let ok = Config::from_toml_str(
            "[supervisor.escalation]\nreboot = false\nslow_retry_ms = 2000\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert!(!ok.supervisor.escalation.reboot);
    }
}
