//! Stratum V2 job declaration end to end over real TCP and Noise: the production
//! stratum-agent entry with `[stratum.jd]` on, against the test pool's job-declaration server,
//! template provider and SV2 mining upstream (one port; SetupConnection picks the role). The
//! agent takes the template, declares it (the server asks for a transaction it lacks), puts it
//! on the mining channel with SetCustomMiningJob, and a share mined on it is verified by the
//! pool against the declared coinbase and merkle path and counted as a declared-job share.

mod common;

use std::time::Duration;

use common::*;
use svcos_common::config::{JdConfig, PoolConfig};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::testpool::v1::Behavior;
use svcos_stratum_agent::testpool::sv2::Authority;

/// The declared jobs' ids start here on the test pool (its own jobs count up from 1).
const CUSTOM_JOB_IDS: u32 = 0x4000_0000;

fn jd_config(pool: &Sv2Pool, user: &str) -> svcos_common::config::Config {
    let mut c = config(vec![PoolConfig {
        url: pool.url(),
        user: user.into(),
        ..Default::default()
    }]);
    c.stratum.sv2_enabled = true;
    c.stratum.jd = JdConfig {
        enabled: true,
        server: pool.url(),
        template_provider: pool.url(),
    };
    c
}

async fn wait_jd(
    agent: &mut Agent,
    what: &str,
    pred: impl Fn(&pb::GetJdStatusResponse) -> bool,
) -> pb::GetJdStatusResponse {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = agent
            .client
            .get_jd_status(pb::GetJdStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn declared_job_id(s: &pb::GetJdStatusResponse) -> u32 {
    s.last_declared_job.as_ref().map_or(0, |j| j.pool_job_id)
}

#[tokio::test]
async fn declares_mines_and_gets_shares_accepted_on_the_declared_template_then_falls_back() {
    let pool = Sv2Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &jd_config(&pool, "jdworker")).await;
    let mut jobs = agent.jobs().await;

    let s = wait_jd(&mut agent, "a declared job being mined", |s| {
        s.template_source == "jd" && declared_job_id(s) != 0
    })
    .await;
    assert!(s.sv2_enabled && s.enabled && s.connected, "{s:#?}");
    assert_eq!(s.fallback_reason, "");
    assert!(s.jobs_declared >= 1);
    let declared = s.last_declared_job.clone().unwrap();
    assert!(declared.pool_job_id > CUSTOM_JOB_IDS, "{declared:?}");
    assert_eq!(declared.tx_count, 3);
    // The template's whole reward (subsidy + 3 × 1 000 sat fees) goes to the pool's output.
    assert_eq!(declared.coinbase_value_sat, 312_500_000 + 3_000);
    let height = pool.v1.pool.stats().blocks;
    assert_eq!(declared.template_id, height);

    // hw-agent's job is the declared one: its id, the template's merkle path (3 transactions
    // besides the coinbase: two levels), the template's previous hash.
    let job = job_where(&mut jobs, |j| j.job_id == declared.pool_job_id.to_string()).await;
    assert_eq!(job.merkle_branch.len(), 2);
    let mut prev = job.prev_hash.clone();
    prev.reverse();
    assert_eq!(hex::encode(prev), declared.prev_hash);

    // A share mined on it: the pool rebuilds the coinbase from SetCustomMiningJob, checks it
    // against the declaration and verifies the hash.
    let share = mine(&job, 1, 0).await;
    assert_eq!(
        agent.submit(&share).await.unwrap(),
        pb::ShareDisposition::Submitted
    );
    let s = wait_jd(&mut agent, "the declared-job share answer", |s| {
        s.shares_accepted == 1
    })
    .await;
    assert_eq!(s.shares_rejected, 0);
    let stats = pool.v1.pool.jd_stats();
    assert_eq!((stats.accepted, stats.rejected), (1, 0), "{stats:?}");
    assert!(
        stats.jobs_declared >= 1 && stats.custom_jobs_set >= 1,
        "{stats:?}"
    );
    // The server's mempool lacks the newest transaction: it was asked for and provided.
    assert!(stats.missing_transactions_requested >= 1, "{stats:?}");
    assert!(
        stats.templates_sent >= 1 && stats.tokens_allocated >= 1,
        "{stats:?}"
    );
    assert_eq!(pool.v1.pool.sv2_counts(), (1, 0));

    // A new block: the template provider sends its template and the client declares again.
    let height = pool.v1.pool.new_block();
    let s = wait_jd(&mut agent, "a job declared on the new block", |s| {
        s.template_source == "jd"
            && s.last_declared_job
                .as_ref()
                .is_some_and(|j| j.template_id == height && j.pool_job_id != 0)
    })
    .await;
    assert!(declared_job_id(&s) > declared.pool_job_id);

    // The server refuses declarations: the agent mines the pool's own templates and says why.
    pool.v1.pool.set_behavior(Behavior {
        refuse_job_declarations: true,
        ..Default::default()
    });
    pool.v1.pool.new_block();
    let s = wait_jd(&mut agent, "fallback to pool templates", |s| {
        s.template_source == "pool" && s.fallback_reason.contains("refused-by-test-pool")
    })
    .await;
    assert!(s.failures >= 1, "{s:#?}");
    assert!(pool.v1.pool.jd_stats().declarations_refused >= 1);
    // A fresh stream starts with the current job: the pool's own, on the new block.
    let job = next_job(&mut agent.jobs().await).await;
    assert!(
        job.job_id
            .parse::<u32>()
            .is_ok_and(|id| id < CUSTOM_JOB_IDS),
        "{job:?}"
    );
    let share = mine(&job, 2, 0).await;
    assert_eq!(
        agent.submit(&share).await.unwrap(),
        pb::ShareDisposition::Submitted
    );
    wait_until("the pool-template share accepted", || {
        let counts = pool.v1.pool.sv2_counts();
        async move { counts == (2, 0) }
    })
    .await;
    // Counted as a pool-template share, not a declared one.
    assert_eq!(pool.v1.pool.jd_stats().accepted, 1);
    agent.stop().await;
}

#[tokio::test]
async fn connection_test_reports_both_roles_and_declares_nothing() {
    let pool = Sv2Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = jd_config(&pool, "w");
    c.stratum.jd.enabled = false;
    let mut agent = Agent::start(dir.path(), &c).await;
    let r = agent
        .client
        .test_jd_connection(pb::TestJdConnectionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(r.ok, "{r:#?}");
    let server = r.server.unwrap();
    assert!(server.detail.contains("token allocated"), "{server:?}");
    assert!(r.template_provider.unwrap().detail.contains("template"));
    let stats = pool.v1.pool.jd_stats();
    assert_eq!((stats.tokens_allocated, stats.jobs_declared), (1, 0));

    // A wrong authority key fails that role's handshake and says so.
    let impostor = Authority::generate().public_b58();
    let r = agent
        .client
        .test_jd_connection(pb::TestJdConnectionRequest {
            server: format!("stratum2+tcp://127.0.0.1:{}/{impostor}", pool.port),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.ok);
    assert!(!r.server.as_ref().unwrap().ok);
    assert!(r.server.unwrap().detail.contains(&impostor));
    assert!(r.template_provider.unwrap().ok);

    // Job declaration off: the status says so and nothing is mined on declared jobs.
    let s = agent
        .client
        .get_jd_status(pb::GetJdStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!s.enabled && !s.connected);
    assert_eq!(s.jobs_declared, 0);
    agent.stop().await;
}
