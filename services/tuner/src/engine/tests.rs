//! The whole loop (driver, engine, search, store) against a small simulated board, with a manual
//! clock: one call per simulated second, no waiting.

use std::sync::{Arc, Mutex};

use svcos_common::config::Config;
use svcos_common::time::{Clock, ManualClock};
use svcos_proto::hwagent::v1::{
    ChainTelemetry, ChipTelemetry, FanMode, FanTelemetry, Hashrate, MiningState, PsuTelemetry,
    Telemetry,
};
use tokio::sync::watch;
use tonic::Status;

use super::*;
use crate::{Driver, Hardware, Shared};

const CHAINS: u32 = 3;
const CHIPS: u32 = 10;
const STOCK_MHZ: f64 = 650.0;
const STOCK_MV: f64 = 8800.0;
const CHIP_WATT: f64 = 5.0;
const NONCES_PER_S: f64 = 40.0;

/// A board with the same physics as hw-sim, in miniature: P ~ f V^2 plus leakage, the stable
/// frequency of each chip set by its quality and ~V^1.5, errors rising steeply past it, the
/// temperature following power.
#[derive(Debug)]
struct Board {
    voltage_mv: f64,
    mhz: Vec<Vec<f64>>,
    quality: Vec<Vec<f64>>,
    nonces: Vec<Vec<f64>>,
    errors: Vec<Vec<f64>>,
    extra_heat_c: f64,
    /// The fan loop's duty, percent (full until a test says otherwise).
    fan_pwm: u32,
    /// Fans held at a fixed duty (manual, or capped for night mode) rather than the fan loop's.
    fan_manual: bool,
    hw_power_target_watt: f64,
    /// Boards switched off.
    off: Vec<bool>,
    /// Seconds of bring-up left per board (hw-agent's cold start after a switch-on).
    bringup_s: Vec<u32>,
    seq: u64,
    commands: u32,
}

impl Board {
    fn new() -> Board {
        let quality = (0..CHAINS)
            .map(|c| {
                (0..CHIPS)
                    .map(|i| {
                        // Deterministic lottery: mostly ~10 % margin, chip 4 of chain 1 weak.
                        let spread = ((c * 7 + i * 13) % 9) as f64 / 100.0 - 0.04;
                        if c == 1 && i == 4 {
                            640.0
                        } else {
                            715.0 * (1.0 + spread)
                        }
                    })
                    .collect()
            })
            .collect();
        Board {
            voltage_mv: STOCK_MV,
            mhz: vec![vec![STOCK_MHZ; CHIPS as usize]; CHAINS as usize],
            quality,
            nonces: vec![vec![0.0; CHIPS as usize]; CHAINS as usize],
            errors: vec![vec![0.0; CHIPS as usize]; CHAINS as usize],
            extra_heat_c: 0.0,
            fan_pwm: 100,
            fan_manual: false,
            hw_power_target_watt: 0.0,
            off: vec![false; CHAINS as usize],
            bringup_s: vec![0; CHAINS as usize],
            seq: 0,
            commands: 0,
        }
    }

    fn chip_power(&self, f: f64) -> f64 {
        let v = self.voltage_mv / STOCK_MV;
        CHIP_WATT * (0.8 * v * v * f / STOCK_MHZ + 0.2 * v)
    }

    fn error_rate(&self, c: usize, i: usize) -> f64 {
        let v = self.voltage_mv / STOCK_MV;
        let fmax = self.quality[c][i] * v.powf(1.5);
        let margin = (fmax - self.mhz[c][i]) / fmax;
        0.5 / (1.0 + (margin / 0.01).exp())
    }

    fn power(&self) -> f64 {
        (0..CHAINS as usize)
            .filter(|&c| !self.off[c])
            .flat_map(|c| self.mhz[c].iter())
            .map(|&f| self.chip_power(f))
            .sum()
    }

    fn temp(&self) -> f64 {
        25.0 + self.power() * 0.35 + self.extra_heat_c
    }

    fn advance(&mut self, dt_s: f64) {
        for b in &mut self.bringup_s {
            *b = b.saturating_sub(1);
        }
        for c in (0..CHAINS as usize).filter(|&c| !self.off[c]) {
            for i in 0..CHIPS as usize {
                let n = NONCES_PER_S * self.mhz[c][i] / STOCK_MHZ * dt_s;
                let r = self.error_rate(c, i);
                self.nonces[c][i] += n * (1.0 - r);
                self.errors[c][i] += n * r;
            }
        }
        self.seq += 1;
    }

    fn telemetry(&self, now_ms: i64) -> Telemetry {
        let chains = (0..CHAINS as usize)
            .map(|c| {
                let chips: Vec<ChipTelemetry> = (0..CHIPS as usize)
                    .map(|i| ChipTelemetry {
                        index: i as u32,
                        frequency_mhz: self.mhz[c][i],
                        nonces: self.nonces[c][i] as u64,
                        hw_errors: self.errors[c][i] as u64,
                        temp_c: self.temp(),
                        alive: true,
                        ..Default::default()
                    })
                    .collect();
                ChainTelemetry {
                    chain_id: c as u32,
                    state: if self.off[c] {
                        ChainState::Disabled as i32
                    } else if self.bringup_s[c] > 0 {
                        ChainState::Initializing as i32
                    } else {
                        ChainState::Mining as i32
                    },
                    frequency_mhz: self.mhz[c].iter().sum::<f64>() / f64::from(CHIPS),
                    voltage_mv: self.voltage_mv,
                    nonces: chips.iter().map(|x| x.nonces).sum(),
                    hw_errors: chips.iter().map(|x| x.hw_errors).sum(),
                    power_watt: self.mhz[c].iter().map(|&f| self.chip_power(f)).sum(),
                    hashrate: Some(Hashrate {
                        ghs_expected: self.mhz[c].iter().sum::<f64>() * 0.1,
                        ..Default::default()
                    }),
                    chips,
                    ..Default::default()
                }
            })
            .collect::<Vec<_>>();
        Telemetry {
            seq: self.seq,
            timestamp_ms: now_ms,
            state: MiningState::Mining as i32,
            hashrate: Some(Hashrate {
                ghs_expected: chains
                    .iter()
                    .map(|c| c.hashrate.unwrap().ghs_expected)
                    .sum(),
                ghs_1m: 1.0,
                ghs_5s: 1.0,
                ..Default::default()
            }),
            power_watt: self.power(),
            power_target_watt: self.hw_power_target_watt,
            temp_max_c: self.temp(),
            fan_mode: if self.fan_manual {
                FanMode::Manual
            } else {
                FanMode::Auto
            } as i32,
            fans: vec![FanTelemetry {
                pwm_percent: self.fan_pwm,
                rpm: 60 * self.fan_pwm,
                ..Default::default()
            }],
            psu: Some(PsuTelemetry {
                voltage_setpoint_v: self.voltage_mv / 1000.0,
                ..Default::default()
            }),
            chains,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
struct FakeHw(Arc<Mutex<Board>>);

impl Hardware for FakeHw {
    async fn inventory(&self) -> Result<BoardInfo, Status> {
        Ok(BoardInfo {
            serial: "SIM-0001".into(),
            chains: CHAINS,
            chips_per_chain: CHIPS,
            nominal_power_watt: f64::from(CHAINS * CHIPS) * CHIP_WATT,
            nominal_ths: 0.1 * STOCK_MHZ * f64::from(CHAINS * CHIPS) / 1000.0,
        })
    }

    async fn execute(&self, action: Action) -> Result<(), Status> {
        let mut b = self.0.lock().unwrap();
        b.commands += 1;
        match action {
            Action::SetVoltage(mv) => b.voltage_mv = mv,
            Action::SetChainEnabled { chain, enabled } => {
                // Back on: brought up at stock, as hw-agent does.
                if enabled && b.off[chain as usize] {
                    b.mhz[chain as usize] = vec![STOCK_MHZ; CHIPS as usize];
                    b.bringup_s[chain as usize] = 8;
                }
                b.off[chain as usize] = !enabled;
            }
            Action::SetFrequency { chain, chip, mhz } => {
                if b.off[chain as usize] || b.bringup_s[chain as usize] > 0 {
                    return Err(Status::failed_precondition("chain not running"));
                }
                let c = &mut b.mhz[chain as usize];
                match chip {
                    Some(i) => c[i as usize] = mhz,
                    None => c.iter_mut().for_each(|f| *f = mhz),
                }
            }
        }
        Ok(())
    }
}

struct Rig {
    clock: ManualClock,
    board: Arc<Mutex<Board>>,
    tx: watch::Sender<Option<Telemetry>>,
    driver: Driver<FakeHw>,
    _dir: Option<tempfile::TempDir>,
}

fn config() -> Config {
    let mut c = Config::default();
    c.tuner.enabled = true;
    c.tuner.power_target_watt = 120.0;
    c.tuner.settle_s = 2;
    c.tuner.window_s = 5;
    c
}

impl Rig {
    fn new(config: Config, dir: &std::path::Path, board: Arc<Mutex<Board>>) -> Rig {
        let clock = ManualClock::at(1_700_000_000_000);
        let store = Store::open(dir).unwrap();
        let engine = Engine::new(config, store, 0).unwrap();
        let shared = Shared::new(engine, Arc::new(clock.clone()));
        let (tx, rx) = watch::channel(None);
        Rig {
            clock,
            board: board.clone(),
            tx,
            driver: Driver {
                shared,
                hw: FakeHw(board),
                telemetry: rx,
            },
            _dir: None,
        }
    }

    async fn second(&self) {
        self.clock.advance_ms(1000);
        let t = {
            let mut b = self.board.lock().unwrap();
            b.advance(1.0);
            b.telemetry(self.clock.now_ms())
        };
        self.tx.send_replace(Some(t));
        self.driver.step().await;
    }

    /// `n` seconds, the board adjusted by `f` before each (a heatsink a test holds).
    async fn seconds_with(&self, n: i64, f: impl Fn(&mut Board)) {
        for _ in 0..n {
            f(&mut self.board.lock().unwrap());
            self.second().await;
        }
    }

    fn state(&self) -> TunerState {
        self.driver.shared.lock().state()
    }

    /// GetState at the rig's clock (time-of-use windows are read at that time).
    fn view(&self) -> pb::GetStateResponse {
        self.driver.shared.lock().view(self.clock.now_ms())
    }

    async fn until(&self, what: &str, max_s: u32, f: impl Fn(&Rig) -> bool) {
        let mut last = String::new();
        for _ in 0..max_s {
            self.second().await;
            if std::env::var_os("RIG_TRACE").is_some() {
                let v = self.view();
                let now = format!(
                    "{} {} {:.0} mV {:?}",
                    v.state,
                    v.reason,
                    v.voltage_mv,
                    v.chains
                        .iter()
                        .map(|c| (c.frequency_mhz.round(), c.chips.len(), c.switched_off))
                        .collect::<Vec<_>>()
                );
                if now != last {
                    eprintln!("{now}");
                    last = now;
                }
            }
            if f(self) {
                return;
            }
        }
        let view = self.view();
        panic!("{what} not reached in {max_s} simulated s: {view:#?}");
    }
}

#[tokio::test]
async fn power_target_converges_saves_and_resumes_without_a_search() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let stock_power = board.lock().unwrap().power();
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuning", 5, |r| r.state() == TunerState::Tuning)
        .await;
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let (power, voltage, trims) = {
        let b = board.lock().unwrap();
        let trims = b.mhz[1][4] < b.mhz[1][0];
        (b.power(), b.voltage_mv, trims)
    };
    assert!(stock_power > 140.0, "{stock_power}");
    assert!((power - 120.0).abs() <= 120.0 * 0.05, "power {power}");
    // The search bought hashrate with voltage: below stock, yet every chain within its limits.
    assert!(voltage < STOCK_MV, "voltage {voltage}");
    assert!(voltage >= STOCK_MV * 0.85 - 1e-6);
    // The weak chip was slowed alone.
    assert!(trims, "chip 1/4 not trimmed");
    // Every chain is stable at the result.
    {
        let b = board.lock().unwrap();
        for c in 0..CHAINS as usize {
            for i in 0..CHIPS as usize {
                assert!(b.error_rate(c, i) < 0.1, "chip {c}/{i}");
            }
        }
    }
    let view = rig.view();
    let states: Vec<&str> = view.transitions.iter().map(|t| t.to.as_str()).collect();
    assert_eq!(states.first(), Some(&"tuning"), "{states:?}");
    assert_eq!(states.last(), Some(&"tuned"), "{states:?}");
    assert!(dir.path().join("boards/SIM-0001.json").exists());
    let tuned_point = rig.driver.shared.lock().point().cloned().unwrap();

    // A fresh process over the same directory resumes: tuned at once, no search.
    drop(rig);
    let commands_before = board.lock().unwrap().commands;
    let rig2 = Rig::new(config(), dir.path(), board.clone());
    rig2.until("tuned", 5, |r| r.state() == TunerState::Tuned)
        .await;
    let view = rig2.view();
    assert!(view.resumed, "{view:?}");
    assert!(view.reason.contains("resumed"), "{}", view.reason);
    assert!(
        !view.transitions.iter().any(|t| t.to == "tuning"),
        "{view:?}"
    );
    assert_eq!(rig2.driver.shared.lock().point(), Some(&tuned_point));
    for _ in 0..60 {
        rig2.second().await;
    }
    assert_eq!(rig2.state(), TunerState::Tuned);
    // Only the one re-application of the point, no search steps.
    let sent = board.lock().unwrap().commands - commands_before;
    let expected = diff(None, &tuned_point).len() as u32;
    assert_eq!(sent, expected);
}

#[tokio::test]
async fn overheat_backs_off_with_dynamic_power_scaling_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let before = board.lock().unwrap().power();
    let limit = rig.driver.shared.lock().limits().unwrap().max_temp_c;
    let t = board.lock().unwrap().temp();
    board.lock().unwrap().extra_heat_c = limit - t + 3.0;
    rig.until("backoff", 30, |r| r.state() == TunerState::Backoff)
        .await;
    for _ in 0..10 {
        rig.second().await;
    }
    let view = rig.view();
    assert!(view.dps_reduction_watt > 0.0, "{view:?}");
    assert!(view.power_target_watt < 120.0, "{view:?}");
    assert!(board.lock().unwrap().power() < before);
    assert!(board.lock().unwrap().temp() <= limit + 3.0);
    // Heat gone: the target comes back step by step and the tuner ends tuned at 120 W again.
    board.lock().unwrap().extra_heat_c = -20.0;
    rig.until("tuned at the full target", 3000, |r| {
        let v = r.view();
        r.state() == TunerState::Tuned
            && v.dps_reduction_watt == 0.0
            && v.power_target_watt == 120.0
    })
    .await;
}

#[tokio::test]
async fn disable_restores_stock_and_hashrate_mode_meets_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuning", 5, |r| r.state() == TunerState::Tuning)
        .await;
    rig.driver
        .shared
        .lock()
        .set_target(Mode::Hashrate, None, Some(1.0))
        .unwrap();
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let ths: f64 = board.lock().unwrap().mhz.iter().flatten().sum::<f64>() * 0.1 / 1000.0;
    assert!((ths - 1.0).abs() < 0.05, "{ths}");
    rig.driver
        .shared
        .lock()
        .set_active(false, rig.clock.now_ms())
        .unwrap();
    rig.until("disabled", 5, |r| r.state() == TunerState::Disabled)
        .await;
    let b = board.lock().unwrap();
    assert_eq!(b.voltage_mv, STOCK_MV);
    assert!(b.mhz.iter().flatten().all(|&f| f == STOCK_MHZ));
}

#[tokio::test]
async fn time_of_use_window_changes_the_power_target() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let minute = (rig.clock.now_ms() / 60_000 % 1440) as u32;
    rig.driver
        .shared
        .lock()
        .set_tou(crate::store::TouSchedule {
            enabled: true,
            windows: vec![crate::store::TouWindow {
                start_minute: minute,
                end_minute: (minute + 120) % 1440,
                power_target_watt: 100.0,
                label: "peak".into(),
            }],
        })
        .unwrap();
    rig.until("tuned at 100 W", 2000, |r| {
        r.state() == TunerState::Tuned && r.view().power_target_watt == 100.0
    })
    .await;
    let p = board.lock().unwrap().power();
    assert!((p - 100.0).abs() <= 5.0, "{p}");
    // Bad schedules are refused.
    let bad = crate::store::TouSchedule {
        enabled: true,
        windows: vec![crate::store::TouWindow {
            start_minute: 10,
            end_minute: 2000,
            power_target_watt: 100.0,
            label: String::new(),
        }],
    };
    assert!(rig.driver.shared.lock().set_tou(bad).is_err());
}

#[test]
fn diff_orders_voltage_and_restores_trims() {
    let mut a = Point::uniform(8800.0, 1, 600.0);
    a.chains[0].set_chip(3, 575.0);
    let mut b = a.clone();
    b.voltage_mv = 8700.0;
    b.chains[0].frequency_mhz = 610.0;
    let acts = diff(Some(&a), &b);
    assert_eq!(
        acts,
        vec![
            Action::SetFrequency {
                chain: 0,
                chip: None,
                mhz: 610.0
            },
            Action::SetFrequency {
                chain: 0,
                chip: Some(3),
                mhz: 575.0
            },
            Action::SetVoltage(8700.0),
        ]
    );
    let up = diff(Some(&b), &a);
    assert_eq!(up[0], Action::SetVoltage(8800.0));
    // A trim removed: the chip goes back to its chain's base.
    let mut c = a.clone();
    c.chains[0].chips.clear();
    assert_eq!(
        diff(Some(&a), &c),
        vec![Action::SetFrequency {
            chain: 0,
            chip: Some(3),
            mhz: 600.0
        }]
    );
}

#[tokio::test]
async fn recalibration_searches_again_and_hw_agents_power_target_caps_the_tuner() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let first = rig.view().transitions.len();
    assert!(
        rig.view().chains.iter().any(|c| !c.chips.is_empty()),
        "a tuned point sets chips apart"
    );
    rig.driver
        .shared
        .lock()
        .recalibrate(rig.clock.now_ms())
        .unwrap();
    rig.until("tuning again", 5, |r| r.state() == TunerState::Tuning)
        .await;
    // From stock's plan, not from the tuned point: every chip of a chain alike again.
    assert!(rig.view().chains.iter().all(|c| c.chips.is_empty()));
    rig.until("tuned again", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let view = rig.view();
    assert!(!view.resumed);
    assert!(view.transitions.len() > first);

    // hw-agent enforces a lower power target (the operator's governor): the tuner follows it.
    board.lock().unwrap().hw_power_target_watt = 105.0;
    rig.until("tuned under the cap", 2000, |r| {
        r.state() == TunerState::Tuned && r.view().power_target_watt == 105.0
    })
    .await;
    let p = board.lock().unwrap().power();
    assert!((p - 105.0).abs() <= 105.0 * 0.05, "{p}");

    // Off: recalibration is refused with a reason.
    rig.driver
        .shared
        .lock()
        .set_active(false, rig.clock.now_ms())
        .unwrap();
    assert!(matches!(
        rig.driver.shared.lock().recalibrate(0),
        Err(EngineError::Precondition(_))
    ));
}

/// Effective never above configured, whatever lowers it, read at every simulated second.
fn assert_coherent(r: &Rig) {
    let v = r.view();
    assert!(
        v.power_target_watt <= v.configured_power_target_watt,
        "effective {} above configured {}: {v:#?}",
        v.power_target_watt,
        v.configured_power_target_watt
    );
}

#[tokio::test]
async fn the_operators_power_target_is_the_tuners_configured_target() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    // The wizard wrote 110 W while the tuner's own default is 120 W.
    let mut c = config();
    c.hardware.power_target_watt = 110.0;
    let rig = Rig::new(c.clone(), dir.path(), board.clone());
    rig.until("tuned at 110 W", 2000, |r| {
        assert_coherent(r);
        r.state() == TunerState::Tuned && r.view().power_target_watt == 110.0
    })
    .await;
    assert_eq!(rig.view().configured_power_target_watt, 110.0);

    // The heat level writes 100 W: configured and effective follow at once, before any tick.
    assert!(rig.driver.shared.lock().operator_target(100.0).unwrap());
    let v = rig.view();
    assert_eq!(v.configured_power_target_watt, 100.0);
    assert!(v.power_target_watt <= 100.0, "{v:?}");
    rig.until("tuned at 100 W", 2000, |r| {
        assert_coherent(r);
        r.state() == TunerState::Tuned && r.view().power_target_watt == 100.0
    })
    .await;

    // A target moved through the autotuner since survives a restart over the same config; a
    // config changed while the tuner was down is taken over.
    rig.driver.shared.lock().adjust(true, 1, 5.0).unwrap();
    drop(rig);
    c.hardware.power_target_watt = 100.0;
    let rig = Rig::new(c.clone(), dir.path(), board.clone());
    assert_eq!(rig.view().configured_power_target_watt, 105.0);
    drop(rig);
    c.hardware.power_target_watt = 95.0;
    let rig = Rig::new(c, dir.path(), board.clone());
    assert_eq!(rig.view().configured_power_target_watt, 95.0);
    // "No target" (0) leaves the tuner's own.
    assert!(!rig.driver.shared.lock().operator_target(0.0).unwrap());
    assert_eq!(rig.view().configured_power_target_watt, 95.0);
}

#[tokio::test]
async fn a_saved_profile_records_its_figures_and_applying_it_stays_under_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    // A power step in proportion to this 120 W board (the default's 100 W is an S9's).
    let mut c = config();
    c.tuner.dps_step_watt = 10.0;
    let rig = Rig::new(c, dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    // Saved while the tuner is off (no measurement window at this point): the telemetry's
    // figures, not zeros.
    rig.driver
        .shared
        .lock()
        .set_active(false, rig.clock.now_ms())
        .unwrap();
    rig.until("disabled", 5, |r| r.state() == TunerState::Disabled)
        .await;
    // Stock is back on the chips: let the telemetry show it.
    for _ in 0..3 {
        rig.second().await;
    }
    let now = rig.clock.now_ms();
    let p = rig
        .driver
        .shared
        .lock()
        .save_profile("my point", now)
        .unwrap();
    let drawn = board.lock().unwrap().power();
    assert!(
        (p.measured.power_watt - drawn).abs() < drawn * 0.05,
        "{p:?} while the board draws {drawn} W"
    );
    assert!(
        p.measured.hashrate_ths > 0.0 && p.measured.temp_max_c > 0.0,
        "{p:?}"
    );

    // hw-agent holds a lower target (the governor's): applying the profile reports it as the
    // effective target, never the tuner's configured figure above it.
    board.lock().unwrap().hw_power_target_watt = 90.0;
    rig.second().await;
    rig.driver.shared.lock().apply_profile("my point").unwrap();
    rig.until("fixed", 10, |r| r.state() == TunerState::Tuned)
        .await;
    let v = rig.view();
    assert_eq!(v.configured_power_target_watt, 120.0);
    assert_eq!(v.power_target_watt, 90.0, "{v:?}");

    // Overheat in fixed mode: dynamic power scaling cuts from what is held, and effective stays
    // under configured all along.
    board.lock().unwrap().hw_power_target_watt = 0.0;
    let limit = rig.driver.shared.lock().limits().unwrap().max_temp_c;
    let t = board.lock().unwrap().temp();
    board.lock().unwrap().extra_heat_c = limit - t + 3.0;
    rig.until("backoff", 60, |r| {
        assert_coherent(r);
        r.state() == TunerState::Backoff
    })
    .await;
    for _ in 0..20 {
        rig.second().await;
        assert_coherent(&rig);
    }
    let v = rig.view();
    assert!(v.dps_reduction_watt > 0.0, "{v:?}");
    assert!(v.power_target_watt < 120.0, "{v:?}");
}

#[tokio::test]
async fn a_low_target_switches_a_board_off_and_turning_off_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let mut c = config();
    // A third of stock: at the lowest voltage all three boards would run far under their
    // edges, each paying its leakage.
    c.tuner.power_target_watt = f64::from(CHAINS * CHIPS) * CHIP_WATT * 0.33;
    c.tuner.min_voltage_mv = 7900.0;
    let rig = Rig::new(c, dir.path(), board.clone());
    rig.until("tuned", 3000, |r| r.state() == TunerState::Tuned)
        .await;
    let view = rig.view();
    let off: Vec<u32> = view
        .chains
        .iter()
        .filter(|c| c.switched_off)
        .map(|c| c.chain_id)
        .collect();
    assert!(!off.is_empty(), "{view:?}");
    assert!(off.iter().all(|&c| board.lock().unwrap().off[c as usize]));
    let target = f64::from(CHAINS * CHIPS) * CHIP_WATT * 0.33;
    let p = board.lock().unwrap().power();
    assert!(p <= target * 1.05, "{p} W for {target} W");
    // A higher target: every board back on and the target met.
    let high = f64::from(CHAINS * CHIPS) * CHIP_WATT * 0.8;
    rig.driver
        .shared
        .lock()
        .set_target(Mode::Power, Some(high), None)
        .unwrap();
    rig.until("tuned high", 3000, |r| {
        r.state() == TunerState::Tuned && r.view().power_target_watt == high
    })
    .await;
    {
        let b = board.lock().unwrap();
        assert!(b.off.iter().all(|o| !o), "{:?}", rig.view().chains);
        let p = b.power();
        assert!((p - high).abs() <= high * 0.05, "{p} W for {high} W");
    }
    // Off: every board back, at stock.
    let now = rig.clock.now_ms();
    rig.driver.shared.lock().set_active(false, now).unwrap();
    rig.until("stock", 30, |_| {
        let b = board.lock().unwrap();
        b.off.iter().all(|o| !o) && b.voltage_mv == STOCK_MV
    })
    .await;
}

#[tokio::test]
async fn a_new_target_starts_from_the_nearest_tuned_point_not_from_stock() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let tuned = rig.driver.shared.lock().point().cloned().unwrap();
    assert!(
        tuned.chains.iter().any(|c| !c.chips.is_empty()),
        "{tuned:?}"
    );
    // Switched off and on again (no point in force to start from), at a nearby target: the
    // search starts from the saved 120 W point, per-chip frequencies and all.
    let now = rig.clock.now_ms();
    rig.driver.shared.lock().set_active(false, now).unwrap();
    rig.until("stock", 30, |_| {
        board.lock().unwrap().voltage_mv == STOCK_MV
    })
    .await;
    let now = rig.clock.now_ms();
    rig.driver.shared.lock().set_active(true, now).unwrap();
    rig.driver
        .shared
        .lock()
        .set_target(Mode::Power, Some(115.0), None)
        .unwrap();
    rig.until("tuning", 5, |r| r.state() == TunerState::Tuning)
        .await;
    // Planned at once from the saved point's measurement: its chips moved together (each
    // keeps its own frequency relative to the others), the voltage set for the lower target.
    let start = rig.driver.shared.lock().point().cloned().unwrap();
    assert!(start.voltage_mv <= tuned.voltage_mv, "{start:?}");
    assert!(start.voltage_mv < STOCK_MV, "{start:?}");
    let ids = |p: &Point| -> Vec<Vec<u32>> {
        p.chains
            .iter()
            .map(|c| c.chips.iter().map(|t| t.chip).collect())
            .collect()
    };
    assert_eq!(ids(&start), ids(&tuned));
    rig.until("tuned at 115 W", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let p = board.lock().unwrap().power();
    assert!((p - 115.0).abs() <= 115.0 * 0.05, "{p}");
}

#[tokio::test]
async fn from_a_high_tuned_point_a_low_target_lowers_the_voltage_and_switches_a_board_off() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let nominal = f64::from(CHAINS * CHIPS) * CHIP_WATT;
    let mut c = config();
    c.tuner.power_target_watt = nominal * 0.95;
    c.tuner.min_voltage_mv = 7900.0;
    let rig = Rig::new(c, dir.path(), board.clone());
    rig.until("tuned high", 3000, |r| r.state() == TunerState::Tuned)
        .await;
    // Under half the nominal power, as 600 W is for an S9: two boards at the voltage floor.
    let low = nominal * 0.45;
    rig.driver
        .shared
        .lock()
        .set_target(Mode::Power, Some(low), None)
        .unwrap();
    rig.until("tuned low", 3000, |r| {
        r.state() == TunerState::Tuned && r.view().power_target_watt == low
    })
    .await;
    let b = board.lock().unwrap();
    assert!(
        b.voltage_mv < 8300.0,
        "{} mV: {:?}",
        b.voltage_mv,
        rig.view()
    );
    assert!(b.off.iter().any(|o| *o), "{:?}", rig.view().chains);
    let p = b.power();
    assert!((p - low).abs() <= low * 0.05, "{p} W for {low} W");
}

/// A rig tuned at its 120 W target with 10 W dynamic-power steps (cuts counted one by one), and
/// the tuner's temperature limit.
async fn tuned_with_small_power_steps(
    dir: &std::path::Path,
    board: &Arc<Mutex<Board>>,
) -> (Rig, f64) {
    let mut c = config();
    c.tuner.dps_step_watt = 10.0;
    c.tuner.dps_min_power_watt = 20.0;
    let rig = Rig::new(c, dir, board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let limit = rig.driver.shared.lock().limits().unwrap().max_temp_c;
    (rig, limit)
}

/// Run the board 2 C over the limit until dynamic power scaling makes its first cut.
async fn heat_until_a_cut(rig: &Rig, board: &Arc<Mutex<Board>>, limit: f64) {
    let t = board.lock().unwrap().temp();
    board.lock().unwrap().extra_heat_c = limit - t + 2.0;
    rig.until("a cut", 30, |r| r.view().dps_reduction_watt > 0.0)
        .await;
}

#[tokio::test]
async fn a_board_that_stays_hot_is_cut_once_per_thermal_response_not_once_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let (rig, limit) = tuned_with_small_power_steps(dir.path(), &board).await;
    // A heatsink slower than the cuts: the hottest reading holds just over the limit whatever
    // the power does.
    let hold = |b: &mut Board| b.extra_heat_c = limit + 0.5 - (b.temp() - b.extra_heat_c);
    hold(&mut board.lock().unwrap());
    rig.until("backoff", 30, |r| {
        hold(&mut r.board.lock().unwrap());
        r.view().dps_reduction_watt > 0.0
    })
    .await;
    rig.seconds_with(THERMAL_RESPONSE_MS / 1000 - 5, hold).await;
    assert_eq!(rig.view().dps_reduction_watt, 10.0, "one cut per response");
    rig.seconds_with(10, hold).await;
    assert_eq!(
        rig.view().dps_reduction_watt,
        20.0,
        "the next once it had time to show"
    );
    // Hotter than at the last cut: no waiting.
    board.lock().unwrap().extra_heat_c += 3.0;
    rig.until("a third cut at once", 5, |r| {
        r.view().dps_reduction_watt == 30.0
    })
    .await;
}

#[tokio::test]
async fn a_power_step_comes_back_sooner_while_the_fans_have_room() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let (rig, limit) = tuned_with_small_power_steps(dir.path(), &board).await;
    heat_until_a_cut(&rig, &board, limit).await;
    // Between the two release margins: fans flat out, so the heat is the power's to hold.
    let settle = |b: &mut Board| b.extra_heat_c = limit - 5.0 - (b.temp() - b.extra_heat_c);
    rig.until("tuned at the lowered target", 600, |r| {
        settle(&mut r.board.lock().unwrap());
        r.state() == TunerState::Tuned
    })
    .await;
    let cut = rig.view().dps_reduction_watt;
    rig.seconds_with(120, settle).await;
    assert_eq!(
        rig.view().dps_reduction_watt,
        cut,
        "no room: the step stays"
    );
    // Fans held at half duty (night mode's cap, or manual) cannot take more heat: no room.
    board.lock().unwrap().fan_pwm = 50;
    board.lock().unwrap().fan_manual = true;
    rig.seconds_with(120, settle).await;
    assert_eq!(
        rig.view().dps_reduction_watt,
        cut,
        "fans at a fixed duty: the step stays"
    );
    // The fan loop holds the same temperature with room to spare: a step comes back.
    board.lock().unwrap().fan_manual = false;
    rig.until("a step back", 120, |r| {
        settle(&mut r.board.lock().unwrap());
        r.view().dps_reduction_watt < cut
    })
    .await;
}

#[tokio::test]
async fn a_power_cut_for_heat_is_the_ceiling_of_a_higher_target_not_of_a_lower_one() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let (rig, limit) = tuned_with_small_power_steps(dir.path(), &board).await;
    heat_until_a_cut(&rig, &board, limit).await;
    let held = rig.view().power_target_watt;
    assert!(held < 120.0);
    // Higher: the board could not hold 120 W cool, so 140 W plans at the same ceiling.
    assert!(rig.driver.shared.lock().operator_target(140.0).unwrap());
    rig.second().await;
    let v = rig.view();
    assert_eq!(v.configured_power_target_watt, 140.0);
    assert_eq!(v.power_target_watt, held, "{v:?}");
    // Lower than the ceiling: the cut is moot.
    assert!(rig.driver.shared.lock().operator_target(80.0).unwrap());
    rig.second().await;
    let v = rig.view();
    assert_eq!((v.power_target_watt, v.dps_reduction_watt), (80.0, 0.0));
    // ... but remembered: back above it, the target starts at the ceiling again (its saved
    // profile, if any) instead of running hot until a new cut.
    assert!(rig.driver.shared.lock().operator_target(150.0).unwrap());
    rig.second().await;
    let v = rig.view();
    assert_eq!(v.power_target_watt, held, "{v:?}");
    assert_eq!(v.dps_reduction_watt, 150.0 - held);
}

#[tokio::test]
async fn history_keeps_an_hour_in_a_ring_sized_once_and_reads_back_its_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let rig = Rig::new(config(), dir.path(), board.clone());
    let capacity = rig.driver.shared.lock().history.capacity();
    assert!(capacity >= HISTORY, "{capacity}");
    assert!(std::mem::size_of::<PackedSample>() <= 56);
    for _ in 0..HISTORY + 30 {
        rig.second().await;
    }
    let (power, temp) = {
        let b = board.lock().unwrap();
        (b.power(), b.telemetry(0).temp_max_c)
    };
    let shared = rig.driver.shared.lock();
    // An hour at 1 Hz, the oldest dropped, and never a reallocation past the first.
    assert_eq!(shared.history.len(), HISTORY);
    assert_eq!(shared.history.capacity(), capacity);
    let last = shared.history(1);
    assert_eq!(last.len(), 1);
    let all = shared.history(0);
    assert_eq!(all.len(), HISTORY);
    assert!(all.windows(2).all(|w| w[1].at_ms - w[0].at_ms == 1000));
    assert!(
        (last[0].power_watt - power).abs() < 0.05,
        "{} vs {power}",
        last[0].power_watt
    );
    assert!(
        (last[0].temp_max_c - temp).abs() < 0.01,
        "{} vs {temp}",
        last[0].temp_max_c
    );
    assert_eq!(last[0].state, shared.state());
}

#[tokio::test]
async fn a_cut_for_heat_sheds_its_watts_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = Arc::new(Mutex::new(Board::new()));
    let mut c = config();
    c.tuner.dps_step_watt = 20.0;
    c.tuner.dps_min_power_watt = 20.0;
    let rig = Rig::new(c, dir.path(), board.clone());
    rig.until("tuned", 2000, |r| r.state() == TunerState::Tuned)
        .await;
    let limit = rig.driver.shared.lock().limits().unwrap().max_temp_c;
    let before = board.lock().unwrap().power();
    heat_until_a_cut(&rig, &board, limit).await;
    for _ in 0..3 {
        rig.second().await;
    }
    let after = board.lock().unwrap().power();
    assert_eq!(rig.view().dps_reduction_watt, 20.0);
    // Two frequency steps alone shed under 10 W here.
    assert!(
        before - after >= 0.8 * 20.0,
        "the board shed {:.1} W for a 20 W cut ({before:.1} -> {after:.1})",
        before - after
    );
}

#[test]
fn fans_have_room_only_under_the_ceiling_that_binds_them() {
    let t = |mode: FanMode, pwm: &[u32]| Telemetry {
        fan_mode: mode as i32,
        fans: pwm
            .iter()
            .map(|&p| FanTelemetry {
                pwm_percent: p,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut c = Config::default();
    c.thermal.fan_max_percent = 100;
    assert!(fans_have_room(&t(FanMode::Auto, &[60, 70]), &c));
    assert!(
        !fans_have_room(&t(FanMode::Auto, &[60, 90]), &c),
        "one fan near the top"
    );
    assert!(
        !fans_have_room(&t(FanMode::Manual, &[40]), &c),
        "held at a duty"
    );
    assert!(
        !fans_have_room(&t(FanMode::Auto, &[]), &c),
        "no fans reported"
    );
    c.governor.noise.enabled = true;
    c.governor.noise.fan_max_percent = 80;
    assert!(
        !fans_have_room(&t(FanMode::Auto, &[60, 70]), &c),
        "the noise ceiling binds"
    );
    assert!(fans_have_room(&t(FanMode::Auto, &[60, 65]), &c));
    c.thermal.fan_max_percent = 70;
    assert!(
        !fans_have_room(&t(FanMode::Auto, &[60]), &c),
        "the thermal ceiling binds"
    );
}
