//! The simulated board: BM13xx-class chips on pseudo-terminal UARTs hashing real SHA-256d, PSU,
//! fans, sensors, fault injection.
//!
//! # Shape
//!
//! * One pseudo-terminal per chain ([`uart`]). The sim owns the master; `GetBoard` advertises the
//!   slave path, which hw-agent opens with the serialport crate exactly like `/dev/ttyS*`. The
//!   chips speak the `svcos-bm13xx` protocol: enumeration by chip-id read, chain inactive and
//!   address assignment, register reads and writes (PLL, baud divider, ticket mask, version
//!   mask), 88-byte job frames. Bytes take their wire time at the chips' baud (10 bits per byte,
//!   115200 after power-up).
//! * One hashing thread ([`hasher`]) computes real SHA-256d for every chip within
//!   `[sim].cpu_budget_percent` of one core, and reports `virtual_hashes_per_real_hash` so
//!   hw-agent's sim driver can scale measured nonce rates to the board's nominal hashrate
//!   (frequency × hashes per clock; ~13.5 TH/s for the S9 preset).
//! * Physics ([`state::BoardState::step`], every 100 ms): power ≈ k·V²·f plus
//!   temperature-dependent leakage per chip, a first-order board thermal model cooled by fan
//!   airflow, fans following their PWM, a PSU slewing to its setpoint, and a seeded silicon
//!   lottery turning the (frequency, voltage, temperature) margin into an error rate: that share
//!   of the reported nonces do not verify (HW errors).
//! * The gRPC API ([`service`], `svcos.hwsim.v1`): I2C to the PSU and TMP75 sensors (register
//!   maps in `hwsim.proto`), fans, GPIO (LEDs, button, chain enable/reset), fault injection and
//!   ground truth for tests.
//!
//! As on real boards, chips keep hashing their last job when nobody feeds them, and the PSU and
//! fans keep their last setpoint.

pub mod error;
pub mod hasher;
pub mod i2c;
pub mod service;
pub mod spec;
pub mod state;
pub mod uart;

use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown};
use tokio::net::UnixListener;

pub use error::SimError;
pub use service::HwSimApi;
pub use spec::BoardSpec;

use crate::hasher::Hasher;
use crate::state::{BoardState, Shared};
use crate::uart::{ChainHandle, ChainLink, Pty};

/// Physics step period.
const PHYSICS_TICK: Duration = Duration::from_millis(100);
/// Stack of the sim's worker threads: they keep little on the stack, and RSS matters.
const THREAD_STACK: usize = 256 * 1024;
/// SCHED_FIFO priority of the simulated UARTs (when the process may have it): above hw-agent's
/// chain threads (10), as a real UART does not wait for the host's scheduler.
const UART_RT_PRIORITY: i32 = 20;

/// Why the sim could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A pseudo-terminal could not be opened.
    #[error("cannot open a pseudo-terminal for chain {chain}: {source}")]
    Pty {
        /// Chain.
        chain: u32,
        /// The OS error.
        source: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A running simulated board: chain threads, the hashing thread and the physics clock.
pub struct Sim {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    wakes: Vec<UnixStream>,
    api: HwSimApi,
}

impl Sim {
    /// Open the PTYs and start the chain and hashing threads. Calibrates the hash speed first
    /// (about 40 ms of CPU).
    pub fn start(spec: BoardSpec) -> Result<Sim, StartError> {
        let mut ptys = Vec::new();
        for chain in 0..spec.chains {
            ptys.push(Pty::open().map_err(|source| StartError::Pty { chain, source })?);
        }
        let speed = hasher::calibrate();
        let budget = spec.cpu_budget_percent / 100.0;
        let (real_rate, virtual_per_real) = Hasher::plan(spec.nominal_hashrate(), speed, budget);
        tracing::info!(
            model = %spec.model,
            chains = spec.chains,
            chips_per_chain = spec.chips_per_chain,
            calibrated_hps = speed.round(),
            real_hps = real_rate.round(),
            virtual_per_real,
            "simulated board starting"
        );
        for (chain, pty) in ptys.iter().enumerate() {
            tracing::info!(chain, tty = %pty.path, "chain UART");
        }
        let seed = spec.seed;
        let board = BoardState::new(spec, ptys.iter().map(|p| p.path.clone()).collect());
        let shared = Arc::new(Shared {
            board: Mutex::new(board),
            stop: AtomicBool::new(false),
        });

        // Threads are pushed into `sim` as they start: an early return drops it, and its Drop
        // stops whatever already runs.
        let mut sim = Sim {
            shared: shared.clone(),
            threads: Vec::new(),
            wakes: Vec::new(),
            api: HwSimApi {
                shared: shared.clone(),
                virtual_per_real,
                real_rate,
            },
        };
        let spawn = |what: &'static str, name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .stack_size(THREAD_STACK)
                .spawn(f)
                .map_err(|source| StartError::Thread { what, source })
        };
        let mut handles = Vec::new();
        for (i, pty) in ptys.into_iter().enumerate() {
            let chain = i as u32;
            let pty_err = |source| StartError::Pty { chain, source };
            let (tx, rx) = mpsc::sync_channel(uart::NONCE_CHANNEL_BOUND);
            let (wake_rx, wake_tx) = UnixStream::pair().map_err(pty_err)?;
            wake_rx.set_nonblocking(true).map_err(pty_err)?;
            wake_tx.set_nonblocking(true).map_err(pty_err)?;
            sim.wakes.push(wake_tx.try_clone().map_err(pty_err)?);
            let link = ChainLink::new(i, pty, wake_rx, rx, shared.clone(), seed);
            sim.threads.push(spawn(
                "chain",
                format!("chain{i}"),
                Box::new(move || {
                    // A UART shifts bytes whatever the CPU is doing. At normal priority this
                    // thread waited out hw-agent's real-time chain threads before it saw a job
                    // frame (0.45 ms at p50 on the share path; 0.19 ms at this priority).
                    svcos_common::sched::set_scheduling(Some(UART_RT_PRIORITY), "sim-uart");
                    link.run()
                }),
            )?);
            handles.push(ChainHandle {
                nonces: tx,
                wake: wake_tx,
            });
        }
        let hasher = Hasher::new(shared.clone(), handles, virtual_per_real, budget, seed);
        sim.threads.push(spawn(
            "hasher",
            "hasher".into(),
            Box::new(move || hasher.run()),
        )?);
        let physics_shared = shared.clone();
        sim.threads.push(spawn(
            "physics",
            "physics".into(),
            Box::new(move || physics_loop(physics_shared)),
        )?);
        Ok(sim)
    }

    /// The gRPC service over this board.
    pub fn api(&self) -> HwSimApi {
        self.api.clone()
    }

    /// The PTY slave path of every chain, in chain order.
    pub fn tty_paths(&self) -> Vec<String> {
        self.shared
            .lock()
            .chains
            .iter()
            .map(|c| c.tty_path.clone())
            .collect()
    }

    /// Virtual hashes each real hash stands for (fixed for the life of the sim).
    pub fn virtual_hashes_per_real_hash(&self) -> f64 {
        self.api.virtual_per_real
    }

    fn stop_threads(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for w in &self.wakes {
            let _ = std::io::Write::write(&mut &*w, &[1]);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stop every thread and close the PTYs.
    pub fn stop(mut self) {
        self.stop_threads();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn physics_loop(shared: Arc<Shared>) {
    let mut last = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(PHYSICS_TICK);
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        last = now;
        shared.lock().step(dt, now);
    }
}

/// Run the service until `shutdown`, serving gRPC (with health) on `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let spec = BoardSpec::from_config(&ctx.config);
    // Calibration and PTY setup block briefly; keep them off the async executor.
    let sim = tokio::task::spawn_blocking(move || Sim::start(spec)).await??;
    let api = pb_server(sim.api());
    let served = svcos_common::ipc::serve(
        svcos_common::ipc::server().add_service(api),
        listener,
        shutdown,
    )
    .await;
    tokio::task::spawn_blocking(move || sim.stop()).await?;
    served?;
    Ok(())
}

fn pb_server(
    api: HwSimApi,
) -> svcos_proto::hwsim::v1::hw_sim_service_server::HwSimServiceServer<HwSimApi> {
    svcos_proto::hwsim::v1::hw_sim_service_server::HwSimServiceServer::new(api)
}

/// `svcos hw-sim`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::HwSim, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::HwSim, args, Flavor::CurrentThread, run)
}
