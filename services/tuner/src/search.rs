//! The search, with no I/O: given the point in force and what it measured over a window, choose
//! the next point or declare the search done.
//!
//! What a board lets a power target buy is set by voltage: a chip's dynamic power grows with
//! V²·f while its highest stable frequency grows only about as V^1.5, so the cheapest terahash
//! comes from the lowest voltage at which every chip, run at its own edge, still uses the whole
//! budget. The search therefore works on two levels at once:
//!
//! - **Per chip**: each window every chip is judged by its own nonce yield. A clean chip steps up,
//!   an erring one steps down, and each chip remembers the highest frequency it held cleanly and
//!   the lowest at which it erred, bisecting between them until they are one step apart. Good
//!   silicon ends faster than weak silicon; a chip erring even at the lowest frequency stays
//!   there (dead ones stay off the budget).
//! - **Per board**: the voltage is chosen from a prior model (`P ≈ P₀·[(1−λ)(V/V₀)²·F/F₀ +
//!   λ·V/V₀]`, chip edges `∝ V^1.5`), re-anchored on every window's measurement, so the model
//!   only has to be right about the direction and rough size of a change: over the budget with
//!   the chips at their edges means the voltage is too high, under it means too low. Where
//!   the voltage cannot go lower (the bound, or the level at which chips stop answering), the
//!   frequencies scale down instead.
//!
//! Power mode fits PSU power to the target, hashrate mode the expected hashrate; efficiency mode
//! runs every chip at its edge at the lowest voltage the chips hash at. Nothing here reads the
//! simulator's ground truth: only what a real board reports (per-chip nonces and HW errors,
//! PSU power, the frequencies in force).

use std::collections::BTreeMap;

use crate::model::{Limits, Measured, Mode, Point};

/// A chip needs at least this many failures in a window before it is called weak (noise).
const MIN_CHIP_ERRORS: u64 = 3;
/// A chip with fewer results than this in a window gives no verdict.
const MIN_CHIP_RESULTS: u64 = 10;
/// More weak chips than this share of a chain means the chain, not the chips, is short of volts.
const WEAK_SHARE_FOR_VOLTAGE: f64 = 0.1;
/// Chips that stopped answering, as a share of all: below this the voltage is under the level
/// at which the silicon hashes at all.
const SILENT_SHARE_FOR_FLOOR: f64 = 0.1;
/// Chips moving in a window, as a share of all, below which the chips count as settled.
const SETTLED_SHARE: f64 = 0.05;
/// A search gives up after this many points and keeps the one in force.
pub const MAX_STEPS: u32 = 300;
/// Prior: a chip's highest stable frequency grows as V to this power (the alpha-power law of
/// CMOS delay, with α ≈ 1.3-1.5 for deep-submicron processes).
pub const EDGE_VOLTAGE_EXPONENT: f64 = 1.5;
/// Prior: the share of board power that does not scale with frequency (leakage and fixed
/// loads), at the anchor point.
pub const STATIC_SHARE: f64 = 0.2;

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

/// Judge a window (the watch over a tuned point: a chip or chain that started to err).
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

/// A chip's verdict over one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// At most half the chain threshold failed: room to go faster.
    Clean,
    /// Between clean and erring, or too few results to say: stay.
    Hold,
    /// Failing above the chain threshold: too fast for this voltage.
    Erring,
    /// Not answering or no results while its chain has plenty.
    Silent,
}

/// Judge one chip; `chain_mean` is the mean result count of its chain's chips.
pub fn verdict(s: &ChipStats, chain_mean: f64, lim: &Limits) -> Verdict {
    let results = s.nonces + s.hw_errors;
    if !s.alive || (results == 0 && chain_mean >= 4.0 * MIN_CHIP_RESULTS as f64) {
        return Verdict::Silent;
    }
    if s.hw_errors >= MIN_CHIP_ERRORS && s.error_rate() > lim.max_chain_error {
        return Verdict::Erring;
    }
    if results >= MIN_CHIP_RESULTS && s.error_rate() <= lim.max_chain_error / 2.0 {
        return Verdict::Clean;
    }
    Verdict::Hold
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Apply this point and measure again.
    Apply(Point, String),
    /// The search is over: this point (with what it measured) is the result.
    Done(Point, Measured, String),
}

/// What one chip has shown so far, at the voltage in force.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Edge {
    /// Highest frequency it held cleanly, MHz.
    good: Option<f64>,
    /// Lowest frequency it erred at, MHz.
    bad: Option<f64>,
}

impl Edge {
    fn scaled(self, k: f64) -> Edge {
        Edge {
            good: self.good.map(|f| f * k),
            bad: self.bad.map(|f| f * k),
        }
    }
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
    /// The first window plans the voltage; later ones refine.
    planned: bool,
    /// Per (chain, chip).
    edges: BTreeMap<(u32, u32), Edge>,
    /// Highest voltage at which chips were seen to stop answering, mV.
    floor_mv: Option<f64>,
    /// The point in force came from a finished search (a re-fit keeps its chips' edges).
    refit: bool,
    /// The budget binds at the lowest voltage: chips go up only when under it.
    frequency_bound: bool,
    /// Boards switched on or off by this search so far.
    board_changes: u32,
    /// The board's nominal power at stock, W (0 = unknown).
    nominal_watt: f64,
    /// Per (chain, chip): (MHz, mV, nonces, HW errors) counted since it has run there.
    seen: BTreeMap<(u32, u32), (f64, f64, u64, u64)>,
}

fn clamp_mhz(x: f64, lim: &Limits) -> f64 {
    x.clamp(lim.min_mhz, lim.max_mhz)
}

/// Every frequency scaled by `k` within the bounds.
pub fn scale_frequencies(p: &Point, k: f64, lim: &Limits) -> Point {
    let mut q = p.clone();
    for c in &mut q.chains {
        let base = clamp_mhz(c.frequency_mhz * k, lim);
        for t in &mut c.chips {
            t.frequency_mhz = clamp_mhz(t.frequency_mhz * k, lim);
        }
        c.frequency_mhz = base;
        c.chips.retain(|t| (t.frequency_mhz - base).abs() > 1e-6);
    }
    q
}

/// Power under the prior model relative to an anchor measured at `v0` mV drawing `p0` W, when
/// the chips keep their margin to their edges (frequencies scale as V^1.5).
pub fn power_at_edges(p0: f64, v0: f64, v: f64) -> f64 {
    let r = v / v0;
    p0 * ((1.0 - STATIC_SHARE) * r.powf(2.0 + EDGE_VOLTAGE_EXPONENT) + STATIC_SHARE * r)
}

/// The voltage at which chips kept at their margin draw `target` W, from an anchor (`p0` W at
/// `v0` mV), within `[lo, hi]`.
pub fn voltage_for_power(p0: f64, v0: f64, target: f64, lo: f64, hi: f64) -> f64 {
    if p0 <= 0.0 || v0 <= 0.0 {
        return v0.clamp(lo, hi);
    }
    let (mut a, mut b) = (lo, hi);
    if power_at_edges(p0, v0, a) >= target {
        return a;
    }
    if power_at_edges(p0, v0, b) <= target {
        return b;
    }
    for _ in 0..60 {
        let mid = 0.5 * (a + b);
        if power_at_edges(p0, v0, mid) < target {
            a = mid;
        } else {
            b = mid;
        }
    }
    0.5 * (a + b)
}

/// The voltage at which chips kept at their margin give `target` TH/s from `h0` at `v0`.
pub fn voltage_for_hashrate(h0: f64, v0: f64, target: f64, lo: f64, hi: f64) -> f64 {
    if h0 <= 0.0 || v0 <= 0.0 || target <= 0.0 {
        return v0.clamp(lo, hi);
    }
    (v0 * (target / h0).powf(1.0 / EDGE_VOLTAGE_EXPONENT)).clamp(lo, hi)
}

/// A plan for a power target: how many boards hash, at what voltage, and what share of their
/// chips' edge frequency they run at (1 = at the edge; less when the voltage is at its floor).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoardPlan {
    /// Boards hashing.
    pub boards: usize,
    /// Voltage, mV.
    pub voltage_mv: f64,
    /// Frequency as a share of the chips' edge at that voltage.
    pub share: f64,
    /// Expected hashrate relative to one board at the anchor.
    pub hashrate: f64,
}

/// A fewer-boards plan must promise this much more hashrate to be chosen (the prior is rough).
const FEWER_BOARDS_GAIN: f64 = 1.03;

/// The plan for exactly `k` boards (see [`boards_for_power`]).
pub fn plan_boards(per_board: f64, v0: f64, k: usize, target: f64, lo: f64, hi: f64) -> BoardPlan {
    let p0 = per_board * k as f64;
    let v = voltage_for_power(p0, v0, target, lo, hi);
    let r = v / v0;
    let edge = r.powf(EDGE_VOLTAGE_EXPONENT);
    let dynamic = (1.0 - STATIC_SHARE) * r * r * edge;
    let share = ((target / p0 - STATIC_SHARE * r) / dynamic).clamp(0.0, 1.0);
    BoardPlan {
        boards: k,
        voltage_mv: v,
        share,
        hashrate: k as f64 * edge * share,
    }
}

/// The number of boards that buys the most hashrate at `target` W under the prior, when each
/// of them draws `per_board` W at `v0` mV with its chips at their margin, chips may run down to
/// `min_share` of their frequency at `v0`, and the voltage stays within `[lo, hi]`. Below the
/// power a board set draws at the voltage floor, frequency is all that is left, and leakage
/// (paid per board, whatever its frequency) makes each terahash dearer: switching a board off
/// hands its leakage to the others' frequency.
pub fn boards_for_power(
    per_board: f64,
    v0: f64,
    n: usize,
    target: f64,
    min_share: f64,
    lo: f64,
    hi: f64,
) -> BoardPlan {
    let mut best: Option<BoardPlan> = None;
    for k in (1..=n.max(1)).rev() {
        let plan = plan_boards(per_board, v0, k, target, lo, hi);
        if plan.share * (plan.voltage_mv / v0).powf(EDGE_VOLTAGE_EXPONENT) < min_share - 1e-9 {
            continue;
        }
        if best.is_none_or(|b| plan.hashrate > b.hashrate * FEWER_BOARDS_GAIN) {
            best = Some(plan);
        }
    }
    best.unwrap_or(BoardPlan {
        boards: n.max(1),
        voltage_mv: lo,
        share: min_share,
        hashrate: 0.0,
    })
}

/// Round a voltage to the search's step (the PSU and the search work in steps).
fn round_mv(v: f64, lim: &Limits) -> f64 {
    if lim.mv_step <= 0.0 {
        return v;
    }
    ((v / lim.mv_step).round() * lim.mv_step).clamp(lim.min_mv, lim.max_mv)
}

impl Search {
    /// A fresh search.
    pub fn new(mode: Mode, target: f64) -> Search {
        Search {
            mode,
            target,
            steps: 0,
            planned: false,
            edges: BTreeMap::new(),
            floor_mv: None,
            refit: false,
            frequency_bound: false,
            board_changes: 0,
            nominal_watt: 0.0,
            seen: BTreeMap::new(),
        }
    }

    /// A search that starts at a tuned point (a re-fit after a drift, a new target from a tuned
    /// point): its chips are near their edges already, so it refines rather than plans.
    pub fn refit(mode: Mode, target: f64) -> Search {
        Search {
            refit: true,
            ..Search::new(mode, target)
        }
    }

    /// The first point of a search from stock, planned from the board's nominal figures (what
    /// it draws and gives at stock) so the first window already runs near the target rather
    /// than at full power. With no nominal figures the first window, at `stock`, anchors the
    /// plan instead.
    pub fn start_point(
        &mut self,
        stock: &Point,
        nominal_power_watt: f64,
        nominal_ths: f64,
        lim: &Limits,
    ) -> Point {
        let anchor = Measurement {
            measured: Measured {
                power_watt: nominal_power_watt,
                ..Default::default()
            },
            expected_ths: nominal_ths,
            chains: Vec::new(),
        };
        let known = match self.mode {
            Mode::Power => nominal_power_watt > 0.0,
            Mode::Hashrate => nominal_ths > 0.0,
            Mode::Efficiency => true,
            Mode::Fixed => false,
        };
        if !known || stock.voltage_mv <= 0.0 {
            return stock.clone();
        }
        if self.nominal_watt <= 0.0 {
            self.nominal_watt = nominal_power_watt;
        }
        self.planned = true;
        self.planned_point(stock, &anchor, lim)
    }

    /// The board's nominal power at stock (what hw-agent's inventory says), for planning how
    /// many boards hash.
    pub fn with_nominal(mut self, watt: f64) -> Search {
        self.nominal_watt = watt.max(0.0);
        self
    }

    /// The lowest voltage the search may try now.
    fn min_mv(&self, lim: &Limits) -> f64 {
        self.floor_mv
            .map_or(lim.min_mv, |f| (f + lim.mv_step).min(lim.max_mv))
            .max(lim.min_mv)
    }

    /// What the mode compares with its target: (have, want); `None` for efficiency.
    fn budget(&self, m: &Measurement) -> Option<(f64, f64)> {
        match self.mode {
            Mode::Power => Some((m.measured.power_watt, self.target)),
            Mode::Hashrate => Some((m.expected_ths, self.target)),
            _ => None,
        }
    }

    /// The voltage the mode wants, from the anchor `m` measured at `p`.
    fn planned_voltage(&self, p: &Point, m: &Measurement, lim: &Limits) -> f64 {
        let lo = self.min_mv(lim);
        let v = match self.mode {
            Mode::Power => voltage_for_power(
                m.measured.power_watt,
                p.voltage_mv,
                self.target,
                lo,
                lim.max_mv,
            ),
            Mode::Hashrate => {
                voltage_for_hashrate(m.expected_ths, p.voltage_mv, self.target, lo, lim.max_mv)
            }
            _ => lo,
        };
        round_mv(v, lim).max(lo)
    }

    /// The point the mode wants next from the anchor `m` measured at `p`: the voltage, and in
    /// power mode also how many boards hash and, at the voltage floor, their frequency share.
    fn planned_point(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Point {
        let boards = p.boards_on();
        if self.mode != Mode::Power || p.chains.len() < 2 || boards == 0 || p.voltage_mv <= 0.0 {
            let v = self.planned_voltage(p, m, lim);
            return self.move_voltage(p, v, lim);
        }
        let lo = self.min_mv(lim);
        // The chips' mean frequency (not the chains' base: tuned chips sit apart from it).
        let mean = {
            let mut f = Vec::new();
            for c in p.chains.iter().filter(|c| c.enabled) {
                let n = m
                    .chains
                    .iter()
                    .find(|x| x.chain_id == c.chain_id)
                    .map_or(0, |x| x.chips.len());
                if n == 0 {
                    f.push(c.frequency_mhz);
                } else {
                    f.extend((0..n as u32).map(|i| c.chip_mhz(i)));
                }
            }
            f.iter().sum::<f64>() / f.len().max(1) as f64
        };
        // How many boards: from the board's nominal figures when known (stock, where the
        // chips sit at their stock margin, as the prior assumes), else from this window; a
        // point the search left frequency-bound would mislead the prior about the chips' room.
        let n = p.chains.len();
        let by_nominal = (self.nominal_watt > 0.0).then(|| {
            boards_for_power(
                self.nominal_watt / n as f64,
                lim.stock_mv,
                n,
                self.target,
                lim.min_mhz / lim.stock_mhz.max(1.0),
                lo,
                lim.max_mv,
            )
        });
        let measured = |k: usize| {
            plan_boards(
                m.measured.power_watt / boards as f64,
                p.voltage_mv,
                k,
                self.target,
                lo,
                lim.max_mv,
            )
        };
        let plan = match by_nominal {
            // The same boards: voltage and share from this window, which knows the board.
            Some(b) if b.boards == boards => measured(boards),
            Some(b) => b,
            None => boards_for_power(
                m.measured.power_watt / boards as f64,
                p.voltage_mv,
                n,
                self.target,
                if mean > 0.0 { lim.min_mhz / mean } else { 0.0 },
                lo,
                lim.max_mv,
            ),
        };
        let v = round_mv(plan.voltage_mv, lim).max(lo);
        let mut q = self.move_voltage(p, v, lim);
        if plan.share < 1.0 - 1e-6 {
            q = scale_frequencies(&q, plan.share, lim);
        }
        // Boards off from the last ones; a board coming back starts where the others are.
        let base = q
            .chains
            .iter()
            .find(|c| c.enabled)
            .map_or(lim.stock_mhz, |c| c.frequency_mhz);
        for (i, c) in q.chains.iter_mut().enumerate() {
            let on = i < plan.boards;
            if on && !c.enabled {
                c.frequency_mhz = base;
                c.chips.clear();
                let id = c.chain_id;
                self.edges.retain(|(chain, _), _| *chain != id);
            }
            c.enabled = on;
        }
        q
    }

    /// Move to voltage `v`, every chip and every remembered edge scaled as V^1.5.
    fn move_voltage(&mut self, p: &Point, v: f64, lim: &Limits) -> Point {
        let k = (v / p.voltage_mv).powf(EDGE_VOLTAGE_EXPONENT);
        let mut q = scale_frequencies(p, k, lim);
        q.voltage_mv = v;
        for e in self.edges.values_mut() {
            *e = e.scaled(k);
        }
        q
    }

    /// The next step from point `p` that measured `m`.
    pub fn step(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Outcome {
        self.steps += 1;
        self.count(p, m);
        if self.steps > MAX_STEPS {
            return Outcome::Done(p.clone(), m.measured, "step budget spent".into());
        }
        if self.mode == Mode::Fixed {
            return Outcome::Done(p.clone(), m.measured, "fixed profile".into());
        }
        // Chips that stopped answering: the voltage is under what the silicon hashes at.
        let chips: usize = m.chains.iter().map(|c| c.chips.len()).sum();
        let silent = self
            .judge(p, m, lim)
            .iter()
            .filter(|j| j.2 == Verdict::Silent)
            .count();
        if chips > 0 && silent as f64 > chips as f64 * SILENT_SHARE_FOR_FLOOR {
            self.floor_mv = Some(self.floor_mv.map_or(p.voltage_mv, |f| f.max(p.voltage_mv)));
            let v = (p.voltage_mv + 2.0 * lim.mv_step).min(lim.max_mv);
            if v <= p.voltage_mv + 1e-6 {
                return Outcome::Done(
                    p.clone(),
                    m.measured,
                    format!("{silent} chips silent at the voltage ceiling"),
                );
            }
            let mut q = p.clone();
            q.voltage_mv = v;
            return Outcome::Apply(
                q,
                format!(
                    "{silent} chips stopped hashing at {:.0} mV: voltage up",
                    p.voltage_mv
                ),
            );
        }
        if !self.planned {
            self.planned = true;
            if !self.refit {
                let q = self.planned_point(p, m, lim);
                return Outcome::Apply(
                    q.clone(),
                    format!(
                        "plan {:.0} mV on {} boards for the {} target from {:.0} W at {:.0} mV",
                        q.voltage_mv,
                        q.boards_on(),
                        self.mode.as_str(),
                        m.measured.power_watt,
                        p.voltage_mv
                    ),
                );
            }
        }
        self.refine(p, m, lim)
    }

    /// Add this window's counts to each chip's tally at its frequency and voltage (a new
    /// frequency or voltage starts a new tally).
    fn count(&mut self, p: &Point, m: &Measurement) {
        for c in &m.chains {
            let Some(cp) = p.chains.iter().find(|x| x.chain_id == c.chain_id) else {
                continue;
            };
            for s in &c.chips {
                let f = cp.chip_mhz(s.chip);
                let e = self
                    .seen
                    .entry((c.chain_id, s.chip))
                    .or_insert((f, p.voltage_mv, 0, 0));
                if (e.0 - f).abs() > 1e-6 || (e.1 - p.voltage_mv).abs() > 1e-6 {
                    *e = (f, p.voltage_mv, 0, 0);
                }
                e.2 += s.nonces;
                e.3 += s.hw_errors;
            }
        }
    }

    /// Sum of the frequencies of every chip with counters, MHz.
    fn sum_mhz(&self, p: &Point, m: &Measurement) -> f64 {
        m.chains
            .iter()
            .map(|c| {
                p.chains
                    .iter()
                    .find(|x| x.chain_id == c.chain_id)
                    .map_or(0.0, |x| c.chips.iter().map(|s| x.chip_mhz(s.chip)).sum())
            })
            .sum()
    }

    /// (chain, chip, verdict, frequency) of every chip with counters.
    fn judge(&self, p: &Point, m: &Measurement, lim: &Limits) -> Vec<(u32, u32, Verdict, f64)> {
        let mut out = Vec::new();
        for c in &m.chains {
            let Some(cp) = p
                .chains
                .iter()
                .find(|x| x.chain_id == c.chain_id && x.enabled)
            else {
                continue;
            };
            let mean = if c.chips.is_empty() {
                0.0
            } else {
                c.chips
                    .iter()
                    .map(|s| (s.nonces + s.hw_errors) as f64)
                    .sum::<f64>()
                    / c.chips.len() as f64
            };
            for s in &c.chips {
                // Judged on every window it has spent at this frequency and voltage: at its
                // edge a chip errs on a couple of percent, which one window's few dozen
                // nonces cannot tell from noise, and a flip costs two windows of its hashrate.
                let f = cp.chip_mhz(s.chip);
                let mut acc = *s;
                if let Some(&(at_mhz, at_mv, n, e)) = self.seen.get(&(c.chain_id, s.chip))
                    && (at_mhz - f).abs() < 1e-6
                    && (at_mv - p.voltage_mv).abs() < 1e-6
                {
                    acc.nonces = n;
                    acc.hw_errors = e;
                }
                out.push((c.chain_id, s.chip, verdict(&acc, mean, lim), f));
            }
        }
        out
    }

    fn refine(&mut self, p: &Point, m: &Measurement, lim: &Limits) -> Outcome {
        let step = lim.mhz_step.max(1.0);
        let budget = self.budget(m);
        let (over, under) = match budget {
            Some((have, want)) if have > 0.0 && want > 0.0 => (
                have > want * (1.0 + lim.power_tolerance),
                have < want * (1.0 - lim.power_tolerance),
            ),
            _ => (false, false),
        };
        // Per chip: learn, then choose its next frequency (never up while over the budget, nor
        // while the budget binds at the lowest voltage and is met to within half the
        // tolerance). At the lowest voltage the leakage is paid whatever the frequencies, so
        // the watts left under the target are the cheapest terahashes: a cut that landed 2 %
        // under 600 W cost 0.5 % of J/TH where it stopped.
        let short = matches!(budget, Some((have, want)) if have > 0.0
            && want > 0.0 && have < want * (1.0 - 0.5 * lim.power_tolerance));
        let hold_up = over || (self.frequency_bound && !short);
        // Once most chips have shown where they err, the point is budget-bound at their
        // edges, and near the target power buys the same hashrate whichever chips run it (both
        // follow the sum of the frequencies): raising chips into the watts an erring one gave
        // back only pushed new chips past their edges every window (the search hunted at 100 %
        // instead of settling). There, chips explore only while the budget has more than half
        // the tolerance left. Before that (a fresh plan, its chips below their edges) they
        // explore: that is how the search learns the voltage is too high.
        let judged = self.judge(p, m, lim);
        let edges_known = judged
            .iter()
            .filter(|(chain, chip, _, _)| {
                self.edges
                    .get(&(*chain, *chip))
                    .is_some_and(|e| e.bad.is_some())
            })
            .count();
        let explore = match budget {
            Some((have, want)) if have > 0.0 && want > 0.0 => {
                have < want * (1.0 - 0.5 * lim.power_tolerance) || 2 * edges_known < judged.len()
            }
            _ => true,
        };
        let mut q = p.clone();
        let (mut up, mut down) = (0u32, 0u32);
        let clean = judged.iter().filter(|j| j.2 == Verdict::Clean).count();
        for (chain, chip, v, f) in judged {
            let e = self.edges.entry((chain, chip)).or_default();
            let next = match v {
                Verdict::Erring => {
                    e.bad = Some(e.bad.map_or(f, |b| b.min(f)));
                    if e.good.is_some_and(|g| g >= f - 1e-6) {
                        e.good = None;
                    }
                    // Back to the last clean frequency when one is known below, else a step.
                    let to = e.good.unwrap_or(f - 2.0 * step);
                    clamp_mhz(to.min(f - step), lim)
                }
                Verdict::Clean => {
                    e.good = Some(e.good.map_or(f, |g| g.max(f)));
                    if hold_up {
                        f
                    } else if !explore {
                        // Back up to where it ran cleanly before, no further.
                        e.good.filter(|g| *g > f).unwrap_or(f)
                    } else {
                        match e.bad {
                            // Bisect toward the lowest erring frequency, one step short of it.
                            Some(b) if b - f > 1.5 * step => {
                                f + (((b - f) / 2.0) / step).floor().max(1.0) * step
                            }
                            Some(_) => f,
                            None => clamp_mhz(f + 2.0 * step, lim),
                        }
                    }
                }
                Verdict::Hold | Verdict::Silent => f,
            };
            let next = clamp_mhz(next, lim);
            if next > f + 1e-6 {
                up += 1;
            } else if next < f - 1e-6 {
                down += 1;
            }
            if let Some(c) = q.chains.iter_mut().find(|c| c.chain_id == chain) {
                c.set_chip(chip, next);
            }
        }
        // Raise no faster than the budget's room: the chips' raises together may add at most
        // what is left up to the target (power ∝ f for the dynamic share; hashrate ∝ f).
        if let Some((have, want)) = budget
            && up > 0
            && have > 0.0
        {
            let share = if self.mode == Mode::Power {
                1.0 - STATIC_SHARE
            } else {
                1.0
            };
            let (now, mut raised, mut lowered) = (self.sum_mhz(p, m), 0.0, 0.0);
            for (chain, chip, _, f) in self.judge(p, m, lim) {
                let g = q
                    .chains
                    .iter()
                    .find(|c| c.chain_id == chain)
                    .map_or(f, |c| c.chip_mhz(chip));
                if g > f {
                    raised += g - f;
                } else {
                    lowered += f - g;
                }
            }
            let room = ((want / have - 1.0) / share * now + lowered).max(0.0);
            if raised > room + 1e-6 && short {
                // One step per chip per round, slowest chips first (the most headroom under
                // their edges), while the room lasts. The proportional cut below rounds every
                // raise to nothing once the room is under a step per chip: 600 W stopped at
                // 590 W, and at the voltage floor the last watts are the cheapest hashes.
                let mut raises: Vec<(u32, u32, f64, f64, f64)> = Vec::new();
                for (chain, chip, _, f) in self.judge(p, m, lim) {
                    if let Some(c) = q.chains.iter().find(|c| c.chain_id == chain) {
                        let g = c.chip_mhz(chip);
                        if g > f {
                            raises.push((chain, chip, f, g, f));
                        }
                    }
                }
                raises.sort_by(|a, b| a.2.total_cmp(&b.2));
                let mut left = room;
                let mut progressed = true;
                while progressed {
                    progressed = false;
                    for r in &mut raises {
                        if left >= step && r.4 + step <= r.3 + 1e-6 {
                            r.4 += step;
                            left -= step;
                            progressed = true;
                        }
                    }
                }
                up = 0;
                for (chain, chip, f, _, to) in raises {
                    up += u32::from(to > f);
                    if let Some(c) = q.chains.iter_mut().find(|c| c.chain_id == chain) {
                        c.set_chip(chip, to);
                    }
                }
            } else if raised > room + 1e-6 {
                let k = room / raised;
                for (chain, chip, _, f) in self.judge(p, m, lim) {
                    if let Some(c) = q.chains.iter_mut().find(|c| c.chain_id == chain) {
                        let g = c.chip_mhz(chip);
                        if g > f {
                            let to = f + ((g - f) * k / step).floor() * step;
                            c.set_chip(chip, to);
                        }
                    }
                }
                up = self
                    .judge(p, m, lim)
                    .iter()
                    .filter(|(chain, chip, _, f)| {
                        q.chains
                            .iter()
                            .find(|c| c.chain_id == *chain)
                            .is_some_and(|c| c.chip_mhz(*chip) > f + 1e-6)
                    })
                    .count() as u32;
            }
        }
        // A few chips flip on noise every window (a chip at its edge errs at a couple of
        // percent, and a window holds a few dozen of its nonces): that is settled.
        let chips = self.judge(p, m, lim).len();
        let moving = f64::from(up + down) > (chips as f64 * SETTLED_SHARE).max(0.0);
        let done = |q: &Point| {
            // The end point keeps the erring chips' steps down, not the raises.
            let mut r = q.clone();
            for c in &mut r.chains {
                let Some(old) = p.chains.iter().find(|o| o.chain_id == c.chain_id) else {
                    continue;
                };
                for i in 0..chips as u32 {
                    if c.chip_mhz(i) > old.chip_mhz(i) + 1e-6 {
                        c.set_chip(i, old.chip_mhz(i));
                    }
                }
            }
            r
        };
        let Some((have, want)) = budget else {
            // Efficiency: every chip at its edge at the lowest voltage.
            if moving {
                return Outcome::Apply(q, format!("chips: {up} up, {down} down"));
            }
            return Outcome::Done(
                done(&q),
                m.measured,
                "every chip at its edge at the lowest voltage".into(),
            );
        };
        if over || (under && !moving) {
            // A different number of boards first (power mode, at most twice a search: the
            // prior decides it, re-anchored on this window).
            if self.mode == Mode::Power && self.board_changes < 2 {
                let r = self.planned_point(&q, m, lim);
                if r.boards_on() != q.boards_on() {
                    self.board_changes += 1;
                    let why = format!(
                        "{have:.1} for the {want:.1} target: {} boards instead of {} at {:.0} mV",
                        r.boards_on(),
                        q.boards_on(),
                        r.voltage_mv
                    );
                    return Outcome::Apply(r, why);
                }
            }
            // The chips' edges at this voltage give too much or too little: move the voltage
            // (the model re-anchored on this window), or, at a bound, the frequencies.
            let v = self.planned_voltage(p, m, lim);
            if (v - p.voltage_mv).abs() >= lim.mv_step * 0.5 {
                let q = self.move_voltage(&q, v, lim);
                let why = if v < p.voltage_mv {
                    format!(
                        "{have:.1} over the {want:.1} target at the chips' edges: voltage down to {v:.0} mV"
                    )
                } else {
                    format!(
                        "{have:.1} under the {want:.1} target at the chips' edges: voltage up to {v:.0} mV"
                    )
                };
                return Outcome::Apply(q, why);
            }
            if over {
                // At the lowest voltage: frequency is what is left.
                self.frequency_bound = true;
                let k = (1.0 + (want / have - 1.0) / (1.0 - STATIC_SHARE)).clamp(0.5, 1.0);
                let q = scale_frequencies(&q, k, lim);
                if q != *p {
                    return Outcome::Apply(q, "at the lowest voltage: frequency down".into());
                }
            }
            if !moving {
                return Outcome::Done(
                    done(&q),
                    m.measured,
                    if under {
                        "the most the board allows within its bounds".into()
                    } else {
                        "the least the board runs at within its bounds".into()
                    },
                );
            }
        }
        if moving {
            return Outcome::Apply(q, format!("chips: {up} up, {down} down"));
        }
        // Met, but most chips never showed where they err: a plan that scaled them below their
        // edges at a voltage higher than needed meets the target too (600 W from 40 % stopped
        // at 8.3 V, 0.89 of the oracle). A step down keeps the frequencies, so power falls
        // with V² and the chips explore up into it at the cheaper voltage.
        // Only on evidence: chips too slow to give a verdict (a window of few nonces) would
        // otherwise walk the voltage down and the under-target rule straight back up.
        let lo = self.min_mv(lim);
        if 2 * edges_known < chips && 2 * clean > chips && p.voltage_mv > lo + 1e-6 {
            let v = round_mv((p.voltage_mv - lim.mv_step).max(lo), lim).max(lo);
            if v < p.voltage_mv - 1e-6 {
                let mut r = done(&q);
                r.voltage_mv = v;
                return Outcome::Apply(
                    r,
                    format!(
                        "{have:.1} meets the target below the chips' edges: voltage down to {v:.0} mV"
                    ),
                );
            }
        }
        Outcome::Done(
            done(&q),
            m.measured,
            "target met with every chip at its edge at the lowest voltage".into(),
        )
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
        // A regulator that goes lower than the S9's, so the search, not the bound, decides.
        let mut c = Config::default();
        c.tuner.min_voltage_mv = 7480.0;
        Limits::resolve(&c, &board)
    }

    #[test]
    fn the_s9_regulator_bounds_the_voltage() {
        let board = BoardInfo::default();
        assert_eq!(Limits::resolve(&Config::default(), &board).min_mv, 7940.0);
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

    /// A pure board for the search: each chip's edge ∝ V^1.4 (not the prior's 1.5, so the
    /// search must correct its model), power ∝ V²·f plus leakage ∝ V, error rate rising
    /// steeply past the edge, a hashing floor at 7 V. Counts are expectations (no noise).
    struct Plant {
        edges: Vec<f64>,
        floor_mv: f64,
    }

    impl Plant {
        fn new() -> Plant {
            // Ten chips: 5 % spread around 700 MHz at 8.8 V, chip 7 weak, chip 2 strong.
            let mut edges: Vec<f64> = (0..10).map(|i| 700.0 * (0.95 + 0.01 * i as f64)).collect();
            edges[7] = 600.0;
            edges[2] = 780.0;
            Plant {
                edges,
                floor_mv: 7000.0,
            }
        }

        fn run(&self, p: &Point) -> Measurement {
            let vr = p.voltage_mv / 8800.0;
            let c = &p.chains[0];
            let mut chips = Vec::new();
            let mut power = 0.0;
            let mut ths = 0.0;
            for (i, e) in self.edges.iter().enumerate() {
                let f = c.chip_mhz(i as u32);
                let edge = e * vr.powf(1.4);
                let margin = (edge - f) / edge;
                let err = 0.5 / (1.0 + (margin / 0.01).exp());
                let results = (f / 10.0).round() as u64;
                let silent = p.voltage_mv < self.floor_mv;
                let hw = (results as f64 * err).round() as u64;
                chips.push(ChipStats {
                    chip: i as u32,
                    nonces: if silent { 0 } else { results - hw },
                    hw_errors: if silent { 0 } else { hw },
                    alive: !silent,
                });
                power += 85.0 * vr * vr * f / 650.0 + 15.0 * vr;
                ths += f / 650.0;
            }
            let nonces = chips.iter().map(|c| c.nonces).sum();
            let hw_errors = chips.iter().map(|c| c.hw_errors).sum();
            Measurement {
                measured: Measured {
                    power_watt: power,
                    hashrate_ths: ths * (1.0 - rate(nonces, hw_errors)),
                    ..Default::default()
                },
                expected_ths: ths,
                chains: vec![ChainStats {
                    chain_id: 0,
                    nonces,
                    hw_errors,
                    chips,
                }],
            }
        }

        /// Search from stock to the end: (point, measurement, windows).
        fn search(&self, mode: Mode, target: f64) -> (Point, Measurement, u32) {
            let lim = limits();
            let mut s = Search::new(mode, target);
            let mut p = Point::uniform(8800.0, 1, 650.0);
            for n in 1..=60 {
                let m = self.run(&p);
                match s.step(&p, &m, &lim) {
                    Outcome::Apply(q, why) => {
                        eprintln!(
                            "{n}: {:.0} W {:.2} TH/s at {:.0} mV -> {why}",
                            m.measured.power_watt, m.expected_ths, p.voltage_mv
                        );
                        p = q
                    }
                    Outcome::Done(q, _, _) => {
                        let m = self.run(&q);
                        return (q, m, n);
                    }
                }
            }
            panic!("no end in 60 windows: {p:?}");
        }
    }

    #[test]
    fn power_target_lowers_the_voltage_and_tunes_each_chip() {
        let plant = Plant::new();
        let lim = limits();
        let stock = plant.run(&Point::uniform(8800.0, 1, 650.0));
        let stock_jth = stock.measured.power_watt / stock.expected_ths;
        let target = stock.measured.power_watt * 0.65;
        let (p, m, windows) = plant.search(Mode::Power, target);
        let w = m.measured.power_watt;
        assert!(
            (w - target).abs() <= target * lim.power_tolerance,
            "{w} W for {target} W: {p:?}"
        );
        assert!(p.voltage_mv < 8800.0 - 500.0, "{p:?}");
        assert!(p.voltage_mv >= plant.floor_mv, "{p:?}");
        let jth = w / m.expected_ths;
        assert!(
            jth < 0.85 * stock_jth,
            "{jth} J/TH against stock {stock_jth}"
        );
        // Good chips faster, weak ones slower.
        let c = &p.chains[0];
        assert!(c.chip_mhz(2) > c.chip_mhz(0), "{c:?}");
        assert!(c.chip_mhz(7) < c.chip_mhz(0), "{c:?}");
        let errors = rate(m.chains[0].nonces, m.chains[0].hw_errors);
        assert!(errors < 0.02, "{errors}");
        assert!(windows <= 14, "{windows} windows");
    }

    #[test]
    fn a_frequency_only_answer_is_worse_than_the_search() {
        // The same power by frequency alone at stock voltage (what hw-agent's power loop does)
        // costs more per terahash than the searched point.
        let plant = Plant::new();
        let stock = plant.run(&Point::uniform(8800.0, 1, 650.0));
        let target = stock.measured.power_watt * 0.6;
        let (_, m, _) = plant.search(Mode::Power, target);
        let k = (target / stock.measured.power_watt - 0.15 / 1.0).max(0.1) / 0.85;
        let freq_only = plant.run(&Point::uniform(8800.0, 1, 650.0 * k));
        let a = m.measured.power_watt / m.expected_ths;
        let b = freq_only.measured.power_watt / freq_only.expected_ths;
        assert!(a < b * 0.9, "searched {a} J/TH, frequency only {b} J/TH");
    }

    #[test]
    fn the_voltage_floor_is_found_and_frequency_takes_over_below_it() {
        // Chips that stop answering under 7.7 V, and a target so low that even that voltage at
        // the chips' edges draws more.
        let plant = Plant {
            floor_mv: 7700.0,
            ..Plant::new()
        };
        let lim = limits();
        let stock = plant.run(&Point::uniform(8800.0, 1, 650.0));
        let target = stock.measured.power_watt * 0.5;
        let (p, m, _) = plant.search(Mode::Power, target);
        assert!(p.voltage_mv >= plant.floor_mv, "{p:?}");
        assert!(p.voltage_mv <= plant.floor_mv + 3.0 * lim.mv_step, "{p:?}");
        let w = m.measured.power_watt;
        assert!(
            w <= target * (1.0 + lim.power_tolerance),
            "{w} W for {target} W"
        );
        // The leakage is paid at the floor whatever the frequencies: the watts left under the
        // target are the cheapest hashes, so the search does not stop in the lower half of
        // the tolerance.
        assert!(
            w >= target * (1.0 - 0.5 * lim.power_tolerance),
            "{w} W for {target} W"
        );
        assert!(m.chains[0].chips.iter().all(|c| c.alive && c.nonces > 0));
    }

    #[test]
    fn hashrate_mode_meets_the_hashrate_with_less_power() {
        let plant = Plant::new();
        let lim = limits();
        let stock = plant.run(&Point::uniform(8800.0, 1, 650.0));
        let target = stock.expected_ths * 0.8;
        let (p, m, _) = plant.search(Mode::Hashrate, target);
        assert!(
            (m.expected_ths - target).abs() <= target * lim.power_tolerance,
            "{} TH/s for {target}: {p:?}",
            m.expected_ths
        );
        assert!(m.measured.power_watt < stock.measured.power_watt * 0.8 * 0.9);
    }

    #[test]
    fn efficiency_mode_runs_the_chips_at_their_edges_near_the_floor() {
        let plant = Plant::new();
        let lim = limits();
        let (p, m, _) = plant.search(Mode::Efficiency, 0.0);
        assert!(
            p.voltage_mv <= lim.min_mv.max(plant.floor_mv) + 2.0 * lim.mv_step,
            "{p:?}"
        );
        let errors = rate(m.chains[0].nonces, m.chains[0].hw_errors);
        assert!(errors < 0.02, "{errors}");
    }

    #[test]
    fn bounds_are_never_left() {
        let lim = limits();
        let plant = Plant::new();
        for (mode, target) in [
            (Mode::Power, 5000.0),
            (Mode::Power, 1.0),
            (Mode::Hashrate, 99.0),
        ] {
            let mut s = Search::new(mode, target);
            let mut p = Point::uniform(8800.0, 1, 650.0);
            for _ in 0..40 {
                let m = plant.run(&p);
                let (Outcome::Apply(q, _) | Outcome::Done(q, _, _)) = s.step(&p, &m, &lim);
                assert!((lim.min_mv..=lim.max_mv).contains(&q.voltage_mv), "{q:?}");
                for i in 0..10 {
                    let f = q.chains[0].chip_mhz(i);
                    assert!((lim.min_mhz..=lim.max_mhz).contains(&f), "{q:?}");
                }
                p = q;
            }
        }
    }

    #[test]
    fn boards_off_only_when_the_floor_binds() {
        // Three boards of 400 W at 8.8 V, a floor at 7.94 V, chips down to half their speed.
        let plan = |target| boards_for_power(400.0, 8800.0, 3, target, 0.5, 7940.0, 9240.0);
        // Near stock every board hashes, at a voltage above the floor.
        let p = plan(1000.0);
        assert_eq!(p.boards, 3);
        assert!(p.voltage_mv > 7940.0 && p.share > 0.999, "{p:?}");
        // Far below: the floor binds; a board off buys more hashrate than three slowed down.
        let p = plan(500.0);
        assert!(p.boards < 3, "{p:?}");
        let all = boards_for_power(400.0, 8800.0, 1, 500.0 / 3.0, 0.5, 7940.0, 9240.0);
        assert!(p.hashrate > 3.0 * all.hashrate, "{p:?} against {all:?}");
        // One board: nothing to switch off.
        assert_eq!(
            boards_for_power(400.0, 8800.0, 1, 100.0, 0.0, 7940.0, 9240.0).boards,
            1
        );
    }

    #[test]
    fn a_chip_is_judged_on_every_window_at_its_frequency() {
        // One failure in 40 nonces a window: noise for one window, 2.4 % over four.
        let lim = limits();
        let mut s = Search::refit(Mode::Efficiency, 0.0);
        let p = Point::uniform(8000.0, 1, 500.0);
        let mut w = window(1.0, &[(40, 0); 10]);
        w.chains[0].chips[3].nonces = 39;
        w.chains[0].chips[3].hw_errors = 1;
        w.chains[0].hw_errors = 1;
        let mut chip3 = Vec::new();
        for _ in 0..4 {
            let q = match s.step(&p, &w, &lim) {
                Outcome::Apply(q, _) | Outcome::Done(q, _, _) => q,
            };
            chip3.push(q.chains[0].chip_mhz(3));
        }
        // Held while the evidence is thin, then down once the tally says it errs.
        assert_eq!(chip3[0], 500.0, "{chip3:?}");
        assert!(chip3[3] < 500.0, "{chip3:?}");
    }

    #[test]
    fn voltage_model_inverts() {
        let v = voltage_for_power(1000.0, 8800.0, 600.0, 6000.0, 9500.0);
        assert!((power_at_edges(1000.0, 8800.0, v) - 600.0).abs() < 0.01);
        assert_eq!(
            voltage_for_power(1000.0, 8800.0, 1.0, 7000.0, 9500.0),
            7000.0
        );
        assert_eq!(
            voltage_for_power(1000.0, 8800.0, 1e9, 7000.0, 9500.0),
            9500.0
        );
        let v = voltage_for_hashrate(10.0, 8800.0, 8.0, 6000.0, 9500.0);
        assert!((v / 8800.0).powf(1.5) * 10.0 - 8.0 < 1e-9);
    }

    #[test]
    fn at_known_edges_near_the_target_clean_chips_hold_and_under_it_they_explore() {
        let lim = limits();
        let step = |s: &mut Search, p: &Point, w: &Measurement| match s.step(p, w, &lim) {
            Outcome::Apply(q, _) | Outcome::Done(q, _, _) => q,
        };
        let raised =
            |q: &Point, from: f64| (0..10).filter(|&i| q.chains[0].chip_mhz(i) > from).count();
        let erring = [(40, 10); 10];
        let mut mixed = [(40, 0); 10];
        mixed[..3].fill((40, 10));
        // A refit at a 1000 W target: every chip errs at 550 MHz (its edge is known now) ...
        let mut s = Search::refit(Mode::Power, 1000.0);
        let q = step(
            &mut s,
            &Point::uniform(8000.0, 1, 550.0),
            &window(990.0, &erring),
        );
        assert_eq!(q.chains[0].chip_mhz(0), 525.0);
        let mut s2 = s.clone();
        // ... then, half a percent under the target, three chips err at 525 and give back
        // their watts: the seven clean ones hold instead of bisecting into them.
        let at = Point::uniform(8000.0, 1, 525.0);
        let q = step(&mut s, &at, &window(995.0, &mixed));
        assert_eq!(raised(&q, 525.0), 0, "{q:?}");
        assert_eq!(
            (0..3).filter(|&i| q.chains[0].chip_mhz(i) < 525.0).count(),
            3
        );
        // Well under the target they bisect toward their edge.
        let q = step(
            &mut s2,
            &at,
            &window(1000.0 * (1.0 - 2.0 * lim.power_tolerance), &[(40, 0); 10]),
        );
        assert_eq!(raised(&q, 525.0), 10, "{q:?}");
        // With no edge known (a fresh plan), chips explore near the target too.
        let mut fresh = Search::refit(Mode::Power, 1000.0);
        let q = step(&mut fresh, &at, &window(995.0, &mixed));
        assert!(raised(&q, 525.0) > 0, "{q:?}");
    }

    #[test]
    fn at_the_floor_a_cut_that_landed_low_fills_the_budget_back() {
        let lim = limits();
        let clean = [(40, 0); 10];
        let raised =
            |q: &Point, from: f64| (0..10).filter(|&i| q.chains[0].chip_mhz(i) > from).count();
        // Over the target at the lowest voltage: frequency is cut.
        let mut s = Search::refit(Mode::Power, 1000.0);
        let cut = match s.step(
            &Point::uniform(lim.min_mv, 1, 600.0),
            &window(1100.0, &clean),
            &lim,
        ) {
            Outcome::Apply(q, why) => {
                assert!(q.chains[0].chip_mhz(0) < 600.0, "{why}");
                q
            }
            o => panic!("{o:?}"),
        };
        let f = cut.chains[0].chip_mhz(0);
        // The cut landed 2 % under (within the 3 % tolerance): the chips take the watts back.
        let mut low = s.clone();
        match low.step(&cut, &window(980.0, &clean), &lim) {
            Outcome::Apply(q, why) => assert_eq!(raised(&q, f), 10, "{why}"),
            o => panic!("{o:?}"),
        }
        // 1.6 % under, room for less than a step per chip: as many chips as it holds.
        let mut near = s.clone();
        match near.step(&cut, &window(984.0, &clean), &lim) {
            Outcome::Apply(q, why) => {
                let n = raised(&q, f);
                assert!((5..10).contains(&n), "{n} raised: {why}");
            }
            o => panic!("{o:?}"),
        }
        // Half a percent under: done where it is.
        match s.step(&cut, &window(995.0, &clean), &lim) {
            Outcome::Done(q, _, _) => assert_eq!(raised(&q, f), 0),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_target_met_below_unknown_edges_steps_the_voltage_down_first() {
        let lim = limits();
        let at = Point::uniform(8400.0, 1, 500.0);
        let clean = [(40, 0); 10];
        // Within the tolerance, every chip clean, no edge known: not done, a step down with the
        // frequencies kept.
        let mut s = Search::refit(Mode::Power, 1000.0);
        match s.step(&at, &window(995.0, &clean), &lim) {
            Outcome::Apply(q, why) => {
                assert_eq!(q.voltage_mv, 8400.0 - lim.mv_step, "{why}");
                assert_eq!(q.chains[0].chip_mhz(0), 500.0);
            }
            o => panic!("{o:?}"),
        }
        // The same once the chips have shown their edges: done where it is.
        let mut s = Search::refit(Mode::Power, 1000.0);
        let _ = s.step(
            &Point::uniform(8400.0, 1, 525.0),
            &window(1000.0, &[(40, 10); 10]),
            &lim,
        );
        assert!(matches!(
            s.step(&at, &window(995.0, &clean), &lim),
            Outcome::Done(q, _, _) if q.voltage_mv == 8400.0
        ));
        // Too few nonces for a verdict: no evidence the chips have room, done where it is.
        let mut s = Search::refit(Mode::Power, 1000.0);
        assert!(matches!(
            s.step(&at, &window(995.0, &[(4, 0); 10]), &lim),
            Outcome::Done(q, _, _) if q.voltage_mv == 8400.0
        ));
        // At the voltage floor there is nowhere lower to look.
        let floor = Point::uniform(lim.min_mv, 1, 500.0);
        let mut s = Search::refit(Mode::Power, 1000.0);
        assert!(matches!(
            s.step(&floor, &window(995.0, &clean), &lim),
            Outcome::Done(..)
        ));
    }
}
