//! Byte-level drivers of the devices on the I2C bus, written once against [`I2cBus`].
//!
//! * An APW-class PSU speaking a PMBus subset with direct units (mV, 0.01 A, W, 0.1 C) and
//!   little-endian words, as the svcOS board description documents it (hwsim.proto).
//! * A hashboard PIC voltage controller per chain (S9-class boards): the S9 PIC application's
//!   command numbers (0x10 set voltage, 0x17 firmware version, 0x18 measured voltage) behind a
//!   register pointer, words little-endian mV, as the svcOS board map documents it (hwsim.proto).
//! * TMP75-class temperature sensors: register 0, two bytes big-endian, 12-bit left-justified
//!   two's complement at 0.0625 C per LSB (TI TMP75 datasheet, "Temperature Register").

use super::{DriverError, I2cBus};

/// PMBus OPERATION: 0x80 on, 0x00 off.
pub const OPERATION: u8 = 0x01;
/// PMBus CLEAR_FAULTS (send byte).
pub const CLEAR_FAULTS: u8 = 0x03;
/// PMBus VOUT_COMMAND, mV.
pub const VOUT_COMMAND: u8 = 0x21;
/// PMBus STATUS_WORD.
pub const STATUS_WORD: u8 = 0x79;
/// PMBus READ_VOUT, mV.
pub const READ_VOUT: u8 = 0x8B;
/// PMBus READ_IOUT, 0.01 A.
pub const READ_IOUT: u8 = 0x8C;
/// PMBus READ_TEMPERATURE_1, 0.1 C.
pub const READ_TEMPERATURE_1: u8 = 0x8D;
/// PMBus READ_POUT, W.
pub const READ_POUT: u8 = 0x96;
/// PMBus READ_PIN, W.
pub const READ_PIN: u8 = 0x97;
/// PMBus MFR_MODEL (block read).
pub const MFR_MODEL: u8 = 0x9A;
/// PMBus MFR_REVISION (block read).
pub const MFR_REVISION: u8 = 0x9B;

/// PIC: voltage setpoint, u16 mV (write sets, read returns the setpoint held).
pub const PIC_SET_VOLTAGE: u8 = 0x10;
/// PIC: firmware version, 1 byte.
pub const PIC_FIRMWARE_VERSION: u8 = 0x17;
/// PIC: the board's rail as measured, u16 mV.
pub const PIC_GET_VOLTAGE: u8 = 0x18;

/// STATUS_WORD: the output is off.
pub const STATUS_OFF: u16 = 1 << 6;
/// STATUS_WORD: power not good.
pub const STATUS_POWER_GOOD_N: u16 = 1 << 11;

/// STATUS_WORD bits and what they mean to an operator, most specific first.
const STATUS_BITS: [(u16, &str); 6] = [
    (1 << 4, "output overcurrent"),
    (1 << 2, "over temperature"),
    (1 << 15, "output voltage fault"),
    (1 << 14, "output current/power fault"),
    (1 << 11, "power not good"),
    (1 << 6, "output off"),
];

/// One PSU reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PsuReading {
    /// Output switched on.
    pub enabled: bool,
    /// Output voltage, V.
    pub voltage_v: f64,
    /// Setpoint, V.
    pub setpoint_v: f64,
    /// Output current, A.
    pub current_a: f64,
    /// Input power (what the owner pays for and a meter at the wall reads), W; the output
    /// power where the PSU does not report its input.
    pub power_watt: f64,
    /// Output power (what the hashboards draw), W.
    pub output_watt: f64,
    /// PSU temperature, C.
    pub temp_c: f64,
    /// Fault text; empty when healthy.
    pub fault: String,
    /// Raw STATUS_WORD.
    pub status_word: u16,
}

/// The fault text a STATUS_WORD stands for, given whether the output is meant to be on.
pub fn status_fault(status: u16, meant_on: bool) -> String {
    let mut words: Vec<&str> = STATUS_BITS
        .iter()
        .filter(|(bit, _)| status & bit != 0)
        .map(|(_, w)| *w)
        .collect();
    if !meant_on {
        // Off and not good is what "off" means when we switched it off.
        words.retain(|w| *w != "output off" && *w != "power not good");
    }
    words.join(", ")
}

/// An APW-class PMBus PSU at an address.
#[derive(Debug, Clone)]
pub struct Psu {
    /// 7-bit address.
    pub address: u16,
    /// Whether hw-agent wants the output on.
    pub meant_on: bool,
}

impl Psu {
    /// The PSU at `address`.
    pub fn new(address: u16) -> Self {
        Psu {
            address,
            meant_on: true,
        }
    }

    fn word(&self, bus: &mut dyn I2cBus, cmd: u8) -> Result<u16, DriverError> {
        let mut b = [0u8; 2];
        bus.transfer(self.address, &[cmd], &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Read everything at once.
    pub fn read(&self, bus: &mut dyn I2cBus) -> Result<PsuReading, DriverError> {
        let mut op = [0u8; 1];
        bus.transfer(self.address, &[OPERATION], &mut op)?;
        let status = self.word(bus, STATUS_WORD)?;
        let output_watt = f64::from(self.word(bus, READ_POUT)?);
        // Power targets, circuit limits and J/TH are about the wall; a PSU that does not
        // answer READ_PIN (it is optional in PMBus) leaves the output reading, as before.
        let input_watt = self.word(bus, READ_PIN).ok().map(f64::from);
        Ok(PsuReading {
            enabled: op[0] & 0x80 != 0,
            voltage_v: f64::from(self.word(bus, READ_VOUT)?) / 1000.0,
            setpoint_v: f64::from(self.word(bus, VOUT_COMMAND)?) / 1000.0,
            current_a: f64::from(self.word(bus, READ_IOUT)?) / 100.0,
            power_watt: input_watt.unwrap_or(output_watt),
            output_watt,
            temp_c: f64::from(self.word(bus, READ_TEMPERATURE_1)? as i16) / 10.0,
            fault: status_fault(status, self.meant_on),
            status_word: status,
        })
    }

    /// Set the output voltage, mV.
    pub fn set_voltage_mv(&self, bus: &mut dyn I2cBus, mv: u16) -> Result<(), DriverError> {
        let [lo, hi] = mv.to_le_bytes();
        bus.transfer(self.address, &[VOUT_COMMAND, lo, hi], &mut [])
    }

    /// Switch the output.
    pub fn set_enabled(&mut self, bus: &mut dyn I2cBus, on: bool) -> Result<(), DriverError> {
        self.meant_on = on;
        bus.transfer(
            self.address,
            &[OPERATION, if on { 0x80 } else { 0x00 }],
            &mut [],
        )
    }

    /// Clear latched faults whose cause is gone.
    pub fn clear_faults(&self, bus: &mut dyn I2cBus) -> Result<(), DriverError> {
        bus.transfer(self.address, &[CLEAR_FAULTS], &mut [])
    }

    /// The model string (PMBus block read: length byte, then ASCII).
    pub fn model(&self, bus: &mut dyn I2cBus) -> Result<String, DriverError> {
        self.block(bus, MFR_MODEL)
    }

    /// The firmware revision string (PMBus MFR_REVISION block read).
    pub fn revision(&self, bus: &mut dyn I2cBus) -> Result<String, DriverError> {
        self.block(bus, MFR_REVISION)
    }

    fn block(&self, bus: &mut dyn I2cBus, cmd: u8) -> Result<String, DriverError> {
        let mut b = [0u8; 33];
        bus.transfer(self.address, &[cmd], &mut b)?;
        let len = usize::from(b[0]).min(32);
        Ok(String::from_utf8_lossy(&b[1..=len]).trim().to_string())
    }
}

/// One PIC reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PicReading {
    /// Firmware (application) version.
    pub firmware_version: u8,
    /// Setpoint the PIC holds, mV.
    pub setpoint_mv: f64,
    /// The board's rail as measured, mV.
    pub measured_mv: f64,
}

/// A hashboard's PIC voltage controller at an address.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pic {
    /// Chain (hashboard) it sits on.
    pub chain_id: u32,
    /// 7-bit address.
    pub address: u16,
}

impl Pic {
    fn word(&self, bus: &mut dyn I2cBus, cmd: u8) -> Result<f64, DriverError> {
        let mut b = [0u8; 2];
        bus.transfer(self.address, &[cmd], &mut b)?;
        Ok(f64::from(u16::from_le_bytes(b)))
    }

    /// Read firmware, setpoint and rail.
    pub fn read(&self, bus: &mut dyn I2cBus) -> Result<PicReading, DriverError> {
        let mut fw = [0u8; 1];
        bus.transfer(self.address, &[PIC_FIRMWARE_VERSION], &mut fw)?;
        Ok(PicReading {
            firmware_version: fw[0],
            setpoint_mv: self.word(bus, PIC_SET_VOLTAGE)?,
            measured_mv: self.word(bus, PIC_GET_VOLTAGE)?,
        })
    }

    /// Write the voltage setpoint, mV.
    pub fn set_voltage_mv(&self, bus: &mut dyn I2cBus, mv: u16) -> Result<(), DriverError> {
        let [lo, hi] = mv.to_le_bytes();
        bus.transfer(self.address, &[PIC_SET_VOLTAGE, lo, hi], &mut [])
    }
}

/// Decode a TMP75 temperature register.
pub fn tmp75_celsius(raw: [u8; 2]) -> f64 {
    f64::from(i16::from_be_bytes(raw) >> 4) * 0.0625
}

/// Read a TMP75-class sensor, C.
pub fn read_tmp75(bus: &mut dyn I2cBus, address: u16) -> Result<f64, DriverError> {
    let mut b = [0u8; 2];
    bus.transfer(address, &[0x00], &mut b)?;
    Ok(tmp75_celsius(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A register file on a fake bus: what each (address, command) read returns, and a log.
    #[derive(Default)]
    struct FakeBus {
        regs: BTreeMap<(u16, u8), Vec<u8>>,
        writes: Vec<(u16, Vec<u8>)>,
    }

    impl I2cBus for FakeBus {
        fn transfer(
            &mut self,
            address: u16,
            write: &[u8],
            read: &mut [u8],
        ) -> Result<(), DriverError> {
            if read.is_empty() {
                self.writes.push((address, write.to_vec()));
                return Ok(());
            }
            let v = self
                .regs
                .get(&(address, write[0]))
                .ok_or(DriverError::I2c {
                    bus: 0,
                    address,
                    message: "nack".into(),
                })?;
            let n = read.len().min(v.len());
            read[..n].copy_from_slice(&v[..n]);
            Ok(())
        }
    }

    #[test]
    fn tmp75_datasheet_examples() {
        // TMP75 datasheet table "Temperature Data Format" (12-bit).
        assert_eq!(tmp75_celsius([0x7f, 0xf0]), 127.9375);
        assert_eq!(tmp75_celsius([0x19, 0x00]), 25.0);
        assert_eq!(tmp75_celsius([0x00, 0x40]), 0.25);
        assert_eq!(tmp75_celsius([0xff, 0xc0]), -0.25);
        assert_eq!(tmp75_celsius([0xe7, 0x00]), -25.0);
    }

    #[test]
    fn psu_read_decodes_units_and_faults() {
        let mut bus = FakeBus::default();
        let a = 0x10;
        bus.regs.insert((a, OPERATION), vec![0x80]);
        bus.regs
            .insert((a, STATUS_WORD), 0u16.to_le_bytes().to_vec());
        bus.regs
            .insert((a, READ_VOUT), 8800u16.to_le_bytes().to_vec());
        bus.regs
            .insert((a, VOUT_COMMAND), 8800u16.to_le_bytes().to_vec());
        bus.regs
            .insert((a, READ_IOUT), 15340u16.to_le_bytes().to_vec());
        bus.regs
            .insert((a, READ_POUT), 1350u16.to_le_bytes().to_vec());
        bus.regs
            .insert((a, READ_TEMPERATURE_1), (-52i16).to_le_bytes().to_vec());
        let psu = Psu::new(a);
        let r = psu.read(&mut bus).unwrap();
        assert!(r.enabled);
        assert_eq!(r.voltage_v, 8.8);
        assert_eq!(r.current_a, 153.4);
        // No READ_PIN: the output reading stands for the input.
        assert_eq!((r.power_watt, r.output_watt), (1350.0, 1350.0));
        assert_eq!(r.temp_c, -5.2);
        assert!(r.fault.is_empty());
        bus.regs
            .insert((a, READ_PIN), 1460u16.to_le_bytes().to_vec());
        let r = psu.read(&mut bus).unwrap();
        assert_eq!((r.power_watt, r.output_watt), (1460.0, 1350.0));
        bus.regs.insert(
            (a, STATUS_WORD),
            ((1u16 << 4) | (1 << 6) | (1 << 11)).to_le_bytes().to_vec(),
        );
        let r = psu.read(&mut bus).unwrap();
        assert_eq!(r.fault, "output overcurrent, power not good, output off");
        psu.set_voltage_mv(&mut bus, 9000).unwrap();
        assert_eq!(bus.writes.last().unwrap(), &(a, vec![0x21, 0x28, 0x23]));
    }

    #[test]
    fn pic_reads_firmware_setpoint_and_rail_and_writes_the_setpoint() {
        let mut bus = FakeBus::default();
        let pic = Pic {
            chain_id: 1,
            address: 0x51,
        };
        bus.regs.insert((0x51, PIC_FIRMWARE_VERSION), vec![0x03]);
        bus.regs
            .insert((0x51, PIC_SET_VOLTAGE), 8900u16.to_le_bytes().to_vec());
        bus.regs
            .insert((0x51, PIC_GET_VOLTAGE), 8794u16.to_le_bytes().to_vec());
        let r = pic.read(&mut bus).unwrap();
        assert_eq!(
            (r.firmware_version, r.setpoint_mv, r.measured_mv),
            (3, 8900.0, 8794.0)
        );
        pic.set_voltage_mv(&mut bus, 8800).unwrap();
        assert_eq!(bus.writes.last().unwrap(), &(0x51, vec![0x10, 0x60, 0x22]));
        // A PIC that does not acknowledge is an error, not a zero reading.
        let absent = Pic {
            chain_id: 2,
            address: 0x52,
        };
        assert!(absent.read(&mut bus).is_err());
        bus.regs.insert((0x10, MFR_REVISION), b"\x051.0.3".to_vec());
        assert_eq!(Psu::new(0x10).revision(&mut bus).unwrap(), "1.0.3");
    }

    #[test]
    fn switched_off_psu_is_not_a_fault() {
        assert_eq!(status_fault((1 << 6) | (1 << 11), false), "");
        assert_eq!(status_fault(1 << 6, true), "output off");
        assert_eq!(
            status_fault((1 << 4) | (1 << 6), false),
            "output overcurrent"
        );
    }
}
