//! Dataset files: reading (embedded copy or a directory), validation, and the derived records.
//!
//! Every dataset is a JSON Lines file (one record per line, `#` comments) with a JSON Schema
//! beside it, listed in `datasets/manifest.json`. A row that fails its schema or a cross-file
//! rule stops the load with `file:line: reason`, because serving half a dataset silently is
//! worse than not starting.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::schema;
use crate::shapes::{ListingStatus, MinerDerived, Product, ProfileDerived};

/// The datasets the service serves, in catalogue order.
pub const DATASETS: &[&str] = &[
    "miners",
    "power-profiles",
    "error-codes",
    "reliability",
    "price-index",
];

/// Files compiled into the binary, so `serve` needs nothing beside it.
const EMBEDDED: &[(&str, &str)] = &[
    ("manifest.json", include_str!("../datasets/manifest.json")),
    (
        "miners/schema.json",
        include_str!("../datasets/miners/schema.json"),
    ),
    (
        "miners/miners.v1.jsonl",
        include_str!("../datasets/miners/miners.v1.jsonl"),
    ),
    (
        "power-profiles/schema.json",
        include_str!("../datasets/power-profiles/schema.json"),
    ),
    (
        "power-profiles/power-profiles.v1.jsonl",
        include_str!("../datasets/power-profiles/power-profiles.v1.jsonl"),
    ),
    (
        "error-codes/schema.json",
        include_str!("../datasets/error-codes/schema.json"),
    ),
    (
        "error-codes/error-codes.v1.jsonl",
        include_str!("../datasets/error-codes/error-codes.v1.jsonl"),
    ),
    (
        "reliability/schema.json",
        include_str!("../datasets/reliability/schema.json"),
    ),
    (
        "reliability/reliability.v1.jsonl",
        include_str!("../datasets/reliability/reliability.v1.jsonl"),
    ),
    (
        "price-index/schema.json",
        include_str!("../datasets/price-index/schema.json"),
    ),
    (
        "price-index/feed-header.schema.json",
        include_str!("../datasets/price-index/feed-header.schema.json"),
    ),
    (
        "price-index/price-index.sample.v1.jsonl",
        include_str!("../datasets/price-index/price-index.sample.v1.jsonl"),
    ),
];

/// A load failure, printed as `file:line: reason` (line 0 when it is about the whole file).
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct LoadError {
    /// File as the operator would find it.
    pub file: String,
    /// 1-based line, 0 for the whole file.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl LoadError {
    fn new(file: &str, line: usize, reason: impl Into<String>) -> LoadError {
        LoadError {
            file: file.to_string(),
            line,
            reason: reason.into(),
        }
    }
}

/// Where dataset files come from.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// A directory laid out like `open-data/datasets`; `None` = the copy compiled in.
    pub dir: Option<PathBuf>,
}

impl Source {
    /// Where the files come from, for the store's provenance column.
    pub fn label(&self) -> String {
        self.dir
            .as_ref()
            .map_or_else(|| "embedded".to_string(), |d| d.display().to_string())
    }

    /// Read `rel` (a path relative to the dataset root): (name for messages, contents).
    pub fn read(&self, rel: &str) -> Result<(String, String), LoadError> {
        match &self.dir {
            Some(dir) => {
                let path = dir.join(rel);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| LoadError::new(&path.display().to_string(), 0, e.to_string()))?;
                Ok((path.display().to_string(), text))
            }
            None => EMBEDDED
                .iter()
                .find(|(name, _)| *name == rel)
                .map(|(name, text)| (format!("datasets/{name} (embedded)"), text.to_string()))
                .ok_or_else(|| LoadError::new(rel, 0, "not among the embedded dataset files")),
        }
    }
}

/// Manifest entry of one dataset.
#[derive(Debug, Clone)]
pub struct DatasetInfo {
    /// Dataset name (`miners`, ...).
    pub name: String,
    /// Version of the data (date-like).
    pub version: String,
    /// Human title.
    pub title: String,
    /// Human description.
    pub description: String,
    /// Row schema (also the record schema's base in the OpenAPI document).
    pub schema: Value,
    /// The feed header schema (price-index only).
    pub header_schema: Option<Value>,
    /// Data file, relative to the dataset root.
    pub file: String,
}

/// Parsed and validated rows of one JSON Lines file, with their line numbers.
pub type Rows = Vec<(usize, Map<String, Value>)>;

/// Read the manifest and every dataset schema.
pub fn manifest(src: &Source) -> Result<BTreeMap<String, DatasetInfo>, LoadError> {
    let (mname, mtext) = src.read("manifest.json")?;
    let m: Value = serde_json::from_str(&mtext)
        .map_err(|e| LoadError::new(&mname, e.line(), e.to_string()))?;
    let mut out = BTreeMap::new();
    for name in DATASETS {
        let entry = m
            .get(*name)
            .ok_or_else(|| LoadError::new(&mname, 0, format!("dataset {name:?} missing")))?;
        let field = |k: &str| -> Result<String, LoadError> {
            entry
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| LoadError::new(&mname, 0, format!("{name}: {k} missing")))
        };
        let load_schema = |rel: &str| -> Result<Value, LoadError> {
            let (sname, stext) = src.read(rel)?;
            let s: Value = serde_json::from_str(&stext)
                .map_err(|e| LoadError::new(&sname, e.line(), e.to_string()))?;
            schema::check_schema(&s).map_err(|e| LoadError::new(&sname, 0, e))?;
            Ok(s)
        };
        let schema = load_schema(&field("schema")?)?;
        let header_schema = match entry.get("header_schema").and_then(Value::as_str) {
            Some(rel) => Some(load_schema(rel)?),
            None => None,
        };
        out.insert(
            name.to_string(),
            DatasetInfo {
                name: name.to_string(),
                version: field("version")?,
                title: field("title")?,
                description: field("description")?,
                schema,
                header_schema,
                file: field("file")?,
            },
        );
    }
    Ok(out)
}

/// Parse JSON Lines text: each non-blank, non-`#` line is one object valid against `schema`.
pub fn parse_rows(file: &str, text: &str, schema_v: &Value) -> Result<Rows, LoadError> {
    // Compiled once per file (the schema was checked when the manifest was read).
    let validator = schema::compile(schema_v).map_err(|e| LoadError::new(file, 0, e))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let v: Value = serde_json::from_str(t)
            .map_err(|e| LoadError::new(file, n, format!("not JSON: {e}")))?;
        schema::validate(&validator, &v).map_err(|e| LoadError::new(file, n, e))?;
        let Value::Object(obj) = v else {
            return Err(LoadError::new(file, n, "not an object"));
        };
        rows.push((n, obj));
    }
    Ok(rows)
}

/// A price-index feed: its header line and its items.
#[derive(Debug, Clone)]
pub struct PriceFeed {
    /// Where it was read from (path or URL), for the meta block.
    pub origin: String,
    /// The header object.
    pub header: Map<String, Value>,
    /// Items with their line numbers.
    pub items: Rows,
}

/// Parse a price feed (header line, then items).
pub fn parse_feed(
    origin: &str,
    text: &str,
    header_schema: &Value,
    item_schema: &Value,
) -> Result<PriceFeed, LoadError> {
    let header_validator =
        schema::compile(header_schema).map_err(|e| LoadError::new(origin, 0, e))?;
    let mut header = None;
    let mut body = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if header.is_none() && !t.is_empty() && !t.starts_with('#') {
            let v: Value = serde_json::from_str(t)
                .map_err(|e| LoadError::new(origin, i + 1, format!("header is not JSON: {e}")))?;
            schema::validate(&header_validator, &v)
                .map_err(|e| LoadError::new(origin, i + 1, format!("header: {e}")))?;
            header = v.as_object().cloned();
            body.push('\n');
            continue;
        }
        body.push_str(line);
        body.push('\n');
    }
    let header = header.ok_or_else(|| LoadError::new(origin, 0, "no header line"))?;
    let items = parse_rows(origin, &body, item_schema)?;
    let mut seen = HashSet::new();
    for (n, item) in &items {
        let sku = item["sku"].as_str().unwrap_or_default();
        if !seen.insert(sku.to_string()) {
            return Err(LoadError::new(origin, *n, format!("duplicate sku {sku:?}")));
        }
    }
    Ok(PriceFeed {
        origin: origin.to_string(),
        header,
        items,
    })
}

/// The records of every dataset, ready to serve: each record is a JSON object in canonical
/// order (what the API and the exports both write).
#[derive(Debug, Clone, Default)]
pub struct Records {
    /// Dataset name → records in serving order.
    pub by_dataset: BTreeMap<String, Vec<Map<String, Value>>>,
}

/// Load and cross-check the static datasets plus a price feed; derive the served records.
pub fn load_all(
    src: &Source,
    infos: &BTreeMap<String, DatasetInfo>,
    feed: &PriceFeed,
) -> Result<Records, LoadError> {
    let read_rows = |name: &str| -> Result<(String, Rows), LoadError> {
        let info = &infos[name];
        let (file, text) = src.read(&info.file)?;
        let rows = parse_rows(&file, &text, &info.schema)?;
        Ok((file, rows))
    };
    let (mfile, miners) = read_rows("miners")?;
    check_unique(&mfile, &miners, "slug")?;
    for (n, m) in &miners {
        let th = m["hashrate_ths"].as_f64().unwrap_or(0.0);
        let w = m["power_w"].as_f64().unwrap_or(0.0);
        let eff = m["efficiency_j_per_th"].as_f64().unwrap_or(0.0);
        let computed = w / th;
        if (computed - eff).abs() > eff * 0.03 {
            return Err(LoadError::new(
                &mfile,
                *n,
                format!(
                    "efficiency_j_per_th {eff} disagrees with power_w / hashrate_ths = {computed:.2} (more than 3 %)"
                ),
            ));
        }
    }
    let slugs: HashSet<String> = miners
        .iter()
        .map(|(_, m)| m["slug"].as_str().unwrap_or_default().to_string())
        .collect();

    let (pfile, profiles) = read_rows("power-profiles")?;
    for (n, p) in &profiles {
        let model = p["model_slug"].as_str().unwrap_or_default();
        if !slugs.contains(model) {
            return Err(LoadError::new(
                &pfile,
                *n,
                format!("model_slug {model:?} is not a miners record"),
            ));
        }
        check_source(&pfile, *n, p)?;
        if p["kind"] == "simulated" && p.get("measured_on").is_none() {
            return Err(LoadError::new(
                &pfile,
                *n,
                "a simulated point needs measured_on",
            ));
        }
    }
    let (efile, codes) = read_rows("error-codes")?;
    check_unique(&efile, &codes, "code")?;
    for (n, c) in &codes {
        check_source(&efile, *n, c)?;
        if let Some(band) = c["repair_cost_cad"].as_object()
            && band["min"].as_f64() > band["max"].as_f64()
        {
            return Err(LoadError::new(
                &efile,
                *n,
                "repair_cost_cad.min is above max",
            ));
        }
    }
    let (rfile, claims) = read_rows("reliability")?;
    check_unique(&rfile, &claims, "id")?;
    for (n, r) in &claims {
        for s in r["model_slugs"].as_array().into_iter().flatten() {
            let s = s.as_str().unwrap_or_default();
            if !slugs.contains(s) {
                return Err(LoadError::new(
                    &rfile,
                    *n,
                    format!("model_slugs: {s:?} is not a miners record"),
                ));
            }
        }
    }
    for (n, item) in &feed.items {
        if let Some(m) = item.get("model_slug").and_then(Value::as_str)
            && !slugs.contains(m)
        {
            return Err(LoadError::new(
                &feed.origin,
                *n,
                format!("model_slug {m:?} is not a miners record"),
            ));
        }
    }

    let mut out = Records::default();
    out.by_dataset.insert(
        "miners".into(),
        miners.iter().map(|(_, m)| miner_record(m, feed)).collect(),
    );
    let mut points: Vec<Map<String, Value>> = miners
        .iter()
        .map(|(_, m)| stock_point(m))
        .chain(profiles.iter().map(|(_, p)| profile_record(p)))
        .collect();
    points.sort_by(|a, b| {
        (
            a["model_slug"].as_str(),
            a["step"].as_i64(),
            a["profile"].as_str(),
        )
            .cmp(&(
                b["model_slug"].as_str(),
                b["step"].as_i64(),
                b["profile"].as_str(),
            ))
    });
    check_unique_records(&pfile, &points, "id")?;
    out.by_dataset.insert("power-profiles".into(), points);
    out.by_dataset.insert(
        "error-codes".into(),
        codes.into_iter().map(|(_, c)| c).collect(),
    );
    out.by_dataset.insert(
        "reliability".into(),
        claims.into_iter().map(|(_, c)| c).collect(),
    );
    out.by_dataset.insert(
        "price-index".into(),
        feed.items.iter().map(|(_, i)| i.clone()).collect(),
    );
    Ok(out)
}

fn check_unique(file: &str, rows: &Rows, key: &str) -> Result<(), LoadError> {
    let mut seen = HashSet::new();
    for (n, r) in rows {
        let k = r[key].as_str().unwrap_or_default();
        if !seen.insert(k.to_string()) {
            return Err(LoadError::new(file, *n, format!("duplicate {key} {k:?}")));
        }
    }
    Ok(())
}

fn check_unique_records(
    file: &str,
    recs: &[Map<String, Value>],
    key: &str,
) -> Result<(), LoadError> {
    let mut seen = HashSet::new();
    for r in recs {
        let k = r[key].as_str().unwrap_or_default();
        if !seen.insert(k.to_string()) {
            return Err(LoadError::new(file, 0, format!("duplicate {key} {k:?}")));
        }
    }
    Ok(())
}

fn check_source(file: &str, line: usize, row: &Map<String, Value>) -> Result<(), LoadError> {
    let src = &row["source"];
    if src.get("url").is_none() && src.get("path").is_none() {
        return Err(LoadError::new(
            file,
            line,
            "source needs a url or a repository path",
        ));
    }
    Ok(())
}

/// Round to `places` decimals (derived numbers are served rounded, never as float noise).
pub fn round(x: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (x * k).round() / k
}

/// Watts to BTU per hour (1 W = 3.412142 BTU/h).
pub fn btu_per_h(watt: f64) -> f64 {
    (watt * 3.412_142).round()
}

/// Home-mining score 0..=100 (svcOS's editorial formula, documented in docs/OPEN-DATA.md):
/// what circuit the model needs, minus plumbing for liquid cooling, plus efficiency.
pub fn home_score(watt: f64, j_per_th: f64, cooling: &str) -> i64 {
    let circuit = if watt <= 200.0 {
        90.0
    } else if watt <= 1440.0 {
        70.0
    } else if watt <= 2880.0 {
        45.0
    } else if watt <= 3840.0 {
        30.0
    } else {
        10.0
    };
    let plumbing = if cooling == "air" { 0.0 } else { 15.0 };
    let efficiency = (40.0 - j_per_th.min(40.0)).max(0.0) / 4.0;
    (circuit - plumbing + efficiency).clamp(0.0, 100.0).round() as i64
}

fn miner_record(m: &Map<String, Value>, feed: &PriceFeed) -> Map<String, Value> {
    let mut r = m.clone();
    let w = m["power_w"].as_f64().unwrap_or(0.0);
    let eff = m["efficiency_j_per_th"].as_f64().unwrap_or(0.0);
    let cooling = m["cooling"].as_str().unwrap_or("air");
    let slug = m["slug"].as_str().unwrap_or_default();
    // The linked product: the cheapest in-stock item of the feed for this model, else any item.
    let mut items: Vec<&Map<String, Value>> = feed
        .items
        .iter()
        .map(|(_, i)| i)
        .filter(|i| i.get("model_slug").and_then(Value::as_str) == Some(slug))
        .collect();
    items.sort_by(|a, b| {
        let rank = |i: &Map<String, Value>| {
            (
                i["stock_status"] != "in_stock",
                i["price_cad"].as_f64().unwrap_or(f64::MAX),
            )
        };
        rank(a)
            .partial_cmp(&rank(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let sample = feed.header.get("sample") == Some(&Value::Bool(true));
    // The feed's rows passed their schema, so its enums parse; a row that did not would have
    // stopped the load.
    let product = items.first().and_then(|i| {
        Some(Product {
            sku: i["sku"].as_str()?.to_string(),
            name: i["name"].as_str()?.to_string(),
            condition: serde_json::from_value(i["condition"].clone()).ok()?,
            price_cad: i["price_cad"].as_f64()?,
            stock_status: serde_json::from_value(i["stock_status"].clone()).ok()?,
            url: i["url"].as_str()?.to_string(),
            sample,
        })
    });
    let derived = MinerDerived {
        btu_per_h: btu_per_h(w) as i64,
        home_score: home_score(w, eff, cooling),
        status: product
            .as_ref()
            .map_or(ListingStatus::NotListed, |p| p.stock_status),
        product,
    };
    if let Ok(Value::Object(fields)) = serde_json::to_value(&derived) {
        r.extend(fields);
    }
    r
}

fn stock_point(m: &Map<String, Value>) -> Map<String, Value> {
    let slug = m["slug"].as_str().unwrap_or_default();
    let mut r = Map::new();
    r.insert("id".into(), json!(format!("{slug}-stock")));
    r.insert("model_slug".into(), json!(slug));
    r.insert("profile".into(), json!("stock"));
    r.insert("kind".into(), json!("published"));
    r.insert("step".into(), json!(0));
    r.insert("power_w".into(), m["power_w"].clone());
    r.insert("hashrate_ths".into(), m["hashrate_ths"].clone());
    r.insert(
        "efficiency_j_per_th".into(),
        m["efficiency_j_per_th"].clone(),
    );
    r.insert("voltage_domains".into(), json!([]));
    r.insert("source".into(), m["source"].clone());
    r
}

fn profile_record(p: &Map<String, Value>) -> Map<String, Value> {
    let mut r = p.clone();
    let slug = p["model_slug"].as_str().unwrap_or_default();
    let profile = p["profile"].as_str().unwrap_or_default();
    let w = p["power_w"].as_f64().unwrap_or(0.0);
    let th = p["hashrate_ths"].as_f64().unwrap_or(1.0);
    let derived = ProfileDerived {
        id: format!("{slug}-{profile}"),
        efficiency_j_per_th: round(w / th, 2),
    };
    if let Ok(Value::Object(fields)) = serde_json::to_value(&derived) {
        r.extend(fields);
    }
    r
}

/// Slugify a display name the way `reliability?model=` matches model names.
pub fn slugify(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if c == '+' {
            out.push_str("-plus");
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.replace("--", "-").trim_matches('-').to_string()
}

/// Read a feed from a local file (URL feeds are fetched by the caller).
pub fn read_feed_file(
    path: &Path,
    infos: &BTreeMap<String, DatasetInfo>,
) -> Result<PriceFeed, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError::new(&path.display().to_string(), 0, e.to_string()))?;
    feed_from_text(&path.display().to_string(), &text, infos)
}

/// Parse feed text against the price-index schemas of the manifest.
pub fn feed_from_text(
    origin: &str,
    text: &str,
    infos: &BTreeMap<String, DatasetInfo>,
) -> Result<PriceFeed, LoadError> {
    let info = &infos["price-index"];
    let header_schema = info.header_schema.clone().unwrap_or(Value::Bool(true));
    parse_feed(origin, text, &header_schema, &info.schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded() -> (Source, BTreeMap<String, DatasetInfo>, PriceFeed) {
        let src = Source::default();
        let infos = manifest(&src).unwrap();
        let (name, text) = src.read(&infos["price-index"].file).unwrap();
        let feed = feed_from_text(&name, &text, &infos).unwrap();
        (src, infos, feed)
    }

    #[test]
    fn embedded_datasets_load_and_meet_the_floor() {
        let (src, infos, feed) = embedded();
        let recs = load_all(&src, &infos, &feed).unwrap();
        let miners = &recs.by_dataset["miners"];
        assert!(miners.len() >= 30, "{}", miners.len());
        for fam in [
            "antminer-s9",
            "antminer-s21",
            "whatsminer-m30s",
            "whatsminer-m60",
            "avalon",
            "bitaxe",
        ] {
            assert!(
                miners
                    .iter()
                    .any(|m| m["slug"].as_str().unwrap().starts_with(fam)),
                "{fam}"
            );
        }
        for m in miners {
            assert!(m["source"]["url"].as_str().unwrap().starts_with("https://"));
        }
        assert!(feed.header["sample"] == true);
    }

    #[test]
    fn a_bad_row_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in EMBEDDED {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let file = dir.path().join("miners/miners.v1.jsonl");
        let text = std::fs::read_to_string(&file).unwrap();
        let bad = text.replacen("\"power_w\": 1323", "\"power_w\": -5", 1);
        std::fs::write(&file, bad).unwrap();
        let src = Source {
            dir: Some(dir.path().to_path_buf()),
        };
        let infos = manifest(&src).unwrap();
        let (name, ftext) = src.read(&infos["price-index"].file).unwrap();
        let feed = feed_from_text(&name, &ftext, &infos).unwrap();
        let e = load_all(&src, &infos, &feed).unwrap_err().to_string();
        assert!(e.contains("miners.v1.jsonl:4: $.power_w: -5 "), "{e}");
    }

    #[test]
    fn derived_numbers() {
        assert_eq!(btu_per_h(1323.0), 4514.0);
        assert_eq!(home_score(15.0, 25.0, "air"), 94);
        assert_eq!(home_score(3500.0, 17.5, "air"), 36);
        assert_eq!(home_score(5360.0, 16.0, "hydro"), 1);
        assert_eq!(slugify("Whatsminer M30S++"), "whatsminer-m30s-plus-plus");
        assert_eq!(
            slugify("Antminer S19k Pro / S19 XP"),
            "antminer-s19k-pro-s19-xp"
        );
    }
}
