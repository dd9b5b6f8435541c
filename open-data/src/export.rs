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
    flatten("", &sample, &mut cells);
    cells.into_iter().map(|(k, _)| k).collect()
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
            to_csv(&parsed(&ds.records)?, &[]).as_bytes(),
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
        to_csv(&parsed(&history)?, &hashprice_columns()).as_bytes(),
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
