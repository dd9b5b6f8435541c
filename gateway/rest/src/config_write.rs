//! The config's one writer: the write path under every route group that writes config, and under
//! `svcos.config.v1.ConfigService` for the other processes ([`apply`], [`patch_apply`]:
//! compare-and-set on the generation, validate, atomic save, swap, owner reload, restart report)
//! and its HTTP errors. What a change means (patch parsing naming the field, changed keys, their owners and
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
use svcos_common::config::store::{self, WriteError};
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
    /// The write was computed from an older generation than the one in force; nothing changed.
    Stale {
        /// The generation the write was computed from.
        expected: u64,
        /// The generation in force.
        current: u64,
    },
    /// The config was valid but could not be written.
    Write(ConfigError),
}

impl From<WriteError> for ApplyError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Stale { expected, current } => ApplyError::Stale { expected, current },
            WriteError::Invalid(e) => ApplyError::Invalid(e),
        }
    }
}

/// 409 `config_conflict`: another write came first.
pub fn conflict_error(expected: u64, current: u64) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::CONFLICT,
        format!("the config changed since generation {expected}"),
    )
    .code(ErrorCode::ConfigConflict)
    .detail(format!(
        "the config is at generation {current}; nothing was changed"
    ))
    .suggestion(
        "GET /api/config, apply the change to what it returns, resend with If-Match: <generation>",
    )
    .with("field", "generation")
    .with("generation", current)
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
            ApplyError::Stale { expected, current } => conflict_error(expected, current),
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

/// Compare-and-set: `new` was computed from the config at generation `base`
/// ([`crate::state::Inner::config_at`]); validate, save atomically, swap, reload owners; returns
/// the write report.
pub async fn apply(
    state: &AppState,
    base: u64,
    new: Config,
) -> Result<ConfigWriteBody, ApplyError> {
    apply_with(state, base, new, Previous::Leave).await
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
    base: u64,
    new: Config,
    previous: Previous,
) -> Result<ConfigWriteBody, ApplyError> {
    let _write = state.config_write.lock().await;
    let (old, current) = state.config_at();
    let generation = store::check_write(current, base, &new)?;
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
    if let Err(e) =
        store::save_generation(&crate::state::generation_path(&state.layout), generation)
    {
        // The config is saved; only a restart could then hand this number out again.
        tracing::warn!(error = %e, "cannot record the config generation");
    }
    state.set_config(new.clone(), generation);
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
        generation,
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

/// How often a patch that names no generation is merged again over a config another write
/// changed meanwhile. A patch means the same over any generation, so a retry is safe; the bound
/// only keeps a caller from waiting behind a stream of writes.
const PATCH_RETRIES: usize = 3;

/// Merge a JSON patch over the config and apply it. With `expected`, the patch was computed from
/// that generation and is refused ([`ApplyError::Stale`]) when another write came first; without,
/// it is merged over whatever is current (and merged again if a write slips in between).
pub async fn patch_apply(
    state: &AppState,
    expected: Option<u64>,
    patch: &Value,
) -> Result<ConfigWriteBody, ApplyError> {
    let mut attempt = 0;
    loop {
        let (old, current) = state.config_at();
        if let Some(expected) = expected
            && expected != current
        {
            return Err(ApplyError::Stale { expected, current });
        }
        let mut merged = serde_json::to_value(&*old).unwrap_or(Value::Null);
        merge(&mut merged, patch);
        let mut new = config_from_json(&merged, patch).map_err(ApplyError::Invalid)?;
        restore_secrets(&mut new, &old);
        match apply(state, current, new).await {
            Err(ApplyError::Stale { .. }) if expected.is_none() && attempt < PATCH_RETRIES => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// [`patch_apply`] without a generation, its errors as the envelope (400 `config_validation`
/// naming the field on a bad value).
pub async fn patch_write(state: &AppState, patch: Value) -> Result<ConfigWriteBody, ApiError> {
    patch_apply(state, None, &patch)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))
}

/// [`patch_write`] with the report as JSON, for views that splice it into an untyped body.
pub async fn patch_config(state: &AppState, patch: Value) -> Result<Value, ApiError> {
    let report = patch_write(state, patch).await?;
    Ok(serde_json::to_value(report).unwrap_or(Value::Null))
}
