//! Firmware lifecycle: signed A/B updates with automatic rollback, and restore to stock.
//!
//! # Who owns what
//! - **The supervisor owns the update** ([`updater`]), because it owns process lifecycle and is
//!   the one process that must outlive a failed new slot long enough to say so. The gateway only
//!   streams an upload to disk (size-limited, with progress) and makes one gRPC call
//!   (`UpdateService.InstallBundle`).
//! - **The slot manager owns the slots**: RAUC on the image (`rauc service`, system bus), a
//!   stand-in on the sim's bus ([`simslots`]). Both serve `de.pengutronix.rauc.Installer` at `/`;
//!   the updater only talks to that interface ([`rauc`]), so the code above it is the same in
//!   both.
//! - **The bootloader owns the boot choice**: U-Boot's boot-count environment on the image,
//!   [`simboot`] in the sim. A new slot is tried a bounded number of times; only the updater's
//!   `Mark(good)` after a healthy stack makes it permanent.
//!
//! # State machine
//! See [`state`]: persisted atomically under the supervisor's state directory at every phase
//! change; a starting supervisor resumes from it ([`state::resume`]).

pub mod bundle;
// zbus's proxy and interface macros generate undocumented helpers.
#[allow(missing_docs)]
pub mod rauc;
pub mod simboot;
#[allow(missing_docs)]
pub mod simslots;
pub mod state;
pub mod updater;

#[cfg(feature = "sim")]
use std::path::{Path, PathBuf};

use svcos_common::config::Config;
use svcos_common::{Layout, Shutdown};

use crate::dbus::Bus;
use crate::manager::Handle;

pub use updater::{RebootSwitch, UpdateGrpc, Updater};

/// Which platform the supervisor runs on.
#[derive(Debug, Clone)]
pub enum Setup {
    /// The flashed image: RAUC on the system bus, a reboot is a reboot.
    Image,
    /// `svcos sim`: the stand-in slot manager, exec-based reboots (feature `sim`).
    #[cfg(feature = "sim")]
    Sim {
        /// Arguments to hand to the next boot.
        boot: simboot::BootArgs,
        /// The slot this process runs as.
        booted: String,
    },
}

/// The compatible string of this unit: `svcos-<board>` on the image, `svcos-sim-<board>` in
/// the sim (a sim bundle must never install on a miner).
pub fn compatible(config: &Config, sim: bool) -> String {
    let board = serde_json::to_value(config.hardware.board)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    if sim {
        format!("svcos-sim-{board}")
    } else {
        format!("svcos-{board}")
    }
}

/// The sim's keyring: `<dir>/rauc/keyring.pem`. When missing, a development key pair is made
/// with openssl (`dev-key.pem` signs bundles this sim accepts).
#[cfg(feature = "sim")]
pub fn ensure_sim_keyring(dir: &Path) -> Option<PathBuf> {
    let rauc_dir = dir.join("rauc");
    let keyring = rauc_dir.join("keyring.pem");
    if keyring.exists() {
        return Some(keyring);
    }
    std::fs::create_dir_all(&rauc_dir).ok()?;
    let key = rauc_dir.join("dev-key.pem");
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=svcOS sim development key",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&keyring)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Some(keyring),
        _ => {
            tracing::warn!(
                "no sim keyring and openssl could not make one; updates will be refused"
            );
            None
        }
    }
}

/// What [`start`] leaves running.
#[derive(Debug)]
pub struct Lifecycle {
    /// The updater (also served over gRPC).
    pub updater: Updater,
    /// The sim's slot manager connection (dropping it takes the interface off the bus).
    _installer: Option<zbus::Connection>,
}

/// Start the lifecycle part of the supervisor: the sim's slot manager (sim only), the updater,
/// and the resumption of whatever was in flight.
#[cfg_attr(not(feature = "sim"), allow(unused_variables))]
pub async fn start(
    setup: &Setup,
    layout: &Layout,
    config: &Config,
    bus: Option<Bus>,
    manager: Handle,
    shutdown: Shutdown,
) -> Lifecycle {
    let sim_dir: Option<std::path::PathBuf> = match setup {
        #[cfg(feature = "sim")]
        Setup::Sim { boot, .. } => Some(boot.dir.clone()),
        Setup::Image => None,
    };
    let platform = updater::Platform::new(layout, sim_dir.as_deref());
    #[cfg_attr(not(feature = "sim"), allow(unused_mut))]
    let mut installer = None;
    #[cfg(feature = "sim")]
    if let (Setup::Sim { boot, booted }, Some(Bus::Address(addr))) = (setup, &bus) {
        let _ = ensure_sim_keyring(&boot.dir);
        let object = simslots::SimInstaller::new(
            simslots::SimSlots::new(&boot.dir),
            booted,
            &compatible(config, true),
            platform.keyring.clone(),
        );
        let conn = async {
            let conn = zbus::connection::Builder::address(addr.as_str())?
                .build()
                .await?;
            simslots::serve(&conn, object).await?;
            zbus::Result::Ok(conn)
        }
        .await;
        match conn {
            Ok(c) => {
                tracing::info!(slot = %booted, bus = %addr, "sim slot manager serving de.pengutronix.rauc");
                installer = Some(c);
            }
            Err(e) => tracing::warn!(error = %e, "sim slot manager unavailable"),
        }
    }
    let updater = Updater::new(
        platform,
        bus,
        manager,
        RebootSwitch::new(shutdown),
        layout.clone(),
    );
    let resuming = updater.clone();
    tokio::spawn(async move { resuming.resume().await });
    Lifecycle {
        updater,
        _installer: installer,
    }
}

/// After every service stopped: reboot if the updater asked for it. In the sim this execs the
/// bootloader path and does not return unless nothing can be executed.
#[cfg_attr(not(feature = "sim"), allow(unused_variables))]
pub fn after_stop(setup: &Setup, layout: &Layout, reboot: bool) {
    match (setup, reboot) {
        #[cfg(feature = "sim")]
        (Setup::Sim { boot, .. }, true) => {
            tracing::warn!("rebooting (sim): exec-ing the bootloader's choice");
            simboot::boot_chain(boot);
            tracing::error!("no slot could be executed");
        }
        #[cfg(feature = "sim")]
        (Setup::Sim { .. }, false) => simboot::mark_halted(layout),
        (Setup::Image, true) => {
            tracing::warn!("rebooting the machine");
            match std::process::Command::new("systemctl")
                .arg("reboot")
                .status()
            {
                Ok(s) if s.success() => {}
                other => tracing::error!(?other, "systemctl reboot failed"),
            }
        }
        (Setup::Image, false) => {}
    }
}
