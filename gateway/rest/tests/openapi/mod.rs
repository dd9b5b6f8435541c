//! The OpenAPI 3.1.0 description, generated from the route registry.
//!
//! Every operation: its group as tag, `security` (`[]` for open routes, both alternatives for
//! `/metrics`), path parameters, an optional JSON request body for writes, `200` and
//! `4XX`/`5XX` referencing `ApiErrorBody`, plus `x-svc-response-schema`, `x-svc-source` (the
//! registering file) and the gateway's own `x-svc-support`, `x-svc-required-mode`,
//! `x-svc-pinned`. A route listed in `svcos_api_types::schema::RESPONSES` has its `200` body
//! schema derived from the type the handler serialises (`x-svc-response-schema: derived`, the
//! types' schemas under `components/schemas`); the others say `not-derived`. The miner does not
//! serve this document, so its generator lives with the test that writes and checks
//! `docs/openapi.json` (`tests/registry.rs`), not in the gateway's `src/`, and the schema code
//! stays out of the image (feature `schema` of svcos-api-types, on for the tests only).

use std::collections::BTreeMap;

use axum::http::Method;
use serde_json::{Map, Value, json};
use svcos_api_types::schema::{RESPONSES, generator};

use svcos_gateway::envelope::ErrorCode;
use svcos_gateway::registry::metas;
use svcos_gateway::routing::{AuthClass, RouteMeta};

/// The ApiErrorBody schema.
pub fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "The error envelope of every non-2xx answer. Empty members are omitted.",
        "required": ["error"],
        "properties": {
            "error": {"type": "string", "description": "Human-readable message."},
            "detail": {"type": "string", "minLength": 1},
            "code": {"type": "string", "enum": ErrorCode::ALL.map(|c| c.as_str())},
            "suggestion": {"type": "string", "minLength": 1},
            "field": {"type": "string", "description": "The offending field (config_validation, pool_validation, request checks)."},
            "current_mode": {"type": "string", "enum": ["home", "standard", "hacker"], "description": "Mode gating: the mode the miner is in."},
            "required_mode": {"type": "string", "enum": ["home", "standard", "hacker"], "description": "Mode gating: the mode the operation needs."},
            "retry_after_s": {"type": "integer", "minimum": 1, "description": "Rate limiting: seconds to wait (also in Retry-After)."},
        },
    })
}

fn request_schema(meta: &RouteMeta) -> Value {
    let string = json!({"type": "string"});
    let object = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    match meta.path {
        "/api/auth/session" | "/api/auth/setup" => {
            object(json!({"password": string}), &["password"])
        }
        "/api/pools" | "/api/setup/step5-pool" => object(
            json!({"pools": {"type": "array", "items": {
                "type": "object",
                "required": ["url", "user"],
                "properties": {
                    "url": string, "user": string, "password": string,
                    "priority": {"type": "integer", "minimum": 0},
                    "quota": {"type": "integer", "minimum": 0, "maximum": 100},
                    "enabled": {"type": "boolean"},
                },
            }}}),
            &["pools"],
        ),
        "/api/pools/test" | "/api/setup/test-pool" => object(
            json!({"url": string, "user": string, "password": string, "timeout_ms": {"type": "integer", "minimum": 0}}),
            &["url", "user"],
        ),
        "/api/fan" => object(
            json!({"mode": {"type": "string", "enum": ["auto", "manual"]}, "pwm_percent": {"type": "integer"}, "target_temp_c": {"type": "number"}}),
            &["mode"],
        ),
        "/api/led/config" | "/api/led/pattern" => object(
            json!({"mode": {"type": "string", "enum": ["normal", "locate", "off"]}}),
            &["mode"],
        ),
        "/api/network/hostname" => object(json!({"hostname": string}), &["hostname"]),
        "/api/setup/step4-mode" => object(
            json!({"mode": {"type": "string", "enum": ["home", "standard", "hacker"]}}),
            &["mode"],
        ),
        "/api/config/import" => object(
            json!({"toml": string, "config": {"type": "object"}, "mode": {"type": "string", "enum": ["merge", "replace"]}}),
            &[],
        ),
        "/api/auth/password" => object(
            json!({"current_password": string, "new_password": string}),
            &["current_password", "new_password"],
        ),
        "/api/auth/tokens" => object(
            json!({"name": string, "scope": {"type": "string", "enum": ["read"]}}),
            &["name"],
        ),
        "/api/config/restore" => object(json!({"toml": string, "config": {"type": "object"}}), &[]),
        "/api/action/restart" => object(json!({"service": string}), &[]),
        p if p.starts_with("/api/debug/") => object(
            json!({"confirm": {"type": "boolean", "const": true}}),
            &["confirm"],
        ),
        _ => json!({"type": "object"}),
    }
}

fn operation_id(meta: &RouteMeta) -> String {
    let mut id = meta.method.as_str().to_ascii_lowercase();
    for seg in meta.path.split('/').filter(|s| !s.is_empty()) {
        id.push('_');
        id.extend(
            seg.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
        );
    }
    id
}

fn operation(meta: &RouteMeta, response: Option<Value>) -> Value {
    let error = json!({
        "description": "Error envelope.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApiErrorBody"}}},
    });
    let security = match meta.auth {
        AuthClass::Open => json!([]),
        AuthClass::Bearer => json!([{"bearerSession": []}]),
        AuthClass::Metrics => json!([{}, {"bearerSession": []}]),
    };
    let mut op = Map::new();
    op.insert("operationId".into(), operation_id(meta).into());
    op.insert("summary".into(), meta.summary.into());
    op.insert("tags".into(), json!([meta.group.title()]));
    op.insert("security".into(), security);
    let params: Vec<Value> = meta
        .path
        .split('/')
        .filter_map(|s| s.strip_prefix(':'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    if !params.is_empty() {
        op.insert("parameters".into(), params.into());
    }
    if meta.method == Method::POST || meta.method == Method::PUT {
        op.insert(
            "requestBody".into(),
            json!({
                "required": meta.path.starts_with("/api/debug/"),
                "content": {"application/json": {"schema": request_schema(meta)}},
            }),
        );
    }
    let derived = response.is_some();
    let success = match response {
        Some(schema) => json!({
            "description": "Success.",
            "content": {"application/json": {"schema": schema}},
        }),
        None => {
            json!({"description": "Success. The body shape is not derived; see docs/API-SHAPES.md."})
        }
    };
    op.insert(
        "responses".into(),
        json!({"200": success, "4XX": error.clone(), "5XX": error}),
    );
    op.insert(
        "x-svc-response-schema".into(),
        if derived { "derived" } else { "not-derived" }.into(),
    );
    op.insert("x-svc-source".into(), meta.source.into());
    op.insert("x-svc-support".into(), meta.support.as_str().into());
    op.insert(
        "x-svc-required-mode".into(),
        meta.required_mode().as_str().into(),
    );
    op.insert("x-svc-pinned".into(), meta.pinned.into());
    Value::Object(op)
}

/// The whole document.
pub fn document() -> Value {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut schemas = generator();
    for (method, path, _) in RESPONSES {
        assert!(
            metas()
                .iter()
                .any(|m| m.method.as_str() == *method && m.path == *path),
            "svcos_api_types::schema::RESPONSES names {method} {path}, which the registry does not mount"
        );
    }
    for meta in metas() {
        let response = RESPONSES
            .iter()
            .find(|(method, path, _)| meta.method.as_str() == *method && meta.path == *path)
            .map(|(_, _, schema_of)| schema_of(&mut schemas).to_value());
        paths.entry(meta.axum_path()).or_default().insert(
            meta.method.as_str().to_ascii_lowercase(),
            operation(meta, response),
        );
    }
    let mut components: Map<String, Value> = schemas.take_definitions(true);
    components.insert("ApiErrorBody".into(), error_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "svcOS miner local API",
            "version": svcos_gateway::handlers::discovery::API_CONTRACT_VERSION,
            "description": "Generated from the gateway's route registry. Every non-2xx answer is the ApiErrorBody envelope. Operations with x-svc-response-schema: derived describe their 200 body with a schema derived from the type the gateway serialises. Operations with x-svc-support: planned answer 501 until their feature lands.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearerSession": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Session token from POST /api/auth/session.",
                },
            },
        },
    })
}

/// The document as pretty JSON with a trailing newline (the committed form).
pub fn document_text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("openapi serialises");
    s.push('\n');
    s
}
