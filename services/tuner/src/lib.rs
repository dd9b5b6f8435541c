//! tuner: chooses frequencies and voltages toward a power or hashrate target, or the best
//! efficiency, and keeps what it found per board serial.
//!
//! It follows hw-agent's telemetry stream (with per-chip counters) and drives the chips only
//! through hw-agent's `SetFrequency` and `SetVoltage`, so mining never stops while it tunes. The
//! pieces, each without I/O where it can be:
//!
//! - [`search`]: the pure search step (stability from per-chip and per-chain HW error rates over
//!   a window, frequency fit to the target, voltage walk down to the lowest stable step, chip
//!   trims for weak silicon, efficiency levels).
//! - [`engine`]: the state machine (disabled, idle, tuning, tuned, backoff, error) with recorded
//!   transitions, settle and measurement windows, limits checked on every sample (temperature,
//!   PSU power), dynamic power scaling, time-of-use targets, resume of saved profiles.
//! - [`store`]: settings, tuned points per board serial and named profiles, written atomically.
//! - [`service`]: the gRPC face; [`Driver`]: the loop that feeds the engine and sends commands.
//! - [`power`]: the power governor (operator target, circuit and PSU caps, night mode, room
//!   thermostat, solar/off-grid following arbitrated into hw-agent's power target and sleep),
//!   served as `PowerService` on the same socket.
//! - [`history`]: telemetry, pool, share and audit history (1 s in memory, 1 min and 1 h in an
//!   embedded SQLite file written in batches), served as `HistoryService`.
//!
//! The clock is injected ([`svcos_common::time::Clock`]), and the hardware is a trait
//! ([`Hardware`]), so the whole loop is tested with a manual clock and a simulated board.

pub mod engine;
pub mod history;
pub mod model;
pub mod power;
pub mod profit;
pub mod search;
pub mod service;
pub mod store;

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::time::{Clock, SystemClock};
use svcos_common::{ServiceName, Shutdown, ipc};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{
    GetInventoryRequest, SetChainEnabledRequest, SetFrequencyRequest, SetVoltageRequest,
    StreamTelemetryRequest, Telemetry,
};
use svcos_proto::stratum::v1::StreamPoolsRequest;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::tuner::v1::history_service_server::HistoryServiceServer;
use svcos_proto::tuner::v1::power_service_server::PowerServiceServer;
use svcos_proto::tuner::v1::tuner_service_server::TunerServiceServer;
use tokio::net::UnixListener;
use tokio::sync::{Notify, watch};
use tonic::Status;
use tonic::transport::Channel;

use crate::engine::{Action, Engine};
use crate::model::BoardInfo;
use crate::store::Store;

/// What the tuner needs from the board's owner.
pub trait Hardware: Send + Sync + 'static {
    /// Serial, chains and nominal figures.
    fn inventory(&self) -> impl Future<Output = Result<BoardInfo, Status>> + Send;
    /// Send one command.
    fn execute(&self, action: Action) -> impl Future<Output = Result<(), Status>> + Send;
}

/// hw-agent over gRPC.
#[derive(Debug, Clone)]
pub struct HwAgent(pub HwAgentServiceClient<Channel>);

impl Hardware for HwAgent {
    async fn inventory(&self) -> Result<BoardInfo, Status> {
        let inv = self
            .0
            .clone()
            .get_inventory(GetInventoryRequest {})
            .await?
            .into_inner();
        Ok(BoardInfo {
            serial: inv.serial_number,
            chains: inv.chains.len() as u32,
            chips_per_chain: inv.chains.first().map_or(0, |c| c.chips_expected),
            nominal_power_watt: inv.nominal_power_watt,
            nominal_ths: inv.nominal_ghs / 1000.0,
        })
    }

    async fn execute(&self, action: Action) -> Result<(), Status> {
        let mut c = self.0.clone();
        match action {
            Action::SetVoltage(mv) => {
                c.set_voltage(SetVoltageRequest {
                    chain_id: None,
                    voltage_mv: mv,
                })
                .await?;
            }
            Action::SetChainEnabled { chain, enabled } => {
                c.set_chain_enabled(SetChainEnabledRequest {
                    chain_id: chain,
                    enabled,
                })
                .await?;
            }
            Action::SetFrequency { chain, chip, mhz } => {
                c.set_frequency(SetFrequencyRequest {
                    chain_id: Some(chain),
                    chip,
                    frequency_mhz: mhz,
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// The engine shared between the loop and the gRPC handlers.
#[derive(Debug, Clone)]
pub struct Shared {
    engine: Arc<Mutex<Engine>>,
    /// Rung by a handler that changed something, so the loop acts at once.
    pub wake: Arc<Notify>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
}

impl Shared {
    /// Share an engine.
    pub fn new(engine: Engine, clock: Arc<dyn Clock>) -> Shared {
        Shared {
            engine: Arc::new(Mutex::new(engine)),
            wake: Arc::new(Notify::new()),
            clock,
        }
    }

    /// Lock the engine (a panicked holder does not take the tuner down).
    pub fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The loop: telemetry in, commands out.
#[derive(Debug)]
pub struct Driver<H> {
    /// Engine and clock.
    pub shared: Shared,
    /// The board.
    pub hw: H,
    /// Latest telemetry (with chips).
    pub telemetry: watch::Receiver<Option<Telemetry>>,
}

impl<H: Hardware> Driver<H> {
    /// One step: learn the board if needed, tick the engine, send its commands in order (the
    /// first refusal stops the batch and puts the engine in `error`).
    pub async fn step(&self) {
        let known = self.shared.lock().limits().is_some();
        if !known && let Ok(board) = self.hw.inventory().await {
            self.shared.lock().attach(board);
        }
        let telemetry = self.telemetry.borrow().clone();
        let now = self.shared.clock.now_ms();
        let actions = self.shared.lock().tick(telemetry.as_ref(), now);
        for a in actions {
            if let Err(s) = self.hw.execute(a).await {
                tracing::warn!(action = ?a, error = %s.message(), "hw-agent refused");
                self.shared.lock().command_failed(a, s.message(), now);
                break;
            }
        }
    }

    /// Step every `interval` (or at once when woken) until `shutdown`.
    pub async fn run(self, interval: Duration, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wake = Arc::clone(&self.shared.wake);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = wake.notified() => {}
                _ = shutdown.wait() => return,
            }
            self.step().await;
        }
    }
}

/// Hand every new `[hardware].power_target_watt` the governor reads to the engine, and wake the
/// loop so the tuner re-plans at once rather than at its next tick.
pub async fn follow_operator_target(
    shared: Shared,
    mut target: watch::Receiver<f64>,
    shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            changed = target.changed() => if changed.is_err() { return },
            () = shutdown.wait() => return,
        }
        let watt = *target.borrow_and_update();
        match shared.lock().operator_target(watt) {
            Ok(true) => shared.wake.notify_one(),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "tuner settings not saved"),
        }
    }
}

/// Follow `[tuner].enabled` (the switch's home, written by every surface) into the engine.
pub async fn follow_switch(shared: Shared, mut enabled: watch::Receiver<bool>, shutdown: Shutdown) {
    loop {
        tokio::select! {
            changed = enabled.changed() => if changed.is_err() { return },
            () = shutdown.wait() => return,
        }
        let on = *enabled.borrow_and_update();
        let now = shared.clock.now_ms();
        match shared.lock().set_active(on, now) {
            Ok(()) => shared.wake.notify_one(),
            Err(e) => tracing::warn!(error = %e, "tuner settings not saved"),
        }
    }
}

/// Run the tuner until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let channel = ipc::channel(&ctx.layout, ServiceName::HwAgent);
    let stream_channel = channel.clone();
    let telemetry = ipc::follow("hw-agent", shutdown.clone(), move || {
        let mut client = HwAgentServiceClient::new(stream_channel.clone());
        async move {
            client
                .stream_telemetry(StreamTelemetryRequest {
                    include_chips: true,
                })
                .await
                .map(|r| r.into_inner())
        }
    });
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let state_dir = ctx.layout.service_state_dir(ServiceName::Tuner);
    // Creates the state directory the governor and the history write into.
    let store = Store::open(&state_dir)?;
    let history = Arc::new(history::History::open(
        &state_dir.join("history.sqlite"),
        clock.clone(),
    )?);
    let power = Arc::new(power::Power::new(
        state_dir.join("power"),
        ctx.layout.config_path.clone(),
        ctx.config.clone(),
        clock.clone(),
        HwAgentServiceClient::new(channel.clone()),
        telemetry.clone(),
        Arc::clone(&history),
    ));
    let power_task = tokio::spawn(Arc::clone(&power).run(shutdown.clone()));
    let swarm_task = tokio::spawn(power::swarm::run(Arc::clone(&power), shutdown.clone()));
    let stratum = StratumServiceClient::new(ipc::channel(&ctx.layout, ServiceName::StratumAgent));
    let pools = ipc::follow("stratum-agent", shutdown.clone(), move || {
        let mut s = stratum.clone();
        async move {
            s.stream_pools(StreamPoolsRequest {})
                .await
                .map(|r| r.into_inner())
        }
    });
    let history_task = tokio::spawn(Arc::clone(&history).run(
        telemetry.clone(),
        pools,
        Duration::from_secs(ctx.config.tuner.history_flush_s),
        shutdown.clone(),
    ));

    let interval = Duration::from_millis(ctx.config.tuner.step_interval_ms);
    let mut engine = Engine::new(ctx.config.clone(), store, clock.now_ms())?;
    engine.share_zone(power.zone.clone());
    engine.share_governor(power.handoff.clone());
    let shared = Shared::new(engine, clock);
    let target_task = tokio::spawn(follow_operator_target(
        shared.clone(),
        power.operator_target(),
        shutdown.clone(),
    ));
    let switch_task = tokio::spawn(follow_switch(
        shared.clone(),
        power.tuner_enabled(),
        shutdown.clone(),
    ));
    let driver = Driver {
        shared: shared.clone(),
        hw: HwAgent(HwAgentServiceClient::new(channel)),
        telemetry,
    };
    let loop_task = tokio::spawn(driver.run(interval, shutdown.clone()));
    let router = ipc::server()
        .add_service(TunerServiceServer::new(service::TunerApi::new(
            shared,
            Arc::clone(&power),
        )))
        .add_service(PowerServiceServer::new(power::service::PowerApi::new(
            power,
        )))
        .add_service(HistoryServiceServer::new(
            history::service::HistoryApi::new(history),
        ));
    ipc::serve(router, listener, shutdown).await?;
    let _ = loop_task.await;
    let _ = target_task.await;
    let _ = switch_task.await;
    let _ = power_task.await;
    let _ = swarm_task.await;
    let _ = history_task.await;
    Ok(())
}

/// `svcos tuner`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Tuner, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Tuner, args, Flavor::CurrentThread, run)
}
