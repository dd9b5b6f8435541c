//! The registry against the spec's inventory, the committed OpenAPI description and the pinned
//! route snapshot.
//!
//! Regenerate the committed files after an intended change with
//! `SVCOS_UPDATE_SNAPSHOTS=1 cargo test -p svcos-gateway --test registry`.

mod common;
mod openapi;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use svcos_gateway::registry::{AuthClass, metas};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_root() -> PathBuf {
    crate_dir().join("../..")
}

fn update() -> bool {
    std::env::var_os("SVCOS_UPDATE_SNAPSHOTS").is_some()
}

fn registry_rows() -> BTreeSet<(String, String, String, bool, String)> {
    metas()
        .iter()
        .map(|m| {
            (
                m.method.as_str().to_string(),
                m.path.to_string(),
                m.auth.as_str().to_string(),
                m.pinned,
                m.group.title().to_string(),
            )
        })
        .collect()
}

#[test]
fn registry_matches_the_spec_inventory() {
    let committed = std::fs::read_to_string(crate_dir().join("tests/routes.tsv")).unwrap();
    // CI runs with the shared spec beside the clone; when present, the committed copy must match.
    let shared = workspace_root().join("../shared/spec/routes.tsv");
    match std::fs::read_to_string(&shared) {
        Ok(text) => assert_eq!(
            common::spec_rows(&text),
            common::spec_rows(&committed),
            "tests/routes.tsv differs from {}",
            shared.display()
        ),
        Err(_) => println!(
            "note: {} not found; using the committed copy only",
            shared.display()
        ),
    }
    // Operations svcOS serves beyond the spec's inventory (documented in docs/API-SHAPES.md).
    let extensions_text =
        std::fs::read_to_string(crate_dir().join("tests/extensions.tsv")).unwrap();
    let extensions: BTreeSet<_> = common::spec_rows(&extensions_text).into_iter().collect();
    let mut spec: BTreeSet<_> = common::spec_rows(&committed).into_iter().collect();
    assert!(
        spec.is_disjoint(&extensions),
        "an extension is in the spec now: drop it from tests/extensions.tsv"
    );
    spec.extend(extensions.iter().cloned());
    let registry = registry_rows();
    let missing: Vec<_> = spec.difference(&registry).collect();
    let extra: Vec<_> = registry.difference(&spec).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing from registry: {missing:#?}\nnot in spec: {extra:#?}"
    );

    // The counts below are the spec's own.
    let ops: Vec<_> = metas()
        .iter()
        .filter(|m| {
            !extensions
                .iter()
                .any(|e| e.0 == m.method.as_str() && e.1 == m.path)
        })
        .collect();
    assert_eq!(ops.len(), 258, "operations");
    let paths: BTreeSet<_> = ops.iter().map(|m| m.path).collect();
    assert_eq!(paths.len(), 241, "paths");
    let mut by_method = BTreeMap::new();
    for m in &ops {
        *by_method.entry(m.method.as_str()).or_insert(0) += 1;
    }
    assert_eq!(
        by_method,
        BTreeMap::from([("DELETE", 2), ("GET", 170), ("POST", 84), ("PUT", 2)])
    );
    let open: BTreeSet<_> = ops
        .iter()
        .filter(|m| m.auth == AuthClass::Open)
        .map(|m| m.path)
        .collect();
    assert_eq!(
        open,
        BTreeSet::from([
            "/api/auth/status",
            "/api/auth/setup",
            "/api/auth/session",
            "/api/setup/status",
            "/api/safety/warnings",
            "/api/system/update/metadata",
            "/api/donation/info",
        ])
    );
    let pinned: BTreeSet<_> = ops.iter().filter(|m| m.pinned).map(|m| m.path).collect();
    assert_eq!(pinned.len(), 222, "pinned paths");
}

#[test]
fn every_operation_is_registered_once_with_its_source() {
    let mut seen = BTreeSet::new();
    for m in metas() {
        assert!(
            seen.insert((m.method.as_str(), m.path)),
            "{} {} twice",
            m.method,
            m.path
        );
        assert!(m.source.starts_with("gateway/rest/src/"), "{}", m.source);
        assert!(workspace_root().join(m.source).exists(), "{}", m.source);
        assert!(!m.summary.is_empty());
    }
}

#[test]
fn route_snapshot_pins_the_222_pinned_paths() {
    let path = crate_dir().join("tests/route_snapshot.txt");
    let current: BTreeSet<String> = metas()
        .iter()
        .filter(|m| m.pinned)
        .map(|m| m.path.to_string())
        .collect();
    let text: String = current.iter().map(|p| format!("{p}\n")).collect();
    if update() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .expect("tests/route_snapshot.txt (regenerate with SVCOS_UPDATE_SNAPSHOTS=1)");
    let pinned: BTreeSet<String> = committed.lines().map(str::to_string).collect();
    assert_eq!(pinned.len(), 222);
    let added: Vec<_> = current.difference(&pinned).collect();
    let removed: Vec<_> = pinned.difference(&current).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "router differs from the pinned snapshot: added {added:?}, removed {removed:?}"
    );
}

#[test]
fn openapi_document_is_generated_from_the_registry_and_committed() {
    let path = workspace_root().join("docs/openapi.json");
    let text = openapi::document_text();
    if update() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .expect("docs/openapi.json (regenerate with SVCOS_UPDATE_SNAPSHOTS=1)");
    assert!(
        committed == text,
        "docs/openapi.json is stale: regenerate with SVCOS_UPDATE_SNAPSHOTS=1"
    );

    let doc: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.contains_key("ApiErrorBody"));
    assert!(schemas.contains_key("StatusBody"), "{:?}", schemas.keys());
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    assert_eq!(schemes.keys().collect::<Vec<_>>(), ["bearerSession"]);
    let paths = doc["paths"].as_object().unwrap();
    // The spec's 241 paths plus the extensions' own (tests/extensions.tsv).
    let extensions_text =
        std::fs::read_to_string(crate_dir().join("tests/extensions.tsv")).unwrap();
    let extension_paths: BTreeSet<_> = common::spec_rows(&extensions_text)
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(paths.len(), 241 + extension_paths.len());
    let mut ops = 0;
    for (p, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            ops += 1;
            for status in ["4XX", "5XX"] {
                assert_eq!(
                    op["responses"][status]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ApiErrorBody",
                    "{method} {p} {status}"
                );
            }
            let typed = openapi::typed_responses().any(|(m, path)| {
                m.eq_ignore_ascii_case(method) && path.replace(':', "{") == p.replace('}', "")
            });
            let ok = &op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"];
            if typed {
                assert_eq!(op["x-svc-response-schema"], "derived", "{method} {p}");
                let name = ok
                    .as_str()
                    .unwrap()
                    .strip_prefix("#/components/schemas/")
                    .unwrap();
                assert_eq!(schemas[name]["type"], "object", "{method} {p}");
            } else if let Some((.., bodies, _)) = openapi::MEDIA.iter().find(|(m, path, ..)| {
                m.eq_ignore_ascii_case(method) && path.replace(':', "{") == p.replace('}', "")
            }) {
                // Exactly the table's media types, each with a schema that says something.
                assert_eq!(op["x-svc-response-schema"], "media", "{method} {p}");
                let content = op["responses"]["200"]["content"].as_object().unwrap();
                let listed: BTreeSet<&str> = bodies.iter().map(|(m, _)| *m).collect();
                assert_eq!(
                    content.keys().map(String::as_str).collect::<BTreeSet<_>>(),
                    listed,
                    "{method} {p}"
                );
                for (media, body) in content {
                    let schema = &body["schema"];
                    let typed_ref = schema["$ref"].as_str();
                    assert!(
                        typed_ref.is_some() || schema["type"].is_string(),
                        "{method} {p} {media}: {schema}"
                    );
                    if !media.starts_with("application/json") {
                        assert_eq!(schema["type"], "string", "{method} {p} {media}");
                    }
                }
            } else if op["x-svc-support"] == "planned" {
                // Answers 501 before doing anything: no success body to describe.
                assert_eq!(op["x-svc-response-schema"], "planned", "{method} {p}");
                assert!(op["responses"]["200"].is_null(), "{method} {p}");
                assert_eq!(
                    op["responses"]["501"]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ApiErrorBody",
                    "{method} {p}"
                );
            } else {
                assert_eq!(op["x-svc-response-schema"], "not-derived", "{method} {p}");
                assert!(ok.is_null(), "{method} {p}");
                assert!(op["responses"]["200"]["content"].is_null(), "{method} {p}");
            }
            assert!(op["x-svc-source"].as_str().unwrap().ends_with(".rs"));
            let spec_path = p.replace('{', ":").replace('}', "");
            let meta = metas()
                .iter()
                .find(|m| m.path == spec_path && m.method.as_str().eq_ignore_ascii_case(method))
                .unwrap();
            let security = &op["security"];
            match meta.auth {
                AuthClass::Open => assert_eq!(security, &serde_json::json!([])),
                AuthClass::Bearer => {
                    assert_eq!(security, &serde_json::json!([{"bearerSession": []}]))
                }
                AuthClass::Metrics => {
                    assert_eq!(security, &serde_json::json!([{}, {"bearerSession": []}]))
                }
            }
        }
    }
    assert_eq!(ops, 258 + common::spec_rows(&extensions_text).len());
}

#[test]
fn config_schema_is_derived_from_the_config_types_and_committed() {
    // The gateway serves this file (GET /api/network/config_schema), so the served schema is
    // always the committed one; this test keeps the committed one derived from the types.
    let path = workspace_root().join("docs/config.schema.json");
    let mut text =
        serde_json::to_string_pretty(&svcos_common::config::json_schema()).expect("serialises");
    text.push('\n');
    if update() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .expect("docs/config.schema.json (regenerate with SVCOS_UPDATE_SNAPSHOTS=1)");
    assert!(
        committed == text,
        "docs/config.schema.json is stale: regenerate with SVCOS_UPDATE_SNAPSHOTS=1"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    // The config refuses unknown members, and so does its schema, in every section.
    assert_eq!(schema["additionalProperties"], false);
    for section in ["system", "api", "legacy", "energy", "pools"] {
        assert!(
            schema["properties"][section].is_object(),
            "{section}: {}",
            schema["properties"][section]
        );
    }
    let defs = schema["$defs"].as_object().unwrap();
    for name in ["ApiConfig", "PoolConfig", "SolarConfig", "SystemConfig"] {
        assert_eq!(defs[name]["additionalProperties"], false, "{name}");
    }
    assert_eq!(defs["ApiConfig"]["properties"]["port"]["default"], 8080);
}

#[test]
fn every_write_with_a_body_has_a_request_type_or_a_reason() {
    use openapi::{NO_BODY, OTHER_BODY, UNTYPED_BODY, is_write};
    use svcos_gateway::routing::Support;

    let typed: Vec<(&str, &str)> = openapi::typed_requests().collect();
    let no_body: Vec<(&str, &str)> = NO_BODY.iter().map(|r| (r.0, r.1)).collect();
    let other: Vec<(&str, &str)> = OTHER_BODY.iter().map(|r| (r.0, r.1)).collect();
    let untyped: Vec<(&str, &str)> = UNTYPED_BODY.iter().map(|r| (r.0, r.1)).collect();
    for (reason, why) in NO_BODY
        .iter()
        .map(|r| (r.2, r.1))
        .chain(OTHER_BODY.iter().map(|r| (r.3, r.1)))
        .chain(UNTYPED_BODY.iter().map(|r| (r.2, r.1)))
    {
        assert!(!reason.is_empty(), "{why}: a listed write needs its reason");
    }
    // Every row names a mounted write that reads its body (planned routes never do).
    for (table, rows) in [
        ("REQUESTS", &typed),
        ("NO_BODY", &no_body),
        ("OTHER_BODY", &other),
        ("UNTYPED_BODY", &untyped),
    ] {
        for (method, path) in rows {
            let meta = metas()
                .iter()
                .find(|m| m.method.as_str() == *method && m.path == *path)
                .unwrap_or_else(|| panic!("{table} names {method} {path}, which is not mounted"));
            assert!(is_write(meta), "{table}: {method} {path} is not a write");
            assert!(
                meta.support != Support::Planned,
                "{table}: {method} {path} is planned (answers 501 before reading a body)"
            );
        }
    }
    // Every write is in exactly one table, or is planned.
    for meta in metas().iter().filter(|m| is_write(m)) {
        let key = (meta.method.as_str(), meta.path);
        let tables: Vec<&str> = [
            ("REQUESTS", &typed),
            ("NO_BODY", &no_body),
            ("OTHER_BODY", &other),
            ("UNTYPED_BODY", &untyped),
        ]
        .iter()
        .filter(|(_, rows)| rows.contains(&key))
        .map(|(t, _)| *t)
        .collect();
        let expected = usize::from(meta.support != Support::Planned);
        assert_eq!(
            tables.len(),
            expected,
            "{} {}: listed in {tables:?}; a write with a JSON body needs a type in \
             its row's `req:` (or a reason in NO_BODY)",
            meta.method,
            meta.path
        );
    }
    // The document says what the tables say, and a derived body refuses unknown members
    // exactly as the handler's `deny_unknown_fields` type does.
    let doc = openapi::document();
    let schemas = &doc["components"]["schemas"];
    for meta in metas().iter().filter(|m| is_write(m)) {
        let op = &doc["paths"][meta.axum_path()][meta.method.as_str().to_ascii_lowercase()];
        let key = (meta.method.as_str(), meta.path);
        if typed.contains(&key) {
            assert_eq!(op["x-svc-request-schema"], "derived", "{key:?}");
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            let name = schema["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .unwrap();
            assert_eq!(schemas[name]["type"], "object", "{key:?}");
            assert_eq!(schemas[name]["additionalProperties"], false, "{key:?}");
        } else if untyped.contains(&key) {
            assert_eq!(op["x-svc-request-schema"], "not-derived", "{key:?}");
        } else if other.contains(&key) {
            assert_eq!(op["x-svc-request-schema"], "not-json", "{key:?}");
        } else {
            assert!(op["requestBody"].is_null(), "{key:?}");
        }
    }
}
