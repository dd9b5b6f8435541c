//! Identity, health, LEDs, cooling modes, sensors and the tuner's state: `/api/system/*`,
//! `/api/led/*`, `/api/thermal/cooling_modes`, `/api/hardware/thermal/*`, `/api/miner/type`,
//! `/api/autotuner/*`, and the actions' answers (`/api/action/*`).

use serde::Serialize;
use svcos_proto::hwagent::v1::{GetInventoryResponse, SensorInfo, Telemetry};
use svcos_proto::stratum::v1::GetPoolsResponse;
use svcos_proto::supervisor::v1::ServiceInfo;
use svcos_proto::tuner::v1::GetStateResponse;

use crate::{enum_word, round};

/// The inventory members of `GET /api/system/info`; all `null` while hw-agent is down.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SystemInfoBody {
    /// `svcos.api.system.info.v1`.
    pub schema: &'static str,
    /// Configured hostname.
    pub hostname: String,
    /// home, standard or hacker.
    pub mode: &'static str,
    /// Always `svcOS`.
    pub firmware: &'static str,
    /// Firmware version.
    pub version: &'static str,
    /// The API contract version (`svcos.api.v1`).
    pub api_contract_version: &'static str,
    /// Miner model.
    pub model: Option<String>,
    /// Miner vendor.
    pub vendor: Option<String>,
    /// Hashboard type.
    pub board: Option<String>,
    /// ASIC model.
    pub chip_model: Option<String>,
    /// Serial number.
    pub serial_number: Option<String>,
    /// Hardware driver (sim, bm13xx).
    pub driver: Option<String>,
    /// Seconds since the gateway started.
    pub gateway_uptime_s: i64,
    /// Seconds of mining; `null` while hw-agent is down.
    pub mining_uptime_s: Option<u64>,
    /// Seconds since the operating system booted (the host's in the simulator).
    pub system_uptime_s: Option<u64>,
    /// The LAN interface's first IPv4 address (`192.168.1.50`, see `/api/network/info`);
    /// `null` without one.
    pub ip_address: Option<String>,
    /// The LAN interface's MAC address, lower case; `null` without one.
    pub mac_address: Option<String>,
    /// The gateway receives hw-agent's telemetry.
    pub hw_agent_up: bool,
}

impl SystemInfoBody {
    /// The body from the config's identity, the inventory and telemetry (each if available).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        hostname: String,
        mode: &'static str,
        version: &'static str,
        api_contract_version: &'static str,
        inv: Option<&GetInventoryResponse>,
        t: Option<&Telemetry>,
        gateway_uptime_s: i64,
    ) -> Self {
        let of = |f: fn(&GetInventoryResponse) -> &String| inv.map(|i| f(i).clone());
        SystemInfoBody {
            schema: "svcos.api.system.info.v1",
            hostname,
            mode,
            firmware: "svcOS",
            version,
            api_contract_version,
            model: of(|i| &i.model),
            vendor: of(|i| &i.vendor),
            board: of(|i| &i.board),
            chip_model: of(|i| &i.chip_model),
            serial_number: of(|i| &i.serial_number),
            driver: of(|i| &i.driver),
            gateway_uptime_s,
            mining_uptime_s: t.map(|t| t.mining_uptime_s),
            system_uptime_s: None,
            ip_address: None,
            mac_address: None,
            hw_agent_up: t.is_some(),
        }
    }

    /// The body with the time since boot and the LAN interface's address and MAC, as the
    /// kernel reports them now.
    pub fn with_host(mut self) -> Self {
        let lan = svcos_common::net::lan_interface();
        self.system_uptime_s = svcos_common::net::boot_uptime_s();
        self.ip_address = lan
            .as_ref()
            .and_then(|i| i.ipv4.first())
            .map(|n| n.addr().to_string());
        self.mac_address = lan.and_then(|i| i.mac);
        self
    }
}

/// One chain of `GET /api/system/asic`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AsicChain {
    /// Chain number.
    pub chain_id: u32,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Chips that answered at bring-up.
    pub chips_detected: u32,
    /// Indexes of chips that did not answer.
    pub missing_chips: Vec<u32>,
    /// The chain's UART device.
    pub device: String,
    /// Live frequency, MHz (2 decimals); `null` without telemetry.
    pub frequency_mhz: Option<f64>,
    /// Live voltage, mV (1 decimal); `null` without telemetry.
    pub voltage_mv: Option<f64>,
    /// Live UART baud; `null` without telemetry.
    pub baud: Option<u32>,
}

/// `GET /api/system/asic` (`svcos.api.system.asic.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SystemAsicBody {
    /// `svcos.api.system.asic.v1`.
    pub schema: &'static str,
    /// ASIC model.
    pub chip_model: String,
    /// Every chain of the inventory.
    pub chains: Vec<AsicChain>,
    /// Configured frequency, MHz.
    pub target_frequency_mhz: f64,
    /// Configured voltage, mV.
    pub target_voltage_mv: f64,
    /// Nominal hashrate, GH/s.
    pub nominal_ghs: f64,
    /// Nominal power, W.
    pub nominal_power_watt: f64,
}

impl SystemAsicBody {
    /// The inventory with live chain values from telemetry and the configured targets.
    pub fn new(
        inv: &GetInventoryResponse,
        t: Option<&Telemetry>,
        target_frequency_mhz: f64,
        target_voltage_mv: f64,
    ) -> Self {
        let chains = inv
            .chains
            .iter()
            .map(|c| {
                let live = t.and_then(|t| t.chains.iter().find(|x| x.chain_id == c.chain_id));
                AsicChain {
                    chain_id: c.chain_id,
                    chips_expected: c.chips_expected,
                    chips_detected: c.chips_detected,
                    missing_chips: c.missing_chips.clone(),
                    device: c.device.clone(),
                    frequency_mhz: live.map(|l| round(l.frequency_mhz, 2)),
                    voltage_mv: live.map(|l| round(l.voltage_mv, 1)),
                    baud: live.map(|l| l.baud),
                }
            })
            .collect();
        SystemAsicBody {
            schema: "svcos.api.system.asic.v1",
            chip_model: inv.chip_model.clone(),
            chains,
            target_frequency_mhz,
            target_voltage_mv,
            nominal_ghs: inv.nominal_ghs,
            nominal_power_watt: inv.nominal_power_watt,
        }
    }
}

/// A supervised service as the supervisor reports it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Service {
    /// Service name.
    pub name: String,
    /// starting, running, backoff, stopped, failed, ...
    pub state: String,
    /// Process id (0 when not running).
    pub pid: u32,
    /// Restarts (automatic and requested), kept across supervisor restarts.
    pub restarts: u32,
    /// Seconds since the last start.
    pub uptime_s: u64,
    /// How the last run ended.
    pub last_exit: String,
    /// Delay before the next restart, ms.
    pub backoff_ms: u64,
    /// The supervisor's escalation, if any.
    pub escalation: String,
    /// Restarts within the intensity window.
    pub recent_restarts: u32,
}

impl From<&ServiceInfo> for Service {
    fn from(s: &ServiceInfo) -> Self {
        Service {
            name: s.name.clone(),
            state: enum_word(s.state().as_str_name(), "SERVICE_STATE_"),
            pid: s.pid,
            restarts: s.restarts,
            uptime_s: s.uptime_s,
            last_exit: s.last_exit.clone(),
            backoff_ms: s.backoff_ms,
            escalation: s.escalation.clone(),
            recent_restarts: s.recent_restarts,
        }
    }
}

/// What the gateway's own streams see.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GatewayView {
    /// hw-agent's telemetry stream is live.
    pub hw_agent_telemetry: bool,
    /// stratum-agent's pool stream is live.
    pub stratum_agent_pools: bool,
    /// auth's revocation stream is live.
    pub auth_revocation_stream: bool,
}

/// `GET /api/system/health` (`svcos.api.system.health.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SystemHealthBody {
    /// `svcos.api.system.health.v1`.
    pub schema: &'static str,
    /// Both streams live and every supervised service running.
    pub healthy: bool,
    /// The gateway's streams.
    pub gateway_view: GatewayView,
    /// The supervisor answered.
    pub supervisor_reachable: bool,
    /// Every supervised service; `null` when the supervisor did not answer.
    pub services: Option<Vec<Service>>,
    /// What `config.toml` on disk gets wrong, each with its owner and what runs instead; empty
    /// when the file is good. No service stops over these, so they do not make `healthy` false.
    pub config_problems: Vec<svcos_common::config::ConfigProblem>,
}

/// `GET /api/system/stats` (`svcos.api.system.stats.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SystemStatsBody {
    /// `svcos.api.system.stats.v1`.
    pub schema: &'static str,
    /// Hashrate over a minute, GH/s (3 decimals).
    pub hashrate_ghs_1m: f64,
    /// Power, W (1 decimal).
    pub power_watt: f64,
    /// J/TH (2 decimals); 0 without hashrate.
    pub efficiency_j_per_th: f64,
    /// Hottest sensor, °C (1 decimal).
    pub temp_max_c: f64,
    /// Every fan's speed.
    pub fan_rpm: Vec<u32>,
    /// Accepted shares; `null` while stratum-agent is down.
    pub shares_accepted: Option<u64>,
    /// Rejected shares; `null` while stratum-agent is down.
    pub shares_rejected: Option<u64>,
    /// Best share difficulty; `null` while stratum-agent is down.
    pub best_share: Option<f64>,
    /// Seconds of mining.
    pub mining_uptime_s: u64,
}

impl SystemStatsBody {
    /// The body from telemetry and, if stratum-agent is up, its pools.
    pub fn new(t: &Telemetry, p: Option<&GetPoolsResponse>) -> Self {
        let ghs = t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m);
        SystemStatsBody {
            schema: "svcos.api.system.stats.v1",
            hashrate_ghs_1m: round(ghs, 3),
            power_watt: round(t.power_watt, 1),
            efficiency_j_per_th: round(t.efficiency_j_per_th, 2),
            temp_max_c: round(t.temp_max_c, 1),
            fan_rpm: t.fans.iter().map(|f| f.rpm).collect(),
            shares_accepted: p.map(|p| p.accepted),
            shares_rejected: p.map(|p| p.rejected),
            best_share: p.map(|p| p.best_share),
            mining_uptime_s: t.mining_uptime_s,
        }
    }
}

/// `GET /api/led/*` and the LED writes (`svcos.api.led.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LedBody {
    /// `svcos.api.led.v1`.
    pub schema: &'static str,
    /// normal, locate or off.
    pub mode: String,
}

impl LedBody {
    /// The body of an LED mode by its proto name.
    pub fn of(proto_name: &str) -> Self {
        LedBody {
            schema: "svcos.api.led.v1",
            mode: enum_word(proto_name, "LED_MODE_"),
        }
    }
}

/// A named choice with a sentence about it.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Named {
    /// The word the API takes.
    pub name: &'static str,
    /// What it does.
    pub description: &'static str,
}

/// `GET /api/led/patterns` (`svcos.api.led.patterns.v1`).
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LedPatternsBody {
    /// `svcos.api.led.patterns.v1`.
    pub schema: &'static str,
    /// The patterns `POST /api/led/pattern` takes.
    pub patterns: &'static [Named],
}

/// The LED patterns as served.
pub const LED_PATTERNS: LedPatternsBody = LedPatternsBody {
    schema: "svcos.api.led.patterns.v1",
    patterns: &[
        Named {
            name: "normal",
            description: "status indication by the firmware",
        },
        Named {
            name: "locate",
            description: "blink to find this unit in a rack",
        },
        Named {
            name: "off",
            description: "LEDs off",
        },
    ],
};

/// `GET /api/thermal/cooling_modes` (`svcos.api.thermal.cooling_modes.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CoolingModesBody {
    /// `svcos.api.thermal.cooling_modes.v1`.
    pub schema: &'static str,
    /// The fan modes `POST /api/fan` takes.
    pub modes: &'static [Named],
    /// The current mode; `null` while hw-agent is down.
    pub current: Option<String>,
}

impl CoolingModesBody {
    /// The modes with the current one from telemetry.
    pub fn new(t: Option<&Telemetry>) -> Self {
        CoolingModesBody {
            schema: "svcos.api.thermal.cooling_modes.v1",
            modes: &[
                Named {
                    name: "auto",
                    description: "PID on the hottest chip toward [thermal].target_temp_c within fan_min/max_percent",
                },
                Named {
                    name: "manual",
                    description: "fixed duty; temperature is not regulated, the overheat cut-off still applies",
                },
            ],
            current: t.map(|t| enum_word(t.fan_mode().as_str_name(), "FAN_MODE_")),
        }
    }
}

/// One chip's temperature.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipTemp {
    /// Chip index on the chain.
    pub index: u32,
    /// °C (1 decimal).
    pub temp_c: f64,
}

/// One chain's chip temperatures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainChipTemps {
    /// Chain number.
    pub chain_id: u32,
    /// Hottest chip, °C (1 decimal).
    pub temp_chip_c: f64,
    /// Every chip.
    pub chips: Vec<ChipTemp>,
}

/// `GET /api/hardware/thermal/chipd/chip_temps` (`svcos.api.chip_temps.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipTempsBody {
    /// `svcos.api.chip_temps.v1`.
    pub schema: &'static str,
    /// Every chain.
    pub chains: Vec<ChainChipTemps>,
}

impl From<&Telemetry> for ChipTempsBody {
    fn from(t: &Telemetry) -> Self {
        ChipTempsBody {
            schema: "svcos.api.chip_temps.v1",
            chains: t
                .chains
                .iter()
                .map(|c| ChainChipTemps {
                    chain_id: c.chain_id,
                    temp_chip_c: round(c.temp_chip_c, 1),
                    chips: c
                        .chips
                        .iter()
                        .map(|chip| ChipTemp {
                            index: chip.index,
                            temp_c: round(chip.temp_c, 1),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// One sensor of the inventory.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sensor {
    /// Sensor name.
    pub name: String,
    /// temperature, power, ...
    pub kind: String,
    /// Chain it sits on.
    pub chain_id: u32,
    /// Bus it is read over.
    pub bus: String,
    /// Address on the bus.
    pub address: u32,
    /// Last reading.
    pub value: f64,
    /// Unit of `value`.
    pub unit: String,
}

impl From<&SensorInfo> for Sensor {
    fn from(s: &SensorInfo) -> Self {
        Sensor {
            name: s.name.clone(),
            kind: s.kind.clone(),
            chain_id: s.chain_id,
            bus: s.bus.clone(),
            address: s.address,
            value: s.value,
            unit: s.unit.clone(),
        }
    }
}

/// `GET /api/hardware/thermal/sensors` (`svcos.api.sensors.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SensorsBody {
    /// `svcos.api.sensors.v1`.
    pub schema: &'static str,
    /// Every sensor.
    pub sensors: Vec<Sensor>,
}

impl From<&GetInventoryResponse> for SensorsBody {
    fn from(inv: &GetInventoryResponse) -> Self {
        SensorsBody {
            schema: "svcos.api.sensors.v1",
            sensors: inv.sensors.iter().map(Sensor::from).collect(),
        }
    }
}

/// `GET /api/miner/type` (`svcos.api.miner_type.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MinerTypeBody {
    /// `svcos.api.miner_type.v1`.
    pub schema: &'static str,
    /// Miner model.
    pub model: String,
    /// Miner vendor.
    pub vendor: String,
    /// Hashboard type.
    pub board: String,
    /// ASIC model.
    pub chip_model: String,
    /// Number of chains.
    pub chains: usize,
    /// Number of fans.
    pub fan_count: u32,
    /// Always `svcOS`.
    pub firmware: &'static str,
}

impl From<&GetInventoryResponse> for MinerTypeBody {
    fn from(inv: &GetInventoryResponse) -> Self {
        MinerTypeBody {
            schema: "svcos.api.miner_type.v1",
            model: inv.model.clone(),
            vendor: inv.vendor.clone(),
            board: inv.board.clone(),
            chip_model: inv.chip_model.clone(),
            chains: inv.chains.len(),
            fan_count: inv.fan_count,
            firmware: "svcOS",
        }
    }
}

/// `GET /api/autotuner/state` and `/status` (`svcos.api.autotuner.state.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunerStateBody {
    /// `svcos.api.autotuner.state.v1`.
    pub schema: &'static str,
    /// The tuner's state.
    pub state: String,
    /// The active profile.
    pub profile: String,
    /// Power target, W.
    pub power_target_watt: f64,
    /// Hashrate target, GH/s.
    pub hashrate_target_ghs: f64,
    /// Measured J/TH.
    pub efficiency_j_per_th: f64,
}

impl From<&GetStateResponse> for TunerStateBody {
    fn from(r: &GetStateResponse) -> Self {
        TunerStateBody {
            schema: "svcos.api.autotuner.state.v1",
            state: r.state.clone(),
            profile: r.profile.clone(),
            power_target_watt: r.power_target_watt,
            hashrate_target_ghs: r.hashrate_target_ghs,
            efficiency_j_per_th: r.efficiency_j_per_th,
        }
    }
}

/// `POST /api/action/sleep` and `/wake` (`svcos.api.action.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SleepBody {
    /// `svcos.api.action.v1`.
    pub schema: &'static str,
    /// sleep or wake.
    pub action: &'static str,
    /// The mining state hw-agent reports afterwards.
    pub state: String,
}

/// `POST /api/debug/chip/frequency` (`svcos.api.debug.frequency.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FrequencyAppliedBody {
    /// `svcos.api.debug.frequency.v1`.
    pub schema: &'static str,
    /// The frequency the PLL was set to, MHz.
    pub applied_mhz: f64,
}

/// `POST /api/debug/chip/voltage` (`svcos.api.debug.voltage.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VoltageAppliedBody {
    /// `svcos.api.debug.voltage.v1`.
    pub schema: &'static str,
    /// The voltage set, mV.
    pub applied_mv: f64,
}

/// A service a restart action restarted: the supervisor's view of it afterwards, or only its
/// name when the supervisor's answer carried no service.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Restarted {
    /// The supervisor's view after the restart.
    Service(Service),
    /// Only the name (the supervisor answered without the service).
    Named {
        /// Service name.
        name: String,
    },
}

impl Restarted {
    /// From the supervisor's `RestartResponse.service` for the service `name`.
    pub fn new(name: &str, service: Option<&ServiceInfo>) -> Self {
        service.map_or_else(
            || Restarted::Named { name: name.into() },
            |s| Restarted::Service(Service::from(s)),
        )
    }
}

/// `POST /api/action/reboot` and `/api/system/restart` (`svcos.api.action.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RebootBody {
    /// `svcos.api.action.v1`.
    pub schema: &'static str,
    /// Always `reboot`.
    pub action: &'static str,
    /// Every supervised service, in boot order: the supervisor stops them in reverse boot order
    /// and starts them again in boot order, as a reboot would, right after this answer (the
    /// gateway and the proxy included). Whether each came back: `/api/system/health`.
    pub services: Vec<String>,
    /// The gateway is among them, so it goes away for a moment after this answer.
    pub gateway_restart_scheduled: bool,
}

/// `POST /api/action/restart` (`svcos.api.action.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RestartBody {
    /// `svcos.api.action.v1`.
    pub schema: &'static str,
    /// Always `restart`.
    pub action: &'static str,
    /// The named service, or stratum-agent then hw-agent.
    pub restarted: Vec<Restarted>,
}

/// `POST /api/fan` (`svcos.api.fan.v1`): the settings sent to hw-agent.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FanBody {
    /// `svcos.api.fan.v1`.
    pub schema: &'static str,
    /// `auto` or `manual`.
    pub mode: String,
    /// Manual duty, percent (0 in auto mode).
    pub pwm_percent: u32,
    /// Auto mode's target, °C (0: the current target is kept).
    pub target_temp_c: f64,
}
