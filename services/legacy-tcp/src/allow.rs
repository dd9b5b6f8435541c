//! Who may run privileged commands: cgminer's `--api-allow` with its `W:` group. The parser is
//! the config's own ([`svcos_common::config::allow`]), so what the config validator accepts is
//! exactly what this service runs with.

pub use svcos_common::config::allow::{AllowEntry, AllowError, AllowList};
