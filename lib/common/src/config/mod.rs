//! The one svcOS config file (TOML).
//!
//! Every section is a typed struct with `deny_unknown_fields`, documented defaults and a
//! `validate()` for cross-field rules; a validation error names the field (`pools[1].url`), so the
//! API can answer `config_validation` with something an operator can act on. Each section lives
//! in its own module, owned by the service that reads it.
//!
//! Writers refuse an invalid config ([`Config::save`]); running processes read the file through
//! [`Config::load_or_fallback`], which never fails: a bad value keeps its value in force and is
//! reported (the table in `fallback.rs`), so no process stops over another's section.

pub mod allow;
mod api;
mod auth;
pub mod change;
mod donation;
mod energy;
mod fallback;
mod governor;
mod hardware;
mod home;
mod legacy;
mod mqtt;
mod network;
mod pools;
mod power;
pub mod secrets;
pub mod shared;
mod sim;
pub mod store;
mod supervisor;
mod swarm;
mod system;
mod thermal;
mod tuner;
mod webhook;

pub use api::ApiConfig;
pub use auth::AuthConfig;
pub use donation::DonationConfig;
pub use energy::{EnergyConfig, OffgridConfig, SolarConfig};
pub use fallback::{ConfigProblem, Fallback, LiveConfig, ProblemLog, Sanitised};
pub use governor::{
    ColdEnvironmentConfig, GovernorConfig, NoiseConfig, QuotaConfig, RoomFactorConfig,
};
pub use hardware::{Board, HardwareConfig, HardwareDriver};
pub use home::{HomeConfig, NightModeConfig, WindowClock, parse_hhmm};
pub use legacy::LegacyConfig;
pub use mqtt::{MqttConfig, is_valid_host};
pub use network::{
    Ipv4Config, Ipv4Method, MAX_DNS_SERVERS, MAX_MDNS_INTERFACES, MdnsConfig, NetworkConfig,
    STATIC_PREFIX_LEN, SshConfig, is_valid_interface_name,
};
pub use pools::{JdConfig, PoolConfig, StratumConfig};
pub use power::{MAX_WATT, PowerConfig, PsuOverrideConfig, SETUP_HOLD_WATT};
pub use sim::SimConfig;
pub use supervisor::{
    EscalationConfig, MINING_CRITICAL, RestartPolicyConfig, RestartStrategy, SupervisorConfig,
};
pub use swarm::{MAX_SWARM_PEERS, MIN_SWARM_KEY_CHARS, SwarmConfig, is_valid_peer};
pub use system::{Mode, SystemConfig};
pub use thermal::ThermalConfig;
pub use tuner::{TuneModeConfig, TunerConfig};
pub use webhook::{
    EVENT_NAMES, MAX_HOOKS, WebhookConfig, WebhookHook, check_webhook_url, event_matches,
    is_valid_event_filter,
};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;

/// The JSON Schema (draft 2020-12) of the config file, derived from these types: members a
/// section refuses (`deny_unknown_fields`) are `additionalProperties: false`, defaults are the
/// `Default` impls'. The committed copy is `docs/config.schema.json`.
#[cfg(feature = "schema")]
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<Config>();
    schema.to_value()
}

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Identity and operating mode.
    pub system: SystemConfig,
    /// REST gateway, /ws, /metrics and the port-80 proxy.
    pub api: ApiConfig,
    /// cgminer-compatible TCP API.
    pub legacy: LegacyConfig,
    /// Board description and drivers.
    pub hardware: HardwareConfig,
    /// Fan control and thermal limits.
    pub thermal: ThermalConfig,
    /// Ordered pool list (first = highest priority unless `priority` says otherwise).
    pub pools: Vec<PoolConfig>,
    /// Pool-client behaviour: failover, failback, Stratum V2 gate.
    pub stratum: StratumConfig,
    /// Optional, disclosed donation (default off).
    pub donation: DonationConfig,
    /// Sessions and password hashing.
    pub auth: AuthConfig,
    /// Restart policies.
    pub supervisor: SupervisorConfig,
    /// The simulated board (used only with `hardware.driver = "sim"`).
    pub sim: SimConfig,
    /// Autotuner defaults and limits.
    pub tuner: TunerConfig,
    /// Circuit and PSU limits, power-reading calibration.
    pub power: PowerConfig,
    /// Space-heater use: room thermostat and night mode.
    pub home: HomeConfig,
    /// Solar-surplus and off-grid following.
    pub energy: EnergyConfig,
    /// The power governor's own controllers: noise ceiling, energy quota, room factor, warm-up.
    pub governor: GovernorConfig,
    /// MQTT publishing and Home Assistant discovery (default off).
    pub mqtt: MqttConfig,
    /// Signed webhook deliveries of events (default off).
    pub webhook: WebhookConfig,
    /// LAN discovery: the mDNS/DNS-SD responder (default on).
    pub network: NetworkConfig,
    /// Home swarm: units sharing one room reading and one circuit budget (default off).
    pub swarm: SwarmConfig,
}

/// Why a config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown/mistyped keys.
    #[error("cannot parse config {path}: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A value breaks a rule.
    #[error("invalid config value {field}: {message}")]
    Invalid {
        /// Dotted path of the offending field, e.g. `pools[1].url`.
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The file could not be written.
    #[error("cannot write config {path}: {source}")]
    Write {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl ConfigError {
    /// Shorthand for [`ConfigError::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The offending field, when the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl Config {
    /// Parse and validate TOML text. `origin` names the source in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parse TOML text (a whole file or only some sections) into the JSON shape of [`Config`],
    /// without filling defaults or validating: for merging a partial document over a config.
    pub fn toml_document(text: &str, origin: &Path) -> Result<serde_json::Value, ConfigError> {
        let doc: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: e.to_string(),
        })?;
        serde_json::to_value(doc).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Load and validate a config file. A missing file yields the defaults.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_toml_str(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Validate every section; the first broken rule wins.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_finite()?;
        self.system.validate()?;
        self.api.validate()?;
        self.legacy.validate()?;
        self.hardware.validate()?;
        self.thermal.validate()?;
        for (i, pool) in self.pools.iter().enumerate() {
            pool.validate(&format!("pools[{i}]"))?;
        }
        self.stratum.validate()?;
        self.donation.validate()?;
        self.auth.validate()?;
        self.supervisor.validate()?;
        self.sim.validate()?;
        self.tuner.validate()?;
        self.power.validate()?;
        self.home.validate()?;
        self.energy.validate()?;
        self.governor.validate()?;
        self.mqtt.validate()?;
        self.webhook.validate()?;
        self.network.validate()?;
        self.swarm.validate()?;
        Ok(())
    }

    /// No number anywhere may be NaN or infinite. TOML spells them `nan` and `inf`, and range
    /// checks written as `x < min` let NaN through; JSON has no spelling for them at all, so
    /// such a config would show `null` in `GET /api/config` and could never be posted back.
    fn check_finite(&self) -> Result<(), ConfigError> {
        fn walk(value: &toml::Value, path: &mut String) -> Result<(), ConfigError> {
            match value {
                toml::Value::Float(f) if !f.is_finite() => Err(ConfigError::invalid(
                    path.clone(),
                    "must be a finite number (not nan or inf)",
                )),
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        let len = path.len();
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(k);
                        walk(v, path)?;
                        path.truncate(len);
                    }
                    Ok(())
                }
                toml::Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        walk(v, path)?;
                        path.truncate(len);
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
        match toml::Value::try_from(self) {
            Ok(v) => walk(&v, &mut String::new()),
            // Only a float can make serialisation differ from parsing; nothing to check then.
            Err(_) => Ok(()),
        }
    }

    /// Serialise to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }

    /// Validate, then write atomically (temp file, fsync, rename, fsync dir) with mode 0640.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        self.validate()?;
        fsutil::atomic_write(path, self.to_toml().as_bytes(), 0o640).map_err(|source| {
            ConfigError::Write {
                path: path.to_path_buf(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_round_trip() {
        let c = Config::default();
        c.validate().unwrap();
        let back = Config::from_toml_str(&c.to_toml(), Path::new("x")).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn unknown_key_is_rejected_with_its_name() {
        let err = Config::from_toml_str("[api]\nbogus = 1\n", Path::new("c.toml")).unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn invalid_pool_names_the_field() {
        let text = "[[pools]]\nurl = \"stratum+tcp://a:3333\"\nuser = \"w\"\n[[pools]]\nurl = \"http://nope\"\nuser = \"w\"\n";
        let err = Config::from_toml_str(text, Path::new("c.toml")).unwrap_err();
        assert_eq!(err.field(), Some("pools[1].url"), "{err}");
    }

    #[test]
    fn non_finite_numbers_are_refused_with_their_field() {
        // Found by the config_toml fuzz target: accepted, then `null` in the JSON API.
        for (text, field) in [
            (
                "[hardware]\npower_target_watt = nan\n",
                "hardware.power_target_watt",
            ),
            (
                "[power]\ncircuit_limit_watt = inf\n",
                "power.circuit_limit_watt",
            ),
            ("[home]\ntarget_room_c = -inf\n", "home.target_room_c"),
        ] {
            let err = Config::from_toml_str(text, Path::new("c.toml")).unwrap_err();
            assert_eq!(err.field(), Some(field), "{text}: {err}");
        }
    }

    #[test]
    fn partial_toml_becomes_a_json_document() {
        let doc = Config::toml_document(
            "[api]\nport = 9000\n[[pools]]\nurl = \"stratum+tcp://a:1\"\nuser = \"w\"\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(doc["api"]["port"], 9000);
        assert_eq!(doc["pools"][0]["user"], "w");
        assert!(doc.get("legacy").is_none(), "nothing filled in: {doc}");
        assert!(Config::toml_document("[api\n", Path::new("x")).is_err());
    }

    #[test]
    fn save_is_atomic_and_loadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut c = Config::default();
        c.system.hostname = "rig-7".into();
        c.save(&path).unwrap();
        assert_eq!(Config::load(&path).unwrap(), c);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp files left behind");
    }

    #[test]
    fn unknown_time_zone_is_refused_and_the_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let mut c = Config::default();
        c.system.timezone = "America/Toronto".into();
        c.save(&path).unwrap();
        let before = std::fs::read(&path).unwrap();
        c.system.timezone = "Mars/Olympus_Mons".into();
        let err = c.save(&path).unwrap_err();
        assert_eq!(err.field(), Some("system.timezone"), "{err}");
        assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "old file untouched");
        let err = Config::from_toml_str("[system]\ntimezone = \"Nowhere\"\n", Path::new("c.toml"))
            .unwrap_err();
        assert_eq!(err.field(), Some("system.timezone"), "{err}");
        // A config from before the key (legacy offset only) still loads.
        let old = "[home.night_mode]\nenabled = true\nutc_offset_min = -300\n";
        let c = Config::from_toml_str(old, Path::new("c.toml")).unwrap();
        assert_eq!(c.home.night_mode.zone(&c.system).name, "UTC-05:00");
    }
}
