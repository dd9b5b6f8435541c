//! Persistence: what the agent hands its one writer task, how the writer puts it on disk, and
//! the conversions between the live session (jobs, taken shares) and the saved state.
//!
//! The agent never writes files itself. It publishes a [`Snapshot`] (state file bytes plus the
//! share queue's bytes, numbered by a generation) on a `watch` channel; the writer coalesces
//! snapshots that arrive while it is writing (so a burst of changes costs one write), writes the
//! queue file (only when its bytes changed) and then the state file, both atomically, and reports
//! the generation it finished on a second `watch`. The agent answers `Queued` to hw-agent only once
//! that generation covers the share (see [`crate::sharequeue`]).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::jobs::{JobSlot, ShareKey};
use crate::state::SavedJob;
use crate::v1::codec::Notify;

/// One pass for the writer.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Increases with every snapshot; the writer reports the last one it finished.
    pub generation: u64,
    /// The share queue file's bytes.
    pub queue: Vec<u8>,
    /// The state file's bytes (empty: nothing to write yet).
    pub state: Vec<u8>,
}

/// The agent's ends of the writer's channels.
#[derive(Debug)]
pub struct Persistence {
    /// Snapshots to write.
    pub tx: watch::Sender<Arc<Snapshot>>,
    /// The generation last written (or attempted: a failed write is logged, not retried forever).
    pub durable: watch::Receiver<u64>,
}

/// Where the writer puts things.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The state file.
    pub state: PathBuf,
    /// The share queue file.
    pub queue: PathBuf,
}

/// The channels between an agent and its writer: the agent's ends, and the writer's.
pub fn channels() -> (
    Persistence,
    watch::Receiver<Arc<Snapshot>>,
    watch::Sender<u64>,
) {
    let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    let (durable_tx, durable) = watch::channel(0);
    (Persistence { tx, durable }, rx, durable_tx)
}

/// Write one snapshot: the queue first (so after a crash it is never older than the state's
/// "taken" marks), skipped when its bytes equal `last_queue`; then the state.
pub fn write(paths: &Paths, snapshot: &Snapshot, last_queue: &mut Option<Vec<u8>>) {
    if last_queue.as_deref() != Some(snapshot.queue.as_slice()) {
        match crate::sharequeue::save(&paths.queue, &snapshot.queue) {
            Ok(()) => *last_queue = Some(snapshot.queue.clone()),
            Err(e) => tracing::warn!(error = %e, "share queue write failed"),
        }
    }
    if !snapshot.state.is_empty()
        && let Err(e) = crate::state::save(&paths.state, &snapshot.state)
    {
        tracing::warn!(error = %e, "state write failed");
    }
}

/// The one writer task: runs until the agent drops its sender; returns the queue bytes last
/// written so the final write can skip an unchanged queue.
pub async fn writer(
    paths: Paths,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    durable: watch::Sender<u64>,
) -> Option<Vec<u8>> {
    let mut last_queue: Option<Vec<u8>> = None;
    while snapshots.changed().await.is_ok() {
        let snapshot = snapshots.borrow_and_update().clone();
        if snapshot.state.is_empty() {
            continue;
        }
        let paths = paths.clone();
        let mut last = last_queue.take();
        let generation = snapshot.generation;
        // Off the runtime thread: fsync may take a while on flash.
        match tokio::task::spawn_blocking(move || {
            write(&paths, &snapshot, &mut last);
            last
        })
        .await
        {
            Ok(last) => last_queue = last,
            Err(e) => tracing::warn!(error = %e, "state writer panicked"),
        }
        durable.send_replace(generation);
    }
    last_queue
}

/// A taken share as saved: `en2hex:ntime:nonce:version`.
pub fn share_key_string(k: &ShareKey) -> String {
    format!("{}:{}:{}:{}", hex::encode(&k.0), k.1, k.2, k.3)
}

/// The inverse of [`share_key_string`]; `None` for a malformed entry.
pub fn parse_share_key(s: &str) -> Option<ShareKey> {
    let mut p = s.split(':');
    let en2 = hex::decode(p.next()?).ok()?;
    Some((
        en2,
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
    ))
}

/// A live job as saved.
pub fn job_to_saved(j: &JobSlot) -> SavedJob {
    let t = &j.template;
    SavedJob {
        job_id: t.job_id.clone(),
        prev_hash: hex::encode(&t.prev_hash),
        coinb1: hex::encode(&t.coinb1),
        coinb2: hex::encode(&t.coinb2),
        merkle_branch: t.merkle_branch.iter().map(hex::encode).collect(),
        version: t.version,
        nbits: t.nbits,
        ntime: t.ntime,
        difficulty: t.share_difficulty,
        submitted: j.submitted.iter().map(share_key_string).collect(),
    }
}

/// A saved job back as the notify it came from; `None` when a field is damaged.
pub fn saved_to_notify(j: &SavedJob) -> Option<Notify> {
    let h32 = |s: &str| -> Option<[u8; 32]> { hex::decode(s).ok()?.try_into().ok() };
    Some(Notify {
        job_id: j.job_id.clone(),
        prev_hash: h32(&j.prev_hash)?,
        coinb1: hex::decode(&j.coinb1).ok()?,
        coinb2: hex::decode(&j.coinb2).ok()?,
        merkle_branch: j
            .merkle_branch
            .iter()
            .map(|h| h32(h))
            .collect::<Option<Vec<_>>>()?,
        version: j.version,
        nbits: j.nbits,
        ntime: j.ntime,
        clean_jobs: false,
    })
}
