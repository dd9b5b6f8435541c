use serde::{Deserialize, Serialize};

use super::{ConfigError, SystemConfig};
pub use crate::timewin::parse_hhmm;
use crate::timewin::{DailyWindow, Zone};

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
    /// Legacy: offset of local time from UTC, minutes; -720..840. Default 0. Used only while
    /// `[system].timezone` is "UTC", as a fixed offset that does not follow daylight saving;
    /// set `[system].timezone` instead.
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

/// Where and when a daily window is read, reported beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowClock {
    /// The zone's name ("Europe/Berlin", "UTC+02:00" for the legacy fixed offset).
    pub timezone: String,
    /// The next start or end, RFC 3339 with the zone's offset then; `None` when disabled.
    pub next_change: Option<String>,
}

impl NightModeConfig {
    /// The zone the window is read in: `[system].timezone`, or the legacy fixed
    /// `utc_offset_min` while that is left at "UTC".
    pub fn zone(&self, system: &SystemConfig) -> Zone {
        if system.timezone == "UTC" && self.utc_offset_min != 0 {
            Zone::fixed_offset(self.utc_offset_min)
        } else {
            system.zone()
        }
    }

    /// The window when enabled and well-formed.
    pub fn window(&self) -> Option<DailyWindow> {
        let (start, end) = (parse_hhmm(&self.start)?, parse_hhmm(&self.end)?);
        DailyWindow::new(start, end).filter(|_| self.enabled)
    }

    /// The zone the window is read in and when it next opens or closes (RFC 3339), for answers.
    pub fn clock(&self, system: &SystemConfig, unix_ms: i64) -> WindowClock {
        let zone = self.zone(system);
        let at = crate::timewin::Timestamp::from_millisecond(unix_ms).ok();
        let next = self
            .window()
            .zip(at)
            .and_then(|(w, at)| w.next_transition(&zone.tz, at));
        WindowClock {
            next_change: next.map(|t| zone.rfc3339(t)),
            timezone: zone.name,
        }
    }

    /// Whether `unix_ms` falls inside the window in `zone` (end excluded).
    pub fn active_at(&self, zone: &Zone, unix_ms: i64) -> bool {
        let Ok(at) = crate::timewin::Timestamp::from_millisecond(unix_ms) else {
            return false;
        };
        self.window().is_some_and(|w| w.contains(&zone.tz, at))
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
    fn night_window_spans_midnight_in_the_configured_zone() {
        let n = NightModeConfig {
            enabled: true,
            ..Default::default()
        };
        let mut system = SystemConfig::default();
        let at = |h: i64, m: i64| (h * 60 + m) * 60_000;
        let utc = n.zone(&system);
        assert!(n.active_at(&utc, at(23, 0)));
        assert!(n.active_at(&utc, at(3, 0)));
        assert!(!n.active_at(&utc, at(7, 0)));
        assert!(!n.active_at(&utc, at(12, 0)));
        let shifted = NightModeConfig {
            utc_offset_min: 120,
            ..n.clone()
        };
        // 21:00 UTC is 23:00 at the legacy fixed offset.
        assert_eq!(shifted.zone(&system).name, "UTC+02:00");
        assert!(shifted.active_at(&shifted.zone(&system), at(21, 0)));
        // A named zone wins over the legacy offset.
        system.timezone = "Asia/Tokyo".into();
        assert_eq!(shifted.zone(&system).name, "Asia/Tokyo");
        // 14:00 UTC is 23:00 in Tokyo.
        assert!(shifted.active_at(&shifted.zone(&system), at(14, 0)));
        // 23:00 UTC is 08:00 in Tokyo.
        assert!(!shifted.active_at(&shifted.zone(&system), at(23, 0)));
        let clock = shifted.clock(&system, at(23, 0));
        assert_eq!(clock.timezone, "Asia/Tokyo");
        assert_eq!(
            clock.next_change.as_deref(),
            Some("1970-01-02T22:00:00+09:00")
        );
    }
}
