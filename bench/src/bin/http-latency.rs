//! Sequential keep-alive HTTP/1.1 GETs against one URL (e.g. GET /api/status with a bearer
//! token), printing p50/p99 and requests per second. Optional `--serve-bare` starts a bare
//! hyper handler returning a copy of the measured body, as the floor to compare against.

use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use svcos_bench::Samples;

#[derive(Parser)]
struct Args {
    /// e.g. http://127.0.0.1:8080/api/status
    url: String,
    /// Bearer token sent as Authorization.
    #[arg(long)]
    token: Option<String>,
    #[arg(long, default_value_t = 10_000)]
    requests: usize,
    /// Also measure a bare hyper server returning the same bytes on a free loopback port.
    #[arg(long)]
    bare: bool,
}

async fn run(url: &str, token: Option<&str>, n: usize, label: &str) -> anyhow::Result<Bytes> {
    let uri: hyper::Uri = url.parse()?;
    let host = uri.host().unwrap_or("127.0.0.1").to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut last = Bytes::new();
    let mut samples = Samples::with_capacity(n);
    let warm = n / 10;
    let mut wall = Instant::now();
    for i in 0..(n + warm) {
        if i == warm {
            wall = Instant::now();
        }
        let mut req = Request::get(uri.clone()).header("host", format!("{host}:{port}"));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let t = Instant::now();
        let resp = sender
            .send_request(req.body(Empty::<Bytes>::new())?)
            .await?;
        let status = resp.status();
        last = resp.into_body().collect().await?.to_bytes();
        if i >= warm {
            samples.push(t.elapsed());
        }
        anyhow::ensure!(
            status.is_success(),
            "{status}: {}",
            String::from_utf8_lossy(&last)
        );
    }
    samples.report(label, Some(wall.elapsed()));
    Ok(last)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
    rt.block_on(async {
        let body = run(
            &args.url,
            args.token.as_deref(),
            args.requests,
            &format!("GET {}", args.url),
        )
        .await?;
        if args.bare {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            // The bare server gets its own thread and runtime, like the gateway process.
            std::thread::spawn(move || {
                let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)
                    .expect("rt");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener.into_std().expect("std"))
                            .expect("listener");
                    loop {
                        let Ok((s, _)) = listener.accept().await else {
                            break;
                        };
                        let _ = s.set_nodelay(true);
                        let body = body.clone();
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(move |_req| {
                                let body = body.clone();
                                async move {
                                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                        Full::new(body),
                                    ))
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await;
                        });
                    }
                });
            });
            run(
                &format!("http://{addr}/"),
                None,
                args.requests,
                "bare hyper handler, same bytes",
            )
            .await?;
        }
        anyhow::Ok(())
    })
}
