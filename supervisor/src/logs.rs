//! Child output capture that survives the supervisor.
//!
//! A pipe would break the children when the supervisor dies: writes to a pipe without a reader
//! fail with EPIPE, and a full pipe blocks the writer. Instead each service writes into a named
//! FIFO (`<runtime>/logs/<service>.fifo`) opened `O_RDWR | O_NONBLOCK`: the child's own
//! read-write descriptor means there is always a reader (never EPIPE), and non-blocking writes to
//! a full FIFO fail instead of stalling (lines are dropped while nobody reads). A restarted
//! supervisor opens the same FIFO and reads what was buffered and everything after.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use svcos_common::ServiceName;

/// Longest line forwarded in one piece; longer output is split so a runaway child cannot make
/// the supervisor buffer without bound.
const MAX_LINE: usize = 8192;
/// Capacity asked for each FIFO (the default pipe-max-size allows it without privileges).
const FIFO_BYTES: libc::c_int = 256 * 1024;

/// Errors setting up a log FIFO.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// mkfifo or open failed.
    #[error("cannot set up log fifo {path}: {source}")]
    Fifo {
        /// The FIFO path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// The log FIFO of one service.
pub fn fifo_path(runtime_dir: &Path, service: ServiceName) -> PathBuf {
    runtime_dir.join("logs").join(format!("{service}.fifo"))
}

/// Create (if needed) and open a service's log FIFO read-write and non-blocking. The same
/// descriptor is read by the supervisor and duplicated into the child as stdout/stderr.
pub fn open_fifo(path: &Path) -> Result<OwnedFd, LogError> {
    let err = |source: io::Error| LogError::Fifo {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(err(e.into())),
    }
    let meta = std::fs::symlink_metadata(path).map_err(err)?;
    if !std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "exists and is not a FIFO",
        )));
    }
    let fd = open(
        path,
        OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(e.into()))?;
    // A bigger buffer holds a few minutes of output while no supervisor reads; the kernel
    // allocates its pages only as they fill. Failure just keeps the default 64 KiB.
    let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(FIFO_BYTES));
    Ok(fd)
}

/// Splits a byte stream into lines, holding a partial line until its end arrives.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feed bytes; returns every completed line (without the newline).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                out.push(String::from_utf8_lossy(&self.pending).into_owned());
                self.pending.clear();
            } else {
                self.pending.push(b);
                if self.pending.len() >= MAX_LINE {
                    out.push(String::from_utf8_lossy(&self.pending).into_owned());
                    self.pending.clear();
                }
            }
        }
        out
    }
}

/// Size at which a service's recent-log file is rotated to `<service>.log.1`.
pub const RECENT_LOG_BYTES: u64 = 256 * 1024;

/// The recent-log file of a service: the last lines it wrote (between [`RECENT_LOG_BYTES`]
/// and twice that, with the `.1` file), for the debug log and log backup of the API. On tmpfs
/// in production, so it costs no flash writes and is gone after a reboot, as the FIFOs are.
pub fn recent_path(runtime_dir: &Path, service: ServiceName) -> PathBuf {
    runtime_dir.join("logs").join(format!("{service}.log"))
}

/// Owner read/write, group read: the recent-log files and their `.1`.
pub const RECENT_LOG_MODE: u32 = 0o640;

/// Appends lines to a recent-log file, rotating it once at [`RECENT_LOG_BYTES`].
struct RecentLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    size: u64,
}

impl RecentLog {
    fn new(path: PathBuf) -> Self {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        RecentLog {
            path,
            file: None,
            size,
        }
    }

    fn append(&mut self, line: &str) {
        if self.size > RECENT_LOG_BYTES {
            self.file = None;
            let _ = std::fs::rename(&self.path, self.path.with_extension("log.1"));
            self.size = 0;
        }
        if self.file.is_none() {
            // 0640: the logs name client addresses; the group is how an admin reads them.
            self.file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(RECENT_LOG_MODE)
                .open(&self.path)
                .ok();
            // A file an older version created keeps its mode through `open`.
            if let Some(f) = &self.file {
                let _ = f.set_permissions(std::fs::Permissions::from_mode(RECENT_LOG_MODE));
            }
        }
        // Best effort: a full disk must not stop the FIFO being drained.
        if let Some(f) = self.file.as_mut()
            && writeln!(f, "{line}").is_ok()
        {
            self.size += line.len() as u64 + 1;
        }
    }
}

/// Read a service's FIFO forever, writing each line to our stderr tagged `<service>: ` and to
/// the service's recent-log file `recent` ([`recent_path`]) after the RFC 3339 time it was read
/// (`2026-11-29T03:49:13.120Z  INFO …`): the services log without a time (journald stamps
/// them in production), and the merged log view (`svcos-logs`) orders every service by it.
/// A line buffered in the FIFO while no supervisor read is stamped when it is read.
pub async fn forward(service: ServiceName, fd: OwnedFd, recent: PathBuf) {
    let mut recent = RecentLog::new(recent);
    // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and unchanged for its
    // whole life.
    let afd = match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(%service, error = %e, "cannot watch log fifo; output dropped");
            return;
        }
    };
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(mut guard) = afd.readable().await else {
            return;
        };
        let res = guard
            .try_io(|inner| nix::unistd::read(inner.get_ref(), &mut buf).map_err(io::Error::from));
        match res {
            Ok(Ok(0)) => return,
            Ok(Ok(n)) => {
                let lines = splitter.push(&buf[..n]);
                if !lines.is_empty() {
                    let mut err = io::stderr().lock();
                    // One stamp per read: the lines of one read arrived together.
                    let stamp = svcos_common::time::rfc3339_ms(svcos_common::time::unix_ms());
                    for line in lines {
                        // A closed stderr must not stop the reading: the FIFO would fill.
                        let _ = writeln!(err, "{service}: {line}");
                        recent.append(&format!("{stamp} {line}"));
                    }
                }
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => {
                tracing::warn!(%service, error = %e, "log fifo read failed; output dropped");
                return;
            }
            Err(_would_block) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitter_holds_partial_lines() {
        let mut s = LineSplitter::default();
        assert!(s.push(b"hel").is_empty());
        assert_eq!(s.push(b"lo\nwor"), ["hello"]);
        assert_eq!(s.push(b"ld\n\n"), ["world", ""]);
        let long = vec![b'x'; MAX_LINE + 5];
        let lines = s.push(&long);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), MAX_LINE);
    }

    #[test]
    fn recent_logs_are_0640_new_rotated_or_inherited() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let path = recent_path(dir.path(), ServiceName::Auth);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // An older version's world-readable file.
        std::fs::write(&path, "old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut log = RecentLog::new(path.clone());
        log.append("session created");
        assert_eq!(mode(&path), 0o640);
        let line = "x".repeat(1024);
        for _ in 0..=RECENT_LOG_BYTES / 1024 + 1 {
            log.append(&line);
        }
        assert_eq!(mode(&path.with_extension("log.1")), 0o640);
        assert_eq!(mode(&path), 0o640);
    }

    #[test]
    fn fifo_write_never_blocks_or_fails_without_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo_path(dir.path(), ServiceName::Auth);
        let fd = open_fifo(&path).unwrap();
        let size = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap();
        assert!(size >= FIFO_BYTES, "buffer grown to {size}");
        // Fill the FIFO far past its capacity: writes must return (EAGAIN), never block or
        // raise EPIPE, because the descriptor itself is a reader.
        let chunk = [b'a'; 4096];
        let mut refused = false;
        for _ in 0..1024 {
            match nix::unistd::write(&fd, &chunk) {
                Ok(_) => {}
                Err(nix::errno::Errno::EAGAIN) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("unexpected write error {e}"),
            }
        }
        assert!(refused, "a full FIFO refuses instead of blocking");
        // Re-opening (a restarted supervisor) reaches the same buffered data.
        let again = open_fifo(&path).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(nix::unistd::read(&again, &mut buf).unwrap(), 16);
        assert_eq!(&buf, b"aaaaaaaaaaaaaaaa");
    }
}
