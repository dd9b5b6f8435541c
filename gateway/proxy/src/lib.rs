//! proxy: the port-80 dashboard server and `/api/*` reverse proxy (`svcos proxy`).
//!
//! # Design
//! - **What it serves.** The dashboard at `/` and `/static/*`, embedded in the binary
//!   ([`assets`]); every `/api/*` request forwarded to the REST gateway on loopback
//!   (`[api].port`, [`forward`]); anything else 404 with the spec's envelope. `/ws` is not
//!   forwarded (the spec sends WebSocket clients to port 8080).
//! - **Forwarding.** Method, path, query, body and end-to-end headers unchanged, the client's
//!   `Authorization` included; `X-Forwarded-For` set to the client address (replacing any the
//!   client sent) together with the proxy's key ([`svcos_common::proxykey`]), without which the
//!   gateway ignores `X-Forwarded-For` (per-address setup limit, login throttle); responses
//!   streamed through. Pooled keep-alive connections to the gateway.
//! - **Gateway down.** A refused or timed-out connect (250 ms) answers 503 with `Retry-After: 1`;
//!   a connection broken mid-request 502; no response head within 30 s 504. All with the envelope
//!   `{error, detail, code: "unclassified_error", suggestion}`.
//! - **LAN hardening.** `Host` must be an IP literal, `localhost`, `[system].hostname`,
//!   `<hostname>.local` or a name of `[api].allowed_hosts` ([`host`], the policy the gateway
//!   uses too), else 421 like the gateway (DNS-rebinding defence). No CORS headers are ever
//!   added; the dashboard ships a strict Content-Security-Policy and no inline script.
//! - **Limits.** At most [`ProxyConfig::max_connections`] connections (and half the descriptor
//!   limit: each forwarded request holds a second descriptor), [`ProxyConfig::max_connections_per_peer`]
//!   per client (an IPv6 client: its /64); at the total, idle and unauthenticated connections are
//!   closed first; header, idle and body-rate timeouts ([`svcos_common::connlimit`],
//!   [`svcos_common::httpserve`]). Request bodies other than uploads are read whole before
//!   forwarding ([`forward`]), so slow bodies never hold the gateway connections all clients share.
//! - **Process.** One current-thread runtime; gRPC health on its Unix socket so the supervisor
//!   sees it SERVING once the HTTP port is bound.

pub mod assets;
pub mod envelope;
pub mod forward;
pub mod host;
pub mod server;

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use svcos_common::config::Config;
use svcos_common::entry::{Flavor, ServiceContext, run_service};
use svcos_common::{ServiceName, Shutdown, ipc};
use tokio::net::{TcpListener, UnixListener};

pub use server::serve;

/// The body of every response the proxy sends: its own bytes or the gateway's stream.
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;

/// Everything [`serve`] needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The REST gateway.
    pub upstream: SocketAddr,
    /// `[system].hostname`, accepted in `Host` with and without `.local`.
    pub hostname: String,
    /// `[api].allowed_hosts`: further names accepted in `Host`.
    pub allowed_hosts: Vec<String>,
    /// Give up connecting to the gateway after this long. Default 250 ms.
    pub connect_timeout: Duration,
    /// Give up waiting for the gateway's response head after this long. Default 30 s.
    pub response_timeout: Duration,
    /// Client connections held at once; more get 503 at once. Default 128.
    pub max_connections: usize,
    /// Client connections one address may hold; more get 503 at once
    /// (`[api].max_connections_per_peer`, default 32).
    pub max_connections_per_peer: usize,
    /// Largest request body forwarded, bundle uploads aside (`[api].max_body_bytes`).
    pub max_body_bytes: usize,
    /// The key proving to the gateway that a request came through this proxy
    /// ([`svcos_common::proxykey`]); `None` sends none (the gateway then ignores
    /// `X-Forwarded-For`).
    pub forward_key: Option<String>,
}

impl ProxyConfig {
    /// The proxy's settings from the one config file.
    pub fn from_config(config: &Config) -> Self {
        ProxyConfig {
            upstream: SocketAddr::new(gateway_ip(config.api.bind), config.api.port),
            hostname: config.system.hostname.clone(),
            allowed_hosts: config.api.allowed_hosts.clone(),
            connect_timeout: Duration::from_millis(250),
            response_timeout: Duration::from_secs(30),
            max_connections: 128,
            max_connections_per_peer: config.api.max_connections_per_peer,
            max_body_bytes: config.api.max_body_bytes,
            forward_key: None,
        }
    }
}

/// Where to reach the gateway: loopback when it binds every interface, else its address.
fn gateway_ip(bind: IpAddr) -> IpAddr {
    match bind {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

/// Run the service until `shutdown`: HTTP on `[api].bind:[api].http_port`, gRPC health on
/// `listener`.
pub async fn run(
    ctx: ServiceContext,
    listener: UnixListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut config = ProxyConfig::from_config(&ctx.config);
    config.forward_key = Some(
        svcos_common::proxykey::create(&ctx.layout).context("cannot write the forwarding key")?,
    );
    let addr = SocketAddr::new(ctx.config.api.bind, ctx.config.api.http_port);
    let tcp = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(%addr, upstream = %config.upstream, "serving the dashboard and /api/*");
    let http = server::serve(tcp, config, shutdown.clone());
    let health = async {
        let served = ipc::serve(ipc::no_services(), listener, shutdown.clone()).await;
        // If health stops on its own, stop HTTP too: the supervisor restarts the whole process.
        shutdown.trigger();
        served
    };
    let ((), health) = tokio::join!(http, health);
    health.context("health server failed")?;
    Ok(())
}

/// `svcos proxy`: the process entry.
pub fn entry(args: Vec<OsString>) -> ExitCode {
    let args = match svcos_common::entry::parse_args(ServiceName::Proxy, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    run_service(ServiceName::Proxy, args, Flavor::CurrentThread, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_is_reached_on_loopback_when_bound_everywhere() {
        let table = [
            ("0.0.0.0", "127.0.0.1"),
            ("::", "::1"),
            ("127.0.0.1", "127.0.0.1"),
            ("192.168.1.20", "192.168.1.20"),
        ];
        for (bind, want) in table {
            assert_eq!(
                gateway_ip(bind.parse().unwrap()),
                want.parse::<IpAddr>().unwrap()
            );
        }
    }
}
