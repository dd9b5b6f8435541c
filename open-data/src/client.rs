//! The HTTP/1.1 client of the upstreams (JSON-RPC, Esplora, price, catalogue feed): hyper-util's
//! client with hyper-rustls (rustls, ring, the webpki roots), URLs read by the `url` crate; one
//! request per connection, credentials from the URL's userinfo as Basic auth, a deadline on the
//! whole exchange and a cap on the body.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Largest upstream body accepted.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// Why a fetch failed (the message never contains the URL's credentials).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL does not parse.
    #[error("bad url: {0}")]
    Url(String),
    /// Connect, TLS or HTTP failure.
    #[error("{host}: {message}")]
    Io {
        /// Host:port.
        host: String,
        /// What failed.
        message: String,
    },
    /// A non-2xx status.
    #[error("{host}: HTTP {status}")]
    Status {
        /// Host:port.
        host: String,
        /// The status.
        status: u16,
        /// The body (for JSON-RPC error objects).
        body: Bytes,
    },
    /// The deadline passed.
    #[error("{0}: timed out")]
    Timeout(String),
}

/// A parsed http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// https?
    pub tls: bool,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path and query, starting with '/'.
    pub path: String,
    /// `user:password` from the userinfo, percent-decoded.
    pub userinfo: Option<String>,
}

impl Url {
    /// Parse `http(s)://[user[:pass]@]host[:port][/path][?query]` (the `url` crate; a fragment
    /// is dropped, as it never goes to a server).
    pub fn parse(s: &str) -> Result<Url, FetchError> {
        let parsed = url::Url::parse(s).map_err(|e| FetchError::Url(e.to_string()))?;
        let tls = match parsed.scheme() {
            "https" => true,
            "http" => false,
            _ => {
                return Err(FetchError::Url(
                    "only http:// and https:// are supported".into(),
                ));
            }
        };
        let host = match parsed.host() {
            Some(url::Host::Ipv6(v6)) => v6.to_string(),
            Some(host) => host.to_string(),
            None => return Err(FetchError::Url("no host".into())),
        };
        let decode = |part: &str| {
            percent_encoding::percent_decode_str(part)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| FetchError::Url("bad userinfo".into()))
        };
        let userinfo = match (parsed.username(), parsed.password()) {
            ("", None) => None,
            (user, None) => Some(decode(user)?),
            (user, Some(pass)) => Some(format!("{}:{}", decode(user)?, decode(pass)?)),
        };
        Ok(Url {
            tls,
            host,
            port: parsed
                .port_or_known_default()
                .unwrap_or(if tls { 443 } else { 80 }),
            path: parsed[url::Position::BeforePath..url::Position::AfterQuery].to_string(),
            userinfo,
        })
    }

    /// `host:port` for messages and labels (no credentials).
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The same URL with another path (Esplora endpoints under a base).
    pub fn join(&self, suffix: &str) -> Url {
        let mut u = self.clone();
        let base = u.path.trim_end_matches('/');
        u.path = format!("{base}{suffix}");
        u
    }
}

fn tls_config() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// hyper-util's client over rustls (webpki roots), http and https. It keeps no idle
/// connection: one request per connection, as the upstreams are polled minutes apart, and a
/// pooled connection would outlive the runtime of a test that made it.
fn client() -> HttpsClient {
    static CLIENT: std::sync::OnceLock<HttpsClient> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_nodelay(true);
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls_config())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector)
        })
        .clone()
}

/// GET or POST (when `body` is given, as JSON) and return the body of a 2xx answer.
pub async fn fetch(
    url: &Url,
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Bytes, FetchError> {
    tokio::time::timeout(timeout, fetch_inner(url, body))
        .await
        .map_err(|_| FetchError::Timeout(url.host_port()))?
}

/// The innermost cause of an error: hyper-util's own text ("client error (Connect)") says less
/// than the I/O or TLS error under it.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

async fn fetch_inner(url: &Url, body: Option<Vec<u8>>) -> Result<Bytes, FetchError> {
    let host = url.host_port();
    let io_err = |message: String| FetchError::Io {
        host: host.clone(),
        message,
    };
    let scheme = if url.tls { "https" } else { "http" };
    let method = if body.is_some() { "POST" } else { "GET" };
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("{scheme}://{host}{}", url.path))
        .header(http::header::USER_AGENT, "svcos-open-data/1")
        .header(http::header::ACCEPT, "application/json");
    if let Some(u) = &url.userinfo {
        let token = base64::engine::general_purpose::STANDARD.encode(u.as_bytes());
        req = req.header(http::header::AUTHORIZATION, format!("Basic {token}"));
    }
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| io_err(e.to_string()))?;
    let resp = client()
        .request(req)
        .await
        .map_err(|e| io_err(root_cause(&e)))?;
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| io_err(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(FetchError::Status {
            host,
            status: status.as_u16(),
            body: bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://user:p%40ss@127.0.0.1:8332").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (false, "127.0.0.1", 8332, "/")
        );
        assert_eq!(u.userinfo.as_deref(), Some("user:p@ss"));
        let u = Url::parse("https://blockstream.info/api/").unwrap();
        assert_eq!(
            (u.port, u.join("/blocks/tip/height").path.as_str()),
            (443, "/api/blocks/tip/height")
        );
        let u = Url::parse("http://[::1]:3000/x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.host_port()),
            ("::1", 3000, "[::1]:3000".to_string())
        );
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://:80").is_err());
        assert!(Url::parse("http://h:99999/").is_err());
        let u = Url::parse("https://u%3Ax:p%2Bq@rpc.example/a/b?c=d#frag").unwrap();
        assert_eq!(u.userinfo.as_deref(), Some("u:x:p+q"));
        assert_eq!((u.port, u.path.as_str()), (443, "/a/b?c=d"));
        let u = Url::parse("http://bob@10.0.0.2:8080").unwrap();
        assert_eq!(u.userinfo.as_deref(), Some("bob"));
        assert_eq!(u.host_port(), "10.0.0.2:8080");
    }
}
