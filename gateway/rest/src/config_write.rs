//! The config write path under every route group that writes config ([`apply`],
//! [`patch_config`]: validate, atomic save, swap, owner reload, restart report) and its HTTP
//! errors. What a change means (patch parsing naming the field, changed keys, their owners and
//! restarts, secret masking, the pool-list parser) belongs to the config types
//! (`svcos_common::config::{change, secrets}`), re-exported here for the route groups.

use serde_json::Value;
use svcos_api_types::config::{ConfigWriteBody, Reloaded, RestartRequired};
pub use svcos_common::config::change::{
    Effects, MAX_POOLS, REQUIRED_SECTIONS, changed_keys, config_from_json, key_effect,
    locate_bad_field, merge, parse_pool_list,
};
pub use svcos_common::config::secrets::{
    mask_secrets, mask_url_member, masked, restore_secrets, stored_secret, unmask_pools,
    unmask_secrets,
};
use svcos_common::config::{Config, ConfigError};
use svcos_proto::hwagent::v1::ReloadConfigRequest as HwReload;
use svcos_proto::stratum::v1::ReloadConfigRequest as StratumReload;
use svcos_proto::tuner::v1::ReconcileRequest;

use crate::AppState;
use crate::envelope::{ApiError, ErrorCode};

/// What replaces a secret in GET answers; sending it back keeps the stored secret.
pub use svcos_common::redact::SECRET_MASK;

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

/// Validate, save atomically, swap, reload owners; returns the write report.
pub async fn apply(state: &AppState, new: Config) -> Result<ConfigWriteBody, ApplyError> {
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
) -> Result<ConfigWriteBody, ApplyError> {
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
    let effects = Effects::between(&old, &new);
    let reload_hw = effects.reload.contains("hw-agent");
    let reload_stratum = effects.reload.contains("stratum-agent");
    let reconcile_power = effects.reload.contains("tuner");
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
    Ok(ConfigWriteBody {
        schema: "svcos.api.config.write.v1",
        saved: true,
        changed: effects.changed,
        applied_live: effects.applied_live,
        restart_required: effects
            .restart_required
            .into_iter()
            .map(|(key, service)| RestartRequired { key, service })
            .collect(),
        reloaded,
        undo: None,
    })
}

pub fn reload_result(service: &'static str, r: Result<(), tonic::Status>) -> Reloaded {
    let error = r.err().map(|s| {
        tracing::warn!(peer = service, code = ?s.code(), "ReloadConfig failed; the service reads the file when it starts");
        s.message().to_string()
    });
    Reloaded {
        service,
        ok: error.is_none(),
        error,
    }
}

/// Merge a JSON patch over the current config, validate and apply it (400
/// `config_validation` naming the field on a bad value).
pub async fn patch_write(state: &AppState, patch: Value) -> Result<ConfigWriteBody, ApiError> {
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

/// [`patch_write`] with the report as JSON, for views that splice it into an untyped body.
pub async fn patch_config(state: &AppState, patch: Value) -> Result<Value, ApiError> {
    let report = patch_write(state, patch).await?;
    Ok(serde_json::to_value(report).unwrap_or(Value::Null))
}
