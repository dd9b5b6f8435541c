//! Test harness: the real simulated board (hw-sim library) served on its socket in a temp dir,
//! a small in-test StratumService on the stratum-agent socket that feeds jobs and records
//! SubmitShare calls, and hw-agent itself either in-process (`run_with_probes`) or as a child
//! process (this test binary re-executed), so that it can be SIGKILLed.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use svcos_common::config::Config;
use svcos_common::entry::ServiceContext;
use svcos_common::{Layout, ServiceName, Shutdown, ipc};
use svcos_hw_agent::probes::Probes;
use svcos_proto::hwagent::v1::hw_agent_service_client::HwAgentServiceClient;
use svcos_proto::hwagent::v1::hw_diagnostics_service_client::HwDiagnosticsServiceClient;
use svcos_proto::hwagent::v1::{GetTelemetryRequest, MiningState, Telemetry};
use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use svcos_proto::hwsim::v1::hw_sim_service_server::HwSimServiceServer;
use svcos_proto::stratum::v1::stratum_service_server::{StratumService, StratumServiceServer};
use svcos_proto::stratum::v1::*;
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// Environment variable that turns this test binary into an hw-agent child on a directory.
pub const CHILD_ENV: &str = "SVCOS_HWAGENT_TEST_CHILD_DIR";

/// Tests share two CPU cores with each other and with other builds: one board at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A small board for fast tests: 2 chains × 8 chips, so each chip gets a good share of the
/// sim's real hash budget and nonces arrive often.
pub fn small_config() -> Config {
    let mut c = Config::default();
    c.hardware.chains = 2;
    c.hardware.chips_per_chain = 8;
    c.sim.cpu_budget_percent = 4.0;
    c
}

/// Shares the fake stratum-agent received.
#[derive(Clone, Default)]
pub struct Recorded(pub Arc<Mutex<Vec<SubmitShareRequest>>>);

impl Recorded {
    /// A copy of every share so far.
    pub fn all(&self) -> Vec<SubmitShareRequest> {
        self.0.lock().unwrap().clone()
    }
}

/// The in-test stratum-agent: StreamJobs from a watch channel, SubmitShare recorded.
pub struct FakeStratum {
    jobs: watch::Receiver<Option<JobTemplate>>,
    shares: Recorded,
    /// Ends the share stream, as the real stratum-agent's agent task ending does.
    stop: Shutdown,
}

type Jobs = Pin<Box<dyn Stream<Item = Result<JobTemplate, Status>> + Send>>;
type Pools = Pin<Box<dyn Stream<Item = Result<GetPoolsResponse, Status>> + Send>>;
type ShareAnswers = Pin<Box<dyn Stream<Item = Result<SubmitShareResponse, Status>> + Send>>;

#[tonic::async_trait]
impl StratumService for FakeStratum {
    type StreamJobsStream = Jobs;
    async fn stream_jobs(&self, _r: Request<StreamJobsRequest>) -> Result<Response<Jobs>, Status> {
        use futures::StreamExt;
        let s = tokio_stream::wrappers::WatchStream::new(self.jobs.clone())
            .filter_map(|j| async move { j.map(Ok) });
        Ok(Response::new(Box::pin(s)))
    }
    async fn submit_share(
        &self,
        r: Request<SubmitShareRequest>,
    ) -> Result<Response<SubmitShareResponse>, Status> {
        self.shares.0.lock().unwrap().push(r.into_inner());
        Ok(Response::new(SubmitShareResponse {
            disposition: ShareDisposition::Submitted as i32,
            refused: String::new(),
        }))
    }
    type SubmitSharesStream = ShareAnswers;
    async fn submit_shares(
        &self,
        r: Request<tonic::Streaming<SubmitShareRequest>>,
    ) -> Result<Response<ShareAnswers>, Status> {
        use futures::StreamExt;
        let shares = self.shares.clone();
        let answers = r
            .into_inner()
            .map(move |share| {
                shares.0.lock().unwrap().push(share?);
                Ok(SubmitShareResponse {
                    disposition: ShareDisposition::Submitted as i32,
                    refused: String::new(),
                })
            })
            .take_until(self.stop.wait_owned());
        Ok(Response::new(Box::pin(answers)))
    }
    async fn get_pools(
        &self,
        _r: Request<GetPoolsRequest>,
    ) -> Result<Response<GetPoolsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    type StreamPoolsStream = Pools;
    async fn stream_pools(
        &self,
        _r: Request<StreamPoolsRequest>,
    ) -> Result<Response<Pools>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn switch_pool(
        &self,
        _r: Request<SwitchPoolRequest>,
    ) -> Result<Response<SwitchPoolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_pool_enabled(
        &self,
        _r: Request<SetPoolEnabledRequest>,
    ) -> Result<Response<SetPoolEnabledResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn add_pool(
        &self,
        _r: Request<AddPoolRequest>,
    ) -> Result<Response<AddPoolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn remove_pool(
        &self,
        _r: Request<RemovePoolRequest>,
    ) -> Result<Response<RemovePoolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn set_pool_priority(
        &self,
        _r: Request<SetPoolPriorityRequest>,
    ) -> Result<Response<SetPoolPriorityResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn test_pool(
        &self,
        _r: Request<TestPoolRequest>,
    ) -> Result<Response<TestPoolResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_donation(
        &self,
        _r: Request<GetDonationRequest>,
    ) -> Result<Response<GetDonationResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_jd_status(
        &self,
        _: Request<GetJdStatusRequest>,
    ) -> Result<Response<GetJdStatusResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn test_jd_connection(
        &self,
        _: Request<TestJdConnectionRequest>,
    ) -> Result<Response<TestJdConnectionResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_sv2_status(
        &self,
        _r: Request<GetSv2StatusRequest>,
    ) -> Result<Response<GetSv2StatusResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn reload_config(
        &self,
        _r: Request<ReloadConfigRequest>,
    ) -> Result<Response<ReloadConfigResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// A job template with plausible coinbase parts and a cheap share difficulty.
pub fn job(n: u64, epoch: u64, clean: bool, share_difficulty: f64) -> JobTemplate {
    let mut prev = [0u8; 32];
    prev[..8].copy_from_slice(&n.to_le_bytes());
    prev[31] = 0; // header order: the top bytes of a real prev hash are zero
    JobTemplate {
        job_id: format!("job{n}"),
        pool_epoch: epoch,
        pool_index: 0,
        prev_hash: prev.to_vec(),
        coinb1: hex::decode("01000000010000000000000000000000000000000000000000000000000000000000000000ffffffff20").unwrap(),
        coinb2: hex::decode("ffffffff0100f2052a010000001976a914000000000000000000000000000000000000000088ac00000000").unwrap(),
        extranonce1: vec![0xde, 0xad, 0xbe, 0xef],
        extranonce2_size: 4,
        merkle_branch: vec![vec![0x11; 32], vec![0x22; 32]],
        version: 0x2000_0000,
        version_mask: 0x1fff_e000,
        nbits: 0x1d00_ffff,
        ntime: 1_700_000_000 + n as u32,
        clean_jobs: clean,
        share_difficulty,
        received_at_us: svcos_common::time::unix_us(),
        donation: false,
    }
}

/// Verify a submitted share by SHA-256d against its job: returns the achieved difficulty.
pub fn verify_share(share: &SubmitShareRequest, t: &JobTemplate) -> f64 {
    let job = svcos_work::Job {
        prev_hash: t.prev_hash.clone().try_into().unwrap(),
        coinb1: t.coinb1.clone(),
        coinb2: t.coinb2.clone(),
        extranonce1: t.extranonce1.clone(),
        merkle_branch: t
            .merkle_branch
            .iter()
            .map(|b| b.clone().try_into().unwrap())
            .collect(),
        version: t.version,
        nbits: t.nbits,
        ntime: t.ntime,
    };
    let header = job.header(svcos_work::Roll {
        extranonce2: &share.extranonce2,
        ntime: share.ntime,
        version: share.version,
        nonce: share.nonce,
    });
    svcos_work::hash_difficulty(&svcos_work::header_hash(&header))
}

/// Everything but hw-agent.
pub struct Bench {
    pub dir: tempfile::TempDir,
    pub layout: Layout,
    pub config: Config,
    pub sim: Option<svcos_hw_sim::Sim>,
    pub sim_shutdown: Shutdown,
    pub stratum_shutdown: Shutdown,
    pub jobs: watch::Sender<Option<JobTemplate>>,
    pub shares: Recorded,
}

impl Bench {
    /// Start the sim and the fake stratum-agent for `config`.
    pub async fn start(config: Config) -> Bench {
        // SVCOS_LOG=info shows hw-agent's and hw-sim's logs on stderr.
        svcos_common::logging::init("test");
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::sim(dir.path());
        std::fs::write(&layout.config_path, config.to_toml()).unwrap();
        let spec = svcos_hw_sim::BoardSpec::from_config(&config);
        let sim = tokio::task::spawn_blocking(move || svcos_hw_sim::Sim::start(spec))
            .await
            .unwrap()
            .unwrap();
        let sim_shutdown = Shutdown::new();
        let listener = ipc::bind(&layout.socket(ServiceName::HwSim)).unwrap();
        tokio::spawn(ipc::serve(
            ipc::server().add_service(HwSimServiceServer::new(sim.api())),
            listener,
            sim_shutdown.clone(),
        ));
        let (jobs, jobs_rx) = watch::channel(None);
        let shares = Recorded::default();
        let stratum_shutdown = Shutdown::new();
        let bench = Bench {
            dir,
            layout,
            config,
            sim: Some(sim),
            sim_shutdown,
            stratum_shutdown,
            jobs,
            shares,
        };
        bench.start_stratum(jobs_rx);
        bench
    }

    fn start_stratum(&self, jobs: watch::Receiver<Option<JobTemplate>>) {
        let listener = ipc::bind(&self.layout.socket(ServiceName::StratumAgent)).unwrap();
        let svc = FakeStratum {
            jobs,
            shares: self.shares.clone(),
            stop: self.stratum_shutdown.clone(),
        };
        tokio::spawn(ipc::serve(
            ipc::server().add_service(StratumServiceServer::new(svc)),
            listener,
            self.stratum_shutdown.clone(),
        ));
    }

    /// Stop the fake stratum-agent (as if it crashed).
    pub fn stop_stratum(&mut self) {
        self.stratum_shutdown.trigger();
        let _ = std::fs::remove_file(self.layout.socket(ServiceName::StratumAgent));
    }

    /// Start it again.
    pub fn restart_stratum(&mut self) {
        self.stratum_shutdown = Shutdown::new();
        self.start_stratum(self.jobs.subscribe());
    }

    /// Publish a job.
    pub fn send_job(&self, job: JobTemplate) {
        self.jobs.send_replace(Some(job));
    }

    /// A client of the sim.
    pub fn sim_client(&self) -> HwSimServiceClient<Channel> {
        HwSimServiceClient::new(ipc::channel(&self.layout, ServiceName::HwSim))
    }

    /// A client of hw-agent.
    pub fn agent_client(&self) -> HwAgentServiceClient<Channel> {
        HwAgentServiceClient::new(ipc::channel(&self.layout, ServiceName::HwAgent))
    }

    /// A client of hw-agent's diagnostics and inventory service.
    pub fn diagnostics_client(&self) -> HwDiagnosticsServiceClient<Channel> {
        HwDiagnosticsServiceClient::new(ipc::channel(&self.layout, ServiceName::HwAgent))
    }

    /// Run hw-agent in this process, on its own thread with a current-thread runtime as in
    /// production (so its latency does not depend on the test's runtime).
    pub fn start_agent(&self) -> InProcessAgent {
        let probes = Arc::new(Probes::default());
        let shutdown = Shutdown::new();
        let ctx = ServiceContext {
            name: ServiceName::HwAgent,
            layout: self.layout.clone(),
            config: self.config.clone(),
        };
        let socket = self.layout.socket(ServiceName::HwAgent);
        let (p, s) = (Arc::clone(&probes), shutdown.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = ipc::bind(&socket).unwrap();
                svcos_hw_agent::run_with_probes(ctx, listener, s, p).await
            })
        });
        InProcessAgent {
            probes,
            shutdown,
            thread: Some(thread),
        }
    }

    /// Run hw-agent as a child process of this test binary (see [`child_main`]).
    pub fn spawn_agent_process(&self, test_name: &str) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args([test_name, "--exact", "--nocapture", "--include-ignored"])
            .env(CHILD_ENV, self.dir.path())
            .spawn()
            .unwrap()
    }

    /// Telemetry, once hw-agent answers.
    pub async fn telemetry(&self, chips: bool) -> Option<Telemetry> {
        let mut c = self.agent_client();
        c.get_telemetry(GetTelemetryRequest {
            include_chips: chips,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().telemetry)
    }

    /// Poll telemetry until `pred` holds; panics with the last telemetry after `limit` (a
    /// liveness bound, generous so machine speed never decides the outcome).
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&Telemetry) -> bool,
    ) -> Telemetry {
        let deadline = Instant::now() + limit;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(t) = self.telemetry(true).await {
                if pred(&t) {
                    return t;
                }
                last = Some(t);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let last = last.map(|mut t| {
            for c in &mut t.chains {
                c.chips.clear();
            }
            t
        });
        panic!("timed out waiting for {what}; last telemetry: {last:#?}");
    }

    /// Stop the simulated board only (as if hw-sim died); its socket stays served by nothing.
    pub async fn kill_sim(&mut self) {
        self.sim_shutdown.trigger();
        if let Some(sim) = self.sim.take() {
            tokio::task::spawn_blocking(move || sim.stop())
                .await
                .unwrap();
        }
    }

    /// Start a fresh simulated board on the same socket (hw-sim restarted by the supervisor:
    /// new PTYs, possibly under the same /dev/pts names, chips at power-on state).
    pub async fn restart_sim(&mut self) {
        let spec = svcos_hw_sim::BoardSpec::from_config(&self.config);
        let sim = tokio::task::spawn_blocking(move || svcos_hw_sim::Sim::start(spec))
            .await
            .unwrap()
            .unwrap();
        self.sim_shutdown = Shutdown::new();
        let listener = ipc::bind(&self.layout.socket(ServiceName::HwSim)).unwrap();
        tokio::spawn(ipc::serve(
            ipc::server().add_service(HwSimServiceServer::new(sim.api())),
            listener,
            self.sim_shutdown.clone(),
        ));
        self.sim = Some(sim);
    }

    /// Stop the sim.
    pub async fn stop(mut self) {
        self.sim_shutdown.trigger();
        self.stratum_shutdown.trigger();
        if let Some(sim) = self.sim.take() {
            tokio::task::spawn_blocking(move || sim.stop())
                .await
                .unwrap();
        }
    }
}

/// hw-agent running in this process.
pub struct InProcessAgent {
    pub probes: Arc<Probes>,
    pub shutdown: Shutdown,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl InProcessAgent {
    /// Graceful stop.
    pub async fn stop(mut self) {
        self.shutdown.trigger();
        let thread = self.thread.take().unwrap();
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap()
            .unwrap();
    }
}

impl InProcessAgent {
    /// Wait for the agent to end on its own; its outcome.
    pub async fn join(mut self) -> anyhow::Result<()> {
        let thread = self.thread.take().unwrap();
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap()
    }
}

impl Drop for InProcessAgent {
    fn drop(&mut self) {
        // A failed test must not leave an agent running into the next one.
        self.shutdown.trigger();
    }
}

/// State helpers.
pub fn state(t: &Telemetry) -> MiningState {
    MiningState::try_from(t.state).unwrap_or(MiningState::Unspecified)
}

/// Body of the child process: run hw-agent on the directory in [`CHILD_ENV`] until killed.
pub fn child_main(dir: &Path) {
    let layout = Layout::sim(dir);
    let config = Config::load(&layout.config_path).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = ipc::bind(&layout.socket(ServiceName::HwAgent)).unwrap();
        let ctx = ServiceContext {
            name: ServiceName::HwAgent,
            layout,
            config,
        };
        let shutdown = Shutdown::new();
        shutdown.trigger_on_signals().unwrap();
        svcos_hw_agent::run(ctx, listener, shutdown).await.unwrap();
    });
}

/// The child directory, when this process is a child.
pub fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_ENV).map(PathBuf::from)
}
