//! Share-path tracing: timestamps on one system-wide monotonic clock (`CLOCK_MONOTONIC`), so
//! `svcos-bench --bin share-path` can join a `clean_jobs` notify at the pool's socket with the
//! first job byte on every chain's UART, and a nonce on the UART with its `mining.submit` at the
//! pool's socket, across processes, and split that path per hop.
//!
//! Trace points: the sim-only processes (hw-sim, the test pool) stamp the two ends; stratum-agent
//! (`sa.*`) and hw-agent (`hw.*`) stamp every hop in between (see `bench/src/bin/share-path.rs`
//! for the event list and how they are joined).
//!
//! Off unless the environment names a file in [`ENV`] (the supervisor passes its environment to
//! its children). Off, a trace point costs one load of an initialised `OnceLock` and a branch: no
//! clock read, no allocation, no syscall. On, each event is one line appended with a single
//! `write` (O_APPEND), after the timestamps were taken.

use std::io::Write;
use std::sync::OnceLock;

/// Environment variable naming the trace file.
pub const ENV: &str = "SVCOS_SHARE_TRACE";

fn file() -> Option<&'static std::fs::File> {
    static FILE: OnceLock<Option<std::fs::File>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os(ENV).filter(|p| !p.is_empty())?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    })
    .as_ref()
}

/// Whether tracing is on in this process.
pub fn enabled() -> bool {
    file().is_some()
}

/// Nanoseconds on `CLOCK_MONOTONIC`, the same clock in every process of the machine.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Now on the shared clock when tracing is on, else 0 without reading the clock: for a stamp
/// taken before it is known whether its event will be recorded.
pub fn stamp() -> u64 {
    if enabled() { mono_ns() } else { 0 }
}

/// Append one event line (`kind` and space-separated fields) if tracing is on.
pub fn record(kind: &str, fields: std::fmt::Arguments<'_>) {
    if let Some(mut f) = file() {
        let line = format!("{kind} {fields}\n");
        let _ = f.write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_monotonic_clock_advances() {
        let a = super::mono_ns();
        let b = super::mono_ns();
        assert!(b >= a && a > 0);
    }
}
