//! History: `/api/history`, `/api/history/shares`, `/api/metrics/rolling`, `/api/home/history`
//! (the tuner's on-disk samples).

use serde::Serialize;
use svcos_proto::hwagent::v1::MiningState;
use svcos_proto::tuner::v1::{HistoryPoint, ListSamplesResponse};

use crate::enum_word;

/// A sample's mining state as the API spells it.
pub fn state_word(p: &HistoryPoint) -> String {
    enum_word(
        MiningState::try_from(p.state)
            .unwrap_or_default()
            .as_str_name(),
        "MINING_STATE_",
    )
}

/// One sample.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sample {
    /// Start of the interval, Unix ms.
    pub t_ms: i64,
    /// The mining state.
    pub state: String,
    /// Hashrate over a minute, GH/s.
    pub ghs_1m: f64,
    /// Hashrate over 5 s, GH/s.
    pub ghs_5s: f64,
    /// Power, W.
    pub power_watt: f64,
    /// Hottest sensor, °C.
    pub temp_max_c: f64,
    /// Accepted shares (cumulative); `null` while stratum-agent was down.
    pub accepted: Option<u64>,
    /// Rejected shares (cumulative); `null` while stratum-agent was down.
    pub rejected: Option<u64>,
    /// Stale shares (cumulative); `null` while stratum-agent was down.
    pub stale: Option<u64>,
}

impl From<&HistoryPoint> for Sample {
    fn from(p: &HistoryPoint) -> Self {
        Sample {
            t_ms: p.t_ms,
            state: state_word(p),
            ghs_1m: p.ghs_1m,
            ghs_5s: p.ghs_5s,
            power_watt: p.power_watt,
            temp_max_c: p.temp_max_c,
            accepted: p.accepted,
            rejected: p.rejected,
            stale: p.stale,
        }
    }
}

/// `GET /api/history` (`svcos.api.history.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryBody {
    /// `svcos.api.history.v1`.
    pub schema: &'static str,
    /// Seconds per sample (60 or 3600).
    pub interval_s: u32,
    /// How far back the tuner keeps this resolution, s.
    pub window_s: u64,
    /// Where the samples come from.
    pub since: &'static str,
    /// Oldest first.
    pub samples: Vec<Sample>,
}

impl From<&ListSamplesResponse> for HistoryBody {
    fn from(r: &ListSamplesResponse) -> Self {
        HistoryBody {
            schema: "svcos.api.history.v1",
            interval_s: r.interval_s,
            window_s: r.retention_s,
            since: "kept by the tuner on disk across restarts of any process",
            samples: r.points.iter().map(Sample::from).collect(),
        }
    }
}

/// `GET /api/metrics/rolling` (`svcos.api.metrics.rolling.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RollingBody {
    /// `svcos.api.metrics.rolling.v1`.
    pub schema: &'static str,
    /// Always 1.
    pub interval_s: u32,
    /// How far back the tuner keeps per-second samples, s.
    pub window_s: u64,
    /// Oldest first.
    pub samples: Vec<Sample>,
}

impl From<&ListSamplesResponse> for RollingBody {
    fn from(r: &ListSamplesResponse) -> Self {
        RollingBody {
            schema: "svcos.api.metrics.rolling.v1",
            interval_s: 1,
            window_s: r.retention_s,
            samples: r.points.iter().map(Sample::from).collect(),
        }
    }
}

/// One interval's share counters.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShareSample {
    /// Start of the interval, Unix ms.
    pub t_ms: i64,
    /// Accepted shares (cumulative); `null` while stratum-agent was down.
    pub accepted: Option<u64>,
    /// Rejected shares (cumulative).
    pub rejected: Option<u64>,
    /// Stale shares (cumulative).
    pub stale: Option<u64>,
    /// Accepted since the previous sample; `null` for the first or across a gap.
    pub accepted_delta: Option<u64>,
    /// Rejected since the previous sample.
    pub rejected_delta: Option<u64>,
    /// Stale since the previous sample.
    pub stale_delta: Option<u64>,
}

/// `GET /api/history/shares` (`svcos.api.history.shares.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SharesBody {
    /// `svcos.api.history.shares.v1`.
    pub schema: &'static str,
    /// Seconds per sample.
    pub interval_s: u32,
    /// Oldest first.
    pub samples: Vec<ShareSample>,
}

impl From<&ListSamplesResponse> for SharesBody {
    fn from(r: &ListSamplesResponse) -> Self {
        let mut prev: Option<&HistoryPoint> = None;
        let samples = r
            .points
            .iter()
            .map(|s| {
                let delta = |f: fn(&HistoryPoint) -> Option<u64>| match (prev.and_then(f), f(s)) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                    _ => None,
                };
                let row = ShareSample {
                    t_ms: s.t_ms,
                    accepted: s.accepted,
                    rejected: s.rejected,
                    stale: s.stale,
                    accepted_delta: delta(|x| x.accepted),
                    rejected_delta: delta(|x| x.rejected),
                    stale_delta: delta(|x| x.stale),
                };
                prev = Some(s);
                row
            })
            .collect();
        SharesBody {
            schema: "svcos.api.history.shares.v1",
            interval_s: r.interval_s,
            samples,
        }
    }
}

/// One interval of the home view.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeatSample {
    /// Start of the interval, Unix ms.
    pub t_ms: i64,
    /// Heat given off: the power drawn, W.
    pub heat_output_watt: f64,
    /// Hottest sensor, °C.
    pub temp_max_c: f64,
    /// The mining state.
    pub state: String,
}

/// `GET /api/home/history` (`svcos.api.home.history.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HomeHistoryBody {
    /// `svcos.api.home.history.v1`.
    pub schema: &'static str,
    /// Seconds per sample.
    pub interval_s: u32,
    /// Oldest first.
    pub samples: Vec<HeatSample>,
}

impl From<&ListSamplesResponse> for HomeHistoryBody {
    fn from(r: &ListSamplesResponse) -> Self {
        HomeHistoryBody {
            schema: "svcos.api.home.history.v1",
            interval_s: r.interval_s,
            samples: r
                .points
                .iter()
                .map(|s| HeatSample {
                    t_ms: s.t_ms,
                    heat_output_watt: s.power_watt,
                    temp_max_c: s.temp_max_c,
                    state: state_word(s),
                })
                .collect(),
        }
    }
}
