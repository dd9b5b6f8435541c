//! Donation end to end (real time, the shortest cycle the config allows: 60 s at 5 % = 3 s of
//! donation in the cycle's second half). Slow by nature (~35 s); asserts order and the cap, not
//! durations.

mod common;

use common::*;
use pb::ShareDisposition as D;
use svcos_proto::stratum::v1 as pb;

#[tokio::test]
async fn donation_window_runs_once_per_cycle_and_never_exceeds_the_budget() {
    let (main, donation) = (Pool::start().await, Pool::start().await);
    let mut cfg = config(vec![main.pool_config("owner", 0)]);
    cfg.stratum.silent_timeout_s = 10;
    cfg.donation.enabled = true;
    cfg.donation.percent = 5.0;
    cfg.donation.cycle_s = 60;
    cfg.donation.pool_url = donation.url();
    cfg.donation.payout_address = "donor".into();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(dir.path(), &cfg).await;
    let d = agent
        .client
        .get_donation(pb::GetDonationRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(d.enabled && !d.active_now);
    assert_eq!((d.percent, d.cycle_s), (5.0, 60));

    let mut jobs = agent.jobs().await;
    let first = next_job(&mut jobs).await;
    assert!(!first.donation);
    let donating = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        job_where(&mut jobs, |j| j.donation),
    )
    .await
    .expect("donation window in the cycle's second half");
    assert_eq!(
        donating.pool_index,
        svcos_stratum_agent::agent::DONATION_INDEX
    );
    assert!(donating.clean_jobs && donating.pool_epoch > first.pool_epoch);
    assert_eq!(
        agent.submit(&mine(&donating, 1, 0).await).await.unwrap(),
        D::Submitted
    );
    wait_until("donation share accepted", || async {
        donation.pool.accepted("donor") == 1
    })
    .await;

    let back = job_where(&mut jobs, |j| !j.donation).await;
    assert_eq!(back.pool_index, 0);
    let d = agent
        .client
        .get_donation(pb::GetDonationRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!d.active_now, "{d:?}");
    assert!(
        d.mined_s_current_cycle > 0.0 && d.mined_s_current_cycle <= 3.0,
        "{d:?}"
    );
    assert_eq!(d.mined_s_total, d.mined_s_current_cycle);
    let p = agent
        .wait_pools("three switches", |p| p.switches.len() == 3)
        .await;
    let reasons: Vec<&str> = p.switches.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(
        reasons,
        ["start", "donation window", "donation window over"]
    );
    assert_eq!(
        main.pool.accepted("donor") + donation.pool.accepted("owner"),
        0,
        "no share crossed over"
    );
    agent.stop().await;
}
