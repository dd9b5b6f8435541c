//! SSH access: the owner's authorised keys and the options of the SSH server (dropbear).
//!
//! The gateway is the one writer (`PUT /api/network/ssh`); the files live in its state
//! directory, `<state>/gateway/ssh/` (0700):
//! - `authorized_keys` (0600): one key per line in the OpenSSH format dropbear reads,
//!   `type base64 [comment]`, written atomically. On the image a systemd path unit copies it,
//!   as root, to root's `~/.ssh/authorized_keys` (dropbear insists that file is owned by the
//!   user or root), see docs/DESIGN.md "SSH".
//! - `dropbear.env` (0600): `DROPBEAR_ARGS=…`, read by the per-connection dropbear unit, so a
//!   change of `[network.ssh].password_login` holds from the next connection on.
//!
//! Key lines are parsed strictly ([`AuthorizedKey::parse`]): no `authorized_keys` options
//! (`command=`, `from=`), a type dropbear accepts, base64 that decodes to a key blob of that
//! type with the right field sizes (RSA at least 2048 bits), and a printable comment. What is
//! stored is re-encoded from the parsed key, so the file never holds a byte the parser did not
//! understand.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha2::Digest;

use crate::paths::Layout;
use crate::{ServiceName, fsutil};

/// Most keys the file may hold.
pub const MAX_KEYS: usize = 32;
/// Longest accepted key line, bytes (an RSA-16384 key is about 2.8 KB of base64).
pub const MAX_LINE: usize = 8192;
/// Longest accepted comment, characters.
pub const MAX_COMMENT: usize = 256;
/// The smallest RSA modulus accepted, bits (dropbear's own minimum is 1024; 2048 is the
/// floor of current guidance).
pub const MIN_RSA_BITS: usize = 2048;
/// The TCP port the image's SSH server listens on.
pub const SSH_PORT: u16 = 22;

/// A key type dropbear accepts for user authentication (`ssh-dss` is refused: dropbear builds
/// without DSS by default and the algorithm is broken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// `ssh-ed25519`.
    Ed25519,
    /// `ecdsa-sha2-nistp256`.
    EcdsaP256,
    /// `ecdsa-sha2-nistp384`.
    EcdsaP384,
    /// `ecdsa-sha2-nistp521`.
    EcdsaP521,
    /// `ssh-rsa` (signatures rsa-sha2-256).
    Rsa,
    /// `sk-ssh-ed25519@openssh.com` (FIDO security key).
    SkEd25519,
    /// `sk-ecdsa-sha2-nistp256@openssh.com` (FIDO security key).
    SkEcdsaP256,
}

impl KeyType {
    /// Every accepted type.
    pub const ALL: [KeyType; 7] = [
        KeyType::Ed25519,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::EcdsaP521,
        KeyType::Rsa,
        KeyType::SkEd25519,
        KeyType::SkEcdsaP256,
    ];

    /// The type's name on the key line and inside the blob.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Ed25519 => "ssh-ed25519",
            KeyType::EcdsaP256 => "ecdsa-sha2-nistp256",
            KeyType::EcdsaP384 => "ecdsa-sha2-nistp384",
            KeyType::EcdsaP521 => "ecdsa-sha2-nistp521",
            KeyType::Rsa => "ssh-rsa",
            KeyType::SkEd25519 => "sk-ssh-ed25519@openssh.com",
            KeyType::SkEcdsaP256 => "sk-ecdsa-sha2-nistp256@openssh.com",
        }
    }

    fn from_name(name: &str) -> Option<KeyType> {
        KeyType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Curve name and uncompressed point length of the ECDSA types.
    fn curve(self) -> Option<(&'static str, usize)> {
        match self {
            KeyType::EcdsaP256 | KeyType::SkEcdsaP256 => Some(("nistp256", 65)),
            KeyType::EcdsaP384 => Some(("nistp384", 97)),
            KeyType::EcdsaP521 => Some(("nistp521", 133)),
            _ => None,
        }
    }
}

/// Why a key line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Empty or white space only.
    #[error("the line is empty")]
    Empty,
    /// Longer than [`MAX_LINE`].
    #[error("the line is longer than {MAX_LINE} bytes")]
    TooLong,
    /// Not `type base64 [comment]`; options such as `command=` are not accepted.
    #[error("expected \"type base64 [comment]\" (no options); the type {0:?} is not one of {types}", types = accepted_types())]
    UnknownType(String),
    /// The type has no key after it.
    #[error("the key data is missing after the type")]
    MissingKey,
    /// The key data is not standard base64.
    #[error("the key data is not base64")]
    Base64,
    /// The decoded blob does not hold a key of the named type.
    #[error("the key data is not a valid {0} key: {1}")]
    Blob(&'static str, &'static str),
    /// The RSA modulus is too small.
    #[error("RSA keys must have at least {MIN_RSA_BITS} bits (this one has {0})")]
    WeakRsa(usize),
    /// The comment has control characters or is too long.
    #[error("the comment must be printable text of at most {MAX_COMMENT} characters")]
    Comment,
}

fn accepted_types() -> String {
    KeyType::ALL.map(KeyType::name).join(", ")
}

/// One parsed public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedKey {
    /// Its type.
    pub key_type: KeyType,
    /// The decoded key blob (the wire encoding of RFC 4253 §6.6).
    pub blob: Vec<u8>,
    /// The comment after the key, if any (inner white space kept).
    pub comment: Option<String>,
}

impl AuthorizedKey {
    /// Parse one `type base64 [comment]` line strictly.
    pub fn parse(line: &str) -> Result<AuthorizedKey, KeyError> {
        if line.len() > MAX_LINE {
            return Err(KeyError::TooLong);
        }
        let line = line.trim();
        if line.is_empty() {
            return Err(KeyError::Empty);
        }
        let (type_name, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
        let key_type = KeyType::from_name(type_name)
            .ok_or_else(|| KeyError::UnknownType(type_name.chars().take(40).collect()))?;
        let rest = rest.trim_start();
        let (data, comment) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
        if data.is_empty() {
            return Err(KeyError::MissingKey);
        }
        let blob = STANDARD.decode(data).map_err(|_| KeyError::Base64)?;
        check_blob(key_type, &blob)?;
        let comment = comment.trim();
        if comment.chars().count() > MAX_COMMENT || comment.chars().any(char::is_control) {
            return Err(KeyError::Comment);
        }
        Ok(AuthorizedKey {
            key_type,
            blob,
            comment: (!comment.is_empty()).then(|| comment.to_string()),
        })
    }

    /// The line as stored, re-encoded from the parsed key.
    pub fn line(&self) -> String {
        let mut line = format!("{} {}", self.key_type.name(), STANDARD.encode(&self.blob));
        if let Some(c) = &self.comment {
            line.push(' ');
            line.push_str(c);
        }
        line
    }

    /// The fingerprint `ssh-keygen -l` prints: `SHA256:` and the unpadded base64 of the
    /// blob's SHA-256.
    pub fn fingerprint(&self) -> String {
        format!(
            "SHA256:{}",
            STANDARD_NO_PAD.encode(sha2::Sha256::digest(&self.blob))
        )
    }
}

/// Read the SSH wire strings of a blob (uint32 length, bytes), refusing trailing bytes.
fn wire_fields(blob: &[u8]) -> Option<Vec<&[u8]>> {
    let mut fields = Vec::new();
    let mut rest = blob;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        if len > tail.len() {
            return None;
        }
        let (field, tail) = tail.split_at(len);
        fields.push(field);
        rest = tail;
    }
    Some(fields)
}

fn check_blob(key_type: KeyType, blob: &[u8]) -> Result<(), KeyError> {
    let bad = |why| Err(KeyError::Blob(key_type.name(), why));
    let Some(fields) = wire_fields(blob) else {
        return bad("truncated");
    };
    if fields.first().copied() != Some(key_type.name().as_bytes()) {
        return bad("the type inside the key differs from the type before it");
    }
    match key_type {
        KeyType::Ed25519 | KeyType::SkEd25519 => {
            let want = if key_type == KeyType::Ed25519 { 2 } else { 3 };
            if fields.len() != want {
                return bad("wrong number of fields");
            }
            if fields[1].len() != 32 {
                return bad("an Ed25519 key is 32 bytes");
            }
        }
        KeyType::EcdsaP256 | KeyType::EcdsaP384 | KeyType::EcdsaP521 | KeyType::SkEcdsaP256 => {
            let (curve, point_len) = key_type.curve().expect("ECDSA types have a curve");
            let want = if key_type == KeyType::SkEcdsaP256 {
                4
            } else {
                3
            };
            if fields.len() != want {
                return bad("wrong number of fields");
            }
            if fields[1] != curve.as_bytes() {
                return bad("the curve does not match the type");
            }
            if fields[2].len() != point_len || fields[2][0] != 0x04 {
                return bad("the point is not an uncompressed point of the curve");
            }
        }
        KeyType::Rsa => {
            if fields.len() != 3 {
                return bad("wrong number of fields");
            }
            let (e, n) = (fields[1], fields[2]);
            // mpints are big-endian two's complement: a leading 0x00 only when the top bit
            // is set, never negative.
            let positive = |m: &[u8]| !m.is_empty() && m[0] & 0x80 == 0;
            if !positive(e) || !positive(n) {
                return bad("the exponent or modulus is not a positive number");
            }
            let n = if n[0] == 0 { &n[1..] } else { n };
            let bits = n.len() * 8 - n.first().map_or(8, |b| b.leading_zeros() as usize);
            if bits < MIN_RSA_BITS {
                return Err(KeyError::WeakRsa(bits));
            }
        }
    }
    Ok(())
}

/// Parse a list of key lines; an error names the index of the first bad line. Duplicate keys
/// (the same blob) are refused too.
pub fn parse_all<S: AsRef<str>>(lines: &[S]) -> Result<Vec<AuthorizedKey>, (usize, String)> {
    if lines.len() > MAX_KEYS {
        return Err((MAX_KEYS, format!("at most {MAX_KEYS} keys")));
    }
    let mut keys: Vec<AuthorizedKey> = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let key = AuthorizedKey::parse(line.as_ref()).map_err(|e| (i, e.to_string()))?;
        if let Some(first) = keys.iter().position(|k| k.blob == key.blob) {
            return Err((i, format!("the same key as entry {first}")));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// `<state>/gateway/ssh`.
pub fn ssh_dir(layout: &Layout) -> PathBuf {
    layout.service_state_dir(ServiceName::Gateway).join("ssh")
}

/// The authorised keys file, `<state>/gateway/ssh/authorized_keys`.
pub fn authorized_keys_path(layout: &Layout) -> PathBuf {
    ssh_dir(layout).join("authorized_keys")
}

/// The dropbear options file, `<state>/gateway/ssh/dropbear.env`.
pub fn dropbear_env_path(layout: &Layout) -> PathBuf {
    ssh_dir(layout).join("dropbear.env")
}

/// The stored keys (none when the file does not exist yet).
pub fn load(path: &Path) -> io::Result<Vec<AuthorizedKey>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            AuthorizedKey::parse(l).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })
        })
        .collect()
}

/// Replace the stored keys atomically (file 0600, directory 0700).
pub fn save(path: &Path, keys: &[AuthorizedKey]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fsutil::ensure_dir(dir, 0o700)?;
    }
    let text: String = keys.iter().map(|k| k.line() + "\n").collect();
    fsutil::atomic_write(path, text.as_bytes(), 0o600)
}

/// Empty the keys file when no owner password is set, returning how many lines it held.
///
/// Keys can only be stored by a signed-in owner, so a miner without a password holds keys only
/// after the physical reset (or a damaged password file) took the password away: whoever
/// holds the miner now must not find the previous owner's root access left behind. Called on
/// every "no password" status, so a reset while the gateway was down is caught at its start.
/// A damaged file is emptied too: nothing in it may outlive the password.
pub fn forget_without_password(path: &Path) -> io::Result<usize> {
    let held = match std::fs::read_to_string(path) {
        Ok(t) => t.lines().filter(|l| !l.trim().is_empty()).count(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => 1,
        Err(e) => return Err(e),
    };
    if held > 0 {
        save(path, &[])?;
    }
    Ok(held)
}

/// Follow auth's status (the gateway's snapshot of `StreamStatus`) and call
/// [`forget_without_password`] whenever it says no password is set, the first status included.
pub async fn guard(
    path: PathBuf,
    mut auth: tokio::sync::watch::Receiver<Option<svcos_proto::auth::v1::GetStatusResponse>>,
    shutdown: crate::Shutdown,
) {
    loop {
        let unowned = auth
            .borrow_and_update()
            .as_ref()
            .is_some_and(|s| !s.password_set);
        if unowned {
            match forget_without_password(&path) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(keys = n, "no owner password: SSH keys removed"),
                Err(e) => tracing::error!(error = %e, "cannot remove the SSH keys"),
            }
        }
        tokio::select! {
            _ = shutdown.wait() => return,
            changed = auth.changed() => if changed.is_err() { return },
        }
    }
}

/// The dropbear options for `password_login`: `-s` turns password logins off.
pub fn dropbear_args(password_login: bool) -> &'static str {
    if password_login { "" } else { "-s" }
}

/// Bring `dropbear.env` in line with `[network.ssh]` of `config` (the gateway calls it at
/// start and after every config write).
pub fn apply_config(layout: &Layout, config: &crate::config::Config) -> io::Result<()> {
    save_dropbear_env(
        &dropbear_env_path(layout),
        config.network.ssh.password_login,
    )
}

/// Write `dropbear.env` when it differs from what `password_login` asks (0600, atomically).
pub fn save_dropbear_env(path: &Path, password_login: bool) -> io::Result<()> {
    let text = format!(
        "# Written by the svcOS gateway from [network.ssh]; read per connection.\n\
         DROPBEAR_ARGS=\"{}\"\n",
        dropbear_args(password_login)
    );
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        fsutil::ensure_dir(dir, 0o700)?;
    }
    fsutil::atomic_write(path, text.as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(fields: &[&[u8]]) -> String {
        let mut blob = Vec::new();
        for f in fields {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        STANDARD.encode(blob)
    }

    fn ed25519() -> String {
        format!("ssh-ed25519 {}", wire(&[b"ssh-ed25519", &[7; 32]]))
    }

    fn rsa(bits: usize) -> String {
        let mut n = vec![0u8; bits / 8 + 1];
        n[1] = 0x80;
        format!("ssh-rsa {}", wire(&[b"ssh-rsa", &[1, 0, 1], &n]))
    }

    fn ecdsa(name: &str, curve: &str, len: usize) -> String {
        let mut point = vec![9u8; len];
        point[0] = 4;
        format!(
            "{name} {}",
            wire(&[name.as_bytes(), curve.as_bytes(), &point])
        )
    }

    #[test]
    fn key_lines_table() {
        let ed = ed25519();
        let sk = format!(
            "sk-ssh-ed25519@openssh.com {}",
            wire(&[b"sk-ssh-ed25519@openssh.com", &[1; 32], b"ssh:"])
        );
        let cases: Vec<(String, Result<(), &str>)> = vec![
            (ed.clone(), Ok(())),
            (format!("{ed} owner@laptop"), Ok(())),
            (format!("  {ed}\tTwo words  "), Ok(())),
            (rsa(2048), Ok(())),
            (rsa(4096), Ok(())),
            (rsa(1024), Err("at least 2048 bits (this one has 1024)")),
            (ecdsa("ecdsa-sha2-nistp256", "nistp256", 65), Ok(())),
            (ecdsa("ecdsa-sha2-nistp384", "nistp384", 97), Ok(())),
            (ecdsa("ecdsa-sha2-nistp521", "nistp521", 133), Ok(())),
            (
                ecdsa("ecdsa-sha2-nistp256", "nistp384", 65),
                Err("curve does not match"),
            ),
            (
                ecdsa("ecdsa-sha2-nistp256", "nistp256", 64),
                Err("not an uncompressed point"),
            ),
            (sk, Ok(())),
            (String::new(), Err("empty")),
            ("   ".into(), Err("empty")),
            ("ssh-ed25519".into(), Err("missing")),
            (format!("command=\"/bin/sh\" {ed}"), Err("no options")),
            (
                format!("ssh-dss {}", wire(&[b"ssh-dss", &[1; 20]])),
                Err("the type \"ssh-dss\""),
            ),
            ("ssh-ed25519 not*base64".into(), Err("not base64")),
            (
                format!("ssh-rsa {}", wire(&[b"ssh-ed25519", &[7; 32]])),
                Err("type inside the key differs"),
            ),
            (
                format!("ssh-ed25519 {}", wire(&[b"ssh-ed25519", &[7; 31]])),
                Err("32 bytes"),
            ),
            (
                format!("ssh-ed25519 {}", wire(&[b"ssh-ed25519", &[7; 32], b"x"])),
                Err("wrong number of fields"),
            ),
            (
                format!("ssh-ed25519 {}", &wire(&[b"ssh-ed25519", &[7; 32]])[..40]),
                Err("truncated"),
            ),
            (format!("{ed} bad\u{7}comment"), Err("comment")),
            (
                format!("{ed} {}", "c".repeat(MAX_COMMENT + 1)),
                Err("comment"),
            ),
            (format!("{ed} {}", "c".repeat(MAX_LINE)), Err("longer than")),
        ];
        for (line, want) in cases {
            let got = AuthorizedKey::parse(&line);
            match (want, &got) {
                (Ok(()), Ok(k)) => {
                    // What is stored parses back to the same key.
                    assert_eq!(AuthorizedKey::parse(&k.line()).as_ref(), Ok(k), "{line}");
                }
                (Err(part), Err(e)) => {
                    assert!(e.to_string().contains(part), "{line:?}: {e}");
                }
                _ => panic!("{line:?}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn comment_and_fingerprint_match_openssh() {
        // A key ssh-keygen made; `ssh-keygen -lf` prints this fingerprint.
        let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEOcFbbFgbhhm+hmV5SJ9pcxTOOCUGBRIa7+ZdphVOSW test@example";
        let k = AuthorizedKey::parse(line).unwrap();
        assert_eq!(k.comment.as_deref(), Some("test@example"));
        assert_eq!(k.line(), line);
        assert_eq!(
            k.fingerprint(),
            "SHA256:U2wRx0Rq8IaZh2nwOFvIAUGPwEdEj/UovD7e8iqDZsE"
        );
    }

    #[test]
    fn a_list_names_its_bad_entry() {
        let ed = ed25519();
        assert_eq!(parse_all(&[ed.clone(), rsa(2048)]).unwrap().len(), 2);
        let (i, msg) = parse_all(&[ed.clone(), "nonsense".into()]).unwrap_err();
        assert_eq!(i, 1, "{msg}");
        let (i, msg) = parse_all(&[ed.clone(), format!("{ed} again")]).unwrap_err();
        assert_eq!((i, msg.as_str()), (1, "the same key as entry 0"));
        let many = vec![ed; MAX_KEYS + 1];
        assert!(parse_all(&many).is_err());
    }

    #[test]
    fn the_files_are_private_and_round_trip() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ssh/authorized_keys");
        assert!(load(&path).unwrap().is_empty(), "no file yet = no keys");
        let keys = parse_all(&[format!("{} me", ed25519()), rsa(2048)]).unwrap();
        save(&path, &keys).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(load(&path).unwrap(), keys);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.lines().next().unwrap().ends_with(" me"));

        let env = dir.path().join("ssh/dropbear.env");
        save_dropbear_env(&env, false).unwrap();
        assert!(
            std::fs::read_to_string(&env)
                .unwrap()
                .contains("DROPBEAR_ARGS=\"-s\"")
        );
        assert_eq!(mode(&env), 0o600);
        save_dropbear_env(&env, true).unwrap();
        assert!(
            std::fs::read_to_string(&env)
                .unwrap()
                .contains("DROPBEAR_ARGS=\"\"")
        );
    }

    #[test]
    fn without_a_password_every_key_line_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ssh/authorized_keys");
        assert_eq!(
            forget_without_password(&path).unwrap(),
            0,
            "no file, nothing to do"
        );
        assert!(!path.exists(), "and no file is created");
        save(&path, &parse_all(&[ed25519(), rsa(2048)]).unwrap()).unwrap();
        assert_eq!(forget_without_password(&path).unwrap(), 2);
        assert!(load(&path).unwrap().is_empty());
        // A line the parser refuses is not a reason to keep it.
        std::fs::write(&path, "garbage that is no key\n").unwrap();
        assert_eq!(forget_without_password(&path).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
