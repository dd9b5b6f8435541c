//! Webhook deliveries: one worker per enabled hook, each with a bounded queue that drops its
//! oldest event when full; retries back off 1 s, 2 s, 4 s, … (at most 60 s) up to
//! `[webhook].max_attempts`; every attempt is signed anew.
//!
//! Request: `POST <url>`, `Content-Type: application/json`, body = the event envelope
//! ([`crate::Event`]) plus `sent_at` (Unix seconds) and `attempt`. Headers:
//! `X-Svcos-Event` (event name), `X-Svcos-Delivery` (event id, the same on every retry),
//! `X-Svcos-Timestamp` (= body `sent_at`), `X-Svcos-Attempt`, and, when the hook has a secret,
//! `X-Svcos-Signature: sha256=<hex HMAC-SHA256(secret, raw body)>`. The timestamp is inside the
//! signed body, so a receiver that checks the signature, then `|now - sent_at| <= 300` and that
//! the header equals the body member, rejects replays older than five minutes; the delivery id
//! lets it drop duplicates within that window.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::header::{CONTENT_TYPE, USER_AGENT};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
#[cfg(test)]
use serde_json::json;
use sha2::Sha256;
use svcos_api_types::integrations::{WebhookTestBody, WebhookTestResult};
use svcos_common::Shutdown;
use svcos_common::config::{WebhookConfig, WebhookHook, event_matches};
use svcos_common::ipc::Backoff;
use svcos_common::time::Clock;
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::{Event, Settings};

/// The HTTP client used for deliveries (plain HTTP/1.1, no TLS).
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;
/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-svcos-signature";
/// Header carrying the signing time (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-svcos-timestamp";
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A client that never pools more than one idle connection per receiver.
pub fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.enforce_http(true);
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(1)
        .build(connector)
}

/// `sha256=<hex>` of HMAC-SHA256(secret, body).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Where a delivery goes.
#[derive(Clone)]
pub struct Target {
    /// `http://…`.
    pub url: String,
    /// Signing key; empty sends unsigned.
    pub secret: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("secret_set", &!self.secret.is_empty())
            .finish()
    }
}

/// The result of one attempt.
pub use svcos_api_types::integrations::DeliveryOutcome as Outcome;
pub use svcos_api_types::integrations::{HookStatus, LastDelivery};

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// The body of one attempt: the event plus `sent_at` and `attempt`.
pub fn body(event: &Event, sent_at: i64, attempt: u32) -> Vec<u8> {
    let mut v = serde_json::to_value(event).expect("event serialises");
    if let Some(o) = v.as_object_mut() {
        o.insert("sent_at".into(), sent_at.into());
        o.insert("attempt".into(), attempt.into());
    }
    serde_json::to_vec(&v).expect("body serialises")
}

/// Send one signed attempt and wait for the response head.
pub async fn deliver(
    http: &HttpClient,
    target: &Target,
    event: &Event,
    attempt: u32,
    timeout: Duration,
    clock: &dyn Clock,
) -> Outcome {
    let sent_at = clock.now_s();
    let bytes = body(event, sent_at, attempt);
    let mut req = http::Request::post(target.url.as_str())
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, format!("svcos/{VERSION}"))
        .header("x-svcos-event", event.event)
        .header("x-svcos-delivery", event.id.as_str())
        .header(TIMESTAMP_HEADER, sent_at.to_string())
        .header("x-svcos-attempt", attempt.to_string());
    if !target.secret.is_empty() {
        req = req.header(SIGNATURE_HEADER, sign(&target.secret, &bytes));
    }
    let started = Instant::now();
    let req = match req.body(Full::new(Bytes::from(bytes))) {
        Ok(r) => r,
        Err(e) => {
            return Outcome {
                ok: false,
                status_code: None,
                latency_ms: 0,
                error: Some(format!("invalid request: {e}")),
            };
        }
    };
    let result = tokio::time::timeout(timeout, http.request(req)).await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(Ok(resp)) => {
            let code = resp.status();
            Outcome {
                ok: code.is_success(),
                status_code: Some(code.as_u16()),
                latency_ms,
                error: (!code.is_success()).then(|| format!("receiver answered {code}")),
            }
        }
        Ok(Err(e)) => Outcome {
            ok: false,
            status_code: None,
            latency_ms,
            error: Some(error_chain(&e)),
        },
        Err(_) => Outcome {
            ok: false,
            status_code: None,
            latency_ms,
            error: Some(format!("no response within {} ms", timeout.as_millis())),
        },
    }
}

#[derive(Debug, Clone, Default)]
struct Counters {
    delivered: u64,
    failed: u64,
    retries: u64,
    dropped: u64,
    queued: usize,
    last: Option<LastDelivery>,
}

/// Per-URL counters shared by the workers and the API.
#[derive(Debug, Clone, Default)]
pub struct HookStatuses(Arc<Mutex<BTreeMap<String, Counters>>>);

impl HookStatuses {
    fn with(&self, url: &str, f: impl FnOnce(&mut Counters)) {
        f(self
            .0
            .lock()
            .expect("hook status lock")
            .entry(url.to_string())
            .or_default());
    }

    fn retain(&self, cfg: &WebhookConfig) {
        self.0
            .lock()
            .expect("hook status lock")
            .retain(|url, _| cfg.hooks.iter().any(|h| &h.url == url));
    }

    /// Status of every configured hook, in config order.
    pub fn snapshot(&self, cfg: &WebhookConfig) -> Vec<HookStatus> {
        let map = self.0.lock().expect("hook status lock");
        cfg.hooks
            .iter()
            .enumerate()
            .map(|(index, h)| {
                let c = map.get(&h.url).cloned().unwrap_or_default();
                HookStatus {
                    index,
                    url: h.url.clone(),
                    active: cfg.enabled && h.enabled,
                    failed: c.failed,
                    delivered: c.delivered,
                    retries: c.retries,
                    dropped: c.dropped,
                    queued: c.queued,
                    last_delivery: c.last,
                }
            })
            .collect()
    }
}

/// A bounded FIFO that drops its oldest entry when full (the newest news matters most).
struct Queue {
    items: Mutex<VecDeque<Arc<Event>>>,
    cap: usize,
    ready: Notify,
}

impl Queue {
    fn new(cap: usize) -> Self {
        Queue {
            items: Mutex::new(VecDeque::with_capacity(cap.min(64))),
            cap,
            ready: Notify::new(),
        }
    }

    /// Returns the queue length and whether an old event was dropped.
    fn push(&self, ev: Arc<Event>) -> (usize, bool) {
        let mut items = self.items.lock().expect("queue lock");
        let dropped = items.len() >= self.cap && items.pop_front().is_some();
        items.push_back(ev);
        let len = items.len();
        drop(items);
        self.ready.notify_one();
        (len, dropped)
    }

    async fn pop(&self) -> (Arc<Event>, usize) {
        loop {
            {
                let mut items = self.items.lock().expect("queue lock");
                if let Some(ev) = items.pop_front() {
                    return (ev, items.len());
                }
            }
            self.ready.notified().await;
        }
    }
}

/// What the dispatcher needs.
pub struct Ctx {
    /// Live settings.
    pub settings: watch::Receiver<Arc<Settings>>,
    /// Derived events.
    pub events: broadcast::Receiver<Arc<Event>>,
    /// Shared per-hook status.
    pub statuses: HookStatuses,
    /// HTTP client.
    pub http: HttpClient,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Stop.
    pub shutdown: Shutdown,
}

struct Worker {
    url: String,
    events: Vec<String>,
    queue: Arc<Queue>,
}

/// Run until shutdown: route each event to the queues of the hooks whose filter matches.
pub async fn run(mut ctx: Ctx) {
    loop {
        let settings = ctx.settings.borrow_and_update().clone();
        let cfg = settings.webhook.clone();
        ctx.statuses.retain(&cfg);
        let mut tasks = JoinSet::new();
        let mut workers = Vec::new();
        if cfg.enabled {
            for hook in cfg.hooks.iter().filter(|h| h.enabled) {
                let queue = Arc::new(Queue::new(cfg.queue_len as usize));
                tasks.spawn(worker(
                    hook.clone(),
                    cfg.clone(),
                    queue.clone(),
                    ctx.http.clone(),
                    ctx.statuses.clone(),
                    ctx.clock.clone(),
                ));
                workers.push(Worker {
                    url: hook.url.clone(),
                    events: hook.events.clone(),
                    queue,
                });
            }
        }
        // Events that arrived while no worker ran are not delivered later.
        let mut events = ctx.events.resubscribe();
        loop {
            tokio::select! {
                _ = ctx.shutdown.wait() => {
                    tasks.abort_all();
                    return;
                }
                r = ctx.settings.changed() => {
                    if r.is_err() {
                        return;
                    }
                    if ctx.settings.borrow().webhook != cfg {
                        // Queued and in-flight deliveries of the old config are dropped.
                        tasks.abort_all();
                        break;
                    }
                }
                ev = events.recv() => match ev {
                    Ok(ev) => {
                        for w in &workers {
                            if ev.event == "test" || !event_matches(&w.events, ev.event) {
                                continue;
                            }
                            let (len, dropped) = w.queue.push(ev.clone());
                            ctx.statuses.with(&w.url, |c| {
                                c.queued = len;
                                c.dropped += u64::from(dropped);
                            });
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        for w in &workers {
                            ctx.statuses.with(&w.url, |c| c.dropped += n);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

async fn worker(
    hook: WebhookHook,
    cfg: WebhookConfig,
    queue: Arc<Queue>,
    http: HttpClient,
    statuses: HookStatuses,
    clock: Arc<dyn Clock>,
) {
    let target = Target {
        url: hook.url.clone(),
        secret: hook.secret.clone(),
    };
    let timeout = Duration::from_millis(u64::from(cfg.timeout_ms));
    loop {
        let (ev, left) = queue.pop().await;
        statuses.with(&target.url, |c| c.queued = left);
        let mut backoff = Backoff::new(Duration::from_secs(1), MAX_BACKOFF);
        for attempt in 1..=cfg.max_attempts {
            let outcome = deliver(&http, &target, &ev, attempt, timeout, clock.as_ref()).await;
            let ok = outcome.ok;
            let will_retry = !ok && attempt < cfg.max_attempts;
            if !ok {
                tracing::info!(
                    event = ev.event,
                    attempt,
                    will_retry,
                    error = outcome.error.as_deref().unwrap_or(""),
                    "webhook delivery failed"
                );
            }
            statuses.with(&target.url, |c| {
                c.delivered += u64::from(ok);
                c.failed += u64::from(!ok && !will_retry);
                c.retries += u64::from(attempt > 1);
                c.last = Some(LastDelivery {
                    event: ev.event.to_string(),
                    event_id: ev.id.clone(),
                    at_ms: clock.now_ms(),
                    attempt,
                    will_retry,
                    outcome,
                });
            });
            if !will_retry {
                break;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}

/// The test endpoint: one attempt per target, now, bypassing the queues.
pub async fn test(
    http: &HttpClient,
    targets: &[Target],
    event: &Event,
    timeout: Duration,
    clock: &dyn Clock,
) -> WebhookTestBody {
    let mut results = Vec::new();
    for t in targets {
        let o = deliver(http, t, event, 1, timeout, clock).await;
        results.push(WebhookTestResult {
            url: t.url.clone(),
            signed: !t.secret.is_empty(),
            ok: o.ok,
            status_code: o.status_code,
            latency_ms: o.latency_ms,
            error: o.error,
        });
    }
    WebhookTestBody::of(event.event, event.id.clone(), results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn queue_drops_oldest() {
        let q = Queue::new(2);
        let ev = |n: &str| Arc::new(Event::new("test", json!({}), n, 0));
        assert_eq!(q.push(ev("a")), (1, false));
        assert_eq!(q.push(ev("b")), (2, false));
        assert_eq!(q.push(ev("c")), (2, true));
        let items = q.items.lock().unwrap();
        assert_eq!(items[0].hostname, "b");
    }
}
