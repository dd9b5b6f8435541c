//! Telemetry views: `/api/status`, `/api/stats`, `/api/chips`, `/api/mining/chain/presence`.

use std::collections::BTreeMap;

use serde::Serialize;
use svcos_proto::hwagent::v1::{self as hw, ChainState, Telemetry};
use svcos_proto::stratum::v1::{self as stratum, GetPoolsResponse};

use crate::{Sources, enum_word, round};

/// Hashrates in GH/s (3 decimals).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Hashrate {
    /// Over the last 5 s.
    #[serde(rename = "5s")]
    pub ghs_5s: f64,
    /// Over the last minute.
    #[serde(rename = "1m")]
    pub ghs_1m: f64,
    /// Over the last 15 minutes.
    #[serde(rename = "15m")]
    pub ghs_15m: f64,
    /// What the chips should do at their current frequency.
    pub expected: f64,
}

impl From<Option<&hw::Hashrate>> for Hashrate {
    fn from(h: Option<&hw::Hashrate>) -> Self {
        let h = h.cloned().unwrap_or_default();
        Hashrate {
            ghs_5s: round(h.ghs_5s, 3),
            ghs_1m: round(h.ghs_1m, 3),
            ghs_15m: round(h.ghs_15m, 3),
            expected: round(h.ghs_expected, 3),
        }
    }
}

/// One hashboard (chain) in the status body.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Chain {
    /// Chain number.
    pub chain_id: u32,
    /// initializing, mining, disabled, missing, fault, idle.
    pub state: String,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Chips that answered at bring-up.
    pub chips_detected: u32,
    /// Chain frequency in MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Chain voltage in mV (1 decimal).
    pub voltage_mv: f64,
    /// The chain's hashrates.
    pub hashrate_ghs: Hashrate,
    /// Nonces that verified.
    pub nonces: u64,
    /// Hardware errors.
    pub hw_errors: u64,
    /// Board temperature in °C (1 decimal).
    pub temp_board_c: f64,
    /// Hottest chip in °C (1 decimal).
    pub temp_chip_c: f64,
    /// Chain power in W (1 decimal, calibrated).
    pub power_watt: f64,
    /// Chain UART baud rate.
    pub baud: u32,
}

impl From<&hw::ChainTelemetry> for Chain {
    fn from(c: &hw::ChainTelemetry) -> Self {
        Chain {
            chain_id: c.chain_id,
            state: enum_word(c.state().as_str_name(), "CHAIN_STATE_"),
            chips_expected: c.chips_expected,
            chips_detected: c.chips_detected,
            frequency_mhz: round(c.frequency_mhz, 2),
            voltage_mv: round(c.voltage_mv, 1),
            hashrate_ghs: c.hashrate.as_ref().into(),
            nonces: c.nonces,
            hw_errors: c.hw_errors,
            temp_board_c: round(c.temp_board_c, 1),
            temp_chip_c: round(c.temp_chip_c, 1),
            power_watt: round(c.power_watt, 1),
            baud: c.baud,
        }
    }
}

/// One pool as the API shows it, live state included (never its password).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Pool {
    /// Position in the configured list.
    pub index: u32,
    /// Pool URL.
    pub url: String,
    /// Worker name.
    pub user: String,
    /// Failover priority (0 first).
    pub priority: u32,
    /// Load-balancing quota (0 = failover only).
    pub quota: u32,
    /// Configured on.
    pub enabled: bool,
    /// Currently receiving the shares.
    pub active: bool,
    /// connecting, alive, dead, silent, auth_failed, ...
    pub state: String,
    /// Stratum protocol in use (v1, v2).
    pub protocol: String,
    /// Accepted shares.
    pub accepted: u64,
    /// Rejected shares.
    pub rejected: u64,
    /// Stale shares.
    pub stale: u64,
    /// Shares dropped before submission.
    pub discarded: u64,
    /// Sum of accepted share difficulty.
    pub accepted_difficulty: f64,
    /// Sum of rejected share difficulty.
    pub rejected_difficulty: f64,
    /// Best share difficulty.
    pub best_share: f64,
    /// Current share difficulty.
    pub difficulty: f64,
    /// Unix seconds of the last share (0 = none).
    pub last_share_time: i64,
    /// Round trip of the last share in ms (3 decimals).
    pub last_share_latency_ms: f64,
    /// Unix seconds the connection came up (0 = not connected).
    pub connected_since: i64,
    /// Version rolling (AsicBoost) negotiated.
    pub version_rolling: bool,
    /// Last error as the pool or the connection worded it.
    pub last_error: String,
    /// Reject reasons as the pool worded them, with counts.
    pub reject_reasons: BTreeMap<String, u64>,
}

impl From<&stratum::PoolStatus> for Pool {
    fn from(p: &stratum::PoolStatus) -> Self {
        Pool {
            index: p.index,
            url: p.url.clone(),
            user: p.user.clone(),
            priority: p.priority,
            quota: p.quota,
            enabled: p.enabled,
            active: p.active,
            state: enum_word(p.state().as_str_name(), "POOL_STATE_"),
            protocol: p.protocol.clone(),
            accepted: p.accepted,
            rejected: p.rejected,
            stale: p.stale,
            discarded: p.discarded,
            accepted_difficulty: p.accepted_difficulty,
            rejected_difficulty: p.rejected_difficulty,
            best_share: p.best_share,
            difficulty: p.difficulty,
            last_share_time: p.last_share_time,
            last_share_latency_ms: round(p.last_share_latency_ms, 3),
            connected_since: p.connected_since,
            version_rolling: p.version_rolling,
            last_error: p.last_error.clone(),
            reject_reasons: p
                .reject_reasons
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        }
    }
}

/// The pool summary of the status body.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolsSummary {
    /// Index of the pool receiving shares (-1 = none).
    pub active_index: i32,
    /// Accepted shares, all pools.
    pub accepted: u64,
    /// Rejected shares, all pools.
    pub rejected: u64,
    /// Stale shares, all pools.
    pub stale: u64,
    /// Best share difficulty.
    pub best_share: f64,
    /// Current share difficulty.
    pub share_difficulty: f64,
    /// Blocks found.
    pub found_blocks: u64,
    /// The donation pool is mining now.
    pub donation_active: bool,
    /// Every pool with its live state.
    pub list: Vec<Pool>,
}

impl From<&GetPoolsResponse> for PoolsSummary {
    fn from(p: &GetPoolsResponse) -> Self {
        PoolsSummary {
            active_index: p.active_index,
            accepted: p.accepted,
            rejected: p.rejected,
            stale: p.stale,
            best_share: p.best_share,
            share_difficulty: p.share_difficulty,
            found_blocks: p.found_blocks,
            donation_active: p.donation_active,
            list: p.pools.iter().map(Pool::from).collect(),
        }
    }
}

/// The miner as a whole in the status body.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Mining {
    /// starting, mining, no_work, sleeping, overheat, fault, ...
    pub state: String,
    /// Why the state is what it is, for operators.
    pub state_reason: String,
    /// Miner model.
    pub model: String,
    /// Seconds since mining started.
    pub uptime_s: u64,
    /// Whole-miner hashrates.
    pub hashrate_ghs: Hashrate,
    /// Wall power in W (1 decimal, calibrated).
    pub power_watt: f64,
    /// The power target hw-agent enforces, in W (1 decimal).
    pub power_target_watt: f64,
    /// Hottest temperature in °C (1 decimal).
    pub temp_max_c: f64,
    /// Thermal target in °C (1 decimal).
    pub temp_target_c: f64,
    /// Nonces that verified.
    pub nonces: u64,
    /// Hardware errors.
    pub hw_errors: u64,
    /// Shares handed to stratum-agent.
    pub shares_sent: u64,
    /// Shares waiting for stratum-agent.
    pub shares_queued: u32,
    /// auto or manual.
    pub fan_mode: String,
    /// normal, locate or off.
    pub led_mode: String,
    /// Sequence number of the telemetry snapshot.
    pub telemetry_seq: u64,
    /// Unix ms of the telemetry snapshot.
    pub telemetry_at_ms: i64,
}

impl From<&Telemetry> for Mining {
    fn from(t: &Telemetry) -> Self {
        Mining {
            state: enum_word(t.state().as_str_name(), "MINING_STATE_"),
            state_reason: t.state_reason.clone(),
            model: t.model.clone(),
            uptime_s: t.mining_uptime_s,
            hashrate_ghs: t.hashrate.as_ref().into(),
            power_watt: round(t.power_watt, 1),
            power_target_watt: round(t.power_target_watt, 1),
            temp_max_c: round(t.temp_max_c, 1),
            temp_target_c: round(t.temp_target_c, 1),
            nonces: t.nonces,
            hw_errors: t.hw_errors,
            shares_sent: t.shares_sent,
            shares_queued: t.shares_queued,
            fan_mode: enum_word(t.fan_mode().as_str_name(), "FAN_MODE_"),
            led_mode: enum_word(t.led_mode().as_str_name(), "LED_MODE_"),
            telemetry_seq: t.seq,
            telemetry_at_ms: t.timestamp_ms,
        }
    }
}

/// One fan.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fan {
    /// Fan number.
    pub fan_id: u32,
    /// Measured speed.
    pub rpm: u32,
    /// Duty in percent.
    pub pwm_percent: u32,
    /// Driven but not turning.
    pub stalled: bool,
}

impl From<&svcos_proto::hwagent::v1::FanTelemetry> for Fan {
    fn from(f: &svcos_proto::hwagent::v1::FanTelemetry) -> Self {
        Fan {
            fan_id: f.fan_id,
            rpm: f.rpm,
            pwm_percent: f.pwm_percent,
            stalled: f.stalled,
        }
    }
}

/// The power supply.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Psu {
    /// PSU model.
    pub model: String,
    /// Output on.
    pub enabled: bool,
    /// Output voltage in V (3 decimals).
    pub voltage_v: f64,
    /// Voltage setpoint in V (3 decimals).
    pub voltage_setpoint_v: f64,
    /// Output power in W (1 decimal, calibrated).
    pub power_watt: f64,
    /// Output current in A (2 decimals).
    pub current_a: f64,
    /// Fault text; empty when healthy.
    pub fault: String,
}

/// `GET /api/status` (`svcos.api.status.v1`): members of a peer that is down are `null` and
/// `degraded` is true.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusBody {
    /// `svcos.api.status.v1`.
    pub schema: &'static str,
    /// The miner's hostname.
    pub hostname: String,
    /// home, standard or hacker.
    pub mode: &'static str,
    /// A peer's snapshot is missing.
    pub degraded: bool,
    /// Which peers the body is made of.
    pub sources: Sources,
    /// The miner as a whole; `null` while hw-agent is down.
    pub mining: Option<Mining>,
    /// Hashboards; `null` while hw-agent is down.
    pub chains: Option<Vec<Chain>>,
    /// Fans; `null` while hw-agent is down.
    pub fans: Option<Vec<Fan>>,
    /// Power supply; `null` without one or while hw-agent is down.
    pub psu: Option<Psu>,
    /// Pools; `null` while stratum-agent is down.
    pub pools: Option<PoolsSummary>,
}

impl StatusBody {
    /// The body from the latest snapshots (`None` = that peer is down).
    pub fn new(
        hostname: String,
        mode: &'static str,
        telemetry: Option<&Telemetry>,
        pools: Option<&GetPoolsResponse>,
    ) -> Self {
        StatusBody {
            schema: "svcos.api.status.v1",
            hostname,
            mode,
            degraded: telemetry.is_none() || pools.is_none(),
            sources: Sources::of(telemetry.is_some(), pools.is_some()),
            mining: telemetry.map(Mining::from),
            chains: telemetry.map(|t| t.chains.iter().map(Chain::from).collect()),
            fans: telemetry.map(|t| t.fans.iter().map(Fan::from).collect()),
            psu: telemetry.and_then(|t| t.psu.as_ref()).map(|p| Psu {
                model: p.model.clone(),
                enabled: p.enabled,
                voltage_v: round(p.voltage_v, 3),
                voltage_setpoint_v: round(p.voltage_setpoint_v, 3),
                power_watt: round(p.power_watt, 1),
                current_a: round(p.current_a, 2),
                fault: p.fault.clone(),
            }),
            pools: pools.map(PoolsSummary::from),
        }
    }
}

/// Hardware counters of `/api/stats`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HardwareCounters {
    /// Seconds since mining started.
    pub uptime_s: u64,
    /// Nonces that verified.
    pub nonces: u64,
    /// Hardware errors.
    pub hw_errors: u64,
    /// Nonces seen twice.
    pub duplicate_nonces: u64,
    /// Nonces of an outdated job.
    pub stale_nonces: u64,
    /// Shares handed to stratum-agent.
    pub shares_sent: u64,
    /// Shares waiting for stratum-agent.
    pub shares_queued: u32,
    /// hw_errors / (nonces + hw_errors), 6 decimals; 0 without results.
    pub hw_error_rate: f64,
    /// Whole-miner hashrates.
    pub hashrate_ghs: Hashrate,
    /// Per-chain counters.
    pub chains: Vec<ChainCounters>,
}

/// One chain's counters.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainCounters {
    /// Chain number.
    pub chain_id: u32,
    /// Nonces that verified.
    pub nonces: u64,
    /// Hardware errors.
    pub hw_errors: u64,
}

/// A pool switch.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolSwitch {
    /// Unix ms of the switch.
    pub timestamp_ms: i64,
    /// Pool left (-1 = none).
    pub from_index: i32,
    /// Pool taken.
    pub to_index: i32,
    /// Why.
    pub reason: String,
}

impl From<&stratum::PoolSwitch> for PoolSwitch {
    fn from(s: &stratum::PoolSwitch) -> Self {
        PoolSwitch {
            timestamp_ms: s.timestamp_ms,
            from_index: s.from_index,
            to_index: s.to_index,
            reason: s.reason.clone(),
        }
    }
}

/// One pool's share counters.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolCounters {
    /// Position in the configured list.
    pub index: u32,
    /// Pool URL.
    pub url: String,
    /// Accepted shares.
    pub accepted: u64,
    /// Rejected shares.
    pub rejected: u64,
    /// Stale shares.
    pub stale: u64,
    /// Sum of accepted share difficulty.
    pub accepted_difficulty: f64,
    /// Sum of rejected share difficulty.
    pub rejected_difficulty: f64,
    /// Reject reasons with counts.
    pub reject_reasons: BTreeMap<String, u64>,
}

/// Share counters of `/api/stats`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShareCounters {
    /// Accepted shares.
    pub accepted: u64,
    /// Rejected shares.
    pub rejected: u64,
    /// Stale shares.
    pub stale: u64,
    /// Best share difficulty.
    pub best_share: f64,
    /// Blocks found.
    pub found_blocks: u64,
    /// Seconds since the counters began.
    pub counters_since_s: u64,
    /// Recent pool switches.
    pub switches: Vec<PoolSwitch>,
    /// Per-pool counters.
    pub pools: Vec<PoolCounters>,
}

/// `GET /api/stats` (`svcos.api.stats.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatsBody {
    /// `svcos.api.stats.v1`.
    pub schema: &'static str,
    /// Which peers the body is made of.
    pub sources: Sources,
    /// `null` while hw-agent is down.
    pub hardware: Option<HardwareCounters>,
    /// `null` while stratum-agent is down.
    pub shares: Option<ShareCounters>,
}

impl StatsBody {
    /// The body from the latest snapshots.
    pub fn new(t: Option<&Telemetry>, p: Option<&GetPoolsResponse>) -> Self {
        StatsBody {
            schema: "svcos.api.stats.v1",
            sources: Sources::of(t.is_some(), p.is_some()),
            hardware: t.map(|t| HardwareCounters {
                uptime_s: t.mining_uptime_s,
                nonces: t.nonces,
                hw_errors: t.hw_errors,
                duplicate_nonces: t.duplicate_nonces,
                stale_nonces: t.stale_nonces,
                shares_sent: t.shares_sent,
                shares_queued: t.shares_queued,
                hw_error_rate: if t.nonces + t.hw_errors > 0 {
                    round(t.hw_errors as f64 / (t.nonces + t.hw_errors) as f64, 6)
                } else {
                    0.0
                },
                hashrate_ghs: t.hashrate.as_ref().into(),
                chains: t
                    .chains
                    .iter()
                    .map(|c| ChainCounters {
                        chain_id: c.chain_id,
                        nonces: c.nonces,
                        hw_errors: c.hw_errors,
                    })
                    .collect(),
            }),
            shares: p.map(|p| ShareCounters {
                accepted: p.accepted,
                rejected: p.rejected,
                stale: p.stale,
                best_share: p.best_share,
                found_blocks: p.found_blocks,
                counters_since_s: p.counters_since_s,
                switches: p.switches.iter().map(PoolSwitch::from).collect(),
                pools: p
                    .pools
                    .iter()
                    .map(|pool| PoolCounters {
                        index: pool.index,
                        url: pool.url.clone(),
                        accepted: pool.accepted,
                        rejected: pool.rejected,
                        stale: pool.stale,
                        accepted_difficulty: pool.accepted_difficulty,
                        rejected_difficulty: pool.rejected_difficulty,
                        reject_reasons: pool
                            .reject_reasons
                            .iter()
                            .map(|(k, v)| (k.clone(), *v))
                            .collect(),
                    })
                    .collect(),
            }),
        }
    }
}

/// One chip of `/api/chips`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Chip {
    /// Position on the chain.
    pub index: u32,
    /// Chip address on the chain bus.
    pub address: u32,
    /// Frequency in MHz (2 decimals).
    pub frequency_mhz: f64,
    /// Hashrate over the last minute in GH/s (3 decimals).
    pub ghs_1m: f64,
    /// Nonces that verified.
    pub nonces: u64,
    /// Hardware errors.
    pub hw_errors: u64,
    /// Temperature in °C (1 decimal).
    pub temp_c: f64,
    /// Answering.
    pub alive: bool,
}

/// One chain's chips.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainChips {
    /// Chain number.
    pub chain_id: u32,
    /// Its chips.
    pub chips: Vec<Chip>,
}

/// `GET /api/chips` (`svcos.api.chips.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChipsBody {
    /// `svcos.api.chips.v1`.
    pub schema: &'static str,
    /// Every chain with its chips.
    pub chains: Vec<ChainChips>,
}

impl From<&Telemetry> for ChipsBody {
    fn from(t: &Telemetry) -> Self {
        ChipsBody {
            schema: "svcos.api.chips.v1",
            chains: t
                .chains
                .iter()
                .map(|c| ChainChips {
                    chain_id: c.chain_id,
                    chips: c
                        .chips
                        .iter()
                        .map(|chip| Chip {
                            index: chip.index,
                            address: chip.address,
                            frequency_mhz: round(chip.frequency_mhz, 2),
                            ghs_1m: round(chip.ghs_1m, 3),
                            nonces: chip.nonces,
                            hw_errors: chip.hw_errors,
                            temp_c: round(chip.temp_c, 1),
                            alive: chip.alive,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// One chain of `/api/mining/chain/presence`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainPresence {
    /// Chain number.
    pub chain_id: u32,
    /// The board answered (state is not missing).
    pub present: bool,
    /// Chain state.
    pub state: String,
    /// Chips the board should have.
    pub chips_expected: u32,
    /// Chips that answered.
    pub chips_detected: u32,
}

/// `GET /api/mining/chain/presence` (`svcos.api.chain_presence.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainPresenceBody {
    /// `svcos.api.chain_presence.v1`.
    pub schema: &'static str,
    /// Every chain.
    pub chains: Vec<ChainPresence>,
}

impl From<&Telemetry> for ChainPresenceBody {
    fn from(t: &Telemetry) -> Self {
        ChainPresenceBody {
            schema: "svcos.api.chain_presence.v1",
            chains: t
                .chains
                .iter()
                .map(|c| ChainPresence {
                    chain_id: c.chain_id,
                    present: c.state() != ChainState::Missing,
                    state: enum_word(c.state().as_str_name(), "CHAIN_STATE_"),
                    chips_expected: c.chips_expected,
                    chips_detected: c.chips_detected,
                })
                .collect(),
        }
    }
}
