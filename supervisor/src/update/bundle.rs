//! RAUC bundles, read with the real `rauc` tool: `rauc info --keyring` checks the CMS signature
//! against the keyring and prints the manifest (compatible, version, per-image sha256 and size);
//! `rauc extract` unpacks a verified bundle. Nothing here writes a slot.
//!
//! Signature scheme: RAUC's own. A bundle is a squashfs image followed by a detached CMS
//! signature (DER) and its 64-bit size; the signer's certificate must chain to the keyring
//! (`/etc/rauc/keyring.pem` on the image, `<dir>/rauc/keyring.pem` in the sim).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::process::Command;

/// The `rauc` executable (found on `PATH`).
pub const RAUC: &str = "rauc";

/// One image of a bundle, as the signed manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Slot class it is for (`rootfs`).
    pub slot_class: String,
    /// File name inside the bundle.
    pub filename: String,
    /// Lowercase hex sha256 the manifest promises.
    pub sha256: String,
    /// Size in bytes the manifest promises.
    pub size: u64,
}

/// The verified manifest of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Model string the bundle is for.
    pub compatible: String,
    /// Firmware version it carries.
    pub version: String,
    /// Its images.
    pub images: Vec<Image>,
}

/// Why a bundle is refused. Each variant has a stable code for clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The signer does not chain to the keyring.
    #[error("signature not made by a trusted key: {0}")]
    WrongKey(String),
    /// The content does not match what was signed (the bundle or one of its images).
    #[error("digest mismatch: {0}")]
    BadDigest(String),
    /// Starts like a bundle, but the file ends before the sizes it declares (an upload cut short).
    #[error("the bundle is cut short: {0}")]
    Truncated(String),
    /// Not a RAUC bundle at all: no squashfs image at the start, no plausible signature size at
    /// the end, or no CMS signature where one should be.
    #[error("not a RAUC bundle: {0}")]
    NotABundle(String),
    /// The manifest is for another model.
    #[error("bundle is for {bundle:?}, this unit is {unit:?}")]
    WrongModel {
        /// The bundle's compatible string.
        bundle: String,
        /// This unit's.
        unit: String,
    },
    /// Older than what runs, and not forced.
    #[error(
        "bundle version {bundle} is older than the running {running}; send force=true to downgrade"
    )]
    Downgrade {
        /// The bundle's version.
        bundle: String,
        /// The running version.
        running: String,
    },
    /// The manifest lacks something an install needs.
    #[error("bad manifest: {0}")]
    BadManifest(String),
    /// `rauc` could not be run, or failed for another reason.
    #[error("rauc failed: {0}")]
    Tool(String),
}

impl BundleError {
    /// The stable refusal code.
    pub fn code(&self) -> &'static str {
        match self {
            BundleError::WrongKey(_) => "wrong_key",
            BundleError::BadDigest(_) => "bad_digest",
            BundleError::Truncated(_) => "truncated",
            BundleError::NotABundle(_) => "not_a_bundle",
            BundleError::WrongModel { .. } => "wrong_model",
            BundleError::Downgrade { .. } => "downgrade",
            BundleError::BadManifest(_) => "bad_manifest",
            BundleError::Tool(_) => "verifier_unavailable",
        }
    }

    /// Classify a failed `rauc info`/`extract` by its message.
    pub fn from_rauc(stderr: &str) -> BundleError {
        let msg: String = stderr
            .lines()
            .filter(|l| !l.contains("rauc-Message") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let lower = msg.to_ascii_lowercase();
        if lower.contains("no valid cms") {
            BundleError::NotABundle(format!("no valid CMS signature ({msg})"))
        } else if lower.contains("invalid bundle format")
            || lower.contains("exceeds bundle size")
            || lower.contains("too small")
            || lower.contains("squashfs")
        {
            BundleError::Truncated(msg)
        } else if lower.contains("certificate") || lower.contains("issuer") {
            BundleError::WrongKey(msg)
        } else if lower.contains("verify") || lower.contains("signature") {
            BundleError::BadDigest(msg)
        } else {
            BundleError::Tool(msg)
        }
    }
}

#[derive(Deserialize)]
struct InfoJson {
    compatible: Option<String>,
    version: Option<String>,
    #[serde(default)]
    images: Vec<std::collections::BTreeMap<String, InfoImage>>,
}

#[derive(Deserialize)]
struct InfoImage {
    filename: Option<String>,
    checksum: Option<String>,
    size: Option<u64>,
}

/// Parse `rauc info --output-format=json`.
pub fn parse_info(json: &str) -> Result<Manifest, BundleError> {
    let info: InfoJson = serde_json::from_str(json)
        .map_err(|e| BundleError::BadManifest(format!("rauc info output: {e}")))?;
    let compatible = info
        .compatible
        .filter(|c| !c.is_empty())
        .ok_or_else(|| BundleError::BadManifest("no compatible string".into()))?;
    let version = info
        .version
        .filter(|v| !v.is_empty())
        .ok_or_else(|| BundleError::BadManifest("no version".into()))?;
    let mut images = Vec::new();
    for entry in info.images {
        for (slot_class, img) in entry {
            images.push(Image {
                filename: img.filename.ok_or_else(|| {
                    BundleError::BadManifest(format!("image {slot_class} has no filename"))
                })?,
                sha256: img
                    .checksum
                    .ok_or_else(|| {
                        BundleError::BadManifest(format!("image {slot_class} has no sha256"))
                    })?
                    .to_ascii_lowercase(),
                size: img.size.unwrap_or(0),
                slot_class,
            });
        }
    }
    if images.is_empty() {
        return Err(BundleError::BadManifest("no images".into()));
    }
    Ok(Manifest {
        compatible,
        version,
        images,
    })
}

/// The squashfs superblock's magic, `hsqs` (little-endian 0x73717368).
const SQUASHFS_MAGIC: &[u8; 4] = b"hsqs";
/// Size of the squashfs superblock; `bytes_used` (u64 LE) sits at offset 40.
const SQUASHFS_SUPERBLOCK: u64 = 96;
/// Largest signature RAUC accepts (`MAX_BUNDLE_SIGNATURE_SIZE`, 64 KiB).
const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// Tell a file that is no bundle from one cut short, from its layout alone, before `rauc` reads
/// it. `rauc` reads the trailing 64-bit signature size first, so for random bytes it reports an
/// absurd signature size "exceeding the bundle size", which reads like a truncated upload; an
/// owner told to "upload the complete file" would retry the same wrong file. A bundle is a
/// squashfs image (magic `hsqs`, its own length in the superblock), then a DER CMS signature
/// (a SEQUENCE, first byte 0x30), then the signature's size as a big-endian u64.
pub fn check_layout(bundle: &Path) -> Result<(), BundleError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |e: std::io::Error| BundleError::Tool(format!("{}: {e}", bundle.display()));
    let mut f = std::fs::File::open(bundle).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut head = [0u8; SQUASHFS_SUPERBLOCK as usize];
    let got = f.read(&mut head).map_err(io)?;
    if got < 4 || &head[..4] != SQUASHFS_MAGIC {
        return Err(BundleError::NotABundle(format!(
            "the file ({len} bytes) does not start with a squashfs image"
        )));
    }
    if len < SQUASHFS_SUPERBLOCK + 8 {
        return Err(BundleError::Truncated(format!(
            "the file ends after {len} bytes, inside the squashfs header"
        )));
    }
    let image_len = u64::from_le_bytes(head[40..48].try_into().unwrap_or_default());
    // A file that ends where mksquashfs ends its output (the image, padded to 4 KiB or not) is a
    // bare squashfs that was never signed; an upload stopping exactly there is far less likely
    // than someone picking the unsigned image.
    // `checked_`: the length comes from the upload's own header and may be anything.
    if len == image_len || image_len.checked_next_multiple_of(4096) == Some(len) {
        return Err(BundleError::NotABundle(format!(
            "the file is a bare squashfs image ({image_len} bytes) with no signature; an update \
             is a signed RAUC bundle (`rauc bundle`)"
        )));
    }
    if len < image_len.saturating_add(8) {
        return Err(BundleError::Truncated(format!(
            "the file ends after {len} bytes, but its squashfs image alone is {image_len} bytes"
        )));
    }
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8)).map_err(io)?;
    f.read_exact(&mut tail).map_err(io)?;
    let sig_len = u64::from_be_bytes(tail);
    let room = len - 8 - image_len;
    if sig_len == 0 || sig_len > MAX_SIGNATURE_BYTES || sig_len > room {
        // The image is whole, so what is missing is the signature after it: the upload stopped
        // inside it.
        return Err(BundleError::Truncated(format!(
            "the squashfs image is complete ({image_len} bytes) but the signature after it is \
             missing or cut short (the file is {len} bytes)"
        )));
    }
    let mut first = [0u8; 1];
    f.seek(SeekFrom::Start(len - 8 - sig_len)).map_err(io)?;
    f.read_exact(&mut first).map_err(io)?;
    if first[0] != 0x30 {
        return Err(BundleError::NotABundle(format!(
            "no CMS signature where the trailer says one starts ({sig_len} bytes before it)"
        )));
    }
    Ok(())
}

/// Verify the signature of `bundle` against `keyring` and read its manifest.
pub async fn inspect(bundle: &Path, keyring: &Path) -> Result<Manifest, BundleError> {
    check_layout(bundle)?;
    let out = Command::new(RAUC)
        .arg("info")
        .arg(format!("--keyring={}", keyring.display()))
        .arg("--output-format=json")
        .arg(bundle)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| BundleError::Tool(format!("cannot run {RAUC}: {e}")))?;
    if !out.status.success() {
        return Err(BundleError::from_rauc(&String::from_utf8_lossy(
            &out.stderr,
        )));
    }
    parse_info(&String::from_utf8_lossy(&out.stdout))
}

/// Verify and unpack `bundle` into `into` (which must not exist yet).
pub async fn extract(bundle: &Path, keyring: &Path, into: &Path) -> Result<(), BundleError> {
    let out = Command::new(RAUC)
        .arg("extract")
        .arg(format!("--keyring={}", keyring.display()))
        .arg(bundle)
        .arg(into)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| BundleError::Tool(format!("cannot run {RAUC}: {e}")))?;
    if !out.status.success() {
        return Err(BundleError::from_rauc(&String::from_utf8_lossy(
            &out.stderr,
        )));
    }
    Ok(())
}

/// sha256 and size of a file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<(String, u64)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), total))
}

/// Check every extracted image against the signed manifest.
pub fn check_images(manifest: &Manifest, dir: &Path) -> Result<Vec<(Image, PathBuf)>, BundleError> {
    let mut out = Vec::new();
    for img in &manifest.images {
        if img.filename.contains('/') || img.filename.starts_with('.') {
            return Err(BundleError::BadManifest(format!(
                "image file name {:?} leaves the bundle",
                img.filename
            )));
        }
        let path = dir.join(&img.filename);
        let (sha, size) = sha256_file(&path).map_err(|e| {
            BundleError::BadManifest(format!("image {} missing from bundle: {e}", img.filename))
        })?;
        if sha != img.sha256 || (img.size != 0 && size != img.size) {
            return Err(BundleError::BadDigest(format!(
                "image {} hashes to {sha} ({size} bytes), the manifest says {} ({} bytes)",
                img.filename, img.sha256, img.size
            )));
        }
        out.push((img.clone(), path));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rauc_info_json() {
        let json = r#"{"compatible":"svcos-s9","version":"0.2.0","description":null,"build":null,"hooks":[],"images":[{"rootfs":{"variant":null,"filename":"svcos","checksum":"ABCDEF","size":10000,"hooks":[],"adaptive":[]}}]}"#;
        let m = parse_info(json).unwrap();
        assert_eq!(m.compatible, "svcos-s9");
        assert_eq!(m.version, "0.2.0");
        assert_eq!(
            m.images,
            vec![Image {
                slot_class: "rootfs".into(),
                filename: "svcos".into(),
                sha256: "abcdef".into(),
                size: 10000
            }]
        );
        assert!(matches!(
            parse_info(r#"{"compatible":"x","images":[]}"#),
            Err(BundleError::BadManifest(_))
        ));
    }

    #[test]
    fn classifies_rauc_errors() {
        for (stderr, code) in [
            (
                "signature verification failed: Verify error: self-signed certificate",
                "wrong_key",
            ),
            (
                "signature verification failed: Verify error: unable to get local issuer certificate",
                "wrong_key",
            ),
            (
                "signature verification failed: error:1700009E:CMS routines::verification failure\nCMS_verify:content verify error",
                "bad_digest",
            ),
            (
                "Invalid bundle format: Signature size (123) exceeds bundle size",
                "truncated",
            ),
            (
                "Invalid bundle format: Failed to seek to end of bundle",
                "truncated",
            ),
            (
                "Invalid bundle format: Signature data is no valid CMS",
                "not_a_bundle",
            ),
            ("something else entirely", "verifier_unavailable"),
        ] {
            assert_eq!(BundleError::from_rauc(stderr).code(), code, "{stderr}");
        }
    }

    #[test]
    fn image_digest_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("svcos"), b"payload").unwrap();
        let (sha, size) = sha256_file(&dir.path().join("svcos")).unwrap();
        let mut m = Manifest {
            compatible: "c".into(),
            version: "1".into(),
            images: vec![Image {
                slot_class: "rootfs".into(),
                filename: "svcos".into(),
                sha256: sha.clone(),
                size,
            }],
        };
        assert_eq!(check_images(&m, dir.path()).unwrap().len(), 1);
        m.images[0].sha256 = "00".repeat(32);
        assert_eq!(
            check_images(&m, dir.path()).unwrap_err().code(),
            "bad_digest"
        );
        m.images[0].filename = "../etc".into();
        assert_eq!(
            check_images(&m, dir.path()).unwrap_err().code(),
            "bad_manifest"
        );
    }

    /// A squashfs superblock declaring `image_len` bytes, padded like mksquashfs to 4 KiB.
    fn image(image_len: u64) -> Vec<u8> {
        let mut img = vec![0u8; image_len.next_multiple_of(4096) as usize];
        img[..4].copy_from_slice(SQUASHFS_MAGIC);
        img[40..48].copy_from_slice(&image_len.to_le_bytes());
        img
    }

    fn with_signature(mut img: Vec<u8>, sig: &[u8]) -> Vec<u8> {
        img.extend_from_slice(sig);
        img.extend_from_slice(&(sig.len() as u64).to_be_bytes());
        img
    }

    fn layout_of(bytes: &[u8]) -> Result<(), BundleError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.raucb");
        std::fs::write(&path, bytes).unwrap();
        check_layout(&path)
    }

    #[test]
    fn layout_tells_a_non_bundle_from_a_cut_upload() {
        // Deterministic "random" bytes: what an owner uploads by picking the wrong file.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let junk: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut sig = vec![0x30, 0x82, 0x01, 0x00];
        sig.resize(300, 0x11);
        let whole = with_signature(image(10_000), &sig);
        let mut not_cms = sig.clone();
        not_cms[0] = 0x00;
        for (name, bytes, want) in [
            ("random bytes", junk.clone(), Err("not_a_bundle")),
            ("empty file", Vec::new(), Err("not_a_bundle")),
            (
                "a text file",
                b"hello, this is not firmware\n".to_vec(),
                Err("not_a_bundle"),
            ),
            ("header only", whole[..50].to_vec(), Err("truncated")),
            (
                "cut inside the image",
                whole[..6_000].to_vec(),
                Err("truncated"),
            ),
            (
                "cut inside the signature",
                whole[..whole.len() - 100].to_vec(),
                Err("truncated"),
            ),
            ("a bare squashfs", image(10_000), Err("not_a_bundle")),
            (
                "a bare squashfs without padding",
                image(12_288)[..12_288].to_vec(),
                Err("not_a_bundle"),
            ),
            (
                "cut a little after the image",
                whole[..12_288 + 20].to_vec(),
                Err("truncated"),
            ),
            (
                "a header declaring an image of 2^64 - 1 bytes",
                {
                    let mut b = image(10_000);
                    b[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
                    b
                },
                Err("truncated"),
            ),
            (
                "garbage for a signature",
                with_signature(image(10_000), &not_cms),
                Err("not_a_bundle"),
            ),
            ("whole", whole.clone(), Ok(())),
        ] {
            let got = layout_of(&bytes).map_err(|e| e.code());
            assert_eq!(got, want, "{name}");
        }
        let msg = layout_of(&junk).unwrap_err().to_string();
        assert!(msg.starts_with("not a RAUC bundle"), "{msg}");
    }

    #[tokio::test]
    async fn rauc_is_not_asked_about_random_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.raucb");
        // `rauc info` on these reads a huge signature size and says it "exceeds bundle size".
        let mut bytes = vec![0xa5u8; 20_000];
        bytes[19_992..].copy_from_slice(&u64::MAX.to_be_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = inspect(&path, &dir.path().join("keyring.pem"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "not_a_bundle", "{err}");
    }
}
