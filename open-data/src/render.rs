//! Rendering answers from a data snapshot: filters, pagination, meta blocks, the catalogue,
//! the HTML index. Records are spliced in as their stored JSON text, so the API's bytes of a
//! record are exactly the store's (and the exports').

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::datasets::{DatasetInfo, slugify};
use crate::query::{ParamValue, Params};
use crate::registry::{self, Kind, LICENSE, LICENSE_URL, NOTICE, ROUTES, Route};

/// One served record: its stored text and its parsed form (for filtering).
#[derive(Debug, Clone)]
pub struct Record {
    /// Canonical JSON text, as stored.
    pub raw: String,
    /// Parsed.
    pub value: Map<String, Value>,
}

/// A dataset as served.
#[derive(Debug, Clone)]
pub struct DatasetData {
    /// Version.
    pub version: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// RFC 3339 load time.
    pub generated_at: String,
    /// Records in order.
    pub records: Vec<Record>,
}

/// The hashprice as served.
#[derive(Debug, Clone, Default)]
pub struct HashpriceView {
    /// The last good record (raw JSON), if any.
    pub record: Option<String>,
    /// Stale flag.
    pub stale: bool,
    /// Why it is stale.
    pub stale_reason: Option<String>,
    /// Last attempt, RFC 3339.
    pub last_attempt_at: Option<String>,
    /// Last success, RFC 3339.
    pub last_success_at: Option<String>,
    /// Refresh interval, seconds.
    pub interval_s: u64,
}

/// Everything an answer is rendered from.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Dataset name → data.
    pub datasets: BTreeMap<String, DatasetData>,
    /// Price feed header (sample flag, vendor) and origin.
    pub feed_header: Map<String, Value>,
    /// Feed origin (path or URL host).
    pub feed_origin: String,
    /// Whether the last feed refresh failed (the last good items are served).
    pub feed_stale: bool,
    /// Hashprice.
    pub hashprice: HashpriceView,
    /// Stored hashprice history, newest first (raw JSON).
    pub history: Vec<String>,
    /// The OpenAPI document (built once per process).
    pub openapi: std::sync::Arc<Value>,
    /// Publisher site (absolute links in the index), if configured.
    pub site_url: Option<String>,
}

/// A rendered answer.
#[derive(Debug)]
pub struct Rendered {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body bytes.
    pub body: Vec<u8>,
}

fn json_answer(status: u16, body: String) -> Rendered {
    Rendered {
        status,
        content_type: "application/json",
        body: body.into_bytes(),
    }
}

/// The meta block.
pub fn meta(
    route: &Route,
    title: &str,
    description: &str,
    generated_at: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("schema".into(), json!(route.schema_tag()));
    m.insert("title".into(), json!(title));
    m.insert("description".into(), json!(description));
    m.insert("license".into(), json!(LICENSE));
    m.insert("license_url".into(), json!(LICENSE_URL));
    m.insert(
        "source".into(),
        json!("svcOS Open Mining Data API; every record carries its own source"),
    );
    m.insert(
        "attribution".into(),
        json!("Credit \"svcOS Open Mining Data\" and link back to the API or the dataset mirror."),
    );
    m.insert("generated_at".into(), json!(generated_at));
    m
}

/// The error body: `{meta, error: {status, code, message, parameter?, allow?}}`.
pub fn error_body(
    status: u16,
    code: &str,
    message: &str,
    parameter: Option<&str>,
    allow: Option<&str>,
) -> String {
    let mut err = Map::new();
    err.insert("status".into(), json!(status));
    err.insert("code".into(), json!(code));
    err.insert("message".into(), json!(message));
    if let Some(p) = parameter {
        err.insert("parameter".into(), json!(p));
    }
    if let Some(a) = allow {
        err.insert("allow".into(), json!(a));
    }
    let route = Route {
        id: "error",
        path: "",
        kind: Kind::Catalog,
        summary: "",
        description: "",
        params: &[],
        cache: registry::CACHE_ERROR,
    };
    let m = meta(
        &route,
        "Error",
        "The request could not be answered; error says why.",
        &crate::time::rfc3339(crate::time::now_unix()),
    );
    serde_json::to_string(&json!({"meta": m, "error": err})).unwrap_or_default()
}

fn filters_value(params: &Params) -> Value {
    let mut f = Map::new();
    for (k, v) in params {
        f.insert(
            (*k).to_string(),
            match v {
                ParamValue::Text(s) => json!(s),
                ParamValue::Int(n) => json!(n),
            },
        );
    }
    Value::Object(f)
}

fn splice(meta: &Map<String, Value>, records: &[&Record], extra: Option<(&str, Value)>) -> String {
    let mut out =
        String::with_capacity(64 + records.iter().map(|r| r.raw.len() + 1).sum::<usize>());
    out.push_str("{\"meta\":");
    out.push_str(&serde_json::to_string(meta).unwrap_or_default());
    out.push_str(",\"records\":[");
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&r.raw);
    }
    out.push(']');
    if let Some((k, v)) = extra {
        let _ = write!(out, ",{}:{}", json!(k), v);
    }
    out.push('}');
    out
}

fn text(v: &Map<String, Value>, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase()
}

fn matches(dataset: &str, r: &Map<String, Value>, params: &Params) -> bool {
    params.iter().all(|(k, v)| {
        let want = v.text().unwrap_or_default();
        let lw = want.to_lowercase();
        match (dataset, *k) {
            (_, "page" | "per_page") => true,
            ("miners", "algorithm") => r["algorithm"] == want,
            ("miners", "manufacturer") => r["manufacturer_slug"] == want,
            ("power-profiles", "model") => r["model_slug"] == want,
            ("error-codes", "manufacturer") => {
                text(r, "manufacturer").contains(&lw) || text(r, "manufacturer_slug").contains(&lw)
            }
            ("error-codes", "component") => r["component"] == want,
            ("error-codes", "code") => {
                text(r, "code").contains(&lw) || text(r, "native_code").contains(&lw)
            }
            ("error-codes", "search") => {
                let mut hay = format!(
                    "{} {} {}",
                    text(r, "code"),
                    text(r, "native_code"),
                    text(r, "title")
                );
                for m in r["affected_models"].as_array().into_iter().flatten() {
                    hay.push(' ');
                    hay.push_str(&m.as_str().unwrap_or_default().to_lowercase());
                }
                lw.split_whitespace().all(|term| hay.contains(term))
            }
            ("reliability", "model") => {
                r["model_slugs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|s| s == want))
                    || slugify(r["model_name"].as_str().unwrap_or_default()) == want
            }
            ("price-index", "condition") => r["condition"] == want,
            ("price-index", "category") => r["category"] == want,
            _ => false,
        }
    })
}

fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    Some(if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    })
}

fn list(route: &Route, dataset: &str, snap: &Snapshot, params: &Params) -> Rendered {
    let Some(ds) = snap.datasets.get(dataset) else {
        return json_answer(
            500,
            error_body(500, "not_found", "dataset not loaded", None, None),
        );
    };
    let hits: Vec<&Record> = ds
        .records
        .iter()
        .filter(|r| matches(dataset, &r.value, params))
        .collect();
    let total = hits.len();
    let mut m = meta(route, &ds.title, &ds.description, &ds.generated_at);
    m.insert("dataset".into(), json!(dataset));
    m.insert("dataset_version".into(), json!(ds.version));
    m.insert("filters".into(), filters_value(params));
    let page_of: Vec<&Record>;
    let shown: &[&Record] = if dataset == "error-codes" {
        let page = params
            .get("page")
            .and_then(ParamValue::int)
            .unwrap_or(1)
            .max(1) as usize;
        let per_page = params
            .get("per_page")
            .and_then(ParamValue::int)
            .unwrap_or(100)
            .max(1) as usize;
        let total_pages = total.div_ceil(per_page);
        let start = (page - 1).saturating_mul(per_page).min(total);
        let end = start.saturating_add(per_page).min(total);
        page_of = hits[start..end].to_vec();
        m.insert(
            "pagination".into(),
            json!({
                "page": page,
                "per_page": per_page,
                "total": total,
                "total_pages": total_pages,
                "next_page": if page < total_pages { json!(page + 1) } else { Value::Null },
                "prev_page": if page > 1 { json!((page - 1).min(total_pages.max(1))) } else { Value::Null },
            }),
        );
        &page_of
    } else {
        &hits
    };
    m.insert("count".into(), json!(shown.len()));
    m.insert("total".into(), json!(total));
    let mut extra = None;
    if dataset == "price-index" {
        let sample = snap.feed_header.get("sample") == Some(&Value::Bool(true));
        m.insert("sample".into(), json!(sample));
        m.insert("stale".into(), json!(snap.feed_stale));
        m.insert(
            "feed".into(),
            json!({
                "vendor": snap.feed_header.get("vendor"),
                "vendor_url": snap.feed_header.get("vendor_url"),
                "as_of": snap.feed_header.get("as_of"),
                "origin": snap.feed_origin,
            }),
        );
        if sample {
            m.insert(
                "notice".into(),
                json!("SAMPLE data shipped with the software: illustrative numbers, NOT live prices. Configure --price-feed for a real catalogue."),
            );
        }
        let mut prices: Vec<f64> = shown
            .iter()
            .filter_map(|r| r.value["price_cad"].as_f64())
            .collect();
        prices.sort_by(f64::total_cmp);
        extra = Some((
            "summary",
            json!({
                "count": prices.len(),
                "min_cad": prices.first(),
                "median_cad": median(&prices),
                "max_cad": prices.last(),
            }),
        ));
    }
    json_answer(200, splice(&m, shown, extra))
}

fn one(route: &Route, dataset: &str, snap: &Snapshot, key: &str) -> Rendered {
    let Some(ds) = snap.datasets.get(dataset) else {
        return json_answer(
            500,
            error_body(500, "not_found", "dataset not loaded", None, None),
        );
    };
    let field = if dataset == "miners" { "slug" } else { "code" };
    match ds.records.iter().find(|r| r.value[field] == key) {
        None => json_answer(
            404,
            error_body(
                404,
                "not_found",
                &format!("no {dataset} record with {field} {key:?}"),
                None,
                None,
            ),
        ),
        Some(r) => {
            let mut m = meta(route, &ds.title, &ds.description, &ds.generated_at);
            m.insert("dataset".into(), json!(dataset));
            m.insert("dataset_version".into(), json!(ds.version));
            m.insert("count".into(), json!(1));
            let body = format!(
                "{{\"meta\":{},\"record\":{}}}",
                serde_json::to_string(&m).unwrap_or_default(),
                r.raw
            );
            json_answer(200, body)
        }
    }
}

/// File names `export` writes for a dataset.
pub fn mirrors(dataset: &str) -> Vec<String> {
    vec![format!("{dataset}.json"), format!("{dataset}.csv")]
}

fn newest_generated(snap: &Snapshot) -> String {
    snap.datasets
        .values()
        .map(|d| d.generated_at.clone())
        .chain(snap.hashprice.last_success_at.clone())
        .max()
        .unwrap_or_default()
}

fn catalog(route: &Route, snap: &Snapshot, infos: &BTreeMap<String, DatasetInfo>) -> Rendered {
    let mut recs: Vec<Record> = Vec::new();
    for name in crate::datasets::DATASETS {
        let Some(ds) = snap.datasets.get(*name) else {
            continue;
        };
        let info = &infos[*name];
        let v = json!({
            "dataset": name,
            "title": info.title,
            "description": info.description,
            "version": ds.version,
            "records": ds.records.len(),
            "routes": registry::routes_of(name),
            "license": LICENSE,
            "mirrors": mirrors(name),
        });
        recs.push(Record {
            raw: v.to_string(),
            value: Map::new(),
        });
    }
    let hp = json!({
        "dataset": "hashprice",
        "title": "Hashprice",
        "description": "Expected revenue per TH/s and PH/s per day in USD and CAD, refreshed from the configured chain and price upstreams; history kept.",
        "version": "live",
        "records": snap.history.len(),
        "routes": ["/v1/hashprice", "/v1/hashprice/history"],
        "license": LICENSE,
        "mirrors": mirrors("hashprice-history"),
    });
    recs.push(Record {
        raw: hp.to_string(),
        value: Map::new(),
    });
    let mut m = meta(
        route,
        "Dataset catalogue",
        "Every dataset of the Open Mining Data API with its routes and mirrors.",
        &newest_generated(snap),
    );
    m.insert("count".into(), json!(recs.len()));
    let refs: Vec<&Record> = recs.iter().collect();
    json_answer(200, splice(&m, &refs, None))
}

fn hashprice(route: &Route, snap: &Snapshot) -> Rendered {
    let hp = &snap.hashprice;
    let generated = hp
        .last_attempt_at
        .clone()
        .unwrap_or_else(|| newest_generated(snap));
    let mut m = meta(
        route,
        "Hashprice",
        "Expected mining revenue per unit of hashrate per day (subsidy-only and fee-inclusive), USD and CAD.",
        &generated,
    );
    m.insert("stale".into(), json!(hp.stale));
    let status = json!({
        "stale": hp.stale,
        "stale_reason": hp.stale_reason,
        "last_attempt_at": hp.last_attempt_at,
        "last_success_at": hp.last_success_at,
        "interval_s": hp.interval_s,
    });
    let body = format!(
        "{{\"meta\":{},\"status\":{},\"record\":{}}}",
        serde_json::to_string(&m).unwrap_or_default(),
        status,
        hp.record.as_deref().unwrap_or("null")
    );
    json_answer(200, body)
}

fn history(route: &Route, snap: &Snapshot, params: &Params) -> Rendered {
    let limit = params
        .get("limit")
        .and_then(ParamValue::int)
        .unwrap_or(96)
        .max(1) as usize;
    let recs: Vec<Record> = snap
        .history
        .iter()
        .take(limit)
        .map(|raw| Record {
            raw: raw.clone(),
            value: Map::new(),
        })
        .collect();
    let mut m = meta(
        route,
        "Hashprice history",
        "Successful hashprice refreshes, newest first.",
        &newest_generated(snap),
    );
    m.insert("count".into(), json!(recs.len()));
    m.insert("total".into(), json!(snap.history.len()));
    m.insert("filters".into(), filters_value(params));
    let refs: Vec<&Record> = recs.iter().collect();
    json_answer(200, splice(&m, &refs, None))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The HTML endpoint index, generated from the registry.
pub fn index_html(snap: &Snapshot) -> String {
    let mut h = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>svcOS Open Mining Data API</title><style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
code{background:#f3f3f3;padding:0 .2em}table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;vertical-align:top}</style></head><body>\
<h1>svcOS Open Mining Data API <small>v1</small></h1>",
    );
    let _ = write!(
        h,
        "<p>{}</p><p>Machine-readable: <a href=\"/v1/catalog\">/v1/catalog</a> and the OpenAPI 3.1 document <a href=\"/v1/openapi.json\">/v1/openapi.json</a>. Data licence: <a href=\"{LICENSE_URL}\">{LICENSE}</a>.</p>",
        esc(NOTICE)
    );
    if let Some(site) = &snap.site_url {
        let _ = write!(h, "<p>Publisher: <a href=\"{0}\">{0}</a></p>", esc(site));
    }
    h.push_str("<table><tr><th>Route</th><th>What</th><th>Parameters</th></tr>");
    for r in ROUTES {
        let params: Vec<String> = r
            .params
            .iter()
            .map(|p| {
                format!(
                    "<code>{}</code> ({}{}) {}",
                    p.name,
                    if p.in_path { "path, " } else { "" },
                    esc(&p.schema().to_string()),
                    esc(p.description)
                )
            })
            .collect();
        let link = if r.path.contains('{') {
            format!("<code>{}</code>", esc(r.path))
        } else {
            format!("<a href=\"{0}\"><code>{0}</code></a>", esc(r.path))
        };
        let _ = write!(
            h,
            "<tr><td>{link}</td><td>{}<br><small>{} Cache-Control: <code>{}</code></small></td><td>{}</td></tr>",
            esc(r.summary),
            esc(r.description),
            r.cache.header(),
            params.join("<br>")
        );
    }
    h.push_str("</table><p>Datasets:</p><ul>");
    for (name, ds) in &snap.datasets {
        let _ = write!(
            h,
            "<li><b>{}</b> ({}): {} records, version {}</li>",
            esc(&ds.title),
            esc(name),
            ds.records.len(),
            esc(&ds.version)
        );
    }
    h.push_str("</ul></body></html>\n");
    h
}

/// Render a route for normalized parameters (query) and the path key, if any.
pub fn render(
    route: &Route,
    snap: &Snapshot,
    infos: &BTreeMap<String, DatasetInfo>,
    params: &Params,
    key: Option<&str>,
) -> Rendered {
    match route.kind {
        Kind::Index => Rendered {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: index_html(snap).into_bytes(),
        },
        Kind::OpenApi => json_answer(200, snap.openapi.to_string()),
        Kind::Catalog => catalog(route, snap, infos),
        Kind::Hashprice => hashprice(route, snap),
        Kind::HashpriceHistory => history(route, snap, params),
        Kind::List(ds) => list(route, ds, snap, params),
        Kind::One(ds) => one(route, ds, snap, key.unwrap_or_default()),
    }
}
