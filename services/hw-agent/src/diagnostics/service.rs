//! `HwDiagnosticsService`: diagnostic runs and the debug calls. Like the main API, no handler
//! touches a device: reads and writes go to the board or chain thread as commands.

use std::sync::Arc;
use std::time::Duration;
use svcos_common::bounds::VOLTAGE_MV;

use serde_json::json;
use svcos_bm13xx::{Command, HostFrame, PREAMBLE_HOST, crc5, reg};
use svcos_common::status::ToStatus;
use svcos_proto::hwagent::v1::hw_diagnostics_service_server::HwDiagnosticsService;
use svcos_proto::hwagent::v1::*;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::audit::AuditLog;
use super::checks::{self, Context, Outcome};
use super::store::{Store, StoredReport};
use super::{RunEvent, RunKind, RunState, Slot, Slots, transitions};
use crate::chain::ChainCommand;
use crate::control::{ControlCommand, PsuIdentity};
use crate::error::HwError;

/// Lowest and highest 7-bit address a scan or raw transfer may touch (0x00-0x02 and
/// 0x78-0x7F are reserved by the I2C specification).
const I2C_ADDRESSES: std::ops::RangeInclusive<u32> = 0x03..=0x77;
/// Longest raw I2C write / read.
const I2C_MAX_WRITE: usize = 32;
const I2C_MAX_READ: usize = 64;
/// Longest a raw ASIC command collects responses.
const ASIC_MAX_WAIT_MS: u32 = 2000;
/// How long CancelRun waits for the run to wind down.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// The chips' on-die PVT registers, read with one broadcast read each.
const PVT_REGISTERS: [u8; 3] = [reg::PVT_TEMPERATURE, reg::PVT_VOLTAGE, reg::PVT_PROCESS];

/// How long a broadcast read collects answers: twice the wire time of one 11-byte response
/// per chip at the chain's baud, and never under 50 ms.
fn broadcast_wait(chips: usize, baud: u32) -> Duration {
    let wire_s = chips as f64 * (svcos_bm13xx::RESPONSE_LEN as f64 * 10.0) / f64::from(baud.max(1));
    Duration::from_secs_f64((2.0 * wire_s + 0.02).max(0.05))
}

/// The service.
#[derive(Clone)]
pub struct Diagnostics {
    ctx: Context,
    slots: Slots,
    store: Store,
    audit: Arc<AuditLog>,
}

fn fail(e: HwError) -> Status {
    e.to_status()
}

fn invalid(field: &'static str, message: impl Into<String>) -> Status {
    fail(HwError::InvalidArgument {
        field,
        message: message.into(),
    })
}

fn kind_of(name: &str) -> Result<RunKind, Status> {
    RunKind::parse(name).ok_or_else(|| {
        invalid(
            "kind",
            format!("{name:?}: one of board-health, chip-health, hashreport"),
        )
    })
}

impl Diagnostics {
    /// The service over a run context, keeping reports (and the audit log) in `store`'s
    /// directory. Blocking: reads the last reports.
    pub fn new(ctx: Context, store: Store) -> Self {
        let slots = Slots::new(|k| store.latest(k));
        let audit = Arc::new(AuditLog::new(store.dir()));
        Diagnostics {
            ctx,
            slots,
            store,
            audit,
        }
    }

    fn status(&self, kind: RunKind) -> RunStatus {
        self.slots.with(kind, |s| s.status(kind))
    }

    fn start(&self, kind: RunKind, duration_s: u32) -> Result<RunStatus, Status> {
        let duration_s = if duration_s == 0 {
            kind.default_duration_s()
        } else {
            duration_s
        };
        let range = kind.duration_range();
        if !range.contains(&duration_s) {
            return Err(invalid(
                "duration_s",
                format!("{}-{} s for {}", range.start(), range.end(), kind.as_str()),
            ));
        }
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let started = svcos_common::time::unix_ms();
        let status = self.slots.with(kind, |s| {
            let next = s.state.next(RunEvent::Start).ok_or_else(|| {
                fail(HwError::FailedPrecondition(format!(
                    "a {} run ({}) is already running",
                    kind.as_str(),
                    s.run_id
                )))
            })?;
            *s = Slot {
                state: next,
                run_id: format!("{}-{started}", kind.as_str()),
                progress_percent: 0.0,
                started_unix_ms: started,
                finished_unix_ms: 0,
                duration_s,
                error: String::new(),
                cancel: Some(cancel_tx),
            };
            Ok::<_, Status>(s.status(kind))
        })?;
        tracing::info!(kind = kind.as_str(), duration_s, "diagnostic run started");
        let me = self.clone();
        tokio::spawn(async move { me.finish(kind, duration_s, cancel_rx).await });
        Ok(status)
    }

    async fn finish(self, kind: RunKind, duration_s: u32, cancel: watch::Receiver<bool>) {
        let slots = self.slots.clone();
        let progress = Box::new(move |p: f64| {
            slots.with(kind, |s| {
                if s.state == RunState::Running {
                    s.progress_percent = (p * 10.0).round() / 10.0;
                }
            })
        });
        let outcome = checks::run(kind, self.ctx.clone(), duration_s, progress, cancel).await;
        let (event, verdict, report, markdown, error) = match outcome {
            Outcome::Completed(r, v, md) => (RunEvent::Finish, v, r, md, String::new()),
            Outcome::Cancelled(r, md) => (RunEvent::Cancel, "", r, md, String::new()),
            Outcome::Failed(e) => (RunEvent::Fail, "", json!(null), String::new(), e),
        };
        let finished = svcos_common::time::unix_ms();
        let stored = self.slots.with(kind, |s| StoredReport {
            kind: kind.as_str().into(),
            run_id: s.run_id.clone(),
            state: s.state.next(event).unwrap_or(RunState::Failed),
            started_unix_ms: s.started_unix_ms,
            finished_unix_ms: finished,
            duration_s,
            progress_percent: if event == RunEvent::Finish {
                100.0
            } else {
                s.progress_percent
            },
            error: error.clone(),
            verdict: verdict.into(),
            report,
            markdown,
        });
        // Persist before the state flips, so "completed" always has its result on disk.
        let store = self.store.clone();
        let to_save = stored.clone();
        match tokio::task::spawn_blocking(move || store.save(&to_save)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "diagnostic report not saved"),
            Err(e) => tracing::warn!(error = %e, "diagnostic report not saved"),
        }
        tracing::info!(
            kind = kind.as_str(),
            state = stored.state.as_str(),
            verdict,
            "diagnostic run ended"
        );
        self.slots.with(kind, |s| {
            s.state = stored.state;
            s.finished_unix_ms = finished;
            s.progress_percent = stored.progress_percent;
            s.error = error;
            s.cancel = None;
        });
    }

    async fn latest(&self, kind: Option<RunKind>) -> Vec<StoredReport> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || match kind {
            Some(k) => store.latest(k).into_iter().collect(),
            None => store.list(),
        })
        .await
        .unwrap_or_default()
    }

    /// One chain's PVT table: a broadcast read of each PVT register, answers matched to the
    /// chips by address. Mining goes on meanwhile (nonces are accounted as they arrive).
    async fn chain_pvt(&self, chain: u32) -> ChainPvt {
        let snap = self.ctx.chains[chain as usize].snapshot.borrow().clone();
        let (board_c, chip_c) = self.ctx.board.borrow().chain_temps(chain);
        let mut out = ChainPvt {
            chain_id: chain,
            chips: Vec::new(),
            error: String::new(),
            sensor_board_c: board_c,
            sensor_chip_c: chip_c,
        };
        let wait = broadcast_wait(snap.chips.len(), snap.baud);
        let mut raw = vec![[None::<u32>; 3]; snap.chips.len()];
        for (slot, register) in PVT_REGISTERS.into_iter().enumerate() {
            let answers = self
                .ctx
                .chain_call(chain, |reply| ChainCommand::Raw {
                    command: Command::ReadRegister {
                        target: svcos_bm13xx::Target::All,
                        register,
                    },
                    wait,
                    reply,
                })
                .await
                .and_then(|r| r.map_err(HwError::from));
            match answers {
                Ok(answers) => {
                    for a in answers.iter().filter(|a| a.register == register) {
                        if let Some(i) = snap.chips.iter().position(|c| c.address == a.chip_address)
                        {
                            raw[i][slot] = Some(a.value);
                        }
                    }
                }
                Err(e) => {
                    out.error = e.to_string();
                    return out;
                }
            }
        }
        out.chips = snap
            .chips
            .iter()
            .zip(raw)
            .enumerate()
            .map(|(i, (c, r))| {
                let answered = r.iter().all(Option::is_some);
                let p = svcos_bm13xx::Pvt::decode(
                    r[0].unwrap_or(0),
                    r[1].unwrap_or(0),
                    r[2].unwrap_or(0),
                );
                ChipPvt {
                    chip: i as u32,
                    address: u32::from(c.address),
                    answered,
                    temperature_c: p.temperature_c,
                    voltage_mv: p.voltage_mv,
                    ring_oscillator_mhz: p.ring_oscillator_mhz,
                }
            })
            .collect();
        out
    }

    fn chain_ok(&self, chain: u32) -> Result<(), Status> {
        if (chain as usize) < self.ctx.chains.len() {
            Ok(())
        } else {
            Err(fail(HwError::NoSuchChain {
                chain,
                chains: self.ctx.chains.len() as u32,
            }))
        }
    }
}

fn stored_status(r: &StoredReport) -> RunStatus {
    RunStatus {
        kind: r.kind.clone(),
        state: r.state.wire() as i32,
        run_id: r.run_id.clone(),
        progress_percent: r.progress_percent,
        started_unix_ms: r.started_unix_ms,
        finished_unix_ms: r.finished_unix_ms,
        duration_s: r.duration_s,
        error: r.error.clone(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tonic::async_trait]
impl HwDiagnosticsService for Diagnostics {
    async fn start_run(
        &self,
        request: Request<StartRunRequest>,
    ) -> Result<Response<RunStatus>, Status> {
        let r = request.into_inner();
        let kind = kind_of(&r.kind)?;
        self.start(kind, r.duration_s).map(Response::new)
    }

    async fn get_run_status(
        &self,
        request: Request<RunRequest>,
    ) -> Result<Response<RunStatus>, Status> {
        let kind = kind_of(&request.into_inner().kind)?;
        Ok(Response::new(self.status(kind)))
    }

    async fn cancel_run(
        &self,
        request: Request<RunRequest>,
    ) -> Result<Response<RunStatus>, Status> {
        let kind = kind_of(&request.into_inner().kind)?;
        let sent = self.slots.with(kind, |s| match (&s.cancel, s.state) {
            (Some(tx), RunState::Running) => {
                let _ = tx.send(true);
                true
            }
            _ => false,
        });
        if !sent {
            return Err(fail(HwError::FailedPrecondition(format!(
                "no {} run is running",
                kind.as_str()
            ))));
        }
        // The run stops at its next check (within a second, or after one register read).
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        while self.slots.with(kind, |s| s.state == RunState::Running)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Response::new(self.status(kind)))
    }

    async fn get_run_result(
        &self,
        request: Request<RunRequest>,
    ) -> Result<Response<RunResult>, Status> {
        let kind = kind_of(&request.into_inner().kind)?;
        let r = self
            .latest(Some(kind))
            .await
            .into_iter()
            .next()
            .ok_or_else(|| {
                Status::not_found(format!("no {} run has finished yet", kind.as_str()))
            })?;
        Ok(Response::new(RunResult {
            status: Some(stored_status(&r)),
            report_json: r.report.to_string(),
            report_markdown: r.markdown,
        }))
    }

    async fn list_reports(
        &self,
        request: Request<ListReportsRequest>,
    ) -> Result<Response<ListReportsResponse>, Status> {
        let limit = match request.into_inner().limit {
            0 => usize::MAX,
            n => n as usize,
        };
        let reports = self
            .latest(None)
            .await
            .into_iter()
            .take(limit)
            .map(|r| ReportSummary {
                kind: r.kind,
                run_id: r.run_id,
                state: r.state.wire() as i32,
                started_unix_ms: r.started_unix_ms,
                finished_unix_ms: r.finished_unix_ms,
                verdict: r.verdict,
            })
            .collect();
        Ok(Response::new(ListReportsResponse { reports }))
    }

    async fn get_state_machine(
        &self,
        _request: Request<GetStateMachineRequest>,
    ) -> Result<Response<GetStateMachineResponse>, Status> {
        Ok(Response::new(GetStateMachineResponse {
            states: RunState::ALL.iter().map(|s| s.wire() as i32).collect(),
            transitions: transitions()
                .into_iter()
                .map(|(from, event, to)| StateTransition {
                    from: from.wire() as i32,
                    to: to.wire() as i32,
                    event: event.as_str().into(),
                })
                .collect(),
            initial: RunState::Idle.wire() as i32,
            terminal: RunState::ALL
                .iter()
                .filter(|s| s.is_terminal())
                .map(|s| s.wire() as i32)
                .collect(),
        }))
    }

    async fn i2c_transfer(
        &self,
        request: Request<I2cTransferRequest>,
    ) -> Result<Response<I2cTransferResponse>, Status> {
        let r = request.into_inner();
        if !I2C_ADDRESSES.contains(&r.address) {
            return Err(invalid("address", "a 7-bit address 0x03-0x77"));
        }
        if r.write.len() > I2C_MAX_WRITE {
            return Err(invalid("write", format!("at most {I2C_MAX_WRITE} bytes")));
        }
        if r.read_len as usize > I2C_MAX_READ {
            return Err(invalid("read_len", format!("at most {I2C_MAX_READ} bytes")));
        }
        if r.write.is_empty() && r.read_len == 0 {
            return Err(invalid("write", "nothing to write or read"));
        }
        // A lone register pointer before a read is a read; anything else changes the device.
        let writes = r.write.len() > 1 || (r.write.len() == 1 && r.read_len == 0);
        let address = r.address as u16;
        let write = r.write.clone();
        let read = self
            .ctx
            .board_call(|reply| ControlCommand::I2cTransfer {
                address,
                write,
                read_len: r.read_len as usize,
                reply,
            })
            .await
            .map_err(fail)?;
        if writes {
            self.audit.record(
                "i2c_write",
                json!({"bus": self.ctx.i2c_bus, "address": format!("{address:#04x}"),
                       "bytes": hex(&r.write), "ok": read.is_ok()}),
            );
        }
        let read = read.map_err(fail)?;
        Ok(Response::new(I2cTransferResponse {
            read,
            bus: self.ctx.i2c_bus,
        }))
    }

    async fn i2c_scan(
        &self,
        _request: Request<I2cScanRequest>,
    ) -> Result<Response<I2cScanResponse>, Status> {
        let addresses: Vec<u16> = I2C_ADDRESSES.map(|a| a as u16).collect();
        let present = self
            .ctx
            .board_call(|reply| ControlCommand::I2cProbe { addresses, reply })
            .await
            .map_err(fail)?;
        let expected = self.ctx.expected_i2c();
        let name = |a: u16| {
            expected
                .iter()
                .find(|(e, _)| *e == a)
                .map(|(_, n)| n.clone())
                .unwrap_or_default()
        };
        Ok(Response::new(I2cScanResponse {
            bus: self.ctx.i2c_bus,
            present: present
                .iter()
                .map(|&a| I2cDevice {
                    address: u32::from(a),
                    expected: name(a),
                })
                .collect(),
            missing: expected
                .iter()
                .filter(|(a, _)| !present.contains(a))
                .map(|(a, n)| I2cDevice {
                    address: u32::from(*a),
                    expected: n.clone(),
                })
                .collect(),
        }))
    }

    async fn chip_register(
        &self,
        request: Request<ChipRegisterRequest>,
    ) -> Result<Response<ChipRegisterResponse>, Status> {
        let r = request.into_inner();
        self.chain_ok(r.chain_id)?;
        let register = u8::try_from(r.register).map_err(|_| invalid("register", "0x00-0xff"))?;
        if r.value.is_some() {
            refuse_register_write(register)?;
        }
        let reply = self
            .ctx
            .chain_call(r.chain_id, |reply| ChainCommand::Register {
                chip: r.chip,
                register,
                value: r.value,
                reply,
            })
            .await
            .map_err(fail)?;
        if let Some(v) = r.value {
            self.audit.record(
                "chip_register_write",
                json!({"chain_id": r.chain_id, "chip": r.chip,
                       "register": format!("{register:#04x}"), "value": format!("{v:#010x}"),
                       "ok": reply.is_ok()}),
            );
        }
        let (address, value) = reply.map_err(|e| fail(e.into()))?;
        Ok(Response::new(ChipRegisterResponse {
            chip_address: u32::from(address),
            register: u32::from(register),
            value: value.unwrap_or(0),
            answered: value.is_some(),
        }))
    }

    async fn asic_command(
        &self,
        request: Request<AsicCommandRequest>,
    ) -> Result<Response<AsicCommandResponse>, Status> {
        let r = request.into_inner();
        self.chain_ok(r.chain_id)?;
        let command = parse_command(&r.frame)?;
        let wait_ms = if r.wait_ms == 0 { 100 } else { r.wait_ms };
        if wait_ms > ASIC_MAX_WAIT_MS {
            return Err(invalid("wait_ms", format!("at most {ASIC_MAX_WAIT_MS}")));
        }
        let sent = command.encode();
        let reply = self
            .ctx
            .chain_call(r.chain_id, |reply| ChainCommand::Raw {
                command,
                wait: Duration::from_millis(u64::from(wait_ms)),
                reply,
            })
            .await
            .map_err(fail)?;
        self.audit.record(
            "asic_command",
            json!({"chain_id": r.chain_id, "frame": hex(&sent), "ok": reply.is_ok()}),
        );
        let responses = reply
            .map_err(|e| fail(e.into()))?
            .into_iter()
            .map(|x| RegisterReply {
                chip_address: u32::from(x.chip_address),
                register: u32::from(x.register),
                value: x.value,
            })
            .collect();
        Ok(Response::new(AsicCommandResponse { sent, responses }))
    }

    async fn psu_control(
        &self,
        request: Request<PsuControlRequest>,
    ) -> Result<Response<PsuControlResponse>, Status> {
        let r = request.into_inner();
        if r.enabled.is_none() && r.voltage_mv.is_none() {
            return Err(invalid("enabled", "give enabled and/or voltage_mv"));
        }
        if let Some(mv) = r.voltage_mv
            && !VOLTAGE_MV.contains(mv)
        {
            return Err(invalid(
                "voltage_mv",
                format!("{} (the PSU's VOUT_COMMAND range)", VOLTAGE_MV.describe()),
            ));
        }
        let mut result: Result<(), HwError> = Ok(());
        if let Some(mv) = r.voltage_mv {
            result = self
                .ctx
                .board_call(|reply| ControlCommand::SetVoltage { mv, reply })
                .await
                .and_then(|r| r)
                .map(|_| ());
        }
        if let (Ok(()), Some(on)) = (&result, r.enabled) {
            result = self
                .ctx
                .board_call(|reply| ControlCommand::SetPsuEnabled { on, reply })
                .await
                .and_then(|r| r);
        }
        self.audit.record(
            "psu_control",
            json!({"enabled": r.enabled, "voltage_mv": r.voltage_mv, "ok": result.is_ok()}),
        );
        result.map_err(fail)?;
        let psu = &self.ctx.board.borrow().psu;
        Ok(Response::new(PsuControlResponse {
            enabled: r.enabled.unwrap_or(psu.enabled),
            voltage_setpoint_mv: r.voltage_mv.unwrap_or(psu.setpoint_v * 1000.0),
        }))
    }

    async fn set_fan_pid(
        &self,
        request: Request<SetFanPidRequest>,
    ) -> Result<Response<SetFanPidResponse>, Status> {
        let r = request.into_inner();
        for (field, v, max) in [("kp", r.kp, 100.0), ("ki", r.ki, 10.0), ("kd", r.kd, 100.0)] {
            if !v.is_finite() || !(0.0..=max).contains(&v) {
                return Err(invalid(field, format!("0-{max}")));
            }
        }
        let (kp, ki, kd) = self
            .ctx
            .board_call(|reply| ControlCommand::SetFanPid {
                gains: (r.kp, r.ki, r.kd),
                reply,
            })
            .await
            .map_err(fail)?;
        self.audit
            .record("fan_pid", json!({"kp": kp, "ki": ki, "kd": kd}));
        Ok(Response::new(SetFanPidResponse { kp, ki, kd }))
    }

    async fn get_pic_info(
        &self,
        _request: Request<GetPicInfoRequest>,
    ) -> Result<Response<GetPicInfoResponse>, Status> {
        let pics = self
            .ctx
            .board_call(|reply| ControlCommand::ReadPics { reply })
            .await
            .map_err(fail)?;
        let boards = pics
            .into_iter()
            .map(|p| {
                let (reading, error) = match p.reading {
                    Ok(r) => (Some(r), String::new()),
                    Err(e) => (None, e),
                };
                PicInfo {
                    chain_id: p.pic.chain_id,
                    address: u32::from(p.pic.address),
                    answered: reading.is_some(),
                    firmware_version: reading.map(|r| u32::from(r.firmware_version)),
                    setpoint_mv: reading.map(|r| r.setpoint_mv),
                    measured_mv: reading.map(|r| r.measured_mv),
                    written_mv: p.written_mv,
                    error,
                }
            })
            .collect();
        Ok(Response::new(GetPicInfoResponse {
            bus: self.ctx.i2c_bus,
            boards,
        }))
    }

    async fn get_psu_bypass_matrix(
        &self,
        _request: Request<GetPsuBypassMatrixRequest>,
    ) -> Result<Response<GetPsuBypassMatrixResponse>, Status> {
        let id = self
            .ctx
            .board_call(|reply| ControlCommand::ReadPsuIdentity { reply })
            .await
            .map_err(fail)?;
        Ok(Response::new(GetPsuBypassMatrixResponse {
            rows: svcos_common::psu::matrix().iter().map(bypass_row).collect(),
            fitted: id.as_ref().map(fitted_window),
        }))
    }

    async fn get_pvt_table(
        &self,
        _request: Request<GetPvtTableRequest>,
    ) -> Result<Response<GetPvtTableResponse>, Status> {
        let chains =
            futures::future::join_all((0..self.ctx.chains.len() as u32).map(|c| self.chain_pvt(c)))
                .await;
        Ok(Response::new(GetPvtTableResponse {
            chains,
            read_at_ms: svcos_common::time::unix_ms(),
        }))
    }

    async fn get_env_recipe(
        &self,
        _request: Request<GetEnvRecipeRequest>,
    ) -> Result<Response<GetEnvRecipeResponse>, Status> {
        let r = self
            .ctx
            .board_call(|reply| ControlCommand::Recipe { reply })
            .await
            .map_err(fail)?;
        Ok(Response::new(GetEnvRecipeResponse {
            mode: r.mode.as_str().into(),
            entries: r.entries,
        }))
    }
}

/// Registers whose write would cut hw-agent off from the chain (baud divider) or that the chip
/// does not let anyone write.
fn bypass_row(r: &svcos_common::psu::BypassRow) -> PsuBypassRow {
    use svcos_common::bounds::VOLTAGE_MV;
    PsuBypassRow {
        model: r.model.map(|m| m.model.to_string()).unwrap_or_default(),
        firmware: "any".into(),
        voltage_min_v: r.model.map_or(VOLTAGE_MV.min / 1000.0, |m| m.output_min_v),
        voltage_max_v: r.model.map_or(VOLTAGE_MV.max / 1000.0, |m| m.output_max_v),
        voltage_control: r.model.is_none_or(|m| m.voltage_control),
        rated_watt: r.model.map(|m| m.rated_watt),
        voltage_override: r.voltage_override.as_str().into(),
        power_override: r.power_override.as_str().into(),
    }
}

/// The fitted PSU against its row: the window in force and whether the setpoint is inside.
fn fitted_window(id: &PsuIdentity) -> FittedPsuWindow {
    let model = id.model.clone().unwrap_or_default();
    let entry = svcos_common::psu::find(&model);
    let w = svcos_common::psu::window(entry, &id.psu_override);
    // Tolerance of the setpoint's 1 mV resolution.
    let inside =
        id.setpoint_v >= w.voltage_min_v - 0.0005 && id.setpoint_v <= w.voltage_max_v + 0.0005;
    let errors: Vec<String> = [&id.model, &id.revision]
        .into_iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    FittedPsuWindow {
        model,
        firmware: id.revision.clone().unwrap_or_default(),
        in_catalogue: entry.is_some(),
        voltage_min_v: w.voltage_min_v,
        voltage_max_v: w.voltage_max_v,
        voltage_source: w.voltage_source.into(),
        rated_watt: w.rated_watt,
        rated_source: w.rated_source.into(),
        setpoint_v: id.setpoint_v,
        bypassed: !inside,
        error: errors.join("; "),
    }
}

fn refuse_register_write(register: u8) -> Result<(), Status> {
    match register {
        reg::CHIP_ADDRESS
        | reg::CORE_REGISTER_VALUE
        | reg::PVT_TEMPERATURE
        | reg::PVT_VOLTAGE
        | reg::PVT_PROCESS => Err(invalid("register", "read-only register")),
        reg::MISC_CONTROL => Err(fail(HwError::FailedPrecondition(
            "writing MISC_CONTROL changes the chips' baud rate and desynchronises the UART; \
             change [hardware].baud instead"
                .into(),
        ))),
        _ => Ok(()),
    }
}

/// A raw command from its header byte and payload: framed with the preamble, length and CRC5,
/// then decoded back, so only a well-formed command frame the chips understand goes out.
/// Address assignment is refused: it would silently renumber the chips under the mining loop.
pub fn parse_command(frame: &[u8]) -> Result<Command, Status> {
    let Some((&header, payload)) = frame.split_first() else {
        return Err(invalid(
            "frame",
            "the header byte and payload, e.g. [0x42, 0x00, 0x00]",
        ));
    };
    if payload.len() > 6 {
        return Err(invalid("frame", "a command payload has at most 6 bytes"));
    }
    let mut bytes = PREAMBLE_HOST.to_vec();
    bytes.push(header);
    bytes.push((payload.len() + 3) as u8);
    bytes.extend_from_slice(payload);
    let crc = crc5(&bytes[2..]);
    bytes.push(crc);
    let command = match HostFrame::decode(&bytes) {
        Ok((HostFrame::Command(c), _)) => c,
        Ok((HostFrame::Job(_), _)) => return Err(invalid("frame", "job frames are not commands")),
        Err(e) => return Err(invalid("frame", e.to_string())),
    };
    match command {
        Command::SetAddress { .. } | Command::ChainInactive => {
            Err(fail(HwError::FailedPrecondition(
                "address assignment would renumber the chips under the mining loop".into(),
            )))
        }
        Command::WriteRegister { register, .. } => {
            refuse_register_write(register)?;
            Ok(command)
        }
        Command::ReadRegister { .. } => Ok(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_bm13xx::Target;

    #[test]
    fn the_fitted_psu_is_bypassed_outside_its_window() {
        let mut id = PsuIdentity {
            model: Ok("APW12".into()),
            revision: Ok("2.1.0".into()),
            psu_override: Default::default(),
            setpoint_v: 13.2,
        };
        let w = fitted_window(&id);
        assert!(w.in_catalogue && !w.bypassed, "{w:?}");
        assert_eq!((w.voltage_min_v, w.voltage_max_v), (12.0, 15.0));
        assert_eq!(w.rated_watt, Some(3600.0));
        // A narrower declared window puts the same setpoint outside.
        id.psu_override.enabled = true;
        id.psu_override.max_watt = 3000.0;
        id.psu_override.voltage_max_v = 13.0;
        let w = fitted_window(&id);
        assert!(w.bypassed && w.voltage_source == "psu_override", "{w:?}");
        // An S9's APW3++ run at 8.8 V by the sim is outside its fixed 12 V.
        id.model = Ok("APW3++".into());
        id.setpoint_v = 8.8;
        assert!(fitted_window(&id).bypassed);
        // A PSU that did not say what it is: the unknown-model row, with the reason.
        id.model = Err("nack".into());
        let w = fitted_window(&id);
        assert!(!w.in_catalogue && w.error.contains("nack"), "{w:?}");
    }

    #[test]
    fn broadcast_reads_wait_for_every_chip_at_the_line_rate() {
        // 63 chips at 115200 baud: 60 ms of answers, doubled, plus 20 ms.
        let w = broadcast_wait(63, 115_200).as_secs_f64();
        assert!((0.13..0.15).contains(&w), "{w}");
        assert_eq!(broadcast_wait(1, 3_000_000), Duration::from_millis(50));
    }

    #[test]
    fn raw_frames_are_validated_and_crc_is_computed() {
        // Read the chip id of chip 0x04: header 0x42 (command, single, read).
        let c = parse_command(&[0x42, 0x04, 0x00]).unwrap();
        assert_eq!(
            c,
            Command::ReadRegister {
                target: Target::Chip(4),
                register: reg::CHIP_ADDRESS
            }
        );
        // Broadcast write of the hash-counting register.
        assert!(parse_command(&[0x51, 0x00, 0x10, 0, 0, 0x15, 0x1c]).is_ok());
        assert!(parse_command(&[]).is_err());
        assert!(parse_command(&[0x42, 0x04]).is_err(), "wrong length");
        assert!(parse_command(&[0x21, 0, 0]).is_err(), "not a command");
        assert!(parse_command(&[0x40, 0x04, 0x00]).is_err(), "set address");
        assert!(
            parse_command(&[0x53, 0x00, 0x00]).is_err(),
            "chain inactive"
        );
        assert!(
            parse_command(&[0x51, 0x00, 0x18, 0, 0, 0, 0]).is_err(),
            "baud"
        );
    }
}
