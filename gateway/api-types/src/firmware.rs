//! Firmware lifecycle: the update status every status route answers with
//! (`/api/system/update/status`, `/api/system/upgrade/status`, `/api/v1/.../status`, the upload
//! answers, `/api/system/restore-to-stock/status`) and the restore-to-stock preflight.

use serde::Serialize;
use svcos_proto::supervisor::v1 as pb;

/// The API word of an update phase.
pub fn phase_word(p: i32) -> &'static str {
    match pb::UpdatePhase::try_from(p).unwrap_or(pb::UpdatePhase::Unspecified) {
        pb::UpdatePhase::Unspecified | pb::UpdatePhase::Idle => "idle",
        pb::UpdatePhase::Receiving => "receiving",
        pb::UpdatePhase::Verifying => "verifying",
        pb::UpdatePhase::Installing => "installing",
        pb::UpdatePhase::PendingReboot => "pending_reboot",
        pb::UpdatePhase::BootingNewSlot => "booting_new_slot",
        pb::UpdatePhase::Committed => "committed",
        pb::UpdatePhase::RolledBack => "rolled_back",
        pb::UpdatePhase::Failed => "failed",
    }
}

/// Progress of the current phase.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Progress {
    /// 0-100; `null` while receiving a bundle of unknown length.
    pub percent: Option<u64>,
    /// What is happening.
    pub message: String,
    /// Bytes of the bundle received (only while receiving).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    /// The bundle's announced length (only while receiving; `null` when not announced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_expected: Option<Option<u64>>,
}

/// A version in a slot.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SlotVersion {
    /// Firmware version.
    pub version: String,
    /// Slot name.
    pub slot: String,
}

/// One rootfs slot.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Slot {
    /// RAUC slot name.
    pub name: String,
    /// Bootloader name.
    pub bootname: String,
    /// active, inactive, booted.
    pub state: String,
    /// good, bad.
    pub boot_status: String,
    /// Installed version.
    pub version: String,
    /// When it was installed.
    pub installed_at: String,
    /// The installed image's SHA-256.
    pub sha256: String,
    /// Why its last boot failed (empty otherwise).
    pub boot_failure: String,
}

/// One phase change of the current operation.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PhaseStep {
    /// The phase entered.
    pub phase: &'static str,
    /// When, Unix ms.
    pub at_ms: i64,
    /// Why.
    pub note: String,
}

/// The update status (`svcos.api.update.status.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UpdateStatusBody {
    /// `svcos.api.update.status.v1`.
    pub schema: &'static str,
    /// idle, receiving, verifying, installing, pending_reboot, booting_new_slot, committed,
    /// rolled_back, failed.
    pub phase: &'static str,
    /// An operation is under way.
    pub in_progress: bool,
    /// update or restore_to_stock.
    pub kind: String,
    /// The operation's id.
    pub operation_id: u64,
    /// Why the phase was entered.
    pub reason: String,
    /// Why the last request was refused (empty otherwise).
    pub refusal: String,
    /// The current phase's progress.
    pub progress: Progress,
    /// What is being replaced.
    pub from: SlotVersion,
    /// What replaces it.
    pub to: SlotVersion,
    /// The operation was forced past a check.
    pub forced: bool,
    /// The running firmware's version.
    pub running_version: String,
    /// The slot booted from.
    pub booted_slot: String,
    /// The slot the bootloader boots next.
    pub primary_slot: String,
    /// The RAUC compatible string bundles must carry.
    pub compatible: String,
    /// RAUC answered.
    pub slot_manager_reachable: bool,
    /// Every slot.
    pub slots: Vec<Slot>,
    /// Last change, Unix ms.
    pub updated_at_ms: i64,
    /// The current operation's phase changes.
    pub history: Vec<PhaseStep>,
    /// The latest refusal or failure ("" when the latest request did not fail). A bundle
    /// refused while verifying installs nothing and leaves `phase` and `history` as they were;
    /// this, `refusal` and `last_error_at_ms` then tell of it.
    pub last_error: String,
    /// When `last_error` happened, Unix ms (0 when none).
    pub last_error_at_ms: i64,
}

impl UpdateStatusBody {
    /// The supervisor's status; while the gateway still receives an upload (`received`,
    /// `expected` bytes) and no operation is in flight, the phase reads `receiving`.
    pub fn new(s: &pb::UpdateStatus, receiving: Option<(u64, Option<u64>)>) -> Self {
        let mut phase = phase_word(s.phase);
        let mut progress = Progress {
            percent: Some(u64::from(s.progress_percent)),
            message: s.progress_message.clone(),
            bytes_received: None,
            bytes_expected: None,
        };
        let in_flight = matches!(
            phase,
            "verifying" | "installing" | "pending_reboot" | "booting_new_slot"
        );
        if let Some((received, expected)) = receiving
            && !in_flight
        {
            phase = "receiving";
            progress = Progress {
                percent: expected
                    .filter(|e| *e > 0)
                    .map(|e| (received.saturating_mul(100) / e).min(100)),
                message: "receiving the bundle".into(),
                bytes_received: Some(received),
                bytes_expected: Some(expected),
            };
        }
        UpdateStatusBody {
            schema: "svcos.api.update.status.v1",
            phase,
            in_progress: in_flight || phase == "receiving",
            kind: s.kind.clone(),
            operation_id: s.operation_id,
            reason: s.reason.clone(),
            refusal: s.refusal.clone(),
            progress,
            from: SlotVersion {
                version: s.from_version.clone(),
                slot: s.from_slot.clone(),
            },
            to: SlotVersion {
                version: s.to_version.clone(),
                slot: s.to_slot.clone(),
            },
            forced: s.forced,
            running_version: s.running_version.clone(),
            booted_slot: s.booted_slot.clone(),
            primary_slot: s.primary_slot.clone(),
            compatible: s.compatible.clone(),
            slot_manager_reachable: s.slot_manager_reachable,
            slots: s
                .slots
                .iter()
                .map(|slot| Slot {
                    name: slot.name.clone(),
                    bootname: slot.bootname.clone(),
                    state: slot.state.clone(),
                    boot_status: slot.boot_status.clone(),
                    version: slot.version.clone(),
                    installed_at: slot.installed_at.clone(),
                    sha256: slot.sha256.clone(),
                    boot_failure: slot.boot_failure.clone(),
                })
                .collect(),
            updated_at_ms: s.updated_at_ms,
            last_error: s.last_error.clone(),
            last_error_at_ms: s.last_error_at_ms,
            history: s
                .history
                .iter()
                .map(|h| PhaseStep {
                    phase: phase_word(h.phase),
                    at_ms: h.at_ms,
                    note: h.note.clone(),
                })
                .collect(),
        }
    }
}

/// One restore-to-stock check.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Check {
    /// Check id.
    pub id: String,
    /// It passed.
    pub passed: bool,
    /// What was found.
    pub detail: String,
}

/// The restore-to-stock preflight (`svcos.api.restore_to_stock.preflight.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PreflightBody {
    /// `svcos.api.restore_to_stock.preflight.v1`.
    pub schema: &'static str,
    /// Every check passed.
    pub ready: bool,
    /// The stock version a restore installs.
    pub stock_version: String,
    /// Every check.
    pub checks: Vec<Check>,
    /// What a restore erases.
    pub will_be_lost: Vec<String>,
}

impl From<&pb::RestorePreflightResponse> for PreflightBody {
    fn from(r: &pb::RestorePreflightResponse) -> Self {
        PreflightBody {
            schema: "svcos.api.restore_to_stock.preflight.v1",
            ready: r.ready,
            stock_version: r.stock_version.clone(),
            checks: r
                .checks
                .iter()
                .map(|c| Check {
                    id: c.id.clone(),
                    passed: c.passed,
                    detail: c.detail.clone(),
                })
                .collect(),
            will_be_lost: r.will_be_lost.clone(),
        }
    }
}
