//! The tuner's vocabulary: operating points, measurements, profiles and the resolved limits.
//! These are also the on-disk shapes (serde), versioned by the `schema` tag of each file.

use serde::{Deserialize, Serialize};
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};
use svcos_common::config::{Config, TuneModeConfig};
use svcos_proto::tuner::v1 as pb;

/// What the tuner optimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Hold PSU power at the power target with the most hashrate.
    Power,
    /// Reach the hashrate target with the least power.
    Hashrate,
    /// Least joules per terahash.
    Efficiency,
    /// A named or silicon profile applied as is.
    Fixed,
}

impl Mode {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Power => "power",
            Mode::Hashrate => "hashrate",
            Mode::Efficiency => "efficiency",
            Mode::Fixed => "fixed",
        }
    }

    /// From the config enum.
    pub fn from_config(m: TuneModeConfig) -> Mode {
        match m {
            TuneModeConfig::Power => Mode::Power,
            TuneModeConfig::Hashrate => Mode::Hashrate,
            TuneModeConfig::Efficiency => Mode::Efficiency,
        }
    }

    /// To the proto enum.
    pub fn to_pb(self) -> pb::TuneMode {
        match self {
            Mode::Power => pb::TuneMode::Power,
            Mode::Hashrate => pb::TuneMode::Hashrate,
            Mode::Efficiency => pb::TuneMode::Efficiency,
            Mode::Fixed => pb::TuneMode::Fixed,
        }
    }
}

/// One chip run at its own frequency, above or below its chain's base (each chip's silicon has
/// its own edge: good chips run faster, weak ones slower).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChipTrim {
    /// Chip index in the chain.
    pub chip: u32,
    /// Its frequency, MHz.
    pub frequency_mhz: f64,
}

/// One chain's frequencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainPoint {
    /// Chain index.
    pub chain_id: u32,
    /// Base frequency of the chain, MHz.
    pub frequency_mhz: f64,
    /// Chips whose frequency differs from the base.
    #[serde(default)]
    pub chips: Vec<ChipTrim>,
    /// Hashing; false = switched off by the tuner because the power target is met better
    /// without this board (its leakage saved for the others' frequency).
    #[serde(default = "on")]
    pub enabled: bool,
}

fn on() -> bool {
    true
}

impl ChainPoint {
    /// The frequency a chip runs at.
    pub fn chip_mhz(&self, chip: u32) -> f64 {
        self.chips
            .iter()
            .find(|t| t.chip == chip)
            .map_or(self.frequency_mhz, |t| t.frequency_mhz)
    }

    /// Set a chip's frequency (one equal to the base needs no entry).
    pub fn set_chip(&mut self, chip: u32, mhz: f64) {
        self.chips.retain(|t| t.chip != chip);
        if (mhz - self.frequency_mhz).abs() > 1e-6 {
            self.chips.push(ChipTrim {
                chip,
                frequency_mhz: mhz,
            });
            self.chips.sort_by_key(|t| t.chip);
        }
    }
}

/// An operating point: the PSU voltage and every chain's frequencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Point {
    /// PSU output voltage, mV (one PSU feeds every chain).
    pub voltage_mv: f64,
    /// Per chain.
    pub chains: Vec<ChainPoint>,
}

impl Point {
    /// Stock: every chain at `mhz`, no trims.
    pub fn uniform(voltage_mv: f64, chains: u32, mhz: f64) -> Point {
        Point {
            voltage_mv,
            chains: (0..chains)
                .map(|chain_id| ChainPoint {
                    chain_id,
                    frequency_mhz: mhz,
                    chips: Vec::new(),
                    enabled: true,
                })
                .collect(),
        }
    }

    /// Every chip's frequency of a chain with `chips` chips.
    pub fn chip_frequencies(&self, chain: u32, chips: u32) -> Vec<f64> {
        self.chains
            .iter()
            .find(|c| c.chain_id == chain)
            .map(|c| (0..chips).map(|i| c.chip_mhz(i)).collect())
            .unwrap_or_default()
    }

    /// Boards hashing.
    pub fn boards_on(&self) -> usize {
        self.chains.iter().filter(|c| c.enabled).count()
    }

    /// Mean chain base frequency, MHz.
    pub fn mean_mhz(&self) -> f64 {
        if self.chains.is_empty() {
            return 0.0;
        }
        self.chains.iter().map(|c| c.frequency_mhz).sum::<f64>() / self.chains.len() as f64
    }

    /// To the proto shape.
    pub fn chains_pb(&self) -> Vec<pb::ChainPoint> {
        self.chains
            .iter()
            .map(|c| pb::ChainPoint {
                chain_id: c.chain_id,
                switched_off: !c.enabled,
                frequency_mhz: c.frequency_mhz,
                chips: c
                    .chips
                    .iter()
                    .map(|t| pb::ChipPoint {
                        chip: t.chip,
                        frequency_mhz: t.frequency_mhz,
                    })
                    .collect(),
            })
            .collect()
    }
}

/// What a point gave over a measurement window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Measured {
    /// Mean PSU power, W.
    pub power_watt: f64,
    /// Expected hashrate at the frequencies, less the erring share, TH/s.
    pub hashrate_ths: f64,
    /// J/TH (0 when unknown).
    pub efficiency_j_per_th: f64,
    /// Share of nonces that failed verification.
    pub hw_error_rate: f64,
    /// Hottest reading, C.
    pub temp_max_c: f64,
}

impl Measured {
    /// To the proto shape.
    pub fn to_pb(self) -> pb::Measured {
        pb::Measured {
            power_watt: self.power_watt,
            hashrate_ths: self.hashrate_ths,
            efficiency_j_per_th: self.efficiency_j_per_th,
            hw_error_rate: self.hw_error_rate,
            temp_max_c: self.temp_max_c,
        }
    }
}

/// A tuned or saved point with what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// "power-1100", "hashrate-10.5", "efficiency" for tuned points; the name for saved ones.
    pub id: String,
    /// Mode it was tuned for.
    pub mode: Mode,
    /// Target it was tuned for (W or TH/s; 0 for efficiency).
    pub target: f64,
    /// The point.
    pub point: Point,
    /// What it measured when tuned.
    pub measured: Measured,
    /// When, Unix ms.
    pub tuned_at_ms: i64,
    /// Board it was tuned on.
    pub board_serial: String,
}

impl Profile {
    /// The id of the tuned point for a mode and target.
    pub fn tuned_id(mode: Mode, target: f64) -> String {
        match mode {
            Mode::Power => format!("power-{}", fmt_num(target)),
            Mode::Hashrate => format!("hashrate-{}", fmt_num(target)),
            Mode::Efficiency => "efficiency".into(),
            Mode::Fixed => "fixed".into(),
        }
    }

    /// To the proto shape.
    pub fn to_pb(&self) -> pb::Profile {
        pb::Profile {
            id: self.id.clone(),
            mode: self.mode.to_pb() as i32,
            target: self.target,
            voltage_mv: self.point.voltage_mv,
            chains: self.point.chains_pb(),
            measured: Some(self.measured.to_pb()),
            tuned_at_ms: self.tuned_at_ms,
            board_serial: self.board_serial.clone(),
        }
    }
}

/// A number without a trailing ".0" (ids read "power-1100", "hashrate-10.5").
pub fn fmt_num(x: f64) -> String {
    let r = (x * 100.0).round() / 100.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// The board as hw-agent describes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoardInfo {
    /// Serial number (profiles are stored per serial).
    pub serial: String,
    /// Chains.
    pub chains: u32,
    /// Chips per chain.
    pub chips_per_chain: u32,
    /// Nominal power, W.
    pub nominal_power_watt: f64,
    /// Nominal hashrate, TH/s.
    pub nominal_ths: f64,
}

/// Config defaults and limits resolved against the board (zeros mean "derive").
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Stock frequency, MHz.
    pub stock_mhz: f64,
    /// Stock voltage, mV.
    pub stock_mv: f64,
    /// Frequency bounds, MHz.
    pub min_mhz: f64,
    /// Frequency bounds, MHz.
    pub max_mhz: f64,
    /// Voltage bounds, mV.
    pub min_mv: f64,
    /// Voltage bounds, mV.
    pub max_mv: f64,
    /// Hottest allowed, C.
    pub max_temp_c: f64,
    /// PSU power never exceeded, W.
    pub max_power_watt: f64,
    /// Chain instability threshold (fraction of nonces).
    pub max_chain_error: f64,
    /// Chip trim threshold (fraction).
    pub max_chip_error: f64,
    /// Power tolerance (fraction).
    pub power_tolerance: f64,
    /// Frequency step, MHz.
    pub mhz_step: f64,
    /// Voltage step, mV.
    pub mv_step: f64,
    /// Settle time after a change, ms.
    pub settle_ms: i64,
    /// Window length, ms.
    pub window_ms: i64,
    /// Dynamic power scaling.
    pub dps_enabled: bool,
    /// DPS step, W.
    pub dps_step_watt: f64,
    /// DPS floor, W.
    pub dps_min_watt: f64,
    /// Default power target, W.
    pub default_power_watt: f64,
    /// Default hashrate target, TH/s.
    pub default_ths: f64,
    /// Increment step, W.
    pub power_step_watt: f64,
    /// Increment step, TH/s.
    pub ths_step: f64,
}

impl Limits {
    /// Resolve `[tuner]`, `[hardware]` and `[thermal]` for a board.
    pub fn resolve(config: &Config, board: &BoardInfo) -> Limits {
        let t = &config.tuner;
        let stock_mhz = config.hardware.target_frequency_mhz();
        let stock_mv = config.hardware.voltage_mv;
        let or = |v: f64, d: f64| if v > 0.0 { v } else { d };
        let nominal_w = if board.nominal_power_watt > 0.0 {
            board.nominal_power_watt
        } else {
            1000.0
        };
        Limits {
            stock_mhz,
            stock_mv,
            min_mhz: or(
                t.min_frequency_mhz,
                (stock_mhz * 0.5).max(FREQUENCY_MHZ.min),
            ),
            max_mhz: or(
                t.max_frequency_mhz,
                (stock_mhz * 1.25).min(FREQUENCY_MHZ.max),
            ),
            min_mv: or(
                t.min_voltage_mv,
                (stock_mv * 0.85)
                    .max(config.hardware.board.regulator_min_mv())
                    .max(VOLTAGE_MV.min),
            ),
            max_mv: or(t.max_voltage_mv, (stock_mv * 1.05).min(VOLTAGE_MV.max)),
            max_temp_c: or(t.max_temp_c, config.thermal.hot_temp_c - 5.0),
            max_power_watt: or(t.max_power_watt, nominal_w * 1.25),
            max_chain_error: t.max_hw_error_percent / 100.0,
            max_chip_error: t.max_chip_error_percent / 100.0,
            power_tolerance: t.power_tolerance_percent / 100.0,
            mhz_step: t.frequency_step_mhz,
            mv_step: t.voltage_step_mv,
            settle_ms: (t.settle_s * 1000) as i64,
            window_ms: (t.window_s * 1000) as i64,
            dps_enabled: t.dps_enabled,
            dps_step_watt: t.dps_step_watt,
            dps_min_watt: or(t.dps_min_power_watt, nominal_w * 0.4),
            default_power_watt: or(t.power_target_watt, nominal_w),
            default_ths: or(t.hashrate_target_ths, board.nominal_ths.max(0.001)),
            power_step_watt: t.power_step_watt,
            ths_step: t.hashrate_step_ths,
        }
    }

    /// The stock point of a board.
    pub fn stock(&self, chains: u32) -> Point {
        Point::uniform(self.stock_mv, chains, self.stock_mhz)
    }
}
