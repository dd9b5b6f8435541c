//! The home-pool decision as a pure function of what the agent knows, with durations passed in
//! (no clock), so every failover/failback rule is table-tested.

use std::time::Duration;

/// What the decision looks at. Pools are opaque ids; `rank` is position in the priority order.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeInputs {
    /// The preferred alive pool: the quota pick in split mode, else the best-ranked alive pool.
    pub best_alive: Option<u64>,
    /// Its rank (0 = best).
    pub best_rank: Option<usize>,
    /// How long it has been healthy (authorised and sending jobs).
    pub best_healthy_for: Option<Duration>,
    /// Whether split (quota) mode is on and produced `best_alive`.
    pub split: bool,
    /// The current home pool.
    pub home: Option<u64>,
    /// Its rank; `None` when it is disabled or removed.
    pub home_rank: Option<usize>,
    /// Whether the home pool is alive.
    pub home_alive: bool,
    /// A pool an operator asked for (SwitchPool), if not reached yet.
    pub manual: Option<u64>,
    /// Time since the last switch, `None` if there was none.
    pub since_last_switch: Option<Duration>,
    /// `[stratum].failback_hysteresis_s`.
    pub hysteresis: Duration,
}

/// Why the home pool changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchReason {
    /// First pool since start.
    Start,
    /// The home pool was disabled or removed.
    Removed,
    /// The home pool died (unreachable, refused, closed, silent).
    Failover,
    /// Split mode: another pool's turn.
    QuotaSplit,
    /// An operator's SwitchPool.
    Manual,
    /// A better-ranked pool was healthy for the hysteresis window.
    Failback,
}

/// Keep the home pool, or switch to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HomeChoice {
    /// No change.
    Keep,
    /// Switch to this pool.
    Switch(u64, SwitchReason),
}

/// Decide the home pool: fail over at once, fail back only after the hysteresis window (and at
/// most one voluntary switch per window), manual switches as soon as the pool is alive.
pub fn decide_home(i: &HomeInputs) -> HomeChoice {
    let Some(best) = i.best_alive else {
        return HomeChoice::Keep;
    };
    let window_open = i.since_last_switch.is_none_or(|d| d >= i.hysteresis);
    let Some(home) = i.home.filter(|_| i.home_alive && i.home_rank.is_some()) else {
        let reason = match (i.home, i.home_rank) {
            (None, _) => SwitchReason::Start,
            (Some(_), None) => SwitchReason::Removed,
            (Some(_), Some(_)) => SwitchReason::Failover,
        };
        return HomeChoice::Switch(best, reason);
    };
    if best == home {
        return HomeChoice::Keep;
    }
    if i.manual == Some(best) {
        return HomeChoice::Switch(best, SwitchReason::Manual);
    }
    if i.split {
        return if i.manual.is_none() && window_open {
            HomeChoice::Switch(best, SwitchReason::QuotaSplit)
        } else {
            HomeChoice::Keep
        };
    }
    let better = matches!((i.best_rank, i.home_rank), (Some(b), Some(h)) if b < h);
    let healthy = i.best_healthy_for.is_some_and(|d| d >= i.hysteresis);
    if better && healthy && window_open {
        HomeChoice::Switch(best, SwitchReason::Failback)
    } else {
        HomeChoice::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn base() -> HomeInputs {
        HomeInputs {
            best_alive: Some(0),
            best_rank: Some(0),
            best_healthy_for: Some(S(0)),
            split: false,
            home: Some(1),
            home_rank: Some(1),
            home_alive: true,
            manual: None,
            since_last_switch: Some(S(0)),
            hysteresis: S(300),
        }
    }

    #[test]
    fn table() {
        use HomeChoice::*;
        use SwitchReason::*;
        let cases: Vec<(&str, HomeInputs, HomeChoice)> = vec![
            (
                "nothing alive: keep",
                HomeInputs {
                    best_alive: None,
                    home_alive: false,
                    ..base()
                },
                Keep,
            ),
            (
                "first pool",
                HomeInputs {
                    home: None,
                    home_rank: None,
                    home_alive: false,
                    best_alive: Some(1),
                    ..base()
                },
                Switch(1, Start),
            ),
            (
                "home dead: fail over at once, window or not",
                HomeInputs {
                    home_alive: false,
                    best_alive: Some(2),
                    best_rank: Some(2),
                    ..base()
                },
                Switch(2, Failover),
            ),
            (
                "home disabled",
                HomeInputs {
                    home_rank: None,
                    ..base()
                },
                Switch(0, Removed),
            ),
            ("better pool just healthy: wait", base(), Keep),
            (
                "healthy long enough but a switch just happened",
                HomeInputs {
                    best_healthy_for: Some(S(400)),
                    since_last_switch: Some(S(10)),
                    ..base()
                },
                Keep,
            ),
            (
                "healthy long enough, window open: fail back",
                HomeInputs {
                    best_healthy_for: Some(S(300)),
                    since_last_switch: Some(S(300)),
                    ..base()
                },
                Switch(0, Failback),
            ),
            (
                "never switched before",
                HomeInputs {
                    best_healthy_for: Some(S(300)),
                    since_last_switch: None,
                    ..base()
                },
                Switch(0, Failback),
            ),
            (
                "worse pool alive: never a failback",
                HomeInputs {
                    best_alive: Some(2),
                    best_rank: Some(2),
                    best_healthy_for: Some(S(9999)),
                    since_last_switch: None,
                    ..base()
                },
                Keep,
            ),
            (
                "manual: at once",
                HomeInputs {
                    manual: Some(0),
                    ..base()
                },
                Switch(0, Manual),
            ),
            (
                "split: other pool's turn, window open",
                HomeInputs {
                    split: true,
                    best_alive: Some(2),
                    best_rank: Some(2),
                    since_last_switch: Some(S(300)),
                    ..base()
                },
                Switch(2, QuotaSplit),
            ),
            (
                "split: window closed",
                HomeInputs {
                    split: true,
                    best_alive: Some(2),
                    best_rank: Some(2),
                    ..base()
                },
                Keep,
            ),
            (
                "home is best",
                HomeInputs {
                    best_alive: Some(1),
                    best_rank: Some(1),
                    ..base()
                },
                Keep,
            ),
        ];
        for (name, inputs, want) in cases {
            assert_eq!(decide_home(&inputs), want, "{name}");
        }
    }
}
