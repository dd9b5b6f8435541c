//! Behaviour over real HTTP: auth on every operation, open paths, mode gating, the confirm rule,
//! the envelope on every kind of failure, status from the snapshot, pools and config writes.

mod common;
// Only the MEDIA table is used here (the Content-Type every answer must have).
#[allow(dead_code)]
mod openapi;

use std::time::Duration;

use common::{EXPIRED, GOOD, Harness, Options, PASSWORD, REVOKED, concrete};
use serde_json::{Value, json};
use svcos_common::config::{Config, Mode};
use svcos_gateway::registry::{AuthClass, Support, metas};

fn opts_with(f: impl FnOnce(&mut Config)) -> Options {
    let mut o = Options::default();
    f(&mut o.config);
    o
}

fn assert_401(r: &common::Reply, what: &str) {
    assert_eq!(
        r.status,
        401,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        r.headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"svcrald\""),
        "{what}"
    );
    r.envelope();
}

#[tokio::test]
async fn every_bearer_operation_rejects_missing_garbage_expired_and_revoked_tokens() {
    let h = Harness::start(Options::default()).await;
    let mut checked = 0;
    for m in metas() {
        if m.auth == AuthClass::Open || m.auth == AuthClass::Metrics {
            continue;
        }
        let path = concrete(m.path);
        for token in [None, Some("garbage"), Some(EXPIRED), Some(REVOKED)] {
            let r = h
                .send_json(m.method.as_str(), &path, token, &json!({"confirm": true}))
                .await;
            assert_401(&r, &format!("{} {} with {token:?}", m.method, m.path));
            checked += 1;
        }
    }
    assert_eq!(checked, 262 * 4);
}

#[tokio::test]
async fn metrics_is_open_by_default_and_bearer_when_configured() {
    let h = Harness::start(Options::default()).await;
    let r = h.get("/metrics", None).await;
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    assert!(
        text.contains("svcos_hashrate_ghs{window=\"1m\"} 13400"),
        "{text}"
    );
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    drop(h);

    let h = Harness::start(opts_with(|c| c.api.metrics_require_auth = true)).await;
    for token in [None, Some("garbage"), Some(EXPIRED), Some(REVOKED)] {
        assert_401(&h.get("/metrics", token).await, "/metrics");
    }
    assert_eq!(h.get("/metrics", Some(GOOD)).await.status, 200);
}

#[tokio::test]
async fn open_paths_are_reachable_without_a_token() {
    let h = Harness::start(opts_with(|c| c.system.mode = Mode::Home)).await;
    for path in [
        "/api/auth/status",
        "/api/setup/status",
        "/api/safety/warnings",
        "/api/system/update/metadata",
        "/api/donation/info",
    ] {
        let r = h.get(path, None).await;
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            r.json()["schema"]
                .as_str()
                .unwrap()
                .starts_with("svcos.api."),
            "{path}"
        );
    }
    // Login with the right password works without a token; the issued token then works.
    let r = h
        .send_json(
            "POST",
            "/api/auth/session",
            None,
            &json!({"password": PASSWORD}),
        )
        .await;
    assert_eq!(r.status, 200);
    let token = r.json()["token"].as_str().unwrap().to_string();
    assert!(r.json()["expires_at"].as_i64().unwrap() > 0);
    assert_eq!(h.get("/api/status", Some(&token)).await.status, 200);
    // Setup is reachable: the fake says a password exists.
    let r = h
        .send_json(
            "POST",
            "/api/auth/setup",
            None,
            &json!({"password": "whatever123"}),
        )
        .await;
    assert_eq!(r.status, 409);
    r.envelope();
}

#[tokio::test]
async fn wrong_password_is_401_with_envelope() {
    let h = Harness::start(Options::default()).await;
    let r = h
        .send_json(
            "POST",
            "/api/auth/session",
            None,
            &json!({"password": "nope"}),
        )
        .await;
    assert_401(&r, "wrong password");
}

#[tokio::test]
async fn setup_rate_limit_is_429_with_retry_after() {
    let h = Harness::start(Options::default()).await;
    for _ in 0..3 {
        assert_eq!(
            h.send_json(
                "POST",
                "/api/auth/setup",
                None,
                &json!({"password": "abcdefgh"})
            )
            .await
            .status,
            409
        );
    }
    let r = h
        .send_json(
            "POST",
            "/api/auth/setup",
            None,
            &json!({"password": "abcdefgh"}),
        )
        .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "42");
    assert_eq!(r.envelope()["retry_after_s"], 42);
}

#[tokio::test]
async fn every_registered_operation_is_routed_and_none_answers_501() {
    let h = Harness::start(opts_with(|c| c.system.mode = Mode::Hacker)).await;
    let mut planned = 0;
    let mut undocumented = Vec::new();
    h.auth.add_session("logout-token-0123", "s-logout", 3600);
    for m in metas() {
        let path = concrete(m.path);
        // Logging out must not end the session the rest of the loop uses.
        let token = if m.path == "/api/auth/session/current" {
            "logout-token-0123"
        } else {
            GOOD
        };
        let r = h
            .send_json(
                m.method.as_str(),
                &path,
                Some(token),
                &json!({"confirm": true}),
            )
            .await;
        // A handler may answer 404 for an unknown :id; only the router's own 404 means unrouted.
        assert!(
            r.status != 404 || r.json()["error"] != "no such route",
            "{} {} is not routed",
            m.method,
            m.path
        );
        assert_ne!(r.status, 405, "{} {} is not routed", m.method, m.path);
        if !(200..300).contains(&r.status) {
            r.envelope();
        } else {
            // A 2xx is sent in a media type docs/openapi.json documents for the route: JSON
            // unless the generator's MEDIA table lists the route's own.
            let sent = r
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let documented: Vec<&str> = openapi::MEDIA
                .iter()
                .find(|(method, path, ..)| m.method.as_str() == *method && m.path == *path)
                .map_or(vec!["application/json"], |(_, _, bodies, _)| {
                    bodies.iter().map(|(media, _)| *media).collect()
                });
            if !documented.contains(&sent) {
                undocumented.push(format!(
                    "{} {} sent {sent:?}, documented {documented:?}",
                    m.method, m.path
                ));
            }
        }
        if m.support == Support::Planned {
            assert_eq!(r.status, 501, "{} {}", m.method, m.path);
            planned += 1;
        } else {
            assert_ne!(
                r.status, 501,
                "{} {} is marked implemented",
                m.method, m.path
            );
            assert!(
                r.status < 500,
                "{} {} answered {}: {}",
                m.method,
                m.path,
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    // The tuning issue and issue 34 implemented the last planned operations: none answers 501.
    assert_eq!(
        planned,
        0,
        "operations answering 501: {planned} of {}",
        metas().len()
    );
    assert!(undocumented.is_empty(), "{undocumented:#?}");
}

#[tokio::test]
async fn debug_routes_are_forbidden_outside_hacker_mode() {
    for mode in [Mode::Home, Mode::Standard] {
        let h = Harness::start(opts_with(|c| c.system.mode = mode)).await;
        let mut n = 0;
        for m in metas().iter().filter(|m| m.path.starts_with("/api/debug/")) {
            let r = h
                .send_json(
                    m.method.as_str(),
                    m.path,
                    Some(GOOD),
                    &json!({"confirm": true}),
                )
                .await;
            assert_eq!(r.status, 403, "{} {}", m.method, m.path);
            let v = r.envelope();
            assert_eq!(v["current_mode"], mode.as_str());
            assert_eq!(v["required_mode"], "hacker");
            n += 1;
        }
        assert_eq!(n, 11);
    }
}

#[tokio::test]
async fn home_mode_reaches_only_the_home_set() {
    let h = Harness::start(opts_with(|c| c.system.mode = Mode::Home)).await;
    for path in [
        "/api/status",
        "/api/pools",
        "/api/config",
        "/api/system/info",
        "/api/home/status",
        "/api/diagnostics/chain",
    ] {
        assert_eq!(h.get(path, Some(GOOD)).await.status, 200, "{path}");
    }
    // The Space Heater screen reads the thermostat from the home status (no other GET for it).
    let home = h.get("/api/home/status", Some(GOOD)).await.json();
    assert_eq!(home["thermostat"]["schema"], "svcos.api.home.thermostat.v1");
    assert!(home["thermostat"]["target_room_c"].is_number(), "{home}");
    assert_eq!(
        h.send_json("POST", "/api/action/sleep", Some(GOOD), &json!({}))
            .await
            .status,
        200
    );
    for path in ["/api/stats", "/api/history/audit", "/api/chips"] {
        let r = h.get(path, Some(GOOD)).await;
        assert_eq!(r.status, 403, "{path}");
        assert_eq!(r.envelope()["required_mode"], "standard");
    }
}

#[tokio::test]
async fn debug_writes_need_confirm_in_hacker_mode() {
    let h = Harness::start(opts_with(|c| c.system.mode = Mode::Hacker)).await;
    for m in metas()
        .iter()
        .filter(|m| m.path.starts_with("/api/debug/") && m.mutates())
    {
        for body in [
            json!({}),
            json!({"confirm": false}),
            json!({"confirm": "yes"}),
        ] {
            let r = h
                .send_json(m.method.as_str(), m.path, Some(GOOD), &body)
                .await;
            assert_eq!(r.status, 428, "{} {} {body}", m.method, m.path);
            r.envelope();
        }
        let r = h
            .request(
                m.method.as_str(),
                m.path,
                Some(GOOD),
                Some("application/json"),
                "{not json",
            )
            .await;
        assert_eq!(r.status, 400, "malformed, not unconfirmed");
    }
    let r = h
        .send_json(
            "POST",
            "/api/debug/chip/frequency",
            Some(GOOD),
            &json!({"confirm": true, "frequency_mhz": 600.0, "chain_id": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let f = (*h.hw.last_frequency.lock().unwrap()).unwrap();
    assert_eq!((f.frequency_mhz, f.chain_id), (600.0, Some(1)));
    // Reads do not need confirm.
    assert_eq!(h.get("/api/debug/log", Some(GOOD)).await.status, 200);
}

#[tokio::test]
async fn every_failure_kind_gets_the_envelope() {
    let h = Harness::start(opts_with(|c| c.api.max_body_bytes = 1024)).await;
    // Unknown path.
    let r = h.get("/api/nope", Some(GOOD)).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.envelope()["code"], "unclassified_error");
    let r = h.get("/nope", None).await;
    assert_eq!(r.status, 404);
    r.envelope();
    // Wrong method.
    let r = h
        .request("DELETE", "/api/status", Some(GOOD), None, "")
        .await;
    assert_eq!(r.status, 405);
    assert!(r.headers.contains_key("allow"));
    r.envelope();
    // Malformed JSON.
    let r = h
        .request(
            "POST",
            "/api/pools",
            Some(GOOD),
            Some("application/json"),
            "{",
        )
        .await;
    assert_eq!(r.status, 400);
    r.envelope();
    // Not JSON at all.
    let r = h
        .request(
            "POST",
            "/api/pools",
            Some(GOOD),
            Some("text/plain"),
            "pools",
        )
        .await;
    assert_eq!(r.status, 415);
    r.envelope();
    // JSON of the wrong shape.
    let r = h
        .send_json("POST", "/api/auth/session", None, &json!({"password": 5}))
        .await;
    assert_eq!(r.status, 422);
    r.envelope();
    // Too large.
    let big = json!({"system": {"hostname": "x".repeat(4096)}});
    let r = h.send_json("POST", "/api/config", Some(GOOD), &big).await;
    assert_eq!(r.status, 413);
    r.envelope();
    // Foreign Host (DNS rebinding).
    let req = http::Request::builder()
        .uri(format!("{}/api/status", h.base))
        .header("host", "evil.example")
        .header("authorization", format!("Bearer {GOOD}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let resp = client.request(req).await.unwrap();
    // The proxy answers the same (svcos_common::hostcheck::REFUSED_STATUS).
    assert_eq!(resp.status(), 421);
}

#[tokio::test]
async fn status_is_served_from_the_snapshot_without_per_request_calls() {
    let h = Harness::start(Options::default()).await;
    let streams_before = h.hw.calls.get("stream_telemetry");
    let validations_before = h.auth.calls.get("validate_session");
    for _ in 0..50 {
        let r = h.get("/api/status", Some(GOOD)).await;
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(v["schema"], "svcos.api.status.v1");
        assert_eq!(v["degraded"], false);
        assert_eq!(v["mining"]["hashrate_ghs"]["1m"], 13400.0);
        assert_eq!(
            v["pools"]["list"][0]["url"],
            "stratum+tcp://pool.example:3333"
        );
    }
    assert_eq!(
        h.hw.calls.get("get_telemetry"),
        0,
        "no per-request telemetry calls"
    );
    assert_eq!(
        h.hw.calls.get("stream_telemetry"),
        streams_before,
        "no new streams"
    );
    assert_eq!(
        h.stratum.calls.get("get_pools"),
        0,
        "no per-request pool calls"
    );
    assert!(
        h.auth.calls.get("validate_session") - validations_before <= 1,
        "validations are cached"
    );

    // A new snapshot shows up, in /api/status and in the rolling history.
    h.hw.telemetry.send_replace(common::sample_telemetry(99));
    let mut seen = false;
    for _ in 0..200 {
        if h.get("/api/status", Some(GOOD)).await.json()["mining"]["telemetry_seq"] == 99 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "new telemetry never appeared");
    let mut rolling = Value::Null;
    // History is kept by the (real) tuner, one stream hop further than /api/status.
    for _ in 0..1000 {
        rolling = h.get("/api/metrics/rolling", Some(GOOD)).await.json();
        if rolling["samples"].as_array().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let samples = rolling["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "{rolling}");
    assert_eq!(
        samples[1]["t_ms"],
        common::sample_telemetry(99).timestamp_ms
    );
    assert_eq!(samples[1]["accepted"], 10);
    let csv = h.get("/api/metrics/rolling.csv", Some(GOOD)).await;
    assert_eq!(String::from_utf8_lossy(&csv.body).lines().count(), 3);
    assert_eq!(
        h.hw.calls.get("get_telemetry"),
        0,
        "history is sampled from the stream"
    );
}

#[tokio::test]
async fn status_says_what_is_down() {
    let h = Harness::start(Options {
        hw: false,
        ..Options::default()
    })
    .await;
    let r = h.get("/api/status", Some(GOOD)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["degraded"], true);
    assert_eq!(v["sources"]["hw_agent"]["up"], false);
    assert_eq!(v["sources"]["stratum_agent"]["up"], true);
    assert!(v["mining"].is_null());
    // A call that needs hw-agent answers 503 with the envelope, quickly.
    let r = h.get("/api/miner/type", Some(GOOD)).await;
    assert_eq!(r.status, 503);
    r.envelope();
}

#[tokio::test]
async fn auth_down_is_503_not_a_hang() {
    let h = Harness::start(Options {
        auth: false,
        ..Options::default()
    })
    .await;
    let r = h.get("/api/status", Some(GOOD)).await;
    assert_eq!(r.status, 503);
    r.envelope();
    // Open routes that do not need auth still answer.
    assert_eq!(h.get("/api/donation/info", None).await.status, 200);
}

#[tokio::test]
async fn revocation_and_logout_take_effect_despite_the_cache() {
    let h = Harness::start(Options::default()).await;
    h.auth.add_session("second-token-0123", "s-second", 3600);
    assert_eq!(
        h.get("/api/status", Some("second-token-0123")).await.status,
        200
    );
    h.auth.revoke("s-second");
    let mut rejected = false;
    for _ in 0..200 {
        if h.get("/api/status", Some("second-token-0123")).await.status == 401 {
            rejected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rejected, "a revoked session kept working");

    // Logout through the gateway is immediate.
    h.auth.add_session("third-token-0123", "s-third", 3600);
    assert_eq!(
        h.get("/api/status", Some("third-token-0123")).await.status,
        200
    );
    let r = h
        .request(
            "DELETE",
            "/api/auth/session/current",
            Some("third-token-0123"),
            None,
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_401(
        &h.get("/api/status", Some("third-token-0123")).await,
        "after logout",
    );
}

#[tokio::test]
async fn cached_validation_never_outlives_the_session() {
    let h = Harness::start(Options::default()).await;
    h.auth.add_session("short-token-0123", "s-short", 3);
    assert_eq!(
        h.get("/api/status", Some("short-token-0123")).await.status,
        200
    );
    h.clock.advance_ms(4_000);
    assert_401(
        &h.get("/api/status", Some("short-token-0123")).await,
        "expired while cached",
    );
}

#[tokio::test]
async fn pools_validation_names_the_field_and_writes_reload_stratum() {
    let h = Harness::start(Options::default()).await;
    let r = h
        .send_json(
            "POST",
            "/api/pools",
            Some(GOOD),
            &json!({"pools": [{"url": "http://pool:3333", "user": "w"}]}),
        )
        .await;
    assert_eq!(r.status, 400);
    let v = r.envelope();
    assert_eq!(v["code"], "pool_validation");
    assert_eq!(v["field"], "pools[0].url");
    let r = h
        .send_json(
            "POST",
            "/api/pools",
            Some(GOOD),
            &json!({"pools": [
                {"url": "stratum+tcp://a.example:3333", "user": "w", "quota": 50},
                {"url": "stratum+tcp://b.example:3333", "user": "w", "quota": 20},
            ]}),
        )
        .await;
    assert_eq!(r.envelope()["field"], "pools[].quota");
    assert!(
        !h.layout.config_path.exists(),
        "nothing written on a validation error"
    );

    let r = h
        .send_json("POST", "/api/pools", Some(GOOD), &json!({"pools": [{"url": "stratum+tcp://a.example:3333", "user": "w", "password": "pw"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["reloaded"][0],
        json!({"service": "stratum-agent", "ok": true})
    );
    assert_eq!(h.stratum.calls.get("reload_config"), 1);
    let saved = Config::load(&h.layout.config_path).unwrap();
    assert_eq!(saved.pools[0].url, "stratum+tcp://a.example:3333");
    assert_eq!(saved.pools[0].password, "pw");
    let v = h.get("/api/pools", Some(GOOD)).await.json();
    assert_eq!(v["pools"][0]["password"], "********");
    // Echoing the mask keeps the stored password.
    let echoed = json!({"pools": [{"url": "stratum+tcp://a.example:3333", "user": "w2", "password": "********"}]});
    assert_eq!(
        h.send_json("POST", "/api/pools", Some(GOOD), &echoed)
            .await
            .status,
        200
    );
    assert_eq!(
        Config::load(&h.layout.config_path).unwrap().pools[0].password,
        "pw"
    );
}

#[tokio::test]
async fn pool_write_failure_is_pool_config_write_failed() {
    let blocker = tempfile::NamedTempFile::new().unwrap();
    let h = Harness::start(Options {
        config_path: Some(blocker.path().join("config.toml")),
        ..Options::default()
    })
    .await;
    let r = h
        .send_json(
            "POST",
            "/api/pools",
            Some(GOOD),
            &json!({"pools": [{"url": "stratum+tcp://a.example:3333", "user": "w"}]}),
        )
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(r.envelope()["code"], "pool_config_write_failed");
}

#[tokio::test]
async fn config_writes_are_validated_atomic_and_report_restarts() {
    // Import refuses a config without a pool (mining would stop), so the round trip needs one.
    let options = one_pool("stratum+tcp://127.0.0.1:3333");
    let h = Harness::start(options).await;
    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"thermal": {"target_temp_c": 500}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let v = r.envelope();
    assert_eq!(v["code"], "config_validation");
    assert_eq!(v["field"], "thermal.target_temp_c");
    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"thermal": {"target_temp_c": "warm"}}),
        )
        .await;
    assert_eq!(r.envelope()["field"], "thermal.target_temp_c");
    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"api": {"colour": 1}}),
        )
        .await;
    assert_eq!(r.envelope()["field"], "api.colour");
    assert!(!h.layout.config_path.exists());

    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"thermal": {"target_temp_c": 70.0}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["changed"], json!(["thermal.target_temp_c"]));
    assert_eq!(v["restart_required"], json!([]));
    assert_eq!(
        v["reloaded"],
        json!([{"service": "hw-agent", "ok": true}, {"service": "tuner", "ok": true}])
    );
    assert_eq!(
        Config::load(&h.layout.config_path)
            .unwrap()
            .thermal
            .target_temp_c,
        70.0
    );
    let leftovers: Vec<_> = std::fs::read_dir(h.layout.config_path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left behind");

    let r = h
        .send_json(
            "POST",
            "/api/config",
            Some(GOOD),
            &json!({"api": {"port": 9999}, "donation": {"cycle_s": 600}}),
        )
        .await;
    let v = r.json();
    assert_eq!(
        v["restart_required"],
        json!([{"key": "api.port", "service": "gateway"}, {"key": "donation.cycle_s", "service": "stratum-agent"}])
    );
    // GET reflects the live config; export/import round-trip.
    assert_eq!(
        h.get("/api/config", Some(GOOD)).await.json()["config"]["thermal"]["target_temp_c"],
        70.0
    );
    let exported = h.get("/api/config/export", Some(GOOD)).await;
    let text = String::from_utf8(exported.body.to_vec()).unwrap();
    let r = h
        .send_json(
            "POST",
            "/api/config/import",
            Some(GOOD),
            &json!({"toml": text}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["changed"], json!([]));
    let r = h
        .send_json(
            "POST",
            "/api/config/import",
            Some(GOOD),
            &json!({"toml": "[thermal]\nbogus = 1\n"}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.envelope()["code"], "config_validation");
    // The `GET /api/config` answer re-imports as it is (issue 33), masked secrets and all, on
    // import and on restore; a body with another schema tag is not mistaken for it.
    let mut answer = h.get("/api/config", Some(GOOD)).await.json();
    answer["config"]["thermal"]["target_temp_c"] = json!(71.0);
    let r = h
        .send_json("POST", "/api/config/import", Some(GOOD), &answer)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    assert_eq!(r.json()["changed"], json!(["thermal.target_temp_c"]));
    let r = h
        .send_json("POST", "/api/config/restore", Some(GOOD), &answer)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    let now = h.get("/api/config", Some(GOOD)).await.json();
    assert_eq!(now["config"]["thermal"]["target_temp_c"], json!(71.0));
    assert_eq!(now["config"]["pools"], answer["config"]["pools"]);
    answer["schema"] = json!("svcos.api.status.v1");
    let r = h
        .send_json("POST", "/api/config/import", Some(GOOD), &answer)
        .await;
    assert_eq!(r.status, 422);
    let m = h
        .get("/api/config/backup/manifest", Some(GOOD))
        .await
        .json();
    assert_eq!(m["files"][0]["present"], true);
}

#[tokio::test]
async fn mode_change_applies_to_gating_at_once() {
    let h = Harness::start(Options::default()).await;
    assert_eq!(h.get("/api/debug/log", Some(GOOD)).await.status, 403);
    let r = h
        .send_json(
            "POST",
            "/api/setup/step4-mode",
            Some(GOOD),
            &json!({"mode": "hacker"}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(h.get("/api/debug/log", Some(GOOD)).await.status, 200);
    let r = h
        .send_json(
            "POST",
            "/api/setup/step4-mode",
            Some(GOOD),
            &json!({"mode": "wizard"}),
        )
        .await;
    assert_eq!(r.envelope()["field"], "system.mode");
}

#[tokio::test]
async fn discovery_documents() {
    let h = Harness::start(Options::default()).await;
    let v = h.get("/api/index", Some(GOOD)).await.json();
    assert_eq!(v["schema"], "svcos.api.index.v1");
    assert_eq!(v["api_contract_version"], "svcos.api.v1");
    assert_eq!(v["route_count"], 72);
    assert_eq!(v["routes"].as_array().unwrap().len(), 72);
    assert_eq!(v["surface_count"], 5);
    let surfaces: Vec<_> = v["surfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        surfaces,
        [
            "svc-rest",
            "third-party-compat-rest",
            "v1-firmware-aliases",
            "legacy-miner-tcp",
            "websocket"
        ]
    );
    for r in v["routes"].as_array().unwrap() {
        assert!(r["support"].is_string() && r["mutates"].is_boolean(), "{r}");
        assert_eq!(r["mutates"], r["method"] != "GET");
    }

    let c = h.get("/api/competitive/readiness", Some(GOOD)).await.json();
    for (k, want) in [
        ("license_required", json!(false)),
        ("license_server_required", json!(false)),
        ("activation_required", json!(false)),
        ("mandatory_fee", json!(false)),
        ("fee_route", json!("transparent_donation")),
        ("home_miner_safe", json!(false)),
        ("offline_behavior", json!("local_first")),
    ] {
        assert_eq!(c[k], want, "{k}");
    }
    assert_eq!(
        c["donation"],
        json!({"default_enabled": false, "default_percent": 0.0, "disable_supported": true, "pool_visible": true,
               "donation_off_test_status": "not_run", "current_state_source": "not_read_by_static_contract"})
    );
    assert!(
        c["write_surfaces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["audit_status"] == "partial")
    );

    let d = h.get("/api/donation/info", None).await.json();
    for k in ["pool_url", "payout_address", "explorer_url", "trust_model"] {
        assert!(d[k].is_string(), "{k}");
    }
}

#[tokio::test]
async fn actions_reach_their_owners() {
    let h = Harness::start(Options::default()).await;
    let r = h
        .send_json("POST", "/api/action/sleep", Some(GOOD), &json!({}))
        .await;
    assert_eq!(r.json()["state"], "sleeping");
    let r = h
        .request("POST", "/api/action/restart", Some(GOOD), None, "")
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        *h.supervisor.restarts.lock().unwrap(),
        ["stratum-agent", "hw-agent"]
    );
    let r = h
        .send_json(
            "POST",
            "/api/action/restart",
            Some(GOOD),
            &json!({"service": "nope"}),
        )
        .await;
    assert_eq!(r.envelope()["field"], "service");
    let r = h
        .send_json(
            "POST",
            "/api/fan",
            Some(GOOD),
            &json!({"mode": "manual", "pwm_percent": 40}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        h.hw.last_fan.lock().unwrap().as_ref().unwrap().pwm_percent,
        40
    );
    let r = h
        .send_json("POST", "/api/fan", Some(GOOD), &json!({"mode": "manual"}))
        .await;
    assert_eq!(r.envelope()["field"], "pwm_percent");
    let r = h
        .send_json(
            "POST",
            "/api/pools/test",
            Some(GOOD),
            &json!({"url": "stratum+tcp://good.example:3333", "user": "w"}),
        )
        .await;
    assert_eq!(r.json()["ok"], true);
    let r = h
        .send_json(
            "POST",
            "/api/setup/test-pool",
            Some(GOOD),
            &json!({"url": "nope", "user": "w"}),
        )
        .await;
    assert_eq!(r.envelope()["code"], "pool_validation");
}

async fn ws_first_message(url: &str) -> Result<Value, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|e| e.to_string())?;
    use futures::StreamExt;
    let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .map_err(|_| "no message".to_string())?
        .ok_or("closed")?
        .map_err(|e| e.to_string())?;
    Ok(serde_json::from_str(msg.to_text().unwrap()).unwrap())
}

/// One frame per change: a snapshot that renders the same message (the same telemetry sent
/// again, a pool snapshot with nothing the stream shows changed) sends nothing; a real change
/// sends exactly one frame.
#[tokio::test]
async fn websocket_sends_a_frame_only_when_its_content_changed() {
    use futures::StreamExt;
    let h = Harness::start(Options::default()).await;
    let url = format!("{}/ws?token={GOOD}", h.base.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let mut next = async move || {
        tokio::time::timeout(Duration::from_millis(1500), ws.next())
            .await
            .ok()
            .map(|m| m.unwrap().unwrap().into_text().unwrap().to_string())
    };
    let first = next().await.expect("the first frame");
    for _ in 0..3 {
        let same = h.hw.telemetry.borrow().clone();
        h.hw.telemetry.send_replace(same);
        let pools = h.stratum.pools.borrow().clone();
        h.stratum.pools.send_replace(pools);
    }
    assert_eq!(next().await, None, "an unchanged snapshot sent a frame");
    h.hw.telemetry.send_modify(|t| t.seq += 1);
    let changed = next().await.expect("a frame for the change");
    assert_ne!(changed, first);
    let v: Value = serde_json::from_str(&changed).unwrap();
    assert_eq!(v["type"], "telemetry");
    assert_eq!(next().await, None, "one frame per change");
}

#[tokio::test]
async fn websocket_streams_telemetry_to_authenticated_clients() {
    let h = Harness::start(opts_with(|c| c.api.websocket_tickets = true)).await;
    let ws_base = h.base.replace("http://", "ws://");
    let v = ws_first_message(&format!("{ws_base}/ws?token={GOOD}"))
        .await
        .unwrap();
    assert_eq!(v["type"], "telemetry");
    assert_eq!(v["schema"], "svcos.ws.telemetry.v1");
    assert_eq!(v["pools"][0]["url"], "stratum+tcp://pool.example:3333");
    assert!(
        ws_first_message(&format!("{ws_base}/ws"))
            .await
            .unwrap_err()
            .contains("401")
    );
    assert!(
        ws_first_message(&format!("{ws_base}/ws?token={REVOKED}"))
            .await
            .unwrap_err()
            .contains("401")
    );

    let t = h
        .request("POST", "/api/auth/ws-ticket", Some(GOOD), None, "")
        .await
        .json();
    let ticket = t["ticket"].as_str().unwrap();
    assert_eq!(
        ws_first_message(&format!("{ws_base}/ws?ticket={ticket}"))
            .await
            .unwrap()["type"],
        "telemetry"
    );
    assert!(
        ws_first_message(&format!("{ws_base}/ws?ticket={ticket}"))
            .await
            .unwrap_err()
            .contains("401"),
        "tickets are single use"
    );
}

#[tokio::test]
async fn metrics_pass_promtool_check() {
    let h = Harness::start(Options::default()).await;
    let body = h.get("/metrics", None).await.body;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        println!("promtool not installed; skipping the exposition check");
        return;
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_config_writer_is_compare_and_set_over_grpc_and_rest() {
    use svcos_proto::config::v1 as cfg;
    use svcos_proto::config::v1::config_service_client::ConfigServiceClient;

    let options = one_pool("stratum+tcp://pool.example:3333");
    let h = Harness::start(options).await;
    let mut writer = ConfigServiceClient::new(svcos_common::ipc::channel(
        &h.layout,
        svcos_common::ServiceName::Gateway,
    ));
    let current = writer
        .get_config(cfg::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    let rest = h.get("/api/config", Some(GOOD)).await.json();
    assert_eq!(rest["generation"], current.generation, "one generation");

    // A pool added from the current generation (as stratum-agent's AddPool sends it): saved,
    // shown by REST at once, and pushed to stratum-agent.
    let reloads = h.stratum.calls.get("reload_config");
    let pools = json!({"pools": [
        {"url": "stratum+tcp://pool.example:3333", "user": "worker"},
        {"url": "stratum+tcp://127.0.0.1:3334", "user": "w2"},
    ]});
    let done = writer
        .patch_config(cfg::PatchConfigRequest {
            generation: current.generation,
            patch_json: pools.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.generation, current.generation + 1);
    assert_eq!(Config::load(&h.layout.config_path).unwrap().pools.len(), 2);
    assert_eq!(h.stratum.calls.get("reload_config"), reloads + 1);
    let listed = h.get("/api/pools", Some(GOOD)).await.json();
    assert_eq!(listed["pools"][1]["url"], "stratum+tcp://127.0.0.1:3334");

    // The old generation again: another write came first. Refused, nothing changed.
    let saved = std::fs::read(&h.layout.config_path).unwrap();
    let stale = writer
        .patch_config(cfg::PatchConfigRequest {
            generation: current.generation,
            patch_json: json!({"thermal": {"target_temp_c": 71}}).to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::Aborted, "{stale:?}");
    assert!(
        stale.message().contains("generation"),
        "{}",
        stale.message()
    );
    // A bad value names its field, in the message and the `field` metadata.
    let bad = writer
        .patch_config(cfg::PatchConfigRequest {
            generation: done.generation,
            patch_json: json!({"thermal": {"target_temp_c": 500}}).to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        bad.metadata().get("field").unwrap(),
        "thermal.target_temp_c"
    );
    assert_eq!(std::fs::read(&h.layout.config_path).unwrap(), saved);

    // REST: If-Match with a stale generation is a 409 naming `generation`; the current one
    // applies and the answer carries the next.
    let body = json!({"thermal": {"target_temp_c": 72}}).to_string();
    let auth = format!("Bearer {GOOD}");
    let stale_tag = format!("\"{}\"", current.generation);
    let current_tag = done.generation.to_string();
    let r = h
        .request_with(
            "POST",
            "/api/config",
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
                ("if-match", stale_tag.as_str()),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 409);
    let v = r.envelope();
    assert_eq!(
        (&v["code"], &v["field"], &v["generation"]),
        (
            &json!("config_conflict"),
            &json!("generation"),
            &json!(done.generation)
        )
    );
    assert_eq!(std::fs::read(&h.layout.config_path).unwrap(), saved);
    let r = h
        .request_with(
            "POST",
            "/api/config",
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
                ("if-match", current_tag.as_str()),
            ],
            body,
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["generation"], done.generation + 1);
}

/// Options for a stack with one pool (a config without any refuses imports and pool edits).
fn one_pool(url: &str) -> Options {
    let mut options = Options::default();
    options.config.pools = vec![svcos_common::config::PoolConfig {
        url: url.into(),
        user: "worker".into(),
        ..Default::default()
    }];
    options
}
