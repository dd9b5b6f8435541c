//! The search, with no I/O: given the point in force and what it measured over a window, choose
//! the next point or declare the search done.
//!
//! Stability first: a chip erring on more than its threshold is trimmed one frequency step below
//! its chain (weak silicon is slowed alone, the chain keeps its speed); a chain still erring
//! above its threshold gets one voltage step (one PSU feeds every chain) or, at the voltage
//! ceiling, one frequency step. Then the mode's target: power mode scales the frequencies until
//! PSU power is within tolerance; hashrate mode scales them until the expected hashrate is; both
//! then walk the voltage down one step at a time (compensating frequency for the power saved)
//! until errors appear, and keep the last stable voltage. Efficiency mode does the voltage walk
//! at frequency levels 8 % apart, from stock down, and keeps the level with the best measured
//! J/TH.

use crate::model::{Limits, Measured, Mode, Point};

/// Counters of one chip over a window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChipStats {
    /// Chip index.
    pub chip: u32,
    /// Verified nonces.
    pub nonces: u64,
    /// Failed nonces.
    pub hw_errors: u64,
    /// Answering.
    pub alive: bool,
}

impl ChipStats {
    /// Share of nonces that failed.
    pub fn error_rate(&self) -> f64 {
        rate(self.nonces, self.hw_errors)
    }
}

/// Counters of one chain over a window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChainStats {
    /// Chain index.
    pub chain_id: u32,
    /// Verified nonces.
    pub nonces: u64,
    /// Failed nonces.
    pub hw_errors: u64,
    /// Per chip (empty when telemetry had no chips).
    pub chips: Vec<ChipStats>,
}

/// Share of failures among all nonces seen.
pub fn rate(nonces: u64, errors: u64) -> f64 {
    if nonces + errors == 0 {
        0.0
    } else {
        errors as f64 / (nonces + errors) as f64
    }
}

/// One window's measurement.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measurement {
    /// Summary.
    pub measured: Measured,
    /// Hashrate the frequencies should give, TH/s.
    pub expected_ths: f64,
    /// Per chain.
    pub chains: Vec<ChainStats>,
}

/// A chip needs at least this many failures in a window before it is called weak (noise).
const MIN_CHIP_ERRORS: u64 = 3;
/// More weak chips than this share of a chain means the chain, not the chips, is short of volts.
const WEAK_SHARE_FOR_VOLTAGE: f64 = 0.1;
/// Efficiency levels are this much apart.
const EFFICIENCY_LEVEL: f64 = 0.92;
/// A search gives up after this many points and keeps the one in force.
pub const MAX_STEPS: u32 = 300;

/// What the stability check found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stability {
    /// (chain, chip) erring above the chip threshold.
    pub weak_chips: Vec<(u32, u32)>,
    /// Chains erring above the chain threshold once weak chips are discounted, or with too many
    /// weak chips.
    pub unstable_chains: Vec<u32>,
}

impl Stability {
    /// Nothing wrong.
    pub fn stable(&self) -> bool {
        self.weak_chips.is_empty() && self.unstable_chains.is_empty()
    }
}

/// Judge a window.
pub fn stability(m: &Measurement, lim: &Limits) -> Stability {
    let mut out = Stability::default();
    for c in &m.chains {
        let weak: Vec<&ChipStats> = c
            .chips
            .iter()
            .filter(|s| {
                s.alive && s.hw_errors >= MIN_CHIP_ERRORS && s.error_rate() > lim.max_chip_error
            })
            .collect();
        let weak_nonces: u64 = weak.iter().map(|s| s.nonces).sum();
        let weak_errors: u64 = weak.iter().map(|s| s.hw_errors).sum();
        let rest = rate(
            c.nonces.saturating_sub(weak_nonces),
            c.hw_errors.saturating_sub(weak_errors),
        );
        let many = !c.chips.is_empty()
            && weak.len() as f64 > (c.chips.len() as f64 * WEAK_SHARE_FOR_VOLTAGE).max(1.0);
        if rest > lim.max_chain_error || many {
            out.unstable_chains.push(c.chain_id);
        } else {
            out.weak_chips
                .extend(weak.iter().map(|s| (c.chain_id, s.chip)));
        }
    }
    out
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Apply this point and measure again.
    Apply(Point, String),
    /// The search is over: this point (with what it measured) is the result.
    Done(Point, Measured, String),
}

/// One search toward one mode and target.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// Mode.
    pub mode: Mode,
    /// Target (W, TH/s; unused for efficiency).
    pub target: f64,
    /// Points tried.
    pub steps: u32,
    /// The lowest stable voltage is known (errors appeared one step below).
    floor_found: bool,
    /// Efficiency mode: the best level so far.
    best: Option<(Point, Measured)>,
}

fn clamp_mhz(x: f64, lim: &Limits) -> f64 {
    x.clamp(lim.min_mhz, lim.max_mhz)
}

/// Every frequency scaled by `k` within the bounds; trims keep their ratio to the base.
pub fn scale_frequencies(p: &Point, k: f64, lim: &Limits) -> Point {
    let mut q = p.clone();
    for c in &mut q.chains {
        let base = clamp_mhz(c.frequency_mhz * k, lim);
        for t in &mut c.chips {
            t.frequency_mhz = clamp_mhz(t.frequency_mhz * k, lim).min(base);
        }
        c.frequency_mhz = base;
        c.chips.retain(|t| t.frequency_mhz < base - 1e-6);
    }
    q
}

impl Search {
    /// A fresh search.
    pub fn new(mode: Mode, target: f64) -> Search {
        Search {
            mode,
            target,
            steps: 0,
            floor_found: false,
            best: None,
        }
    }

    /// A search that starts at a point known to be at its voltage floor (a re-fit after a drift,
    /// a new power target from a tuned point): no voltage walk unless errors say so.
    pub fn refit(mode: Mode, target: f64) -> Search {
        Search {
            floor_found: true,
            ..Search::new(mode, target)
        }
    }

    /// The next step from point `p` that measured `m`.
    pub fn step(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Outcome {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Outcome::Done(p.clone(), m.measured, "step budget spent".into());
        }
        let st = stability(m, lim);
        if !st.stable() {
            return self.stabilise(p, &st, lim);
        }
        match self.mode {
            Mode::Power | Mode::Hashrate => {
                if let Some(q) = self.fit(p, m, lim) {
                    return Outcome::Apply(
                        q,
                        format!("fit frequency to the {} target", self.mode.as_str()),
                    );
                }
                self.descend(p, m, lim)
            }
            Mode::Efficiency => self.efficiency(p, m, lim),
            Mode::Fixed => Outcome::Done(p.clone(), m.measured, "fixed profile".into()),
        }
    }

    fn stabilise(&mut self, p: &Point, st: &Stability, lim: &Limits) -> Outcome {
        let mut q = p.clone();
        if !st.unstable_chains.is_empty() {
            self.floor_found = true;
            if q.voltage_mv + lim.mv_step <= lim.max_mv + 1e-6 {
                q.voltage_mv += lim.mv_step;
                return Outcome::Apply(
                    q,
                    format!("errors on chains {:?}: voltage up", st.unstable_chains),
                );
            }
            for c in q.chains.iter_mut() {
                if st.unstable_chains.contains(&c.chain_id) {
                    let base = clamp_mhz(c.frequency_mhz - lim.mhz_step, lim);
                    c.frequency_mhz = base;
                    for t in &mut c.chips {
                        t.frequency_mhz = t.frequency_mhz.min(base);
                    }
                    c.chips.retain(|t| t.frequency_mhz < base - 1e-6);
                }
            }
            return Outcome::Apply(
                q,
                format!(
                    "errors at the voltage ceiling on chains {:?}: frequency down",
                    st.unstable_chains
                ),
            );
        }
        let mut trimmed = Vec::new();
        for &(chain, chip) in &st.weak_chips {
            if let Some(c) = q.chains.iter_mut().find(|c| c.chain_id == chain) {
                let now = c.chip_mhz(chip);
                let next = (now - lim.mhz_step).max(lim.min_mhz);
                if next < now - 1e-6 {
                    c.set_chip(chip, next);
                    trimmed.push((chain, chip));
                }
            }
        }
        if trimmed.is_empty() {
            // Weak chips already at the floor: only voltage can help.
            self.floor_found = true;
            q.voltage_mv = (q.voltage_mv + lim.mv_step).min(lim.max_mv);
            return Outcome::Apply(q, "weak chips at the lowest frequency: voltage up".into());
        }
        Outcome::Apply(q, format!("trim weak chips {trimmed:?}"))
    }

    /// A point closer to the target, or `None` when within tolerance (or against a bound).
    fn fit(&self, p: &Point, m: &Measurement, lim: &Limits) -> Option<Point> {
        let (have, want) = match self.mode {
            Mode::Power => (m.measured.power_watt, self.target),
            _ => (m.expected_ths, self.target),
        };
        if have <= 0.0 || want <= 0.0 || ((have - want) / want).abs() <= lim.power_tolerance {
            return None;
        }
        // Power is mostly dynamic (proportional to frequency); about a fifth is leakage, so
        // correct by more than the plain ratio. Hashrate is exactly proportional.
        let gain = if self.mode == Mode::Power {
            1.0 / 0.8
        } else {
            1.0
        };
        let k = (1.0 + (want / have - 1.0) * gain).clamp(0.7, 1.3);
        let q = scale_frequencies(p, k, lim);
        (q != *p).then_some(q)
    }

    fn descend(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Outcome {
        if !self.floor_found && p.voltage_mv - lim.mv_step >= lim.min_mv - 1e-6 {
            let v = p.voltage_mv - lim.mv_step;
            let mut q = p.clone();
            q.voltage_mv = v;
            if self.mode == Mode::Power {
                // Give back the dynamic power the lower voltage saves (P ~ f V^2).
                let k = 1.0 + 0.8 * ((p.voltage_mv / v).powi(2) - 1.0);
                q = scale_frequencies(&q, k, lim);
            }
            return Outcome::Apply(q, "voltage down".into());
        }
        Outcome::Done(
            p.clone(),
            m.measured,
            "target met at the lowest stable voltage".into(),
        )
    }

    fn efficiency(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Outcome {
        if !self.floor_found && p.voltage_mv - lim.mv_step >= lim.min_mv - 1e-6 {
            let mut q = p.clone();
            q.voltage_mv -= lim.mv_step;
            return Outcome::Apply(q, "voltage down".into());
        }
        // This level is at its voltage floor.
        let better = match &self.best {
            None => true,
            Some((_, b)) => {
                m.measured.efficiency_j_per_th > 0.0
                    && m.measured.efficiency_j_per_th < b.efficiency_j_per_th * 0.995
            }
        };
        if better {
            self.best = Some((p.clone(), m.measured));
            let q = scale_frequencies(p, EFFICIENCY_LEVEL, lim);
            if q != *p {
                self.floor_found = false;
                return Outcome::Apply(q, "efficiency: next frequency level".into());
            }
        }
        let (bp, bm) = self.best.clone().unwrap_or((p.clone(), m.measured));
        Outcome::Done(bp, bm, "best efficiency level found".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::config::Config;

    use crate::model::BoardInfo;

    fn limits() -> Limits {
        let board = BoardInfo {
            serial: "x".into(),
            chains: 1,
            chips_per_chain: 10,
            nominal_power_watt: 1000.0,
            nominal_ths: 10.0,
        };
        Limits::resolve(&Config::default(), &board)
    }

    fn window(power: f64, chips: &[(u64, u64)]) -> Measurement {
        Measurement {
            measured: Measured {
                power_watt: power,
                ..Default::default()
            },
            expected_ths: 10.0,
            chains: vec![ChainStats {
                chain_id: 0,
                nonces: chips.iter().map(|c| c.0).sum(),
                hw_errors: chips.iter().map(|c| c.1).sum(),
                chips: chips
                    .iter()
                    .enumerate()
                    .map(|(i, &(n, e))| ChipStats {
                        chip: i as u32,
                        nonces: n,
                        hw_errors: e,
                        alive: true,
                    })
                    .collect(),
            }],
        }
    }

    #[test]
    fn stability_table() {
        let lim = limits();
        let clean = [(100, 0); 10];
        assert!(stability(&window(1.0, &clean), &lim).stable());
        // One chip erring hard: trimmed alone.
        let mut one = clean;
        one[3] = (50, 20);
        let st = stability(&window(1.0, &one), &lim);
        assert_eq!(st.weak_chips, vec![(0, 3)]);
        assert!(st.unstable_chains.is_empty());
        // Two erring chips on a 10-chip chain is more than the chain's share: voltage.
        let mut many = one;
        many[5] = (50, 20);
        assert_eq!(
            stability(&window(1.0, &many), &lim).unstable_chains,
            vec![0]
        );
        // Diffuse errors over every chip (no chip above its threshold): the chain.
        let diffuse = [(100, 3); 10];
        assert_eq!(
            stability(&window(1.0, &diffuse), &lim).unstable_chains,
            vec![0]
        );
        // Two failures are noise, not a weak chip.
        let mut noise = clean;
        noise[1] = (5, 2);
        assert!(stability(&window(1.0, &noise), &lim).stable());
    }

    #[test]
    fn power_fit_then_voltage_walk_then_done() {
        let lim = limits();
        let p = Point::uniform(8800.0, 1, 650.0);
        let mut s = Search::new(Mode::Power, 800.0);
        let clean = [(100, 0); 10];
        let Outcome::Apply(q, _) = s.step(&p, &window(1000.0, &clean), &lim) else {
            panic!("expected a fit")
        };
        assert!(q.chains[0].frequency_mhz < 650.0 * 0.8, "{q:?}");
        assert_eq!(q.voltage_mv, 8800.0);
        // Within tolerance: voltage goes down, frequency up to compensate.
        let Outcome::Apply(r, why) = s.step(&q, &window(805.0, &clean), &lim) else {
            panic!("expected a voltage step")
        };
        assert_eq!(why, "voltage down");
        assert_eq!(r.voltage_mv, 8700.0);
        assert!(r.chains[0].frequency_mhz > q.chains[0].frequency_mhz);
        // Errors everywhere at the lower voltage: back up, floor found.
        let Outcome::Apply(b, _) = s.step(&r, &window(800.0, &[(100, 5); 10]), &lim) else {
            panic!("expected a voltage raise")
        };
        assert_eq!(b.voltage_mv, 8800.0);
        // Stable and within tolerance at the floor: done.
        assert!(matches!(
            s.step(&b, &window(798.0, &clean), &lim),
            Outcome::Done(..)
        ));
    }

    #[test]
    fn weak_chip_is_trimmed_not_the_chain() {
        let lim = limits();
        let p = Point::uniform(8800.0, 1, 650.0);
        let mut s = Search::new(Mode::Power, 1000.0);
        let mut w = [(100, 0); 10];
        w[7] = (40, 30);
        let Outcome::Apply(q, _) = s.step(&p, &window(1000.0, &w), &lim) else {
            panic!()
        };
        assert_eq!(q.chains[0].frequency_mhz, 650.0);
        assert_eq!(q.chains[0].chip_mhz(7), 650.0 - lim.mhz_step);
        assert_eq!(q.voltage_mv, 8800.0);
        // Scaling keeps the trim below the base.
        let r = scale_frequencies(&q, 0.9, &lim);
        assert!(r.chains[0].chip_mhz(7) < r.chains[0].frequency_mhz);
    }

    #[test]
    fn bounds_are_never_left() {
        let lim = limits();
        let p = Point::uniform(lim.max_mv, 1, lim.max_mhz);
        let mut s = Search::new(Mode::Power, 5000.0);
        // Far below a huge target at the frequency ceiling: nothing to fit, walk voltage down.
        let Outcome::Apply(q, _) = s.step(&p, &window(1000.0, &[(100, 0); 10]), &lim) else {
            panic!()
        };
        assert!(q.chains[0].frequency_mhz <= lim.max_mhz);
        // Errors at the ceiling voltage: frequency, not voltage.
        let mut s = Search::new(Mode::Power, 1000.0);
        let Outcome::Apply(r, _) = s.step(&p, &window(1000.0, &[(100, 9); 10]), &lim) else {
            panic!()
        };
        assert_eq!(r.voltage_mv, lim.max_mv);
        assert!(r.chains[0].frequency_mhz < lim.max_mhz);
        let low = Point::uniform(lim.min_mv, 1, lim.min_mhz);
        let q = scale_frequencies(&low, 0.5, &lim);
        assert_eq!(q.chains[0].frequency_mhz, lim.min_mhz);
    }

    #[test]
    fn efficiency_keeps_the_best_level() {
        let lim = limits();
        let mut s = Search::refit(Mode::Efficiency, 0.0);
        let p = Point::uniform(8800.0, 1, 650.0);
        let mut m = window(1000.0, &[(100, 0); 10]);
        m.measured.efficiency_j_per_th = 100.0;
        let Outcome::Apply(q, _) = s.step(&p, &m, &lim) else {
            panic!()
        };
        assert!(q.chains[0].frequency_mhz < 650.0);
        // The lower level walks its voltage down first.
        let mut m2 = m.clone();
        m2.measured.efficiency_j_per_th = 90.0;
        let Outcome::Apply(r, why) = s.step(&q, &m2, &lim) else {
            panic!()
        };
        assert_eq!(why, "voltage down");
        // Errors: floor found; next stable window at the floor: better → next level.
        let Outcome::Apply(r2, _) = s.step(&r, &window(1.0, &[(100, 9); 10]), &lim) else {
            panic!()
        };
        let Outcome::Apply(r3, _) = s.step(&r2, &m2, &lim) else {
            panic!()
        };
        // Worse at the next level's floor: done with the best.
        let mut worse = m.clone();
        worse.measured.efficiency_j_per_th = 95.0;
        let mut s2 = s.clone();
        s2.floor_found = true;
        match s2.step(&r3, &worse, &lim) {
            Outcome::Done(best, bm, _) => {
                assert_eq!(best, r2);
                assert_eq!(bm.efficiency_j_per_th, 90.0);
            }
            other => panic!("{other:?}"),
        }
    }
}
