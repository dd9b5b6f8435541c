//! The hashboard UART through the `serialport` crate: a real `/dev/ttyS*` on a miner, the PTY
//! slave hw-sim advertises in the sim. Same code for both, which is the point of the PTY.
//!
//! Line settings and every speed the standard termios interface names (`B115200` …
//! `B4000000`, which covers the chains' 115 200 start and the default 1 Mbaud) go through
//! `tcsetattr`; only a rate without a `Bnnn` constant (the fast-clock 1 562 500 and
//! 3 125 000) takes serialport's termios2 (`TCSETS2`, `BOTHER`). Both reach the same kernel
//! code on a real UART, but the standard path is the one every emulator and libc implements:
//! the `serialport` crate uses termios2 for everything on Linux, and qemu-user 7.2 (Debian 12)
//! answers `TCGETS2` with ENOSYS, so no chain could come up in the ARM cross test. A rate that
//! needs termios2 where there is none fails with that error; it is never replaced by a
//! different rate, since the chips would be talking at the one asked for.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::{FcntlArg, OFlag};
use nix::sys::stat::Mode;
use nix::sys::termios::{self, BaudRate, ControlFlags, InputFlags, SetArg};
use serialport::{ClearBuffer, SerialPort, TTYPort};

use super::{ChainPort, DriverError};

/// Read timeout once poll said readable (the data is there; this only bounds a surprise).
const READ_TIMEOUT: Duration = Duration::from_millis(20);

/// The rates Linux's standard termios names, with their `Bnnn` code.
const STANDARD_RATES: [(u32, BaudRate); 30] = [
    (50, BaudRate::B50),
    (75, BaudRate::B75),
    (110, BaudRate::B110),
    (134, BaudRate::B134),
    (150, BaudRate::B150),
    (200, BaudRate::B200),
    (300, BaudRate::B300),
    (600, BaudRate::B600),
    (1_200, BaudRate::B1200),
    (1_800, BaudRate::B1800),
    (2_400, BaudRate::B2400),
    (4_800, BaudRate::B4800),
    (9_600, BaudRate::B9600),
    (19_200, BaudRate::B19200),
    (38_400, BaudRate::B38400),
    (57_600, BaudRate::B57600),
    (115_200, BaudRate::B115200),
    (230_400, BaudRate::B230400),
    (460_800, BaudRate::B460800),
    (500_000, BaudRate::B500000),
    (576_000, BaudRate::B576000),
    (921_600, BaudRate::B921600),
    (1_000_000, BaudRate::B1000000),
    (1_152_000, BaudRate::B1152000),
    (1_500_000, BaudRate::B1500000),
    (2_000_000, BaudRate::B2000000),
    (2_500_000, BaudRate::B2500000),
    (3_000_000, BaudRate::B3000000),
    (3_500_000, BaudRate::B3500000),
    (4_000_000, BaudRate::B4000000),
];

/// The standard termios code for `baud`, if it has one.
fn standard_code(baud: u32) -> Option<BaudRate> {
    STANDARD_RATES
        .iter()
        .find(|(rate, _)| *rate == baud)
        .map(|(_, code)| *code)
}

/// The rate a standard termios speed code stands for (`None` for `BOTHER`: a termios2 rate).
fn standard_rate(code: libc::speed_t) -> Option<u32> {
    STANDARD_RATES
        .iter()
        .find(|(_, c)| *c as libc::speed_t == code)
        .map(|(rate, _)| *rate)
}

/// Raw 8N1, receiver on, modem lines and all flow control off (the speed as it is): what
/// serialport's open does, through `tcsetattr`.
fn apply_line_settings(fd: BorrowedFd<'_>) -> nix::Result<()> {
    let mut t = termios::tcgetattr(fd)?;
    termios::cfmakeraw(&mut t);
    t.control_flags |= ControlFlags::CREAD | ControlFlags::CLOCAL | ControlFlags::CS8;
    t.control_flags &= !(ControlFlags::PARENB | ControlFlags::CSTOPB | ControlFlags::CRTSCTS);
    t.input_flags &= !(InputFlags::IXON | InputFlags::IXOFF | InputFlags::IXANY);
    termios::tcsetattr(fd, SetArg::TCSANOW, &t)
}

/// The speed the line is set to, through the standard interface when the code is a standard
/// one, else through termios2 (the only way to read a `BOTHER` rate).
fn current_baud(port: &TTYPort) -> Option<u32> {
    let t = termios::tcgetattr(fd_of(port)).ok()?;
    let code = libc::termios::from(t).c_cflag & libc::CBAUD;
    standard_rate(code).or_else(|| port.baud_rate().ok())
}

/// Set the line to `baud`: `tcsetattr` for a standard rate, termios2 for any other.
fn set_speed(port: &mut TTYPort, baud: u32) -> serialport::Result<()> {
    match standard_code(baud) {
        Some(code) => apply_speed(fd_of(port), code).map_err(nix_error),
        None => port.set_baud_rate(baud),
    }
}

/// Only the speed of the current settings changes.
fn apply_speed(fd: BorrowedFd<'_>, code: BaudRate) -> nix::Result<()> {
    let mut t = termios::tcgetattr(fd)?;
    termios::cfsetspeed(&mut t, code)?;
    termios::tcsetattr(fd, SetArg::TCSANOW, &t)
}

/// The port's descriptor, borrowed for a termios call.
fn fd_of(port: &TTYPort) -> BorrowedFd<'_> {
    // SAFETY: the descriptor is owned by `port`, which outlives the returned borrow.
    unsafe { BorrowedFd::borrow_raw(port.as_raw_fd()) }
}

/// serialport speaks an older nix; its errors come from `std::io`.
fn nix_error(e: nix::Error) -> serialport::Error {
    serialport::Error::from(std::io::Error::from(e))
}

/// A chain UART, 8N1, no flow control, exclusively locked so two hw-agents never share it.
pub struct SerialChain {
    port: TTYPort,
    device: String,
    baud: u32,
}

impl SerialChain {
    /// Open `device` at `baud`.
    pub fn open(device: &str, baud: u32) -> Result<Self, DriverError> {
        let serial = |source| DriverError::Serial {
            device: device.to_string(),
            source,
        };
        // Non-blocking so a modem-control line cannot hold the open; reads block again below
        // (the mining loop polls before it reads).
        let fd = nix::fcntl::open(
            device,
            OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| serial(nix_error(e)))?;
        nix::fcntl::fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::empty()))
            .map_err(|e| serial(nix_error(e)))?;
        // SAFETY: `fd` is an open descriptor we own; TTYPort takes over closing it.
        let port = unsafe { TTYPort::from_raw_fd(fd.into_raw_fd()) };
        // from_raw_fd takes TIOCEXCL and a non-blocking exclusive flock but cannot fail;
        // a port someone else holds is refused here, as serialport's own open refuses it.
        if !port.exclusive() {
            return Err(serial(serialport::Error::new(
                serialport::ErrorKind::NoDevice,
                "another process holds the port (flock or TIOCEXCL)",
            )));
        }
        Self::configure(port, device, baud, None)
    }

    /// Adopt an already open descriptor of `device` (kept by the supervisor across a restart):
    /// the same open file, so the bytes the kernel buffered meanwhile are still there. Line
    /// settings are re-applied; the speed is set to `baud`.
    pub fn adopt(fd: OwnedFd, device: &str, baud: u32) -> Result<Self, DriverError> {
        // SAFETY: `fd` is an open descriptor we own; TTYPort takes over closing it.
        let port = unsafe { TTYPort::from_raw_fd(fd.into_raw_fd()) };
        let current = current_baud(&port);
        Self::configure(port, device, baud, current)
    }

    /// Line settings, then the speed unless the line already runs at it (`current`): a real
    /// UART's divisor is left alone when nothing changes.
    fn configure(
        mut port: TTYPort,
        device: &str,
        baud: u32,
        current: Option<u32>,
    ) -> Result<Self, DriverError> {
        let serial = |source| DriverError::Serial {
            device: device.to_string(),
            source,
        };
        apply_line_settings(fd_of(&port)).map_err(|e| serial(nix_error(e)))?;
        port.set_timeout(READ_TIMEOUT).map_err(serial)?;
        if current != Some(baud) {
            set_speed(&mut port, baud).map_err(serial)?;
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
        set_speed(&mut self.port, baud).map_err(|source| DriverError::Serial {
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
        fd_of(&self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chain speed the config accepts, and the path each one takes.
    #[test]
    fn chain_speeds_take_the_standard_path_where_one_exists() {
        let table = [
            (115_200, Some(BaudRate::B115200)),
            (1_000_000, Some(BaudRate::B1000000)),
            // BM1397-class fast-clock rates: termios2 only.
            (1_562_500, None),
            (3_125_000, None),
        ];
        for (baud, code) in table {
            assert_eq!(standard_code(baud), code, "{baud}");
        }
        for (rate, code) in STANDARD_RATES {
            assert_eq!(standard_rate(code as libc::speed_t), Some(rate));
        }
        assert_eq!(standard_rate(libc::BOTHER), None);
    }

    fn pty() -> (OwnedFd, String) {
        let pair = nix::pty::openpty(None, None).unwrap();
        let path = nix::unistd::ttyname(pair.slave.as_fd()).unwrap();
        (pair.master, path.to_string_lossy().into_owned())
    }

    fn speed_code(chain: &SerialChain) -> libc::speed_t {
        libc::termios::from(termios::tcgetattr(fd_of(&chain.port)).unwrap()).c_cflag & libc::CBAUD
    }

    #[test]
    fn opens_raw_8n1_and_switches_between_standard_and_termios2_rates() {
        let (_master, path) = pty();
        let mut chain = SerialChain::open(&path, 115_200).unwrap();
        let t = termios::tcgetattr(fd_of(&chain.port)).unwrap();
        assert!(
            t.control_flags
                .contains(ControlFlags::CS8 | ControlFlags::CREAD | ControlFlags::CLOCAL)
        );
        assert!(
            !t.control_flags
                .intersects(ControlFlags::PARENB | ControlFlags::CSTOPB | ControlFlags::CRTSCTS)
        );
        assert!(!t.local_flags.contains(termios::LocalFlags::ECHO));
        assert_eq!(speed_code(&chain), libc::B115200);

        chain.set_baud(1_000_000).unwrap();
        assert_eq!(speed_code(&chain), libc::B1000000);
        assert_eq!(current_baud(&chain.port), Some(1_000_000));

        chain.set_baud(3_125_000).unwrap();
        assert_eq!(speed_code(&chain), libc::BOTHER);
        assert_eq!(current_baud(&chain.port), Some(3_125_000));

        // Back to a standard rate: the termios2 rate must not linger.
        chain.set_baud(115_200).unwrap();
        assert_eq!(speed_code(&chain), libc::B115200);
        assert_eq!(chain.baud(), 115_200);
    }

    #[test]
    fn a_second_open_is_refused_and_adopt_keeps_the_speed() {
        let (_master, path) = pty();
        let chain = SerialChain::open(&path, 1_000_000).unwrap();
        assert!(matches!(
            SerialChain::open(&path, 1_000_000),
            Err(DriverError::Serial { .. })
        ));

        // The supervisor's copy of the descriptor: the same open file, same lock.
        let kept = nix::unistd::dup(fd_of(&chain.port)).unwrap();
        drop(chain);
        let adopted = SerialChain::adopt(kept, &path, 1_000_000).unwrap();
        assert_eq!(speed_code(&adopted), libc::B1000000);
        assert_eq!(adopted.baud(), 1_000_000);
    }
}
