//! Nonce accounting: counts per chip and chain, and hashrate over sliding windows.
//!
//! Everything here is pure and takes the time as an argument (milliseconds on a monotonic
//! scale), so the window arithmetic is tested without waiting. A nonce stands for
//! `ticket_difficulty × 2^32` hashes on average; the sim driver multiplies that by the board's
//! virtual-hashes-per-real-hash factor, which is why the weight is passed in per nonce rather
//! than derived here.

/// Hashes one nonce at difficulty 1 stands for.
pub const HASHES_PER_DIFF1: f64 = 4_294_967_296.0;

/// A sliding-window sum in fixed buckets: memory is `buckets` floats whatever the rate, which
/// matters with 189 chips on a 256 MB control board.
#[derive(Debug, Clone)]
pub struct Window {
    bucket_ms: u64,
    buckets: Box<[f64]>,
    /// Absolute bucket number (`now_ms / bucket_ms`) of the newest bucket.
    head: u64,
    /// When counting began, so a young window divides by the time it really covered.
    start_ms: u64,
}

impl Window {
    /// A window of `span_ms` split into `buckets` buckets, counting from `now_ms`.
    pub fn new(span_ms: u64, buckets: usize, now_ms: u64) -> Self {
        let buckets = buckets.max(1);
        let bucket_ms = (span_ms / buckets as u64).max(1);
        Window {
            bucket_ms,
            buckets: vec![0.0; buckets].into_boxed_slice(),
            head: now_ms / bucket_ms,
            start_ms: now_ms,
        }
    }

    /// The window's full span in milliseconds.
    pub fn span_ms(&self) -> u64 {
        self.bucket_ms * self.buckets.len() as u64
    }

    fn advance(&mut self, now_ms: u64) {
        let abs = now_ms / self.bucket_ms;
        if abs <= self.head {
            return;
        }
        let n = self.buckets.len() as u64;
        // Clear every bucket that fell out of the window since the last event.
        let gap = (abs - self.head).min(n);
        for k in 1..=gap {
            let idx = ((self.head + k) % n) as usize;
            self.buckets[idx] = 0.0;
        }
        self.head = abs;
    }

    /// Add `value` at `now_ms`. Events older than the newest bucket land in it (time never
    /// runs backwards on the monotonic clock, but a caller's stamps may be slightly out of order).
    pub fn add(&mut self, now_ms: u64, value: f64) {
        self.advance(now_ms);
        let idx = (self.head % self.buckets.len() as u64) as usize;
        self.buckets[idx] += value;
    }

    /// Sum per second over the window ending at `now_ms`.
    pub fn rate_per_s(&mut self, now_ms: u64) -> f64 {
        self.advance(now_ms);
        let n = self.buckets.len() as u64;
        let sum: f64 = self.buckets.iter().sum();
        // The newest bucket is only partly elapsed; the others are whole.
        let partial = now_ms - self.head * self.bucket_ms;
        let covered = ((n - 1) * self.bucket_ms + partial)
            .min(now_ms.saturating_sub(self.start_ms))
            .max(1);
        sum * 1000.0 / covered as f64
    }
}

/// Counts and a 1-minute window for one chip.
#[derive(Debug, Clone)]
pub struct ChipStats {
    /// Nonces that verified against the ticket target.
    pub nonces: u64,
    /// Nonces attributed to this chip that did not verify.
    pub hw_errors: u64,
    /// Monotonic ms of the last verified nonce (or of counting start).
    pub last_nonce_ms: u64,
    /// Hashes over the last minute.
    pub window_1m: Window,
}

impl ChipStats {
    /// A chip with no nonces yet, counting from `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ChipStats {
            nonces: 0,
            hw_errors: 0,
            last_nonce_ms: now_ms,
            window_1m: Window::new(60_000, 12, now_ms),
        }
    }
}

/// Measured hashrate of a chain, hashes per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Over the last 5 seconds.
    pub hs_5s: f64,
    /// Over the last minute.
    pub hs_1m: f64,
    /// Over the last 15 minutes.
    pub hs_15m: f64,
}

/// Counts and windows of one chain and its chips.
#[derive(Debug, Clone)]
pub struct ChainAccounting {
    /// Per chip, by chip index on the chain.
    pub chips: Vec<ChipStats>,
    /// Verified nonces.
    pub nonces: u64,
    /// Nonces that did not verify (or named no known chip).
    pub hw_errors: u64,
    /// Nonces seen before for the same work.
    pub duplicates: u64,
    /// Nonces for work the pool no longer accepts.
    pub stale: u64,
    w5s: Window,
    w1m: Window,
    w15m: Window,
}

impl ChainAccounting {
    /// A chain of `chips` chips, counting from `now_ms`.
    pub fn new(chips: usize, now_ms: u64) -> Self {
        ChainAccounting {
            chips: (0..chips).map(|_| ChipStats::new(now_ms)).collect(),
            nonces: 0,
            hw_errors: 0,
            duplicates: 0,
            stale: 0,
            w5s: Window::new(5_000, 5, now_ms),
            w1m: Window::new(60_000, 12, now_ms),
            w15m: Window::new(900_000, 15, now_ms),
        }
    }

    /// A verified nonce from `chip` standing for `hashes` hashes.
    pub fn record_nonce(&mut self, chip: Option<usize>, now_ms: u64, hashes: f64) {
        self.nonces += 1;
        self.w5s.add(now_ms, hashes);
        self.w1m.add(now_ms, hashes);
        self.w15m.add(now_ms, hashes);
        if let Some(c) = chip.and_then(|c| self.chips.get_mut(c)) {
            c.nonces += 1;
            c.last_nonce_ms = now_ms;
            c.window_1m.add(now_ms, hashes);
        }
    }

    /// A nonce that failed verification, attributed to `chip` when its address was valid.
    pub fn record_hw_error(&mut self, chip: Option<usize>) {
        self.hw_errors += 1;
        if let Some(c) = chip.and_then(|c| self.chips.get_mut(c)) {
            c.hw_errors += 1;
        }
    }

    /// Measured rates at `now_ms`.
    pub fn rates(&mut self, now_ms: u64) -> Rates {
        Rates {
            hs_5s: self.w5s.rate_per_s(now_ms),
            hs_1m: self.w1m.rate_per_s(now_ms),
            hs_15m: self.w15m.rate_per_s(now_ms),
        }
    }

    /// Measured 1-minute rate of one chip, hashes per second.
    pub fn chip_rate_1m(&mut self, chip: usize, now_ms: u64) -> f64 {
        self.chips
            .get_mut(chip)
            .map(|c| c.window_1m.rate_per_s(now_ms))
            .unwrap_or(0.0)
    }

    /// Whether a chip counts as dead: silent for `silence_ms` although it should have found
    /// nonces in that time. The caller picks `silence_ms` as many expected nonce intervals, so
    /// a healthy chip is almost never flagged (P = e^-k for k intervals).
    pub fn chip_silent(&self, chip: usize, now_ms: u64, silence_ms: u64) -> bool {
        self.chips
            .get(chip)
            .is_some_and(|c| now_ms.saturating_sub(c.last_nonce_ms) > silence_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control board is 32-bit: monotonic milliseconds pass 2^32 after 49.7 days of uptime
    /// and counts can pass 4 G; neither may wrap (both are u64, not usize).
    #[test]
    fn rates_and_counts_carry_on_past_two_to_the_32() {
        let start = u64::from(u32::MAX) - 2_000;
        let mut acct = ChainAccounting::new(2, start);
        acct.nonces = u64::from(u32::MAX);
        acct.chips[1].nonces = u64::from(u32::MAX);
        // 10 nonces a second for 10 s across the 2^32 ms boundary, one hash-unit each.
        for t in (start..start + 10_000).step_by(100) {
            acct.record_nonce(Some(1), t, 1.0);
        }
        assert_eq!(acct.nonces, u64::from(u32::MAX) + 100);
        assert_eq!(acct.chips[1].nonces, u64::from(u32::MAX) + 100);
        let now = start + 10_000;
        let r = acct.rates(now);
        assert!((r.hs_5s - 10.0).abs() < 0.5, "{r:?}");
        assert!((r.hs_1m - 10.0).abs() < 0.5, "{r:?}");
        assert!((acct.chip_rate_1m(1, now) - 10.0).abs() < 0.5);
        assert!(!acct.chip_silent(1, now, 1_000));
        assert!(acct.chip_silent(0, now, 1_000));
    }

    #[test]
    fn window_rate_over_full_span() {
        let mut w = Window::new(5_000, 5, 0);
        // 10 per second for 10 s, stamped every 100 ms.
        for t in (0..10_000).step_by(100) {
            w.add(t, 1.0);
        }
        let r = w.rate_per_s(10_000);
        assert!((r - 10.0).abs() < 0.5, "{r}");
    }

    #[test]
    fn young_window_divides_by_elapsed_not_span() {
        let mut w = Window::new(60_000, 12, 1_000);
        w.add(1_500, 30.0);
        // 30 in the 2 s since start: 15/s, not 0.5/s.
        let r = w.rate_per_s(3_000);
        assert!((r - 15.0).abs() < 1e-9, "{r}");
    }

    #[test]
    fn old_events_fall_out() {
        let mut w = Window::new(5_000, 5, 0);
        w.add(100, 1000.0);
        assert!(w.rate_per_s(2_000) > 100.0);
        // Two full spans later nothing is left.
        assert_eq!(w.rate_per_s(12_000), 0.0);
        w.add(12_500, 5.0);
        let r = w.rate_per_s(13_000);
        assert!(r > 0.0 && r < 2.0, "{r}");
    }

    #[test]
    fn chain_accounting_counts_and_attributes() {
        let mut a = ChainAccounting::new(3, 0);
        let h = HASHES_PER_DIFF1;
        for t in 0..60 {
            a.record_nonce(Some(1), t * 1000, h);
        }
        a.record_hw_error(Some(2));
        a.record_hw_error(None);
        assert_eq!(a.nonces, 60);
        assert_eq!(a.chips[1].nonces, 60);
        assert_eq!(a.chips[0].nonces, 0);
        assert_eq!(a.hw_errors, 2);
        assert_eq!(a.chips[2].hw_errors, 1);
        let r = a.rates(60_000);
        // One diff-1 nonce per second is 2^32 H/s.
        assert!((r.hs_1m / h - 1.0).abs() < 0.05, "{}", r.hs_1m / h);
        assert!((r.hs_5s / h - 1.0).abs() < 0.25, "{}", r.hs_5s / h);
        assert!((a.chip_rate_1m(1, 60_000) / h - 1.0).abs() < 0.05);
        assert_eq!(a.chip_rate_1m(0, 60_000), 0.0);
        assert!(a.chip_silent(0, 60_000, 30_000));
        assert!(!a.chip_silent(1, 60_000, 30_000));
    }
}
