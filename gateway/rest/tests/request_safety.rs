//! What a request must look like before any handler acts on it: same-origin when a browser sent
//! it, a JSON body that is JSON and an object, one Host header, and no secrets for a read-only
//! token. Each check runs against the real gateway over HTTP with fake peers that count calls,
//! so "refused" also means "nothing happened".

mod common;

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use common::{GOOD, Harness, Options, concrete};
use serde_json::json;
use svcos_common::config::Mode;
use svcos_gateway::body::{is_json_content_type, json_body};
use svcos_gateway::guard::{cross_site, same_origin};
use svcos_gateway::registry::metas;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn opts(mode: Mode) -> Options {
    let mut o = Options::default();
    o.config.system.mode = mode;
    o
}

/// The fakes' write-side calls and the supervisor's restarts: what a refused request must not
/// change (reads such as `get_*`, `stream_*` and session validation may happen).
fn writes(h: &Harness) -> (HashMap<&'static str, usize>, Vec<String>, String) {
    let mut calls = HashMap::new();
    for snap in [
        h.auth.calls.snapshot(),
        h.hw.calls.snapshot(),
        h.stratum.calls.snapshot(),
    ] {
        for (name, n) in snap {
            let read = name.starts_with("get_")
                || name.starts_with("stream_")
                || name == "validate_session";
            if !read {
                *calls.entry(name).or_default() += n;
            }
        }
    }
    let config = std::fs::read_to_string(&h.layout.config_path).unwrap_or_default();
    (calls, h.supervisor.restarts.lock().unwrap().clone(), config)
}

#[tokio::test]
async fn only_a_json_media_type_makes_a_body_json() {
    let h = Harness::start(Options::default()).await;
    let body = json!({"password": common::PASSWORD}).to_string();
    for ct in [
        "text/plain;charset=+json",
        "text/plain; charset=UTF-8",
        "application/x-www-form-urlencoded; a=+json",
        "multipart/form-data; boundary=+json",
        "application/jsonx",
        "application/+json",
        "text/json",
    ] {
        let r = h
            .request("POST", "/api/auth/session", None, Some(ct), body.clone())
            .await;
        assert_eq!(r.status, 415, "{ct}: {}", String::from_utf8_lossy(&r.body));
        r.envelope();
    }
    assert_eq!(h.auth.calls.get("create_session"), 0, "no login was tried");
    for ct in [
        "application/json",
        "Application/JSON ; charset=utf-8",
        "application/vnd.svcos+json",
    ] {
        let r = h
            .request("POST", "/api/auth/session", None, Some(ct), body.clone())
            .await;
        assert_eq!(r.status, 200, "{ct}: {}", String::from_utf8_lossy(&r.body));
    }
}

#[tokio::test]
async fn a_browser_write_from_another_origin_is_refused_before_anything_runs() {
    let h = Harness::start(Options::default()).await;
    let host = h.base.trim_start_matches("http://").to_string();
    let own_origin = h.base.clone();
    let login = json!({"password": common::PASSWORD}).to_string();
    let before = writes(&h);
    let cross: [&[(&str, &str)]; 5] = [
        &[
            ("origin", "http://evil.example"),
            ("content-type", "text/plain"),
        ],
        &[
            ("origin", "http://evil.example"),
            ("content-type", "application/json"),
        ],
        &[("origin", "null"), ("content-type", "application/json")],
        &[
            ("origin", "http://127.0.0.1:1"),
            ("content-type", "application/json"),
        ],
        &[
            ("sec-fetch-site", "cross-site"),
            ("content-type", "application/json"),
        ],
    ];
    for headers in cross {
        for (method, path) in [
            ("POST", "/api/auth/session"),
            ("POST", "/api/auth/setup"),
            ("POST", "/api/setup/skip-safety"),
            ("POST", "/api/action/reboot"),
            ("DELETE", "/api/auth/session/current"),
        ] {
            let r = h.request_with(method, path, headers, login.clone()).await;
            assert_eq!(r.status, 403, "{method} {path} {headers:?}");
            let e = r.envelope();
            assert_eq!(e["error"], "cross-site request refused", "{e}");
        }
        // A token does not make it same-site.
        let auth = format!("Bearer {GOOD}");
        let mut with_token = headers.to_vec();
        with_token.push(("authorization", &auth));
        let r = h
            .request_with("POST", "/api/action/reboot", &with_token, "")
            .await;
        assert_eq!(r.status, 403);
    }
    assert_eq!(writes(&h), before, "nothing was done");
    assert_eq!(h.auth.calls.get("create_session"), 0);

    // The miner's own pages (the proxy forwards Host and Origin unchanged) and non-browser
    // clients, which send no Origin, are served.
    let r = h
        .request_with(
            "POST",
            "/api/auth/session",
            &[
                ("origin", &own_origin),
                ("sec-fetch-site", "same-origin"),
                ("content-type", "application/json"),
            ],
            login.clone(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = h
        .request_with(
            "POST",
            "/api/auth/session",
            &[("content-type", "application/json")],
            login,
        )
        .await;
    assert_eq!(r.status, 200);
    // Reads are not state changes; a browser keeps their answers from the other site anyway.
    let auth = format!("Bearer {GOOD}");
    let r = h
        .request_with(
            "GET",
            "/api/status",
            &[("origin", "http://evil.example"), ("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    assert!(host.starts_with("127.0.0.1:"));
}

#[tokio::test]
async fn a_non_object_body_is_refused_not_read_by_position() {
    let h = Harness::start(Options::default()).await;
    for body in ["[1,2,3]", "[]", "42", "\"x\"", "null", "true"] {
        let r = h
            .request(
                "POST",
                "/api/autotuner/profitability",
                Some(GOOD),
                Some("application/json"),
                body,
            )
            .await;
        assert_eq!(
            r.status,
            422,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.envelope()["error"], "the JSON body must be an object");
    }
    // The pool list is documented as an object or a bare array; a bare array still gets as far
    // as the pool rules.
    let r = h
        .send_json("POST", "/api/pools", Some(GOOD), &json!([{"url": "nope"}]))
        .await;
    assert_eq!(r.envelope()["code"], "pool_validation");
}

#[tokio::test]
async fn every_write_refuses_a_bad_body_before_its_handler_runs() {
    let h = Harness::start(opts(Mode::Hacker)).await;
    let before = writes(&h);
    let mut checked = 0;
    for m in metas()
        .iter()
        .filter(|m| m.mutates() && !svcos_gateway::routing::takes_raw_body(m.path))
    {
        let path = concrete(m.path);
        let method = m.method.as_str();
        for (ct, body, status) in [
            ("application/json", r#"{"a":"#, 400),
            ("application/json", r#"{"confirm":true,"#, 400),
            ("text/plain", "{}", 415),
            ("application/x-www-form-urlencoded", "confirm=true", 415),
        ] {
            let r = h.request(method, &path, Some(GOOD), Some(ct), body).await;
            assert_eq!(r.status, status, "{method} {path} {ct} {body}");
            r.envelope();
        }
        if !svcos_gateway::routing::accepts_json_array(m.path) {
            let r = h
                .request(method, &path, Some(GOOD), Some("application/json"), "[]")
                .await;
            assert_eq!(r.status, 422, "{method} {path} []");
        }
        checked += 1;
    }
    assert!(checked > 80, "only {checked} writes were checked");
    assert_eq!(writes(&h), before, "a refused body changed something");
    // The session a malformed logout carried is still good.
    assert_eq!(h.get("/api/status", Some(GOOD)).await.status, 200);
}

#[tokio::test]
async fn body_less_actions_take_nothing_or_an_object() {
    let h = Harness::start(Options::default()).await;
    for (ct, body) in [
        (None, ""),
        (Some("application/json"), "{}"),
        (Some("application/json"), " "),
    ] {
        let r = h
            .request("POST", "/api/action/reboot", Some(GOOD), ct, body)
            .await;
        assert_eq!(
            r.status,
            200,
            "{ct:?} {body:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_eq!(*h.supervisor.restarts.lock().unwrap(), ["<stack>"; 3]);
    let r = h
        .request(
            "POST",
            "/api/action/reboot",
            Some(GOOD),
            Some("application/json"),
            r#"{"a":"#,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.envelope()["error"], "malformed JSON body");
    assert_eq!(
        h.supervisor.restarts.lock().unwrap().len(),
        3,
        "no fourth reboot"
    );
}

#[tokio::test]
async fn a_malformed_debug_write_is_400_not_a_missing_confirmation() {
    let h = Harness::start(opts(Mode::Hacker)).await;
    let r = h
        .request(
            "POST",
            "/api/debug/chip/frequency",
            Some(GOOD),
            Some("application/json"),
            r#"{"confirm":true,"#,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.envelope()["error"], "malformed JSON body");
    assert!(h.hw.last_frequency.lock().unwrap().is_none());
}

#[tokio::test]
async fn a_read_only_token_gets_no_backup_with_secrets() {
    let h = Harness::start(Options::default()).await;
    h.auth.add_session("ro-token-0123456789", "tok-1", 3600);
    let r = h
        .get("/api/config/export", Some("ro-token-0123456789"))
        .await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let e = r.envelope();
    assert_eq!(e["token_scope"], "read");
    assert!(
        e["suggestion"]
            .as_str()
            .unwrap()
            .contains("/api/auth/session")
    );
    // Masked reads stay open to it; the owner still gets the backup.
    assert_eq!(
        h.get("/api/config", Some("ro-token-0123456789"))
            .await
            .status,
        200
    );
    let r = h.get("/api/config/export", Some(GOOD)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/toml");
}

#[tokio::test]
async fn a_second_host_header_is_refused() {
    let h = Harness::start(Options::default()).await;
    let addr = h.base.trim_start_matches("http://").to_string();
    for (first, second) in [
        (addr.as_str(), "evil.example"),
        (addr.as_str(), addr.as_str()),
    ] {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let req = format!(
            "POST /api/auth/session HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("answer")
            .unwrap();
        let answer = String::from_utf8_lossy(&out);
        assert!(answer.starts_with("HTTP/1.1 400"), "{second}: {answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "more than one Host header");
    }
    assert_eq!(h.auth.calls.get("create_session"), 0);
}

// ---------------------------------------------------------------- the rules themselves

fn typed(ct: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h
}

#[test]
fn only_the_media_type_makes_a_body_json() {
    for (ct, json) in [
        ("application/json", true),
        ("Application/JSON ; charset=utf-8", true),
        ("application/vnd.svcos+json", true),
        ("application/merge-patch+json", true),
        ("text/plain;charset=+json", false),
        ("application/x-www-form-urlencoded; a=+json", false),
        ("multipart/form-data; boundary=+json", false),
        ("application/+json", false),
        ("application/a b+json", false),
        ("application/jsonp", false),
        ("text/json", false),
        ("", false),
    ] {
        assert_eq!(is_json_content_type(&typed(ct)), json, "{ct:?}");
    }
    let mut two = typed("application/json");
    two.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    assert!(!is_json_content_type(&two));
    assert!(!is_json_content_type(&HeaderMap::new()));
}

#[test]
fn a_body_is_nothing_or_a_json_object() {
    let json = typed("application/json");
    assert_eq!(json_body(&json, b"", false).unwrap(), None);
    assert_eq!(json_body(&HeaderMap::new(), b" \n", false).unwrap(), None);
    assert!(json_body(&json, b"{}", false).unwrap().is_some());
    assert_eq!(
        json_body(&json, b"[1]", true).unwrap(),
        Some(serde_json::json!([1]))
    );
    for (headers, body, status) in [
        (&json, &b"{\"a\":"[..], 400),
        (&json, b"[1,2,3]", 422),
        (&json, b"null", 422),
        (&json, b"\"x\"", 422),
        (&typed("text/plain"), b"{}", 415),
        (&HeaderMap::new(), b"{}", 415),
    ] {
        let e = json_body(headers, body, false).unwrap_err();
        assert_eq!(
            e.status.as_u16(),
            status,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn same_origin_compares_host_and_port() {
    let table = [
        ("http://192.168.1.5", "192.168.1.5", true),
        ("http://192.168.1.5", "192.168.1.5:80", true),
        ("http://192.168.1.5:8000", "192.168.1.5:8000", true),
        ("http://Miner.local:8000", "miner.local:8000", true),
        ("https://miner", "miner", true),
        ("http://[::1]:8080", "[::1]:8080", true),
        ("http://192.168.1.5:8000", "192.168.1.5:8080", false),
        // Behind a TLS terminator the gateway sees the name only: the scheme's port is implied.
        ("https://192.168.1.5", "192.168.1.5", true),
        ("https://192.168.1.5", "192.168.1.5:80", false),
        ("http://evil.example", "192.168.1.5", false),
        ("http://192.168.1.5.evil.example", "192.168.1.5", false),
        ("null", "192.168.1.5", false),
        ("file://", "192.168.1.5", false),
        ("http://192.168.1.5/path", "192.168.1.5", false),
        ("", "192.168.1.5", false),
    ];
    for (origin, host, same) in table {
        assert_eq!(same_origin(origin, host), same, "{origin} vs {host}");
    }
}

#[test]
fn browser_marks_decide_cross_site() {
    assert!(cross_site(&headers(&[("host", "10.0.0.2")])).is_none());
    assert!(
        cross_site(&headers(&[
            ("host", "10.0.0.2"),
            ("origin", "http://10.0.0.2")
        ]))
        .is_none()
    );
    assert!(
        cross_site(&headers(&[
            ("host", "10.0.0.2"),
            ("sec-fetch-site", "same-origin")
        ]))
        .is_none()
    );
    for bad in [
        &[("host", "10.0.0.2"), ("origin", "http://evil.example")][..],
        &[("host", "10.0.0.2"), ("origin", "null")],
        &[("origin", "http://10.0.0.2")],
        &[("host", "10.0.0.2"), ("sec-fetch-site", "cross-site")],
        &[
            ("host", "10.0.0.2"),
            ("origin", "http://10.0.0.2"),
            ("origin", "http://evil.example"),
        ],
    ] {
        assert!(cross_site(&headers(bad)).is_some(), "{bad:?}");
    }
}
