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
        self.settings.stratum = config.stratum.clone();
        let now = Instant::now();
        let mut old: Vec<PoolSlot> = std::mem::take(&mut self.slots);
        for cfg in config.pools {
            let key = pool_key(&cfg);
            let slot = match old.iter().position(|s| s.key == key) {
                Some(p) => {
                    let mut s = old.remove(p);
                    s.cfg = cfg;
                    s
                }
                None => {
                    let uid = self.next_uid;
                    self.next_uid += 1;
                    PoolSlot::new(uid, cfg, now)
                }
            };
            self.slots.push(slot);
        }
        for s in old {
            if let Some(c) = s.conn {
                self.conns.remove(&c);
                if self.epoch_conn == Some(c) {
                    self.epoch_conn = None;
                }
            }
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
        Ok(())
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
}
