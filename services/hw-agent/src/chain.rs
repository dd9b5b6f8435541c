//! One hashboard chain: bring-up, re-attach, and the real-time loop on its own OS thread.
//!
//! The thread owns the UART, the response decoder, the job-id ring and the chain's accounting.
//! It sleeps in `poll(2)` on two descriptors, the UART and a wake-up socket, so a nonce is
//! handled the moment its bytes arrive and a new job the moment the control plane sends it;
//! the only other wake-up is the next frame's due time. Commands arrive on a channel
//! ([`ChainCommand`]); state leaves as a read-only [`ChainSnapshot`] in a `watch` channel, so no
//! reader ever waits for the chain and the chain never waits for a reader.

use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use svcos_bm13xx::{
    self as bm, BaudDivider, ChipModel, Command, Pll, Response, ResponseDecoder, Target,
    TicketMask, reg,
};
use svcos_proto::stratum::v1::SubmitShareRequest;
use tokio::sync::{Notify, oneshot, watch};

use crate::accounting::{ChainAccounting, Rates};
use crate::drivers::ChainPort;
use crate::drivers::serial::SerialChain;
use crate::jobtable::{self, FrameRecord, RecentFrames, SaverWake};
use crate::probes::Probes;
use crate::shares::PendingShare;
use crate::state::ChainState as SavedChain;
use crate::uarts::UartRegistry;
use crate::work::{ActiveJob, NonceVerdict, Work, WorkSlots};

/// Frequency chips run at right after power-up, MHz (where every ramp starts).
pub const POWER_ON_MHZ: f64 = 100.0;
/// Largest PLL step while ramping, MHz: big jumps brown out a real board's domain supply.
pub const PLL_STEP_MHZ: f64 = 25.0;
/// Pause between PLL steps, for the PLL to lock and the supply to settle.
const PLL_STEP_PAUSE: Duration = Duration::from_millis(2);
/// How often the snapshot is refreshed and dead chips are looked for.
const HOUSEKEEPING: Duration = Duration::from_millis(250);
/// Longest interval between two job frames even when the chips have work left: keeps ntime
/// fresh and every chain visibly fed.
const MAX_FRAME_INTERVAL: Duration = Duration::from_secs(5);
/// Expected nonce intervals of silence after which a chip counts as dead (P ≈ e^-k for a
/// healthy chip).
const DEAD_AFTER_INTERVALS: f64 = 12.0;
/// ... but never sooner than this, so a slow sim or a low ticket rate cannot flap chips.
const DEAD_AFTER_MIN: Duration = Duration::from_secs(4);
/// Empty reads in a row after which a readable UART counts as hung up.
const MAX_EMPTY_READS: u32 = 1000;
/// SCHED_FIFO priority of chain threads: low in the 1..=99 range, above every normal thread,
/// below kernel threads that service the UART.
const CHAIN_RT_PRIORITY: i32 = 10;
/// Job ids are a byte; each frame takes the next.
const JOB_IDS: usize = 256;
/// How long a debug/diagnostic register read waits for the chip's answer.
const DEBUG_REGISTER_WAIT: Duration = Duration::from_millis(200);

/// What the chain is doing, as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainStatus {
    /// Bring-up or re-attach in progress.
    Initializing,
    /// Hashing work.
    Mining,
    /// Powered but not hashing (thermal, sleep, PSU fault or no work yet).
    Idle,
    /// Switched off by the operator.
    Disabled,
    /// No chip answered.
    Missing,
    /// Something broke; the text says what.
    Fault(String),
}

/// One chip as the snapshot reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChipSnapshot {
    /// Address on the chain.
    pub address: u8,
    /// PLL frequency, MHz.
    pub frequency_mhz: f64,
    /// Verified nonces.
    pub nonces: u64,
    /// Nonces that did not verify.
    pub hw_errors: u64,
    /// Measured hashrate over a minute, H/s.
    pub hs_1m: f64,
    /// Found nonces recently enough.
    pub alive: bool,
}

/// The read-only state a chain publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainSnapshot {
    /// Chain index.
    pub chain_id: u32,
    /// What it is doing.
    pub status: ChainStatus,
    /// UART device.
    pub device: String,
    /// Current UART speed.
    pub baud: u32,
    /// Chip model detected (or configured).
    pub chip_model: String,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Chips that answered enumeration.
    pub chips: Vec<ChipSnapshot>,
    /// Verified nonces.
    pub nonces: u64,
    /// HW errors.
    pub hw_errors: u64,
    /// Duplicate nonces.
    pub duplicates: u64,
    /// Stale nonces.
    pub stale: u64,
    /// Responses lost to CRC errors on the UART.
    pub crc_errors: u64,
    /// Measured hashrate, H/s.
    pub rates: Rates,
    /// What the live chips should do at their frequency, H/s.
    pub expected_hs: f64,
    /// Mean chip frequency, MHz.
    pub frequency_mhz: f64,
    /// Ticket difficulty of the chips.
    pub ticket_difficulty: f64,
    /// Job frames written.
    pub frames_sent: u64,
    /// Operator switch.
    pub enabled: bool,
}

impl ChainSnapshot {
    /// Chips that stopped finding nonces (by index), plus those that never answered.
    pub fn missing_chips(&self) -> Vec<u32> {
        let dead = self
            .chips
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.alive)
            .map(|(i, _)| i as u32);
        let absent = self.chips.len() as u32..self.chips_expected;
        dead.chain(absent).collect()
    }

    /// What a chain looks like before its thread reports.
    fn initial(setup: &ChainSetup) -> Self {
        ChainSnapshot {
            chain_id: setup.chain_id,
            status: ChainStatus::Initializing,
            device: setup.device.clone(),
            baud: bm::DEFAULT_BAUD,
            chip_model: setup.chip_model.name().to_string(),
            chips_expected: setup.chips_expected,
            chips: Vec::new(),
            nonces: 0,
            hw_errors: 0,
            duplicates: 0,
            stale: 0,
            crc_errors: 0,
            rates: Rates::default(),
            expected_hs: 0.0,
            frequency_mhz: 0.0,
            ticket_difficulty: setup.ticket.difficulty(),
            frames_sent: 0,
            enabled: setup.enabled,
        }
    }
}

/// Why a chain operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// Hardware access failed.
    #[error("chain {chain}: {source}")]
    Driver {
        /// Chain index.
        chain: u32,
        /// The driver error.
        source: crate::drivers::DriverError,
    },
    /// No chip answered enumeration.
    #[error("chain {chain}: no chip answered on {device}")]
    NoChips {
        /// Chain index.
        chain: u32,
        /// UART device.
        device: String,
    },
    /// The chips stopped answering after the baud switch.
    #[error("chain {chain}: no answer at {baud} baud after the switch")]
    BaudSwitch {
        /// Chain index.
        chain: u32,
        /// The new speed.
        baud: u32,
    },
    /// A value the chip protocol cannot express.
    #[error("chain {chain}: {source}")]
    Codec {
        /// Chain index.
        chain: u32,
        /// The codec's reason.
        source: bm::CodecError,
    },
    /// A chip index beyond the detected chips.
    #[error("chain {chain} has no chip {chip}")]
    NoSuchChip {
        /// Chain index.
        chain: u32,
        /// Chip index asked for.
        chip: u32,
    },
    /// The chain is not brought up (disabled, idle or faulty).
    #[error("chain {chain} is not running")]
    NotRunning {
        /// Chain index.
        chain: u32,
    },
}

/// Commands to a chain thread. Each is allowed in every state unless its doc says otherwise.
#[derive(Debug)]
pub enum ChainCommand {
    /// New work. Kept while idle so that waking resumes on the current job.
    Job(Arc<ActiveJob>),
    /// Whether the board lets chips hash (thermal, PSU, sleep). Withdrawing it stops feeding
    /// and the board thread cuts the chain's power; granting it again re-runs bring-up.
    Power(bool),
    /// Operator switch; disabling powers the chain down like [`ChainCommand::Power`].
    Enable(bool),
    /// Set the frequency of one chip or all; only while brought up. Replies with the frequency
    /// the PLL really reaches.
    SetFrequency {
        /// Chip index, or every chip.
        chip: Option<u32>,
        /// Target, MHz.
        mhz: f64,
        /// Where the outcome goes.
        reply: oneshot::Sender<Result<f64, ChainError>>,
    },
    /// Thermal cut-back: run at this fraction of the set frequency.
    FrequencyScale(f64),
    /// Debug/diagnostics: read one chip's register (`value` absent) or write it and read it
    /// back, over the UART the chain thread owns. Only while brought up. Replies with the
    /// chip's address and the value read (`None`: the chip did not answer).
    Register {
        /// Chip index in chain order.
        chip: u32,
        /// Register address.
        register: u8,
        /// Value to write first.
        value: Option<u32>,
        /// Where the outcome goes.
        reply: oneshot::Sender<Result<(u8, Option<u32>), ChainError>>,
    },
    /// Debug: send one validated command frame and collect every register response for
    /// `wait`. Only while brought up.
    Raw {
        /// The command.
        command: Command,
        /// How long to collect responses.
        wait: Duration,
        /// Where the responses go.
        reply: oneshot::Sender<Result<Vec<bm::RegisterResponse>, ChainError>>,
    },
    /// Leave the loop (process shutdown). The chips keep hashing for a re-attach.
    Stop,
}

/// What a chain thread is given.
#[derive(Debug, Clone)]
pub struct ChainSetup {
    /// Chain index (also its extranonce2 partition).
    pub chain_id: u32,
    /// UART device.
    pub device: String,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Chip family.
    pub chip_model: ChipModel,
    /// Frequency after bring-up, MHz.
    pub target_mhz: f64,
    /// UART speed after bring-up.
    pub baud: u32,
    /// Ticket mask for the chips.
    pub ticket: TicketMask,
    /// Virtual hashes per real hash (1 on real hardware; the sim's factor from GetBoard).
    pub hashes_scale: f64,
    /// Operator switch at start (from the re-attach file).
    pub enabled: bool,
}

/// A chain found still configured: what its thread starts from.
pub struct Reattach {
    /// The port, opened (or adopted from the supervisor) and probed.
    pub port: Box<dyn ChainPort>,
    /// Its saved state.
    pub saved: SavedChain,
    /// The frames its chips were last given (see [`jobtable`]).
    pub frames: Vec<FrameRecord>,
    /// Bytes read during the probe after its answer.
    pub decoder: ResponseDecoder,
    /// Nonces read during the probe ahead of its answer (found while hw-agent was away).
    pub early: Vec<bm::NonceResponse>,
}

/// How a chain starts.
pub enum Start {
    /// Full bring-up at 115200 baud, on this already open port if given (an adopted UART
    /// cannot be opened again, see [`crate::uarts`]).
    Cold(Option<Box<dyn ChainPort>>),
    /// Re-attach to chips that kept running.
    Reattach(Box<Reattach>),
    /// The operator had switched the chain off: stay off (its power line is low) until enabled,
    /// keeping the saved counters.
    Disabled(SavedChain),
}

/// Shared plumbing every chain thread gets.
#[derive(Clone)]
pub struct ChainLinks {
    /// Where found shares go.
    pub shares: tokio::sync::mpsc::Sender<PendingShare>,
    /// The current work generation (stale detection).
    pub generation: Arc<AtomicU64>,
    /// Latency probes.
    pub probes: Arc<Probes>,
    /// Rung when a chain's status changes (telemetry publishes on state changes).
    pub state_changed: Arc<Notify>,
    /// Shares dropped because the channel was full.
    pub shares_dropped: Arc<AtomicU64>,
    /// Rung when a UART vanished (device gone, hw-sim restarted with new PTYs): only a fresh
    /// discovery can find it again, so the service exits and is restarted.
    pub uart_lost: Arc<Notify>,
    /// Open UARTs, left with the supervisor across restarts.
    pub uarts: Arc<UartRegistry>,
    /// Wakes the state saver after a frame (the job table must reach the file soon).
    pub saver: Arc<SaverWake>,
}

/// The control plane's handle on a chain thread.
pub struct ChainHandle {
    /// Chain index.
    pub chain_id: u32,
    commands: Sender<ChainCommand>,
    waker: UnixDatagram,
    /// Latest snapshot.
    pub snapshot: watch::Receiver<Arc<ChainSnapshot>>,
    /// Latest saveable state (re-attach file).
    pub saved: Arc<Mutex<Option<SavedChain>>>,
    /// The frames last written (job table of the re-attach file).
    pub frames: RecentFrames,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ChainHandle {
    /// Send a command and wake the thread. Fails only when the thread is gone.
    pub fn send(&self, command: ChainCommand) -> bool {
        if self.commands.send(command).is_err() {
            return false;
        }
        // A full socket buffer means a wake-up is already pending: fine.
        let _ = self.waker.send(&[1]);
        true
    }

    /// Stop the thread and wait for it (the chips keep hashing, for a re-attach).
    pub fn stop(&self) {
        self.send(ChainCommand::Stop);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// Start a chain thread.
pub fn spawn(setup: ChainSetup, start: Start, links: ChainLinks) -> std::io::Result<ChainHandle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (waker, wake_rx) = UnixDatagram::pair()?;
    waker.set_nonblocking(true)?;
    wake_rx.set_nonblocking(true)?;
    let (snap_tx, snap_rx) = watch::channel(Arc::new(ChainSnapshot::initial(&setup)));
    let saved = Arc::new(Mutex::new(None));
    let frames = RecentFrames::default();
    let chain_id = setup.chain_id;
    let worker_saved = Arc::clone(&saved);
    let worker_frames = Arc::clone(&frames);
    let thread = std::thread::Builder::new()
        .name(format!("chain{chain_id}"))
        .stack_size(crate::THREAD_STACK)
        .spawn(move || {
            raise_priority(chain_id);
            let mut w = Worker::new(setup, rx, wake_rx, snap_tx, worker_saved, links);
            w.frames = worker_frames;
            w.run(start);
        })?;
    Ok(ChainHandle {
        chain_id,
        commands: tx,
        waker,
        snapshot: snap_rx,
        saved,
        frames,
        thread: Mutex::new(Some(thread)),
    })
}

/// Real-time priority (SCHED_FIFO) for a chain thread when the process may have it (root or
/// CAP_SYS_NICE on a miner): a clean job must not wait behind the API or a log write. Without
/// the privilege the thread stays at normal priority.
fn raise_priority(chain: u32) {
    set_scheduling(Some(CHAIN_RT_PRIORITY), &format!("chain{chain}"));
}

/// Put the calling thread under SCHED_FIFO at `priority`, or back to the normal policy with
/// `None` (threads inherit their creator's policy). Best effort: without the privilege nothing
/// changes. The kernel's RT throttling keeps 5 % of the CPU for everything else even if a bug
/// made an RT thread spin.
pub fn set_scheduling(priority: Option<i32>, thread: &str) {
    let (policy, prio) = match priority {
        Some(p) => (libc::SCHED_FIFO, p),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the
    // calling thread, and the call has no other memory effects.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc != 0 {
        tracing::debug!(thread, error = %std::io::Error::last_os_error(), "scheduling policy unchanged");
    }
}

/// What a successful re-attach probe leaves: the port, the decoder holding what followed the
/// answer, and the nonces read ahead of it.
pub type Probed = (Box<dyn ChainPort>, ResponseDecoder, Vec<bm::NonceResponse>);

/// Check that a chain's last chip still answers at the saved baud on `port`: the whole
/// re-attach handshake, one register read, no enumeration and no reset. On failure the port is
/// handed back for a cold bring-up.
pub fn probe_reattach(
    saved: &SavedChain,
    mut port: Box<dyn ChainPort>,
) -> Result<Probed, (ChainError, Box<dyn ChainPort>)> {
    let chain = saved.chain_id;
    // The last chip: on a chain that lost its configuration every chip sits at address 0, so
    // only a configured chain answers at the last (non-zero) address; and its ticket mask must
    // be ours, not the power-on one (which also covers single-chip chains at address 0).
    let Some(&last) = saved.chip_addresses.last() else {
        return Err((ChainError::NotRunning { chain }, port));
    };
    let ticket = TicketMask::for_difficulty(saved.ticket_difficulty).to_register();
    let cmd = Command::ReadRegister {
        target: Target::Chip(last),
        register: reg::TICKET_MASK,
    };
    if let Err(source) = port.write_all(&cmd.encode()) {
        return Err((ChainError::Driver { chain, source }, port));
    }
    let mut decoder = ResponseDecoder::new();
    let mut early = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if !wait_readable(port.as_ref(), deadline) {
            break;
        }
        let n = match port.read(&mut buf) {
            Ok(n) => n,
            Err(source) => return Err((ChainError::Driver { chain, source }, port)),
        };
        decoder.push(&buf[..n]);
        // Nonces the chips found while nobody read the UART come first: keep them for the
        // restored job table.
        while let Some(r) = decoder.next_response() {
            match r {
                Response::Register(r)
                    if r.register == reg::TICKET_MASK && r.chip_address == last =>
                {
                    if r.value == ticket {
                        return Ok((port, decoder, early));
                    }
                    return Err((ChainError::NotRunning { chain }, port));
                }
                Response::Register(_) => {}
                Response::Nonce(n) => early.push(n),
            }
        }
    }
    Err((
        ChainError::BaudSwitch {
            chain,
            baud: saved.baud,
        },
        port,
    ))
}

fn wait_readable(port: &dyn ChainPort, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = left.as_millis().min(u128::from(u16::MAX)) as u16;
    let mut fds = [PollFd::new(port.poll_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

struct Chip {
    address: u8,
    mhz: f64,
    /// Operator-set frequency before the thermal scale.
    set_mhz: f64,
    alive: bool,
}

struct Worker {
    setup: ChainSetup,
    port: Option<Box<dyn ChainPort>>,
    decoder: ResponseDecoder,
    slots: WorkSlots,
    acct: ChainAccounting,
    chips: Vec<Chip>,
    status: ChainStatus,
    job: Option<Arc<ActiveJob>>,
    frame_counter: u64,
    frames_sent: u64,
    next_job_id: u8,
    next_frame_at: Instant,
    chip_version_mask: Option<u32>,
    /// Generation whose first frame still has to go out (latency probe).
    clean_pending: Option<u64>,
    powered: bool,
    enabled: bool,
    freq_scale: f64,
    rx: Receiver<ChainCommand>,
    wake: UnixDatagram,
    snap: watch::Sender<Arc<ChainSnapshot>>,
    saved: Arc<Mutex<Option<SavedChain>>>,
    /// The frames last written, for the job table.
    frames: RecentFrames,
    /// The UART while the chain is powered down (or before a cold bring-up): an adopted
    /// descriptor cannot be opened again, so it is kept rather than closed.
    spare_port: Option<Box<dyn ChainPort>>,
    links: ChainLinks,
    origin: Instant,
    buf: Vec<u8>,
    /// Consecutive reads that returned nothing although poll said readable.
    empty_reads: u32,
}

impl Worker {
    fn new(
        setup: ChainSetup,
        rx: Receiver<ChainCommand>,
        wake: UnixDatagram,
        snap: watch::Sender<Arc<ChainSnapshot>>,
        saved: Arc<Mutex<Option<SavedChain>>>,
        links: ChainLinks,
    ) -> Self {
        let acct = ChainAccounting::new(setup.chips_expected as usize, 0);
        Worker {
            setup,
            port: None,
            decoder: ResponseDecoder::new(),
            slots: WorkSlots::new(JOB_IDS),
            acct,
            chips: Vec::new(),
            status: ChainStatus::Initializing,
            job: None,
            frame_counter: 0,
            frames_sent: 0,
            next_job_id: 0,
            next_frame_at: Instant::now(),
            chip_version_mask: None,
            clean_pending: None,
            powered: true,
            enabled: true,
            freq_scale: 1.0,
            rx,
            wake,
            snap,
            saved,
            frames: RecentFrames::default(),
            spare_port: None,
            links,
            origin: Instant::now(),
            buf: vec![0; 4096],
            empty_reads: 0,
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn chain(&self) -> u32 {
        self.setup.chain_id
    }

    fn run(&mut self, start: Start) {
        match start {
            Start::Reattach(r) => self.reattach(*r),
            Start::Cold(port) => {
                self.spare_port = port;
                self.cold_start();
            }
            Start::Disabled(saved) => {
                self.restore_counters(&saved);
                self.enabled = false;
                self.set_status(ChainStatus::Disabled);
                self.save_state();
            }
        }
        self.publish();
        let mut next_housekeeping = Instant::now() + HOUSEKEEPING;
        loop {
            let now = Instant::now();
            let mut due = next_housekeeping;
            if self.feeding() {
                due = due.min(self.next_frame_at);
            }
            let timeout = due.saturating_duration_since(now);
            let (port_ready, wake_ready) = self.wait(timeout);
            if port_ready {
                self.read_responses();
            }
            if wake_ready {
                let mut b = [0u8; 64];
                while self.wake.recv(&mut b).is_ok() {}
            }
            // Commands are drained every turn: a job must never wait behind a timeout.
            if !self.drain_commands() {
                break;
            }
            let now = Instant::now();
            if self.feeding() && now >= self.next_frame_at {
                self.send_frame();
            }
            if now >= next_housekeeping {
                next_housekeeping = now + HOUSEKEEPING;
                self.housekeeping();
            }
        }
        self.save_state();
        self.publish();
    }

    fn wait(&self, timeout: Duration) -> (bool, bool) {
        let ms = timeout.as_millis().min(u128::from(u16::MAX)) as u16;
        // Sub-millisecond remainders round up so the loop does not spin.
        let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
        let wake_fd = self.wake.as_fd();
        match &self.port {
            Some(port) => {
                let mut fds = [
                    PollFd::new(port.poll_fd(), PollFlags::POLLIN),
                    PollFd::new(wake_fd, PollFlags::POLLIN),
                ];
                let _ = poll(&mut fds, PollTimeout::from(ms));
                let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), ready(&fds[1]))
            }
            None => {
                let mut fds = [PollFd::new(wake_fd, PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::from(ms));
                (false, fds[0].revents().is_some_and(|r| !r.is_empty()))
            }
        }
    }

    fn feeding(&self) -> bool {
        self.status == ChainStatus::Mining && self.job.is_some() && self.port.is_some()
    }

    fn set_status(&mut self, status: ChainStatus) {
        if self.status != status {
            tracing::info!(chain = self.chain(), ?status, "chain state");
            self.status = status;
            self.links.state_changed.notify_one();
            self.publish();
        }
    }

    /// Returns false on Stop.
    fn drain_commands(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(ChainCommand::Stop) | Err(TryRecvError::Disconnected) => return false,
                Ok(cmd) => self.handle(cmd),
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn handle(&mut self, cmd: ChainCommand) {
        match cmd {
            ChainCommand::Job(job) => self.new_job(job),
            ChainCommand::Power(on) => {
                self.powered = on;
                self.apply_power();
            }
            ChainCommand::Enable(on) => {
                self.enabled = on;
                self.apply_power();
            }
            ChainCommand::SetFrequency { chip, mhz, reply } => {
                let r = self.set_frequency(chip, mhz);
                let _ = reply.send(r);
            }
            ChainCommand::FrequencyScale(scale) => {
                if (scale - self.freq_scale).abs() > 1e-9 {
                    self.freq_scale = scale;
                    if let Err(e) = self.apply_scale() {
                        tracing::warn!(chain = self.chain(), error = %e, "frequency scale");
                    }
                }
            }
            ChainCommand::Register {
                chip,
                register,
                value,
                reply,
            } => {
                let r = self.debug_register(chip, register, value);
                let _ = reply.send(r);
            }
            ChainCommand::Raw {
                command,
                wait,
                reply,
            } => {
                let r = self.debug_raw(command, wait, None);
                let _ = reply.send(r);
            }
            ChainCommand::Stop => {}
        }
    }

    fn debug_register(
        &mut self,
        chip: u32,
        register: u8,
        value: Option<u32>,
    ) -> Result<(u8, Option<u32>), ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        let address = self
            .chips
            .get(chip as usize)
            .ok_or(ChainError::NoSuchChip { chain, chip })?
            .address;
        if let Some(value) = value {
            self.command(Command::WriteRegister {
                target: Target::Chip(address),
                register,
                value,
            })?;
        }
        let answers = self.debug_raw(
            Command::ReadRegister {
                target: Target::Chip(address),
                register,
            },
            DEBUG_REGISTER_WAIT,
            Some((address, register)),
        )?;
        let read = answers
            .iter()
            .find(|r| r.chip_address == address && r.register == register)
            .map(|r| r.value);
        Ok((address, read))
    }

    /// Send `command`, then collect register responses for `wait`, or until the one from
    /// `(chip address, register)` in `stop_at` arrives.
    fn debug_raw(
        &mut self,
        command: Command,
        wait: Duration,
        stop_at: Option<(u8, u8)>,
    ) -> Result<Vec<bm::RegisterResponse>, ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        self.command(command)?;
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        // Nonces arriving meanwhile are accounted as usual: mining is not interrupted.
        while Instant::now() < deadline {
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            if !wait_readable(port.as_ref(), deadline) {
                continue;
            }
            let n = port
                .read(&mut self.buf)
                .map_err(|source| ChainError::Driver { chain, source })?;
            self.decoder.push(&self.buf[..n]);
            let read_at = Instant::now();
            let read_at_us = svcos_common::time::unix_us();
            while let Some(r) = self.decoder.next_response() {
                match r {
                    Response::Register(r) => out.push(r),
                    Response::Nonce(n) => self.on_nonce(n, read_at, read_at_us),
                }
            }
            if let Some((address, register)) = stop_at
                && out
                    .iter()
                    .any(|r| r.chip_address == address && r.register == register)
            {
                break;
            }
        }
        Ok(out)
    }

    fn apply_power(&mut self) {
        let want = self.powered && self.enabled;
        let brought_up = self.port.is_some() && !self.chips.is_empty();
        if want && !brought_up {
            // The board thread has switched the chain back on: the chips lost everything.
            self.cold_start();
        } else if !want && brought_up {
            // The board thread cuts the chain's power after this; stop feeding first.
            self.park_port();
            self.chips.clear();
            self.chip_version_mask = None;
            self.slots.clear();
            self.save_state();
        }
        if !want {
            let status = if self.enabled {
                ChainStatus::Idle
            } else {
                ChainStatus::Disabled
            };
            self.set_status(status);
        }
    }

    fn new_job(&mut self, job: Arc<ActiveJob>) {
        let invalidates = self
            .job
            .as_ref()
            .is_none_or(|old| job.generation > old.generation);
        self.job = Some(job);
        if invalidates {
            // The new work goes out now, ahead of anything else queued for this chain.
            self.clean_pending = self.job.as_ref().map(|j| j.generation);
            self.next_frame_at = Instant::now();
            if self.feeding() {
                self.send_frame();
            }
        }
    }

    fn frame_interval(&self, version_mask: u32) -> Duration {
        let alive = self.chips.iter().filter(|c| c.alive).count() as u32;
        let mhz = self.mean_mhz();
        let hs = self.setup.chip_model.nominal_hashrate(mhz) * f64::from(alive.max(1));
        // One frame covers 2^32 nonces times every version the chips may roll.
        let space = 2f64.powi(32 + version_mask.count_ones() as i32);
        let floor = Duration::from_nanos(2 * bm::wire_time_ns(bm::JOB_FRAME_LEN, self.baud()));
        Duration::from_secs_f64((space / hs.max(1.0)).min(MAX_FRAME_INTERVAL.as_secs_f64()))
            .max(floor)
    }

    fn baud(&self) -> u32 {
        self.port.as_ref().map_or(bm::DEFAULT_BAUD, |p| p.baud())
    }

    fn mean_mhz(&self) -> f64 {
        if self.chips.is_empty() {
            return 0.0;
        }
        self.chips.iter().map(|c| c.mhz).sum::<f64>() / self.chips.len() as f64
    }

    fn send_frame(&mut self) {
        let Some(job) = self.job.clone() else { return };
        let mut out = Vec::with_capacity(bm::JOB_FRAME_LEN + 11);
        if self.chip_version_mask != Some(job.version_mask) {
            Command::WriteRegister {
                target: Target::All,
                register: reg::VERSION_MASK,
                value: bm::version_mask_register(job.version_mask),
            }
            .encode_into(&mut out);
            self.chip_version_mask = Some(job.version_mask);
        }
        let elapsed_s = (svcos_common::time::unix_ms() - job.arrived_unix_ms).max(0) as u64 / 1000;
        let counter = self.frame_counter;
        let work = Work::roll(&job, self.chain(), counter, elapsed_s);
        self.frame_counter = self.frame_counter.wrapping_add(1);
        let job_id = self.next_job_id;
        self.next_job_id = self.next_job_id.wrapping_add(1);
        let header = work.header_bytes(work.base_version(), 0);
        out.extend_from_slice(&bm::Job::from_header_bytes(job_id, &header).encode());
        let record = FrameRecord {
            job_id,
            counter,
            work: work.clone(),
        };
        self.slots.store(usize::from(job_id), work);
        let interval = self.frame_interval(job.version_mask);
        let Some(port) = self.port.as_mut() else {
            return;
        };
        match port.write_all(&out) {
            Ok(()) => {
                self.frames_sent += 1;
                if self.clean_pending == Some(job.generation) {
                    self.clean_pending = None;
                    self.links
                        .probes
                        .clean_frame_written(job.generation, job.arrived.elapsed());
                }
                // After the write, so the latency above never includes it.
                jobtable::push(&self.frames, record);
                self.links.saver.wake();
            }
            Err(e) => {
                tracing::warn!(chain = self.chain(), error = %e, "job write failed");
                self.set_status(ChainStatus::Fault(e.to_string()));
            }
        }
        self.next_frame_at = Instant::now() + interval;
    }

    fn read_responses(&mut self) {
        let Some(port) = self.port.as_mut() else {
            return;
        };
        let n = match port.read(&mut self.buf) {
            Ok(n) => n,
            Err(e) => {
                // A vanished UART (unplugged adapter, hw-sim gone) keeps polling readable with
                // an error: let go of it instead of spinning.
                tracing::warn!(chain = self.setup.chain_id, error = %e, "uart read failed");
                self.port = None;
                self.links.uarts.remove(self.setup.chain_id);
                self.links.uart_lost.notify_one();
                self.set_status(ChainStatus::Fault(e.to_string()));
                return;
            }
        };
        if n == 0 {
            // Readable yet nothing to read, again and again, is a hung-up line: under a
            // real-time priority it must not become a spin.
            self.empty_reads += 1;
            if self.empty_reads > MAX_EMPTY_READS {
                tracing::warn!(chain = self.setup.chain_id, "uart hung up");
                self.port = None;
                self.links.uarts.remove(self.setup.chain_id);
                self.links.uart_lost.notify_one();
                self.set_status(ChainStatus::Fault("UART hung up".into()));
            }
            return;
        }
        self.empty_reads = 0;
        let read_at = Instant::now();
        let read_at_us = svcos_common::time::unix_us();
        self.decoder.push(&self.buf[..n]);
        while let Some(r) = self.decoder.next_response() {
            if let Response::Nonce(nonce) = r {
                self.on_nonce(nonce, read_at, read_at_us);
            }
        }
    }

    fn on_nonce(&mut self, n: bm::NonceResponse, read_at: Instant, read_at_us: i64) {
        let now_ms = self.now_ms();
        let chips = self.chips.len() as u32;
        let chip = bm::chip_index_for_nonce(n.nonce, chips).map(|c| c as usize);
        let generation = self.links.generation.load(Ordering::Acquire);
        let verdict = self.slots.check(
            usize::from(n.job_id),
            n.nonce,
            n.version_bits,
            self.setup.ticket,
            generation,
        );
        match verdict {
            NonceVerdict::Valid {
                difficulty,
                version,
            } => {
                let hashes = self.setup.ticket.hashes_per_nonce() * self.setup.hashes_scale;
                self.acct.record_nonce(chip, now_ms, hashes);
                if let Some(c) = chip.and_then(|c| self.chips.get_mut(c))
                    && !c.alive
                {
                    c.alive = true;
                    self.links.state_changed.notify_one();
                }
                let Some(work) = self.slots.get(usize::from(n.job_id)) else {
                    return;
                };
                if difficulty >= work.job.share_difficulty {
                    let share = PendingShare {
                        request: SubmitShareRequest {
                            job_id: work.job.job_id.clone(),
                            pool_epoch: work.job.pool_epoch,
                            extranonce2: work.extranonce2.as_bytes().to_vec(),
                            ntime: work.ntime,
                            nonce: n.nonce,
                            version,
                            difficulty,
                            chain_id: self.setup.chain_id,
                            chip: chip.map_or(u32::MAX, |c| c as u32),
                            found_at_us: read_at_us,
                        },
                        generation: work.job.generation,
                        read_at,
                    };
                    if self.links.shares.try_send(share).is_err() {
                        self.links.shares_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            NonceVerdict::HwError => self.acct.record_hw_error(chip),
            NonceVerdict::Duplicate => self.acct.duplicates += 1,
            NonceVerdict::Stale | NonceVerdict::Unknown => self.acct.stale += 1,
        }
    }

    fn housekeeping(&mut self) {
        let now_ms = self.now_ms();
        if self.status == ChainStatus::Mining {
            // A chip is dead when it has been silent for many of its expected nonce intervals.
            // Expected from the nominal rate, or from what its live neighbours really do over
            // the last minute when that is slower (a hot, throttled or starved board slows
            // every chip alike, which must not read as chips dying).
            let nominal_hs = self.setup.chip_model.nominal_hashrate(self.mean_mhz());
            let alive = self.chips.iter().filter(|c| c.alive).count().max(1) as f64;
            let measured_hs = self.acct.rates(now_ms).hs_1m / alive;
            let per_chip_hs = if measured_hs > 0.0 {
                nominal_hs.min(measured_hs)
            } else {
                nominal_hs
            } / self.setup.hashes_scale.max(1e-12);
            let interval_ms = self.setup.ticket.hashes_per_nonce() / per_chip_hs.max(1e-9) * 1e3;
            let silence =
                (interval_ms * DEAD_AFTER_INTERVALS).max(DEAD_AFTER_MIN.as_millis() as f64) as u64;
            let mut changed = false;
            for i in 0..self.chips.len() {
                let silent = self.acct.chip_silent(i, now_ms, silence);
                if silent && self.chips[i].alive {
                    tracing::warn!(
                        chain = self.chain(),
                        chip = i,
                        "chip stopped finding nonces"
                    );
                    self.chips[i].alive = false;
                    changed = true;
                }
            }
            if changed {
                self.links.state_changed.notify_one();
                if self.chips.iter().all(|c| !c.alive) {
                    self.set_status(ChainStatus::Fault("no chip is hashing".into()));
                }
            }
        }
        self.publish();
        self.save_state();
    }

    fn publish(&mut self) {
        let now_ms = self.now_ms();
        let rates = self.acct.rates(now_ms);
        let alive = self.chips.iter().filter(|c| c.alive).count() as u32;
        let mhz = self.mean_mhz();
        let chips = (0..self.chips.len())
            .map(|i| {
                let hs_1m = self.acct.chip_rate_1m(i, now_ms);
                let c = &self.chips[i];
                let stats = &self.acct.chips[i];
                ChipSnapshot {
                    address: c.address,
                    frequency_mhz: c.mhz,
                    nonces: stats.nonces,
                    hw_errors: stats.hw_errors,
                    hs_1m,
                    alive: c.alive,
                }
            })
            .collect();
        let snap = ChainSnapshot {
            chain_id: self.setup.chain_id,
            status: self.status.clone(),
            device: self.setup.device.clone(),
            baud: self.baud(),
            chip_model: self.setup.chip_model.name().to_string(),
            chips_expected: self.setup.chips_expected,
            chips,
            nonces: self.acct.nonces,
            hw_errors: self.acct.hw_errors,
            duplicates: self.acct.duplicates,
            stale: self.acct.stale,
            crc_errors: self.decoder.stats().crc_errors,
            rates,
            expected_hs: if self.status == ChainStatus::Mining {
                self.setup.chip_model.nominal_hashrate(mhz) * f64::from(alive)
            } else {
                0.0
            },
            frequency_mhz: mhz,
            ticket_difficulty: self.setup.ticket.difficulty(),
            frames_sent: self.frames_sent,
            enabled: self.enabled,
        };
        self.snap.send_replace(Arc::new(snap));
    }

    fn save_state(&mut self) {
        // Only a chain we are attached to can be re-attached: without the port (powered down,
        // UART lost, bring-up failed) the chips' configuration is unknown, so save no chips.
        let attached = self.port.is_some();
        let s = SavedChain {
            chain_id: self.setup.chain_id,
            device: self.setup.device.clone(),
            baud: self.baud(),
            address_interval: bm::address_interval(self.chips.len() as u32),
            chip_addresses: if attached {
                self.chips.iter().map(|c| c.address).collect()
            } else {
                Vec::new()
            },
            chips_expected: self.setup.chips_expected,
            frequency_mhz: self.chips.iter().map(|c| c.mhz).collect(),
            ticket_difficulty: self.setup.ticket.difficulty(),
            enabled: self.enabled,
            nonces: self.acct.nonces,
            hw_errors: self.acct.hw_errors,
            duplicates: self.acct.duplicates,
            stale: self.acct.stale,
            chip_nonces: self.acct.chips.iter().map(|c| c.nonces).collect(),
            chip_hw_errors: self.acct.chips.iter().map(|c| c.hw_errors).collect(),
            // The saver fills these from the frame ring.
            frames: Vec::new(),
        };
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }

    // ---- bring-up -------------------------------------------------------------------------

    fn cold_start(&mut self) {
        self.set_status(ChainStatus::Initializing);
        match self.bring_up() {
            Ok(()) => {
                self.set_status(ChainStatus::Mining);
                // Work that arrived during bring-up goes out first.
                if let Some(job) = self.job.clone() {
                    self.clean_pending = None;
                    self.job = None;
                    self.new_job(job);
                }
            }
            Err(ChainError::NoChips { .. }) => {
                tracing::warn!(chain = self.chain(), "no chips answered");
                self.park_port();
                self.set_status(ChainStatus::Missing);
            }
            Err(e) => {
                tracing::warn!(chain = self.chain(), error = %e, "bring-up failed");
                self.park_port();
                self.set_status(ChainStatus::Fault(e.to_string()));
            }
        }
        self.save_state();
    }

    /// Keep the UART open but unused (powered down, or bring-up failed).
    fn park_port(&mut self) {
        if let Some(p) = self.port.take() {
            self.spare_port = Some(p);
        }
    }

    fn reattach(&mut self, r: Reattach) {
        let Reattach {
            port,
            saved,
            frames,
            decoder,
            early,
        } = r;
        let n = saved.chip_addresses.len();
        self.chips = saved
            .chip_addresses
            .iter()
            .enumerate()
            .map(|(i, &address)| {
                let mhz = saved
                    .frequency_mhz
                    .get(i)
                    .copied()
                    .unwrap_or(self.setup.target_mhz);
                Chip {
                    address,
                    mhz,
                    set_mhz: mhz,
                    alive: true,
                }
            })
            .collect();
        self.acct = ChainAccounting::new(n, self.now_ms());
        self.restore_counters(&saved);
        self.enabled = saved.enabled;
        // The chips still hold the old mask; write it again with the first job to be sure.
        self.chip_version_mask = None;
        self.links
            .uarts
            .set(self.setup.chain_id, &self.setup.device, port.poll_fd());
        self.port = Some(port);
        self.setup.ticket = TicketMask::for_difficulty(saved.ticket_difficulty);
        // The job table: the chips keep hashing these frames until our first new job, and the
        // nonces they found while nobody listened are verified against them like any other.
        let restored = frames.len();
        for f in &frames {
            self.slots.store(usize::from(f.job_id), f.work.clone());
        }
        if let Some(last) = frames.last() {
            self.next_job_id = last.job_id.wrapping_add(1);
            self.frame_counter = frames
                .iter()
                .map(|f| f.counter)
                .max()
                .unwrap_or(0)
                .wrapping_add(1);
        }
        *self.frames.lock().unwrap_or_else(|p| p.into_inner()) = frames.into();
        self.decoder = decoder;
        self.set_status(ChainStatus::Mining);
        let read_at = Instant::now();
        let read_at_us = svcos_common::time::unix_us();
        let buffered = early.len();
        for n in early {
            self.on_nonce(n, read_at, read_at_us);
        }
        while let Some(r) = self.decoder.next_response() {
            if let Response::Nonce(n) = r {
                self.on_nonce(n, read_at, read_at_us);
            }
        }
        tracing::info!(
            chain = self.chain(),
            frames = restored,
            buffered_nonces = buffered,
            "re-attached with the saved job table"
        );
        self.save_state();
    }

    /// Counters from the re-attach file (per chip by index, as far as both have chips).
    fn restore_counters(&mut self, saved: &SavedChain) {
        self.acct.nonces = saved.nonces;
        self.acct.hw_errors = saved.hw_errors;
        self.acct.duplicates = saved.duplicates;
        self.acct.stale = saved.stale;
        for (i, c) in self.acct.chips.iter_mut().enumerate() {
            c.nonces = saved.chip_nonces.get(i).copied().unwrap_or(0);
            c.hw_errors = saved.chip_hw_errors.get(i).copied().unwrap_or(0);
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ChainError> {
        let chain = self.chain();
        let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
        port.write_all(bytes)
            .map_err(|source| ChainError::Driver { chain, source })
    }

    fn command(&mut self, cmd: Command) -> Result<(), ChainError> {
        self.write(&cmd.encode())
    }

    /// Register responses until `deadline`, or until `quiet` passes without one after the
    /// first. Nonces that arrive meanwhile are handled as usual.
    fn collect_registers(
        &mut self,
        register: u8,
        deadline: Instant,
        quiet: Duration,
    ) -> Result<Vec<bm::RegisterResponse>, ChainError> {
        let chain = self.chain();
        let mut out = Vec::new();
        let mut last = None::<Instant>;
        loop {
            let now = Instant::now();
            let mut until = deadline;
            if let Some(l) = last {
                until = until.min(l + quiet);
            }
            if now >= until {
                return Ok(out);
            }
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            if !wait_readable(port.as_ref(), until) {
                continue;
            }
            let n = port
                .read(&mut self.buf)
                .map_err(|source| ChainError::Driver { chain, source })?;
            self.decoder.push(&self.buf[..n]);
            let read_at = Instant::now();
            let read_at_us = svcos_common::time::unix_us();
            while let Some(r) = self.decoder.next_response() {
                match r {
                    Response::Register(r) if r.register == register => {
                        out.push(r);
                        last = Some(Instant::now());
                    }
                    Response::Register(_) => {}
                    Response::Nonce(n) => self.on_nonce(n, read_at, read_at_us),
                }
            }
        }
    }

    fn bring_up(&mut self) -> Result<(), ChainError> {
        let chain = self.chain();
        let started = Instant::now();
        let mut port: Box<dyn ChainPort> = match self.spare_port.take() {
            Some(mut p) => {
                p.set_baud(bm::DEFAULT_BAUD)
                    .map_err(|source| ChainError::Driver { chain, source })?;
                p
            }
            None => Box::new(
                SerialChain::open(&self.setup.device, bm::DEFAULT_BAUD)
                    .map_err(|source| ChainError::Driver { chain, source })?,
            ),
        };
        port.clear_input()
            .map_err(|source| ChainError::Driver { chain, source })?;
        self.links
            .uarts
            .set(chain, &self.setup.device, port.poll_fd());
        self.port = Some(port);
        self.decoder = ResponseDecoder::new();
        self.slots.clear();
        self.chip_version_mask = None;

        // 1. Enumerate: every chip answers a broadcast chip-id read, one 11-byte response each.
        self.command(Command::ReadRegister {
            target: Target::All,
            register: reg::CHIP_ADDRESS,
        })?;
        let answer_time = Duration::from_nanos(bm::wire_time_ns(
            bm::RESPONSE_LEN * self.setup.chips_expected.max(1) as usize,
            bm::DEFAULT_BAUD,
        ));
        let ids = self.collect_registers(
            reg::CHIP_ADDRESS,
            Instant::now() + answer_time * 3 + Duration::from_millis(200),
            answer_time / 4 + Duration::from_millis(30),
        )?;
        let detected = ids.len() as u32;
        if detected == 0 {
            return Err(ChainError::NoChips {
                chain,
                device: self.setup.device.clone(),
            });
        }
        if let Some(model) = ids
            .first()
            .and_then(|r| ChipModel::from_chip_id((r.value >> 16) as u16))
            && model != self.setup.chip_model
        {
            tracing::warn!(
                chain,
                configured = self.setup.chip_model.name(),
                found = model.name(),
                "chip model differs from config; using what answered"
            );
            self.setup.chip_model = model;
        }
        if detected < self.setup.chips_expected {
            tracing::warn!(
                chain,
                detected,
                expected = self.setup.chips_expected,
                "chips missing"
            );
        }

        // 2. Addresses in chain order at the interval for the chips present.
        let mut out = Vec::new();
        Command::ChainInactive.encode_into(&mut out);
        for i in 0..detected {
            Command::SetAddress {
                address: bm::chip_address(i, detected),
            }
            .encode_into(&mut out);
        }
        // 3. Ticket mask and version rolling before any work.
        Command::WriteRegister {
            target: Target::All,
            register: reg::TICKET_MASK,
            value: self.setup.ticket.to_register(),
        }
        .encode_into(&mut out);
        self.write(&out)?;
        let start_mhz = POWER_ON_MHZ.min(self.setup.target_mhz);
        self.chips = (0..detected)
            .map(|i| Chip {
                address: bm::chip_address(i, detected),
                mhz: start_mhz,
                set_mhz: self.setup.target_mhz,
                alive: true,
            })
            .collect();
        let now = self.now_ms();
        let mut acct = ChainAccounting::new(detected as usize, now);
        // Counters survive a power cycle of the chain; windows start again.
        acct.nonces = self.acct.nonces;
        acct.hw_errors = self.acct.hw_errors;
        acct.duplicates = self.acct.duplicates;
        acct.stale = self.acct.stale;
        for (i, c) in acct.chips.iter_mut().enumerate() {
            if let Some(old) = self.acct.chips.get(i) {
                c.nonces = old.nonces;
                c.hw_errors = old.hw_errors;
            }
        }
        self.acct = acct;

        // 4. PLL ramp in steps to the target (scaled by any thermal cut-back).
        let target = self.setup.target_mhz * self.freq_scale;
        self.ramp_chip(None, target)?;

        // 5. Baud switch: chips first (the command goes out at the old speed), then the host.
        if self.setup.baud != bm::DEFAULT_BAUD {
            let divider = BaudDivider::for_baud(self.setup.baud)
                .map_err(|source| ChainError::Codec { chain, source })?;
            let first = self.chips[0].address;
            self.command(Command::ReadRegister {
                target: Target::Chip(first),
                register: reg::MISC_CONTROL,
            })?;
            let misc = self
                .collect_registers(
                    reg::MISC_CONTROL,
                    Instant::now() + Duration::from_millis(100),
                    Duration::from_millis(1),
                )?
                .first()
                .map_or(0, |r| r.value);
            self.command(Command::WriteRegister {
                target: Target::All,
                register: reg::MISC_CONTROL,
                value: divider.to_misc_control(misc),
            })?;
            let baud = self.setup.baud;
            let port = self.port.as_mut().ok_or(ChainError::NotRunning { chain })?;
            port.set_baud(baud)
                .map_err(|source| ChainError::Driver { chain, source })?;
            // Confirm the chips are listening at the new speed.
            self.command(Command::ReadRegister {
                target: Target::Chip(first),
                register: reg::CHIP_ADDRESS,
            })?;
            let ok = self.collect_registers(
                reg::CHIP_ADDRESS,
                Instant::now() + Duration::from_millis(200),
                Duration::from_millis(1),
            )?;
            if ok.is_empty() {
                return Err(ChainError::BaudSwitch { chain, baud });
            }
        }
        tracing::info!(
            chain,
            chips = detected,
            mhz = target,
            baud = self.baud(),
            ms = started.elapsed().as_millis() as u64,
            "chain brought up"
        );
        Ok(())
    }

    /// Ramp one chip (or all) to `mhz` in [`PLL_STEP_MHZ`] steps; returns the frequency reached.
    fn ramp_chip(&mut self, chip: Option<usize>, mhz: f64) -> Result<f64, ChainError> {
        let chain = self.chain();
        let final_pll =
            Pll::for_frequency(mhz).map_err(|source| ChainError::Codec { chain, source })?;
        let indices: Vec<usize> = match chip {
            Some(i) => vec![i],
            None => (0..self.chips.len()).collect(),
        };
        let Some(&first) = indices.first() else {
            return Ok(mhz);
        };
        let mut current = self.chips[first].mhz;
        let target_mhz = final_pll.frequency_mhz();
        let target = match chip {
            Some(i) => Target::Chip(self.chips[i].address),
            None => Target::All,
        };
        while (target_mhz - current).abs() > 1e-6 {
            let step = (target_mhz - current).clamp(-PLL_STEP_MHZ, PLL_STEP_MHZ);
            let next = current + step;
            let pll = if (next - target_mhz).abs() < 1e-6 {
                final_pll
            } else {
                Pll::for_frequency(next).map_err(|source| ChainError::Codec { chain, source })?
            };
            self.command(Command::WriteRegister {
                target,
                register: reg::PLL0_PARAMETER,
                value: pll.to_register(),
            })?;
            current = if (next - target_mhz).abs() < 1e-6 {
                target_mhz
            } else {
                next
            };
            std::thread::sleep(PLL_STEP_PAUSE);
        }
        for i in indices {
            self.chips[i].mhz = target_mhz;
        }
        Ok(target_mhz)
    }

    /// Re-apply every chip's set frequency times the current scale: one broadcast ramp when
    /// the chips agree (the common case), chip by chip otherwise.
    fn apply_scale(&mut self) -> Result<(), ChainError> {
        if self.port.is_none() || self.chips.is_empty() {
            return Ok(());
        }
        let same = |f: fn(&Chip) -> f64, chips: &[Chip]| {
            chips.windows(2).all(|w| (f(&w[0]) - f(&w[1])).abs() < 1e-6)
        };
        if same(|c| c.set_mhz, &self.chips) && same(|c| c.mhz, &self.chips) {
            let target = self.chips[0].set_mhz * self.freq_scale;
            self.ramp_chip(None, target)?;
        } else {
            for i in 0..self.chips.len() {
                let target = self.chips[i].set_mhz * self.freq_scale;
                self.ramp_chip(Some(i), target)?;
            }
        }
        self.publish();
        Ok(())
    }

    fn set_frequency(&mut self, chip: Option<u32>, mhz: f64) -> Result<f64, ChainError> {
        let chain = self.chain();
        if self.port.is_none() || self.chips.is_empty() {
            return Err(ChainError::NotRunning { chain });
        }
        let scaled = mhz * self.freq_scale;
        match chip {
            Some(c) => {
                let i = c as usize;
                if i >= self.chips.len() {
                    return Err(ChainError::NoSuchChip { chain, chip: c });
                }
                self.chips[i].set_mhz = mhz;
                self.ramp_chip(Some(i), scaled)
            }
            None => {
                // Chips may differ after per-chip settings: ramp each from where it is, but
                // with broadcasts when they agree (the common case).
                let uniform = self
                    .chips
                    .windows(2)
                    .all(|w| (w[0].mhz - w[1].mhz).abs() < 1e-6);
                self.chips.iter_mut().for_each(|c| c.set_mhz = mhz);
                if uniform {
                    self.ramp_chip(None, scaled)
                } else {
                    let mut reached = scaled;
                    for i in 0..self.chips.len() {
                        reached = self.ramp_chip(Some(i), scaled)?;
                    }
                    Ok(reached)
                }
            }
        }
        .inspect(|_| {
            self.save_state();
            self.publish();
        })
    }
}
