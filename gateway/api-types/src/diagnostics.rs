//! Diagnostics: runs (`/api/diagnostics/{board-health,chip-health,hashreport}/*`), the
//! read-only catalogues (failure modes, recovery actions, PSU models), live troubleshooting and
//! the Hacker-mode debug surfaces (`/api/debug/*`).

use serde::Serialize;
use serde_json::Value;
use svcos_proto::hwagent::v1::{
    AsicCommandResponse, ChipRegisterResponse, GetStateMachineResponse, I2cDevice, I2cScanResponse,
    PsuControlResponse, PsuTelemetry, ReportSummary, RunResult, RunState, RunStatus,
    SetFanPidResponse,
};

/// The API word of a run state.
pub fn state_word(state: i32) -> &'static str {
    match RunState::try_from(state).unwrap_or(RunState::Unspecified) {
        RunState::Unspecified => "unspecified",
        RunState::Idle => "idle",
        RunState::Running => "running",
        RunState::Completed => "completed",
        RunState::Cancelled => "cancelled",
        RunState::Failed => "failed",
    }
}

/// A diagnostic run's state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Run {
    /// board-health, chip-health or hashreport.
    pub kind: String,
    /// unspecified, idle, running, completed, cancelled, failed.
    pub state: &'static str,
    /// The run's id (empty before the first run).
    pub run_id: String,
    /// 0-100.
    pub progress_percent: f64,
    /// Start, Unix ms (0 before the first run).
    pub started_ms: i64,
    /// End, Unix ms (0 while running).
    pub finished_ms: i64,
    /// Observation window, s.
    pub duration_s: u32,
    /// Why the run failed (empty otherwise).
    pub error: String,
}

impl From<&RunStatus> for Run {
    fn from(s: &RunStatus) -> Self {
        Run {
            kind: s.kind.clone(),
            state: state_word(s.state),
            run_id: s.run_id.clone(),
            progress_percent: s.progress_percent,
            started_ms: s.started_unix_ms,
            finished_ms: s.finished_unix_ms,
            duration_s: s.duration_s,
            error: s.error.clone(),
        }
    }
}

/// `start`, `status` and `cancel` of a run (`svcos.api.diagnostics.run.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunBody {
    /// `svcos.api.diagnostics.run.v1`.
    pub schema: &'static str,
    #[serde(flatten)]
    pub run: Run,
}

impl From<&RunStatus> for RunBody {
    fn from(s: &RunStatus) -> Self {
        RunBody {
            schema: "svcos.api.diagnostics.run.v1",
            run: s.into(),
        }
    }
}

/// A run's last result (`svcos.api.diagnostics.result.v1`); also the report with `?format=json`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResultBody {
    /// `svcos.api.diagnostics.result.v1`.
    pub schema: &'static str,
    /// The run the result belongs to.
    pub run: Run,
    /// The report's verdict; `null` without a report.
    pub verdict: Value,
    /// hw-agent's report as it stored it; `null` before the first finished run.
    pub report: Value,
}

impl From<&RunResult> for ResultBody {
    fn from(r: &RunResult) -> Self {
        let report: Value = serde_json::from_str(&r.report_json).unwrap_or(Value::Null);
        ResultBody {
            schema: "svcos.api.diagnostics.result.v1",
            run: (&r.status.clone().unwrap_or_default()).into(),
            verdict: report.get("verdict").cloned().unwrap_or(Value::Null),
            report,
        }
    }
}

/// One stored report in the recent list.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReportEntry {
    /// board-health, chip-health or hashreport.
    pub kind: String,
    /// The run's id.
    pub run_id: String,
    /// The run's final state.
    pub state: &'static str,
    /// Start, Unix ms.
    pub started_ms: i64,
    /// End, Unix ms.
    pub finished_ms: i64,
    /// The report's verdict.
    pub verdict: String,
    /// Where the full result is.
    pub result: String,
}

impl From<&ReportSummary> for ReportEntry {
    fn from(r: &ReportSummary) -> Self {
        ReportEntry {
            kind: r.kind.clone(),
            run_id: r.run_id.clone(),
            state: state_word(r.state),
            started_ms: r.started_unix_ms,
            finished_ms: r.finished_unix_ms,
            verdict: r.verdict.clone(),
            result: format!("/api/diagnostics/{}/result", r.kind),
        }
    }
}

/// `GET /api/diagnostics/reports/recent` (`svcos.api.diagnostics.reports.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReportsBody {
    /// `svcos.api.diagnostics.reports.v1`.
    pub schema: &'static str,
    /// Entries in `reports`.
    pub count: usize,
    /// Newest first.
    pub reports: Vec<ReportEntry>,
}

impl From<&[ReportSummary]> for ReportsBody {
    fn from(r: &[ReportSummary]) -> Self {
        ReportsBody {
            schema: "svcos.api.diagnostics.reports.v1",
            count: r.len(),
            reports: r.iter().map(ReportEntry::from).collect(),
        }
    }
}

/// One edge of the run state machine.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Transition {
    /// State before.
    pub from: &'static str,
    /// What moves the run.
    pub event: String,
    /// State after.
    pub to: &'static str,
}

/// `GET /api/diagnostics/state_machine` (`svcos.api.diagnostics.state_machine.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateMachineBody {
    /// `svcos.api.diagnostics.state_machine.v1`.
    pub schema: &'static str,
    /// Where the machine comes from.
    pub source: &'static str,
    /// The run kinds.
    pub kinds: [&'static str; 3],
    /// Every state.
    pub states: Vec<&'static str>,
    /// The state before any run.
    pub initial: &'static str,
    /// States a run ends in.
    pub terminal: Vec<&'static str>,
    /// The edges.
    pub transitions: Vec<Transition>,
    /// Rules the machine does not show.
    pub rules: [&'static str; 3],
}

impl From<&GetStateMachineResponse> for StateMachineBody {
    fn from(m: &GetStateMachineResponse) -> Self {
        StateMachineBody {
            schema: "svcos.api.diagnostics.state_machine.v1",
            source: "generated from hw-agent's run state enum",
            kinds: ["board-health", "chip-health", "hashreport"],
            states: m.states.iter().map(|s| state_word(*s)).collect(),
            initial: state_word(m.initial),
            terminal: m.terminal.iter().map(|s| state_word(*s)).collect(),
            transitions: m
                .transitions
                .iter()
                .map(|t| Transition {
                    from: state_word(t.from),
                    event: t.event.clone(),
                    to: state_word(t.to),
                })
                .collect(),
            rules: [
                "one run per kind at a time; kinds run concurrently",
                "runs observe the mining loop and do not stop it",
                "finished runs are stored by hw-agent and survive its restarts",
            ],
        }
    }
}

// ---- catalogues -------------------------------------------------------------------------

/// A failure mode and the checks that detect it.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailureMode {
    /// Stable id.
    pub id: &'static str,
    /// asic, hashboard, sensor, thermal, fan, psu, board.
    pub component: &'static str,
    /// What the operator sees.
    pub symptom: &'static str,
    /// The check or telemetry that detects it.
    pub detected_by: &'static str,
    /// Ids of [`RECOVERY_ACTIONS`], most likely first.
    pub recovery_actions: &'static [&'static str],
}

const fn mode(
    id: &'static str,
    component: &'static str,
    symptom: &'static str,
    detected_by: &'static str,
    recovery_actions: &'static [&'static str],
) -> FailureMode {
    FailureMode {
        id,
        component,
        symptom,
        detected_by,
        recovery_actions,
    }
}

/// The failure modes svcOS's checks know.
pub const FAILURE_MODES: &[FailureMode] = &[
    mode(
        "chip_dead",
        "asic",
        "a chip stops answering register reads and returns no nonces",
        "chip-health: classification dead",
        &["restart_hw_agent", "power_cycle_chain", "replace_hashboard"],
    ),
    mode(
        "chip_weak",
        "asic",
        "a chip returns HW errors or far fewer nonces than its share",
        "chip-health: classification weak",
        &["lower_frequency", "raise_voltage", "improve_cooling"],
    ),
    mode(
        "chips_missing",
        "hashboard",
        "fewer chips answer enumeration than the board has",
        "board-health: chips check",
        &["power_cycle_chain", "reseat_cable", "replace_hashboard"],
    ),
    mode(
        "chain_no_chips",
        "hashboard",
        "no chip answers on a chain's UART",
        "board-health: state check (missing)",
        &["reseat_cable", "power_cycle_chain", "check_psu"],
    ),
    mode(
        "uart_errors",
        "hashboard",
        "CRC errors on a chain's UART",
        "telemetry: crc errors; chip-health nonce shortfall",
        &["reseat_cable", "lower_baud"],
    ),
    mode(
        "sensor_missing",
        "sensor",
        "a temperature sensor stops acknowledging on I2C",
        "board-health: temp and i2c checks",
        &["reseat_cable", "replace_hashboard"],
    ),
    mode(
        "overheat",
        "thermal",
        "a sensor reads at or above the dangerous limit; mining stops",
        "board-health: temp checks; telemetry state overheat",
        &["improve_cooling", "lower_frequency"],
    ),
    mode(
        "fan_stalled",
        "fan",
        "a driven fan reports 0 rpm",
        "board-health: fan checks",
        &["replace_fan"],
    ),
    mode(
        "psu_fault",
        "psu",
        "the PSU reports a fault in its status word or stops answering",
        "board-health: psu check",
        &["check_psu", "clear_psu_fault"],
    ),
    mode(
        "psu_voltage_off",
        "psu",
        "the PSU output is far from its setpoint",
        "board-health: voltage check",
        &["check_psu"],
    ),
    mode(
        "hashrate_low",
        "board",
        "measured hashrate well under nominal",
        "hashreport: percent of nominal",
        &["run_chip_health", "improve_cooling"],
    ),
];

/// A recovery action and how to perform it.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecoveryAction {
    /// Stable id (what [`FailureMode::recovery_actions`] names).
    pub id: &'static str,
    /// What it does.
    pub description: &'static str,
    /// The API call or manual step that performs it.
    pub how: &'static str,
}

const fn action(id: &'static str, description: &'static str, how: &'static str) -> RecoveryAction {
    RecoveryAction {
        id,
        description,
        how,
    }
}

/// The recovery actions the failure modes point to.
pub const RECOVERY_ACTIONS: &[RecoveryAction] = &[
    action(
        "restart_hw_agent",
        "restart the hardware agent; running chains are re-attached",
        "POST /api/action/restart {\"service\": \"hw-agent\"}",
    ),
    action(
        "power_cycle_chain",
        "switch a chain off and on again: the chips are reset and brought up from cold",
        "disable then enable the chain (hw-agent SetChainEnabled)",
    ),
    action(
        "lower_frequency",
        "lower the chip frequency of a chain or chip",
        "POST /api/debug/chip/frequency (Hacker mode)",
    ),
    action(
        "raise_voltage",
        "raise the chain voltage within the PSU's range",
        "POST /api/debug/chip/voltage (Hacker mode)",
    ),
    action(
        "lower_baud",
        "lower the chain UART speed",
        "[hardware].baud in the config, then restart hw-agent",
    ),
    action(
        "improve_cooling",
        "more airflow or a lower target temperature",
        "POST /api/fan; clean filters and heatsinks",
    ),
    action(
        "clear_psu_fault",
        "switch the PSU output off and on",
        "POST /api/debug/psu/control (Hacker mode)",
    ),
    action(
        "check_psu",
        "check the PSU's input, cabling and rating against the board",
        "GET /api/hardware/psu_catalog",
    ),
    action(
        "reseat_cable",
        "power down, reseat the hashboard's data and power cables",
        "manual",
    ),
    action("replace_fan", "replace the fan", "manual"),
    action(
        "replace_hashboard",
        "replace or repair the hashboard",
        "manual",
    ),
    action(
        "run_chip_health",
        "find which chips hold the hashrate back",
        "POST /api/diagnostics/chip-health/start",
    ),
];

/// `GET /api/diagnostics/failure_modes` (`svcos.api.diagnostics.failure_modes.v1`).
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailureModesBody {
    /// `svcos.api.diagnostics.failure_modes.v1`.
    pub schema: &'static str,
    /// The catalogue.
    pub entries: &'static [FailureMode],
}

/// The failure-mode catalogue as served.
pub const FAILURE_MODES_BODY: FailureModesBody = FailureModesBody {
    schema: "svcos.api.diagnostics.failure_modes.v1",
    entries: FAILURE_MODES,
};

/// `GET /api/diagnostics/recovery_actions` (`svcos.api.diagnostics.recovery_actions.v1`).
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecoveryActionsBody {
    /// `svcos.api.diagnostics.recovery_actions.v1`.
    pub schema: &'static str,
    /// The catalogue.
    pub entries: &'static [RecoveryAction],
}

/// The recovery-action catalogue as served.
pub const RECOVERY_ACTIONS_BODY: RecoveryActionsBody = RecoveryActionsBody {
    schema: "svcos.api.diagnostics.recovery_actions.v1",
    entries: RECOVERY_ACTIONS,
};

/// The PSU catalogue lives with its rule in `svcos_common::psu`.
pub use svcos_common::psu::{PSU_MODELS, PsuModel};

/// The PSU fitted, from telemetry.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FittedPsu {
    /// Model as the PSU reports it.
    pub model: String,
    /// Output on.
    pub enabled: bool,
    /// Measured output, V.
    pub voltage_v: f64,
    /// Output setpoint, V.
    pub setpoint_v: f64,
}

/// `GET /api/hardware/psu_catalog` (`svcos.api.hardware.psu_catalog.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuCatalogBody {
    /// `svcos.api.hardware.psu_catalog.v1`.
    pub schema: &'static str,
    /// What the driver speaks.
    pub driver: &'static str,
    /// The PSU fitted; `null` while hw-agent is down or reports none.
    pub fitted: Option<FittedPsu>,
    /// The models the driver knows.
    pub entries: &'static [PsuModel],
}

impl PsuCatalogBody {
    /// The catalogue with the fitted PSU from telemetry, if any.
    pub fn new(fitted: Option<&PsuTelemetry>) -> Self {
        PsuCatalogBody {
            schema: "svcos.api.hardware.psu_catalog.v1",
            driver: "PMBus subset at I2C 0x10 (OPERATION, VOUT_COMMAND 1000-16000 mV, STATUS_WORD, READ_VOUT/IOUT/POUT/TEMPERATURE_1, MFR_MODEL)",
            fitted: fitted.map(|p| FittedPsu {
                model: p.model.clone(),
                enabled: p.enabled,
                voltage_v: p.voltage_v,
                setpoint_v: p.voltage_setpoint_v,
            }),
            entries: PSU_MODELS,
        }
    }
}

// ---- live troubleshooting ---------------------------------------------------------------

/// One I2C address of a scan.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct I2cAddress {
    /// 7-bit address.
    pub address: u32,
    /// The address as `0x..`.
    pub address_hex: String,
    /// The device svcOS expects there (empty when none).
    pub expected: String,
}

impl From<&I2cDevice> for I2cAddress {
    fn from(d: &I2cDevice) -> Self {
        I2cAddress {
            address: d.address,
            address_hex: format!("{:#04x}", d.address),
            expected: d.expected.clone(),
        }
    }
}

/// `GET /api/diagnostics/troubleshoot/i2c-scan` (`svcos.api.diagnostics.i2c_scan.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct I2cScanBody {
    /// `svcos.api.diagnostics.i2c_scan.v1`.
    pub schema: &'static str,
    /// The bus number.
    pub bus: u32,
    /// The probed address range.
    pub range: [&'static str; 2],
    /// Addresses that acknowledged.
    pub present: Vec<I2cAddress>,
    /// Expected devices that did not acknowledge.
    pub missing: Vec<I2cAddress>,
}

impl From<&I2cScanResponse> for I2cScanBody {
    fn from(r: &I2cScanResponse) -> Self {
        I2cScanBody {
            schema: "svcos.api.diagnostics.i2c_scan.v1",
            bus: r.bus,
            range: ["0x03", "0x77"],
            present: r.present.iter().map(I2cAddress::from).collect(),
            missing: r.missing.iter().map(I2cAddress::from).collect(),
        }
    }
}

/// A path that would show an FPGA, and whether it does.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Evidence {
    /// sysfs / devfs / device-tree path.
    pub path: &'static str,
    /// It exists (a directory: and is not empty).
    pub present: bool,
}

/// `GET /api/diagnostics/troubleshoot/fpga` (`svcos.api.diagnostics.fpga.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FpgaBody {
    /// `svcos.api.diagnostics.fpga.v1`.
    pub schema: &'static str,
    /// The configured hardware driver.
    pub driver: String,
    /// Some evidence path is present.
    pub fpga_present: bool,
    /// The device tree's model; `null` off device-tree boards.
    pub control_board_model: Option<String>,
    /// One sentence for the operator.
    pub summary: &'static str,
    /// What was looked at.
    pub evidence: Vec<Evidence>,
}

// ---- debug ------------------------------------------------------------------------------

/// Bytes as lowercase hex pairs separated by spaces.
pub fn hex_string(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `GET /api/debug/i2c` (`svcos.api.debug.i2c.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct I2cReadBody {
    /// `svcos.api.debug.i2c.v1`.
    pub schema: &'static str,
    /// The bus number.
    pub bus: u32,
    /// 7-bit address.
    pub address: u32,
    /// The register pointer written first; `null` for a plain read.
    pub register: Option<u8>,
    /// Bytes read.
    pub data: Vec<u8>,
    /// `data` as hex.
    pub hex: String,
}

/// `POST /api/debug/i2c` (`svcos.api.debug.i2c.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct I2cWriteBody {
    /// `svcos.api.debug.i2c.v1`.
    pub schema: &'static str,
    /// The bus number.
    pub bus: u32,
    /// 7-bit address.
    pub address: u32,
    /// Bytes written, as hex.
    pub written: String,
    /// Bytes read back.
    pub data: Vec<u8>,
    /// `data` as hex.
    pub hex: String,
}

/// `GET`/`POST /api/debug/registers` (`svcos.api.debug.register.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegisterBody {
    /// `svcos.api.debug.register.v1`.
    pub schema: &'static str,
    /// Chain number.
    pub chain_id: u32,
    /// Chip index on the chain.
    pub chip: u32,
    /// The chip's UART address.
    pub chip_address: u32,
    /// Register number.
    pub register: u32,
    /// `register` as `0x..`.
    pub register_hex: String,
    /// The chip answered.
    pub answered: bool,
    /// The value; `null` when the chip did not answer.
    pub value: Option<u32>,
    /// `value` as `0x........`; `null` when the chip did not answer.
    pub value_hex: Option<String>,
}

impl RegisterBody {
    /// The answer of a register read or write on `chain_id`/`chip`.
    pub fn new(chain_id: u32, chip: u32, r: &ChipRegisterResponse) -> Self {
        RegisterBody {
            schema: "svcos.api.debug.register.v1",
            chain_id,
            chip,
            chip_address: r.chip_address,
            register: r.register,
            register_hex: format!("{:#04x}", r.register),
            answered: r.answered,
            value: r.answered.then_some(r.value),
            value_hex: r.answered.then(|| format!("{:#010x}", r.value)),
        }
    }
}

/// One register reply to a raw command.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegisterReply {
    /// The answering chip's UART address.
    pub chip_address: u32,
    /// Register number.
    pub register: u32,
    /// The value.
    pub value: u32,
    /// `value` as `0x........`.
    pub value_hex: String,
}

/// `POST /api/debug/asic-command` (`svcos.api.debug.asic_command.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AsicCommandBody {
    /// `svcos.api.debug.asic_command.v1`.
    pub schema: &'static str,
    /// Chain number.
    pub chain_id: u32,
    /// The whole frame sent, as hex.
    pub sent: String,
    /// Replies within the wait.
    pub responses: Vec<RegisterReply>,
}

impl AsicCommandBody {
    /// The answer to a command sent on `chain_id`.
    pub fn new(chain_id: u32, r: &AsicCommandResponse) -> Self {
        AsicCommandBody {
            schema: "svcos.api.debug.asic_command.v1",
            chain_id,
            sent: hex_string(&r.sent),
            responses: r
                .responses
                .iter()
                .map(|x| RegisterReply {
                    chip_address: x.chip_address,
                    register: x.register,
                    value: x.value,
                    value_hex: format!("{:#010x}", x.value),
                })
                .collect(),
        }
    }
}

/// `POST /api/debug/psu/control` (`svcos.api.debug.psu.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PsuControlBody {
    /// `svcos.api.debug.psu.v1`.
    pub schema: &'static str,
    /// Output on.
    pub enabled: bool,
    /// Output setpoint, mV.
    pub voltage_setpoint_mv: f64,
}

impl From<&PsuControlResponse> for PsuControlBody {
    fn from(r: &PsuControlResponse) -> Self {
        PsuControlBody {
            schema: "svcos.api.debug.psu.v1",
            enabled: r.enabled,
            voltage_setpoint_mv: r.voltage_setpoint_mv,
        }
    }
}

/// `POST /api/debug/pid-params` (`svcos.api.debug.pid.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PidBody {
    /// `svcos.api.debug.pid.v1`.
    pub schema: &'static str,
    /// Proportional gain.
    pub kp: f64,
    /// Integral gain.
    pub ki: f64,
    /// Derivative gain.
    pub kd: f64,
}

impl From<&SetFanPidResponse> for PidBody {
    fn from(r: &SetFanPidResponse) -> Self {
        PidBody {
            schema: "svcos.api.debug.pid.v1",
            kp: r.kp,
            ki: r.ki,
            kd: r.kd,
        }
    }
}

// ---- logs -------------------------------------------------------------------------------

/// `GET /api/debug/log` (`svcos.api.debug.log.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogBody {
    /// `svcos.api.debug.log.v1`.
    pub schema: &'static str,
    /// The service whose log this is.
    pub service: String,
    /// Which file the lines come from.
    pub source: &'static str,
    /// Entries in `lines`.
    pub count: usize,
    /// Oldest first.
    pub lines: Vec<String>,
}

impl LogBody {
    /// The last lines of `service`'s recent-log file.
    pub fn new(service: String, lines: Vec<String>) -> Self {
        LogBody {
            schema: "svcos.api.debug.log.v1",
            service,
            source: "supervisor recent-log file (<runtime>/logs/<service>.log)",
            count: lines.len(),
            lines,
        }
    }
}

/// One line of the merged log (`GET /api/logs`, `/ws?topic=logs`): every service's recent-log
/// file, stamped by the supervisor as it read the line, secrets masked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogEntry {
    /// When the supervisor read the line, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The same instant, Unix ms.
    pub time_ms: i64,
    /// The service that wrote it.
    pub service: String,
    /// `trace`, `debug`, `info`, `warn` or `error` (a line without a level counts as `info`, a
    /// panic's as `error`).
    pub level: &'static str,
    /// The line after its level, secrets masked.
    pub message: String,
}

/// `GET /api/logs` (`svcos.api.logs.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogsBody {
    /// `svcos.api.logs.v1`.
    pub schema: &'static str,
    /// Entries in `entries`.
    pub count: usize,
    /// More lines matched than `limit`: the oldest were left out.
    pub truncated: bool,
    /// Oldest first, every service merged in time order.
    pub entries: Vec<LogEntry>,
}

/// One file of a log backup.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogFile {
    /// Name in the archive.
    pub name: String,
    /// Size; `null` when it cannot be read.
    pub bytes: Option<u64>,
    /// Last change, Unix ms; `null` when unknown.
    pub modified_ms: Option<u64>,
    /// The gateway can open it.
    pub readable: bool,
}

/// `GET /api/diagnostics/logs/manifest` (`svcos.api.diagnostics.logs_manifest.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogsManifestBody {
    /// `svcos.api.diagnostics.logs_manifest.v1`.
    pub schema: &'static str,
    /// Where the archive is.
    pub backup: &'static str,
    /// What an archive never holds.
    pub excluded: [&'static str; 2],
    /// Entries in `files`.
    pub count: usize,
    /// The files.
    pub files: Vec<LogFile>,
}

impl LogsManifestBody {
    /// The manifest of `files`.
    pub fn new(files: Vec<LogFile>) -> Self {
        LogsManifestBody {
            schema: "svcos.api.diagnostics.logs_manifest.v1",
            backup: "/api/log/backup",
            excluded: [
                "config (pool passwords)",
                "auth state (password hash, sessions)",
            ],
            count: files.len(),
            files,
        }
    }
}
