//! End to end over Stratum V2: a whole `svcos sim` stack with the gate on and the test pool's SV2
//! upstream listening; the SV2 pool (pinned to the upstream's generated authority key) is added
//! and switched to at run time like an operator would, the simulated board mines on it, the
//! upstream verifies the shares, and the REST API reports the channel.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svcos_common::{Layout, ServiceName};
use svcos_e2e::{Sim, SimOptions, WAIT, free_port};
use svcos_proto::stratum::v1 as st;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::testpool::v1 as tp;
use svcos_proto::testpool::v1::test_pool_service_client::TestPoolServiceClient;

const PASSWORD: &str = "correct horse battery staple";

/// One HTTP/1.1 request with `Connection: close`; (status, JSON body).
fn http(
    sim: &Sim,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(sim.api_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        sim.api_addr(),
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let payload = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (
        status,
        serde_json::from_str(&payload).unwrap_or(Value::Null),
    )
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn token(sim: &Sim) -> String {
    http(
        sim,
        "POST",
        "/api/auth/setup",
        None,
        Some(json!({"password": PASSWORD})),
    );
    let (status, body) = http(
        sim,
        "POST",
        "/api/auth/session",
        None,
        Some(json!({"password": PASSWORD})),
    );
    assert_eq!(status, 200, "{body}");
    body["token"]
        .as_str()
        .or(body["access_token"].as_str())
        .expect("a token")
        .to_string()
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + WAIT * 3;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A sim stack with SV2 on and its test pool's SV2 port open: the stack, that port, and the
/// pool's authority key once the pool has written it.
async fn sv2_sim() -> (Sim, u16, String) {
    let sv2_port = free_port();
    let sim = Sim::start(SimOptions {
        config_patch: Some(format!(
            "[stratum]\nsv2_enabled = true\n\n[sim]\npool_sv2_port = {sv2_port}\n"
        )),
        ..Default::default()
    })
    .unwrap();
    let key_file = Layout::sim(sim.dir())
        .service_state_dir(ServiceName::TestPool)
        .join("sv2-authority.pub");
    let key = wait_for("the upstream's authority key", || {
        let k = std::fs::read_to_string(&key_file).ok();
        async move { k.map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) }
    })
    .await;
    (sim, sv2_port, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_stack_mines_over_sv2_against_the_reference_crate_upstream() {
    let (sim, sv2_port, key) = sv2_sim().await;

    let mut stratum = StratumServiceClient::new(svcos_common::ipc::channel_with_timeout(
        sim.socket("stratum-agent"),
        Duration::from_secs(20),
    ));
    let pool = TestPoolServiceClient::new(svcos_common::ipc::channel_with_timeout(
        sim.socket("test-pool"),
        Duration::from_secs(20),
    ));
    let url = format!("stratum2+tcp://{}:{sv2_port}/{key}", sim.bind());
    let index = stratum
        .add_pool(st::AddPoolRequest {
            url,
            user: "sim-sv2".into(),
            password: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .index;
    stratum
        .switch_pool(st::SwitchPoolRequest { index })
        .await
        .unwrap();

    // The board mines on the SV2 pool and the upstream verifies its shares.
    let stats = wait_for("verified SV2 shares at the upstream", || {
        let mut pool = pool.clone();
        async move {
            let s = pool
                .get_stats(tp::GetStatsRequest {})
                .await
                .ok()?
                .into_inner();
            s.sv2.as_ref().is_some_and(|v| v.accepted >= 2).then_some(s)
        }
    })
    .await;
    let sv2 = stats.sv2.unwrap();
    assert_eq!(sv2.authority_pubkey, key);
    assert!(sv2.handshakes >= 1 && sv2.channels >= 1);
    let pools = wait_for("the agent counting SV2 accepts", || {
        let mut stratum = stratum.clone();
        async move {
            let p = stratum
                .get_pools(st::GetPoolsRequest {})
                .await
                .ok()?
                .into_inner();
            (p.active_index == index as i32 && p.pools[index as usize].accepted >= 1).then_some(p)
        }
    })
    .await;
    assert_eq!(pools.pools[index as usize].protocol, "stratum2+tcp");

    // The REST API reports the live channel.
    let token = token(&sim);
    let (status, body) = http(&sim, "GET", "/api/pool/sv2/status", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"], "svcos.api.sv2.status.v1");
    assert_eq!(body["enabled"], true);
    assert_eq!(body["state"], "channel_open", "{body}");
    assert_eq!(body["active"], true, "{body}");
    assert_eq!(body["channel"]["id"], 1);
    assert_eq!(body["channel"]["type"], "extended");
    assert!(body["shares"]["accepted"].as_u64().unwrap() >= 1, "{body}");
    let (status, body) = http(&sim, "GET", "/api/pool/sv2/handshake", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "ok");
    assert_eq!(body["authority_pubkey"], key.as_str());
    let (status, body) = http(&sim, "GET", "/api/pool/sv2/messages", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    let types: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["message_type"].as_str())
        .collect();
    assert!(types.contains(&"SubmitSharesSuccess"), "{types:?}");
}

/// Job declaration through the REST API on a whole sim stack: bad input is refused with the
/// envelope and saves nothing, the connection test reaches both roles, and once enabled the
/// simulated board mines declared jobs whose shares the test pool verifies on the declared
/// template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_declaration_through_the_rest_api() {
    let (sim, sv2_port, key) = sv2_sim().await;
    let url = format!("stratum2+tcp://{}:{sv2_port}/{key}", sim.bind());
    let token = token(&sim);

    // Every route needs the bearer token.
    for (method, path) in [
        ("GET", "/api/jd/status"),
        ("POST", "/api/jd/config"),
        ("POST", "/api/jd/test-connection"),
    ] {
        let (status, body) = http(&sim, method, path, None, Some(json!({})));
        assert_eq!(status, 401, "{method} {path}: {body}");
    }

    // Bad input: the envelope names the field, and nothing is saved.
    let config_path = sim.dir().join("config.toml");
    let before = std::fs::read_to_string(&config_path).unwrap();
    for (bad, field) in [
        (json!({"enabled": true}), "stratum.jd.server"),
        (
            json!({"enabled": true, "server": "stratum2+tcp://10.0.0.1:1", "template_provider": url}),
            "stratum.jd.server",
        ),
        (
            json!({"server": url, "template_provider": "stratum+tcp://x:1/k"}),
            "stratum.jd.template_provider",
        ),
    ] {
        let (status, body) = http(&sim, "POST", "/api/jd/config", Some(&token), Some(bad));
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["code"], "config_validation", "{body}");
        assert!(body.to_string().contains(field), "{body}");
    }
    let (status, body) = http(
        &sim,
        "POST",
        "/api/jd/config",
        Some(&token),
        Some(json!({"enabled": "yes"})),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), before);
    let (status, body) = http(&sim, "GET", "/api/jd/status", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"], "svcos.api.jd.status.v1");
    assert_eq!(body["enabled"], false);
    assert_eq!(body["sv2_enabled"], true);

    // The connection test reaches both roles (and fails the one with a wrong key).
    let (status, body) = http(
        &sim,
        "POST",
        "/api/jd/test-connection",
        Some(&token),
        Some(json!({"server": url, "template_provider": url})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"], "svcos.api.jd.test_connection.v1");
    assert_eq!(body["ok"], true, "{body}");
    assert_eq!(body["server"]["ok"], true);
    assert_eq!(body["template_provider"]["ok"], true);
    let impostor = format!(
        "stratum2+tcp://{}:{sv2_port}/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan",
        sim.bind()
    );
    let (status, body) = http(
        &sim,
        "POST",
        "/api/jd/test-connection",
        Some(&token),
        Some(json!({"server": impostor, "template_provider": url})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["server"]["ok"], false, "{body}");

    // The SV2 pool first in the list, then job declaration on.
    let (status, body) = http(
        &sim,
        "POST",
        "/api/pools",
        Some(&token),
        Some(json!([{"url": url, "user": "sim-jd", "password": "x"}])),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        &sim,
        "POST",
        "/api/jd/config",
        Some(&token),
        Some(json!({"enabled": true, "server": url, "template_provider": url})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"], "svcos.api.jd.config.v1");
    assert_eq!(body["config"]["enabled"], true);
    assert_eq!(body["config"]["server"], url.as_str());
    assert!(
        std::fs::read_to_string(&config_path)
            .unwrap()
            .contains("[stratum.jd]")
    );

    // The board mines declared jobs; the pool verifies shares on the declared template.
    let pool = TestPoolServiceClient::new(svcos_common::ipc::channel_with_timeout(
        sim.socket("test-pool"),
        Duration::from_secs(20),
    ));
    let jd = wait_for("shares accepted on declared jobs", || {
        let mut pool = pool.clone();
        async move {
            let s = pool
                .get_stats(tp::GetStatsRequest {})
                .await
                .ok()?
                .into_inner();
            s.jd.filter(|j| j.accepted >= 1)
        }
    })
    .await;
    assert!(jd.jobs_declared >= 1 && jd.custom_jobs_set >= 1, "{jd:?}");
    let body =
        wait_for("the status reporting declared-job shares", || {
            let (status, body) = http(&sim, "GET", "/api/jd/status", Some(&token), None);
            async move {
                (status == 200 && body["shares"]["accepted"].as_u64() >= Some(1)).then_some(body)
            }
        })
        .await;
    assert_eq!(body["enabled"], true);
    assert_eq!(body["connected"], true, "{body}");
    assert_eq!(body["template_source"], "jd", "{body}");
    assert_eq!(body["fallback_reason"], Value::Null, "{body}");
    assert_eq!(body["last_declared_job"]["tx_count"], 3, "{body}");
    assert!(
        body["last_declared_job"]["pool_job_id"].as_u64().is_some(),
        "{body}"
    );
}
