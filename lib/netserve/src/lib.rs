//! Serving TCP clients, with nothing of gRPC in it: the firmware's services reach these through
//! `svcos_common` (which re-exports them), and the Open Mining Data server depends on this crate
//! directly so that it stays free of tonic and prost.

pub mod connlimit;
pub mod httpserve;
pub mod shutdown;

pub use shutdown::Shutdown;
