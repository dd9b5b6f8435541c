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

#[cfg(test)]
mod tests {
    use super::super::testkit::{kit, pools, queued, saved_job, saved_session};
    use super::*;
    use crate::persist::parse_share_key;
    use crate::sharequeue::MAX_AGE_MS;

    #[test]
    fn a_saved_session_is_resumed_with_its_jobs_and_taken_shares() {
        let p = pools(2);
        let jobs = vec![saved_job("j1", &["00000001:1:2:3"]), saved_job("j2", &[])];
        let mut k = kit(p.clone(), saved_session(&p[1], 7, jobs.clone()), vec![]);
        let a = &k.agent;
        let uid = a.slots[1].uid;
        let epoch = a.epoch.as_ref().expect("restored");
        assert_eq!(epoch.id, 7);
        assert!(epoch.has_job("j1") && epoch.has_job("j2"));
        assert!(
            epoch.jobs[0]
                .submitted
                .contains(&parse_share_key("00000001:1:2:3").unwrap())
        );
        assert_eq!(
            (a.epoch_uid, a.home, a.active),
            (Some(uid), Some(uid), Some(uid))
        );
        assert_eq!(a.epoch_conn, None, "mined again once the pool answers");
        assert_eq!(a.slots[1].session_id.as_deref(), Some("sess-1"));
        assert!(a.saved.next_epoch >= 8, "epoch numbers never repeat");
        let published = k
            .views
            .jobs
            .borrow()
            .clone()
            .expect("the saved job is handed out");
        assert_eq!(published.template.job_id, "j2");
        assert!(published.template.clean_jobs);

        // And it is saved again as it was read.
        let again: SavedState = serde_json::from_slice(&k.agent.state_bytes()).unwrap();
        let e = again.epoch.unwrap();
        assert_eq!(e.jobs, jobs);
        assert_eq!((e.id, e.session_id.as_deref()), (7, Some("sess-1")));
    }

    #[test]
    fn a_session_of_a_pool_no_longer_configured_is_not_resumed() {
        let p = pools(2);
        let gone = PoolConfig {
            user: "someone-else".into(),
            ..p[0].clone()
        };
        let saved = saved_session(&gone, 7, vec![saved_job("j1", &[])]);
        let k = kit(p, saved, vec![queued(7, "j1", 1, 0)]);
        assert!(k.agent.epoch.is_none());
        assert!(
            k.agent.queue.is_empty(),
            "its queued shares have no session"
        );
        assert_eq!(k.agent.saved.totals.discarded, 1);
        assert!(k.views.jobs.borrow().is_none());
    }

    #[test]
    fn the_saved_queue_keeps_valid_shares_and_marks_them_taken() {
        let p = pools(1);
        let saved = saved_session(&p[0], 7, vec![saved_job("j1", &[])]);
        let keep = queued(7, "j1", 5, 1000);
        let queue = vec![
            keep.clone(),
            queued(7, "zz", 6, 1000),
            queued(7, "j1", 7, MAX_AGE_MS + 60_000),
        ];
        let mut k = kit(p, saved, queue);
        assert_eq!(k.agent.queue.take(), vec![keep.clone()]);
        assert_eq!(k.agent.saved.totals.discarded, 2);
        assert_eq!(k.agent.saved.pools[&k.agent.slots[0].key].discarded, 2);
        let epoch = k.agent.epoch.as_ref().unwrap();
        assert!(
            epoch.jobs[0].submitted.contains(&keep.key()),
            "a resubmission is a duplicate"
        );
    }

    #[test]
    fn a_queued_answer_is_released_by_the_write_that_covers_it() {
        let p = pools(1);
        let saved = saved_session(&p[0], 7, vec![saved_job("j1", &[])]);
        let mut k = kit(p, saved, vec![]);
        let (tx1, mut rx1) = oneshot::channel();
        k.agent.queue.push(queued(7, "j1", 1, 0));
        k.agent.waiting.push((k.agent.generation + 1, tx1));
        k.agent.persist();
        let snapshot = k.snapshots.borrow_and_update().clone();
        assert_eq!(snapshot.generation, 1);
        assert_eq!(
            crate::sharequeue::decode(&snapshot.queue).unwrap().len(),
            1,
            "the snapshot carries the queue"
        );
        assert!(!snapshot.state.is_empty());

        let (tx2, mut rx2) = oneshot::channel();
        k.agent.queue.push(queued(7, "j1", 2, 0));
        k.agent.waiting.push((k.agent.generation + 1, tx2));
        // Until the writer reports generation 1, nobody hears anything.
        assert!(rx1.try_recv().is_err());
        k.agent.release_waiting(1);
        assert_eq!(rx1.try_recv().unwrap().unwrap(), ShareDisposition::Queued);
        assert!(rx2.try_recv().is_err(), "its share is not on disk yet");
        k.agent.persist();
        k.agent.release_waiting(2);
        assert_eq!(rx2.try_recv().unwrap().unwrap(), ShareDisposition::Queued);
        assert!(k.agent.waiting.is_empty());
        let _ = (&k.dir, &k.durable);
    }
}
