//! systemd's notify protocol: READY, STATUS, STOPPING and the watchdog. Every call is a no-op
//! when NOTIFY_SOCKET is unset (sim, tests, a shell).
//!
//! The messages and the watchdog settings come from the `sd-notify` crate (`NotifyState`,
//! `watchdog_enabled`). The datagram is sent here rather than with `sd_notify::notify`, for two
//! reasons that crate does not cover: it sends blocking, and a service manager that stopped
//! reading must never freeze the supervisor (which would then stop restarting services), so
//! the send is non-blocking and a dropped notification is harmless (the next status or
//! watchdog ping follows soon); and it connects to NOTIFY_SOCKET as a path, while systemd may
//! name an abstract socket (`@/org/freedesktop/systemd1/notify`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use sd_notify::NotifyState;
use std::os::linux::net::SocketAddrExt;

fn target(socket: &OsString) -> std::io::Result<SocketAddr> {
    let bytes = socket.as_bytes();
    match bytes.strip_prefix(b"@") {
        // An abstract socket, as systemd uses.
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(std::path::Path::new(socket)),
    }
}

fn send(state: NotifyState<'_>) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send_to(&socket, &message(&state)) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// One state as its datagram: `KEY=value` and a line break, as `sd_notify::notify` writes it.
fn message(state: &NotifyState<'_>) -> String {
    format!("{state}\n")
}

fn send_to(socket: &OsString, message: &str) -> std::io::Result<()> {
    let addr = target(socket)?;
    let sock = UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    sock.send_to_addr(message.as_bytes(), &addr).map(drop)
}

/// Boot is complete.
pub fn ready() {
    send(NotifyState::Ready);
}

/// One-line status shown by `systemctl status`.
pub fn status(text: &str) {
    send(NotifyState::Status(&text.replace('\n', " ")));
}

/// Shutdown has begun.
pub fn stopping() {
    send(NotifyState::Stopping);
}

/// Keep the watchdog fed.
pub fn watchdog() {
    send(NotifyState::Watchdog);
}

/// How often to feed the watchdog (half its timeout), when systemd asked for one.
pub fn watchdog_interval() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    // WATCHDOG_PID, when set, names the process the watchdog is meant for (the crate checks it).
    sd_notify::watchdog_enabled()
        .filter(|timeout| !timeout.is_zero())
        .map(|timeout| timeout / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manager_that_stops_reading_never_blocks_us() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let manager = UnixDatagram::bind(&path).unwrap();
        let socket = OsString::from(&path);
        send_to(&socket, "READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
        // Nobody reads any more: sends fail fast once the queue is full instead of blocking.
        let refused = (0..100_000).any(|_| send_to(&socket, "WATCHDOG=1\n").is_err());
        assert!(refused);
    }

    #[test]
    fn messages_are_the_protocol_lines() {
        assert_eq!(message(&NotifyState::Ready), "READY=1\n");
        assert_eq!(message(&NotifyState::Stopping), "STOPPING=1\n");
        assert_eq!(message(&NotifyState::Watchdog), "WATCHDOG=1\n");
        assert_eq!(
            message(&NotifyState::Status("9/9 services running")),
            "STATUS=9/9 services running\n"
        );
    }

    #[test]
    fn abstract_addresses_are_understood() {
        let addr = target(&OsString::from("@/org/freedesktop/systemd1/notify")).unwrap();
        assert_eq!(
            addr.as_abstract_name(),
            Some(&b"/org/freedesktop/systemd1/notify"[..])
        );
    }
}
