//! Persistence seam: the saved session and share queue taken back at start, and the snapshot
//! handed to the writer ([`crate::persist`]).

use super::*;

impl Agent {
    // ---------------------------------------------------------------- restore / persist

    pub(super) fn restore_epoch(&mut self) {
        let Some(saved) = self.saved.epoch.clone() else {
            return;
        };
        let Some(index) = self.slots.iter().position(|s| s.key == saved.pool_key) else {
            return;
        };
        let (Ok(extranonce1), true) = (hex::decode(&saved.extranonce1), saved.extranonce2_size > 0)
        else {
            return;
        };
        let mut epoch = Epoch {
            id: saved.id,
            extranonce1,
            extranonce2_size: saved.extranonce2_size,
            version_mask: saved.version_mask,
            difficulty: saved.difficulty,
            jobs: Default::default(),
        };
        for j in &saved.jobs {
            let Some(n) = saved_to_notify(j) else {
                continue;
            };
            epoch.difficulty = j.difficulty;
            epoch.add_job(&n, index as u32, unix_ms() * 1000, false);
            if let Some(slot) = epoch.jobs.back_mut() {
                slot.submitted = j
                    .submitted
                    .iter()
                    .filter_map(|k| parse_share_key(k))
                    .collect();
            }
        }
        epoch.difficulty = saved.difficulty;
        self.slots[index].session_id = saved.session_id.clone();
        let uid = self.slots[index].uid;
        self.saved.next_epoch = self.saved.next_epoch.max(saved.id + 1);
        if let Some(current) = epoch.current() {
            tracing::info!(
                epoch = epoch.id,
                pool = index,
                "resuming the saved session's jobs until the pool answers"
            );
            self.clean_seq += 1;
            let mut t = (*current).clone();
            t.clean_jobs = true;
            self.jobs_tx.send_replace(Some(Published {
                template: Arc::new(t),
                clean_seq: self.clean_seq,
            }));
        }
        self.epoch = Some(epoch);
        self.epoch_uid = Some(uid);
        self.home = Some(uid);
        self.active = Some(uid);
    }

    /// Take back the queue saved by the previous process: shares of the restored session go out
    /// when it resumes; the rest are dropped here, each logged with its reason.
    pub(super) fn restore_queue(&mut self, saved: Vec<QueuedShare>) {
        if saved.is_empty() {
            return;
        }
        let (kept, dropped) = sharequeue::revalidate(saved, self.epoch.as_ref(), unix_ms());
        for (share, why) in &dropped {
            tracing::info!(
                epoch = share.epoch,
                job = %share.job_id,
                why = why.as_str(),
                "saved queued share dropped"
            );
        }
        if !dropped.is_empty() {
            let n = dropped.len() as u64;
            self.saved.totals.discarded += n;
            if let Some(u) = self.epoch_uid {
                self.counters(u).discarded += n;
            }
        }
        if let Some(epoch) = self.epoch.as_mut() {
            for share in &kept {
                // Already marked when it was taken, unless the state file lagged: a resubmission
                // by hw-agent must be a duplicate either way.
                if let Some(slot) = epoch
                    .jobs
                    .iter_mut()
                    .find(|j| j.template.job_id == share.job_id)
                {
                    slot.submitted.insert(share.key());
                }
            }
        }
        tracing::info!(
            kept = kept.len(),
            dropped = dropped.len(),
            "saved share queue restored; kept shares go out when the session resumes"
        );
        for share in kept {
            self.queue.push(share);
        }
        self.dirty = true;
    }

    pub(super) fn state_bytes(&mut self) -> Vec<u8> {
        let now_ms = self.mono_ms(Instant::now());
        if let Some(s) = self.schedule.as_mut() {
            self.saved.donation_cycle_start_ms = unix_ms() - s.cycle_elapsed_ms(now_ms);
            self.saved.donation_mined_cycle_ms = s.mined_cycle_ms();
        }
        self.saved.donation_mined_total_ms = self
            .schedule
            .as_ref()
            .map_or(self.saved.donation_mined_total_ms, |s| s.mined_total_ms);
        self.saved.epoch = match (&self.epoch, self.epoch_uid.and_then(|u| self.slot(u))) {
            (Some(e), Some(slot)) => Some(SavedEpoch {
                id: e.id,
                pool_key: slot.key.clone(),
                session_id: slot.session_id.clone(),
                extranonce1: hex::encode(&e.extranonce1),
                extranonce2_size: e.extranonce2_size,
                version_mask: e.version_mask,
                difficulty: e.difficulty,
                jobs: e.jobs.iter().map(job_to_saved).collect(),
            }),
            _ => None,
        };
        serde_json::to_vec(&self.saved).unwrap_or_default()
    }

    pub(super) fn persist(&mut self) {
        let state = self.state_bytes();
        self.generation += 1;
        self.persistence.tx.send_replace(Arc::new(Snapshot {
            generation: self.generation,
            queue: self.queue.encode(),
            state,
        }));
        self.dirty = false;
        self.last_persist = Instant::now();
    }
}
