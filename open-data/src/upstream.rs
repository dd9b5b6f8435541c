//! Hashprice upstreams: a Bitcoin Core-compatible JSON-RPC or an Esplora-style REST source for
//! the chain, and a JSON price source in USD and CAD. Parsing is pure and unit-tested; the
//! fetches go through [`crate::client`].

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::client::{self, FetchError, Url};
use crate::hashprice::{ChainState, Price, subsidy};

/// The chain upstream used when none is given: Blockstream's public Esplora instance (no key).
/// `--esplora-url` (any Esplora-compatible base, e.g. a mempool.space instance's `/api`) or
/// `--bitcoind-rpc` overrides it; `--offline` turns every upstream off.
pub const DEFAULT_ESPLORA_URL: &str = "https://blockstream.info/api";
/// The price upstream used when none is given: CoinGecko's public simple-price endpoint in USD
/// and CAD (no key). `--price-url` overrides it.
pub const DEFAULT_PRICE_URL: &str =
    "https://api.coingecko.com/api/v3/simple/price?ids=bitcoin&vs_currencies=usd,cad";

/// Deadline of one upstream exchange.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// Why an upstream could not give a value.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Transport.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The answer was not what the protocol promises.
    #[error("{source_name}: {message}")]
    Bad {
        /// Which upstream.
        source_name: String,
        /// What was wrong.
        message: String,
    },
}

fn bad(source_name: &str, message: impl Into<String>) -> UpstreamError {
    UpstreamError::Bad {
        source_name: source_name.to_string(),
        message: message.into(),
    }
}

/// Where chain data comes from.
#[derive(Debug, Clone)]
pub enum ChainSource {
    /// Bitcoin Core JSON-RPC (getblockcount, getdifficulty, getblockstats).
    Rpc(Url),
    /// Esplora REST (blocks/tip/height, blocks/{h}, block/{hash}/txs/0).
    Esplora(Url),
}

impl ChainSource {
    /// Label for the record and the logs (host only, never credentials).
    pub fn label(&self) -> String {
        match self {
            ChainSource::Rpc(u) => format!("bitcoind-rpc {}", u.host_port()),
            ChainSource::Esplora(u) => format!("esplora {}", u.host_port()),
        }
    }

    /// Read height, difficulty and mean fees over the last `fee_blocks` blocks.
    pub async fn fetch(&self, fee_blocks: u64) -> Result<ChainState, UpstreamError> {
        match self {
            ChainSource::Rpc(u) => rpc_chain(u, fee_blocks).await,
            ChainSource::Esplora(u) => esplora_chain(u, fee_blocks).await,
        }
    }
}

async fn rpc_batch(url: &Url, calls: &[(&str, Value)]) -> Result<Vec<Value>, UpstreamError> {
    let batch: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (m, p))| json!({"jsonrpc": "1.0", "id": i, "method": m, "params": p}))
        .collect();
    let body = serde_json::to_vec(&batch).unwrap_or_default();
    let raw = match client::fetch(url, Some(body), TIMEOUT).await {
        Ok(b) => b,
        // Bitcoin Core answers RPC errors with HTTP 500 and a JSON body worth reporting.
        Err(FetchError::Status { body, status, .. }) if !body.is_empty() => {
            return Err(bad(
                "bitcoind-rpc",
                format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    parse_rpc_batch(&raw, calls.len()).map_err(|m| bad("bitcoind-rpc", m))
}

/// Results of a JSON-RPC batch answer in call order; an error object fails the batch.
pub fn parse_rpc_batch(raw: &[u8], n: usize) -> Result<Vec<Value>, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| format!("not JSON: {e}"))?;
    let items = v
        .as_array()
        .ok_or("a batch call was not answered with an array")?;
    let mut out = vec![Value::Null; n];
    let mut seen = vec![false; n];
    for item in items {
        let id = item["id"].as_u64().ok_or("an answer has no numeric id")? as usize;
        if id >= n {
            return Err(format!("answer id {id} was never asked"));
        }
        if !item["error"].is_null() {
            return Err(format!("call {id}: {}", item["error"]));
        }
        out[id] = item["result"].clone();
        seen[id] = true;
    }
    if seen.iter().any(|s| !s) {
        return Err("some calls were not answered".into());
    }
    Ok(out)
}

async fn rpc_chain(url: &Url, fee_blocks: u64) -> Result<ChainState, UpstreamError> {
    let head = rpc_batch(
        url,
        &[("getblockcount", json!([])), ("getdifficulty", json!([]))],
    )
    .await?;
    let height = head[0]
        .as_u64()
        .ok_or_else(|| bad("bitcoind-rpc", "getblockcount is not a number"))?;
    let difficulty = positive(&head[1])
        .ok_or_else(|| bad("bitcoind-rpc", "getdifficulty is not a positive number"))?;
    let n = fee_blocks.min(height + 1);
    let calls: Vec<(&str, Value)> = (0..n)
        .map(|i| ("getblockstats", json!([height - i, ["totalfee", "height"]])))
        .collect();
    let stats = if calls.is_empty() {
        Vec::new()
    } else {
        rpc_batch(url, &calls).await?
    };
    let mut total = 0.0;
    for s in &stats {
        let fee = s["totalfee"]
            .as_u64()
            .ok_or_else(|| bad("bitcoind-rpc", "getblockstats has no totalfee"))?;
        total += fee as f64;
    }
    Ok(ChainState {
        height,
        difficulty,
        avg_fees_sat: if n == 0 { 0.0 } else { total / n as f64 },
        fee_blocks: n,
    })
}

fn positive(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite() && *x > 0.0)
}

/// Difficulty from a block header's compact target (`bits`), with rust-bitcoin.
pub fn difficulty_from_bits(bits: u32) -> f64 {
    bitcoin::Target::from_compact(bitcoin::CompactTarget::from_consensus(bits)).difficulty_float()
}

/// Fees of a block from its coinbase outputs: what the coinbase claims beyond the subsidy.
pub fn fees_from_coinbase(height: u64, coinbase: &Value) -> Result<u64, String> {
    let outs = coinbase["vout"].as_array().ok_or("coinbase has no vout")?;
    let mut claimed: u64 = 0;
    for o in outs {
        claimed =
            claimed.saturating_add(o["value"].as_u64().ok_or("vout value is not an integer")?);
    }
    Ok(claimed.saturating_sub(subsidy(height).to_sat()))
}

async fn esplora_json(url: &Url, path: &str) -> Result<Value, UpstreamError> {
    let raw = client::fetch(&url.join(path), None, TIMEOUT).await?;
    serde_json::from_slice(&raw).map_err(|e| bad("esplora", format!("{path}: not JSON: {e}")))
}

/// The fees of the blocks the last refresh from each Esplora read, by block hash. A block's coinbase
/// never changes for its hash, so a refresh fetches only the coinbases of blocks it has not
/// seen: about 160 requests for the first 144-block window, then the ten-block pages and one
/// coinbase per new block (a public upstream's rate limit is spent on news, not repeats).
type Fees = HashMap<String, u64>;
static ESPLORA_FEES: LazyLock<Mutex<HashMap<String, Fees>>> = LazyLock::new(Mutex::default);

async fn esplora_chain(url: &Url, fee_blocks: u64) -> Result<ChainState, UpstreamError> {
    let tip = esplora_json(url, "/blocks/tip/height").await?;
    let height = tip
        .as_u64()
        .ok_or_else(|| bad("esplora", "tip height is not a number"))?;
    let n = fee_blocks.min(height + 1);
    let mut blocks: Vec<Value> = Vec::new();
    let mut next = height;
    // /blocks/{h} lists up to ten blocks from h downwards.
    loop {
        let page = esplora_json(url, &format!("/blocks/{next}")).await?;
        let page = page.as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            break;
        }
        blocks.extend(page);
        let lowest = blocks
            .last()
            .and_then(|b| b["height"].as_u64())
            .unwrap_or(0);
        if blocks.len() as u64 >= n.max(1) || lowest == 0 {
            break;
        }
        next = lowest - 1;
    }
    let tip_block = blocks
        .first()
        .ok_or_else(|| bad("esplora", "no blocks listed at the tip"))?;
    let bits = tip_block["bits"]
        .as_u64()
        .ok_or_else(|| bad("esplora", "tip block has no bits"))?;
    let difficulty = difficulty_from_bits(bits as u32);
    let mut total = 0.0;
    let source = format!("{}{}", url.host_port(), url.path);
    let known = ESPLORA_FEES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&source)
        .cloned()
        .unwrap_or_default();
    let mut window = HashMap::new();
    for b in blocks.iter().take(n as usize) {
        let h = b["height"]
            .as_u64()
            .ok_or_else(|| bad("esplora", "block without height"))?;
        let hash = b["id"]
            .as_str()
            .ok_or_else(|| bad("esplora", "block without id"))?;
        let fee = match known.get(hash) {
            Some(&fee) => fee,
            None => {
                let txs = esplora_json(url, &format!("/block/{hash}/txs/0")).await?;
                fees_from_coinbase(h, &txs[0])
                    .map_err(|m| bad("esplora", format!("block {h}: {m}")))?
            }
        };
        window.insert(hash.to_string(), fee);
        total += fee as f64;
    }
    // Only the window just read is kept, so the map never grows past `fee_blocks` entries.
    ESPLORA_FEES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(source, window);
    Ok(ChainState {
        height,
        difficulty,
        avg_fees_sat: if n == 0 { 0.0 } else { total / n as f64 },
        fee_blocks: n,
    })
}

/// Parse a price answer: `{"USD": n, "CAD": n}` (extra members ignored, key case ignored), or
/// the CoinGecko simple-price shape `{"bitcoin": {"usd": n, "cad": n}}`.
pub fn parse_price(v: &Value) -> Result<Price, String> {
    let obj = v
        .get("bitcoin")
        .filter(|b| b.is_object())
        .unwrap_or(v)
        .as_object()
        .ok_or("price answer is not a JSON object")?;
    let get = |want: &str| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(want))
            .and_then(|(_, v)| positive(v))
            .ok_or(format!("price answer has no positive {want}"))
    };
    Ok(Price {
        usd: get("usd")?,
        cad: get("cad")?,
    })
}

/// Fetch and parse the price source.
pub async fn fetch_price(url: &Url) -> Result<Price, UpstreamError> {
    let raw = client::fetch(url, None, TIMEOUT).await?;
    let v: Value =
        serde_json::from_slice(&raw).map_err(|e| bad("price", format!("not JSON: {e}")))?;
    parse_price(&v).map_err(|m| bad("price", m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_shapes() {
        let p = parse_price(&json!({"time": 1, "USD": 100000, "CAD": 140000.5, "EUR": 1})).unwrap();
        assert_eq!((p.usd, p.cad), (100000.0, 140000.5));
        let p = parse_price(&json!({"bitcoin": {"usd": 1.5, "cad": 2}})).unwrap();
        assert_eq!((p.usd, p.cad), (1.5, 2.0));
        assert!(parse_price(&json!({"USD": 1})).unwrap_err().contains("cad"));
        assert!(parse_price(&json!({"USD": -1, "CAD": 1})).is_err());
        assert!(parse_price(&json!([1])).is_err());
    }

    #[test]
    fn rpc_batches() {
        let raw = br#"[{"id":1,"result":2.5,"error":null},{"id":0,"result":7,"error":null}]"#;
        assert_eq!(parse_rpc_batch(raw, 2).unwrap(), vec![json!(7), json!(2.5)]);
        let raw = br#"[{"id":0,"result":null,"error":{"code":-8,"message":"x"}}]"#;
        assert!(parse_rpc_batch(raw, 1).unwrap_err().contains("-8"));
        assert!(parse_rpc_batch(br#"[{"id":0,"result":1,"error":null}]"#, 2).is_err());
    }

    #[test]
    fn bits_and_coinbase() {
        // Genesis bits: difficulty 1.
        assert!((difficulty_from_bits(0x1d00ffff) - 1.0).abs() < 1e-12);
        // Block 840 000: subsidy 3.125 BTC; coinbase claiming 3.2 BTC paid 0.075 BTC in fees.
        let cb =
            json!({"vout": [{"value": 300_000_000u64}, {"value": 20_000_000u64}, {"value": 0}]});
        assert_eq!(fees_from_coinbase(840_000, &cb).unwrap(), 7_500_000);
    }
}
