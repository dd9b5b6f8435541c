//! The setup wizard's routes and `POST /api/safety/acknowledge`. The wizard's steps, order,
//! input rules, completion and answers live in `svcos-setup`; a handler here parses the body,
//! applies the crate's rule under the wizard's lock, makes its one outside call (the auth
//! service's `Setup`, or the config write path [`crate::config_write::patch_config`] for the
//! circuit cap, the electricity price and quiet hours) and maps the answer.
//!
//! Auth: every wizard write needs a bearer, except during the first-boot window (no password
//! exists yet), when the steps up to and including step3-password are reachable without one
//! (the guard asks [`crate::routing::first_boot_open`] and the auth service). The password goes
//! to the auth service and is never stored or logged here.

use std::net::SocketAddr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use svcos_api_types::requests::PasswordRequest;
use svcos_api_types::safety::SafetyWarningsBody;
use svcos_proto::auth::v1::SetupRequest;
use svcos_setup::{Facts, Wizard, WizardError, WizardStore};
use tonic::Code;

use super::state_dir;
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/setup/complete", Bearer, P, Auth, Full, "Finish the setup wizard (needs safety, circuit and a password)", complete, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/quiet-hours", Bearer, P, Auth, Full, "Wizard: quiet hours (writes [home.night_mode])", quiet_hours, req: svcos_setup::QuietHoursInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/skip-password", Bearer, P, Auth, Full, "Wizard: keep the password that is already set", skip_password, req: svcos_setup::SkipInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/skip-safety", Bearer, P, Auth, Full, "Wizard: skip the safety step (recorded as skipped)", skip_safety, req: svcos_setup::SkipInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/step-economics", Bearer, P, Auth, Full, "Wizard: electricity price and currency", economics, req: svcos_setup::EconomicsInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/step1-safety", Bearer, P, Auth, Full, "Wizard: acknowledge the safety warnings", step1_safety, req: svcos_setup::SafetyInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/step2-circuit", Bearer, P, Auth, Full, "Wizard: circuit voltage and breaker; 80 % becomes the power cap", step2_circuit, req: svcos_setup::CircuitInput, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/setup/step3-password", Bearer, P, Auth, Full, "Wizard: set the first password (through the auth service)", step3_password, req: svcos_api_types::requests::PasswordRequest, res: svcos_api_types::setup::SetupStepBody),
        route!(POST "/api/safety/acknowledge", Bearer, P, Config, Full, "Record that the current safety warnings were read", acknowledge, req: svcos_setup::AcknowledgeInput, res: svcos_api_types::setup::AcknowledgeBody),
    ]
}

/// Serialises the wizard's read-modify-write of its state file.
#[derive(Debug, Default)]
struct WizardLock(std::sync::Arc<tokio::sync::Mutex<()>>);

async fn locked(state: &AppState) -> tokio::sync::OwnedMutexGuard<()> {
    let lock = state.group_state(WizardLock::default).0.clone();
    lock.lock_owned().await
}

/// The one mapping of the wizard's errors to the envelope.
fn wizard_error(e: WizardError) -> ApiError {
    match e {
        WizardError::Order {
            step,
            how,
            ref missing,
        } => {
            let error = ApiError::new(StatusCode::CONFLICT, e.to_string())
                .code(ErrorCode::UnclassifiedError)
                .suggestion(how)
                .with("missing_step", step.as_str());
            match missing {
                Some(missing) => error.with("missing", json!(missing)),
                None => error,
            }
        }
        WizardError::Invalid { field, message } => ApiError::invalid_field(field, message),
        WizardError::NoPasswordToKeep => ApiError::new(StatusCode::CONFLICT, e.to_string())
            .code(ErrorCode::UnclassifiedError)
            .suggestion("POST /api/setup/step3-password with {\"password\": ...}"),
        WizardError::Save { .. } => {
            tracing::error!(error = %e, "cannot save the setup wizard");
            ApiError::internal("the setup wizard state could not be saved").detail(e.to_string())
        }
    }
}

/// Ids of the warnings `/api/safety/warnings` shows now.
fn current_warning_ids(state: &AppState) -> Vec<String> {
    let telemetry = state.telemetry();
    let recovered = state.recovered_state_files();
    SafetyWarningsBody::of(&state.config(), &recovered, telemetry.as_ref()).ids()
}

fn store(state: &AppState) -> WizardStore {
    WizardStore::in_dir(&state_dir(state))
}

async fn facts(state: &AppState) -> Facts {
    let config = state.config();
    Facts {
        password_set: state.password_set().await.ok(),
        pools_configured: config.pools.iter().any(|p| p.enabled),
        mode: config.system.mode.as_str(),
        circuit_limit_watt: config.power.circuit_limit_watt,
        setup_hold: config.power.setup_hold,
    }
}

/// Apply the rule `f` to the wizard under its lock and save the result.
async fn update(
    state: &AppState,
    f: impl FnOnce(&mut Wizard, i64) -> svcos_setup::Result<()>,
) -> ApiResult<Wizard> {
    let _guard = locked(state).await;
    let mut wizard = store(state).load();
    f(&mut wizard, state.clock.now_ms()).map_err(wizard_error)?;
    store(state).save(&wizard).map_err(wizard_error)?;
    Ok(wizard)
}

/// Answer a write with the wizard after it.
async fn saved(state: &AppState, wizard: &Wizard, step: &'static str) -> Response {
    Json(wizard.saved(&facts(state).await, step)).into_response()
}

/// `GET /api/setup/status` (open): the wizard as the dashboard needs it. No secrets.
pub async fn status(State(state): State<AppState>) -> Response {
    Json(store(&state).load().status(&facts(&state).await)).into_response()
}

async fn step1_safety(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let input = parse_body(&headers, &body)?;
    let ids = current_warning_ids(&state);
    let w = update(&state, |w, now| w.accept_safety(input, ids, now)).await?;
    Ok(saved(&state, &w, "safety").await)
}

async fn skip_safety(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let input = parse_body(&headers, &body)?;
    let w = update(&state, |w, now| w.skip_safety(input, now)).await?;
    Ok(saved(&state, &w, "safety").await)
}

async fn step2_circuit(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let circuit = parse_body::<svcos_setup::CircuitInput>(&headers, &body)?
        .check()
        .map_err(wizard_error)?;
    // The config write happens under the lock, so the config and the record agree.
    let guard = locked(&state).await;
    let mut w = store(&state).load();
    w.require_safety().map_err(wizard_error)?;
    patch_config(&state, circuit.config_patch()).await?;
    w.set_circuit(&circuit, state.clock.now_ms())
        .map_err(wizard_error)?;
    store(&state).save(&w).map_err(wizard_error)?;
    drop(guard);
    Ok(saved(&state, &w, "circuit").await)
}

fn auth_setup_error(s: &tonic::Status) -> ApiError {
    match s.code() {
        Code::FailedPrecondition => ApiError::new(StatusCode::CONFLICT, "a password is already set")
            .code(ErrorCode::UnclassifiedError)
            .suggestion("POST /api/setup/skip-password keeps it; it is cleared only by holding the reset button for 15 s"),
        Code::InvalidArgument => ApiError::invalid_field("password", s.message().to_string()),
        Code::ResourceExhausted => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too many attempts")
            .code(ErrorCode::UnclassifiedError)
            .detail(s.message().to_string())
            .header(axum::http::header::RETRY_AFTER, "60"),
        _ => ApiError::from_grpc("auth", s),
    }
}

async fn step3_password(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: PasswordRequest = parse_body(&headers, &body)?;
    store(&state)
        .load()
        .require_safety()
        .map_err(wizard_error)?;
    let client_ip = state.client_ip(peer, &headers).to_string();
    let mut auth = state.peers.auth_hash.clone();
    auth.setup(SetupRequest {
        password: b.password,
        client_ip,
    })
    .await
    .map_err(|s| auth_setup_error(&s))?;
    state.await_password_set(true).await;
    let w = update(&state, |w, now| w.password_set(now)).await?;
    let mut answer = w.saved(&facts(&state).await, "password");
    answer.next = Some("POST /api/auth/session with the password for a bearer token");
    Ok(Json(answer).into_response())
}

async fn skip_password(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let input = parse_body(&headers, &body)?;
    let password = state.password_set().await.ok();
    let w = update(&state, |w, now| w.keep_password(input, password, now)).await?;
    Ok(saved(&state, &w, "password").await)
}

async fn economics(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let economics = parse_body::<svcos_setup::EconomicsInput>(&headers, &body)?
        .check()
        .map_err(wizard_error)?;
    // `[tuner].electricity_price_per_kwh` is the price's one home; the config write happens
    // under the wizard's lock (after the order check), so the config and the record agree.
    let guard = locked(&state).await;
    let mut w = store(&state).load();
    w.require_safety().map_err(wizard_error)?;
    patch_config(&state, economics.config_patch()).await?;
    w.set_economics(&economics, state.clock.now_ms())
        .map_err(wizard_error)?;
    store(&state).save(&w).map_err(wizard_error)?;
    drop(guard);
    let mut answer = w.saved(&facts(&state).await, "economics");
    answer.estimate = Some(economics.estimate(state.telemetry().map_or(0.0, |t| t.power_watt)));
    Ok(Json(answer).into_response())
}

async fn quiet_hours(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let input: svcos_setup::QuietHoursInput = parse_body(&headers, &body)?;
    store(&state)
        .load()
        .require_safety()
        .map_err(wizard_error)?;
    let current = serde_json::to_value(&state.config().home.night_mode).unwrap_or_default();
    let patch = input.config_patch(current);
    patch_config(&state, patch.clone()).await?;
    let mut night = patch["home"]["night_mode"].clone();
    night["timezone"] = json!(state.config().system.timezone);
    let w = update(&state, |w, now| w.set_quiet_hours(night, now)).await?;
    Ok(saved(&state, &w, "quiet_hours").await)
}

/// Completing the wizard lifts the setup hold: `[power].setup_hold = false` through the config
/// writer, which hw-agent reads (it never asks the gateway). The write happens under the
/// wizard's lock after the completion rule passed, and before the record is saved, so a
/// refused write leaves the wizard incomplete rather than complete and still held.
async fn complete(State(state): State<AppState>) -> ApiResult {
    let Ok(password) = state.password_set().await else {
        return Err(ApiError::unavailable("auth"));
    };
    let guard = locked(&state).await;
    let mut w = store(&state).load();
    w.complete(Some(password), state.clock.now_ms())
        .map_err(wizard_error)?;
    if state.config().power.setup_hold {
        patch_config(&state, json!({"power": {"setup_hold": false}})).await?;
    }
    store(&state).save(&w).map_err(wizard_error)?;
    drop(guard);
    Ok(saved(&state, &w, "complete").await)
}

async fn acknowledge(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let input = parse_body(&headers, &body)?;
    let current = current_warning_ids(&state);
    let w = update(&state, |w, now| w.acknowledge(input, current, now)).await?;
    Ok(Json(w.acknowledge_body()).into_response())
}
