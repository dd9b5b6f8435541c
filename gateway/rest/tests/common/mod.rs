//! Test harness: the real gateway library on an ephemeral TCP port, with in-test fake
//! AuthService, HwAgentService, StratumService and SupervisorService gRPC servers on Unix
//! sockets in a temp runtime dir. The fakes count the calls they get, so tests can assert what
//! the gateway did *not* do (per-request fan-out).

#![allow(dead_code)]

pub mod diag;

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use svcos_common::config::Config;
use svcos_common::entry::ServiceContext;
use svcos_common::time::{Clock, ManualClock};
use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_proto::auth::v1 as auth;
use svcos_proto::hwagent::v1 as hw;
use svcos_proto::stratum::v1 as st;
use svcos_proto::supervisor::v1 as sup;
use tokio::sync::{broadcast, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The password the fake auth accepts.
pub const PASSWORD: &str = "correct horse battery";
/// A token the fake auth accepts.
pub const GOOD: &str = "good-token-0123456789";
/// A token the fake auth reports expired.
pub const EXPIRED: &str = "expired-token-0123456789";
/// A token the fake auth reports revoked.
pub const REVOKED: &str = "revoked-token-0123456789";

/// Calls counted by name.
#[derive(Debug, Default)]
pub struct Calls(Mutex<HashMap<&'static str, usize>>);

impl Calls {
    fn hit(&self, name: &'static str) {
        *self.0.lock().unwrap().entry(name).or_default() += 1;
    }
    /// How often `name` was called.
    pub fn get(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }
    /// Every count so far, for "nothing happened" checks.
    pub fn snapshot(&self) -> HashMap<&'static str, usize> {
        self.0.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------- auth

/// Fake auth: a few fixed tokens, a session table keyed by token, revocations broadcast.
#[derive(Debug)]
pub struct FakeAuth {
    pub calls: Calls,
    clock: ManualClock,
    /// token → (session id, expires at unix s)
    sessions: Mutex<HashMap<String, (String, i64)>>,
    revoked: Mutex<HashSet<String>>,
    revocations: broadcast::Sender<auth::Revocation>,
    setup_attempts: AtomicUsize,
    tickets: Mutex<HashMap<String, String>>,
    next: AtomicUsize,
    /// Hash like the real auth service on login (argon2id m=19456 KiB, t=2, p=1, two at a time).
    pub argon2: std::sync::atomic::AtomicBool,
    hashes: tokio::sync::Semaphore,
}

impl FakeAuth {
    fn new(clock: ManualClock) -> Arc<Self> {
        let now = clock.now_s();
        let sessions = HashMap::from([
            (GOOD.to_string(), ("s-good".to_string(), now + 30 * 86_400)),
            (EXPIRED.to_string(), ("s-expired".to_string(), now - 1)),
            (
                REVOKED.to_string(),
                ("s-revoked".to_string(), now + 30 * 86_400),
            ),
        ]);
        let (revocations, _) = broadcast::channel(64);
        Arc::new(FakeAuth {
            calls: Calls::default(),
            clock,
            sessions: Mutex::new(sessions),
            revoked: Mutex::new(HashSet::from(["s-revoked".to_string()])),
            revocations,
            setup_attempts: AtomicUsize::new(0),
            tickets: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
            argon2: std::sync::atomic::AtomicBool::new(false),
            hashes: tokio::sync::Semaphore::new(2),
        })
    }

    /// Add a session for `token` expiring `ttl_s` from the fake clock's now.
    pub fn add_session(&self, token: &str, session_id: &str, ttl_s: i64) {
        self.sessions.lock().unwrap().insert(
            token.into(),
            (session_id.into(), self.clock.now_s() + ttl_s),
        );
    }

    /// Revoke a session and announce it on the revocation stream.
    pub fn revoke(&self, session_id: &str) {
        self.revoked.lock().unwrap().insert(session_id.into());
        let _ = self.revocations.send(auth::Revocation {
            session_id: session_id.into(),
            reason: "revoked".into(),
        });
    }

    fn check(&self, token: &str) -> Result<(String, i64), Status> {
        let sessions = self.sessions.lock().unwrap();
        let Some((id, exp)) = sessions.get(token).cloned() else {
            return Err(Status::unauthenticated("unknown session"));
        };
        if self.revoked.lock().unwrap().contains(&id) {
            return Err(Status::unauthenticated("session revoked"));
        }
        if exp <= self.clock.now_s() {
            return Err(Status::unauthenticated("session expired"));
        }
        Ok((id, exp))
    }
}

#[derive(Clone)]
struct AuthSvc(Arc<FakeAuth>);

#[tonic::async_trait]
impl auth::auth_service_server::AuthService for AuthSvc {
    async fn get_status(
        &self,
        _: Request<auth::GetStatusRequest>,
    ) -> Result<Response<auth::GetStatusResponse>, Status> {
        self.0.calls.hit("get_status");
        Ok(Response::new(auth::GetStatusResponse {
            password_set: true,
            active_sessions: 1,
        }))
    }
    async fn setup(
        &self,
        _: Request<auth::SetupRequest>,
    ) -> Result<Response<auth::SetupResponse>, Status> {
        self.0.calls.hit("setup");
        let n = self.0.setup_attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if n > 3 {
            let mut s = Status::resource_exhausted("too many setup attempts");
            s.metadata_mut()
                .insert("retry-after", "42".parse().unwrap());
            return Err(s);
        }
        Err(Status::failed_precondition("a password is already set"))
    }
    async fn create_session(
        &self,
        r: Request<auth::CreateSessionRequest>,
    ) -> Result<Response<auth::CreateSessionResponse>, Status> {
        self.0.calls.hit("create_session");
        if self.0.argon2.load(Ordering::Relaxed) {
            let _permit = self.0.hashes.acquire().await.unwrap();
            let password = r.get_ref().password.clone();
            tokio::task::spawn_blocking(move || {
                use argon2::password_hash::{PasswordHasher, SaltString};
                let params = argon2::Params::new(19_456, 2, 1, None).unwrap();
                let a = argon2::Argon2::new(
                    argon2::Algorithm::Argon2id,
                    argon2::Version::V0x13,
                    params,
                );
                let salt = SaltString::encode_b64(b"fixed-bench-salt").unwrap();
                let _ = a.hash_password(password.as_bytes(), &salt);
            })
            .await
            .unwrap();
        }
        if r.get_ref().password != PASSWORD {
            return Err(Status::unauthenticated("wrong password"));
        }
        let n = self.0.next.fetch_add(1, Ordering::SeqCst);
        let token = format!("issued-token-{n:08}");
        let id = format!("s-issued-{n}");
        self.0.add_session(&token, &id, 30 * 86_400);
        let now = self.0.clock.now_s();
        Ok(Response::new(auth::CreateSessionResponse {
            token,
            session_id: id,
            expires_at_unix: now + 30 * 86_400,
            idle_expires_at_unix: now + 8 * 3600,
        }))
    }
    async fn validate_session(
        &self,
        r: Request<auth::ValidateSessionRequest>,
    ) -> Result<Response<auth::ValidateSessionResponse>, Status> {
        self.0.calls.hit("validate_session");
        let (id, exp) = self.0.check(&r.get_ref().token)?;
        Ok(Response::new(auth::ValidateSessionResponse {
            read_only: id.starts_with("tok-"),
            session_id: id,
            expires_at_unix: exp,
            idle_expires_at_unix: self.0.clock.now_s() + 8 * 3600,
        }))
    }
    async fn revoke_session(
        &self,
        r: Request<auth::RevokeSessionRequest>,
    ) -> Result<Response<auth::RevokeSessionResponse>, Status> {
        self.0.calls.hit("revoke_session");
        let (id, _) = self.0.check(&r.get_ref().token)?;
        self.0.revoke(&id);
        Ok(Response::new(auth::RevokeSessionResponse {}))
    }
    async fn issue_ws_ticket(
        &self,
        r: Request<auth::IssueWsTicketRequest>,
    ) -> Result<Response<auth::IssueWsTicketResponse>, Status> {
        let (id, _) = self.0.check(&r.get_ref().token)?;
        let ticket = format!("ticket-{}", self.0.next.fetch_add(1, Ordering::SeqCst));
        self.0.tickets.lock().unwrap().insert(ticket.clone(), id);
        Ok(Response::new(auth::IssueWsTicketResponse {
            ticket,
            expires_at_unix: self.0.clock.now_s() + 30,
        }))
    }
    async fn redeem_ws_ticket(
        &self,
        r: Request<auth::RedeemWsTicketRequest>,
    ) -> Result<Response<auth::RedeemWsTicketResponse>, Status> {
        match self.0.tickets.lock().unwrap().remove(&r.get_ref().ticket) {
            Some(session_id) => Ok(Response::new(auth::RedeemWsTicketResponse { session_id })),
            None => Err(Status::unauthenticated("unknown or used ticket")),
        }
    }
    async fn change_password(
        &self,
        _: Request<auth::ChangePasswordRequest>,
    ) -> Result<Response<auth::ChangePasswordResponse>, Status> {
        Err(Status::unimplemented(
            "the fake auth has no password change",
        ))
    }
    async fn create_api_token(
        &self,
        _: Request<auth::CreateApiTokenRequest>,
    ) -> Result<Response<auth::CreateApiTokenResponse>, Status> {
        Err(Status::unimplemented("the fake auth has no API tokens"))
    }
    async fn list_api_tokens(
        &self,
        _: Request<auth::ListApiTokensRequest>,
    ) -> Result<Response<auth::ListApiTokensResponse>, Status> {
        Ok(Response::new(auth::ListApiTokensResponse {
            tokens: vec![],
        }))
    }
    async fn revoke_api_token(
        &self,
        _: Request<auth::RevokeApiTokenRequest>,
    ) -> Result<Response<auth::RevokeApiTokenResponse>, Status> {
        Err(Status::not_found("no API token with that id"))
    }
    type StreamStatusStream = Boxed<auth::GetStatusResponse>;
    async fn stream_status(
        &self,
        _: Request<auth::StreamStatusRequest>,
    ) -> Result<Response<Self::StreamStatusStream>, Status> {
        self.0.calls.hit("stream_status");
        let now = futures::stream::once(async {
            Ok(auth::GetStatusResponse {
                password_set: true,
                active_sessions: 1,
            })
        });
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            now,
            futures::stream::pending(),
        ))))
    }
    type StreamRevocationsStream = Boxed<auth::Revocation>;
    async fn stream_revocations(
        &self,
        _: Request<auth::StreamRevocationsRequest>,
    ) -> Result<Response<Self::StreamRevocationsStream>, Status> {
        self.0.calls.hit("stream_revocations");
        let rx = self.0.revocations.subscribe();
        let s = tokio_stream::wrappers::BroadcastStream::new(rx);
        let s = tokio_stream::StreamExt::filter_map(s, |r| r.ok().map(Ok));
        Ok(Response::new(Box::pin(s)))
    }
}

// ---------------------------------------------------------------- hw-agent

/// Fake hw-agent: telemetry from a watch channel the test can update; counts calls.
#[derive(Debug)]
pub struct FakeHw {
    pub calls: Calls,
    pub telemetry: watch::Sender<hw::Telemetry>,
    pub last_fan: Mutex<Option<hw::SetFanRequest>>,
    pub last_frequency: Mutex<Option<hw::SetFrequencyRequest>>,
}

/// A plausible telemetry snapshot.
pub fn sample_telemetry(seq: u64) -> hw::Telemetry {
    hw::Telemetry {
        seq,
        timestamp_ms: 1_700_000_000_000 + seq as i64 * 1000,
        state: hw::MiningState::Mining as i32,
        hashrate: Some(hw::Hashrate {
            ghs_5s: 13_500.0,
            ghs_1m: 13_400.0,
            ghs_15m: 13_450.0,
            ghs_expected: 13_500.0,
        }),
        chains: (0..3)
            .map(|i| hw::ChainTelemetry {
                chain_id: i,
                state: hw::ChainState::Mining as i32,
                chips_expected: 63,
                chips_detected: 63,
                frequency_mhz: 650.0,
                voltage_mv: 8800.0,
                hashrate: Some(hw::Hashrate {
                    ghs_1m: 4466.0,
                    ghs_expected: 4500.0,
                    ..Default::default()
                }),
                temp_chip_c: 70.0 + i as f64,
                temp_board_c: 55.0,
                ..Default::default()
            })
            .collect(),
        fans: vec![hw::FanTelemetry {
            fan_id: 0,
            rpm: 4200,
            pwm_percent: 60,
            stalled: false,
        }],
        power_watt: 1320.0,
        temp_max_c: 72.0,
        temp_target_c: 75.0,
        model: "Antminer S9".into(),
        ..Default::default()
    }
}

#[derive(Clone)]
struct HwSvc(Arc<FakeHw>);

#[tonic::async_trait]
impl hw::hw_agent_service_server::HwAgentService for HwSvc {
    async fn get_telemetry(
        &self,
        _: Request<hw::GetTelemetryRequest>,
    ) -> Result<Response<hw::GetTelemetryResponse>, Status> {
        self.0.calls.hit("get_telemetry");
        Ok(Response::new(hw::GetTelemetryResponse {
            telemetry: Some(self.0.telemetry.borrow().clone()),
        }))
    }
    type StreamTelemetryStream = Boxed<hw::Telemetry>;
    async fn stream_telemetry(
        &self,
        _: Request<hw::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        self.0.calls.hit("stream_telemetry");
        let s = tokio_stream::wrappers::WatchStream::new(self.0.telemetry.subscribe());
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(s, Ok))))
    }
    async fn get_inventory(
        &self,
        _: Request<hw::GetInventoryRequest>,
    ) -> Result<Response<hw::GetInventoryResponse>, Status> {
        self.0.calls.hit("get_inventory");
        Ok(Response::new(hw::GetInventoryResponse {
            model: "Antminer S9".into(),
            vendor: "Bitmain".into(),
            board: "s9".into(),
            chip_model: "BM1387".into(),
            driver: "sim".into(),
            ..Default::default()
        }))
    }
    type StreamEventsStream = Boxed<hw::HwEvent>;
    async fn stream_events(
        &self,
        _: Request<hw::StreamEventsRequest>,
    ) -> Result<Response<Self::StreamEventsStream>, Status> {
        Err(Status::unimplemented("events"))
    }
    async fn set_fan(
        &self,
        r: Request<hw::SetFanRequest>,
    ) -> Result<Response<hw::SetFanResponse>, Status> {
        self.0.calls.hit("set_fan");
        let r = r.into_inner();
        // hw-agent's own rule, so the gateway is tested against the owner's verdict.
        svcos_hw_agent::service::check_set_fan(&r)
            .map_err(|e| svcos_common::status::ToStatus::to_status(&e))?;
        *self.0.last_fan.lock().unwrap() = Some(r);
        Ok(Response::new(hw::SetFanResponse {}))
    }
    async fn set_frequency(
        &self,
        r: Request<hw::SetFrequencyRequest>,
    ) -> Result<Response<hw::SetFrequencyResponse>, Status> {
        self.0.calls.hit("set_frequency");
        let f = r.into_inner();
        let applied = f.frequency_mhz;
        *self.0.last_frequency.lock().unwrap() = Some(f);
        Ok(Response::new(hw::SetFrequencyResponse {
            applied_mhz: applied,
        }))
    }
    async fn set_voltage(
        &self,
        r: Request<hw::SetVoltageRequest>,
    ) -> Result<Response<hw::SetVoltageResponse>, Status> {
        self.0.calls.hit("set_voltage");
        Ok(Response::new(hw::SetVoltageResponse {
            applied_mv: r.get_ref().voltage_mv,
        }))
    }
    async fn set_power_target(
        &self,
        _: Request<hw::SetPowerTargetRequest>,
    ) -> Result<Response<hw::SetPowerTargetResponse>, Status> {
        Err(Status::unimplemented("power target"))
    }
    async fn set_sleep(
        &self,
        r: Request<hw::SetSleepRequest>,
    ) -> Result<Response<hw::SetSleepResponse>, Status> {
        self.0.calls.hit("set_sleep");
        let state = if r.get_ref().sleep {
            hw::MiningState::Sleeping
        } else {
            hw::MiningState::Bringup
        };
        Ok(Response::new(hw::SetSleepResponse {
            state: state as i32,
        }))
    }
    async fn set_led(
        &self,
        _: Request<hw::SetLedRequest>,
    ) -> Result<Response<hw::SetLedResponse>, Status> {
        self.0.calls.hit("set_led");
        Ok(Response::new(hw::SetLedResponse {}))
    }
    async fn set_chain_enabled(
        &self,
        _: Request<hw::SetChainEnabledRequest>,
    ) -> Result<Response<hw::SetChainEnabledResponse>, Status> {
        Err(Status::unimplemented("chain enable"))
    }
    async fn reload_config(
        &self,
        _: Request<hw::ReloadConfigRequest>,
    ) -> Result<Response<hw::ReloadConfigResponse>, Status> {
        self.0.calls.hit("reload_config");
        Ok(Response::new(hw::ReloadConfigResponse {}))
    }
}

// ---------------------------------------------------------------- stratum-agent

/// Fake stratum-agent: one pool snapshot; counts calls.
#[derive(Debug)]
pub struct FakeStratum {
    pub calls: Calls,
    pub pools: watch::Sender<st::GetPoolsResponse>,
}

#[derive(Clone)]
struct StratumSvc(Arc<FakeStratum>);

#[tonic::async_trait]
impl st::stratum_service_server::StratumService for StratumSvc {
    type StreamJobsStream = Boxed<st::JobTemplate>;
    async fn stream_jobs(
        &self,
        _: Request<st::StreamJobsRequest>,
    ) -> Result<Response<Self::StreamJobsStream>, Status> {
        // One current job, as stratum-agent's watch stream starts with: a coinbase with a BIP34
        // height push of 840000 and block 840000's compact bits.
        let mut coinb1 = vec![1, 0, 0, 0, 1];
        coinb1.extend([0; 32]);
        coinb1.extend([0xff; 4]);
        coinb1.extend([20, 3, 0x40, 0xd1, 0x0c]);
        let job = st::JobTemplate {
            job_id: "1a".into(),
            prev_hash: (0u8..32).collect(),
            coinb1,
            nbits: 0x1703_4219,
            version: 0x2000_0000,
            ntime: 1_713_571_767,
            share_difficulty: 512.0,
            ..Default::default()
        };
        let s =
            tokio_stream::StreamExt::chain(tokio_stream::iter([Ok(job)]), tokio_stream::pending());
        Ok(Response::new(Box::pin(s)))
    }
    async fn submit_share(
        &self,
        _: Request<st::SubmitShareRequest>,
    ) -> Result<Response<st::SubmitShareResponse>, Status> {
        Err(Status::unimplemented("submit"))
    }
    type SubmitSharesStream = Boxed<st::SubmitShareResponse>;
    async fn submit_shares(
        &self,
        _: Request<tonic::Streaming<st::SubmitShareRequest>>,
    ) -> Result<Response<Self::SubmitSharesStream>, Status> {
        Err(Status::unimplemented("submit"))
    }
    async fn get_pools(
        &self,
        _: Request<st::GetPoolsRequest>,
    ) -> Result<Response<st::GetPoolsResponse>, Status> {
        self.0.calls.hit("get_pools");
        Ok(Response::new(self.0.pools.borrow().clone()))
    }
    type StreamPoolsStream = Boxed<st::GetPoolsResponse>;
    async fn stream_pools(
        &self,
        _: Request<st::StreamPoolsRequest>,
    ) -> Result<Response<Self::StreamPoolsStream>, Status> {
        self.0.calls.hit("stream_pools");
        let s = tokio_stream::wrappers::WatchStream::new(self.0.pools.subscribe());
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(s, Ok))))
    }
    async fn switch_pool(
        &self,
        _: Request<st::SwitchPoolRequest>,
    ) -> Result<Response<st::SwitchPoolResponse>, Status> {
        Err(Status::unimplemented("switch"))
    }
    async fn set_pool_enabled(
        &self,
        _: Request<st::SetPoolEnabledRequest>,
    ) -> Result<Response<st::SetPoolEnabledResponse>, Status> {
        Err(Status::unimplemented("enable"))
    }
    async fn add_pool(
        &self,
        _: Request<st::AddPoolRequest>,
    ) -> Result<Response<st::AddPoolResponse>, Status> {
        Err(Status::unimplemented("add"))
    }
    async fn remove_pool(
        &self,
        _: Request<st::RemovePoolRequest>,
    ) -> Result<Response<st::RemovePoolResponse>, Status> {
        Err(Status::unimplemented("remove"))
    }
    async fn set_pool_priority(
        &self,
        _: Request<st::SetPoolPriorityRequest>,
    ) -> Result<Response<st::SetPoolPriorityResponse>, Status> {
        Err(Status::unimplemented("priority"))
    }
    async fn test_pool(
        &self,
        r: Request<st::TestPoolRequest>,
    ) -> Result<Response<st::TestPoolResponse>, Status> {
        self.0.calls.hit("test_pool");
        let ok = r.get_ref().url.contains("good");
        Ok(Response::new(st::TestPoolResponse {
            ok,
            steps: vec![st::TestPoolStep {
                name: "connect".into(),
                ok,
                elapsed_ms: 1.0,
                error: String::new(),
            }],
            error: if ok {
                String::new()
            } else {
                "connection refused".into()
            },
        }))
    }
    async fn get_donation(
        &self,
        _: Request<st::GetDonationRequest>,
    ) -> Result<Response<st::GetDonationResponse>, Status> {
        Ok(Response::new(st::GetDonationResponse::default()))
    }
    async fn get_jd_status(
        &self,
        _: Request<st::GetJdStatusRequest>,
    ) -> Result<Response<st::GetJdStatusResponse>, Status> {
        Ok(Response::new(st::GetJdStatusResponse {
            template_source: "none".into(),
            pool_index: -1,
            ..Default::default()
        }))
    }
    async fn test_jd_connection(
        &self,
        _: Request<st::TestJdConnectionRequest>,
    ) -> Result<Response<st::TestJdConnectionResponse>, Status> {
        Err(Status::failed_precondition(
            "Stratum V2 is disabled ([stratum].sv2_enabled = false)",
        ))
    }
    async fn get_sv2_status(
        &self,
        _: Request<st::GetSv2StatusRequest>,
    ) -> Result<Response<st::GetSv2StatusResponse>, Status> {
        Ok(Response::new(st::GetSv2StatusResponse {
            state: "disabled".into(),
            ..Default::default()
        }))
    }
    async fn reload_config(
        &self,
        _: Request<st::ReloadConfigRequest>,
    ) -> Result<Response<st::ReloadConfigResponse>, Status> {
        self.0.calls.hit("reload_config");
        Ok(Response::new(st::ReloadConfigResponse {}))
    }
}

// ---------------------------------------------------------------- supervisor

/// Fake supervisor: records restarts.
#[derive(Debug, Default)]
pub struct FakeSupervisor {
    pub restarts: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct SupSvc(Arc<FakeSupervisor>);

/// The supervisor's update service with nothing installed and no stock image: idle, slot A
/// booted; installs are refused as the real one refuses an unreadable bundle.
struct FakeUpdate;

#[tonic::async_trait]
impl sup::update_service_server::UpdateService for FakeUpdate {
    async fn get_update_status(
        &self,
        _r: tonic::Request<sup::GetUpdateStatusRequest>,
    ) -> Result<tonic::Response<sup::UpdateStatus>, tonic::Status> {
        Ok(tonic::Response::new(sup::UpdateStatus {
            phase: sup::UpdatePhase::Idle as i32,
            kind: "update".into(),
            running_version: env!("CARGO_PKG_VERSION").into(),
            booted_slot: "A".into(),
            primary_slot: "A".into(),
            compatible: "svcos-sim-s9".into(),
            slot_manager_reachable: true,
            ..Default::default()
        }))
    }

    async fn install_bundle(
        &self,
        _r: tonic::Request<sup::InstallBundleRequest>,
    ) -> Result<tonic::Response<sup::UpdateStatus>, tonic::Status> {
        let mut s = tonic::Status::invalid_argument("not a complete RAUC bundle");
        s.metadata_mut()
            .insert("svcos-refusal", "truncated".parse().unwrap());
        Err(s)
    }

    async fn restore_preflight(
        &self,
        _r: tonic::Request<sup::RestorePreflightRequest>,
    ) -> Result<tonic::Response<sup::RestorePreflightResponse>, tonic::Status> {
        Ok(tonic::Response::new(sup::RestorePreflightResponse {
            ready: false,
            checks: vec![sup::PreflightCheck {
                id: "stock_image_present".into(),
                passed: false,
                detail: "no stock image on the data partition".into(),
            }],
            will_be_lost: vec!["svcOS configuration".into()],
            stock_version: String::new(),
        }))
    }

    async fn restore_to_stock(
        &self,
        _r: tonic::Request<sup::RestoreToStockRequest>,
    ) -> Result<tonic::Response<sup::UpdateStatus>, tonic::Status> {
        let mut s = tonic::Status::failed_precondition(
            "restore to stock refused: stock_image_present: no stock image",
        );
        s.metadata_mut()
            .insert("svcos-refusal", "preflight_failed".parse().unwrap());
        Err(s)
    }
}

#[tonic::async_trait]
impl sup::supervisor_service_server::SupervisorService for SupSvc {
    async fn list_services(
        &self,
        _: Request<sup::ListServicesRequest>,
    ) -> Result<Response<sup::ListServicesResponse>, Status> {
        Ok(Response::new(sup::ListServicesResponse {
            services: vec![sup::ServiceInfo {
                name: "hw-agent".into(),
                state: sup::ServiceState::Running as i32,
                ..Default::default()
            }],
        }))
    }
    async fn restart(
        &self,
        r: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        let name = r.into_inner().name;
        self.0.restarts.lock().unwrap().push(name.clone());
        Ok(Response::new(sup::ServiceResponse {
            service: Some(sup::ServiceInfo {
                name,
                state: sup::ServiceState::Starting as i32,
                ..Default::default()
            }),
        }))
    }
    async fn stop(
        &self,
        _: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        Err(Status::unimplemented("stop"))
    }
    async fn start(
        &self,
        _: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        Err(Status::unimplemented("start"))
    }
    async fn restart_stack(
        &self,
        _: Request<sup::RestartStackRequest>,
    ) -> Result<Response<sup::RestartStackResponse>, Status> {
        self.0.restarts.lock().unwrap().push("<stack>".into());
        Ok(Response::new(sup::RestartStackResponse {
            services: vec!["hw-agent".into(), "gateway".into()],
        }))
    }
}

// ---------------------------------------------------------------- harness

/// Which fakes to start.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: Config,
    pub auth: bool,
    pub hw: bool,
    pub stratum: bool,
    /// Override the config path (to make writes fail).
    pub config_path: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        let mut config = Config::default();
        config.api.bind = [127, 0, 0, 1].into();
        // The responder would join the mDNS group on every interface of the test host.
        config.network.mdns.enabled = false;
        Options {
            config,
            auth: true,
            hw: true,
            stratum: true,
            config_path: None,
        }
    }
}

/// A running gateway with its fakes.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub layout: Layout,
    pub base: String,
    pub shutdown: Shutdown,
    pub clock: ManualClock,
    pub auth: Arc<FakeAuth>,
    pub hw: Arc<FakeHw>,
    pub stratum: Arc<FakeStratum>,
    pub supervisor: Arc<FakeSupervisor>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response: status, headers, body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON (panics with the body text when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Assert the body is the error envelope; returns it.
    pub fn envelope(&self) -> Value {
        let v = self.json();
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("envelope is not an object: {v}"));
        assert!(
            obj.get("error").is_some_and(Value::is_string),
            "no error member: {v}"
        );
        for k in ["detail", "code", "suggestion"] {
            if let Some(m) = obj.get(k) {
                assert!(
                    m.as_str().is_some_and(|s| !s.is_empty()),
                    "{k} empty or not a string: {v}"
                );
            }
        }
        if let Some(code) = obj.get("code").and_then(Value::as_str) {
            assert!(
                [
                    "config_validation",
                    "pool_validation",
                    "pool_config_write_failed",
                    "config_conflict",
                    "error_body_unavailable",
                    "legacy_error",
                    "unclassified_error"
                ]
                .contains(&code),
                "unknown code {code}"
            );
        }
        v
    }
}

impl Harness {
    /// Start fakes and the gateway.
    pub async fn start(opts: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let mut layout = Layout::sim(dir.path());
        if let Some(p) = &opts.config_path {
            layout.config_path = p.clone();
        }
        let shutdown = Shutdown::new();
        let clock = ManualClock::at(1_700_000_000_000);
        let auth = FakeAuth::new(clock.clone());
        let (tele_tx, _) = watch::channel(sample_telemetry(1));
        let hw = Arc::new(FakeHw {
            calls: Calls::default(),
            telemetry: tele_tx,
            last_fan: Mutex::new(None),
            last_frequency: Mutex::new(None),
        });
        let (pools_tx, _) = watch::channel(st::GetPoolsResponse {
            pools: vec![st::PoolStatus {
                index: 0,
                url: "stratum+tcp://pool.example:3333".into(),
                user: "worker".into(),
                state: st::PoolState::Alive as i32,
                active: true,
                enabled: true,
                accepted: 10,
                ..Default::default()
            }],
            active_index: 0,
            accepted: 10,
            ..Default::default()
        });
        let stratum = Arc::new(FakeStratum {
            calls: Calls::default(),
            pools: pools_tx,
        });
        let supervisor = Arc::new(FakeSupervisor::default());

        if opts.auth {
            let l = ipc::bind(&layout.socket(ServiceName::Auth)).unwrap();
            let svc = auth::auth_service_server::AuthServiceServer::new(AuthSvc(auth.clone()));
            tokio::spawn(ipc::serve(
                ipc::server().add_service(svc),
                l,
                shutdown.clone(),
            ));
        }
        if opts.hw {
            let l = ipc::bind(&layout.socket(ServiceName::HwAgent)).unwrap();
            let svc = hw::hw_agent_service_server::HwAgentServiceServer::new(HwSvc(hw.clone()));
            let diag =
                hw::hw_diagnostics_service_server::HwDiagnosticsServiceServer::new(diag::FakeDiag);
            tokio::spawn(ipc::serve(
                ipc::server().add_service(svc).add_service(diag),
                l,
                shutdown.clone(),
            ));
        }
        if opts.stratum {
            let l = ipc::bind(&layout.socket(ServiceName::StratumAgent)).unwrap();
            let svc =
                st::stratum_service_server::StratumServiceServer::new(StratumSvc(stratum.clone()));
            tokio::spawn(ipc::serve(
                ipc::server().add_service(svc),
                l,
                shutdown.clone(),
            ));
        }
        {
            let l = ipc::bind(&layout.socket(ServiceName::Supervisor)).unwrap();
            let svc = sup::supervisor_service_server::SupervisorServiceServer::new(SupSvc(
                supervisor.clone(),
            ));
            let update = sup::update_service_server::UpdateServiceServer::new(FakeUpdate);
            tokio::spawn(ipc::serve(
                ipc::server().add_service(svc).add_service(update),
                l,
                shutdown.clone(),
            ));
        }

        {
            // The real tuner (its production entry), driving the fake hw-agent.
            let l = ipc::bind(&layout.socket(ServiceName::Tuner)).unwrap();
            let ctx = ServiceContext {
                name: ServiceName::Tuner,
                layout: layout.clone(),
                config: opts.config.clone(),
            };
            tokio::spawn(svcos_tuner::run(ctx, l, shutdown.clone()));
        }
        let grpc = ipc::bind(&layout.socket(ServiceName::Gateway)).unwrap();
        let http =
            tokio::net::TcpListener::bind(std::net::SocketAddr::new(opts.config.api.bind, 0))
                .await
                .unwrap();
        let base = format!("http://{}", http.local_addr().unwrap());
        let ctx = ServiceContext {
            name: ServiceName::Gateway,
            layout: layout.clone(),
            config: opts.config.clone(),
        };
        let clock_dyn: Arc<dyn Clock> = Arc::new(clock.clone());
        tokio::spawn(svcos_gateway::serve_with_clock(
            ctx,
            grpc,
            http,
            shutdown.clone(),
            clock_dyn,
        ));

        let client = Client::builder(TokioExecutor::new()).build_http();
        let h = Harness {
            dir,
            layout,
            base,
            shutdown,
            clock,
            auth,
            hw,
            stratum,
            supervisor,
            client,
        };
        h.wait_ready(opts.auth, opts.hw, opts.stratum).await;
        h
    }

    /// Wait (bounded) until the gateway answers and its streams are connected.
    async fn wait_ready(&self, auth: bool, hw: bool, stratum: bool) {
        for _ in 0..400 {
            let r = self.get("/api/status", Some(GOOD)).await;
            let ok = |v: &Value| {
                (!hw || v["sources"]["hw_agent"]["up"] == true)
                    && (!stratum || v["sources"]["stratum_agent"]["up"] == true)
            };
            if ((!auth && r.status == 503) || (r.status == 200 && ok(&r.json())))
                && (!auth || self.auth.calls.get("stream_revocations") > 0)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("gateway did not become ready");
    }

    /// Send a request.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Reply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(a) = auth.as_deref() {
            headers.push(("authorization", a));
        }
        if let Some(ct) = content_type {
            headers.push(("content-type", ct));
        }
        self.request_with(method, path, &headers, body).await
    }

    /// A request with these headers (repeated names are sent repeated) and body.
    pub async fn request_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut b = http::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        let req = b.body(Full::new(body.into())).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), self.client.request(req))
            .await
            .expect("request must not hang")
            .expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// GET.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.request("GET", path, token, None, Bytes::new()).await
    }

    /// A request with a JSON body.
    pub async fn send_json(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Reply {
        self.request(
            method,
            path,
            token,
            Some("application/json"),
            body.to_string(),
        )
        .await
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// Rows of the committed routes.tsv copy: (method, path, auth, pinned, group).
pub fn spec_rows(text: &str) -> Vec<(String, String, String, bool, String)> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].into(),
                f[1].into(),
                f[2].into(),
                f[3] == "pinned",
                f[4].into(),
            )
        })
        .collect()
}

/// Substitute path parameters with a sample value.
pub fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| if s.starts_with(':') { "sample-id" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}
