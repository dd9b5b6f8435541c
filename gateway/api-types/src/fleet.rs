//! Fleet discovery: `POST /api/fleet/discover`, `GET /api/fleet/miners` and
//! `GET /api/fleet/pool-stats`. The scan and its totals are svcos-fleet's own types; these
//! bodies frame them, with the scan's members `null` before the first discovery.

use serde::Serialize;
use svcos_fleet::{Miner, PoolStats, PoolTotal, Scan};

/// What the bodies say before any discovery ran.
const NO_DISCOVERY: &str =
    "no discovery yet: POST /api/fleet/discover {\"range\": \"192.168.1.0/24\"}";

/// `POST /api/fleet/discover`, `GET /api/fleet/miners` (`svcos.api.fleet.miners.v1`): the last
/// scan (the members about the scan are `null` before the first one).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetMinersBody {
    /// `svcos.api.fleet.miners.v1`.
    pub schema: &'static str,
    /// The range scanned.
    pub range: Option<String>,
    /// The port probed.
    pub port: Option<u16>,
    /// Scan start, Unix ms.
    pub started_ms: Option<i64>,
    /// Scan end, Unix ms.
    pub finished_ms: Option<i64>,
    /// Addresses probed (0 before the first discovery).
    pub scanned: usize,
    /// Addresses with something listening that is not a cgminer API.
    pub non_miner_listeners: Option<usize>,
    /// Miners found.
    pub count: usize,
    /// The miners, by address.
    pub miners: Vec<Miner>,
    /// How to run a discovery (`null` once one ran).
    pub note: Option<&'static str>,
}

impl FleetMinersBody {
    /// The body of the last scan, or of none.
    pub fn new(scan: Option<&Scan>) -> Self {
        let Some(s) = scan else {
            return FleetMinersBody {
                schema: "svcos.api.fleet.miners.v1",
                range: None,
                port: None,
                started_ms: None,
                finished_ms: None,
                scanned: 0,
                non_miner_listeners: None,
                count: 0,
                miners: Vec::new(),
                note: Some(NO_DISCOVERY),
            };
        };
        FleetMinersBody {
            schema: "svcos.api.fleet.miners.v1",
            range: Some(s.range.clone()),
            port: Some(s.port),
            started_ms: Some(s.started_ms),
            finished_ms: Some(s.finished_ms),
            scanned: s.scanned,
            non_miner_listeners: Some(s.non_miner_listeners),
            count: s.miners.len(),
            miners: s.miners.clone(),
            note: None,
        }
    }
}

/// `GET /api/fleet/pool-stats` (`svcos.api.fleet.pool_stats.v1`): pool totals over the last scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetPoolStatsBody {
    /// `svcos.api.fleet.pool_stats.v1`.
    pub schema: &'static str,
    /// Miners found.
    pub miners: usize,
    /// Their summed 5 s hashrate, GH/s (miners report it: a non-finite sum is `null`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<f64>"))]
    pub total_hashrate_ghs: f64,
    /// When the scan finished, Unix ms (`null` before the first discovery).
    pub scan_finished_ms: Option<i64>,
    /// Per pool URL, sorted by URL.
    pub pools: Vec<PoolTotal>,
    /// `no discovery yet` before the first discovery, else `null`.
    pub note: Option<&'static str>,
}

impl FleetPoolStatsBody {
    /// The body of the last scan's totals ([`svcos_fleet::aggregate`]), or of none.
    pub fn new(stats: Option<PoolStats>) -> Self {
        match stats {
            Some(s) => FleetPoolStatsBody {
                schema: "svcos.api.fleet.pool_stats.v1",
                miners: s.miners,
                total_hashrate_ghs: s.total_hashrate_ghs,
                scan_finished_ms: Some(s.scan_finished_ms),
                pools: s.pools,
                note: None,
            },
            None => FleetPoolStatsBody {
                schema: "svcos.api.fleet.pool_stats.v1",
                miners: 0,
                total_hashrate_ghs: 0.0,
                scan_finished_ms: None,
                pools: Vec::new(),
                note: Some("no discovery yet"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_fleet::MinerPool;

    fn miner(hashrate_ghs: Option<f64>) -> Miner {
        Miner {
            ip: "192.168.1.7".into(),
            port: 4028,
            make: None,
            model: None,
            firmware: "cgminer".into(),
            firmware_version: None,
            api_version: None,
            svcos: false,
            hashrate_ghs,
            hashrate_avg_ghs: None,
            uptime_s: None,
            accepted: None,
            rejected: None,
            pools: vec![MinerPool {
                url: "stratum+tcp://pool:3333".into(),
                user: "w".into(),
                status: "Alive".into(),
                active: true,
                accepted: 3,
                rejected: 0,
            }],
        }
    }

    fn scan(miners: Vec<Miner>) -> Scan {
        Scan {
            range: "192.168.1.0/24".into(),
            port: 4028,
            started_ms: 1,
            finished_ms: 2,
            scanned: 254,
            non_miner_listeners: 1,
            miners,
        }
    }

    #[test]
    fn before_a_discovery_the_scan_members_are_null_and_the_note_says_how() {
        let v = serde_json::to_value(FleetMinersBody::new(None)).unwrap();
        assert_eq!(
            (v["count"].clone(), v["scanned"].clone()),
            (0.into(), 0.into())
        );
        assert!(v["range"].is_null() && v["finished_ms"].is_null());
        assert!(
            v["note"]
                .as_str()
                .unwrap()
                .contains("POST /api/fleet/discover")
        );
        let v = serde_json::to_value(FleetPoolStatsBody::new(None)).unwrap();
        assert_eq!(v["note"], "no discovery yet");
        assert_eq!(v["total_hashrate_ghs"], 0.0);
    }

    #[test]
    fn a_scan_is_shown_with_its_miners_and_totals() {
        let s = scan(vec![miner(Some(13.5))]);
        let v = serde_json::to_value(FleetMinersBody::new(Some(&s))).unwrap();
        assert_eq!(v["count"], 1);
        assert_eq!(v["range"], "192.168.1.0/24");
        assert_eq!(v["miners"][0]["pools"][0]["accepted"], 3);
        assert!(v["note"].is_null());
        let v = serde_json::to_value(FleetPoolStatsBody::new(Some(svcos_fleet::aggregate(&s))))
            .unwrap();
        assert_eq!(v["total_hashrate_ghs"], 13.5);
        assert_eq!(v["pools"][0]["miners_active"], 1);
        assert_eq!(v["scan_finished_ms"], 2);
    }

    #[test]
    fn a_non_finite_reported_hashrate_totals_to_null() {
        // A firmware may send "inf" as a string; the sum is infinite and serialises as null,
        // which the schema allows.
        let s = scan(vec![miner(Some(f64::INFINITY))]);
        let v = serde_json::to_value(FleetPoolStatsBody::new(Some(svcos_fleet::aggregate(&s))))
            .unwrap();
        assert!(v["total_hashrate_ghs"].is_null());
        assert!(v["pools"][0]["hashrate_ghs"].is_null());
    }
}
