//! The restart policy as a pure function: (policy, escalation, how the run ended, history, now,
//! whether a reboot is allowed) → decision.
//!
//! No clock, no I/O: the manager passes monotonic times in, so every rule is tested with a table
//! of exits and times instead of by waiting.
//!
//! # The ladder
//!
//! A service that exits is restarted after a capped exponential backoff (floor × 2^streak, at
//! most the cap; a run longer than `stable_after_ms` starts over from the floor and forgets
//! every escalation). A service is never abandoned for crashing: each time it exceeds its
//! intensity limit (more than `intensity_max_restarts` restarts within `intensity_window_s`) it
//! climbs one rung, the way embedded supervisors do:
//!
//! | Level | Action on the breach | Later restarts |
//! |---|---|---|
//! | `none` | – | backoff |
//! | `restart-dependants` | the service and every service after it in boot order (Erlang's *rest_for_one*) | backoff |
//! | `reboot` | a reboot (systemd on the image, the whole stack in the sim) if the reboot-loop guard allows | – |
//! | `slow-retry` | – (the guard refused, or rebooting is off) | every `slow_retry_ms`, forever |
//!
//! Disabled rungs are skipped. Only the exit codes that mean a restart cannot help (64, 78) and
//! `strategy = "never"` leave a service down.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use svcos_common::config::{EscalationConfig, RestartPolicyConfig, RestartStrategy};
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

/// Rungs of the escalation ladder (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Plain restarts with backoff.
    #[default]
    None,
    /// The dependants were restarted with it.
    RestartDependants,
    /// A reboot was asked for.
    Reboot,
    /// Slow retries, forever.
    SlowRetry,
}

impl Level {
    /// The lowercase name shown by ctl, D-Bus and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::RestartDependants => "restart-dependants",
            Level::Reboot => "reboot",
            Level::SlowRetry => "slow-retry",
        }
    }

    /// The next enabled rung above this one.
    fn next(self, esc: &EscalationConfig, reboot_allowed: bool) -> Level {
        let mut l = self;
        loop {
            l = match l {
                Level::None => Level::RestartDependants,
                Level::RestartDependants => Level::Reboot,
                Level::Reboot | Level::SlowRetry => return Level::SlowRetry,
            };
            let enabled = match l {
                Level::RestartDependants => esc.restart_dependants,
                Level::Reboot => esc.reboot && reboot_allowed,
                _ => true,
            };
            if enabled {
                return l;
            }
        }
    }
}

/// What the policy remembers about a service between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// When each automatic restart inside the current intensity window (and level) happened.
    pub restarts: VecDeque<Duration>,
    /// Consecutive short-lived runs; drives the exponential backoff.
    pub streak: u32,
    /// Current rung of the ladder.
    pub level: Level,
    /// Delay of the latest automatic restart.
    pub last_delay: Duration,
}

impl History {
    /// Remember a decision taken at `now` (restarts and reboots; the rest changes nothing).
    pub fn record(&mut self, decision: &Decision, now: Duration, window: Duration) {
        let (streak, level, delay) = match *decision {
            Decision::Restart {
                delay,
                streak,
                level,
                ..
            } => (streak, level, delay),
            Decision::Reboot { streak } => (streak, Level::Reboot, Duration::ZERO),
            Decision::GiveUp(_) | Decision::StayStopped => return,
        };
        if level != self.level {
            // A new rung gets its own budget of restarts.
            self.restarts.clear();
        }
        while self
            .restarts
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= window)
        {
            self.restarts.pop_front();
        }
        self.restarts.push_back(now);
        self.streak = streak;
        self.level = level;
        self.last_delay = delay;
    }

    /// Restarts inside the window ending at `now`.
    pub fn recent(&self, now: Duration, window: Duration) -> u32 {
        self.restarts
            .iter()
            .filter(|t| now.saturating_sub(**t) < window)
            .count() as u32
    }

    /// Forget everything (after an operator's explicit start, or a stack restart).
    pub fn clear(&mut self) {
        *self = History::default();
    }
}

/// Why the supervisor leaves a service down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The exit code says a restart cannot help (bad usage or bad config).
    NoRestartCode(i32),
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::NoRestartCode(c) => {
                write!(f, "exit code {c} means a restart cannot help")
            }
        }
    }
}

/// What to do after a service exited on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after `delay`.
    Restart {
        /// Backoff delay before the new start.
        delay: Duration,
        /// Value for [`History::streak`] once the restart is recorded.
        streak: u32,
        /// Rung after this decision.
        level: Level,
        /// Restart its dependants too (the moment it reached [`Level::RestartDependants`]).
        dependants: bool,
    },
    /// Reboot (the moment it reached [`Level::Reboot`]).
    Reboot {
        /// Value for [`History::streak`] once recorded.
        streak: u32,
    },
    /// Report it as failed and leave it down; the other services keep running.
    GiveUp(GiveUpReason),
    /// Leave it stopped: the strategy does not restart this kind of exit.
    StayStopped,
}

/// Decide what follows an exit. `reboot_allowed` is the reboot-loop guard's verdict
/// ([`reboot_allowed`]).
pub fn decide(
    policy: &RestartPolicyConfig,
    escalation: &EscalationConfig,
    exit: &ExitEvent,
    history: &History,
    now: Duration,
    reboot_allowed: bool,
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
    // A run that lasted long enough proves the last problem is gone: start over.
    let ran_for = now.saturating_sub(exit.started_at);
    let stable = ran_for >= Duration::from_millis(policy.stable_after_ms);
    let (streak, level, recent) = if stable {
        (0, Level::None, 0)
    } else {
        let window = Duration::from_secs(policy.intensity_window_s);
        (history.streak, history.level, history.recent(now, window))
    };
    let backoff = |streak: u32| {
        let factor = 1u64.checked_shl(streak).unwrap_or(u64::MAX);
        let ms = policy
            .backoff_floor_ms
            .saturating_mul(factor)
            .min(policy.backoff_cap_ms);
        Duration::from_millis(ms)
    };
    let slow = Duration::from_millis(escalation.slow_retry_ms);
    let next_streak = streak.saturating_add(1);
    if level == Level::SlowRetry {
        return Decision::Restart {
            delay: slow.max(backoff(streak)),
            streak: next_streak,
            level,
            dependants: false,
        };
    }
    if recent < policy.intensity_max_restarts {
        return Decision::Restart {
            delay: backoff(streak),
            streak: next_streak,
            level,
            dependants: false,
        };
    }
    match level.next(escalation, reboot_allowed) {
        Level::Reboot => Decision::Reboot {
            streak: next_streak,
        },
        Level::SlowRetry => Decision::Restart {
            delay: slow.max(backoff(streak)),
            streak: next_streak,
            level: Level::SlowRetry,
            dependants: false,
        },
        l => Decision::Restart {
            delay: backoff(streak),
            streak: next_streak,
            level: l,
            dependants: l == Level::RestartDependants,
        },
    }
}

/// The reboot-loop guard: a reboot is allowed while fewer than `max` escalation reboots
/// happened within `window_s` before `now_unix_s`. `boots` are unix seconds.
pub fn reboot_allowed(boots: &[i64], now_unix_s: i64, max: u32, window_s: u64) -> bool {
    let window = i64::try_from(window_s).unwrap_or(i64::MAX);
    let recent = boots
        .iter()
        .filter(|t| now_unix_s.saturating_sub(**t) < window)
        .count();
    recent < max as usize
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

    fn esc() -> EscalationConfig {
        EscalationConfig {
            restart_dependants: true,
            reboot: true,
            reboot_max: 3,
            reboot_window_s: 3600,
            slow_retry_ms: 30_000,
        }
    }

    fn history(restarts: &[u64], streak: u32, level: Level) -> History {
        History {
            restarts: restarts.iter().map(|t| ms(*t)).collect(),
            streak,
            level,
            last_delay: Duration::ZERO,
        }
    }

    fn restart(delay: u64, streak: u32, level: Level, dependants: bool) -> Decision {
        Decision::Restart {
            delay: ms(delay),
            streak,
            level,
            dependants,
        }
    }

    fn short_exit() -> ExitEvent {
        ExitEvent {
            kind: ExitKind::Signal(9),
            started_at: ms(19_900),
        }
    }

    #[test]
    fn strategy_table() {
        use ExitKind::*;
        use RestartStrategy::*;
        let r = restart(20, 1, Level::None, false);
        let cases = [
            (Always, Code(0), r),
            (Always, Code(1), r),
            (Always, Signal(9), r),
            (Always, Unknown, r),
            (OnFailure, Code(0), Decision::StayStopped),
            (OnFailure, Code(2), r),
            (OnFailure, Signal(11), r),
            (OnFailure, Unknown, r),
            (Never, Code(1), Decision::StayStopped),
            (Never, Signal(9), Decision::StayStopped),
            (Never, Code(0), Decision::StayStopped),
        ];
        for (strategy, kind, want) in cases {
            let exit = ExitEvent {
                kind,
                started_at: ms(0),
            };
            let got = decide(
                &policy(strategy),
                &esc(),
                &exit,
                &History::default(),
                ms(100),
                true,
            );
            assert_eq!(got, want, "{strategy:?} {kind:?}");
        }
    }

    #[test]
    fn no_restart_codes_are_never_restarted_whatever_the_strategy_or_level() {
        for strategy in [
            RestartStrategy::Always,
            RestartStrategy::OnFailure,
            RestartStrategy::Never,
        ] {
            for level in [Level::None, Level::RestartDependants, Level::SlowRetry] {
                for code in [64, 78] {
                    let exit = ExitEvent {
                        kind: ExitKind::Code(code),
                        started_at: ms(0),
                    };
                    assert_eq!(
                        decide(
                            &policy(strategy),
                            &esc(),
                            &exit,
                            &history(&[], 4, level),
                            ms(50),
                            true
                        ),
                        Decision::GiveUp(GiveUpReason::NoRestartCode(code)),
                    );
                }
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
            let got = decide(
                &p,
                &esc(),
                &exit,
                &history(&[], streak, Level::None),
                ms(1100),
                true,
            );
            assert_eq!(
                got,
                restart(delay, after, Level::None, false),
                "streak {streak}"
            );
        }
    }

    #[test]
    fn stable_run_resets_backoff_and_escalation() {
        let p = policy(RestartStrategy::Always);
        let exit = ExitEvent {
            kind: ExitKind::Code(1),
            started_at: ms(10_000),
        };
        for level in [Level::None, Level::RestartDependants, Level::SlowRetry] {
            // A full window of restarts, but the last run lasted stable_after: back to the floor.
            let h = history(&[6_000, 8_000, 9_000], 5, level);
            assert_eq!(
                decide(&p, &esc(), &exit, &h, ms(15_000), true),
                restart(20, 1, Level::None, false),
                "{level:?}"
            );
        }
        // Ran 4999 ms: still short, backoff keeps growing.
        let h = history(&[], 5, Level::None);
        assert_eq!(
            decide(&p, &esc(), &exit, &h, ms(14_999), true),
            restart(640, 6, Level::None, false)
        );
    }

    /// The ladder, one breach of the intensity limit (3 restarts in 10 s) at a time:
    /// (level before, reboot enabled, guard allows, restart_dependants enabled, decision).
    #[test]
    fn escalation_ladder_table() {
        use Level::*;
        let full = [11_000, 15_000, 19_000];
        let cases = [
            (
                None,
                true,
                true,
                true,
                restart(160, 4, RestartDependants, true),
            ),
            (None, true, true, false, Decision::Reboot { streak: 4 }),
            (
                None,
                false,
                true,
                false,
                restart(30_000, 4, SlowRetry, false),
            ),
            (
                RestartDependants,
                true,
                true,
                true,
                Decision::Reboot { streak: 4 },
            ),
            // The guard refuses: slow retries instead of a reboot.
            (
                RestartDependants,
                true,
                false,
                true,
                restart(30_000, 4, SlowRetry, false),
            ),
            (
                RestartDependants,
                false,
                true,
                true,
                restart(30_000, 4, SlowRetry, false),
            ),
            // A reboot that did not happen (sim restarts the stack; failed systemd call).
            (
                Reboot,
                true,
                true,
                true,
                restart(30_000, 4, SlowRetry, false),
            ),
            // The top rung stays: never failed, never faster than slow_retry_ms.
            (
                SlowRetry,
                true,
                true,
                true,
                restart(30_000, 4, SlowRetry, false),
            ),
        ];
        for (level, reboot, allowed, dependants, want) in cases {
            let e = EscalationConfig {
                reboot,
                restart_dependants: dependants,
                ..esc()
            };
            let got = decide(
                &policy(RestartStrategy::Always),
                &e,
                &short_exit(),
                &history(&full, 3, level),
                ms(20_000),
                allowed,
            );
            assert_eq!(got, want, "{level:?} reboot={reboot} allowed={allowed}");
        }
    }

    #[test]
    fn below_the_limit_the_level_holds_and_backoff_applies() {
        let p = policy(RestartStrategy::Always);
        for level in [Level::None, Level::RestartDependants] {
            let two = history(&[15_000, 19_000], 2, level);
            assert_eq!(
                decide(&p, &esc(), &short_exit(), &two, ms(20_000), true),
                restart(80, 3, level, false)
            );
        }
        // At the slow rung every restart waits slow_retry_ms, even the first of a window.
        let slow = history(&[], 9, Level::SlowRetry);
        assert_eq!(
            decide(&p, &esc(), &short_exit(), &slow, ms(20_000), true),
            restart(30_000, 10, Level::SlowRetry, false)
        );
        // The oldest restart has left the window: no breach.
        let full = history(&[10_000, 15_000, 19_000], 3, Level::None);
        assert!(matches!(
            decide(&p, &esc(), &short_exit(), &full, ms(20_000), true),
            Decision::Restart {
                level: Level::None,
                dependants: false,
                ..
            }
        ));
    }

    #[test]
    fn a_crash_loop_climbs_every_rung_and_never_gives_up() {
        // Crash every 100 ms for five minutes, recording each decision like the manager does.
        let p = policy(RestartStrategy::Always);
        let window = Duration::from_secs(p.intensity_window_s);
        let mut h = History::default();
        let mut seen = Vec::new();
        let mut now = ms(1_000);
        let mut reboots = 0;
        while now < ms(300_000) {
            let exit = ExitEvent {
                kind: ExitKind::Code(1),
                started_at: now - ms(100),
            };
            let d = decide(&p, &esc(), &exit, &h, now, reboots < 1);
            assert!(!matches!(d, Decision::GiveUp(_) | Decision::StayStopped));
            if let Decision::Reboot { .. } = d {
                reboots += 1;
            }
            h.record(&d, now, window);
            if seen.last() != Some(&h.level) {
                seen.push(h.level);
            }
            now += match d {
                Decision::Restart { delay, .. } => delay + ms(100),
                _ => ms(100),
            };
        }
        assert_eq!(
            seen,
            [
                Level::None,
                Level::RestartDependants,
                Level::Reboot,
                Level::SlowRetry
            ]
        );
        assert_eq!(reboots, 1);
    }

    #[test]
    fn record_keeps_the_window_and_resets_it_per_level() {
        let mut h = History::default();
        let window = Duration::from_secs(10);
        h.record(&restart(20, 1, Level::None, false), ms(1_000), window);
        h.record(&restart(40, 2, Level::None, false), ms(5_000), window);
        h.record(&restart(80, 3, Level::None, false), ms(12_000), window);
        assert_eq!(h.restarts, [ms(5_000), ms(12_000)]);
        assert_eq!((h.streak, h.last_delay), (3, ms(80)));
        h.record(
            &restart(160, 4, Level::RestartDependants, true),
            ms(13_000),
            window,
        );
        assert_eq!(h.restarts, [ms(13_000)]);
        assert_eq!(h.level, Level::RestartDependants);
        h.record(&Decision::StayStopped, ms(14_000), window);
        assert_eq!(h.restarts.len(), 1);
        h.clear();
        assert_eq!(h, History::default());
    }

    #[test]
    fn reboot_loop_guard_table() {
        // (boots, now, max, window, allowed)
        let cases: [(&[i64], i64, u32, u64, bool); 6] = [
            (&[], 1_000, 3, 3600, true),
            (&[100, 200], 1_000, 3, 3600, true),
            (&[100, 200, 300], 1_000, 3, 3600, false),
            // The oldest left the window.
            (&[100, 200, 300], 3_700, 3, 3600, true),
            (&[100], 1_000, 0, 3600, false),
            // A clock that went backwards still counts the boot as recent.
            (&[5_000, 5_001, 5_002], 1_000, 3, 3600, false),
        ];
        for (boots, now, max, window, want) in cases {
            assert_eq!(
                reboot_allowed(boots, now, max, window),
                want,
                "{boots:?} {now}"
            );
        }
    }

    #[test]
    fn names_read_well() {
        assert_eq!(ExitKind::Code(78).to_string(), "exit code 78");
        assert_eq!(
            ExitKind::Signal(9).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(Level::RestartDependants.as_str(), "restart-dependants");
        assert_eq!(Level::SlowRetry.as_str(), "slow-retry");
    }
}
