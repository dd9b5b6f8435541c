use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Operating mode; gates which API surfaces are reachable (spec: Home / Standard / Hacker).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Space-heater use: status, pools, config, system info, /api/home/*, sleep/wake, diagnostics.
    Home,
    /// Everything in Home plus stats, profiles, history.
    #[default]
    Standard,
    /// Everything, including /api/debug/* (writes need `confirm: true`).
    Hacker,
}

impl Mode {
    /// The lowercase name used in config and API bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Home => "home",
            Mode::Standard => "standard",
            Mode::Hacker => "hacker",
        }
    }
}

/// `[system]`: identity and operating mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SystemConfig {
    /// Hostname; also accepted as `<hostname>.local` in Host headers. Default "svcos".
    pub hostname: String,
    /// Operating mode. Default "standard".
    pub mode: Mode,
    /// Time zone of the daily windows (night hours, time-of-use): an IANA name of the system tz
    /// database ("Europe/Berlin"), daylight saving included. Default "UTC".
    pub timezone: String,
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            hostname: "svcos".into(),
            mode: Mode::Standard,
            timezone: "UTC".into(),
        }
    }
}

impl SystemConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let ok = !self.hostname.is_empty()
            && self.hostname.len() <= 63
            && self
                .hostname
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !self.hostname.starts_with('-')
            && !self.hostname.ends_with('-');
        if !ok {
            return Err(ConfigError::invalid(
                "system.hostname",
                "1-63 letters, digits or '-', not starting or ending with '-'",
            ));
        }
        if let Err(e) = crate::timewin::Zone::named(&self.timezone) {
            return Err(ConfigError::invalid("system.timezone", e.to_string()));
        }
        Ok(())
    }

    /// The zone of `timezone` (UTC when it does not load: `validate` refuses such a file).
    pub fn zone(&self) -> crate::timewin::Zone {
        crate::timewin::Zone::named(&self.timezone).unwrap_or_else(|_| crate::timewin::Zone::utc())
    }
}
