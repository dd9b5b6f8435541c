//! One host: the cgminer API client, the probe and the identification of other firmwares.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{MAX_REPLY, Miner, MinerPool, round};

/// Why one cgminer command got no JSON answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No answer in time (connect, write or read).
    #[error("timed out")]
    Timeout,
    /// The connection failed or broke.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Something answered, but not with cgminer JSON.
    #[error("not a cgminer JSON reply: {0}")]
    NotJson(serde_json::Error),
}

impl ProbeError {
    /// Nothing is there: no host, no listener, or no answer in time. Anything else is a listener
    /// that is not a cgminer API.
    pub fn is_silent(&self) -> bool {
        use std::io::ErrorKind::{ConnectionRefused, HostUnreachable, NetworkUnreachable};
        match self {
            ProbeError::Timeout => true,
            ProbeError::Io(e) => matches!(
                e.kind(),
                ConnectionRefused | HostUnreachable | NetworkUnreachable
            ),
            ProbeError::NotJson(_) => false,
        }
    }
}

/// Send one cgminer command and parse the JSON reply (NUL-terminated or closed, at most
/// [`MAX_REPLY`] bytes read).
pub async fn cgminer_command(
    addr: SocketAddr,
    command: &str,
    timeout: Duration,
) -> Result<Value, ProbeError> {
    let work = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(json!({ "command": command }).to_string().as_bytes())
            .await?;
        let mut buf = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.contains(&0) || buf.len() > MAX_REPLY {
                break;
            }
        }
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        serde_json::from_slice::<Value>(&buf[..end]).map_err(ProbeError::NotJson)
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(ProbeError::Timeout))
}

/// Firmware and make as a `version` reply tells them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Firmware family (svcOS, Braiins OS, LuxOS, bmminer, cgminer, ...).
    pub firmware: String,
    /// Firmware version string.
    pub firmware_version: Option<String>,
    /// cgminer API version.
    pub api_version: Option<String>,
    /// Model (`Type`, else `Model`).
    pub model: Option<String>,
    /// Hardware maker, from the model name.
    pub make: Option<String>,
}

/// The member of a `VERSION` record that names each firmware family, most specific first.
const FIRMWARES: [(&str, &str); 7] = [
    ("svcOS", "svcOS"),
    ("BOSer", "Braiins OS"),
    ("BOSminer", "Braiins OS"),
    ("LUXminer", "LuxOS"),
    ("BMMiner", "bmminer (Bitmain stock)"),
    ("CGMiner", "cgminer"),
    ("sgminer", "sgminer"),
];

/// Model-name words that name the maker.
const MAKES: [(&str, &str); 5] = [
    ("antminer", "Bitmain"),
    ("bitaxe", "Bitaxe"),
    ("whatsminer", "MicroBT"),
    ("avalon", "Canaan"),
    ("innosilicon", "Innosilicon"),
];

/// Identify firmware and make from a `version` reply.
pub fn identify(version: &Value) -> Identity {
    let rec = &version["VERSION"][0];
    let member = |k: &str| {
        rec.get(k).and_then(|v| {
            v.as_str()
                .map(str::to_string)
                .or_else(|| (!v.is_null()).then(|| v.to_string()))
        })
    };
    let (firmware, firmware_version) = FIRMWARES
        .iter()
        .find_map(|(key, name)| member(key).map(|v| (name.to_string(), Some(v))))
        .unwrap_or_else(|| ("unknown cgminer-compatible".to_string(), None));
    let model = member("Type")
        .or_else(|| member("Model"))
        .filter(|m| !m.is_empty());
    let make = model.as_deref().and_then(|m| {
        let m = m.to_ascii_lowercase();
        MAKES
            .iter()
            .find(|(word, _)| m.contains(word))
            .map(|(_, make)| make.to_string())
    });
    Identity {
        firmware,
        firmware_version,
        api_version: member("API"),
        model,
        make,
    }
}

/// A number member that some firmwares send as a string.
fn num(v: &Value, key: &str) -> Option<f64> {
    let v = v.get(key)?;
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// A miner from its `version` reply and, when they came, its `summary` and `pools` replies.
pub fn miner_from_replies(
    ip: Ipv4Addr,
    port: u16,
    version: &Value,
    summary: Option<&Value>,
    pools: Option<&Value>,
) -> Miner {
    let id = identify(version);
    let sum = summary.map_or(&Value::Null, |s| &s["SUMMARY"][0]);
    // GH/s when the firmware reports it, else MH/s scaled.
    let ghs = |g: &str, m: &str| num(sum, g).or_else(|| num(sum, m).map(|x| x / 1000.0));
    let pools = pools
        .and_then(|p| p["POOLS"].as_array())
        .map(|list| {
            list.iter()
                .map(|p| MinerPool {
                    url: p["URL"].as_str().unwrap_or_default().to_string(),
                    user: p["User"].as_str().unwrap_or_default().to_string(),
                    status: p["Status"].as_str().unwrap_or_default().to_string(),
                    active: p["Stratum Active"].as_bool().unwrap_or(false),
                    accepted: num(p, "Accepted").unwrap_or(0.0) as u64,
                    rejected: num(p, "Rejected").unwrap_or(0.0) as u64,
                })
                .collect()
        })
        .unwrap_or_default();
    Miner {
        ip: ip.to_string(),
        port,
        svcos: id.firmware == "svcOS",
        make: id.make,
        model: id.model,
        firmware: id.firmware,
        firmware_version: id.firmware_version,
        api_version: id.api_version,
        hashrate_ghs: ghs("GHS 5s", "MHS 5s").map(|x| round(x, 2)),
        hashrate_avg_ghs: ghs("GHS av", "MHS av").map(|x| round(x, 2)),
        uptime_s: num(sum, "Elapsed").map(|x| x as u64),
        accepted: num(sum, "Accepted").map(|x| x as u64),
        rejected: num(sum, "Rejected").map(|x| x as u64),
        pools,
    }
}

/// What one address turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// Nothing answered.
    Silent,
    /// Something listens, but it is not a cgminer API.
    Listener,
    /// A miner.
    Miner(Box<Miner>),
}

/// Probe one address: `version` decides; `summary` and `pools` fill in what they can.
pub async fn probe(ip: Ipv4Addr, port: u16, timeout: Duration) -> Probe {
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    let version = match cgminer_command(addr, "version", timeout).await {
        Ok(v) if v.get("VERSION").is_some() => v,
        Ok(_) => return Probe::Listener,
        Err(e) if e.is_silent() => return Probe::Silent,
        Err(_) => return Probe::Listener,
    };
    let summary = cgminer_command(addr, "summary", timeout).await.ok();
    let pools = cgminer_command(addr, "pools", timeout).await.ok();
    Probe::Miner(Box::new(miner_from_replies(
        ip,
        port,
        &version,
        summary.as_ref(),
        pools.as_ref(),
    )))
}
