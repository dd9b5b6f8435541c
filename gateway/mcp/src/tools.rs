//! The MCP tools: read-only monitoring for any authenticated agent, control for the owner.
//!
//! Each tool names the registry row it answers from ([`Gateway::call`]); read tools name only
//! `GET` rows, so none of them can change anything. Control tools first check [`Access`], then
//! run the REST equivalent (its mode gating and validation included). Whatever goes wrong comes
//! back as a tool error (`isError: true`) whose text is the envelope's message and whose
//! structured content is the envelope itself.

use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::{Gateway, RestAnswer, envelope};

/// The server name reported by `initialize`.
pub const SERVER_NAME: &str = "svcos";

/// What the caller of a tool may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only monitoring: the trust boundary for any agent.
    Monitor,
    /// An authenticated owner session: monitoring and control.
    Owner,
}

impl Access {
    /// The access of the HTTP request behind a tool call: only an owner session the gateway
    /// vouches for is [`Access::Owner`]; no request at all is monitoring.
    pub fn of(gateway: &dyn Gateway, parts: Option<&Parts>) -> Access {
        match parts {
            Some(p) if gateway.is_owner(p) => Access::Owner,
            _ => Access::Monitor,
        }
    }
}

/// The MCP server of one gateway (built per request: the transport is stateless).
#[derive(Clone)]
pub struct SvcosMcp {
    gateway: Arc<dyn Gateway>,
    tool_router: ToolRouter<SvcosMcp>,
}

impl std::fmt::Debug for SvcosMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SvcosMcp").finish_non_exhaustive()
    }
}

/// `set_pool_enabled` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolEnabledArgs {
    /// Pool index as listed by get_pools.
    pub index: u32,
    /// true to use the pool, false to stop using it.
    pub enabled: bool,
}

/// `switch_pool` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolIndexArgs {
    /// Pool index as listed by get_pools.
    pub index: u32,
}

/// `restart_service` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartArgs {
    /// One of hw-agent, stratum-agent, tuner, auth, legacy-tcp, gateway, proxy; omitted
    /// restarts the mining services (stratum-agent, then hw-agent).
    #[serde(default)]
    pub service: Option<String>,
}

/// Fan mode.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FanModeArg {
    /// The thermal controller sets the duty.
    Auto,
    /// A fixed duty (pwm_percent).
    Manual,
}

/// `set_fan` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FanArgs {
    /// auto or manual.
    pub mode: FanModeArg,
    /// Fixed duty in percent, 1-100; needed in manual mode.
    #[serde(default)]
    pub pwm_percent: Option<u32>,
    /// Target chip temperature in degrees C, 30-95, for auto mode; omitted keeps the current.
    #[serde(default)]
    pub target_temp_c: Option<f64>,
}

/// LED mode.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LedModeArg {
    /// Status indication by the firmware.
    Normal,
    /// Blink to find the unit in a rack.
    Locate,
    /// LEDs off.
    Off,
}

/// `set_led` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LedArgs {
    /// normal, locate or off.
    pub mode: LedModeArg,
}

/// `get_events` arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsArgs {
    /// At most this many events, newest kept (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<u32>,
}

fn parts(ctx: &RequestContext<RoleServer>) -> Option<&Parts> {
    ctx.extensions.get::<Parts>()
}

fn authorization(ctx: &RequestContext<RoleServer>) -> Option<&HeaderValue> {
    parts(ctx).and_then(|p| p.headers.get(header::AUTHORIZATION))
}

/// A tool result from a REST answer.
fn result(answer: RestAnswer) -> CallToolResult {
    match answer {
        Ok(value) => CallToolResult::structured(value),
        Err(envelope) => tool_error(envelope),
    }
}

/// A tool error: the envelope's message as text, the envelope as structured content.
fn tool_error(envelope: Value) -> CallToolResult {
    let mut text = envelope["error"].as_str().unwrap_or("error").to_string();
    if let Some(detail) = envelope["detail"].as_str() {
        text = format!("{text}: {detail}");
    }
    let mut r = CallToolResult::structured_error(envelope);
    r.content = vec![ContentBlock::text(text)];
    r
}

fn owner_required() -> Value {
    envelope(
        "control tools need an authenticated owner session",
        "read-only monitoring is open to any authenticated agent; control is not",
        None,
        "log in with the owner password (POST /api/auth/session) and send that bearer token to /mcp",
        &[],
    )
}

#[tool_router]
impl SvcosMcp {
    /// A server for one request to `gateway`.
    pub fn new(gateway: Arc<dyn Gateway>) -> Self {
        SvcosMcp {
            gateway,
            tool_router: Self::tool_router(),
        }
    }

    fn access(&self, ctx: &RequestContext<RoleServer>) -> Access {
        Access::of(self.gateway.as_ref(), parts(ctx))
    }

    async fn read(&self, ctx: &RequestContext<RoleServer>, path: &'static str) -> RestAnswer {
        self.gateway
            .call(authorization(ctx), Method::GET, path, None)
            .await
    }

    /// Run a control: owner only, then the REST equivalent `POST path`.
    async fn control(
        &self,
        ctx: &RequestContext<RoleServer>,
        path: &'static str,
        body: Option<Value>,
    ) -> CallToolResult {
        if self.access(ctx) != Access::Owner {
            return tool_error(owner_required());
        }
        result(
            self.gateway
                .call(authorization(ctx), Method::POST, path, body.as_ref())
                .await,
        )
    }

    #[tool(
        description = "Live status: mining state, hashrate (5 s, 1 min, 15 min, expected) in GH/s, power in W, temperatures in C, fans, PSU, uptime, operating mode, per-chain summary and pool counters. Same body as GET /api/status (schema svcos.api.status.v1).",
        annotations(read_only_hint = true)
    )]
    async fn get_status(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/status").await))
    }

    #[tool(
        description = "Configured pools with live state (connected, active, share counters, difficulty, last error); passwords masked. Same body as GET /api/pools (svcos.api.pools.v1).",
        annotations(read_only_hint = true)
    )]
    async fn get_pools(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/pools").await))
    }

    #[tool(
        description = "Hashboards (chains): state, chips expected and detected, frequency MHz, voltage mV, hashrate, nonces, hardware errors, board and chip temperatures, power, plus diagnostic findings per chain (from GET /api/status and GET /api/diagnostics/chain).",
        annotations(read_only_hint = true)
    )]
    async fn get_chains(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let status = match self.read(&ctx, "/api/status").await {
            Ok(v) => v,
            Err(e) => return Ok(tool_error(e)),
        };
        let diagnostics = match self.read(&ctx, "/api/diagnostics/chain").await {
            Ok(v) => v,
            Err(e) => return Ok(tool_error(e)),
        };
        Ok(CallToolResult::structured(merge_chains(
            &status,
            &diagnostics,
        )))
    }

    #[tool(
        description = "Per-chip frequency, hashrate, nonces, errors and temperature. Same body as GET /api/chips (svcos.api.chips.v1); needs standard mode.",
        annotations(read_only_hint = true)
    )]
    async fn get_chips(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/chips").await))
    }

    #[tool(
        description = "Share and nonce counters: accepted, rejected, stale, best share, found blocks, per-pool counters and reject reasons, pool switches, hardware error rate. Same body as GET /api/stats (svcos.api.stats.v1); needs standard mode.",
        annotations(read_only_hint = true)
    )]
    async fn get_shares(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/stats").await))
    }

    #[tool(
        description = "Recent events, oldest first: service starts (with restart counts), the start of mining, and pool switches with their reason (from GET /api/system/boot_timeline and GET /api/pools/failover_policy).",
        annotations(read_only_hint = true)
    )]
    async fn get_events(
        &self,
        Parameters(args): Parameters<EventsArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let timeline = match self.read(&ctx, "/api/system/boot_timeline").await {
            Ok(v) => v,
            Err(e) => return Ok(tool_error(e)),
        };
        let policy = match self.read(&ctx, "/api/pools/failover_policy").await {
            Ok(v) => v,
            Err(e) => return Ok(tool_error(e)),
        };
        let limit = args.limit.unwrap_or(50).clamp(1, 500) as usize;
        Ok(CallToolResult::structured(merge_events(
            &timeline, &policy, limit,
        )))
    }

    #[tool(
        description = "Supervised processes (name, state, pid, restarts, uptime, last exit) and whether the gateway sees live telemetry and pools. Same body as GET /api/system/health (svcos.api.system.health.v1).",
        annotations(read_only_hint = true)
    )]
    async fn get_services(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/system/health").await))
    }

    #[tool(
        description = "Tuner state: state, profile, power and hashrate targets, measured efficiency in J/TH. Same body as GET /api/autotuner/state (svcos.api.autotuner.state.v1); needs standard mode.",
        annotations(read_only_hint = true)
    )]
    async fn get_tuner_state(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/autotuner/state").await))
    }

    #[tool(
        description = "Temperatures against the configured limits with a posture (normal, warm, hot, dangerous). Same body as GET /api/thermal/posture (svcos.api.thermal.posture.v1); needs standard mode.",
        annotations(read_only_hint = true)
    )]
    async fn get_thermal(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(result(self.read(&ctx, "/api/thermal/posture").await))
    }

    #[tool(
        description = "Owner only. Enable or disable one pool; saved to the config and applied live (POST /api/pools with the current list). Answers the config write report (svcos.api.config.write.v1).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn set_pool_enabled(
        &self,
        Parameters(args): Parameters<PoolEnabledArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if self.access(&ctx) != Access::Owner {
            return Ok(tool_error(owner_required()));
        }
        let current = match self.read(&ctx, "/api/pools").await {
            Ok(v) => v,
            Err(e) => return Ok(tool_error(e)),
        };
        let list = match pool_list_with(&current, args.index, args.enabled) {
            Ok(list) => list,
            Err(e) => return Ok(tool_error(e)),
        };
        Ok(self
            .control(&ctx, "/api/pools", Some(json!({ "pools": list })))
            .await)
    }

    #[tool(
        description = "Owner only. Switch mining to one pool now (StratumService.SwitchPool; not saved: failover and failback rules still apply afterwards). Gated like POST /api/pools.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn switch_pool(
        &self,
        Parameters(args): Parameters<PoolIndexArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if self.access(&ctx) != Access::Owner {
            return Ok(tool_error(owner_required()));
        }
        match self.gateway.switch_pool(args.index).await {
            Ok(()) => Ok(CallToolResult::structured(json!({
                "schema": "svcos.mcp.switch_pool.v1", "switched_to": args.index,
            }))),
            Err(envelope) => Ok(tool_error(envelope)),
        }
    }

    #[tool(
        description = "Owner only. Stop hashing and keep the control board up (POST /api/action/sleep). Answers {action, state}.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn sleep(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        Ok(self.control(&ctx, "/api/action/sleep", None).await)
    }

    #[tool(
        description = "Owner only. Resume hashing (POST /api/action/wake). Answers {action, state}.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn wake(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        Ok(self.control(&ctx, "/api/action/wake", None).await)
    }

    #[tool(
        description = "Owner only. Restart one supervised service, or the mining services when none is named (POST /api/action/restart); needs standard mode.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false
        )
    )]
    async fn restart_service(
        &self,
        Parameters(args): Parameters<RestartArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let body = args.service.map(|s| json!({ "service": s }));
        Ok(self.control(&ctx, "/api/action/restart", body).await)
    }

    #[tool(
        description = "Owner only. Set the fan mode: auto (optional target_temp_c) or manual with pwm_percent (POST /api/fan); needs standard mode.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn set_fan(
        &self,
        Parameters(args): Parameters<FanArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut body = json!({
            "mode": match args.mode { FanModeArg::Auto => "auto", FanModeArg::Manual => "manual" },
        });
        if let Some(p) = args.pwm_percent {
            body["pwm_percent"] = json!(p);
        }
        if let Some(t) = args.target_temp_c {
            body["target_temp_c"] = json!(t);
        }
        Ok(self.control(&ctx, "/api/fan", Some(body)).await)
    }

    #[tool(
        description = "Owner only. Set the LED mode: normal, locate (blink to find the unit) or off (POST /api/led/config); needs standard mode.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true
        )
    )]
    async fn set_led(
        &self,
        Parameters(args): Parameters<LedArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let mode = match args.mode {
            LedModeArg::Normal => "normal",
            LedModeArg::Locate => "locate",
            LedModeArg::Off => "off",
        };
        Ok(self
            .control(&ctx, "/api/led/config", Some(json!({ "mode": mode })))
            .await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SvcosMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"))
                    .with_title("svcOS miner firmware"),
            )
            .with_instructions(
                "Monitoring and control of one svcOS Bitcoin miner. get_* tools only read; \
                 the other tools change the miner and need an authenticated owner session. \
                 Hashrates are GH/s, power W, temperatures degrees C.",
            )
    }
}

/// The `pools` list for `POST /api/pools` from a `GET /api/pools` body, with one pool's
/// `enabled` changed. Passwords stay masked, which the route reads as "keep the stored one".
pub fn pool_list_with(pools_body: &Value, index: u32, enabled: bool) -> Result<Vec<Value>, Value> {
    let pools = pools_body["pools"].as_array().cloned().unwrap_or_default();
    if index as usize >= pools.len() {
        return Err(envelope(
            &format!("no pool {index}: {} pools are configured", pools.len()),
            "",
            Some("unclassified_error"),
            "get_pools lists the pools and their indexes",
            &[("field", json!("index"))],
        ));
    }
    Ok(pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut item = json!({});
            for key in ["url", "user", "password", "priority", "quota", "enabled"] {
                item[key] = p[key].clone();
            }
            if i == index as usize {
                item["enabled"] = json!(enabled);
            }
            item
        })
        .collect())
}

/// `get_chains`: the status body's chains with each chain's diagnostic verdict.
pub fn merge_chains(status: &Value, diagnostics: &Value) -> Value {
    let findings = diagnostics["chains"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let chains: Vec<Value> = status["chains"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            if let Some(d) = findings.iter().find(|d| d["chain_id"] == c["chain_id"]) {
                c["healthy"] = d["healthy"].clone();
                c["findings"] = d["findings"].clone();
            }
            c
        })
        .collect();
    json!({
        "schema": "svcos.mcp.chains.v1",
        "mining_state": status["mining"]["state"],
        "chains": chains,
    })
}

/// `get_events`: service starts, the start of mining and pool switches, oldest first, the
/// newest `limit` kept.
pub fn merge_events(timeline: &Value, policy: &Value, limit: usize) -> Value {
    let mut events: Vec<Value> = timeline["events"].as_array().cloned().unwrap_or_default();
    for s in policy["recent_switches"].as_array().into_iter().flatten() {
        events.push(json!({
            "event": "pool_switch", "at_ms": s["timestamp_ms"],
            "from_index": s["from_index"], "to_index": s["to_index"], "reason": s["reason"],
        }));
    }
    events.sort_by_key(|e| e["at_ms"].as_i64().unwrap_or(0));
    let skip = events.len().saturating_sub(limit);
    json!({
        "schema": "svcos.mcp.events.v1",
        "events": events.split_off(skip),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_list_changes_one_pool_and_keeps_masks() {
        let body = json!({"pools": [
            {"index": 0, "url": "stratum+tcp://a:3333", "user": "u", "password": "********",
             "priority": 0, "quota": 0, "enabled": true, "status": {"state": "alive"}},
            {"index": 1, "url": "stratum+tcp://b:3333", "user": "u", "password": "********",
             "priority": 1, "quota": 0, "enabled": true, "status": null},
        ]});
        let list = pool_list_with(&body, 1, false).unwrap();
        assert_eq!(list[0]["enabled"], true);
        assert_eq!(list[1]["enabled"], false);
        assert_eq!(list[1]["password"], "********");
        assert!(list[0].get("status").is_none() && list[0].get("index").is_none());
        let err = pool_list_with(&body, 2, false).unwrap_err();
        assert_eq!(err["field"], "index");
    }

    #[test]
    fn events_merge_sorted_and_limited() {
        let timeline = json!({"events": [
            {"event": "service_started", "name": "hw-agent", "at_ms": 10},
            {"event": "mining_started", "at_ms": 30},
        ]});
        let policy = json!({"recent_switches": [
            {"timestamp_ms": 20, "from_index": 0, "to_index": 1, "reason": "dead"},
        ]});
        let all = merge_events(&timeline, &policy, 50);
        let kinds: Vec<&str> = all["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["service_started", "pool_switch", "mining_started"]);
        let last = merge_events(&timeline, &policy, 1);
        assert_eq!(last["events"][0]["event"], "mining_started");
    }
}
