//! The auth state machine: password, sessions, tickets and setup limit behind one lock, plus
//! the ordered persistence of the session table.
//!
//! The lock is a `std::sync::Mutex` held only for in-memory work (never across an `.await`,
//! a hash or a file write), so validations stay in the microseconds while logins hash on the
//! blocking pool and writes fsync there too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use argon2::Params;
use svcos_common::config::AuthConfig;
use svcos_common::time::Clock;
use tokio::sync::{broadcast, watch};

use crate::apitokens::{ApiToken, ApiTokenTable, CreateError};
use crate::error::AuthError;
use crate::password::{self, Hasher};
use crate::ratelimit::{self, LoginThrottle, RateLimiter};
use crate::sessions::{
    self, EndReason, Ended, Session, SessionId, SessionTable, SessionView, TokenHash, Validation,
};
use crate::store::{PasswordState, Store};
use crate::tickets::TicketStore;

/// Revocations buffered per subscriber before it counts as lagging.
const REVOCATION_BUFFER: usize = 256;

/// Everything [`Auth::open`] needs; [`crate::run`] fills it from the service context, tests
/// inject a manual clock and their own directories.
#[derive(Debug, Clone)]
pub struct AuthOptions {
    /// Auth's state directory (`Layout::service_state_dir(Auth)`), created with mode 0700.
    pub state_dir: PathBuf,
    /// hw-agent's socket, for the physical reset button.
    pub hw_agent_socket: PathBuf,
    /// `[auth]` config section.
    pub config: AuthConfig,
    /// Wall clock for every expiry and the setup limit.
    pub clock: Arc<dyn Clock>,
    /// argon2id parameters for new hashes (default [`password::owasp_params`]).
    pub hash_params: Params,
}

/// A newly issued session: the token (returned once, never stored) and its expiries.
#[derive(Debug, Clone)]
pub struct IssuedSession {
    /// The bearer token.
    pub token: String,
    /// Id and expiries.
    pub view: SessionView,
}

/// A newly issued WebSocket ticket.
#[derive(Debug, Clone)]
pub struct IssuedTicket {
    /// The one-time ticket.
    pub ticket: String,
    /// When it stops being accepted, Unix ms.
    pub expires_at_ms: i64,
}

/// What `GetStatus` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthStatus {
    /// Whether first-boot setup is done (a damaged hash file counts as set).
    pub password_set: bool,
    /// Sessions that authenticate now.
    pub active_sessions: usize,
}

struct Core {
    password: PasswordState,
    sessions: SessionTable,
    tickets: TicketStore,
    setup_limiter: RateLimiter,
    login_throttle: LoginThrottle,
    api_tokens: ApiTokenTable,
    /// Bumped by every change of the session table.
    generation: u64,
    /// Changes not yet on disk that may wait for the next flush (idle touches, removal of
    /// expired records): losing them in a crash makes a session look a little older, never
    /// brings a revoked one back.
    lazy_dirty: bool,
}

struct Inner {
    core: Mutex<Core>,
    store: Store,
    clock: Arc<dyn Clock>,
    hasher: Hasher,
    config: AuthConfig,
    revocations: broadcast::Sender<Ended>,
    /// Whether a password is set, for `StreamStatus` followers.
    password_set: watch::Sender<bool>,
    /// Serialises setup and the physical reset (both change the password file).
    password_lock: tokio::sync::Mutex<()>,
    /// Serialises session-file writes; holds the last generation written.
    written: tokio::sync::Mutex<u64>,
    /// Serialises changes of the API token table with their file writes.
    tokens_lock: tokio::sync::Mutex<()>,
}

/// A handle on the auth state (cheap to clone).
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").finish_non_exhaustive()
    }
}

impl Auth {
    /// Open the state directory and load the hash and the sessions still live.
    pub fn open(options: AuthOptions) -> Result<Self, AuthError> {
        let store = Store::open(&options.state_dir)?;
        let password = store.load_password();
        let mut sessions = store.load_sessions();
        let api_tokens = store.load_api_tokens();
        let expired = sessions.purge_expired(options.clock.now_ms());
        let (revocations, _) = broadcast::channel(REVOCATION_BUFFER);
        let (password_set, _) = watch::channel(!matches!(password, PasswordState::Unset));
        tracing::info!(
            password_set = !matches!(password, PasswordState::Unset),
            sessions = sessions.len(),
            expired = expired.len(),
            "auth state loaded"
        );
        Ok(Auth {
            inner: Arc::new(Inner {
                core: Mutex::new(Core {
                    password,
                    sessions,
                    tickets: TicketStore::default(),
                    setup_limiter: RateLimiter::setup(),
                    login_throttle: LoginThrottle::default(),
                    api_tokens,
                    generation: 0,
                    lazy_dirty: !expired.is_empty(),
                }),
                store,
                clock: options.clock,
                hasher: Hasher::new(options.config.max_concurrent_hashes, options.hash_params),
                config: options.config,
                revocations,
                password_set,
                password_lock: tokio::sync::Mutex::new(()),
                written: tokio::sync::Mutex::new(0),
                tokens_lock: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Subscribe to sessions ending from now on.
    pub fn subscribe_revocations(&self) -> broadcast::Receiver<Ended> {
        self.inner.revocations.subscribe()
    }

    /// Whether a password is set, now and on every change.
    pub fn watch_password_set(&self) -> watch::Receiver<bool> {
        self.inner.password_set.subscribe()
    }

    fn announce(&self, core: &mut Core, ended: Vec<Ended>) {
        for e in ended {
            core.tickets.drop_session(&e.id);
            tracing::info!(session = %e.id, reason = e.reason.as_str(), "session ended");
            // No subscriber is fine: nobody caches.
            let _ = self.inner.revocations.send(e);
        }
    }

    /// Whether setup is done, and how many sessions are live.
    pub fn status(&self) -> AuthStatus {
        let now = self.now_ms();
        let core = self.core();
        AuthStatus {
            password_set: !matches!(core.password, PasswordState::Unset),
            active_sessions: core.sessions.active_count(now),
        }
    }

    /// First-boot password setup, limited to 3 attempts per 60 s per client address.
    pub async fn setup(&self, password: String, client_ip: &str) -> Result<(), AuthError> {
        {
            let now = self.now_ms();
            let mut core = self.core();
            core.setup_limiter
                .attempt(client_ip, now)
                .map_err(|wait_ms| AuthError::RateLimited {
                    retry_after_s: ratelimit::retry_after_secs(wait_ms),
                })?;
            if !matches!(core.password, PasswordState::Unset) {
                return Err(AuthError::AlreadySet);
            }
        }
        password::check_rules(&password, self.inner.config.min_password_len)?;
        let _exclusive = self.inner.password_lock.lock().await;
        // Another setup may have won while this one waited.
        if !matches!(self.core().password, PasswordState::Unset) {
            return Err(AuthError::AlreadySet);
        }
        let phc = self.inner.hasher.hash(password).await?;
        let store = self.inner.store.clone();
        let saved = phc.clone();
        tokio::task::spawn_blocking(move || store.save_password(&saved)).await??;
        self.core().password = PasswordState::Set(phc);
        self.inner.password_set.send_replace(true);
        tracing::info!(client_ip, "password set");
        Ok(())
    }

    /// Every password check starts here: the caller's address may be waiting out failed
    /// attempts (counted before the hash, so parallel guesses cannot slip through), and the
    /// stored hash must be usable.
    fn begin_password_check(&self, client_ip: &str, now: i64) -> Result<String, AuthError> {
        if let Err(wait_ms) = self.core().login_throttle.begin(client_ip, now) {
            return Err(AuthError::LoginThrottled {
                retry_after_s: ratelimit::retry_after_secs(wait_ms),
            });
        }
        match &self.core().password {
            PasswordState::Set(phc) => Ok(phc.clone()),
            PasswordState::Unset => Err(AuthError::NotSet),
            PasswordState::Corrupt(message) => Err(AuthError::HashFileCorrupt {
                path: self.inner.store.password_path(),
                message: message.clone(),
            }),
        }
    }

    /// Log in: verify the password and issue a session (evicting the oldest beyond 32).
    pub async fn create_session(
        &self,
        password: String,
        client_ip: &str,
        user_agent: &str,
    ) -> Result<IssuedSession, AuthError> {
        let now = self.now_ms();
        let phc = self.begin_password_check(client_ip, now)?;
        if !self.inner.hasher.verify(phc.clone(), password).await? {
            let wait_ms = self.core().login_throttle.wait_ms(client_ip, self.now_ms());
            tracing::warn!(client_ip, wait_ms, "login with a wrong password");
            return Err(AuthError::WrongPassword);
        }
        self.core().login_throttle.succeeded(client_ip);
        let token = sessions::random_token().map_err(|e| AuthError::Hash(e.to_string()))?;
        let id = sessions::random_session_id().map_err(|e| AuthError::Hash(e.to_string()))?;
        let view = {
            let now = self.now_ms();
            let mut core = self.core();
            // A physical reset while this login hashed invalidates it.
            if core.password != PasswordState::Set(phc) {
                return Err(AuthError::WrongPassword);
            }
            let session = Session {
                id: id.clone(),
                token_hash: TokenHash::of(&token),
                created_ms: now,
                last_used_ms: now,
                client_ip: truncate(client_ip, 64),
                user_agent: truncate(user_agent, 256),
            };
            let view = session.view();
            let ended = core.sessions.insert(session, now);
            core.generation += 1;
            self.announce(&mut core, ended);
            view
        };
        if let Err(e) = self.persist().await {
            // The caller never sees the token, so the record must not outlive this call.
            let mut core = self.core();
            if core.sessions.remove_id(&id) {
                core.generation += 1;
            }
            return Err(e);
        }
        tracing::info!(session = %id, client_ip, "session created");
        Ok(IssuedSession { token, view })
    }

    /// Check a bearer token; a live session's idle expiry moves to now + 8 h. No I/O.
    pub fn validate(&self, token: &str) -> Result<SessionView, AuthError> {
        if token.is_empty() {
            return Err(AuthError::InvalidSession);
        }
        let hash = TokenHash::of(token);
        let now = self.now_ms();
        let mut core = self.core();
        match core.sessions.validate(&hash, now) {
            Validation::Live(view) => {
                core.lazy_dirty = true;
                Ok(view)
            }
            Validation::Expired(id) => {
                core.lazy_dirty = true;
                self.announce(
                    &mut core,
                    vec![Ended {
                        id,
                        reason: EndReason::Expired,
                    }],
                );
                Err(AuthError::InvalidSession)
            }
            Validation::Unknown => match core.api_tokens.validate(token, now) {
                Some(t) => Ok(SessionView {
                    id: SessionId(t.id.clone()),
                    expires_at_ms: 0,
                    idle_expires_at_ms: 0,
                    read_only: true,
                }),
                None => Err(AuthError::InvalidSession),
            },
        }
    }

    /// The live owner session holding `token` (an API token is refused: it is read-only).
    fn owner_session(&self, token: &str) -> Result<SessionView, AuthError> {
        let view = self.validate(token)?;
        if view.read_only {
            return Err(AuthError::OwnerSessionRequired);
        }
        Ok(view)
    }

    /// Change the password with the current one, for the owner session holding `token`; every
    /// other session is revoked. Returns how many were.
    pub async fn change_password(
        &self,
        token: &str,
        current: String,
        new: String,
        client_ip: &str,
    ) -> Result<usize, AuthError> {
        let caller = self.owner_session(token)?;
        let now = self.now_ms();
        let phc = self.begin_password_check(client_ip, now)?;
        if !self.inner.hasher.verify(phc.clone(), current).await? {
            tracing::warn!(client_ip, "password change with a wrong current password");
            return Err(AuthError::WrongPassword);
        }
        self.core().login_throttle.succeeded(client_ip);
        password::check_rules(&new, self.inner.config.min_password_len)?;
        let _exclusive = self.inner.password_lock.lock().await;
        let new_phc = self.inner.hasher.hash(new).await?;
        {
            // A physical reset or another change while this one hashed wins.
            if self.core().password != PasswordState::Set(phc) {
                return Err(AuthError::WrongPassword);
            }
        }
        let store = self.inner.store.clone();
        let saved = new_phc.clone();
        tokio::task::spawn_blocking(move || store.save_password(&saved)).await??;
        let revoked = {
            let mut core = self.core();
            core.password = PasswordState::Set(new_phc);
            let ended = core.sessions.retain_only(&caller.id);
            let n = ended.len();
            core.generation += 1;
            self.announce(&mut core, ended);
            n
        };
        self.persist().await?;
        tracing::warn!(session = %caller.id, client_ip, revoked, "password changed; other sessions revoked");
        Ok(revoked)
    }

    /// Create a read-only API token named `name`, for the owner session holding `token`.
    pub async fn create_api_token(
        &self,
        token: &str,
        name: &str,
    ) -> Result<(String, ApiToken), AuthError> {
        let caller = self.owner_session(token)?;
        let _writes = self.inner.tokens_lock.lock().await;
        let now = self.now_ms();
        let (secret, record, table) = {
            let mut core = self.core();
            let (secret, record) = core.api_tokens.create(name, now).map_err(|e| match e {
                CreateError::BadName => AuthError::ApiTokenName,
                CreateError::Full => AuthError::ApiTokensFull,
                CreateError::Random(m) => AuthError::Hash(m),
            })?;
            (secret, record, core.api_tokens.clone())
        };
        if let Err(e) = self.save_api_tokens(table).await {
            // The caller never sees the token, so the record must not outlive this call.
            self.core().api_tokens.revoke(&record.id);
            return Err(e);
        }
        tracing::info!(token_id = sessions::short_id(&record.id), name = %record.name, session = %caller.id, "API token created");
        Ok((secret, record))
    }

    /// Every API token (hashes included; the caller shows only public fields).
    pub fn list_api_tokens(&self) -> Vec<ApiToken> {
        self.core().api_tokens.tokens.clone()
    }

    /// Revoke an API token by id; announced like a revoked session.
    pub async fn revoke_api_token(&self, id: &str) -> Result<(), AuthError> {
        let _writes = self.inner.tokens_lock.lock().await;
        let table = {
            let mut core = self.core();
            if !core.api_tokens.revoke(id) {
                return Err(AuthError::UnknownApiToken);
            }
            self.announce(
                &mut core,
                vec![Ended {
                    id: SessionId(id.to_string()),
                    reason: EndReason::Revoked,
                }],
            );
            core.api_tokens.clone()
        };
        self.save_api_tokens(table).await?;
        tracing::info!(token_id = sessions::short_id(id), "API token revoked");
        Ok(())
    }

    async fn save_api_tokens(&self, table: ApiTokenTable) -> Result<(), AuthError> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.save_api_tokens(&table)).await?
    }

    /// End the session holding `token` (logout). Durable before it returns.
    pub async fn revoke(&self, token: &str) -> Result<(), AuthError> {
        let hash = TokenHash::of(token);
        {
            let mut core = self.core();
            let id = core
                .sessions
                .revoke(&hash)
                .ok_or(AuthError::InvalidSession)?;
            core.generation += 1;
            self.announce(
                &mut core,
                vec![Ended {
                    id,
                    reason: EndReason::Revoked,
                }],
            );
        }
        self.persist().await
    }

    /// Issue a one-time WebSocket ticket for the session holding `token`.
    pub fn issue_ticket(&self, token: &str) -> Result<IssuedTicket, AuthError> {
        let view = self.validate(token)?;
        let ticket = sessions::random_token().map_err(|e| AuthError::Hash(e.to_string()))?;
        let now = self.now_ms();
        let expires_at_ms = now + i64::from(self.inner.config.ws_ticket_ttl_s) * 1000;
        self.core()
            .tickets
            .insert(TokenHash::of(&ticket), view.id, now, expires_at_ms);
        Ok(IssuedTicket {
            ticket,
            expires_at_ms,
        })
    }

    /// Redeem a ticket once; its session must still be live (and counts as used).
    pub fn redeem_ticket(&self, ticket: &str) -> Result<SessionView, AuthError> {
        let hash = TokenHash::of(ticket);
        let now = self.now_ms();
        let mut core = self.core();
        let id = core
            .tickets
            .redeem(&hash, now)
            .ok_or(AuthError::InvalidTicket)?;
        let view = core
            .sessions
            .touch_id(&id, now)
            .ok_or(AuthError::InvalidTicket)?;
        core.lazy_dirty = true;
        Ok(view)
    }

    /// The physical reset (button held 15 s): delete the password and every session.
    pub async fn physical_reset(&self) -> Result<(), AuthError> {
        let _exclusive = self.inner.password_lock.lock().await;
        {
            let mut core = self.core();
            // Unset in memory first: logins hashing right now fail their re-check, and new
            // ones get NotSet, so no session can be created after the table is cleared.
            core.password = PasswordState::Unset;
            self.inner.password_set.send_replace(false);
            let mut ended = core.sessions.clear();
            // The auth record is the password, the sessions and the API tokens: all go.
            ended.extend(core.api_tokens.tokens.drain(..).map(|t| Ended {
                id: SessionId(t.id),
                reason: EndReason::PasswordReset,
            }));
            core.tickets.clear();
            core.generation += 1;
            self.announce(&mut core, ended);
        }
        // Sessions first: a crash in between leaves a password and no sessions (press again),
        // never sessions that outlive their password.
        self.persist().await?;
        self.save_api_tokens(ApiTokenTable::default()).await?;
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.remove_password()).await??;
        tracing::warn!("physical reset: password and all sessions cleared");
        Ok(())
    }

    /// Write idle touches and expiry removals if any are pending (called periodically and at
    /// shutdown).
    pub async fn flush(&self) -> Result<(), AuthError> {
        {
            let mut core = self.core();
            if !core.lazy_dirty {
                return Ok(());
            }
            core.lazy_dirty = false;
            core.generation += 1;
        }
        let result = self.persist().await;
        if result.is_err() {
            self.core().lazy_dirty = true;
        }
        result
    }

    /// Stop hashing (pending logins fail with UNAVAILABLE).
    pub fn close(&self) {
        self.inner.hasher.close();
    }

    /// Make the current session table durable. Concurrent callers coalesce: whoever holds
    /// the writer lock writes the newest table, and a caller whose change is already covered
    /// by a newer write returns without writing.
    async fn persist(&self) -> Result<(), AuthError> {
        let mut written = self.inner.written.lock().await;
        let (generation, bytes) = {
            let mut core = self.core();
            if core.generation <= *written {
                return Ok(());
            }
            // This write carries every lazy change too.
            core.lazy_dirty = false;
            (core.generation, Store::encode_sessions(&core.sessions))
        };
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.save_sessions_bytes(&bytes)).await??;
        *written = generation;
        Ok(())
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}
