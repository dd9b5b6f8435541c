//! The daily energy quota (`[governor.quota]`): at most `daily_kwh` per local day.
//!
//! The governor integrates hw-agent's calibrated power every tick into the energy of the
//! current local day (`[system].timezone`; a new date starts from zero). The limit spreads what
//! is left over what is left of the day, `remaining kWh / remaining hours`, so a budget lasts
//! until midnight instead of running out by noon at full power and then leaving the room cold;
//! the pace never goes below `min_watt` (the board hashes poorly lower), and a spent budget
//! asks for sleep until the next day. Pure: [`accumulate`] and [`limit`]; the governor persists
//! the energy (`quota.json`) once a minute and at shutdown, so a crash loses at most a minute
//! of counting (which errs towards more power, by at most a minute's worth).

use serde::{Deserialize, Serialize};
use svcos_common::config::QuotaConfig;
use svcos_common::timewin::{Timestamp, Zone};

/// Longest gap between two samples that still counts: after a longer one (tuner down, no
/// telemetry) the unknown stretch is not guessed at the last power.
pub const MAX_GAP_MS: i64 = 10_000;

/// The energy counted for one local day (persisted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuotaState {
    /// The local date counted, "YYYY-MM-DD".
    pub day: String,
    /// Energy used that day, kWh.
    pub used_kwh: f64,
    /// The last sample counted, ms.
    pub last_sample_ms: i64,
}

/// The local date of `unix_ms` in `zone` and the milliseconds until its next midnight.
pub fn local_day(zone: &Zone, unix_ms: i64) -> Option<(String, i64)> {
    let at = Timestamp::from_millisecond(unix_ms).ok()?;
    let (day, end) = svcos_common::timewin::local_day(&zone.tz, at)?;
    Some((day, end.as_millisecond() - unix_ms))
}

/// Count `power_watt` drawn since the last sample into `day` (a new day starts at zero).
pub fn accumulate(st: &QuotaState, day: &str, power_watt: f64, now_ms: i64) -> QuotaState {
    let mut next = if st.day == day {
        st.clone()
    } else {
        QuotaState {
            day: day.to_string(),
            ..Default::default()
        }
    };
    let dt = now_ms - st.last_sample_ms;
    if st.last_sample_ms > 0 && (1..=MAX_GAP_MS).contains(&dt) && power_watt.is_finite() {
        next.used_kwh += power_watt.max(0.0) * dt as f64 / 3_600_000_000.0;
    }
    next.last_sample_ms = now_ms;
    next
}

/// What the quota asks of the arbitration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaLimit {
    /// The spread limit, W (`None` when spent: sleep instead).
    pub watt: Option<f64>,
    /// The budget is spent: sleep until the next local day.
    pub sleep: bool,
    /// kWh left today.
    pub remaining_kwh: f64,
}

/// The limit for `used_kwh` with `ms_left` of the day to go.
pub fn limit(cfg: &QuotaConfig, used_kwh: f64, ms_left: i64) -> QuotaLimit {
    let remaining_kwh = (cfg.daily_kwh - used_kwh).max(0.0);
    if remaining_kwh <= 1e-9 {
        return QuotaLimit {
            watt: None,
            sleep: true,
            remaining_kwh: 0.0,
        };
    }
    // At least a minute left, so the last minute of a day does not divide by almost nothing.
    let hours = (ms_left.max(60_000)) as f64 / 3_600_000.0;
    let pace = (remaining_kwh * 1000.0 / hours).max(cfg.min_watt);
    QuotaLimit {
        watt: Some((pace * 10.0).floor() / 10.0),
        sleep: false,
        remaining_kwh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kwh: f64) -> QuotaConfig {
        QuotaConfig {
            enabled: true,
            daily_kwh: kwh,
            min_watt: 300.0,
        }
    }

    #[test]
    fn limit_table() {
        let h = 3_600_000;
        // (daily, used, ms left, want watt, want sleep)
        let rows = [
            // 24 kWh over a whole day: 1000 W.
            (24.0, 0.0, 24 * h, Some(1000.0), false),
            // Half used with half the day left: still 1000 W.
            (24.0, 12.0, 12 * h, Some(1000.0), false),
            // Ahead of pace: 4 kWh for 8 h = 500 W.
            (24.0, 20.0, 8 * h, Some(500.0), false),
            // Behind pace: 12 kWh for 2 h = 6000 W (the other limits will bind).
            (24.0, 12.0, 2 * h, Some(6000.0), false),
            // Little left: the floor.
            (24.0, 23.9, 12 * h, Some(300.0), false),
            // Spent: sleep.
            (24.0, 24.0, 5 * h, None, true),
            (24.0, 30.0, 5 * h, None, true),
        ];
        for (i, (daily, used, left, watt, sleep)) in rows.into_iter().enumerate() {
            let l = limit(&cfg(daily), used, left);
            assert_eq!((l.watt, l.sleep), (watt, sleep), "row {i}");
        }
    }

    #[test]
    fn energy_counts_per_day_and_skips_long_gaps() {
        let mut st = QuotaState::default();
        // The first sample only starts the count.
        st = accumulate(&st, "2026-11-28", 1200.0, 1_000);
        assert_eq!(st.used_kwh, 0.0);
        // One hour of 1 s samples at 1200 W: 1.2 kWh.
        for k in 1..=3600 {
            st = accumulate(&st, "2026-11-28", 1200.0, 1_000 + k * 1000);
        }
        assert!((st.used_kwh - 1.2).abs() < 1e-9, "{}", st.used_kwh);
        // A minute without telemetry is not counted at the last power.
        let before = st.used_kwh;
        st = accumulate(&st, "2026-11-28", 1200.0, st.last_sample_ms + 60_000);
        assert_eq!(st.used_kwh, before);
        // Midnight: a new day starts from zero (plus the second that crossed it).
        st = accumulate(&st, "2026-11-29", 1200.0, st.last_sample_ms + 1000);
        assert_eq!(st.day, "2026-11-29");
        assert!(
            (st.used_kwh - 1200.0 / 3_600_000.0).abs() < 1e-12,
            "{}",
            st.used_kwh
        );
    }

    #[test]
    fn the_day_is_local() {
        let tokyo = Zone::named("Asia/Tokyo").unwrap();
        // 2026-11-28 20:00 UTC is 2026-11-29 05:00 in Tokyo: 19 h to its midnight.
        let at = 1_795_896_000_000; // 2026-11-28T20:00:00Z
        let (day, left) = local_day(&tokyo, at).unwrap();
        assert_eq!(day, "2026-11-29");
        assert_eq!(left, 19 * 3_600_000);
        let (day, left) = local_day(&Zone::utc(), at).unwrap();
        assert_eq!((day.as_str(), left), ("2026-11-28", 4 * 3_600_000));
    }
}
