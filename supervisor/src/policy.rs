//! The restart policy as a pure function: (policy, how the run ended, history, now) → decision.
//!
//! No clock, no I/O: the manager passes monotonic times in, so every rule is tested with a table
//! of exits and times instead of by waiting.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use svcos_common::config::{RestartPolicyConfig, RestartStrategy};
use svcos_common::exit;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// It was not our child (re-adopted after a supervisor restart), so the kernel does not tell
    /// us its status; treated as a failure.
    Unknown,
}

impl ExitKind {
    /// Whether the run ended cleanly (exit code 0).
    pub fn is_success(self) -> bool {
        self == ExitKind::Code(0)
    }
}

impl fmt::Display for ExitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitKind::Code(c) => write!(f, "exit code {c}"),
            ExitKind::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str())
                    .unwrap_or("?");
                write!(f, "killed by signal {s} ({name})")
            }
            ExitKind::Unknown => f.write_str("exited (status unknown: adopted process)"),
        }
    }
}

/// One finished run of a service. Times are monotonic, measured from any fixed origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitEvent {
    /// How it ended.
    pub kind: ExitKind,
    /// When the run started.
    pub started_at: Duration,
}

/// What the policy remembers about a service between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// When each automatic restart inside the current intensity window happened.
    pub restarts: VecDeque<Duration>,
    /// Consecutive short-lived runs; drives the exponential backoff.
    pub streak: u32,
}

impl History {
    /// Remember that a restart decided at `now` with `streak` happened, forgetting restarts
    /// older than the window.
    pub fn record_restart(&mut self, now: Duration, streak: u32, window: Duration) {
        while self
            .restarts
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= window)
        {
            self.restarts.pop_front();
        }
        self.restarts.push_back(now);
        self.streak = streak;
    }

    /// Forget everything (after an operator's explicit start).
    pub fn clear(&mut self) {
        *self = History::default();
    }
}

/// Why the supervisor gave up on a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The exit code says a restart cannot help (bad usage or bad config).
    NoRestartCode(i32),
    /// More than the allowed restarts inside the intensity window.
    Intensity {
        /// Restarts already done inside the window.
        restarts: u32,
        /// The window.
        window_s: u64,
    },
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::NoRestartCode(c) => {
                write!(f, "exit code {c} means a restart cannot help")
            }
            GiveUpReason::Intensity { restarts, window_s } => {
                write!(f, "{restarts} restarts within {window_s} s")
            }
        }
    }
}

/// What to do after a service exited on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after `delay`; `streak` is the new consecutive-short-run count.
    Restart {
        /// Backoff delay before the new start.
        delay: Duration,
        /// Value for [`History::streak`] once the restart is recorded.
        streak: u32,
    },
    /// Report it as failed and leave it down; the other services keep running.
    GiveUp(GiveUpReason),
    /// Leave it stopped: the strategy does not restart this kind of exit.
    StayStopped,
}

/// Decide what follows an exit.
pub fn decide(
    policy: &RestartPolicyConfig,
    exit: &ExitEvent,
    history: &History,
    now: Duration,
) -> Decision {
    if let ExitKind::Code(code) = exit.kind
        && exit::NO_RESTART.contains(&code)
    {
        return Decision::GiveUp(GiveUpReason::NoRestartCode(code));
    }
    match policy.strategy {
        RestartStrategy::Never => return Decision::StayStopped,
        RestartStrategy::OnFailure if exit.kind.is_success() => return Decision::StayStopped,
        RestartStrategy::OnFailure | RestartStrategy::Always => {}
    }
    let window = Duration::from_secs(policy.intensity_window_s);
    let recent = history
        .restarts
        .iter()
        .filter(|t| now.saturating_sub(**t) < window)
        .count() as u32;
    if recent >= policy.intensity_max_restarts {
        return Decision::GiveUp(GiveUpReason::Intensity {
            restarts: recent,
            window_s: policy.intensity_window_s,
        });
    }
    // A run that lasted long enough proves the last problem is gone: start the backoff over.
    let ran_for = now.saturating_sub(exit.started_at);
    let streak = if ran_for >= Duration::from_millis(policy.stable_after_ms) {
        0
    } else {
        history.streak
    };
    let floor = policy.backoff_floor_ms;
    let factor = 1u64.checked_shl(streak).unwrap_or(u64::MAX);
    let delay_ms = floor.saturating_mul(factor).min(policy.backoff_cap_ms);
    Decision::Restart {
        delay: Duration::from_millis(delay_ms),
        streak: streak.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn policy(strategy: RestartStrategy) -> RestartPolicyConfig {
        RestartPolicyConfig {
            strategy,
            backoff_floor_ms: 20,
            backoff_cap_ms: 1000,
            intensity_max_restarts: 3,
            intensity_window_s: 10,
            grace_ms: 3000,
            stable_after_ms: 5000,
        }
    }

    fn history(restarts: &[u64], streak: u32) -> History {
        History {
            restarts: restarts.iter().map(|t| ms(*t)).collect(),
            streak,
        }
    }

    #[test]
    fn strategy_table() {
        use ExitKind::*;
        use RestartStrategy::*;
        let restart = Decision::Restart {
            delay: ms(20),
            streak: 1,
        };
        let cases = [
            (Always, Code(0), restart),
            (Always, Code(1), restart),
            (Always, Signal(9), restart),
            (Always, Unknown, restart),
            (OnFailure, Code(0), Decision::StayStopped),
            (OnFailure, Code(2), restart),
            (OnFailure, Signal(11), restart),
            (OnFailure, Unknown, restart),
            (Never, Code(1), Decision::StayStopped),
            (Never, Signal(9), Decision::StayStopped),
            (Never, Code(0), Decision::StayStopped),
        ];
        for (strategy, kind, want) in cases {
            let exit = ExitEvent {
                kind,
                started_at: ms(0),
            };
            let got = decide(&policy(strategy), &exit, &History::default(), ms(100));
            assert_eq!(got, want, "{strategy:?} {kind:?}");
        }
    }

    #[test]
    fn no_restart_codes_are_never_restarted_whatever_the_strategy() {
        for strategy in [
            RestartStrategy::Always,
            RestartStrategy::OnFailure,
            RestartStrategy::Never,
        ] {
            for code in [64, 78] {
                let exit = ExitEvent {
                    kind: ExitKind::Code(code),
                    started_at: ms(0),
                };
                assert_eq!(
                    decide(&policy(strategy), &exit, &History::default(), ms(50)),
                    Decision::GiveUp(GiveUpReason::NoRestartCode(code)),
                );
            }
        }
    }

    #[test]
    fn backoff_doubles_from_floor_to_cap() {
        let p = policy(RestartStrategy::Always);
        // (streak before, expected delay, expected streak after), runs always short.
        let table = [
            (0, 20, 1),
            (1, 40, 2),
            (2, 80, 3),
            (3, 160, 4),
            (4, 320, 5),
            (5, 640, 6),
            (6, 1000, 7),
            (7, 1000, 8),
            (63, 1000, 64),
            (200, 1000, 201),
        ];
        for (streak, delay, after) in table {
            let exit = ExitEvent {
                kind: ExitKind::Signal(9),
                started_at: ms(1000),
            };
            let got = decide(&p, &exit, &history(&[], streak), ms(1100));
            assert_eq!(
                got,
                Decision::Restart {
                    delay: ms(delay),
                    streak: after
                },
                "streak {streak}"
            );
        }
    }

    #[test]
    fn stable_run_resets_backoff() {
        let p = policy(RestartStrategy::Always);
        let h = history(&[], 5);
        // Ran 4999 ms: still short, backoff keeps growing.
        let short = ExitEvent {
            kind: ExitKind::Code(1),
            started_at: ms(10_000),
        };
        assert_eq!(
            decide(&p, &short, &h, ms(14_999)),
            Decision::Restart {
                delay: ms(640),
                streak: 6
            }
        );
        // Ran exactly stable_after: back to the floor.
        assert_eq!(
            decide(&p, &short, &h, ms(15_000)),
            Decision::Restart {
                delay: ms(20),
                streak: 1
            }
        );
    }

    #[test]
    fn intensity_window_gives_up_after_max_restarts() {
        let p = policy(RestartStrategy::Always);
        let exit = ExitEvent {
            kind: ExitKind::Code(1),
            started_at: ms(20_000),
        };
        // Three restarts inside the last 10 s: a fourth would exceed the limit.
        let full = history(&[11_000, 15_000, 19_000], 3);
        assert_eq!(
            decide(&p, &exit, &full, ms(20_500)),
            Decision::GiveUp(GiveUpReason::Intensity {
                restarts: 3,
                window_s: 10
            })
        );
        // The oldest has left the window: restarting is allowed again.
        assert!(matches!(
            decide(&p, &exit, &full, ms(21_000)),
            Decision::Restart { .. }
        ));
        // Two in the window: allowed.
        let two = history(&[15_000, 19_000], 2);
        assert!(matches!(
            decide(&p, &exit, &two, ms(20_500)),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn record_restart_forgets_old_entries() {
        let mut h = History::default();
        let window = Duration::from_secs(10);
        h.record_restart(ms(1_000), 1, window);
        h.record_restart(ms(5_000), 2, window);
        h.record_restart(ms(12_000), 3, window);
        assert_eq!(h.restarts, [ms(5_000), ms(12_000)]);
        assert_eq!(h.streak, 3);
        h.clear();
        assert_eq!(h, History::default());
    }

    #[test]
    fn exit_kinds_read_well() {
        assert_eq!(ExitKind::Code(78).to_string(), "exit code 78");
        assert_eq!(
            ExitKind::Signal(9).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
    }
}
