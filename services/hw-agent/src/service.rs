//! The HwAgentService gRPC API. Readers get copies of published snapshots; controls become
//! commands to the board or chain threads. No handler ever touches a device itself.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use svcos_common::bounds::{
    FAN_MANUAL_PERCENT, FAN_PERCENT, FREQUENCY_MHZ, POWER_TARGET_WATT, TARGET_TEMP_C,
};

use futures::{Stream, StreamExt};
use svcos_common::Layout;
use svcos_common::config::LiveConfig;
use svcos_common::status::ToStatus;
use svcos_proto::hwagent::v1::hw_agent_service_server::HwAgentService;
use svcos_proto::hwagent::v1::*;
use tokio::sync::{broadcast, oneshot, watch};
use tokio_stream::wrappers::{BroadcastStream, WatchStream};
use tonic::{Request, Response, Status};

use crate::board::BoardSpec;
use crate::chain::{ChainCommand, ChainHandle};
use crate::control::{BoardLayout, BoardSnapshot, ControlCommand};
use crate::error::HwError;
use crate::telemetry::psu_telemetry;

/// Telemetry as published: with chips and without, built once per publish.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// With per-chip detail.
    pub full: Telemetry,
    /// Without it.
    pub lite: Telemetry,
}

/// The API's view of hw-agent.
pub struct Api {
    /// Board description.
    pub spec: Arc<BoardSpec>,
    /// Peripheral layout (sensors for the inventory).
    pub layout: Arc<BoardLayout>,
    /// Latest telemetry.
    pub telemetry: watch::Receiver<Arc<Published>>,
    /// Latest board snapshot.
    pub board: watch::Receiver<Arc<BoardSnapshot>>,
    /// Chains.
    pub chains: Arc<Vec<ChainHandle>>,
    /// Board thread commands.
    pub control: Sender<ControlCommand>,
    /// Hardware events.
    pub events: broadcast::Sender<HwEvent>,
    /// Where the config file is (ReloadConfig).
    pub layout_paths: Layout,
    /// The config in force: what a reload falls back to for a value it refuses.
    pub live_config: std::sync::Mutex<LiveConfig>,
    /// Serial number for the inventory.
    pub serial_number: String,
}

fn fail(e: HwError) -> Status {
    e.to_status()
}

impl Api {
    fn control(&self, cmd: ControlCommand) -> Result<(), Status> {
        self.control
            .send(cmd)
            .map_err(|_| fail(HwError::WorkerGone("board thread")))
    }

    fn chain(&self, id: u32) -> Result<&ChainHandle, Status> {
        self.chains.get(id as usize).ok_or_else(|| {
            fail(HwError::NoSuchChain {
                chain: id,
                chains: self.chains.len() as u32,
            })
        })
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl HwAgentService for Api {
    async fn get_telemetry(
        &self,
        request: Request<GetTelemetryRequest>,
    ) -> Result<Response<GetTelemetryResponse>, Status> {
        let p = self.telemetry.borrow().clone();
        let t = if request.get_ref().include_chips {
            p.full.clone()
        } else {
            p.lite.clone()
        };
        Ok(Response::new(GetTelemetryResponse { telemetry: Some(t) }))
    }

    type StreamTelemetryStream = BoxStream<Telemetry>;

    async fn stream_telemetry(
        &self,
        request: Request<StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        let chips = request.get_ref().include_chips;
        // WatchStream yields the current value first, then every new publish.
        let s = WatchStream::new(self.telemetry.clone()).map(move |p| {
            Ok(if chips {
                p.full.clone()
            } else {
                p.lite.clone()
            })
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn get_inventory(
        &self,
        _request: Request<GetInventoryRequest>,
    ) -> Result<Response<GetInventoryResponse>, Status> {
        let board = self.board.borrow().clone();
        let chains = self
            .chains
            .iter()
            .map(|c| {
                let s = c.snapshot.borrow().clone();
                ChainInfo {
                    chain_id: s.chain_id,
                    chips_expected: s.chips_expected,
                    chips_detected: s.chips.len() as u32,
                    chip_model: s.chip_model.clone(),
                    device: s.device.clone(),
                    missing_chips: s.missing_chips(),
                }
            })
            .collect();
        let sensors = board
            .sensors
            .iter()
            .map(|(spec, value)| SensorInfo {
                name: spec.name.clone(),
                kind: spec.kind.to_string(),
                chain_id: spec.chain_id,
                bus: format!("i2c-{}", self.spec.i2c_bus),
                address: u32::from(spec.address),
                value: value.unwrap_or(0.0),
                unit: "C".into(),
            })
            .collect();
        Ok(Response::new(GetInventoryResponse {
            model: self.spec.model.clone(),
            vendor: "Bitmain".into(),
            board: format!("{:?}", self.spec.board).to_lowercase(),
            chip_model: self.spec.chip_model.clone(),
            chains,
            fan_count: self.layout.fans as u32,
            psu: Some(psu_telemetry(&board)),
            sensors,
            nominal_ghs: self.spec.nominal_ghs(),
            nominal_power_watt: self.spec.nominal_power_watt(),
            driver: self.spec.driver_name().into(),
            serial_number: self.serial_number.clone(),
        }))
    }

    type StreamEventsStream = BoxStream<HwEvent>;

    async fn stream_events(
        &self,
        _request: Request<StreamEventsRequest>,
    ) -> Result<Response<Self::StreamEventsStream>, Status> {
        // A reader too slow to keep 64 events loses the oldest, never blocks the board.
        let s = BroadcastStream::new(self.events.subscribe())
            .filter_map(|e| async move { e.ok().map(Ok) });
        Ok(Response::new(Box::pin(s)))
    }

    async fn set_fan(
        &self,
        request: Request<SetFanRequest>,
    ) -> Result<Response<SetFanResponse>, Status> {
        let r = request.into_inner();
        let mode = check_set_fan(&r).map_err(fail)?;
        self.control(ControlCommand::SetFan {
            source: crate::recipe::caller_source(&r.source),
            mode,
            pwm_percent: r.pwm_percent,
            target_temp_c: r.target_temp_c,
        })?;
        Ok(Response::new(SetFanResponse {}))
    }

    async fn set_frequency(
        &self,
        request: Request<SetFrequencyRequest>,
    ) -> Result<Response<SetFrequencyResponse>, Status> {
        let r = request.into_inner();
        if !FREQUENCY_MHZ.contains(r.frequency_mhz) {
            return Err(fail(HwError::InvalidArgument {
                field: "frequency_mhz",
                message: FREQUENCY_MHZ.describe(),
            }));
        }
        if r.chip.is_some() && r.chain_id.is_none() {
            return Err(fail(HwError::InvalidArgument {
                field: "chip",
                message: "a chip needs its chain_id".into(),
            }));
        }
        let targets: Vec<&ChainHandle> = match r.chain_id {
            Some(id) => vec![self.chain(id)?],
            None => self.chains.iter().collect(),
        };
        let mut replies = Vec::new();
        for c in targets {
            let (tx, rx) = oneshot::channel();
            c.send(ChainCommand::SetFrequency {
                chip: r.chip,
                mhz: r.frequency_mhz,
                reply: tx,
            });
            replies.push(rx);
        }
        let mut applied = 0.0;
        for rx in replies {
            let res = rx
                .await
                .map_err(|_| fail(HwError::WorkerGone("chain thread")))?;
            applied = res.map_err(|e| fail(e.into()))?;
        }
        Ok(Response::new(SetFrequencyResponse {
            applied_mhz: applied,
        }))
    }

    async fn set_voltage(
        &self,
        request: Request<SetVoltageRequest>,
    ) -> Result<Response<SetVoltageResponse>, Status> {
        let r = request.into_inner();
        if let Some(id) = r.chain_id {
            self.chain(id)?;
            if self.chains.len() > 1 {
                return Err(fail(HwError::FailedPrecondition(
                    "one PSU feeds every chain on this board: set the voltage without chain_id"
                        .into(),
                )));
            }
        }
        let (tx, rx) = oneshot::channel();
        self.control(ControlCommand::SetVoltage {
            mv: r.voltage_mv,
            reply: tx,
        })?;
        let applied = rx
            .await
            .map_err(|_| fail(HwError::WorkerGone("board thread")))?
            .map_err(fail)?;
        Ok(Response::new(SetVoltageResponse {
            applied_mv: applied,
        }))
    }

    async fn set_power_target(
        &self,
        request: Request<SetPowerTargetRequest>,
    ) -> Result<Response<SetPowerTargetResponse>, Status> {
        let r = request.into_inner();
        let watt = r.watt;
        if !(r.backstop_share.is_finite() && (0.0..=0.5).contains(&r.backstop_share)) {
            return Err(fail(HwError::InvalidArgument {
                field: "backstop_share",
                message: "0 to 0.5".into(),
            }));
        }
        if !POWER_TARGET_WATT.contains(watt) {
            return Err(fail(HwError::InvalidArgument {
                field: "watt",
                message: format!("{} (0 = none)", POWER_TARGET_WATT.describe()),
            }));
        }
        let (reply, rx) = oneshot::channel();
        self.control(ControlCommand::SetPowerTarget {
            watt,
            backstop_share: r.backstop_share,
            source: crate::recipe::caller_source(&r.source),
            reply,
        })?;
        let c = rx
            .await
            .map_err(|_| fail(HwError::WorkerGone("board thread")))?;
        Ok(Response::new(SetPowerTargetResponse {
            applied_watt: c.applied_watt,
            requested_watt: c.requested_watt,
            clamped: c.clamped,
            limit_watt: c.limit.map_or(0.0, |l| l.watt),
            limit_source: c.limit.map_or("", |l| l.source).into(),
        }))
    }

    async fn set_sleep(
        &self,
        request: Request<SetSleepRequest>,
    ) -> Result<Response<SetSleepResponse>, Status> {
        let sleep = request.into_inner().sleep;
        self.control(ControlCommand::SetSleep { sleep })?;
        let state = if sleep {
            MiningState::Sleeping
        } else {
            MiningState::Bringup
        };
        Ok(Response::new(SetSleepResponse {
            state: state as i32,
        }))
    }

    async fn set_led(
        &self,
        request: Request<SetLedRequest>,
    ) -> Result<Response<SetLedResponse>, Status> {
        let mode = LedMode::try_from(request.into_inner().mode).unwrap_or(LedMode::Unspecified);
        if mode == LedMode::Unspecified {
            return Err(fail(HwError::InvalidArgument {
                field: "mode",
                message: "LED_MODE_NORMAL, LED_MODE_LOCATE or LED_MODE_OFF".into(),
            }));
        }
        self.control(ControlCommand::SetLed(mode))?;
        Ok(Response::new(SetLedResponse {}))
    }

    async fn set_chain_enabled(
        &self,
        request: Request<SetChainEnabledRequest>,
    ) -> Result<Response<SetChainEnabledResponse>, Status> {
        let r = request.into_inner();
        self.chain(r.chain_id)?;
        self.control(ControlCommand::SetChainEnabled {
            chain: r.chain_id,
            enabled: r.enabled,
        })?;
        Ok(Response::new(SetChainEnabledResponse {}))
    }

    async fn reload_config(
        &self,
        _request: Request<ReloadConfigRequest>,
    ) -> Result<Response<ReloadConfigResponse>, Status> {
        // Never refused: a bad value keeps its value in force (reported), so the chips never
        // stop over a config edit.
        let config = self
            .live_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reload(
                &self.layout_paths.config_path,
                svcos_common::time::unix_ms(),
            )
            .clone();
        self.control(ControlCommand::Reload {
            hardware: Box::new(config.hardware),
            thermal: config.thermal,
            power: config.power,
            mode: config.system.mode,
        })?;
        Ok(Response::new(ReloadConfigResponse {}))
    }
}

/// `SetFan`'s rules (the fan ranges' one home, [`svcos_common::bounds`]); every front passes
/// the refusal on with its field.
pub fn check_set_fan(r: &SetFanRequest) -> Result<FanMode, HwError> {
    let mode = FanMode::try_from(r.mode).unwrap_or(FanMode::Unspecified);
    if mode == FanMode::Unspecified {
        return Err(HwError::InvalidArgument {
            field: "mode",
            message: "FAN_MODE_AUTO or FAN_MODE_MANUAL".into(),
        });
    }
    let pwm = f64::from(r.pwm_percent);
    if mode == FanMode::Manual && !FAN_MANUAL_PERCENT.contains(pwm) {
        return Err(HwError::InvalidArgument {
            field: "pwm_percent",
            message: format!("manual mode needs {}", FAN_MANUAL_PERCENT.describe()),
        });
    }
    if !FAN_PERCENT.contains(pwm) {
        return Err(HwError::InvalidArgument {
            field: "pwm_percent",
            message: FAN_PERCENT.describe(),
        });
    }
    if r.target_temp_c != 0.0 && !TARGET_TEMP_C.contains(r.target_temp_c) {
        return Err(HwError::InvalidArgument {
            field: "target_temp_c",
            message: format!("0 (keep) or {}", TARGET_TEMP_C.describe()),
        });
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::status::{ToStatus, field_of};

    #[test]
    fn set_fan_rules_name_their_field() {
        let req = |mode: FanMode, pwm, target| SetFanRequest {
            mode: mode as i32,
            pwm_percent: pwm,
            target_temp_c: target,
            ..Default::default()
        };
        let field = |r: &SetFanRequest| match check_set_fan(r) {
            Err(HwError::InvalidArgument { field, .. }) => Some(field),
            Err(e) => panic!("{e}"),
            Ok(_) => None,
        };
        assert_eq!(field(&req(FanMode::Manual, 0, 0.0)), Some("pwm_percent"));
        assert_eq!(field(&req(FanMode::Manual, 101, 0.0)), Some("pwm_percent"));
        assert_eq!(field(&req(FanMode::Auto, 101, 0.0)), Some("pwm_percent"));
        assert_eq!(field(&req(FanMode::Auto, 0, 29.9)), Some("target_temp_c"));
        assert_eq!(field(&req(FanMode::Auto, 0, 95.1)), Some("target_temp_c"));
        assert_eq!(field(&req(FanMode::Unspecified, 50, 0.0)), Some("mode"));
        assert_eq!(field(&req(FanMode::Manual, 1, 30.0)), None);
        assert_eq!(field(&req(FanMode::Auto, 0, 0.0)), None);
        let status = check_set_fan(&req(FanMode::Manual, 0, 0.0))
            .unwrap_err()
            .to_status();
        assert_eq!(
            field_of(&status),
            Some(("pwm_percent", "manual mode needs 1-100 %"))
        );
    }
}
