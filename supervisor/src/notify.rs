//! systemd's notify protocol: READY, STATUS, STOPPING and the watchdog. Every call is a no-op
//! when NOTIFY_SOCKET is unset (sim, tests, a shell).

use std::time::Duration;

use sd_notify::NotifyState;

fn send(state: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// Boot is complete.
pub fn ready() {
    send(&[NotifyState::Ready]);
}

/// One-line status shown by `systemctl status`.
pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// Shutdown has begun.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Keep the watchdog fed.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// How often to feed the watchdog (half its timeout), when systemd asked for one.
pub fn watchdog_interval() -> Option<Duration> {
    let mut usec = 0;
    if std::env::var_os("NOTIFY_SOCKET").is_some() && sd_notify::watchdog_enabled(false, &mut usec)
    {
        Some(Duration::from_micros(usec / 2))
    } else {
        None
    }
}
