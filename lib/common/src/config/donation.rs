use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[donation]`: optional contribution of Stratum V1 mining time. Off by default; saved changes
/// take effect after a restart of stratum-agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct DonationConfig {
    /// Default false.
    pub enabled: bool,
    /// 0-5 percent of mining time. Default 0.
    pub percent: f64,
    /// Scheduling cycle in seconds. Default 3600.
    pub cycle_s: u32,
    /// Disclosed destination pool; empty until an operator configures one. Default empty.
    pub pool_url: String,
    /// Disclosed payout address (used as the worker name).
    pub payout_address: String,
    /// Disclosed explorer link for the payout address.
    pub explorer_url: String,
}

impl Default for DonationConfig {
    fn default() -> Self {
        DonationConfig {
            enabled: false,
            percent: 0.0,
            cycle_s: 3600,
            pool_url: String::new(),
            payout_address: String::new(),
            explorer_url: String::new(),
        }
    }
}

impl DonationConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=5.0).contains(&self.percent) {
            return Err(ConfigError::invalid("donation.percent", "0-5 percent"));
        }
        if !(60..=86_400).contains(&self.cycle_s) {
            return Err(ConfigError::invalid("donation.cycle_s", "60-86400 s"));
        }
        if self.enabled && self.percent > 0.0 {
            super::PoolConfig {
                url: self.pool_url.clone(),
                user: self.payout_address.clone(),
                ..Default::default()
            }
            .validate("donation")
            .map_err(|e| match e {
                ConfigError::Invalid { field, message } => ConfigError::Invalid {
                    field: field
                        .replace("donation.url", "donation.pool_url")
                        .replace("donation.user", "donation.payout_address"),
                    message,
                },
                other => other,
            })?;
        }
        Ok(())
    }
}
