//! The power governor: one place that turns every operator limit and every power-following
//! feature into hw-agent's power target and sleep state.
//!
//! Arbitration (also in ARCHITECTURE.md): the effective power target is the *minimum* of the
//! operator's `[hardware].power_target_watt`, the circuit cap (`[power].circuit_limit_watt`),
//! the declared PSU rating (`[power.psu_override]`), the night-mode cap, the thermostat level
//! and the solar/off-grid level. The miner sleeps when the solar/off-grid follower or the
//! thermostat asks for it, and the governor wakes only a miner it put to sleep itself (an
//! operator's `POST /api/action/sleep` stands). The tuner works inside whatever target is set.
//! The loop re-asserts the target every tick, so a config reload in hw-agent (which resets the
//! target to the file's value) is corrected within a second.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use svcos_common::ServiceName;
use svcos_common::config::Config;
use svcos_proto::hwagent::v1::{
    FanMode, MiningState, SetFanRequest, SetPowerTargetRequest, SetSleepRequest, Telemetry,
};

use super::energy::{EnergyRuntime, FollowerMode};
use super::thermostat::ThermostatState;
use crate::AppState;

/// How often the governor reconciles hw-agent with the arbitration.
pub const TICK: Duration = Duration::from_secs(1);

/// One limit that took part in the arbitration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// Where it comes from (`operator`, `circuit`, `psu_override`, `night_mode`, `thermostat`,
    /// `solar`, `offgrid`).
    pub source: &'static str,
    /// Watts.
    pub watt: f64,
}

/// What the governor wants hw-agent to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Power target in watts; `None` = no limit (hw-agent's own).
    pub target_watt: Option<f64>,
    /// The limit that won, if any.
    pub binding: Option<&'static str>,
    /// Every active limit.
    pub limits: Vec<Limit>,
    /// Whether a follower wants the miner asleep, and which.
    pub sleep_by: Option<&'static str>,
    /// Night-mode fan cap, percent.
    pub fan_cap_percent: Option<u32>,
}

/// What the arbitration reads besides the config.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Thermostat level, W (when the thermostat is on and has a fresh reading).
    pub thermostat_watt: Option<f64>,
    /// The thermostat wants the miner asleep (room too warm at its lowest level).
    pub thermostat_sleep: bool,
    /// Solar/off-grid level, W.
    pub follower_watt: Option<f64>,
    /// The follower wants the miner asleep.
    pub follower_sleep: bool,
    /// Which follower is active.
    pub follower: Option<FollowerMode>,
}

/// The pure arbitration.
pub fn arbitrate(config: &Config, now_ms: i64, inputs: &Inputs) -> Decision {
    let mut limits = Vec::new();
    let mut add = |source: &'static str, watt: f64| {
        if watt > 0.0 {
            limits.push(Limit { source, watt });
        }
    };
    add("operator", config.hardware.power_target_watt);
    add("circuit", config.power.circuit_limit_watt);
    if config.power.psu_override.enabled {
        add("psu_override", config.power.psu_override.max_watt);
    }
    let night = config.home.night_mode.active_at(now_ms);
    if night {
        add("night_mode", config.home.night_mode.power_cap_watt);
    }
    if let Some(w) = inputs.thermostat_watt {
        add("thermostat", w);
    }
    let follower_name = inputs.follower.map(FollowerMode::as_str);
    if let (Some(w), Some(name)) = (inputs.follower_watt, follower_name) {
        add(name, w);
    }
    let winner = limits
        .iter()
        .min_by(|a, b| a.watt.total_cmp(&b.watt))
        .cloned();
    let sleep_by = if inputs.follower_sleep {
        follower_name
    } else if inputs.thermostat_sleep {
        Some("thermostat")
    } else {
        None
    };
    Decision {
        target_watt: winner.as_ref().map(|l| l.watt),
        binding: winner.map(|l| l.source),
        limits,
        sleep_by,
        fan_cap_percent: (night && config.home.night_mode.fan_max_percent > 0)
            .then_some(config.home.night_mode.fan_max_percent),
    }
}

/// What the governor changed on hw-agent and must undo itself (persisted, so a gateway
/// restart neither forgets to wake the miner nor wakes one the operator put to sleep).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Applied {
    /// The governor put the miner to sleep.
    pub slept: bool,
    /// The governor set a power target (so it restores "none" when every limit is gone).
    pub target_set: bool,
    /// The governor fixed the fans for night mode.
    pub fan_capped: bool,
}

/// Runtime state of the governor and the features that feed it.
#[derive(Debug)]
pub struct Governor {
    path: PathBuf,
    /// Persisted effects.
    pub applied: Mutex<Applied>,
    /// The last decision, for status answers.
    pub last: Mutex<Option<Decision>>,
    /// Room thermostat.
    pub thermostat: Mutex<ThermostatState>,
    /// Solar / off-grid follower.
    pub energy: EnergyRuntime,
    /// One reconciliation at a time (the loop and handlers that want an immediate effect).
    reconciling: tokio::sync::Mutex<()>,
}

impl Governor {
    /// Load the persisted state from the gateway's state dir.
    pub fn load(state_dir: PathBuf) -> Self {
        let path = state_dir.join("power-governor.json");
        let applied = read_json(&path).unwrap_or_default();
        let thermostat = read_json(&state_dir.join("thermostat.json")).unwrap_or_default();
        Governor {
            applied: Mutex::new(applied),
            last: Mutex::new(None),
            thermostat: Mutex::new(thermostat),
            energy: EnergyRuntime::load(state_dir.clone()),
            reconciling: tokio::sync::Mutex::new(()),
            path,
        }
    }

    /// Persist the thermostat state (after a reading or a target change).
    pub fn save_thermostat(&self) {
        let t = self.thermostat.lock().expect("thermostat lock").clone();
        write_json(&self.path.with_file_name("thermostat.json"), &t);
    }

    fn save_applied(&self, applied: &Applied) {
        write_json(&self.path, applied);
    }

    /// The last decision as JSON.
    pub fn last_json(&self) -> Value {
        json!(*self.last.lock().expect("decision lock"))
    }
}

/// Read a JSON state file; `None` when missing or unreadable (logged).
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &std::path::Path) -> Option<T> {
    // A damaged file is moved aside (logged, reported by /api/safety/warnings), never fatal.
    svcos_common::statefile::load_json(path)
}

/// Write a JSON state file atomically (failures are logged: the state is rebuilt at runtime).
pub fn write_json<T: Serialize>(path: &std::path::Path, value: &T) {
    let result = path
        .parent()
        .map_or(Ok(()), |dir| svcos_common::fsutil::ensure_dir(dir, 0o700))
        .and_then(|()| {
            let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
            svcos_common::fsutil::atomic_write(path, &bytes, 0o600)
        });
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot save state file");
    }
}

/// The gateway's state directory.
pub fn state_dir(state: &AppState) -> PathBuf {
    state.layout.service_state_dir(ServiceName::Gateway)
}

/// Compute the inputs from the features' runtime state.
pub fn inputs(state: &AppState, config: &Config, now_ms: i64) -> Inputs {
    let gov = &state.ops.governor;
    let (thermostat_watt, thermostat_sleep) = {
        let t = gov.thermostat.lock().expect("thermostat lock");
        t.output(&config.home, now_ms)
    };
    let follower = gov.energy.output(config);
    Inputs {
        thermostat_watt,
        thermostat_sleep,
        follower_watt: follower.as_ref().and_then(|f| f.watt),
        follower_sleep: follower.as_ref().is_some_and(|f| f.sleep),
        follower: follower.map(|f| f.mode),
    }
}

/// One reconciliation: arbitrate and bring hw-agent in line. Errors are logged and retried on
/// the next tick.
pub async fn reconcile(state: &AppState) {
    let _one = state.ops.governor.reconciling.lock().await;
    let config = state.config();
    let now_ms = state.clock.now_ms();
    let decision = arbitrate(&config, now_ms, &inputs(state, &config, now_ms));
    let telemetry = state.telemetry();
    *state.ops.governor.last.lock().expect("decision lock") = Some(decision.clone());
    let Some(t) = telemetry else { return };
    let gov = &state.ops.governor;
    let mut applied = gov.applied.lock().expect("applied lock").clone();
    let before = applied.clone();
    let mut hw = state.peers.hw.clone();

    match decision.target_watt {
        Some(w) if (t.power_target_watt - w).abs() > 0.5 => {
            applied.target_set |=
                log_err(hw.set_power_target(SetPowerTargetRequest { watt: w }).await);
        }
        Some(_) => applied.target_set = true,
        None if applied.target_set => {
            // Every limit is gone: hand back the operator's own target (0 = none).
            let w = config.hardware.power_target_watt;
            applied.target_set =
                !log_err(hw.set_power_target(SetPowerTargetRequest { watt: w }).await);
        }
        None => {}
    }

    let asleep = t.state() == MiningState::Sleeping;
    match (decision.sleep_by.is_some(), applied.slept) {
        (true, false) => {
            applied.slept = log_err(hw.set_sleep(SetSleepRequest { sleep: true }).await);
        }
        (true, true) if !asleep => {
            // Someone woke it (an operator); keep following the decision.
            log_err(hw.set_sleep(SetSleepRequest { sleep: true }).await);
        }
        (false, true) => {
            applied.slept = !log_err(hw.set_sleep(SetSleepRequest { sleep: false }).await);
        }
        _ => {}
    }

    match (decision.fan_cap_percent, applied.fan_capped) {
        (Some(cap), _) if !fan_at(&t, cap) => {
            let r = hw
                .set_fan(SetFanRequest {
                    mode: FanMode::Manual as i32,
                    pwm_percent: cap,
                    target_temp_c: 0.0,
                })
                .await;
            applied.fan_capped |= log_err(r);
        }
        (None, true) => {
            let manual = config.thermal.fan_manual_percent;
            let r = hw
                .set_fan(SetFanRequest {
                    mode: if manual > 0 {
                        FanMode::Manual
                    } else {
                        FanMode::Auto
                    } as i32,
                    pwm_percent: manual,
                    target_temp_c: 0.0,
                })
                .await;
            applied.fan_capped = !log_err(r);
        }
        _ => {}
    }

    if applied != before {
        *gov.applied.lock().expect("applied lock") = applied.clone();
        gov.save_applied(&applied);
    }
}

fn fan_at(t: &Telemetry, cap: u32) -> bool {
    t.fan_mode() == FanMode::Manual && t.fans.iter().all(|f| f.pwm_percent == cap)
}

fn log_err<T>(r: Result<T, tonic::Status>) -> bool {
    match r {
        Ok(_) => true,
        Err(s) => {
            tracing::warn!(code = ?s.code(), message = s.message(), "power governor: hw-agent call failed");
            false
        }
    }
}

/// Run the governor and the energy poller until shutdown.
pub fn spawn(state: AppState) {
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.wait() => break,
            }
            super::energy::poll_if_due(&state).await;
            reconcile(&state).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_limit_wins() {
        let mut c = Config::default();
        c.hardware.power_target_watt = 1300.0;
        c.power.circuit_limit_watt = 1152.0;
        let d = arbitrate(&c, 0, &Inputs::default());
        assert_eq!(d.target_watt, Some(1152.0));
        assert_eq!(d.binding, Some("circuit"));
        let i = Inputs {
            follower_watt: Some(700.0),
            follower: Some(FollowerMode::Solar),
            ..Default::default()
        };
        let d = arbitrate(&c, 0, &i);
        assert_eq!((d.target_watt, d.binding), (Some(700.0), Some("solar")));
        assert_eq!(d.limits.len(), 3);
    }

    #[test]
    fn no_limit_means_no_target_and_sleep_comes_from_followers() {
        let c = Config::default();
        let d = arbitrate(&c, 0, &Inputs::default());
        assert_eq!(d.target_watt, None);
        assert_eq!(d.sleep_by, None);
        let i = Inputs {
            thermostat_sleep: true,
            ..Default::default()
        };
        assert_eq!(arbitrate(&c, 0, &i).sleep_by, Some("thermostat"));
    }

    #[test]
    fn night_mode_caps_inside_its_window_only() {
        let mut c = Config::default();
        c.home.night_mode.enabled = true;
        let midnight = 0;
        let noon = 12 * 3_600_000;
        let d = arbitrate(&c, midnight, &Inputs::default());
        assert_eq!(d.target_watt, Some(600.0));
        assert_eq!(d.fan_cap_percent, Some(40));
        let d = arbitrate(&c, noon, &Inputs::default());
        assert_eq!(d.target_watt, None);
        assert_eq!(d.fan_cap_percent, None);
    }
}
