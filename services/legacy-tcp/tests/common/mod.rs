//! Test harness: real gRPC fakes of hw-agent, stratum-agent and the supervisor on Unix
//! sockets in a temp runtime dir, the legacy server on an ephemeral TCP port, and a raw
//! socket client that behaves like pyasic (bare JSON, read to EOF).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use svcos_common::{Shutdown, ipc};
use svcos_legacy_tcp::allow::AllowList;
use svcos_legacy_tcp::commands::Identity;
use svcos_legacy_tcp::live::Live;
use svcos_legacy_tcp::server::{Limits, Peers, Server};
use svcos_proto::hwagent::v1 as hw;
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::hw_agent_service_server::{HwAgentService, HwAgentServiceServer};
use svcos_proto::stratum::v1 as st;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::stratum_service_server::{StratumService, StratumServiceServer};
use svcos_proto::supervisor::v1 as sup;
use svcos_proto::supervisor::v1::supervisor_service_client::SupervisorServiceClient;
use svcos_proto::supervisor::v1::supervisor_service_server::{
    SupervisorService, SupervisorServiceServer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Calls the fakes received, in order, as text ("SwitchPool 1").
#[derive(Clone, Default)]
pub struct Calls(pub Arc<Mutex<Vec<String>>>);

impl Calls {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

pub struct FakeHw {
    pub stop: Shutdown,
    pub telemetry: watch::Receiver<hw::Telemetry>,
    pub inventory: hw::GetInventoryResponse,
    pub calls: Calls,
}

#[tonic::async_trait]
impl HwAgentService for FakeHw {
    async fn get_telemetry(
        &self,
        _: Request<hw::GetTelemetryRequest>,
    ) -> Result<Response<hw::GetTelemetryResponse>, Status> {
        self.calls.push("GetTelemetry".into());
        Ok(Response::new(hw::GetTelemetryResponse {
            telemetry: Some(self.telemetry.borrow().clone()),
        }))
    }
    type StreamTelemetryStream = Boxed<hw::Telemetry>;
    async fn stream_telemetry(
        &self,
        r: Request<hw::StreamTelemetryRequest>,
    ) -> Result<Response<Self::StreamTelemetryStream>, Status> {
        self.calls.push(format!(
            "StreamTelemetry chips={}",
            r.get_ref().include_chips
        ));
        // End the stream when the fake "dies", like a killed hw-agent would.
        let s = futures::StreamExt::take_until(
            WatchStream::new(self.telemetry.clone()).map(Ok),
            self.stop.wait_owned(),
        );
        Ok(Response::new(Box::pin(s)))
    }
    async fn get_inventory(
        &self,
        _: Request<hw::GetInventoryRequest>,
    ) -> Result<Response<hw::GetInventoryResponse>, Status> {
        self.calls.push("GetInventory".into());
        Ok(Response::new(self.inventory.clone()))
    }
    type StreamEventsStream = Boxed<hw::HwEvent>;
    async fn stream_events(
        &self,
        _: Request<hw::StreamEventsRequest>,
    ) -> Result<Response<Self::StreamEventsStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_fan(
        &self,
        _: Request<hw::SetFanRequest>,
    ) -> Result<Response<hw::SetFanResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_frequency(
        &self,
        r: Request<hw::SetFrequencyRequest>,
    ) -> Result<Response<hw::SetFrequencyResponse>, Status> {
        let r = r.into_inner();
        self.calls.push(format!(
            "SetFrequency chain={:?} mhz={}",
            r.chain_id, r.frequency_mhz
        ));
        Ok(Response::new(hw::SetFrequencyResponse {
            applied_mhz: r.frequency_mhz,
        }))
    }
    async fn set_voltage(
        &self,
        _: Request<hw::SetVoltageRequest>,
    ) -> Result<Response<hw::SetVoltageResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_power_target(
        &self,
        _: Request<hw::SetPowerTargetRequest>,
    ) -> Result<Response<hw::SetPowerTargetResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_sleep(
        &self,
        _: Request<hw::SetSleepRequest>,
    ) -> Result<Response<hw::SetSleepResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_led(
        &self,
        _: Request<hw::SetLedRequest>,
    ) -> Result<Response<hw::SetLedResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_chain_enabled(
        &self,
        r: Request<hw::SetChainEnabledRequest>,
    ) -> Result<Response<hw::SetChainEnabledResponse>, Status> {
        let r = r.into_inner();
        self.calls.push(format!(
            "SetChainEnabled chain={} enabled={}",
            r.chain_id, r.enabled
        ));
        Ok(Response::new(hw::SetChainEnabledResponse {}))
    }
    async fn reload_config(
        &self,
        _: Request<hw::ReloadConfigRequest>,
    ) -> Result<Response<hw::ReloadConfigResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

pub struct FakeStratum {
    pub stop: Shutdown,
    pub pools: watch::Receiver<st::GetPoolsResponse>,
    pub calls: Calls,
}

#[tonic::async_trait]
impl StratumService for FakeStratum {
    type StreamJobsStream = Boxed<st::JobTemplate>;
    async fn stream_jobs(
        &self,
        _: Request<st::StreamJobsRequest>,
    ) -> Result<Response<Self::StreamJobsStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn submit_share(
        &self,
        _: Request<st::SubmitShareRequest>,
    ) -> Result<Response<st::SubmitShareResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    type SubmitSharesStream = Boxed<st::SubmitShareResponse>;
    async fn submit_shares(
        &self,
        _: Request<tonic::Streaming<st::SubmitShareRequest>>,
    ) -> Result<Response<Boxed<st::SubmitShareResponse>>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_pools(
        &self,
        _: Request<st::GetPoolsRequest>,
    ) -> Result<Response<st::GetPoolsResponse>, Status> {
        self.calls.push("GetPools".into());
        Ok(Response::new(self.pools.borrow().clone()))
    }
    type StreamPoolsStream = Boxed<st::GetPoolsResponse>;
    async fn stream_pools(
        &self,
        _: Request<st::StreamPoolsRequest>,
    ) -> Result<Response<Self::StreamPoolsStream>, Status> {
        self.calls.push("StreamPools".into());
        Ok(Response::new(Box::pin(futures::StreamExt::take_until(
            WatchStream::new(self.pools.clone()).map(Ok),
            self.stop.wait_owned(),
        ))))
    }
    async fn switch_pool(
        &self,
        r: Request<st::SwitchPoolRequest>,
    ) -> Result<Response<st::SwitchPoolResponse>, Status> {
        self.calls.push(format!("SwitchPool {}", r.get_ref().index));
        Ok(Response::new(st::SwitchPoolResponse {}))
    }
    async fn set_pool_enabled(
        &self,
        r: Request<st::SetPoolEnabledRequest>,
    ) -> Result<Response<st::SetPoolEnabledResponse>, Status> {
        let r = r.into_inner();
        self.calls
            .push(format!("SetPoolEnabled {} {}", r.index, r.enabled));
        Ok(Response::new(st::SetPoolEnabledResponse {}))
    }
    async fn add_pool(
        &self,
        r: Request<st::AddPoolRequest>,
    ) -> Result<Response<st::AddPoolResponse>, Status> {
        let r = r.into_inner();
        if !r.url.starts_with("stratum") {
            return Err(Status::invalid_argument("pool url must be stratum+tcp://"));
        }
        self.calls
            .push(format!("AddPool {} {} {}", r.url, r.user, r.password));
        Ok(Response::new(st::AddPoolResponse { index: 2 }))
    }
    async fn remove_pool(
        &self,
        r: Request<st::RemovePoolRequest>,
    ) -> Result<Response<st::RemovePoolResponse>, Status> {
        self.calls.push(format!("RemovePool {}", r.get_ref().index));
        Ok(Response::new(st::RemovePoolResponse {}))
    }
    async fn set_pool_priority(
        &self,
        r: Request<st::SetPoolPriorityRequest>,
    ) -> Result<Response<st::SetPoolPriorityResponse>, Status> {
        self.calls
            .push(format!("SetPoolPriority {:?}", r.get_ref().order));
        Ok(Response::new(st::SetPoolPriorityResponse {}))
    }
    async fn test_pool(
        &self,
        _: Request<st::TestPoolRequest>,
    ) -> Result<Response<st::TestPoolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_donation(
        &self,
        _: Request<st::GetDonationRequest>,
    ) -> Result<Response<st::GetDonationResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_jd_status(
        &self,
        _: Request<st::GetJdStatusRequest>,
    ) -> Result<Response<st::GetJdStatusResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn test_jd_connection(
        &self,
        _: Request<st::TestJdConnectionRequest>,
    ) -> Result<Response<st::TestJdConnectionResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_sv2_status(
        &self,
        _: Request<st::GetSv2StatusRequest>,
    ) -> Result<Response<st::GetSv2StatusResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn reload_config(
        &self,
        _: Request<st::ReloadConfigRequest>,
    ) -> Result<Response<st::ReloadConfigResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

pub struct FakeSupervisor {
    pub calls: Calls,
}

#[tonic::async_trait]
impl SupervisorService for FakeSupervisor {
    async fn list_services(
        &self,
        _: Request<sup::ListServicesRequest>,
    ) -> Result<Response<sup::ListServicesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn restart(
        &self,
        r: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        self.calls.push(format!("Restart {}", r.get_ref().name));
        Ok(Response::new(sup::ServiceResponse { service: None }))
    }
    async fn stop(
        &self,
        _: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn start(
        &self,
        _: Request<sup::ServiceRequest>,
    ) -> Result<Response<sup::ServiceResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn restart_stack(
        &self,
        _: Request<sup::RestartStackRequest>,
    ) -> Result<Response<sup::RestartStackResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// An S9-like board: three chains of 63 chips (one chip missing on the third), two fans.
pub fn s9_telemetry(uptime_s: u64) -> hw::Telemetry {
    let chain = |id: u32| hw::ChainTelemetry {
        chain_id: id,
        state: hw::ChainState::Mining as i32,
        chips_expected: 63,
        chips_detected: if id == 2 { 62 } else { 63 },
        frequency_mhz: 650.0,
        voltage_mv: 8800.0,
        hashrate: Some(hw::Hashrate {
            ghs_5s: 4500.0 + f64::from(id) * 10.0,
            ghs_1m: 4490.0,
            ghs_15m: 4480.0,
            ghs_expected: 4520.0,
        }),
        nonces: 1000,
        hw_errors: u64::from(id),
        temp_board_c: 55.0 + f64::from(id),
        temp_chip_c: 70.0 + f64::from(id),
        power_watt: 430.0,
        ..Default::default()
    };
    hw::Telemetry {
        seq: uptime_s,
        state: hw::MiningState::Mining as i32,
        hashrate: Some(hw::Hashrate {
            ghs_5s: 13_530.0,
            ghs_1m: 13_470.0,
            ghs_15m: 13_440.0,
            ghs_expected: 13_560.0,
        }),
        chains: vec![chain(0), chain(1), chain(2)],
        fans: vec![
            hw::FanTelemetry {
                fan_id: 0,
                rpm: 4320,
                pwm_percent: 62,
                stalled: false,
            },
            hw::FanTelemetry {
                fan_id: 1,
                rpm: 4380,
                pwm_percent: 62,
                stalled: false,
            },
        ],
        nonces: 3000,
        hw_errors: 3,
        mining_uptime_s: uptime_s,
        temp_max_c: 72.0,
        model: "Antminer S9".into(),
        job_received_at_ms: 1_700_000_000_000,
        ..Default::default()
    }
}

pub fn inventory() -> hw::GetInventoryResponse {
    hw::GetInventoryResponse {
        model: "Antminer S9".into(),
        vendor: "Bitmain".into(),
        board: "s9".into(),
        chip_model: "BM1387".into(),
        chains: (0..3)
            .map(|id| hw::ChainInfo {
                chain_id: id,
                chips_expected: 63,
                chips_detected: if id == 2 { 62 } else { 63 },
                chip_model: "BM1387".into(),
                device: format!("/dev/ttyS{}", id + 1),
                missing_chips: if id == 2 { vec![17] } else { vec![] },
            })
            .collect(),
        fan_count: 2,
        driver: "sim".into(),
        ..Default::default()
    }
}

pub fn two_pools() -> st::GetPoolsResponse {
    let pool = |index: u32, active: bool| st::PoolStatus {
        index,
        url: format!("stratum+tcp://pool{index}.example:3333"),
        user: format!("worker{index}"),
        priority: index,
        state: if active {
            st::PoolState::Alive as i32
        } else {
            st::PoolState::Dead as i32
        },
        active,
        enabled: true,
        quota: 1,
        accepted: if active { 42 } else { 0 },
        rejected: if active { 3 } else { 0 },
        stale: if active { 1 } else { 0 },
        accepted_difficulty: if active { 42.0 * 512.0 } else { 0.0 },
        rejected_difficulty: if active { 3.0 * 512.0 } else { 0.0 },
        best_share: 9000.0,
        difficulty: 512.0,
        ..Default::default()
    };
    st::GetPoolsResponse {
        pools: vec![pool(0, true), pool(1, false)],
        active_index: 0,
        accepted: 42,
        rejected: 3,
        stale: 1,
        best_share: 9000.0,
        counters_since_s: 600,
        ..Default::default()
    }
}

/// Fakes serving on sockets in `dir`; dropping `shutdown` stops them.
pub struct Fakes {
    pub telemetry: watch::Sender<hw::Telemetry>,
    pub pools: watch::Sender<st::GetPoolsResponse>,
    pub calls: Calls,
    pub hw_stop: Shutdown,
    pub stratum_stop: Shutdown,
}

pub fn sock(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

pub async fn start_hw(
    dir: &Path,
    telemetry: watch::Receiver<hw::Telemetry>,
    calls: Calls,
) -> Shutdown {
    let stop = Shutdown::new();
    let listener = ipc::bind(&sock(dir, "hw-agent")).unwrap();
    let svc = HwAgentServiceServer::new(FakeHw {
        stop: stop.clone(),
        telemetry,
        inventory: inventory(),
        calls,
    });
    tokio::spawn(ipc::serve(
        ipc::server().add_service(svc),
        listener,
        stop.clone(),
    ));
    stop
}

pub async fn start_fakes(dir: &Path) -> Fakes {
    let calls = Calls::default();
    let (telemetry, t_rx) = watch::channel(s9_telemetry(600));
    let (pools, p_rx) = watch::channel(two_pools());
    let hw_stop = start_hw(dir, t_rx, calls.clone()).await;
    let stratum_stop = Shutdown::new();
    let listener = ipc::bind(&sock(dir, "stratum-agent")).unwrap();
    let svc = StratumServiceServer::new(FakeStratum {
        stop: stratum_stop.clone(),
        pools: p_rx,
        calls: calls.clone(),
    });
    tokio::spawn(ipc::serve(
        ipc::server().add_service(svc),
        listener,
        stratum_stop.clone(),
    ));
    let listener = ipc::bind(&sock(dir, "supervisor")).unwrap();
    let svc = SupervisorServiceServer::new(FakeSupervisor {
        calls: calls.clone(),
    });
    tokio::spawn(ipc::serve(
        ipc::server().add_service(svc),
        listener,
        stratum_stop.clone(),
    ));
    Fakes {
        telemetry,
        pools,
        calls,
        hw_stop,
        stratum_stop,
    }
}

/// The legacy server on 127.0.0.1:0, talking to sockets in `dir`.
pub async fn start_legacy(dir: &Path, allow: &[&str], limits: Limits) -> (SocketAddr, Shutdown) {
    let shutdown = Shutdown::new();
    let peers = Peers {
        hw: HwAgentServiceClient::new(ipc::channel_at(sock(dir, "hw-agent"))),
        stratum: StratumServiceClient::new(ipc::channel_at(sock(dir, "stratum-agent"))),
        supervisor: SupervisorServiceClient::new(ipc::channel_at(sock(dir, "supervisor"))),
    };
    let live = Live::start_with(peers.hw.clone(), peers.stratum.clone(), &shutdown);
    let server = Arc::new(Server::new(
        live,
        peers,
        AllowList::parse(allow).unwrap(),
        limits,
        Identity {
            version: "0.1.0".into(),
            model: "Antminer S9".into(),
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, shutdown.clone()));
    (addr, shutdown)
}

/// Send raw bytes like pyasic does (no newline, no half-close) and read to EOF.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("server closes the connection after the reply")
        .unwrap();
    out
}

/// Send a JSON request and parse the reply (checking cgminer's trailing NUL).
pub async fn json(addr: SocketAddr, request: &str) -> serde_json::Value {
    let out = raw(addr, request.as_bytes()).await;
    assert_eq!(
        out.last(),
        Some(&0),
        "reply ends with NUL: {:?}",
        String::from_utf8_lossy(&out)
    );
    serde_json::from_slice(&out[..out.len() - 1])
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
}

pub async fn cmd(addr: SocketAddr, command: &str) -> serde_json::Value {
    json(addr, &format!(r#"{{"command":"{command}"}}"#)).await
}

/// Poll until `f` holds (snapshots arrive asynchronously); fails after 10 s.
pub async fn eventually<F, Fut>(mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn status(v: &serde_json::Value) -> (&str, u64, &str) {
    let s = &v["STATUS"][0];
    (
        s["STATUS"].as_str().unwrap(),
        s["Code"].as_u64().unwrap(),
        s["Msg"].as_str().unwrap(),
    )
}
