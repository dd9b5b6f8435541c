//! Bearer-token validation against the auth service, with a short positive cache.
//!
//! Every bearer request would otherwise cost one ValidateSession round trip (~0.1-0.2 ms), which
//! is most of the `/api/status` budget. A positive answer is cached for [`CACHE_TTL_MS`], keyed
//! by the SHA-256 of the token (the token itself is never kept or logged), and never past the
//! session's own expiry. The cache is used only while the revocation stream
//! (`AuthService.StreamRevocations`) is connected: a revoked or evicted session is dropped the
//! moment auth announces it, and while the stream is down every request asks auth directly, so a
//! revocation can never be missed.
//!
//! **While auth is unreachable** a session keeps *reading*: every token auth validated in the
//! last [`OUTAGE_GRACE_MS`] is remembered (as its hash, with the session's absolute expiry), and a
//! read request whose validation fails only because auth is down is let through on that memory.
//! Writes, new logins and tokens auth never confirmed still get 503 (auth is the only one that
//! can check a password or a fresh token). A revoked, evicted or logged-out session leaves the
//! memory when auth announces it, and auth cannot revoke anything while it is down, so the
//! memory never outlives a revocation auth made; a token auth refuses leaves it at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};
use svcos_common::Shutdown;
use svcos_common::ipc::Backoff;
use svcos_common::time::Clock;
use svcos_proto::auth::v1::auth_service_client::AuthServiceClient;
use svcos_proto::auth::v1::{StreamRevocationsRequest, ValidateSessionRequest};
use tonic::Code;
use tonic::transport::Channel;

use crate::envelope::ApiError;

/// How long a positive validation is trusted without asking auth again.
pub const CACHE_TTL_MS: i64 = 5_000;
/// Entries kept at most (the auth service allows 32 sessions; tokens rotate rarely).
const CACHE_CAP: usize = 256;
/// How long after auth last confirmed a token it still serves reads while auth is unreachable.
pub const OUTAGE_GRACE_MS: i64 = 10 * 60 * 1000;

/// Who made an authenticated request (put in the request extensions by the guard).
#[derive(Debug, Clone)]
pub struct Session {
    /// The auth service's id of the session (not secret).
    pub session_id: String,
    /// A read-only API token, not an owner session: it may read, never write.
    pub read_only: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    session_id: String,
    read_only: bool,
    /// Unix ms after which the entry must not be used.
    valid_until_ms: i64,
}

/// The positive-validation cache plus the client that fills it.
#[derive(Debug)]
pub struct SessionCache {
    client: AuthServiceClient<Channel>,
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
    /// Whether the revocation stream is connected (the cache is trusted only then).
    live: AtomicBool,
    /// Tokens auth confirmed lately, trusted for reads only while auth is unreachable.
    confirmed: Mutex<HashMap<[u8; 32], Entry>>,
    /// Session ids that ended (revoked, evicted, logged out), for open /ws streams.
    ended: tokio::sync::broadcast::Sender<String>,
}

/// SHA-256 of a token: the only form in which a token is kept in memory.
pub fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl SessionCache {
    /// A cache in front of `client`, reading time from `clock`.
    pub fn new(client: AuthServiceClient<Channel>, clock: Arc<dyn Clock>) -> Self {
        SessionCache {
            client,
            clock,
            entries: Mutex::new(HashMap::new()),
            live: AtomicBool::new(false),
            confirmed: Mutex::new(HashMap::new()),
            ended: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// Validate a bearer token for a read: from the cache when possible, else by asking auth,
    /// else (auth unreachable) from the tokens auth confirmed lately.
    pub async fn validate(&self, token: &str) -> Result<Session, ApiError> {
        self.validate_for(token, false).await
    }

    /// Validate a bearer token for a request that `writes` (never served while auth is down).
    pub async fn validate_for(&self, token: &str, writes: bool) -> Result<Session, ApiError> {
        if token.is_empty() || token.len() > 512 {
            return Err(ApiError::unauthorized("invalid bearer token"));
        }
        let key = token_key(token);
        let now = self.clock.now_ms();
        if self.live.load(Ordering::Acquire) {
            let entries = self.entries.lock().expect("session cache lock");
            if let Some(e) = entries.get(&key)
                && now < e.valid_until_ms
            {
                return Ok(Session {
                    session_id: e.session_id.clone(),
                    read_only: e.read_only,
                });
            }
        }
        let mut client = self.client.clone();
        let resp = client
            .validate_session(ValidateSessionRequest {
                token: token.to_string(),
            })
            .await;
        match resp {
            Ok(r) => {
                let r = r.into_inner();
                let mut expiry_ms = now + CACHE_TTL_MS;
                for t in [r.expires_at_unix, r.idle_expires_at_unix] {
                    if t > 0 {
                        expiry_ms = expiry_ms.min(t.saturating_mul(1000));
                    }
                }
                if expiry_ms <= now {
                    return Err(ApiError::unauthorized("session expired"));
                }
                {
                    let mut absolute_ms = now + OUTAGE_GRACE_MS;
                    if r.expires_at_unix > 0 {
                        absolute_ms = absolute_ms.min(r.expires_at_unix.saturating_mul(1000));
                    }
                    let mut confirmed = self.confirmed.lock().expect("session cache lock");
                    if confirmed.len() >= CACHE_CAP {
                        confirmed.retain(|_, e| e.valid_until_ms > now);
                        if confirmed.len() >= CACHE_CAP {
                            confirmed.clear();
                        }
                    }
                    confirmed.insert(
                        key,
                        Entry {
                            session_id: r.session_id.clone(),
                            read_only: r.read_only,
                            valid_until_ms: absolute_ms,
                        },
                    );
                }
                if self.live.load(Ordering::Acquire) {
                    let mut entries = self.entries.lock().expect("session cache lock");
                    if entries.len() >= CACHE_CAP {
                        entries.retain(|_, e| e.valid_until_ms > now);
                        if entries.len() >= CACHE_CAP {
                            entries.clear();
                        }
                    }
                    entries.insert(
                        key,
                        Entry {
                            session_id: r.session_id.clone(),
                            read_only: r.read_only,
                            valid_until_ms: expiry_ms,
                        },
                    );
                }
                Ok(Session {
                    session_id: r.session_id,
                    read_only: r.read_only,
                })
            }
            Err(status) => Err(match status.code() {
                Code::Unauthenticated | Code::InvalidArgument | Code::NotFound => {
                    self.confirmed
                        .lock()
                        .expect("session cache lock")
                        .remove(&key);
                    ApiError::unauthorized(if status.message().is_empty() {
                        "invalid or expired session".to_string()
                    } else {
                        status.message().to_string()
                    })
                }
                _ => {
                    if !writes && let Some(session) = self.confirmed_lately(&key, now) {
                        tracing::debug!("auth unreachable: a lately confirmed token reads on");
                        return Ok(session);
                    }
                    tracing::warn!(code = ?status.code(), "session validation failed");
                    ApiError::unavailable("auth")
                }
            }),
        }
    }

    fn confirmed_lately(&self, key: &[u8; 32], now: i64) -> Option<Session> {
        let confirmed = self.confirmed.lock().expect("session cache lock");
        let e = confirmed.get(key).filter(|e| now < e.valid_until_ms)?;
        Some(Session {
            session_id: e.session_id.clone(),
            read_only: e.read_only,
        })
    }

    /// Forget a token at once (after logout through this gateway).
    pub fn forget_token(&self, token: &str) {
        let key = token_key(token);
        self.entries
            .lock()
            .expect("session cache lock")
            .remove(&key);
        self.confirmed
            .lock()
            .expect("session cache lock")
            .remove(&key);
    }

    /// Subscribe to ended sessions (a /ws stream closes when its session ends).
    pub fn subscribe_ended(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.ended.subscribe()
    }

    /// Forget every cached validation of a session and tell open streams it ended.
    pub fn forget_session(&self, session_id: &str) {
        let _ = self.ended.send(session_id.to_string());
        self.entries
            .lock()
            .expect("session cache lock")
            .retain(|_, e| e.session_id != session_id);
        self.confirmed
            .lock()
            .expect("session cache lock")
            .retain(|_, e| e.session_id != session_id);
    }

    fn set_live(&self, live: bool) {
        // Whatever happened while the stream was down is unknown: start from empty either way.
        self.entries.lock().expect("session cache lock").clear();
        if live {
            // Revocations made while the stream was down were never announced: only tokens
            // auth confirms from now on may read through a later outage.
            self.confirmed.lock().expect("session cache lock").clear();
        }
        self.live.store(live, Ordering::Release);
    }

    /// Whether the revocation stream is connected (cache in use).
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Follow `AuthService.StreamRevocations` until shutdown, dropping revoked sessions.
    pub fn spawn_revocation_follower(self: &Arc<Self>, shutdown: Shutdown) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut backoff = Backoff::default();
            while !shutdown.is_triggered() {
                let mut client = this.client.clone();
                let opened = tokio::select! {
                    r = client.stream_revocations(StreamRevocationsRequest {}) => r,
                    _ = shutdown.wait() => break,
                };
                if let Ok(stream) = opened {
                    let mut stream = stream.into_inner();
                    this.set_live(true);
                    backoff.reset();
                    loop {
                        let item = tokio::select! {
                            m = stream.message() => m,
                            _ = shutdown.wait() => return,
                        };
                        match item {
                            Ok(Some(rev)) => this.forget_session(&rev.session_id),
                            Ok(None) | Err(_) => break,
                        }
                    }
                    this.set_live(false);
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = shutdown.wait() => break,
                }
            }
        });
    }
}

/// The bearer token of an `Authorization` header value, if it is one.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn confirmed_tokens_read_through_an_auth_outage_only() {
        let dir = tempfile::tempdir().unwrap();
        // A socket nobody serves: every ValidateSession call fails as "auth unreachable".
        let client =
            AuthServiceClient::new(svcos_common::ipc::channel_at(dir.path().join("auth.sock")));
        let clock = svcos_common::time::ManualClock::at(1_000_000);
        let cache = SessionCache::new(client, Arc::new(clock.clone()));
        cache.confirmed.lock().unwrap().insert(
            token_key("known"),
            Entry {
                session_id: "s1".into(),
                read_only: false,
                valid_until_ms: 1_000_000 + OUTAGE_GRACE_MS,
            },
        );
        let read = cache
            .validate("known")
            .await
            .expect("a confirmed token reads");
        assert_eq!(read.session_id, "s1");
        let write = cache.validate_for("known", true).await.unwrap_err();
        assert_eq!(write.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        let unknown = cache.validate("unknown").await.unwrap_err();
        assert_eq!(unknown.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        // Past the grace, or once its session ends, the memory is gone.
        clock.advance_ms(OUTAGE_GRACE_MS);
        assert!(cache.validate("known").await.is_err());
        clock.advance_ms(-OUTAGE_GRACE_MS);
        assert!(cache.validate("known").await.is_ok());
        cache.forget_session("s1");
        assert!(cache.validate("known").await.is_err());
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("abc"), None);
    }

    #[test]
    fn token_key_is_stable_and_distinct() {
        assert_eq!(token_key("a"), token_key("a"));
        assert_ne!(token_key("a"), token_key("b"));
    }
}
