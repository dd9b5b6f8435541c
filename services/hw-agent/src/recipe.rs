//! The environment recipe: the cooling, fan and power settings the board thread has in force,
//! each with where it came from.
//!
//! The board thread is the one place these values meet (the config sections it was given, the
//! `SetFan`/`SetPowerTarget` calls it took and who made them, the hard limit it clamps to), so
//! the recipe is built here from its state and nowhere else. Sources:
//!
//! | Source | Meaning |
//! |---|---|
//! | `config:<key>` | the config file sets the key to something other than its default |
//! | `default:<key>` | the key has its built-in default (set or not: the file cannot tell) |
//! | `mode:<mode>` | `[system].mode` decides it (Home caps fans by cutting frequency) |
//! | `governor:<limit>` | the tuner's power governor sent it; `<limit>` is the binding limit |
//! | `api` | an operator through the REST API |
//! | `rpc` | another gRPC caller that did not name itself |
//! | `thermal_pid` | the fan PID chose it toward the target |

use svcos_common::config::{HardwareConfig, Mode, PowerConfig, ThermalConfig};
use svcos_proto::hwagent::v1::RecipeEntry;

use crate::limits::Clamp;

/// `config:<key>` when `value` differs from the default, else `default:<key>`.
pub fn config_source(key: &str, value: f64, default: f64) -> String {
    if value == default {
        format!("default:{key}")
    } else {
        format!("config:{key}")
    }
}

/// The name a caller gave (`rpc` when it gave none).
pub fn caller_source(given: &str) -> String {
    if given.trim().is_empty() {
        "rpc".into()
    } else {
        given.trim().chars().take(64).collect()
    }
}

/// Where each operator-changeable value in force came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sources {
    /// Fan mode and manual duty.
    pub fan: String,
    /// Fan PID target.
    pub target: String,
    /// Power target.
    pub power_target: String,
}

impl Sources {
    /// Everything as the config sets it (start-up and config reloads).
    pub fn from_config(thermal: &ThermalConfig, hw: &HardwareConfig) -> Self {
        let d = ThermalConfig::default();
        Sources {
            fan: config_source(
                "thermal.fan_manual_percent",
                f64::from(thermal.fan_manual_percent),
                f64::from(d.fan_manual_percent),
            ),
            target: config_source(
                "thermal.target_temp_c",
                thermal.target_temp_c,
                d.target_temp_c,
            ),
            power_target: config_source(
                "hardware.power_target_watt",
                hw.power_target_watt,
                HardwareConfig::default().power_target_watt,
            ),
        }
    }
}

/// What the board thread has in force.
#[derive(Debug, Clone)]
pub struct InForce<'a> {
    /// `[thermal]` it runs on.
    pub thermal: &'a ThermalConfig,
    /// `[power]` it runs on.
    pub power: &'a PowerConfig,
    /// `[system].mode`.
    pub mode: Mode,
    /// Manual fan duty, percent; `None` in auto.
    pub fan_manual: Option<u32>,
    /// Duty the fans are driven at now, percent.
    pub fan_duty_percent: Option<u32>,
    /// Fan PID target, C.
    pub target_c: f64,
    /// The power target and its clamp.
    pub power_target: Clamp,
    /// Backstop share of the power loop.
    pub backstop_share: f64,
    /// Night-mode or operator sleep.
    pub sleeping: bool,
    /// Who set what.
    pub sources: &'a Sources,
}

fn entry(part: &str, name: &str, value: Option<f64>, unit: &str, source: String) -> RecipeEntry {
    RecipeEntry {
        part: part.into(),
        name: name.into(),
        value,
        text: String::new(),
        unit: unit.into(),
        source,
    }
}

fn word(part: &str, name: &str, text: &str, source: String) -> RecipeEntry {
    RecipeEntry {
        part: part.into(),
        name: name.into(),
        value: None,
        text: text.into(),
        unit: String::new(),
        source,
    }
}

/// The recipe of what is in force, in a fixed order.
pub fn build(f: &InForce<'_>) -> Vec<RecipeEntry> {
    let d = ThermalConfig::default();
    let t = f.thermal;
    let mode = f.mode.as_str();
    let mode_source = if f.mode == Mode::default() {
        "default:system.mode".to_string()
    } else {
        "config:system.mode".to_string()
    };
    let src = |key: &str, v: f64, dv: f64| config_source(key, v, dv);
    let mut out = vec![
        word(
            "cooling",
            "fan_mode",
            if f.fan_manual.is_some() {
                "manual"
            } else {
                "auto"
            },
            f.sources.fan.clone(),
        ),
        entry(
            "cooling",
            "fan_duty_percent",
            f.fan_duty_percent.map(f64::from),
            "%",
            match f.fan_manual {
                Some(_) => f.sources.fan.clone(),
                None => "thermal_pid".into(),
            },
        ),
        word(
            "cooling",
            "fan_cap_behaviour",
            if f.mode == Mode::Home {
                "cut frequency rather than exceed fan_max_percent"
            } else {
                "fans up to fan_max_percent, hashing cut above hot_temp_c"
            },
            format!("mode:{mode}"),
        ),
        word("cooling", "mode", mode, mode_source),
        entry(
            "fan",
            "target_temp_c",
            Some(f.target_c),
            "C",
            f.sources.target.clone(),
        ),
        entry(
            "fan",
            "fan_min_percent",
            Some(f64::from(t.fan_min_percent)),
            "%",
            src(
                "thermal.fan_min_percent",
                f64::from(t.fan_min_percent),
                f64::from(d.fan_min_percent),
            ),
        ),
        entry(
            "fan",
            "fan_max_percent",
            Some(f64::from(t.fan_max_percent)),
            "%",
            src(
                "thermal.fan_max_percent",
                f64::from(t.fan_max_percent),
                f64::from(d.fan_max_percent),
            ),
        ),
    ];
    if let Some(duty) = f.fan_manual {
        out.push(entry(
            "fan",
            "manual_percent",
            Some(f64::from(duty)),
            "%",
            f.sources.fan.clone(),
        ));
    }
    out.extend([
        entry(
            "thermal",
            "hot_temp_c",
            Some(t.hot_temp_c),
            "C",
            src("thermal.hot_temp_c", t.hot_temp_c, d.hot_temp_c),
        ),
        entry(
            "thermal",
            "dangerous_temp_c",
            Some(t.dangerous_temp_c),
            "C",
            src(
                "thermal.dangerous_temp_c",
                t.dangerous_temp_c,
                d.dangerous_temp_c,
            ),
        ),
    ]);
    let c = &f.power_target;
    let limit_key = |source: &str| match source {
        "circuit" => "config:power.circuit_limit_watt".to_string(),
        "psu_override" => "config:power.psu_override.max_watt".to_string(),
        "setup" => "config:power.setup_hold".to_string(),
        other => other.to_string(),
    };
    out.push(entry(
        "power",
        "requested_target_watt",
        (c.requested_watt > 0.0).then_some(c.requested_watt),
        "W",
        f.sources.power_target.clone(),
    ));
    out.push(entry(
        "power",
        "target_watt",
        (c.applied_watt > 0.0).then_some(c.applied_watt),
        "W",
        match (c.clamped, c.limit) {
            (true, Some(l)) => limit_key(l.source),
            _ => f.sources.power_target.clone(),
        },
    ));
    out.push(match c.limit {
        Some(l) => entry(
            "power",
            "hard_limit_watt",
            Some(l.watt),
            "W",
            limit_key(l.source),
        ),
        None => entry(
            "power",
            "hard_limit_watt",
            None,
            "W",
            "default:power.circuit_limit_watt".into(),
        ),
    });
    out.push(entry(
        "power",
        "backstop_share",
        Some(f.backstop_share),
        "",
        f.sources.power_target.clone(),
    ));
    out.push(word(
        "power",
        "sleep",
        if f.sleeping { "asleep" } else { "awake" },
        "rpc".into(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{clamp, hard_limit};

    fn find<'a>(r: &'a [RecipeEntry], name: &str) -> &'a RecipeEntry {
        r.iter().find(|e| e.name == name).unwrap()
    }

    #[test]
    fn sources_follow_the_config_and_the_callers() {
        let mut thermal = ThermalConfig::default();
        let hw = HardwareConfig::default();
        let mut power = PowerConfig::default();
        let mut sources = Sources::from_config(&thermal, &hw);
        let mk = |thermal: &ThermalConfig,
                  power: &PowerConfig,
                  sources: &Sources,
                  manual: Option<u32>,
                  requested: f64| {
            build(&InForce {
                thermal,
                power,
                mode: Mode::Standard,
                fan_manual: manual,
                fan_duty_percent: Some(42),
                target_c: thermal.target_temp_c,
                power_target: clamp(requested, hard_limit(power)),
                backstop_share: 0.0,
                sleeping: false,
                sources,
            })
        };
        let r = mk(&thermal, &power, &sources, None, 0.0);
        assert_eq!(find(&r, "fan_mode").text, "auto");
        assert_eq!(find(&r, "fan_duty_percent").source, "thermal_pid");
        assert_eq!(
            find(&r, "target_temp_c").source,
            "default:thermal.target_temp_c"
        );
        assert_eq!(find(&r, "mode").source, "default:system.mode");

        // A config that sets the target and a manual duty names its keys.
        thermal.target_temp_c = 70.0;
        thermal.fan_manual_percent = 60;
        sources = Sources::from_config(&thermal, &hw);
        let r = mk(&thermal, &power, &sources, Some(60), 0.0);
        assert_eq!(find(&r, "fan_mode").text, "manual");
        assert_eq!(
            find(&r, "target_temp_c").source,
            "config:thermal.target_temp_c"
        );
        assert_eq!(
            find(&r, "manual_percent").source,
            "config:thermal.fan_manual_percent"
        );

        // The governor's night-mode fan cap and power target name the governor; a clamp names
        // the limit's key.
        sources.fan = caller_source("governor:night_mode");
        sources.power_target = caller_source("governor:thermostat");
        power.circuit_limit_watt = 1000.0;
        let r = mk(&thermal, &power, &sources, Some(40), 1200.0);
        assert_eq!(find(&r, "fan_mode").source, "governor:night_mode");
        assert_eq!(
            find(&r, "requested_target_watt").source,
            "governor:thermostat"
        );
        let t = find(&r, "target_watt");
        assert_eq!(
            (t.value, t.source.as_str()),
            (Some(1000.0), "config:power.circuit_limit_watt")
        );
        assert_eq!(caller_source("  "), "rpc");
    }
}
