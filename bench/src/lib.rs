//! Shared pieces of the benchmark binaries: latency samples and their summary.

use std::time::Duration;

/// Latency samples of one benchmark run.
#[derive(Debug, Default)]
pub struct Samples {
    durations: Vec<Duration>,
}

impl Samples {
    /// Room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            durations: Vec::with_capacity(n),
        }
    }

    /// Record one sample.
    pub fn push(&mut self, d: Duration) {
        self.durations.push(d);
    }

    /// Merge another run's samples.
    pub fn extend(&mut self, other: Samples) {
        self.durations.extend(other.durations);
    }

    /// The `p`-th percentile (0..=100), nearest-rank.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.durations.is_empty() {
            return Duration::ZERO;
        }
        self.durations.sort_unstable();
        let rank = ((p / 100.0) * self.durations.len() as f64).ceil() as usize;
        self.durations[rank.clamp(1, self.durations.len()) - 1]
    }

    /// Print `label: n, p50, p99, max` in microseconds, plus a rate if `wall` is given.
    pub fn report(&mut self, label: &str, wall: Option<Duration>) {
        let n = self.durations.len();
        let p50 = self.percentile(50.0);
        let p99 = self.percentile(99.0);
        let max = self.percentile(100.0);
        let rate = wall
            .map(|w| format!(", {:.0}/s", n as f64 / w.as_secs_f64()))
            .unwrap_or_default();
        println!(
            "{label}: n={n}, p50={:.1} us, p99={:.1} us, max={:.1} us{rate}",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
    }
}
