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
    /// Not a complete bundle (cut short, empty, or not a bundle at all).
    #[error("not a complete RAUC bundle: {0}")]
    Truncated(String),
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
        if lower.contains("invalid bundle format")
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

/// Verify the signature of `bundle` against `keyring` and read its manifest.
pub async fn inspect(bundle: &Path, keyring: &Path) -> Result<Manifest, BundleError> {
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
}
