//! The svcOS supervisor (skeleton; see issue 2).

use std::ffi::OsString;
use std::process::ExitCode;

/// `svcos supervisor`.
pub fn entry(_args: Vec<OsString>) -> ExitCode {
    eprintln!("supervisor: not built yet");
    ExitCode::from(1)
}

/// `svcos sim`.
pub fn sim_entry(_args: Vec<OsString>) -> ExitCode {
    eprintln!("sim: not built yet");
    ExitCode::from(1)
}

/// `svcos ctl`.
pub fn ctl_entry(_args: Vec<OsString>) -> ExitCode {
    eprintln!("ctl: not built yet");
    ExitCode::from(1)
}
