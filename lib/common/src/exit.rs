//! Process exit codes. The supervisor's restart policy keys on these.

/// Clean exit (asked to stop).
pub const OK: u8 = 0;
/// A runtime failure; the supervisor restarts the service.
pub const FAILURE: u8 = 1;
/// Bad command line (EX_USAGE); never restarted.
pub const USAGE: u8 = 64;
/// A configuration a service cannot run on at all (EX_CONFIG); never restarted, because a
/// restart cannot fix it. Never used for a bad value: that falls back and is reported
/// ([`crate::config::Config::load_or_fallback`]), so the chips never idle over one.
pub const CONFIG: u8 = 78;

/// Exit codes that mean "do not restart", whatever the strategy says.
pub const NO_RESTART: &[i32] = &[USAGE as i32, CONFIG as i32];
