//! Finished diagnostic runs on disk: one JSON file per run, written atomically, the newest
//! [`KEEP`] kept. File names start with the start time so a directory listing is the history.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{RunKind, RunState};

/// Reports kept (all kinds together).
pub const KEEP: usize = 30;

/// One finished run as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredReport {
    /// Kind name.
    pub kind: String,
    /// `<kind>-<started ms>`.
    pub run_id: String,
    /// Final state.
    #[serde(with = "state_name")]
    pub state: RunState,
    /// Start, unix ms.
    pub started_unix_ms: i64,
    /// End, unix ms.
    pub finished_unix_ms: i64,
    /// Window asked for, s.
    pub duration_s: u32,
    /// Progress reached (100 when completed).
    pub progress_percent: f64,
    /// Why it failed.
    pub error: String,
    /// pass / warn / fail, or empty when there is no full report.
    pub verdict: String,
    /// The report document.
    pub report: Value,
    /// The report rendered as Markdown.
    #[serde(default)]
    pub markdown: String,
}

mod state_name {
    use super::RunState;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &RunState, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RunState, D::Error> {
        let s = String::deserialize(d)?;
        RunState::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("run state {s}")))
    }
}

/// The report directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Reports under `dir` (created on the first save).
    pub fn new(dir: PathBuf) -> Self {
        Store { dir }
    }

    /// Where the reports are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write one report and drop the oldest beyond [`KEEP`].
    pub fn save(&self, r: &StoredReport) -> std::io::Result<()> {
        svcos_common::fsutil::ensure_dir(&self.dir, 0o750)?;
        let name = format!("{:013}-{}.json", r.started_unix_ms.max(0), r.kind);
        let data = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
        svcos_common::fsutil::atomic_write(&self.dir.join(name), &data, 0o640)?;
        let files = self.files();
        if files.len() > KEEP {
            for old in &files[..files.len() - KEEP] {
                let _ = std::fs::remove_file(old);
            }
        }
        Ok(())
    }

    /// Report files, oldest first.
    fn files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        v.sort();
        v
    }

    /// Every readable report, newest first (a damaged one is moved aside with one warning,
    /// [`svcos_common::statefile`], so it is not warned about on every listing).
    pub fn list(&self) -> Vec<StoredReport> {
        self.files()
            .into_iter()
            .rev()
            .filter_map(|p| {
                svcos_common::statefile::load_or_quarantine(&p, svcos_common::statefile::json)
                    .good()
            })
            .collect()
    }

    /// The newest report of a kind.
    pub fn latest(&self, kind: RunKind) -> Option<StoredReport> {
        self.list().into_iter().find(|r| r.kind == kind.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kind: RunKind, t: i64) -> StoredReport {
        StoredReport {
            kind: kind.as_str().into(),
            run_id: format!("{}-{t}", kind.as_str()),
            state: RunState::Completed,
            started_unix_ms: t,
            finished_unix_ms: t + 1,
            duration_s: 1,
            progress_percent: 100.0,
            error: String::new(),
            verdict: "pass".into(),
            report: serde_json::json!({"t": t}),
            markdown: String::new(),
        }
    }

    #[test]
    fn keeps_the_newest_and_finds_the_latest_per_kind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("diag"));
        assert!(store.latest(RunKind::ChipHealth).is_none());
        for t in 0..(KEEP as i64 + 5) {
            store.save(&report(RunKind::HashReport, 1000 + t)).unwrap();
        }
        store.save(&report(RunKind::ChipHealth, 5000)).unwrap();
        let all = store.list();
        assert_eq!(all.len(), KEEP);
        assert_eq!(all[0].kind, "chip-health");
        assert_eq!(
            store.latest(RunKind::HashReport).unwrap().started_unix_ms,
            1000 + KEEP as i64 + 4
        );
        assert!(store.latest(RunKind::BoardHealth).is_none());
    }

    #[test]
    fn a_damaged_report_is_moved_aside_and_the_others_listed() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::new(dir.path().join("diag"));
            store.save(&report(RunKind::HashReport, 1000)).unwrap();
            store.save(&report(RunKind::ChipHealth, 2000)).unwrap();
            let victim = store.files()[0].clone();
            let bad = damage.write(&victim);
            let listed = store.list();
            assert_eq!(listed.len(), 1, "{damage:?}");
            assert_quarantined(&victim, &bad, &format!("{damage:?}"));
            assert_eq!(store.list().len(), 1, "the aside is not listed");
        }
    }
}
