//! The REST API's request bodies as types: the gateway's handlers parse a write's JSON body into
//! one of these (`handlers::parse_body`), and the OpenAPI description derives the operation's
//! `requestBody` schema from the same type (named by the route's row, `req:`), so the schema refuses
//! exactly what the handler refuses at parse time.
//!
//! Every body refuses unknown members (`deny_unknown_fields`, hence
//! `additionalProperties: false` in the schema). A member whose value the handler checks after
//! parsing (a mode word, a range) says so in its doc; where the handler answers a wrong value
//! with its own field error rather than the parse error, the schema still lists only the
//! accepted values, since both refuse the request. A member typed as `serde_json::Value` takes
//! several JSON shapes that the handler interprets itself (a register as a number or a hex
//! string); its schema admits any value.

use serde::Deserialize;
use serde_json::Value;
use svcos_common::config::change::ImportMode;

/// `POST /api/auth/session` and `POST /api/auth/setup`: the owner's password.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PasswordRequest {
    /// The password (setup: the new one, at least the documented minimum length).
    pub password: String,
}

/// `POST /api/auth/password`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordRequest {
    /// The password in force.
    pub current_password: String,
    /// Its replacement.
    pub new_password: String,
}

/// `POST /api/auth/tokens`: a named read-only API token.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// A label for the token (e.g. `home-assistant`).
    pub name: String,
    /// `read`, the only scope (absent = `read`).
    #[cfg_attr(feature = "schema", schemars(extend("enum" = ["read", null])))]
    pub scope: Option<String>,
}

/// `POST /api/led/config` and `POST /api/led/pattern`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LedRequest {
    /// `normal`, `locate` or `off` (GET /api/led/patterns); `pattern` is accepted as its alias.
    #[serde(alias = "pattern")]
    #[cfg_attr(feature = "schema", schemars(extend("enum" = ["normal", "locate", "off"])))]
    pub mode: String,
}

/// `POST /api/action/restart`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// One service to restart (a supervisor service name); absent = the mining services.
    #[serde(default)]
    pub service: Option<String>,
}

/// `POST /api/fan`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FanRequest {
    /// `auto` or `manual`.
    #[cfg_attr(feature = "schema", schemars(extend("enum" = ["auto", "manual"])))]
    pub mode: String,
    /// Manual duty, percent (1-100, required in manual mode).
    #[serde(default)]
    pub pwm_percent: Option<u32>,
    /// Auto mode's target chip temperature, °C (30-95; absent or 0 keeps the current one).
    #[serde(default)]
    pub target_temp_c: Option<f64>,
}

/// `POST /api/debug/chip/frequency`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ChipFrequencyRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// MHz.
    pub frequency_mhz: f64,
    /// One chain; absent = all.
    #[serde(default)]
    pub chain_id: Option<u32>,
    /// One chip of the chain; absent = all.
    #[serde(default)]
    pub chip: Option<u32>,
}

/// `POST /api/debug/chip/voltage`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ChipVoltageRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// mV.
    pub voltage_mv: f64,
    /// One chain; absent = all.
    #[serde(default)]
    pub chain_id: Option<u32>,
}

/// `PUT /api/autotuner/active`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AutotunerActiveRequest {
    /// Whether the autotuner runs.
    pub active: bool,
}

/// `POST /api/autotuner/{increment,decrement}_{power,hashrate}_target`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TargetStepRequest {
    /// W or TH/s; absent = the configured step.
    #[serde(default)]
    pub amount: Option<f64>,
}

/// `POST /api/profiles`: save or apply a named tuning profile.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ProfileRequest {
    /// The profile's name.
    pub name: String,
    /// `save` (default) or `apply`.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(extend("enum" = ["save", "apply", null])))]
    pub action: Option<String>,
}

/// `POST /api/profiles/silicon/import-json`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ImportJsonRequest {
    /// A silicon profile document: a JSON object, or a string holding one.
    pub document: Value,
}

/// `PUT /api/profiles/silicon/active`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SiliconActiveRequest {
    /// The id of a loaded silicon profile (GET /api/profiles/silicon).
    pub profile_id: String,
}

/// `POST /api/autotuner/profitability`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ProfitabilityRequest {
    /// Price of one BTC in the currency of the electricity price.
    pub btc_price: f64,
    /// Network difficulty.
    pub network_difficulty: f64,
    /// BTC per block (subsidy plus an estimate of fees). Default 3.125.
    #[serde(default)]
    pub block_reward_btc: Option<f64>,
    /// Per kWh; default `[tuner].electricity_price_per_kwh`.
    #[serde(default)]
    pub electricity_price_per_kwh: Option<f64>,
    /// Pool fee, percent. Default 0.
    #[serde(default)]
    pub pool_fee_percent: Option<f64>,
}

/// `POST /api/tou/schedule`: the time-of-use power schedule.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TouScheduleRequest {
    /// Whether the schedule applies.
    pub enabled: bool,
    /// The windows (absent = none).
    #[serde(default)]
    pub windows: Vec<TouWindowRequest>,
}

/// One time-of-use window.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TouWindowRequest {
    /// Local time `HH:MM`.
    pub start: String,
    /// Local time `HH:MM`.
    pub end: String,
    /// The power target inside the window, W.
    pub power_target_watt: f64,
    /// A label for the window.
    #[serde(default)]
    pub label: String,
}

/// `POST /api/pools/test` and `POST /api/setup/test-pool`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PoolTestRequest {
    /// `stratum+tcp://host:port`.
    pub url: String,
    /// The worker name.
    pub user: String,
    /// The worker password (absent = `x`).
    #[serde(default)]
    pub password: Option<String>,
    /// How long to wait for the pool, ms (default 10 000, clamped to the gateway's limit).
    #[serde(default)]
    pub timeout_ms: Option<u32>,
}

/// `POST /api/fleet/discover`: scan a range for miners.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FleetDiscoverRequest {
    /// An IPv4 CIDR or `a.b.c.d-e` range within the documented size limit.
    pub range: String,
    /// The cgminer port to probe (default 4028).
    #[serde(default)]
    pub port: Option<u16>,
    /// Per-host timeout, ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Hosts probed at once.
    #[serde(default)]
    pub concurrency: Option<usize>,
}

/// `POST /api/home/room-temp`: a room temperature reading for the thermostat.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RoomTempRequest {
    /// °C, -40 to 60.
    pub room_c: f64,
    /// Where the reading comes from (a label).
    #[serde(default)]
    pub source: Option<String>,
}

/// `POST /api/home/target`: the thermostat's settings; absent members keep their value.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HomeTargetRequest {
    /// Target room temperature, °C.
    #[serde(default)]
    pub target_room_c: Option<f64>,
    /// A named preset instead of a temperature.
    #[serde(default)]
    pub preset: Option<String>,
    /// Whether the thermostat runs.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Dead band, °C.
    #[serde(default)]
    pub hysteresis_c: Option<f64>,
    /// Lowest power the thermostat sets, W.
    #[serde(default)]
    pub min_watt: Option<f64>,
    /// Highest power the thermostat sets, W.
    #[serde(default)]
    pub max_watt: Option<f64>,
    /// Power change per step, W.
    #[serde(default)]
    pub step_watt: Option<f64>,
}

/// `POST /api/solar/test` and `POST /api/offgrid/test`: probe an energy source; absent members
/// take the saved config's.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EnergySourceTestRequest {
    /// The source's JSON endpoint.
    #[serde(default)]
    pub source_url: Option<String>,
    /// JSON pointer to the surplus power, W.
    #[serde(default)]
    pub surplus_watt_pointer: Option<String>,
    /// JSON pointer to the battery's state of charge, percent.
    #[serde(default)]
    pub soc_pointer: Option<String>,
    /// JSON pointer to the battery voltage, V.
    #[serde(default)]
    pub voltage_pointer: Option<String>,
}

/// `POST /api/diagnostics/{board-health,chip-health,hashreport}/start`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DiagnosticStartRequest {
    /// Observation window, s (0 or absent = the kind's default).
    #[serde(default)]
    pub duration_s: u32,
}

/// `POST /api/debug/i2c`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct I2cWriteRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// 7-bit address: a number or a hex string.
    pub address: Value,
    /// Bytes to write: an array of numbers or a hex string.
    pub data: Value,
    /// Bytes to read back after the write.
    #[serde(default)]
    pub read_length: Option<u32>,
}

/// `POST /api/debug/registers`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterWriteRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// The chain.
    pub chain_id: u32,
    /// The chip's index on the chain.
    pub chip: u32,
    /// Register address: a number or a hex string.
    pub register: Value,
    /// Value to write: a number or a hex string.
    pub value: Value,
}

/// `POST /api/debug/asic-command`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AsicCommandRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// The chain.
    pub chain_id: u32,
    /// Header byte and payload, without preamble, length and CRC: an array of numbers or a hex
    /// string.
    pub frame: Value,
    /// How long to collect answers, ms.
    #[serde(default)]
    pub wait_ms: Option<u32>,
}

/// `POST /api/debug/psu/control`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PsuControlRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// Switch the PSU output on or off.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Set the output voltage, mV.
    #[serde(default)]
    pub voltage_mv: Option<f64>,
}

/// `POST /api/debug/pid-params`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PidParamsRequest {
    /// Must be present: the debug guard refuses the request unless it is `true`.
    pub confirm: bool,
    /// Proportional gain.
    pub kp: f64,
    /// Integral gain.
    pub ki: f64,
    /// Derivative gain.
    pub kd: f64,
}

/// `POST /api/config/import`: a config document as TOML text or as JSON.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigImportRequest {
    /// The document as TOML (one of `toml`, `config`).
    pub toml: Option<String>,
    /// The document as a JSON object (one of `toml`, `config`); checked against the config's
    /// own rules after parsing.
    pub config: Option<Value>,
    /// `merge` (default) or `replace`.
    #[serde(default)]
    pub mode: ImportMode,
    /// Present when the body is the `GET /api/config` answer as is: only that answer's tag.
    pub schema: Option<ConfigAnswerTag>,
    /// The `GET /api/config` answer's mask; ignored (a masked secret keeps the stored one).
    pub secret_mask: Option<String>,
    /// The `GET /api/config` answer's generation; ignored, so an old backup still imports
    /// (compare-and-set is `If-Match` on `POST /api/config`).
    pub generation: Option<u64>,
}

/// The tag of the `GET /api/config` answer, the one answer a config import takes as its body.
#[derive(Debug, Clone, Copy, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ConfigAnswerTag {
    /// `svcos.api.config.v1`.
    #[serde(rename = "svcos.api.config.v1")]
    V1,
}

/// `POST /api/config/restore`: a backup as TOML text or as JSON.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigRestoreRequest {
    /// The backup as TOML (one of `toml`, `config`).
    pub toml: Option<String>,
    /// The backup as a JSON object (one of `toml`, `config`).
    pub config: Option<Value>,
    /// Present when the body is the `GET /api/config` answer as is: only that answer's tag.
    pub schema: Option<ConfigAnswerTag>,
    /// The `GET /api/config` answer's mask; ignored (a masked secret keeps the stored one).
    pub secret_mask: Option<String>,
    /// The `GET /api/config` answer's generation; ignored, so an old backup still imports
    /// (compare-and-set is `If-Match` on `POST /api/config`).
    pub generation: Option<u64>,
}

/// `POST /api/network/hostname`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HostnameRequest {
    /// An RFC 1123 host name.
    pub hostname: String,
}

/// `PUT /api/network/config`: the whole of `[network.ipv4]` (members left out take their
/// defaults), and optionally the hostname, saved in one config write.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NetworkConfigRequest {
    /// `dhcp` or `static`. Parsed by the handler, which answers any other value with a 422
    /// naming `method`.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "svcos_common::config::Ipv4Method")
    )]
    pub method: String,
    /// The LAN interface; default `eth0`.
    #[serde(default)]
    pub interface: Option<String>,
    /// Static only: `192.168.1.50/24`.
    #[serde(default)]
    pub address: String,
    /// Static only: the router, inside the address's subnet.
    #[serde(default)]
    pub gateway: String,
    /// DNS servers, at most 3 (static: at least 1).
    #[serde(default)]
    pub dns: Vec<String>,
    /// `[system].hostname`, when given.
    #[serde(default)]
    pub hostname: Option<String>,
}

impl NetworkConfigRequest {
    /// The config patch that saves this request (`[network.ipv4]` whole, the hostname when
    /// given), once the section's rules pass; a refusal is (request member, what is allowed).
    /// The hostname's rule is the config writer's ([`request_field`] names its refusal).
    pub fn to_patch(&self) -> Result<Value, (String, String)> {
        use svcos_common::config::{ConfigError, Ipv4Config, Ipv4Method};
        let method: Ipv4Method = self
            .method
            .parse()
            .map_err(|()| ("method".to_string(), "dhcp or static".to_string()))?;
        let v4 = Ipv4Config {
            method,
            interface: self.interface.clone().unwrap_or_else(|| "eth0".into()),
            address: self.address.trim().to_string(),
            gateway: self.gateway.trim().to_string(),
            dns: self.dns.iter().map(|d| d.trim().to_string()).collect(),
        };
        v4.validate().map_err(|e| match e {
            ConfigError::Invalid { field, message } => (request_field(&field).to_string(), message),
            other => (String::new(), other.to_string()),
        })?;
        let mut patch = serde_json::json!({ "network": { "ipv4": v4 } });
        if let Some(hostname) = &self.hostname {
            patch["system"] = serde_json::json!({ "hostname": hostname });
        }
        Ok(patch)
    }
}

/// The member of a `PUT /api/network/config` body a config field comes from
/// (`network.ipv4.dns[1]` → `dns[1]`, `system.hostname` → `hostname`).
pub fn request_field(config_field: &str) -> &str {
    config_field
        .strip_prefix("network.ipv4.")
        .or_else(|| config_field.strip_prefix("system."))
        .unwrap_or(config_field)
}

/// `POST /api/setup/step4-mode`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ModeRequest {
    /// `home`, `standard` or `hacker`. Parsed by the handler, which answers any other value
    /// with a `config_validation` error on `system.mode`.
    #[cfg_attr(feature = "schema", schemars(with = "svcos_common::config::Mode"))]
    pub mode: Value,
}

/// `POST /api/system/restore-to-stock`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RestoreToStockRequest {
    /// Must be true: a restore erases svcOS's data (absent = false, which is refused).
    #[serde(default)]
    pub confirm: bool,
}

/// `POST /api/config/webhook/test`: send a test event; absent members take the saved
/// webhook's.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WebhookTestRequest {
    /// The receiver's URL.
    #[serde(default)]
    pub url: Option<String>,
    /// The HMAC secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// Which configured webhook to test.
    #[serde(default)]
    pub index: Option<usize>,
}

/// `POST /api/autotuner/noise-profile`: `[governor.noise]`; absent members keep their value,
/// and a body that sets anything but `enabled` switches the controller on.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NoiseProfileRequest {
    /// Whether the controller runs.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Highest fan duty wanted, percent, 10-100.
    #[serde(default)]
    pub fan_max_percent: Option<f64>,
    /// How far below the ceiling the fans must run before power is given back, percent
    /// points, 1-50.
    #[serde(default)]
    pub hysteresis_percent: Option<f64>,
    /// Change per step, W, 10-1000.
    #[serde(default)]
    pub step_watt: Option<f64>,
    /// Lowest limit, W, 50-10000.
    #[serde(default)]
    pub min_watt: Option<f64>,
    /// Least time between two steps, s, 5-3600.
    #[serde(default)]
    pub interval_s: Option<f64>,
}

/// `POST /api/autotuner/quota`: `[governor.quota]`, a daily energy budget; absent members keep
/// their value, and a body that sets anything but `enabled` switches the quota on.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct QuotaRequest {
    /// Whether the quota applies.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Energy per local day, kWh, 0.1-240.
    #[serde(default)]
    pub daily_kwh: Option<f64>,
    /// Lowest spread limit, W, 50-10000.
    #[serde(default)]
    pub min_watt: Option<f64>,
}

/// `POST /api/autotuner/room-temp-factor`: `[governor.room_factor]`; absent members keep their
/// value, and a body that sets anything but `enabled` switches the factor on.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RoomTempFactorRequest {
    /// Whether the factor applies.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Watts per °C of difference from the reference, 0-500.
    #[serde(default)]
    pub watt_per_c: Option<f64>,
    /// Room temperature at which the limit is the base, °C, 0-40.
    #[serde(default)]
    pub reference_room_c: Option<f64>,
    /// The limit at the reference, W; 0 = the operator's power target.
    #[serde(default)]
    pub base_watt: Option<f64>,
    /// How far a cold room lifts the limit above the base, W, 0-5000.
    #[serde(default)]
    pub max_raise_watt: Option<f64>,
    /// Lowest limit, W, 50-10000.
    #[serde(default)]
    pub min_watt: Option<f64>,
}

/// `PUT /api/network/ssh`: replace the SSH authorised keys (and optionally the password rule).
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SshKeysRequest {
    /// The whole new list, one OpenSSH public key line each (`type base64 [comment]`, no
    /// options); an empty list removes every key. At most 32.
    pub authorized_keys: Vec<String>,
    /// `[network.ssh].password_login`, when given (saved through the config writer).
    #[serde(default)]
    pub password_login: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: Value) -> NetworkConfigRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn network_config_patch_names_the_request_member() {
        let ok = request(
            serde_json::json!({"method": "static", "address": " 10.0.0.9/24 ",
            "gateway": "10.0.0.1", "dns": ["10.0.0.1"], "hostname": "rig-7"}),
        );
        let patch = ok.to_patch().unwrap();
        assert_eq!(patch["network"]["ipv4"]["address"], "10.0.0.9/24");
        assert_eq!(patch["network"]["ipv4"]["interface"], "eth0");
        assert_eq!(patch["system"]["hostname"], "rig-7");
        let dhcp = request(serde_json::json!({"method": "dhcp"}))
            .to_patch()
            .unwrap();
        assert!(
            dhcp.get("system").is_none(),
            "no hostname asked: none written"
        );
        for (json, field) in [
            (serde_json::json!({"method": "auto"}), "method"),
            (
                serde_json::json!({"method": "static", "address": "10.0.0.9/24",
                "gateway": "10.0.1.1", "dns": ["10.0.0.1"]}),
                "gateway",
            ),
            (
                serde_json::json!({"method": "dhcp", "dns": ["10.0.0.1", "x"]}),
                "dns[1]",
            ),
        ] {
            assert_eq!(
                request(json.clone()).to_patch().unwrap_err().0,
                field,
                "{json}"
            );
        }
        assert_eq!(request_field("system.hostname"), "hostname");
        assert_eq!(request_field("network.ipv4.dns[2]"), "dns[2]");
        assert!(
            serde_json::from_value::<NetworkConfigRequest>(
                serde_json::json!({"method": "dhcp", "netmask": "255.0.0.0"})
            )
            .is_err()
        );
    }
}
