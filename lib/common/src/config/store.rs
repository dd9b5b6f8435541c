//! The rule of the config's one writer (the gateway), with no I/O but the generation file: every
//! write names the generation it was computed from and is refused, changing nothing, when another
//! write came first (compare-and-set), and the whole new config is validated before anything is
//! saved. REST, the setup wizard, MQTT, MCP and, over `svcos.config.v1.ConfigService`,
//! stratum-agent's pool commands (cgminer `addpool`, `removepool`, ...) all pass through it, so
//! no process writes `config.toml` from a copy another write has made stale.
//!
//! The generation counts writes. It is kept in a small file next to the writer's state so that a
//! restarted writer never hands out a number an earlier writer already gave to another config
//! (a client holding it would otherwise pass the check against a config it never saw).

use std::path::Path;

use super::{Config, ConfigError};

/// Why a config write was refused.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Another write came first: the caller computed its config from an older generation.
    #[error(
        "config generation {expected} is stale: the config is at generation {current}; read it again and resend"
    )]
    Stale {
        /// The generation the caller named.
        expected: u64,
        /// The generation in force.
        current: u64,
    },
    /// The new config breaks a rule (the error names the field).
    #[error(transparent)]
    Invalid(ConfigError),
}

impl WriteError {
    /// The field a refused write names (`generation` for a stale one).
    pub fn field(&self) -> Option<&str> {
        match self {
            WriteError::Stale { .. } => Some("generation"),
            WriteError::Invalid(e) => e.field(),
        }
    }
}

/// Check a write of `new` computed from generation `expected` against the generation `current`
/// in force; on success, the generation the saved config will carry.
///
/// Nothing is saved here: the caller saves atomically only after this passed, under the same
/// lock that read `current`, and publishes the returned generation only once the file is written.
pub fn check_write(current: u64, expected: u64, new: &Config) -> Result<u64, WriteError> {
    if expected != current {
        return Err(WriteError::Stale { expected, current });
    }
    new.validate().map_err(WriteError::Invalid)?;
    Ok(current + 1)
}

/// The generation to start from: one past the last one written to `path` (1 when the file is
/// missing or unreadable). Starting past it means a restart also counts as a new generation: the
/// file may have been edited by hand while the writer was down.
pub fn start_generation(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(1, |g| g.saturating_add(1))
}

/// Record `generation` in `path` (atomically, mode 0600).
pub fn save_generation(path: &Path, generation: u64) -> std::io::Result<()> {
    crate::fsutil::atomic_write(path, format!("{generation}\n").as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;

    fn pool(url: &str) -> PoolConfig {
        PoolConfig {
            url: url.into(),
            user: "w1".into(),
            ..PoolConfig::default()
        }
    }

    #[test]
    fn a_write_from_the_current_generation_advances_it() {
        let mut config = Config::default();
        config.pools.push(pool("stratum+tcp://127.0.0.1:3333"));
        assert_eq!(check_write(7, 7, &config).unwrap(), 8);
    }

    #[test]
    fn a_write_from_an_older_or_unknown_generation_is_refused_naming_the_generation() {
        let config = Config::default();
        for (expected, current) in [(6, 7), (8, 7), (0, 1)] {
            let e = check_write(current, expected, &config).unwrap_err();
            assert!(
                matches!(e, WriteError::Stale { expected: x, current: c } if x == expected && c == current),
                "{e:?}"
            );
            assert_eq!(e.field(), Some("generation"));
        }
    }

    #[test]
    fn a_stale_write_is_refused_before_validation() {
        // The caller must re-read first: judging a config computed from an old copy would
        // report errors that the current config may not have.
        let mut config = Config::default();
        config.pools.push(pool("not a url"));
        assert!(matches!(
            check_write(3, 2, &config),
            Err(WriteError::Stale { .. })
        ));
    }

    #[test]
    fn an_invalid_config_is_refused_naming_the_field() {
        let mut config = Config::default();
        config.pools.push(pool("stratum+tcp://127.0.0.1:3333"));
        config.pools.push(pool("not a url"));
        let e = check_write(3, 3, &config).unwrap_err();
        assert_eq!(e.field(), Some("pools[1].url"));
    }

    #[test]
    fn the_generation_survives_a_restart_and_moves_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config-generation");
        assert_eq!(start_generation(&path), 1);
        save_generation(&path, 41).unwrap();
        assert_eq!(start_generation(&path), 42);
        std::fs::write(&path, b"\xff garbage").unwrap();
        assert_eq!(start_generation(&path), 1);
    }
}
