//! TunerService: each call locks the engine briefly, changes settings or reads a view, and wakes
//! the loop; no handler talks to hw-agent itself.

use svcos_common::status::ToStatus;
use svcos_proto::tuner::v1::tuner_service_server::TunerService;
use svcos_proto::tuner::v1::*;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::Shared;
use crate::engine::EngineError;
use crate::model::Mode;
use crate::power::Power;
use crate::store::{StoreError, TouSchedule, TouWindow as StoreWindow};

impl ToStatus for EngineError {
    fn to_status(&self) -> Status {
        match self {
            EngineError::Invalid { .. } => Status::invalid_argument(self.to_string()),
            EngineError::Precondition(m) => Status::failed_precondition(m.clone()),
            EngineError::NotFound(m) => Status::not_found(m.clone()),
            EngineError::Store(e @ StoreError::Format { .. }) => {
                Status::invalid_argument(e.to_string())
            }
            EngineError::Store(e) => svcos_common::status::internal("tuner store", e),
        }
    }
}

fn fail(e: EngineError) -> Status {
    e.to_status()
}

/// The gRPC face of the tuner.
#[derive(Debug, Clone)]
pub struct TunerApi {
    shared: Shared,
    /// The governor, whose config copy is kept current (the prices' defaults).
    power: Arc<Power>,
}

impl TunerApi {
    /// Serve an engine.
    pub fn new(shared: Shared, power: Arc<Power>) -> TunerApi {
        TunerApi { shared, power }
    }

    fn state(&self) -> GetStateResponse {
        let now = self.shared.clock.now_ms();
        self.shared.lock().view(now)
    }

    /// Run a change and wake the loop so it acts now rather than at the next tick.
    fn change<T>(
        &self,
        f: impl FnOnce(&mut crate::engine::Engine) -> Result<T, EngineError>,
    ) -> Result<T, Status> {
        let r = f(&mut self.shared.lock()).map_err(fail)?;
        self.shared.wake.notify_one();
        Ok(r)
    }
}

fn mode_from(m: i32) -> Result<Mode, Status> {
    match TuneMode::try_from(m).unwrap_or(TuneMode::Unspecified) {
        TuneMode::Power => Ok(Mode::Power),
        TuneMode::Hashrate => Ok(Mode::Hashrate),
        TuneMode::Efficiency => Ok(Mode::Efficiency),
        TuneMode::Fixed => Err(Status::invalid_argument(
            "mode: fixed mode is chosen by applying a profile",
        )),
        TuneMode::Unspecified => Err(Status::invalid_argument(
            "mode: TUNE_MODE_POWER, TUNE_MODE_HASHRATE or TUNE_MODE_EFFICIENCY",
        )),
    }
}

fn kind_is_power(k: i32) -> Result<bool, Status> {
    match TargetKind::try_from(k).unwrap_or(TargetKind::Unspecified) {
        TargetKind::Power => Ok(true),
        TargetKind::Hashrate => Ok(false),
        TargetKind::Unspecified => Err(Status::invalid_argument(
            "kind: TARGET_KIND_POWER or TARGET_KIND_HASHRATE",
        )),
    }
}

fn tou_pb(t: &TouSchedule) -> Vec<TouWindow> {
    t.windows
        .iter()
        .map(|w| TouWindow {
            start_minute: w.start_minute,
            end_minute: w.end_minute,
            power_target_watt: w.power_target_watt,
            label: w.label.clone(),
        })
        .collect()
}

#[tonic::async_trait]
impl TunerService for TunerApi {
    async fn get_state(
        &self,
        _request: Request<GetStateRequest>,
    ) -> Result<Response<GetStateResponse>, Status> {
        Ok(Response::new(self.state()))
    }

    async fn set_active(
        &self,
        request: Request<SetActiveRequest>,
    ) -> Result<Response<SetActiveResponse>, Status> {
        let active = request.into_inner().active;
        let now = self.shared.clock.now_ms();
        self.change(|e| e.set_active(active, now))?;
        Ok(Response::new(SetActiveResponse {
            state: Some(self.state()),
        }))
    }

    async fn set_target(
        &self,
        request: Request<SetTargetRequest>,
    ) -> Result<Response<SetTargetResponse>, Status> {
        let r = request.into_inner();
        let mode = mode_from(r.mode)?;
        self.change(|e| e.set_target(mode, r.power_target_watt, r.hashrate_target_ths))?;
        Ok(Response::new(SetTargetResponse {
            state: Some(self.state()),
        }))
    }

    async fn adjust_target(
        &self,
        request: Request<AdjustTargetRequest>,
    ) -> Result<Response<AdjustTargetResponse>, Status> {
        let r = request.into_inner();
        let power = kind_is_power(r.kind)?;
        self.change(|e| e.adjust(power, r.direction, r.amount))?;
        Ok(Response::new(AdjustTargetResponse {
            state: Some(self.state()),
        }))
    }

    async fn set_default(
        &self,
        request: Request<SetDefaultRequest>,
    ) -> Result<Response<SetDefaultResponse>, Status> {
        let power = kind_is_power(request.into_inner().kind)?;
        self.change(|e| e.set_default(power))?;
        Ok(Response::new(SetDefaultResponse {
            state: Some(self.state()),
        }))
    }

    async fn list_profiles(
        &self,
        _request: Request<ListProfilesRequest>,
    ) -> Result<Response<ListProfilesResponse>, Status> {
        let e = self.shared.lock();
        let (tuned, saved, at) = e.profiles();
        let view = e.view(self.shared.clock.now_ms());
        Ok(Response::new(ListProfilesResponse {
            board_serial: e.board_serial(),
            persisted: !tuned.is_empty(),
            tuned: tuned.iter().map(|p| p.to_pb()).collect(),
            saved: saved.iter().map(|p| p.to_pb()).collect(),
            active_profile: view.profile,
            saved_at_ms: at,
        }))
    }

    async fn save_profile(
        &self,
        request: Request<SaveProfileRequest>,
    ) -> Result<Response<SaveProfileResponse>, Status> {
        let name = request.into_inner().name;
        let now = self.shared.clock.now_ms();
        let p = self.change(|e| e.save_profile(name.trim(), now))?;
        Ok(Response::new(SaveProfileResponse {
            profile: Some(p.to_pb()),
        }))
    }

    async fn apply_profile(
        &self,
        request: Request<ApplyProfileRequest>,
    ) -> Result<Response<ApplyProfileResponse>, Status> {
        let name = request.into_inner().name;
        self.change(|e| e.apply_profile(&name))?;
        Ok(Response::new(ApplyProfileResponse {
            state: Some(self.state()),
        }))
    }

    async fn list_silicon(
        &self,
        _request: Request<ListSiliconRequest>,
    ) -> Result<Response<ListSiliconResponse>, Status> {
        let e = self.shared.lock();
        let current = e.board_serial();
        Ok(Response::new(ListSiliconResponse {
            boards: e
                .store
                .boards
                .values()
                .map(|b| SiliconSummary {
                    board_serial: b.board_serial.clone(),
                    profiles: b.profiles.len() as u32,
                    updated_at_ms: b.updated_at_ms,
                    current_board: b.board_serial == current,
                })
                .collect(),
        }))
    }

    async fn get_silicon(
        &self,
        request: Request<GetSiliconRequest>,
    ) -> Result<Response<GetSiliconResponse>, Status> {
        let serial = request.into_inner().board_serial;
        let e = self.shared.lock();
        let b = e
            .store
            .boards
            .get(&serial)
            .ok_or_else(|| Status::not_found(format!("no tuned data for board {serial:?}")))?;
        Ok(Response::new(GetSiliconResponse {
            board_serial: b.board_serial.clone(),
            profiles: b.profiles.iter().map(|p| p.to_pb()).collect(),
            updated_at_ms: b.updated_at_ms,
        }))
    }

    async fn delete_silicon(
        &self,
        request: Request<DeleteSiliconRequest>,
    ) -> Result<Response<DeleteSiliconResponse>, Status> {
        let serial = request.into_inner().board_serial;
        self.change(|e| e.delete_board(&serial))?;
        Ok(Response::new(DeleteSiliconResponse {}))
    }

    async fn reload_profiles(
        &self,
        _request: Request<ReloadProfilesRequest>,
    ) -> Result<Response<ReloadProfilesResponse>, Status> {
        let n = self.change(|e| e.reload())?;
        Ok(Response::new(ReloadProfilesResponse { boards: n as u32 }))
    }

    async fn set_active_silicon(
        &self,
        request: Request<SetActiveSiliconRequest>,
    ) -> Result<Response<SetActiveSiliconResponse>, Status> {
        let id = request.into_inner().profile_id;
        self.change(|e| {
            let serial = e.board_serial();
            if e.store.tuned(&serial, &id).is_none() {
                return Err(EngineError::NotFound(format!(
                    "board {serial:?} has no tuned profile {id:?}"
                )));
            }
            e.apply_profile(&id)
        })?;
        Ok(Response::new(SetActiveSiliconResponse {
            state: Some(self.state()),
        }))
    }

    async fn export(
        &self,
        _request: Request<ExportRequest>,
    ) -> Result<Response<ExportResponse>, Status> {
        let doc = self.shared.lock().store.export(self.shared.clock.now_ms());
        let document = serde_json::to_string_pretty(&doc)
            .map_err(|e| svcos_common::status::internal("export", &e))?;
        Ok(Response::new(ExportResponse { document }))
    }

    async fn import(
        &self,
        request: Request<ImportRequest>,
    ) -> Result<Response<ImportResponse>, Status> {
        let doc = request.into_inner().document;
        let now = self.shared.clock.now_ms();
        let (boards, profiles) = self.change(|e| {
            let r = e.import(&doc, now)?;
            e.reload()?;
            Ok(r)
        })?;
        Ok(Response::new(ImportResponse { boards, profiles }))
    }

    async fn get_history(
        &self,
        request: Request<GetHistoryRequest>,
    ) -> Result<Response<GetHistoryResponse>, Status> {
        let limit = request.into_inner().limit as usize;
        let samples = self
            .shared
            .lock()
            .history(limit)
            .into_iter()
            .map(|s| HistorySample {
                at_ms: s.at_ms,
                state: s.state.as_str().into(),
                power_watt: s.power_watt,
                power_target_watt: s.power_target_watt,
                hashrate_ths: s.hashrate_ths,
                voltage_mv: s.voltage_mv,
                frequency_mhz: s.frequency_mhz,
                temp_max_c: s.temp_max_c,
                nonces: s.nonces,
                hw_errors: s.hw_errors,
            })
            .collect();
        Ok(Response::new(GetHistoryResponse { samples }))
    }

    async fn get_chip_health(
        &self,
        _request: Request<GetChipHealthRequest>,
    ) -> Result<Response<GetChipHealthResponse>, Status> {
        let (chips, since) = self.shared.lock().chip_health();
        Ok(Response::new(GetChipHealthResponse {
            chips,
            window_start_ms: since,
        }))
    }

    async fn estimate_profitability(
        &self,
        request: Request<EstimateProfitabilityRequest>,
    ) -> Result<Response<EstimateProfitabilityResponse>, Status> {
        let config = self.power.lock().config.clone();
        let prices = crate::profit::prices(
            &request.into_inner(),
            config.tuner.electricity_price_per_kwh,
        )?;
        let t = self
            .shared
            .lock()
            .latest()
            .cloned()
            .ok_or_else(|| Status::unavailable("no telemetry from hw-agent yet"))?;
        let ghs = t.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m);
        Ok(Response::new(crate::profit::estimate(
            ghs,
            t.power_watt,
            prices,
            config.tuner.currency.clone(),
        )))
    }

    async fn recalibrate(
        &self,
        _request: Request<RecalibrateRequest>,
    ) -> Result<Response<RecalibrateResponse>, Status> {
        let now = self.shared.clock.now_ms();
        self.change(|e| e.recalibrate(now))?;
        Ok(Response::new(RecalibrateResponse {
            state: Some(self.state()),
        }))
    }

    async fn get_tou_schedule(
        &self,
        _request: Request<GetTouScheduleRequest>,
    ) -> Result<Response<GetTouScheduleResponse>, Status> {
        let now = self.shared.clock.now_ms();
        let e = self.shared.lock();
        let t = &e.settings().tou;
        let zone = e.zone();
        Ok(Response::new(GetTouScheduleResponse {
            enabled: t.enabled,
            windows: tou_pb(t),
            active_window: t
                .active(&zone, now)
                .map(|w| w.describe())
                .unwrap_or_default(),
            next_change: t
                .next_change(&zone, now)
                .map(|at| zone.rfc3339(at))
                .unwrap_or_default(),
            timezone: zone.name,
        }))
    }

    async fn set_tou_schedule(
        &self,
        request: Request<SetTouScheduleRequest>,
    ) -> Result<Response<SetTouScheduleResponse>, Status> {
        let r = request.into_inner();
        let sched = TouSchedule {
            enabled: r.enabled,
            windows: r
                .windows
                .into_iter()
                .map(|w| StoreWindow {
                    start_minute: w.start_minute,
                    end_minute: w.end_minute,
                    power_target_watt: w.power_target_watt,
                    label: w.label,
                })
                .collect(),
        };
        self.change(|e| e.set_tou(sched))?;
        let now = self.shared.clock.now_ms();
        let e = self.shared.lock();
        let t = &e.settings().tou;
        let zone = e.zone();
        Ok(Response::new(SetTouScheduleResponse {
            enabled: t.enabled,
            windows: tou_pb(t),
            active_window: t
                .active(&zone, now)
                .map(|w| w.describe())
                .unwrap_or_default(),
            next_change: t
                .next_change(&zone, now)
                .map(|at| zone.rfc3339(at))
                .unwrap_or_default(),
            timezone: zone.name,
        }))
    }
}
