//! Process exit codes. The supervisor's restart policy keys on these.

/// Clean exit (asked to stop).
pub const OK: u8 = 0;
/// A runtime failure; the supervisor restarts the service.
pub const FAILURE: u8 = 1;
/// Bad command line (EX_USAGE); never restarted.
pub const USAGE: u8 = 64;
/// Bad configuration (EX_CONFIG); never restarted, because a restart cannot fix it.
pub const CONFIG: u8 = 78;

/// Exit codes that mean "do not restart", whatever the strategy says.
pub const NO_RESTART: &[i32] = &[USAGE as i32, CONFIG as i32];
