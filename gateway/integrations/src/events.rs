//! Events: derived by comparing consecutive snapshots of the streams the gateway already
//! follows (hw-agent telemetry, stratum-agent pools) and the supervisor's service list.
//!
//! [`Deriver`] is the pure core (no I/O, no clock): feed it snapshots, get event names and
//! payloads. The first snapshot of each source is only a baseline, so a gateway restart never
//! replays old transitions as news.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use svcos_proto::hwagent::v1::{ChainState, MiningState, Telemetry};
use svcos_proto::stratum::v1::{GetPoolsResponse, PoolState};
use svcos_proto::supervisor::v1::ServiceInfo;

/// One event as published on MQTT (`<base>/event`) and POSTed to webhooks.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Schema tag of the envelope.
    pub schema: &'static str,
    /// Unique id (hex); stays the same across webhook retries, so receivers can de-duplicate.
    pub id: String,
    /// Event name, one of `svcos_common::config::EVENT_NAMES`.
    pub event: &'static str,
    /// When the gateway noticed it, Unix ms.
    pub occurred_at_ms: i64,
    /// `[system].hostname` at the time.
    pub hostname: String,
    /// Event-specific members (docs/API-SHAPES.md).
    pub data: Value,
}

/// Schema tag of [`Event`].
pub const EVENT_SCHEMA: &str = "svcos.event.v1";

impl Event {
    /// A new event with a random id.
    pub fn new(event: &'static str, data: Value, hostname: &str, now_ms: i64) -> Self {
        Event {
            schema: EVENT_SCHEMA,
            id: random_id(),
            event,
            occurred_at_ms: now_ms,
            hostname: hostname.to_string(),
            data,
        }
    }
}

/// An event before it gets an id and a time.
pub type Derived = (&'static str, Value);

fn state_word(s: MiningState) -> String {
    s.as_str_name()
        .trim_start_matches("MINING_STATE_")
        .to_ascii_lowercase()
}

fn chain_word(s: ChainState) -> String {
    s.as_str_name()
        .trim_start_matches("CHAIN_STATE_")
        .to_ascii_lowercase()
}

fn pool_word(s: PoolState) -> String {
    s.as_str_name()
        .trim_start_matches("POOL_STATE_")
        .to_ascii_lowercase()
}

fn chain_faulty(s: ChainState) -> bool {
    matches!(s, ChainState::Fault | ChainState::Missing)
}

fn pool_down(s: PoolState) -> bool {
    matches!(
        s,
        PoolState::Dead | PoolState::Silent | PoolState::AuthFailed
    )
}

/// What the deriver remembers between snapshots (only the fields events depend on).
#[derive(Debug, Default)]
pub struct Deriver {
    hw_seen: bool,
    hw_up: bool,
    mining: Option<MiningState>,
    chains: BTreeMap<u32, ChainState>,
    stratum_seen: bool,
    stratum_up: bool,
    active_pool: Option<i32>,
    pools: BTreeMap<(u32, String), PoolState>,
    services: Option<BTreeMap<String, (u32, u32)>>,
}

impl Deriver {
    /// A new telemetry snapshot (`None`: hw-agent unreachable).
    pub fn on_telemetry(&mut self, t: Option<&Telemetry>) -> Vec<Derived> {
        let mut out = Vec::new();
        let Some(t) = t else {
            if self.hw_up {
                out.push(("service.unreachable", json!({"service": "hw-agent"})));
            }
            self.hw_up = false;
            // A restarted hw-agent starts a new baseline: its first snapshot is not news.
            self.mining = None;
            self.chains.clear();
            return out;
        };
        if self.hw_seen && !self.hw_up {
            out.push(("service.reachable", json!({"service": "hw-agent"})));
        }
        self.hw_seen = true;
        self.hw_up = true;
        let now = t.state();
        if let Some(before) = self.mining.replace(now)
            && before != now
        {
            let base = json!({
                "from": state_word(before),
                "to": state_word(now),
                "reason": t.state_reason,
                "temp_max_c": (t.temp_max_c * 10.0).round() / 10.0,
            });
            let leaving = match before {
                MiningState::Sleeping => Some("miner.wake"),
                MiningState::Overheat => Some("miner.overheat_cleared"),
                MiningState::Fault => Some("miner.fault_cleared"),
                _ => None,
            };
            let entering = match now {
                MiningState::Sleeping => Some("miner.sleep"),
                MiningState::Overheat => Some("miner.overheat"),
                MiningState::Fault => Some("miner.fault"),
                _ => None,
            };
            match (leaving, entering) {
                (None, None) => out.push(("miner.state_changed", base)),
                (l, e) => {
                    out.extend(l.map(|n| (n, base.clone())));
                    out.extend(e.map(|n| (n, base.clone())));
                }
            }
        }
        let first = self.chains.is_empty();
        for c in &t.chains {
            let now = c.state();
            let before = self.chains.insert(c.chain_id, now);
            let Some(before) = before.filter(|_| !first) else {
                continue;
            };
            let data = || {
                json!({
                    "chain_id": c.chain_id,
                    "from": chain_word(before),
                    "to": chain_word(now),
                    "chips_detected": c.chips_detected,
                    "chips_expected": c.chips_expected,
                    "reason": t.state_reason,
                })
            };
            if !chain_faulty(before) && chain_faulty(now) {
                out.push(("chain.fault", data()));
            } else if chain_faulty(before) && !chain_faulty(now) {
                out.push(("chain.recovered", data()));
            }
        }
        out
    }

    /// A new pool snapshot (`None`: stratum-agent unreachable).
    pub fn on_pools(&mut self, p: Option<&GetPoolsResponse>) -> Vec<Derived> {
        let mut out = Vec::new();
        let Some(p) = p else {
            if self.stratum_up {
                out.push(("service.unreachable", json!({"service": "stratum-agent"})));
            }
            self.stratum_up = false;
            self.active_pool = None;
            self.pools.clear();
            return out;
        };
        if self.stratum_seen && !self.stratum_up {
            out.push(("service.reachable", json!({"service": "stratum-agent"})));
        }
        self.stratum_seen = true;
        self.stratum_up = true;
        let url_of = |i: i32| {
            p.pools
                .iter()
                .find(|x| i >= 0 && x.index == i as u32)
                .map(|x| x.url.clone())
        };
        if let Some(before) = self.active_pool.replace(p.active_index)
            && before != p.active_index
            && before >= 0
            && p.active_index >= 0
        {
            let reason = p
                .switches
                .iter()
                .rev()
                .find(|s| s.to_index == p.active_index)
                .map(|s| s.reason.clone())
                .unwrap_or_default();
            out.push((
                "pool.switched",
                json!({
                    "from_index": before,
                    "to_index": p.active_index,
                    "from_url": url_of(before),
                    "to_url": url_of(p.active_index),
                    "reason": reason,
                }),
            ));
        }
        let first = self.pools.is_empty();
        let mut seen = BTreeMap::new();
        for pool in &p.pools {
            let key = (pool.index, pool.url.clone());
            let now = pool.state();
            if let Some(&before) = self.pools.get(&key).filter(|_| !first) {
                let data = || {
                    json!({
                        "index": pool.index,
                        "url": pool.url,
                        "from": pool_word(before),
                        "to": pool_word(now),
                        "last_error": pool.last_error,
                    })
                };
                if !pool_down(before) && pool_down(now) {
                    out.push(("pool.down", data()));
                } else if pool_down(before) && now == PoolState::Alive {
                    out.push(("pool.up", data()));
                }
            }
            seen.insert(key, now);
        }
        self.pools = seen;
        out
    }

    /// A new supervisor service list: restarts counted since the last list.
    pub fn on_services(&mut self, list: &[ServiceInfo]) -> Vec<Derived> {
        let now: BTreeMap<String, (u32, u32)> = list
            .iter()
            .map(|s| (s.name.clone(), (s.pid, s.restarts)))
            .collect();
        let mut out = Vec::new();
        if let Some(before) = &self.services {
            for s in list {
                if let Some(&(_, restarts)) = before.get(&s.name)
                    && s.restarts > restarts
                {
                    out.push((
                        "service.restarted",
                        json!({
                            "service": s.name,
                            "pid": s.pid,
                            "restarts": s.restarts,
                            "last_exit": s.last_exit,
                        }),
                    ));
                }
            }
        }
        self.services = Some(now);
        out
    }
}

/// 12 random bytes in hex. Event ids only need to be unique: should the OS refuse randomness,
/// the clock and a counter stand in rather than losing the event.
fn random_id() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes[..8].copy_from_slice(&nanos.to_be_bytes());
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[8..].copy_from_slice(&seq.to_be_bytes());
    }
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use svcos_proto::hwagent::v1::ChainTelemetry;
    use svcos_proto::stratum::v1::{PoolStatus, PoolSwitch};

    use super::*;

    fn tel(state: MiningState, chains: &[(u32, ChainState)]) -> Telemetry {
        Telemetry {
            state: state as i32,
            chains: chains
                .iter()
                .map(|&(id, s)| ChainTelemetry {
                    chain_id: id,
                    state: s as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn names(v: &[Derived]) -> Vec<&'static str> {
        v.iter().map(|(n, _)| *n).collect()
    }

    #[test]
    fn mining_transitions() {
        let mut d = Deriver::default();
        let m = MiningState::Mining;
        // The first snapshot is a baseline, even when it is a fault.
        assert!(d.on_telemetry(Some(&tel(m, &[]))).is_empty());
        for (to, want) in [
            (MiningState::Sleeping, vec!["miner.sleep"]),
            (MiningState::Mining, vec!["miner.wake"]),
            (MiningState::Overheat, vec!["miner.overheat"]),
            (
                MiningState::Sleeping,
                vec!["miner.overheat_cleared", "miner.sleep"],
            ),
            (MiningState::Bringup, vec!["miner.wake"]),
            (MiningState::Mining, vec!["miner.state_changed"]),
            (MiningState::Mining, vec![]),
            (MiningState::Fault, vec!["miner.fault"]),
            (MiningState::Mining, vec!["miner.fault_cleared"]),
        ] {
            assert_eq!(names(&d.on_telemetry(Some(&tel(to, &[])))), want, "{to:?}");
        }
        let ev = d.on_telemetry(Some(&tel(MiningState::Sleeping, &[])));
        assert_eq!(ev[0].1["from"], "mining");
        assert_eq!(ev[0].1["to"], "sleeping");
    }

    #[test]
    fn chains_and_reachability() {
        let mut d = Deriver::default();
        let m = MiningState::Mining;
        let ok = [(0, ChainState::Mining), (1, ChainState::Mining)];
        let bad = [(0, ChainState::Mining), (1, ChainState::Fault)];
        assert!(d.on_telemetry(Some(&tel(m, &bad))).is_empty());
        let ev = d.on_telemetry(Some(&tel(m, &ok)));
        assert_eq!(names(&ev), ["chain.recovered"]);
        assert_eq!(ev[0].1["chain_id"], 1);
        assert_eq!(names(&d.on_telemetry(Some(&tel(m, &bad)))), ["chain.fault"]);
        assert_eq!(names(&d.on_telemetry(None)), ["service.unreachable"]);
        assert!(d.on_telemetry(None).is_empty());
        // Back: reachable, and a fresh baseline (no chain event for the restart).
        assert_eq!(
            names(&d.on_telemetry(Some(&tel(m, &ok)))),
            ["service.reachable"]
        );
    }

    fn pools(active: i32, states: &[PoolState]) -> GetPoolsResponse {
        GetPoolsResponse {
            active_index: active,
            pools: states
                .iter()
                .enumerate()
                .map(|(i, s)| PoolStatus {
                    index: i as u32,
                    url: format!("stratum+tcp://p{i}:3333"),
                    state: *s as i32,
                    ..Default::default()
                })
                .collect(),
            switches: vec![PoolSwitch {
                to_index: 1,
                reason: "operator".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn pool_events() {
        let mut d = Deriver::default();
        let (a, x) = (PoolState::Alive, PoolState::Dead);
        assert!(d.on_pools(Some(&pools(0, &[a, a]))).is_empty());
        let ev = d.on_pools(Some(&pools(1, &[x, a])));
        assert_eq!(names(&ev), ["pool.switched", "pool.down"]);
        assert_eq!(ev[0].1["to_url"], "stratum+tcp://p1:3333");
        assert_eq!(ev[0].1["reason"], "operator");
        assert_eq!(names(&d.on_pools(Some(&pools(1, &[a, a])))), ["pool.up"]);
    }

    #[test]
    fn service_restarts() {
        let svc = |restarts| ServiceInfo {
            name: "hw-agent".into(),
            pid: 10 + restarts,
            restarts,
            ..Default::default()
        };
        let mut d = Deriver::default();
        assert!(d.on_services(&[svc(0)]).is_empty());
        assert!(d.on_services(&[svc(0)]).is_empty());
        let ev = d.on_services(&[svc(1)]);
        assert_eq!(names(&ev), ["service.restarted"]);
        assert_eq!(ev[0].1["pid"], 11);
    }
}
