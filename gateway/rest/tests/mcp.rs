//! `POST /mcp` over real HTTP against fake peers: the tools keep their REST equivalents' mode
//! gating, read tools never reach a write, and the guard answers before MCP does.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{GOOD, Harness, Options};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use svcos_common::config::Mode;

fn opts(mode: Mode) -> Options {
    let mut o = Options::default();
    o.config.system.mode = mode;
    o
}

/// One JSON-RPC message to `/mcp` as a Streamable HTTP client sends it: (status, JSON body).
async fn rpc(h: &Harness, token: Option<&str>, message: Value) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = http::Request::post(format!("{}/mcp", h.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(message.to_string())))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("/mcp must not hang")
        .expect("request");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)));
    (status, value)
}

/// `tools/call` → the CallToolResult.
async fn call(h: &Harness, name: &str, arguments: Value) -> Value {
    let (status, body) = rpc(
        h,
        Some(GOOD),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

#[tokio::test]
async fn initialize_answers_json_with_the_server_identity() {
    let h = Harness::start(Options::default()).await;
    let (status, body) = rpc(
        &h,
        Some(GOOD),
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], 1);
    assert_eq!(body["result"]["serverInfo"]["name"], "svcos");
    assert_eq!(
        body["result"]["serverInfo"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        body["result"]["capabilities"]["tools"].is_object(),
        "{body}"
    );
}

#[tokio::test]
async fn no_token_is_the_401_envelope_not_an_mcp_answer() {
    let h = Harness::start(Options::default()).await;
    for token in [None, Some("garbage-token")] {
        let (status, body) = rpc(
            &h,
            token,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
        assert_eq!(status, 401, "{body}");
        assert!(body["error"].is_string(), "{body}");
        assert!(body.get("jsonrpc").is_none() && body.get("result").is_none());
    }
}

#[tokio::test]
async fn control_tools_keep_their_rest_mode_gating() {
    let h = Harness::start(opts(Mode::Home)).await;
    // POST /api/fan needs standard mode: refused before hw-agent is asked.
    let r = call(&h, "set_fan", json!({"mode": "manual", "pwm_percent": 50})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["required_mode"], "standard", "{r}");
    assert_eq!(r["structuredContent"]["current_mode"], "home", "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("standard mode"),
        "{r}"
    );
    assert_eq!(h.hw.calls.get("set_fan"), 0);
    // Sleep is in the home set, as POST /api/action/sleep is.
    let r = call(&h, "sleep", json!({})).await;
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["action"], "sleep", "{r}");
    assert_eq!(h.hw.calls.get("set_sleep"), 1);
}

#[tokio::test]
async fn control_tools_run_the_rest_write_in_standard_mode() {
    let h = Harness::start(opts(Mode::Standard)).await;
    let r = call(&h, "set_fan", json!({"mode": "manual", "pwm_percent": 55})).await;
    assert_eq!(r["isError"], false, "{r}");
    let sent =
        h.hw.last_fan
            .lock()
            .unwrap()
            .clone()
            .expect("hw-agent got SetFan");
    assert_eq!(sent.pwm_percent, 55);
    // The REST route's own validation reaches the agent as a tool error.
    let r = call(&h, "set_fan", json!({"mode": "manual"})).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["field"], "pwm_percent", "{r}");
    // Wrong argument types are tool errors too, not protocol errors.
    let r = call(&h, "set_led", json!({"mode": "disco"})).await;
    assert_eq!(r["isError"], true, "{r}");
}

#[tokio::test]
async fn read_tools_never_reach_a_write() {
    let h = Harness::start(opts(Mode::Standard)).await;
    let (_, listed) = rpc(
        &h,
        Some(GOOD),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let read: Vec<&str> = tools
        .iter()
        .filter(|t| t["annotations"]["readOnlyHint"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(read.len() >= 8, "{read:?}");
    for name in &read {
        assert!(name.starts_with("get_"), "{name}");
        call(&h, name, json!({})).await;
    }
    for write in [
        "set_fan",
        "set_sleep",
        "set_led",
        "set_frequency",
        "set_voltage",
    ] {
        assert_eq!(h.hw.calls.get(write), 0, "{write}");
    }
    // The audit ring records every write route; the read tools added none besides /mcp itself.
    let audit = h.get("/api/audit-log", Some(GOOD)).await.json();
    let paths: Vec<&str> = audit["entries"]
        .as_array()
        .expect("audit entries")
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.iter().all(|p| *p == "/mcp"), "{paths:?}");
}

#[tokio::test]
async fn a_malformed_message_is_400_with_the_envelope_not_415() {
    let h = Harness::start(opts(Mode::Standard)).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for (body, jsonrpc_code) in [
        (r#"{"jsonrpc":"2.0","id":2,"#, -32700),
        ("[]", -32600),
        (r#"{"id":1}"#, -32600),
    ] {
        let req = http::Request::post(format!("{}/mcp", h.base))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {GOOD}"))
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .expect("/mcp must not hang")
            .expect("request");
        assert_eq!(resp.status(), 400, "{body}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let reply = common::Reply {
            status: 400,
            headers: Default::default(),
            body: bytes,
        };
        let e = reply.envelope();
        assert_eq!(e["code"], "unclassified_error", "{e}");
        assert_eq!(e["jsonrpc_code"], jsonrpc_code, "{e}");
        assert!(
            !e["suggestion"].as_str().unwrap().contains("Content-Type"),
            "{e}"
        );
    }
    // A body that is not declared JSON is still the media type's fault.
    let req = http::Request::post(format!("{}/mcp", h.base))
        .header("content-type", "text/plain")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {GOOD}"))
        .body(Full::new(Bytes::from("{}")))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 415);
}
