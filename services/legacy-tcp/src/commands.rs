//! The cgminer command set over svcOS's live snapshots, without I/O.
//!
//! [`dispatch`] turns a parsed request plus a [`View`] of the latest snapshots into either a
//! finished [`Response`] or one privileged [`Action`] for the server to carry out over gRPC;
//! [`action_reply`] then words the outcome. Field names and types follow cgminer 4.x and
//! bmminer (Antminer stock firmware), which is what fleet tools parse; values that svcOS does
//! not track are left out rather than invented.

use std::borrow::Cow;
use svcos_common::bounds::FREQUENCY_MHZ;
use svcos_common::cgminer::lookup;

use svcos_proto::hwagent::v1::{ChainState, ChainTelemetry, GetInventoryResponse, Telemetry};
use svcos_proto::stratum::v1::{GetPoolsResponse, PoolState, PoolStatus};

use crate::protocol::Request;
use crate::reply::{Record, Reply, Response, Severity, Status, Value, code, diff, rate, real};

/// The cgminer API version we speak (cgminer 4.x prints 3.1 or later; bmminer prints 3.1).
pub const API_VERSION: &str = "3.1";
/// Driver name printed in device lists (cgminer prints a three-letter driver code).
pub const DRIVER_NAME: &str = "SVC";

/// What this firmware and board are, independent of whether hw-agent is up.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Firmware version, e.g. `0.1.0`.
    pub version: String,
    /// The marketing model from the `[hardware].board` preset, e.g. `Antminer S9`; used
    /// until (or when) hw-agent's inventory is not available.
    pub model: String,
}

impl Identity {
    /// `svcOS <version>`: the `Description` of every STATUS block and the `Miner` field.
    pub fn description(&self) -> String {
        format!("svcOS {}", self.version)
    }
}

/// The latest snapshots a request is answered from. `None` means the peer is down.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// hw-agent telemetry (without chips).
    pub telemetry: Option<&'a Telemetry>,
    /// stratum-agent pools.
    pub pools: Option<&'a GetPoolsResponse>,
    /// hw-agent inventory, fetched once.
    pub inventory: Option<&'a GetInventoryResponse>,
    /// Firmware and board identity.
    pub identity: &'a Identity,
}

impl View<'_> {
    /// The model tools key on: hw-agent's inventory when known, else the configured preset.
    pub fn model(&self) -> &str {
        match self.inventory {
            Some(inv) if !inv.model.is_empty() => &inv.model,
            _ => &self.identity.model,
        }
    }
}

/// A privileged change the server carries out over gRPC, validated against the view.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// StratumService.SwitchPool.
    SwitchPool {
        /// Pool index.
        index: u32,
        /// Its URL, for the reply text.
        url: String,
    },
    /// StratumService.SetPoolEnabled.
    SetPoolEnabled {
        /// Pool index.
        index: u32,
        /// Its URL, for the reply text.
        url: String,
        /// Enable or disable.
        enabled: bool,
    },
    /// StratumService.AddPool.
    AddPool {
        /// Pool URL.
        url: String,
        /// Worker name.
        user: String,
        /// Worker password (never logged or echoed).
        password: String,
    },
    /// StratumService.RemovePool.
    RemovePool {
        /// Pool index.
        index: u32,
        /// Its URL, for the reply text.
        url: String,
    },
    /// StratumService.SetPoolPriority with the complete new order.
    PoolPriority {
        /// Pool indexes, highest priority first.
        order: Vec<u32>,
    },
    /// Supervisor Restart of stratum-agent and hw-agent (cgminer's `restart` restarts the
    /// miner; here the miner is those two processes).
    Restart,
    /// HwAgentService.SetFrequency on one chain (`ascset|N,freq,MHZ`).
    SetFrequency {
        /// ASC number (position in DEVS).
        asc: u32,
        /// Chain id.
        chain_id: u32,
        /// Target MHz.
        mhz: f64,
    },
    /// HwAgentService.SetChainEnabled (`ascenable|N`, `ascdisable|N`).
    SetChainEnabled {
        /// ASC number (position in DEVS).
        asc: u32,
        /// Chain id.
        chain_id: u32,
        /// Enable or disable.
        enabled: bool,
    },
}

/// What the server should do with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Send this.
    Done(Response),
    /// Carry out this change, then reply with [`action_reply`].
    Act(Action),
}

/// How a carried-out action ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionOutcome {
    /// Done; AddPool returns the new index.
    Ok(Option<u32>),
    /// The peer is not reachable (restarting).
    Unavailable(String),
    /// The peer said no; the message is its reason.
    Refused(String),
    /// The peer said no because of the state it is in (gRPC FAILED_PRECONDITION: for
    /// `removepool`, the pool is the last one).
    Precondition(String),
}

/// Decide what to do with a request from a client that is (or is not) on the `W:` list.
pub fn dispatch(request: &Request, privileged: bool, view: &View<'_>) -> Plan {
    // `+`, `++`: a join of nothing is an unknown command, not an empty join (which would
    // encode as `{,"id":1}`).
    if request.is_join() && !request.joined().is_empty() {
        let parts = request
            .joined()
            .into_iter()
            .map(|name| {
                let reply = match lookup(name) {
                    None => Reply::status(Status::invalid_command()),
                    // cgminer refuses non-joinable commands inside a join with code 45.
                    Some(c) if !c.joinable || c.privileged => {
                        Reply::status(Status::access_denied(c.name))
                    }
                    Some(c) => read_command(c.name, None, privileged, view),
                };
                (name.to_string(), reply)
            })
            .collect();
        return Plan::Done(Response::Join(parts));
    }
    let Some(command) = lookup(&request.command) else {
        return Plan::Done(Response::Single(Reply::status(Status::invalid_command())));
    };
    if command.privileged && !privileged {
        return Plan::Done(Response::Single(Reply::status(Status::access_denied(
            command.name,
        ))));
    }
    let param = request.parameter.as_deref();
    if command.privileged {
        match privileged_command(command.name, param, view) {
            Ok(action) => Plan::Act(action),
            Err(reply) => Plan::Done(Response::Single(reply)),
        }
    } else {
        Plan::Done(Response::Single(read_command(
            command.name,
            param,
            privileged,
            view,
        )))
    }
}

fn read_command(name: &str, param: Option<&str>, privileged: bool, view: &View<'_>) -> Reply {
    match name {
        "version" => version(view),
        "config" => config(view),
        "summary" => summary(view),
        "pools" => pools(view),
        "devs" => devs(view, false),
        "edevs" => devs(view, true),
        "devdetails" => devdetails(view),
        "stats" | "estats" => stats(view),
        "coin" => coin(view),
        "lcd" => lcd(view),
        "fans" => fans(view),
        "temps" => temps(view),
        "check" => check(param, privileged),
        _ => Reply::status(Status::invalid_command()),
    }
}

/// A reply while hw-agent and/or stratum-agent is restarting: the status names what is
/// missing. `I` when the reply still carries live values from the other peer (so clients such
/// as pyasic, which discard any reply that is not `S`/`I`, keep using them; the missing keys
/// are simply absent), `W` when nothing live is left in it.
fn degraded(ok: Status, missing: &[&str], partial: bool) -> Status {
    if missing.is_empty() {
        return ok;
    }
    Status::new(
        if partial {
            Severity::Info
        } else {
            Severity::Warning
        },
        ok.code,
        format!(
            "{} ({} unavailable, restarting: values omitted)",
            ok.msg,
            missing.join(" and ")
        ),
    )
}

fn version(view: &View<'_>) -> Reply {
    let id = view.identity;
    let mut r = Record::new();
    // Honest identification: the firmware is svcOS (no "CGMiner"/"BMMiner" version key);
    // only the API dialect and the hardware model match what stock tools expect.
    r.add_owned("svcOS".into(), id.version.clone())
        .add("API", API_VERSION)
        .add_owned("Miner".into(), id.description())
        .add_owned("CompileTime".into(), id.description())
        .add_owned("Type".into(), view.model().to_string());
    Reply::single(Status::ok(code::VERSION, "svcOS versions"), "VERSION", r)
}

fn config(view: &View<'_>) -> Reply {
    let mut missing = Vec::new();
    let mut r = Record::new();
    let chains = match (view.telemetry, view.inventory) {
        (Some(t), _) => Some(t.chains.len() as u64),
        (None, Some(inv)) => Some(inv.chains.len() as u64),
        (None, None) => {
            missing.push("hw-agent");
            None
        }
    };
    if let Some(n) = chains {
        r.add("ASC Count", n);
    }
    r.add("PGA Count", 0u64);
    match view.pools {
        Some(p) => {
            r.add("Pool Count", p.pools.len() as u64);
        }
        None => missing.push("stratum-agent"),
    }
    // stratum-agent fails over by priority (and fails back); that is cgminer's "Failover".
    r.add("Strategy", "Failover")
        .add("Log Interval", 5u64)
        .add("Device Code", "ASC")
        .add("OS", "Linux")
        .add("Hotplug", "None");
    let status = degraded(
        Status::ok(code::MINECONFIG, "svcOS config"),
        &missing,
        missing.len() < 2,
    );
    Reply::single(status, "CONFIG", r)
}

fn sorted_pools(p: &GetPoolsResponse) -> Vec<&PoolStatus> {
    let mut v: Vec<&PoolStatus> = p.pools.iter().collect();
    v.sort_by_key(|p| p.index);
    v
}

/// `Best Share`: cgminer's wire type is an unsigned integer (its `best_diff` is a `uint64_t`,
/// the share difficulty truncated), and typed clients (Go/Rust structs, BOS's `uint64`) read it
/// so; pyasic does not read it at all. A best share of 1 or more is therefore that integer,
/// truncated like cgminer's (never claiming a better share than found). Below 1, which only a
/// pool with a fractional share difficulty (the simulator's, a test pool) produces, the integer
/// would be 0 and read as "no share yet", so the exact difficulty goes out as a real with the
/// 8 decimals of every other difficulty field; 0 stays 0.
pub fn best_share(difficulty: f64) -> Value {
    if !difficulty.is_finite() || difficulty <= 0.0 {
        Value::UInt(0)
    } else if difficulty < 1.0 {
        diff(difficulty)
    } else {
        Value::UInt(difficulty as u64)
    }
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

fn summary(view: &View<'_>) -> Reply {
    let mut missing = Vec::new();
    let mut r = Record::new();
    let mut elapsed = None;
    if let Some(t) = view.telemetry {
        let h = t.hashrate.unwrap_or_default();
        elapsed = Some(t.mining_uptime_s);
        r.add("Elapsed", t.mining_uptime_s)
            .add("GHS 5s", rate(h.ghs_5s))
            // svcOS keeps 5 s / 1 m / 15 m windows; the 15-minute mean stands in for
            // cgminer's since-start average.
            .add("GHS av", rate(h.ghs_15m))
            .add("MHS av", rate(h.ghs_15m * 1000.0))
            .add("MHS 5s", rate(h.ghs_5s * 1000.0))
            .add("MHS 1m", rate(h.ghs_1m * 1000.0))
            .add("MHS 15m", rate(h.ghs_15m * 1000.0))
            // hw-agent's calibrated reading: the same watts as REST, /ws, MQTT and history.
            .add("Power", Value::Real(t.power_watt, 1))
            .add("Power Target", Value::Real(t.power_target_watt, 1));
    } else {
        missing.push("hw-agent");
    }
    if let Some(p) = view.pools {
        let pools = &p.pools;
        let acc_diff: f64 = pools.iter().map(|p| p.accepted_difficulty).sum();
        let rej_diff: f64 = pools.iter().map(|p| p.rejected_difficulty).sum();
        r.add("Found Blocks", p.found_blocks)
            .add("Accepted", p.accepted)
            .add("Rejected", p.rejected);
        if let Some(t) = view.telemetry {
            r.add("Hardware Errors", t.hw_errors);
        }
        let minutes = elapsed.unwrap_or(p.counters_since_s) as f64 / 60.0;
        let per_min = |v: f64| if minutes > 0.0 { v / minutes } else { 0.0 };
        r.add("Utility", rate(per_min(p.accepted as f64)))
            .add("Discarded", pools.iter().map(|p| p.discarded).sum::<u64>())
            .add("Stale", p.stale)
            .add(
                "Get Failures",
                pools.iter().map(|p| p.get_failures).sum::<u64>(),
            )
            .add(
                "Remote Failures",
                pools.iter().map(|p| p.remote_failures).sum::<u64>(),
            )
            .add("Work Utility", rate(per_min(acc_diff + rej_diff)))
            .add("Difficulty Accepted", diff(acc_diff))
            .add("Difficulty Rejected", diff(rej_diff))
            .add("Best Share", best_share(p.best_share));
        if let Some(t) = view.telemetry {
            r.add(
                "Device Hardware%",
                Value::Real(pct(t.hw_errors as f64, (t.hw_errors + t.nonces) as f64), 4),
            );
        }
        r.add(
            "Pool Rejected%",
            Value::Real(pct(rej_diff, acc_diff + rej_diff), 4),
        )
        .add(
            "Pool Stale%",
            Value::Real(
                pct(p.stale as f64, (p.accepted + p.rejected + p.stale) as f64),
                4,
            ),
        );
    } else {
        missing.push("stratum-agent");
        if let Some(t) = view.telemetry {
            r.add("Hardware Errors", t.hw_errors);
        }
    }
    if let Some(t) = view.telemetry
        && t.job_received_at_ms > 0
    {
        r.add("Last getwork", t.job_received_at_ms / 1000);
    }
    let partial = missing.len() < 2;
    Reply::single(
        degraded(Status::ok(code::SUMM, "Summary"), &missing, partial),
        "SUMMARY",
        r,
    )
}

fn pool_status_word(p: &PoolStatus) -> &'static str {
    if !p.enabled {
        return "Disabled";
    }
    match PoolState::try_from(p.state).unwrap_or(PoolState::Unspecified) {
        PoolState::Alive => "Alive",
        PoolState::Disabled => "Disabled",
        PoolState::Dead | PoolState::Silent | PoolState::AuthFailed => "Dead",
        PoolState::Connecting | PoolState::Unspecified => "Unknown",
    }
}

/// cgminer's "Stratum URL" is the host it connected to, without scheme or port.
fn stratum_host(url: &str) -> String {
    // Never the userinfo (even masked, it is not part of the host). The config refuses a pool
    // URL without a host, so the fallback only shows what was configured.
    svcos_common::redact::UrlParts::parse(url)
        .ok()
        .map(|p| p.host)
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| url.to_string())
}

fn pools(view: &View<'_>) -> Reply {
    let Some(p) = view.pools else {
        return Reply::list(
            degraded(
                Status::ok(code::POOL, "0 Pool(s)"),
                &["stratum-agent"],
                false,
            ),
            "POOLS",
            Vec::new(),
        );
    };
    if p.pools.is_empty() {
        return Reply::status(Status::error(code::NOPOOL, "No pools"));
    }
    let records = sorted_pools(p)
        .into_iter()
        .map(|pool| {
            let mut r = Record::new();
            let total_diff = pool.accepted_difficulty + pool.rejected_difficulty;
            let shares = pool.accepted + pool.rejected + pool.stale;
            r.add("POOL", pool.index)
                .add_owned("URL".into(), pool.url.clone())
                .add("Status", pool_status_word(pool))
                .add("Priority", pool.priority)
                .add("Quota", pool.quota)
                .add("Long Poll", "N")
                .add("Accepted", pool.accepted)
                .add("Rejected", pool.rejected)
                .add("Discarded", pool.discarded)
                .add("Stale", pool.stale)
                .add("Get Failures", pool.get_failures)
                .add("Remote Failures", pool.remote_failures)
                .add_owned("User".into(), pool.user.clone())
                .add("Last Share Time", pool.last_share_time)
                .add("Difficulty Accepted", diff(pool.accepted_difficulty))
                .add("Difficulty Rejected", diff(pool.rejected_difficulty))
                .add("Has Stratum", true)
                .add(
                    "Stratum Active",
                    pool.active && PoolState::try_from(pool.state) == Ok(PoolState::Alive),
                )
                .add_owned("Stratum URL".into(), stratum_host(&pool.url))
                .add("Stratum Difficulty", diff(pool.difficulty))
                .add("Has Vmask", pool.version_rolling)
                .add("Has GBT", false)
                .add("Best Share", best_share(pool.best_share))
                .add(
                    "Pool Rejected%",
                    Value::Real(pct(pool.rejected_difficulty, total_diff), 4),
                )
                .add(
                    "Pool Stale%",
                    Value::Real(pct(pool.stale as f64, shares as f64), 4),
                );
            r
        })
        .collect::<Vec<_>>();
    let status = Status::ok(code::POOL, format!("{} Pool(s)", records.len()));
    Reply::list(status, "POOLS", records)
}

fn sorted_chains(t: &Telemetry) -> Vec<&ChainTelemetry> {
    let mut v: Vec<&ChainTelemetry> = t.chains.iter().collect();
    v.sort_by_key(|c| c.chain_id);
    v
}

fn chain_state(c: &ChainTelemetry) -> ChainState {
    ChainState::try_from(c.state).unwrap_or(ChainState::Unspecified)
}

fn chain_status_word(c: &ChainTelemetry) -> &'static str {
    match chain_state(c) {
        ChainState::Mining | ChainState::Idle | ChainState::Disabled => "Alive",
        ChainState::Initializing => "Initialising",
        ChainState::Missing => "NoStart",
        ChainState::Fault => "Dead",
        ChainState::Unspecified => "Unknown",
    }
}

/// The 1-based slot number printed in `chain_rateN`, `tempN`, TEMPS `ID`: chain id + 1,
/// so pyasic's slot detection (which looks at 1.. and 6..) finds the boards.
fn slot(c: &ChainTelemetry) -> u32 {
    c.chain_id + 1
}

fn hw_unavailable(ok: Status, name: &'static str) -> Reply {
    Reply::list(degraded(ok, &["hw-agent"], false), name, Vec::new())
}

fn devs(view: &View<'_>, enabled_only: bool) -> Reply {
    let Some(t) = view.telemetry else {
        return hw_unavailable(Status::ok(code::DEVS, "0 ASC(s)"), "DEVS");
    };
    let records: Vec<Record> = sorted_chains(t)
        .into_iter()
        .filter(|c| !enabled_only || chain_state(c) != ChainState::Disabled)
        .enumerate()
        .map(|(i, c)| {
            let h = c.hashrate.unwrap_or_default();
            let mut r = Record::new();
            r.add("ASC", i as u64)
                .add("Name", DRIVER_NAME)
                .add("ID", c.chain_id)
                .add(
                    "Enabled",
                    if chain_state(c) == ChainState::Disabled {
                        "N"
                    } else {
                        "Y"
                    },
                )
                .add("Status", chain_status_word(c))
                .add("Temperature", rate(c.temp_chip_c))
                .add("MHS av", rate(h.ghs_15m * 1000.0))
                .add("MHS 5s", rate(h.ghs_5s * 1000.0))
                .add("MHS 1m", rate(h.ghs_1m * 1000.0))
                .add("MHS 15m", rate(h.ghs_15m * 1000.0))
                .add("Hardware Errors", c.hw_errors)
                .add(
                    "Device Hardware%",
                    Value::Real(pct(c.hw_errors as f64, (c.hw_errors + c.nonces) as f64), 4),
                )
                .add("Device Elapsed", t.mining_uptime_s)
                .add("Chips", c.chips_detected)
                .add("Frequency", rate(c.frequency_mhz))
                .add("Voltage", Value::Real(c.voltage_mv / 1000.0, 3));
            r
        })
        .collect();
    if records.is_empty() {
        return Reply::status(Status::error(code::NODEVS, "No ASCs"));
    }
    let status = Status::ok(code::DEVS, format!("{} ASC(s)", records.len()));
    Reply::list(status, "DEVS", records)
}

fn devdetails(view: &View<'_>) -> Reply {
    let Some(t) = view.telemetry else {
        return hw_unavailable(Status::ok(code::DEVDETAILS, "Device Details"), "DEVDETAILS");
    };
    let model = view.model().to_string();
    let records = sorted_chains(t)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let device = view
                .inventory
                .and_then(|inv| inv.chains.iter().find(|x| x.chain_id == c.chain_id))
                .map(|x| x.device.clone())
                .unwrap_or_default();
            let mut r = Record::new();
            r.add("DEVDETAILS", i as u64)
                .add("Name", DRIVER_NAME)
                .add("ID", c.chain_id)
                .add("Driver", "svcos")
                .add("Kernel", "")
                .add_owned("Model".into(), model.clone())
                .add_owned("Device Path".into(), device)
                .add("Chips", c.chips_detected)
                .add("Frequency", rate(c.frequency_mhz))
                .add("Voltage", Value::Real(c.voltage_mv / 1000.0, 3));
            r
        })
        .collect();
    Reply::list(
        Status::ok(code::DEVDETAILS, "Device Details"),
        "DEVDETAILS",
        records,
    )
}

/// bmminer's chip map: a space before every group of eight, `o` for a live chip and `x` for
/// a missing one.
fn chip_map(expected: u32, detected: u32, missing: &[u32]) -> String {
    let mut s = String::with_capacity(expected as usize + expected as usize / 8 + 1);
    for i in 0..expected {
        if i % 8 == 0 {
            s.push(' ');
        }
        let dead = if missing.is_empty() {
            i >= detected
        } else {
            missing.contains(&i)
        };
        s.push(if dead { 'x' } else { 'o' });
    }
    s
}

fn stats(view: &View<'_>) -> Reply {
    let id = view.identity;
    let mut head = Record::new();
    head.add_owned("svcOS".into(), id.version.clone())
        .add_owned("Miner".into(), id.description())
        .add_owned("CompileTime".into(), id.description())
        .add_owned("Type".into(), view.model().to_string());
    let Some(t) = view.telemetry else {
        return Reply::list(
            degraded(
                Status::ok(code::MINESTATS, "svcOS stats"),
                &["hw-agent"],
                false,
            ),
            "STATS",
            vec![head],
        );
    };
    let h = t.hashrate.unwrap_or_default();
    let chains = sorted_chains(t);
    let mut r = Record::new();
    let freq_avg = if chains.is_empty() {
        0.0
    } else {
        chains.iter().map(|c| c.frequency_mhz).sum::<f64>() / chains.len() as f64
    };
    // Types follow bmminer on the S9: GHS 5s, chain_rateN and frequency are strings.
    r.add("STATS", 0u64)
        .add("ID", "SVC0")
        .add("Elapsed", t.mining_uptime_s)
        .add("GHS 5s", format!("{:.2}", h.ghs_5s))
        .add("GHS av", rate(h.ghs_15m))
        .add("miner_count", chains.len() as u64)
        .add("frequency", format!("{freq_avg:.0}"))
        .add("Power", Value::Real(t.power_watt, 1));
    let mut fans: Vec<_> = t.fans.iter().collect();
    fans.sort_by_key(|f| f.fan_id);
    r.add("fan_num", fans.len() as u64);
    for (i, f) in fans.iter().enumerate() {
        r.add_owned(format!("fan{}", i + 1), f.rpm);
    }
    r.add("temp_num", chains.len() as u64);
    // bmminer: tempN is the PCB (board) sensor, temp2_N the chip sensor.
    for c in &chains {
        r.add_owned(format!("temp{}", slot(c)), c.temp_board_c.round() as i64);
    }
    for c in &chains {
        r.add_owned(format!("temp2_{}", slot(c)), c.temp_chip_c.round() as i64);
    }
    for c in &chains {
        r.add_owned(
            format!("temp_pcb{}", slot(c)),
            format!("{:.0}", c.temp_board_c),
        );
        r.add_owned(
            format!("temp_chip{}", slot(c)),
            format!("{:.0}", c.temp_chip_c),
        );
    }
    r.add("temp_max", t.temp_max_c.round() as i64)
        .add(
            "Device Hardware%",
            Value::Real(pct(t.hw_errors as f64, (t.hw_errors + t.nonces) as f64), 4),
        )
        .add("no_matching_work", t.stale_nonces);
    for c in &chains {
        let missing = view
            .inventory
            .and_then(|inv| inv.chains.iter().find(|x| x.chain_id == c.chain_id))
            .map(|x| x.missing_chips.as_slice())
            .unwrap_or(&[]);
        let n = slot(c);
        let ch = c.hashrate.unwrap_or_default();
        r.add_owned(format!("chain_acn{n}"), c.chips_detected)
            .add_owned(
                format!("chain_acs{n}"),
                chip_map(c.chips_expected, c.chips_detected, missing),
            )
            .add_owned(format!("chain_hw{n}"), c.hw_errors)
            .add_owned(format!("chain_rate{n}"), format!("{:.2}", ch.ghs_5s))
            .add_owned(format!("chain_rateideal{n}"), rate(ch.ghs_expected))
            .add_owned(format!("freq_avg{n}"), rate(c.frequency_mhz))
            .add_owned(format!("chain_vol{n}"), rate(c.voltage_mv));
    }
    let ideal: f64 = chains
        .iter()
        .map(|c| c.hashrate.unwrap_or_default().ghs_expected)
        .sum();
    let ideal = if ideal > 0.0 { ideal } else { h.ghs_expected };
    r.add("total_rateideal", rate(ideal))
        .add("total_freqavg", rate(freq_avg))
        .add(
            "total_acn",
            chains
                .iter()
                .map(|c| u64::from(c.chips_detected))
                .sum::<u64>(),
        )
        .add("total_rate", rate(h.ghs_5s))
        // "GH", not "GH/s": stock firmware prints the bare unit and pyasic's unit parser
        // only understands that form.
        .add("rate_unit", "GH");
    Reply::list(
        Status::ok(code::MINESTATS, "svcOS stats"),
        "STATS",
        vec![head, r],
    )
}

fn coin(view: &View<'_>) -> Reply {
    let mut r = Record::new();
    r.add("Hash Method", "sha256");
    let mut missing = Vec::new();
    match view.telemetry {
        Some(t) => {
            r.add(
                "Current Block Time",
                real(t.job_received_at_ms as f64 / 1000.0),
            );
        }
        None => missing.push("hw-agent"),
    }
    r.add("LP", false);
    Reply::single(
        degraded(Status::ok(code::MINECOIN, "svcOS coin"), &missing, false),
        "COIN",
        r,
    )
}

fn lcd(view: &View<'_>) -> Reply {
    let mut missing = Vec::new();
    let mut r = Record::new();
    if let Some(t) = view.telemetry {
        let h = t.hashrate.unwrap_or_default();
        r.add("Elapsed", t.mining_uptime_s)
            .add("GHS av", rate(h.ghs_15m))
            .add("GHS 5s", rate(h.ghs_5s))
            .add("Temperature", rate(t.temp_max_c));
    } else {
        missing.push("hw-agent");
    }
    if let Some(p) = view.pools {
        r.add("Best Share", best_share(p.best_share))
            .add("Found Blocks", p.found_blocks);
        let active = p
            .pools
            .iter()
            .find(|x| i64::from(x.index) == i64::from(p.active_index) && x.active)
            .or_else(|| p.pools.iter().find(|x| x.active));
        if let Some(a) = active {
            r.add("Last Share Time", a.last_share_time)
                .add_owned("Pool".into(), a.url.clone())
                .add_owned("User".into(), a.user.clone());
        }
    } else {
        missing.push("stratum-agent");
    }
    Reply::single(
        degraded(Status::ok(code::LCD, "LCD"), &missing, missing.len() < 2),
        "LCD",
        r,
    )
}

fn fans(view: &View<'_>) -> Reply {
    let Some(t) = view.telemetry else {
        return hw_unavailable(Status::ok(code::FANS, "0 Fan(s)"), "FANS");
    };
    let mut fans: Vec<_> = t.fans.iter().collect();
    fans.sort_by_key(|f| f.fan_id);
    let records: Vec<Record> = fans
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut r = Record::new();
            r.add("FAN", i as u64)
                .add("ID", f.fan_id)
                .add("RPM", f.rpm)
                .add("Speed", f.pwm_percent);
            r
        })
        .collect();
    let status = Status::ok(code::FANS, format!("{} Fan(s)", records.len()));
    Reply::list(status, "FANS", records)
}

fn temps(view: &View<'_>) -> Reply {
    let Some(t) = view.telemetry else {
        return hw_unavailable(Status::ok(code::TEMPS, "0 Temp(s)"), "TEMPS");
    };
    let records: Vec<Record> = sorted_chains(t)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut r = Record::new();
            r.add("TEMP", i as u64)
                .add("ID", slot(c))
                .add("Board", rate(c.temp_board_c))
                .add("Chip", rate(c.temp_chip_c));
            r
        })
        .collect();
    let status = Status::ok(code::TEMPS, format!("{} Temp(s)", records.len()));
    Reply::list(status, "TEMPS", records)
}

fn check(param: Option<&str>, privileged: bool) -> Reply {
    let Some(name) = param.filter(|p| !p.is_empty()) else {
        return Reply::status(Status::error(code::MISCHK, "Missing check cmd"));
    };
    let found = lookup(name);
    let access = found.is_some_and(|c| !c.privileged || privileged);
    let mut r = Record::new();
    r.add("Exists", if found.is_some() { "Y" } else { "N" })
        .add("Access", if access { "Y" } else { "N" });
    Reply::single(Status::ok(code::CHECK, "Check command"), "CHECK", r)
}

fn stratum_down(code: u32) -> Reply {
    Reply::status(Status::new(
        Severity::Warning,
        code,
        "stratum-agent unavailable (restarting): pool change not made, try again",
    ))
}

fn hw_down(code: u32) -> Reply {
    Reply::status(Status::new(
        Severity::Warning,
        code,
        "hw-agent unavailable (restarting): change not made, try again",
    ))
}

/// Parse a pool id the way cgminer does (`atoi`, then range check).
fn pool_id<'a>(param: Option<&str>, p: &'a GetPoolsResponse) -> Result<&'a PoolStatus, Reply> {
    let Some(text) = param.map(str::trim).filter(|s| !s.is_empty()) else {
        return Err(Reply::status(Status::error(
            code::MISPID,
            "Missing pool id parameter",
        )));
    };
    let max = p.pools.len() as i64 - 1;
    let id: i64 = text.parse().unwrap_or(-1);
    p.pools
        .iter()
        .find(|x| i64::from(x.index) == id)
        .ok_or_else(|| {
            Reply::status(Status::error(
                code::INVPID,
                format!("Invalid pool id {id} - range is 0 - {max}"),
            ))
        })
}

/// Split cgminer's comma-separated parameter, honouring `\,` and `\\` escapes.
pub fn split_params(param: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = param.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    parts.last_mut().expect("non-empty").push(next);
                }
            }
            ',' => parts.push(String::new()),
            c => parts.last_mut().expect("non-empty").push(c),
        }
    }
    parts
}

fn asc_target(param: Option<&str>, view: &View<'_>) -> Result<(u32, u32, Vec<String>), Reply> {
    let Some(t) = view.telemetry else {
        return Err(hw_down(code::ASCSETERR));
    };
    let chains = sorted_chains(t);
    if chains.is_empty() {
        return Err(Reply::status(Status::error(code::ASCNON, "No ASCs")));
    }
    let Some(text) = param.filter(|s| !s.is_empty()) else {
        return Err(Reply::status(Status::error(
            code::MISID,
            "Missing device id parameter",
        )));
    };
    let parts = split_params(text);
    let id: i64 = parts[0].trim().parse().unwrap_or(-1);
    let max = chains.len() as i64 - 1;
    if id < 0 || id > max {
        return Err(Reply::status(Status::error(
            code::INVASC,
            format!("Invalid ASC id {id} - range is 0 - {max}"),
        )));
    }
    let asc = id as u32;
    Ok((asc, chains[asc as usize].chain_id, parts[1..].to_vec()))
}

fn privileged_command(name: &str, param: Option<&str>, view: &View<'_>) -> Result<Action, Reply> {
    match name {
        "privileged" => Err(Reply::status(Status::ok(
            code::ACCOK,
            "Privileged access OK",
        ))),
        "switchpool" => {
            let p = view.pools.ok_or_else(|| stratum_down(code::SWITCHP))?;
            let pool = pool_id(param, p)?;
            Ok(Action::SwitchPool {
                index: pool.index,
                url: pool.url.clone(),
            })
        }
        "enablepool" | "disablepool" => {
            let enable = name == "enablepool";
            let ok_code = if enable { code::ENAPOOL } else { code::DISPOOL };
            let p = view.pools.ok_or_else(|| stratum_down(ok_code))?;
            let pool = pool_id(param, p)?;
            let (i, url) = (pool.index, &pool.url);
            if pool.enabled == enable {
                let (c, word) = if enable {
                    (code::ALRENAP, "enabled")
                } else {
                    (code::ALRDISP, "disabled")
                };
                return Err(Reply::status(Status::new(
                    Severity::Info,
                    c,
                    format!("Pool {i}:'{url}' already {word}"),
                )));
            }
            if !enable && p.pools.iter().filter(|x| x.enabled).count() <= 1 {
                return Err(Reply::status(Status::error(
                    code::DISLASTP,
                    format!("Cannot disable last active pool {i}:'{url}'"),
                )));
            }
            Ok(Action::SetPoolEnabled {
                index: i,
                url: url.clone(),
                enabled: enable,
            })
        }
        "addpool" => {
            let Some(text) = param.filter(|s| !s.is_empty()) else {
                return Err(Reply::status(Status::error(
                    code::MISPDP,
                    "Missing addpool details",
                )));
            };
            let parts = split_params(text);
            if parts.len() != 3 || parts[0].trim().is_empty() || parts[1].trim().is_empty() {
                // Echo only the URL part: the parameter carries the worker password.
                return Err(Reply::status(Status::error(
                    code::INVPDP,
                    format!("Invalid addpool details '{}'", parts[0]),
                )));
            }
            if view.pools.is_none() {
                return Err(stratum_down(code::ADDPOOL));
            }
            let mut it = parts.into_iter();
            let (url, user, password) = (
                it.next().unwrap_or_default(),
                it.next().unwrap_or_default(),
                it.next().unwrap_or_default(),
            );
            Ok(Action::AddPool {
                url: url.trim().to_string(),
                user: user.trim().to_string(),
                password,
            })
        }
        "removepool" => {
            let p = view.pools.ok_or_else(|| stratum_down(code::REMPOOL))?;
            let pool = pool_id(param, p)?;
            let (i, url) = (pool.index, pool.url.clone());
            // The last-pool rule is stratum-agent's (the pool owner): its RemovePool answers
            // FAILED_PRECONDITION, which `action_reply` turns into cgminer's REMLASTP. cgminer
            // checks "last" before "active", so a lone pool goes to the owner for its verdict.
            if pool.active && p.pools.len() > 1 {
                return Err(Reply::status(Status::error(
                    code::ACTPOOL,
                    format!("Cannot remove active pool {i}:'{url}'"),
                )));
            }
            Ok(Action::RemovePool { index: i, url })
        }
        "poolpriority" => {
            let p = view.pools.ok_or_else(|| stratum_down(code::POOLPRIO))?;
            let Some(text) = param.filter(|s| !s.is_empty()) else {
                return Err(Reply::status(Status::error(
                    code::MISPID,
                    "Missing pool id parameter",
                )));
            };
            let max = p.pools.len() as i64 - 1;
            let mut order: Vec<u32> = Vec::new();
            for part in text.split(',') {
                let id: i64 = part.trim().parse().unwrap_or(-1);
                let Some(pool) = p.pools.iter().find(|x| i64::from(x.index) == id) else {
                    return Err(Reply::status(Status::error(
                        code::INVPID,
                        format!("Invalid pool id {id} - range is 0 - {max}"),
                    )));
                };
                if order.contains(&pool.index) {
                    return Err(Reply::status(Status::error(
                        code::DUPPID,
                        format!("Duplicate pool specified {id}"),
                    )));
                }
                order.push(pool.index);
            }
            // Like cgminer, pools not named keep their relative order after the named ones.
            let mut rest: Vec<&PoolStatus> = p
                .pools
                .iter()
                .filter(|x| !order.contains(&x.index))
                .collect();
            rest.sort_by_key(|x| (x.priority, x.index));
            order.extend(rest.into_iter().map(|x| x.index));
            Ok(Action::PoolPriority { order })
        }
        "restart" => Ok(Action::Restart),
        "quit" => Err(Reply::status(Status::error(
            code::INVCMD,
            "Invalid command: quit is not supported by svcOS (mining is supervised; stop it \
             through the REST API)",
        ))),
        "ascenable" | "ascdisable" => {
            let enable = name == "ascenable";
            let (asc, chain_id, _) = asc_target(param, view)?;
            let t = view.telemetry.expect("asc_target checked");
            let chain = t.chains.iter().find(|c| c.chain_id == chain_id);
            let disabled = chain.is_some_and(|c| chain_state(c) == ChainState::Disabled);
            if enable != disabled {
                let (c, word) = if enable {
                    (code::ASCLRENA, "enabled")
                } else {
                    (code::ASCLRDIS, "disabled")
                };
                return Err(Reply::status(Status::new(
                    Severity::Info,
                    c,
                    format!("ASC {asc} already {word}"),
                )));
            }
            Ok(Action::SetChainEnabled {
                asc,
                chain_id,
                enabled: enable,
            })
        }
        "ascset" => {
            let (asc, chain_id, opts) = asc_target(param, view)?;
            let Some(opt) = opts.first().map(|s| s.trim().to_ascii_lowercase()) else {
                return Err(Reply::status(Status::error(
                    code::MISASCOPT,
                    "Missing option after ASC number",
                )));
            };
            match opt.as_str() {
                "help" => Err(Reply::status(Status::new(
                    Severity::Info,
                    code::ASCHELP,
                    format!(
                        "ASC {asc} set help: freq,MHZ ({}-{})",
                        FREQUENCY_MHZ.min, FREQUENCY_MHZ.max
                    ),
                ))),
                "freq" | "frequency" | "clock" => {
                    let mhz = opts
                        .get(1)
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .filter(|v| FREQUENCY_MHZ.contains(*v));
                    match mhz {
                        Some(mhz) => Ok(Action::SetFrequency { asc, chain_id, mhz }),
                        None => Err(Reply::status(Status::error(
                            code::ASCSETERR,
                            format!(
                                "ASC {asc} set failed: freq needs a value {}",
                                FREQUENCY_MHZ.describe()
                            ),
                        ))),
                    }
                }
                other => Err(Reply::status(Status::error(
                    code::ASCSETERR,
                    format!("ASC {asc} set failed: unknown option '{other}'"),
                ))),
            }
        }
        // In the table so that refusals match cgminer, but not offered by svcOS.
        other => Err(Reply::status(Status::error(
            code::INVCMD,
            format!("Invalid command: '{other}' is not supported by svcOS on this port"),
        ))),
    }
}

/// Word the outcome of a carried-out action like cgminer would.
pub fn action_reply(action: &Action, outcome: &ActionOutcome) -> Reply {
    let (ok_code, ok_msg): (u32, Cow<'static, str>) = match action {
        Action::SwitchPool { index, url } => (
            code::SWITCHP,
            format!("Switching to pool {index}:'{url}'").into(),
        ),
        Action::SetPoolEnabled {
            index,
            url,
            enabled: true,
        } => (
            code::ENAPOOL,
            format!("Enabling pool {index}:'{url}'").into(),
        ),
        Action::SetPoolEnabled {
            index,
            url,
            enabled: false,
        } => (
            code::DISPOOL,
            format!("Disabling pool {index}:'{url}'").into(),
        ),
        Action::AddPool { url, .. } => (code::ADDPOOL, format!("Added pool '{url}'").into()),
        Action::RemovePool { index, url } => (
            code::REMPOOL,
            format!("Removed pool {index}:'{url}'").into(),
        ),
        Action::PoolPriority { .. } => (code::POOLPRIO, "Changed pool priorities".into()),
        Action::Restart => (
            code::ACCOK,
            "Restarting stratum-agent and hw-agent (mining resumes within seconds)".into(),
        ),
        Action::SetFrequency { asc, mhz, .. } => (
            code::ASCSETOK,
            format!("ASC {asc} set OK: freq {mhz:.0} MHz").into(),
        ),
        Action::SetChainEnabled {
            asc, enabled: true, ..
        } => (
            code::ASCENA,
            format!("ASC {asc} sent enable message").into(),
        ),
        Action::SetChainEnabled {
            asc,
            enabled: false,
            ..
        } => (code::ASCDIS, format!("ASC {asc} set disable flag").into()),
    };
    let peer = match action {
        Action::Restart => "supervisor",
        Action::SetFrequency { .. } | Action::SetChainEnabled { .. } => "hw-agent",
        _ => "stratum-agent",
    };
    if let (ActionOutcome::Precondition(_), Action::RemovePool { index, url }) = (outcome, action) {
        return Reply::status(Status::error(
            code::REMLASTP,
            format!("Cannot remove last pool {index}:'{url}'"),
        ));
    }
    match outcome {
        ActionOutcome::Ok(new_index) => {
            let msg = match (action, new_index) {
                (Action::AddPool { url, .. }, Some(i)) => format!("Added pool {i}:'{url}'"),
                _ => ok_msg.into_owned(),
            };
            let severity = match action {
                // cgminer reports ASC enable/disable as informational.
                Action::SetChainEnabled { .. } => Severity::Info,
                _ => Severity::Success,
            };
            Reply::status(Status::new(severity, ok_code, msg))
        }
        ActionOutcome::Unavailable(why) => Reply::status(Status::new(
            Severity::Warning,
            ok_code,
            format!("{peer} unavailable (restarting): change not made ({why})"),
        )),
        ActionOutcome::Refused(why) | ActionOutcome::Precondition(why) => {
            Reply::status(Status::error(ok_code, format!("{peer} refused: {why}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Format, parse};
    use svcos_proto::hwagent::v1::{FanTelemetry, Hashrate, MiningState};

    fn identity() -> Identity {
        Identity {
            version: "0.1.0".into(),
            model: "Antminer S9".into(),
        }
    }

    fn telemetry() -> Telemetry {
        let chain = |id: u32, ghs: f64| ChainTelemetry {
            chain_id: id,
            state: ChainState::Mining as i32,
            chips_expected: 63,
            chips_detected: if id == 2 { 62 } else { 63 },
            frequency_mhz: 650.0,
            voltage_mv: 8800.0,
            hashrate: Some(Hashrate {
                ghs_5s: ghs,
                ghs_1m: ghs,
                ghs_15m: ghs,
                ghs_expected: 4500.0,
            }),
            hw_errors: u64::from(id),
            temp_board_c: 55.0 + f64::from(id),
            temp_chip_c: 70.0 + f64::from(id),
            ..Default::default()
        };
        Telemetry {
            state: MiningState::Mining as i32,
            hashrate: Some(Hashrate {
                ghs_5s: 13_500.0,
                ghs_1m: 13_400.0,
                ghs_15m: 13_300.0,
                ghs_expected: 13_500.0,
            }),
            chains: vec![chain(2, 4400.0), chain(0, 4500.0), chain(1, 4600.0)],
            fans: vec![
                FanTelemetry {
                    fan_id: 1,
                    rpm: 4200,
                    pwm_percent: 60,
                    stalled: false,
                },
                FanTelemetry {
                    fan_id: 0,
                    rpm: 4100,
                    pwm_percent: 60,
                    stalled: false,
                },
            ],
            mining_uptime_s: 600,
            hw_errors: 3,
            nonces: 997,
            temp_max_c: 72.0,
            ..Default::default()
        }
    }

    fn pools() -> GetPoolsResponse {
        let pool = |index: u32, active: bool| PoolStatus {
            index,
            url: format!("stratum+tcp://pool{index}.example:3333"),
            user: "worker".into(),
            priority: index,
            state: if active {
                PoolState::Alive as i32
            } else {
                PoolState::Dead as i32
            },
            active,
            enabled: true,
            accepted: if active { 10 } else { 0 },
            rejected: if active { 2 } else { 0 },
            accepted_difficulty: if active { 80.0 } else { 0.0 },
            rejected_difficulty: if active { 20.0 } else { 0.0 },
            ..Default::default()
        };
        GetPoolsResponse {
            pools: vec![pool(1, false), pool(0, true)],
            active_index: 0,
            accepted: 10,
            rejected: 2,
            best_share: 1234.4,
            ..Default::default()
        }
    }

    fn run(
        text: &str,
        privileged: bool,
        t: Option<&Telemetry>,
        p: Option<&GetPoolsResponse>,
    ) -> Plan {
        let id = identity();
        let view = View {
            telemetry: t,
            pools: p,
            inventory: None,
            identity: &id,
        };
        dispatch(&parse(text.as_bytes()).unwrap(), privileged, &view)
    }

    fn single(plan: Plan) -> Reply {
        match plan {
            Plan::Done(Response::Single(r)) => r,
            other => panic!("expected a single reply, got {other:?}"),
        }
    }

    fn field<'a>(reply: &'a Reply, record: usize, key: &str) -> &'a Value {
        reply.section.as_ref().expect("section").records[record]
            .get(key)
            .unwrap_or_else(|| panic!("missing {key}"))
    }

    #[test]
    fn version_is_honest_and_carries_the_model() {
        let r = single(run("version", false, None, None));
        assert_eq!(r.status.code, code::VERSION);
        assert_eq!(field(&r, 0, "Type"), &Value::from("Antminer S9"));
        assert_eq!(
            field(&r, 0, "Miner"),
            &Value::from("svcOS 0.1.0".to_string())
        );
        assert!(r.section.unwrap().records[0].get("CGMiner").is_none());
    }

    #[test]
    fn stats_has_the_bmminer_board_keys_in_slot_order() {
        let t = telemetry();
        let r = single(run("stats", false, Some(&t), None));
        let s = &r.section.as_ref().unwrap().records;
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].get("Type"), Some(&Value::from("Antminer S9")));
        let b = &s[1];
        assert_eq!(
            b.get("chain_rate1"),
            Some(&Value::from("4500.00".to_string()))
        );
        assert_eq!(
            b.get("chain_rate3"),
            Some(&Value::from("4400.00".to_string()))
        );
        assert_eq!(b.get("chain_acn3"), Some(&Value::UInt(62)));
        assert_eq!(b.get("temp1"), Some(&Value::Int(55)));
        assert_eq!(b.get("temp2_2"), Some(&Value::Int(71)));
        assert_eq!(b.get("fan1"), Some(&Value::UInt(4100)));
        assert_eq!(b.get("fan2"), Some(&Value::UInt(4200)));
        assert_eq!(b.get("rate_unit"), Some(&Value::from("GH")));
        assert_eq!(b.get("total_rateideal"), Some(&rate(13_500.0)));
        assert_eq!(b.get("Elapsed"), Some(&Value::UInt(600)));
        let Some(Value::Str(acs)) = b.get("chain_acs3") else {
            panic!()
        };
        assert_eq!(acs.matches('o').count(), 62);
        assert_eq!(acs.matches('x').count(), 1);
        assert_eq!(acs.matches(' ').count(), 8);
    }

    /// The control board is 32-bit (armv7): counts past 2^32 (a long-running miner's accepted
    /// shares, a best share's difficulty) must come out whole, not wrapped at 4 G.
    #[test]
    fn counts_past_four_billion_come_out_whole() {
        let big = u64::from(u32::MAX) + 7;
        let t = telemetry();
        let mut p = pools();
        p.accepted = big;
        p.best_share = 2f64.powi(40);
        let s = single(run("summary", false, Some(&t), Some(&p)));
        assert_eq!(field(&s, 0, "Accepted"), &Value::UInt(big));
        assert_eq!(field(&s, 0, "Best Share"), &Value::UInt(1 << 40));
    }

    #[test]
    fn summary_and_pools_use_cgminer_names() {
        let (t, p) = (telemetry(), pools());
        let s = single(run("summary", false, Some(&t), Some(&p)));
        assert_eq!(s.status.severity, Severity::Success);
        assert_eq!(field(&s, 0, "GHS 5s"), &rate(13_500.0));
        assert_eq!(field(&s, 0, "MHS 5s"), &rate(13_500_000.0));
        assert_eq!(field(&s, 0, "Accepted"), &Value::UInt(10));
        assert_eq!(field(&s, 0, "Hardware Errors"), &Value::UInt(3));
        assert_eq!(field(&s, 0, "Best Share"), &Value::UInt(1234));
        let r = single(run("pools", false, None, Some(&p)));
        assert_eq!(r.status.msg, "2 Pool(s)");
        assert_eq!(field(&r, 0, "POOL"), &Value::UInt(0));
        assert_eq!(field(&r, 0, "Status"), &Value::from("Alive"));
        assert_eq!(field(&r, 0, "Stratum Active"), &Value::Bool(true));
        assert_eq!(
            field(&r, 0, "Stratum URL"),
            &Value::from("pool0.example".to_string())
        );
        assert_eq!(field(&r, 1, "Status"), &Value::from("Dead"));
    }

    #[test]
    fn a_fractional_best_share_is_not_reported_as_none() {
        let t = telemetry();
        let mut p = pools();
        p.best_share = 0.00092;
        for pool in &mut p.pools {
            pool.best_share = 0.00092;
        }
        for (command, index) in [("summary", 0), ("pools", 0), ("lcd", 0)] {
            let r = single(run(command, false, Some(&t), Some(&p)));
            assert_eq!(field(&r, index, "Best Share"), &diff(0.00092), "{command}");
        }
        let table = [
            (0.0, Value::UInt(0)),
            (-1.0, Value::UInt(0)),
            (f64::NAN, Value::UInt(0)),
            (0.5, diff(0.5)),
            (1.0, Value::UInt(1)),
            // Truncated like cgminer's uint64: never a better share than found.
            (1234.9, Value::UInt(1234)),
        ];
        for (d, want) in table {
            assert_eq!(best_share(d), want, "{d}");
        }
    }

    #[test]
    fn peers_down_give_warnings_with_what_is_known() {
        let p = pools();
        let s = single(run("summary", false, None, Some(&p)));
        assert_eq!(
            s.status.severity,
            Severity::Info,
            "partial: pool counters are live"
        );
        assert!(
            s.status.msg.contains("hw-agent unavailable"),
            "{}",
            s.status.msg
        );
        assert_eq!(field(&s, 0, "Accepted"), &Value::UInt(10));
        assert!(s.section.unwrap().records[0].get("GHS 5s").is_none());
        let r = single(run("pools", false, None, None));
        assert_eq!(r.status.severity, Severity::Warning);
        assert!(r.status.msg.contains("stratum-agent"));
        let st = single(run("stats", false, None, None));
        assert_eq!(st.status.severity, Severity::Warning);
        assert_eq!(st.section.unwrap().records.len(), 1, "identity only");
        let s = single(run("summary", false, None, None));
        assert_eq!(s.status.severity, Severity::Warning, "nothing live left");
        // version never depends on a peer
        let v = single(run("version", false, None, None));
        assert_eq!(v.status.severity, Severity::Success);
    }

    #[test]
    fn the_shared_table_says_which_commands_are_served() {
        let p = pools();
        let t = telemetry();
        for c in svcos_common::cgminer::COMMANDS {
            let unsupported = match run(c.name, true, Some(&t), Some(&p)) {
                Plan::Done(Response::Single(r)) => {
                    r.status.code == code::INVCMD && r.status.msg.contains("not supported")
                }
                _ => false,
            };
            assert_eq!(unsupported, !c.served, "{c:?}");
        }
    }

    #[test]
    fn privileged_commands_are_refused_with_code_45() {
        let p = pools();
        for cmd in [
            "switchpool|1",
            "enablepool|1",
            "addpool|a,b,c",
            "removepool|1",
            "poolpriority|1,0",
            "restart",
            "quit",
            "ascset|0,freq,600",
            "privileged",
            "save",
            "debug",
        ] {
            let r = single(run(cmd, false, None, Some(&p)));
            assert_eq!(r.status.code, code::ACCDENY, "{cmd}");
            assert_eq!(r.status.severity, Severity::Error, "{cmd}");
            let name = cmd.split('|').next().unwrap();
            assert_eq!(r.status.msg, format!("Access denied to '{name}' command"));
        }
    }

    #[test]
    fn privileged_commands_validate_then_act() {
        let (t, p) = (telemetry(), pools());
        let act = |cmd: &str| run(cmd, true, Some(&t), Some(&p));
        assert_eq!(
            act("switchpool|1"),
            Plan::Act(Action::SwitchPool {
                index: 1,
                url: "stratum+tcp://pool1.example:3333".into()
            })
        );
        assert_eq!(single(act("switchpool")).status.code, code::MISPID);
        assert_eq!(
            single(act("switchpool|7")).status.msg,
            "Invalid pool id 7 - range is 0 - 1"
        );
        assert_eq!(single(act("enablepool|0")).status.code, code::ALRENAP);
        assert!(matches!(
            act("disablepool|1"),
            Plan::Act(Action::SetPoolEnabled {
                index: 1,
                enabled: false,
                ..
            })
        ));
        assert_eq!(single(act("removepool|0")).status.code, code::ACTPOOL);
        assert_eq!(
            act("addpool|stratum+tcp://x:1,w\\,1,p"),
            Plan::Act(Action::AddPool {
                url: "stratum+tcp://x:1".into(),
                user: "w,1".into(),
                password: "p".into()
            })
        );
        let bad = single(act("addpool|only-url"));
        assert_eq!(bad.status.code, code::INVPDP);
        assert_eq!(
            act("poolpriority|1"),
            Plan::Act(Action::PoolPriority { order: vec![1, 0] })
        );
        assert_eq!(single(act("poolpriority|1,1")).status.code, code::DUPPID);
        assert_eq!(single(act("privileged")).status.code, code::ACCOK);
        assert_eq!(act("restart"), Plan::Act(Action::Restart));
        assert_eq!(single(act("quit")).status.severity, Severity::Error);
        assert_eq!(
            act("ascset|2,freq,600"),
            Plan::Act(Action::SetFrequency {
                asc: 2,
                chain_id: 2,
                mhz: 600.0
            })
        );
        assert_eq!(single(act("ascset|3,freq,600")).status.code, code::INVASC);
        assert_eq!(single(act("ascset|0,volt,9")).status.code, code::ASCSETERR);
        assert_eq!(single(act("ascenable|0")).status.code, code::ASCLRENA);
    }

    #[test]
    fn join_refuses_non_joinable_and_unknown_parts() {
        let (t, p) = (telemetry(), pools());
        let Plan::Done(Response::Join(parts)) = run(
            r#"{"command":"summary+pools+switchpool+nope+check"}"#,
            true,
            Some(&t),
            Some(&p),
        ) else {
            panic!()
        };
        let names: Vec<_> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["summary", "pools", "switchpool", "nope", "check"]);
        assert_eq!(parts[0].1.status.code, code::SUMM);
        assert_eq!(parts[2].1.status.code, code::ACCDENY);
        assert_eq!(parts[3].1.status.code, code::INVCMD);
        assert_eq!(parts[4].1.status.code, code::ACCDENY);
    }

    #[test]
    fn check_reports_existence_and_access() {
        let r = single(run("check|switchpool", false, None, None));
        assert_eq!(field(&r, 0, "Exists"), &Value::from("Y"));
        assert_eq!(field(&r, 0, "Access"), &Value::from("N"));
        let r = single(run("check|switchpool", true, None, None));
        assert_eq!(field(&r, 0, "Access"), &Value::from("Y"));
        let r = single(run("check|nope", true, None, None));
        assert_eq!(field(&r, 0, "Exists"), &Value::from("N"));
        assert_eq!(
            single(run("check", false, None, None)).status.code,
            code::MISCHK
        );
    }

    #[test]
    fn action_outcomes_are_worded() {
        let a = Action::SwitchPool {
            index: 1,
            url: "u".into(),
        };
        let ok = action_reply(&a, &ActionOutcome::Ok(None));
        assert_eq!(ok.status.msg, "Switching to pool 1:'u'");
        assert_eq!(ok.status.severity, Severity::Success);
        let down = action_reply(&a, &ActionOutcome::Unavailable("x".into()));
        assert_eq!(down.status.severity, Severity::Warning);
        let no = action_reply(&a, &ActionOutcome::Refused("no such pool".into()));
        assert_eq!(no.status.severity, Severity::Error);
        assert!(no.status.msg.contains("no such pool"));
        let _ = Format::Json;
        // stratum-agent's last-pool refusal is cgminer's REMLASTP, worded as cgminer does.
        let remove = Action::RemovePool {
            index: 0,
            url: "u".into(),
        };
        let last = action_reply(&remove, &ActionOutcome::Precondition("last".into()));
        assert_eq!(
            (
                last.status.severity,
                last.status.code,
                last.status.msg.as_str()
            ),
            (
                Severity::Error,
                code::REMLASTP,
                "Cannot remove last pool 0:'u'"
            )
        );
    }

    #[test]
    fn chip_map_and_param_splitting() {
        assert_eq!(chip_map(10, 10, &[]), " oooooooo oo");
        assert_eq!(chip_map(10, 8, &[]), " oooooooo xx");
        assert_eq!(chip_map(10, 9, &[0]), " xooooooo oo");
        assert_eq!(chip_map(0, 0, &[]), "");
        assert_eq!(split_params("a,b,c"), ["a", "b", "c"]);
        assert_eq!(split_params(r"a\,b,c\\"), ["a,b", "c\\"]);
        assert_eq!(split_params(""), [""]);
    }

    #[test]
    fn stratum_host_table() {
        for (url, host) in [
            ("stratum+tcp://a.b:3333", "a.b"),
            ("stratum2+tcp://a.b:3336/9bXi", "a.b"),
            ("a.b", "a.b"),
            ("stratum+tcp://[::1]:3333", "[::1]"),
            ("stratum+tcp://u:********@a.b:3333", "a.b"),
        ] {
            assert_eq!(stratum_host(url), host);
        }
    }
}
