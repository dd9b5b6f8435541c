//! The whole table of issue 15 (footprint and latency) against any running firmware, in one
//! command: open route and `/api/status` latency over keep-alive HTTP, cgminer `summary` over a new
//! TCP connection per request, `/api/status` while 20 logins hash, whole-stack PSS after 10 000
//! mixed requests, and the binary's size. Prints a Markdown table; asserts nothing.
//!
//! ```sh
//! cargo run --release -p svcos-bench --bin table -- --host 127.0.0.1 --api-port 8080 \
//!     --legacy-port 4028 --token TOKEN [--password PW] [--sim-dir .sim | --pids 1,2,3] \
//!     [--binary target/release/svcos]
//! ```
//!
//! Routes that a firmware does not have are reported as such (non-2xx), not skipped silently.
//! PSS needs the processes on this machine: `--sim-dir` reads an svcOS instance's pidfiles (plus
//! its supervisor, the children's parent), `--pids` names any firmware's processes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use svcos_bench::{HttpClient, Samples, cgminer_request, cgminer_request_timed, pss_kib};

#[derive(Parser)]
struct Args {
    /// Address the firmware listens on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// REST API port.
    #[arg(long, default_value_t = 8080)]
    api_port: u16,
    /// cgminer-compatible API port.
    #[arg(long, default_value_t = 4028)]
    legacy_port: u16,
    /// Bearer token for `/api/status` (from `POST /api/auth/session`).
    #[arg(long)]
    token: String,
    /// The password, to measure `/api/status` while 20 logins run (logins are revoked after).
    #[arg(long)]
    password: Option<String>,
    /// Requests per latency row.
    #[arg(long, default_value_t = 10_000)]
    requests: usize,
    /// Mixed requests before the memory reading.
    #[arg(long, default_value_t = 10_000)]
    mixed: usize,
    /// Seconds after the mixed requests for the second memory reading (1: one reading only).
    #[arg(long, default_value_t = 6)]
    settle: u64,
    /// Local addresses the 20 logins come from, in turn. A firmware throttles logins per client
    /// address (svcOS counts each attempt before hashing and makes an address wait after five
    /// in flight), so 20 logins from one address measure the throttle, not 20 hashes. Default:
    /// 127.0.62.1 to 127.0.62.20 when the host is a loopback address, else the default route's.
    #[arg(long, value_delimiter = ',')]
    login_sources: Vec<std::net::IpAddr>,
    /// An svcOS instance directory (`svcos sim --dir`) whose processes' PSS to sum.
    #[arg(long, conflicts_with = "pids")]
    sim_dir: Option<PathBuf>,
    /// Production runtime directory instead (`/run/svcos`).
    #[arg(long, conflicts_with_all = ["pids", "sim_dir"])]
    runtime_dir: Option<PathBuf>,
    /// Processes whose PSS to sum (any firmware).
    #[arg(long, value_delimiter = ',')]
    pids: Vec<u32>,
    /// The firmware's executable, for its size.
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Hold idle exit latency at this many microseconds while measuring (`/dev/cpu_dma_latency`,
    /// root only; 0 keeps idle CPUs polling). See `svcos_bench::IdleLatencyHold`.
    #[arg(long)]
    idle_latency_us: Option<i32>,
    /// Before measuring, time the host's wake-up floor for this many seconds (one SCHED_FIFO
    /// thread per CPU sleeping to 1 ms deadlines, as cyclictest does); 0 skips it. See
    /// `svcos_bench::floor`.
    #[arg(long, default_value_t = 10)]
    floor_s: u64,
}

/// The processes that count: the supervisor and the seven production services.
const SVCOS_SERVICES: [&str; 7] = [
    "hw-agent",
    "stratum-agent",
    "auth",
    "tuner",
    "legacy-tcp",
    "gateway",
    "proxy",
];

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

struct Row {
    what: String,
    measured: String,
    target: &'static str,
}

fn svcos_pids(run_dir: &std::path::Path) -> anyhow::Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    for name in SVCOS_SERVICES {
        let path = run_dir.join("pids").join(format!("{name}.pid"));
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let pid: u32 = text
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("no pid in {}", path.display()))?;
        out.push((name.to_string(), pid));
    }
    // The supervisor is the services' parent (a re-adopted child's parent is init; then the
    // supervisor is missing from the sum and the row says so).
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", out[0].1))?;
    let ppid: u32 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .context("parent pid")?;
    if ppid > 1 {
        out.insert(0, ("supervisor".into(), ppid));
    }
    Ok(out)
}

async fn latency(
    client: &mut HttpClient,
    path: &str,
    token: Option<&str>,
    n: usize,
) -> anyhow::Result<(Samples, u16)> {
    let mut status = 0;
    for _ in 0..n / 10 {
        status = client.get(path, token).await?.0;
    }
    let mut samples = Samples::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        status = client.get(path, token).await?.0;
        samples.push(t.elapsed());
    }
    Ok((samples, status))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = svcos_common::entry::runtime(svcos_common::entry::Flavor::CurrentThread)?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let _hold = svcos_bench::hold_idle_latency(args.idle_latency_us)?;
    svcos_bench::floor::print_before_run(args.floor_s);
    let (steal, began) = (svcos_bench::steal_ticks(), Instant::now());
    let host = args.host.clone();
    let legacy = format!("{}:{}", args.host, args.legacy_port);
    let mut rows = Vec::new();
    let mut client = HttpClient::connect(&host, args.api_port).await?;
    let n = args.requests;

    if let Some(bin) = &args.binary {
        let size = std::fs::metadata(bin)?.len();
        rows.push(Row {
            what: format!("binary {}", bin.display()),
            measured: format!("{size} bytes ({:.2} MiB)", size as f64 / 1048576.0),
            target: "≤ 10 MB (image build)",
        });
    }

    let pids: Vec<(String, u32)> = if let Some(dir) = &args.sim_dir {
        svcos_pids(&dir.join("run"))?
    } else if let Some(dir) = &args.runtime_dir {
        svcos_pids(dir)?
    } else {
        args.pids.iter().map(|p| (format!("pid {p}"), *p)).collect()
    };
    if !pids.is_empty() {
        // Mixed requests first, so the reading is of a stack that has served.
        let paths = [
            "/api/status",
            "/api/auth/status",
            "/api/setup/status",
            "/api/safety/warnings",
            "/api/donation/info",
            "/api/pools",
            "/metrics",
        ];
        let mut k = 0;
        while k < args.mixed {
            for path in paths {
                client.get(path, Some(&args.token)).await?;
                k += 1;
            }
            cgminer_request(&legacy, br#"{"command":"summary"}"#).await?;
            cgminer_request(&legacy, br#"{"command":"devs"}"#).await?;
            k += 2;
        }
        // Read twice: 1 s after the burst, and once more after `--settle` seconds, when
        // periodic housekeeping (svcOS trims its heaps every 5 s) has run.
        for wait in [1, args.settle.max(1)] {
            let after = if wait == 1 { 1 } else { wait - 1 };
            tokio::time::sleep(Duration::from_secs(after)).await;
            let mut total = 0;
            let mut parts = Vec::new();
            for (name, pid) in &pids {
                let (pss, rss) = pss_kib(*pid)?;
                total += pss;
                parts.push(format!("{name} {pss}/{rss}"));
            }
            println!(
                "PSS/RSS KiB per process, {wait} s after: {}",
                parts.join(", ")
            );
            rows.push(Row {
                what: format!(
                    "PSS sum of {} processes, {wait} s after {} mixed requests",
                    pids.len(),
                    args.mixed
                ),
                measured: format!("{total} KiB ({:.2} MB)", total as f64 * 1024.0 / 1e6),
                target: "≤ 15 MB",
            });
            if args.settle <= 1 {
                break;
            }
        }
    }

    for path in [
        "/api/auth/status",
        "/api/setup/status",
        "/api/safety/warnings",
        "/api/donation/info",
    ] {
        let (mut s, status) = latency(&mut client, path, None, n / 2).await?;
        s.report(&format!("GET {path} (open)"), None);
        rows.push(Row {
            what: format!("`GET {path}` (open) p50 / p99 ms"),
            measured: if (200..300).contains(&status) {
                format!("{} / {}", ms(s.percentile(50.0)), ms(s.percentile(99.0)))
            } else {
                format!("HTTP {status}")
            },
            target: "p50 ≤ 0.1",
        });
    }

    let (mut idle, status) = latency(&mut client, "/api/status", Some(&args.token), n).await?;
    anyhow::ensure!(
        status == 200,
        "GET /api/status answered {status}: check --token"
    );
    idle.report("GET /api/status (bearer)", None);
    rows.push(Row {
        what: "`GET /api/status` p50 / p99 ms".into(),
        measured: format!(
            "{} / {}",
            ms(idle.percentile(50.0)),
            ms(idle.percentile(99.0))
        ),
        target: "≤ 0.1 / ≤ 0.25",
    });

    let mut summary = Samples::with_capacity(n / 2);
    let (mut connected, mut first_byte) = (Samples::default(), Samples::default());
    for _ in 0..200 {
        cgminer_request(&legacy, br#"{"command":"summary"}"#).await?;
    }
    for _ in 0..n / 2 {
        let (_, hops) = cgminer_request_timed(&legacy, br#"{"command":"summary"}"#).await?;
        connected.push(hops.connected);
        first_byte.push(hops.first_byte);
        summary.push(hops.done);
    }
    // Per hop, so a missed target shows where the time goes (each from the request's start).
    connected.report("cgminer summary: TCP handshake done", None);
    first_byte.report("cgminer summary: first reply byte", None);
    summary.report("cgminer summary, new connection each", None);
    rows.push(Row {
        what: "cgminer `summary`, new TCP connection each, p50 / p99 ms".into(),
        measured: format!(
            "{} / {}",
            ms(summary.percentile(50.0)),
            ms(summary.percentile(99.0))
        ),
        target: "≤ 0.1 / ≤ 0.25",
    });

    if let Some(password) = &args.password {
        let sources: Vec<Option<std::net::IpAddr>> = if !args.login_sources.is_empty() {
            args.login_sources.iter().copied().map(Some).collect()
        } else if host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
        {
            (1..=20)
                .map(|i| Some(std::net::IpAddr::from([127, 0, 62, i])))
                .collect()
        } else {
            vec![None]
        };
        let (mut during, hashes) =
            status_during_logins(&host, args.api_port, &args.token, password, 20, &sources).await?;
        during.report("GET /api/status while 20 logins run", None);
        let idle_p99 = idle.percentile(99.0);
        let p99 = during.percentile(99.0);
        rows.push(Row {
            what: format!("`GET /api/status` p99 while 20 logins run ({hashes} succeeded)"),
            measured: format!(
                "{} ms = {:.2} × idle p99",
                ms(p99),
                p99.as_secs_f64() / idle_p99.as_secs_f64()
            ),
            target: "≤ 1.2 × idle",
        });
    }

    println!("{}", svcos_bench::steal_report(steal, began.elapsed()));
    println!();
    println!("| What | Measured | Target |");
    println!("|---|---|---|");
    for r in rows {
        println!("| {} | {} | {} |", r.what, r.measured, r.target);
    }
    println!(
        "\nshare path (clean_jobs → every chain, nonce → mining.submit): \
         `cargo run --release -p svcos-bench --bin share-path -- --seconds 60` (svcOS sim only)"
    );
    Ok(())
}

/// `/api/status` sampled sequentially while `logins` concurrent logins are in flight; every
/// session created is revoked afterwards, so repeated runs do not evict the caller's token.
async fn status_during_logins(
    host: &str,
    port: u16,
    token: &str,
    password: &str,
    logins: usize,
    sources: &[Option<std::net::IpAddr>],
) -> anyhow::Result<(Samples, usize)> {
    let body = serde_json::json!({ "password": password }).to_string();
    let mut tasks = Vec::new();
    for i in 0..logins {
        let host = host.to_string();
        let body = body.clone();
        let source = sources[i % sources.len()];
        tasks.push(tokio::spawn(async move {
            let mut c = HttpClient::connect_from(&host, port, source).await?;
            let (status, reply) = c.post("/api/auth/session", &body).await?;
            anyhow::Ok((status, reply))
        }));
    }
    let mut client = HttpClient::connect(host, port).await?;
    let mut samples = Samples::default();
    while tasks.iter().any(|t| !t.is_finished()) {
        let t = Instant::now();
        client.get("/api/status", Some(token)).await?;
        samples.push(t.elapsed());
    }
    let mut ok = 0;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for t in tasks {
        let (status, reply) = t.await??;
        *statuses.entry(status).or_default() += 1;
        if status == 200 {
            ok += 1;
            let v: serde_json::Value = serde_json::from_slice(&reply)?;
            if let Some(new) = v["token"].as_str() {
                client.delete("/api/auth/session/current", new).await?;
            }
        }
    }
    println!("login answers (HTTP status × count): {statuses:?}");
    Ok((samples, ok))
}
