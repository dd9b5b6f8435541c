//! How the gateway knows a request came through the port-80 proxy, so that it may believe the
//! client address in `X-Forwarded-For` (the per-address setup limit and login throttle key on
//! it).
//!
//! A loopback peer is not enough: any local process, or anyone who can reach a loopback-bound
//! gateway, could name whatever address it likes and so never hit a per-address limit. Instead
//! the proxy makes a random key when it starts, writes it where only the svcos services can
//! read it (`<runtime>/proxy/forward.key`, dir 0750, file 0640, group svcos) and sends it in
//! [`HEADER`] on every request it forwards (replacing any a client sent). The gateway trusts
//! `X-Forwarded-For` only on a request carrying the current key ([`ProxyKeyCheck`]).

use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Layout, ServiceName, fsutil};

/// The request header that carries the key from the proxy to the gateway.
pub const HEADER: &str = "x-svcos-proxy-key";

/// Where the proxy keeps its key.
pub fn key_path(layout: &Layout) -> PathBuf {
    layout
        .service_runtime_dir(ServiceName::Proxy)
        .join("forward.key")
}

/// Make a fresh random key and write it for the gateway (the proxy calls this at start).
pub fn create(layout: &Layout) -> io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = key_path(layout);
    if let Some(dir) = path.parent() {
        fsutil::ensure_dir(dir, 0o750)?;
    }
    fsutil::atomic_write(&path, key.as_bytes(), 0o640)?;
    Ok(key)
}

/// The gateway's side: compares a presented key with the proxy's current one.
#[derive(Debug)]
pub struct ProxyKeyCheck {
    path: PathBuf,
    cached: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    key: Option<String>,
    /// Which file the key came from: a restarted proxy writes a new file (atomically, so a new
    /// inode), and only then can a mismatch turn into a match.
    file: Option<FileId>,
}

/// What tells one version of the key file from the next without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    len: u64,
}

impl FileId {
    fn of(path: &Path) -> Option<Self> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            len: m.len(),
        })
    }
}

impl ProxyKeyCheck {
    /// Check keys against the file at `path` (read lazily).
    pub fn new(path: &Path) -> Self {
        ProxyKeyCheck {
            path: path.to_path_buf(),
            cached: Mutex::new(Cached::default()),
        }
    }

    /// Whether `presented` is the proxy's current key. On a mismatch the file is re-read only if
    /// it changed since the last read (one `stat`): the proxy may have restarted with a new key.
    /// A time-based throttle instead refused the new key for a while after any read, and the
    /// gateway checks the key on every forwarded request.
    pub fn verify(&self, presented: &str) -> bool {
        let mut cached = self.cached.lock().expect("proxy key lock");
        if cached.key.as_deref().is_some_and(|k| same(k, presented)) {
            return true;
        }
        let file = FileId::of(&self.path);
        if file.is_none() || file == cached.file {
            return false;
        }
        let key = std::fs::read_to_string(&self.path)
            .ok()
            .map(|k| k.trim().to_string())
            .filter(|k| k.len() >= 32);
        *cached = Cached { key, file };
        cached.key.as_deref().is_some_and(|k| same(k, presented))
    }
}

/// Constant-time comparison (the time taken says nothing about how much of a guess matched).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_key_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::sim(dir.path());
        let check = ProxyKeyCheck::new(&key_path(&layout));
        assert!(!check.verify("anything"), "no proxy yet");
        let key = create(&layout).unwrap();
        assert_eq!(key.len(), 64);
        assert!(check.verify(&key));
        assert!(!check.verify(&key[..63]));
        assert!(!check.verify(""));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(key_path(&layout)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o640);
        // A restarted proxy has a new key; the old one stops working.
        let key2 = create(&layout).unwrap();
        assert_ne!(key, key2);
        assert!(check.verify(&key2), "the new key at once, with no wait");
        assert!(!check.verify(&key));
        // Wrong keys between restarts cost a stat, and do not stop the next key from working.
        for _ in 0..3 {
            assert!(!check.verify("guess"));
        }
        let key3 = create(&layout).unwrap();
        assert!(check.verify(&key3));
        assert!(!check.verify(&key2));
    }
}
