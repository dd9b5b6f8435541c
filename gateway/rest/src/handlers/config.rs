//! Configuration: read, merge-write, export, import, backup manifest, donation, safety warnings,
//! the audit log (kept by the tuner), hostname and mode.
//!
//! Every write goes through [`apply`]: parse into the typed [`Config`] (naming the offending
//! field), validate, save atomically to `layout.config_path`, swap the in-memory copy, tell the
//! owning services through their `ReloadConfig`, and report which changed keys need a restart.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use svcos_common::config::{Config, ConfigError, Mode};
use svcos_proto::hwagent::v1::MiningState;
use svcos_proto::hwagent::v1::ReloadConfigRequest as HwReload;
use svcos_proto::stratum::v1::ReloadConfigRequest as StratumReload;
use svcos_proto::tuner::v1::{ListAuditRequest, ReconcileRequest};

use super::{ApiResult, json, parse_body};
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::{AppState, route};

/// What replaces a secret in GET answers; sending it back keeps the stored secret.
pub use svcos_common::redact::SECRET_MASK;
use svcos_common::redact::{is_masked_url, mask_url_userinfo};

/// Sections a `"mode": "replace"` import or a restore must contain: without them the miner
/// would fall back to defaults that stop mining (no pool) or change how it is reached (binds).
pub const REQUIRED_SECTIONS: [&str; 4] = ["system", "api", "legacy", "pools"];
/// The previous config kept by an import or restore, for one-step undo.
const PREVIOUS_FILE: &str = "config.previous.toml";

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/config", Bearer, P, Config, Full, "The whole typed config (secrets masked)", get_config),
        route!(POST "/api/config", Bearer, P, Config, Full, "Merge a partial config, validate, save atomically, reload owners", post_config),
        route!(GET "/api/config/backup/manifest", Bearer, P, Config, Full, "What a backup contains and how to restore it", backup_manifest),
        route!(GET "/api/config/donation", Bearer, P, Config, Full, "Donation settings and what was mined for it", get_donation),
        route!(POST "/api/config/donation", Bearer, P, Config, Full, "Change donation settings (effective after a restart)", post_donation),
        route!(GET "/api/config/export", Bearer, P, Config, Full, "The config file as TOML (includes pool passwords)", export),
        route!(POST "/api/config/import", Bearer, P, Config, Full, "Merge (or with mode=replace, replace) the config from TOML or JSON; keeps the previous config for undo", import),
        route!(POST "/api/config/restore", Bearer, U, Config, Full, "Restore a whole backup (exported TOML): validated, then applied; the previous config is kept for undo", restore),
        route!(POST "/api/config/restore/undo", Bearer, U, Config, Full, "Put back the config an import or restore replaced (one step)", undo),
        route!(GET "/api/donation/info", Open, U, Config, Full, "Donation disclosure", donation_info),
        route!(GET "/api/safety/warnings", Open, P, Config, Full, "Current safety warnings", safety_warnings),
        route!(GET "/api/audit-log", Bearer, U, Config, Full, "Recent writes through the API", audit_log),
        route!(GET "/api/history/audit", Bearer, P, Telemetry, Full, "Recent writes through the API", audit_log),
        route!(POST "/api/network/hostname", Bearer, P, Fleet, Full, "Set [system].hostname", set_hostname),
        route!(POST "/api/setup/step4-mode", Bearer, P, Auth, Full, "Set the operating mode", set_mode),
    ]
}

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
fn key_effect(key: &str) -> (&'static str, bool) {
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
fn changed_keys(old: &Value, new: &Value, prefix: &str, out: &mut Vec<String>) {
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

fn previous_path(state: &AppState) -> std::path::PathBuf {
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

fn reload_result(service: &str, r: Result<(), tonic::Status>) -> Value {
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

fn mask_url_member(v: Option<&mut Value>) {
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
fn locate_bad_field(merged: &Value, patch: &Value) -> String {
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

async fn get_config(State(state): State<AppState>) -> Response {
    let config = state.config();
    json(json!({
        "schema": "svcos.api.config.v1",
        "config": masked(&config),
        "secret_mask": SECRET_MASK,
    }))
}

/// Merge a JSON patch over the current config and apply it.
async fn patch_and_apply(state: &AppState, patch: Value, invalid: ErrorCode) -> ApiResult {
    if !patch.is_object() {
        return Err(ApiError::bad_request("expected a JSON object").code(invalid));
    }
    let old = state.config();
    let mut merged = serde_json::to_value(&*old).unwrap_or(Value::Null);
    merge(&mut merged, &patch);
    let mut new = config_from_json(&merged, &patch).map_err(|e| validation_error(invalid, &e))?;
    restore_secrets(&mut new, &old);
    let report = apply(state, new)
        .await
        .map_err(|e| e.into_api(invalid, None))?;
    Ok(json(report))
}

async fn post_config(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let patch: Value = parse_body(&headers, &body)?;
    // Accept both the GET shape ({"config": {...}}) and a bare partial config.
    let patch = match patch.get("config") {
        Some(inner) if patch.as_object().is_some_and(|o| o.len() == 1) => inner.clone(),
        _ => patch,
    };
    patch_and_apply(&state, patch, ErrorCode::ConfigValidation).await
}

async fn export(State(state): State<AppState>) -> Response {
    let text = state.config().to_toml();
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/toml"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"svcos-config.toml\""),
            ),
        ],
        text,
    )
        .into_response()
}

/// How an imported document meets the current config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ImportMode {
    /// Sections and keys in the document replace the current ones; the rest stays.
    #[default]
    Merge,
    /// The document is the whole config; it must contain every [`REQUIRED_SECTIONS`] member,
    /// and what it leaves out takes its default.
    Replace,
}

/// `{"toml": "<TOML>"}` or `{"config": {...}}`, with an optional `"mode"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportBody {
    toml: Option<String>,
    config: Option<Value>,
    #[serde(default)]
    mode: ImportMode,
}

/// The document of an import or restore as JSON (TOML parsed, nothing filled in).
fn import_document(toml: Option<String>, config: Option<Value>) -> ApiResult<Value> {
    let doc = match (toml, config) {
        (Some(text), None) => Config::toml_document(&text, std::path::Path::new("import"))
            .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?,
        (None, Some(v)) => match v {
            // Accept the GET /api/config answer as it is.
            Value::Object(mut o)
                if o.get("schema").and_then(Value::as_str) == Some("svcos.api.config.v1") =>
            {
                o.remove("config").unwrap_or(Value::Null)
            }
            v => v,
        },
        _ => {
            return Err(
                ApiError::bad_request("send exactly one of \"toml\" or \"config\"")
                    .code(ErrorCode::ConfigValidation),
            );
        }
    };
    if !doc.is_object() {
        return Err(
            ApiError::bad_request("the document must be a config object")
                .code(ErrorCode::ConfigValidation),
        );
    }
    Ok(doc)
}

/// The config an import or restore would put in force: `doc` merged over the current config
/// (or over the defaults for a replace), echoed masks restored, validated by the one validator,
/// with at least one pool.
fn imported_config(state: &AppState, doc: &Value, mode: ImportMode) -> ApiResult<Config> {
    let invalid = |e: ConfigError| validation_error(ErrorCode::ConfigValidation, &e);
    let old = state.config();
    let mut merged = match mode {
        ImportMode::Merge => serde_json::to_value(&*old).unwrap_or(Value::Null),
        ImportMode::Replace => {
            if let Some(missing) = REQUIRED_SECTIONS.iter().find(|s| doc.get(**s).is_none()) {
                return Err(invalid(ConfigError::invalid(
                    *missing,
                    format!(
                        "a full replace must contain the sections {}; send mode \"merge\" to change only some",
                        REQUIRED_SECTIONS.join(", ")
                    ),
                )));
            }
            serde_json::to_value(Config::default()).unwrap_or(Value::Null)
        }
    };
    merge(&mut merged, doc);
    let mut new = config_from_json(&merged, doc).map_err(invalid)?;
    restore_secrets(&mut new, &old);
    if new.pools.is_empty() {
        return Err(invalid(ConfigError::invalid(
            "pools",
            "the imported config has no pool: the miner would stop mining",
        )));
    }
    new.validate().map_err(invalid)?;
    Ok(new)
}

async fn import(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ImportBody = parse_body(&headers, &body)?;
    let doc = import_document(b.toml, b.config)?;
    let new = imported_config(&state, &doc, b.mode)?;
    write_with_undo(&state, new, Previous::Keep).await
}

async fn write_with_undo(state: &AppState, new: Config, previous: Previous) -> ApiResult {
    let mut report = apply_with(state, new, previous)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))?;
    report["undo"] = undo_info(state);
    Ok(json(report))
}

fn undo_info(state: &AppState) -> Value {
    json!({
        "available": previous_path(state).exists(),
        "route": "POST /api/config/restore/undo",
    })
}

/// `{"toml": "<a backup from GET /api/config/export>"}` (or `{"config": {...}}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    toml: Option<String>,
    config: Option<Value>,
}

/// A restore is a whole backup: replace semantics, the same validator as every other write.
async fn restore(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: RestoreBody = parse_body(&headers, &body)?;
    let doc = import_document(b.toml, b.config)?;
    let new = imported_config(&state, &doc, ImportMode::Replace)?;
    write_with_undo(&state, new, Previous::Keep).await
}

/// Put back the config the last import or restore replaced, once.
async fn undo(State(state): State<AppState>) -> ApiResult {
    let path = previous_path(&state);
    let previous = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                ApiError::new(axum::http::StatusCode::CONFLICT, "nothing to undo")
                    .code(ErrorCode::UnclassifiedError)
                    .detail("no import or restore has replaced the config since the last undo")
                    .suggestion(
                        "GET /api/config/backup/manifest shows whether an undo is available",
                    ),
            );
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read the previous config");
            return Err(ApiError::internal("the previous config could not be read"));
        }
    };
    // The kept copy passed the validator when it was in force; check again anyway (a newer
    // firmware may have tightened a rule), and refuse rather than apply something broken.
    let config = Config::from_toml_str(&previous, std::path::Path::new("previous config"))
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?;
    write_with_undo(&state, config, Previous::Consume).await
}

async fn backup_manifest(State(state): State<AppState>) -> ApiResult {
    let path = &state.layout.config_path;
    let file = match std::fs::read(path) {
        Ok(bytes) => {
            let modified = std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs());
            json!({
                "name": "config.toml",
                "present": true,
                "bytes": bytes.len(),
                "sha256": hex::encode(Sha256::digest(&bytes)),
                "modified_unix": modified,
            })
        }
        Err(_) => {
            json!({"name": "config.toml", "present": false, "note": "no file yet: the defaults are in use"})
        }
    };
    Ok(json(json!({
        "schema": "svcos.api.config.backup_manifest.v1",
        "files": [file],
        "contains_secrets": ["pools[].password", "mqtt.password", "webhook.hooks[].secret"],
        "excluded": ["the auth record (password hash and sessions) is never exported"],
        "export": "GET /api/config/export",
        "restore": "POST /api/config/restore with {\"toml\": \"<exported text>\"} (validated first; the replaced config is kept)",
        "import": "POST /api/config/import with {\"toml\": \"...\"} merges over the current config; \"mode\": \"replace\" replaces it",
        "undo": undo_info(&state),
    })))
}

async fn get_donation(State(state): State<AppState>) -> Response {
    let config = state.config();
    let mut s = state.peers.stratum.clone();
    let live = s
        .get_donation(svcos_proto::stratum::v1::GetDonationRequest {})
        .await
        .ok()
        .map(|r| {
            let r = r.into_inner();
            json!({
                "enabled": r.enabled, "percent": r.percent, "active_now": r.active_now,
                "mined_s_current_cycle": r.mined_s_current_cycle, "mined_s_total": r.mined_s_total,
            })
        });
    json(json!({
        "schema": "svcos.api.config.donation.v1",
        "config": config.donation,
        "running": live,
        "note": "saved changes take effect after stratum-agent restarts",
    }))
}

async fn post_donation(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let patch: Value = parse_body(&headers, &body)?;
    patch_and_apply(
        &state,
        json!({ "donation": patch }),
        ErrorCode::ConfigValidation,
    )
    .await
}

/// The disclosure text: what the addresses prove and what they do not.
pub const DONATION_TRUST_MODEL: &str = "These are the configured donation destinations only. \
The explorer link shows the payout address; it does not prove who owns the wallet, that \
donation time is actually routed there, that shares were accepted, or any payout percentage. \
Donation is optional, off by default, 0-5 % of Stratum V1 mining time per cycle, and never \
guarantees a fraction of hashrate, shares, payouts or wall time.";

async fn donation_info(State(state): State<AppState>) -> Response {
    let d = state.config().donation.clone();
    json(json!({
        "schema": "svcos.api.donation.info.v1",
        "enabled": d.enabled,
        "percent": d.percent,
        "cycle_s": d.cycle_s,
        "pool_url": d.pool_url,
        "payout_address": d.payout_address,
        "explorer_url": d.explorer_url,
        "trust_model": DONATION_TRUST_MODEL,
        "changes_take_effect": "after a daemon restart",
    }))
}

async fn safety_warnings(State(state): State<AppState>) -> Response {
    json(safety_warnings_body(&state))
}

/// The current safety warnings (also what the setup wizard records as acknowledged).
pub fn safety_warnings_body(state: &AppState) -> Value {
    let config = state.config();
    let mut warnings = Vec::new();
    let mut warn = |id: &str, severity: &str, message: String| {
        warnings.push(json!({"id": id, "severity": severity, "message": message}));
    };
    if config.system.mode == Mode::Hacker {
        warn(
            "hacker_mode",
            "warning",
            "Hacker mode is on: raw debug endpoints can damage hardware".into(),
        );
    }
    if config.donation.enabled && config.donation.percent > 0.0 {
        warn(
            "donation_enabled",
            "info",
            format!("{} % of mining time is donated", config.donation.percent),
        );
    }
    if config.thermal.fan_manual_percent > 0 {
        warn(
            "manual_fan",
            "warning",
            format!(
                "fans are fixed at {} %: temperature is not regulated",
                config.thermal.fan_manual_percent
            ),
        );
    }
    for r in state.recovered_state_files() {
        warn(
            "state_file_recovered",
            "warning",
            format!(
                "{}'s {} was damaged: it was moved aside as {} and defaults were used",
                r.service, r.file, r.aside
            ),
        );
    }
    match state.telemetry() {
        None => warn(
            "hw_agent_down",
            "warning",
            "no live telemetry: hw-agent is not reachable".into(),
        ),
        Some(t) => {
            if t.state() == MiningState::Overheat || t.temp_max_c >= config.thermal.hot_temp_c {
                warn(
                    "overheat",
                    "critical",
                    format!(
                        "chips at {:.1} C (limit {:.0} C)",
                        t.temp_max_c, config.thermal.hot_temp_c
                    ),
                );
            }
            if t.fans.iter().any(|f| f.stalled) {
                warn("fan_stalled", "critical", "a fan has stalled".into());
            }
            if t.psu.as_ref().is_some_and(|p| !p.fault.is_empty()) {
                warn("psu_fault", "critical", "the PSU reports a fault".into());
            }
            if t.state() == MiningState::Fault {
                warn("hardware_fault", "critical", t.state_reason.clone());
            }
        }
    }
    json!({
        "schema": "svcos.api.safety.warnings.v1",
        "count": warnings.len(),
        "warnings": warnings,
    })
}

async fn audit_log(State(state): State<AppState>) -> ApiResult {
    let r = state
        .peers
        .history
        .clone()
        .list_audit(ListAuditRequest { limit: 0 })
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?;
    let entries: Vec<Value> = r
        .into_inner()
        .entries
        .into_iter()
        .map(|e| {
            json!({"timestamp_ms": e.timestamp_ms, "method": e.method, "path": e.path,
                   "status": e.status, "session_id": (!e.session_id.is_empty()).then_some(e.session_id)})
        })
        .collect();
    Ok(json(json!({
        "schema": "svcos.api.audit.v1",
        "scope": "writes through the API, kept across restarts (newest last, at most 256 here)",
        "entries": entries,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostnameBody {
    hostname: String,
}

async fn set_hostname(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: HostnameBody = parse_body(&headers, &body)?;
    patch_and_apply(
        &state,
        json!({"system": {"hostname": b.hostname}}),
        ErrorCode::ConfigValidation,
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeBody {
    mode: Value,
}

async fn set_mode(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ModeBody = parse_body(&headers, &body)?;
    if serde_json::from_value::<Mode>(b.mode.clone()).is_err() {
        return Err(validation_error(
            ErrorCode::ConfigValidation,
            &ConfigError::invalid("system.mode", "one of home, standard, hacker"),
        ));
    }
    patch_and_apply(
        &state,
        json!({"system": {"mode": b.mode}}),
        ErrorCode::ConfigValidation,
    )
    .await
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
fn stored_secret(old: &Config, url: &str, index: usize) -> String {
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

#[cfg(test)]
mod tests {
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
    }

    #[test]
    fn masked_hides_pool_passwords() {
        let mut c = Config::default();
        c.pools.push(svcos_common::config::PoolConfig {
            url: "stratum+tcp://a:1".into(),
            user: "u".into(),
            password: "secret".into(),
            ..Default::default()
        });
        let v = masked(&c);
        assert_eq!(v["pools"][0]["password"], SECRET_MASK);
        let mut back: Config = serde_json::from_value(v).unwrap();
        unmask_pools(&mut back.pools, &c);
        assert_eq!(back.pools[0].password, "secret");
    }
}
