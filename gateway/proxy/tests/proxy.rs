//! The proxy library on an ephemeral port in front of an in-test upstream standing in for the
//! REST gateway.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use svcos_common::Shutdown;
use svcos_proxy::{ProxyConfig, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_stream::wrappers::ReceiverStream;

/// A generous bound for "answers promptly" (the connect timeout is 250 ms).
const PROMPT: Duration = Duration::from_secs(5);

type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> TestBody {
    Full::new(b.into()).boxed()
}

/// The stand-in gateway: echoes requests as JSON, streams on /api/stream, answers 401 on
/// /api/unauthorized.
async fn upstream(release_second_chunk: Arc<Notify>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let release = release_second_chunk.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let release = release.clone();
                    async move { Ok::<_, Infallible>(upstream_answer(req, release).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn upstream_answer(req: Request<Incoming>, release: Arc<Notify>) -> Response<TestBody> {
    match req.uri().path() {
        "/api/stream" => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
            tokio::spawn(async move {
                tx.send(Ok(Frame::data(Bytes::from_static(b"first;"))))
                    .await
                    .unwrap();
                // The second chunk only once the test has seen the first through the proxy.
                release.notified().await;
                tx.send(Ok(Frame::data(Bytes::from_static(b"second"))))
                    .await
                    .unwrap();
            });
            Response::new(StreamBody::new(ReceiverStream::new(rx)).boxed())
        }
        "/api/unauthorized" => Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::WWW_AUTHENTICATE, "Bearer realm=\"svcrald\"")
            .header(header::CONTENT_TYPE, "application/json")
            .body(full(r#"{"error":"missing bearer token"}"#))
            .unwrap(),
        _ => {
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in req.headers() {
                headers
                    .entry(k.to_string())
                    .or_default()
                    .push(v.to_str().unwrap().to_string());
            }
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let echo = serde_json::json!({
                "method": method,
                "uri": uri,
                "headers": headers,
                "body": String::from_utf8_lossy(&body),
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("x-upstream", "yes")
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(echo.to_string()))
                .unwrap()
        }
    }
}

fn config(upstream: SocketAddr) -> ProxyConfig {
    ProxyConfig {
        upstream,
        hostname: "rig".into(),
        allowed_hosts: vec!["*.home.arpa".into()],
        connect_timeout: Duration::from_millis(250),
        response_timeout: Duration::from_secs(30),
        max_connections: 16,
        max_connections_per_peer: 16,
        max_body_bytes: 1 << 20,
        forward_key: None,
    }
}

async fn start_proxy(config: ProxyConfig) -> (SocketAddr, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    tokio::spawn(serve(listener, config, shutdown.clone()));
    (addr, shutdown)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

async fn send(
    proxy: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .header(header::HOST, "rig.local");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let req = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = tokio::time::timeout(PROMPT, client().request(req))
        .await
        .expect("proxy answered promptly")
        .unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn json(b: &Bytes) -> serde_json::Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

fn assert_envelope(b: &Bytes) -> serde_json::Value {
    let v = json(b);
    let obj = v.as_object().expect("envelope is an object");
    assert!(obj["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    for (k, val) in obj {
        assert!(
            ["error", "detail", "code", "suggestion"].contains(&k.as_str()),
            "unexpected member {k}"
        );
        assert!(
            val.as_str().is_some_and(|s| !s.is_empty()),
            "empty member {k} must be omitted"
        );
    }
    v
}

#[tokio::test]
async fn forwards_method_path_body_and_end_to_end_headers() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    for method in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
        let (status, headers, body) = send(
            proxy,
            method.clone(),
            "/api/pools?x=1&y=two",
            &[
                ("authorization", "Bearer tok-123.abc"),
                ("x-custom", "kept"),
                ("content-type", "application/json"),
                // A spoofed client address is replaced, not trusted.
                ("x-forwarded-for", "6.6.6.6"),
                ("connection", "x-hop"),
                ("x-hop", "dropped"),
            ],
            r#"{"url":"stratum+tcp://pool:3333"}"#,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "{method}: upstream status passes through"
        );
        assert_eq!(headers["x-upstream"], "yes");
        let echo = json(&body);
        assert_eq!(echo["method"], method.as_str());
        assert_eq!(echo["uri"], "/api/pools?x=1&y=two");
        assert_eq!(echo["body"], r#"{"url":"stratum+tcp://pool:3333"}"#);
        let h = &echo["headers"];
        assert_eq!(
            h["authorization"],
            serde_json::json!(["Bearer tok-123.abc"]),
            "unchanged"
        );
        assert_eq!(h["x-custom"], serde_json::json!(["kept"]));
        assert_eq!(h["content-type"], serde_json::json!(["application/json"]));
        assert_eq!(h["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));
        assert_eq!(
            h["host"],
            serde_json::json!(["rig.local"]),
            "client's Host preserved"
        );
        assert!(
            h.get("x-hop").is_none(),
            "hop-by-hop header named in Connection dropped"
        );
    }
}

#[tokio::test]
async fn upstream_errors_pass_through_untouched() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    let (status, headers, body) = send(proxy, Method::GET, "/api/unauthorized", &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        headers[header::WWW_AUTHENTICATE],
        "Bearer realm=\"svcrald\""
    );
    assert_eq!(&body[..], br#"{"error":"missing bearer token"}"#);
}

#[tokio::test]
async fn responses_stream_through() {
    let release = Arc::new(Notify::new());
    let up = upstream(release.clone()).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    let req = Request::builder()
        .uri(format!("http://{proxy}/api/stream"))
        .header(header::HOST, "10.0.0.5")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(PROMPT, client().request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // The first chunk arrives while the upstream is still holding the second back: the proxy
    // does not buffer whole responses.
    let first = tokio::time::timeout(PROMPT, body.frame())
        .await
        .expect("first chunk before the response is complete")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert_eq!(&first[..], b"first;");
    release.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"second");
}

#[tokio::test]
async fn gateway_down_answers_503_envelope_promptly() {
    // An address nothing listens on.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (proxy, _shutdown) = start_proxy(config(dead)).await;
    for _ in 0..3 {
        let (status, headers, body) = send(
            proxy,
            Method::GET,
            "/api/status",
            &[("authorization", "Bearer t")],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[header::RETRY_AFTER], "1");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let e = assert_envelope(&body);
        assert_eq!(e["code"], "unclassified_error");
    }
}

#[tokio::test]
async fn gateway_that_drops_or_stalls_gives_502_or_504() {
    // Accepts and closes at once: the request fails mid-flight.
    let dropper = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let drop_addr = dropper.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = dropper.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            drop(s);
        }
    });
    let (proxy, _s1) = start_proxy(config(drop_addr)).await;
    let (status, _, body) = send(proxy, Method::GET, "/api/status", &[], "").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_envelope(&body);

    // Accepts and never answers (a stopped gateway): bounded by the response timeout.
    let staller = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stall_addr = staller.local_addr().unwrap();
    let held = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = staller.accept().await.unwrap();
            keep.lock().await.push(s);
        }
    });
    let mut cfg = config(stall_addr);
    cfg.response_timeout = Duration::from_millis(300);
    let (proxy, _s2) = start_proxy(cfg).await;
    let (status, _, body) = send(proxy, Method::GET, "/api/status", &[], "").await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_envelope(&body);
}

/// Send raw bytes and read the whole answer (the request asks to close).
async fn raw(proxy: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn foreign_or_missing_host_is_refused_before_forwarding() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    for host in [
        "evil.example",
        "rig.evil.example",
        "rig.local.evil.example:80",
    ] {
        let answer = raw(
            proxy,
            &format!("GET /api/status HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer t\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 421"), "{host}: {answer}");
        assert!(!answer.contains("x-upstream"), "never reached the gateway");
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        assert_envelope(&Bytes::from(body.to_string()));
    }
    let answer = raw(proxy, "GET / HTTP/1.0\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.0 400") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    for host in [
        "192.168.1.20",
        "[::1]:80",
        "RIG",
        "rig.local:80",
        "localhost",
    ] {
        let answer = raw(
            proxy,
            &format!("GET /api/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 201"), "{host}: {answer}");
    }
}

#[tokio::test]
async fn a_second_host_header_is_refused_before_forwarding() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    for (first, second) in [("192.168.1.20", "evil.example"), ("localhost", "localhost")] {
        let answer = raw(
            proxy,
            &format!("POST /api/x HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{second}: {answer}");
        assert!(!answer.contains("x-upstream"), "never reached the gateway");
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(
            assert_envelope(&Bytes::from(body.to_string()))["error"],
            "more than one Host header"
        );
    }
}

#[tokio::test]
async fn dashboard_is_served_and_nothing_else() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(config(up)).await;
    let (status, headers, body) = send(proxy, Method::GET, "/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert!(
        headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let html = String::from_utf8_lossy(&body).to_string();
    assert!(!html.contains("<script>"), "no inline script under the CSP");
    // The script is loaded under its content-hashed name, never the plain one.
    let start = html
        .find("/static/app.")
        .expect("index.html loads app.<hash>.js");
    let app = &html[start..start + html[start..].find('"').unwrap()];
    assert!(
        app.ends_with(".js") && app.len() == "/static/app.0123456789.js".len(),
        "{app}"
    );

    let (status, headers, body) = send(proxy, Method::GET, app, &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(
        headers[header::CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    assert!(String::from_utf8_lossy(&body).contains("/api/auth/status"));
    let etag = headers[header::ETAG].to_str().unwrap().to_string();
    let (status, _, body) = send(proxy, Method::GET, app, &[("if-none-match", &etag)], "").await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    let (status, headers, body) =
        send(proxy, Method::GET, app, &[("accept-encoding", "gzip")], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert_eq!(headers[header::VARY], "Accept-Encoding");
    assert!(body.starts_with(&[0x1f, 0x8b]), "a gzip stream");

    for path in [
        "/static/missing.js",
        "/static/app.js",
        "/favicon.ico",
        "/api",
        "/apix/status",
        "/index.html",
        "/ws",
        "/metrics",
    ] {
        let (status, _, body) = send(proxy, Method::GET, path, &[], "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(assert_envelope(&body)["code"], "unclassified_error");
    }
    let (status, headers, body) = send(proxy, Method::POST, "/", &[], "x").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers[header::ALLOW], "GET, HEAD");
    assert_envelope(&body);

    // No CORS grant, whatever the Origin.
    for path in ["/", "/api/x", "/nope"] {
        let (_, headers, _) = send(
            proxy,
            Method::GET,
            path,
            &[("origin", "http://evil.example")],
            "",
        )
        .await;
        assert!(
            headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn run_serves_health_on_its_socket_and_http_on_the_configured_port() {
    let dir = tempfile::tempdir().unwrap();
    let up = upstream(Arc::new(Notify::new())).await;
    let http_port = svcos_e2e::free_port();
    let mut cfg = svcos_common::config::Config::default();
    cfg.api.bind = "127.0.0.1".parse().unwrap();
    cfg.api.port = up.port();
    cfg.api.http_port = http_port;
    cfg.system.hostname = "rig".into();
    let layout = svcos_common::Layout::sim(dir.path());
    let socket = layout.socket(svcos_common::ServiceName::Proxy);
    let listener = svcos_common::ipc::bind(&socket).unwrap();
    let ctx = svcos_common::entry::ServiceContext {
        name: svcos_common::ServiceName::Proxy,
        layout,
        config: cfg,
    };
    let shutdown = Shutdown::new();
    let task = tokio::spawn(svcos_proxy::run(ctx, listener, shutdown.clone()));
    let mut serving = false;
    for _ in 0..100 {
        if svcos_common::ipc::check_health_at(socket.clone(), Duration::from_millis(500)).await {
            serving = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(serving, "health SERVING on the Unix socket");
    let addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let (status, _, body) = send(
        addr,
        Method::POST,
        "/api/echo",
        &[("authorization", "Bearer z")],
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        json(&body)["headers"]["authorization"],
        serde_json::json!(["Bearer z"])
    );
    shutdown.trigger();
    tokio::time::timeout(PROMPT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// Open a connection from `source` and send nothing.
async fn hold(proxy: SocketAddr, source: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(proxy).await.unwrap()
}

/// What a held connection was told within `within`: the whole answer if it was closed, `None`
/// if it is still open and silent.
async fn told(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(within, s.read_to_end(&mut out)).await {
        Ok(Ok(_)) => Some(String::from_utf8_lossy(&out).into_owned()),
        _ => None,
    }
}

#[tokio::test]
async fn beyond_the_per_address_cap_503_at_the_total_the_least_recently_active_idle_one_goes() {
    let up = upstream(Arc::new(Notify::new())).await;
    let (proxy, _shutdown) = start_proxy(ProxyConfig {
        max_connections: 4,
        max_connections_per_peer: 2,
        ..config(up)
    })
    .await;
    // 127.0.0.2 holds its two; its third is refused for being one address's excess.
    let mut held = vec![
        hold(proxy, "127.0.0.2").await,
        hold(proxy, "127.0.0.2").await,
    ];
    let mut third = hold(proxy, "127.0.0.2").await;
    let answer = told(&mut third, PROMPT)
        .await
        .expect("the excess connection is closed");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(
        answer.contains("too many connections from this address"),
        "{answer}"
    );
    // 127.0.0.3 takes the last two slots; 127.0.0.4 is then let in by closing the idle
    // connection that has been idle longest (127.0.0.2's first), not refused.
    held.push(hold(proxy, "127.0.0.3").await);
    held.push(hold(proxy, "127.0.0.3").await);
    let mut late = hold(proxy, "127.0.0.4").await;
    assert_eq!(
        told(&mut held[0], PROMPT).await.as_deref(),
        Some(""),
        "the oldest idle connection is closed without a word"
    );
    for s in &mut held[1..] {
        assert_eq!(told(s, Duration::from_millis(100)).await, None);
    }
    late.write_all(b"GET /api/echo HTTP/1.1\r\nHost: rig\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = told(&mut late, PROMPT).await.expect("answered and closed");
    assert!(answer.contains("x-upstream: yes"), "{answer}");
    // ...and once they go, a request is served again.
    drop(held);
    let answer = tokio::time::timeout(PROMPT, async {
        loop {
            let answer = raw(
                proxy,
                "GET /api/echo HTTP/1.1\r\nHost: rig\r\nConnection: close\r\n\r\n",
            )
            .await;
            if !answer.starts_with("HTTP/1.1 503") {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a slot frees once the held connections close");
    assert!(
        answer.contains("x-upstream: yes"),
        "forwarded again: {answer}"
    );
}

/// Send `head` and then `body` while reading the answer (a client that does not wait for it).
async fn send_body(proxy: SocketAddr, head: &str, body: Vec<u8>) -> String {
    let stream = TcpStream::connect(proxy).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    write.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&body).await;
        write
    });
    let mut out = Vec::new();
    tokio::time::timeout(PROMPT, read.read_to_end(&mut out))
        .await
        .expect("answered and closed promptly")
        .expect("no reset before the answer was read");
    drop(writer.await);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_from_the_proxy_not_502() {
    let up = upstream(Arc::new(Notify::new())).await;
    let max = 1 << 20;
    let (proxy, _shutdown) = start_proxy(ProxyConfig {
        max_body_bytes: max,
        ..config(up)
    })
    .await;
    let declared = |extra: &str| {
        format!(
            "POST /api/echo HTTP/1.1\r\nHost: rig\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
            max + 1
        )
    };
    // Sent whole without waiting (no Expect): the client still reads a 413 with the envelope.
    let answer = send_body(proxy, &declared(""), vec![b' '; max + 1]).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("\"error\":\"request body too large\""),
        "{answer}"
    );
    assert!(!answer.contains("x-upstream"), "never forwarded: {answer}");
    // With Expect the client is told before sending anything.
    let answer = send_body(proxy, &declared("Expect: 100-continue\r\n"), Vec::new()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    // A chunked body that turns out too large.
    let mut chunked = Vec::new();
    for _ in 0..=max / 65536 {
        chunked.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        chunked.extend_from_slice(&[b' '; 65536]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = "POST /api/echo HTTP/1.1\r\nHost: rig\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let answer = send_body(proxy, head, chunked).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // At the limit it is forwarded.
    let head = format!(
        "POST /api/echo HTTP/1.1\r\nHost: rig\r\nContent-Length: {max}\r\nConnection: close\r\n\r\n"
    );
    let answer = send_body(proxy, &head, vec![b' '; max]).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{}", &answer[..200]);
}

#[tokio::test]
async fn an_ipv6_client_has_one_share_and_others_still_get_in() {
    let up = upstream(Arc::new(Notify::new())).await;
    // Dual-stack: IPv6 clients and IPv4 ones (as mapped addresses) on one listener.
    let listener = TcpListener::bind("[::]:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let shutdown = Shutdown::new();
    tokio::spawn(serve(
        listener,
        ProxyConfig {
            max_connections: 16,
            max_connections_per_peer: 8,
            ..config(up)
        },
        shutdown.clone(),
    ));
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let mut flood = Vec::new();
    for _ in 0..12 {
        flood.push(TcpStream::connect(v6).await.unwrap());
    }
    let mut refused = 0;
    for s in &mut flood {
        if let Some(answer) = told(s, Duration::from_millis(300)).await {
            assert!(
                answer.contains("too many connections from this address"),
                "{answer}"
            );
            assert!(
                answer.contains("/64"),
                "the detail says how clients are counted"
            );
            refused += 1;
        }
    }
    assert_eq!(refused, 4, "::1's /64 holds its 8");
    let v4: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let answer = raw(
        v4,
        "GET /api/echo HTTP/1.1\r\nHost: rig\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("x-upstream: yes"), "{answer}");
    shutdown.trigger();
}

#[tokio::test]
async fn a_slow_live_upload_outlasts_the_response_timeout() {
    // Issue 31: a bundle that took longer to send than the response timeout got 504 and was
    // discarded. The clock now starts once the last byte is sent; the upload itself is bounded
    // by the minimum body rate only.
    let mut cfg = config(upstream(Arc::new(Notify::new())).await);
    cfg.response_timeout = Duration::from_millis(300);
    let (proxy, _shutdown) = start_proxy(cfg).await;
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let chunk = vec![b'b'; 16 * 1024];
    let chunks = 12;
    s.write_all(
        format!(
            "POST /api/system/upgrade HTTP/1.1\r\nHost: rig.local\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            chunk.len() * chunks
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..chunks {
        s.write_all(&chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answer = String::new();
    tokio::time::timeout(PROMPT, s.read_to_string(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    assert!(started.elapsed() > Duration::from_millis(1000));
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    // The upstream echoed the whole body it received.
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let echo: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(echo["body"].as_str().unwrap().len(), chunk.len() * chunks);
}
