//! Setup wizard steps, safety acknowledgement, extra config sections, fleet and swarm, off-grid,
//! solar and home control.
//!
//! The power-related features (circuit cap, PSU override, night mode, thermostat, solar and
//! off-grid following) do not talk to hw-agent themselves: they feed the power governor
//! ([`governor`]), which arbitrates them into one power target and sleep state. Operations
//! still marked `planned!` answer 501 with the envelope until their feature lands.

pub mod config_sections;
pub mod energy;
pub mod energy_api;
pub mod fleet;
pub mod governor;
pub mod home;
pub mod setup;
pub mod thermostat;

use std::sync::Mutex;

use svcos_common::config::Config;
use svcos_common::{Layout, ServiceName};

use crate::planned;
use crate::registry::Route;

/// Runtime state of these features, owned by the gateway's shared state.
#[derive(Debug)]
pub struct OpsState {
    /// Power governor (thermostat, energy follower, applied effects).
    pub governor: governor::Governor,
    /// Serialises setup-wizard read-modify-write of its state file.
    pub wizard: tokio::sync::Mutex<()>,
    /// The last fleet discovery.
    pub fleet: Mutex<Option<fleet::Scan>>,
    /// One discovery at a time.
    pub fleet_scan: tokio::sync::Mutex<()>,
}

impl OpsState {
    /// Load persisted state from the gateway's state directory.
    pub fn load(layout: &Layout) -> Self {
        let dir = layout.service_state_dir(ServiceName::Gateway);
        OpsState {
            fleet: Mutex::new(governor::read_json(&dir.join("fleet-scan.json"))),
            governor: governor::Governor::load(dir),
            wizard: tokio::sync::Mutex::new(()),
            fleet_scan: tokio::sync::Mutex::new(()),
        }
    }
}

/// Reported power after the operator's calibration (`[power].calibration_*`).
pub fn calibrated_power(config: &Config, raw_watt: f64) -> f64 {
    config.power.calibrated_watt(raw_watt)
}

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    let mut rows = Vec::with_capacity(40);
    rows.extend(setup::routes());
    rows.extend(config_sections::routes());
    rows.extend(fleet::routes());
    rows.extend(energy_api::routes());
    rows.extend(home::routes());
    rows.extend([
        // A swarm would share room temperatures between svcOS peers; peers accept writes only
        // with their own owner's bearer token, which this miner does not hold.
        planned!(GET "/api/swarm", P, Fleet, "swarm"),
        planned!(POST "/api/swarm/room-temp", P, Fleet, "swarm room temperature"),
    ]);
    rows
}
