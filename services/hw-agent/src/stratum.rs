//! hw-agent as a client of stratum-agent: jobs in (StreamJobs), shares out (SubmitShare).
//!
//! Both survive stratum-agent restarts. The job stream is re-opened with backoff while the
//! chains keep hashing the last job; shares found meanwhile wait in a bounded [`ShareQueue`]
//! and go out when SubmitShare answers again, minus those whose pool epoch went away.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use svcos_common::Shutdown;
use svcos_common::ipc::Backoff;
use svcos_common::status::is_unavailable;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::stratum::v1::{ShareDisposition, StreamJobsRequest, SubmitShareResponse};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use crate::chain::{ChainCommand, ChainHandle};
use crate::probes::Probes;
use crate::shares::{PendingShare, ShareQueue};
use crate::work::{ActiveJob, JobBook};

/// Shares in flight to stratum-agent at once (each call is ~0.2 ms; this only matters in a
/// burst after an outage).
const MAX_IN_FLIGHT: usize = 16;

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
                        chain.send(ChainCommand::Job(Arc::clone(&job)));
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

/// Deliver shares until shutdown, queueing while stratum-agent is away.
pub async fn submit_shares(
    channel: Channel,
    mut incoming: mpsc::Receiver<PendingShare>,
    mut jobs: watch::Receiver<JobStatus>,
    counters: Arc<ShareCounters>,
    probes: Arc<Probes>,
    capacity: usize,
    shutdown: Shutdown,
) {
    let client = StratumServiceClient::new(channel);
    let mut queue = ShareQueue::new(capacity);
    let mut in_flight = FuturesUnordered::new();
    let mut backoff = Backoff::default();
    // While blocked, nothing is sent until the retry timer fires (one probe at a time).
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut epoch = jobs.borrow().epoch;
    loop {
        // Send what may go now.
        if retry_at.is_none() {
            while in_flight.len() < MAX_IN_FLIGHT {
                let Some(share) = queue.pop() else { break };
                if epoch.is_some_and(|e| e != share.request.pool_epoch) {
                    queue.dropped_stale += 1;
                    continue;
                }
                let mut c = client.clone();
                probes.share_dispatched(share.read_at.elapsed());
                if svcos_common::trace::enabled() {
                    // Share-path trace: the SubmitShare call starts.
                    svcos_common::trace::record(
                        "hw.dispatch",
                        format_args!(
                            "{:08x} {}",
                            share.request.nonce,
                            svcos_common::trace::mono_ns()
                        ),
                    );
                }
                in_flight.push(async move {
                    let r = c.submit_share(share.request.clone()).await;
                    (share, r)
                });
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
        tokio::select! {
            share = incoming.recv() => match share {
                Some(s) => queue.push(s),
                None => return,
            },
            Some((share, result)) = in_flight.next(), if !in_flight.is_empty() => {
                handle_result(share, result, &mut queue, &counters, &probes, &mut retry_at, &mut backoff);
            }
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
                // The stream came back: stratum-agent is there, try at once.
                if jobs.borrow().connected {
                    retry_at = None;
                }
            }
            _ = retry => retry_at = None,
            _ = shutdown.wait() => return,
        }
    }
}

fn handle_result(
    share: PendingShare,
    result: Result<tonic::Response<SubmitShareResponse>, tonic::Status>,
    queue: &mut ShareQueue,
    counters: &ShareCounters,
    probes: &Probes,
    retry_at: &mut Option<tokio::time::Instant>,
    backoff: &mut Backoff,
) {
    match result {
        Ok(resp) => {
            backoff.reset();
            counters.sent.fetch_add(1, Ordering::Relaxed);
            probes.share_submitted(share.read_at.elapsed());
            let d = resp.into_inner().disposition();
            if matches!(d, ShareDisposition::Stale | ShareDisposition::BelowTarget) {
                tracing::debug!(disposition = ?d, "share not forwarded by stratum-agent");
            }
        }
        Err(status) if is_unavailable(&status) => {
            // stratum-agent is away: keep the share, first in line, and retry later.
            queue.push_front(share);
            *retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
        }
        Err(status) => {
            tracing::warn!(code = ?status.code(), message = status.message(), "share refused");
        }
    }
}
