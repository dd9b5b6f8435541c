//! From the chains' and the board's snapshots to the API's `Telemetry`, once per second and on
//! every state change. Readers get a copy of the last one; nothing they do reaches hardware.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use svcos_common::units::j_per_th;

use svcos_proto::hwagent::v1::{
    ChainState as ApiChainState, ChainTelemetry, ChipTelemetry, FanTelemetry, Hashrate,
    MiningState, PsuTelemetry, Telemetry,
};
use tokio::sync::watch;

use crate::board::BoardSpec;
use crate::chain::{ChainSnapshot, ChainStatus};
use crate::control::{BoardSnapshot, condition_state};
use crate::stratum::{JobStatus, ShareCounters};
use crate::thermal::Condition;

/// Everything telemetry is built from.
#[derive(Clone)]
pub struct Sources {
    /// Board description.
    pub spec: Arc<BoardSpec>,
    /// Per chain.
    pub chains: Vec<watch::Receiver<Arc<ChainSnapshot>>>,
    /// Board thread.
    pub board: watch::Receiver<Arc<BoardSnapshot>>,
    /// Job stream status.
    pub jobs: watch::Receiver<JobStatus>,
    /// Share counters.
    pub shares: Arc<ShareCounters>,
    /// Unix ms mining started (survives re-attach).
    pub mining_started_ms: i64,
}

fn hashrate(rates: crate::accounting::Rates, expected_hs: f64) -> Hashrate {
    Hashrate {
        ghs_5s: rates.hs_5s / 1e9,
        ghs_1m: rates.hs_1m / 1e9,
        ghs_15m: rates.hs_15m / 1e9,
        ghs_expected: expected_hs / 1e9,
    }
}

fn api_chain_state(s: &ChainStatus) -> ApiChainState {
    match s {
        ChainStatus::Initializing => ApiChainState::Initializing,
        ChainStatus::Mining => ApiChainState::Mining,
        ChainStatus::Idle => ApiChainState::Idle,
        ChainStatus::Disabled => ApiChainState::Disabled,
        ChainStatus::Missing => ApiChainState::Missing,
        ChainStatus::Fault(_) => ApiChainState::Fault,
    }
}

/// The overall state and its reason.
pub fn overall_state(
    board: &BoardSnapshot,
    chains: &[Arc<ChainSnapshot>],
    jobs: &JobStatus,
) -> (MiningState, String) {
    if board.condition != Condition::Normal {
        return condition_state(&board.condition);
    }
    // With the board healthy, an idle chain is one the board thread is about to power up.
    if chains
        .iter()
        .any(|c| matches!(c.status, ChainStatus::Initializing | ChainStatus::Idle))
    {
        return (MiningState::Bringup, "bringing up chains".into());
    }
    let mining: Vec<_> = chains
        .iter()
        .filter(|c| c.status == ChainStatus::Mining)
        .collect();
    if mining.is_empty() {
        let why: Vec<String> = chains
            .iter()
            .map(|c| match &c.status {
                ChainStatus::Fault(r) => format!("chain {}: {r}", c.chain_id),
                s => format!("chain {}: {s:?}", c.chain_id).to_lowercase(),
            })
            .collect();
        return (
            MiningState::Fault,
            format!("no chain is mining ({})", why.join("; ")),
        );
    }
    if jobs.job_received_at_ms == 0 {
        return (
            MiningState::NoWork,
            if jobs.connected {
                "waiting for the first job".into()
            } else {
                "stratum-agent unreachable".into()
            },
        );
    }
    // Mining, perhaps degraded: say what is missing.
    let mut notes = Vec::new();
    for c in chains {
        let missing = c.missing_chips();
        if !missing.is_empty() {
            notes.push(format!(
                "chain {}: {} of {} chips hashing",
                c.chain_id,
                c.chips_expected as usize - missing.len(),
                c.chips_expected
            ));
        }
        if c.status != ChainStatus::Mining {
            notes.push(format!("chain {} {:?}", c.chain_id, c.status).to_lowercase());
        }
    }
    if !jobs.connected {
        notes.push("stratum-agent unreachable, hashing the last job".into());
    }
    (MiningState::Mining, notes.join("; "))
}

/// Build one telemetry message (with chips).
pub fn build(src: &Sources, seq: u64) -> Telemetry {
    let chains: Vec<Arc<ChainSnapshot>> = src.chains.iter().map(|c| c.borrow().clone()).collect();
    let board = src.board.borrow().clone();
    let jobs = src.jobs.borrow().clone();
    let (state, reason) = overall_state(&board, &chains, &jobs);
    let total_expected: f64 = chains.iter().map(|c| c.expected_hs).sum();
    let psu_power = board.psu.power_watt;
    let mut chain_msgs = Vec::with_capacity(chains.len());
    let mut sum = crate::accounting::Rates::default();
    for c in &chains {
        sum.hs_5s += c.rates.hs_5s;
        sum.hs_1m += c.rates.hs_1m;
        sum.hs_15m += c.rates.hs_15m;
        let (board_c, chip_c) = board.chain_temps(c.chain_id);
        let share = if total_expected > 0.0 {
            c.expected_hs / total_expected
        } else {
            0.0
        };
        chain_msgs.push(ChainTelemetry {
            chain_id: c.chain_id,
            state: api_chain_state(&c.status) as i32,
            chips_expected: c.chips_expected,
            chips_detected: c.chips.len() as u32,
            frequency_mhz: c.frequency_mhz,
            voltage_mv: board.psu.setpoint_v * 1000.0,
            hashrate: Some(hashrate(c.rates, c.expected_hs)),
            nonces: c.nonces,
            hw_errors: c.hw_errors,
            temp_board_c: board_c.unwrap_or(0.0),
            temp_chip_c: chip_c.unwrap_or(0.0),
            power_watt: psu_power * share,
            efficiency_j_per_th: j_per_th(psu_power * share, c.rates.hs_1m / 1e9).unwrap_or(0.0),
            chips: c
                .chips
                .iter()
                .enumerate()
                .map(|(i, chip)| ChipTelemetry {
                    index: i as u32,
                    address: u32::from(chip.address),
                    frequency_mhz: chip.frequency_mhz,
                    ghs_1m: chip.hs_1m / 1e9,
                    nonces: chip.nonces,
                    hw_errors: chip.hw_errors,
                    // Only the hottest chip of a chain has a sensor.
                    temp_c: chip_c.unwrap_or(0.0),
                    alive: chip.alive,
                })
                .collect(),
            baud: c.baud,
        });
    }
    let now_ms = svcos_common::time::unix_ms();
    Telemetry {
        seq,
        timestamp_ms: now_ms,
        state: state as i32,
        hashrate: Some(hashrate(sum, total_expected)),
        chains: chain_msgs,
        fans: board
            .fans
            .iter()
            .enumerate()
            .map(|(i, f)| FanTelemetry {
                fan_id: i as u32,
                rpm: f.rpm,
                pwm_percent: f.pwm_percent,
                stalled: f.stalled,
            })
            .collect(),
        psu: Some(psu_telemetry(&board)),
        power_watt: psu_power,
        nonces: chains.iter().map(|c| c.nonces).sum(),
        hw_errors: chains.iter().map(|c| c.hw_errors).sum(),
        duplicate_nonces: chains.iter().map(|c| c.duplicates).sum(),
        stale_nonces: chains.iter().map(|c| c.stale).sum(),
        shares_sent: src.shares.sent.load(Ordering::Relaxed),
        shares_queued: src.shares.queued.load(Ordering::Relaxed),
        mining_uptime_s: ((now_ms - src.mining_started_ms).max(0) / 1000) as u64,
        temp_max_c: board.temp_max_c.unwrap_or(0.0),
        temp_target_c: board.target_c,
        fan_mode: board.fan_mode as i32,
        led_mode: board.led_mode as i32,
        power_target_watt: board.power_target_watt,
        model: src.spec.model.clone(),
        state_reason: reason,
        job_received_at_ms: jobs.job_received_at_ms,
        power_raw_watt: board.psu_raw_power_watt,
        power_target_requested_watt: board.power_target_requested_watt,
        power_limit_watt: board.power_limit.map_or(0.0, |l| l.watt),
        power_limit_source: board.power_limit.map_or("", |l| l.source).into(),
        frequency_scale: board.frequency_scale,
        power_backstop_share: board.power_backstop_share,
        thermal_posture: board.posture as i32,
        efficiency_j_per_th: j_per_th(psu_power, sum.hs_1m / 1e9).unwrap_or(0.0),
    }
}

/// The PSU part of telemetry and inventory.
pub fn psu_telemetry(board: &BoardSnapshot) -> PsuTelemetry {
    PsuTelemetry {
        model: board.psu_model.clone(),
        enabled: board.psu.enabled,
        voltage_v: board.psu.voltage_v,
        voltage_setpoint_v: board.psu.setpoint_v,
        power_watt: board.psu.power_watt,
        current_a: board.psu.current_a,
        fault: board.psu.fault.clone(),
    }
}

/// A copy without per-chip detail (what most readers ask for).
pub fn without_chips(t: &Telemetry) -> Telemetry {
    let mut t = t.clone();
    for c in &mut t.chains {
        c.chips.clear();
    }
    t
}
