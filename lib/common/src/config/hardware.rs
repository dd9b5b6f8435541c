use crate::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Which driver set hw-agent uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum HardwareDriver {
    /// The simulated board served by `svcos hw-sim`.
    #[default]
    Sim,
    /// Real Linux devices: serial UARTs, i2c-dev, sysfs PWM/GPIO.
    Linux,
}

/// A board preset. Chip counts and nominal figures come from the preset unless overridden.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Board {
    /// Antminer S9 class: 3 chains x 63 BM1387-class chips, ~13.5 TH/s.
    #[default]
    S9,
    /// Antminer S19 class: 3 chains x 76 BM1398-class chips.
    S19,
    /// Bitaxe class: one BM1366-class chip.
    Bitaxe,
}

impl Board {
    /// (chains, chips per chain, chip model, default frequency MHz, marketing model name)
    pub fn preset(self) -> (u32, u32, &'static str, f64, &'static str) {
        match self {
            Board::S9 => (3, 63, "BM1387", 650.0, "Antminer S9"),
            Board::S19 => (3, 76, "BM1398", 675.0, "Antminer S19"),
            Board::Bitaxe => (1, 1, "BM1366", 485.0, "Bitaxe Ultra"),
        }
    }

    /// The lowest chain voltage the board's regulator can be set to, mV; 0 = not known.
    ///
    /// S9: each hashboard's PIC-driven regulator takes a byte `n = round(1608.42 - 170.42 V)`
    /// (the conversion bmminer and Braiins OS use), so 0..=255 spans 9.44 V down to 7.94 V.
    pub fn regulator_min_mv(self) -> f64 {
        match self {
            Board::S9 => 7940.0,
            Board::S19 | Board::Bitaxe => 0.0,
        }
    }
}

/// `[hardware]`: the board and how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct HardwareConfig {
    /// Driver set. Default "sim".
    pub driver: HardwareDriver,
    /// Board preset. Default "s9".
    pub board: Board,
    /// Override of the preset's chains; 0 = preset.
    pub chains: u32,
    /// Override of the preset's chips per chain; 0 = preset.
    pub chips_per_chain: u32,
    /// UART device per chain (linux driver), e.g. ["/dev/ttyS1", "/dev/ttyS2", "/dev/ttyS3"].
    pub uarts: Vec<PathBuf>,
    /// i2c-dev bus number of the PSU and sensors (linux driver). Default 0.
    pub i2c_bus: u32,
    /// Chip frequency after bring-up, MHz; 0 = preset. Raised in steps.
    pub frequency_mhz: f64,
    /// Hashboard domain voltage after bring-up, mV. Default 8800 (S9 class).
    pub voltage_mv: f64,
    /// UART speed after bring-up, baud. Chains start at 115200. Default 1 000 000 (1 Mbaud).
    pub baud: u32,
    /// Power target in watts; 0 = none.
    pub power_target_watt: f64,
    /// hwmon directory of the fan controller (linux driver): `pwmN` and `fanN_input` files.
    /// Default "/sys/class/hwmon/hwmon0".
    pub fan_hwmon: PathBuf,
    /// sysfs GPIO number of each named line (linux driver): `led_green`, `led_red`, `button`,
    /// `chain<N>_enable`, `chain<N>_reset`. Default empty (lines not driven).
    pub gpio_lines: BTreeMap<String, u32>,
}

impl Default for HardwareConfig {
    fn default() -> Self {
        HardwareConfig {
            driver: HardwareDriver::Sim,
            board: Board::S9,
            chains: 0,
            chips_per_chain: 0,
            uarts: Vec::new(),
            i2c_bus: 0,
            frequency_mhz: 0.0,
            voltage_mv: 8800.0,
            baud: 1_000_000,
            power_target_watt: 0.0,
            fan_hwmon: PathBuf::from("/sys/class/hwmon/hwmon0"),
            gpio_lines: BTreeMap::new(),
        }
    }
}

impl HardwareConfig {
    /// Chains after applying the preset.
    pub fn chain_count(&self) -> u32 {
        if self.chains == 0 {
            self.board.preset().0
        } else {
            self.chains
        }
    }

    /// Chips per chain after applying the preset.
    pub fn chips_per_chain(&self) -> u32 {
        if self.chips_per_chain == 0 {
            self.board.preset().1
        } else {
            self.chips_per_chain
        }
    }

    /// Target frequency after applying the preset.
    pub fn target_frequency_mhz(&self) -> f64 {
        if self.frequency_mhz == 0.0 {
            self.board.preset().3
        } else {
            self.frequency_mhz
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.chains > 16 {
            return Err(ConfigError::invalid("hardware.chains", "at most 16"));
        }
        if self.chips_per_chain > 256 {
            return Err(ConfigError::invalid(
                "hardware.chips_per_chain",
                "at most 256",
            ));
        }
        if self.frequency_mhz != 0.0 && !FREQUENCY_MHZ.contains(self.frequency_mhz) {
            return Err(ConfigError::invalid(
                "hardware.frequency_mhz",
                format!("0 (preset) or {}", FREQUENCY_MHZ.describe()),
            ));
        }
        if !VOLTAGE_MV.contains(self.voltage_mv) {
            return Err(ConfigError::invalid(
                "hardware.voltage_mv",
                VOLTAGE_MV.describe(),
            ));
        }
        if ![115_200, 1_000_000, 1_562_500, 3_125_000].contains(&self.baud) {
            return Err(ConfigError::invalid(
                "hardware.baud",
                "one of 115200, 1000000, 1562500, 3125000",
            ));
        }
        if self.driver == HardwareDriver::Linux
            && !self.uarts.is_empty()
            && self.uarts.len() != self.chain_count() as usize
        {
            return Err(ConfigError::invalid(
                "hardware.uarts",
                "one UART per chain is needed with the linux driver",
            ));
        }
        let target = crate::bounds::POWER_TARGET_WATT;
        if !target.contains(self.power_target_watt) {
            return Err(ConfigError::invalid(
                "hardware.power_target_watt",
                format!("{} (0 = none)", target.describe()),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_target_is_bounded_like_hw_agent_bounds_it() {
        let check = |w| {
            HardwareConfig {
                power_target_watt: w,
                ..Default::default()
            }
            .validate()
        };
        let top = crate::bounds::POWER_TARGET_WATT.max;
        assert!(check(0.0).is_ok() && check(1200.0).is_ok() && check(top).is_ok());
        for bad in [-1.0, top + 1.0, 1e9, f64::NAN, f64::INFINITY] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.field(), Some("hardware.power_target_watt"), "{bad}");
        }
    }
}
