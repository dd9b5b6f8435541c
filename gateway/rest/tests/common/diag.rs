//! Fake `HwDiagnosticsService` next to the fake HwAgentService: enough for the routing and
//! gating tests (the real behaviour is tested end to end in `tests/tests/diagnostics.rs`).

use svcos_proto::hwagent::v1 as hw;
use tonic::{Request, Response, Status};

/// Answers every call with a well-formed, empty-ish reply; no run ever finishes.
pub struct FakeDiag;

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl hw::hw_diagnostics_service_server::HwDiagnosticsService for FakeDiag {
    async fn start_run(&self, r: Request<hw::StartRunRequest>) -> R<hw::RunStatus> {
        Ok(Response::new(hw::RunStatus {
            kind: r.into_inner().kind,
            state: hw::RunState::Running as i32,
            ..Default::default()
        }))
    }
    async fn get_run_status(&self, r: Request<hw::RunRequest>) -> R<hw::RunStatus> {
        Ok(Response::new(hw::RunStatus {
            kind: r.into_inner().kind,
            state: hw::RunState::Idle as i32,
            ..Default::default()
        }))
    }
    async fn cancel_run(&self, _r: Request<hw::RunRequest>) -> R<hw::RunStatus> {
        Err(Status::failed_precondition("no run is running"))
    }
    async fn get_run_result(&self, _r: Request<hw::RunRequest>) -> R<hw::RunResult> {
        Err(Status::not_found("no run has finished yet"))
    }
    async fn list_reports(
        &self,
        _r: Request<hw::ListReportsRequest>,
    ) -> R<hw::ListReportsResponse> {
        Ok(Response::new(hw::ListReportsResponse::default()))
    }
    async fn get_state_machine(
        &self,
        _r: Request<hw::GetStateMachineRequest>,
    ) -> R<hw::GetStateMachineResponse> {
        Ok(Response::new(hw::GetStateMachineResponse::default()))
    }
    async fn i2c_transfer(&self, r: Request<hw::I2cTransferRequest>) -> R<hw::I2cTransferResponse> {
        Ok(Response::new(hw::I2cTransferResponse {
            read: vec![0; r.into_inner().read_len as usize],
            bus: 0,
        }))
    }
    async fn i2c_scan(&self, _r: Request<hw::I2cScanRequest>) -> R<hw::I2cScanResponse> {
        Ok(Response::new(hw::I2cScanResponse::default()))
    }
    async fn chip_register(
        &self,
        r: Request<hw::ChipRegisterRequest>,
    ) -> R<hw::ChipRegisterResponse> {
        let r = r.into_inner();
        Ok(Response::new(hw::ChipRegisterResponse {
            chip_address: 0,
            register: r.register,
            value: r.value.unwrap_or(0),
            answered: true,
        }))
    }
    async fn asic_command(&self, r: Request<hw::AsicCommandRequest>) -> R<hw::AsicCommandResponse> {
        Ok(Response::new(hw::AsicCommandResponse {
            sent: r.into_inner().frame,
            responses: Vec::new(),
        }))
    }
    async fn psu_control(&self, r: Request<hw::PsuControlRequest>) -> R<hw::PsuControlResponse> {
        let r = r.into_inner();
        Ok(Response::new(hw::PsuControlResponse {
            enabled: r.enabled.unwrap_or(true),
            voltage_setpoint_mv: r.voltage_mv.unwrap_or(12_000.0),
        }))
    }
    async fn set_fan_pid(&self, r: Request<hw::SetFanPidRequest>) -> R<hw::SetFanPidResponse> {
        let r = r.into_inner();
        Ok(Response::new(hw::SetFanPidResponse {
            kp: r.kp,
            ki: r.ki,
            kd: r.kd,
        }))
    }
}
