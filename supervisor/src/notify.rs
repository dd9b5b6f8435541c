//! systemd's notify protocol: READY, STATUS, STOPPING and the watchdog. Every call is a no-op
//! when NOTIFY_SOCKET is unset (sim, tests, a shell).
//!
//! Datagrams are sent non-blocking: a service manager that stopped reading must never freeze
//! the supervisor (which would then stop restarting services). A dropped notification is
//! harmless; the next status or watchdog ping follows soon.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use std::os::linux::net::SocketAddrExt;

fn target(socket: &OsString) -> std::io::Result<SocketAddr> {
    let bytes = socket.as_bytes();
    match bytes.strip_prefix(b"@") {
        // An abstract socket, as systemd uses.
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(std::path::Path::new(socket)),
    }
}

fn send(message: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send_to(&socket, message) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

fn send_to(socket: &OsString, message: &str) -> std::io::Result<()> {
    let addr = target(socket)?;
    let sock = UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    sock.send_to_addr(message.as_bytes(), &addr).map(drop)
}

/// Boot is complete.
pub fn ready() {
    send("READY=1\n");
}

/// One-line status shown by `systemctl status`.
pub fn status(text: &str) {
    send(&format!("STATUS={}\n", text.replace('\n', " ")));
}

/// Shutdown has begun.
pub fn stopping() {
    send("STOPPING=1\n");
}

/// Keep the watchdog fed.
pub fn watchdog() {
    send("WATCHDOG=1\n");
}

/// How often to feed the watchdog (half its timeout), when systemd asked for one.
pub fn watchdog_interval() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    // WATCHDOG_PID, when set, names the process the watchdog is meant for.
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
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
    fn abstract_addresses_are_understood() {
        let addr = target(&OsString::from("@/org/freedesktop/systemd1/notify")).unwrap();
        assert_eq!(
            addr.as_abstract_name(),
            Some(&b"/org/freedesktop/systemd1/notify"[..])
        );
    }
}
