//! The `/ws` frames (docs/API-SHAPES.md, "WebSocket `/ws`").
//!
//! A telemetry frame goes out right after the upgrade and then each time its content changes
//! (hw-agent publishes at 1 Hz, pools on change; a snapshot that changes nothing the frame
//! shows, such as a pool's job notification, sends nothing, so no two consecutive telemetry
//! frames are byte-identical). After [`HEARTBEAT`] with no frame, a heartbeat frame goes out, so
//! a client (and a proxy in between) can tell a quiet stream from a dead one.

use serde_json::{Value, json};
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;

use crate::{enum_word, round};

/// Longest silence on a stream: with no frame for this long, a heartbeat frame is sent.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// The heartbeat frame (schema `svcos.ws.heartbeat.v1`); `now_ms` is the gateway's clock.
pub fn heartbeat_frame(now_ms: i64) -> Value {
    json!({"type": "heartbeat", "schema": "svcos.ws.heartbeat.v1", "timestamp_ms": now_ms})
}

/// A telemetry frame (schema `svcos.ws.telemetry.v1`).
pub fn telemetry_frame(t: Option<&Telemetry>, p: Option<&GetPoolsResponse>) -> Value {
    json!({
        "type": "telemetry",
        "schema": "svcos.ws.telemetry.v1",
        "hw_agent_up": t.is_some(),
        "stratum_agent_up": p.is_some(),
        "seq": t.map(|t| t.seq),
        "timestamp_ms": t.map(|t| t.timestamp_ms),
        "state": t.map(|t| enum_word(t.state().as_str_name(), "MINING_STATE_")),
        "hashrate_ghs": t.map(|t| {
            let h = t.hashrate.unwrap_or_default();
            json!({"5s": round(h.ghs_5s, 3), "1m": round(h.ghs_1m, 3), "15m": round(h.ghs_15m, 3)})
        }),
        "power_watt": t.map(|t| round(t.power_watt, 1)),
        "temp_max_c": t.map(|t| round(t.temp_max_c, 1)),
        "chains": t.map(|t| t.chains.iter().map(|c| json!({
            "chain_id": c.chain_id,
            "temp_chip_c": round(c.temp_chip_c, 1),
            "temp_board_c": round(c.temp_board_c, 1),
            "hashrate_ghs_1m": round(c.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m), 3),
        })).collect::<Vec<_>>()),
        "fans": t.map(|t| t.fans.iter().map(|f| json!({"fan_id": f.fan_id, "rpm": f.rpm, "pwm_percent": f.pwm_percent})).collect::<Vec<_>>()),
        "pools": p.map(|p| p.pools.iter().map(|pool| json!({
            "index": pool.index,
            "url": pool.url,
            "state": enum_word(pool.state().as_str_name(), "POOL_STATE_"),
            "active": pool.active,
            "accepted": pool.accepted,
            "rejected": pool.rejected,
        })).collect::<Vec<_>>()),
    })
}
