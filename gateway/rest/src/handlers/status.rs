//! Telemetry views served from the snapshots: `/api/status`, `/api/stats`, `/metrics`, chips,
//! chain presence, thermal posture, home status and the chain diagnostics.
//!
//! `/api/status` never calls a peer: it returns the cached rendering of the latest snapshots
//! ([`crate::state::Inner::status_body`]). `/api/chips` is the one view that asks hw-agent per
//! request, because per-chip data is not in the stream (it would multiply its size by 60).

use std::fmt::Write as _;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use svcos_api_types::energy::HomeStatusBody;
use svcos_api_types::enum_word;
use svcos_api_types::health::{ChainDiagnosticsBody, ChipsHealthBody};
use svcos_api_types::status::{ChainPresenceBody, ChipsBody, StatsBody, StatusBody};
use svcos_api_types::thermal::{PostureBody, SupervisorBody};
use svcos_common::config::Config;
use svcos_proto::hwagent::v1::{GetTelemetryRequest, MiningState, Telemetry};
use svcos_proto::stratum::v1::{GetPoolsResponse, PoolState};

use super::{ApiResult, ok};
use crate::envelope::ApiError;
use crate::routing::Route;
use crate::{AppState, route};

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/status", Bearer, P, Telemetry, Full, "Live telemetry and pool summary from the snapshots", status),
        route!(GET "/api/stats", Bearer, P, Telemetry, Full, "Counters: nonces, errors, shares per pool", stats),
        route!(GET "/api/chips", Bearer, P, Telemetry, Full, "Per-chip frequency, hashrate, errors, temperature", chips),
        route!(GET "/api/chips/health", Bearer, U, Telemetry, Full, "Per-chip health verdicts from the error rates", chips_health),
        route!(GET "/api/mining/chain/presence", Bearer, P, Telemetry, Full, "Chains and detected chips", chain_presence),
        route!(GET "/metrics", Metrics, P, Telemetry, Full, "Prometheus text exposition", metrics),
        route!(GET "/api/thermal/posture", Bearer, P, Thermal, Full, "Temperatures against the configured limits", thermal_posture),
        route!(GET "/api/thermal/supervisor", Bearer, P, Thermal, Full, "Thermal supervisor state: fan mode, limits, trip reason", thermal_supervisor),
        route!(GET "/api/home/status", Bearer, P, Integrations, Full, "Space-heater view: heat output, noise proxy, state", home_status),
        route!(GET "/api/diagnostics/chain", Bearer, P, Diagnostics, Full, "Per-chain diagnostics from the snapshot", diagnostics_chain),
    ]
}

async fn status(State(state): State<AppState>) -> Response {
    // None snapshots: that peer is down, its members are null and `degraded` is true.
    let body = state.status_body(|c, t, p, _| {
        StatusBody::new(c.system.hostname.clone(), c.system.mode.as_str(), t, p)
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn stats(State(state): State<AppState>) -> Response {
    Json(StatsBody::new(
        state.telemetry().as_ref(),
        state.pools().as_ref(),
    ))
    .into_response()
}

async fn full_telemetry(state: &AppState) -> ApiResult<Telemetry> {
    let mut hw = state.peers.hw.clone();
    let resp = hw
        .get_telemetry(GetTelemetryRequest {
            include_chips: true,
        })
        .await
        .map_err(|s| ApiError::from_grpc("hw-agent", &s))?;
    resp.into_inner()
        .telemetry
        .ok_or_else(|| ApiError::unavailable("hw-agent telemetry"))
}

async fn chips(State(state): State<AppState>) -> ApiResult {
    let t = full_telemetry(&state).await?;
    Ok(Json(ChipsBody::from(&t)).into_response())
}

async fn chips_health(State(state): State<AppState>) -> ApiResult {
    ok(ChipsHealthBody::new(&full_telemetry(&state).await?))
}

/// The `/api/chips/health` body as JSON, for `svcos/tests/chip_health_agrees.rs`,
/// which checks that REST, diagnostics and the tuner judge every chip alike.
pub fn chips_health_view(t: &Telemetry) -> Value {
    serde_json::to_value(ChipsHealthBody::new(t)).expect("a body of plain members serialises")
}

fn telemetry_or_503(state: &AppState) -> ApiResult<Telemetry> {
    state
        .telemetry()
        .ok_or_else(|| ApiError::unavailable("hw-agent"))
}

async fn chain_presence(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    Ok(Json(ChainPresenceBody::from(&t)).into_response())
}

async fn thermal_posture(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    ok(PostureBody::new(&t, &state.config().thermal))
}

async fn thermal_supervisor(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    ok(SupervisorBody::new(&t, &state.config().thermal))
}

async fn home_status(State(state): State<AppState>) -> ApiResult {
    let t = telemetry_or_503(&state)?;
    // The thermostat lives in the tuner's governor: one call. While the tuner is away the
    // status still answers (from the telemetry snapshot) and the thermostat reads `null`.
    let thermostat = crate::handlers::operations::power_status(&state, false)
        .await
        .ok()
        .map(|power| crate::handlers::operations::thermostat_body(&state, &power, None, None));
    // Tuned levels for the heater's efficiency at a level (Home mode cannot read /api/profiles).
    let mut tuner = state.peers.tuner.clone();
    let req = svcos_proto::tuner::v1::ListProfilesRequest {};
    let profiles = tuner.list_profiles(req).await.ok().map(|r| r.into_inner());
    ok(HomeStatusBody::new(&t, thermostat, profiles.as_ref()))
}

async fn diagnostics_chain(State(state): State<AppState>) -> ApiResult {
    ok(ChainDiagnosticsBody::new(&telemetry_or_503(&state)?))
}

/// Prometheus text exposition of the snapshots (format 0.0.4).
pub fn render_metrics(
    config: &Config,
    telemetry: Option<&Telemetry>,
    pools: Option<&GetPoolsResponse>,
) -> String {
    let mut out = String::with_capacity(4096);
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    family(
        &mut out,
        "svcos_up",
        "gauge",
        "Whether the gateway has a live snapshot from the service.",
    );
    let _ = writeln!(
        out,
        "svcos_up{{service=\"hw-agent\"}} {}",
        u8::from(telemetry.is_some())
    );
    let _ = writeln!(
        out,
        "svcos_up{{service=\"stratum-agent\"}} {}",
        u8::from(pools.is_some())
    );
    family(
        &mut out,
        "svcos_info",
        "gauge",
        "Constant 1 labelled with identity.",
    );
    let _ = writeln!(
        out,
        "svcos_info{{hostname=\"{}\",mode=\"{}\",version=\"{}\"}} 1",
        escape(&config.system.hostname),
        config.system.mode.as_str(),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(t) = telemetry {
        let h = t.hashrate.unwrap_or_default();
        family(
            &mut out,
            "svcos_hashrate_ghs",
            "gauge",
            "Hashrate in GH/s by averaging window.",
        );
        for (w, v) in [
            ("5s", h.ghs_5s),
            ("1m", h.ghs_1m),
            ("15m", h.ghs_15m),
            ("expected", h.ghs_expected),
        ] {
            let _ = writeln!(out, "svcos_hashrate_ghs{{window=\"{w}\"}} {v}");
        }
        family(
            &mut out,
            "svcos_mining_state",
            "gauge",
            "1 for the current mining state.",
        );
        for s in [
            MiningState::Bringup,
            MiningState::Mining,
            MiningState::NoWork,
            MiningState::Sleeping,
            MiningState::Overheat,
            MiningState::Fault,
        ] {
            let _ = writeln!(
                out,
                "svcos_mining_state{{state=\"{}\"}} {}",
                enum_word(s.as_str_name(), "MINING_STATE_"),
                u8::from(t.state() == s)
            );
        }
        for (name, help, v) in [
            ("svcos_power_watt", "Input power in watts.", t.power_watt),
            (
                "svcos_temp_max_celsius",
                "Hottest chip temperature.",
                t.temp_max_c,
            ),
            (
                "svcos_temp_target_celsius",
                "Fan controller target temperature.",
                t.temp_target_c,
            ),
            (
                "svcos_mining_uptime_seconds",
                "Seconds since mining started.",
                t.mining_uptime_s as f64,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
        for (name, help, v) in [
            ("svcos_nonces_total", "Nonces that verified.", t.nonces),
            (
                "svcos_hw_errors_total",
                "Nonces that did not verify.",
                t.hw_errors,
            ),
            (
                "svcos_shares_sent_total",
                "Shares handed to the pool client.",
                t.shares_sent,
            ),
        ] {
            family(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        }
        family(
            &mut out,
            "svcos_chain_hashrate_ghs",
            "gauge",
            "Per-chain 1-minute hashrate in GH/s.",
        );
        for c in &t.chains {
            let _ = writeln!(
                out,
                "svcos_chain_hashrate_ghs{{chain=\"{}\"}} {}",
                c.chain_id,
                c.hashrate.as_ref().map_or(0.0, |h| h.ghs_1m)
            );
        }
        family(
            &mut out,
            "svcos_chain_temp_celsius",
            "gauge",
            "Per-chain temperatures.",
        );
        for c in &t.chains {
            let _ = writeln!(
                out,
                "svcos_chain_temp_celsius{{chain=\"{}\",sensor=\"chip\"}} {}",
                c.chain_id, c.temp_chip_c
            );
            let _ = writeln!(
                out,
                "svcos_chain_temp_celsius{{chain=\"{}\",sensor=\"board\"}} {}",
                c.chain_id, c.temp_board_c
            );
        }
        family(
            &mut out,
            "svcos_chain_chips",
            "gauge",
            "Chips per chain, detected and expected.",
        );
        for c in &t.chains {
            let _ = writeln!(
                out,
                "svcos_chain_chips{{chain=\"{}\",kind=\"detected\"}} {}",
                c.chain_id, c.chips_detected
            );
            let _ = writeln!(
                out,
                "svcos_chain_chips{{chain=\"{}\",kind=\"expected\"}} {}",
                c.chain_id, c.chips_expected
            );
        }
        family(&mut out, "svcos_fan_rpm", "gauge", "Fan speed in RPM.");
        for f in &t.fans {
            let _ = writeln!(out, "svcos_fan_rpm{{fan=\"{}\"}} {}", f.fan_id, f.rpm);
        }
        family(
            &mut out,
            "svcos_fan_pwm_percent",
            "gauge",
            "Fan duty in percent.",
        );
        for f in &t.fans {
            let _ = writeln!(
                out,
                "svcos_fan_pwm_percent{{fan=\"{}\"}} {}",
                f.fan_id, f.pwm_percent
            );
        }
    }
    if let Some(p) = pools {
        family(
            &mut out,
            "svcos_pool_shares_total",
            "counter",
            "Shares per pool and result.",
        );
        for pool in &p.pools {
            for (result, v) in [
                ("accepted", pool.accepted),
                ("rejected", pool.rejected),
                ("stale", pool.stale),
            ] {
                let _ = writeln!(
                    out,
                    "svcos_pool_shares_total{{pool=\"{}\",url=\"{}\",result=\"{result}\"}} {v}",
                    pool.index,
                    escape(&pool.url)
                );
            }
        }
        family(
            &mut out,
            "svcos_pool_up",
            "gauge",
            "1 when the pool connection is alive.",
        );
        for pool in &p.pools {
            let _ = writeln!(
                out,
                "svcos_pool_up{{pool=\"{}\",url=\"{}\"}} {}",
                pool.index,
                escape(&pool.url),
                u8::from(pool.state() == PoolState::Alive)
            );
        }
        family(
            &mut out,
            "svcos_pool_active",
            "gauge",
            "1 for the pool currently mined on.",
        );
        for pool in &p.pools {
            let _ = writeln!(
                out,
                "svcos_pool_active{{pool=\"{}\"}} {}",
                pool.index,
                u8::from(pool.active)
            );
        }
        family(
            &mut out,
            "svcos_best_share",
            "gauge",
            "Best share difficulty since counters began.",
        );
        let _ = writeln!(out, "svcos_best_share {}", p.best_share);
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = render_metrics(
        &state.config(),
        state.telemetry().as_ref(),
        state.pools().as_ref(),
    );
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_proto::hwagent::v1::ChainTelemetry;

    #[test]
    fn status_when_peers_down_says_so() {
        let v = serde_json::to_value(StatusBody::new("svcos".into(), "home", None, None)).unwrap();
        assert_eq!(v["degraded"], true);
        assert_eq!(v["sources"]["hw_agent"]["up"], false);
        assert!(v["mining"].is_null());
    }

    #[test]
    fn metrics_have_help_and_type_for_every_family() {
        let t = Telemetry {
            chains: vec![ChainTelemetry {
                chain_id: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render_metrics(
            &Config::default(),
            Some(&t),
            Some(&GetPoolsResponse::default()),
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }
}
