//! The MCP endpoint.
//! Operations still marked `planned!` answer 501 with the envelope until their feature lands.

use crate::planned;
use crate::registry::Route;

/// This module's rows of the registry.
pub fn routes() -> Vec<Route> {
    vec![planned!(POST "/mcp", P, Integrations, "the MCP endpoint")]
}
