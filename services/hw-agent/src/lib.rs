//! hw-agent: hashboards, PSU, fans, sensors and the real-time mining loop.
//!
//! # Threads
//!
//! | Thread | Owns | Wakes on |
//! |---|---|---|
//! | `chain<N>` (one per chain, [`chain`]) | the UART, decoder, job-id ring, accounting | UART bytes, a command, the next frame's due time |
//! | `board` ([`control`]) | PSU, sensors, fans, GPIO, thermal policy | a command, 100 ms (button/LED), 500 ms (control step) |
//! | `state-saver` | nothing; copies counters and the job table to the re-attach file, leaves the UARTs with the supervisor | 1 s, and after each job frame (at most every 100 ms) |
//! | main (current-thread tokio) | gRPC server, StreamJobs/SubmitShares client, telemetry assembly | I/O |
//!
//! The mining path never touches the runtime: a job goes from the StreamJobs task straight to
//! each chain thread's channel (plus one byte on a wake-up socket); a verified share goes from
//! the chain thread into a bounded channel drained by the submitter task. The API only reads
//! snapshots the threads publish through `watch` channels and sends commands
//! ([`chain::ChainCommand`], [`control::ControlCommand`]), whose docs say when each is allowed.
//!
//! # Start-up
//!
//! 1. The board is described by `[hardware]` ([`board::BoardSpec`]); in the sim, GetBoard adds
//!    the PTY paths, I2C map, GPIO names and the virtual-hashes-per-real-hash factor.
//! 2. If the re-attach file under `Layout::service_runtime_dir(HwAgent)` describes this board,
//!    each chain is re-opened at its saved baud and probed with one register read: the ticket
//!    mask of its last chip at that chip's address, which only a chain that kept its
//!    configuration answers with our value. Such chips are adopted as they are: no reset, no
//!    enumeration, no baud or PLL change, counters continue. Any other chain is reset through
//!    its GPIO line and brought up from cold ([`chain`]: enumerate, address, ticket and
//!    version masks, PLL ramp, baud switch).
//! 3. A graceful stop leaves the chips hashing, so a restart of either kind re-attaches. A
//!    chain whose UART vanishes (hw-sim restarted, adapter unplugged) ends the process with a
//!    failure: only a fresh discovery can find the board again, and the supervisor restarts us.
//! 4. No work is lost across a restart: the UARTs stay open in the supervisor's descriptor
//!    store ([`uarts`]), so the kernel keeps what the chips send while we are away, and the
//!    re-attach file carries the job table ([`jobtable`]): the frames each chain's chips were
//!    given, so those nonces are verified and submitted like any other.
//!
//! # Accounting
//!
//! Every nonce is re-hashed (SHA-256d of the rebuilt header) and must meet the ticket mask the
//! chips were given; it then counts `2^zero_bits` hashes (times the sim's virtual factor, only
//! with the sim driver) in 5 s / 1 min / 15 min windows per chain and 1 min per chip.

pub mod accounting;
pub mod board;
pub mod chain;
pub mod control;
pub mod diagnostics;
pub mod drivers;
pub mod error;
pub mod jobtable;
pub mod limits;
pub mod probes;
pub mod recipe;
pub mod service;
pub mod shares;
pub mod state;
pub mod stratum;
pub mod telemetry;
pub mod thermal;
pub mod uarts;
pub mod work;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use svcos_bm13xx::{ChipModel, TicketMask};
use svcos_common::config::HardwareDriver;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown, ipc};
use svcos_proto::hwagent::v1::hw_agent_service_server::HwAgentServiceServer;
use svcos_proto::hwagent::v1::hw_diagnostics_service_server::HwDiagnosticsServiceServer;
#[cfg(feature = "sim")]
use svcos_proto::hwsim::v1::GetBoardRequest;
#[cfg(feature = "sim")]
use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use tokio::net::UnixListener;
use tokio::sync::{Notify, broadcast, mpsc, watch};

use crate::board::BoardSpec;
use crate::chain::{ChainHandle, ChainLinks, ChainSetup, ChainStatus, Start};
use crate::control::{BoardLayout, BoardThread, SensorSpec};
use crate::drivers::Peripherals;
use crate::probes::Probes;
use crate::service::{Api, Published};
use crate::state::ReattachState;
use crate::stratum::{JobStatus, ShareCounters};

/// Most nonces per second per chip the ticket mask aims at on hardware (a power of two of
/// difficulty gives between half this and this). The tuner judges each chip by its own yield
/// and error share over a window: at the fixed difficulty of 256 used before, an S9's BM1387
/// (74 GH/s) returned one nonce every 15 s, too few to tell a chip at its edge from a good one;
/// at difficulty 4 it returns about 4 a second.
const HW_NONCES_PER_CHIP_S: f64 = 8.0;
/// Share of a chain's UART line rate that nonce responses may take on hardware (frames and
/// register reads need the rest).
const HW_NONCE_UART_SHARE: f64 = 0.1;
/// Nonces per second per chip the sim's ticket mask aims at: what a real S9 gives at its
/// hardware ticket (about 4), so the tuner's windows hold as many results per chip on the sim
/// as on the board, from the sim's small real hash budget.
const SIM_NONCES_PER_CHIP_S: f64 = 4.0;
/// SCHED_FIFO priority of the runtime thread (chain threads run at 10).
const RUNTIME_RT_PRIORITY: i32 = 5;
/// Stack of hw-agent's own threads. They keep their buffers on the heap; the 2 MiB default
/// only eats address space, which is scarce on the 32-bit ARM control boards.
pub(crate) const THREAD_STACK: usize = 512 * 1024;
/// How long to wait for hw-sim's GetBoard at start (it is started first, but may be slow).
#[cfg(feature = "sim")]
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Run the service until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    run_with_probes(ctx, listener, shutdown, Arc::new(Probes::default())).await
}

/// `svcos hw-agent`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::HwAgent, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::HwAgent, args, Flavor::CurrentThread, run)
}

/// What discovery found: where the chains are and the non-UART layout.
struct Discovered {
    devices: Vec<String>,
    layout: BoardLayout,
    hashes_scale: f64,
    serial_number: String,
    peripherals: Peripherals,
    /// Real SHA-256d rate of the sim (for its ticket mask), or 0 on hardware.
    sim_real_hs: f64,
}

async fn discover(ctx: &ServiceContext, spec: &BoardSpec) -> anyhow::Result<Discovered> {
    match spec.driver {
        #[cfg(feature = "sim")]
        HardwareDriver::Sim => discover_sim(ctx, spec).await,
        // The image leaves the simulated board out; a config asking for it is a setup mistake
        // that restarting cannot fix, so say what to change.
        #[cfg(not(feature = "sim"))]
        HardwareDriver::Sim => Err(error::HwError::Discovery(
            "[hardware].driver = \"sim\" but this build has no simulated board \
             (built without the `sim` feature); set driver = \"linux\""
                .into(),
        )
        .into()),
        HardwareDriver::Linux => discover_linux(ctx, spec),
    }
}

#[cfg(feature = "sim")]
async fn discover_sim(ctx: &ServiceContext, spec: &BoardSpec) -> anyhow::Result<Discovered> {
    let socket = ctx.layout.socket(ServiceName::HwSim);
    let mut client = HwSimServiceClient::new(ipc::channel_at(socket.clone()));
    let deadline = Instant::now() + DISCOVERY_TIMEOUT;
    let mut backoff = ipc::Backoff::default();
    let board = loop {
        match client.get_board(GetBoardRequest {}).await {
            Ok(r) => break r.into_inner(),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(code = ?e.code(), "waiting for hw-sim");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => {
                return Err(error::HwError::Discovery(format!("hw-sim GetBoard: {e}")).into());
            }
        }
    };
    let chains = board.chains.len().min(spec.chains as usize);
    let mut layout = BoardLayout {
        psu_address: (board.psu_address != 0).then_some(board.psu_address as u16),
        psu_model: board.psu_model.clone(),
        fans: board.fans as usize,
        ..Default::default()
    };
    for c in &board.chains[..chains] {
        for (kind, addr) in [
            ("board", c.board_sensor_address),
            ("chip", c.chip_sensor_address),
        ] {
            if addr != 0 {
                layout.sensors.push(SensorSpec {
                    name: format!("chain{}-{kind}", c.chain_id),
                    kind,
                    chain_id: c.chain_id,
                    address: addr as u16,
                });
            }
        }
        layout.chain_enable.push(if c.enable_gpio.is_empty() {
            drivers::lines::chain_enable(c.chain_id)
        } else {
            c.enable_gpio.clone()
        });
        layout.chain_reset.push(if c.reset_gpio.is_empty() {
            drivers::lines::chain_reset(c.chain_id)
        } else {
            c.reset_gpio.clone()
        });
        if c.pic_address != 0 {
            layout.pics.push(drivers::devices::Pic {
                chain_id: c.chain_id,
                address: c.pic_address as u16,
            });
        }
    }
    // The sim drivers block on gRPC; they run on the board thread with their own runtime.
    let link = drivers::sim::SimLink::new(socket)?;
    let peripherals = Peripherals {
        i2c: Box::new(drivers::sim::SimI2c::new(link.clone(), board.i2c_bus)),
        fans: Box::new(drivers::sim::SimFans::new(link.clone(), layout.fans)),
        gpio: Box::new(drivers::sim::SimGpio::new(link)),
        i2c_bus: board.i2c_bus,
    };
    Ok(Discovered {
        devices: board.chains[..chains]
            .iter()
            .map(|c| c.tty_path.clone())
            .collect(),
        layout,
        hashes_scale: if board.virtual_hashes_per_real_hash > 0.0 {
            board.virtual_hashes_per_real_hash
        } else {
            1.0
        },
        serial_number: format!("SIM-{:016x}", board.seed),
        peripherals,
        sim_real_hs: board.real_hashes_per_second,
    })
}

fn discover_linux(ctx: &ServiceContext, spec: &BoardSpec) -> anyhow::Result<Discovered> {
    let hw = &ctx.config.hardware;
    let devices: Vec<String> = if hw.uarts.is_empty() {
        (1..=spec.chains).map(|i| format!("/dev/ttyS{i}")).collect()
    } else {
        hw.uarts.iter().map(|p| p.display().to_string()).collect()
    };
    // The svcOS board map (the same one hw-sim implements): PSU at 0x10, per chain a board
    // TMP75 at 0x48 + c, a chip-side one at 0x4C + c and, on S9/S19 hashboards, the PIC
    // voltage controller at 0x50 + c.
    let mut layout = BoardLayout {
        psu_address: Some(0x10),
        psu_model: "APW".into(),
        fans: spec.fans as usize,
        ..Default::default()
    };
    for c in 0..spec.chains {
        for (kind, base) in [("board", 0x48u16), ("chip", 0x4C)] {
            layout.sensors.push(SensorSpec {
                name: format!("chain{c}-{kind}"),
                kind,
                chain_id: c,
                address: base + c as u16,
            });
        }
        layout.chain_enable.push(drivers::lines::chain_enable(c));
        layout.chain_reset.push(drivers::lines::chain_reset(c));
        if spec.board != svcos_common::config::Board::Bitaxe && c < 4 {
            layout.pics.push(drivers::devices::Pic {
                chain_id: c,
                address: 0x50 + c as u16,
            });
        }
    }
    let peripherals = Peripherals {
        i2c: Box::new(drivers::linux::LinuxI2c::open(spec.i2c_bus)?),
        fans: Box::new(drivers::linux::SysfsFans::open(&hw.fan_hwmon, layout.fans)?),
        gpio: Box::new(drivers::linux::SysfsGpio::new(
            &PathBuf::from("/sys/class/gpio"),
            hw.gpio_lines.clone(),
        )),
        i2c_bus: spec.i2c_bus,
    };
    let serial_number = std::fs::read_to_string("/sys/firmware/devicetree/base/serial-number")
        .map(|s| s.trim_matches(char::from(0)).trim().to_string())
        .unwrap_or_default();
    Ok(Discovered {
        devices,
        layout,
        hashes_scale: 1.0,
        serial_number,
        peripherals,
        sim_real_hs: 0.0,
    })
}

/// The ticket mask: on hardware one that yields about [`HW_NONCES_PER_CHIP_S`] per chip at the
/// board's frequency within [`HW_NONCE_UART_SHARE`] of the line rate; in the sim one that
/// yields about [`SIM_NONCES_PER_CHIP_S`] per chip from the sim's real hash budget.
fn ticket_for(spec: &BoardSpec, chip_model: ChipModel, sim_real_hs: f64) -> TicketMask {
    if sim_real_hs > 0.0 {
        let chips = f64::from((spec.chains * spec.chips_per_chain).max(1));
        let hashes_per_nonce = sim_real_hs / chips / SIM_NONCES_PER_CHIP_S;
        return TicketMask::for_difficulty(hashes_per_nonce / accounting::HASHES_PER_DIFF1);
    }
    let chips = f64::from(spec.chips_per_chain.max(1));
    // Ten bits per byte on the wire (start, eight data, stop).
    let uart_nonces_s = f64::from(spec.baud) * HW_NONCE_UART_SHARE
        / (svcos_bm13xx::RESPONSE_LEN as f64 * 10.0)
        / chips;
    let per_chip_s = HW_NONCES_PER_CHIP_S.min(uart_nonces_s).max(1e-3);
    let chip_hs = chip_model.nominal_hashrate(spec.frequency_mhz.max(1.0));
    // Rounded up to the next power of two, so the UART share is a ceiling, never exceeded.
    let difficulty = (chip_hs / per_chip_s / accounting::HASHES_PER_DIFF1).max(1.0);
    TicketMask::for_difficulty(2f64.powf(difficulty.log2().ceil()))
}

/// [`run`] with caller-owned latency probes (benchmarks and tests read them).
pub async fn run_with_probes(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
    probes: Arc<Probes>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    // The runtime thread carries jobs to the chains and shares to stratum-agent: it runs just
    // below the chain threads, above every normal process (its API handlers only copy
    // snapshots, so they cannot hog the CPU).
    chain::set_scheduling(Some(RUNTIME_RT_PRIORITY), "runtime");
    let spec = Arc::new(BoardSpec::from_config(&ctx.config.hardware));
    let found = discover(&ctx, &spec).await.context("board discovery")?;
    let chip_model = ChipModel::from_name(&spec.chip_model).unwrap_or(ChipModel::Bm1387);
    let ticket = ticket_for(&spec, chip_model, found.sim_real_hs);
    let state_dir = ctx.layout.service_runtime_dir(ServiceName::HwAgent);
    let state_path = ReattachState::path_in(&state_dir);
    let saved = ReattachState::load(&state_path).filter(|s| s.model == spec.model);

    // Device I/O blocks (and the sim drivers block on their own runtime): off the executor.
    let voltage_mv = ctx.config.hardware.voltage_mv;
    let saved_for_prepare = saved.clone();
    let layout_for_prepare = ctx.layout.clone();
    let (found, starts) = tokio::task::spawn_blocking(move || {
        let inherited = uarts::fetch_inherited(&layout_for_prepare);
        prepare(found, saved_for_prepare.as_ref(), voltage_mv, inherited)
    })
    .await?;
    let any_cold = starts.iter().any(|s| matches!(s, Start::Cold(_)));
    let mining_started_ms = saved
        .as_ref()
        .filter(|_| !any_cold)
        .map(|s| s.mining_started_unix_ms)
        .unwrap_or_else(svcos_common::time::unix_ms);

    // Chain threads.
    let (share_tx, share_rx) = mpsc::channel(shares::DEFAULT_CAPACITY);
    let state_changed = Arc::new(Notify::new());
    // Work generations continue from the saved ones, so restored frames stay current until the
    // first job after the restart.
    let resumed = saved
        .as_ref()
        .filter(|_| !any_cold)
        .map(|s| (s.generation, s.pool_epoch));
    let links = ChainLinks {
        shares: share_tx,
        generation: Arc::new(AtomicU64::new(resumed.map_or(0, |r| r.0))),
        probes: Arc::clone(&probes),
        state_changed: Arc::clone(&state_changed),
        shares_dropped: Arc::new(AtomicU64::new(0)),
        uart_lost: Arc::new(Notify::new()),
        uarts: Arc::new(uarts::UartRegistry::default()),
        saver: Arc::new(jobtable::SaverWake::default()),
    };
    probes.set_chains(starts.len());
    let mut handles = Vec::new();
    for (i, start) in starts.into_iter().enumerate() {
        let setup = ChainSetup {
            chain_id: i as u32,
            device: found.devices[i].clone(),
            chips_expected: spec.chips_per_chain,
            chip_model,
            target_mhz: spec.frequency_mhz,
            baud: spec.baud,
            ticket,
            hashes_scale: found.hashes_scale,
            enabled: !matches!(start, Start::Disabled(_)),
        };
        handles.push(chain::spawn(setup, start, links.clone())?);
    }
    let chains: Arc<Vec<ChainHandle>> = Arc::new(handles);

    // Board thread.
    let (control_tx, control_rx) = std::sync::mpsc::channel();
    let (board_tx, board_rx) = watch::channel(Arc::new(control::initial_snapshot(
        &found.layout,
        &ctx.config.thermal,
        &ctx.config.hardware,
        &ctx.config.power,
    )));
    let (events_tx, _) = broadcast::channel(64);
    let layout = Arc::new(found.layout.clone());
    let i2c_bus = found.peripherals.i2c_bus;
    let hashes_scale = found.hashes_scale;
    let board_thread = BoardThread {
        peripherals: found.peripherals,
        layout: found.layout,
        chains: Arc::clone(&chains),
        commands: control_rx,
        snapshot: board_tx,
        events: events_tx.clone(),
        state_changed: Arc::clone(&state_changed),
        hardware: ctx.config.hardware.clone(),
        thermal: ctx.config.thermal.clone(),
        power: ctx.config.power.clone(),
        mode: ctx.config.system.mode,
    };
    let board_join = std::thread::Builder::new()
        .name("board".into())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            // Peripheral I/O is not time-critical: normal priority, not the runtime's.
            chain::set_scheduling(None, "board");
            board_thread.run()
        })?;

    // Stratum client side.
    let stratum_channel = ipc::channel(&ctx.layout, ServiceName::StratumAgent);
    let (jobs_tx, jobs_rx) = watch::channel(JobStatus::default());
    let share_counters = Arc::new(ShareCounters::default());
    if let Some(s) = &saved {
        share_counters.sent.store(s.shares_sent, Ordering::Relaxed);
    }
    let book = match resumed {
        Some((generation, epoch)) => work::JobBook::resume(generation, epoch),
        None => work::JobBook::default(),
    };
    let jobs_for_saver = jobs_rx.clone();
    tokio::spawn(stratum::follow_jobs(
        stratum_channel.clone(),
        Arc::clone(&chains),
        Arc::clone(&links.generation),
        book,
        jobs_tx,
        shutdown.clone(),
    ));
    tokio::spawn(stratum::submit_shares(
        stratum_channel,
        share_rx,
        jobs_rx.clone(),
        Arc::clone(&share_counters),
        Arc::clone(&probes),
        shares::DEFAULT_CAPACITY,
        shutdown.clone(),
    ));

    // Telemetry: once a second and on every state change.
    let sources = telemetry::Sources {
        spec: Arc::clone(&spec),
        chains: chains.iter().map(|c| c.snapshot.clone()).collect(),
        board: board_rx.clone(),
        jobs: jobs_rx,
        shares: Arc::clone(&share_counters),
        mining_started_ms,
    };
    let (telemetry_tx, telemetry_rx) = watch::channel(Arc::new(Published::default()));
    tokio::spawn(publish_telemetry(
        sources,
        telemetry_tx,
        Arc::clone(&state_changed),
        shutdown.clone(),
    ));

    // Bring-up / re-attach timing, once no chain is initialising any more.
    {
        let probes = Arc::clone(&probes);
        let mut rx: Vec<_> = chains.iter().map(|c| c.snapshot.clone()).collect();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                if rx
                    .iter()
                    .all(|r| r.borrow().status != ChainStatus::Initializing)
                {
                    let d = started.elapsed();
                    if any_cold {
                        probes.bring_up(d);
                    } else {
                        probes.reattach(d);
                    }
                    tracing::info!(ms = d.as_millis() as u64, cold = any_cold, "chains ready");
                    return;
                }
                let changed =
                    futures::future::select_all(rx.iter_mut().map(|r| Box::pin(r.changed())));
                tokio::select! {
                    _ = changed => {}
                    _ = shutdown.wait() => return,
                }
            }
        });
    }

    // Re-attach state, every second and soon after each job frame, off the runtime thread
    // (fsync may take a while); the UARTs go to the supervisor's store from here too.
    let saver_stop = Arc::new(AtomicBool::new(false));
    let saver = {
        let chains = Arc::clone(&chains);
        let counters = Arc::clone(&share_counters);
        let stop = Arc::clone(&saver_stop);
        let model = spec.model.clone();
        let path = state_path.clone();
        let generation = Arc::clone(&links.generation);
        let wake = Arc::clone(&links.saver);
        let registry = Arc::clone(&links.uarts);
        let mut depositor = uarts::Depositor::new(ctx.layout.clone());
        std::thread::Builder::new()
            .name("state-saver".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                chain::set_scheduling(None, "state-saver");
                wake.register();
                let save = || {
                    let recent: Vec<Vec<jobtable::FrameRecord>> = chains
                        .iter()
                        .map(|c| {
                            let ring = c.frames.lock().unwrap_or_else(|p| p.into_inner());
                            ring.iter().cloned().collect()
                        })
                        .collect();
                    let (jobs, frames) = jobtable::save(&recent);
                    let state = ReattachState {
                        format: state::FORMAT,
                        model: model.clone(),
                        mining_started_unix_ms: mining_started_ms,
                        shares_sent: counters.sent.load(Ordering::Relaxed),
                        chains: chains
                            .iter()
                            .zip(frames)
                            .filter_map(|(c, frames)| {
                                let mut s =
                                    c.saved.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
                                s.frames = frames;
                                Some(s)
                            })
                            .collect(),
                        jobs,
                        generation: generation.load(Ordering::Acquire),
                        pool_epoch: jobs_for_saver.borrow().epoch,
                    };
                    if let Err(e) = state.save(&path) {
                        tracing::warn!(error = %e, "re-attach state not saved");
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    std::thread::park_timeout(Duration::from_secs(1));
                    // Frames can go out far faster than a file should be written.
                    if let Some(rest) = jobtable::MIN_SAVE_INTERVAL.checked_sub(began.elapsed()) {
                        std::thread::sleep(rest);
                    }
                    save();
                    depositor.tick(&registry);
                }
                save();
            })?
    };

    // If this future is dropped (its runtime went away) the saver must stop too; the chain and
    // board threads stop on their own when their command channels close.
    let _saver_guard = StopOnDrop(Arc::clone(&saver_stop));

    // Diagnostics: runs observe the same snapshots and command channels as the API.
    let diagnostics = diagnostics::service::Diagnostics::new(
        diagnostics::checks::Context {
            spec: Arc::clone(&spec),
            layout: Arc::clone(&layout),
            chains: Arc::clone(&chains),
            board: board_rx.clone(),
            control: control_tx.clone(),
            hashes_scale,
            thermal: ctx.config.thermal.clone(),
            i2c_bus,
        },
        diagnostics::store::Store::new(
            ctx.layout
                .service_state_dir(ServiceName::HwAgent)
                .join("diagnostics"),
        ),
    );

    // API.
    let api = Api {
        spec: Arc::clone(&spec),
        layout,
        telemetry: telemetry_rx,
        board: board_rx,
        chains: Arc::clone(&chains),
        control: control_tx.clone(),
        events: events_tx,
        layout_paths: ctx.layout.clone(),
        live_config: std::sync::Mutex::new(svcos_common::config::LiveConfig::new(
            ServiceName::HwAgent.as_str(),
            ctx.config.clone(),
        )),
        serial_number: found.serial_number,
    };
    let uart_lost = Arc::clone(&links.uart_lost);
    let server = ipc::serve(
        ipc::server()
            .add_service(HwAgentServiceServer::new(api))
            .add_service(HwDiagnosticsServiceServer::new(diagnostics)),
        listener,
        shutdown.clone(),
    );
    let (served, lost) = tokio::select! {
        served = server => (served, false),
        _ = uart_lost.notified() => (Ok(()), true),
    };

    // Stop: threads first (each saves its state), then one last save. The chips keep hashing
    // so the next start re-attaches.
    shutdown.trigger();
    let _ = control_tx.send(control::ControlCommand::Stop);
    let _ = board_join.join();
    for c in chains.iter() {
        c.stop();
    }
    saver_stop.store(true, Ordering::Relaxed);
    saver.thread().unpark();
    let _ = saver.join();
    served.context("gRPC server")?;
    if lost {
        // Exit with a failure so the supervisor restarts us into a fresh discovery.
        anyhow::bail!("a chain UART vanished; restarting for a fresh board discovery");
    }
    Ok(())
}

/// Sets a flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Per chain: re-attach (the probe answered at the saved baud) or cold (reset, then bring-up).
/// Also applies the configured PSU voltage. Blocking: runs on a blocking thread.
fn prepare(
    mut found: Discovered,
    saved: Option<&ReattachState>,
    voltage_mv: f64,
    mut inherited: std::collections::HashMap<String, std::os::fd::OwnedFd>,
) -> (Discovered, Vec<Start>) {
    let mut starts = Vec::new();
    for (i, device) in found.devices.iter().enumerate() {
        // The UART a previous hw-agent left with the supervisor, still open at its baud.
        let kept = inherited.remove(device);
        let entry = saved.and_then(|s| {
            s.chains
                .iter()
                .find(|c| c.chain_id == i as u32 && &c.device == device)
        });
        if let Some(c) = entry.filter(|c| !c.enabled) {
            // Switched off by the operator before the restart: keep it off.
            if let Err(e) = found
                .peripherals
                .gpio
                .set(&found.layout.chain_enable[i], false)
            {
                tracing::warn!(chain = i, error = %e, "chain enable line");
            }
            starts.push(Start::Disabled(c.clone()));
            continue;
        }
        let candidate = entry.filter(|c| !c.chip_addresses.is_empty());
        let kept_port = kept.and_then(|fd| {
            let baud = candidate.map_or(svcos_bm13xx::DEFAULT_BAUD, |c| c.baud);
            drivers::serial::SerialChain::adopt(fd, device, baud)
                .inspect_err(|e| tracing::warn!(chain = i, error = %e, "kept UART unusable"))
                .ok()
                .map(|p| Box::new(p) as Box<dyn drivers::ChainPort>)
        });
        let start = match candidate {
            Some(c) => {
                let port = match kept_port {
                    Some(p) => Ok(p),
                    None => drivers::serial::SerialChain::open(&c.device, c.baud)
                        .map(|p| Box::new(p) as Box<dyn drivers::ChainPort>),
                };
                match port {
                    Ok(port) => match chain::probe_reattach(c, port) {
                        Ok((port, decoder, early)) => {
                            tracing::info!(
                                chain = i,
                                baud = c.baud,
                                chips = c.chip_addresses.len(),
                                "re-attached without bring-up"
                            );
                            let frames = saved.map_or_else(Vec::new, |s| {
                                jobtable::restore(i as u32, &s.jobs, &c.frames)
                            });
                            Start::Reattach(Box::new(chain::Reattach {
                                port,
                                saved: c.clone(),
                                frames,
                                decoder,
                                early,
                            }))
                        }
                        Err((e, port)) => {
                            tracing::info!(chain = i, error = %e, "re-attach probe failed; cold bring-up");
                            Start::Cold(Some(port))
                        }
                    },
                    Err(e) => {
                        tracing::info!(chain = i, error = %e, "re-attach open failed; cold bring-up");
                        Start::Cold(None)
                    }
                }
            }
            None => Start::Cold(kept_port),
        };
        if matches!(start, Start::Cold(_)) {
            // Chips left at another baud or half-configured answer nothing at 115200: make
            // them forget everything first, as a power-on would.
            let gpio = found.peripherals.gpio.as_mut();
            if let Err(e) = gpio.set(&found.layout.chain_enable[i], true) {
                tracing::warn!(chain = i, error = %e, "chain enable line");
            }
            let reset = &found.layout.chain_reset[i];
            if gpio.set(reset, true).is_ok() {
                std::thread::sleep(Duration::from_millis(5));
                let _ = gpio.set(reset, false);
            }
        }
        starts.push(start);
    }
    if let Some(addr) = found.layout.psu_address {
        let psu = drivers::devices::Psu::new(addr);
        if let Err(e) =
            psu.set_voltage_mv(found.peripherals.i2c.as_mut(), voltage_mv.round() as u16)
        {
            tracing::warn!(error = %e, "PSU voltage");
        }
    }
    (found, starts)
}

async fn publish_telemetry(
    sources: telemetry::Sources,
    tx: watch::Sender<Arc<Published>>,
    state_changed: Arc<Notify>,
    shutdown: Shutdown,
) {
    let mut seq = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        seq += 1;
        let full = telemetry::build(&sources, seq);
        let lite = telemetry::without_chips(&full);
        tx.send_replace(Arc::new(Published { full, lite }));
        tokio::select! {
            _ = tick.tick() => {}
            _ = state_changed.notified() => {}
            _ = shutdown.wait() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::config::{Board, HardwareConfig};

    fn nonces_per_chip_s(spec: &BoardSpec, model: ChipModel, ticket: TicketMask) -> f64 {
        model.nominal_hashrate(spec.frequency_mhz) / ticket.hashes_per_nonce()
    }

    #[test]
    fn the_hardware_ticket_gives_each_chip_a_few_nonces_a_second_within_the_uart_share() {
        for board in [Board::S9, Board::S19, Board::Bitaxe] {
            let mut hw = HardwareConfig {
                board,
                ..HardwareConfig::default()
            };
            let spec = BoardSpec::from_config(&hw);
            let model = ChipModel::from_name(&spec.chip_model).unwrap();
            let ticket = ticket_for(&spec, model, 0.0);
            let rate = nonces_per_chip_s(&spec, model, ticket);
            let uart = rate * f64::from(spec.chips_per_chain) * 110.0 / f64::from(spec.baud);
            assert!(ticket.difficulty() >= 1.0, "{board:?}: {ticket:?}");
            // At least half the aim (a power of two rounded up), unless difficulty 1 gives less.
            assert!(
                ticket.difficulty() == 1.0 || rate >= HW_NONCES_PER_CHIP_S / 2.0,
                "{board:?}: {rate} nonces/s per chip"
            );
            assert!(rate <= HW_NONCES_PER_CHIP_S + 1e-9, "{board:?}: {rate}");
            assert!(
                uart <= HW_NONCE_UART_SHARE + 1e-9,
                "{board:?}: {uart} of the line"
            );
            // A slow line gets a higher difficulty, never more than its share.
            hw.baud = 115_200;
            let slow = BoardSpec::from_config(&hw);
            let t = ticket_for(&slow, model, 0.0);
            let r = nonces_per_chip_s(&slow, model, t);
            assert!(t.difficulty() >= ticket.difficulty());
            assert!(
                t.difficulty() == 1.0
                    || r * f64::from(slow.chips_per_chain) * 110.0 / 115_200.0
                        <= HW_NONCE_UART_SHARE + 1e-9,
                "{board:?} at 115200: {r}"
            );
        }
        // The S9 figure in the comment above.
        let spec = BoardSpec::from_config(&HardwareConfig::default());
        if spec.chip_model == "BM1387" && spec.baud >= 1_000_000 {
            assert_eq!(ticket_for(&spec, ChipModel::Bm1387, 0.0).difficulty(), 4.0);
        }
    }
}
