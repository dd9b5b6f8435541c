//! The governor's preset tables: named thermostat settings and battery stop/resume thresholds.
//! They are data the governor's rules are tuned for, so they live next to those rules and the
//! gateway only shows them (`PowerService.ListPresets`) or writes a chosen one to the config.

/// A named thermostat setting (the `[home]` values `POST /api/home/target` writes for it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThermostatPreset {
    /// Name the API takes (`{"preset": name}`).
    pub name: &'static str,
    /// Room temperature to hold, °C.
    pub target_room_c: f64,
    /// Lowest power level before the thermostat sleeps the miner, W.
    pub min_watt: f64,
    /// Highest power level, W.
    pub max_watt: f64,
    /// Change per thermostat step, W.
    pub step_watt: f64,
    /// What it is for.
    pub description: &'static str,
}

/// Stop/resume thresholds for one battery chemistry and pack voltage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatteryPreset {
    /// Name shown by the API.
    pub name: &'static str,
    /// `LiFePO4` or `lead-acid`.
    pub chemistry: &'static str,
    /// State of charge at which the miner sleeps, %.
    pub stop_soc_percent: f64,
    /// State of charge at which it wakes again, %.
    pub resume_soc_percent: f64,
    /// Pack voltage at which the miner sleeps, V.
    pub stop_voltage_v: f64,
    /// Pack voltage at which it wakes again, V.
    pub resume_voltage_v: f64,
    /// What it is for.
    pub description: &'static str,
}

const fn thermostat(
    name: &'static str,
    target_room_c: f64,
    (min_watt, max_watt, step_watt): (f64, f64, f64),
    description: &'static str,
) -> ThermostatPreset {
    ThermostatPreset {
        name,
        target_room_c,
        min_watt,
        max_watt,
        step_watt,
        description,
    }
}

/// The thermostat presets, coolest first.
pub const THERMOSTAT: &[ThermostatPreset] = &[
    thermostat(
        "eco",
        19.0,
        (300.0, 800.0, 100.0),
        "Cool room, low power, quiet",
    ),
    thermostat(
        "comfort",
        21.0,
        (300.0, 1200.0, 100.0),
        "Living-room comfort",
    ),
    thermostat(
        "warm",
        23.0,
        (400.0, 1400.0, 150.0),
        "Warm room, more heat and hashrate",
    ),
    thermostat(
        "boost",
        24.0,
        (600.0, 2000.0, 200.0),
        "Heat a cold room fast",
    ),
];

const fn battery(
    name: &'static str,
    chemistry: &'static str,
    (stop_soc_percent, resume_soc_percent): (f64, f64),
    (stop_voltage_v, resume_voltage_v): (f64, f64),
    description: &'static str,
) -> BatteryPreset {
    BatteryPreset {
        name,
        chemistry,
        stop_soc_percent,
        resume_soc_percent,
        stop_voltage_v,
        resume_voltage_v,
        description,
    }
}

/// Battery presets. LiFePO4 sits flat between 30 and 80 % (3.2–3.325 V per cell); lead-acid
/// is only cycled shallowly (60–90 %) because deep discharges shorten its life.
pub const BATTERY: &[BatteryPreset] = &[
    battery(
        "lifepo4-12v",
        "LiFePO4",
        (30.0, 80.0),
        (12.8, 13.3),
        "4S LiFePO4 (12.8 V nominal)",
    ),
    battery(
        "lifepo4-24v",
        "LiFePO4",
        (30.0, 80.0),
        (25.6, 26.6),
        "8S LiFePO4 (25.6 V nominal)",
    ),
    battery(
        "lifepo4-48v",
        "LiFePO4",
        (30.0, 80.0),
        (51.2, 53.2),
        "16S LiFePO4 (51.2 V nominal)",
    ),
    battery(
        "lead-acid-12v",
        "lead-acid",
        (60.0, 90.0),
        (12.2, 12.8),
        "Flooded/AGM 12 V: shallow cycling only",
    ),
    battery(
        "lead-acid-48v",
        "lead-acid",
        (60.0, 90.0),
        (48.8, 51.2),
        "Flooded/AGM 48 V: shallow cycling only",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::config::Config;

    #[test]
    fn every_thermostat_preset_is_a_valid_home_section() {
        for p in THERMOSTAT {
            let mut config = Config::default();
            config.home.target_room_c = p.target_room_c;
            config.home.min_watt = p.min_watt;
            config.home.max_watt = p.max_watt;
            config.home.step_watt = p.step_watt;
            assert!(
                config.validate().is_ok(),
                "{}: {:?}",
                p.name,
                config.validate()
            );
            assert!(p.min_watt < p.max_watt && p.step_watt > 0.0, "{}", p.name);
        }
    }

    #[test]
    fn presets_are_ordered_and_named_once() {
        let rooms: Vec<f64> = THERMOSTAT.iter().map(|p| p.target_room_c).collect();
        assert!(rooms.windows(2).all(|w| w[0] < w[1]), "{rooms:?}");
        let mut names: Vec<&str> = THERMOSTAT.iter().map(|p| p.name).collect();
        names.extend(BATTERY.iter().map(|p| p.name));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
    }

    #[test]
    fn battery_presets_resume_above_where_they_stop() {
        // Hysteresis: a preset that resumed at or below its stop point would cycle the miner.
        for p in BATTERY {
            assert!(p.resume_soc_percent > p.stop_soc_percent, "{}", p.name);
            assert!(p.resume_voltage_v > p.stop_voltage_v, "{}", p.name);
            assert!((0.0..=100.0).contains(&p.stop_soc_percent), "{}", p.name);
        }
    }
}
