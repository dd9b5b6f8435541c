//! What a route row is: method, path, auth class, pinned flag, group, support grade, handler and
//! registering file, plus the path policies the guard applies (mode gating, first-boot paths,
//! upload paths).
//!
//! This module sits underneath every route group: a group builds its rows with [`route!`] and
//! [`planned!`] without knowing the table they end up in. The table itself is assembled on top
//! ([`crate::registry`]) and handed down through the state ([`RouteTable`]), so no group imports
//! the table that imports it.

use axum::http::Method;
use axum::routing::MethodRouter;
use svcos_common::config::Mode;

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
    /// The JSON Schema of the type the handler parses a write's body into, when it is one.
    #[cfg(feature = "schema")]
    pub request: Option<svcos_api_types::schema::SchemaOf>,
    /// The JSON Schema of the type the handler serialises its `200` body from, when it is one.
    #[cfg(feature = "schema")]
    pub response: Option<svcos_api_types::schema::SchemaOf>,
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

/// Largest bundle accepted, bytes.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 30;
/// The paths that take a bundle upload (shared with the proxy, which streams only these).
pub use svcos_common::httpserve::UPLOAD_PATHS;

/// Whether `path` takes a bundle upload (it has its own size limit, not `[api].max_body_bytes`).
pub fn is_upload(path: &str) -> bool {
    UPLOAD_PATHS.contains(&path)
}

/// Whether the guard leaves `path`'s body to its handler: bundle uploads stream raw bytes, and
/// `/mcp` is a JSON-RPC transport with its own rules (a batch is an array). Every other write
/// takes nothing, a JSON object, or (see [`accepts_json_array`]) a bare array.
pub fn takes_raw_body(path: &str) -> bool {
    is_upload(path) || path == "/mcp"
}

/// The writes whose documented body may also be a bare JSON array (the pool list).
pub fn accepts_json_array(path: &str) -> bool {
    matches!(path, "/api/pools" | "/api/setup/step5-pool")
}

/// Reads that answer secrets in the clear (a backup must restore them), so a read-only API
/// token, which every other read accepts, is refused here: a backup needs an owner session.
pub fn reveals_secrets(path: &str) -> bool {
    path == "/api/config/export"
}

/// Wizard writes reachable without a token while no password exists.
pub fn first_boot_open(path: &str) -> bool {
    matches!(
        path,
        "/api/setup/step1-safety"
            | "/api/setup/skip-safety"
            | "/api/setup/step2-circuit"
            | "/api/setup/step3-password"
            | "/api/setup/step-economics"
            | "/api/setup/quiet-hours"
    )
}

/// Mode order: Home < Standard < Hacker.
pub fn mode_rank(mode: Mode) -> u8 {
    match mode {
        Mode::Home => 0,
        Mode::Standard => 1,
        Mode::Hacker => 2,
    }
}

/// One registry row: metadata plus the axum handler (`S` is the gateway's state).
pub struct Route<S> {
    /// The metadata.
    pub meta: RouteMeta,
    /// The handler, already bound to its method.
    pub handler: MethodRouter<S>,
}

/// The whole table as the layers below the top see it: every row's metadata (in registry
/// order) and handler, built once by [`crate::registry`].
#[derive(Debug)]
pub struct RouteTable<S> {
    /// Every row's metadata, in registry order.
    pub metas: Vec<RouteMeta>,
    /// `handlers[i]` answers `metas[i]`. A vector, not a map: a `MethodRouter` is a few hundred
    /// bytes of mostly empty method slots, and a map's power-of-two slack doubled the table's
    /// resident size (docs/PERFORMANCE.md); lookups are rare (in-process MCP/MQTT calls) and
    /// [`Self::find`] scans the rows anyway.
    handlers: Vec<MethodRouter<S>>,
}

impl<S> RouteTable<S> {
    /// The table of these rows.
    pub fn new(routes: Vec<Route<S>>) -> Self {
        let mut metas = Vec::with_capacity(routes.len());
        let mut handlers = Vec::with_capacity(routes.len());
        for r in routes {
            handlers.push(r.handler);
            metas.push(r.meta);
        }
        RouteTable { metas, handlers }
    }

    /// The row of an operation, if mounted.
    pub fn find(&self, method: &Method, path: &str) -> Option<&RouteMeta> {
        self.metas
            .iter()
            .find(|m| m.method == *method && m.path == path)
    }

    /// The handler of an operation, if mounted.
    pub fn handler(&self, method: &Method, path: &str) -> Option<&MethodRouter<S>> {
        let i = self
            .metas
            .iter()
            .position(|m| m.method == *method && m.path == path)?;
        self.handlers.get(i)
    }
}

/// Register an operation. `route!(GET "/api/status", Bearer, P, Telemetry, Full, "summary", handler)`;
/// `P` = pinned, `U` = not pinned. A trailing `req: Type` names the type a write's JSON body is
/// parsed into and `res: Type` the type its `200` body is serialised from, so the OpenAPI
/// description derives both from the row itself (their schema code exists only with the
/// feature `schema`, which the tests turn on; the image carries none).
#[macro_export]
#[doc(hidden)]
macro_rules! route {
    ($m:ident $path:literal, $auth:ident, $pin:ident, $group:ident, $support:ident, $summary:literal, $handler:expr $(, req: $req:ty)? $(, res: $res:ty)?) => {
        $crate::routing::Route {
            meta: $crate::routing::RouteMeta {
                method: ::axum::http::Method::$m,
                path: $path,
                auth: $crate::routing::AuthClass::$auth,
                pinned: $crate::route!(@pin $pin),
                group: $crate::routing::Group::$group,
                support: $crate::routing::Support::$support,
                source: file!(),
                summary: $summary,
                #[cfg(feature = "schema")]
                request: $crate::route!(@schema $($req)?),
                #[cfg(feature = "schema")]
                response: $crate::route!(@schema $($res)?),
            },
            handler: ::axum::routing::on(::axum::routing::MethodFilter::$m, $handler),
        }
    };
    (@pin P) => { true };
    (@pin U) => { false };
    (@schema) => { None };
    (@schema $t:ty) => { Some(::svcos_api_types::schema::of::<$t> as ::svcos_api_types::schema::SchemaOf) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_boot_window_stops_at_the_password() {
        assert!(first_boot_open("/api/setup/step3-password"));
        assert!(!first_boot_open("/api/setup/complete"));
        assert!(!first_boot_open("/api/setup/skip-password"));
        assert!(!first_boot_open("/api/safety/acknowledge"));
    }
}
