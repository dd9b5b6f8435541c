//! The on-disk half of the history: one SQLite file (bundled SQLite, WAL journal) with a 1 min
//! table kept 30 days, a 1 h table kept 2 years, the audit log kept to its newest
//! [`AUDIT_CAP`] rows and the solar/off-grid followers' decisions (the verification history)
//! kept to their newest [`DECISION_CAP`].
//!
//! Written for flash: the caller hands over minute points and audit entries in batches, and
//! each batch is one transaction (insert, roll the touched hours up, prune), so the card sees a
//! few page writes every few minutes instead of one per sample. `synchronous=NORMAL` in WAL mode
//! keeps the file consistent across power loss (a crash loses at most the last batch, never the
//! file), and the log is checkpointed after each batch so it does not grow. Rows are small and
//! retention is by time, so the file size is bounded: at most [`MINUTE_ROWS_MAX`] +
//! [`HOUR_ROWS_MAX`] + [`AUDIT_CAP`] + [`DECISION_CAP`] rows, kept under [`DISK_BOUND_BYTES`] (freed pages are
//! reused, and an incremental vacuum gives back what a prune freed).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Transaction, params};

/// One minute in ms.
pub const MINUTE_MS: i64 = 60_000;
/// One hour in ms.
pub const HOUR_MS: i64 = 3_600_000;
/// How far back 1 min points reach.
pub const MINUTE_RETENTION_MS: i64 = 30 * 24 * HOUR_MS;
/// How far back 1 h points reach.
pub const HOUR_RETENTION_MS: i64 = 730 * 24 * HOUR_MS;
/// Audit entries kept.
pub const AUDIT_CAP: i64 = 10_000;
/// Follower decisions kept: with the shortest poll interval (5 s) about 14 hours, with the
/// default (30 s) about 3.5 days.
pub const DECISION_CAP: i64 = 10_000;
/// Most minute rows the retention allows.
pub const MINUTE_ROWS_MAX: i64 = MINUTE_RETENTION_MS / MINUTE_MS;
/// Most hour rows the retention allows.
pub const HOUR_ROWS_MAX: i64 = HOUR_RETENTION_MS / HOUR_MS;
/// The size the file (with its log) stays under: the rows above take about 9 MB.
pub const DISK_BOUND_BYTES: u64 = 16 * 1024 * 1024;

/// Errors of the store, with the file they concern.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused.
    #[error("history store {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file opened but is not a sound database.
    #[error("history store {path} is damaged: {message}")]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What the check found.
        message: String,
    },
}

/// One point of history (an aggregate for minute and hour rows).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Point {
    /// Start of the interval (or snapshot time), Unix ms.
    pub t_ms: i64,
    /// `svcos.hwagent.v1.MiningState` at the end.
    pub state: i32,
    /// Mean 1 min hashrate, GH/s.
    pub ghs_1m: f64,
    /// Mean 5 s hashrate, GH/s.
    pub ghs_5s: f64,
    /// Mean input power, W.
    pub power_watt: f64,
    /// Hottest reading, C.
    pub temp_max_c: f64,
    /// Accepted shares at the end; `None` while stratum-agent was down.
    pub accepted: Option<u64>,
    /// Rejected shares at the end.
    pub rejected: Option<u64>,
    /// Stale shares at the end.
    pub stale: Option<u64>,
    /// Active pool index at the end; -1 = none.
    pub active_pool: i32,
    /// Snapshots folded in.
    pub samples: u32,
}

/// One write through the API.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Audit {
    /// Unix ms.
    pub timestamp_ms: i64,
    /// HTTP method.
    pub method: String,
    /// Route path.
    pub path: String,
    /// HTTP status.
    pub status: u32,
    /// Session id; empty for open routes.
    pub session_id: String,
}

/// One follower decision as stored: its time, which follower made it, and the entry as the
/// power service serialised it (the power service owns that shape; the store only keeps it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Unix ms.
    pub t_ms: i64,
    /// `solar` or `offgrid`.
    pub mode: String,
    /// The entry, JSON.
    pub json: String,
}

/// Which table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// 1 min points.
    Minute,
    /// 1 h points.
    Hour,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Minute => "minute",
            Table::Hour => "hour",
        }
    }
}

/// Extent and size, for operators and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    /// File plus log, bytes.
    pub disk_bytes: u64,
    /// Minute rows.
    pub minute_rows: u64,
    /// Hour rows.
    pub hour_rows: u64,
    /// Audit rows.
    pub audit_rows: u64,
    /// Follower decision rows.
    pub decision_rows: u64,
    /// Oldest and newest minute point (0 = none).
    pub minute_span: (i64, i64),
    /// Oldest and newest hour point (0 = none).
    pub hour_span: (i64, i64),
}

/// The SQLite file.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const POINT_COLUMNS: &str = "t_ms, state, ghs_1m, ghs_5s, power_watt, temp_max_c, accepted, rejected, stale, active_pool, samples";

impl Store {
    /// Open (or create) `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        // auto_vacuum must be chosen before the first table exists; it is a no-op after.
        // The page cache is capped at 256 KiB (SQLite's default is 2 MiB per connection): the
        // queries walk one table's recent rows by primary key, and a month of minute points
        // filling a 2 MiB cache would be the tuner's largest private memory.
        conn.execute_batch(
            "PRAGMA auto_vacuum = INCREMENTAL;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA cache_size = -256;",
        )
        .map_err(err)?;
        let mut tables = String::new();
        for t in ["minute", "hour"] {
            tables.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                    t_ms INTEGER PRIMARY KEY, state INTEGER NOT NULL, ghs_1m REAL NOT NULL,
                    ghs_5s REAL NOT NULL, power_watt REAL NOT NULL, temp_max_c REAL NOT NULL,
                    accepted INTEGER, rejected INTEGER, stale INTEGER,
                    active_pool INTEGER NOT NULL, samples INTEGER NOT NULL) WITHOUT ROWID;"
            ));
        }
        tables.push_str(
            "CREATE TABLE IF NOT EXISTS audit (
                id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp_ms INTEGER NOT NULL,
                method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL,
                session_id TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS decisions (
                id INTEGER PRIMARY KEY AUTOINCREMENT, t_ms INTEGER NOT NULL,
                mode TEXT NOT NULL, entry TEXT NOT NULL);",
        );
        conn.execute_batch(&tables).map_err(err)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Write one batch in one transaction: minute points (a point for a minute already stored
    /// replaces it), the hours they touch rolled up again, audit entries and follower
    /// decisions, then prune everything past its retention relative to `now_ms`, and checkpoint
    /// the log.
    pub fn write_batch(
        &mut self,
        minutes: &[Point],
        audit: &[Audit],
        decisions: &[Decision],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let r = (|| {
            let tx = self.conn.transaction()?;
            insert_points(&tx, Table::Minute, minutes)?;
            let mut hours: Vec<i64> = minutes
                .iter()
                .map(|p| p.t_ms.div_euclid(HOUR_MS) * HOUR_MS)
                .collect();
            hours.dedup();
            for h in hours {
                roll_up_hour(&tx, h)?;
            }
            {
                let mut st = tx.prepare_cached(
                    "INSERT INTO audit (timestamp_ms, method, path, status, session_id)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for a in audit {
                    st.execute(params![
                        a.timestamp_ms,
                        a.method,
                        a.path,
                        a.status,
                        a.session_id
                    ])?;
                }
            }
            {
                let mut st = tx.prepare_cached(
                    "INSERT INTO decisions (t_ms, mode, entry) VALUES (?1, ?2, ?3)",
                )?;
                for d in decisions {
                    st.execute(params![d.t_ms, d.mode, d.json])?;
                }
            }
            tx.execute(
                "DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?1",
                [DECISION_CAP],
            )?;
            tx.execute(
                "DELETE FROM minute WHERE t_ms < ?1",
                [now_ms - MINUTE_RETENTION_MS],
            )?;
            tx.execute(
                "DELETE FROM hour WHERE t_ms < ?1",
                [now_ms - HOUR_RETENTION_MS],
            )?;
            tx.execute(
                "DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - ?1",
                [AUDIT_CAP],
            )?;
            tx.commit()?;
            self.conn.execute_batch("PRAGMA incremental_vacuum;")?;
            // TRUNCATE: the log shrinks back to nothing once its pages are in the file.
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })();
        r.map_err(|e| self.err(e))
    }

    /// Points of a table within `[from_ms, to_ms]` (0 = unbounded), oldest first; with a
    /// `limit`, the newest `limit` of them.
    pub fn points(
        &self,
        table: Table,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<Point>, StoreError> {
        let to = if to_ms <= 0 { i64::MAX } else { to_ms };
        let limit = if limit == 0 { -1 } else { i64::from(limit) };
        let sql = format!(
            "SELECT {POINT_COLUMNS} FROM {} WHERE t_ms >= ?1 AND t_ms <= ?2
             ORDER BY t_ms DESC LIMIT ?3",
            table.name()
        );
        let r = (|| {
            let mut st = self.conn.prepare_cached(&sql)?;
            let rows = st.query_map(params![from_ms, to, limit], read_point)?;
            let mut v = rows.collect::<Result<Vec<_>, _>>()?;
            v.reverse();
            Ok(v)
        })();
        r.map_err(|e| self.err(e))
    }

    /// The newest `limit` audit entries, oldest first.
    pub fn audit(&self, limit: u32) -> Result<Vec<Audit>, StoreError> {
        let r = (|| {
            let mut st = self.conn.prepare_cached(
                "SELECT timestamp_ms, method, path, status, session_id FROM audit
                 ORDER BY id DESC LIMIT ?1",
            )?;
            let rows = st.query_map([i64::from(limit)], |r| {
                Ok(Audit {
                    timestamp_ms: r.get(0)?,
                    method: r.get(1)?,
                    path: r.get(2)?,
                    status: r.get(3)?,
                    session_id: r.get(4)?,
                })
            })?;
            let mut v = rows.collect::<Result<Vec<_>, _>>()?;
            v.reverse();
            Ok(v)
        })();
        r.map_err(|e| self.err(e))
    }

    /// The newest `limit` follower decisions (of one follower, or of both), oldest first.
    pub fn decisions(&self, mode: Option<&str>, limit: u32) -> Result<Vec<Decision>, StoreError> {
        let r = (|| {
            let mut st = self.conn.prepare_cached(
                "SELECT t_ms, mode, entry FROM decisions WHERE ?1 IS NULL OR mode = ?1
                 ORDER BY id DESC LIMIT ?2",
            )?;
            let rows = st.query_map(params![mode, i64::from(limit)], |r| {
                Ok(Decision {
                    t_ms: r.get(0)?,
                    mode: r.get(1)?,
                    json: r.get(2)?,
                })
            })?;
            let mut v = rows.collect::<Result<Vec<_>, _>>()?;
            v.reverse();
            Ok(v)
        })();
        r.map_err(|e| self.err(e))
    }

    /// Size and extent.
    pub fn info(&self) -> Result<Info, StoreError> {
        let r = (|| {
            let count = |sql: &str| -> rusqlite::Result<u64> {
                self.conn
                    .query_row(sql, [], |r| r.get::<_, i64>(0).map(|n| n as u64))
            };
            let span = |t: &str| -> rusqlite::Result<(i64, i64)> {
                self.conn.query_row(
                    &format!("SELECT COALESCE(MIN(t_ms), 0), COALESCE(MAX(t_ms), 0) FROM {t}"),
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
            };
            Ok(Info {
                disk_bytes: disk_bytes(&self.path),
                minute_rows: count("SELECT COUNT(*) FROM minute")?,
                hour_rows: count("SELECT COUNT(*) FROM hour")?,
                audit_rows: count("SELECT COUNT(*) FROM audit")?,
                decision_rows: count("SELECT COUNT(*) FROM decisions")?,
                minute_span: span("minute")?,
                hour_span: span("hour")?,
            })
        })();
        r.map_err(|e| self.err(e))
    }

    /// The newest minute point, to continue counters after a restart.
    /// SQLite's quick structural check of an existing file (every page read once, no index
    /// cross-check), on a read-only connection so a damaged file is not written to before it
    /// is moved aside: a torn or overwritten file is found when the tuner starts rather than at
    /// a later write.
    pub fn check_file(path: &Path) -> Result<(), StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(err)?;
        let verdict: String = conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(err)?;
        if verdict == "ok" {
            Ok(())
        } else {
            Err(StoreError::Damaged {
                path: path.to_path_buf(),
                message: verdict,
            })
        }
    }

    pub fn last_minute(&self) -> Result<Option<Point>, StoreError> {
        let sql = format!("SELECT {POINT_COLUMNS} FROM minute ORDER BY t_ms DESC LIMIT 1");
        self.conn
            .query_row(&sql, [], read_point)
            .optional()
            .map_err(|e| self.err(e))
    }
}

/// The database file plus its write-ahead log and shared-memory index, bytes.
pub fn disk_bytes(path: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(sibling(path, suffix)).ok())
        .map(|m| m.len())
        .sum()
}

/// The database's companion file with `suffix` (`-wal`, `-shm`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn read_point(r: &rusqlite::Row<'_>) -> rusqlite::Result<Point> {
    let counter = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(r.get::<_, Option<i64>>(i)?.map(|n| n as u64))
    };
    Ok(Point {
        t_ms: r.get(0)?,
        state: r.get(1)?,
        ghs_1m: r.get(2)?,
        ghs_5s: r.get(3)?,
        power_watt: r.get(4)?,
        temp_max_c: r.get(5)?,
        accepted: counter(6)?,
        rejected: counter(7)?,
        stale: counter(8)?,
        active_pool: r.get(9)?,
        samples: r.get(10)?,
    })
}

fn insert_points(tx: &Transaction<'_>, table: Table, points: &[Point]) -> rusqlite::Result<()> {
    let mut st = tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {} ({POINT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        table.name()
    ))?;
    for p in points {
        st.execute(params![
            p.t_ms,
            p.state,
            p.ghs_1m,
            p.ghs_5s,
            p.power_watt,
            p.temp_max_c,
            p.accepted.map(|n| n as i64),
            p.rejected.map(|n| n as i64),
            p.stale.map(|n| n as i64),
            p.active_pool,
            p.samples,
        ])?;
    }
    Ok(())
}

/// The hour point of `hour_ms` from its minute points: sample-weighted means, the hottest
/// temperature, the last state, counters and pool.
fn roll_up_hour(tx: &Transaction<'_>, hour_ms: i64) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO hour (t_ms, state, ghs_1m, ghs_5s, power_watt, temp_max_c,
                                      accepted, rejected, stale, active_pool, samples)
         SELECT ?1, last.state,
                SUM(m.ghs_1m * m.samples) / SUM(m.samples), SUM(m.ghs_5s * m.samples) / SUM(m.samples),
                SUM(m.power_watt * m.samples) / SUM(m.samples), MAX(m.temp_max_c),
                last.accepted, last.rejected, last.stale, last.active_pool, SUM(m.samples)
         FROM minute m,
              (SELECT state, accepted, rejected, stale, active_pool FROM minute
               WHERE t_ms >= ?1 AND t_ms < ?2 ORDER BY t_ms DESC LIMIT 1) last
         WHERE m.t_ms >= ?1 AND m.t_ms < ?2 AND m.samples > 0
         HAVING COUNT(*) > 0",
        params![hour_ms, hour_ms + HOUR_MS],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_ms: i64, w: f64, samples: u32) -> Point {
        Point {
            t_ms,
            state: 3,
            ghs_1m: 1000.0,
            ghs_5s: 1000.0,
            power_watt: w,
            temp_max_c: w / 20.0,
            accepted: Some((t_ms / MINUTE_MS) as u64),
            rejected: Some(0),
            stale: None,
            active_pool: 0,
            samples,
        }
    }

    #[test]
    fn minutes_roll_up_into_weighted_hours_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        let mut s = Store::open(&path).unwrap();
        let h0 = 100 * HOUR_MS;
        let batch = [
            point(h0, 1000.0, 60),
            point(h0 + MINUTE_MS, 1300.0, 30),
            point(h0 + HOUR_MS, 500.0, 60),
        ];
        s.write_batch(&batch, &[], &[], h0 + HOUR_MS).unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        let m = s.points(Table::Minute, 0, 0, 0).unwrap();
        assert_eq!(m, batch);
        let h = s.points(Table::Hour, 0, 0, 0).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].t_ms, h0);
        assert!(
            (h[0].power_watt - 1100.0).abs() < 1e-9,
            "{}",
            h[0].power_watt
        );
        assert_eq!(h[0].temp_max_c, 65.0);
        assert_eq!(
            h[0].accepted, batch[1].accepted,
            "counters of the last minute"
        );
        assert_eq!(h[0].samples, 90);
        // Limit keeps the newest, oldest first; a range bounds both ends.
        let last = s.points(Table::Minute, 0, 0, 2).unwrap();
        assert_eq!(last, batch[1..]);
        let mid = s.points(Table::Minute, h0 + 1, h0 + MINUTE_MS, 0).unwrap();
        assert_eq!(mid, batch[1..2]);
        assert_eq!(s.last_minute().unwrap(), Some(batch[2].clone()));
    }

    #[test]
    fn audit_is_capped_and_newest_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("h.sqlite")).unwrap();
        let entries: Vec<Audit> = (0..5)
            .map(|i| Audit {
                timestamp_ms: i,
                method: "POST".into(),
                path: "/api/pools".into(),
                status: 200,
                session_id: format!("s{i}"),
            })
            .collect();
        s.write_batch(&[], &entries, &[], 0).unwrap();
        let got = s.audit(3).unwrap();
        assert_eq!(got, entries[2..]);
    }

    #[test]
    fn decisions_are_capped_filtered_by_follower_and_newest_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("h.sqlite")).unwrap();
        let d = |i: i64, mode: &str| Decision {
            t_ms: i,
            mode: mode.into(),
            json: format!(r#"{{"t_ms":{i}}}"#),
        };
        let batch: Vec<Decision> = (0..6)
            .map(|i| d(i, if i % 3 == 0 { "offgrid" } else { "solar" }))
            .collect();
        s.write_batch(&[], &[], &batch, 0).unwrap();
        assert_eq!(s.decisions(None, 2).unwrap(), batch[4..]);
        assert_eq!(
            s.decisions(Some("offgrid"), 10).unwrap(),
            vec![batch[0].clone(), batch[3].clone()]
        );
        let many: Vec<Decision> = (0..DECISION_CAP + 5).map(|i| d(100 + i, "solar")).collect();
        s.write_batch(&[], &[], &many, 0).unwrap();
        assert_eq!(s.info().unwrap().decision_rows, DECISION_CAP as u64);
        assert!(s.decisions(Some("offgrid"), 10).unwrap().is_empty());
        assert_eq!(s.decisions(None, 1).unwrap()[0], many[many.len() - 1]);
    }

    /// Time compressed: 40 days of minute points, then a minute point per hour for another
    /// 2.2 years, each batch pruned against its own "now". The retention holds at every step
    /// and the file stays under its bound.
    #[test]
    fn a_long_run_stays_within_retention_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.sqlite");
        let mut s = Store::open(&path).unwrap();
        let start = 1_700_000_000_000 / HOUR_MS * HOUR_MS;
        let mut t = start;
        let mut batch = Vec::new();
        let end_dense = start + 40 * 24 * HOUR_MS;
        let end = end_dense + 803 * 24 * HOUR_MS;
        // Every batch also carries a follower decision per 30 s poll and some API writes, with
        // entries as large as the power service's.
        let decisions = |t: i64| -> Vec<Decision> {
            (0..2000)
                .map(|i| Decision {
                    t_ms: t + i,
                    mode: "solar".into(),
                    json: format!(
                        r#"{{"t_ms":{t},"mode":"solar","reading":{{"surplus_watt":1234.5,"grid_watt":-1234.5,"battery_soc_pct":null,"source":"http://192.168.1.20/api/v1/data"}},"error":null,"decision":"run","target_watt":1180.0,"reason":"surplus 1234.5 W minus reserve 50 W, step limited to 100 W","actual_power_watt":1102.3,"hw_power_target_watt":1100.0,"hw_state":"MINING_STATE_MINING"}}"#
                    ),
                })
                .collect()
        };
        let audits = |t: i64| -> Vec<Audit> {
            (0..300)
                .map(|i| Audit {
                    timestamp_ms: t + i,
                    method: "PUT".into(),
                    path: "/api/config/section/energy".into(),
                    status: 200,
                    session_id: "0123456789abcdef0123456789abcdef".into(),
                })
                .collect()
        };
        while t < end {
            batch.push(point(t, 1000.0 + (t / MINUTE_MS % 7) as f64, 60));
            t += if t < end_dense { MINUTE_MS } else { HOUR_MS };
            if batch.len() == 1000 {
                s.write_batch(&batch, &audits(t), &decisions(t), t).unwrap();
                batch.clear();
            }
        }
        s.write_batch(&batch, &audits(t), &decisions(t), t).unwrap();
        let info = s.info().unwrap();
        assert_eq!(info.decision_rows, DECISION_CAP as u64, "{info:?}");
        assert_eq!(info.audit_rows, AUDIT_CAP as u64, "{info:?}");
        assert!(info.minute_span.0 >= t - MINUTE_RETENTION_MS, "{info:?}");
        assert!(info.hour_span.0 >= t - HOUR_RETENTION_MS, "{info:?}");
        assert!(info.minute_rows <= MINUTE_ROWS_MAX as u64, "{info:?}");
        assert!(info.hour_rows <= HOUR_ROWS_MAX as u64 + 1, "{info:?}");
        assert!(info.hour_rows > 17_000, "two years of hours kept: {info:?}");
        assert!(info.disk_bytes <= DISK_BOUND_BYTES, "{info:?}");
        println!(
            "history store after a simulated {} days: {} bytes, {} minute rows, {} hour rows, \
             {} decisions, {} audit entries",
            (t - start) / (24 * HOUR_MS),
            info.disk_bytes,
            info.minute_rows,
            info.hour_rows,
            info.decision_rows,
            info.audit_rows
        );
    }
}
