//! `summary` latency and throughput, one new TCP connection per request (how fleet tools
//! poll port 4028), against the legacy server on its own current-thread runtime (as in
//! production) with fake hw-agent/stratum-agent peers. Prints figures; asserts nothing.
//!
//! `cargo bench -p svcos-legacy-tcp --bench summary`
//! Set `LEGACY_BENCH_ADDR=host:port` to measure an already running server instead.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use svcos_legacy_tcp::server::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUEST: &[u8] = br#"{"command":"summary"}"#;

async fn one(addr: SocketAddr, buf: &mut Vec<u8>) -> Duration {
    let t = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.write_all(REQUEST).await.expect("write");
    buf.clear();
    s.read_to_end(buf).await.expect("read");
    let d = t.elapsed();
    assert!(buf.ends_with(b"\0") && buf.len() > 100, "a full reply");
    d
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

fn report(label: &str, mut samples: Vec<Duration>, wall: Duration) {
    samples.sort_unstable();
    println!(
        "{label}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms, {:.0} req/s",
        samples.len(),
        pct(&samples, 50.0),
        pct(&samples, 99.0),
        pct(&samples, 100.0),
        samples.len() as f64 / wall.as_secs_f64()
    );
}

fn main() {
    let external: Option<SocketAddr> = std::env::var("LEGACY_BENCH_ADDR")
        .ok()
        .map(|a| a.parse().expect("LEGACY_BENCH_ADDR is host:port"));
    let addr = match external {
        Some(a) => a,
        None => {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)
                    .expect("runtime");
                rt.block_on(async move {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let _fakes = common::start_fakes(dir.path()).await;
                    let limits = Limits {
                        max_clients: 64,
                        ..Limits::default()
                    };
                    let (addr, _shutdown) = common::start_legacy(dir.path(), &[], limits).await;
                    common::eventually(|| async {
                        common::status(&common::cmd(addr, "summary").await).0 == "S"
                    })
                    .await;
                    tx.send(addr).expect("send addr");
                    std::future::pending::<()>().await;
                });
            });
            rx.recv().expect("server started")
        }
    };
    let rt =
        svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread).expect("runtime");
    rt.block_on(async move {
        let mut buf = Vec::with_capacity(4096);
        for _ in 0..500 {
            one(addr, &mut buf).await; // warm-up
        }
        let n = 5000;
        let wall = Instant::now();
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            samples.push(one(addr, &mut buf).await);
        }
        report("summary, 1 client, sequential", samples, wall.elapsed());

        let clients = 50;
        let per = 200;
        let wall = Instant::now();
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                tokio::spawn(async move {
                    let mut buf = Vec::with_capacity(4096);
                    let mut v = Vec::with_capacity(per);
                    for _ in 0..per {
                        v.push(one(addr, &mut buf).await);
                    }
                    v
                })
            })
            .collect();
        let mut all = Vec::with_capacity(clients * per);
        for t in tasks {
            all.extend(t.await.expect("client task"));
        }
        report("summary, 50 concurrent clients", all, wall.elapsed());
    });
}
