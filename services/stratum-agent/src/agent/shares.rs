//! Share handling seam: SubmitShare's checks and accounting, the outgoing queue while the
//! epoch's connection is down, and the pool's answers.

use super::*;

impl Agent {
    pub(super) fn drop_queue(&mut self, why: &str) {
        if self.queue.is_empty() {
            return;
        }
        tracing::info!(
            count = self.queue.len(),
            why,
            "dropping queued shares: their session is gone"
        );
        let n = self.queue.clear() as u64;
        self.dirty = true;
        self.saved.totals.discarded += n;
        if let Some(u) = self.epoch_uid {
            self.counters(u).discarded += n;
        }
    }

    pub(super) fn on_share_result(&mut self, ticket: u64, accepted: bool, reason: Option<String>) {
        let Some(t) = self.tickets.remove(&ticket) else {
            return;
        };
        let latency_ms = t.sent.elapsed().as_secs_f64() * 1000.0;
        let key = t.key.clone();
        let c = self.saved.pools.entry(key).or_default();
        c.last_share_time_ms = unix_ms();
        c.last_share_latency_ms = latency_ms;
        let totals = &mut self.saved.totals;
        if accepted {
            c.accepted += 1;
            c.accepted_difficulty += t.difficulty;
            totals.accepted += 1;
            totals.accepted_difficulty += t.difficulty;
        } else {
            let reason = reason.unwrap_or_else(|| "rejected".into());
            // Pools word stale rejects differently; count them as stale as well.
            let stale = reason.to_ascii_lowercase().contains("stale")
                || reason.to_ascii_lowercase().contains("job not found");
            c.rejected += 1;
            c.rejected_difficulty += t.difficulty;
            totals.rejected += 1;
            totals.rejected_difficulty += t.difficulty;
            if stale {
                c.stale += 1;
                totals.stale += 1;
            }
            *c.reject_reasons.entry(reason.clone()).or_default() += 1;
            *totals.reject_reasons.entry(reason).or_default() += 1;
        }
        // Counters are persisted on change: a crash right after must not lose this answer.
        self.urgent = true;
        self.pools_dirty = true;
    }

    // ---------------------------------------------------------------- shares

    pub(super) fn submit(
        &mut self,
        req: SubmitShareRequest,
    ) -> Result<ShareDisposition, AgentError> {
        let Some(epoch) = self.epoch.as_mut().filter(|e| e.id == req.pool_epoch) else {
            self.saved.totals.stale += 1;
            self.pools_dirty = true;
            return Ok(ShareDisposition::Stale);
        };
        let uid = self.epoch_uid.expect("epoch has a pool");
        let checked = match epoch.check(
            &req.job_id,
            &req.extranonce2,
            req.ntime,
            req.nonce,
            req.version,
        ) {
            Ok(c) => c,
            Err(ShareCheck::Stale) => {
                self.saved.totals.stale += 1;
                self.counters(uid).stale += 1;
                self.pools_dirty = true;
                return Ok(ShareDisposition::Stale);
            }
            Err(ShareCheck::Duplicate) => return Ok(ShareDisposition::Duplicate),
            Err(ShareCheck::Malformed(m)) => return Err(AgentError::MalformedShare(m)),
            Err(ShareCheck::BelowTarget(_)) => {
                self.saved.totals.discarded += 1;
                self.counters(uid).discarded += 1;
                return Ok(ShareDisposition::BelowTarget);
            }
        };
        {
            let c = self.counters(uid);
            c.best_share = c.best_share.max(checked.achieved);
            if checked.block {
                c.found_blocks += 1;
            }
        }
        self.saved.totals.best_share = self.saved.totals.best_share.max(checked.achieved);
        if checked.block {
            self.saved.totals.found_blocks += 1;
            tracing::info!(
                difficulty = checked.achieved,
                "share meets the block target"
            );
        }
        let share = QueuedShare {
            epoch: req.pool_epoch,
            job_id: req.job_id,
            extranonce2: req.extranonce2,
            ntime: req.ntime,
            nonce: req.nonce,
            version: req.version,
            difficulty: checked.target,
            queued_at_ms: unix_ms(),
        };
        let disposition = if self.write_share(&share) {
            ShareDisposition::Submitted
        } else {
            if self.queue.push(share).is_some() {
                self.saved.totals.discarded += 1;
            }
            ShareDisposition::Queued
        };
        // Written at once: a restart must know this share was taken, or it could go out twice.
        self.urgent = true;
        self.pools_dirty = true;
        Ok(disposition)
    }

    /// Write a share to the epoch's connection when it is up and authorised.
    pub(super) fn write_share(&mut self, share: &QueuedShare) -> bool {
        let Some(conn) = self.epoch_conn else {
            return false;
        };
        let ticket = self.next_ticket;
        let Some(c) = self.conns.get_mut(&conn).filter(|c| c.session.authorized()) else {
            return false;
        };
        let submit = ShareSubmit {
            job_id: &share.job_id,
            extranonce2: &share.extranonce2,
            ntime: share.ntime,
            nonce: share.nonce,
            version: share.version,
        };
        let sent = match &mut c.session {
            PoolSession::V1(session) => c.handle.send(session.submit(ticket, submit)),
            PoolSession::V2(session, _) => session
                .submit(ticket, submit, unix_ms())
                .is_some_and(|frame| c.handle.send_bytes(frame)),
        };
        if !sent {
            return false;
        }
        if svcos_common::trace::enabled() {
            // Share-path trace: queued for the connection task, which writes it.
            svcos_common::trace::record(
                "sa.queued",
                format_args!("{:08x} {}", share.nonce, svcos_common::trace::mono_ns()),
            );
        }
        let uid = c.uid;
        self.next_ticket += 1;
        if self.tickets.len() >= crate::v1::session::MAX_PENDING {
            // The session forgets requests this old too; their answers will never be matched.
            let floor = ticket.saturating_sub(crate::v1::session::MAX_PENDING as u64);
            self.tickets.retain(|t, _| *t > floor);
        }
        let key = self.slot(uid).map_or_else(String::new, |s| s.key.clone());
        self.tickets.insert(
            ticket,
            Ticket {
                key,
                difficulty: share.difficulty,
                sent: Instant::now(),
            },
        );
        true
    }

    pub(super) fn flush_queue(&mut self) {
        let queued = self.queue.take();
        let current = self.epoch.as_ref().map(|e| e.id);
        let mut sent = 0;
        for share in queued {
            let valid = Some(share.epoch) == current
                && self
                    .epoch
                    .as_ref()
                    .is_some_and(|e| e.has_job(&share.job_id));
            if valid && self.write_share(&share) {
                sent += 1;
            } else if valid {
                self.queue.push(share);
            } else {
                self.saved.totals.stale += 1;
            }
        }
        if sent > 0 {
            tracing::info!(sent, "queued shares submitted after reconnect");
            self.persist();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{kit, pools, queued, saved_job, saved_session};
    use super::*;

    fn ticket(agent: &mut Agent, id: u64, slot: usize) {
        let key = agent.slots[slot].key.clone();
        agent.tickets.insert(
            id,
            Ticket {
                key,
                difficulty: 2.0,
                sent: Instant::now(),
            },
        );
    }

    #[test]
    fn a_share_of_another_epoch_is_stale_and_counted() {
        let mut k = kit(pools(1), SavedState::default(), vec![]);
        let req = SubmitShareRequest {
            pool_epoch: 5,
            job_id: "j".into(),
            ..Default::default()
        };
        assert_eq!(k.agent.submit(req).unwrap(), ShareDisposition::Stale);
        assert_eq!(k.agent.saved.totals.stale, 1);
    }

    #[test]
    fn answers_are_counted_per_pool_and_stale_rejects_classified() {
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        for (id, slot) in [(1, 0), (2, 0), (3, 0), (4, 1)] {
            ticket(&mut k.agent, id, slot);
        }
        k.agent.on_share_result(1, true, None);
        k.agent
            .on_share_result(2, false, Some("Stale share".to_string()));
        k.agent
            .on_share_result(3, false, Some("Job not found".to_string()));
        k.agent
            .on_share_result(4, false, Some("Low difficulty share".to_string()));
        // An answer nobody asked for (or one already counted) changes nothing.
        k.agent.on_share_result(1, true, None);
        k.agent.on_share_result(99, true, None);
        assert!(k.agent.urgent, "answers are persisted at once");

        let p0 = k.agent.saved.pools[&k.agent.slots[0].key].clone();
        assert_eq!((p0.accepted, p0.rejected, p0.stale), (1, 2, 2));
        assert_eq!(p0.accepted_difficulty, 2.0);
        assert_eq!(p0.reject_reasons.get("Job not found"), Some(&1));
        let p1 = k.agent.saved.pools[&k.agent.slots[1].key].clone();
        assert_eq!((p1.accepted, p1.rejected, p1.stale), (0, 1, 0));
        let t = &k.agent.saved.totals;
        assert_eq!((t.accepted, t.rejected, t.stale), (1, 3, 2));
        assert_eq!(t.rejected_difficulty, 6.0);
    }

    #[test]
    fn the_queue_waits_for_its_session_and_drops_what_cannot_go() {
        let p = pools(1);
        let saved = saved_session(&p[0], 7, vec![saved_job("j1", &[])]);
        let mut k = kit(p, saved, vec![]);
        for s in [
            queued(7, "j1", 1, 0),
            queued(6, "j1", 2, 0),
            queued(7, "gone", 3, 0),
        ] {
            k.agent.queue.push(s);
        }
        // No connection yet: the valid share stays, the others are stale now.
        k.agent.flush_queue();
        assert_eq!(k.agent.queue.len(), 1);
        assert_eq!(k.agent.saved.totals.stale, 2);
        // A new session voids what is left.
        k.agent.dirty = false;
        k.agent.drop_queue("new epoch");
        assert!(k.agent.queue.is_empty());
        assert_eq!(k.agent.saved.totals.discarded, 1);
        assert_eq!(k.agent.saved.pools[&k.agent.slots[0].key].discarded, 1);
        assert!(k.agent.dirty, "the emptied queue is written");
    }
}
