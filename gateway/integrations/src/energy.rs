//! The miner's energy meter: kWh used since the counter was first started, for Home
//! Assistant's Energy dashboard (`device_class: energy`, `state_class: total_increasing`).
//!
//! Design:
//! - **What is integrated**: hw-agent's calibrated power (`Telemetry.power_watt`, the watts every
//!   surface reports) over hw-agent's own snapshot timestamps, trapezoid rule. A gap longer than
//!   [`MAX_GAP_MS`] between two snapshots (hw-agent or the gateway away) is not integrated:
//!   power that was not measured is not guessed, so the meter can only undercount.
//! - **One writer**: nothing else integrates a lifetime total (the tuner's daily quota resets each
//!   day), so the gateway owns this one and keeps it in its state directory, `energy.json`,
//!   written atomically ([`svcos_common::fsutil::atomic_write`]) every [`SAVE_EVERY`] while it
//!   grew, and once more on a clean stop.
//! - **Never backwards**: readers (the MQTT state message) are given the last *saved* total, never
//!   the running one. A SIGKILL or power cut loses at most [`SAVE_EVERY`] of energy (uncounted),
//!   and the next start resumes from exactly the figure that was last published, so Home
//!   Assistant never sees the counter decrease and never counts a reset.
//! - A damaged file is moved aside ([`svcos_common::statefile`]) and the meter starts again at 0
//!   (Home Assistant takes that as a meter reset, the documented safe state).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use svcos_common::Shutdown;
use svcos_common::time::Clock;
use svcos_proto::hwagent::v1::Telemetry;
use tokio::sync::watch;

/// Schema tag of `energy.json`.
pub const SCHEMA: &str = "svcos.gateway.energy.v1";
/// File name in the gateway's state directory.
pub const FILE: &str = "energy.json";
/// Longest gap between two snapshots that is integrated, ms (hw-agent publishes at 1 Hz).
pub const MAX_GAP_MS: i64 = 10_000;
/// How often a grown total is saved (and so becomes visible), and the most a kill can lose.
pub const SAVE_EVERY: Duration = Duration::from_secs(30);

/// The trapezoid integrator: a pure core, fed snapshots.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meter {
    /// Total, Wh.
    wh: f64,
    /// The previous snapshot: hw-agent timestamp (ms) and watts.
    last: Option<(i64, f64)>,
}

impl Meter {
    /// A meter resuming from a saved total.
    pub fn resume(kwh: f64) -> Self {
        Meter {
            wh: kwh * 1000.0,
            last: None,
        }
    }

    /// Add one power snapshot. Out-of-order, repeated or far-apart snapshots only restart the
    /// trapezoid; negative or non-finite readings count as nothing.
    pub fn sample(&mut self, timestamp_ms: i64, watt: f64) {
        let watt = if watt.is_finite() { watt.max(0.0) } else { 0.0 };
        if let Some((t0, w0)) = self.last {
            let dt = timestamp_ms - t0;
            if dt <= 0 {
                // A repeated snapshot (same timestamp) or a clock step back: keep the earlier
                // point so the next good interval is measured from it.
                if dt < 0 {
                    self.last = Some((timestamp_ms, watt));
                }
                return;
            }
            if dt <= MAX_GAP_MS {
                self.wh += (w0 + watt) / 2.0 * dt as f64 / 3_600_000.0;
            }
        }
        self.last = Some((timestamp_ms, watt));
    }

    /// The source went away: the next snapshot starts a new trapezoid.
    pub fn pause(&mut self) {
        self.last = None;
    }

    /// The total, kWh.
    pub fn kwh(&self) -> f64 {
        self.wh / 1000.0
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    schema: String,
    kwh: f64,
    saved_at_ms: i64,
}

fn parse(bytes: &[u8]) -> Result<f64, String> {
    let saved: Saved = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if saved.schema != SCHEMA {
        return Err(format!("schema {:?}, expected {SCHEMA}", saved.schema));
    }
    if !saved.kwh.is_finite() || saved.kwh < 0.0 {
        return Err(format!("kwh {} is not a meter reading", saved.kwh));
    }
    Ok(saved.kwh)
}

/// The saved total at `path` (0 when there is none or it was damaged and moved aside).
pub fn load(path: &std::path::Path) -> f64 {
    svcos_common::statefile::load_or_quarantine(path, parse)
        .good()
        .unwrap_or(0.0)
}

/// Save a total (no path: nothing to write); false when it could not be written.
async fn commit(path: Option<PathBuf>, kwh: f64, now_ms: i64) -> bool {
    let Some(path) = path else { return true };
    match tokio::task::spawn_blocking(move || save(path, kwh, now_ms)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot save the energy meter; keeping the last saved total");
            false
        }
        Err(_) => false,
    }
}

fn save(path: PathBuf, kwh: f64, now_ms: i64) -> std::io::Result<()> {
    let body = serde_json::to_vec(&Saved {
        schema: SCHEMA.into(),
        kwh,
        saved_at_ms: now_ms,
    })
    .expect("energy file serialises");
    svcos_common::fsutil::atomic_write(&path, &body, 0o600)
}

/// Start the meter: load the saved total, follow telemetry, save every [`SAVE_EVERY`] and on
/// stop. The receiver holds the last saved total, kWh (without a `path`, kept in memory only).
pub fn spawn(
    path: Option<PathBuf>,
    mut telemetry: watch::Receiver<Option<Telemetry>>,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> watch::Receiver<f64> {
    let start = path.as_deref().map_or(0.0, load);
    let (saved_tx, saved_rx) = watch::channel(start);
    tokio::spawn(async move {
        let mut meter = Meter::resume(start);
        let mut saved = start;
        let mut tick = tokio::time::interval(SAVE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let stopping = tokio::select! {
                _ = shutdown.wait() => true,
                r = telemetry.changed() => {
                    if r.is_err() {
                        return;
                    }
                    match telemetry.borrow_and_update().as_ref() {
                        Some(t) => meter.sample(t.timestamp_ms, t.power_watt),
                        None => meter.pause(),
                    }
                    continue;
                }
                _ = tick.tick() => false,
            };
            let kwh = meter.kwh();
            if kwh > saved && commit(path.clone(), kwh, clock.now_ms()).await {
                saved = kwh;
                // Only a total that is on disk is shown, so a restart never goes back.
                saved_tx.send_replace(kwh);
            }
            if stopping {
                return;
            }
        }
    });
    saved_rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trapezoid_gaps_and_bad_readings() {
        let mut m = Meter::resume(1.0);
        // One hour of 1 s snapshots at 1200 W: +1.2 kWh.
        for s in 0..=3600 {
            m.sample(s * 1000, 1200.0);
        }
        assert!((m.kwh() - 2.2).abs() < 1e-9, "{}", m.kwh());
        let before = m.kwh();
        // A repeated snapshot and a jump back add nothing.
        m.sample(3_600_000, 1200.0);
        m.sample(3_000_000, 1200.0);
        assert_eq!(m.kwh(), before);
        // A gap over MAX_GAP_MS is not integrated; the next interval is.
        m.sample(3_000_000 + MAX_GAP_MS + 1, 1200.0);
        assert_eq!(m.kwh(), before);
        m.sample(3_000_000 + MAX_GAP_MS + 1001, 1200.0);
        assert!((m.kwh() - before - 1200.0 / 3_600_000.0).abs() < 1e-12);
        // After a pause the first snapshot only starts a new trapezoid.
        let before = m.kwh();
        m.pause();
        m.sample(4_000_000, 1200.0);
        assert_eq!(m.kwh(), before);
        for bad in [f64::NAN, f64::INFINITY, -50.0] {
            m.sample(4_001_000, bad);
        }
        assert!(m.kwh() >= before);
        // Ramp 0 -> 1000 W over 1 s: the trapezoid counts the mean, 500 W.
        let mut m = Meter::default();
        m.sample(0, 0.0);
        m.sample(1000, 1000.0);
        assert!((m.kwh() - 500.0 / 3_600_000.0).abs() < 1e-15);
    }

    #[test]
    fn file_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        assert_eq!(load(&path), 0.0);
        save(path.clone(), 12.5, 1).unwrap();
        assert_eq!(load(&path), 12.5);
        for bad in [
            &b"{\"schema\":\"svcos.gateway.energy.v1\",\"kwh\":-1,\"saved_at_ms\":1}"[..],
            b"{\"schema\":\"other\",\"kwh\":1,\"saved_at_ms\":1}",
            b"garbage",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(load(&path), 0.0);
            assert!(!path.exists(), "a damaged file is moved aside");
        }
    }

    #[tokio::test]
    async fn published_total_is_the_saved_one_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        save(path.clone(), 3.0, 1).unwrap();
        let (tx, rx) = watch::channel(None);
        let shutdown = Shutdown::new();
        let clock: Arc<dyn Clock> = Arc::new(svcos_common::time::SystemClock);
        let saved = spawn(Some(path.clone()), rx, clock.clone(), shutdown.clone());
        assert_eq!(*saved.borrow(), 3.0);
        for s in 0..=10 {
            tx.send_replace(Some(Telemetry {
                timestamp_ms: s * 1000,
                power_watt: 3600.0,
                ..Default::default()
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Not saved yet, so not shown.
        assert_eq!(*saved.borrow(), 3.0);
        shutdown.trigger();
        let mut saved = saved;
        tokio::time::timeout(Duration::from_secs(5), saved.changed())
            .await
            .unwrap()
            .unwrap();
        let kwh = *saved.borrow();
        assert!((kwh - 3.01).abs() < 1e-9, "{kwh}");
        assert_eq!(load(&path), kwh);
        let again = spawn(Some(path), watch::channel(None).1, clock, Shutdown::new());
        assert_eq!(*again.borrow(), kwh);
    }
}
