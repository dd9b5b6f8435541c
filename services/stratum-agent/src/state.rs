//! What stratum-agent persists under its state directory so a restart is not a reset: counters
//! per pool and in total, switch history, donation time, and the current session (extranonce,
//! jobs and the shares already taken) so that shares hw-agent found while we were down can still
//! be submitted once, and never twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// State file name inside the service state directory.
pub const STATE_FILE: &str = "state.json";

/// Share counters of one pool (keyed by url and user, so reordering pools keeps them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolCounters {
    /// Accepted shares.
    pub accepted: u64,
    /// Rejected shares.
    pub rejected: u64,
    /// Shares dropped as stale before or after sending.
    pub stale: u64,
    /// Shares dropped locally (below target, queue lost).
    pub discarded: u64,
    /// Sum of difficulty of accepted shares.
    pub accepted_difficulty: f64,
    /// Sum of difficulty of rejected shares.
    pub rejected_difficulty: f64,
    /// Best share difficulty.
    pub best_share: f64,
    /// Connection attempts that failed.
    pub get_failures: u64,
    /// Connections the pool dropped or that went silent.
    pub remote_failures: u64,
    /// Unix ms of the last answered share.
    pub last_share_time_ms: i64,
    /// Latency of the last answered share.
    pub last_share_latency_ms: f64,
    /// Reject reasons as the pool worded them.
    pub reject_reasons: BTreeMap<String, u64>,
    /// Shares whose hash met the block target.
    pub found_blocks: u64,
}

impl PoolCounters {
    /// Add `other`'s counts to these (a pool whose worker or password was edited keeps what it
    /// counted under its old key).
    pub fn absorb(&mut self, other: PoolCounters) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.stale += other.stale;
        self.discarded += other.discarded;
        self.accepted_difficulty += other.accepted_difficulty;
        self.rejected_difficulty += other.rejected_difficulty;
        self.best_share = self.best_share.max(other.best_share);
        self.get_failures += other.get_failures;
        self.remote_failures += other.remote_failures;
        if other.last_share_time_ms > self.last_share_time_ms {
            self.last_share_time_ms = other.last_share_time_ms;
            self.last_share_latency_ms = other.last_share_latency_ms;
        }
        for (reason, n) in other.reject_reasons {
            *self.reject_reasons.entry(reason).or_default() += n;
        }
        self.found_blocks += other.found_blocks;
    }
}

/// A job as saved (hex fields keep the file readable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedJob {
    /// Pool job id.
    pub job_id: String,
    /// Header-order previous hash, hex.
    pub prev_hash: String,
    /// Hex.
    pub coinb1: String,
    /// Hex.
    pub coinb2: String,
    /// Hex hashes.
    pub merkle_branch: Vec<String>,
    /// Version.
    pub version: u32,
    /// nbits.
    pub nbits: u32,
    /// ntime.
    pub ntime: u32,
    /// Share difficulty the job was handed out with.
    pub difficulty: f64,
    /// Shares already taken: `en2hex:ntime:nonce:version`.
    pub submitted: Vec<String>,
}

/// The session being mined when the state was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedEpoch {
    /// Epoch number.
    pub id: u64,
    /// Key (url|user) of the pool.
    pub pool_key: String,
    /// Subscription id to resume.
    pub session_id: Option<String>,
    /// Hex.
    pub extranonce1: String,
    /// Bytes.
    pub extranonce2_size: usize,
    /// Mask in force.
    pub version_mask: u32,
    /// Difficulty in force.
    pub difficulty: f64,
    /// Jobs, oldest first.
    pub jobs: Vec<SavedJob>,
}

/// A recorded pool switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedSwitch {
    /// Unix ms.
    pub timestamp_ms: i64,
    /// Index before (-1: none).
    pub from_index: i32,
    /// Index after (-1: none).
    pub to_index: i32,
    /// Why.
    pub reason: String,
}

/// The whole state file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SavedState {
    /// Unix ms when counting began (first start).
    pub counters_since_ms: i64,
    /// Next epoch number: epochs never repeat across restarts.
    pub next_epoch: u64,
    /// Totals over every pool.
    pub totals: PoolCounters,
    /// Per pool, keyed by `url|user`.
    pub pools: BTreeMap<String, PoolCounters>,
    /// Last switches, oldest first.
    pub switches: Vec<SavedSwitch>,
    /// Donation time mined in all cycles.
    pub donation_mined_total_ms: i64,
    /// Unix ms when the current donation cycle began (0: none).
    pub donation_cycle_start_ms: i64,
    /// Donation time mined in the current cycle.
    pub donation_mined_cycle_ms: i64,
    /// The current session, if any.
    pub epoch: Option<SavedEpoch>,
}

/// Why state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// I/O.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// Load the state file; a missing or unreadable file starts fresh (logged), because refusing to
/// mine over a corrupt counter file would be worse than restarting the counters.
pub fn load(path: &Path) -> SavedState {
    // A damaged file is moved aside and logged (svcos_common::statefile), never fatal.
    svcos_common::statefile::load_json(path).unwrap_or_default()
}

/// Write the state file atomically (mode 0600).
pub fn save(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    svcos_common::fsutil::atomic_write(path, bytes, 0o600).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_file_restarts_the_counters_and_is_moved_aside() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.json");
            let state = SavedState {
                counters_since_ms: 5,
                next_epoch: 9,
                ..SavedState::default()
            };
            save(&path, &serde_json::to_vec(&state).unwrap()).unwrap();
            assert_eq!(load(&path), state);
            let bad = damage.write(&path);
            assert_eq!(load(&path), SavedState::default(), "{damage:?}");
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }
}
