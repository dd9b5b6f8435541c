//! The route registry: one static table from which the router, `/v1/catalog`,
//! `/v1/openapi.json` and the HTML index are all generated, so they cannot drift apart.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::datasets::DatasetInfo;

/// Type and limits of a parameter.
#[derive(Debug, Clone)]
pub enum ParamType {
    /// Lower-case slug: 1-64 of a-z, 0-9, '-'.
    Slug,
    /// Free text, 1..=max_len characters, no control characters.
    Text {
        /// Longest accepted value, in characters.
        max_len: usize,
    },
    /// Integer within bounds, with an optional default.
    Int {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
        /// Applied when absent.
        default: Option<i64>,
    },
    /// One of a fixed list.
    Enum(&'static [&'static str]),
    /// A record key: 1-64 of A-Z, a-z, 0-9, '_' and '-', starting alphanumeric.
    Key,
}

/// One parameter of a route.
#[derive(Debug, Clone)]
pub struct Param {
    /// Name on the wire.
    pub name: &'static str,
    /// Path segment (`{name}`) rather than query.
    pub in_path: bool,
    /// What it does.
    pub description: &'static str,
    /// Type and limits.
    pub ty: ParamType,
    /// A value that answers 200 with the shipped data (OpenAPI `example`, so clients and
    /// schemathesis can reach a record rather than only 404s).
    pub example: Option<&'static str>,
}

impl Param {
    /// A query parameter.
    pub const fn query(name: &'static str, description: &'static str, ty: ParamType) -> Param {
        Param {
            name,
            in_path: false,
            description,
            ty,
            example: None,
        }
    }

    /// A path parameter.
    pub const fn path(name: &'static str, description: &'static str, ty: ParamType) -> Param {
        Param {
            name,
            in_path: true,
            description,
            ty,
            example: None,
        }
    }

    /// The same parameter with an example value.
    pub const fn example(self, value: &'static str) -> Param {
        Param {
            example: Some(value),
            ..self
        }
    }

    /// JSON Schema of the parameter's value.
    pub fn schema(&self) -> Value {
        match &self.ty {
            ParamType::Slug => json!({"type": "string", "pattern": "^[a-z0-9-]{1,64}$"}),
            ParamType::Text { max_len } => {
                json!({"type": "string", "minLength": 1, "maxLength": max_len, "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"})
            }
            ParamType::Int { min, max, default } => {
                let mut s = json!({"type": "integer", "minimum": min, "maximum": max});
                if let Some(d) = default {
                    s["default"] = json!(d);
                }
                s
            }
            ParamType::Enum(values) => json!({"type": "string", "enum": values}),
            ParamType::Key => {
                json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"})
            }
        }
    }
}

/// How long caches may keep a response.
#[derive(Debug, Clone, Copy)]
pub struct CachePolicy {
    /// `max-age`, seconds.
    pub max_age: u32,
    /// `stale-while-revalidate`, seconds.
    pub swr: u32,
}

impl CachePolicy {
    /// The `Cache-Control` value.
    pub fn header(&self) -> String {
        format!(
            "public, max-age={}, stale-while-revalidate={}",
            self.max_age, self.swr
        )
    }
}

/// Hashprice changes every refresh: a minute in caches, five more while revalidating.
pub const CACHE_LIVE: CachePolicy = CachePolicy {
    max_age: 60,
    swr: 300,
};
/// Static datasets change with a release of the data: a day, a week while revalidating.
pub const CACHE_STATIC: CachePolicy = CachePolicy {
    max_age: 86_400,
    swr: 604_800,
};
/// Feed-backed and descriptive documents: an hour, a day while revalidating.
pub const CACHE_HOURLY: CachePolicy = CachePolicy {
    max_age: 3_600,
    swr: 86_400,
};
/// Error answers (400/404): short, so a fixed client is not served its old error for long.
pub const CACHE_ERROR: CachePolicy = CachePolicy {
    max_age: 60,
    swr: 0,
};

/// What a route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The HTML endpoint index.
    Index,
    /// The dataset catalogue.
    Catalog,
    /// The OpenAPI document.
    OpenApi,
    /// The current hashprice.
    Hashprice,
    /// Stored hashprice refreshes.
    HashpriceHistory,
    /// A filtered list of a dataset.
    List(&'static str),
    /// One record of a dataset by key.
    One(&'static str),
    /// Every record of a dataset about one model (key: a model slug).
    ByModel(&'static str),
    /// Site: the HTML index of the CSV and JSON mirrors (`/data/`).
    DataIndex,
    /// Site: one mirror file (`/data/{file}`), the bytes `export` writes.
    DataFile,
    /// Site: the human-readable endpoint index (`/data/api/`).
    ApiIndex,
    /// Site: the citation map for language-model tools (`/llms.txt`).
    LlmsTxt,
    /// Site: sources, rules and refresh of every dataset (`/methodology`).
    Methodology,
}

impl Kind {
    /// Whether the answer is a page of the publisher's site rather than an API answer (no
    /// `/v1` prefix, not JSON-wrapped in a meta block).
    pub fn is_site(self) -> bool {
        matches!(
            self,
            Kind::DataIndex | Kind::DataFile | Kind::ApiIndex | Kind::LlmsTxt | Kind::Methodology
        )
    }
}

/// One registered route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Stable identifier (operationId, cache-key prefix, schema tag part).
    pub id: &'static str,
    /// Path, axum/OpenAPI template syntax.
    pub path: &'static str,
    /// What it serves.
    pub kind: Kind,
    /// One line.
    pub summary: &'static str,
    /// Longer text (filters' semantics).
    pub description: &'static str,
    /// Parameters.
    pub params: &'static [Param],
    /// Caching of successful answers.
    pub cache: CachePolicy,
}

impl Route {
    /// The `meta.schema` tag of this route's answers.
    pub fn schema_tag(&self) -> String {
        format!("svcos.opendata.{}.v1", self.id)
    }
}

const COMPONENTS: &[&str] = &[
    "hashboard",
    "chip",
    "psu",
    "fan",
    "cooling",
    "temperature-sensor",
    "control-board",
    "eeprom",
    "network",
    "pool",
    "firmware",
    "configuration",
    "service",
];

const PAGE: Param = Param::query(
    "page",
    "Page number, from 1. A page past the last one answers 200 with no records.",
    ParamType::Int {
        min: 1,
        max: 100_000,
        default: Some(1),
    },
);
const PER_PAGE: Param = Param::query(
    "per_page",
    "Records per page (default 100, at most 500).",
    ParamType::Int {
        min: 1,
        max: 500,
        default: Some(100),
    },
);

/// Every route the service answers. Order = order in the catalogue, OpenAPI and index page.
pub const ROUTES: &[Route] = &[
    Route {
        id: "index",
        path: "/v1/",
        kind: Kind::Index,
        summary: "Human-readable endpoint index (HTML)",
        description: "Every route with its parameters and an example link, generated from the route registry.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "catalog",
        path: "/v1/catalog",
        kind: Kind::Catalog,
        summary: "Self-describing list of all datasets",
        description: "One record per dataset: title, description, version, record count, routes, licence and mirrors.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "openapi",
        path: "/v1/openapi.json",
        kind: Kind::OpenApi,
        summary: "OpenAPI 3.1 description of every route",
        description: "Generated live from the same route registry the service routes with.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "hashprice",
        path: "/v1/hashprice",
        kind: Kind::Hashprice,
        summary: "Current hashprice",
        description: "Expected mining revenue per TH/s and PH/s per day in USD and CAD, subsidy-only and fee-inclusive, with difficulty, BTC price, subsidy, fees, retarget and halving context. Refreshed every 15 minutes; a failing upstream keeps the last good value with stale=true. record is null until the first successful refresh.",
        params: &[],
        cache: CACHE_LIVE,
    },
    Route {
        id: "hashprice-history",
        path: "/v1/hashprice/history",
        kind: Kind::HashpriceHistory,
        summary: "Stored hashprice refreshes, newest first",
        description: "One record per successful refresh.",
        params: &[Param::query(
            "limit",
            "Most recent refreshes to return (default 96 = one day at 15 minutes).",
            ParamType::Int {
                min: 1,
                max: 5000,
                default: Some(96),
            },
        )],
        cache: CACHE_LIVE,
    },
    Route {
        id: "miners",
        path: "/v1/miners",
        kind: Kind::List("miners"),
        summary: "Miner specifications",
        description: "All miner models, optionally filtered (exact slug match).",
        params: &[
            Param::query("algorithm", "Algorithm slug, e.g. sha256.", ParamType::Slug),
            Param::query(
                "manufacturer",
                "Manufacturer slug: bitmain, microbt, canaan, bitaxe.",
                ParamType::Slug,
            ),
        ],
        cache: CACHE_STATIC,
    },
    Route {
        id: "miner",
        path: "/v1/miners/{slug}",
        kind: Kind::One("miners"),
        summary: "One miner model by slug",
        description: "404 when no model has this slug.",
        params: &[Param::path(
            "slug",
            "Model slug, e.g. antminer-s19-pro.",
            ParamType::Slug,
        )
        .example("antminer-s9")],
        cache: CACHE_STATIC,
    },
    Route {
        id: "power-profiles",
        path: "/v1/power-profiles",
        kind: Kind::List("power-profiles"),
        summary: "Power and tuning profile points",
        description: "Published stock points, published tuned points and simulated autotuner bench points; optionally one model.",
        params: &[Param::query(
            "model",
            "Model slug (exact).",
            ParamType::Slug,
        )],
        cache: CACHE_STATIC,
    },
    Route {
        id: "power-profiles-of-model",
        path: "/v1/power-profiles/{model}",
        kind: Kind::ByModel("power-profiles"),
        summary: "Every profile point of one model",
        description: "The stock point and any bench points of one miner model, by step; 404 when no miners record has this slug.",
        params: &[
            Param::path("model", "Model slug, e.g. antminer-s9.", ParamType::Slug)
                .example("antminer-s9"),
        ],
        cache: CACHE_STATIC,
    },
    Route {
        id: "error-codes",
        path: "/v1/error-codes",
        kind: Kind::List("error-codes"),
        summary: "Error codes, paginated",
        description: "Filters combine with AND; text filters are case-insensitive. search matches every whitespace-separated term against code, native code, title and affected models.",
        params: &[
            Param::query(
                "manufacturer",
                "Substring of the manufacturer name or slug.",
                ParamType::Text { max_len: 64 },
            ),
            Param::query(
                "component",
                "Failing component.",
                ParamType::Enum(COMPONENTS),
            ),
            Param::query(
                "code",
                "Substring of the code or native code.",
                ParamType::Text { max_len: 64 },
            ),
            Param::query(
                "search",
                "Free text over code, title and affected models.",
                ParamType::Text { max_len: 100 },
            ),
            PAGE,
            PER_PAGE,
        ],
        cache: CACHE_STATIC,
    },
    Route {
        id: "error-code",
        path: "/v1/error-codes/{code}",
        kind: Kind::One("error-codes"),
        summary: "One error code by its unique code",
        description: "Case-sensitive match of the code field, e.g. WHATSMINER-530; 404 when unknown.",
        params: &[Param::path(
            "code",
            "The unique code (vendor prefix plus native code).",
            ParamType::Key,
        )
        .example("WHATSMINER-530")],
        cache: CACHE_STATIC,
    },
    Route {
        id: "reliability",
        path: "/v1/reliability",
        kind: Kind::List("reliability"),
        summary: "Failure-mode claims with source grades",
        description: "model matches a covered model slug or the slug of the model name the source uses.",
        params: &[Param::query(
            "model",
            "Model slug or model-name slug.",
            ParamType::Slug,
        )],
        cache: CACHE_STATIC,
    },
    Route {
        id: "reliability-of-model",
        path: "/v1/reliability/{model}",
        kind: Kind::ByModel("reliability"),
        summary: "Failure-mode claims about one model",
        description: "The claims covering a miners slug, or naming a model whose name slugifies to it; a known model without claims answers an empty list, any other key 404.",
        params: &[
            Param::path("model", "Model slug or model-name slug.", ParamType::Slug)
                .example("whatsminer-m30s"),
        ],
        cache: CACHE_STATIC,
    },
    Route {
        id: "price-index",
        path: "/v1/price-index",
        kind: Kind::List("price-index"),
        summary: "Catalogue price index in CAD, with summary",
        description: "Items of the configured vendor feed and a min/median/max summary of the matching items. meta.sample is true for the repository's illustrative sample: those are not live prices.",
        params: &[
            Param::query(
                "condition",
                "Item condition.",
                ParamType::Enum(&["new", "refurbished"]),
            ),
            Param::query(
                "category",
                "Catalogue category.",
                ParamType::Enum(&[
                    "asic-miners",
                    "open-hardware-miners",
                    "quiet-modified-miners",
                ]),
            ),
        ],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "site-data",
        path: "/data/",
        kind: Kind::DataIndex,
        summary: "Dataset mirrors (HTML index of the CSV and JSON files)",
        description: "Links to the CSV and JSON mirror of every dataset; the same bytes `svcos-open-data export` writes under data/.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "site-data-file",
        path: "/data/{file}",
        kind: Kind::DataFile,
        summary: "One CSV or JSON mirror file",
        description: "Every record of a dataset: JSON with a meta block (records byte-identical to the API's), or CSV with a header row (nested fields as dotted columns, lists as JSON text).",
        params: &[
            Param::path("file", "Mirror file name.", ParamType::Enum(MIRROR_FILES))
                .example("miners.csv"),
        ],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "site-api-index",
        path: "/data/api/",
        kind: Kind::ApiIndex,
        summary: "Human-readable endpoint index (HTML)",
        description: "Every route of this registry with its parameters, answers and caching.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "site-llms-txt",
        path: "/llms.txt",
        kind: Kind::LlmsTxt,
        summary: "Citation map for language-model tools (llms.txt)",
        description: "Markdown per llmstxt.org: what each dataset is, where its API route and mirrors are, the licence and how to cite.",
        params: &[],
        cache: CACHE_HOURLY,
    },
    Route {
        id: "site-methodology",
        path: "/methodology",
        kind: Kind::Methodology,
        summary: "Methodology: sources, rules and refresh (HTML)",
        description: "Where each dataset comes from, the rules a record must pass to load, the derived numbers and how often each dataset is refreshed.",
        params: &[],
        cache: CACHE_HOURLY,
    },
];

/// The mirror files of `/data/{file}` (and `export`'s `data/` directory): JSON and CSV of every
/// dataset and of the hashprice history.
pub const MIRROR_FILES: &[&str] = &[
    "miners.json",
    "miners.csv",
    "power-profiles.json",
    "power-profiles.csv",
    "error-codes.json",
    "error-codes.csv",
    "reliability.json",
    "reliability.csv",
    "price-index.json",
    "price-index.csv",
    "hashprice-history.json",
    "hashprice-history.csv",
];

/// Licence of the data.
pub const LICENSE: &str = "CC BY 4.0";
/// Where the licence text is.
pub const LICENSE_URL: &str = "https://creativecommons.org/licenses/by/4.0/";
/// The `X-SVC-API` courtesy notice.
pub const NOTICE: &str = "svcOS Open Mining Data API v1: free, keyless, read-only. Courtesy rate about 60 requests/minute; for bulk use the CSV/JSON exports. Data CC BY 4.0: credit svcOS and link back.";

fn strip_ids(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("$id");
        o.remove("$schema");
    }
    v
}

fn with_props(base: &Value, extra: Value, required: &[&str]) -> Value {
    let mut s = strip_ids(base.clone());
    if let (Some(props), Some(more)) = (
        s.get_mut("properties").and_then(Value::as_object_mut),
        extra.as_object(),
    ) {
        for (k, v) in more {
            props.insert(k.clone(), v.clone());
        }
    }
    if let Some(req) = s.get_mut("required").and_then(Value::as_array_mut) {
        req.extend(required.iter().map(|r| json!(r)));
    }
    s
}

/// Record schema of a dataset as served: the row schema plus the derived fields, whose
/// schemas are taken from the derived types' components (`MinerDerived`, `ProfileDerived`).
pub fn record_schema(dataset: &str, info: &DatasetInfo, components: &Map<String, Value>) -> Value {
    let derived = match dataset {
        "miners" => components.get("MinerDerived"),
        "power-profiles" => components.get("ProfileDerived"),
        _ => None,
    };
    let Some(derived) = derived else {
        return strip_ids(info.schema.clone());
    };
    let required: Vec<&str> = derived["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    with_props(&info.schema, derived["properties"].clone(), &required)
}

fn component_name(dataset: &str) -> &'static str {
    match dataset {
        "miners" => "Miner",
        "power-profiles" => "PowerProfile",
        "error-codes" => "ErrorCode",
        "reliability" => "ReliabilityClaim",
        _ => "PriceItem",
    }
}

fn r#ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The response body schema of a route (200).
pub fn body_schema(route: &Route) -> Value {
    let list = |items: Value, extra: Option<(&str, Value)>| {
        let mut props = Map::new();
        props.insert("meta".into(), r#ref("Meta"));
        props.insert("records".into(), json!({"type": "array", "items": items}));
        let mut required = vec![json!("meta"), json!("records")];
        if let Some((k, v)) = extra {
            props.insert(k.into(), v);
            required.push(json!(k));
        }
        json!({"type": "object", "additionalProperties": false, "required": required, "properties": props})
    };
    match route.kind {
        Kind::Index | Kind::DataIndex | Kind::ApiIndex | Kind::LlmsTxt | Kind::Methodology => {
            json!({"type": "string"})
        }
        Kind::DataFile => json!({"type": "object", "required": ["meta", "records"]}),
        Kind::ByModel(ds) => list(r#ref(component_name(ds)), None),
        Kind::OpenApi => json!({"type": "object", "required": ["openapi", "paths"]}),
        Kind::Catalog => list(r#ref("CatalogEntry"), None),
        Kind::Hashprice => json!({
            "type": "object", "additionalProperties": false,
            "required": ["meta", "status", "record"],
            "properties": {
                "meta": r#ref("Meta"),
                "status": r#ref("HashpriceStatus"),
                "record": {"oneOf": [r#ref("Hashprice"), {"type": "null"}]}
            }
        }),
        Kind::HashpriceHistory => list(r#ref("Hashprice"), None),
        Kind::List("price-index") => {
            list(r#ref("PriceItem"), Some(("summary", r#ref("PriceSummary"))))
        }
        Kind::List(ds) => list(r#ref(component_name(ds)), None),
        Kind::One(ds) => json!({
            "type": "object", "additionalProperties": false,
            "required": ["meta", "record"],
            "properties": {"meta": r#ref("Meta"), "record": r#ref(component_name(ds))}
        }),
    }
}

fn header_docs() -> Value {
    json!({
        "ETag": {"description": "Strong validator of this representation; send it back in If-None-Match.", "schema": {"type": "string"}},
        "Cache-Control": {"description": "Per dataset: hashprice short, static datasets long, both with stale-while-revalidate.", "schema": {"type": "string"}},
        "X-SVC-API": {"description": "Courtesy notice.", "schema": {"type": "string"}},
        "Access-Control-Allow-Origin": {"description": "Always *.", "schema": {"type": "string"}},
        "Vary": {"description": "Accept-Encoding.", "schema": {"type": "string"}}
    })
}

/// The OpenAPI 3.1 document, generated from [`ROUTES`] and the dataset schemas.
pub fn openapi(infos: &BTreeMap<String, DatasetInfo>, server_url: Option<&str>) -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let params: Vec<Value> = route
            .params
            .iter()
            .map(|p| {
                let mut v = json!({
                    "name": p.name,
                    "in": if p.in_path { "path" } else { "query" },
                    "required": p.in_path,
                    "description": p.description,
                    "schema": p.schema(),
                });
                if let Some(e) = p.example {
                    v["example"] = json!(e);
                }
                v
            })
            .collect();
        let content_types: &[&str] = match route.kind {
            Kind::Index | Kind::DataIndex | Kind::ApiIndex | Kind::Methodology => &["text/html"],
            Kind::LlmsTxt => &["text/plain"],
            Kind::DataFile => &["application/json", "text/csv"],
            _ => &["application/json"],
        };
        let mut content = Map::new();
        for ct in content_types {
            let schema = if *ct == "text/csv" {
                json!({"type": "string"})
            } else {
                body_schema(route)
            };
            content.insert((*ct).into(), json!({"schema": schema}));
        }
        let error = json!({
            "description": "Error body (docs/OPEN-DATA.md).",
            "headers": header_docs(),
            "content": {"application/json": {"schema": r#ref("Error")}}
        });
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({
                "description": route.summary,
                "headers": header_docs(),
                "content": content
            }),
        );
        responses.insert(
            "304".into(),
            json!({"description": "Not modified: If-None-Match matched the current ETag.", "headers": header_docs()}),
        );
        if !route.params.is_empty() {
            responses.insert("400".into(), {
                let mut e = error.clone();
                e["description"] = json!("A parameter value is out of range, of the wrong type, unknown, or repeated; error.parameter names it.");
                e
            });
        }
        if matches!(route.kind, Kind::One(_) | Kind::ByModel(_) | Kind::DataFile) {
            responses.insert("404".into(), {
                let mut e = error.clone();
                e["description"] = json!("No record (or model) has this key.");
                e
            });
        }
        responses.insert("405".into(), {
            let mut e = error.clone();
            e["description"] = json!("Only GET and HEAD (and CORS preflight OPTIONS) are allowed; the Allow header lists them.");
            e
        });
        let op = json!({
            "operationId": route.id,
            "summary": route.summary,
            "description": route.description,
            "parameters": params,
            "responses": responses,
            "x-cache-control": route.cache.header(),
        });
        paths.insert(route.path.to_string(), json!({"get": op}));
    }
    // The service's own shapes are derived from the types the renderer serialises.
    let mut schemas = crate::shapes::components();
    for (name, info) in infos {
        let record = record_schema(name, info, &schemas);
        schemas.insert(component_name(name).into(), record);
    }
    let servers = match server_url {
        Some(u) => json!([{"url": u}]),
        None => json!([{"url": "/"}]),
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "svcOS Open Mining Data API",
            "version": "1.0.0",
            "description": format!("Free, keyless, read-only JSON over Bitcoin-mining datasets. {NOTICE}"),
            "license": {"name": LICENSE, "url": LICENSE_URL}
        },
        "servers": servers,
        "paths": paths,
        "components": {"schemas": schemas}
    })
}

/// Routes that serve a dataset (for the catalogue).
pub fn routes_of(dataset: &str) -> Vec<&'static str> {
    ROUTES
        .iter()
        .filter(
            |r| matches!(r.kind, Kind::List(d) | Kind::One(d) | Kind::ByModel(d) if d == dataset),
        )
        .map(|r| r.path)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths_are_unique_and_under_v1() {
        let mut ids = std::collections::HashSet::new();
        let mut paths = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(ids.insert(r.id), "{}", r.id);
            assert!(paths.insert(r.path), "{}", r.path);
            assert_eq!(r.path.starts_with("/v1/"), !r.kind.is_site(), "{}", r.path);
            for p in r.params.iter().filter(|p| p.in_path) {
                assert!(r.path.contains(&format!("{{{}}}", p.name)), "{}", r.path);
            }
        }
    }

    #[test]
    fn cache_policy_header() {
        assert_eq!(
            CACHE_LIVE.header(),
            "public, max-age=60, stale-while-revalidate=300"
        );
    }
}
