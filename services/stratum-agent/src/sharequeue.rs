//! The outgoing share queue and its file: shares taken from hw-agent while the epoch's pool
//! connection is down wait here, and the queue is on disk before hw-agent is told `Queued`.
//!
//! hw-agent forgets a share once SubmitShare answers, and the state file marks the share as taken
//! (so a resubmission is a duplicate). Without the queue on disk a SIGKILL between the answer and
//! the reconnect would lose every queued share for good. The agent therefore holds a `Queued`
//! answer until the writer reports the queue durable (group commit): shares that arrive while a
//! write is under way share the next write, so a burst costs one write per batch, not one per
//! share (flash wear), and a share hw-agent no longer holds is always on disk.
//!
//! The file is written before the state file in the same writer pass, so after a crash the queue
//! is never older than the "taken" marks. On reload ([`revalidate`]) a share is kept only if its
//! epoch was restored, its job is still known and it is younger than [`MAX_AGE_MS`]; every other
//! one is dropped with a logged reason and counted as discarded. A damaged file is moved aside
//! ([`svcos_common::statefile`]) and the agent starts with an empty queue.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::jobs::{Epoch, ShareKey};

/// Queue file name inside the service state directory.
pub const QUEUE_FILE: &str = "share-queue.json";
/// Shares kept while the epoch's connection is down; the oldest go first beyond this.
pub const MAX_QUEUE: usize = 1024;
/// A reloaded share older than this (10 min, about one block interval) is dropped: its job has
/// most likely been replaced by a new block, and a pool would only reject it.
pub const MAX_AGE_MS: i64 = 10 * 60 * 1000;
/// File format version.
const VERSION: u32 = 1;

/// One share waiting for its session's connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedShare {
    /// The pool epoch the share was mined in.
    pub epoch: u64,
    /// Pool job id.
    pub job_id: String,
    /// Extranonce2, hex in the file.
    #[serde(with = "hex_bytes")]
    pub extranonce2: Vec<u8>,
    /// ntime.
    pub ntime: u32,
    /// Nonce.
    pub nonce: u32,
    /// Block header version.
    pub version: u32,
    /// The share difficulty the job was handed out with (counted when accepted).
    pub difficulty: f64,
    /// Unix ms when the share was queued.
    pub queued_at_ms: i64,
}

impl QueuedShare {
    /// The dedupe key of the share within its job.
    pub fn key(&self) -> ShareKey {
        (
            self.extranonce2.clone(),
            self.ntime,
            self.nonce,
            self.version,
        )
    }
}

/// The file's document.
#[derive(Debug, Default, Serialize, Deserialize)]
struct QueueFile {
    version: u32,
    shares: Vec<QueuedShare>,
}

/// The in-memory queue, bounded, oldest first.
#[derive(Debug)]
pub struct ShareQueue {
    shares: VecDeque<QueuedShare>,
    capacity: usize,
}

impl ShareQueue {
    /// An empty queue holding at most `capacity` shares.
    pub fn new(capacity: usize) -> Self {
        ShareQueue {
            shares: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Append a share; returns the oldest one when it had to make room.
    pub fn push(&mut self, share: QueuedShare) -> Option<QueuedShare> {
        let evicted = (self.shares.len() >= self.capacity)
            .then(|| self.shares.pop_front())
            .flatten();
        self.shares.push_back(share);
        evicted
    }

    /// Shares waiting.
    pub fn len(&self) -> usize {
        self.shares.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// Take every share out, oldest first.
    pub fn take(&mut self) -> Vec<QueuedShare> {
        self.shares.drain(..).collect()
    }

    /// Drop every share; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.shares.len();
        self.shares.clear();
        n
    }

    /// The file's bytes for the current contents.
    pub fn encode(&self) -> Vec<u8> {
        let doc = QueueFile {
            version: VERSION,
            shares: self.shares.iter().cloned().collect(),
        };
        serde_json::to_vec(&doc).unwrap_or_default()
    }
}

/// Why a reloaded share was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The saved session was not restored (pool removed, state lost) or is another epoch.
    EpochGone,
    /// The epoch no longer knows the job.
    JobGone,
    /// Queued longer ago than [`MAX_AGE_MS`].
    TooOld,
}

impl DropReason {
    /// For the log.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::EpochGone => "its pool session was not restored",
            DropReason::JobGone => "its job is no longer known",
            DropReason::TooOld => "queued too long ago",
        }
    }
}

/// Split reloaded shares into those still worth sending for `epoch` (the restored session) and
/// those dropped, each with its reason.
pub fn revalidate(
    shares: Vec<QueuedShare>,
    epoch: Option<&Epoch>,
    now_ms: i64,
) -> (Vec<QueuedShare>, Vec<(QueuedShare, DropReason)>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for share in shares {
        let verdict = match epoch {
            _ if now_ms.saturating_sub(share.queued_at_ms) > MAX_AGE_MS => Err(DropReason::TooOld),
            Some(e) if e.id == share.epoch && e.has_job(&share.job_id) => Ok(()),
            Some(e) if e.id == share.epoch => Err(DropReason::JobGone),
            _ => Err(DropReason::EpochGone),
        };
        match verdict {
            Ok(()) => kept.push(share),
            Err(why) => dropped.push((share, why)),
        }
    }
    (kept, dropped)
}

/// Why the queue could not be written.
#[derive(Debug, thiserror::Error)]
#[error("share queue file {path}: {source}")]
pub struct QueueFileError {
    /// The file.
    pub path: PathBuf,
    /// Cause.
    pub source: std::io::Error,
}

/// Parse queue file bytes (as [`ShareQueue::encode`] writes them).
pub fn decode(bytes: &[u8]) -> Result<Vec<QueuedShare>, serde_json::Error> {
    serde_json::from_slice::<QueueFile>(bytes).map(|doc| doc.shares)
}

/// Read the queue file: empty when missing; a damaged file is moved aside (logged). More than
/// `capacity` shares (a file from a build with a larger bound) keeps the newest.
pub fn load(path: &Path, capacity: usize) -> Vec<QueuedShare> {
    let Some(doc) = svcos_common::statefile::load_json::<QueueFile>(path) else {
        return Vec::new();
    };
    let mut shares = doc.shares;
    let excess = shares.len().saturating_sub(capacity);
    if excess > 0 {
        tracing::warn!(
            dropped = excess,
            capacity,
            "share queue file holds more than the bound; the oldest shares are dropped"
        );
        shares.drain(..excess);
    }
    shares
}

/// Write the queue file atomically (mode 0600).
pub fn save(path: &Path, bytes: &[u8]) -> Result<(), QueueFileError> {
    svcos_common::fsutil::atomic_write(path, bytes, 0o600).map_err(|source| QueueFileError {
        path: path.to_path_buf(),
        source,
    })
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        hex::decode(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::codec::Notify;

    fn share(epoch: u64, job: &str, nonce: u32, at_ms: i64) -> QueuedShare {
        QueuedShare {
            epoch,
            job_id: job.into(),
            extranonce2: vec![0, 0, 0, nonce as u8],
            ntime: 0x6650_0000,
            nonce,
            version: 0x2000_0000,
            difficulty: 1.0,
            queued_at_ms: at_ms,
        }
    }

    fn epoch_with_job(id: u64, job: &str) -> Epoch {
        let mut e = Epoch {
            id,
            extranonce1: vec![1, 2, 3, 4],
            extranonce2_size: 4,
            version_mask: 0,
            difficulty: 1.0,
            jobs: Default::default(),
        };
        let n = Notify {
            job_id: job.into(),
            prev_hash: [7; 32],
            coinb1: vec![1],
            coinb2: vec![2],
            merkle_branch: vec![],
            version: 0x2000_0000,
            nbits: 0x1d00_ffff,
            ntime: 0x6650_0000,
            clean_jobs: true,
        };
        e.add_job(&n, 0, 0, false);
        e
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(QUEUE_FILE);
        let mut q = ShareQueue::new(8);
        q.push(share(3, "a", 1, 1000));
        q.push(share(3, "b", 2, 2000));
        save(&path, &q.encode()).unwrap();
        let back = load(&path, 8);
        assert_eq!(back, vec![share(3, "a", 1, 1000), share(3, "b", 2, 2000)]);
        // Hex on disk keeps the file readable.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"extranonce2\":\"00000001\""), "{text}");
        assert!(load(&dir.path().join("missing.json"), 8).is_empty());
    }

    #[test]
    fn a_damaged_file_is_moved_aside_and_the_queue_starts_empty() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(QUEUE_FILE);
            let mut q = ShareQueue::new(8);
            q.push(share(3, "a", 1, 1000));
            save(&path, &q.encode()).unwrap();
            let bad = damage.write(&path);
            assert!(load(&path, 8).is_empty(), "{damage:?}");
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }

    #[test]
    fn the_queue_is_bounded_in_memory_and_on_reload() {
        let mut q = ShareQueue::new(3);
        for n in 0..3 {
            assert_eq!(q.push(share(1, "a", n, 0)), None);
        }
        assert_eq!(q.push(share(1, "a", 3, 0)), Some(share(1, "a", 0, 0)));
        assert_eq!(q.len(), 3);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(QUEUE_FILE);
        let mut big = ShareQueue::new(10);
        for n in 0..10 {
            big.push(share(1, "a", n, 0));
        }
        save(&path, &big.encode()).unwrap();
        let back = load(&path, 4);
        assert_eq!(
            back.iter().map(|s| s.nonce).collect::<Vec<_>>(),
            vec![6, 7, 8, 9],
            "the newest are kept"
        );
        assert_eq!(q.take().len(), 3);
        assert!(q.is_empty());
    }

    #[test]
    fn reload_keeps_only_shares_of_the_restored_session() {
        let now = 50 * 60 * 1000;
        let epoch = epoch_with_job(7, "j1");
        let shares = vec![
            share(7, "j1", 1, now - 1000),
            share(7, "gone", 2, now - 1000),
            share(6, "j1", 3, now - 1000),
            share(7, "j1", 4, now - MAX_AGE_MS - 1),
        ];
        let (kept, dropped) = revalidate(shares.clone(), Some(&epoch), now);
        assert_eq!(kept, vec![shares[0].clone()]);
        let reasons: Vec<_> = dropped.iter().map(|(s, r)| (s.nonce, *r)).collect();
        assert_eq!(
            reasons,
            vec![
                (2, DropReason::JobGone),
                (3, DropReason::EpochGone),
                (4, DropReason::TooOld)
            ]
        );
        let (kept, dropped) = revalidate(shares, None, now);
        assert!(kept.is_empty());
        assert_eq!(dropped.len(), 4);
        assert!(
            dropped
                .iter()
                .all(|(_, r)| *r != DropReason::JobGone && !r.as_str().is_empty())
        );
    }
}
