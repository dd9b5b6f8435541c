//! Hardware access behind small traits, with a real Linux implementation and a sim one each.
//!
//! | What | Trait | Linux | Sim |
//! |---|---|---|---|
//! | hashboard UART | [`ChainPort`] | [`serial::SerialChain`] on `/dev/ttyS*` | the same type on hw-sim's PTY slave |
//! | PSU, temperature sensors | [`I2cBus`] | [`linux::LinuxI2c`] (i2c-dev `I2C_RDWR`) | [`sim::SimI2c`] over `HwSimService.I2cTransfer` |
//! | fans | [`Fans`] | [`linux::SysfsFans`] (hwmon `pwmN`, `fanN_input`) | [`sim::SimFans`] over `SetFanPwm`/`ReadFans` |
//! | LEDs, chain enable/reset, button | [`Gpio`] | [`linux::SysfsGpio`] (`/sys/class/gpio`) | [`sim::SimGpio`] over `SetGpio`/`ReadGpio` |
//!
//! Devices on the I2C bus (the PMBus PSU and the temperature sensors) are drivers written once
//! against [`I2cBus`] in [`devices`], so the sim exercises the very byte-level code a miner runs.

pub mod devices;
pub mod linux;
pub mod serial;
#[cfg(feature = "sim")]
pub mod sim;

use std::os::fd::BorrowedFd;

/// A hardware access failure, naming the device.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A UART could not be opened or configured.
    #[error("uart {device}: {source}")]
    Serial {
        /// Device path.
        device: String,
        /// The serialport error.
        source: serialport::Error,
    },
    /// Reading or writing a device failed.
    #[error("{device}: {source}")]
    Io {
        /// Device or sysfs path.
        device: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An I2C transfer failed.
    #[error("i2c bus {bus} address {address:#04x}: {message}")]
    I2c {
        /// Bus number.
        bus: u32,
        /// 7-bit address.
        address: u16,
        /// What went wrong.
        message: String,
    },
    /// The simulated board did not answer.
    #[error("hw-sim {call}: {status}")]
    Sim {
        /// Which call.
        call: &'static str,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// A device answered with something it should not.
    #[error("{device}: {message}")]
    Protocol {
        /// Device.
        device: String,
        /// What was wrong.
        message: String,
    },
    /// A GPIO line is not in the board's line map.
    #[error("gpio line {0} is not configured")]
    NoSuchLine(String),
}

impl DriverError {
    /// The device did not take or give data in time; it may later (unlike a vanished device).
    pub fn is_timeout(&self) -> bool {
        matches!(self, DriverError::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock))
    }
}

/// One hashboard UART.
pub trait ChainPort: Send {
    /// Device path, for logs and the inventory.
    fn device(&self) -> &str;
    /// Current line speed.
    fn baud(&self) -> u32;
    /// Change the host side's line speed.
    fn set_baud(&mut self, baud: u32) -> Result<(), DriverError>;
    /// Write all bytes (returns once the kernel has them).
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), DriverError>;
    /// Read what is available (after a poll said readable); 0 on timeout.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, DriverError>;
    /// Discard unread input (before enumeration, so stale nonces do not look like chips).
    fn clear_input(&mut self) -> Result<(), DriverError>;
    /// The descriptor to poll for readability.
    fn poll_fd(&self) -> BorrowedFd<'_>;
}

/// An I2C bus: one combined write-then-read transaction per call.
pub trait I2cBus: Send {
    /// Write `write` (may be empty) then read `read.len()` bytes (may be empty) from `address`.
    fn transfer(&mut self, address: u16, write: &[u8], read: &mut [u8]) -> Result<(), DriverError>;
}

/// One fan's reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FanReading {
    /// Tachometer, rpm.
    pub rpm: u32,
    /// Duty the fan is driven at, percent.
    pub pwm_percent: u32,
}

/// The fans.
pub trait Fans: Send {
    /// How many fans there are.
    fn count(&self) -> usize;
    /// Drive one fan at a duty, percent.
    fn set_pwm(&mut self, fan: usize, percent: u32) -> Result<(), DriverError>;
    /// Read every fan.
    fn read(&mut self) -> Result<Vec<FanReading>, DriverError>;
}

/// Named GPIO lines: `led_green`, `led_red`, `button` (true = pressed),
/// `chain<N>_enable`, `chain<N>_reset` (true = held in reset).
pub trait Gpio: Send {
    /// Drive an output line.
    fn set(&mut self, line: &str, value: bool) -> Result<(), DriverError>;
    /// Read a line.
    fn get(&mut self, line: &str) -> Result<bool, DriverError>;
}

/// GPIO line names, one place.
pub mod lines {
    /// Green status LED.
    pub const LED_GREEN: &str = "led_green";
    /// Red fault LED.
    pub const LED_RED: &str = "led_red";
    /// The reset/IP-report button (true while pressed).
    pub const BUTTON: &str = "button";
    /// Power/enable line of a chain.
    pub fn chain_enable(chain: u32) -> String {
        format!("chain{chain}_enable")
    }
    /// Reset line of a chain (true holds the chips in reset).
    pub fn chain_reset(chain: u32) -> String {
        format!("chain{chain}_reset")
    }
}

/// The board's non-UART side, owned by the board thread.
pub struct Peripherals {
    /// PSU and sensor bus.
    pub i2c: Box<dyn I2cBus>,
    /// Fans.
    pub fans: Box<dyn Fans>,
    /// GPIO lines.
    pub gpio: Box<dyn Gpio>,
    /// Bus number, for the inventory.
    pub i2c_bus: u32,
}
