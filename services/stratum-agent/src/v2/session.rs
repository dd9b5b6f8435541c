//! The SV2 mining client's protocol state for one connection, with no I/O: plaintext frames in,
//! [`SessionEvent`]s out (the same events the V1 session produces, so the agent treats an SV2
//! pool like any other), frames to send as [`SessionEvent::SendFrame`].
//!
//! One extended channel per connection: its jobs carry the coinbase prefix/suffix and merkle
//! path, which is exactly what hw-agent's job template holds (the channel's extranonce prefix is
//! V1's extranonce1, the extranonce size V1's extranonce2 size), so hw-agent rolls extranonce and
//! version as it does for V1 and the agent checks shares with the same header math. Jobs sent
//! without `min_ntime` wait for the SetNewPrevHash that activates them (a clean job); jobs with
//! it apply to the current previous hash at once.

use std::collections::{BTreeMap, HashMap, VecDeque};

use binary_sv2::{B032Owned, B064KOwned, Seq0255Owned, Str0255Owned, Sv2OptionOwned, U256Owned};
use common_messages_sv2::{Protocol, SetupConnectionOwned};
use mining_sv2::{
    OpenExtendedMiningChannelOwned, SetCustomMiningJobOwned, SubmitSharesExtendedOwned,
};
use parsers_sv2::{AnyMessageOwned, CommonMessagesOwned, MiningOwned};

use super::frames::{self, difficulty_to_target, target_to_difficulty};
use crate::jd::DeclaredJob;
use crate::v1::codec::{Notify, PoolError};
use crate::v1::session::{SessionEvent, ShareSubmit};

/// The one protocol version SV2 defines so far.
pub const PROTOCOL_VERSION: u16 = 2;
/// Version bits a job with `version_rolling_allowed` lets the miner roll (BIP 320 range).
pub const SV2_VERSION_MASK: u32 = 0x1fff_e000;
/// Messages kept in the log.
pub const LOG_LEN: usize = 64;
/// Shares awaiting an answer at most (older ones are forgotten).
const MAX_PENDING: usize = 4096;
/// Request id of our one OpenExtendedMiningChannel.
const OPEN_REQUEST_ID: u32 = 1;
/// Future jobs kept while waiting for their SetNewPrevHash.
const MAX_FUTURE_JOBS: usize = 16;
/// SetupConnection flag of the mining protocol: the miner selects its own work (job
/// declaration); a pool refuses SetCustomMiningJob on a connection without it.
pub const REQUIRES_WORK_SELECTION: u32 = 0b10;
/// Custom job ids remembered for counting their shares.
const MAX_CUSTOM_IDS: usize = 64;

/// What a connection needs to know.
#[derive(Debug, Clone)]
pub struct Sv2Params {
    /// user_identity of the channel (the worker).
    pub user: String,
    /// Whether to use version rolling when a job allows it.
    pub version_rolling: bool,
    /// The pool's host and port, as SetupConnection reports them.
    pub endpoint_host: String,
    /// See `endpoint_host`.
    pub endpoint_port: u16,
    /// Device id for SetupConnection.
    pub device_id: String,
    /// Negotiate work selection (job declaration is on): SetCustomMiningJob needs it.
    pub work_selection: bool,
}

/// One entry of the message log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedMessage {
    /// Unix milliseconds.
    pub at_ms: i64,
    /// `in` (from the pool) or `out`.
    pub direction: &'static str,
    /// The SV2 message type name.
    pub message_type: String,
    /// One-line summary.
    pub summary: String,
}

#[derive(Debug, Clone)]
struct ExtendedJob {
    job_id: u32,
    version: u32,
    version_rolling_allowed: bool,
    merkle_path: Vec<[u8; 32]>,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    min_ntime: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
struct PrevHash {
    prev_hash: [u8; 32],
    min_ntime: u32,
    nbits: u32,
}

/// One SV2 connection's state.
#[derive(Debug)]
pub struct Sv2Session {
    params: Sv2Params,
    /// SetupConnection.Success: (used_version, flags).
    pub setup: Option<(u16, u32)>,
    /// The open channel.
    pub channel_id: Option<u32>,
    /// The channel's group channel id.
    pub group_channel_id: u32,
    /// Current share target (little-endian).
    pub target: [u8; 32],
    /// Whether the channel is open (the V1 "authorised").
    pub authorized: bool,
    /// Extranonce prefix of the channel (the V1 extranonce1).
    pub extranonce1: Vec<u8>,
    /// Extranonce bytes the miner rolls (the V1 extranonce2 size).
    pub extranonce2_size: usize,
    /// Difficulty of `target`.
    pub difficulty: f64,
    /// Version mask of the current job, `None` when rolling is off.
    pub version_mask: Option<u32>,
    /// Jobs received (extended jobs, activated or not).
    pub jobs_received: u64,
    /// SubmitShares.Success shares.
    pub accepted: u64,
    /// SubmitShares.Error shares.
    pub rejected: u64,
    /// The last protocol error (refusal, rejected share, unexpected message).
    pub last_error: String,
    /// The last messages in both directions, oldest first.
    pub log: VecDeque<LoggedMessage>,
    /// Shares on declared (custom) jobs answered Success / Error.
    pub custom_accepted: u64,
    /// See `custom_accepted`.
    pub custom_rejected: u64,
    /// The declared job being mined: its pool job id once SetCustomMiningJob succeeded.
    pub custom_job: Option<(u32, Box<DeclaredJob>)>,
    /// Why the last declared job is not mined (refused by the pool, stale), empty when it is.
    pub custom_error: String,
    /// The SetCustomMiningJob awaiting its answer.
    custom_pending: Option<(u32, Box<DeclaredJob>)>,
    next_custom_request: u32,
    custom_ids: VecDeque<u32>,
    /// The newest pool job, to go back to when no declared job is mined.
    last_pool_job: Option<Box<Notify>>,
    future: BTreeMap<u32, ExtendedJob>,
    active: HashMap<u32, ExtendedJob>,
    prev: Option<PrevHash>,
    next_sequence: u32,
    /// Sequence number → (ticket, whether the share is on a declared job).
    pending: BTreeMap<u32, (u64, bool)>,
}

impl Sv2Session {
    /// A session whose transport is up (the Noise handshake done) and that has sent nothing.
    pub fn new(params: Sv2Params) -> Self {
        Sv2Session {
            params,
            setup: None,
            channel_id: None,
            group_channel_id: 0,
            target: [0xff; 32],
            authorized: false,
            extranonce1: Vec::new(),
            extranonce2_size: 0,
            difficulty: 1.0,
            version_mask: None,
            jobs_received: 0,
            accepted: 0,
            rejected: 0,
            last_error: String::new(),
            log: VecDeque::new(),
            custom_accepted: 0,
            custom_rejected: 0,
            custom_job: None,
            custom_error: String::new(),
            custom_pending: None,
            next_custom_request: 1,
            custom_ids: VecDeque::new(),
            last_pool_job: None,
            future: BTreeMap::new(),
            active: HashMap::new(),
            prev: None,
            next_sequence: 0,
            pending: BTreeMap::new(),
        }
    }

    fn record(&mut self, at_ms: i64, direction: &'static str, m: &AnyMessageOwned) {
        if self.log.len() >= LOG_LEN {
            self.log.pop_front();
        }
        self.log.push_back(LoggedMessage {
            at_ms,
            direction,
            message_type: frames::name(m).to_string(),
            summary: frames::summary(m),
        });
    }

    fn send(&mut self, at_ms: i64, m: AnyMessageOwned, out: &mut Vec<SessionEvent>) {
        self.record(at_ms, "out", &m);
        match frames::encode(m) {
            Ok(bytes) => out.push(SessionEvent::SendFrame(bytes)),
            Err(e) => self.last_error = format!("cannot encode: {e}"),
        }
    }

    /// The opening message: SetupConnection for the mining protocol.
    pub fn start(&mut self, at_ms: i64) -> Vec<SessionEvent> {
        let text = |s: &str| Str0255Owned::try_from(s.chars().take(255).collect::<String>());
        let setup = (|| {
            Some(SetupConnectionOwned {
                protocol: Protocol::MiningProtocol,
                min_version: PROTOCOL_VERSION,
                max_version: PROTOCOL_VERSION,
                // Extended channels (no REQUIRES_STANDARD_JOBS), work selection only with job
                // declaration on, and version rolling not *required* (hw-agent mines without it
                // when a job forbids it).
                flags: if self.params.work_selection {
                    REQUIRES_WORK_SELECTION
                } else {
                    0
                },
                endpoint_host: text(&self.params.endpoint_host).ok()?,
                endpoint_port: self.params.endpoint_port,
                vendor: text("svcos").ok()?,
                hardware_version: text("svcos-sim").ok()?,
                firmware: text(crate::v1::session::AGENT).ok()?,
                device_id: text(&self.params.device_id).ok()?,
            })
        })();
        let mut out = Vec::new();
        match setup {
            Some(s) => self.send(
                at_ms,
                AnyMessageOwned::Common(CommonMessagesOwned::SetupConnection(s)),
                &mut out,
            ),
            None => self.last_error = "cannot build SetupConnection".into(),
        }
        out
    }

    /// Handle one plaintext frame from the pool.
    pub fn handle(&mut self, frame: &[u8], at_ms: i64) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        let message = match frames::decode(frame) {
            Ok(m) => m,
            Err(e) => {
                self.last_error = e.to_string();
                if self.log.len() >= LOG_LEN {
                    self.log.pop_front();
                }
                self.log.push_back(LoggedMessage {
                    at_ms,
                    direction: "in",
                    message_type: frames::kind(frame).map_or("unreadable", |k| k.1).into(),
                    summary: e.to_string(),
                });
                return out;
            }
        };
        self.record(at_ms, "in", &message);
        match message {
            AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionSuccess(s)) => {
                self.setup = Some((s.used_version, s.flags));
                let open = OpenExtendedMiningChannelOwned {
                    request_id: OPEN_REQUEST_ID,
                    user_identity: match Str0255Owned::try_from(self.params.user.clone()) {
                        Ok(u) => u,
                        Err(_) => {
                            out.push(SessionEvent::Refused("user name too long for SV2".into()));
                            return out;
                        }
                    },
                    // Unknown to the agent (hw-agent's rate varies); pools use it only as a hint
                    // for the first target.
                    nominal_hash_rate: 1.0e12,
                    max_target: U256Owned::from([0xff; 32]),
                    min_extranonce_size: 4,
                };
                self.send(
                    at_ms,
                    AnyMessageOwned::Mining(MiningOwned::OpenExtendedMiningChannel(open)),
                    &mut out,
                );
            }
            AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionError(e)) => {
                let reason = format!("SetupConnection refused: {}", e.error_code.as_utf8_or_hex());
                self.last_error = reason.clone();
                out.push(SessionEvent::Refused(reason));
            }
            AnyMessageOwned::Common(CommonMessagesOwned::Reconnect(r)) => {
                let host = r.new_host.as_utf8_or_hex();
                out.push(SessionEvent::Reconnect {
                    host: (!host.is_empty()).then_some(host),
                    port: (r.new_port != 0).then_some(r.new_port),
                    wait_s: 0,
                });
            }
            AnyMessageOwned::Mining(m) => self.handle_mining(m, at_ms, &mut out),
            other => {
                self.last_error = format!("unexpected {}", frames::name(&other));
            }
        }
        out
    }

    fn handle_mining(&mut self, m: MiningOwned, _at_ms: i64, out: &mut Vec<SessionEvent>) {
        match m {
            MiningOwned::OpenExtendedMiningChannelSuccess(s) if s.request_id == OPEN_REQUEST_ID => {
                self.channel_id = Some(s.channel_id);
                self.group_channel_id = s.group_channel_id;
                self.extranonce1 = s.extranonce_prefix.to_owned_bytes();
                self.extranonce2_size = s.extranonce_size.into();
                self.set_target(s.target.to_array(), out);
                self.authorized = true;
                out.push(SessionEvent::Authorized);
            }
            MiningOwned::OpenMiningChannelError(e) => {
                let reason = format!("channel refused: {}", e.error_code.as_utf8_or_hex());
                self.last_error = reason.clone();
                out.push(SessionEvent::Refused(reason));
            }
            MiningOwned::SetTarget(t) if Some(t.channel_id) == self.channel_id => {
                self.set_target(t.maximum_target.to_array(), out);
            }
            MiningOwned::NewExtendedMiningJob(j) if self.for_us(j.channel_id) => {
                self.jobs_received += 1;
                let job = ExtendedJob {
                    job_id: j.job_id,
                    version: j.version,
                    version_rolling_allowed: j.version_rolling_allowed,
                    merkle_path: j
                        .merkle_path
                        .into_inner()
                        .into_iter()
                        .map(|h| h.to_array())
                        .collect(),
                    prefix: j.coinbase_tx_prefix.into_bytes(),
                    suffix: j.coinbase_tx_suffix.into_bytes(),
                    min_ntime: j.min_ntime.into_inner(),
                };
                match (job.min_ntime, self.prev) {
                    (Some(ntime), Some(prev)) => {
                        self.activate(job, prev, ntime, false, out);
                    }
                    (Some(_), None) => {
                        self.last_error = format!(
                            "job {} is active but no SetNewPrevHash arrived yet",
                            job.job_id
                        );
                    }
                    (None, _) => {
                        self.future.insert(job.job_id, job);
                        while self.future.len() > MAX_FUTURE_JOBS {
                            self.future.pop_first();
                        }
                    }
                }
            }
            MiningOwned::SetNewPrevHash(p) if self.for_us(p.channel_id) => {
                let prev = PrevHash {
                    prev_hash: p.prev_hash.to_array(),
                    min_ntime: p.min_ntime,
                    nbits: p.nbits,
                };
                self.prev = Some(prev);
                // Every job built on the old previous hash is void.
                self.active.clear();
                match self.future.remove(&p.job_id) {
                    Some(job) => self.activate(job, prev, p.min_ntime, true, out),
                    None => {
                        self.last_error =
                            format!("SetNewPrevHash names unknown future job {}", p.job_id);
                    }
                }
                self.future.clear();
            }
            MiningOwned::SetExtranoncePrefix(p) if Some(p.channel_id) == self.channel_id => {
                self.extranonce1 = p.extranonce_prefix.to_owned_bytes();
                out.push(SessionEvent::ExtranonceChanged);
            }
            MiningOwned::SubmitSharesSuccess(s) if Some(s.channel_id) == self.channel_id => {
                let done: Vec<u32> = self
                    .pending
                    .range(..=s.last_sequence_number)
                    .map(|(k, _)| *k)
                    .collect();
                for seq in done {
                    if let Some((ticket, custom)) = self.pending.remove(&seq) {
                        self.accepted += 1;
                        self.custom_accepted += u64::from(custom);
                        out.push(SessionEvent::ShareResult {
                            ticket,
                            accepted: true,
                            reason: None,
                        });
                    }
                }
            }
            MiningOwned::SubmitSharesError(e) if Some(e.channel_id) == self.channel_id => {
                let reason = e.error_code.as_utf8_or_hex();
                self.last_error = format!("share {} rejected: {reason}", e.sequence_number);
                if let Some((ticket, custom)) = self.pending.remove(&e.sequence_number) {
                    self.rejected += 1;
                    self.custom_rejected += u64::from(custom);
                    out.push(SessionEvent::ShareResult {
                        ticket,
                        accepted: false,
                        reason: Some(PoolError {
                            code: 0,
                            message: reason,
                        }),
                    });
                }
            }
            MiningOwned::SetCustomMiningJobSuccess(s)
                if Some(s.channel_id) == self.channel_id
                    && self.custom_pending.as_ref().map(|p| p.0) == Some(s.request_id) =>
            {
                if let Some((_, job)) = self.custom_pending.take() {
                    self.mine_custom(s.job_id, job, out);
                }
            }
            MiningOwned::SetCustomMiningJobError(e)
                if self.custom_pending.as_ref().map(|p| p.0) == Some(e.request_id) =>
            {
                self.custom_pending = None;
                self.custom_error = format!(
                    "pool refused the declared job: {}",
                    e.error_code.as_utf8_or_hex()
                );
                self.last_error = self.custom_error.clone();
            }
            MiningOwned::CloseChannel(c) if Some(c.channel_id) == self.channel_id => {
                let reason = format!(
                    "pool closed the channel: {}",
                    c.reason_code.as_utf8_or_hex()
                );
                self.last_error = reason.clone();
                self.authorized = false;
                out.push(SessionEvent::Refused(reason));
            }
            other => {
                let m = AnyMessageOwned::Mining(other);
                self.last_error = format!("ignored {}", frames::name(&m));
            }
        }
    }

    /// Messages for our channel or its group.
    fn for_us(&self, channel_id: u32) -> bool {
        Some(channel_id) == self.channel_id
            || (self.group_channel_id != 0 && channel_id == self.group_channel_id)
    }

    fn set_target(&mut self, target: [u8; 32], out: &mut Vec<SessionEvent>) {
        self.target = target;
        self.difficulty = target_to_difficulty(&target);
        out.push(SessionEvent::Difficulty(self.difficulty));
    }

    fn activate(
        &mut self,
        job: ExtendedJob,
        prev: PrevHash,
        ntime: u32,
        clean: bool,
        out: &mut Vec<SessionEvent>,
    ) {
        let mask = (job.version_rolling_allowed && self.params.version_rolling)
            .then_some(SV2_VERSION_MASK);
        if mask != self.version_mask {
            self.version_mask = mask;
            out.push(SessionEvent::VersionMask(mask));
        }
        let notify = Box::new(Notify {
            job_id: job.job_id.to_string(),
            prev_hash: prev.prev_hash,
            coinb1: job.prefix.clone(),
            coinb2: job.suffix.clone(),
            merkle_branch: job.merkle_path.clone(),
            version: job.version,
            nbits: prev.nbits,
            ntime: ntime.max(prev.min_ntime),
            clean_jobs: clean,
        });
        self.active.insert(job.job_id, job);
        self.last_pool_job = Some(notify.clone());
        match &self.custom_job {
            // The declared job stays the work while the pool is on the same block.
            Some((_, custom)) if custom.prev_hash == prev.prev_hash => {}
            Some(_) => {
                self.custom_job = None;
                self.custom_error =
                    "the pool moved to a new block before a job on it was declared".into();
                let mut notify = notify;
                notify.clean_jobs = true;
                out.push(SessionEvent::Job(notify));
            }
            None => out.push(SessionEvent::Job(notify)),
        }
    }

    /// Ask the pool to let this channel mine a declared job (SetCustomMiningJob). The answer
    /// makes it the work ([`Self::handle`]); until then the current job stays.
    pub fn set_custom_job(&mut self, job: DeclaredJob, at_ms: i64) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        let Some(channel_id) = self.channel_id.filter(|_| self.authorized) else {
            self.custom_error = "no open mining channel to mine the declared job on".into();
            return out;
        };
        let request_id = self.next_custom_request;
        self.next_custom_request = self.next_custom_request.wrapping_add(1);
        let m = (|| {
            Some(SetCustomMiningJobOwned {
                channel_id,
                request_id,
                token: binary_sv2::B0255Owned::new(job.token.clone()).ok()?,
                version: job.version,
                prev_hash: U256Owned::from(job.prev_hash),
                min_ntime: job.min_ntime,
                nbits: job.nbits,
                coinbase_tx_version: job.coinbase.version,
                coinbase_prefix: binary_sv2::B0255Owned::new(job.coinbase.script_prefix.clone())
                    .ok()?,
                coinbase_tx_input_n_sequence: job.coinbase.sequence,
                coinbase_tx_outputs: B064KOwned::new(job.coinbase.outputs.clone()).ok()?,
                coinbase_tx_locktime: job.coinbase.locktime,
                merkle_path: Seq0255Owned::new(
                    job.merkle_path
                        .iter()
                        .map(|h| U256Owned::from(*h))
                        .collect(),
                )
                .ok()?,
            })
        })();
        let Some(m) = m else {
            self.custom_error = "declared job does not fit SetCustomMiningJob".into();
            return out;
        };
        self.custom_pending = Some((request_id, Box::new(job)));
        self.send(
            at_ms,
            AnyMessageOwned::Mining(MiningOwned::SetCustomMiningJob(m)),
            &mut out,
        );
        out
    }

    /// Stop mining the declared job (the JD client lost it): the pool's newest job becomes the
    /// work again, as a clean job since the declared one's shares are void.
    pub fn drop_custom_job(&mut self, reason: &str) -> Vec<SessionEvent> {
        let mut out = Vec::new();
        self.custom_pending = None;
        self.custom_error = reason.to_string();
        if self.custom_job.take().is_some()
            && let Some(mut notify) = self.last_pool_job.clone()
        {
            notify.clean_jobs = true;
            out.push(SessionEvent::Job(notify));
        }
        out
    }

    fn mine_custom(&mut self, job_id: u32, job: Box<DeclaredJob>, out: &mut Vec<SessionEvent>) {
        let extranonce_len = self.extranonce1.len() + self.extranonce2_size;
        let (prefix, suffix) = match job.coinbase.split(extranonce_len) {
            Ok(parts) => parts,
            Err(e) => {
                self.custom_error = format!("declared job's coinbase: {e}");
                return;
            }
        };
        let mask = self.params.version_rolling.then_some(SV2_VERSION_MASK);
        if mask != self.version_mask {
            self.version_mask = mask;
            out.push(SessionEvent::VersionMask(mask));
        }
        if self.custom_ids.len() >= MAX_CUSTOM_IDS {
            self.custom_ids.pop_front();
        }
        self.custom_ids.push_back(job_id);
        self.custom_error.clear();
        out.push(SessionEvent::Job(Box::new(Notify {
            job_id: job_id.to_string(),
            prev_hash: job.prev_hash,
            coinb1: prefix,
            coinb2: suffix,
            merkle_branch: job.merkle_path.clone(),
            version: job.version,
            nbits: job.nbits,
            ntime: job.min_ntime,
            clean_jobs: true,
        })));
        self.custom_job = Some((job_id, job));
    }

    /// SubmitSharesExtended for a checked share; `ticket` comes back in its ShareResult.
    pub fn submit(&mut self, ticket: u64, share: ShareSubmit<'_>, at_ms: i64) -> Option<Vec<u8>> {
        let channel_id = self.channel_id?;
        let job_id: u32 = share.job_id.parse().ok()?;
        let sequence_number = self.next_sequence;
        self.next_sequence = self.next_sequence.wrapping_add(1);
        let m = SubmitSharesExtendedOwned {
            channel_id,
            sequence_number,
            job_id,
            nonce: share.nonce,
            ntime: share.ntime,
            version: share.version,
            extranonce: B032Owned::new(share.extranonce2.to_vec()).ok()?,
        };
        let m = AnyMessageOwned::Mining(MiningOwned::SubmitSharesExtended(m));
        self.record(at_ms, "out", &m);
        let bytes = frames::encode(m).ok()?;
        let custom = self.custom_ids.contains(&job_id);
        self.pending.insert(sequence_number, (ticket, custom));
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_first();
        }
        Some(bytes)
    }
}

/// Build an extended job message (the test pool's side; here so both roles share one layout).
pub fn extended_job(
    channel_id: u32,
    job_id: u32,
    min_ntime: Option<u32>,
    version: u32,
    merkle_path: &[[u8; 32]],
    prefix: &[u8],
    suffix: &[u8],
) -> Option<AnyMessageOwned> {
    Some(AnyMessageOwned::Mining(MiningOwned::NewExtendedMiningJob(
        mining_sv2::NewExtendedMiningJobOwned {
            channel_id,
            job_id,
            min_ntime: Sv2OptionOwned::new(min_ntime),
            version,
            version_rolling_allowed: true,
            merkle_path: Seq0255Owned::new(
                merkle_path.iter().map(|h| U256Owned::from(*h)).collect(),
            )
            .ok()?,
            coinbase_tx_prefix: B064KOwned::new(prefix.to_vec()).ok()?,
            coinbase_tx_suffix: B064KOwned::new(suffix.to_vec()).ok()?,
        },
    )))
}

/// The target a difficulty stands for, as the wire type.
pub fn target_field(difficulty: f64) -> U256Owned {
    U256Owned::from(difficulty_to_target(difficulty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common_messages_sv2::SetupConnectionSuccess;
    use mining_sv2::{
        OpenExtendedMiningChannelSuccessOwned, SetNewPrevHashOwned, SubmitSharesErrorOwned,
        SubmitSharesSuccess,
    };

    fn session() -> Sv2Session {
        Sv2Session::new(Sv2Params {
            user: "w".into(),
            version_rolling: true,
            endpoint_host: "pool".into(),
            endpoint_port: 3336,
            device_id: String::new(),
            work_selection: false,
        })
    }

    fn feed(s: &mut Sv2Session, m: AnyMessageOwned) -> Vec<SessionEvent> {
        s.handle(&frames::encode(m).unwrap(), 0)
    }

    fn sent(events: &[SessionEvent]) -> Vec<&'static str> {
        events
            .iter()
            .filter_map(|e| match e {
                SessionEvent::SendFrame(f) => frames::kind(f).map(|k| k.1),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn setup_channel_jobs_and_share_answers() {
        let mut s = session();
        assert_eq!(sent(&s.start(0)), ["SetupConnection"]);
        let ev = feed(
            &mut s,
            AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionSuccess(
                SetupConnectionSuccess {
                    used_version: 2,
                    flags: 0,
                },
            )),
        );
        assert_eq!(sent(&ev), ["OpenExtendedMiningChannel"]);
        let ev = feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::OpenExtendedMiningChannelSuccess(
                OpenExtendedMiningChannelSuccessOwned {
                    request_id: OPEN_REQUEST_ID,
                    channel_id: 5,
                    target: target_field(2.0),
                    extranonce_size: 4,
                    extranonce_prefix: B032Owned::new(vec![1, 2, 3, 4]).unwrap(),
                    group_channel_id: 0,
                },
            )),
        );
        assert!(matches!(ev[0], SessionEvent::Difficulty(d) if (d - 2.0).abs() < 1e-9));
        assert!(matches!(ev[1], SessionEvent::Authorized));
        assert_eq!(
            (s.extranonce1.as_slice(), s.extranonce2_size),
            (&[1, 2, 3, 4][..], 4)
        );

        // A future job waits for its SetNewPrevHash, which makes it a clean job.
        let job = extended_job(5, 9, None, 0x2000_0000, &[[7; 32]], b"pre", b"suf").unwrap();
        assert!(feed(&mut s, job).is_empty());
        let ev = feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::SetNewPrevHash(SetNewPrevHashOwned {
                channel_id: 5,
                job_id: 9,
                prev_hash: U256Owned::from([3; 32]),
                min_ntime: 1000,
                nbits: 0x1d00_ffff,
            })),
        );
        assert!(matches!(
            ev[0],
            SessionEvent::VersionMask(Some(SV2_VERSION_MASK))
        ));
        let SessionEvent::Job(n) = &ev[1] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (n.job_id.as_str(), n.prev_hash, n.ntime, n.clean_jobs),
            ("9", [3; 32], 1000, true)
        );
        assert_eq!(
            (n.coinb1.as_slice(), n.coinb2.as_slice()),
            (&b"pre"[..], &b"suf"[..])
        );
        // A job with min_ntime applies to the current previous hash at once, not clean.
        let job = extended_job(5, 10, Some(1001), 0x2000_0000, &[], b"p", b"s").unwrap();
        let ev = feed(&mut s, job);
        assert!(matches!(&ev[0], SessionEvent::Job(n) if n.job_id == "10" && !n.clean_jobs));

        let share = |job_id| ShareSubmit {
            job_id,
            extranonce2: &[0, 0, 0, 1],
            ntime: 1000,
            nonce: 42,
            version: 0x2000_0000,
        };
        assert!(s.submit(100, share("9"), 0).is_some());
        assert!(s.submit(101, share("10"), 0).is_some());
        let ev = feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::SubmitSharesError(SubmitSharesErrorOwned {
                channel_id: 5,
                sequence_number: 1,
                error_code: Str0255Owned::try_from("difficulty-too-low").unwrap(),
            })),
        );
        assert!(
            matches!(&ev[0], SessionEvent::ShareResult { ticket: 101, accepted: false, reason: Some(r) } if r.message == "difficulty-too-low")
        );
        let ev = feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::SubmitSharesSuccess(SubmitSharesSuccess {
                channel_id: 5,
                last_sequence_number: 1,
                new_submits_accepted_count: 1,
                new_shares_sum: 1,
            })),
        );
        assert!(matches!(
            &ev[..],
            [SessionEvent::ShareResult {
                ticket: 100,
                accepted: true,
                ..
            }]
        ));
        assert_eq!((s.accepted, s.rejected), (1, 1));
        assert!(
            s.log
                .iter()
                .any(|m| m.message_type == "SubmitSharesExtended")
        );
    }

    #[test]
    fn a_declared_job_is_mined_until_the_pool_moves_to_a_new_block() {
        let mut s = Sv2Session::new(Sv2Params {
            work_selection: true,
            ..session().params
        });
        s.start(0);
        feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::OpenExtendedMiningChannelSuccess(
                OpenExtendedMiningChannelSuccessOwned {
                    request_id: OPEN_REQUEST_ID,
                    channel_id: 5,
                    target: target_field(2.0),
                    extranonce_size: 4,
                    extranonce_prefix: B032Owned::new(vec![1, 2, 3, 4]).unwrap(),
                    group_channel_id: 0,
                },
            )),
        );
        let prev = |p: u8, job_id| {
            AnyMessageOwned::Mining(MiningOwned::SetNewPrevHash(SetNewPrevHashOwned {
                channel_id: 5,
                job_id,
                prev_hash: U256Owned::from([p; 32]),
                min_ntime: 1000,
                nbits: 0x1d00_ffff,
            }))
        };
        feed(
            &mut s,
            extended_job(5, 9, None, 0x2000_0000, &[], b"p", b"s").unwrap(),
        );
        feed(&mut s, prev(3, 9));
        let job = DeclaredJob {
            token: b"declared-1".to_vec(),
            template_id: 7,
            version: 0x2000_0000,
            prev_hash: [3; 32],
            min_ntime: 1000,
            nbits: 0x1d00_ffff,
            coinbase: crate::jd::coinbase::CoinbaseFields {
                version: 2,
                script_prefix: vec![3, 7, 0, 0],
                sequence: u32::MAX,
                outputs: crate::jd::coinbase::encode_outputs(&[]),
                locktime: 0,
            },
            merkle_path: vec![[8; 32]],
            tx_count: 1,
            declared_at_ms: 0,
        };
        assert_eq!(sent(&s.set_custom_job(job, 0)), ["SetCustomMiningJob"]);
        // An answer to another request changes nothing.
        let success = |request_id| {
            AnyMessageOwned::Mining(MiningOwned::SetCustomMiningJobSuccess(
                mining_sv2::SetCustomMiningJobSuccess {
                    channel_id: 5,
                    request_id,
                    job_id: 77,
                },
            ))
        };
        assert!(feed(&mut s, success(2)).is_empty());
        let ev = feed(&mut s, success(1));
        let Some(SessionEvent::Job(n)) = ev.last() else {
            panic!("{ev:?}")
        };
        assert_eq!((n.job_id.as_str(), n.clean_jobs), ("77", true));
        // The coinbase is split where the channel's 8-byte extranonce goes.
        assert_eq!(n.coinb1.len(), 42 + 4);
        assert_eq!(n.coinb1[41], 4 + 8);
        assert_eq!(s.custom_job.as_ref().map(|c| c.0), Some(77));
        // The pool's updates on the same block do not replace the declared job...
        let update = extended_job(5, 10, Some(1001), 0x2000_0000, &[], b"p", b"s").unwrap();
        assert!(feed(&mut s, update).is_empty());
        // ...a new block does: its pool job is mined and the status says why.
        feed(
            &mut s,
            extended_job(5, 11, None, 0x2000_0000, &[], b"p", b"s").unwrap(),
        );
        let ev = feed(&mut s, prev(4, 11));
        assert!(
            matches!(ev.last(), Some(SessionEvent::Job(n)) if n.job_id == "11" && n.clean_jobs)
        );
        assert!(s.custom_job.is_none());
        assert!(s.custom_error.contains("new block"), "{}", s.custom_error);
        // Nothing declared: dropping is a no-op for the work.
        assert!(s.drop_custom_job("lost").is_empty());
    }

    #[test]
    fn refusals_and_garbage() {
        let mut s = session();
        let ev = feed(
            &mut s,
            AnyMessageOwned::Mining(MiningOwned::OpenMiningChannelError(
                mining_sv2::OpenMiningChannelErrorOwned {
                    request_id: OPEN_REQUEST_ID,
                    error_code: Str0255Owned::try_from("unknown-user").unwrap(),
                },
            )),
        );
        assert!(matches!(&ev[..], [SessionEvent::Refused(r)] if r.contains("unknown-user")));
        // Garbage frames never panic and are logged as unreadable.
        let mut x: u32 = 1;
        for len in 0..200 {
            let frame: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = s.handle(&frame, 0);
        }
        assert!(s.log.len() <= LOG_LEN);
    }
}
