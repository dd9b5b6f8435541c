//! The one route registry: every mounted operation with its auth class, pinned flag, group,
//! support grade, handler and the source file that registers it.
//!
//! Each handler module contributes its rows through `routes()`; [`all`] concatenates them. The
//! router ([`crate::router`]), the OpenAPI description ([`crate::openapi`]), `/api/index` and the
//! tests are all derived from this table, so they cannot drift apart.

use axum::http::Method;
use axum::routing::MethodRouter;
use svcos_common::config::Mode;

use crate::AppState;

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthClass {
    /// No token needed (the spec's seven open API paths).
    Open,
    /// A valid bearer session is needed.
    Bearer,
    /// `/metrics`: open while `[api].metrics_require_auth` is off, bearer when on.
    Metrics,
}

impl AuthClass {
    /// The routes.tsv spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthClass::Open => "open",
            AuthClass::Bearer => "bearer",
            AuthClass::Metrics => "metrics",
        }
    }
}

/// How complete an operation's behaviour is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Backed by the owning service or by documented constants.
    Full,
    /// Backed, but only part of what the name promises (documented per route).
    Partial,
    /// Mounted with auth, mode gating and envelope; answers 501 until its feature lands.
    Planned,
}

impl Support {
    /// The wire spelling used in `/api/index` and `x-svc-support`.
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Full => "supported",
            Support::Partial => "partial",
            Support::Planned => "planned",
        }
    }
}

/// The inventory groups of the spec, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Identity and discovery.
    Identity,
    /// Authentication and session.
    Auth,
    /// Mining status and telemetry.
    Telemetry,
    /// Pools and Stratum.
    Pools,
    /// Autotuner and tuning.
    Tuning,
    /// Thermal, fans and power.
    Thermal,
    /// Actions and lifecycle.
    Actions,
    /// Config, backup and audit.
    Config,
    /// Hardware inventory and sensors.
    Hardware,
    /// LEDs and physical identification.
    Led,
    /// Network, fleet and swarm.
    Fleet,
    /// Off-grid and solar.
    OffGrid,
    /// Integrations.
    Integrations,
    /// Reverse-engineering catalog.
    ReCatalog,
    /// Diagnostics and debug.
    Diagnostics,
    /// Everything else.
    Other,
}

impl Group {
    /// The group title as routes.tsv spells it (also the OpenAPI tag).
    pub fn title(self) -> &'static str {
        match self {
            Group::Identity => "Identity and discovery",
            Group::Auth => "Authentication and session",
            Group::Telemetry => "Mining status and telemetry",
            Group::Pools => "Pools and Stratum",
            Group::Tuning => "Autotuner and tuning",
            Group::Thermal => "Thermal, fans and power",
            Group::Actions => "Actions and lifecycle",
            Group::Config => "Config, backup and audit",
            Group::Hardware => "Hardware inventory and sensors",
            Group::Led => "LEDs and physical identification",
            Group::Fleet => "Network, fleet and swarm",
            Group::OffGrid => "Off-grid and solar",
            Group::Integrations => "Integrations",
            Group::ReCatalog => "Reverse-engineering catalog",
            Group::Diagnostics => "Diagnostics and debug",
            Group::Other => "Everything else",
        }
    }
}

/// Everything about one operation except its handler.
#[derive(Debug, Clone)]
pub struct RouteMeta {
    /// HTTP method.
    pub method: Method,
    /// Path in the spec's notation (`:id` for a parameter).
    pub path: &'static str,
    /// Auth class.
    pub auth: AuthClass,
    /// Present in the test-pinned route snapshot.
    pub pinned: bool,
    /// Inventory group.
    pub group: Group,
    /// Support grade.
    pub support: Support,
    /// The source file that registers the operation (`file!()`).
    pub source: &'static str,
    /// One line saying what the operation does.
    pub summary: &'static str,
}

impl RouteMeta {
    /// The path in axum/OpenAPI notation (`{id}`).
    pub fn axum_path(&self) -> String {
        self.path
            .split('/')
            .map(|seg| match seg.strip_prefix(':') {
                Some(name) => format!("{{{name}}}"),
                None => seg.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Whether the operation changes state (anything but GET).
    pub fn mutates(&self) -> bool {
        self.method != Method::GET
    }

    /// The lowest operating mode in which the operation is reachable.
    pub fn required_mode(&self) -> Mode {
        required_mode(self.path)
    }
}

/// Paths reachable in Home mode (the spec: status, pools, config, system info, /api/home/*,
/// sleep/wake, diagnostics), plus what any mode needs to log in, discover and monitor.
const HOME_PREFIXES: &[&str] = &[
    "/api/status",
    "/metrics",
    "/mcp",
    "/api/pools",
    "/api/stratum/",
    "/api/config",
    "/api/donation/",
    "/api/safety/",
    "/api/system/",
    "/api/v1/",
    "/api/index",
    "/api/compatibility/",
    "/api/competitive/",
    "/api/dashboard/",
    "/api/auth/",
    "/api/setup/",
    "/api/home/",
    "/api/action/sleep",
    "/api/action/wake",
    "/api/diagnostics/",
];

/// The mode gating table: `/api/debug/*` needs Hacker; the Home set above is always reachable;
/// everything else (stats, profiles, history, tuning, thermal, hardware, fleet, ...) needs
/// Standard.
pub fn required_mode(path: &str) -> Mode {
    if path.starts_with("/api/debug/") {
        Mode::Hacker
    } else if HOME_PREFIXES.iter().any(|p| path.starts_with(p)) {
        Mode::Home
    } else {
        Mode::Standard
    }
}

/// Mode order: Home < Standard < Hacker.
pub fn mode_rank(mode: Mode) -> u8 {
    match mode {
        Mode::Home => 0,
        Mode::Standard => 1,
        Mode::Hacker => 2,
    }
}

/// One registry row: metadata plus the axum handler.
pub struct Route {
    /// The metadata.
    pub meta: RouteMeta,
    /// The handler, already bound to its method.
    pub handler: MethodRouter<AppState>,
}

/// Register an operation. `route!(GET "/api/status", Bearer, P, Telemetry, Full, "summary", handler)`;
/// `P` = pinned, `U` = not pinned.
#[macro_export]
#[doc(hidden)]
macro_rules! route {
    ($m:ident $path:literal, $auth:ident, $pin:ident, $group:ident, $support:ident, $summary:literal, $handler:expr) => {
        $crate::registry::Route {
            meta: $crate::registry::RouteMeta {
                method: ::axum::http::Method::$m,
                path: $path,
                auth: $crate::registry::AuthClass::$auth,
                pinned: $crate::route!(@pin $pin),
                group: $crate::registry::Group::$group,
                support: $crate::registry::Support::$support,
                source: file!(),
                summary: $summary,
            },
            handler: ::axum::routing::on(::axum::routing::MethodFilter::$m, $handler),
        }
    };
    (@pin P) => { true };
    (@pin U) => { false };
}

/// Register an operation whose feature has not landed: it answers 501 with the envelope.
#[macro_export]
#[doc(hidden)]
macro_rules! planned {
    ($m:ident $path:literal, $pin:ident, $group:ident, $feature:literal) => {
        $crate::route!($m $path, Bearer, $pin, $group, Planned, $feature, || async {
            $crate::envelope::ApiError::not_implemented($feature)
        })
    };
}

/// The whole registry, in inventory order within each module.
pub fn all() -> Vec<Route> {
    let mut routes = Vec::with_capacity(260);
    routes.extend(crate::handlers::discovery::routes());
    routes.extend(crate::handlers::auth::routes());
    routes.extend(crate::handlers::status::routes());
    routes.extend(crate::handlers::history::routes());
    routes.extend(crate::handlers::mining::routes());
    routes.extend(crate::handlers::pools::routes());
    routes.extend(crate::handlers::sv2::routes());
    routes.extend(crate::handlers::firmware::routes());
    routes.extend(crate::handlers::operations::routes());
    routes.extend(crate::handlers::tuning::routes());
    routes.extend(crate::handlers::integrations::routes());
    routes.extend(crate::handlers::mcp::routes());
    routes.extend(crate::handlers::diagnostics::routes());
    routes.extend(crate::handlers::hardware::routes());
    routes.extend(crate::handlers::config::routes());
    routes.extend(crate::handlers::catalog::routes());
    routes
}

/// The metadata of every registered operation (built once).
pub fn metas() -> &'static [RouteMeta] {
    static METAS: std::sync::OnceLock<Vec<RouteMeta>> = std::sync::OnceLock::new();
    METAS.get_or_init(|| all().into_iter().map(|r| r.meta).collect())
}

/// The registry row of an operation, if mounted.
pub fn find(method: &Method, path: &str) -> Option<&'static RouteMeta> {
    metas()
        .iter()
        .find(|m| m.method == *method && m.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_table() {
        assert_eq!(required_mode("/api/debug/i2c"), Mode::Hacker);
        assert_eq!(required_mode("/api/status"), Mode::Home);
        assert_eq!(required_mode("/api/home/status"), Mode::Home);
        assert_eq!(required_mode("/api/action/sleep"), Mode::Home);
        assert_eq!(required_mode("/api/diagnostics/chain"), Mode::Home);
        assert_eq!(required_mode("/api/stats"), Mode::Standard);
        assert_eq!(required_mode("/api/profiles"), Mode::Standard);
        assert_eq!(required_mode("/api/history"), Mode::Standard);
        assert_eq!(required_mode("/api/action/reboot"), Mode::Standard);
    }

    #[test]
    fn open_paths_are_reachable_in_home_mode() {
        for m in metas() {
            if m.auth != AuthClass::Bearer {
                assert_eq!(m.required_mode(), Mode::Home, "{}", m.path);
            }
        }
    }

    #[test]
    fn axum_path_converts_params() {
        let m = metas()
            .iter()
            .find(|m| m.path == "/api/profiles/silicon/:id")
            .unwrap();
        assert_eq!(m.axum_path(), "/api/profiles/silicon/{id}");
    }
}
