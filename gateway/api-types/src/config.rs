//! Configuration: `/api/config*`, donation, the audit log, hostname and mode, and the write
//! report every config write answers with (`svcos.api.config.write.v1`).
//!
//! Merge patches are parsed by the config's own rules (`svcos_common::config::change`), which
//! name the offending field; their request types here carry the body as a JSON value and give
//! it the schema of the config section it patches. That schema is the section's derived
//! deserialisation schema: every member optional (the sections default what is absent) and
//! unknown members refused (the sections deny them), which is exactly what a patch may hold.

use serde::Serialize;
use serde_json::Value;
#[cfg(feature = "schema")]
use svcos_common::config::Config;
use svcos_common::config::{DonationConfig, PsuOverrideConfig};
use svcos_proto::stratum::v1::GetDonationResponse;
use svcos_proto::tuner::v1::AuditEntry as AuditRecord;

/// A config key that takes effect only after its owner restarts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RestartRequired {
    /// Dotted key (`stratum.sv2_enabled`).
    pub key: String,
    /// The service that reads it when it starts.
    pub service: &'static str,
}

/// One owner told to reload its config after a write.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Reloaded {
    /// The service (`hw-agent`, `stratum-agent`, `tuner`).
    pub service: &'static str,
    /// It confirmed the reload.
    pub ok: bool,
    /// Why not (absent when `ok`); the service reads the file when it next starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whether the one-step undo of an import or restore is available.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UndoInfo {
    /// A replaced config is kept and can be put back.
    pub available: bool,
    /// `POST /api/config/restore/undo`.
    pub route: &'static str,
}

impl UndoInfo {
    /// The undo route's state.
    pub fn of(available: bool) -> Self {
        UndoInfo {
            available,
            route: "POST /api/config/restore/undo",
        }
    }
}

/// What a config write did (`svcos.api.config.write.v1`): every config write answers it, or
/// carries it as its `write` member.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfigWriteBody {
    /// `svcos.api.config.write.v1`.
    pub schema: &'static str,
    /// Always true: a write that could not be saved answers an error instead.
    pub saved: bool,
    /// The generation of the saved config (send it as `If-Match` with the next write).
    pub generation: u64,
    /// Leaf keys whose values changed (`thermal.target_temp_c`, `pools[0].url`).
    pub changed: Vec<String>,
    /// Changed keys their owner picked up without a restart.
    pub applied_live: Vec<String>,
    /// Changed keys that need their owner restarted.
    pub restart_required: Vec<RestartRequired>,
    /// Owners told to reload.
    pub reloaded: Vec<Reloaded>,
    /// The undo slot after an import, restore or undo (absent on other writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo: Option<UndoInfo>,
}

/// `GET /api/config` (`svcos.api.config.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfigBody {
    /// `svcos.api.config.v1`.
    pub schema: &'static str,
    /// The whole config with secrets and URL user-info replaced by `secret_mask`.
    #[cfg_attr(feature = "schema", schemars(with = "Config"))]
    pub config: Value,
    /// The mask (`********`); sending it back keeps the stored secret.
    pub secret_mask: &'static str,
    /// The config's generation: it counts writes. `POST /api/config` with `If-Match: <generation>`
    /// is refused with 409 `config_conflict` when another write came first.
    pub generation: u64,
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BackupFile {
    /// `config.toml`.
    pub name: &'static str,
    /// The file exists (else the defaults are in use).
    pub present: bool,
    /// Its size, bytes; `null` when absent.
    pub bytes: Option<u64>,
    /// Hex SHA-256 of its content; `null` when absent.
    pub sha256: Option<String>,
    /// Last modification, Unix s; `null` when absent or unknown.
    pub modified_unix: Option<u64>,
    /// Why there is no file; `null` when present.
    pub note: Option<&'static str>,
}

/// `GET /api/config/backup/manifest` (`svcos.api.config.backup_manifest.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BackupManifestBody {
    /// `svcos.api.config.backup_manifest.v1`.
    pub schema: &'static str,
    /// What a backup is made of.
    pub files: Vec<BackupFile>,
    /// Config members the export carries in clear.
    pub contains_secrets: Vec<&'static str>,
    /// What a backup never holds.
    pub excluded: Vec<&'static str>,
    /// How to take a backup.
    pub export: &'static str,
    /// How to restore one.
    pub restore: &'static str,
    /// How to merge one.
    pub import: &'static str,
    /// The one-step undo.
    pub undo: UndoInfo,
}

/// stratum-agent's donation state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DonationRunning {
    /// Donation is on in the running stratum-agent.
    pub enabled: bool,
    /// Its percentage of mining time.
    pub percent: f64,
    /// Mining for the donation right now.
    pub active_now: bool,
    /// Seconds mined for it in the current cycle.
    pub mined_s_current_cycle: f64,
    /// Seconds mined for it since stratum-agent started.
    pub mined_s_total: f64,
}

impl From<&GetDonationResponse> for DonationRunning {
    fn from(r: &GetDonationResponse) -> Self {
        DonationRunning {
            enabled: r.enabled,
            percent: r.percent,
            active_now: r.active_now,
            mined_s_current_cycle: r.mined_s_current_cycle,
            mined_s_total: r.mined_s_total,
        }
    }
}

/// `GET /api/config/donation` (`svcos.api.config.donation.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DonationBody {
    /// `svcos.api.config.donation.v1`.
    pub schema: &'static str,
    /// `[donation]` as saved.
    pub config: DonationConfig,
    /// What stratum-agent runs; `null` while it is unreachable.
    pub running: Option<DonationRunning>,
    /// When saved changes apply.
    pub note: &'static str,
}

/// `GET /api/donation/info` (`svcos.api.donation.info.v1`): the open disclosure.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DonationInfoBody {
    /// `svcos.api.donation.info.v1`.
    pub schema: &'static str,
    /// `[donation].enabled`.
    pub enabled: bool,
    /// `[donation].percent`, 0-5.
    pub percent: f64,
    /// `[donation].cycle_s`, s.
    pub cycle_s: u32,
    /// The destination pool.
    pub pool_url: String,
    /// The payout address.
    pub payout_address: String,
    /// The explorer link for the payout address.
    pub explorer_url: String,
    /// What the addresses prove and what they do not.
    pub trust_model: &'static str,
    /// When saved changes apply.
    pub changes_take_effect: &'static str,
}

/// One write through the API, as the tuner's audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AuditEntry {
    /// When it was answered, Unix ms.
    pub timestamp_ms: i64,
    /// HTTP method.
    pub method: String,
    /// Request path (no query string).
    pub path: String,
    /// HTTP status answered.
    pub status: u32,
    /// The session that made it; `null` for API tokens and open routes.
    pub session_id: Option<String>,
}

impl From<AuditRecord> for AuditEntry {
    fn from(e: AuditRecord) -> Self {
        AuditEntry {
            timestamp_ms: e.timestamp_ms,
            method: e.method,
            path: e.path,
            status: e.status,
            session_id: (!e.session_id.is_empty()).then_some(e.session_id),
        }
    }
}

/// `GET /api/audit-log`, `GET /api/history/audit` (`svcos.api.audit.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AuditBody {
    /// `svcos.api.audit.v1`.
    pub schema: &'static str,
    /// What the log holds.
    pub scope: &'static str,
    /// Oldest first.
    pub entries: Vec<AuditEntry>,
}

/// A merge patch of `T` (schema only): `T`'s deserialisation schema (every member `T` defaults
/// is optional, the members `T` refuses are refused) with its sections inlined, under its own
/// name (`<T>Patch`). The responses show the same config types in their serialised form, where
/// every member is present; one component name cannot mean both.
#[cfg(feature = "schema")]
pub struct Patch<T>(std::marker::PhantomData<T>);

#[cfg(feature = "schema")]
impl<T: schemars::JsonSchema> schemars::JsonSchema for Patch<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        format!("{}Patch", T::schema_name()).into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
            .into_root_schema_for::<T>();
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
        }
        schema
    }
}

/// A request type that carries its body as JSON for the config's own parser: its schema is
/// `$shape`'s, inlined under the request type's name, with the request type's description.
macro_rules! patch_request {
    ($(#[doc = $doc:literal])+ $name:ident, $shape:ty) => {
        $(#[doc = $doc])+
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(
            /// The body as sent.
            pub serde_json::Value,
        );

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let mut schema = <$shape as schemars::JsonSchema>::json_schema(generator);
                if let Some(o) = schema.as_object_mut() {
                    o.remove("title");
                    let text: Vec<&str> = vec![$($doc.trim()),+];
                    o.insert("description".into(), text.join("\n").into());
                }
                schema
            }
        }
    };
}
pub(crate) use patch_request;

patch_request!(
    /// `POST /api/config`: a merge patch of the whole config, merged over the current config
    /// and checked by the config's rules (a bad value is a `config_validation` error naming the
    /// field). The `GET` shape, `{"config": patch}`, is accepted too.
    ConfigPatchRequest,
    Patch<Config>
);

patch_request!(
    /// `POST /api/config/donation`: a merge patch of `[donation]`.
    DonationPatchRequest,
    Patch<DonationConfig>
);

/// `[min, max]` of a number.
pub type Bounds = [f64; 2];

/// The calibration's accepted ranges.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CalibrationBounds {
    /// `factor`'s range.
    pub factor: Bounds,
    /// `offset_watt`'s range, W.
    pub offset_watt: Bounds,
}

/// `GET`/`POST /api/config/power-calibration` (`svcos.api.config.power_calibration.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PowerCalibrationBody {
    /// `svcos.api.config.power_calibration.v1`.
    pub schema: &'static str,
    /// `[power].calibration_factor`.
    pub factor: f64,
    /// `[power].calibration_offset_watt`, W.
    pub offset_watt: f64,
    /// How the two apply.
    pub formula: &'static str,
    /// Accepted ranges.
    pub bounds: CalibrationBounds,
    /// The PSU's own reading, W (1 decimal); `null` while hw-agent is down.
    pub raw_power_watt: Option<f64>,
    /// The reading after calibration, W (1 decimal); `null` while hw-agent is down.
    pub reported_power_watt: Option<f64>,
    /// What the write did; `null` on `GET`.
    pub write: Option<ConfigWriteBody>,
}

/// The PSU override's accepted ranges.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuOverrideBounds {
    /// `max_watt`'s range when enabled, W.
    pub max_watt: Bounds,
    /// The declared voltages' range, V.
    pub voltage_v: Bounds,
    /// `model`'s length limit, characters.
    pub model_max_chars: u32,
}

/// `GET`/`POST /api/config/psu-override` (`svcos.api.config.psu_override.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuOverrideBody {
    /// `svcos.api.config.psu_override.v1`.
    pub schema: &'static str,
    /// `[power.psu_override]`.
    #[serde(rename = "override")]
    pub psu_override: PsuOverrideConfig,
    /// Accepted ranges.
    pub bounds: PsuOverrideBounds,
    /// The model hw-agent reads from the PSU; `null` when unknown or hw-agent is down.
    pub detected_model: Option<String>,
    /// The override's `max_watt` when enabled, W; else `null`.
    pub effective_psu_limit_watt: Option<f64>,
    /// What the limit does.
    pub note: &'static str,
    /// What the write did; `null` on `GET`.
    pub write: Option<ConfigWriteBody>,
}

/// The fleet-shareable subset of the config (schema only; built by
/// `svcos_common::config::shared::shared_of`).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // a schema, never built
struct SharedShape {
    /// `pools`, passwords and URL user-info masked.
    pools: Vec<svcos_common::config::PoolConfig>,
    /// `hardware.power_target_watt`, W.
    power_target_watt: f64,
    /// `thermal.fan_min_percent`.
    fan_min_percent: u32,
    /// `thermal.fan_max_percent`.
    fan_max_percent: u32,
    /// `thermal.target_temp_c`, °C.
    target_temp_c: f64,
}

/// One member of the shared subset and the config key it stands for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SharedMember {
    /// Member name in `shared`.
    pub name: &'static str,
    /// The config key (`thermal.fan_min_percent`).
    pub config: &'static str,
}

/// `GET`/`POST /api/config/shared` (`svcos.api.config.shared.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SharedBody {
    /// `svcos.api.config.shared.v1`.
    pub schema: &'static str,
    /// The subset (secrets masked).
    #[cfg_attr(feature = "schema", schemars(with = "SharedShape"))]
    pub shared: Value,
    /// Its members.
    pub members: Vec<SharedMember>,
    /// Hex SHA-256 over the subset including pool passwords: equal on miners that agree.
    pub fingerprint: String,
    /// The mask; sending it back keeps the stored secret.
    pub secret_mask: &'static str,
    /// What the write did; `null` on `GET`.
    pub write: Option<ConfigWriteBody>,
}

/// The members `POST /api/config/power-calibration` takes (schema only).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema, never built
struct CalibrationShape {
    /// New `[power].calibration_factor`, 0.5-1.5.
    factor: Option<f64>,
    /// New `[power].calibration_offset_watt`, -500-500 W.
    offset_watt: Option<f64>,
    /// `true` resets both to 1 and 0 (before `factor`/`offset_watt` apply).
    reset: Option<bool>,
}

patch_request!(
    /// `POST /api/config/power-calibration`: `factor` and/or `offset_watt`, or `reset: true`;
    /// another member is a `config_validation` error naming `power.<member>`.
    CalibrationPatchRequest,
    CalibrationShape
);

patch_request!(
    /// `POST /api/config/psu-override`: a merge patch of `[power.psu_override]`.
    PsuOverridePatchRequest,
    Patch<PsuOverrideConfig>
);

/// The members `POST /api/config/shared` takes (schema only).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema, never built
struct SharedPatch {
    /// Replaces the pool list (checked like `POST /api/pools`).
    #[schemars(length(min = 1, max = 16))]
    pools: Option<Vec<Patch<svcos_common::config::PoolConfig>>>,
    /// `hardware.power_target_watt`, W.
    power_target_watt: Option<f64>,
    /// `thermal.fan_min_percent`.
    fan_min_percent: Option<u32>,
    /// `thermal.fan_max_percent`.
    fan_max_percent: Option<u32>,
    /// `thermal.target_temp_c`, °C.
    target_temp_c: Option<f64>,
}

patch_request!(
    /// `POST /api/config/shared`: any of the shared members, applied in one write (all or
    /// nothing). The `GET` shape, `{"shared": {...}}`, is accepted too.
    SharedPatchRequest,
    SharedPatch
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_entry_without_a_session_says_null() {
        let e = AuditEntry::from(AuditRecord {
            timestamp_ms: 5,
            method: "POST".into(),
            path: "/api/config".into(),
            status: 200,
            session_id: String::new(),
        });
        assert_eq!(e.session_id, None);
        let v = serde_json::to_value(&e).unwrap();
        assert!(v["session_id"].is_null());
        let e = AuditEntry::from(AuditRecord {
            session_id: "s1".into(),
            ..Default::default()
        });
        assert_eq!(e.session_id.as_deref(), Some("s1"));
    }

    #[test]
    fn a_reload_that_worked_has_no_error_member() {
        let ok = Reloaded {
            service: "hw-agent",
            ok: true,
            error: None,
        };
        assert_eq!(
            serde_json::to_value(ok).unwrap(),
            serde_json::json!({"service": "hw-agent", "ok": true})
        );
    }

    #[test]
    fn an_ordinary_write_report_has_no_undo_member() {
        let mut w = ConfigWriteBody {
            schema: "svcos.api.config.write.v1",
            saved: true,
            generation: 1,
            changed: vec!["system.hostname".into()],
            applied_live: vec![],
            restart_required: vec![],
            reloaded: vec![],
            undo: None,
        };
        assert!(serde_json::to_value(&w).unwrap().get("undo").is_none());
        w.undo = Some(UndoInfo::of(true));
        assert_eq!(
            serde_json::to_value(&w).unwrap()["undo"],
            serde_json::json!({"available": true, "route": "POST /api/config/restore/undo"})
        );
    }
}
