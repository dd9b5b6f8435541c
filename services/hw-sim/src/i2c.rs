//! The I2C devices: an APW-class PSU with a PMBus-like register set, TMP75-class sensors, and
//! one PIC voltage controller per hashboard. The register map is documented in `hwsim.proto`,
//! the contract hw-agent implements.

use crate::error::SimError;
use crate::state::{BoardState, SensorRegisters, psu_status};

/// 7-bit I2C address of the PSU.
pub const PSU_ADDRESS: u32 = 0x10;
/// Chains with sensors (the two sensor address blocks hold four each).
const SENSOR_CHAINS: u32 = 4;
/// First board (PCB) sensor address.
const BOARD_SENSOR_BASE: u32 = 0x48;
/// First chip-side sensor address.
const CHIP_SENSOR_BASE: u32 = 0x4C;
/// First hashboard PIC address (chain c at 0x50 + c, as the S9's hashboard PICs sit).
const PIC_BASE: u32 = 0x50;

/// Commands of a hashboard PIC (the S9 PIC16F1704 application's command numbers, in a plain
/// register-pointer framing).
pub mod pic {
    /// Voltage setpoint, u16 little-endian mV: write to set, read back what was set.
    pub const SET_VOLTAGE: u8 = 0x10;
    /// Firmware (application) version, 1 byte.
    pub const GET_FIRMWARE_VERSION: u8 = 0x17;
    /// The board's rail as the PIC measures it, u16 little-endian mV (0 while unpowered).
    pub const GET_VOLTAGE: u8 = 0x18;
}

/// PMBus command codes the PSU implements.
pub mod pmbus {
    /// Output on/off.
    pub const OPERATION: u8 = 0x01;
    /// Clear latched status.
    pub const CLEAR_FAULTS: u8 = 0x03;
    /// Output setpoint, mV.
    pub const VOUT_COMMAND: u8 = 0x21;
    /// Status word.
    pub const STATUS_WORD: u8 = 0x79;
    /// Output voltage, mV.
    pub const READ_VOUT: u8 = 0x8B;
    /// Output current, 0.01 A.
    pub const READ_IOUT: u8 = 0x8C;
    /// Internal temperature, 0.1 C.
    pub const READ_TEMPERATURE_1: u8 = 0x8D;
    /// Output power, W.
    pub const READ_POUT: u8 = 0x96;
    /// Input power, W.
    pub const READ_PIN: u8 = 0x97;
    /// Manufacturer (block).
    pub const MFR_ID: u8 = 0x99;
    /// Model (block).
    pub const MFR_MODEL: u8 = 0x9A;
    /// Firmware revision (block).
    pub const MFR_REVISION: u8 = 0x9B;
}

/// Lowest and highest accepted VOUT_COMMAND, mV.
const VOUT_RANGE_MV: std::ops::RangeInclusive<u16> = 1000..=16000;

/// I2C address of a chain's board (PCB) sensor, if it has one.
pub fn board_sensor_address(chain: u32) -> Option<u32> {
    (chain < SENSOR_CHAINS).then_some(BOARD_SENSOR_BASE + chain)
}

/// I2C address of a chain's chip-side sensor, if it has one.
pub fn chip_sensor_address(chain: u32) -> Option<u32> {
    (chain < SENSOR_CHAINS).then_some(CHIP_SENSOR_BASE + chain)
}

/// I2C address of a chain's PIC voltage controller, if the board has one there.
pub fn pic_address(board: &BoardState, chain: u32) -> Option<u32> {
    (board.spec.pic_firmware.is_some() && chain < SENSOR_CHAINS).then_some(PIC_BASE + chain)
}

/// TMP75 temperature encoding: 12-bit two's complement, left-justified, 0.0625 C per LSB.
pub fn tmp75_encode(temp_c: f64) -> u16 {
    let counts = (temp_c * 16.0).round().clamp(-2048.0, 2047.0) as i16;
    (counts << 4) as u16
}

/// Inverse of [`tmp75_encode`].
pub fn tmp75_decode(raw: u16) -> f64 {
    f64::from((raw as i16) >> 4) / 16.0
}

/// One I2C transfer: write `write` (register pointer first), then read `read_len` bytes.
pub fn transfer(
    board: &mut BoardState,
    bus: u32,
    address: u32,
    write: &[u8],
    read_len: usize,
) -> Result<Vec<u8>, SimError> {
    if bus != board.spec.i2c_bus || board.i2c_missing.contains(&address) {
        return Err(SimError::NoI2cDevice { bus, address });
    }
    if address == PSU_ADDRESS {
        return psu_transfer(board, write, read_len);
    }
    for chain in 0..board.chains.len() as u32 {
        if board_sensor_address(chain) == Some(address) {
            let t = board.chains[chain as usize].board_temp_c();
            return sensor_transfer(board, address, t, write, read_len);
        }
        if chip_sensor_address(chain) == Some(address) {
            let t = board.chains[chain as usize].hottest_chip_c();
            return sensor_transfer(board, address, t, write, read_len);
        }
        if pic_address(board, chain) == Some(address) {
            return pic_transfer(board, chain as usize, write, read_len);
        }
    }
    Err(SimError::NoI2cDevice { bus, address })
}

fn fit(mut bytes: Vec<u8>, read_len: usize) -> Vec<u8> {
    // Reading past a register's end yields 0xff, as an idle SDA line does.
    bytes.resize(read_len, 0xff);
    bytes
}

fn psu_transfer(
    board: &mut BoardState,
    write: &[u8],
    read_len: usize,
) -> Result<Vec<u8>, SimError> {
    let address = PSU_ADDRESS;
    let bad_register = |register| SimError::BadRegister { address, register };
    if let Some((&command, data)) = write.split_first() {
        board.psu_pointer = command;
        match command {
            pmbus::OPERATION if !data.is_empty() => match data {
                [0x80] => board.psu.on = true,
                [0x00] => board.psu.on = false,
                _ => {
                    return Err(SimError::BadValue {
                        address,
                        message: "OPERATION takes 0x80 (on) or 0x00 (off)",
                    });
                }
            },
            pmbus::CLEAR_FAULTS => {
                if !data.is_empty() || read_len > 0 {
                    return Err(SimError::BadValue {
                        address,
                        message: "CLEAR_FAULTS is a send-byte command",
                    });
                }
                // A fault whose cause is still there stays latched.
                if !board.psu.fault {
                    board.psu.status_latched = 0;
                } else {
                    board.psu.status_latched &=
                        psu_status::VOUT | psu_status::IOUT_POUT | psu_status::IOUT_OC;
                }
                return Ok(Vec::new());
            }
            pmbus::VOUT_COMMAND if !data.is_empty() => {
                let mv = match data {
                    [lo, hi] => u16::from_le_bytes([*lo, *hi]),
                    _ => {
                        return Err(SimError::BadValue {
                            address,
                            message: "VOUT_COMMAND takes a 2-byte word",
                        });
                    }
                };
                if !VOUT_RANGE_MV.contains(&mv) {
                    return Err(SimError::BadValue {
                        address,
                        message: "VOUT_COMMAND out of 1000..=16000 mV",
                    });
                }
                board.psu.setpoint_mv = f64::from(mv);
            }
            c if !data.is_empty() => return Err(bad_register(c)),
            _ => {}
        }
    }
    if read_len == 0 {
        return Ok(Vec::new());
    }
    let word = |v: f64| {
        (v.round().clamp(0.0, 65535.0) as u16)
            .to_le_bytes()
            .to_vec()
    };
    let block = |s: &str| {
        let mut v = vec![s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    };
    let psu = &board.psu;
    let bytes = match board.psu_pointer {
        pmbus::OPERATION => vec![if psu.on { 0x80 } else { 0x00 }],
        pmbus::VOUT_COMMAND => word(psu.setpoint_mv),
        pmbus::STATUS_WORD => psu.status_word().to_le_bytes().to_vec(),
        pmbus::READ_VOUT => word(psu.vout_mv),
        pmbus::READ_IOUT => word(psu.iout_amp() * 100.0),
        pmbus::READ_TEMPERATURE_1 => ((psu.temp_c * 10.0).round() as i16).to_le_bytes().to_vec(),
        pmbus::READ_POUT => word(psu.pout_watt),
        pmbus::READ_PIN => word(psu.pin_watt),
        pmbus::MFR_ID => block("Bitmain"),
        pmbus::MFR_MODEL => block(&board.spec.psu_model),
        pmbus::MFR_REVISION => block(&board.spec.psu_firmware),
        other => return Err(bad_register(other)),
    };
    Ok(fit(bytes, read_len))
}

/// A hashboard PIC. In the sim the PSU's output is the rail every chain runs at (one physics
/// for the tuner to learn); the PIC holds the setpoint hw-agent last wrote and measures that
/// rail as its board receives it, so a readback shows both what was asked and what arrived.
fn pic_transfer(
    board: &mut BoardState,
    chain: usize,
    write: &[u8],
    read_len: usize,
) -> Result<Vec<u8>, SimError> {
    let address = PIC_BASE + chain as u32;
    if let Some((&command, data)) = write.split_first() {
        match (command, data) {
            (pic::SET_VOLTAGE | pic::GET_FIRMWARE_VERSION | pic::GET_VOLTAGE, []) => {}
            (pic::SET_VOLTAGE, [lo, hi]) => {
                let mv = u16::from_le_bytes([*lo, *hi]);
                if !VOUT_RANGE_MV.contains(&mv) {
                    return Err(SimError::BadValue {
                        address,
                        message: "SET_VOLTAGE out of 1000..=16000 mV",
                    });
                }
                board.chains[chain].pic.setpoint_mv = f64::from(mv);
            }
            (pic::SET_VOLTAGE, _) => {
                return Err(SimError::BadValue {
                    address,
                    message: "SET_VOLTAGE takes a 2-byte word",
                });
            }
            (register, _) => return Err(SimError::BadRegister { address, register }),
        }
        board.chains[chain].pic.pointer = command;
    }
    if read_len == 0 {
        return Ok(Vec::new());
    }
    let word = |mv: f64| {
        (mv.round().clamp(0.0, 65535.0) as u16)
            .to_le_bytes()
            .to_vec()
    };
    let bytes = match board.chains[chain].pic.pointer {
        pic::SET_VOLTAGE => word(board.chains[chain].pic.setpoint_mv),
        pic::GET_FIRMWARE_VERSION => vec![board.spec.pic_firmware.unwrap_or(0)],
        pic::GET_VOLTAGE if board.chain_powered(chain) => word(board.psu.vout_mv),
        pic::GET_VOLTAGE => word(0.0),
        register => return Err(SimError::BadRegister { address, register }),
    };
    Ok(fit(bytes, read_len))
}

fn sensor_transfer(
    board: &mut BoardState,
    address: u32,
    temp_c: f64,
    write: &[u8],
    read_len: usize,
) -> Result<Vec<u8>, SimError> {
    let regs: &mut SensorRegisters = board.sensor_registers.entry(address as u8).or_default();
    if let Some((&pointer, data)) = write.split_first() {
        if pointer > 3 {
            return Err(SimError::BadRegister {
                address,
                register: pointer,
            });
        }
        regs.pointer = pointer;
        match (pointer, data) {
            (_, []) => {}
            (0, _) => {
                return Err(SimError::BadRegister {
                    address,
                    register: 0,
                });
            }
            (1, [config]) => regs.config = *config,
            (2, [hi, lo]) => regs.t_low = u16::from_be_bytes([*hi, *lo]),
            (3, [hi, lo]) => regs.t_high = u16::from_be_bytes([*hi, *lo]),
            _ => {
                return Err(SimError::BadValue {
                    address,
                    message: "config takes 1 byte, limits 2",
                });
            }
        }
    }
    if read_len == 0 {
        return Ok(Vec::new());
    }
    let bytes = match regs.pointer {
        0 => tmp75_encode(temp_c).to_be_bytes().to_vec(),
        1 => vec![regs.config],
        2 => regs.t_low.to_be_bytes().to_vec(),
        _ => regs.t_high.to_be_bytes().to_vec(),
    };
    Ok(fit(bytes, read_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::BoardSpec;
    use crate::state::Fault;
    use svcos_common::config::Config;

    fn board() -> BoardState {
        let mut config = Config::default();
        config.hardware.chips_per_chain = 3;
        BoardState::new(
            BoardSpec::from_config(&config),
            vec!["a".into(), "b".into(), "c".into()],
        )
    }

    fn read_word(b: &mut BoardState, command: u8) -> u16 {
        let r = transfer(b, 0, PSU_ADDRESS, &[command], 2).unwrap();
        u16::from_le_bytes([r[0], r[1]])
    }

    #[test]
    fn tmp75_encoding_matches_datasheet_examples() {
        // TMP75 datasheet table: 25 C = 0x1900, -25 C = 0xE700, 0.0625 C = 0x0010.
        assert_eq!(tmp75_encode(25.0), 0x1900);
        assert_eq!(tmp75_encode(-25.0), 0xe700);
        assert_eq!(tmp75_encode(0.0625), 0x0010);
        assert_eq!(tmp75_decode(0x1900), 25.0);
    }

    #[test]
    fn psu_setpoint_status_and_ident() {
        let mut b = board();
        let now = std::time::Instant::now();
        transfer(
            &mut b,
            0,
            PSU_ADDRESS,
            &[pmbus::VOUT_COMMAND, 0x10, 0x27],
            0,
        )
        .unwrap();
        assert_eq!(read_word(&mut b, pmbus::VOUT_COMMAND), 10_000);
        for _ in 0..20 {
            b.step(0.1, now);
        }
        assert_eq!(read_word(&mut b, pmbus::READ_VOUT), 10_000);
        assert!(
            transfer(
                &mut b,
                0,
                PSU_ADDRESS,
                &[pmbus::VOUT_COMMAND, 0x00, 0x00],
                0,
            )
            .is_err()
        );
        let model = transfer(&mut b, 0, PSU_ADDRESS, &[pmbus::MFR_MODEL], 7).unwrap();
        assert_eq!(&model[..7], b"\x06APW3++");
        assert_eq!(read_word(&mut b, pmbus::STATUS_WORD), 0);
        b.inject(Fault::PsuFault).unwrap();
        let s = read_word(&mut b, pmbus::STATUS_WORD);
        assert_ne!(s & psu_status::OFF, 0);
        assert_ne!(s & psu_status::POWER_GOOD_N, 0);
        b.clear_faults();
        for _ in 0..20 {
            b.step(0.1, now);
        }
        transfer(&mut b, 0, PSU_ADDRESS, &[pmbus::CLEAR_FAULTS], 0).unwrap();
        assert_eq!(read_word(&mut b, pmbus::STATUS_WORD), 0);
        transfer(&mut b, 0, PSU_ADDRESS, &[pmbus::OPERATION, 0x00], 0).unwrap();
        for _ in 0..20 {
            b.step(0.1, now);
        }
        assert_eq!(read_word(&mut b, pmbus::READ_VOUT), 0);
        assert!(!b.chain_live(0));
    }

    #[test]
    fn pic_setpoint_readback_firmware_and_measured_rail() {
        let mut b = board();
        let now = std::time::Instant::now();
        let addr = pic_address(&b, 1).unwrap();
        assert_eq!(addr, 0x51);
        // A bare read (a scan's probe) answers from the power-up pointer, the firmware version.
        assert_eq!(transfer(&mut b, 0, addr, &[], 1).unwrap(), vec![0x03]);
        let r = transfer(&mut b, 0, addr, &[pic::GET_FIRMWARE_VERSION], 1).unwrap();
        assert_eq!(r, vec![0x03]);
        let word = |r: Vec<u8>| u16::from_le_bytes([r[0], r[1]]);
        let nominal = b.spec.nominal_voltage_mv.round() as u16;
        assert_eq!(
            word(transfer(&mut b, 0, addr, &[pic::SET_VOLTAGE], 2).unwrap()),
            nominal
        );
        transfer(&mut b, 0, addr, &[pic::SET_VOLTAGE, 0x60, 0x22], 0).unwrap();
        // An empty write reads from the last pointer.
        assert_eq!(word(transfer(&mut b, 0, addr, &[], 2).unwrap()), 8800);
        // The other boards' PICs keep theirs.
        let other = pic_address(&b, 0).unwrap();
        assert_eq!(
            word(transfer(&mut b, 0, other, &[pic::SET_VOLTAGE], 2).unwrap()),
            nominal
        );
        // The measured rail is the PSU output, and 0 once the board loses power.
        transfer(
            &mut b,
            0,
            PSU_ADDRESS,
            &[pmbus::VOUT_COMMAND, 0x60, 0x22],
            0,
        )
        .unwrap();
        for _ in 0..20 {
            b.step(0.1, now);
        }
        assert_eq!(
            word(transfer(&mut b, 0, addr, &[pic::GET_VOLTAGE], 2).unwrap()),
            8800
        );
        b.set_gpio("chain1_enable", false).unwrap();
        assert_eq!(
            word(transfer(&mut b, 0, addr, &[pic::GET_VOLTAGE], 2).unwrap()),
            0
        );
        assert!(transfer(&mut b, 0, addr, &[pic::SET_VOLTAGE, 0, 0], 0).is_err());
        assert!(matches!(
            transfer(&mut b, 0, addr, &[0x42], 1),
            Err(SimError::BadRegister { .. })
        ));
        let rev = transfer(&mut b, 0, PSU_ADDRESS, &[pmbus::MFR_REVISION], 6).unwrap();
        assert_eq!(&rev[..6], b"\x051.0.3");
    }

    #[test]
    fn sensors_and_nacks() {
        let mut b = board();
        let r = transfer(&mut b, 0, 0x48, &[0x00], 2).unwrap();
        assert_eq!(tmp75_decode(u16::from_be_bytes([r[0], r[1]])), 25.0);
        b.inject(Fault::Overheat {
            chain: 1,
            degrees: 30.0,
        })
        .unwrap();
        let r = transfer(&mut b, 0, 0x49, &[0x00], 2).unwrap();
        assert_eq!(tmp75_decode(u16::from_be_bytes([r[0], r[1]])), 55.0);
        transfer(&mut b, 0, 0x4c, &[0x03, 0x5a, 0x00], 0).unwrap();
        let r = transfer(&mut b, 0, 0x4c, &[], 2).unwrap();
        assert_eq!(r, vec![0x5a, 0x00]);
        assert!(matches!(
            transfer(&mut b, 0, 0x4b, &[0], 2),
            Err(SimError::NoI2cDevice { .. })
        ));
        assert!(matches!(
            transfer(&mut b, 1, PSU_ADDRESS, &[0], 2),
            Err(SimError::NoI2cDevice { .. })
        ));
        assert!(matches!(
            transfer(&mut b, 0, PSU_ADDRESS, &[0x42], 2),
            Err(SimError::BadRegister { .. })
        ));
    }
}
