//! Sliding-window attempt limit per client address (pure; time passed in).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Setup attempts allowed per client address within [`SETUP_WINDOW_MS`] (spec: 3).
pub const SETUP_ATTEMPTS: usize = 3;
/// The setup limit's window (spec: 60 s).
pub const SETUP_WINDOW_MS: i64 = 60_000;
/// Addresses tracked at most; bounds memory when many addresses try once each.
const MAX_TRACKED: usize = 4096;

/// Attempts per client within a sliding window.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    attempts: usize,
    window_ms: i64,
    clients: HashMap<String, VecDeque<i64>>,
}

impl RateLimiter {
    /// `attempts` per `window_ms` per client.
    pub fn new(attempts: usize, window_ms: i64) -> Self {
        RateLimiter {
            attempts,
            window_ms,
            clients: HashMap::new(),
        }
    }

    /// The spec's setup limit: 3 per 60 s.
    pub fn setup() -> Self {
        Self::new(SETUP_ATTEMPTS, SETUP_WINDOW_MS)
    }

    /// Count an attempt by `client` at `now_ms`. `Err(ms)` refuses it: retry after `ms`.
    /// Refused attempts are not counted, so waiting out the window always works.
    pub fn attempt(&mut self, client: &str, now_ms: i64) -> Result<(), i64> {
        let key = normalise_client(client);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED {
            self.forget_idle(now_ms);
            if self.clients.len() >= MAX_TRACKED {
                // Only reachable under a flood from thousands of addresses: refuse new ones
                // until the window frees a slot rather than grow without bound.
                return Err(self.window_ms);
            }
        }
        let window_ms = self.window_ms;
        let times = self.clients.entry(key).or_default();
        while times.front().is_some_and(|&t| t + window_ms <= now_ms) {
            times.pop_front();
        }
        if times.len() >= self.attempts {
            let oldest = *times.front().expect("len >= attempts >= 1");
            return Err((oldest + window_ms - now_ms).max(1));
        }
        times.push_back(now_ms);
        Ok(())
    }

    fn forget_idle(&mut self, now_ms: i64) {
        let window_ms = self.window_ms;
        self.clients
            .retain(|_, times| times.back().is_some_and(|&t| t + window_ms > now_ms));
    }
}

/// One key per address however it is spelled (`::ffff:10.0.0.1` is `10.0.0.1`).
fn normalise_client(client: &str) -> String {
    let trimmed = client.trim();
    match trimmed.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        Ok(ip) => ip.to_string(),
        // Not an address (a unit test, or a caller without one): bounded, used as is.
        Err(_) => trimmed.chars().take(64).collect(),
    }
}

/// Whole seconds to announce for a wait of `ms` (rounded up, at least 1).
pub fn retry_after_secs(ms: i64) -> u64 {
    (ms.max(1) as u64).div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_per_window_per_client() {
        let mut rl = RateLimiter::setup();
        let t0 = 1_000_000;
        assert_eq!(rl.attempt("10.0.0.1", t0), Ok(()));
        assert_eq!(rl.attempt("10.0.0.1", t0 + 10_000), Ok(()));
        assert_eq!(rl.attempt("10.0.0.1", t0 + 20_000), Ok(()));
        // 4th: wait until the first attempt leaves the window.
        assert_eq!(rl.attempt("10.0.0.1", t0 + 30_000), Err(30_000));
        // Another address is not affected; the mapped form is the same address.
        assert_eq!(rl.attempt("10.0.0.2", t0 + 30_000), Ok(()));
        assert_eq!(rl.attempt("::ffff:10.0.0.1", t0 + 30_000), Err(30_000));
        // Sliding: one slot frees when the first attempt is 60 s old.
        assert_eq!(rl.attempt("10.0.0.1", t0 + 59_999), Err(1));
        assert_eq!(rl.attempt("10.0.0.1", t0 + 60_000), Ok(()));
        assert_eq!(rl.attempt("10.0.0.1", t0 + 60_001), Err(9_999));
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
        assert_eq!(retry_after_secs(60_000), 60);
    }

    #[test]
    fn tracking_is_bounded() {
        let mut rl = RateLimiter::new(1, 1000);
        for i in 0..MAX_TRACKED {
            rl.attempt(&format!("c{i}"), 0).unwrap();
        }
        assert!(rl.attempt("newcomer", 500).is_err());
        // Once the window has passed the idle entries are forgotten.
        assert_eq!(rl.attempt("newcomer", 1000), Ok(()));
    }
}
