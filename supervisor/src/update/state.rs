//! The persisted update state machine: one JSON record, rewritten atomically on every phase
//! change, and the pure decision of what to do with it when the supervisor starts.
//!
//! ```text
//! idle → receiving → verifying → installing → pending_reboot → booting_new_slot → committed
//!                        │            │             │                 │
//!                        └────────────┴─────────────┴─→ failed        └─→ rolled_back
//! ```
//! `receiving` lives in the gateway (the upload in flight); everything from `verifying` on is
//! written here before the step starts, so a kill at any instant leaves a record that names the
//! step that was cut short.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Schema tag of the record file.
pub const SCHEMA: &str = "svcos.update.state.v1";
/// Phase changes kept in the record.
const HISTORY_CAP: usize = 24;

/// One phase of an update or restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing has happened yet.
    #[default]
    Idle,
    /// The gateway is receiving the upload (never persisted here).
    Receiving,
    /// Checking signature, model and version.
    Verifying,
    /// The slot manager is writing the inactive slot.
    Installing,
    /// The new slot is written and primary; the reboot has not happened yet.
    PendingReboot,
    /// Rebooted into the new slot; waiting for the stack to report healthy.
    BootingNewSlot,
    /// The new slot is marked good.
    Committed,
    /// The new slot did not come up; the previous one runs again.
    RolledBack,
    /// Refused or interrupted before any reboot; the running slot is unchanged.
    Failed,
}

impl Phase {
    /// The wire spelling (JSON, D-Bus, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Receiving => "receiving",
            Phase::Verifying => "verifying",
            Phase::Installing => "installing",
            Phase::PendingReboot => "pending_reboot",
            Phase::BootingNewSlot => "booting_new_slot",
            Phase::Committed => "committed",
            Phase::RolledBack => "rolled_back",
            Phase::Failed => "failed",
        }
    }

    /// Whether an operation in this phase is still under way (a new one must wait).
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Phase::Receiving
                | Phase::Verifying
                | Phase::Installing
                | Phase::PendingReboot
                | Phase::BootingNewSlot
        )
    }
}

/// Update from an uploaded bundle, or restore of the stock image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// An uploaded bundle.
    #[default]
    Update,
    /// The stock image kept on the data partition.
    Restore,
}

impl OpKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Update => "update",
            OpKind::Restore => "restore",
        }
    }
}

/// One recorded phase change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseChange {
    /// The phase entered.
    pub phase: Phase,
    /// When, Unix ms.
    pub at_ms: i64,
    /// Why, when it says more than the phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// The persisted record of the current or last operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Record {
    /// [`SCHEMA`].
    pub schema: String,
    /// Increments with every operation.
    pub operation_id: u64,
    /// Update or restore.
    pub kind: OpKind,
    /// Where it stands.
    pub phase: Phase,
    /// Why it failed or rolled back; while booting the new slot, why it is about to be marked
    /// bad (kept so the old slot can report it after the reboot).
    pub reason: String,
    /// Machine-readable refusal code, when refused.
    pub refusal: String,
    /// Install progress, percent.
    pub progress_percent: u32,
    /// What the slot manager is doing.
    pub progress_message: String,
    /// Version running when the operation started.
    pub from_version: String,
    /// Version of the bundle.
    pub to_version: String,
    /// Booted slot (bootname) when the operation started.
    pub from_slot: String,
    /// Slot written (bootname).
    pub to_slot: String,
    /// A downgrade was allowed explicitly.
    pub forced: bool,
    /// Last change, Unix ms.
    pub updated_at_ms: i64,
    /// Recent phase changes, oldest first.
    pub history: Vec<PhaseChange>,
    /// The latest refusal or failure, kept also when a refusal left the phase alone.
    pub last_error: String,
    /// When `last_error` happened, Unix ms.
    pub last_error_at_ms: i64,
}

impl Record {
    /// Enter `phase` at `now_ms` with an optional note.
    pub fn enter(&mut self, phase: Phase, now_ms: i64, note: &str) {
        self.schema = SCHEMA.into();
        self.phase = phase;
        self.updated_at_ms = now_ms;
        self.history.push(PhaseChange {
            phase,
            at_ms: now_ms,
            note: note.to_string(),
        });
        if self.history.len() > HISTORY_CAP {
            let drop = self.history.len() - HISTORY_CAP;
            self.history.drain(..drop);
        }
    }

    /// Start a new operation, keeping only the id sequence.
    pub fn begin(&self, kind: OpKind, now_ms: i64) -> Record {
        let mut next = Record {
            operation_id: self.operation_id + 1,
            kind,
            ..Record::default()
        };
        next.enter(Phase::Verifying, now_ms, "");
        next
    }

    /// End in `Failed` with a reason (and a refusal code when the bundle was refused).
    pub fn fail(&mut self, now_ms: i64, refusal: &str, reason: &str) {
        self.reason = reason.to_string();
        self.refusal = refusal.to_string();
        self.last_error = reason.to_string();
        self.last_error_at_ms = now_ms;
        self.enter(Phase::Failed, now_ms, reason);
    }

    /// A request refused while verifying: nothing was installed, so no operation ran and the
    /// status goes back to `before` (what it said before the attempt: phase, versions, history,
    /// operation id); only `refusal`, `last_error` and its time tell of the attempt. A `failed`
    /// phase with an install history would read as if an install had been tried and gone wrong.
    pub fn refused(before: &Record, now_ms: i64, refusal: &str, message: &str) -> Record {
        Record {
            schema: SCHEMA.into(),
            refusal: refusal.to_string(),
            last_error: message.to_string(),
            last_error_at_ms: now_ms,
            ..before.clone()
        }
    }

    /// Load the record; a missing file is a fresh `Idle` record, and so is a damaged one (moved
    /// aside by [`svcos_common::statefile`]): the slot manager, not this record, knows which
    /// slot boots, so forgetting an operation loses its history, never the running system.
    pub fn load(path: &Path) -> Record {
        svcos_common::statefile::load_json(path).unwrap_or_default()
    }

    /// Write the record atomically (a power cut leaves the old or the new record).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        svcos_common::fsutil::atomic_write(path, &bytes, 0o644)
    }
}

/// What the slot manager says about the machine when the supervisor starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFacts {
    /// The slot that booted (bootname).
    pub booted: String,
    /// The slot the bootloader tries first (bootname).
    pub primary: String,
    /// The slot manager is installing right now (it outlived us).
    pub installer_busy: bool,
    /// Why the bootloader gave up on the target slot, if it said.
    pub target_boot_failure: String,
}

/// What to do with a record found at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Nothing is in flight.
    Nothing,
    /// The installer still works on it: follow it to completion.
    FollowInstall,
    /// The step was cut short; record it as failed with this reason.
    Interrupted(String),
    /// The slot is written and primary but the reboot never happened: reboot now.
    Reboot,
    /// Running the new slot: watch the stack's health, then mark good or bad.
    WatchHealth,
    /// The old slot runs again: record the rollback with this reason.
    RolledBack(String),
}

/// Decide what a starting supervisor does with `record`, given the boot facts.
pub fn resume(record: &Record, facts: &BootFacts) -> Resume {
    let target = &record.to_slot;
    match record.phase {
        Phase::Idle | Phase::Committed | Phase::RolledBack | Phase::Failed => Resume::Nothing,
        // Never persisted by the supervisor; a record saying so is from a foreign writer.
        Phase::Receiving => Resume::Interrupted("the upload was interrupted".into()),
        Phase::Verifying => Resume::Interrupted(
            "interrupted while verifying the bundle; nothing was written and the running slot is unchanged"
                .into(),
        ),
        Phase::Installing if facts.installer_busy => Resume::FollowInstall,
        Phase::Installing => Resume::Interrupted(format!(
            "interrupted while installing into slot {target}; slot {} still boots and {target} stays unbootable until a new install",
            facts.booted
        )),
        Phase::PendingReboot | Phase::BootingNewSlot if !target.is_empty() && facts.booted == *target => {
            Resume::WatchHealth
        }
        Phase::PendingReboot if facts.primary == *target => Resume::Reboot,
        Phase::PendingReboot | Phase::BootingNewSlot => {
            let mut why = if !record.reason.is_empty() {
                record.reason.clone()
            } else if !facts.target_boot_failure.is_empty() {
                facts.target_boot_failure.clone()
            } else {
                format!("slot {target} did not come up")
            };
            why.push_str(&format!(
                "; the bootloader booted slot {} ({}) again",
                facts.booted, record.from_version
            ));
            Resume::RolledBack(why)
        }
    }
}

/// Compare two versions by SemVer 2.0 precedence (`1.2.10` > `1.2.9`; a `-pre` suffix sorts
/// before the release; `+build` metadata is ignored). A leading `v` and a missing minor or patch
/// (`1.0` = `1.0.0`) are accepted, as bundle manifests have carried both. A version that still
/// does not parse sorts after every one that does, so it is never refused as a downgrade.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn parse(v: &str) -> Option<semver::Version> {
        let v = v.trim().trim_start_matches('v');
        if let Ok(version) = semver::Version::parse(v) {
            return Some(version);
        }
        // `1` or `1.2`: the parts semver requires, as zeros.
        let end = v.find(['-', '+']).unwrap_or(v.len());
        let (core, suffix) = v.split_at(end);
        let padded = match core.split('.').count() {
            1 => format!("{core}.0.0{suffix}"),
            2 => format!("{core}.0{suffix}"),
            _ => return None,
        };
        semver::Version::parse(&padded).ok()
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => x.cmp_precedence(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.trim().cmp(b.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn a_refusal_while_verifying_leaves_the_previous_operation_showing() {
        let mut before = Record::default();
        before = before.begin(OpKind::Update, 1);
        before.enter(Phase::Installing, 2, "");
        before.enter(Phase::PendingReboot, 3, "");
        before.enter(Phase::BootingNewSlot, 4, "");
        before.enter(Phase::Committed, 5, "");
        let attempt = before.begin(OpKind::Update, 10);
        assert_eq!(attempt.phase, Phase::Verifying);
        let after = Record::refused(&before, 11, "not_a_bundle", "not a RAUC bundle: x");
        assert_eq!(after.phase, Phase::Committed);
        assert_eq!(after.operation_id, before.operation_id);
        assert_eq!(after.history, before.history);
        assert_eq!(
            (after.refusal.as_str(), after.last_error.as_str()),
            ("not_a_bundle", "not a RAUC bundle: x")
        );
        assert_eq!(after.last_error_at_ms, 11);
        // The next operation starts clean.
        let next = after.begin(OpKind::Update, 20);
        assert!(next.last_error.is_empty() && next.refusal.is_empty());
    }

    fn facts(booted: &str, primary: &str) -> BootFacts {
        BootFacts {
            booted: booted.into(),
            primary: primary.into(),
            installer_busy: false,
            target_boot_failure: String::new(),
        }
    }

    fn record(phase: Phase) -> Record {
        let mut r = Record::default().begin(OpKind::Update, 1);
        r.from_slot = "A".into();
        r.to_slot = "B".into();
        r.from_version = "0.1.0".into();
        r.enter(phase, 2, "");
        r
    }

    #[test]
    fn versions_order() {
        for (a, b, want) in [
            ("0.1.0", "0.1.0", Equal),
            ("0.2.0", "0.1.9", Greater),
            ("0.1.10", "0.1.9", Greater),
            ("1.0.0-rc1", "1.0.0", Less),
            ("1.0.0", "1.0.0-rc1", Greater),
            ("1.0", "1.0.1", Less),
            ("v2.0.0", "1.9.9", Greater),
            ("0.1.0+build7", "0.1.0", Equal),
            ("1.0.0-rc.2", "1.0.0-rc.10", Less),
            ("1.0.0-alpha", "1.0.0-1", Greater),
            ("1", "0.9.9", Greater),
            ("nightly", "9.9.9", Greater),
        ] {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn resume_table() {
        let busy = BootFacts {
            installer_busy: true,
            ..facts("A", "A")
        };
        let failed_b = BootFacts {
            target_boot_failure: "svcos exited before reporting healthy".into(),
            ..facts("A", "A")
        };
        let cases: Vec<(Phase, BootFacts, &str)> = vec![
            (Phase::Idle, facts("A", "A"), "nothing"),
            (Phase::Committed, facts("B", "B"), "nothing"),
            (Phase::Failed, facts("A", "A"), "nothing"),
            (Phase::Verifying, facts("A", "A"), "interrupted"),
            (Phase::Installing, facts("A", "A"), "interrupted"),
            (Phase::Installing, busy, "follow"),
            (Phase::PendingReboot, facts("A", "B"), "reboot"),
            (Phase::PendingReboot, facts("B", "B"), "watch"),
            (Phase::PendingReboot, facts("A", "A"), "rolled_back"),
            (Phase::BootingNewSlot, facts("B", "B"), "watch"),
            (Phase::BootingNewSlot, facts("A", "B"), "rolled_back"),
            (Phase::BootingNewSlot, failed_b, "rolled_back"),
        ];
        for (phase, f, want) in cases {
            let got = match resume(&record(phase), &f) {
                Resume::Nothing => "nothing",
                Resume::FollowInstall => "follow",
                Resume::Interrupted(_) => "interrupted",
                Resume::Reboot => "reboot",
                Resume::WatchHealth => "watch",
                Resume::RolledBack(_) => "rolled_back",
            };
            assert_eq!(got, want, "{phase:?} with {f:?}");
        }
    }

    #[test]
    fn rollback_reason_prefers_recorded_then_bootloader() {
        let mut r = record(Phase::BootingNewSlot);
        let f = BootFacts {
            target_boot_failure: "exited with status 3".into(),
            ..facts("A", "A")
        };
        let Resume::RolledBack(why) = resume(&r, &f) else {
            panic!()
        };
        assert!(why.starts_with("exited with status 3"), "{why}");
        assert!(why.contains("slot A"), "{why}");
        r.reason = "hw-agent failed".into();
        let Resume::RolledBack(why) = resume(&r, &f) else {
            panic!()
        };
        assert!(why.starts_with("hw-agent failed"), "{why}");
    }

    #[test]
    fn record_round_trips_atomically_and_bounds_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("update").join("state.json");
        assert_eq!(Record::load(&path).phase, Phase::Idle);
        let mut r = Record::default().begin(OpKind::Restore, 5);
        for i in 0..100 {
            r.enter(Phase::Installing, i, "");
        }
        assert_eq!(r.history.len(), HISTORY_CAP);
        r.fail(200, "wrong_key", "signature not made by a trusted key");
        r.save(&path).unwrap();
        let back = Record::load(&path);
        assert_eq!(back, r);
        assert_eq!(back.operation_id, 1);
        assert_eq!(back.kind, OpKind::Restore);
        assert!(!back.phase.in_progress());
    }

    #[test]
    fn a_damaged_record_is_idle_and_moved_aside() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.json");
            let mut r = Record::default().begin(OpKind::Restore, 5);
            r.enter(Phase::Installing, 6, "");
            r.save(&path).unwrap();
            let bad = damage.write(&path);
            assert_eq!(Record::load(&path), Record::default(), "{damage:?}");
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }
}
