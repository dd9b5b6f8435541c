//! Config changes as the API makes them: a JSON patch merged over the typed config and parsed
//! naming the offending field, which keys changed, which service owns each and whether it must
//! restart for it, and the pool-list parser. The gateway's write path (`config_write.rs`) calls
//! these and maps their errors to HTTP; the atomic write is [`Config::save`].

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{Config, ConfigError, PoolConfig};
use crate::redact::SECRET_MASK;

/// Most pools a list may hold.
pub const MAX_POOLS: usize = 16;

/// Which service owns a key and whether a change needs its restart.
pub fn key_effect(key: &str) -> (&'static str, bool) {
    let section = key.split(['.', '[']).next().unwrap_or(key);
    match section {
        // The zone of daily windows: the tuner's power governor re-reads it at its next tick.
        "system" if key == "system.timezone" => ("tuner", false),
        "system" => ("gateway", false),
        "api" => match key {
            "api.metrics_require_auth" | "api.websocket_tickets" => ("gateway", false),
            "api.http_port" => ("proxy", true),
            // The gateway reads it per request; the proxy when it starts.
            k if k.starts_with("api.allowed_hosts") => ("proxy", true),
            _ => ("gateway", true),
        },
        "legacy" => ("legacy-tcp", true),
        "hardware" => match key {
            "hardware.driver"
            | "hardware.board"
            | "hardware.chains"
            | "hardware.chips_per_chain"
            | "hardware.i2c_bus" => ("hw-agent", true),
            k if k.starts_with("hardware.uarts") => ("hw-agent", true),
            _ => ("hw-agent", false),
        },
        "thermal" => ("hw-agent", false),
        "pools" | "stratum" => ("stratum-agent", false),
        // The spec: saved donation changes take effect only after a daemon restart.
        "donation" => ("stratum-agent", true),
        "auth" => ("auth", true),
        // The price is read per estimate from the power governor's copy, re-read each tick.
        "tuner" if matches!(key, "tuner.electricity_price_per_kwh" | "tuner.currency") => {
            ("tuner", false)
        }
        // The tuner's engine reads the rest of `[tuner]` when it starts.
        "tuner" => ("tuner", true),
        "supervisor" => ("supervisor", true),
        "sim" => ("hw-sim", true),
        // The gateway's own integration tasks re-read these at once.
        "mqtt" | "webhook" => ("gateway", false),
        // The gateway's mDNS responder re-announces (or says goodbye) at once, and the gateway
        // rewrites the LAN's networkd file at once (`crate::networkd`).
        "network" => ("gateway", false),
        // hw-agent enforces the hard limits and calibrates the PSU reading.
        "power" => ("hw-agent", false),
        // Read by the power governor in the tuner process.
        "home" | "energy" | "governor" | "swarm" => ("tuner", false),
        _ => ("gateway", true),
    }
}
/// What a write from one config to another changes and who must act on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// Leaf keys whose values differ (`thermal.target_temp_c`, `pools[0].url`).
    pub changed: Vec<String>,
    /// Keys that take effect only after their owner restarts, with the owner.
    pub restart_required: Vec<(String, &'static str)>,
    /// Keys their owner picks up without a restart.
    pub applied_live: Vec<String>,
    /// Owners of live keys, to be told to reload.
    pub reload: BTreeSet<&'static str>,
}

impl Effects {
    /// Compare two configs key by key.
    pub fn between(old: &Config, new: &Config) -> Effects {
        let old = serde_json::to_value(old).unwrap_or(Value::Null);
        let new = serde_json::to_value(new).unwrap_or(Value::Null);
        let mut effects = Effects::default();
        changed_keys(&old, &new, "", &mut effects.changed);
        for key in &effects.changed {
            let (service, restart) = key_effect(key);
            if restart {
                effects.restart_required.push((key.clone(), service));
            } else {
                effects.applied_live.push(key.clone());
                effects.reload.insert(service);
            }
        }
        effects
    }
}

/// Leaf keys (`thermal.target_temp_c`, `pools[0].url`) whose values differ.
pub fn changed_keys(old: &Value, new: &Value, prefix: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                changed_keys(
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    &p,
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b))
            if a.iter().all(Value::is_object) && b.iter().all(Value::is_object) =>
        {
            for i in 0..a.len().max(b.len()) {
                changed_keys(
                    a.get(i).unwrap_or(&Value::Null),
                    b.get(i).unwrap_or(&Value::Null),
                    &format!("{prefix}[{i}]"),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}
/// Merge `patch` into `base`: objects merge key by key, everything else replaces.
pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}
/// Deserialize a merged JSON config; on failure name the first offending field.
pub fn config_from_json(merged: &Value, patch: &Value) -> Result<Config, ConfigError> {
    match serde_json::from_value::<Config>(merged.clone()) {
        Ok(c) => Ok(c),
        Err(e) => Err(ConfigError::invalid(
            locate_bad_field(merged, patch),
            e.to_string(),
        )),
    }
}
/// Probe the patched keys one at a time to find which one the parser rejects.
pub fn locate_bad_field(merged: &Value, patch: &Value) -> String {
    let fails = |v: Value| serde_json::from_value::<Config>(v).is_err();
    let Some(patch) = patch.as_object() else {
        return "config".into();
    };
    for (section, pv) in patch {
        let mv = merged.get(section).cloned().unwrap_or(Value::Null);
        if !fails(json!({ section: mv.clone() })) {
            continue;
        }
        match (&mv, pv) {
            (Value::Object(m), Value::Object(p)) => {
                for k in p.keys() {
                    let one =
                        Map::from_iter([(k.clone(), m.get(k).cloned().unwrap_or(Value::Null))]);
                    if fails(json!({ section: one })) {
                        return format!("{section}.{k}");
                    }
                }
            }
            (Value::Array(items), _) => {
                for (i, item) in items.iter().enumerate() {
                    if !fails(json!({ section: [item] })) {
                        continue;
                    }
                    if let Value::Object(m) = item {
                        for (k, v) in m {
                            let one = Map::from_iter([(k.clone(), v.clone())]);
                            if fails(json!({ section: [one] })) {
                                return format!("{section}[{i}].{k}");
                            }
                        }
                    }
                    return format!("{section}[{i}]");
                }
            }
            _ => {}
        }
        return section.clone();
    }
    "config".into()
}
/// Parse and validate a pool list; errors are `pool_validation` naming the field.
pub fn parse_pool_list(body: &Value) -> Result<Vec<PoolConfig>, ConfigError> {
    let list = match body {
        Value::Array(_) => body,
        Value::Object(o) => o
            .get("pools")
            .ok_or_else(|| ConfigError::invalid("pools", "expected {\"pools\": [...]}"))?,
        _ => return Err(ConfigError::invalid("pools", "expected {\"pools\": [...]}")),
    };
    if let Value::Object(o) = body
        && let Some(k) = o.keys().find(|k| *k != "pools")
    {
        return Err(ConfigError::invalid(k.clone(), "unknown member"));
    }
    let items = list
        .as_array()
        .ok_or_else(|| ConfigError::invalid("pools", "must be an array"))?;
    if items.is_empty() || items.len() > MAX_POOLS {
        return Err(ConfigError::invalid(
            "pools",
            format!("1-{MAX_POOLS} pools"),
        ));
    }
    let mut pools = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(fields) = item else {
            return Err(ConfigError::invalid(
                format!("pools[{i}]"),
                "must be an object",
            ));
        };
        for (k, v) in fields {
            if let Err(e) = serde_json::from_value::<PoolConfig>(json!({ k: v })) {
                return Err(ConfigError::invalid(
                    format!("pools[{i}].{k}"),
                    e.to_string(),
                ));
            }
        }
        let pool: PoolConfig = serde_json::from_value(item.clone())
            .map_err(|e| ConfigError::invalid(format!("pools[{i}]"), e.to_string()))?;
        if pool.password != SECRET_MASK {
            pool.validate(&format!("pools[{i}]"))?;
        } else {
            PoolConfig {
                password: "x".into(),
                ..pool.clone()
            }
            .validate(&format!("pools[{i}]"))?;
        }
        pools.push(pool);
    }
    let quota_sum: u32 = pools.iter().map(|p| p.quota).sum();
    if quota_sum != 0 && quota_sum != 100 {
        return Err(ConfigError::invalid(
            "pools[].quota",
            format!(
                "a failover split must add up to 100 (it adds up to {quota_sum}); 0 everywhere means plain failover"
            ),
        ));
    }
    Ok(pools)
}

/// Sections a `"mode": "replace"` import or a restore must contain: without them the miner
/// would fall back to defaults that stop mining (no pool) or change how it is reached (binds).
pub const REQUIRED_SECTIONS: [&str; 4] = ["system", "api", "legacy", "pools"];

/// How an imported document meets the current config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ImportMode {
    /// Sections and keys in the document replace the current ones; the rest stays.
    #[default]
    Merge,
    /// The document is the whole config; it must contain every [`REQUIRED_SECTIONS`] member,
    /// and what it leaves out takes its default.
    Replace,
}

/// The config an import or restore would put in force: `doc` merged over `current` (or over
/// the defaults for a replace), echoed masks restored from `current`, validated by the one
/// validator, with at least one pool.
pub fn import(current: &Config, doc: &Value, mode: ImportMode) -> Result<Config, ConfigError> {
    let mut merged = match mode {
        ImportMode::Merge => serde_json::to_value(current).unwrap_or(Value::Null),
        ImportMode::Replace => {
            if let Some(missing) = REQUIRED_SECTIONS.iter().find(|s| doc.get(**s).is_none()) {
                return Err(ConfigError::invalid(
                    *missing,
                    format!(
                        "a full replace must contain the sections {}; send mode \"merge\" to change only some",
                        REQUIRED_SECTIONS.join(", ")
                    ),
                ));
            }
            serde_json::to_value(Config::default()).unwrap_or(Value::Null)
        }
    };
    merge(&mut merged, doc);
    let mut new = config_from_json(&merged, doc)?;
    super::secrets::restore_secrets(&mut new, current);
    if new.pools.is_empty() {
        return Err(ConfigError::invalid(
            "pools",
            "the imported config has no pool: the miner would stop mining",
        ));
    }
    new.validate()?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bad_field_is_named() {
        let base = serde_json::to_value(Config::default()).unwrap();
        for (patch, field) in [
            (
                json!({"thermal": {"target_temp_c": "hot"}}),
                "thermal.target_temp_c",
            ),
            (json!({"api": {"bogus": 1}}), "api.bogus"),
            (json!({"nosuch": {}}), "nosuch"),
            (
                json!({"pools": [{"url": "stratum+tcp://a:1", "user": "u"}, {"url": 5}]}),
                "pools[1].url",
            ),
        ] {
            let mut merged = base.clone();
            merge(&mut merged, &patch);
            let err = config_from_json(&merged, &patch).unwrap_err();
            assert_eq!(err.field(), Some(field), "{patch}");
        }
    }

    #[test]
    fn changed_keys_and_effects() {
        let a = Config::default();
        let mut b = a.clone();
        b.thermal.target_temp_c = 70.0;
        b.api.port = 9090;
        let mut keys = Vec::new();
        changed_keys(
            &serde_json::to_value(&a).unwrap(),
            &serde_json::to_value(&b).unwrap(),
            "",
            &mut keys,
        );
        assert_eq!(keys, ["api.port", "thermal.target_temp_c"]);
        assert_eq!(key_effect("api.port"), ("gateway", true));
        assert_eq!(key_effect("thermal.target_temp_c"), ("hw-agent", false));
        assert_eq!(key_effect("donation.percent"), ("stratum-agent", true));
        assert_eq!(key_effect("pools[0].url"), ("stratum-agent", false));
        assert_eq!(key_effect("hardware.uarts[1]"), ("hw-agent", true));
        assert_eq!(key_effect("api.allowed_hosts[0]"), ("proxy", true));
    }

    #[test]
    fn tuner_keys_name_the_tuner() {
        for key in [
            "tuner.enabled",
            "tuner.power_target_watt",
            "tuner.max_temp_c",
        ] {
            assert_eq!(key_effect(key), ("tuner", true), "{key}");
        }
        // The power governor in the tuner process re-reads these live.
        assert_eq!(key_effect("home.enabled"), ("tuner", false));
        assert_eq!(
            key_effect("tuner.electricity_price_per_kwh"),
            ("tuner", false)
        );
        assert_eq!(key_effect("tuner.currency"), ("tuner", false));
        // The zone of daily windows: read live by the tuner's governor, no restart.
        assert_eq!(key_effect("system.timezone"), ("tuner", false));
        assert_eq!(key_effect("system.hostname"), ("gateway", false));
    }

    #[test]
    fn effects_split_restart_from_live() {
        let a = Config::default();
        let mut b = a.clone();
        b.thermal.target_temp_c = 70.0;
        b.tuner.enabled = !a.tuner.enabled;
        b.api.port = 9090;
        let e = Effects::between(&a, &b);
        assert_eq!(
            e.changed,
            ["api.port", "thermal.target_temp_c", "tuner.enabled"]
        );
        assert_eq!(
            e.restart_required,
            [
                ("api.port".to_string(), "gateway"),
                ("tuner.enabled".to_string(), "tuner")
            ]
        );
        assert_eq!(e.applied_live, ["thermal.target_temp_c"]);
        assert_eq!(e.reload.into_iter().collect::<Vec<_>>(), ["hw-agent"]);
        assert_eq!(Effects::between(&a, &a), Effects::default());
    }

    #[test]
    fn pool_list_errors_name_the_field() {
        let cases = [
            (
                json!({"pools": [{"url": "http://x:1", "user": "w"}]}),
                "pools[0].url",
            ),
            (
                json!({"pools": [{"url": "stratum+tcp://a:1", "user": "w"}, {"url": "stratum+tcp://b:1", "user": ""}]}),
                "pools[1].user",
            ),
            (
                json!({"pools": [{"url": "stratum+tcp://a:1", "user": "w", "quota": 30}, {"url": "stratum+tcp://b:1", "user": "w", "quota": 30}]}),
                "pools[].quota",
            ),
            (
                json!({"pools": [{"url": "stratum+tcp://a:1", "user": "w", "priority": "high"}]}),
                "pools[0].priority",
            ),
            (
                json!({"pools": [{"url": "stratum+tcp://a:1", "user": "w", "colour": 1}]}),
                "pools[0].colour",
            ),
            (json!({"pools": []}), "pools"),
            (json!({"pool": []}), "pools"),
        ];
        for (body, field) in cases {
            let err = parse_pool_list(&body).unwrap_err();
            assert_eq!(err.field(), Some(field), "{body}");
        }
        let ok = parse_pool_list(&json!([{"url": "stratum+tcp://a:3333", "user": "w"}])).unwrap();
        assert_eq!(ok.len(), 1);
    }

    fn with_pool() -> Config {
        let mut c = Config::default();
        c.pools.push(PoolConfig {
            url: "stratum+tcp://10.0.0.1:3333".into(),
            user: "w".into(),
            password: "secret".into(),
            ..Default::default()
        });
        c
    }

    #[test]
    fn import_merge_keeps_the_rest_and_the_secrets() {
        let current = with_pool();
        let mut doc = serde_json::to_value(&current).unwrap();
        doc["pools"][0]["password"] = json!(SECRET_MASK);
        doc["thermal"] = json!({"target_temp_c": 71.0});
        let doc = json!({"pools": doc["pools"], "thermal": doc["thermal"]});
        let new = import(&current, &doc, ImportMode::Merge).unwrap();
        assert_eq!(new.thermal.target_temp_c, 71.0);
        assert_eq!(new.pools[0].password, "secret");
        assert_eq!(new.api, current.api);
    }

    #[test]
    fn import_replace_needs_the_sections_and_a_pool() {
        let current = with_pool();
        let full = serde_json::to_value(&current).unwrap();
        assert_eq!(
            import(&current, &full, ImportMode::Replace).unwrap(),
            current
        );
        let mut partial = full.clone();
        partial.as_object_mut().unwrap().remove("legacy");
        let e = import(&current, &partial, ImportMode::Replace).unwrap_err();
        assert_eq!(e.field(), Some("legacy"));
        // The same document merges.
        assert!(import(&current, &partial, ImportMode::Merge).is_ok());
        let mut no_pool = full;
        no_pool["pools"] = json!([]);
        let e = import(&current, &no_pool, ImportMode::Replace).unwrap_err();
        assert_eq!(e.field(), Some("pools"));
        let bad = json!({"thermal": {"target_temp_c": "hot"}});
        let e = import(&current, &bad, ImportMode::Merge).unwrap_err();
        assert_eq!(e.field(), Some("thermal.target_temp_c"));
    }
}
