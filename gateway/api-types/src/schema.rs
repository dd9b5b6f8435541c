//! Which route answers which type and which write parses its body into which type, and their
//! JSON Schemas (feature `schema`).

/// The generator type, for the document's builder.
pub use schemars::generate::SchemaGenerator;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};

use crate::requests as req;
use crate::{
    auth, catalog, config as cfg, diagnostics as diag, discovery as disc, energy, firmware as fw,
    fleet, governor as gov, hardware as hw, health, history, integrations as integ, mining, pools,
    safety, setup, status, thermal, tuning as tune,
};

type SolarConfigBody = energy::FollowerConfigBody<svcos_common::config::SolarConfig>;
type OffgridConfigBody = energy::FollowerConfigBody<svcos_common::config::OffgridConfig>;

/// A route's `200` schema: a `$ref` into the generator's definitions.
pub type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

fn of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// `(method, path, schema)` of every route whose `200` body is a type of this crate.
pub const RESPONSES: &[(&str, &str, SchemaOf)] = &[
    ("GET", "/api/status", of::<status::StatusBody>),
    ("GET", "/api/home/status", of::<energy::HomeStatusBody>),
    ("POST", "/api/home/room-temp", of::<energy::ThermostatBody>),
    ("POST", "/api/home/target", of::<energy::ThermostatBody>),
    ("POST", "/api/fleet/discover", of::<fleet::FleetMinersBody>),
    ("GET", "/api/fleet/miners", of::<fleet::FleetMinersBody>),
    (
        "GET",
        "/api/fleet/pool-stats",
        of::<fleet::FleetPoolStatsBody>,
    ),
    ("GET", "/api/stats", of::<status::StatsBody>),
    ("GET", "/api/chips", of::<status::ChipsBody>),
    (
        "GET",
        "/api/mining/chain/presence",
        of::<status::ChainPresenceBody>,
    ),
    ("GET", "/api/pools", of::<pools::PoolsBody>),
    (
        "GET",
        "/api/hardware/psu_catalog",
        of::<diag::PsuCatalogBody>,
    ),
    (
        "POST",
        "/api/debug/asic-command",
        of::<diag::AsicCommandBody>,
    ),
    ("GET", "/api/debug/i2c", of::<diag::I2cReadBody>),
    ("POST", "/api/debug/i2c", of::<diag::I2cWriteBody>),
    ("GET", "/api/debug/log", of::<diag::LogBody>),
    ("POST", "/api/debug/pid-params", of::<diag::PidBody>),
    ("POST", "/api/debug/psu/control", of::<diag::PsuControlBody>),
    ("GET", "/api/debug/registers", of::<diag::RegisterBody>),
    ("POST", "/api/debug/registers", of::<diag::RegisterBody>),
    (
        "GET",
        "/api/diagnostics/failure_modes",
        of::<diag::FailureModesBody>,
    ),
    (
        "POST",
        "/api/diagnostics/hashreport/cancel",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/logs/manifest",
        of::<diag::LogsManifestBody>,
    ),
    (
        "GET",
        "/api/diagnostics/recovery_actions",
        of::<diag::RecoveryActionsBody>,
    ),
    (
        "GET",
        "/api/diagnostics/reports/recent",
        of::<diag::ReportsBody>,
    ),
    (
        "GET",
        "/api/diagnostics/state_machine",
        of::<diag::StateMachineBody>,
    ),
    (
        "GET",
        "/api/diagnostics/troubleshoot/fpga",
        of::<diag::FpgaBody>,
    ),
    (
        "GET",
        "/api/diagnostics/troubleshoot/i2c-scan",
        of::<diag::I2cScanBody>,
    ),
    (
        "POST",
        "/api/diagnostics/board-health/start",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/board-health/status",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/board-health/result",
        of::<diag::ResultBody>,
    ),
    (
        "POST",
        "/api/diagnostics/chip-health/start",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/chip-health/status",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/chip-health/result",
        of::<diag::ResultBody>,
    ),
    (
        "POST",
        "/api/diagnostics/hashreport/start",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/hashreport/status",
        of::<diag::RunBody>,
    ),
    (
        "GET",
        "/api/diagnostics/hashreport/result",
        of::<diag::ResultBody>,
    ),
    ("GET", "/api/system/asic", of::<hw::SystemAsicBody>),
    ("GET", "/api/system/health", of::<hw::SystemHealthBody>),
    ("POST", "/api/system/identify", of::<hw::LedBody>),
    ("GET", "/api/system/info", of::<hw::SystemInfoBody>),
    ("GET", "/api/system/stats", of::<hw::SystemStatsBody>),
    ("POST", "/api/action/sleep", of::<hw::SleepBody>),
    ("POST", "/api/action/wake", of::<hw::SleepBody>),
    (
        "GET",
        "/api/thermal/cooling_modes",
        of::<hw::CoolingModesBody>,
    ),
    (
        "GET",
        "/api/hardware/thermal/chipd/chip_temps",
        of::<hw::ChipTempsBody>,
    ),
    (
        "GET",
        "/api/hardware/thermal/sensors",
        of::<hw::SensorsBody>,
    ),
    ("GET", "/api/miner/type", of::<hw::MinerTypeBody>),
    ("GET", "/api/led/config", of::<hw::LedBody>),
    ("POST", "/api/led/config", of::<hw::LedBody>),
    ("POST", "/api/led/locate", of::<hw::LedBody>),
    ("POST", "/api/led/locate/stop", of::<hw::LedBody>),
    ("POST", "/api/led/pattern", of::<hw::LedBody>),
    ("GET", "/api/led/patterns", of::<hw::LedPatternsBody>),
    ("GET", "/api/led/status", of::<hw::LedBody>),
    (
        "POST",
        "/api/debug/chip/frequency",
        of::<hw::FrequencyAppliedBody>,
    ),
    (
        "POST",
        "/api/debug/chip/voltage",
        of::<hw::VoltageAppliedBody>,
    ),
    ("GET", "/api/autotuner/state", of::<hw::TunerStateBody>),
    ("GET", "/api/autotuner/status", of::<tune::RunStateBody>),
    (
        "GET",
        "/api/autotuner/visibility",
        of::<gov::VisibilityBody>,
    ),
    (
        "POST",
        "/api/autotuner/noise-profile",
        of::<gov::NoiseProfileBody>,
    ),
    ("POST", "/api/autotuner/quota", of::<gov::QuotaBody>),
    (
        "POST",
        "/api/autotuner/room-temp-factor",
        of::<gov::RoomTempFactorBody>,
    ),
    (
        "GET",
        "/api/thermal/cold_environment",
        of::<gov::ColdEnvironmentBody>,
    ),
    ("GET", "/api/boot/phase", of::<mining::BootPhaseBody>),
    (
        "GET",
        "/api/mining/work/posture",
        of::<mining::WorkPostureBody>,
    ),
    ("GET", "/api/mining/ramp", of::<mining::RampBody>),
    (
        "GET",
        "/api/diagnostics/shares/local_rejects",
        of::<mining::LocalRejectsBody>,
    ),
    (
        "GET",
        "/api/diagnostics/sensor_outlier",
        of::<mining::SensorOutlierBody>,
    ),
    (
        "GET",
        "/api/diagnostics/troubleshoot/network",
        of::<mining::NetworkBody>,
    ),
    (
        "GET",
        "/api/diagnostics/troubleshoot/psu",
        of::<mining::PsuTroubleshootBody>,
    ),
    (
        "GET",
        "/api/diagnostics/troubleshoot/asic-comm",
        of::<mining::AsicCommBody>,
    ),
    (
        "GET",
        "/api/autotuner/efficiency",
        of::<mining::EfficiencyBody>,
    ),
    ("GET", "/api/perf/efficiency", of::<mining::EfficiencyBody>),
    (
        "GET",
        "/api/autotuner/target",
        of::<mining::TunerTargetBody>,
    ),
    (
        "GET",
        "/api/autotuner/telemetry",
        of::<mining::TunerTelemetryBody>,
    ),
    ("GET", "/api/debug/pid-state", of::<mining::PidStateBody>),
    ("POST", "/api/auth/session", of::<auth::SessionBody>),
    (
        "DELETE",
        "/api/auth/session/current",
        of::<auth::LogoutBody>,
    ),
    ("POST", "/api/auth/setup", of::<auth::SetupBody>),
    ("GET", "/api/auth/status", of::<auth::AuthStatusBody>),
    ("POST", "/api/auth/ws-ticket", of::<auth::WsTicketBody>),
    (
        "POST",
        "/api/auth/password",
        of::<auth::PasswordChangedBody>,
    ),
    ("GET", "/api/auth/tokens", of::<auth::TokensBody>),
    ("POST", "/api/auth/tokens", of::<auth::CreatedTokenBody>),
    (
        "DELETE",
        "/api/auth/tokens/:id",
        of::<auth::TokenRevokedBody>,
    ),
    ("GET", "/api/history", of::<history::HistoryBody>),
    ("GET", "/api/history/shares", of::<history::SharesBody>),
    ("GET", "/api/metrics/rolling", of::<history::RollingBody>),
    ("GET", "/api/home/history", of::<history::HomeHistoryBody>),
    (
        "POST",
        "/api/system/restore-to-stock",
        of::<fw::UpdateStatusBody>,
    ),
    (
        "POST",
        "/api/system/restore-to-stock/preflight",
        of::<fw::PreflightBody>,
    ),
    (
        "GET",
        "/api/system/restore-to-stock/preflight-checks",
        of::<fw::PreflightBody>,
    ),
    (
        "GET",
        "/api/system/restore-to-stock/status",
        of::<fw::UpdateStatusBody>,
    ),
    (
        "GET",
        "/api/system/update/status",
        of::<fw::UpdateStatusBody>,
    ),
    ("POST", "/api/system/upgrade", of::<fw::UpdateStatusBody>),
    (
        "GET",
        "/api/system/upgrade/status",
        of::<fw::UpdateStatusBody>,
    ),
    (
        "POST",
        "/api/v1/firmware/update",
        of::<fw::UpdateStatusBody>,
    ),
    (
        "GET",
        "/api/v1/firmware/update/status",
        of::<fw::UpdateStatusBody>,
    ),
    ("POST", "/api/v1/system/upgrade", of::<fw::UpdateStatusBody>),
    (
        "GET",
        "/api/v1/system/upgrade/status",
        of::<fw::UpdateStatusBody>,
    ),
    ("GET", "/api/re/catalog", of::<catalog::CatalogBody>),
    ("GET", "/api/re/catalog/index", of::<catalog::CatalogBody>),
    ("GET", "/api/re/catalog/apw-psu", of::<catalog::CatalogBody>),
    (
        "GET",
        "/api/re/catalog/asic-commands",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/asic-registers",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/asic-registers/chipa",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/asic-registers/chipb",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/bb-uart-trans",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/chipc-baud-init",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/boot-flow",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/boot-orchestration",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/diode-voltage",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/dspic-frames",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/eeprom/bhb-skus",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/firmware-stratum-matrix",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/fpga-registers",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/fwa-network-exposure",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/fwa-rest-commands",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/modelx-fixture-production-warnings",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/thermal-model",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/re/catalog/fwb-rest-endpoints",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwa_architecture",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwa_responses",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwa_status_codes",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwa_web_map",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/proto_wire_types",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwb_overlay",
        of::<catalog::CatalogBody>,
    ),
    (
        "GET",
        "/api/firmware/fwb_schema",
        of::<catalog::CatalogBody>,
    ),
    ("GET", "/api/cgminer/catalog", of::<catalog::CatalogBody>),
    (
        "GET",
        "/api/diagnostics/error_vocab",
        of::<catalog::CatalogBody>,
    ),
    ("GET", "/api/setup/status", of::<setup::SetupStatusBody>),
    (
        "GET",
        "/api/safety/warnings",
        of::<safety::SafetyWarningsBody>,
    ),
    ("POST", "/api/setup/complete", of::<setup::SetupStepBody>),
    ("POST", "/api/setup/quiet-hours", of::<setup::SetupStepBody>),
    (
        "POST",
        "/api/setup/skip-password",
        of::<setup::SetupStepBody>,
    ),
    ("POST", "/api/setup/skip-safety", of::<setup::SetupStepBody>),
    (
        "POST",
        "/api/setup/step-economics",
        of::<setup::SetupStepBody>,
    ),
    (
        "POST",
        "/api/setup/step1-safety",
        of::<setup::SetupStepBody>,
    ),
    (
        "POST",
        "/api/setup/step2-circuit",
        of::<setup::SetupStepBody>,
    ),
    (
        "POST",
        "/api/setup/step3-password",
        of::<setup::SetupStepBody>,
    ),
    (
        "POST",
        "/api/safety/acknowledge",
        of::<setup::AcknowledgeBody>,
    ),
    ("PUT", "/api/autotuner/active", of::<tune::RunStateBody>),
    (
        "GET",
        "/api/autotuner/chip-health",
        of::<tune::ChipHealthBody>,
    ),
    (
        "POST",
        "/api/autotuner/decrement_hashrate_target",
        of::<tune::RunStateBody>,
    ),
    (
        "POST",
        "/api/autotuner/decrement_power_target",
        of::<tune::RunStateBody>,
    ),
    (
        "POST",
        "/api/autotuner/increment_hashrate_target",
        of::<tune::RunStateBody>,
    ),
    (
        "POST",
        "/api/autotuner/increment_power_target",
        of::<tune::RunStateBody>,
    ),
    (
        "POST",
        "/api/autotuner/profitability",
        of::<tune::ProfitabilityBody>,
    ),
    (
        "GET",
        "/api/autotuner/saved-status",
        of::<tune::SavedStatusBody>,
    ),
    (
        "POST",
        "/api/autotuner/set_default_hashrate_target",
        of::<tune::RunStateBody>,
    ),
    (
        "GET",
        "/api/autotuner/silicon-report",
        of::<tune::SiliconReportBody>,
    ),
    (
        "GET",
        "/api/autotuner/tuned_profiles",
        of::<tune::TunedProfilesBody>,
    ),
    ("POST", "/api/perf/calibrate", of::<tune::RunStateBody>),
    ("POST", "/api/profile/upload", of::<tune::ImportBody>),
    ("GET", "/api/profiles", of::<tune::ProfilesBody>),
    ("POST", "/api/profiles", of::<tune::PostProfilesBody>),
    ("GET", "/api/profiles/silicon", of::<tune::SiliconListBody>),
    (
        "GET",
        "/api/profiles/silicon-table",
        of::<tune::SiliconTableBody>,
    ),
    (
        "GET",
        "/api/profiles/silicon/:id",
        of::<tune::SiliconBoardBody>,
    ),
    (
        "DELETE",
        "/api/profiles/silicon/:id",
        of::<tune::SiliconDeletedBody>,
    ),
    (
        "PUT",
        "/api/profiles/silicon/active",
        of::<tune::RunStateBody>,
    ),
    (
        "POST",
        "/api/profiles/silicon/import",
        of::<tune::ImportBody>,
    ),
    (
        "POST",
        "/api/profiles/silicon/import-json",
        of::<tune::ImportBody>,
    ),
    (
        "POST",
        "/api/profiles/silicon/reload",
        of::<tune::SiliconReloadBody>,
    ),
    ("GET", "/api/power/dps", of::<tune::DpsBody>),
    ("GET", "/api/tou/schedule", of::<tune::TouScheduleBody>),
    ("POST", "/api/tou/schedule", of::<tune::TouScheduleBody>),
    ("GET", "/api/thermal/posture", of::<thermal::PostureBody>),
    (
        "GET",
        "/api/thermal/supervisor",
        of::<thermal::SupervisorBody>,
    ),
    (
        "GET",
        "/api/system/boot_timeline",
        of::<mining::BootTimelineBody>,
    ),
    ("GET", "/api/boot/timeline", of::<mining::BootTimelineBody>),
    (
        "GET",
        "/api/mining/handoff/state",
        of::<mining::HandoffBody>,
    ),
    (
        "GET",
        "/api/mining/pipeline/manifest",
        of::<mining::PipelineManifestBody>,
    ),
    (
        "GET",
        "/api/tuning/constraints",
        of::<mining::TuningConstraintsBody>,
    ),
    // typed-rest: actions.
    ("POST", "/api/action/reboot", of::<hw::RebootBody>),
    ("POST", "/api/system/restart", of::<hw::RebootBody>),
    ("POST", "/api/action/restart", of::<hw::RestartBody>),
    ("POST", "/api/fan", of::<hw::FanBody>),
    ("GET", "/api/config", of::<cfg::ConfigBody>),
    ("POST", "/api/config", of::<cfg::ConfigWriteBody>),
    (
        "GET",
        "/api/config/backup/manifest",
        of::<cfg::BackupManifestBody>,
    ),
    ("GET", "/api/config/donation", of::<cfg::DonationBody>),
    ("POST", "/api/config/donation", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/config/import", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/config/restore", of::<cfg::ConfigWriteBody>),
    (
        "POST",
        "/api/config/restore/undo",
        of::<cfg::ConfigWriteBody>,
    ),
    ("GET", "/api/donation/info", of::<cfg::DonationInfoBody>),
    ("GET", "/api/audit-log", of::<cfg::AuditBody>),
    ("GET", "/api/history/audit", of::<cfg::AuditBody>),
    ("POST", "/api/network/hostname", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/setup/step4-mode", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/pools", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/setup/step5-pool", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/pools/test", of::<pools::PoolTestBody>),
    ("POST", "/api/setup/test-pool", of::<pools::PoolTestBody>),
    (
        "GET",
        "/api/pools/failover_policy",
        of::<pools::FailoverPolicyBody>,
    ),
    (
        "GET",
        "/api/stratum/protocol",
        of::<pools::StratumProtocolBody>,
    ),
    ("GET", "/api/pool/sv2/status", of::<pools::Sv2StatusBody>),
    (
        "GET",
        "/api/pool/sv2/handshake",
        of::<pools::Sv2HandshakeBody>,
    ),
    (
        "GET",
        "/api/pool/sv2/messages",
        of::<pools::Sv2MessagesBody>,
    ),
    (
        "GET",
        "/api/config/power-calibration",
        of::<cfg::PowerCalibrationBody>,
    ),
    (
        "POST",
        "/api/config/power-calibration",
        of::<cfg::PowerCalibrationBody>,
    ),
    (
        "GET",
        "/api/config/psu-override",
        of::<cfg::PsuOverrideBody>,
    ),
    (
        "POST",
        "/api/config/psu-override",
        of::<cfg::PsuOverrideBody>,
    ),
    ("GET", "/api/config/shared", of::<cfg::SharedBody>),
    ("POST", "/api/config/shared", of::<cfg::SharedBody>),
    ("GET", "/api/config/mqtt", of::<integ::MqttConfigBody>),
    ("POST", "/api/config/mqtt", of::<cfg::ConfigWriteBody>),
    ("POST", "/api/config/mqtt/test", of::<integ::MqttTestBody>),
    ("GET", "/api/mqtt/status", of::<integ::MqttStatusBody>),
    ("GET", "/api/config/webhook", of::<integ::WebhookConfigBody>),
    ("POST", "/api/config/webhook", of::<cfg::ConfigWriteBody>),
    (
        "POST",
        "/api/config/webhook/test",
        of::<integ::WebhookTestBody>,
    ),
    // typed-rest: discovery.
    ("GET", "/api/index", of::<disc::IndexBody>),
    (
        "GET",
        "/api/compatibility/manifest",
        of::<disc::ManifestBody>,
    ),
    (
        "GET",
        "/api/system/api-compatibility/manifest",
        of::<disc::ManifestBody>,
    ),
    ("GET", "/api/dashboard/version", of::<disc::VersionBody>),
    (
        "GET",
        "/api/dashboard/health",
        of::<disc::DashboardHealthBody>,
    ),
    (
        "GET",
        "/api/system/update/metadata",
        of::<disc::UpdateMetadataBody>,
    ),
    ("GET", "/api/v1/capabilities", of::<disc::CapabilitiesBody>),
    (
        "GET",
        "/api/system/update_capability",
        of::<disc::UpdateCapabilityBody>,
    ),
    ("GET", "/api/network/info", of::<disc::NetworkInfoBody>),
    ("GET", "/api/profiles/presets", of::<disc::PresetsBody>),
    (
        "GET",
        "/api/competitive/readiness",
        of::<disc::ReadinessBody>,
    ),
    // typed-rest: status.
    ("GET", "/api/chips/health", of::<health::ChipsHealthBody>),
    (
        "GET",
        "/api/diagnostics/chain",
        of::<health::ChainDiagnosticsBody>,
    ),
    // typed-rest: mining.
    (
        "GET",
        "/api/mining/pipeline/snapshot",
        of::<mining::PipelineSnapshotBody>,
    ),
    // typed-rest: fleet.
    ("GET", "/api/network/block", of::<disc::NetworkBlockBody>),
    (
        "GET",
        "/api/network/config_schema",
        of::<disc::ConfigSchemaBody>,
    ),
    // home: thermostat, solar and off-grid.
    ("GET", "/api/home/night-mode", of::<energy::NightModeBody>),
    ("POST", "/api/home/night-mode", of::<energy::NightModeBody>),
    ("GET", "/api/home/presets", of::<energy::HomePresetsBody>),
    (
        "GET",
        "/api/offgrid/presets",
        of::<energy::OffgridPresetsBody>,
    ),
    ("GET", "/api/offgrid/config", of::<OffgridConfigBody>),
    ("POST", "/api/offgrid/config", of::<OffgridConfigBody>),
    ("GET", "/api/solar/config", of::<SolarConfigBody>),
    ("POST", "/api/solar/config", of::<SolarConfigBody>),
    (
        "GET",
        "/api/offgrid/status",
        of::<energy::FollowerStatusBody>,
    ),
    ("GET", "/api/solar/status", of::<energy::FollowerStatusBody>),
    ("POST", "/api/offgrid/test", of::<energy::SourceTestBody>),
    ("POST", "/api/solar/test", of::<energy::SourceTestBody>),
    (
        "GET",
        "/api/solar/verification-history",
        of::<energy::VerificationHistoryBody>,
    ),
];

/// `(method, path, schema)` of every write whose JSON body the handler parses into a type of
/// [`crate::requests`]; the generator refuses a row the registry does not mount.
pub const REQUESTS: &[(&str, &str, SchemaOf)] = &[
    ("POST", "/api/auth/session", of::<req::PasswordRequest>),
    ("POST", "/api/auth/setup", of::<req::PasswordRequest>),
    (
        "POST",
        "/api/setup/step3-password",
        of::<req::PasswordRequest>,
    ),
    (
        "POST",
        "/api/auth/password",
        of::<req::ChangePasswordRequest>,
    ),
    ("POST", "/api/auth/tokens", of::<req::CreateTokenRequest>),
    ("POST", "/api/led/config", of::<req::LedRequest>),
    ("POST", "/api/led/pattern", of::<req::LedRequest>),
    ("POST", "/api/action/restart", of::<req::RestartRequest>),
    ("POST", "/api/fan", of::<req::FanRequest>),
    (
        "POST",
        "/api/debug/chip/frequency",
        of::<req::ChipFrequencyRequest>,
    ),
    (
        "POST",
        "/api/debug/chip/voltage",
        of::<req::ChipVoltageRequest>,
    ),
    (
        "PUT",
        "/api/autotuner/active",
        of::<req::AutotunerActiveRequest>,
    ),
    (
        "POST",
        "/api/autotuner/increment_power_target",
        of::<req::TargetStepRequest>,
    ),
    (
        "POST",
        "/api/autotuner/decrement_power_target",
        of::<req::TargetStepRequest>,
    ),
    (
        "POST",
        "/api/autotuner/increment_hashrate_target",
        of::<req::TargetStepRequest>,
    ),
    (
        "POST",
        "/api/autotuner/decrement_hashrate_target",
        of::<req::TargetStepRequest>,
    ),
    ("POST", "/api/profiles", of::<req::ProfileRequest>),
    (
        "POST",
        "/api/profiles/silicon/import-json",
        of::<req::ImportJsonRequest>,
    ),
    (
        "PUT",
        "/api/profiles/silicon/active",
        of::<req::SiliconActiveRequest>,
    ),
    (
        "POST",
        "/api/autotuner/profitability",
        of::<req::ProfitabilityRequest>,
    ),
    ("POST", "/api/tou/schedule", of::<req::TouScheduleRequest>),
    ("POST", "/api/pools/test", of::<req::PoolTestRequest>),
    ("POST", "/api/setup/test-pool", of::<req::PoolTestRequest>),
    (
        "POST",
        "/api/fleet/discover",
        of::<req::FleetDiscoverRequest>,
    ),
    ("POST", "/api/home/room-temp", of::<req::RoomTempRequest>),
    ("POST", "/api/home/target", of::<req::HomeTargetRequest>),
    (
        "POST",
        "/api/autotuner/noise-profile",
        of::<req::NoiseProfileRequest>,
    ),
    ("POST", "/api/autotuner/quota", of::<req::QuotaRequest>),
    (
        "POST",
        "/api/autotuner/room-temp-factor",
        of::<req::RoomTempFactorRequest>,
    ),
    (
        "POST",
        "/api/solar/test",
        of::<req::EnergySourceTestRequest>,
    ),
    (
        "POST",
        "/api/offgrid/test",
        of::<req::EnergySourceTestRequest>,
    ),
    (
        "POST",
        "/api/diagnostics/board-health/start",
        of::<req::DiagnosticStartRequest>,
    ),
    (
        "POST",
        "/api/diagnostics/chip-health/start",
        of::<req::DiagnosticStartRequest>,
    ),
    (
        "POST",
        "/api/diagnostics/hashreport/start",
        of::<req::DiagnosticStartRequest>,
    ),
    ("POST", "/api/debug/i2c", of::<req::I2cWriteRequest>),
    (
        "POST",
        "/api/debug/registers",
        of::<req::RegisterWriteRequest>,
    ),
    (
        "POST",
        "/api/debug/asic-command",
        of::<req::AsicCommandRequest>,
    ),
    (
        "POST",
        "/api/debug/psu/control",
        of::<req::PsuControlRequest>,
    ),
    ("POST", "/api/debug/pid-params", of::<req::PidParamsRequest>),
    ("POST", "/api/config/import", of::<req::ConfigImportRequest>),
    (
        "POST",
        "/api/config/restore",
        of::<req::ConfigRestoreRequest>,
    ),
    ("POST", "/api/network/hostname", of::<req::HostnameRequest>),
    ("POST", "/api/setup/step4-mode", of::<req::ModeRequest>),
    (
        "POST",
        "/api/system/restore-to-stock",
        of::<req::RestoreToStockRequest>,
    ),
    (
        "POST",
        "/api/config/webhook/test",
        of::<req::WebhookTestRequest>,
    ),
    ("POST", "/api/config", of::<cfg::ConfigPatchRequest>),
    ("POST", "/api/solar/config", of::<energy::SolarPatchRequest>),
    (
        "POST",
        "/api/offgrid/config",
        of::<energy::OffgridPatchRequest>,
    ),
    (
        "POST",
        "/api/home/night-mode",
        of::<energy::NightModePatchRequest>,
    ),
    (
        "POST",
        "/api/config/donation",
        of::<cfg::DonationPatchRequest>,
    ),
    ("POST", "/api/pools", of::<pools::PoolListRequest>),
    (
        "POST",
        "/api/setup/step5-pool",
        of::<pools::PoolListRequest>,
    ),
    (
        "POST",
        "/api/config/power-calibration",
        of::<cfg::CalibrationPatchRequest>,
    ),
    (
        "POST",
        "/api/config/psu-override",
        of::<cfg::PsuOverridePatchRequest>,
    ),
    ("POST", "/api/config/shared", of::<cfg::SharedPatchRequest>),
    ("POST", "/api/config/mqtt", of::<integ::MqttPatchRequest>),
    (
        "POST",
        "/api/config/mqtt/test",
        of::<integ::MqttPatchRequest>,
    ),
    (
        "POST",
        "/api/config/webhook",
        of::<integ::WebhookPatchRequest>,
    ),
];

/// A generator for an OpenAPI 3.1 document: JSON Schema 2020-12, definitions under
/// `#/components/schemas`, shapes as serialised.
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator()
}

/// The same for request bodies: shapes as deserialised, so a member with a default is optional.
pub fn request_generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_deserialize()
        .into_generator()
}
