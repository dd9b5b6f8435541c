//! The jobs of the current pool session (an "epoch") and the share checks made against them.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use svcos_proto::stratum::v1::JobTemplate;
use svcos_work::{Job, Roll, hash_difficulty, header_hash, meets_nbits};

use crate::v1::codec::Notify;

/// Jobs kept per epoch: pools rarely keep more than a handful alive.
const MAX_JOBS: usize = 32;

/// Identity of a share within an epoch (what makes it a duplicate).
pub type ShareKey = (Vec<u8>, u32, u32, u32);

/// One job with what its shares are checked against.
#[derive(Debug, Clone)]
pub struct JobSlot {
    /// What hw-agent got.
    pub template: Arc<JobTemplate>,
    /// The header math.
    pub work: Job,
    /// Shares already taken for this job.
    pub submitted: HashSet<ShareKey>,
}

/// The session a set of jobs belongs to.
#[derive(Debug, Clone)]
pub struct Epoch {
    /// Epoch number handed to hw-agent.
    pub id: u64,
    /// Extranonce1 of the session.
    pub extranonce1: Vec<u8>,
    /// Extranonce2 size of the session.
    pub extranonce2_size: usize,
    /// Version mask in force.
    pub version_mask: u32,
    /// Difficulty in force.
    pub difficulty: f64,
    /// Jobs, oldest first.
    pub jobs: VecDeque<JobSlot>,
}

/// Why a share was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShareCheck {
    /// The job is not (or no longer) known.
    #[error("unknown or cleared job")]
    Stale,
    /// Seen before.
    #[error("duplicate share")]
    Duplicate,
    /// Malformed for this job (extranonce2 size, version bits outside the mask).
    #[error("{0}")]
    Malformed(String),
    /// The header hash does not meet the share difficulty.
    #[error("hash difficulty {0} below target")]
    BelowTarget(f64),
}

/// A share that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedShare {
    /// Difficulty the hash achieved.
    pub achieved: f64,
    /// Difficulty the share counts for.
    pub target: f64,
    /// Whether it also meets the block target.
    pub block: bool,
}

impl Epoch {
    /// Add a job; clean_jobs drops every earlier one. Returns the template to publish.
    pub fn add_job(
        &mut self,
        n: &Notify,
        pool_index: u32,
        received_at_us: i64,
        donation: bool,
    ) -> Arc<JobTemplate> {
        let work = Job {
            prev_hash: n.prev_hash,
            coinb1: n.coinb1.clone(),
            coinb2: n.coinb2.clone(),
            extranonce1: self.extranonce1.clone(),
            merkle_branch: n.merkle_branch.clone(),
            version: n.version,
            nbits: n.nbits,
            ntime: n.ntime,
        };
        let template = Arc::new(JobTemplate {
            job_id: n.job_id.clone(),
            pool_epoch: self.id,
            pool_index,
            prev_hash: n.prev_hash.to_vec(),
            coinb1: n.coinb1.clone(),
            coinb2: n.coinb2.clone(),
            extranonce1: self.extranonce1.clone(),
            extranonce2_size: self.extranonce2_size as u32,
            merkle_branch: n.merkle_branch.iter().map(|h| h.to_vec()).collect(),
            version: n.version,
            version_mask: self.version_mask,
            nbits: n.nbits,
            ntime: n.ntime,
            clean_jobs: n.clean_jobs,
            share_difficulty: self.difficulty,
            received_at_us,
            donation,
        });
        // Pools re-send the current job (often marked clean) after a reconnect. When it is the
        // very same work, the shares already taken for it must stay known, or a retried share
        // would go out twice.
        let submitted = self
            .jobs
            .iter()
            .position(|j| j.template.job_id == n.job_id)
            .and_then(|i| self.jobs.remove(i))
            .filter(|old| old.work == work)
            .map(|old| old.submitted)
            .unwrap_or_default();
        if n.clean_jobs {
            self.jobs.clear();
        }
        self.jobs.push_back(JobSlot {
            template: template.clone(),
            work,
            submitted,
        });
        while self.jobs.len() > MAX_JOBS {
            self.jobs.pop_front();
        }
        template
    }

    /// The newest job, re-issued with the epoch's current difficulty and mask (after
    /// set_difficulty or set_version_mask), not clean.
    pub fn refresh_current(&mut self) -> Option<Arc<JobTemplate>> {
        let (difficulty, mask) = (self.difficulty, self.version_mask);
        let slot = self.jobs.back_mut()?;
        let mut t = (*slot.template).clone();
        t.share_difficulty = difficulty;
        t.version_mask = mask;
        t.clean_jobs = false;
        slot.template = Arc::new(t);
        Some(slot.template.clone())
    }

    /// The newest job.
    pub fn current(&self) -> Option<Arc<JobTemplate>> {
        self.jobs.back().map(|j| j.template.clone())
    }

    /// Whether a job id is still valid in this epoch.
    pub fn has_job(&self, job_id: &str) -> bool {
        self.jobs.iter().any(|j| j.template.job_id == job_id)
    }

    /// Check a share and, when it passes, remember it so a second copy is a duplicate.
    pub fn check(
        &mut self,
        job_id: &str,
        extranonce2: &[u8],
        ntime: u32,
        nonce: u32,
        version: u32,
    ) -> Result<CheckedShare, ShareCheck> {
        let epoch_difficulty = self.difficulty;
        let (en2_size, mask) = (self.extranonce2_size, self.version_mask);
        let slot = self
            .jobs
            .iter_mut()
            .find(|j| j.template.job_id == job_id)
            .ok_or(ShareCheck::Stale)?;
        if extranonce2.len() != en2_size {
            return Err(ShareCheck::Malformed(format!(
                "extranonce2 is {} bytes, the pool wants {en2_size}",
                extranonce2.len()
            )));
        }
        if (version ^ slot.work.version) & !mask != 0 {
            return Err(ShareCheck::Malformed(format!(
                "version {version:08x} changes bits outside mask {mask:08x}"
            )));
        }
        let key = (extranonce2.to_vec(), ntime, nonce, version);
        if slot.submitted.contains(&key) {
            return Err(ShareCheck::Duplicate);
        }
        let hash = header_hash(&slot.work.header(Roll {
            extranonce2,
            ntime,
            version,
            nonce,
        }));
        let achieved = hash_difficulty(&hash);
        // The pool may apply a new difficulty to old jobs or not; the lower of the two lets
        // every share through that the pool could accept.
        let target = slot.template.share_difficulty.min(epoch_difficulty);
        if achieved < target * (1.0 - 1e-9) {
            return Err(ShareCheck::BelowTarget(achieved));
        }
        slot.submitted.insert(key);
        Ok(CheckedShare {
            achieved,
            target,
            block: meets_nbits(&hash, slot.work.nbits),
        })
    }
}
