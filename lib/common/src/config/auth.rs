use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[auth]`: sessions and password hashing. The spec's limits (30 days, 8 hours, 32 sessions,
/// 3 setups per 60 s) are constants of the auth service, not settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Argon2 hashes allowed to run at once; more logins wait. Default 1: a control board has
    /// two cores, and two concurrent hashes left none for the API (status p99 rose ~50x during a
    /// burst of 20 logins); one hash at a time keeps a core for everything else.
    pub max_concurrent_hashes: u32,
    /// Lifetime of a one-time WebSocket ticket, seconds. Default 30.
    pub ws_ticket_ttl_s: u32,
    /// Minimum password length. Default 8.
    pub min_password_len: u32,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            max_concurrent_hashes: 1,
            ws_ticket_ttl_s: 30,
            min_password_len: 8,
        }
    }
}

impl AuthConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=16).contains(&self.max_concurrent_hashes) {
            return Err(ConfigError::invalid("auth.max_concurrent_hashes", "1-16"));
        }
        if !(5..=600).contains(&self.ws_ticket_ttl_s) {
            return Err(ConfigError::invalid("auth.ws_ticket_ttl_s", "5-600 s"));
        }
        if !(1..=128).contains(&self.min_password_len) {
            return Err(ConfigError::invalid("auth.min_password_len", "1-128"));
        }
        Ok(())
    }
}
