use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[home]`: space-heater use: a room thermostat and night (quiet) hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct HomeConfig {
    /// Hold the room at `target_room_c` by moving the power target. Default false.
    pub thermostat_enabled: bool,
    /// Room temperature to hold, C; 5-30. Default 21.
    pub target_room_c: f64,
    /// No change while the room is within this band around the target, C; 0.1-5. Default 0.5.
    pub hysteresis_c: f64,
    /// Lowest power target the thermostat uses before it sleeps the miner, W. Default 300.
    pub min_watt: f64,
    /// Highest power target the thermostat uses, W. Default 1400.
    pub max_watt: f64,
    /// Change per thermostat step, W; 10-1000. Default 100.
    pub step_watt: f64,
    /// A room reading older than this is ignored (the thermostat holds), s. Default 900.
    pub reading_max_age_s: u32,
    /// Quiet hours.
    pub night_mode: NightModeConfig,
}

impl Default for HomeConfig {
    fn default() -> Self {
        HomeConfig {
            thermostat_enabled: false,
            target_room_c: 21.0,
            hysteresis_c: 0.5,
            min_watt: 300.0,
            max_watt: 1400.0,
            step_watt: 100.0,
            reading_max_age_s: 900,
            night_mode: NightModeConfig::default(),
        }
    }
}

/// `[home.night_mode]`: a daily window with a power cap and a fan cap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct NightModeConfig {
    /// Default false.
    pub enabled: bool,
    /// Window start, local "HH:MM". Default "22:00".
    pub start: String,
    /// Window end, local "HH:MM" (may be earlier than start: the window spans midnight).
    /// Default "07:00".
    pub end: String,
    /// Offset of local time from UTC, minutes; -720..840. Default 0.
    pub utc_offset_min: i32,
    /// Power cap inside the window, W; 0 = no power cap. Default 600.
    pub power_cap_watt: f64,
    /// Fan duty cap inside the window, percent; 0 = no fan cap. Default 40.
    pub fan_max_percent: u32,
}

impl Default for NightModeConfig {
    fn default() -> Self {
        NightModeConfig {
            enabled: false,
            start: "22:00".into(),
            end: "07:00".into(),
            utc_offset_min: 0,
            power_cap_watt: 600.0,
            fan_max_percent: 40,
        }
    }
}

/// Minutes after midnight of a "HH:MM" time.
pub fn parse_hhmm(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

impl NightModeConfig {
    /// Whether `unix_ms` falls inside the window (end excluded).
    pub fn active_at(&self, unix_ms: i64) -> bool {
        let (Some(start), Some(end)) = (parse_hhmm(&self.start), parse_hhmm(&self.end)) else {
            return false;
        };
        if !self.enabled || start == end {
            return false;
        }
        let local_min =
            (unix_ms / 60_000 + i64::from(self.utc_offset_min)).rem_euclid(24 * 60) as u32;
        if start < end {
            (start..end).contains(&local_min)
        } else {
            local_min >= start || local_min < end
        }
    }

    pub(super) fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        for (name, v) in [("start", &self.start), ("end", &self.end)] {
            if parse_hhmm(v).is_none() {
                return Err(ConfigError::invalid(
                    format!("{prefix}.{name}"),
                    "a time as \"HH:MM\" (24 h)",
                ));
            }
        }
        if !(-720..=840).contains(&self.utc_offset_min) {
            return Err(ConfigError::invalid(
                format!("{prefix}.utc_offset_min"),
                "-720 to 840 minutes",
            ));
        }
        if self.power_cap_watt != 0.0
            && !(50.0..=super::power::MAX_WATT).contains(&self.power_cap_watt)
        {
            return Err(ConfigError::invalid(
                format!("{prefix}.power_cap_watt"),
                "0 (none) or 50-10000 W",
            ));
        }
        if self.fan_max_percent > 100 || (self.fan_max_percent != 0 && self.fan_max_percent < 10) {
            return Err(ConfigError::invalid(
                format!("{prefix}.fan_max_percent"),
                "0 (none) or 10-100 percent",
            ));
        }
        Ok(())
    }
}

impl HomeConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(5.0..=30.0).contains(&self.target_room_c) {
            return Err(ConfigError::invalid("home.target_room_c", "5-30 C"));
        }
        if !(0.1..=5.0).contains(&self.hysteresis_c) {
            return Err(ConfigError::invalid("home.hysteresis_c", "0.1-5 C"));
        }
        if !(50.0..=super::power::MAX_WATT).contains(&self.min_watt) {
            return Err(ConfigError::invalid("home.min_watt", "50-10000 W"));
        }
        if self.max_watt < self.min_watt || self.max_watt > super::power::MAX_WATT {
            return Err(ConfigError::invalid(
                "home.max_watt",
                "between home.min_watt and 10000 W",
            ));
        }
        if !(10.0..=1000.0).contains(&self.step_watt) {
            return Err(ConfigError::invalid("home.step_watt", "10-1000 W"));
        }
        if !(10..=86_400).contains(&self.reading_max_age_s) {
            return Err(ConfigError::invalid("home.reading_max_age_s", "10-86400 s"));
        }
        self.night_mode.validate("home.night_mode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn night_window_spans_midnight() {
        let n = NightModeConfig {
            enabled: true,
            ..Default::default()
        };
        let at = |h: i64, m: i64| (h * 60 + m) * 60_000;
        assert!(n.active_at(at(23, 0)));
        assert!(n.active_at(at(3, 0)));
        assert!(!n.active_at(at(7, 0)));
        assert!(!n.active_at(at(12, 0)));
        let shifted = NightModeConfig {
            utc_offset_min: 120,
            ..n
        };
        // 21:00 UTC is 23:00 local.
        assert!(shifted.active_at(at(21, 0)));
    }

    #[test]
    fn times_are_checked() {
        assert_eq!(parse_hhmm("07:30"), Some(450));
        assert_eq!(parse_hhmm("24:00"), None);
        assert_eq!(parse_hhmm("7:30"), None);
    }
}
