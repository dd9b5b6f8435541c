//! The svcOS supervisor: starts every service as its own process, keeps them running, and
//! survives its own death without stopping mining.
//!
//! # Design
//! - **One owner of state.** [`manager`] is a single task owning every service's state; the
//!   control socket ([`control`]), D-Bus ([`dbus`]) and signals reach it only through messages.
//! - **Policy is a pure function.** [`policy::decide`] maps (policy, exit, history, now) to
//!   restart-after-delay, give-up or stay-stopped; the manager only executes the decision.
//! - **Boot order and readiness.** Services start one by one in [`ServiceName::ALL`] order; a
//!   service counts as started when its gRPC health reports SERVING (probed with a short
//!   backoff), never after a sleep.
//! - **Children outlive the supervisor.** Each child leads its own session (no terminal signals,
//!   no SIGHUP), writes to a FIFO rather than a pipe ([`logs`]), and is recorded in a pidfile with
//!   its kernel start time ([`procfs`]). A restarted supervisor re-adopts live children instead
//!   of starting duplicates and learns of their exit through a pidfd. A lock file keeps two
//!   supervisors off one instance.
//! - **Privilege separation.** In production, as root, each child switches to its own system user
//!   (`svcos-<service>`, see `systemd/svcos.sysusers`) before exec; in the sim everything runs as
//!   the invoking user.
//!
//! Entry points: [`entry`] (`svcos supervisor`, production), [`sim_entry`] (`svcos sim`) and
//! [`ctl_entry`] (`svcos ctl`).

#![warn(missing_docs)]

pub mod child;
pub mod control;
pub mod ctl;
// zbus's interface macro generates undocumented helper methods (signal emitters).
#[allow(missing_docs)]
pub mod dbus;
pub mod fdstore;
pub mod logs;
pub mod manager;
pub mod notify;
pub mod policy;
pub mod procfs;
pub mod simcfg;
pub mod update;

use std::ffi::OsString;
use std::fs::File;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nix::fcntl::{Flock, FlockArg};

use svcos_common::config::Config;
use svcos_common::entry::{Flavor, runtime, set_process_name};
use svcos_common::{Layout, ServiceName, Shutdown, exit, ipc, logging};

use crate::dbus::Bus;
use crate::manager::Settings;

/// Command line of `svcos supervisor`.
#[derive(Debug, Parser)]
#[command(
    name = "svcos supervisor",
    about = "Start and supervise every svcOS service"
)]
pub struct SupervisorArgs {
    /// Connect to this D-Bus address instead of the system bus.
    #[arg(long)]
    pub dbus_address: Option<String>,
    /// Run without D-Bus.
    #[arg(long)]
    pub no_dbus: bool,
}

/// Command line of `svcos sim`.
#[derive(Debug, Parser)]
#[command(
    name = "svcos sim",
    about = "Run the whole svcOS stack on simulated hardware, all state under --dir"
)]
pub struct SimArgs {
    /// Directory for config, sockets, pidfiles, logs and state (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Loopback address the TCP ports bind [default: 127.0.0.1].
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// REST API port [default: 8080].
    #[arg(long)]
    pub api_port: Option<u16>,
    /// Dashboard and /api proxy port [default: 8000].
    #[arg(long)]
    pub http_port: Option<u16>,
    /// cgminer-compatible API port [default: 4028].
    #[arg(long)]
    pub legacy_port: Option<u16>,
    /// Test pool port [default: 3333].
    #[arg(long)]
    pub pool_port: Option<u16>,
    /// Start as a miner that already finished setup (an updated or restored config): not held
    /// at the setup cap ([power].setup_hold false). Without it a fresh sim is held until the
    /// setup wizard is finished.
    #[arg(long)]
    pub setup_complete: bool,
    /// D-Bus address to serve org.svcos.Supervisor1 on [default: the session bus if any, else
    /// a private dbus-daemon on <dir>/run/dbus.sock].
    #[arg(long)]
    pub dbus_address: Option<String>,
    /// Internal: guard the trial boot of the supervisor with this pid (see update::simboot).
    #[arg(long, hide = true)]
    pub boot_watchdog: Option<u32>,
    /// Internal: the slot on trial that `--boot-watchdog` guards.
    #[arg(long, hide = true, default_value = "B")]
    pub boot_slot: String,
}

/// Errors that stop the supervisor from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another supervisor holds this instance's lock.
    #[error("another supervisor is already running for {dir}")]
    AlreadyRunning {
        /// The runtime directory.
        dir: PathBuf,
    },
    /// The runtime directory or lock file could not be set up.
    #[error("cannot prepare {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn parse<T: Parser>(prog: &str, args: Vec<OsString>) -> Result<T, ExitCode> {
    T::try_parse_from(std::iter::once(OsString::from(prog)).chain(args)).map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(exit::USAGE)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// `svcos supervisor`: the production supervisor (no sim-only services).
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args: SupervisorArgs = match parse("svcos supervisor", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let bus = if args.no_dbus {
        None
    } else {
        Some(args.dbus_address.map(Bus::Address).unwrap_or(Bus::System))
    };
    let services = ServiceName::ALL
        .into_iter()
        .filter(|s| {
            !matches!(
                s,
                ServiceName::HwSim | ServiceName::TestPool | ServiceName::Supervisor
            )
        })
        .collect();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    run(
        Layout::production(),
        services,
        None,
        bus,
        root,
        update::Setup::Image,
    )
}

/// `svcos sim`: the whole stack, simulated board and test pool included, under `--dir`.
#[cfg(feature = "sim")]
pub fn sim_entry(args: Vec<OsString>) -> ExitCode {
    let raw = args.clone();
    let args: SimArgs = match parse("svcos sim", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if let Some(bind) = args.bind
        && !bind.is_loopback()
    {
        eprintln!("svcos sim: --bind {bind} is not a loopback address (127.0.0.0/8 or ::1)");
        return ExitCode::from(exit::USAGE);
    }
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("svcos sim: cannot create {}: {e}", args.dir.display());
        return ExitCode::from(exit::FAILURE);
    }
    // Children get --dir; an absolute path keeps them right whatever their working directory.
    let dir = match std::fs::canonicalize(&args.dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("svcos sim: {}: {e}", args.dir.display());
            return ExitCode::from(exit::FAILURE);
        }
    };
    // The bootloader comes first: it may exec another slot's binary.
    let boot = update::simboot::BootArgs::new(dir.clone(), &raw);
    if let Some(pid) = args.boot_watchdog {
        return update::simboot::watchdog(&boot, pid, &args.boot_slot);
    }
    let booted = update::simboot::boot(&boot);
    let layout = Layout::sim(&dir);
    update::simboot::clear_halted(&layout);
    let flags = simcfg::SimFlags {
        bind: args.bind,
        api_port: args.api_port,
        http_port: args.http_port,
        legacy_port: args.legacy_port,
        pool_port: args.pool_port,
        setup_complete: args.setup_complete,
    };
    if let Err(e) = simcfg::prepare(&layout.config_path, &flags) {
        eprintln!("svcos sim: {e}");
        return ExitCode::from(exit::CONFIG);
    }
    let bus = args
        .dbus_address
        .or_else(|| std::env::var("DBUS_SESSION_BUS_ADDRESS").ok())
        .filter(|a| !a.is_empty())
        .or_else(|| update::simboot::private_bus(&layout.runtime_dir))
        .map(Bus::Address);
    let services = ServiceName::ALL
        .into_iter()
        .filter(|s| *s != ServiceName::Supervisor)
        .collect();
    let setup = update::Setup::Sim {
        boot,
        booted: booted.slot,
    };
    run(layout, services, Some(dir), bus, false, setup)
}

/// `svcos ctl`.
pub fn ctl_entry(args: Vec<OsString>) -> ExitCode {
    let args: ctl::CtlArgs = match parse("svcos ctl", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let rt = match runtime(Flavor::CurrentThread) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("svcos ctl: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    ExitCode::from(rt.block_on(ctl::run(args)))
}

/// Hold the instance lock: a second supervisor on the same runtime directory would start
/// duplicates of every service.
fn lock_instance(layout: &Layout) -> Result<Flock<File>, StartError> {
    let dir = &layout.runtime_dir;
    let io = |path: &PathBuf| {
        let path = path.clone();
        move |source| StartError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("supervisor.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
        StartError::AlreadyRunning {
            dir: layout.runtime_dir.clone(),
        }
    })?;
    let pidfile = layout.pidfile(ServiceName::Supervisor);
    if let Ok(me) = procfs::ProcessId::of(std::process::id()) {
        let _ = procfs::write_pidfile(&pidfile, me);
    }
    Ok(lock)
}

/// In production the services, each under its own user, bind their sockets in the runtime
/// directory: make it group `svcos`, group-writable and sticky (nobody removes another's socket).
fn share_runtime_dir(layout: &Layout) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = &layout.runtime_dir;
    nix::unistd::chown(dir, None, Some(service_group()?))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1770))?;
    Ok(())
}

/// The gid of the group every service user belongs to.
fn service_group() -> anyhow::Result<nix::unistd::Gid> {
    Ok(nix::unistd::Group::from_name(child::SERVICE_GROUP)?
        .ok_or_else(|| anyhow::anyhow!("group {} does not exist", child::SERVICE_GROUP))?
        .gid)
}

fn run(
    layout: Layout,
    services: Vec<ServiceName>,
    sim_dir: Option<PathBuf>,
    bus: Option<Bus>,
    drop_privileges: bool,
    setup: update::Setup,
) -> ExitCode {
    set_process_name("supervisor");
    svcos_common::alloc::tune();
    logging::init("supervisor");
    // A bad value never keeps the stack from starting: it falls back and is reported
    // (svcos_common::config's fallback rule), as in every service.
    let loaded = Config::load_or_fallback(&layout.config_path, &Config::start_fallback(&layout));
    svcos_common::config::ProblemLog::new("supervisor")
        .report(&loaded.problems, svcos_common::time::unix_ms());
    let config = loaded.config;
    let rt = match runtime(Flavor::CurrentThread) {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot build runtime");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let after = (setup.clone(), layout.clone());
    let outcome = rt.block_on(async move {
        let _lock = lock_instance(&layout)?;
        if drop_privileges {
            share_runtime_dir(&layout)?;
        }
        let shutdown = Shutdown::new();
        shutdown.trigger_on_signals()?;
        svcos_common::alloc::spawn_trimmer(shutdown.clone());
        // A closed terminal (SIGHUP) would otherwise kill the supervisor outright and leave the
        // services running unsupervised: stop them cleanly instead.
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let on_hangup = shutdown.clone();
        tokio::spawn(async move {
            if hangup.recv().await.is_some() {
                tracing::info!("SIGHUP: shutting down");
                on_hangup.trigger();
            }
        });
        let listener = ipc::bind(&layout.socket(ServiceName::Supervisor))?;
        if drop_privileges {
            // The gateway (its own user, group svcos) drives lifecycle actions through it.
            let group = service_group()?;
            nix::unistd::chown(&layout.socket(ServiceName::Supervisor), None, Some(group))?;
        }
        let store_group = if drop_privileges {
            Some(service_group()?)
        } else {
            None
        };
        let fd_store = match fdstore::serve(&layout, services.clone(), store_group) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::warn!(error = %e, "no fd store: UART bytes are lost while hw-agent restarts");
                None
            }
        };
        let settings = Settings {
            layout: layout.clone(),
            services,
            fd_store,
            reboot: if sim_dir.is_some() {
                manager::RebootAction::RestartStack
            } else {
                manager::RebootAction::Systemd
            },
            sim_dir,
            policies: config.supervisor.clone(),
            drop_privileges,
        };
        let (handle, manager) = manager::start(settings, shutdown.clone());
        let lifecycle = update::start(
            &setup,
            &layout,
            &config,
            bus.clone(),
            handle.clone(),
            shutdown.clone(),
        )
        .await;
        let server = ipc::server()
            .add_service(control::ControlService::new(handle.clone()))
            .add_service(update::UpdateGrpc::new(lifecycle.updater.clone()));
        let control_shutdown = Shutdown::new();
        let control = tokio::spawn(ipc::serve(server, listener, control_shutdown.clone()));
        let _bus = match bus {
            Some(bus) => match dbus::serve(bus.clone(), handle.clone()).await {
                Ok(conn) => {
                    tracing::info!(name = dbus::BUS_NAME, ?bus, "D-Bus interface up");
                    Some(conn)
                }
                Err(e) => {
                    tracing::warn!(error = %e, ?bus, "D-Bus unavailable; running without it");
                    None
                }
            },
            None => {
                tracing::info!("no D-Bus bus configured; running without D-Bus");
                None
            }
        };
        if let Some(every) = notify::watchdog_interval() {
            let handle = handle.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    // Feed the watchdog only while the manager task answers.
                    if tokio::time::timeout(every, handle.list()).await.is_ok() {
                        notify::watchdog();
                    }
                }
            });
        }
        let _ = manager.await;
        control_shutdown.trigger();
        let _ = control.await;
        let _ = std::fs::remove_file(layout.socket(ServiceName::Supervisor));
        let _ = std::fs::remove_file(fdstore::socket_path(&layout));
        procfs::remove_pidfile(&layout.pidfile(ServiceName::Supervisor));
        anyhow::Ok(lifecycle.updater.is_reboot_requested())
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    let reboot = matches!(outcome, Ok(true));
    update::after_stop(&after.0, &after.1, reboot);
    match outcome {
        Ok(_) => ExitCode::from(exit::OK),
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "supervisor failed");
            ExitCode::from(exit::FAILURE)
        }
    }
}
