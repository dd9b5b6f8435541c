//! stratum-agent latency figures (printed, never asserted). Run:
//!
//! `CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 cargo bench -p svcos-stratum-agent --bench latency`
//!
//! The agent runs its production entry on its own thread and current-thread runtime (as in its
//! own process); the bench talks to it over the Unix-socket gRPC like hw-agent does, and plays
//! the pool over loopback TCP:
//!
//! 1. `mining.notify` written by the pool → JobTemplate received on StreamJobs;
//! 2. SubmitShare sent → `mining.submit` line read by the pool;
//! 3. failover: primary pool process gone → first job of the backup on StreamJobs;
//! 4. agent start → first share accepted by the (verifying) test pool.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use svcos_common::config::{Config, PoolConfig};
use svcos_common::entry::ServiceContext;
use svcos_common::{Layout, ServiceName, Shutdown};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

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

/// Start the agent on its own thread; returns its socket and shutdown.
fn spawn_agent(
    dir: &std::path::Path,
    config: Config,
) -> (std::path::PathBuf, Shutdown, std::thread::JoinHandle<()>) {
    let layout = Layout::sim(dir);
    config.save(&layout.config_path).unwrap();
    let socket = layout.socket(ServiceName::StratumAgent);
    let shutdown = Shutdown::new();
    let sd = shutdown.clone();
    let sock = socket.clone();
    let handle = std::thread::spawn(move || {
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
    });
    (socket, shutdown, handle)
}

async fn client(socket: std::path::PathBuf) -> StratumServiceClient<tonic::transport::Channel> {
    let mut c = StratumServiceClient::new(svcos_common::ipc::channel_with_timeout(
        socket,
        Duration::from_secs(10),
    ));
    for _ in 0..200 {
        if c.get_pools(pb::GetPoolsRequest {}).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c
}

fn notify(job: usize, clean: bool) -> String {
    let prev = format!("{job:064x}");
    let branch = "11".repeat(32);
    format!(
        "{{\"id\":null,\"method\":\"mining.notify\",\"params\":[\"{job:x}\",\"{prev}\",\"01000000010000000000000000000000000000000000000000000000000000000000000000ffffffff20020862062f503253482f04b8864e5008\",\"072f736c7573682f000000000100f2052a010000001976a914d23fcdf86f7e756a64a7a9688ef9903327048ed988ac00000000\",[\"{branch}\"],\"20000000\",\"1d00ffff\",\"504e86b9\",{clean}]}}\n",
    )
}

/// Latencies 1 and 2 against a scripted pool.
async fn wire_latencies() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config {
        pools: vec![PoolConfig {
            url: format!("stratum+tcp://127.0.0.1:{port}"),
            user: "bench".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    cfg.stratum.silent_timeout_s = 3600;
    let (socket, shutdown, thread) = spawn_agent(dir.path(), cfg);
    let (tcp, _) = listener.accept().await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (r, mut w) = tcp.into_split();
    let mut lines = BufReader::new(r).lines();
    // Handshake: answer configure/subscribe/authorize/the rest by id.
    let mut answered = 0;
    while answered < 3 {
        let l = lines.next_line().await.unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        let id = v["id"].clone();
        let result = match v["method"].as_str().unwrap() {
            "mining.configure" => {
                serde_json::json!({"version-rolling": true, "version-rolling.mask": "1fffe000"})
            }
            "mining.subscribe" => serde_json::json!([[["mining.notify", "s"]], "01020304", 4]),
            _ => serde_json::json!(true),
        };
        answered += 1;
        w.write_all(
            format!(
                "{}\n",
                serde_json::json!({"id": id, "result": result, "error": null})
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    }
    // A difficulty low enough that every nonce is a share: the bench measures plumbing, not luck.
    w.write_all(b"{\"id\":null,\"method\":\"mining.set_difficulty\",\"params\":[1e-12]}\n")
        .await
        .unwrap();
    w.write_all(notify(0, true).as_bytes()).await.unwrap();
    let mut c = client(socket).await;
    let mut jobs = c
        .stream_jobs(pb::StreamJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = jobs.message().await.unwrap().unwrap();

    let mut notify_lat = Vec::with_capacity(ROUNDS);
    for i in 1..=ROUNDS {
        let line = notify(i, true);
        let t0 = Instant::now();
        w.write_all(line.as_bytes()).await.unwrap();
        loop {
            let j = jobs.message().await.unwrap().unwrap();
            if j.job_id == format!("{i:x}") {
                break;
            }
        }
        notify_lat.push(t0.elapsed());
    }
    percentiles(
        "mining.notify written -> JobTemplate on StreamJobs",
        notify_lat,
    );

    let job = format!("{ROUNDS:x}");
    let epoch = first.pool_epoch;
    // Drain the pool side in the background, timestamping submit lines.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.contains("mining.submit") {
                let _ = tx.send(Instant::now());
            }
        }
    });
    let mut submit_lat = Vec::with_capacity(ROUNDS);
    for nonce in 0..ROUNDS as u32 {
        let t0 = Instant::now();
        let r = c
            .submit_share(pb::SubmitShareRequest {
                job_id: job.clone(),
                pool_epoch: epoch,
                extranonce2: vec![0, 0, 0, 1],
                ntime: 0x504e86b9,
                nonce,
                version: 0x2000_0000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.disposition, pb::ShareDisposition::Submitted as i32);
        let t1 = rx.recv().await.unwrap();
        submit_lat.push(t1 - t0);
    }
    percentiles(
        "SubmitShare sent -> mining.submit read by the pool",
        submit_lat,
    );
    reader.abort();
    shutdown.trigger();
    drop(w);
    thread.join().unwrap();
}

/// Failover and start-to-first-share against real test pools.
async fn pool_timings() {
    let mut failover = Vec::new();
    let mut first_share = Vec::new();
    for _ in 0..10 {
        let settings = svcos_stratum_agent::testpool::PoolSettings {
            difficulty: 1e-9,
            ..Default::default()
        };
        let a = common::Pool::start_with(settings.clone()).await;
        let b = common::Pool::start_with(settings).await;
        let dir = tempfile::tempdir().unwrap();
        let cfg = common::config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]);
        let t_start = Instant::now();
        let (socket, shutdown, thread) = spawn_agent(dir.path(), cfg);
        let mut c = client(socket).await;
        let mut jobs = c
            .stream_jobs(pb::StreamJobsRequest {})
            .await
            .unwrap()
            .into_inner();
        let job = jobs.message().await.unwrap().unwrap();
        let share = common::mine_blocking(&job, 1, 0);
        c.submit_share(share).await.unwrap();
        while a.pool.accepted("wa") == 0 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        first_share.push(t_start.elapsed());

        let t0 = Instant::now();
        a.shutdown.trigger();
        loop {
            let j = jobs.message().await.unwrap().unwrap();
            if j.pool_index == 1 {
                break;
            }
        }
        failover.push(t0.elapsed());
        shutdown.trigger();
        thread.join().unwrap();
    }
    percentiles(
        "agent start -> first share accepted by the test pool",
        first_share,
    );
    percentiles(
        "primary pool gone -> first job of the backup on StreamJobs",
        failover,
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        wire_latencies().await;
        pool_timings().await;
    });
}
