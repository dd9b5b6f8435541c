//! Stratum V2 job latency (printed, never asserted). Run:
//!
//! `CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 cargo bench -p svcos-stratum-agent --bench sv2_latency`
//!
//! The agent runs its production entry on its own thread and current-thread runtime (as in its
//! own process) with one `stratum2+tcp` pool: the test pool's SV2 upstream (reference crates) on
//! loopback. Each round the pool makes a job update (a NewExtendedMiningJob active at once), and
//! the bench reads templates on StreamJobs over the Unix-socket gRPC like hw-agent does:
//!
//! 1. NewExtendedMiningJob decrypted by the agent's SV2 connection (`received_at_us` of the
//!    template) → JobTemplate received on StreamJobs;
//! 2. the pool's job update (encode, encrypt, TCP, decrypt included) → JobTemplate received.

use std::time::{Duration, Instant};

use svcos_common::config::{Config, PoolConfig};
use svcos_common::entry::ServiceContext;
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_stratum_agent::testpool::sv2::Authority;
use svcos_stratum_agent::testpool::{PoolSettings, TestPool};

const ROUNDS: usize = 1000;

fn percentiles(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    println!(
        "{name}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        v.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (pool, port, authority, pool_shutdown) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let pool = TestPool::new(PoolSettings::default());
        let authority = Authority::generate();
        let shutdown = Shutdown::new();
        tokio::spawn(svcos_stratum_agent::testpool::sv2::serve(
            pool.clone(),
            listener,
            authority.clone(),
            shutdown.clone(),
        ));
        (pool, port, authority, shutdown)
    });
    // The pool keeps serving on a thread of its own so the bench's reads do not delay it.
    let pool_thread = std::thread::spawn(move || rt.block_on(pool_shutdown.wait()));

    let mut config = Config {
        pools: vec![PoolConfig {
            url: format!("stratum2+tcp://127.0.0.1:{port}/{}", authority.public_b58()),
            user: "bench".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    config.stratum.sv2_enabled = true;
    let layout = Layout::sim(dir.path());
    config.save(&layout.config_path).unwrap();
    let socket = layout.socket(ServiceName::StratumAgent);
    let shutdown = Shutdown::new();
    let agent = {
        let (sd, sock) = (shutdown.clone(), socket.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = svcos_common::ipc::bind(&sock).unwrap();
                let ctx = ServiceContext {
                    name: ServiceName::StratumAgent,
                    layout,
                    config,
                };
                svcos_stratum_agent::run(ctx, listener, sd).await.unwrap();
            });
        })
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = StratumServiceClient::new(svcos_common::ipc::channel_with_timeout(
            socket,
            Duration::from_secs(10),
        ));
        let mut stream = loop {
            match client.stream_jobs(pb::StreamJobsRequest {}).await {
                Ok(s) => break s.into_inner(),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        // The first job of the channel.
        let mut last = stream.message().await.unwrap().unwrap().job_id;
        let (mut decrypted_to_stream, mut pool_to_stream) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t0 = Instant::now();
            pool.update_job();
            let t = loop {
                let t = stream.message().await.unwrap().unwrap();
                if t.job_id != last {
                    break t;
                }
            };
            pool_to_stream.push(t0.elapsed());
            let now_us = svcos_common::time::unix_us();
            decrypted_to_stream.push(Duration::from_micros(
                (now_us - t.received_at_us).max(0) as u64
            ));
            last = t.job_id;
        }
        percentiles(
            "SV2 NewExtendedMiningJob decrypted → JobTemplate on StreamJobs",
            decrypted_to_stream,
        );
        percentiles(
            "pool job update (encode, Noise, TCP, decrypt) → JobTemplate on StreamJobs",
            pool_to_stream,
        );
    });
    shutdown.trigger();
    agent.join().unwrap();
    drop(pool_thread);
}
