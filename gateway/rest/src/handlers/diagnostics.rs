//! Diagnostic runs, debug surfaces (Hacker mode; writes need confirm) and hardware inventory
//! details.
//!
//! hw-agent owns the hardware, so runs and debug access are calls to its
//! `HwDiagnosticsService` (see `proto/svcos/hwagent/v1/diagnostics.proto`); this module only
//! validates input, shapes JSON and, for logs, reads the files the supervisor and hw-agent
//! write. Operations still marked `planned!` answer 501 with the envelope until their feature
//! lands.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use svcos_common::bounds::VOLTAGE_MV;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use svcos_common::{ServiceName, ipc};
use svcos_proto::hwagent::v1::hw_diagnostics_service_client::HwDiagnosticsServiceClient;
use svcos_proto::hwagent::v1::*;
use tonic::transport::Channel;

use super::{ApiResult, json, parse_body};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, planned, route};

/// Deadline of diagnostics calls: a cancel waits for the run to wind down, a scan probes
/// every address.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Most log lines one debug-log request returns.
const MAX_LOG_LINES: usize = 2000;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        planned!(GET "/api/hardware/pic_info", P, Hardware, "PIC information"),
        planned!(GET "/api/hardware/psu_bypass_matrix", P, Hardware, "PSU bypass matrix"),
        route!(GET "/api/hardware/psu_catalog", Bearer, P, Hardware, Full, "PSU models the PSU driver knows, and the one fitted", psu_catalog),
        planned!(GET "/api/miner/pvt-table", U, Hardware, "PVT table"),
        route!(POST "/api/debug/asic-command", Bearer, P, Diagnostics, Full, "Send a raw BM13xx command frame (Hacker mode, confirm)", asic_command),
        route!(GET "/api/debug/i2c", Bearer, P, Diagnostics, Full, "Read bytes from an I2C device (Hacker mode)", i2c_read),
        route!(POST "/api/debug/i2c", Bearer, P, Diagnostics, Full, "Write bytes to an I2C device (Hacker mode, confirm)", i2c_write),
        route!(GET "/api/debug/log", Bearer, P, Diagnostics, Full, "Recent log lines of a service (Hacker mode)", debug_log),
        route!(POST "/api/debug/pid-params", Bearer, P, Diagnostics, Full, "Set fan PID gains (Hacker mode, confirm)", pid_params),
        route!(POST "/api/debug/psu/control", Bearer, P, Diagnostics, Full, "Switch the PSU or set its voltage (Hacker mode, confirm)", psu_control),
        route!(GET "/api/debug/registers", Bearer, P, Diagnostics, Full, "Read a chip register over the UART (Hacker mode)", register_read),
        route!(POST "/api/debug/registers", Bearer, P, Diagnostics, Full, "Write a chip register over the UART (Hacker mode, confirm)", register_write),
        route!(GET "/api/diagnostics/board-health/report", Bearer, P, Diagnostics, Full, "Last board-health report (Markdown, or JSON with ?format=json)", board_report),
        route!(GET "/api/diagnostics/board-health/result", Bearer, P, Diagnostics, Full, "Last board-health result", board_result),
        route!(POST "/api/diagnostics/board-health/start", Bearer, P, Diagnostics, Full, "Start a board-health run", board_start),
        route!(GET "/api/diagnostics/board-health/status", Bearer, P, Diagnostics, Full, "Board-health run state", board_status),
        route!(GET "/api/diagnostics/chip-health/report", Bearer, P, Diagnostics, Full, "Last chip-health report (Markdown, or JSON with ?format=json)", chip_report),
        route!(GET "/api/diagnostics/chip-health/result", Bearer, P, Diagnostics, Full, "Last chip-health result", chip_result),
        route!(POST "/api/diagnostics/chip-health/start", Bearer, P, Diagnostics, Full, "Start a chip-health run", chip_start),
        route!(GET "/api/diagnostics/chip-health/status", Bearer, P, Diagnostics, Full, "Chip-health run state", chip_status),
        route!(GET "/api/diagnostics/failure_modes", Bearer, P, Diagnostics, Full, "Failure modes and the checks that detect them", failure_modes),
        route!(POST "/api/diagnostics/hashreport/cancel", Bearer, P, Diagnostics, Full, "Cancel the running hash report", hash_cancel),
        route!(GET "/api/diagnostics/hashreport/report", Bearer, P, Diagnostics, Full, "Last hash report (Markdown, or JSON with ?format=json)", hash_report),
        route!(GET "/api/diagnostics/hashreport/result", Bearer, P, Diagnostics, Full, "Last hash-report result", hash_result),
        route!(POST "/api/diagnostics/hashreport/start", Bearer, P, Diagnostics, Full, "Start a hash report", hash_start),
        route!(GET "/api/diagnostics/hashreport/status", Bearer, P, Diagnostics, Full, "Hash-report run state", hash_status),
        route!(GET "/api/diagnostics/logs/manifest", Bearer, P, Diagnostics, Full, "Log and report files a log backup contains", logs_manifest),
        route!(GET "/api/diagnostics/recovery_actions", Bearer, P, Diagnostics, Full, "Recovery actions and the API calls that perform them", recovery_actions),
        route!(GET "/api/diagnostics/reports/recent", Bearer, P, Diagnostics, Full, "Recent diagnostic reports of every kind", reports_recent),
        route!(GET "/api/diagnostics/state_machine", Bearer, P, Diagnostics, Full, "The diagnostic run state machine", state_machine),
        route!(GET "/api/diagnostics/troubleshoot/fpga", Bearer, P, Diagnostics, Full, "Whether the control board has an FPGA, with evidence", troubleshoot_fpga),
        route!(GET "/api/diagnostics/troubleshoot/i2c-scan", Bearer, P, Diagnostics, Full, "Scan the I2C bus for devices that acknowledge", i2c_scan),
        planned!(GET "/api/env/recipe", P, Other, "environment recipe"),
        route!(GET "/api/log/backup", Bearer, P, Other, Full, "tar.gz of service logs, diagnostic reports and the debug audit log", log_backup),
    ]
}

fn client(state: &AppState) -> HwDiagnosticsServiceClient<Channel> {
    HwDiagnosticsServiceClient::new(ipc::channel_with_deadline(
        &state.layout,
        ServiceName::HwAgent,
        CALL_TIMEOUT,
    ))
}

fn grpc(s: tonic::Status) -> ApiError {
    ApiError::from_grpc("hw-agent", &s)
}

fn field_error(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(format!("invalid value for {field}"))
        .detail(message.into())
        .with("field", field)
}

// ---- diagnostic runs --------------------------------------------------------------------

fn state_word(state: i32) -> &'static str {
    match RunState::try_from(state).unwrap_or(RunState::Unspecified) {
        RunState::Unspecified => "unspecified",
        RunState::Idle => "idle",
        RunState::Running => "running",
        RunState::Completed => "completed",
        RunState::Cancelled => "cancelled",
        RunState::Failed => "failed",
    }
}

fn run_json(s: &RunStatus) -> Value {
    json!({
        "schema": "svcos.api.diagnostics.run.v1",
        "kind": s.kind,
        "state": state_word(s.state),
        "run_id": s.run_id,
        "progress_percent": s.progress_percent,
        "started_ms": s.started_unix_ms,
        "finished_ms": s.finished_unix_ms,
        "duration_s": s.duration_s,
        "error": s.error,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    /// Observation window, s (0 or absent = the kind's default).
    #[serde(default)]
    duration_s: u32,
}

async fn start(state: AppState, kind: &str, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: StartBody = parse_body(&headers, &body)?;
    let s = client(&state)
        .start_run(StartRunRequest {
            kind: kind.into(),
            duration_s: b.duration_s,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok((StatusCode::ACCEPTED, axum::Json(run_json(&s))).into_response())
}

async fn status(state: AppState, kind: &str) -> ApiResult {
    let s = client(&state)
        .get_run_status(RunRequest { kind: kind.into() })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(run_json(&s)))
}

async fn result(state: AppState, kind: &str) -> ApiResult<(Value, String)> {
    let r = client(&state)
        .get_run_result(RunRequest { kind: kind.into() })
        .await
        .map_err(grpc)?
        .into_inner();
    let report: Value = serde_json::from_str(&r.report_json).unwrap_or(Value::Null);
    let mut run = run_json(&r.status.unwrap_or_default());
    run.as_object_mut().map(|m| m.remove("schema"));
    let v = json!({
        "schema": "svcos.api.diagnostics.result.v1",
        "run": run,
        "verdict": report.get("verdict").cloned().unwrap_or(Value::Null),
        "report": report,
    });
    Ok((v, r.report_markdown))
}

#[derive(Debug, Default, Deserialize)]
struct ReportQuery {
    /// "markdown" (default) or "json".
    #[serde(default)]
    format: Option<String>,
}

async fn report(state: AppState, kind: &str, q: ReportQuery) -> ApiResult {
    let format = q.format.as_deref().unwrap_or("markdown");
    if !matches!(format, "markdown" | "json") {
        return Err(field_error("format", "markdown (default) or json"));
    }
    let (v, md) = result(state, kind).await?;
    if format == "json" {
        return Ok(json(v));
    }
    let mut resp = md.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/markdown; charset=utf-8"),
    );
    Ok(resp)
}

macro_rules! run_handlers {
    ($kind:literal, $start:ident, $status:ident, $result:ident, $report:ident) => {
        async fn $start(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
            start(s, $kind, h, b).await
        }
        async fn $status(State(s): State<AppState>) -> ApiResult {
            status(s, $kind).await
        }
        async fn $result(State(s): State<AppState>) -> ApiResult {
            Ok(json(result(s, $kind).await?.0))
        }
        async fn $report(State(s): State<AppState>, Query(q): Query<ReportQuery>) -> ApiResult {
            report(s, $kind, q).await
        }
    };
}

run_handlers!(
    "board-health",
    board_start,
    board_status,
    board_result,
    board_report
);
run_handlers!(
    "chip-health",
    chip_start,
    chip_status,
    chip_result,
    chip_report
);
run_handlers!(
    "hashreport",
    hash_start,
    hash_status,
    hash_result,
    hash_report
);

async fn hash_cancel(State(state): State<AppState>) -> ApiResult {
    let s = client(&state)
        .cancel_run(RunRequest {
            kind: "hashreport".into(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(run_json(&s)))
}

#[derive(Debug, Deserialize)]
struct RecentQuery {
    #[serde(default)]
    limit: Option<u32>,
}

async fn reports_recent(State(state): State<AppState>, Query(q): Query<RecentQuery>) -> ApiResult {
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(field_error("limit", "1-100"));
    }
    let r = client(&state)
        .list_reports(ListReportsRequest { limit })
        .await
        .map_err(grpc)?
        .into_inner();
    let reports: Vec<Value> = r
        .reports
        .iter()
        .map(|r| {
            json!({
                "kind": r.kind,
                "run_id": r.run_id,
                "state": state_word(r.state),
                "started_ms": r.started_unix_ms,
                "finished_ms": r.finished_unix_ms,
                "verdict": r.verdict,
                "result": format!("/api/diagnostics/{}/result", r.kind),
            })
        })
        .collect();
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.reports.v1",
        "count": reports.len(),
        "reports": reports,
    })))
}

async fn state_machine(State(state): State<AppState>) -> ApiResult {
    let m = client(&state)
        .get_state_machine(GetStateMachineRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.state_machine.v1",
        "source": "generated from hw-agent's run state enum",
        "kinds": ["board-health", "chip-health", "hashreport"],
        "states": m.states.iter().map(|s| state_word(*s)).collect::<Vec<_>>(),
        "initial": state_word(m.initial),
        "terminal": m.terminal.iter().map(|s| state_word(*s)).collect::<Vec<_>>(),
        "transitions": m.transitions.iter().map(|t| json!({
            "from": state_word(t.from), "event": t.event, "to": state_word(t.to),
        })).collect::<Vec<_>>(),
        "rules": [
            "one run per kind at a time; kinds run concurrently",
            "runs observe the mining loop and do not stop it",
            "finished runs are stored by hw-agent and survive its restarts",
        ],
    })))
}

// ---- catalogues -------------------------------------------------------------------------

/// Failure modes: (id, component, symptom, detected by, recovery action ids).
const FAILURE_MODES: &[(&str, &str, &str, &str, &[&str])] = &[
    (
        "chip_dead",
        "asic",
        "a chip stops answering register reads and returns no nonces",
        "chip-health: classification dead",
        &["restart_hw_agent", "power_cycle_chain", "replace_hashboard"],
    ),
    (
        "chip_weak",
        "asic",
        "a chip returns HW errors or far fewer nonces than its share",
        "chip-health: classification weak",
        &["lower_frequency", "raise_voltage", "improve_cooling"],
    ),
    (
        "chips_missing",
        "hashboard",
        "fewer chips answer enumeration than the board has",
        "board-health: chips check",
        &["power_cycle_chain", "reseat_cable", "replace_hashboard"],
    ),
    (
        "chain_no_chips",
        "hashboard",
        "no chip answers on a chain's UART",
        "board-health: state check (missing)",
        &["reseat_cable", "power_cycle_chain", "check_psu"],
    ),
    (
        "uart_errors",
        "hashboard",
        "CRC errors on a chain's UART",
        "telemetry: crc errors; chip-health nonce shortfall",
        &["reseat_cable", "lower_baud"],
    ),
    (
        "sensor_missing",
        "sensor",
        "a temperature sensor stops acknowledging on I2C",
        "board-health: temp and i2c checks",
        &["reseat_cable", "replace_hashboard"],
    ),
    (
        "overheat",
        "thermal",
        "a sensor reads at or above the dangerous limit; mining stops",
        "board-health: temp checks; telemetry state overheat",
        &["improve_cooling", "lower_frequency"],
    ),
    (
        "fan_stalled",
        "fan",
        "a driven fan reports 0 rpm",
        "board-health: fan checks",
        &["replace_fan"],
    ),
    (
        "psu_fault",
        "psu",
        "the PSU reports a fault in its status word or stops answering",
        "board-health: psu check",
        &["check_psu", "clear_psu_fault"],
    ),
    (
        "psu_voltage_off",
        "psu",
        "the PSU output is far from its setpoint",
        "board-health: voltage check",
        &["check_psu"],
    ),
    (
        "hashrate_low",
        "board",
        "measured hashrate well under nominal",
        "hashreport: percent of nominal",
        &["run_chip_health", "improve_cooling"],
    ),
];

/// Recovery actions: (id, what it does, how).
const RECOVERY_ACTIONS: &[(&str, &str, &str)] = &[
    (
        "restart_hw_agent",
        "restart the hardware agent; running chains are re-attached",
        "POST /api/action/restart {\"service\": \"hw-agent\"}",
    ),
    (
        "power_cycle_chain",
        "switch a chain off and on again: the chips are reset and brought up from cold",
        "disable then enable the chain (hw-agent SetChainEnabled)",
    ),
    (
        "lower_frequency",
        "lower the chip frequency of a chain or chip",
        "POST /api/debug/chip/frequency (Hacker mode)",
    ),
    (
        "raise_voltage",
        "raise the chain voltage within the PSU's range",
        "POST /api/debug/chip/voltage (Hacker mode)",
    ),
    (
        "lower_baud",
        "lower the chain UART speed",
        "[hardware].baud in the config, then restart hw-agent",
    ),
    (
        "improve_cooling",
        "more airflow or a lower target temperature",
        "POST /api/fan; clean filters and heatsinks",
    ),
    (
        "clear_psu_fault",
        "switch the PSU output off and on",
        "POST /api/debug/psu/control (Hacker mode)",
    ),
    (
        "check_psu",
        "check the PSU's input, cabling and rating against the board",
        "GET /api/hardware/psu_catalog",
    ),
    (
        "reseat_cable",
        "power down, reseat the hashboard's data and power cables",
        "manual",
    ),
    ("replace_fan", "replace the fan", "manual"),
    (
        "replace_hashboard",
        "replace or repair the hashboard",
        "manual",
    ),
    (
        "run_chip_health",
        "find which chips hold the hashrate back",
        "POST /api/diagnostics/chip-health/start",
    ),
];

async fn failure_modes() -> Response {
    let entries: Vec<Value> = FAILURE_MODES
        .iter()
        .map(|(id, component, symptom, detected, actions)| {
            json!({"id": id, "component": component, "symptom": symptom,
                   "detected_by": detected, "recovery_actions": actions})
        })
        .collect();
    json(json!({"schema": "svcos.api.diagnostics.failure_modes.v1", "entries": entries}))
}

async fn recovery_actions() -> Response {
    let entries: Vec<Value> = RECOVERY_ACTIONS
        .iter()
        .map(|(id, what, how)| json!({"id": id, "description": what, "how": how}))
        .collect();
    json(json!({"schema": "svcos.api.diagnostics.recovery_actions.v1", "entries": entries}))
}

/// PSU models: (model, output range V, rated W, controllable by the PMBus driver).
const PSU_MODELS: &[(&str, f64, f64, f64, bool)] = &[
    ("APW3++", 12.0, 12.0, 1600.0, false),
    ("APW7", 12.0, 12.0, 1800.0, false),
    ("APW9+", 14.5, 21.0, 3600.0, true),
    ("APW12", 12.0, 15.0, 3600.0, true),
];

async fn psu_catalog(State(state): State<AppState>) -> Response {
    let fitted = state
        .telemetry()
        .and_then(|t| t.psu.clone())
        .map(|p| json!({"model": p.model, "enabled": p.enabled, "voltage_v": p.voltage_v, "setpoint_v": p.voltage_setpoint_v}));
    let entries: Vec<Value> = PSU_MODELS
        .iter()
        .map(|(model, lo, hi, w, ctl)| {
            json!({"model": model, "output_min_v": lo, "output_max_v": hi,
                   "rated_watt": w, "voltage_control": ctl})
        })
        .collect();
    json(json!({
        "schema": "svcos.api.hardware.psu_catalog.v1",
        "driver": "PMBus subset at I2C 0x10 (OPERATION, VOUT_COMMAND 1000-16000 mV, STATUS_WORD, READ_VOUT/IOUT/POUT/TEMPERATURE_1, MFR_MODEL)",
        "fitted": fitted,
        "entries": entries,
    }))
}

// ---- live troubleshooting ---------------------------------------------------------------

async fn i2c_scan(State(state): State<AppState>) -> ApiResult {
    let r = client(&state)
        .i2c_scan(I2cScanRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let dev = |d: &I2cDevice| json!({"address": d.address, "address_hex": format!("{:#04x}", d.address), "expected": d.expected});
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.i2c_scan.v1",
        "bus": r.bus,
        "range": ["0x03", "0x77"],
        "present": r.present.iter().map(dev).collect::<Vec<_>>(),
        "missing": r.missing.iter().map(dev).collect::<Vec<_>>(),
    })))
}

/// Where an FPGA would show itself on a Linux control board.
const FPGA_EVIDENCE_PATHS: &[&str] = &[
    "/sys/class/fpga_manager",
    "/dev/axi_fpga_dev",
    "/sys/firmware/devicetree/base/fpga-full",
    "/sys/firmware/devicetree/base/amba_pl",
];

async fn troubleshoot_fpga(State(state): State<AppState>) -> Response {
    let driver = state.config().hardware.driver;
    let mut evidence = Vec::new();
    let mut found = false;
    for p in FPGA_EVIDENCE_PATHS {
        let path = Path::new(p);
        let present = match std::fs::read_dir(path) {
            Ok(mut it) => it.next().is_some(),
            Err(_) => path.exists(),
        };
        found |= present;
        evidence.push(json!({"path": p, "present": present}));
    }
    let model = std::fs::read_to_string("/sys/firmware/devicetree/base/model")
        .map(|s| s.trim_matches(char::from(0)).trim().to_string())
        .ok();
    let driver_name = format!("{driver:?}").to_lowercase();
    let summary = if found {
        "an FPGA is present: svcOS drives the chains through the kernel UARTs and does not use it"
    } else if driver_name == "sim" {
        "no FPGA: the board is simulated (hw-sim); chains are pseudo-terminals"
    } else {
        "no FPGA found: chains are driven through the kernel UARTs directly"
    };
    json(json!({
        "schema": "svcos.api.diagnostics.fpga.v1",
        "driver": driver_name,
        "fpga_present": found,
        "control_board_model": model,
        "summary": summary,
        "evidence": evidence,
    }))
}

// ---- debug ------------------------------------------------------------------------------

/// A number from JSON or a query string: decimal or `0x` hex.
fn number(field: &str, v: &Value, max: u64) -> ApiResult<u64> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_number(s),
        _ => None,
    };
    n.filter(|n| *n <= max)
        .ok_or_else(|| field_error(field, format!("an integer 0-{max:#x} (decimal or 0x hex)")))
}

fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Bytes from a JSON array of numbers or a hex string ("21 28 23" or "212823").
fn bytes_of(field: &str, v: &Value) -> ApiResult<Vec<u8>> {
    let bad = || {
        field_error(
            field,
            "an array of bytes or a hex string such as \"21 28 23\"",
        )
    };
    match v {
        Value::Array(a) => a
            .iter()
            .map(|x| number(field, x, 0xff).map(|n| n as u8))
            .collect(),
        Value::String(s) => {
            let compact: String = s.split_whitespace().collect();
            hex::decode(compact.trim_start_matches("0x")).map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

fn hex_string(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Deserialize)]
struct I2cQuery {
    address: Option<String>,
    register: Option<String>,
    length: Option<String>,
}

async fn i2c_read(State(state): State<AppState>, Query(q): Query<I2cQuery>) -> ApiResult {
    let address = q
        .address
        .as_deref()
        .ok_or_else(|| field_error("address", "required: the 7-bit I2C address"))?;
    let address = number("address", &json!(address), 0x7f)? as u32;
    let write = match q.register.as_deref() {
        Some(r) => vec![number("register", &json!(r), 0xff)? as u8],
        None => Vec::new(),
    };
    let length = match q.length.as_deref() {
        Some(l) => number("length", &json!(l), 64)? as u32,
        None => 1,
    };
    if length == 0 {
        return Err(field_error("length", "1-64 bytes"));
    }
    let r = client(&state)
        .i2c_transfer(I2cTransferRequest {
            address,
            write: write.clone(),
            read_len: length,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.debug.i2c.v1",
        "bus": r.bus,
        "address": address,
        "register": write.first(),
        "data": r.read,
        "hex": hex_string(&r.read),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct I2cWriteBody {
    #[allow(dead_code)]
    confirm: bool,
    address: Value,
    data: Value,
    #[serde(default)]
    read_length: Option<u32>,
}

async fn i2c_write(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: I2cWriteBody = parse_body(&headers, &body)?;
    let address = number("address", &b.address, 0x7f)? as u32;
    let data = bytes_of("data", &b.data)?;
    if data.is_empty() || data.len() > 32 {
        return Err(field_error("data", "1-32 bytes, register pointer first"));
    }
    let read_len = b.read_length.unwrap_or(0);
    if read_len > 64 {
        return Err(field_error("read_length", "0-64 bytes"));
    }
    if data.len() == 1 && read_len > 0 {
        return Err(field_error(
            "data",
            "a lone register pointer followed by a read is a read: use GET /api/debug/i2c",
        ));
    }
    let r = client(&state)
        .i2c_transfer(I2cTransferRequest {
            address,
            write: data.clone(),
            read_len,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.debug.i2c.v1",
        "bus": r.bus,
        "address": address,
        "written": hex_string(&data),
        "data": r.read,
        "hex": hex_string(&r.read),
    })))
}

#[derive(Debug, Deserialize)]
struct RegisterQuery {
    chain_id: Option<String>,
    chip: Option<String>,
    register: Option<String>,
}

fn register_json(chain_id: u32, chip: u32, r: &ChipRegisterResponse) -> Value {
    json!({
        "schema": "svcos.api.debug.register.v1",
        "chain_id": chain_id,
        "chip": chip,
        "chip_address": r.chip_address,
        "register": r.register,
        "register_hex": format!("{:#04x}", r.register),
        "answered": r.answered,
        "value": r.answered.then_some(r.value),
        "value_hex": r.answered.then(|| format!("{:#010x}", r.value)),
    })
}

async fn register_read(State(state): State<AppState>, Query(q): Query<RegisterQuery>) -> ApiResult {
    let need = |field: &'static str, v: &Option<String>, max: u64| -> ApiResult<u32> {
        let s = v.as_deref().ok_or_else(|| field_error(field, "required"))?;
        Ok(number(field, &json!(s), max)? as u32)
    };
    let chain_id = need("chain_id", &q.chain_id, 255)?;
    let chip = need("chip", &q.chip, 1023)?;
    let register = need("register", &q.register, 0xff)?;
    let r = client(&state)
        .chip_register(ChipRegisterRequest {
            chain_id,
            chip,
            register,
            value: None,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(register_json(chain_id, chip, &r)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBody {
    #[allow(dead_code)]
    confirm: bool,
    chain_id: u32,
    chip: u32,
    register: Value,
    value: Value,
}

async fn register_write(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: RegisterBody = parse_body(&headers, &body)?;
    let register = number("register", &b.register, 0xff)? as u32;
    let value = number("value", &b.value, u64::from(u32::MAX))? as u32;
    let r = client(&state)
        .chip_register(ChipRegisterRequest {
            chain_id: b.chain_id,
            chip: b.chip,
            register,
            value: Some(value),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(register_json(b.chain_id, b.chip, &r)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AsicBody {
    #[allow(dead_code)]
    confirm: bool,
    chain_id: u32,
    /// Header byte and payload, without preamble, length and CRC.
    frame: Value,
    #[serde(default)]
    wait_ms: Option<u32>,
}

async fn asic_command(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: AsicBody = parse_body(&headers, &body)?;
    let frame = bytes_of("frame", &b.frame)?;
    let r = client(&state)
        .asic_command(AsicCommandRequest {
            chain_id: b.chain_id,
            frame,
            wait_ms: b.wait_ms.unwrap_or(0),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.debug.asic_command.v1",
        "chain_id": b.chain_id,
        "sent": hex_string(&r.sent),
        "responses": r.responses.iter().map(|x| json!({
            "chip_address": x.chip_address,
            "register": x.register,
            "value": x.value,
            "value_hex": format!("{:#010x}", x.value),
        })).collect::<Vec<_>>(),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PsuBody {
    #[allow(dead_code)]
    confirm: bool,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    voltage_mv: Option<f64>,
}

async fn psu_control(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: PsuBody = parse_body(&headers, &body)?;
    if b.enabled.is_none() && b.voltage_mv.is_none() {
        return Err(field_error("enabled", "give enabled and/or voltage_mv"));
    }
    if let Some(mv) = b.voltage_mv
        && !VOLTAGE_MV.contains(mv)
    {
        return Err(field_error("voltage_mv", VOLTAGE_MV.describe()));
    }
    let r = client(&state)
        .psu_control(PsuControlRequest {
            enabled: b.enabled,
            voltage_mv: b.voltage_mv,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.debug.psu.v1",
        "enabled": r.enabled,
        "voltage_setpoint_mv": r.voltage_setpoint_mv,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PidBody {
    #[allow(dead_code)]
    confirm: bool,
    kp: f64,
    ki: f64,
    kd: f64,
}

async fn pid_params(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: PidBody = parse_body(&headers, &body)?;
    for (field, v, max) in [("kp", b.kp, 100.0), ("ki", b.ki, 10.0), ("kd", b.kd, 100.0)] {
        if !(0.0..=max).contains(&v) {
            return Err(field_error(field, format!("0-{max}")));
        }
    }
    let r = client(&state)
        .set_fan_pid(SetFanPidRequest {
            kp: b.kp,
            ki: b.ki,
            kd: b.kd,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(json(json!({
        "schema": "svcos.api.debug.pid.v1",
        "kp": r.kp, "ki": r.ki, "kd": r.kd,
    })))
}

// ---- logs -------------------------------------------------------------------------------

/// The recent-log file the supervisor keeps per service (see `svcos_supervisor::logs`).
fn service_log(state: &AppState, service: ServiceName) -> PathBuf {
    state
        .layout
        .runtime_dir
        .join("logs")
        .join(format!("{service}.log"))
}

#[derive(Debug, Deserialize)]
struct LogQuery {
    service: Option<String>,
    lines: Option<usize>,
}

async fn debug_log(State(state): State<AppState>, Query(q): Query<LogQuery>) -> ApiResult {
    let name = q.service.as_deref().unwrap_or("hw-agent");
    let service = ServiceName::ALL
        .iter()
        .copied()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = ServiceName::ALL.iter().map(|s| s.as_str()).collect();
            field_error("service", format!("one of {}", names.join(", ")))
        })?;
    let want = q.lines.unwrap_or(200);
    if !(1..=MAX_LOG_LINES).contains(&want) {
        return Err(field_error("lines", format!("1-{MAX_LOG_LINES}")));
    }
    let path = service_log(&state, service);
    let lines = tokio::task::spawn_blocking(move || tail(&path, want))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json(json!({
        "schema": "svcos.api.debug.log.v1",
        "service": name,
        "source": "supervisor recent-log file (<runtime>/logs/<service>.log)",
        "count": lines.len(),
        "lines": lines,
    })))
}

/// The last `n` lines of a rotated log (`path.1` then `path`).
fn tail(path: &Path, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for p in [path.with_extension("log.1"), path.to_path_buf()] {
        if let Ok(s) = std::fs::read_to_string(&p) {
            lines.extend(s.lines().map(str::to_string));
        }
    }
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

/// Files a log backup holds: (name in the archive, path). Service logs, diagnostic reports and
/// the debug audit log; never the config (pool passwords) nor auth state.
fn backup_files(state: &AppState) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut add_dir = |prefix: &str, dir: &Path, keep: &dyn Fn(&str) -> bool| {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(keep))
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            out.push((format!("{prefix}/{name}"), p.clone()));
        }
    };
    add_dir(
        "logs",
        &state.layout.runtime_dir.join("logs"),
        &|n: &str| n.ends_with(".log") || n.ends_with(".log.1"),
    );
    add_dir(
        "diagnostics",
        &state
            .layout
            .service_state_dir(ServiceName::HwAgent)
            .join("diagnostics"),
        &|n: &str| n.ends_with(".json") || n.contains(".jsonl"),
    );
    out
}

async fn logs_manifest(State(state): State<AppState>) -> ApiResult {
    let files = tokio::task::spawn_blocking(move || {
        backup_files(&state)
            .into_iter()
            .map(|(name, path)| {
                let meta = std::fs::metadata(&path).ok();
                json!({
                    "name": name,
                    "bytes": meta.as_ref().map(|m| m.len()),
                    "modified_ms": meta.and_then(|m| m.modified().ok())
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as u64),
                    "readable": std::fs::File::open(&path).is_ok(),
                })
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json(json!({
        "schema": "svcos.api.diagnostics.logs_manifest.v1",
        "backup": "/api/log/backup",
        "excluded": ["config (pool passwords)", "auth state (password hash, sessions)"],
        "count": files.len(),
        "files": files,
    })))
}

async fn log_backup(State(state): State<AppState>) -> ApiResult {
    let files = backup_files(&state);
    let archive = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        for (name, path) in &files {
            // A file rotated away between listing and reading is skipped, not an error.
            if let Ok(mut f) = std::fs::File::open(path) {
                tar.append_file(format!("svcos-logs/{name}"), &mut f)?;
            }
        }
        let mut gz = tar.into_inner()?;
        gz.flush()?;
        gz.finish()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("log archive: {e}")))?;
    let stamp = svcos_common::time::unix_ms() / 1000;
    let mut resp = Response::new(Body::from(archive));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/gzip"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"svcos-logs-{stamp}.tar.gz\""
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}
