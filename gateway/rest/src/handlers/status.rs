//! Telemetry views served from the snapshots: `/api/status`, `/api/stats`, `/metrics`, chips,
//! chain presence, thermal posture, home status and the chain diagnostics.
//!
//! `/api/status` never calls a peer: it returns the cached rendering of the latest snapshots
//! ([`crate::state::Inner::status_body`]). `/api/chips` is the one view that asks hw-agent per
//! request, because per-chip data is not in the stream (it would multiply its size by 60).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use svcos_api_types::energy::HomeStatusBody;
use svcos_api_types::health::{ChainDiagnosticsBody, ChipsHealthBody};
use svcos_api_types::status::{ChainPresenceBody, ChipsBody, StatsBody, StatusBody};
use svcos_api_types::thermal::{PostureBody, SupervisorBody};
use svcos_common::{ServiceName, ipc};
use svcos_proto::hwagent::v1::{GetTelemetryRequest, Telemetry};
use svcos_proto::supervisor::v1::GetUpdateStatusRequest;
use svcos_proto::supervisor::v1::update_service_client::UpdateServiceClient;

use super::{ApiResult, ok};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/status", Bearer, P, Telemetry, Full, "Live telemetry and pool summary from the snapshots", status, res: svcos_api_types::status::StatusBody),
        route!(GET "/api/stats", Bearer, P, Telemetry, Full, "Counters: nonces, errors, shares per pool", stats, res: svcos_api_types::status::StatsBody),
        route!(GET "/api/chips", Bearer, P, Telemetry, Full, "Per-chip frequency, hashrate, errors, temperature", chips, res: svcos_api_types::status::ChipsBody),
        route!(GET "/api/chips/health", Bearer, U, Telemetry, Full, "Per-chip health verdicts from the error rates", chips_health, res: svcos_api_types::health::ChipsHealthBody),
        route!(GET "/api/mining/chain/presence", Bearer, P, Telemetry, Full, "Chains and detected chips", chain_presence, res: svcos_api_types::status::ChainPresenceBody),
        route!(GET "/metrics", Metrics, P, Telemetry, Full, "Prometheus text exposition", metrics),
        route!(GET "/api/thermal/posture", Bearer, P, Thermal, Full, "Temperatures against the configured limits", thermal_posture, res: svcos_api_types::thermal::PostureBody),
        route!(GET "/api/thermal/supervisor", Bearer, P, Thermal, Full, "Thermal supervisor state: fan mode, limits, trip reason", thermal_supervisor, res: svcos_api_types::thermal::SupervisorBody),
        route!(GET "/api/home/status", Bearer, P, Integrations, Full, "Space-heater view: heat output, noise proxy, state", home_status, res: svcos_api_types::energy::HomeStatusBody),
        route!(GET "/api/diagnostics/chain", Bearer, P, Diagnostics, Full, "Per-chain diagnostics from the snapshot", diagnostics_chain, res: svcos_api_types::health::ChainDiagnosticsBody),
    ]
}

async fn status(State(state): State<AppState>) -> Response {
    // None snapshots: that peer is down, its members are null and `degraded` is true.
    let body = state.status_body(|c, t, p, _| {
        StatusBody::new(c.system.hostname.clone(), c.system.mode.as_str(), t, p)
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn stats(State(state): State<AppState>) -> Response {
    Json(StatsBody::new(
        state.telemetry().as_ref(),
        state.pools().as_ref(),
    ))
    .into_response()
}

async fn full_telemetry(state: &AppState) -> ApiResult<Telemetry> {
    let mut hw = state.peers.hw.clone();
    let resp = hw
        .get_telemetry(GetTelemetryRequest {
            include_chips: true,
        })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    resp.into_inner()
        .telemetry
        .ok_or_else(|| ApiError::unavailable("hw-agent telemetry"))
}

async fn chips(State(state): State<AppState>) -> ApiResult {
    let t = full_telemetry(&state).await?;
    Ok(Json(ChipsBody::from(&t)).into_response())
}

async fn chips_health(State(state): State<AppState>) -> ApiResult {
    ok(ChipsHealthBody::new(&full_telemetry(&state).await?))
}

/// The `/api/chips/health` body as JSON, for `svcos/tests/chip_health_agrees.rs`,
/// which checks that REST, diagnostics and the tuner judge every chip alike.
pub fn chips_health_view(t: &Telemetry) -> Value {
    serde_json::to_value(ChipsHealthBody::new(t)).expect("a body of plain members serialises")
}

fn telemetry_or_503(state: &AppState) -> ApiResult<Telemetry> {
    state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))
}

async fn chain_presence(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    Ok(Json(ChainPresenceBody::from(&t)).into_response())
}

async fn thermal_posture(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    ok(PostureBody::new(&t, &state.config().thermal))
}

async fn thermal_supervisor(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    ok(SupervisorBody::new(&t, &state.config().thermal))
}

async fn home_status(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    // The thermostat lives in the tuner's governor: one call. While the tuner is away the
    // status still answers (from the telemetry snapshot) and the thermostat reads `null`.
    let thermostat = crate::handlers::operations::power_status(&state, false)
        .await
        .ok()
        .map(|power| crate::handlers::operations::thermostat_body(&state, &power, None, None));
    // Tuned levels for the heater's efficiency at a level (Home mode cannot read /api/profiles).
    let mut tuner = state.peers.tuner.clone();
    let req = svcos_proto::tuner::v1::ListProfilesRequest {};
    let profiles = tuner.list_profiles(req).await.ok().map(|r| r.into_inner());
    ok(HomeStatusBody::new(&t, thermostat, profiles.as_ref()))
}

async fn diagnostics_chain(State(state): State<AppState>) -> ApiResult {
    ok(ChainDiagnosticsBody::new(&telemetry_or_503(&state)?))
}

/// `/metrics`: the snapshots plus one call each to the supervisor (services, update) and the
/// tuner, side by side under the standard deadline; a peer that is away leaves its families
/// out (`svcos_metrics` has the rules).
async fn metrics(State(state): State<AppState>) -> Response {
    let mut update = UpdateServiceClient::new(ipc::channel(&state.layout, ServiceName::Supervisor));
    let (services, tuner, update) = tokio::join!(
        crate::supervisor::supervised_services(&state),
        super::tuner_get_state(&state),
        update.get_update_status(GetUpdateStatusRequest {}),
    );
    let (config, telemetry, pools) = (state.config(), state.telemetry(), state.pools());
    let body = svcos_metrics::render(&svcos_metrics::Scrape {
        config: &config,
        telemetry: telemetry.as_ref(),
        pools: pools.as_ref(),
        services: services.as_deref().ok(),
        tuner: tuner.as_ref().ok(),
        update: update.as_ref().ok().map(|r| r.get_ref()),
    });
    let content_type = HeaderValue::from_static(svcos_metrics::CONTENT_TYPE);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_when_peers_down_says_so() {
        let v = serde_json::to_value(StatusBody::new("svcos".into(), "home", None, None)).unwrap();
        assert_eq!(v["degraded"], true);
        assert_eq!(v["sources"]["hw_agent"]["up"], false);
        assert!(v["mining"].is_null());
    }
}
