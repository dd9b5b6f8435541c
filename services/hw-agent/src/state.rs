//! Re-attach state: what a restarted hw-agent needs to pick up running chains without a
//! bring-up.
//!
//! Kept under `Layout::service_runtime_dir(HwAgent)` (tmpfs on a miner, so it dies with a
//! reboot exactly when the chips lose their configuration too) and written with
//! `fsutil::atomic_write`, so a SIGKILL at any instant leaves the previous or the next copy,
//! never a torn one. Counters are refreshed every second; a restart loses at most that much
//! accounting. The job table ([`crate::jobtable`]) is refreshed soon after every job frame.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name inside the service runtime directory.
pub const FILE_NAME: &str = "reattach.json";
/// Format version; a file of another version is ignored (cold bring-up).
pub const FORMAT: u32 = 1;

/// Why the state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("re-attach state {path}: {source}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("re-attach state {path}: {source}")]
    Parse {
        /// The state file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
}

/// One chain as it was left running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainState {
    /// Chain index.
    pub chain_id: u32,
    /// UART device (the sim's PTY path changes when hw-sim restarts: then no re-attach).
    pub device: String,
    /// Current UART speed.
    pub baud: u32,
    /// Address interval used at assignment.
    pub address_interval: u32,
    /// Address of each detected chip, by chip index.
    pub chip_addresses: Vec<u8>,
    /// Chips the board should have had.
    pub chips_expected: u32,
    /// Frequency per chip, MHz.
    pub frequency_mhz: Vec<f64>,
    /// Ticket difficulty the chips were set to.
    pub ticket_difficulty: f64,
    /// Whether the operator disabled the chain.
    pub enabled: bool,
    /// Counters.
    pub nonces: u64,
    /// HW errors.
    pub hw_errors: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Stale nonces.
    pub stale: u64,
    /// Per chip verified nonces.
    pub chip_nonces: Vec<u64>,
    /// Per chip HW errors.
    pub chip_hw_errors: Vec<u64>,
    /// The job frames last written, oldest first (templates in [`ReattachState::jobs`]).
    #[serde(default)]
    pub frames: Vec<crate::jobtable::SavedFrame>,
}

/// The whole re-attach file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReattachState {
    /// [`FORMAT`].
    pub format: u32,
    /// Board model at bring-up (a config change to another board forces a bring-up).
    pub model: String,
    /// Unix ms mining started; mining uptime survives restarts.
    pub mining_started_unix_ms: i64,
    /// Shares handed to stratum-agent so far.
    pub shares_sent: u64,
    /// Per chain.
    pub chains: Vec<ChainState>,
    /// Templates the saved frames rolled.
    #[serde(default)]
    pub jobs: Vec<crate::jobtable::SavedJob>,
    /// Work generation when saved (generations continue across a restart).
    #[serde(default)]
    pub generation: u64,
    /// Pool epoch of the current work when saved.
    #[serde(default)]
    pub pool_epoch: Option<u64>,
}

impl ReattachState {
    /// The file path inside a runtime directory.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// Load; `None` when there is no file, it is of another format, or it is damaged (then it
    /// has been moved aside: [`svcos_common::statefile`]). `None` means a cold bring-up, the
    /// safe state: the chips are configured from scratch.
    pub fn load(path: &Path) -> Option<Self> {
        svcos_common::statefile::load_or_quarantine(path, svcos_common::statefile::json::<Self>)
            .good()
            .filter(|state| state.format == FORMAT)
    }

    /// Write atomically (mode 0600: it names devices and nothing secret, but nobody else needs it).
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(self).map_err(|source| StateError::Parse {
            path: path.into(),
            source,
        })?;
        svcos_common::fsutil::atomic_write(path, &bytes, 0o600).map_err(|source| StateError::Io {
            path: path.into(),
            source,
        })
    }

    /// Remove the file (after a deliberate power-down the chips must be brought up again).
    pub fn remove(path: &Path) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = ReattachState::path_in(dir.path());
        assert!(ReattachState::load(&path).is_none());
        let s = sample();
        s.save(&path).unwrap();
        assert_eq!(ReattachState::load(&path), Some(s.clone()));
        let mut old = s;
        old.format = FORMAT + 1;
        old.save(&path).unwrap();
        assert!(ReattachState::load(&path).is_none());
    }

    #[test]
    fn a_damaged_file_is_a_cold_bring_up_and_moved_aside() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = ReattachState::path_in(dir.path());
            sample().save(&path).unwrap();
            let bad = damage.write(&path);
            assert!(ReattachState::load(&path).is_none(), "{damage:?}");
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }

    fn sample() -> ReattachState {
        ReattachState {
            format: FORMAT,
            model: "Antminer S9".into(),
            mining_started_unix_ms: 1,
            shares_sent: 2,
            chains: vec![ChainState {
                chain_id: 0,
                device: "/dev/pts/3".into(),
                baud: 1_000_000,
                address_interval: 4,
                chip_addresses: vec![0, 4, 8],
                chips_expected: 3,
                frequency_mhz: vec![650.0; 3],
                ticket_difficulty: 0.25,
                enabled: true,
                nonces: 10,
                hw_errors: 1,
                duplicates: 0,
                stale: 0,
                chip_nonces: vec![3, 3, 4],
                chip_hw_errors: vec![0, 1, 0],
                frames: vec![crate::jobtable::SavedFrame {
                    job_id: 7,
                    job: 0,
                    counter: 12,
                    ntime: 1_700_000_000,
                }],
            }],
            jobs: Vec::new(),
            generation: 4,
            pool_epoch: Some(2),
        }
    }
}
