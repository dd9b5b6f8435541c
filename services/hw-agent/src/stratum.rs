//! hw-agent as a client of stratum-agent: jobs in (StreamJobs), shares out (SubmitShares).
//!
//! Both survive stratum-agent restarts. The job stream is re-opened with backoff while the
//! chains keep hashing the last job; shares found meanwhile wait in a bounded [`ShareQueue`]
//! and go out when the SubmitShares stream is open again, minus those whose pool epoch went away.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use svcos_common::Shutdown;
use svcos_common::ipc::Backoff;
use svcos_common::status::is_unavailable;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::{
    ShareDisposition, StreamJobsRequest, SubmitShareRequest, SubmitShareResponse,
};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use crate::chain::ChainHandle;
use crate::probes::Probes;
use crate::shares::{PendingShare, ShareQueue};
use crate::work::{ActiveJob, JobBook};

/// Shares sent on the stream and not yet answered (this only matters in a burst after an
/// outage; one share is answered in about 0.2 ms).
const MAX_IN_FLIGHT: usize = 16;
/// How long opening the share stream may take before it counts as failed.
const LINK_OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the job follower tells the rest of hw-agent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobStatus {
    /// Whether the stream is up.
    pub connected: bool,
    /// Current pool epoch, once a job was seen.
    pub epoch: Option<u64>,
    /// Unix ms the current job arrived; 0 without work.
    pub job_received_at_ms: i64,
    /// Pool job id of the current job.
    pub job_id: String,
}

/// Share counters shared with telemetry.
#[derive(Debug, Default)]
pub struct ShareCounters {
    /// Shares stratum-agent accepted from us (any disposition but an error).
    pub sent: AtomicU64,
    /// Shares waiting.
    pub queued: AtomicU32,
    /// Shares dropped (queue overflow or stale epoch).
    pub dropped: AtomicU64,
}

/// Follow StreamJobs until shutdown, handing every job to every chain.
pub async fn follow_jobs(
    channel: Channel,
    chains: Arc<Vec<ChainHandle>>,
    generation: Arc<AtomicU64>,
    mut book: JobBook,
    status: watch::Sender<JobStatus>,
    shutdown: Shutdown,
) {
    let mut client = StratumServiceClient::new(channel);
    let mut backoff = Backoff::default();
    let mut warned = false;
    while !shutdown.is_triggered() {
        let opened = tokio::select! {
            r = client.stream_jobs(StreamJobsRequest {}) => r,
            _ = shutdown.wait() => return,
        };
        match opened {
            Ok(resp) => {
                if warned {
                    tracing::info!("job stream from stratum-agent re-established");
                }
                warned = false;
                backoff.reset();
                status.send_modify(|s| s.connected = true);
                let mut stream = resp.into_inner();
                loop {
                    let item = tokio::select! {
                        m = stream.message() => m,
                        _ = shutdown.wait() => return,
                    };
                    let Ok(Some(template)) = item else { break };
                    // Share-path trace: the job decoded from the stream (clean ones only).
                    let received_ns = if template.clean_jobs {
                        svcos_common::trace::stamp()
                    } else {
                        0
                    };
                    let (gen_now, invalidates) = book.admit(&template);
                    let job = match ActiveJob::from_template(
                        &template,
                        gen_now,
                        svcos_common::time::unix_ms(),
                    ) {
                        Ok(j) => Arc::new(j),
                        Err(e) => {
                            tracing::warn!(error = %e, "unusable job template");
                            continue;
                        }
                    };
                    if invalidates {
                        // Published before the chains see the job, so every nonce of the old
                        // work that is read from now on counts as stale.
                        generation.store(gen_now, Ordering::Release);
                    }
                    for chain in chains.iter() {
                        chain.job(Arc::clone(&job));
                    }
                    if received_ns != 0 {
                        svcos_common::trace::record(
                            "hw.job",
                            format_args!(
                                "{} {received_ns} {}",
                                hex::encode(job.job.prev_hash),
                                svcos_common::trace::mono_ns()
                            ),
                        );
                    }
                    status.send_modify(|s| {
                        s.epoch = Some(template.pool_epoch);
                        s.job_received_at_ms = job.arrived_unix_ms;
                        s.job_id = template.job_id.clone();
                    });
                }
                status.send_modify(|s| s.connected = false);
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(code = ?e.code(), "stratum-agent job stream unavailable; hashing the last job");
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = shutdown.wait() => return,
        }
    }
}

/// The open SubmitShares stream: shares go in through `tx`, answers come back in order.
struct ShareLink {
    tx: mpsc::Sender<SubmitShareRequest>,
    answers: tonic::Streaming<SubmitShareResponse>,
    /// Sent and not yet answered, oldest first (the order the answers come in).
    awaiting: VecDeque<PendingShare>,
}

/// Open the share stream. The call returns once stratum-agent has answered with its headers,
/// which its handler does at once; the bound keeps a wedged peer from holding shares forever.
async fn open_link(client: &mut StratumServiceClient<Channel>) -> Result<ShareLink, tonic::Status> {
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
    let call = client.submit_shares(tokio_stream::wrappers::ReceiverStream::new(rx));
    let answers = tokio::time::timeout(LINK_OPEN_TIMEOUT, call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("share stream did not open"))??
        .into_inner();
    Ok(ShareLink {
        tx,
        answers,
        awaiting: VecDeque::new(),
    })
}

/// Deliver shares until shutdown, queueing while stratum-agent is away.
///
/// Shares go over one long-lived SubmitShares stream. When it breaks, the shares it had not
/// answered go back to the front of the queue (stratum-agent answers a resent one it already
/// forwarded as a duplicate) and the stream is re-opened with backoff.
pub async fn submit_shares(
    channel: Channel,
    mut incoming: mpsc::Receiver<PendingShare>,
    mut jobs: watch::Receiver<JobStatus>,
    counters: Arc<ShareCounters>,
    probes: Arc<Probes>,
    capacity: usize,
    shutdown: Shutdown,
) {
    let mut client = StratumServiceClient::new(channel);
    let mut queue = ShareQueue::new(capacity);
    let mut link: Option<ShareLink> = None;
    let mut backoff = Backoff::default();
    // While blocked, the stream is not re-opened until the retry timer fires.
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut warned = false;
    // Before the first link, a refusal is only start-up order (hw-agent may start first).
    let mut ever_up = false;
    let mut epoch = jobs.borrow().epoch;
    loop {
        // Opened before there is a share to send, so the first one does not wait for it.
        if link.is_none() && retry_at.is_none() {
            let opened = tokio::select! {
                r = open_link(&mut client) => r,
                _ = shutdown.wait() => return,
            };
            match opened {
                Ok(l) => {
                    if warned {
                        tracing::info!("share stream to stratum-agent re-established");
                        warned = false;
                    }
                    ever_up = true;
                    link = Some(l);
                }
                Err(status) => {
                    if !ever_up {
                        tracing::debug!(code = ?status.code(), "stratum-agent not taking shares yet");
                    } else if !warned {
                        tracing::warn!(code = ?status.code(), "stratum-agent takes no shares; queueing them");
                        warned = true;
                    }
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
            }
        }
        // Send what may go now.
        if let Some(l) = link.as_mut() {
            while l.awaiting.len() < MAX_IN_FLIGHT {
                let Some(share) = queue.pop() else { break };
                if epoch.is_some_and(|e| e != share.request.pool_epoch) {
                    queue.dropped_stale += 1;
                    continue;
                }
                // The channel holds MAX_IN_FLIGHT and every share in it is also awaited, so
                // it is never full; closed means the stream ended, which the answers show next.
                if l.tx.try_send(share.request.clone()).is_err() {
                    queue.push_front(share);
                    break;
                }
                // Counted once it is in the stream: a share put back above goes out again.
                probes.share_dispatched(share.read_at.elapsed());
                if svcos_common::trace::enabled() {
                    // Share-path trace: the share enters the stream.
                    svcos_common::trace::record(
                        "hw.dispatch",
                        format_args!(
                            "{:08x} {}",
                            share.request.nonce,
                            svcos_common::trace::mono_ns()
                        ),
                    );
                }
                l.awaiting.push_back(share);
            }
        }
        counters.queued.store(queue.len() as u32, Ordering::Relaxed);
        counters.dropped.store(
            queue.dropped_overflow + queue.dropped_stale,
            Ordering::Relaxed,
        );
        let retry = async {
            match retry_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let answer = async {
            match link.as_mut() {
                Some(l) => l.answers.message().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            share = incoming.recv() => match share {
                Some(s) => queue.push(s),
                None => return,
            },
            answer = answer => match (answer, link.as_mut().and_then(|l| l.awaiting.pop_front())) {
                (Ok(Some(resp)), Some(share)) => {
                    backoff.reset();
                    taken(share, resp, &counters, &probes);
                }
                (answer, unanswered) => {
                    // The stream ended (stratum-agent restarting) or answered more than it
                    // was sent: keep every unanswered share, first in line, and re-open later.
                    let l = link.take();
                    let rest = l.into_iter().flat_map(|l| l.awaiting).collect::<Vec<_>>();
                    for share in rest.into_iter().rev().chain(unanswered) {
                        queue.push_front(share);
                    }
                    if let Err(status) = answer && !is_unavailable(&status) {
                        tracing::warn!(code = ?status.code(), message = status.message(), "share stream failed");
                    }
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
            },
            changed = jobs.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = jobs.borrow().epoch;
                if now != epoch && let Some(e) = now {
                    let dropped = queue.retain_epoch(e);
                    if dropped > 0 {
                        tracing::info!(dropped, "queued shares of an old pool epoch dropped");
                    }
                }
                epoch = now;
                // The job stream came back: stratum-agent is there, try at once.
                if jobs.borrow().connected {
                    retry_at = None;
                }
            }
            _ = retry => retry_at = None,
            _ = shutdown.wait() => return,
        }
    }
}

/// stratum-agent answered a share.
fn taken(
    share: PendingShare,
    resp: SubmitShareResponse,
    counters: &ShareCounters,
    probes: &Probes,
) {
    if !resp.refused.is_empty() {
        tracing::warn!(reason = %resp.refused, "share refused");
        return;
    }
    counters.sent.fetch_add(1, Ordering::Relaxed);
    probes.share_submitted(share.read_at.elapsed());
    let d = resp.disposition();
    if matches!(d, ShareDisposition::Stale | ShareDisposition::BelowTarget) {
        tracing::debug!(disposition = ?d, "share not forwarded by stratum-agent");
    }
}
