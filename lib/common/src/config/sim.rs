use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[sim]`: the simulated board and the sim's test pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Seed for the silicon lottery and every other random choice. Default 1.
    pub seed: u64,
    /// CPU the simulated chips may spend on real SHA-256d, percent of one core. Default 3.
    pub cpu_budget_percent: f64,
    /// Room temperature, C. Default 25.
    pub room_temp_c: f64,
    /// Port of the test pool `svcos sim` starts on the loopback address. Default 3333.
    pub pool_port: u16,
    /// Share difficulty the test pool sets. Default 0.00002: the sim hashes real SHA-256d on a few
    /// percent of a core, so shares must be cheap enough to arrive every second or two.
    pub pool_difficulty: f64,
    /// Seconds between clean-jobs block changes on the test pool. Default 60.
    pub pool_block_interval_s: u32,
    /// Port of the test pool's Stratum V2 upstream on the loopback address; 0 (the default)
    /// runs none. Its authority public key is written to `<state>/test-pool/sv2-authority.pub`.
    pub pool_sv2_port: u16,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            cpu_budget_percent: 3.0,
            room_temp_c: 25.0,
            pool_port: 3333,
            pool_difficulty: 0.00002,
            pool_block_interval_s: 60,
            pool_sv2_port: 0,
        }
    }
}

impl SimConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.1..=100.0).contains(&self.cpu_budget_percent) {
            return Err(ConfigError::invalid("sim.cpu_budget_percent", "0.1-100"));
        }
        if !(-20.0..=50.0).contains(&self.room_temp_c) {
            return Err(ConfigError::invalid("sim.room_temp_c", "-20-50 C"));
        }
        if self.pool_difficulty <= 0.0 {
            return Err(ConfigError::invalid("sim.pool_difficulty", "must be > 0"));
        }
        if self.pool_block_interval_s == 0 {
            return Err(ConfigError::invalid(
                "sim.pool_block_interval_s",
                "must be > 0",
            ));
        }
        Ok(())
    }
}
