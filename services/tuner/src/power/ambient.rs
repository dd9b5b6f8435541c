//! The room around the miner: ambient compensation of the power target
//! (`[governor.room_factor]`) and the warm-up after a cold start
//! (`[governor.cold_environment]`). Both pure; the governor feeds them the thermostat's room
//! reading and hw-agent's telemetry and adds what they return to its arbitration.

use svcos_common::config::{ColdEnvironmentConfig, RoomFactorConfig};

/// The room-factor limit: `base − watt_per_c × (room − reference)`, within `min_watt` and
/// `base + max_raise_watt`. `None` when off, without a fresh room reading, or without a base
/// (neither `base_watt` nor an operator target): there is then nothing to compensate.
pub fn room_limit(cfg: &RoomFactorConfig, operator_watt: f64, room_c: Option<f64>) -> Option<f64> {
    if !cfg.enabled {
        return None;
    }
    let base = if cfg.base_watt > 0.0 {
        cfg.base_watt
    } else {
        operator_watt
    };
    let room = room_c.filter(|r| r.is_finite())?;
    if base <= 0.0 {
        return None;
    }
    let w = base - cfg.watt_per_c * (room - cfg.reference_room_c);
    let w = w.clamp(cfg.min_watt.min(base), base + cfg.max_raise_watt);
    Some((w * 10.0).round() / 10.0)
}

/// Where the warm-up stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WarmupPhase {
    /// Off.
    #[default]
    Off,
    /// The miner is not hashing (starting, asleep, faulted): the cap is ready for its start.
    Armed,
    /// Hashing since `since_ms` with the chips still below the warm-up temperature.
    WarmingUp {
        /// When hashing began, ms.
        since_ms: i64,
    },
    /// Warm (or the warm-up timed out) until the miner next stops hashing.
    Done,
}

impl WarmupPhase {
    /// The word the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            WarmupPhase::Off => "off",
            WarmupPhase::Armed => "armed",
            WarmupPhase::WarmingUp { .. } => "warming_up",
            WarmupPhase::Done => "done",
        }
    }

    /// The cap in force in this phase.
    pub fn cap(self, cfg: &ColdEnvironmentConfig) -> Option<f64> {
        matches!(self, WarmupPhase::Armed | WarmupPhase::WarmingUp { .. })
            .then_some(cfg.warmup_watt)
    }
}

/// The next phase. `hashing`: hw-agent mines; `temp_max_c`: the hottest chip (0 = unknown).
/// A stop (sleep, bring-up, overheat, no work) re-arms, because chips cool when they stop; the
/// governor's own start begins armed, and a restart while the chips are warm ends at once.
pub fn warmup_step(
    cfg: &ColdEnvironmentConfig,
    phase: WarmupPhase,
    hashing: bool,
    temp_max_c: f64,
    now_ms: i64,
) -> WarmupPhase {
    if !cfg.enabled {
        return WarmupPhase::Off;
    }
    if !hashing {
        return WarmupPhase::Armed;
    }
    let warm = temp_max_c.is_finite() && temp_max_c >= cfg.warmup_temp_c;
    match phase {
        WarmupPhase::Done => WarmupPhase::Done,
        WarmupPhase::Off | WarmupPhase::Armed if warm => WarmupPhase::Done,
        WarmupPhase::Off | WarmupPhase::Armed => WarmupPhase::WarmingUp { since_ms: now_ms },
        WarmupPhase::WarmingUp { since_ms } => {
            let timed_out = now_ms - since_ms >= i64::from(cfg.warmup_max_s) * 1000;
            if warm || timed_out {
                WarmupPhase::Done
            } else {
                phase
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_limit_table() {
        let c = RoomFactorConfig {
            enabled: true,
            reference_room_c: 20.0,
            watt_per_c: 25.0,
            base_watt: 0.0,
            max_raise_watt: 100.0,
            min_watt: 300.0,
        };
        let with_base = RoomFactorConfig {
            base_watt: 800.0,
            ..c.clone()
        };
        let off = RoomFactorConfig {
            enabled: false,
            ..c.clone()
        };
        // (config, operator target, room, want)
        let rows = [
            // At the reference: the base (the operator's target).
            (&c, 1000.0, Some(20.0), Some(1000.0)),
            // 4 C warmer: 100 W less.
            (&c, 1000.0, Some(24.0), Some(900.0)),
            // 2 C colder: 50 W more, within max_raise.
            (&c, 1000.0, Some(18.0), Some(1050.0)),
            // 10 C colder: capped at base + max_raise.
            (&c, 1000.0, Some(10.0), Some(1100.0)),
            // Very warm: the floor.
            (&c, 1000.0, Some(40.0), Some(500.0)),
            (&c, 1000.0, Some(60.0), Some(300.0)),
            // An explicit base wins over the operator's target.
            (&with_base, 1000.0, Some(22.0), Some(750.0)),
            (&with_base, 0.0, Some(20.0), Some(800.0)),
            // Nothing to compensate, no reading, or off.
            (&c, 0.0, Some(25.0), None),
            (&c, 1000.0, None, None),
            (&off, 1000.0, Some(30.0), None),
        ];
        for (i, (cfg, operator, room, want)) in rows.into_iter().enumerate() {
            assert_eq!(room_limit(cfg, operator, room), want, "row {i}");
        }
    }

    #[test]
    fn warmup_table() {
        let c = ColdEnvironmentConfig {
            enabled: true,
            warmup_watt: 500.0,
            warmup_temp_c: 45.0,
            warmup_max_s: 600,
        };
        let off = ColdEnvironmentConfig {
            enabled: false,
            ..c.clone()
        };
        let w = |since_ms| WarmupPhase::WarmingUp { since_ms };
        use WarmupPhase::{Armed, Done, Off};
        // (config, phase, hashing, temp, now, want)
        let rows = [
            (&off, w(0), true, 20.0, 1, Off),
            // Not hashing: armed (the cap waits for the start).
            (&c, Off, false, 0.0, 1, Armed),
            (&c, Done, false, 70.0, 1, Armed),
            // Starts cold: warming up from now.
            (&c, Armed, true, 12.0, 5, w(5)),
            // Starts warm (a restart of the tuner mid-run): done at once.
            (&c, Off, true, 70.0, 5, Done),
            (&c, Armed, true, 45.0, 5, Done),
            // Still cold within the time allowed: warming up.
            (&c, w(5), true, 30.0, 5 + 599_999, w(5)),
            // Warm: done.
            (&c, w(5), true, 46.0, 100, Done),
            // Timed out: done whatever the sensor says.
            (&c, w(5), true, 0.0, 5 + 600_000, Done),
            // Done stays done while hashing, even if the chips cool again.
            (&c, Done, true, 20.0, 9, Done),
        ];
        for (i, (cfg, phase, hashing, temp, now, want)) in rows.into_iter().enumerate() {
            assert_eq!(warmup_step(cfg, phase, hashing, temp, now), want, "row {i}");
        }
        assert_eq!(Armed.cap(&c), Some(500.0));
        assert_eq!(w(1).cap(&c), Some(500.0));
        assert_eq!(Done.cap(&c), None);
    }
}
