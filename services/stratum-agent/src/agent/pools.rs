//! Pool-list commands seam: what gRPC asks of the pool list (switch, enable, add, remove,
//! reorder, reload), validated before anything changes and persisted into the config file.

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
                let r = self.reorder_first(index).map(|uid| {
                    self.manual = Some(uid);
                    self.last_switch = None;
                });
                let _ = reply.send(r);
            }
            Command::SetPoolEnabled(index, enabled, reply) => {
                let r = self.slot_at(index).and_then(|i| {
                    let before = self.slots[i].cfg.enabled;
                    self.slots[i].cfg.enabled = enabled;
                    self.save_pools()
                        .inspect_err(|_| self.slots[i].cfg.enabled = before)?;
                    let uid = self.slots[i].uid;
                    if !enabled {
                        self.close(uid, None);
                        self.slots[i].state = PoolState::Disabled;
                    } else {
                        self.slots[i].state = PoolState::Connecting;
                        self.slots[i].retry_at = Instant::now();
                    }
                    Ok(())
                });
                let _ = reply.send(r);
            }
            Command::AddPool(cfg, reply) => {
                let r = (|| {
                    let index = self.slots.len();
                    let mut cfg = cfg;
                    cfg.priority = self
                        .slots
                        .iter()
                        .map(|s| s.cfg.priority + 1)
                        .max()
                        .unwrap_or(0);
                    cfg.validate(&format!("pools[{index}]"))
                        .map_err(AgentError::Invalid)?;
                    let uid = self.next_uid;
                    self.next_uid += 1;
                    self.slots.push(PoolSlot::new(uid, cfg, Instant::now()));
                    self.save_pools().inspect_err(|_| {
                        self.slots.pop();
                    })?;
                    Ok(index as u32)
                })();
                let _ = reply.send(r);
            }
            Command::RemovePool(index, reply) => {
                let r = self.slot_at(index).and_then(|i| {
                    let removed = self.slots.remove(i);
                    if let Err(e) = self.save_pools() {
                        self.slots.insert(i, removed);
                        return Err(e);
                    }
                    if let Some(c) = removed.conn {
                        self.conns.remove(&c);
                        if self.epoch_conn == Some(c) {
                            self.epoch_conn = None;
                        }
                    }
                    Ok(())
                });
                let _ = reply.send(r);
            }
            Command::SetPoolPriority(order, reply) => {
                let r = self.set_order(&order);
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

    pub(super) fn reorder_first(&mut self, index: u32) -> Result<u64, AgentError> {
        let i = self.slot_at(index)?;
        let uid = self.slots[i].uid;
        let mut order: Vec<u32> = self
            .ranked_all()
            .into_iter()
            .filter(|u| *u != uid)
            .filter_map(|u| self.slots.iter().position(|s| s.uid == u).map(|p| p as u32))
            .collect();
        order.insert(0, index);
        self.set_order(&order)?;
        Ok(uid)
    }

    /// Every pool (enabled or not) best first.
    pub(super) fn ranked_all(&self) -> Vec<u64> {
        let mut v: Vec<(u32, usize, u64)> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.cfg.priority, i, s.uid))
            .collect();
        v.sort();
        v.into_iter().map(|(_, _, u)| u).collect()
    }

    pub(super) fn set_order(&mut self, order: &[u32]) -> Result<(), AgentError> {
        let mut seen: Vec<u32> = order.to_vec();
        seen.sort_unstable();
        if seen != (0..self.slots.len() as u32).collect::<Vec<_>>() {
            return Err(AgentError::BadOrder);
        }
        let before: Vec<u32> = self.slots.iter().map(|s| s.cfg.priority).collect();
        for (prio, index) in order.iter().enumerate() {
            self.slots[*index as usize].cfg.priority = prio as u32;
        }
        self.save_pools().inspect_err(|_| {
            for (s, p) in self.slots.iter_mut().zip(before) {
                s.cfg.priority = p;
            }
        })
    }

    /// Save the pool list into the config file, keeping every other section as it is on disk.
    pub(super) fn save_pools(&mut self) -> Result<(), AgentError> {
        let path = &self.settings.config_path;
        let mut config = Config::load(path).map_err(AgentError::ConfigWrite)?;
        config.pools = self.slots.iter().map(|s| s.cfg.clone()).collect();
        config.save(path).map_err(|e| match e {
            ConfigError::Invalid { .. } => AgentError::Invalid(e),
            other => AgentError::ConfigWrite(other),
        })
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

    fn priorities(agent: &Agent) -> Vec<u32> {
        agent.slots.iter().map(|s| s.cfg.priority).collect()
    }

    fn priorities_on_disk(k: &super::super::testkit::Kit) -> Vec<u32> {
        Config::load(&k.agent.settings.config_path)
            .unwrap()
            .pools
            .iter()
            .map(|p| p.priority)
            .collect()
    }

    #[test]
    fn a_priority_order_must_list_every_pool_once() {
        let mut k = kit(pools(3), SavedState::default(), vec![]);
        for bad in [
            vec![0, 1],
            vec![0, 1, 1],
            vec![0, 1, 3],
            vec![0, 1, 2, 0],
            vec![],
        ] {
            let r = ask(&mut k.agent, |tx| Command::SetPoolPriority(bad.clone(), tx));
            assert!(matches!(r, Err(AgentError::BadOrder)), "{bad:?}: {r:?}");
            assert_eq!(
                priorities(&k.agent),
                vec![0, 1, 2],
                "{bad:?} changed nothing"
            );
        }
        ask(&mut k.agent, |tx| {
            Command::SetPoolPriority(vec![2, 0, 1], tx)
        })
        .unwrap();
        // Pool 2 first, then 0, then 1: priorities by list position.
        assert_eq!(priorities(&k.agent), vec![1, 2, 0]);
        assert_eq!(priorities_on_disk(&k), vec![1, 2, 0], "persisted");
        let snapshot = k.views.pools.borrow().clone();
        assert_eq!(
            snapshot
                .pools
                .iter()
                .map(|p| p.priority)
                .collect::<Vec<_>>(),
            vec![1, 2, 0],
            "published"
        );
    }

    #[test]
    fn a_switch_puts_the_pool_first_and_keeps_the_others_in_order() {
        let mut k = kit(pools(4), SavedState::default(), vec![]);
        ask(&mut k.agent, |tx| Command::SwitchPool(2, tx)).unwrap();
        assert_eq!(priorities(&k.agent), vec![1, 2, 0, 3]);
        assert_eq!(k.agent.manual, Some(k.agent.slots[2].uid));
        let r = ask(&mut k.agent, |tx| Command::SwitchPool(4, tx));
        assert!(matches!(r, Err(AgentError::NoSuchPool(4))), "{r:?}");
        assert_eq!(priorities_on_disk(&k), vec![1, 2, 0, 3]);
    }

    #[test]
    fn add_remove_and_enable_validate_before_changing_anything() {
        let mut k = kit(pools(2), SavedState::default(), vec![]);
        let bad = PoolConfig {
            url: "http://not-a-pool".into(),
            user: "x".into(),
            ..Default::default()
        };
        let r = ask(&mut k.agent, |tx| Command::AddPool(bad, tx));
        assert!(matches!(r, Err(AgentError::Invalid(_))), "{r:?}");
        assert_eq!(k.agent.slots.len(), 2);

        let good = pools(3).pop().unwrap();
        let index = ask(&mut k.agent, |tx| Command::AddPool(good, tx)).unwrap();
        assert_eq!(index, 2);
        assert_eq!(k.agent.slots[2].cfg.priority, 2, "appended last");
        assert_eq!(priorities_on_disk(&k), vec![0, 1, 2]);

        let r = ask(&mut k.agent, |tx| Command::RemovePool(3, tx));
        assert!(matches!(r, Err(AgentError::NoSuchPool(3))), "{r:?}");
        ask(&mut k.agent, |tx| Command::RemovePool(0, tx)).unwrap();
        assert_eq!(priorities_on_disk(&k), vec![1, 2]);

        ask(&mut k.agent, |tx| Command::SetPoolEnabled(1, false, tx)).unwrap();
        assert_eq!(k.agent.slots[1].state, PoolState::Disabled);
        assert!(!Config::load(&k.agent.settings.config_path).unwrap().pools[1].enabled);
        let r = ask(&mut k.agent, |tx| Command::SetPoolEnabled(9, true, tx));
        assert!(matches!(r, Err(AgentError::NoSuchPool(9))), "{r:?}");
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
