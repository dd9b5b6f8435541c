//! One-time WebSocket tickets (pure; time passed in). Kept in memory only: they live seconds,
//! and an auth restart simply makes the browser ask for a new one.

use crate::sessions::{SessionId, TokenHash};

/// Outstanding tickets at most; the oldest is dropped beyond this.
const MAX_TICKETS: usize = 64;

#[derive(Debug, Clone)]
struct Ticket {
    hash: TokenHash,
    session: SessionId,
    expires_ms: i64,
}

/// Tickets waiting to be redeemed.
#[derive(Debug, Clone, Default)]
pub struct TicketStore {
    tickets: Vec<Ticket>,
}

impl TicketStore {
    /// Remember a ticket (by hash) for `session`, valid until `expires_ms`.
    pub fn insert(&mut self, hash: TokenHash, session: SessionId, now_ms: i64, expires_ms: i64) {
        self.tickets.retain(|t| t.expires_ms > now_ms);
        if self.tickets.len() >= MAX_TICKETS {
            self.tickets.remove(0);
        }
        self.tickets.push(Ticket {
            hash,
            session,
            expires_ms,
        });
    }

    /// Take a ticket out (single use: a second redeem finds nothing). Returns its session if
    /// it had not expired.
    pub fn redeem(&mut self, hash: &TokenHash, now_ms: i64) -> Option<SessionId> {
        let mut found = None;
        for (i, t) in self.tickets.iter().enumerate() {
            if t.hash.ct_eq(hash) {
                found = Some(i);
            }
        }
        let ticket = self.tickets.remove(found?);
        (now_ms < ticket.expires_ms).then_some(ticket.session)
    }

    /// Forget the tickets of a session that ended.
    pub fn drop_session(&mut self, session: &SessionId) {
        self.tickets.retain(|t| &t.session != session);
    }

    /// Forget everything (physical reset).
    pub fn clear(&mut self) {
        self.tickets.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_use_and_expiry() {
        let mut store = TicketStore::default();
        let s = SessionId("s".into());
        let a = TokenHash::of("a");
        let b = TokenHash::of("b");
        store.insert(a, s.clone(), 0, 30_000);
        store.insert(b, s.clone(), 0, 30_000);
        assert_eq!(store.redeem(&a, 29_999), Some(s.clone()));
        assert_eq!(store.redeem(&a, 29_999), None, "second use");
        assert_eq!(store.redeem(&b, 30_000), None, "expired");
        assert_eq!(
            store.redeem(&b, 0),
            None,
            "an expired redeem still consumes it"
        );
    }

    #[test]
    fn ended_session_takes_its_tickets() {
        let mut store = TicketStore::default();
        let a = TokenHash::of("a");
        store.insert(a, SessionId("s".into()), 0, 30_000);
        store.drop_session(&SessionId("s".into()));
        assert_eq!(store.redeem(&a, 1), None);
    }
}
