//! Stratum V2 job declaration: `[stratum.jd]` goes through the one config writer (its rules are
//! `JdConfig::validate`); status and connection test are relays to stratum-agent, which owns JD.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::jd::{JdConfigBody, JdConfigRequest, JdStatusBody, JdTestBody, JdTestRequest};
use svcos_proto::stratum::v1::GetJdStatusRequest;

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

async fn post_config(State(state): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    let r: JdConfigRequest = parse_body(&h, &b)?;
    let (old, base) = state.config_at();
    let mut new = (*old).clone();
    r.apply(&mut new.stratum.jd);
    let jd = new.stratum.jd.clone();
    let write = apply(&state, base, new).await;
    let write = write.map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))?;
    ok(JdConfigBody::new(&jd, write))
}

async fn status(State(state): State<AppState>) -> ApiResult {
    let mut s = state.peers.stratum.clone();
    let r = s
        .get_jd_status(GetJdStatusRequest {})
        .await
        .map_err(relay)?;
    ok(JdStatusBody::from(&r.into_inner()))
}

async fn test_connection(State(state): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    let r: JdTestRequest = parse_body(&h, &b)?;
    let mut s = state.peers.stratum_slow.clone();
    let r = s
        .test_jd_connection(r.into_request())
        .await
        .map_err(relay)?;
    ok(JdTestBody::from(&r.into_inner()))
}

fn relay(s: tonic::Status) -> ApiError {
    ApiError::from_grpc("stratum-agent", &s)
}
