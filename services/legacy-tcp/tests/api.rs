//! Raw-socket tests of the cgminer API against fake hw-agent / stratum-agent / supervisor
//! gRPC servers on Unix sockets.

mod common;

use std::time::Duration;

use common::*;
use svcos_legacy_tcp::server::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Start fakes + server and wait until both snapshots have arrived.
async fn ready(allow: &[&str], limits: Limits) -> (tempfile::TempDir, Fakes, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let fakes = start_fakes(dir.path()).await;
    let (addr, _shutdown) = start_legacy(dir.path(), allow, limits).await;
    eventually(|| async {
        let v = cmd(addr, "summary").await;
        let st = cmd(addr, "stats").await;
        status(&v).0 == "S"
            && st["STATS"][1]["chain_acs3"]
                .as_str()
                .is_some_and(|s| s.contains('x'))
    })
    .await;
    (dir, fakes, addr)
}

#[tokio::test]
async fn every_read_command_answers_with_cgminer_fields() {
    let (_dir, fakes, addr) = ready(&[], Limits::default()).await;

    let v = cmd(addr, "version").await;
    assert_eq!(status(&v), ("S", 22, "svcOS versions"));
    assert_eq!(v["VERSION"][0]["Type"], "Antminer S9");
    assert_eq!(v["VERSION"][0]["Miner"], "svcOS 0.1.0");
    assert_eq!(v["VERSION"][0]["API"], "3.1");
    assert_eq!(v["STATUS"][0]["Description"], "svcOS 0.1.0");
    assert_eq!(v["id"], 1);

    let v = cmd(addr, "config").await;
    assert_eq!(status(&v).1, 33);
    assert_eq!(v["CONFIG"][0]["ASC Count"], 3);
    assert_eq!(v["CONFIG"][0]["Pool Count"], 2);

    let v = cmd(addr, "summary").await;
    assert_eq!(status(&v), ("S", 11, "Summary"));
    let s = &v["SUMMARY"][0];
    assert_eq!(s["Elapsed"], 600);
    assert_eq!(s["GHS 5s"], 13530.0);
    assert_eq!(s["MHS 5s"], 13_530_000.0);
    assert_eq!(s["Accepted"], 42);
    assert_eq!(s["Rejected"], 3);
    assert_eq!(s["Stale"], 1);
    assert_eq!(s["Hardware Errors"], 3);
    assert_eq!(s["Best Share"], 9000);
    assert_eq!(s["Difficulty Accepted"], 42.0 * 512.0);

    let v = cmd(addr, "pools").await;
    assert_eq!(status(&v), ("S", 7, "2 Pool(s)"));
    let p = &v["POOLS"];
    assert_eq!(p[0]["POOL"], 0);
    assert_eq!(p[0]["URL"], "stratum+tcp://pool0.example:3333");
    assert_eq!(p[0]["Status"], "Alive");
    assert_eq!(p[0]["Stratum Active"], true);
    assert_eq!(p[0]["Priority"], 0);
    assert_eq!(p[0]["Accepted"], 42);
    assert_eq!(p[0]["User"], "worker0");
    assert_eq!(p[0]["Get Failures"], 0);
    assert_eq!(p[1]["Status"], "Dead");
    assert_eq!(p[1]["Stratum Active"], false);

    let v = cmd(addr, "devs").await;
    assert_eq!(status(&v), ("S", 9, "3 ASC(s)"));
    assert_eq!(v["DEVS"][1]["MHS 5s"], 4_510_000.0);
    assert_eq!(v["DEVS"][2]["Hardware Errors"], 2);
    assert_eq!(v["DEVS"][0]["Status"], "Alive");
    let v = cmd(addr, "edevs").await;
    assert_eq!(v["DEVS"].as_array().unwrap().len(), 3);

    let v = cmd(addr, "devdetails").await;
    assert_eq!(status(&v).1, 69);
    assert_eq!(v["DEVDETAILS"][0]["Model"], "Antminer S9");
    assert_eq!(v["DEVDETAILS"][0]["Device Path"], "/dev/ttyS1");
    assert_eq!(v["DEVDETAILS"][2]["Chips"], 62);

    for command in ["stats", "estats"] {
        let v = cmd(addr, command).await;
        assert_eq!(status(&v).1, 70, "{command}");
        assert_eq!(v["STATS"][0]["Type"], "Antminer S9");
        let b = &v["STATS"][1];
        assert_eq!(b["Elapsed"], 600);
        assert_eq!(b["chain_rate1"], "4500.00");
        assert_eq!(b["chain_rate3"], "4520.00");
        assert_eq!(b["chain_acn1"], 63);
        assert_eq!(b["chain_acn3"], 62);
        let acs = b["chain_acs3"].as_str().unwrap();
        // inventory says chip 17 is missing: group 3, second position
        assert_eq!(acs.split(' ').nth(3), Some("oxoooooo"), "{acs}");
        assert_eq!(b["temp1"], 55);
        assert_eq!(b["temp2_1"], 70);
        assert_eq!(b["temp2_3"], 72);
        assert_eq!(b["fan_num"], 2);
        assert_eq!(b["fan1"], 4320);
        assert_eq!(b["fan2"], 4380);
        assert_eq!(b["miner_count"], 3);
        assert_eq!(b["total_rateideal"], 3.0 * 4520.0);
        assert_eq!(b["rate_unit"], "GH");
        assert_eq!(b["frequency"], "650");
    }

    let v = cmd(addr, "coin").await;
    assert_eq!(status(&v).1, 78);
    assert_eq!(v["COIN"][0]["Hash Method"], "sha256");
    let v = cmd(addr, "lcd").await;
    assert_eq!(status(&v).1, 125);
    assert_eq!(v["LCD"][0]["Pool"], "stratum+tcp://pool0.example:3333");
    let v = cmd(addr, "fans").await;
    assert_eq!(v["FANS"][1]["RPM"], 4380);
    let v = cmd(addr, "temps").await;
    assert_eq!(v["TEMPS"][0]["ID"], 1);
    assert_eq!(v["TEMPS"][2]["Chip"], 72.0);
    let v = json(addr, r#"{"command":"check","parameter":"summary"}"#).await;
    assert_eq!(v["CHECK"][0]["Exists"], "Y");
    assert_eq!(v["CHECK"][0]["Access"], "Y");

    // Values follow the live snapshot.
    let mut t = s9_telemetry(900);
    t.hashrate.as_mut().unwrap().ghs_5s = 12_000.0;
    fakes.telemetry.send_replace(t);
    eventually(|| async { cmd(addr, "summary").await["SUMMARY"][0]["Elapsed"] == 900 }).await;
    assert_eq!(cmd(addr, "summary").await["SUMMARY"][0]["GHS 5s"], 12_000.0);
    // The telemetry stream was opened without chips, and no per-request RPCs were made.
    let calls = fakes.calls.all();
    assert!(
        calls.contains(&"StreamTelemetry chips=false".to_string()),
        "{calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c == "GetTelemetry" || c == "GetPools"),
        "{calls:?}"
    );
}

#[tokio::test]
async fn join_form_answers_each_command_in_its_own_list() {
    let (_dir, fakes, addr) = ready(&["W:127.0.0.1"], Limits::default()).await;
    let v = cmd(addr, "summary+pools+stats+version+devs").await;
    assert_eq!(v["id"], 1);
    for key in ["summary", "pools", "stats", "version", "devs"] {
        assert_eq!(v[key][0]["STATUS"][0]["STATUS"], "S", "{key}: {v}");
        assert_eq!(v[key][0]["id"], 1);
    }
    assert_eq!(v["summary"][0]["SUMMARY"][0]["Accepted"], 42);
    assert_eq!(v["stats"][0]["STATS"][1]["chain_acn2"], 63);
    // Non-joinable commands are refused inside a join even for privileged clients,
    // unknown ones get "Invalid command", duplicates are answered once.
    let v = cmd(addr, "summary+switchpool+bogus+summary").await;
    assert_eq!(status(&v["switchpool"][0]).1, 45);
    assert_eq!(status(&v["bogus"][0]).1, 14);
    assert_eq!(
        v.as_object().unwrap().len(),
        4,
        "summary, switchpool, bogus, id"
    );
    assert!(
        !fakes
            .calls
            .all()
            .iter()
            .any(|c| c.starts_with("SwitchPool"))
    );
}

#[tokio::test]
async fn plain_text_form() {
    let (_dir, _fakes, addr) = ready(&[], Limits::default()).await;
    let out = raw(addr, b"summary").await;
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("STATUS=S,When="), "{text}");
    assert!(
        text.contains(",Code=11,Msg=Summary,Description=svcOS 0.1.0|SUMMARY,Elapsed=600,"),
        "{text}"
    );
    assert!(text.ends_with("|\0"), "{text:?}");

    let text = String::from_utf8(raw(addr, b"pools|\n").await).unwrap();
    assert!(
        text.contains("|POOL=0,URL=stratum+tcp://pool0.example:3333,Status=Alive,"),
        "{text}"
    );
    assert!(text.contains("|POOL=1,"), "{text}");

    let text = String::from_utf8(raw(addr, b"version+summary").await).unwrap();
    assert!(text.starts_with("CMD=version|STATUS=S,"), "{text}");
    assert!(text.contains("CMD=summary|STATUS=S,"), "{text}");

    let text = String::from_utf8(raw(addr, b"nonsense|1").await).unwrap();
    assert!(text.starts_with("STATUS=E,When="), "{text}");
    assert!(text.contains("Code=14,Msg=Invalid command"), "{text}");
}

#[tokio::test]
async fn privileged_commands_are_refused_without_w_access() {
    // 127.0.0.1 is listed read-only; only 10.9.9.9 may write.
    let (_dir, fakes, addr) = ready(&["127.0.0.1", "W:10.9.9.9"], Limits::default()).await;
    for (request, name) in [
        (r#"{"command":"switchpool","parameter":"1"}"#, "switchpool"),
        (r#"{"command":"enablepool","parameter":1}"#, "enablepool"),
        (
            r#"{"command":"disablepool","parameter":"1"}"#,
            "disablepool",
        ),
        (
            r#"{"command":"addpool","parameter":"stratum+tcp://x:1,u,p"}"#,
            "addpool",
        ),
        (r#"{"command":"removepool","parameter":"1"}"#, "removepool"),
        (
            r#"{"command":"poolpriority","parameter":"1,0"}"#,
            "poolpriority",
        ),
        (r#"{"command":"restart"}"#, "restart"),
        (r#"{"command":"quit"}"#, "quit"),
        (r#"{"command":"ascset","parameter":"0,freq,600"}"#, "ascset"),
        (r#"{"command":"privileged"}"#, "privileged"),
        (r#"{"command":"debug","parameter":"verbose"}"#, "debug"),
    ] {
        let v = json(addr, request).await;
        assert_eq!(
            status(&v),
            (
                "E",
                45,
                format!("Access denied to '{name}' command").as_str()
            ),
            "{request}"
        );
    }
    let v = json(addr, r#"{"command":"check","parameter":"switchpool"}"#).await;
    assert_eq!(v["CHECK"][0]["Access"], "N");
    let calls = fakes.calls.all();
    assert!(
        calls
            .iter()
            .all(|c| c.starts_with("Stream") || c == "GetInventory"),
        "nothing but snapshots reached the peers: {calls:?}"
    );
}

/// Connect from a chosen loopback source address (127.0.0.0/8 is all local on Linux).
async fn json_from(source: &str, addr: std::net::SocketAddr, request: &str) -> serde_json::Value {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    serde_json::from_slice(&out[..out.len() - 1]).unwrap()
}

#[tokio::test]
async fn allowlisted_privileged_commands_reach_the_services() {
    let (_dir, fakes, addr) = ready(&["W:127.0.0.0/30"], Limits::default()).await;

    let v = json(addr, r#"{"command":"switchpool","parameter":"1"}"#).await;
    assert_eq!(
        status(&v),
        (
            "S",
            27,
            "Switching to pool 1:'stratum+tcp://pool1.example:3333'"
        )
    );
    let v = json(addr, r#"{"command":"disablepool","parameter":1}"#).await;
    assert_eq!(status(&v).1, 48);
    let v = json(addr, r#"{"command":"enablepool","parameter":"0"}"#).await;
    assert_eq!(
        status(&v),
        (
            "I",
            49,
            "Pool 0:'stratum+tcp://pool0.example:3333' already enabled"
        )
    );
    let v = json(addr, r#"{"command":"poolpriority","parameter":"1"}"#).await;
    assert_eq!(status(&v), ("S", 73, "Changed pool priorities"));
    let v = json(addr, r#"{"command":"removepool","parameter":"0"}"#).await;
    assert_eq!(status(&v).1, 67, "the active pool cannot be removed");
    let v = json(addr, r#"{"command":"removepool","parameter":"1"}"#).await;
    assert_eq!(status(&v).1, 68);
    let v = json(
        addr,
        r#"{"command":"addpool","parameter":"stratum+tcp://new.example:3333,w\\,9,s3cret"}"#,
    )
    .await;
    assert_eq!(
        status(&v),
        ("S", 55, "Added pool 2:'stratum+tcp://new.example:3333'")
    );
    assert!(
        !v.to_string().contains("s3cret"),
        "the password is never echoed"
    );
    let v = json(
        addr,
        r#"{"command":"addpool","parameter":"http://bad,w,p"}"#,
    )
    .await;
    let (sev, code, msg) = status(&v);
    assert_eq!((sev, code), ("E", 55));
    assert!(msg.contains("stratum-agent refused"), "{msg}");
    let v = json(addr, r#"{"command":"restart"}"#).await;
    assert_eq!(status(&v).0, "S");
    let v = json(addr, r#"{"command":"ascset","parameter":"1,freq,600"}"#).await;
    assert_eq!(status(&v), ("S", 119, "ASC 1 set OK: freq 600 MHz"));
    let v = json(addr, r#"{"command":"ascdisable","parameter":"2"}"#).await;
    assert_eq!(status(&v).1, 111);
    let v = json(addr, r#"{"command":"privileged"}"#).await;
    assert_eq!(status(&v), ("S", 46, "Privileged access OK"));
    // From an address outside the W: network the same command is refused.
    let v = json_from(
        "127.0.0.9",
        addr,
        r#"{"command":"switchpool","parameter":"0"}"#,
    )
    .await;
    assert_eq!(status(&v).1, 45);

    let calls: Vec<String> = fakes
        .calls
        .all()
        .into_iter()
        .filter(|c| !c.starts_with("Stream") && c != "GetInventory")
        .collect();
    assert_eq!(
        calls,
        [
            "SwitchPool 1",
            "SetPoolEnabled 1 false",
            "SetPoolPriority [1, 0]",
            "RemovePool 1",
            "AddPool stratum+tcp://new.example:3333 w,9 s3cret",
            "Restart stratum-agent",
            "Restart hw-agent",
            "SetFrequency chain=Some(1) mhz=600",
            "SetChainEnabled chain=2 enabled=false",
        ]
    );
}

#[tokio::test]
async fn malformed_truncated_and_oversized_input_gets_status_e() {
    let limits = Limits {
        read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (_dir, _fakes, addr) = ready(&[], limits).await;

    for (request, want) in [
        (&br#"{"command":"summary""#[..], (23, "Invalid JSON")), // truncated, client waits
        (b"{]", (23, "Invalid JSON")),
        (b"{\"command\":\"summary\"\xff}", (23, "Invalid JSON")),
        (br#"{"parameter":"1"}"#, (24, "Missing JSON 'command'")),
        (br#"{"command":5}"#, (14, "Invalid command")),
        (br#"{"command":"SUMMARY"}"#, (14, "Invalid command")),
        (br#"{"command":""}"#, (14, "Invalid command")),
    ] {
        let out = raw(addr, request).await;
        assert_eq!(out.last(), Some(&0));
        let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
        let (sev, code, msg) = status(&v);
        assert_eq!(
            (sev, code, msg),
            ("E", want.0, want.1),
            "{:?}",
            String::from_utf8_lossy(request)
        );
    }

    // Truncated JSON, then the client closes its write side.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(br#"{"command":"sum"#).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
    assert_eq!(status(&v).1, 23);

    // Oversized: 9 KiB of an unterminated JSON string, and valid JSON of 9 KiB, are refused
    // for their size, and the reply says so.
    let too_long = "Request too long: at most 8192 bytes";
    let mut big = br#"{"command":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 9 * 1024));
    let out = raw(addr, &big).await;
    let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
    assert_eq!(status(&v), ("E", 23, too_long));
    let valid = format!(
        r#"{{"command":"summary","parameter":"{}"}}"#,
        "a".repeat(9 * 1024)
    );
    let out = raw(addr, valid.as_bytes()).await;
    let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
    assert_eq!(status(&v), ("E", 23, too_long));

    // Trailing bytes after the JSON value: cgminer's parser refuses the request.
    for request in [
        &br#"{"command":"summary"} garbage"#[..],
        br#"{"command":"summary"}{"command":"pools"}"#,
    ] {
        let out = raw(addr, request).await;
        let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
        assert_eq!(
            status(&v),
            ("E", 23, "Invalid JSON"),
            "{:?}",
            String::from_utf8_lossy(request)
        );
    }
    // Blanks after it are fine.
    let v = json(addr, "{\"command\":\"summary\"}\r\n").await;
    assert_eq!(status(&v).0, "S");

    // Nothing but blanks, then a half-close: an error reply, not silence.
    for request in [&b""[..], b"   ", b"\n", b"\0\0", b" \t\r\n\0"] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        s.shutdown().await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("server closes the connection after the reply")
            .unwrap();
        assert_eq!(out.last(), Some(&0), "{request:?}");
        let v: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
        assert_eq!(
            status(&v),
            ("E", 14, "Invalid command: empty request"),
            "{request:?}"
        );
    }

    // Binary garbage in plain text.
    let out = raw(addr, b"\x01\x02\xfe\xff|\x00").await;
    assert!(
        String::from_utf8_lossy(&out).contains("STATUS=E"),
        "{out:?}"
    );

    // A client that connects and leaves: nothing to answer, server unaffected.
    drop(TcpStream::connect(addr).await.unwrap());
    // JSON followed by a newline in a separate segment still gets its reply.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(br#"{"command":"version"}"#).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = s.write_all(b"\n").await;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(out.ends_with(b"\0") && out.starts_with(b"{\"STATUS\""));
    assert_eq!(status(&cmd(addr, "summary").await).0, "S");
}

#[tokio::test]
async fn silent_clients_do_not_block_others() {
    let limits = Limits {
        max_clients: 16,
        max_clients_per_peer: 16,
        read_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let (_dir, _fakes, addr) = ready(&[], limits).await;
    // Ten connections that never send anything, each holding a slot for up to 60 s.
    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // ...and one sending a byte at a time.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"{\"comm").await.unwrap();
    // Others are still answered (raw() gives up after 10 s, far below the 60 s read timeout).
    for _ in 0..20 {
        assert_eq!(status(&cmd(addr, "summary").await).0, "S");
    }
    drop(idle);
}

#[tokio::test]
async fn peers_down_answer_at_once_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing is running yet.
    let (addr, _shutdown) = start_legacy(dir.path(), &["W:127.0.0.1"], Limits::default()).await;
    let v = cmd(addr, "version").await;
    assert_eq!(status(&v).0, "S");
    assert_eq!(
        v["VERSION"][0]["Type"], "Antminer S9",
        "model from the board preset"
    );
    let v = cmd(addr, "summary").await;
    let (sev, code, msg) = status(&v);
    assert_eq!((sev, code), ("W", 11));
    assert!(
        msg.contains("hw-agent and stratum-agent unavailable"),
        "{msg}"
    );
    let v = cmd(addr, "pools").await;
    assert_eq!(status(&v).0, "W");
    assert_eq!(v["POOLS"].as_array().unwrap().len(), 0);
    let v = cmd(addr, "stats").await;
    assert_eq!(status(&v).0, "W");
    assert_eq!(v["STATS"][0]["Type"], "Antminer S9");
    let v = json(addr, r#"{"command":"switchpool","parameter":"1"}"#).await;
    let (sev, _, msg) = status(&v);
    assert_eq!(sev, "W");
    assert!(msg.contains("stratum-agent unavailable"), "{msg}");
    let v = json(addr, r#"{"command":"restart"}"#).await;
    assert_eq!(status(&v).0, "W", "supervisor socket missing");

    // The peers come up: replies become complete.
    let fakes = start_fakes(dir.path()).await;
    eventually(|| async { status(&cmd(addr, "summary").await).0 == "S" }).await;

    // hw-agent goes away: pool counters stay, hardware values go, STATUS says so (I: the
    // reply still carries live pool values; W where nothing live is left).
    fakes.hw_stop.trigger();
    eventually(|| async { status(&cmd(addr, "summary").await).0 == "I" }).await;
    assert_eq!(status(&cmd(addr, "stats").await).0, "W");
    assert_eq!(status(&cmd(addr, "devs").await).0, "W");
    let v = cmd(addr, "summary").await;
    assert!(status(&v).2.contains("hw-agent unavailable"), "{v}");
    assert_eq!(v["SUMMARY"][0]["Accepted"], 42);
    assert!(v["SUMMARY"][0].get("GHS 5s").is_none());
    assert_eq!(status(&cmd(addr, "pools").await).0, "S");

    // ...and comes back.
    let (_tx, rx) = tokio::sync::watch::channel(s9_telemetry(1200));
    std::fs::remove_file(sock(dir.path(), "hw-agent")).ok();
    let _stop = start_hw(dir.path(), rx, fakes.calls.clone()).await;
    eventually(|| async { cmd(addr, "summary").await["SUMMARY"][0]["Elapsed"] == 1200 }).await;
}

#[tokio::test]
async fn max_clients_bounds_concurrent_connections() {
    let limits = Limits {
        max_clients: 1,
        read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (_dir, _fakes, addr) = ready(&[], limits).await;
    // A silent client takes the only slot...
    let mut silent = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...so the same client's next connection is refused (it holds its share of the one
    // slot; closing its own would let a flood churn without end)...
    let refused = cmd(addr, "summary").await;
    assert_eq!(status(&refused).0, "E");
    assert!(
        status(&refused).2.contains("Too many connections"),
        "{refused}"
    );
    // ...and served once the server has given up on the silent one.
    eventually(|| async { status(&cmd(addr, "summary").await).0 == "S" }).await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut rest))
        .await
        .expect("the silent client was disconnected")
        .unwrap_or(0);
    assert_eq!(n, 0, "no reply for a client that sent nothing");
}

#[tokio::test]
async fn one_address_holding_connections_cannot_take_every_slot() {
    let limits = Limits {
        max_clients: 16,
        max_clients_per_peer: 4,
        read_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let (_dir, _fakes, addr) = ready(&[], limits).await;
    // 127.0.0.2 opens 40 silent connections: four are held, the rest are told why and closed.
    let mut flood = Vec::new();
    for _ in 0..40 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        flood.push(socket.connect(addr).await.unwrap());
    }
    let mut refused = 0;
    for s in &mut flood {
        let mut reply = Vec::new();
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut reply)).await
        {
            let reply: serde_json::Value =
                serde_json::from_slice(reply.strip_suffix(&[0]).unwrap_or(&reply))
                    .unwrap_or_else(|e| panic!("a refusal is cgminer JSON ({e}): {reply:?}"));
            assert_eq!(reply["STATUS"][0]["STATUS"], "E", "{reply}");
            assert_eq!(reply["STATUS"][0]["Code"], 45, "{reply}");
            assert!(
                reply["STATUS"][0]["Msg"]
                    .as_str()
                    .unwrap()
                    .contains("Too many connections"),
                "{reply}"
            );
            refused += 1;
        }
    }
    assert_eq!(
        refused, 36,
        "beyond its four, every connection of the flooding address was refused with a reason"
    );
    // Everyone else is answered at once (raw() gives up after 10 s, far below the 60 s hold).
    for _ in 0..10 {
        assert_eq!(status(&cmd(addr, "summary").await).0, "S");
    }
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seventeen_flooding_addresses_cannot_keep_the_owner_waiting() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The defaults: 64 connections, 8 per client, 2 s to send a request.
    let (_dir, _fakes, addr) = ready(&[], Limits::default()).await;
    // 17 × 8 = 136 silent connections, each reopened as soon as the server closes it.
    let stop = svcos_common::Shutdown::new();
    let closed = Arc::new(AtomicUsize::new(0));
    let mut flood = tokio::task::JoinSet::new();
    for i in 2..=18 {
        for _ in 0..8 {
            let (stop, closed) = (stop.clone(), closed.clone());
            flood.spawn(async move {
                loop {
                    let held = async {
                        let socket = TcpSocket::new_v4().unwrap();
                        socket
                            .bind(format!("127.0.0.{i}:0").parse().unwrap())
                            .unwrap();
                        if let Ok(mut s) = socket.connect(addr).await {
                            let mut sink = Vec::new();
                            let _ = s.read_to_end(&mut sink).await;
                            closed.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    };
                    tokio::select! {
                        () = held => {}
                        _ = stop.wait() => return,
                    }
                }
            });
        }
    }
    // At the cap once it starts closing flood connections.
    tokio::time::timeout(Duration::from_secs(3), async {
        while closed.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the flood reaches the cap");
    // The owner is answered at once, not after a silent client's 2 s read timeout.
    for _ in 0..20 {
        let started = std::time::Instant::now();
        assert_eq!(status(&cmd(addr, "summary").await).0, "S");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    stop.trigger();
    while flood.join_next().await.is_some() {}
}
