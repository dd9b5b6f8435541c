//! Process level: `svcos test-pool` and `svcos stratum-agent` as real processes; stratum-agent is
//! SIGKILLed while mining and started again on the same state dir. Shares found in the gap are
//! submitted after the restart (each once) and the counters carry on. Needs the binary: set
//! `SVCOS_BIN=/path/to/svcos` (skipped otherwise, since this crate cannot build it).

mod common;

use std::process::{Child, Command};
use std::time::Duration;

use common::*;
use pb::ShareDisposition as D;
use svcos_common::config::Config;
use svcos_common::{Layout, ServiceName};
use svcos_proto::stratum::v1 as pb;
use svcos_proto::stratum::v1::stratum_service_client::StratumServiceClient;
use svcos_proto::testpool::v1 as tp;
use svcos_proto::testpool::v1::test_pool_service_client::TestPoolServiceClient;

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(bin: &str, service: &str, dir: &std::path::Path) -> Proc {
    Proc(
        Command::new(bin)
            .arg(service)
            .arg("--dir")
            .arg(dir)
            .spawn()
            .expect("spawn svcos"),
    )
}

async fn accepted(layout: &Layout, worker: &str) -> u64 {
    let mut c =
        TestPoolServiceClient::new(svcos_common::ipc::channel(layout, ServiceName::TestPool));
    match c.get_stats(tp::GetStatsRequest {}).await {
        Ok(r) => r
            .into_inner()
            .workers
            .iter()
            .find(|w| w.worker == worker)
            .map_or(0, |w| w.accepted),
        Err(_) => 0,
    }
}

async fn connect(layout: &Layout) -> StratumServiceClient<tonic::transport::Channel> {
    let mut c = StratumServiceClient::new(svcos_common::ipc::channel_with_timeout(
        layout.socket(ServiceName::StratumAgent),
        Duration::from_secs(10),
    ));
    wait_until("stratum-agent serving", || {
        let mut c = c.clone();
        async move { c.get_pools(pb::GetPoolsRequest {}).await.is_ok() }
    })
    .await;
    c.get_pools(pb::GetPoolsRequest {}).await.unwrap();
    c
}

#[tokio::test]
async fn sigkill_while_mining_loses_and_repeats_nothing() {
    let Ok(bin) = std::env::var("SVCOS_BIN") else {
        eprintln!("SVCOS_BIN not set; skipping the process-level test");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::sim(dir.path());
    let port = svcos_e2e::free_port();
    let mut cfg = Config::default();
    cfg.sim.pool_port = port;
    cfg.sim.pool_difficulty = TEST_DIFFICULTY;
    cfg.sim.pool_block_interval_s = 3600;
    cfg.pools = vec![svcos_common::config::PoolConfig {
        url: format!("stratum+tcp://127.0.0.1:{port}"),
        user: "rig".into(),
        ..Default::default()
    }];
    cfg.save(&layout.config_path).unwrap();

    let _pool = spawn(&bin, "test-pool", dir.path());
    let mut agent = spawn(&bin, "stratum-agent", dir.path());
    let mut c = connect(&layout).await;
    let mut jobs = c
        .stream_jobs(pb::StreamJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    let job = next_job(&mut jobs).await;
    let s1 = mine(&job, 1, 0).await;
    assert_eq!(
        D::try_from(
            c.submit_share(s1.clone())
                .await
                .unwrap()
                .into_inner()
                .disposition
        )
        .unwrap(),
        D::Submitted
    );
    wait_until("first share", || async {
        accepted(&layout, "rig").await == 1
    })
    .await;
    let state = layout
        .service_state_dir(ServiceName::StratumAgent)
        .join("state.json");
    wait_until("the answer persisted", || {
        let state = state.clone();
        async move {
            std::fs::read(&state)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|v| v["totals"]["accepted"] == 1)
        }
    })
    .await;

    // SIGKILL: no shutdown path, no final state write.
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    let gap = mine(&job, 2, 0).await;

    let _agent = spawn(&bin, "stratum-agent", dir.path());
    let mut c = connect(&layout).await;
    let d = D::try_from(
        c.submit_share(gap.clone())
            .await
            .unwrap()
            .into_inner()
            .disposition,
    )
    .unwrap();
    assert!(d == D::Queued || d == D::Submitted, "{d:?}");
    assert_eq!(
        D::try_from(c.submit_share(s1).await.unwrap().into_inner().disposition).unwrap(),
        D::Duplicate
    );
    wait_until("gap share", || async {
        accepted(&layout, "rig").await == 2
    })
    .await;
    wait_until("counters carried over the kill", || {
        let mut c = c.clone();
        async move {
            c.get_pools(pb::GetPoolsRequest {})
                .await
                .unwrap()
                .into_inner()
                .accepted
                == 2
        }
    })
    .await;
    let mut t =
        TestPoolServiceClient::new(svcos_common::ipc::channel(&layout, ServiceName::TestPool));
    let stats = t
        .get_stats(tp::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.workers[0].rejected, 0, "nothing went out twice");
}

async fn set_refuse(layout: &Layout, refuse: bool) {
    let mut t =
        TestPoolServiceClient::new(svcos_common::ipc::channel(layout, ServiceName::TestPool));
    t.set_behavior(tp::SetBehaviorRequest {
        behavior: Some(tp::Behavior {
            refuse_connections: refuse,
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    if refuse {
        t.disconnect_all(tp::DisconnectAllRequest {}).await.unwrap();
    }
}

fn queue_file(layout: &Layout) -> std::path::PathBuf {
    layout
        .service_state_dir(ServiceName::StratumAgent)
        .join(svcos_stratum_agent::sharequeue::QUEUE_FILE)
}

#[tokio::test]
async fn shares_queued_while_the_pool_is_away_survive_a_sigkill() {
    let Ok(bin) = std::env::var("SVCOS_BIN") else {
        eprintln!("SVCOS_BIN not set; skipping the process-level test");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::sim(dir.path());
    let port = svcos_e2e::free_port();
    let mut cfg = Config::default();
    cfg.sim.pool_port = port;
    cfg.sim.pool_difficulty = TEST_DIFFICULTY;
    cfg.sim.pool_block_interval_s = 3600;
    cfg.pools = vec![svcos_common::config::PoolConfig {
        url: format!("stratum+tcp://127.0.0.1:{port}"),
        user: "rig".into(),
        ..Default::default()
    }];
    cfg.save(&layout.config_path).unwrap();

    let _pool = spawn(&bin, "test-pool", dir.path());
    let mut agent = spawn(&bin, "stratum-agent", dir.path());
    let mut c = connect(&layout).await;
    let mut jobs = c
        .stream_jobs(pb::StreamJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    let job = next_job(&mut jobs).await;
    let s1 = mine(&job, 1, 0).await;
    let d = c.submit_share(s1).await.unwrap().into_inner().disposition;
    assert_eq!(D::try_from(d).unwrap(), D::Submitted);
    wait_until("first share", || async {
        accepted(&layout, "rig").await == 1
    })
    .await;

    // The pool goes away: its connections close and new ones are dropped at once.
    set_refuse(&layout, true).await;
    wait_until("the pool seen as down", || {
        let mut c = c.clone();
        async move {
            let p = c
                .get_pools(pb::GetPoolsRequest {})
                .await
                .unwrap()
                .into_inner();
            p.pools[0].state != pb::PoolState::Alive as i32
        }
    })
    .await;
    let queued = [mine(&job, 2, 0).await, mine(&job, 3, 0).await];
    for s in &queued {
        let d = c.submit_share(s.clone()).await.unwrap().into_inner();
        assert_eq!(D::try_from(d.disposition).unwrap(), D::Queued);
    }
    // `Queued` is only answered once the queue is on disk: no waiting needed here.
    let on_disk = svcos_stratum_agent::sharequeue::load(&queue_file(&layout), 1024);
    assert_eq!(on_disk.len(), 2, "{on_disk:?}");

    // SIGKILL: no shutdown path, no final write. hw-agent has forgotten both shares.
    agent.0.kill().unwrap();
    agent.0.wait().unwrap();
    let _agent = spawn(&bin, "stratum-agent", dir.path());
    let mut c = connect(&layout).await;
    // The restarted agent knows the queued shares were taken.
    let d = c
        .submit_share(queued[0].clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(D::try_from(d.disposition).unwrap(), D::Duplicate);
    assert_eq!(accepted(&layout, "rig").await, 1, "nothing went out yet");

    // The pool comes back; the resumed session delivers the saved queue.
    set_refuse(&layout, false).await;
    wait_until("the saved queue delivered", || async {
        accepted(&layout, "rig").await == 3
    })
    .await;
    wait_until("the agent counted them", || {
        let mut c = c.clone();
        async move {
            c.get_pools(pb::GetPoolsRequest {})
                .await
                .unwrap()
                .into_inner()
                .accepted
                == 3
        }
    })
    .await;
    wait_until("the queue file emptied", || async {
        svcos_stratum_agent::sharequeue::load(&queue_file(&layout), 1024).is_empty()
    })
    .await;
    let mut t =
        TestPoolServiceClient::new(svcos_common::ipc::channel(&layout, ServiceName::TestPool));
    let stats = t
        .get_stats(tp::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.workers[0].rejected, 0, "nothing went out twice");
    assert!(stats.resumed_sessions >= 1, "the session was resumed");
}
