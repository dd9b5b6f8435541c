//! A minimal HTTP/1.1 client for the upstreams (JSON-RPC, Esplora, price, catalogue feed):
//! one request per connection, http or https (rustls with the webpki roots), credentials from
//! the URL's userinfo as Basic auth, a deadline on the whole exchange and a cap on the body.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

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
    /// Parse `http(s)://[user[:pass]@]host[:port][/path]`.
    pub fn parse(s: &str) -> Result<Url, FetchError> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(FetchError::Url(
                "only http:// and https:// are supported".into(),
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (
                Some(
                    crate::query::percent_decode(u)
                        .ok_or_else(|| FetchError::Url("bad userinfo".into()))?,
                ),
                h,
            ),
            None => (None, authority),
        };
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| FetchError::Url("unclosed [".into()))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| FetchError::Url("bad port".into()))?,
                None => default_port,
            };
            (h.to_string(), port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| FetchError::Url("bad port".into()))?,
                ),
                None => (hostport.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(FetchError::Url("no host".into()));
        }
        Ok(Url {
            tls,
            host,
            port,
            path: path.to_string(),
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

fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            Arc::new(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default protocol versions")
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )
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

async fn fetch_inner(url: &Url, body: Option<Vec<u8>>) -> Result<Bytes, FetchError> {
    let host = url.host_port();
    let io_err = |e: &dyn std::fmt::Display| FetchError::Io {
        host: host.clone(),
        message: e.to_string(),
    };
    let tcp = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| io_err(&e))?;
    let _ = tcp.set_nodelay(true);
    let method = if body.is_some() { "POST" } else { "GET" };
    let mut req = http::Request::builder()
        .method(method)
        .uri(url.path.as_str())
        .header(http::header::HOST, host.as_str())
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
        .map_err(|e| io_err(&e))?;
    let resp = if url.tls {
        let name =
            rustls::pki_types::ServerName::try_from(url.host.clone()).map_err(|e| io_err(&e))?;
        let stream = tokio_rustls::TlsConnector::from(tls_config())
            .connect(name, tcp)
            .await
            .map_err(|e| io_err(&e))?;
        send(TokioIo::new(stream), req)
            .await
            .map_err(|e| io_err(&e))?
    } else {
        send(TokioIo::new(tcp), req).await.map_err(|e| io_err(&e))?
    };
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| io_err(&e))?
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

async fn send<T>(
    io: TokioIo<T>,
    req: http::Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await
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
    }
}
