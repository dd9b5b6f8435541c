//! Home thermostat presets, solar and off-grid following: `/api/home/presets`,
//! `/api/offgrid/presets`, `/api/{solar,offgrid}/status`, `/api/{solar,offgrid}/test` and
//! `/api/solar/verification-history`. The tuner's power governor decides; these bodies map its
//! `PowerService` answers.

use serde::Serialize;
use svcos_proto::tuner::v1 as pb;

/// The API's name of a follower mode (`solar`, `offgrid`).
pub fn mode_word(mode: pb::FollowerMode) -> &'static str {
    match mode {
        pb::FollowerMode::Offgrid => "offgrid",
        _ => "solar",
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// A named thermostat setting.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThermostatPreset {
    /// Name `POST /api/home/target` takes as `preset`.
    pub name: String,
    /// Room temperature held, °C.
    pub target_room_c: f64,
    /// Lowest power level, W.
    pub min_watt: f64,
    /// Highest power level, W.
    pub max_watt: f64,
    /// Change per thermostat step, W.
    pub step_watt: f64,
    /// What it is for.
    pub description: String,
}

impl From<&pb::ThermostatPreset> for ThermostatPreset {
    fn from(p: &pb::ThermostatPreset) -> Self {
        ThermostatPreset {
            name: p.name.clone(),
            target_room_c: p.target_room_c,
            min_watt: p.min_watt,
            max_watt: p.max_watt,
            step_watt: p.step_watt,
            description: p.description.clone(),
        }
    }
}

/// `GET /api/home/presets` (`svcos.api.home.presets.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HomePresetsBody {
    /// `svcos.api.home.presets.v1`.
    pub schema: &'static str,
    /// The tuner's presets, coolest first.
    pub presets: Vec<ThermostatPreset>,
    /// How to apply one.
    pub apply: &'static str,
}

impl HomePresetsBody {
    /// The body of the tuner's thermostat table.
    pub fn new(presets: &[pb::ThermostatPreset]) -> Self {
        HomePresetsBody {
            schema: "svcos.api.home.presets.v1",
            presets: presets.iter().map(ThermostatPreset::from).collect(),
            apply: "POST /api/home/target with {\"preset\": \"<name>\"}",
        }
    }
}

/// `GET`/`POST /api/home/night-mode` (`svcos.api.home.night_mode.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NightModeBody {
    /// `svcos.api.home.night_mode.v1`.
    pub schema: &'static str,
    /// `[home.night_mode]` as in force.
    pub night_mode: svcos_common::config::NightModeConfig,
    /// The zone the window is read in.
    pub timezone: String,
    /// The next start or end, RFC 3339 (`null` when disabled).
    pub next_change: Option<String>,
    /// The governor finds the window open now.
    pub active_now: bool,
    /// The governor holds the fans at the cap now.
    pub fan_capped_now: bool,
    /// What the window does.
    pub note: &'static str,
    /// What the write changed (`null` on a read).
    pub write: Option<serde_json::Value>,
}

impl NightModeBody {
    /// The body of the config in force and the governor's state.
    pub fn new(
        config: &svcos_common::config::Config,
        now_ms: i64,
        power: &pb::PowerStatus,
        write: Option<serde_json::Value>,
    ) -> Self {
        let n = &config.home.night_mode;
        let clock = n.clock(&config.system, now_ms);
        NightModeBody {
            schema: "svcos.api.home.night_mode.v1",
            night_mode: n.clone(),
            timezone: clock.timezone,
            next_change: clock.next_change,
            active_now: power.decision.as_ref().is_some_and(|d| d.night_active),
            fan_capped_now: power.applied.is_some_and(|a| a.fan_capped),
            note: "inside the window the power cap joins the governor's limits and fans are held at fan_max_percent; hw-agent's overheat protection still applies",
            write,
        }
    }
}

crate::config::patch_request!(
    /// `POST /api/home/night-mode`: a merge patch of `[home.night_mode]`, checked by the
    /// config's rules (an unknown or bad member is a `config_validation` error naming it).
    NightModePatchRequest,
    crate::config::Patch<svcos_common::config::NightModeConfig>
);

crate::config::patch_request!(
    /// `POST /api/solar/config`: a merge patch of `[energy.solar]`, checked by the config's
    /// rules. The `GET` shape, `{"config": patch}`, is accepted too.
    SolarPatchRequest,
    crate::config::Patch<svcos_common::config::SolarConfig>
);

crate::config::patch_request!(
    /// `POST /api/offgrid/config`: a merge patch of `[energy.offgrid]`, checked by the config's
    /// rules. The `GET` shape, `{"config": patch}`, is accepted too.
    OffgridPatchRequest,
    crate::config::Patch<svcos_common::config::OffgridConfig>
);

/// One limit the governor weighed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GovernorLimit {
    /// operator, circuit, psu_override, night_mode, thermostat, solar or offgrid.
    pub source: String,
    /// The power it allows, W (a non-finite value serialises as `null`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub watt: f64,
}

/// The power governor's last arbitration (`PowerDecision`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GovernorDecision {
    /// The power target it set, W (`null`: no limit is active, hw-agent's own target stands).
    pub target_watt: Option<f64>,
    /// The source of the limit that won.
    pub binding: Option<String>,
    /// Every limit that took part.
    pub limits: Vec<GovernorLimit>,
    /// The follower, thermostat or spent energy quota that wants the miner asleep.
    pub sleep_by: Option<String>,
    /// Night-mode fan cap in force, percent.
    pub fan_cap_percent: Option<u32>,
}

impl GovernorDecision {
    /// The last decision of a governor state (`None` before its first tick).
    pub fn of(power: &pb::PowerStatus) -> Option<Self> {
        power.decision.as_ref().map(|d| GovernorDecision {
            target_watt: d.target_watt,
            binding: non_empty(&d.binding),
            limits: d
                .limits
                .iter()
                .map(|l| GovernorLimit {
                    source: l.source.clone(),
                    watt: l.watt,
                })
                .collect(),
            sleep_by: non_empty(&d.sleep_by),
            fan_cap_percent: d.fan_cap_percent,
        })
    }
}

/// `[home]`'s power bounds for the thermostat, W.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThermostatLimits {
    /// Lowest power level, W.
    pub min_watt: f64,
    /// Highest power level, W.
    pub max_watt: f64,
    /// Change per step, W.
    pub step_watt: f64,
}

/// `POST /api/home/room-temp`, `POST /api/home/target` and the `thermostat` of
/// `GET /api/home/status` (`svcos.api.home.thermostat.v1`): `[home]` in force and the
/// governor's thermostat state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ThermostatBody {
    /// `svcos.api.home.thermostat.v1`.
    pub schema: &'static str,
    /// The config enables the thermostat.
    pub enabled: bool,
    /// Room temperature held, °C.
    pub target_room_c: f64,
    /// Dead band around the target, °C.
    pub hysteresis_c: f64,
    /// Last room reading, °C.
    pub room_c: Option<f64>,
    /// When it was taken, Unix ms (`null` before the first).
    pub reading_at_ms: Option<i64>,
    /// The reading is recent enough to act on.
    pub reading_fresh: bool,
    /// Who measured it.
    pub source: String,
    /// What the posted reading made the thermostat do: raise, lower, hold, sleep or wake
    /// (`null` on a read, or when the thermostat is off).
    pub action: Option<String>,
    /// The thermostat's power level, W.
    pub level_watt: Option<f64>,
    /// The thermostat has put the miner to sleep.
    pub sleeping: bool,
    /// `[home]`'s power bounds.
    pub limits: ThermostatLimits,
    /// The governor's last arbitration (`null` before its first tick).
    pub governor: Option<GovernorDecision>,
    /// What the write changed (`null` unless the answer is to a write of `[home]`).
    pub write: Option<serde_json::Value>,
}

impl ThermostatBody {
    /// The body of `[home]` and the governor's state; `action` is the answer to a posted
    /// reading, `write` the report of a config write.
    pub fn new(
        home: &svcos_common::config::HomeConfig,
        power: &pb::PowerStatus,
        action: Option<pb::ThermostatAction>,
        write: Option<serde_json::Value>,
    ) -> Self {
        let t = power.thermostat.clone().unwrap_or_default();
        ThermostatBody {
            schema: "svcos.api.home.thermostat.v1",
            enabled: home.thermostat_enabled,
            target_room_c: home.target_room_c,
            hysteresis_c: home.hysteresis_c,
            room_c: t.room_c,
            reading_at_ms: (t.reading_at_ms > 0).then_some(t.reading_at_ms),
            reading_fresh: t.reading_fresh,
            source: t.source,
            action: action
                .filter(|a| *a != pb::ThermostatAction::Unspecified)
                .map(|a| crate::enum_word(a.as_str_name(), "THERMOSTAT_ACTION_")),
            level_watt: t.level_watt,
            sleeping: t.sleeping,
            limits: ThermostatLimits {
                min_watt: home.min_watt,
                max_watt: home.max_watt,
                step_watt: home.step_watt,
            },
            governor: GovernorDecision::of(power),
            write,
        }
    }
}

/// `GET /api/home/status` (`svcos.api.home.status.v1`): the space-heater view of the telemetry
/// snapshot and the thermostat.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HomeStatusBody {
    /// `svcos.api.home.status.v1`.
    pub schema: &'static str,
    /// hw-agent's mining state (`mining`, `sleeping`, ...).
    pub state: String,
    /// Hashing, so heating.
    pub heating: bool,
    /// Input power, W (1 decimal): nearly all of it ends up as heat.
    pub heat_output_watt: f64,
    /// The fastest fan's duty, percent (a noise proxy).
    pub fan_pwm_percent: u32,
    /// Hottest sensor, °C (1 decimal).
    pub temp_max_c: f64,
    /// Hashrate over 1 min, GH/s (3 decimals).
    pub hashrate_ghs_1m: f64,
    /// hw-agent sleeps.
    pub sleeping: bool,
    /// The thermostat (`null` while the tuner does not answer). The dashboard's Space Heater
    /// screen reads the room reading and target from here.
    pub thermostat: Option<ThermostatBody>,
    /// J/TH now: input power over the 1-minute hashrate (`null` while not hashing).
    pub efficiency_j_per_th: Option<f64>,
    /// The heat levels the tuner has tuned on this board, by power: what each gave when tuned.
    /// The Space Heater screen reads the efficiency at a chosen level from these (empty while
    /// the tuner has none or does not answer).
    pub tuned_levels: Vec<HeatLevel>,
}

/// One tuned heat level (a power-mode tuned profile with its measurement).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeatLevel {
    /// The power target it was tuned for, W.
    pub target_watt: f64,
    /// Power measured when tuned, W (1 decimal).
    pub power_watt: f64,
    /// Hashrate measured when tuned, TH/s (3 decimals).
    pub hashrate_ths: f64,
    /// J/TH measured when tuned (2 decimals).
    pub efficiency_j_per_th: f64,
}

impl HeatLevel {
    /// The power-mode tuned profiles that carry a measurement, by power.
    pub fn of(profiles: &pb::ListProfilesResponse) -> Vec<HeatLevel> {
        let mut out: Vec<HeatLevel> = profiles
            .tuned
            .iter()
            .filter(|p| p.mode() == pb::TuneMode::Power)
            .filter_map(|p| {
                let m = p.measured.as_ref()?;
                (m.power_watt > 0.0 && m.hashrate_ths > 0.0 && m.efficiency_j_per_th > 0.0).then(
                    || HeatLevel {
                        target_watt: crate::round(p.target, 1),
                        power_watt: crate::round(m.power_watt, 1),
                        hashrate_ths: crate::round(m.hashrate_ths, 3),
                        efficiency_j_per_th: crate::round(m.efficiency_j_per_th, 2),
                    },
                )
            })
            .collect();
        out.sort_by(|a, b| a.target_watt.total_cmp(&b.target_watt));
        out
    }
}

impl HomeStatusBody {
    /// The body of a telemetry snapshot and the thermostat, if the tuner answered.
    pub fn new(
        t: &svcos_proto::hwagent::v1::Telemetry,
        thermostat: Option<ThermostatBody>,
        profiles: Option<&pb::ListProfilesResponse>,
    ) -> Self {
        use svcos_proto::hwagent::v1::MiningState;
        HomeStatusBody {
            schema: "svcos.api.home.status.v1",
            state: crate::enum_word(t.state().as_str_name(), "MINING_STATE_"),
            heating: t.state() == MiningState::Mining,
            heat_output_watt: crate::round(t.power_watt, 1),
            fan_pwm_percent: t.fans.iter().map(|f| f.pwm_percent).max().unwrap_or(0),
            temp_max_c: crate::round(t.temp_max_c, 1),
            hashrate_ghs_1m: crate::round(t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m), 3),
            sleeping: t.state() == MiningState::Sleeping,
            thermostat,
            efficiency_j_per_th: crate::mining::j_per_th(t.efficiency_j_per_th),
            tuned_levels: profiles.map(HeatLevel::of).unwrap_or_default(),
        }
    }
}

/// Stop/resume thresholds for a battery chemistry and pack voltage.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BatteryPreset {
    /// Preset name.
    pub name: String,
    /// `LiFePO4` or `lead-acid`.
    pub chemistry: String,
    /// Sleep at this state of charge, %.
    pub stop_soc_percent: f64,
    /// Wake at this state of charge, %.
    pub resume_soc_percent: f64,
    /// Sleep at this pack voltage, V.
    pub stop_voltage_v: f64,
    /// Wake at this pack voltage, V.
    pub resume_voltage_v: f64,
    /// What it is for.
    pub description: String,
}

/// `GET /api/offgrid/presets` (`svcos.api.offgrid.presets.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OffgridPresetsBody {
    /// `svcos.api.offgrid.presets.v1`.
    pub schema: &'static str,
    /// The tuner's battery presets.
    pub presets: Vec<BatteryPreset>,
    /// How to apply one.
    pub apply: &'static str,
}

impl OffgridPresetsBody {
    /// The body of the tuner's battery table.
    pub fn new(presets: &[pb::BatteryPreset]) -> Self {
        OffgridPresetsBody {
            schema: "svcos.api.offgrid.presets.v1",
            presets: presets
                .iter()
                .map(|p| BatteryPreset {
                    name: p.name.clone(),
                    chemistry: p.chemistry.clone(),
                    stop_soc_percent: p.stop_soc_percent,
                    resume_soc_percent: p.resume_soc_percent,
                    stop_voltage_v: p.stop_voltage_v,
                    resume_voltage_v: p.resume_voltage_v,
                    description: p.description.clone(),
                })
                .collect(),
            apply: "POST /api/offgrid/config with the preset's thresholds",
        }
    }
}

/// One reading of an energy source (members the source does not give are `null`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Reading {
    /// Solar surplus, W.
    pub surplus_watt: Option<f64>,
    /// Battery state of charge, %.
    pub soc_percent: Option<f64>,
    /// Battery voltage, V.
    pub voltage_v: Option<f64>,
}

impl From<&pb::EnergyReading> for Reading {
    fn from(r: &pb::EnergyReading) -> Self {
        Reading {
            surplus_watt: r.surplus_watt,
            soc_percent: r.soc_percent,
            voltage_v: r.voltage_v,
        }
    }
}

/// One follower decision with its reading and the power measured then.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FollowerDecision {
    /// Unix ms.
    pub t_ms: i64,
    /// `solar` or `offgrid`.
    pub mode: &'static str,
    /// The reading, when it succeeded.
    pub reading: Option<Reading>,
    /// The source error, when it failed.
    pub error: Option<String>,
    /// `run` or `sleep`.
    pub decision: String,
    /// Chosen target, W.
    pub target_watt: Option<f64>,
    /// Why.
    pub reason: String,
    /// Input power measured when the decision was made, W.
    pub actual_power_watt: Option<f64>,
    /// hw-agent's power target then, W.
    pub hw_power_target_watt: Option<f64>,
    /// hw-agent's state then (proto name).
    pub hw_state: Option<String>,
}

impl From<&pb::FollowerDecision> for FollowerDecision {
    fn from(e: &pb::FollowerDecision) -> Self {
        FollowerDecision {
            t_ms: e.t_ms,
            mode: mode_word(e.mode()),
            reading: e.reading.as_ref().map(Reading::from),
            error: non_empty(&e.error),
            decision: e.decision.clone(),
            target_watt: e.target_watt,
            reason: e.reason.clone(),
            actual_power_watt: e.actual_power_watt,
            hw_power_target_watt: e.hw_power_target_watt,
            hw_state: non_empty(&e.hw_state),
        }
    }
}

/// `GET /api/solar/verification-history` (`svcos.api.solar.verification_history.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VerificationHistoryBody {
    /// `svcos.api.solar.verification_history.v1`.
    pub schema: &'static str,
    /// Entries returned.
    pub count: usize,
    /// Entries the tuner keeps.
    pub capacity: u32,
    /// Oldest first.
    pub entries: Vec<FollowerDecision>,
}

impl From<&pb::ListFollowerDecisionsResponse> for VerificationHistoryBody {
    fn from(r: &pb::ListFollowerDecisionsResponse) -> Self {
        VerificationHistoryBody {
            schema: "svcos.api.solar.verification_history.v1",
            count: r.entries.len(),
            capacity: r.capacity,
            entries: r.entries.iter().map(FollowerDecision::from).collect(),
        }
    }
}

/// What the follower would do with a test reading.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WouldDo {
    /// `run` or `sleep`.
    pub decision: String,
    /// Target it would set, W.
    pub target_watt: Option<f64>,
    /// Why.
    pub reason: String,
    /// A sleep/wake change would wait for the dwell time.
    pub held_by_dwell: bool,
}

/// `POST /api/{solar,offgrid}/test` (`svcos.api.<mode>.test.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SourceTestBody {
    /// `svcos.api.solar.test.v1` or `svcos.api.offgrid.test.v1`.
    pub schema: String,
    /// The source read.
    pub source_url: String,
    /// The read succeeded.
    pub ok: bool,
    /// The reading (`null` when it failed).
    pub reading: Option<Reading>,
    /// Why the read failed (`null` when it succeeded).
    pub error: Option<String>,
    /// The decision this reading would give.
    pub would: WouldDo,
    /// Always false: a test changes nothing.
    pub applied: bool,
}

impl SourceTestBody {
    /// The body of the tuner's `TestSource` answer.
    pub fn new(mode: pb::FollowerMode, r: &pb::TestSourceResponse) -> Self {
        SourceTestBody {
            schema: format!("svcos.api.{}.test.v1", mode_word(mode)),
            source_url: r.source_url.clone(),
            ok: r.ok,
            reading: r.reading.as_ref().filter(|_| r.ok).map(Reading::from),
            error: (!r.ok).then(|| r.error.clone()),
            would: WouldDo {
                decision: r.decision.clone(),
                target_watt: r.target_watt,
                reason: r.reason.clone(),
                held_by_dwell: r.held_by_dwell,
            },
            applied: false,
        }
    }
}

/// `GET`/`POST /api/{solar,offgrid}/config` (`svcos.api.<mode>.config.v1`): the config section
/// (`SolarConfig` or `OffgridConfig`) and, after a write, the write's report.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FollowerConfigBody<C> {
    /// `svcos.api.solar.config.v1` or `svcos.api.offgrid.config.v1`.
    pub schema: String,
    /// `[energy.solar]` or `[energy.offgrid]` as in force.
    pub config: C,
    /// The config enables this mode.
    pub active: bool,
    /// `energy.solar` or `energy.offgrid`.
    pub config_section: String,
    /// What the write changed (`null` on a read).
    pub write: Option<serde_json::Value>,
}

impl<C> FollowerConfigBody<C> {
    /// The body of `mode`'s section.
    pub fn new(
        mode: pb::FollowerMode,
        config: C,
        active: bool,
        write: Option<serde_json::Value>,
    ) -> Self {
        FollowerConfigBody {
            schema: format!("svcos.api.{}.config.v1", mode_word(mode)),
            config,
            active,
            config_section: format!("energy.{}", mode_word(mode)),
            write,
        }
    }
}

/// `GET /api/{solar,offgrid}/status` (`svcos.api.<mode>.status.v1`): the tuner's follower state
/// for this mode (members about the follower are `null`/0 while the other mode or none runs).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FollowerStatusBody {
    /// `svcos.api.solar.status.v1` or `svcos.api.offgrid.status.v1`.
    pub schema: String,
    /// The config enables this mode.
    pub enabled: bool,
    /// disabled, waiting_for_reading, sleeping or running.
    pub state: &'static str,
    /// Target while running, W.
    pub target_watt: Option<f64>,
    /// Last good reading.
    pub last_reading: Option<Reading>,
    /// Last error reading the source.
    pub last_error: Option<String>,
    /// Failed readings in a row.
    pub consecutive_errors: u32,
    /// Last reading attempt, Unix ms.
    pub last_poll_ms: Option<i64>,
    /// Last sleep/wake change, Unix ms.
    pub last_change_ms: Option<i64>,
    /// Seconds until a sleep/wake change is allowed again.
    pub dwell_remaining_s: Option<f64>,
    /// The follower's last decision (the tuner keeps it with its state).
    pub last_decision: Option<FollowerDecision>,
    /// Input power now, W (1 decimal; `null` without telemetry).
    pub power_watt: Option<f64>,
    /// hw-agent's power target now, W.
    pub hw_power_target_watt: Option<f64>,
    /// hw-agent's state now (proto name).
    pub hw_state: Option<&'static str>,
    /// The governor's last arbitration (`null` before its first tick).
    pub governor: Option<GovernorDecision>,
}

impl FollowerStatusBody {
    /// The status of `mode` from the tuner's follower state; `enabled` is whether the config
    /// enables this mode (the tuner may not have polled it yet).
    pub fn new(
        mode: pb::FollowerMode,
        enabled: bool,
        st: &pb::FollowerState,
        telemetry: Option<&svcos_proto::hwagent::v1::Telemetry>,
        governor: Option<GovernorDecision>,
    ) -> Self {
        // The tuner's follower state belongs to one mode; the other mode's route shows none of it.
        let mine = st.mode() == mode;
        let state = match (enabled, mine, st.phase()) {
            (false, _, _) => "disabled",
            (true, true, pb::FollowerPhase::Sleeping) => "sleeping",
            (true, true, pb::FollowerPhase::Running) => "running",
            (true, _, _) => "waiting_for_reading",
        };
        let own = |v| if mine { v } else { None };
        FollowerStatusBody {
            schema: format!("svcos.api.{}.status.v1", mode_word(mode)),
            enabled,
            state,
            target_watt: own(st.target_watt.filter(|_| !st.sleeping)),
            last_reading: st.last_reading.as_ref().filter(|_| mine).map(Reading::from),
            last_error: non_empty(&st.last_error).filter(|_| mine),
            consecutive_errors: if mine { st.consecutive_errors } else { 0 },
            last_poll_ms: (mine && st.last_poll_ms > 0).then_some(st.last_poll_ms),
            last_change_ms: st.last_change_ms.filter(|_| mine),
            dwell_remaining_s: own(st.dwell_remaining_s),
            last_decision: st
                .last_decision
                .as_ref()
                .filter(|_| mine)
                .map(FollowerDecision::from),
            power_watt: telemetry.map(|t| crate::round(t.power_watt, 1)),
            hw_power_target_watt: telemetry.map(|t| t.power_target_watt),
            hw_state: telemetry.map(|t| t.state().as_str_name()),
            governor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thermostat_words_the_action_and_nulls_what_is_missing() {
        let home = svcos_common::config::HomeConfig::default();
        let power = pb::PowerStatus {
            decision: Some(pb::PowerDecision {
                target_watt: Some(900.0),
                binding: "thermostat".into(),
                limits: vec![pb::PowerLimit {
                    source: "thermostat".into(),
                    watt: 900.0,
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let raise = Some(pb::ThermostatAction::Raise);
        let v = serde_json::to_value(ThermostatBody::new(&home, &power, raise, None)).unwrap();
        assert_eq!(v["action"], "raise");
        assert!(v["reading_at_ms"].is_null() && v["room_c"].is_null() && v["write"].is_null());
        assert_eq!(v["governor"]["binding"], "thermostat");
        assert_eq!(v["governor"]["limits"][0]["watt"], 900.0);
        assert!(v["governor"]["sleep_by"].is_null());
        assert_eq!(v["limits"]["max_watt"], home.max_watt);
        // No reading yet (UNSPECIFIED) and a read both answer a null action; no tick yet, a
        // null governor.
        let none = Some(pb::ThermostatAction::Unspecified);
        let idle = pb::PowerStatus::default();
        let v = serde_json::to_value(ThermostatBody::new(&home, &idle, none, None)).unwrap();
        assert!(v["action"].is_null() && v["governor"].is_null());
    }

    #[test]
    fn home_status_shows_heat_and_the_thermostat() {
        use svcos_proto::hwagent::v1 as hw;
        let t = hw::Telemetry {
            state: hw::MiningState::Mining as i32,
            power_watt: 1234.56,
            temp_max_c: 61.04,
            ..Default::default()
        };
        let v = serde_json::to_value(HomeStatusBody::new(&t, None, None)).unwrap();
        assert_eq!(
            (v["state"].clone(), v["heating"].clone()),
            ("mining".into(), true.into())
        );
        assert_eq!(v["heat_output_watt"], 1234.6);
        assert_eq!(v["fan_pwm_percent"], 0);
        assert!(v["thermostat"].is_null());
        assert!(v["efficiency_j_per_th"].is_null(), "no hashrate, no J/TH");
        assert_eq!(v["tuned_levels"], serde_json::json!([]));
    }

    #[test]
    fn home_status_lists_the_tuned_power_levels_by_power() {
        use svcos_proto::hwagent::v1 as hw;
        // hw-agent's own figure is shown, not one derived here (1000 W / 12.5 TH/s would be 80).
        let t = hw::Telemetry {
            power_watt: 1000.0,
            hashrate: Some(hw::Hashrate {
                ghs_1m: 12_500.0,
                ..Default::default()
            }),
            efficiency_j_per_th: 80.004,
            ..Default::default()
        };
        let tuned = |mode: pb::TuneMode, target: f64, w: f64, ths: f64| pb::Profile {
            mode: mode as i32,
            target,
            measured: Some(pb::Measured {
                power_watt: w,
                hashrate_ths: ths,
                efficiency_j_per_th: if ths > 0.0 { w / ths } else { 0.0 },
                ..Default::default()
            }),
            ..Default::default()
        };
        let l = pb::ListProfilesResponse {
            tuned: vec![
                tuned(pb::TuneMode::Power, 900.0, 898.0, 11.0),
                tuned(pb::TuneMode::Power, 600.0, 597.0, 7.3),
                tuned(pb::TuneMode::Hashrate, 10.0, 850.0, 10.0),
                tuned(pb::TuneMode::Power, 700.0, 0.0, 0.0),
            ],
            ..Default::default()
        };
        let v = serde_json::to_value(HomeStatusBody::new(&t, None, Some(&l))).unwrap();
        assert_eq!(v["efficiency_j_per_th"], 80.0);
        let levels = v["tuned_levels"].as_array().unwrap();
        let targets: Vec<f64> = levels
            .iter()
            .map(|x| x["target_watt"].as_f64().unwrap())
            .collect();
        assert_eq!(
            targets,
            [600.0, 900.0],
            "power mode with a measurement only, by power"
        );
        assert_eq!(levels[0]["efficiency_j_per_th"], 81.78);
    }

    #[test]
    fn empty_proto_strings_are_null_and_modes_are_words() {
        let e = pb::FollowerDecision {
            mode: pb::FollowerMode::Offgrid as i32,
            decision: "sleep".into(),
            ..Default::default()
        };
        let v = serde_json::to_value(FollowerDecision::from(&e)).unwrap();
        assert_eq!(v["mode"], "offgrid");
        assert!(v["error"].is_null() && v["hw_state"].is_null() && v["reading"].is_null());
    }

    #[test]
    fn status_shows_the_follower_only_under_its_own_mode() {
        let st = pb::FollowerState {
            mode: pb::FollowerMode::Solar as i32,
            target_watt: Some(750.0),
            last_change_ms: Some(5),
            phase: pb::FollowerPhase::Running as i32,
            last_decision: Some(pb::FollowerDecision {
                t_ms: 5,
                mode: pb::FollowerMode::Solar as i32,
                decision: "run".into(),
                target_watt: Some(750.0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let solar =
            FollowerStatusBody::new(pb::FollowerMode::Solar, true, &st, None, Default::default());
        assert_eq!((solar.state, solar.target_watt), ("running", Some(750.0)));
        assert_eq!(solar.last_decision.map(|d| d.t_ms), Some(5));
        let off = FollowerStatusBody::new(
            pb::FollowerMode::Offgrid,
            true,
            &st,
            None,
            Default::default(),
        );
        assert_eq!(off.state, "waiting_for_reading");
        assert!(off.target_watt.is_none() && off.last_decision.is_none());
        let disabled = FollowerStatusBody::new(
            pb::FollowerMode::Solar,
            false,
            &st,
            None,
            Default::default(),
        );
        assert_eq!(disabled.state, "disabled");
    }

    #[test]
    fn a_failed_test_read_has_an_error_and_no_reading() {
        let r = pb::TestSourceResponse {
            ok: false,
            error: "timeout".into(),
            reading: Some(pb::EnergyReading::default()),
            ..Default::default()
        };
        let v = serde_json::to_value(SourceTestBody::new(pb::FollowerMode::Solar, &r)).unwrap();
        assert_eq!(v["schema"], "svcos.api.solar.test.v1");
        assert_eq!(v["error"], "timeout");
        assert!(v["reading"].is_null());
        assert_eq!(v["applied"], false);
    }
}
