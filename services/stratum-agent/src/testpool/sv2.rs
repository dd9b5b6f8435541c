//! The test pool's Stratum V2 upstream (pool role), built from the reference crates: a Noise NX
//! responder with a generated authority keypair, SetupConnection, extended channels, jobs from
//! the same block data as the V1 side (NewExtendedMiningJob + SetNewPrevHash + SetTarget), and
//! every SubmitSharesExtended verified by SHA-256d against the channel's exact target
//! ([`TestPool`]'s own header assembly on rust-bitcoin). The SRI pool role itself needs a Bitcoin
//! Core template provider, which cannot run on these machines; this upstream is what the tests
//! and `svcos sim` mine against over SV2.

use std::sync::Arc;
use std::time::Duration;

use binary_sv2::{B032Owned, Str0255Owned, U256Owned};
use common_messages_sv2::{Protocol, SetupConnectionErrorOwned, SetupConnectionSuccess};
use mining_sv2::{
    OpenExtendedMiningChannelSuccessOwned, OpenMiningChannelErrorOwned,
    SetCustomMiningJobErrorOwned, SetCustomMiningJobOwned, SetCustomMiningJobSuccess,
    SetNewPrevHashOwned, SetTargetOwned, SubmitSharesErrorOwned, SubmitSharesSuccess,
};
use parsers_sv2::{AnyMessageOwned, CommonMessagesOwned, MiningOwned};
use secp256k1_sv2::{Keypair, Secp256k1};
use svcos_common::Shutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc};

use super::{
    Broadcast, JOB_NBITS, JOB_VERSION, PoolJob, SERVER_VERSION_MASK, TestPool, Threshold, Verdict,
};
use crate::jd::coinbase::CoinbaseFields;
use crate::v2::frames::{self, difficulty_to_target};
use crate::v2::noise;
use crate::v2::session::{PROTOCOL_VERSION, REQUIRES_WORK_SELECTION, extended_job};

/// File name of the authority public key in the test pool's state directory.
pub const AUTHORITY_FILE: &str = "sv2-authority.pub";
/// Validity of the certificates the responder signs.
const CERT_VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// The one channel id of every connection.
const CHANNEL_ID: u32 = 1;

/// The pool's authority keypair (what miners pin in the pool URL).
#[derive(Clone)]
pub struct Authority {
    /// x-only public key.
    pub public: [u8; 32],
    secret: [u8; 32],
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("public", &self.public_b58())
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// A fresh random keypair.
    pub fn generate() -> Self {
        let secp = Secp256k1::new();
        let (secret, _) = secp.generate_keypair(&mut secp256k1_sv2::rand::thread_rng());
        let kp = Keypair::from_secret_key(&secp, &secret);
        Authority {
            public: kp.x_only_public_key().0.serialize(),
            secret: secret.secret_bytes(),
        }
    }

    /// The public key in the SRI's base58check form (what goes after the port in the URL).
    pub fn public_b58(&self) -> String {
        let key = secp256k1_sv2::XOnlyPublicKey::from_slice(&self.public).expect("own key");
        key_utils::Secp256k1PublicKey(key).to_string()
    }
}

/// SV2 share reject codes for the test pool's verdicts (the spec's wording where it has one).
fn error_code(code: i64, reason: &str) -> &'static str {
    match code {
        21 => "stale-share",
        22 => "duplicate-share",
        23 if reason.contains("reject_all") => "rejected-by-test-pool",
        23 => "difficulty-too-low",
        _ if reason.contains("version") => "invalid-version",
        _ if reason.contains("ntime") => "invalid-timestamp",
        _ => "invalid-share",
    }
}

/// Serve SV2 miners on `listener` until shutdown. The V1 side's [`super::serve`] drives the
/// block schedule; run it too (or call [`TestPool::new_block`]) for jobs to change.
pub async fn serve(
    pool: Arc<TestPool>,
    listener: TcpListener,
    authority: Authority,
    shutdown: Shutdown,
) {
    {
        let mut inner = pool.lock();
        inner.sv2_running = true;
        inner.sv2.authority = authority.public_b58();
    }
    let authority = Arc::new(authority);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => { tracing::warn!(error = %e, "sv2 accept failed"); tokio::time::sleep(Duration::from_millis(50)).await; continue; }
            },
            _ = shutdown.wait() => break,
        };
        let (pool, shutdown, authority) = (pool.clone(), shutdown.clone(), authority.clone());
        tokio::spawn(async move {
            if pool.behavior().refuse_connections {
                return;
            }
            {
                let mut inner = pool.lock();
                inner.connections_total += 1;
                inner.connections_open += 1;
                inner.sv2.connections += 1;
            }
            if let Err(e) = connection(&pool, stream, &authority, shutdown).await {
                tracing::debug!(%peer, error = %e, "sv2 miner connection ended");
            }
            pool.lock().connections_open -= 1;
        });
    }
}

/// One miner's channel.
struct Channel {
    worker: String,
    extranonce1: u32,
    target: [u8; 32],
}

async fn connection(
    pool: &Arc<TestPool>,
    stream: TcpStream,
    authority: &Authority,
    shutdown: Shutdown,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let mut rx = pool.tx.subscribe();
    let (read, write) = stream.into_split();
    let (mut reader, mut writer) = noise::respond(
        read,
        write,
        &authority.public,
        &authority.secret,
        CERT_VALIDITY,
        Duration::from_secs(10),
    )
    .await
    .map_err(|e| e.to_string())?;
    pool.lock().sv2.handshakes += 1;
    // The frame reader is not cancel-safe: it runs in its own task and hands frames over.
    let (frames_tx, mut frames_rx) = mpsc::channel::<Vec<u8>>(64);
    let read_task = tokio::spawn(async move {
        while let Ok(frame) = reader.next().await {
            if frames_tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let _abort = AbortOnDrop(read_task.abort_handle());
    // SetupConnection's protocol picks the role: the same port and key serve job declaration
    // and templates (`jd.rs`).
    let Some(first) = frames_rx.recv().await else {
        return Ok(());
    };
    if let Ok(AnyMessageOwned::Common(CommonMessagesOwned::SetupConnection(s))) =
        crate::jd::decode(&first)
    {
        match s.protocol {
            Protocol::JobDeclarationProtocol => {
                return super::jd::declaration_server(pool, s, frames_rx, writer, shutdown).await;
            }
            Protocol::TemplateDistributionProtocol => {
                return super::jd::template_provider(pool, s, frames_rx, writer, shutdown).await;
            }
            Protocol::MiningProtocol => {}
        }
    }
    let mut first = Some(first);
    let mut setup = None;
    let mut channel: Option<Channel> = None;
    loop {
        let out: Vec<AnyMessageOwned> = if let Some(frame) = first.take() {
            let slow = pool.behavior().slow_ms;
            if slow > 0 {
                tokio::time::sleep(Duration::from_millis(slow.into())).await;
            }
            match frames::decode(&frame) {
                Ok(m) => handle(pool, &mut setup, &mut channel, m),
                Err(e) => return Err(format!("bad frame from miner: {e}")),
            }
        } else {
            tokio::select! {
                frame = frames_rx.recv() => {
                    let Some(frame) = frame else { return Ok(()) };
                    let slow = pool.behavior().slow_ms;
                    if slow > 0 {
                        tokio::time::sleep(Duration::from_millis(slow.into())).await;
                    }
                    match frames::decode(&frame) {
                        Ok(m) => handle(pool, &mut setup, &mut channel, m),
                        Err(e) => return Err(format!("bad frame from miner: {e}")),
                    }
                }
                msg = rx.recv() => match msg {
                    Ok(Broadcast::Job(job)) => match &channel {
                        Some(_) if !pool.behavior().silent => job_messages(&job),
                        _ => vec![],
                    },
                    Ok(Broadcast::Disconnect) | Ok(Broadcast::Reconnect { .. }) => return Ok(()),
                    Err(broadcast::error::RecvError::Lagged(_)) => vec![],
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
                _ = shutdown.wait() => return Ok(()),
            }
        };
        for m in out {
            let bytes = frames::encode(m).map_err(|e| e.to_string())?;
            writer.send(&bytes).await.map_err(|e| e.to_string())?;
        }
    }
}

/// The messages that hand a job to a channel: a clean job is a future job plus the
/// SetNewPrevHash that activates it; an update within the block is active at once.
fn job_messages(job: &PoolJob) -> Vec<AnyMessageOwned> {
    let Ok(id) = u32::from_str_radix(&job.id, 16) else {
        return vec![];
    };
    let min_ntime = (!job.clean).then_some(job.ntime);
    let Some(new_job) = extended_job(
        CHANNEL_ID,
        id,
        min_ntime,
        JOB_VERSION,
        &job.merkle_branch,
        &job.coinb1,
        &job.coinb2,
    ) else {
        return vec![];
    };
    let mut out = vec![new_job];
    if job.clean {
        out.push(AnyMessageOwned::Mining(MiningOwned::SetNewPrevHash(
            SetNewPrevHashOwned {
                channel_id: CHANNEL_ID,
                job_id: id,
                prev_hash: U256Owned::from(job.prev_hash),
                min_ntime: job.ntime,
                nbits: JOB_NBITS,
            },
        )));
    }
    out
}

fn text(s: &str) -> Str0255Owned {
    Str0255Owned::try_from(s).unwrap_or_else(|_| Str0255Owned::try_from("error").expect("short"))
}

/// `setup` holds the flags of an accepted SetupConnection.
fn handle(
    pool: &Arc<TestPool>,
    setup: &mut Option<u32>,
    channel: &mut Option<Channel>,
    message: AnyMessageOwned,
) -> Vec<AnyMessageOwned> {
    use AnyMessageOwned::{Common, Mining};
    match message {
        Common(CommonMessagesOwned::SetupConnection(s)) => {
            let version = (s.min_version..=s.max_version).contains(&PROTOCOL_VERSION);
            if s.protocol != Protocol::MiningProtocol || !version {
                return vec![Common(CommonMessagesOwned::SetupConnectionError(
                    SetupConnectionErrorOwned {
                        flags: 0,
                        error_code: text(if version {
                            "unsupported-protocol"
                        } else {
                            "protocol-version-mismatch"
                        }),
                    },
                ))];
            }
            *setup = Some(s.flags);
            // Flags in a mining Success: REQUIRES_FIXED_VERSION (bit 0) off, so version rolling
            // is allowed; REQUIRES_EXTENDED_CHANNELS (bit 1) off.
            vec![Common(CommonMessagesOwned::SetupConnectionSuccess(
                SetupConnectionSuccess {
                    used_version: PROTOCOL_VERSION,
                    flags: 0,
                },
            ))]
        }
        Mining(MiningOwned::OpenExtendedMiningChannel(open)) => {
            let refuse = |code: &str| {
                vec![Mining(MiningOwned::OpenMiningChannelError(
                    OpenMiningChannelErrorOwned {
                        request_id: open.request_id,
                        error_code: text(code),
                    },
                ))]
            };
            if setup.is_none() {
                return refuse("setup-connection-first");
            }
            let worker = open.user_identity.as_utf8_or_hex();
            if pool.behavior().refuse_authorize || worker.is_empty() {
                return refuse("unknown-user");
            }
            let en2_size = pool.settings.extranonce2_size;
            if usize::from(open.min_extranonce_size) > en2_size {
                return refuse("min-extranonce-size-too-large");
            }
            let extranonce1 = {
                let mut inner = pool.lock();
                inner.next_extranonce1 += 1;
                inner.sv2.channels += 1;
                inner.next_extranonce1
            };
            // The channel target never exceeds what the miner asked as its maximum.
            let mut target = difficulty_to_target(pool.settings.difficulty);
            let max = open.max_target.to_array();
            if !frames::meets_target(&target, &max) {
                target = max;
            }
            *channel = Some(Channel {
                worker,
                extranonce1,
                target,
            });
            let mut out = vec![
                Mining(MiningOwned::OpenExtendedMiningChannelSuccess(
                    OpenExtendedMiningChannelSuccessOwned {
                        request_id: open.request_id,
                        channel_id: CHANNEL_ID,
                        target: U256Owned::from(target),
                        extranonce_size: en2_size as u16,
                        extranonce_prefix: B032Owned::new(extranonce1.to_be_bytes().to_vec())
                            .expect("4 bytes"),
                        group_channel_id: 0,
                    },
                )),
                Mining(MiningOwned::SetTarget(SetTargetOwned {
                    channel_id: CHANNEL_ID,
                    maximum_target: U256Owned::from(target),
                })),
            ];
            if !pool.behavior().silent {
                // The current block's job first, then the latest update if there is one.
                let jobs: Vec<Arc<PoolJob>> = pool.lock().jobs.iter().cloned().collect();
                if let Some(first) = jobs.iter().rev().find(|j| j.clean) {
                    out.extend(job_messages(first));
                    if let Some(last) = jobs.last().filter(|l| !l.clean) {
                        out.extend(job_messages(last));
                    }
                }
            }
            out
        }
        Mining(MiningOwned::SubmitSharesExtended(share)) => {
            let Some(ch) = channel.as_ref().filter(|_| share.channel_id == CHANNEL_ID) else {
                return vec![Mining(MiningOwned::SubmitSharesError(
                    SubmitSharesErrorOwned {
                        channel_id: share.channel_id,
                        sequence_number: share.sequence_number,
                        error_code: text("invalid-channel-id"),
                    },
                ))];
            };
            let extranonce2 = share.extranonce.to_owned_bytes();
            // SV2 carries the full version; BIP 320 bits outside the mask must stay the job's.
            let verdict = if (share.version ^ JOB_VERSION) & !SERVER_VERSION_MASK != 0 {
                let mut inner = pool.lock();
                *inner
                    .reject_reasons
                    .entry("version bits outside the mask".into())
                    .or_default() += 1;
                Verdict::Rejected(20, "version bits outside the mask")
            } else {
                pool.verify(
                    &ch.worker,
                    &format!("{:x}", share.job_id),
                    ch.extranonce1,
                    &extranonce2,
                    share.ntime,
                    share.nonce,
                    Some(share.version & SERVER_VERSION_MASK),
                    Some(SERVER_VERSION_MASK),
                    Threshold::Target(ch.target),
                )
            };
            let declared = pool
                .lock()
                .jd
                .custom_jobs
                .contains_key(&format!("{:x}", share.job_id));
            match verdict {
                Verdict::Accepted { .. } => {
                    let mut inner = pool.lock();
                    inner.sv2.accepted += 1;
                    inner.jd.stats.accepted += u64::from(declared);
                    vec![Mining(MiningOwned::SubmitSharesSuccess(
                        SubmitSharesSuccess {
                            channel_id: CHANNEL_ID,
                            last_sequence_number: share.sequence_number,
                            new_submits_accepted_count: 1,
                            new_shares_sum: 1,
                        },
                    ))]
                }
                Verdict::Rejected(code, reason) => {
                    let mut inner = pool.lock();
                    inner.sv2.rejected += 1;
                    inner.jd.stats.rejected += u64::from(declared);
                    vec![Mining(MiningOwned::SubmitSharesError(
                        SubmitSharesErrorOwned {
                            channel_id: CHANNEL_ID,
                            sequence_number: share.sequence_number,
                            error_code: text(error_code(code, reason)),
                        },
                    ))]
                }
            }
        }
        Mining(MiningOwned::SetCustomMiningJob(job)) => {
            let refuse = |code: &str| {
                vec![Mining(MiningOwned::SetCustomMiningJobError(
                    SetCustomMiningJobErrorOwned {
                        channel_id: job.channel_id,
                        request_id: job.request_id,
                        error_code: text(code),
                    },
                ))]
            };
            if channel.is_none() || job.channel_id != CHANNEL_ID {
                return refuse("invalid-channel-id");
            }
            if setup.is_none_or(|flags| flags & REQUIRES_WORK_SELECTION == 0) {
                return refuse("work-selection-not-negotiated");
            }
            match custom_job(pool, &job) {
                Ok(job_id) => vec![Mining(MiningOwned::SetCustomMiningJobSuccess(
                    SetCustomMiningJobSuccess {
                        channel_id: CHANNEL_ID,
                        request_id: job.request_id,
                        job_id,
                    },
                ))],
                Err(code) => refuse(code),
            }
        }
        // Nothing else is expected from a miner; ignoring it keeps the connection usable.
        _ => vec![],
    }
}

fn custom_job(pool: &TestPool, job: &SetCustomMiningJobOwned) -> Result<u32, &'static str> {
    let fields = CoinbaseFields {
        version: job.coinbase_tx_version,
        script_prefix: job.coinbase_prefix.to_owned_bytes(),
        sequence: job.coinbase_tx_input_n_sequence,
        outputs: job.coinbase_tx_outputs.to_owned_bytes(),
        locktime: job.coinbase_tx_locktime,
    };
    let path: Vec<[u8; 32]> = job
        .merkle_path
        .clone()
        .into_inner()
        .into_iter()
        .map(|h| h.to_array())
        .collect();
    pool.custom_job(
        &job.token.to_owned_bytes(),
        &fields,
        job.prev_hash.to_array(),
        job.version,
        job.nbits,
        job.min_ntime,
        &path,
    )
}

/// Aborts the frame reader when the connection ends.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
