//! Autotuner, tuning profiles, dynamic power scaling and time-of-use schedules (backed by the tuner service).
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        planned!(PUT "/api/autotuner/active", P, Tuning, "autotuner"),
        planned!(GET "/api/autotuner/chip-health", P, Tuning, "autotuner chip health"),
        planned!(POST "/api/autotuner/decrement_hashrate_target", P, Tuning, "autotuner targets"),
        planned!(POST "/api/autotuner/decrement_power_target", P, Tuning, "autotuner targets"),
        planned!(POST "/api/autotuner/fleet-profile/export", P, Tuning, "fleet profile export"),
        planned!(POST "/api/autotuner/increment_hashrate_target", P, Tuning, "autotuner targets"),
        planned!(POST "/api/autotuner/increment_power_target", P, Tuning, "autotuner targets"),
        planned!(POST "/api/autotuner/noise-profile", P, Tuning, "autotuner noise profile"),
        planned!(POST "/api/autotuner/profitability", P, Tuning, "autotuner profitability"),
        planned!(POST "/api/autotuner/quota", U, Tuning, "autotuner quota"),
        planned!(POST "/api/autotuner/room-temp-factor", P, Tuning, "autotuner room temperature"),
        planned!(GET "/api/autotuner/saved-status", P, Tuning, "autotuner saved status"),
        planned!(POST "/api/autotuner/set_default_hashrate_target", P, Tuning, "autotuner targets"),
        planned!(GET "/api/autotuner/silicon-report", P, Tuning, "silicon report"),
        planned!(GET "/api/autotuner/telemetry/csv", P, Tuning, "autotuner telemetry CSV"),
        planned!(GET "/api/autotuner/tuned_profiles", P, Tuning, "tuned profiles"),
        planned!(GET "/api/autotuner/visibility", P, Tuning, "autotuner visibility"),
        planned!(POST "/api/perf/calibrate", U, Tuning, "performance calibration"),
        planned!(GET "/api/profile/download", U, Tuning, "profile download"),
        planned!(POST "/api/profile/upload", U, Tuning, "profile upload"),
        planned!(GET "/api/profiles", P, Tuning, "tuning profiles"),
        planned!(POST "/api/profiles", P, Tuning, "tuning profiles"),
        planned!(GET "/api/profiles/silicon", P, Tuning, "silicon profiles"),
        planned!(GET "/api/profiles/silicon-table", P, Tuning, "silicon profile table"),
        planned!(GET "/api/profiles/silicon/:id", P, Tuning, "silicon profiles"),
        planned!(DELETE "/api/profiles/silicon/:id", P, Tuning, "silicon profiles"),
        planned!(PUT "/api/profiles/silicon/active", P, Tuning, "silicon profiles"),
        planned!(POST "/api/profiles/silicon/import", P, Tuning, "silicon profile import"),
        planned!(POST "/api/profiles/silicon/import-json", P, Tuning, "silicon profile import"),
        planned!(POST "/api/profiles/silicon/reload", P, Tuning, "silicon profile reload"),
        planned!(GET "/api/power/dps", P, Thermal, "dynamic power scaling"),
        planned!(GET "/api/thermal/cold_environment", P, Thermal, "cold-environment handling"),
        planned!(GET "/api/tou/schedule", P, Thermal, "time-of-use schedule"),
        planned!(POST "/api/tou/schedule", P, Thermal, "time-of-use schedule"),
    ]
}
