//! Lasting history: telemetry, pool and share counters, the API's audit log and the
//! solar/off-grid followers' decisions (the verification history).
//!
//! It lives in the tuner process because that process already follows hw-agent's telemetry
//! stream every second and is off the share path: hw-agent and stratum-agent must never wait
//! on a disk, the gateway should stay the API's face, and a process of its own would cost
//! memory against the footprint target for no gain in isolation (a tuner crash loses at most
//! one unwritten batch, see below).
//!
//! - 1 s points for the last 15 minutes stay in memory ([`SECOND_CAP`]).
//! - Each minute's snapshots are folded into one minute point; minute points (the one still
//!   being folded included), audit entries and follower decisions wait in memory and are written as one batch
//!   every `[tuner].history_flush_s` (default 300 s) and at shutdown ([`store`]: one SQLite
//!   transaction, WAL, hours rolled up, old rows pruned). A SIGKILL or power cut loses at most
//!   that last batch; an orderly stop (update, reboot, `svcos ctl stop`) loses nothing. Readers
//!   see pending points as if written, and a restarted tuner goes on folding the minute it
//!   stopped in.

pub mod service;
pub mod store;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use svcos_common::Shutdown;
use svcos_common::time::Clock;
use svcos_proto::hwagent::v1::Telemetry;
use svcos_proto::stratum::v1::GetPoolsResponse;
use tokio::sync::watch;

use store::{Audit, Decision, MINUTE_MS, Point, Store, StoreError, Table};

/// 1 s points kept in memory (15 minutes).
pub const SECOND_CAP: usize = 900;
/// Audit entries or follower decisions waiting for the next batch at most (more are written
/// early).
const PENDING_MAX: usize = 256;

/// The minute being folded.
#[derive(Debug, Clone)]
struct Fold {
    point: Point,
    sums: (f64, f64, f64),
}

impl Fold {
    /// Continue a stored point (the minute a restarted tuner stopped in).
    fn resume(p: Point) -> Self {
        let n = f64::from(p.samples);
        Fold {
            sums: (p.ghs_1m * n, p.ghs_5s * n, p.power_watt * n),
            point: p,
        }
    }

    fn new(minute_ms: i64) -> Self {
        Fold {
            point: Point {
                t_ms: minute_ms,
                active_pool: -1,
                ..Default::default()
            },
            sums: (0.0, 0.0, 0.0),
        }
    }

    fn add(&mut self, s: &Point) {
        self.sums.0 += s.ghs_1m;
        self.sums.1 += s.ghs_5s;
        self.sums.2 += s.power_watt;
        let p = &mut self.point;
        p.samples += 1;
        let n = f64::from(p.samples);
        p.ghs_1m = self.sums.0 / n;
        p.ghs_5s = self.sums.1 / n;
        p.power_watt = self.sums.2 / n;
        p.temp_max_c = if p.samples == 1 {
            s.temp_max_c
        } else {
            p.temp_max_c.max(s.temp_max_c)
        };
        p.state = s.state;
        p.accepted = s.accepted;
        p.rejected = s.rejected;
        p.stale = s.stale;
        p.active_pool = s.active_pool;
    }
}

/// What waits in memory.
#[derive(Debug, Default)]
struct Mem {
    seconds: VecDeque<Point>,
    fold: Option<Fold>,
    pending: Vec<Point>,
    pending_audit: Vec<Audit>,
    pending_decisions: Vec<Decision>,
}

/// The history: memory rings and the store.
#[derive(Debug)]
pub struct History {
    mem: Mutex<Mem>,
    store: Mutex<Store>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
}

/// A 1 s point from a telemetry snapshot and the pool snapshot of the same moment.
pub fn point_of(t: &Telemetry, pools: Option<&GetPoolsResponse>) -> Point {
    let h = t.hashrate.unwrap_or_default();
    Point {
        t_ms: t.timestamp_ms,
        state: t.state,
        ghs_1m: h.ghs_1m,
        ghs_5s: h.ghs_5s,
        power_watt: t.power_watt,
        temp_max_c: t.temp_max_c,
        accepted: pools.map(|p| p.accepted),
        rejected: pools.map(|p| p.rejected),
        stale: pools.map(|p| p.stale),
        active_pool: pools.map_or(-1, |p| p.active_index),
        samples: 1,
    }
}

fn open_checked(path: &Path) -> Result<(Store, Option<Point>), StoreError> {
    match std::fs::metadata(path) {
        // Zero bytes is a create that never finished (opening writes the header at once).
        Ok(m) if m.len() == 0 => {
            return Err(StoreError::Damaged {
                path: path.to_path_buf(),
                message: "empty file".into(),
            });
        }
        Ok(_) => Store::check_file(path)?,
        Err(_) => {}
    }
    let store = Store::open(path)?;
    let last = store.last_minute()?;
    Ok((store, last))
}

impl History {
    /// Open the store at `path`. A damaged database (empty, torn, not SQLite, failing its
    /// quick check) is moved aside with its write-ahead log ([`svcos_common::statefile`]) and a
    /// new, empty history started: losing the history is better than a tuner that cannot start.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<History, StoreError> {
        let (store, last) = match open_checked(path) {
            Ok(opened) => opened,
            Err(e) => {
                let why = e.to_string();
                svcos_common::statefile::move_aside(path, &why);
                let wal = store::sibling(path, "-wal");
                if wal.exists() {
                    svcos_common::statefile::move_aside(&wal, &why);
                }
                // The shared-memory index is derived from the log; nothing to keep.
                let _ = std::fs::remove_file(store::sibling(path, "-shm"));
                open_checked(path)?
            }
        };
        let mem = Mem {
            fold: last.map(Fold::resume),
            seconds: svcos_common::alloc::claimed_ring(SECOND_CAP, Point::default()),
            ..Default::default()
        };
        Ok(History {
            mem: Mutex::new(mem),
            store: Mutex::new(store),
            clock,
        })
    }

    fn mem(&self) -> MutexGuard<'_, Mem> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the store.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take one 1 s point: into the ring, and folded into its minute (a finished minute waits
    /// for the next batch).
    pub fn record(&self, p: Point) {
        let mut m = self.mem();
        if m.seconds.back().is_some_and(|last| last.t_ms >= p.t_ms) {
            return;
        }
        if m.seconds.len() == SECOND_CAP {
            m.seconds.pop_front();
        }
        m.seconds.push_back(p.clone());
        let minute = p.t_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        match &mut m.fold {
            Some(f) if f.point.t_ms == minute => f.add(&p),
            _ => {
                let mut f = Fold::new(minute);
                f.add(&p);
                if let Some(done) = m.fold.replace(f) {
                    m.pending.push(done.point);
                }
            }
        }
    }

    /// Queue an audit entry for the next batch.
    pub fn audit(&self, a: Audit) {
        let flush_now = {
            let mut m = self.mem();
            m.pending_audit.push(a);
            m.pending_audit.len() >= PENDING_MAX
        };
        if flush_now {
            let _ = self.flush();
        }
    }

    /// Queue a follower decision for the next batch.
    pub fn decision(&self, d: Decision) {
        let flush_now = {
            let mut m = self.mem();
            m.pending_decisions.push(d);
            m.pending_decisions.len() >= PENDING_MAX
        };
        if flush_now {
            let _ = self.flush();
        }
    }

    /// Write what waits, the minute still being folded included (it is written again, more
    /// complete, by the next batch). False when the batch could not be written (it is kept for
    /// the next one).
    pub fn flush(&self) -> bool {
        let (minutes, audit, decisions, folded) = {
            let mut m = self.mem();
            let mut minutes = std::mem::take(&mut m.pending);
            let folded = m.fold.as_ref().map(|f| f.point.clone());
            minutes.extend(folded.clone());
            (
                minutes,
                std::mem::take(&mut m.pending_audit),
                std::mem::take(&mut m.pending_decisions),
                folded.is_some(),
            )
        };
        if minutes.is_empty() && audit.is_empty() && decisions.is_empty() {
            return true;
        }
        let now = self.clock.now_ms();
        if let Err(e) = self.store().write_batch(&minutes, &audit, &decisions, now) {
            tracing::warn!(error = %e, "history batch not written; keeping it for the next one");
            let mut m = self.mem();
            let mut back = minutes;
            if folded {
                back.pop();
            }
            back.append(&mut m.pending);
            m.pending = back;
            let mut a = audit;
            a.append(&mut m.pending_audit);
            m.pending_audit = a;
            let mut d = decisions;
            d.append(&mut m.pending_decisions);
            m.pending_decisions = d;
            return false;
        }
        true
    }

    /// Points of a resolution; pending minute points are merged in, so a reader cannot tell
    /// what is written from what waits.
    pub fn points(
        &self,
        table: Option<Table>,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<Point>, StoreError> {
        let in_range = |p: &Point| p.t_ms >= from_ms && (to_ms <= 0 || p.t_ms <= to_ms);
        let mut v = match table {
            None => self
                .mem()
                .seconds
                .iter()
                .filter(|p| in_range(p))
                .cloned()
                .collect(),
            Some(t) => {
                let mut v = self.store().points(t, from_ms, to_ms, limit)?;
                if t == Table::Minute {
                    // What waits is newer than what is stored for the same minute.
                    let m = self.mem();
                    let waiting: Vec<Point> = m
                        .pending
                        .iter()
                        .chain(m.fold.as_ref().map(|f| &f.point))
                        .filter(|p| in_range(p))
                        .cloned()
                        .collect();
                    v.retain(|p| waiting.iter().all(|w| w.t_ms != p.t_ms));
                    v.extend(waiting);
                    v.sort_by_key(|p| p.t_ms);
                }
                v
            }
        };
        if limit > 0 && v.len() > limit as usize {
            v.drain(..v.len() - limit as usize);
        }
        Ok(v)
    }

    /// The newest audit entries, oldest first (written and pending).
    pub fn audit_entries(&self, limit: u32) -> Result<Vec<Audit>, StoreError> {
        let mut v = self.store().audit(limit)?;
        v.extend(self.mem().pending_audit.iter().cloned());
        if v.len() > limit as usize {
            v.drain(..v.len() - limit as usize);
        }
        Ok(v)
    }

    /// The newest follower decisions (of one follower, or of both), oldest first (written and
    /// pending).
    pub fn decisions(&self, mode: Option<&str>, limit: u32) -> Result<Vec<Decision>, StoreError> {
        let mut v = self.store().decisions(mode, limit)?;
        v.extend(
            self.mem()
                .pending_decisions
                .iter()
                .filter(|d| mode.is_none_or(|m| d.mode == m))
                .cloned(),
        );
        if v.len() > limit as usize {
            v.drain(..v.len() - limit as usize);
        }
        Ok(v)
    }

    /// Minute points waiting for the next batch.
    pub fn pending(&self) -> usize {
        self.mem().pending.len()
    }

    /// Sample every telemetry snapshot, write a batch every `flush`, and write everything at
    /// shutdown. Store calls run on a blocking thread so the governor and gRPC never wait on
    /// the disk.
    pub async fn run(
        self: Arc<Self>,
        mut telemetry: watch::Receiver<Option<Telemetry>>,
        pools: watch::Receiver<Option<GetPoolsResponse>>,
        flush: Duration,
        shutdown: Shutdown,
    ) {
        let mut tick = tokio::time::interval(flush);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                r = telemetry.changed() => {
                    if r.is_err() { break }
                    let p = telemetry
                        .borrow_and_update()
                        .as_ref()
                        .map(|t| point_of(t, pools.borrow().as_ref()));
                    if let Some(p) = p {
                        self.record(p);
                    }
                }
                _ = tick.tick() => {
                    let h = Arc::clone(&self);
                    let _ = tokio::task::spawn_blocking(move || h.flush()).await;
                }
                () = shutdown.wait() => break,
            }
        }
        let h = Arc::clone(&self);
        let _ = tokio::task::spawn_blocking(move || h.flush()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcos_common::time::ManualClock;

    fn sec(t_ms: i64, w: f64) -> Point {
        Point {
            t_ms,
            state: 3,
            power_watt: w,
            temp_max_c: w / 10.0,
            accepted: Some(t_ms as u64 / 1000),
            active_pool: 0,
            samples: 1,
            ..Default::default()
        }
    }

    #[test]
    fn seconds_fold_into_minutes_that_read_the_same_before_and_after_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at(0);
        let h = History::open(&dir.path().join("h.sqlite"), Arc::new(clock.clone())).unwrap();
        let t0 = 1_000 * MINUTE_MS;
        for i in 0..150 {
            h.record(sec(t0 + i * 1000, if i < 60 { 1000.0 } else { 1200.0 }));
        }
        // A repeated snapshot is one point.
        h.record(sec(t0 + 149_000, 5.0));
        assert_eq!(h.points(None, 0, 0, 0).unwrap().len(), 150);
        let before = h.points(Some(Table::Minute), 0, 0, 0).unwrap();
        assert_eq!(
            before.len(),
            3,
            "two finished minutes and the one in progress"
        );
        assert_eq!(before[0].power_watt, 1000.0);
        assert_eq!(before[0].samples, 60);
        assert_eq!(before[0].accepted, Some(t0 as u64 / 1000 + 59));
        assert_eq!(h.pending(), 2);
        clock.advance_ms(t0 + 150_000);
        h.flush();
        assert_eq!(h.pending(), 0);
        assert_eq!(h.points(Some(Table::Minute), 0, 0, 0).unwrap(), before);
        assert_eq!(h.points(Some(Table::Minute), 0, 0, 1).unwrap(), before[2..]);
        // The minute in progress was written too; the 1 s ring is memory only.
        drop(h);
        let h = History::open(&dir.path().join("h.sqlite"), Arc::new(clock)).unwrap();
        assert_eq!(h.points(Some(Table::Minute), 0, 0, 0).unwrap(), before);
        assert!(h.points(None, 0, 0, 0).unwrap().is_empty());
        let hours = h.points(Some(Table::Hour), 0, 0, 0).unwrap();
        assert_eq!(hours.len(), 1);
        assert_eq!(hours[0].samples, 150);
        // A restarted tuner goes on folding the minute it stopped in.
        h.record(sec(t0 + 150_000, 1200.0));
        let last = h.points(Some(Table::Minute), 0, 0, 1).unwrap();
        assert_eq!(last[0].samples, 31);
    }

    #[test]
    fn the_second_ring_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::open(&dir.path().join("h.sqlite"), Arc::new(ManualClock::at(0))).unwrap();
        for i in 0..(SECOND_CAP as i64 + 100) {
            h.record(sec(i * 1000, 1.0));
        }
        let s = h.points(None, 0, 0, 0).unwrap();
        assert_eq!(s.len(), SECOND_CAP);
        assert_eq!(s[0].t_ms, 100_000);
    }
}
