//! Setup wizard steps, safety acknowledgement, extra config sections, fleet and swarm, off-grid, solar and home control.
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        planned!(POST "/api/setup/complete", P, Auth, "setup wizard"),
        planned!(POST "/api/setup/quiet-hours", P, Auth, "setup wizard quiet hours"),
        planned!(POST "/api/setup/skip-password", P, Auth, "setup wizard"),
        planned!(POST "/api/setup/skip-safety", P, Auth, "setup wizard"),
        planned!(POST "/api/setup/step-economics", P, Auth, "setup wizard economics"),
        planned!(POST "/api/setup/step1-safety", P, Auth, "setup wizard safety step"),
        planned!(POST "/api/setup/step2-circuit", P, Auth, "setup wizard circuit step"),
        planned!(POST "/api/setup/step3-password", P, Auth, "setup wizard password step"),
        planned!(GET "/api/config/power-calibration", P, Config, "power calibration"),
        planned!(POST "/api/config/power-calibration", P, Config, "power calibration"),
        planned!(GET "/api/config/psu-override", P, Config, "PSU override"),
        planned!(POST "/api/config/psu-override", P, Config, "PSU override"),
        planned!(GET "/api/config/shared", P, Config, "shared configuration"),
        planned!(POST "/api/config/shared", P, Config, "shared configuration"),
        planned!(POST "/api/safety/acknowledge", P, Config, "safety acknowledgement"),
        planned!(POST "/api/fleet/discover", P, Fleet, "fleet discovery"),
        planned!(GET "/api/fleet/miners", P, Fleet, "fleet discovery"),
        planned!(GET "/api/fleet/pool-stats", P, Fleet, "fleet pool statistics"),
        planned!(GET "/api/network/block", P, Fleet, "network block information"),
        planned!(GET "/api/network/config_schema", P, Fleet, "network configuration"),
        planned!(GET "/api/swarm", P, Fleet, "swarm"),
        planned!(POST "/api/swarm/room-temp", P, Fleet, "swarm room temperature"),
        planned!(GET "/api/offgrid/config", P, OffGrid, "off-grid control"),
        planned!(POST "/api/offgrid/config", P, OffGrid, "off-grid control"),
        planned!(GET "/api/offgrid/presets", P, OffGrid, "off-grid control"),
        planned!(GET "/api/offgrid/status", P, OffGrid, "off-grid control"),
        planned!(POST "/api/offgrid/test", P, OffGrid, "off-grid control"),
        planned!(GET "/api/solar/config", P, OffGrid, "solar control"),
        planned!(POST "/api/solar/config", P, OffGrid, "solar control"),
        planned!(GET "/api/solar/status", P, OffGrid, "solar control"),
        planned!(POST "/api/solar/test", P, OffGrid, "solar control"),
        planned!(GET "/api/solar/verification-history", P, OffGrid, "solar verification history"),
        planned!(GET "/api/home/night-mode", P, Integrations, "home night mode"),
        planned!(POST "/api/home/night-mode", P, Integrations, "home night mode"),
        planned!(GET "/api/home/presets", P, Integrations, "home presets"),
        planned!(POST "/api/home/room-temp", P, Integrations, "home room temperature"),
        planned!(POST "/api/home/target", P, Integrations, "home target"),
    ]
}
