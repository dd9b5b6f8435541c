//! Shared harness: an in-process test pool on a loopback port and the production stratum-agent
//! entry (`run`) on a socket in a temp dir, talked to over gRPC like hw-agent and the gateway do.

#![allow(dead_code)]

pub mod writer;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use svcos_common::config::{Config, PoolConfig};
use svcos_common::entry::ServiceContext;
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_stratum_agent::testpool::{PoolSettings, TestPool};
use svcos_work::{Job, hash_difficulty, header_hash};
use tonic::transport::Channel;

/// Generous upper bound for anything to happen (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(30);

/// Difficulty cheap enough to brute-force in a debug test build.
pub const TEST_DIFFICULTY: f64 = 0.00002;

/// A running test pool.
pub struct Pool {
    pub pool: Arc<TestPool>,
    pub port: u16,
    pub shutdown: Shutdown,
    pub task: tokio::task::JoinHandle<()>,
}

impl Pool {
    pub async fn start() -> Pool {
        Self::start_with(PoolSettings {
            difficulty: TEST_DIFFICULTY,
            // Job updates well inside the 1 s silence timeout of the test config.
            job_interval: Duration::from_millis(200),
            ..Default::default()
        })
        .await
    }

    pub async fn start_with(settings: PoolSettings) -> Pool {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pool = TestPool::new(settings);
        let shutdown = Shutdown::new();
        let task = tokio::spawn(svcos_stratum_agent::testpool::serve(
            pool.clone(),
            listener,
            shutdown.clone(),
        ));
        Pool {
            pool,
            port,
            shutdown,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("stratum+tcp://127.0.0.1:{}", self.port)
    }

    pub fn pool_config(&self, user: &str, priority: u32) -> PoolConfig {
        PoolConfig {
            url: self.url(),
            user: user.into(),
            priority,
            ..Default::default()
        }
    }
}

/// A running stratum-agent.
pub struct Agent {
    pub dir: PathBuf,
    pub shutdown: Shutdown,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub client: StratumServiceClient<Channel>,
    /// The config writer pool changes go through, and what stops it.
    writer: (Shutdown, tokio::task::JoinHandle<()>),
}

impl Agent {
    pub async fn start(dir: &Path, config: &Config) -> Agent {
        if std::env::var_os("SVCOS_TEST_LOG").is_some() {
            svcos_common::logging::init("test");
        }
        let layout = Layout::sim(dir);
        config.save(&layout.config_path).unwrap();
        let config = Config::load(&layout.config_path).unwrap();
        let writer_stop = Shutdown::new();
        let writer = writer::Writer::start(dir, config.clone(), writer_stop.clone());
        let socket = layout.socket(ServiceName::StratumAgent);
        let listener = svcos_common::ipc::bind(&socket).unwrap();
        let shutdown = Shutdown::new();
        let ctx = ServiceContext {
            name: ServiceName::StratumAgent,
            layout,
            config,
        };
        let task = tokio::spawn(svcos_stratum_agent::run(ctx, listener, shutdown.clone()));
        let client = StratumServiceClient::new(svcos_common::ipc::channel_with_timeout(
            socket,
            Duration::from_secs(20),
        ));
        Agent {
            dir: dir.to_path_buf(),
            shutdown,
            task,
            client,
            writer: (writer_stop, writer),
        }
    }

    /// Stop like SIGTERM would, and wait for the final state write.
    pub async fn stop(self) {
        self.shutdown.trigger();
        self.task.await.unwrap().unwrap();
        self.writer.0.trigger();
        let _ = self.writer.1.await;
    }

    pub async fn pools(&mut self) -> pb::GetPoolsResponse {
        self.client
            .get_pools(pb::GetPoolsRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn jobs(&mut self) -> tonic::Streaming<pb::JobTemplate> {
        self.client
            .stream_jobs(pb::StreamJobsRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn submit(
        &mut self,
        share: &pb::SubmitShareRequest,
    ) -> Result<pb::ShareDisposition, tonic::Status> {
        let r = self.client.submit_share(share.clone()).await?.into_inner();
        Ok(pb::ShareDisposition::try_from(r.disposition).unwrap())
    }

    /// Poll GetPools until `pred` holds.
    pub async fn wait_pools(
        &mut self,
        what: &str,
        pred: impl Fn(&pb::GetPoolsResponse) -> bool,
    ) -> pb::GetPoolsResponse {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let p = self.pools().await;
            if pred(&p) {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {p:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A config with these pools and short, test-friendly thresholds.
pub fn config(pools: Vec<PoolConfig>) -> Config {
    let mut c = Config {
        pools,
        ..Default::default()
    };
    c.stratum.connect_timeout_s = 2;
    c.stratum.silent_timeout_s = 1;
    c.stratum.failback_hysteresis_s = 1;
    c
}

/// Wait for a condition, polling.
pub async fn wait_until<F: Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next job from a stream, within [`WAIT`].
pub async fn next_job(stream: &mut tonic::Streaming<pb::JobTemplate>) -> pb::JobTemplate {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a job in time")
        .unwrap()
        .expect("stream open")
}

/// Next job satisfying `pred` (skipping re-issues).
pub async fn job_where(
    stream: &mut tonic::Streaming<pb::JobTemplate>,
    pred: impl Fn(&pb::JobTemplate) -> bool,
) -> pb::JobTemplate {
    loop {
        let j = next_job(stream).await;
        if pred(&j) {
            return j;
        }
    }
}

/// [`mine_blocking`] on the blocking pool: brute force on the test's runtime thread would stall
/// the agent and the pool (they share that thread), which looks like a silent pool.
pub async fn mine(t: &pb::JobTemplate, tag: u8, start_nonce: u32) -> pb::SubmitShareRequest {
    let t = t.clone();
    tokio::task::spawn_blocking(move || mine_blocking(&t, tag, start_nonce))
        .await
        .unwrap()
}

/// Brute-force a share for a template, the way a chip would: fixed extranonce2 `tag`, version
/// rolled within the mask when one is given.
pub fn mine_blocking(t: &pb::JobTemplate, tag: u8, start_nonce: u32) -> pb::SubmitShareRequest {
    let job = Job {
        prev_hash: t.prev_hash.clone().try_into().unwrap(),
        coinb1: t.coinb1.clone(),
        coinb2: t.coinb2.clone(),
        extranonce1: t.extranonce1.clone(),
        merkle_branch: t
            .merkle_branch
            .iter()
            .map(|h| h.clone().try_into().unwrap())
            .collect(),
        version: t.version,
        nbits: t.nbits,
        ntime: t.ntime,
    };
    let mut en2 = vec![0u8; t.extranonce2_size as usize];
    *en2.last_mut().unwrap() = tag;
    // Roll the lowest allowed version bit when rolling is on, to exercise BIP 310.
    let version = if t.version_mask != 0 {
        t.version | (t.version_mask & t.version_mask.wrapping_neg())
    } else {
        t.version
    };
    let root = job.merkle_root(&en2);
    for nonce in start_nonce.. {
        let hash = header_hash(&job.header_with_root(root, t.ntime, version, nonce));
        let d = hash_difficulty(&hash);
        if d >= t.share_difficulty {
            return pb::SubmitShareRequest {
                job_id: t.job_id.clone(),
                pool_epoch: t.pool_epoch,
                extranonce2: en2,
                ntime: t.ntime,
                nonce,
                version,
                difficulty: d,
                chain_id: 0,
                chip: 0,
                found_at_us: svcos_common::time::unix_us(),
            };
        }
    }
    unreachable!()
}

/// A test pool serving both V1 (which also drives its job schedule) and SV2; job declaration's
/// two roles answer on the same SV2 port and key.
pub struct Sv2Pool {
    pub v1: Pool,
    pub port: u16,
    pub authority: svcos_stratum_agent::testpool::sv2::Authority,
}

impl Sv2Pool {
    pub async fn start() -> Sv2Pool {
        let v1 = Pool::start().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let authority = svcos_stratum_agent::testpool::sv2::Authority::generate();
        tokio::spawn(svcos_stratum_agent::testpool::sv2::serve(
            v1.pool.clone(),
            listener,
            authority.clone(),
            v1.shutdown.clone(),
        ));
        Sv2Pool {
            v1,
            port,
            authority,
        }
    }

    /// Its URL with `key` as the authority (another key makes the handshake fail).
    pub fn url_with(&self, key: &str) -> String {
        format!("stratum2+tcp://127.0.0.1:{}/{key}", self.port)
    }

    /// Its URL with its own authority key.
    pub fn url(&self) -> String {
        self.url_with(&self.authority.public_b58())
    }

    pub fn pool_config(&self, key: &str, user: &str, priority: u32) -> PoolConfig {
        PoolConfig {
            url: self.url_with(key),
            user: user.into(),
            priority,
            ..Default::default()
        }
    }
}
