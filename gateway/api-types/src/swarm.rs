//! `GET /api/swarm` and `POST /api/swarm/room-temp` (`svcos.api.swarm.v1`): the home swarm as
//! the power governor in the tuner sees it (`PowerService.GetSwarm`). The key never appears.

use serde::Serialize;
use svcos_proto::tuner::v1 as pb;

/// One live member (this unit included).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SwarmMemberBody {
    /// Stable id; the lowest live one leads.
    pub unit_id: String,
    /// Its `[system].hostname`.
    pub name: String,
    /// Where its datagrams come from, `ip:port` (`null` for this unit).
    pub address: Option<String>,
    /// It leads: it splits the budget.
    pub leader: bool,
    /// This unit.
    #[serde(rename = "self")]
    pub is_self: bool,
    /// Measured power, W.
    pub power_watt: f64,
    /// Its own limit without the swarm, W (`null` = none: the budget).
    pub max_watt: Option<f64>,
    /// J/TH (`null` = unknown).
    pub efficiency_j_per_th: Option<f64>,
    /// Its share in the allocation this unit follows, W (`null` = not allocated yet).
    pub share_watt: Option<f64>,
    /// Unix ms of its last admitted datagram (now for this unit).
    pub last_seen_ms: i64,
}

/// The shared room reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SwarmRoomBody {
    /// °C.
    pub room_c: f64,
    /// When it was posted on its origin, Unix ms.
    pub at_ms: i64,
    /// Who measured it.
    pub source: String,
    /// The member it was posted on.
    pub origin_unit_id: String,
}

/// Datagrams dropped since the tuner started, by reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SwarmDroppedBody {
    /// The HMAC tag did not verify (another key, or altered).
    pub bad_signature: u64,
    /// A repeated or older sequence, or a send time over 30 s from ours.
    pub replay: u64,
    /// Not a swarm datagram.
    pub malformed: u64,
}

/// `svcos.api.swarm.v1`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SwarmBody {
    /// `svcos.api.swarm.v1`.
    pub schema: &'static str,
    /// `[swarm].enabled`.
    pub enabled: bool,
    /// This unit's id.
    pub unit_id: String,
    /// The leader's id (`null` while the swarm is off).
    pub leader: Option<String>,
    /// Live members by unit id (empty while the swarm is off).
    pub members: Vec<SwarmMemberBody>,
    /// `[swarm].circuit_budget_watt`.
    pub budget_watt: f64,
    /// The split rule: `proportional_to_inverse_j_per_th` (docs/DESIGN.md "Home swarm").
    pub rule: String,
    /// This unit's share, the governor's `swarm` limit, W.
    pub share_watt: Option<f64>,
    /// Where it comes from: `leader` (its own split), `allocated` (the leader's), `held` (the
    /// last one, at most 30 s without a live leader's), `pending` (the budget over the live
    /// members until the leader allocates); `null` while off.
    pub share_source: Option<String>,
    /// The allocation's epoch (0 = none yet).
    pub epoch: u64,
    /// The newest room reading in the swarm.
    pub room: Option<SwarmRoomBody>,
    /// `[swarm].port`.
    pub port: u16,
    /// Why the UDP socket is not open (`null` when it is or the swarm is off).
    pub error: Option<String>,
    /// `address:port` of the units found by mDNS (`_svcos-swarm._udp`, while
    /// `[network.mdns].enabled`), sent to beside `[swarm].peers`.
    pub discovered: Vec<String>,
    /// Datagrams refused.
    pub dropped: SwarmDroppedBody,
    /// What the posted reading made this unit's thermostat do (`POST` only, `null` when the
    /// thermostat is off).
    pub action: Option<String>,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn positive(v: f64) -> Option<f64> {
    (v > 0.0).then_some(v)
}

impl SwarmBody {
    /// The body of the governor's swarm state; `action` answers a posted reading.
    pub fn new(s: &pb::SwarmStatus, action: Option<pb::ThermostatAction>) -> Self {
        SwarmBody {
            schema: "svcos.api.swarm.v1",
            enabled: s.enabled,
            unit_id: s.unit_id.clone(),
            leader: non_empty(&s.leader_unit_id),
            members: s
                .members
                .iter()
                .map(|m| SwarmMemberBody {
                    unit_id: m.unit_id.clone(),
                    name: m.name.clone(),
                    address: non_empty(&m.address),
                    leader: m.leader,
                    is_self: m.is_self,
                    power_watt: m.power_watt,
                    max_watt: positive(m.max_watt),
                    efficiency_j_per_th: positive(m.efficiency_j_per_th),
                    share_watt: m.share_watt,
                    last_seen_ms: m.last_seen_ms,
                })
                .collect(),
            budget_watt: s.budget_watt,
            rule: s.rule.clone(),
            share_watt: s.share_watt,
            share_source: non_empty(&s.share_source),
            epoch: s.epoch,
            room: s.room.as_ref().map(|r| SwarmRoomBody {
                room_c: r.room_c,
                at_ms: r.at_ms,
                source: r.source.clone(),
                origin_unit_id: r.origin_unit_id.clone(),
            }),
            port: u16::try_from(s.port).unwrap_or_default(),
            error: non_empty(&s.error),
            discovered: s.discovered.clone(),
            dropped: SwarmDroppedBody {
                bad_signature: s.dropped_bad_signature,
                replay: s.dropped_replay,
                malformed: s.dropped_malformed,
            },
            action: action
                .filter(|a| *a != pb::ThermostatAction::Unspecified)
                .map(|a| crate::enum_word(a.as_str_name(), "THERMOSTAT_ACTION_")),
        }
    }
}
