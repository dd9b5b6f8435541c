use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

#[test]
fn ranges_are_bounded_and_lan_only() {
    assert_eq!(expand_range("127.0.0.0/29").unwrap().len(), 8);
    assert_eq!(expand_range("192.168.1.10-192.168.1.12").unwrap().len(), 3);
    assert_eq!(
        expand_range(" 10.0.0.7 ").unwrap(),
        vec![Ipv4Addr::new(10, 0, 0, 7)]
    );
    assert_eq!(expand_range("10.0.0.0/22").unwrap().len(), MAX_HOSTS);
    assert_eq!(expand_range("10.0.0.5/32").unwrap().len(), 1);
    assert!(expand_range("10.0.0.0/21").unwrap_err().contains("at most"));
    assert!(expand_range("0.0.0.0/0").unwrap_err().contains("at most"));
    assert!(expand_range("8.8.8.0/30").unwrap_err().contains("LAN"));
    assert!(expand_range("10.0.0.9-10.0.0.1").is_err());
    assert!(expand_range("10.0.0.0/33").is_err());
    // Host bits in a CIDR are ignored; both ends of the block are scanned.
    let block = expand_range("192.168.1.77/30").unwrap();
    assert_eq!(block.first(), Some(&Ipv4Addr::new(192, 168, 1, 76)));
    assert_eq!(block.last(), Some(&Ipv4Addr::new(192, 168, 1, 79)));
    assert!(
        expand_range("10.0.0.0/x")
            .unwrap_err()
            .contains("prefix length")
    );
    assert!(
        expand_range("10.0.0/24")
            .unwrap_err()
            .contains("IPv4 address")
    );
    assert!(expand_range("10.0.0.0/x").is_err());
    assert!(expand_range("10.0.0.1-nonsense").is_err());
    assert!(expand_range("nonsense").is_err());
}

#[test]
fn plan_defaults_and_bounds() {
    let p = Plan::new(" 127.0.0.1 ", None, None, None).unwrap();
    assert_eq!(p.range, "127.0.0.1");
    assert_eq!(p.port, DEFAULT_PORT);
    assert_eq!(p.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
    assert_eq!(p.concurrency, MAX_CONCURRENCY);
    for (plan, field) in [
        (Plan::new("8.8.8.8", None, None, None), "range"),
        (Plan::new("127.0.0.1", Some(0), None, None), "port"),
        (Plan::new("127.0.0.1", None, Some(49), None), "timeout_ms"),
        (Plan::new("127.0.0.1", None, Some(5001), None), "timeout_ms"),
        (Plan::new("127.0.0.1", None, None, Some(0)), "concurrency"),
        (
            Plan::new("127.0.0.1", None, None, Some(MAX_CONCURRENCY + 1)),
            "concurrency",
        ),
    ] {
        assert_eq!(plan.unwrap_err().field, field);
    }
    assert!(Plan::new("127.0.0.1", Some(4029), Some(5000), Some(1)).is_ok());
}

#[test]
fn identification() {
    let v = json!({"VERSION": [{"svcOS": "0.1.0", "API": "3.1", "Type": "Antminer S9"}]});
    let id = identify(&v);
    assert_eq!(
        (
            id.firmware.as_str(),
            id.firmware_version.as_deref(),
            id.api_version.as_deref()
        ),
        ("svcOS", Some("0.1.0"), Some("3.1"))
    );
    assert_eq!(
        (id.model.as_deref(), id.make.as_deref()),
        (Some("Antminer S9"), Some("Bitmain"))
    );
    let v = json!({"VERSION": [{"BMMiner": "2.0.0", "API": "3.1", "Type": "Antminer S19j Pro"}]});
    assert_eq!(identify(&v).firmware, "bmminer (Bitmain stock)");
    // A number member is shown as text; `Model` stands in for `Type`.
    let v = json!({"VERSION": [{"LUXminer": 2024, "Model": "WhatsMiner M30S"}]});
    let id = identify(&v);
    assert_eq!(id.firmware, "LuxOS");
    assert_eq!(id.firmware_version.as_deref(), Some("2024"));
    assert_eq!(id.make.as_deref(), Some("MicroBT"));
    let id = identify(&json!({"VERSION": [{"Type": ""}]}));
    assert_eq!(id.firmware, "unknown cgminer-compatible");
    assert_eq!((id.model, id.make), (None, None));
}

fn replies() -> (Value, Value, Value) {
    (
        json!({"VERSION": [{"CGMiner": "4.11", "API": "3.7", "Type": "Avalon 1246"}]}),
        json!({"SUMMARY": [{"MHS 5s": 90_123.456, "MHS av": "88000", "Elapsed": 3600,
                            "Accepted": "12", "Rejected": 1}]}),
        json!({"POOLS": [
            {"URL": "stratum+tcp://a:3333", "User": "w1", "Status": "Alive",
             "Stratum Active": true, "Accepted": 10, "Rejected": "1"},
            {"URL": "stratum+tcp://b:3333", "User": "w1", "Status": "Alive",
             "Stratum Active": false, "Accepted": 2, "Rejected": 0}]}),
    )
}

#[test]
fn miner_from_replies_reads_strings_and_scales_mhs() {
    let (version, summary, pools) = replies();
    let ip = Ipv4Addr::new(10, 0, 0, 2);
    let m = miner_from_replies(ip, 4028, &version, Some(&summary), Some(&pools));
    assert_eq!(m.ip, "10.0.0.2");
    assert_eq!((m.firmware.as_str(), m.svcos), ("cgminer", false));
    assert_eq!(m.make.as_deref(), Some("Canaan"));
    assert_eq!(m.hashrate_ghs, Some(90.12));
    assert_eq!(m.hashrate_avg_ghs, Some(88.0));
    assert_eq!(
        (m.uptime_s, m.accepted, m.rejected),
        (Some(3600), Some(12), Some(1))
    );
    assert_eq!(m.pools.len(), 2);
    assert!(m.pools[0].active && !m.pools[1].active);
    assert_eq!((m.pools[0].accepted, m.pools[0].rejected), (10, 1));
    // Without summary and pools the miner is still listed, with what `version` told.
    let bare = miner_from_replies(ip, 4028, &version, None, None);
    assert_eq!((bare.hashrate_ghs, bare.uptime_s), (None, None));
    assert!(bare.pools.is_empty());
}

#[test]
fn pool_totals() {
    let (version, summary, pools) = replies();
    let a = miner_from_replies(
        Ipv4Addr::new(10, 0, 0, 2),
        4028,
        &version,
        Some(&summary),
        Some(&pools),
    );
    let mut b = a.clone();
    b.ip = "10.0.0.3".into();
    b.hashrate_ghs = Some(10.004);
    b.pools[0].active = false;
    b.pools[1].active = true;
    let scan = Scan {
        range: "10.0.0.0/30".into(),
        port: 4028,
        started_ms: 1,
        finished_ms: 2,
        scanned: 4,
        non_miner_listeners: 0,
        miners: vec![a, b],
    };
    let s = aggregate(&scan);
    assert_eq!(
        (s.miners, s.total_hashrate_ghs, s.scan_finished_ms),
        (2, 100.12, 2)
    );
    let urls: Vec<&str> = s.pools.iter().map(|p| p.url.as_str()).collect();
    assert_eq!(urls, ["stratum+tcp://a:3333", "stratum+tcp://b:3333"]);
    assert_eq!(
        (s.pools[0].miners_configured, s.pools[0].miners_active),
        (2, 1)
    );
    assert_eq!(
        (s.pools[0].hashrate_ghs, s.pools[1].hashrate_ghs),
        (90.12, 10.0)
    );
    assert_eq!((s.pools[0].accepted, s.pools[0].rejected), (20, 2));
}

/// A cgminer API on a loopback port: one command per connection, NUL-terminated replies.
async fn fake_cgminer(reply: fn(&str) -> Value) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req: Value = serde_json::from_slice(&buf[..n]).unwrap_or(Value::Null);
                let mut out = reply(req["command"].as_str().unwrap_or_default()).to_string();
                out.push('\0');
                let _ = s.write_all(out.as_bytes()).await;
            });
        }
    });
    addr
}

const T: Duration = Duration::from_secs(10);

#[tokio::test]
async fn probe_tells_miners_listeners_and_silence_apart() {
    let miner = fake_cgminer(|cmd| {
        let (v, s, p) = replies();
        match cmd {
            "version" => v,
            "summary" => s,
            _ => p,
        }
    })
    .await;
    let ip = Ipv4Addr::new(127, 0, 0, 1);
    let Probe::Miner(m) = probe(ip, miner.port(), T).await else {
        panic!("not found as a miner");
    };
    assert_eq!((m.firmware.as_str(), m.pools.len()), ("cgminer", 2));

    // JSON without VERSION, and a listener that answers with something else.
    let other = fake_cgminer(|_| json!({"hello": 1})).await;
    assert_eq!(probe(ip, other.port(), T).await, Probe::Listener);
    let text = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let text_port = text.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = text.accept().await {
            let _ = s.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n").await;
        }
    });
    assert_eq!(probe(ip, text_port, T).await, Probe::Listener);

    // A closed port is silence, not a listener.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    assert_eq!(probe(ip, closed_port, T).await, Probe::Silent);
}

#[tokio::test]
async fn a_listener_that_never_answers_is_silence_after_the_deadline() {
    let (port, held) = mute_listener().await;
    let ip = Ipv4Addr::new(127, 0, 0, 1);
    let r = cgminer_command((ip, port).into(), "version", Duration::from_millis(100)).await;
    assert!(matches!(r, Err(ProbeError::Timeout)), "{r:?}");
    assert_eq!(
        probe(ip, port, Duration::from_millis(100)).await,
        Probe::Silent
    );
    held.abort();
}

/// A listener that accepts and never answers (holds a probe for its whole deadline).
async fn mute_listener() -> (u16, tokio::task::JoinHandle<()>) {
    let mute = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = mute.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = mute.accept().await {
            open.push(s);
        }
    });
    (port, held)
}

#[tokio::test]
async fn discover_keeps_and_saves_the_scan() {
    let miner = fake_cgminer(|cmd| {
        let (v, s, p) = replies();
        match cmd {
            "version" => v,
            "summary" => s,
            _ => p,
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("fleet-scan.json");
    let fleet = Fleet::open(&path);
    assert_eq!(fleet.last(), None);
    let plan = Plan::new(
        "127.0.0.1-127.0.0.2",
        Some(miner.port()),
        Some(5000),
        Some(2),
    )
    .unwrap();
    let scan = fleet.discover(&plan, &|| 42).await.unwrap();
    assert_eq!(
        (scan.scanned, scan.started_ms, scan.finished_ms),
        (2, 42, 42)
    );
    // 127.0.0.2 has no listener on that port.
    assert_eq!(scan.miners.len(), 1);
    assert_eq!(scan.miners[0].ip, "127.0.0.1");
    assert_eq!(fleet.last().as_ref(), Some(&scan));
    // Kept across a restart.
    assert_eq!(Fleet::open(&path).last(), Some(scan));
}

#[tokio::test]
async fn one_discovery_at_a_time() {
    let (port, held) = mute_listener().await;
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::open(&dir.path().join("fleet-scan.json"));
    // The first scan waits out its 2 s deadline on the mute listener; the second starts meanwhile.
    let plan = Plan::new("127.0.0.1", Some(port), Some(2000), None).unwrap();
    let (first, second) = tokio::join!(fleet.discover(&plan, &|| 0), async {
        tokio::task::yield_now().await;
        fleet.discover(&plan, &|| 0).await
    });
    assert_eq!(second, Err(Busy));
    let first = first.unwrap();
    assert_eq!((first.miners.len(), first.non_miner_listeners), (0, 0));
    held.abort();
}
