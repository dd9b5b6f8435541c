//! Diagnostic runs, debug surfaces (Hacker mode; writes need confirm) and hardware inventory
//! details.
//!
//! hw-agent owns the hardware, so runs and debug access are calls to its
//! `HwDiagnosticsService` (see `proto/svcos/hwagent/v1/diagnostics.proto`); this module only
//! validates input, shapes JSON and, for logs, reads the files the supervisor and hw-agent
//! write. The hardware inventory (PIC info, PSU bypass matrix, PVT table, environment recipe) is
//! read and decided by hw-agent on the same service; this module maps its answers.

use std::path::{Path, PathBuf};
use std::time::Duration;
use svcos_api_types::requests as req;
use svcos_common::bounds::VOLTAGE_MV;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use svcos_api_types::diagnostics::*;
use svcos_api_types::inventory as inv;
use svcos_common::{ServiceName, ipc};
use svcos_proto::hwagent::v1::hw_diagnostics_service_client::HwDiagnosticsServiceClient;
use svcos_proto::hwagent::v1::*;
use tonic::transport::Channel;

use super::{ApiResult, parse_body};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};

/// Deadline of diagnostics calls: a cancel waits for the run to wind down, a scan probes
/// every address.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Most log lines one debug-log request returns.
const MAX_LOG_LINES: usize = 2000;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/hardware/pic_info", Bearer, P, Hardware, Full, "Each hashboard's PIC voltage controller: firmware, setpoint readback, measured rail", pic_info, res: svcos_api_types::inventory::PicInfoBody),
        route!(GET "/api/hardware/psu_bypass_matrix", Bearer, P, Hardware, Full, "Which PSU models allow which voltage window and overrides, and the fitted PSU against its row", psu_bypass_matrix, res: svcos_api_types::inventory::PsuBypassMatrixBody),
        route!(GET "/api/hardware/psu_catalog", Bearer, P, Hardware, Full, "PSU models the PSU driver knows, and the one fitted", psu_catalog, res: svcos_api_types::diagnostics::PsuCatalogBody),
        route!(GET "/api/miner/pvt-table", Bearer, U, Hardware, Full, "Every chip's on-die process/voltage/temperature readings", pvt_table, res: svcos_api_types::inventory::PvtTableBody),
        route!(POST "/api/debug/asic-command", Bearer, P, Diagnostics, Full, "Send a raw BM13xx command frame (Hacker mode, confirm)", asic_command, req: svcos_api_types::requests::AsicCommandRequest, res: svcos_api_types::diagnostics::AsicCommandBody),
        route!(GET "/api/debug/i2c", Bearer, P, Diagnostics, Full, "Read bytes from an I2C device (Hacker mode)", i2c_read, res: svcos_api_types::diagnostics::I2cReadBody),
        route!(POST "/api/debug/i2c", Bearer, P, Diagnostics, Full, "Write bytes to an I2C device (Hacker mode, confirm)", i2c_write, req: svcos_api_types::requests::I2cWriteRequest, res: svcos_api_types::diagnostics::I2cWriteBody),
        route!(GET "/api/debug/log", Bearer, P, Diagnostics, Full, "Recent log lines of a service (Hacker mode)", debug_log, res: svcos_api_types::diagnostics::LogBody),
        route!(POST "/api/debug/pid-params", Bearer, P, Diagnostics, Full, "Set fan PID gains (Hacker mode, confirm)", pid_params, req: svcos_api_types::requests::PidParamsRequest, res: svcos_api_types::diagnostics::PidBody),
        route!(POST "/api/debug/psu/control", Bearer, P, Diagnostics, Full, "Switch the PSU or set its voltage (Hacker mode, confirm)", psu_control, req: svcos_api_types::requests::PsuControlRequest, res: svcos_api_types::diagnostics::PsuControlBody),
        route!(GET "/api/debug/registers", Bearer, P, Diagnostics, Full, "Read a chip register over the UART (Hacker mode)", register_read, res: svcos_api_types::diagnostics::RegisterBody),
        route!(POST "/api/debug/registers", Bearer, P, Diagnostics, Full, "Write a chip register over the UART (Hacker mode, confirm)", register_write, req: svcos_api_types::requests::RegisterWriteRequest, res: svcos_api_types::diagnostics::RegisterBody),
        route!(GET "/api/diagnostics/board-health/report", Bearer, P, Diagnostics, Full, "Last board-health report (Markdown, or JSON with ?format=json)", board_report),
        route!(GET "/api/diagnostics/board-health/result", Bearer, P, Diagnostics, Full, "Last board-health result", board_result, res: svcos_api_types::diagnostics::ResultBody),
        route!(POST "/api/diagnostics/board-health/start", Bearer, P, Diagnostics, Full, "Start a board-health run", board_start, req: svcos_api_types::requests::DiagnosticStartRequest, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/board-health/status", Bearer, P, Diagnostics, Full, "Board-health run state", board_status, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/chip-health/report", Bearer, P, Diagnostics, Full, "Last chip-health report (Markdown, or JSON with ?format=json)", chip_report),
        route!(GET "/api/diagnostics/chip-health/result", Bearer, P, Diagnostics, Full, "Last chip-health result", chip_result, res: svcos_api_types::diagnostics::ResultBody),
        route!(POST "/api/diagnostics/chip-health/start", Bearer, P, Diagnostics, Full, "Start a chip-health run", chip_start, req: svcos_api_types::requests::DiagnosticStartRequest, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/chip-health/status", Bearer, P, Diagnostics, Full, "Chip-health run state", chip_status, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/failure_modes", Bearer, P, Diagnostics, Full, "Failure modes and the checks that detect them", failure_modes, res: svcos_api_types::diagnostics::FailureModesBody),
        route!(POST "/api/diagnostics/hashreport/cancel", Bearer, P, Diagnostics, Full, "Cancel the running hash report", hash_cancel, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/hashreport/report", Bearer, P, Diagnostics, Full, "Last hash report (Markdown, or JSON with ?format=json)", hash_report),
        route!(GET "/api/diagnostics/hashreport/result", Bearer, P, Diagnostics, Full, "Last hash-report result", hash_result, res: svcos_api_types::diagnostics::ResultBody),
        route!(POST "/api/diagnostics/hashreport/start", Bearer, P, Diagnostics, Full, "Start a hash report", hash_start, req: svcos_api_types::requests::DiagnosticStartRequest, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/hashreport/status", Bearer, P, Diagnostics, Full, "Hash-report run state", hash_status, res: svcos_api_types::diagnostics::RunBody),
        route!(GET "/api/diagnostics/logs/manifest", Bearer, P, Diagnostics, Full, "Log and report files a log backup contains", logs_manifest, res: svcos_api_types::diagnostics::LogsManifestBody),
        route!(GET "/api/diagnostics/recovery_actions", Bearer, P, Diagnostics, Full, "Recovery actions and the API calls that perform them", recovery_actions, res: svcos_api_types::diagnostics::RecoveryActionsBody),
        route!(GET "/api/diagnostics/reports/recent", Bearer, P, Diagnostics, Full, "Recent diagnostic reports of every kind", reports_recent, res: svcos_api_types::diagnostics::ReportsBody),
        route!(GET "/api/diagnostics/state_machine", Bearer, P, Diagnostics, Full, "The diagnostic run state machine", state_machine, res: svcos_api_types::diagnostics::StateMachineBody),
        route!(GET "/api/diagnostics/troubleshoot/fpga", Bearer, P, Diagnostics, Full, "Whether the control board has an FPGA, with evidence", troubleshoot_fpga, res: svcos_api_types::diagnostics::FpgaBody),
        route!(GET "/api/diagnostics/troubleshoot/i2c-scan", Bearer, P, Diagnostics, Full, "Scan the I2C bus for devices that acknowledge", i2c_scan, res: svcos_api_types::diagnostics::I2cScanBody),
        route!(GET "/api/env/recipe", Bearer, P, Other, Full, "The cooling, fan and power settings in force, each with where it came from", env_recipe, res: svcos_api_types::inventory::EnvRecipeBody),
        route!(GET "/api/log/backup", Bearer, P, Other, Full, "tar.gz of service logs, diagnostic reports and the debug audit log", log_backup),
        route!(GET "/api/logs", Bearer, U, Diagnostics, Full, "Every service's log merged in time order, filtered (svcOS extension)", logs, res: svcos_api_types::diagnostics::LogsBody),
        route!(GET "/api/logs/download", Bearer, U, Diagnostics, Full, "The merged log as a text or NDJSON file (svcOS extension)", logs_download),
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

async fn start(state: AppState, kind: &str, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: req::DiagnosticStartRequest = parse_body(&headers, &body)?;
    let s = client(&state)
        .start_run(StartRunRequest {
            kind: kind.into(),
            duration_s: b.duration_s,
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok((StatusCode::ACCEPTED, Json(RunBody::from(&s))).into_response())
}

async fn status(state: AppState, kind: &str) -> ApiResult {
    let s = client(&state)
        .get_run_status(RunRequest { kind: kind.into() })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(Json(RunBody::from(&s)).into_response())
}

async fn result(state: AppState, kind: &str) -> ApiResult<RunResult> {
    client(&state)
        .get_run_result(RunRequest { kind: kind.into() })
        .await
        .map_err(grpc)
        .map(tonic::Response::into_inner)
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
    let r = result(state, kind).await?;
    if format == "json" {
        return Ok(Json(ResultBody::from(&r)).into_response());
    }
    let mut resp = r.report_markdown.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/markdown; charset=utf-8"),
    );
    Ok(resp)
}

macro_rules! run_handlers {
    ($($kind:literal => $start:ident, $status:ident, $result:ident, $report:ident;)*) => {$(
        async fn $start(State(s): State<AppState>, h: HeaderMap, b: Bytes) -> ApiResult {
            start(s, $kind, h, b).await
        }
        async fn $status(State(s): State<AppState>) -> ApiResult {
            status(s, $kind).await
        }
        async fn $result(State(s): State<AppState>) -> ApiResult {
            Ok(Json(ResultBody::from(&result(s, $kind).await?)).into_response())
        }
        async fn $report(State(s): State<AppState>, Query(q): Query<ReportQuery>) -> ApiResult {
            report(s, $kind, q).await
        }
    )*};
}

run_handlers! {
    "board-health" => board_start, board_status, board_result, board_report;
    "chip-health" => chip_start, chip_status, chip_result, chip_report;
    "hashreport" => hash_start, hash_status, hash_result, hash_report;
}

async fn hash_cancel(State(state): State<AppState>) -> ApiResult {
    let s = client(&state)
        .cancel_run(RunRequest {
            kind: "hashreport".into(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(Json(RunBody::from(&s)).into_response())
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
    Ok(Json(ReportsBody::from(r.reports.as_slice())).into_response())
}

async fn state_machine(State(state): State<AppState>) -> ApiResult {
    let m = client(&state)
        .get_state_machine(GetStateMachineRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(Json(StateMachineBody::from(&m)).into_response())
}

// ---- catalogues -------------------------------------------------------------------------

async fn failure_modes() -> Response {
    Json(FAILURE_MODES_BODY).into_response()
}

async fn recovery_actions() -> Response {
    Json(RECOVERY_ACTIONS_BODY).into_response()
}

async fn psu_catalog(State(state): State<AppState>) -> Response {
    let psu = state.telemetry().and_then(|t| t.psu);
    Json(PsuCatalogBody::new(psu.as_ref())).into_response()
}

// ---- inventory: one hw-agent call each, its answer mapped ---------------------------------

macro_rules! inventory_handlers {
    ($($name:ident: $call:ident($req:ident) -> $body:ty;)*) => {$(
        async fn $name(State(s): State<AppState>) -> ApiResult {
            let r = client(&s).$call($req {}).await.map_err(grpc)?.into_inner();
            Ok(Json(<$body>::from(&r)).into_response())
        }
    )*};
}

inventory_handlers! {
    pic_info: get_pic_info(GetPicInfoRequest) -> inv::PicInfoBody;
    psu_bypass_matrix: get_psu_bypass_matrix(GetPsuBypassMatrixRequest) -> inv::PsuBypassMatrixBody;
    pvt_table: get_pvt_table(GetPvtTableRequest) -> inv::PvtTableBody;
    env_recipe: get_env_recipe(GetEnvRecipeRequest) -> inv::EnvRecipeBody;
}

// ---- live troubleshooting ---------------------------------------------------------------

async fn i2c_scan(State(state): State<AppState>) -> ApiResult {
    let r = client(&state)
        .i2c_scan(I2cScanRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    Ok(Json(I2cScanBody::from(&r)).into_response())
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
        evidence.push(Evidence { path: p, present });
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
    Json(FpgaBody {
        schema: "svcos.api.diagnostics.fpga.v1",
        driver: driver_name,
        fpga_present: found,
        control_board_model: model,
        summary,
        evidence,
    })
    .into_response()
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
    let address = number("address", &Value::from(address), 0x7f)? as u32;
    let write = match q.register.as_deref() {
        Some(r) => vec![number("register", &Value::from(r), 0xff)? as u8],
        None => Vec::new(),
    };
    let length = match q.length.as_deref() {
        Some(l) => number("length", &Value::from(l), 64)? as u32,
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
    Ok(Json(I2cReadBody {
        schema: "svcos.api.debug.i2c.v1",
        bus: r.bus,
        address,
        register: write.first().copied(),
        hex: hex_string(&r.read),
        data: r.read,
    })
    .into_response())
}

async fn i2c_write(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: req::I2cWriteRequest = parse_body(&headers, &body)?;
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
    Ok(Json(I2cWriteBody {
        schema: "svcos.api.debug.i2c.v1",
        bus: r.bus,
        address,
        written: hex_string(&data),
        hex: hex_string(&r.read),
        data: r.read,
    })
    .into_response())
}

#[derive(Debug, Deserialize)]
struct RegisterQuery {
    chain_id: Option<String>,
    chip: Option<String>,
    register: Option<String>,
}

async fn register_read(State(state): State<AppState>, Query(q): Query<RegisterQuery>) -> ApiResult {
    let need = |field: &'static str, v: &Option<String>, max: u64| -> ApiResult<u32> {
        let s = v.as_deref().ok_or_else(|| field_error(field, "required"))?;
        Ok(number(field, &Value::from(s), max)? as u32)
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
    Ok(Json(RegisterBody::new(chain_id, chip, &r)).into_response())
}

async fn register_write(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let b: req::RegisterWriteRequest = parse_body(&headers, &body)?;
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
    Ok(Json(RegisterBody::new(b.chain_id, b.chip, &r)).into_response())
}

async fn asic_command(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: req::AsicCommandRequest = parse_body(&headers, &body)?;
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
    Ok(Json(AsicCommandBody::new(b.chain_id, &r)).into_response())
}

async fn psu_control(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: req::PsuControlRequest = parse_body(&headers, &body)?;
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
    Ok(Json(PsuControlBody::from(&r)).into_response())
}

async fn pid_params(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let b: req::PidParamsRequest = parse_body(&headers, &body)?;
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
    Ok(Json(PidBody::from(&r)).into_response())
}

// ---- logs -------------------------------------------------------------------------------

/// The supervisor's recent-log files (see `svcos_supervisor::logs`), read by `svcos-logs`.
fn logs_dir(state: &AppState) -> PathBuf {
    state.layout.runtime_dir.join("logs")
}

fn query_error(e: svcos_logs::QueryError) -> ApiError {
    field_error(e.field, e.message)
}

#[derive(Debug, Deserialize)]
struct LogQuery {
    service: Option<String>,
    lines: Option<usize>,
}

async fn debug_log(State(state): State<AppState>, Query(q): Query<LogQuery>) -> ApiResult {
    let name = q.service.as_deref().unwrap_or("hw-agent");
    let one = svcos_logs::LogQuery {
        service: Some(name.to_string()),
        ..Default::default()
    };
    let service = match one.filter().map_err(query_error)?.services[..] {
        [s] => s,
        _ => return Err(field_error("service", "one service name")),
    };
    let want = q.lines.unwrap_or(200);
    if !(1..=MAX_LOG_LINES).contains(&want) {
        return Err(field_error("lines", format!("1-{MAX_LOG_LINES}")));
    }
    let dir = logs_dir(&state);
    let lines = tokio::task::spawn_blocking(move || svcos_logs::tail_lines(&dir, service, want))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(LogBody::new(name.to_string(), lines)).into_response())
}

/// `GET /api/logs`: every service merged in time order (`svcos-logs` reads and filters).
async fn logs(State(state): State<AppState>, Query(q): Query<svcos_logs::LogQuery>) -> ApiResult {
    let dir = logs_dir(&state);
    let body = tokio::task::spawn_blocking(move || svcos_logs::body(&dir, &q))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(body.map_err(query_error)?).into_response())
}

/// `GET /api/logs/download`: the same lines as text or NDJSON, as a file.
async fn logs_download(
    State(state): State<AppState>,
    Query(q): Query<svcos_logs::LogQuery>,
) -> ApiResult {
    let (dir, now) = (logs_dir(&state), state.clock.now_ms());
    let (text, media, name) =
        tokio::task::spawn_blocking(move || svcos_logs::download(&dir, &q, now))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(query_error)?;
    let disposition = format!("attachment; filename=\"{name}\"");
    Ok((
        [
            (header::CONTENT_TYPE, media.to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        text,
    )
        .into_response())
}

/// Files a log backup holds (`svcos_logs::backup`): the supervisor's logs and hw-agent's reports.
fn backup_files(state: &AppState) -> Vec<(String, PathBuf)> {
    let diagnostics = state.layout.service_state_dir(ServiceName::HwAgent);
    svcos_logs::backup::files(&logs_dir(state), &diagnostics.join("diagnostics"))
}

async fn logs_manifest(State(state): State<AppState>) -> ApiResult {
    let files =
        tokio::task::spawn_blocking(move || svcos_logs::backup::manifest(backup_files(&state)))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(LogsManifestBody::new(files)).into_response())
}

async fn log_backup(State(state): State<AppState>) -> ApiResult {
    let files = backup_files(&state);
    let archive = tokio::task::spawn_blocking(move || svcos_logs::backup::archive(&files))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("log archive: {e}")))?;
    let stamp = svcos_common::time::unix_ms() / 1000;
    let disposition = format!("attachment; filename=\"svcos-logs-{stamp}.tar.gz\"");
    let headers = [
        (header::CONTENT_TYPE, "application/gzip".to_string()),
        (header::CONTENT_DISPOSITION, disposition),
    ];
    Ok((headers, archive).into_response())
}
