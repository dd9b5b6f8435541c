//! The route table, on top of every route group: it lists the groups' rows in inventory order
//! and is the only module that imports them. The router ([`crate::router`]), the OpenAPI
//! description (generated in `tests/registry.rs`) and the tests read it here; handlers that
//! need the table (`/api/index`, MCP) get it through the state
//! ([`crate::state::Inner::routes`]), never by importing this module.

use axum::http::Method;

use crate::AppState;
pub use crate::routing::{
    AuthClass, Group, Route, RouteMeta, RouteTable, Support, mode_rank, required_mode,
};
#[cfg(test)]
use svcos_common::config::Mode;

/// The whole registry, in inventory order within each module.
pub fn all() -> Vec<Route<AppState>> {
    let mut routes = Vec::with_capacity(260);
    routes.extend(crate::handlers::discovery::routes());
    // The wizard's status is listed with the auth group (the inventory's grouping) but answered
    // by the wizard: the table connects the two so neither group imports the other.
    routes.extend(crate::handlers::auth::routes(
        crate::handlers::operations::setup::status,
    ));
    routes.extend(crate::handlers::status::routes());
    routes.extend(crate::handlers::history::routes());
    routes.extend(crate::handlers::mining::routes());
    routes.extend(crate::handlers::pools::routes());
    routes.extend(crate::handlers::sv2::routes());
    routes.extend(crate::handlers::firmware::routes());
    routes.extend(crate::handlers::operations::setup::routes());
    routes.extend(crate::handlers::operations::config_sections::routes());
    routes.extend(crate::handlers::operations::fleet::routes());
    routes.extend(crate::handlers::operations::ssh::routes());
    routes.extend(crate::handlers::operations::lan::routes());
    routes.extend(crate::handlers::operations::energy_api::routes());
    routes.extend(crate::handlers::operations::home::routes());
    routes.extend(crate::handlers::operations::governor::routes());
    routes.extend(crate::handlers::tuning::routes());
    routes.extend(crate::handlers::integrations::routes());
    routes.extend(crate::handlers::mcp::routes());
    routes.extend(crate::handlers::diagnostics::routes());
    routes.extend(crate::handlers::hardware::routes());
    routes.extend(crate::handlers::config::routes());
    routes.extend(crate::handlers::catalog::routes());
    routes
}

/// The table, built once (handlers are state-generic, so one table serves every gateway
/// instance in the process).
pub fn table() -> &'static RouteTable<AppState> {
    static TABLE: std::sync::OnceLock<RouteTable<AppState>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| RouteTable::new(all()))
}

/// The metadata of every registered operation.
pub fn metas() -> &'static [RouteMeta] {
    &table().metas
}

/// The registry row of an operation, if mounted.
pub fn find(method: &Method, path: &str) -> Option<&'static RouteMeta> {
    table().find(method, path)
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

    #[test]
    fn declared_routes_are_72_distinct_and_mounted() {
        let mut seen = std::collections::BTreeSet::new();
        for (surface, method, path) in crate::handlers::discovery::DECLARED {
            assert!(
                crate::handlers::discovery::SURFACES
                    .iter()
                    .any(|s| s.0 == surface),
                "{surface}"
            );
            assert!(seen.insert((method, path)), "duplicate {method} {path}");
            if path != "/ws" {
                assert!(
                    metas()
                        .iter()
                        .any(|m| m.method.as_str() == method && m.path == path),
                    "{method} {path} is not mounted"
                );
            }
        }
        assert_eq!(seen.len(), 72);
        for (id, _) in crate::handlers::discovery::SURFACES {
            assert!(
                crate::handlers::discovery::DECLARED
                    .iter()
                    .any(|d| d.0 == id),
                "{id}"
            );
        }
    }
}
