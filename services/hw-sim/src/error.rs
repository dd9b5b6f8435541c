//! The sim's errors and their one mapping to gRPC codes.

/// Why a sim request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// No device answers at this I2C bus/address (a NACK on real hardware).
    #[error("no I2C device at bus {bus} address {address:#04x}")]
    NoI2cDevice {
        /// Bus.
        bus: u32,
        /// 7-bit address.
        address: u32,
    },
    /// The device has no such register or command.
    #[error("I2C device {address:#04x} has no register {register:#04x}")]
    BadRegister {
        /// 7-bit address.
        address: u32,
        /// Register or command code.
        register: u8,
    },
    /// A register write with a value out of range or the wrong length.
    #[error("bad value for I2C device {address:#04x}: {message}")]
    BadValue {
        /// 7-bit address.
        address: u32,
        /// What is wrong.
        message: &'static str,
    },
    /// An unknown GPIO line name.
    #[error("unknown GPIO line {0:?}")]
    UnknownLine(String),
    /// A write to an input line.
    #[error("GPIO line {0:?} is an input")]
    ReadOnlyLine(String),
    /// An unknown fault kind.
    #[error("unknown fault kind {0:?}")]
    UnknownFault(String),
    /// A fault magnitude out of range.
    #[error("bad fault value: {0}")]
    BadFaultValue(&'static str),
    /// No such chain.
    #[error("no chain {0}")]
    NoSuchChain(u32),
    /// No such chip.
    #[error("no chip {chip} on chain {chain}")]
    NoSuchChip {
        /// Chain.
        chain: u32,
        /// Chip index.
        chip: u32,
    },
    /// No such fan.
    #[error("no fan {0}")]
    NoSuchFan(u32),
}

impl From<SimError> for tonic::Status {
    fn from(e: SimError) -> Self {
        let message = e.to_string();
        match e {
            SimError::NoI2cDevice { .. } | SimError::UnknownLine(_) => {
                tonic::Status::not_found(message)
            }
            SimError::NoSuchChain(_) | SimError::NoSuchChip { .. } | SimError::NoSuchFan(_) => {
                tonic::Status::out_of_range(message)
            }
            SimError::BadRegister { .. }
            | SimError::BadValue { .. }
            | SimError::ReadOnlyLine(_)
            | SimError::UnknownFault(_)
            | SimError::BadFaultValue(_) => tonic::Status::invalid_argument(message),
        }
    }
}
