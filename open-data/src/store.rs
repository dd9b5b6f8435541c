//! The SQLite store: the loaded datasets (each record as its canonical JSON text, the exact
//! bytes the API and the exports write) and the hashprice history.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::{Map, Value};

use crate::datasets::{DatasetInfo, PriceFeed, Records};

/// Store failures (SQLite or a record that no longer parses).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored JSON text does not parse (the file was edited by hand).
    #[error("stored record {0} is not JSON: {1}")]
    Corrupt(String, serde_json::Error),
}

/// Version and provenance of one stored dataset.
#[derive(Debug, Clone)]
pub struct StoredDataset {
    /// Data version from the manifest.
    pub version: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// When it was loaded into the store (Unix seconds).
    pub loaded_at: i64,
    /// File or URL it came from.
    pub origin: String,
    /// Records as canonical JSON text, in serving order.
    pub records: Vec<String>,
}

/// The stored price-feed header with the feed's origin.
pub type FeedHeader = (String, Map<String, Value>);

/// An open store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    /// Opened as a shared read-only snapshot: nothing is ever written (hashprice history
    /// stays in the instance's memory).
    read_only: bool,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS datasets (
    name TEXT PRIMARY KEY,
    version TEXT NOT NULL,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    loaded_at INTEGER NOT NULL,
    origin TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    dataset TEXT NOT NULL,
    ord INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (dataset, ord)
);
CREATE TABLE IF NOT EXISTS feed (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    origin TEXT NOT NULL,
    header TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hashprice (
    refreshed_at INTEGER PRIMARY KEY,
    json TEXT NOT NULL
);
";

impl Store {
    /// Open (creating if missing) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        // WAL lets `export` read while `serve` writes a hashprice refresh.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Store {
            conn,
            read_only: false,
        })
    }

    /// Open a sealed snapshot ([`Self::seal`]) read-only and immutable: SQLite takes no lock
    /// and writes no journal, WAL or shm file, so any number of instances (on one machine or
    /// over a read-only network mount) can share the one file.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        // A file: URI so `immutable=1` can be passed; the url crate escapes the path.
        let uri = url::Url::from_file_path(&abs)
            .map(|u| format!("{u}?mode=ro&immutable=1"))
            .map_err(|()| StoreError::Sqlite(rusqlite::Error::InvalidPath(abs.clone())))?;
        let conn = Connection::open_with_flags(
            uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        Ok(Store {
            conn,
            read_only: true,
        })
    }

    /// Whether this store was opened as a read-only snapshot.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Make the file a self-contained snapshot: everything checkpointed into the main file and
    /// the journal mode set back to DELETE, so a reader needs no `-wal` or `-shm` beside it.
    pub fn seal(&self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        self.conn
            .query_row("PRAGMA journal_mode=DELETE", [], |_| Ok(()))?;
        Ok(())
    }

    /// Whether datasets were ever loaded into this store.
    pub fn is_loaded(&self) -> Result<bool, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM datasets", [], |r| r.get(0))?;
        Ok(n > 0)
    }

    /// Replace every dataset's records in one transaction.
    pub fn replace_all(
        &mut self,
        infos: &BTreeMap<String, DatasetInfo>,
        records: &Records,
        feed: &PriceFeed,
        static_origin: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM records", [])?;
        tx.execute("DELETE FROM datasets", [])?;
        for (name, recs) in &records.by_dataset {
            let info = &infos[name];
            let origin = if name == "price-index" {
                feed.origin.clone()
            } else {
                format!("{static_origin}/{}", info.file)
            };
            tx.execute(
                "INSERT INTO datasets (name, version, title, description, loaded_at, origin) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![name, info.version, info.title, info.description, now, origin],
            )?;
            let mut stmt =
                tx.prepare("INSERT INTO records (dataset, ord, json) VALUES (?1, ?2, ?3)")?;
            for (i, r) in recs.iter().enumerate() {
                let text = serde_json::to_string(r).unwrap_or_default();
                stmt.execute(params![name, i as i64, text])?;
            }
        }
        let header = serde_json::to_string(&feed.header).unwrap_or_default();
        tx.execute(
            "INSERT INTO feed (id, origin, header) VALUES (1, ?1, ?2) ON CONFLICT(id) DO UPDATE SET origin = excluded.origin, header = excluded.header",
            params![feed.origin, header],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Every stored dataset.
    pub fn datasets(&self) -> Result<BTreeMap<String, StoredDataset>, StoreError> {
        let mut out = BTreeMap::new();
        let mut stmt = self
            .conn
            .prepare("SELECT name, version, title, description, loaded_at, origin FROM datasets")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                StoredDataset {
                    version: r.get(1)?,
                    title: r.get(2)?,
                    description: r.get(3)?,
                    loaded_at: r.get(4)?,
                    origin: r.get(5)?,
                    records: Vec::new(),
                },
            ))
        })?;
        for row in rows {
            let (name, ds) = row?;
            out.insert(name, ds);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT dataset, json FROM records ORDER BY dataset, ord")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (name, json) = row?;
            if let Some(ds) = out.get_mut(&name) {
                ds.records.push(json);
            }
        }
        Ok(out)
    }

    /// The stored feed header and origin.
    pub fn feed(&self) -> Result<Option<FeedHeader>, StoreError> {
        let row: Option<(String, String)> = self
            .conn
            .query_row("SELECT origin, header FROM feed WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        match row {
            None => Ok(None),
            Some((origin, header)) => {
                let v: Value = serde_json::from_str(&header)
                    .map_err(|e| StoreError::Corrupt("feed".into(), e))?;
                Ok(Some((origin, v.as_object().cloned().unwrap_or_default())))
            }
        }
    }

    /// Record one successful hashprice refresh.
    pub fn insert_hashprice(&self, refreshed_at: i64, record: &str) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        self.conn.execute(
            "INSERT OR REPLACE INTO hashprice (refreshed_at, json) VALUES (?1, ?2)",
            params![refreshed_at, record],
        )?;
        Ok(())
    }

    /// The newest `limit` hashprice records, newest first.
    pub fn hashprice_history(&self, limit: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT refreshed_at, json FROM hashprice ORDER BY refreshed_at DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![limit], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many hashprice records are stored.
    pub fn hashprice_count(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM hashprice", [], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datasets::{Source, feed_from_text, load_all, manifest};

    #[test]
    fn round_trip_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let src = Source::default();
        let infos = manifest(&src).unwrap();
        let (name, text) = src.read(&infos["price-index"].file).unwrap();
        let feed = feed_from_text(&name, &text, &infos).unwrap();
        let recs = load_all(&src, &infos, &feed).unwrap();
        let mut store = Store::open(&dir.path().join("db.sqlite")).unwrap();
        assert!(!store.is_loaded().unwrap());
        store
            .replace_all(&infos, &recs, &feed, "embedded", 1_700_000_000)
            .unwrap();
        assert!(store.is_loaded().unwrap());
        let ds = store.datasets().unwrap();
        let miners = &ds["miners"];
        assert_eq!(miners.records.len(), recs.by_dataset["miners"].len());
        assert_eq!(
            miners.records[0],
            serde_json::to_string(&recs.by_dataset["miners"][0]).unwrap()
        );
        store.insert_hashprice(1, "{\"a\":1}").unwrap();
        store.insert_hashprice(2, "{\"a\":2}").unwrap();
        assert_eq!(
            store.hashprice_history(1).unwrap(),
            vec![(2, "{\"a\":2}".to_string())]
        );
        assert_eq!(store.hashprice_count().unwrap(), 2);
        store.seal().unwrap();
        drop(store);
        assert!(!dir.path().join("db.sqlite-wal").exists());
        let ro = Store::open_read_only(&dir.path().join("db.sqlite")).unwrap();
        assert!(ro.is_read_only() && ro.is_loaded().unwrap());
        assert_eq!(ro.datasets().unwrap()["miners"].records, miners.records);
        // Nothing is written, and nothing fails either.
        ro.insert_hashprice(3, "{}").unwrap();
        assert_eq!(ro.hashprice_count().unwrap(), 2);
        assert!(!dir.path().join("db.sqlite-wal").exists());
        assert!(!dir.path().join("db.sqlite-journal").exists());
    }
}
