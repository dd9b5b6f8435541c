//! Restart stratum-agent while mining (in-process, same state dir, production entry): shares
//! found during the gap are submitted after the restart when still valid, none twice, and the
//! counters carry on.

mod common;

use common::*;
use pb::ShareDisposition as D;
use svcos_proto::stratum::v1 as pb;

#[tokio::test]
async fn gap_shares_are_submitted_once_after_restart_and_counters_survive() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(vec![pool.pool_config("w", 0)]);

    let mut agent = Agent::start(dir.path(), &cfg).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    let before = mine(&job, 1, 0).await;
    assert_eq!(agent.submit(&before).await.unwrap(), D::Submitted);
    wait_until("first share", || async { pool.pool.accepted("w") == 1 }).await;
    agent.wait_pools("counted", |p| p.accepted == 1).await;
    agent.stop().await;

    // hw-agent keeps hashing the job while stratum-agent is away.
    let gap1 = mine(&job, 2, 0).await;
    let gap2 = mine(&job, 3, 0).await;

    let mut agent = Agent::start(dir.path(), &cfg).await;
    let mut jobs = agent.jobs().await;
    let first = next_job(&mut jobs).await;
    assert_eq!(
        first.pool_epoch, job.pool_epoch,
        "the saved session's work is served at once"
    );
    let d = agent.submit(&gap1).await.unwrap();
    assert!(d == D::Queued || d == D::Submitted, "{d:?}");
    // hw-agent retries a share it never got an answer for: already taken before the restart.
    assert_eq!(agent.submit(&before).await.unwrap(), D::Duplicate);
    wait_until("gap share", || async { pool.pool.accepted("w") == 2 }).await;
    assert_eq!(agent.submit(&gap2).await.unwrap(), D::Submitted);
    assert_eq!(agent.submit(&gap1).await.unwrap(), D::Duplicate);
    wait_until("second gap share", || async {
        pool.pool.accepted("w") == 3
    })
    .await;

    let p = agent
        .wait_pools("counters carried over", |p| p.accepted == 3)
        .await;
    assert_eq!(p.pools[0].accepted, 3);
    assert_eq!(pool.pool.rejected("w"), 0, "nothing went out twice");
    assert_eq!(pool.pool.stats().resumed_sessions, 1);
    agent.stop().await;

    // A third start: still the same totals.
    let mut agent = Agent::start(dir.path(), &cfg).await;
    assert_eq!(agent.pools().await.accepted, 3);
    agent.stop().await;
}

#[tokio::test]
async fn gap_shares_of_a_session_the_pool_forgot_are_dropped_not_sent() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(vec![pool.pool_config("w", 0)]);
    let mut agent = Agent::start(dir.path(), &cfg).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    agent.stop().await;

    // The pool restarts meanwhile: a new pool knows neither the session nor the job.
    pool.shutdown.trigger();
    let _ = pool.task.await;
    let pool2 = Pool::start().await;
    let cfg2 = config(vec![pool2.pool_config("w", 0)]);
    let gap = mine(&job, 2, 0).await;

    let mut agent = Agent::start(dir.path(), &cfg2).await;
    let mut jobs = agent.jobs().await;
    let fresh = job_where(&mut jobs, |j| j.pool_epoch != job.pool_epoch).await;
    assert!(
        fresh.pool_epoch > job.pool_epoch,
        "epochs never repeat across restarts"
    );
    assert_eq!(agent.submit(&gap).await.unwrap(), D::Stale);
    assert_eq!(
        pool2.pool.stats().workers.len(),
        0,
        "nothing reached the new pool"
    );
    agent.stop().await;
}
