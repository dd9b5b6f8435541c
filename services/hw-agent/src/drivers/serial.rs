//! The hashboard UART through the `serialport` crate: a real `/dev/ttyS*` on a miner, the PTY
//! slave hw-sim advertises in the sim. Same code for both, which is the point of the PTY.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use serialport::{ClearBuffer, DataBits, FlowControl, Parity, SerialPort, StopBits, TTYPort};

use super::{ChainPort, DriverError};

/// Read timeout once poll said readable (the data is there; this only bounds a surprise).
const READ_TIMEOUT: Duration = Duration::from_millis(20);

/// A chain UART, 8N1, no flow control, exclusively locked so two hw-agents never share it.
pub struct SerialChain {
    port: TTYPort,
    device: String,
    baud: u32,
}

impl SerialChain {
    /// Open `device` at `baud`.
    pub fn open(device: &str, baud: u32) -> Result<Self, DriverError> {
        let port = serialport::new(device, baud)
            .data_bits(DataBits::Eight)
            .parity(Parity::None)
            .stop_bits(StopBits::One)
            .flow_control(FlowControl::None)
            .timeout(READ_TIMEOUT)
            .open_native()
            .map_err(|source| DriverError::Serial {
                device: device.to_string(),
                source,
            })?;
        Ok(SerialChain {
            port,
            device: device.to_string(),
            baud,
        })
    }

    /// Adopt an already open descriptor of `device` (kept by the supervisor across a restart):
    /// the same open file, so the bytes the kernel buffered meanwhile are still there. Line
    /// settings are re-applied; the speed is set to `baud`.
    pub fn adopt(fd: OwnedFd, device: &str, baud: u32) -> Result<Self, DriverError> {
        let serial = |source| DriverError::Serial {
            device: device.to_string(),
            source,
        };
        // SAFETY: `fd` is an open descriptor we own; TTYPort takes over closing it.
        let mut port = unsafe { TTYPort::from_raw_fd(fd.into_raw_fd()) };
        port.set_data_bits(DataBits::Eight).map_err(serial)?;
        port.set_parity(Parity::None).map_err(serial)?;
        port.set_stop_bits(StopBits::One).map_err(serial)?;
        port.set_flow_control(FlowControl::None).map_err(serial)?;
        port.set_timeout(READ_TIMEOUT).map_err(serial)?;
        if port.baud_rate().ok() != Some(baud) {
            port.set_baud_rate(baud).map_err(serial)?;
        }
        Ok(SerialChain {
            port,
            device: device.to_string(),
            baud,
        })
    }

    fn io(&self, source: std::io::Error) -> DriverError {
        DriverError::Io {
            device: self.device.clone(),
            source,
        }
    }
}

impl ChainPort for SerialChain {
    fn device(&self) -> &str {
        &self.device
    }

    fn baud(&self) -> u32 {
        self.baud
    }

    fn set_baud(&mut self, baud: u32) -> Result<(), DriverError> {
        // The chips switch after the command's last byte; wait for it to leave before the
        // host side changes speed, or the command's tail would go out at the new rate.
        let _ = self.port.flush();
        self.port
            .set_baud_rate(baud)
            .map_err(|source| DriverError::Serial {
                device: self.device.clone(),
                source,
            })?;
        self.baud = baud;
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), DriverError> {
        self.port.write_all(bytes).map_err(|e| self.io(e))
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, DriverError> {
        match self.port.read(buf) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(self.io(e)),
        }
    }

    fn clear_input(&mut self) -> Result<(), DriverError> {
        self.port
            .clear(ClearBuffer::Input)
            .map_err(|source| DriverError::Serial {
                device: self.device.clone(),
                source,
            })
    }

    fn poll_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self.port`, which outlives the returned borrow.
        unsafe { BorrowedFd::borrow_raw(self.port.as_raw_fd()) }
    }
}
