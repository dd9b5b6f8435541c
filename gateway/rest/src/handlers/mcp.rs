//! The MCP endpoint: one registry row mounting the `svcos-mcp` server, and what the gateway
//! lends it ([`svcos_mcp::Gateway`]): in-process route calls, the owner check, pool switching.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use futures::future::BoxFuture;
use serde_json::Value;
use svcos_mcp::RestAnswer;
use svcos_proto::stratum::v1::SwitchPoolRequest;

use crate::authn::Session;
use crate::envelope::ApiError;
use crate::routing::{Route, mode_rank, required_mode};
use crate::{AppState, dispatch, guard, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/mcp", Bearer, P, Integrations, Full, "MCP server: read-only monitoring tools for any agent, control tools for the owner session", handle),
    ]
}

async fn handle(State(state): State<AppState>, req: Request) -> Response {
    let max_body_bytes = state.config().api.max_body_bytes;
    svcos_mcp::handle(Arc::new(McpGateway(state)), max_body_bytes, req).await
}

struct McpGateway(AppState);

impl svcos_mcp::Gateway for McpGateway {
    fn call<'a>(
        &'a self,
        authorization: Option<&'a HeaderValue>,
        method: Method,
        path: &'static str,
        body: Option<&'a Value>,
    ) -> BoxFuture<'a, RestAnswer> {
        Box::pin(dispatch::call(&self.0, authorization, method, path, body))
    }

    fn is_owner(&self, parts: &Parts) -> bool {
        is_owner(parts)
    }

    fn switch_pool(&self, index: u32) -> BoxFuture<'_, Result<(), Value>> {
        Box::pin(async move {
            // No REST row of its own: check the mode its nearest REST relative needs.
            let mode = self.0.config().system.mode;
            let required = required_mode("/api/pools");
            if mode_rank(mode) < mode_rank(required) {
                return Err(guard::mode_forbidden(mode, required).body());
            }
            let mut stratum = self.0.peers.stratum.clone();
            match stratum.switch_pool(SwitchPoolRequest { index }).await {
                Ok(_) => Ok(()),
                Err(s) => Err(ApiError::from_grpc("stratum-agent", &s).body()),
            }
        })
    }
}

/// Only a session that `AuthService.ValidateSession` accepted (the guard of `POST /mcp` puts it
/// in the request extensions) and that is not a read-only API token is an owner session:
/// sessions are created only by a login with the owner's password. No other credential (a `/ws`
/// ticket, open `/metrics`) ever becomes one.
fn is_owner(parts: &Parts) -> bool {
    parts
        .extensions
        .get::<Session>()
        .is_some_and(|s| !s.read_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_needs_a_validated_session() {
        let (mut with_session, _) = axum::http::Request::new(()).into_parts();
        with_session.extensions.insert(Session {
            read_only: false,
            session_id: "s1".into(),
        });
        let (without, _) = axum::http::Request::new(()).into_parts();
        let (mut api_token, _) = axum::http::Request::new(()).into_parts();
        api_token.extensions.insert(Session {
            read_only: true,
            session_id: "tok-1".into(),
        });
        assert!(is_owner(&with_session));
        assert!(!is_owner(&api_token));
        assert!(!is_owner(&without));
    }
}
