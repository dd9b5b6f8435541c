//! MQTT and webhook integrations: `/api/config/mqtt*`, `/api/config/webhook*`,
//! `/api/mqtt/status`. svcos-integrations keeps its status in these types, so the publisher,
//! the webhook workers and the API share one shape.

use std::collections::BTreeMap;

#[cfg(feature = "schema")]
use crate::config::Patch;
use serde::Serialize;
use serde_json::Value;
#[cfg(feature = "schema")]
use svcos_common::config::MqttConfig;

/// The MQTT publisher's state (`/api/mqtt/status` members).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttStatus {
    /// `[mqtt].enabled` as applied.
    pub enabled: bool,
    /// A broker session is up (CONNACK received, not lost since).
    pub connected: bool,
    /// `host:port` of the configured broker.
    pub broker: Option<String>,
    /// The client id in use.
    pub client_id: Option<String>,
    /// `<topic_prefix>/<node id>`.
    pub base_topic: Option<String>,
    /// Why the last attempt or session failed (never contains the password).
    pub last_error: Option<String>,
    /// When that happened, Unix ms.
    pub last_error_at_ms: Option<i64>,
    /// Since when the current session is up, Unix ms.
    pub connected_since_ms: Option<i64>,
    /// Successful connections since the gateway started.
    pub connects: u64,
    /// PUBLISH packets written to the broker since the gateway started.
    pub messages_published: u64,
    /// Messages not sent because the session was down or the buffer full.
    pub messages_dropped: u64,
    /// When the last PUBLISH was written, Unix ms.
    pub last_publish_ms: Option<i64>,
}

/// `GET /api/mqtt/status` (`svcos.api.mqtt.status.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttStatusBody {
    /// `svcos.api.mqtt.status.v1`.
    pub schema: &'static str,
    /// The publisher's state.
    #[serde(flatten)]
    pub status: MqttStatus,
}

/// The topics the publisher uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttTopics {
    /// `<topic_prefix>/<node id>`.
    pub base: String,
    /// `online`/`offline` (retained, also the last will).
    pub availability: String,
    /// The state document.
    pub state: String,
    /// Events.
    pub event: String,
    /// Where the connection test publishes.
    pub test: String,
    /// Home Assistant discovery topics, `<object_id>` standing for each entity.
    pub discovery: String,
    /// Command topic per entity.
    pub commands: BTreeMap<String, String>,
    /// Where command verdicts are published.
    pub command_result: String,
}

/// `GET /api/config/mqtt` (`svcos.api.config.mqtt.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttConfigBody {
    /// `svcos.api.config.mqtt.v1`.
    pub schema: &'static str,
    /// `[mqtt]`, the password replaced by `secret_mask` when set.
    #[cfg_attr(feature = "schema", schemars(with = "MqttConfig"))]
    pub config: Value,
    /// A password is stored.
    pub password_set: bool,
    /// The mask; sending it back keeps the stored password.
    pub secret_mask: &'static str,
    /// The client id the publisher uses.
    pub client_id: String,
    /// The topics.
    pub topics: MqttTopics,
    /// The publisher's state.
    pub status: MqttStatus,
}

/// One step of the MQTT connection test.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttTestStep {
    /// `resolve`, `tcp_connect`, `mqtt_connect`, `publish`, `disconnect`.
    pub name: &'static str,
    /// It succeeded.
    pub ok: bool,
    /// Time it took, ms.
    pub elapsed_ms: u64,
    /// Why it failed; `null` when `ok`.
    pub error: Option<String>,
}

/// `POST /api/config/mqtt/test` (`svcos.api.mqtt_test.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MqttTestBody {
    /// `svcos.api.mqtt_test.v1`.
    pub schema: &'static str,
    /// Every step succeeded.
    pub ok: bool,
    /// `host:port` tested.
    pub broker: String,
    /// The test's own client id (`<client id>-test`, so the live session stays).
    pub client_id: String,
    /// Where the test message went.
    pub topic: String,
    /// `<step>: <why>` of the failed step; `null` when `ok`.
    pub error: Option<String>,
    /// The steps up to the first failure.
    pub steps: Vec<MqttTestStep>,
}

impl MqttTestBody {
    /// The report of `steps` (which stop at the first failure).
    pub fn of(broker: String, client_id: String, topic: String, steps: Vec<MqttTestStep>) -> Self {
        let error = steps
            .iter()
            .find(|s| !s.ok)
            .map(|s| format!("{}: {}", s.name, s.error.as_deref().unwrap_or("")));
        MqttTestBody {
            schema: "svcos.api.mqtt_test.v1",
            ok: error.is_none(),
            broker,
            client_id,
            topic,
            error,
            steps,
        }
    }
}

/// The result of one webhook delivery attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeliveryOutcome {
    /// The receiver answered 2xx.
    pub ok: bool,
    /// The HTTP status, when a response came.
    pub status_code: Option<u16>,
    /// From sending the request to the response head (or the failure), ms.
    pub latency_ms: u64,
    /// Why it failed.
    pub error: Option<String>,
}

/// The last delivery of a hook.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LastDelivery {
    /// Event name.
    pub event: String,
    /// Event id.
    pub event_id: String,
    /// When the attempt finished, Unix ms.
    pub at_ms: i64,
    /// Attempt number (1 = first).
    pub attempt: u32,
    /// Whether another attempt is scheduled.
    pub will_retry: bool,
    /// The attempt's outcome.
    #[serde(flatten)]
    pub outcome: DeliveryOutcome,
}

/// One hook's delivery status.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HookStatus {
    /// Position in `[webhook].hooks`.
    pub index: usize,
    /// Receiver URL.
    pub url: String,
    /// Hook enabled (and the section enabled).
    pub active: bool,
    /// Events given up on after the last attempt failed.
    pub failed: u64,
    /// Events the receiver accepted (2xx).
    pub delivered: u64,
    /// Attempts after a failed one.
    pub retries: u64,
    /// Events dropped because the queue was full.
    pub dropped: u64,
    /// Events waiting now.
    pub queued: usize,
    /// The latest attempt; `null` before the first.
    pub last_delivery: Option<LastDelivery>,
}

/// A hook as `GET /api/config/webhook` shows it (schema only; the handler masks the saved
/// section and adds `secret_set`).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // a schema, never built
struct ShownHook {
    /// Receiver URL.
    url: String,
    /// Deliveries to it are on.
    enabled: bool,
    /// Event filters (`*`, `pool.*`, an event name).
    events: Vec<String>,
    /// The HMAC secret: the mask when one is set, else empty.
    secret: String,
    /// A secret is stored.
    secret_set: bool,
}

/// `[webhook]` as `GET /api/config/webhook` shows it (schema only).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // a schema, never built
struct ShownWebhook {
    /// Deliveries are on.
    enabled: bool,
    /// Per-attempt timeout, ms.
    timeout_ms: u32,
    /// Attempts per event.
    max_attempts: u32,
    /// Per-hook queue length.
    queue_len: u32,
    /// The receivers.
    hooks: Vec<ShownHook>,
}

/// How deliveries are signed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WebhookSignature {
    /// `X-Svcos-Signature`.
    pub header: &'static str,
    /// What the header holds.
    pub format: &'static str,
    /// `X-Svcos-Timestamp`.
    pub timestamp_header: &'static str,
    /// The body member with the same time.
    pub timestamp_in_body: &'static str,
    /// `X-Svcos-Delivery`.
    pub delivery_header: &'static str,
    /// `X-Svcos-Event`.
    pub event_header: &'static str,
}

/// `GET /api/config/webhook` (`svcos.api.config.webhook.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WebhookConfigBody {
    /// `svcos.api.config.webhook.v1`.
    pub schema: &'static str,
    /// `[webhook]`, secrets masked, each hook with `secret_set`.
    #[cfg_attr(feature = "schema", schemars(with = "ShownWebhook"))]
    pub config: Value,
    /// The mask; sending it back (or leaving `secret` out) keeps the stored secret.
    pub secret_mask: &'static str,
    /// Event names a hook may filter on.
    pub events_available: Vec<&'static str>,
    /// How deliveries are signed.
    pub signature: WebhookSignature,
    /// Delivery status per hook, in config order.
    pub hooks: Vec<HookStatus>,
}

/// One receiver's answer to the test event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WebhookTestResult {
    /// The receiver.
    pub url: String,
    /// The event was signed (a secret is set).
    pub signed: bool,
    /// It answered 2xx.
    pub ok: bool,
    /// Its HTTP status; `null` without a response.
    pub status_code: Option<u16>,
    /// Time to the response head (or the failure), ms.
    pub latency_ms: u64,
    /// Why it failed; `null` when `ok`.
    pub error: Option<String>,
}

/// `POST /api/config/webhook/test` (`svcos.api.webhook_test.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WebhookTestBody {
    /// `svcos.api.webhook_test.v1`.
    pub schema: &'static str,
    /// At least one receiver and all answered 2xx.
    pub ok: bool,
    /// `test`.
    pub event: &'static str,
    /// The test event's id.
    pub event_id: String,
    /// One per receiver.
    pub results: Vec<WebhookTestResult>,
}

impl WebhookTestBody {
    /// The report of the test event `event_id` and its `results`.
    pub fn of(event: &'static str, event_id: String, results: Vec<WebhookTestResult>) -> Self {
        WebhookTestBody {
            schema: "svcos.api.webhook_test.v1",
            ok: !results.is_empty() && results.iter().all(|r| r.ok),
            event,
            event_id,
            results,
        }
    }
}

crate::config::patch_request!(
    /// `POST /api/config/mqtt`, `POST /api/config/mqtt/test`: a merge patch of `[mqtt]`; a
    /// password equal to the mask keeps the stored one. `{"mqtt": {...}}` is accepted too.
    MqttPatchRequest,
    Patch<MqttConfig>
);

crate::config::patch_request!(
    /// `POST /api/config/webhook`: a merge patch of `[webhook]`; a hook without `secret` (or
    /// with the mask) keeps its stored secret. `{"webhook": {...}}` is accepted too.
    WebhookPatchRequest,
    Patch<svcos_common::config::WebhookConfig>
);

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &'static str, error: Option<&str>) -> MqttTestStep {
        MqttTestStep {
            name,
            ok: error.is_none(),
            elapsed_ms: 1,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn an_mqtt_test_names_the_failed_step() {
        let b = MqttTestBody::of(
            "b:1883".into(),
            "c-test".into(),
            "t".into(),
            vec![step("resolve", None), step("tcp_connect", Some("refused"))],
        );
        assert!(!b.ok);
        assert_eq!(b.error.as_deref(), Some("tcp_connect: refused"));
        let b = MqttTestBody::of(
            "b:1883".into(),
            "c".into(),
            "t".into(),
            vec![step("resolve", None)],
        );
        assert!(b.ok);
        assert_eq!(b.error, None);
    }

    #[test]
    fn a_webhook_test_without_receivers_is_not_ok() {
        assert!(!WebhookTestBody::of("test", "id".into(), vec![]).ok);
        let r = |ok| WebhookTestResult {
            url: "http://r".into(),
            signed: false,
            ok,
            status_code: Some(if ok { 200 } else { 500 }),
            latency_ms: 3,
            error: None,
        };
        assert!(WebhookTestBody::of("test", "id".into(), vec![r(true)]).ok);
        assert!(!WebhookTestBody::of("test", "id".into(), vec![r(true), r(false)]).ok);
    }

    #[test]
    fn the_status_body_is_the_status_plus_its_tag() {
        let v = serde_json::to_value(MqttStatusBody {
            schema: "svcos.api.mqtt.status.v1",
            status: MqttStatus::default(),
        })
        .unwrap();
        assert_eq!(v["schema"], "svcos.api.mqtt.status.v1");
        assert_eq!(v["connected"], false);
        assert!(v["broker"].is_null());
    }
}
