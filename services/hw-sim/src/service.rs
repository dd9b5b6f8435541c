//! The `svcos.hwsim.v1.HwSimService` gRPC API over the simulated board.

use std::sync::Arc;
use std::time::{Duration, Instant};

use svcos_proto::hwsim::v1 as pb;
use tonic::{Request, Response, Status};

use crate::error::SimError;
use crate::i2c;
use crate::state::{Fault, Shared};

/// Longest button hold accepted, ms (a minute covers every reset gesture).
const MAX_HOLD_MS: u64 = 60_000;

/// The gRPC service.
#[derive(Clone)]
pub struct HwSimApi {
    pub(crate) shared: Arc<Shared>,
    pub(crate) virtual_per_real: f64,
    pub(crate) real_rate: f64,
}

impl HwSimApi {
    fn board_response(&self) -> pb::GetBoardResponse {
        let b = self.shared.lock();
        let spec = &b.spec;
        pb::GetBoardResponse {
            model: spec.model.clone(),
            chains: b
                .chains
                .iter()
                .map(|c| pb::SimChain {
                    chain_id: c.id,
                    tty_path: c.tty_path.clone(),
                    chips: spec.chips_per_chain,
                    chip_model: spec.chip_model.name().to_string(),
                    hashes_per_clock: spec.chip_model.hashes_per_clock(),
                    board_sensor_address: i2c::board_sensor_address(c.id).unwrap_or(0),
                    chip_sensor_address: i2c::chip_sensor_address(c.id).unwrap_or(0),
                    enable_gpio: format!("chain{}_enable", c.id),
                    reset_gpio: format!("chain{}_reset", c.id),
                    pic_address: i2c::pic_address(&b, c.id).unwrap_or(0),
                })
                .collect(),
            fans: spec.fans,
            psu_model: spec.psu_model.clone(),
            seed: spec.seed,
            virtual_hashes_per_real_hash: self.virtual_per_real,
            real_hashes_per_second: self.real_rate,
            i2c_bus: spec.i2c_bus,
            psu_address: i2c::PSU_ADDRESS,
            fan_max_rpm: spec.fan_max_rpm,
            gpio_lines: b.gpio_lines(),
            nominal_frequency_mhz: spec.nominal_frequency_mhz,
            nominal_voltage_mv: spec.nominal_voltage_mv,
        }
    }

    fn truth(&self) -> pb::GetTruthResponse {
        let b = self.shared.lock();
        let model = b.spec.chip_model;
        let mut chips = Vec::new();
        let mut chains = Vec::new();
        for (ci, chain) in b.chains.iter().enumerate() {
            for (k, chip) in chain.chips.iter().enumerate() {
                chips.push(pb::ChipTruth {
                    chain_id: chain.id,
                    chip: chip.index,
                    nonces_found: chip.nonces_found,
                    hashes_done: chip.hashes_done,
                    temp_c: chip.temp_c,
                    frequency_mhz: chip.frequency_mhz,
                    hashing: b.chip_hashing(ci, k),
                    address: u32::from(chip.address),
                    voltage_mv: chip.voltage_mv,
                    error_rate: chip.error_rate,
                    hw_errors_sent: chip.hw_errors_sent,
                    power_watt: chip.power_watt,
                    alive: !chip.dead,
                    nominal_ghs: model.nominal_hashrate(chip.frequency_mhz) / 1e9,
                    ticket_zero_bits: u32::from(chip.ticket.zero_bits),
                });
            }
            chains.push(pb::ChainTruth {
                chain_id: chain.id,
                baud: chain.baud,
                board_temp_c: chain.board_temp_c(),
                powered: b.chain_powered(ci),
                in_reset: chain.in_reset,
                unplugged: chain.unplugged,
                frames_received: chain.frames_received,
                frame_errors: chain.frame_errors,
                bytes_sent: chain.bytes_sent,
                jobs_received: chain.jobs_received,
            });
        }
        pb::GetTruthResponse {
            chips,
            power_watt: b.psu.pout_watt,
            jobs_received: b.chains.iter().map(|c| c.jobs_received).sum(),
            nonces_sent: b.nonces_sent,
            chains,
            psu_vout_mv: b.psu.vout_mv,
            psu_on: b.psu.on && !b.psu.fault,
            faults: b.faults.clone(),
            room_temp_c: b.spec.room_temp_c,
        }
    }
}

#[tonic::async_trait]
impl pb::hw_sim_service_server::HwSimService for HwSimApi {
    async fn get_board(
        &self,
        _request: Request<pb::GetBoardRequest>,
    ) -> Result<Response<pb::GetBoardResponse>, Status> {
        Ok(Response::new(self.board_response()))
    }

    async fn i2c_transfer(
        &self,
        request: Request<pb::I2cTransferRequest>,
    ) -> Result<Response<pb::I2cTransferResponse>, Status> {
        let r = request.into_inner();
        if r.read_len > 256 {
            return Err(Status::invalid_argument("read_len above 256"));
        }
        let mut b = self.shared.lock();
        let read = i2c::transfer(&mut b, r.bus, r.address, &r.write, r.read_len as usize)?;
        Ok(Response::new(pb::I2cTransferResponse { read }))
    }

    async fn set_fan_pwm(
        &self,
        request: Request<pb::SetFanPwmRequest>,
    ) -> Result<Response<pb::SetFanPwmResponse>, Status> {
        let r = request.into_inner();
        if r.pwm_percent > 100 {
            return Err(Status::invalid_argument("pwm_percent above 100"));
        }
        let mut b = self.shared.lock();
        let fan = b
            .fans
            .get_mut(r.fan_id as usize)
            .ok_or(SimError::NoSuchFan(r.fan_id))?;
        fan.pwm_percent = r.pwm_percent;
        Ok(Response::new(pb::SetFanPwmResponse {}))
    }

    async fn read_fans(
        &self,
        _request: Request<pb::ReadFansRequest>,
    ) -> Result<Response<pb::ReadFansResponse>, Status> {
        let b = self.shared.lock();
        let fans = b
            .fans
            .iter()
            .enumerate()
            .map(|(i, f)| pb::FanReading {
                fan_id: i as u32,
                rpm: f.rpm.round() as u32,
                pwm_percent: f.pwm_percent,
            })
            .collect();
        Ok(Response::new(pb::ReadFansResponse { fans }))
    }

    async fn set_gpio(
        &self,
        request: Request<pb::SetGpioRequest>,
    ) -> Result<Response<pb::SetGpioResponse>, Status> {
        let r = request.into_inner();
        self.shared.lock().set_gpio(&r.line, r.value)?;
        Ok(Response::new(pb::SetGpioResponse {}))
    }

    async fn read_gpio(
        &self,
        request: Request<pb::ReadGpioRequest>,
    ) -> Result<Response<pb::ReadGpioResponse>, Status> {
        let r = request.into_inner();
        let value = self.shared.lock().read_gpio(&r.line, Instant::now())?;
        Ok(Response::new(pb::ReadGpioResponse { value }))
    }

    async fn inject_fault(
        &self,
        request: Request<pb::InjectFaultRequest>,
    ) -> Result<Response<pb::InjectFaultResponse>, Status> {
        let r = request.into_inner();
        let fault = Fault::parse(&r.kind, r.chain_id, r.chip, r.fan_id, r.value, r.address)?;
        self.shared.lock().inject(fault)?;
        Ok(Response::new(pb::InjectFaultResponse {}))
    }

    async fn clear_faults(
        &self,
        _request: Request<pb::ClearFaultsRequest>,
    ) -> Result<Response<pb::ClearFaultsResponse>, Status> {
        self.shared.lock().clear_faults();
        Ok(Response::new(pb::ClearFaultsResponse {}))
    }

    async fn get_truth(
        &self,
        _request: Request<pb::GetTruthRequest>,
    ) -> Result<Response<pb::GetTruthResponse>, Status> {
        Ok(Response::new(self.truth()))
    }

    async fn press_button(
        &self,
        request: Request<pb::PressButtonRequest>,
    ) -> Result<Response<pb::PressButtonResponse>, Status> {
        let hold = request.into_inner().hold_ms;
        if hold > MAX_HOLD_MS {
            return Err(Status::invalid_argument("hold_ms above 60000"));
        }
        tracing::info!(hold_ms = hold, "button pressed");
        self.shared.lock().button_until = Some(Instant::now() + Duration::from_millis(hold));
        Ok(Response::new(pb::PressButtonResponse {}))
    }
}
