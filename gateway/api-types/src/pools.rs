//! Pools: `GET /api/pools`.

use serde::Serialize;

use crate::status::Pool;

/// One configured pool with its live state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfiguredPool {
    /// Position in the configured list.
    pub index: u32,
    /// Pool URL, user-info masked.
    pub url: String,
    /// Worker name.
    pub user: String,
    /// Always the mask `********` (sending it back keeps the stored password).
    pub password: &'static str,
    /// Failover priority (0 first).
    pub priority: u32,
    /// Load-balancing quota (0 = failover only).
    pub quota: u32,
    /// Configured on.
    pub enabled: bool,
    /// Live state; `null` while stratum-agent is down or does not list the pool.
    pub status: Option<Pool>,
}

/// `GET /api/pools` (`svcos.api.pools.v1`).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolsBody {
    /// `svcos.api.pools.v1`.
    pub schema: &'static str,
    /// The gateway receives stratum-agent's pool stream.
    pub stratum_agent_up: bool,
    /// Index of the pool receiving shares; `null` while stratum-agent is down.
    pub active_index: Option<i32>,
    /// The configured list.
    pub pools: Vec<ConfiguredPool>,
}
