//! Tracing setup: journald when the process runs under systemd's journal, stderr otherwise
//! (in the sim the supervisor captures stderr and tags each line with the service name).

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// Environment variable holding the log filter, e.g. `info,svcos_hw_agent=debug`.
pub const LOG_ENV: &str = "SVCOS_LOG";

/// Install the global subscriber. Safe to call twice (the second call is ignored).
pub fn init(service: &str) {
    let filter = filter_from(std::env::var(LOG_ENV).ok().as_deref());
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

/// `SVCOS_LOG` as a list of `target=level` directives with an optional bare default level
/// (`info,svcos_hw_agent=debug`). A plain target list rather than `EnvFilter`: that one's span and
/// field filters need a regex engine, about half a megabyte of the image, for a syntax nobody uses
/// here. Unset or unparsable means `info`.
fn filter_from(value: Option<&str>) -> Targets {
    value
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn filter_reads_default_and_per_target_levels() {
        let f = filter_from(Some("warn,svcos_hw_agent=debug"));
        assert!(f.would_enable("svcos_hw_agent::chain", &Level::DEBUG));
        assert!(!f.would_enable("svcos_hw_agent::chain", &Level::TRACE));
        assert!(f.would_enable("svcos_gateway", &Level::WARN));
        assert!(!f.would_enable("svcos_gateway", &Level::INFO));
    }

    #[test]
    fn filter_falls_back_to_info() {
        for value in [None, Some("=not a filter=")] {
            let f = filter_from(value);
            assert!(f.would_enable("svcos_auth", &Level::INFO), "{value:?}");
            assert!(!f.would_enable("svcos_auth", &Level::DEBUG), "{value:?}");
        }
    }
}
