//! hw-agent's errors and their one mapping to gRPC status codes.

use svcos_common::status::ToStatus;
use tonic::Status;

use crate::chain::ChainError;
use crate::drivers::DriverError;
use crate::state::StateError;

/// Everything that can go wrong in hw-agent, with the context a reader needs.
#[derive(Debug, thiserror::Error)]
pub enum HwError {
    /// A request named a chain the board does not have.
    #[error("no chain {chain} (the board has {chains})")]
    NoSuchChain {
        /// Asked for.
        chain: u32,
        /// Chains present.
        chains: u32,
    },
    /// A request value is out of range.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// Which field.
        field: &'static str,
        /// What is allowed.
        message: String,
    },
    /// The hardware cannot do what was asked in its current state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A chain refused or failed.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// A device failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The re-attach state could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The board description (GetBoard in the sim) could not be obtained.
    #[error("board discovery: {0}")]
    Discovery(String),
    /// A worker thread is gone (only during shutdown).
    #[error("{0} is not running")]
    WorkerGone(&'static str),
}

impl ToStatus for HwError {
    fn to_status(&self) -> Status {
        match self {
            HwError::NoSuchChain { .. } => Status::not_found(self.to_string()),
            HwError::InvalidArgument { field, message } => {
                svcos_common::status::invalid_field(field, message)
            }
            HwError::FailedPrecondition(_) => Status::failed_precondition(self.to_string()),
            HwError::Chain(e) => match e {
                ChainError::NoSuchChip { .. } => Status::not_found(self.to_string()),
                ChainError::Codec { .. } => Status::invalid_argument(self.to_string()),
                ChainError::NotRunning { .. } => Status::failed_precondition(self.to_string()),
                ChainError::Driver { .. }
                | ChainError::NoChips { .. }
                | ChainError::BaudSwitch { .. } => Status::unavailable(self.to_string()),
            },
            HwError::Driver(_) => Status::unavailable(self.to_string()),
            HwError::State(e) => svcos_common::status::internal("re-attach state", e),
            HwError::Discovery(_) => Status::unavailable(self.to_string()),
            HwError::WorkerGone(_) => Status::unavailable(self.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn mapping_is_specific() {
        let cases = [
            (
                HwError::NoSuchChain {
                    chain: 5,
                    chains: 3,
                },
                Code::NotFound,
            ),
            (
                HwError::InvalidArgument {
                    field: "pwm_percent",
                    message: "0-100".into(),
                },
                Code::InvalidArgument,
            ),
            (
                HwError::Chain(ChainError::NotRunning { chain: 1 }),
                Code::FailedPrecondition,
            ),
            (
                HwError::Chain(ChainError::NoSuchChip { chain: 1, chip: 99 }),
                Code::NotFound,
            ),
            (HwError::WorkerGone("board"), Code::Unavailable),
        ];
        for (err, code) in cases {
            let s = err.to_status();
            assert_eq!(s.code(), code, "{err}");
            assert_eq!(s.message(), err.to_string());
        }
    }
}
