//! Loading a service's state files so that a damaged one never stops the service.
//!
//! Writes are atomic ([`crate::fsutil::atomic_write`]), but a file can still be damaged (a full
//! disk when it was first made, a person editing it, flash wear). [`load_or_quarantine`] is the
//! one rule every state file is read by:
//!
//! | What is on disk | Result | The file |
//! |---|---|---|
//! | nothing | [`Loaded::Missing`] | - |
//! | bytes the parser accepts | [`Loaded::Good`] | kept |
//! | empty, truncated, not UTF-8, garbage, another schema | [`Loaded::Damaged`] | moved aside |
//! | a file that cannot be read (EIO, EACCES) | [`Loaded::Damaged`] | left in place |
//!
//! Moved aside means renamed to `<name>.corrupt-<unix ms>` beside it, with one warning: the
//! service runs from its documented safe state, nothing is silently overwritten (the bad bytes
//! stay for a person to look at), and [`recovered`] lets the API report what was moved aside.
//! An empty file is always damaged: every writer writes at least one JSON value or hash line,
//! so zero bytes can only be a write that never finished.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The infix of a moved-aside file's name.
pub const CORRUPT_INFIX: &str = ".corrupt-";

/// What [`load_or_quarantine`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded<T> {
    /// No file: first start.
    Missing,
    /// The file parsed.
    Good(T),
    /// The file exists but is not usable; it has been moved aside when `aside` is set.
    Damaged {
        /// Where the bad bytes went (`None` when the file could not be read or renamed).
        aside: Option<PathBuf>,
        /// What was wrong, for the log and the API.
        why: String,
    },
}

impl<T> Loaded<T> {
    /// The value when the file was good.
    pub fn good(self) -> Option<T> {
        match self {
            Loaded::Good(v) => Some(v),
            _ => None,
        }
    }
}

/// Read a state file with `parse`; a file that does not parse is moved aside (see the module
/// table). `parse` sees the raw bytes, so a text format decides itself what non-UTF-8 means.
pub fn load_or_quarantine<T>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Loaded<T> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => {
            // Not moved: an unreadable file may be fine once the disk or the mode is.
            tracing::warn!(path = %path.display(), error = %e, "cannot read a state file; starting from its safe state");
            return Loaded::Damaged {
                aside: None,
                why: format!("cannot read: {e}"),
            };
        }
    };
    let parsed = if bytes.is_empty() {
        Err("empty file".to_string())
    } else {
        parse(&bytes)
    };
    match parsed {
        Ok(v) => Loaded::Good(v),
        Err(why) => Loaded::Damaged {
            aside: move_aside(path, &why),
            why,
        },
    }
}

/// Read a JSON state file: `None` when it does not exist, cannot be read, or was damaged (then
/// it has been moved aside and logged).
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    load_or_quarantine(path, json).good()
}

/// The JSON parser [`load_json`] uses, for callers of [`load_or_quarantine`] that need the
/// [`Loaded`] detail.
pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// The moved-aside copies of `path` (`<name>.corrupt-<ms>` beside it), oldest first.
pub fn asides(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}{CORRUPT_INFIX}", name.to_string_lossy());
    let mut found: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let ms = file.strip_prefix(&prefix)?.parse::<i64>().ok()?;
            Some((ms, e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// Move a damaged state file aside (logged); returns where it went.
pub fn move_aside(path: &Path, why: &str) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let mut ms = crate::time::unix_ms();
    let mut aside = path.with_file_name(format!("{name}{CORRUPT_INFIX}{ms}"));
    // Two damaged copies in one millisecond must not overwrite each other's bytes.
    while aside.exists() {
        ms += 1;
        aside = path.with_file_name(format!("{name}{CORRUPT_INFIX}{ms}"));
    }
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::warn!(
                event = "state_file_corrupt",
                path = %path.display(),
                aside = %aside.display(),
                why,
                "state file damaged: moved aside, starting from defaults"
            );
            Some(aside)
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), why, error = %e, "state file damaged and could not be moved aside; starting from defaults");
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

/// The ways a state file gets damaged, for the test tables of every loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// A write cut short: the first half of a good file.
    Truncated,
    /// One byte that is not UTF-8 inside a good file.
    NonUtf8,
    /// Bytes that are not the format at all.
    Garbage,
    /// Well-formed JSON of another shape.
    WrongSchema,
    /// Zero bytes.
    Empty,
}

impl Damage {
    /// Every kind, for table tests.
    pub const ALL: [Damage; 5] = [
        Damage::Truncated,
        Damage::NonUtf8,
        Damage::Garbage,
        Damage::WrongSchema,
        Damage::Empty,
    ];

    /// The damaged bytes made from a good file's bytes.
    pub fn apply(self, good: &[u8]) -> Vec<u8> {
        match self {
            Damage::Truncated => good[..good.len() / 2].to_vec(),
            Damage::NonUtf8 => {
                let mut b = good.to_vec();
                // Inside the content, not at an edge a trim would drop.
                b.insert(good.len() / 2, 0xff);
                b
            }
            Damage::Garbage => b"\x00\x01not a state file at all {{{".to_vec(),
            Damage::WrongSchema => br#"[{"unexpected": ["shape"]}, 7]"#.to_vec(),
            Damage::Empty => Vec::new(),
        }
    }

    /// Overwrite `path` (which holds a good file) with its damaged form; returns the bytes.
    pub fn write(self, path: &Path) -> Vec<u8> {
        let good = std::fs::read(path).expect("a good file to damage");
        let bad = self.apply(&good);
        std::fs::write(path, &bad).expect("write the damaged file");
        bad
    }
}

/// Test assertion: `path` is gone and exactly one moved-aside copy holds `bad`.
pub fn assert_quarantined(path: &Path, bad: &[u8], context: &str) {
    assert!(
        !path.exists(),
        "{context}: {} was not moved aside",
        path.display()
    );
    let found = asides(path);
    assert_eq!(found.len(), 1, "{context}: asides {found:?}");
    let kept = std::fs::read(&found[0]).unwrap();
    // Not assert_eq: a damaged database would print megabytes.
    assert!(
        kept == bad,
        "{context}: the bad bytes are kept for a person ({} bytes kept, {} written)",
        kept.len(),
        bad.len()
    );
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

    #[test]
    fn every_damage_is_moved_aside_once_and_a_good_file_is_kept() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
        struct Doc {
            name: String,
            count: u32,
        }
        let good = Doc {
            name: "chain".into(),
            count: 3,
        };
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("doc.json");
            std::fs::write(&path, serde_json::to_vec(&good).unwrap()).unwrap();
            assert_eq!(load_json::<Doc>(&path), Some(good.clone()));
            let bad = damage.write(&path);
            match load_or_quarantine(&path, json::<Doc>) {
                Loaded::Damaged { aside: Some(_), .. } => {}
                other => panic!("{damage:?}: {other:?}"),
            }
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
            // The next start finds no file: a first start, not a loop.
            assert_eq!(load_or_quarantine(&path, json::<Doc>), Loaded::Missing);
        }
    }

    #[test]
    fn asides_in_one_millisecond_do_not_overwrite_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        for i in 0..3 {
            std::fs::write(&path, format!("bad {i}")).unwrap();
            assert!(load_json::<u32>(&path).is_none());
        }
        let found = asides(&path);
        assert_eq!(found.len(), 3, "{found:?}");
        let mut kept: Vec<String> = found
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        kept.sort();
        assert_eq!(kept, ["bad 0", "bad 1", "bad 2"]);
    }

    #[test]
    fn an_unreadable_file_is_damaged_but_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where a file should be: read fails with something other than NotFound.
        let path = dir.path().join("state.json");
        std::fs::create_dir(&path).unwrap();
        match load_or_quarantine(&path, json::<u32>) {
            Loaded::Damaged { aside: None, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(path.exists());
    }
}
