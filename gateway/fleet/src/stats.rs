//! Pool totals over a scan.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{Scan, round};

/// One pool URL across the scanned miners.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolTotal {
    /// Pool URL.
    pub url: String,
    /// Miners that list it.
    pub miners_configured: usize,
    /// Miners hashing on it now.
    pub miners_active: usize,
    /// 5 s hashrate of the miners hashing on it, GH/s. Miners report it, so it can sum to a
    /// non-finite number, which serialises as `null`.
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub hashrate_ghs: f64,
    /// Accepted shares reported for it.
    pub accepted: u64,
    /// Rejected shares reported for it.
    pub rejected: u64,
}

/// Totals over one scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStats {
    /// Miners found.
    pub miners: usize,
    /// Their summed 5 s hashrate, GH/s.
    pub total_hashrate_ghs: f64,
    /// When the scan finished, Unix ms.
    pub scan_finished_ms: i64,
    /// Per pool URL, sorted by URL.
    pub pools: Vec<PoolTotal>,
}

/// Totals per pool URL over a scan: miners configured, miners hashing on it, their hashrate.
pub fn aggregate(scan: &Scan) -> PoolStats {
    let mut pools = BTreeMap::<&str, PoolTotal>::new();
    for m in &scan.miners {
        for p in &m.pools {
            let t = pools.entry(&p.url).or_insert_with(|| PoolTotal {
                url: p.url.clone(),
                miners_configured: 0,
                miners_active: 0,
                hashrate_ghs: 0.0,
                accepted: 0,
                rejected: 0,
            });
            t.miners_configured += 1;
            t.accepted += p.accepted;
            t.rejected += p.rejected;
            if p.active {
                t.miners_active += 1;
                t.hashrate_ghs += m.hashrate_ghs.unwrap_or(0.0);
            }
        }
    }
    let total: f64 = scan.miners.iter().filter_map(|m| m.hashrate_ghs).sum();
    PoolStats {
        miners: scan.miners.len(),
        total_hashrate_ghs: round(total, 2),
        scan_finished_ms: scan.finished_ms,
        pools: pools
            .into_values()
            .map(|t| PoolTotal {
                hashrate_ghs: round(t.hashrate_ghs, 2),
                ..t
            })
            .collect(),
    }
}
