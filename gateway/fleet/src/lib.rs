//! Fleet discovery: find the other miners on the LAN that speak the cgminer API (TCP 4028),
//! identify their firmware and make, and total their pools.
//!
//! The gateway's `/api/fleet/*` routes are a face over this crate: they parse the request, call
//! [`Plan::new`] and [`Fleet::discover`] (or read [`Fleet::last`]) and map the answer.
//!
//! Discovery is bounded on purpose, because it sends traffic to machines the operator may not
//! own: at most [`MAX_HOSTS`] addresses (a /22), LAN addresses only
//! ([`svcos_common::net::is_lan`]), at most [`MAX_CONCURRENCY`] probes in flight, short
//! per-connection deadlines, replies capped at [`MAX_REPLY`] bytes, and one scan at a time. A
//! host counts as a miner when it answers the cgminer `version` command; `summary` and `pools`
//! are then asked on fresh connections (cgminer answers one command per connection).

mod probe;
mod range;
mod stats;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use probe::{
    Identity, Probe, ProbeError, cgminer_command, identify, miner_from_replies, probe,
};
pub use range::expand_range;
pub use stats::{PoolStats, PoolTotal, aggregate};

/// Largest range one discovery scans (a /22).
pub const MAX_HOSTS: usize = 1024;
/// Probes in flight at once.
pub const MAX_CONCURRENCY: usize = 64;
/// Largest cgminer reply read, bytes.
pub const MAX_REPLY: usize = 256 * 1024;
/// The cgminer API port probed unless asked otherwise.
pub const DEFAULT_PORT: u16 = 4028;
/// Per-connection deadline unless asked otherwise, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 800;
/// Accepted per-connection deadlines, ms.
pub const TIMEOUT_MS: std::ops::RangeInclusive<u64> = 50..=5000;

/// One pool as a miner reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MinerPool {
    /// Pool URL.
    pub url: String,
    /// Worker.
    pub user: String,
    /// cgminer status word (Alive, Dead, Disabled).
    pub status: String,
    /// The pool the miner is hashing on.
    pub active: bool,
    /// Accepted shares.
    pub accepted: u64,
    /// Rejected shares.
    pub rejected: u64,
}

/// A miner found by discovery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Miner {
    /// Address.
    pub ip: String,
    /// cgminer API port.
    pub port: u16,
    /// Hardware maker (from the model name), when known.
    pub make: Option<String>,
    /// Model (`Type`).
    pub model: Option<String>,
    /// Firmware family (svcOS, Braiins OS, LuxOS, bmminer, cgminer, ...).
    pub firmware: String,
    /// Firmware version string.
    pub firmware_version: Option<String>,
    /// cgminer API version.
    pub api_version: Option<String>,
    /// Whether the miner runs svcOS.
    pub svcos: bool,
    /// 5 s hashrate, GH/s (`null` when not reported or not a finite number).
    pub hashrate_ghs: Option<f64>,
    /// Average hashrate, GH/s (`null` when not reported or not a finite number).
    pub hashrate_avg_ghs: Option<f64>,
    /// Seconds mining.
    pub uptime_s: Option<u64>,
    /// Accepted shares.
    pub accepted: Option<u64>,
    /// Rejected shares.
    pub rejected: Option<u64>,
    /// Pools.
    pub pools: Vec<MinerPool>,
}

/// The result of one discovery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    /// The range asked for.
    pub range: String,
    /// Port probed.
    pub port: u16,
    /// Started, Unix ms.
    pub started_ms: i64,
    /// Finished, Unix ms.
    pub finished_ms: i64,
    /// Addresses probed.
    pub scanned: usize,
    /// Addresses with something listening that is not a cgminer API.
    pub non_miner_listeners: usize,
    /// Miners, by address.
    pub miners: Vec<Miner>,
}

/// A request member outside its bounds; the gateway names `field` in its 422.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PlanError {
    /// The request member (`range`, `port`, `timeout_ms`, `concurrency`).
    pub field: &'static str,
    /// What is accepted.
    pub message: String,
}

/// A checked discovery request: the expanded addresses and the probe settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The range as asked (trimmed), kept in the result.
    pub range: String,
    /// Addresses to probe, in order.
    pub hosts: Vec<Ipv4Addr>,
    /// Port to probe.
    pub port: u16,
    /// Per-connection deadline.
    pub timeout: Duration,
    /// Probes in flight at once.
    pub concurrency: usize,
}

impl Plan {
    /// Check a request; absent members take the defaults.
    pub fn new(
        range: &str,
        port: Option<u16>,
        timeout_ms: Option<u64>,
        concurrency: Option<usize>,
    ) -> Result<Plan, PlanError> {
        let invalid = |field, message: String| PlanError { field, message };
        let hosts = expand_range(range).map_err(|e| invalid("range", e))?;
        let port = port.unwrap_or(DEFAULT_PORT);
        if port == 0 {
            return Err(invalid("port", "1-65535".into()));
        }
        let timeout_ms = timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if !TIMEOUT_MS.contains(&timeout_ms) {
            return Err(invalid(
                "timeout_ms",
                format!("{}-{} ms", TIMEOUT_MS.start(), TIMEOUT_MS.end()),
            ));
        }
        let concurrency = concurrency.unwrap_or(MAX_CONCURRENCY);
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            return Err(invalid("concurrency", format!("1-{MAX_CONCURRENCY}")));
        }
        Ok(Plan {
            range: range.trim().to_string(),
            hosts,
            port,
            timeout: Duration::from_millis(timeout_ms),
            concurrency,
        })
    }
}

/// Probe every address of a plan, at most `plan.concurrency` at once; miners sorted by address.
pub async fn scan(plan: &Plan, now_ms: &(dyn Fn() -> i64 + Sync)) -> Scan {
    let started_ms = now_ms();
    let gate = Arc::new(tokio::sync::Semaphore::new(plan.concurrency));
    let mut set = tokio::task::JoinSet::new();
    let (port, timeout) = (plan.port, plan.timeout);
    for ip in plan.hosts.iter().copied() {
        let gate = gate.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.ok()?;
            Some(probe(ip, port, timeout).await)
        });
    }
    let mut miners = Vec::new();
    let mut others = 0;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Some(Probe::Miner(m))) => miners.push(*m),
            Ok(Some(Probe::Listener)) => others += 1,
            _ => {}
        }
    }
    miners.sort_by_key(|m| (m.ip.parse::<Ipv4Addr>().map(u32::from).unwrap_or(0), m.port));
    Scan {
        range: plan.range.clone(),
        port,
        started_ms,
        finished_ms: now_ms(),
        scanned: plan.hosts.len(),
        non_miner_listeners: others,
        miners,
    }
}

/// Another discovery is running (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a discovery is already running")]
pub struct Busy;

/// The fleet as this unit last saw it: the last scan (kept in a state file across restarts) and
/// the one-scan-at-a-time lock.
#[derive(Debug)]
pub struct Fleet {
    path: PathBuf,
    last: Mutex<Option<Scan>>,
    running: tokio::sync::Mutex<()>,
}

impl Fleet {
    /// Open the fleet kept in `path` (a missing file is no scan yet; a damaged one is moved
    /// aside by [`svcos_common::statefile::load_json`]).
    pub fn open(path: &Path) -> Fleet {
        Fleet {
            path: path.to_path_buf(),
            last: Mutex::new(svcos_common::statefile::load_json(path)),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// The last scan, if any.
    pub fn last(&self) -> Option<Scan> {
        self.last.lock().expect("fleet lock").clone()
    }

    /// Run a scan (refused while another runs), keep it as the last one and save it atomically.
    pub async fn discover(
        &self,
        plan: &Plan,
        now_ms: &(dyn Fn() -> i64 + Sync),
    ) -> Result<Scan, Busy> {
        let Ok(_one) = self.running.try_lock() else {
            return Err(Busy);
        };
        let result = scan(plan, now_ms).await;
        if let Err(e) = self.save(&result) {
            // The scan is still answered and kept in memory; only a restart forgets it.
            tracing::warn!(path = %self.path.display(), error = %e, "cannot save the fleet scan");
        }
        *self.last.lock().expect("fleet lock") = Some(result.clone());
        Ok(result)
    }

    fn save(&self, scan: &Scan) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            svcos_common::fsutil::ensure_dir(dir, 0o700)?;
        }
        let bytes = serde_json::to_vec_pretty(scan).map_err(std::io::Error::other)?;
        svcos_common::fsutil::atomic_write(&self.path, &bytes, 0o600)
    }
}

/// `x` rounded to `places` decimals (hashrates are shown to 0.01 GH/s).
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

#[cfg(test)]
mod tests;
