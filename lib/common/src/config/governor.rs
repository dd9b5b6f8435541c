use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::power::MAX_WATT;

/// `[governor]`: the power governor's own controllers (tuner process), each one more limit in
/// its arbitration (the minimum wins, see docs/DESIGN.md "Power governor"): a fan-noise
/// ceiling, a daily energy quota, ambient (room temperature) compensation and a warm-up cap for
/// cold starts. All off by default; the governor re-reads them every tick, no restart needed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct GovernorConfig {
    /// Fan-duty ceiling met by lowering power (`POST /api/autotuner/noise-profile`).
    pub noise: NoiseConfig,
    /// Daily energy budget (`POST /api/autotuner/quota`).
    pub quota: QuotaConfig,
    /// Power target compensated for the room temperature (`POST /api/autotuner/room-temp-factor`).
    pub room_factor: RoomFactorConfig,
    /// Warm-up power after a start in a cold room (`GET /api/thermal/cold_environment`).
    pub cold_environment: ColdEnvironmentConfig,
}

/// `[governor.noise]`: keep the fans at or below a duty by choosing a lower power. A slow
/// controller: fans and chip temperatures need tens of seconds to follow a power change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct NoiseConfig {
    /// Default false.
    pub enabled: bool,
    /// Highest fan duty wanted, percent; 10-100. Default 60.
    pub fan_max_percent: u32,
    /// Power is given back only while the fans run this far below the ceiling, percent
    /// points; 1-50. Default 10.
    pub hysteresis_percent: u32,
    /// Change per controller step, W; 10-1000. Default 50.
    pub step_watt: f64,
    /// Lowest power limit the controller sets, W; 50-10000. Default 300.
    pub min_watt: f64,
    /// Least time between two steps, s; 5-3600. Default 60.
    pub interval_s: u32,
}

impl Default for NoiseConfig {
    fn default() -> Self {
        NoiseConfig {
            enabled: false,
            fan_max_percent: 60,
            hysteresis_percent: 10,
            step_watt: 50.0,
            min_watt: 300.0,
            interval_s: 60,
        }
    }
}

/// `[governor.quota]`: at most `daily_kwh` per local day (`[system].timezone`, reset at
/// midnight). The remaining energy is spread over the rest of the day as a power limit, so the
/// budget lasts until midnight instead of running out at noon; spent, the miner sleeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// Default false.
    pub enabled: bool,
    /// Energy per local day, kWh; 0.1-240. Default 24.
    pub daily_kwh: f64,
    /// The spread limit never goes below this (the board hashes poorly lower), W; 50-10000.
    /// Default 300.
    pub min_watt: f64,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            enabled: false,
            daily_kwh: 24.0,
            min_watt: 300.0,
        }
    }
}

/// `[governor.room_factor]`: limit = base − `watt_per_c` × (room − `reference_room_c`), within
/// `min_watt`..base + `max_raise_watt`, from the thermostat's room reading (`POST
/// /api/home/room-temp`) while it is fresh (`[home].reading_max_age_s`). Being one more limit it
/// only lowers the target below the others; above the reference it takes power off, below it
/// gives back up to the base (and up to the other limits, never past them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct RoomFactorConfig {
    /// Default false.
    pub enabled: bool,
    /// Room temperature at which the limit is the base, C; 0-40. Default 20.
    pub reference_room_c: f64,
    /// Watts per degree C of difference; 0-500. Default 25.
    pub watt_per_c: f64,
    /// The limit at the reference, W; 0 = the operator's `[hardware].power_target_watt` (with
    /// neither set, the room factor has nothing to compensate and stays off). Default 0.
    pub base_watt: f64,
    /// How far a cold room lifts the limit above the base, W; 0-5000. Default 0 (a cold room
    /// gives nothing above the base).
    pub max_raise_watt: f64,
    /// Lowest limit, W; 50-10000. Default 300.
    pub min_watt: f64,
}

impl Default for RoomFactorConfig {
    fn default() -> Self {
        RoomFactorConfig {
            enabled: false,
            reference_room_c: 20.0,
            watt_per_c: 25.0,
            base_watt: 0.0,
            max_raise_watt: 0.0,
            min_watt: 300.0,
        }
    }
}

/// `[governor.cold_environment]`: after a start (the governor's own start, or the miner
/// coming back from sleep or bring-up) cap the power at `warmup_watt` until the hottest chip
/// reaches `warmup_temp_c` (or `warmup_max_s` passed), so cold chips are not driven at full
/// frequency. The minimum fan duty of a cold room is hw-agent's `[thermal].fan_min_percent`
/// (its auto fan loop's floor), reported beside these, not a second rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct ColdEnvironmentConfig {
    /// Default false.
    pub enabled: bool,
    /// Power cap while warming up, W; 50-10000. Default 500.
    pub warmup_watt: f64,
    /// The warm-up ends when the hottest chip reaches this, C; 0-90. Default 45.
    pub warmup_temp_c: f64,
    /// The warm-up ends after this long whatever the temperature (a broken sensor must not
    /// cap the miner for ever), s; 30-7200. Default 900.
    pub warmup_max_s: u32,
}

impl Default for ColdEnvironmentConfig {
    fn default() -> Self {
        ColdEnvironmentConfig {
            enabled: false,
            warmup_watt: 500.0,
            warmup_temp_c: 45.0,
            warmup_max_s: 900,
        }
    }
}

fn range(field: &str, v: f64, lo: f64, hi: f64, unit: &str) -> Result<(), ConfigError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(ConfigError::invalid(field, format!("{lo}-{hi} {unit}")))
    }
}

impl GovernorConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let n = &self.noise;
        range(
            "governor.noise.fan_max_percent",
            f64::from(n.fan_max_percent),
            10.0,
            100.0,
            "percent",
        )?;
        range(
            "governor.noise.hysteresis_percent",
            f64::from(n.hysteresis_percent),
            1.0,
            50.0,
            "percent points",
        )?;
        range("governor.noise.step_watt", n.step_watt, 10.0, 1000.0, "W")?;
        range("governor.noise.min_watt", n.min_watt, 50.0, MAX_WATT, "W")?;
        range(
            "governor.noise.interval_s",
            f64::from(n.interval_s),
            5.0,
            3600.0,
            "s",
        )?;
        let q = &self.quota;
        range("governor.quota.daily_kwh", q.daily_kwh, 0.1, 240.0, "kWh")?;
        range("governor.quota.min_watt", q.min_watt, 50.0, MAX_WATT, "W")?;
        let r = &self.room_factor;
        range(
            "governor.room_factor.reference_room_c",
            r.reference_room_c,
            0.0,
            40.0,
            "C",
        )?;
        range(
            "governor.room_factor.watt_per_c",
            r.watt_per_c,
            0.0,
            500.0,
            "W per C",
        )?;
        if r.base_watt != 0.0 {
            range(
                "governor.room_factor.base_watt",
                r.base_watt,
                50.0,
                MAX_WATT,
                "W (or 0)",
            )?;
        }
        range(
            "governor.room_factor.max_raise_watt",
            r.max_raise_watt,
            0.0,
            5000.0,
            "W",
        )?;
        range(
            "governor.room_factor.min_watt",
            r.min_watt,
            50.0,
            MAX_WATT,
            "W",
        )?;
        let c = &self.cold_environment;
        range(
            "governor.cold_environment.warmup_watt",
            c.warmup_watt,
            50.0,
            MAX_WATT,
            "W",
        )?;
        range(
            "governor.cold_environment.warmup_temp_c",
            c.warmup_temp_c,
            0.0,
            90.0,
            "C",
        )?;
        range(
            "governor.cold_environment.warmup_max_s",
            f64::from(c.warmup_max_s),
            30.0,
            7200.0,
            "s",
        )
    }
}
