//! RAUC bundles, read with the real `rauc` tool: `rauc info --keyring` checks the CMS signature
//! against the keyring and prints the manifest (compatible, version, per-image sha256 and size);
//! `rauc extract` unpacks a verified bundle. Nothing here writes a slot.
//!
//! Signature scheme: RAUC's own. A bundle is a squashfs image followed by a detached CMS
//! signature (DER) and its 64-bit size; the signer's certificate must chain to the keyring
//! (`/etc/rauc/keyring.pem` on the image, `<dir>/rauc/keyring.pem` in the sim).

use std::path::Path;

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
    /// An image is not a regular file of its own inside the bundle (a symbolic or hard link, a
    /// device node, a FIFO, a socket, a directory). Signed or not, it is never followed.
    #[error("unsafe image in the bundle: {0}")]
    UnsafeImage(String),
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
            BundleError::UnsafeImage(_) => "unsafe_image",
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
    sha256_reader(std::fs::File::open(path)?)
}

/// sha256 and size of everything `r` yields.
pub fn sha256_reader(mut r: impl std::io::Read) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), total))
}

/// The most an installed image's permission bits may be: an image is an executable, never
/// set-uid, set-gid or sticky, never writable by group or others, whatever its bundle says.
pub const MAX_IMAGE_MODE: u32 = 0o755;

/// An image that passed [`check_images`], held open: the installer copies from this very file,
/// so nothing swapped into the staging directory after the check is read.
#[derive(Debug)]
pub struct CheckedImage {
    /// What the manifest says of it.
    pub image: Image,
    /// The image, opened without following links; positioned at its start.
    pub file: std::fs::File,
    /// Its permission bits as the bundle declares them, masked by [`MAX_IMAGE_MODE`].
    pub mode: u32,
}

/// A manifest image file name must name a file directly in the bundle: no directory part, no
/// `.`/`..`, no hidden name, nothing a path join could take outside the staging directory.
pub fn check_image_name(name: &str) -> Result<(), BundleError> {
    if name.is_empty() || name.contains(['/', '\0']) || name.starts_with('.') {
        return Err(BundleError::BadManifest(format!(
            "image file name {name:?} is not a plain file name inside the bundle"
        )));
    }
    Ok(())
}

/// What a non-regular file is, for refusals.
fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_block_device() {
        "a block device node"
    } else if ft.is_char_device() {
        "a character device node"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Open image `name` of the extracted bundle in `dir`, refusing anything but a regular file
/// with a single name. A signed bundle can still carry a link: `rauc bundle` hashes the file a
/// symbolic link points at and mksquashfs stores the link itself, so following it would install
/// (and expose) whatever file the signer named on this unit.
pub fn open_image(dir: &Path, name: &str) -> Result<(std::fs::File, u32), BundleError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    check_image_name(name)?;
    let unsafe_image = |what: String| BundleError::UnsafeImage(format!("image {name:?} {what}"));
    let dir_meta = std::fs::symlink_metadata(dir)
        .map_err(|e| BundleError::Tool(format!("staging directory {}: {e}", dir.display())))?;
    if !dir_meta.is_dir() {
        return Err(BundleError::Tool(format!(
            "staging directory {} is {}",
            dir.display(),
            kind_of(dir_meta.file_type())
        )));
    }
    let path = dir.join(name);
    // `symlink_metadata`, not `metadata`: the entry itself, never what a link points at.
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BundleError::BadManifest(format!(
                "image {name:?} missing from bundle"
            )));
        }
        Err(e) => return Err(BundleError::Tool(format!("{}: {e}", path.display()))),
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        let to = std::fs::read_link(&path)
            .map(|t| format!(" (to {:?})", t.display().to_string()))
            .unwrap_or_default();
        return Err(unsafe_image(format!(
            "is a symbolic link{to}; images must be regular files inside the bundle, so it was \
             not followed"
        )));
    }
    if !ft.is_file() {
        // Refused before opening: opening a FIFO blocks and opening a device can act on it.
        return Err(unsafe_image(format!(
            "is {}; images must be regular files",
            kind_of(ft)
        )));
    }
    if meta.nlink() > 1 {
        return Err(unsafe_image(format!(
            "is a hard link ({} names for one file); images must be files of their own",
            meta.nlink()
        )));
    }
    // O_NOFOLLOW: a link swapped in after the check above fails to open instead of being
    // followed; O_NONBLOCK: a FIFO swapped in does not hang the install.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => unsafe_image(
                "became a symbolic link while it was checked; it was not followed".into(),
            ),
            _ => BundleError::Tool(format!("{}: {e}", path.display())),
        })?;
    let opened = file
        .metadata()
        .map_err(|e| BundleError::Tool(format!("{}: {e}", path.display())))?;
    if !opened.is_file()
        || opened.nlink() != 1
        || opened.dev() != meta.dev()
        || opened.ino() != meta.ino()
    {
        return Err(unsafe_image("changed while it was checked".into()));
    }
    Ok((file, opened.permissions().mode() & MAX_IMAGE_MODE))
}

/// Check every extracted image against the signed manifest: each must be a regular file of its
/// own inside `dir` (see [`open_image`]) whose sha256 and size match.
pub fn check_images(manifest: &Manifest, dir: &Path) -> Result<Vec<CheckedImage>, BundleError> {
    use std::io::{Seek, SeekFrom};
    // Every name first: a bad one refuses the bundle before any image is opened.
    for img in &manifest.images {
        check_image_name(&img.filename)?;
    }
    let mut out = Vec::new();
    for img in &manifest.images {
        let (mut file, mode) = open_image(dir, &img.filename)?;
        let io = |e: std::io::Error| BundleError::Tool(format!("image {}: {e}", img.filename));
        let (sha, size) = sha256_reader(&file).map_err(io)?;
        if sha != img.sha256 || (img.size != 0 && size != img.size) {
            return Err(BundleError::BadDigest(format!(
                "image {} hashes to {sha} ({size} bytes), the manifest says {} ({} bytes)",
                img.filename, img.sha256, img.size
            )));
        }
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        out.push(CheckedImage {
            image: img.clone(),
            file,
            mode,
        });
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

    /// A manifest with one rootfs image `name` promising the content of `content`.
    fn manifest_for(name: &str, content: &Path) -> Manifest {
        let (sha256, size) = sha256_file(content).unwrap();
        Manifest {
            compatible: "c".into(),
            version: "1".into(),
            images: vec![Image {
                slot_class: "rootfs".into(),
                filename: name.into(),
                sha256,
                size,
            }],
        }
    }

    fn refusal(m: &Manifest, dir: &Path) -> (&'static str, String) {
        let e = check_images(m, dir).unwrap_err();
        (e.code(), e.to_string())
    }

    #[test]
    fn image_digest_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("svcos"), b"payload").unwrap();
        let mut m = manifest_for("svcos", &dir.path().join("svcos"));
        let checked = check_images(&m, dir.path()).unwrap();
        assert_eq!(checked.len(), 1);
        // The handle is rewound: the installer copies the whole image from it.
        assert_eq!(
            sha256_reader(&checked[0].file).unwrap().0,
            checked[0].image.sha256
        );
        m.images[0].sha256 = "00".repeat(32);
        assert_eq!(refusal(&m, dir.path()).0, "bad_digest");
    }

    #[test]
    fn image_names_stay_inside_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("staging");
        std::fs::create_dir(&bundle).unwrap();
        std::fs::write(dir.path().join("outside"), b"secret").unwrap();
        for name in [
            "../outside",
            "sub/svcos",
            "/etc/passwd",
            "..",
            ".",
            "",
            ".hidden",
            "a\0b",
        ] {
            let m = manifest_for(name, &dir.path().join("outside"));
            let (code, msg) = refusal(&m, &bundle);
            assert_eq!(code, "bad_manifest", "{name:?}: {msg}");
            assert!(msg.contains("not a plain file name"), "{msg}");
        }
        let m = manifest_for("missing", &dir.path().join("outside"));
        assert!(refusal(&m, &bundle).1.contains("missing from bundle"));
    }

    #[test]
    fn a_symbolic_link_is_never_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("staging");
        std::fs::create_dir(&bundle).unwrap();
        // What the finding copied: a 0600 secret outside the bundle, named by a signed link
        // whose manifest digest is the secret's own (as `rauc bundle` computes it).
        let secret = dir.path().join("password-hash");
        std::fs::write(&secret, b"$argon2id$secret").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&secret, bundle.join("svcos")).unwrap();
        let m = manifest_for("svcos", &secret);
        let (code, msg) = refusal(&m, &bundle);
        assert_eq!(code, "unsafe_image", "{msg}");
        assert!(msg.contains("is a symbolic link"), "{msg}");
        assert!(msg.contains("password-hash"), "{msg}");
        // A link to a file inside the bundle is refused too: only what the name holds counts.
        std::fs::write(bundle.join("real"), b"$argon2id$secret").unwrap();
        std::fs::remove_file(bundle.join("svcos")).unwrap();
        std::os::unix::fs::symlink("real", bundle.join("svcos")).unwrap();
        assert_eq!(refusal(&m, &bundle).0, "unsafe_image");
    }

    #[test]
    fn hard_links_and_special_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("staging");
        std::fs::create_dir(&bundle).unwrap();
        let payload = dir.path().join("payload");
        std::fs::write(&payload, b"payload").unwrap();
        let m = manifest_for("svcos", &payload);
        let image = bundle.join("svcos");

        std::fs::hard_link(&payload, &image).unwrap();
        let (code, msg) = refusal(&m, &bundle);
        assert_eq!(code, "unsafe_image", "{msg}");
        assert!(msg.contains("hard link (2 names"), "{msg}");
        std::fs::remove_file(&image).unwrap();

        // Opening a FIFO for reading would block until a writer came; it must be refused first.
        nix::unistd::mkfifo(&image, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let (code, msg) = refusal(&m, &bundle);
        assert_eq!(code, "unsafe_image", "{msg}");
        assert!(msg.contains("is a FIFO"), "{msg}");
        std::fs::remove_file(&image).unwrap();

        let _socket = std::os::unix::net::UnixListener::bind(&image).unwrap();
        assert!(refusal(&m, &bundle).1.contains("is a socket"));
        std::fs::remove_file(&image).unwrap();

        std::fs::create_dir(&image).unwrap();
        assert!(refusal(&m, &bundle).1.contains("is a directory"));

        // Making a device node needs privileges; /dev holds one already.
        let m = manifest_for("null", &payload);
        let (code, msg) = refusal(&m, Path::new("/dev"));
        assert_eq!(code, "unsafe_image", "{msg}");
        assert!(msg.contains("character device"), "{msg}");
    }

    #[test]
    fn the_installed_mode_never_exceeds_0755() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("svcos");
        std::fs::write(&image, b"payload").unwrap();
        let m = manifest_for("svcos", &image);
        for (declared, installed) in [
            (0o755, 0o755),
            (0o644, 0o644),
            (0o700, 0o700),
            (0o777, 0o755),
            (0o4755, 0o755),
            (0o2711, 0o711),
            (0o1777, 0o755),
            (0o6775, 0o755),
        ] {
            std::fs::set_permissions(&image, std::fs::Permissions::from_mode(declared)).unwrap();
            let checked = check_images(&m, dir.path()).unwrap();
            assert_eq!(checked[0].mode, installed, "declared {declared:o}");
        }
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
