//! Derived figures every owner computes the same way: hw-agent for its telemetry, the tuner for
//! its measured points. The fronts carry the owner's figure and only round it.

/// Joules per terahash from a power draw (W) and a hashrate (GH/s); `None` when either is
/// unknown (zero, negative or not a number).
pub fn j_per_th(power_watt: f64, ghs: f64) -> Option<f64> {
    (power_watt > 0.0 && ghs > 0.0).then(|| power_watt / (ghs / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn j_per_th_needs_both_figures() {
        assert_eq!(j_per_th(1300.0, 13_000.0), Some(100.0));
        assert_eq!(j_per_th(0.0, 13_000.0), None);
        assert_eq!(j_per_th(1300.0, 0.0), None);
        assert_eq!(j_per_th(f64::NAN, 1.0), None);
    }
}
