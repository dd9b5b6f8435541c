//! Publishing seam: the read-only views gRPC readers follow (current job, pool list, donation,
//! Stratum V2 status), rebuilt from the agent's state.

use super::*;

impl Agent {
    pub(super) fn publish_job(&mut self, template: Arc<JobTemplate>, clean: bool) {
        if clean {
            self.clean_seq += 1;
        }
        self.jobs_tx.send_replace(Some(Published {
            template,
            clean_seq: self.clean_seq,
        }));
    }

    /// Rebuild the SV2 status from connection `conn` when it is the one to report: the mining
    /// connection first, else the latest SV2 connection. `closed` keeps a dead connection's
    /// final state (and why) visible.
    pub(super) fn publish_sv2(&mut self, conn: ConnId, closed: Option<&str>) {
        let focus_alive = self
            .sv2_focus
            .is_some_and(|f| f != conn && self.conns.contains_key(&f));
        let focus_mining = self.sv2_focus.is_some() && self.sv2_focus == self.epoch_conn;
        if focus_alive && (focus_mining || self.epoch_conn != Some(conn)) {
            return;
        }
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let PoolSession::V2(session, link) = &c.session else {
            return;
        };
        self.sv2_focus = Some(conn);
        let snapshot = crate::v2::status::snapshot(
            link,
            Some(session),
            self.index_of(c.uid),
            self.epoch_conn == Some(conn),
            closed,
        );
        self.sv2_tx.send_replace(snapshot);
    }

    // ---------------------------------------------------------------- snapshots

    pub(super) fn publish_pools(&mut self) {
        self.pools_dirty = false;
        self.last_pools_publish = Instant::now();
        let now_ms = unix_ms();
        let pools = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let c = self.saved.pools.get(&s.key).cloned().unwrap_or_default();
                let session = s.conn.and_then(|c| self.conns.get(&c)).map(|c| &c.session);
                PoolStatus {
                    index: i as u32,
                    // Every reader of the snapshot shows it (status, metrics, cgminer, MQTT).
                    url: mask_url_userinfo(&s.cfg.url).into_owned(),
                    user: s.cfg.user.clone(),
                    priority: s.cfg.priority,
                    state: (if s.cfg.enabled {
                        s.state
                    } else {
                        PoolState::Disabled
                    }) as i32,
                    active: self.active == Some(s.uid),
                    enabled: s.cfg.enabled,
                    quota: s.cfg.quota,
                    accepted: c.accepted,
                    rejected: c.rejected,
                    stale: c.stale,
                    accepted_difficulty: c.accepted_difficulty,
                    rejected_difficulty: c.rejected_difficulty,
                    best_share: c.best_share,
                    difficulty: session.map_or(0.0, |s| s.difficulty()),
                    get_failures: c.get_failures,
                    remote_failures: c.remote_failures,
                    last_share_time: c.last_share_time_ms / 1000,
                    last_share_latency_ms: c.last_share_latency_ms,
                    version_rolling: session.is_some_and(|s| s.version_mask().is_some()),
                    version_mask: session.and_then(|s| s.version_mask()).unwrap_or(0),
                    last_error: s.last_error.clone(),
                    reject_reasons: c.reject_reasons.clone().into_iter().collect(),
                    discarded: c.discarded,
                    protocol: match s.url.as_ref().map(|u| u.scheme) {
                        Some(Scheme::Tls) => "stratum+ssl",
                        Some(Scheme::V2) => "stratum2+tcp",
                        _ => "stratum+tcp",
                    }
                    .to_string(),
                    connected_since: s.connected_since_ms / 1000,
                }
            })
            .collect();
        let t = &self.saved.totals;
        let snapshot = GetPoolsResponse {
            pools,
            active_index: self.active.map_or(-1, |a| self.index_of(a)),
            accepted: t.accepted,
            rejected: t.rejected,
            stale: t.stale,
            best_share: t.best_share,
            switches: self
                .saved
                .switches
                .iter()
                .map(|s| PoolSwitch {
                    timestamp_ms: s.timestamp_ms,
                    from_index: s.from_index,
                    to_index: s.to_index,
                    reason: s.reason.clone(),
                })
                .collect(),
            share_difficulty: self.epoch.as_ref().map_or(0.0, |e| e.difficulty),
            found_blocks: t.found_blocks,
            counters_since_s: ((now_ms - self.saved.counters_since_ms).max(0) / 1000) as u64,
            donation_active: self.active == Some(DONATION_UID),
        };
        self.pools_tx.send_replace(snapshot);
        self.publish_donation();
    }

    pub(super) fn publish_donation(&mut self) {
        let d = &self.settings.donation;
        let resp = GetDonationResponse {
            enabled: self.schedule.is_some(),
            percent: if self.schedule.is_some() {
                d.percent
            } else {
                0.0
            },
            cycle_s: d.cycle_s,
            pool_url: mask_url_userinfo(&d.pool_url).into_owned(),
            mined_s_current_cycle: self
                .schedule
                .as_ref()
                .map_or(0.0, |s| s.mined_cycle_ms() as f64 / 1000.0),
            mined_s_total: self
                .schedule
                .as_ref()
                .map_or(self.saved.donation_mined_total_ms, |s| s.mined_total_ms)
                as f64
                / 1000.0,
            active_now: self.active == Some(DONATION_UID),
        };
        self.donation_tx.send_replace(resp);
    }
}

/// The SV2 status before any SV2 connection: gate off, or no SV2 pool tried yet.
pub(super) fn sv2_idle<'a>(
    stratum: &StratumConfig,
    mut pools: impl Iterator<Item = (bool, &'a str)>,
) -> GetSv2StatusResponse {
    let enabled = stratum.sv2_enabled;
    let configured = pools.any(|(on, url)| {
        on && svcos_common::redact::UrlParts::parse(url).is_ok_and(|p| p.scheme == "stratum2+tcp")
    });
    GetSv2StatusResponse {
        enabled,
        state: match (enabled, configured) {
            (false, _) => "disabled",
            (true, false) => "no_pool",
            (true, true) => "connecting",
        }
        .to_string(),
        handshake: "none".into(),
        pool_index: -1,
        last_error: if enabled {
            String::new()
        } else {
            "Stratum V2 is behind the readiness gate ([stratum].sv2_enabled = false)".into()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{kit, pools};
    use super::*;

    #[test]
    fn the_sv2_status_before_any_connection() {
        let on = StratumConfig {
            sv2_enabled: true,
            ..Default::default()
        };
        let off = StratumConfig::default();
        let v1 = (true, "stratum+tcp://a:1");
        let v2 = (true, "stratum2+tcp://a:1/key");
        let v2_off = (false, "stratum2+tcp://a:1/key");
        for (stratum, pools, state) in [
            (&off, vec![v1, v2], "disabled"),
            (&on, vec![v1], "no_pool"),
            (&on, vec![v1, v2_off], "no_pool"),
            (&on, vec![v1, v2], "connecting"),
        ] {
            let s = sv2_idle(stratum, pools.into_iter());
            assert_eq!(s.state, state);
            assert_eq!(s.enabled, stratum.sv2_enabled);
            assert_eq!(s.last_error.is_empty(), stratum.sv2_enabled, "{state}");
            assert_eq!(s.pool_index, -1);
        }
    }

    #[test]
    fn the_pool_snapshot_masks_credentials_and_reports_disabled_pools() {
        let mut p = pools(2);
        p[0].url = "stratum+tcp://owner:hunter2@127.0.0.1:1001".into();
        p[1].enabled = false;
        let mut k = kit(p, SavedState::default(), vec![]);
        let key = k.agent.slots[0].key.clone();
        let c = k.agent.saved.pools.entry(key).or_default();
        c.accepted = 5;
        c.reject_reasons.insert("Stale".into(), 2);
        k.agent.saved.totals.accepted = 9;
        k.agent.publish_pools();
        let s = k.views.pools.borrow().clone();
        assert!(!s.pools[0].url.contains("hunter2"), "{}", s.pools[0].url);
        assert!(s.pools[0].url.contains("127.0.0.1:1001"));
        assert_eq!(s.pools[0].accepted, 5);
        assert_eq!(s.pools[0].reject_reasons.get("Stale"), Some(&2));
        assert_eq!(s.pools[1].state, PoolState::Disabled as i32);
        assert!(!s.pools[1].enabled);
        assert_eq!((s.accepted, s.active_index), (9, -1));
        assert_eq!(s.pools[0].protocol, "stratum+tcp");
    }

    #[test]
    fn only_clean_jobs_void_the_readers_work() {
        let mut k = kit(pools(1), SavedState::default(), vec![]);
        let t = Arc::new(JobTemplate {
            job_id: "a".into(),
            ..Default::default()
        });
        k.agent.publish_job(t.clone(), true);
        let first = k.views.jobs.borrow().clone().unwrap().clean_seq;
        k.agent.publish_job(t.clone(), false);
        assert_eq!(k.views.jobs.borrow().clone().unwrap().clean_seq, first);
        k.agent.publish_job(t, true);
        assert_eq!(k.views.jobs.borrow().clone().unwrap().clean_seq, first + 1);
    }
}
