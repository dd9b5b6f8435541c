//! The dashboard, embedded in the binary so the image needs no asset directory and the files
//! can never disagree with the code serving them.
//!
//! `build.rs` turns `www/` into [`ASSETS`]: `index.html` at `/` (revalidated on every load:
//! `no-cache` + ETag), every other file under a content-hashed name below `/static/` (cached
//! for a year, `immutable`), each with gzip and brotli variants made at build time. The variant
//! is chosen from `Accept-Encoding` (brotli, then gzip, then the plain bytes) and every answer
//! says `Vary: Accept-Encoding` so shared caches keep them apart.
//!
//! The plain bytes of a file that gzip shrinks are not embedded: a client that accepts neither
//! coding (curl without `--compressed`, a script) gets the gzip variant inflated per request.
//! Browsers always take brotli or gzip, and the image is ~150 KB smaller (docs/PERFORMANCE.md).

use std::borrow::Cow;
use std::io::Read as _;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Response, StatusCode};

use crate::ProxyBody;
use crate::envelope::{ProxyRefusal, full};

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The URL path it is served at (content-hashed except `/`).
    pub path: &'static str,
    /// Its MIME type.
    pub content_type: &'static str,
    /// Whether the name carries the content hash (then it is cached for a year).
    pub immutable: bool,
    /// A strong validator of the plain bytes: `"<16 hex of SHA-256>"`.
    pub etag: &'static str,
    /// The plain bytes, embedded only when there is no gzip variant ([`Asset::identity`]).
    pub plain: Option<&'static [u8]>,
    /// Length of the plain bytes.
    pub plain_len: usize,
    /// gzip variant, when smaller than the plain bytes.
    pub gzip: Option<&'static [u8]>,
    /// brotli variant, when smaller than the plain bytes.
    pub brotli: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/assets_table.rs"));

impl Asset {
    /// The plain bytes: embedded, or the gzip variant inflated (build.rs keeps one of the two).
    pub fn identity(&self) -> Cow<'static, [u8]> {
        if let Some(plain) = self.plain {
            return Cow::Borrowed(plain);
        }
        let gz = self
            .gzip
            .expect("build.rs embeds the plain bytes when there is no gzip");
        let mut out = Vec::with_capacity(self.plain_len);
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .expect("build.rs made this gzip stream");
        Cow::Owned(out)
    }
}

/// A content coding the proxy can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// `br`.
    Brotli,
    /// `gzip`.
    Gzip,
    /// No content coding.
    Identity,
}

impl Coding {
    fn token(self) -> &'static str {
        match self {
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
            Coding::Identity => "identity",
        }
    }
}

/// The page may load only its own scripts and styles and talk only to its own origin; no
/// inline script, no framing (clickjacking), no plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Hashed names never change content, so a year without revalidation is safe.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Look an asset up by request path.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// The `index.html` entry (always present).
pub fn index() -> &'static Asset {
    find("/").expect("build.rs always emits index.html at /")
}

/// Whether `Accept-Encoding` allows `coding` (RFC 9110 §12.5.3: an explicit entry wins over
/// `*`; `q=0` refuses).
fn accepts(accept_encoding: &str, coding: &str) -> bool {
    let mut star = None;
    for entry in accept_encoding.split(',') {
        let mut parts = entry.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if name.eq_ignore_ascii_case(coding) {
            return q > 0.0;
        }
        if name == "*" {
            star = Some(q > 0.0);
        }
    }
    star.unwrap_or(false)
}

/// The best variant of `asset` for this `Accept-Encoding`.
pub fn choose(asset: &Asset, accept_encoding: Option<&str>) -> (Coding, Cow<'static, [u8]>) {
    let ae = accept_encoding.unwrap_or("");
    if let Some(br) = asset.brotli.filter(|_| accepts(ae, "br")) {
        return (Coding::Brotli, Cow::Borrowed(br));
    }
    if let Some(gz) = asset.gzip.filter(|_| accepts(ae, "gzip")) {
        return (Coding::Gzip, Cow::Borrowed(gz));
    }
    (Coding::Identity, asset.identity())
}

/// The ETag of one variant: each representation needs its own strong validator.
fn variant_etag(asset: &Asset, coding: Coding) -> String {
    match coding {
        Coding::Identity => asset.etag.to_string(),
        c => format!("{}-{}\"", asset.etag.trim_end_matches('"'), c.token()),
    }
}

/// Serve an asset for GET/HEAD: content negotiation, `If-None-Match`, cache headers.
pub fn serve(asset: &Asset, method: &Method, request: &HeaderMap) -> Response<ProxyBody> {
    if method != Method::GET && method != Method::HEAD {
        return ProxyRefusal::MethodNotAllowed.to_response();
    }
    let accept_encoding = request
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let (coding, body) = choose(asset, accept_encoding);
    let body_len = body.len();
    let etag = variant_etag(asset, coding);
    let not_modified = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .map(|t| t.trim().trim_start_matches("W/"))
                .any(|t| t == etag || t == "*")
        });
    let mut response = if not_modified {
        let mut r = Response::new(full(&b""[..]));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if method == Method::HEAD {
        Response::new(full(&b""[..]))
    } else {
        Response::new(full(match body {
            Cow::Borrowed(b) => bytes::Bytes::from_static(b),
            Cow::Owned(v) => bytes::Bytes::from(v),
        }))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if !not_modified {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
        if coding != Coding::Identity {
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(coding.token()),
            );
        }
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if asset.immutable {
            IMMUTABLE
        } else {
            // Revalidate every time: cheap with the ETag, and a firmware update shows at once.
            "no-cache"
        }),
    );
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

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn every_variant_decodes_to_the_plain_bytes() {
        for a in ASSETS {
            let identity = a.identity();
            assert!(!identity.is_empty(), "{}", a.path);
            assert_eq!(identity.len(), a.plain_len, "{}", a.path);
            assert!(a.plain.is_some() != a.gzip.is_some(), "{}", a.path);
            if let Some(gz) = a.gzip {
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(gz)
                    .read_to_end(&mut plain)
                    .unwrap();
                assert_eq!(plain, *identity, "gzip of {}", a.path);
            }
            if let Some(br) = a.brotli {
                let mut plain = Vec::new();
                brotli::Decompressor::new(br, 4096)
                    .read_to_end(&mut plain)
                    .unwrap();
                assert_eq!(plain, *identity, "brotli of {}", a.path);
            }
        }
    }

    #[test]
    fn hashed_names_are_referenced_by_index_and_unique() {
        let index = index().identity();
        let index = std::str::from_utf8(&index).unwrap();
        for a in ASSETS.iter().filter(|a| a.immutable) {
            assert!(a.path.starts_with("/static/"), "{}", a.path);
            assert!(
                index.contains(a.path),
                "index.html does not load {}",
                a.path
            );
        }
        assert!(!index.contains("\"/static/app.js\""));
        let mut etags: Vec<_> = ASSETS.iter().map(|a| a.etag).collect();
        etags.sort_unstable();
        etags.dedup();
        assert_eq!(etags.len(), ASSETS.len());
    }

    #[test]
    fn accept_encoding_negotiation() {
        let table = [
            ("", false, false),
            ("gzip", false, true),
            ("gzip, deflate, br", true, true),
            ("br;q=0, gzip", false, true),
            ("*", true, true),
            ("*;q=0, gzip", false, true),
            ("BR", true, false),
            ("identity", false, false),
        ];
        for (header, br, gz) in table {
            assert_eq!(accepts(header, "br"), br, "{header:?}");
            assert_eq!(accepts(header, "gzip"), gz, "{header:?}");
        }
        let app = ASSETS.iter().find(|a| a.path.contains("/app.")).unwrap();
        assert_eq!(choose(app, Some("gzip, br")).0, Coding::Brotli);
        assert_eq!(choose(app, Some("gzip")).0, Coding::Gzip);
        assert_eq!(choose(app, None).0, Coding::Identity);
    }

    #[test]
    fn cache_headers_and_conditional_get() {
        let index = index();
        let r = serve(index, &Method::GET, &headers(&[("accept-encoding", "br")]));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(r.headers()[header::VARY], "Accept-Encoding");
        let etag = r.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_ne!(etag, index.etag, "variants have their own validator");
        let again = headers(&[("accept-encoding", "br"), ("if-none-match", &etag)]);
        assert_eq!(serve(index, &Method::GET, &again).status(), 304);
        // The brotli validator does not match the plain representation.
        let plain = headers(&[("if-none-match", &etag)]);
        assert_eq!(serve(index, &Method::GET, &plain).status(), 200);

        let app = ASSETS.iter().find(|a| a.path.contains("/app.")).unwrap();
        let r = serve(app, &Method::HEAD, &HeaderMap::new());
        assert_eq!(
            r.headers()[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(
            r.headers()[header::CONTENT_LENGTH],
            app.plain_len.to_string().as_str()
        );
        assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(serve(index, &Method::POST, &HeaderMap::new()).status(), 405);
        assert!(find("/static/../Cargo.toml").is_none());
        assert!(find("/index.html").is_none());
        assert!(find("/static/app.js").is_none());
    }

    #[test]
    fn first_load_is_under_250_kb_compressed() {
        let total: usize = ASSETS
            .iter()
            .map(|a| choose(a, Some("gzip, deflate, br")).1.len())
            .sum();
        assert!(total < 250 * 1024, "first load {total} bytes");
    }
}
