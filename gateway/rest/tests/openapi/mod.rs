//! The OpenAPI 3.1.0 description, generated from the route registry.
//!
//! Every operation: its group as tag, `security` (`[]` for open routes, both alternatives for
//! `/metrics`), path parameters, an optional JSON request body for writes, `200` and
//! `4XX`/`5XX` referencing `ApiErrorBody`, plus `x-svc-response-schema`,
//! `x-svc-request-schema` (writes with a body), `x-svc-source` (the
//! registering file) and the gateway's own `x-svc-support`, `x-svc-required-mode`,
//! `x-svc-pinned`. A route whose row names `res: Type` has its `200` body
//! schema derived from that type, the one the handler serialises (`x-svc-response-schema: derived`, the
//! types' schemas under `components/schemas`); a route in [`MEDIA`], whose answer is not such a
//! JSON document (CSV, Prometheus text, an archive, a peer's document passed through, JSON-RPC),
//! has each media type it really sends with that body's schema (`x-svc-response-schema: media`);
//! a planned operation has no `200`, only its `501` envelope (`planned`); the others say
//! `not-derived`. Likewise a write
//! whose row names `req: Type` has its JSON body's schema derived from that type, the one its
//! handler parses the body into (`x-svc-request-schema: derived`); [`NO_BODY`],
//! [`OTHER_BODY`] and [`UNTYPED_BODY`] account for every other write. The miner does not
//! serve this document, so its generator lives with the test that writes and checks
//! `docs/openapi.json` (`tests/registry.rs`), not in the gateway's `src/`, and the schema code
//! stays out of the image (feature `schema` of svcos-api-types, on for the tests only).

use std::collections::BTreeMap;

use axum::http::Method;
use serde_json::{Map, Value, json};
use svcos_api_types::schema::{SchemaGenerator, SchemaOf, generator, request_generator};

/// `(method, path)` of every row that names its request type.
pub fn typed_requests() -> impl Iterator<Item = (&'static str, &'static str)> {
    metas()
        .iter()
        .filter(|m| m.request.is_some())
        .map(|m| (m.method.as_str(), m.path))
}

/// `(method, path)` of every row that names its response type.
pub fn typed_responses() -> impl Iterator<Item = (&'static str, &'static str)> {
    metas()
        .iter()
        .filter(|m| m.response.is_some())
        .map(|m| (m.method.as_str(), m.path))
}

use svcos_gateway::envelope::ErrorCode;
use svcos_gateway::registry::metas;
use svcos_gateway::routing::{AuthClass, RouteMeta, Support};

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
            "field": {"type": "string", "description": "The offending field (config_validation, pool_validation, request checks; `generation` for config_conflict)."},
            "generation": {"type": "integer", "minimum": 1, "description": "config_conflict: the config generation in force (send it as If-Match after re-reading)."},
            "current_mode": {"type": "string", "enum": ["home", "standard", "hacker"], "description": "Mode gating: the mode the miner is in."},
            "required_mode": {"type": "string", "enum": ["home", "standard", "hacker"], "description": "Mode gating: the mode the operation needs."},
            "retry_after_s": {"type": "integer", "minimum": 1, "description": "Rate limiting: seconds to wait (also in Retry-After)."},
            "token_scope": {"type": "string", "enum": ["read"], "description": "403 to a read-only API token: its scope."},
            "jsonrpc_code": {"type": "integer", "enum": [-32700, -32600], "description": "POST /mcp 400: JSON-RPC's verdict on the body (parse error, invalid request)."},
        },
    })
}

/// Writes that read no body: the generator gives them no `requestBody`. (Planned routes, which
/// answer 501 before reading anything, are recognised by their registry row.)
pub const NO_BODY: &[(&str, &str, &str)] = &[
    (
        "POST",
        "/api/auth/ws-ticket",
        "the ticket is for the session presenting it",
    ),
    (
        "POST",
        "/api/config/restore/undo",
        "undoes the last restore; nothing to choose",
    ),
    (
        "POST",
        "/api/diagnostics/hashreport/cancel",
        "cancels the running report",
    ),
    (
        "POST",
        "/api/system/restore-to-stock/preflight",
        "checks the miner as it is",
    ),
    (
        "POST",
        "/api/system/identify",
        "blinks the locate LED for its fixed time",
    ),
    (
        "POST",
        "/api/system/restart",
        "an action without parameters",
    ),
    ("POST", "/api/action/reboot", "an action without parameters"),
    ("POST", "/api/action/sleep", "an action without parameters"),
    ("POST", "/api/action/wake", "an action without parameters"),
    (
        "POST",
        "/api/led/locate",
        "blinks the locate LED for its fixed time",
    ),
    (
        "POST",
        "/api/led/locate/stop",
        "an action without parameters",
    ),
    (
        "POST",
        "/api/autotuner/fleet-profile/export",
        "exports the profile in force",
    ),
    (
        "POST",
        "/api/autotuner/set_default_hashrate_target",
        "resets to the configured default",
    ),
    (
        "POST",
        "/api/perf/calibrate",
        "starts a calibration run with the configured settings",
    ),
    (
        "POST",
        "/api/profiles/silicon/reload",
        "rereads the profile directory",
    ),
    (
        "POST",
        "/api/setup/complete",
        "finishes the wizard with what its steps stored",
    ),
];

/// Writes whose body is not a JSON document: `(method, path, media type, why)`.
pub const OTHER_BODY: &[(&str, &str, &str, &str)] = &[
    (
        "POST",
        "/api/system/upgrade",
        "application/octet-stream",
        "a firmware bundle, streamed to disk",
    ),
    (
        "POST",
        "/api/v1/firmware/update",
        "application/octet-stream",
        "a firmware bundle, streamed to disk",
    ),
    (
        "POST",
        "/api/v1/system/upgrade",
        "application/octet-stream",
        "a firmware bundle, streamed to disk",
    ),
];

/// Writes that take a JSON body the handler does not yet parse into a type of
/// `svcos_api_types::requests`: their `requestBody` is `{"type": "object"}` with
/// `x-svc-request-schema: not-derived`. This list only shrinks.
pub const UNTYPED_BODY: &[(&str, &str, &str)] = &[
    (
        "POST",
        "/api/profile/upload",
        "any JSON object; the tuner checks its schema tag",
    ),
    (
        "POST",
        "/api/profiles/silicon/import",
        "any JSON object; the tuner checks its schema tag",
    ),
    (
        "POST",
        "/mcp",
        "a JSON-RPC 2.0 message, parsed by svcos-mcp",
    ),
];

/// What one media type of a [`MEDIA`] route's `200` carries.
pub enum Shape {
    /// Text (a string in that media type).
    Text,
    /// Bytes (an archive).
    Binary,
    /// A JSON document a peer writes and the gateway passes through unread; its `schema` tag.
    Document(&'static str),
    /// A JSON-RPC 2.0 response (the MCP server's, `svcos-mcp`).
    JsonRpc,
    /// A JSON Schema (draft 2020-12) the gateway serves as a document.
    JsonSchema,
    /// A type of `svcos_api_types` (the JSON alternative of a route that also answers text).
    Typed(SchemaOf),
}

/// One media type of a [`MEDIA`] route and what it carries.
pub type MediaBody = (&'static str, Shape);

/// Routes whose `200` body is not one JSON document of a `svcos_api_types` type:
/// `(method, path, [(media type as the handler sends it, body)], why)`. Marked
/// `x-svc-response-schema: media`; the gateway's tests/http.rs checks the Content-Type each
/// handler sends against this table.
pub const MEDIA: &[(&str, &str, &[MediaBody], &str)] = &[
    (
        "GET",
        "/metrics",
        &[("text/plain; version=0.0.4; charset=utf-8", Shape::Text)],
        "Prometheus text exposition",
    ),
    (
        "GET",
        "/api/metrics/rolling.csv",
        &[("text/csv; charset=utf-8", Shape::Text)],
        "CSV, header row first",
    ),
    (
        "GET",
        "/api/autotuner/telemetry/csv",
        &[("text/csv; charset=utf-8", Shape::Text)],
        "CSV download, header row first",
    ),
    (
        "GET",
        "/api/config/export",
        &[("application/toml", Shape::Text)],
        "the config file (TOML) as a download",
    ),
    (
        "GET",
        "/api/log/backup",
        &[("application/gzip", Shape::Binary)],
        "a tar.gz archive download",
    ),
    (
        "GET",
        "/api/logs/download",
        &[
            ("text/plain; charset=utf-8", Shape::Text),
            ("application/x-ndjson", Shape::Text),
        ],
        "the merged log as a download: text lines, or NDJSON with ?format=ndjson",
    ),
    (
        "GET",
        "/api/profile/download",
        &[("application/json", Shape::Document("svcos.tuner.export.v1"))],
        "the tuner's export document, passed through as a download",
    ),
    (
        "POST",
        "/api/autotuner/fleet-profile/export",
        &[("application/json", Shape::Document("svcos.tuner.export.v1"))],
        "the tuner's export document, passed through",
    ),
    (
        "GET",
        "/api/mining/pipeline/snapshot/schema",
        &[("application/json", Shape::JsonSchema)],
        "the pipeline snapshot's JSON Schema, as a document",
    ),
    (
        "POST",
        "/mcp",
        &[("application/json", Shape::JsonRpc)],
        "the MCP server's JSON-RPC 2.0 answer",
    ),
    (
        "GET",
        "/api/diagnostics/board-health/report",
        &[
            ("text/markdown; charset=utf-8", Shape::Text),
            (
                "application/json",
                Shape::Typed(|g| g.subschema_for::<svcos_api_types::diagnostics::ResultBody>()),
            ),
        ],
        "Markdown, or the result as JSON with ?format=json",
    ),
    (
        "GET",
        "/api/diagnostics/chip-health/report",
        &[
            ("text/markdown; charset=utf-8", Shape::Text),
            (
                "application/json",
                Shape::Typed(|g| g.subschema_for::<svcos_api_types::diagnostics::ResultBody>()),
            ),
        ],
        "Markdown, or the result as JSON with ?format=json",
    ),
    (
        "GET",
        "/api/diagnostics/hashreport/report",
        &[
            ("text/markdown; charset=utf-8", Shape::Text),
            (
                "application/json",
                Shape::Typed(|g| g.subschema_for::<svcos_api_types::diagnostics::ResultBody>()),
            ),
        ],
        "Markdown, or the result as JSON with ?format=json",
    ),
];

/// The schema of one [`MEDIA`] body.
fn media_schema(media: &str, shape: &Shape, schemas: &mut SchemaGenerator) -> Value {
    let essence = media.split(';').next().unwrap_or(media).trim();
    match shape {
        Shape::Text => json!({"type": "string", "contentMediaType": essence}),
        Shape::Binary => {
            json!({"type": "string", "format": "binary", "contentMediaType": essence})
        }
        Shape::Document(tag) => json!({
            "type": "object",
            "description": "A peer's own document, passed through unread by the gateway.",
            "required": ["schema"],
            "properties": {"schema": {"const": tag}},
        }),
        Shape::JsonRpc => json!({
            "type": "object",
            "description": "A JSON-RPC 2.0 response: `result` or `error` (a request that is a notification gets 202 and no body).",
            "required": ["jsonrpc", "id"],
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"type": ["string", "integer", "null"]},
                "result": {"type": "object"},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
                },
            },
            "oneOf": [{"required": ["result"]}, {"required": ["error"]}],
        }),
        Shape::JsonSchema => json!({
            "type": "object",
            "description": "A JSON Schema, draft 2020-12.",
            "required": ["$schema", "type"],
            "properties": {
                "$schema": {"const": "https://json-schema.org/draft/2020-12/schema"},
                "type": {"const": "object"},
            },
        }),
        Shape::Typed(schema_of) => schema_of(schemas).to_value(),
    }
}

/// The `200` of a route: a derived type, the [`MEDIA`] table's media types, or neither.
enum Success {
    Derived(Value),
    Media(Map<String, Value>),
    /// A planned operation: it answers 501 with the envelope and never a `200`.
    Planned,
    NotDerived,
}

/// Whether an operation is a write (a method that may carry a body).
pub fn is_write(meta: &RouteMeta) -> bool {
    meta.method == Method::POST || meta.method == Method::PUT || meta.method == Method::PATCH
}

/// How the document describes a write's body.
enum Body {
    /// Derived from a type of `svcos_api_types::requests`: the schema (a `$ref`) and whether
    /// it has required members (then an absent body, read as `{}`, is refused).
    Derived(Value, bool),
    NotJson(&'static str),
    Untyped,
    None,
}

fn listed<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str)>, meta: &RouteMeta) -> bool {
    rows.into_iter()
        .any(|(m, p)| meta.method.as_str() == m && meta.path == p)
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

fn operation(meta: &RouteMeta, body: Body, response: Success) -> Value {
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
    let request = match body {
        Body::Derived(schema, required) => Some((
            "derived",
            json!({"required": required, "content": {"application/json": {"schema": schema}}}),
        )),
        Body::NotJson(media) => Some((
            "not-json",
            json!({"required": true, "content": {media: {"schema": {"type": "string", "contentMediaType": media}}}}),
        )),
        Body::Untyped => Some((
            "not-derived",
            json!({"required": false, "content": {"application/json": {"schema": {"type": "object"}}}}),
        )),
        Body::None => None,
    };
    if let Some((kind, request_body)) = request {
        op.insert("requestBody".into(), request_body);
        op.insert("x-svc-request-schema".into(), kind.into());
    }
    let (success, kind) = match response {
        Success::Derived(schema) => (
            json!({"description": "Success.", "content": {"application/json": {"schema": schema}}}),
            "derived",
        ),
        Success::Media(content) => (
            json!({"description": "Success; see the media types.", "content": content}),
            "media",
        ),
        Success::Planned => (
            json!({"description": "Not implemented yet: 501 with the envelope."}),
            "planned",
        ),
        Success::NotDerived => (
            json!({"description": "Success. The body shape is not derived; see docs/API-SHAPES.md."}),
            "not-derived",
        ),
    };
    let responses = if kind == "planned" {
        json!({"501": error.clone(), "4XX": error.clone(), "5XX": error})
    } else {
        json!({"200": success, "4XX": error.clone(), "5XX": error})
    };
    op.insert("responses".into(), responses);
    op.insert("x-svc-response-schema".into(), kind.into());
    op.insert("x-svc-source".into(), meta.source.into());
    op.insert("x-svc-support".into(), meta.support.as_str().into());
    op.insert(
        "x-svc-required-mode".into(),
        meta.required_mode().as_str().into(),
    );
    op.insert("x-svc-pinned".into(), meta.pinned.into());
    Value::Object(op)
}

/// How the document describes `meta`'s body, from its row's `req:` type and the tables above.
fn body_of(meta: &RouteMeta, requests: &mut SchemaGenerator) -> Body {
    if let Some(schema_of) = meta.request {
        let schema = schema_of(requests).to_value();
        let name = schema["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .expect("a request body is a named type");
        let required = requests.definitions()[name]["required"]
            .as_array()
            .is_some_and(|r| !r.is_empty());
        return Body::Derived(schema, required);
    }
    if let Some((.., media, _)) = OTHER_BODY
        .iter()
        .find(|(m, p, ..)| meta.method.as_str() == *m && meta.path == *p)
    {
        return Body::NotJson(media);
    }
    if listed(UNTYPED_BODY.iter().map(|r| (r.0, r.1)), meta) {
        return Body::Untyped;
    }
    Body::None
}

/// The whole document.
pub fn document() -> Value {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut schemas = generator();
    let mut requests = request_generator();
    for (method, path, ..) in MEDIA {
        assert!(
            metas()
                .iter()
                .any(|m| m.method.as_str() == *method && m.path == *path),
            "MEDIA names {method} {path}, which the registry does not mount"
        );
    }
    for meta in metas() {
        let typed = meta.response;
        let media = MEDIA
            .iter()
            .find(|(method, path, ..)| meta.method.as_str() == *method && meta.path == *path);
        let response = match (typed, media) {
            (Some(_), Some(_)) => panic!(
                "{} {} names a response type and is in MEDIA",
                meta.method, meta.path
            ),
            (Some(schema_of), None) => Success::Derived(schema_of(&mut schemas).to_value()),
            (None, Some((_, _, bodies, _))) => Success::Media(
                bodies
                    .iter()
                    .map(|(m, shape)| {
                        let schema = media_schema(m, shape, &mut schemas);
                        (m.to_string(), json!({"schema": schema}))
                    })
                    .collect(),
            ),
            (None, None) if meta.support == Support::Planned => Success::Planned,
            (None, None) => Success::NotDerived,
        };
        let body = body_of(meta, &mut requests);
        paths.entry(meta.axum_path()).or_default().insert(
            meta.method.as_str().to_ascii_lowercase(),
            operation(meta, body, response),
        );
    }
    let mut components: Map<String, Value> = schemas.take_definitions(true);
    // One namespace for both directions: a name both use must mean the same schema.
    for (name, schema) in requests.take_definitions(true) {
        if let Some(existing) = components.get(&name) {
            assert_eq!(
                existing, &schema,
                "{name} differs between a request and a response"
            );
        }
        components.insert(name, schema);
    }
    components.insert("ApiErrorBody".into(), error_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "svcOS miner local API",
            "version": svcos_api_types::API_CONTRACT_VERSION,
            "description": "Generated from the gateway's route registry. Every non-2xx answer is the ApiErrorBody envelope. Operations with x-svc-response-schema: derived describe their 200 body with a schema derived from the type the gateway serialises; those with media list each media type they answer (text, CSV, archives, passed-through documents, JSON-RPC). Operations with x-svc-support: planned answer 501 until their feature lands.",
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
