//! The one chip-health rule. `GET /api/chips/health` (gateway, lifetime counters), hw-agent's
//! chip-health diagnostics run (counters over its window, plus a register read) and the tuner's
//! `GetChipHealth` (counters since its last point change) all judge a chip here, so for the
//! same counts they cannot disagree; they differ only in the window they count over.
//!
//! A chip is
//! - **dead** when it does not answer, or found no nonce where its share of the chain's nonces
//!   (by frequency) was at least [`MIN_EXPECTED_FOR_DEAD`];
//! - **weak** when its HW-error share is above [`WEAK_HW_ERROR_SHARE`] beyond chance (at least
//!   [`MIN_HW_ERRORS_FOR_WEAK`] errors and the 95 % Wilson lower bound of the share above the
//!   threshold: a healthy chip's 4 errors in 58 nonces read 6.5 % by luck, a failing chip's
//!   cannot), or found fewer than [`WEAK_NONCE_RATIO`] of its share;
//! - **ok** otherwise.
//!
//! The tuner's decision to trim a chip's frequency is a tuning policy with its own configurable
//! threshold, not a verdict: a trimmed chip the rule calls ok is reported ok with its trim.

/// HW-error share above which (beyond chance) a chip is weak.
pub const WEAK_HW_ERROR_SHARE: f64 = 0.05;
/// Nonces below this fraction of the chip's share make it weak.
pub const WEAK_NONCE_RATIO: f64 = 0.5;
/// The fewest expected nonces that make zero found conclusive (dead); twice this before a low
/// count makes a chip weak.
pub const MIN_EXPECTED_FOR_DEAD: f64 = 5.0;
/// The fewest HW errors that can make a chip weak (fewer are noise at any share).
pub const MIN_HW_ERRORS_FOR_WEAK: u64 = 3;

/// A chip's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChipVerdict {
    /// Hashing as its share says.
    Ok,
    /// Answering, but erring or finding too little.
    Weak,
    /// Not answering, or finding nothing.
    Dead,
}

impl ChipVerdict {
    /// The word every surface reports: `ok`, `weak`, `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChipVerdict::Ok => "ok",
            ChipVerdict::Weak => "weak",
            ChipVerdict::Dead => "dead",
        }
    }
}

/// One chip's counts over some window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChipCounts {
    /// Whether the chip answers (telemetry's `alive`, or a register read in diagnostics).
    pub answering: bool,
    /// Verified nonces.
    pub nonces: u64,
    /// Nonces that failed verification.
    pub hw_errors: u64,
    /// Its PLL frequency, MHz (its share of the chain's work).
    pub frequency_mhz: f64,
}

/// A verdict with the evidence for it (empty when ok).
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The verdict.
    pub verdict: ChipVerdict,
    /// Nonces its frequency share of the chain's nonces would give.
    pub expected_nonces: f64,
    /// Human-readable reasons.
    pub reasons: Vec<String>,
}

/// Judge every chip of a chain: `chain_nonces` is the chain's nonce count over the same window,
/// split among its chips by frequency to give each chip's expected share.
pub fn judge_chain(chain_nonces: u64, chips: &[ChipCounts]) -> Vec<Judgement> {
    let mhz_sum: f64 = chips.iter().map(|c| c.frequency_mhz.max(0.0)).sum();
    chips
        .iter()
        .map(|c| {
            let expected = if mhz_sum > 0.0 {
                chain_nonces as f64 * c.frequency_mhz.max(0.0) / mhz_sum
            } else {
                0.0
            };
            judge(c, expected)
        })
        .collect()
}

/// Judge one chip given the nonces its share should have found.
pub fn judge(c: &ChipCounts, expected_nonces: f64) -> Judgement {
    let expected = expected_nonces;
    let mut reasons = Vec::new();
    if !c.answering {
        reasons.push("not answering".to_string());
    }
    if c.nonces == 0 && expected >= MIN_EXPECTED_FOR_DEAD {
        reasons.push(format!("0 nonces where its share was {expected:.1}"));
    }
    if !reasons.is_empty() {
        return Judgement {
            verdict: ChipVerdict::Dead,
            expected_nonces: expected,
            reasons,
        };
    }
    let found = c.nonces + c.hw_errors;
    if c.hw_errors >= MIN_HW_ERRORS_FOR_WEAK
        && wilson_lower_bound(c.hw_errors, found) > WEAK_HW_ERROR_SHARE
    {
        reasons.push(format!(
            "{} HW errors ({:.1} % of its nonces)",
            c.hw_errors,
            c.hw_errors as f64 / found as f64 * 100.0
        ));
    }
    if expected >= 2.0 * MIN_EXPECTED_FOR_DEAD && (c.nonces as f64) < expected * WEAK_NONCE_RATIO {
        reasons.push(format!(
            "{} nonces, {:.0} % of its share ({expected:.1})",
            c.nonces,
            c.nonces as f64 / expected * 100.0
        ));
    }
    Judgement {
        verdict: if reasons.is_empty() {
            ChipVerdict::Ok
        } else {
            ChipVerdict::Weak
        },
        expected_nonces: expected,
        reasons,
    }
}

/// The lower end of the 95 % Wilson score interval of `hits` in `trials`: the smallest rate
/// the observation still supports.
pub fn wilson_lower_bound(hits: u64, trials: u64) -> f64 {
    if trials == 0 {
        return 0.0;
    }
    const Z: f64 = 1.96;
    let n = trials as f64;
    let p = hits as f64 / n;
    let z2 = Z * Z;
    let centre = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - spread) / (1.0 + z2 / n)).max(0.0)
}

/// The rule in one sentence, for answers that state it.
pub const RULE: &str = "dead = not answering, or 0 nonces where its frequency share of the chain's nonces was >= 5; weak = HW-error share above 5 % beyond chance (>= 3 errors, 95 % Wilson lower bound > 5 %) or < 50 % of its share (when that share is >= 10); ok otherwise";

#[cfg(test)]
mod tests {
    use super::*;

    fn chip(answering: bool, nonces: u64, hw_errors: u64) -> ChipCounts {
        ChipCounts {
            answering,
            nonces,
            hw_errors,
            frequency_mhz: 500.0,
        }
    }

    #[test]
    fn verdicts() {
        use ChipVerdict::*;
        // (answering, nonces, hw errors, expected, verdict)
        let cases: &[(bool, u64, u64, f64, ChipVerdict)] = &[
            (false, 100, 0, 100.0, Dead),
            (true, 0, 0, 5.0, Dead),
            // Too few expected to call zero conclusive.
            (true, 0, 0, 4.9, Ok),
            // 4 errors in 58 nonces: 6.5 % by luck, not beyond chance.
            (true, 54, 4, 58.0, Ok),
            // Two errors are noise at any share.
            (true, 2, 2, 4.0, Ok),
            // 30 errors of 130: far beyond 5 %.
            (true, 100, 30, 100.0, Weak),
            // 1 000 nonces, 80 errors (7.4 %): the lower bound 5.9 % is above 5 %.
            (true, 1000, 80, 1000.0, Weak),
            // 1 000 nonces, 55 errors (5.2 %): not beyond chance.
            (true, 1000, 55, 1000.0, Ok),
            // Too few nonces for its share.
            (true, 4, 0, 10.0, Weak),
            (true, 5, 0, 10.0, Ok),
            // A low share is not judged below twice the dead floor.
            (true, 1, 0, 9.9, Ok),
        ];
        for &(a, n, e, x, want) in cases {
            assert_eq!(judge(&chip(a, n, e), x).verdict, want, "{a} {n} {e} {x}");
        }
    }

    #[test]
    fn evidence_names_the_cause() {
        let j = judge(&chip(true, 100, 30), 100.0);
        assert_eq!(j.reasons, vec!["30 HW errors (23.1 % of its nonces)"]);
        let j = judge(&chip(false, 0, 0), 50.0);
        assert_eq!(j.reasons.len(), 2);
        assert!(judge(&chip(true, 100, 0), 100.0).reasons.is_empty());
    }

    #[test]
    fn chain_share_follows_frequency() {
        let mut chips = vec![chip(true, 600, 0), chip(true, 0, 0), chip(true, 300, 0)];
        chips[2].frequency_mhz = 250.0;
        let j = judge_chain(1000, &chips);
        assert!((j[0].expected_nonces - 400.0).abs() < 1e-9);
        assert!((j[2].expected_nonces - 200.0).abs() < 1e-9);
        assert_eq!(
            j.iter().map(|x| x.verdict).collect::<Vec<_>>(),
            vec![ChipVerdict::Ok, ChipVerdict::Dead, ChipVerdict::Ok]
        );
        // No frequencies (not yet set): no share, so nothing is dead for finding nothing.
        let idle = judge_chain(
            0,
            &[ChipCounts {
                frequency_mhz: 0.0,
                ..chip(true, 0, 0)
            }],
        );
        assert_eq!(idle[0].verdict, ChipVerdict::Ok);
    }

    #[test]
    fn wilson_bound() {
        assert_eq!(wilson_lower_bound(0, 0), 0.0);
        assert_eq!(wilson_lower_bound(0, 100), 0.0);
        let lb = wilson_lower_bound(4, 58);
        assert!(lb > 0.02 && lb < 0.03, "{lb}");
        let lb = wilson_lower_bound(500, 1000);
        assert!(lb > 0.46 && lb < 0.47, "{lb}");
    }
}
