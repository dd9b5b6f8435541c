//! End to end through the production entry: jobs from the test pool reach StreamJobs, shares go
//! back and the pool verifies them by SHA-256d.

mod common;

use common::*;
use pb::ShareDisposition as D;
use svcos_proto::stratum::v1 as pb;

#[tokio::test]
async fn shares_reach_the_pool_verified_with_stale_duplicate_and_garbage_handled() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("acct.rig1", 0)])).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    assert!(job.clean_jobs, "the first job a reader sees is clean");
    assert_eq!(job.pool_index, 0);
    assert_eq!(
        job.version_mask,
        svcos_stratum_agent::testpool::SERVER_VERSION_MASK & 0x1fff_e000
    );
    assert!(
        (job.share_difficulty - TEST_DIFFICULTY).abs() < 1e-12,
        "{}",
        job.share_difficulty
    );

    let share = mine(&job, 1, 0).await;
    assert_eq!(agent.submit(&share).await.unwrap(), D::Submitted);
    assert_eq!(agent.submit(&share).await.unwrap(), D::Duplicate);
    wait_until("pool accepted the share", || async {
        pool.pool.accepted("acct.rig1") == 1
    })
    .await;

    // Garbage: a nonce that does not meet the target is refused locally.
    let mut bad = mine(&job, 2, 0).await;
    bad.nonce = bad.nonce.wrapping_add(1);
    let d = agent.submit(&bad).await.unwrap();
    assert!(d == D::BelowTarget || d == D::Submitted, "{d:?}");
    // Malformed: version bits outside the mask.
    let mut malformed = share.clone();
    malformed.version ^= 1;
    assert_eq!(
        agent.submit(&malformed).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    // Wrong epoch: stale.
    let mut old = share.clone();
    old.pool_epoch += 100;
    assert_eq!(agent.submit(&old).await.unwrap(), D::Stale);

    // A new block: the clean job arrives and the old job's shares are stale.
    pool.pool.new_block();
    let next = job_where(&mut jobs, |j| j.clean_jobs && j.job_id != job.job_id).await;
    assert!(next.clean_jobs);
    assert_eq!(next.pool_epoch, job.pool_epoch, "same session, same epoch");
    let late = mine(&job, 3, 0).await;
    assert_eq!(agent.submit(&late).await.unwrap(), D::Stale);
    let fresh = mine(&next, 4, 0).await;
    assert_eq!(agent.submit(&fresh).await.unwrap(), D::Submitted);

    let p = agent
        .wait_pools("accepted counters", |p| p.accepted == 2)
        .await;
    assert_eq!(p.pools[0].accepted, 2);
    assert!(p.pools[0].version_rolling);
    assert!(p.best_share >= TEST_DIFFICULTY);
    assert!(p.stale >= 2);
    assert_eq!(pool.pool.accepted("acct.rig1"), 2);
    assert_eq!(
        pool.pool.rejected("acct.rig1"),
        0,
        "nothing invalid ever reached the pool"
    );
    agent.stop().await;
}

#[tokio::test]
async fn garbage_lines_and_slow_answers_do_not_stop_mining_and_rejects_are_counted() {
    let pool = Pool::start().await;
    pool.pool.set_behavior(pb_tp::Behavior {
        garbage: true,
        slow_ms: 150,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("w", 0)])).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    assert_eq!(
        agent.submit(&mine(&job, 1, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("accepted through garbage", || async {
        pool.pool.accepted("w") == 1
    })
    .await;

    pool.pool.set_behavior(pb_tp::Behavior {
        reject_all: true,
        ..Default::default()
    });
    assert_eq!(
        agent.submit(&mine(&job, 2, 0).await).await.unwrap(),
        D::Submitted
    );
    let p = agent.wait_pools("the reject", |p| p.rejected == 1).await;
    assert_eq!(
        p.pools[0]
            .reject_reasons
            .get("Rejected by test pool (reject_all)"),
        Some(&1)
    );
    agent.stop().await;
}

use svcos_proto::testpool::v1 as pb_tp;

#[tokio::test]
async fn client_reconnect_resumes_the_session_and_keeps_the_epoch() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("w", 0)])).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    agent
        .wait_pools("alive", |p| p.pools[0].state == pb::PoolState::Alive as i32)
        .await;
    assert_eq!(pool.pool.send_reconnect(String::new(), 0, 0), 1);
    wait_until("resumed", || async {
        pool.pool.stats().resumed_sessions == 1
    })
    .await;
    agent
        .wait_pools("alive again", |p| {
            p.pools[0].state == pb::PoolState::Alive as i32
        })
        .await;
    assert_eq!(pool.pool.stats().connections_total, 2);
    // Work from before the reconnect is still valid: same extranonce1, same epoch.
    assert_eq!(
        agent.submit(&mine(&job, 9, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("accepted after reconnect", || async {
        pool.pool.accepted("w") == 1
    })
    .await;
    let p = agent.pools().await;
    assert!(
        p.switches.iter().all(|s| s.from_index == -1),
        "no pool switch for a resumed session: {:?}",
        p.switches
    );
    agent.stop().await;
}

#[tokio::test]
async fn test_pool_rpc_reports_each_step() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("main", 0)])).await;
    let mut jobs = agent.jobs().await;
    next_job(&mut jobs).await;
    let req = |url: String| pb::TestPoolRequest {
        url,
        user: "probe".into(),
        password: "x".into(),
        timeout_ms: 5000,
    };
    let ok = agent
        .client
        .test_pool(req(pool.url()))
        .await
        .unwrap()
        .into_inner();
    assert!(ok.ok, "{ok:?}");
    let names: Vec<_> = ok.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["connect", "subscribe", "authorize", "job"]);

    pool.pool.set_behavior(pb_tp::Behavior {
        refuse_authorize: true,
        ..Default::default()
    });
    let refused = agent
        .client
        .test_pool(req(pool.url()))
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.ok);
    assert_eq!(refused.steps.last().unwrap().name, "authorize");
    assert!(refused.error.contains("authoriz"), "{}", refused.error);
    pool.pool.set_behavior(Default::default());

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = agent
        .client
        .test_pool(req(format!("stratum+tcp://127.0.0.1:{closed}")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (down.ok, down.steps.len(), down.steps[0].name.as_str()),
        (false, 1, "connect")
    );
    let bad = agent
        .client
        .test_pool(req("http://nope".into()))
        .await
        .unwrap()
        .into_inner();
    assert!(!bad.ok);

    // The running connection was not disturbed: the agent's one connection plus the two probes
    // that got through to the pool, and no failure on the pool's record.
    let p = agent
        .wait_pools("mining on main", |p| p.active_index == 0)
        .await;
    assert_eq!(p.pools[0].remote_failures, 0, "{p:#?}");
    assert_eq!(pool.pool.stats().connections_total, 3);
    agent.stop().await;
}

#[tokio::test]
async fn share_stream_answers_in_order_refuses_a_malformed_share_and_ends_at_shutdown() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("acct.rig1", 0)])).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    let first = mine(&job, 1, 0).await;
    let second = mine(&job, 2, 0).await;
    let mut malformed = first.clone();
    malformed.version ^= 1;
    let mut stale = first.clone();
    stale.pool_epoch += 100;

    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut answers = agent
        .client
        .submit_shares(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // All five go before any answer is read: the answers must come back in this order.
    for share in [&first, &malformed, &second, &first, &stale] {
        tx.send(share.clone()).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        let a = tokio::time::timeout(std::time::Duration::from_secs(10), answers.message())
            .await
            .expect("an answer")
            .unwrap()
            .expect("the stream stays open");
        got.push((D::try_from(a.disposition).unwrap(), a.refused));
    }
    assert_eq!(got[0], (D::Submitted, String::new()));
    assert_eq!(got[1].0, D::Unspecified);
    assert!(got[1].1.contains("version"), "{:?}", got[1].1);
    assert_eq!(got[2], (D::Submitted, String::new()));
    assert_eq!(got[3], (D::Duplicate, String::new()));
    assert_eq!(got[4], (D::Stale, String::new()));
    wait_until("pool accepted both", || async {
        pool.pool.accepted("acct.rig1") == 2
    })
    .await;

    // Shutting down ends the stream rather than leaving hw-agent attached to a stopping agent.
    agent.shutdown.trigger();
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), answers.message())
        .await
        .expect("the stream ends at shutdown");
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
    drop(tx);
    let _ = agent.task.await;
}
