//! The home swarm: units on one LAN that share one room reading and one circuit budget
//! (`[swarm]`; docs/DESIGN.md "Home swarm").
//!
//! Every member sends a signed *beat* once a second to the static peers of `[swarm].peers` and
//! to every member it has heard from: who it is, its measured power, its own limit and its
//! J/TH, the newest room reading it knows and, from the leader, the allocation. A beat is
//! `SVW1` + HMAC-SHA256(key, `SVW1` + payload) + JSON payload; a datagram whose tag does not
//! verify, that is malformed, or that repeats or predates what its sender already sent (per
//! boot sequence, and a send time within [`MAX_SKEW_MS`] of ours) is dropped and counted.
//!
//! Rules (pure functions here, the socket in [`run`]):
//! - members are live while a beat arrived in the last [`MEMBER_TIMEOUT_MS`];
//! - the leader is the live member with the lowest unit id ([`leader`]);
//! - the leader splits the budget in proportion to 1/(J/TH), capped at each member's own limit,
//!   the rest shared again among the others ([`split`]); a new allocation gets a new epoch;
//! - each member's share is its governor's `swarm` limit, one more minimum beside the others,
//!   so the swarm only ever lowers a unit ([`choose_share`] says which share applies);
//! - a room reading posted on any member travels in the beats; the newest one wins and feeds
//!   every member's thermostat once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use svcos_common::Shutdown;
use svcos_common::config::SwarmConfig;
use tokio::net::UdpSocket;

use super::Power;

/// How often a member sends its beat and the leader re-splits.
pub const BEAT: Duration = Duration::from_secs(1);
/// A member that sent nothing for this long has left (five missed beats).
pub const MEMBER_TIMEOUT_MS: i64 = 5_000;
/// How long a member keeps its last share once no live leader allocates one to it.
pub const SHARE_HOLD_MS: i64 = 30_000;
/// A beat sent further from our clock than this is refused (a replay of an old capture).
pub const MAX_SKEW_MS: i64 = 30_000;
/// The rule, as `GET /api/swarm` names it.
pub const RULE: &str = "proportional_to_inverse_j_per_th";
/// Largest datagram read or sent.
pub const MAX_DATAGRAM: usize = 8_192;

/// Most addresses a beat tells of, and takes from one beat.
pub const MAX_HEARD: usize = 16;

const MAGIC: &[u8; 4] = b"SVW1";
const TAG_LEN: usize = 32;

/// A room reading as the swarm carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomReading {
    /// °C.
    pub room_c: f64,
    /// When it was posted on its origin, Unix ms.
    pub at_ms: i64,
    /// Who measured it.
    pub source: String,
    /// The member it was posted on.
    pub origin: String,
}

/// One member's share of the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// The member.
    pub unit_id: String,
    /// W.
    pub watt: f64,
}

/// The leader's split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// Grows with every new split.
    pub epoch: u64,
    /// The budget split, W.
    pub budget_watt: f64,
    /// One per live member.
    pub shares: Vec<Share>,
}

/// What a member sends every [`BEAT`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Beat {
    /// Stable id (`<state>/tuner/power/swarm-id`).
    pub unit_id: String,
    /// Random per process start: a restarted member's sequence starts again.
    pub boot: u64,
    /// Grows with every beat of one boot.
    pub seq: u64,
    /// Sender's clock, Unix ms.
    pub sent_ms: i64,
    /// `[system].hostname`.
    pub name: String,
    /// Measured power, W.
    pub power_watt: f64,
    /// Its own limit without the swarm, W (0 = none).
    pub max_watt: f64,
    /// 0 = unknown.
    pub efficiency_j_per_th: f64,
    /// The newest room reading the sender knows.
    pub room: Option<RoomReading>,
    /// The split, sent by the leader only.
    pub allocation: Option<Allocation>,
    /// Where the sender hears its live members from (`ip:port`): a member that knows one other
    /// learns the rest, so a static list needs to name only one member.
    #[serde(default)]
    pub heard: Vec<SocketAddr>,
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a swarm datagram or not JSON of a beat.
    Malformed,
    /// The tag does not verify under our key.
    BadSignature,
    /// A sequence already seen, an older boot, or a send time too far from ours.
    Replay,
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    HmacSha256::new_from_slice(key).expect("hmac accepts any key length")
}

/// Sign a beat into a datagram.
pub fn encode(key: &[u8], beat: &Beat) -> Vec<u8> {
    let payload = serde_json::to_vec(beat).unwrap_or_default();
    let mut m = mac(key);
    m.update(MAGIC);
    m.update(&payload);
    let tag = m.finalize().into_bytes();
    let mut out = Vec::with_capacity(MAGIC.len() + TAG_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&tag);
    out.extend_from_slice(&payload);
    out
}

/// Verify a datagram's tag (in constant time) and read its beat.
pub fn decode(key: &[u8], datagram: &[u8]) -> Result<Beat, Refusal> {
    if datagram.len() < MAGIC.len() + TAG_LEN || &datagram[..MAGIC.len()] != MAGIC {
        return Err(Refusal::Malformed);
    }
    let (tag, payload) = datagram[MAGIC.len()..].split_at(TAG_LEN);
    let mut m = mac(key);
    m.update(MAGIC);
    m.update(payload);
    m.verify_slice(tag).map_err(|_| Refusal::BadSignature)?;
    let beat: Beat = serde_json::from_slice(payload).map_err(|_| Refusal::Malformed)?;
    let finite = [beat.power_watt, beat.max_watt, beat.efficiency_j_per_th]
        .iter()
        .all(|v| v.is_finite() && *v >= 0.0);
    if !finite || beat.unit_id.is_empty() || beat.unit_id.len() > 64 {
        return Err(Refusal::Malformed);
    }
    Ok(beat)
}

/// What a receiver remembers of a sender to refuse replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The sender's boot.
    pub boot: u64,
    /// Its last sequence of that boot.
    pub seq: u64,
    /// Its last send time.
    pub sent_ms: i64,
}

/// Whether a verified beat is new: sent near our clock, and after the last one of its sender.
pub fn admit(last: Option<Seen>, beat: &Beat, now_ms: i64) -> Result<Seen, Refusal> {
    if (now_ms - beat.sent_ms).abs() > MAX_SKEW_MS {
        return Err(Refusal::Replay);
    }
    if let Some(l) = last {
        let newer = if l.boot == beat.boot {
            beat.seq > l.seq
        } else {
            // Another boot: only a later one (a captured beat of an earlier boot is old).
            beat.sent_ms > l.sent_ms
        };
        if !newer {
            return Err(Refusal::Replay);
        }
    }
    Ok(Seen {
        boot: beat.boot,
        seq: beat.seq,
        sent_ms: beat.sent_ms,
    })
}

/// One member as the split sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The member.
    pub unit_id: String,
    /// Its own limit, W (0 = none: the budget).
    pub max_watt: f64,
    /// 0 = unknown.
    pub efficiency_j_per_th: f64,
}

/// The split: the budget in proportion to 1/(J/TH) (a member of unknown efficiency counts as
/// the least efficient known, or all alike when none is known), each share capped at its
/// member's own limit and what a cap leaves over shared again among the rest. The shares never
/// sum above the budget. Sorted by unit id.
pub fn split(budget_watt: f64, members: &[Candidate]) -> Vec<Share> {
    let known: Vec<f64> = members
        .iter()
        .map(|m| m.efficiency_j_per_th)
        .filter(|e| e.is_finite() && *e > 0.0)
        .collect();
    let worst = known.iter().copied().fold(0.0_f64, f64::max);
    let weight = |m: &Candidate| {
        let e = m.efficiency_j_per_th;
        if e.is_finite() && e > 0.0 {
            1.0 / e
        } else if worst > 0.0 {
            1.0 / worst
        } else {
            1.0
        }
    };
    let cap = |m: &Candidate| {
        if m.max_watt > 0.0 {
            m.max_watt.min(budget_watt)
        } else {
            budget_watt
        }
    };
    let mut sorted: Vec<&Candidate> = members.iter().collect();
    sorted.sort_by(|a, b| a.unit_id.cmp(&b.unit_id));
    let mut shares: Vec<Option<f64>> = vec![None; sorted.len()];
    let mut left = budget_watt.max(0.0);
    // Water filling: each round either fixes at least one capped member or ends.
    loop {
        let open: Vec<usize> = (0..sorted.len()).filter(|i| shares[*i].is_none()).collect();
        if open.is_empty() {
            break;
        }
        let total: f64 = open.iter().map(|i| weight(sorted[*i])).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|i| left * weight(sorted[*i]) / total >= cap(sorted[*i]))
            .collect();
        if capped.is_empty() {
            for i in open {
                shares[i] = Some(left * weight(sorted[i]) / total);
            }
            break;
        }
        for i in capped {
            let w = cap(sorted[i]);
            shares[i] = Some(w);
            left = (left - w).max(0.0);
        }
    }
    sorted
        .iter()
        .zip(shares)
        .map(|(m, w)| Share {
            unit_id: m.unit_id.clone(),
            // Down to 0.1 W (past float noise), so the shares never sum above the budget.
            watt: ((w.unwrap_or(0.0) * 10.0) + 1e-6).floor() / 10.0,
        })
        .collect()
}

/// The leader among live unit ids: the lowest.
pub fn leader<'a>(live: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    live.into_iter().min()
}

/// Where a member's share comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareSource {
    /// Its own split: it leads (alone or not).
    Leader,
    /// The live leader's allocation.
    Allocated,
    /// The last allocation, while no live leader allocates one (bounded by [`SHARE_HOLD_MS`]).
    Held,
    /// Not in the leader's allocation yet: the budget over the live members, until it is.
    Pending,
}

impl ShareSource {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ShareSource::Leader => "leader",
            ShareSource::Allocated => "allocated",
            ShareSource::Held => "held",
            ShareSource::Pending => "pending",
        }
    }
}

/// Which share a member follows: the live leader's allocation; its own split when it leads
/// others; its last share for [`SHARE_HOLD_MS`] when no live leader allocates one (the leader
/// left, or it is alone now); then alone the whole budget (its own split of one), or, among
/// members whose leader has not allocated to it yet, the budget over the live members.
pub fn choose_share(
    leads: bool,
    own_split: Option<f64>,
    from_leader: Option<f64>,
    held: Option<(f64, i64)>,
    live_members: usize,
    budget_watt: f64,
    now_ms: i64,
) -> (f64, ShareSource) {
    if let Some(w) = from_leader {
        return (w, ShareSource::Allocated);
    }
    if leads
        && live_members > 1
        && let Some(w) = own_split
    {
        return (w, ShareSource::Leader);
    }
    if let Some((w, at)) = held
        && now_ms - at <= SHARE_HOLD_MS
    {
        return (w, ShareSource::Held);
    }
    if leads && let Some(w) = own_split {
        return (w, ShareSource::Leader);
    }
    (
        budget_watt / live_members.max(1) as f64,
        ShareSource::Pending,
    )
}

/// A member heard from.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its latest admitted beat.
    pub beat: Beat,
    /// Where it came from.
    pub address: SocketAddr,
    /// When, our clock.
    pub last_seen_ms: i64,
    /// For replays.
    pub seen: Seen,
}

/// The swarm's runtime state (in memory: a restarted member rejoins within a beat).
#[derive(Debug, Clone, Default)]
pub struct SwarmState {
    /// This unit's id (empty until the swarm first runs).
    pub unit_id: String,
    /// Others heard from (live or not yet expired).
    pub members: BTreeMap<String, Member>,
    /// Addresses live members told of, and when they last did (sent to until they go quiet).
    pub told: BTreeMap<SocketAddr, i64>,
    /// Units the gateway's mDNS browse found (sent to like the static peers).
    pub discovered: Vec<SocketAddr>,
    /// What this unit sends about itself.
    pub own: Option<Beat>,
    /// The allocation this unit follows.
    pub allocation: Option<Allocation>,
    /// Its share and where it comes from.
    pub share: Option<(f64, ShareSource)>,
    /// Its last share from a leader and when it came.
    pub held: Option<(f64, i64)>,
    /// The newest room reading.
    pub room: Option<RoomReading>,
    /// Dropped datagrams by reason.
    pub dropped_bad_signature: u64,
    /// Replays.
    pub dropped_replay: u64,
    /// Malformed.
    pub dropped_malformed: u64,
    /// The socket's port, when open.
    pub port: Option<u16>,
    /// Why the socket is not open.
    pub error: String,
}

impl SwarmState {
    /// Live members' ids, this unit included.
    pub fn live(&self, now_ms: i64) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .members
            .values()
            .filter(|m| now_ms - m.last_seen_ms <= MEMBER_TIMEOUT_MS)
            .map(|m| m.beat.unit_id.as_str())
            .collect();
        if !self.unit_id.is_empty() {
            ids.push(&self.unit_id);
        }
        ids
    }

    /// Where live members' beats come from.
    pub fn live_addresses(&self, now_ms: i64) -> Vec<SocketAddr> {
        self.members
            .values()
            .filter(|m| now_ms - m.last_seen_ms <= MEMBER_TIMEOUT_MS)
            .map(|m| m.address)
            .take(MAX_HEARD)
            .collect()
    }

    /// The live leader's id.
    pub fn leader(&self, now_ms: i64) -> Option<String> {
        leader(self.live(now_ms)).map(str::to_string)
    }

    /// Take a verified datagram from `address`; returns a newer room reading it carried.
    pub fn receive(
        &mut self,
        key: &[u8],
        datagram: &[u8],
        address: SocketAddr,
        now_ms: i64,
    ) -> Option<RoomReading> {
        let beat = match decode(key, datagram) {
            Ok(b) if b.unit_id != self.unit_id => b,
            // Our own beat came back (a peer list naming ourselves): nothing to learn.
            Ok(_) => return None,
            Err(r) => {
                self.count(r);
                return None;
            }
        };
        let last = self.members.get(&beat.unit_id).map(|m| m.seen);
        let seen = match admit(last, &beat, now_ms) {
            Ok(s) => s,
            Err(r) => {
                self.count(r);
                return None;
            }
        };
        let newer_room = beat
            .room
            .clone()
            .filter(|r| self.room.as_ref().is_none_or(|mine| r.at_ms > mine.at_ms));
        if let Some(r) = &newer_room {
            self.room = Some(r.clone());
        }
        for a in beat.heard.iter().take(MAX_HEARD) {
            self.told.insert(*a, now_ms);
        }
        self.members.insert(
            beat.unit_id.clone(),
            Member {
                beat,
                address,
                last_seen_ms: now_ms,
                seen,
            },
        );
        newer_room
    }

    fn count(&mut self, r: Refusal) {
        match r {
            Refusal::Malformed => self.dropped_malformed += 1,
            Refusal::BadSignature => self.dropped_bad_signature += 1,
            Refusal::Replay => self.dropped_replay += 1,
        }
    }

    /// One beat's decision: forget long-gone members, split when leading, pick the share.
    /// `own` is this unit's beat without the allocation.
    pub fn step(&mut self, budget_watt: f64, own: &Beat, now_ms: i64) {
        // Kept a while past the timeout so a member back within the hold keeps its replay record.
        self.members
            .retain(|_, m| now_ms - m.last_seen_ms <= SHARE_HOLD_MS);
        self.told.retain(|_, at| now_ms - *at <= MEMBER_TIMEOUT_MS);
        let live = self.live(now_ms);
        let leader_id = leader(live.iter().copied()).map(str::to_string);
        let leads = leader_id.as_deref() == Some(own.unit_id.as_str());
        let live_count = live.len();
        let mut own_split = None;
        if leads {
            let mut candidates = vec![Candidate {
                unit_id: own.unit_id.clone(),
                max_watt: own.max_watt,
                efficiency_j_per_th: own.efficiency_j_per_th,
            }];
            candidates.extend(
                self.members
                    .values()
                    .filter(|m| now_ms - m.last_seen_ms <= MEMBER_TIMEOUT_MS)
                    .map(|m| Candidate {
                        unit_id: m.beat.unit_id.clone(),
                        max_watt: m.beat.max_watt,
                        efficiency_j_per_th: m.beat.efficiency_j_per_th,
                    }),
            );
            let shares = split(budget_watt, &candidates);
            own_split = shares
                .iter()
                .find(|s| s.unit_id == own.unit_id)
                .map(|s| s.watt);
            // A new epoch only when the split moves (members, budget, or a share by > 1 W),
            // so members can tell a fresh allocation from a repeated one.
            let same = self.allocation.as_ref().is_some_and(|a| {
                a.budget_watt == budget_watt
                    && a.shares.len() == shares.len()
                    && a.shares
                        .iter()
                        .zip(&shares)
                        .all(|(x, y)| x.unit_id == y.unit_id && (x.watt - y.watt).abs() <= 1.0)
            });
            if !same {
                let epoch = self.allocation.as_ref().map_or(0, |a| a.epoch) + 1;
                self.allocation = Some(Allocation {
                    epoch,
                    budget_watt,
                    shares,
                });
            }
        } else if let Some(a) = leader_id
            .as_ref()
            .and_then(|l| self.members.get(l))
            .and_then(|m| m.beat.allocation.clone())
        {
            self.allocation = Some(a);
        }
        let from_leader = (!leads)
            .then(|| {
                leader_id
                    .as_ref()
                    .and_then(|l| self.members.get(l))
                    .and_then(|m| m.beat.allocation.as_ref())
                    .and_then(|a| a.shares.iter().find(|s| s.unit_id == own.unit_id))
                    .map(|s| s.watt)
            })
            .flatten();
        let (watt, source) = choose_share(
            leads,
            own_split,
            from_leader,
            self.held,
            live_count,
            budget_watt,
            now_ms,
        );
        // Only a share agreed among several members is worth holding.
        if source == ShareSource::Allocated || (source == ShareSource::Leader && live_count > 1) {
            self.held = Some((watt, now_ms));
        }
        self.share = Some((watt, source));
        let mut beat = own.clone();
        beat.allocation = if leads { self.allocation.clone() } else { None };
        beat.room = self.room.clone();
        beat.heard = self.live_addresses(now_ms);
        self.own = Some(beat);
    }
}

/// This unit's stable id: 16 hex digits drawn once and kept in `dir/swarm-id`.
pub fn unit_id(dir: &Path) -> String {
    let path = dir.join("swarm-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return id.to_string();
        }
    }
    let mut bytes = [0u8; 8];
    if let Err(e) = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
    {
        tracing::warn!(error = %e, "swarm: no random source, id from the clock");
        bytes = (svcos_common::time::unix_ms() as u64).to_le_bytes();
    }
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let saved = svcos_common::fsutil::ensure_dir(dir, 0o700)
        .and_then(|()| svcos_common::fsutil::atomic_write(&path, id.as_bytes(), 0o600));
    if let Err(e) = saved {
        tracing::warn!(path = %path.display(), error = %e, "swarm: cannot save the unit id");
    }
    id
}

fn boot_id() -> u64 {
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        return svcos_common::time::unix_ms() as u64;
    }
    u64::from_le_bytes(bytes)
}

/// The socket and who it sends to.
struct Link {
    socket: UdpSocket,
    port: u16,
}

/// Run the swarm until `shutdown`: open the socket while `[swarm].enabled`, beat, receive,
/// and hand the governor its share and the shared room reading.
pub async fn run(power: Arc<Power>, shutdown: Shutdown) {
    let boot = boot_id();
    let mut seq = 0u64;
    let mut link: Option<Link> = None;
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let config = power.lock().config.swarm.clone();
        if !config.enabled {
            if link.take().is_some() || power.swarm().share.is_some() {
                tracing::info!("swarm: off");
            }
            link = None;
            let unit_id = power.swarm().unit_id.clone();
            *power.swarm() = SwarmState {
                unit_id,
                ..Default::default()
            };
            power.set_swarm_share(None);
        } else if link.as_ref().is_none_or(|l| l.port != config.port) {
            link = None;
            match UdpSocket::bind(("0.0.0.0", config.port)).await {
                Ok(socket) => {
                    tracing::info!(port = config.port, "swarm: listening");
                    let mut sw = power.swarm();
                    sw.port = Some(config.port);
                    sw.error.clear();
                    link = Some(Link {
                        socket,
                        port: config.port,
                    });
                }
                Err(e) => {
                    let mut sw = power.swarm();
                    let message = format!("udp port {}: {e}", config.port);
                    if sw.error != message {
                        tracing::warn!(error = %message, "swarm: cannot open the socket");
                    }
                    sw.port = None;
                    sw.error = message;
                }
            }
        }
        let received = async {
            match &link {
                Some(l) => l.socket.recv_from(&mut buf).await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.wait() => break,
            _ = tick.tick() => {
                if let Some(l) = &link {
                    seq += 1;
                    beat(&power, &config, l, boot, seq).await;
                }
            }
            got = received => {
                if let Some((n, from)) = got {
                    let now = power.clock.now_ms();
                    let key = config.key.as_bytes();
                    let room = power.swarm().receive(key, &buf[..n], from, now);
                    if let Some(r) = room {
                        let source = format!("swarm:{}", r.source);
                        power.room_reading(r.room_c, source);
                    }
                }
            }
        }
    }
}

/// One beat: decide, hand the governor its share, send.
async fn beat(power: &Power, config: &SwarmConfig, link: &Link, boot: u64, seq: u64) {
    let now = power.clock.now_ms();
    let (power_watt, efficiency) = power
        .telemetry
        .borrow()
        .as_ref()
        .map_or((0.0, 0.0), |t| (t.power_watt, t.efficiency_j_per_th));
    let (max_watt, name) = {
        let st = power.lock();
        let mut others = st.inputs(now);
        others.swarm_watt = None;
        let own = super::arbitrate(&st.config, now, &others).target_watt;
        (own.unwrap_or(0.0), st.config.system.hostname.clone())
    };
    let (datagram, targets) = {
        let mut sw = power.swarm();
        let own = Beat {
            unit_id: sw.unit_id.clone(),
            boot,
            seq,
            sent_ms: now,
            name,
            power_watt,
            max_watt,
            efficiency_j_per_th: efficiency,
            room: None,
            allocation: None,
            heard: Vec::new(),
        };
        sw.step(config.circuit_budget_watt, &own, now);
        let share = sw.share.map(|(w, _)| w);
        let datagram = sw
            .own
            .as_ref()
            .map(|b| encode(config.key.as_bytes(), b))
            .unwrap_or_default();
        // Members heard from, and those they told of, are sent to as well: one side listing one
        // member is enough.
        let mut learnt = sw.live_addresses(now);
        learnt.extend(sw.told.keys().copied());
        learnt.extend(sw.discovered.iter().copied());
        drop(sw);
        power.set_swarm_share(share);
        (datagram, learnt)
    };
    if datagram.len() > MAX_DATAGRAM {
        tracing::warn!(bytes = datagram.len(), "swarm: beat too large, not sent");
        return;
    }
    let mut sent: Vec<SocketAddr> = Vec::new();
    for peer in &config.peers {
        match tokio::net::lookup_host(peer.as_str()).await {
            Ok(addrs) => sent.extend(addrs.filter(SocketAddr::is_ipv4).take(1)),
            Err(e) => tracing::debug!(peer = %peer, error = %e, "swarm: peer not resolved"),
        }
    }
    for a in targets {
        if !sent.contains(&a) {
            sent.push(a);
        }
    }
    for a in sent {
        if let Err(e) = link.socket.send_to(&datagram, a).await {
            tracing::debug!(to = %a, error = %e, "swarm: beat not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef";

    fn beat(unit: &str, seq: u64, sent_ms: i64) -> Beat {
        Beat {
            unit_id: unit.into(),
            boot: 7,
            seq,
            sent_ms,
            name: unit.into(),
            power_watt: 1000.0,
            max_watt: 0.0,
            efficiency_j_per_th: 30.0,
            room: None,
            allocation: None,
            heard: Vec::new(),
        }
    }

    fn cand(id: &str, max: f64, eff: f64) -> Candidate {
        Candidate {
            unit_id: id.into(),
            max_watt: max,
            efficiency_j_per_th: eff,
        }
    }

    fn watts(s: &[Share]) -> Vec<f64> {
        s.iter()
            .map(|s| (s.watt * 1000.0).round() / 1000.0)
            .collect()
    }

    #[test]
    fn the_split_follows_inverse_j_per_th_and_never_exceeds_the_budget() {
        // (budget, members, expected shares sorted by id)
        let rows: Vec<(f64, Vec<Candidate>, Vec<f64>)> = vec![
            // Alike: equal shares.
            (
                3000.0,
                vec![cand("a", 0.0, 30.0), cand("b", 0.0, 30.0)],
                vec![1500.0, 1500.0],
            ),
            // 20 J/TH gets 1.5 times the watts of 30 J/TH: 1/20 : 1/30 = 3 : 2.
            (
                3000.0,
                vec![cand("b", 0.0, 30.0), cand("a", 0.0, 20.0)],
                vec![1800.0, 1200.0],
            ),
            // A capped member's leftover goes to the others, in proportion.
            (
                3000.0,
                vec![
                    cand("a", 1000.0, 20.0),
                    cand("b", 0.0, 30.0),
                    cand("c", 0.0, 30.0),
                ],
                vec![1000.0, 1000.0, 1000.0],
            ),
            (
                3000.0,
                vec![
                    cand("a", 500.0, 20.0),
                    cand("b", 0.0, 30.0),
                    cand("c", 0.0, 60.0),
                ],
                vec![500.0, 1666.6, 833.3],
            ),
            // Every member capped: the budget is not all used.
            (
                3000.0,
                vec![cand("a", 800.0, 20.0), cand("b", 900.0, 30.0)],
                vec![800.0, 900.0],
            ),
            // Unknown efficiency counts as the worst known.
            (
                2000.0,
                vec![cand("a", 0.0, 0.0), cand("b", 0.0, 25.0)],
                vec![1000.0, 1000.0],
            ),
            // Alone: the whole budget, capped by its own limit.
            (2000.0, vec![cand("a", 0.0, 25.0)], vec![2000.0]),
            (2000.0, vec![cand("a", 1200.0, 25.0)], vec![1200.0]),
        ];
        for (i, (budget, members, want)) in rows.into_iter().enumerate() {
            let s = split(budget, &members);
            assert_eq!(watts(&s), want, "row {i}");
            let sum: f64 = s.iter().map(|s| s.watt).sum();
            assert!(sum <= budget + 1e-6, "row {i}: {sum} > {budget}");
            let ids: Vec<&str> = s.iter().map(|s| s.unit_id.as_str()).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(ids, sorted, "row {i}: sorted by unit id");
        }
    }

    #[test]
    fn a_signed_beat_round_trips_and_a_wrong_key_or_a_changed_byte_is_refused() {
        let b = beat("aa", 1, 1_000);
        let d = encode(KEY, &b);
        assert_eq!(decode(KEY, &d), Ok(b.clone()));
        assert_eq!(
            decode(b"another-key-of-16+", &d),
            Err(Refusal::BadSignature)
        );
        let mut tampered = d.clone();
        let last = tampered.len() - 2;
        tampered[last] ^= 1;
        assert_eq!(decode(KEY, &tampered), Err(Refusal::BadSignature));
        assert_eq!(decode(KEY, b"SVW1short"), Err(Refusal::Malformed));
        assert_eq!(decode(KEY, &d[4..]), Err(Refusal::Malformed));
        // The key is not in the datagram.
        assert!(!d.windows(KEY.len()).any(|w| w == KEY));
    }

    #[test]
    fn replays_old_boots_and_far_clocks_are_refused() {
        let now = 100_000;
        let first = admit(None, &beat("aa", 5, now), now).unwrap();
        // The same or an older sequence of the same boot.
        assert_eq!(
            admit(Some(first), &beat("aa", 5, now), now),
            Err(Refusal::Replay)
        );
        assert_eq!(
            admit(Some(first), &beat("aa", 4, now), now),
            Err(Refusal::Replay)
        );
        assert!(admit(Some(first), &beat("aa", 6, now), now).is_ok());
        // Another boot: accepted when sent later, refused when sent earlier.
        let mut restarted = beat("aa", 1, now + 10);
        restarted.boot = 8;
        assert!(admit(Some(first), &restarted, now).is_ok());
        restarted.sent_ms = now - 10;
        assert_eq!(admit(Some(first), &restarted, now), Err(Refusal::Replay));
        // A capture from long ago.
        assert_eq!(
            admit(None, &beat("aa", 9, now - MAX_SKEW_MS - 1), now),
            Err(Refusal::Replay)
        );
    }

    #[test]
    fn the_lowest_live_id_leads_and_leadership_passes_when_it_goes_quiet() {
        let addr: SocketAddr = "127.0.0.1:4029".parse().unwrap();
        let mut sw = SwarmState {
            unit_id: "bb".into(),
            ..Default::default()
        };
        let now = 50_000;
        sw.receive(KEY, &encode(KEY, &beat("aa", 1, now)), addr, now);
        let mut told = beat("cc", 1, now);
        let other: SocketAddr = "127.0.0.9:4100".parse().unwrap();
        told.heard = vec![other];
        sw.receive(KEY, &encode(KEY, &told), addr, now);
        assert_eq!(sw.leader(now).as_deref(), Some("aa"));
        // An address a member tells of is sent to, until the teller goes quiet.
        assert!(sw.told.contains_key(&other));
        // A replayed datagram is counted, not admitted.
        sw.receive(KEY, &encode(KEY, &beat("aa", 1, now)), addr, now);
        sw.receive(
            b"wrong-key-wrong-key",
            &encode(KEY, &beat("cc", 2, now)),
            addr,
            now,
        );
        assert_eq!((sw.dropped_replay, sw.dropped_bad_signature), (1, 1));
        // "cc" keeps beating, "aa" goes quiet: "bb" leads.
        let later = now + MEMBER_TIMEOUT_MS + 1;
        sw.receive(KEY, &encode(KEY, &beat("cc", 3, later)), addr, later);
        assert_eq!(sw.leader(later).as_deref(), Some("bb"));
    }

    #[test]
    fn members_follow_the_leaders_allocation_and_hold_it_for_a_bounded_time() {
        let addr: SocketAddr = "127.0.0.1:4029".parse().unwrap();
        let now = 50_000;
        // The leader "aa" (20 J/TH) with member "bb" (30 J/TH), budget 3000 W.
        let mut lead = SwarmState {
            unit_id: "aa".into(),
            ..Default::default()
        };
        let mut member = SwarmState {
            unit_id: "bb".into(),
            ..Default::default()
        };
        let mut a = beat("aa", 1, now);
        a.efficiency_j_per_th = 20.0;
        let b = beat("bb", 1, now);
        lead.receive(KEY, &encode(KEY, &b), addr, now);
        lead.step(3000.0, &a, now);
        assert_eq!(lead.share, Some((1800.0, ShareSource::Leader)));
        let sent = lead.own.clone().unwrap();
        assert_eq!(sent.allocation.as_ref().map(|x| x.epoch), Some(1));
        // Alone, a member leads a swarm of one: the whole budget.
        member.step(3000.0, &b, now);
        assert_eq!(member.share, Some((3000.0, ShareSource::Leader)));
        member.receive(KEY, &encode(KEY, &sent), addr, now);
        member.step(3000.0, &b, now);
        assert_eq!(member.share, Some((1200.0, ShareSource::Allocated)));
        // The same split again keeps its epoch.
        lead.step(3000.0, &a, now + 1000);
        assert_eq!(lead.allocation.as_ref().map(|x| x.epoch), Some(1));
        // The leader goes quiet and a third member "ab" (lower than "bb") is alive but has
        // no allocation to give yet: "bb" holds its last share, then after the hold takes
        // the equal split of the live members.
        let quiet = now + MEMBER_TIMEOUT_MS + 1;
        let mut third = beat("ab", 1, quiet);
        member.receive(KEY, &encode(KEY, &third), addr, quiet);
        member.step(3000.0, &b, quiet);
        assert_eq!(member.share, Some((1200.0, ShareSource::Held)));
        let past = now + SHARE_HOLD_MS + 1;
        third.seq = 2;
        third.sent_ms = past;
        member.receive(KEY, &encode(KEY, &third), addr, past);
        member.step(3000.0, &b, past);
        assert_eq!(member.share, Some((1500.0, ShareSource::Pending)));
        // Alone past the hold: a swarm of one again.
        let alone = past + MEMBER_TIMEOUT_MS + 1;
        member.step(3000.0, &b, alone);
        assert_eq!(member.share, Some((3000.0, ShareSource::Leader)));
        // The leader alone holds the share it gave itself among others.
        let solo = now + 2000 + MEMBER_TIMEOUT_MS;
        lead.step(3000.0, &a, solo);
        assert_eq!(lead.share, Some((1800.0, ShareSource::Held)));
    }

    #[test]
    fn the_newest_room_reading_wins_once() {
        let addr: SocketAddr = "127.0.0.1:4029".parse().unwrap();
        let now = 50_000;
        let mut sw = SwarmState {
            unit_id: "bb".into(),
            ..Default::default()
        };
        let room = |c, at| RoomReading {
            room_c: c,
            at_ms: at,
            source: "ha".into(),
            origin: "aa".into(),
        };
        let mut b = beat("aa", 1, now);
        b.room = Some(room(21.5, now - 10));
        assert_eq!(
            sw.receive(KEY, &encode(KEY, &b), addr, now),
            Some(room(21.5, now - 10))
        );
        // The same reading again feeds nothing; an older one neither.
        b.seq = 2;
        assert_eq!(sw.receive(KEY, &encode(KEY, &b), addr, now), None);
        b.seq = 3;
        b.room = Some(room(19.0, now - 20));
        assert_eq!(sw.receive(KEY, &encode(KEY, &b), addr, now), None);
        assert_eq!(sw.room.as_ref().map(|r| r.room_c), Some(21.5));
    }
}
