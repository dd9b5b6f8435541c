use serde::{Deserialize, Serialize};

use super::ConfigError;

/// What the autotuner optimises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TuneModeConfig {
    /// Hold PSU power at `power_target_watt` with the most hashrate.
    #[default]
    Power,
    /// Reach `hashrate_target_ths` with the least power.
    Hashrate,
    /// Least joules per terahash.
    Efficiency,
}

/// `[tuner]`: the autotuner's defaults and hard limits. Runtime choices made through the API
/// (active, mode, target, schedule) live in the tuner's state directory; these are the values
/// it starts from on a fresh unit and the bounds it never leaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct TunerConfig {
    /// Tune at first start. Default false (stock frequency and voltage).
    pub enabled: bool,
    /// Mode at first start. Default "power".
    pub mode: TuneModeConfig,
    /// Default power target, W; 0 = the board's nominal power. Default 0.
    pub power_target_watt: f64,
    /// Default hashrate target, TH/s; 0 = the board's nominal hashrate. Default 0.
    pub hashrate_target_ths: f64,
    /// How often the tuner looks at telemetry, ms. Default 1000.
    pub step_interval_ms: u64,
    /// Wait after a change before measuring, s (power and temperatures move). Default 5.
    pub settle_s: u64,
    /// Measurement window per point, s: about 40 results per chip at the 4 nonces per second
    /// per chip hw-agent's ticket mask gives on an S9 and on the sim. Default 10.
    pub window_s: u64,
    /// A power target is met within this, percent. Default 3.
    pub power_tolerance_percent: f64,
    /// Increment/decrement step of the power target, W. Default 50.
    pub power_step_watt: f64,
    /// Increment/decrement step of the hashrate target, TH/s. Default 0.5.
    pub hashrate_step_ths: f64,
    /// Frequency search step, MHz. Default 12.5.
    pub frequency_step_mhz: f64,
    /// Voltage search step, mV. Default 100.
    pub voltage_step_mv: f64,
    /// Lowest chain frequency, MHz; 0 = half the preset. Default 0.
    pub min_frequency_mhz: f64,
    /// Highest chain frequency, MHz; 0 = 125 % of the preset. Default 0.
    pub max_frequency_mhz: f64,
    /// Lowest voltage, mV; 0 = 85 % of `hardware.voltage_mv`. Default 0.
    pub min_voltage_mv: f64,
    /// Highest voltage, mV; 0 = 105 % of `hardware.voltage_mv`. Default 0.
    pub max_voltage_mv: f64,
    /// Hottest chip the tuner allows, C; 0 = `thermal.hot_temp_c` - 5. Default 0.
    pub max_temp_c: f64,
    /// PSU power the tuner never exceeds, W; 0 = 125 % of the board's nominal power. Default 0.
    pub max_power_watt: f64,
    /// A chain erring on more than this share of its nonces is unstable, percent. Default 2.
    pub max_hw_error_percent: f64,
    /// A chip erring on more than this share is trimmed, percent. Default 10.
    pub max_chip_error_percent: f64,
    /// Dynamic power scaling: on overheat lower the power target by `dps_step_watt` per
    /// window, down to `dps_min_power_watt`. Default true.
    pub dps_enabled: bool,
    /// Dynamic power scaling step, W. Default 100.
    pub dps_step_watt: f64,
    /// Dynamic power scaling floor, W; 0 = 40 % of the nominal power. Default 0.
    pub dps_min_power_watt: f64,
    /// Electricity price for profitability figures, per kWh in `currency`. Default 0.
    pub electricity_price_per_kwh: f64,
    /// Currency of the electricity price. Default "USD".
    pub currency: String,
    /// How often the history's minute points are written to disk in one batch, s (a power cut
    /// loses at most this much; an orderly stop loses nothing). 5-3600. Default 300.
    pub history_flush_s: u64,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            enabled: false,
            mode: TuneModeConfig::Power,
            power_target_watt: 0.0,
            hashrate_target_ths: 0.0,
            step_interval_ms: 1000,
            history_flush_s: 300,
            settle_s: 5,
            window_s: 10,
            power_tolerance_percent: 3.0,
            power_step_watt: 50.0,
            hashrate_step_ths: 0.5,
            frequency_step_mhz: 12.5,
            voltage_step_mv: 100.0,
            min_frequency_mhz: 0.0,
            max_frequency_mhz: 0.0,
            min_voltage_mv: 0.0,
            max_voltage_mv: 0.0,
            max_temp_c: 0.0,
            max_power_watt: 0.0,
            max_hw_error_percent: 2.0,
            max_chip_error_percent: 10.0,
            dps_enabled: true,
            dps_step_watt: 100.0,
            dps_min_power_watt: 0.0,
            electricity_price_per_kwh: 0.0,
            currency: "USD".into(),
        }
    }
}

impl TunerConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let nonneg = [
            ("tuner.power_target_watt", self.power_target_watt),
            ("tuner.hashrate_target_ths", self.hashrate_target_ths),
            ("tuner.min_frequency_mhz", self.min_frequency_mhz),
            ("tuner.max_frequency_mhz", self.max_frequency_mhz),
            ("tuner.min_voltage_mv", self.min_voltage_mv),
            ("tuner.max_voltage_mv", self.max_voltage_mv),
            ("tuner.max_temp_c", self.max_temp_c),
            ("tuner.max_power_watt", self.max_power_watt),
            ("tuner.dps_min_power_watt", self.dps_min_power_watt),
            (
                "tuner.electricity_price_per_kwh",
                self.electricity_price_per_kwh,
            ),
        ];
        for (field, v) in nonneg {
            if !v.is_finite() || v < 0.0 {
                return Err(ConfigError::invalid(field, "must be a number >= 0"));
            }
        }
        let positive = [
            (
                "tuner.power_tolerance_percent",
                self.power_tolerance_percent,
            ),
            ("tuner.power_step_watt", self.power_step_watt),
            ("tuner.hashrate_step_ths", self.hashrate_step_ths),
            ("tuner.frequency_step_mhz", self.frequency_step_mhz),
            ("tuner.voltage_step_mv", self.voltage_step_mv),
            ("tuner.max_hw_error_percent", self.max_hw_error_percent),
            ("tuner.max_chip_error_percent", self.max_chip_error_percent),
            ("tuner.dps_step_watt", self.dps_step_watt),
        ];
        for (field, v) in positive {
            if !v.is_finite() || v <= 0.0 {
                return Err(ConfigError::invalid(field, "must be a number > 0"));
            }
        }
        if !(5..=3600).contains(&self.history_flush_s) {
            return Err(ConfigError::invalid("tuner.history_flush_s", "5-3600 s"));
        }
        if self.step_interval_ms < 10 || self.step_interval_ms > 60_000 {
            return Err(ConfigError::invalid(
                "tuner.step_interval_ms",
                "10-60000 ms",
            ));
        }
        if self.window_s == 0 || self.window_s > 3600 {
            return Err(ConfigError::invalid("tuner.window_s", "1-3600 s"));
        }
        if self.settle_s > 3600 {
            return Err(ConfigError::invalid("tuner.settle_s", "0-3600 s"));
        }
        if self.max_frequency_mhz > 0.0 && self.min_frequency_mhz > self.max_frequency_mhz {
            return Err(ConfigError::invalid(
                "tuner.min_frequency_mhz",
                "must not exceed tuner.max_frequency_mhz",
            ));
        }
        if self.max_voltage_mv > 0.0 && self.min_voltage_mv > self.max_voltage_mv {
            return Err(ConfigError::invalid(
                "tuner.min_voltage_mv",
                "must not exceed tuner.max_voltage_mv",
            ));
        }
        if self.currency.is_empty() || self.currency.len() > 8 {
            return Err(ConfigError::invalid("tuner.currency", "1-8 characters"));
        }
        Ok(())
    }
}
