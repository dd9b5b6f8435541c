//! What can go wrong in auth, and the one mapping from it to gRPC codes.

use std::path::PathBuf;

use svcos_common::status::ToStatus;
use tonic::{Code, Status};

/// The gRPC metadata key that carries the seconds to wait after a refused setup attempt
/// (`RESOURCE_EXHAUSTED`). The gateway copies it into the HTTP `Retry-After` header of its 429.
pub const RETRY_AFTER_METADATA: &str = "retry-after";

/// Why a password breaks the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordRule {
    /// Shorter than `[auth].min_password_len` characters.
    #[error("password must have at least {min} characters")]
    TooShort {
        /// The configured minimum, in characters.
        min: u32,
    },
    /// Longer than [`crate::password::MAX_PASSWORD_BYTES`] bytes (bounds hashing input).
    #[error("password must have at most {max} bytes")]
    TooLong {
        /// The maximum, in bytes.
        max: usize,
    },
    /// Contains a control character (not typeable, most likely a client bug).
    #[error("password must not contain control characters")]
    ControlCharacter,
}

/// Everything an auth call can fail with. Messages never contain a password, token or ticket.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Setup after a password exists; only the physical reset clears it.
    #[error("a password is already set; hold the reset button for 15 s to clear it")]
    AlreadySet,
    /// Login before first-boot setup.
    #[error("no password is set yet; set one first")]
    NotSet,
    /// More than 3 setup attempts from one client address within 60 s.
    #[error("too many setup attempts; retry in {retry_after_s} s")]
    RateLimited {
        /// Whole seconds until the next attempt is accepted (at least 1).
        retry_after_s: u64,
    },
    /// Too many wrong passwords from one client address: it must wait before the next try.
    #[error("too many failed logins from this address; retry in {retry_after_s} s")]
    LoginThrottled {
        /// Whole seconds until the next attempt is checked (at least 1).
        retry_after_s: u64,
    },
    /// The call needs an owner session and was presented with a read-only API token.
    #[error("this needs an owner session; API tokens are read-only")]
    OwnerSessionRequired,
    /// An API token name that is empty, too long or has odd characters.
    #[error("token name must be 1-64 letters, digits, spaces or - _ .")]
    ApiTokenName,
    /// As many API tokens as allowed exist.
    #[error("at most 16 API tokens may exist; revoke one first")]
    ApiTokensFull,
    /// No API token with that id.
    #[error("no API token with that id")]
    UnknownApiToken,
    /// The new password breaks a rule.
    #[error("password rejected: {0}")]
    BadPassword(#[from] PasswordRule),
    /// The password does not match the stored hash.
    #[error("wrong password")]
    WrongPassword,
    /// The bearer token is missing, unknown, expired, evicted or revoked.
    #[error("session is missing, expired or revoked")]
    InvalidSession,
    /// The WebSocket ticket is unknown, already used, expired, or its session ended.
    #[error("ticket is unknown, used or expired")]
    InvalidTicket,
    /// The stored hash file was damaged; logins fail with 503 until a physical reset.
    #[error("stored password hash {path} is unreadable: {message}")]
    HashFileCorrupt {
        /// The hash file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// argon2 refused to hash (parameters or output).
    #[error("cannot hash password: {0}")]
    Hash(String),
    /// A state file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The blocking hash task panicked or was cancelled.
    #[error("hashing task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// The service is stopping and no longer hashes.
    #[error("auth is shutting down")]
    ShuttingDown,
    /// A revocation subscriber fell behind and missed events; it must drop its cache and
    /// resubscribe.
    #[error("revocation stream lagged by {missed} events; drop cached validations and resubscribe")]
    RevocationsLagged {
        /// How many revocations were skipped.
        missed: u64,
    },
}

impl ToStatus for AuthError {
    fn to_status(&self) -> Status {
        let code = match self {
            AuthError::AlreadySet | AuthError::NotSet => Code::FailedPrecondition,
            AuthError::RateLimited { .. } | AuthError::LoginThrottled { .. } => {
                Code::ResourceExhausted
            }
            AuthError::BadPassword(_) | AuthError::ApiTokenName => Code::InvalidArgument,
            AuthError::OwnerSessionRequired => Code::PermissionDenied,
            AuthError::ApiTokensFull => Code::ResourceExhausted,
            AuthError::UnknownApiToken => Code::NotFound,
            AuthError::WrongPassword | AuthError::InvalidSession | AuthError::InvalidTicket => {
                Code::Unauthenticated
            }
            AuthError::HashFileCorrupt { .. } => {
                // 503, not 500: auth runs and the state is known and documented (store.rs);
                // only the physical reset ends it. The client never sees a device path.
                tracing::warn!(error = %self, "login refused: the password hash is damaged");
                // The "svcos:" prefix tells callers auth answered (not "auth is down").
                return Status::unavailable(
                    "svcos: auth: the stored password hash is damaged; logins are refused until the reset button is held for 15 s",
                );
            }
            AuthError::Io { .. } => {
                // Logged in full; the client never sees a path of the device's filesystem.
                let _ = svcos_common::status::internal("auth", self);
                return Status::internal(
                    "auth: the auth state could not be read or written (see the auth log)",
                );
            }
            AuthError::Hash(_) | AuthError::Join(_) => {
                // The full chain goes to the log; the client gets the short message.
                return svcos_common::status::internal("auth", self);
            }
            AuthError::ShuttingDown => Code::Unavailable,
            AuthError::RevocationsLagged { .. } => Code::Aborted,
        };
        let mut status = Status::new(code, self.to_string());
        if let AuthError::RateLimited { retry_after_s }
        | AuthError::LoginThrottled { retry_after_s } = self
        {
            status.metadata_mut().insert(
                RETRY_AFTER_METADATA,
                retry_after_s.to_string().parse().expect("digits are ASCII"),
            );
        }
        status
    }
}

impl From<AuthError> for Status {
    fn from(err: AuthError) -> Self {
        err.to_status()
    }
}

/// The seconds a `RESOURCE_EXHAUSTED` status from `Setup` asks the caller to wait, read from the
/// [`RETRY_AFTER_METADATA`] key. For the gateway's `Retry-After` header.
pub fn retry_after_s(status: &Status) -> Option<u64> {
    status
        .metadata()
        .get(RETRY_AFTER_METADATA)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_mapped() {
        let table: Vec<(AuthError, Code)> = vec![
            (AuthError::AlreadySet, Code::FailedPrecondition),
            (AuthError::NotSet, Code::FailedPrecondition),
            (
                AuthError::RateLimited { retry_after_s: 7 },
                Code::ResourceExhausted,
            ),
            (
                AuthError::BadPassword(PasswordRule::TooShort { min: 8 }),
                Code::InvalidArgument,
            ),
            (AuthError::WrongPassword, Code::Unauthenticated),
            (AuthError::InvalidSession, Code::Unauthenticated),
            (AuthError::InvalidTicket, Code::Unauthenticated),
            (AuthError::Hash("x".into()), Code::Internal),
            (AuthError::ShuttingDown, Code::Unavailable),
            (AuthError::RevocationsLagged { missed: 3 }, Code::Aborted),
        ];
        for (err, code) in table {
            assert_eq!(err.to_status().code(), code, "{err}");
        }
    }

    #[test]
    fn rate_limit_carries_retry_after() {
        let status = AuthError::RateLimited { retry_after_s: 42 }.to_status();
        assert_eq!(retry_after_s(&status), Some(42));
        assert_eq!(retry_after_s(&AuthError::WrongPassword.to_status()), None);
    }
}
