//! The MCP endpoint: one registry row; the server itself lives in [`crate::mcp`].

use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(POST "/mcp", Bearer, P, Integrations, Full, "MCP server: read-only monitoring tools for any agent, control tools for the owner session", crate::mcp::handle),
    ]
}
