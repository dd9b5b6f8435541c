//! Authentication: `/api/auth/*` (sessions, first-boot password, WebSocket tickets, password
//! change, read-only API tokens).

use serde::Serialize;
use svcos_proto::auth::v1::ApiToken;

/// `POST /api/auth/session` (`svcos.api.auth.session.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionBody {
    /// `svcos.api.auth.session.v1`.
    pub schema: &'static str,
    /// The bearer token.
    pub token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Absolute expiry, Unix s.
    pub expires_at: i64,
    /// Expiry if unused, Unix s (moves with use).
    pub idle_expires_at: i64,
}

impl SessionBody {
    /// A new session's answer.
    pub fn new(token: String, expires_at: i64, idle_expires_at: i64) -> Self {
        SessionBody {
            schema: "svcos.api.auth.session.v1",
            token,
            token_type: "Bearer",
            expires_at,
            idle_expires_at,
        }
    }
}

/// `DELETE /api/auth/session/current` (`svcos.api.auth.logout.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogoutBody {
    /// `svcos.api.auth.logout.v1`.
    pub schema: &'static str,
    /// Always `true`.
    pub revoked: bool,
}

/// The logout answer.
pub const LOGOUT: LogoutBody = LogoutBody {
    schema: "svcos.api.auth.logout.v1",
    revoked: true,
};

/// `POST /api/auth/setup` (`svcos.api.auth.setup.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SetupBody {
    /// `svcos.api.auth.setup.v1`.
    pub schema: &'static str,
    /// Always `true`.
    pub password_set: bool,
    /// What to do next.
    pub next: &'static str,
}

/// The first-boot password answer.
pub const SETUP_DONE: SetupBody = SetupBody {
    schema: "svcos.api.auth.setup.v1",
    password_set: true,
    next: "POST /api/auth/session with the password",
};

/// `GET /api/auth/status` (`svcos.api.auth.status.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AuthStatusBody {
    /// `svcos.api.auth.status.v1`.
    pub schema: &'static str,
    /// A password has been set.
    pub password_set: bool,
    /// `POST /api/auth/setup` is still open.
    pub setup_required: bool,
    /// `[api].websocket_tickets`: /ws needs a one-time ticket.
    pub websocket_tickets: bool,
}

impl AuthStatusBody {
    /// The status from whether a password is set and the ticket setting.
    pub fn new(password_set: bool, websocket_tickets: bool) -> Self {
        AuthStatusBody {
            schema: "svcos.api.auth.status.v1",
            password_set,
            setup_required: !password_set,
            websocket_tickets,
        }
    }
}

/// `POST /api/auth/ws-ticket` (`svcos.api.auth.ws_ticket.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WsTicketBody {
    /// `svcos.api.auth.ws_ticket.v1`.
    pub schema: &'static str,
    /// The one-time ticket.
    pub ticket: String,
    /// Expiry, Unix s.
    pub expires_at: i64,
    /// How to use it.
    pub usage: &'static str,
}

impl WsTicketBody {
    /// A new ticket's answer.
    pub fn new(ticket: String, expires_at: i64) -> Self {
        WsTicketBody {
            schema: "svcos.api.auth.ws_ticket.v1",
            ticket,
            expires_at,
            usage: "connect to /ws?ticket=<ticket> on the API port; a ticket works once",
        }
    }
}

/// `POST /api/auth/password` (`svcos.api.auth.password.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PasswordChangedBody {
    /// `svcos.api.auth.password.v1`.
    pub schema: &'static str,
    /// Always `true`.
    pub changed: bool,
    /// Other sessions logged out.
    pub sessions_revoked: u32,
    /// What stays valid.
    pub note: &'static str,
}

impl PasswordChangedBody {
    /// The answer to a password change that revoked `sessions_revoked` sessions.
    pub fn new(sessions_revoked: u32) -> Self {
        PasswordChangedBody {
            schema: "svcos.api.auth.password.v1",
            changed: true,
            sessions_revoked,
            note: "every other session was logged out; this one stays; API tokens stay",
        }
    }
}

/// A read-only API token (never its secret).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Token {
    /// Token id (what `DELETE /api/auth/tokens/:id` takes).
    pub id: String,
    /// The name given at creation.
    pub name: String,
    /// Always `read`.
    pub scope: String,
    /// Creation, Unix s.
    pub created_at: i64,
    /// Last use, Unix s; `null` when never used.
    pub last_used_at: Option<i64>,
}

impl From<&ApiToken> for Token {
    fn from(t: &ApiToken) -> Self {
        Token {
            id: t.id.clone(),
            name: t.name.clone(),
            scope: t.scope.clone(),
            created_at: t.created_at_unix,
            last_used_at: (t.last_used_at_unix > 0).then_some(t.last_used_at_unix),
        }
    }
}

/// `GET /api/auth/tokens` (`svcos.api.auth.tokens.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokensBody {
    /// `svcos.api.auth.tokens.v1`.
    pub schema: &'static str,
    /// Every token.
    pub tokens: Vec<Token>,
    /// Most tokens auth keeps.
    pub max: u32,
}

impl From<&[ApiToken]> for TokensBody {
    fn from(t: &[ApiToken]) -> Self {
        TokensBody {
            schema: "svcos.api.auth.tokens.v1",
            tokens: t.iter().map(Token::from).collect(),
            max: 16,
        }
    }
}

/// `POST /api/auth/tokens` (`svcos.api.auth.token.v1`): the token's record and, once, its secret.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreatedTokenBody {
    /// `svcos.api.auth.token.v1`.
    pub schema: &'static str,
    /// The record (absent if auth did not return it).
    #[serde(flatten)]
    pub info: Option<Token>,
    /// The bearer secret.
    pub token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// It is not shown again.
    pub note: &'static str,
}

impl CreatedTokenBody {
    /// A new token's answer.
    pub fn new(info: Option<&ApiToken>, token: String) -> Self {
        CreatedTokenBody {
            schema: "svcos.api.auth.token.v1",
            info: info.map(Token::from),
            token,
            token_type: "Bearer",
            note: "shown once: only its hash is kept",
        }
    }
}

/// `DELETE /api/auth/tokens/:id` (`svcos.api.auth.token_revoked.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenRevokedBody {
    /// `svcos.api.auth.token_revoked.v1`.
    pub schema: &'static str,
    /// The revoked token's id.
    pub id: String,
    /// Always `true`.
    pub revoked: bool,
}

impl TokenRevokedBody {
    /// The answer to revoking `id`.
    pub fn new(id: String) -> Self {
        TokenRevokedBody {
            schema: "svcos.api.auth.token_revoked.v1",
            id,
            revoked: true,
        }
    }
}
