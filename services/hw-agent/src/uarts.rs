//! Chain UARTs kept open across hw-agent restarts, through the supervisor's descriptor store
//! ([`svcos_common::fdstore`]).
//!
//! Bytes that reach a TTY nobody has open are lost, on a real UART as on hw-sim's PTY. So every
//! chain thread registers a duplicate of its port's descriptor here when it opens or adopts the
//! port; the state saver leaves the set with the supervisor whenever it changes (and every
//! [`REDEPOSIT`], so a restarted supervisor holds them again soon). A new hw-agent fetches them
//! before bring-up and adopts the same open file (baud, termios and the exclusive lock come
//! with it), so the nonces found while it was away are waiting in the kernel's buffer.
//!
//! Once the store holds a UART, nothing else can open that device (the exclusive `flock` is on
//! the shared open file): every path that needs the port (re-attach probe, cold bring-up,
//! power-up after a power-down) reuses the descriptor instead of opening the path again.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use svcos_common::{Layout, fdstore};

/// Deposit again after this long even without a change.
pub const REDEPOSIT: Duration = Duration::from_secs(10);

/// The open UART of each chain, by chain index: (device path, a duplicate of its descriptor).
#[derive(Debug, Default)]
pub struct UartRegistry {
    ports: Mutex<BTreeMap<u32, (String, OwnedFd)>>,
    changed: std::sync::atomic::AtomicBool,
}

impl UartRegistry {
    /// Chain `chain` now uses `fd` for `device` (a duplicate is kept).
    pub fn set(&self, chain: u32, device: &str, fd: impl AsFd) {
        match fd.as_fd().try_clone_to_owned() {
            Ok(dup) => {
                self.lock().insert(chain, (device.to_string(), dup));
                self.changed
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            Err(e) => tracing::warn!(chain, error = %e, "cannot duplicate the UART descriptor"),
        }
    }

    /// Chain `chain` has no usable UART any more (it vanished).
    pub fn remove(&self, chain: u32) {
        if self.lock().remove(&chain).is_some() {
            self.changed
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, (String, OwnedFd)>> {
        self.ports.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The descriptors a previous hw-agent left with the supervisor, by device path (empty when
/// there is no store, e.g. hw-agent run on its own).
pub fn fetch_inherited(layout: &Layout) -> HashMap<String, OwnedFd> {
    // The supervisor knows us by the pidfile it writes right after the fork: a start that wins
    // that race is answered on a second try.
    let mut fetched = fdstore::fetch(layout);
    for _ in 0..5 {
        if fetched.is_ok() || !fdstore::socket_path(layout).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        fetched = fdstore::fetch(layout);
    }
    match fetched {
        Ok(fds) => {
            if !fds.is_empty() {
                tracing::info!(
                    uarts = fds.len(),
                    "adopting UART descriptors kept by the supervisor"
                );
            }
            fds.into_iter().collect()
        }
        Err(e) => {
            tracing::warn!(error = %e, "no UART descriptors from the supervisor");
            HashMap::new()
        }
    }
}

/// Keeps the supervisor's copy current; driven by the state saver.
#[derive(Debug)]
pub struct Depositor {
    layout: Layout,
    last: Option<Instant>,
    warned: bool,
}

impl Depositor {
    /// A depositor for this instance.
    pub fn new(layout: Layout) -> Self {
        Depositor {
            layout,
            last: None,
            warned: false,
        }
    }

    /// Deposit when the registry changed or [`REDEPOSIT`] passed.
    pub fn tick(&mut self, registry: &UartRegistry) {
        let changed = registry
            .changed
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        if !changed && self.last.is_some_and(|t| t.elapsed() < REDEPOSIT) {
            return;
        }
        let ports = registry.lock();
        let fds: Vec<(String, std::os::fd::BorrowedFd<'_>)> = ports
            .values()
            .map(|(device, fd)| (device.clone(), fd.as_fd()))
            .collect();
        match fdstore::deposit(&self.layout, &fds) {
            Ok(()) => {
                self.last = Some(Instant::now());
                self.warned = false;
            }
            Err(e) => {
                if !self.warned {
                    tracing::warn!(error = %e, "UARTs not left with the supervisor; a restart will lose the nonces in flight");
                    self.warned = true;
                }
                // Try again on the next tick.
                self.last = None;
                registry
                    .changed
                    .store(changed, std::sync::atomic::Ordering::Release);
            }
        }
    }
}
