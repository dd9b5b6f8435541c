//! The room thermostat of a space-heater miner: the operator (or Home Assistant) posts the room
//! temperature; each reading moves the thermostat's power level one step toward holding the
//! target. Pure state, persisted by the governor.

use serde::{Deserialize, Serialize};
use svcos_common::config::HomeConfig;

/// What one reading did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ThermostatAction {
    /// No reading yet.
    #[default]
    None,
    /// Room too cold: one step more power.
    Raise,
    /// Room too warm: one step less power.
    Lower,
    /// Within the band: no change.
    Hold,
    /// Too warm at the lowest level: sleep.
    Sleep,
    /// Too cold while asleep: wake at the lowest level.
    Wake,
}

/// The thermostat's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThermostatState {
    /// Last room temperature, C.
    pub room_c: Option<f64>,
    /// When it was posted, Unix ms.
    pub reading_at_ms: i64,
    /// Who posted it (free text from the client, e.g. "home-assistant").
    pub source: String,
    /// Current power level, W.
    pub level_watt: Option<f64>,
    /// The thermostat put the miner to sleep.
    pub sleeping: bool,
    /// What the last reading did.
    pub last_action: ThermostatAction,
}

impl ThermostatState {
    /// Take a room reading; `start_watt` is the level used when the thermostat has none yet.
    pub fn on_reading(
        &mut self,
        home: &HomeConfig,
        room_c: f64,
        now_ms: i64,
        start_watt: f64,
    ) -> ThermostatAction {
        self.room_c = Some(room_c);
        self.reading_at_ms = now_ms;
        let (min, max) = (home.min_watt, home.max_watt);
        let level = self.level_watt.unwrap_or(start_watt).clamp(min, max);
        let action = if room_c < home.target_room_c - home.hysteresis_c {
            if self.sleeping {
                self.sleeping = false;
                self.level_watt = Some(min);
                ThermostatAction::Wake
            } else {
                self.level_watt = Some((level + home.step_watt).min(max));
                ThermostatAction::Raise
            }
        } else if room_c > home.target_room_c + home.hysteresis_c {
            if level <= min {
                self.level_watt = Some(min);
                self.sleeping = true;
                ThermostatAction::Sleep
            } else {
                self.level_watt = Some((level - home.step_watt).max(min));
                ThermostatAction::Lower
            }
        } else {
            self.level_watt = Some(level);
            ThermostatAction::Hold
        };
        self.last_action = action;
        action
    }

    /// Whether the last reading is recent enough to act on.
    pub fn fresh(&self, home: &HomeConfig, now_ms: i64) -> bool {
        self.room_c.is_some()
            && now_ms - self.reading_at_ms <= i64::from(home.reading_max_age_s) * 1000
    }

    /// (power level, sleep) the governor should apply; nothing while off or without a fresh
    /// reading (a dead sensor must not keep the miner asleep or pinned).
    pub fn output(&self, home: &HomeConfig, now_ms: i64) -> (Option<f64>, bool) {
        if !home.thermostat_enabled || !self.fresh(home, now_ms) {
            return (None, false);
        }
        (
            self.level_watt
                .map(|w| w.clamp(home.min_watt, home.max_watt)),
            self.sleeping,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> HomeConfig {
        HomeConfig {
            thermostat_enabled: true,
            target_room_c: 21.0,
            hysteresis_c: 0.5,
            min_watt: 300.0,
            max_watt: 1000.0,
            step_watt: 200.0,
            ..Default::default()
        }
    }

    #[test]
    fn cold_raises_warm_lowers_then_sleeps_and_wakes() {
        let h = home();
        let mut t = ThermostatState::default();
        use ThermostatAction::*;
        let steps = [
            (18.0, Raise, 800.0, false),
            (18.0, Raise, 1000.0, false),
            (18.0, Raise, 1000.0, false),
            (21.2, Hold, 1000.0, false),
            (23.0, Lower, 800.0, false),
            (23.0, Lower, 600.0, false),
            (23.0, Lower, 400.0, false),
            (23.0, Lower, 300.0, false),
            (23.0, Sleep, 300.0, true),
            (21.0, Hold, 300.0, true),
            (20.0, Wake, 300.0, false),
        ];
        for (i, (room, action, level, sleeping)) in steps.into_iter().enumerate() {
            assert_eq!(t.on_reading(&h, room, 0, 600.0), action, "step {i}");
            assert_eq!(
                (t.level_watt, t.sleeping),
                (Some(level), sleeping),
                "step {i}"
            );
        }
    }

    #[test]
    fn stale_or_disabled_gives_nothing() {
        let h = home();
        let mut t = ThermostatState::default();
        t.on_reading(&h, 18.0, 0, 600.0);
        assert_eq!(t.output(&h, 1000), (Some(800.0), false));
        assert_eq!(t.output(&h, 901_000), (None, false));
        let off = HomeConfig {
            thermostat_enabled: false,
            ..h
        };
        assert_eq!(t.output(&off, 1000), (None, false));
    }
}
