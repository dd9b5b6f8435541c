//! One hashboard chain: bring-up, re-attach, and the real-time loop on its own OS thread.
//!
//! The thread owns the UART, the response decoder, the job-id ring and the chain's accounting,
//! in a [`Worker`] it keeps locked except while it sleeps in `poll(2)` on two descriptors, the
//! UART and a wake-up socket. A nonce is handled the moment its bytes arrive; a new job is taken
//! on the caller's thread while this one sleeps ([`ChainHandle::job`]: no wake-up on the way to
//! the wire) and is queued for it otherwise; the only other wake-up is the next frame's due
//! time. Commands arrive on a channel
//! ([`ChainCommand`]); state leaves as a read-only [`ChainSnapshot`] in a `watch` channel, so no
//! reader ever waits for the chain and the chain never waits for a reader.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, Weak};
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

mod bringup;
mod debug;
mod mining_loop;
mod reattach;

pub use reattach::{Probed, probe_reattach};

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
/// Frames whose work stays held for late nonces: one answers for the newest, the rest cover
/// nonces still in the UART when the next frame went out (at the 5 s frame interval, over two
/// minutes of history; on a fast non-rolling chain, milliseconds, which is all it needs).
const JOB_IDS_HELD: usize = 24;
/// How long a debug/diagnostic register read waits for the chip's answer.
const DEBUG_REGISTER_WAIT: Duration = Duration::from_millis(200);
/// A failed bring-up is tried again after this, doubling up to [`BRING_UP_RETRY_CAP`]: a board
/// that answers late after power-on (or a loaded controller that missed the answer window)
/// comes back by itself, and an absent board costs one broadcast read every half minute.
const BRING_UP_RETRY_FLOOR: Duration = Duration::from_secs(1);
const BRING_UP_RETRY_CAP: Duration = Duration::from_secs(30);
/// When a job frame the UART would not take is tried again.
const FRAME_RETRY: Duration = Duration::from_millis(10);

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

/// How [`ChainHandle::job`] delivered a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Taken on the caller's thread while the chain thread slept.
    Direct,
    /// Queued for the chain thread: it was busy, or its UART refused the last frame.
    Queued,
    /// The chain thread is gone.
    Gone,
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
    /// The chain thread's state, locked by that thread except while it sleeps (see
    /// [`ChainHandle::job`]). Weak: the worker (and its UART) goes with the thread.
    worker: Weak<Mutex<Worker>>,
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

    /// Hand the chain a job. While the chain thread sleeps, the caller runs the job's arrival
    /// itself: for a new block that writes the first frame on the caller's thread, in the
    /// same turn that decoded the job, instead of waking a chain thread per chain (a wake-up
    /// each, and on two cores they preempt the loop that hands the job to the next chain).
    /// While the thread is busy (a nonce, a bring-up, a debug read), or its UART refused the
    /// last frame (a write then blocks for the serial timeout), the job is queued for it, as
    /// any command. [`Delivery::Gone`] only when the thread has ended.
    pub fn job(&self, job: Arc<ActiveJob>) -> Delivery {
        if let Some(worker) = self.worker.upgrade()
            && let Ok(mut w) = worker.try_lock()
            && !w.refusing
        {
            w.new_job(job);
            let wake = w.wants_wake();
            drop(w);
            if wake {
                let _ = self.waker.send(&[1]);
            }
            return Delivery::Direct;
        }
        if self.send(ChainCommand::Job(job)) {
            Delivery::Queued
        } else {
            Delivery::Gone
        }
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
    let mut worker = Worker::new(setup, rx, wake_rx, snap_tx, Arc::clone(&saved), links);
    worker.frames = Arc::clone(&frames);
    let worker = Arc::new(Mutex::new(worker));
    let weak = Arc::downgrade(&worker);
    let thread = std::thread::Builder::new()
        .name(format!("chain{chain_id}"))
        .stack_size(crate::THREAD_STACK)
        .spawn(move || {
            raise_priority(chain_id);
            Worker::run(&worker, start);
        })?;
    Ok(ChainHandle {
        chain_id,
        commands: tx,
        waker,
        snapshot: snap_rx,
        saved,
        frames,
        worker: weak,
        thread: Mutex::new(Some(thread)),
    })
}

/// Real-time priority (SCHED_FIFO) for a chain thread when the process may have it (root or
/// CAP_SYS_NICE on a miner): a clean job must not wait behind the API or a log write. Without
/// the privilege the thread stays at normal priority.
fn raise_priority(chain: u32) {
    set_scheduling(Some(CHAIN_RT_PRIORITY), &format!("chain{chain}"));
}

pub use svcos_common::sched::set_scheduling;

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
    /// When this thread took the job of `clean_pending` from its commands, on the share-path
    /// trace clock (`svcos_common::trace`); 0 with the trace off.
    clean_taken_ns: u64,
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
    /// When to try a failed bring-up again (`None`: it did not fail, or the chain is off).
    retry_bring_up_at: Option<Instant>,
    bring_up_backoff: svcos_common::ipc::Backoff,
    /// Every chip fell silent while fed: the chain reports a fault but keeps being fed, so the
    /// first nonce of a chip that was only starved (a stalled host, a slow sim) ends it; a
    /// bring-up retry is scheduled for chips that really stopped.
    all_silent: bool,
    /// Frames dropped because the UART would not take them in time (the far end stalled).
    frames_dropped: u64,
    /// The UART refused the last frame (timed out): a caller's thread leaves this chain's jobs
    /// to its own thread, so a stalled line blocks that thread, not the job fan-out.
    refusing: bool,
    /// A UART let go of on a caller's thread, closed by the chain thread's next turn.
    lost_port: Option<Box<dyn ChainPort>>,
    /// The deadline the chain thread sleeps until (`None`: it is not asleep).
    sleeping_until: Option<Instant>,
    next_housekeeping: Instant,
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
            slots: WorkSlots::new(JOB_IDS, JOB_IDS_HELD),
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
            clean_taken_ns: 0,
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
            retry_bring_up_at: None,
            bring_up_backoff: svcos_common::ipc::Backoff::new(
                BRING_UP_RETRY_FLOOR,
                BRING_UP_RETRY_CAP,
            ),
            all_silent: false,
            frames_dropped: 0,
            refusing: false,
            lost_port: None,
            sleeping_until: None,
            next_housekeeping: Instant::now() + HOUSEKEEPING,
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn chain(&self) -> u32 {
        self.setup.chain_id
    }
}

/// A worker on a fake UART for the seams' unit tests: the test plays the chips on the other end
/// of a socket pair, and every byte the worker writes is recorded.
#[cfg(test)]
pub(super) mod testkit {
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, BorrowedFd};
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::drivers::DriverError;

    pub(super) struct FakePort {
        stream: UnixStream,
        written: Arc<Mutex<Vec<u8>>>,
        refuse: Arc<Mutex<Option<std::io::ErrorKind>>>,
        writer: Arc<Mutex<Option<std::thread::ThreadId>>>,
    }

    impl ChainPort for FakePort {
        fn device(&self) -> &str {
            "fake"
        }
        fn baud(&self) -> u32 {
            bm::DEFAULT_BAUD
        }
        fn set_baud(&mut self, _baud: u32) -> Result<(), DriverError> {
            Ok(())
        }
        fn write_all(&mut self, bytes: &[u8]) -> Result<(), DriverError> {
            if let Some(kind) = *self.refuse.lock().unwrap() {
                return Err(DriverError::Io {
                    device: "fake".into(),
                    source: kind.into(),
                });
            }
            self.written.lock().unwrap().extend_from_slice(bytes);
            *self.writer.lock().unwrap() = Some(std::thread::current().id());
            Ok(())
        }
        fn read(&mut self, buf: &mut [u8]) -> Result<usize, DriverError> {
            Ok(self.stream.read(buf).unwrap_or(0))
        }
        fn clear_input(&mut self) -> Result<(), DriverError> {
            Ok(())
        }
        fn poll_fd(&self) -> BorrowedFd<'_> {
            self.stream.as_fd()
        }
    }

    /// The chips' end of a fake UART.
    pub(super) struct Chips {
        stream: UnixStream,
        written: Arc<Mutex<Vec<u8>>>,
        refuse: Arc<Mutex<Option<std::io::ErrorKind>>>,
        writer: Arc<Mutex<Option<std::thread::ThreadId>>>,
    }

    impl Chips {
        /// Put responses on the wire, as chips would.
        pub(super) fn answer(&mut self, responses: &[Response]) {
            for r in responses {
                self.stream.write_all(&r.encode()).unwrap();
            }
        }
        /// Everything the host wrote so far.
        pub(super) fn written(&self) -> Vec<u8> {
            self.written.lock().unwrap().clone()
        }
        /// The thread that wrote last.
        pub(super) fn last_writer(&self) -> Option<std::thread::ThreadId> {
            *self.writer.lock().unwrap()
        }
        /// Make the host's writes fail with `kind` (`None`: take them again).
        pub(super) fn refuse_writes(&self, kind: Option<std::io::ErrorKind>) {
            *self.refuse.lock().unwrap() = kind;
        }
    }

    pub(super) fn port() -> (Box<dyn ChainPort>, Chips) {
        let (host, chips) = UnixStream::pair().unwrap();
        let written = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(Mutex::new(None));
        let writer = Arc::new(Mutex::new(None));
        (
            Box::new(FakePort {
                stream: host,
                written: Arc::clone(&written),
                refuse: Arc::clone(&refuse),
                writer: Arc::clone(&writer),
            }),
            Chips {
                stream: chips,
                written,
                refuse,
                writer,
            },
        )
    }

    pub(super) fn setup() -> ChainSetup {
        ChainSetup {
            chain_id: 1,
            device: "fake".into(),
            chips_expected: 4,
            chip_model: ChipModel::Bm1366,
            target_mhz: 400.0,
            baud: bm::DEFAULT_BAUD,
            ticket: TicketMask { zero_bits: 8 },
            hashes_scale: 1.0,
            enabled: true,
        }
    }

    /// A saved chain of `chips` chips at 400 MHz with some counters.
    pub(super) fn saved_chain(chips: u32) -> SavedChain {
        SavedChain {
            chain_id: 1,
            device: "fake".into(),
            baud: bm::DEFAULT_BAUD,
            address_interval: bm::address_interval(chips),
            chip_addresses: (0..chips).map(|i| bm::chip_address(i, chips)).collect(),
            chips_expected: chips,
            frequency_mhz: vec![400.0; chips as usize],
            ticket_difficulty: TicketMask { zero_bits: 8 }.difficulty(),
            enabled: true,
            nonces: 100,
            hw_errors: 3,
            duplicates: 1,
            stale: 2,
            chip_nonces: vec![25; chips as usize],
            chip_hw_errors: vec![0; chips as usize],
            frames: Vec::new(),
        }
    }

    pub(super) struct Kit {
        pub(super) worker: Worker,
        pub(super) shares: tokio::sync::mpsc::Receiver<PendingShare>,
        _commands: Sender<ChainCommand>,
        _dir: tempfile::TempDir,
    }

    /// The plumbing of a chain at work generation `generation`, and where its shares go.
    pub(super) fn links(
        generation: u64,
    ) -> (ChainLinks, tokio::sync::mpsc::Receiver<PendingShare>) {
        let (shares_tx, shares) = tokio::sync::mpsc::channel(16);
        let links = ChainLinks {
            shares: shares_tx,
            generation: Arc::new(AtomicU64::new(generation)),
            probes: Arc::new(Probes::default()),
            state_changed: Arc::new(Notify::new()),
            shares_dropped: Arc::new(AtomicU64::new(0)),
            uart_lost: Arc::new(Notify::new()),
            uarts: Arc::new(UartRegistry::default()),
            saver: Arc::new(SaverWake::default()),
        };
        (links, shares)
    }

    /// A worker (not running its loop) at work generation `generation`.
    pub(super) fn worker(generation: u64) -> Kit {
        let dir = tempfile::tempdir().unwrap();
        let (commands, rx) = std::sync::mpsc::channel();
        let (_waker, wake) = UnixDatagram::pair().unwrap();
        let setup = setup();
        let (snap, _) = watch::channel(Arc::new(ChainSnapshot::initial(&setup)));
        let (links, shares) = links(generation);
        let worker = Worker::new(setup, rx, wake, snap, Arc::new(Mutex::new(None)), links);
        Kit {
            worker,
            shares,
            _commands: commands,
            _dir: dir,
        }
    }
}
