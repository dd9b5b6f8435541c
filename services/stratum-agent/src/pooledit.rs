//! The pool list's rules, as pure edits of the configured list: what `SwitchPool`,
//! `SetPoolEnabled`, `AddPool`, `RemovePool` and `SetPoolPriority` change. stratum-agent owns
//! these rules (cgminer, REST and MCP only relay them); the list itself lives in `config.toml`,
//! which only the config writer (the gateway's `svcos.config.v1.ConfigService`) saves: the
//! gRPC handlers read the list and its generation from the writer, apply one edit here, and send
//! the result back as a compare-and-set write (see `grpc.rs`).

use svcos_common::config::PoolConfig;
use svcos_common::config::change::MAX_POOLS;

use crate::agent::AgentError;

/// One change to the pool list; indexes are positions in the configured list (as `GetPools`
/// numbers them).
#[derive(Debug, Clone, PartialEq)]
pub enum PoolEdit {
    /// Make the pool first in priority, the others keeping their order behind it.
    Switch(u32),
    /// Enable or disable a pool.
    SetEnabled(u32, bool),
    /// Append a pool, last in priority.
    Add(PoolConfig),
    /// Remove a pool; never the last one (the miner would have nowhere to send work).
    Remove(u32),
    /// A new priority order: every pool index once, best first.
    Order(Vec<u32>),
}

/// The list after `edit`, and the index the edit concerns (for `Add`, the new pool's).
/// Nothing is changed on a refusal.
pub fn apply(pools: &[PoolConfig], edit: &PoolEdit) -> Result<(Vec<PoolConfig>, u32), AgentError> {
    let at = |index: u32| {
        if (index as usize) < pools.len() {
            Ok(index as usize)
        } else {
            Err(AgentError::NoSuchPool(index))
        }
    };
    let mut out = pools.to_vec();
    match edit {
        PoolEdit::Switch(index) => {
            let first = at(*index)?;
            let mut order: Vec<u32> = ranked(pools)
                .into_iter()
                .filter(|i| *i as usize != first)
                .collect();
            order.insert(0, *index);
            set_order(&mut out, &order)?;
            Ok((out, *index))
        }
        PoolEdit::SetEnabled(index, enabled) => {
            out[at(*index)?].enabled = *enabled;
            Ok((out, *index))
        }
        PoolEdit::Add(cfg) => {
            let index = pools.len();
            if index >= MAX_POOLS {
                return Err(AgentError::Invalid(
                    svcos_common::config::ConfigError::invalid(
                        "pools",
                        format!("at most {MAX_POOLS} pools"),
                    ),
                ));
            }
            let mut cfg = cfg.clone();
            cfg.priority = pools.iter().map(|p| p.priority + 1).max().unwrap_or(0);
            cfg.validate(&format!("pools[{index}]"))
                .map_err(AgentError::Invalid)?;
            out.push(cfg);
            Ok((out, index as u32))
        }
        PoolEdit::Remove(index) => {
            let i = at(*index)?;
            if pools.len() == 1 {
                return Err(AgentError::LastPool(*index));
            }
            out.remove(i);
            Ok((out, *index))
        }
        PoolEdit::Order(order) => {
            set_order(&mut out, order)?;
            Ok((out, 0))
        }
    }
}

/// Pool indexes best first: by priority, ties in list order.
fn ranked(pools: &[PoolConfig]) -> Vec<u32> {
    let mut v: Vec<(u32, usize)> = pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.priority, i))
        .collect();
    v.sort();
    v.into_iter().map(|(_, i)| i as u32).collect()
}

/// Priorities by position in `order`, which must name every index once.
fn set_order(pools: &mut [PoolConfig], order: &[u32]) -> Result<(), AgentError> {
    let mut seen = order.to_vec();
    seen.sort_unstable();
    if seen != (0..pools.len() as u32).collect::<Vec<_>>() {
        return Err(AgentError::BadOrder);
    }
    for (priority, index) in order.iter().enumerate() {
        pools[*index as usize].priority = priority as u32;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(n: u32) -> Vec<PoolConfig> {
        (0..n)
            .map(|i| PoolConfig {
                url: format!("stratum+tcp://127.0.0.1:{}", 3333 + i),
                user: format!("w{i}"),
                priority: i,
                ..PoolConfig::default()
            })
            .collect()
    }

    fn priorities(p: &[PoolConfig]) -> Vec<u32> {
        p.iter().map(|p| p.priority).collect()
    }

    #[test]
    fn a_priority_order_must_list_every_pool_once() {
        for bad in [
            vec![0, 1],
            vec![0, 1, 1],
            vec![0, 1, 3],
            vec![0, 1, 2, 0],
            vec![],
        ] {
            let r = apply(&pools(3), &PoolEdit::Order(bad.clone()));
            assert!(matches!(r, Err(AgentError::BadOrder)), "{bad:?}: {r:?}");
        }
        let (out, _) = apply(&pools(3), &PoolEdit::Order(vec![2, 0, 1])).unwrap();
        // Pool 2 first, then 0, then 1: priorities by list position.
        assert_eq!(priorities(&out), vec![1, 2, 0]);
    }

    #[test]
    fn a_switch_puts_the_pool_first_and_keeps_the_others_in_order() {
        let (out, index) = apply(&pools(4), &PoolEdit::Switch(2)).unwrap();
        assert_eq!((priorities(&out), index), (vec![1, 2, 0, 3], 2));
        let r = apply(&pools(4), &PoolEdit::Switch(4));
        assert!(matches!(r, Err(AgentError::NoSuchPool(4))), "{r:?}");
    }

    #[test]
    fn add_validates_and_appends_last() {
        let bad = PoolConfig {
            url: "http://not-a-pool".into(),
            user: "x".into(),
            ..Default::default()
        };
        let r = apply(&pools(2), &PoolEdit::Add(bad));
        assert!(
            matches!(&r, Err(AgentError::Invalid(e)) if e.field() == Some("pools[2].url")),
            "{r:?}"
        );
        let good = pools(3).pop().unwrap();
        let (out, index) = apply(&pools(2), &PoolEdit::Add(good)).unwrap();
        assert_eq!((priorities(&out), index), (vec![0, 1, 2], 2));
        let full = pools(MAX_POOLS as u32);
        let r = apply(&full, &PoolEdit::Add(pools(1).remove(0)));
        assert!(matches!(r, Err(AgentError::Invalid(_))), "{r:?}");
    }

    #[test]
    fn remove_refuses_an_unknown_index_and_the_last_pool() {
        let r = apply(&pools(2), &PoolEdit::Remove(2));
        assert!(matches!(r, Err(AgentError::NoSuchPool(2))), "{r:?}");
        let (out, _) = apply(&pools(2), &PoolEdit::Remove(0)).unwrap();
        assert_eq!(out, pools(2)[1..].to_vec());
        let r = apply(&out, &PoolEdit::Remove(0));
        assert!(matches!(r, Err(AgentError::LastPool(0))), "{r:?}");
    }

    #[test]
    fn enable_and_disable_touch_only_their_pool() {
        let (out, _) = apply(&pools(2), &PoolEdit::SetEnabled(1, false)).unwrap();
        assert_eq!(
            out.iter().map(|p| p.enabled).collect::<Vec<_>>(),
            [true, false]
        );
        let r = apply(&pools(2), &PoolEdit::SetEnabled(9, true));
        assert!(matches!(r, Err(AgentError::NoSuchPool(9))), "{r:?}");
    }
}
