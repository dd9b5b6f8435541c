//! `/api/history*`, `/api/metrics/rolling(.csv)` and `/api/home/history`: views of the lasting
//! history kept by the tuner process (`HistoryService`: 1 s for 15 minutes in memory, 1 min
//! for 30 days and 1 h for 2 years on disk). Each handler makes one call and maps the answer;
//! nothing is sampled or stored here, so a gateway restart loses nothing.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use svcos_proto::tuner::v1::{ListSamplesRequest, ListSamplesResponse, Resolution};

use super::ApiResult;
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};
use svcos_api_types::history::*;

/// Default window of the per-minute views, ms (the dashboard's 24 h chart).
const DAY_MS: i64 = 24 * 3_600_000;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/history", Bearer, P, Telemetry, Full, "Hashrate, power, temperature and shares per minute (30 days) or hour (2 years); default the last 24 h", history, res: svcos_api_types::history::HistoryBody),
        route!(GET "/api/history/shares", Bearer, P, Telemetry, Full, "Share counters per minute, last 24 h by default", history_shares, res: svcos_api_types::history::SharesBody),
        route!(GET "/api/metrics/rolling", Bearer, U, Telemetry, Full, "Per-second samples, last 15 min", rolling, res: svcos_api_types::history::RollingBody),
        route!(GET "/api/metrics/rolling.csv", Bearer, U, Telemetry, Full, "Per-second samples, last 15 min, as CSV", rolling_csv),
        route!(GET "/api/home/history", Bearer, P, Integrations, Full, "Heat output and temperature per minute, last 24 h by default", home_history, res: svcos_api_types::history::HomeHistoryBody),
    ]
}

/// Query of the per-minute and per-hour views.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeQuery {
    /// `minute` (default) or `hour`.
    resolution: Option<String>,
    /// Unix ms; default 24 h before now.
    from_ms: Option<i64>,
    /// Unix ms; default now.
    to_ms: Option<i64>,
    /// At most this many points (the newest).
    limit: Option<u32>,
}

async fn list(
    state: &AppState,
    resolution: Resolution,
    q: &RangeQuery,
) -> ApiResult<ListSamplesResponse> {
    let req = ListSamplesRequest {
        resolution: resolution as i32,
        from_ms: q.from_ms.unwrap_or(if resolution == Resolution::Second {
            0
        } else {
            state.clock.now_ms() - DAY_MS
        }),
        to_ms: q.to_ms.unwrap_or(0),
        limit: q.limit.unwrap_or(0),
    };
    state
        .peers
        .history
        .clone()
        .list_samples(req)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| ApiError::from_grpc("tuner", &s))
}

fn resolution(q: &RangeQuery) -> ApiResult<Resolution> {
    match q.resolution.as_deref() {
        None | Some("minute") => Ok(Resolution::Minute),
        Some("hour") => Ok(Resolution::Hour),
        Some(_) => Err(ApiError::bad_request("resolution is one of minute, hour")),
    }
}

async fn history(State(state): State<AppState>, Query(q): Query<RangeQuery>) -> ApiResult {
    let r = list(&state, resolution(&q)?, &q).await?;
    Ok(Json(HistoryBody::from(&r)).into_response())
}

async fn history_shares(State(state): State<AppState>, Query(q): Query<RangeQuery>) -> ApiResult {
    let r = list(&state, resolution(&q)?, &q).await?;
    Ok(Json(SharesBody::from(&r)).into_response())
}

async fn rolling(State(state): State<AppState>) -> ApiResult {
    let r = list(&state, Resolution::Second, &RangeQuery::default()).await?;
    Ok(Json(RollingBody::from(&r)).into_response())
}

async fn rolling_csv(State(state): State<AppState>) -> ApiResult {
    let r = list(&state, Resolution::Second, &RangeQuery::default()).await?;
    let text = svcos_api_types::downloads::rolling_csv(&r.points);
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}

async fn home_history(State(state): State<AppState>, Query(q): Query<RangeQuery>) -> ApiResult {
    let r = list(&state, resolution(&q)?, &q).await?;
    Ok(Json(HomeHistoryBody::from(&r)).into_response())
}
