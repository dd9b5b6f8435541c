//! Operating-point bounds every writer of a chip frequency or a chain voltage enforces: config
//! validation, the gateway's debug and tuning routes, hw-agent's control and diagnostics RPCs,
//! the tuner's profile store and the cgminer `ascset`; and the power target, which
//! `[hardware].power_target_watt` and hw-agent's `SetPowerTarget` both check; the fan duties and
//! the temperature target, which `[thermal]` and hw-agent's `SetFan` check (the gateway and the
//! other fronts pass hw-agent's verdict on with its field). Defined once so no path can accept
//! what another refuses.

/// A closed range with its unit, for checks and for the messages that name it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// Lowest accepted value.
    pub min: f64,
    /// Highest accepted value.
    pub max: f64,
    /// Unit as messages show it.
    pub unit: &'static str,
}

impl Bound {
    /// Whether `v` is inside (NaN never is).
    pub fn contains(&self, v: f64) -> bool {
        (self.min..=self.max).contains(&v)
    }

    /// `"50-1200 MHz"`, as error messages show the range.
    pub fn describe(&self) -> String {
        format!("{}-{} {}", self.min, self.max, self.unit)
    }
}

/// Chip PLL frequency, MHz.
pub const FREQUENCY_MHZ: Bound = Bound {
    min: 50.0,
    max: 1200.0,
    unit: "MHz",
};

/// Chain supply voltage, mV (the PSU's VOUT_COMMAND range).
pub const VOLTAGE_MV: Bound = Bound {
    min: 1000.0,
    max: 16000.0,
    unit: "mV",
};

/// Power target, W (0 = none); the top is [`crate::config::MAX_WATT`], the most any cap may name.
pub const POWER_TARGET_WATT: Bound = Bound {
    min: 0.0,
    max: crate::config::MAX_WATT,
    unit: "W",
};

/// Fan duty, % (a ceiling, a floor, a duty hw-agent reports).
pub const FAN_PERCENT: Bound = Bound {
    min: 0.0,
    max: 100.0,
    unit: "%",
};

/// A duty set by hand: 0 would stop the fans, so manual control starts at 1 % (0 in
/// `[thermal].fan_manual_percent` means automatic control instead).
pub const FAN_MANUAL_PERCENT: Bound = Bound {
    min: 1.0,
    max: 100.0,
    unit: "%",
};

/// The chips' temperature target of the fan loop, °C: below 30 the fans could never reach
/// it, above 95 the chips would sit at the hot limit's door.
pub const TARGET_TEMP_C: Bound = Bound {
    min: 30.0,
    max: 95.0,
    unit: "C",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_inside_and_nan_is_not() {
        for b in [
            FREQUENCY_MHZ,
            VOLTAGE_MV,
            POWER_TARGET_WATT,
            FAN_PERCENT,
            FAN_MANUAL_PERCENT,
            TARGET_TEMP_C,
        ] {
            assert!(b.contains(b.min) && b.contains(b.max));
            assert!(!b.contains(b.min - 0.001) && !b.contains(b.max + 0.001));
            assert!(!b.contains(f64::NAN));
        }
        assert_eq!(FREQUENCY_MHZ.describe(), "50-1200 MHz");
        assert_eq!(VOLTAGE_MV.describe(), "1000-16000 mV");
        assert_eq!(POWER_TARGET_WATT.describe(), "0-10000 W");
        assert_eq!(TARGET_TEMP_C.describe(), "30-95 C");
    }
}
