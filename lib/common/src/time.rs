//! An injectable wall clock, so expiry rules can be tested without waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;
    /// Now, in Unix seconds.
    fn now_s(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        unix_ms()
    }
}

/// A clock tests move by hand.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `ms`.
    pub fn at(ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(ms)))
    }
    /// Move forward by `ms`.
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Now in Unix milliseconds.
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Now in Unix microseconds (latency accounting across processes).
pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// `ms` (Unix ms) as RFC 3339 UTC with milliseconds (`2026-11-29T03:49:13.120Z`): the stamp the
/// supervisor puts before each captured log line and the merged log view shows. Outside jiff's
/// range (years -9999 to 9999) it is the Unix epoch.
pub fn rfc3339_ms(ms: i64) -> String {
    let ts = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{ts:.3}")
}

#[cfg(test)]
mod rfc3339_tests {
    #[test]
    fn stamps_have_millisecond_precision_and_read_back() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        let s = super::rfc3339_ms(1_795_924_153_120);
        assert_eq!(s, "2026-11-29T03:49:13.120Z");
        let back: jiff::Timestamp = s.parse().unwrap();
        assert_eq!(back.as_millisecond(), 1_795_924_153_120);
    }
}
