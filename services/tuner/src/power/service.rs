//! PowerService: each call reads or changes the governor's state briefly; calls that change
//! something reconcile hw-agent before they answer, so the caller sees the effect.

use std::sync::Arc;

use svcos_proto::tuner::v1::power_service_server::PowerService;
use svcos_proto::tuner::v1::{
    self as pb, GetPowerRequest, GetPowerResponse, GetSwarmRequest, GetSwarmResponse,
    ListFollowerDecisionsRequest, ListFollowerDecisionsResponse, ListPresetsRequest,
    ListPresetsResponse, NoteSwarmPeersRequest, NoteSwarmPeersResponse, PostRoomTemperatureRequest,
    PostRoomTemperatureResponse, PostSwarmRoomTemperatureRequest, PostSwarmRoomTemperatureResponse,
    ReconcileRequest, ReconcileResponse, TestSourceRequest, TestSourceResponse,
};
use tonic::{Request, Response, Status};

use super::ambient::WarmupPhase;
use super::follower::{self, FollowerMode, FollowerState, HistoryEntry, Params, Phase, Reading};
use super::presets;
use super::swarm::{self, MEMBER_TIMEOUT_MS, RoomReading};
use super::thermostat::ThermostatAction;
use super::{Decision, Power};
use crate::history::store::DECISION_CAP;

/// The gRPC face of the power governor.
#[derive(Debug, Clone)]
pub struct PowerApi {
    power: Arc<Power>,
}

impl PowerApi {
    /// Serve a governor.
    pub fn new(power: Arc<Power>) -> PowerApi {
        PowerApi { power }
    }

    fn status(&self) -> pb::PowerStatus {
        let now = self.power.clock.now_ms();
        let temp_max_c = self
            .power
            .telemetry
            .borrow()
            .as_ref()
            .map_or(0.0, |t| t.temp_max_c);
        let st = self.power.lock();
        let home = &st.config.home;
        let g = &st.config.governor;
        let inputs = st.inputs(now);
        let t = &st.thermostat;
        let f = &st.follower;
        let min_dwell_ms = FollowerMode::enabled(&st.config)
            .filter(|m| f.mode == Some(*m))
            .map_or(0, |m| Params::of(&st.config, m).min_dwell_ms);
        pb::PowerStatus {
            decision: st
                .last
                .as_ref()
                .map(|(d, at)| decision_pb(d, *at, &st.config, now)),
            applied: Some(pb::PowerApplied {
                slept: st.applied.slept,
                target_set: st.applied.target_set,
                fan_capped: st.applied.fan_capped,
            }),
            thermostat: Some(pb::ThermostatState {
                room_c: t.room_c,
                reading_at_ms: t.reading_at_ms,
                source: t.source.clone(),
                level_watt: t.level_watt,
                sleeping: t.sleeping,
                last_action: action_pb(Some(t.last_action)) as i32,
                reading_fresh: t.fresh(home, now),
            }),
            follower: Some(pb::FollowerState {
                mode: mode_pb(f.mode) as i32,
                sleeping: f.sleeping,
                target_watt: f.target_watt,
                last_change_ms: f.last_change_ms,
                last_poll_ms: f.last_poll_ms,
                last_reading: f.last_reading.as_ref().map(reading_pb),
                last_error: f.last_error.clone().unwrap_or_default(),
                consecutive_errors: f.consecutive_errors,
                dwell_remaining_s: f
                    .last_change_ms
                    .map(|c| ((c + min_dwell_ms - now).max(0) as f64 / 1000.0).ceil()),
                last_decision: f.last_decision.as_ref().map(entry_pb),
                phase: f
                    .mode
                    .map_or(pb::FollowerPhase::Unspecified, |_| phase_pb(f.phase()))
                    as i32,
            }),
            noise: Some(pb::NoiseState {
                limit_watt: st.noise.limit_watt.filter(|_| g.noise.enabled),
                fan_percent: st.noise.fan_percent,
                last_action: st.noise.last_action.as_str().into(),
                last_step_ms: st.noise.last_step_ms,
            }),
            quota: Some(pb::QuotaState {
                day: st.quota.day.clone(),
                used_kwh: st.quota.used_kwh,
                remaining_kwh: st
                    .quota_limit
                    .map_or((g.quota.daily_kwh - st.quota.used_kwh).max(0.0), |q| {
                        q.remaining_kwh
                    }),
                limit_watt: st.quota_limit.and_then(|q| q.watt),
                spent: st.quota_limit.is_some_and(|q| q.sleep),
            }),
            room_factor: Some(pb::RoomFactorState {
                room_c: st.room_c(now),
                limit_watt: inputs.room_watt,
            }),
            warmup: Some(pb::WarmupState {
                phase: st.warmup.as_str().into(),
                cap_watt: inputs.warmup_watt,
                since_ms: match st.warmup {
                    WarmupPhase::WarmingUp { since_ms } => Some(since_ms),
                    _ => None,
                },
                temp_max_c,
            }),
        }
    }
}

impl PowerApi {
    fn swarm_status(&self) -> pb::SwarmStatus {
        let now = self.power.clock.now_ms();
        let (config, own_power, own_eff) = {
            let st = self.power.lock();
            let t = self.power.telemetry.borrow();
            let (p, e) = t
                .as_ref()
                .map_or((0.0, 0.0), |t| (t.power_watt, t.efficiency_j_per_th));
            (st.config.swarm.clone(), p, e)
        };
        let sw = self.power.swarm();
        let leader = sw
            .leader(now)
            .filter(|_| config.enabled)
            .unwrap_or_default();
        let share_of = |id: &str| {
            sw.allocation
                .as_ref()
                .and_then(|a| a.shares.iter().find(|s| s.unit_id == id))
                .map(|s| s.watt)
        };
        let mut members = Vec::new();
        if config.enabled {
            let own = sw.own.as_ref();
            members.push(pb::SwarmMember {
                unit_id: sw.unit_id.clone(),
                name: own.map(|b| b.name.clone()).unwrap_or_default(),
                address: String::new(),
                leader: leader == sw.unit_id,
                is_self: true,
                power_watt: own_power,
                max_watt: own.map_or(0.0, |b| b.max_watt),
                efficiency_j_per_th: own_eff,
                share_watt: share_of(&sw.unit_id),
                last_seen_ms: now,
            });
            members.extend(
                sw.members
                    .values()
                    .filter(|m| now - m.last_seen_ms <= MEMBER_TIMEOUT_MS)
                    .map(|m| pb::SwarmMember {
                        unit_id: m.beat.unit_id.clone(),
                        name: m.beat.name.clone(),
                        address: m.address.to_string(),
                        leader: leader == m.beat.unit_id,
                        is_self: false,
                        power_watt: m.beat.power_watt,
                        max_watt: m.beat.max_watt,
                        efficiency_j_per_th: m.beat.efficiency_j_per_th,
                        share_watt: share_of(&m.beat.unit_id),
                        last_seen_ms: m.last_seen_ms,
                    }),
            );
            members.sort_by(|a, b| a.unit_id.cmp(&b.unit_id));
        }
        pb::SwarmStatus {
            enabled: config.enabled,
            unit_id: sw.unit_id.clone(),
            leader_unit_id: leader,
            members,
            budget_watt: config.circuit_budget_watt,
            rule: swarm::RULE.into(),
            room: sw.room.as_ref().map(|r| pb::SwarmRoom {
                room_c: r.room_c,
                at_ms: r.at_ms,
                source: r.source.clone(),
                origin_unit_id: r.origin.clone(),
            }),
            epoch: sw.allocation.as_ref().map_or(0, |a| a.epoch),
            share_watt: sw.share.map(|(w, _)| w).filter(|_| config.enabled),
            share_source: sw
                .share
                .filter(|_| config.enabled)
                .map(|(_, s)| s.as_str().to_string())
                .unwrap_or_default(),
            dropped_bad_signature: sw.dropped_bad_signature,
            dropped_replay: sw.dropped_replay,
            dropped_malformed: sw.dropped_malformed,
            port: u32::from(config.port),
            error: sw.error.clone(),
            discovered: sw.discovered.iter().map(|a| a.to_string()).collect(),
        }
    }
}

/// Most units one mDNS browse may name (a home, not a farm).
const MAX_DISCOVERED: usize = 64;

/// The room-reading rule of both room routes: -40 to 60 °C, a label of up to 64 printable
/// characters (`default` when none is given).
fn room_input(room_c: f64, source: &str, default: &str) -> Result<(f64, String), Status> {
    if !room_c.is_finite() || !(-40.0..=60.0).contains(&room_c) {
        return Err(Status::invalid_argument("room_c: -40 to 60 C"));
    }
    let source = if source.is_empty() {
        default.into()
    } else {
        source
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect()
    };
    Ok((room_c, source))
}

fn decision_pb(
    d: &Decision,
    at_ms: i64,
    config: &svcos_common::config::Config,
    now_ms: i64,
) -> pb::PowerDecision {
    pb::PowerDecision {
        target_watt: d.target_watt,
        binding: d.binding.unwrap_or_default().into(),
        limits: d
            .limits
            .iter()
            .map(|l| pb::PowerLimit {
                source: l.source.into(),
                watt: l.watt,
            })
            .collect(),
        sleep_by: d.sleep_by.unwrap_or_default().into(),
        fan_cap_percent: d.fan_cap_percent,
        night_active: config
            .home
            .night_mode
            .active_at(&config.home.night_mode.zone(&config.system), now_ms),
        decided_at_ms: at_ms,
    }
}

fn mode_pb(m: Option<FollowerMode>) -> pb::FollowerMode {
    match m {
        None => pb::FollowerMode::Unspecified,
        Some(FollowerMode::Solar) => pb::FollowerMode::Solar,
        Some(FollowerMode::Offgrid) => pb::FollowerMode::Offgrid,
    }
}

fn mode_from(m: i32) -> Option<FollowerMode> {
    match pb::FollowerMode::try_from(m).unwrap_or(pb::FollowerMode::Unspecified) {
        pb::FollowerMode::Solar => Some(FollowerMode::Solar),
        pb::FollowerMode::Offgrid => Some(FollowerMode::Offgrid),
        pb::FollowerMode::Unspecified => None,
    }
}

fn action_pb(a: Option<ThermostatAction>) -> pb::ThermostatAction {
    match a {
        None | Some(ThermostatAction::None) => pb::ThermostatAction::Unspecified,
        Some(ThermostatAction::Raise) => pb::ThermostatAction::Raise,
        Some(ThermostatAction::Lower) => pb::ThermostatAction::Lower,
        Some(ThermostatAction::Hold) => pb::ThermostatAction::Hold,
        Some(ThermostatAction::Sleep) => pb::ThermostatAction::Sleep,
        Some(ThermostatAction::Wake) => pb::ThermostatAction::Wake,
    }
}

fn phase_pb(p: Phase) -> pb::FollowerPhase {
    match p {
        Phase::WaitingForReading => pb::FollowerPhase::WaitingForReading,
        Phase::Sleeping => pb::FollowerPhase::Sleeping,
        Phase::Running => pb::FollowerPhase::Running,
    }
}

fn presets_pb() -> ListPresetsResponse {
    ListPresetsResponse {
        thermostat: presets::THERMOSTAT
            .iter()
            .map(|p| pb::ThermostatPreset {
                name: p.name.into(),
                target_room_c: p.target_room_c,
                min_watt: p.min_watt,
                max_watt: p.max_watt,
                step_watt: p.step_watt,
                description: p.description.into(),
            })
            .collect(),
        battery: presets::BATTERY
            .iter()
            .map(|p| pb::BatteryPreset {
                name: p.name.into(),
                chemistry: p.chemistry.into(),
                stop_soc_percent: p.stop_soc_percent,
                resume_soc_percent: p.resume_soc_percent,
                stop_voltage_v: p.stop_voltage_v,
                resume_voltage_v: p.resume_voltage_v,
                description: p.description.into(),
            })
            .collect(),
    }
}

fn reading_pb(r: &Reading) -> pb::EnergyReading {
    pb::EnergyReading {
        surplus_watt: r.surplus_watt,
        soc_percent: r.soc_percent,
        voltage_v: r.voltage_v,
    }
}

fn entry_pb(e: &HistoryEntry) -> pb::FollowerDecision {
    pb::FollowerDecision {
        t_ms: e.t_ms,
        mode: mode_pb(Some(e.mode)) as i32,
        reading: e.reading.as_ref().map(reading_pb),
        error: e.error.clone().unwrap_or_default(),
        decision: e.decision.clone(),
        target_watt: e.target_watt,
        reason: e.reason.clone(),
        actual_power_watt: e.actual_power_watt,
        hw_power_target_watt: e.hw_power_target_watt,
        hw_state: e.hw_state.clone().unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl PowerService for PowerApi {
    async fn get_power(
        &self,
        _request: Request<GetPowerRequest>,
    ) -> Result<Response<GetPowerResponse>, Status> {
        Ok(Response::new(GetPowerResponse {
            status: Some(self.status()),
        }))
    }

    async fn reconcile(
        &self,
        _request: Request<ReconcileRequest>,
    ) -> Result<Response<ReconcileResponse>, Status> {
        self.power.reload_config(true);
        self.power.reconcile().await;
        Ok(Response::new(ReconcileResponse {
            status: Some(self.status()),
        }))
    }

    async fn post_room_temperature(
        &self,
        request: Request<PostRoomTemperatureRequest>,
    ) -> Result<Response<PostRoomTemperatureResponse>, Status> {
        let r = request.into_inner();
        let (room_c, source) = room_input(r.room_c, &r.source, "api")?;
        // The thermostat's settings may have been written just before this reading.
        self.power.reload_config(false);
        let action = self.power.room_reading(room_c, source);
        self.power.reconcile().await;
        Ok(Response::new(PostRoomTemperatureResponse {
            action: action_pb(action) as i32,
            status: Some(self.status()),
        }))
    }

    async fn test_source(
        &self,
        request: Request<TestSourceRequest>,
    ) -> Result<Response<TestSourceResponse>, Status> {
        let r = request.into_inner();
        let mode = mode_from(r.mode).ok_or_else(|| {
            Status::invalid_argument("mode: FOLLOWER_MODE_SOLAR or FOLLOWER_MODE_OFFGRID")
        })?;
        let (mut p, st) = {
            let st = self.power.lock();
            let follower = if st.follower.mode == Some(mode) {
                st.follower.clone()
            } else {
                FollowerState::default()
            };
            (Params::of(&st.config, mode), follower)
        };
        if let Some(u) = r.source_url {
            p.url = u;
        }
        for (i, v) in [r.surplus_watt_pointer, r.soc_pointer, r.voltage_pointer]
            .into_iter()
            .enumerate()
        {
            if let Some(v) = v {
                if !(v.is_empty() || v.starts_with('/')) {
                    return Err(Status::invalid_argument(
                        "pointer: a JSON pointer starts with / (RFC 6901), e.g. /battery/soc",
                    ));
                }
                p.pointers[i] = v;
            }
        }
        if p.url.is_empty() {
            return Err(Status::failed_precondition("no source configured"));
        }
        let reading = follower::read_source(&p).await;
        let r = reading.as_ref().map_err(String::as_str);
        let step = follower::decide(&p, &st, r, self.power.clock.now_ms());
        Ok(Response::new(TestSourceResponse {
            source_url: p.url,
            ok: reading.is_ok(),
            reading: reading.as_ref().ok().map(reading_pb),
            error: reading.err().unwrap_or_default(),
            decision: if step.sleep { "sleep" } else { "run" }.into(),
            target_watt: step.target_watt,
            reason: step.reason,
            held_by_dwell: step.held_by_dwell,
        }))
    }

    async fn get_swarm(
        &self,
        _request: Request<GetSwarmRequest>,
    ) -> Result<Response<GetSwarmResponse>, Status> {
        Ok(Response::new(GetSwarmResponse {
            status: Some(self.swarm_status()),
        }))
    }

    async fn note_swarm_peers(
        &self,
        request: Request<NoteSwarmPeersRequest>,
    ) -> Result<Response<NoteSwarmPeersResponse>, Status> {
        let r = request.into_inner();
        if r.addresses.len() > MAX_DISCOVERED {
            return Err(Status::invalid_argument(format!(
                "at most {MAX_DISCOVERED} addresses"
            )));
        }
        let mut found = Vec::with_capacity(r.addresses.len());
        for a in &r.addresses {
            let addr: std::net::SocketAddr = a
                .parse()
                .map_err(|_| Status::invalid_argument(format!("{a:?} is not an ip:port")))?;
            if !found.contains(&addr) {
                found.push(addr);
            }
        }
        self.power.swarm().discovered = found;
        Ok(Response::new(NoteSwarmPeersResponse {}))
    }

    async fn post_swarm_room_temperature(
        &self,
        request: Request<PostSwarmRoomTemperatureRequest>,
    ) -> Result<Response<PostSwarmRoomTemperatureResponse>, Status> {
        let r = request.into_inner();
        let (room_c, source) = room_input(r.room_c, &r.source, "api")?;
        self.power.reload_config(false);
        if !self.power.lock().config.swarm.enabled {
            return Err(Status::failed_precondition(
                "the swarm is off ([swarm].enabled)",
            ));
        }
        {
            // The next beat carries it to every member; each feeds its own thermostat once.
            let mut sw = self.power.swarm();
            let origin = sw.unit_id.clone();
            sw.room = Some(RoomReading {
                room_c,
                at_ms: self.power.clock.now_ms(),
                source: source.clone(),
                origin,
            });
        }
        let action = self.power.room_reading(room_c, source);
        self.power.reconcile().await;
        Ok(Response::new(PostSwarmRoomTemperatureResponse {
            action: action_pb(action) as i32,
            status: Some(self.swarm_status()),
        }))
    }

    async fn list_presets(
        &self,
        _request: Request<ListPresetsRequest>,
    ) -> Result<Response<ListPresetsResponse>, Status> {
        Ok(Response::new(presets_pb()))
    }

    async fn list_follower_decisions(
        &self,
        request: Request<ListFollowerDecisionsRequest>,
    ) -> Result<Response<ListFollowerDecisionsResponse>, Status> {
        let r = request.into_inner();
        let mode = mode_from(r.mode);
        let limit = match r.limit {
            0 => 100,
            n => n.min(follower::HISTORY_LIMIT_MAX),
        };
        let power = Arc::clone(&self.power);
        let stored = tokio::task::spawn_blocking(move || {
            power
                .history
                .decisions(mode.map(FollowerMode::as_str), limit)
        })
        .await
        .map_err(|e| Status::internal(format!("history read: {e}")))?
        .map_err(|e| Status::unavailable(e.to_string()))?;
        let entries = stored
            .iter()
            .filter_map(|d| serde_json::from_str::<HistoryEntry>(&d.json).ok())
            .map(|e| entry_pb(&e))
            .collect();
        Ok(Response::new(ListFollowerDecisionsResponse {
            entries,
            capacity: DECISION_CAP as u32,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_answer_carries_every_table_row() {
        let r = presets_pb();
        assert_eq!(r.thermostat.len(), presets::THERMOSTAT.len());
        assert_eq!(r.battery.len(), presets::BATTERY.len());
        let eco = &r.thermostat[0];
        assert_eq!((eco.name.as_str(), eco.target_room_c), ("eco", 19.0));
        assert_eq!(r.battery[0].chemistry, "LiFePO4");
    }

    /// A governor over a temporary state directory whose hw-agent is never reached.
    fn api(dir: &std::path::Path) -> PowerApi {
        let clock: Arc<dyn svcos_common::time::Clock> =
            Arc::new(svcos_common::time::ManualClock::at(10));
        let history =
            Arc::new(crate::history::History::open(&dir.join("h.sqlite"), clock.clone()).unwrap());
        let hw = svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient::new(
            tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy(),
        );
        let power = Power::new(
            dir.join("power"),
            dir.join("config.toml"),
            svcos_common::config::Config::default(),
            clock,
            hw,
            tokio::sync::watch::channel(None).1,
            history,
        );
        PowerApi::new(Arc::new(power))
    }

    #[tokio::test]
    async fn discovered_swarm_peers_are_checked_deduplicated_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let api = api(dir.path());
        let note = |addresses: Vec<&str>| {
            api.note_swarm_peers(Request::new(NoteSwarmPeersRequest {
                addresses: addresses.into_iter().map(String::from).collect(),
            }))
        };
        note(vec!["192.0.2.7:4029", "192.0.2.8:4100", "192.0.2.7:4029"])
            .await
            .unwrap();
        let found = |api: &PowerApi| api.power.swarm().discovered.clone();
        assert_eq!(
            found(&api),
            [
                "192.0.2.7:4029".parse().unwrap(),
                "192.0.2.8:4100".parse().unwrap()
            ]
        );
        // A bad entry refuses the whole list and keeps the last good one.
        let e = note(vec!["192.0.2.9:4029", "den.local:4029"])
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("den.local:4029"), "{}", e.message());
        let many: Vec<String> = (0..=MAX_DISCOVERED)
            .map(|i| format!("192.0.2.1:{}", 1000 + i))
            .collect();
        let e = note(many.iter().map(String::as_str).collect())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(found(&api).len(), 2);
        // Each call replaces the list: units no longer found are no longer sent to.
        note(vec![]).await.unwrap();
        assert!(found(&api).is_empty());
    }

    #[test]
    fn phase_maps_one_to_one() {
        for (p, want) in [
            (
                Phase::WaitingForReading,
                pb::FollowerPhase::WaitingForReading,
            ),
            (Phase::Sleeping, pb::FollowerPhase::Sleeping),
            (Phase::Running, pb::FollowerPhase::Running),
        ] {
            assert_eq!(phase_pb(p), want);
        }
    }
}
