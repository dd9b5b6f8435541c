//! The service as a whole, in-process: hashprice recovering from a failing upstream (a local
//! fake, never the internet), the site routes answering the bytes `export` writes, and
//! instances over one read-only snapshot answering identical ETags.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use svcos_open_data::client::Url;
use svcos_open_data::datasets::Source;
use svcos_open_data::listen::Limits;
use svcos_open_data::registry::{self, ROUTES};
use svcos_open_data::server::{self, AppState, HashpriceConfig};
use svcos_open_data::store::Store;
use svcos_open_data::upstream::ChainSource;
use svcos_open_data::{export, open_snapshot, open_store};
use tokio::net::TcpListener;
use tower::ServiceExt;

const HEIGHT: u64 = 900_000;
const FEES_SAT: u64 = 5_000_000;

/// A fake Esplora plus price source; `down` makes every answer a 503.
#[derive(Default)]
struct Fake {
    down: AtomicBool,
    tips: AtomicUsize,
    /// Blocks found since [`HEIGHT`].
    found: AtomicU64,
    coinbases: AtomicUsize,
}

type Shared = Arc<Fake>;

fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "down").into_response()
}

async fn tip(State(f): State<Shared>) -> Response {
    f.tips.fetch_add(1, Ordering::SeqCst);
    if f.down.load(Ordering::SeqCst) {
        return unavailable();
    }
    (HEIGHT + f.found.load(Ordering::SeqCst))
        .to_string()
        .into_response()
}

async fn blocks(State(f): State<Shared>, Path(top): Path<u64>) -> Response {
    if f.down.load(Ordering::SeqCst) {
        return unavailable();
    }
    let list: Vec<Value> = (top.saturating_sub(9)..=top)
        .rev()
        .map(|h| json!({"id": format!("{h:064x}"), "height": h, "bits": 0x1703_4219u32}))
        .collect();
    axum::Json(list).into_response()
}

async fn coinbase(State(f): State<Shared>) -> Response {
    if f.down.load(Ordering::SeqCst) {
        return unavailable();
    }
    f.coinbases.fetch_add(1, Ordering::SeqCst);
    axum::Json(json!([{"vout": [{"value": 312_500_000u64 + FEES_SAT}]}])).into_response()
}

async fn price(State(f): State<Shared>) -> Response {
    if f.down.load(Ordering::SeqCst) {
        return unavailable();
    }
    axum::Json(json!({"bitcoin": {"usd": 100_000.0, "cad": 140_000.0}})).into_response()
}

async fn start_fake() -> (Shared, String) {
    let fake = Shared::default();
    let app = Router::new()
        .route("/api/blocks/tip/height", get(tip))
        .route("/api/blocks/{top}", get(blocks))
        .route("/api/block/{hash}/txs/0", get(coinbase))
        .route("/price", get(price))
        .with_state(fake.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, base)
}

async fn get_json(app: &Router, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = fetch(app, path, None).await;
    (status, serde_json::from_slice(&body).unwrap())
}

async fn fetch(
    app: &Router,
    path: &str,
    inm: Option<&str>,
) -> (StatusCode, Option<String>, Vec<u8>) {
    let mut req = Request::builder().uri(path);
    if let Some(t) = inm {
        req = req.header(header::IF_NONE_MATCH, t);
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let etag = resp
        .headers()
        .get(header::ETAG)
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, etag, body)
}

async fn wait_for(what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} not reached within {within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashprice_recovers_soon_after_its_upstream_comes_back_and_keeps_the_last_good_value() {
    let (fake, base) = start_fake().await;
    fake.down.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("od.sqlite");
    let src = Source::default();
    let (infos, store) = open_store(&db, &src, None, false).unwrap();
    let state = Arc::new(AppState::new(infos, src.clone(), store, None, 900, 100).unwrap());
    let app = server::router(state.clone());
    let cfg = HashpriceConfig {
        chain: Some(ChainSource::Esplora(
            Url::parse(&format!("{base}/api")).unwrap(),
        )),
        price: Some(Url::parse(&format!("{base}/price")).unwrap()),
        // The interval is far longer than the test: only the retry can bring the value in.
        interval: Duration::from_secs(900),
        fee_blocks: 1,
        retry_min: Duration::from_millis(200),
        retry_max: Duration::from_secs(1),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(server::run(
        state.clone(),
        listener,
        cfg,
        None,
        Limits::default(),
        stop.clone().cancelled_owned(),
    ));
    // Down from the start: stale, no record, the reason says why, and retries keep coming.
    wait_for(
        "a few failed attempts",
        Duration::from_secs(10),
        async || fake.tips.load(Ordering::SeqCst) >= 3,
    )
    .await;
    let (_, hp) = get_json(&app, "/v1/hashprice").await;
    assert_eq!(hp["status"]["stale"], true);
    assert_eq!(hp["record"], Value::Null);
    assert!(
        hp["status"]["stale_reason"]
            .as_str()
            .unwrap()
            .contains("HTTP 503"),
        "{hp}"
    );
    // Back: picked up within retry_max (plus the exchange), not after the 900 s interval.
    fake.down.store(false, Ordering::SeqCst);
    let back = tokio::time::Instant::now();
    wait_for("a fresh hashprice", Duration::from_secs(10), async || {
        let (_, hp) = get_json(&app, "/v1/hashprice").await;
        hp["status"]["stale"] == false && !hp["record"].is_null()
    })
    .await;
    assert!(
        back.elapsed() < Duration::from_secs(5),
        "{:?}",
        back.elapsed()
    );
    let (_, good) = get_json(&app, "/v1/hashprice").await;
    assert_eq!(good["record"]["network"]["height"], HEIGHT);
    assert_eq!(good["record"]["block"]["avg_fees_btc"], 0.05);
    // Down again: the last good value stays, flagged stale.
    fake.down.store(true, Ordering::SeqCst);
    state
        .refresh_hashprice(&HashpriceConfig {
            chain: Some(ChainSource::Esplora(
                Url::parse(&format!("{base}/api")).unwrap(),
            )),
            price: Some(Url::parse(&format!("{base}/price")).unwrap()),
            interval: Duration::from_secs(900),
            fee_blocks: 1,
            retry_min: server::RETRY_MIN,
            retry_max: server::RETRY_MAX,
        })
        .await;
    let (_, stale) = get_json(&app, "/v1/hashprice").await;
    assert_eq!(stale["status"]["stale"], true);
    assert_eq!(stale["record"], good["record"]);
    stop.cancel();
    run.await.unwrap();
    drop(app);
    drop(state);
    // Persisted: a restart serves the last good value at once, flagged stale until a refresh.
    let (infos, store) = open_store(&db, &src, None, false).unwrap();
    let restarted = AppState::new(infos, src, store, None, 900, 100).unwrap();
    let (_, again) = get_json(&server::router(Arc::new(restarted)), "/v1/hashprice").await;
    assert_eq!(again["record"], good["record"]);
    assert_eq!(again["status"]["stale"], true);
}

#[tokio::test]
async fn an_esplora_refresh_fetches_only_the_coinbases_of_new_blocks() {
    let (fake, base) = start_fake().await;
    fake.found.store(5_000, Ordering::SeqCst);
    let chain = ChainSource::Esplora(Url::parse(&format!("{base}/api")).unwrap());
    let first = chain.fetch(144).await.unwrap();
    assert_eq!(first.fee_blocks, 144);
    assert_eq!(first.avg_fees_sat, FEES_SAT as f64);
    assert_eq!(fake.coinbases.load(Ordering::SeqCst), 144);
    // Same tip: every fee is known.
    let again = chain.fetch(144).await.unwrap();
    assert_eq!(again.avg_fees_sat, first.avg_fees_sat);
    assert_eq!(fake.coinbases.load(Ordering::SeqCst), 144);
    // Two new blocks: two coinbases, and the window still has 144 blocks.
    fake.found.fetch_add(2, Ordering::SeqCst);
    let moved = chain.fetch(144).await.unwrap();
    assert_eq!(moved.height, HEIGHT + 5_002);
    assert_eq!(moved.fee_blocks, 144);
    assert_eq!(fake.coinbases.load(Ordering::SeqCst), 146);
}

/// Every path of the site and API without a path parameter, plus keyed ones.
fn paths() -> Vec<String> {
    let mut out: Vec<String> = ROUTES
        .iter()
        .filter(|r| r.params.iter().all(|p| !p.in_path))
        .map(|r| r.path.to_string())
        .collect();
    out.extend(registry::MIRROR_FILES.iter().map(|f| format!("/data/{f}")));
    out.extend(
        [
            "/v1/miners/antminer-s9",
            "/v1/error-codes/WHATSMINER-530",
            "/v1/power-profiles/antminer-s9",
            "/v1/reliability/whatsminer-m30s",
            "/v1/error-codes?per_page=7&page=2",
        ]
        .map(String::from),
    );
    out
}

#[tokio::test]
async fn instances_over_one_read_only_snapshot_answer_identical_etags() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snapshot.sqlite");
    let src = Source::default();
    {
        let (_, store) = open_store(&snap, &src, None, true).unwrap();
        store.seal().unwrap();
    }
    let mut apps = Vec::new();
    for _ in 0..2 {
        let (infos, store) = open_snapshot(&snap, &src).unwrap();
        assert!(store.is_read_only());
        let state = Arc::new(AppState::new(infos, src.clone(), store, None, 900, 100).unwrap());
        apps.push(server::router(state));
    }
    let before = std::fs::read(&snap).unwrap();
    for path in paths() {
        let (s0, t0, b0) = fetch(&apps[0], &path, None).await;
        let (s1, t1, b1) = fetch(&apps[1], &path, None).await;
        assert_eq!((s0, s1), (StatusCode::OK, StatusCode::OK), "{path}");
        if path == "/v1/hashprice" {
            // The live hashprice is each instance's own (its attempt times differ).
            continue;
        }
        assert_eq!(t0, t1, "{path}");
        assert_eq!(b0, b1, "{path}");
        // A validator from one instance revalidates at the other.
        let (s, _, _) = fetch(&apps[1], &path, t0.as_deref()).await;
        assert_eq!(s, StatusCode::NOT_MODIFIED, "{path}");
    }
    assert_eq!(
        std::fs::read(&snap).unwrap(),
        before,
        "the snapshot was written to"
    );
    assert!(!dir.path().join("snapshot.sqlite-wal").exists());
    // A file that is not a loaded snapshot is refused with a reason.
    let empty = dir.path().join("empty.sqlite");
    drop(Store::open(&empty).unwrap());
    let e = open_snapshot(&empty, &src).unwrap_err().to_string();
    assert!(e.contains("not a loaded snapshot"), "{e}");
}

#[tokio::test]
async fn export_writes_the_bytes_the_site_routes_answer() {
    let dir = tempfile::tempdir().unwrap();
    let src = Source::default();
    let (infos, store) = open_store(&dir.path().join("od.sqlite"), &src, None, false).unwrap();
    let snap = server::snapshot_from_store(
        &store,
        Arc::new(registry::openapi(&infos, None)),
        None,
        server::DEFAULT_INTERVAL.as_secs(),
    )
    .unwrap();
    let out = dir.path().join("site");
    let written = export::export(&snap, &out).unwrap();
    let state = Arc::new(
        AppState::new(
            infos,
            src,
            store,
            None,
            server::DEFAULT_INTERVAL.as_secs(),
            100,
        )
        .unwrap(),
    );
    let app = server::router(state);
    let mut seen = 0;
    for (url, file) in [
        ("/data/", "data/index.html"),
        ("/data/api/", "data/api/index.html"),
        ("/llms.txt", "llms.txt"),
        ("/methodology", "methodology/index.html"),
    ]
    .into_iter()
    .map(|(u, f)| (u.to_string(), f.to_string()))
    .chain(
        registry::MIRROR_FILES
            .iter()
            .map(|f| (format!("/data/{f}"), format!("data/{f}"))),
    ) {
        assert!(written.contains(&file), "{file} not written: {written:?}");
        let (status, _, body) = fetch(&app, &url, None).await;
        assert_eq!(status, StatusCode::OK, "{url}");
        assert_eq!(
            body,
            std::fs::read(out.join(&file)).unwrap(),
            "{url} vs {file}"
        );
        seen += 1;
    }
    assert_eq!(seen, written.len());
    // Every CSV has its header row, the empty hashprice history's included.
    for f in registry::MIRROR_FILES
        .iter()
        .filter(|f| f.ends_with(".csv"))
    {
        let text = std::fs::read_to_string(out.join("data").join(f)).unwrap();
        let header = text.split("\r\n").next().unwrap();
        assert!(header.split(',').count() >= 3, "{f}: {header:?}");
    }
    // The mirror index links every mirror file; llms.txt names every dataset and its mirrors.
    let index = std::fs::read_to_string(out.join("data/index.html")).unwrap();
    let llms = std::fs::read_to_string(out.join("llms.txt")).unwrap();
    for f in registry::MIRROR_FILES {
        assert!(index.contains(&format!("href=\"/data/{f}\"")), "{f}");
        assert!(llms.contains(&format!("/data/{f}")), "{f}");
    }
    assert!(llms.starts_with("# svcOS Open Mining Data\n\n> "));
}

#[tokio::test]
async fn the_openapi_document_has_the_per_record_and_site_routes() {
    let dir = tempfile::tempdir().unwrap();
    let src = Source::default();
    let (infos, store) = open_store(&dir.path().join("od.sqlite"), &src, None, false).unwrap();
    let app = server::router(Arc::new(
        AppState::new(infos, src, store, None, 900, 100).unwrap(),
    ));
    let (_, doc) = get_json(&app, "/v1/openapi.json").await;
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/miners/{slug}",
        "/v1/error-codes/{code}",
        "/v1/power-profiles/{model}",
        "/v1/reliability/{model}",
        "/data/",
        "/data/{file}",
        "/data/api/",
        "/llms.txt",
        "/methodology",
    ] {
        assert!(paths.contains_key(p), "{p}");
    }
    for p in [
        "/v1/miners/{slug}",
        "/v1/error-codes/{code}",
        "/v1/power-profiles/{model}",
        "/v1/reliability/{model}",
    ] {
        assert!(paths[p]["get"]["responses"]["404"].is_object(), "{p}");
    }
    assert_eq!(paths.len(), ROUTES.len());
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    // Derived from the types: the doc comments are the descriptions.
    assert!(
        schemas["Hashprice"]["properties"]["refreshed_at"]["description"]
            .as_str()
            .unwrap()
            .contains("RFC 3339")
    );
    for name in [
        "Meta",
        "Error",
        "Pagination",
        "CatalogEntry",
        "PriceSummary",
    ] {
        assert!(schemas.contains_key(name), "{name}");
    }
}
