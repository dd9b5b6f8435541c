//! `/api/safety/warnings` (open): what an owner should know before leaving the miner alone.
//! The rule lives here, next to its body, so the route and the wizard's acknowledgement step
//! (which records which warnings were read) list the same ids without importing each other.

use serde::Serialize;
use svcos_common::config::{Config, Mode};
use svcos_common::statefile::Recovered;
use svcos_proto::hwagent::v1::{MiningState, Telemetry};

/// How urgent a warning is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is at risk.
    Info,
    /// A setting or condition that removes a protection.
    Warning,
    /// The hardware is at risk now.
    Critical,
}

/// One current warning.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SafetyWarning {
    /// Stable id (`hacker_mode`, `donation_enabled`, `manual_fan`, `state_file_recovered`,
    /// `hw_agent_down`, `overheat`, `fan_stalled`, `psu_fault`, `hardware_fault`); the wizard's
    /// acknowledgement records these.
    pub id: &'static str,
    /// How urgent.
    pub severity: Severity,
    /// Human-readable text.
    pub message: String,
}

/// `GET /api/safety/warnings`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SafetyWarningsBody {
    /// `svcos.api.safety.warnings.v1`.
    pub schema: &'static str,
    /// Number of warnings.
    pub count: usize,
    /// The warnings, configuration first, then live hardware.
    pub warnings: Vec<SafetyWarning>,
}

impl SafetyWarningsBody {
    /// The warnings that hold for this config, these recovered state files and this telemetry
    /// (`None`: hw-agent is not reachable).
    pub fn of(config: &Config, recovered: &[Recovered], telemetry: Option<&Telemetry>) -> Self {
        let mut warnings = Vec::new();
        let mut warn = |id, severity, message: String| {
            warnings.push(SafetyWarning {
                id,
                severity,
                message,
            })
        };
        use Severity::{Critical, Info, Warning};
        if config.system.mode == Mode::Hacker {
            let text = "Hacker mode is on: raw debug endpoints can damage hardware";
            warn("hacker_mode", Warning, text.into());
        }
        if config.donation.enabled && config.donation.percent > 0.0 {
            let text = format!("{} % of mining time is donated", config.donation.percent);
            warn("donation_enabled", Info, text);
        }
        let fan = config.thermal.fan_manual_percent;
        if fan > 0 {
            let text = format!("fans are fixed at {fan} %: temperature is not regulated");
            warn("manual_fan", Warning, text);
        }
        for r in recovered {
            let text = format!(
                "{}'s {} was damaged: it was moved aside as {} and defaults were used",
                r.service, r.file, r.aside
            );
            warn("state_file_recovered", Warning, text);
        }
        let Some(t) = telemetry else {
            let text = "no live telemetry: hw-agent is not reachable";
            warn("hw_agent_down", Warning, text.into());
            return Self::with(warnings);
        };
        let hot = config.thermal.hot_temp_c;
        if t.state() == MiningState::Overheat || t.temp_max_c >= hot {
            let text = format!("chips at {:.1} C (limit {hot:.0} C)", t.temp_max_c);
            warn("overheat", Critical, text);
        }
        if t.fans.iter().any(|f| f.stalled) {
            warn("fan_stalled", Critical, "a fan has stalled".into());
        }
        if t.psu.as_ref().is_some_and(|p| !p.fault.is_empty()) {
            warn("psu_fault", Critical, "the PSU reports a fault".into());
        }
        if t.state() == MiningState::Fault {
            warn("hardware_fault", Critical, t.state_reason.clone());
        }
        Self::with(warnings)
    }

    fn with(warnings: Vec<SafetyWarning>) -> Self {
        SafetyWarningsBody {
            schema: "svcos.api.safety.warnings.v1",
            count: warnings.len(),
            warnings,
        }
    }

    /// The ids of the current warnings.
    pub fn ids(&self) -> Vec<String> {
        self.warnings.iter().map(|w| w.id.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::FanTelemetry as Fan;

    fn ids(config: &Config, t: Option<&Telemetry>) -> Vec<String> {
        SafetyWarningsBody::of(config, &[], t).ids()
    }

    #[test]
    fn a_default_config_with_healthy_telemetry_has_no_warning() {
        let t = Telemetry {
            temp_max_c: 60.0,
            ..Default::default()
        };
        let body = SafetyWarningsBody::of(&Config::default(), &[], Some(&t));
        assert_eq!(body.count, 0, "{body:?}");
        assert_eq!(body.schema, "svcos.api.safety.warnings.v1");
    }

    #[test]
    fn settings_that_remove_a_protection_are_warned_about() {
        let mut config = Config::default();
        config.system.mode = Mode::Hacker;
        config.thermal.fan_manual_percent = 40;
        let t = Telemetry::default();
        assert_eq!(ids(&config, Some(&t)), ["hacker_mode", "manual_fan"]);
    }

    #[test]
    fn hardware_at_risk_is_critical_and_a_missing_hw_agent_is_named() {
        let config = Config::default();
        assert_eq!(ids(&config, None), ["hw_agent_down"]);
        let t = Telemetry {
            temp_max_c: config.thermal.hot_temp_c + 1.0,
            fans: vec![Fan {
                stalled: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = SafetyWarningsBody::of(&config, &[], Some(&t));
        assert_eq!(body.ids(), ["overheat", "fan_stalled"]);
        assert!(
            body.warnings
                .iter()
                .all(|w| w.severity == Severity::Critical)
        );
    }

    #[test]
    fn a_recovered_state_file_names_the_service_and_the_aside_copy() {
        let r = Recovered {
            service: "tuner".into(),
            file: "settings.json".into(),
            aside: "settings.json.corrupt-1".into(),
            moved_at_ms: 1,
        };
        let body = SafetyWarningsBody::of(&Config::default(), &[r], Some(&Telemetry::default()));
        assert_eq!(body.ids(), ["state_file_recovered"]);
        assert!(body.warnings[0].message.contains("tuner's settings.json"));
        assert!(body.warnings[0].message.contains("settings.json.corrupt-1"));
    }
}
