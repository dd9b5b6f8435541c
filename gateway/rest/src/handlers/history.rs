//! In-memory history fed by the same snapshots as `/api/status`: a 1 s ring of the last 15
//! minutes and a 1 min ring of the last 24 hours, both since this gateway started.
//!
//! Sampling runs on the snapshot stream (hw-agent publishes once per second), so history costs
//! nothing per request and nothing when nobody asks. Memory is bounded: 900 + 1440 samples of
//! about 100 bytes.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use svcos_common::Shutdown;
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;
use tokio::sync::watch;

use super::json;
use super::status::enum_word;
use crate::registry::Route;
use crate::{AppState, route};

/// Samples in the 1 s ring (15 minutes).
pub const ROLLING_CAP: usize = 900;
/// Samples in the 1 min ring (24 hours).
pub const HISTORY_CAP: usize = 1440;
/// Spacing of the long ring.
pub const HISTORY_INTERVAL_MS: i64 = 60_000;

/// One point in time.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Sample {
    /// hw-agent's timestamp of the snapshot, Unix ms.
    pub t_ms: i64,
    /// Mining state as a word index is not stable; the word is derived when serialising.
    #[serde(skip)]
    pub state: i32,
    /// 1-minute hashrate, GH/s.
    pub ghs_1m: f64,
    /// 5-second hashrate, GH/s.
    pub ghs_5s: f64,
    /// Input power, W.
    pub power_watt: f64,
    /// Hottest chip, C.
    pub temp_max_c: f64,
    /// Accepted shares (all pools) at that time; None while stratum-agent was down.
    pub accepted: Option<u64>,
    /// Rejected shares.
    pub rejected: Option<u64>,
    /// Stale shares.
    pub stale: Option<u64>,
}

impl Sample {
    fn from(t: &Telemetry, p: Option<&GetPoolsResponse>) -> Sample {
        let h = t.hashrate.unwrap_or_default();
        Sample {
            t_ms: t.timestamp_ms,
            state: t.state,
            ghs_1m: h.ghs_1m,
            ghs_5s: h.ghs_5s,
            power_watt: t.power_watt,
            temp_max_c: t.temp_max_c,
            accepted: p.map(|p| p.accepted),
            rejected: p.map(|p| p.rejected),
            stale: p.map(|p| p.stale),
        }
    }

    fn state_word(&self) -> String {
        let s = svcos_proto::hwagent::v1::MiningState::try_from(self.state).unwrap_or_default();
        enum_word(s.as_str_name(), "MINING_STATE_")
    }
}

/// Both rings.
#[derive(Debug, Default)]
pub struct History {
    rolling: VecDeque<Sample>,
    long: VecDeque<Sample>,
}

impl History {
    /// Add a snapshot: always to the 1 s ring, to the 1 min ring once a minute has passed.
    pub fn push(&mut self, s: Sample) {
        if self.rolling.back().is_some_and(|last| last.t_ms == s.t_ms) {
            return;
        }
        if self.rolling.len() == ROLLING_CAP {
            self.rolling.pop_front();
        }
        self.rolling.push_back(s);
        let due = self
            .long
            .back()
            .is_none_or(|last| s.t_ms - last.t_ms >= HISTORY_INTERVAL_MS);
        if due {
            if self.long.len() == HISTORY_CAP {
                self.long.pop_front();
            }
            self.long.push_back(s);
        }
    }
}

/// Record every telemetry snapshot until shutdown.
pub fn spawn_sampler(
    history: std::sync::Arc<Mutex<History>>,
    mut telemetry: watch::Receiver<Option<Telemetry>>,
    pools: watch::Receiver<Option<GetPoolsResponse>>,
    shutdown: Shutdown,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = telemetry.changed() => if r.is_err() { return },
                _ = shutdown.wait() => return,
            }
            let sample = {
                let t = telemetry.borrow_and_update();
                let p = pools.borrow();
                t.as_ref().map(|t| Sample::from(t, p.as_ref()))
            };
            if let Some(s) = sample {
                history.lock().expect("history lock").push(s);
            }
        }
    });
}

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![
        route!(GET "/api/history", Bearer, P, Telemetry, Full, "Hashrate, power, temperature and shares per minute, last 24 h", history),
        route!(GET "/api/history/shares", Bearer, P, Telemetry, Full, "Share counters per minute, last 24 h", history_shares),
        route!(GET "/api/metrics/rolling", Bearer, U, Telemetry, Full, "Per-second samples, last 15 min", rolling),
        route!(GET "/api/metrics/rolling.csv", Bearer, U, Telemetry, Full, "Per-second samples, last 15 min, as CSV", rolling_csv),
        route!(GET "/api/home/history", Bearer, P, Integrations, Full, "Heat output and temperature per minute, last 24 h", home_history),
    ]
}

fn sample_json(s: &Sample) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["state"] = s.state_word().into();
    v
}

fn snapshot(state: &AppState, long: bool) -> Vec<Sample> {
    let h = state.history.lock().expect("history lock");
    let ring = if long { &h.long } else { &h.rolling };
    ring.iter().copied().collect()
}

async fn history(State(state): State<AppState>) -> Response {
    let samples = snapshot(&state, true);
    json(json!({
        "schema": "svcos.api.history.v1",
        "interval_s": HISTORY_INTERVAL_MS / 1000,
        "window_s": HISTORY_CAP as i64 * HISTORY_INTERVAL_MS / 1000,
        "since": "this gateway's start (kept in memory)",
        "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
    }))
}

async fn history_shares(State(state): State<AppState>) -> Response {
    let samples = snapshot(&state, true);
    let mut prev: Option<&Sample> = None;
    let rows: Vec<_> = samples
        .iter()
        .map(|s| {
            let delta = |f: fn(&Sample) -> Option<u64>| match (prev.and_then(f), f(s)) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            let row = json!({
                "t_ms": s.t_ms, "accepted": s.accepted, "rejected": s.rejected, "stale": s.stale,
                "accepted_delta": delta(|x| x.accepted), "rejected_delta": delta(|x| x.rejected),
                "stale_delta": delta(|x| x.stale),
            });
            prev = Some(s);
            row
        })
        .collect();
    json(json!({
        "schema": "svcos.api.history.shares.v1",
        "interval_s": HISTORY_INTERVAL_MS / 1000,
        "samples": rows,
    }))
}

async fn rolling(State(state): State<AppState>) -> Response {
    let samples = snapshot(&state, false);
    json(json!({
        "schema": "svcos.api.metrics.rolling.v1",
        "interval_s": 1,
        "window_s": ROLLING_CAP,
        "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
    }))
}

/// The rolling ring as CSV (header + one row per sample).
pub fn rolling_csv_text(samples: &[Sample]) -> String {
    let mut out =
        String::from("t_ms,state,ghs_1m,ghs_5s,power_watt,temp_max_c,accepted,rejected,stale\n");
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for s in samples {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            s.t_ms,
            s.state_word(),
            s.ghs_1m,
            s.ghs_5s,
            s.power_watt,
            s.temp_max_c,
            opt(s.accepted),
            opt(s.rejected),
            opt(s.stale)
        );
    }
    out
}

async fn rolling_csv(State(state): State<AppState>) -> Response {
    let text = rolling_csv_text(&snapshot(&state, false));
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

async fn home_history(State(state): State<AppState>) -> Response {
    let samples = snapshot(&state, true);
    json(json!({
        "schema": "svcos.api.home.history.v1",
        "interval_s": HISTORY_INTERVAL_MS / 1000,
        "samples": samples.iter().map(|s| json!({
            "t_ms": s.t_ms, "heat_output_watt": s.power_watt, "temp_max_c": s.temp_max_c, "state": s.state_word(),
        })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_ms: i64) -> Sample {
        Sample {
            t_ms,
            state: 2,
            ghs_1m: 1.0,
            ghs_5s: 1.0,
            power_watt: 1.0,
            temp_max_c: 1.0,
            accepted: Some(1),
            rejected: None,
            stale: None,
        }
    }

    #[test]
    fn rings_are_bounded_and_long_ring_is_per_minute() {
        let mut h = History::default();
        for i in 0..2000 {
            h.push(at(i * 1000));
        }
        assert_eq!(h.rolling.len(), ROLLING_CAP);
        assert_eq!(h.rolling.back().unwrap().t_ms, 1_999_000);
        // 0 s, 60 s, ..., 1980 s
        assert_eq!(h.long.len(), 34);
        assert!(
            h.long
                .iter()
                .zip(h.long.iter().skip(1))
                .all(|(a, b)| b.t_ms - a.t_ms == 60_000)
        );
        // The same snapshot twice is one sample.
        let n = h.rolling.len();
        h.push(at(1_999_000));
        assert_eq!(h.rolling.len(), n);
    }

    #[test]
    fn csv_has_header_and_rows() {
        let text = rolling_csv_text(&[at(1000), at(2000)]);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], "1000,mining,1,1,1,1,1,,");
    }
}
