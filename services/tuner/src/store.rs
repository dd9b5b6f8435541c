//! What the tuner keeps on disk, under its state directory, every file written atomically:
//!
//! - `settings.json`: active, mode, targets, the applied fixed profile, the time-of-use schedule.
//! - `boards/<serial>.json`: the tuned points of one board (one per mode and target), so a
//!   restart or a tuner crash resumes without a search, and a board moved to another controller
//!   keeps its silicon data when the file is imported.
//! - `saved.json`: profiles saved under a name by the operator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use svcos_common::bounds::{FREQUENCY_MHZ, VOLTAGE_MV};

use serde::{Deserialize, Serialize};
use svcos_common::fsutil;
use svcos_common::timewin::{DAY_MIN, DailyWindow, Timestamp, Zone, hhmm};

use crate::model::{Mode, Profile};

/// Schema tag of a board file.
pub const BOARD_SCHEMA: &str = "svcos.tuner.board.v1";
/// Schema tag of the export document.
pub const EXPORT_SCHEMA: &str = "svcos.tuner.export.v1";

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file or document is not the expected JSON.
    #[error("{what}: {message}")]
    Format {
        /// Which document.
        what: String,
        /// The parser's message.
        message: String,
    },
}

/// One time-of-use window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TouWindow {
    /// Local wall-clock minutes after midnight in `[system].timezone` (UTC before that key).
    pub start_minute: u32,
    /// Local wall-clock minutes, up to 1440; below `start_minute` for a window over midnight.
    pub end_minute: u32,
    /// Power target inside the window, W.
    pub power_target_watt: f64,
    /// Operator's label.
    #[serde(default)]
    pub label: String,
}

impl TouWindow {
    /// The daily window (rules in `svcos_common::timewin`); `None` when out of range.
    pub fn window(&self) -> Option<DailyWindow> {
        DailyWindow::new(self.start_minute, self.end_minute)
    }

    /// "HH:MM-HH:MM" (and the label).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}-{}",
            hhmm(self.start_minute),
            hhmm(self.end_minute % DAY_MIN)
        );
        if !self.label.is_empty() {
            s.push(' ');
            s.push_str(&self.label);
        }
        s
    }
}

/// The time-of-use schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TouSchedule {
    /// Whether the schedule applies.
    pub enabled: bool,
    /// Windows (the first that contains the minute wins).
    pub windows: Vec<TouWindow>,
}

impl TouSchedule {
    /// The window in force at a Unix time in `zone`, if any.
    pub fn active(&self, zone: &Zone, now_ms: i64) -> Option<&TouWindow> {
        let at = Timestamp::from_millisecond(now_ms).ok()?;
        if !self.enabled {
            return None;
        }
        self.windows
            .iter()
            .find(|w| w.window().is_some_and(|d| d.contains(&zone.tz, at)))
    }

    /// When the window in force next starts or ends, if within the next days.
    pub fn next_change(&self, zone: &Zone, now_ms: i64) -> Option<Timestamp> {
        let at = Timestamp::from_millisecond(now_ms).ok()?;
        if !self.enabled {
            return None;
        }
        self.windows
            .iter()
            .filter_map(|w| w.window()?.next_transition(&zone.tz, at))
            .min()
    }

    /// Check windows: bounds, non-overlap, targets.
    pub fn validate(&self, max_power_watt: f64) -> Result<(), String> {
        if self.windows.len() > 48 {
            return Err("at most 48 windows".into());
        }
        for (i, w) in self.windows.iter().enumerate() {
            let Some(win) = w.window() else {
                return Err(format!("windows[{i}]: minutes are 0-1440"));
            };
            if win.is_empty() {
                return Err(format!("windows[{i}]: empty window"));
            }
            if !(w.power_target_watt.is_finite() && w.power_target_watt > 0.0)
                || w.power_target_watt > max_power_watt
            {
                return Err(format!(
                    "windows[{i}].power_target_watt: 0 < W <= {max_power_watt}"
                ));
            }
            for m in 0..DAY_MIN {
                let earlier = |o: &TouWindow| o.window().is_some_and(|o| o.contains_minute(m));
                if win.contains_minute(m) && self.windows[..i].iter().any(earlier) {
                    return Err(format!("windows[{i}] overlaps an earlier window"));
                }
            }
        }
        Ok(())
    }
}

/// The operator's choices (`settings.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Tuning on or off.
    pub active: bool,
    /// Mode.
    pub mode: Mode,
    /// Power target, W: the operator's `[hardware].power_target_watt` whenever that changes,
    /// moved by the autotuner's own target routes in between.
    pub power_target_watt: f64,
    /// The last `[hardware].power_target_watt` taken over (0 = none), so a restart takes over
    /// only a config change made meanwhile and keeps a target set through the autotuner since.
    #[serde(default)]
    pub operator_target_watt: f64,
    /// Hashrate target, TH/s.
    pub hashrate_target_ths: f64,
    /// Fixed mode: the profile applied (a saved name or a tuned id).
    #[serde(default)]
    pub fixed_profile: String,
    /// Time-of-use schedule.
    #[serde(default)]
    pub tou: TouSchedule,
    /// Hashboards the tuner switched off (and so the only ones it switches back on): kept
    /// across restarts so turning the tuner off always gives every board back.
    #[serde(default)]
    pub boards_off: Vec<u32>,
}

/// The tuned points of one board (`boards/<serial>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoardFile {
    /// [`BOARD_SCHEMA`].
    pub schema: String,
    /// Serial.
    pub board_serial: String,
    /// Last write, Unix ms.
    pub updated_at_ms: i64,
    /// One per mode and target.
    pub profiles: Vec<Profile>,
}

/// The export document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportDoc {
    /// [`EXPORT_SCHEMA`].
    pub schema: String,
    /// When, Unix ms.
    pub exported_at_ms: i64,
    /// Board files.
    pub boards: Vec<BoardFile>,
    /// Named profiles.
    #[serde(default)]
    pub saved: Vec<Profile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
struct SavedFile {
    profiles: Vec<Profile>,
}

/// The tuner's files.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// Board files by serial.
    pub boards: BTreeMap<String, BoardFile>,
    /// Named profiles by name.
    pub saved: BTreeMap<String, Profile>,
}

/// A serial as a file name: safe characters kept, anything else hex-escaped.
pub fn serial_file_name(serial: &str) -> String {
    let mut out = String::new();
    for b in serial.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    format!("{out}.json")
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, StoreError> {
    // Never fatal (svcos_common::statefile): the tuner starts from defaults, a damaged file is
    // moved aside and the API reports it.
    Ok(svcos_common::statefile::load_json(path))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(value).expect("tuner files serialise");
    fsutil::atomic_write(path, &bytes, 0o640).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl Store {
    /// Open (and create) the store under `dir`, loading what is there. A corrupt board file is
    /// skipped with a warning rather than stopping the tuner: it only costs a re-tune.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let io = |source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        };
        fsutil::ensure_dir(dir, 0o750).map_err(io)?;
        fsutil::ensure_dir(&dir.join("boards"), 0o750).map_err(io)?;
        let mut store = Store {
            dir: dir.to_path_buf(),
            boards: BTreeMap::new(),
            saved: BTreeMap::new(),
        };
        store.reload()?;
        Ok(store)
    }

    /// Re-read board files and saved profiles from disk.
    pub fn reload(&mut self) -> Result<usize, StoreError> {
        self.boards.clear();
        let boards_dir = self.dir.join("boards");
        let entries = std::fs::read_dir(&boards_dir).map_err(|source| StoreError::Io {
            path: boards_dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_json::<BoardFile>(&path) {
                Ok(Some(b)) if b.schema == BOARD_SCHEMA => {
                    self.boards.insert(b.board_serial.clone(), b);
                }
                Ok(_) => tracing::warn!(path = %path.display(), "not a tuner board file; skipped"),
                Err(e) => tracing::warn!(error = %e, "board file skipped"),
            }
        }
        self.saved = read_json::<SavedFile>(&self.dir.join("saved.json"))?
            .unwrap_or_default()
            .profiles
            .into_iter()
            .map(|p| (p.id.clone(), p))
            .collect();
        Ok(self.boards.len())
    }

    /// The settings, if saved before.
    pub fn load_settings(&self) -> Result<Option<Settings>, StoreError> {
        read_json(&self.dir.join("settings.json"))
    }

    /// Save the settings.
    pub fn save_settings(&self, s: &Settings) -> Result<(), StoreError> {
        write_json(&self.dir.join("settings.json"), s)
    }

    /// A tuned point of a board.
    pub fn tuned(&self, serial: &str, id: &str) -> Option<&Profile> {
        self.boards
            .get(serial)
            .and_then(|b| b.profiles.iter().find(|p| p.id == id))
    }

    /// The tuned point of a board for `mode` whose target is nearest `target` (power and
    /// hashrate modes), so a new target (a solar follower's, a thermostat's) starts from a
    /// point measured near it instead of from stock.
    pub fn nearest_tuned(&self, serial: &str, mode: Mode, target: f64) -> Option<&Profile> {
        if !matches!(mode, Mode::Power | Mode::Hashrate) {
            return None;
        }
        self.boards
            .get(serial)?
            .profiles
            .iter()
            .filter(|p| p.mode == mode && p.target > 0.0)
            .min_by(|a, b| {
                (a.target - target)
                    .abs()
                    .total_cmp(&(b.target - target).abs())
            })
    }

    /// Record a tuned point (replacing the one with the same id) and write the board file.
    pub fn put_tuned(&mut self, profile: Profile, now_ms: i64) -> Result<(), StoreError> {
        let serial = profile.board_serial.clone();
        let file = self
            .boards
            .entry(serial.clone())
            .or_insert_with(|| BoardFile {
                schema: BOARD_SCHEMA.into(),
                board_serial: serial.clone(),
                updated_at_ms: now_ms,
                profiles: Vec::new(),
            });
        file.profiles.retain(|p| p.id != profile.id);
        file.profiles.push(profile);
        file.profiles.sort_by(|a, b| a.id.cmp(&b.id));
        file.updated_at_ms = now_ms;
        let file = file.clone();
        self.write_board(&file)
    }

    /// Forget one tuned point of a board (the rest of its file stays).
    pub fn drop_tuned(&mut self, serial: &str, id: &str, now_ms: i64) -> Result<(), StoreError> {
        let Some(file) = self.boards.get_mut(serial) else {
            return Ok(());
        };
        file.profiles.retain(|p| p.id != id);
        file.updated_at_ms = now_ms;
        let file = file.clone();
        self.write_board(&file)
    }

    fn write_board(&self, file: &BoardFile) -> Result<(), StoreError> {
        write_json(
            &self
                .dir
                .join("boards")
                .join(serial_file_name(&file.board_serial)),
            file,
        )
    }

    /// Forget a board's tuned data; false when there was none.
    pub fn delete_board(&mut self, serial: &str) -> Result<bool, StoreError> {
        if self.boards.remove(serial).is_none() {
            return Ok(false);
        }
        let path = self.dir.join("boards").join(serial_file_name(serial));
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Save a named profile.
    pub fn put_saved(&mut self, profile: Profile) -> Result<(), StoreError> {
        self.saved.insert(profile.id.clone(), profile);
        self.write_saved()
    }

    fn write_saved(&self) -> Result<(), StoreError> {
        write_json(
            &self.dir.join("saved.json"),
            &SavedFile {
                profiles: self.saved.values().cloned().collect(),
            },
        )
    }

    /// Everything as one document.
    pub fn export(&self, now_ms: i64) -> ExportDoc {
        ExportDoc {
            schema: EXPORT_SCHEMA.into(),
            exported_at_ms: now_ms,
            boards: self.boards.values().cloned().collect(),
            saved: self.saved.values().cloned().collect(),
        }
    }

    /// Merge a document (an export, or a single board file); returns (boards, profiles).
    pub fn import(&mut self, text: &str, now_ms: i64) -> Result<(u32, u32), StoreError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| StoreError::Format {
                what: "import document".into(),
                message: e.to_string(),
            })?;
        let format = |e: serde_json::Error| StoreError::Format {
            what: "import document".into(),
            message: e.to_string(),
        };
        let doc = match value.get("schema").and_then(|s| s.as_str()) {
            Some(EXPORT_SCHEMA) => serde_json::from_value::<ExportDoc>(value).map_err(format)?,
            Some(BOARD_SCHEMA) => ExportDoc {
                schema: EXPORT_SCHEMA.into(),
                exported_at_ms: now_ms,
                boards: vec![serde_json::from_value::<BoardFile>(value).map_err(format)?],
                saved: Vec::new(),
            },
            other => {
                return Err(StoreError::Format {
                    what: "import document".into(),
                    message: format!(
                        "schema must be {EXPORT_SCHEMA} or {BOARD_SCHEMA}, found {other:?}"
                    ),
                });
            }
        };
        let mut profiles = 0;
        for b in &doc.boards {
            if b.board_serial.is_empty() {
                return Err(StoreError::Format {
                    what: "import document".into(),
                    message: "a board has no board_serial".into(),
                });
            }
            for p in &b.profiles {
                check_profile(p)?;
            }
        }
        for p in &doc.saved {
            check_profile(p)?;
        }
        for b in &doc.boards {
            for p in &b.profiles {
                let mut p = p.clone();
                p.board_serial = b.board_serial.clone();
                self.put_tuned(p, now_ms)?;
                profiles += 1;
            }
        }
        for p in doc.saved {
            self.saved.insert(p.id.clone(), p);
            profiles += 1;
        }
        self.write_saved()?;
        Ok((doc.boards.len() as u32, profiles))
    }
}

fn check_profile(p: &Profile) -> Result<(), StoreError> {
    let bad = |m: String| {
        Err(StoreError::Format {
            what: format!("profile {}", p.id),
            message: m,
        })
    };
    if p.id.is_empty() {
        return bad("empty id".into());
    }
    if !VOLTAGE_MV.contains(p.point.voltage_mv) {
        return bad(format!("voltage_mv must be {}", VOLTAGE_MV.describe()));
    }
    for c in &p.point.chains {
        if !FREQUENCY_MHZ.contains(c.frequency_mhz)
            || c.chips
                .iter()
                .any(|t| !FREQUENCY_MHZ.contains(t.frequency_mhz))
        {
            return bad(format!(
                "chain {}: frequencies must be {}",
                c.chain_id,
                FREQUENCY_MHZ.describe()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Measured, Point};

    fn profile(id: &str, serial: &str) -> Profile {
        Profile {
            id: id.into(),
            mode: Mode::Power,
            target: 1000.0,
            point: Point::uniform(8600.0, 3, 600.0),
            measured: Measured::default(),
            tuned_at_ms: 1,
            board_serial: serial.into(),
        }
    }

    #[test]
    fn board_files_survive_a_reopen_and_import_merges() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.put_tuned(profile("power-1000", "SN/1"), 5).unwrap();
        let again = Store::open(dir.path()).unwrap();
        assert_eq!(again.tuned("SN/1", "power-1000").unwrap().target, 1000.0);
        assert!(dir.path().join("boards/SN%2f1.json").exists());

        let doc = serde_json::to_string(&again.export(9)).unwrap();
        let other = tempfile::tempdir().unwrap();
        let mut s2 = Store::open(other.path()).unwrap();
        assert_eq!(s2.import(&doc, 10).unwrap(), (1, 1));
        assert!(s2.tuned("SN/1", "power-1000").is_some());
        assert!(s2.import("{\"schema\":\"nope\"}", 1).is_err());
        let mut bad = profile("x", "SN");
        bad.point.voltage_mv = 0.0;
        let file = BoardFile {
            schema: BOARD_SCHEMA.into(),
            board_serial: "SN".into(),
            updated_at_ms: 0,
            profiles: vec![bad],
        };
        assert!(
            s2.import(&serde_json::to_string(&file).unwrap(), 1)
                .is_err()
        );
        assert!(s2.delete_board("SN/1").unwrap());
        assert!(!s2.delete_board("SN/1").unwrap());
    }

    #[test]
    fn tou_windows_match_minutes_and_reject_overlap() {
        let w = |s, e| TouWindow {
            start_minute: s,
            end_minute: e,
            power_target_watt: 900.0,
            label: String::new(),
        };
        let m = |t: TouWindow, minute| t.window().unwrap().contains_minute(minute);
        assert!(m(w(60, 120), 60) && !m(w(60, 120), 120));
        assert!(m(w(1380, 60), 1400) && m(w(1380, 60), 10));
        let sched = TouSchedule {
            enabled: true,
            windows: vec![w(60, 120), w(1380, 60)],
        };
        sched.validate(2000.0).unwrap();
        let utc = Zone::utc();
        // 01:30 UTC on some day.
        assert_eq!(
            sched
                .active(&utc, 86_400_000 * 3 + 90 * 60_000)
                .unwrap()
                .start_minute,
            60
        );
        assert!(sched.active(&utc, 86_400_000 * 3 + 200 * 60_000).is_none());
        // Local time with daylight saving: 06:00-09:00 in Toronto, the day after spring forward.
        let toronto = Zone::named("America/Toronto").unwrap();
        let morning = TouSchedule {
            enabled: true,
            windows: vec![w(360, 540)],
        };
        let ms = |s: &str| s.parse::<Timestamp>().unwrap().as_millisecond();
        // 10:30Z is 06:30 EDT (it would be 05:30 at the winter offset).
        assert!(
            morning
                .active(&toronto, ms("2026-03-09T10:30:00Z"))
                .is_some()
        );
        assert!(
            morning
                .active(&toronto, ms("2026-03-09T09:30:00Z"))
                .is_none()
        );
        let next = morning
            .next_change(&toronto, ms("2026-03-09T10:30:00Z"))
            .unwrap();
        assert_eq!(toronto.rfc3339(next), "2026-03-09T09:00:00-04:00");
        let overlap = TouSchedule {
            enabled: true,
            windows: vec![w(60, 120), w(100, 200)],
        };
        assert!(overlap.validate(2000.0).is_err());
        assert!(
            TouSchedule {
                enabled: true,
                windows: vec![w(10, 10)]
            }
            .validate(2000.0)
            .is_err()
        );
    }
}
