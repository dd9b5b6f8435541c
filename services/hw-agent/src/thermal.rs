//! Fan PID and the thermal/power policy, as pure state machines fed with readings and time.
//!
//! The board thread reads sensors, fans and the PSU, calls [`ThermalPolicy::step`], and applies
//! the returned [`ThermalDecision`]; nothing here touches hardware, so every rule (overheat
//! latch, fan-stall grace, Home-mode frequency cut) is unit-tested with made-up readings.

use svcos_common::config::{Mode, ThermalConfig};
use svcos_proto::hwagent::v1::ThermalPosture;

/// A PID controller whose output rises when the measurement is above the set point (a fan).
#[derive(Debug, Clone)]
pub struct Pid {
    /// Proportional gain, output units per degree.
    pub kp: f64,
    /// Integral gain, output units per degree-second.
    pub ki: f64,
    /// Derivative gain, output units per degree/second.
    pub kd: f64,
    /// Lowest output.
    pub min: f64,
    /// Highest output.
    pub max: f64,
    integral: f64,
    last_measurement: Option<f64>,
}

impl Pid {
    /// A controller with gains and output limits; the integral starts at `min`.
    pub fn new(kp: f64, ki: f64, kd: f64, min: f64, max: f64) -> Self {
        Pid {
            kp,
            ki,
            kd,
            min,
            max,
            integral: min,
            last_measurement: None,
        }
    }

    /// Change the output limits (config reload, Home-mode cap) without a bump.
    pub fn set_limits(&mut self, min: f64, max: f64) {
        self.min = min;
        self.max = max;
        self.integral = self.integral.clamp(min, max);
    }

    /// Start from an output already in force (bumpless transfer): the integral takes it, so the
    /// first steps hold it instead of restarting from `min`.
    pub fn adopt(&mut self, output: f64) {
        self.integral = output.clamp(self.min, self.max);
    }

    /// One step: measurement and set point in degrees, `dt_s` seconds since the last step.
    pub fn update(&mut self, setpoint: f64, measurement: f64, dt_s: f64) -> f64 {
        let error = measurement - setpoint;
        // Derivative on the measurement, not the error, so a set-point change does not kick.
        let derivative = match self.last_measurement {
            Some(last) if dt_s > 0.0 => (measurement - last) / dt_s,
            _ => 0.0,
        };
        self.last_measurement = Some(measurement);
        let candidate = self.integral + self.ki * error * dt_s;
        let unclamped = self.kp * error + candidate + self.kd * derivative;
        // Anti-windup: only integrate while the output is not pinned in the same direction.
        let saturated_high = unclamped > self.max && error > 0.0;
        let saturated_low = unclamped < self.min && error < 0.0;
        if !saturated_high && !saturated_low {
            self.integral = candidate.clamp(self.min, self.max);
        }
        (self.kp * error + self.integral + self.kd * derivative).clamp(self.min, self.max)
    }
}

/// Everything the policy looks at in one step.
#[derive(Debug, Clone, Default)]
pub struct ThermalInputs {
    /// Hottest chip or board temperature, C; `None` when no sensor answered.
    pub temp_max_c: Option<f64>,
    /// Where the hottest reading is, for the reason text ("chain 1").
    pub temp_max_where: String,
    /// Per fan: (commanded duty %, measured rpm).
    pub fans: Vec<(u32, u32)>,
    /// PSU fault text; empty when healthy.
    pub psu_fault: String,
    /// Operator asked for sleep.
    pub sleep: bool,
    /// Manual fan duty, when the operator chose manual mode.
    pub manual_fan_percent: Option<u32>,
}

/// What the board should do now.
#[derive(Debug, Clone, PartialEq)]
pub struct ThermalDecision {
    /// Duty for every fan, percent.
    pub fan_percent: u32,
    /// Whether chips may hash.
    pub hashing_allowed: bool,
    /// Frequency as a fraction of the configured one (Home mode and hot cut-back lower it).
    pub frequency_scale: f64,
    /// Overall condition.
    pub condition: Condition,
    /// Fans found stalled (index), for fault events.
    pub stalled_fans: Vec<usize>,
}

/// The thermal/power condition, mapped to the API's mining state by the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Nothing wrong.
    Normal,
    /// Asked to sleep: chips idle, fans at the safe minimum.
    Sleeping,
    /// Above `dangerous_temp_c`: chips idle, fans 100 %, until cooled below the target.
    Overheat(String),
    /// A fan stalled or the PSU failed: chips idle.
    Fault(String),
}

/// Seconds a fan may read zero rpm while driven before it counts as stalled (spin-up and tach
/// sampling take about a second on real fans).
pub const FAN_STALL_GRACE_S: f64 = 3.0;
/// Duty below which a fan may legitimately stand still.
pub const FAN_STALL_MIN_DUTY: u32 = 5;
/// Degrees over the fan loop's target at which the board counts as warm: the loop holds the
/// target within a few degrees, so beyond this margin the fans are losing ground.
pub const WARM_MARGIN_C: f64 = 5.0;
/// Degrees below the target the board must cool to before an overheat latch lets go.
pub const OVERHEAT_HYSTERESIS_C: f64 = 5.0;
/// Frequency step of the Home-mode and hot cut-back, fraction per step.
pub const FREQ_STEP: f64 = 0.05;
/// Lowest frequency scale the cut-back goes to before it gives up and lets the fan rise.
pub const FREQ_FLOOR: f64 = 0.5;
/// Seconds between cut-back steps, so the temperature can respond to each one.
pub const FREQ_STEP_INTERVAL_S: f64 = 5.0;

/// The thermal/power policy: PID fan control plus the protective latches.
#[derive(Debug, Clone)]
pub struct ThermalPolicy {
    config: ThermalConfig,
    mode: Mode,
    pid: Pid,
    /// Per fan: seconds it has read 0 rpm while driven.
    stall_s: Vec<f64>,
    overheat: Option<String>,
    freq_scale: f64,
    since_freq_step_s: f64,
    target_c: f64,
}

impl ThermalPolicy {
    /// A policy for a config and operating mode.
    pub fn new(config: ThermalConfig, mode: Mode) -> Self {
        let pid = Pid::new(
            4.0,
            0.4,
            2.0,
            f64::from(config.fan_min_percent),
            f64::from(config.fan_max_percent),
        );
        let target_c = config.target_temp_c;
        ThermalPolicy {
            config,
            mode,
            pid,
            stall_s: Vec::new(),
            overheat: None,
            freq_scale: 1.0,
            since_freq_step_s: 0.0,
            target_c,
        }
    }

    /// Apply a reloaded config and mode, keeping the controller's state.
    pub fn reconfigure(&mut self, config: ThermalConfig, mode: Mode) {
        self.pid.set_limits(
            f64::from(config.fan_min_percent),
            f64::from(config.fan_max_percent),
        );
        self.target_c = config.target_temp_c;
        self.config = config;
        self.mode = mode;
    }

    /// Take over the fan duty a previous hw-agent left running. A restarted controller that
    /// began at `fan_min_percent` would throttle the airflow of a hot, hashing board for the
    /// tens of seconds its integral needs to climb back.
    pub fn adopt_fan_duty(&mut self, duty_percent: u32) {
        self.pid.adopt(f64::from(duty_percent));
    }

    /// The thermal verdict every surface shows: the hottest reading against the target in
    /// force and `[thermal]`'s hot and dangerous limits (unknown without a reading).
    pub fn posture(&self, temp_max_c: Option<f64>) -> ThermalPosture {
        match temp_max_c {
            None => ThermalPosture::Unspecified,
            Some(t) if t >= self.config.dangerous_temp_c => ThermalPosture::Dangerous,
            Some(t) if t >= self.config.hot_temp_c => ThermalPosture::Hot,
            Some(t) if t > self.target_c + WARM_MARGIN_C => ThermalPosture::Warm,
            Some(_) => ThermalPosture::Normal,
        }
    }

    /// Change the PID target (SetFan with a target).
    pub fn set_target(&mut self, target_c: f64) {
        self.target_c = target_c;
    }

    /// Replace the fan PID gains (debug surface), keeping the controller's state.
    pub fn set_gains(&mut self, kp: f64, ki: f64, kd: f64) {
        self.pid.kp = kp;
        self.pid.ki = ki;
        self.pid.kd = kd;
    }

    /// The fan PID gains (kp, ki, kd).
    pub fn gains(&self) -> (f64, f64, f64) {
        (self.pid.kp, self.pid.ki, self.pid.kd)
    }

    /// The PID target, C.
    pub fn target_c(&self) -> f64 {
        self.target_c
    }

    /// One control step `dt_s` seconds after the previous one.
    pub fn step(&mut self, inputs: &ThermalInputs, dt_s: f64) -> ThermalDecision {
        let cfg = &self.config;
        // Fan stall: driven, but no tach pulses for longer than the grace period.
        self.stall_s.resize(inputs.fans.len(), 0.0);
        let mut stalled = Vec::new();
        for (i, &(duty, rpm)) in inputs.fans.iter().enumerate() {
            if duty >= FAN_STALL_MIN_DUTY && rpm == 0 {
                self.stall_s[i] += dt_s;
            } else {
                self.stall_s[i] = 0.0;
            }
            if self.stall_s[i] >= FAN_STALL_GRACE_S {
                stalled.push(i);
            }
        }

        // Overheat latch: set at dangerous, released only well below the target.
        if let Some(t) = inputs.temp_max_c {
            if t >= cfg.dangerous_temp_c {
                self.overheat.get_or_insert_with(|| {
                    format!(
                        "overheat on {} at {t:.1} C (limit {:.1} C)",
                        inputs.temp_max_where, cfg.dangerous_temp_c
                    )
                });
            } else if t < self.target_c - OVERHEAT_HYSTERESIS_C {
                self.overheat = None;
            }
        }

        let fault = if !inputs.psu_fault.is_empty() {
            Some(format!("PSU fault: {}", inputs.psu_fault))
        } else if !stalled.is_empty() {
            let names: Vec<String> = stalled.iter().map(|i| i.to_string()).collect();
            Some(format!("fan {} stalled", names.join(", ")))
        } else if inputs.temp_max_c.is_none() && !inputs.sleep {
            // Mining blind is how boards burn: no reading, no hashing.
            Some("no temperature reading".to_string())
        } else {
            None
        };

        if let Some(reason) = self.overheat.clone() {
            return self.protective(100, Condition::Overheat(reason), stalled);
        }
        if let Some(reason) = fault {
            return self.protective(100, Condition::Fault(reason), stalled);
        }
        if inputs.sleep {
            let duty = self.config.fan_min_percent;
            return self.protective(duty, Condition::Sleeping, stalled);
        }

        let temp = inputs.temp_max_c.unwrap_or(self.target_c);
        let pid_out = self.pid.update(self.target_c, temp, dt_s);
        let mut duty = pid_out.round() as u32;
        if let Some(manual) = inputs.manual_fan_percent {
            duty = manual;
        }

        // Cut hash power before fan noise: in Home mode, at the fan cap and still above the
        // target, step the frequency down; in every mode, above hot_temp_c, do the same.
        self.since_freq_step_s += dt_s;
        let at_cap = duty >= self.config.fan_max_percent;
        let home_too_warm = self.mode == Mode::Home && at_cap && temp > self.target_c;
        let too_hot = temp >= self.config.hot_temp_c;
        if (home_too_warm || too_hot) && self.since_freq_step_s >= FREQ_STEP_INTERVAL_S {
            self.freq_scale = (self.freq_scale - FREQ_STEP).max(FREQ_FLOOR);
            self.since_freq_step_s = 0.0;
        } else if temp < self.target_c - 2.0
            && !at_cap
            && self.freq_scale < 1.0
            && self.since_freq_step_s >= FREQ_STEP_INTERVAL_S
        {
            self.freq_scale = (self.freq_scale + FREQ_STEP).min(1.0);
            self.since_freq_step_s = 0.0;
        }
        ThermalDecision {
            fan_percent: duty.min(100),
            hashing_allowed: true,
            frequency_scale: self.freq_scale,
            condition: Condition::Normal,
            stalled_fans: stalled,
        }
    }

    fn protective(
        &mut self,
        fan_percent: u32,
        condition: Condition,
        stalled: Vec<usize>,
    ) -> ThermalDecision {
        ThermalDecision {
            fan_percent,
            hashing_allowed: false,
            frequency_scale: self.freq_scale,
            condition,
            stalled_fans: stalled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posture_is_one_verdict_of_the_hottest_reading() {
        let config = ThermalConfig {
            target_temp_c: 75.0,
            hot_temp_c: 90.0,
            dangerous_temp_c: 100.0,
            ..ThermalConfig::default()
        };
        let mut p = ThermalPolicy::new(config, Mode::Standard);
        for (reading, want) in [
            (None, ThermalPosture::Unspecified),
            (Some(60.0), ThermalPosture::Normal),
            (Some(80.0), ThermalPosture::Normal),
            (Some(80.1), ThermalPosture::Warm),
            (Some(90.0), ThermalPosture::Hot),
            (Some(100.0), ThermalPosture::Dangerous),
        ] {
            assert_eq!(p.posture(reading), want, "{reading:?}");
        }
        // Warm follows the target in force (SetFan with a target), not only the config's.
        p.set_target(65.0);
        assert_eq!(p.posture(Some(72.0)), ThermalPosture::Warm);
    }

    fn inputs(temp: f64) -> ThermalInputs {
        ThermalInputs {
            temp_max_c: Some(temp),
            temp_max_where: "chain 0".into(),
            fans: vec![(50, 3000), (50, 3000)],
            ..Default::default()
        }
    }

    #[test]
    fn pid_raises_output_when_hot_and_lowers_when_cold() {
        let mut pid = Pid::new(4.0, 0.4, 0.0, 10.0, 100.0);
        let mut out = 0.0;
        for _ in 0..20 {
            out = pid.update(75.0, 85.0, 1.0);
        }
        assert!(out > 60.0, "{out}");
        for _ in 0..200 {
            out = pid.update(75.0, 60.0, 1.0);
        }
        assert_eq!(out, 10.0);
    }

    #[test]
    fn pid_integral_does_not_wind_up_past_limits() {
        let mut pid = Pid::new(1.0, 1.0, 0.0, 0.0, 100.0);
        for _ in 0..1000 {
            pid.update(50.0, 90.0, 1.0);
        }
        // One step below the set point must bring it off the rail quickly.
        let mut steps = 0;
        while pid.update(50.0, 45.0, 1.0) >= 100.0 {
            steps += 1;
            assert!(steps < 5, "wound up");
        }
    }

    #[test]
    fn pid_settles_a_simple_plant_at_target() {
        // Plant: temperature = 25 + 100 * (1 - duty/100) * 0.8.
        let mut pid = Pid::new(4.0, 0.4, 0.0, 10.0, 100.0);
        let mut temp = 90.0;
        for _ in 0..600 {
            let duty = pid.update(75.0, temp, 1.0);
            let equilibrium = 25.0 + 80.0 * (1.0 - duty / 100.0);
            temp += (equilibrium - temp) * 0.2;
        }
        assert!((temp - 75.0).abs() < 1.0, "{temp}");
    }

    #[test]
    fn adopted_fan_duty_is_held_at_the_target() {
        let mut fresh = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut adopted = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        adopted.adopt_fan_duty(70);
        // At the target the error is zero: only the integral speaks.
        assert_eq!(fresh.step(&inputs(75.0), 1.0).fan_percent, 10);
        assert_eq!(adopted.step(&inputs(75.0), 1.0).fan_percent, 70);
        // A duty outside the configured limits is clamped into them.
        let mut capped = ThermalPolicy::new(
            ThermalConfig {
                fan_max_percent: 50,
                ..ThermalConfig::default()
            },
            Mode::Standard,
        );
        capped.adopt_fan_duty(90);
        assert_eq!(capped.step(&inputs(75.0), 1.0).fan_percent, 50);
    }

    #[test]
    fn overheat_latches_until_cooled_below_target() {
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let d = p.step(&inputs(101.0), 1.0);
        assert!(!d.hashing_allowed);
        assert_eq!(d.fan_percent, 100);
        assert!(matches!(&d.condition, Condition::Overheat(r) if r.contains("chain 0")));
        // Cooler than dangerous but not cool enough: still latched.
        assert!(!p.step(&inputs(80.0), 1.0).hashing_allowed);
        let d = p.step(&inputs(60.0), 1.0);
        assert!(d.hashing_allowed);
        assert_eq!(d.condition, Condition::Normal);
    }

    #[test]
    fn fan_stall_trips_after_grace_only() {
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut i = inputs(70.0);
        i.fans[1] = (50, 0);
        assert!(p.step(&i, 1.0).hashing_allowed);
        assert!(p.step(&i, 1.0).hashing_allowed);
        let d = p.step(&i, 1.0);
        assert!(!d.hashing_allowed);
        assert_eq!(d.stalled_fans, vec![1]);
        assert_eq!(d.fan_percent, 100);
        assert!(matches!(d.condition, Condition::Fault(ref r) if r.contains("fan 1")));
        // A fan told to stop is not stalled.
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut i = inputs(70.0);
        i.fans[0] = (0, 0);
        for _ in 0..10 {
            assert!(p.step(&i, 1.0).hashing_allowed);
        }
    }

    #[test]
    fn psu_fault_idles_chips() {
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut i = inputs(70.0);
        i.psu_fault = "overcurrent".into();
        let d = p.step(&i, 1.0);
        assert!(!d.hashing_allowed);
        assert!(matches!(d.condition, Condition::Fault(ref r) if r.contains("overcurrent")));
    }

    #[test]
    fn sleep_idles_chips_with_minimum_fan() {
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut i = inputs(50.0);
        i.sleep = true;
        let d = p.step(&i, 1.0);
        assert_eq!(d.condition, Condition::Sleeping);
        assert!(!d.hashing_allowed);
        assert_eq!(d.fan_percent, ThermalConfig::default().fan_min_percent);
    }

    #[test]
    fn home_mode_cuts_frequency_instead_of_exceeding_fan_cap() {
        let cfg = ThermalConfig {
            fan_max_percent: 40,
            ..ThermalConfig::default()
        };
        let mut home = ThermalPolicy::new(cfg.clone(), Mode::Home);
        let mut standard = ThermalPolicy::new(cfg, Mode::Standard);
        let mut dh = None;
        let mut ds = None;
        for _ in 0..60 {
            dh = Some(home.step(&inputs(85.0), 1.0));
            ds = Some(standard.step(&inputs(85.0), 1.0));
        }
        let (mut dh, ds) = (dh.unwrap(), ds.unwrap());
        assert!(dh.fan_percent <= 40);
        assert!(dh.frequency_scale < 1.0, "{}", dh.frequency_scale);
        assert!(dh.frequency_scale >= FREQ_FLOOR);
        // Standard mode below hot_temp keeps full frequency.
        assert_eq!(ds.frequency_scale, 1.0);
        // Cooling down restores the frequency step by step.
        for _ in 0..200 {
            dh = home.step(&inputs(60.0), 1.0);
        }
        assert_eq!(dh.frequency_scale, 1.0);
    }

    #[test]
    fn missing_temperature_is_a_fault() {
        let mut p = ThermalPolicy::new(ThermalConfig::default(), Mode::Standard);
        let mut i = inputs(0.0);
        i.temp_max_c = None;
        assert!(!p.step(&i, 1.0).hashing_allowed);
    }
}
