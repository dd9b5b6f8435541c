//! Fleet discovery over the cgminer API (TCP 4028), the last scan's miners and pool totals,
//! and network block data derived from the current pool job.
//!
//! Discovery is bounded on purpose: at most [`MAX_HOSTS`] addresses (a /22), LAN addresses
//! only, at most [`MAX_CONCURRENCY`] probes in flight, short per-connection deadlines, and one
//! scan at a time. A host counts as a miner when it answers the cgminer `version` command;
//! `summary` and `pools` are then asked on fresh connections (cgminer answers one command per
//! connection).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use svcos_proto::stratum::v1::{JobTemplate, StreamJobsRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_stream::StreamExt;

use super::{state_dir, write_json};
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, json, parse_body, round};
use crate::routing::Route;
use crate::{AppState, route};
use svcos_common::net::is_lan;

/// Largest range one discovery scans (a /22).
pub const MAX_HOSTS: usize = 1024;
/// Probes in flight at once.
pub const MAX_CONCURRENCY: usize = 64;
/// Largest cgminer reply read, bytes.
const MAX_REPLY: usize = 256 * 1024;

/// The last discovery (kept in the state directory) and the one-at-a-time lock.
#[derive(Debug)]
struct FleetState {
    last: std::sync::Mutex<Option<Scan>>,
    scan: tokio::sync::Mutex<()>,
}

fn fleet_state(state: &AppState) -> std::sync::Arc<FleetState> {
    state.group_state(|| FleetState {
        last: std::sync::Mutex::new(super::read_json(&state_dir(state).join("fleet-scan.json"))),
        scan: tokio::sync::Mutex::new(()),
    })
}

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/fleet/discover", Bearer, P, Fleet, Full, "Scan a LAN range (<= /22) for cgminer-API miners on TCP 4028", discover),
        route!(GET "/api/fleet/miners", Bearer, P, Fleet, Full, "Miners found by the last discovery", miners),
        route!(GET "/api/fleet/pool-stats", Bearer, P, Fleet, Full, "Pools and hashrate aggregated over the last discovery", pool_stats),
        route!(GET "/api/network/block", Bearer, P, Fleet, Full, "Network block data from the current pool job (prev hash, BIP34 height, difficulty)", network_block),
        route!(GET "/api/network/config_schema", Bearer, P, Fleet, Full, "JSON Schema of the network-related config", config_schema),
    ]
}

/// Expand a range: `a.b.c.d`, `a.b.c.d/nn` or `a.b.c.d-a.b.c.e` (IPv4, LAN only, bounded).
pub fn expand_range(range: &str) -> Result<Vec<Ipv4Addr>, String> {
    let range = range.trim();
    let (first, last) = if let Some((net, len)) = range.split_once('/') {
        let net: Ipv4Addr = net
            .trim()
            .parse()
            .map_err(|_| format!("{net} is not an IPv4 address"))?;
        let len: u32 = len
            .trim()
            .parse()
            .map_err(|_| format!("/{len} is not a prefix length"))?;
        if len > 32 {
            return Err("prefix length is 0-32".into());
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let base = u32::from(net) & mask;
        (base, base | !mask)
    } else if let Some((a, b)) = range.split_once('-') {
        let a: Ipv4Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("{a} is not an IPv4 address"))?;
        let b: Ipv4Addr = b
            .trim()
            .parse()
            .map_err(|_| format!("{b} is not an IPv4 address"))?;
        (u32::from(a), u32::from(b))
    } else {
        let a: Ipv4Addr = range
            .parse()
            .map_err(|_| format!("{range} is not an IPv4 address, CIDR or a-b range"))?;
        (u32::from(a), u32::from(a))
    };
    if last < first {
        return Err("the range ends before it starts".into());
    }
    let count = u64::from(last - first) + 1;
    if count > MAX_HOSTS as u64 {
        return Err(format!(
            "{count} addresses: at most {MAX_HOSTS} (a /22) per scan"
        ));
    }
    let hosts: Vec<Ipv4Addr> = (first..=last).map(Ipv4Addr::from).collect();
    if let Some(bad) = hosts.iter().find(|ip| !is_lan(IpAddr::V4(**ip))) {
        return Err(format!(
            "{bad} is not a LAN address (private, loopback or link-local only)"
        ));
    }
    Ok(hosts)
}

/// Send one cgminer command and parse the JSON reply (NUL-terminated or closed).
pub async fn cgminer(addr: SocketAddr, command: &str, timeout: Duration) -> Result<Value, String> {
    let work = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(json!({"command": command}).to_string().as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.contains(&0) || buf.len() > MAX_REPLY {
                break;
            }
        }
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        serde_json::from_slice::<Value>(&buf[..end])
            .map_err(|e| format!("not a cgminer JSON reply: {e}"))
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// One pool as a miner reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// 5 s hashrate, GH/s.
    pub hashrate_ghs: Option<f64>,
    /// Average hashrate, GH/s.
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

/// Identify firmware and make from a `version` reply.
pub fn identify(
    version: &Value,
) -> (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let rec = &version["VERSION"][0];
    let s = |k: &str| {
        rec.get(k).and_then(|v| {
            v.as_str()
                .map(str::to_string)
                .or_else(|| (!v.is_null()).then(|| v.to_string()))
        })
    };
    let (firmware, fw_version) = [
        ("svcOS", "svcOS"),
        ("BOSer", "Braiins OS"),
        ("BOSminer", "Braiins OS"),
        ("LUXminer", "LuxOS"),
        ("BMMiner", "bmminer (Bitmain stock)"),
        ("CGMiner", "cgminer"),
        ("sgminer", "sgminer"),
    ]
    .iter()
    .find_map(|(key, name)| s(key).map(|v| (name.to_string(), Some(v))))
    .unwrap_or_else(|| ("unknown cgminer-compatible".to_string(), None));
    let model = s("Type").or_else(|| s("Model")).filter(|m| !m.is_empty());
    let make = model.as_deref().and_then(|m| {
        let m = m.to_ascii_lowercase();
        [
            ("antminer", "Bitmain"),
            ("bitaxe", "Bitaxe"),
            ("whatsminer", "MicroBT"),
            ("avalon", "Canaan"),
            ("innosilicon", "Innosilicon"),
        ]
        .iter()
        .find(|(k, _)| m.contains(k))
        .map(|(_, v)| v.to_string())
    });
    (firmware, fw_version, s("API"), model, make)
}

fn num(v: &Value, key: &str) -> Option<f64> {
    let v = v.get(key)?;
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

async fn probe(ip: Ipv4Addr, port: u16, timeout: Duration) -> Result<Option<Miner>, ()> {
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    let version = match cgminer(addr, "version", timeout).await {
        Ok(v) if v.get("VERSION").is_some() => v,
        Ok(_) => return Err(()),
        Err(e) if e.contains("refused") || e.contains("timed out") || e.contains("unreachable") => {
            return Ok(None);
        }
        Err(_) => return Err(()),
    };
    let (firmware, firmware_version, api_version, model, make) = identify(&version);
    let summary = cgminer(addr, "summary", timeout).await.ok();
    let pools = cgminer(addr, "pools", timeout).await.ok();
    let sum = summary
        .as_ref()
        .map(|s| s["SUMMARY"][0].clone())
        .unwrap_or(Value::Null);
    let ghs = |g: &str, m: &str| num(&sum, g).or_else(|| num(&sum, m).map(|x| x / 1000.0));
    let pools = pools
        .as_ref()
        .and_then(|p| p["POOLS"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|p| MinerPool {
            url: p["URL"].as_str().unwrap_or_default().to_string(),
            user: p["User"].as_str().unwrap_or_default().to_string(),
            status: p["Status"].as_str().unwrap_or_default().to_string(),
            active: p["Stratum Active"].as_bool().unwrap_or(false),
            accepted: num(p, "Accepted").unwrap_or(0.0) as u64,
            rejected: num(p, "Rejected").unwrap_or(0.0) as u64,
        })
        .collect();
    Ok(Some(Miner {
        ip: ip.to_string(),
        port,
        svcos: firmware == "svcOS",
        make,
        model,
        firmware,
        firmware_version,
        api_version,
        hashrate_ghs: ghs("GHS 5s", "MHS 5s").map(|x| round(x, 2)),
        hashrate_avg_ghs: ghs("GHS av", "MHS av").map(|x| round(x, 2)),
        uptime_s: num(&sum, "Elapsed").map(|x| x as u64),
        accepted: num(&sum, "Accepted").map(|x| x as u64),
        rejected: num(&sum, "Rejected").map(|x| x as u64),
        pools,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoverBody {
    range: String,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    concurrency: Option<usize>,
}

fn invalid(field: &str, message: String) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("invalid value for {field}"),
    )
    .code(ErrorCode::UnclassifiedError)
    .detail(message)
    .with("field", field)
}

async fn discover(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: DiscoverBody = parse_body(&headers, &body)?;
    let hosts = expand_range(&b.range).map_err(|e| invalid("range", e))?;
    let port = b.port.unwrap_or(4028);
    if port == 0 {
        return Err(invalid("port", "1-65535".into()));
    }
    let timeout_ms = b.timeout_ms.unwrap_or(800);
    if !(50..=5000).contains(&timeout_ms) {
        return Err(invalid("timeout_ms", "50-5000 ms".into()));
    }
    let concurrency = b.concurrency.unwrap_or(MAX_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Err(invalid("concurrency", format!("1-{MAX_CONCURRENCY}")));
    }
    let fleet = fleet_state(&state);
    let Ok(_one) = fleet.scan.try_lock() else {
        return Err(
            ApiError::new(StatusCode::CONFLICT, "a discovery is already running")
                .code(ErrorCode::UnclassifiedError)
                .suggestion("wait for it to finish, then GET /api/fleet/miners"),
        );
    };
    let started_ms = state.clock.now_ms();
    let timeout = Duration::from_millis(timeout_ms);
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut set = tokio::task::JoinSet::new();
    for ip in hosts.iter().copied() {
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
            Ok(Some(Ok(Some(m)))) => miners.push(m),
            Ok(Some(Err(()))) => others += 1,
            _ => {}
        }
    }
    miners.sort_by_key(|m| (m.ip.parse::<Ipv4Addr>().map(u32::from).unwrap_or(0), m.port));
    let scan = Scan {
        range: b.range.trim().to_string(),
        port,
        started_ms,
        finished_ms: state.clock.now_ms(),
        scanned: hosts.len(),
        non_miner_listeners: others,
        miners,
    };
    write_json(&state_dir(&state).join("fleet-scan.json"), &scan);
    *fleet.last.lock().expect("fleet lock") = Some(scan.clone());
    Ok(json(scan_body(&scan)))
}

fn scan_body(scan: &Scan) -> Value {
    json!({
        "schema": "svcos.api.fleet.miners.v1",
        "range": scan.range, "port": scan.port,
        "started_ms": scan.started_ms, "finished_ms": scan.finished_ms,
        "scanned": scan.scanned, "non_miner_listeners": scan.non_miner_listeners,
        "count": scan.miners.len(),
        "miners": scan.miners,
    })
}

async fn miners(State(state): State<AppState>) -> Response {
    match fleet_state(&state)
        .last
        .lock()
        .expect("fleet lock")
        .as_ref()
    {
        Some(scan) => json(scan_body(scan)),
        None => json(json!({
            "schema": "svcos.api.fleet.miners.v1", "count": 0, "miners": [],
            "scanned": 0, "note": "no discovery yet: POST /api/fleet/discover {\"range\": \"192.168.1.0/24\"}",
        })),
    }
}

/// Totals per pool URL over a scan: miners configured, miners hashing on it, their hashrate.
pub fn aggregate(scan: &Scan) -> Value {
    let mut pools: std::collections::BTreeMap<String, (usize, usize, f64, u64, u64)> =
        Default::default();
    for m in &scan.miners {
        for p in &m.pools {
            let e = pools.entry(p.url.clone()).or_default();
            e.0 += 1;
            e.3 += p.accepted;
            e.4 += p.rejected;
            if p.active {
                e.1 += 1;
                e.2 += m.hashrate_ghs.unwrap_or(0.0);
            }
        }
    }
    let total: f64 = scan.miners.iter().filter_map(|m| m.hashrate_ghs).sum();
    json!({
        "schema": "svcos.api.fleet.pool_stats.v1",
        "miners": scan.miners.len(),
        "total_hashrate_ghs": round(total, 2),
        "scan_finished_ms": scan.finished_ms,
        "pools": pools.into_iter().map(|(url, (configured, active, ghs, acc, rej))| json!({
            "url": url, "miners_configured": configured, "miners_active": active,
            "hashrate_ghs": round(ghs, 2), "accepted": acc, "rejected": rej,
        })).collect::<Vec<_>>(),
    })
}

async fn pool_stats(State(state): State<AppState>) -> Response {
    match fleet_state(&state)
        .last
        .lock()
        .expect("fleet lock")
        .as_ref()
    {
        Some(scan) => json(aggregate(scan)),
        None => json(
            json!({"schema": "svcos.api.fleet.pool_stats.v1", "miners": 0,
            "total_hashrate_ghs": 0.0, "pools": [], "note": "no discovery yet"}),
        ),
    }
}

/// Network difficulty of compact bits (difficulty-1 target / target).
pub fn nbits_difficulty(nbits: u32) -> Option<f64> {
    let exponent = (nbits >> 24) as i32;
    let mantissa = f64::from(nbits & 0x007f_ffff);
    if mantissa == 0.0 || nbits & 0x0080_0000 != 0 {
        return None;
    }
    // diff1 = 0xffff * 256^(0x1d - 3); target = mantissa * 256^(exponent - 3).
    Some(f64::from(0xffff_u32) / mantissa * 256f64.powi(0x1d - exponent))
}

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let first = *b.get(*at)?;
    *at += 1;
    let len = match first {
        0xfd => 2,
        0xfe => 4,
        0xff => 8,
        n => return Some(u64::from(n)),
    };
    let bytes = b.get(*at..*at + len)?;
    *at += len;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
    )
}

/// The BIP34 block height at the start of the coinbase scriptSig (in `coinb1`).
pub fn bip34_height(coinb1: &[u8]) -> Option<u64> {
    let mut at = 4; // version
    if read_varint(coinb1, &mut at)? != 1 {
        return None; // a coinbase has exactly one input
    }
    at += 36; // null prevout
    let _script_len = read_varint(coinb1, &mut at)?;
    let op = *coinb1.get(at)?;
    match op {
        0x51..=0x60 => Some(u64::from(op - 0x50)),
        1..=8 => {
            let n = op as usize;
            let bytes = coinb1.get(at + 1..at + 1 + n)?;
            if bytes.last()? & 0x80 != 0 {
                return None; // negative: not a height
            }
            Some(
                bytes
                    .iter()
                    .rev()
                    .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
            )
        }
        _ => None,
    }
}

/// Block hash in display order from header-order bytes.
pub fn display_hash(header_order: &[u8]) -> String {
    let mut b = header_order.to_vec();
    b.reverse();
    hex::encode(b)
}

async fn current_job(state: &AppState) -> ApiResult<JobTemplate> {
    let mut s = state.peers.stratum.clone();
    let mut stream = s
        .stream_jobs(StreamJobsRequest {})
        .await
        .map_err(|e| ApiError::from_grpc("stratum-agent", &e))?
        .into_inner();
    match tokio::time::timeout(Duration::from_secs(3), stream.next()).await {
        Ok(Some(Ok(job))) => Ok(job),
        Ok(Some(Err(e))) => Err(ApiError::from_grpc("stratum-agent", &e)),
        _ => Err(
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no pool job yet")
                .code(ErrorCode::UnclassifiedError)
                .detail("block data comes from the current pool job; no pool has sent one")
                .suggestion("check GET /api/pools"),
        ),
    }
}

async fn network_block(State(state): State<AppState>) -> ApiResult {
    let job = current_job(&state).await?;
    let pool_url = state.pools().and_then(|p| {
        p.pools
            .into_iter()
            .find(|x| x.index == job.pool_index)
            .map(|x| x.url)
    });
    Ok(json(json!({
        "schema": "svcos.api.network.block.v1",
        "source": "current pool job (mining.notify); no internet lookup",
        "height": bip34_height(&job.coinb1),
        "previous_block_hash": display_hash(&job.prev_hash),
        "nbits": format!("{:08x}", job.nbits),
        "network_difficulty": nbits_difficulty(job.nbits),
        "version": format!("{:08x}", job.version),
        "ntime": job.ntime,
        "job_id": job.job_id,
        "pool_index": job.pool_index,
        "pool_url": pool_url,
        "share_difficulty": job.share_difficulty,
        "donation_job": job.donation,
        "received_at_ms": job.received_at_us / 1000,
    })))
}

async fn config_schema(State(_state): State<AppState>) -> Response {
    json(json!({
        "schema": "svcos.api.network.config_schema.v1",
        // The whole config file's schema, derived from the config types (docs/config.schema.json);
        // network members: system.hostname, api, legacy, energy.*.source_url.
        "json_schema": crate::handlers::config_json_schema(),
        "outbound": {
            "pools": "Stratum V1/V2 to the configured pools only",
            "energy_sources": "http:// GET to LAN addresses only",
            "fleet_discovery": "TCP 4028 to LAN addresses only, on request",
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_bounded_and_lan_only() {
        assert_eq!(expand_range("127.0.0.0/29").unwrap().len(), 8);
        assert_eq!(expand_range("192.168.1.10-192.168.1.12").unwrap().len(), 3);
        assert_eq!(
            expand_range("10.0.0.7").unwrap(),
            vec![Ipv4Addr::new(10, 0, 0, 7)]
        );
        assert_eq!(expand_range("10.0.0.0/22").unwrap().len(), 1024);
        assert!(expand_range("10.0.0.0/21").unwrap_err().contains("at most"));
        assert!(expand_range("8.8.8.0/30").unwrap_err().contains("LAN"));
        assert!(expand_range("10.0.0.9-10.0.0.1").is_err());
        assert!(expand_range("nonsense").is_err());
    }

    #[test]
    fn difficulty_from_nbits() {
        assert_eq!(nbits_difficulty(0x1d00ffff), Some(1.0));
        // Block 840000.
        let d = nbits_difficulty(0x17034219).unwrap();
        assert!((d / 86_388_558_925_171.02 - 1.0).abs() < 1e-9, "{d}");
    }

    #[test]
    fn height_from_coinbase() {
        let mut c = vec![1, 0, 0, 0, 1];
        c.extend([0; 32]);
        c.extend([0xff; 4]);
        c.push(20);
        c.extend([3, 0x40, 0xd1, 0x0c]); // 840000
        assert_eq!(bip34_height(&c), Some(840_000));
        let mut small = c.clone();
        small[42] = 0x51 + 4; // OP_5
        assert_eq!(bip34_height(&small[..43]), Some(5));
    }

    #[test]
    fn identification() {
        let v = json!({"VERSION": [{"svcOS": "0.1.0", "API": "3.1", "Type": "Antminer S9"}]});
        let (fw, ver, api, model, make) = identify(&v);
        assert_eq!(
            (fw.as_str(), ver.as_deref(), api.as_deref()),
            ("svcOS", Some("0.1.0"), Some("3.1"))
        );
        assert_eq!(
            (model.as_deref(), make.as_deref()),
            (Some("Antminer S9"), Some("Bitmain"))
        );
        let v =
            json!({"VERSION": [{"BMMiner": "2.0.0", "API": "3.1", "Type": "Antminer S19j Pro"}]});
        assert_eq!(identify(&v).0, "bmminer (Bitmain stock)");
    }
}
