//! One request per new TCP connection, read to EOF (how cgminer clients such as pyasic talk to
//! port 4028), sequentially or with N concurrent clients.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use svcos_bench::Samples;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Args {
    /// host:port, e.g. 127.0.0.1:4028
    addr: String,
    /// Request bytes, e.g. '{"command":"summary"}'
    #[arg(long, default_value = "{\"command\":\"summary\"}")]
    payload: String,
    #[arg(long, default_value_t = 5_000)]
    requests: usize,
    /// Concurrent clients (each does requests / concurrency).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

async fn client(addr: Arc<String>, payload: Arc<String>, n: usize) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(n);
    let mut buf = Vec::with_capacity(4096);
    for _ in 0..n {
        let t = Instant::now();
        let mut s = tokio::net::TcpStream::connect(addr.as_str()).await?;
        s.set_nodelay(true)?;
        s.write_all(payload.as_bytes()).await?;
        buf.clear();
        s.read_to_end(&mut buf).await?;
        samples.push(t.elapsed());
        anyhow::ensure!(!buf.is_empty(), "empty reply");
    }
    Ok(samples)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
    rt.block_on(async {
        let addr = Arc::new(args.addr.clone());
        let payload = Arc::new(args.payload.clone());
        client(addr.clone(), payload.clone(), 200).await?;
        let per = (args.requests / args.concurrency.max(1)).max(1);
        let wall = Instant::now();
        let tasks: Vec<_> = (0..args.concurrency.max(1))
            .map(|_| tokio::spawn(client(addr.clone(), payload.clone(), per)))
            .collect();
        let mut all = Samples::default();
        for t in tasks {
            all.extend(t.await??);
        }
        all.report(
            &format!(
                "{} x new connection, {} concurrent",
                args.payload, args.concurrency
            ),
            Some(wall.elapsed()),
        );
        anyhow::Ok(())
    })
}
