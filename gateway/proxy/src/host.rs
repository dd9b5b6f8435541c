//! The DNS-rebinding defence, shared with the gateway: [`svcos_common::hostcheck`].

pub use svcos_common::hostcheck::{HostPolicy, REFUSED_STATUS};
