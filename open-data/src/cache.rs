//! The response cache: serialized bodies, their strong ETags and compressed variants, computed
//! once per (route, normalized query) and data generation, then served as shared bytes.
//!
//! The data is read-only between refreshes, so a body never changes while its generation is
//! current; a refresh bumps the generation and old entries simply stop matching. The map is
//! bounded: when full it is cleared (entries are cheap to rebuild, and an attacker cycling
//! query values cannot grow memory).

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use bytes::Bytes;
use http::HeaderValue;
use http::StatusCode;
use sha2::{Digest, Sha256};

/// Bodies smaller than this are not compressed (the headers would outweigh the saving).
const MIN_COMPRESS: usize = 256;

/// A content coding the client accepts and we produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// No compression.
    Identity,
    /// gzip.
    Gzip,
    /// Brotli.
    Br,
}

impl Coding {
    /// `Content-Encoding` value (None for identity).
    pub fn header(self) -> Option<&'static str> {
        match self {
            Coding::Identity => None,
            Coding::Gzip => Some("gzip"),
            Coding::Br => Some("br"),
        }
    }
}

/// Pick the coding from an `Accept-Encoding` header: brotli, then gzip, then identity, each
/// only when its q-value (explicit or through `*`) is above zero.
pub fn negotiate(accept: Option<&str>) -> Coding {
    let Some(accept) = accept else {
        return Coding::Identity;
    };
    let mut br = None;
    let mut gzip = None;
    let mut star = None;
    for part in accept.split(',') {
        let mut it = part.split(';');
        let name = it.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in it {
            if let Some(v) = p.trim().strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        match name.as_str() {
            "br" => br = Some(q),
            "gzip" | "x-gzip" => gzip = Some(q),
            "*" => star = Some(q),
            _ => {}
        }
    }
    let ok = |explicit: Option<f32>| explicit.or(star).is_some_and(|q| q > 0.0);
    if ok(br) {
        Coding::Br
    } else if ok(gzip) {
        Coding::Gzip
    } else {
        Coding::Identity
    }
}

/// One cached response.
#[derive(Debug)]
pub struct Entry {
    /// Status (200, or 404 for a cached miss of a single record).
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: HeaderValue,
    /// `Cache-Control`.
    pub cache_control: HeaderValue,
    /// The uncompressed body.
    pub identity: Bytes,
    /// Hex digest prefix the ETags are made from.
    digest: String,
    etag: HeaderValue,
    gzip: OnceLock<Option<(Bytes, HeaderValue)>>,
    br: OnceLock<Option<(Bytes, HeaderValue)>>,
}

impl Entry {
    /// A new entry for `body`.
    pub fn new(
        status: StatusCode,
        content_type: &'static str,
        cache_control: &str,
        body: Bytes,
    ) -> Entry {
        let digest = hex::encode(&Sha256::digest(&body)[..16]);
        Entry {
            status,
            content_type: HeaderValue::from_static(content_type),
            cache_control: HeaderValue::from_str(cache_control)
                .unwrap_or(HeaderValue::from_static("no-cache")),
            etag: HeaderValue::from_str(&format!("\"{digest}\""))
                .unwrap_or(HeaderValue::from_static("\"\"")),
            identity: body,
            digest,
            gzip: OnceLock::new(),
            br: OnceLock::new(),
        }
    }

    /// The body and ETag for a coding (compressed lazily, once).
    pub fn variant(&self, coding: Coding) -> (Bytes, HeaderValue, Coding) {
        let pick = |slot: &OnceLock<Option<(Bytes, HeaderValue)>>,
                    suffix: &str,
                    f: fn(&[u8]) -> Vec<u8>| {
            slot.get_or_init(|| {
                if self.identity.len() < MIN_COMPRESS {
                    return None;
                }
                let z = f(&self.identity);
                (z.len() < self.identity.len()).then(|| {
                    let tag = HeaderValue::from_str(&format!("\"{}-{suffix}\"", self.digest))
                        .unwrap_or(HeaderValue::from_static("\"\""));
                    (Bytes::from(z), tag)
                })
            })
            .clone()
        };
        let got = match coding {
            Coding::Identity => None,
            Coding::Gzip => pick(&self.gzip, "gz", gzip),
            Coding::Br => pick(&self.br, "br", brotli_compress),
        };
        match got {
            Some((b, tag)) => (b, tag, coding),
            None => (self.identity.clone(), self.etag.clone(), Coding::Identity),
        }
    }

    /// Whether an `If-None-Match` value matches any representation of this entry (weak
    /// comparison, as RFC 9110 asks for If-None-Match).
    pub fn matches(&self, if_none_match: &str) -> bool {
        if_none_match.split(',').any(|t| {
            let t = t.trim();
            if t == "*" {
                return true;
            }
            let t = t.strip_prefix("W/").unwrap_or(t).trim_matches('"');
            t == self.digest
                || t.strip_prefix(self.digest.as_str())
                    .is_some_and(|rest| rest == "-gz" || rest == "-br")
        })
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

fn brotli_compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        // Quality 9 of 11: close to the best ratio at a fraction of q11's time, paid once.
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 9, 22);
        let _ = w.write_all(data);
    }
    out
}

/// The bounded (key → entry) map with its data generation.
#[derive(Debug)]
pub struct ResponseCache {
    generation: AtomicU64,
    capacity: usize,
    map: RwLock<HashMap<String, (u64, Arc<Entry>)>>,
}

impl ResponseCache {
    /// An empty cache holding at most `capacity` entries.
    pub fn new(capacity: usize) -> ResponseCache {
        ResponseCache {
            generation: AtomicU64::new(1),
            capacity: capacity.max(16),
            map: RwLock::new(HashMap::new()),
        }
    }

    /// The current data generation (read before rendering, passed to [`Self::insert`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Data changed: every entry rendered before now is outdated.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut m) = self.map.write() {
            m.clear();
        }
    }

    /// A current entry for `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Entry>> {
        let generation = self.generation();
        let m = self.map.read().ok()?;
        m.get(key)
            .filter(|(g, _)| *g == generation)
            .map(|(_, e)| e.clone())
    }

    /// Keep `entry`, rendered from data of `generation`.
    pub fn insert(&self, key: String, generation: u64, entry: Arc<Entry>) {
        if generation != self.generation() {
            return;
        }
        if let Ok(mut m) = self.map.write() {
            if m.len() >= self.capacity && !m.contains_key(&key) {
                m.clear();
            }
            m.insert(key, (generation, entry));
        }
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_table() {
        let cases = [
            (None, Coding::Identity),
            (Some(""), Coding::Identity),
            (Some("gzip"), Coding::Gzip),
            (Some("gzip, deflate, br"), Coding::Br),
            (Some("br;q=0, gzip"), Coding::Gzip),
            (Some("*"), Coding::Br),
            (Some("*;q=0, gzip;q=0.5"), Coding::Gzip),
            (Some("identity"), Coding::Identity),
            (Some("GZIP;q=0"), Coding::Identity),
        ];
        for (h, want) in cases {
            assert_eq!(negotiate(h), want, "{h:?}");
        }
    }

    #[test]
    fn variants_and_etags() {
        let body = Bytes::from(format!("{{\"records\":[{}]}}", "1,".repeat(500) + "1"));
        let e = Entry::new(
            StatusCode::OK,
            "application/json",
            "public, max-age=1",
            body.clone(),
        );
        let (plain, tag, c) = e.variant(Coding::Identity);
        assert_eq!((plain, c), (body.clone(), Coding::Identity));
        let (gz, gtag, c) = e.variant(Coding::Gzip);
        assert_eq!(c, Coding::Gzip);
        assert!(gz.len() < body.len());
        let mut dec = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut dec).unwrap();
        assert_eq!(dec, body);
        let (br, btag, _) = e.variant(Coding::Br);
        let mut dec = Vec::new();
        std::io::Read::read_to_end(&mut brotli::Decompressor::new(&br[..], 4096), &mut dec)
            .unwrap();
        assert_eq!(dec, body);
        assert_ne!(tag, gtag);
        assert_ne!(gtag, btag);
        for t in [&tag, &gtag, &btag] {
            assert!(e.matches(t.to_str().unwrap()));
            assert!(e.matches(&format!("W/{}", t.to_str().unwrap())));
        }
        assert!(e.matches("\"nope\", *"));
        assert!(!e.matches("\"nope\""));
        // Tiny bodies stay identity whatever is asked.
        let small = Entry::new(
            StatusCode::OK,
            "application/json",
            "x",
            Bytes::from_static(b"{}"),
        );
        assert_eq!(small.variant(Coding::Br).2, Coding::Identity);
    }

    #[test]
    fn generations_and_bound() {
        let c = ResponseCache::new(16);
        let e = Arc::new(Entry::new(
            StatusCode::OK,
            "application/json",
            "x",
            Bytes::from_static(b"{}"),
        ));
        let g = c.generation();
        c.insert("a".into(), g, e.clone());
        assert!(c.get("a").is_some());
        c.invalidate();
        assert!(c.get("a").is_none());
        // A render that started before the invalidation is not kept.
        c.insert("b".into(), g, e.clone());
        assert!(c.get("b").is_none());
        let g = c.generation();
        for i in 0..40 {
            c.insert(format!("k{i}"), g, e.clone());
            assert!(c.len() <= 16);
        }
    }
}
