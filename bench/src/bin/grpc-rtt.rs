//! Unary gRPC round trip over a Unix socket (grpc.health.v1 Check through svcos-common's
//! transport) next to a raw Unix-socket echo of the same size: the floor any IPC can reach.
//! Server and client each run on their own current-thread runtime, as in the real services.

use std::time::{Duration, Instant};

use clap::Parser;
use svcos_bench::Samples;
use svcos_common::{Shutdown, ipc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[derive(Parser)]
struct Args {
    /// Calls per measurement.
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let grpc_path = dir.path().join("bench.sock");
    let echo_path = dir.path().join("echo.sock");
    let shutdown = Shutdown::new();

    let server_shutdown = shutdown.clone();
    let (gp, ep) = (grpc_path.clone(), echo_path.clone());
    let server = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
        rt.block_on(async move {
            let listener = ipc::bind(&gp)?;
            let echo = tokio::net::UnixListener::bind(&ep)?;
            tokio::spawn(async move {
                while let Ok((mut s, _)) = echo.accept().await {
                    tokio::spawn(async move {
                        let mut buf = [0u8; 64];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            });
            ipc::serve(ipc::no_services(), listener, server_shutdown).await?;
            Ok(())
        })
    });

    let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
    rt.block_on(async {
        // Wait for the server socket without a fixed sleep.
        while !ipc::check_health_at(grpc_path.clone(), Duration::from_millis(200)).await {
            tokio::task::yield_now().await;
        }
        let mut client = HealthClient::new(ipc::channel_at(grpc_path.clone()));
        for _ in 0..1000 {
            client.check(HealthCheckRequest::default()).await?;
        }
        let mut samples = Samples::with_capacity(args.calls);
        let wall = Instant::now();
        for _ in 0..args.calls {
            let t = Instant::now();
            client.check(HealthCheckRequest::default()).await?;
            samples.push(t.elapsed());
        }
        samples.report("grpc unary (health.Check) over UDS", Some(wall.elapsed()));

        let mut echo = tokio::net::UnixStream::connect(&echo_path).await?;
        let msg = [7u8; 16];
        let mut buf = [0u8; 16];
        let mut samples = Samples::with_capacity(args.calls);
        let wall = Instant::now();
        for _ in 0..args.calls {
            let t = Instant::now();
            echo.write_all(&msg).await?;
            echo.read_exact(&mut buf).await?;
            samples.push(t.elapsed());
        }
        samples.report("raw UDS echo, 16 bytes (floor)", Some(wall.elapsed()));
        anyhow::Ok(())
    })?;
    shutdown.trigger();
    server.join().expect("server thread")?;
    Ok(())
}
