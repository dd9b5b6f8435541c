//! Wall-clock helpers: the Unix time now, and RFC 3339 in UTC (formatted by jiff).

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time; outside jiff's range (years -9999 to 9999) the
/// Unix epoch.
pub fn rfc3339(unix_s: i64) -> String {
    jiff::Timestamp::from_second(unix_s)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59Z");
    }
}
