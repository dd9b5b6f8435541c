//! Daily local-time windows ("22:00-07:00 every day") in a time zone with daylight saving: the
//! one rule night (quiet) hours and the tuner's time-of-use windows are evaluated by.
//!
//! A window is two wall-clock minutes of the day, `start` in 0..1440 and `end` in 0..=1440
//! (1440 = "24:00", the next midnight). `end < start` crosses midnight: the occurrence that
//! starts on day D ends on day D+1. `start == end` is an empty window (never inside; "all
//! day" is `00:00-24:00`). Occurrences are half-open: the start instant is inside, the end
//! instant is not.
//!
//! Each occurrence is turned into instants through the zone's rules (the system tz database,
//! `/usr/share/zoneinfo`; `tzdata` on the image), so a window follows daylight saving:
//! - a wall-clock time skipped by a spring-forward gap resolves to the first instant after the
//!   gap (02:30 on a day whose 02:00-03:00 does not exist means 03:00 daylight time); a window
//!   lying wholly inside the gap is empty that day;
//! - a wall-clock time repeated by a fall-back fold resolves to its first occurrence (01:30 on
//!   a day with 01:00-02:00 twice means 01:30 daylight time), for starts and ends alike, so a
//!   window never runs through the repeated hour twice.

pub use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};

/// Minutes in a day.
pub const DAY_MIN: u32 = 1440;

/// A time zone and the name it is reported under.
#[derive(Debug, Clone)]
pub struct Zone {
    /// The zone's rules.
    pub tz: TimeZone,
    /// IANA name ("Europe/Berlin"), or "UTC+02:00" for a fixed offset.
    pub name: String,
}

/// Why a zone name is refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name:?} is not a time zone of the system tz database (an IANA name such as \"Europe/Berlin\" or \"UTC\"): {reason}"
)]
pub struct ZoneError {
    /// The name given.
    pub name: String,
    /// The database's answer.
    pub reason: String,
}

impl Zone {
    /// UTC (needs no tz database).
    pub fn utc() -> Zone {
        Zone {
            tz: TimeZone::UTC,
            name: "UTC".into(),
        }
    }

    /// An IANA zone from the system tz database.
    pub fn named(name: &str) -> Result<Zone, ZoneError> {
        if name == "UTC" {
            return Ok(Zone::utc());
        }
        // A path-like name must not read files outside the database.
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|p| p == "..") {
            return Err(ZoneError {
                name: name.into(),
                reason: "not a zone name".into(),
            });
        }
        // The database matches names case-insensitively; answers carry its spelling.
        TimeZone::get(name)
            .map(|tz| Zone {
                name: tz.iana_name().unwrap_or(name).to_string(),
                tz,
            })
            .map_err(|e| ZoneError {
                name: name.into(),
                reason: e.to_string(),
            })
    }

    /// A fixed offset east of UTC, minutes (no daylight saving: the legacy `utc_offset_min`).
    pub fn fixed_offset(minutes: i32) -> Zone {
        if minutes == 0 {
            return Zone::utc();
        }
        let offset = Offset::from_seconds(minutes.clamp(-1080, 1080) * 60).unwrap_or(Offset::UTC);
        let sign = if minutes < 0 { '-' } else { '+' };
        let m = minutes.unsigned_abs();
        Zone {
            tz: TimeZone::fixed(offset),
            name: format!("UTC{sign}{:02}:{:02}", m / 60, m % 60),
        }
    }

    /// The instant as RFC 3339 with this zone's offset at that instant ("2026-03-08T03:00:00-04:00"),
    /// in whole seconds.
    pub fn rfc3339(&self, at: Timestamp) -> String {
        let whole = Timestamp::from_second(at.as_second()).unwrap_or(at);
        whole.display_with_offset(self.tz.to_offset(at)).to_string()
    }
}

/// The zone in force, read by the loops that evaluate windows and replaced by whoever reloads
/// the config, so a `[system].timezone` change applies without a restart.
#[derive(Debug, Clone)]
pub struct SharedZone(std::sync::Arc<std::sync::RwLock<Zone>>);

impl SharedZone {
    /// A cell holding `zone`.
    pub fn new(zone: Zone) -> SharedZone {
        SharedZone(std::sync::Arc::new(std::sync::RwLock::new(zone)))
    }

    /// The zone in force.
    pub fn get(&self) -> Zone {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the zone.
    pub fn set(&self, zone: Zone) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = zone;
    }
}

/// Minutes after midnight of a "HH:MM" time, 00:00-23:59.
pub fn parse_hhmm(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// A window end: "HH:MM" or "24:00" (the next midnight).
pub fn parse_hhmm_end(s: &str) -> Option<u32> {
    if s == "24:00" {
        Some(DAY_MIN)
    } else {
        parse_hhmm(s)
    }
}

/// "HH:MM" of a minute of the day (1440 as "24:00").
pub fn hhmm(minute: u32) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// A daily window in local wall-clock minutes (see the module doc for its rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DailyWindow {
    start: u32,
    end: u32,
}

impl DailyWindow {
    /// `start` in 0..1440, `end` in 0..=1440; `None` outside those ranges.
    pub fn new(start: u32, end: u32) -> Option<DailyWindow> {
        (start < DAY_MIN && end <= DAY_MIN).then_some(DailyWindow { start, end })
    }

    /// Whether the window never holds (`start == end`).
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether a wall-clock minute of the day falls inside, ignoring any zone (what overlap
    /// checks between windows of the same zone compare).
    pub fn contains_minute(&self, minute: u32) -> bool {
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            !self.is_empty() && (minute >= self.start || minute < self.end)
        }
    }

    /// The occurrence that starts on local date `day`, as instants `[start, end)`; `None`
    /// when empty (always, or that day because of a gap).
    fn occurrence(&self, tz: &TimeZone, day: Date) -> Option<(Timestamp, Timestamp)> {
        if self.is_empty() {
            return None;
        }
        let start = resolve(tz, day, self.start)?;
        let end_day = if self.end <= self.start {
            day.tomorrow().ok()?
        } else {
            day
        };
        let end = resolve(tz, end_day, self.end)?;
        (start < end).then_some((start, end))
    }

    /// The occurrences that can hold an instant whose local date is `day` or that follow it.
    fn occurrences_around(
        &self,
        tz: &TimeZone,
        at: Timestamp,
        days_after: i64,
    ) -> Vec<(Timestamp, Timestamp)> {
        let today = tz.to_datetime(at).date();
        (-1..=days_after)
            .filter_map(|d| today.checked_add(jiff::Span::new().days(d)).ok())
            .filter_map(|day| self.occurrence(tz, day))
            .collect()
    }

    /// Whether `at` falls inside the window in zone `tz`.
    pub fn contains(&self, tz: &TimeZone, at: Timestamp) -> bool {
        self.occurrences_around(tz, at, 0)
            .iter()
            .any(|(s, e)| *s <= at && at < *e)
    }

    /// The first instant after `at` at which [`contains`](Self::contains) changes; `None`
    /// for a window that is always or never inside over the next days.
    pub fn next_transition(&self, tz: &TimeZone, at: Timestamp) -> Option<Timestamp> {
        let now = self.contains(tz, at);
        let mut edges: Vec<Timestamp> = self
            .occurrences_around(tz, at, 3)
            .into_iter()
            .flat_map(|(s, e)| [s, e])
            .filter(|t| *t > at)
            .collect();
        edges.sort();
        edges.into_iter().find(|t| self.contains(tz, *t) != now)
    }
}

/// The local date of `at` in `tz` ("YYYY-MM-DD") and the instant that day ends (the next
/// local midnight, by the same gap and fold rules as the windows): a daily budget's day.
pub fn local_day(tz: &TimeZone, at: Timestamp) -> Option<(String, Timestamp)> {
    let day = tz.to_offset(at).to_datetime(at).date();
    let end = resolve(tz, day, DAY_MIN)?;
    let name = format!("{:04}-{:02}-{:02}", day.year(), day.month(), day.day());
    Some((name, end))
}

/// The instant of wall-clock `minute` (0..=1440) on local date `day`: a skipped time is the
/// first instant after the gap, a repeated time its first occurrence.
fn resolve(tz: &TimeZone, day: Date, minute: u32) -> Option<Timestamp> {
    let dt: DateTime = if minute >= DAY_MIN {
        day.tomorrow().ok()?.at(0, 0, 0, 0)
    } else {
        day.at((minute / 60) as i8, (minute % 60) as i8, 0, 0)
    };
    match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset the time lands before the gap; the zone's next
            // transition from there is the end of the gap.
            let early = after.to_timestamp(dt).ok()?;
            tz.following(early).next().map(|t| t.timestamp())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn zone(name: &str) -> Zone {
        Zone::named(name).expect("tzdata installed (tests/run installs it)")
    }

    #[test]
    fn a_local_day_ends_at_the_next_local_midnight_even_on_a_23_hour_day() {
        let berlin = zone("Europe/Berlin");
        // (instant, local date, end of that day)
        let rows = [
            // 00:30 CET on the spring-forward day: it has 23 hours, ending 22:00 UTC.
            ("2026-03-28T23:30:00Z", "2026-03-29", "2026-03-29T22:00:00Z"),
            // The fall-back day has 25 hours: 00:00 CEST to 00:00 CET.
            ("2026-10-24T22:00:00Z", "2026-10-25", "2026-10-25T23:00:00Z"),
            ("2026-11-28T12:00:00Z", "2026-11-28", "2026-11-28T23:00:00Z"),
        ];
        for (instant, day, end) in rows {
            assert_eq!(
                local_day(&berlin.tz, at(instant)),
                Some((day.to_string(), at(end))),
                "{instant}"
            );
        }
    }

    fn w(start: &str, end: &str) -> DailyWindow {
        DailyWindow::new(parse_hhmm(start).unwrap(), parse_hhmm_end(end).unwrap()).unwrap()
    }

    /// (window, instant, inside, next transition as RFC 3339 in the zone).
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        bool,
        Option<&'static str>,
    );

    fn check(z: &Zone, cases: &[Case]) {
        for (start_end, instant, _why, inside, next) in cases {
            let (s, e) = start_end.split_once('-').unwrap();
            let win = w(s, e);
            let t = at(instant);
            assert_eq!(win.contains(&z.tz, t), *inside, "{start_end} at {instant}");
            let got = win.next_transition(&z.tz, t).map(|t| z.rfc3339(t));
            assert_eq!(got.as_deref(), *next, "{start_end} next after {instant}");
        }
    }

    #[test]
    fn toronto_spring_forward_2026_03_08() {
        // 02:00 EST jumps to 03:00 EDT at 07:00Z.
        check(
            &zone("America/Toronto"),
            &[
                (
                    "22:00-07:00",
                    "2026-03-08T05:00:00Z",
                    "00:00 EST, inside",
                    true,
                    Some("2026-03-08T07:00:00-04:00"),
                ),
                // 07:00 EDT is 11:00Z, an hour earlier in UTC than the day before.
                (
                    "22:00-07:00",
                    "2026-03-08T11:00:00Z",
                    "07:00 EDT, end",
                    false,
                    Some("2026-03-08T22:00:00-04:00"),
                ),
                (
                    "22:00-07:00",
                    "2026-03-08T10:59:00Z",
                    "06:59 EDT",
                    true,
                    Some("2026-03-08T07:00:00-04:00"),
                ),
                // A start inside the gap starts when the gap ends.
                (
                    "02:30-05:00",
                    "2026-03-08T06:59:00Z",
                    "01:59 EST",
                    false,
                    Some("2026-03-08T03:00:00-04:00"),
                ),
                (
                    "02:30-05:00",
                    "2026-03-08T07:00:00Z",
                    "03:00 EDT",
                    true,
                    Some("2026-03-08T05:00:00-04:00"),
                ),
                // A window wholly inside the gap does not happen that day.
                (
                    "02:10-02:50",
                    "2026-03-08T06:30:00Z",
                    "01:30 EST",
                    false,
                    Some("2026-03-09T02:10:00-04:00"),
                ),
                // An end inside the gap ends when the gap ends.
                (
                    "23:00-02:30",
                    "2026-03-08T06:59:00Z",
                    "01:59 EST",
                    true,
                    Some("2026-03-08T03:00:00-04:00"),
                ),
            ],
        );
    }

    #[test]
    fn toronto_fall_back_2026_11_01() {
        // 02:00 EDT falls back to 01:00 EST at 06:00Z; 01:00-02:00 happens twice.
        check(
            &zone("America/Toronto"),
            &[
                // An end in the fold ends at its first occurrence (01:30 EDT = 05:30Z).
                (
                    "22:00-01:30",
                    "2026-11-01T05:29:00Z",
                    "01:29 EDT",
                    true,
                    Some("2026-11-01T01:30:00-04:00"),
                ),
                (
                    "22:00-01:30",
                    "2026-11-01T06:15:00Z",
                    "01:15 EST, second time",
                    false,
                    Some("2026-11-01T22:00:00-05:00"),
                ),
                // A start in the fold starts at its first occurrence and does not restart.
                (
                    "01:30-03:00",
                    "2026-11-01T05:30:00Z",
                    "01:30 EDT",
                    true,
                    Some("2026-11-01T03:00:00-05:00"),
                ),
                (
                    "01:30-03:00",
                    "2026-11-01T06:45:00Z",
                    "01:45 EST",
                    true,
                    Some("2026-11-01T03:00:00-05:00"),
                ),
                // The night that contains the fold lasts an hour longer in UTC.
                (
                    "22:00-07:00",
                    "2026-11-01T11:30:00Z",
                    "06:30 EST",
                    true,
                    Some("2026-11-01T07:00:00-05:00"),
                ),
            ],
        );
    }

    #[test]
    fn berlin_2026_dst_changes_and_midnight() {
        let z = zone("Europe/Berlin");
        check(
            &z,
            &[
                // Spring forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
                (
                    "23:00-06:00",
                    "2026-03-28T22:30:00Z",
                    "23:30 CET, over midnight",
                    true,
                    Some("2026-03-29T06:00:00+02:00"),
                ),
                (
                    "23:00-06:00",
                    "2026-03-29T04:00:00Z",
                    "06:00 CEST, end",
                    false,
                    Some("2026-03-29T23:00:00+02:00"),
                ),
                (
                    "02:00-04:00",
                    "2026-03-29T00:59:00Z",
                    "01:59 CET",
                    false,
                    Some("2026-03-29T03:00:00+02:00"),
                ),
                // Fall back 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
                (
                    "22:00-02:30",
                    "2026-10-25T00:29:00Z",
                    "02:29 CEST",
                    true,
                    Some("2026-10-25T02:30:00+02:00"),
                ),
                (
                    "22:00-02:30",
                    "2026-10-25T01:10:00Z",
                    "02:10 CET",
                    false,
                    Some("2026-10-25T22:00:00+01:00"),
                ),
                ("00:00-24:00", "2026-10-25T01:10:00Z", "all day", true, None),
            ],
        );
        assert!(!w("08:00", "08:00").contains(&z.tz, at("2026-10-25T07:00:00Z")));
        assert_eq!(
            w("08:00", "08:00").next_transition(&z.tz, at("2026-10-25T07:00:00Z")),
            None
        );
    }

    #[test]
    fn fixed_offsets_and_names() {
        let z = Zone::fixed_offset(120);
        assert_eq!(z.name, "UTC+02:00");
        // 21:00 UTC is 23:00 at +02:00, inside 22:00-07:00.
        assert!(w("22:00", "07:00").contains(&z.tz, at("2026-07-01T21:00:00Z")));
        assert_eq!(Zone::fixed_offset(-330).name, "UTC-05:30");
        assert_eq!(
            Zone::utc().rfc3339(at("2026-07-01T21:00:00Z")),
            "2026-07-01T21:00:00+00:00"
        );
        assert_eq!(
            Zone::fixed_offset(-330).rfc3339(at("2026-07-01T21:00:00.75Z")),
            "2026-07-01T15:30:00-05:30"
        );
        for bad in ["Mars/Olympus", "", "../../etc/passwd", "/etc/localtime"] {
            assert!(Zone::named(bad).is_err(), "{bad}");
        }
        assert_eq!(zone("America/Toronto").name, "America/Toronto");
        assert_eq!(zone("america/toronto").name, "America/Toronto");
    }

    #[test]
    fn wall_clock_minutes() {
        assert_eq!(parse_hhmm("07:30"), Some(450));
        assert_eq!(parse_hhmm("24:00"), None);
        assert_eq!(parse_hhmm_end("24:00"), Some(1440));
        assert_eq!(parse_hhmm("7:30"), None);
        assert_eq!(hhmm(1440), "24:00");
        let night = w("22:00", "07:00");
        assert!(
            night.contains_minute(23 * 60)
                && night.contains_minute(0)
                && !night.contains_minute(7 * 60)
        );
        let evening = w("18:00", "24:00");
        assert!(evening.contains_minute(1439) && !evening.contains_minute(0));
        assert!(
            w("00:00", "24:00").contains_minute(0) && w("00:00", "24:00").contains_minute(1439)
        );
        assert!(!w("05:00", "05:00").contains_minute(5 * 60));
    }
}
