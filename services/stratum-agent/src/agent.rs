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
use svcos_common::redact::mask_url_userinfo;
use svcos_common::time::unix_ms;
use svcos_proto::stratum::v1::{
    GetDonationResponse, GetPoolsResponse, GetSv2StatusResponse, JobTemplate, PoolState,
    PoolStatus, PoolSwitch, ShareDisposition, SubmitShareRequest,
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
    /// Make a pool the first in priority and mine on it as soon as it is alive.
    SwitchPool(u32, Reply<()>),
    /// Enable or disable a pool (persisted).
    SetPoolEnabled(u32, bool, Reply<()>),
    /// Append a pool (persisted). Replies with its index.
    AddPool(PoolConfig, Reply<u32>),
    /// Remove a pool (persisted).
    RemovePool(u32, Reply<()>),
    /// New priority order: the pool indexes, best first (persisted).
    SetPoolPriority(Vec<u32>, Reply<()>),
    /// Re-read pools and [stratum] from the config file (donation needs a restart).
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
    /// The config could not be written.
    #[error("{0}")]
    ConfigWrite(ConfigError),
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
    backoff: Duration,
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
            backoff: Duration::from_secs(1),
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
        };
        agent.restore_epoch();
        agent.restore_queue(saved_queue);
        agent.publish_pools();
        agent.publish_donation();
        (
            agent,
            Views {
                jobs: jobs_rx,
                pools: pools_rx,
                donation: donation_rx,
                sv2: sv2_rx,
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

    // ---------------------------------------------------------------- restore / persist

    fn restore_epoch(&mut self) {
        let Some(saved) = self.saved.epoch.clone() else {
            return;
        };
        let Some(index) = self.slots.iter().position(|s| s.key == saved.pool_key) else {
            return;
        };
        let (Ok(extranonce1), true) = (hex::decode(&saved.extranonce1), saved.extranonce2_size > 0)
        else {
            return;
        };
        let mut epoch = Epoch {
            id: saved.id,
            extranonce1,
            extranonce2_size: saved.extranonce2_size,
            version_mask: saved.version_mask,
            difficulty: saved.difficulty,
            jobs: Default::default(),
        };
        for j in &saved.jobs {
            let Some(n) = saved_to_notify(j) else {
                continue;
            };
            epoch.difficulty = j.difficulty;
            epoch.add_job(&n, index as u32, unix_ms() * 1000, false);
            if let Some(slot) = epoch.jobs.back_mut() {
                slot.submitted = j
                    .submitted
                    .iter()
                    .filter_map(|k| parse_share_key(k))
                    .collect();
            }
        }
        epoch.difficulty = saved.difficulty;
        self.slots[index].session_id = saved.session_id.clone();
        let uid = self.slots[index].uid;
        self.saved.next_epoch = self.saved.next_epoch.max(saved.id + 1);
        if let Some(current) = epoch.current() {
            tracing::info!(
                epoch = epoch.id,
                pool = index,
                "resuming the saved session's jobs until the pool answers"
            );
            self.clean_seq += 1;
            let mut t = (*current).clone();
            t.clean_jobs = true;
            self.jobs_tx.send_replace(Some(Published {
                template: Arc::new(t),
                clean_seq: self.clean_seq,
            }));
        }
        self.epoch = Some(epoch);
        self.epoch_uid = Some(uid);
        self.home = Some(uid);
        self.active = Some(uid);
    }

    /// Take back the queue saved by the previous process: shares of the restored session go out
    /// when it resumes; the rest are dropped here, each logged with its reason.
    fn restore_queue(&mut self, saved: Vec<QueuedShare>) {
        if saved.is_empty() {
            return;
        }
        let (kept, dropped) = sharequeue::revalidate(saved, self.epoch.as_ref(), unix_ms());
        for (share, why) in &dropped {
            tracing::info!(
                epoch = share.epoch,
                job = %share.job_id,
                why = why.as_str(),
                "saved queued share dropped"
            );
        }
        if !dropped.is_empty() {
            let n = dropped.len() as u64;
            self.saved.totals.discarded += n;
            if let Some(u) = self.epoch_uid {
                self.counters(u).discarded += n;
            }
        }
        if let Some(epoch) = self.epoch.as_mut() {
            for share in &kept {
                // Already marked when it was taken, unless the state file lagged: a resubmission
                // by hw-agent must be a duplicate either way.
                if let Some(slot) = epoch
                    .jobs
                    .iter_mut()
                    .find(|j| j.template.job_id == share.job_id)
                {
                    slot.submitted.insert(share.key());
                }
            }
        }
        tracing::info!(
            kept = kept.len(),
            dropped = dropped.len(),
            "saved share queue restored; kept shares go out when the session resumes"
        );
        for share in kept {
            self.queue.push(share);
        }
        self.dirty = true;
    }

    fn state_bytes(&mut self) -> Vec<u8> {
        let now_ms = self.mono_ms(Instant::now());
        if let Some(s) = self.schedule.as_mut() {
            self.saved.donation_cycle_start_ms = unix_ms() - s.cycle_elapsed_ms(now_ms);
            self.saved.donation_mined_cycle_ms = s.mined_cycle_ms();
        }
        self.saved.donation_mined_total_ms = self
            .schedule
            .as_ref()
            .map_or(self.saved.donation_mined_total_ms, |s| s.mined_total_ms);
        self.saved.epoch = match (&self.epoch, self.epoch_uid.and_then(|u| self.slot(u))) {
            (Some(e), Some(slot)) => Some(SavedEpoch {
                id: e.id,
                pool_key: slot.key.clone(),
                session_id: slot.session_id.clone(),
                extranonce1: hex::encode(&e.extranonce1),
                extranonce2_size: e.extranonce2_size,
                version_mask: e.version_mask,
                difficulty: e.difficulty,
                jobs: e.jobs.iter().map(job_to_saved).collect(),
            }),
            _ => None,
        };
        serde_json::to_vec(&self.saved).unwrap_or_default()
    }

    fn persist(&mut self) {
        let state = self.state_bytes();
        self.generation += 1;
        self.persistence.tx.send_replace(Arc::new(Snapshot {
            generation: self.generation,
            queue: self.queue.encode(),
            state,
        }));
        self.dirty = false;
        self.last_persist = Instant::now();
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

    fn publish_job(&mut self, template: Arc<JobTemplate>, clean: bool) {
        if clean {
            self.clean_seq += 1;
        }
        self.jobs_tx.send_replace(Some(Published {
            template,
            clean_seq: self.clean_seq,
        }));
    }

    fn drop_queue(&mut self, why: &str) {
        if self.queue.is_empty() {
            return;
        }
        tracing::info!(
            count = self.queue.len(),
            why,
            "dropping queued shares: their session is gone"
        );
        let n = self.queue.clear() as u64;
        self.dirty = true;
        self.saved.totals.discarded += n;
        if let Some(u) = self.epoch_uid {
            self.counters(u).discarded += n;
        }
    }

    // ---------------------------------------------------------------- connections

    fn open(&mut self, uid: u64) {
        let conn = self.next_conn;
        self.next_conn += 1;
        let stratum = self.settings.stratum.clone();
        let tls = self.settings.tls.clone();
        let events = self.events_tx.clone();
        let Some(slot) = self.slot_mut(uid) else {
            return;
        };
        let Some(mut url) = slot.url.clone() else {
            return;
        };
        if let Some(p) = slot.redirect_port {
            url.port = p;
        }
        if url.scheme == Scheme::V2 {
            if !stratum.sv2_enabled {
                slot.state = PoolState::Dead;
                slot.last_error =
                    "Stratum V2 is behind the readiness gate ([stratum].sv2_enabled = false)"
                        .into();
                slot.retry_at = Instant::now() + MAX_BACKOFF;
                return;
            }
            let key = url
                .authority_key
                .clone()
                .ok_or_else(|| {
                    "a stratum2+tcp:// pool URL needs the pool's authority key: stratum2+tcp://host:port/<base58 key>".to_string()
                })
                .and_then(|b58| crate::v2::parse_authority_key(&b58).map(|k| (k, b58)));
            let (key, b58) = match key {
                Ok(k) => k,
                Err(e) => {
                    slot.state = PoolState::Dead;
                    slot.last_error = e;
                    slot.retry_at = Instant::now() + MAX_BACKOFF;
                    return;
                }
            };
            let params = Sv2Params {
                user: slot.cfg.user.clone(),
                version_rolling: stratum.version_rolling,
                endpoint_host: url.host.clone(),
                endpoint_port: url.port,
                device_id: String::new(),
            };
            let link = Sv2Link {
                endpoint: url.addr(),
                authority_b58: b58.clone(),
                fingerprint: crate::v2::fingerprint(&key),
                handshake: "in_progress",
                handshake_log: vec![LoggedMessage {
                    at_ms: unix_ms(),
                    direction: "out",
                    message_type: "NoiseHandshake".into(),
                    summary: "act 1: -> e (ElligatorSwift ephemeral key, 64 bytes)".into(),
                }],
                ..Default::default()
            };
            slot.conn = Some(conn);
            if slot.state != PoolState::AuthFailed && slot.state != PoolState::Silent {
                slot.state = PoolState::Connecting;
            }
            tracing::debug!(pool = %mask_url_userinfo(&slot.cfg.url), conn, "connecting (Stratum V2)");
            let handle = crate::v2::conn::spawn(
                conn,
                url,
                (key, b58),
                Duration::from_secs(stratum.connect_timeout_s.into()),
                events,
            );
            self.conns.insert(
                conn,
                ConnState {
                    uid,
                    handle,
                    session: PoolSession::V2(Box::new(Sv2Session::new(params)), Box::new(link)),
                    opened: Instant::now(),
                    connected: false,
                    authorized_at: None,
                    last_notify: None,
                    last_job: None,
                },
            );
            self.publish_sv2(conn, None);
            self.pools_dirty = true;
            return;
        }
        let session = Session::new(SessionParams {
            user: slot.cfg.user.clone(),
            password: slot.cfg.password.clone(),
            version_rolling: stratum.version_rolling,
            suggest_difficulty: stratum.suggest_difficulty,
            resume: slot.session_id.clone(),
        });
        slot.conn = Some(conn);
        if slot.state != PoolState::AuthFailed && slot.state != PoolState::Silent {
            slot.state = PoolState::Connecting;
        }
        tracing::debug!(pool = %mask_url_userinfo(&slot.cfg.url), conn, "connecting");
        let handle = conn::spawn(
            conn,
            url,
            tls,
            Duration::from_secs(stratum.connect_timeout_s.into()),
            events,
        );
        self.conns.insert(
            conn,
            ConnState {
                uid,
                handle,
                session: PoolSession::V1(Box::new(session)),
                opened: Instant::now(),
                connected: false,
                authorized_at: None,
                last_notify: None,
                last_job: None,
            },
        );
        self.pools_dirty = true;
    }

    /// Close a slot's connection; `failure` marks it failed with that state and error.
    fn close(&mut self, uid: u64, failure: Option<(PoolState, String, Duration)>) {
        let Some(slot) = self.slot_mut(uid) else {
            return;
        };
        let Some(conn) = slot.conn.take() else { return };
        slot.healthy_since = None;
        slot.connected_since_ms = 0;
        if let Some((state, error, retry)) = failure {
            slot.state = state;
            slot.last_error = error;
            slot.retry_at = Instant::now() + retry;
        } else if slot.cfg.enabled || uid == DONATION_UID {
            slot.state = PoolState::Connecting;
        } else {
            slot.state = PoolState::Disabled;
        }
        self.conns.remove(&conn);
        if self.epoch_conn == Some(conn) {
            self.epoch_conn = None;
        }
        self.pools_dirty = true;
    }

    fn conn_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Connected(conn) => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.connected = true;
                let uid = c.uid;
                let events = match &mut c.session {
                    PoolSession::V1(session) => {
                        for l in session.start() {
                            c.handle.send(l);
                        }
                        Vec::new()
                    }
                    PoolSession::V2(session, _) => session.start(unix_ms()),
                };
                if let Some(s) = self.slot_mut(uid) {
                    s.connected_since_ms = unix_ms();
                }
                for ev in events {
                    self.on_session_event(conn, uid, ev, svcos_common::time::unix_us());
                }
                self.publish_sv2(conn, None);
            }
            ConnEvent::Line { conn, line, at_us } => self.on_line(conn, &line, at_us),
            ConnEvent::Sv2Handshake {
                conn,
                ok,
                detail,
                at_ms,
            } => {
                if let Some(PoolSession::V2(_, link)) =
                    self.conns.get_mut(&conn).map(|c| &mut c.session)
                {
                    link.handshake = if ok { "ok" } else { "failed" };
                    link.handshake_detail = detail.clone();
                    link.handshake_at_ms = at_ms;
                    link.handshake_log.push(LoggedMessage {
                        at_ms,
                        direction: "in",
                        message_type: "NoiseHandshake".into(),
                        summary: if ok {
                            "act 2: <- e, ee, s, es, certificate (verified)".into()
                        } else {
                            format!("act 2 failed: {detail}")
                        },
                    });
                }
                if !ok {
                    tracing::warn!(conn, error = %detail, "Stratum V2 handshake failed");
                }
                self.publish_sv2(conn, None);
            }
            ConnEvent::Frame { conn, frame, at_us } => self.on_frame(conn, &frame, at_us),
            ConnEvent::Closed { conn, error } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                let uid = c.uid;
                let (connected, was_alive) = (c.connected, c.authorized_at.is_some());
                tracing::info!(pool = self.index_of(uid), error = %error, "pool connection closed");
                if matches!(c.session, PoolSession::V2(..)) {
                    self.publish_sv2(conn, Some(&error));
                }
                {
                    let counters = self.counters(uid);
                    if connected {
                        counters.remote_failures += 1
                    } else {
                        counters.get_failures += 1
                    }
                }
                let Some(slot) = self.slot_mut(uid) else {
                    return;
                };
                // A session that worked is retried at once (to resume it); failures back off.
                let retry = if was_alive {
                    slot.backoff = Duration::from_secs(1);
                    Duration::ZERO
                } else {
                    let b = slot.backoff;
                    slot.backoff = (b * 2).min(MAX_BACKOFF);
                    b
                };
                let state = if slot.state == PoolState::AuthFailed {
                    PoolState::AuthFailed
                } else {
                    PoolState::Dead
                };
                self.close(uid, Some((state, error, retry)));
            }
        }
    }

    fn on_line(&mut self, conn: ConnId, line: &[u8], at_us: i64) {
        let msg = match parse_line(line) {
            Ok(m) => m,
            Err(e) => {
                // Garbage is skipped, not fatal: the silence timeout catches a pool that sends
                // nothing else.
                tracing::debug!(conn, error = %e, "unparseable line from pool");
                return;
            }
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let uid = c.uid;
        let PoolSession::V1(session) = &mut c.session else {
            return;
        };
        let events = session.handle(msg);
        for ev in events {
            self.on_session_event(conn, uid, ev, at_us);
            if !self.conns.contains_key(&conn) {
                return;
            }
        }
    }

    fn on_frame(&mut self, conn: ConnId, frame: &[u8], at_us: i64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let uid = c.uid;
        let PoolSession::V2(session, _) = &mut c.session else {
            return;
        };
        let events = session.handle(frame, at_us / 1000);
        for ev in events {
            self.on_session_event(conn, uid, ev, at_us);
            if !self.conns.contains_key(&conn) {
                return;
            }
        }
        self.publish_sv2(conn, None);
    }

    /// Rebuild the SV2 status from connection `conn` when it is the one to report: the mining
    /// connection first, else the latest SV2 connection. `closed` keeps a dead connection's
    /// final state (and why) visible.
    fn publish_sv2(&mut self, conn: ConnId, closed: Option<&str>) {
        let focus_alive = self
            .sv2_focus
            .is_some_and(|f| f != conn && self.conns.contains_key(&f));
        let focus_mining = self.sv2_focus.is_some() && self.sv2_focus == self.epoch_conn;
        if focus_alive && (focus_mining || self.epoch_conn != Some(conn)) {
            return;
        }
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let PoolSession::V2(session, link) = &c.session else {
            return;
        };
        self.sv2_focus = Some(conn);
        let snapshot = crate::v2::status::snapshot(
            link,
            Some(session),
            self.index_of(c.uid),
            self.epoch_conn == Some(conn),
            closed,
        );
        self.sv2_tx.send_replace(snapshot);
    }

    fn on_session_event(&mut self, conn: ConnId, uid: u64, ev: SessionEvent, at_us: i64) {
        let now = Instant::now();
        match ev {
            SessionEvent::Send(line) => {
                if let Some(c) = self.conns.get(&conn) {
                    c.handle.send(line);
                }
            }
            SessionEvent::SendFrame(frame) => {
                if let Some(c) = self.conns.get(&conn) {
                    c.handle.send_bytes(frame);
                }
            }
            SessionEvent::Subscribed { resumed } => {
                let sid = self.conns.get(&conn).and_then(|c| c.session.session_id());
                if let Some(s) = self.slot_mut(uid) {
                    s.session_id = sid;
                }
                tracing::debug!(conn, resumed, "subscribed");
            }
            SessionEvent::Authorized => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.authorized_at = Some(now);
                }
                if let Some(s) = self.slot_mut(uid) {
                    s.backoff = Duration::from_secs(1);
                    s.last_error.clear();
                }
                if self.epoch_uid == Some(uid)
                    && self.epoch_conn.is_none()
                    && self.active == Some(uid)
                {
                    self.try_resume(uid);
                }
                self.pools_dirty = true;
            }
            SessionEvent::Refused(reason) => {
                tracing::warn!(pool = self.index_of(uid), reason = %reason, "pool refused us");
                self.counters(uid).remote_failures += 1;
                self.close(uid, Some((PoolState::AuthFailed, reason, AUTH_RETRY)));
            }
            SessionEvent::Job(n) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.last_notify = Some(now);
                    c.last_job = Some((n.clone(), at_us));
                }
                if let Some(s) = self.slot_mut(uid) {
                    s.state = PoolState::Alive;
                    s.healthy_since.get_or_insert(now);
                }
                if self.epoch_conn == Some(conn) {
                    let index = self.index_of(uid) as u32;
                    let epoch = self.epoch.as_mut().expect("epoch of epoch_conn");
                    let t = epoch.add_job(&n, index, at_us, uid == DONATION_UID);
                    let clean = n.clean_jobs;
                    if clean {
                        self.drop_queue("clean jobs");
                    }
                    self.publish_job(t, clean);
                    self.dirty = true;
                }
                self.pools_dirty = true;
            }
            SessionEvent::Difficulty(d) => {
                if self.epoch_conn == Some(conn)
                    && let Some(e) = self.epoch.as_mut()
                {
                    e.difficulty = d;
                    if let Some(t) = e.refresh_current() {
                        self.publish_job(t, false);
                    }
                }
                self.pools_dirty = true;
            }
            SessionEvent::VersionMask(mask) => {
                if self.epoch_conn == Some(conn)
                    && let Some(e) = self.epoch.as_mut()
                {
                    e.version_mask = mask.unwrap_or(0);
                    if let Some(t) = e.refresh_current() {
                        self.publish_job(t, false);
                    }
                }
                self.pools_dirty = true;
            }
            SessionEvent::ExtranonceChanged => {
                if self.epoch_conn == Some(conn) {
                    // The coinbase changes under every job: a new epoch from the latest job.
                    self.epoch_uid = None;
                    self.begin_epoch(uid, "");
                }
            }
            SessionEvent::ShareResult {
                ticket,
                accepted,
                reason,
            } => self.on_share_result(ticket, accepted, reason.map(|r| r.message)),
            SessionEvent::Reconnect { host, port, wait_s } => {
                let Some(slot) = self.slot_mut(uid) else {
                    return;
                };
                // Only a port change on the same host is followed: a pool must not be able to
                // send the miner's hashrate to an arbitrary host.
                let same_host = host
                    .as_deref()
                    .is_none_or(|h| slot.url.as_ref().is_some_and(|u| u.host == h));
                if same_host {
                    slot.redirect_port = port;
                } else {
                    tracing::warn!(pool = %mask_url_userinfo(&slot.cfg.url), "client.reconnect to another host ignored; reconnecting to the configured one");
                }
                let error = "pool asked to reconnect".to_string();
                self.close(
                    uid,
                    Some((PoolState::Connecting, error, Duration::from_secs(wait_s))),
                );
            }
            SessionEvent::Message(m) => {
                tracing::info!(pool = self.index_of(uid), message = %m, "message from pool");
            }
        }
    }

    fn on_share_result(&mut self, ticket: u64, accepted: bool, reason: Option<String>) {
        let Some(t) = self.tickets.remove(&ticket) else {
            return;
        };
        let latency_ms = t.sent.elapsed().as_secs_f64() * 1000.0;
        let key = t.key.clone();
        let c = self.saved.pools.entry(key).or_default();
        c.last_share_time_ms = unix_ms();
        c.last_share_latency_ms = latency_ms;
        let totals = &mut self.saved.totals;
        if accepted {
            c.accepted += 1;
            c.accepted_difficulty += t.difficulty;
            totals.accepted += 1;
            totals.accepted_difficulty += t.difficulty;
        } else {
            let reason = reason.unwrap_or_else(|| "rejected".into());
            // Pools word stale rejects differently; count them as stale as well.
            let stale = reason.to_ascii_lowercase().contains("stale")
                || reason.to_ascii_lowercase().contains("job not found");
            c.rejected += 1;
            c.rejected_difficulty += t.difficulty;
            totals.rejected += 1;
            totals.rejected_difficulty += t.difficulty;
            if stale {
                c.stale += 1;
                totals.stale += 1;
            }
            *c.reject_reasons.entry(reason.clone()).or_default() += 1;
            *totals.reject_reasons.entry(reason).or_default() += 1;
        }
        // Counters are persisted on change: a crash right after must not lose this answer.
        self.urgent = true;
        self.pools_dirty = true;
    }

    // ---------------------------------------------------------------- shares

    fn submit(&mut self, req: SubmitShareRequest) -> Result<ShareDisposition, AgentError> {
        let Some(epoch) = self.epoch.as_mut().filter(|e| e.id == req.pool_epoch) else {
            self.saved.totals.stale += 1;
            self.pools_dirty = true;
            return Ok(ShareDisposition::Stale);
        };
        let uid = self.epoch_uid.expect("epoch has a pool");
        let checked = match epoch.check(
            &req.job_id,
            &req.extranonce2,
            req.ntime,
            req.nonce,
            req.version,
        ) {
            Ok(c) => c,
            Err(ShareCheck::Stale) => {
                self.saved.totals.stale += 1;
                self.counters(uid).stale += 1;
                self.pools_dirty = true;
                return Ok(ShareDisposition::Stale);
            }
            Err(ShareCheck::Duplicate) => return Ok(ShareDisposition::Duplicate),
            Err(ShareCheck::Malformed(m)) => return Err(AgentError::MalformedShare(m)),
            Err(ShareCheck::BelowTarget(_)) => {
                self.saved.totals.discarded += 1;
                self.counters(uid).discarded += 1;
                return Ok(ShareDisposition::BelowTarget);
            }
        };
        {
            let c = self.counters(uid);
            c.best_share = c.best_share.max(checked.achieved);
            if checked.block {
                c.found_blocks += 1;
            }
        }
        self.saved.totals.best_share = self.saved.totals.best_share.max(checked.achieved);
        if checked.block {
            self.saved.totals.found_blocks += 1;
            tracing::info!(
                difficulty = checked.achieved,
                "share meets the block target"
            );
        }
        let share = QueuedShare {
            epoch: req.pool_epoch,
            job_id: req.job_id,
            extranonce2: req.extranonce2,
            ntime: req.ntime,
            nonce: req.nonce,
            version: req.version,
            difficulty: checked.target,
            queued_at_ms: unix_ms(),
        };
        let disposition = if self.write_share(&share) {
            ShareDisposition::Submitted
        } else {
            if self.queue.push(share).is_some() {
                self.saved.totals.discarded += 1;
            }
            ShareDisposition::Queued
        };
        // Written at once: a restart must know this share was taken, or it could go out twice.
        self.urgent = true;
        self.pools_dirty = true;
        Ok(disposition)
    }

    /// Write a share to the epoch's connection when it is up and authorised.
    fn write_share(&mut self, share: &QueuedShare) -> bool {
        let Some(conn) = self.epoch_conn else {
            return false;
        };
        let ticket = self.next_ticket;
        let Some(c) = self.conns.get_mut(&conn).filter(|c| c.session.authorized()) else {
            return false;
        };
        let submit = ShareSubmit {
            job_id: &share.job_id,
            extranonce2: &share.extranonce2,
            ntime: share.ntime,
            nonce: share.nonce,
            version: share.version,
        };
        let sent = match &mut c.session {
            PoolSession::V1(session) => c.handle.send(session.submit(ticket, submit)),
            PoolSession::V2(session, _) => session
                .submit(ticket, submit, unix_ms())
                .is_some_and(|frame| c.handle.send_bytes(frame)),
        };
        if !sent {
            return false;
        }
        let uid = c.uid;
        self.next_ticket += 1;
        if self.tickets.len() >= crate::v1::session::MAX_PENDING {
            // The session forgets requests this old too; their answers will never be matched.
            let floor = ticket.saturating_sub(crate::v1::session::MAX_PENDING as u64);
            self.tickets.retain(|t, _| *t > floor);
        }
        let key = self.slot(uid).map_or_else(String::new, |s| s.key.clone());
        self.tickets.insert(
            ticket,
            Ticket {
                key,
                difficulty: share.difficulty,
                sent: Instant::now(),
            },
        );
        true
    }

    fn flush_queue(&mut self) {
        let queued = self.queue.take();
        let current = self.epoch.as_ref().map(|e| e.id);
        let mut sent = 0;
        for share in queued {
            let valid = Some(share.epoch) == current
                && self
                    .epoch
                    .as_ref()
                    .is_some_and(|e| e.has_job(&share.job_id));
            if valid && self.write_share(&share) {
                sent += 1;
            } else if valid {
                self.queue.push(share);
            } else {
                self.saved.totals.stale += 1;
            }
        }
        if sent > 0 {
            tracing::info!(sent, "queued shares submitted after reconnect");
            self.persist();
        }
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

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(req, reply) => {
                match self.submit(req) {
                    // Held until the queue is on disk: hw-agent forgets the share on answer.
                    Ok(ShareDisposition::Queued) => {
                        self.waiting.push((self.generation + 1, reply));
                    }
                    other => {
                        let _ = reply.send(other);
                    }
                }
                // The state write follows in the run loop, after the connection task has
                // written the share (see `run`).
                return;
            }
            Command::SwitchPool(index, reply) => {
                let r = self.reorder_first(index).map(|uid| {
                    self.manual = Some(uid);
                    self.last_switch = None;
                });
                let _ = reply.send(r);
            }
            Command::SetPoolEnabled(index, enabled, reply) => {
                let r = self.slot_at(index).and_then(|i| {
                    let before = self.slots[i].cfg.enabled;
                    self.slots[i].cfg.enabled = enabled;
                    self.save_pools()
                        .inspect_err(|_| self.slots[i].cfg.enabled = before)?;
                    let uid = self.slots[i].uid;
                    if !enabled {
                        self.close(uid, None);
                        self.slots[i].state = PoolState::Disabled;
                    } else {
                        self.slots[i].state = PoolState::Connecting;
                        self.slots[i].retry_at = Instant::now();
                    }
                    Ok(())
                });
                let _ = reply.send(r);
            }
            Command::AddPool(cfg, reply) => {
                let r = (|| {
                    let index = self.slots.len();
                    let mut cfg = cfg;
                    cfg.priority = self
                        .slots
                        .iter()
                        .map(|s| s.cfg.priority + 1)
                        .max()
                        .unwrap_or(0);
                    cfg.validate(&format!("pools[{index}]"))
                        .map_err(AgentError::Invalid)?;
                    let uid = self.next_uid;
                    self.next_uid += 1;
                    self.slots.push(PoolSlot::new(uid, cfg, Instant::now()));
                    self.save_pools().inspect_err(|_| {
                        self.slots.pop();
                    })?;
                    Ok(index as u32)
                })();
                let _ = reply.send(r);
            }
            Command::RemovePool(index, reply) => {
                let r = self.slot_at(index).and_then(|i| {
                    let removed = self.slots.remove(i);
                    if let Err(e) = self.save_pools() {
                        self.slots.insert(i, removed);
                        return Err(e);
                    }
                    if let Some(c) = removed.conn {
                        self.conns.remove(&c);
                        if self.epoch_conn == Some(c) {
                            self.epoch_conn = None;
                        }
                    }
                    Ok(())
                });
                let _ = reply.send(r);
            }
            Command::SetPoolPriority(order, reply) => {
                let r = self.set_order(&order);
                let _ = reply.send(r);
            }
            Command::ReloadConfig(reply) => {
                let r = self.reload();
                let _ = reply.send(r);
            }
        }
        self.pools_dirty = true;
        self.publish_pools();
    }

    fn slot_at(&self, index: u32) -> Result<usize, AgentError> {
        let i = index as usize;
        if i < self.slots.len() {
            Ok(i)
        } else {
            Err(AgentError::NoSuchPool(index))
        }
    }

    fn reorder_first(&mut self, index: u32) -> Result<u64, AgentError> {
        let i = self.slot_at(index)?;
        let uid = self.slots[i].uid;
        let mut order: Vec<u32> = self
            .ranked_all()
            .into_iter()
            .filter(|u| *u != uid)
            .filter_map(|u| self.slots.iter().position(|s| s.uid == u).map(|p| p as u32))
            .collect();
        order.insert(0, index);
        self.set_order(&order)?;
        Ok(uid)
    }

    /// Every pool (enabled or not) best first.
    fn ranked_all(&self) -> Vec<u64> {
        let mut v: Vec<(u32, usize, u64)> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.cfg.priority, i, s.uid))
            .collect();
        v.sort();
        v.into_iter().map(|(_, _, u)| u).collect()
    }

    fn set_order(&mut self, order: &[u32]) -> Result<(), AgentError> {
        let mut seen: Vec<u32> = order.to_vec();
        seen.sort_unstable();
        if seen != (0..self.slots.len() as u32).collect::<Vec<_>>() {
            return Err(AgentError::BadOrder);
        }
        let before: Vec<u32> = self.slots.iter().map(|s| s.cfg.priority).collect();
        for (prio, index) in order.iter().enumerate() {
            self.slots[*index as usize].cfg.priority = prio as u32;
        }
        self.save_pools().inspect_err(|_| {
            for (s, p) in self.slots.iter_mut().zip(before) {
                s.cfg.priority = p;
            }
        })
    }

    /// Save the pool list into the config file, keeping every other section as it is on disk.
    fn save_pools(&mut self) -> Result<(), AgentError> {
        let path = &self.settings.config_path;
        let mut config = Config::load(path).map_err(AgentError::ConfigWrite)?;
        config.pools = self.slots.iter().map(|s| s.cfg.clone()).collect();
        config.save(path).map_err(|e| match e {
            ConfigError::Invalid { .. } => AgentError::Invalid(e),
            other => AgentError::ConfigWrite(other),
        })
    }

    fn reload(&mut self) -> Result<(), AgentError> {
        let config = Config::load(&self.settings.config_path).map_err(AgentError::Invalid)?;
        self.settings.stratum = config.stratum.clone();
        let now = Instant::now();
        let mut old: Vec<PoolSlot> = std::mem::take(&mut self.slots);
        for cfg in config.pools {
            let key = pool_key(&cfg);
            let slot = match old.iter().position(|s| s.key == key) {
                Some(p) => {
                    let mut s = old.remove(p);
                    s.cfg = cfg;
                    s
                }
                None => {
                    let uid = self.next_uid;
                    self.next_uid += 1;
                    PoolSlot::new(uid, cfg, now)
                }
            };
            self.slots.push(slot);
        }
        for s in old {
            if let Some(c) = s.conn {
                self.conns.remove(&c);
                if self.epoch_conn == Some(c) {
                    self.epoch_conn = None;
                }
            }
        }
        if self.sv2_focus.is_none_or(|f| !self.conns.contains_key(&f))
            || !self.settings.stratum.sv2_enabled
        {
            self.sv2_focus = None;
            let idle = sv2_idle(
                &self.settings.stratum,
                self.slots
                    .iter()
                    .map(|s| (s.cfg.enabled, s.cfg.url.as_str())),
            );
            self.sv2_tx.send_replace(idle);
        }
        for i in 0..self.slots.len() {
            if !self.slots[i].cfg.enabled {
                let uid = self.slots[i].uid;
                self.close(uid, None);
                self.slots[i].state = PoolState::Disabled;
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- snapshots

    fn publish_pools(&mut self) {
        self.pools_dirty = false;
        self.last_pools_publish = Instant::now();
        let now_ms = unix_ms();
        let pools = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let c = self.saved.pools.get(&s.key).cloned().unwrap_or_default();
                let session = s.conn.and_then(|c| self.conns.get(&c)).map(|c| &c.session);
                PoolStatus {
                    index: i as u32,
                    // Every reader of the snapshot shows it (status, metrics, cgminer, MQTT).
                    url: mask_url_userinfo(&s.cfg.url).into_owned(),
                    user: s.cfg.user.clone(),
                    priority: s.cfg.priority,
                    state: (if s.cfg.enabled {
                        s.state
                    } else {
                        PoolState::Disabled
                    }) as i32,
                    active: self.active == Some(s.uid),
                    enabled: s.cfg.enabled,
                    quota: s.cfg.quota,
                    accepted: c.accepted,
                    rejected: c.rejected,
                    stale: c.stale,
                    accepted_difficulty: c.accepted_difficulty,
                    rejected_difficulty: c.rejected_difficulty,
                    best_share: c.best_share,
                    difficulty: session.map_or(0.0, |s| s.difficulty()),
                    get_failures: c.get_failures,
                    remote_failures: c.remote_failures,
                    last_share_time: c.last_share_time_ms / 1000,
                    last_share_latency_ms: c.last_share_latency_ms,
                    version_rolling: session.is_some_and(|s| s.version_mask().is_some()),
                    version_mask: session.and_then(|s| s.version_mask()).unwrap_or(0),
                    last_error: s.last_error.clone(),
                    reject_reasons: c.reject_reasons.clone().into_iter().collect(),
                    discarded: c.discarded,
                    protocol: match s.url.as_ref().map(|u| u.scheme) {
                        Some(Scheme::Tls) => "stratum+ssl",
                        Some(Scheme::V2) => "stratum2+tcp",
                        _ => "stratum+tcp",
                    }
                    .to_string(),
                    connected_since: s.connected_since_ms / 1000,
                }
            })
            .collect();
        let t = &self.saved.totals;
        let snapshot = GetPoolsResponse {
            pools,
            active_index: self.active.map_or(-1, |a| self.index_of(a)),
            accepted: t.accepted,
            rejected: t.rejected,
            stale: t.stale,
            best_share: t.best_share,
            switches: self
                .saved
                .switches
                .iter()
                .map(|s| PoolSwitch {
                    timestamp_ms: s.timestamp_ms,
                    from_index: s.from_index,
                    to_index: s.to_index,
                    reason: s.reason.clone(),
                })
                .collect(),
            share_difficulty: self.epoch.as_ref().map_or(0.0, |e| e.difficulty),
            found_blocks: t.found_blocks,
            counters_since_s: ((now_ms - self.saved.counters_since_ms).max(0) / 1000) as u64,
            donation_active: self.active == Some(DONATION_UID),
        };
        self.pools_tx.send_replace(snapshot);
        self.publish_donation();
    }

    fn publish_donation(&mut self) {
        let d = &self.settings.donation;
        let resp = GetDonationResponse {
            enabled: self.schedule.is_some(),
            percent: if self.schedule.is_some() {
                d.percent
            } else {
                0.0
            },
            cycle_s: d.cycle_s,
            pool_url: mask_url_userinfo(&d.pool_url).into_owned(),
            mined_s_current_cycle: self
                .schedule
                .as_ref()
                .map_or(0.0, |s| s.mined_cycle_ms() as f64 / 1000.0),
            mined_s_total: self
                .schedule
                .as_ref()
                .map_or(self.saved.donation_mined_total_ms, |s| s.mined_total_ms)
                as f64
                / 1000.0,
            active_now: self.active == Some(DONATION_UID),
        };
        self.donation_tx.send_replace(resp);
    }
}

/// The SV2 status before any SV2 connection: gate off, or no SV2 pool tried yet.
fn sv2_idle<'a>(
    stratum: &StratumConfig,
    mut pools: impl Iterator<Item = (bool, &'a str)>,
) -> GetSv2StatusResponse {
    let enabled = stratum.sv2_enabled;
    let configured = pools.any(|(on, url)| on && url.starts_with("stratum2+tcp://"));
    GetSv2StatusResponse {
        enabled,
        state: match (enabled, configured) {
            (false, _) => "disabled",
            (true, false) => "no_pool",
            (true, true) => "connecting",
        }
        .to_string(),
        handshake: "none".into(),
        pool_index: -1,
        last_error: if enabled {
            String::new()
        } else {
            "Stratum V2 is behind the readiness gate ([stratum].sv2_enabled = false)".into()
        },
        ..Default::default()
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
