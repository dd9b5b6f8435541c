//! The config write path under every route group that writes config ([`apply`],
//! [`patch_config`]: typed parse naming the field, validate, atomic save, swap, owner reload,
//! restart report), secret masking and the pool-list parser.

use serde_json::{Map, Value, json};
use svcos_common::config::{Config, ConfigError, PoolConfig};
use svcos_common::redact::{is_masked_url, mask_url_userinfo};
use svcos_proto::hwagent::v1::ReloadConfigRequest as HwReload;
use svcos_proto::stratum::v1::ReloadConfigRequest as StratumReload;
use svcos_proto::tuner::v1::ReconcileRequest;

use crate::AppState;
use crate::envelope::{ApiError, ErrorCode};

/// Most pools a list may hold.
pub const MAX_POOLS: usize = 16;

/// What replaces a secret in GET answers; sending it back keeps the stored secret.
pub use svcos_common::redact::SECRET_MASK;

/// Sections a `"mode": "replace"` import or a restore must contain: without them the miner
/// would fall back to defaults that stop mining (no pool) or change how it is reached (binds).
pub const REQUIRED_SECTIONS: [&str; 4] = ["system", "api", "legacy", "pools"];
/// The previous config kept by an import or restore, for one-step undo.
pub const PREVIOUS_FILE: &str = "config.previous.toml";

/// Why a config write failed.
#[derive(Debug)]
pub enum ApplyError {
    /// The new config breaks a rule (names the field).
    Invalid(ConfigError),
    /// The config was valid but could not be written.
    Write(ConfigError),
}

/// 400 `config_validation` naming the field.
pub fn validation_error(code: ErrorCode, e: &ConfigError) -> ApiError {
    let (field, message) = match e {
        ConfigError::Invalid { field, message } => (field.clone(), message.clone()),
        other => (String::new(), other.to_string()),
    };
    let mut err = ApiError::bad_request(if field.is_empty() {
        "invalid configuration".to_string()
    } else {
        format!("invalid value for {field}")
    })
    .code(code)
    .detail(message)
    .suggestion("fix the named field and resend");
    if !field.is_empty() {
        err = err.with("field", field);
    }
    err
}

impl ApplyError {
    /// The envelope for this failure (`config_validation` or a 500).
    pub fn into_api(self, invalid: ErrorCode, write: Option<ErrorCode>) -> ApiError {
        match self {
            ApplyError::Invalid(e) => validation_error(invalid, &e),
            ApplyError::Write(e) => {
                tracing::error!(error = %e, "config write failed");
                ApiError::internal("the configuration could not be saved")
                    .code(write.unwrap_or(ErrorCode::UnclassifiedError))
                    .detail(e.to_string())
                    .suggestion("check free space and permissions of the config directory")
            }
        }
    }
}

/// Which service owns a key and whether a change needs its restart.
pub fn key_effect(key: &str) -> (&'static str, bool) {
    let section = key.split(['.', '[']).next().unwrap_or(key);
    match section {
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
        "supervisor" => ("supervisor", true),
        "sim" => ("hw-sim", true),
        // The gateway's own integration tasks re-read these at once.
        "mqtt" | "webhook" => ("gateway", false),
        // hw-agent enforces the hard limits and calibrates the PSU reading.
        "power" => ("hw-agent", false),
        // Read by the power governor in the tuner process.
        "home" | "energy" => ("tuner", false),
        _ => ("gateway", true),
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

/// Validate, save atomically, swap, reload owners; returns the write report.
pub async fn apply(state: &AppState, new: Config) -> Result<Value, ApplyError> {
    apply_with(state, new, Previous::Leave).await
}

/// What a write does with the kept previous config (the one-step undo of import and restore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// An ordinary write: the undo slot is left as it is.
    Leave,
    /// A bulk replacement: the config being replaced becomes the undo slot.
    Keep,
    /// The undo itself: the slot is used up.
    Consume,
}

pub fn previous_path(state: &AppState) -> std::path::PathBuf {
    state
        .layout
        .service_state_dir(svcos_common::ServiceName::Gateway)
        .join(PREVIOUS_FILE)
}

/// [`apply`], keeping or consuming the undo slot under the same write lock.
pub async fn apply_with(
    state: &AppState,
    new: Config,
    previous: Previous,
) -> Result<Value, ApplyError> {
    let _write = state.config_write.lock().await;
    new.validate().map_err(ApplyError::Invalid)?;
    let old = state.config();
    if previous == Previous::Keep {
        // Written before the new config: a crash in between leaves the old config in force and
        // an undo that changes nothing, never a lost config.
        let path = previous_path(state);
        path.parent()
            .map_or(Ok(()), |d| svcos_common::fsutil::ensure_dir(d, 0o700))
            .and_then(|()| {
                svcos_common::fsutil::atomic_write(&path, old.to_toml().as_bytes(), 0o600)
            })
            .map_err(|source| ApplyError::Write(ConfigError::Write { path, source }))?;
    }
    new.save(&state.layout.config_path).map_err(|e| match e {
        ConfigError::Invalid { .. } => ApplyError::Invalid(e),
        other => ApplyError::Write(other),
    })?;
    state.set_config(new.clone());
    if previous == Previous::Consume {
        let _ = std::fs::remove_file(previous_path(state));
    }
    let old_v = serde_json::to_value(&*old).unwrap_or(Value::Null);
    let new_v = serde_json::to_value(&new).unwrap_or(Value::Null);
    let mut changed = Vec::new();
    changed_keys(&old_v, &new_v, "", &mut changed);
    let mut restart_required = Vec::new();
    let mut live = Vec::new();
    let mut reload_hw = false;
    let mut reload_stratum = false;
    let mut reconcile_power = false;
    for key in &changed {
        let (service, restart) = key_effect(key);
        if restart {
            restart_required.push(json!({"key": key, "service": service}));
        } else {
            live.push(key.clone());
            reload_hw |= service == "hw-agent";
            reload_stratum |= service == "stratum-agent";
            reconcile_power |= service == "tuner";
        }
    }
    let mut reloaded = Vec::new();
    if reload_hw {
        let mut hw = state.peers.hw.clone();
        reloaded.push(reload_result(
            "hw-agent",
            hw.reload_config(HwReload {}).await.map(|_| ()),
        ));
    }
    // A reload resets hw-agent's target to the file's; the governor re-arbitrates at once
    // instead of at its next tick.
    if reload_hw || reconcile_power {
        let mut p = state.peers.power.clone();
        reloaded.push(reload_result(
            "tuner",
            p.reconcile(ReconcileRequest {}).await.map(|_| ()),
        ));
    }
    if reload_stratum {
        let mut s = state.peers.stratum.clone();
        reloaded.push(reload_result(
            "stratum-agent",
            s.reload_config(StratumReload {}).await.map(|_| ()),
        ));
    }
    Ok(json!({
        "schema": "svcos.api.config.write.v1",
        "saved": true,
        "changed": changed,
        "applied_live": live,
        "restart_required": restart_required,
        "reloaded": reloaded,
    }))
}

pub fn reload_result(service: &str, r: Result<(), tonic::Status>) -> Value {
    match r {
        Ok(()) => json!({"service": service, "ok": true}),
        Err(s) => {
            tracing::warn!(peer = service, code = ?s.code(), "ReloadConfig failed; the service reads the file when it starts");
            json!({"service": service, "ok": false, "error": s.message()})
        }
    }
}

/// The config as JSON with secrets masked (pool passwords, credentials inside pool URLs, the
/// donation pool URL's, MQTT and webhook secrets).
pub fn masked(config: &Config) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or(Value::Null);
    if let Some(pools) = v.get_mut("pools").and_then(Value::as_array_mut) {
        for p in pools {
            if let Some(pw) = p.get_mut("password") {
                *pw = Value::String(SECRET_MASK.into());
            }
            mask_url_member(p.get_mut("url"));
        }
    }
    mask_url_member(v.pointer_mut("/donation/pool_url"));
    mask_secrets(&mut v);
    v
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

pub fn mask_url_member(v: Option<&mut Value>) {
    if let Some(Value::String(url)) = v {
        let masked = mask_url_userinfo(url).into_owned();
        *url = masked;
    }
}

/// Put stored pool secrets back where a client echoed the mask: the password of the pool with
/// the same URL and user (else the same position), and a URL whose credentials were masked.
pub fn unmask_pools(pools: &mut [svcos_common::config::PoolConfig], old: &Config) {
    for (i, p) in pools.iter_mut().enumerate() {
        if is_masked_url(&p.url) {
            let shown = p.url.clone();
            let same = |o: &&svcos_common::config::PoolConfig| mask_url_userinfo(&o.url) == shown;
            let stored = old
                .pools
                .get(i)
                .filter(same)
                .or_else(|| old.pools.iter().find(same))
                .map(|o| o.url.clone());
            if let Some(url) = stored {
                p.url = url;
            }
        }
        if p.password == SECRET_MASK {
            p.password = old
                .pools
                .iter()
                .find(|o| o.url == p.url && o.user == p.user)
                .or_else(|| old.pools.get(i))
                .map(|o| o.password.clone())
                .unwrap_or_else(|| "x".into());
        }
    }
}

/// Every secret a client may echo masked: pools, donation URL, MQTT, webhooks.
pub fn restore_secrets(new: &mut Config, old: &Config) {
    unmask_pools(&mut new.pools, old);
    if is_masked_url(&new.donation.pool_url)
        && mask_url_userinfo(&old.donation.pool_url) == new.donation.pool_url
    {
        new.donation.pool_url = old.donation.pool_url.clone();
    }
    unmask_secrets(new, old);
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

/// Replace `mqtt.password` and `webhook.hooks[].secret` by the mask in a JSON config.
pub fn mask_secrets(v: &mut Value) {
    let mask = |s: &mut Value| {
        if s.as_str().is_some_and(|s| !s.is_empty()) {
            *s = Value::String(SECRET_MASK.into());
        }
    };
    if let Some(pw) = v.pointer_mut("/mqtt/password") {
        mask(pw);
    }
    if let Some(hooks) = v
        .pointer_mut("/webhook/hooks")
        .and_then(Value::as_array_mut)
    {
        for h in hooks {
            if let Some(s) = h.get_mut("secret") {
                mask(s);
            }
        }
    }
}

/// The stored secret for a hook: same URL first, else the same position.
pub fn stored_secret(old: &Config, url: &str, index: usize) -> String {
    let hooks = &old.webhook.hooks;
    hooks
        .iter()
        .find(|h| h.url == url)
        .or_else(|| hooks.get(index))
        .map(|h| h.secret.clone())
        .unwrap_or_default()
}

/// Put stored secrets back where a client echoed the mask.
pub fn unmask_secrets(new: &mut Config, old: &Config) {
    if new.mqtt.password == SECRET_MASK {
        new.mqtt.password = old.mqtt.password.clone();
    }
    for (i, h) in new.webhook.hooks.iter_mut().enumerate() {
        if h.secret == SECRET_MASK {
            h.secret = stored_secret(old, &h.url, i);
        }
    }
}

/// Merge a JSON patch over the current config, validate and apply it (400
/// `config_validation` naming the field on a bad value).
pub async fn patch_config(state: &AppState, patch: Value) -> Result<Value, ApiError> {
    let old = state.config();
    let mut merged = serde_json::to_value(&*old).unwrap_or(Value::Null);
    merge(&mut merged, &patch);
    let mut new = config_from_json(&merged, &patch)
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?;
    unmask_pools(&mut new.pools, &old);
    apply(state, new)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))
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
