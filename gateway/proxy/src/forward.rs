//! Forwarding `/api/*` to the REST gateway on loopback over pooled keep-alive connections.
//!
//! Method, path, query, body and end-to-end headers pass unchanged — `Authorization` included;
//! the proxy adds no credentials. Hop-by-hop headers (RFC 9110 §7.6.1) are dropped in both
//! directions. Responses stream through frame by frame; so do bundle uploads
//! ([`svcos_common::httpserve::UPLOAD_PATHS`]). Every other request body is read whole first
//! (at most `[api].max_body_bytes`, else 413; at [`svcos_common::httpserve::MIN_BODY_RATE`],
//! else 408), so a client trickling a body holds one of its own slots here, never a gateway
//! connection that all port-80 clients share.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use svcos_common::httpserve::{self, MinRate, UPLOAD_PATHS};
use tokio::sync::oneshot;

use crate::ProxyBody;
use crate::envelope::ProxyRefusal;

/// `X-Forwarded-For`, set to the client's address.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The header carrying the proxy's key ([`svcos_common::proxykey::HEADER`]).
pub const PROXY_KEY: HeaderName = HeaderName::from_static(svcos_common::proxykey::HEADER);

/// Headers that describe one connection, not the message, and must not be forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Idle pooled connections kept to the gateway.
const POOL_IDLE: usize = 8;
/// How long an idle pooled connection is kept: shorter than the gateway's header and idle
/// timeouts, so the proxy drops a pooled connection before the gateway closes it under a request.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of a refused (too large) body is read and thrown away, so that the client, still
/// sending, reads the 413 instead of a reset connection.
const DISCARD_MAX: usize = 16 << 20;
/// How long discarding a refused body may take.
const DISCARD_TIMEOUT: Duration = Duration::from_secs(10);

/// A request body on its way to the gateway: read whole, or an upload streamed through.
type UpBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Sends requests to the gateway.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: Client<HttpConnector, UpBody>,
    authority: Authority,
    response_timeout: Duration,
    forward_key: Option<HeaderValue>,
    max_body: usize,
}

impl Forwarder {
    /// Forward to `upstream`, giving up on connecting after `connect_timeout` and on the
    /// response head after `response_timeout`; bodies other than uploads up to `max_body` bytes.
    pub fn new(
        upstream: SocketAddr,
        connect_timeout: Duration,
        response_timeout: Duration,
        forward_key: Option<&str>,
        max_body: usize,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(POOL_IDLE)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Forwarder {
            client,
            authority: upstream
                .to_string()
                .parse()
                .expect("a socket address is an authority"),
            response_timeout,
            forward_key: forward_key.and_then(|k| HeaderValue::from_str(k).ok()),
            max_body,
        }
    }

    /// Forward one request from `client_ip`; answer with the gateway's response, streamed, or
    /// with an envelope when the gateway cannot be reached.
    pub async fn forward(
        &self,
        request: Request<Incoming>,
        client_ip: IpAddr,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = request.into_parts();
        let mut body_sent = None;
        let body = if UPLOAD_PATHS.contains(&parts.uri.path()) {
            // Streamed: a slow but live upload is bounded by its minimum rate, a stalled one
            // is dropped by it (and frees the gateway's upload slot), and the response clock
            // starts only once the last byte is on its way.
            let (done, sent) = oneshot::channel();
            body_sent = Some(sent);
            SentSignal {
                inner: MinRate::new(body).boxed_unsync(),
                done: Some(done),
            }
            .boxed_unsync()
        } else {
            match self.read_whole(&parts.headers, body).await {
                Ok(bytes) => Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
                Err(refusal) => return refusal.to_response(),
            }
        };
        let path_and_query = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        parts.uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .expect("scheme, authority and path make a URI");
        // The client may have spoken HTTP/1.0; the gateway connection is HTTP/1.1.
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        // The proxy's own server already answered any `Expect: 100-continue` when it started
        // reading the body; the gateway must not answer it a second time.
        parts.headers.remove(header::EXPECT);
        // Replaced, not appended: the gateway rate-limits setup per client address and takes
        // this header from a loopback peer, so a client must not be able to choose it.
        parts.headers.insert(X_FORWARDED_FOR, ip_header(client_ip));
        // Never a client's own value: only this proxy may vouch for X-Forwarded-For.
        match &self.forward_key {
            Some(key) => parts.headers.insert(PROXY_KEY, key.clone()),
            None => parts.headers.remove(PROXY_KEY),
        };

        let sent = self.client.request(Request::from_parts(parts, body));
        let answered = match body_sent {
            None => tokio::time::timeout(self.response_timeout, sent).await,
            Some(body_sent) => {
                tokio::pin!(sent);
                tokio::select! {
                    r = &mut sent => Ok(r),
                    // Sent in full, or dropped (the request failed; `sent` says how).
                    _ = body_sent => tokio::time::timeout(UPLOAD_ANSWER_TIMEOUT, sent).await,
                }
            }
        };
        let response = match answered {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                let refusal = if e.is_connect() {
                    ProxyRefusal::GatewayDown
                } else {
                    ProxyRefusal::GatewayFailed
                };
                tracing::warn!(error = %e, status = %refusal, "gateway request failed");
                return refusal.to_response();
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.response_timeout.as_millis() as u64,
                    "gateway did not answer"
                );
                return ProxyRefusal::GatewayTimeout.to_response();
            }
        };
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Response::from_parts(parts, body.boxed_unsync())
    }
}

impl Forwarder {
    /// Read a body that is not an upload in full, within the size limit and the minimum rate.
    async fn read_whole(&self, headers: &HeaderMap, body: Incoming) -> Result<Bytes, ProxyRefusal> {
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body as u64) {
            // A client that waits for `100 Continue` sends nothing more; the others are sending.
            if !headers.contains_key(header::EXPECT) {
                discard(body);
            }
            return Err(ProxyRefusal::TooLarge);
        }
        match Limited::new(MinRate::new(body), self.max_body)
            .collect()
            .await
        {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<LengthLimitError>() => Err(ProxyRefusal::TooLarge),
            Err(e) if httpserve::is_too_slow(&*e) => Err(ProxyRefusal::BodyTooSlow),
            Err(e) => {
                tracing::debug!(error = %e, "request body could not be read");
                Err(ProxyRefusal::BodyUnreadable)
            }
        }
    }
}

/// How long the gateway may take to answer once an upload's last byte was sent: it checks the
/// bundle's signature and writes the inactive slot before it answers (minutes on a slow SD card).
const UPLOAD_ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// Read a refused body to its end in the background (bounded in size, rate and time).
fn discard(body: Incoming) {
    tokio::spawn(async move {
        let all = Limited::new(MinRate::new(body), DISCARD_MAX).collect();
        let _ = tokio::time::timeout(DISCARD_TIMEOUT, all).await;
    });
}

/// A request body that says when it has been sent to its end (or dropped before it).
struct SentSignal {
    inner: UpBody,
    done: Option<oneshot::Sender<()>>,
}

impl hyper::body::Body for SentSignal {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = frame
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

fn ip_header(ip: IpAddr) -> HeaderValue {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    HeaderValue::from_str(&ip.to_string()).expect("an address is a valid header value")
}

/// Remove hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        // Never let a client make the proxy drop the credentials it must forward unchanged.
        if name != header::AUTHORIZATION {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    // An upgrade is a hop-by-hop negotiation; /ws is served on the API port directly.
    headers.remove(header::UPGRADE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_end_to_end_ones_stay() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private, authorization"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        strip_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["authorization", "content-type"]);
    }

    #[test]
    fn mapped_v6_client_is_reported_as_v4() {
        let ip: IpAddr = "::ffff:192.168.1.9".parse().unwrap();
        assert_eq!(ip_header(ip), "192.168.1.9");
        let ip: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_header(ip), "fe80::1");
    }
}
