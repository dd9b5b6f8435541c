//! Floods against the REST port and the port-80 proxy in front of it, with the real gateway and
//! the real proxy on loopback: slow bodies, many addresses, idle connections, and the Host rules.
//! Each is bounded in connections and time; the owner (a valid token) must still be answered.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{GOOD, Harness, Options};
use svcos_common::Shutdown;
use svcos_common::config::Config;
use svcos_common::httpserve::{BODY_GRACE, HEADER_READ_TIMEOUT, IDLE_TIMEOUT};
use svcos_proxy::ProxyConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// "Answers promptly".
const PROMPT: Duration = Duration::from_secs(5);

fn gateway_addr(h: &Harness) -> SocketAddr {
    h.base.trim_start_matches("http://").parse().unwrap()
}

/// The real proxy in front of `h`'s gateway, with its forwarding key.
async fn start_proxy(h: &Harness) -> SocketAddr {
    let mut config = ProxyConfig::from_config(&Config::default());
    config.upstream = gateway_addr(h);
    config.forward_key = Some(svcos_common::proxykey::create(&h.layout).unwrap());
    // Same address family as the gateway (the IPv6 flood test runs both on ::1).
    let listener = TcpListener::bind(SocketAddr::new(gateway_addr(h).ip(), 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(svcos_proxy::serve(listener, config, h.shutdown.clone()));
    addr
}

async fn connect_from(source: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let source: IpAddr = source.parse().unwrap();
    let socket = if source.is_ipv6() {
        TcpSocket::new_v6()?
    } else {
        TcpSocket::new_v4()?
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(to).await
}

/// Send `request` from `source` and read the answer to its end (bounded by [`PROMPT`]).
async fn exchange(source: &str, to: SocketAddr, request: &str) -> String {
    let mut s = connect_from(source, to).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
        .await
        .unwrap_or_else(|_| panic!("no answer from {to} within {PROMPT:?} to {request:?}"))
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The owner's status request from `source`: the status code it got.
async fn owner_status(source: &str, to: SocketAddr) -> u16 {
    let answer = exchange(
        source,
        to,
        &format!(
            "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GOOD}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    status_of(&answer)
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// `n` login requests from `source` announcing a 100 000-byte body and sending one byte a
/// second, and `extra` headers; each task returns the answer it got once the server closed the
/// connection.
async fn slow_logins(
    set: &mut JoinSet<String>,
    source: &str,
    to: SocketAddr,
    n: usize,
    extra: &str,
) {
    for _ in 0..n {
        let head = format!(
            "POST /api/auth/session HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
        );
        let s = connect_from(source, to).await.unwrap();
        set.spawn(async move {
            let (mut read, mut write) = s.into_split();
            write.write_all(head.as_bytes()).await.unwrap();
            let trickle = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if write.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            });
            let mut out = Vec::new();
            let _ = tokio::time::timeout(
                BODY_GRACE + Duration::from_secs(8),
                read.read_to_end(&mut out),
            )
            .await;
            trickle.abort();
            String::from_utf8_lossy(&out).into_owned()
        });
    }
}

/// What the slow logins were told: (refused at once as unauthenticated excess, timed out).
async fn outcomes(mut set: JoinSet<String>) -> (usize, usize) {
    let (mut refused, mut timed_out) = (0, 0);
    while let Some(answer) = set.join_next().await {
        let answer = answer.unwrap();
        match status_of(&answer) {
            503 => {
                assert!(
                    answer.contains("too many requests without a token"),
                    "{answer}"
                );
                refused += 1;
            }
            408 => {
                assert!(answer.contains("\"error\""), "an envelope: {answer}");
                timed_out += 1;
            }
            other => panic!("unexpected {other}: {answer}"),
        }
    }
    (refused, timed_out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_unauthenticated_bodies_through_port_80_leave_the_owner_answered() {
    let h = Harness::start(Options::default()).await;
    let proxy = start_proxy(&h).await;
    // Two flooding clients: 32 slow bodies held (16 each, half of their share), which took
    // every gateway connection of the proxy's address when they were streamed through.
    let mut flood = JoinSet::new();
    slow_logins(&mut flood, "127.0.0.2", proxy, 32, "").await;
    slow_logins(&mut flood, "127.0.0.4", proxy, 32, "").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Through port 80 the owner is answered, from another address and from a flooding one.
    for source in [
        "127.0.0.3",
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.2",
        "127.0.0.3",
    ] {
        assert_eq!(owner_status(source, proxy).await, 200, "from {source}");
    }
    // Beyond half of each flooding client's share, refused at once; the rest timed out at the
    // minimum body rate instead of trickling on for 100 000 s.
    assert_eq!(outcomes(flood).await, (32, 32));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_unauthenticated_bodies_on_8080_hold_at_most_half_of_a_clients_share() {
    let h = Harness::start(Options::default()).await;
    let gateway = gateway_addr(&h);
    let mut flood = JoinSet::new();
    slow_logins(&mut flood, "127.0.0.2", gateway, 32, "").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The flooding address itself still has room for the owner's requests.
    for _ in 0..3 {
        assert_eq!(owner_status("127.0.0.2", gateway).await, 200);
    }
    assert_eq!(outcomes(flood).await, (16, 16));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_requests_count_for_the_client_the_proxy_names() {
    let h = Harness::start(Options::default()).await;
    let gateway = gateway_addr(&h);
    let key = svcos_common::proxykey::create(&h.layout).unwrap();
    let via = |client: &str| format!("X-Forwarded-For: {client}\r\nX-Svcos-Proxy-Key: {key}\r\n");
    // 40 host-local connections (the proxy's) carrying two clients' slow bodies: each client
    // holds half of its share of 32, and its excess is refused, not 127.0.0.1's.
    let mut flood = JoinSet::new();
    slow_logins(&mut flood, "127.0.0.1", gateway, 20, &via("192.0.2.7")).await;
    slow_logins(&mut flood, "127.0.0.1", gateway, 20, &via("192.0.2.8")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut refused = 0;
    while let Some(answer) = flood.try_join_next() {
        let answer = answer.unwrap();
        assert_eq!(status_of(&answer), 503, "{answer}");
        assert!(
            answer.contains("too many requests without a token"),
            "{answer}"
        );
        refused += 1;
    }
    assert_eq!(refused, 8);
    // A third forwarded client, and the proxy's own address, still get in.
    let owner = format!(
        "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n{}Authorization: Bearer {GOOD}\r\nConnection: close\r\n\r\n",
        via("192.0.2.9")
    );
    assert_eq!(
        status_of(&exchange("127.0.0.1", gateway, &owner).await),
        200
    );
    assert_eq!(owner_status("127.0.0.1", gateway).await, 200);
    // Without the key a forwarded address is not believed: 17 slow bodies naming 17 clients
    // all count for the peer, whose 17th is refused.
    let mut forged = JoinSet::new();
    for i in 0..17 {
        let headers = format!(
            "X-Forwarded-For: 192.0.2.{}\r\nX-Svcos-Proxy-Key: {}\r\n",
            100 + i,
            "0".repeat(64)
        );
        slow_logins(&mut forged, "127.0.0.1", gateway, 1, &headers).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = forged
        .try_join_next()
        .expect("the peer's 17th is refused")
        .unwrap();
    assert_eq!(status_of(&first), 503, "{first}");
    assert!(forged.try_join_next().is_none());
}

/// Idle connections held open against one port, from a thread of their own (so that the
/// flood's hundreds of tasks and the servers under test do not share a scheduler).
struct IdleFlood {
    thread: std::thread::JoinHandle<()>,
    /// Connections the server closed before its header timeout could (refused or evicted: the
    /// port is at a cap); each was reopened.
    closed: Arc<AtomicUsize>,
    /// Connections open now (as the client sees them).
    open: Arc<AtomicUsize>,
    /// Connections open now that have been open for a second: the ones the server kept, not
    /// those it is about to refuse.
    held: Arc<AtomicUsize>,
}

/// Keep `per_address` idle connections from each of `sources` open to `to`, reopening each one
/// the server closes (after `pause`), until `stop`.
fn idle_flood(
    sources: &[String],
    per_address: usize,
    to: SocketAddr,
    pause: Duration,
    stop: &Shutdown,
) -> IdleFlood {
    let closed = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let (sources, stop) = (sources.to_vec(), stop.clone());
    let (closed_in, open_in, held_in) = (closed.clone(), open.clone(), held.clone());
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut tasks = JoinSet::new();
            for (n, source) in sources
                .iter()
                .flat_map(|s| std::iter::repeat_n(s, per_address))
                .enumerate()
            {
                let (source, stop) = (source.clone(), stop.clone());
                let (closed, open, kept_now) =
                    (closed_in.clone(), open_in.clone(), held_in.clone());
                tasks.spawn(async move {
                    // Spread the first connects: a burst of hundreds of handshakes can overflow
                    // the listen queue, and an idle client never learns its handshake was lost.
                    tokio::time::sleep(Duration::from_millis(n as u64)).await;
                    loop {
                        let held = async {
                            if let Ok(mut s) = connect_from(&source, to).await {
                                let opened = Instant::now();
                                open.fetch_add(1, Ordering::Relaxed);
                                let mut sink = Vec::new();
                                let read = s.read_to_end(&mut sink);
                                tokio::pin!(read);
                                let kept = tokio::time::timeout(Duration::from_secs(1), &mut read)
                                    .await
                                    .is_err();
                                if kept {
                                    kept_now.fetch_add(1, Ordering::Relaxed);
                                    let _ = read.await;
                                    kept_now.fetch_sub(1, Ordering::Relaxed);
                                }
                                open.fetch_sub(1, Ordering::Relaxed);
                                if opened.elapsed() < HEADER_READ_TIMEOUT - Duration::from_secs(1) {
                                    closed.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            tokio::time::sleep(pause).await;
                        };
                        tokio::select! {
                            () = held => {}
                            _ = stop.wait() => return,
                        }
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        });
    });
    IdleFlood {
        thread,
        closed,
        open,
        held,
    }
}

/// Flood `to` from 127.0.`net`.2..18 (each test its own addresses) with 32 idle connections each (17 × 32 = 544, over the
/// gateway's 512 and the proxy's 128), reopened as the server closes them; once the port is
/// at its cap, the owner's 20 status requests from 127.0.0.1: how many were answered 200.
async fn owner_answered_under_flood(to: SocketAddr, net: u8, pause: Duration) -> usize {
    let sources: Vec<String> = (2..=18).map(|i| format!("127.0.{net}.{i}")).collect();
    owner_answered_under(&sources, "127.0.0.1", to, pause)
        .await
        .0
}

/// [`owner_answered_under_flood`] from any `sources`, the owner at `owner`; also the most flood
/// connections seen held at once (open for a second) over the two seconds before the owner
/// asked.
async fn owner_answered_under(
    sources: &[String],
    owner: &str,
    to: SocketAddr,
    pause: Duration,
) -> (usize, usize) {
    let stop = Shutdown::new();
    let flood = idle_flood(sources, 32, to, pause, &stop);
    // At the cap once it closes flood connections early (a loaded machine may take seconds to
    // open them all).
    tokio::time::timeout(Duration::from_secs(20), async {
        while flood.closed.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let open = flood.open.load(Ordering::Relaxed);
        panic!("the flood did not reach the cap of {to}: {open} connections open")
    });
    let mut most_open = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        most_open = most_open.max(flood.held.load(Ordering::Relaxed));
    }
    let mut answered = 0;
    for _ in 0..20 {
        answered += usize::from(owner_status(owner, to).await == 200);
    }
    stop.trigger();
    tokio::task::spawn_blocking(move || flood.thread.join().unwrap())
        .await
        .unwrap();
    (answered, most_open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seventeen_flooding_addresses_cannot_lock_the_owner_out_of_8080() {
    let h = Harness::start(Options::default()).await;
    let answered = owner_answered_under_flood(gateway_addr(&h), 0, Duration::from_millis(50)).await;
    assert_eq!(answered, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seventeen_flooding_addresses_cannot_lock_the_owner_out_of_port_80() {
    let h = Harness::start(Options::default()).await;
    let proxy = start_proxy(&h).await;
    let answered = owner_answered_under_flood(proxy, 1, Duration::from_millis(250)).await;
    assert_eq!(answered, 20);
    let dashboard = exchange(
        "127.0.0.1",
        proxy,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&dashboard), 200);
}

#[tokio::test]
async fn host_is_required_and_an_absolute_target_must_name_it() {
    let h = Harness::start(Options::default()).await;
    let gateway = gateway_addr(&h);
    let auth = format!("Authorization: Bearer {GOOD}\r\nConnection: close\r\n");
    for request in [
        format!("GET /api/status HTTP/1.1\r\n{auth}\r\n"),
        format!("GET /api/status HTTP/1.0\r\n{auth}\r\n"),
        format!("GET http://evil.example/api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n"),
        format!("GET http://127.0.0.1/api/status HTTP/1.1\r\nHost: evil.example\r\n{auth}\r\n"),
    ] {
        let answer = exchange("127.0.0.1", gateway, &request).await;
        assert_eq!(status_of(&answer), 400, "{request:?}: {answer}");
        assert!(
            answer.contains("missing Host header, or a target naming another host"),
            "{answer}"
        );
    }
    let same = format!("GET http://127.0.0.1/api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n");
    assert_eq!(status_of(&exchange("127.0.0.1", gateway, &same).await), 200);
}

#[tokio::test]
async fn silent_and_idle_keep_alive_connections_are_closed() {
    let h = Harness::start(Options::default()).await;
    let gateway = gateway_addr(&h);
    let proxy = start_proxy(&h).await;
    let mut checks = JoinSet::new();
    for to in [gateway, proxy] {
        // One never sends a head; one is left idle after an answer (keep-alive).
        checks.spawn(async move {
            let mut silent = connect_from("127.0.0.1", to).await.unwrap();
            let started = Instant::now();
            let mut out = Vec::new();
            tokio::time::timeout(HEADER_READ_TIMEOUT + PROMPT, silent.read_to_end(&mut out))
                .await
                .expect("a silent connection is closed after the header timeout")
                .unwrap();
            started.elapsed()
        });
        checks.spawn(async move {
            let mut idle = connect_from("127.0.0.1", to).await.unwrap();
            idle.write_all(
                format!("GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GOOD}\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut first = [0u8; 12];
            idle.read_exact(&mut first).await.unwrap();
            assert_eq!(&first, b"HTTP/1.1 200");
            let started = Instant::now();
            let mut rest = Vec::new();
            tokio::time::timeout(IDLE_TIMEOUT + PROMPT, idle.read_to_end(&mut rest))
                .await
                .expect("an idle keep-alive connection is closed")
                .unwrap();
            started.elapsed()
        });
    }
    while let Some(took) = checks.join_next().await {
        let took = took.unwrap();
        assert!(took <= IDLE_TIMEOUT + Duration::from_secs(2), "{took:?}");
        assert!(IDLE_TIMEOUT <= Duration::from_secs(60));
    }
}

/// Seventeen addresses of one IPv6 /64 on loopback (`ip -6 addr add … dev lo nodad`), removed
/// again on drop; `None` where they cannot be added (not root, no `ip`, IPv6 off), and the test
/// says so.
struct V6Sources(Vec<String>);

impl V6Sources {
    fn add() -> Option<Self> {
        let all: Vec<String> = (2..=18).map(|i| format!("fd00:5e:33::{i:x}")).collect();
        let mut added = V6Sources(Vec::new());
        for a in &all {
            let ok = std::process::Command::new("ip")
                .args([
                    "-6",
                    "addr",
                    "add",
                    &format!("{a}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return None;
            }
            added.0.push(a.clone());
        }
        Some(added)
    }
}

impl Drop for V6Sources {
    fn drop(&mut self) {
        for a in &self.0 {
            let _ = std::process::Command::new("ip")
                .args(["-6", "addr", "del", &format!("{a}/128"), "dev", "lo"])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ipv6_64_cannot_lock_the_owner_out_of_either_port() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("SKIPPED: no IPv6 loopback here");
        return;
    }
    let Some(sources) = V6Sources::add() else {
        eprintln!("SKIPPED: cannot add IPv6 addresses to lo (needs root and iproute2)");
        return;
    };
    let mut options = Options::default();
    options.config.api.bind = std::net::Ipv6Addr::LOCALHOST.into();
    let h = Harness::start(options).await;
    // 17 addresses × 32 connections from one /64 are one client: they hold its share of
    // either port, never the whole port, and the owner at ::1 (another /64) gets in.
    let gateway = gateway_addr(&h);
    let (answered, open) =
        owner_answered_under(&sources.0, "::1", gateway, Duration::from_millis(500)).await;
    assert_eq!(answered, 20, "8080");
    // Counted per address, the 544 would have held the whole port until evicted.
    let share = Config::default().api.max_connections_per_peer;
    assert!(
        open <= share + 2,
        "8080: the /64 held {open} connections, its share is {share}"
    );
    let proxy = start_proxy(&h).await;
    let (answered, open) =
        owner_answered_under(&sources.0, "::1", proxy, Duration::from_millis(500)).await;
    assert_eq!(answered, 20, "port 80");
    assert!(
        open <= share + 2,
        "port 80: the /64 held {open} connections, its share is {share}"
    );
}
