use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::bounds::{FAN_MANUAL_PERCENT, FAN_PERCENT, TARGET_TEMP_C};

/// `[thermal]`: fan control and temperature limits (chip temperatures, degrees C).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct ThermalConfig {
    /// PID target. Default 75.
    pub target_temp_c: f64,
    /// Above this hashing is cut back. Default 90.
    pub hot_temp_c: f64,
    /// Above this hashing stops at once (hard overheat shutdown). Default 100.
    pub dangerous_temp_c: f64,
    /// Lowest fan duty in auto mode, percent. Default 10.
    pub fan_min_percent: u32,
    /// Highest fan duty in auto mode, percent (Home mode keeps this low). Default 100.
    pub fan_max_percent: u32,
    /// Fixed duty when fan mode is manual, percent; 0 = auto. Default 0.
    pub fan_manual_percent: u32,
}

impl Default for ThermalConfig {
    fn default() -> Self {
        ThermalConfig {
            target_temp_c: 75.0,
            hot_temp_c: 90.0,
            dangerous_temp_c: 100.0,
            fan_min_percent: 10,
            fan_max_percent: 100,
            fan_manual_percent: 0,
        }
    }
}

impl ThermalConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !TARGET_TEMP_C.contains(self.target_temp_c) {
            return Err(ConfigError::invalid(
                "thermal.target_temp_c",
                TARGET_TEMP_C.describe(),
            ));
        }
        if self.hot_temp_c <= self.target_temp_c {
            return Err(ConfigError::invalid(
                "thermal.hot_temp_c",
                "must be above thermal.target_temp_c",
            ));
        }
        if self.dangerous_temp_c <= self.hot_temp_c || self.dangerous_temp_c > 125.0 {
            return Err(ConfigError::invalid(
                "thermal.dangerous_temp_c",
                "must be above thermal.hot_temp_c and at most 125 C",
            ));
        }
        if self.fan_min_percent > self.fan_max_percent
            || !FAN_PERCENT.contains(f64::from(self.fan_max_percent))
        {
            return Err(ConfigError::invalid(
                "thermal.fan_max_percent",
                "fan_min_percent <= fan_max_percent <= 100",
            ));
        }
        if self.fan_manual_percent != 0
            && !FAN_MANUAL_PERCENT.contains(f64::from(self.fan_manual_percent))
        {
            return Err(ConfigError::invalid(
                "thermal.fan_manual_percent",
                format!("0 (automatic) or {}", FAN_MANUAL_PERCENT.describe()),
            ));
        }
        Ok(())
    }
}
