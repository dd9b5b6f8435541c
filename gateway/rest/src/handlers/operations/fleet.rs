//! Fleet discovery over the cgminer API (TCP 4028), the last scan's miners and pool totals,
//! and network block data derived from the current pool job. The scanning, its bounds and the
//! identification of other miners live in `svcos-fleet`; the block math in
//! `svcos_work::network`. These handlers parse, call and map.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use svcos_api_types::discovery::{ConfigSchemaBody, NetworkBlockBody, Outbound};
use svcos_api_types::fleet::{FleetMinersBody, FleetPoolStatsBody};
use svcos_api_types::requests::FleetDiscoverRequest;
use svcos_fleet::Fleet;
use svcos_proto::stratum::v1::{JobTemplate, StreamJobsRequest};
use svcos_work::network::{bip34_height, display_hash, nbits_difficulty};
use tokio_stream::StreamExt;

use super::state_dir;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, ok, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

fn fleet(state: &AppState) -> std::sync::Arc<Fleet> {
    state.group_state(|| Fleet::open(&state_dir(state).join("fleet-scan.json")))
}

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/fleet/discover", Bearer, P, Fleet, Full, "Scan a LAN range (<= /22) for cgminer-API miners on TCP 4028", discover, req: svcos_api_types::requests::FleetDiscoverRequest, res: svcos_api_types::fleet::FleetMinersBody),
        route!(GET "/api/fleet/miners", Bearer, P, Fleet, Full, "Miners found by the last discovery", miners, res: svcos_api_types::fleet::FleetMinersBody),
        route!(GET "/api/fleet/pool-stats", Bearer, P, Fleet, Full, "Pools and hashrate aggregated over the last discovery", pool_stats, res: svcos_api_types::fleet::FleetPoolStatsBody),
        route!(GET "/api/network/block", Bearer, P, Fleet, Full, "Network block data from the current pool job (prev hash, BIP34 height, difficulty)", network_block, res: svcos_api_types::discovery::NetworkBlockBody),
        route!(GET "/api/network/config_schema", Bearer, P, Fleet, Full, "JSON Schema of the network-related config", config_schema, res: svcos_api_types::discovery::ConfigSchemaBody),
    ]
}

async fn discover(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: FleetDiscoverRequest = parse_body(&headers, &body)?;
    let plan =
        svcos_fleet::Plan::new(&b.range, b.port, b.timeout_ms, b.concurrency).map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("invalid value for {}", e.field),
            )
            .code(ErrorCode::UnclassifiedError)
            .detail(e.message)
            .with("field", e.field)
        })?;
    let clock = state.clock.clone();
    let scan = fleet(&state)
        .discover(&plan, &|| clock.now_ms())
        .await
        .map_err(|busy| {
            ApiError::new(StatusCode::CONFLICT, busy.to_string())
                .code(ErrorCode::UnclassifiedError)
                .suggestion("wait for it to finish, then GET /api/fleet/miners")
        })?;
    ok(FleetMinersBody::new(Some(&scan)))
}

async fn miners(State(state): State<AppState>) -> ApiResult {
    ok(FleetMinersBody::new(fleet(&state).last().as_ref()))
}

async fn pool_stats(State(state): State<AppState>) -> ApiResult {
    let scan = fleet(&state).last();
    ok(FleetPoolStatsBody::new(
        scan.as_ref().map(svcos_fleet::aggregate),
    ))
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
    ok(NetworkBlockBody {
        schema: "svcos.api.network.block.v1",
        source: "current pool job (mining.notify); no internet lookup",
        height: bip34_height(&job.coinb1),
        previous_block_hash: display_hash(&job.prev_hash),
        nbits: format!("{:08x}", job.nbits),
        network_difficulty: nbits_difficulty(job.nbits),
        version: format!("{:08x}", job.version),
        ntime: job.ntime,
        job_id: job.job_id,
        pool_index: job.pool_index,
        pool_url,
        share_difficulty: job.share_difficulty,
        donation_job: job.donation,
        received_at_ms: job.received_at_us / 1000,
    })
}

async fn config_schema(State(_state): State<AppState>) -> ApiResult {
    ok(ConfigSchemaBody {
        schema: "svcos.api.network.config_schema.v1",
        json_schema: crate::handlers::config_json_schema(),
        outbound: Outbound {
            pools: "Stratum V1/V2 to the configured pools only",
            energy_sources: "http:// GET to LAN addresses only",
            fleet_discovery: "TCP 4028 to LAN addresses only, on request",
        },
    })
}
