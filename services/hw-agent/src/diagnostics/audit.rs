//! The debug audit log: one JSON line per debug write (time, call, target, bytes), appended
//! to `<state>/hw-agent/diagnostics/debug-audit.jsonl` and rotated at [`MAX_BYTES`] to
//! `.1`. Debug calls carry no secrets; the log records only what was written where.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

/// Size at which the log is rotated.
pub const MAX_BYTES: u64 = 256 * 1024;

/// File name of the log.
pub const FILE_NAME: &str = "debug-audit.jsonl";

/// The audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    lock: Mutex<()>,
}

impl AuditLog {
    /// The log in `dir`.
    pub fn new(dir: &Path) -> Self {
        AuditLog {
            path: dir.join(FILE_NAME),
            lock: Mutex::new(()),
        }
    }

    /// Append one entry: `action` names the call, `detail` what it did.
    pub fn record(&self, action: &str, detail: Value) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let line = json!({
            "timestamp_ms": svcos_common::time::unix_ms(),
            "action": action,
            "detail": detail,
        });
        tracing::info!(action, %detail, "debug write");
        let result = (|| -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                svcos_common::fsutil::ensure_dir(dir, 0o750)?;
            }
            if std::fs::metadata(&self.path).is_ok_and(|m| m.len() > MAX_BYTES) {
                std::fs::rename(&self.path, self.path.with_extension("jsonl.1"))?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            writeln!(f, "{line}")
        })();
        if let Err(e) = result {
            tracing::warn!(error = %e, path = %self.path.display(), "debug audit not written");
        }
    }
}
