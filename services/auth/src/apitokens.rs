//! Scoped read-only API tokens: long-lived credentials an owner hands to Home Assistant, a
//! fleet tool or an agent. They read, never write (the gateway's guard refuses every write
//! presented with one), and are stored like sessions: only the SHA-256 of the token is kept,
//! found with constant-time comparisons. Pure rules, no I/O; time passed in.

use serde::{Deserialize, Serialize};

use crate::sessions::{TokenHash, random_session_id, random_token};

/// Tokens an owner may hold at once.
pub const MAX_API_TOKENS: usize = 16;
/// Longest token name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Every API token starts with this, so a leaked one is recognisable (and never mistaken for a
/// session token in a log or a bug report).
pub const TOKEN_PREFIX: &str = "svcro_";
/// The only scope.
pub const SCOPE_READ: &str = "read";

/// One token as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiToken {
    /// Public id (hex).
    pub id: String,
    /// What the owner called it ("home-assistant").
    pub name: String,
    /// Always [`SCOPE_READ`].
    pub scope: String,
    /// SHA-256 of the token.
    #[serde(rename = "token_sha256")]
    pub token_hash: TokenHash,
    /// Unix ms.
    pub created_ms: i64,
    /// Unix ms of the last validation (0 = never).
    #[serde(default)]
    pub last_used_ms: i64,
}

/// Why a token could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// Empty, too long, or with characters other than letters, digits, space, `-_.`.
    BadName,
    /// [`MAX_API_TOKENS`] exist already.
    Full,
    /// The OS gave no randomness.
    Random(String),
}

/// Every API token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiTokenTable {
    /// File format version.
    pub version: u32,
    /// Oldest first.
    pub tokens: Vec<ApiToken>,
}

impl ApiTokenTable {
    /// Make a token named `name` at `now_ms`; returns the token (shown once) and its record.
    pub fn create(&mut self, name: &str, now_ms: i64) -> Result<(String, ApiToken), CreateError> {
        let name = name.trim();
        let name_ok = !name.is_empty()
            && name.chars().count() <= MAX_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.'));
        if !name_ok {
            return Err(CreateError::BadName);
        }
        if self.tokens.len() >= MAX_API_TOKENS {
            return Err(CreateError::Full);
        }
        let secret = random_token().map_err(|e| CreateError::Random(e.to_string()))?;
        let id = random_session_id().map_err(|e| CreateError::Random(e.to_string()))?;
        let token = format!("{TOKEN_PREFIX}{secret}");
        let record = ApiToken {
            id: format!("tok-{}", id.0),
            name: name.to_string(),
            scope: SCOPE_READ.into(),
            token_hash: TokenHash::of(&token),
            created_ms: now_ms,
            last_used_ms: 0,
        };
        self.version = 1;
        self.tokens.push(record.clone());
        Ok((token, record))
    }

    /// The record of a presented token, marked used at `now_ms`.
    pub fn validate(&mut self, token: &str, now_ms: i64) -> Option<&ApiToken> {
        if !token.starts_with(TOKEN_PREFIX) {
            return None;
        }
        let hash = TokenHash::of(token);
        // No early exit: every record is compared, in constant time each.
        let mut found = None;
        for (i, t) in self.tokens.iter().enumerate() {
            if t.token_hash.ct_eq(&hash) {
                found = Some(i);
            }
        }
        let t = &mut self.tokens[found?];
        t.last_used_ms = t.last_used_ms.max(now_ms);
        Some(t)
    }

    /// Remove a token by id; whether it existed.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.tokens.len();
        self.tokens.retain(|t| t.id != id);
        before != self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_validate_revoke() {
        let mut t = ApiTokenTable::default();
        let (token, rec) = t.create("home-assistant", 1_000).unwrap();
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(rec.scope, "read");
        let json = serde_json::to_string(&t).unwrap();
        assert!(!json.contains(&token), "only the hash is stored");
        assert_eq!(t.validate(&token, 2_000).unwrap().id, rec.id);
        assert_eq!(t.tokens[0].last_used_ms, 2_000);
        assert!(t.validate("svcro_guess", 2_000).is_none());
        assert!(t.validate(&token[TOKEN_PREFIX.len()..], 2_000).is_none());
        assert!(t.revoke(&rec.id));
        assert!(!t.revoke(&rec.id));
        assert!(t.validate(&token, 3_000).is_none());
    }

    #[test]
    fn names_and_the_cap() {
        let mut t = ApiTokenTable::default();
        for bad in ["", "   ", "a\nb", "x/y", &"n".repeat(65)] {
            assert_eq!(
                t.create(bad, 0).unwrap_err(),
                CreateError::BadName,
                "{bad:?}"
            );
        }
        for i in 0..MAX_API_TOKENS {
            t.create(&format!("fleet {i}"), 0).unwrap();
        }
        assert_eq!(t.create("one more", 0).unwrap_err(), CreateError::Full);
    }
}
