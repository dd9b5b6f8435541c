//! Connection limits against real sockets on 127.0.0.1: idle and half-sent connections are
//! closed, a flood does not keep a normal request from its answer, and the connection cap holds.
//! Timeouts are set short through `Limits`; the time bounds asserted are generous on purpose
//! (the machine may be busy), the behaviour is what is checked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use svcos_open_data::datasets::Source;
use svcos_open_data::listen::{self, Limits, Tracker};
use svcos_open_data::open_store;
use svcos_open_data::server::{self, AppState, HashpriceConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout};

struct Server {
    addr: SocketAddr,
    tracker: Tracker,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn state(dir: &tempfile::TempDir) -> Arc<AppState> {
    let src = Source { dir: None };
    let (infos, store) = open_store(&dir.path().join("od.sqlite"), &src, None, false).unwrap();
    let state = AppState::new(infos, src, store, None, 900, 1000).unwrap();
    state.warm();
    Arc::new(state)
}

async fn start(limits: Limits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let app = server::router(state(&dir));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tracker = Tracker::new(limits.budget());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(listen::serve(
        listener,
        app,
        limits,
        tracker.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        tracker,
        stop: Some(stop),
        task,
        _dir: dir,
    }
}

impl Server {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        timeout(Duration::from_secs(10), self.task)
            .await
            .expect("serve returns after shutdown")
            .unwrap();
    }
}

fn limits(header: u64, idle: u64, max: usize) -> Limits {
    Limits {
        header_read_timeout: Duration::from_secs(header),
        idle_timeout: Duration::from_secs(idle),
        request_timeout: Duration::from_secs(10),
        max_connections: max,
    }
}

/// Send one keep-alive GET and read its whole answer; the status code.
async fn get(stream: &mut TcpStream, path: &str) -> u16 {
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer's head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("content-length");
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer's end");
        buf.extend_from_slice(&chunk[..n]);
    }
    status
}

/// Whether the server closed the connection within `within` (anything it still sends, such
/// as a 408 for a late head, is read past).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    // The header timeout is far longer, so the close comes from the idle watchdog.
    let srv = start(limits(30, 1, 100)).await;
    let mut conn = TcpStream::connect(srv.addr).await.unwrap();
    assert_eq!(get(&mut conn, "/v1/catalog").await, 200);
    let t0 = Instant::now();
    assert!(
        !closed_within(&mut conn, Duration::from_millis(300)).await,
        "kept alive between requests"
    );
    assert_eq!(get(&mut conn, "/v1/miners").await, 200, "and reusable");
    assert!(
        closed_within(&mut conn, Duration::from_secs(8)).await,
        "an idle connection is closed"
    );
    assert!(t0.elapsed() < Duration::from_secs(9));
    // A connection that never sends anything is idle from the start.
    let mut silent = TcpStream::connect(srv.addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(8)).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(srv.tracker.open(), 0, "their places are free again");
    srv.stop().await;
}

#[tokio::test]
async fn half_a_request_head_is_closed_after_the_header_timeout() {
    // The idle timeout is far longer, so the close comes from hyper's header timer.
    let srv = start(limits(1, 60, 100)).await;
    let mut half = TcpStream::connect(srv.addr).await.unwrap();
    half.write_all(b"GET /v1/catalog HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    assert!(
        closed_within(&mut half, Duration::from_secs(8)).await,
        "an unfinished head is not waited for"
    );
    // Trickling the head a byte at a time does not buy more time.
    let mut slow = TcpStream::connect(srv.addr).await.unwrap();
    let t0 = Instant::now();
    let mut closed = false;
    for b in b"GET /v1/catalog HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if slow.write_all(&[*b]).await.is_err()
            || closed_within(&mut slow, Duration::from_millis(200)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled head is closed");
    assert!(t0.elapsed() < Duration::from_secs(8));
    // hyper runs the same timer while a keep-alive connection waits for its next head (the
    // crate doc relies on it: idle connections go after the header timeout in practice).
    let mut kept = TcpStream::connect(srv.addr).await.unwrap();
    assert_eq!(get(&mut kept, "/v1/catalog").await, 200);
    assert!(closed_within(&mut kept, Duration::from_secs(8)).await);
    srv.stop().await;
}

#[tokio::test]
async fn a_normal_request_is_answered_while_200_idle_and_slow_connections_are_open() {
    let srv = start(limits(30, 30, 1000)).await;
    let mut held = Vec::new();
    for i in 0..200 {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        if i % 2 == 1 {
            c.write_all(b"GET /v1/catalog HTTP/1.1\r\nHo")
                .await
                .unwrap();
        }
        held.push(c);
    }
    let t0 = Instant::now();
    let mut conn = TcpStream::connect(srv.addr).await.unwrap();
    let status = timeout(Duration::from_secs(5), get(&mut conn, "/v1/catalog"))
        .await
        .expect("answered promptly");
    assert_eq!(status, 200);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(srv.tracker.open() >= 200, "the flood is still held");
    drop(held);
    srv.stop().await;
}

#[tokio::test]
async fn at_the_cap_the_least_recently_active_idle_connections_are_closed() {
    const CAP: usize = 20;
    let srv = start(limits(30, 30, CAP)).await;
    assert_eq!(srv.tracker.budget(), CAP);
    let mut conns = Vec::new();
    for _ in 0..CAP {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        assert_eq!(get(&mut c, "/v1/catalog").await, 200);
        conns.push(c);
    }
    assert_eq!(srv.tracker.open(), CAP);
    // Ten more: each takes the place of the least recently active idle one.
    for _ in 0..10 {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        assert_eq!(get(&mut c, "/v1/catalog").await, 200);
        conns.push(c);
        assert!(srv.tracker.open() <= CAP + listen::EVICT_SLACK);
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let closed = closed_within(c, Duration::from_millis(if i < 10 { 5000 } else { 50 })).await;
        assert_eq!(
            closed,
            i < 10,
            "connection {i}: only the ten oldest are closed"
        );
    }
    assert_eq!(srv.tracker.open(), CAP, "the cap holds");
    // The survivors still work.
    assert_eq!(get(&mut conns[CAP + 9], "/v1/miners").await, 200);
    assert_eq!(get(&mut conns[10], "/v1/miners").await, 200);
    srv.stop().await;
}

#[tokio::test]
async fn run_stops_on_shutdown_with_connections_open() {
    let dir = tempfile::tempdir().unwrap();
    let st = state(&dir);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hp = HashpriceConfig {
        chain: None,
        price: None,
        interval: Duration::from_secs(900),
        fee_blocks: 144,
        retry_min: server::RETRY_MIN,
        retry_max: server::RETRY_MAX,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server::run(
        st,
        listener,
        hp,
        None,
        limits(30, 30, 100),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get(&mut idle, "/v1/catalog").await, 200);
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /v1/cat").await.unwrap();
    stop.send(()).unwrap();
    timeout(Duration::from_secs(10), task)
        .await
        .expect("run returns")
        .unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(1)).await);
    assert!(closed_within(&mut half, Duration::from_secs(1)).await);
}
