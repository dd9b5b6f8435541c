//! Loading a service's JSON state files so that a damaged one never stops the service.
//!
//! Writes are atomic ([`crate::fsutil::atomic_write`]), but a file can still be damaged (a full
//! disk when it was first made, a person editing it, flash wear). A file that does not parse is
//! moved aside to `<name>.corrupt-<unix ms>` beside it, an error is logged, and the caller starts
//! from its defaults: the service runs, nothing is silently overwritten (the bad bytes stay for a
//! person to look at), and [`recovered`] lets the API report what was moved aside.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The infix of a moved-aside file's name.
pub const CORRUPT_INFIX: &str = ".corrupt-";

/// Read a JSON state file: `None` when it does not exist, cannot be read, or was damaged (then
/// it has been moved aside and logged).
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read a state file; starting from defaults");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            move_aside(path, &e.to_string());
            None
        }
    }
}

/// Move a damaged state file aside (logged); returns where it went.
pub fn move_aside(path: &Path, why: &str) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let aside = path.with_file_name(format!("{name}{CORRUPT_INFIX}{}", crate::time::unix_ms()));
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::error!(
                event = "state_file_corrupt",
                path = %path.display(),
                aside = %aside.display(),
                why,
                "state file damaged: moved aside, starting from defaults"
            );
            Some(aside)
        }
        Err(e) => {
            tracing::error!(path = %path.display(), why, error = %e, "state file damaged and could not be moved aside; starting from defaults");
            None
        }
    }
}

/// One moved-aside file, for the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recovered {
    /// The service directory it was found in (`tuner`, `gateway`, ...).
    pub service: String,
    /// The original file name (`settings.json`).
    pub file: String,
    /// The moved-aside name (`settings.json.corrupt-1763900000000`).
    pub aside: String,
    /// When it was moved aside, Unix ms.
    pub moved_at_ms: i64,
}

/// Every moved-aside file under the per-service directories of `state_dir` (and one level
/// below them), newest first. Directories this process may not read are skipped.
pub fn recovered(state_dir: &Path) -> Vec<Recovered> {
    let mut out = Vec::new();
    let Ok(services) = std::fs::read_dir(state_dir) else {
        return out;
    };
    for service in services.flatten() {
        let service_name = service.file_name().to_string_lossy().into_owned();
        let mut dirs = vec![service.path()];
        if let Ok(children) = std::fs::read_dir(service.path()) {
            dirs.extend(
                children
                    .flatten()
                    .filter(|c| c.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|c| c.path()),
            );
        }
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let aside = entry.file_name().to_string_lossy().into_owned();
                let Some((file, ms)) = aside.rsplit_once(CORRUPT_INFIX) else {
                    continue;
                };
                let Ok(moved_at_ms) = ms.parse::<i64>() else {
                    continue;
                };
                out.push(Recovered {
                    service: service_name.clone(),
                    file: file.to_string(),
                    aside,
                    moved_at_ms,
                });
            }
        }
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.moved_at_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_file_is_moved_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let tuner = dir.path().join("tuner");
        std::fs::create_dir_all(&tuner).unwrap();
        let good = tuner.join("good.json");
        std::fs::write(&good, b"{\"a\": 1}").unwrap();
        let bad = tuner.join("settings.json");
        std::fs::write(&bad, b"{\"active\": tr").unwrap();

        assert_eq!(
            load_json::<serde_json::Value>(&good).unwrap()["a"],
            1,
            "a good file loads"
        );
        assert!(load_json::<serde_json::Value>(&bad).is_none());
        assert!(!bad.exists(), "moved aside");
        assert!(load_json::<serde_json::Value>(&tuner.join("missing.json")).is_none());

        let found = recovered(dir.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].service, "tuner");
        assert_eq!(found[0].file, "settings.json");
        let kept = std::fs::read(tuner.join(&found[0].aside)).unwrap();
        assert_eq!(
            kept, b"{\"active\": tr",
            "the bad bytes are kept for a person"
        );
    }
}
