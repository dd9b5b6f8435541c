//! The tuner's oracle: from the simulated board's ground truth (each chip's silicon, read from
//! the same seed the sim draws it from) and the sim's own physics, the most hashrate the board
//! allows at a power target under the firmware's bounds (the tuner's voltage and frequency
//! limits), with one voltage per hashboard, one frequency per chip and whole hashboards off
//! when that is better. Prints one JSON line per level; `bench/tuner_oracle.py` puts the
//! tuner's achieved figures beside them. The tuner never sees any of this.
//!
//! Assumptions (docs/PERFORMANCE.md): junctions at the fan loop's target (75 C) where the fans
//! can hold it and at the sim's full-airflow steady state where they cannot, the hottest
//! junction never above the tuner's temperature limit (its dynamic power scaling enforces that,
//! so a point hotter than it is not one the firmware may run); a chip counts at the highest
//! frequency where at most 1 % of its nonces fail, and its good hashes only. Power is at the
//! wall: the chips' DC through the sim's PSU efficiency curve (`psu_input_watt`).

use clap::Parser;
use svcos_common::config::Config;
use svcos_hw_sim::BoardSpec;
use svcos_hw_sim::state::{
    BoardState, Silicon, board_conductance, chip_physics, junction_c, psu_input_watt,
    psu_output_watt,
};
use svcos_tuner::model::{BoardInfo, Limits};

#[derive(Parser)]
#[command(about = "Best hashrate the simulated board allows per power target (ground truth)")]
struct Args {
    /// Power targets as fractions of stock power (stock measured by the same physics).
    #[arg(long, value_delimiter = ',', default_value = "0.4,0.6,0.8,1.0,1.1")]
    levels: Vec<f64>,
    /// Extra absolute targets, W.
    #[arg(long, value_delimiter = ',', default_value = "600")]
    watts: Vec<f64>,
    /// Junction temperature the fan loop holds while its fans have room, C (0 = the config's
    /// `[thermal].target_temp_c`).
    #[arg(long, default_value_t = 0.0)]
    temp_c: f64,
    /// Ignore the temperature limit (junctions at `temp_c` at any power, the earlier oracle).
    #[arg(long)]
    no_thermal: bool,
    /// Voltage grid step, mV.
    #[arg(long, default_value_t = 20.0)]
    grid_mv: f64,
    /// Keep every hashboard on (the bound of a tuner that never switches one off).
    #[arg(long)]
    all_chains: bool,
    /// One voltage for every hashboard that is on (the bound of a board whose chains share one
    /// supply, as the sim's and the tuner's do), to weigh what per-board voltage would add.
    #[arg(long)]
    common_voltage: bool,
    /// The tuner's lowest chip frequency, MHz (0 = the tuner's default).
    #[arg(long, default_value_t = 0.0)]
    min_mhz: f64,
}

/// Error share a chip may run at.
const MAX_ERROR: f64 = 0.01;

struct Board {
    spec: BoardSpec,
    chips: Vec<Vec<Silicon>>,
    lim: Limits,
    common_voltage: bool,
    /// Junction temperature the physics is evaluated at, C (moved by [`Board::settle`]).
    temp_c: f64,
}

/// A solution: good TH/s, power W, and per hashing chain (power W, its hungriest chip's W).
struct Solved {
    ths: f64,
    power: f64,
    chains: Vec<(f64, f64)>,
}

/// (power W, good hashrate TH/s) of one chain at `v` mV within `budget` W of dynamic power
/// beyond the minimum, filled cheapest-first; `None` budget = every chip at its edge.
struct ChainAt {
    leak_w: f64,
    /// (dynamic W per MHz, edge MHz, good share at the edge, leakage W) per hashing chip.
    chips: Vec<(f64, f64, f64, f64)>,
}

impl Board {
    fn chain_at(&self, c: usize, v: f64) -> ChainAt {
        let v_rel = v / self.spec.nominal_voltage_mv;
        let mut out = ChainAt {
            leak_w: 0.0,
            chips: Vec::new(),
        };
        for si in &self.chips[c] {
            let p = chip_physics(&self.spec, si, v_rel, 1.0, self.temp_c);
            out.leak_w += p.leakage_watt;
            if p.below_floor {
                continue;
            }
            // Highest frequency at MAX_ERROR: margin = width·ln(0.5/e − 1).
            let edge = p.fmax_mhz * (1.0 - 0.01 * (0.5 / MAX_ERROR - 1.0f64).ln());
            let edge = edge.min(self.lim.max_mhz);
            if edge < self.lim.min_mhz {
                continue;
            }
            let err = chip_physics(&self.spec, si, v_rel, edge, self.temp_c).error_rate;
            out.chips
                .push((p.dynamic_watt, edge, 1.0 - err, p.leakage_watt));
        }
        out
    }

    fn ths(&self, mhz: f64) -> f64 {
        self.spec.chip_model.nominal_hashrate(mhz) / 1e12
    }

    /// Best solution for chains at voltages `vs` (0 = off) within `target` W.
    fn best_at(&self, vs: &[f64], target: f64) -> Option<Solved> {
        let chains: Vec<ChainAt> = vs
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0.0)
            .map(|(c, v)| self.chain_at(c, *v))
            .collect();
        let leak: f64 = chains.iter().map(|c| c.leak_w).sum();
        // (chain, chip) indexes of every hashing chip, cheapest good hash first.
        let mut order: Vec<(usize, usize)> = chains
            .iter()
            .enumerate()
            .flat_map(|(c, ch)| (0..ch.chips.len()).map(move |i| (c, i)))
            .collect();
        if order.is_empty() {
            return None;
        }
        let chip = |(c, i): (usize, usize)| chains[c].chips[i];
        let floor: f64 = order.iter().map(|&k| chip(k).0 * self.lim.min_mhz).sum();
        let mut budget = target - leak - floor;
        if budget < 0.0 {
            return None;
        }
        order.sort_by(|&a, &b| (chip(a).0 / chip(a).2).total_cmp(&(chip(b).0 / chip(b).2)));
        let mut out = Solved {
            ths: 0.0,
            power: leak + floor,
            chains: chains.iter().map(|c| (c.leak_w, 0.0)).collect(),
        };
        for k in order {
            let (w_per_mhz, edge, good, leak_w) = chip(k);
            let extra = ((edge - self.lim.min_mhz) * w_per_mhz).min(budget.max(0.0));
            budget -= extra;
            out.power += extra;
            let f = self.lim.min_mhz + extra / w_per_mhz;
            out.ths += self.ths(f) * good;
            let chip_w = leak_w + w_per_mhz * f;
            let chain = &mut out.chains[k.0];
            chain.0 += w_per_mhz * f;
            chain.1 = chain.1.max(chip_w);
        }
        Some(out)
    }

    /// The hottest junction of a solution with the fans at full speed, C.
    fn hottest_at_full_airflow(&self, s: &Solved) -> f64 {
        let g = board_conductance(&self.spec, 1.0);
        s.chains
            .iter()
            .map(|&(chain_w, chip_w)| junction_c(self.spec.room_temp_c + chain_w / g, chip_w))
            .fold(f64::MIN, f64::max)
    }

    fn stock_power(&self) -> f64 {
        let v_rel = self.lim.stock_mv / self.spec.nominal_voltage_mv;
        self.chips
            .iter()
            .flatten()
            .map(|si| {
                let p = chip_physics(&self.spec, si, v_rel, self.lim.stock_mhz, self.temp_c);
                p.dynamic_watt + p.leakage_watt
            })
            .sum()
    }

    /// The best voltages for `target` W at the board's present `temp_c`: (TH/s, W, mV per
    /// chain, the hottest junction at full airflow).
    fn search(&self, target: f64, grid: f64, all_chains: bool) -> Option<(Solved, Vec<f64>)> {
        let n = self.chips.len();
        let levels: Vec<f64> = {
            let mut v = self.lim.min_mv;
            let mut out = Vec::new();
            while v <= self.lim.max_mv + 1e-6 {
                out.push(v);
                v += grid;
            }
            out
        };
        let mut best: Option<(Solved, Vec<f64>)> = None;
        let consider = |vs: Vec<f64>, best: &mut Option<(Solved, Vec<f64>)>| {
            if let Some(s) = self.best_at(&vs, target)
                && best.as_ref().is_none_or(|b| s.ths > b.0.ths + 1e-9)
            {
                *best = Some((s, vs));
            }
        };
        // Every subset of chains on, one common voltage; then each chain's voltage alone.
        let all = (1u32 << n) - 1;
        for mask in 1u32..(1 << n) {
            if all_chains && mask != all {
                continue;
            }
            for &v in &levels {
                let vs = (0..n)
                    .map(|c| if mask & (1 << c) != 0 { v } else { 0.0 })
                    .collect();
                consider(vs, &mut best);
            }
        }
        for _ in 0..if self.common_voltage { 0 } else { 3 } {
            let Some(vs) = best.as_ref().map(|b| b.1.clone()) else {
                break;
            };
            for c in 0..n {
                if vs[c] == 0.0 {
                    continue;
                }
                for &v in &levels {
                    let mut t = vs.clone();
                    t[c] = v;
                    consider(t, &mut best);
                }
            }
        }
        best
    }

    /// [`Board::search`] at the junction temperature its own answer runs at: the fan loop's
    /// target while full airflow would be cooler than it, the full-airflow steady state above.
    fn settle(&mut self, target: f64, fan_target_c: f64, grid: f64, all: bool) -> Option<Found> {
        self.temp_c = fan_target_c;
        let mut found = None;
        for _ in 0..6 {
            let (s, vs) = self.search(target, grid, all)?;
            let hottest = self.hottest_at_full_airflow(&s);
            let next = hottest.max(fan_target_c);
            let done = (next - self.temp_c).abs() < 0.2;
            found = Some(Found {
                ths: s.ths,
                power: s.power,
                voltages: vs,
                hottest_c: next,
                thermally_bound: false,
            });
            if done {
                break;
            }
            // Evaluated at the hottest junction, so the board's leakage and edges are judged
            // a little pessimistically; the step is damped so the fixed point does not ring.
            self.temp_c = 0.5 * (self.temp_c + next);
        }
        found
    }

    /// The best the board allows at `target` W at the wall, with the hottest junction kept
    /// under `max_c` by a lower power where the target itself would be too hot.
    fn oracle(
        &mut self,
        target: f64,
        fan_c: f64,
        max_c: Option<f64>,
        grid: f64,
        all: bool,
    ) -> Option<Found> {
        // Targets and answers are at the wall, as the firmware's are; the chips' budget is what
        // the PSU delivers from it.
        let target = psu_output_watt(&self.spec, target);
        let found = self.oracle_dc(target, fan_c, max_c, grid, all)?;
        Some(Found {
            power: psu_input_watt(&self.spec, found.power),
            ..found
        })
    }

    /// [`Board::oracle`] with `target` and the answer in DC watts.
    fn oracle_dc(
        &mut self,
        target: f64,
        fan_c: f64,
        max_c: Option<f64>,
        grid: f64,
        all: bool,
    ) -> Option<Found> {
        let at = self.settle(target, fan_c, grid, all)?;
        let Some(max_c) = max_c else {
            return Some(at);
        };
        if at.hottest_c <= max_c {
            return Some(at);
        }
        // Bisect the power for the hottest point under the limit.
        let (mut lo, mut hi) = (target * 0.3, target);
        let mut best = None;
        for _ in 0..14 {
            let mid = 0.5 * (lo + hi);
            match self.settle(mid, fan_c, grid, all) {
                Some(f) if f.hottest_c <= max_c => {
                    lo = mid;
                    best = Some(Found {
                        thermally_bound: true,
                        ..f
                    });
                }
                _ => hi = mid,
            }
        }
        best
    }
}

/// The oracle's answer for one target.
struct Found {
    ths: f64,
    power: f64,
    voltages: Vec<f64>,
    hottest_c: f64,
    thermally_bound: bool,
}

fn main() {
    let args = Args::parse();
    let mut config = Config::default();
    config.tuner.min_frequency_mhz = args.min_mhz;
    let spec = BoardSpec::from_config(&config);
    let ttys = (0..spec.chains).map(|c| format!("oracle{c}")).collect();
    let state = BoardState::new(spec.clone(), ttys);
    let chips = state
        .chains
        .iter()
        .map(|c| c.chips.iter().map(|x| x.silicon).collect())
        .collect();
    let info = BoardInfo {
        serial: String::new(),
        chains: spec.chains,
        chips_per_chain: spec.chips_per_chain,
        nominal_power_watt: 0.0,
        nominal_ths: 0.0,
    };
    let lim = Limits::resolve(&config, &info);
    let fan_c = if args.temp_c > 0.0 {
        args.temp_c
    } else {
        config.thermal.target_temp_c
    };
    let max_c = (!args.no_thermal).then_some(lim.max_temp_c);
    let mut board = Board {
        spec,
        chips,
        lim,
        common_voltage: args.common_voltage,
        temp_c: fan_c,
    };
    // Stock at the temperature it runs at: the board's figures at stock settings, hotter than
    // the fan target when full airflow cannot hold it.
    let stock = {
        let mut stock = board.stock_power();
        for _ in 0..6 {
            let per_chain = stock / board.chips.len() as f64;
            let per_chip = per_chain / board.spec.chips_per_chain as f64;
            let g = board_conductance(&board.spec, 1.0);
            let t = junction_c(board.spec.room_temp_c + per_chain / g, per_chip).max(fan_c);
            board.temp_c = if args.no_thermal { fan_c } else { t };
            stock = board.stock_power();
        }
        psu_input_watt(&board.spec, stock)
    };
    let stock_ths =
        board.ths(board.lim.stock_mhz) * board.chips.iter().map(Vec::len).sum::<usize>() as f64;
    println!(
        "{}",
        serde_json::json!({"level": "stock", "target_watt": stock, "ths": stock_ths,
            "j_per_th": stock / stock_ths, "voltage_mv": board.lim.stock_mv,
            "junction_c": board.temp_c})
    );
    let targets = args
        .levels
        .iter()
        .map(|l| (format!("{:.0}%", l * 100.0), stock * l))
        .chain(args.watts.iter().map(|w| (format!("{w:.0} W"), *w)));
    for (level, target) in targets {
        match board.oracle(target, fan_c, max_c, args.grid_mv, args.all_chains) {
            Some(f) => println!(
                "{}",
                serde_json::json!({"level": level, "target_watt": target, "ths": f.ths,
                    "power_watt": f.power, "j_per_th": f.power / f.ths, "voltage_mv": f.voltages,
                    "hottest_c": f.hottest_c, "thermally_bound": f.thermally_bound})
            ),
            None => println!(
                "{}",
                serde_json::json!({"level": level, "target_watt": target, "ths": 0.0,
                    "note": "below what the board draws at its lowest settings"})
            ),
        }
    }
}
