//! The supervisor's core: one task owns every service's state and is the only thing that
//! starts, signals or forgets a process.
//!
//! Everything else talks to it by message: the control socket and D-Bus send [`Command`]s
//! through a [`Handle`]; per-process watcher tasks send internal events (exited, serving,
//! timers). Each event carries the epoch it was scheduled in, so a late timer or a health answer
//! from a previous run can never act on the current one.
//!
//! Commands and the states they are allowed in:
//! - `List`: always.
//! - `Restart`: any state; a live process is stopped (TERM, grace, KILL) and started again.
//!   Answers once the new process is SERVING.
//! - `Stop`: any state; answers once no process is left. The service stays stopped.
//! - `Start`: when stopped or failed (clears the restart history); a no-op when already up.
//!   Answers once SERVING.
//!
//! Exits are judged by [`policy::decide`]; the manager carries the decision out: a backoff
//! timer, a rest-for-one restart of the dependants, or a reboot ([`RebootAction`]), recorded
//! first in the persisted reboot-loop guard ([`RebootGuard`]).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use serde::{Deserialize, Serialize};
use svcos_common::config::SupervisorConfig;
use svcos_common::{Layout, ServiceName, Shutdown, fsutil, ipc};

use crate::child::{self, Credentials, SpawnSpec};
use crate::logs;
use crate::notify;
use crate::policy::{self, Decision, ExitEvent, ExitKind, History, Level};
use crate::procfs::{self, ProcessId};

/// How long boot waits for one service to report SERVING before it moves on to the next.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest pause between two health probes of a starting service: a refused connect costs
/// microseconds, and every millisecond here is restart latency.
const HEALTH_POLL_CAP: Duration = Duration::from_millis(10);
/// Deadline of one health probe.
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long to wait for a SIGKILLed process to be gone before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Lifecycle state of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Started (or adopted), not yet SERVING.
    Starting,
    /// SERVING.
    Running,
    /// Exited; waiting for the backoff delay before the next start.
    Backoff,
    /// Termination signal sent; waiting for it to exit.
    Stopping,
    /// Not running and not going to be restarted on its own.
    Stopped,
    /// Given up on (bad config or too many restarts).
    Failed,
}

impl State {
    /// The lowercase name used by ctl, JSON and D-Bus.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Backoff => "backoff",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
            State::Failed => "failed",
        }
    }
}

/// A snapshot of one service for ctl, D-Bus and the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// Service name.
    pub name: ServiceName,
    /// Lifecycle state.
    pub state: State,
    /// Pid of the current process, if any.
    pub pid: Option<u32>,
    /// Restarts (automatic and requested), persisted across supervisor restarts
    /// ([`RestartCounts`]).
    pub restarts: u32,
    /// Seconds the current process has been running (0 without one).
    pub uptime_s: u64,
    /// How the previous process ended, if one did.
    pub last_exit: Option<String>,
    /// Delay of the latest automatic restart (0 until one happened, or after a stable run).
    pub backoff_ms: u64,
    /// Rung of the escalation ladder it is on.
    pub escalation: Level,
    /// Automatic restarts inside the current intensity window.
    pub recent_restarts: u32,
}

/// A state transition, broadcast to D-Bus and anyone else listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// Which service.
    pub service: ServiceName,
    /// Its new state.
    pub state: State,
    /// Its current pid, if any.
    pub pid: Option<u32>,
}

/// Why a control command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The name is not a service this supervisor manages.
    #[error("unknown service {0:?}")]
    UnknownService(String),
    /// The service could not be brought up.
    #[error("{service} failed: {reason}")]
    Failed {
        /// The service.
        service: ServiceName,
        /// Why.
        reason: String,
    },
    /// A later command (e.g. a stop) overtook this one.
    #[error("{service}: superseded by a later command")]
    Superseded {
        /// The service.
        service: ServiceName,
    },
    /// The supervisor is stopping or gone.
    #[error("the supervisor is shutting down")]
    ShuttingDown,
    /// The command did not complete in time.
    #[error("{0}: timed out")]
    Timeout(String),
}

type Reply = oneshot::Sender<Result<ServiceInfo, ControlError>>;

/// A request to the manager task.
#[derive(Debug)]
pub enum Command {
    /// Snapshot every service, in boot order.
    List(oneshot::Sender<Vec<ServiceInfo>>),
    /// Stop the service if it runs, then start it.
    Restart(ServiceName, Reply),
    /// Stop the service and keep it stopped.
    Stop(ServiceName, Reply),
    /// Start a stopped or failed service.
    Start(ServiceName, Reply),
    /// Restart the whole stack like a reboot (reverse-order stop, boot-order start, no crash
    /// counted); answered with the services in boot order once it is scheduled.
    RestartStack(oneshot::Sender<Vec<ServiceName>>),
}

/// How the control plane reaches the manager.
#[derive(Debug, Clone)]
pub struct Handle {
    commands: mpsc::Sender<Command>,
    changes: broadcast::Sender<StateChange>,
    ready: watch::Receiver<bool>,
    services: Vec<ServiceName>,
    op_timeout: Duration,
}

impl Handle {
    /// Every service in boot order.
    pub async fn list(&self) -> Result<Vec<ServiceInfo>, ControlError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::List(tx))
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        rx.await.map_err(|_| ControlError::ShuttingDown)
    }

    /// Resolve a name to a managed service.
    pub fn service(&self, name: &str) -> Result<ServiceName, ControlError> {
        name.parse::<ServiceName>()
            .ok()
            .filter(|s| self.services.contains(s))
            .ok_or_else(|| ControlError::UnknownService(name.to_string()))
    }

    async fn call(
        &self,
        name: &str,
        make: fn(ServiceName, Reply) -> Command,
    ) -> Result<ServiceInfo, ControlError> {
        let service = self.service(name)?;
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(service, tx))
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        match tokio::time::timeout(self.op_timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ControlError::ShuttingDown),
            Err(_) => Err(ControlError::Timeout(service.to_string())),
        }
    }

    /// Restart a service; resolves when the new process is SERVING.
    pub async fn restart(&self, name: &str) -> Result<ServiceInfo, ControlError> {
        self.call(name, Command::Restart).await
    }

    /// Stop a service; resolves when its process is gone.
    pub async fn stop(&self, name: &str) -> Result<ServiceInfo, ControlError> {
        self.call(name, Command::Stop).await
    }

    /// Start a stopped or failed service; resolves when it is SERVING.
    pub async fn start(&self, name: &str) -> Result<ServiceInfo, ControlError> {
        self.call(name, Command::Start).await
    }

    /// Restart the whole stack as a reboot does; resolves once it is under way, with the
    /// services in boot order (the caller may be one of them).
    pub async fn restart_stack(&self) -> Result<Vec<ServiceName>, ControlError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::RestartStack(tx))
            .await
            .map_err(|_| ControlError::ShuttingDown)?;
        rx.await.map_err(|_| ControlError::ShuttingDown)
    }

    /// Receive every state change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<StateChange> {
        self.changes.subscribe()
    }

    /// Becomes true once boot has gone through every service.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }
}

/// What "reboot" means for this instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootAction {
    /// Ask systemd over the system bus to start `reboot.target` (the image). The failing
    /// service also gets a slow restart scheduled, in case the reboot never comes.
    Systemd,
    /// Stop every service in reverse boot order and boot the whole stack again, simulated
    /// board included, with every restart history cleared (the sim: a testable reboot).
    RestartStack,
}

/// What the manager needs to know about this instance.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sockets, pidfiles, log FIFOs.
    pub layout: Layout,
    /// Managed services in boot order.
    pub services: Vec<ServiceName>,
    /// `--dir` passed to children in the sim; `None` in production.
    pub sim_dir: Option<PathBuf>,
    /// Restart policies.
    pub policies: SupervisorConfig,
    /// Switch each child to its own system user (production as root).
    pub drop_privileges: bool,
    /// How escalation reboots.
    pub reboot: RebootAction,
    /// The descriptor store, cleared by a stack restart.
    pub fd_store: Option<std::sync::Arc<crate::fdstore::FdStore>>,
}

/// File of the reboot-loop guard, in the supervisor's state directory (it must survive reboots).
pub const REBOOT_GUARD_FILE: &str = "reboots.json";

/// The persisted reboot-loop guard: when escalation rebooted, in unix seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootGuard {
    /// Unix seconds of each escalation reboot, oldest first (pruned to the window).
    pub reboots: Vec<i64>,
}

impl RebootGuard {
    /// Where the guard lives for `layout`.
    pub fn path(layout: &Layout) -> PathBuf {
        layout
            .service_state_dir(ServiceName::Supervisor)
            .join(REBOOT_GUARD_FILE)
    }

    /// Load; a missing file is an empty guard, and a damaged one too (moved aside by
    /// [`svcos_common::statefile`]): refusing every reboot for a corrupt file would turn the
    /// guard into a trap.
    pub fn load(path: &std::path::Path) -> RebootGuard {
        svcos_common::statefile::load_json(path).unwrap_or_default()
    }

    /// Record a reboot at `now_s`, forget those older than `window_s`, and save atomically.
    pub fn record(&mut self, path: &std::path::Path, now_s: i64, window_s: u64) {
        let window = i64::try_from(window_s).unwrap_or(i64::MAX);
        self.reboots
            .retain(|t| now_s.saturating_sub(*t) < window && *t <= now_s);
        self.reboots.push(now_s);
        let bytes = serde_json::to_vec(self).expect("guard serialises");
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = fsutil::atomic_write(path, &bytes, 0o600) {
            tracing::warn!(path = %path.display(), error = %e, "reboot guard not saved");
        }
    }
}

/// File of the restart counters, in the supervisor's state directory.
pub const RESTART_COUNTS_FILE: &str = "restarts.json";

/// Restarts per service since the state directory was made (Prometheus' restart counters):
/// persisted so that a restarted supervisor, which re-adopts the running services, goes on
/// counting instead of starting over at 0 (a counter reset a dashboard would misread).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartCounts {
    /// Service name → restarts.
    pub restarts: std::collections::BTreeMap<String, u32>,
}

impl RestartCounts {
    /// Where the counters live for `layout`.
    pub fn path(layout: &Layout) -> PathBuf {
        layout
            .service_state_dir(ServiceName::Supervisor)
            .join(RESTART_COUNTS_FILE)
    }

    /// Load; a missing file is all zeros, and so is a damaged one (moved aside with a warning
    /// by [`svcos_common::statefile`]): the counters are worth less than a supervisor that starts.
    pub fn load(path: &std::path::Path) -> RestartCounts {
        svcos_common::statefile::load_json(path).unwrap_or_default()
    }

    /// The count of `service`.
    pub fn get(&self, service: ServiceName) -> u32 {
        self.restarts.get(service.as_str()).copied().unwrap_or(0)
    }

    /// Set the count of `service` and save atomically. A failed save is logged and the count
    /// kept in memory: losing a count on the next supervisor restart beats a crash.
    pub fn store(&mut self, path: &std::path::Path, service: ServiceName, count: u32) {
        self.restarts.insert(service.as_str().to_string(), count);
        let bytes = serde_json::to_vec(self).expect("counters serialise");
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = fsutil::atomic_write(path, &bytes, 0o600) {
            tracing::warn!(path = %path.display(), error = %e, "restart counters not saved");
        }
    }
}

/// What to do once a stopping process has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterStop {
    StayStopped,
    StartAgain,
}

/// Which state a waiting command is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitFor {
    Running,
    Stopped,
}

#[derive(Debug)]
enum Event {
    Exited {
        service: ServiceName,
        process: ProcessId,
        kind: ExitKind,
    },
    Serving {
        service: ServiceName,
        epoch: u64,
    },
    RestartDue {
        service: ServiceName,
        epoch: u64,
    },
    GraceOver {
        service: ServiceName,
        epoch: u64,
    },
    StartTimeout {
        service: ServiceName,
        step: usize,
    },
}

#[derive(Debug)]
struct Slot {
    service: ServiceName,
    state: State,
    process: Option<ProcessId>,
    /// Whether the process is our child (we reap it and learn its exit status).
    own_child: bool,
    /// Bumped whenever a timer or probe is scheduled for a new phase.
    epoch: u64,
    /// Monotonic start of the current process.
    started_at: Duration,
    /// Stops the health probe of the current process.
    run_cancel: Shutdown,
    history: History,
    restarts: u32,
    last_exit: Option<String>,
    failure: Option<String>,
    after_stop: AfterStop,
    waiters: Vec<(WaitFor, Reply)>,
    log: Option<OwnedFd>,
}

/// The manager task's state.
struct Manager {
    settings: Settings,
    slots: Vec<Slot>,
    events_tx: mpsc::UnboundedSender<Event>,
    changes: broadcast::Sender<StateChange>,
    ready_tx: watch::Sender<bool>,
    boot_queue: VecDeque<ServiceName>,
    booting: Option<ServiceName>,
    /// Counts boot steps, so a start timeout only ever ends the step it was set for.
    boot_step: usize,
    /// Set by a reboot decision under [`RebootAction::RestartStack`] or a requested stack
    /// restart; acted on by the run loop.
    stack_restart_pending: bool,
    /// A stack restart is booting; when its boot queue empties, the services not running are
    /// reported.
    stack_restart_booting: bool,
    /// The persisted restart counters (the slots hold the same numbers).
    restart_counts: RestartCounts,
}

/// Start the manager task: it adopts or starts every service in boot order, supervises them
/// until `shutdown`, then stops them in reverse order. The returned future resolves when all
/// services are down.
pub fn start(settings: Settings, shutdown: Shutdown) -> (Handle, tokio::task::JoinHandle<()>) {
    let (commands, command_rx) = mpsc::channel(64);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (changes, _) = broadcast::channel(256);
    let (ready_tx, ready) = watch::channel(false);
    let op_timeout = settings
        .services
        .iter()
        .map(|s| settings.policies.policy(s.as_str()).grace_ms)
        .max()
        .map(|g| Duration::from_millis(g) + KILL_WAIT + START_TIMEOUT)
        .unwrap_or(START_TIMEOUT);
    let handle = Handle {
        commands,
        changes: changes.clone(),
        ready,
        services: settings.services.clone(),
        op_timeout,
    };
    let restart_counts = RestartCounts::load(&RestartCounts::path(&settings.layout));
    let slots = settings
        .services
        .iter()
        .map(|&service| Slot {
            service,
            state: State::Stopped,
            process: None,
            own_child: false,
            epoch: 0,
            started_at: Duration::ZERO,
            run_cancel: Shutdown::new(),
            history: History::default(),
            restarts: restart_counts.get(service),
            last_exit: None,
            failure: None,
            after_stop: AfterStop::StayStopped,
            waiters: Vec::new(),
            log: None,
        })
        .collect();
    let manager = Manager {
        boot_queue: settings.services.iter().copied().collect(),
        settings,
        slots,
        events_tx,
        changes,
        ready_tx,
        booting: None,
        boot_step: 0,
        stack_restart_pending: false,
        stack_restart_booting: false,
        restart_counts,
    };
    let task = tokio::spawn(manager.run(command_rx, events_rx, shutdown));
    (handle, task)
}

impl Manager {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut events: mpsc::UnboundedReceiver<Event>,
        shutdown: Shutdown,
    ) {
        self.open_logs();
        self.advance_boot();
        loop {
            tokio::select! {
                Some(ev) = events.recv() => self.on_event(ev),
                Some(cmd) = commands.recv() => self.on_command(cmd),
                _ = shutdown.wait() => break,
            }
            if std::mem::take(&mut self.stack_restart_pending) {
                self.restart_stack(&mut events).await;
            }
        }
        drop(commands);
        self.shutdown_all(&mut events).await;
    }

    fn now(&self) -> Duration {
        procfs::since_boot()
    }

    fn idx(&self, service: ServiceName) -> usize {
        self.slots
            .iter()
            .position(|s| s.service == service)
            .expect("only managed services reach the manager")
    }

    fn info(&self, i: usize) -> ServiceInfo {
        let slot = &self.slots[i];
        let uptime_s = match slot.process {
            Some(_) if matches!(slot.state, State::Running | State::Starting) => {
                self.now().saturating_sub(slot.started_at).as_secs()
            }
            _ => 0,
        };
        ServiceInfo {
            name: slot.service,
            state: slot.state,
            pid: slot.process.map(|p| p.pid),
            restarts: slot.restarts,
            uptime_s,
            last_exit: slot.last_exit.clone(),
            backoff_ms: slot.history.last_delay.as_millis() as u64,
            escalation: slot.history.level,
            recent_restarts: slot.history.recent(
                self.now(),
                Duration::from_secs(
                    self.settings
                        .policies
                        .policy(slot.service.as_str())
                        .intensity_window_s,
                ),
            ),
        }
    }

    /// Open every log FIFO once and forward it for the supervisor's whole life.
    fn open_logs(&mut self) {
        for slot in &mut self.slots {
            let path = logs::fifo_path(&self.settings.layout.runtime_dir, slot.service);
            match logs::open_fifo(&path) {
                Ok(fd) => {
                    match fd.try_clone() {
                        Ok(reader) => {
                            let recent =
                                logs::recent_path(&self.settings.layout.runtime_dir, slot.service);
                            tokio::spawn(logs::forward(slot.service, reader, recent));
                        }
                        Err(e) => {
                            tracing::warn!(service = %slot.service, error = %e, "cannot read log fifo")
                        }
                    }
                    slot.log = Some(fd);
                }
                Err(e) => {
                    tracing::warn!(service = %slot.service, error = %e, "no log capture");
                }
            }
        }
    }

    fn set_state(&mut self, i: usize, state: State) {
        let slot = &mut self.slots[i];
        if slot.state == state {
            return;
        }
        slot.state = state;
        let change = StateChange {
            service: slot.service,
            state,
            pid: slot.process.map(|p| p.pid),
        };
        tracing::debug!(service = %change.service, state = state.as_str(), "state");
        let _ = self.changes.send(change);
        self.answer_waiters(i);
        self.update_status();
        if self.booting == Some(self.slots[i].service)
            && matches!(state, State::Running | State::Failed | State::Stopped)
        {
            self.booting = None;
            self.advance_boot();
        }
    }

    fn update_status(&self) {
        let running = self
            .slots
            .iter()
            .filter(|s| s.state == State::Running)
            .count();
        notify::status(&format!("{running}/{} services running", self.slots.len()));
    }

    fn answer_waiters(&mut self, i: usize) {
        let state = self.slots[i].state;
        let waiters = std::mem::take(&mut self.slots[i].waiters);
        let info = self.info(i);
        let service = self.slots[i].service;
        let mut keep = Vec::new();
        for (want, reply) in waiters {
            let outcome = match (want, state) {
                (WaitFor::Running, State::Running) | (WaitFor::Stopped, State::Stopped) => {
                    Some(Ok(info.clone()))
                }
                (WaitFor::Running, State::Failed) => Some(Err(ControlError::Failed {
                    service,
                    reason: self.slots[i]
                        .failure
                        .clone()
                        .unwrap_or_else(|| "failed".into()),
                })),
                (WaitFor::Running, State::Stopped)
                    if self.slots[i].after_stop == AfterStop::StayStopped =>
                {
                    Some(Err(ControlError::Failed {
                        service,
                        reason: format!(
                            "stopped before serving ({})",
                            self.slots[i].last_exit.as_deref().unwrap_or("no exit")
                        ),
                    }))
                }
                (WaitFor::Stopped, State::Failed) => Some(Ok(info.clone())),
                _ => None,
            };
            match outcome {
                Some(r) => {
                    let _ = reply.send(r);
                }
                None => keep.push((want, reply)),
            }
        }
        self.slots[i].waiters = keep;
    }

    fn advance_boot(&mut self) {
        while self.booting.is_none() {
            let Some(service) = self.boot_queue.pop_front() else {
                if std::mem::take(&mut self.stack_restart_booting) {
                    self.report_stack_restart();
                }
                if !*self.ready_tx.borrow() {
                    self.ready_tx.send_replace(true);
                    tracing::info!("boot complete");
                    notify::ready();
                    self.update_status();
                }
                return;
            };
            let i = self.idx(service);
            if !self.adopt(i) {
                self.spawn(i);
            }
            if self.slots[i].state == State::Starting {
                self.booting = Some(service);
                self.boot_step += 1;
                let step = self.boot_step;
                self.schedule(START_TIMEOUT, Event::StartTimeout { service, step });
            }
        }
    }

    fn schedule(&self, after: Duration, event: Event) {
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(event);
        });
    }

    /// Take over a process a previous supervisor left running, if its pidfile names a live
    /// `svcos <service>` with the recorded start time.
    fn adopt(&mut self, i: usize) -> bool {
        let service = self.slots[i].service;
        let path = self.settings.layout.pidfile(service);
        let from_pidfile = match procfs::read_pidfile(&path) {
            Ok(id) => id.filter(|id| id.is_alive_as(service.as_str())),
            Err(e) => {
                tracing::warn!(%service, error = %e, "ignoring pidfile");
                None
            }
        };
        let id = match from_pidfile {
            Some(id) => id,
            None => {
                procfs::remove_pidfile(&path);
                // No usable pidfile: a previous supervisor may have died between fork and
                // pidfile. Look for our exact command line so no duplicate is started.
                let argv = procfs::service_argv(service.as_str(), self.settings.sim_dir.as_deref());
                let mut found = procfs::find_processes(&argv);
                let Some(newest) = found.pop() else {
                    return false;
                };
                // The newest bound the socket last; older ones are unreachable duplicates.
                for stale in found {
                    tracing::warn!(%service, pid = stale.pid, "stopping an unreachable duplicate");
                    let _ =
                        nix::sys::signal::kill(Pid::from_raw(stale.pid as i32), Signal::SIGKILL);
                }
                if let Err(e) = procfs::write_pidfile(&path, newest) {
                    tracing::warn!(%service, error = %e, "pidfile not written");
                }
                newest
            }
        };
        let now = self.now();
        let started_at = id.started_since_boot().unwrap_or(now);
        tracing::info!(%service, pid = id.pid, age_s = now.saturating_sub(started_at).as_secs(), "re-adopted running process");
        self.track(i, id, false, started_at);
        true
    }

    /// Start a new process for slot `i`.
    fn spawn(&mut self, i: usize) {
        let service = self.slots[i].service;
        let credentials = if self.settings.drop_privileges {
            match Credentials::for_service(service) {
                Ok(c) => Some(c),
                Err(e) => {
                    self.fail(i, e.to_string());
                    return;
                }
            }
        } else {
            None
        };
        let Some(log) = self.slots[i].log.as_ref() else {
            self.fail(i, "no log fifo".into());
            return;
        };
        let spec = SpawnSpec {
            service,
            sim_dir: self.settings.sim_dir.clone(),
            credentials,
        };
        let pid = match child::spawn(&spec, log) {
            Ok(pid) => pid,
            Err(e) => {
                self.fail(i, e.to_string());
                return;
            }
        };
        // A child that died instantly is a zombie until reaped, so /proc still answers; if it
        // does not, the exit watcher reaps it by pid alone.
        let id = ProcessId::of(pid).unwrap_or(ProcessId {
            pid,
            start_ticks: 0,
        });
        if let Err(e) = procfs::write_pidfile(&self.settings.layout.pidfile(service), id) {
            tracing::warn!(%service, error = %e, "pidfile not written; a restarted supervisor will not re-adopt");
        }
        tracing::info!(%service, pid, "started");
        let now = self.now();
        self.track(i, id, true, now);
    }

    /// Watch a process (spawned or adopted): its exit, and its health until SERVING.
    fn track(&mut self, i: usize, id: ProcessId, own_child: bool, started_at: Duration) {
        let slot = &mut self.slots[i];
        slot.run_cancel.trigger();
        slot.run_cancel = Shutdown::new();
        slot.process = Some(id);
        slot.own_child = own_child;
        slot.started_at = started_at;
        slot.epoch += 1;
        slot.failure = None;
        let service = slot.service;
        let epoch = slot.epoch;
        let cancel = slot.run_cancel.clone();
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            let kind = procfs::wait_exit(id, own_child).await;
            let _ = tx.send(Event::Exited {
                service,
                process: id,
                kind,
            });
        });
        let tx = self.events_tx.clone();
        let layout = self.settings.layout.clone();
        tokio::spawn(async move {
            let mut backoff = ipc::Backoff::new(Duration::from_millis(2), HEALTH_POLL_CAP);
            loop {
                tokio::select! {
                    ok = ipc::check_health(&layout, service, HEALTH_PROBE_TIMEOUT) => {
                        if ok {
                            let _ = tx.send(Event::Serving { service, epoch });
                            return;
                        }
                    }
                    _ = cancel.wait() => return,
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = cancel.wait() => return,
                }
            }
        });
        // Force a transition event even when re-tracking from Starting.
        if self.slots[i].state == State::Starting {
            self.slots[i].state = State::Backoff;
        }
        self.set_state(i, State::Starting);
    }

    fn fail(&mut self, i: usize, reason: String) {
        tracing::error!(service = %self.slots[i].service, %reason, "service failed; not restarting it");
        self.slots[i].failure = Some(reason);
        self.set_state(i, State::Failed);
    }

    fn signal(&self, i: usize, signal: Signal) {
        let slot = &self.slots[i];
        let Some(id) = slot.process else { return };
        // Never signal a pid that now belongs to someone else.
        let same = procfs::start_ticks(id.pid).is_ok_and(|t| t == id.start_ticks)
            || (slot.own_child && id.start_ticks == 0);
        if same {
            // Each child leads its own process group: signal the group so helpers it started
            // go with it.
            let _ = killpg(Pid::from_raw(id.pid as i32), signal);
        }
    }

    /// Ask a service to stop; what follows its exit is `after`.
    fn begin_stop(&mut self, i: usize, after: AfterStop) {
        self.slots[i].after_stop = after;
        match self.slots[i].state {
            State::Stopping => {}
            State::Starting | State::Running if self.slots[i].process.is_some() => {
                let service = self.slots[i].service;
                tracing::info!(%service, "stopping");
                self.slots[i].run_cancel.trigger();
                self.slots[i].epoch += 1;
                let epoch = self.slots[i].epoch;
                self.signal(i, Signal::SIGTERM);
                let grace = self.settings.policies.policy(service.as_str()).grace_ms;
                self.schedule(
                    Duration::from_millis(grace),
                    Event::GraceOver { service, epoch },
                );
                self.set_state(i, State::Stopping);
            }
            _ => {
                // Nothing runs (backoff, stopped, failed): cancel any pending restart.
                self.slots[i].epoch += 1;
                self.set_state(i, State::Stopped);
                // Already stopped means no transition: answer a waiting Stop here.
                self.answer_waiters(i);
                self.after_stopped(i);
            }
        }
    }

    fn after_stopped(&mut self, i: usize) {
        if self.slots[i].after_stop == AfterStop::StartAgain {
            self.slots[i].after_stop = AfterStop::StayStopped;
            self.count_restart(i);
            self.spawn(i);
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::List(reply) => {
                let all = (0..self.slots.len()).map(|i| self.info(i)).collect();
                let _ = reply.send(all);
            }
            Command::Restart(service, reply) => {
                let i = self.idx(service);
                tracing::info!(%service, "restart requested");
                self.supersede(i);
                self.slots[i].waiters.push((WaitFor::Running, reply));
                if matches!(self.slots[i].state, State::Failed | State::Stopped) {
                    self.slots[i].history.clear();
                }
                self.begin_stop(i, AfterStop::StartAgain);
            }
            Command::Stop(service, reply) => {
                let i = self.idx(service);
                tracing::info!(%service, "stop requested");
                self.supersede(i);
                self.slots[i].waiters.push((WaitFor::Stopped, reply));
                self.begin_stop(i, AfterStop::StayStopped);
            }
            Command::RestartStack(reply) => {
                tracing::warn!("whole-stack restart requested");
                self.stack_restart_pending = true;
                let _ = reply.send(self.settings.services.clone());
            }
            Command::Start(service, reply) => {
                let i = self.idx(service);
                tracing::info!(%service, "start requested");
                match self.slots[i].state {
                    State::Running => {
                        let _ = reply.send(Ok(self.info(i)));
                    }
                    State::Starting => self.slots[i].waiters.push((WaitFor::Running, reply)),
                    State::Stopping => {
                        self.supersede(i);
                        self.slots[i].waiters.push((WaitFor::Running, reply));
                        self.slots[i].after_stop = AfterStop::StartAgain;
                    }
                    State::Backoff | State::Stopped | State::Failed => {
                        self.slots[i].waiters.push((WaitFor::Running, reply));
                        self.slots[i].history.clear();
                        self.slots[i].epoch += 1;
                        self.spawn(i);
                    }
                }
            }
        }
    }

    /// Fail commands still waiting on a service that a new command redirects.
    fn supersede(&mut self, i: usize) {
        let service = self.slots[i].service;
        for (_, reply) in self.slots[i].waiters.drain(..) {
            let _ = reply.send(Err(ControlError::Superseded { service }));
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Exited {
                service,
                process,
                kind,
            } => self.on_exit(service, process, kind),
            Event::Serving { service, epoch } => {
                let i = self.idx(service);
                if self.slots[i].epoch == epoch && self.slots[i].state == State::Starting {
                    tracing::info!(%service, pid = ?self.slots[i].process.map(|p| p.pid), "serving");
                    self.set_state(i, State::Running);
                }
            }
            Event::RestartDue { service, epoch } => {
                let i = self.idx(service);
                if self.slots[i].epoch == epoch && self.slots[i].state == State::Backoff {
                    self.spawn(i);
                }
            }
            Event::GraceOver { service, epoch } => {
                let i = self.idx(service);
                if self.slots[i].epoch == epoch && self.slots[i].state == State::Stopping {
                    tracing::warn!(%service, "grace period over; sending SIGKILL");
                    self.signal(i, Signal::SIGKILL);
                }
            }
            Event::StartTimeout { service, step } => {
                if self.booting == Some(service) && self.boot_step == step {
                    tracing::warn!(%service, "not serving yet; booting the next services anyway");
                    self.booting = None;
                    self.advance_boot();
                }
            }
        }
    }

    fn on_exit(&mut self, service: ServiceName, process: ProcessId, kind: ExitKind) {
        let i = self.idx(service);
        if self.slots[i].process != Some(process) {
            return;
        }
        let slot = &mut self.slots[i];
        slot.process = None;
        slot.run_cancel.trigger();
        slot.last_exit = Some(kind.to_string());
        procfs::remove_pidfile(&self.settings.layout.pidfile(service));
        if slot.state == State::Stopping {
            tracing::info!(%service, pid = process.pid, exit = %kind, "stopped");
            self.set_state(i, State::Stopped);
            self.after_stopped(i);
            return;
        }
        let now = self.now();
        let policy = self.settings.policies.effective_policy(service.as_str());
        let escalation = self.settings.policies.escalation.clone();
        let guard_path = RebootGuard::path(&self.settings.layout);
        let guard = RebootGuard::load(&guard_path);
        let now_s = svcos_common::time::unix_ms() / 1000;
        let reboot_allowed = policy::reboot_allowed(
            &guard.reboots,
            now_s,
            escalation.reboot_max,
            escalation.reboot_window_s,
        );
        let exit = ExitEvent {
            kind,
            started_at: self.slots[i].started_at,
        };
        let decision = policy::decide(
            &policy,
            &escalation,
            &exit,
            &self.slots[i].history,
            now,
            reboot_allowed,
        );
        let window = Duration::from_secs(policy.intensity_window_s);
        self.slots[i].history.record(&decision, now, window);
        match decision {
            Decision::Restart {
                delay,
                level,
                dependants,
                ..
            } => {
                tracing::warn!(%service, pid = process.pid, exit = %kind, delay_ms = delay.as_millis() as u64, escalation = level.as_str(), "exited; restarting");
                self.schedule_restart(i, delay);
                if dependants {
                    self.restart_dependants(i);
                }
            }
            Decision::Reboot { .. } => {
                let mut guard = guard;
                guard.record(&guard_path, now_s, escalation.reboot_window_s);
                match self.settings.reboot {
                    RebootAction::Systemd => {
                        tracing::error!(%service, exit = %kind, "keeps failing after its dependants were restarted; rebooting through systemd");
                        request_systemd_reboot();
                        // Should the reboot not come, keep trying slowly: never abandon mining.
                        self.schedule_restart(i, Duration::from_millis(escalation.slow_retry_ms));
                    }
                    RebootAction::RestartStack => {
                        tracing::error!(%service, exit = %kind, "keeps failing after its dependants were restarted; restarting the whole stack (the sim's reboot)");
                        self.count_restart(i);
                        self.slots[i].epoch += 1;
                        self.set_state(i, State::Backoff);
                        self.stack_restart_pending = true;
                    }
                }
            }
            Decision::GiveUp(reason) => {
                tracing::warn!(%service, pid = process.pid, exit = %kind, "exited");
                self.fail(i, reason.to_string());
            }
            Decision::StayStopped => {
                tracing::info!(%service, pid = process.pid, exit = %kind, "exited; strategy keeps it stopped");
                if kind.is_success() {
                    self.set_state(i, State::Stopped);
                } else {
                    self.slots[i].failure = Some(kind.to_string());
                    self.set_state(i, State::Failed);
                }
            }
        }
    }

    /// One more restart of slot `i`, saved at once (a supervisor killed next still knows it).
    fn count_restart(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.restarts = slot.restarts.saturating_add(1);
        let path = RestartCounts::path(&self.settings.layout);
        self.restart_counts
            .store(&path, slot.service, slot.restarts);
    }

    /// Enter backoff and start slot `i` again after `delay`.
    fn schedule_restart(&mut self, i: usize, delay: Duration) {
        let service = self.slots[i].service;
        self.count_restart(i);
        let slot = &mut self.slots[i];
        slot.epoch += 1;
        let epoch = slot.epoch;
        self.set_state(i, State::Backoff);
        self.schedule(delay, Event::RestartDue { service, epoch });
    }

    /// Rest-for-one: restart every service after slot `i` in boot order that has a process
    /// (they may hold state derived from the failing one). Their own histories are untouched.
    fn restart_dependants(&mut self, i: usize) {
        let failing = self.slots[i].service;
        for j in i + 1..self.slots.len() {
            if matches!(self.slots[j].state, State::Starting | State::Running) {
                tracing::warn!(service = %self.slots[j].service, %failing, "restarting as a dependant of a failing service");
                self.supersede(j);
                self.begin_stop(j, AfterStop::StartAgain);
            }
        }
    }

    /// Say which services a whole-stack restart did not bring back (they go on under their
    /// restart policy; the rest were started regardless).
    fn report_stack_restart(&self) {
        let down: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.state != State::Running)
            .map(|s| {
                let why = s
                    .failure
                    .as_deref()
                    .or(s.last_exit.as_deref())
                    .unwrap_or("");
                format!(
                    "{} ({}{}{why})",
                    s.service,
                    s.state.as_str(),
                    if why.is_empty() { "" } else { ": " }
                )
            })
            .collect();
        if down.is_empty() {
            tracing::info!(
                services = self.slots.len(),
                "whole-stack restart done: every service is running"
            );
        } else {
            tracing::error!(not_running = %down.join(", "), "whole-stack restart done, but not every service came back");
        }
    }

    /// The sim's reboot, and a requested whole-stack restart: everything down in reverse boot
    /// order, histories cleared, boot again. Stopping hw-agent before hw-sim keeps it from seeing
    /// its UARTs vanish (which it treats as a crash).
    async fn restart_stack(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) {
        tracing::warn!("restarting the whole stack");
        // Nothing may boot while everything stops.
        self.boot_queue.clear();
        self.booting = None;
        self.stop_all(events).await;
        if let Some(store) = &self.settings.fd_store {
            store.clear();
        }
        for slot in &mut self.slots {
            slot.history.clear();
            slot.epoch += 1;
            slot.after_stop = AfterStop::StayStopped;
        }
        self.boot_queue = self.settings.services.iter().copied().collect();
        self.booting = None;
        self.stack_restart_booting = true;
        self.advance_boot();
    }

    /// Stop everything in reverse boot order, each with its grace period, then SIGKILL.
    async fn shutdown_all(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) {
        tracing::info!("shutting down all services in reverse boot order");
        notify::stopping();
        self.stop_all(events).await;
    }

    /// Stop every service in reverse boot order; none is restarted.
    async fn stop_all(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) {
        for i in (0..self.slots.len()).rev() {
            let service = self.slots[i].service;
            self.slots[i].run_cancel.trigger();
            self.supersede(i);
            let Some(id) = self.slots[i].process else {
                self.slots[i].epoch += 1;
                self.set_state(i, State::Stopped);
                continue;
            };
            tracing::info!(%service, pid = id.pid, "stopping");
            self.set_state(i, State::Stopping);
            self.signal(i, Signal::SIGTERM);
            let grace =
                Duration::from_millis(self.settings.policies.policy(service.as_str()).grace_ms);
            if !self.wait_gone(i, events, grace).await {
                tracing::warn!(%service, pid = id.pid, "grace period over; sending SIGKILL");
                self.signal(i, Signal::SIGKILL);
                if !self.wait_gone(i, events, KILL_WAIT).await {
                    tracing::error!(%service, pid = id.pid, "still alive after SIGKILL; leaving it");
                    continue;
                }
            }
            tracing::info!(%service, pid = id.pid, exit = self.slots[i].last_exit.as_deref().unwrap_or("?"), "stopped");
            self.set_state(i, State::Stopped);
        }
        tracing::info!("all services stopped");
    }

    /// Wait until slot `i` has no process, handling other exits meanwhile (none is restarted).
    async fn wait_gone(
        &mut self,
        i: usize,
        events: &mut mpsc::UnboundedReceiver<Event>,
        within: Duration,
    ) -> bool {
        let deadline = tokio::time::sleep(within);
        tokio::pin!(deadline);
        while self.slots[i].process.is_some() {
            tokio::select! {
                ev = events.recv() => {
                    let Some(Event::Exited { service, process, kind }) = ev else { continue };
                    let j = self.idx(service);
                    if self.slots[j].process == Some(process) {
                        self.slots[j].process = None;
                        self.slots[j].last_exit = Some(kind.to_string());
                        procfs::remove_pidfile(&self.settings.layout.pidfile(service));
                        if j != i {
                            self.set_state(j, State::Stopped);
                        }
                    }
                }
                _ = &mut deadline => return false,
            }
        }
        true
    }
}

/// Ask systemd for a reboot (`StartUnit("reboot.target", "replace-irreversibly")` on the system
/// bus), in the background: the manager never waits on D-Bus. systemd then stops this unit like
/// any other (every service in reverse boot order) before the board resets.
fn request_systemd_reboot() {
    tokio::spawn(async {
        let result = async {
            let conn = zbus::Connection::system().await?;
            conn.call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "StartUnit",
                &("reboot.target", "replace-irreversibly"),
            )
            .await?;
            zbus::Result::Ok(())
        }
        .await;
        match result {
            Ok(()) => tracing::warn!("reboot requested from systemd"),
            Err(e) => {
                tracing::error!(error = %e, "systemd did not accept the reboot; retrying the service slowly instead")
            }
        }
    });
}

#[cfg(test)]
mod reboot_guard_tests {
    use super::*;

    #[test]
    fn restart_counts_survive_a_reload_and_a_damaged_file_is_moved_aside() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("supervisor").join(RESTART_COUNTS_FILE);
            let mut counts = RestartCounts::load(&path);
            assert_eq!(counts.get(ServiceName::Tuner), 0);
            counts.store(&path, ServiceName::Tuner, 3);
            counts.store(&path, ServiceName::Gateway, 1);
            let again = RestartCounts::load(&path);
            assert_eq!(again.get(ServiceName::Tuner), 3);
            assert_eq!(again.get(ServiceName::Gateway), 1);
            assert_eq!(again.get(ServiceName::HwAgent), 0);
            let bad = damage.write(&path);
            assert_eq!(
                RestartCounts::load(&path),
                RestartCounts::default(),
                "{damage:?}"
            );
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }

    #[test]
    fn a_damaged_guard_is_empty_and_moved_aside() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(REBOOT_GUARD_FILE);
            RebootGuard::default().record(&path, 1_000, 3_600);
            assert_eq!(RebootGuard::load(&path).reboots, [1_000]);
            let bad = damage.write(&path);
            assert_eq!(
                RebootGuard::load(&path),
                RebootGuard::default(),
                "{damage:?}"
            );
            assert_quarantined(&path, &bad, &format!("{damage:?}"));
        }
    }
}
