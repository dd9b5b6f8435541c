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

/// Failed logins a client address may make before it has to wait.
pub const LOGIN_FREE_FAILURES: u32 = 5;
/// The first wait after the free failures; each further failure doubles it.
pub const LOGIN_FIRST_DELAY_MS: i64 = 1_000;
/// The longest wait: the owner typing the right password from a throttled address is never
/// kept out longer than this.
pub const LOGIN_MAX_DELAY_MS: i64 = 30_000;
/// A client's failures are forgotten after this long without a new one.
pub const LOGIN_FORGET_MS: i64 = 15 * 60_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    /// Unix ms before which the next attempt is refused without checking the password.
    blocked_until_ms: i64,
    last_ms: i64,
}

/// Failed-login throttle per client address: after [`LOGIN_FREE_FAILURES`] failures each new
/// one makes the client wait twice as long before the next attempt (1 s, 2 s, 4 s, ... capped at
/// [`LOGIN_MAX_DELAY_MS`]). A refused attempt is not checked (no hash work, no oracle) and does
/// not lengthen the wait, so the owner's correct password gets through as soon as the wait ends,
/// and a success clears the record. Other addresses are never affected.
#[derive(Debug, Clone, Default)]
pub struct LoginThrottle {
    clients: HashMap<String, Failures>,
}

impl LoginThrottle {
    /// A login attempt from `client`: refused with `Err(ms)` (retry after `ms`) while its wait
    /// runs, else counted as a failure until [`Self::succeeded`] says otherwise. Counting before
    /// the hash is checked means parallel guesses cannot all slip through before the first result.
    pub fn begin(&mut self, client: &str, now_ms: i64) -> Result<(), i64> {
        let key = normalise_client(client);
        if let Some(f) = self.clients.get(&key)
            && now_ms < f.blocked_until_ms
        {
            return Err(f.blocked_until_ms - now_ms);
        }
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED {
            self.clients
                .retain(|_, f| f.last_ms + LOGIN_FORGET_MS > now_ms);
            if self.clients.len() >= MAX_TRACKED {
                self.make_room(now_ms);
            }
        }
        let f = self.clients.entry(key).or_insert(Failures {
            count: 0,
            blocked_until_ms: 0,
            last_ms: now_ms,
        });
        if f.last_ms + LOGIN_FORGET_MS <= now_ms {
            f.count = 0;
        }
        f.count += 1;
        f.last_ms = now_ms;
        let delay = match f.count.checked_sub(LOGIN_FREE_FAILURES) {
            None | Some(0) => 0,
            Some(over) => LOGIN_FIRST_DELAY_MS
                .saturating_mul(1_i64 << (over - 1).min(20))
                .min(LOGIN_MAX_DELAY_MS),
        };
        f.blocked_until_ms = now_ms + delay;
        Ok(())
    }

    /// Drop one record to admit a new address during a flood from thousands of them. An address
    /// still inside its free failures goes first (least recently seen), so fresh addresses evict
    /// each other and a flood cannot wipe the waits of the addresses already throttled; only
    /// when every record carries a wait does the one ending soonest go.
    fn make_room(&mut self, now_ms: i64) {
        let victim = self
            .clients
            .iter()
            .min_by_key(|(_, f)| {
                let blocked = f.blocked_until_ms > now_ms;
                (
                    blocked,
                    if blocked {
                        f.blocked_until_ms
                    } else {
                        f.last_ms
                    },
                )
            })
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            self.clients.remove(&k);
        }
    }

    /// The wait `client` now has before its next attempt (0 when none).
    pub fn wait_ms(&self, client: &str, now_ms: i64) -> i64 {
        self.clients
            .get(&normalise_client(client))
            .map_or(0, |f| (f.blocked_until_ms - now_ms).max(0))
    }

    /// A correct password from `client`: forget its failures.
    pub fn succeeded(&mut self, client: &str) {
        self.clients.remove(&normalise_client(client));
    }
}

/// One key per client however its address is spelled (`::ffff:10.0.0.1` is `10.0.0.1`). An
/// IPv6 client is its /64: a host on the LAN picks any address of its prefix (SLAAC privacy
/// addresses), so a key per address would give a guesser a fresh allowance per address. The
/// connection caps count clients the same way ([`svcos_common::connlimit::client_key`]).
fn normalise_client(client: &str) -> String {
    let trimmed = client.trim();
    match trimmed
        .parse::<IpAddr>()
        .map(svcos_common::connlimit::client_key)
    {
        Ok(IpAddr::V6(prefix)) => format!("{prefix}/64"),
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
    fn login_throttle_grows_caps_and_clears() {
        let mut t = LoginThrottle::default();
        let mut now = 0;
        for _ in 0..LOGIN_FREE_FAILURES {
            assert_eq!(t.begin("10.0.0.9", now), Ok(()));
            assert_eq!(t.wait_ms("10.0.0.9", now), 0);
        }
        let mut waits = Vec::new();
        for _ in 0..8 {
            assert_eq!(t.begin("10.0.0.9", now), Ok(()));
            let wait = t.wait_ms("10.0.0.9", now);
            waits.push(wait);
            // Refused while waiting, without lengthening the wait.
            assert_eq!(t.begin("10.0.0.9", now + wait - 1), Err(1));
            assert_eq!(t.wait_ms("10.0.0.9", now + wait - 1), 1);
            now += wait;
        }
        assert_eq!(
            waits,
            [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
        );
        // Another address is untouched; the mapped spelling is the same address.
        assert_eq!(t.begin("10.0.0.10", now - 1), Ok(()));
        assert!(t.begin("::ffff:10.0.0.9", now - 1).is_err());
        // The right password after the wait clears the record.
        assert_eq!(t.begin("10.0.0.9", now), Ok(()));
        t.succeeded("10.0.0.9");
        assert_eq!(t.wait_ms("10.0.0.9", now), 0);
        // Old failures are forgotten.
        let mut t = LoginThrottle::default();
        for i in 0..LOGIN_FREE_FAILURES + 3 {
            let _ = t.begin("10.0.0.9", i64::from(i) * LOGIN_MAX_DELAY_MS);
        }
        let later = LOGIN_FORGET_MS * 2;
        assert_eq!(t.begin("10.0.0.9", later), Ok(()));
        assert_eq!(t.wait_ms("10.0.0.9", later), 0);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
        assert_eq!(retry_after_secs(60_000), 60);
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let mut t = LoginThrottle::default();
        // Each guess from a new address of the same /64 counts against the same allowance.
        for i in 0..=LOGIN_FREE_FAILURES {
            assert_eq!(t.begin(&format!("fd00:1:2:3::{i:x}"), 0), Ok(()));
        }
        assert_eq!(t.wait_ms("fd00:1:2:3:aaaa::1", 0), LOGIN_FIRST_DELAY_MS);
        assert!(t.begin("fd00:1:2:3:bbbb::2", 1).is_err());
        // The next /64 is another client.
        assert_eq!(t.wait_ms("fd00:1:2:4::1", 1), 0);
    }

    #[test]
    fn a_flood_of_new_addresses_keeps_existing_waits() {
        let mut t = LoginThrottle::default();
        let mut now = 0;
        for _ in 0..LOGIN_FREE_FAILURES + 4 {
            assert_eq!(t.begin("10.9.9.9", now), Ok(()));
            now += t.wait_ms("10.9.9.9", now);
        }
        assert_eq!(t.begin("10.9.9.9", now), Ok(()));
        let wait = t.wait_ms("10.9.9.9", now);
        assert_eq!(wait, 16 * LOGIN_FIRST_DELAY_MS);
        // Twice the table's size in fresh addresses, one guess each, right afterwards.
        for i in 0..2 * MAX_TRACKED as u32 {
            let addr = std::net::Ipv4Addr::from(0x0b00_0000 + i);
            assert_eq!(t.begin(&addr.to_string(), now + 1), Ok(()));
        }
        assert!(t.clients.len() <= MAX_TRACKED);
        assert_eq!(t.wait_ms("10.9.9.9", now + 1), wait - 1);
        assert!(t.begin("10.9.9.9", now + 2).is_err());
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
