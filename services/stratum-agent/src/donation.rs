//! Donation scheduling (spec: 0-5 % of Stratum V1 mining time, 3600 s cycle by default, off by
//! default, config read once at start).
//!
//! Pure and clock-injected: the agent passes monotonic milliseconds. Donation time is granted in
//! the second half of each cycle and only until the cycle's budget is used up, and only time
//! actually mined on the donation pool is counted, so what runs can be less than configured
//! (pool unreachable) but never more.

use svcos_common::config::DonationConfig;

/// The donation budget of one configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DonationSchedule {
    cycle_ms: i64,
    budget_ms: i64,
    cycle_start_ms: i64,
    mined_cycle_ms: i64,
    /// Donation time mined in every cycle so far (restored from state on restart).
    pub mined_total_ms: i64,
}

impl DonationSchedule {
    /// A schedule starting its first cycle at `now_ms`; `None` when donation is disabled or 0 %.
    pub fn new(cfg: &DonationConfig, now_ms: i64) -> Option<Self> {
        if !cfg.enabled || cfg.percent <= 0.0 || cfg.pool_url.is_empty() {
            return None;
        }
        let cycle_ms = i64::from(cfg.cycle_s) * 1000;
        // Clamp again here: validation allows at most 5 %, and this is the last line of defence.
        let budget_ms = (cycle_ms as f64 * cfg.percent.min(5.0) / 100.0).floor() as i64;
        (budget_ms > 0).then_some(DonationSchedule {
            cycle_ms,
            budget_ms,
            cycle_start_ms: now_ms,
            mined_cycle_ms: 0,
            mined_total_ms: 0,
        })
    }

    fn roll(&mut self, now_ms: i64) {
        if now_ms >= self.cycle_start_ms + self.cycle_ms {
            let cycles = (now_ms - self.cycle_start_ms) / self.cycle_ms;
            self.cycle_start_ms += cycles * self.cycle_ms;
            self.mined_cycle_ms = 0;
        }
    }

    /// Continue a cycle that began `elapsed_ms` before `now_ms` (saved across a restart) with
    /// `mined_ms` already mined in it, so restarts cannot grant a cycle's budget twice.
    pub fn resume_cycle(&mut self, now_ms: i64, elapsed_ms: i64, mined_ms: i64) {
        if (0..self.cycle_ms).contains(&elapsed_ms) {
            self.cycle_start_ms = now_ms - elapsed_ms;
            self.mined_cycle_ms = mined_ms.clamp(0, self.budget_ms);
        }
    }

    /// Milliseconds since the current cycle began.
    pub fn cycle_elapsed_ms(&mut self, now_ms: i64) -> i64 {
        self.roll(now_ms);
        now_ms - self.cycle_start_ms
    }

    /// Whether donation mining should run now.
    pub fn wants(&mut self, now_ms: i64) -> bool {
        self.roll(now_ms);
        now_ms >= self.cycle_start_ms + self.cycle_ms / 2 && self.mined_cycle_ms < self.budget_ms
    }

    /// Milliseconds of donation budget left in the current cycle.
    pub fn remaining_ms(&mut self, now_ms: i64) -> i64 {
        self.roll(now_ms);
        self.budget_ms - self.mined_cycle_ms
    }

    /// Count donation time actually mined between `from_ms` and `to_ms` (capped at the budget;
    /// time before the current cycle began belongs to the previous cycle's budget).
    pub fn record(&mut self, from_ms: i64, to_ms: i64) {
        let boundary = self.cycle_start_ms + self.cycle_ms;
        let first = to_ms.min(boundary) - from_ms.max(self.cycle_start_ms);
        if first > 0 {
            let granted = first.min(self.budget_ms - self.mined_cycle_ms).max(0);
            self.mined_cycle_ms += granted;
            self.mined_total_ms += granted;
        }
        if to_ms > boundary {
            self.roll(to_ms);
            let rest = to_ms - from_ms.max(self.cycle_start_ms);
            let granted = rest.min(self.budget_ms).max(0);
            self.mined_cycle_ms += granted;
            self.mined_total_ms += granted;
        }
    }

    /// Donation time mined in the current cycle.
    pub fn mined_cycle_ms(&self) -> i64 {
        self.mined_cycle_ms
    }

    /// The per-cycle budget.
    pub fn budget_ms(&self) -> i64 {
        self.budget_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(enabled: bool, percent: f64) -> DonationConfig {
        DonationConfig {
            enabled,
            percent,
            cycle_s: 3600,
            pool_url: "stratum+tcp://donate.example:3333".into(),
            payout_address: "bc1qexample".into(),
            ..Default::default()
        }
    }

    #[test]
    fn disabled_or_zero_means_nothing_at_all() {
        assert!(DonationSchedule::new(&cfg(false, 5.0), 0).is_none());
        assert!(DonationSchedule::new(&cfg(true, 0.0), 0).is_none());
        assert!(DonationSchedule::new(&DonationConfig::default(), 0).is_none());
    }

    #[test]
    fn grants_the_budget_in_the_second_half_and_never_more() {
        let mut s = DonationSchedule::new(&cfg(true, 2.0), 1_000).unwrap();
        assert_eq!(s.budget_ms(), 72_000);
        assert!(!s.wants(1_000));
        assert!(!s.wants(1_000 + 1_799_999));
        let start = 1_000 + 1_800_000;
        assert!(s.wants(start));
        // Mine in 1 s slices the way the agent's ticks do, until the schedule says stop.
        let mut now = start;
        while s.wants(now) {
            s.record(now, now + 1_000);
            now += 1_000;
        }
        assert_eq!(s.mined_cycle_ms(), 72_000);
        assert_eq!(now - start, 72_000);
        // Recording beyond the budget is capped.
        s.record(now, now + 10_000);
        assert_eq!(s.mined_total_ms, 72_000);
        // The next cycle grants again, and only again in its second half.
        let next = 1_000 + 3_600_000;
        assert!(!s.wants(next));
        assert_eq!(s.remaining_ms(next), 72_000);
        assert!(s.wants(next + 1_800_000));
    }

    #[test]
    fn a_restart_resumes_the_cycle_instead_of_granting_it_again() {
        let mut s = DonationSchedule::new(&cfg(true, 5.0), 0).unwrap();
        s.record(1_800_000, 1_980_000);
        assert!(!s.wants(2_000_000));
        // Restarted 2 000 s into the cycle: a fresh schedule would start a new cycle and grant
        // 180 s again within the same hour; resumed, it grants nothing more.
        let elapsed = s.cycle_elapsed_ms(2_000_000);
        let mut after = DonationSchedule::new(&cfg(true, 5.0), 0).unwrap();
        after.resume_cycle(0, elapsed, s.mined_cycle_ms());
        assert!(!after.wants(1_000));
        assert!(!after.wants(1_599_999));
        // The next cycle begins where the original one would have.
        assert!(after.wants(1_600_000 + 1_800_000));
    }

    #[test]
    fn unreachable_pool_means_less_not_later_catch_up() {
        let mut s = DonationSchedule::new(&cfg(true, 5.0), 0).unwrap();
        // Only 10 s mined in the whole first cycle.
        s.record(1_800_000, 1_810_000);
        assert!(s.wants(3_599_000));
        // Next cycle: the budget is the plain budget, nothing carried over.
        assert_eq!(s.remaining_ms(3_600_000), 180_000);
        assert_eq!(s.mined_total_ms, 10_000);
    }
}
