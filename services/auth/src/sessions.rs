//! The session table: pure rules, no I/O, time passed in by the caller.
//!
//! A session is found by the SHA-256 of its bearer token; the token itself is never stored.
//! Lookups scan every record with a constant-time comparison, so the time a lookup takes does
//! not depend on how much of a guessed hash matches (32 records × 32 bytes is cheap).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A session expires this long after it was issued, however active (spec: 30 days).
pub const ABSOLUTE_LIFETIME_MS: i64 = 30 * 24 * 3600 * 1000;
/// A session expires after this long without use (spec: 8 hours).
pub const IDLE_TIMEOUT_MS: i64 = 8 * 3600 * 1000;
/// At most this many sessions are active; issuing one more evicts the oldest (spec: 32).
pub const MAX_SESSIONS: usize = 32;
/// Bearer token entropy: 256 bits.
pub const TOKEN_BYTES: usize = 32;
/// Session id length in random bytes (public identifier, not a secret).
const SESSION_ID_BYTES: usize = 12;

/// 32 random bytes from the OS, base64url without padding (43 characters).
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// A random public session id (hex).
pub fn random_session_id() -> Result<SessionId, getrandom::Error> {
    let mut bytes = [0u8; SESSION_ID_BYTES];
    getrandom::fill(&mut bytes)?;
    Ok(SessionId(hex::encode(bytes)))
}

/// The SHA-256 of a bearer token or ticket: what is stored and compared.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// Hash a presented token (any string; unknown ones simply match nothing).
    pub fn of(token: &str) -> Self {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    /// Constant-time equality.
    pub fn ct_eq(&self, other: &TokenHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Even a hash is not for the logs: it identifies a live credential.
        f.write_str("TokenHash(..)")
    }
}

impl From<TokenHash> for String {
    fn from(h: TokenHash) -> String {
        hex::encode(h.0)
    }
}

impl TryFrom<String> for TokenHash {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(&s, &mut out).map_err(|e| format!("token hash: {e}"))?;
        Ok(TokenHash(out))
    }
}

/// The public id of a session (appears in revocations and logs; not a credential).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub String);

/// Display is for the logs only (the APIs serialize the whole id): [`short_id`].
impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(short_id(&self.0))
    }
}

/// The first 8 of an id's 24 hex digits: enough to follow one session through the logs, while
/// a log shipped off the miner does not carry the ids an owner revokes sessions and tokens by.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// One session record as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Public id.
    pub id: SessionId,
    /// SHA-256 of the bearer token.
    #[serde(rename = "token_sha256")]
    pub token_hash: TokenHash,
    /// When it was issued, Unix ms.
    pub created_ms: i64,
    /// Last successful validation, Unix ms.
    pub last_used_ms: i64,
    /// Client address at login (for an operator listing sessions).
    #[serde(default)]
    pub client_ip: String,
    /// User agent at login.
    #[serde(default)]
    pub user_agent: String,
}

impl Session {
    /// Absolute expiry, Unix ms.
    pub fn expires_at_ms(&self) -> i64 {
        self.created_ms.saturating_add(ABSOLUTE_LIFETIME_MS)
    }
    /// Idle expiry given the last use, Unix ms.
    pub fn idle_expires_at_ms(&self) -> i64 {
        self.last_used_ms.saturating_add(IDLE_TIMEOUT_MS)
    }
    /// Whether the session still authenticates at `now_ms`.
    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.expires_at_ms() && now_ms < self.idle_expires_at_ms()
    }
    /// What a caller learns about a live session.
    pub fn view(&self) -> SessionView {
        SessionView {
            id: self.id.clone(),
            expires_at_ms: self.expires_at_ms(),
            idle_expires_at_ms: self.idle_expires_at_ms(),
            read_only: false,
        }
    }
}

/// A live session as reported to callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// Public id.
    pub id: SessionId,
    /// Absolute expiry, Unix ms.
    pub expires_at_ms: i64,
    /// Idle expiry, Unix ms (moves on every use).
    pub idle_expires_at_ms: i64,
    /// A read-only API token rather than an owner session (expiries are then 0: none).
    pub read_only: bool,
}

/// Why a session left the table, as reported on the revocation stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The holder logged out.
    Revoked,
    /// A newer session pushed it out of the 32.
    Evicted,
    /// Idle or absolute expiry passed.
    Expired,
    /// The physical reset cleared the auth record.
    PasswordReset,
}

impl EndReason {
    /// The wire word (see `Revocation.reason` in auth.proto).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Revoked => "revoked",
            EndReason::Evicted => "evicted",
            EndReason::Expired => "expired",
            EndReason::PasswordReset => "password_reset",
        }
    }
}

/// A session that left the table and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Which one.
    pub id: SessionId,
    /// Why.
    pub reason: EndReason,
}

/// What a validation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// Live; its idle expiry was moved to now + 8 h.
    Live(SessionView),
    /// Found but expired; it has been removed.
    Expired(SessionId),
    /// No such token.
    Unknown,
}

/// All sessions, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionTable {
    sessions: Vec<Session>,
}

impl SessionTable {
    /// Add a session issued at `now_ms`. Expired records are dropped first; if 32 remain, the
    /// oldest are evicted. Returns what left the table.
    pub fn insert(&mut self, session: Session, now_ms: i64) -> Vec<Ended> {
        let mut ended = self.purge_expired(now_ms);
        // Oldest = earliest issued; the vector is kept in issue order, so that is the front.
        while self.sessions.len() >= MAX_SESSIONS {
            let old = self.sessions.remove(0);
            ended.push(Ended {
                id: old.id,
                reason: EndReason::Evicted,
            });
        }
        self.sessions.push(session);
        ended
    }

    /// Look a token up and, when live, mark it used at `now_ms`.
    pub fn validate(&mut self, hash: &TokenHash, now_ms: i64) -> Validation {
        let Some(i) = self.position(hash) else {
            return Validation::Unknown;
        };
        if !self.sessions[i].is_live(now_ms) {
            let gone = self.sessions.remove(i);
            return Validation::Expired(gone.id);
        }
        let s = &mut self.sessions[i];
        s.last_used_ms = s.last_used_ms.max(now_ms);
        Validation::Live(s.view())
    }

    /// Mark the session with this id used at `now_ms` if it is live.
    pub fn touch_id(&mut self, id: &SessionId, now_ms: i64) -> Option<SessionView> {
        let s = self
            .sessions
            .iter_mut()
            .find(|s| &s.id == id && s.is_live(now_ms))?;
        s.last_used_ms = s.last_used_ms.max(now_ms);
        Some(s.view())
    }

    /// Remove the session holding this token. Returns its id if there was one.
    pub fn revoke(&mut self, hash: &TokenHash) -> Option<SessionId> {
        let i = self.position(hash)?;
        Some(self.sessions.remove(i).id)
    }

    /// Remove a session by id (rolls back an insert whose persistence failed).
    pub fn remove_id(&mut self, id: &SessionId) -> bool {
        let before = self.sessions.len();
        self.sessions.retain(|s| &s.id != id);
        before != self.sessions.len()
    }

    /// Drop every record that no longer authenticates at `now_ms`.
    pub fn purge_expired(&mut self, now_ms: i64) -> Vec<Ended> {
        let mut ended = Vec::new();
        self.sessions.retain(|s| {
            let live = s.is_live(now_ms);
            if !live {
                ended.push(Ended {
                    id: s.id.clone(),
                    reason: EndReason::Expired,
                });
            }
            live
        });
        ended
    }

    /// Remove every session but `keep` (a password change); returns what left.
    pub fn retain_only(&mut self, keep: &SessionId) -> Vec<Ended> {
        let mut ended = Vec::new();
        self.sessions.retain(|s| {
            if &s.id == keep {
                return true;
            }
            ended.push(Ended {
                id: s.id.clone(),
                reason: EndReason::Revoked,
            });
            false
        });
        ended
    }

    /// Remove everything (physical reset).
    pub fn clear(&mut self) -> Vec<Ended> {
        self.sessions
            .drain(..)
            .map(|s| Ended {
                id: s.id,
                reason: EndReason::PasswordReset,
            })
            .collect()
    }

    /// Sessions that authenticate at `now_ms`.
    pub fn active_count(&self, now_ms: i64) -> usize {
        self.sessions.iter().filter(|s| s.is_live(now_ms)).count()
    }

    /// Number of records (live or not yet purged).
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Records in issue order (oldest first).
    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.sessions.iter()
    }

    /// Restore issue order after loading a file someone may have edited.
    pub fn normalise(&mut self) {
        self.sessions.sort_by_key(|s| s.created_ms);
        let excess = self.sessions.len().saturating_sub(MAX_SESSIONS);
        self.sessions.drain(..excess);
    }

    fn position(&self, hash: &TokenHash) -> Option<usize> {
        // No early exit: every record is compared, in constant time each.
        let mut found = None;
        for (i, s) in self.sessions.iter().enumerate() {
            if s.token_hash.ct_eq(hash) {
                found = Some(i);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;
    const HOUR: i64 = 3600 * 1000;

    #[test]
    fn logs_show_a_short_session_id() {
        let id = random_session_id().unwrap();
        assert_eq!(id.0.len(), 24);
        assert_eq!(id.to_string(), id.0[..8]);
        assert_eq!(short_id("abc"), "abc");
        // The APIs still carry the whole id.
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{}\"", id.0));
    }

    fn session(n: u8, at: i64) -> (Session, TokenHash) {
        let token = format!("token-{n}");
        let hash = TokenHash::of(&token);
        (
            Session {
                id: SessionId(format!("s{n}")),
                token_hash: hash,
                created_ms: at,
                last_used_ms: at,
                client_ip: String::new(),
                user_agent: String::new(),
            },
            hash,
        )
    }

    fn live_id(v: Validation) -> String {
        match v {
            Validation::Live(view) => view.id.0,
            other => panic!("expected live, got {other:?}"),
        }
    }

    #[test]
    fn tokens_are_256_bit_and_distinct() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn idle_expiry_table() {
        // (idle gap before the check, live?)
        let table = [
            (0, true),
            (IDLE_TIMEOUT_MS - 1, true),
            (IDLE_TIMEOUT_MS, false),
            (IDLE_TIMEOUT_MS + HOUR, false),
        ];
        for (gap, want_live) in table {
            let mut t = SessionTable::default();
            let (s, h) = session(1, T0);
            t.insert(s, T0);
            let got = t.validate(&h, T0 + gap);
            assert_eq!(matches!(got, Validation::Live(_)), want_live, "gap {gap}");
            if !want_live {
                assert_eq!(got, Validation::Expired(SessionId("s1".into())));
                assert!(t.is_empty(), "expired record removed");
            }
        }
    }

    #[test]
    fn use_moves_idle_expiry_but_not_absolute() {
        let mut t = SessionTable::default();
        let (s, h) = session(1, T0);
        t.insert(s, T0);
        // Used every 7 h: never idle, until the 30-day absolute limit.
        let mut now = T0;
        while now + 7 * HOUR < T0 + ABSOLUTE_LIFETIME_MS {
            now += 7 * HOUR;
            let Validation::Live(v) = t.validate(&h, now) else {
                panic!("expired early at +{} h", (now - T0) / HOUR)
            };
            assert_eq!(v.idle_expires_at_ms, now + IDLE_TIMEOUT_MS);
            assert_eq!(v.expires_at_ms, T0 + ABSOLUTE_LIFETIME_MS);
        }
        assert!(matches!(
            t.validate(&h, T0 + ABSOLUTE_LIFETIME_MS),
            Validation::Expired(_)
        ));
    }

    #[test]
    fn thirty_third_evicts_the_oldest() {
        let mut t = SessionTable::default();
        let mut hashes = Vec::new();
        for n in 0..MAX_SESSIONS as u8 {
            let (s, h) = session(n, T0 + n as i64);
            assert!(t.insert(s, T0 + 100).is_empty());
            hashes.push(h);
        }
        let (s, h33) = session(200, T0 + 200);
        let ended = t.insert(s, T0 + 200);
        assert_eq!(
            ended,
            vec![Ended {
                id: SessionId("s0".into()),
                reason: EndReason::Evicted
            }]
        );
        assert_eq!(t.len(), MAX_SESSIONS);
        assert_eq!(t.validate(&hashes[0], T0 + 201), Validation::Unknown);
        assert_eq!(live_id(t.validate(&hashes[1], T0 + 201)), "s1");
        assert_eq!(live_id(t.validate(&h33, T0 + 201)), "s200");
    }

    #[test]
    fn expired_records_make_room_before_eviction() {
        let mut t = SessionTable::default();
        let (old, _) = session(0, T0);
        t.insert(old, T0);
        for n in 1..MAX_SESSIONS as u8 {
            let (s, _) = session(n, T0 + 7 * HOUR);
            assert!(t.insert(s, T0 + 7 * HOUR).is_empty());
        }
        // At 8 h s0 is idle-expired: it goes as "expired", nobody live is evicted.
        let (s, _) = session(99, T0 + IDLE_TIMEOUT_MS);
        let ended = t.insert(s, T0 + IDLE_TIMEOUT_MS);
        assert_eq!(
            ended,
            vec![Ended {
                id: SessionId("s0".into()),
                reason: EndReason::Expired
            }]
        );
    }

    #[test]
    fn revoke_and_clear() {
        let mut t = SessionTable::default();
        let (a, ha) = session(1, T0);
        let (b, hb) = session(2, T0);
        t.insert(a, T0);
        t.insert(b, T0);
        assert_eq!(t.revoke(&ha), Some(SessionId("s1".into())));
        assert_eq!(t.revoke(&ha), None);
        assert_eq!(t.validate(&ha, T0), Validation::Unknown);
        assert_eq!(live_id(t.validate(&hb, T0)), "s2");
        let ended = t.clear();
        assert_eq!(ended[0].reason, EndReason::PasswordReset);
        assert_eq!(t.validate(&hb, T0), Validation::Unknown);
    }

    #[test]
    fn serde_round_trip_keeps_only_hashes() {
        let mut t = SessionTable::default();
        let (s, h) = session(1, T0);
        t.insert(s, T0);
        let json = serde_json::to_string(&t).unwrap();
        assert!(
            !json.contains("token-1"),
            "the token itself is never stored"
        );
        assert!(json.contains(&String::from(h)));
        let back: SessionTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }
}
