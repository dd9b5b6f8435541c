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
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use svcos_api_types::config::{
    AuditBody, AuditEntry, BackupFile, BackupManifestBody, ConfigBody, ConfigPatchRequest,
    ConfigWriteBody, DonationBody, DonationInfoBody, DonationPatchRequest, DonationRunning,
    UndoInfo,
};
use svcos_api_types::requests::{
    ConfigImportRequest, ConfigRestoreRequest, HostnameRequest, ModeRequest,
};
use svcos_api_types::safety::SafetyWarningsBody;
use svcos_common::config::change::ImportMode;
use svcos_common::config::{Config, ConfigError, Mode};
use svcos_proto::tuner::v1::ListAuditRequest;

use super::{ApiResult, ok, parse_body};
use crate::config_write::*;
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/config", Bearer, P, Config, Full, "The whole typed config (secrets masked)", get_config, res: svcos_api_types::config::ConfigBody),
        route!(POST "/api/config", Bearer, P, Config, Full, "Merge a partial config, validate, save atomically, reload owners", post_config, req: svcos_api_types::config::ConfigPatchRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(GET "/api/config/backup/manifest", Bearer, P, Config, Full, "What a backup contains and how to restore it", backup_manifest, res: svcos_api_types::config::BackupManifestBody),
        route!(GET "/api/config/donation", Bearer, P, Config, Full, "Donation settings and what was mined for it", get_donation, res: svcos_api_types::config::DonationBody),
        route!(POST "/api/config/donation", Bearer, P, Config, Full, "Change donation settings (effective after a restart)", post_donation, req: svcos_api_types::config::DonationPatchRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(GET "/api/config/export", Bearer, P, Config, Full, "The config file as TOML (includes pool passwords)", export),
        route!(POST "/api/config/import", Bearer, P, Config, Full, "Merge (or with mode=replace, replace) the config from TOML or JSON; keeps the previous config for undo", import, req: svcos_api_types::requests::ConfigImportRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(POST "/api/config/restore", Bearer, U, Config, Full, "Restore a whole backup (exported TOML): validated, then applied; the previous config is kept for undo", restore, req: svcos_api_types::requests::ConfigRestoreRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(POST "/api/config/restore/undo", Bearer, U, Config, Full, "Put back the config an import or restore replaced (one step)", undo, res: svcos_api_types::config::ConfigWriteBody),
        route!(GET "/api/donation/info", Open, U, Config, Full, "Donation disclosure", donation_info, res: svcos_api_types::config::DonationInfoBody),
        route!(GET "/api/safety/warnings", Open, P, Config, Full, "Current safety warnings", safety_warnings, res: svcos_api_types::safety::SafetyWarningsBody),
        route!(GET "/api/audit-log", Bearer, U, Config, Full, "Recent writes through the API", audit_log, res: svcos_api_types::config::AuditBody),
        route!(GET "/api/history/audit", Bearer, P, Telemetry, Full, "Recent writes through the API", audit_log, res: svcos_api_types::config::AuditBody),
        route!(POST "/api/network/hostname", Bearer, P, Fleet, Full, "Set [system].hostname", set_hostname, req: svcos_api_types::requests::HostnameRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(POST "/api/setup/step4-mode", Bearer, P, Auth, Full, "Set the operating mode", set_mode, req: svcos_api_types::requests::ModeRequest, res: svcos_api_types::config::ConfigWriteBody),
    ]
}

async fn get_config(State(state): State<AppState>) -> ApiResult {
    let (config, generation) = state.config_at();
    ok(ConfigBody {
        schema: "svcos.api.config.v1",
        config: masked(&config),
        secret_mask: SECRET_MASK,
        generation,
    })
}

/// Merge a JSON patch over the current config and apply it; with `expected`, only over that
/// generation (compare-and-set).
async fn patch_and_apply(
    state: &AppState,
    expected: Option<u64>,
    patch: Value,
    invalid: ErrorCode,
) -> ApiResult {
    if !patch.is_object() {
        return Err(ApiError::bad_request("expected a JSON object").code(invalid));
    }
    let report = patch_apply(state, expected, &patch)
        .await
        .map_err(|e| e.into_api(invalid, None))?;
    ok(report)
}

/// The generation an `If-Match` header names (`7` or the entity-tag form `"7"`); `*` and no
/// header mean "whatever is current".
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    text.parse::<u64>().map(Some).map_err(|_| {
        ApiError::bad_request("If-Match must be a config generation")
            .code(ErrorCode::ConfigValidation)
            .with("field", "If-Match")
            .suggestion("send the `generation` member of GET /api/config, e.g. If-Match: \"12\"")
    })
}

async fn post_config(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let expected = if_match(&headers)?;
    let ConfigPatchRequest(patch) = parse_body(&headers, &body)?;
    // Accept both the GET shape ({"config": {...}}) and a bare partial config.
    let patch = match patch.get("config") {
        Some(inner) if patch.as_object().is_some_and(|o| o.len() == 1) => inner.clone(),
        _ => patch,
    };
    patch_and_apply(&state, expected, patch, ErrorCode::ConfigValidation).await
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

/// The config an import or restore would put in force (`config::change::import`'s rules), and
/// the generation it was computed from.
fn imported_config(state: &AppState, doc: &Value, mode: ImportMode) -> ApiResult<(Config, u64)> {
    let (current, base) = state.config_at();
    svcos_common::config::change::import(&current, doc, mode)
        .map(|new| (new, base))
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))
}

async fn import(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ConfigImportRequest = parse_body(&headers, &body)?;
    let doc = import_document(b.toml, b.config)?;
    let (new, base) = imported_config(&state, &doc, b.mode)?;
    write_with_undo(&state, base, new, Previous::Keep).await
}

async fn write_with_undo(
    state: &AppState,
    base: u64,
    new: Config,
    previous: Previous,
) -> ApiResult {
    let mut report: ConfigWriteBody = apply_with(state, base, new, previous)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))?;
    report.undo = Some(undo_info(state));
    ok(report)
}

fn undo_info(state: &AppState) -> UndoInfo {
    UndoInfo::of(previous_path(state).exists())
}

/// A restore is a whole backup: replace semantics, the same validator as every other write.
async fn restore(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ConfigRestoreRequest = parse_body(&headers, &body)?;
    let doc = import_document(b.toml, b.config)?;
    let (new, base) = imported_config(&state, &doc, ImportMode::Replace)?;
    write_with_undo(&state, base, new, Previous::Keep).await
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
    let base = state.config_at().1;
    let config = Config::from_toml_str(&previous, std::path::Path::new("previous config"))
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?;
    write_with_undo(&state, base, config, Previous::Consume).await
}

async fn backup_manifest(State(state): State<AppState>) -> ApiResult {
    let path = &state.layout.config_path;
    let file = match std::fs::read(path) {
        Ok(bytes) => BackupFile {
            name: "config.toml",
            present: true,
            bytes: Some(bytes.len() as u64),
            sha256: Some(hex::encode(Sha256::digest(&bytes))),
            modified_unix: std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            note: None,
        },
        Err(_) => BackupFile {
            name: "config.toml",
            present: false,
            bytes: None,
            sha256: None,
            modified_unix: None,
            note: Some("no file yet: the defaults are in use"),
        },
    };
    ok(BackupManifestBody {
        schema: "svcos.api.config.backup_manifest.v1",
        files: vec![file],
        contains_secrets: vec![
            "pools[].password",
            "mqtt.password",
            "webhook.hooks[].secret",
        ],
        excluded: vec!["the auth record (password hash and sessions) is never exported"],
        export: "GET /api/config/export",
        restore: "POST /api/config/restore with {\"toml\": \"<exported text>\"} (validated first; the replaced config is kept)",
        import: "POST /api/config/import with {\"toml\": \"...\"} merges over the current config; \"mode\": \"replace\" replaces it",
        undo: undo_info(&state),
    })
}

async fn get_donation(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let mut s = state.peers.stratum.clone();
    let running = s
        .get_donation(svcos_proto::stratum::v1::GetDonationRequest {})
        .await
        .ok()
        .map(|r| DonationRunning::from(&r.into_inner()));
    ok(DonationBody {
        schema: "svcos.api.config.donation.v1",
        config: config.donation.clone(),
        running,
        note: "saved changes take effect after stratum-agent restarts",
    })
}

async fn post_donation(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let DonationPatchRequest(patch) = parse_body(&headers, &body)?;
    patch_and_apply(
        &state,
        None,
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

async fn donation_info(State(state): State<AppState>) -> ApiResult {
    let d = state.config().donation.clone();
    ok(DonationInfoBody {
        schema: "svcos.api.donation.info.v1",
        enabled: d.enabled,
        percent: d.percent,
        cycle_s: d.cycle_s,
        pool_url: d.pool_url,
        payout_address: d.payout_address,
        explorer_url: d.explorer_url,
        trust_model: DONATION_TRUST_MODEL,
        changes_take_effect: "after a daemon restart",
    })
}

/// `GET /api/safety/warnings` (open).
async fn safety_warnings(State(state): State<AppState>) -> ApiResult {
    let telemetry = state.telemetry();
    let recovered = state.recovered_state_files();
    ok(SafetyWarningsBody::of(
        &state.config(),
        &recovered,
        telemetry.as_ref(),
    ))
}

async fn audit_log(State(state): State<AppState>) -> ApiResult {
    let r = state
        .peers
        .history
        .clone()
        .list_audit(ListAuditRequest { limit: 0 })
        .await
        .map_err(|s| ApiError::from_grpc("tuner", &s))?;
    ok(AuditBody {
        schema: "svcos.api.audit.v1",
        scope: "writes through the API, kept across restarts (newest last, at most 256 here)",
        entries: r
            .into_inner()
            .entries
            .into_iter()
            .map(AuditEntry::from)
            .collect(),
    })
}

async fn set_hostname(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: HostnameRequest = parse_body(&headers, &body)?;
    patch_and_apply(
        &state,
        None,
        json!({"system": {"hostname": b.hostname}}),
        ErrorCode::ConfigValidation,
    )
    .await
}

async fn set_mode(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: ModeRequest = parse_body(&headers, &body)?;
    if serde_json::from_value::<Mode>(b.mode.clone()).is_err() {
        return Err(validation_error(
            ErrorCode::ConfigValidation,
            &ConfigError::invalid("system.mode", "one of home, standard, hacker"),
        ));
    }
    patch_and_apply(
        &state,
        None,
        json!({"system": {"mode": b.mode}}),
        ErrorCode::ConfigValidation,
    )
    .await
}
