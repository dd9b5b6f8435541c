//! The sim's slot manager: two slot directories, a boot environment file standing in for
//! U-Boot's `BOOT_ORDER`/`BOOT_x_LEFT`, and an installer that serves RAUC's D-Bus interface
//! (`de.pengutronix.rauc.Installer`) on the sim's bus, the way hw-sim stands in for the hardware.
//!
//! Layout under `<dir>/slots`: `A/` and `B/` (slots `rootfs.0` and `rootfs.1`), each holding an
//! `svcos` executable and `slot.json` (version, compatible, sha256, install time), and
//! `bootenv.json`. Every write is atomic; the install order is RAUC's: verify and extract into
//! a staging directory, check each image's sha256, mark the target slot unbootable, write it,
//! then make it primary with a bounded number of boot attempts. A kill at any point leaves the
//! booted slot primary or the new slot fully written and primary; never a half-written primary.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use zbus::object_server::{InterfaceRef, SignalEmitter};

use super::bundle::{self, BundleError};
use super::rauc::{SlotRow, string_value};

/// Boot attempts a newly installed slot gets before the bootloader falls back (as on the image).
pub const BOOT_ATTEMPTS: u32 = 3;
/// Slot bootnames, in slot-number order.
pub const BOOTNAMES: [&str; 2] = ["A", "B"];
/// Name of the executable inside a slot.
pub const SLOT_BINARY: &str = "svcos";

/// RAUC slot name of a bootname (`A` → `rootfs.0`).
pub fn slot_name(bootname: &str) -> String {
    let n = BOOTNAMES.iter().position(|b| *b == bootname).unwrap_or(0);
    format!("rootfs.{n}")
}

/// Bootname of a RAUC slot name or bootname.
pub fn bootname_of(id: &str) -> Option<&'static str> {
    BOOTNAMES
        .iter()
        .enumerate()
        .find(|(n, b)| **b == id || format!("rootfs.{n}") == id)
        .map(|(_, b)| *b)
}

/// The other slot.
pub fn other(bootname: &str) -> &'static str {
    if bootname == "A" { "B" } else { "A" }
}

/// Bootloader view of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BootState {
    /// Committed: always bootable.
    Good,
    /// Newly installed: bootable while attempts are left.
    Trial,
    /// Not bootable (empty, being written, or given up on).
    Bad,
}

/// One slot in the boot environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotBoot {
    /// Bootable or not.
    pub state: BootState,
    /// Attempts left while in trial.
    pub attempts_left: u32,
    /// Why the bootloader gave up on it ("" when it did not).
    #[serde(default)]
    pub failure: String,
}

/// The boot environment (U-Boot's env in the image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootEnv {
    /// Bootnames, first tried first.
    pub order: Vec<String>,
    /// Per bootname.
    pub slots: BTreeMap<String, SlotBoot>,
}

impl Default for BootEnv {
    fn default() -> Self {
        let mut slots = BTreeMap::new();
        slots.insert(
            "A".into(),
            SlotBoot {
                state: BootState::Good,
                attempts_left: BOOT_ATTEMPTS,
                failure: String::new(),
            },
        );
        slots.insert(
            "B".into(),
            SlotBoot {
                state: BootState::Bad,
                attempts_left: 0,
                failure: String::new(),
            },
        );
        BootEnv {
            order: vec!["A".into(), "B".into()],
            slots,
        }
    }
}

impl BootEnv {
    /// The bootloader's choice: the first slot in order that is good or in trial with attempts
    /// left (a trial attempt is consumed). Falls back to `A`. Returns (bootname, is_trial).
    pub fn choose(&mut self) -> (String, bool) {
        for name in self.order.clone() {
            let Some(slot) = self.slots.get_mut(&name) else {
                continue;
            };
            match slot.state {
                BootState::Good => return (name, false),
                BootState::Trial if slot.attempts_left > 0 => {
                    slot.attempts_left -= 1;
                    return (name, true);
                }
                BootState::Trial => {
                    slot.state = BootState::Bad;
                    if slot.failure.is_empty() {
                        slot.failure = format!("no boot attempts left on slot {name}");
                    }
                }
                BootState::Bad => {}
            }
        }
        ("A".into(), false)
    }

    /// The slot tried first.
    pub fn primary(&self) -> String {
        self.order
            .iter()
            .find(|n| {
                self.slots.get(*n).is_some_and(|s| {
                    s.state == BootState::Good
                        || (s.state == BootState::Trial && s.attempts_left > 0)
                })
            })
            .cloned()
            .unwrap_or_else(|| "A".into())
    }

    /// Mutable slot entry (created bad when missing).
    pub fn slot(&mut self, name: &str) -> &mut SlotBoot {
        self.slots.entry(name.to_string()).or_insert(SlotBoot {
            state: BootState::Bad,
            attempts_left: 0,
            failure: String::new(),
        })
    }

    /// Make `name` primary in trial.
    pub fn activate(&mut self, name: &str) {
        self.order.retain(|n| n != name);
        self.order.insert(0, name.to_string());
        let slot = self.slot(name);
        if slot.state != BootState::Good {
            *slot = SlotBoot {
                state: BootState::Trial,
                attempts_left: BOOT_ATTEMPTS,
                failure: String::new(),
            };
        }
    }
}

/// What an install wrote into a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SlotMeta {
    /// Bundle version.
    pub version: String,
    /// Bundle compatible.
    pub compatible: String,
    /// sha256 of the image.
    pub sha256: String,
    /// Install time, Unix ms.
    pub installed_at_ms: i64,
}

/// The slot directories and boot environment of one sim.
#[derive(Debug, Clone)]
pub struct SimSlots {
    root: PathBuf,
}

impl SimSlots {
    /// The slots under `<sim dir>/slots`.
    pub fn new(sim_dir: &Path) -> Self {
        SimSlots {
            root: sim_dir.join("slots"),
        }
    }

    /// The slot directory of a bootname.
    pub fn dir(&self, bootname: &str) -> PathBuf {
        self.root.join(bootname)
    }

    /// The executable of a slot.
    pub fn binary(&self, bootname: &str) -> PathBuf {
        self.dir(bootname).join(SLOT_BINARY)
    }

    fn env_path(&self) -> PathBuf {
        self.root.join("bootenv.json")
    }

    /// Whether an update ever set the slots up.
    pub fn initialised(&self) -> bool {
        self.env_path().exists()
    }

    /// The boot environment (the default one before the first install).
    pub fn load_env(&self) -> std::io::Result<BootEnv> {
        match std::fs::read(self.env_path()) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BootEnv::default()),
            Err(e) => Err(e),
        }
    }

    /// Write the boot environment atomically.
    pub fn save_env(&self, env: &BootEnv) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(env).map_err(std::io::Error::other)?;
        svcos_common::fsutil::atomic_write(&self.env_path(), &bytes, 0o644)
    }

    /// Read-modify-write the boot environment.
    pub fn update_env(&self, f: impl FnOnce(&mut BootEnv)) -> std::io::Result<BootEnv> {
        let mut env = self.load_env()?;
        f(&mut env);
        self.save_env(&env)?;
        Ok(env)
    }

    /// What an install recorded about a slot.
    pub fn meta(&self, bootname: &str) -> SlotMeta {
        std::fs::read(self.dir(bootname).join("slot.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn save_meta(&self, bootname: &str, meta: &SlotMeta) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
        svcos_common::fsutil::atomic_write(&self.dir(bootname).join("slot.json"), &bytes, 0o644)
    }

    /// Before the first install: put the running executable into slot `booted` (a hard link
    /// when possible, else a copy) and write the boot environment, so a rollback has a binary.
    pub fn seed(&self, booted: &str, compatible: &str) -> std::io::Result<()> {
        if self.initialised() && self.binary(booted).exists() {
            return Ok(());
        }
        let dir = self.dir(booted);
        std::fs::create_dir_all(&dir)?;
        let target = self.binary(booted);
        if !target.exists() {
            let exe = std::fs::canonicalize("/proc/self/exe")?;
            let tmp = dir.join(".svcos.seed");
            let _ = std::fs::remove_file(&tmp);
            // The path may already hold a newer build than the one running; link only when it
            // is the very file we run.
            let same = {
                use std::os::unix::fs::MetadataExt;
                let a = std::fs::metadata("/proc/self/exe")?;
                let b = std::fs::metadata(&exe)?;
                a.ino() == b.ino() && a.dev() == b.dev()
            };
            if !(same && std::fs::hard_link(&exe, &tmp).is_ok()) {
                std::fs::copy("/proc/self/exe", &tmp)?;
            }
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &target)?;
        }
        let (sha, _) = bundle::sha256_file(&target)?;
        self.save_meta(
            booted,
            &SlotMeta {
                version: env!("CARGO_PKG_VERSION").into(),
                compatible: compatible.into(),
                sha256: sha,
                installed_at_ms: 0,
            },
        )?;
        if !self.initialised() {
            let mut env = BootEnv {
                order: vec![booted.into(), other(booted).into()],
                ..BootEnv::default()
            };
            *env.slot(booted) = SlotBoot {
                state: BootState::Good,
                attempts_left: BOOT_ATTEMPTS,
                failure: String::new(),
            };
            self.save_env(&env)?;
        }
        Ok(())
    }

    /// `GetSlotStatus` rows.
    pub fn status_rows(&self, booted: &str) -> Vec<SlotRow> {
        let env = self.load_env().unwrap_or_default();
        BOOTNAMES
            .iter()
            .map(|b| {
                let meta = self.meta(b);
                let boot = env.slots.get(*b).cloned().unwrap_or(SlotBoot {
                    state: BootState::Bad,
                    attempts_left: 0,
                    failure: String::new(),
                });
                let version = if meta.version.is_empty() && *b == booted {
                    env!("CARGO_PKG_VERSION").to_string()
                } else {
                    meta.version.clone()
                };
                let mut row: HashMap<String, zbus::zvariant::OwnedValue> = HashMap::new();
                let mut put = |k: &str, v: &str| {
                    row.insert(k.to_string(), string_value(v));
                };
                put("class", "rootfs");
                put("type", "dir");
                put("device", &self.dir(b).display().to_string());
                put("bootname", b);
                put(
                    "state",
                    if *b == booted {
                        "booted"
                    } else if env.primary() == *b {
                        "active"
                    } else {
                        "inactive"
                    },
                );
                put(
                    "boot-status",
                    match boot.state {
                        BootState::Bad => "bad",
                        _ => "good",
                    },
                );
                put(
                    "svcos.boot-state",
                    match boot.state {
                        BootState::Good => "good",
                        BootState::Trial => "trial",
                        BootState::Bad => "bad",
                    },
                );
                put("svcos.boot-failure", &boot.failure);
                put("bundle.version", &version);
                put("bundle.compatible", &meta.compatible);
                put("sha256", &meta.sha256);
                if meta.installed_at_ms > 0 {
                    put("installed.timestamp", &rfc3339(meta.installed_at_ms));
                }
                (slot_name(b), row)
            })
            .collect()
    }
}

/// Unix ms as an RFC 3339 UTC timestamp in whole seconds (RAUC's `installed.timestamp` form).
/// Outside jiff's range (years -9999 to 9999) it is the Unix epoch.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_second(ms.div_euclid(1000))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Why an install failed, as RAUC would put it in `LastError`.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The bundle was refused.
    #[error("{0}")]
    Bundle(#[from] BundleError),
    /// Writing the slot failed.
    #[error("writing slot {slot}: {source}")]
    Io {
        /// The slot.
        slot: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Install `bundle` into the slot that is not `booted`, reporting progress as (percent, what).
pub async fn install(
    slots: &SimSlots,
    booted: &str,
    compatible: &str,
    keyring: &Path,
    bundle_path: &Path,
    progress: &(dyn Fn(i32, &str) + Send + Sync),
) -> Result<String, InstallError> {
    let target = other(booted);
    let io = |source| InstallError::Io {
        slot: slot_name(target),
        source,
    };
    progress(5, "Checking bundle");
    let manifest = bundle::inspect(bundle_path, keyring).await?;
    if manifest.compatible != compatible {
        return Err(BundleError::WrongModel {
            bundle: manifest.compatible,
            unit: compatible.into(),
        }
        .into());
    }
    progress(20, "Extracting bundle");
    let staging = slots.root.join(".staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io)?;
    }
    std::fs::create_dir_all(&slots.root).map_err(io)?;
    // A refused bundle leaves nothing behind, not even the links it carried.
    let _cleanup = RemoveOnDrop(staging.clone());
    bundle::extract(bundle_path, keyring, &staging).await?;
    progress(40, "Checking image digests");
    // Every image is checked (a plain file of its own, the signed digest) and held open before
    // the target slot is touched: a refused bundle leaves both slots as they were.
    let images = {
        let m = manifest.clone();
        let s = staging.clone();
        tokio::task::spawn_blocking(move || bundle::check_images(&m, &s))
            .await
            .map_err(|e| io(std::io::Error::other(e)))??
    };
    let Some(checked) = images.into_iter().find(|c| c.image.slot_class == "rootfs") else {
        return Err(BundleError::BadManifest("no image for slot class rootfs".into()).into());
    };
    let image = checked.image.clone();
    slots.seed(booted, compatible).map_err(io)?;
    // From here the target is unbootable until fully written.
    slots
        .update_env(|env| {
            let s = env.slot(target);
            s.state = BootState::Bad;
            s.failure.clear();
        })
        .map_err(io)?;
    progress(50, &format!("Copying image to {}", slot_name(target)));
    let dir = slots.dir(target);
    std::fs::create_dir_all(&dir).map_err(io)?;
    let _ = std::fs::remove_file(dir.join("slot.json"));
    let tmp = dir.join(".svcos.new");
    {
        let dst = tmp.clone();
        let total = image.size.max(1);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let copy = tokio::task::spawn_blocking(move || copy_synced(checked, &dst, &tx));
        let mut last = 50;
        while let Some(done) = rx.recv().await {
            let pct = 50 + (done.saturating_mul(45) / total).min(45) as i32;
            if pct != last {
                last = pct;
                progress(pct, &format!("Copying image to {}", slot_name(target)));
            }
        }
        copy.await
            .map_err(|e| io(std::io::Error::other(e)))?
            .map_err(io)?;
    }
    std::fs::rename(&tmp, slots.binary(target)).map_err(io)?;
    slots
        .save_meta(
            target,
            &SlotMeta {
                version: manifest.version.clone(),
                compatible: manifest.compatible.clone(),
                sha256: image.sha256.clone(),
                installed_at_ms: svcos_common::time::unix_ms(),
            },
        )
        .map_err(io)?;
    slots.update_env(|env| env.activate(target)).map_err(io)?;
    progress(100, "Installing done.");
    Ok(slot_name(target))
}

/// Removes a directory tree when dropped (`remove_dir_all` removes links, never what they name).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copy a checked image to `dst`, a new file with the image's (masked) mode, and sync it.
fn copy_synced(
    image: bundle::CheckedImage,
    dst: &Path,
    done: &tokio::sync::mpsc::UnboundedSender<u64>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    use sha2::Digest;
    let mut from = image.file;
    // A leftover of an interrupted install, or whatever else sits at the name, is unlinked, and
    // O_EXCL creates a fresh file: a link there is never written through.
    match std::fs::remove_file(dst) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(image.mode)
        .open(dst)?;
    // The umask must not decide what the slot holds: the mode is the image's.
    to.set_permissions(std::fs::Permissions::from_mode(image.mode))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
        let _ = done.send(total);
    }
    // The check hashed the same open file; a change since then is a write to the staging
    // directory by someone else, and what was verified is not what would be installed.
    let sha = hex::encode(hasher.finalize());
    if sha != image.image.sha256 {
        return Err(std::io::Error::other(format!(
            "image {} changed after its digest was checked (now {sha})",
            image.image.filename
        )));
    }
    to.sync_all()
}

/// Mutable state of the installer object.
#[derive(Debug)]
struct Installing {
    operation: String,
    last_error: String,
    progress: (i32, String, i32),
}

/// The `de.pengutronix.rauc.Installer` object of the sim.
#[derive(Debug)]
pub struct SimInstaller {
    slots: SimSlots,
    booted: String,
    compatible: String,
    keyring: PathBuf,
    state: Arc<std::sync::Mutex<Installing>>,
}

impl SimInstaller {
    /// An installer for `slots`, booted from `booted`, accepting bundles for `compatible` signed
    /// by a key in `keyring`.
    pub fn new(slots: SimSlots, booted: &str, compatible: &str, keyring: PathBuf) -> Self {
        SimInstaller {
            slots,
            booted: booted.into(),
            compatible: compatible.into(),
            keyring,
            state: Arc::new(std::sync::Mutex::new(Installing {
                operation: "idle".into(),
                last_error: String::new(),
                progress: (0, String::new(), 0),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Installing> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn resolve(&self, id: &str) -> zbus::fdo::Result<&'static str> {
        match id {
            "booted" => Ok(bootname_of(&self.booted).unwrap_or("A")),
            "other" => Ok(other(&self.booted)),
            _ => bootname_of(id)
                .ok_or_else(|| zbus::fdo::Error::InvalidArgs(format!("unknown slot {id:?}"))),
        }
    }
}

async fn announce(iface: &InterfaceRef<SimInstaller>) {
    let emitter = iface.signal_emitter();
    let me = iface.get().await;
    let _ = me.operation_changed(emitter).await;
    let _ = me.progress_changed(emitter).await;
    let _ = me.last_error_changed(emitter).await;
}

#[zbus::interface(name = "de.pengutronix.rauc.Installer")]
impl SimInstaller {
    /// Install a bundle into the other slot; `Completed` reports the result.
    async fn install_bundle(
        &self,
        source: String,
        _args: HashMap<String, zbus::zvariant::OwnedValue>,
        #[zbus(object_server)] server: &zbus::ObjectServer,
    ) -> zbus::fdo::Result<()> {
        {
            let mut st = self.lock();
            if st.operation != "idle" {
                return Err(zbus::fdo::Error::Failed(
                    "already processing a different method".into(),
                ));
            }
            st.operation = "installing".into();
            st.last_error.clear();
            st.progress = (0, "Installing".into(), 1);
        }
        let iface = server
            .interface::<_, SimInstaller>(super::rauc::OBJECT_PATH)
            .await?;
        let slots = self.slots.clone();
        let booted = self.booted.clone();
        let compatible = self.compatible.clone();
        let keyring = self.keyring.clone();
        let state = self.state.clone();
        tokio::spawn(async move {
            announce(&iface).await;
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(i32, String)>();
            let forward = {
                let iface = iface.clone();
                let state = state.clone();
                tokio::spawn(async move {
                    while let Some((pct, msg)) = rx.recv().await {
                        state.lock().unwrap_or_else(|p| p.into_inner()).progress = (pct, msg, 1);
                        let me = iface.get().await;
                        let _ = me.progress_changed(iface.signal_emitter()).await;
                    }
                })
            };
            let report = move |pct: i32, msg: &str| {
                let _ = tx.send((pct, msg.to_string()));
            };
            let result = install(
                &slots,
                &booted,
                &compatible,
                &keyring,
                Path::new(&source),
                &report,
            )
            .await;
            drop(report);
            let _ = forward.await;
            let code = {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                st.operation = "idle".into();
                match &result {
                    Ok(slot) => {
                        tracing::info!(%slot, bundle = %source, "sim slot manager: install done");
                        0
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, bundle = %source, "sim slot manager: install failed");
                        st.last_error = format!("Installation error: {e}");
                        1
                    }
                }
            };
            announce(&iface).await;
            let _ = SimInstaller::completed(iface.signal_emitter(), code).await;
        });
        Ok(())
    }

    /// Mark a slot good, bad or active; returns (slot name, message).
    async fn mark(
        &self,
        state: &str,
        slot_identifier: &str,
    ) -> zbus::fdo::Result<(String, String)> {
        let bootname = self.resolve(slot_identifier)?;
        let io = |e: std::io::Error| zbus::fdo::Error::IOError(e.to_string());
        match state {
            "good" => {
                self.slots
                    .update_env(|env| {
                        let s = env.slot(bootname);
                        s.state = BootState::Good;
                        s.attempts_left = BOOT_ATTEMPTS;
                        s.failure.clear();
                    })
                    .map_err(io)?;
            }
            "bad" => {
                self.slots
                    .update_env(|env| {
                        let s = env.slot(bootname);
                        s.state = BootState::Bad;
                        s.attempts_left = 0;
                    })
                    .map_err(io)?;
            }
            "active" => {
                self.slots
                    .update_env(|env| env.activate(bootname))
                    .map_err(io)?;
            }
            other => {
                return Err(zbus::fdo::Error::InvalidArgs(format!(
                    "unknown state {other:?} (good, bad or active)"
                )));
            }
        }
        let name = slot_name(bootname);
        tracing::info!(slot = %name, state, "sim slot manager: marked");
        Ok((name.clone(), format!("marked slot {name} as {state}")))
    }

    /// Every slot with its attributes.
    async fn get_slot_status(&self) -> Vec<SlotRow> {
        self.slots.status_rows(&self.booted)
    }

    /// The slot the bootloader tries first.
    async fn get_primary(&self) -> zbus::fdo::Result<String> {
        let env = self
            .slots
            .load_env()
            .map_err(|e| zbus::fdo::Error::IOError(e.to_string()))?;
        Ok(slot_name(&env.primary()))
    }

    /// An install finished: 0 on success.
    #[zbus(signal)]
    async fn completed(emitter: &SignalEmitter<'_>, result: i32) -> zbus::Result<()>;

    /// `idle` or `installing`.
    #[zbus(property)]
    async fn operation(&self) -> String {
        self.lock().operation.clone()
    }

    /// Message of the last failed install.
    #[zbus(property)]
    async fn last_error(&self) -> String {
        self.lock().last_error.clone()
    }

    /// (percent, message, nesting depth).
    #[zbus(property)]
    async fn progress(&self) -> (i32, String, i32) {
        self.lock().progress.clone()
    }

    /// The model string bundles must carry.
    #[zbus(property)]
    async fn compatible(&self) -> String {
        self.compatible.clone()
    }

    /// Variant (unused by svcOS).
    #[zbus(property)]
    async fn variant(&self) -> String {
        String::new()
    }

    /// Bootname of the booted slot.
    #[zbus(property)]
    async fn boot_slot(&self) -> String {
        self.booted.clone()
    }
}

/// Serve the sim's installer on `conn` under RAUC's bus name.
pub async fn serve(conn: &zbus::Connection, installer: SimInstaller) -> zbus::Result<()> {
    conn.object_server()
        .at(super::rauc::OBJECT_PATH, installer)
        .await?;
    conn.request_name(super::rauc::BUS_NAME).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootloader_tries_a_new_slot_then_falls_back() {
        let mut env = BootEnv::default();
        assert_eq!(env.choose(), ("A".to_string(), false));
        env.activate("B");
        assert_eq!(env.primary(), "B");
        for _ in 0..BOOT_ATTEMPTS {
            assert_eq!(env.choose(), ("B".to_string(), true));
        }
        // Attempts exhausted: B is given up on and A boots.
        assert_eq!(env.choose(), ("A".to_string(), false));
        assert_eq!(env.slots["B"].state, BootState::Bad);
        assert!(env.slots["B"].failure.contains("no boot attempts left"));
        assert_eq!(env.primary(), "A");
    }

    #[test]
    fn committed_slot_boots_forever() {
        let mut env = BootEnv::default();
        env.activate("B");
        assert_eq!(env.choose(), ("B".to_string(), true));
        env.slot("B").state = BootState::Good;
        for _ in 0..10 {
            assert_eq!(env.choose(), ("B".to_string(), false));
        }
        // A bad mark sends the next boot back to A.
        env.slot("B").state = BootState::Bad;
        assert_eq!(env.choose(), ("A".to_string(), false));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn names_map_both_ways() {
        assert_eq!(slot_name("A"), "rootfs.0");
        assert_eq!(slot_name("B"), "rootfs.1");
        assert_eq!(bootname_of("rootfs.1"), Some("B"));
        assert_eq!(bootname_of("A"), Some("A"));
        assert_eq!(bootname_of("rootfs.7"), None);
        assert_eq!(other("A"), "B");
    }

    /// Whether `tool` runs at all (the bundle tests need RAUC's tool chain).
    fn runs(tool: &str, arg: &str) -> bool {
        std::process::Command::new(tool).arg(arg).output().is_ok()
    }

    fn run(cmd: &mut std::process::Command) {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A throwaway signing key and its self-signed certificate (the keyring).
    fn keypair(dir: &Path) -> (PathBuf, PathBuf) {
        let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
        run(std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args([
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=t",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert));
        (key, cert)
    }

    /// A bundle signed by `key` whose rootfs image `svcos` is made by `put_image`.
    fn signed_bundle(
        dir: &Path,
        name: &str,
        (key, cert): &(PathBuf, PathBuf),
        put_image: impl FnOnce(&Path),
    ) -> PathBuf {
        let content = dir.join(format!("{name}.d"));
        std::fs::create_dir(&content).unwrap();
        put_image(&content.join(SLOT_BINARY));
        std::fs::write(
            content.join("manifest.raucm"),
            "[update]\ncompatible=svcos-test\nversion=9.0.0\n\n[bundle]\nformat=plain\n\n\
             [image.rootfs]\nfilename=svcos\n",
        )
        .unwrap();
        let out = dir.join(format!("{name}.raucb"));
        run(std::process::Command::new(bundle::RAUC)
            .arg("bundle")
            .arg(format!("--cert={}", cert.display()))
            .arg(format!("--key={}", key.display()))
            .arg(&content)
            .arg(&out));
        out
    }

    /// Every entry under `root` (not following links): path → (mode, content or link target).
    fn tree(root: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
        use std::os::unix::fs::PermissionsExt;
        let mut out = BTreeMap::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let body = if meta.is_dir() {
                    todo.push(path.clone());
                    Vec::new()
                } else if meta.is_symlink() {
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                } else {
                    std::fs::read(&path).unwrap()
                };
                out.insert(path, (meta.permissions().mode(), body));
            }
        }
        out
    }

    #[tokio::test]
    async fn a_signed_bundle_cannot_smuggle_a_file_in_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        if !(runs(bundle::RAUC, "--version")
            && runs("openssl", "version")
            && runs("mksquashfs", "-version"))
        {
            eprintln!("rauc, openssl or mksquashfs is not installed; skipped");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let keys = keypair(tmp.path());
        let slots = SimSlots::new(&tmp.path().join("sim"));
        // Booted from A; B holds an earlier install that a refused bundle must leave alone.
        for (b, body) in [("A", "running"), ("B", "previous")] {
            std::fs::create_dir_all(slots.dir(b)).unwrap();
            std::fs::write(slots.binary(b), body).unwrap();
            slots
                .save_meta(
                    b,
                    &SlotMeta {
                        version: format!("{body}-version"),
                        ..SlotMeta::default()
                    },
                )
                .unwrap();
        }
        slots.save_env(&BootEnv::default()).unwrap();
        let before = tree(&slots.root);

        // What the finding copied: auth's password hash, mode 0600, named by a signed link.
        let secret = tmp.path().join("password-hash");
        let secret_body = format!("$argon2id$v=19${}", "s".repeat(8192)).into_bytes();
        std::fs::write(&secret, &secret_body).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = signed_bundle(tmp.path(), "link", &keys, |image| {
            std::os::unix::fs::symlink(&secret, image).unwrap()
        });
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |_: i32, what: &str| seen.lock().unwrap().push(what.to_string());
        let err = install(&slots, "A", "svcos-test", &keys.1, &link, &report)
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, InstallError::Bundle(e) if e.code() == "unsafe_image"),
            "{msg}"
        );
        assert!(msg.contains("is a symbolic link"), "{msg}");
        // Refused while checking the images, before the target slot was marked or written.
        let seen = seen.into_inner().unwrap();
        assert_eq!(
            seen.last().map(String::as_str),
            Some("Checking image digests")
        );
        assert_eq!(tree(&slots.root), before, "the slots changed");
        assert!(!slots.root.join(".staging").exists());

        // The same install from a regular file goes through, with its mode capped at 0755.
        let plain = signed_bundle(tmp.path(), "plain", &keys, |image| {
            std::fs::write(image, &secret_body).unwrap();
            std::fs::set_permissions(image, std::fs::Permissions::from_mode(0o6777)).unwrap();
        });
        let slot = install(&slots, "A", "svcos-test", &keys.1, &plain, &|_, _| {})
            .await
            .unwrap();
        assert_eq!(slot, "rootfs.1");
        let meta = std::fs::symlink_metadata(slots.binary("B")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read(slots.binary("B")).unwrap(), secret_body);
        assert_eq!(slots.meta("B").version, "9.0.0");
        assert_eq!(slots.load_env().unwrap().primary(), "B");
    }

    #[test]
    fn env_persists_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let slots = SimSlots::new(dir.path());
        assert!(!slots.initialised());
        slots.update_env(|e| e.activate("B")).unwrap();
        assert!(slots.initialised());
        assert_eq!(slots.load_env().unwrap().primary(), "B");
    }
}
