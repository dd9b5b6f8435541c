//! Pools: the configured list, failover policy, pool tests and the Stratum V2 views.

#[cfg(feature = "schema")]
use crate::config::Patch;
use serde::Serialize;
#[cfg(feature = "schema")]
use svcos_common::config::PoolConfig;
use svcos_proto::stratum::v1::{
    GetSv2StatusResponse, PoolSwitch as ProtoPoolSwitch, TestPoolResponse,
};

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

/// One step of a pool test.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolTestStep {
    /// `connect`, `subscribe`, `authorize`, `job`, ...
    pub name: String,
    /// The step succeeded.
    pub ok: bool,
    /// Time it took, ms.
    pub elapsed_ms: f64,
    /// Why it failed; empty when `ok`.
    pub error: String,
}

/// `POST /api/pools/test`, `POST /api/setup/test-pool` (`svcos.api.pool_test.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolTestBody {
    /// `svcos.api.pool_test.v1`.
    pub schema: &'static str,
    /// Every step succeeded (a job arrived).
    pub ok: bool,
    /// The first failure; empty when `ok`.
    pub error: String,
    /// The steps in order, up to the first failure.
    pub steps: Vec<PoolTestStep>,
}

impl From<&TestPoolResponse> for PoolTestBody {
    fn from(r: &TestPoolResponse) -> Self {
        PoolTestBody {
            schema: "svcos.api.pool_test.v1",
            ok: r.ok,
            error: r.error.clone(),
            steps: r
                .steps
                .iter()
                .map(|s| PoolTestStep {
                    name: s.name.clone(),
                    ok: s.ok,
                    elapsed_ms: s.elapsed_ms,
                    error: s.error.clone(),
                })
                .collect(),
        }
    }
}

/// One switch between pools.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolSwitch {
    /// When, Unix ms.
    pub timestamp_ms: i64,
    /// The pool left (-1: none).
    pub from_index: i32,
    /// The pool taken.
    pub to_index: i32,
    /// Why (`failover`, `failback`, `quota`, ...).
    pub reason: String,
}

/// `GET /api/pools/failover_policy` (`svcos.api.failover_policy.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailoverPolicyBody {
    /// `svcos.api.failover_policy.v1`.
    pub schema: &'static str,
    /// `quota` when any pool has a quota, else `failover`.
    pub strategy: &'static str,
    /// Pool indexes in the order they are tried (priority, then list order).
    pub order: Vec<usize>,
    /// `[stratum].failback_hysteresis_s`, s.
    pub failback_hysteresis_s: u32,
    /// `[stratum].silent_timeout_s`, s.
    pub silent_timeout_s: u32,
    /// `[stratum].connect_timeout_s`, s.
    pub connect_timeout_s: u32,
    /// The pool receiving shares; `null` while stratum-agent is down.
    pub active_index: Option<i32>,
    /// Recent switches, oldest first; `null` while stratum-agent is down.
    pub recent_switches: Option<Vec<PoolSwitch>>,
}

impl From<&ProtoPoolSwitch> for PoolSwitch {
    fn from(s: &ProtoPoolSwitch) -> Self {
        PoolSwitch {
            timestamp_ms: s.timestamp_ms,
            from_index: s.from_index,
            to_index: s.to_index,
            reason: s.reason.clone(),
        }
    }
}

/// A Stratum protocol the miner speaks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StratumProtocol {
    /// `stratum-v1` or `stratum-v2`.
    pub name: &'static str,
    /// It may be used.
    pub enabled: bool,
    /// The config key that turns it on (absent when it is always on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<&'static str>,
}

/// The protocol of the pool receiving shares.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ActiveProtocol {
    /// Pool index.
    pub index: u32,
    /// `stratum-v1` or `stratum-v2`.
    pub protocol: String,
    /// Version rolling was negotiated.
    pub version_rolling: bool,
    /// The negotiated version mask, 8 hex digits.
    pub version_mask: String,
}

/// `GET /api/stratum/protocol` (`svcos.api.stratum_protocol.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StratumProtocolBody {
    /// `svcos.api.stratum_protocol.v1`.
    pub schema: &'static str,
    /// The protocols and whether each may be used.
    pub protocols: Vec<StratumProtocol>,
    /// `[stratum].version_rolling`.
    pub version_rolling: bool,
    /// The active pool's protocol; `null` while no pool is active or stratum-agent is down.
    pub active: Option<ActiveProtocol>,
}

/// The Stratum V2 channel (`null` before one opens).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2Channel {
    /// Channel id.
    pub id: u32,
    /// `standard`, `extended` or `group`.
    #[serde(rename = "type")]
    pub channel_type: String,
    /// The channel is open.
    pub open: bool,
    /// The share target, hex.
    pub target: String,
    /// The share difficulty.
    pub difficulty: f64,
    /// Extranonce prefix, hex.
    pub extranonce_prefix: String,
    /// Extranonce bytes the miner rolls.
    pub extranonce_size: u32,
    /// The group channel, 0 when none.
    pub group_channel_id: u32,
    /// Version mask, 8 hex digits.
    pub version_mask: String,
}

impl Sv2Channel {
    /// The channel of a status answer; `None` before a channel opens.
    pub fn of(r: &GetSv2StatusResponse) -> Option<Self> {
        (!r.channel_type.is_empty()).then(|| Sv2Channel {
            id: r.channel_id,
            channel_type: r.channel_type.clone(),
            open: r.channel_open,
            target: r.target.clone(),
            difficulty: r.difficulty,
            extranonce_prefix: r.extranonce_prefix.clone(),
            extranonce_size: r.extranonce_size,
            group_channel_id: r.group_channel_id,
            version_mask: format!("{:08x}", r.version_mask),
        })
    }
}

/// Shares over the Stratum V2 channel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2Shares {
    /// Accepted.
    pub accepted: u64,
    /// Rejected.
    pub rejected: u64,
}

/// `GET /api/pool/sv2/status` (`svcos.api.sv2.status.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2StatusBody {
    /// `svcos.api.sv2.status.v1`.
    pub schema: &'static str,
    /// `[stratum].sv2_enabled`.
    pub enabled: bool,
    /// Connection state.
    pub state: String,
    /// `host:port` of the SV2 pool; empty when none.
    pub endpoint: String,
    /// The SV2 pool's index; `null` when none is configured.
    pub pool_index: Option<i32>,
    /// The SV2 pool is the one receiving shares.
    pub active: bool,
    /// Noise handshake state.
    pub handshake: String,
    /// Negotiated protocol version; `null` before setup.
    pub protocol_version: Option<u32>,
    /// Negotiated setup flags.
    pub setup_flags: u32,
    /// The channel; `null` before one opens.
    pub channel: Option<Sv2Channel>,
    /// Jobs received on the channel.
    pub jobs_received: u64,
    /// Share counts.
    pub shares: Sv2Shares,
    /// The last error; empty when none.
    pub last_error: String,
}

impl From<&GetSv2StatusResponse> for Sv2StatusBody {
    fn from(r: &GetSv2StatusResponse) -> Self {
        Sv2StatusBody {
            schema: "svcos.api.sv2.status.v1",
            enabled: r.enabled,
            state: r.state.clone(),
            endpoint: r.endpoint.clone(),
            pool_index: (r.pool_index >= 0).then_some(r.pool_index),
            active: r.active,
            handshake: r.handshake.clone(),
            protocol_version: (r.protocol_version > 0).then_some(r.protocol_version),
            setup_flags: r.setup_flags,
            channel: Sv2Channel::of(r),
            jobs_received: r.jobs_received,
            shares: Sv2Shares {
                accepted: r.shares_accepted,
                rejected: r.shares_rejected,
            },
            last_error: r.last_error.clone(),
        }
    }
}

/// `GET /api/pool/sv2/handshake` (`svcos.api.sv2.handshake.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2HandshakeBody {
    /// `svcos.api.sv2.handshake.v1`.
    pub schema: &'static str,
    /// `[stratum].sv2_enabled`.
    pub enabled: bool,
    /// `host:port` of the SV2 pool; empty when none.
    pub endpoint: String,
    /// The Noise pattern.
    pub pattern: &'static str,
    /// Handshake state.
    pub state: String,
    /// What happened last (the failure when it failed).
    pub detail: String,
    /// When it completed, Unix ms; `null` before.
    pub completed_at_ms: Option<i64>,
    /// The pool authority's public key (base58); empty before the handshake.
    pub authority_pubkey: String,
    /// Its fingerprint; empty before the handshake.
    pub authority_fingerprint: String,
    /// Negotiated protocol version; `null` before setup.
    pub protocol_version: Option<u32>,
    /// Negotiated setup flags.
    pub setup_flags: u32,
}

impl From<&GetSv2StatusResponse> for Sv2HandshakeBody {
    fn from(r: &GetSv2StatusResponse) -> Self {
        Sv2HandshakeBody {
            schema: "svcos.api.sv2.handshake.v1",
            enabled: r.enabled,
            endpoint: r.endpoint.clone(),
            pattern: "Noise_NX_Secp256k1+EllSwift_ChaChaPoly_SHA256",
            state: r.handshake.clone(),
            detail: r.handshake_detail.clone(),
            completed_at_ms: (r.handshake_at_ms > 0).then_some(r.handshake_at_ms),
            authority_pubkey: r.authority_pubkey.clone(),
            authority_fingerprint: r.authority_fingerprint.clone(),
            protocol_version: (r.protocol_version > 0).then_some(r.protocol_version),
            setup_flags: r.setup_flags,
        }
    }
}

/// One Stratum V2 message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2Message {
    /// When, Unix ms.
    pub timestamp_ms: i64,
    /// `sent` or `received`.
    pub direction: String,
    /// The message type name.
    pub message_type: String,
    /// One line about it (never a secret).
    pub summary: String,
}

/// `GET /api/pool/sv2/messages` (`svcos.api.sv2.messages.v1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sv2MessagesBody {
    /// `svcos.api.sv2.messages.v1`.
    pub schema: &'static str,
    /// `[stratum].sv2_enabled`.
    pub enabled: bool,
    /// `host:port` of the SV2 pool; empty when none.
    pub endpoint: String,
    /// Recent messages, oldest first.
    pub messages: Vec<Sv2Message>,
}

impl From<&GetSv2StatusResponse> for Sv2MessagesBody {
    fn from(r: &GetSv2StatusResponse) -> Self {
        Sv2MessagesBody {
            schema: "svcos.api.sv2.messages.v1",
            enabled: r.enabled,
            endpoint: r.endpoint.clone(),
            messages: r
                .messages
                .iter()
                .map(|m| Sv2Message {
                    timestamp_ms: m.timestamp_ms,
                    direction: m.direction.clone(),
                    message_type: m.message_type.clone(),
                    summary: m.summary.clone(),
                })
                .collect(),
        }
    }
}

/// The pool list of a write (schema only; the handler checks the list member by member so a
/// `pool_validation` error names `pools[i].member`).
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema, never built
struct PoolListShape {
    /// 1-16 pools, first = highest priority unless `priority` says otherwise.
    #[schemars(length(min = 1, max = 16))]
    pools: Vec<Patch<PoolConfig>>,
}

crate::config::patch_request!(
    /// `POST /api/pools`, `POST /api/setup/step5-pool`: the whole pool list, which replaces the
    /// configured one; a password equal to the mask keeps the stored password of the same pool.
    /// A bare list is accepted too.
    PoolListRequest,
    PoolListShape
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sv2_status_nulls_what_is_not_negotiated_yet() {
        let r = GetSv2StatusResponse {
            pool_index: -1,
            ..Default::default()
        };
        let v = serde_json::to_value(Sv2StatusBody::from(&r)).unwrap();
        assert!(v["pool_index"].is_null());
        assert!(v["protocol_version"].is_null());
        assert!(v["channel"].is_null());
        let h = serde_json::to_value(Sv2HandshakeBody::from(&r)).unwrap();
        assert!(h["completed_at_ms"].is_null());
    }

    #[test]
    fn sv2_channel_keeps_its_wire_names() {
        let r = GetSv2StatusResponse {
            pool_index: 2,
            protocol_version: 2,
            channel_type: "extended".into(),
            channel_id: 7,
            version_mask: 0x1fffe000,
            ..Default::default()
        };
        let v = serde_json::to_value(Sv2StatusBody::from(&r)).unwrap();
        assert_eq!(v["pool_index"], 2);
        assert_eq!(v["protocol_version"], 2);
        assert_eq!(v["channel"]["type"], "extended");
        assert_eq!(v["channel"]["id"], 7);
        assert_eq!(v["channel"]["version_mask"], "1fffe000");
    }

    #[test]
    fn the_pool_list_schema_bound_matches_the_parser() {
        assert_eq!(svcos_common::config::change::MAX_POOLS, 16);
    }

    #[test]
    fn only_a_gated_protocol_names_its_gate() {
        let v = serde_json::to_value(StratumProtocol {
            name: "stratum-v1",
            enabled: true,
            gate: None,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name": "stratum-v1", "enabled": true})
        );
    }
}
