//! `GET /api/status` latency and throughput; prints figures, asserts nothing about speed.
//!
//! Run: `cargo test -p svcos-gateway --release --test bench -- --ignored --nocapture`.
//! Against a running stack instead of the in-process gateway (real auth, real argon2):
//! `SVCOS_BENCH_URL=http://127.0.0.9:8080 SVCOS_BENCH_TOKEN=... SVCOS_BENCH_PASSWORD=...`.
//!
//! Method: the gateway library runs on its own thread with a current-thread runtime (as in
//! production) with the fake peers of the test harness; a client thread sends sequential
//! keep-alive `GET /api/status` requests with a bearer token over one TCP connection and times
//! each with a monotonic clock. The reference is a bare axum handler returning the same bytes,
//! served the same way. The load case runs 20 concurrent logins that each hash with argon2id
//! (m=19456 KiB, t=2, p=1; two hashes at a time, like the auth service) during the measurement.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{GOOD, Harness, Options, PASSWORD};

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
}

impl Conn {
    fn open(base: &str) -> Conn {
        let host = base.trim_start_matches("http://").to_string();
        let s = TcpStream::connect(&host).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
            host,
        }
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, Vec<u8>) {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if !body.is_empty() {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.writer.write_all(req.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut len = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).unwrap();
        (status, body)
    }
}

fn measure(base: &str, token: &str, n: usize) -> (Vec<Duration>, Duration) {
    let mut c = Conn::open(base);
    for _ in 0..1000 {
        assert_eq!(c.request("GET", "/api/status", Some(token), "").0, 200);
    }
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let (status, _) = c.request("GET", "/api/status", Some(token), "");
        samples.push(t.elapsed());
        assert_eq!(status, 200);
    }
    let total = start.elapsed();
    samples.sort();
    (samples, total)
}

fn pct(samples: &[Duration], p: f64) -> f64 {
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &[Duration], total: Duration) {
    println!(
        "{name:<44} n={:<6} p50={:.3} ms  p99={:.3} ms  max={:.3} ms  {:.0} req/s",
        samples.len(),
        pct(samples, 0.50),
        pct(samples, 0.99),
        pct(samples, 1.0),
        samples.len() as f64 / total.as_secs_f64()
    );
}

/// Start the gateway + fakes on a dedicated current-thread runtime; returns base URL and auth.
fn start_gateway() -> (String, Arc<common::FakeAuth>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let h = Harness::start(Options::default()).await;
            tx.send((h.base.clone(), h.auth.clone())).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

fn start_bare(body: Vec<u8>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            use axum::serve::ListenerExt;
            let body = bytes::Bytes::from(body);
            let app = axum::Router::new().route(
                "/api/status",
                axum::routing::get(move || {
                    let body = body.clone();
                    async move { ([(http::header::CONTENT_TYPE, "application/json")], body) }
                }),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}", l.local_addr().unwrap()))
                .unwrap();
            let l = l.tap_io(|t| {
                let _ = t.set_nodelay(true);
            });
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn status_latency_and_throughput() {
    let external = std::env::var("SVCOS_BENCH_URL").ok();
    let (base, auth) = match &external {
        Some(url) => (url.clone(), None),
        None => {
            let (base, auth) = start_gateway();
            (base, Some(auth))
        }
    };
    let token = std::env::var("SVCOS_BENCH_TOKEN").unwrap_or_else(|_| GOOD.to_string());
    let password = std::env::var("SVCOS_BENCH_PASSWORD").unwrap_or_else(|_| PASSWORD.to_string());
    let body = Conn::open(&base)
        .request("GET", "/api/status", Some(&token), "")
        .1;
    println!("/api/status body: {} bytes", body.len());
    let bare = start_bare(body);

    let n = 20_000;
    let (s, t) = measure(&base, &token, n);
    report("gateway GET /api/status (bearer, keep-alive)", &s, t);
    let (s, t) = measure(&bare, &token, n);
    report("bare axum, same bytes", &s, t);

    // 20 logins at once, repeatedly, while /api/status is measured.
    if let Some(auth) = &auth {
        auth.argon2.store(true, Ordering::SeqCst);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let logins: Vec<_> = (0..20)
        .map(|_| {
            let base = base.clone();
            let stop = stop.clone();
            let password = password.clone();
            std::thread::spawn(move || {
                let mut c = Conn::open(&base);
                let mut times = Vec::new();
                let mut failed = 0usize;
                let body = format!("{{\"password\":\"{password}\"}}");
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let (status, _) = c.request("POST", "/api/auth/session", None, &body);
                    if status == 200 {
                        times.push(t.elapsed());
                    } else {
                        failed += 1;
                    }
                }
                (times, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (s, t) = measure(&base, &token, 5_000);
    stop.store(true, Ordering::SeqCst);
    let mut login_times: Vec<Duration> = Vec::new();
    let mut login_failures = 0;
    for h in logins {
        let (times, failed) = h.join().unwrap();
        login_times.extend(times);
        login_failures += failed;
    }
    login_times.sort();
    if login_times.is_empty() {
        login_times.push(Duration::ZERO);
    }
    report("gateway GET /api/status while 20 logins run", &s, t);
    println!(
        "logins during that time: ok={} failed={} p50={:.1} ms p99={:.1} ms (in-process runs: the fake hashes argon2id 2 at a time)",
        login_times.len(),
        login_failures,
        pct(&login_times, 0.5),
        pct(&login_times, 0.99)
    );
}
