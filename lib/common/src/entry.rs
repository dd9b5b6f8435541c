//! The thin `main` every service shares.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tokio::net::UnixListener;

use crate::config::{Config, ConfigError, ProblemLog};
use crate::{Layout, ServiceName, Shutdown, alloc, exit, ipc, logging};

/// Arguments every service accepts. The supervisor passes `--dir` in the sim and nothing in
/// production.
#[derive(Debug, Clone, Default, Parser)]
pub struct ServiceArgs {
    /// Root of a sim instance: sockets in DIR/run, state in DIR/state, config DIR/config.toml.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Override the config file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override the runtime (socket) directory.
    #[arg(long)]
    pub runtime_dir: Option<PathBuf>,
    /// Override the state directory.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

impl ServiceArgs {
    /// The layout these arguments select.
    pub fn layout(&self) -> Layout {
        let mut layout = match &self.dir {
            Some(dir) => Layout::sim(dir),
            None => Layout::production(),
        };
        if let Some(p) = &self.config {
            layout.config_path = p.clone();
        }
        if let Some(p) = &self.runtime_dir {
            layout.runtime_dir = p.clone();
        }
        if let Some(p) = &self.state_dir {
            layout.state_dir = p.clone();
        }
        layout
    }
}

/// What a service's `run` gets besides its listener and shutdown signal.
#[derive(Debug, Clone)]
pub struct ServiceContext {
    /// Which service this process is.
    pub name: ServiceName,
    /// Where this instance keeps sockets, state and config.
    pub layout: Layout,
    /// The validated config at start.
    pub config: Config,
}

/// How many threads a service's tokio runtime gets. Most services need one: the footprint
/// target is eight processes under 18 MB together.
#[derive(Debug, Clone, Copy)]
pub enum Flavor {
    /// One thread drives everything (the default).
    CurrentThread,
    /// A multi-thread runtime with this many workers.
    MultiThread(usize),
}

/// Name this process in `ps`/`top` (the kernel's comm, 15 bytes).
pub fn set_process_name(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&c);
    }
}

/// Build a tokio runtime of the given flavour.
pub fn runtime(flavor: Flavor) -> std::io::Result<tokio::runtime::Runtime> {
    match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build(),
    }
}

/// Parse the common arguments from `args` (without the program name and service word).
pub fn parse_args(name: ServiceName, args: Vec<OsString>) -> Result<ServiceArgs, ExitCode> {
    let argv = std::iter::once(OsString::from(format!("svcos {name}"))).chain(args);
    ServiceArgs::try_parse_from(argv).map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(exit::USAGE)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// The whole life of a service process: name it, log, load config, bind its socket, run, exit.
///
/// `run` gets the context, the bound gRPC listener (mode 0660) and the shutdown signal, and is
/// expected to serve health on the listener. The config it gets is always valid: invalid values
/// were replaced by their fallbacks ([`Config::load_or_fallback`]) and logged. An error whose
/// root is a [`ConfigError`] (a config the service cannot run at all, such as no board) exits
/// with [`exit::CONFIG`] (never restarted); any other error exits with [`exit::FAILURE`].
pub fn run_service<F, Fut>(name: ServiceName, args: ServiceArgs, flavor: Flavor, run: F) -> ExitCode
where
    F: FnOnce(ServiceContext, UnixListener, Shutdown) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    set_process_name(name.as_str());
    alloc::tune();
    logging::init(name.as_str());
    let layout = args.layout();
    // A bad value never stops a service: it runs on the fallback (crate::config's fallback
    // rule), reported once here; the owner and the gateway keep reporting it.
    let loaded = Config::load_or_fallback(&layout.config_path, &Config::start_fallback(&layout));
    ProblemLog::new(name.as_str()).report(&loaded.problems, crate::time::unix_ms());
    let config = loaded.config;
    let rt = match runtime(flavor) {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot build runtime");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let outcome = rt.block_on(async move {
        let shutdown = Shutdown::new();
        shutdown.trigger_on_signals()?;
        alloc::spawn_trimmer(shutdown.clone());
        let listener = ipc::bind(&layout.socket(name))?;
        let ctx = ServiceContext {
            name,
            layout,
            config,
        };
        run(ctx, listener, shutdown).await
    });
    // Detached tasks (streams to peers) must not keep the process alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match outcome {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) if e.chain().any(|c| c.is::<ConfigError>()) => {
            tracing::error!(error = format!("{e:#}"), "bad configuration");
            ExitCode::from(exit::CONFIG)
        }
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "service failed");
            ExitCode::from(exit::FAILURE)
        }
    }
}

/// A service that so far serves only health: waits for shutdown. Used by services whose
/// features have not landed yet, so that they are still started and supervised.
pub async fn serve_health_only(listener: UnixListener, shutdown: Shutdown) -> anyhow::Result<()> {
    ipc::serve(ipc::no_services(), listener, shutdown).await?;
    Ok(())
}
