//! Discovery: `/api/index` (the declared compatibility surface), the compatibility manifests,
//! versions, capabilities, update metadata and the static claims contract.
//!
//! The declared surface is the 72 routes fleet tooling may build against ([`DECLARED`]): a
//! subset of the mounted inventory chosen from pinned, behaviour-backed or shape-committed
//! routes, plus `/ws`. Their support grade and `mutates` flag come from the registry.

use axum::extract::State;
use axum::http::Method;
use svcos_api_types::discovery::*;

use super::{ApiResult, ok};
use crate::routing::{Route, RouteMeta, Support};
use crate::{AppState, route};
use svcos_api_types::API_CONTRACT_VERSION;

/// The five surfaces of the declared compatibility surface.
pub const SURFACES: [(&str, &str); 5] = [
    (
        "svc-rest",
        "svcOS REST API on TCP 8080 (and TCP 80 through the proxy)",
    ),
    (
        "third-party-compat-rest",
        "paths shaped like other open miner firmwares' REST APIs (/api/system/*)",
    ),
    (
        "v1-firmware-aliases",
        "the /api/v1/* aliases with the most strongly committed shapes",
    ),
    (
        "legacy-miner-tcp",
        "cgminer-compatible JSON API on TCP 4028 (see GET /api/cgminer/catalog)",
    ),
    ("websocket", "live telemetry on GET /ws (TCP 8080)"),
];

/// The declared routes: (surface, method, path).
pub const DECLARED: [(&str, &str, &str); 72] = [
    ("websocket", "GET", "/ws"),
    ("v1-firmware-aliases", "GET", "/api/v1/capabilities"),
    ("v1-firmware-aliases", "POST", "/api/v1/firmware/update"),
    (
        "v1-firmware-aliases",
        "GET",
        "/api/v1/firmware/update/status",
    ),
    ("v1-firmware-aliases", "POST", "/api/v1/system/upgrade"),
    (
        "v1-firmware-aliases",
        "GET",
        "/api/v1/system/upgrade/status",
    ),
    ("third-party-compat-rest", "GET", "/api/system/info"),
    ("third-party-compat-rest", "GET", "/api/system/asic"),
    ("third-party-compat-rest", "GET", "/api/system/stats"),
    ("third-party-compat-rest", "POST", "/api/system/restart"),
    ("third-party-compat-rest", "POST", "/api/system/identify"),
    ("svc-rest", "GET", "/api/index"),
    ("svc-rest", "GET", "/api/compatibility/manifest"),
    ("svc-rest", "GET", "/api/dashboard/version"),
    ("svc-rest", "GET", "/api/dashboard/health"),
    ("svc-rest", "GET", "/api/system/health"),
    ("svc-rest", "GET", "/api/system/update/metadata"),
    ("svc-rest", "GET", "/api/auth/status"),
    ("svc-rest", "POST", "/api/auth/setup"),
    ("svc-rest", "POST", "/api/auth/session"),
    ("svc-rest", "DELETE", "/api/auth/session/current"),
    ("svc-rest", "POST", "/api/auth/ws-ticket"),
    ("svc-rest", "GET", "/api/setup/status"),
    ("svc-rest", "POST", "/api/setup/test-pool"),
    ("svc-rest", "GET", "/api/status"),
    ("svc-rest", "GET", "/api/stats"),
    ("svc-rest", "GET", "/api/chips"),
    ("svc-rest", "GET", "/api/mining/chain/presence"),
    ("svc-rest", "GET", "/metrics"),
    ("svc-rest", "GET", "/api/pools"),
    ("svc-rest", "POST", "/api/pools"),
    ("svc-rest", "GET", "/api/pools/failover_policy"),
    ("svc-rest", "POST", "/api/pools/test"),
    ("svc-rest", "GET", "/api/stratum/protocol"),
    ("svc-rest", "GET", "/api/config"),
    ("svc-rest", "POST", "/api/config"),
    ("svc-rest", "GET", "/api/config/export"),
    ("svc-rest", "POST", "/api/config/import"),
    ("svc-rest", "GET", "/api/config/backup/manifest"),
    ("svc-rest", "GET", "/api/config/donation"),
    ("svc-rest", "POST", "/api/config/donation"),
    ("svc-rest", "GET", "/api/donation/info"),
    ("svc-rest", "GET", "/api/safety/warnings"),
    ("svc-rest", "POST", "/api/action/reboot"),
    ("svc-rest", "POST", "/api/action/restart"),
    ("svc-rest", "POST", "/api/action/sleep"),
    ("svc-rest", "POST", "/api/action/wake"),
    ("svc-rest", "POST", "/api/fan"),
    ("svc-rest", "GET", "/api/thermal/posture"),
    ("svc-rest", "GET", "/api/thermal/supervisor"),
    ("svc-rest", "GET", "/api/thermal/cooling_modes"),
    ("svc-rest", "GET", "/api/hardware/thermal/sensors"),
    ("svc-rest", "GET", "/api/hardware/thermal/chipd/chip_temps"),
    ("svc-rest", "GET", "/api/miner/type"),
    ("svc-rest", "GET", "/api/led/status"),
    ("svc-rest", "GET", "/api/led/config"),
    ("svc-rest", "POST", "/api/led/config"),
    ("svc-rest", "POST", "/api/led/locate"),
    ("svc-rest", "POST", "/api/led/locate/stop"),
    ("svc-rest", "GET", "/api/led/patterns"),
    ("svc-rest", "POST", "/api/led/pattern"),
    ("svc-rest", "GET", "/api/home/status"),
    ("svc-rest", "GET", "/api/diagnostics/chain"),
    ("svc-rest", "GET", "/api/diagnostics/error_vocab"),
    ("svc-rest", "GET", "/api/history/audit"),
    ("svc-rest", "GET", "/api/competitive/readiness"),
    ("legacy-miner-tcp", "GET", "/api/cgminer/catalog"),
    ("svc-rest", "GET", "/api/re/catalog/index"),
    ("svc-rest", "GET", "/api/autotuner/status"),
    ("svc-rest", "GET", "/api/profiles"),
    ("svc-rest", "POST", "/api/network/hostname"),
    ("svc-rest", "POST", "/mcp"),
];

/// This module's rows of the registry.
pub fn routes() -> Vec<Route<AppState>> {
    vec![
        route!(GET "/api/compatibility/manifest", Bearer, P, Identity, Full, "Surfaces and declared routes", manifest, res: svcos_api_types::discovery::ManifestBody),
        route!(GET "/api/dashboard/health", Bearer, P, Identity, Full, "Which snapshots the gateway has", dashboard_health, res: svcos_api_types::discovery::DashboardHealthBody),
        route!(GET "/api/dashboard/version", Bearer, P, Identity, Full, "Firmware and API contract versions", version, res: svcos_api_types::discovery::VersionBody),
        route!(GET "/api/index", Bearer, P, Identity, Full, "The declared compatibility surface", index, res: svcos_api_types::discovery::IndexBody),
        route!(GET "/api/system/api-compatibility/manifest", Bearer, P, Identity, Full, "Surfaces and declared routes", manifest, res: svcos_api_types::discovery::ManifestBody),
        route!(GET "/api/system/update/metadata", Open, P, Identity, Full, "Installed version and update source", update_metadata, res: svcos_api_types::discovery::UpdateMetadataBody),
        route!(GET "/api/v1/capabilities", Bearer, P, Identity, Full, "What this build can do", capabilities, res: svcos_api_types::discovery::CapabilitiesBody),
        route!(GET "/api/competitive/readiness", Bearer, P, Other, Full, "The static claims contract", readiness, res: svcos_api_types::discovery::ReadinessBody),
        route!(GET "/api/system/update_capability", Bearer, P, Identity, Full, "Whether this build can update itself, and how", update_capability, res: svcos_api_types::discovery::UpdateCapabilityBody),
        route!(GET "/api/network/info", Bearer, P, Fleet, Full, "Hostname, interfaces (addresses, MAC), gateway, DNS and the endpoints this unit serves", network_info, res: svcos_api_types::discovery::NetworkInfoBody),
        route!(GET "/api/profiles/presets", Bearer, P, Tuning, Full, "Board presets compiled into this build", board_presets, res: svcos_api_types::discovery::PresetsBody),
    ]
}

/// The declared routes with support grade and `mutates`, from the registry.
pub fn declared_routes(metas: &[RouteMeta]) -> Vec<DeclaredRoute> {
    DECLARED
        .iter()
        .map(|&(surface, method, path)| {
            let meta = metas
                .iter()
                .find(|m| m.method.as_str() == method && m.path == path);
            DeclaredRoute {
                method,
                path,
                surface,
                support: meta.map_or(Support::Full, |m| m.support).as_str(),
                mutates: method != Method::GET.as_str(),
                auth: meta.map_or("bearer", |m| m.auth.as_str()),
            }
        })
        .collect()
}

fn surfaces() -> Vec<Surface> {
    SURFACES
        .iter()
        .map(|&(id, description)| Surface {
            id,
            description,
            declared_routes: DECLARED.iter().filter(|d| d.0 == id).count(),
        })
        .collect()
}

async fn index(State(state): State<AppState>) -> ApiResult {
    let metas = &state.routes().metas;
    let routes = declared_routes(metas);
    ok(IndexBody {
        schema: "svcos.api.index.v1",
        api_contract_version: API_CONTRACT_VERSION,
        route_count: routes.len(),
        surface_count: SURFACES.len(),
        surfaces: surfaces(),
        routes,
        mounted_operations: metas.len(),
    })
}

async fn manifest(State(state): State<AppState>) -> ApiResult {
    let metas = &state.routes().metas;
    let mut by_support = std::collections::BTreeMap::<&str, usize>::new();
    for m in metas {
        *by_support.entry(m.support.as_str()).or_default() += 1;
    }
    ok(ManifestBody {
        schema: "svcos.api.compatibility_manifest.v1",
        api_contract_version: API_CONTRACT_VERSION,
        surfaces: surfaces(),
        declared_routes: declared_routes(metas),
        mounted_operations: metas.len(),
        mounted_by_support: by_support,
        error_envelope: EnvelopeDescription {
            members: ["error", "detail", "code", "suggestion"],
            codes: crate::envelope::ErrorCode::ALL.map(|c| c.as_str()).to_vec(),
        },
    })
}

async fn version(State(state): State<AppState>) -> ApiResult {
    ok(VersionBody {
        schema: "svcos.api.version.v1",
        firmware: "svcOS",
        version: running_version(&state).await,
        api_contract_version: API_CONTRACT_VERSION,
        build_profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    })
}

async fn dashboard_health(State(state): State<AppState>) -> ApiResult {
    ok(DashboardHealthBody::new(
        state.telemetry().is_some(),
        state.pools().is_some(),
        state.sessions.is_live(),
    ))
}

/// The running firmware's version: one figure for every route that shows it (issue 31 defect
/// 10: the Firmware card said this build's while the update status said the slot's).
async fn running_version(state: &AppState) -> String {
    crate::supervisor::update_status(state).await.map_or_else(
        |_| env!("CARGO_PKG_VERSION").to_string(),
        |s| s.running_version,
    )
}

async fn update_metadata(State(state): State<AppState>) -> ApiResult {
    // Open route: the running version and which update paths exist, nothing about the unit's
    // slots, model string or files.
    let status = crate::supervisor::update_status(&state).await.ok();
    ok(UpdateMetadataBody {
        schema: "svcos.api.update.metadata.v1",
        firmware: "svcOS",
        current_version: status
            .as_ref()
            .map_or(env!("CARGO_PKG_VERSION").to_string(), |s| {
                s.running_version.clone()
            }),
        api_contract_version: API_CONTRACT_VERSION,
        update_source: "local upload only; the firmware never contacts an update server",
        update_supported: status.as_ref().is_some_and(|s| s.slot_manager_reachable),
        bundle_format: "RAUC bundle (.raucb), CMS-signed; verified against the unit's keyring",
        max_bundle_bytes: crate::routing::MAX_BUNDLE_BYTES,
        upload_paths: crate::routing::UPLOAD_PATHS.to_vec(),
        status_path: "/api/v1/firmware/update/status",
    })
}

/// Whether `path` is mounted and implemented.
fn implemented(state: &AppState, path: &str) -> bool {
    state
        .routes()
        .metas
        .iter()
        .any(|m| m.path == path && m.support != Support::Planned)
}

async fn capabilities(State(state): State<AppState>) -> ApiResult {
    let config = state.config();
    let update = crate::supervisor::update_status(&state).await.ok();
    let supported = |path: &str| implemented(&state, path);
    ok(CapabilitiesBody {
        schema: "svcos.api.v1.capabilities.v1",
        firmware: "svcOS",
        version: env!("CARGO_PKG_VERSION"),
        api_contract_version: API_CONTRACT_VERSION,
        running_version: update.as_ref().map(|u| u.running_version.clone()),
        update: update
            .as_ref()
            .map(|u| CapabilityUpdate::new(u, crate::routing::UPLOAD_PATHS.to_vec())),
        capabilities: Capabilities {
            firmware_update: supported("/api/v1/firmware/update"),
            system_upgrade: supported("/api/v1/system/upgrade"),
            stratum_v1: true,
            stratum_v2: config.stratum.sv2_enabled,
            websocket: true,
            websocket_tickets: config.api.websocket_tickets,
            metrics: true,
            metrics_require_auth: config.api.metrics_require_auth,
            legacy_tcp_api: config.legacy.enabled,
            modes: ["home", "standard", "hacker"],
            mcp: supported("/mcp"),
        },
    })
}

async fn update_capability(State(state): State<AppState>) -> ApiResult {
    let methods: Vec<&str> = [
        ("/api/system/upgrade", "local upload"),
        ("/api/v1/firmware/update", "v1 alias"),
    ]
    .iter()
    .filter(|(p, _)| implemented(&state, p))
    .map(|(_, m)| *m)
    .collect();
    ok(UpdateCapabilityBody::new(methods))
}

async fn network_info(State(state): State<AppState>) -> ApiResult {
    ok(NetworkInfoBody::now(&state.config(), state.mdns.status()))
}

async fn board_presets(State(state): State<AppState>) -> ApiResult {
    use svcos_common::config::Board;
    let active = state.config().hardware.board;
    let presets = [
        (Board::S9, "s9"),
        (Board::S19, "s19"),
        (Board::Bitaxe, "bitaxe"),
    ]
    .into_iter()
    .map(|(b, id)| {
        let (chains, chips_per_chain, chip_model, default_frequency_mhz, model) = b.preset();
        Preset {
            id,
            model,
            chains,
            chips_per_chain,
            chip_model,
            default_frequency_mhz,
            active: b == active,
        }
    })
    .collect();
    ok(PresetsBody {
        schema: "svcos.api.profiles.presets.v1",
        presets,
    })
}

async fn readiness() -> ApiResult {
    ok(ReadinessBody::contract())
}
