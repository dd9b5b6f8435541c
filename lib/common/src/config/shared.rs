//! The fleet-shareable subset of the config (pools, power target, fan limits, temperature
//! target): what a fleet tool copies from one miner to others, its fingerprint, and how a posted
//! subset becomes a whole config. The gateway's `/api/config/shared` maps these.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::change::{config_from_json, merge, parse_pool_list};
use super::secrets::{masked, unmask_pools};
use super::{Config, ConfigError};

/// The members of the shared subset, as (wire name, config path).
pub const SHARED_MEMBERS: &[(&str, &str)] = &[
    ("pools", "pools"),
    ("power_target_watt", "hardware.power_target_watt"),
    ("fan_min_percent", "thermal.fan_min_percent"),
    ("fan_max_percent", "thermal.fan_max_percent"),
    ("target_temp_c", "thermal.target_temp_c"),
];

/// The shared subset of a config (pool passwords masked).
pub fn shared_of(config: &Config) -> Value {
    json!({
        "pools": masked(config)["pools"],
        "power_target_watt": config.hardware.power_target_watt,
        "fan_min_percent": config.thermal.fan_min_percent,
        "fan_max_percent": config.thermal.fan_max_percent,
        "target_temp_c": config.thermal.target_temp_c,
    })
}

/// SHA-256 over the canonical shared subset, including pool passwords, so a fleet tool can
/// tell which miners differ without reading any secret.
pub fn shared_fingerprint(config: &Config) -> String {
    let mut v = shared_of(config);
    v["pools"] = serde_json::to_value(&config.pools).unwrap_or_default();
    Sha256::digest(v.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Refuse members outside `allowed`, naming the first as `section.member`.
pub fn only_members(
    members: &Map<String, Value>,
    section: &str,
    allowed: &[&str],
) -> Result<(), ConfigError> {
    match members.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ConfigError::invalid(
            format!("{section}.{k}"),
            format!("unknown member; allowed: {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

/// Why a shared subset was refused.
#[derive(Debug)]
pub enum SharedError {
    /// A non-pool member (or an unknown one) breaks a rule.
    Config(ConfigError),
    /// The pool list breaks the pool rules (the same as a pool-list write).
    Pools(ConfigError),
}

/// The config `current` becomes with a posted subset applied (not yet validated as a whole):
/// members mapped to their config paths, pools parsed by the pool-list rules with echoed masks
/// restored.
pub fn apply_shared(current: &Config, members: &Map<String, Value>) -> Result<Config, SharedError> {
    let allowed: Vec<&str> = SHARED_MEMBERS.iter().map(|(k, _)| *k).collect();
    only_members(members, "shared", &allowed).map_err(SharedError::Config)?;
    let mut patch = json!({});
    for (k, v) in members {
        let path = SHARED_MEMBERS
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, p)| *p)
            .unwrap_or_default();
        if let Some((section, field)) = path.split_once('.') {
            patch[section][field] = v.clone();
        }
    }
    let mut merged = serde_json::to_value(current).unwrap_or(Value::Null);
    merge(&mut merged, &patch);
    let mut new = config_from_json(&merged, &patch).map_err(SharedError::Config)?;
    if let Some(pools) = members.get("pools") {
        let mut pools = parse_pool_list(&json!({ "pools": pools })).map_err(SharedError::Pools)?;
        unmask_pools(&mut pools, current);
        new.pools = pools;
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::super::PoolConfig;
    use super::*;
    use crate::redact::SECRET_MASK;

    fn config() -> Config {
        let mut c = Config::default();
        c.pools.push(PoolConfig {
            url: "stratum+tcp://10.0.0.1:3333".into(),
            user: "w".into(),
            password: "secret".into(),
            ..Default::default()
        });
        c
    }

    fn members(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn subset_masks_and_fingerprint_tells_secrets_apart() {
        let a = config();
        let shared = shared_of(&a);
        assert_eq!(shared["pools"][0]["password"], SECRET_MASK);
        assert_eq!(shared.as_object().unwrap().len(), SHARED_MEMBERS.len());
        let mut b = a.clone();
        b.pools[0].password = "other".into();
        assert_eq!(shared_of(&a), shared_of(&b));
        assert_ne!(shared_fingerprint(&a), shared_fingerprint(&b));
        assert_eq!(shared_fingerprint(&a), shared_fingerprint(&a.clone()));
        assert_eq!(shared_fingerprint(&a).len(), 64);
    }

    #[test]
    fn applying_a_subset() {
        let a = config();
        // The GET subset posted back changes nothing, masks included.
        assert_eq!(apply_shared(&a, &members(shared_of(&a))).unwrap(), a);
        let new = apply_shared(
            &a,
            &members(json!({"power_target_watt": 900.0, "target_temp_c": 70.0})),
        )
        .unwrap();
        assert_eq!(
            (new.hardware.power_target_watt, new.thermal.target_temp_c),
            (900.0, 70.0)
        );
        assert_eq!(new.pools, a.pools);
        match apply_shared(&a, &members(json!({"colour": 1}))) {
            Err(SharedError::Config(e)) => assert_eq!(e.field(), Some("shared.colour")),
            other => panic!("{other:?}"),
        }
        match apply_shared(&a, &members(json!({"fan_max_percent": "max"}))) {
            Err(SharedError::Config(e)) => assert_eq!(e.field(), Some("thermal.fan_max_percent")),
            other => panic!("{other:?}"),
        }
        match apply_shared(
            &a,
            &members(json!({"pools": [{"url": "http://x:1", "user": "w"}]})),
        ) {
            Err(SharedError::Pools(e)) => assert_eq!(e.field(), Some("pools[0].url")),
            other => panic!("{other:?}"),
        }
    }
}
