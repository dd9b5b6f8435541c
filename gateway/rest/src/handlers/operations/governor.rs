//! `[governor]` routes (noise ceiling, energy quota, room factor, cold environment): settings go
//! to the config, whose validation is the one rule on them (answered naming the request's
//! member), then the governor in the tuner reconciles, so the answer shows the write's effect.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use svcos_api_types::governor::{ColdEnvironmentBody, SectionRequest};
use svcos_api_types::requests::{NoiseProfileRequest, QuotaRequest, RoomTempFactorRequest};

use super::power_status;
use crate::envelope::ApiError;
use crate::handlers::{ApiResult, ok, parse_body};
use crate::{AppState, config_write::patch_config, route, routing::Route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/autotuner/noise-profile", Bearer, P, Tuning, Full, "Fan-duty ceiling met by a lower power target (slow controller with hysteresis)", write::<NoiseProfileRequest>, req: svcos_api_types::requests::NoiseProfileRequest, res: svcos_api_types::governor::NoiseProfileBody),
        route!(POST "/api/autotuner/quota", Bearer, U, Tuning, Full, "Daily energy budget (kWh per local day), spread over the day as a power limit", write::<QuotaRequest>, req: svcos_api_types::requests::QuotaRequest, res: svcos_api_types::governor::QuotaBody),
        route!(POST "/api/autotuner/room-temp-factor", Bearer, P, Tuning, Full, "Power target compensated for the room temperature (W per degree C)", write::<RoomTempFactorRequest>, req: svcos_api_types::requests::RoomTempFactorRequest, res: svcos_api_types::governor::RoomTempFactorBody),
        route!(GET "/api/thermal/cold_environment", Bearer, P, Thermal, Full, "Cold starts: minimum fan duty and the warm-up power cap, settings and state", cold_environment, res: svcos_api_types::governor::ColdEnvironmentBody),
    ]
}

async fn write<R: SectionRequest>(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
    let patch = parse_body::<R>(&h, &b)?
        .patch(&s.config())
        .map_err(|(f, m)| {
            let e = ApiError::bad_request(format!("invalid value for {f}"));
            e.detail(m).with("field", f)
        })?;
    let report = patch_config(&s, patch).await?;
    let power = power_status(&s, true).await?;
    ok(R::body(&s.config(), &power, Some(report)))
}

async fn cold_environment(State(s): State<AppState>) -> ApiResult {
    let power = power_status(&s, false).await?;
    ok(ColdEnvironmentBody::new(&s.config(), &power))
}
