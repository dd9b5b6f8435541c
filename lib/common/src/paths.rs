//! Every filesystem path svcOS uses, in one place.

use std::path::{Path, PathBuf};

use crate::ServiceName;

/// Production runtime directory (sockets, pidfiles, hw-agent's re-attach state).
pub const PROD_RUNTIME_DIR: &str = "/run/svcos";
/// Production persistent state (sessions, counters, the password hash).
pub const PROD_STATE_DIR: &str = "/var/lib/svcos";
/// Production config file, shipped read-only by the rootfs overlay.
pub const PROD_CONFIG: &str = "/etc/svcos/config.toml";
/// Production writable config: written by the API, read in preference to [`PROD_CONFIG`].
pub const PROD_CONFIG_OVERRIDE: &str = "/var/lib/svcos/config.toml";
/// Production dashboard assets.
pub const PROD_WWW_DIR: &str = "/usr/share/svcos/www";

/// Where one svcOS instance keeps its sockets, state and config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Unix sockets, pidfiles and volatile re-attach state.
    pub runtime_dir: PathBuf,
    /// Persistent state; each service owns a subdirectory named after it.
    pub state_dir: PathBuf,
    /// The config file services read.
    pub config_path: PathBuf,
}

impl Layout {
    /// The layout of a flashed miner.
    pub fn production() -> Self {
        let config_path = if Path::new(PROD_CONFIG_OVERRIDE).exists() {
            PathBuf::from(PROD_CONFIG_OVERRIDE)
        } else {
            PathBuf::from(PROD_CONFIG)
        };
        Layout {
            runtime_dir: PROD_RUNTIME_DIR.into(),
            state_dir: PROD_STATE_DIR.into(),
            config_path,
        }
    }

    /// The read-only config the image ships under the file in use, when the file in use is
    /// the writable copy over it ([`PROD_CONFIG_OVERRIDE`]): the safe values of this board.
    pub fn base_config_path(&self) -> Option<PathBuf> {
        (self.config_path == Path::new(PROD_CONFIG_OVERRIDE)).then(|| PathBuf::from(PROD_CONFIG))
    }

    /// The layout of `svcos sim --dir DIR`: everything under one folder.
    pub fn sim(dir: &Path) -> Self {
        Layout {
            runtime_dir: dir.join("run"),
            state_dir: dir.join("state"),
            config_path: dir.join("config.toml"),
        }
    }

    /// The gRPC socket of a service.
    pub fn socket(&self, service: ServiceName) -> PathBuf {
        self.runtime_dir.join(service.socket_file())
    }

    /// The persistent state directory a service owns.
    pub fn service_state_dir(&self, service: ServiceName) -> PathBuf {
        self.state_dir.join(service.as_str())
    }

    /// The volatile runtime directory a service owns (re-attach state, pidfiles).
    pub fn service_runtime_dir(&self, service: ServiceName) -> PathBuf {
        self.runtime_dir.join(service.as_str())
    }

    /// The pidfile the supervisor keeps for a child, for re-adoption after its own restart.
    pub fn pidfile(&self, service: ServiceName) -> PathBuf {
        self.runtime_dir
            .join("pids")
            .join(format!("{}.pid", service.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_layout_stays_under_dir() {
        let l = Layout::sim(Path::new("/tmp/x"));
        assert_eq!(
            l.socket(ServiceName::HwAgent),
            Path::new("/tmp/x/run/hw-agent.sock")
        );
        assert_eq!(
            l.service_state_dir(ServiceName::Auth),
            Path::new("/tmp/x/state/auth")
        );
        assert_eq!(
            l.pidfile(ServiceName::Gateway),
            Path::new("/tmp/x/run/pids/gateway.pid")
        );
    }
}
