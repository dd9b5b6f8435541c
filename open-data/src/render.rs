//! Rendering answers from a data snapshot: filters, pagination, meta blocks, the catalogue,
//! the HTML index. Records are spliced in as their stored JSON text, so the API's bytes of a
//! record are exactly the store's (and the exports').

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::datasets::{DatasetInfo, slugify};
use crate::query::{ParamValue, Params};
use crate::registry::{self, Kind, LICENSE, LICENSE_URL, NOTICE, ROUTES, Route};
use crate::shapes::{
    CatalogEntry, ErrorBody, ErrorDetail, FeedInfo, HashpriceStatus, Meta, Pagination, PriceSummary,
};

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

/// The meta block (members every answer has; the caller sets the optional ones).
pub fn meta(route: &Route, title: &str, description: &str, generated_at: &str) -> Meta {
    Meta {
        schema: route.schema_tag(),
        title: title.into(),
        description: description.into(),
        license: LICENSE.into(),
        license_url: LICENSE_URL.into(),
        source: "svcOS Open Mining Data API; every record carries its own source".into(),
        attribution:
            "Credit \"svcOS Open Mining Data\" and link back to the API or the dataset mirror."
                .into(),
        generated_at: generated_at.into(),
        ..Meta::default()
    }
}

/// The error body: `{meta, error: {status, code, message, parameter?, allow?}}`.
pub fn error_body(
    status: u16,
    code: &str,
    message: &str,
    parameter: Option<&str>,
    allow: Option<&str>,
) -> String {
    let route = Route {
        id: "error",
        path: "",
        kind: Kind::Catalog,
        summary: "",
        description: "",
        params: &[],
        cache: registry::CACHE_ERROR,
    };
    let body = ErrorBody {
        meta: meta(
            &route,
            "Error",
            "The request could not be answered; error says why.",
            &crate::time::rfc3339(crate::time::now_unix()),
        ),
        error: ErrorDetail {
            status,
            code: code.into(),
            message: message.into(),
            parameter: parameter.map(str::to_string),
            allow: allow.map(str::to_string),
        },
    };
    serde_json::to_string(&body).unwrap_or_default()
}

fn filters_value(params: &Params) -> Map<String, Value> {
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
    f
}

fn splice(meta: &Meta, records: &[&Record], extra: Option<(&str, Value)>) -> String {
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
    m.dataset = Some(dataset.into());
    m.dataset_version = Some(ds.version.clone());
    m.filters = Some(filters_value(params));
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
        m.pagination = Some(Pagination {
            page,
            per_page,
            total,
            total_pages,
            next_page: (page < total_pages).then_some(page + 1),
            prev_page: (page > 1).then(|| (page - 1).min(total_pages.max(1))),
        });
        &page_of
    } else {
        &hits
    };
    m.count = Some(shown.len());
    m.total = Some(total);
    let mut extra = None;
    if dataset == "price-index" {
        let sample = snap.feed_header.get("sample") == Some(&Value::Bool(true));
        let header = |k: &str| {
            snap.feed_header
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        m.sample = Some(sample);
        m.stale = Some(snap.feed_stale);
        m.feed = Some(FeedInfo {
            vendor: header("vendor"),
            vendor_url: header("vendor_url"),
            as_of: header("as_of"),
            origin: snap.feed_origin.clone(),
        });
        if sample {
            m.notice = Some("SAMPLE data shipped with the software: illustrative numbers, NOT live prices. Configure --price-feed for a real catalogue.".into());
        }
        let mut prices: Vec<f64> = shown
            .iter()
            .filter_map(|r| r.value["price_cad"].as_f64())
            .collect();
        prices.sort_by(f64::total_cmp);
        let summary = PriceSummary {
            count: prices.len(),
            min_cad: prices.first().copied(),
            median_cad: median(&prices),
            max_cad: prices.last().copied(),
        };
        extra = Some(("summary", json!(summary)));
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
            m.dataset = Some(dataset.into());
            m.dataset_version = Some(ds.version.clone());
            m.count = Some(1);
            let body = format!(
                "{{\"meta\":{},\"record\":{}}}",
                serde_json::to_string(&m).unwrap_or_default(),
                r.raw
            );
            json_answer(200, body)
        }
    }
}

/// Every record of `dataset` about one model: 404 unless `model` is a miners slug (or, for
/// reliability, the slug of a model name a claim uses).
fn by_model(route: &Route, dataset: &str, snap: &Snapshot, model: &str) -> Rendered {
    let known_miner = snap
        .datasets
        .get("miners")
        .is_some_and(|m| m.records.iter().any(|r| r.value["slug"] == model));
    let mut params = Params::new();
    params.insert("model", ParamValue::Text(model.to_string()));
    let named = dataset == "reliability"
        && snap.datasets.get(dataset).is_some_and(|ds| {
            ds.records
                .iter()
                .any(|r| slugify(r.value["model_name"].as_str().unwrap_or_default()) == model)
        });
    if !known_miner && !named {
        return json_answer(
            404,
            error_body(
                404,
                "not_found",
                &format!("no miner model with slug {model:?}; see /v1/miners"),
                None,
                None,
            ),
        );
    }
    list(route, dataset, snap, &params)
}

/// Site paths of a dataset's mirrors (`/data/{file}`, and `data/` of `export`).
pub fn mirrors(dataset: &str) -> Vec<String> {
    vec![
        format!("/data/{dataset}.json"),
        format!("/data/{dataset}.csv"),
    ]
}

/// The newest load time of the static datasets: what dates answers that do not depend on the
/// live hashprice, so every instance serving one snapshot renders the same bytes.
pub fn newest_dataset_time(snap: &Snapshot) -> String {
    snap.datasets
        .values()
        .map(|d| d.generated_at.clone())
        .max()
        .unwrap_or_default()
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
    let mut entries: Vec<CatalogEntry> = Vec::new();
    for name in crate::datasets::DATASETS {
        let Some(ds) = snap.datasets.get(*name) else {
            continue;
        };
        let (title, description) = infos.get(*name).map_or_else(
            || (ds.title.clone(), ds.description.clone()),
            |i| (i.title.clone(), i.description.clone()),
        );
        entries.push(CatalogEntry {
            dataset: (*name).into(),
            title,
            description,
            version: ds.version.clone(),
            records: ds.records.len(),
            routes: registry::routes_of(name)
                .into_iter()
                .map(str::to_string)
                .collect(),
            license: LICENSE.into(),
            mirrors: mirrors(name),
        });
    }
    entries.push(CatalogEntry {
        dataset: "hashprice".into(),
        title: "Hashprice".into(),
        description: "Expected revenue per TH/s and PH/s per day in USD and CAD, refreshed from the configured chain and price upstreams; history kept.".into(),
        version: "live".into(),
        records: snap.history.len(),
        routes: vec!["/v1/hashprice".into(), "/v1/hashprice/history".into()],
        license: LICENSE.into(),
        mirrors: mirrors("hashprice-history"),
    });
    let recs: Vec<Record> = entries
        .iter()
        .map(|e| Record {
            raw: serde_json::to_string(e).unwrap_or_default(),
            value: Map::new(),
        })
        .collect();
    let mut m = meta(
        route,
        "Dataset catalogue",
        "Every dataset of the Open Mining Data API with its routes and mirrors.",
        &newest_dataset_time(snap),
    );
    m.count = Some(recs.len());
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
    m.stale = Some(hp.stale);
    let status = HashpriceStatus {
        stale: hp.stale,
        stale_reason: hp.stale_reason.clone(),
        last_attempt_at: hp.last_attempt_at.clone(),
        last_success_at: hp.last_success_at.clone(),
        interval_s: hp.interval_s,
    };
    let body = format!(
        "{{\"meta\":{},\"status\":{},\"record\":{}}}",
        serde_json::to_string(&m).unwrap_or_default(),
        serde_json::to_string(&status).unwrap_or_default(),
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
    m.count = Some(recs.len());
    m.total = Some(snap.history.len());
    m.filters = Some(filters_value(params));
    let refs: Vec<&Record> = recs.iter().collect();
    json_answer(200, splice(&m, &refs, None))
}

/// HTML-escape text.
pub fn esc(s: &str) -> String {
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
        Kind::ByModel(ds) => by_model(route, ds, snap, key.unwrap_or_default()),
        Kind::ApiIndex => Rendered {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: index_html(snap).into_bytes(),
        },
        Kind::DataIndex => Rendered {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: crate::site::data_index_html(snap).into_bytes(),
        },
        Kind::LlmsTxt => Rendered {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body: crate::site::llms_txt(snap).into_bytes(),
        },
        Kind::Methodology => Rendered {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: crate::site::methodology_html(snap).into_bytes(),
        },
        Kind::DataFile => match crate::export::mirror_file(snap, key.unwrap_or_default()) {
            Some((content_type, body)) => Rendered {
                status: 200,
                content_type,
                body,
            },
            None => json_answer(
                404,
                error_body(
                    404,
                    "not_found",
                    &format!("no mirror file {:?}; see /data/", key.unwrap_or_default()),
                    None,
                    None,
                ),
            ),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::datasets::{Source, feed_from_text, load_all, manifest};

    /// A snapshot of the embedded datasets, as the server would build it from a fresh store.
    pub(crate) fn snapshot() -> (Snapshot, BTreeMap<String, DatasetInfo>) {
        let src = Source::default();
        let infos = manifest(&src).unwrap();
        let (name, text) = src.read(&infos["price-index"].file).unwrap();
        let feed = feed_from_text(&name, &text, &infos).unwrap();
        let recs = load_all(&src, &infos, &feed).unwrap();
        let datasets = recs
            .by_dataset
            .iter()
            .map(|(n, rs)| {
                let info = &infos[n];
                let data = DatasetData {
                    version: info.version.clone(),
                    title: info.title.clone(),
                    description: info.description.clone(),
                    generated_at: "2026-11-23T00:00:00Z".into(),
                    records: rs
                        .iter()
                        .map(|r| Record {
                            raw: serde_json::to_string(r).unwrap(),
                            value: r.clone(),
                        })
                        .collect(),
                };
                (n.clone(), data)
            })
            .collect();
        let snap = Snapshot {
            datasets,
            feed_header: feed.header.clone(),
            feed_origin: feed.origin.clone(),
            feed_stale: false,
            hashprice: HashpriceView {
                interval_s: 900,
                stale: true,
                ..HashpriceView::default()
            },
            history: Vec::new(),
            openapi: Arc::new(registry::openapi(&infos, None)),
            site_url: None,
        };
        (snap, infos)
    }

    fn route(id: &str) -> &'static Route {
        ROUTES.iter().find(|r| r.id == id).unwrap()
    }

    fn answer(id: &str, query: Option<&str>, key: Option<&str>) -> (u16, Value) {
        let (snap, infos) = snapshot();
        let r = route(id);
        let params = crate::query::parse_query(r.params, query).unwrap();
        let out = render(r, &snap, &infos, &params, key);
        (out.status, serde_json::from_slice(&out.body).unwrap())
    }

    #[test]
    fn the_meta_block_has_its_members_and_only_the_set_ones() {
        let (status, body) = answer("miners", None, None);
        assert_eq!(status, 200);
        let m = body["meta"].as_object().unwrap();
        for k in [
            "schema",
            "title",
            "description",
            "license",
            "license_url",
            "source",
            "attribution",
            "generated_at",
            "dataset",
            "dataset_version",
            "count",
            "total",
            "filters",
        ] {
            assert!(m.contains_key(k), "{k}");
        }
        assert_eq!(m["schema"], "svcos.opendata.miners.v1");
        assert!(!m.contains_key("pagination") && !m.contains_key("sample"));
        assert_eq!(m["count"], body["records"].as_array().unwrap().len());
    }

    #[test]
    fn pagination_edges() {
        let (_, all) = answer("error-codes", Some("per_page=500"), None);
        // The corpus may be longer than one page of 500: the total is the pagination's.
        let total = all["meta"]["pagination"]["total"].as_u64().unwrap() as usize;
        assert_eq!(all["meta"]["total"], total);
        assert_eq!(all["records"].as_array().unwrap().len(), total.min(500));
        let (_, first) = answer("error-codes", Some("per_page=7"), None);
        let p = &first["meta"]["pagination"];
        assert_eq!(p["total_pages"], total.div_ceil(7));
        assert_eq!(
            (p["prev_page"].clone(), p["next_page"].clone()),
            (Value::Null, json!(2))
        );
        let last = total.div_ceil(7);
        let (_, end) = answer(
            "error-codes",
            Some(&format!("per_page=7&page={last}")),
            None,
        );
        assert_eq!(end["meta"]["pagination"]["next_page"], Value::Null);
        assert_eq!(
            end["records"].as_array().unwrap().len(),
            total - 7 * (last - 1)
        );
        let (status, past) = answer(
            "error-codes",
            Some(&format!("per_page=7&page={}", last + 3)),
            None,
        );
        assert_eq!(status, 200);
        assert!(past["records"].as_array().unwrap().is_empty());
        assert_eq!(past["meta"]["pagination"]["prev_page"], json!(last));
    }

    #[test]
    fn per_model_routes_answer_a_known_model_and_404_an_unknown_one() {
        let (status, s9) = answer("power-profiles-of-model", None, Some("antminer-s9"));
        assert_eq!(status, 200);
        let (_, filtered) = answer("power-profiles", Some("model=antminer-s9"), None);
        assert_eq!(s9["records"], filtered["records"]);
        assert!(s9["records"].as_array().unwrap().len() >= 2);
        let (status, err) = answer("power-profiles-of-model", None, Some("no-such-model"));
        assert_eq!(status, 404);
        assert_eq!(err["error"]["code"], "not_found");
        assert_eq!(err["meta"]["schema"], "svcos.opendata.error.v1");
        let (status, claims) = answer("reliability-of-model", None, Some("whatsminer-m30s"));
        assert_eq!(status, 200);
        assert!(claims["records"].as_array().unwrap().iter().all(|c| {
            c["model_slugs"]
                .as_array()
                .unwrap()
                .contains(&json!("whatsminer-m30s"))
        }));
        // A model name used by a source, not a miners slug, is a key too.
        let (status, _) = answer("reliability-of-model", None, Some("whatsminer-m50s"));
        assert_eq!(status, 200);
        let (status, _) = answer("reliability-of-model", None, Some("nope"));
        assert_eq!(status, 404);
        let (status, one) = answer("miner", None, Some("antminer-s9"));
        assert_eq!(
            (status, one["record"]["slug"].clone()),
            (200, json!("antminer-s9"))
        );
    }

    #[test]
    fn every_path_example_answers_200_with_the_shipped_data() {
        let mut checked = 0;
        for r in ROUTES {
            for p in r.params.iter().filter(|p| p.in_path) {
                let example = p
                    .example
                    .unwrap_or_else(|| panic!("{} has no example", r.path));
                let (snap, infos) = snapshot();
                let out = render(r, &snap, &infos, &Params::new(), Some(example));
                assert_eq!(out.status, 200, "{} with {example}", r.path);
                checked += 1;
            }
        }
        assert!(checked >= 5);
    }

    #[test]
    fn the_price_summary_is_over_the_items_shown() {
        let (_, body) = answer("price-index", Some("condition=new"), None);
        let mut prices: Vec<f64> = body["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["price_cad"].as_f64().unwrap())
            .collect();
        prices.sort_by(f64::total_cmp);
        assert_eq!(body["summary"]["count"], prices.len());
        assert_eq!(body["summary"]["min_cad"], json!(prices[0]));
        assert_eq!(
            body["summary"]["median_cad"],
            json!(median(&prices).unwrap())
        );
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), Some(3.0));
        assert_eq!(median(&[]), None);
        assert_eq!(body["meta"]["sample"], true);
    }

    #[test]
    fn error_bodies_carry_parameter_and_allow_only_when_given() {
        let v: Value = serde_json::from_str(&error_body(
            400,
            "invalid_parameter",
            "m",
            Some("page"),
            None,
        ))
        .unwrap();
        assert_eq!(v["error"]["parameter"], "page");
        assert!(v["error"].get("allow").is_none());
        let v: Value = serde_json::from_str(&error_body(
            405,
            "method_not_allowed",
            "m",
            None,
            Some("GET"),
        ))
        .unwrap();
        assert_eq!(v["error"]["allow"], "GET");
        assert!(v["error"].get("parameter").is_none());
    }

    #[test]
    fn the_catalogue_links_every_route_and_mirror() {
        let (_, body) = answer("catalog", None, None);
        let recs = body["records"].as_array().unwrap();
        assert_eq!(recs.len(), crate::datasets::DATASETS.len() + 1);
        for r in recs {
            for m in r["mirrors"].as_array().unwrap() {
                let file = m.as_str().unwrap().strip_prefix("/data/").unwrap();
                assert!(registry::MIRROR_FILES.contains(&file), "{file}");
            }
        }
        let pp = recs
            .iter()
            .find(|r| r["dataset"] == "power-profiles")
            .unwrap();
        assert!(
            pp["routes"]
                .as_array()
                .unwrap()
                .contains(&json!("/v1/power-profiles/{model}"))
        );
    }

    #[test]
    fn the_index_lists_every_route() {
        let (snap, _) = snapshot();
        let html = index_html(&snap);
        for r in ROUTES {
            assert!(html.contains(&esc(r.path)), "{}", r.path);
        }
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }
}
