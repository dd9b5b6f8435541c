//! Pools: the configured list with live state, replacing the list (`pool_validation`,
//! `pool_config_write_failed`), failover policy, pool tests and the Stratum V2 views.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use svcos_api_types::pools::PoolListRequest;
use svcos_api_types::pools::{
    ActiveProtocol, ConfiguredPool, FailoverPolicyBody, PoolSwitch, PoolTestBody, PoolsBody,
    StratumProtocol, StratumProtocolBody, Sv2HandshakeBody, Sv2MessagesBody, Sv2StatusBody,
};
use svcos_api_types::requests::PoolTestRequest;
use svcos_api_types::status::Pool;
use svcos_common::config::{ConfigError, PoolConfig};
use svcos_proto::stratum::v1::{GetSv2StatusRequest, GetSv2StatusResponse, TestPoolRequest};

use super::{ApiResult, ok, parse_body, parse_list_body};
use crate::config_write::{SECRET_MASK, apply, parse_pool_list, unmask_pools, validation_error};
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::state::POOL_TEST_TIMEOUT;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/pool/sv2/handshake", Bearer, U, Pools, Full, "Stratum V2 Noise handshake state", sv2_handshake, res: svcos_api_types::pools::Sv2HandshakeBody),
        route!(GET "/api/pool/sv2/messages", Bearer, U, Pools, Full, "Recent Stratum V2 messages", sv2_messages, res: svcos_api_types::pools::Sv2MessagesBody),
        route!(GET "/api/pool/sv2/status", Bearer, U, Pools, Full, "Stratum V2 connection status", sv2_status, res: svcos_api_types::pools::Sv2StatusBody),
        route!(GET "/api/pools", Bearer, P, Pools, Full, "Configured pools with their live state", get_pools, res: svcos_api_types::pools::PoolsBody),
        route!(POST "/api/pools", Bearer, P, Pools, Full, "Replace the pool list (validated, saved, reloaded)", post_pools, req: svcos_api_types::pools::PoolListRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(GET "/api/pools/failover_policy", Bearer, P, Pools, Full, "Failover order, hysteresis and recent switches", failover_policy, res: svcos_api_types::pools::FailoverPolicyBody),
        route!(POST "/api/pools/test", Bearer, P, Pools, Full, "Connect, subscribe, authorise and wait for a job", test_pool, req: svcos_api_types::requests::PoolTestRequest, res: svcos_api_types::pools::PoolTestBody),
        route!(GET "/api/stratum/protocol", Bearer, P, Pools, Full, "Stratum protocols and which one is active", stratum_protocol, res: svcos_api_types::pools::StratumProtocolBody),
        route!(POST "/api/setup/test-pool", Bearer, P, Auth, Full, "Setup wizard: test a pool", test_pool, req: svcos_api_types::requests::PoolTestRequest, res: svcos_api_types::pools::PoolTestBody),
        route!(POST "/api/setup/step5-pool", Bearer, P, Auth, Full, "Setup wizard: set the pool list", post_pools, req: svcos_api_types::pools::PoolListRequest, res: svcos_api_types::config::ConfigWriteBody),
    ]
}

async fn get_pools(State(state): State<AppState>) -> Response {
    let config = state.config();
    let live = state.pools();
    let pools = config
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let url = svcos_common::redact::mask_url_userinfo(&p.url).into_owned();
            // By identity, not position: until stratum-agent has read a saved reorder, index i
            // of its list is another pool, whose counters must not show under this one.
            let status = live
                .as_ref()
                .and_then(|l| l.pools.iter().find(|s| s.url == url && s.user == p.user))
                .map(Pool::from);
            ConfiguredPool {
                index: i as u32,
                url,
                user: p.user.clone(),
                password: SECRET_MASK,
                priority: p.priority,
                quota: p.quota,
                enabled: p.enabled,
                status,
            }
        })
        .collect();
    Json(PoolsBody {
        schema: "svcos.api.pools.v1",
        stratum_agent_up: live.is_some(),
        active_index: live.as_ref().map(|l| l.active_index),
        pools,
    })
    .into_response()
}

async fn post_pools(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let PoolListRequest(body) = parse_list_body(&headers, &body)?;
    let mut pools =
        parse_pool_list(&body).map_err(|e| validation_error(ErrorCode::PoolValidation, &e))?;
    let (old, base) = state.config_at();
    unmask_pools(&mut pools, &old);
    let mut new = (*old).clone();
    new.pools = pools;
    let report = apply(&state, base, new).await.map_err(|e| {
        e.into_api(
            ErrorCode::PoolValidation,
            Some(ErrorCode::PoolConfigWriteFailed),
        )
    })?;
    ok(report)
}

async fn test_pool(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let raw: Value = parse_body(&headers, &body)?;
    let b: PoolTestRequest = serde_json::from_value(raw).map_err(|e| {
        validation_error(
            ErrorCode::PoolValidation,
            &ConfigError::invalid("pool", e.to_string()),
        )
    })?;
    let pool = PoolConfig {
        url: b.url.clone(),
        user: b.user.clone(),
        password: b.password.clone().unwrap_or_else(|| "x".into()),
        ..Default::default()
    };
    pool.validate("pool")
        .map_err(|e| validation_error(ErrorCode::PoolValidation, &e))?;
    let max_ms = POOL_TEST_TIMEOUT.as_millis() as u32;
    let timeout_ms = b.timeout_ms.unwrap_or(10_000).clamp(500, max_ms);
    let mut s = state.peers.stratum_slow.clone();
    let r = s
        .test_pool(TestPoolRequest {
            url: pool.url,
            user: pool.user,
            password: pool.password,
            timeout_ms,
        })
        .await
        .map_err(|s| ApiError::from_grpc("stratum-agent", &s))?
        .into_inner();
    ok(PoolTestBody::from(&r))
}

async fn failover_policy(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let mut order: Vec<usize> = (0..config.pools.len()).collect();
    order.sort_by_key(|&i| (config.pools[i].priority, i));
    let split = config.pools.iter().any(|p| p.quota > 0);
    let live = state.pools();
    ok(FailoverPolicyBody {
        schema: "svcos.api.failover_policy.v1",
        strategy: if split { "quota" } else { "failover" },
        order,
        failback_hysteresis_s: config.stratum.failback_hysteresis_s,
        silent_timeout_s: config.stratum.silent_timeout_s,
        connect_timeout_s: config.stratum.connect_timeout_s,
        active_index: live.as_ref().map(|l| l.active_index),
        recent_switches: live
            .as_ref()
            .map(|l| l.switches.iter().map(PoolSwitch::from).collect()),
    })
}

async fn stratum_protocol(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let live = state.pools();
    let active = live.as_ref().and_then(|l| {
        l.pools.iter().find(|p| p.active).map(|p| ActiveProtocol {
            index: p.index,
            protocol: p.protocol.clone(),
            version_rolling: p.version_rolling,
            version_mask: format!("{:08x}", p.version_mask),
        })
    });
    ok(StratumProtocolBody {
        schema: "svcos.api.stratum_protocol.v1",
        protocols: vec![
            StratumProtocol {
                name: "stratum-v1",
                enabled: true,
                gate: None,
            },
            StratumProtocol {
                name: "stratum-v2",
                enabled: config.stratum.sv2_enabled,
                gate: Some("[stratum].sv2_enabled"),
            },
        ],
        version_rolling: config.stratum.version_rolling,
        active,
    })
}

async fn sv2(state: &AppState) -> ApiResult<GetSv2StatusResponse> {
    let mut s = state.peers.stratum.clone();
    Ok(s.get_sv2_status(GetSv2StatusRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("stratum-agent", &s))?
        .into_inner())
}

async fn sv2_status(State(state): State<AppState>) -> ApiResult {
    ok(Sv2StatusBody::from(&sv2(&state).await?))
}

async fn sv2_handshake(State(state): State<AppState>) -> ApiResult {
    ok(Sv2HandshakeBody::from(&sv2(&state).await?))
}

async fn sv2_messages(State(state): State<AppState>) -> ApiResult {
    ok(Sv2MessagesBody::from(&sv2(&state).await?))
}
