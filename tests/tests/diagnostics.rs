//! Diagnostics and debug surfaces end to end: the real `svcos sim` stack, faults injected into
//! the simulated board through hw-sim's gRPC socket, everything else through the REST API.
//!
//! One stack for the whole scenario (starting one costs more than every check together):
//! hash report (complete and cancelled), I2C scan, chip health with a dead and a weak chip,
//! board health with a removed sensor, results surviving an hw-agent restart, register reads
//! and writes over the UART, the debug log and log backup, and the mode/confirm gating.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svcos_e2e::{Sim, SimOptions, WAIT};
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::{ChainState, GetTelemetryRequest};
use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use svcos_proto::hwsim::v1::{ClearFaultsRequest, InjectFaultRequest};

const PASSWORD: &str = "diagnostics e2e password";

/// A small board: few chips, so each gets many nonces per second of the sim's hash budget.
const PATCH: &str = r#"
[system]
mode = "hacker"

[hardware]
chains = 2
chips_per_chain = 8
"#;

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`, so the body ends at EOF).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if body.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!(
        "Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    ));
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "this client reads only sized bodies"
    );
    Reply {
        status,
        content_type,
        body: raw[split + 4..].to_vec(),
    }
}

struct Api {
    addr: SocketAddr,
    token: String,
}

impl Api {
    fn get(&self, path: &str) -> Reply {
        http(self.addr, "GET", path, Some(&self.token), None)
    }
    fn post(&self, path: &str, body: Value) -> Reply {
        http(self.addr, "POST", path, Some(&self.token), Some(&body))
    }
    fn get_ok(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(
            r.status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json()
    }

    /// Start a run and wait until it is no longer running; returns its final status.
    fn run(&self, kind: &str, duration_s: u32) -> Value {
        let r = self.post(
            &format!("/api/diagnostics/{kind}/start"),
            json!({"duration_s": duration_s}),
        );
        assert_eq!(
            r.status,
            202,
            "{kind} start: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.json()["state"], "running");
        self.wait_run(kind)
    }

    fn wait_run(&self, kind: &str) -> Value {
        let deadline = Instant::now() + WAIT * 3;
        loop {
            let s = self.get_ok(&format!("/api/diagnostics/{kind}/status"));
            if s["state"] != "running" {
                return s;
            }
            assert!(Instant::now() < deadline, "{kind} still running: {s}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn login(addr: SocketAddr) -> String {
    http(
        addr,
        "POST",
        "/api/auth/setup",
        None,
        Some(&json!({"password": PASSWORD})),
    );
    let r = http(
        addr,
        "POST",
        "/api/auth/session",
        None,
        Some(&json!({"password": PASSWORD})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    v["token"]
        .as_str()
        .or(v["access_token"].as_str())
        .expect("token")
        .to_string()
}

fn fault(sim: &Sim, rt: &tokio::runtime::Runtime, req: InjectFaultRequest) {
    let mut c = HwSimServiceClient::new(svcos_common::ipc::channel_at(sim.socket("hw-sim")));
    rt.block_on(c.inject_fault(req)).expect("inject fault");
}

fn clear_faults(sim: &Sim, rt: &tokio::runtime::Runtime) {
    let mut c = HwSimServiceClient::new(svcos_common::ipc::channel_at(sim.socket("hw-sim")));
    rt.block_on(c.clear_faults(ClearFaultsRequest {}))
        .expect("clear faults");
}

/// Wait until both chains mine with all their chips.
fn wait_mining(sim: &Sim, rt: &tokio::runtime::Runtime) {
    let mut c = HwAgentServiceClient::new(svcos_common::ipc::channel_at(sim.socket("hw-agent")));
    let deadline = Instant::now() + WAIT * 2;
    loop {
        if let Ok(t) = rt.block_on(c.get_telemetry(GetTelemetryRequest {
            include_chips: false,
        })) && let Some(t) = t.into_inner().telemetry
            && t.chains.len() == 2
            && t.chains.iter().all(|ch| {
                ch.state == ChainState::Mining as i32 && ch.chips_detected == 8 && ch.nonces > 0
            })
        {
            return;
        }
        assert!(Instant::now() < deadline, "never mining");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn chip(report: &Value, chain: u64, chip: u64) -> &Value {
    report["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chain_id"] == chain)
        .and_then(|c| {
            c["chips"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["chip"] == chip)
        })
        .unwrap_or_else(|| panic!("no chip {chain}/{chip} in {report}"))
}

#[test]
fn diagnostics_and_debug_end_to_end() {
    let mut sim = Sim::start(SimOptions {
        config_patch: Some(PATCH.into()),
        ..Default::default()
    })
    .expect("sim");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Lazy gRPC channels spawn their connection task on the current runtime.
    let _rt_guard = rt.enter();
    let api = Api {
        addr: sim.api_addr(),
        token: login(sim.api_addr()),
    };
    wait_mining(&sim, &rt);
    // Let the chips settle a little so the 1-minute telemetry window has data.
    std::thread::sleep(Duration::from_secs(10));

    // The state machine comes from hw-agent's enum.
    let m = api.get_ok("/api/diagnostics/state_machine");
    assert_eq!(m["initial"], "idle");
    assert!(
        m["transitions"]
            .as_array()
            .unwrap()
            .contains(&json!({"from": "running", "event": "cancel", "to": "cancelled"}))
    );
    // Nothing finished yet: result is a 404 envelope.
    let r = api.get("/api/diagnostics/chip-health/result");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_string());

    // Hash report: totals agree with the telemetry's own hashrate.
    let s = api.run("hashreport", 15);
    assert_eq!(s["state"], "completed", "{s}");
    let res = api.get_ok("/api/diagnostics/hashreport/result");
    let total = &res["report"]["total"];
    let measured = total["measured_ghs"].as_f64().unwrap();
    let telemetry = total["telemetry_ghs_1m"].as_f64().unwrap();
    assert!(measured > 0.0, "{res}");
    assert!(
        (measured - telemetry).abs() <= 0.3 * telemetry,
        "hash report {measured} GH/s vs telemetry {telemetry} GH/s"
    );
    assert_eq!(res["report"]["chains"].as_array().unwrap().len(), 2);

    // Cancel mid-run.
    let r = api.post(
        "/api/diagnostics/hashreport/start",
        json!({"duration_s": 600}),
    );
    assert_eq!(r.status, 202);
    let again = api.post("/api/diagnostics/hashreport/start", json!({}));
    assert_eq!(again.status, 409, "one run per kind");
    std::thread::sleep(Duration::from_secs(2));
    let c = api.post("/api/diagnostics/hashreport/cancel", json!({}));
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(c.json()["state"], "cancelled");
    assert_eq!(
        api.get_ok("/api/diagnostics/hashreport/status")["state"],
        "cancelled"
    );
    assert_eq!(
        api.post("/api/diagnostics/hashreport/cancel", json!({}))
            .status,
        409
    );

    // I2C scan: exactly the sim's devices (PSU, a board and a chip sensor and a PIC per chain).
    let scan = api.get_ok("/api/diagnostics/troubleshoot/i2c-scan");
    let present: Vec<u64> = scan["present"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["address"].as_u64().unwrap())
        .collect();
    assert_eq!(
        present,
        vec![0x10, 0x48, 0x49, 0x4c, 0x4d, 0x50, 0x51],
        "{scan}"
    );
    assert_eq!(scan["present"][5]["expected"], "chain0-pic", "{scan}");
    assert_eq!(scan["missing"], json!([]));

    // Chip health: chain 0 chip 3 dead, chain 1 chip 5 weak, everything else ok.
    fault(
        &sim,
        &rt,
        InjectFaultRequest {
            kind: "dead_chip".into(),
            chain_id: 0,
            chip: 3,
            ..Default::default()
        },
    );
    fault(
        &sim,
        &rt,
        InjectFaultRequest {
            kind: "weak_chip".into(),
            chain_id: 1,
            chip: 5,
            value: 0.5,
            ..Default::default()
        },
    );
    let s = api.run("chip-health", 20);
    assert_eq!(s["state"], "completed", "{s}");
    let res = api.get_ok("/api/diagnostics/chip-health/result");
    let report = &res["report"];
    assert_eq!(chip(report, 0, 3)["classification"], "dead", "{report}");
    assert_eq!(chip(report, 0, 3)["register_answer"], Value::Null);
    assert_eq!(chip(report, 1, 5)["classification"], "weak", "{report}");
    assert!(chip(report, 1, 5)["hw_errors"].as_u64().unwrap() > 0);
    for c in 0..2u64 {
        for i in 0..8u64 {
            if (c, i) != (0, 3) && (c, i) != (1, 5) {
                assert_eq!(
                    chip(report, c, i)["classification"],
                    "ok",
                    "{c}/{i}: {report}"
                );
            }
        }
    }
    assert_eq!(res["verdict"], "fail");
    let md = api.get("/api/diagnostics/chip-health/report");
    assert_eq!(md.status, 200);
    assert!(
        md.content_type.starts_with("text/markdown"),
        "{}",
        md.content_type
    );
    assert!(String::from_utf8_lossy(&md.body).contains("| 3 |"));
    assert_eq!(
        api.get_ok("/api/diagnostics/chip-health/report?format=json")["report"]["schema"],
        "svcos.hwagent.diag.chip-health.v1"
    );
    clear_faults(&sim, &rt);

    // Board health: the chain-0 board sensor removed from the bus.
    fault(
        &sim,
        &rt,
        InjectFaultRequest {
            kind: "i2c_missing".into(),
            address: 0x48,
            ..Default::default()
        },
    );
    let s = api.run("board-health", 3);
    assert_eq!(s["state"], "completed", "{s}");
    let res = api.get_ok("/api/diagnostics/board-health/result");
    let checks = |chain: u64| -> Vec<Value> {
        res["report"]["chains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["chain_id"] == chain)
            .unwrap()["checks"]
            .as_array()
            .unwrap()
            .clone()
    };
    let verdict = |checks: &[Value], name: &str| {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} in {checks:?}"))["verdict"]
            .clone()
    };
    assert_eq!(verdict(&checks(0), "temp_board"), "fail", "{res}");
    assert_eq!(verdict(&checks(0), "temp_chip"), "pass", "{res}");
    assert_eq!(verdict(&checks(1), "temp_board"), "pass", "{res}");
    let board = res["report"]["board"]["checks"].as_array().unwrap().clone();
    assert_eq!(verdict(&board, "i2c_chain0-board"), "fail");
    assert_eq!(verdict(&board, "i2c_psu"), "pass");
    assert_eq!(verdict(&board, "fan0"), "pass");
    assert_eq!(res["verdict"], "fail");
    let scan = api.get_ok("/api/diagnostics/troubleshoot/i2c-scan");
    assert_eq!(scan["missing"][0]["address"], 0x48, "{scan}");
    clear_faults(&sim, &rt);

    let recent = api.get_ok("/api/diagnostics/reports/recent");
    assert_eq!(recent["reports"][0]["kind"], "board-health", "{recent}");
    assert_eq!(recent["count"], 4, "{recent}");

    // Results survive an hw-agent restart.
    let before = api.get_ok("/api/diagnostics/chip-health/result");
    sim.kill_service_and_wait("hw-agent")
        .expect("hw-agent restart");
    let deadline = Instant::now() + WAIT;
    let after = loop {
        let r = api.get("/api/diagnostics/chip-health/result");
        if r.status == 200 {
            break r.json();
        }
        assert!(Instant::now() < deadline, "no result after restart");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(after["run"]["run_id"], before["run"]["run_id"]);
    assert_eq!(after["report"], before["report"]);
    assert_eq!(
        api.get_ok("/api/diagnostics/chip-health/status")["state"],
        "completed"
    );

    // Register read over the UART: the chip-id register holds the model id.
    let deadline = Instant::now() + WAIT;
    let reg = loop {
        let r = api.get("/api/debug/registers?chain_id=0&chip=0&register=0x00");
        if r.status == 200 {
            break r.json();
        }
        assert!(
            Instant::now() < deadline,
            "register read: {}",
            String::from_utf8_lossy(&r.body)
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(reg["answered"], true, "{reg}");
    let model = api.get_ok("/api/miner/type").to_string().to_lowercase();
    let id = format!("{:04x}", reg["value"].as_u64().unwrap() >> 16);
    assert!(model.contains(&id), "chip id {id} not in {model}");

    // A write with confirm, read back; recorded in the audit log.
    let w = api.post(
        "/api/debug/registers",
        json!({"confirm": true, "chain_id": 1, "chip": 2, "register": "0x10", "value": "0x1234"}),
    );
    assert_eq!(w.status, 200, "{}", String::from_utf8_lossy(&w.body));
    assert_eq!(w.json()["value"], 0x1234);
    let audit = std::fs::read_to_string(
        sim.dir()
            .join("state/hw-agent/diagnostics/debug-audit.jsonl"),
    )
    .expect("audit log");
    assert!(
        audit.contains("chip_register_write") && audit.contains("0x00001234"),
        "{audit}"
    );
    // Validation: out-of-range address, a write that would break the UART.
    let bad = api.post(
        "/api/debug/i2c",
        json!({"confirm": true, "address": "0x200", "data": "00"}),
    );
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["field"], "address");
    let baud = api.post(
        "/api/debug/asic-command",
        json!({"confirm": true, "chain_id": 0, "frame": "51 00 18 00 00 00 00"}),
    );
    assert_eq!(baud.status, 409, "{}", String::from_utf8_lossy(&baud.body));
    // A raw broadcast chip-id read: every chip of the chain answers.
    let raw = api.post(
        "/api/debug/asic-command",
        json!({"confirm": true, "chain_id": 0, "frame": [0x52, 0x00, 0x00], "wait_ms": 300}),
    );
    assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    assert_eq!(raw.json()["responses"].as_array().unwrap().len(), 8);

    // Without confirm the guard refuses before the handler runs.
    let r = api.post(
        "/api/debug/registers",
        json!({"chain_id": 0, "chip": 0, "register": 16, "value": 1}),
    );
    assert_eq!(r.status, 428);
    assert!(r.json()["error"].is_string());

    // Logs: the debug log, the manifest and the archive.
    let log = api.get_ok("/api/debug/log?service=hw-agent&lines=50");
    assert!(log["count"].as_u64().unwrap() > 0, "{log}");
    let manifest = api.get_ok("/api/diagnostics/logs/manifest");
    let names = manifest["files"].to_string();
    assert!(
        names.contains("logs/hw-agent.log") && names.contains("diagnostics/"),
        "{manifest}"
    );
    assert!(!names.contains("config.toml"));
    let tgz = api.get("/api/log/backup");
    assert_eq!(tgz.status, 200);
    assert_eq!(tgz.content_type, "application/gzip");
    assert_eq!(&tgz.body[..2], &[0x1f, 0x8b]);

    // Standard mode: debug is forbidden with the mode explanation.
    let r = api.post("/api/setup/step4-mode", json!({"mode": "standard"}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = api.get("/api/debug/registers?chain_id=0&chip=0&register=0");
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["required_mode"], "hacker");
    let r = api.post(
        "/api/debug/registers",
        json!({"confirm": true, "chain_id": 0, "chip": 0, "register": 16, "value": 1}),
    );
    assert_eq!(r.status, 403);

    sim.stop().expect("stop");
}
