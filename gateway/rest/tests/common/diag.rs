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

    async fn get_pic_info(&self, _: Request<hw::GetPicInfoRequest>) -> R<hw::GetPicInfoResponse> {
        Ok(Response::new(hw::GetPicInfoResponse {
            bus: 0,
            boards: vec![hw::PicInfo {
                chain_id: 0,
                address: 0x50,
                answered: true,
                firmware_version: Some(3),
                setpoint_mv: Some(8800.0),
                measured_mv: Some(8790.0),
                written_mv: None,
                error: String::new(),
            }],
        }))
    }

    async fn get_psu_bypass_matrix(
        &self,
        _: Request<hw::GetPsuBypassMatrixRequest>,
    ) -> R<hw::GetPsuBypassMatrixResponse> {
        Ok(Response::new(hw::GetPsuBypassMatrixResponse {
            rows: vec![hw::PsuBypassRow {
                model: String::new(),
                firmware: "any".into(),
                voltage_min_v: 1.0,
                voltage_max_v: 16.0,
                voltage_control: true,
                rated_watt: None,
                voltage_override: "declare".into(),
                power_override: "declare".into(),
            }],
            fitted: None,
        }))
    }

    async fn get_pvt_table(
        &self,
        _: Request<hw::GetPvtTableRequest>,
    ) -> R<hw::GetPvtTableResponse> {
        Ok(Response::new(hw::GetPvtTableResponse {
            chains: vec![hw::ChainPvt {
                chain_id: 0,
                chips: Vec::new(),
                error: "chain 0 is not running".into(),
                sensor_board_c: None,
                sensor_chip_c: None,
            }],
            read_at_ms: 1,
        }))
    }

    async fn get_env_recipe(
        &self,
        _: Request<hw::GetEnvRecipeRequest>,
    ) -> R<hw::GetEnvRecipeResponse> {
        Ok(Response::new(hw::GetEnvRecipeResponse {
            mode: "standard".into(),
            entries: vec![hw::RecipeEntry {
                part: "fan".into(),
                name: "target_temp_c".into(),
                value: Some(75.0),
                text: String::new(),
                unit: "C".into(),
                source: "default:thermal.target_temp_c".into(),
            }],
        }))
    }
}
