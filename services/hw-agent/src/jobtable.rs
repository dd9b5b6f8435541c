//! The job table of the re-attach file: the work each chain's chips were last given, so a
//! restarted hw-agent can verify (and submit) the nonces they keep returning for it.
//!
//! A chip hashes the last job frame it received until it gets the next one, and nonces come back
//! tagged with that frame's job id only. Without the table a restarted hw-agent knows no job id
//! and every nonce until its first new frame is lost; with it, the nonces that arrived while it
//! was away (kept by the kernel in the UART's buffer, see [`crate::uarts`]) and those arriving
//! before the first new job are verified exactly as before the restart.
//!
//! Cost on the hot path: after a frame is written, the chain thread pushes a [`FrameRecord`]
//! (an `Arc` clone and a few integers) into a short ring under a mutex and wakes the state saver,
//! which writes the file off the chain thread, at most every [`MIN_SAVE_INTERVAL`]. Templates
//! are written once per file, shared by every frame that rolled them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use svcos_proto::stratum::v1::JobTemplate;

use crate::work::{ActiveJob, Extranonce2, Work};

/// Frames remembered per chain: a chip works on the newest, and the ones before may still have
/// nonces on the wire.
pub const FRAMES_PER_CHAIN: usize = 4;
/// The saver writes the file at most this often, however fast frames go out.
pub const MIN_SAVE_INTERVAL: Duration = Duration::from_millis(100);

/// One job frame as written to a chain.
#[derive(Debug, Clone)]
pub struct FrameRecord {
    /// The chip job id it went out under.
    pub job_id: u8,
    /// The extranonce2 counter it rolled.
    pub counter: u64,
    /// What it carried.
    pub work: Work,
}

/// The recent frames of one chain, shared between its thread and the saver.
pub type RecentFrames = Arc<Mutex<VecDeque<FrameRecord>>>;

/// Remember a frame, forgetting the oldest beyond [`FRAMES_PER_CHAIN`].
pub fn push(recent: &RecentFrames, record: FrameRecord) {
    let mut ring = recent.lock().unwrap_or_else(|p| p.into_inner());
    if ring.len() >= FRAMES_PER_CHAIN {
        ring.pop_front();
    }
    ring.push_back(record);
}

/// Wakes the state-saver thread (set once it runs).
#[derive(Debug, Default)]
pub struct SaverWake(OnceLock<std::thread::Thread>);

impl SaverWake {
    /// Register the calling thread as the saver.
    pub fn register(&self) {
        let _ = self.0.set(std::thread::current());
    }

    /// Ask for a save soon.
    pub fn wake(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }
}

/// A template as saved (hex for bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedJob {
    /// Pool job id.
    pub job_id: String,
    /// stratum-agent's session counter.
    pub pool_epoch: u64,
    /// hw-agent's work generation.
    pub generation: u64,
    /// Header-order previous hash, hex.
    pub prev_hash: String,
    /// Coinbase part 1, hex.
    pub coinb1: String,
    /// Coinbase part 2, hex.
    pub coinb2: String,
    /// Extranonce1, hex.
    pub extranonce1: String,
    /// Extranonce2 length.
    pub extranonce2_size: u32,
    /// Merkle branch, hex each.
    pub merkle_branch: Vec<String>,
    /// Header version.
    pub version: u32,
    /// Rollable version bits.
    pub version_mask: u32,
    /// Compact target.
    pub nbits: u32,
    /// Pool ntime.
    pub ntime: u32,
    /// Pool share difficulty.
    pub share_difficulty: f64,
    /// Unix ms hw-agent got it.
    pub arrived_unix_ms: i64,
}

impl SavedJob {
    /// The saved form of a job.
    pub fn from_job(j: &ActiveJob) -> Self {
        SavedJob {
            job_id: j.job_id.clone(),
            pool_epoch: j.pool_epoch,
            generation: j.generation,
            prev_hash: hex::encode(j.job.prev_hash),
            coinb1: hex::encode(&j.job.coinb1),
            coinb2: hex::encode(&j.job.coinb2),
            extranonce1: hex::encode(&j.job.extranonce1),
            extranonce2_size: j.extranonce2_size as u32,
            merkle_branch: j.job.merkle_branch.iter().map(hex::encode).collect(),
            version: j.job.version,
            version_mask: j.version_mask,
            nbits: j.job.nbits,
            ntime: j.job.ntime,
            share_difficulty: j.share_difficulty,
            arrived_unix_ms: j.arrived_unix_ms,
        }
    }

    /// Rebuild the job; `None` when the file was damaged in a way serde cannot see.
    pub fn to_job(&self) -> Option<ActiveJob> {
        let bytes = |s: &str| hex::decode(s).ok();
        let template = JobTemplate {
            job_id: self.job_id.clone(),
            pool_epoch: self.pool_epoch,
            prev_hash: bytes(&self.prev_hash)?,
            coinb1: bytes(&self.coinb1)?,
            coinb2: bytes(&self.coinb2)?,
            extranonce1: bytes(&self.extranonce1)?,
            extranonce2_size: self.extranonce2_size,
            merkle_branch: self
                .merkle_branch
                .iter()
                .map(|b| bytes(b))
                .collect::<Option<_>>()?,
            version: self.version,
            version_mask: self.version_mask,
            nbits: self.nbits,
            ntime: self.ntime,
            share_difficulty: self.share_difficulty,
            ..Default::default()
        };
        ActiveJob::from_template(&template, self.generation, self.arrived_unix_ms).ok()
    }
}

/// A frame as saved: its template by index into the file's job list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFrame {
    /// Chip job id.
    pub job_id: u8,
    /// Index into `ReattachState::jobs`.
    pub job: usize,
    /// Extranonce2 counter.
    pub counter: u64,
    /// Header time sent.
    pub ntime: u32,
}

/// Saved frames of every chain (in chain order) plus the templates they share.
pub fn save(chains: &[Vec<FrameRecord>]) -> (Vec<SavedJob>, Vec<Vec<SavedFrame>>) {
    let mut jobs: Vec<(*const ActiveJob, SavedJob)> = Vec::new();
    let frames = chains
        .iter()
        .map(|records| {
            records
                .iter()
                .map(|r| {
                    let ptr = Arc::as_ptr(&r.work.job);
                    let job = match jobs.iter().position(|(p, _)| *p == ptr) {
                        Some(i) => i,
                        None => {
                            jobs.push((ptr, SavedJob::from_job(&r.work.job)));
                            jobs.len() - 1
                        }
                    };
                    SavedFrame {
                        job_id: r.job_id,
                        job,
                        counter: r.counter,
                        ntime: r.work.ntime,
                    }
                })
                .collect()
        })
        .collect();
    (jobs.into_iter().map(|(_, j)| j).collect(), frames)
}

/// Rebuild one chain's frames; frames whose template is missing or damaged are skipped.
pub fn restore(chain_id: u32, jobs: &[SavedJob], frames: &[SavedFrame]) -> Vec<FrameRecord> {
    let rebuilt: Vec<Option<Arc<ActiveJob>>> =
        jobs.iter().map(|j| j.to_job().map(Arc::new)).collect();
    frames
        .iter()
        .filter_map(|f| {
            let job = rebuilt.get(f.job)?.as_ref()?;
            let extranonce2 = Extranonce2::for_chain(chain_id, f.counter, job.extranonce2_size);
            Some(FrameRecord {
                job_id: f.job_id,
                counter: f.counter,
                work: Work {
                    merkle_root: job.job.merkle_root(extranonce2.as_bytes()),
                    job: Arc::clone(job),
                    extranonce2,
                    ntime: f.ntime,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::tests::{find_nonce, template};
    use svcos_bm13xx::TicketMask;

    #[test]
    fn frames_round_trip_and_verify_the_same_nonces() {
        let job = Arc::new(ActiveJob::from_template(&template("j1", 7, true), 3, 1_000).unwrap());
        let other =
            Arc::new(ActiveJob::from_template(&template("j2", 7, false), 3, 2_000).unwrap());
        let records: Vec<FrameRecord> = [(9u8, 41u64, &job), (10, 42, &job), (11, 43, &other)]
            .into_iter()
            .map(|(job_id, counter, j)| FrameRecord {
                job_id,
                counter,
                work: Work::roll(j, 2, counter, 5),
            })
            .collect();
        let (jobs, frames) = save(std::slice::from_ref(&records));
        assert_eq!(jobs.len(), 2, "a template shared by frames is saved once");
        let text = serde_json::to_string(&(&jobs, &frames)).unwrap();
        let (jobs, frames): (Vec<SavedJob>, Vec<Vec<SavedFrame>>) =
            serde_json::from_str(&text).unwrap();
        let back = restore(2, &jobs, &frames[0]);
        assert_eq!(back.len(), 3);
        let ticket = TicketMask { zero_bits: 10 };
        for (a, b) in records.iter().zip(&back) {
            assert_eq!((a.job_id, a.counter), (b.job_id, b.counter));
            assert_eq!(a.work.merkle_root, b.work.merkle_root);
            assert_eq!(a.work.ntime, b.work.ntime);
            assert_eq!(b.work.job.generation, 3);
            let nonce = find_nonce(&a.work, 0x2000_0000, ticket);
            assert_eq!(
                a.work.hash(0x2000_0000, nonce),
                b.work.hash(0x2000_0000, nonce)
            );
        }
        // A damaged template drops its frames only.
        let mut broken = jobs.clone();
        broken[0].prev_hash = "zz".into();
        assert_eq!(restore(2, &broken, &frames[0]).len(), 1);
    }

    #[test]
    fn ring_keeps_the_newest() {
        let job = Arc::new(ActiveJob::from_template(&template("j", 1, true), 1, 0).unwrap());
        let recent = RecentFrames::default();
        for c in 0..10u64 {
            push(
                &recent,
                FrameRecord {
                    job_id: c as u8,
                    counter: c,
                    work: Work::roll(&job, 0, c, 0),
                },
            );
        }
        let ids: Vec<u8> = recent.lock().unwrap().iter().map(|r| r.job_id).collect();
        assert_eq!(ids, [6, 7, 8, 9]);
    }
}
