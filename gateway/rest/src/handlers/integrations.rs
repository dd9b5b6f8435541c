//! MQTT and webhook integrations: config (secrets masked), live status and connection tests.
//! The publishing itself runs in `svcos-integrations` tasks started with the gateway; these
//! handlers only save settings (which the tasks pick up at once) or read status snapshots.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use svcos_api_types::integrations::{
    MqttConfigBody, MqttPatchRequest, MqttStatusBody, MqttTopics, WebhookConfigBody,
    WebhookPatchRequest, WebhookSignature,
};
use svcos_api_types::requests::WebhookTestRequest;
use svcos_common::config::{Config, ConfigError, EVENT_NAMES, check_webhook_url};
use svcos_integrations::payload::{self, Topics};
use svcos_integrations::webhook::Target;

use super::{ApiResult, ok, parse_body};
use crate::config_write::{
    SECRET_MASK, config_from_json, mask_secrets, merge, patch_apply, validation_error,
};
use crate::envelope::{ApiError, ErrorCode};
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/config/mqtt", Bearer, P, Config, Full, "MQTT settings (password masked), topics and connection status", get_mqtt, res: svcos_api_types::integrations::MqttConfigBody),
        route!(POST "/api/config/mqtt", Bearer, P, Config, Full, "Change MQTT settings; validated, saved atomically, applied live", post_mqtt, req: svcos_api_types::integrations::MqttPatchRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(POST "/api/config/mqtt/test", Bearer, P, Config, Full, "Connect to a broker, publish a test message, report each step", test_mqtt, req: svcos_api_types::integrations::MqttPatchRequest, res: svcos_api_types::integrations::MqttTestBody),
        route!(GET "/api/config/webhook", Bearer, P, Config, Full, "Webhook settings (secrets masked) and last delivery per hook", get_webhook, res: svcos_api_types::integrations::WebhookConfigBody),
        route!(POST "/api/config/webhook", Bearer, P, Config, Full, "Change webhook settings; validated, saved atomically, applied live", post_webhook, req: svcos_api_types::integrations::WebhookPatchRequest, res: svcos_api_types::config::ConfigWriteBody),
        route!(POST "/api/config/webhook/test", Bearer, P, Config, Full, "Send a signed test event, report status code and latency", test_webhook, req: svcos_api_types::requests::WebhookTestRequest, res: svcos_api_types::integrations::WebhookTestBody),
        route!(GET "/api/mqtt/status", Bearer, P, Integrations, Full, "MQTT connection, last error, messages published", mqtt_status, res: svcos_api_types::integrations::MqttStatusBody),
    ]
}

/// `{"mqtt": {...}}` or the bare section.
fn section_body(body: Value, name: &str) -> ApiResult<serde_json::Map<String, Value>> {
    let body = match body {
        Value::Object(mut o) if o.len() == 1 && o.get(name).is_some_and(Value::is_object) => {
            o.remove(name).unwrap_or_default()
        }
        other => other,
    };
    match body {
        Value::Object(o) => Ok(o),
        _ => Err(
            ApiError::bad_request(format!("expected a JSON object with [{name}] settings"))
                .code(ErrorCode::ConfigValidation),
        ),
    }
}

/// Merge a patch over the current config, restore echoed secrets, validate, save, apply.
async fn apply_patch(state: &AppState, patch: Value) -> ApiResult {
    let report = patch_apply(state, None, &patch)
        .await
        .map_err(|e| e.into_api(ErrorCode::ConfigValidation, None))?;
    ok(report)
}

fn topics(config: &Config) -> MqttTopics {
    let t = Topics::new(&config.mqtt, &config.system.hostname);
    MqttTopics {
        discovery: t.discovery("<object_id>"),
        commands: svcos_integrations::commands::Entity::ALL
            .iter()
            .map(|e| (e.object().to_string(), t.command(*e)))
            .collect(),
        command_result: t.command_result(),
        base: t.base,
        availability: t.availability,
        state: t.state,
        event: t.event,
        test: t.test,
    }
}

async fn get_mqtt(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let mut section = json!({ "mqtt": config.mqtt });
    mask_secrets(&mut section);
    let t = Topics::new(&config.mqtt, &config.system.hostname);
    ok(MqttConfigBody {
        schema: "svcos.api.config.mqtt.v1",
        config: section["mqtt"].take(),
        password_set: !config.mqtt.password.is_empty(),
        secret_mask: SECRET_MASK,
        client_id: payload::client_id(&config.mqtt, &t),
        topics: topics(&config),
        status: state.integrations.mqtt_status(),
    })
}

async fn post_mqtt(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let MqttPatchRequest(body) = parse_body(&headers, &body)?;
    let mut patch = section_body(body, "mqtt")?;
    // Sending back what GET showed keeps the stored password.
    if patch.get("password").and_then(Value::as_str) == Some(SECRET_MASK) {
        patch.remove("password");
    }
    patch.remove("password_set");
    apply_patch(&state, json!({ "mqtt": patch })).await
}

async fn test_mqtt(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let MqttPatchRequest(body) = parse_body(&headers, &body)?;
    let mut patch = section_body(body, "mqtt")?;
    let saved = state.config();
    // The stored password goes only to the stored broker (and user): a test against another
    // host must bring its own credentials.
    let same_broker = patch
        .get("host")
        .is_none_or(|h| h.as_str() == Some(saved.mqtt.host.as_str()))
        && patch
            .get("username")
            .is_none_or(|u| u.as_str() == Some(saved.mqtt.username.as_str()));
    let keep_password = match patch.get("password").and_then(Value::as_str) {
        None => same_broker,
        Some(p) => p == SECRET_MASK && same_broker,
    };
    if keep_password {
        patch.remove("password");
    } else if patch.get("password").and_then(Value::as_str) == Some(SECRET_MASK)
        || !patch.contains_key("password")
    {
        patch.insert("password".into(), Value::String(String::new()));
    }
    // A test is always of an enabled connection, so an empty host is reported as missing.
    patch.insert("enabled".into(), Value::Bool(true));
    let patch = json!({ "mqtt": patch });
    let mut merged = serde_json::to_value(&*saved).unwrap_or(Value::Null);
    merge(&mut merged, &patch);
    let candidate = config_from_json(&merged, &patch)
        .and_then(|c| c.validate().map(|()| c))
        .map_err(|e| validation_error(ErrorCode::ConfigValidation, &e))?;
    ok(state.integrations.test_mqtt(&candidate.mqtt).await)
}

async fn mqtt_status(State(state): State<AppState>) -> ApiResult {
    ok(MqttStatusBody {
        schema: "svcos.api.mqtt.status.v1",
        status: state.integrations.mqtt_status(),
    })
}

async fn get_webhook(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let mut section = json!({ "webhook": config.webhook });
    mask_secrets(&mut section);
    let mut cfg = section["webhook"].take();
    if let Some(hooks) = cfg.get_mut("hooks").and_then(Value::as_array_mut) {
        for (h, stored) in hooks.iter_mut().zip(&config.webhook.hooks) {
            h["secret_set"] = Value::Bool(!stored.secret.is_empty());
        }
    }
    ok(WebhookConfigBody {
        schema: "svcos.api.config.webhook.v1",
        config: cfg,
        secret_mask: SECRET_MASK,
        events_available: EVENT_NAMES.to_vec(),
        signature: WebhookSignature {
            header: "X-Svcos-Signature",
            format: "sha256=<hex HMAC-SHA256(secret, raw request body)>",
            timestamp_header: "X-Svcos-Timestamp",
            timestamp_in_body: "sent_at",
            delivery_header: "X-Svcos-Delivery",
            event_header: "X-Svcos-Event",
        },
        hooks: state.integrations.webhook_status(),
    })
}

async fn post_webhook(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let WebhookPatchRequest(body) = parse_body(&headers, &body)?;
    let mut patch = section_body(body, "webhook")?;
    if let Some(hooks) = patch.get_mut("hooks").and_then(Value::as_array_mut) {
        for h in hooks.iter_mut().filter_map(Value::as_object_mut) {
            // Read-only member of the GET shape.
            h.remove("secret_set");
            // An omitted secret keeps the stored one (matched by URL, else position).
            if !h.contains_key("secret") {
                h.insert("secret".into(), Value::String(SECRET_MASK.into()));
            }
        }
    }
    apply_patch(&state, json!({ "webhook": patch })).await
}

fn test_field_error(field: &str, message: &str) -> ApiError {
    validation_error(
        ErrorCode::ConfigValidation,
        &ConfigError::invalid(field, message),
    )
}

async fn test_webhook(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: WebhookTestRequest = parse_body(&headers, &body)?;
    let config = state.config();
    let hooks = &config.webhook.hooks;
    let targets: Vec<Target> = match (b.url, b.index) {
        (Some(_), Some(_)) => {
            return Err(test_field_error(
                "url",
                "send either url or index, not both",
            ));
        }
        (Some(url), None) => {
            check_webhook_url(&url).map_err(|m| test_field_error("url", m))?;
            let secret = match b.secret {
                Some(s) if s != SECRET_MASK => s,
                // The stored secret only for the URL it belongs to.
                _ => hooks
                    .iter()
                    .find(|h| h.url == url)
                    .map(|h| h.secret.clone())
                    .unwrap_or_default(),
            };
            vec![Target { url, secret }]
        }
        (None, Some(i)) => {
            let h = hooks.get(i).ok_or_else(|| {
                test_field_error("index", &format!("{} hook(s) are configured", hooks.len()))
            })?;
            vec![Target {
                url: h.url.clone(),
                secret: h.secret.clone(),
            }]
        }
        (None, None) => {
            if hooks.is_empty() {
                return Err(test_field_error(
                    "url",
                    "no hooks are configured; send {\"url\": \"http://…\"} to test one",
                ));
            }
            hooks
                .iter()
                .map(|h| Target {
                    url: h.url.clone(),
                    secret: h.secret.clone(),
                })
                .collect()
        }
    };
    let timeout = Duration::from_millis(u64::from(config.webhook.timeout_ms));
    ok(state.integrations.test_webhook(&targets, timeout).await)
}
