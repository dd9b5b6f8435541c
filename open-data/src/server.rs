//! The HTTP face: an axum router generated from the registry, the shared state, and the
//! refresh loops (hashprice, price feed) that swap in new snapshots.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::{MethodRouter, get};
use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::cache::{Entry, ResponseCache, negotiate};
use crate::datasets::{DatasetInfo, PriceFeed};
use crate::hashprice;
use crate::listen::{self, Limits, Tracker};
use crate::query::{self, Params};
use crate::registry::{self, CACHE_ERROR, Kind, NOTICE, ROUTES, Route};
use crate::render::{self, DatasetData, HashpriceView, Record, Snapshot};
use crate::store::{Store, StoreError};
use crate::time::{now_unix, rfc3339};
use crate::upstream::{self, ChainSource};

/// Methods every route answers (OPTIONS only as CORS preflight).
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// How the hashprice is refreshed.
#[derive(Debug, Clone)]
pub struct HashpriceConfig {
    /// Chain upstream; None = hashprice stays empty (stale, "no upstream configured").
    pub chain: Option<ChainSource>,
    /// Price upstream.
    pub price: Option<crate::client::Url>,
    /// Seconds between refreshes (15 minutes in production).
    pub interval: Duration,
    /// Blocks averaged for fees.
    pub fee_blocks: u64,
    /// First retry after a failed refresh; each further failure doubles it.
    pub retry_min: Duration,
    /// Longest wait between retries while the upstreams fail (never more than `interval`), so
    /// a recovered upstream is picked up within this long.
    pub retry_max: Duration,
}

/// Default time between hashprice refreshes (the spec's 15 minutes).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(900);
/// Default first retry after a failed hashprice refresh.
pub const RETRY_MIN: Duration = Duration::from_secs(5);
/// Default longest wait between retries: an upstream that comes back is used within a minute.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// Wait before the next hashprice attempt after `failures` failed ones in a row (0 = the last
/// one succeeded): the interval, or `retry_min` doubled per further failure up to `retry_max`
/// (and never longer than the interval).
pub fn next_attempt_in(cfg: &HashpriceConfig, failures: u32) -> Duration {
    if failures == 0 || cfg.chain.is_none() || cfg.price.is_none() {
        return cfg.interval;
    }
    let doubled = cfg.retry_min.saturating_mul(1u32 << (failures - 1).min(16));
    doubled.min(cfg.retry_max).min(cfg.interval)
}

/// Where the price feed is refreshed from (None: the one loaded at start is kept).
#[derive(Debug, Clone)]
pub enum FeedSource {
    /// A local file.
    File(std::path::PathBuf),
    /// An http(s) URL.
    Url(crate::client::Url),
}

/// Shared state of the server.
pub struct AppState {
    infos: BTreeMap<String, DatasetInfo>,
    source: crate::datasets::Source,
    snapshot: RwLock<Arc<Snapshot>>,
    cache: ResponseCache,
    store: Mutex<Store>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("cache_entries", &self.cache.len())
            .finish()
    }
}

fn records_of(raw: &[String]) -> Result<Vec<Record>, StoreError> {
    raw.iter()
        .map(|r| {
            let v: Value = serde_json::from_str(r)
                .map_err(|e| StoreError::Corrupt(r.chars().take(40).collect(), e))?;
            Ok(Record {
                raw: r.clone(),
                value: v.as_object().cloned().unwrap_or_default(),
            })
        })
        .collect()
}

/// Build the served snapshot from the store.
pub fn snapshot_from_store(
    store: &Store,
    openapi: Arc<Value>,
    site_url: Option<String>,
    interval_s: u64,
) -> Result<Snapshot, StoreError> {
    let mut datasets = BTreeMap::new();
    for (name, ds) in store.datasets()? {
        datasets.insert(
            name,
            DatasetData {
                version: ds.version,
                title: ds.title,
                description: ds.description,
                generated_at: rfc3339(ds.loaded_at),
                records: records_of(&ds.records)?,
            },
        );
    }
    let (feed_origin, feed_header) = store.feed()?.unwrap_or_default();
    let history: Vec<(i64, String)> = store.hashprice_history(5000)?;
    let mut hp = HashpriceView {
        interval_s,
        stale: true,
        stale_reason: Some("no successful refresh since the service started".into()),
        ..HashpriceView::default()
    };
    if let Some((at, raw)) = history.first() {
        hp.record = Some(raw.clone());
        hp.last_success_at = Some(rfc3339(*at));
    }
    Ok(Snapshot {
        datasets,
        feed_header,
        feed_origin,
        feed_stale: false,
        hashprice: hp,
        history: history.into_iter().map(|(_, r)| r).collect(),
        openapi,
        site_url,
    })
}

impl AppState {
    /// State over an opened, loaded store.
    pub fn new(
        infos: BTreeMap<String, DatasetInfo>,
        source: crate::datasets::Source,
        store: Store,
        site_url: Option<String>,
        interval_s: u64,
        cache_entries: usize,
    ) -> Result<AppState, StoreError> {
        let openapi = Arc::new(registry::openapi(&infos, site_url.as_deref()));
        let snap = snapshot_from_store(&store, openapi, site_url, interval_s)?;
        Ok(AppState {
            infos,
            source,
            snapshot: RwLock::new(Arc::new(snap)),
            cache: ResponseCache::new(cache_entries),
            store: Mutex::new(store),
        })
    }

    fn snap(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        let mut guard = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**guard).clone();
        f(&mut next);
        *guard = Arc::new(next);
        drop(guard);
        self.cache.invalidate();
    }

    /// Render every parameterless route now, so the first visitors find them cached.
    pub fn warm(&self) {
        for route in ROUTES
            .iter()
            .filter(|r| r.params.iter().all(|p| !p.in_path))
        {
            if let Ok(params) = query::parse_query(route.params, None) {
                let _ = self.entry(route, &params, None);
            }
        }
    }

    fn entry(&self, route: &'static Route, params: &Params, key: Option<&str>) -> Arc<Entry> {
        let mut cache_key = query::cache_key(route.id, params);
        if let Some(k) = key {
            cache_key.push('/');
            cache_key.push_str(k);
        }
        if let Some(e) = self.cache.get(&cache_key) {
            return e;
        }
        let generation = self.cache.generation();
        let snap = self.snap();
        let r = render::render(route, &snap, &self.infos, params, key);
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let cc = if status.is_success() {
            route.cache.header()
        } else {
            CACHE_ERROR.header()
        };
        let e = Arc::new(Entry::new(status, r.content_type, &cc, Bytes::from(r.body)));
        self.cache.insert(cache_key, generation, e.clone());
        e
    }

    /// One hashprice refresh: on success a new record (stored, history extended); on failure
    /// the last good record stays, flagged stale with the reason. Whether it succeeded.
    pub async fn refresh_hashprice(&self, cfg: &HashpriceConfig) -> bool {
        let now = now_unix();
        let (Some(chain), Some(price)) = (&cfg.chain, &cfg.price) else {
            self.update(|s| {
                s.hashprice.stale = true;
                s.hashprice.stale_reason =
                    Some("offline: no chain or price upstream (--offline)".into());
                s.hashprice.last_attempt_at = Some(rfc3339(now));
            });
            return false;
        };
        let (c, p) = tokio::join!(chain.fetch(cfg.fee_blocks), upstream::fetch_price(price));
        match (c, p) {
            (Ok(c), Ok(p)) => {
                let label_price = price.host_port();
                let rec = serde_json::to_string(&hashprice::compute(
                    &c,
                    p,
                    now,
                    &chain.label(),
                    &label_price,
                ))
                .unwrap_or_default();
                let stored = self
                    .store
                    .lock()
                    .map_err(|_| "store lock poisoned".to_string())
                    .and_then(|s| s.insert_hashprice(now, &rec).map_err(|e| e.to_string()));
                if let Err(e) = &stored {
                    tracing::warn!(error = %e, "hashprice history not stored");
                }
                tracing::info!(
                    height = c.height,
                    difficulty = c.difficulty,
                    "hashprice refreshed"
                );
                self.update(|s| {
                    s.hashprice.record = Some(rec.clone());
                    s.hashprice.stale = false;
                    s.hashprice.stale_reason = None;
                    s.hashprice.last_attempt_at = Some(rfc3339(now));
                    s.hashprice.last_success_at = Some(rfc3339(now));
                    s.history.insert(0, rec);
                    s.history.truncate(5000);
                });
                true
            }
            (c, p) => {
                let mut why = Vec::new();
                if let Err(e) = c {
                    why.push(format!("chain: {e}"));
                }
                if let Err(e) = p {
                    why.push(format!("price: {e}"));
                }
                let reason = why.join("; ");
                tracing::warn!(%reason, "hashprice refresh failed; serving the last good value as stale");
                self.update(|s| {
                    s.hashprice.stale = true;
                    s.hashprice.stale_reason = Some(reason);
                    s.hashprice.last_attempt_at = Some(rfc3339(now));
                });
                false
            }
        }
    }

    /// Reload the price feed; a failure keeps the last good items (meta.stale = true).
    pub async fn refresh_feed(&self, source: &FeedSource) {
        let loaded = match source {
            FeedSource::File(p) => {
                crate::datasets::read_feed_file(p, &self.infos).map_err(|e| e.to_string())
            }
            FeedSource::Url(u) => match crate::client::fetch(u, None, upstream::TIMEOUT).await {
                Ok(b) => crate::datasets::feed_from_text(
                    &u.host_port(),
                    &String::from_utf8_lossy(&b),
                    &self.infos,
                )
                .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        };
        match loaded.and_then(|feed| self.replace_feed(&feed)) {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(error = %e, "price feed refresh failed; serving the last good items");
                self.update(|s| s.feed_stale = true);
            }
        }
    }

    fn replace_feed(&self, feed: &PriceFeed) -> Result<(), String> {
        // The miners' linked products depend on the feed, so every dataset is derived again
        // from the static files plus the new feed, then stored in one transaction.
        let recs = crate::datasets::load_all(&self.source, &self.infos, feed)
            .map_err(|e| e.to_string())?;
        let snap = {
            let mut store = self
                .store
                .lock()
                .map_err(|_| "store lock poisoned".to_string())?;
            store
                .replace_all(&self.infos, &recs, feed, &self.source.label(), now_unix())
                .map_err(|e| e.to_string())?;
            let cur = self.snap();
            snapshot_from_store(
                &store,
                cur.openapi.clone(),
                cur.site_url.clone(),
                cur.hashprice.interval_s,
            )
            .map_err(|e| e.to_string())?
        };
        self.update(|s| {
            s.datasets = snap.datasets;
            s.feed_header = snap.feed_header;
            s.feed_origin = snap.feed_origin;
            s.feed_stale = false;
        });
        Ok(())
    }
}

fn base_headers(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("ETag, X-SVC-API, Cache-Control"),
    );
    h.insert("x-svc-api", HeaderValue::from_static(NOTICE));
}

fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    parameter: Option<&str>,
) -> Response {
    let allow = (status == StatusCode::METHOD_NOT_ALLOWED).then_some(ALLOW);
    let body = render::error_body(status.as_u16(), code, message, parameter, allow);
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    base_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_str(&CACHE_ERROR.header())
            .unwrap_or(HeaderValue::from_static("no-cache")),
    );
    if let Some(a) = allow {
        h.insert(header::ALLOW, HeaderValue::from_static(a));
    }
    resp
}

fn serve_entry(entry: &Entry, req_headers: &HeaderMap) -> Response {
    let coding = negotiate(
        req_headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok()),
    );
    let (body, etag, coding) = entry.variant(coding);
    let not_modified = entry.status.is_success()
        && req_headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|inm| entry.matches(inm));
    let mut resp = if not_modified {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let len = body.len();
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = entry.status;
        // Sized once for the ten headers below instead of growing on the way.
        r.headers_mut().reserve(12);
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, entry.content_type.clone());
        if let Some(enc) = coding.header() {
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static(enc));
        }
        r
    };
    let h = resp.headers_mut();
    base_headers(h);
    h.insert(header::CACHE_CONTROL, entry.cache_control.clone());
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if entry.status.is_success() {
        h.insert(header::ETAG, etag);
    }
    resp
}

async fn handle(
    state: Arc<AppState>,
    route: &'static Route,
    key: Option<String>,
    req: Request,
) -> Response {
    let raw_query = req.uri().query();
    let headers = req.headers();
    // The common case (a parameterless route already rendered) skips query parsing and the
    // cache-key string: an empty query's key is the route id itself.
    if raw_query.is_none()
        && key.is_none()
        && let Some(entry) = state.cache.get(route.id)
    {
        return serve_entry(&entry, headers);
    }
    let params = match query::parse_query(route.params, raw_query) {
        Ok(p) => p,
        Err(e) => {
            let code = if e.message.starts_with("unknown parameter") {
                "unknown_parameter"
            } else {
                "invalid_parameter"
            };
            return error_response(
                StatusCode::BAD_REQUEST,
                code,
                &e.message,
                Some(&e.parameter),
            );
        }
    };
    if let (Some(k), Some(p)) = (&key, route.params.iter().find(|p| p.in_path))
        && let Err(e) = query::parse_value(p, k)
    {
        if route.kind == Kind::DataFile {
            return error_response(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("no mirror file {k:?}; see /data/"),
                None,
            );
        }
        return error_response(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            &e.message,
            Some(&e.parameter),
        );
    }
    let entry = state.entry(route, &params, key.as_deref());
    serve_entry(&entry, headers)
}

/// The answer to a request whose handler overran [`Limits::request_timeout`].
pub(crate) fn timeout_response() -> Response {
    let mut resp = error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "timeout",
        "the answer took too long; retry",
        None,
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

async fn preflight(headers: HeaderMap) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    base_headers(h);
    h.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW),
    );
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or(HeaderValue::from_static("*"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    resp
}

async fn method_not_allowed(method: Method) -> Response {
    error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &format!("{method} is not allowed; this API is read-only ({ALLOW})"),
        None,
    )
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Response {
    if method == Method::OPTIONS {
        return preflight(HeaderMap::new()).await;
    }
    error_response(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!(
            "no route {}; see /v1/catalog, /v1/openapi.json or /data/api/",
            uri.path()
        ),
        None,
    )
}

fn method_router(state: &Arc<AppState>, route: &'static Route) -> MethodRouter {
    let has_key = route.params.iter().any(|p| p.in_path);
    let st = state.clone();
    let getter = if has_key {
        get(move |Path(key): Path<String>, req: Request| handle(st.clone(), route, Some(key), req))
    } else {
        get(move |req: Request| handle(st.clone(), route, None, req))
    };
    getter.options(preflight).fallback(method_not_allowed)
}

fn redirect(to: &'static str) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    base_headers(resp.headers_mut());
    resp
}

/// The router: one axum route per registry entry, plus `/` and `/v1` redirecting to the index
/// and `/data` to `/data/`.
pub fn router(state: Arc<AppState>) -> Router {
    let mut app = Router::new();
    for route in ROUTES {
        app = app.route(route.path, method_router(&state, route));
    }
    debug_assert!(ROUTES.iter().any(|r| r.kind == Kind::Index));
    app.route(
        "/",
        get(|| async { redirect("/v1/") }).fallback(method_not_allowed),
    )
    .route(
        "/v1",
        get(|| async { redirect("/v1/") }).fallback(method_not_allowed),
    )
    .route(
        "/data",
        get(|| async { redirect("/data/") }).fallback(method_not_allowed),
    )
    .fallback(not_found)
}

/// Serve on `listener` within `limits` (see [`listen`]) until `shutdown` resolves, refreshing
/// hashprice and feed meanwhile.
pub async fn run(
    state: Arc<AppState>,
    listener: TcpListener,
    hashprice_cfg: HashpriceConfig,
    feed: Option<(FeedSource, Duration)>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    state.warm();
    let st = state.clone();
    let hp = tokio::spawn(async move {
        // A failed refresh is retried with backoff (RETRY_MIN doubling up to RETRY_MAX), not
        // after the whole interval: an upstream down at start, or for a while, is used again
        // within RETRY_MAX of coming back.
        let mut failures = 0u32;
        loop {
            if st.refresh_hashprice(&hashprice_cfg).await {
                failures = 0;
            } else {
                failures = failures.saturating_add(1);
            }
            let wait = next_attempt_in(&hashprice_cfg, failures);
            if failures > 0 && hashprice_cfg.chain.is_some() {
                tracing::info!(
                    failures,
                    retry_in_s = wait.as_secs_f64(),
                    "hashprice refresh will be retried"
                );
            }
            tokio::time::sleep(wait).await;
        }
    });
    let feed_task = feed.map(|(source, every)| {
        let st = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                st.refresh_feed(&source).await;
            }
        })
    });
    let tracker = Tracker::new(limits.budget());
    tracing::info!(
        max_connections = tracker.budget(),
        header_read_timeout_s = limits.header_read_timeout.as_secs_f64(),
        idle_timeout_s = limits.idle_timeout.as_secs_f64(),
        request_timeout_s = limits.request_timeout.as_secs_f64(),
        "connection limits"
    );
    listen::serve(listener, router(state), limits, tracker, shutdown).await;
    hp.abort();
    if let Some(t) = feed_task {
        t.abort();
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Request as HttpRequest;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    fn cfg(chain: bool) -> HashpriceConfig {
        HashpriceConfig {
            chain: chain.then(|| {
                ChainSource::Esplora(crate::client::Url::parse("http://127.0.0.1:1/api").unwrap())
            }),
            price: Some(crate::client::Url::parse("http://127.0.0.1:1/price").unwrap()),
            interval: DEFAULT_INTERVAL,
            fee_blocks: 3,
            retry_min: RETRY_MIN,
            retry_max: RETRY_MAX,
        }
    }

    #[test]
    fn a_failed_refresh_is_retried_with_backoff_capped_at_a_minute() {
        let c = cfg(true);
        let waits: Vec<u64> = (0..9).map(|n| next_attempt_in(&c, n).as_secs()).collect();
        assert_eq!(waits, [900, 5, 10, 20, 40, 60, 60, 60, 60]);
        assert_eq!(next_attempt_in(&c, u32::MAX), RETRY_MAX);
        // Never longer than the interval (tests run with a 1 s interval).
        let fast = HashpriceConfig {
            interval: Duration::from_secs(1),
            ..cfg(true)
        };
        assert_eq!(next_attempt_in(&fast, 3), Duration::from_secs(1));
        // Offline: nothing to retry, the interval only.
        assert_eq!(next_attempt_in(&cfg(false), 4), DEFAULT_INTERVAL);
    }

    fn app() -> (Router, Arc<AppState>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let src = crate::datasets::Source::default();
        let (infos, store) =
            crate::open_store(&dir.path().join("od.sqlite"), &src, None, false).unwrap();
        let state = Arc::new(AppState::new(infos, src, store, None, 900, 100).unwrap());
        (router(state.clone()), state, dir)
    }

    async fn call(app: &Router, method: &str, uri: &str, inm: Option<&str>) -> Response {
        let mut req = HttpRequest::builder().method(method).uri(uri);
        if let Some(tag) = inm {
            req = req.header(header::IF_NONE_MATCH, tag);
        }
        app.clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn state_records(app: &Router, path: &str) -> usize {
        let v: Value =
            serde_json::from_slice(&body(call(app, "GET", path, None).await).await).unwrap();
        v["records"].as_array().unwrap().len()
    }

    async fn body(resp: Response) -> Vec<u8> {
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[tokio::test]
    async fn etag_304_head_and_405() {
        let (app, _, _dir) = app();
        let ok = call(&app, "GET", "/v1/miners", None).await;
        assert_eq!(ok.status(), StatusCode::OK);
        let tag = ok.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_eq!(ok.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let len = body(ok).await.len();
        let again = call(&app, "GET", "/v1/miners", Some(&tag)).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(body(again).await.is_empty());
        let head = call(&app, "HEAD", "/v1/miners", None).await;
        assert_eq!(
            head.headers()[header::CONTENT_LENGTH],
            len.to_string().as_str()
        );
        assert_eq!(head.headers()[header::ETAG], tag.as_str());
        let post = call(&app, "POST", "/v1/miners", None).await;
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[header::ALLOW], ALLOW);
    }

    #[tokio::test]
    async fn site_routes_answer_with_their_content_types() {
        let (app, _, _dir) = app();
        for (path, ct) in [
            ("/data/", "text/html; charset=utf-8"),
            ("/data/api/", "text/html; charset=utf-8"),
            ("/llms.txt", "text/plain; charset=utf-8"),
            ("/methodology", "text/html; charset=utf-8"),
            ("/data/miners.json", "application/json"),
            ("/data/miners.csv", "text/csv; charset=utf-8"),
            ("/data/hashprice-history.csv", "text/csv; charset=utf-8"),
        ] {
            let resp = call(&app, "GET", path, None).await;
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert_eq!(resp.headers()[header::CONTENT_TYPE], ct, "{path}");
            assert!(resp.headers().contains_key(header::ETAG), "{path}");
        }
        let csv = String::from_utf8(body(call(&app, "GET", "/data/miners.csv", None).await).await)
            .unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert!(
            header.contains(&"slug") && header.contains(&"source.url"),
            "{header:?}"
        );
        let miners = state_records(&app, "/v1/miners").await;
        assert_eq!(
            csv.split("\r\n").filter(|l| !l.is_empty()).count(),
            miners + 1
        );
        let history = String::from_utf8(
            body(call(&app, "GET", "/data/hashprice-history.csv", None).await).await,
        )
        .unwrap();
        let header: Vec<&str> = history.trim_end().split(',').collect();
        assert!(header.contains(&"refreshed_at") && header.contains(&"network.height"));
        let moved = call(&app, "GET", "/data", None).await;
        assert_eq!(moved.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(moved.headers()[header::LOCATION], "/data/");
        let missing = call(&app, "GET", "/data/nope.csv", None).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let err: Value = serde_json::from_slice(&body(missing).await).unwrap();
        assert_eq!(err["error"]["code"], "not_found");
        let bad_key = call(&app, "GET", "/v1/power-profiles/no-such", None).await;
        assert_eq!(bad_key.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_refresh_without_upstreams_flags_the_hashprice_stale() {
        let (app, state, _dir) = app();
        let offline = HashpriceConfig {
            chain: None,
            price: None,
            ..cfg(false)
        };
        assert!(!state.refresh_hashprice(&offline).await);
        let v: Value =
            serde_json::from_slice(&body(call(&app, "GET", "/v1/hashprice", None).await).await)
                .unwrap();
        assert_eq!(v["status"]["stale"], true);
        assert!(
            v["status"]["stale_reason"]
                .as_str()
                .unwrap()
                .contains("offline")
        );
        assert_eq!(v["record"], Value::Null);
    }
}
