//! Helpers for end-to-end tests: locate the built `svcos` binary and run a whole sim stack.
//!
//! ```no_run
//! use svcos_e2e::{Sim, SimOptions};
//! let sim = Sim::start(SimOptions::default()).unwrap();
//! let api = sim.api_addr(); // 127.0.0.1:<free port>
//! let pid = sim.pid("gateway").unwrap();
//! drop(sim); // SIGTERM, waits for every service to stop
//! ```
//!
//! [`Sim::start`] runs `svcos sim --dir <temp> --api-port .. --http-port .. --legacy-port ..
//! --pool-port ..` with free ports, its output in `<dir>/sim.log`, and returns once
//! `svcos ctl status --json` shows every service running.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Deserialize;

/// Path of the `svcos` executable built in this workspace's target directory
/// (`SVCOS_BIN` overrides).
pub fn svcos_bin() -> PathBuf {
    if let Ok(p) = std::env::var("SVCOS_BIN") {
        return PathBuf::from(p);
    }
    let mut dir = std::env::current_exe().expect("test exe path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("svcos")
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
///
/// It comes from below the kernel's ephemeral range: a port from that range can become the local
/// end of any outgoing connection (another test's pool connection, say) between this call and the
/// service's bind, and then stays taken for that connection's whole life. Each test process walks
/// its own pid-seeded sequence, so tests running at once rarely even try the same port.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, span) = port_window();
    let seed = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low + (seed + n) % span) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {low}..{}", low + span);
}

/// The ports [`free_port`] draws from: the 12k below the ephemeral range's start.
fn port_window() -> (u32, u32) {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let low = ephemeral_start.saturating_sub(12_000).max(1_024);
    (low, ephemeral_start.saturating_sub(low).max(1))
}

/// Every service `svcos sim` runs, in boot order.
pub const SIM_SERVICES: [&str; 9] = [
    "hw-sim",
    "test-pool",
    "hw-agent",
    "stratum-agent",
    "auth",
    "tuner",
    "legacy-tcp",
    "gateway",
    "proxy",
];

/// Default wait for conditions in tests: generous, because tests must not depend on speed.
pub const WAIT: Duration = Duration::from_secs(60);

/// How to start a [`Sim`].
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// Reuse this directory instead of a fresh temporary one (it is not deleted on drop).
    pub dir: Option<PathBuf>,
    /// Serve the supervisor's D-Bus interface on this address.
    pub dbus_address: Option<String>,
    /// Extra environment for the supervisor and (inherited) every service, e.g. `SVCOS_LOG`.
    pub env: Vec<(String, String)>,
    /// Write this config text to `<dir>/config.toml` before the start; `svcos sim` then
    /// updates only its bind/port keys.
    pub config: Option<String>,
    /// TOML merged over the config `svcos sim` would write for this instance (tables merge key
    /// by key), e.g. `"[supervisor.default]\nstable_after_ms = 0\n"`. Ignored with `config`.
    pub config_patch: Option<String>,
    /// Start as a fresh install, held at the setup cap until the wizard is finished. Default
    /// false: the tests' miners are in service (`svcos sim --setup-complete`).
    pub setup_hold: bool,
    /// Return as soon as the supervisor's control socket answers, without waiting for every
    /// service to run (for tests of failing services).
    pub no_wait: bool,
}

/// One row of `svcos ctl status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServiceStatus {
    /// Service name.
    pub name: String,
    /// starting, running, backoff, stopping, stopped or failed.
    pub state: String,
    /// Current pid.
    pub pid: Option<u32>,
    /// Restarts (automatic and requested), kept across supervisor restarts.
    pub restarts: u32,
    /// Seconds the current process has run.
    pub uptime_s: u64,
    /// How the previous process ended.
    pub last_exit: Option<String>,
    /// Delay of the latest automatic restart, ms.
    #[serde(default)]
    pub backoff_ms: u64,
    /// Rung of the escalation ladder.
    #[serde(default)]
    pub escalation: String,
    /// Automatic restarts inside the intensity window.
    #[serde(default)]
    pub recent_restarts: u32,
}

/// A running `svcos sim` stack. Dropping it stops everything (SIGTERM, then waits).
#[derive(Debug)]
pub struct Sim {
    _temp: Option<tempfile::TempDir>,
    dir: PathBuf,
    bind: IpAddr,
    api_port: u16,
    http_port: u16,
    legacy_port: u16,
    pool_port: u16,
    options: SimOptions,
    supervisor: Option<Child>,
}

impl Sim {
    /// Start a stack with free ports in a fresh temporary directory and wait until every
    /// service is running.
    pub fn start(options: SimOptions) -> anyhow::Result<Sim> {
        let bin = svcos_bin();
        if !bin.exists() {
            bail!(
                "{} does not exist: build it first with `cargo build -p svcos` (same profile and \
                 target dir as the tests), or point SVCOS_BIN at one",
                bin.display()
            );
        }
        let (temp, dir) = match &options.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new().prefix("svcos-sim-").tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let mut sim = Sim {
            _temp: temp,
            dir,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            api_port: free_port(),
            http_port: free_port(),
            legacy_port: free_port(),
            pool_port: free_port(),
            options,
            supervisor: None,
        };
        sim.write_config()?;
        sim.spawn_supervisor()?;
        if sim.options.no_wait {
            sim.wait_for(WAIT, |_| true)?;
        } else {
            sim.wait_all_running(WAIT)?;
        }
        Ok(sim)
    }

    fn write_config(&self) -> anyhow::Result<()> {
        let path = self.dir.join("config.toml");
        if let Some(text) = &self.options.config {
            std::fs::write(&path, text)?;
        } else if let Some(patch) = &self.options.config_patch {
            let flags = svcos_supervisor::simcfg::SimFlags {
                bind: Some(self.bind),
                api_port: Some(self.api_port),
                http_port: Some(self.http_port),
                legacy_port: Some(self.legacy_port),
                pool_port: Some(self.pool_port),
                setup_complete: !self.options.setup_hold,
            };
            let base = svcos_supervisor::simcfg::fresh(&flags).to_toml();
            let mut table: toml::Table = base.parse()?;
            merge(
                &mut table,
                patch.parse().context("config_patch is not TOML")?,
            );
            std::fs::write(&path, toml::to_string(&table)?)?;
        }
        Ok(())
    }

    fn spawn_supervisor(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut cmd = Command::new(svcos_bin());
        cmd.arg("sim")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--bind")
            .arg(self.bind.to_string())
            .arg("--api-port")
            .arg(self.api_port.to_string())
            .arg("--http-port")
            .arg(self.http_port.to_string())
            .arg("--legacy-port")
            .arg(self.legacy_port.to_string())
            .arg("--pool-port")
            .arg(self.pool_port.to_string())
            // Tests must not meet a developer's session bus unless they ask for a bus.
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C on the test run must reach the test, not the sim.
            .process_group(0);
        if let Some(addr) = &self.options.dbus_address {
            cmd.arg("--dbus-address").arg(addr);
        }
        if !self.options.setup_hold {
            cmd.arg("--setup-complete");
        }
        for (k, v) in &self.options.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", svcos_bin().display()))?;
        self.supervisor = Some(child);
        Ok(())
    }

    /// The sim's directory (`--dir`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the supervisor's output (and every service's tagged output) goes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("sim.log")
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The sim's runtime directory (sockets, pidfiles).
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The gRPC socket of a service.
    pub fn socket(&self, service: &str) -> PathBuf {
        self.runtime_dir().join(format!("{service}.sock"))
    }

    /// The loopback address every TCP port binds.
    pub fn bind(&self) -> IpAddr {
        self.bind
    }

    /// REST API port.
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// REST API address.
    pub fn api_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.api_port)
    }

    /// Dashboard/proxy port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// Dashboard/proxy address.
    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.http_port)
    }

    /// cgminer API port.
    pub fn legacy_port(&self) -> u16 {
        self.legacy_port
    }

    /// cgminer API address.
    pub fn legacy_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.legacy_port)
    }

    /// Test pool port.
    pub fn pool_port(&self) -> u16 {
        self.pool_port
    }

    /// Test pool address.
    pub fn pool_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.pool_port)
    }

    /// Run `svcos ctl --dir <dir> ARGS`.
    pub fn ctl(&self, args: &[&str]) -> anyhow::Result<Output> {
        Ok(Command::new(svcos_bin())
            .arg("ctl")
            .arg("--dir")
            .arg(&self.dir)
            .args(args)
            .output()?)
    }

    /// `svcos ctl status --json`, parsed.
    pub fn status(&self) -> anyhow::Result<Vec<ServiceStatus>> {
        let out = self.ctl(&["status", "--json"])?;
        if !out.status.success() {
            bail!(
                "ctl status failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// Pid of a service's current process, per the supervisor.
    pub fn pid(&self, service: &str) -> Option<u32> {
        self.status()
            .ok()?
            .into_iter()
            .find(|s| s.name == service)?
            .pid
    }

    /// Pid of the supervisor process this harness started.
    pub fn supervisor_pid(&self) -> Option<u32> {
        self.supervisor.as_ref().map(|c| c.id())
    }

    /// Poll `ctl status` until `cond` holds (or `timeout` passes; then an error with the last
    /// status and the log tail).
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut cond: impl FnMut(&[ServiceStatus]) -> bool,
    ) -> anyhow::Result<Vec<ServiceStatus>> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            if let Some(child) = self.supervisor.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("svcos sim exited with {status}\n{}", self.log_tail());
            }
            let last = match self.status() {
                Ok(st) if cond(&st) => return Ok(st),
                Ok(st) => format!("{st:#?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "condition not met within {timeout:?}; last status: {}\n{}",
                    last,
                    self.log_tail()
                );
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// Wait until every sim service is running.
    pub fn wait_all_running(&mut self, timeout: Duration) -> anyhow::Result<Vec<ServiceStatus>> {
        self.wait_for(timeout, |st| {
            SIM_SERVICES
                .iter()
                .all(|n| st.iter().any(|s| s.name == *n && s.state == "running"))
        })
    }

    /// Send a signal to a service's current process.
    pub fn signal_service(&self, service: &str, signal: Signal) -> anyhow::Result<u32> {
        let pid = self
            .pid(service)
            .with_context(|| format!("{service} has no pid"))?;
        kill(Pid::from_raw(pid as i32), signal)?;
        Ok(pid)
    }

    /// SIGKILL a service and wait until it is running again with a new pid; returns the new pid.
    pub fn kill_service_and_wait(&mut self, service: &str) -> anyhow::Result<u32> {
        let old = self.signal_service(service, Signal::SIGKILL)?;
        let st = self.wait_for(WAIT, |st| {
            st.iter().any(|s| {
                s.name == service && s.state == "running" && s.pid.is_some_and(|p| p != old)
            })
        })?;
        Ok(st
            .iter()
            .find(|s| s.name == service)
            .and_then(|s| s.pid)
            .expect("running has a pid"))
    }

    /// SIGKILL the supervisor (its children keep running) and reap it.
    pub fn kill_supervisor(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.supervisor.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Start `svcos sim` again on the same directory and ports (after [`Sim::kill_supervisor`])
    /// and wait until every service is running.
    pub fn restart_supervisor(&mut self) -> anyhow::Result<()> {
        self.kill_supervisor()?;
        self.spawn_supervisor()?;
        self.wait_all_running(WAIT)?;
        Ok(())
    }

    /// Start `svcos sim` again on the same directory and ports without waiting for anything
    /// (after [`Sim::kill_supervisor`]); pair with [`Sim::wait_for`].
    pub fn restart_supervisor_nowait(&mut self) -> anyhow::Result<()> {
        self.kill_supervisor()?;
        self.spawn_supervisor()
    }

    /// Wait for the supervisor to exit on its own (after a signal the test sent); `None` if it
    /// is still running after `timeout` or was not running.
    pub fn wait_supervisor_exit(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        let Some(child) = self.supervisor.as_mut() else {
            return Ok(None);
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.supervisor = None;
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM the supervisor and wait for it to exit (it stops every service first).
    pub fn stop(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        let Some(mut child) = self.supervisor.take() else {
            return Ok(None);
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let status = child.wait()?;
                bail!("svcos sim ignored SIGTERM ({status})\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pids of live processes whose command line is `svcos <service> --dir <this dir>`.
    pub fn processes_of(&self, service: &str) -> Vec<u32> {
        let dir = self.dir.to_string_lossy().into_owned();
        let canon = std::fs::canonicalize(&self.dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| dir.clone());
        list_svcos_processes()
            .into_iter()
            .filter(|(_, argv)| {
                argv.get(1).is_some_and(|a| a == service)
                    && argv
                        .windows(2)
                        .any(|w| w[0] == "--dir" && (w[1] == dir || w[1] == canon))
            })
            .map(|(pid, _)| pid)
            .collect()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(40);
        format!("--- sim.log tail ---\n{}", lines[start..].join("\n"))
    }

    /// Kill any service process still running in this directory (after a test killed the
    /// supervisor and did not restart it).
    fn kill_orphans(&self) {
        for service in SIM_SERVICES {
            for pid in self.processes_of(service) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.stop();
        self.kill_orphans();
    }
}

/// Merge `patch` into `base`: tables recursively, everything else replaced.
fn merge(base: &mut toml::Table, patch: toml::Table) {
    for (key, value) in patch {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(p)) => merge(b, p),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

/// Every live process whose argv[0] is `svcos`, with its argv (zombies excluded).
pub fn list_svcos_processes() -> Vec<(u32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
            if state == "Z" || state == "X" {
                return None;
            }
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            let prog = Path::new(argv.first()?).file_name()?.to_str()?.to_string();
            (prog == "svcos").then_some((pid, argv))
        })
        .collect()
}
