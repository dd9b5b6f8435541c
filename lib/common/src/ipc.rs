//! gRPC over Unix domain sockets: serve, connect, health, and follow a stream across restarts.
//!
//! Callers name a [`ServiceName`], never a socket path. Every client channel carries a deadline
//! ([`CALL_TIMEOUT`]); channels connect lazily and reconnect on the next call after a peer
//! restarts, and [`follow`] re-opens server streams with backoff.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus as WireStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::server::HealthReporter;

use crate::authority::AnyAuthority;
use crate::{Layout, ServiceName, Shutdown};

/// Deadline on every unary call between services.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Deadline on establishing a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Socket mode: owner and group (the `svcos` group) only.
pub const SOCKET_MODE: u32 = 0o660;

/// Bind a Unix socket, replacing a stale one, and set mode 0660 before anyone is told we are
/// ready.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))?;
    Ok(listener)
}

/// How long open connections (e.g. a peer's telemetry stream) may drain after shutdown.
pub const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Serve a tonic router on a bound listener until shutdown, with `grpc.health.v1` and gRPC
/// server reflection added and any `:authority` accepted (see [`crate::reflection`] and
/// [`crate::authority`]).
///
/// Health answers by name: the overall status ("") and each gRPC service the socket serves
/// ([`ServiceName::grpc_services`], from the socket's file name), so `grpc_health_probe
/// -service=svcos.auth.v1.AuthService` works; any other name is NOT_FOUND. A service calls this
/// once everything it serves is built, so every name is SERVING from the first answer on, and
/// NOT_SERVING from the shutdown on, while open connections drain.
///
/// tonic's graceful shutdown waits for every open connection to close, and peers keep
/// long-lived streams open, so the drain is bounded by [`DRAIN_GRACE`]: a service told to stop
/// must stop within the supervisor's grace period.
pub async fn serve(
    router: tonic::transport::server::Router,
    listener: UnixListener,
    shutdown: Shutdown,
) -> Result<(), tonic::transport::Error> {
    // Admin tools list and call services by reflection; the socket's file name says which
    // service this is, so every caller gets it without a change of its own.
    let service = listener.local_addr().ok().and_then(|a| {
        a.as_pathname()
            .and_then(|p| p.file_stem())
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<ServiceName>().ok())
    });
    let names = health_names(service);
    let (reporter, health) = tonic_health::server::health_reporter();
    set_health(&reporter, &names, ServingStatus::Serving).await;
    let router = crate::reflection::add_to(router.add_service(health), service);
    // Standard gRPC clients (grpc-python, grpcurl) send an `:authority` derived from the socket
    // path that h2 would refuse; see `authority`.
    let incoming = UnixListenerStream::new(listener).map(|conn| conn.map(AnyAuthority::new));
    let serving = router.serve_with_incoming_shutdown(incoming, shutdown.wait_owned());
    tokio::pin!(serving);
    tokio::select! {
        r = &mut serving => r,
        _ = async {
            shutdown.wait().await;
            set_health(&reporter, &names, ServingStatus::NotServing).await;
            tokio::time::sleep(DRAIN_GRACE).await;
        } => Ok(()),
    }
}

/// The names health answers for on `service`'s socket: the overall status ("") first.
fn health_names(service: Option<ServiceName>) -> Vec<&'static str> {
    let own = service.map_or(&[][..], ServiceName::grpc_services);
    std::iter::once("").chain(own.iter().copied()).collect()
}

async fn set_health(reporter: &HealthReporter, names: &[&str], status: ServingStatus) {
    for name in names {
        reporter.set_service_status(*name, status).await;
    }
}

/// The base server builder every service uses (keeps settings in one place).
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(None)
}

/// A router with no gRPC service of its own, for a socket that serves only health and
/// reflection ([`serve`] adds both).
pub fn no_services() -> tonic::transport::server::Router {
    server().add_routes(tonic::service::Routes::default())
}

/// A lazily connecting channel to a socket path with the standard deadlines.
pub fn channel_at(path: PathBuf) -> Channel {
    channel_with_timeout(path, CALL_TIMEOUT)
}

/// Like [`channel_at`] with a custom per-call deadline (for calls that legitimately take long,
/// such as a pool test).
pub fn channel_with_timeout(path: PathBuf, timeout: Duration) -> Channel {
    Endpoint::from_static("http://svcos.local")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(timeout)
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
}

/// A channel to a service of this instance.
pub fn channel(layout: &Layout, service: ServiceName) -> Channel {
    channel_at(layout.socket(service))
}

/// [`channel`] with a custom per-call deadline (calls that legitimately take long, such as a
/// pool test or a login waiting for an argon2 slot).
pub fn channel_with_deadline(layout: &Layout, service: ServiceName, timeout: Duration) -> Channel {
    channel_with_timeout(layout.socket(service), timeout)
}

/// Ask a service's health endpoint once. `Ok(true)` means SERVING.
pub async fn check_health(layout: &Layout, service: ServiceName, timeout: Duration) -> bool {
    check_health_at(layout.socket(service), timeout).await
}

/// Ask the health endpoint behind a socket path once.
pub async fn check_health_at(path: PathBuf, timeout: Duration) -> bool {
    let mut client = HealthClient::new(channel_with_timeout(path, timeout));
    let request = HealthCheckRequest {
        service: String::new(),
    };
    match tokio::time::timeout(timeout, client.check(request)).await {
        Ok(Ok(resp)) => resp.into_inner().status == WireStatus::Serving as i32,
        _ => false,
    }
}

/// Exponential backoff for reconnecting: by default to a restarting peer, 25 ms doubling to
/// 1 s; [`Backoff::new`] sets other bounds (pools, brokers). The one backoff of the workspace.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    cap: Duration,
    floor: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: Duration::from_millis(25),
            cap: Duration::from_secs(1),
            floor: Duration::from_millis(25),
        }
    }
}

impl Backoff {
    /// Start at `floor`, doubling up to `cap`.
    pub fn new(floor: Duration, cap: Duration) -> Self {
        Backoff {
            next: floor,
            cap: cap.max(floor),
            floor,
        }
    }

    /// The delay to wait now; the next one doubles up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.cap);
        d
    }
    /// Back to the floor after a success.
    pub fn reset(&mut self) {
        self.next = self.floor;
    }
}

/// Keep the latest item of a server stream in a `watch` channel, re-opening the stream with
/// backoff whenever the peer goes away. The value is `None` while the peer is unreachable, so
/// readers can say "restarting" instead of serving stale numbers as live.
pub fn follow<T, Open, Fut>(
    name: &'static str,
    shutdown: Shutdown,
    mut open: Open,
) -> watch::Receiver<Option<T>>
where
    T: Send + Sync + 'static,
    Open: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<tonic::Streaming<T>, tonic::Status>> + Send,
{
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut backoff = Backoff::default();
        let mut logged_down = false;
        while !shutdown.is_triggered() {
            let opened = tokio::select! {
                r = open() => r,
                _ = shutdown.wait() => break,
            };
            match opened {
                Ok(mut stream) => {
                    if logged_down {
                        tracing::info!(peer = name, "stream re-established");
                    }
                    logged_down = false;
                    backoff.reset();
                    loop {
                        let item = tokio::select! {
                            m = stream.message() => m,
                            _ = shutdown.wait() => return,
                        };
                        match item {
                            Ok(Some(item)) => {
                                tx.send_replace(Some(item));
                            }
                            Ok(None) | Err(_) => break,
                        }
                    }
                    tx.send_replace(None);
                }
                Err(status) => {
                    if !logged_down {
                        tracing::warn!(peer = name, code = ?status.code(), "stream unavailable, retrying");
                        logged_down = true;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.wait() => break,
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_over_unix_socket_and_socket_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sock");
        let listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let shutdown = Shutdown::new();
        let server = tokio::spawn(serve(no_services(), listener, shutdown.clone()));
        assert!(check_health_at(path.clone(), Duration::from_secs(1)).await);
        shutdown.trigger();
        server.await.unwrap().unwrap();
        assert!(!check_health_at(path, Duration::from_millis(200)).await);
    }

    async fn health_of(path: &Path, name: &str) -> Result<i32, tonic::Code> {
        let mut client = HealthClient::new(channel_at(path.to_path_buf()));
        client
            .check(HealthCheckRequest {
                service: name.to_string(),
            })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| s.code())
    }

    #[tokio::test]
    async fn health_answers_by_the_name_of_every_service_the_socket_serves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ServiceName::Tuner.socket_file());
        let listener = bind(&path).unwrap();
        let shutdown = Shutdown::new();
        let server = tokio::spawn(serve(no_services(), listener, shutdown.clone()));
        let serving = WireStatus::Serving as i32;
        assert_eq!(health_of(&path, "").await, Ok(serving));
        for name in [
            "svcos.tuner.v1.TunerService",
            "svcos.tuner.v1.PowerService",
            "svcos.tuner.v1.HistoryService",
        ] {
            assert!(ServiceName::Tuner.grpc_services().contains(&name), "{name}");
            assert_eq!(health_of(&path, name).await, Ok(serving), "{name}");
        }
        // Another socket's service is not served here.
        assert_eq!(
            health_of(&path, "svcos.auth.v1.AuthService").await,
            Err(tonic::Code::NotFound)
        );
        shutdown.trigger();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_watcher_sees_not_serving_when_the_service_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ServiceName::Auth.socket_file());
        let listener = bind(&path).unwrap();
        let shutdown = Shutdown::new();
        let server = tokio::spawn(serve(no_services(), listener, shutdown.clone()));
        let mut client =
            HealthClient::new(channel_with_timeout(path.clone(), Duration::from_secs(30)));
        let mut watch = client
            .watch(HealthCheckRequest {
                service: "svcos.auth.v1.AuthService".into(),
            })
            .await
            .unwrap()
            .into_inner();
        let first = watch.message().await.unwrap().unwrap();
        assert_eq!(first.status, WireStatus::Serving as i32);
        shutdown.trigger();
        // Client-side health checking (a Watch) learns of the stop before the connection goes.
        let next = watch.message().await.unwrap().unwrap();
        assert_eq!(next.status, WireStatus::NotServing as i32);
        server.await.unwrap().unwrap();
    }

    #[test]
    fn a_socket_without_a_service_name_answers_the_overall_status_only() {
        assert_eq!(health_names(None), [""]);
        assert_eq!(
            health_names(Some(ServiceName::HwAgent)),
            [
                "",
                "svcos.hwagent.v1.HwAgentService",
                "svcos.hwagent.v1.HwDiagnosticsService"
            ]
        );
    }

    #[test]
    fn backoff_doubles_to_cap_and_resets() {
        let mut b = Backoff::default();
        let seq: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(seq, [25, 50, 100, 200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay().as_millis(), 25);
    }

    #[test]
    fn backoff_with_bounds_keeps_them() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let seq: Vec<_> = (0..8).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 16, 32, 60, 60]);
        b.reset();
        assert_eq!(b.next_delay().as_secs(), 1);
    }
}
