//! Failover and failback timelines against each test-pool misbehaviour. Thresholds are short
//! (silence 1 s, hysteresis 1 s); the tests assert the order of events, never durations.

mod common;

use common::*;
use pb::ShareDisposition as D;
use svcos_common::config::PoolConfig;
use svcos_proto::stratum::v1 as pb;
use svcos_proto::testpool::v1::Behavior;

fn switches(p: &pb::GetPoolsResponse) -> Vec<(i32, i32)> {
    p.switches
        .iter()
        .map(|s| (s.from_index, s.to_index))
        .collect()
}

#[tokio::test]
async fn unreachable_primary_fails_over_then_fails_back_after_hysteresis() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    a.pool.set_behavior(Behavior {
        refuse_connections: true,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]),
    )
    .await;
    let mut jobs = agent.jobs().await;
    let on_b = next_job(&mut jobs).await;
    assert_eq!(
        on_b.pool_index, 1,
        "mining on the backup while the primary refuses"
    );
    let share_b = mine(&on_b, 1, 0).await;

    a.pool.set_behavior(Behavior::default());
    let on_a = job_where(&mut jobs, |j| j.pool_index == 0).await;
    assert!(on_a.clean_jobs);
    assert_ne!(
        on_a.pool_epoch, on_b.pool_epoch,
        "a switch starts a new epoch"
    );
    // Work of the old pool is stale now, and never reaches either pool.
    assert_eq!(agent.submit(&share_b).await.unwrap(), D::Stale);
    assert_eq!(
        agent.submit(&mine(&on_a, 2, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("share on the primary", || async {
        a.pool.accepted("wa") == 1
    })
    .await;
    assert_eq!(b.pool.accepted("wb"), 0);

    let p = agent
        .wait_pools("two switches", |p| p.switches.len() == 2)
        .await;
    assert_eq!(switches(&p), [(-1, 1), (1, 0)]);
    assert!(
        p.switches[1].reason.starts_with("failback"),
        "{:?}",
        p.switches[1]
    );
    assert!(p.pools[0].get_failures + p.pools[0].remote_failures >= 1);
    agent.stop().await;
}

#[tokio::test]
async fn connected_but_silent_primary_fails_over_and_back() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]),
    )
    .await;
    let mut jobs = agent.jobs().await;
    assert_eq!(next_job(&mut jobs).await.pool_index, 0);

    // Still connected and answering, but no more notify.
    a.pool.set_behavior(Behavior {
        silent: true,
        ..Default::default()
    });
    let on_b = job_where(&mut jobs, |j| j.pool_index == 1).await;
    assert!(on_b.clean_jobs);
    let p = agent
        .wait_pools("two switches", |p| p.switches.len() == 2)
        .await;
    assert_eq!(switches(&p), [(-1, 0), (0, 1)]);
    assert!(
        p.switches[1].reason.contains("no job"),
        "{:?}",
        p.switches[1]
    );
    assert!(
        a.pool.stats().connections_open >= 1 || p.pools[0].state == pb::PoolState::Silent as i32
    );

    a.pool.set_behavior(Behavior::default());
    job_where(&mut jobs, |j| j.pool_index == 0).await;
    let p = agent
        .wait_pools("three switches", |p| p.switches.len() == 3)
        .await;
    assert_eq!(switches(&p), [(-1, 0), (0, 1), (1, 0)]);
    assert!(p.switches[2].reason.starts_with("failback"));
    agent.stop().await;
}

#[tokio::test]
async fn refused_authorisation_fails_over_and_is_reported() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    a.pool.set_behavior(Behavior {
        refuse_authorize: true,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]),
    )
    .await;
    let mut jobs = agent.jobs().await;
    assert_eq!(next_job(&mut jobs).await.pool_index, 1);
    let p = agent
        .wait_pools("primary marked, backup active", |p| {
            p.pools[0].state == pb::PoolState::AuthFailed as i32 && p.pools[1].active
        })
        .await;
    assert!(
        p.pools[0].last_error.contains("authorize"),
        "{}",
        p.pools[0].last_error
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_password_in_the_pool_url_is_sent_unless_one_was_typed_and_never_shown() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    for p in [&a, &b] {
        p.pool.set_behavior(Behavior {
            required_password: "s3cret".into(),
            ..Default::default()
        });
    }
    // A URL as some pools print it: the password rides in the userinfo.
    let in_url = |p: &Pool| format!("stratum+tcp://rig:s3cret@127.0.0.1:{}", p.port);
    let typed = PoolConfig {
        url: in_url(&a),
        password: "typed".into(),
        ..a.pool_config("wa", 0)
    };
    let left_default = PoolConfig {
        url: in_url(&b),
        ..b.pool_config("wb", 1)
    };
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![typed, left_default])).await;
    let mut jobs = agent.jobs().await;
    // The typed password wins over the URL's, so the first pool refuses it; the second pool
    // gets the URL's password, dialled at the host after the '@'.
    assert_eq!(next_job(&mut jobs).await.pool_index, 1);
    let p = agent
        .wait_pools("primary refused, backup active", |p| {
            p.pools[0].state == pb::PoolState::AuthFailed as i32 && p.pools[1].active
        })
        .await;
    for pool in &p.pools {
        assert!(pool.url.contains("rig:********@127.0.0.1:"), "{}", pool.url);
        assert!(!pool.last_error.contains("s3cret"), "{}", pool.last_error);
    }
    agent.stop().await;
}

#[tokio::test]
async fn primary_dying_mid_mining_fails_over_and_its_work_is_never_mined_on() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]),
    )
    .await;
    let mut jobs = agent.jobs().await;
    let on_a = next_job(&mut jobs).await;
    assert_eq!(on_a.pool_index, 0);

    // The pool process goes away: connections closed, port refused.
    a.shutdown.trigger();
    let _ = a.task.await;
    let on_b = job_where(&mut jobs, |j| j.pool_index == 1).await;
    assert_ne!(on_b.pool_epoch, on_a.pool_epoch);
    assert_eq!(
        agent.submit(&mine(&on_a, 1, 0).await).await.unwrap(),
        D::Stale
    );
    assert_eq!(
        agent.submit(&mine(&on_b, 1, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("share on the backup", || async {
        b.pool.accepted("wb") == 1
    })
    .await;
    let p = agent
        .wait_pools("two switches", |p| p.switches.len() == 2)
        .await;
    assert_eq!(switches(&p), [(-1, 0), (0, 1)]);
    assert!(
        p.switches[1].reason.starts_with("failover"),
        "{:?}",
        p.switches[1]
    );
    assert_eq!(p.pools[0].state, pb::PoolState::Dead as i32);
    agent.stop().await;
}

#[tokio::test]
async fn shares_found_while_disconnected_are_queued_and_sent_once_on_resume() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("w", 0)])).await;
    let mut jobs = agent.jobs().await;
    let job = next_job(&mut jobs).await;
    agent
        .wait_pools("alive", |p| p.pools[0].state == pb::PoolState::Alive as i32)
        .await;

    // Drop the connection and keep the door shut for a while.
    pool.pool.set_behavior(Behavior {
        refuse_connections: true,
        ..Default::default()
    });
    pool.pool.disconnect_all();
    agent
        .wait_pools("dead", |p| p.pools[0].state != pb::PoolState::Alive as i32)
        .await;
    let share = mine(&job, 5, 0).await;
    assert_eq!(agent.submit(&share).await.unwrap(), D::Queued);
    assert_eq!(
        agent.submit(&share).await.unwrap(),
        D::Duplicate,
        "a retry while queued is not queued twice"
    );

    pool.pool.set_behavior(Behavior::default());
    wait_until("queued share delivered", || async {
        pool.pool.accepted("w") == 1
    })
    .await;
    assert_eq!(pool.pool.stats().resumed_sessions, 1);
    assert_eq!(agent.submit(&share).await.unwrap(), D::Duplicate);
    agent.wait_pools("counted", |p| p.accepted == 1).await;
    assert_eq!(pool.pool.rejected("w"), 0);
    agent.stop().await;
}

#[tokio::test]
async fn quota_mode_splits_time_between_pools() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    let mut pa = a.pool_config("wa", 0);
    let mut pb_ = b.pool_config("wb", 1);
    pa.quota = 50;
    pb_.quota = 50;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pa, pb_])).await;
    let mut jobs = agent.jobs().await;
    assert_eq!(next_job(&mut jobs).await.pool_index, 0);
    // Each pool takes its turn, one switch per window, each a new epoch.
    let on_b = job_where(&mut jobs, |j| j.pool_index == 1).await;
    let back = job_where(&mut jobs, |j| j.pool_index == 0).await;
    assert!(back.pool_epoch > on_b.pool_epoch);
    let p = agent
        .wait_pools("three switches", |p| p.switches.len() >= 3)
        .await;
    assert_eq!(switches(&p)[..3], [(-1, 0), (0, 1), (1, 0)]);
    assert!(
        p.switches[1..3].iter().all(|s| s.reason == "quota split"),
        "{:?}",
        p.switches
    );
    agent.stop().await;
}
