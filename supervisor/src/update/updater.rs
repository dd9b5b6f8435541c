//! The updater: drives the slot manager over RAUC's D-Bus API through the persisted state
//! machine ([`super::state`]). This is the code path that is identical on the image (real RAUC
//! on the system bus) and in the sim (the stand-in on the sim's bus); only [`Platform`] differs
//! (where the keyring and stock bundle are, and what a reboot is).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tonic::{Request, Response, Status};

use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_proto::supervisor::v1 as pb;
use svcos_proto::supervisor::v1::update_service_server::{UpdateService, UpdateServiceServer};

use super::bundle::{self, BundleError};
use super::rauc::{self, InstallerProxy};
use super::state::{self, BootFacts, OpKind, Phase, Record, Resume};
use crate::dbus::Bus;
use crate::manager::{Handle, State};

/// How long the new slot's stack has to be fully running before the slot is marked bad.
pub const HEALTH_DEADLINE: Duration = Duration::from_secs(120);
/// Restarts of one service while on trial that count as a crash loop.
const CRASH_LOOP_RESTARTS: u32 = 3;
/// Longest an install may take before it counts as hung.
const INSTALL_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// Pause between answering the install call and stopping the stack, so the answer gets out.
const REBOOT_DELAY: Duration = Duration::from_millis(800);
/// Room kept free beyond what an install needs.
const SPACE_MARGIN: u64 = 16 << 20;
/// gRPC metadata key carrying the refusal code.
pub const REFUSAL_KEY: &str = "svcos-refusal";

/// Where this platform keeps things, and what a reboot is.
#[derive(Debug, Clone)]
pub struct Platform {
    /// Trusted signing certificates (RAUC keyring).
    pub keyring: PathBuf,
    /// The stock image, as a RAUC bundle on the data partition.
    pub stock_bundle: PathBuf,
    /// Directory the gateway writes uploads into (bundles must come from there).
    pub upload_dir: PathBuf,
    /// Where the record lives and bundles are staged.
    pub state_dir: PathBuf,
    /// A reboot execs the sim's bootloader (true) or reboots the machine (false).
    pub sim: bool,
}

impl Platform {
    /// The platform of a layout.
    pub fn new(layout: &Layout, sim_dir: Option<&Path>) -> Self {
        let state_dir = layout
            .service_state_dir(ServiceName::Supervisor)
            .join("update");
        let upload_dir = layout
            .service_state_dir(ServiceName::Gateway)
            .join("uploads");
        match sim_dir {
            Some(dir) => Platform {
                keyring: dir.join("rauc").join("keyring.pem"),
                stock_bundle: layout.state_dir.join("stock").join("stock.raucb"),
                upload_dir,
                state_dir,
                sim: true,
            },
            None => Platform {
                keyring: PathBuf::from("/etc/rauc/keyring.pem"),
                stock_bundle: layout.state_dir.join("stock").join("stock.raucb"),
                upload_dir,
                state_dir,
                sim: false,
            },
        }
    }

    fn record_path(&self) -> PathBuf {
        self.state_dir.join("state.json")
    }
}

/// Set by the updater, read by the supervisor's entry once every service is down.
#[derive(Debug, Clone)]
pub struct RebootSwitch {
    requested: Arc<AtomicBool>,
    shutdown: Shutdown,
}

impl RebootSwitch {
    /// A switch that stops the supervisor through `shutdown`.
    pub fn new(shutdown: Shutdown) -> Self {
        RebootSwitch {
            requested: Arc::new(AtomicBool::new(false)),
            shutdown,
        }
    }

    /// Stop every service, then reboot.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.shutdown.trigger();
    }

    /// Whether a reboot was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// A refused or failed operation: stable code, message, gRPC code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable machine-readable code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl Refusal {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Refusal {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The typed gRPC status, with the code in the `svcos-refusal` metadata.
    pub fn to_status(&self) -> Status {
        let msg = self.message.clone();
        let mut status = match self.code.as_str() {
            "wrong_key" | "bad_digest" | "truncated" | "not_a_bundle" | "bad_manifest"
            | "unsafe_image" | "bad_path" => Status::invalid_argument(msg),
            "io" => Status::internal(msg),
            _ => Status::failed_precondition(msg),
        };
        if let Ok(v) = self.code.parse() {
            status.metadata_mut().insert(REFUSAL_KEY, v);
        }
        status
    }
}

impl From<BundleError> for Refusal {
    fn from(e: BundleError) -> Self {
        Refusal::new(e.code(), e.to_string())
    }
}

/// What the slot manager says right now.
#[derive(Debug, Clone, Default)]
struct Facts {
    booted: String,
    primary: String,
    compatible: String,
    running_version: String,
    operation: String,
    slots: Vec<pb::SlotStatus>,
}

impl Facts {
    fn slot(&self, bootname: &str) -> Option<&pb::SlotStatus> {
        self.slots.iter().find(|s| s.bootname == bootname)
    }
}

/// The updater.
#[derive(Debug, Clone)]
pub struct Updater {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    platform: Platform,
    bus: Option<Bus>,
    conn: tokio::sync::Mutex<Option<zbus::Connection>>,
    record: std::sync::Mutex<Record>,
    op: tokio::sync::Mutex<()>,
    manager: Handle,
    reboot: RebootSwitch,
    layout: Layout,
}

fn now_ms() -> i64 {
    svcos_common::time::unix_ms()
}

fn phase_to_pb(p: Phase) -> pb::UpdatePhase {
    match p {
        Phase::Idle => pb::UpdatePhase::Idle,
        Phase::Receiving => pb::UpdatePhase::Receiving,
        Phase::Verifying => pb::UpdatePhase::Verifying,
        Phase::Installing => pb::UpdatePhase::Installing,
        Phase::PendingReboot => pb::UpdatePhase::PendingReboot,
        Phase::BootingNewSlot => pb::UpdatePhase::BootingNewSlot,
        Phase::Committed => pb::UpdatePhase::Committed,
        Phase::RolledBack => pb::UpdatePhase::RolledBack,
        Phase::Failed => pb::UpdatePhase::Failed,
    }
}

/// Classify RAUC's `LastError` into a refusal code.
fn classify_last_error(msg: &str) -> &'static str {
    let lower = msg.to_ascii_lowercase();
    // First: these messages quote file names and link targets, which may contain any word below.
    if lower.contains("unsafe image in the bundle") {
        "unsafe_image"
    } else if lower.contains("bad manifest") {
        "bad_manifest"
    } else if lower.contains("digest") || lower.contains("checksum") {
        "bad_digest"
    } else if lower.contains("compatible") || lower.contains("this unit is") {
        "wrong_model"
    } else if lower.contains("certificate") || lower.contains("trusted key") {
        "wrong_key"
    } else if lower.contains("not a rauc bundle") {
        "not_a_bundle"
    } else if lower.contains("cut short")
        || lower.contains("not a complete")
        || lower.contains("invalid bundle")
    {
        "truncated"
    } else {
        "install_failed"
    }
}

impl Updater {
    /// An updater for this instance; loads the record (an unreadable one starts over, logged).
    pub fn new(
        platform: Platform,
        bus: Option<Bus>,
        manager: Handle,
        reboot: RebootSwitch,
        layout: Layout,
    ) -> Self {
        let record = Record::load(&platform.record_path());
        Updater {
            inner: Arc::new(Inner {
                platform,
                bus,
                conn: tokio::sync::Mutex::new(None),
                record: std::sync::Mutex::new(record),
                op: tokio::sync::Mutex::new(()),
                manager,
                reboot,
                layout,
            }),
        }
    }

    fn record(&self) -> Record {
        self.inner
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replace the record in memory and on disk.
    fn commit(&self, record: Record) {
        if let Err(e) = record.save(&self.inner.platform.record_path()) {
            tracing::error!(error = %e, "cannot persist the update record");
        }
        tracing::info!(
            op = record.operation_id,
            phase = record.phase.as_str(),
            reason = %record.reason,
            "update state"
        );
        *self.inner.record.lock().unwrap_or_else(|p| p.into_inner()) = record;
    }

    fn change(&self, f: impl FnOnce(&mut Record)) -> Record {
        let mut r = self.record();
        f(&mut r);
        self.commit(r.clone());
        r
    }

    async fn proxy(&self) -> Result<InstallerProxy<'static>, Refusal> {
        let unavailable = |e: String| {
            Refusal::new(
                "slot_manager_unavailable",
                format!("slot manager (RAUC on D-Bus) unreachable: {e}"),
            )
        };
        let Some(bus) = &self.inner.bus else {
            return Err(unavailable("no D-Bus bus configured".into()));
        };
        let mut guard = self.inner.conn.lock().await;
        if guard.is_none() {
            let conn = match bus {
                Bus::System => zbus::Connection::system().await,
                Bus::Address(a) => match zbus::connection::Builder::address(a.as_str()) {
                    Ok(b) => b.build().await,
                    Err(e) => Err(e),
                },
            }
            .map_err(|e| unavailable(e.to_string()))?;
            *guard = Some(conn);
        }
        let conn = guard
            .as_ref()
            .cloned()
            .ok_or_else(|| unavailable("no connection".into()))?;
        let proxy = InstallerProxy::builder(&conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await;
        match proxy {
            Ok(p) => Ok(p),
            Err(e) => {
                *guard = None;
                Err(unavailable(e.to_string()))
            }
        }
    }

    async fn facts(&self, proxy: &InstallerProxy<'static>) -> Result<Facts, Refusal> {
        let err = |e: zbus::Error| {
            Refusal::new(
                "slot_manager_unavailable",
                format!("slot manager (RAUC on D-Bus) unreachable: {e}"),
            )
        };
        let booted = proxy.boot_slot().await.map_err(err)?;
        let compatible = proxy.compatible().await.map_err(err)?;
        let operation = proxy.operation().await.map_err(err)?;
        let primary_name = proxy.get_primary().await.map_err(err)?;
        let rows = proxy.get_slot_status().await.map_err(err)?;
        let mut primary = String::new();
        let slots: Vec<pb::SlotStatus> = rows
            .iter()
            .filter(|(_, row)| rauc::attr(row, "class") == "rootfs")
            .map(|(name, row)| {
                let bootname = rauc::attr(row, "bootname");
                if *name == primary_name {
                    primary = bootname.clone();
                }
                pb::SlotStatus {
                    name: name.clone(),
                    state: rauc::attr(row, "state"),
                    boot_status: rauc::attr(row, "boot-status"),
                    version: rauc::attr(row, "bundle.version"),
                    installed_at: rauc::attr(row, "installed.timestamp"),
                    sha256: rauc::attr(row, "sha256"),
                    boot_failure: rauc::attr(row, "svcos.boot-failure"),
                    bootname,
                }
            })
            .collect();
        let running_version = slots
            .iter()
            .find(|s| s.bootname == booted)
            .map(|s| s.version.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
        Ok(Facts {
            booted,
            primary,
            compatible,
            running_version,
            operation,
            slots,
        })
    }

    /// The status every route reports.
    pub async fn status(&self) -> pb::UpdateStatus {
        let r = self.record();
        let facts = match self.proxy().await {
            Ok(p) => self.facts(&p).await.ok(),
            Err(_) => None,
        };
        let reachable = facts.is_some();
        let f = facts.unwrap_or_default();
        pb::UpdateStatus {
            phase: phase_to_pb(r.phase) as i32,
            kind: r.kind.as_str().into(),
            reason: r.reason.clone(),
            refusal: r.refusal.clone(),
            progress_percent: r.progress_percent,
            progress_message: r.progress_message.clone(),
            from_version: r.from_version.clone(),
            to_version: r.to_version.clone(),
            from_slot: r.from_slot.clone(),
            to_slot: r.to_slot.clone(),
            booted_slot: f.booted.clone(),
            primary_slot: f.primary.clone(),
            running_version: if reachable {
                f.running_version.clone()
            } else {
                env!("CARGO_PKG_VERSION").into()
            },
            compatible: f.compatible.clone(),
            slots: f.slots.clone(),
            operation_id: r.operation_id,
            updated_at_ms: r.updated_at_ms,
            slot_manager_reachable: reachable,
            history: r
                .history
                .iter()
                .map(|h| pb::PhaseChange {
                    phase: phase_to_pb(h.phase) as i32,
                    at_ms: h.at_ms,
                    note: h.note.clone(),
                })
                .collect(),
            forced: r.forced,
            last_error: r.last_error.clone(),
            last_error_at_ms: r.last_error_at_ms,
        }
    }

    /// Verify and install an uploaded bundle (see the RPC's doc).
    pub async fn install_upload(
        &self,
        path: &Path,
        force: bool,
    ) -> Result<pb::UpdateStatus, Refusal> {
        let upload_dir = std::fs::canonicalize(&self.inner.platform.upload_dir)
            .map_err(|e| Refusal::new("bad_path", format!("no upload directory: {e}")))?;
        let bundle = std::fs::canonicalize(path)
            .map_err(|e| Refusal::new("bad_path", format!("{}: {e}", path.display())))?;
        if !bundle.starts_with(&upload_dir) || !bundle.is_file() {
            return Err(Refusal::new(
                "bad_path",
                "bundles are only taken from the gateway's upload directory",
            ));
        }
        self.run_install(&bundle, true, force, OpKind::Update).await
    }

    /// Stage `source` (moved when `consume`, else copied) and take it through the state machine
    /// up to `pending_reboot`; the reboot follows shortly after this returns.
    async fn run_install(
        &self,
        source: &Path,
        consume: bool,
        force: bool,
        kind: OpKind,
    ) -> Result<pb::UpdateStatus, Refusal> {
        let Ok(_op) = self.inner.op.try_lock() else {
            if consume {
                let _ = std::fs::remove_file(source);
            }
            return Err(Refusal::new(
                "busy",
                "another update or restore is under way",
            ));
        };
        let before = self.record();
        let result = self.install_locked(source, consume, force, kind).await;
        if consume {
            let _ = std::fs::remove_file(source);
        }
        match result {
            Ok(()) => {
                let me = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(REBOOT_DELAY).await;
                    me.reboot_into_new_slot();
                });
                Ok(self.status().await)
            }
            Err(refusal) => {
                let refusal_code = refusal.code.clone();
                let message = refusal.message.clone();
                self.change(|r| {
                    if r.operation_id == before.operation_id {
                        // Refused before it began (busy): the record is another operation's.
                        r.last_error = message.clone();
                        r.last_error_at_ms = now_ms();
                    } else if r.phase == Phase::Verifying {
                        *r = Record::refused(&before, now_ms(), &refusal_code, &message);
                    } else if r.phase.in_progress() {
                        r.fail(now_ms(), &refusal_code, &message);
                    }
                });
                Err(refusal)
            }
        }
    }

    async fn install_locked(
        &self,
        source: &Path,
        consume: bool,
        force: bool,
        kind: OpKind,
    ) -> Result<(), Refusal> {
        if self.record().phase.in_progress() {
            return Err(Refusal::new(
                "busy",
                "another update or restore is under way",
            ));
        }
        let proxy = self.proxy().await?;
        let facts = self.facts(&proxy).await?;
        if facts.operation != "idle" {
            return Err(Refusal::new("busy", "the slot manager is busy installing"));
        }
        let staging = self.inner.platform.state_dir.join("staging");
        std::fs::create_dir_all(&staging)
            .map_err(|e| Refusal::new("io", format!("{}: {e}", staging.display())))?;
        let mut record = self.record().begin(kind, now_ms());
        record.from_slot = facts.booted.clone();
        record.from_version = facts.running_version.clone();
        record.forced = force;
        let staged = staging.join(format!("bundle-{}.raucb", record.operation_id));
        self.commit(record);
        let staged_result = if consume {
            std::fs::rename(source, &staged).or_else(|_| std::fs::copy(source, &staged).map(drop))
        } else {
            std::fs::copy(source, &staged).map(drop)
        };
        staged_result.map_err(|e| Refusal::new("io", format!("cannot stage the bundle: {e}")))?;
        let outcome = self
            .verify_and_install(&proxy, &facts, &staged, force, kind)
            .await;
        let _ = std::fs::remove_file(&staged);
        outcome
    }

    async fn verify_and_install(
        &self,
        proxy: &InstallerProxy<'static>,
        facts: &Facts,
        staged: &Path,
        force: bool,
        kind: OpKind,
    ) -> Result<(), Refusal> {
        let manifest = bundle::inspect(staged, &self.inner.platform.keyring).await?;
        if manifest.compatible != facts.compatible {
            return Err(BundleError::WrongModel {
                bundle: manifest.compatible,
                unit: facts.compatible.clone(),
            }
            .into());
        }
        let older = state::compare_versions(&manifest.version, &facts.running_version)
            == std::cmp::Ordering::Less;
        if older && !force && kind == OpKind::Update {
            return Err(BundleError::Downgrade {
                bundle: manifest.version,
                running: facts.running_version.clone(),
            }
            .into());
        }
        let target = facts
            .slots
            .iter()
            .find(|s| s.bootname != facts.booted)
            .map(|s| s.bootname.clone())
            .unwrap_or_default();
        self.change(|r| {
            r.to_version = manifest.version.clone();
            r.to_slot = target.clone();
            r.progress_percent = 0;
            r.progress_message = "Installing".into();
            r.enter(Phase::Installing, now_ms(), "");
        });
        let mut completed = proxy
            .receive_completed()
            .await
            .map_err(|e| Refusal::new("slot_manager_unavailable", e.to_string()))?;
        let source = staged.to_string_lossy().to_string();
        proxy
            .install_bundle(&source, std::collections::HashMap::new())
            .await
            .map_err(|e| Refusal::new("install_failed", format!("InstallBundle: {e}")))?;
        let result = self.follow_install(proxy, &mut completed).await?;
        if result != 0 {
            let last = proxy.last_error().await.unwrap_or_default();
            return Err(Refusal::new(
                classify_last_error(&last),
                format!("the slot manager refused the bundle: {last}"),
            ));
        }
        let primary_name = proxy.get_primary().await.unwrap_or_default();
        let after = self.facts(proxy).await?;
        let to_slot = after
            .slots
            .iter()
            .find(|s| s.name == primary_name)
            .map(|s| s.bootname.clone())
            .unwrap_or(target);
        self.change(|r| {
            r.to_slot = to_slot;
            r.progress_percent = 100;
            r.enter(Phase::PendingReboot, now_ms(), "");
        });
        Ok(())
    }

    /// Wait for `Completed`, mirroring `Progress` into the record.
    async fn follow_install(
        &self,
        proxy: &InstallerProxy<'static>,
        completed: &mut rauc::CompletedStream,
    ) -> Result<i32, Refusal> {
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                signal = completed.next() => {
                    let Some(signal) = signal else {
                        return Err(Refusal::new("slot_manager_unavailable", "the slot manager went away during the install"));
                    };
                    return signal
                        .args()
                        .map(|a| a.result)
                        .map_err(|e| Refusal::new("install_failed", e.to_string()));
                }
                _ = tick.tick() => {
                    if let Ok((pct, msg, _)) = proxy.progress().await {
                        let r = self.record();
                        if r.progress_percent != pct.clamp(0, 100) as u32 || r.progress_message != msg {
                            self.change(|r| {
                                r.progress_percent = pct.clamp(0, 100) as u32;
                                r.progress_message = msg;
                            });
                        }
                    }
                    if started.elapsed() > INSTALL_DEADLINE {
                        return Err(Refusal::new("install_failed", "the install did not finish in time"));
                    }
                    if proxy.operation().await.is_ok_and(|o| o == "idle") && started.elapsed() > Duration::from_secs(2) {
                        // Completed may have been missed while the stream was being set up.
                        let last = proxy.last_error().await.unwrap_or_default();
                        let primary = proxy.get_primary().await.unwrap_or_default();
                        let to = self.record().to_slot;
                        if !to.is_empty() && super::simslots::bootname_of(&primary) == Some(to.as_str()) && last.is_empty() {
                            return Ok(0);
                        }
                        if !last.is_empty() {
                            return Ok(1);
                        }
                    }
                }
            }
        }
    }

    fn reboot_into_new_slot(&self) {
        self.change(|r| {
            r.enter(
                Phase::BootingNewSlot,
                now_ms(),
                "rebooting into the new slot",
            )
        });
        tracing::warn!("rebooting into the new slot");
        self.inner.reboot.request();
    }

    /// At supervisor start: finish whatever a previous life left in flight.
    pub async fn resume(&self) {
        let record = self.record();
        if !record.phase.in_progress() {
            return;
        }
        let mut waited = Duration::ZERO;
        let (proxy, facts) = loop {
            match self.proxy().await {
                Ok(p) => match self.facts(&p).await {
                    Ok(f) => break (p, f),
                    Err(e) if waited > Duration::from_secs(60) => {
                        tracing::error!(error = %e.message, "slot manager unreachable; update state left as is");
                        return;
                    }
                    Err(_) => {}
                },
                Err(e) if waited > Duration::from_secs(60) => {
                    tracing::error!(error = %e.message, "slot manager unreachable; update state left as is");
                    return;
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            waited += Duration::from_millis(500);
        };
        let boot = BootFacts {
            booted: facts.booted.clone(),
            primary: facts.primary.clone(),
            installer_busy: facts.operation != "idle",
            target_boot_failure: facts
                .slot(&record.to_slot)
                .map(|s| s.boot_failure.clone())
                .unwrap_or_default(),
        };
        let decision = state::resume(&record, &boot);
        tracing::info!(
            phase = record.phase.as_str(),
            ?decision,
            "resuming update state"
        );
        match decision {
            Resume::Nothing => {}
            Resume::Interrupted(why) => {
                self.change(|r| r.fail(now_ms(), "interrupted", &why));
            }
            Resume::FollowInstall => {
                let _op = self.inner.op.lock().await;
                let mut completed = match proxy.receive_completed().await {
                    Ok(c) => c,
                    Err(e) => {
                        self.change(|r| r.fail(now_ms(), "interrupted", &e.to_string()));
                        return;
                    }
                };
                match self.follow_install(&proxy, &mut completed).await {
                    Ok(0) => {
                        self.change(|r| r.enter(Phase::PendingReboot, now_ms(), ""));
                        drop(_op);
                        self.reboot_into_new_slot();
                    }
                    Ok(_) => {
                        let last = proxy.last_error().await.unwrap_or_default();
                        self.change(|r| r.fail(now_ms(), classify_last_error(&last), &last));
                    }
                    Err(e) => {
                        self.change(|r| r.fail(now_ms(), &e.code, &e.message));
                    }
                }
            }
            Resume::Reboot => self.reboot_into_new_slot(),
            Resume::WatchHealth => self.watch_health(proxy).await,
            Resume::RolledBack(why) => {
                self.change(|r| {
                    r.reason = why.clone();
                    r.enter(Phase::RolledBack, now_ms(), &why);
                });
            }
        }
    }

    /// On the new slot: mark it good once every service runs, bad (and reboot) if the stack
    /// does not come up in time or crash-loops.
    async fn watch_health(&self, proxy: InstallerProxy<'static>) {
        if self.record().phase != Phase::BootingNewSlot {
            self.change(|r| r.enter(Phase::BootingNewSlot, now_ms(), ""));
        }
        let started = Instant::now();
        let mut first_restarts: Option<Vec<u32>> = None;
        let verdict: Result<(), String> = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Ok(list) = self.inner.manager.list().await else {
                return;
            };
            let base =
                first_restarts.get_or_insert_with(|| list.iter().map(|s| s.restarts).collect());
            if let Some(s) = list.iter().find(|s| s.state == State::Failed) {
                break Err(format!(
                    "{} failed on the new slot ({})",
                    s.name,
                    s.last_exit
                        .clone()
                        .unwrap_or_else(|| "no exit recorded".into())
                ));
            }
            if let Some((s, _)) = list
                .iter()
                .zip(base.iter())
                .find(|(s, b)| s.restarts.saturating_sub(**b) >= CRASH_LOOP_RESTARTS)
            {
                break Err(format!(
                    "{} crash-loops on the new slot ({} restarts)",
                    s.name, s.restarts
                ));
            }
            let ready = *self.inner.manager.ready().borrow();
            if ready && list.iter().all(|s| s.state == State::Running) {
                break Ok(());
            }
            if started.elapsed() > HEALTH_DEADLINE {
                let waiting: Vec<String> = list
                    .iter()
                    .filter(|s| s.state != State::Running)
                    .map(|s| format!("{} {}", s.name, s.state.as_str()))
                    .collect();
                break Err(format!(
                    "not healthy within {} s ({})",
                    HEALTH_DEADLINE.as_secs(),
                    waiting.join(", ")
                ));
            }
        };
        match verdict {
            Ok(()) => match proxy.mark("good", "booted").await {
                Ok((slot, _)) => {
                    tracing::info!(%slot, "new slot healthy; marked good");
                    self.change(|r| {
                        r.reason.clear();
                        r.progress_percent = 100;
                        r.enter(Phase::Committed, now_ms(), &format!("{slot} marked good"));
                    });
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot mark the slot good; the bootloader will fall back")
                }
            },
            Err(why) => {
                tracing::error!(reason = %why, "new slot unhealthy; marking it bad and rebooting");
                self.change(|r| r.reason = why.clone());
                if let Err(e) = proxy.mark("bad", "booted").await {
                    tracing::error!(error = %e, "cannot mark the slot bad");
                }
                let _ = proxy.mark("active", "other").await;
                self.inner.reboot.request();
            }
        }
    }

    /// The restore-to-stock checks.
    pub async fn preflight(&self) -> pb::RestorePreflightResponse {
        let mut checks = Vec::new();
        let mut check = |id: &str, passed: bool, detail: String| {
            checks.push(pb::PreflightCheck {
                id: id.into(),
                passed,
                detail,
            });
        };
        let facts = match self.proxy().await {
            Ok(p) => self.facts(&p).await,
            Err(e) => Err(e),
        };
        match &facts {
            Ok(f) if f.operation == "idle" && !self.record().phase.in_progress() => check(
                "slot_manager",
                true,
                format!("booted slot {}, idle", f.booted),
            ),
            Ok(_) => check(
                "slot_manager",
                false,
                "an update or restore is under way".into(),
            ),
            Err(e) => check("slot_manager", false, e.message.clone()),
        }
        let stock = &self.inner.platform.stock_bundle;
        let size = std::fs::metadata(stock).map(|m| m.len()).ok();
        check(
            "stock_image_present",
            size.is_some(),
            match size {
                Some(n) => format!("stock image present ({n} bytes)"),
                None => "no stock image on the data partition".into(),
            },
        );
        let mut stock_version = String::new();
        let mut image_bytes = size.unwrap_or(0);
        let manifest = if size.is_some() {
            bundle::inspect(stock, &self.inner.platform.keyring)
                .await
                .ok()
        } else {
            None
        };
        match (&manifest, size) {
            (Some(m), _) => {
                stock_version = m.version.clone();
                image_bytes = image_bytes.max(m.images.iter().map(|i| i.size).sum());
                check(
                    "stock_image_verified",
                    true,
                    format!("signature verified; version {}", m.version),
                );
            }
            (None, Some(_)) => check(
                "stock_image_verified",
                false,
                "the stock image's signature does not verify against the keyring".into(),
            ),
            (None, None) => check("stock_image_verified", false, "nothing to verify".into()),
        }
        match (&manifest, &facts) {
            (Some(m), Ok(f)) => check(
                "model_compatible",
                m.compatible == f.compatible,
                format!(
                    "stock image is for {:?}, this unit is {:?}",
                    m.compatible, f.compatible
                ),
            ),
            _ => check(
                "model_compatible",
                false,
                "unknown (needs the stock image and the slot manager)".into(),
            ),
        }
        let need = image_bytes.saturating_mul(2).saturating_add(SPACE_MARGIN);
        let dir = &self.inner.platform.state_dir;
        let _ = std::fs::create_dir_all(dir);
        match nix::sys::statvfs::statvfs(dir) {
            Ok(v) => {
                // statvfs field widths differ between targets (32-bit ARM on the image).
                #[allow(clippy::unnecessary_cast)]
                let free = (v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64);
                check(
                    "free_space",
                    free >= need,
                    format!(
                        "{} MiB free, {} MiB needed",
                        free >> 20,
                        need.div_ceil(1 << 20)
                    ),
                );
            }
            Err(e) => check("free_space", false, format!("statvfs: {e}")),
        }
        let (ok, detail) = self.power_stable().await;
        check("power_stable", ok, detail);
        pb::RestorePreflightResponse {
            ready: checks.iter().all(|c| c.passed),
            checks,
            will_be_lost: WILL_BE_LOST.iter().map(|s| s.to_string()).collect(),
            stock_version,
        }
    }

    /// Power is stable: hw-agent reports a healthy, enabled PSU whose voltage holds its setpoint
    /// over a few samples.
    async fn power_stable(&self) -> (bool, String) {
        use svcos_proto::hwagent::v1::GetTelemetryRequest;
        use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
        let mut hw =
            HwAgentServiceClient::new(ipc::channel(&self.inner.layout, ServiceName::HwAgent));
        let mut volts = Vec::new();
        for i in 0..3 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let t = match hw
                .get_telemetry(GetTelemetryRequest {
                    include_chips: false,
                })
                .await
            {
                Ok(r) => r.into_inner().telemetry,
                Err(e) => {
                    return (
                        false,
                        format!("no telemetry from hw-agent: {}", e.message()),
                    );
                }
            };
            let Some(psu) = t.and_then(|t| t.psu) else {
                return (false, "hw-agent reports no PSU".into());
            };
            if !psu.fault.is_empty() {
                return (false, format!("PSU fault: {}", psu.fault));
            }
            if !psu.enabled {
                return (false, "PSU is off".into());
            }
            if psu.voltage_setpoint_v > 0.0
                && ((psu.voltage_v - psu.voltage_setpoint_v) / psu.voltage_setpoint_v).abs() > 0.05
            {
                return (
                    false,
                    format!(
                        "PSU at {:.2} V, setpoint {:.2} V",
                        psu.voltage_v, psu.voltage_setpoint_v
                    ),
                );
            }
            volts.push(psu.voltage_v);
        }
        let (lo, hi) = volts
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        if hi - lo > 0.02 * hi.max(1.0) {
            return (false, format!("PSU voltage swings {lo:.2}-{hi:.2} V"));
        }
        (
            true,
            format!("PSU steady at {hi:.2} V over {} samples", volts.len()),
        )
    }

    /// Run the checks, then install the stock image like an update.
    pub async fn restore(&self) -> Result<pb::UpdateStatus, Refusal> {
        let pre = self.preflight().await;
        if !pre.ready {
            let failed: Vec<String> = pre
                .checks
                .iter()
                .filter(|c| !c.passed)
                .map(|c| format!("{}: {}", c.id, c.detail))
                .collect();
            return Err(Refusal::new(
                "preflight_failed",
                format!("restore to stock refused: {}", failed.join("; ")),
            ));
        }
        let stock = self.inner.platform.stock_bundle.clone();
        self.run_install(&stock, false, true, OpKind::Restore).await
    }

    /// Reboot now that every service is down (called by the entry after the manager stopped).
    pub fn is_reboot_requested(&self) -> bool {
        self.inner.reboot.requested()
    }
}

/// What a restore to stock loses.
pub const WILL_BE_LOST: &[&str] = &[
    "svcOS configuration (pools, tuning targets, network and integration settings)",
    "the owner password and every session token",
    "share, hashrate and energy history",
    "autotuner profiles and calibration results",
    "the svcOS slot that runs now (the stock image is written to the other slot)",
];

/// The gRPC face of the updater.
#[derive(Debug, Clone)]
pub struct UpdateGrpc {
    updater: Updater,
}

impl UpdateGrpc {
    /// Serve `updater`.
    pub fn new(updater: Updater) -> UpdateServiceServer<Self> {
        UpdateServiceServer::new(UpdateGrpc { updater })
    }
}

#[tonic::async_trait]
impl UpdateService for UpdateGrpc {
    async fn get_update_status(
        &self,
        _request: Request<pb::GetUpdateStatusRequest>,
    ) -> Result<Response<pb::UpdateStatus>, Status> {
        Ok(Response::new(self.updater.status().await))
    }

    async fn install_bundle(
        &self,
        request: Request<pb::InstallBundleRequest>,
    ) -> Result<Response<pb::UpdateStatus>, Status> {
        let req = request.into_inner();
        self.updater
            .install_upload(Path::new(&req.bundle_path), req.force)
            .await
            .map(Response::new)
            .map_err(|r| r.to_status())
    }

    async fn restore_preflight(
        &self,
        _request: Request<pb::RestorePreflightRequest>,
    ) -> Result<Response<pb::RestorePreflightResponse>, Status> {
        Ok(Response::new(self.updater.preflight().await))
    }

    async fn restore_to_stock(
        &self,
        _request: Request<pb::RestoreToStockRequest>,
    ) -> Result<Response<pb::UpdateStatus>, Status> {
        self.updater
            .restore()
            .await
            .map(Response::new)
            .map_err(|r| r.to_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_typed_statuses() {
        for (code, grpc) in [
            ("wrong_key", tonic::Code::InvalidArgument),
            ("bad_digest", tonic::Code::InvalidArgument),
            ("truncated", tonic::Code::InvalidArgument),
            ("not_a_bundle", tonic::Code::InvalidArgument),
            ("unsafe_image", tonic::Code::InvalidArgument),
            ("wrong_model", tonic::Code::FailedPrecondition),
            ("downgrade", tonic::Code::FailedPrecondition),
            ("busy", tonic::Code::FailedPrecondition),
            ("io", tonic::Code::Internal),
        ] {
            let s = Refusal::new(code, "m").to_status();
            assert_eq!(s.code(), grpc, "{code}");
            assert_eq!(
                s.metadata().get(REFUSAL_KEY).unwrap().to_str().unwrap(),
                code
            );
        }
    }

    #[test]
    fn last_errors_are_classified() {
        assert_eq!(
            classify_last_error("Installation error: digest mismatch: image svcos hashes to ..."),
            "bad_digest"
        );
        assert_eq!(
            classify_last_error("Compatible mismatch: Expected 'a' but bundle manifest has 'b'"),
            "wrong_model"
        );
        assert_eq!(
            classify_last_error(
                "Installation error: unsafe image in the bundle: image \"svcos\" is a symbolic \
                 link (to \"/tmp/bad-digest-certificate\"); images must be regular files"
            ),
            "unsafe_image"
        );
        assert_eq!(
            classify_last_error(
                "Installation error: bad manifest: image file name \"../x\" is not a plain file \
                 name inside the bundle"
            ),
            "bad_manifest"
        );
        assert_eq!(classify_last_error("disk on fire"), "install_failed");
    }
}
