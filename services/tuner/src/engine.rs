//! The tuner's state machine, with no I/O: fed telemetry snapshots and the time, it answers with
//! the frequency/voltage commands to send to hw-agent, and keeps the states, transitions,
//! measurement windows, history and profiles.
//!
//! States: `disabled` (operator off), `idle` (waiting for the board to mine), `tuning` (a search
//! is running), `tuned` (a point is in force and watched), `backoff` (over a limit: frequencies
//! cut, dynamic power scaling), `error` (hw-agent refused a command; retried after a window).
//! The chips keep mining in every state: the tuner only moves frequencies and the voltage.

use std::collections::VecDeque;

use svcos_common::chiphealth;
use svcos_common::config::Config;
use svcos_proto::hwagent::v1::{ChainState, MiningState, Telemetry};
use svcos_proto::tuner::v1 as pb;

use crate::model::{BoardInfo, Limits, Measured, Mode, Point, Profile};
use crate::search::{ChainStats, ChipStats, Measurement, Outcome, Search, rate, stability};
use crate::store::{Settings, Store, StoreError};

/// Transitions kept for GetState.
const TRANSITIONS: usize = 64;
/// Samples kept for the CSV history (an hour at 1 Hz).
const HISTORY: usize = 3600;
/// Dynamic power scaling gives a step back once the hottest reading is this far below the limit.
const DPS_RELEASE_MARGIN_C: f64 = 8.0;
/// ... or this far below it while the fans still have room: the fan loop, not the power, is
/// then what holds the temperature, and it can take a step more.
const DPS_RELEASE_MARGIN_FANS_C: f64 = 3.0;
/// Fans this far under their ceiling, percent points, count as having room.
const FAN_ROOM_PERCENT: u32 = 15;
/// A board's heatsink answers a power change over about a minute (the sim's time constant is
/// 40 s, an S9's aluminium heatsinks are of the same order): a second thermal backoff before
/// then would take the first's effect, not yet visible, for too little and overshoot.
const THERMAL_RESPONSE_MS: i64 = 60_000;
/// ... unless the hottest reading climbed this far past the one that set off the last backoff.
const THERMAL_WORSE_C: f64 = 1.0;
/// Backoff ends once the hottest reading over a window is this far below the limit.
const BACKOFF_HYSTERESIS_C: f64 = 2.0;
/// A tuned point re-fits when power strays this many tolerances from the target.
const DRIFT_TOLERANCES: f64 = 1.5;

/// The tuner's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunerState {
    /// Operator off.
    Disabled,
    /// Waiting for the board.
    Idle,
    /// Searching.
    Tuning,
    /// A point is in force.
    Tuned,
    /// Over a limit, cutting back.
    Backoff,
    /// hw-agent refused a command.
    Error,
}

impl TunerState {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TunerState::Disabled => "disabled",
            TunerState::Idle => "idle",
            TunerState::Tuning => "tuning",
            TunerState::Tuned => "tuned",
            TunerState::Backoff => "backoff",
            TunerState::Error => "error",
        }
    }
}

/// A command for hw-agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// PSU voltage, mV.
    SetVoltage(f64),
    /// A hashboard on or off (the tuner switches off only boards it chose to, and back on
    /// only those).
    SetChainEnabled {
        /// Chain.
        chain: u32,
        /// On.
        enabled: bool,
    },
    /// A chain (all chips) or one chip, MHz.
    SetFrequency {
        /// Chain.
        chain: u32,
        /// Chip, or the whole chain.
        chip: Option<u32>,
        /// Frequency.
        mhz: f64,
    },
}

/// Commands that take `from` to `to`. Frequencies go down before the voltage does and up after
/// it rises, so no intermediate state runs fast chips on too few volts.
pub fn diff(from: Option<&Point>, to: &Point) -> Vec<Action> {
    let mut freq = Vec::new();
    // A board off takes no frequency; one coming back on is brought up at stock by hw-agent
    // and gets its frequencies when the point is put back after the bring-up.
    let coming_on = |id: u32| {
        from.and_then(|p| p.chains.iter().find(|o| o.chain_id == id))
            .is_some_and(|o| !o.enabled)
    };
    for c in to
        .chains
        .iter()
        .filter(|c| c.enabled && !coming_on(c.chain_id))
    {
        let old = from.and_then(|p| p.chains.iter().find(|o| o.chain_id == c.chain_id));
        let base_changed = old.is_none_or(|o| (o.frequency_mhz - c.frequency_mhz).abs() > 1e-6);
        if base_changed {
            freq.push(Action::SetFrequency {
                chain: c.chain_id,
                chip: None,
                mhz: c.frequency_mhz,
            });
            // A chain-wide set drops every trim: put them back.
            for t in &c.chips {
                freq.push(Action::SetFrequency {
                    chain: c.chain_id,
                    chip: Some(t.chip),
                    mhz: t.frequency_mhz,
                });
            }
        } else if let Some(o) = old {
            let mut chips: Vec<u32> = c.chips.iter().chain(&o.chips).map(|t| t.chip).collect();
            chips.sort_unstable();
            chips.dedup();
            for chip in chips {
                let (a, b) = (o.chip_mhz(chip), c.chip_mhz(chip));
                if (a - b).abs() > 1e-6 {
                    freq.push(Action::SetFrequency {
                        chain: c.chain_id,
                        chip: Some(chip),
                        mhz: b,
                    });
                }
            }
        }
    }
    let v_changed = from.is_none_or(|p| (p.voltage_mv - to.voltage_mv).abs() > 1e-6);
    let raising = from.is_some_and(|p| to.voltage_mv > p.voltage_mv);
    let mut out = Vec::new();
    if v_changed && raising {
        out.push(Action::SetVoltage(to.voltage_mv));
    }
    out.extend(freq);
    if v_changed && !raising {
        out.push(Action::SetVoltage(to.voltage_mv));
    }
    out
}

/// (nonces, hw_errors) of one chip.
type ChipCount = (u64, u64);

/// (chain, nonces, hw_errors, chips) at some instant.
type ChainCount = (u32, u64, u64, Vec<ChipCount>);

#[derive(Debug, Clone, Default)]
struct Counters {
    chains: Vec<ChainCount>,
}

impl Counters {
    fn of(t: &Telemetry) -> Counters {
        Counters {
            chains: t
                .chains
                .iter()
                .map(|c| {
                    (
                        c.chain_id,
                        c.nonces,
                        c.hw_errors,
                        c.chips.iter().map(|x| (x.nonces, x.hw_errors)).collect(),
                    )
                })
                .collect(),
        }
    }

    fn since(&self, t: &Telemetry) -> Vec<ChainStats> {
        t.chains
            .iter()
            .map(|c| {
                let base = self.chains.iter().find(|b| b.0 == c.chain_id);
                let (bn, be) = base.map_or((0, 0), |b| (b.1, b.2));
                ChainStats {
                    chain_id: c.chain_id,
                    nonces: c.nonces.saturating_sub(bn),
                    hw_errors: c.hw_errors.saturating_sub(be),
                    chips: c
                        .chips
                        .iter()
                        .enumerate()
                        .map(|(i, x)| {
                            let (cn, ce) = base.and_then(|b| b.3.get(i)).copied().unwrap_or((0, 0));
                            ChipStats {
                                chip: x.index,
                                nonces: x.nonces.saturating_sub(cn),
                                hw_errors: x.hw_errors.saturating_sub(ce),
                                alive: x.alive,
                            }
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Window {
    start_ms: i64,
    base: Counters,
    power_sum: f64,
    expected_sum: f64,
    samples: u32,
    temp_max: f64,
}

/// Whether the fan loop could still take more heat: fans under automatic control, each at
/// least [`FAN_ROOM_PERCENT`] under the ceiling that binds them. That ceiling is the lowest of
/// `[thermal].fan_max_percent` and, when the noise profile is on, its fan ceiling (past it the
/// noise profile lowers power instead). Fans held at a fixed duty (manual, or capped for night
/// mode) have no room whatever their duty.
fn fans_have_room(t: &Telemetry, config: &Config) -> bool {
    let mut ceiling = config.thermal.fan_max_percent;
    if config.governor.noise.enabled {
        ceiling = ceiling.min(config.governor.noise.fan_max_percent);
    }
    t.fan_mode == svcos_proto::hwagent::v1::FanMode::Auto as i32
        && !t.fans.is_empty()
        && t.fans
            .iter()
            .all(|f| f.pwm_percent + FAN_ROOM_PERCENT <= ceiling)
}

/// A history sample as kept: the gauges in f32 (a tenth of a watt, a millivolt and a
/// hundredth of a kelvin survive it), so the hour of samples takes 200 KB instead of 290 KB, and
/// its ring is claimed at start, so the tuner's memory stays flat instead of growing over the
/// first hour.
#[derive(Debug, Clone, Copy)]
struct PackedSample {
    at_ms: i64,
    nonces: u64,
    hw_errors: u64,
    gauges: [f32; 6],
    state: TunerState,
}

impl PackedSample {
    const EMPTY: PackedSample = PackedSample {
        at_ms: 0,
        nonces: 0,
        hw_errors: 0,
        gauges: [0.0; 6],
        state: TunerState::Idle,
    };

    fn of(s: &Sample) -> Self {
        PackedSample {
            at_ms: s.at_ms,
            nonces: s.nonces,
            hw_errors: s.hw_errors,
            gauges: [
                s.power_watt,
                s.power_target_watt,
                s.hashrate_ths,
                s.voltage_mv,
                s.frequency_mhz,
                s.temp_max_c,
            ]
            .map(|g| g as f32),
            state: s.state,
        }
    }

    fn unpack(&self) -> Sample {
        let [
            power_watt,
            power_target_watt,
            hashrate_ths,
            voltage_mv,
            frequency_mhz,
            temp_max_c,
        ] = self.gauges.map(f64::from);
        Sample {
            at_ms: self.at_ms,
            state: self.state,
            power_watt,
            power_target_watt,
            hashrate_ths,
            voltage_mv,
            frequency_mhz,
            temp_max_c,
            nonces: self.nonces,
            hw_errors: self.hw_errors,
        }
    }
}

/// One history sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Telemetry time, Unix ms.
    pub at_ms: i64,
    /// Tuner state.
    pub state: TunerState,
    /// PSU power, W.
    pub power_watt: f64,
    /// Effective power target, W (0 outside power mode).
    pub power_target_watt: f64,
    /// 5 s hashrate, TH/s.
    pub hashrate_ths: f64,
    /// Voltage in force, mV.
    pub voltage_mv: f64,
    /// Mean chain frequency, MHz.
    pub frequency_mhz: f64,
    /// Hottest reading, C.
    pub temp_max_c: f64,
    /// Counters.
    pub nonces: u64,
    /// Counters.
    pub hw_errors: u64,
}

/// The engine.
#[derive(Debug)]
pub struct Engine {
    config: Config,
    /// The zone time-of-use windows are read in (`[system].timezone`, kept current by the
    /// power governor's config reload).
    zone: svcos_common::timewin::SharedZone,
    limits: Option<Limits>,
    board: Option<BoardInfo>,
    /// Files.
    pub store: Store,
    settings: Settings,
    state: TunerState,
    reason: String,
    since_ms: i64,
    transitions: VecDeque<pb::Transition>,
    point: Option<Point>,
    profile_id: String,
    resumed: bool,
    search: Option<Search>,
    applied_at_ms: i64,
    window: Option<Window>,
    last_measured: Measured,
    dps_reduction: f64,
    /// When the last thermal backoff acted and the hottest reading then (ms, C).
    last_thermal_backoff: (i64, f64),
    /// The power a cut for heat last held, W, kept across targets until a release lifts it.
    heat_ceiling_watt: Option<f64>,
    target_in_force: Option<(Mode, f64)>,
    replan: bool,
    restore_stock: bool,
    reapply: bool,
    last_seq: u64,
    chains_mining: bool,
    health_base: Option<Counters>,
    health_since_ms: i64,
    history: VecDeque<PackedSample>,
    latest: Option<Telemetry>,
    /// When `last_measured` was measured at the point in force (None: it was not, e.g. it
    /// came from a saved profile or the point changed since).
    measured_at_ms: Option<i64>,
    /// Since when hw-agent has run the chips below the set frequencies (its power or thermal
    /// loop): a window then measures hw-agent's point, not the tuner's.
    scaled_since_ms: Option<i64>,
    /// Boards this tuner switched back on that hw-agent is still bringing up.
    bringing_up: Vec<u32>,
    /// The power governor's arbitrated target and the flag that tells it the tuner holds it
    /// (same process); `None` in tests without a governor, where hw-agent's target is read.
    governor: Option<crate::power::Handoff>,
}

/// Why an operator request was refused.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Bad argument.
    #[error("{field}: {message}")]
    Invalid {
        /// Field.
        field: &'static str,
        /// What is allowed.
        message: String,
    },
    /// Not possible now.
    #[error("{0}")]
    Precondition(String),
    /// No such profile or board.
    #[error("{0}")]
    NotFound(String),
    /// Disk.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Engine {
    /// The newest telemetry from hw-agent, if any arrived.
    pub fn latest(&self) -> Option<&Telemetry> {
        self.latest.as_ref()
    }

    /// An engine over a store, starting from saved settings or the config's defaults.
    pub fn new(config: Config, store: Store, now_ms: i64) -> Result<Engine, StoreError> {
        let settings = match store.load_settings()? {
            Some(s) => s,
            None => Settings {
                active: config.tuner.enabled,
                mode: Mode::from_config(config.tuner.mode),
                power_target_watt: config.tuner.power_target_watt,
                operator_target_watt: 0.0,
                hashrate_target_ths: config.tuner.hashrate_target_ths,
                fixed_profile: String::new(),
                tou: Default::default(),
                boards_off: Vec::new(),
            },
        };
        // `[tuner].enabled` is the switch's one home: every surface writes it and the tuner
        // follows the file, so a restart of any process keeps what the owner chose.
        let mut settings = settings;
        settings.active = config.tuner.enabled;
        let operator_target = config.hardware.power_target_watt;
        let mut engine = Engine {
            zone: svcos_common::timewin::SharedZone::new(config.system.zone()),
            config,
            limits: None,
            board: None,
            store,
            state: if settings.active {
                TunerState::Idle
            } else {
                TunerState::Disabled
            },
            settings,
            reason: "starting".into(),
            since_ms: now_ms,
            transitions: VecDeque::new(),
            point: None,
            profile_id: "stock".into(),
            resumed: false,
            search: None,
            applied_at_ms: now_ms,
            window: None,
            last_measured: Measured::default(),
            dps_reduction: 0.0,
            last_thermal_backoff: (i64::MIN / 2, f64::INFINITY),
            heat_ceiling_watt: None,
            target_in_force: None,
            replan: true,
            restore_stock: false,
            reapply: false,
            last_seq: 0,
            chains_mining: false,
            health_base: None,
            health_since_ms: now_ms,
            history: svcos_common::alloc::claimed_ring(HISTORY, PackedSample::EMPTY),
            latest: None,
            measured_at_ms: None,
            scaled_since_ms: None,
            bringing_up: Vec::new(),
            governor: None,
        };
        // A config written while the tuner was down counts like one written while it ran.
        engine.operator_target(operator_target)?;
        Ok(engine)
    }

    /// The operator's power target (`[hardware].power_target_watt`, 0 = none) as the config
    /// file now says. Every route that sets the power target (the setup wizard, the heat level,
    /// `POST /api/config`, a fleet push) writes that key, so a change becomes the tuner's
    /// configured target too: otherwise the tuner would keep tuning toward its own older figure
    /// while every other surface shows the new one. Returns whether the target changed.
    pub fn operator_target(&mut self, watt: f64) -> Result<bool, StoreError> {
        if !watt.is_finite() || (watt - self.settings.operator_target_watt).abs() < 1e-9 {
            return Ok(false);
        }
        self.settings.operator_target_watt = watt;
        if watt > 0.0 {
            // A cut made for heat is a power the board could not hold cool: it stays the
            // ceiling of a higher target (planning above it would only run hot and be cut
            // again), and a lower target is under it. Steps come back when the chips cool.
            // The ceiling outlives a lower target in between (80 % after 100 %, then 100 %
            // again): only a release, once the chips ran cool enough, lifts it.
            if self.dps_reduction > 0.0 {
                self.heat_ceiling_watt = Some(self.settings.power_target_watt - self.dps_reduction);
            }
            self.dps_reduction = self
                .heat_ceiling_watt
                .map_or(0.0, |ceiling| (watt - ceiling).max(0.0));
            self.settings.power_target_watt = watt;
            self.replan = true;
        }
        self.store.save_settings(&self.settings)?;
        Ok(watt > 0.0)
    }

    /// The board is known (from hw-agent's inventory); limits resolve against it.
    pub fn attach(&mut self, board: BoardInfo) {
        let limits = Limits::resolve(&self.config, &board);
        if self.settings.power_target_watt <= 0.0 {
            self.settings.power_target_watt = limits.default_power_watt;
        }
        if self.settings.hashrate_target_ths <= 0.0 {
            self.settings.hashrate_target_ths = limits.default_ths;
        }
        self.limits = Some(limits);
        self.board = Some(board);
        self.replan = true;
    }

    /// Resolved limits, once the board is known.
    pub fn limits(&self) -> Option<&Limits> {
        self.limits.as_ref()
    }

    /// Operator settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Current state.
    pub fn state(&self) -> TunerState {
        self.state
    }

    /// The point in force.
    pub fn point(&self) -> Option<&Point> {
        self.point.as_ref()
    }

    fn serial(&self) -> String {
        self.board
            .as_ref()
            .map(|b| b.serial.clone())
            .unwrap_or_default()
    }

    fn set_state(&mut self, to: TunerState, reason: impl Into<String>, now_ms: i64) {
        let reason = reason.into();
        if to == self.state && reason == self.reason {
            return;
        }
        tracing::info!(from = self.state.as_str(), to = to.as_str(), %reason, "tuner state");
        self.transitions.push_back(pb::Transition {
            at_ms: now_ms,
            from: self.state.as_str().into(),
            to: to.as_str().into(),
            reason: reason.clone(),
        });
        while self.transitions.len() > TRANSITIONS {
            self.transitions.pop_front();
        }
        if to != self.state {
            self.since_ms = now_ms;
        }
        self.state = to;
        self.reason = reason;
    }

    /// Work with the power governor: read its arbitrated target as the cap, and tell it while
    /// this engine holds the target itself (so hw-agent's frequency loop becomes a backstop).
    pub fn share_governor(&mut self, handoff: crate::power::Handoff) {
        self.governor = Some(handoff);
    }

    fn publish_hold(&self) {
        if let Some(g) = &self.governor {
            let holds = self.settings.active
                && self.settings.mode != Mode::Fixed
                && matches!(
                    self.state,
                    TunerState::Tuning | TunerState::Tuned | TunerState::Backoff
                );
            g.set_tuner_holds(holds);
        }
    }

    /// Read time-of-use windows in the zone of this cell from now on.
    pub fn share_zone(&mut self, zone: svcos_common::timewin::SharedZone) {
        self.zone = zone;
    }

    /// The zone time-of-use windows are read in now.
    pub fn zone(&self) -> svcos_common::timewin::Zone {
        self.zone.get()
    }

    /// The mode and target in force after time-of-use and dynamic power scaling.
    pub fn effective_target(&self, now_ms: i64) -> (Mode, f64) {
        if self.limits.is_none() {
            return (self.settings.mode, 0.0);
        }
        match self.settings.mode {
            Mode::Power => (Mode::Power, self.power_limit(now_ms)),
            Mode::Hashrate => (Mode::Hashrate, self.settings.hashrate_target_ths),
            m => (m, 0.0),
        }
    }

    /// The power target before dynamic power scaling and caps: the configured one, or a
    /// time-of-use window's when lower (a window lowers the target for its hours; it never
    /// raises it past what the operator configured).
    fn base_power_target(&self, now_ms: i64) -> f64 {
        let configured = self.settings.power_target_watt;
        self.settings
            .tou
            .active(&self.zone(), now_ms)
            .map_or(configured, |w| w.power_target_watt.min(configured))
    }

    /// What remains of the configured power target after time-of-use, dynamic power scaling,
    /// the PSU limit and hw-agent's own cap, rounded to 0.1 W (down, so rounding never lifts
    /// it above any of them). Never above the configured target, in any mode.
    pub fn power_limit(&self, now_ms: i64) -> f64 {
        let Some(lim) = &self.limits else {
            return 0.0;
        };
        let base = self.base_power_target(now_ms);
        let t = (base - self.dps_reduction)
            .max(lim.dps_min_watt.min(base))
            .min(lim.max_power_watt)
            .min(self.hw_power_cap());
        (t * 10.0 + 1e-6).floor() / 10.0
    }

    /// Power the tuner never exceeds now: the PSU limit, or hw-agent's power target if lower.
    fn power_cap(&self) -> f64 {
        let Some(lim) = &self.limits else {
            return f64::INFINITY;
        };
        lim.max_power_watt.min(self.hw_power_cap())
    }

    /// hw-agent's own power target (set by the operator's power governor: circuit, night mode,
    /// solar...): its frequency scaling enforces it, so tuning above it would only fight it.
    fn hw_power_cap(&self) -> f64 {
        if let Some(g) = &self.governor {
            return g.target().unwrap_or(f64::INFINITY);
        }
        self.latest
            .as_ref()
            .map(|t| t.power_target_watt)
            .filter(|w| *w > 0.0)
            .unwrap_or(f64::INFINITY)
    }

    fn apply(&mut self, to: Point, now_ms: i64) -> Vec<Action> {
        // Boards off first (their power is gone before others speed up), back on last; only
        // boards this tuner switched off come back on.
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let before = self.settings.boards_off.clone();
        for c in &to.chains {
            let mine = self.settings.boards_off.contains(&c.chain_id);
            if !c.enabled && (!mine || self.point.is_none()) {
                off.push(Action::SetChainEnabled {
                    chain: c.chain_id,
                    enabled: false,
                });
                if !mine {
                    self.settings.boards_off.push(c.chain_id);
                }
            } else if c.enabled && mine {
                on.push(c.chain_id);
                self.settings.boards_off.retain(|x| *x != c.chain_id);
            }
        }
        if self.settings.boards_off != before
            && let Err(e) = self.store.save_settings(&self.settings)
        {
            tracing::warn!(error = %e, "tuner settings not saved");
        }
        let mut actions = off;
        actions.extend(
            diff(self.point.as_ref(), &to)
                .into_iter()
                .filter(|a| !matches!(a, Action::SetFrequency { chain, .. } if on.contains(chain))),
        );
        self.bringing_up.extend(on.iter().copied());
        actions.extend(on.into_iter().map(|chain| Action::SetChainEnabled {
            chain,
            enabled: true,
        }));
        if self.point.as_ref() != Some(&to) {
            self.measured_at_ms = None;
        }
        self.point = Some(to);
        self.applied_at_ms = now_ms;
        self.window = None;
        self.health_base = self.latest.as_ref().map(Counters::of);
        self.health_since_ms = now_ms;
        actions
    }

    /// hw-agent refused a command.
    pub fn command_failed(&mut self, action: Action, message: &str, now_ms: i64) {
        self.search = None;
        self.set_state(
            TunerState::Error,
            format!("hw-agent refused {action:?}: {message}"),
            now_ms,
        );
    }

    /// One step: the latest telemetry (or none when hw-agent is away) at `now_ms`.
    pub fn tick(&mut self, telemetry: Option<&Telemetry>, now_ms: i64) -> Vec<Action> {
        let out = self.tick_inner(telemetry, now_ms);
        self.publish_hold();
        out
    }

    fn tick_inner(&mut self, telemetry: Option<&Telemetry>, now_ms: i64) -> Vec<Action> {
        if let Some(t) = telemetry {
            self.observe(t);
        } else {
            self.latest = None;
        }
        let Some(lim) = self.limits.clone() else {
            if self.settings.active {
                self.set_state(TunerState::Idle, "waiting for hw-agent's inventory", now_ms);
            }
            return Vec::new();
        };
        if !self.settings.active {
            self.search = None;
            self.set_state(TunerState::Disabled, "autotuner off", now_ms);
            if std::mem::take(&mut self.restore_stock) && telemetry.is_some() {
                let chains = self.board.as_ref().map_or(0, |b| b.chains);
                self.profile_id = "stock".into();
                self.resumed = false;
                return self.apply(lim.stock(chains), now_ms);
            }
            return Vec::new();
        }
        let Some(t) = telemetry.cloned() else {
            self.set_state(TunerState::Idle, "hw-agent is not reachable", now_ms);
            return Vec::new();
        };
        // A board this tuner just switched back on is being brought up: the rest mine on and
        // the search waits for it (it is not a reason to start over).
        let coming_up = |c: &svcos_proto::hwagent::v1::ChainTelemetry| {
            self.bringing_up.contains(&c.chain_id) && c.state() != ChainState::Mining
        };
        let mining = t.state() == MiningState::Mining
            && !t.chains.is_empty()
            && t.chains.iter().all(|c| {
                matches!(c.state(), ChainState::Mining | ChainState::Disabled) || coming_up(c)
            });
        if mining && t.chains.iter().any(coming_up) {
            self.window = None;
            return Vec::new();
        }
        if !self.bringing_up.is_empty() {
            // Up and mining at stock: its frequencies (and everything else) go back on.
            self.bringing_up.clear();
            if let Some(p) = self.point.clone() {
                self.point = None;
                return self.apply(p, now_ms);
            }
        }
        if !mining {
            if self.chains_mining {
                // The chains come back from a bring-up at stock: put the point back then.
                self.reapply = true;
            }
            self.chains_mining = false;
            self.window = None;
            self.set_state(TunerState::Idle, "waiting for the chains to mine", now_ms);
            return Vec::new();
        }
        self.chains_mining = true;
        if self.point.is_none() {
            self.point = Some(point_from_telemetry(&t));
        }
        if self.state == TunerState::Idle || self.state == TunerState::Disabled {
            self.replan = true;
        }
        if self.state == TunerState::Error && now_ms - self.since_ms >= lim.window_ms {
            self.replan = true;
        }
        let target = self.effective_target(now_ms);
        if self.target_in_force != Some(target) {
            self.replan = true;
        }
        if std::mem::take(&mut self.replan) {
            self.reapply = false;
            return self.begin(target, &lim, now_ms);
        }
        if std::mem::take(&mut self.reapply)
            && let Some(p) = self.point.clone()
        {
            self.point = None;
            return self.apply(p, now_ms);
        }
        if self.state == TunerState::Error {
            return Vec::new();
        }

        // Limits, checked on every sample.
        let settled = now_ms - self.applied_at_ms >= lim.settle_ms;
        if t.temp_max_c > lim.max_temp_c && settled {
            let (at, was_c) = self.last_thermal_backoff;
            if now_ms - at >= THERMAL_RESPONSE_MS || t.temp_max_c > was_c + THERMAL_WORSE_C {
                self.last_thermal_backoff = (now_ms, t.temp_max_c);
                return self.backoff(&t, &lim, now_ms);
            }
        }
        // A search that overshoots its own target by a little corrects itself at the end of
        // the window; only a clear excess is cut at once.
        // While searching, the search meets its own target within a window and hw-agent's
        // backstop (10 % over, never over the hard limit) bounds a transient; cutting the
        // frequencies here would end the search before it can.
        let cap = self.power_cap();
        if t.power_watt > cap * (1.0 + 2.0 * lim.power_tolerance)
            && settled
            && self.state != TunerState::Tuning
            && let Some(p) = self.point.clone()
        {
            let q = crate::search::scale_frequencies(&p, cap / t.power_watt * 0.97, &lim);
            self.set_state(
                TunerState::Backoff,
                format!("power {:.0} W above the {cap:.0} W limit", t.power_watt),
                now_ms,
            );
            self.search = None;
            return self.apply(q, now_ms);
        }
        if !settled {
            return Vec::new();
        }
        // hw-agent running the chips below the set point (its power backstop or thermal loop):
        // wait a few windows for it to give the frequency back before measuring anyway.
        let scaled = t.frequency_scale > 0.0 && t.frequency_scale < 0.995;
        if !scaled {
            self.scaled_since_ms = None;
        } else if now_ms - *self.scaled_since_ms.get_or_insert(now_ms) < 3 * lim.window_ms {
            self.window = None;
            return Vec::new();
        }
        let w = self.window.get_or_insert_with(|| Window {
            start_ms: now_ms,
            base: Counters::of(&t),
            power_sum: 0.0,
            expected_sum: 0.0,
            samples: 0,
            temp_max: f64::MIN,
        });
        w.power_sum += t.power_watt;
        w.expected_sum += t.hashrate.as_ref().map_or(0.0, |h| h.ghs_expected) / 1000.0;
        w.samples += 1;
        w.temp_max = w.temp_max.max(t.temp_max_c);
        if now_ms - w.start_ms < lim.window_ms {
            return Vec::new();
        }
        let w = self.window.take().expect("window just filled");
        let m = measure(&w, &t);
        self.last_measured = m.measured;
        self.measured_at_ms = Some(now_ms);
        self.after_window(m, target, &lim, now_ms)
    }

    fn observe(&mut self, t: &Telemetry) {
        if t.seq < self.last_seq {
            // hw-agent restarted: its chains may have come back at stock.
            self.reapply = true;
            self.health_base = None;
        }
        self.last_seq = t.seq;
        if self.health_base.is_none() {
            self.health_base = Some(Counters::of(t));
        }
        if self
            .history
            .back()
            .is_none_or(|s| s.at_ms != t.timestamp_ms)
        {
            // Room first, so the ring never outgrows the capacity it was given.
            while self.history.len() >= HISTORY {
                self.history.pop_front();
            }
            let (mode, target) = (
                self.settings.mode,
                self.target_in_force.map_or(0.0, |x| x.1),
            );
            self.history.push_back(PackedSample::of(&Sample {
                at_ms: t.timestamp_ms,
                state: self.state,
                power_watt: t.power_watt,
                power_target_watt: if mode == Mode::Power { target } else { 0.0 },
                hashrate_ths: t.hashrate.as_ref().map_or(0.0, |h| h.ghs_5s / 1000.0),
                voltage_mv: self.point.as_ref().map_or(0.0, |p| p.voltage_mv),
                frequency_mhz: mean_mhz(t),
                temp_max_c: t.temp_max_c,
                nonces: t.nonces,
                hw_errors: t.hw_errors,
            }));
        }
        self.latest = Some(t.clone());
    }

    fn begin(&mut self, target: (Mode, f64), lim: &Limits, now_ms: i64) -> Vec<Action> {
        let previous = self.target_in_force.map(|t| {
            if t.0 == target.0 {
                t
            } else {
                (t.0, f64::INFINITY)
            }
        });
        self.target_in_force = Some(target);
        let serial = self.serial();
        let chains = self.board.as_ref().map_or(0, |b| b.chains);
        let (mode, value) = target;
        let fixed = if mode == Mode::Fixed {
            let name = self.settings.fixed_profile.clone();
            self.store
                .saved
                .get(&name)
                .or_else(|| self.store.tuned(&serial, &name))
                .cloned()
        } else {
            self.store
                .tuned(&serial, &Profile::tuned_id(mode, value))
                .cloned()
        };
        if let Some(profile) = fixed {
            self.search = None;
            self.resumed = true;
            self.profile_id = profile.id.clone();
            self.last_measured = profile.measured;
            let why = if mode == Mode::Fixed {
                format!("fixed profile {}", profile.id)
            } else {
                format!("resumed saved profile {} without a search", profile.id)
            };
            self.set_state(TunerState::Tuned, why, now_ms);
            // Re-send everything: the chips may not hold what this process last knew.
            self.point = None;
            return self.apply(clamp_point(&profile.point, lim), now_ms);
        }
        if mode == Mode::Fixed {
            self.search = None;
            self.set_state(
                TunerState::Error,
                format!("fixed profile {:?} not found", self.settings.fixed_profile),
                now_ms,
            );
            return Vec::new();
        }
        // Start from a stable point: the tuned point measured nearest the new target (the one
        // in force, or a saved one closer to it), else stock.
        let in_force = (self.resumed || self.state == TunerState::Tuned)
            .then(|| self.point.clone().zip(previous.map(|t| t.1)))
            .flatten();
        let saved = self
            .store
            .nearest_tuned(&serial, mode, value)
            .map(|p| (p.point.clone(), p.target));
        let in_force_measured = self.last_measured;
        let saved_measured = self
            .store
            .nearest_tuned(&serial, mode, value)
            .map(|p| p.measured);
        let nearest = match (in_force, saved) {
            (Some(a), Some(b)) => Some(if (b.1 - value).abs() < (a.1 - value).abs() {
                b
            } else {
                a
            }),
            (a, b) => a.or(b),
        };
        let from_tuned = nearest.is_some();
        let measured_at_start = nearest.as_ref().map(|(p, _)| {
            if self.point.as_ref() == Some(p) {
                in_force_measured
            } else {
                saved_measured.unwrap_or(in_force_measured)
            }
        });
        let start = match nearest {
            Some((p, _)) => clamp_point(&p, lim),
            None => lim.stock(chains),
        };
        // From a tuned point its window anchors the plan (its chips sit near their edges);
        // from stock the plan comes from the board's nominal figures, so the first window
        // already runs near the target instead of at full power.
        let mut search = Search::new(mode, value)
            .with_nominal(self.board.as_ref().map_or(0.0, |b| b.nominal_power_watt));
        let start = if from_tuned {
            // Its measurement anchors the plan at once: no window at a point drawing what the
            // old target allowed.
            match measured_at_start {
                Some(m) if m.power_watt > 0.0 => clamp_point(
                    &search.start_point(&start, m.power_watt, m.hashrate_ths, lim),
                    lim,
                ),
                _ => start,
            }
        } else {
            let (w, ths) = self
                .board
                .as_ref()
                .map_or((0.0, 0.0), |b| (b.nominal_power_watt, b.nominal_ths));
            clamp_point(&search.start_point(&start, w, ths, lim), lim)
        };
        self.search = Some(search);
        self.resumed = false;
        self.profile_id = Profile::tuned_id(mode, value);
        let what = match mode {
            Mode::Power => format!("search for {} W", crate::model::fmt_num(value)),
            Mode::Hashrate => format!("search for {} TH/s", crate::model::fmt_num(value)),
            _ => "search for the best efficiency".into(),
        };
        self.set_state(TunerState::Tuning, what, now_ms);
        self.point = None;
        self.apply(start, now_ms)
    }

    fn backoff(&mut self, t: &Telemetry, lim: &Limits, now_ms: i64) -> Vec<Action> {
        let Some(p) = self.point.clone() else {
            return Vec::new();
        };
        let mut cut = 0.0;
        if lim.dps_enabled {
            let floor = lim.dps_min_watt;
            // Cut from what the tuner holds now (the target less the cuts so far, as capped),
            // never from a figure above the configured target.
            let held = self.power_limit(now_ms);
            let room = (t.power_watt.min(held) - floor).max(0.0);
            cut = lim.dps_step_watt.min(room);
            self.dps_reduction += cut;
            if self.settings.mode == Mode::Power {
                // The lowered target is re-planned on a later tick; cut at once meanwhile.
                self.target_in_force = Some(self.effective_target(now_ms));
            }
        }
        let step = 2.0 * lim.mhz_step;
        let k_step = p
            .chains
            .iter()
            .map(|c| ((c.frequency_mhz - step) / c.frequency_mhz).max(0.0))
            .fold(1.0, f64::min);
        // The frequencies shed the cut itself (the dynamic share of power follows frequency):
        // a cut that only took two frequency steps left the heat in place, and the next cut
        // came on top of a target the board never actually ran at (300 W of cuts for 44 W of
        // power on the sim).
        let k_cut = if cut > 0.0 && t.power_watt > 0.0 {
            (1.0 - cut / (t.power_watt * (1.0 - crate::search::STATIC_SHARE))).max(0.1)
        } else {
            1.0
        };
        let k = k_step.min(k_cut);
        let q = crate::search::scale_frequencies(&p, k, lim);
        self.search = None;
        self.set_state(
            TunerState::Backoff,
            format!(
                "chip temperature {:.1} C above the {:.1} C limit: frequency down, power target -{:.0} W",
                t.temp_max_c, lim.max_temp_c, self.dps_reduction
            ),
            now_ms,
        );
        self.apply(q, now_ms)
    }

    fn after_window(
        &mut self,
        m: Measurement,
        target: (Mode, f64),
        lim: &Limits,
        now_ms: i64,
    ) -> Vec<Action> {
        let Some(p) = self.point.clone() else {
            return Vec::new();
        };
        match self.state {
            TunerState::Tuning => {
                let Some(search) = self.search.as_mut() else {
                    self.replan = true;
                    return Vec::new();
                };
                match search.step(&p, &m, lim) {
                    Outcome::Apply(q, why) => {
                        let step = search.steps;
                        tracing::debug!(step, %why, "tuner step");
                        self.reason = format!("step {step}: {why}");
                        self.apply(q, now_ms)
                    }
                    Outcome::Done(q, measured, why) => {
                        let profile = Profile {
                            id: Profile::tuned_id(target.0, target.1),
                            mode: target.0,
                            target: target.1,
                            point: q.clone(),
                            measured,
                            tuned_at_ms: now_ms,
                            board_serial: self.serial(),
                        };
                        self.profile_id = profile.id.clone();
                        self.last_measured = measured;
                        if let Err(e) = self.store.put_tuned(profile, now_ms) {
                            tracing::warn!(error = %e, "tuned profile not saved");
                        }
                        self.search = None;
                        self.set_state(TunerState::Tuned, why, now_ms);
                        if q != p {
                            self.apply(q, now_ms)
                        } else {
                            Vec::new()
                        }
                    }
                }
            }
            TunerState::Tuned => {
                let st = stability(&m, lim);
                if !st.stable() {
                    let mut s = Search::refit(target.0, target.1)
                        .with_nominal(self.board.as_ref().map_or(0.0, |b| b.nominal_power_watt));
                    let out = s.step(&p, &m, lim);
                    self.search = Some(s);
                    self.set_state(TunerState::Tuning, "errors at the tuned point", now_ms);
                    let (Outcome::Apply(q, _) | Outcome::Done(q, _, _)) = out;
                    return self.apply(q, now_ms);
                }
                let fans_have_room = self
                    .latest
                    .as_ref()
                    .is_some_and(|t| fans_have_room(t, &self.config));
                let margin = if fans_have_room {
                    DPS_RELEASE_MARGIN_FANS_C
                } else {
                    DPS_RELEASE_MARGIN_C
                };
                if self.dps_reduction > 0.0 && m.measured.temp_max_c < lim.max_temp_c - margin {
                    self.dps_reduction = (self.dps_reduction - lim.dps_step_watt).max(0.0);
                    if self.dps_reduction <= 0.0 {
                        self.heat_ceiling_watt = None;
                    }
                    return Vec::new(); // the raised target re-plans on the next tick
                }
                if target.0 == Mode::Power
                    && target.1 > 0.0
                    && ((m.measured.power_watt - target.1) / target.1).abs()
                        > DRIFT_TOLERANCES * lim.power_tolerance
                {
                    self.search = Some(Search::refit(target.0, target.1));
                    self.resumed = false;
                    self.set_state(
                        TunerState::Tuning,
                        format!(
                            "power {:.0} W strayed from the target",
                            m.measured.power_watt
                        ),
                        now_ms,
                    );
                }
                Vec::new()
            }
            TunerState::Backoff => {
                // A target lowered for heat is re-planned once a window stayed under the
                // limit: at the same power a lower voltage runs no hotter, and waiting for the
                // hysteresis would leave the backoff's frequencies in force at the full
                // voltage wherever the lowered power settles just under the limit.
                let lowered = self.dps_reduction > 0.0 && target.0 == Mode::Power;
                if m.measured.temp_max_c < lim.max_temp_c - BACKOFF_HYSTERESIS_C
                    || (lowered && m.measured.temp_max_c <= lim.max_temp_c)
                {
                    // A target lowered by dynamic power scaling is a target like any other:
                    // its saved profile, or a search planned from the nearest one (voltage
                    // with it), not the frequencies the backoff left at the old voltage.
                    // Without a lowered target, the frequencies the backoff left are refined
                    // instead (the saved point for the same target is the one that ran hot).
                    if lim.dps_enabled && target.0 == Mode::Power {
                        self.replan = true;
                    } else {
                        self.search = Some(Search::refit(target.0, target.1));
                    }
                    self.resumed = false;
                    self.set_state(TunerState::Tuning, "cooled down: re-fit", now_ms);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    // ---- operator requests ------------------------------------------------------------------

    fn save(&self) -> Result<(), EngineError> {
        self.store.save_settings(&self.settings)?;
        Ok(())
    }

    /// Tuning on or off (off restores stock). The state answers at once (the next tick does
    /// the work), so whoever switched it reads back what they asked for.
    pub fn set_active(&mut self, active: bool, now_ms: i64) -> Result<(), EngineError> {
        if self.settings.active != active {
            self.settings.active = active;
            self.restore_stock = !active;
            self.replan = true;
            let now = now_ms;
            if active {
                self.set_state(TunerState::Idle, "autotuner on: starting", now);
            } else {
                self.search = None;
                self.set_state(TunerState::Disabled, "autotuner off", now);
            }
        }
        self.save()
    }

    /// Mode and targets.
    pub fn set_target(
        &mut self,
        mode: Mode,
        power_watt: Option<f64>,
        ths: Option<f64>,
    ) -> Result<(), EngineError> {
        if mode == Mode::Fixed {
            return Err(EngineError::Invalid {
                field: "mode",
                message: "fixed mode is chosen by applying a profile".into(),
            });
        }
        let max_power = self
            .limits
            .as_ref()
            .map_or(f64::INFINITY, |l| l.max_power_watt);
        if let Some(w) = power_watt {
            if !(w.is_finite() && w > 0.0 && w <= max_power) {
                return Err(EngineError::Invalid {
                    field: "power_target_watt",
                    message: format!("0 < W <= {max_power:.0} (the PSU limit)"),
                });
            }
            self.settings.power_target_watt = w;
        }
        if let Some(t) = ths {
            if !(t.is_finite() && t > 0.0 && t <= 10_000.0) {
                return Err(EngineError::Invalid {
                    field: "hashrate_target_ths",
                    message: "0 < TH/s <= 10000".into(),
                });
            }
            self.settings.hashrate_target_ths = t;
        }
        self.settings.mode = mode;
        self.replan = true;
        self.save()
    }

    /// Move a target by its step; `kind` is Power or Hashrate.
    pub fn adjust(&mut self, power: bool, direction: i32, amount: f64) -> Result<(), EngineError> {
        let lim = self
            .limits
            .clone()
            .ok_or_else(|| EngineError::Precondition("the board is not known yet".into()))?;
        if !(amount.is_finite() && amount >= 0.0) {
            return Err(EngineError::Invalid {
                field: "amount",
                message: "a step >= 0 (0 = the configured step)".into(),
            });
        }
        let sign = f64::from(direction.signum());
        if sign == 0.0 {
            return Err(EngineError::Invalid {
                field: "direction",
                message: "+1 or -1".into(),
            });
        }
        if power {
            let step = if amount > 0.0 {
                amount
            } else {
                lim.power_step_watt
            };
            let w = (self.settings.power_target_watt + sign * step)
                .clamp(lim.dps_min_watt.min(lim.max_power_watt), lim.max_power_watt);
            self.set_target(Mode::Power, Some(w), None)
        } else {
            let step = if amount > 0.0 { amount } else { lim.ths_step };
            let t = (self.settings.hashrate_target_ths + sign * step).max(step.min(0.1));
            self.set_target(Mode::Hashrate, None, Some(t))
        }
    }

    /// Back to the default target of a kind.
    pub fn set_default(&mut self, power: bool) -> Result<(), EngineError> {
        let lim = self
            .limits
            .clone()
            .ok_or_else(|| EngineError::Precondition("the board is not known yet".into()))?;
        if power {
            self.set_target(Mode::Power, Some(lim.default_power_watt), None)
        } else {
            self.set_target(Mode::Hashrate, None, Some(lim.default_ths))
        }
    }

    /// Save the point in force under a name.
    pub fn save_profile(&mut self, name: &str, now_ms: i64) -> Result<Profile, EngineError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_. ".contains(c))
        {
            return Err(EngineError::Invalid {
                field: "name",
                message: "1-64 characters: letters, digits, space, - _ .".into(),
            });
        }
        let point = self
            .point
            .clone()
            .ok_or_else(|| EngineError::Precondition("no point in force yet".into()))?;
        let (mode, target) = self.target_in_force.unwrap_or((self.settings.mode, 0.0));
        let p = Profile {
            id: name.into(),
            mode,
            target,
            point,
            measured: self.measured_now(),
            tuned_at_ms: now_ms,
            board_serial: self.serial(),
        };
        self.store.put_saved(p.clone())?;
        Ok(p)
    }

    /// The figures of the point in force: the last measurement window when it was taken at
    /// this point, else the latest telemetry (1-minute hashrate less the error share since the
    /// point was applied), so a point saved while disabled, in fixed mode or right after a
    /// change records what the board draws rather than zeros or another point's figures.
    fn measured_now(&self) -> Measured {
        if self.measured_at_ms.is_some() && self.last_measured.power_watt > 0.0 {
            return self.last_measured;
        }
        let Some(t) = &self.latest else {
            return self.last_measured;
        };
        let (n, e) = self
            .health_base
            .as_ref()
            .map_or((t.nonces, t.hw_errors), |b| {
                b.since(t)
                    .iter()
                    .fold((0, 0), |(n, e), c| (n + c.nonces, e + c.hw_errors))
            });
        let err = rate(n, e);
        let ths = t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m) / 1000.0;
        Measured {
            power_watt: t.power_watt,
            hashrate_ths: ths,
            efficiency_j_per_th: if ths > 0.0 { t.power_watt / ths } else { 0.0 },
            hw_error_rate: err,
            temp_max_c: t.temp_max_c,
        }
    }

    /// Apply a saved name or a tuned id of this board (fixed mode).
    pub fn apply_profile(&mut self, name: &str) -> Result<(), EngineError> {
        let serial = self.serial();
        if !self.store.saved.contains_key(name) && self.store.tuned(&serial, name).is_none() {
            return Err(EngineError::NotFound(format!("no profile named {name:?}")));
        }
        self.settings.mode = Mode::Fixed;
        self.settings.fixed_profile = name.into();
        self.settings.active = true;
        self.replan = true;
        self.save()
    }

    /// Search the current mode and target again from stock, dropping its saved point.
    pub fn recalibrate(&mut self, now_ms: i64) -> Result<(), EngineError> {
        if !self.settings.active {
            return Err(EngineError::Precondition(
                "the autotuner is off: PUT /api/autotuner/active first".into(),
            ));
        }
        if self.settings.mode == Mode::Fixed {
            return Err(EngineError::Precondition(
                "a fixed profile is applied: choose a power, hashrate or efficiency target first"
                    .into(),
            ));
        }
        let (mode, target) = self.effective_target(now_ms);
        let serial = self.serial();
        self.store
            .drop_tuned(&serial, &Profile::tuned_id(mode, target), now_ms)?;
        // Start from stock, not from the point in force.
        self.resumed = false;
        self.set_state(TunerState::Idle, "recalibration requested", now_ms);
        self.replan = true;
        Ok(())
    }

    /// Replace the time-of-use schedule.
    pub fn set_tou(&mut self, tou: crate::store::TouSchedule) -> Result<(), EngineError> {
        let max = self.limits.as_ref().map_or(100_000.0, |l| l.max_power_watt);
        tou.validate(max).map_err(|message| EngineError::Invalid {
            field: "windows",
            message,
        })?;
        self.settings.tou = tou;
        self.save()
    }

    /// Re-read the store.
    pub fn reload(&mut self) -> Result<usize, EngineError> {
        let n = self.store.reload()?;
        self.replan = true;
        Ok(n)
    }

    /// Forget a board's tuned data.
    pub fn delete_board(&mut self, serial: &str) -> Result<(), EngineError> {
        if !self.store.delete_board(serial)? {
            return Err(EngineError::NotFound(format!(
                "no tuned data for board {serial:?}"
            )));
        }
        Ok(())
    }

    /// Import a document.
    pub fn import(&mut self, text: &str, now_ms: i64) -> Result<(u32, u32), EngineError> {
        self.store.import(text, now_ms).map_err(|e| match e {
            StoreError::Format { what, message } => EngineError::Invalid {
                field: "document",
                message: format!("{what}: {message}"),
            },
            other => EngineError::Store(other),
        })
    }

    // ---- views ----------------------------------------------------------------------------

    /// GetState.
    pub fn view(&self, now_ms: i64) -> pb::GetStateResponse {
        // Computed now, not the target of the last plan: that is stale while disabled, idle or
        // between a config write and the next tick.
        let (mode, target) = self.effective_target(now_ms);
        let efficiency = self
            .latest
            .as_ref()
            // hw-agent's own figure, as every other surface shows it.
            .map_or(0.0, |t| t.efficiency_j_per_th);
        let power_target = if mode == Mode::Power {
            target
        } else {
            self.power_limit(now_ms)
        };
        pb::GetStateResponse {
            state: self.state.as_str().into(),
            profile: self.profile_id.clone(),
            power_target_watt: power_target,
            hashrate_target_ghs: self.settings.hashrate_target_ths * 1000.0,
            hashrate_target_ths: self.settings.hashrate_target_ths,
            efficiency_j_per_th: efficiency,
            active: self.settings.active,
            mode: self.settings.mode.to_pb() as i32,
            reason: self.reason.clone(),
            since_ms: self.since_ms,
            transitions: self.transitions.iter().cloned().collect(),
            voltage_mv: self.point.as_ref().map_or(0.0, |p| p.voltage_mv),
            chains: self
                .point
                .as_ref()
                .map(Point::chains_pb)
                .unwrap_or_default(),
            board_serial: self.serial(),
            resumed: self.resumed,
            configured_power_target_watt: self.settings.power_target_watt,
            dps_reduction_watt: self.dps_reduction,
            tou_window: self
                .settings
                .tou
                .active(&self.zone(), now_ms)
                .map(|w| w.describe())
                .unwrap_or_default(),
            measured: Some(self.last_measured.to_pb()),
            steps: self.search.as_ref().map_or(0, |s| s.steps),
        }
    }

    /// History samples, oldest first (the last `limit`, 0 = all).
    pub fn history(&self, limit: usize) -> Vec<Sample> {
        let skip = if limit == 0 {
            0
        } else {
            self.history.len().saturating_sub(limit)
        };
        self.history
            .iter()
            .skip(skip)
            .map(PackedSample::unpack)
            .collect()
    }

    /// Per-chip health since the last point change.
    pub fn chip_health(&self) -> (Vec<pb::ChipHealth>, i64) {
        let (Some(t), Some(base)) = (&self.latest, &self.health_base) else {
            return (Vec::new(), self.health_since_ms);
        };
        (
            chip_health_of(&base.since(t), t, self.point.as_ref()),
            self.health_since_ms,
        )
    }

    /// Profiles for ListProfiles: (tuned of this board, saved).
    pub fn profiles(&self) -> (Vec<Profile>, Vec<Profile>, i64) {
        let serial = self.serial();
        let board = self.store.boards.get(&serial);
        (
            board.map(|b| b.profiles.clone()).unwrap_or_default(),
            self.store.saved.values().cloned().collect(),
            board.map_or(0, |b| b.updated_at_ms),
        )
    }

    /// Serial of this board.
    pub fn board_serial(&self) -> String {
        self.serial()
    }
}

fn mean_mhz(t: &Telemetry) -> f64 {
    let live: Vec<f64> = t
        .chains
        .iter()
        .filter(|c| c.frequency_mhz > 0.0)
        .map(|c| c.frequency_mhz)
        .collect();
    if live.is_empty() {
        0.0
    } else {
        live.iter().sum::<f64>() / live.len() as f64
    }
}

fn clamp_point(p: &Point, lim: &Limits) -> Point {
    let mut q = crate::search::scale_frequencies(p, 1.0, lim);
    q.voltage_mv = p.voltage_mv.clamp(lim.min_mv, lim.max_mv);
    q
}

/// What hw-agent runs now, as a point (the tuner's start before it sets anything).
pub fn point_from_telemetry(t: &Telemetry) -> Point {
    let voltage = t
        .psu
        .as_ref()
        .map(|p| p.voltage_setpoint_v * 1000.0)
        .filter(|v| *v > 0.0)
        .or_else(|| t.chains.first().map(|c| c.voltage_mv))
        .unwrap_or(0.0);
    Point {
        voltage_mv: voltage,
        chains: t
            .chains
            .iter()
            .map(|c| crate::model::ChainPoint {
                chain_id: c.chain_id,
                frequency_mhz: c.frequency_mhz,
                chips: Vec::new(),
                // A board off now was switched off by someone else: not the tuner's to change.
                enabled: true,
            })
            .collect(),
    }
}

fn measure(w: &Window, t: &Telemetry) -> Measurement {
    let chains = w.base.since(t);
    let n: u64 = chains.iter().map(|c| c.nonces).sum();
    let e: u64 = chains.iter().map(|c| c.hw_errors).sum();
    let samples = f64::from(w.samples.max(1));
    let power = w.power_sum / samples;
    let expected = w.expected_sum / samples;
    let err = rate(n, e);
    let ths = expected * (1.0 - err);
    Measurement {
        measured: Measured {
            power_watt: power,
            hashrate_ths: ths,
            efficiency_j_per_th: if ths > 0.0 { power / ths } else { 0.0 },
            hw_error_rate: err,
            temp_max_c: w.temp_max,
        },
        expected_ths: expected,
        chains,
    }
}

/// Bridge for tests and the service: the set of chains a telemetry snapshot mines with.
pub fn mining_chains(t: &Telemetry) -> usize {
    t.chains
        .iter()
        .filter(|c| c.state() == ChainState::Mining)
        .count()
}

/// Per-chip health of counters over a window (`stats`, from `t` less a base), judged by the one
/// rule (`svcos_common::chiphealth`); `point` gives each chip's trim, which is reported but is
/// not a verdict (a trim is the tuner's policy at its own threshold).
pub fn chip_health_of(
    stats: &[ChainStats],
    t: &Telemetry,
    point: Option<&Point>,
) -> Vec<pb::ChipHealth> {
    let mut out = Vec::new();
    for c in stats {
        let tc = t.chains.iter().find(|x| x.chain_id == c.chain_id);
        let cp = point.and_then(|p| p.chains.iter().find(|x| x.chain_id == c.chain_id));
        let tchip = |chip: u32| tc.and_then(|x| x.chips.iter().find(|y| y.index == chip));
        let counts: Vec<chiphealth::ChipCounts> = c
            .chips
            .iter()
            .map(|s| chiphealth::ChipCounts {
                answering: s.alive,
                nonces: s.nonces,
                hw_errors: s.hw_errors,
                frequency_mhz: tchip(s.chip).map_or(0.0, |x| x.frequency_mhz),
            })
            .collect();
        let judged = chiphealth::judge_chain(c.nonces, &counts);
        for ((s, j), n) in c.chips.iter().zip(judged).zip(&counts) {
            let trim = cp.map_or(0.0, |p| p.chip_mhz(s.chip) - p.frequency_mhz);
            out.push(pb::ChipHealth {
                chain_id: c.chain_id,
                chip: s.chip,
                frequency_mhz: n.frequency_mhz,
                trim_mhz: trim,
                nonces: s.nonces,
                hw_errors: s.hw_errors,
                hw_error_rate: s.error_rate(),
                temp_c: tchip(s.chip).map_or(0.0, |x| x.temp_c),
                alive: s.alive,
                verdict: j.verdict.as_str().into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
