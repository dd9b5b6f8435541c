//! Build the dashboard's asset table from `www/`.
//!
//! - Every file but `index.html` is served under a content-hashed name
//!   (`/static/app.<10 hex of SHA-256>.js`), so it can be cached for a year and a firmware update
//!   can never mix old and new files; `index.html` is rewritten to point at those names.
//! - Each file is precompressed here (gzip level 9, brotli quality 11) so the proxy never
//!   compresses at run time; a variant is kept only when it is smaller.
//! - The vendored libraries must match the SHA-256 recorded in `www/vendor/VENDOR.md`; a
//!   mismatch fails the build.
//!
//! The result is `$OUT_DIR/assets_table.rs`, included by `src/assets.rs`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Files served besides `index.html`: (path under `www/`, MIME type).
const FILES: &[(&str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8"),
    ("style.css", "text/css; charset=utf-8"),
    ("favicon.svg", "image/svg+xml"),
    ("vendor/htm-preact.umd.js", "text/javascript; charset=utf-8"),
    ("vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    ("vendor/uPlot.min.css", "text/css; charset=utf-8"),
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `vendor/uPlot.iife.min.js` + hash → `/static/vendor/uPlot.iife.min.<hash>.js`.
fn hashed_url(rel: &str, hash: &str) -> String {
    let (stem, ext) = rel
        .rsplit_once('.')
        .expect("served files have an extension");
    format!("/static/{stem}.{}.{ext}", &hash[..10])
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn brotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut writer = brotli::CompressorWriter::new(&mut out, 4096, 11, 22);
        writer.write_all(bytes).expect("brotli into memory");
    }
    out
}

/// Check every row of the VENDOR.md table against the file it names.
fn verify_vendor(www: &Path) {
    let record = std::fs::read_to_string(www.join("vendor/VENDOR.md")).expect("vendor/VENDOR.md");
    let mut checked = 0;
    for line in record.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        let (Some(file), Some(sum)) = (cells.first(), cells.last()) else {
            continue;
        };
        if cells.len() < 6 || sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let path = www.join("vendor").join(file);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{} (listed in VENDOR.md): {e}", path.display()));
        let actual = sha256_hex(&bytes);
        assert_eq!(
            actual,
            *sum,
            "{} does not match the SHA-256 recorded in vendor/VENDOR.md",
            path.display()
        );
        checked += 1;
    }
    for (rel, _) in FILES {
        if let Some(name) = rel.strip_prefix("vendor/") {
            assert!(
                record.contains(&format!("| {name} |")),
                "vendor/{name} is served but not recorded in vendor/VENDOR.md"
            );
        }
    }
    assert!(checked > 0, "vendor/VENDOR.md lists no checksums");
}

struct Built {
    url: String,
    content_type: &'static str,
    immutable: bool,
    etag: String,
    /// The plain file, kept only when gzip does not shrink it (else the proxy inflates the gzip
    /// variant for the rare client that accepts neither coding).
    plain: Option<PathBuf>,
    plain_len: usize,
    gzip: Option<PathBuf>,
    brotli: Option<PathBuf>,
}

fn emit(
    out: &Path,
    n: usize,
    url: String,
    ct: &'static str,
    immutable: bool,
    body: &[u8],
) -> Built {
    let write = |suffix: &str, bytes: &[u8]| {
        let p = out.join(format!("asset{n}.{suffix}"));
        std::fs::write(&p, bytes).expect("write into OUT_DIR");
        p
    };
    let gz = gzip(body);
    let br = brotli(body);
    Built {
        url,
        content_type: ct,
        immutable,
        etag: format!("\"{}\"", &sha256_hex(body)[..16]),
        plain: (gz.len() >= body.len()).then(|| write("raw", body)),
        plain_len: body.len(),
        gzip: (gz.len() < body.len()).then(|| write("gz", &gz)),
        brotli: (br.len() < body.len()).then(|| write("br", &br)),
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let www = manifest.join("www");
    println!("cargo:rerun-if-changed=www");
    verify_vendor(&www);

    let mut index = std::fs::read_to_string(www.join("index.html")).expect("www/index.html");
    let mut built = Vec::new();
    for (n, (rel, ct)) in FILES.iter().enumerate() {
        println!("cargo:rerun-if-changed=www/{rel}");
        let body = std::fs::read(www.join(rel)).unwrap_or_else(|e| panic!("www/{rel}: {e}"));
        let url = hashed_url(rel, &sha256_hex(&body));
        let plain = format!("\"/static/{rel}\"");
        assert!(
            index.contains(&plain),
            "index.html does not reference /static/{rel}"
        );
        index = index.replace(&plain, &format!("\"{url}\""));
        built.push(emit(&out, n + 1, url, ct, true, &body));
    }
    for line in index.lines().filter(|l| l.contains("/static/")) {
        assert!(
            built.iter().any(|b| line.contains(&b.url)),
            "index.html references a /static/ file build.rs does not serve: {line}"
        );
    }
    built.insert(
        0,
        emit(
            &out,
            0,
            "/".to_string(),
            "text/html; charset=utf-8",
            false,
            index.as_bytes(),
        ),
    );

    let bytes = |p: &Option<PathBuf>| match p {
        Some(p) => format!("Some(include_bytes!({:?}))", p.display().to_string()),
        None => "None".to_string(),
    };
    let mut table =
        String::from("/// Every file the proxy serves itself (generated by build.rs).\n");
    table.push_str("pub const ASSETS: &[Asset] = &[\n");
    for b in &built {
        let _ = writeln!(
            table,
            "    Asset {{ path: {:?}, content_type: {:?}, immutable: {}, etag: {:?}, \
             plain: {}, plain_len: {}, gzip: {}, brotli: {} }},",
            b.url,
            b.content_type,
            b.immutable,
            b.etag,
            bytes(&b.plain),
            b.plain_len,
            bytes(&b.gzip),
            bytes(&b.brotli),
        );
    }
    table.push_str("];\n");
    std::fs::write(out.join("assets_table.rs"), table).expect("write assets_table.rs");
}
