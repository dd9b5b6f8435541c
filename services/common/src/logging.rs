//! Tracing setup: journald when the process runs under systemd's journal, stderr otherwise
//! (in the sim the supervisor captures stderr and tags each line with the service name).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Environment variable holding the log filter, e.g. `info,svcos_hw_agent=debug`.
pub const LOG_ENV: &str = "SVCOS_LOG";

/// Install the global subscriber. Safe to call twice (the second call is ignored).
pub fn init(service: &str) {
    let filter = EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten()
        .map(|l| l.with_syslog_identifier(format!("svcos-{service}")));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match journald {
        Some(layer) => registry.with(layer).try_init(),
        None => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_target(false)
                    .with_ansi(false)
                    .without_time()
                    // Under the supervisor stderr is a non-blocking FIFO that may be full while no
                    // supervisor reads it: a failed write must drop the line, not fall back to
                    // eprintln!, which panics on EAGAIN.
                    .log_internal_errors(false),
            )
            .try_init(),
    };
    let _ = result;
}
