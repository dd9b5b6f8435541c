//! The auth record on disk: `password.phc` and `sessions.json` in auth's state directory.
//!
//! The directory is mode 0700 and both files 0600: only the auth process (its user) can read
//! the hash. Every write goes through [`svcos_common::fsutil::atomic_write`] (temp file, fsync,
//! rename, fsync directory), so a crash at any instant leaves the old file or the new one, never
//! a torn one; leftover temp files of a crash are removed when the store opens.
//!
//! Every file is read through [`svcos_common::statefile::load_or_quarantine`]: a damaged one
//! is moved aside and auth starts in that file's safe state, never in a crash loop:
//!
//! | File | Safe state when damaged |
//! |---|---|
//! | `password.phc` | [`PasswordState::Corrupt`]: logins and password changes answer 503 with "hold the reset button", setup stays refused |
//! | `sessions.json` | no sessions (everyone logs in again) |
//! | `api-tokens.json` | no API tokens (they stop working: the safe direction) |
//!
//! A damaged hash must not read as "no password": that would reopen first-boot setup to
//! whoever asks first. So the moved-aside copy (`password.phc.corrupt-<ms>`) keeps the state
//! `Corrupt` across restarts, until the physical reset (button held 15 s) removes it, which is
//! the same proof of presence that clears a good password.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use svcos_common::fsutil;
use svcos_common::statefile::{self, Loaded};

use crate::apitokens::ApiTokenTable;
use crate::error::AuthError;
use crate::password;
use crate::sessions::SessionTable;

/// Mode of the state directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the hash and session files.
pub const FILE_MODE: u32 = 0o600;
/// The password hash (one PHC string).
pub const PASSWORD_FILE: &str = "password.phc";
/// The session table (JSON, token hashes only).
pub const SESSIONS_FILE: &str = "sessions.json";
/// The read-only API tokens (JSON, token hashes only).
pub const API_TOKENS_FILE: &str = "api-tokens.json";
/// Format version of [`SESSIONS_FILE`].
const SESSIONS_VERSION: u32 = 1;

/// What the hash file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordState {
    /// First boot, or after a physical reset.
    Unset,
    /// A PHC hash string.
    Set(String),
    /// A file existed but was not a hash (it is moved aside): setup stays refused (clearing it
    /// is what the physical reset is for) and logins fail with 503 until then.
    Corrupt(String),
}

#[derive(Serialize, Deserialize)]
struct SessionFile {
    version: u32,
    sessions: SessionTable,
}

/// The auth state directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Create (mode 0700) or open the directory and clear crash leftovers.
    pub fn open(dir: &Path) -> Result<Self, AuthError> {
        fsutil::ensure_dir(dir, DIR_MODE).map_err(|source| AuthError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let store = Store {
            dir: dir.to_path_buf(),
        };
        store.remove_temp_files();
        Ok(store)
    }

    /// The hash file.
    pub fn password_path(&self) -> PathBuf {
        self.dir.join(PASSWORD_FILE)
    }

    /// The session file.
    pub fn sessions_path(&self) -> PathBuf {
        self.dir.join(SESSIONS_FILE)
    }

    /// The API token file.
    pub fn api_tokens_path(&self) -> PathBuf {
        self.dir.join(API_TOKENS_FILE)
    }

    /// Read the API tokens (a damaged file is moved aside: its tokens stop working, which is
    /// the safe direction).
    pub fn load_api_tokens(&self) -> ApiTokenTable {
        svcos_common::statefile::load_json(&self.api_tokens_path()).unwrap_or_default()
    }

    /// Replace the API token file (atomic, mode 0600). Blocking: fsyncs.
    pub fn save_api_tokens(&self, table: &ApiTokenTable) -> Result<(), AuthError> {
        let path = self.api_tokens_path();
        let bytes = serde_json::to_vec(table).expect("token table serialises");
        fsutil::atomic_write(&path, &bytes, FILE_MODE)
            .map_err(|source| AuthError::Io { path, source })
    }

    /// Read the hash file (never fails: see the module table).
    pub fn load_password(&self) -> PasswordState {
        let path = self.password_path();
        match statefile::load_or_quarantine(&path, parse_phc) {
            Loaded::Good(phc) => {
                // Someone may have copied the file in by hand: make it private again.
                let _ = fs::set_permissions(&path, fs::Permissions::from_mode(FILE_MODE));
                PasswordState::Set(phc)
            }
            Loaded::Damaged { why, .. } => {
                tracing::warn!(path = %path.display(), why, "password hash damaged: logins refused until the reset button is held for 15 s");
                PasswordState::Corrupt(why)
            }
            Loaded::Missing => match statefile::asides(&path).last() {
                Some(aside) => {
                    let why = format!(
                        "a damaged hash was moved aside to {}",
                        aside.file_name().unwrap_or_default().to_string_lossy()
                    );
                    tracing::warn!(path = %path.display(), why, "logins refused until the reset button is held for 15 s");
                    PasswordState::Corrupt(why)
                }
                None => PasswordState::Unset,
            },
        }
    }

    /// Store a new hash (atomic, mode 0600).
    pub fn save_password(&self, phc: &str) -> Result<(), AuthError> {
        let path = self.password_path();
        fsutil::atomic_write(&path, format!("{phc}\n").as_bytes(), FILE_MODE)
            .map_err(|source| AuthError::Io { path, source })
    }

    /// Delete the hash and its moved-aside damaged copies (physical reset: both mean "a
    /// password exists") and make the deletion durable.
    pub fn remove_password(&self) -> Result<(), AuthError> {
        let path = self.password_path();
        for file in std::iter::once(path.clone()).chain(statefile::asides(&path)) {
            match fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(AuthError::Io { path: file, source }),
            }
        }
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| AuthError::Io {
                path: self.dir.clone(),
                source,
            })
    }

    /// Read the session table (never fails: a missing or damaged file is an empty table,
    /// because logging everyone out is better than refusing to start).
    pub fn load_sessions(&self) -> SessionTable {
        let parse = |bytes: &[u8]| {
            let file: SessionFile = statefile::json(bytes)?;
            if file.version != SESSIONS_VERSION {
                return Err(format!("unknown version {}", file.version));
            }
            Ok(file.sessions)
        };
        let mut table = statefile::load_or_quarantine(&self.sessions_path(), parse)
            .good()
            .unwrap_or_default();
        table.normalise();
        table
    }

    /// Serialise a table for [`Store::save_sessions_bytes`] (cheap; done under the state lock).
    pub fn encode_sessions(table: &SessionTable) -> Vec<u8> {
        serde_json::to_vec(&SessionFile {
            version: SESSIONS_VERSION,
            sessions: table.clone(),
        })
        .expect("session table serialises")
    }

    /// Replace the session file (atomic, mode 0600). Blocking: fsyncs.
    pub fn save_sessions_bytes(&self, bytes: &[u8]) -> Result<(), AuthError> {
        let path = self.sessions_path();
        fsutil::atomic_write(&path, bytes, FILE_MODE)
            .map_err(|source| AuthError::Io { path, source })
    }

    fn remove_temp_files(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // atomic_write's temp names: ".<file>.tmp.<pid>".
            if name.starts_with('.') && name.contains(".tmp.") {
                tracing::info!(file = %name, "removing the temp file of an interrupted write");
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// A hash file's bytes as a PHC string: UTF-8, one line, a hash `argon2` can verify.
fn parse_phc(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let phc = text.trim();
    password::is_valid_phc(phc)?;
    Ok(phc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::{Session, SessionId, TokenHash};

    fn table_with(n: usize) -> SessionTable {
        let mut t = SessionTable::default();
        for i in 0..n {
            t.insert(
                Session {
                    id: SessionId(format!("s{i}")),
                    token_hash: TokenHash::of(&format!("t{i}")),
                    created_ms: i as i64,
                    last_used_ms: i as i64,
                    client_ip: "10.0.0.9".into(),
                    user_agent: "test".into(),
                },
                0,
            );
        }
        t
    }

    #[test]
    fn modes_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("auth");
        let store = Store::open(&dir).unwrap();
        store
            .save_password("$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA")
            .unwrap();
        store
            .save_sessions_bytes(&Store::encode_sessions(&table_with(1)))
            .unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&store.password_path()), 0o600);
        assert_eq!(mode(&store.sessions_path()), 0o600);
    }

    const PHC: &str = "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";

    #[test]
    fn sessions_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        assert!(store.load_sessions().is_empty());
        let t = table_with(3);
        store
            .save_sessions_bytes(&Store::encode_sessions(&t))
            .unwrap();
        assert_eq!(store.load_sessions(), t);
    }

    #[test]
    fn every_damaged_file_starts_auth_in_its_safe_state() {
        use svcos_common::statefile::{Damage, assert_quarantined};
        for damage in Damage::ALL {
            let tmp = tempfile::tempdir().unwrap();
            let store = Store::open(tmp.path()).unwrap();
            let ctx = |file: &str| format!("{file} {damage:?}");

            store.save_password(PHC).unwrap();
            assert_eq!(store.load_password(), PasswordState::Set(PHC.into()));
            let bad = damage.write(&store.password_path());
            let loaded = store.load_password();
            assert!(matches!(loaded, PasswordState::Corrupt(_)), "{loaded:?}");
            assert_quarantined(&store.password_path(), &bad, &ctx("password"));
            // The restart after it: still refused, not first-boot setup.
            assert!(matches!(store.load_password(), PasswordState::Corrupt(_)));
            // The physical reset is what clears it.
            store.remove_password().unwrap();
            assert_eq!(store.load_password(), PasswordState::Unset);
            assert!(svcos_common::statefile::asides(&store.password_path()).is_empty());

            store
                .save_sessions_bytes(&Store::encode_sessions(&table_with(2)))
                .unwrap();
            let bad = damage.write(&store.sessions_path());
            assert!(store.load_sessions().is_empty(), "{}", ctx("sessions"));
            assert_quarantined(&store.sessions_path(), &bad, &ctx("sessions"));

            store.save_api_tokens(&ApiTokenTable::default()).unwrap();
            let bad = damage.write(&store.api_tokens_path());
            assert_eq!(store.load_api_tokens(), ApiTokenTable::default());
            assert_quarantined(&store.api_tokens_path(), &bad, &ctx("api tokens"));
        }
    }

    #[test]
    fn a_session_file_of_another_version_is_moved_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        let body = br#"{"version":99,"sessions":{}}"#;
        fs::write(store.sessions_path(), body).unwrap();
        assert!(store.load_sessions().is_empty());
        svcos_common::statefile::assert_quarantined(&store.sessions_path(), body, "v99");
    }

    #[test]
    fn a_phc_string_cut_after_its_salt_is_damaged() {
        assert!(parse_phc(PHC.as_bytes()).is_ok());
        assert!(parse_phc(b"$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ").is_err());
    }
}
