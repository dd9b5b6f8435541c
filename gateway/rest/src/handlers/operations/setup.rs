//! The setup wizard: a persisted state machine over the first-boot steps.
//!
//! Steps and order: `safety` (step1-safety or skip-safety) comes first; `circuit`
//! (step2-circuit), `password` (step3-password or skip-password), `economics` and
//! `quiet_hours` may follow in any order; `complete` needs safety, circuit and a password.
//! A step may be re-posted to change what was entered, also after completion.
//!
//! Auth: every wizard write needs a bearer, except during the first-boot window (no password
//! exists yet), when the steps up to and including step3-password are reachable without one:
//! nobody can hold a token before a password exists, and the open `POST /api/auth/setup`
//! grants the same trust. The guard asks [`crate::routing::first_boot_open`] and the auth service.
//!
//! State lives in `<state>/gateway/setup-wizard.json`, written atomically. Settings entered
//! in the wizard go into the config file through the one config write path
//! ([`crate::config_write::patch_config`]): the circuit cap into `[power]`, quiet hours
//! into `[home.night_mode]`. The password goes to the auth service and is never stored or
//! logged here.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use svcos_proto::auth::v1::SetupRequest;
use tonic::Code;

use super::{read_json, state_dir};
use crate::config_write::patch_config;
use crate::envelope::{ApiError, ErrorCode};
use crate::handlers::{ApiResult, json, parse_body};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/api/setup/complete", Bearer, P, Auth, Full, "Finish the setup wizard (needs safety, circuit and a password)", complete),
        route!(POST "/api/setup/quiet-hours", Bearer, P, Auth, Full, "Wizard: quiet hours (writes [home.night_mode])", quiet_hours),
        route!(POST "/api/setup/skip-password", Bearer, P, Auth, Full, "Wizard: keep the password that is already set", skip_password),
        route!(POST "/api/setup/skip-safety", Bearer, P, Auth, Full, "Wizard: skip the safety step (recorded as skipped)", skip_safety),
        route!(POST "/api/setup/step-economics", Bearer, P, Auth, Full, "Wizard: electricity price and currency", economics),
        route!(POST "/api/setup/step1-safety", Bearer, P, Auth, Full, "Wizard: acknowledge the safety warnings", step1_safety),
        route!(POST "/api/setup/step2-circuit", Bearer, P, Auth, Full, "Wizard: circuit voltage and breaker; 80 % becomes the power cap", step2_circuit),
        route!(POST "/api/setup/step3-password", Bearer, P, Auth, Full, "Wizard: set the first password (through the auth service)", step3_password),
        route!(POST "/api/safety/acknowledge", Bearer, P, Config, Full, "Record that the current safety warnings were read", acknowledge),
    ]
}

/// Serialises the wizard's read-modify-write of its state file.
#[derive(Debug, Default)]
struct WizardLock(tokio::sync::Mutex<()>);

/// Fraction of a breaker's rating a continuous load may use (NEC 210.19/210.20 practice).
pub const CONTINUOUS_LOAD_FACTOR: f64 = 0.8;

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Entered.
    Done,
    /// Skipped on purpose.
    Skipped,
}

/// One finished step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Done or skipped.
    pub status: StepStatus,
    /// When, Unix ms.
    pub at_ms: i64,
    /// What was entered (never a secret).
    #[serde(default)]
    pub values: Value,
}

/// A recorded safety acknowledgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Acknowledgement {
    /// When, Unix ms.
    pub at_ms: i64,
    /// Ids of the warnings shown at the time.
    pub warning_ids: Vec<String>,
    /// Where it was given (`wizard` or `api`).
    pub via: String,
}

/// The persisted wizard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Wizard {
    /// Finished steps by name.
    pub steps: BTreeMap<String, StepRecord>,
    /// Safety acknowledgements, newest last (at most 20).
    pub acknowledgements: Vec<Acknowledgement>,
    /// When the wizard was completed, Unix ms.
    pub completed_at_ms: Option<i64>,
}

/// The wizard's steps in display order: (name, how to do it, required for completion).
pub const STEPS: &[(&str, &str, bool)] = &[
    (
        "safety",
        "POST /api/setup/step1-safety (or skip-safety)",
        true,
    ),
    ("circuit", "POST /api/setup/step2-circuit", true),
    (
        "password",
        "POST /api/setup/step3-password (or skip-password when one is set)",
        true,
    ),
    ("economics", "POST /api/setup/step-economics", false),
    ("quiet_hours", "POST /api/setup/quiet-hours", false),
];

impl Wizard {
    fn path(state: &AppState) -> std::path::PathBuf {
        state_dir(state).join("setup-wizard.json")
    }

    /// Load the wizard (empty when missing).
    pub fn load(state: &AppState) -> Self {
        read_json(&Self::path(state)).unwrap_or_default()
    }

    fn save(&self, state: &AppState) -> ApiResult<()> {
        let path = Self::path(state);
        let bytes = serde_json::to_vec_pretty(self).expect("wizard serialises");
        path.parent()
            .map_or(Ok(()), |d| svcos_common::fsutil::ensure_dir(d, 0o700))
            .and_then(|()| svcos_common::fsutil::atomic_write(&path, &bytes, 0o600))
            .map_err(|e| {
                tracing::error!(path = %path.display(), error = %e, "cannot save the setup wizard");
                ApiError::internal("the setup wizard state could not be saved")
                    .detail(e.to_string())
            })
    }

    fn done(&self, step: &str) -> bool {
        self.steps.contains_key(step)
    }

    fn record(&mut self, step: &str, status: StepStatus, at_ms: i64, values: Value) {
        self.steps.insert(
            step.to_string(),
            StepRecord {
                status,
                at_ms,
                values,
            },
        );
    }
}

/// 409: a step that must come first has not been done.
fn order_error(needed: &str, how: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("the {needed} step must be finished first"),
    )
    .code(ErrorCode::UnclassifiedError)
    .suggestion(how.to_string())
    .with("missing_step", needed)
}

/// 422 naming the field.
fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("invalid value for {field}"),
    )
    .code(ErrorCode::ConfigValidation)
    .detail(message.into())
    .suggestion("fix the named field and resend")
    .with("field", field)
}

async fn password_set(state: &AppState) -> Option<bool> {
    state.password_set().await.ok()
}

fn require_safety(w: &Wizard) -> ApiResult<()> {
    if w.done("safety") {
        Ok(())
    } else {
        Err(order_error(
            "safety",
            "POST /api/setup/step1-safety with {\"accept\": true} (or /api/setup/skip-safety)",
        ))
    }
}

/// Run `f` on the wizard under its lock and save the result; answers the new status.
async fn update(
    state: &AppState,
    f: impl FnOnce(&mut Wizard, i64) -> ApiResult<()>,
) -> ApiResult<Wizard> {
    let lock = state.group_state(WizardLock::default);
    let _guard = lock.0.lock().await;
    let mut w = Wizard::load(state);
    f(&mut w, state.clock.now_ms())?;
    w.save(state)?;
    Ok(w)
}

/// `GET /api/setup/status` (open): the wizard as the dashboard needs it. No secrets.
pub async fn status(State(state): State<AppState>) -> Response {
    json(status_body(&state).await)
}

async fn status_body(state: &AppState) -> Value {
    let w = Wizard::load(state);
    let password = password_set(state).await;
    let config = state.config();
    let pools_configured = config.pools.iter().any(|p| p.enabled);
    let mut steps: Vec<Value> = STEPS
        .iter()
        .map(|(name, how, required)| {
            let rec = w.steps.get(*name);
            let mut status = rec.map_or("pending", |r| match r.status {
                StepStatus::Done => "done",
                StepStatus::Skipped => "skipped",
            });
            // A password set through POST /api/auth/setup counts as done.
            if *name == "password" && rec.is_none() && password == Some(true) {
                status = "done";
            }
            json!({
                "step": name, "status": status, "done": status != "pending",
                "required": required, "how": how,
                "at_ms": rec.map(|r| r.at_ms), "values": rec.map(|r| r.values.clone()),
            })
        })
        .collect();
    steps.push(
        json!({"step": "mode", "status": "done", "done": true, "required": false,
        "how": "POST /api/setup/step4-mode", "values": {"mode": config.system.mode.as_str()}}),
    );
    steps.push(
        json!({"step": "pool", "status": if pools_configured {"done"} else {"pending"},
        "done": pools_configured, "required": false, "how": "POST /api/setup/step5-pool"}),
    );
    let missing: Vec<&str> = missing_for_completion(&w, password);
    let next = steps
        .iter()
        .find(|s| s["status"] == "pending")
        .and_then(|s| s["step"].as_str().map(str::to_string));
    json!({
        "schema": "svcos.api.setup.status.v1",
        "password_set": password,
        "auth_reachable": password.is_some(),
        "first_boot": password == Some(false),
        "pools_configured": pools_configured,
        "mode": config.system.mode.as_str(),
        "complete": w.completed_at_ms.is_some(),
        "completed_at_ms": w.completed_at_ms,
        "can_complete": missing.is_empty(),
        "missing": missing,
        "next_step": next,
        "steps": steps,
        "circuit_limit_watt": (config.power.circuit_limit_watt > 0.0).then_some(config.power.circuit_limit_watt),
        "safety_acknowledged_at_ms": w.acknowledgements.last().map(|a| a.at_ms),
    })
}

fn missing_for_completion(w: &Wizard, password: Option<bool>) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if !w.done("safety") {
        missing.push("safety");
    }
    if !w.done("circuit") {
        missing.push("circuit");
    }
    if password != Some(true) {
        missing.push("password");
    }
    missing
}

async fn answer(state: &AppState, step: &str) -> Response {
    let mut body = status_body(state).await;
    body["saved_step"] = json!(step);
    json(body)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SafetyBody {
    accept: Option<bool>,
}

async fn current_warning_ids(state: &AppState) -> Vec<String> {
    let body = crate::handlers::config::safety_warnings_body(state);
    body["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn push_ack(w: &mut Wizard, ack: Acknowledgement) {
    w.acknowledgements.push(ack);
    let excess = w.acknowledgements.len().saturating_sub(20);
    w.acknowledgements.drain(..excess);
}

async fn step1_safety(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: SafetyBody = parse_body(&headers, &body)?;
    if b.accept != Some(true) {
        return Err(invalid(
            "accept",
            "the safety warnings must be accepted with \"accept\": true (or use /api/setup/skip-safety)",
        ));
    }
    let ids = current_warning_ids(&state).await;
    update(&state, |w, now| {
        w.record(
            "safety",
            StepStatus::Done,
            now,
            json!({"accepted": true, "warning_ids": ids.clone()}),
        );
        push_ack(
            w,
            Acknowledgement {
                at_ms: now,
                warning_ids: ids,
                via: "wizard".into(),
            },
        );
        Ok(())
    })
    .await?;
    Ok(answer(&state, "safety").await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipBody {
    #[serde(default)]
    reason: Option<String>,
}

fn reason_of(b: SkipBody) -> ApiResult<Option<String>> {
    match b.reason {
        Some(r) if r.chars().count() > 200 => Err(invalid("reason", "at most 200 characters")),
        r => Ok(r),
    }
}

async fn skip_safety(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let reason = reason_of(parse_body(&headers, &body)?)?;
    update(&state, |w, now| {
        if w.steps
            .get("safety")
            .is_some_and(|s| s.status == StepStatus::Done)
        {
            return Ok(()); // Already accepted: skipping afterwards changes nothing.
        }
        w.record(
            "safety",
            StepStatus::Skipped,
            now,
            json!({"reason": reason}),
        );
        Ok(())
    })
    .await?;
    Ok(answer(&state, "safety").await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CircuitBody {
    voltage_v: f64,
    breaker_a: f64,
    /// Use the derived limit as the power cap. Default true.
    #[serde(default)]
    apply_cap: Option<bool>,
}

/// Continuous watts a circuit may carry: 80 % of volts x breaker amps.
pub fn circuit_limit_watt(voltage_v: f64, breaker_a: f64) -> f64 {
    (voltage_v * breaker_a * CONTINUOUS_LOAD_FACTOR).floor()
}

async fn step2_circuit(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: CircuitBody = parse_body(&headers, &body)?;
    if !(90.0..=480.0).contains(&b.voltage_v) {
        return Err(invalid("voltage_v", "90-480 V (e.g. 120, 230, 240)"));
    }
    if !(5.0..=100.0).contains(&b.breaker_a) {
        return Err(invalid("breaker_a", "5-100 A (the breaker's rating)"));
    }
    require_safety(&Wizard::load(&state))?;
    let limit = circuit_limit_watt(b.voltage_v, b.breaker_a);
    let apply_cap = b.apply_cap.unwrap_or(true);
    let lock = state.group_state(WizardLock::default);
    let _guard = lock.0.lock().await;
    let mut w = Wizard::load(&state);
    require_safety(&w)?;
    patch_config(
        &state,
        json!({"power": {
            "circuit_voltage_v": b.voltage_v,
            "circuit_breaker_a": b.breaker_a,
            "circuit_limit_watt": if apply_cap { limit } else { 0.0 },
        }}),
    )
    .await?;
    w.record(
        "circuit",
        StepStatus::Done,
        state.clock.now_ms(),
        json!({"voltage_v": b.voltage_v, "breaker_a": b.breaker_a,
               "max_continuous_watt": limit, "applied_as_cap": apply_cap}),
    );
    w.save(&state)?;
    drop(_guard);
    Ok(answer(&state, "circuit").await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PasswordBody {
    password: String,
}

fn auth_setup_error(s: &tonic::Status) -> ApiError {
    match s.code() {
        Code::FailedPrecondition => ApiError::new(StatusCode::CONFLICT, "a password is already set")
            .code(ErrorCode::UnclassifiedError)
            .suggestion("POST /api/setup/skip-password keeps it; it is cleared only by holding the reset button for 15 s"),
        Code::InvalidArgument => invalid("password", s.message().to_string()),
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
    let b: PasswordBody = parse_body(&headers, &body)?;
    require_safety(&Wizard::load(&state))?;
    let mut auth = state.peers.auth_hash.clone();
    auth.setup(SetupRequest {
        password: b.password,
        client_ip: crate::handlers::auth::client_ip(&state, peer, &headers).to_string(),
    })
    .await
    .map_err(|s| auth_setup_error(&s))?;
    state.await_password_set(true).await;
    update(&state, |w, now| {
        w.record(
            "password",
            StepStatus::Done,
            now,
            json!({"set_via": "step3-password"}),
        );
        Ok(())
    })
    .await?;
    let mut body = status_body(&state).await;
    body["saved_step"] = json!("password");
    body["next"] = json!("POST /api/auth/session with the password for a bearer token");
    Ok(json(body))
}

async fn skip_password(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let reason = reason_of(parse_body(&headers, &body)?)?;
    require_safety(&Wizard::load(&state))?;
    if password_set(&state).await != Some(true) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no password is set; it cannot be skipped",
        )
        .code(ErrorCode::UnclassifiedError)
        .suggestion("POST /api/setup/step3-password with {\"password\": ...}"));
    }
    update(&state, |w, now| {
        if !w.done("password") {
            w.record(
                "password",
                StepStatus::Skipped,
                now,
                json!({"reason": reason, "kept": "the existing password"}),
            );
        }
        Ok(())
    })
    .await?;
    Ok(answer(&state, "password").await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EconomicsBody {
    electricity_price_per_kwh: f64,
    currency: String,
}

async fn economics(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: EconomicsBody = parse_body(&headers, &body)?;
    if !b.electricity_price_per_kwh.is_finite()
        || !(0.0..=10.0).contains(&b.electricity_price_per_kwh)
    {
        return Err(invalid(
            "electricity_price_per_kwh",
            "0-10 (currency units per kWh)",
        ));
    }
    let currency = b.currency.trim().to_ascii_uppercase();
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(invalid(
            "currency",
            "an ISO 4217 code such as USD, EUR, CHF",
        ));
    }
    let watt = state.telemetry().map_or(0.0, |t| t.power_watt);
    let price = b.electricity_price_per_kwh;
    update(&state, |w, now| {
        require_safety(w)?;
        w.record(
            "economics",
            StepStatus::Done,
            now,
            json!({
                "electricity_price_per_kwh": price, "currency": currency,
            }),
        );
        Ok(())
    })
    .await?;
    let mut body = status_body(&state).await;
    body["saved_step"] = json!("economics");
    body["estimate"] = json!({
        "power_watt": crate::handlers::round(watt, 1),
        "cost_per_day": crate::handlers::round(watt / 1000.0 * 24.0 * price, 2),
        "basis": "current input power x 24 h x the entered price",
    });
    Ok(json(body))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuietBody {
    enabled: Option<bool>,
    start: String,
    end: String,
    utc_offset_min: Option<i32>,
    /// IANA name, written to `[system].timezone`.
    timezone: Option<String>,
    power_cap_watt: Option<f64>,
    fan_max_percent: Option<u32>,
}

async fn quiet_hours(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: QuietBody = parse_body(&headers, &body)?;
    require_safety(&Wizard::load(&state))?;
    let mut night = serde_json::to_value(&state.config().home.night_mode).unwrap_or_default();
    night["enabled"] = json!(b.enabled.unwrap_or(true));
    night["start"] = json!(b.start);
    night["end"] = json!(b.end);
    let given = [
        ("utc_offset_min", json!(b.utc_offset_min)),
        ("power_cap_watt", json!(b.power_cap_watt)),
        ("fan_max_percent", json!(b.fan_max_percent)),
    ];
    for (name, v) in given.into_iter().filter(|(_, v)| !v.is_null()) {
        night[name] = v;
    }
    let system = b.timezone.map_or(json!({}), |tz| json!({ "timezone": tz }));
    let patch = json!({"home": {"night_mode": night.clone()}, "system": system});
    patch_config(&state, patch).await?;
    night["timezone"] = json!(state.config().system.timezone);
    update(&state, |w, now| {
        w.record("quiet_hours", StepStatus::Done, now, night);
        Ok(())
    })
    .await?;
    Ok(answer(&state, "quiet_hours").await)
}

async fn complete(State(state): State<AppState>) -> ApiResult {
    let password = password_set(&state).await;
    if password.is_none() {
        return Err(ApiError::unavailable("auth"));
    }
    update(&state, |w, now| {
        let missing = missing_for_completion(w, password);
        if let Some(first) = missing.first() {
            let how = STEPS.iter().find(|s| s.0 == *first).map_or("", |s| s.1);
            return Err(order_error(first, how).with("missing", missing.clone()));
        }
        if w.completed_at_ms.is_none() {
            w.completed_at_ms = Some(now);
        }
        Ok(())
    })
    .await?;
    Ok(answer(&state, "complete").await)
}

async fn acknowledge(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct AckBody {
        #[serde(default)]
        warning_ids: Option<Vec<String>>,
    }
    let b: AckBody = parse_body(&headers, &body)?;
    let current = current_warning_ids(&state).await;
    if let Some(ids) = &b.warning_ids
        && let Some(unknown) = ids.iter().find(|id| !current.contains(id))
    {
        return Err(invalid(
            "warning_ids",
            format!("{unknown} is not a current warning (see GET /api/safety/warnings)"),
        ));
    }
    let ids = b.warning_ids.unwrap_or(current);
    let w = update(&state, |w, now| {
        push_ack(
            w,
            Acknowledgement {
                at_ms: now,
                warning_ids: ids,
                via: "api".into(),
            },
        );
        Ok(())
    })
    .await?;
    let last = w.acknowledgements.last().cloned();
    Ok(json(json!({
        "schema": "svcos.api.safety.acknowledge.v1",
        "acknowledged": true,
        "acknowledgement": last,
        "count": w.acknowledgements.len(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn circuit_is_eighty_percent() {
        assert_eq!(circuit_limit_watt(240.0, 20.0), 3840.0);
        assert_eq!(circuit_limit_watt(120.0, 15.0), 1440.0);
        assert_eq!(circuit_limit_watt(230.0, 16.0), 2944.0);
    }

    #[test]
    fn completion_needs_safety_circuit_and_password() {
        let mut w = Wizard::default();
        assert_eq!(
            missing_for_completion(&w, Some(false)),
            ["safety", "circuit", "password"]
        );
        w.record("safety", StepStatus::Skipped, 1, Value::Null);
        w.record("circuit", StepStatus::Done, 2, Value::Null);
        assert_eq!(missing_for_completion(&w, Some(false)), ["password"]);
        assert!(missing_for_completion(&w, Some(true)).is_empty());
    }
}
