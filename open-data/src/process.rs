//! Process plumbing of the server: exit codes, the shutdown signal and the allocator trimmer.
//!
//! The firmware's `svcos-common` crate has the same three, but it also carries the gRPC stack
//! (tonic, a protobuf build) that this public server never speaks; the few lines it needs live
//! here instead, on the same maintained crates (tokio-util's `CancellationToken`, libc).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Process exit codes (sysexits), the values systemd's `RestartPreventExitStatus` lists.
pub mod exit {
    /// A runtime failure (restart).
    pub const FAILURE: u8 = 1;
    /// Bad command line (EX_USAGE): never restarted.
    pub const USAGE: u8 = 64;
    /// A dataset file or feed is invalid (EX_CONFIG): never restarted.
    pub const CONFIG: u8 = 78;
}

/// A cloneable shutdown signal (SIGTERM and SIGINT trigger it).
pub type Shutdown = CancellationToken;

/// Cancel `shutdown` on SIGTERM or SIGINT. Must be called inside a tokio runtime.
pub fn trigger_on_signals(shutdown: &Shutdown) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let this = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            () = this.cancelled() => {}
        }
        this.cancel();
    });
    Ok(())
}

/// How often freed heap pages are handed back to the OS.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// Every [`TRIM_INTERVAL`] until shutdown, `malloc_trim(0)`: a connection flood frees its
/// buffers in pieces scattered over the heap, which glibc otherwise keeps resident (glibc only
/// gives back the top of the heap by itself). `SVCOS_MALLOC_TRIM=0` turns it off.
pub fn spawn_trimmer(shutdown: Shutdown) {
    if std::env::var("SVCOS_MALLOC_TRIM").is_ok_and(|v| v == "0") {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TRIM_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => trim(),
                () = shutdown.cancelled() => return,
            }
        }
    });
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim has no preconditions; it only releases unused allocator memory.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
