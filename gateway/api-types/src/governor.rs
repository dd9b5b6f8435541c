//! The power governor's own controllers as the autotuner and thermal routes show them
//! (`POST /api/autotuner/noise-profile`, `/quota`, `/room-temp-factor`,
//! `GET /api/thermal/cold_environment`), and the tuner's per-chip view
//! (`GET /api/autotuner/visibility`). Settings are `[governor]` of the config in force; state
//! is the governor's (`PowerService.GetPower`/`Reconcile`); the limits are its arbitration.

use serde::Serialize;
use svcos_common::config::{
    ColdEnvironmentConfig, Config, ConfigError, NoiseConfig, QuotaConfig, RoomFactorConfig, change,
};
use svcos_proto::tuner::v1 as pb;

use crate::energy::GovernorDecision;
use crate::requests::{NoiseProfileRequest, QuotaRequest, RoomTempFactorRequest};
use crate::round;
use crate::tuning::{RunStateBody, VerdictCounts};

/// A refused request member: (the member's name, what is allowed).
pub type FieldError = (String, String);

/// A numeric request member: (name, value if sent, must be a whole number).
pub type Member = (&'static str, Option<f64>, bool);

/// A write of one `[governor.<section>]`, as its request gives it. The members' ranges are the
/// config's one rule (`svcos_common::config::GovernorConfig`); this only turns the request into
/// a config patch and names the request's member when the config refuses it.
pub trait SectionRequest: serde::de::DeserializeOwned {
    /// The section under `[governor]`.
    const SECTION: &'static str;
    /// The member an empty body is asked for.
    const MAIN: &'static str;
    /// The answer's type.
    type Body: Serialize;
    /// `enabled` and the numeric members as (name, value, must be a whole number).
    fn members(&self) -> (Option<bool>, Vec<Member>);
    /// The answer for the config in force, the governor's state and the write's report.
    fn body(c: &Config, power: &pb::PowerStatus, write: Option<serde_json::Value>) -> Self::Body;

    /// [`Self::members_patch`] checked over `config` by the config's own validation, its
    /// refusal named as the request's member.
    fn patch(&self, config: &Config) -> Result<serde_json::Value, FieldError> {
        let patch = self.members_patch()?;
        let mut merged = serde_json::to_value(config).unwrap_or_default();
        change::merge(&mut merged, &patch);
        match change::config_from_json(&merged, &patch).and_then(|c| c.validate()) {
            Err(ConfigError::Invalid { field, message }) => Err((Self::member(&field), message)),
            _ => Ok(patch),
        }
    }

    /// `{"governor": {SECTION: {...}}}` with the members sent: absent ones keep their value, a
    /// body that sets anything switches the section on unless it says `enabled` itself, an
    /// empty one is refused naming [`Self::MAIN`].
    fn members_patch(&self) -> Result<serde_json::Value, FieldError> {
        let (enabled, numbers) = self.members();
        let mut patch = serde_json::Map::new();
        for (name, v, whole) in numbers {
            let Some(v) = v else { continue };
            let bad = |m: &str| Err((name.to_string(), m.to_string()));
            if !v.is_finite() {
                return bad("a finite number");
            }
            let value = if whole {
                if v.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&v) {
                    return bad("a whole number >= 0");
                }
                serde_json::json!(v as u32)
            } else {
                serde_json::json!(v)
            };
            patch.insert(name.to_string(), value);
        }
        if patch.is_empty() && enabled.is_none() {
            let main = Self::MAIN.to_string();
            return Err((main, format!("send {} (or enabled)", Self::MAIN)));
        }
        patch.insert("enabled".into(), enabled.unwrap_or(true).into());
        Ok(serde_json::json!({"governor": {Self::SECTION: patch}}))
    }

    /// The request's member for a config field (`governor.noise.step_watt` → `step_watt`).
    fn member(field: &str) -> String {
        let prefix = format!("governor.{}.", Self::SECTION);
        field.strip_prefix(&prefix).unwrap_or(field).to_string()
    }
}

impl SectionRequest for NoiseProfileRequest {
    type Body = NoiseProfileBody;
    fn body(
        c: &Config,
        power: &pb::PowerStatus,
        write: Option<serde_json::Value>,
    ) -> NoiseProfileBody {
        NoiseProfileBody::new(c, power, write)
    }
    const SECTION: &'static str = "noise";
    const MAIN: &'static str = "fan_max_percent";
    fn members(&self) -> (Option<bool>, Vec<Member>) {
        let m = vec![
            ("fan_max_percent", self.fan_max_percent, true),
            ("hysteresis_percent", self.hysteresis_percent, true),
            ("step_watt", self.step_watt, false),
            ("min_watt", self.min_watt, false),
            ("interval_s", self.interval_s, true),
        ];
        (self.enabled, m)
    }
}

impl SectionRequest for QuotaRequest {
    type Body = QuotaBody;
    fn body(c: &Config, power: &pb::PowerStatus, write: Option<serde_json::Value>) -> QuotaBody {
        QuotaBody::new(c, power, write)
    }
    const SECTION: &'static str = "quota";
    const MAIN: &'static str = "daily_kwh";
    fn members(&self) -> (Option<bool>, Vec<Member>) {
        let m = vec![
            ("daily_kwh", self.daily_kwh, false),
            ("min_watt", self.min_watt, false),
        ];
        (self.enabled, m)
    }
}

impl SectionRequest for RoomTempFactorRequest {
    type Body = RoomTempFactorBody;
    fn body(
        c: &Config,
        power: &pb::PowerStatus,
        write: Option<serde_json::Value>,
    ) -> RoomTempFactorBody {
        RoomTempFactorBody::new(c, power, write)
    }
    const SECTION: &'static str = "room_factor";
    const MAIN: &'static str = "watt_per_c";
    fn members(&self) -> (Option<bool>, Vec<Member>) {
        let m = vec![
            ("watt_per_c", self.watt_per_c, false),
            ("reference_room_c", self.reference_room_c, false),
            ("base_watt", self.base_watt, false),
            ("max_raise_watt", self.max_raise_watt, false),
            ("min_watt", self.min_watt, false),
        ];
        (self.enabled, m)
    }
}

/// Whether a limit source takes part in the arbitration, its watts, and whether it won.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LimitInForce {
    /// The source's name in the governor's `limits` (`noise`, `quota`, `room_temp`, `warmup`).
    pub source: &'static str,
    /// Its limit now, W (`null`: not limiting).
    pub limit_watt: Option<f64>,
    /// It is the lowest limit: the power target is its figure.
    pub binding: bool,
    /// The power target the governor set, W (`null`: no limit is active).
    pub target_watt: Option<f64>,
}

impl LimitInForce {
    fn of(source: &'static str, power: &pb::PowerStatus) -> Self {
        let d = power.decision.clone().unwrap_or_default();
        LimitInForce {
            source,
            limit_watt: d.limits.iter().find(|l| l.source == source).map(|l| l.watt),
            binding: d.binding == source,
            target_watt: d.target_watt,
        }
    }
}

/// `POST /api/autotuner/noise-profile` (`svcos.api.autotuner.noise_profile.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NoiseProfileBody {
    /// `svcos.api.autotuner.noise_profile.v1`.
    pub schema: &'static str,
    /// `[governor.noise]` in force.
    pub settings: NoiseConfig,
    /// Highest fan duty at the governor's last look, percent (`null` without telemetry).
    pub fan_percent: Option<u32>,
    /// What the controller did last: none, lower, raise, release or hold.
    pub last_action: String,
    /// When its limit last moved, Unix ms (`null`: never).
    pub last_step_ms: Option<i64>,
    /// The `noise` limit in the arbitration.
    pub limit: LimitInForce,
    /// The governor's whole arbitration (`null` before its first tick).
    pub governor: Option<GovernorDecision>,
    /// What the write changed in the config.
    pub write: Option<serde_json::Value>,
}

impl NoiseProfileBody {
    /// The body of the settings in force and the governor's state.
    pub fn new(c: &Config, power: &pb::PowerStatus, write: Option<serde_json::Value>) -> Self {
        let cfg = &c.governor.noise;
        let n = power.noise.clone().unwrap_or_default();
        NoiseProfileBody {
            schema: "svcos.api.autotuner.noise_profile.v1",
            settings: cfg.clone(),
            fan_percent: n.fan_percent,
            last_action: if n.last_action.is_empty() {
                "none".into()
            } else {
                n.last_action
            },
            last_step_ms: (n.last_step_ms > 0).then_some(n.last_step_ms),
            limit: LimitInForce::of("noise", power),
            governor: GovernorDecision::of(power),
            write,
        }
    }
}

/// `POST /api/autotuner/quota` (`svcos.api.autotuner.quota.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QuotaBody {
    /// `svcos.api.autotuner.quota.v1`.
    pub schema: &'static str,
    /// `[governor.quota]` in force.
    pub settings: QuotaConfig,
    /// The local date counted (`[system].timezone`), "YYYY-MM-DD" (`null` before a count).
    pub day: Option<String>,
    /// Energy used that day, kWh (4 decimals).
    pub used_kwh: f64,
    /// Energy left that day, kWh (4 decimals).
    pub remaining_kwh: f64,
    /// The budget is spent: the governor sleeps the miner until the next local day.
    pub spent: bool,
    /// The `quota` limit in the arbitration (the rest spread over the rest of the day).
    pub limit: LimitInForce,
    /// The governor's whole arbitration.
    pub governor: Option<GovernorDecision>,
    /// What the write changed in the config.
    pub write: Option<serde_json::Value>,
}

impl QuotaBody {
    /// The body of the settings in force and the governor's state.
    pub fn new(c: &Config, power: &pb::PowerStatus, write: Option<serde_json::Value>) -> Self {
        let cfg = &c.governor.quota;
        let q = power.quota.clone().unwrap_or_default();
        QuotaBody {
            schema: "svcos.api.autotuner.quota.v1",
            settings: cfg.clone(),
            day: (!q.day.is_empty()).then_some(q.day),
            used_kwh: round(q.used_kwh, 4),
            remaining_kwh: round(q.remaining_kwh, 4),
            spent: q.spent,
            limit: LimitInForce::of("quota", power),
            governor: GovernorDecision::of(power),
            write,
        }
    }
}

/// `POST /api/autotuner/room-temp-factor` (`svcos.api.autotuner.room_temp_factor.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RoomTempFactorBody {
    /// `svcos.api.autotuner.room_temp_factor.v1`.
    pub schema: &'static str,
    /// `[governor.room_factor]` in force.
    pub settings: RoomFactorConfig,
    /// The thermostat's room reading the factor uses, °C (`null`: none, or older than
    /// `[home].reading_max_age_s`; post one to `/api/home/room-temp`).
    pub room_c: Option<f64>,
    /// The base the factor adjusts, W: `base_watt`, else the operator's power target.
    pub base_watt: f64,
    /// The `room_temp` limit in the arbitration.
    pub limit: LimitInForce,
    /// The governor's whole arbitration.
    pub governor: Option<GovernorDecision>,
    /// What the write changed in the config.
    pub write: Option<serde_json::Value>,
}

impl RoomTempFactorBody {
    /// The body of the settings in force and the governor's state.
    pub fn new(c: &Config, power: &pb::PowerStatus, write: Option<serde_json::Value>) -> Self {
        let (cfg, operator_watt) = (&c.governor.room_factor, c.hardware.power_target_watt);
        let r = power.room_factor.unwrap_or_default();
        RoomTempFactorBody {
            schema: "svcos.api.autotuner.room_temp_factor.v1",
            settings: cfg.clone(),
            room_c: r.room_c,
            base_watt: if cfg.base_watt > 0.0 {
                cfg.base_watt
            } else {
                operator_watt
            },
            limit: LimitInForce::of("room_temp", power),
            governor: GovernorDecision::of(power),
            write,
        }
    }
}

/// `GET /api/thermal/cold_environment` (`svcos.api.thermal.cold_environment.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ColdEnvironmentBody {
    /// `svcos.api.thermal.cold_environment.v1`.
    pub schema: &'static str,
    /// `[governor.cold_environment]` in force.
    pub settings: ColdEnvironmentConfig,
    /// The minimum fan duty: hw-agent's `[thermal].fan_min_percent`, the floor of its auto fan
    /// loop (in a cold room the loop sits there), percent.
    pub fan_min_percent: u32,
    /// `[thermal].target_temp_c`: the chip temperature the fan loop holds, °C.
    pub target_temp_c: f64,
    /// off, armed (not hashing: the cap waits for the start), warming_up or done.
    pub phase: String,
    /// Since when the chips warm up, Unix ms (`warming_up` only).
    pub warming_since_ms: Option<i64>,
    /// Hottest chip at the governor's last look, °C (1 decimal; 0 = unknown).
    pub temp_max_c: f64,
    /// The room reading the thermostat holds, °C (`null`: none fresh).
    pub room_c: Option<f64>,
    /// The `warmup` limit in the arbitration.
    pub limit: LimitInForce,
    /// The governor's whole arbitration.
    pub governor: Option<GovernorDecision>,
}

impl ColdEnvironmentBody {
    /// The body of the settings in force and the governor's state.
    pub fn new(c: &Config, power: &pb::PowerStatus) -> Self {
        let (cfg, thermal) = (&c.governor.cold_environment, &c.thermal);
        let w = power.warmup.clone().unwrap_or_default();
        let t = power.thermostat.clone().unwrap_or_default();
        ColdEnvironmentBody {
            schema: "svcos.api.thermal.cold_environment.v1",
            settings: cfg.clone(),
            fan_min_percent: thermal.fan_min_percent,
            target_temp_c: thermal.target_temp_c,
            phase: if w.phase.is_empty() {
                "off".into()
            } else {
                w.phase
            },
            warming_since_ms: w.since_ms,
            temp_max_c: round(w.temp_max_c, 1),
            room_c: t.room_c.filter(|_| t.reading_fresh),
            limit: LimitInForce::of("warmup", power),
            governor: GovernorDecision::of(power),
        }
    }
}

/// One chip as the tuner treats it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VisibleChip {
    /// Chain number.
    pub chain_id: u32,
    /// Chip index on the chain.
    pub chip: u32,
    /// The chip's frequency now, MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Its chain's base frequency in the point in force, MHz (`null` before a point).
    pub chain_frequency_mhz: Option<f64>,
    /// Its frequency less its chain's base in the point in force, MHz (2 decimals; negative
    /// below: the tuner runs each chip at its own edge, above or below the base).
    pub trim_mhz: f64,
    /// ok, weak or dead (`svcos_common::chiphealth`).
    pub verdict: String,
    /// It answered in the window.
    pub alive: bool,
    /// Nonces in the window.
    pub nonces: u64,
    /// HW errors in the window.
    pub hw_errors: u64,
    /// HW errors per nonce (6 decimals).
    pub hw_error_rate: f64,
    /// °C (1 decimal).
    pub temp_c: f64,
    /// Why the chip is where it is, in words.
    pub why: String,
}

/// Why a chip runs where it does: its verdict and its frequency against its chain's base.
pub fn chip_why(c: &pb::ChipHealth, chain_mhz: Option<f64>) -> String {
    if !c.alive || c.verdict == "dead" {
        return "silent in this window: counted as off, its hashing is lost".into();
    }
    let erring = format!("{:.2} % HW errors", c.hw_error_rate * 100.0);
    if c.trim_mhz < -0.05 {
        return format!(
            "held {:.1} MHz below its chain: it erred higher ({erring} now)",
            -c.trim_mhz
        );
    }
    let against = chain_mhz.map(|base| c.frequency_mhz - base);
    match (c.verdict.as_str(), against) {
        ("weak", _) => format!("erring ({erring}): the next window moves it down"),
        (_, Some(d)) if d > 0.05 => {
            format!("clean: running {d:.1} MHz above its chain on its own yield")
        }
        // Before the tuner's first point the frequency is hw-agent's (stock, or scaled by its
        // own power loop), not a tuning decision.
        (_, None) => "clean; no tuner point in force (hw-agent's own frequency)".into(),
        _ => "clean at its chain's frequency".into(),
    }
}

/// `GET /api/autotuner/visibility` (`svcos.api.autotuner.visibility.v1`): the tuner's state
/// and every chip's frequency and verdict with the reason, from `GetState` and
/// `GetChipHealth`. The search's per-chip edges (highest clean, lowest erring frequency) stay
/// inside the tuner's search and are not shown.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VisibilityBody {
    /// `svcos.api.autotuner.visibility.v1`.
    pub schema: &'static str,
    /// The tuner's run state (state, reason, steps, voltage, chain points, transitions).
    pub tuner: RunStateBody,
    /// Start of the chips' counting window, Unix ms.
    pub window_start_ms: i64,
    /// Chips per verdict.
    pub summary: VerdictCounts,
    /// Lowest, mean and highest chip frequency, MHz (2 decimals; 0 without chips).
    pub frequency_min_mhz: f64,
    /// Mean chip frequency, MHz.
    pub frequency_mean_mhz: f64,
    /// Highest chip frequency, MHz.
    pub frequency_max_mhz: f64,
    /// Every chip, by chain then index.
    pub chips: Vec<VisibleChip>,
}

impl VisibilityBody {
    /// The body of the tuner's state and its chip health.
    pub fn new(s: &pb::GetStateResponse, h: &pb::GetChipHealthResponse) -> Self {
        let base = |chain: u32| {
            s.chains
                .iter()
                .find(|c| c.chain_id == chain)
                .map(|c| c.frequency_mhz)
        };
        let mut chips: Vec<VisibleChip> = h
            .chips
            .iter()
            .map(|c| VisibleChip {
                chain_id: c.chain_id,
                chip: c.chip,
                frequency_mhz: round(c.frequency_mhz, 2),
                chain_frequency_mhz: base(c.chain_id).map(|f| round(f, 2)),
                trim_mhz: round(c.trim_mhz, 2),
                verdict: c.verdict.clone(),
                alive: c.alive,
                nonces: c.nonces,
                hw_errors: c.hw_errors,
                hw_error_rate: round(c.hw_error_rate, 6),
                temp_c: round(c.temp_c, 1),
                why: chip_why(c, base(c.chain_id)),
            })
            .collect();
        chips.sort_by_key(|c| (c.chain_id, c.chip));
        let count = |v: &str| chips.iter().filter(|c| c.verdict == v).count();
        let freqs: Vec<f64> = chips.iter().map(|c| c.frequency_mhz).collect();
        let (min, max) = freqs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), f| {
                (lo.min(*f), hi.max(*f))
            });
        let mean = if freqs.is_empty() {
            0.0
        } else {
            freqs.iter().sum::<f64>() / freqs.len() as f64
        };
        VisibilityBody {
            schema: "svcos.api.autotuner.visibility.v1",
            tuner: RunStateBody::from(s),
            window_start_ms: h.window_start_ms,
            summary: VerdictCounts {
                ok: count("ok"),
                weak: count("weak"),
                dead: count("dead"),
            },
            frequency_min_mhz: if freqs.is_empty() { 0.0 } else { round(min, 2) },
            frequency_mean_mhz: round(mean, 2),
            frequency_max_mhz: if freqs.is_empty() { 0.0 } else { round(max, 2) },
            chips,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_becomes_a_patch_of_its_section_or_names_its_member() {
        let r = NoiseProfileRequest {
            fan_max_percent: Some(50.0),
            ..Default::default()
        };
        assert_eq!(
            r.members_patch().unwrap(),
            serde_json::json!({"governor": {"noise": {"fan_max_percent": 50, "enabled": true}}})
        );
        let off = QuotaRequest {
            enabled: Some(false),
            ..Default::default()
        };
        assert_eq!(
            off.members_patch().unwrap(),
            serde_json::json!({"governor": {"quota": {"enabled": false}}})
        );
        let half = NoiseProfileRequest {
            interval_s: Some(2.5),
            ..Default::default()
        };
        assert_eq!(half.members_patch().unwrap_err().0, "interval_s");
        assert_eq!(
            RoomTempFactorRequest::default()
                .members_patch()
                .unwrap_err()
                .0,
            "watt_per_c"
        );
        // The ranges are the config's: its refusal comes back under the request's name.
        let loud = NoiseProfileRequest {
            step_watt: Some(5000.0),
            ..Default::default()
        };
        let (field, message) = loud.patch(&Config::default()).unwrap_err();
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("step_watt", "10-1000 W")
        );
        assert!(r.patch(&Config::default()).is_ok());
        assert_eq!(
            RoomTempFactorRequest::member("governor.room_factor.base_watt"),
            "base_watt"
        );
    }

    fn chip(chain: u32, i: u32, mhz: f64, trim: f64, verdict: &str) -> pb::ChipHealth {
        pb::ChipHealth {
            chain_id: chain,
            chip: i,
            frequency_mhz: mhz,
            trim_mhz: trim,
            nonces: 100,
            hw_errors: u64::from(verdict == "weak") * 5,
            hw_error_rate: if verdict == "weak" { 0.05 } else { 0.0 },
            temp_c: 60.0,
            alive: verdict != "dead",
            verdict: verdict.into(),
        }
    }

    #[test]
    fn every_chip_gets_its_chain_and_a_reason() {
        let s = pb::GetStateResponse {
            state: "tuning".into(),
            reason: "bisecting chip edges".into(),
            steps: 7,
            voltage_mv: 8400.0,
            chains: vec![pb::ChainPoint {
                chain_id: 0,
                frequency_mhz: 600.0,
                chips: vec![],
                switched_off: false,
            }],
            ..Default::default()
        };
        let h = pb::GetChipHealthResponse {
            chips: vec![
                chip(1, 0, 650.0, 0.0, "ok"),
                chip(0, 2, 575.0, -25.0, "weak"),
                chip(0, 1, 612.5, 0.0, "ok"),
                chip(0, 0, 600.0, 0.0, "dead"),
            ],
            window_start_ms: 5,
        };
        let v = VisibilityBody::new(&s, &h);
        assert_eq!(v.tuner.steps, 7);
        assert_eq!(v.tuner.voltage_mv, 8400.0);
        let order: Vec<_> = v.chips.iter().map(|c| (c.chain_id, c.chip)).collect();
        assert_eq!(order, [(0, 0), (0, 1), (0, 2), (1, 0)]);
        assert_eq!((v.summary.ok, v.summary.weak, v.summary.dead), (2, 1, 1));
        assert_eq!((v.frequency_min_mhz, v.frequency_max_mhz), (575.0, 650.0));
        assert!(v.chips[0].why.starts_with("silent"), "{}", v.chips[0].why);
        assert!(
            v.chips[1].why.contains("12.5 MHz above"),
            "{}",
            v.chips[1].why
        );
        assert!(
            v.chips[2].why.contains("25.0 MHz below"),
            "{}",
            v.chips[2].why
        );
        assert_eq!(v.chips[3].chain_frequency_mhz, None);
        assert!(
            v.chips[3].why.contains("no tuner point"),
            "{}",
            v.chips[3].why
        );
    }
}
