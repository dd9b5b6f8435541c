//! The dashboard, embedded in the binary so the image needs no asset directory and the files
//! can never disagree with the code serving them.

use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};

use crate::ProxyBody;
use crate::envelope::{ProxyRefusal, full};

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The URL path it is served at.
    pub path: &'static str,
    /// Its MIME type.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
    /// A strong validator: FNV-1a of the bytes, computed at compile time.
    pub etag: &'static str,
}

/// FNV-1a, 64 bit: enough to tell two versions of a file apart for caching.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `"<16 hex digits>"` at compile time.
const fn etag_bytes(bytes: &[u8]) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = fnv1a(bytes);
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($path:literal, $file:literal, $type:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/www/", $file));
        const ETAG: [u8; 18] = etag_bytes(BODY);
        Asset {
            path: $path,
            content_type: $type,
            body: BODY,
            etag: match std::str::from_utf8(&ETAG) {
                Ok(s) => s,
                Err(_) => panic!("etag is ASCII"),
            },
        }
    }};
}

/// Every file the proxy serves itself.
pub const ASSETS: &[Asset] = &[
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!("/static/app.js", "app.js", "text/javascript; charset=utf-8"),
    asset!("/static/style.css", "style.css", "text/css; charset=utf-8"),
    asset!("/static/favicon.svg", "favicon.svg", "image/svg+xml"),
];

/// The page may load only its own scripts and styles and talk only to its own origin; no
/// inline script, no framing (clickjacking), no plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Look an asset up by request path.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// Serve an asset for GET/HEAD, honouring `If-None-Match`.
pub fn serve(
    asset: &Asset,
    method: &Method,
    if_none_match: Option<&HeaderValue>,
) -> Response<ProxyBody> {
    if method != Method::GET && method != Method::HEAD {
        return ProxyRefusal::MethodNotAllowed.to_response();
    }
    let not_modified = if_none_match
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    let mut response = if not_modified {
        let mut r = Response::new(full(&b""[..]));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if method == Method::HEAD {
        Response::new(full(&b""[..]))
    } else {
        Response::new(full(asset.body))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if method == Method::HEAD && !not_modified {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.body.len()));
    }
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    // Revalidate every time: cheap with the ETag, and a firmware update shows at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_differ_and_are_quoted_hex() {
        for a in ASSETS {
            assert_eq!(a.etag.len(), 18);
            assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
            assert!(!a.body.is_empty(), "{}", a.path);
        }
        assert_ne!(ASSETS[0].etag, ASSETS[1].etag);
    }

    #[test]
    fn conditional_get_and_head() {
        let index = find("/").unwrap();
        let etag = HeaderValue::from_static(index.etag);
        assert_eq!(serve(index, &Method::GET, Some(&etag)).status(), 304);
        assert_eq!(serve(index, &Method::GET, None).status(), 200);
        let head = serve(index, &Method::HEAD, None);
        assert_eq!(
            head.headers()[header::CONTENT_LENGTH],
            index.body.len().to_string().as_str()
        );
        assert_eq!(serve(index, &Method::POST, None).status(), 405);
        assert!(find("/static/../Cargo.toml").is_none());
        assert!(find("/index.html").is_none());
    }
}
