//! Hard power limits and the power-reading calibration, applied here because hw-agent is the
//! only process that touches the hardware: whoever sends a power target (the tuner's governor,
//! an operator through the gateway, a test over gRPC), it is clamped to the circuit and PSU
//! limits before it reaches the power loop, and the clamp is reported in the reply and in
//! telemetry. Calibration is applied once, to the PSU reading, so every reader (REST, `/ws`,
//! cgminer, MQTT, history, the tuner) sees the same watts, and the power loop caps the same
//! watts the operator sees. The formula is `PowerConfig::calibrated_watt`; the board thread
//! applies it to each PSU reading (`control`).

use svcos_common::config::{PowerConfig, SETUP_HOLD_WATT};

/// The lowest configured hard limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HardLimit {
    /// Watts.
    pub watt: f64,
    /// `circuit`, `psu_override` or `setup`.
    pub source: &'static str,
}

/// The hard limit of a `[power]` section: the lowest of the circuit's continuous-load cap, the
/// declared PSU rating and, while setup is not finished (`setup_hold`), the setup cap;
/// `None` when none is set. Read from hw-agent's own config, so the hold needs no gateway.
pub fn hard_limit(power: &PowerConfig) -> Option<HardLimit> {
    let mut limits = Vec::with_capacity(3);
    if power.setup_hold {
        limits.push(HardLimit {
            watt: SETUP_HOLD_WATT,
            source: "setup",
        });
    }
    if power.circuit_limit_watt > 0.0 {
        limits.push(HardLimit {
            watt: power.circuit_limit_watt,
            source: "circuit",
        });
    }
    if power.psu_override.enabled && power.psu_override.max_watt > 0.0 {
        limits.push(HardLimit {
            watt: power.psu_override.max_watt,
            source: "psu_override",
        });
    }
    limits.into_iter().min_by(|a, b| a.watt.total_cmp(&b.watt))
}

/// A target after the clamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clamp {
    /// What was asked (0 = no target).
    pub requested_watt: f64,
    /// What is enforced (0 = no target).
    pub applied_watt: f64,
    /// The request (or "no target") was above the limit.
    pub clamped: bool,
    /// The limit in force.
    pub limit: Option<HardLimit>,
}

/// Clamp a requested target (0 = none) to a hard limit: "none" becomes the limit itself.
pub fn clamp(requested_watt: f64, limit: Option<HardLimit>) -> Clamp {
    let (applied_watt, clamped) = match limit {
        Some(l) if requested_watt <= 0.0 || requested_watt > l.watt => (l.watt, true),
        _ => (requested_watt.max(0.0), false),
    };
    Clamp {
        requested_watt,
        applied_watt,
        clamped,
        limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn power(circuit: f64, psu: Option<f64>) -> PowerConfig {
        let mut p = PowerConfig {
            circuit_limit_watt: circuit,
            ..Default::default()
        };
        if let Some(w) = psu {
            p.psu_override.enabled = true;
            p.psu_override.max_watt = w;
        }
        p
    }

    #[test]
    fn the_lowest_limit_binds() {
        assert_eq!(hard_limit(&power(0.0, None)), None);
        assert_eq!(hard_limit(&power(1152.0, None)).unwrap().source, "circuit");
        let l = hard_limit(&power(1152.0, Some(900.0))).unwrap();
        assert_eq!((l.watt, l.source), (900.0, "psu_override"));
        let l = hard_limit(&power(800.0, Some(900.0))).unwrap();
        assert_eq!((l.watt, l.source), (800.0, "circuit"));
        // A disabled override declares nothing.
        let mut p = power(0.0, Some(900.0));
        p.psu_override.enabled = false;
        assert_eq!(hard_limit(&p), None);
        // The setup hold is one more limit: it binds while it is the lowest, and a lower
        // circuit cap still wins.
        let mut p = power(1152.0, None);
        p.setup_hold = true;
        let l = hard_limit(&p).unwrap();
        assert_eq!((l.watt, l.source), (SETUP_HOLD_WATT, "setup"));
        p.circuit_limit_watt = SETUP_HOLD_WATT - 100.0;
        assert_eq!(hard_limit(&p).unwrap().source, "circuit");
        p.setup_hold = false;
        p.circuit_limit_watt = 0.0;
        assert_eq!(hard_limit(&p), None);
    }

    #[test]
    fn clamp_table() {
        let l = Some(HardLimit {
            watt: 1000.0,
            source: "circuit",
        });
        // (requested, limit, applied, clamped)
        let cases = [
            (1500.0, l, 1000.0, true),
            (1000.0, l, 1000.0, false),
            (700.0, l, 700.0, false),
            (0.0, l, 1000.0, true),
            (1500.0, None, 1500.0, false),
            (0.0, None, 0.0, false),
        ];
        for (req, limit, applied, clamped) in cases {
            let c = clamp(req, limit);
            assert_eq!((c.applied_watt, c.clamped), (applied, clamped), "{req} W");
            assert_eq!(c.requested_watt, req);
        }
    }

    #[test]
    fn calibration_is_affine_and_never_negative() {
        let mut p = PowerConfig {
            calibration_factor: 1.1,
            calibration_offset_watt: 5.0,
            ..Default::default()
        };
        assert!((p.calibrated_watt(1000.0) - 1105.0).abs() < 1e-9);
        assert_eq!(p.calibrated_watt(0.0), 0.0);
        p.calibration_offset_watt = -500.0;
        assert_eq!(p.calibrated_watt(100.0), 0.0);
    }
}
