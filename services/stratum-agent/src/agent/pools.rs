//! Pool-list commands seam: a manual switch and a reload. The list's rules are pure edits in
//! `crate::pooledit`; the list itself is saved only by the config writer, and every change
//! reaches the agent as a reload of the file the writer saved.

use super::*;

impl Agent {
    pub(super) fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(req, reply) => {
                match self.submit(req) {
                    // Held until the queue is on disk: hw-agent forgets the share on answer.
                    Ok(ShareDisposition::Queued) => {
                        self.waiting.push((self.generation + 1, reply));
                    }
                    other => {
                        let _ = reply.send(other);
                    }
                }
                // The state write follows in the run loop, after the connection task has
                // written the share (see `run`).
                return;
            }
            Command::SwitchPool(index, reply) => {
                let r = self.slot_at(index).map(|i| {
                    let noted = self.reorder_noted.take() == Some(self.slots[i].uid);
                    let last = self.saved.switches.last();
                    if noted && last.is_some_and(|s| s.reason.starts_with("pool list reordered")) {
                        self.saved.switches.pop();
                    }
                    self.manual = Some(self.slots[i].uid);
                    self.last_switch = None;
                });
                let _ = reply.send(r);
            }
            Command::ReloadConfig(reply) => {
                let r = self.reload();
                let _ = reply.send(r);
            }
        }
        self.pools_dirty = true;
        self.publish_pools();
    }

    pub(super) fn slot_at(&self, index: u32) -> Result<usize, AgentError> {
        let i = index as usize;
        if i < self.slots.len() {
            Ok(i)
        } else {
            Err(AgentError::NoSuchPool(index))
        }
    }

    pub(super) fn reload(&mut self) -> Result<(), AgentError> {
        // A value the file gets wrong (here or in another section) keeps its value in force:
        // a bad pool entry is left out, the others keep mining.
        let in_force = Config {
            pools: self.slots.iter().map(|s| s.cfg.clone()).collect(),
            stratum: self.settings.stratum.clone(),
            ..Config::default()
        };
        let loaded = Config::load_or_fallback(&self.settings.config_path, &in_force);
        svcos_common::config::ProblemLog::new("stratum-agent")
            .report(&loaded.problems, svcos_common::time::unix_ms());
        let config = loaded.config;
        let stratum_before = std::mem::replace(&mut self.settings.stratum, config.stratum.clone());
        let now = Instant::now();
        // Where the pool being mined stood before, to tell a reorder that leaves it behind a
        // better-ranked pool (see `record_reorder`).
        let home_before = self
            .home
            .map(|h| (self.index_of(h), self.ranked().first() == Some(&h)));
        let mut old: Vec<PoolSlot> = std::mem::take(&mut self.slots);
        let new_keys: HashSet<String> = config.pools.iter().map(pool_key).collect();
        for cfg in config.pools {
            let key = pool_key(&cfg);
            let slot = match old.iter().position(|s| s.key == key) {
                Some(p) => {
                    let mut s = old.remove(p);
                    s.cfg = cfg;
                    s
                }
                None => {
                    // The same pool server under another worker name is the owner's edit of
                    // that pool, not a new one: its counters stay with it (issue 31 defect 9:
                    // the per-pool counts restarted while the total went on). The slot itself
                    // is new, so the connection is dialled again with the new credentials.
                    if let Some(p) = old
                        .iter()
                        .position(|s| s.cfg.url == cfg.url && !new_keys.contains(&s.key))
                    {
                        let edited = old.remove(p);
                        if let Some(counted) = self.saved.pools.remove(&edited.key) {
                            self.saved
                                .pools
                                .entry(key.clone())
                                .or_default()
                                .absorb(counted);
                            self.dirty = true;
                        }
                        self.drop_slot(edited);
                    }
                    let uid = self.next_uid;
                    self.next_uid += 1;
                    PoolSlot::new(uid, cfg, now)
                }
            };
            self.slots.push(slot);
        }
        for s in old {
            self.drop_slot(s);
        }
        if self.sv2_focus.is_none_or(|f| !self.conns.contains_key(&f))
            || !self.settings.stratum.sv2_enabled
        {
            self.sv2_focus = None;
            let idle = sv2_idle(
                &self.settings.stratum,
                self.slots
                    .iter()
                    .map(|s| (s.cfg.enabled, s.cfg.url.as_str())),
            );
            self.sv2_tx.send_replace(idle);
        }
        self.record_reorder(home_before);
        for i in 0..self.slots.len() {
            if !self.slots[i].cfg.enabled {
                let uid = self.slots[i].uid;
                self.close(uid, None);
                self.slots[i].state = PoolState::Disabled;
            } else if self.slots[i].state == PoolState::Disabled {
                // Enabled again (cgminer `enablepool` arrives this way): dial at once.
                self.slots[i].state = PoolState::Connecting;
                self.slots[i].retry_at = now;
            }
        }
        self.jd_reloaded(&stratum_before);
        Ok(())
    }

    /// Close the connection of a slot the new list no longer has.
    fn drop_slot(&mut self, slot: PoolSlot) {
        if let Some(c) = slot.conn {
            self.conns.remove(&c);
            if self.epoch_conn == Some(c) {
                self.epoch_conn = None;
            }
        }
    }

    /// A new list that ranks another pool above the one being mined (moved up, or added
    /// first) puts the miner on a fallback until that pool is healthy for the failback window.
    /// No connection changed, but the miner now mines on another list position than the one
    /// the operator chose first: the history says so, as it does for a failover, and the
    /// failback to the new first pool follows as its own switch.
    fn record_reorder(&mut self, home_before: Option<(i32, bool)>) {
        let (Some(home), Some((from, was_first))) = (self.home, home_before) else {
            return;
        };
        let ranked = self.ranked();
        let (Some(first), true) = (ranked.first().copied(), ranked.contains(&home)) else {
            return;
        };
        if !was_first || first == home {
            return;
        }
        let Some(preferred) = self.slot(first) else {
            return;
        };
        let why = if preferred.last_error.is_empty() {
            "not connected yet".to_string()
        } else {
            preferred.last_error.clone()
        };
        let reason = format!(
            "pool list reordered: pool {} ({}) now ranks first but is {why}; mining stays here \
             until it is healthy for the failback window",
            self.index_of(first) + 1,
            mask_url_userinfo(&preferred.cfg.url),
        );
        let to = self.index_of(home);
        self.record_switch(from, to, &reason);
        self.reorder_noted = Some(first);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{kit, pools};
    use super::*;

    fn ask<T>(agent: &mut Agent, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, AgentError> {
        let (tx, mut rx) = oneshot::channel();
        agent.command(make(tx));
        rx.try_recv().expect("pool-list commands answer at once")
    }

    #[test]
    fn a_switch_mines_on_the_pool_at_once_and_unknown_indexes_are_refused() {
        let mut k = kit(pools(4), SavedState::default(), vec![]);
        ask(&mut k.agent, |tx| Command::SwitchPool(2, tx)).unwrap();
        assert_eq!(k.agent.manual, Some(k.agent.slots[2].uid));
        let r = ask(&mut k.agent, |tx| Command::SwitchPool(4, tx));
        assert!(matches!(r, Err(AgentError::NoSuchPool(4))), "{r:?}");
    }

    #[test]
    fn a_reload_disables_and_enables_again() {
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        let path = k.agent.settings.config_path.clone();
        let mut config = Config::load(&path).unwrap();
        config.pools[1].enabled = false;
        config.save(&path).unwrap();
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        assert_eq!(k.agent.slots[1].state, PoolState::Disabled);
        config.pools[1].enabled = true;
        config.save(&path).unwrap();
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        assert_eq!(k.agent.slots[1].state, PoolState::Connecting);
    }

    #[test]
    fn reload_keeps_known_pools_by_url_and_user() {
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        let uids: Vec<u64> = k.agent.slots.iter().map(|s| s.uid).collect();
        let mut config = Config::load(&k.agent.settings.config_path).unwrap();
        config.pools.reverse();
        config.pools.push(pools(3).pop().unwrap());
        config.save(&k.agent.settings.config_path).unwrap();
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        let after: Vec<u64> = k.agent.slots.iter().map(|s| s.uid).collect();
        assert_eq!(&after[..2], &[uids[1], uids[0]], "same slots, new order");
        assert!(!uids.contains(&after[2]), "a new pool gets a new uid");
    }

    #[test]
    fn a_reorder_that_puts_a_down_pool_first_is_a_recorded_switch() {
        // Issue 31 defect 4: the miner went on mining pool 2 after a reorder, and the switch
        // history said nothing.
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        let (mined, down) = (k.agent.slots[0].uid, k.agent.slots[1].uid);
        k.agent.home = Some(mined);
        k.agent.slots[1].last_error = "connection refused".into();
        let path = k.agent.settings.config_path.clone();
        let before = k.agent.saved.switches.len();

        // Saving the same order again is no switch.
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        assert_eq!(k.agent.saved.switches.len(), before);

        let mut config = Config::load(&path).unwrap();
        config.pools.reverse();
        for (i, p) in config.pools.iter_mut().enumerate() {
            p.priority = i as u32;
        }
        config.save(&path).unwrap();
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        assert_eq!(k.agent.slots[0].uid, down);
        let s = k.agent.saved.switches.last().expect("a recorded switch");
        assert_eq!((s.from_index, s.to_index), (0, 1), "{s:?}");
        assert!(
            s.reason.contains("pool 1") && s.reason.contains("connection refused"),
            "{}",
            s.reason
        );
        assert_eq!(k.agent.saved.switches.len(), before + 1);
        // The published view (GetPools, /api/pools/failover_policy) carries it.
        assert_eq!(
            k.views.pools.borrow().switches.last().map(|w| w.to_index),
            Some(1)
        );

        // Reloading the new order again records nothing more.
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        assert_eq!(k.agent.saved.switches.len(), before + 1);
    }

    #[test]
    fn an_edited_worker_keeps_the_pools_counters_and_a_new_pool_starts_at_zero() {
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        let key0 = k.agent.slots[0].key.clone();
        let counted = PoolCounters {
            accepted: 60,
            rejected: 2,
            best_share: 9.0,
            ..PoolCounters::default()
        };
        k.agent.saved.pools.insert(key0.clone(), counted);
        let path = k.agent.settings.config_path.clone();
        let mut config = Config::load(&path).unwrap();
        config.pools[0].user = "edited.worker".into();
        config.pools.push(PoolConfig {
            url: "stratum+tcp://127.0.0.1:2001".into(),
            user: "w9".into(),
            priority: 2,
            ..Default::default()
        });
        config.save(&path).unwrap();
        ask(&mut k.agent, Command::ReloadConfig).unwrap();
        let view = k.views.pools.borrow().clone();
        assert_eq!(view.pools[0].user, "edited.worker");
        assert_eq!((view.pools[0].accepted, view.pools[0].rejected), (60, 2));
        assert_eq!(view.pools[0].best_share, 9.0);
        assert_eq!(view.pools[2].accepted, 0);
        assert!(!k.agent.saved.pools.contains_key(&key0));
        // The unchanged pool keeps its own slot and counters.
        assert_eq!(view.pools[1].user, "w1");
    }
}
