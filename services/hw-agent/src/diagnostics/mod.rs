//! Diagnostic runs (board health, chip health, hash report) and the debug surface.
//!
//! hw-agent owns the hardware, so it owns the runs: a run only *observes* the mining loop
//! (snapshots the chain and board threads publish, plus register reads and I2C probes sent to
//! those threads as commands, which interleave with mining), so mining never stops for a run.
//!
//! Each kind has one slot with the state machine [`RunState`]: `idle → running →
//! completed | cancelled | failed`, and from any finished state `running` again on the next
//! start. One run per kind at a time; kinds run concurrently. [`transitions`] is the one
//! description of the machine; the API serves it as is.
//!
//! Finished runs are written as JSON under `<state>/hw-agent/diagnostics/` ([`store`],
//! atomic writes, the last [`store::KEEP`] kept), so results survive restarts of hw-agent.
//! Debug writes are appended to [`audit`]'s log next to them.

pub mod audit;
pub mod checks;
pub mod service;
pub mod store;

use std::sync::{Arc, Mutex};

use svcos_proto::hwagent::v1::{RunState as WireState, RunStatus};

/// Which diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// Per chain: chips, voltage, temperatures, PSU, fans, I2C devices.
    BoardHealth,
    /// Per chip: nonces vs expected, HW errors, register answer → ok / weak / dead.
    ChipHealth,
    /// Measured hashrate per chain and chip over a window vs nominal.
    HashReport,
}

impl RunKind {
    /// Every kind.
    pub const ALL: [RunKind; 3] = [
        RunKind::BoardHealth,
        RunKind::ChipHealth,
        RunKind::HashReport,
    ];

    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::BoardHealth => "board-health",
            RunKind::ChipHealth => "chip-health",
            RunKind::HashReport => "hashreport",
        }
    }

    /// Parse the API name.
    pub fn parse(s: &str) -> Option<RunKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Default observation window, seconds.
    pub fn default_duration_s(self) -> u32 {
        match self {
            RunKind::BoardHealth => 3,
            RunKind::ChipHealth => 30,
            RunKind::HashReport => 60,
        }
    }

    /// Allowed windows, seconds.
    pub fn duration_range(self) -> std::ops::RangeInclusive<u32> {
        match self {
            RunKind::BoardHealth => 1..=60,
            RunKind::ChipHealth | RunKind::HashReport => 5..=3600,
        }
    }
}

/// The state of a kind's run slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Never run since the report store was empty.
    Idle,
    /// Observing.
    Running,
    /// Finished with a report.
    Completed,
    /// Stopped by the operator; the partial observations are kept.
    Cancelled,
    /// Could not finish (hardware gone, hw-agent stopping).
    Failed,
}

impl RunState {
    /// Every state, in declaration order.
    pub const ALL: [RunState; 5] = [
        RunState::Idle,
        RunState::Running,
        RunState::Completed,
        RunState::Cancelled,
        RunState::Failed,
    ];

    /// The wire enum.
    pub fn wire(self) -> WireState {
        match self {
            RunState::Idle => WireState::Idle,
            RunState::Running => WireState::Running,
            RunState::Completed => WireState::Completed,
            RunState::Cancelled => WireState::Cancelled,
            RunState::Failed => WireState::Failed,
        }
    }

    /// Lower-case name for JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Idle => "idle",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Cancelled => "cancelled",
            RunState::Failed => "failed",
        }
    }

    /// Parse [`RunState::as_str`].
    pub fn parse(s: &str) -> Option<RunState> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// A run in this state is over.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Cancelled | RunState::Failed
        )
    }

    /// The state an event leads to, or `None` when the event is not allowed here.
    pub fn next(self, event: RunEvent) -> Option<RunState> {
        match (self, event) {
            (RunState::Running, RunEvent::Start) => None,
            (_, RunEvent::Start) => Some(RunState::Running),
            (RunState::Running, RunEvent::Finish) => Some(RunState::Completed),
            (RunState::Running, RunEvent::Cancel) => Some(RunState::Cancelled),
            (RunState::Running, RunEvent::Fail) => Some(RunState::Failed),
            _ => None,
        }
    }
}

/// What moves a run slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEvent {
    /// StartRun.
    Start,
    /// The observation window ended and the report was written.
    Finish,
    /// CancelRun.
    Cancel,
    /// The run could not go on.
    Fail,
}

impl RunEvent {
    /// Every event.
    pub const ALL: [RunEvent; 4] = [
        RunEvent::Start,
        RunEvent::Finish,
        RunEvent::Cancel,
        RunEvent::Fail,
    ];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEvent::Start => "start",
            RunEvent::Finish => "finish",
            RunEvent::Cancel => "cancel",
            RunEvent::Fail => "fail",
        }
    }
}

/// Every allowed `(from, event, to)`, derived from [`RunState::next`].
pub fn transitions() -> Vec<(RunState, RunEvent, RunState)> {
    let mut out = Vec::new();
    for from in RunState::ALL {
        for event in RunEvent::ALL {
            if let Some(to) = from.next(event) {
                out.push((from, event, to));
            }
        }
    }
    out
}

/// One kind's slot.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Where the run is.
    pub state: RunState,
    /// `<kind>-<started ms>`; empty while idle.
    pub run_id: String,
    /// 0..=100.
    pub progress_percent: f64,
    /// When it started, unix ms.
    pub started_unix_ms: i64,
    /// When it ended, unix ms (0 while running).
    pub finished_unix_ms: i64,
    /// Window asked for.
    pub duration_s: u32,
    /// Why it failed.
    pub error: String,
    /// Tells the running task to stop.
    pub cancel: Option<tokio::sync::watch::Sender<bool>>,
}

impl Slot {
    fn idle() -> Self {
        Slot {
            state: RunState::Idle,
            run_id: String::new(),
            progress_percent: 0.0,
            started_unix_ms: 0,
            finished_unix_ms: 0,
            duration_s: 0,
            error: String::new(),
            cancel: None,
        }
    }

    /// The wire status.
    pub fn status(&self, kind: RunKind) -> RunStatus {
        RunStatus {
            kind: kind.as_str().into(),
            state: self.state.wire() as i32,
            run_id: self.run_id.clone(),
            progress_percent: self.progress_percent,
            started_unix_ms: self.started_unix_ms,
            finished_unix_ms: self.finished_unix_ms,
            duration_s: self.duration_s,
            error: self.error.clone(),
        }
    }
}

/// The three slots, shared by the API and the run tasks.
#[derive(Debug, Clone)]
pub struct Slots(Arc<Mutex<Vec<(RunKind, Slot)>>>);

impl Slots {
    /// Idle slots, or the last stored run of each kind (so status and result agree after a
    /// restart; a run still in flight when hw-agent stopped left no file and is forgotten).
    pub fn new(last: impl Fn(RunKind) -> Option<store::StoredReport>) -> Self {
        let slots = RunKind::ALL
            .into_iter()
            .map(|k| {
                let slot = match last(k) {
                    Some(r) => Slot {
                        state: r.state,
                        run_id: r.run_id,
                        progress_percent: if r.state == RunState::Completed {
                            100.0
                        } else {
                            r.progress_percent
                        },
                        started_unix_ms: r.started_unix_ms,
                        finished_unix_ms: r.finished_unix_ms,
                        duration_s: r.duration_s,
                        error: r.error,
                        cancel: None,
                    },
                    None => Slot::idle(),
                };
                (k, slot)
            })
            .collect();
        Slots(Arc::new(Mutex::new(slots)))
    }

    /// Run `f` on a kind's slot.
    pub fn with<R>(&self, kind: RunKind, f: impl FnOnce(&mut Slot) -> R) -> R {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let slot = g
            .iter_mut()
            .find(|(k, _)| *k == kind)
            .map(|(_, s)| s)
            .expect("every kind has a slot");
        f(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_per_kind_and_terminal_states_restart() {
        assert_eq!(RunState::Running.next(RunEvent::Start), None);
        for s in [
            RunState::Idle,
            RunState::Completed,
            RunState::Cancelled,
            RunState::Failed,
        ] {
            assert_eq!(s.next(RunEvent::Start), Some(RunState::Running));
            assert_eq!(s.next(RunEvent::Cancel), None, "{s:?}");
            assert_eq!(s.next(RunEvent::Finish), None, "{s:?}");
        }
        assert_eq!(
            RunState::Running.next(RunEvent::Cancel),
            Some(RunState::Cancelled)
        );
        // 4 starts + finish, cancel, fail from running.
        assert_eq!(transitions().len(), 7);
        for k in RunKind::ALL {
            assert_eq!(RunKind::parse(k.as_str()), Some(k));
            assert!(k.duration_range().contains(&k.default_duration_s()));
        }
    }
}
