//! Thermal views: `/api/thermal/posture`, `/api/thermal/supervisor`.

use serde::Serialize;
use svcos_proto::hwagent::v1::{MiningState, Telemetry};

use crate::status::Fan;
use crate::{enum_word, round};

/// The configured thermal limits in °C (`[thermal]`).
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Limits {
    /// Above this the miner throttles.
    pub hot_temp_c: f64,
    /// Above this the miner stops hashing.
    pub dangerous_temp_c: f64,
}

/// One chain's temperatures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainTemps {
    /// Chain number.
    pub chain_id: u32,
    /// Hottest chip in °C (1 decimal).
    pub temp_chip_c: f64,
    /// Board in °C (1 decimal).
    pub temp_board_c: f64,
}

/// `GET /api/thermal/posture` (`svcos.api.thermal.posture.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThermalPostureBody {
    /// `svcos.api.thermal.posture.v1`.
    pub schema: &'static str,
    /// dangerous (at or above dangerous), hot (at or above hot), warm (more than 5 °C above
    /// the target) or normal.
    pub posture: &'static str,
    /// Hottest temperature in °C (1 decimal).
    pub temp_max_c: f64,
    /// Configured target in °C.
    pub target_temp_c: f64,
    /// Configured hot limit in °C.
    pub hot_temp_c: f64,
    /// Configured dangerous limit in °C.
    pub dangerous_temp_c: f64,
    /// hot_temp_c - temp_max_c (1 decimal).
    pub headroom_c: f64,
    /// Per-chain temperatures.
    pub chains: Vec<ChainTemps>,
}

impl ThermalPostureBody {
    /// The posture of a telemetry snapshot against the target and limits.
    pub fn new(t: &Telemetry, target_temp_c: f64, limits: Limits) -> Self {
        let posture = if t.temp_max_c >= limits.dangerous_temp_c {
            "dangerous"
        } else if t.temp_max_c >= limits.hot_temp_c {
            "hot"
        } else if t.temp_max_c > target_temp_c + 5.0 {
            "warm"
        } else {
            "normal"
        };
        ThermalPostureBody {
            schema: "svcos.api.thermal.posture.v1",
            posture,
            temp_max_c: round(t.temp_max_c, 1),
            target_temp_c,
            hot_temp_c: limits.hot_temp_c,
            dangerous_temp_c: limits.dangerous_temp_c,
            headroom_c: round(limits.hot_temp_c - t.temp_max_c, 1),
            chains: t
                .chains
                .iter()
                .map(|c| ChainTemps {
                    chain_id: c.chain_id,
                    temp_chip_c: round(c.temp_chip_c, 1),
                    temp_board_c: round(c.temp_board_c, 1),
                })
                .collect(),
        }
    }
}

/// `GET /api/thermal/supervisor` (`svcos.api.thermal.supervisor.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThermalSupervisorBody {
    /// `svcos.api.thermal.supervisor.v1`.
    pub schema: &'static str,
    /// The miner's state.
    pub mining_state: String,
    /// Why the state is what it is.
    pub state_reason: String,
    /// The thermal cut-off stopped hashing (state overheat).
    pub tripped: bool,
    /// auto or manual.
    pub fan_mode: String,
    /// Configured lowest fan duty in percent.
    pub fan_min_percent: u32,
    /// Configured highest fan duty in percent.
    pub fan_max_percent: u32,
    /// The target hw-agent regulates to, in °C (1 decimal).
    pub temp_target_c: f64,
    /// The configured limits.
    pub limits: Limits,
    /// Every fan.
    pub fans: Vec<Fan>,
}

impl ThermalSupervisorBody {
    /// The supervisor view of a telemetry snapshot with the configured fan range and limits.
    pub fn new(t: &Telemetry, fan_min_percent: u32, fan_max_percent: u32, limits: Limits) -> Self {
        ThermalSupervisorBody {
            schema: "svcos.api.thermal.supervisor.v1",
            mining_state: enum_word(t.state().as_str_name(), "MINING_STATE_"),
            state_reason: t.state_reason.clone(),
            tripped: t.state() == MiningState::Overheat,
            fan_mode: enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"),
            fan_min_percent,
            fan_max_percent,
            temp_target_c: round(t.temp_target_c, 1),
            limits,
            fans: t.fans.iter().map(Fan::from).collect(),
        }
    }
}
