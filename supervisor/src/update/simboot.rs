//! The sim's bootloader, hardware watchdog and private D-Bus.
//!
//! - **Bootloader.** `svcos sim` first reads `<dir>/slots/bootenv.json` (once an update set the
//!   slots up), picks a slot like U-Boot's boot-count logic ([`BootEnv::choose`]) and execs that
//!   slot's `svcos` with the same arguments. Before the first update nothing happens: the binary
//!   that was started is slot A.
//! - **Watchdog.** A slot on trial (installed, not yet marked good) is guarded by a watchdog
//!   process: a known-good `svcos` (the binary that chose the slot) started as
//!   `svcos sim ... --boot-watchdog PID --boot-slot B`. If the trial supervisor dies, or the slot
//!   is not marked good in time, it records why, kills what is left of the stack and boots again
//!   (the next attempt, or the previous slot once the attempts are used up). It exits as soon as
//!   the slot is marked good or bad (the updater reboots by itself after a bad mark).
//! - **Reboot** is the supervisor stopping every service and exec-ing the bootloader path.
//! - **Bus.** Without `--dbus-address` or a session bus, the sim starts `dbus-daemon` on
//!   `<dir>/run/dbus.sock` (dying with the supervisor that started it; reused across reboots).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use svcos_common::{Layout, ServiceName};

use super::simslots::{BootState, SimSlots};
use crate::procfs::{self, ProcessId};

/// Environment variable that tells an exec'ed slot which slot the bootloader chose.
pub const SLOT_ENV: &str = "SVCOS_SIM_SLOT";
/// How long a trial slot may take to be marked good before the watchdog resets it. The
/// updater's own health deadline is shorter; this is the backstop for a stack that hangs.
pub const WATCHDOG_DEADLINE: Duration = Duration::from_secs(300);
/// Poll period of the watchdog.
const WATCHDOG_POLL: Duration = Duration::from_millis(200);
/// File a supervisor stopped on purpose (SIGTERM) leaves, so the watchdog does not reboot it.
const HALTED_FILE: &str = "halted";

/// The flags of `svcos sim` to hand on to the next boot (without the watchdog's own flags).
#[derive(Debug, Clone)]
pub struct BootArgs {
    /// The sim directory (absolute).
    pub dir: PathBuf,
    /// Every argument after `svcos sim`, minus `--boot-watchdog`/`--boot-slot`.
    pub argv: Vec<OsString>,
}

impl BootArgs {
    /// Strip the watchdog flags from `args`.
    pub fn new(dir: PathBuf, args: &[OsString]) -> Self {
        let mut argv = Vec::new();
        let mut skip = false;
        for a in args {
            if skip {
                skip = false;
                continue;
            }
            let s = a.to_string_lossy();
            if s == "--boot-watchdog" || s == "--boot-slot" {
                skip = true;
                continue;
            }
            if s.starts_with("--boot-watchdog=") || s.starts_with("--boot-slot=") {
                continue;
            }
            argv.push(a.clone());
        }
        BootArgs { dir, argv }
    }
}

/// The slot this process runs as, chosen by [`boot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booted {
    /// Bootname.
    pub slot: String,
}

/// The bootloader step of `svcos sim`: returns when this process is the chosen slot, else
/// execs it (and never returns).
pub fn boot(args: &BootArgs) -> Booted {
    if let Ok(slot) = std::env::var(SLOT_ENV)
        && super::simslots::bootname_of(&slot).is_some()
    {
        return Booted { slot };
    }
    let slots = SimSlots::new(&args.dir);
    if !slots.initialised() {
        return Booted { slot: "A".into() };
    }
    boot_chain(args)
}

/// Choose a slot and exec it; arms the watchdog for a trial slot. Only returns when no slot
/// binary can be executed, with slot A meaning "this binary".
pub fn boot_chain(args: &BootArgs) -> Booted {
    let slots = SimSlots::new(&args.dir);
    for _ in 0..8 {
        let mut picked = ("A".to_string(), false);
        let (slot, trial) = match slots.update_env(|env| picked = env.choose()) {
            Ok(_) => picked,
            Err(e) => {
                eprintln!("svcos sim: boot environment unreadable ({e}); booting this binary");
                return Booted { slot: "A".into() };
            }
        };
        let binary = slots.binary(&slot);
        if !binary.exists() {
            if slot == "A" {
                return Booted { slot };
            }
            mark_failed(&slots, &slot, "slot has no svcos executable");
            continue;
        }
        if trial {
            let me = std::process::id();
            if let Err(e) = spawn_watchdog(args, me, &slot) {
                eprintln!("svcos sim: cannot start the boot watchdog: {e}");
            }
        }
        eprintln!(
            "svcos sim: booting slot {slot}{} ({})",
            if trial { " on trial" } else { "" },
            binary.display()
        );
        let err = Command::new(&binary)
            .arg0("svcos")
            .arg("sim")
            .args(&args.argv)
            .env(SLOT_ENV, &slot)
            .exec();
        eprintln!("svcos sim: cannot execute {}: {err}", binary.display());
        mark_failed(&slots, &slot, &format!("cannot execute slot binary: {err}"));
    }
    Booted { slot: "A".into() }
}

fn mark_failed(slots: &SimSlots, slot: &str, why: &str) {
    let _ = slots.update_env(|env| {
        let s = env.slot(slot);
        s.failure = why.to_string();
        if s.attempts_left == 0 || s.state != BootState::Trial {
            s.state = BootState::Bad;
        }
    });
}

fn spawn_watchdog(args: &BootArgs, pid: u32, slot: &str) -> std::io::Result<()> {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("svcos")
        .arg("sim")
        .args(&args.argv)
        .arg("--boot-watchdog")
        .arg(pid.to_string())
        .arg("--boot-slot")
        .arg(slot)
        .env_remove(SLOT_ENV)
        .stdin(Stdio::null())
        .process_group(0);
    cmd.spawn().map(drop)
}

/// Write the marker that a supervisor stopped on purpose.
pub fn mark_halted(layout: &Layout) {
    let _ = std::fs::write(
        layout.runtime_dir.join(HALTED_FILE),
        std::process::id().to_string(),
    );
}

fn halted_by(layout: &Layout, pid: u32) -> bool {
    std::fs::read_to_string(layout.runtime_dir.join(HALTED_FILE))
        .is_ok_and(|t| t.trim() == pid.to_string())
}

/// Forget a previous halt marker (a new boot is under way).
pub fn clear_halted(layout: &Layout) {
    let _ = std::fs::remove_file(layout.runtime_dir.join(HALTED_FILE));
}

/// SIGKILL every process the pidfiles name (a reset takes the whole stack down).
fn reset_stack(layout: &Layout) {
    for service in ServiceName::ALL {
        if let Ok(Some(id)) = procfs::read_pidfile(&layout.pidfile(service))
            && procfs::start_ticks(id.pid).is_ok_and(|t| t == id.start_ticks)
        {
            let _ = killpg(Pid::from_raw(id.pid as i32), Signal::SIGKILL);
            let _ = nix::sys::signal::kill(Pid::from_raw(id.pid as i32), Signal::SIGKILL);
        }
        procfs::remove_pidfile(&layout.pidfile(service));
    }
}

/// `svcos sim --boot-watchdog PID --boot-slot S`: guard a trial boot (see the module doc).
pub fn watchdog(args: &BootArgs, pid: u32, slot: &str) -> std::process::ExitCode {
    let layout = Layout::sim(&args.dir);
    let slots = SimSlots::new(&args.dir);
    let started = Instant::now();
    let watched = ProcessId::of(pid).ok();
    let failure = loop {
        let state = slots
            .load_env()
            .ok()
            .and_then(|e| e.slots.get(slot).map(|s| s.state));
        if state != Some(BootState::Trial) {
            return std::process::ExitCode::SUCCESS;
        }
        let alive = watched.is_some_and(|id| {
            procfs::start_ticks(id.pid).is_ok_and(|t| t == id.start_ticks)
                && !procfs::cmdline(id.pid).is_ok_and(|c| c.is_empty())
                && !is_zombie(id.pid)
        });
        if !alive {
            if halted_by(&layout, pid) {
                return std::process::ExitCode::SUCCESS;
            }
            break format!("the svcos of slot {slot} exited before the slot was marked good");
        }
        if started.elapsed() > WATCHDOG_DEADLINE {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            break format!(
                "slot {slot} was not marked good within {} s",
                WATCHDOG_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(WATCHDOG_POLL);
    };
    eprintln!("svcos sim: boot watchdog: {failure}; resetting");
    reset_stack(&layout);
    let _ = slots.update_env(|env| {
        let s = env.slot(slot);
        s.failure = format!("{failure} (attempts left: {})", s.attempts_left);
        if s.attempts_left == 0 {
            s.state = BootState::Bad;
        }
    });
    boot_chain(args);
    // Nothing could be executed: run this (known-good) binary as the previous slot would.
    std::process::ExitCode::from(svcos_common::exit::FAILURE)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// A private bus for the sim: reuse the one at `<run>/dbus.sock` if it answers, else start
/// `dbus-daemon` there. Returns its address, or `None` when dbus-daemon is not installed.
pub fn private_bus(runtime_dir: &Path) -> Option<String> {
    let socket = runtime_dir.join("dbus.sock");
    let address = format!("unix:path={}", socket.display());
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        return Some(address);
    }
    let _ = std::fs::create_dir_all(runtime_dir);
    let _ = std::fs::remove_file(&socket);
    let mut cmd = Command::new("dbus-daemon");
    cmd.arg("--session")
        .arg("--nofork")
        .arg("--nopidfile")
        .arg(format!("--address={address}"))
        .arg("--print-address=1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // dbus-daemon tells systemd it is ready when it finds a notify socket; that READY=1
        // would be read as the supervisor's own, before any service runs.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID");
    // SAFETY: prctl with integer arguments is async-signal-safe; it ties the daemon's life to
    // this thread, so a killed supervisor does not leave a bus behind (exec keeps it).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("svcos sim: no private D-Bus (dbus-daemon: {e})");
            return None;
        }
    };
    // The daemon prints its address once it listens.
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        use std::io::BufRead;
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    if line.trim().is_empty() {
        eprintln!("svcos sim: dbus-daemon did not start");
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    // dbus-daemon leaves its socket world-writable; the bus admits only this uid anyway, but
    // nobody else has reason to reach it, so the file says so too.
    if let Err(e) = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)) {
        eprintln!("svcos sim: cannot restrict {}: {e}", socket.display());
    }
    // Not waited for: it lives as long as this process (and the slots it execs into).
    drop(child);
    Some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_private_bus_socket_is_owner_only() {
        if Command::new("dbus-daemon")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("dbus-daemon is not installed; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let address = private_bus(dir.path()).expect("a private bus");
        let socket = dir.path().join("dbus.sock");
        assert_eq!(address, format!("unix:path={}", socket.display()));
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // The bus still answers its owner.
        assert!(std::os::unix::net::UnixStream::connect(&socket).is_ok());
    }

    #[test]
    fn watchdog_flags_are_not_handed_on() {
        let args: Vec<OsString> = [
            "--dir",
            "/x",
            "--boot-watchdog",
            "42",
            "--api-port",
            "1",
            "--boot-slot=B",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let b = BootArgs::new("/x".into(), &args);
        assert_eq!(b.argv, ["--dir", "/x", "--api-port", "1"]);
    }
}
