//! The noise controller: a fan-duty ceiling met by choosing a lower power (`[governor.noise]`).
//!
//! hw-agent's fan loop holds the chips at their target temperature, so the fan duty follows
//! the heat, which follows the power. The controller closes that slow loop from outside: while
//! the fans run above the ceiling it lowers its limit by one step per interval (starting from
//! the power drawn, so the first step bites); while they run at least `hysteresis_percent`
//! below it, it gives a step back, and lets go altogether once its limit no longer binds (above
//! the other limits, or well above the draw). In between it holds, so it does not hunt around
//! the ceiling. One step per `interval_s`, because fans and chip temperatures need tens of
//! seconds to answer a power change; a faster loop would overshoot to `min_watt`.
//!
//! It acts only while the fans are under hw-agent's automatic control: a fixed duty (manual
//! fans, the night-mode fan cap) does not answer power, and lowering power for it would only
//! ratchet down to the floor. Pure: [`step`] takes the state and the readings and returns the
//! next state; the governor persists it (`noise.json`) when the limit changes.

use serde::{Deserialize, Serialize};
use svcos_common::config::NoiseConfig;

/// What the controller did last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseAction {
    /// Off, or no step yet.
    #[default]
    None,
    /// Fans above the ceiling: a step down.
    Lower,
    /// Fans well below the ceiling: a step back up.
    Raise,
    /// The limit no longer binds: let go.
    Release,
    /// Within the hysteresis band, no fan reading, or fans not in auto mode (between steps
    /// the last action stands).
    Hold,
}

impl NoiseAction {
    /// The word the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            NoiseAction::None => "none",
            NoiseAction::Lower => "lower",
            NoiseAction::Raise => "raise",
            NoiseAction::Release => "release",
            NoiseAction::Hold => "hold",
        }
    }
}

/// The controller's memory (persisted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NoiseState {
    /// The limit in force, W; `None` = not limiting.
    pub limit_watt: Option<f64>,
    /// When the limit last moved (a step is due `interval_s` after it), ms.
    pub last_step_ms: i64,
    /// The highest fan duty seen at the last evaluation, percent.
    pub fan_percent: Option<u32>,
    /// What the last evaluation did.
    pub last_action: NoiseAction,
}

/// One evaluation's inputs from telemetry and the other limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseReading {
    /// Highest fan duty, percent (`None`: no telemetry or no fans).
    pub fan_percent: Option<u32>,
    /// Fans under hw-agent's automatic control.
    pub fans_auto: bool,
    /// Power drawn, W.
    pub power_watt: f64,
    /// The lowest of the governor's other limits, W (`None`: no other limit).
    pub other_limit_watt: Option<f64>,
}

/// The next state. Disabled clears the limit at once.
pub fn step(cfg: &NoiseConfig, st: &NoiseState, r: &NoiseReading, now_ms: i64) -> NoiseState {
    let mut next = NoiseState {
        fan_percent: r.fan_percent,
        ..st.clone()
    };
    if !cfg.enabled {
        return NoiseState::default();
    }
    let due = st.last_step_ms == 0 || now_ms - st.last_step_ms >= i64::from(cfg.interval_s) * 1000;
    if !due {
        // Between steps nothing is decided: the last decision stands as the one shown.
        return next;
    }
    let Some(fan) = r.fan_percent.filter(|_| r.fans_auto) else {
        next.last_action = NoiseAction::Hold;
        return next;
    };
    let step_w = cfg.step_watt;
    if fan > cfg.fan_max_percent {
        // From what is drawn when that is lower: a limit above the draw would not bite.
        let from = st
            .limit_watt
            .map_or(r.power_watt, |l| l.min(r.power_watt.max(cfg.min_watt)));
        let limit = (from - step_w).max(cfg.min_watt);
        next.limit_watt = Some(limit);
        next.last_action = NoiseAction::Lower;
        next.last_step_ms = now_ms;
    } else if fan + cfg.hysteresis_percent <= cfg.fan_max_percent {
        match st.limit_watt {
            None => next.last_action = NoiseAction::Hold,
            Some(l) => {
                let raised = l + step_w;
                let binds_other = r.other_limit_watt.is_some_and(|o| raised >= o);
                let unused = raised > r.power_watt + 2.0 * step_w;
                if binds_other || unused {
                    next.limit_watt = None;
                    next.last_action = NoiseAction::Release;
                } else {
                    next.limit_watt = Some(raised);
                    next.last_action = NoiseAction::Raise;
                }
                next.last_step_ms = now_ms;
            }
        }
    } else {
        next.last_action = NoiseAction::Hold;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NoiseConfig {
        NoiseConfig {
            enabled: true,
            fan_max_percent: 60,
            hysteresis_percent: 10,
            step_watt: 50.0,
            min_watt: 300.0,
            interval_s: 60,
        }
    }

    fn reading(fan: u32, power: f64, other: Option<f64>) -> NoiseReading {
        NoiseReading {
            fan_percent: Some(fan),
            fans_auto: true,
            power_watt: power,
            other_limit_watt: other,
        }
    }

    #[test]
    fn table() {
        let at = |limit: Option<f64>, last: i64| NoiseState {
            limit_watt: limit,
            last_step_ms: last,
            ..Default::default()
        };
        let min = 60_000;
        // (state, reading, now, want limit, want action)
        let rows: &[(NoiseState, NoiseReading, i64, Option<f64>, NoiseAction)] = &[
            // Loud, no limit yet: one step below the draw.
            (
                at(None, 0),
                reading(80, 1300.0, None),
                10,
                Some(1250.0),
                NoiseAction::Lower,
            ),
            // Loud again after the interval: another step.
            (
                at(Some(1250.0), 1),
                reading(75, 1240.0, None),
                1 + min,
                Some(1190.0),
                NoiseAction::Lower,
            ),
            // Loud, but the interval has not passed: nothing decided, the last action stands.
            (
                at(Some(1250.0), 1),
                reading(75, 1240.0, None),
                min,
                Some(1250.0),
                NoiseAction::None,
            ),
            // Never below the floor.
            (
                at(Some(320.0), 1),
                reading(90, 330.0, None),
                1 + min,
                Some(300.0),
                NoiseAction::Lower,
            ),
            // In the hysteresis band (51..60): hold.
            (
                at(Some(1000.0), 1),
                reading(55, 990.0, None),
                1 + min,
                Some(1000.0),
                NoiseAction::Hold,
            ),
            // At the ceiling exactly: not above it, hold.
            (
                at(Some(1000.0), 1),
                reading(60, 990.0, None),
                1 + min,
                Some(1000.0),
                NoiseAction::Hold,
            ),
            // Quiet: a step back.
            (
                at(Some(1000.0), 1),
                reading(50, 990.0, None),
                1 + min,
                Some(1050.0),
                NoiseAction::Raise,
            ),
            // Quiet and the step would reach another limit: let go.
            (
                at(Some(1000.0), 1),
                reading(40, 990.0, Some(1040.0)),
                1 + min,
                None,
                NoiseAction::Release,
            ),
            // Quiet and the miner draws far less than the limit: the limit does not bind, let go.
            (
                at(Some(1000.0), 1),
                reading(40, 800.0, None),
                1 + min,
                None,
                NoiseAction::Release,
            ),
            // Quiet with no limit: nothing to give back.
            (
                at(None, 0),
                reading(30, 800.0, None),
                10,
                None,
                NoiseAction::Hold,
            ),
        ];
        for (i, (st, r, now, limit, action)) in rows.iter().enumerate() {
            let next = step(&cfg(), st, r, *now);
            assert_eq!(
                (next.limit_watt, next.last_action),
                (*limit, *action),
                "row {i}"
            );
        }
    }

    #[test]
    fn manual_fans_and_missing_readings_hold_and_disabled_clears() {
        let st = NoiseState {
            limit_watt: Some(900.0),
            last_step_ms: 1,
            ..Default::default()
        };
        let mut r = reading(95, 1000.0, None);
        r.fans_auto = false;
        let next = step(&cfg(), &st, &r, 10_000_000);
        assert_eq!(
            (next.limit_watt, next.last_action),
            (Some(900.0), NoiseAction::Hold)
        );
        r.fans_auto = true;
        r.fan_percent = None;
        assert_eq!(step(&cfg(), &st, &r, 10_000_000).limit_watt, Some(900.0));
        let off = NoiseConfig {
            enabled: false,
            ..cfg()
        };
        assert_eq!(
            step(&off, &st, &reading(95, 1000.0, None), 10_000_000),
            NoiseState::default()
        );
    }

    #[test]
    fn a_loud_board_walks_down_then_back_when_quiet() {
        // Fans follow power: 0.06 % per W above 300 W (1300 W → 60 %).
        let fan = |w: f64| ((w - 300.0) * 0.06).round().max(0.0) as u32;
        let c = NoiseConfig {
            fan_max_percent: 45,
            ..cfg()
        };
        let mut st = NoiseState::default();
        let mut power: f64 = 1300.0;
        for k in 1..=40 {
            st = step(
                &c,
                &st,
                &reading(fan(power), power, Some(1300.0)),
                k * 60_000,
            );
            power = st.limit_watt.unwrap_or(1300.0).min(1300.0);
        }
        assert!(fan(power) <= 45, "{power} W → {} %", fan(power));
        assert!(
            fan(power) + c.hysteresis_percent > 45,
            "settled too low: {power} W"
        );
        // The ceiling raised: the limit walks back and lets go.
        let c = NoiseConfig {
            fan_max_percent: 90,
            ..c
        };
        for k in 41..=80 {
            st = step(
                &c,
                &st,
                &reading(fan(power), power, Some(1300.0)),
                k * 60_000,
            );
            power = st.limit_watt.unwrap_or(1300.0).min(1300.0);
        }
        assert_eq!(st.limit_watt, None);
    }
}
