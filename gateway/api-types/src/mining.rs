//! Mining-loop views built from telemetry and the pool snapshot: boot phase, work posture, ramp,
//! local rejects, sensor outliers, the network/PSU/ASIC-communication troubleshooters,
//! efficiency, the tuner's targets and telemetry, and the fan controller's state.

use serde::Serialize;
use svcos_proto::hwagent::v1::{ChainState, GetInventoryResponse, MiningState, Telemetry};
use svcos_proto::stratum::v1::{GetPoolsResponse, PoolState, PoolStatus};
use svcos_proto::tuner::v1::GetStateResponse;

use crate::{enum_word, round};

fn mining_word(t: &Telemetry) -> String {
    enum_word(t.state().as_str_name(), "MINING_STATE_")
}

fn pool_word(p: &PoolStatus) -> String {
    enum_word(p.state().as_str_name(), "POOL_STATE_")
}

/// `GET /api/boot/phase` (`svcos.api.boot.phase.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BootPhaseBody {
    /// `svcos.api.boot.phase.v1`.
    pub schema: &'static str,
    /// starting_services, chain_bringup, waiting_for_pool_client, waiting_for_work, mining,
    /// sleeping, overheat_pause, fault.
    pub phase: &'static str,
    /// The gateway receives hw-agent's telemetry.
    pub hw_agent_up: bool,
    /// The gateway receives stratum-agent's pools.
    pub stratum_agent_up: bool,
    /// Why hw-agent is in its state; `null` while it is down.
    pub state_reason: Option<String>,
    /// Seconds of mining; `null` while hw-agent is down.
    pub mining_uptime_s: Option<u64>,
}

impl BootPhaseBody {
    /// The phase from what is known: peers up, mining state.
    pub fn new(t: Option<&Telemetry>, stratum_up: bool) -> Self {
        BootPhaseBody {
            schema: "svcos.api.boot.phase.v1",
            phase: phase(t, stratum_up),
            hw_agent_up: t.is_some(),
            stratum_agent_up: stratum_up,
            state_reason: t.map(|t| t.state_reason.clone()),
            mining_uptime_s: t.map(|t| t.mining_uptime_s),
        }
    }
}

/// The boot phase from what is known: peers up, mining state.
pub fn phase(t: Option<&Telemetry>, stratum_up: bool) -> &'static str {
    match t {
        None => "starting_services",
        Some(t) => match t.state() {
            MiningState::Unspecified | MiningState::Bringup => "chain_bringup",
            MiningState::NoWork if !stratum_up => "waiting_for_pool_client",
            MiningState::NoWork => "waiting_for_work",
            MiningState::Mining => "mining",
            MiningState::Sleeping => "sleeping",
            MiningState::Overheat => "overheat_pause",
            MiningState::Fault => "fault",
        },
    }
}

/// The pool receiving shares.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ActivePool {
    /// Position in the configured list.
    pub index: u32,
    /// Pool URL.
    pub url: String,
    /// The pool's state.
    pub state: String,
    /// Current share difficulty.
    pub difficulty: f64,
}

/// `GET /api/mining/work/posture` (`svcos.api.mining.work_posture.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkPostureBody {
    /// `svcos.api.mining.work_posture.v1`.
    pub schema: &'static str,
    /// hw-agent received a job.
    pub has_work: bool,
    /// Age of the current job, ms; `null` without work.
    pub job_age_ms: Option<i64>,
    /// hw-agent's mining state.
    pub mining_state: String,
    /// The gateway receives stratum-agent's pools.
    pub stratum_agent_up: bool,
    /// `null` when no pool is active or stratum-agent is down.
    pub active_pool: Option<ActivePool>,
    /// The donation pool has the work; `null` while stratum-agent is down.
    pub donation_active: Option<bool>,
    /// Shares waiting for the pool client.
    pub shares_queued: u32,
}

impl WorkPostureBody {
    /// The posture from telemetry and, if stratum-agent is up, its pools.
    pub fn new(t: &Telemetry, p: Option<&GetPoolsResponse>) -> Self {
        let active = p.and_then(|p| p.pools.iter().find(|x| x.active));
        let has_work = t.job_received_at_ms > 0;
        WorkPostureBody {
            schema: "svcos.api.mining.work_posture.v1",
            has_work,
            job_age_ms: has_work.then(|| (t.timestamp_ms - t.job_received_at_ms).max(0)),
            mining_state: mining_word(t),
            stratum_agent_up: p.is_some(),
            active_pool: active.map(|a| ActivePool {
                index: a.index,
                url: a.url.clone(),
                state: pool_word(a),
                difficulty: a.difficulty,
            }),
            donation_active: p.map(|p| p.donation_active),
            shares_queued: t.shares_queued,
        }
    }
}

/// One chain's ramp.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RampChain {
    /// Chain number.
    pub chain_id: u32,
    /// Current frequency, MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Configured frequency, MHz.
    pub target_mhz: f64,
    /// Current over target (1 decimal, at most 100).
    pub progress_percent: f64,
}

/// `GET /api/mining/ramp` (`svcos.api.mining.ramp.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RampBody {
    /// `svcos.api.mining.ramp.v1`.
    pub schema: &'static str,
    /// Configured frequency, MHz.
    pub target_mhz: f64,
    /// Every chain is within 0.5 MHz of the target.
    pub complete: bool,
    /// Every chain.
    pub chains: Vec<RampChain>,
}

impl RampBody {
    /// The ramp of every chain toward `target` MHz.
    pub fn new(t: &Telemetry, target: f64) -> Self {
        let chains = t
            .chains
            .iter()
            .map(|c| {
                let progress = if target > 0.0 {
                    (c.frequency_mhz / target * 100.0).min(100.0)
                } else {
                    0.0
                };
                RampChain {
                    chain_id: c.chain_id,
                    frequency_mhz: round(c.frequency_mhz, 2),
                    target_mhz: target,
                    progress_percent: round(progress, 1),
                }
            })
            .collect();
        RampBody {
            schema: "svcos.api.mining.ramp.v1",
            target_mhz: target,
            complete: !t.chains.is_empty()
                && t.chains.iter().all(|c| c.frequency_mhz >= target - 0.5),
            chains,
        }
    }
}

/// One chain's counters.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainRejects {
    /// Chain number.
    pub chain_id: u32,
    /// Hardware errors.
    pub hw_errors: u64,
    /// Nonces that verified.
    pub nonces: u64,
}

/// `GET /api/diagnostics/shares/local_rejects` (`svcos.api.diagnostics.local_rejects.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LocalRejectsBody {
    /// `svcos.api.diagnostics.local_rejects.v1`.
    pub schema: &'static str,
    /// Nonces that failed verification.
    pub hw_errors: u64,
    /// Nonces seen twice.
    pub duplicate_nonces: u64,
    /// Nonces for a job already replaced.
    pub stale_nonces: u64,
    /// hw_errors over all nonces (6 decimals).
    pub hw_error_rate: f64,
    /// Every chain.
    pub chains: Vec<ChainRejects>,
}

impl From<&Telemetry> for LocalRejectsBody {
    fn from(t: &Telemetry) -> Self {
        let total = t.nonces + t.hw_errors;
        LocalRejectsBody {
            schema: "svcos.api.diagnostics.local_rejects.v1",
            hw_errors: t.hw_errors,
            duplicate_nonces: t.duplicate_nonces,
            stale_nonces: t.stale_nonces,
            hw_error_rate: if total > 0 {
                round(t.hw_errors as f64 / total as f64, 6)
            } else {
                0.0
            },
            chains: t
                .chains
                .iter()
                .map(|c| ChainRejects {
                    chain_id: c.chain_id,
                    hw_errors: c.hw_errors,
                    nonces: c.nonces,
                })
                .collect(),
        }
    }
}

/// Chains whose chip temperature is more than `limit_c` from the median.
pub fn outliers(temps: &[(u32, f64)], limit_c: f64) -> (f64, Vec<u32>) {
    if temps.is_empty() {
        return (0.0, Vec::new());
    }
    let mut sorted: Vec<f64> = temps.iter().map(|t| t.1).collect();
    sorted.sort_by(f64::total_cmp);
    let median = if sorted.len() % 2 == 1 {
        sorted[sorted.len() / 2]
    } else {
        (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
    };
    let out = temps
        .iter()
        .filter(|(_, t)| (t - median).abs() > limit_c)
        .map(|(id, _)| *id)
        .collect();
    (median, out)
}

/// One chain's chip temperature.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainTemp {
    /// Chain number.
    pub chain_id: u32,
    /// Hottest chip, °C (1 decimal).
    pub temp_chip_c: f64,
}

/// `GET /api/diagnostics/sensor_outlier` (`svcos.api.diagnostics.sensor_outlier.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SensorOutlierBody {
    /// `svcos.api.diagnostics.sensor_outlier.v1`.
    pub schema: &'static str,
    /// The rule applied.
    pub rule: &'static str,
    /// Median chip temperature, °C (1 decimal).
    pub median_c: f64,
    /// Chains outside the rule.
    pub outlier_chains: Vec<u32>,
    /// Every chain.
    pub chains: Vec<ChainTemp>,
}

impl From<&Telemetry> for SensorOutlierBody {
    fn from(t: &Telemetry) -> Self {
        let temps: Vec<(u32, f64)> = t
            .chains
            .iter()
            .map(|c| (c.chain_id, c.temp_chip_c))
            .collect();
        let (median, out) = outliers(&temps, 10.0);
        SensorOutlierBody {
            schema: "svcos.api.diagnostics.sensor_outlier.v1",
            rule: "a chain whose chip temperature is more than 10 C from the median of all chains",
            median_c: round(median, 1),
            outlier_chains: out,
            chains: temps
                .iter()
                .map(|(id, c)| ChainTemp {
                    chain_id: *id,
                    temp_chip_c: round(*c, 1),
                })
                .collect(),
        }
    }
}

/// One pool's connectivity verdict.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolVerdict {
    /// Position in the configured list.
    pub index: u32,
    /// Pool URL.
    pub url: String,
    /// The pool's state.
    pub state: String,
    /// ok, or what to check.
    pub verdict: &'static str,
    /// The last error stratum-agent saw.
    pub last_error: String,
    /// Failed connection attempts.
    pub get_failures: u64,
    /// Failures the pool reported.
    pub remote_failures: u64,
    /// Latency of the last share, ms.
    pub last_share_latency_ms: f64,
}

/// `GET /api/diagnostics/troubleshoot/network` (`svcos.api.troubleshoot.network.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NetworkBody {
    /// `svcos.api.troubleshoot.network.v1`.
    pub schema: &'static str,
    /// Some pool is alive.
    pub ok: bool,
    /// Every pool.
    pub pools: Vec<PoolVerdict>,
}

impl From<&GetPoolsResponse> for NetworkBody {
    fn from(p: &GetPoolsResponse) -> Self {
        let pools = p
            .pools
            .iter()
            .map(|x| PoolVerdict {
                index: x.index,
                url: x.url.clone(),
                state: pool_word(x),
                verdict: match x.state() {
                    PoolState::Alive => "ok",
                    PoolState::Disabled => "disabled",
                    PoolState::AuthFailed => "check worker name and password",
                    PoolState::Silent => "connected but no work: check the pool",
                    PoolState::Dead => "unreachable: check DNS, routing and the URL",
                    _ => "connecting",
                },
                last_error: x.last_error.clone(),
                get_failures: x.get_failures,
                remote_failures: x.remote_failures,
                last_share_latency_ms: x.last_share_latency_ms,
            })
            .collect();
        NetworkBody {
            schema: "svcos.api.troubleshoot.network.v1",
            ok: p.pools.iter().any(|x| x.state() == PoolState::Alive),
            pools,
        }
    }
}

/// The PSU as the troubleshooter read it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuReading {
    /// Model (empty when none reports).
    pub model: String,
    /// Output on.
    pub enabled: bool,
    /// Output, V (3 decimals).
    pub voltage_v: f64,
    /// Setpoint, V (3 decimals).
    pub voltage_setpoint_v: f64,
    /// Output power, W (1 decimal).
    pub power_watt: f64,
    /// Output current, A (2 decimals).
    pub current_a: f64,
}

/// `GET /api/diagnostics/troubleshoot/psu` (`svcos.api.troubleshoot.psu.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuTroubleshootBody {
    /// `svcos.api.troubleshoot.psu.v1`.
    pub schema: &'static str,
    /// No findings.
    pub ok: bool,
    /// What looks wrong.
    pub findings: Vec<String>,
    /// The reading judged.
    pub psu: PsuReading,
}

impl From<&Telemetry> for PsuTroubleshootBody {
    fn from(t: &Telemetry) -> Self {
        let psu = t.psu.clone().unwrap_or_default();
        let deviation = if psu.voltage_setpoint_v > 0.0 {
            psu.voltage_v - psu.voltage_setpoint_v
        } else {
            0.0
        };
        let mut findings = Vec::new();
        if !psu.fault.is_empty() {
            findings.push(format!("PSU reports: {}", psu.fault));
        }
        if deviation.abs() > 0.3 {
            findings.push(format!(
                "output {:.2} V is {:+.2} V from the setpoint",
                psu.voltage_v, deviation
            ));
        }
        if !psu.enabled && t.state() == MiningState::Mining {
            findings.push("mining while the PSU output reads disabled".into());
        }
        PsuTroubleshootBody {
            schema: "svcos.api.troubleshoot.psu.v1",
            ok: findings.is_empty(),
            findings,
            psu: PsuReading {
                voltage_v: round(psu.voltage_v, 3),
                voltage_setpoint_v: round(psu.voltage_setpoint_v, 3),
                power_watt: round(psu.power_watt, 1),
                current_a: round(psu.current_a, 2),
                enabled: psu.enabled,
                model: psu.model,
            },
        }
    }
}

/// One chain's communication verdict.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainComm {
    /// Chain number.
    pub chain_id: u32,
    /// Chips that answered at bring-up.
    pub chips_detected: u32,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Indexes of chips that did not answer; `null` when the inventory is unavailable.
    pub missing_chips: Option<Vec<u32>>,
    /// hw_errors over all nonces (6 decimals).
    pub hw_error_rate: f64,
    /// UART baud.
    pub baud: u32,
    /// ok, or what to check.
    pub verdict: &'static str,
}

/// `GET /api/diagnostics/troubleshoot/asic-comm` (`svcos.api.troubleshoot.asic_comm.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AsicCommBody {
    /// `svcos.api.troubleshoot.asic_comm.v1`.
    pub schema: &'static str,
    /// Every chain's verdict is ok.
    pub ok: bool,
    /// Every chain.
    pub chains: Vec<ChainComm>,
}

impl AsicCommBody {
    /// The verdicts from telemetry and, if hw-agent answered, its inventory.
    pub fn new(t: &Telemetry, inventory: Option<&GetInventoryResponse>) -> Self {
        let chains: Vec<ChainComm> = t
            .chains
            .iter()
            .map(|c| {
                let missing = inventory
                    .and_then(|i| i.chains.iter().find(|x| x.chain_id == c.chain_id))
                    .map(|x| x.missing_chips.clone());
                let total = c.nonces + c.hw_errors;
                let rate = if total > 0 {
                    c.hw_errors as f64 / total as f64
                } else {
                    0.0
                };
                let verdict = if matches!(c.state(), ChainState::Missing) {
                    "chain not detected: check the ribbon cable and hashboard power"
                } else if c.chips_detected < c.chips_expected {
                    "chips missing: the chain breaks after the last detected chip"
                } else if rate > 0.05 {
                    "high error rate: lower frequency or raise voltage"
                } else {
                    "ok"
                };
                ChainComm {
                    chain_id: c.chain_id,
                    chips_detected: c.chips_detected,
                    chips_expected: c.chips_expected,
                    missing_chips: missing,
                    hw_error_rate: round(rate, 6),
                    baud: c.baud,
                    verdict,
                }
            })
            .collect();
        AsicCommBody {
            schema: "svcos.api.troubleshoot.asic_comm.v1",
            ok: chains.iter().all(|c| c.verdict == "ok"),
            chains,
        }
    }
}

/// hw-agent's J/TH (0 = unknown) as the API shows it: 2 decimals, `null` when unknown.
pub(crate) fn j_per_th(efficiency_j_per_th: f64) -> Option<f64> {
    (efficiency_j_per_th > 0.0).then(|| round(efficiency_j_per_th, 2))
}

/// Efficiency of the unit or one chain.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainEfficiency {
    /// Chain number.
    pub chain_id: u32,
    /// J/TH (2 decimals); `null` without hashrate or power.
    pub efficiency_j_per_th: Option<f64>,
    /// Power, W (1 decimal).
    pub power_watt: f64,
    /// Hashrate over a minute, GH/s (3 decimals).
    pub hashrate_ghs_1m: f64,
}

/// `GET /api/autotuner/efficiency`, `/api/perf/efficiency` (`svcos.api.efficiency.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EfficiencyBody {
    /// `svcos.api.efficiency.v1`.
    pub schema: &'static str,
    /// J/TH (2 decimals); `null` without hashrate or power.
    pub efficiency_j_per_th: Option<f64>,
    /// Power, W (1 decimal).
    pub power_watt: f64,
    /// Hashrate over a minute, GH/s (3 decimals).
    pub hashrate_ghs_1m: f64,
    /// Every chain.
    pub chains: Vec<ChainEfficiency>,
}

impl From<&Telemetry> for EfficiencyBody {
    fn from(t: &Telemetry) -> Self {
        let ghs = t.hashrate.map_or(0.0, |h| h.ghs_1m);
        EfficiencyBody {
            schema: "svcos.api.efficiency.v1",
            efficiency_j_per_th: j_per_th(t.efficiency_j_per_th),
            power_watt: round(t.power_watt, 1),
            hashrate_ghs_1m: round(ghs, 3),
            chains: t
                .chains
                .iter()
                .map(|c| {
                    let ghs = c.hashrate.map_or(0.0, |h| h.ghs_1m);
                    ChainEfficiency {
                        chain_id: c.chain_id,
                        efficiency_j_per_th: j_per_th(c.efficiency_j_per_th),
                        power_watt: round(c.power_watt, 1),
                        hashrate_ghs_1m: round(ghs, 3),
                    }
                })
                .collect(),
        }
    }
}

/// `GET /api/autotuner/target` (`svcos.api.autotuner.target.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunerTargetBody {
    /// `svcos.api.autotuner.target.v1`.
    pub schema: &'static str,
    /// The tuner's power target, W.
    pub power_target_watt: f64,
    /// The tuner's hashrate target, GH/s.
    pub hashrate_target_ghs: f64,
    /// `[hardware].power_target_watt`.
    pub configured_power_target_watt: f64,
}

impl TunerTargetBody {
    /// The tuner's targets next to the configured one.
    pub fn new(r: &GetStateResponse, configured_power_target_watt: f64) -> Self {
        TunerTargetBody {
            schema: "svcos.api.autotuner.target.v1",
            power_target_watt: r.power_target_watt,
            hashrate_target_ghs: r.hashrate_target_ghs,
            configured_power_target_watt,
        }
    }
}

/// One chain as the tuner sees it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunerChain {
    /// Chain number.
    pub chain_id: u32,
    /// MHz (2 decimals).
    pub frequency_mhz: f64,
    /// mV (1 decimal).
    pub voltage_mv: f64,
    /// GH/s over a minute (3 decimals).
    pub hashrate_ghs_1m: f64,
    /// GH/s the chips should do (3 decimals).
    pub hashrate_ghs_expected: f64,
    /// W (1 decimal).
    pub power_watt: f64,
    /// Hottest chip, °C (1 decimal).
    pub temp_chip_c: f64,
}

/// `GET /api/autotuner/telemetry` (`svcos.api.autotuner.telemetry.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunerTelemetryBody {
    /// `svcos.api.autotuner.telemetry.v1`.
    pub schema: &'static str,
    /// Telemetry timestamp, Unix ms.
    pub at_ms: i64,
    /// Every chain.
    pub chains: Vec<TunerChain>,
}

impl From<&Telemetry> for TunerTelemetryBody {
    fn from(t: &Telemetry) -> Self {
        TunerTelemetryBody {
            schema: "svcos.api.autotuner.telemetry.v1",
            at_ms: t.timestamp_ms,
            chains: t
                .chains
                .iter()
                .map(|c| TunerChain {
                    chain_id: c.chain_id,
                    frequency_mhz: round(c.frequency_mhz, 2),
                    voltage_mv: round(c.voltage_mv, 1),
                    hashrate_ghs_1m: round(c.hashrate.map_or(0.0, |h| h.ghs_1m), 3),
                    hashrate_ghs_expected: round(c.hashrate.map_or(0.0, |h| h.ghs_expected), 3),
                    power_watt: round(c.power_watt, 1),
                    temp_chip_c: round(c.temp_chip_c, 1),
                })
                .collect(),
        }
    }
}

/// `GET /api/debug/pid-state` (`svcos.api.debug.pid_state.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PidStateBody {
    /// `svcos.api.debug.pid_state.v1`.
    pub schema: &'static str,
    /// auto or manual.
    pub fan_mode: String,
    /// The controller's input: hottest sensor, °C (1 decimal).
    pub input_temp_max_c: f64,
    /// The setpoint, °C (1 decimal).
    pub setpoint_c: f64,
    /// Input minus setpoint, °C (1 decimal).
    pub error_c: f64,
    /// Every fan's duty.
    pub output_pwm_percent: Vec<u32>,
    /// What is not shown.
    pub note: &'static str,
}

impl From<&Telemetry> for PidStateBody {
    fn from(t: &Telemetry) -> Self {
        PidStateBody {
            schema: "svcos.api.debug.pid_state.v1",
            fan_mode: enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"),
            input_temp_max_c: round(t.temp_max_c, 1),
            setpoint_c: round(t.temp_target_c, 1),
            error_c: round(t.temp_max_c - t.temp_target_c, 1),
            output_pwm_percent: t.fans.iter().map(|f| f.pwm_percent).collect(),
            note: "controller gains and integral state live in hw-agent and are not exported",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outlier_rule() {
        let (median, out) = outliers(&[(0, 70.0), (1, 71.0), (2, 90.0)], 10.0);
        assert_eq!(median, 71.0);
        assert_eq!(out, vec![2]);
        assert_eq!(outliers(&[], 10.0).1, Vec::<u32>::new());
    }

    #[test]
    fn phases() {
        assert_eq!(phase(None, true), "starting_services");
        let mut t = Telemetry {
            state: MiningState::NoWork as i32,
            ..Default::default()
        };
        assert_eq!(phase(Some(&t), false), "waiting_for_pool_client");
        t.state = MiningState::Mining as i32;
        assert_eq!(phase(Some(&t), true), "mining");
    }
}

/// One event of the boot timeline.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum BootEvent {
    /// A supervised service (re)started.
    ServiceStarted {
        /// The service.
        name: String,
        /// When, ms since the epoch.
        at_ms: i64,
        /// Restarts (automatic and requested), kept across supervisor restarts.
        restarts: u32,
        /// Its state now.
        state: String,
    },
    /// Mining started (the chips got their first work).
    MiningStarted {
        /// When, ms since the epoch.
        at_ms: i64,
    },
}

impl BootEvent {
    /// When it happened, ms since the epoch.
    pub fn at_ms(&self) -> i64 {
        match self {
            BootEvent::ServiceStarted { at_ms, .. } | BootEvent::MiningStarted { at_ms } => *at_ms,
        }
    }
}

/// `GET /api/boot/timeline`, `/api/system/boot_timeline` (`svcos.api.boot.timeline.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BootTimelineBody {
    /// `svcos.api.boot.timeline.v1`.
    pub schema: &'static str,
    /// Oldest first.
    pub events: Vec<BootEvent>,
}

/// `GET /api/mining/handoff/state` (`svcos.api.mining.handoff.v1`); counters are `null`
/// while their source is down.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HandoffBody {
    /// `svcos.api.mining.handoff.v1`.
    pub schema: &'static str,
    /// The gateway receives hw-agent's telemetry.
    pub hw_agent_up: bool,
    /// The gateway receives stratum-agent's pool stream.
    pub stratum_agent_up: bool,
    /// Shares hw-agent handed to stratum-agent.
    pub shares_sent: Option<u64>,
    /// Shares hw-agent holds until stratum-agent is back.
    pub shares_queued: Option<u32>,
    /// Accepted by the pools.
    pub pool_accepted: Option<u64>,
    /// Rejected by the pools.
    pub pool_rejected: Option<u64>,
    /// Stale at the pools.
    pub pool_stale: Option<u64>,
    /// How the handoff behaves.
    pub note: &'static str,
}

impl HandoffBody {
    /// From the snapshots (either may be missing).
    pub fn new(t: Option<&Telemetry>, p: Option<&GetPoolsResponse>) -> Self {
        HandoffBody {
            schema: "svcos.api.mining.handoff.v1",
            hw_agent_up: t.is_some(),
            stratum_agent_up: p.is_some(),
            shares_sent: t.map(|t| t.shares_sent),
            shares_queued: t.map(|t| t.shares_queued),
            pool_accepted: p.map(|p| p.accepted),
            pool_rejected: p.map(|p| p.rejected),
            pool_stale: p.map(|p| p.stale),
            note: "hw-agent queues shares while stratum-agent is unreachable and hands them over when it is back",
        }
    }
}

/// One stage of the mining pipeline.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PipelineStage {
    /// pool, job, chips, nonces or shares.
    pub stage: &'static str,
    /// The service that runs it.
    pub owner: &'static str,
    /// What it does.
    pub does: &'static str,
}

/// `GET /api/mining/pipeline/manifest` (`svcos.api.mining.pipeline_manifest.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PipelineManifestBody {
    /// `svcos.api.mining.pipeline_manifest.v1`.
    pub schema: &'static str,
    /// In pipeline order.
    pub stages: Vec<PipelineStage>,
}

/// A configured range with its value in force.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FrequencyRange {
    /// Lowest allowed, MHz.
    pub min: f64,
    /// Highest allowed, MHz.
    pub max: f64,
    /// The configured target, MHz.
    pub target: f64,
}

/// The voltage range with the configured value.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VoltageRange {
    /// Lowest allowed, mV.
    pub min: f64,
    /// Highest allowed, mV.
    pub max: f64,
    /// Configured, mV.
    pub current: f64,
}

/// The power target's range.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PowerRange {
    /// Lowest allowed, W.
    pub min: f64,
    /// Configured, W.
    pub current: f64,
    /// What 0 means.
    pub zero_means: &'static str,
}

/// The configured temperatures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TemperatureLimits {
    /// Controller target, °C.
    pub target: f64,
    /// Cut-back limit, °C.
    pub hot: f64,
    /// Cut-off limit, °C.
    pub dangerous: f64,
}

/// The fan duty range.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FanRange {
    /// Lowest duty, percent.
    pub min: u32,
    /// Highest duty, percent.
    pub max: u32,
}

/// `GET /api/tuning/constraints` (`svcos.api.tuning.constraints.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TuningConstraintsBody {
    /// `svcos.api.tuning.constraints.v1`.
    pub schema: &'static str,
    /// Where the ranges come from.
    pub source: &'static str,
    /// Chip frequency.
    pub frequency_mhz: FrequencyRange,
    /// Supply voltage.
    pub voltage_mv: VoltageRange,
    /// Power target.
    pub power_target_watt: PowerRange,
    /// Temperatures.
    pub temperature_c: TemperatureLimits,
    /// Fan duty.
    pub fan_percent: FanRange,
}

/// What one stage of the pipeline snapshot shows; every member `null` while the service that
/// owns it is unreachable.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum StageDetail {
    /// `pool`: the active pool.
    Pool {
        /// Its URL; `null` without an active pool.
        active_url: Option<String>,
    },
    /// `job`: the last job hw-agent received.
    Job {
        /// When, Unix ms (0: none yet).
        job_received_at_ms: Option<i64>,
    },
    /// `chips`: chains hashing.
    Chips {
        /// Chains in the mining state.
        chains_mining: Option<usize>,
    },
    /// `nonces`: nonces found.
    Nonces {
        /// Verified nonces.
        nonces: Option<u64>,
        /// Nonces that failed verification.
        hw_errors: Option<u64>,
    },
    /// `shares`: shares sent and the pools' verdicts.
    Shares {
        /// Shares hw-agent sent.
        sent: Option<u64>,
        /// Accepted by the pools.
        accepted: Option<u64>,
        /// Rejected by the pools.
        rejected: Option<u64>,
    },
}

/// One stage's live state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StageState {
    /// pool, job, chips, nonces, shares.
    pub stage: &'static str,
    /// Whether the stage works; `null` while the owning service is unreachable.
    pub ok: Option<bool>,
    /// What it shows.
    pub detail: StageDetail,
}

/// `GET /api/mining/pipeline/snapshot` (`svcos.api.mining.pipeline_snapshot.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PipelineSnapshotBody {
    /// `svcos.api.mining.pipeline_snapshot.v1`.
    pub schema: &'static str,
    /// The telemetry snapshot's time, Unix ms; `null` while hw-agent is down.
    pub at_ms: Option<i64>,
    /// The stages in pipeline order.
    pub stages: Vec<StageState>,
}

impl PipelineSnapshotBody {
    /// From the snapshots (either may be missing).
    pub fn new(t: Option<&Telemetry>, p: Option<&GetPoolsResponse>) -> Self {
        let active = p.and_then(|p| p.pools.iter().find(|x| x.active));
        let mining = |t: &Telemetry| {
            t.chains
                .iter()
                .filter(|c| c.state() == ChainState::Mining)
                .count()
        };
        let stages = vec![
            StageState {
                stage: "pool",
                ok: p.map(|_| active.is_some_and(|a| a.state() == PoolState::Alive)),
                detail: StageDetail::Pool {
                    active_url: active.map(|a| a.url.clone()),
                },
            },
            StageState {
                stage: "job",
                ok: t.map(|t| t.job_received_at_ms > 0),
                detail: StageDetail::Job {
                    job_received_at_ms: t.map(|t| t.job_received_at_ms),
                },
            },
            StageState {
                stage: "chips",
                ok: t.map(|t| mining(t) > 0),
                detail: StageDetail::Chips {
                    chains_mining: t.map(mining),
                },
            },
            StageState {
                stage: "nonces",
                ok: t.map(|t| t.nonces > 0),
                detail: StageDetail::Nonces {
                    nonces: t.map(|t| t.nonces),
                    hw_errors: t.map(|t| t.hw_errors),
                },
            },
            StageState {
                stage: "shares",
                ok: p.map(|p| p.accepted > 0),
                detail: StageDetail::Shares {
                    sent: t.map(|t| t.shares_sent),
                    accepted: p.map(|p| p.accepted),
                    rejected: p.map(|p| p.rejected),
                },
            },
        ];
        PipelineSnapshotBody {
            schema: "svcos.api.mining.pipeline_snapshot.v1",
            at_ms: t.map(|t| t.timestamp_ms),
            stages,
        }
    }
}

#[cfg(test)]
mod pipeline_tests {
    use super::*;

    #[test]
    fn snapshot_without_peers_is_all_null() {
        let v = serde_json::to_value(PipelineSnapshotBody::new(None, None)).unwrap();
        assert!(v["at_ms"].is_null());
        let stages = v["stages"].as_array().unwrap();
        assert_eq!(stages.len(), 5);
        for s in stages {
            assert!(s["ok"].is_null(), "{s}");
            for (_, member) in s["detail"].as_object().unwrap() {
                assert!(member.is_null(), "{s}");
            }
        }
        assert_eq!(stages[4]["detail"].as_object().unwrap().len(), 3);
    }

    #[test]
    fn snapshot_with_telemetry_counts_mining_chains() {
        let t = Telemetry {
            timestamp_ms: 7,
            nonces: 3,
            chains: vec![
                svcos_proto::hwagent::v1::ChainTelemetry {
                    state: ChainState::Mining as i32,
                    ..Default::default()
                },
                Default::default(),
            ],
            ..Default::default()
        };
        let v = serde_json::to_value(PipelineSnapshotBody::new(Some(&t), None)).unwrap();
        assert_eq!(v["at_ms"], 7);
        assert_eq!(v["stages"][2]["detail"]["chains_mining"], 1);
        assert_eq!(v["stages"][2]["ok"], true);
        assert_eq!(v["stages"][3]["ok"], true);
        assert!(v["stages"][4]["ok"].is_null());
    }
}
