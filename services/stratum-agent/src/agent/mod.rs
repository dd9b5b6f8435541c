//! The pool manager: one task that owns every pool connection's protocol state, the current
//! epoch's jobs, the share queue and the counters.
//!
//! gRPC handlers never touch this state; they send a [`Command`] over a bounded channel and read
//! published snapshots (`watch`): the current job for StreamJobs, the pool list for
//! GetPools/StreamPools, the donation status. Connection tasks send [`ConnEvent`]s. After every
//! message the agent re-runs its selection policy:
//!
//! * **home pool**: the best-ranked enabled pool that is alive (authorised and sending jobs).
//!   When the home pool dies (unreachable, refused, closed, silent for `silent_timeout_s`) the
//!   agent fails over at once to the best alive pool, connecting down the ranking until one
//!   answers. A better-ranked pool is probed in the background and taken back only after it has
//!   been healthy for `failback_hysteresis_s`, and at most one such switch per window.
//! * **epoch**: every switch (and every new session without a resumed extranonce) starts a new
//!   epoch, so hw-agent drops the old pool's work. A reconnect that resumes the same session
//!   keeps the epoch, and shares queued meanwhile are submitted then, each once. A `Queued`
//!   answer waits until the writer has the queue on disk ([`crate::sharequeue`]), and a restart
//!   takes the saved queue back with the saved session.
//! * **donation**: when configured, the donation pool is mined in scheduled windows.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use svcos_common::config::{Config, ConfigError, DonationConfig, PoolConfig, StratumConfig};
use svcos_common::ipc::Backoff;
use svcos_common::redact::mask_url_userinfo;
use svcos_common::time::unix_ms;
use svcos_proto::stratum::v1::{
    GetDonationResponse, GetJdStatusResponse, GetPoolsResponse, GetSv2StatusResponse, JobTemplate,
    PoolState, PoolStatus, PoolSwitch, ShareDisposition, SubmitShareRequest,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::conn::{self, ConnEvent, ConnHandle, ConnId};
use crate::donation::DonationSchedule;
use crate::jobs::{Epoch, ShareCheck};
use crate::persist::{Persistence, Snapshot, job_to_saved, parse_share_key, saved_to_notify};
use crate::sharequeue::{self, MAX_QUEUE, QueuedShare, ShareQueue};
use crate::state::{PoolCounters, SavedEpoch, SavedState, SavedSwitch};
use crate::transport::{PoolUrl, Scheme, Tls};
use crate::v1::codec::{Notify, parse_line};
use crate::v1::session::{Session, SessionEvent, SessionParams, ShareSubmit};
use crate::v2::session::{LoggedMessage, Sv2Params, Sv2Session};
use crate::v2::status::Sv2Link;

mod connections;
mod jd;
mod pools;
mod publish;
mod restore;
mod shares;

use publish::sv2_idle;

/// Uid of the donation pool's slot.
const DONATION_UID: u64 = u64::MAX;
/// Pool index reported in donation jobs (not a configured pool).
pub const DONATION_INDEX: u32 = u32::MAX;
/// Switches kept in the history.
const MAX_SWITCHES: usize = 64;
/// Retry delay after a refused authorisation.
const AUTH_RETRY: Duration = Duration::from_secs(60);
/// Longest retry backoff for an unreachable pool.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Pool snapshots are published at most this often (StreamPools contract: 250 ms).
pub const SNAPSHOT_PERIOD: Duration = Duration::from_millis(250);
/// Periodic state writes at most this often (urgent writes after a submit bypass it).
const PERSIST_PERIOD: Duration = Duration::from_secs(1);

/// A reply channel.
pub type Reply<T> = oneshot::Sender<Result<T, AgentError>>;

/// What gRPC handlers ask of the agent. Every variant is allowed in every state.
#[derive(Debug)]
pub enum Command {
    /// Take a share from hw-agent.
    Submit(SubmitShareRequest, Reply<ShareDisposition>),
    /// Mine on the pool at this index as soon as it is alive, without hysteresis. Its new
    /// first place in priority is a config change, written through the config writer before
    /// this command (see `grpc.rs`).
    SwitchPool(u32, Reply<()>),
    /// Re-read pools and [stratum] from the config file (donation needs a restart). Every pool
    /// change (add, remove, enable, order) reaches the agent this way.
    ReloadConfig(Reply<()>),
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No pool at that index.
    #[error("no pool at index {0}")]
    NoSuchPool(u32),
    /// The pool (or the reloaded config) is invalid.
    #[error("{0}")]
    Invalid(ConfigError),
    /// Removing this pool would leave none.
    #[error("cannot remove the last pool (index {0})")]
    LastPool(u32),
    /// The config writer (the gateway) refused or failed the write, or is not reachable.
    #[error("{}", .0.message())]
    Writer(tonic::Status),
    /// The priority order is not a permutation of the pool indexes.
    #[error("priority order must list every pool index exactly once")]
    BadOrder,
    /// The share cannot be a share of its job (wrong extranonce2 size, version bits outside the
    /// mask).
    #[error("malformed share: {0}")]
    MalformedShare(String),
    /// The agent task is gone (shutting down).
    #[error("stratum-agent is shutting down")]
    Gone,
}

/// The current job as published to StreamJobs readers.
#[derive(Debug, Clone)]
pub struct Published {
    /// The newest job.
    pub template: Arc<JobTemplate>,
    /// Incremented on every clean job or new epoch, so a reader that skipped an update still
    /// learns that its work is void.
    pub clean_seq: u64,
}

/// Read-only views the gRPC layer serves.
#[derive(Debug, Clone)]
pub struct Views {
    /// Current job.
    pub jobs: watch::Receiver<Option<Published>>,
    /// Pool snapshot.
    pub pools: watch::Receiver<GetPoolsResponse>,
    /// Donation status.
    pub donation: watch::Receiver<GetDonationResponse>,
    /// Stratum V2 connection status.
    pub sv2: watch::Receiver<GetSv2StatusResponse>,
    /// Job declaration status.
    pub jd: watch::Receiver<GetJdStatusResponse>,
}

/// What the agent starts from.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The config file (pool changes are saved there).
    pub config_path: PathBuf,
    /// The state file.
    pub state_path: PathBuf,
    /// Pools at start.
    pub pools: Vec<PoolConfig>,
    /// [stratum] at start.
    pub stratum: StratumConfig,
    /// [donation], read once at start.
    pub donation: DonationConfig,
    /// TLS roots.
    pub tls: Tls,
}

#[derive(Debug)]
struct PoolSlot {
    uid: u64,
    cfg: PoolConfig,
    url: Option<PoolUrl>,
    key: String,
    state: PoolState,
    conn: Option<ConnId>,
    retry_at: Instant,
    backoff: Backoff,
    healthy_since: Option<Instant>,
    session_id: Option<String>,
    last_error: String,
    connected_since_ms: i64,
    redirect_port: Option<u16>,
}

impl PoolSlot {
    fn new(uid: u64, cfg: PoolConfig, now: Instant) -> Self {
        let url = PoolUrl::parse(&cfg.url).ok();
        PoolSlot {
            uid,
            key: pool_key(&cfg),
            url,
            state: if cfg.enabled {
                PoolState::Connecting
            } else {
                PoolState::Disabled
            },
            cfg,
            conn: None,
            retry_at: now,
            backoff: Backoff::new(Duration::from_secs(1), MAX_BACKOFF),
            healthy_since: None,
            session_id: None,
            last_error: String::new(),
            connected_since_ms: 0,
            redirect_port: None,
        }
    }
}

fn pool_key(cfg: &PoolConfig) -> String {
    format!("{}|{}", cfg.url, cfg.user)
}

/// The protocol state of one connection: V1 lines or V2 frames.
#[derive(Debug)]
enum PoolSession {
    V1(Box<Session>),
    V2(Box<Sv2Session>, Box<Sv2Link>),
}

impl PoolSession {
    fn authorized(&self) -> bool {
        match self {
            PoolSession::V1(s) => s.authorized,
            PoolSession::V2(s, _) => s.authorized,
        }
    }
    fn extranonce1(&self) -> &[u8] {
        match self {
            PoolSession::V1(s) => &s.extranonce1,
            PoolSession::V2(s, _) => &s.extranonce1,
        }
    }
    fn extranonce2_size(&self) -> usize {
        match self {
            PoolSession::V1(s) => s.extranonce2_size,
            PoolSession::V2(s, _) => s.extranonce2_size,
        }
    }
    fn difficulty(&self) -> f64 {
        match self {
            PoolSession::V1(s) => s.difficulty,
            PoolSession::V2(s, _) => s.difficulty,
        }
    }
    fn version_mask(&self) -> Option<u32> {
        match self {
            PoolSession::V1(s) => s.version_mask,
            PoolSession::V2(s, _) => s.version_mask,
        }
    }
    /// The V1 subscription id to resume (SV2 has no session resumption).
    fn session_id(&self) -> Option<String> {
        match self {
            PoolSession::V1(s) => s.session_id.clone(),
            PoolSession::V2(..) => None,
        }
    }
}

#[derive(Debug)]
struct ConnState {
    uid: u64,
    handle: ConnHandle,
    session: PoolSession,
    opened: Instant,
    connected: bool,
    authorized_at: Option<Instant>,
    last_notify: Option<Instant>,
    last_job: Option<(Box<Notify>, i64)>,
}

#[derive(Debug)]
struct Ticket {
    key: String,
    difficulty: f64,
    sent: Instant,
}

/// The pool manager.
pub struct Agent {
    settings: AgentSettings,
    slots: Vec<PoolSlot>,
    donation_slot: Option<PoolSlot>,
    schedule: Option<DonationSchedule>,
    conns: HashMap<ConnId, ConnState>,
    next_conn: ConnId,
    next_uid: u64,
    events_tx: mpsc::Sender<ConnEvent>,
    home: Option<u64>,
    active: Option<u64>,
    manual: Option<u64>,
    /// The pool the last reload's reorder record named first: a manual switch to it (which
    /// saves the list with that pool first, then switches) replaces that record with its own.
    reorder_noted: Option<u64>,
    epoch: Option<Epoch>,
    epoch_uid: Option<u64>,
    epoch_conn: Option<ConnId>,
    queue: ShareQueue,
    /// `Queued` answers held until the writer has the queue on disk, with the generation that
    /// covers them.
    waiting: Vec<(u64, Reply<ShareDisposition>)>,
    /// Generation of the last snapshot handed to the writer.
    generation: u64,
    tickets: HashMap<u64, Ticket>,
    next_ticket: u64,
    saved: SavedState,
    last_switch: Option<Instant>,
    clean_seq: u64,
    jobs_tx: watch::Sender<Option<Published>>,
    pools_tx: watch::Sender<GetPoolsResponse>,
    donation_tx: watch::Sender<GetDonationResponse>,
    persistence: Persistence,
    start: Instant,
    donation_mark: Option<Instant>,
    dirty: bool,
    urgent: bool,
    pools_dirty: bool,
    last_persist: Instant,
    last_pools_publish: Instant,
    /// Quota mode: time each pool has been home (this process's lifetime).
    quota_mined: HashMap<u64, Duration>,
    home_since: Option<Instant>,
    sv2_tx: watch::Sender<GetSv2StatusResponse>,
    /// The SV2 connection the status reports.
    sv2_focus: Option<ConnId>,
    /// The JD client, when job declaration applies to the mining connection.
    jd_run: Option<jd::JdRun>,
    jd_view: jd::JdView,
    jd_tx: watch::Sender<GetJdStatusResponse>,
}

impl Agent {
    /// Build the agent from settings, the saved state and the saved share queue, and its views.
    /// `events` must be the receiving end of `events_tx`.
    pub fn new(
        settings: AgentSettings,
        mut saved: SavedState,
        saved_queue: Vec<QueuedShare>,
        events_tx: mpsc::Sender<ConnEvent>,
        persistence: Persistence,
    ) -> (Agent, Views) {
        let now = Instant::now();
        if saved.counters_since_ms == 0 {
            saved.counters_since_ms = unix_ms();
        }
        saved.next_epoch = saved.next_epoch.max(1);
        let slots: Vec<PoolSlot> = settings
            .pools
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, c)| PoolSlot::new(i as u64, c, now))
            .collect();
        let mut schedule = DonationSchedule::new(&settings.donation, 0);
        if let Some(s) = schedule.as_mut() {
            s.mined_total_ms = saved.donation_mined_total_ms;
            if saved.donation_cycle_start_ms > 0 {
                let elapsed = unix_ms() - saved.donation_cycle_start_ms;
                s.resume_cycle(0, elapsed, saved.donation_mined_cycle_ms);
            }
        }
        let donation_slot = schedule.as_ref().map(|_| {
            PoolSlot::new(
                DONATION_UID,
                PoolConfig {
                    url: settings.donation.pool_url.clone(),
                    user: settings.donation.payout_address.clone(),
                    ..Default::default()
                },
                now,
            )
        });
        let (jobs_tx, jobs_rx) = watch::channel(None);
        let (pools_tx, pools_rx) = watch::channel(GetPoolsResponse::default());
        let (donation_tx, donation_rx) = watch::channel(GetDonationResponse::default());
        let (sv2_tx, sv2_rx) = watch::channel(sv2_idle(
            &settings.stratum,
            settings.pools.iter().map(|p| (p.enabled, p.url.as_str())),
        ));
        let (jd_tx, jd_rx) = watch::channel(GetJdStatusResponse::default());
        let mut agent = Agent {
            next_uid: slots.len() as u64,
            settings,
            slots,
            donation_slot,
            schedule,
            conns: HashMap::new(),
            next_conn: 1,
            events_tx,
            home: None,
            active: None,
            manual: None,
            reorder_noted: None,
            epoch: None,
            epoch_uid: None,
            epoch_conn: None,
            queue: ShareQueue::new(MAX_QUEUE),
            waiting: Vec::new(),
            generation: 0,
            tickets: HashMap::new(),
            next_ticket: 1,
            saved,
            last_switch: None,
            clean_seq: 0,
            jobs_tx,
            pools_tx,
            donation_tx,
            persistence,
            start: now,
            donation_mark: None,
            dirty: true,
            urgent: false,
            pools_dirty: true,
            last_persist: now,
            last_pools_publish: now,
            quota_mined: HashMap::new(),
            home_since: None,
            sv2_tx,
            sv2_focus: None,
            jd_run: None,
            jd_view: jd::JdView::default(),
            jd_tx,
        };
        agent.restore_epoch();
        agent.restore_queue(saved_queue);
        agent.publish_pools();
        agent.publish_donation();
        agent.publish_jd();
        (
            agent,
            Views {
                jobs: jobs_rx,
                pools: pools_rx,
                donation: donation_rx,
                sv2: sv2_rx,
                jd: jd_rx,
            },
        )
    }

    /// Run until shutdown; returns the final snapshot to write (after the writer task is done,
    /// so two writes never race on the same temp file).
    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut events: mpsc::Receiver<ConnEvent>,
        shutdown: svcos_common::Shutdown,
    ) -> Snapshot {
        let mut tick = tokio::time::interval(SNAPSHOT_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut durable = self.persistence.durable.clone();
        self.policy();
        loop {
            let deadline = self.donation_deadline();
            tokio::select! {
                Some(cmd) = commands.recv() => self.command(cmd),
                Some(ev) = events.recv() => self.conn_event(ev),
                Ok(()) = durable.changed() => {
                    let written = *durable.borrow_and_update();
                    self.release_waiting(written);
                }
                _ = tick.tick() => self.tick(),
                _ = sleep_until_opt(deadline) => self.account_donation(),
                _ = shutdown.wait() => break,
            }
            self.policy();
            self.jd_sync();
            if self.urgent {
                // Let the connection task write the share first: serialising the state is not
                // on the share's latency path.
                tokio::task::yield_now().await;
                self.urgent = false;
                self.persist();
            }
            // Fresh snapshots right after a change, but at most one per period (StreamPools'
            // contract); a change inside the period goes out on the next tick.
            if self.pools_dirty && self.last_pools_publish.elapsed() >= SNAPSHOT_PERIOD {
                self.publish_pools();
            }
        }
        self.account_donation();
        // Held answers are dropped: hw-agent sees the service go away, keeps those shares and
        // offers them again (a duplicate then: the final write below has them queued).
        self.waiting.clear();
        self.generation += 1;
        Snapshot {
            generation: self.generation,
            queue: self.queue.encode(),
            state: self.state_bytes(),
        }
    }

    /// Answer the held `Queued` replies whose queue is on disk now.
    fn release_waiting(&mut self, written: u64) {
        let waiting = std::mem::take(&mut self.waiting);
        for (generation, reply) in waiting {
            if generation <= written {
                let _ = reply.send(Ok(ShareDisposition::Queued));
            } else {
                self.waiting.push((generation, reply));
            }
        }
    }

    fn mono_ms(&self, t: Instant) -> i64 {
        t.duration_since(self.start).as_millis() as i64
    }

    // ---------------------------------------------------------------- lookups

    fn slot(&self, uid: u64) -> Option<&PoolSlot> {
        if uid == DONATION_UID {
            self.donation_slot.as_ref()
        } else {
            self.slots.iter().find(|s| s.uid == uid)
        }
    }

    fn slot_mut(&mut self, uid: u64) -> Option<&mut PoolSlot> {
        if uid == DONATION_UID {
            self.donation_slot.as_mut()
        } else {
            self.slots.iter_mut().find(|s| s.uid == uid)
        }
    }

    fn index_of(&self, uid: u64) -> i32 {
        if uid == DONATION_UID {
            return DONATION_INDEX as i32;
        }
        self.slots
            .iter()
            .position(|s| s.uid == uid)
            .map_or(-1, |i| i as i32)
    }

    fn counters(&mut self, uid: u64) -> &mut PoolCounters {
        let key = self
            .slot(uid)
            .map_or_else(|| "unknown".to_string(), |s| s.key.clone());
        self.saved.pools.entry(key).or_default()
    }

    fn alive(&self, uid: u64) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        (slot.cfg.enabled || uid == DONATION_UID)
            && slot
                .conn
                .and_then(|c| self.conns.get(&c))
                .is_some_and(|c| c.session.authorized() && c.last_job.is_some())
    }

    /// Enabled pools, best first (priority, then list order).
    fn ranked(&self) -> Vec<u64> {
        let mut v: Vec<(u32, usize, u64)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.cfg.enabled && s.url.is_some())
            .map(|(i, s)| (s.cfg.priority, i, s.uid))
            .collect();
        v.sort();
        v.into_iter().map(|(_, _, u)| u).collect()
    }

    // ---------------------------------------------------------------- policy

    fn policy(&mut self) {
        let now = Instant::now();
        let ranked = self.ranked();
        let rank = |uid: u64| ranked.iter().position(|u| *u == uid);
        let best_alive = ranked.iter().copied().find(|u| self.alive(*u));
        let home_alive = self
            .home
            .is_some_and(|h| rank(h).is_some() && self.alive(h));

        // Split (quota) mode when any enabled pool has a quota: the alive quota pool furthest
        // behind its share of mining time is preferred, switching at most once per window.
        let quota: Vec<u64> = ranked
            .iter()
            .copied()
            .filter(|u| self.slot(*u).is_some_and(|s| s.cfg.quota > 0))
            .collect();
        let split_pick = self.quota_pick(&quota, now);
        let best_alive = split_pick.or(best_alive);

        // Home pool: fail over at once, fail back with hysteresis, manual switch when alive.
        let inputs = crate::policy::HomeInputs {
            best_alive,
            best_rank: best_alive.and_then(rank),
            best_healthy_for: best_alive
                .and_then(|b| self.slot(b))
                .and_then(|s| s.healthy_since)
                .map(|t| now.duration_since(t)),
            split: split_pick.is_some(),
            home: self.home,
            home_rank: self.home.and_then(rank),
            home_alive,
            manual: self.manual,
            since_last_switch: self.last_switch.map(|t| now.duration_since(t)),
            hysteresis: Duration::from_secs(self.settings.stratum.failback_hysteresis_s.into()),
        };
        if let crate::policy::HomeChoice::Switch(to, why) = crate::policy::decide_home(&inputs) {
            use crate::policy::SwitchReason as R;
            let reason = match why {
                R::Start => "start".to_string(),
                R::Removed => "pool disabled or removed".to_string(),
                R::Failover => {
                    let error = self
                        .home
                        .and_then(|h| self.slot(h))
                        .map(|s| s.last_error.as_str())
                        .unwrap_or_default();
                    format!(
                        "failover: {}",
                        if error.is_empty() { "pool down" } else { error }
                    )
                }
                R::QuotaSplit => "quota split".to_string(),
                R::Manual => "manual switch".to_string(),
                R::Failback => {
                    "failback: higher-priority pool healthy for the hysteresis window".to_string()
                }
            };
            self.set_home(to, &reason);
        }

        // Connections wanted: home, every better-ranked pool (failback probes), the session we
        // hope to resume, and while nothing is alive the ranking down to the first pool that can
        // be tried now.
        let mut wanted: HashSet<u64> = HashSet::new();
        let home_rank = self.home.and_then(rank);
        let home_alive = self
            .home
            .is_some_and(|h| rank(h).is_some() && self.alive(h));
        if let (Some(h), Some(r)) = (self.home, home_rank) {
            wanted.insert(h);
            wanted.extend(ranked[..r].iter().copied());
        }
        if let Some(u) = self.epoch_uid
            && self.epoch_conn.is_none()
            && rank(u).is_some()
        {
            wanted.insert(u);
        }
        // In split mode every quota pool stays connected, ready to take its turn.
        wanted.extend(quota.iter().copied());
        if !home_alive {
            for u in &ranked {
                wanted.insert(*u);
                let s = self.slot(*u).expect("ranked uid");
                if s.conn.is_some() || s.retry_at <= now {
                    break;
                }
            }
        }
        let donate = self.donation_slot.is_some() && {
            let ms = self.mono_ms(now);
            self.schedule.as_mut().is_some_and(|s| s.wants(ms))
        };
        if donate && home_alive {
            wanted.insert(DONATION_UID);
        }
        let all: Vec<u64> = self
            .slots
            .iter()
            .map(|s| s.uid)
            .chain(self.donation_slot.as_ref().map(|s| s.uid))
            .collect();
        for uid in all {
            let (has_conn, due) = {
                let s = self.slot(uid).expect("uid");
                (s.conn.is_some(), s.retry_at <= now)
            };
            if wanted.contains(&uid) {
                if !has_conn && due {
                    self.open(uid);
                }
            } else if has_conn {
                self.close(uid, None);
            }
        }

        // Active pool: donation in its window (only while the home pool is fine), else home.
        let want_active = if donate && home_alive && self.alive(DONATION_UID) {
            Some(DONATION_UID)
        } else {
            self.home.filter(|h| self.alive(*h))
        };
        if let Some(a) = want_active {
            let conn = self.slot(a).and_then(|s| s.conn);
            let current =
                self.epoch_uid == Some(a) && self.epoch_conn.is_some() && self.epoch_conn == conn;
            if current {
                self.active = Some(a);
            } else {
                let reason = if a == DONATION_UID {
                    "donation window".to_string()
                } else if self.active == Some(DONATION_UID) {
                    "donation window over".to_string()
                } else {
                    String::new()
                };
                self.begin_epoch(a, &reason);
            }
        }
    }

    /// Reattach a new connection of the epoch's pool when it resumed the same session.
    fn try_resume(&mut self, uid: u64) -> bool {
        let Some(conn) = self.slot(uid).and_then(|s| s.conn) else {
            return false;
        };
        let Some(c) = self.conns.get(&conn) else {
            return false;
        };
        let Some(e) = self.epoch.as_mut() else {
            return false;
        };
        if !c.session.authorized()
            || c.session.extranonce1() != e.extranonce1
            || c.session.extranonce2_size() != e.extranonce2_size
        {
            return false;
        }
        e.difficulty = c.session.difficulty();
        e.version_mask = c.session.version_mask().unwrap_or(0);
        self.epoch_conn = Some(conn);
        tracing::info!(
            epoch = e.id,
            "session resumed; the epoch's work stays valid"
        );
        self.flush_queue();
        true
    }

    /// Quota mode: the alive quota pool furthest behind its share of mined time.
    fn quota_pick(&self, quota: &[u64], now: Instant) -> Option<u64> {
        let mined = |u: u64| {
            let running = match (self.home, self.home_since) {
                (Some(h), Some(t)) if h == u => now.duration_since(t),
                _ => Duration::ZERO,
            };
            self.quota_mined.get(&u).copied().unwrap_or_default() + running
        };
        let total_quota: f64 = quota
            .iter()
            .filter_map(|u| self.slot(*u))
            .map(|s| f64::from(s.cfg.quota))
            .sum();
        let total_mined: f64 = quota.iter().map(|u| mined(*u).as_secs_f64()).sum();
        quota
            .iter()
            .copied()
            .filter(|u| self.alive(*u))
            .map(|u| {
                let share = self.slot(u).map_or(0.0, |s| f64::from(s.cfg.quota)) / total_quota;
                (share * total_mined - mined(u).as_secs_f64(), u)
            })
            // Largest deficit first; ties keep the ranking order (the earlier element wins).
            .fold(None, |best: Option<(f64, u64)>, (d, u)| match best {
                Some((bd, _)) if bd >= d => best,
                _ => Some((d, u)),
            })
            .map(|(_, u)| u)
    }

    fn set_home(&mut self, uid: u64, reason: &str) {
        if self.home == Some(uid) {
            return;
        }
        let now = Instant::now();
        if let (Some(h), Some(t)) = (self.home, self.home_since) {
            *self.quota_mined.entry(h).or_default() += now.duration_since(t);
        }
        self.home_since = Some(now);
        let from = self.home.map_or(-1, |h| self.index_of(h));
        self.home = Some(uid);
        if self.manual == Some(uid) {
            self.manual = None;
        }
        self.record_switch(from, self.index_of(uid), reason);
    }

    fn record_switch(&mut self, from: i32, to: i32, reason: &str) {
        tracing::info!(from, to, reason, "pool switch");
        self.reorder_noted = None;
        self.last_switch = Some(Instant::now());
        self.saved.switches.push(SavedSwitch {
            timestamp_ms: unix_ms(),
            from_index: from,
            to_index: to,
            reason: reason.to_string(),
        });
        let excess = self.saved.switches.len().saturating_sub(MAX_SWITCHES);
        self.saved.switches.drain(..excess);
        self.dirty = true;
        self.pools_dirty = true;
    }

    /// Start mining `uid`'s current session: new epoch, old work void, queued shares dropped.
    fn begin_epoch(&mut self, uid: u64, reason: &str) {
        let Some(conn) = self.slot(uid).and_then(|s| s.conn) else {
            return;
        };
        if self.epoch_uid == Some(uid) && self.epoch_conn.is_none() && self.try_resume(uid) {
            self.active = Some(uid);
            return;
        }
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let Some((notify, at_us)) = c.last_job.clone() else {
            return;
        };
        let (extranonce1, extranonce2_size, version_mask, difficulty) = (
            c.session.extranonce1().to_vec(),
            c.session.extranonce2_size(),
            c.session.version_mask().unwrap_or(0),
            c.session.difficulty(),
        );
        if !reason.is_empty() {
            let from = self.active.map_or(-1, |a| self.index_of(a));
            self.record_switch(from, self.index_of(uid), reason);
        }
        if uid == DONATION_UID {
            self.donation_mark = Some(Instant::now());
        } else if self.active == Some(DONATION_UID) {
            self.account_donation();
            self.donation_mark = None;
        }
        self.drop_queue("new epoch");
        let id = self.saved.next_epoch;
        self.saved.next_epoch += 1;
        let mut epoch = Epoch {
            id,
            extranonce1,
            extranonce2_size,
            version_mask,
            difficulty,
            jobs: Default::default(),
        };
        let mut n = *notify;
        n.clean_jobs = true;
        let template = epoch.add_job(&n, self.index_of(uid) as u32, at_us, uid == DONATION_UID);
        tracing::info!(epoch = id, pool = self.index_of(uid), "new epoch");
        self.epoch = Some(epoch);
        self.epoch_uid = Some(uid);
        self.epoch_conn = Some(conn);
        self.active = Some(uid);
        self.publish_job(template, true);
        self.publish_donation();
        self.dirty = true;
        self.pools_dirty = true;
    }

    // ---------------------------------------------------------------- ticks and commands

    fn tick(&mut self) {
        let now = Instant::now();
        let silent = Duration::from_secs(self.settings.stratum.silent_timeout_s.into());
        let handshake = Duration::from_secs(u64::from(self.settings.stratum.connect_timeout_s) * 2);
        let mut failing = Vec::new();
        for c in self.conns.values() {
            if let Some(auth) = c.authorized_at {
                let since = c.last_notify.unwrap_or(auth);
                if now.duration_since(since) >= silent {
                    failing.push((
                        c.uid,
                        PoolState::Silent,
                        format!("no job for {} s", silent.as_secs()),
                    ));
                }
            } else if now.duration_since(c.opened)
                >= handshake + Duration::from_secs(self.settings.stratum.connect_timeout_s.into())
            {
                failing.push((c.uid, PoolState::Dead, "handshake timed out".to_string()));
            }
        }
        for (uid, state, error) in failing {
            tracing::warn!(pool = self.index_of(uid), error = %error, "pool failed");
            self.counters(uid).remote_failures += 1;
            self.close(uid, Some((state, error, silent)));
        }
        self.account_donation();
        // Keeps "active" (set by the policy after the event that opened the channel) current.
        if let Some(focus) = self.sv2_focus.filter(|f| self.conns.contains_key(f)) {
            self.publish_sv2(focus, None);
        }
        // Share answers on declared jobs move the JD counters.
        self.publish_jd();
        if self.pools_dirty {
            self.publish_pools();
        }
        if self.dirty && now.duration_since(self.last_persist) >= PERSIST_PERIOD {
            self.persist();
        }
    }

    fn donation_deadline(&mut self) -> Option<Instant> {
        let mark = self.donation_mark?;
        let now_ms = self.mono_ms(Instant::now());
        let remaining =
            self.schedule.as_mut()?.remaining_ms(now_ms) - (now_ms - self.mono_ms(mark));
        Some(Instant::now() + Duration::from_millis(remaining.max(0) as u64))
    }

    fn account_donation(&mut self) {
        let (Some(mark), true) = (self.donation_mark, self.active == Some(DONATION_UID)) else {
            return;
        };
        let now = Instant::now();
        let (from, to) = (self.mono_ms(mark), self.mono_ms(now));
        if let Some(s) = self.schedule.as_mut() {
            s.record(from, to);
        }
        self.donation_mark = Some(now);
        self.publish_donation();
        self.dirty = true;
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// An agent built for the seams' unit tests: pools on ports nothing listens on, a config file in
/// a temp dir, and the writer's ends kept so nothing is closed under the agent.
#[cfg(test)]
pub(super) mod testkit {
    use super::*;
    use crate::state::SavedJob;

    pub(crate) struct Kit {
        pub agent: Agent,
        pub views: Views,
        pub dir: tempfile::TempDir,
        pub snapshots: watch::Receiver<Arc<Snapshot>>,
        pub durable: watch::Sender<u64>,
        _events: mpsc::Receiver<ConnEvent>,
    }

    /// `n` pools, `stratum+tcp://127.0.0.1:<1001+i>`, user `w<i>`, ranked in list order.
    pub(crate) fn pools(n: usize) -> Vec<PoolConfig> {
        (0..n)
            .map(|i| PoolConfig {
                url: format!("stratum+tcp://127.0.0.1:{}", 1001 + i),
                user: format!("w{i}"),
                priority: i as u32,
                ..Default::default()
            })
            .collect()
    }

    pub(crate) fn kit(pools: Vec<PoolConfig>, saved: SavedState, queue: Vec<QueuedShare>) -> Kit {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("svcos.toml");
        let config = Config {
            pools: pools.clone(),
            ..Default::default()
        };
        config.save(&config_path).unwrap();
        let settings = AgentSettings {
            state_path: dir.path().join("state.json"),
            config_path,
            pools,
            stratum: StratumConfig::default(),
            donation: DonationConfig::default(),
            tls: Tls::new(None).unwrap(),
        };
        let (events_tx, events) = mpsc::channel(8);
        let (persistence, snapshots, durable) = crate::persist::channels();
        let (agent, views) = Agent::new(settings, saved, queue, events_tx, persistence);
        Kit {
            agent,
            views,
            dir,
            snapshots,
            durable,
            _events: events,
        }
    }

    /// A saved job whose header fields are well formed; `taken` lists its taken shares.
    pub(crate) fn saved_job(job_id: &str, taken: &[&str]) -> SavedJob {
        SavedJob {
            job_id: job_id.into(),
            prev_hash: "11".repeat(32),
            coinb1: "01000000".into(),
            coinb2: "ffffffff".into(),
            merkle_branch: vec!["22".repeat(32)],
            version: 0x2000_0000,
            nbits: 0x1d00_ffff,
            ntime: 0x6650_0000,
            difficulty: 2.0,
            submitted: taken.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Saved state whose session (epoch `epoch`) belongs to `pool` and holds `jobs`.
    pub(crate) fn saved_session(pool: &PoolConfig, epoch: u64, jobs: Vec<SavedJob>) -> SavedState {
        SavedState {
            next_epoch: epoch + 1,
            epoch: Some(SavedEpoch {
                id: epoch,
                pool_key: pool_key(pool),
                session_id: Some("sess-1".into()),
                extranonce1: "abcd0001".into(),
                extranonce2_size: 4,
                version_mask: 0x1fff_e000,
                difficulty: 2.0,
                jobs,
            }),
            ..Default::default()
        }
    }

    /// A queued share of `epoch`/`job`, queued `age_ms` ago.
    pub(crate) fn queued(epoch: u64, job: &str, nonce: u32, age_ms: i64) -> QueuedShare {
        QueuedShare {
            epoch,
            job_id: job.into(),
            extranonce2: vec![0, 0, 0, 1],
            ntime: 0x6650_0000,
            nonce,
            version: 0x2000_0000,
            difficulty: 2.0,
            queued_at_ms: unix_ms() - age_ms,
        }
    }
}
