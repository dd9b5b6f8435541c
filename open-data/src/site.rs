//! The publisher's site pages that the service answers itself and `export` writes as files:
//! the mirror index (`/data/`), the llms.txt citation map and the methodology page. The
//! endpoint index (`/data/api/`) is [`crate::render::index_html`]; the mirror files are
//! [`crate::export::mirror_file`]. All of them are rendered from the snapshot and the route
//! registry, never from the request, so every instance over one snapshot serves the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::registry::{Kind, LICENSE, LICENSE_URL, NOTICE, ROUTES};
use crate::render::{Snapshot, esc, mirrors};

const STYLE: &str = "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
code{background:#f3f3f3;padding:0 .2em}table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;vertical-align:top}</style>";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>{STYLE}</head><body>{body}<p><small>{}</small></p></body></html>\n",
        esc(title),
        esc(NOTICE)
    )
}

/// An absolute URL when the publisher's base is configured, else the site-relative path.
fn link(snap: &Snapshot, path: &str) -> String {
    match &snap.site_url {
        Some(base) => format!("{}{path}", base.trim_end_matches('/')),
        None => path.to_string(),
    }
}

/// How each dataset is refreshed (methodology and llms.txt).
fn refresh_of(dataset: &str) -> &'static str {
    match dataset {
        "price-index" => {
            "Reloaded from the configured vendor feed every --price-feed-interval-s (1 hour by default); a failed reload keeps the last good items with meta.stale true. The repository ships a labelled sample feed only."
        }
        "hashprice-history" => {
            "One record per successful hashprice refresh (every 15 minutes from the chain and price upstreams)."
        }
        _ => {
            "Static: edited in the repository's JSON Lines files and released with a new dataset_version; loaded at start and checked row by row."
        }
    }
}

/// `/data/`: every mirror file with its dataset, records and link.
pub fn data_index_html(snap: &Snapshot) -> String {
    let mut h = String::from(
        "<h1>Open Mining Data: dataset mirrors</h1><p>Every dataset as one JSON file (meta block plus every record, the records byte-identical to the API's) and one CSV file (a header row; nested fields as dotted columns, lists as JSON text). For bulk or repeated access use these files, not the API.</p>",
    );
    let _ = write!(
        h,
        "<p>Licence: <a href=\"{LICENSE_URL}\">{LICENSE}</a>. Endpoint index: <a href=\"{0}\">{0}</a>. Methodology: <a href=\"{1}\">{1}</a>.</p>",
        esc(&link(snap, "/data/api/")),
        esc(&link(snap, "/methodology"))
    );
    h.push_str("<table><tr><th>Dataset</th><th>Version</th><th>Records</th><th>Files</th></tr>");
    for (name, ds) in &snap.datasets {
        let files: Vec<String> = mirrors(name)
            .iter()
            .map(|p| format!("<a href=\"{0}\">{1}</a>", esc(&link(snap, p)), esc(p)))
            .collect();
        let _ = write!(
            h,
            "<tr><td><b>{}</b> ({})<br><small>{}</small></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&ds.title),
            esc(name),
            esc(&ds.description),
            esc(&ds.version),
            ds.records.len(),
            files.join("<br>")
        );
    }
    let files: Vec<String> = mirrors("hashprice-history")
        .iter()
        .map(|p| format!("<a href=\"{0}\">{1}</a>", esc(&link(snap, p)), esc(p)))
        .collect();
    let _ = write!(
        h,
        "<tr><td><b>Hashprice history</b> (hashprice-history)</td><td>live</td><td>{}</td><td>{}</td></tr></table>",
        snap.history.len(),
        files.join("<br>")
    );
    page("Open Mining Data: dataset mirrors", &h)
}

fn text_of<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| v[*k].as_str().filter(|s| !s.is_empty()))
}

/// The sources of a dataset, grouped by where they are published: a web site (the URL's host)
/// or a repository. A corpus of hundreds of records cites a few dozen sites; one line per site
/// reads as a methodology, one per page would not.
#[derive(Debug, Default)]
struct SourceGroup {
    /// Records citing it.
    records: usize,
    /// Distinct pages or files cited.
    pages: std::collections::BTreeSet<String>,
    /// Licences the records state for it (`licence` or `license`), if any.
    licences: std::collections::BTreeSet<String>,
}

/// Groups of a dataset's sources, keyed by site or repository. Members a source may carry
/// beyond `title`/`url`/`path` (`repository`, `licence`/`license`) are used when present, so
/// the page follows the data as its sources gain detail.
fn sources_of(snap: &Snapshot, dataset: &str) -> BTreeMap<String, SourceGroup> {
    let mut out: BTreeMap<String, SourceGroup> = BTreeMap::new();
    for r in snap
        .datasets
        .get(dataset)
        .map(|d| d.records.as_slice())
        .unwrap_or_default()
    {
        let src = r.value.get("source").cloned().unwrap_or(Value::Null);
        let (site, page) = match (
            text_of(&src, &["url"]),
            text_of(&src, &["repository"]),
            text_of(&src, &["path"]),
        ) {
            (Some(u), _, _) => match url::Url::parse(u) {
                Ok(parsed) => (parsed.host_str().unwrap_or(u).to_string(), u.to_string()),
                Err(_) => (u.to_string(), u.to_string()),
            },
            (None, Some(repo), path) => (
                repo.trim_end_matches('/').to_string(),
                path.unwrap_or(repo).to_string(),
            ),
            (None, None, Some(path)) => ("the svcOS repository".to_string(), path.to_string()),
            (None, None, None) => continue,
        };
        let g = out.entry(site).or_default();
        g.records += 1;
        g.pages.insert(page);
        if let Some(l) = text_of(&src, &["licence", "license"]) {
            g.licences.insert(l.to_string());
        }
    }
    out
}

/// The load rules of each dataset (methodology): what a row must satisfy to be served.
fn rules_of(dataset: &str) -> &'static [&'static str] {
    match dataset {
        "miners" => &[
            "Every row matches the dataset schema (types, ranges, enums, http(s) source URL).",
            "slug is unique.",
            "efficiency_j_per_th agrees with power_w / hashrate_ths within 3 %.",
            "Derived: btu_per_h = power_w x 3.412142; home_score (circuit, cooling and efficiency terms); status and product from the price feed's cheapest in-stock item for the model.",
        ],
        "power-profiles" => &[
            "model_slug names a miners record; the source has a URL or a repository path.",
            "A simulated point carries measured_on (the day of the bench run).",
            "A tuned point is one a tuning firmware's developers published; its source names them and links the text.",
            "Derived: the stock point of every miner from its miners record (same source); efficiency_j_per_th = power_w / hashrate_ths; id = model_slug-profile, unique.",
        ],
        "error-codes" => &[
            "code (vendor prefix plus native code) is unique; the source has a URL or a repository path.",
            "repair_cost_cad, when given, has min <= max and its own source URL.",
        ],
        "reliability" => &[
            "id is unique; every model_slugs entry names a miners record.",
            "frequency_qualifier repeats what the source says (reported, reported-common, reported-most-common), never a measured rate; grade A (manufacturer), B (repair-shop bench documentation) or C (single FAQ, forum or community report).",
        ],
        "price-index" => &[
            "The feed's header line says vendor, currency (CAD), as_of and whether it is a sample; skus are unique; model_slug, when given, names a miners record.",
            "summary = count, min, median and max of price_cad over the items shown.",
        ],
        _ => &[],
    }
}

/// `/methodology`: sources, rules and refresh of every dataset, from the loaded data.
pub fn methodology_html(snap: &Snapshot) -> String {
    let mut h = String::from(
        "<h1>Open Mining Data: methodology</h1><p>Every record carries its own source. A dataset is loaded only when every row passes its rules: one bad row stops the service at start with file and line, so nothing is ever served half-checked.</p>",
    );
    for (name, ds) in in_order(snap) {
        let _ = write!(
            h,
            "<h2 id=\"{0}\">{1}</h2><p>{2}</p><p>Version {3}, {4} records, loaded {5}. Refresh: {6}</p><h3>Rules</h3><ul>",
            esc(name),
            esc(&ds.title),
            esc(&ds.description),
            esc(&ds.version),
            ds.records.len(),
            esc(&ds.generated_at),
            esc(refresh_of(name))
        );
        for rule in rules_of(name) {
            let _ = write!(h, "<li>{}</li>", esc(rule));
        }
        h.push_str("</ul><h3>Sources</h3><ul>");
        for (site, g) in sources_of(snap, name) {
            let site_html = if site.contains('.') && !site.contains(' ') && !site.contains('/') {
                format!("<a href=\"https://{0}/\">{0}</a>", esc(&site))
            } else if site.starts_with("https://") {
                format!("<a href=\"{0}\">{0}</a>", esc(&site))
            } else {
                esc(&site)
            };
            let licence = if g.licences.is_empty() {
                String::new()
            } else {
                format!(
                    "; licence {}",
                    esc(&g.licences.iter().cloned().collect::<Vec<_>>().join(", "))
                )
            };
            let _ = write!(
                h,
                "<li>{site_html}: {} records from {} pages or files{licence}</li>",
                g.records,
                g.pages.len()
            );
        }
        h.push_str("</ul>");
    }
    let _ = write!(
        h,
        "<h2 id=\"hashprice\">Hashprice</h2><p>Blocks a day one TH/s finds = 86 400 x 10^12 / (difficulty x 2^32); times the next block's subsidy (plus the mean fees of the last blocks for the fee-inclusive figure) and the BTC price in USD and CAD. Refresh: every {} s from the chain (Esplora-compatible REST or Bitcoin Core JSON-RPC) and price upstreams; a failed refresh is retried with backoff (5 s doubling up to 60 s) and the last good value is served flagged stale.</p>",
        snap.hashprice.interval_s
    );
    page("Open Mining Data: methodology", &h)
}

/// `/llms.txt` (llmstxt.org): a Markdown map of what to cite and where.
pub fn llms_txt(snap: &Snapshot) -> String {
    let mut t = String::from("# svcOS Open Mining Data\n\n");
    let _ = writeln!(
        t,
        "> Free, keyless, read-only JSON API and static CSV/JSON mirrors of Bitcoin-mining datasets: hashprice, ASIC miner specifications, power profiles, error codes, reliability claims and a catalogue price index. Data licence {LICENSE} ({LICENSE_URL}): cite \"svcOS Open Mining Data\", the dataset and its dataset_version, and link the route or mirror used.\n"
    );
    t.push_str("Every record carries its own `source` (a URL, or a path in the svcOS repository); cite that source for a single fact. Bulk users fetch the mirrors, not the API.\n\n## Datasets\n\n");
    for (name, ds) in in_order(snap) {
        let route = ROUTES
            .iter()
            .find(|r| r.kind == Kind::List(name))
            .map_or("", |r| r.path);
        let _ = writeln!(
            t,
            "- [{}]({}): {} Version {}, {} records. Mirrors: [JSON]({}), [CSV]({}).",
            ds.title,
            link(snap, route),
            ds.description,
            ds.version,
            ds.records.len(),
            link(snap, &format!("/data/{name}.json")),
            link(snap, &format!("/data/{name}.csv"))
        );
    }
    let _ = writeln!(
        t,
        "- [Hashprice]({}): expected revenue per TH/s and PH/s per day, USD and CAD, subsidy-only and fee-inclusive. History: [JSON]({}), [CSV]({}).",
        link(snap, "/v1/hashprice"),
        link(snap, "/data/hashprice-history.json"),
        link(snap, "/data/hashprice-history.csv")
    );
    t.push_str("\n## Docs\n\n");
    let _ = writeln!(
        t,
        "- [OpenAPI 3.1]({}): every route, parameter and answer schema.",
        link(snap, "/v1/openapi.json")
    );
    let _ = writeln!(
        t,
        "- [Catalogue]({}): every dataset with its version, routes and mirrors.",
        link(snap, "/v1/catalog")
    );
    let _ = writeln!(
        t,
        "- [Endpoint index]({}): the routes for people.",
        link(snap, "/data/api/")
    );
    let _ = writeln!(
        t,
        "- [Methodology]({}): sources, load rules, derived numbers and refresh of each dataset.",
        link(snap, "/methodology")
    );
    t
}

/// The snapshot's datasets in catalogue order.
fn in_order(snap: &Snapshot) -> impl Iterator<Item = (&'static str, &crate::render::DatasetData)> {
    crate::datasets::DATASETS
        .iter()
        .filter_map(|n| snap.datasets.get(*n).map(|d| (*n, d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_follow_the_members_a_record_carries() {
        let (mut snap, _) = crate::render::tests::snapshot();
        let codes = snap.datasets.get_mut("error-codes").unwrap();
        let first = &mut codes.records[0].value;
        first.insert(
            "source".into(),
            serde_json::json!({"title": "BTMiner docs", "repository": "https://github.com/x/y/",
                               "path": "docs/codes.md", "licence": "MIT", "retrieved": "2026-11-01"}),
        );
        let html = methodology_html(&snap);
        assert!(
            html.contains(">https://github.com/x/y</a>: 1 records from 1 pages"),
            "grouped by repository"
        );
        assert!(html.contains("licence MIT"));
        // Grouped by site: one line per host, however many pages it has.
        let section = html.split("id=\"error-codes\"").nth(1).unwrap();
        let section = section.split("<h2").next().unwrap();
        assert_eq!(section.matches(">d-central.tech</a>: ").count(), 1);
        for name in crate::datasets::DATASETS {
            assert!(html.contains(&format!("id=\"{name}\"")), "{name}");
        }
        let llms = llms_txt(&snap);
        assert!(llms.contains("/v1/error-codes") && llms.contains("CC BY 4.0"));
    }
}
