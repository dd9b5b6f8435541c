//! The tuner's oracle: from the simulated board's ground truth (each chip's silicon, read from
//! the same seed the sim draws it from) and the sim's own physics, the most hashrate the board
//! allows at a power target under the firmware's bounds (the tuner's voltage and frequency
//! limits), with one voltage per hashboard, one frequency per chip and whole hashboards off
//! when that is better. Prints one JSON line per level; `bench/tuner_oracle.py` puts the
//! tuner's achieved figures beside them. The tuner never sees any of this.
//!
//! Assumptions (docs/PERFORMANCE.md): junctions at the fan loop's 75 C target; a chip counts
//! at the highest frequency where at most 1 % of its nonces fail, and its good hashes only.

use clap::Parser;
use svcos_common::config::Config;
use svcos_hw_sim::BoardSpec;
use svcos_hw_sim::state::{BoardState, Silicon, chip_physics};
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
    /// Junction temperature assumed, C.
    #[arg(long, default_value_t = 75.0)]
    temp_c: f64,
    /// Voltage grid step, mV.
    #[arg(long, default_value_t = 20.0)]
    grid_mv: f64,
    /// Keep every hashboard on (the bound of a tuner that never switches one off).
    #[arg(long)]
    all_chains: bool,
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
    temp_c: f64,
}

/// (power W, good hashrate TH/s) of one chain at `v` mV within `budget` W of dynamic power
/// beyond the minimum, filled cheapest-first; `None` budget = every chip at its edge.
struct ChainAt {
    leak_w: f64,
    /// (dynamic W per MHz, edge MHz, good share at the edge) per hashing chip.
    chips: Vec<(f64, f64, f64)>,
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
            out.chips.push((p.dynamic_watt, edge, 1.0 - err));
        }
        out
    }

    fn ths(&self, mhz: f64) -> f64 {
        self.spec.chip_model.nominal_hashrate(mhz) / 1e12
    }

    /// Best (TH/s, W) for chains at voltages `vs` (0 = off) within `target` W.
    fn best_at(&self, vs: &[f64], target: f64) -> Option<(f64, f64)> {
        let chains: Vec<ChainAt> = vs
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0.0)
            .map(|(c, v)| self.chain_at(c, *v))
            .collect();
        let leak: f64 = chains.iter().map(|c| c.leak_w).sum();
        let mut chips: Vec<(f64, f64, f64)> = chains.iter().flat_map(|c| c.chips.clone()).collect();
        if chips.is_empty() {
            return None;
        }
        let floor: f64 = chips.iter().map(|c| c.0 * self.lim.min_mhz).sum();
        let mut budget = target - leak - floor;
        if budget < 0.0 {
            return None;
        }
        // Cheapest good hash first.
        chips.sort_by(|a, b| (a.0 / a.2).total_cmp(&(b.0 / b.2)));
        let (mut ths, mut power) = (0.0, leak + floor);
        for (w_per_mhz, edge, good) in chips {
            let extra = ((edge - self.lim.min_mhz) * w_per_mhz).min(budget.max(0.0));
            budget -= extra;
            power += extra;
            let f = self.lim.min_mhz + extra / w_per_mhz;
            ths += self.ths(f) * good;
        }
        Some((ths, power))
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

    fn oracle(&self, target: f64, grid: f64, all_chains: bool) -> Option<(f64, f64, Vec<f64>)> {
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
        let mut best: Option<(f64, f64, Vec<f64>)> = None;
        let consider = |vs: Vec<f64>, best: &mut Option<(f64, f64, Vec<f64>)>| {
            if let Some((ths, w)) = self.best_at(&vs, target)
                && best.as_ref().is_none_or(|b| ths > b.0 + 1e-9)
            {
                *best = Some((ths, w, vs));
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
        for _ in 0..3 {
            let Some((_, _, vs)) = best.clone() else {
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
    let board = Board {
        spec,
        chips,
        lim,
        temp_c: args.temp_c,
    };
    let stock = board.stock_power();
    let stock_ths =
        board.ths(board.lim.stock_mhz) * board.chips.iter().map(Vec::len).sum::<usize>() as f64;
    println!(
        "{}",
        serde_json::json!({"level": "stock", "target_watt": stock, "ths": stock_ths,
            "j_per_th": stock / stock_ths, "voltage_mv": board.lim.stock_mv})
    );
    let targets = args
        .levels
        .iter()
        .map(|l| (format!("{:.0}%", l * 100.0), stock * l))
        .chain(args.watts.iter().map(|w| (format!("{w:.0} W"), *w)));
    for (level, target) in targets {
        match board.oracle(target, args.grid_mv, args.all_chains) {
            Some((ths, w, vs)) => println!(
                "{}",
                serde_json::json!({"level": level, "target_watt": target, "ths": ths,
                    "power_watt": w, "j_per_th": w / ths, "voltage_mv": vs})
            ),
            None => println!(
                "{}",
                serde_json::json!({"level": level, "target_watt": target, "ths": 0.0,
                    "note": "below what the board draws at its lowest settings"})
            ),
        }
    }
}
