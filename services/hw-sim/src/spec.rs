//! What board to simulate: the config's preset and overrides turned into fixed figures.

use svcos_bm13xx::ChipModel;
use svcos_common::config::{Board, Config};

/// The fixed description of the simulated board.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardSpec {
    /// Marketing model name, e.g. "Antminer S9".
    pub model: String,
    /// Chip family.
    pub chip_model: ChipModel,
    /// Number of chains (hashboards).
    pub chains: u32,
    /// Chips on each chain.
    pub chips_per_chain: u32,
    /// Frequency the nominal figures refer to, MHz.
    pub nominal_frequency_mhz: f64,
    /// Chain (PSU output) voltage the nominal figures refer to, mV; also the PSU's start setpoint.
    pub nominal_voltage_mv: f64,
    /// Power of one chip at the nominal point and 60 C, W.
    pub chip_nominal_watt: f64,
    /// Chain voltage under which the chips' cores stop hashing (they answer nothing), mV.
    pub hash_floor_mv: f64,
    /// Fans.
    pub fans: u32,
    /// Fan speed at 100 % PWM, RPM.
    pub fan_max_rpm: u32,
    /// PSU model name.
    pub psu_model: String,
    /// The PSU's rated DC output, W (its efficiency curve is read against it).
    pub psu_rated_watt: f64,
    /// The PSU's firmware revision (PMBus MFR_REVISION).
    pub psu_firmware: String,
    /// Firmware version of each hashboard's PIC voltage controller; `None`: no PIC (Bitaxe).
    pub pic_firmware: Option<u8>,
    /// Seed of every random choice.
    pub seed: u64,
    /// Room temperature, C.
    pub room_temp_c: f64,
    /// CPU the hashing thread may use, percent of one core.
    pub cpu_budget_percent: f64,
    /// I2C bus of the PSU and sensors.
    pub i2c_bus: u32,
}

impl BoardSpec {
    /// The board a validated config describes.
    pub fn from_config(config: &Config) -> BoardSpec {
        let hw = &config.hardware;
        let (_, _, chip, _, model) = hw.board.preset();
        // Chip power is DC, what the PSU delivers; the wall figures the makers publish include
        // the PSU's loss (`state::psu_efficiency`). S9: 1 323 W at the wall with the APW3++
        // (1 600 W) at 93 %, so about 1 230 W DC for 189 chips at their operating temperature;
        // S19: ~3 250 W at the wall for 228 chips on the APW12 (3 600 W); Bitaxe: ~12 W.
        let (fans, fan_max_rpm, psu_model, psu_rated_watt, chip_nominal_watt) = match hw.board {
            Board::S9 => (2, 6000, "APW3++", 1600.0, 5.85),
            Board::S19 => (4, 6000, "APW12", 3600.0, 13.0),
            Board::Bitaxe => (1, 5500, "TPS546", 20.0, 11.0),
        };
        BoardSpec {
            model: model.to_string(),
            chip_model: ChipModel::from_name(chip).unwrap_or(ChipModel::Bm1387),
            chains: hw.chain_count(),
            chips_per_chain: hw.chips_per_chain(),
            nominal_frequency_mhz: hw.target_frequency_mhz(),
            nominal_voltage_mv: hw.voltage_mv,
            chip_nominal_watt,
            // No floor is published for these chips; the S9's is put just under the lowest
            // setting its regulator allows (7.94 V), the others' 12 % under their nominal.
            hash_floor_mv: match hw.board {
                Board::S9 => 7800.0,
                Board::S19 | Board::Bitaxe => hw.voltage_mv * 0.88,
            },
            fans,
            fan_max_rpm,
            psu_model: psu_model.to_string(),
            psu_rated_watt,
            // No revision list is published for these PSUs; these are the sim's own.
            psu_firmware: match hw.board {
                Board::S9 => "1.0.3",
                Board::S19 => "2.1.0",
                Board::Bitaxe => "1.0.0",
            }
            .to_string(),
            // The S9 hashboard PIC16F1704 reports its application version with command 0x17;
            // 0x03 is the sim's. The Bitaxe's single board has its regulator on the PSU bus.
            pic_firmware: match hw.board {
                Board::S9 | Board::S19 => Some(0x03),
                Board::Bitaxe => None,
            },
            seed: config.sim.seed,
            room_temp_c: config.sim.room_temp_c,
            cpu_budget_percent: config.sim.cpu_budget_percent,
            i2c_bus: hw.i2c_bus,
        }
    }

    /// Nominal hashrate of the whole board at the nominal frequency, hashes per second.
    pub fn nominal_hashrate(&self) -> f64 {
        f64::from(self.chains * self.chips_per_chain)
            * self.chip_model.nominal_hashrate(self.nominal_frequency_mhz)
    }

    /// Voltage domains per chain (three chips per domain, as on S9-class boards).
    pub fn domains_per_chain(&self) -> u32 {
        (self.chips_per_chain / 3).max(1)
    }

    /// Nominal power of one chain, W.
    pub fn chain_nominal_watt(&self) -> f64 {
        self.chip_nominal_watt * f64::from(self.chips_per_chain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s9_preset_is_13_5_ths() {
        let spec = BoardSpec::from_config(&Config::default());
        assert_eq!(spec.chains, 3);
        assert_eq!(spec.chips_per_chain, 63);
        assert_eq!(spec.chip_model, ChipModel::Bm1387);
        let ths = spec.nominal_hashrate() / 1e12;
        assert!((13.4..13.6).contains(&ths), "{ths}");
        assert_eq!(spec.domains_per_chain(), 21);
    }
}
