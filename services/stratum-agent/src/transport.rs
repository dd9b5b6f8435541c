//! Pool URLs and the byte stream under a Stratum connection: plain TCP or TLS (rustls with the
//! webpki roots, plus an optional extra CA for private pools and tests).

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::borrow::Cow;

use svcos_common::redact::UrlParts;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How a pool is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `stratum+tcp://`.
    Tcp,
    /// `stratum+ssl://` (TLS).
    Tls,
    /// `stratum2+tcp://` (Stratum V2, behind the readiness gate).
    V2,
}

/// A parsed pool URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUrl {
    /// Transport.
    pub scheme: Scheme,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `stratum2+tcp://host:port/<key>`: the pool's authority public key (base58check).
    pub authority_key: Option<String>,
}

/// Why a pool could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not a Stratum URL.
    #[error("bad pool url {0:?}")]
    Url(String),
    /// Stratum V2 URLs need the V2 stack.
    #[error("stratum2 urls are served by the Stratum V2 stack, which is disabled")]
    V2Disabled,
    /// TCP connect failed.
    #[error("connect to {addr}: {source}")]
    Tcp {
        /// host:port.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No answer in time.
    #[error("connect to {0}: timed out")]
    Timeout(String),
    /// The TLS handshake failed (bad certificate, wrong name, not TLS).
    #[error("tls with {addr}: {source}")]
    Tls {
        /// host:port.
        addr: String,
        /// The I/O error wrapping the rustls error.
        source: std::io::Error,
    },
    /// The extra CA file could not be used.
    #[error("ca file {path}: {message}")]
    CaFile {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl PoolUrl {
    /// Parse `stratum+tcp://host:port`, `stratum+ssl://host:port` or `stratum2+tcp://host:port/key`.
    pub fn parse(url: &str) -> Result<Self, ConnectError> {
        let bad = || ConnectError::Url(svcos_common::redact::mask_url_userinfo(url).into_owned());
        let parts = UrlParts::parse(url).map_err(|_| bad())?;
        let scheme = match parts.scheme.as_str() {
            "stratum+tcp" => Scheme::Tcp,
            "stratum+ssl" => Scheme::Tls,
            "stratum2+tcp" => Scheme::V2,
            _ => return Err(bad()),
        };
        // A query or fragment means nothing to a pool: refuse it rather than drop it.
        if parts.has_query_or_fragment {
            return Err(bad());
        }
        // Credentials are never dialled: the host is what follows the userinfo.
        let authority_key = Some(parts.path.trim_matches('/'))
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        let host = parts.host.trim_start_matches('[').trim_end_matches(']');
        let port = parts.port.filter(|p| *p != 0).ok_or_else(bad)?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(PoolUrl {
            scheme,
            host: host.to_string(),
            port,
            authority_key,
        })
    }

    /// The password a login sends: `configured` (the pool's `password`), unless it was left at
    /// its default (`x` or empty) and the URL carries one (`stratum+tcp://user:pw@host:port`).
    /// Some pools print their URLs that way, and an owner who pasted one meant that password;
    /// a password typed into the field says more than one inside a pasted URL, so it wins. A
    /// user name in the URL is never sent: `user` is required and always says who mines.
    pub fn login_password<'a>(url: &str, configured: &'a str) -> Cow<'a, str> {
        if !(configured.is_empty() || configured == "x") {
            return Cow::Borrowed(configured);
        }
        UrlParts::parse(url)
            .ok()
            .and_then(|p| p.password)
            .map_or(Cow::Borrowed(configured), Cow::Owned)
    }

    /// `host:port` for messages and connect.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A connected byte stream (TCP or TLS).
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// A boxed connected stream.
pub type BoxStream = Pin<Box<dyn Stream>>;

/// TLS settings shared by every connection.
#[derive(Clone)]
pub struct Tls(Arc<rustls::ClientConfig>);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// The webpki roots, plus every certificate in `extra_ca_pem` (a PEM file) when given.
    pub fn new(extra_ca_pem: Option<&Path>) -> Result<Self, ConnectError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = extra_ca_pem {
            let err = |message: String| ConnectError::CaFile {
                path: path.display().to_string(),
                message,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| err(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("no certificates".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| err(e.to_string()))?;
            }
        }
        // An explicit provider: the workspace may compile more than one, and picking the
        // process default would then panic.
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::CaFile {
            path: String::new(),
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Tls(Arc::new(config)))
    }
}

/// Connect to a pool within `timeout`.
pub async fn connect(
    url: &PoolUrl,
    tls: &Tls,
    timeout: Duration,
) -> Result<BoxStream, ConnectError> {
    let addr = url.addr();
    let work = async {
        let tcp = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|source| ConnectError::Tcp {
                addr: addr.clone(),
                source,
            })?;
        // Shares are small and latency-bound.
        let _ = tcp.set_nodelay(true);
        match url.scheme {
            Scheme::Tcp => Ok(Box::pin(tcp) as BoxStream),
            Scheme::V2 => Err(ConnectError::V2Disabled),
            Scheme::Tls => {
                let name = ServerName::try_from(url.host.clone())
                    .map_err(|_| ConnectError::Url(url.host.clone()))?;
                let stream = tokio_rustls::TlsConnector::from(tls.0.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|source| ConnectError::Tls {
                        addr: addr.clone(),
                        source,
                    })?;
                Ok(Box::pin(stream) as BoxStream)
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| ConnectError::Timeout(addr.clone()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = PoolUrl::parse("stratum+tcp://pool.example:3333").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str(), u.port),
            (Scheme::Tcp, "pool.example", 3333)
        );
        let u = PoolUrl::parse("stratum+ssl://[::1]:443").unwrap();
        assert_eq!((u.scheme, u.addr()), (Scheme::Tls, "[::1]:443".to_string()));
        let u = PoolUrl::parse(
            "stratum2+tcp://p:34254/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan",
        )
        .unwrap();
        assert_eq!(u.scheme, Scheme::V2);
        assert_eq!(
            u.authority_key.as_deref(),
            Some("9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan")
        );
        // Credentials are not part of the address dialled, nor of an error about the URL.
        let u = PoolUrl::parse("stratum+tcp://rig:pw@pool.example:3333").unwrap();
        assert_eq!(u.addr(), "pool.example:3333");
        let u = PoolUrl::parse("stratum+ssl://rig:p@ss@[::1]:443").unwrap();
        assert_eq!(u.addr(), "[::1]:443");
        let e = PoolUrl::parse("stratum+tcp://rig:hunter2@pool.example").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        for bad in [
            "http://x:1",
            "stratum+tcp://x",
            "stratum+tcp://:1",
            "stratum+tcp://x:0",
            "stratum+tcp://x:99999",
            "stratum+tcp://x:1?a=b",
            "stratum+tcp://x:1#f",
        ] {
            assert!(PoolUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_password_in_the_url_fills_only_a_password_left_at_its_default() {
        let url = "stratum+tcp://rig:s3cret@pool.example:3333";
        assert_eq!(PoolUrl::login_password(url, "x"), "s3cret");
        assert_eq!(PoolUrl::login_password(url, ""), "s3cret");
        assert_eq!(PoolUrl::login_password(url, "typed"), "typed");
        for no_password in [
            "stratum+tcp://pool.example:3333",
            "stratum+tcp://rig@pool.example:3333",
            "stratum+tcp://rig:@pool.example:3333",
            "stratum2+tcp://pool.example:3333/9bDuixKmZqAJnrmP746n8zU1wyAQRrus7th9dxnkPg6RzQvCnan",
        ] {
            assert_eq!(
                PoolUrl::login_password(no_password, "x"),
                "x",
                "{no_password}"
            );
        }
        // The last '@' ends the userinfo, as in the address dialled.
        assert_eq!(
            PoolUrl::login_password("stratum+tcp://rig:p@ss@pool.example:3333", "x"),
            "p@ss"
        );
    }
}
