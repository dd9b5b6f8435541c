//! The board thread: PSU, sensors, fans, GPIO and the thermal/power policy.
//!
//! It owns the [`Peripherals`] (synchronous calls: i2c-dev and sysfs on a miner, blocking gRPC
//! to hw-sim in the sim), wakes every 100 ms for the button and LEDs and every 500 ms for a
//! control step: read sensors, fans and PSU, run [`ThermalPolicy`], apply fan duty, and tell
//! the chain threads whether they may hash and at what frequency scale. Taking a chain's power
//! away is done here (its enable line); the chain thread is told first so it stops feeding.
//! The API reaches this thread only through [`ControlCommand`]s and reads only the
//! [`BoardSnapshot`] it publishes.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use svcos_common::bounds::VOLTAGE_MV;

use svcos_common::config::{HardwareConfig, Mode, PowerConfig, ThermalConfig};
use svcos_proto::hwagent::v1::{
    ButtonEvent, FanMode, FaultEvent, HwEvent, LedMode, MiningState, StateEvent, ThermalPosture,
    hw_event,
};
use tokio::sync::{Notify, broadcast, oneshot, watch};

use crate::chain::{ChainCommand, ChainHandle, ChainSnapshot, ChainStatus};
use crate::drivers::devices::{
    Pic, PicReading, Psu, PsuReading, STATUS_OFF, STATUS_POWER_GOOD_N, read_tmp75,
};
use crate::drivers::{FanReading, Peripherals, lines};
use crate::error::HwError;
use crate::limits::{Clamp, HardLimit, clamp, hard_limit};
use crate::recipe::{self, InForce, Sources};
use crate::thermal::{Condition, ThermalInputs, ThermalPolicy};
use svcos_proto::hwagent::v1::RecipeEntry;

/// Period of the button/LED poll.
const TICK: Duration = Duration::from_millis(100);
/// Period of the control step (sensors, policy, fans). Bounds the fan-stall reaction time
/// together with `thermal::FAN_STALL_GRACE_S`.
const CONTROL_PERIOD: Duration = Duration::from_millis(500);
/// How long the button must be held for the physical password reset.
pub const RESET_HOLD_MS: u64 = 15_000;
/// Re-send fan duty at least this often even if unchanged (a fan controller may have reset).
const FAN_REFRESH: Duration = Duration::from_secs(5);
/// Power-target loop: step of the frequency scale per control period.
const POWER_STEP: f64 = 0.02;
/// Lowest frequency scale the power-target loop trims to.
const POWER_SCALE_FLOOR: f64 = 0.3;

/// Where a temperature sensor is.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorSpec {
    /// Name for the inventory, e.g. "chain0-board".
    pub name: String,
    /// "board" or "chip".
    pub kind: &'static str,
    /// Chain it belongs to.
    pub chain_id: u32,
    /// I2C address.
    pub address: u16,
}

/// The non-UART layout of the board, from GetBoard (sim) or config (linux).
#[derive(Debug, Clone, Default)]
pub struct BoardLayout {
    /// PSU address, when there is a PMBus PSU.
    pub psu_address: Option<u16>,
    /// PSU model name.
    pub psu_model: String,
    /// Temperature sensors.
    pub sensors: Vec<SensorSpec>,
    /// Enable line per chain.
    pub chain_enable: Vec<String>,
    /// Reset line per chain.
    pub chain_reset: Vec<String>,
    /// Fans.
    pub fans: usize,
    /// The hashboards' PIC voltage controllers (none on boards without).
    pub pics: Vec<Pic>,
}

/// One PIC as the inventory reports it.
#[derive(Debug, Clone)]
pub struct PicState {
    /// Where it sits.
    pub pic: Pic,
    /// What hw-agent last wrote to it, mV.
    pub written_mv: Option<f64>,
    /// What it answered, or why not.
    pub reading: Result<PicReading, String>,
}

/// The fitted PSU's identity as it reports it.
#[derive(Debug, Clone)]
pub struct PsuIdentity {
    /// MFR_MODEL, or why it could not be read.
    pub model: Result<String, String>,
    /// MFR_REVISION, or why it could not be read.
    pub revision: Result<String, String>,
    /// `[power.psu_override]` in force.
    pub psu_override: svcos_common::config::PsuOverrideConfig,
    /// Output setpoint now, V.
    pub setpoint_v: f64,
}

/// The environment recipe and the mode it was built in.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// `[system].mode` in force.
    pub mode: Mode,
    /// Entries (see [`recipe`]).
    pub entries: Vec<RecipeEntry>,
}

/// Operator commands to the board thread.
#[derive(Debug)]
pub enum ControlCommand {
    /// Fan mode; manual duty; auto target (0 keeps it).
    SetFan {
        /// Auto or manual.
        mode: FanMode,
        /// Manual duty, percent.
        pwm_percent: u32,
        /// Auto target, C; 0 keeps the current one.
        target_temp_c: f64,
        /// Who asks (the recipe's source).
        source: String,
    },
    /// PSU output voltage, mV; replies with the setpoint applied.
    SetVoltage {
        /// Setpoint, mV.
        mv: f64,
        /// Outcome.
        reply: oneshot::Sender<Result<f64, HwError>>,
    },
    /// Power target, W (0 = none); clamped to the hard limit, the clamp replied.
    SetPowerTarget {
        /// Target.
        watt: f64,
        /// Room above it before the frequency loop acts, as a share.
        backstop_share: f64,
        /// Who asks (the recipe's source).
        source: String,
        /// The clamp applied.
        reply: oneshot::Sender<Clamp>,
    },
    /// Sleep (chips idle, fans at the safe minimum, PSU stays on) or wake.
    SetSleep {
        /// Sleep or wake.
        sleep: bool,
    },
    /// LED mode.
    SetLed(LedMode),
    /// Operator chain switch.
    SetChainEnabled {
        /// Chain index.
        chain: u32,
        /// On or off.
        enabled: bool,
    },
    /// New `[hardware]`, `[thermal]`, `[power]` and mode.
    Reload {
        /// `[hardware]`.
        hardware: Box<HardwareConfig>,
        /// `[thermal]`.
        thermal: ThermalConfig,
        /// `[power]`: hard limits and calibration.
        power: PowerConfig,
        /// `[system].mode`.
        mode: Mode,
    },
    /// Debug: one raw I2C transfer on the board's bus (write, then read `read_len` bytes).
    I2cTransfer {
        /// 7-bit address.
        address: u16,
        /// Bytes to write first (register pointer first).
        write: Vec<u8>,
        /// Bytes to read after.
        read_len: usize,
        /// The bytes read.
        reply: oneshot::Sender<Result<Vec<u8>, HwError>>,
    },
    /// Diagnostics: the 7-bit addresses in `addresses` that ACK a one-byte read.
    I2cProbe {
        /// Addresses to try.
        addresses: Vec<u16>,
        /// Those that answered.
        reply: oneshot::Sender<Vec<u16>>,
    },
    /// Debug: switch the PSU output (the board keeps it that way; the auto re-enable only
    /// restores an output hw-agent means to have on).
    SetPsuEnabled {
        /// On or off.
        on: bool,
        /// Outcome.
        reply: oneshot::Sender<Result<(), HwError>>,
    },
    /// Debug: fan PID gains, applied to the running controller.
    SetFanPid {
        /// Proportional, integral and derivative gains.
        gains: (f64, f64, f64),
        /// The gains in force after.
        reply: oneshot::Sender<(f64, f64, f64)>,
    },
    /// Inventory: read every PIC now.
    ReadPics {
        /// One per PIC of the layout.
        reply: oneshot::Sender<Vec<PicState>>,
    },
    /// Inventory: read the PSU's model and firmware revision now; `None` without a PSU.
    ReadPsuIdentity {
        /// The identity.
        reply: oneshot::Sender<Option<PsuIdentity>>,
    },
    /// Inventory: read every temperature sensor now (the snapshot's may be a period old).
    ReadSensors {
        /// Each sensor and its reading (`None`: it did not answer).
        reply: oneshot::Sender<Vec<(SensorSpec, Option<f64>)>>,
    },
    /// The environment recipe in force.
    Recipe {
        /// The recipe.
        reply: oneshot::Sender<Recipe>,
    },
    /// Leave the loop.
    Stop,
}

/// One fan as published.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FanState {
    /// Tach, rpm.
    pub rpm: u32,
    /// Duty, percent.
    pub pwm_percent: u32,
    /// Found stalled.
    pub stalled: bool,
}

/// What the board thread publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardSnapshot {
    /// Thermal/power condition.
    pub condition: Condition,
    /// Fans.
    pub fans: Vec<FanState>,
    /// PSU.
    pub psu: PsuReading,
    /// PSU model.
    pub psu_model: String,
    /// Sensor readings (None when it did not answer).
    pub sensors: Vec<(SensorSpec, Option<f64>)>,
    /// Hottest reading and where.
    pub temp_max_c: Option<f64>,
    /// Fan PID target.
    pub target_c: f64,
    /// Fan mode.
    pub fan_mode: FanMode,
    /// LED mode.
    pub led_mode: LedMode,
    /// Power target in force, W (0 = none): the request clamped to the hard limit.
    pub power_target_watt: f64,
    /// Power target last asked for, W (0 = none).
    pub power_target_requested_watt: f64,
    /// Room above the target before the frequency loop acts, as a share of it.
    pub power_backstop_share: f64,
    /// The hard limit in force.
    pub power_limit: Option<HardLimit>,
    /// The PSU's power reading before calibration, W (`psu.power_watt` is calibrated).
    pub psu_raw_power_watt: f64,
    /// Frequency scale applied to every chain (thermal × power target).
    pub frequency_scale: f64,
    /// Whether the operator asked for sleep.
    pub sleep: bool,
    /// The one thermal verdict ([`ThermalPolicy::posture`]).
    pub posture: ThermalPosture,
}

impl BoardSnapshot {
    fn initial(
        layout: &BoardLayout,
        thermal: &ThermalConfig,
        hw: &HardwareConfig,
        power: &PowerConfig,
    ) -> Self {
        let target = clamp(hw.power_target_watt, hard_limit(power));
        BoardSnapshot {
            condition: Condition::Normal,
            fans: vec![FanState::default(); layout.fans],
            psu: PsuReading {
                enabled: true,
                setpoint_v: hw.voltage_mv / 1000.0,
                ..Default::default()
            },
            psu_model: layout.psu_model.clone(),
            sensors: layout.sensors.iter().map(|s| (s.clone(), None)).collect(),
            temp_max_c: None,
            target_c: thermal.target_temp_c,
            fan_mode: FanMode::Auto,
            led_mode: LedMode::Normal,
            power_target_watt: target.applied_watt,
            power_target_requested_watt: target.requested_watt,
            power_backstop_share: 0.0,
            power_limit: target.limit,
            psu_raw_power_watt: 0.0,
            frequency_scale: 1.0,
            sleep: false,
            posture: ThermalPosture::Unspecified,
        }
    }

    /// Board and chip temperature of a chain.
    pub fn chain_temps(&self, chain: u32) -> (Option<f64>, Option<f64>) {
        let find = |kind: &str| {
            self.sensors
                .iter()
                .find(|(s, _)| s.chain_id == chain && s.kind == kind)
                .and_then(|(_, v)| *v)
        };
        (find("board"), find("chip"))
    }
}

/// Tracks the button and turns GPIO samples into events.
#[derive(Debug, Default)]
pub struct ButtonTracker {
    pressed_at_ms: Option<u64>,
    last_report_ms: u64,
    reset_sent: bool,
}

impl ButtonTracker {
    /// A sample at `now_ms`: the events it causes.
    pub fn sample(&mut self, pressed: bool, now_ms: u64) -> Vec<ButtonEvent> {
        let mut out = Vec::new();
        match (self.pressed_at_ms, pressed) {
            (None, true) => {
                self.pressed_at_ms = Some(now_ms);
                self.last_report_ms = now_ms;
                self.reset_sent = false;
                out.push(ButtonEvent {
                    held_ms: 0,
                    released: false,
                    reset_hold: false,
                });
            }
            (Some(start), true) => {
                let held = now_ms - start;
                if held >= RESET_HOLD_MS && !self.reset_sent {
                    self.reset_sent = true;
                    self.last_report_ms = now_ms;
                    out.push(ButtonEvent {
                        held_ms: held,
                        released: false,
                        reset_hold: true,
                    });
                } else if now_ms - self.last_report_ms >= 1000 {
                    // Progress once a second, so a UI can count down to the reset.
                    self.last_report_ms = now_ms;
                    out.push(ButtonEvent {
                        held_ms: held,
                        released: false,
                        reset_hold: false,
                    });
                }
            }
            (Some(start), false) => {
                self.pressed_at_ms = None;
                out.push(ButtonEvent {
                    held_ms: now_ms - start,
                    released: true,
                    reset_hold: false,
                });
            }
            (None, false) => {}
        }
        out
    }
}

/// Everything the board thread needs.
pub struct BoardThread {
    /// Devices.
    pub peripherals: Peripherals,
    /// Layout.
    pub layout: BoardLayout,
    /// Chains to command.
    pub chains: Arc<Vec<ChainHandle>>,
    /// Commands in.
    pub commands: Receiver<ControlCommand>,
    /// Snapshot out.
    pub snapshot: watch::Sender<Arc<BoardSnapshot>>,
    /// Hardware events out.
    pub events: broadcast::Sender<HwEvent>,
    /// Rung on condition changes.
    pub state_changed: Arc<Notify>,
    /// Config at start.
    pub hardware: HardwareConfig,
    /// Thermal config at start.
    pub thermal: ThermalConfig,
    /// Hard limits and calibration at start.
    pub power: PowerConfig,
    /// Operating mode at start.
    pub mode: Mode,
}

/// The initial snapshot for a layout and config (before the thread's first step).
pub fn initial_snapshot(
    layout: &BoardLayout,
    thermal: &ThermalConfig,
    hw: &HardwareConfig,
    power: &PowerConfig,
) -> BoardSnapshot {
    BoardSnapshot::initial(layout, thermal, hw, power)
}

struct State {
    policy: ThermalPolicy,
    psu: Option<Psu>,
    snap: BoardSnapshot,
    fan_manual: Option<u32>,
    hashing_allowed: bool,
    chain_enabled: Vec<bool>,
    power_scale: f64,
    sent_scale: f64,
    last_fan_duty: Option<u32>,
    last_fan_write: Instant,
    /// The duty the fans ran at when this process started has been taken over.
    fans_adopted: bool,
    button: ButtonTracker,
    origin: Instant,
    led_phase: bool,
    last_led: Option<(bool, bool)>,
    last_psu_clear: Instant,
    /// An operator command was applied since the last publish.
    operator_changed: bool,
    /// What was last written to each PIC of the layout, mV.
    pic_written: Vec<Option<f64>>,
    /// Who set the fan, target and power values in force.
    sources: Sources,
}

impl BoardThread {
    /// Run until [`ControlCommand::Stop`] or the sender is dropped.
    pub fn run(mut self) {
        let chains = self.chains.len();
        let snap = BoardSnapshot::initial(&self.layout, &self.thermal, &self.hardware, &self.power);
        // A miner held for setup starts at the loop's floor and climbs to the cap, so it never
        // draws full power for the seconds the loop would need to trim down to it.
        let power_scale = match snap.power_limit {
            Some(l) if l.source == "setup" => POWER_SCALE_FLOOR,
            _ => 1.0,
        };
        let mut st = State {
            policy: ThermalPolicy::new(self.thermal.clone(), self.mode),
            psu: self.layout.psu_address.map(Psu::new),
            snap,
            fan_manual: (self.thermal.fan_manual_percent > 0)
                .then_some(self.thermal.fan_manual_percent),
            hashing_allowed: true,
            chain_enabled: vec![true; chains],
            power_scale,
            sent_scale: 1.0,
            last_fan_duty: None,
            last_fan_write: Instant::now(),
            fans_adopted: false,
            button: ButtonTracker::default(),
            origin: Instant::now(),
            led_phase: false,
            last_led: None,
            last_psu_clear: Instant::now(),
            operator_changed: false,
            pic_written: vec![None; self.layout.pics.len()],
            sources: Sources::from_config(&self.thermal, &self.hardware),
        };
        if st.fan_manual.is_some() {
            st.snap.fan_mode = FanMode::Manual;
        }
        // Chains the saved state says were disabled stay so.
        for (i, c) in self.chains.iter().enumerate() {
            st.chain_enabled[i] = c.snapshot.borrow().enabled;
        }
        let mut next_control = Instant::now();
        let mut last_control = Instant::now();
        loop {
            let wait = TICK.min(next_control.saturating_duration_since(Instant::now()));
            match self.commands.recv_timeout(wait) {
                Ok(ControlCommand::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(cmd) => {
                    self.handle(&mut st, cmd);
                    // Operator commands take effect at once, not at the next period, and
                    // telemetry shows them right after.
                    next_control = Instant::now();
                    st.operator_changed = true;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.button_and_led(&mut st);
            if Instant::now() >= next_control {
                let dt = last_control.elapsed().as_secs_f64().max(0.05);
                last_control = Instant::now();
                next_control = last_control + CONTROL_PERIOD;
                self.control_step(&mut st, dt);
            }
        }
    }

    fn emit(&self, event: hw_event::Event) {
        let _ = self.events.send(HwEvent {
            timestamp_ms: svcos_common::time::unix_ms(),
            event: Some(event),
        });
    }

    fn handle(&mut self, st: &mut State, cmd: ControlCommand) {
        match cmd {
            ControlCommand::SetFan {
                mode,
                pwm_percent,
                target_temp_c,
                source,
            } => {
                if target_temp_c > 0.0 {
                    st.policy.set_target(target_temp_c);
                    st.sources.target = source.clone();
                }
                st.sources.fan = source;
                st.fan_manual = (mode == FanMode::Manual).then_some(pwm_percent.min(100));
                st.snap.fan_mode = if st.fan_manual.is_some() {
                    FanMode::Manual
                } else {
                    FanMode::Auto
                };
            }
            ControlCommand::SetVoltage { mv, reply } => {
                let r = self.set_voltage(st, mv);
                let _ = reply.send(r);
            }
            ControlCommand::SetPowerTarget {
                watt,
                backstop_share,
                source,
                reply,
            } => {
                st.sources.power_target = source;
                st.snap.power_backstop_share = backstop_share.clamp(0.0, 0.5);
                let c = set_target(st, watt, hard_limit(&self.power));
                let _ = reply.send(c);
            }
            ControlCommand::SetSleep { sleep } => st.snap.sleep = sleep,
            ControlCommand::SetLed(mode) => st.snap.led_mode = mode,
            ControlCommand::SetChainEnabled { chain, enabled } => {
                if let Some(e) = st.chain_enabled.get_mut(chain as usize) {
                    *e = enabled;
                    let chains = Arc::clone(&self.chains);
                    chains[chain as usize].send(ChainCommand::Enable(enabled));
                    self.drive_chain_power(chain, st.hashing_allowed && enabled);
                }
            }
            ControlCommand::Reload {
                hardware,
                thermal,
                power,
                mode,
            } => {
                st.policy.reconfigure(thermal.clone(), mode);
                st.snap.target_c = thermal.target_temp_c;
                if hardware.voltage_mv != self.hardware.voltage_mv
                    && let Err(e) = self.set_voltage(st, hardware.voltage_mv)
                {
                    tracing::warn!(error = %e, "voltage from reloaded config");
                }
                set_target(st, hardware.power_target_watt, hard_limit(&power));
                self.power = power;
                st.fan_manual =
                    (thermal.fan_manual_percent > 0).then_some(thermal.fan_manual_percent);
                // A reload applies the file's values: they are in force, from the file.
                st.sources = Sources::from_config(&thermal, &hardware);
                self.hardware = *hardware;
                self.thermal = thermal;
                self.mode = mode;
            }
            ControlCommand::I2cTransfer {
                address,
                write,
                read_len,
                reply,
            } => {
                let mut read = vec![0u8; read_len];
                let r = self
                    .peripherals
                    .i2c
                    .transfer(address, &write, &mut read)
                    .map(|()| read)
                    .map_err(HwError::from);
                let _ = reply.send(r);
            }
            ControlCommand::I2cProbe { addresses, reply } => {
                let mut byte = [0u8; 1];
                let present = addresses
                    .into_iter()
                    .filter(|&a| self.peripherals.i2c.transfer(a, &[], &mut byte).is_ok())
                    .collect();
                let _ = reply.send(present);
            }
            ControlCommand::SetPsuEnabled { on, reply } => {
                let r = match st.psu.as_mut() {
                    Some(psu) => psu
                        .set_enabled(self.peripherals.i2c.as_mut(), on)
                        .map_err(HwError::from),
                    None => Err(HwError::FailedPrecondition(
                        "this board has no controllable PSU".into(),
                    )),
                };
                let _ = reply.send(r);
            }
            ControlCommand::SetFanPid { gains, reply } => {
                st.policy.set_gains(gains.0, gains.1, gains.2);
                let _ = reply.send(st.policy.gains());
            }
            ControlCommand::ReadPics { reply } => {
                let out = self
                    .layout
                    .pics
                    .iter()
                    .zip(&st.pic_written)
                    .map(|(pic, written)| PicState {
                        pic: *pic,
                        written_mv: *written,
                        reading: pic
                            .read(self.peripherals.i2c.as_mut())
                            .map_err(|e| e.to_string()),
                    })
                    .collect();
                let _ = reply.send(out);
            }
            ControlCommand::ReadPsuIdentity { reply } => {
                let id = st.psu.as_ref().map(|psu| {
                    let bus = self.peripherals.i2c.as_mut();
                    PsuIdentity {
                        model: psu.model(bus).map_err(|e| e.to_string()),
                        revision: psu.revision(bus).map_err(|e| e.to_string()),
                        psu_override: self.power.psu_override.clone(),
                        setpoint_v: st.snap.psu.setpoint_v,
                    }
                });
                let _ = reply.send(id);
            }
            ControlCommand::ReadSensors { reply } => {
                let out = self
                    .layout
                    .sensors
                    .iter()
                    .map(|s| {
                        let v = read_tmp75(self.peripherals.i2c.as_mut(), s.address).ok();
                        (s.clone(), v)
                    })
                    .collect();
                let _ = reply.send(out);
            }
            ControlCommand::Recipe { reply } => {
                let entries = recipe::build(&InForce {
                    thermal: &self.thermal,
                    power: &self.power,
                    mode: self.mode,
                    fan_manual: st.fan_manual,
                    fan_duty_percent: st.snap.fans.first().map(|f| f.pwm_percent),
                    target_c: st.policy.target_c(),
                    // The same rule that set it: the request against the limit in force.
                    power_target: clamp(st.snap.power_target_requested_watt, st.snap.power_limit),
                    backstop_share: st.snap.power_backstop_share,
                    sleeping: st.snap.sleep,
                    sources: &st.sources,
                });
                let _ = reply.send(Recipe {
                    mode: self.mode,
                    entries,
                });
            }
            ControlCommand::Stop => {}
        }
    }

    fn set_voltage(&mut self, st: &mut State, mv: f64) -> Result<f64, HwError> {
        if !VOLTAGE_MV.contains(mv) {
            return Err(HwError::InvalidArgument {
                field: "voltage_mv",
                message: VOLTAGE_MV.describe(),
            });
        }
        let psu = st.psu.as_ref().ok_or_else(|| {
            HwError::FailedPrecondition("this board has no controllable PSU".into())
        })?;
        let mv_int = mv.round() as u16;
        psu.set_voltage_mv(self.peripherals.i2c.as_mut(), mv_int)?;
        st.snap.psu.setpoint_v = f64::from(mv_int) / 1000.0;
        // Each hashboard's PIC is told the same setpoint, so its readback shows what the board
        // was asked for. The PSU already moved the rail: a PIC that does not take it is logged
        // and shows in the inventory, not a failed voltage change.
        for (pic, written) in self.layout.pics.iter().zip(st.pic_written.iter_mut()) {
            match pic.set_voltage_mv(self.peripherals.i2c.as_mut(), mv_int) {
                Ok(()) => *written = Some(f64::from(mv_int)),
                Err(e) => tracing::warn!(chain = pic.chain_id, error = %e, "PIC setpoint"),
            }
        }
        Ok(f64::from(mv_int))
    }

    fn drive_chain_power(&mut self, chain: u32, on: bool) {
        if let Some(line) = self.layout.chain_enable.get(chain as usize).cloned()
            && let Err(e) = self.peripherals.gpio.set(&line, on)
        {
            tracing::warn!(chain, error = %e, "chain enable line");
        }
    }

    fn button_and_led(&mut self, st: &mut State) {
        let now_ms = st.origin.elapsed().as_millis() as u64;
        match self.peripherals.gpio.get(lines::BUTTON) {
            Ok(pressed) => {
                for ev in st.button.sample(pressed, now_ms) {
                    if ev.reset_hold {
                        tracing::warn!(held_ms = ev.held_ms, "button held for the physical reset");
                    }
                    self.emit(hw_event::Event::Button(ev));
                }
            }
            Err(e) => tracing::debug!(error = %e, "button read"),
        }
        st.led_phase = (now_ms / 500).is_multiple_of(2);
        let mining = self
            .chains
            .iter()
            .any(|c| c.snapshot.borrow().status == ChainStatus::Mining);
        let (green, red) = match st.snap.led_mode {
            LedMode::Off => (false, false),
            LedMode::Locate => (st.led_phase, !st.led_phase),
            _ => match st.snap.condition {
                Condition::Normal => (mining, false),
                Condition::Sleeping => (st.led_phase, false),
                Condition::Overheat(_) | Condition::Fault(_) => (false, true),
            },
        };
        if st.last_led != Some((green, red)) {
            let ok = self.peripherals.gpio.set(lines::LED_GREEN, green).is_ok()
                & self.peripherals.gpio.set(lines::LED_RED, red).is_ok();
            if ok {
                st.last_led = Some((green, red));
            }
        }
    }

    fn read_sensors(&mut self, st: &mut State) -> (Option<f64>, String) {
        let mut max: Option<(f64, String)> = None;
        for (spec, value) in st.snap.sensors.iter_mut() {
            *value = read_tmp75(self.peripherals.i2c.as_mut(), spec.address).ok();
            if let Some(v) = *value
                && max.as_ref().is_none_or(|(m, _)| v > *m)
            {
                max = Some((v, format!("chain {} ({} sensor)", spec.chain_id, spec.kind)));
            }
        }
        match max {
            Some((v, w)) => (Some(v), w),
            None => (None, String::new()),
        }
    }

    fn read_psu(&mut self, st: &mut State) -> String {
        let Some(psu) = st.psu.clone() else {
            return String::new();
        };
        match psu.read(self.peripherals.i2c.as_mut()) {
            Ok(mut r) => {
                let fault = r.fault.clone();
                // Calibrated once, here: every reader and the power loop see the same watts.
                st.snap.psu_raw_power_watt = r.power_watt;
                r.power_watt = self.power.calibrated_watt(r.power_watt);
                st.snap.psu = r;
                if !fault.is_empty() && st.last_psu_clear.elapsed() > Duration::from_secs(5) {
                    // Latched bits whose cause is gone clear on CLEAR_FAULTS; a real fault stays.
                    st.last_psu_clear = Instant::now();
                    let _ = psu.clear_faults(self.peripherals.i2c.as_mut());
                    // Off with nothing else wrong: someone switched it off; we want it on.
                    let only_off = st.snap.psu.status_word & !(STATUS_OFF | STATUS_POWER_GOOD_N);
                    if only_off == 0 && psu.meant_on {
                        let mut p = psu.clone();
                        let _ = p.set_enabled(self.peripherals.i2c.as_mut(), true);
                    }
                }
                fault
            }
            Err(e) => {
                st.snap.psu.fault = format!("PSU not answering: {e}");
                st.snap.psu.fault.clone()
            }
        }
    }

    fn read_fans(&mut self, st: &mut State) -> Vec<FanReading> {
        match self.peripherals.fans.read() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "fan read");
                // Unknown is treated as stalled: no airflow we can prove.
                st.snap
                    .fans
                    .iter()
                    .map(|f| FanReading {
                        rpm: 0,
                        pwm_percent: f.pwm_percent,
                    })
                    .collect()
            }
        }
    }

    fn control_step(&mut self, st: &mut State, dt: f64) {
        let (temp_max, temp_where) = self.read_sensors(st);
        let psu_fault = self.read_psu(st);
        let fans = self.read_fans(st);
        if !st.fans_adopted {
            // A restart re-attaches to chips that kept hashing: keep their airflow.
            if let Some(duty) = fans.iter().map(|f| f.pwm_percent).max() {
                st.policy.adopt_fan_duty(duty);
            }
            st.fans_adopted = true;
        }
        let inputs = ThermalInputs {
            temp_max_c: temp_max,
            temp_max_where: temp_where,
            fans: fans.iter().map(|f| (f.pwm_percent, f.rpm)).collect(),
            psu_fault,
            sleep: st.snap.sleep,
            manual_fan_percent: st.fan_manual,
        };
        let decision = st.policy.step(&inputs, dt);

        // Fans.
        if st.last_fan_duty != Some(decision.fan_percent)
            || st.last_fan_write.elapsed() > FAN_REFRESH
        {
            let mut ok = true;
            for fan in 0..self.peripherals.fans.count() {
                ok &= self
                    .peripherals
                    .fans
                    .set_pwm(fan, decision.fan_percent)
                    .is_ok();
            }
            if ok {
                st.last_fan_duty = Some(decision.fan_percent);
                st.last_fan_write = Instant::now();
            }
        }
        // The duty just written is the one in force; the tach follows within a second.
        let duty = st.last_fan_duty;
        st.snap.fans = fans
            .iter()
            .enumerate()
            .map(|(i, f)| FanState {
                rpm: f.rpm,
                pwm_percent: duty.unwrap_or(f.pwm_percent),
                stalled: decision.stalled_fans.contains(&i),
            })
            .collect();

        if decision.hashing_allowed {
            st.power_scale = power_scale_step(
                st.power_scale,
                st.snap.psu.power_watt,
                loop_target(
                    st.snap.power_target_watt,
                    st.snap.power_backstop_share,
                    st.snap.power_limit,
                ),
            );
        }

        // Publish first (with events on a change of condition), so that no reader sees the
        // chains idle before it can see why.
        if decision.condition != st.snap.condition {
            let (state, reason) = condition_state(&decision.condition);
            tracing::warn!(?state, reason, "board condition");
            match &decision.condition {
                Condition::Fault(r) => self.emit(hw_event::Event::Fault(FaultEvent {
                    component: fault_component(r).into(),
                    chain_id: 0,
                    kind: "fault".into(),
                    message: r.clone(),
                    cleared: false,
                })),
                Condition::Overheat(r) => self.emit(hw_event::Event::Fault(FaultEvent {
                    component: "thermal".into(),
                    chain_id: 0,
                    kind: "overheat".into(),
                    message: r.clone(),
                    cleared: false,
                })),
                _ => {
                    if let Condition::Fault(r) | Condition::Overheat(r) = &st.snap.condition {
                        self.emit(hw_event::Event::Fault(FaultEvent {
                            component: fault_component(r).into(),
                            chain_id: 0,
                            kind: "cleared".into(),
                            message: r.clone(),
                            cleared: true,
                        }));
                    }
                }
            }
            self.emit(hw_event::Event::State(StateEvent {
                state: state as i32,
                reason,
            }));
            st.snap.condition = decision.condition.clone();
            self.state_changed.notify_one();
        }
        st.snap.temp_max_c = temp_max;
        st.snap.target_c = st.policy.target_c();
        st.snap.posture = st.policy.posture(temp_max);
        st.snap.frequency_scale = decision.frequency_scale * st.power_scale;
        self.snapshot.send_replace(Arc::new(st.snap.clone()));
        if std::mem::take(&mut st.operator_changed) {
            self.state_changed.notify_one();
        }

        // Hashing allowed or not: tell the chains first, then switch their power.
        if decision.hashing_allowed != st.hashing_allowed {
            st.hashing_allowed = decision.hashing_allowed;
            let chains = Arc::clone(&self.chains);
            for (i, c) in chains.iter().enumerate() {
                let on = decision.hashing_allowed && st.chain_enabled[i];
                if !on {
                    c.send(ChainCommand::Power(false));
                }
                self.drive_chain_power(i as u32, on);
                if on {
                    c.send(ChainCommand::Power(true));
                }
            }
        }
        let scale = decision.frequency_scale * st.power_scale;
        if (scale - st.sent_scale).abs() > 0.005 {
            st.sent_scale = scale;
            for c in self.chains.iter() {
                c.send(ChainCommand::FrequencyScale(scale));
            }
        }
    }
}

/// Put a requested target in force after the hard-limit clamp.
fn set_target(st: &mut State, watt: f64, limit: Option<HardLimit>) -> Clamp {
    let c = clamp(watt, limit);
    if c.clamped {
        tracing::info!(
            requested_watt = watt,
            applied_watt = c.applied_watt,
            limit = c.limit.map(|l| l.source),
            "power target clamped to the hard limit"
        );
    }
    st.snap.power_target_watt = c.applied_watt;
    st.snap.power_target_requested_watt = c.requested_watt;
    st.snap.power_limit = c.limit;
    if c.applied_watt == 0.0 {
        st.power_scale = 1.0;
    }
    c
}

/// What the frequency loop holds: the target, or with a backstop share the target plus that
/// room, never above the hard limit.
pub fn loop_target(target_watt: f64, backstop_share: f64, limit: Option<HardLimit>) -> f64 {
    if target_watt <= 0.0 {
        return target_watt;
    }
    let t = target_watt * (1.0 + backstop_share.max(0.0));
    limit.map_or(t, |l| t.min(l.watt))
}

/// One step of the power-target loop: trim the frequency scale while the PSU reports more than
/// the target (2 % tolerance), give it back below 95 % of it, never under 30 %. A target of 0
/// means none: full scale.
pub fn power_scale_step(scale: f64, power_watt: f64, target_watt: f64) -> f64 {
    if target_watt <= 0.0 {
        return 1.0;
    }
    if power_watt > target_watt * 1.02 {
        (scale - POWER_STEP).max(POWER_SCALE_FLOOR)
    } else if power_watt < target_watt * 0.95 {
        (scale + POWER_STEP).min(1.0)
    } else {
        scale
    }
}

fn fault_component(reason: &str) -> &'static str {
    if reason.starts_with("PSU") {
        "psu"
    } else if reason.starts_with("fan") {
        "fan"
    } else if reason.starts_with("overheat") {
        "thermal"
    } else {
        "sensor"
    }
}

/// The API state and reason a board condition stands for (`None` state for Normal: the chains
/// decide then).
pub fn condition_state(c: &Condition) -> (MiningState, String) {
    match c {
        Condition::Normal => (MiningState::Mining, String::new()),
        Condition::Sleeping => (MiningState::Sleeping, "sleeping".into()),
        Condition::Overheat(r) => (MiningState::Overheat, r.clone()),
        Condition::Fault(r) => (MiningState::Fault, r.clone()),
    }
}

/// Whether a chain counts as brought up and hashing for the overall state.
pub fn chain_is_mining(s: &ChainSnapshot) -> bool {
    s.status == ChainStatus::Mining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backstop_never_passes_the_hard_limit() {
        let l = Some(HardLimit {
            watt: 950.0,
            source: "circuit",
        });
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(loop_target(900.0, 0.0, l), 900.0));
        assert!(near(loop_target(800.0, 0.1, l), 880.0));
        assert!(near(loop_target(900.0, 0.1, l), 950.0));
        assert!(near(loop_target(900.0, 0.1, None), 990.0));
        assert!(near(loop_target(0.0, 0.1, l), 0.0));
    }

    #[test]
    fn power_target_trims_and_restores_frequency() {
        assert_eq!(power_scale_step(0.8, 1500.0, 0.0), 1.0);
        let mut scale = 1.0;
        // Plant: power proportional to the scale, 1400 W at full speed, target 1000 W.
        for _ in 0..100 {
            scale = power_scale_step(scale, 1400.0 * scale, 1000.0);
        }
        let p = 1400.0 * scale;
        assert!((950.0..=1020.0).contains(&p), "{p}");
        // Target lifted: back to full speed.
        for _ in 0..100 {
            scale = power_scale_step(scale, 1400.0 * scale, 2000.0);
        }
        assert_eq!(scale, 1.0);
        assert_eq!(power_scale_step(0.31, 5000.0, 100.0), 0.3);
    }

    #[test]
    fn button_press_hold_reset_release() {
        let mut b = ButtonTracker::default();
        assert!(b.sample(false, 0).is_empty());
        let e = b.sample(true, 100);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].held_ms, 0);
        assert!(!e[0].released);
        // Progress once a second.
        assert!(b.sample(true, 600).is_empty());
        assert_eq!(b.sample(true, 1100)[0].held_ms, 1000);
        let mut resets = 0;
        for t in (1200..=20_000).step_by(100) {
            resets += b.sample(true, t).iter().filter(|e| e.reset_hold).count();
        }
        assert_eq!(resets, 1, "reset_hold exactly once per hold");
        let e = b.sample(false, 20_100);
        assert_eq!(
            e,
            vec![ButtonEvent {
                held_ms: 20_000,
                released: true,
                reset_hold: false
            }]
        );
        // A short press never reports a reset.
        b.sample(true, 30_000);
        assert!(!b.sample(false, 31_000)[0].reset_hold);
    }
}
