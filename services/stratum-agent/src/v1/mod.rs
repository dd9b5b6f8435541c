//! Stratum V1: the wire codec and the client session state machine (no I/O in either).

pub mod codec;
pub mod session;
