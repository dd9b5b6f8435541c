//! The power governor: one place that turns every operator limit and every power-following
//! feature into hw-agent's power target and sleep state. It runs in the tuner process (the
//! process that already owns power decisions), so it keeps following the solar source, the
//! battery and the room while the gateway is down; the gateway only relays `PowerService` calls.
//!
//! Arbitration (also in docs/DESIGN.md, "Power governor"): the effective power target is the *minimum* of the
//! operator's `[hardware].power_target_watt`, the circuit cap (`[power].circuit_limit_watt`),
//! the setup cap while setup is not finished (`[power].setup_hold`), the declared PSU rating (`[power.psu_override]`), the night-mode cap, the thermostat level,
//! the solar/off-grid level, and the governor's own controllers of `[governor]`: the noise
//! ceiling ([`noise`]), the daily energy quota ([`quota`]), the room factor and the cold-start
//! warm-up ([`ambient`]). The miner sleeps when the solar/off-grid follower or the
//! thermostat asks for it, and the governor wakes only a miner it put to sleep itself (an
//! operator's `POST /api/action/sleep` stands); a spent energy quota asks for sleep too. The
//! tuner works inside whatever target is set.
//! The loop re-asserts the target every tick, so a config reload in hw-agent (which resets the
//! target to the file's value) is corrected within a second. hw-agent clamps every target to
//! the circuit and PSU limits itself, so a bug here can lower the power but never raise it past
//! them.
//!
//! Pieces: [`arbitrate`] (pure), [`follower`] (solar/off-grid decision core and the LAN source
//! reader), [`thermostat`], [`noise`], [`quota`] and [`ambient`] (pure), [`Power`] (state,
//! persistence, the loop), [`service`] (gRPC). State lives in `<state>/tuner/power/` as small
//! JSON files written atomically, and only when a decision changes (never per poll; the day's
//! energy count once a minute), so a restarted tuner resumes where it was.

pub mod ambient;
pub mod follower;
pub mod noise;
pub mod presets;
pub mod quota;
pub mod service;
pub mod swarm;
pub mod thermostat;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use svcos_common::Shutdown;
use svcos_common::config::Config;
use svcos_common::time::Clock;
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{
    FanMode, MiningState, SetFanRequest, SetPowerTargetRequest, SetSleepRequest, Telemetry,
};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::history::History;
use crate::history::store::Decision as StoredDecision;
use ambient::WarmupPhase;
use follower::{FollowerMode, FollowerState, HistoryEntry, Params};
use noise::{NoiseReading, NoiseState};
use quota::{QuotaLimit, QuotaState};
use thermostat::{ThermostatAction, ThermostatState};

/// While the tuning engine holds the target itself, hw-agent's frequency loop gets this much
/// room above it: a backstop against a wrong point, not the means of meeting the target (a
/// frequency-only answer at fixed voltage would undo what the tuner gains by lowering it).
pub const BACKSTOP_SHARE: f64 = 0.10;

/// What the governor and the tuning engine (one process) hand each other: the arbitrated
/// target the engine tunes to, and whether the engine holds it now.
#[derive(Debug, Clone, Default)]
pub struct Handoff(Arc<Mutex<(Option<f64>, bool)>>);

impl Handoff {
    fn cell(&self) -> MutexGuard<'_, (Option<f64>, bool)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The governor's last arbitrated target (`None`: no limit), before any backstop.
    pub fn target(&self) -> Option<f64> {
        self.cell().0
    }

    /// Whether the tuning engine holds the target now.
    pub fn tuner_holds(&self) -> bool {
        self.cell().1
    }

    /// The engine says whether it holds the target.
    pub fn set_tuner_holds(&self, holds: bool) {
        self.cell().1 = holds;
    }

    fn set_target(&self, target: Option<f64>) {
        self.cell().0 = target;
    }

    /// The room hw-agent's frequency loop should leave above the target now.
    pub fn backstop_share(&self) -> f64 {
        if self.tuner_holds() {
            BACKSTOP_SHARE
        } else {
            0.0
        }
    }
}

/// How often the governor reconciles hw-agent with the arbitration.
pub const TICK: Duration = Duration::from_secs(1);

/// One limit that took part in the arbitration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// Where it comes from (`operator`, `circuit`, `setup`, `psu_override`, `night_mode`,
    /// `thermostat`, `solar`, `offgrid`, `noise`, `quota`, `room_temp`, `warmup`, `swarm`).
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
    /// The noise controller's limit, W.
    pub noise_watt: Option<f64>,
    /// The quota's spread limit, W.
    pub quota_watt: Option<f64>,
    /// The day's energy quota is spent.
    pub quota_sleep: bool,
    /// The operator's target compensated for the room temperature, W.
    pub room_watt: Option<f64>,
    /// The cold-start warm-up cap, W.
    pub warmup_watt: Option<f64>,
    /// This unit's share of the home swarm's circuit budget, W ([`swarm`]).
    pub swarm_watt: Option<f64>,
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
    // hw-agent enforces the setup hold itself; listed here so the arbitration names it.
    if config.power.setup_hold {
        add("setup", svcos_common::config::SETUP_HOLD_WATT);
    }
    if config.power.psu_override.enabled {
        add("psu_override", config.power.psu_override.max_watt);
    }
    let night_mode = &config.home.night_mode;
    let night = night_mode.active_at(&night_mode.zone(&config.system), now_ms);
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
    for (source, w) in [
        ("noise", inputs.noise_watt),
        ("quota", inputs.quota_watt),
        ("room_temp", inputs.room_watt),
        ("warmup", inputs.warmup_watt),
        ("swarm", inputs.swarm_watt),
    ] {
        if let Some(w) = w {
            add(source, w);
        }
    }
    let winner = limits
        .iter()
        .min_by(|a, b| a.watt.total_cmp(&b.watt))
        .cloned();
    let sleep_by = if inputs.follower_sleep {
        follower_name
    } else if inputs.thermostat_sleep {
        Some("thermostat")
    } else if inputs.quota_sleep {
        Some("quota")
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

/// What the governor changed on hw-agent and must undo itself (persisted, so a restart neither
/// forgets to wake the miner nor wakes one the operator put to sleep).
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

/// What the follower hands the arbitration.
#[derive(Debug, Clone)]
pub struct FollowerOutput {
    /// Which follower.
    pub mode: FollowerMode,
    /// Target while running.
    pub watt: Option<f64>,
    /// Sleep.
    pub sleep: bool,
}

/// Everything the governor remembers.
#[derive(Debug)]
pub struct PowerState {
    /// The config in force (re-read when the file changes).
    pub config: Arc<Config>,
    config_mtime: Option<SystemTime>,
    /// Persisted effects.
    pub applied: Applied,
    /// The last decision and when it was made.
    pub last: Option<(Decision, i64)>,
    /// Room thermostat.
    pub thermostat: ThermostatState,
    /// Solar / off-grid follower memory.
    pub follower: FollowerState,
    /// Noise controller memory.
    pub noise: NoiseState,
    /// Energy counted today.
    pub quota: QuotaState,
    /// The quota's answer at the last reconciliation (`None` while the quota is off).
    pub quota_limit: Option<QuotaLimit>,
    quota_saved_ms: i64,
    /// The cold-start warm-up (not persisted: a restarted governor starts armed and a warm
    /// board ends the warm-up at the first reading).
    pub warmup: WarmupPhase,
    /// This unit's share of the swarm's budget while `[swarm]` is on (set every beat).
    pub swarm_share: Option<f64>,
}

impl PowerState {
    /// The follower's input to the arbitration: only for the enabled mode, after a decision.
    pub fn follower_output(&self) -> Option<FollowerOutput> {
        let mode = FollowerMode::enabled(&self.config)?;
        let st = &self.follower;
        if st.mode != Some(mode) || st.last_change_ms.is_none() {
            return None;
        }
        Some(FollowerOutput {
            mode,
            watt: if st.sleeping { None } else { st.target_watt },
            sleep: st.sleeping,
        })
    }

    /// The arbitration's inputs from the features' state.
    pub fn inputs(&self, now_ms: i64) -> Inputs {
        let (thermostat_watt, thermostat_sleep) = self.thermostat.output(&self.config.home, now_ms);
        let follower = self.follower_output();
        let g = &self.config.governor;
        let quota = self.quota_limit.filter(|_| g.quota.enabled);
        Inputs {
            thermostat_watt,
            thermostat_sleep,
            follower_watt: follower.as_ref().and_then(|f| f.watt),
            follower_sleep: follower.as_ref().is_some_and(|f| f.sleep),
            follower: follower.map(|f| f.mode),
            noise_watt: self.noise.limit_watt.filter(|_| g.noise.enabled),
            quota_watt: quota.and_then(|q| q.watt),
            quota_sleep: quota.is_some_and(|q| q.sleep),
            room_watt: ambient::room_limit(
                &g.room_factor,
                self.config.hardware.power_target_watt,
                self.room_c(now_ms),
            ),
            warmup_watt: self.warmup.cap(&g.cold_environment),
            swarm_watt: self.swarm_share.filter(|_| self.config.swarm.enabled),
        }
    }

    /// The thermostat's room reading while it is fresh (`[home].reading_max_age_s`).
    pub fn room_c(&self, now_ms: i64) -> Option<f64> {
        self.thermostat
            .room_c
            .filter(|_| self.thermostat.fresh(&self.config.home, now_ms))
    }
}

/// The governor: state, its files, hw-agent and the telemetry it follows.
#[derive(Debug)]
pub struct Power {
    dir: PathBuf,
    config_path: PathBuf,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    state: Mutex<PowerState>,
    /// One reconciliation at a time (the loop and calls that want an immediate effect).
    reconciling: tokio::sync::Mutex<()>,
    hw: HwAgentServiceClient<Channel>,
    /// hw-agent's latest telemetry (power already calibrated by hw-agent).
    pub telemetry: watch::Receiver<Option<Telemetry>>,
    /// Where every follower decision goes (the verification history), batched with the rest
    /// of the history so a decision every poll is not a flash write every poll.
    pub history: Arc<History>,
    /// `[system].timezone` in force, shared with the tuning engine's time-of-use windows.
    pub zone: svcos_common::timewin::SharedZone,
    /// `[hardware].power_target_watt` in force, for the tuning engine's configured target:
    /// this reload is the one place the tuner process learns of a config write.
    operator_target: watch::Sender<f64>,
    /// `[tuner].enabled` in force, for the tuning engine's switch.
    tuner_enabled: watch::Sender<bool>,
    /// Shared with the tuning engine.
    pub handoff: Handoff,
    /// Reports what a reload refused, a given value at most once a minute.
    problem_log: Mutex<svcos_common::config::ProblemLog>,
    /// The home swarm's members, allocation and shared room reading ([`swarm::run`]).
    swarm: Mutex<swarm::SwarmState>,
}

impl Power {
    /// Load the persisted state from `dir` (`<state>/tuner/power`).
    pub fn new(
        dir: PathBuf,
        config_path: PathBuf,
        config: Config,
        clock: Arc<dyn Clock>,
        hw: HwAgentServiceClient<Channel>,
        telemetry: watch::Receiver<Option<Telemetry>>,
        history: Arc<History>,
    ) -> Self {
        import_json_history(&dir.join("follower-history.json"), &history);
        let zone = svcos_common::timewin::SharedZone::new(config.system.zone());
        let (operator_target, _) = watch::channel(config.hardware.power_target_watt);
        let (tuner_enabled, _) = watch::channel(config.tuner.enabled);
        let state = PowerState {
            config_mtime: mtime(&config_path),
            config: Arc::new(config),
            applied: read_json(&dir.join("governor.json")).unwrap_or_default(),
            last: None,
            thermostat: read_json(&dir.join("thermostat.json")).unwrap_or_default(),
            follower: read_json(&dir.join("follower.json")).unwrap_or_default(),
            noise: read_json(&dir.join("noise.json")).unwrap_or_default(),
            quota: read_json(&dir.join("quota.json")).unwrap_or_default(),
            quota_limit: None,
            quota_saved_ms: 0,
            warmup: WarmupPhase::Off,
            swarm_share: None,
        };
        let swarm = Mutex::new(swarm::SwarmState {
            unit_id: swarm::unit_id(&dir),
            ..Default::default()
        });
        Power {
            dir,
            config_path,
            clock,
            state: Mutex::new(state),
            reconciling: tokio::sync::Mutex::new(()),
            hw,
            telemetry,
            history,
            zone,
            operator_target,
            tuner_enabled,
            handoff: Handoff::default(),
            problem_log: Mutex::new(svcos_common::config::ProblemLog::new("tuner")),
            swarm,
        }
    }

    /// `[hardware].power_target_watt` as of the latest config reload, marked changed on every
    /// new value.
    pub fn operator_target(&self) -> watch::Receiver<f64> {
        self.operator_target.subscribe()
    }

    /// `[tuner].enabled` as of the latest config reload, marked changed on every new value.
    pub fn tuner_enabled(&self) -> watch::Receiver<bool> {
        self.tuner_enabled.subscribe()
    }

    /// Lock the swarm's state (never held across an await or together with [`Power::lock`]).
    pub fn swarm(&self) -> MutexGuard<'_, swarm::SwarmState> {
        self.swarm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The swarm's share for the next arbitration (`None`: no swarm limit).
    pub fn set_swarm_share(&self, watt: Option<f64>) {
        self.lock().swarm_share = watt;
    }

    /// Lock the state (a panicked holder does not take the governor down).
    pub fn lock(&self) -> MutexGuard<'_, PowerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-read the config file when it changed (or always with `force`). A value that does not
    /// validate keeps its value in force ([`Config::load_or_fallback`]), reported at most once
    /// a minute: this runs every tick.
    pub fn reload_config(&self, force: bool) {
        let now = mtime(&self.config_path);
        if !force && now == self.lock().config_mtime {
            return;
        }
        let in_force = Arc::clone(&self.lock().config);
        let loaded = Config::load_or_fallback(&self.config_path, &in_force);
        self.problem_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .report(&loaded.problems, self.clock.now_ms());
        let c = loaded.config;
        self.zone.set(c.system.zone());
        let watt = c.hardware.power_target_watt;
        self.operator_target.send_if_modified(|w| {
            let changed = (*w - watt).abs() > 1e-9;
            *w = watt;
            changed
        });
        self.tuner_enabled.send_if_modified(|e| {
            let changed = *e != c.tuner.enabled;
            *e = c.tuner.enabled;
            changed
        });
        let mut st = self.lock();
        st.config = Arc::new(c);
        st.config_mtime = now;
    }

    /// A room reading for the thermostat; `None` when the thermostat is off (kept anyway).
    pub fn room_reading(&self, room_c: f64, source: String) -> Option<ThermostatAction> {
        let now = self.clock.now_ms();
        // A first reading starts like a heater switched on: at the top of the thermostat's
        // range, or at the power target already in force when that is lower.
        let target = self
            .telemetry
            .borrow()
            .as_ref()
            .map(|t| t.power_target_watt);
        let mut st = self.lock();
        let home = st.config.home.clone();
        let start = target
            .filter(|w| *w > 0.0)
            .map_or(home.max_watt, |w| w.min(home.max_watt));
        st.thermostat.source = source;
        let action = if home.thermostat_enabled {
            Some(st.thermostat.on_reading(&home, room_c, now, start))
        } else {
            st.thermostat.room_c = Some(room_c);
            st.thermostat.reading_at_ms = now;
            None
        };
        write_json(&self.dir.join("thermostat.json"), &st.thermostat);
        action
    }

    /// Poll the enabled follower's source when its interval has passed, decide, record.
    pub async fn poll_if_due(&self) {
        let now_ms = self.clock.now_ms();
        let (p, mode) = {
            let mut st = self.lock();
            let Some(mode) = FollowerMode::enabled(&st.config) else {
                // Switched off: forget the old decision, so re-enabling starts afresh.
                if st.follower.mode.is_some() {
                    st.follower = FollowerState::default();
                    write_json(&self.dir.join("follower.json"), &st.follower);
                }
                return;
            };
            let p = Params::of(&st.config, mode);
            if st.follower.mode != Some(mode) {
                st.follower = FollowerState {
                    mode: Some(mode),
                    ..Default::default()
                };
            } else if st.follower.last_poll_ms != 0
                && now_ms - st.follower.last_poll_ms < i64::from(p.poll_interval_s) * 1000
            {
                return;
            }
            (p, mode)
        };
        let reading = follower::read_source(&p).await;
        let now_ms = self.clock.now_ms();
        let t = self.telemetry.borrow().clone();
        let mut st = self.lock();
        let before = st.follower.clone();
        let r = reading.as_ref().map_err(String::as_str);
        let step = follower::decide(&p, &st.follower, r, now_ms);
        follower::advance(&mut st.follower, &step, r, now_ms);
        let entry = HistoryEntry {
            t_ms: now_ms,
            mode,
            reading: reading.as_ref().ok().cloned(),
            error: reading.as_ref().err().cloned(),
            decision: if step.sleep { "sleep" } else { "run" }.into(),
            target_watt: step.target_watt,
            reason: step.reason,
            actual_power_watt: t.as_ref().map(|t| t.power_watt),
            hw_power_target_watt: t.as_ref().map(|t| t.power_target_watt),
            hw_state: t.as_ref().map(|t| t.state().as_str_name().to_string()),
        };
        match serde_json::to_string(&entry) {
            Ok(json) => self.history.decision(StoredDecision {
                t_ms: now_ms,
                mode: mode.as_str().into(),
                json,
            }),
            Err(e) => tracing::warn!(error = %e, "follower decision not recorded"),
        }
        st.follower.last_decision = Some(entry);
        // The decision itself is saved when it changes; the poll time alone is not worth a write.
        let decided = |f: &FollowerState| {
            (
                f.mode,
                f.sleeping,
                f.target_watt,
                f.last_change_ms,
                f.consecutive_errors,
            )
        };
        if decided(&before) != decided(&st.follower) {
            write_json(&self.dir.join("follower.json"), &st.follower);
        }
    }

    /// Save what is only flushed now and then (at shutdown; the decisions go with the
    /// history's own last batch).
    pub fn flush(&self) {
        let st = self.lock();
        write_json(&self.dir.join("follower.json"), &st.follower);
        if st.config.governor.quota.enabled {
            write_json(&self.dir.join("quota.json"), &st.quota);
        }
    }

    /// Step the governor's own controllers (noise, quota, warm-up) on the latest telemetry.
    /// Each is pure (its module); this feeds them and saves what changed.
    fn step_controllers(&self, now_ms: i64, t: &Telemetry) {
        let zone = self.zone.get();
        let mut st = self.lock();
        let g = st.config.governor.clone();

        // The noise controller lets go once it would reach the others: arbitrate without it.
        let mut others = st.inputs(now_ms);
        others.noise_watt = None;
        let other_limit_watt = arbitrate(&st.config, now_ms, &others).target_watt;
        let reading = NoiseReading {
            fan_percent: t.fans.iter().map(|f| f.pwm_percent).max(),
            fans_auto: t.fan_mode() != FanMode::Manual,
            power_watt: t.power_watt,
            other_limit_watt,
        };
        let noise = noise::step(&g.noise, &st.noise, &reading, now_ms);
        if noise.limit_watt != st.noise.limit_watt {
            write_json(&self.dir.join("noise.json"), &noise);
        }
        st.noise = noise;

        st.quota_limit = None;
        if g.quota.enabled
            && let Some((day, ms_left)) = quota::local_day(&zone, now_ms)
        {
            let next = quota::accumulate(&st.quota, &day, t.power_watt, now_ms);
            // Saved once a minute (and on a new day, and at shutdown), not every tick.
            if next.day != st.quota.day || now_ms - st.quota_saved_ms >= 60_000 {
                write_json(&self.dir.join("quota.json"), &next);
                st.quota_saved_ms = now_ms;
            }
            st.quota_limit = Some(quota::limit(&g.quota, next.used_kwh, ms_left));
            st.quota = next;
        }

        let hashing = t.state() == MiningState::Mining;
        st.warmup = ambient::warmup_step(
            &g.cold_environment,
            st.warmup,
            hashing,
            t.temp_max_c,
            now_ms,
        );
    }

    /// One reconciliation: arbitrate and bring hw-agent in line. Errors are logged and retried
    /// on the next tick.
    pub async fn reconcile(&self) {
        let _one = self.reconciling.lock().await;
        let now_ms = self.clock.now_ms();
        let latest = self.telemetry.borrow().clone();
        if let Some(t) = &latest {
            self.step_controllers(now_ms, t);
        }
        let (decision, config, mut applied) = {
            let mut st = self.lock();
            let decision = arbitrate(&st.config, now_ms, &st.inputs(now_ms));
            st.last = Some((decision.clone(), now_ms));
            (decision, st.config.clone(), st.applied.clone())
        };
        let Some(t) = self.telemetry.borrow().clone() else {
            return;
        };
        let before = applied.clone();
        let mut hw = self.hw.clone();

        self.handoff.set_target(decision.target_watt);
        let backstop_share = self.handoff.backstop_share();
        match decision.target_watt {
            // Compared with what was asked: hw-agent may clamp it to its hard limit.
            Some(w)
                if (t.power_target_requested_watt - w).abs() > 0.5
                    || (t.power_backstop_share - backstop_share).abs() > 1e-6 =>
            {
                applied.target_set |= log_err(
                    hw.set_power_target(SetPowerTargetRequest {
                        watt: w,
                        backstop_share,
                        source: format!("governor:{}", decision.binding.unwrap_or("operator")),
                    })
                    .await,
                );
            }
            Some(_) => applied.target_set = true,
            None if applied.target_set => {
                // Every limit is gone: hand back the operator's own target (0 = none).
                let w = config.hardware.power_target_watt;
                applied.target_set = !log_err(
                    hw.set_power_target(SetPowerTargetRequest {
                        watt: w,
                        backstop_share: 0.0,
                        source: "config:hardware.power_target_watt".into(),
                    })
                    .await,
                );
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
                        source: "governor:night_mode".into(),
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
                        // The cap is lifted: the file's fan setting is in force again.
                        source: if manual > 0 {
                            "config:thermal.fan_manual_percent"
                        } else {
                            "default:thermal.fan_manual_percent"
                        }
                        .into(),
                    })
                    .await;
                applied.fan_capped = !log_err(r);
            }
            _ => {}
        }

        if applied != before {
            self.lock().applied = applied.clone();
            write_json(&self.dir.join("governor.json"), &applied);
        }
    }

    /// Reload the config when it changed, poll the follower when due and reconcile, every
    /// [`TICK`], until `shutdown`; then flush what is written lazily.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.wait() => break,
            }
            self.reload_config(false);
            self.poll_if_due().await;
            self.reconcile().await;
        }
        self.flush();
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
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

/// Read a JSON state file; `None` when missing. A damaged file is moved aside (logged, listed by
/// `/api/safety/warnings`) and the governor starts from defaults, never fails.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    svcos_common::statefile::load_json(path)
}

/// Write a JSON state file atomically (failures are logged: the state is rebuilt at runtime).
pub fn write_json<T: Serialize>(path: &Path, value: &T) {
    let result = path
        .parent()
        .map_or(Ok(()), |dir| svcos_common::fsutil::ensure_dir(dir, 0o700))
        .and_then(|()| {
            let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
            svcos_common::fsutil::atomic_write(path, &bytes, 0o600)
        });
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot save state file");
    }
}

/// Move the verification history of a tuner from before the history store (a JSON ring next to
/// the governor's state) into the store, once: the file goes only after its batch is written.
fn import_json_history(path: &Path, history: &History) {
    let Some(entries) = read_json::<Vec<HistoryEntry>>(path) else {
        return;
    };
    for e in &entries {
        if let Ok(json) = serde_json::to_string(e) {
            history.decision(StoredDecision {
                t_ms: e.t_ms,
                mode: e.mode.as_str().into(),
                json,
            });
        }
    }
    if history.flush() {
        let _ = std::fs::remove_file(path);
        tracing::info!(
            entries = entries.len(),
            "follower decisions moved from follower-history.json into the history store"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_verification_history_moves_into_the_store_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("follower-history.json");
        let entry = |t_ms, mode| HistoryEntry {
            t_ms,
            mode,
            reading: Some(follower::Reading {
                surplus_watt: Some(640.0),
                soc_percent: None,
                voltage_v: None,
            }),
            error: None,
            decision: "run".into(),
            target_watt: Some(600.0),
            reason: "surplus".into(),
            actual_power_watt: Some(590.0),
            hw_power_target_watt: Some(600.0),
            hw_state: Some("MINING_STATE_MINING".into()),
        };
        let old = vec![
            entry(1, FollowerMode::Solar),
            entry(2, FollowerMode::Offgrid),
        ];
        write_json(&file, &old);
        let clock = Arc::new(svcos_common::time::ManualClock::at(10));
        let h = History::open(&dir.path().join("h.sqlite"), clock.clone()).unwrap();
        import_json_history(&file, &h);
        assert!(!file.exists(), "the file goes once its entries are stored");
        drop(h);
        let h = History::open(&dir.path().join("h.sqlite"), clock).unwrap();
        let stored = h.decisions(None, 10).unwrap();
        let back: Vec<HistoryEntry> = stored
            .iter()
            .map(|d| serde_json::from_str(&d.json).unwrap())
            .collect();
        assert_eq!(back, old);
        assert_eq!(h.decisions(Some("offgrid"), 10).unwrap().len(), 1);
        // Nothing to import a second time.
        import_json_history(&file, &h);
        assert_eq!(h.decisions(None, 10).unwrap().len(), 2);
    }

    #[test]
    fn the_last_decision_is_saved_with_the_follower_state() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("follower.json");
        let state = FollowerState {
            mode: Some(FollowerMode::Solar),
            target_watt: Some(750.0),
            last_change_ms: Some(7),
            last_decision: Some(HistoryEntry {
                t_ms: 7,
                mode: FollowerMode::Solar,
                reading: None,
                error: Some("timeout".into()),
                decision: "run".into(),
                target_watt: Some(750.0),
                reason: "hold: source error".into(),
                actual_power_watt: None,
                hw_power_target_watt: None,
                hw_state: None,
            }),
            ..Default::default()
        };
        write_json(&file, &state);
        assert_eq!(read_json::<FollowerState>(&file), Some(state));
    }

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
    fn the_governors_own_controllers_take_part_as_limits() {
        let mut c = Config::default();
        c.hardware.power_target_watt = 1200.0;
        c.power.circuit_limit_watt = 1500.0;
        let base = Inputs::default();
        // (inputs, want target, want binding, want sleep_by)
        type Row = (
            Inputs,
            Option<f64>,
            Option<&'static str>,
            Option<&'static str>,
        );
        let rows: Vec<Row> = vec![
            (base.clone(), Some(1200.0), Some("operator"), None),
            (
                Inputs {
                    noise_watt: Some(1000.0),
                    ..base.clone()
                },
                Some(1000.0),
                Some("noise"),
                None,
            ),
            // A noise limit above the operator's target does not bind.
            (
                Inputs {
                    noise_watt: Some(1300.0),
                    ..base.clone()
                },
                Some(1200.0),
                Some("operator"),
                None,
            ),
            (
                Inputs {
                    quota_watt: Some(700.0),
                    noise_watt: Some(1000.0),
                    ..base.clone()
                },
                Some(700.0),
                Some("quota"),
                None,
            ),
            // A warm room takes power off the operator's target.
            (
                Inputs {
                    room_watt: Some(1100.0),
                    ..base.clone()
                },
                Some(1100.0),
                Some("room_temp"),
                None,
            ),
            // The warm-up cap binds below everything else until the chips are warm.
            (
                Inputs {
                    warmup_watt: Some(500.0),
                    quota_watt: Some(700.0),
                    room_watt: Some(1100.0),
                    ..base.clone()
                },
                Some(500.0),
                Some("warmup"),
                None,
            ),
            // A spent quota sleeps the miner; a follower's sleep is named first.
            (
                Inputs {
                    quota_sleep: true,
                    ..base.clone()
                },
                Some(1200.0),
                Some("operator"),
                Some("quota"),
            ),
            (
                Inputs {
                    quota_sleep: true,
                    thermostat_sleep: true,
                    ..base.clone()
                },
                Some(1200.0),
                Some("operator"),
                Some("thermostat"),
            ),
        ];
        for (i, (inputs, target, binding, sleep_by)) in rows.into_iter().enumerate() {
            let d = arbitrate(&c, 0, &inputs);
            assert_eq!(
                (d.target_watt, d.binding, d.sleep_by),
                (target, binding, sleep_by),
                "row {i}"
            );
        }
    }

    #[test]
    fn the_state_turns_settings_and_readings_into_inputs() {
        let mut c = Config::default();
        c.hardware.power_target_watt = 1000.0;
        c.governor.room_factor.enabled = true;
        c.governor.noise.enabled = true;
        c.governor.cold_environment.enabled = true;
        let now = 1_000_000;
        let mut st = PowerState {
            config: Arc::new(c.clone()),
            config_mtime: None,
            applied: Applied::default(),
            last: None,
            thermostat: ThermostatState {
                room_c: Some(24.0),
                reading_at_ms: now - 1000,
                ..Default::default()
            },
            follower: FollowerState::default(),
            noise: NoiseState {
                limit_watt: Some(950.0),
                ..Default::default()
            },
            quota: QuotaState::default(),
            quota_limit: Some(QuotaLimit {
                watt: Some(400.0),
                sleep: false,
                remaining_kwh: 1.0,
            }),
            quota_saved_ms: 0,
            warmup: WarmupPhase::Armed,
            swarm_share: None,
        };
        let i = st.inputs(now);
        // 4 C above the 20 C reference at 25 W/C: 100 W off the operator's 1000 W.
        assert_eq!(i.room_watt, Some(900.0));
        assert_eq!(i.noise_watt, Some(950.0));
        assert_eq!(i.warmup_watt, Some(c.governor.cold_environment.warmup_watt));
        // The quota is off in this config: its last answer is not used.
        assert_eq!((i.quota_watt, i.quota_sleep), (None, false));
        // A stale room reading gives no room limit; a disabled controller gives no limit.
        st.thermostat.reading_at_ms = now - 3_600_000;
        let mut off = c.clone();
        off.governor.noise.enabled = false;
        st.config = Arc::new(off);
        let i = st.inputs(now);
        assert_eq!((i.room_watt, i.noise_watt), (None, None));
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
