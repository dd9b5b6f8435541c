//! The config file of a sim instance: written with loopback binds and the test pool on first
//! run; on later runs only the bind/port keys given on the command line are changed.

use std::net::IpAddr;
use std::path::Path;

use svcos_common::config::{Config, ConfigError, HardwareDriver, PoolConfig};

/// Worker name the sim's pool entry uses.
pub const SIM_WORKER: &str = "svcos.sim";
/// Default loopback address of a sim instance.
pub const DEFAULT_BIND: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
/// Default REST port.
pub const DEFAULT_API_PORT: u16 = 8080;
/// Default dashboard/proxy port (unprivileged, unlike production's 80).
pub const DEFAULT_HTTP_PORT: u16 = 8000;
/// Default cgminer API port.
pub const DEFAULT_LEGACY_PORT: u16 = 4028;
/// Default test pool port.
pub const DEFAULT_POOL_PORT: u16 = 3333;

/// Bind and port flags of `svcos sim`; `None` = not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimFlags {
    /// `--bind`.
    pub bind: Option<IpAddr>,
    /// `--api-port`.
    pub api_port: Option<u16>,
    /// `--http-port`.
    pub http_port: Option<u16>,
    /// `--legacy-port`.
    pub legacy_port: Option<u16>,
    /// `--pool-port`.
    pub pool_port: Option<u16>,
    /// `--setup-complete`: the config is one of a miner in service, not held at the setup cap.
    pub setup_complete: bool,
}

fn pool_url(bind: IpAddr, port: u16) -> String {
    match bind {
        IpAddr::V6(a) => format!("stratum+tcp://[{a}]:{port}"),
        IpAddr::V4(a) => format!("stratum+tcp://{a}:{port}"),
    }
}

/// A fresh sim config from the flags (defaults for the ones not given).
pub fn fresh(flags: &SimFlags) -> Config {
    let bind = flags.bind.unwrap_or(DEFAULT_BIND);
    let pool_port = flags.pool_port.unwrap_or(DEFAULT_POOL_PORT);
    let mut c = Config::default();
    c.hardware.driver = HardwareDriver::Sim;
    // The responder would join the mDNS group on every interface of the host the sim runs on;
    // the sim binds loopback only, and so stays silent on the LAN (tests turn it on in a
    // network namespace of their own).
    c.network.mdns.enabled = false;
    c.api.bind = bind;
    c.api.port = flags.api_port.unwrap_or(DEFAULT_API_PORT);
    c.api.http_port = flags.http_port.unwrap_or(DEFAULT_HTTP_PORT);
    c.legacy.bind = bind;
    c.legacy.port = flags.legacy_port.unwrap_or(DEFAULT_LEGACY_PORT);
    c.sim.pool_port = pool_port;
    // A fresh sim is a fresh install: held at the setup cap until the wizard is finished, as
    // the image's config holds a new miner.
    c.power.setup_hold = !flags.setup_complete;
    c.pools = vec![PoolConfig {
        url: pool_url(bind, pool_port),
        user: SIM_WORKER.into(),
        ..PoolConfig::default()
    }];
    c
}

/// Apply only the given flags to an existing config. The pool entry that pointed at the sim's
/// test pool follows a changed bind or pool port; other pools are left alone.
pub fn update(mut c: Config, flags: &SimFlags) -> Config {
    let old_url = pool_url(c.api.bind, c.sim.pool_port);
    if let Some(bind) = flags.bind {
        c.api.bind = bind;
        c.legacy.bind = bind;
    }
    if let Some(p) = flags.api_port {
        c.api.port = p;
    }
    if let Some(p) = flags.http_port {
        c.api.http_port = p;
    }
    if let Some(p) = flags.legacy_port {
        c.legacy.port = p;
    }
    if let Some(p) = flags.pool_port {
        c.sim.pool_port = p;
    }
    if flags.setup_complete {
        c.power.setup_hold = false;
    }
    let new_url = pool_url(c.api.bind, c.sim.pool_port);
    for pool in &mut c.pools {
        if pool.url == old_url {
            pool.url = new_url.clone();
        }
    }
    c
}

/// Write `path` if missing, else update the flagged keys; returns the config in force. A bad
/// value in an existing file is no reason to refuse the stack (every service falls back the
/// same way): it is reported, and replaced in the file only when the flags change the file.
pub fn prepare(path: &Path, flags: &SimFlags) -> Result<Config, ConfigError> {
    if !path.exists() {
        let c = fresh(flags);
        c.save(path)?;
        return Ok(c);
    }
    let loaded = Config::load_or_fallback(path, &Config::default());
    svcos_common::config::ProblemLog::new("supervisor")
        .report(&loaded.problems, svcos_common::time::unix_ms());
    let old = loaded.config;
    let new = update(old.clone(), flags);
    if new != old {
        new.save(path)?;
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_config_is_loopback_sim_with_test_pool() {
        let c = fresh(&SimFlags {
            api_port: Some(18080),
            pool_port: Some(13333),
            ..SimFlags::default()
        });
        c.validate().unwrap();
        assert_eq!(c.hardware.driver, HardwareDriver::Sim);
        assert_eq!(c.api.bind, DEFAULT_BIND);
        assert_eq!(c.legacy.bind, DEFAULT_BIND);
        assert_eq!(
            (c.api.port, c.api.http_port, c.legacy.port),
            (18080, 8000, 4028)
        );
        assert_eq!(c.pools.len(), 1);
        assert_eq!(c.pools[0].url, "stratum+tcp://127.0.0.1:13333");
        assert_eq!(c.pools[0].user, SIM_WORKER);
        assert_eq!(c.sim.pool_port, 13333);
        assert!(!c.network.mdns.enabled, "the sim stays silent on the LAN");
        assert!(
            c.power.setup_hold,
            "a fresh sim is held until setup is finished"
        );
        let done = fresh(&SimFlags {
            setup_complete: true,
            ..SimFlags::default()
        });
        assert!(!done.power.setup_hold);
        assert!(
            !update(
                c,
                &SimFlags {
                    setup_complete: true,
                    ..SimFlags::default()
                }
            )
            .power
            .setup_hold
        );
    }

    #[test]
    fn update_touches_only_given_keys() {
        let mut c = fresh(&SimFlags::default());
        c.system.hostname = "kept".into();
        c.pools.push(PoolConfig {
            url: "stratum+tcp://other:1".into(),
            user: "w".into(),
            ..PoolConfig::default()
        });
        let bind: IpAddr = "127.0.0.2".parse().unwrap();
        let u = update(
            c.clone(),
            &SimFlags {
                bind: Some(bind),
                pool_port: Some(4444),
                ..SimFlags::default()
            },
        );
        assert_eq!(u.system.hostname, "kept");
        assert_eq!(u.api.bind, bind);
        assert_eq!(u.legacy.bind, bind);
        assert_eq!(u.api.port, 8080);
        assert_eq!(u.pools[0].url, "stratum+tcp://127.0.0.2:4444");
        assert_eq!(u.pools[1].url, "stratum+tcp://other:1");
        assert_eq!(update(c.clone(), &SimFlags::default()), c);
    }

    #[test]
    fn prepare_writes_then_updates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let first = prepare(&path, &SimFlags::default()).unwrap();
        assert_eq!(Config::load(&path).unwrap(), first);
        let second = prepare(
            &path,
            &SimFlags {
                legacy_port: Some(14028),
                ..SimFlags::default()
            },
        )
        .unwrap();
        assert_eq!(second.legacy.port, 14028);
        assert_eq!(second.api.port, first.api.port);
        assert_eq!(Config::load(&path).unwrap(), second);
    }

    #[test]
    fn a_bad_value_on_disk_does_not_stop_the_sim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let first = prepare(&path, &SimFlags::default()).unwrap();
        let text = first
            .to_toml()
            .replace("timezone = \"UTC\"", "timezone = \"Mars/Olympus\"");
        assert!(text.contains("Mars/Olympus"), "{text}");
        std::fs::write(&path, &text).unwrap();
        let again = prepare(&path, &SimFlags::default()).unwrap();
        assert_eq!(again.system.timezone, "UTC", "the value in force");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "file untouched"
        );
    }
}
