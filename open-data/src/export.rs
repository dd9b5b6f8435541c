//! `export --out DIR`: the publisher's static site, written from the same snapshot and the same
//! code the server answers `/data/`, `/data/{file}`, `/data/api/`, `/llms.txt` and
//! `/methodology` with ([`site_files`]), so a CDN serving the directory and the service answer
//! byte-identical files. Records are the stored record text (byte-identical to the API's).
//!
//! Layout of `DIR` (the URL space of the site): `data/index.html`, `data/<dataset>.json`,
//! `data/<dataset>.csv`, `data/api/index.html`, `llms.txt`, `methodology/index.html`.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::registry::{Kind, LICENSE, LICENSE_URL, MIRROR_FILES, ROUTES};
use crate::render::{Record, Snapshot};

/// Export failures.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Store.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Writing a file.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        Value::Null => out.push((prefix.to_string(), String::new())),
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        Value::Array(_) => out.push((prefix.to_string(), v.to_string())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// CSV of records: nested objects become dotted columns, arrays JSON text, null empty; records
/// end in CRLF (RFC 4180). Without records the header is `empty_header`, so a reader such as
/// pandas still finds the columns (no header at all if that is empty too).
pub fn to_csv(records: &[Map<String, Value>], empty_header: &[String]) -> String {
    let mut columns: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<(String, String)>> = Vec::new();
    for r in records {
        let mut cells = Vec::new();
        flatten("", &Value::Object(r.clone()), &mut cells);
        for (k, _) in &cells {
            if !columns.contains(k) {
                columns.push(k.clone());
            }
        }
        rows.push(cells);
    }
    if records.is_empty() {
        columns = empty_header.to_vec();
    }
    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    // Writing into a Vec cannot fail; a record is always as long as the header.
    if !columns.is_empty() {
        let _ = out.write_record(&columns);
    }
    for cells in rows {
        let _ = out.write_record(columns.iter().map(|c| {
            cells
                .iter()
                .find(|(k, _)| k == c)
                .map_or("", |(_, v)| v.as_str())
        }));
    }
    let bytes = out.into_inner().unwrap_or_default();
    // Every cell came from a `&str`: the bytes are UTF-8.
    String::from_utf8(bytes).unwrap_or_default()
}

/// The columns of a hashprice record, for the header of an empty history.
fn hashprice_columns() -> Vec<String> {
    let chain = crate::hashprice::ChainState {
        height: 0,
        difficulty: 1.0,
        avg_fees_sat: 0.0,
        fee_blocks: 0,
    };
    let price = crate::hashprice::Price { usd: 0.0, cad: 0.0 };
    let sample = crate::hashprice::compute(&chain, price, 0, "", "");
    let mut cells = Vec::new();
    flatten(
        "",
        &serde_json::to_value(&sample).unwrap_or_default(),
        &mut cells,
    );
    cells.into_iter().map(|(k, _)| k).collect()
}

fn write(dir: &Path, name: &str, data: &[u8]) -> Result<(), ExportError> {
    let path = dir.join(name);
    let io = |source| ExportError::Io {
        path: path.display().to_string(),
        source,
    };
    let parent = path.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(io)?;
    // A temp file beside the target, then a rename: a reader (or the web server publishing the
    // directory) sees the old file or the new one, never half of one.
    let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(io)?;
    std::io::Write::write_all(&mut tmp, data).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(io)?;
    tmp.persist(&path).map_err(|e| io(e.error))?;
    Ok(())
}

fn mirror_json(
    dataset: &str,
    title: &str,
    version: &str,
    generated_at: &str,
    raws: &[&str],
) -> String {
    let meta = json!({
        "schema": format!("svcos.opendata.mirror.{dataset}.v1"),
        "title": title,
        "description": format!("Static mirror of /v1/{dataset}: every record, byte-identical to the API's."),
        "license": LICENSE,
        "license_url": LICENSE_URL,
        "source": "svcOS Open Mining Data API; every record carries its own source",
        "generated_at": generated_at,
        "dataset": dataset,
        "dataset_version": version,
        "count": raws.len(),
    });
    let mut out = format!("{{\"meta\":{meta},\"records\":[");
    out.push_str(&raws.join(","));
    out.push_str("]}\n");
    out
}

/// A mirror file by name (one of [`MIRROR_FILES`]): (content type, bytes); `None` for any
/// other name or a dataset the snapshot lacks.
pub fn mirror_file(snap: &Snapshot, name: &str) -> Option<(&'static str, Vec<u8>)> {
    if !MIRROR_FILES.contains(&name) {
        return None;
    }
    let (dataset, ext) = name.rsplit_once('.')?;
    if dataset == "hashprice-history" {
        let raws: Vec<&str> = snap.history.iter().map(String::as_str).collect();
        // The newest refresh dates the file, so every instance serving one snapshot writes
        // the same bytes (the request time would give each its own ETag).
        let generated = snap
            .history
            .first()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .and_then(|v| v["refreshed_at"].as_str().map(str::to_string))
            .unwrap_or_else(|| crate::render::newest_dataset_time(snap));
        return Some(match ext {
            "json" => (
                "application/json",
                mirror_json(dataset, "Hashprice history", "live", &generated, &raws).into_bytes(),
            ),
            _ => {
                let parsed: Vec<Map<String, Value>> = raws
                    .iter()
                    .filter_map(|r| serde_json::from_str::<Value>(r).ok())
                    .filter_map(|v| v.as_object().cloned())
                    .collect();
                (
                    "text/csv; charset=utf-8",
                    to_csv(&parsed, &hashprice_columns()).into_bytes(),
                )
            }
        });
    }
    let ds = snap.datasets.get(dataset)?;
    Some(match ext {
        "json" => {
            let raws: Vec<&str> = ds.records.iter().map(|r| r.raw.as_str()).collect();
            (
                "application/json",
                mirror_json(dataset, &ds.title, &ds.version, &ds.generated_at, &raws).into_bytes(),
            )
        }
        _ => {
            let values: Vec<Map<String, Value>> = ds
                .records
                .iter()
                .map(|r: &Record| r.value.clone())
                .collect();
            ("text/csv; charset=utf-8", to_csv(&values, &[]).into_bytes())
        }
    })
}

/// Every file of the static site: (path relative to the site root, content type, bytes).
/// The server answers the same paths from the same function's pieces.
pub fn site_files(snap: &Snapshot) -> Vec<(String, &'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for name in MIRROR_FILES {
        if let Some((ct, body)) = mirror_file(snap, name) {
            out.push((format!("data/{name}"), ct, body));
        }
    }
    for route in ROUTES
        .iter()
        .filter(|r| r.kind.is_site() && r.kind != Kind::DataFile)
    {
        let r = crate::render::render(route, snap, &Default::default(), &Default::default(), None);
        let rel = route.path.trim_start_matches('/');
        let rel = if rel.ends_with('/') || !rel.contains('.') {
            format!("{}/index.html", rel.trim_end_matches('/'))
        } else {
            rel.to_string()
        };
        out.push((rel, r.content_type, r.body));
    }
    out
}

/// Write the static site under `out`; returns the paths written (relative to `out`).
pub fn export(snap: &Snapshot, out: &Path) -> Result<Vec<String>, ExportError> {
    std::fs::create_dir_all(out).map_err(|source| ExportError::Io {
        path: out.display().to_string(),
        source,
    })?;
    let mut written = Vec::new();
    for (rel, _, body) in site_files(snap) {
        write(out, &rel, &body)?;
        written.push(rel);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_flattens_and_quotes() {
        let recs: Vec<Map<String, Value>> = vec![
            json!({"a": 1, "s": "x,y", "o": {"b": "q\"q"}, "l": [1, 2], "n": null})
                .as_object()
                .cloned()
                .unwrap(),
            json!({"a": 2, "extra": true}).as_object().cloned().unwrap(),
        ];
        let csv = to_csv(&recs, &[]);
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert_eq!(lines[0], "a,l,n,o.b,s,extra");
        assert_eq!(lines[1], "1,\"[1,2]\",,\"q\"\"q\",\"x,y\",");
        assert_eq!(lines[2], "2,,,,,true");
        assert_eq!(lines[3], "");
        assert_eq!(lines.len(), 4);
        // A multi-line cell is quoted whole.
        let recs = vec![json!({"a": "1\n2"}).as_object().cloned().unwrap()];
        assert_eq!(to_csv(&recs, &[]), "a\r\n\"1\n2\"\r\n");
    }

    #[test]
    fn an_empty_history_still_has_its_header() {
        let header = hashprice_columns();
        assert!(header.contains(&"network.height".to_string()), "{header:?}");
        assert!(header.contains(&"usd.per_th_day.fee_inclusive".to_string()));
        let csv = to_csv(&[], &header);
        assert_eq!(csv, format!("{}\r\n", header.join(",")));
        assert_eq!(to_csv(&[], &[]), "");
    }
}
