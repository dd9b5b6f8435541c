//! The board description: what `[hardware]` says is there, before any device is opened.

use std::path::PathBuf;

use svcos_bm13xx::ChipModel;
use svcos_common::config::{Board, HardwareConfig, HardwareDriver};

/// Nominal power per chip in watts at the preset frequency (for power estimates when the
/// PSU cannot tell): S9 ≈ 1350 W / 189 chips, S19 ≈ 3250 W / 228, Bitaxe ≈ 12 W.
fn watt_per_chip(board: Board) -> f64 {
    match board {
        Board::S9 => 7.1,
        Board::S19 => 14.3,
        Board::Bitaxe => 12.0,
    }
}

/// Everything known about the board from config.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardSpec {
    /// Preset.
    pub board: Board,
    /// Driver set.
    pub driver: HardwareDriver,
    /// Marketing model name.
    pub model: String,
    /// Chip model name.
    pub chip_model: String,
    /// Hashing chains.
    pub chains: u32,
    /// Chips each chain should have.
    pub chips_per_chain: u32,
    /// Frequency after bring-up, MHz.
    pub frequency_mhz: f64,
    /// Domain voltage, mV.
    pub voltage_mv: f64,
    /// UART speed after bring-up.
    pub baud: u32,
    /// UART device per chain (linux driver).
    pub uarts: Vec<PathBuf>,
    /// i2c-dev bus of PSU and sensors.
    pub i2c_bus: u32,
    /// Fans on the board.
    pub fans: u32,
}

impl BoardSpec {
    /// The spec `[hardware]` describes.
    pub fn from_config(hw: &HardwareConfig) -> Self {
        let (_, _, chip_model, _, model) = hw.board.preset();
        BoardSpec {
            board: hw.board,
            driver: hw.driver,
            model: model.to_string(),
            chip_model: chip_model.to_string(),
            chains: hw.chain_count(),
            chips_per_chain: hw.chips_per_chain(),
            frequency_mhz: hw.target_frequency_mhz(),
            voltage_mv: hw.voltage_mv,
            baud: hw.baud,
            uarts: hw.uarts.clone(),
            i2c_bus: hw.i2c_bus,
            fans: match hw.board {
                Board::Bitaxe => 1,
                Board::S9 => 2,
                Board::S19 => 4,
            },
        }
    }

    /// Expected hashrate of `chips` chips at `mhz`, hashes per second (the codec's per-model
    /// hashes per clock, the same figure the chain threads and the sim use).
    pub fn expected_hs(&self, chips: u32, mhz: f64) -> f64 {
        let model = ChipModel::from_name(&self.chip_model).unwrap_or(ChipModel::Bm1387);
        f64::from(chips) * model.nominal_hashrate(mhz)
    }

    /// Nominal hashrate of the whole board, GH/s.
    pub fn nominal_ghs(&self) -> f64 {
        self.expected_hs(self.chains * self.chips_per_chain, self.frequency_mhz) / 1e9
    }

    /// Nominal power of the whole board, W.
    pub fn nominal_power_watt(&self) -> f64 {
        f64::from(self.chains * self.chips_per_chain) * watt_per_chip(self.board)
    }

    /// Driver name for the inventory.
    pub fn driver_name(&self) -> &'static str {
        match self.driver {
            HardwareDriver::Sim => "sim",
            HardwareDriver::Linux => "linux",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s9_preset_is_about_13_5_ths() {
        let spec = BoardSpec::from_config(&HardwareConfig::default());
        assert_eq!((spec.chains, spec.chips_per_chain), (3, 63));
        let ths = spec.nominal_ghs() / 1000.0;
        assert!((13.0..14.5).contains(&ths), "{ths}");
    }

    #[test]
    fn overrides_apply() {
        let hw = HardwareConfig {
            board: Board::Bitaxe,
            chips_per_chain: 2,
            ..Default::default()
        };
        let spec = BoardSpec::from_config(&hw);
        assert_eq!(spec.chains, 1);
        assert_eq!(spec.chips_per_chain, 2);
        assert_eq!(spec.chip_model, "BM1366");
    }
}
