//! The spec's error envelope `{error, detail?, code?, suggestion?}` for the answers the proxy
//! gives itself (unknown paths, bad Host, gateway down), and the one mapping from
//! [`ProxyRefusal`] to an HTTP status.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde::Serialize;

use crate::ProxyBody;

/// The envelope; empty members are omitted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Envelope {
    /// Human-readable message (always present).
    pub error: String,
    /// More context.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub detail: String,
    /// Machine-readable code (one of the spec's).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub code: String,
    /// What the client could do.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub suggestion: String,
}

/// The spec's code for a failure with no more specific code.
pub const UNCLASSIFIED: &str = "unclassified_error";

/// Why the proxy answered a request itself instead of forwarding it.
#[derive(Debug, thiserror::Error)]
pub enum ProxyRefusal {
    /// `Host` is not this miner's address or name (DNS-rebinding defence).
    #[error("unexpected Host header")]
    BadHost,
    /// No `Host` header at all.
    #[error("missing Host header")]
    MissingHost,
    /// More than one `Host` header: the check would see one and the gateway might read another.
    #[error("more than one Host header")]
    DuplicateHost,
    /// Not `/`, `/static/*` or `/api/*`.
    #[error("not found")]
    NotFound,
    /// A method other than GET/HEAD on the dashboard.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// Nothing listens on the gateway's port (restarting or not started yet).
    #[error("REST gateway unavailable")]
    GatewayDown,
    /// The gateway connection failed mid-request or the gateway broke the protocol.
    #[error("REST gateway failed")]
    GatewayFailed,
    /// The gateway took longer than the response timeout to answer.
    #[error("REST gateway did not answer in time")]
    GatewayTimeout,
    /// A request body (not an upload) over `[api].max_body_bytes`.
    #[error("request body too large")]
    TooLarge,
    /// A request body arriving slower than the minimum rate.
    #[error("request body too slow")]
    BodyTooSlow,
    /// The client broke off its request body.
    #[error("request body could not be read")]
    BodyUnreadable,
}

impl ProxyRefusal {
    /// The HTTP status, envelope and extra headers of this refusal.
    pub fn to_response(&self) -> Response<ProxyBody> {
        let (status, detail, suggestion) = match self {
            ProxyRefusal::BadHost => (
                StatusCode::MISDIRECTED_REQUEST,
                svcos_common::hostcheck::REFUSED_DETAIL,
                "open the miner by its IP address, or add the name to [api].allowed_hosts",
            ),
            ProxyRefusal::MissingHost => (
                StatusCode::BAD_REQUEST,
                "HTTP/1.1 requests must carry a Host header",
                "",
            ),
            ProxyRefusal::DuplicateHost => (
                StatusCode::BAD_REQUEST,
                "a request names exactly one host (RFC 9112 section 3.2)",
                "send one Host header",
            ),
            ProxyRefusal::NotFound => (
                StatusCode::NOT_FOUND,
                "port 80 serves the dashboard at / and /static/*, and the API at /api/*",
                "",
            ),
            ProxyRefusal::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "the dashboard is read with GET or HEAD",
                "",
            ),
            ProxyRefusal::GatewayDown => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the REST gateway is not accepting connections; it may be restarting",
                "retry in a moment",
            ),
            ProxyRefusal::GatewayFailed => (
                StatusCode::BAD_GATEWAY,
                "the connection to the REST gateway failed before a complete answer",
                "retry in a moment",
            ),
            ProxyRefusal::GatewayTimeout => (
                StatusCode::GATEWAY_TIMEOUT,
                "the REST gateway accepted the request but did not answer",
                "retry in a moment",
            ),
            ProxyRefusal::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request bodies are limited to [api].max_body_bytes (default 1 MiB); firmware bundles go to /api/system/upgrade",
                "send a smaller body",
            ),
            ProxyRefusal::BodyTooSlow => (
                StatusCode::REQUEST_TIMEOUT,
                "every 10 s of a request body must bring 10 KiB or its end",
                "retry over a better connection",
            ),
            ProxyRefusal::BodyUnreadable => (
                StatusCode::BAD_REQUEST,
                "the connection ended or failed before the whole request body arrived",
                "retry",
            ),
        };
        let mut response = envelope_response(
            status,
            &Envelope {
                error: self.to_string(),
                detail: detail.into(),
                code: UNCLASSIFIED.into(),
                suggestion: suggestion.into(),
            },
        );
        let headers = response.headers_mut();
        match self {
            ProxyRefusal::GatewayDown => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ProxyRefusal::MethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            }
            _ => {}
        }
        response
    }
}

/// A JSON envelope response.
pub fn envelope_response(status: StatusCode, envelope: &Envelope) -> Response<ProxyBody> {
    let body = serde_json::to_vec(envelope).expect("envelope serialises");
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A complete in-memory body.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_members_are_omitted() {
        let e = Envelope {
            error: "x".into(),
            code: UNCLASSIFIED.into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"error":"x","code":"unclassified_error"}"#
        );
    }

    #[test]
    fn refusal_statuses() {
        let table = [
            (ProxyRefusal::BadHost, 421),
            (ProxyRefusal::MissingHost, 400),
            (ProxyRefusal::DuplicateHost, 400),
            (ProxyRefusal::NotFound, 404),
            (ProxyRefusal::MethodNotAllowed, 405),
            (ProxyRefusal::GatewayDown, 503),
            (ProxyRefusal::GatewayFailed, 502),
            (ProxyRefusal::GatewayTimeout, 504),
            (ProxyRefusal::TooLarge, 413),
            (ProxyRefusal::BodyTooSlow, 408),
            (ProxyRefusal::BodyUnreadable, 400),
        ];
        for (refusal, status) in table {
            let r = refusal.to_response();
            assert_eq!(r.status().as_u16(), status, "{refusal:?}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        }
    }
}
