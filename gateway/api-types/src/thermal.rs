//! Temperatures against the configured limits: `/api/thermal/posture` and
//! `/api/thermal/supervisor`, from the telemetry snapshot and `[thermal]`.

use serde::Serialize;
use svcos_common::config::ThermalConfig;
use svcos_proto::hwagent::v1::{MiningState, Telemetry, ThermalPosture};

use crate::status::Fan;
use crate::{enum_word, round};

/// One chain's temperatures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainTemps {
    /// Chain number.
    pub chain_id: u32,
    /// Hottest chip, °C (1 decimal).
    pub temp_chip_c: f64,
    /// Board sensor, °C (1 decimal).
    pub temp_board_c: f64,
}

/// `GET /api/thermal/posture` (`svcos.api.thermal.posture.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PostureBody {
    /// `svcos.api.thermal.posture.v1`.
    pub schema: &'static str,
    /// hw-agent's verdict: normal, warm (over the fan target + 5 °C), hot or dangerous (at or
    /// over those limits).
    pub posture: &'static str,
    /// Hottest chip, °C (1 decimal).
    pub temp_max_c: f64,
    /// `[thermal].target_temp_c`.
    pub target_temp_c: f64,
    /// `[thermal].hot_temp_c`.
    pub hot_temp_c: f64,
    /// `[thermal].dangerous_temp_c`.
    pub dangerous_temp_c: f64,
    /// Distance to the hot limit, °C (1 decimal; negative above it).
    pub headroom_c: f64,
    /// Per chain.
    pub chains: Vec<ChainTemps>,
}

impl PostureBody {
    /// Telemetry `t` against the limits `th`.
    pub fn new(t: &Telemetry, th: &ThermalConfig) -> Self {
        // hw-agent's verdict (unknown before its first reading: normal, as before).
        let posture = match t.thermal_posture() {
            ThermalPosture::Dangerous => "dangerous",
            ThermalPosture::Hot => "hot",
            ThermalPosture::Warm => "warm",
            ThermalPosture::Normal | ThermalPosture::Unspecified => "normal",
        };
        PostureBody {
            schema: "svcos.api.thermal.posture.v1",
            posture,
            temp_max_c: round(t.temp_max_c, 1),
            target_temp_c: th.target_temp_c,
            hot_temp_c: th.hot_temp_c,
            dangerous_temp_c: th.dangerous_temp_c,
            headroom_c: round(th.hot_temp_c - t.temp_max_c, 1),
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

/// The cut-back and cut-off temperatures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Limits {
    /// `[thermal].hot_temp_c`: above it hashing is cut back.
    pub hot_temp_c: f64,
    /// `[thermal].dangerous_temp_c`: above it hashing stops.
    pub dangerous_temp_c: f64,
}

/// `GET /api/thermal/supervisor` (`svcos.api.thermal.supervisor.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SupervisorBody {
    /// `svcos.api.thermal.supervisor.v1`.
    pub schema: &'static str,
    /// hw-agent's mining state.
    pub mining_state: String,
    /// Why it is in that state.
    pub state_reason: String,
    /// The thermal cut-off tripped (state overheat).
    pub tripped: bool,
    /// auto, manual, ...
    pub fan_mode: String,
    /// `[thermal].fan_min_percent`.
    pub fan_min_percent: u32,
    /// `[thermal].fan_max_percent`.
    pub fan_max_percent: u32,
    /// The controller's target, °C (1 decimal).
    pub temp_target_c: f64,
    /// The configured limits.
    pub limits: Limits,
    /// Every fan.
    pub fans: Vec<Fan>,
}

impl SupervisorBody {
    /// Telemetry `t` with the fan range and limits of `th`.
    pub fn new(t: &Telemetry, th: &ThermalConfig) -> Self {
        SupervisorBody {
            schema: "svcos.api.thermal.supervisor.v1",
            mining_state: enum_word(t.state().as_str_name(), "MINING_STATE_"),
            state_reason: t.state_reason.clone(),
            tripped: t.state() == MiningState::Overheat,
            fan_mode: enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"),
            fan_min_percent: th.fan_min_percent,
            fan_max_percent: th.fan_max_percent,
            temp_target_c: round(t.temp_target_c, 1),
            limits: Limits {
                hot_temp_c: th.hot_temp_c,
                dangerous_temp_c: th.dangerous_temp_c,
            },
            fans: t.fans.iter().map(Fan::from).collect(),
        }
    }
}
