//! The auth record on disk: `password.phc` and `sessions.json` in auth's state directory.
//!
//! The directory is mode 0700 and both files 0600: only the auth process (its user) can read
//! the hash. Every write goes through [`svcos_common::fsutil::atomic_write`] (temp file, fsync,
//! rename, fsync directory), so a crash at any instant leaves the old file or the new one, never
//! a torn one; leftover temp files of a crash are removed when the store opens.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use svcos_common::fsutil;

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
    /// A file exists but is not a hash: setup stays refused (clearing it is what the physical
    /// reset is for) and logins fail with an internal error.
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

    /// Read the hash file.
    pub fn load_password(&self) -> Result<PasswordState, AuthError> {
        let path = self.password_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PasswordState::Unset),
            Err(source) => return Err(AuthError::Io { path, source }),
        };
        // Someone may have copied the file in by hand: make it private again.
        let _ = fs::set_permissions(&path, fs::Permissions::from_mode(FILE_MODE));
        let phc = text.trim();
        Ok(match password::is_valid_phc(phc) {
            Ok(()) => PasswordState::Set(phc.to_string()),
            Err(message) => {
                tracing::error!(path = %path.display(), %message, "password hash file unreadable; hold the reset button to clear it");
                PasswordState::Corrupt(message)
            }
        })
    }

    /// Store a new hash (atomic, mode 0600).
    pub fn save_password(&self, phc: &str) -> Result<(), AuthError> {
        let path = self.password_path();
        fsutil::atomic_write(&path, format!("{phc}\n").as_bytes(), FILE_MODE)
            .map_err(|source| AuthError::Io { path, source })
    }

    /// Delete the hash (physical reset) and make the deletion durable.
    pub fn remove_password(&self) -> Result<(), AuthError> {
        let path = self.password_path();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(AuthError::Io { path, source }),
        }
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| AuthError::Io {
                path: self.dir.clone(),
                source,
            })
    }

    /// Read the session table. A missing file is an empty table; an unparsable one (which
    /// atomic writes should make impossible) is moved aside and treated as empty, because
    /// logging everyone out is better than refusing to start.
    pub fn load_sessions(&self) -> Result<SessionTable, AuthError> {
        let path = self.sessions_path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(SessionTable::default());
            }
            Err(source) => return Err(AuthError::Io { path, source }),
        };
        match serde_json::from_slice::<SessionFile>(&bytes) {
            Ok(file) if file.version == SESSIONS_VERSION => {
                let mut table = file.sessions;
                table.normalise();
                Ok(table)
            }
            Ok(file) => {
                self.quarantine(&path, &format!("unknown version {}", file.version));
                Ok(SessionTable::default())
            }
            Err(e) => {
                self.quarantine(&path, &e.to_string());
                Ok(SessionTable::default())
            }
        }
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

    fn quarantine(&self, path: &Path, why: &str) {
        let aside = path.with_extension("json.corrupt");
        tracing::error!(path = %path.display(), why, aside = %aside.display(), "session file unreadable; starting with no sessions");
        let _ = fs::rename(path, aside);
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

    #[test]
    fn sessions_round_trip_and_corrupt_file_is_set_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        assert!(store.load_sessions().unwrap().is_empty());
        let t = table_with(3);
        store
            .save_sessions_bytes(&Store::encode_sessions(&t))
            .unwrap();
        assert_eq!(store.load_sessions().unwrap(), t);
        fs::write(store.sessions_path(), b"{\"version\":1,\"sess").unwrap();
        assert!(store.load_sessions().unwrap().is_empty());
        assert!(tmp.path().join("sessions.json.corrupt").exists());
    }

    #[test]
    fn corrupt_hash_is_not_unset() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        assert_eq!(store.load_password().unwrap(), PasswordState::Unset);
        fs::write(store.password_path(), "garbage").unwrap();
        // A damaged file must not reopen first-boot setup to whoever asks first.
        assert!(matches!(
            store.load_password().unwrap(),
            PasswordState::Corrupt(_)
        ));
        store.remove_password().unwrap();
        assert_eq!(store.load_password().unwrap(), PasswordState::Unset);
    }
}
