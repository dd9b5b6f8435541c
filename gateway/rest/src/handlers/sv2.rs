//! Stratum V2 job declaration (owned with the SV2 client in stratum-agent): the config goes
//! through the one config writer (validation, including the SV2 gate, is `JdConfig::validate`),
//! status and connection test are relays to stratum-agent.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::jd::{
    JdConfigBody, JdConfigRequest, JdConfigView, JdStatusBody, JdTestBody, JdTestRequest,
};
use svcos_proto::stratum::v1::{GetJdStatusRequest, TestJdConnectionRequest};

use super::{ApiResult, ok, parse_body};
use crate::config_write::apply;
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/jd/config", Bearer, U, Pools, Full, "Set Stratum V2 job declaration (validated, saved, reloaded)", post_config, req: JdConfigRequest, res: JdConfigBody),
        route!(GET "/api/jd/status", Bearer, U, Pools, Full, "Stratum V2 job declaration status", status, res: JdStatusBody),
        route!(POST "/api/jd/test-connection", Bearer, U, Pools, Full, "Connect once to a job-declaration server and template provider", test_connection, req: JdTestRequest, res: JdTestBody),
    ]
}

async fn post_config(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let r: JdConfigRequest = parse_body(&headers, &body)?;
    let (old, base) = state.config_at();
    let mut new = (*old).clone();
    let jd = &mut new.stratum.jd;
    jd.enabled = r.enabled.unwrap_or(jd.enabled);
    jd.server = r.server.unwrap_or_else(|| jd.server.clone());
    jd.template_provider = r
        .template_provider
        .unwrap_or_else(|| jd.template_provider.clone());
    let saved = new.stratum.jd.clone();
    let write = apply(&state, base, new)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))?;
    ok(JdConfigBody {
        schema: "svcos.api.jd.config.v1",
        config: JdConfigView {
            enabled: saved.enabled,
            server: saved.server,
            template_provider: saved.template_provider,
        },
        write,
    })
}

async fn status(State(state): State<AppState>) -> ApiResult {
    let mut s = state.peers.stratum.clone();
    let r = s
        .get_jd_status(GetJdStatusRequest {})
        .await
        .map_err(|s| ApiError::from_grpc("stratum-agent", &s))?
        .into_inner();
    ok(JdStatusBody::from(&r))
}

async fn test_connection(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let r: JdTestRequest = parse_body(&headers, &body)?;
    let mut s = state.peers.stratum_slow.clone();
    let r = s
        .test_jd_connection(TestJdConnectionRequest {
            server: r.server.unwrap_or_default(),
            template_provider: r.template_provider.unwrap_or_default(),
            timeout_ms: r.timeout_ms.unwrap_or(0),
        })
        .await
        .map_err(|s| ApiError::from_grpc("stratum-agent", &s))?
        .into_inner();
    ok(JdTestBody::from(&r))
}
