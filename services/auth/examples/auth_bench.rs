//! Auth latency benchmark: prints figures, asserts nothing.
//!
//! `cargo run --release -p svcos-auth --example auth_bench [-- --validations N]`
//!
//! The service runs on its own thread with its own current-thread runtime (as in the auth
//! process) and the client on another, talking gRPC over a Unix socket in a temp dir, with the
//! production argon2id parameters (m = 19456 KiB, t = 2, p = 1) and the default
//! `max_concurrent_hashes`. Login latency includes argon2 and the fsynced session-file write.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svcos_auth::{Auth, AuthOptions, password};
use svcos_common::config::AuthConfig;
use svcos_common::time::SystemClock;
use svcos_common::{Shutdown, ipc};
use svcos_proto::auth::v1 as pb;
use svcos_proto::auth::v1::auth_service_client::AuthServiceClient;

const PASSWORD: &str = "benchmark password";

fn percentiles(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| {
        let i = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1e3
    };
    println!(
        "{label:<44} n={:<6} p50={:>9.3} ms  p99={:>9.3} ms  max={:>9.3} ms",
        samples.len(),
        at(0.50),
        at(0.99),
        at(1.0)
    );
}

fn options(dir: PathBuf) -> AuthOptions {
    AuthOptions {
        state_dir: dir.join("state"),
        hw_agent_socket: dir.join("no-hw-agent.sock"),
        config: AuthConfig::default(),
        clock: Arc::new(SystemClock),
        hash_params: password::owasp_params(),
    }
}

fn main() -> anyhow::Result<()> {
    let validations: usize = std::env::args()
        .skip_while(|a| a != "--validations")
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(20_000);
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("auth.sock");
    let shutdown = Shutdown::new();
    let server = {
        let socket = socket.clone();
        let shutdown = shutdown.clone();
        let opts = options(dir.path().to_path_buf());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = ipc::bind(&socket)?;
                svcos_auth::run_with(opts, listener, shutdown).await
            })
        })
    };
    println!(
        "auth benchmark: argon2id m=19456 KiB t=2 p=1, max_concurrent_hashes={}, {} cores",
        AuthConfig::default().max_concurrent_hashes,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // argon2id alone, on this thread at normal priority: the floor of a login.
    let mut samples = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        std::hint::black_box(password::hash_blocking(PASSWORD, password::owasp_params())?);
        samples.push(t.elapsed());
    }
    percentiles("argon2id hash alone (in-process)", samples);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        while !ipc::check_health_at(socket.clone(), Duration::from_millis(200)).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A long deadline: 20 queued logins on a loaded machine exceed the 2 s IPC default.
        let mut c = AuthServiceClient::new(ipc::channel_with_timeout(
            socket.clone(),
            Duration::from_secs(60),
        ));
        let t = Instant::now();
        c.setup(pb::SetupRequest {
            password: PASSWORD.into(),
            client_ip: "10.0.0.1".into(),
        })
        .await?;
        println!(
            "{:<44} {:.3} ms",
            "setup (hash + fsynced write)",
            t.elapsed().as_secs_f64() * 1e3
        );

        let login = |mut c: AuthServiceClient<_>| async move {
            let t = Instant::now();
            let r = c
                .create_session(pb::CreateSessionRequest {
                    password: PASSWORD.into(),
                    client_ip: "10.0.0.1".into(),
                    user_agent: "bench".into(),
                })
                .await?
                .into_inner();
            anyhow::Ok((t.elapsed(), r.token))
        };
        let mut samples = Vec::new();
        let mut token = String::new();
        for _ in 0..20 {
            let (d, t) = login(c.clone()).await?;
            samples.push(d);
            token = t;
        }
        percentiles("login, sequential (gRPC + argon2 + write)", samples);

        let mut samples = Vec::with_capacity(validations);
        for _ in 0..validations {
            let t = Instant::now();
            c.validate_session(pb::ValidateSessionRequest {
                token: token.clone(),
            })
            .await?;
            samples.push(t.elapsed());
        }
        percentiles("validate over gRPC, idle", samples);

        // 20 logins at once; validate back to back until they are all done.
        let started = Instant::now();
        let burst: Vec<_> = (0..20).map(|_| tokio::spawn(login(c.clone()))).collect();
        tokio::task::yield_now().await;
        let mut samples = Vec::new();
        while burst.iter().any(|h| !h.is_finished()) {
            let t = Instant::now();
            c.validate_session(pb::ValidateSessionRequest {
                token: token.clone(),
            })
            .await?;
            samples.push(t.elapsed());
        }
        let burst_wall = started.elapsed();
        let mut login_samples = Vec::new();
        for h in burst {
            login_samples.push(h.await??.0);
        }
        percentiles("validate over gRPC, while 20 logins hash", samples);
        percentiles("login, 20 at once (each, incl. queueing)", login_samples);
        println!(
            "{:<44} {:.1} ms",
            "20 concurrent logins, wall time",
            burst_wall.as_secs_f64() * 1e3
        );
        anyhow::Ok(())
    })?;
    shutdown.trigger();
    server.join().expect("server thread")?;

    // The in-process cost of one validation (hash the token, scan 32 records, touch).
    let dir2 = tempfile::tempdir()?;
    rt.block_on(async {
        let auth = Auth::open(options(dir2.path().to_path_buf()))?;
        auth.setup(PASSWORD.into(), "10.0.0.1").await?;
        let mut token = String::new();
        for _ in 0..32 {
            token = auth
                .create_session(PASSWORD.into(), "10.0.0.1", "bench")
                .await?
                .token;
        }
        let n = 200_000;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(auth.validate(&token)?);
        }
        println!(
            "{:<44} {:.3} µs each (32 sessions, {n} calls)",
            "validate in-process (no gRPC)",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
        anyhow::Ok(())
    })?;
    Ok(())
}
