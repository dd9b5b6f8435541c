//! One pseudo-terminal per chain, and the thread that is the chain's UART.
//!
//! The sim owns the PTY master; hw-agent opens the slave path like `/dev/ttyS*`. Bytes take their
//! wire time in both directions: each received byte completes `10 / baud` seconds after the
//! previous one (or after it was written, if the line was idle), and a frame is acted upon only
//! once its last byte has completed; responses are written to the host when their last byte
//! would have left the chip. The baud is the chips' (misc-control register), starting at 115200.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::termios::{self, BaudRate, SetArg};
use nix::sys::time::TimeSpec;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use svcos_bm13xx::{HostFrame, HostFrameDecoder, JOB_FRAME_LEN, RESPONSE_LEN, Response};

use crate::state::Shared;

/// Responses waiting for the wire; beyond this the chip's output FIFO overflows and drops.
const TX_QUEUE_LIMIT: usize = 4096;
/// Nonces the hasher may queue for a chain before it drops them (the chain thread is stalled).
pub(crate) const NONCE_CHANNEL_BOUND: usize = 1024;
/// Longest sleep of an idle chain thread (it re-checks the stop flag this often).
const IDLE_WAKE: Duration = Duration::from_millis(100);
/// How often a chain with no host attached looks for one (a hung-up master polls readable at
/// once, so it cannot be waited on).
const DETACHED_RECHECK: Duration = Duration::from_millis(10);

/// A chain's pseudo-terminal.
#[derive(Debug)]
pub(crate) struct Pty {
    /// The sim's end. The slave is not kept open: a held slave would keep the TTY from ever
    /// being fully closed, so the exclusive lock serialport takes (TIOCEXCL) would outlive
    /// hw-agent and its restart could not re-open the chain (EBUSY for non-root users).
    pub master: OwnedFd,
    /// Path hw-agent opens.
    pub path: String,
}

impl Pty {
    /// Open a raw 115200-baud pseudo-terminal with a non-blocking master.
    pub fn open() -> io::Result<Pty> {
        let pair = nix::pty::openpty(None, None).map_err(io::Error::from)?;
        let path = nix::unistd::ttyname(pair.slave.as_fd())
            .map_err(io::Error::from)?
            .to_string_lossy()
            .into_owned();
        // Raw mode before anyone attaches: with the default ECHO the slave would echo the
        // sim's own responses back into the master.
        let mut t = termios::tcgetattr(pair.slave.as_fd()).map_err(io::Error::from)?;
        termios::cfmakeraw(&mut t);
        termios::cfsetspeed(&mut t, BaudRate::B115200).map_err(io::Error::from)?;
        termios::tcsetattr(pair.slave.as_fd(), SetArg::TCSANOW, &t).map_err(io::Error::from)?;
        let flags = fcntl(pair.master.as_fd(), FcntlArg::F_GETFL).map_err(io::Error::from)?;
        fcntl(
            pair.master.as_fd(),
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
        )
        .map_err(io::Error::from)?;
        // Raw settings stay with the pair after the slave closes; the next opener finds them.
        drop(pair.slave);
        Ok(Pty {
            master: pair.master,
            path,
        })
    }
}

/// The hasher's handle on a chain: queue nonce responses and wake the chain thread.
#[derive(Debug)]
pub(crate) struct ChainHandle {
    /// Nonce responses for the wire.
    pub nonces: SyncSender<[u8; RESPONSE_LEN]>,
    /// Writing a byte wakes the chain thread.
    pub wake: UnixStream,
}

impl ChainHandle {
    /// Queue a response; false when the queue is full (the response is lost, as in a FIFO).
    pub fn send(&self, bytes: [u8; RESPONSE_LEN]) -> bool {
        match self.nonces.try_send(bytes) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Wake the chain thread (a full socket buffer means it is awake already).
    pub fn notify(&self) {
        let _ = (&self.wake).write(&[1]);
    }
}

/// Everything one chain thread owns.
pub(crate) struct ChainLink {
    /// Chain index.
    pub chain: usize,
    /// The PTY (master read/written here).
    pub pty: Pty,
    /// Wake-ups from the hasher and from shutdown.
    pub wake: UnixStream,
    /// Nonce responses from the hasher.
    pub nonces: Receiver<[u8; RESPONSE_LEN]>,
    /// The board.
    pub shared: Arc<Shared>,
    /// Noise draws (seeded per chain).
    pub rng: StdRng,
}

/// Wire time of one byte at `baud`.
fn byte_time(baud: u32) -> Duration {
    Duration::from_nanos(svcos_bm13xx::wire_time_ns(1, baud))
}

impl ChainLink {
    /// Build a link with a noise generator derived from the board seed.
    pub fn new(
        chain: usize,
        pty: Pty,
        wake: UnixStream,
        nonces: Receiver<[u8; RESPONSE_LEN]>,
        shared: Arc<Shared>,
        seed: u64,
    ) -> ChainLink {
        ChainLink {
            chain,
            pty,
            wake,
            nonces,
            shared,
            rng: StdRng::seed_from_u64(
                seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(chain as u64 + 1)),
            ),
        }
    }

    /// Run until the stop flag is set.
    pub fn run(mut self) {
        let mut master = match self.pty.master.try_clone() {
            Ok(fd) => File::from(fd),
            Err(e) => {
                tracing::error!(chain = self.chain, error = %e, "cannot use PTY master");
                return;
            }
        };
        let mut decoder = HostFrameDecoder::new();
        let mut rx: VecDeque<(Instant, u8, u64)> = VecDeque::new();
        let mut rx_clock = Instant::now();
        let mut tx: VecDeque<(Instant, [u8; RESPONSE_LEN])> = VecDeque::new();
        let mut tx_clock = Instant::now();
        let mut buf = [0u8; 4096];
        let mut reported_errors = 0u64;
        let mut logged_read_error = false;
        let mut attached = false;
        // Share-path tracing (off unless SVCOS_SHARE_TRACE is set): when each input byte was
        // read, for the last frame's worth of bytes, and the block each chain last started on.
        let trace = svcos_common::trace::enabled();
        let mut read_at = [0u64; JOB_FRAME_LEN];
        let mut bytes_in = 0usize;
        let mut traced_prev: Option<[u8; 32]> = None;

        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let (baud, live, noise, model) = {
                let b = self.shared.lock();
                let c = &b.chains[self.chain];
                (
                    c.baud,
                    b.chain_live(self.chain),
                    c.crc_noise,
                    b.spec.chip_model,
                )
            };

            if !attached {
                attached = !hung_up(&self.pty.master);
            }
            // Input: stamp each byte with the moment its stop bit completes.
            while attached {
                match master.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if !live {
                            // Unpowered, in reset or unplugged: nobody listens on the wire.
                            continue;
                        }
                        let bt = byte_time(baud);
                        let read_ns = if trace {
                            svcos_common::trace::mono_ns()
                        } else {
                            0
                        };
                        for &byte in &buf[..n] {
                            rx_clock = rx_clock.max(now) + bt;
                            rx.push_back((rx_clock, byte, read_ns));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // EIO: the host closed the slave (hw-agent exited or restarts).
                    Err(e) if e.raw_os_error() == Some(libc::EIO) => attached = false,
                    Err(e) => {
                        if !logged_read_error {
                            tracing::warn!(chain = self.chain, error = %e, "PTY read failed");
                            logged_read_error = true;
                        }
                        break;
                    }
                }
            }
            if !live {
                rx.clear();
            }

            // Deliver the bytes whose wire time has passed, then act on complete frames.
            let mut frames = Vec::new();
            while let Some(&(t, byte, read_ns)) = rx.front() {
                if t > now {
                    break;
                }
                rx.pop_front();
                if trace {
                    read_at[bytes_in % JOB_FRAME_LEN] = read_ns;
                    bytes_in += 1;
                }
                let byte = self.corrupt(byte, noise);
                decoder.push(&[byte]);
                while let Some(frame) = decoder.next_frame() {
                    if trace
                        && let HostFrame::Job(job) = &frame
                        && traced_prev != Some(job.prev_block_hash)
                    {
                        // The first job of a new block on this chain: when its first byte was
                        // read from the UART, and when its last byte's stop bit was on the wire
                        // (`t`, the modelled time; this thread may notice it later, which
                        // a chip on a real wire would not).
                        traced_prev = Some(job.prev_block_hash);
                        let late = Instant::now().saturating_duration_since(t);
                        svcos_common::trace::record(
                            "job",
                            format_args!(
                                "{} {} {} {}",
                                self.chain,
                                hex::encode(job.prev_block_hash),
                                read_at[bytes_in % JOB_FRAME_LEN],
                                svcos_common::trace::mono_ns()
                                    .saturating_sub(late.as_nanos() as u64)
                            ),
                        );
                    }
                    frames.push(frame);
                }
            }
            let mut responses = Vec::new();
            let errors = decoder.stats().crc_errors;
            if !frames.is_empty() || errors != reported_errors {
                let mut b = self.shared.lock();
                let live_now = b.chain_live(self.chain);
                let chain = &mut b.chains[self.chain];
                chain.frame_errors += errors - reported_errors;
                reported_errors = errors;
                if live_now {
                    for frame in frames {
                        responses.extend(chain.handle_frame(model, frame));
                    }
                }
            }
            // The baud may have just changed; responses go out at the new one.
            let tx_baud = if responses.is_empty() {
                baud
            } else {
                self.shared.lock().chains[self.chain].baud
            };
            let queue = |tx: &mut VecDeque<_>, tx_clock: &mut Instant, bytes| {
                if tx.len() < TX_QUEUE_LIMIT {
                    *tx_clock = (*tx_clock).max(now) + byte_time(tx_baud) * RESPONSE_LEN as u32;
                    tx.push_back((*tx_clock, bytes));
                }
            };
            for r in responses {
                queue(&mut tx, &mut tx_clock, Response::encode(&r));
            }
            while let Ok(bytes) = self.nonces.try_recv() {
                queue(&mut tx, &mut tx_clock, bytes);
            }
            let mut sink = [0u8; 64];
            while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}

            // Output: write every response whose last byte has left the chip.
            let mut sent_bytes = 0u64;
            let mut sent_nonces = 0u64;
            while let Some(&(t, mut bytes)) = tx.front() {
                if t > now {
                    break;
                }
                tx.pop_front();
                // Nobody on the wire (unpowered, unplugged, or no host attached): bytes are lost.
                if !live || !attached {
                    continue;
                }
                for b in &mut bytes {
                    *b = self.corrupt(*b, noise);
                }
                // A full PTY buffer (nobody reading) loses bytes as an overrun UART does.
                if let Ok(n) = master.write(&bytes) {
                    sent_bytes += n as u64;
                    if trace && let Ok(Response::Nonce(r)) = Response::decode(&bytes) {
                        svcos_common::trace::record(
                            "nonce",
                            format_args!(
                                "{} {:08x} {}",
                                self.chain,
                                r.nonce,
                                svcos_common::trace::mono_ns()
                            ),
                        );
                    }
                }
                if bytes[RESPONSE_LEN - 1] & 0x80 != 0 {
                    sent_nonces += 1;
                }
            }
            if sent_bytes > 0 {
                let mut b = self.shared.lock();
                b.chains[self.chain].bytes_sent += sent_bytes;
                b.nonces_sent += sent_nonces;
            }

            // Sleep until the byte that completes the pending frame, the next response, or input.
            let mut next: Option<Instant> = None;
            if !rx.is_empty() {
                let idx = decoder.wanted().min(rx.len()) - 1;
                next = Some(rx[idx].0);
            }
            if let Some(&(t, _)) = tx.front() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
            let cap = if attached {
                IDLE_WAKE
            } else {
                DETACHED_RECHECK
            };
            let timeout = next
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(cap)
                .min(cap);
            if timeout.is_zero() {
                continue;
            }
            let timeout = Some(TimeSpec::from_duration(timeout));
            if attached {
                let mut fds = [
                    PollFd::new(self.pty.master.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
                ];
                let _ = ppoll(&mut fds, timeout, None);
            } else {
                let mut fds = [PollFd::new(self.wake.as_fd(), PollFlags::POLLIN)];
                let _ = ppoll(&mut fds, timeout, None);
            }
        }
    }

    fn corrupt(&mut self, byte: u8, probability: f64) -> u8 {
        if probability > 0.0 && self.rng.random::<f64>() < probability {
            byte ^ (1u8 << self.rng.random_range(0..8))
        } else {
            byte
        }
    }
}

/// Whether no host has the slave open (the master then polls as hung up).
fn hung_up(master: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
    match ppoll(
        &mut fds,
        Some(TimeSpec::from_duration(Duration::ZERO)),
        None,
    ) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP)),
        Err(_) => true,
    }
}
