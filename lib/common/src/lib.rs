//! What every svcOS service shares.
//!
//! A service is a library with `run(ctx, listener, shutdown)`; [`entry::run_service`] is the thin
//! `main` around it: parse the common arguments, set up logging, load the config (an invalid value
//! falls back and is reported, never stops the service: [`config::Config::load_or_fallback`]),
//! bind the Unix socket with mode 0660, run, and map the outcome to an exit code.
//!
//! Paths live in one place ([`paths::Layout`]), so production (`/run/svcos`, `/var/lib/svcos`,
//! `/etc/svcos`) and the simulator (`<dir>/run`, `<dir>/state`, `<dir>/config.toml`) differ only
//! in the root they start from.

pub mod alloc;
pub mod authority;
pub mod bounds;
pub mod cgminer;
pub mod chiphealth;
pub mod config;
pub mod entry;
pub mod exit;
pub mod fdstore;
pub mod fsutil;
pub mod hostcheck;
pub mod ipc;
pub mod logging;
pub mod net;
pub mod networkd;
pub mod paths;
pub mod proxykey;
pub mod psu;
pub mod redact;
pub mod reflection;
pub mod sched;
pub mod service;
pub mod sshkeys;
pub mod statefile;
pub mod status;
pub mod time;
pub mod timewin;
pub mod trace;
pub mod units;

pub use paths::Layout;
pub use service::ServiceName;
pub use svcos_netserve::{Shutdown, connlimit, httpserve, shutdown};
