use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Highest power any cap may name, watts (no single-PSU miner draws more).
pub const MAX_WATT: f64 = 10_000.0;

/// The conservative cap a miner runs at while `[power].setup_hold` is set (the setup wizard's
/// safety and circuit steps not yet finished), watts. Low enough for any household circuit
/// (a 120 V 15 A breaker carries 1 440 W continuous), high enough that the chips keep hashing
/// so a new owner sees the miner work.
pub const SETUP_HOLD_WATT: f64 = 600.0;

/// `[power]`: operator-declared electrical limits and the correction of the PSU power reading.
/// The gateway's power governor turns these into hw-agent's power target (see docs/DESIGN.md, "Power governor").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct PowerConfig {
    /// Circuit voltage entered in the setup wizard, volts; 0 = not entered. Default 0.
    pub circuit_voltage_v: f64,
    /// Breaker rating entered in the setup wizard, amps; 0 = not entered. Default 0.
    pub circuit_breaker_a: f64,
    /// Continuous-load cap of the circuit, watts (80 % of volts x amps); 0 = none. Default 0.
    pub circuit_limit_watt: f64,
    /// Reported power = raw x factor + offset. 0.5-1.5. Default 1.0.
    pub calibration_factor: f64,
    /// Added to the raw PSU reading after the factor, watts; -500..500. Default 0.
    pub calibration_offset_watt: f64,
    /// Operator-declared PSU, used as the PSU limit when enabled.
    pub psu_override: PsuOverrideConfig,
    /// Hold the miner at the setup cap ([`SETUP_HOLD_WATT`]) until the setup wizard is finished.
    /// A fresh install's config says true; finishing the wizard writes false. Default false:
    /// a config without the key has been in service already (an update, a restore).
    // The field's own default (false) rather than the struct's: a file written before the key
    // existed belongs to a miner in service, which must not be held after an update.
    #[serde(default)]
    pub setup_hold: bool,
}

impl Default for PowerConfig {
    fn default() -> Self {
        PowerConfig {
            circuit_voltage_v: 0.0,
            circuit_breaker_a: 0.0,
            circuit_limit_watt: 0.0,
            calibration_factor: 1.0,
            calibration_offset_watt: 0.0,
            psu_override: PsuOverrideConfig::default(),
            setup_hold: false,
        }
    }
}

/// `[power.psu_override]`: the PSU model and limits as the operator declares them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct PsuOverrideConfig {
    /// Use the declared limits. Default false.
    pub enabled: bool,
    /// Model name, free text up to 64 characters. Default empty.
    pub model: String,
    /// Continuous output rating, watts; 100-5000 when enabled. Default 0.
    pub max_watt: f64,
    /// Lowest output voltage the PSU can set, volts; 0 = not declared. Default 0.
    pub voltage_min_v: f64,
    /// Highest output voltage the PSU can set, volts; 0 = not declared. Default 0.
    pub voltage_max_v: f64,
}

impl PowerConfig {
    /// Power as reported after calibration (never negative).
    pub fn calibrated_watt(&self, raw_watt: f64) -> f64 {
        if raw_watt <= 0.0 {
            return raw_watt.max(0.0);
        }
        (raw_watt * self.calibration_factor + self.calibration_offset_watt).max(0.0)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=480.0).contains(&self.circuit_voltage_v) {
            return Err(ConfigError::invalid("power.circuit_voltage_v", "0-480 V"));
        }
        if !(0.0..=100.0).contains(&self.circuit_breaker_a) {
            return Err(ConfigError::invalid("power.circuit_breaker_a", "0-100 A"));
        }
        if !(0.0..=MAX_WATT).contains(&self.circuit_limit_watt) {
            return Err(ConfigError::invalid(
                "power.circuit_limit_watt",
                format!("0 (none) to {MAX_WATT} W"),
            ));
        }
        if !(0.5..=1.5).contains(&self.calibration_factor) {
            return Err(ConfigError::invalid("power.calibration_factor", "0.5-1.5"));
        }
        if !(-500.0..=500.0).contains(&self.calibration_offset_watt) {
            return Err(ConfigError::invalid(
                "power.calibration_offset_watt",
                "-500 to 500 W",
            ));
        }
        let p = &self.psu_override;
        if p.model.chars().count() > 64 || p.model.chars().any(char::is_control) {
            return Err(ConfigError::invalid(
                "power.psu_override.model",
                "up to 64 printable characters",
            ));
        }
        if p.enabled && !(100.0..=5000.0).contains(&p.max_watt) {
            return Err(ConfigError::invalid(
                "power.psu_override.max_watt",
                "100-5000 W when the override is enabled",
            ));
        }
        for (field, v) in [
            ("power.psu_override.voltage_min_v", p.voltage_min_v),
            ("power.psu_override.voltage_max_v", p.voltage_max_v),
        ] {
            if v != 0.0 && !(8.0..=24.0).contains(&v) {
                return Err(ConfigError::invalid(field, "0 (not declared) or 8-24 V"));
            }
        }
        if p.voltage_min_v > 0.0 && p.voltage_max_v > 0.0 && p.voltage_min_v > p.voltage_max_v {
            return Err(ConfigError::invalid(
                "power.psu_override.voltage_min_v",
                "must not exceed voltage_max_v",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_without_the_hold_key_is_not_held() {
        // A file from before the key (an update, a restore) is a miner in service.
        let p: PowerConfig = toml::from_str("circuit_limit_watt = 0.0").unwrap();
        assert!(!p.setup_hold);
        let p: PowerConfig = toml::from_str("setup_hold = true").unwrap();
        assert!(p.setup_hold);
        assert!(!PowerConfig::default().setup_hold);
    }
}
