//! Proxy-added latency benchmark: prints figures, asserts nothing.
//!
//! `cargo run --release -p svcos-proxy --example proxy_bench [-- --upstream 127.0.0.1:8080 --token T]`
//!
//! Sequential `GET /api/status` on one keep-alive connection, directly to the upstream and
//! through the proxy, in alternating blocks so drift of the machine hits both equally. The
//! upstream is a stand-in returning fixed bytes (its own thread and current-thread runtime),
//! or a real gateway with `--upstream` (then pass a bearer token with `--token`). The proxy
//! runs on its own thread with a current-thread runtime, as in the proxy process.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use svcos_common::Shutdown;
use svcos_proxy::ProxyConfig;
use tokio::net::{TcpListener, TcpStream};

const BLOCK: usize = 2_000;
const BLOCKS: usize = 10;
const WARMUP: usize = 1_000;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// A stand-in gateway answering every request with the same ~1.6 KB JSON.
fn stand_in() -> anyhow::Result<SocketAddr> {
    let body = Bytes::from(format!(
        "{{\"schema\":\"svcos.api.status.v1\",\"pad\":\"{}\"}}",
        "x".repeat(1_600)
    ));
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let _ = stream.set_nodelay(true);
                let body = body.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        async move {
                            let mut r = Response::new(Full::new(body));
                            r.headers_mut()
                                .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    Ok(addr)
}

fn start_proxy(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let mut config = ProxyConfig::from_config(&Default::default());
    config.upstream = upstream;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            svcos_proxy::serve(listener, config, Shutdown::new()).await;
        });
    });
    Ok(addr)
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn get(sender: &mut Sender, token: &str) -> anyhow::Result<Duration> {
    let mut req = Request::get("/api/status")
        .header(header::HOST, "127.0.0.1")
        .body(Empty::new())?;
    if !token.is_empty() {
        req.headers_mut()
            .insert(header::AUTHORIZATION, format!("Bearer {token}").parse()?);
    }
    sender.ready().await?;
    let t = Instant::now();
    let response = sender.send_request(req).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    let elapsed = t.elapsed();
    anyhow::ensure!(
        status.is_success(),
        "status {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(elapsed)
}

fn main() -> anyhow::Result<()> {
    let token = arg("--token").unwrap_or_default();
    let upstream = match arg("--upstream") {
        Some(a) => a.parse()?,
        None => stand_in()?,
    };
    let proxy = start_proxy(upstream)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut direct = connect(upstream).await?;
        let mut proxied = connect(proxy).await?;
        for _ in 0..WARMUP {
            get(&mut direct, &token).await?;
            get(&mut proxied, &token).await?;
        }
        let (mut d, mut p) = (Vec::new(), Vec::new());
        let (mut t_direct, mut t_proxied) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..BLOCKS {
            let t = Instant::now();
            for _ in 0..BLOCK {
                d.push(get(&mut direct, &token).await?);
            }
            t_direct += t.elapsed();
            let t = Instant::now();
            for _ in 0..BLOCK {
                p.push(get(&mut proxied, &token).await?);
            }
            t_proxied += t.elapsed();
        }
        d.sort();
        p.sort();
        let n = d.len();
        println!(
            "GET /api/status, keep-alive, sequential, {n} requests each, upstream {}",
            if arg("--upstream").is_some() {
                "= real gateway"
            } else {
                "= stand-in (fixed bytes)"
            }
        );
        for (label, s, total) in [("direct", &d, t_direct), ("through proxy", &p, t_proxied)] {
            println!(
                "{label:<14} p50={:.3} ms  p99={:.3} ms  max={:.3} ms  {:.0} req/s",
                percentile(s, 0.5),
                percentile(s, 0.99),
                percentile(s, 1.0),
                n as f64 / total.as_secs_f64()
            );
        }
        println!(
            "added by proxy p50=+{:.3} ms  p99=+{:.3} ms",
            percentile(&p, 0.5) - percentile(&d, 0.5),
            percentile(&p, 0.99) - percentile(&d, 0.99)
        );
        anyhow::Ok(())
    })
}
