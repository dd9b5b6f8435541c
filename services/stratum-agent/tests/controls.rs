//! Runtime pool controls: every change takes effect, is saved into the config file through the
//! config writer (so it survives a restart), and bad input is refused with the right code.

mod common;

use common::*;
use svcos_common::Layout;
use svcos_common::config::Config;
use svcos_proto::stratum::v1 as pb;

#[tokio::test]
async fn pool_controls_apply_and_persist() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &config(vec![a.pool_config("wa", 0), b.pool_config("wb", 1)]),
    )
    .await;
    let config_path = Layout::sim(dir.path()).config_path;
    let mut jobs = agent.jobs().await;
    assert_eq!(next_job(&mut jobs).await.pool_index, 0);

    // Manual switch: takes the backup at once, no hysteresis, and makes it first.
    agent
        .client
        .switch_pool(pb::SwitchPoolRequest { index: 1 })
        .await
        .unwrap();
    job_where(&mut jobs, |j| j.pool_index == 1).await;
    let saved = Config::load(&config_path).unwrap();
    assert!(saved.pools[1].priority < saved.pools[0].priority);
    let p = agent
        .wait_pools("manual switch recorded", |p| p.switches.len() == 2)
        .await;
    assert_eq!(p.switches[1].reason, "manual switch");

    // Add, with validation.
    let bad = agent
        .client
        .add_pool(pb::AddPoolRequest {
            url: "http://nope".into(),
            user: "w".into(),
            password: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("url"), "{}", bad.message());
    let added = agent
        .client
        .add_pool(pb::AddPoolRequest {
            url: "stratum+tcp://127.0.0.1:9".into(),
            user: "wc".into(),
            password: "secret".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(added.index, 2);
    let saved = Config::load(&config_path).unwrap();
    assert_eq!(saved.pools.len(), 3);
    assert_eq!(saved.pools[2].password, "secret");

    // Priority order must be a permutation.
    let bad = agent
        .client
        .set_pool_priority(pb::SetPoolPriorityRequest {
            order: vec![0, 0, 1],
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    agent
        .client
        .set_pool_priority(pb::SetPoolPriorityRequest {
            order: vec![2, 0, 1],
        })
        .await
        .unwrap();
    let saved = Config::load(&config_path).unwrap();
    assert_eq!(
        [
            saved.pools[2].priority,
            saved.pools[0].priority,
            saved.pools[1].priority
        ],
        [0, 1, 2]
    );

    // Disable the unreachable one: reported as disabled and saved.
    agent
        .client
        .set_pool_enabled(pb::SetPoolEnabledRequest {
            index: 2,
            enabled: false,
        })
        .await
        .unwrap();
    let p = agent
        .wait_pools("disabled", |p| {
            p.pools[2].state == pb::PoolState::Disabled as i32
        })
        .await;
    assert!(!p.pools[2].enabled);
    assert!(!Config::load(&config_path).unwrap().pools[2].enabled);

    // Remove it; unknown indexes are NOT_FOUND.
    agent
        .client
        .remove_pool(pb::RemovePoolRequest { index: 2 })
        .await
        .unwrap();
    assert_eq!(Config::load(&config_path).unwrap().pools.len(), 2);
    let missing = agent
        .client
        .remove_pool(pb::RemovePoolRequest { index: 7 })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // With pool 0 first again (order [0, 1]), the agent fails back to it.
    agent
        .client
        .set_pool_priority(pb::SetPoolPriorityRequest { order: vec![0, 1] })
        .await
        .unwrap();
    job_where(&mut jobs, |j| j.pool_index == 0).await;
    agent.stop().await;

    // A restart reads the saved list.
    let config = Config::load(&config_path).unwrap();
    let mut agent = Agent::start(dir.path(), &config).await;
    assert_eq!(agent.pools().await.pools.len(), 2);
    agent.stop().await;
}

#[tokio::test]
async fn the_last_pool_cannot_be_removed() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("wa", 0)])).await;
    let config_path = Layout::sim(dir.path()).config_path;
    let before = std::fs::read(&config_path).unwrap();
    let refused = agent
        .client
        .remove_pool(pb::RemovePoolRequest { index: 0 })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("last pool"),
        "{}",
        refused.message()
    );
    assert_eq!(
        std::fs::read(&config_path).unwrap(),
        before,
        "nothing changed"
    );
    assert_eq!(agent.pools().await.pools.len(), 1);
    agent.stop().await;
}

#[tokio::test]
async fn donation_is_off_by_default_and_sv2_reports_its_gate() {
    let pool = Pool::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![pool.pool_config("w", 0)])).await;
    let d = agent
        .client
        .get_donation(pb::GetDonationRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!d.enabled);
    assert_eq!(
        (d.percent, d.cycle_s, d.active_now, d.mined_s_total),
        (0.0, 3600, false, 0.0)
    );
    let s = agent
        .client
        .get_sv2_status(pb::GetSv2StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!s.enabled);
    assert_eq!(s.state, "disabled");
    let mut jobs = agent.jobs().await;
    let j = next_job(&mut jobs).await;
    assert!(!j.donation);
    agent.stop().await;
}

#[tokio::test]
async fn reload_config_applies_pools_and_keeps_them_over_a_broken_file() {
    let (a, b) = (Pool::start().await, Pool::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &config(vec![a.pool_config("wa", 0)])).await;
    let config_path = Layout::sim(dir.path()).config_path;
    let mut jobs = agent.jobs().await;
    assert_eq!(next_job(&mut jobs).await.pool_index, 0);

    // An operator puts b first and disables a, then asks for a reload.
    let mut cfg = Config::load(&config_path).unwrap();
    cfg.pools[0].enabled = false;
    cfg.pools.push(b.pool_config("wb", 0));
    cfg.save(&config_path).unwrap();
    agent
        .client
        .reload_config(pb::ReloadConfigRequest {})
        .await
        .unwrap();
    let on_b = job_where(&mut jobs, |j| j.pool_index == 1).await;
    assert!(on_b.clean_jobs);
    agent
        .wait_pools("a disabled, b active", |p| {
            p.pools.len() == 2
                && p.pools[0].state == pb::PoolState::Disabled as i32
                && p.pools[1].active
        })
        .await;

    // A file whose only pool is broken is not a refusal and not an empty list: the pools in
    // force stay (svcos_common::config's fallback rule).
    std::fs::write(
        &config_path,
        "[[pools]]\nurl = 'http://broken'\nuser = 'x'\n",
    )
    .unwrap();
    agent
        .client
        .reload_config(pb::ReloadConfigRequest {})
        .await
        .unwrap();
    // Still mining on b.
    let pools = agent.pools().await.pools;
    assert_eq!(pools.len(), 2);
    assert!(pools[1].active);
    agent.stop().await;
}
