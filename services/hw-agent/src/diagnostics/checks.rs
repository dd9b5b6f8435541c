//! The three runs. Each observes published snapshots over a window (checking for cancel once
//! a second), asks the board/chain threads for the few extra readings it needs, and returns a
//! JSON report plus its Markdown rendering.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svcos_bm13xx::{ChipModel, reg};
use svcos_common::chiphealth::{
    self, ChipCounts, MIN_EXPECTED_FOR_DEAD, WEAK_HW_ERROR_SHARE, WEAK_NONCE_RATIO,
};
use svcos_common::config::ThermalConfig;
use tokio::sync::{oneshot, watch};

use super::RunKind;
use crate::accounting::HASHES_PER_DIFF1;
use crate::board::BoardSpec;
use crate::chain::{ChainCommand, ChainHandle, ChainSnapshot, ChainStatus};
use crate::control::{BoardLayout, BoardSnapshot, ControlCommand};
use crate::error::HwError;

/// Board-health: PSU output this far off its setpoint warns / fails.
const VOLTAGE_WARN: f64 = 0.05;
const VOLTAGE_FAIL: f64 = 0.10;
/// Hash report: measured / nominal below these warns / fails.
const HASH_WARN: f64 = 0.90;
const HASH_FAIL: f64 = 0.75;

/// What a run can see and ask.
#[derive(Clone)]
pub struct Context {
    /// Board description.
    pub spec: Arc<BoardSpec>,
    /// PSU and sensor addresses.
    pub layout: Arc<BoardLayout>,
    /// Chains (snapshots and commands).
    pub chains: Arc<Vec<ChainHandle>>,
    /// Board snapshot.
    pub board: watch::Receiver<Arc<BoardSnapshot>>,
    /// Board thread commands.
    pub control: Sender<ControlCommand>,
    /// Virtual hashes per real hash (1 on hardware).
    pub hashes_scale: f64,
    /// Temperature limits.
    pub thermal: ThermalConfig,
    /// I2C bus number.
    pub i2c_bus: u32,
}

impl Context {
    fn snapshots(&self) -> Vec<Arc<ChainSnapshot>> {
        self.chains
            .iter()
            .map(|c| c.snapshot.borrow().clone())
            .collect()
    }

    /// Ask the board thread something and wait for the answer.
    pub async fn board_call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> ControlCommand,
    ) -> Result<T, HwError> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(make(tx))
            .map_err(|_| HwError::WorkerGone("board thread"))?;
        rx.await.map_err(|_| HwError::WorkerGone("board thread"))
    }

    /// Ask a chain thread something and wait for the answer.
    pub async fn chain_call<T>(
        &self,
        chain: u32,
        make: impl FnOnce(oneshot::Sender<T>) -> ChainCommand,
    ) -> Result<T, HwError> {
        let handle = self
            .chains
            .get(chain as usize)
            .ok_or(HwError::NoSuchChain {
                chain,
                chains: self.chains.len() as u32,
            })?;
        let (tx, rx) = oneshot::channel();
        if !handle.send(make(tx)) {
            return Err(HwError::WorkerGone("chain thread"));
        }
        rx.await.map_err(|_| HwError::WorkerGone("chain thread"))
    }

    /// Read one chip register: (chip address, value if it answered).
    pub async fn read_register(
        &self,
        chain: u32,
        chip: u32,
        register: u8,
    ) -> Result<(u8, Option<u32>), HwError> {
        self.chain_call(chain, |reply| ChainCommand::Register {
            chip,
            register,
            value: None,
            reply,
        })
        .await?
        .map_err(HwError::from)
    }

    /// The I2C devices the board map expects: (address, name).
    pub fn expected_i2c(&self) -> Vec<(u16, String)> {
        let mut v: Vec<(u16, String)> = self
            .layout
            .psu_address
            .map(|a| (a, "psu".to_string()))
            .into_iter()
            .chain(
                self.layout
                    .sensors
                    .iter()
                    .map(|s| (s.address, s.name.clone())),
            )
            .chain(
                self.layout
                    .pics
                    .iter()
                    .map(|p| (p.address, format!("chain{}-pic", p.chain_id))),
            )
            .collect();
        v.sort();
        v
    }
}

/// How a run ended.
pub enum Outcome {
    /// Full window observed: report, verdict, Markdown.
    Completed(Value, &'static str, String),
    /// Stopped early: what was observed so far.
    Cancelled(Value, String),
    /// Could not run.
    Failed(String),
}

/// Sleep `d` unless cancelled first; true when cancelled.
async fn pause(d: Duration, cancel: &mut watch::Receiver<bool>) -> bool {
    if *cancel.borrow() {
        return true;
    }
    let cancelled = tokio::select! {
        _ = tokio::time::sleep(d) => None,
        Ok(_) = cancel.wait_for(|c| *c) => Some(true),
    };
    cancelled.unwrap_or_else(|| *cancel.borrow())
}

/// Observe for `seconds`, reporting progress up to `share` of 100; true when cancelled.
async fn observe(
    seconds: u32,
    share: f64,
    progress: &(dyn Fn(f64) + Send + Sync),
    cancel: &mut watch::Receiver<bool>,
) -> bool {
    let start = Instant::now();
    let total = Duration::from_secs(u64::from(seconds));
    loop {
        let elapsed = start.elapsed();
        progress((elapsed.as_secs_f64() / total.as_secs_f64()).min(1.0) * share);
        if elapsed >= total {
            return false;
        }
        let step = (total - elapsed).min(Duration::from_secs(1));
        if pause(step, cancel).await {
            return true;
        }
    }
}

/// Run one diagnostic.
pub async fn run(
    kind: RunKind,
    ctx: Context,
    duration_s: u32,
    progress: Box<dyn Fn(f64) + Send + Sync>,
    mut cancel: watch::Receiver<bool>,
) -> Outcome {
    match kind {
        RunKind::ChipHealth => chip_health(&ctx, duration_s, &*progress, &mut cancel).await,
        RunKind::BoardHealth => board_health(&ctx, duration_s, &*progress, &mut cancel).await,
        RunKind::HashReport => hash_report(&ctx, duration_s, &*progress, &mut cancel).await,
    }
}

fn worst<'a>(verdicts: impl IntoIterator<Item = &'a str>) -> &'static str {
    let mut w = "pass";
    for v in verdicts {
        match v {
            "fail" => return "fail",
            "warn" => w = "warn",
            _ => {}
        }
    }
    w
}

fn status_word(s: &ChainStatus) -> String {
    match s {
        ChainStatus::Fault(r) => format!("fault: {r}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

// ---- chip health ------------------------------------------------------------------------

/// The classification of one chip from its window counts: (class, reasons), by the one rule
/// every surface uses (`svcos_common::chiphealth`).
pub fn classify_chip(
    nonces: u64,
    hw_errors: u64,
    expected: f64,
    answered_register: bool,
) -> (&'static str, Vec<String>) {
    let j = chiphealth::judge(
        &ChipCounts {
            answering: answered_register,
            nonces,
            hw_errors,
            frequency_mhz: 0.0,
        },
        expected,
    );
    (j.verdict.as_str(), j.reasons)
}

/// The chips of one chain over a window (counter deltas) with whether each answered the
/// register read, judged by the one rule: the report's `classification` and `evidence`.
pub fn judge_window(chain_nonces: u64, chips: &[ChipCounts]) -> Vec<chiphealth::Judgement> {
    chiphealth::judge_chain(chain_nonces, chips)
}

async fn chip_health(
    ctx: &Context,
    duration_s: u32,
    progress: &(dyn Fn(f64) + Send + Sync),
    cancel: &mut watch::Receiver<bool>,
) -> Outcome {
    let before = ctx.snapshots();
    let started = Instant::now();
    let cancelled = observe(duration_s, 90.0, progress, cancel).await;
    let after = ctx.snapshots();
    let window_s = started.elapsed().as_secs_f64();
    let mut chains = Vec::new();
    let mut md = format!("# Chip health\n\nWindow: {window_s:.0} s.\n");
    let mut verdicts = Vec::new();
    let total_chips: usize = after.iter().map(|s| s.chips.len()).sum::<usize>().max(1);
    let mut done = 0usize;
    for (b, a) in before.iter().zip(&after) {
        let running = a.status == ChainStatus::Mining;
        let chain_nonces = a.nonces.saturating_sub(b.nonces);
        let n = a.chips.len().min(b.chips.len());
        let mut chips = Vec::new();
        let (mut ok, mut weak, mut dead) = (0, 0, 0);
        md.push_str(&format!(
            "\n## Chain {} ({})\n\n| chip | address | nonces | expected | HW errors | register | class | evidence |\n|---|---|---|---|---|---|---|---|\n",
            a.chain_id,
            status_word(&a.status)
        ));
        // Read every chip's address register first, so the whole chain is judged at once.
        let mut answers = Vec::with_capacity(n);
        for i in 0..n {
            let answer = if running && !cancelled {
                ctx.read_register(a.chain_id, i as u32, reg::CHIP_ADDRESS)
                    .await
                    .ok()
                    .and_then(|(_, v)| v)
            } else {
                None
            };
            done += 1;
            progress(90.0 + 10.0 * done as f64 / total_chips as f64);
            answers.push(answer);
        }
        let counts: Vec<ChipCounts> = (0..n)
            .map(|i| ChipCounts {
                answering: answers[i].is_some(),
                nonces: a.chips[i].nonces.saturating_sub(b.chips[i].nonces),
                hw_errors: a.chips[i].hw_errors.saturating_sub(b.chips[i].hw_errors),
                frequency_mhz: a.chips[i].frequency_mhz,
            })
            .collect();
        let judged = judge_window(chain_nonces, &counts);
        for i in 0..n {
            let ca = &a.chips[i];
            let (nonces, hw, answer) = (counts[i].nonces, counts[i].hw_errors, answers[i]);
            let expected = judged[i].expected_nonces;
            let (class, reasons) = if !running {
                (
                    "unknown",
                    vec![format!("chain is {}", status_word(&a.status))],
                )
            } else if cancelled {
                (
                    "unknown",
                    vec!["run cancelled before the register check".into()],
                )
            } else {
                (judged[i].verdict.as_str(), judged[i].reasons.clone())
            };
            match class {
                "ok" => ok += 1,
                "weak" => weak += 1,
                "dead" => dead += 1,
                _ => {}
            }
            md.push_str(&format!(
                "| {i} | {:#04x} | {nonces} | {expected:.1} | {hw} | {} | {class} | {} |\n",
                ca.address,
                answer.map_or("no answer".into(), |v| format!("{v:#010x}")),
                reasons.join("; ")
            ));
            chips.push(json!({
                "chip": i,
                "address": ca.address,
                "frequency_mhz": ca.frequency_mhz,
                "nonces": nonces,
                "expected_nonces": (expected * 10.0).round() / 10.0,
                "hw_errors": hw,
                "register_answer": answer.map(|v| format!("{v:#010x}")),
                "classification": class,
                "evidence": reasons,
            }));
        }
        // Chips the board should have but enumeration never found.
        for i in a.chips.len() as u32..a.chips_expected {
            dead += 1;
            md.push_str(&format!(
                "| {i} | - | 0 | - | 0 | no answer | dead | never answered enumeration |\n"
            ));
            chips.push(json!({
                "chip": i,
                "address": null,
                "nonces": 0,
                "expected_nonces": null,
                "hw_errors": 0,
                "register_answer": null,
                "classification": "dead",
                "evidence": ["never answered enumeration"],
            }));
        }
        let verdict = if !running || dead > 0 {
            "fail"
        } else if weak > 0 {
            "warn"
        } else {
            "pass"
        };
        verdicts.push(verdict);
        chains.push(json!({
            "chain_id": a.chain_id,
            "state": status_word(&a.status),
            "chips_expected": a.chips_expected,
            "chips_detected": a.chips.len(),
            "nonces": chain_nonces,
            "summary": {"ok": ok, "weak": weak, "dead": dead},
            "verdict": verdict,
            "chips": chips,
        }));
    }
    let verdict = worst(verdicts.iter().copied());
    let report = json!({
        "schema": "svcos.hwagent.diag.chip-health.v1",
        "window_s": (window_s * 10.0).round() / 10.0,
        "thresholds": {
            "weak_hw_error_share": WEAK_HW_ERROR_SHARE,
            "weak_nonce_ratio": WEAK_NONCE_RATIO,
            "min_expected_for_dead": MIN_EXPECTED_FOR_DEAD,
        },
        "verdict": verdict,
        "chains": chains,
    });
    if cancelled {
        return Outcome::Cancelled(report, md);
    }
    md.push_str(&format!("\nVerdict: **{verdict}**\n"));
    Outcome::Completed(report, verdict, md)
}

// ---- board health -----------------------------------------------------------------------

fn check(name: &str, verdict: &'static str, value: Value, message: String) -> Value {
    json!({"check": name, "verdict": verdict, "value": value, "message": message})
}

async fn board_health(
    ctx: &Context,
    duration_s: u32,
    progress: &(dyn Fn(f64) + Send + Sync),
    cancel: &mut watch::Receiver<bool>,
) -> Outcome {
    // Sensors and fans are read by the board thread twice a second: a short window lets a
    // flaky reading show up as missing in the last snapshot rather than be averaged away.
    let cancelled = observe(duration_s, 80.0, progress, cancel).await;
    let board = ctx.board.borrow().clone();
    let chains_snap = ctx.snapshots();
    let expected = ctx.expected_i2c();
    let present = ctx
        .board_call(|reply| ControlCommand::I2cProbe {
            addresses: expected.iter().map(|(a, _)| *a).collect(),
            reply,
        })
        .await;
    progress(95.0);
    let present = match present {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let t = &ctx.thermal;
    let mut chains = Vec::new();
    let mut all = Vec::new();
    for s in &chains_snap {
        let mut checks = Vec::new();
        let detected = s.chips.len() as u32;
        let v = if detected == s.chips_expected {
            "pass"
        } else if detected > 0 {
            "warn"
        } else {
            "fail"
        };
        checks.push(check(
            "chips",
            v,
            json!({"detected": detected, "expected": s.chips_expected}),
            format!("{detected} of {} chips enumerated", s.chips_expected),
        ));
        let v = match s.status {
            ChainStatus::Mining => "pass",
            ChainStatus::Idle | ChainStatus::Disabled | ChainStatus::Initializing => "warn",
            _ => "fail",
        };
        checks.push(check(
            "state",
            v,
            json!(status_word(&s.status)),
            format!("chain is {}", status_word(&s.status)),
        ));
        for (spec, value) in board
            .sensors
            .iter()
            .filter(|(sp, _)| sp.chain_id == s.chain_id)
        {
            let name = format!("temp_{}", spec.kind);
            let c = match value {
                None => check(
                    &name,
                    "fail",
                    Value::Null,
                    format!(
                        "sensor {} at {:#04x} did not answer",
                        spec.name, spec.address
                    ),
                ),
                Some(c) if *c >= t.dangerous_temp_c => check(
                    &name,
                    "fail",
                    json!(c),
                    format!(
                        "{c:.1} C at or above the dangerous limit {:.0} C",
                        t.dangerous_temp_c
                    ),
                ),
                Some(c) if *c >= t.hot_temp_c => check(
                    &name,
                    "warn",
                    json!(c),
                    format!("{c:.1} C at or above the hot limit {:.0} C", t.hot_temp_c),
                ),
                Some(c) => check(&name, "pass", json!(c), format!("{c:.1} C")),
            };
            checks.push(c);
        }
        let verdict = worst(checks.iter().filter_map(|c| c["verdict"].as_str()));
        all.push(verdict);
        chains.push(json!({"chain_id": s.chain_id, "verdict": verdict, "checks": checks}));
    }
    // Board-level checks.
    let mut checks = Vec::new();
    let psu = &board.psu;
    let v = if psu.fault.is_empty() && psu.enabled {
        "pass"
    } else {
        "fail"
    };
    checks.push(check(
        "psu",
        v,
        json!({"enabled": psu.enabled, "fault": psu.fault, "power_watt": psu.power_watt, "current_a": psu.current_a, "temp_c": psu.temp_c}),
        if psu.fault.is_empty() {
            format!("{} W, {:.1} A", psu.power_watt, psu.current_a)
        } else {
            psu.fault.clone()
        },
    ));
    if psu.setpoint_v > 0.0 {
        let off = (psu.voltage_v - psu.setpoint_v).abs() / psu.setpoint_v;
        let v = if off <= VOLTAGE_WARN {
            "pass"
        } else if off <= VOLTAGE_FAIL {
            "warn"
        } else {
            "fail"
        };
        checks.push(check(
            "voltage",
            v,
            json!({"voltage_v": psu.voltage_v, "setpoint_v": psu.setpoint_v}),
            format!(
                "{:.3} V for a setpoint of {:.3} V ({:.1} % off)",
                psu.voltage_v,
                psu.setpoint_v,
                off * 100.0
            ),
        ));
    }
    for (i, f) in board.fans.iter().enumerate() {
        let v = if f.rpm > 0 && !f.stalled {
            "pass"
        } else {
            "fail"
        };
        checks.push(check(
            &format!("fan{i}"),
            v,
            json!({"rpm": f.rpm, "pwm_percent": f.pwm_percent}),
            format!("{} rpm at {} %", f.rpm, f.pwm_percent),
        ));
    }
    for (addr, name) in &expected {
        let ok = present.contains(addr);
        checks.push(check(
            &format!("i2c_{name}"),
            if ok { "pass" } else { "fail" },
            json!({"bus": ctx.i2c_bus, "address": addr, "present": ok}),
            format!(
                "{name} at {addr:#04x} {}",
                if ok {
                    "acknowledged"
                } else {
                    "did not acknowledge"
                }
            ),
        ));
    }
    let board_verdict = worst(checks.iter().filter_map(|c| c["verdict"].as_str()));
    all.push(board_verdict);
    let verdict = worst(all.iter().copied());
    let mut md = String::from("# Board health\n");
    let mut table = |title: String, checks: &[Value]| {
        md.push_str(&format!(
            "\n## {title}\n\n| check | verdict | detail |\n|---|---|---|\n"
        ));
        for c in checks {
            md.push_str(&format!(
                "| {} | {} | {} |\n",
                c["check"].as_str().unwrap_or(""),
                c["verdict"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            ));
        }
    };
    for c in &chains {
        let checks = c["checks"].as_array().cloned().unwrap_or_default();
        table(format!("Chain {}", c["chain_id"]), &checks);
    }
    table("Board".into(), &checks);
    md.push_str(&format!("\nVerdict: **{verdict}**\n"));
    let report = json!({
        "schema": "svcos.hwagent.diag.board-health.v1",
        "window_s": duration_s,
        "verdict": verdict,
        "chains": chains,
        "board": {"verdict": board_verdict, "checks": checks},
    });
    if cancelled {
        return Outcome::Cancelled(report, md);
    }
    progress(100.0);
    Outcome::Completed(report, verdict, md)
}

// ---- hash report ------------------------------------------------------------------------

async fn hash_report(
    ctx: &Context,
    duration_s: u32,
    progress: &(dyn Fn(f64) + Send + Sync),
    cancel: &mut watch::Receiver<bool>,
) -> Outcome {
    let before = ctx.snapshots();
    let started = Instant::now();
    let cancelled = observe(duration_s, 100.0, progress, cancel).await;
    let after = ctx.snapshots();
    let dt = started.elapsed().as_secs_f64().max(1e-3);
    let mut chains = Vec::new();
    let (mut total_measured, mut total_nominal, mut total_telemetry) = (0.0, 0.0, 0.0);
    let mut md = format!(
        "# Hash report\n\nWindow: {dt:.0} s.\n\n| chain | measured GH/s | nominal GH/s | % | telemetry 1 min GH/s |\n|---|---|---|---|---|\n"
    );
    let mut verdicts = Vec::new();
    for (b, a) in before.iter().zip(&after) {
        let model = ChipModel::from_name(&a.chip_model);
        let per_nonce = a.ticket_difficulty * HASHES_PER_DIFF1 * ctx.hashes_scale;
        let ghs = |nonces: u64| nonces as f64 * per_nonce / dt / 1e9;
        let nominal_chip = |mhz: f64| model.map_or(0.0, |m| m.nominal_hashrate(mhz) / 1e9);
        let measured = ghs(a.nonces.saturating_sub(b.nonces));
        let nominal = nominal_chip(a.frequency_mhz) * f64::from(a.chips_expected);
        let n = a.chips.len().min(b.chips.len());
        let chips: Vec<Value> = (0..n)
            .map(|i| {
                let m = ghs(a.chips[i].nonces.saturating_sub(b.chips[i].nonces));
                let nom = nominal_chip(a.chips[i].frequency_mhz);
                json!({
                    "chip": i,
                    "measured_ghs": round2(m),
                    "nominal_ghs": round2(nom),
                    "percent": round2(if nom > 0.0 { m / nom * 100.0 } else { 0.0 }),
                })
            })
            .collect();
        let ratio = if nominal > 0.0 {
            measured / nominal
        } else {
            0.0
        };
        let verdict = if ratio >= HASH_WARN {
            "pass"
        } else if ratio >= HASH_FAIL {
            "warn"
        } else {
            "fail"
        };
        verdicts.push(verdict);
        let telemetry = a.rates.hs_1m / 1e9;
        total_measured += measured;
        total_nominal += nominal;
        total_telemetry += telemetry;
        md.push_str(&format!(
            "| {} | {measured:.1} | {nominal:.1} | {:.1} | {telemetry:.1} |\n",
            a.chain_id,
            ratio * 100.0
        ));
        chains.push(json!({
            "chain_id": a.chain_id,
            "state": status_word(&a.status),
            "nonces": a.nonces.saturating_sub(b.nonces),
            "measured_ghs": round2(measured),
            "nominal_ghs": round2(nominal),
            "percent": round2(ratio * 100.0),
            "telemetry_ghs_1m": round2(telemetry),
            "verdict": verdict,
            "chips": chips,
        }));
    }
    let verdict = worst(verdicts.iter().copied());
    md.push_str(&format!(
        "| total | {total_measured:.1} | {total_nominal:.1} | {:.1} | {total_telemetry:.1} |\n\nVerdict: **{verdict}**\n",
        if total_nominal > 0.0 { total_measured / total_nominal * 100.0 } else { 0.0 }
    ));
    let report = json!({
        "schema": "svcos.hwagent.diag.hashreport.v1",
        "window_s": round2(dt),
        "verdict": verdict,
        "total": {
            "measured_ghs": round2(total_measured),
            "nominal_ghs": round2(total_nominal),
            "percent": round2(if total_nominal > 0.0 { total_measured / total_nominal * 100.0 } else { 0.0 }),
            "telemetry_ghs_1m": round2(total_telemetry),
        },
        "chains": chains,
    });
    if cancelled {
        return Outcome::Cancelled(report, md);
    }
    Outcome::Completed(report, verdict, md)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chip_classification() {
        // (nonces, hw errors, expected, answered) → class
        let cases = [
            (40, 0, 40.0, true, "ok"),
            (30, 1, 40.0, true, "ok"),
            (0, 0, 40.0, true, "dead"),
            (40, 0, 40.0, false, "dead"),
            (0, 0, 2.0, true, "ok"),
            (30, 20, 40.0, true, "weak"),
            (10, 0, 40.0, true, "weak"),
            (40, 2, 40.0, true, "ok"),
            // Seen on a healthy simulated chip: 6.9 % but well within chance.
            (54, 4, 40.9, true, "ok"),
            // The simulated faulty chip of the same run.
            (21, 30, 41.3, true, "weak"),
            // Many nonces make even a modest excess conclusive.
            (900, 100, 900.0, true, "weak"),
        ];
        for (n, hw, exp, ans, want) in cases {
            assert_eq!(
                classify_chip(n, hw, exp, ans).0,
                want,
                "{n} {hw} {exp} {ans}"
            );
        }
        assert_eq!(worst(["pass", "warn", "pass"]), "warn");
        assert_eq!(worst(["warn", "fail"]), "fail");
        assert_eq!(worst([]), "pass");
    }
}
