use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[energy]`: follow the power a local energy system can spare (solar surplus or an off-grid
/// battery). The reading comes from a LAN HTTP endpoint that answers JSON; nothing leaves the
/// LAN. At most one of the two followers is enabled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct EnergyConfig {
    /// Grid-tied solar: follow the exported surplus.
    pub solar: SolarConfig,
    /// Off-grid: follow the battery state of charge / voltage (and the surplus when given).
    pub offgrid: OffgridConfig,
}

/// `[energy.solar]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SolarConfig {
    /// Default false.
    pub enabled: bool,
    /// LAN endpoint answering JSON, `http://host[:port]/path`. Default empty.
    pub source_url: String,
    /// JSON pointer (RFC 6901) of the surplus in watts, e.g. "/grid/export_w". Default "/surplus_w".
    pub surplus_watt_pointer: String,
    /// Seconds between readings; 1-3600. Default 30.
    pub poll_interval_s: u32,
    /// Kept back from the surplus for the house, W. Default 0.
    pub reserve_watt: f64,
    /// Below this much spare power the miner sleeps, W. Default 300.
    pub min_watt: f64,
    /// Highest power target used, W; 0 = no extra cap. Default 0.
    pub max_watt: f64,
    /// A sleeping miner wakes only with `min_watt + wake_margin_watt` to spare, W. Default 150.
    pub wake_margin_watt: f64,
    /// Least time between two sleep/wake changes, s; 0-86400. Default 300.
    pub min_dwell_s: u32,
}

impl Default for SolarConfig {
    fn default() -> Self {
        SolarConfig {
            enabled: false,
            source_url: String::new(),
            surplus_watt_pointer: "/surplus_w".into(),
            poll_interval_s: 30,
            reserve_watt: 0.0,
            min_watt: 300.0,
            max_watt: 0.0,
            wake_margin_watt: 150.0,
            min_dwell_s: 300,
        }
    }
}

/// `[energy.offgrid]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct OffgridConfig {
    /// Default false.
    pub enabled: bool,
    /// LAN endpoint answering JSON (battery monitor, inverter, Home Assistant). Default empty.
    pub source_url: String,
    /// JSON pointer of the battery state of charge, percent; empty = not used. Default "/soc".
    pub soc_pointer: String,
    /// JSON pointer of the battery voltage, V; empty = not used. Default empty.
    pub voltage_pointer: String,
    /// JSON pointer of the spare power, W; empty = run at `max_watt` while the battery allows.
    /// Default empty.
    pub surplus_watt_pointer: String,
    /// Seconds between readings; 1-3600. Default 30.
    pub poll_interval_s: u32,
    /// Sleep at or below this state of charge, percent. Default 40.
    pub stop_soc_percent: f64,
    /// Wake only at or above this state of charge, percent (> stop). Default 80.
    pub resume_soc_percent: f64,
    /// Sleep at or below this battery voltage, V; 0 = not used. Default 0.
    pub stop_voltage_v: f64,
    /// Wake only at or above this battery voltage, V (> stop). Default 0.
    pub resume_voltage_v: f64,
    /// Below this much spare power the miner sleeps, W. Default 300.
    pub min_watt: f64,
    /// Power target while the battery allows (and cap of the surplus), W. Default 1000.
    pub max_watt: f64,
    /// Least time between two sleep/wake changes, s. Default 600.
    pub min_dwell_s: u32,
}

impl Default for OffgridConfig {
    fn default() -> Self {
        OffgridConfig {
            enabled: false,
            source_url: String::new(),
            soc_pointer: "/soc".into(),
            voltage_pointer: String::new(),
            surplus_watt_pointer: String::new(),
            poll_interval_s: 30,
            stop_soc_percent: 40.0,
            resume_soc_percent: 80.0,
            stop_voltage_v: 0.0,
            resume_voltage_v: 0.0,
            min_watt: 300.0,
            max_watt: 1000.0,
            min_dwell_s: 600,
        }
    }
}

fn check_url(field: &str, text: &str, enabled: bool) -> Result<(), ConfigError> {
    if text.is_empty() && !enabled {
        return Ok(());
    }
    let shape = || ConfigError::invalid(field, "http://host[:port]/path, at most 512 characters");
    let url = match url::Url::parse(text) {
        Ok(url) if url.scheme() == "http" => url,
        Ok(_) | Err(url::ParseError::RelativeUrlWithoutBase) => {
            return Err(ConfigError::invalid(
                field,
                "an http:// URL on the LAN (https and cloud services are not used)",
            ));
        }
        Err(_) => return Err(shape()),
    };
    if !url.username().is_empty() || url.password().is_some() {
        // GET answers show the URL: it must not carry a secret.
        return Err(ConfigError::invalid(
            field,
            "credentials in the URL are not supported (the URL is shown in GET answers)",
        ));
    }
    if url.host_str().is_none_or(str::is_empty)
        || text.len() > 512
        || text.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(shape());
    }
    Ok(())
}

fn check_pointer(field: &str, p: &str, required: bool) -> Result<(), ConfigError> {
    if (p.is_empty() && !required) || (p.starts_with('/') && p.len() <= 256) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        field,
        "a JSON pointer such as \"/battery/soc\" (RFC 6901)",
    ))
}

fn check_range(field: &str, v: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(ConfigError::invalid(field, format!("{lo}-{hi}")))
    }
}

impl EnergyConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.solar;
        check_url("energy.solar.source_url", &s.source_url, s.enabled)?;
        check_pointer(
            "energy.solar.surplus_watt_pointer",
            &s.surplus_watt_pointer,
            true,
        )?;
        check_range(
            "energy.solar.poll_interval_s",
            s.poll_interval_s.into(),
            1.0,
            3600.0,
        )?;
        check_range(
            "energy.solar.reserve_watt",
            s.reserve_watt,
            0.0,
            super::power::MAX_WATT,
        )?;
        check_range(
            "energy.solar.min_watt",
            s.min_watt,
            50.0,
            super::power::MAX_WATT,
        )?;
        if s.max_watt != 0.0 && !(s.min_watt..=super::power::MAX_WATT).contains(&s.max_watt) {
            return Err(ConfigError::invalid(
                "energy.solar.max_watt",
                "0 (no cap) or between min_watt and 10000 W",
            ));
        }
        check_range(
            "energy.solar.wake_margin_watt",
            s.wake_margin_watt,
            0.0,
            5000.0,
        )?;
        check_range(
            "energy.solar.min_dwell_s",
            s.min_dwell_s.into(),
            0.0,
            86_400.0,
        )?;

        let o = &self.offgrid;
        check_url("energy.offgrid.source_url", &o.source_url, o.enabled)?;
        check_pointer("energy.offgrid.soc_pointer", &o.soc_pointer, false)?;
        check_pointer("energy.offgrid.voltage_pointer", &o.voltage_pointer, false)?;
        check_pointer(
            "energy.offgrid.surplus_watt_pointer",
            &o.surplus_watt_pointer,
            false,
        )?;
        if o.enabled && o.soc_pointer.is_empty() && o.voltage_pointer.is_empty() {
            return Err(ConfigError::invalid(
                "energy.offgrid.soc_pointer",
                "set soc_pointer or voltage_pointer: off-grid control needs a battery reading",
            ));
        }
        check_range(
            "energy.offgrid.poll_interval_s",
            o.poll_interval_s.into(),
            1.0,
            3600.0,
        )?;
        check_range(
            "energy.offgrid.stop_soc_percent",
            o.stop_soc_percent,
            0.0,
            100.0,
        )?;
        if !(o.stop_soc_percent..=100.0).contains(&o.resume_soc_percent)
            || o.resume_soc_percent == o.stop_soc_percent
        {
            return Err(ConfigError::invalid(
                "energy.offgrid.resume_soc_percent",
                "above stop_soc_percent and at most 100",
            ));
        }
        check_range(
            "energy.offgrid.stop_voltage_v",
            o.stop_voltage_v,
            0.0,
            1000.0,
        )?;
        if o.stop_voltage_v > 0.0 && o.resume_voltage_v <= o.stop_voltage_v {
            return Err(ConfigError::invalid(
                "energy.offgrid.resume_voltage_v",
                "above stop_voltage_v",
            ));
        }
        check_range(
            "energy.offgrid.min_watt",
            o.min_watt,
            50.0,
            super::power::MAX_WATT,
        )?;
        check_range(
            "energy.offgrid.max_watt",
            o.max_watt,
            o.min_watt,
            super::power::MAX_WATT,
        )?;
        check_range(
            "energy.offgrid.min_dwell_s",
            o.min_dwell_s.into(),
            0.0,
            86_400.0,
        )?;
        if s.enabled && o.enabled {
            return Err(ConfigError::invalid(
                "energy.offgrid.enabled",
                "solar and off-grid following cannot both be enabled",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(e: &EnergyConfig) -> Option<String> {
        e.validate()
            .err()
            .and_then(|e| e.field().map(str::to_string))
    }

    #[test]
    fn rules_name_the_field() {
        assert_eq!(field_of(&EnergyConfig::default()), None);
        let mut e = EnergyConfig::default();
        e.solar.enabled = true;
        e.solar.source_url = "https://cloud.example/api".into();
        assert_eq!(field_of(&e).as_deref(), Some("energy.solar.source_url"));
        e.solar.source_url = "http://user:secret@10.0.0.2/x".into();
        assert_eq!(field_of(&e).as_deref(), Some("energy.solar.source_url"));
        for bad in [
            "http://",
            "http://10.0.0.2:99999/x",
            "http://a b/",
            "10.0.0.2/x",
        ] {
            e.solar.source_url = bad.into();
            assert_eq!(
                field_of(&e).as_deref(),
                Some("energy.solar.source_url"),
                "{bad}"
            );
        }
        e.solar.source_url = "http://10.0.0.2/x".into();
        assert_eq!(field_of(&e), None);
        e.offgrid.enabled = true;
        e.offgrid.source_url = "http://10.0.0.3/".into();
        assert_eq!(field_of(&e).as_deref(), Some("energy.offgrid.enabled"));
        e.solar.enabled = false;
        e.offgrid.resume_soc_percent = e.offgrid.stop_soc_percent;
        assert_eq!(
            field_of(&e).as_deref(),
            Some("energy.offgrid.resume_soc_percent")
        );
    }
}
