//! `export --out DIR`: static JSON and CSV mirrors of every dataset, from the same store and
//! the same stored record text the API serves (so the records are byte-identical).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::registry::{LICENSE, LICENSE_URL};
use crate::store::Store;
use crate::time::{now_unix, rfc3339};

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
    /// A stored record does not parse.
    #[error("stored record is not a JSON object: {0}")]
    Corrupt(String),
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
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

/// CSV of records: nested objects become dotted columns, arrays JSON text, null empty.
pub fn to_csv(records: &[Map<String, Value>]) -> String {
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
    let mut out = columns
        .iter()
        .map(|c| csv_cell(c))
        .collect::<Vec<_>>()
        .join(",");
    out.push_str("\r\n");
    for cells in rows {
        let line: Vec<String> = columns
            .iter()
            .map(|c| {
                cells
                    .iter()
                    .find(|(k, _)| k == c)
                    .map_or(String::new(), |(_, v)| csv_cell(v))
            })
            .collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}

fn write(dir: &Path, name: &str, data: &[u8]) -> Result<(), ExportError> {
    let path = dir.join(name);
    svcos_common::fsutil::atomic_write(&path, data, 0o644).map_err(|source| ExportError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn mirror_json(
    dataset: &str,
    title: &str,
    version: &str,
    generated_at: &str,
    raws: &[String],
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

fn parsed(raws: &[String]) -> Result<Vec<Map<String, Value>>, ExportError> {
    raws.iter()
        .map(|r| {
            serde_json::from_str::<Value>(r)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .ok_or_else(|| ExportError::Corrupt(r.chars().take(40).collect()))
        })
        .collect()
}

/// Write `<dataset>.json` and `<dataset>.csv` for every dataset plus the hashprice history.
/// Returns the file names written.
pub fn export(store: &Store, out: &Path) -> Result<Vec<String>, ExportError> {
    std::fs::create_dir_all(out).map_err(|source| ExportError::Io {
        path: out.display().to_string(),
        source,
    })?;
    let mut written = Vec::new();
    for (name, ds) in store.datasets()? {
        let body = mirror_json(
            &name,
            &ds.title,
            &ds.version,
            &rfc3339(ds.loaded_at),
            &ds.records,
        );
        write(out, &format!("{name}.json"), body.as_bytes())?;
        write(
            out,
            &format!("{name}.csv"),
            to_csv(&parsed(&ds.records)?).as_bytes(),
        )?;
        written.push(format!("{name}.json"));
        written.push(format!("{name}.csv"));
    }
    let history: Vec<String> = store
        .hashprice_history(i64::MAX)?
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let body = mirror_json(
        "hashprice-history",
        "Hashprice history",
        "live",
        &rfc3339(now_unix()),
        &history,
    );
    write(out, "hashprice-history.json", body.as_bytes())?;
    write(
        out,
        "hashprice-history.csv",
        to_csv(&parsed(&history)?).as_bytes(),
    )?;
    written.push("hashprice-history.json".into());
    written.push("hashprice-history.csv".into());
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
        let csv = to_csv(&recs);
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert_eq!(lines[0], "a,l,n,o.b,s,extra");
        assert_eq!(lines[1], "1,\"[1,2]\",,\"q\"\"q\",\"x,y\",");
        assert_eq!(lines[2], "2,,,,,true");
    }
}
